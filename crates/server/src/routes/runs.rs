//! Runs: create (background, stream, wait), stateless and batch, list/get/delete, cancel,
//! join, join stream, and the thread stream.

use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path, Prefix, Query, config_headers, header_str, uuid_param};
use crate::routes::threads::load_thread;
use crate::sse::{
    DisconnectGuard, Liveness, ThreadModes, run_stream_body, single_event_body, sse_headers,
    thread_stream_body, wait_body,
};
use crate::wire;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use fawn_checkpoint::{CancelAction, CancelTarget, Run, RunQuery, RunStatus};
use fawn_runtime::broker::{Cursor, ModeFilter};
use fawn_runtime::create::{CreatedRun, RunCreate, RunTarget, commit_run, create_run, prepare_run};
use futures::FutureExt;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

fn with_locations(mut r: Response, location: Option<&str>, content_location: &str) -> Response {
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_location) {
        h.insert(header::CONTENT_LOCATION, v);
    }
    if let Some(l) = location.and_then(|l| HeaderValue::from_str(l).ok()) {
        h.insert(header::LOCATION, l);
    }
    r
}

fn sse_response(body: Body, location: Option<&str>, content_location: Option<&str>) -> Response {
    let mut r = Response::new(body);
    *r.headers_mut() = sse_headers(location, content_location);
    r
}

fn json_stream_response(body: Body, location: &str, content_location: &str) -> Response {
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    with_locations(r, Some(location), content_location)
}

fn on_disconnect_cancel(app: &AppState, c: &CreatedRun) -> DisconnectGuard {
    if !c.cancel_on_disconnect {
        return DisconnectGuard::none();
    }
    let app = app.clone();
    let run_id = c.run.run_id.clone();
    let thread_id = c.run.thread_id.clone();
    DisconnectGuard::new(Some(Box::new(move || {
        tokio::spawn(async move {
            let target = CancelTarget::Runs {
                thread_id: Some(thread_id),
                run_ids: vec![run_id.clone()],
            };
            if let Err(e) =
                fawn_runtime::runs::cancel(&app.rt, target, CancelAction::Interrupt).await
            {
                tracing::debug!(%run_id, error = %e, "cancel on disconnect");
            }
        });
    })))
}

/// At each heartbeat: has the run ended without this process closing its log?
fn liveness(app: &AppState, run_id: &str) -> Liveness {
    let app = app.clone();
    let run_id = run_id.to_string();
    Arc::new(move || {
        let app = app.clone();
        let run_id = run_id.clone();
        async move { fawn_runtime::join::ended_elsewhere(&app.rt, &run_id).await }.boxed()
    })
}

fn stream_created(
    app: &AppState,
    c: &CreatedRun,
    location: &str,
    content_location: &str,
) -> Response {
    let Some(log) = app.run_log(&c.run.run_id) else {
        return sse_response(Body::empty(), Some(location), Some(content_location));
    };
    let sub = log.subscribe(Cursor::Start, ModeFilter::all());
    let body = run_stream_body(
        sub,
        c.resumable,
        &app.stream,
        on_disconnect_cancel(app, c),
        Some(liveness(app, &c.run.run_id)),
    );
    sse_response(body, Some(location), Some(content_location))
}

fn wait_future(
    app: &AppState,
    run_id: &str,
    thread_id: &str,
) -> futures::future::BoxFuture<'static, Bytes> {
    let app = app.clone();
    let run_id = run_id.to_string();
    let thread_id = thread_id.to_string();
    // Taken now: a fast run may finish (and leave the broker) before the body is polled.
    let log = app.run_log(&run_id);
    async move {
        match log {
            Some(log) => {
                log.wait_done().await;
                match log.final_body() {
                    Some(b) => b,
                    None => fawn_runtime::runs::thread_result(&app.rt, &thread_id).await,
                }
            }
            None => {
                fawn_runtime::runs::wait_terminal(&app.rt, &run_id, Duration::from_secs(86_400))
                    .await;
                fawn_runtime::runs::wait_result(&app.rt, &run_id, &thread_id).await
            }
        }
    }
    .boxed()
}

fn wait_created(
    app: &AppState,
    c: &CreatedRun,
    location: &str,
    content_location: &str,
) -> Response {
    let body = wait_body(
        wait_future(app, &c.run.run_id, &c.run.thread_id),
        &app.stream,
        on_disconnect_cancel(app, c),
    );
    json_stream_response(body, location, content_location)
}

// -------------------------------------------------------------------- thread-scoped create

/// The run acts for the caller (its `user_id`; the owner of a thread it creates).
fn owned(body: RunCreate, principal: &Principal) -> RunCreate {
    RunCreate {
        owner: principal.scope().map(str::to_string),
        ..body
    }
}

pub async fn create_background(
    State(app): State<AppState>,
    Path(tid): Path<String>,
    Prefix(prefix): Prefix,
    headers: HeaderMap,
    principal: Principal,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let c = create_run(
        &app.rt,
        owned(body, &principal),
        RunTarget::Thread(tid.clone()),
        &config_headers(&headers),
    )
    .await?;
    let cl = format!("{prefix}/threads/{tid}/runs/{}", c.run.run_id);
    Ok(with_locations(wire::run_response(&c.run), None, &cl))
}

pub async fn create_stream(
    State(app): State<AppState>,
    Path(tid): Path<String>,
    Prefix(prefix): Prefix,
    headers: HeaderMap,
    principal: Principal,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let c = create_run(
        &app.rt,
        owned(body, &principal),
        RunTarget::Thread(tid.clone()),
        &config_headers(&headers),
    )
    .await?;
    let cl = format!("{prefix}/threads/{tid}/runs/{}", c.run.run_id);
    Ok(stream_created(&app, &c, &format!("{cl}/stream"), &cl))
}

pub async fn create_wait(
    State(app): State<AppState>,
    Path(tid): Path<String>,
    Prefix(prefix): Prefix,
    headers: HeaderMap,
    principal: Principal,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let c = create_run(
        &app.rt,
        owned(body, &principal),
        RunTarget::Thread(tid.clone()),
        &config_headers(&headers),
    )
    .await?;
    let cl = format!("{prefix}/threads/{tid}/runs/{}", c.run.run_id);
    Ok(wait_created(&app, &c, &format!("{cl}/join"), &cl))
}

// ------------------------------------------------------------------------------ stateless

pub async fn stateless_background(
    State(app): State<AppState>,
    Prefix(prefix): Prefix,
    headers: HeaderMap,
    principal: Principal,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let c = create_run(
        &app.rt,
        owned(body, &principal),
        RunTarget::Stateless,
        &config_headers(&headers),
    )
    .await?;
    let cl = format!("{prefix}/runs/{}", c.run.run_id);
    Ok(with_locations(wire::run_response(&c.run), None, &cl))
}

pub async fn stateless_stream(
    State(app): State<AppState>,
    Prefix(prefix): Prefix,
    headers: HeaderMap,
    principal: Principal,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let c = create_run(
        &app.rt,
        owned(body, &principal),
        RunTarget::Stateless,
        &config_headers(&headers),
    )
    .await?;
    let cl = format!("{prefix}/runs/{}", c.run.run_id);
    Ok(stream_created(&app, &c, &format!("{cl}/stream"), &cl))
}

pub async fn stateless_wait(
    State(app): State<AppState>,
    Prefix(prefix): Prefix,
    headers: HeaderMap,
    principal: Principal,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let c = create_run(
        &app.rt,
        owned(body, &principal),
        RunTarget::Stateless,
        &config_headers(&headers),
    )
    .await?;
    let cl = format!("{prefix}/threads/{}/runs/{}", c.run.thread_id, c.run.run_id);
    Ok(wait_created(&app, &c, &format!("{cl}/join"), &cl))
}

pub async fn batch(
    State(app): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    JsonBody(items): JsonBody<Vec<RunCreate>>,
) -> ApiResult<Response> {
    if items.len() > 1000 {
        return Err(ApiError::unprocessable(
            "Invalid request body: at most 1000 runs per batch",
        ));
    }
    // Validate everything first: a bad item creates nothing.
    let mut prepared = Vec::with_capacity(items.len());
    for (i, body) in items.into_iter().enumerate() {
        let p = prepare_run(
            &app.rt,
            owned(body, &principal),
            RunTarget::Stateless,
            &config_headers(&headers),
        )
        .await
        .map_err(|e| {
            let e = ApiError::from(e);
            ApiError::new(e.status, format!("Run {i}: {}", e.detail))
        })?;
        prepared.push(p);
    }
    let mut out = Vec::with_capacity(prepared.len());
    for p in prepared {
        let c = commit_run(&app.rt, p).await?;
        out.push(wire::run(&c.run));
    }
    Ok(wire::ok(&out))
}

// ------------------------------------------------------------------- list / get / delete

async fn load_run(app: &AppState, tid: &str, rid: &str) -> ApiResult<Run> {
    match app.store().get_run(rid).await {
        Ok(Some(r)) if r.thread_id == tid => Ok(r),
        Ok(_) => Err(ApiError::not_found("Not Found")),
        Err(e) => Err(ApiError::store("loading the run", e)),
    }
}

pub async fn list(
    State(app): State<AppState>,
    Path(tid): Path<String>,
    q: Query,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let status = match q.get("status") {
        None => None,
        Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
            ApiError::unprocessable(format!(
                "Invalid value for query parameter `status`: '{s}' is not a run status"
            ))
        })?),
    };
    let limit = q.u64("limit")?.unwrap_or(10).min(1000);
    let offset = q.u64("offset")?.unwrap_or(0);
    let select = q.list(&["select"]);
    load_thread(&app, &tid).await?;
    let runs = app
        .store()
        .list_runs(
            &tid,
            &RunQuery {
                limit,
                offset,
                status,
            },
        )
        .await
        .map_err(|e| ApiError::store("listing runs", e))?;
    let out: Vec<Value> = runs
        .iter()
        .map(|r| wire::select_keys(wire::run(r), &select))
        .collect();
    Ok(wire::ok(&out))
}

pub async fn get_one(
    State(app): State<AppState>,
    Path((tid, rid)): Path<(String, String)>,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let rid = uuid_param("run", &rid)?;
    let r = load_run(&app, &tid, &rid).await?;
    Ok(wire::run_response(&r))
}

pub async fn delete(
    State(app): State<AppState>,
    Path((tid, rid)): Path<(String, String)>,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let rid = uuid_param("run", &rid)?;
    let r = load_run(&app, &tid, &rid).await?;
    fawn_runtime::runs::delete_run(&app.rt, &r).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----------------------------------------------------------------------------------- cancel

fn cancel_action(q: &Query) -> ApiResult<CancelAction> {
    match q.get("action") {
        None | Some("interrupt") => Ok(CancelAction::Interrupt),
        Some("rollback") => Ok(CancelAction::Rollback),
        Some(o) => Err(ApiError::unprocessable(format!(
            "Invalid value for query parameter `action`: '{o}' is not one of ['interrupt', 'rollback']"
        ))),
    }
}

pub async fn cancel_one(
    State(app): State<AppState>,
    Path((tid, rid)): Path<(String, String)>,
    Prefix(prefix): Prefix,
    q: Query,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let rid = uuid_param("run", &rid)?;
    let action = cancel_action(&q)?;
    let wait = q.bool("wait")?.unwrap_or(false);
    let matched = fawn_runtime::runs::cancel(
        &app.rt,
        CancelTarget::Runs {
            thread_id: Some(tid.clone()),
            run_ids: vec![rid.clone()],
        },
        action,
    )
    .await?;
    if matched.is_empty() {
        // DeerFlow's gateway (the `/api` mount its UI calls) answers 409 for a run that
        // exists but has ended, the one status its UI treats as a harmless no-op; the
        // LangGraph mounts answer 404 as the SDKs expect.
        if prefix == "/api"
            && let Ok(Some(run)) = app.store().get_run(&rid).await
            && run.thread_id == tid
        {
            return Err(ApiError::conflict(format!(
                "Run {rid} is not active (status: {}); there is nothing to cancel",
                run.status.as_str()
            )));
        }
        return Err(ApiError::not_found(format!(
            "No matching runs to cancel: run {rid} of thread {tid} is not pending or running"
        )));
    }
    if !wait {
        return Ok(StatusCode::ACCEPTED.into_response());
    }
    fawn_runtime::runs::wait_terminal(&app.rt, &rid, Duration::from_secs(60)).await;
    let body = fawn_runtime::runs::wait_result(&app.rt, &rid, &tid).await;
    let cl = format!("{prefix}/threads/{tid}/runs/{rid}");
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(with_locations(r, Some(&format!("{cl}/join")), &cl))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CancelManyBody {
    thread_id: Option<String>,
    run_ids: Option<Vec<String>>,
    status: Option<String>,
}

pub async fn cancel_many(
    State(app): State<AppState>,
    principal: Principal,
    q: Query,
    JsonBody(b): JsonBody<CancelManyBody>,
) -> ApiResult<Response> {
    let action = cancel_action(&q)?;
    let target = match (&b.status, &b.run_ids, &b.thread_id) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(ApiError::unprocessable(
                "Invalid request body: `status` cannot be combined with `thread_id`/`run_ids`",
            ));
        }
        (Some(_), None, None) if principal.scope().is_some() && !principal.is_admin() => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "Cancelling every run by `status` is for admins; give `run_ids`",
            ));
        }
        (Some(s), None, None) => match s.as_str() {
            "pending" => CancelTarget::Status {
                pending: true,
                running: false,
            },
            "running" => CancelTarget::Status {
                pending: false,
                running: true,
            },
            "all" => CancelTarget::Status {
                pending: true,
                running: true,
            },
            o => {
                return Err(ApiError::unprocessable(format!(
                    "Invalid request body at `status`: '{o}' is not one of ['pending', 'running', 'all']"
                )));
            }
        },
        (None, Some(ids), tid) => {
            let mut run_ids = ids
                .iter()
                .map(|i| uuid_param("run", i))
                .collect::<ApiResult<Vec<_>>>()?;
            let thread_id = match tid {
                Some(t) => Some(uuid_param("thread", t)?),
                None => None,
            };
            if principal.scope().is_some() {
                if let Some(t) = &thread_id {
                    crate::authz::owns_thread(&app, &principal, t).await?;
                }
                // Another user's runs are left alone, as if they did not exist.
                let mut mine = Vec::with_capacity(run_ids.len());
                for id in run_ids {
                    match app.store().get_run(&id).await {
                        Ok(Some(r)) if principal.owns(crate::authz::run_user(&r)) => mine.push(id),
                        Ok(_) => {}
                        Err(e) => return Err(ApiError::store("loading a run", e)),
                    }
                }
                run_ids = mine;
                if run_ids.is_empty() {
                    return Err(ApiError::not_found("No matching runs to cancel"));
                }
            }
            CancelTarget::Runs { thread_id, run_ids }
        }
        (None, None, _) => {
            return Err(ApiError::unprocessable(
                "Invalid request body: give `run_ids` (with `thread_id`) or `status`",
            ));
        }
    };
    let matched = fawn_runtime::runs::cancel(&app.rt, target, action).await?;
    if matched.is_empty() {
        return Err(ApiError::not_found("No matching runs to cancel"));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ------------------------------------------------------------------------------------ join

pub async fn join(
    State(app): State<AppState>,
    Path((tid, rid)): Path<(String, String)>,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let rid = uuid_param("run", &rid)?;
    let run = match app.store().get_run(&rid).await {
        Ok(Some(r)) if r.thread_id == tid => r,
        Ok(_) => {
            return Ok(wire::ok(
                &json!({"__error__": {"error": "HTTPException", "message": "404: Run not found"}}),
            ));
        }
        Err(e) => return Err(ApiError::store("loading the run", e)),
    };
    if !run.status.is_active() {
        let b = fawn_runtime::runs::wait_result(&app.rt, &rid, &tid).await;
        let b = match wire::hides_internal_messages() {
            true => wire::without_hidden_messages(&b).unwrap_or(b),
            false => b,
        };
        let mut r = (StatusCode::OK, b).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return Ok(r);
    }
    let body = wait_body(
        wait_future(&app, &rid, &tid),
        &app.stream,
        DisconnectGuard::none(),
    );
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

fn join_stream_response(
    app: &AppState,
    run: Option<Run>,
    headers: &HeaderMap,
    q: &Query,
) -> ApiResult<Response> {
    let Some(run) = run else {
        return Ok(sse_response(
            single_event_body(
                "error",
                br#"{"error":"HTTPException","message":"404: Run not found"}"#,
            ),
            None,
            None,
        ));
    };
    let filter = ModeFilter::new(q.list(&["stream_mode"]));
    let cancel_on_disconnect = q.bool("cancel_on_disconnect")?.unwrap_or(false);
    let cursor = Cursor::from_last_event_id(header_str(headers, "last-event-id"));
    let Some(log) = fawn_runtime::join::log_to_join(&app.rt, &run) else {
        return Ok(sse_response(Body::empty(), None, None));
    };
    let include_ids = log.is_resumable();
    let sub = log.subscribe(cursor, filter);
    let guard = if cancel_on_disconnect {
        on_disconnect_cancel(
            app,
            &CreatedRun {
                run: run.clone(),
                resumable: include_ids,
                cancel_on_disconnect: true,
                stateless: false,
            },
        )
    } else {
        DisconnectGuard::none()
    };
    let body = run_stream_body(
        sub,
        include_ids,
        &app.stream,
        guard,
        Some(liveness(app, &run.run_id)),
    );
    Ok(sse_response(body, None, None))
}

pub async fn join_stream(
    State(app): State<AppState>,
    Path((tid, rid)): Path<(String, String)>,
    headers: HeaderMap,
    q: Query,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let rid = uuid_param("run", &rid)?;
    let run = app
        .store()
        .get_run(&rid)
        .await
        .map_err(|e| ApiError::store("loading the run", e))?
        .filter(|r| r.thread_id == tid);
    join_stream_response(&app, run, &headers, &q)
}

pub async fn join_stream_threadless(
    State(app): State<AppState>,
    Path(rid): Path<String>,
    headers: HeaderMap,
    q: Query,
) -> ApiResult<Response> {
    let rid = uuid_param("run", &rid)?;
    let run = app
        .store()
        .get_run(&rid)
        .await
        .map_err(|e| ApiError::store("loading the run", e))?;
    join_stream_response(&app, run, &headers, &q)
}

pub async fn thread_stream(
    State(app): State<AppState>,
    Path(tid): Path<String>,
    headers: HeaderMap,
    q: Query,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    load_thread(&app, &tid).await?;
    let requested = q.list(&["stream_mode", "stream_modes"]);
    let mut modes = ThreadModes::default();
    for m in &requested {
        match m.as_str() {
            "run_modes" => modes.run_modes = true,
            "lifecycle" => modes.lifecycle = true,
            "state_update" => modes.state_update = true,
            o => {
                return Err(ApiError::unprocessable(format!(
                    "Invalid thread stream mode '{o}'. Expected one of ['run_modes', 'lifecycle', 'state_update']"
                )));
            }
        }
    }
    if requested.is_empty() {
        modes.run_modes = true;
    }
    let watch = app.watch_thread(&tid);
    let replay = match Cursor::from_last_event_id(header_str(&headers, "last-event-id")) {
        Cursor::Live => Vec::new(),
        cursor => {
            let after = match cursor {
                Cursor::After(n) => Some(n),
                _ => None,
            };
            let mut events = Vec::new();
            for log in app.thread_logs(&tid) {
                if log.is_resumable() {
                    events.extend(log.retained_after(after));
                }
            }
            events
        }
    };
    let body = thread_stream_body(watch, replay, modes, &app.stream);
    Ok(sse_response(body, None, None))
}
