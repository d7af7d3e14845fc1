//! `GET /threads/{thread_id}/storage`: the bytes a thread's checkpoints occupy, in the
//! official server's shape:
//!
//! ```json
//! {"thread_id": "…", "total_bytes": 3698,
//!  "checkpoints": {"count": 3, "bytes": 2551},
//!  "channel_values": {"count": 6, "bytes": 754,
//!                     "by_channel": {"messages": {"versions": 2, "bytes": 721}, …}},
//!  "pending_writes": {"count": 3, "bytes": 393}}
//! ```
//!
//! Fawn stores each checkpoint as its step's writes plus an occasional snapshot, so
//! `channel_values` counts the channel values those hold (`versions` per channel) and their
//! serialized size; `checkpoints` the rows without that data (ids, metadata, `next`,
//! tasks); `pending_writes` the writes kept for steps that did not complete.

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Path, uuid_param};
use crate::routes::threads::load_thread;
use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};

pub async fn get(State(app): State<AppState>, Path(tid): Path<String>) -> ApiResult<Json<Value>> {
    let tid = uuid_param("thread", &tid)?;
    load_thread(&app, &tid).await?;
    let s = app
        .store()
        .thread_storage(&tid)
        .await
        .map_err(|e| ApiError::store("measuring the thread's storage", e))?;
    let by_channel: Map<String, Value> = s
        .by_channel
        .iter()
        .map(|(k, u)| (k.clone(), json!({"versions": u.count, "bytes": u.bytes})))
        .collect();
    Ok(Json(json!({
        "thread_id": tid,
        "total_bytes": s.checkpoints.bytes + s.channel_values.bytes + s.pending_writes.bytes,
        "checkpoints": {"count": s.checkpoints.count, "bytes": s.checkpoints.bytes},
        "channel_values": {
            "count": s.channel_values.count,
            "bytes": s.channel_values.bytes,
            "by_channel": by_channel,
        },
        "pending_writes": {"count": s.pending_writes.count, "bytes": s.pending_writes.bytes},
    })))
}
