//! DeerFlow's scheduled tasks: `GET|POST /api/scheduled-tasks`,
//! `GET|PATCH|DELETE /api/scheduled-tasks/{task_id}`, `POST …/{task_id}/pause`, `…/resume`,
//! `…/trigger`, `GET …/{task_id}/runs` and `GET /api/threads/{thread_id}/scheduled-tasks`,
//! with DeerFlow's payloads and status codes.
//!
//! A task is a cron of Fawn's one scheduler ([`fawn_runtime::scheduled`] says how it maps):
//! its id is the cron's id, and the LangGraph cron routes show the same schedule. Tasks are
//! their creator's: another user's task answers 404 like a missing one (checked by the route
//! table for `{task_id}`, and again here when the task is loaded). An admin is another user
//! too, as in DeerFlow.
//!
//! `scheduler.enabled` (off by default, as in DeerFlow) decides whether tasks fire on their
//! own; the routes answer either way, and trigger always runs the task now.

use super::thread_param;
use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path, Query};
use crate::wire::{ok, ts, ts_opt};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fawn_checkpoint::{Cron, JsonMap, Run, RunStatus, Thread};
use fawn_runtime::scheduled::{
    self, NewTask, TaskPatch, TaskSpec, TriggerError, run_error, run_scheduled_for, run_status,
    run_trigger,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// Largest page of `GET …/runs` (DeerFlow's bound).
pub const MAX_RUNS_PAGE: u64 = 200;

fn not_found() -> ApiError {
    ApiError::not_found("Scheduled task not found")
}

/// The caller's task, else 404.
async fn load(app: &AppState, p: &Principal, task_id: &str) -> ApiResult<Cron> {
    match scheduled::get(&app.rt, task_id).await? {
        Some(c) if p.owns(c.user_id.as_deref()) => Ok(c),
        _ => Err(not_found()),
    }
}

/// A task as DeerFlow shows it.
async fn view(app: &AppState, cron: &Cron) -> ApiResult<Value> {
    let spec = TaskSpec::of(cron).unwrap_or_default();
    let state = scheduled::state(&app.rt, cron).await?;
    let last = state.last_run.as_ref();
    Ok(json!({
        "id": cron.cron_id,
        "user_id": cron.user_id,
        "thread_id": cron.thread_id,
        "context_mode": spec.context_mode.as_str(),
        "assistant_id": spec.assistant_id,
        "title": spec.title,
        "prompt": spec.prompt,
        "schedule_type": spec.schedule_type.as_str(),
        "schedule_spec": spec.schedule_spec,
        "timezone": cron.timezone,
        "status": state.status,
        "overlap_policy": "skip",
        "next_run_at": ts_opt(&cron.next_run_date),
        "last_run_at": last.map(|r| ts(&r.created_at)),
        "last_run_id": last.map(|r| r.run_id.clone()),
        "last_thread_id": last.map(|r| r.thread_id.clone()),
        "last_error": state.last_error,
        "lease_owner": null,
        "lease_expires_at": null,
        "run_count": state.run_count,
        "created_at": ts(&cron.created_at),
        "updated_at": ts(&cron.updated_at),
    }))
}

async fn views(app: &AppState, crons: &[Cron]) -> ApiResult<Response> {
    let mut out = Vec::with_capacity(crons.len());
    for c in crons {
        out.push(view(app, c).await?);
    }
    Ok(ok(&out))
}

/// One run of a task, as DeerFlow's run history shows it.
fn run_view(task_id: &str, r: &Run) -> Value {
    let finished = !matches!(r.status, RunStatus::Pending | RunStatus::Running);
    json!({
        "id": r.run_id,
        "task_id": task_id,
        "thread_id": r.thread_id,
        "run_id": r.run_id,
        "scheduled_for": ts(&run_scheduled_for(r)),
        "trigger": run_trigger(r),
        "status": run_status(r),
        "error": run_error(r),
        "started_at": ts(&r.created_at),
        "finished_at": finished.then(|| ts(&r.updated_at)),
        "created_at": ts(&r.created_at),
    })
}

/// Whether the caller may run a task on `thread`.
fn thread_check(p: &Principal) -> impl Fn(&Thread) -> bool + Send + Sync + '_ {
    move |t: &Thread| p.owns_thread(&t.metadata)
}

/// A thread id of a body (`null` = none), in DeerFlow's format.
fn body_thread(raw: Option<String>) -> ApiResult<Option<String>> {
    raw.map(|t| thread_param(&t)).transpose()
}

/// `GET /api/scheduled-tasks`: the caller's tasks, newest first.
pub async fn list(State(app): State<AppState>, p: Principal) -> ApiResult<Response> {
    let crons = scheduled::list(&app.rt, p.scope(), None).await?;
    views(&app, &crons).await
}

/// `GET /api/threads/{thread_id}/scheduled-tasks`: the caller's tasks running on a thread.
pub async fn for_thread(
    State(app): State<AppState>,
    p: Principal,
    Path(thread_id): Path<String>,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    let crons = scheduled::list(&app.rt, p.scope(), Some(&thread_id)).await?;
    views(&app, &crons).await
}

/// `POST /api/scheduled-tasks` body.
#[derive(Debug, Deserialize)]
pub struct CreateBody {
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    context_mode: Option<String>,
    title: String,
    prompt: String,
    schedule_type: String,
    schedule_spec: JsonMap,
    timezone: String,
}

/// `POST /api/scheduled-tasks`: the created task (200, as DeerFlow answers).
pub async fn create(
    State(app): State<AppState>,
    p: Principal,
    JsonBody(b): JsonBody<CreateBody>,
) -> ApiResult<Response> {
    let task = NewTask {
        owner: p.scope().map(str::to_string),
        context_mode: b
            .context_mode
            .unwrap_or_else(|| "fresh_thread_per_run".to_string()),
        thread_id: body_thread(b.thread_id)?,
        title: b.title,
        prompt: b.prompt,
        schedule_type: b.schedule_type,
        schedule_spec: b.schedule_spec,
        timezone: b.timezone,
    };
    let check = thread_check(&p);
    let cron = scheduled::create(&app.rt, task, &check).await?;
    Ok(ok(&view(&app, &cron).await?))
}

/// `GET /api/scheduled-tasks/{task_id}`.
pub async fn get_one(
    State(app): State<AppState>,
    p: Principal,
    Path(task_id): Path<String>,
) -> ApiResult<Response> {
    let cron = load(&app, &p, &task_id).await?;
    Ok(ok(&view(&app, &cron).await?))
}

/// `PATCH /api/scheduled-tasks/{task_id}` body: `null` or absent keeps the value.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UpdateBody {
    context_mode: Option<String>,
    thread_id: Option<String>,
    title: Option<String>,
    prompt: Option<String>,
    schedule_spec: Option<JsonMap>,
    timezone: Option<String>,
}

/// `PATCH /api/scheduled-tasks/{task_id}`: 409 while a one-off task's run is active.
pub async fn update(
    State(app): State<AppState>,
    p: Principal,
    Path(task_id): Path<String>,
    JsonBody(b): JsonBody<UpdateBody>,
) -> ApiResult<Response> {
    let cron = load(&app, &p, &task_id).await?;
    let patch = TaskPatch {
        context_mode: b.context_mode,
        thread_id: body_thread(b.thread_id)?,
        title: b.title,
        prompt: b.prompt,
        schedule_spec: b.schedule_spec,
        timezone: b.timezone,
    };
    let check = thread_check(&p);
    let cron = scheduled::update(&app.rt, &cron, patch, &check).await?;
    Ok(ok(&view(&app, &cron).await?))
}

async fn set_enabled(
    app: &AppState,
    p: &Principal,
    task_id: &str,
    enabled: bool,
) -> ApiResult<Response> {
    let cron = load(app, p, task_id).await?;
    let cron = scheduled::set_enabled(&app.rt, &cron, enabled).await?;
    Ok(ok(&view(app, &cron).await?))
}

/// `POST /api/scheduled-tasks/{task_id}/pause`.
pub async fn pause(
    State(app): State<AppState>,
    p: Principal,
    Path(task_id): Path<String>,
) -> ApiResult<Response> {
    set_enabled(&app, &p, &task_id, false).await
}

/// `POST /api/scheduled-tasks/{task_id}/resume`.
pub async fn resume(
    State(app): State<AppState>,
    p: Principal,
    Path(task_id): Path<String>,
) -> ApiResult<Response> {
    set_enabled(&app, &p, &task_id, true).await
}

/// `POST /api/scheduled-tasks/{task_id}/trigger`: `{id, triggered: true}`; 409 while the task
/// has an active run (or the scheduled runs are at `scheduler.max_concurrent_runs`), 502 when
/// the run could not be created.
pub async fn trigger(
    State(app): State<AppState>,
    p: Principal,
    Path(task_id): Path<String>,
) -> ApiResult<Response> {
    let cron = load(&app, &p, &task_id).await?;
    match scheduled::trigger(&app.rt, &cron).await {
        Ok(_) => Ok(ok(&json!({"id": cron.cron_id, "triggered": true}))),
        Err(TriggerError::Busy(m)) => Err(ApiError::conflict(m)),
        Err(TriggerError::Failed(m)) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!("Scheduled task trigger failed: {m}"),
        )),
        Err(TriggerError::Runtime(e)) => Err(e.into()),
    }
}

/// `DELETE /api/scheduled-tasks/{task_id}`: `{id, deleted: true}`. The runs and threads it
/// created stay.
pub async fn delete(
    State(app): State<AppState>,
    p: Principal,
    Path(task_id): Path<String>,
) -> ApiResult<Response> {
    let cron = load(&app, &p, &task_id).await?;
    if !scheduled::delete(&app.rt, &cron).await? {
        return Err(not_found());
    }
    Ok(ok(&json!({"id": cron.cron_id, "deleted": true})))
}

/// `GET /api/scheduled-tasks/{task_id}/runs?limit=50&offset=0`: the runs it created, newest
/// first (`limit` 1..=200).
pub async fn runs(
    State(app): State<AppState>,
    p: Principal,
    Path(task_id): Path<String>,
    q: Query,
) -> ApiResult<Response> {
    let limit = q.u64("limit")?.unwrap_or(50);
    if !(1..=MAX_RUNS_PAGE).contains(&limit) {
        return Err(ApiError::unprocessable(format!(
            "Invalid value for query parameter `limit`: must be between 1 and {MAX_RUNS_PAGE}"
        )));
    }
    let offset = q.u64("offset")?.unwrap_or(0);
    let cron = load(&app, &p, &task_id).await?;
    let page = app
        .store()
        .cron_runs(&cron.cron_id, limit, offset)
        .await
        .map_err(|e| ApiError::store("listing the task's runs", e))?;
    let out: Vec<Value> = page
        .items
        .iter()
        .map(|r| run_view(&cron.cron_id, r))
        .collect();
    Ok(ok(&out))
}
