//! `GET /api/threads/{id}/runs/{rid}/workspace-changes?include_files=true&include_diff=true`:
//! the files a run created, modified or deleted in its thread's workspace and outputs
//! (DeerFlow's workspace change review), read from the run's `workspace_changes` journal row
//! (written when the run ends, see `fawn_agent::workspace_changes`).
//!
//! Answers `{available, version, summary {created, modified, deleted, symlink_created,
//! additions, deletions, truncated}, files [...], limits}`. A run without a recorded change
//! (it changed nothing, is still running, or predates the recorder) is `available: false`
//! with an empty summary and `limits: {}`. `include_files=false` empties `files`;
//! `include_diff=false` keeps them with `diff: ""`. The thread must be the caller's and a
//! UUID run that thread's (404 otherwise); a journal-only run id (a branch's seeded turn
//! `branch-seed-{thread_id}-{n}`, see [`super::history`]) has no recorded change.

use super::history::thread_run;
use super::thread_param;
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Path, Query};
use crate::wire::ok;
use axum::extract::State;
use axum::response::Response;
use fawn_agent::workspace_changes::{CATEGORY, EVENT_TYPE, METADATA_KEY, empty_summary};
use fawn_checkpoint::{EventQuery, RunEvent};
use serde_json::{Value, json};

/// The recorded result of a row: under its metadata key, else its content when an object.
fn payload(e: &RunEvent) -> Option<&serde_json::Map<String, Value>> {
    match e.metadata.get(METADATA_KEY) {
        Some(v) => v.as_object(),
        None => e.content.as_object(),
    }
}

/// `GET /api/threads/{id}/runs/{rid}/workspace-changes`.
pub async fn get(
    State(app): State<AppState>,
    Path((thread_id, run_id)): Path<(String, String)>,
    q: Query,
) -> ApiResult<Response> {
    let include_files = q.bool("include_files")?.unwrap_or(true);
    let include_diff = q.bool("include_diff")?.unwrap_or(true);
    let thread_id = thread_param(&thread_id)?;
    let run_id = thread_run(&app, &thread_id, &run_id).await?;
    let rows = app
        .store()
        .run_events(
            &thread_id,
            &run_id,
            &EventQuery {
                after_seq: Some(0),
                limit: 10,
                category: Some(CATEGORY.to_string()),
                event_types: vec![EVENT_TYPE.to_string()],
                ..Default::default()
            },
        )
        .await
        .map_err(|e| ApiError::store("reading the run's journal", e))?;
    let Some(recorded) = rows.last().and_then(payload) else {
        return Ok(ok(&json!({
            "available": false,
            "version": 1,
            "summary": empty_summary(),
            "files": [],
            "limits": {},
        })));
    };
    let mut out = recorded.clone();
    out.insert("available".into(), Value::Bool(true));
    out.entry("summary").or_insert_with(empty_summary);
    let files = match out.remove("files") {
        Some(Value::Array(files)) if include_files => files,
        _ => Vec::new(),
    };
    let files: Vec<Value> = files
        .into_iter()
        .map(|mut f| {
            if !include_diff && let Value::Object(m) = &mut f {
                m.insert("diff".into(), json!(""));
            }
            f
        })
        .collect();
    out.insert("files".into(), Value::Array(files));
    Ok(ok(&Value::Object(out)))
}
