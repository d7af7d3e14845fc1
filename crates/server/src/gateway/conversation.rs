//! DeerFlow's conversation operations (reference §9.2), over
//! [`fawn_runtime::conversation`]:
//!
//! * `POST /api/threads/{id}/runs/regenerate/prepare` `{message_id}` →
//!   `{input, checkpoint: {checkpoint_ns, checkpoint_id, checkpoint_map}, metadata,
//!   target_run_id}`; the UI streams a run with that `input`, `checkpoint` and `metadata`
//!   through the ordinary `runs/stream` route, forked from the checkpoint before the turn.
//! * `POST /api/threads/{id}/runs/edit-regenerate/prepare` `{human_message_id,
//!   replacement_text}` → the same plus `replacement_human_message_id`, `source_message_ids`.
//! * `POST /api/threads/{id}/branches` `{message_id, message_ids?, title?}` → `{thread_id,
//!   parent_thread_id, parent_checkpoint_id, branched_from_message_id, workspace_clone_mode,
//!   history_seed_mode}`: a new thread of the caller ending with that turn.
//!
//! 404: no such thread (or another user's), or a message id not in the thread. 409: what
//! DeerFlow refuses (not the latest answer or turn, a human message given to regenerate, a
//! blank or unchanged edit, an active goal, no checkpoint to fork from, a turn that cannot
//! be branched). 422: a malformed body (an empty id or text, a title over 256 characters).

use super::thread_param;
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path};
use crate::routes::threads::load_thread;
use crate::wire::ok;
use axum::extract::State;
use axum::response::Response;
use fawn_runtime::conversation::{self, BranchRequest, Replay};
use serde::Deserialize;
use serde_json::{Value, json};

/// Longest branch title.
const MAX_TITLE: usize = 256;

fn required(field: &str, v: &str) -> ApiResult<()> {
    if v.is_empty() {
        return Err(ApiError::unprocessable(format!(
            "Invalid request body at `{field}`: at least 1 character"
        )));
    }
    Ok(())
}

fn replay_json(r: Replay) -> Value {
    let mut v = json!({
        "input": r.input,
        "checkpoint": {
            "checkpoint_ns": r.checkpoint_ns,
            "checkpoint_id": r.checkpoint_id,
            "checkpoint_map": null,
        },
        "metadata": r.metadata,
        "target_run_id": r.target_run_id,
    });
    if let Some(id) = r.replacement_human_message_id {
        v["replacement_human_message_id"] = json!(id);
        v["source_message_ids"] = json!(r.source_message_ids);
    }
    v
}

#[derive(Debug, Deserialize)]
pub struct RegenerateBody {
    message_id: String,
}

/// `POST /api/threads/{id}/runs/regenerate/prepare`.
pub async fn regenerate(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
    JsonBody(body): JsonBody<RegenerateBody>,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    required("message_id", &body.message_id)?;
    load_thread(&app, &thread_id).await?;
    let r = conversation::prepare_regenerate(&app, &thread_id, &body.message_id).await?;
    Ok(ok(&replay_json(r)))
}

#[derive(Debug, Deserialize)]
pub struct EditBody {
    human_message_id: String,
    replacement_text: String,
}

/// `POST /api/threads/{id}/runs/edit-regenerate/prepare`.
pub async fn edit(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
    JsonBody(body): JsonBody<EditBody>,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    required("human_message_id", &body.human_message_id)?;
    required("replacement_text", &body.replacement_text)?;
    load_thread(&app, &thread_id).await?;
    let r = conversation::prepare_edit(
        &app,
        &thread_id,
        &body.human_message_id,
        &body.replacement_text,
    )
    .await?;
    Ok(ok(&replay_json(r)))
}

#[derive(Debug, Deserialize)]
pub struct BranchBody {
    message_id: String,
    #[serde(default)]
    message_ids: Vec<String>,
    #[serde(default)]
    title: Option<String>,
}

/// `POST /api/threads/{id}/branches`.
pub async fn branch(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
    JsonBody(body): JsonBody<BranchBody>,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    required("message_id", &body.message_id)?;
    if body
        .title
        .as_ref()
        .is_some_and(|t| t.chars().count() > MAX_TITLE)
    {
        return Err(ApiError::unprocessable(format!(
            "Invalid request body at `title`: at most {MAX_TITLE} characters"
        )));
    }
    let source = load_thread(&app, &thread_id).await?;
    let b = conversation::branch(
        &app,
        &source,
        BranchRequest {
            message_id: body.message_id.clone(),
            message_ids: body.message_ids,
            title: body.title,
        },
    )
    .await?;
    Ok(ok(&json!({
        "thread_id": b.thread.thread_id,
        "parent_thread_id": thread_id,
        "parent_checkpoint_id": b.parent_checkpoint_id,
        "branched_from_message_id": body.message_id,
        "workspace_clone_mode": b.workspace_clone_mode,
        "history_seed_mode": b.history_seed_mode,
    })))
}
