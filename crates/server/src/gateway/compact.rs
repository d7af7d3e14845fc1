//! `POST /api/threads/{id}/compact` (reference §6.2): DeerFlow's manual context
//! compaction, carried out by [`fawn_runtime::compact`]. Body `{force = true, keep?:
//! {type: messages|tokens|fraction, value}, agent_name?, model_name?}`; answer `{thread_id,
//! compacted, reason, removed_message_count, preserved_message_count, summary_updated,
//! checkpoint_id, total_tokens}` — `compacted: false` with `reason: "not_enough_messages"`
//! when there is nothing to summarise.
//!
//! 404: no such thread (or another user's). 409: a run is pending or in flight (or started
//! while the summary was written), or `summarization.enabled` is off. 422: a malformed body.
//! 503: the summarization model failed (nothing is written).

use super::thread_param;
use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path};
use crate::routes::threads::load_thread;
use crate::wire::ok;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fawn_config::{ContextSize, ContextSizeKind};
use fawn_runtime::compact::{CompactError, CompactRequest};
use serde::Deserialize;
use serde_json::json;

/// Longest `agent_name` / `model_name`.
const MAX_NAME: usize = 128;

#[derive(Debug, Deserialize)]
#[serde(default)]
pub struct CompactBody {
    force: bool,
    keep: Option<ContextSize>,
    agent_name: Option<String>,
    model_name: Option<String>,
}

impl Default for CompactBody {
    fn default() -> Self {
        CompactBody {
            force: true,
            keep: None,
            agent_name: None,
            model_name: None,
        }
    }
}

fn check_name(field: &str, v: &Option<String>) -> ApiResult<()> {
    if v.as_ref().is_some_and(|s| s.chars().count() > MAX_NAME) {
        return Err(ApiError::unprocessable(format!(
            "Invalid request body at `{field}`: at most {MAX_NAME} characters"
        )));
    }
    Ok(())
}

fn check_keep(keep: &ContextSize) -> ApiResult<()> {
    let v = keep.value;
    let ok = v.is_finite()
        && v > 0.0
        && match keep.kind {
            ContextSizeKind::Fraction => v <= 1.0,
            ContextSizeKind::Messages | ContextSizeKind::Tokens => v.fract() == 0.0,
        };
    if !ok {
        return Err(ApiError::unprocessable(
            "Invalid request body at `keep.value`: a positive whole number of messages or tokens, or a fraction in (0, 1]",
        ));
    }
    Ok(())
}

/// `POST /api/threads/{id}/compact`.
pub async fn compact(
    State(app): State<AppState>,
    principal: Principal,
    Path(thread_id): Path<String>,
    JsonBody(body): JsonBody<CompactBody>,
) -> ApiResult<Response> {
    let id = thread_param(&thread_id)?;
    check_name("agent_name", &body.agent_name)?;
    check_name("model_name", &body.model_name)?;
    if let Some(k) = &body.keep {
        check_keep(k)?;
    }
    let thread = load_thread(&app, &id).await?;
    let request = CompactRequest {
        force: body.force,
        keep: body.keep,
        agent_name: body.agent_name,
        model_name: body.model_name,
        user_id: principal.data_user(&app),
    };
    let r = match fawn_runtime::compact::compact_thread(&app, &thread, request).await {
        Ok(r) => r,
        Err(CompactError::Runtime(e)) => return Err(e.into()),
        Err(CompactError::Model(e)) => {
            tracing::warn!(thread_id = %id, error = %e, "manual compaction failed");
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Failed to compact thread context: the summarization model failed.",
            ));
        }
    };
    Ok(ok(&json!({
        "thread_id": id,
        "compacted": r.compacted,
        "reason": r.reason,
        "removed_message_count": r.removed_message_count,
        "preserved_message_count": r.preserved_message_count,
        "summary_updated": r.summary_updated,
        "checkpoint_id": r.checkpoint_id,
        "total_tokens": r.total_tokens,
    })))
}
