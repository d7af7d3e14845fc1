//! `/ok`, `/info`, `/health`, `/metrics` and the `/internal/truncate` test hook.

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{OptionalJsonBody, Query};
use crate::wire::ok as json_ok;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use fawn_checkpoint::Truncate;
use serde::Deserialize;
use serde_json::{Value, json};

fn demo_json(app: &AppState) -> Value {
    match &app.demo {
        Some(d) => json!({
            "name": d.name,
            "warning": "No model is configured: answers come from Fawn's built-in demo model, not a language model.",
        }),
        None => Value::Null,
    }
}

/// `GET /ok`: always 200 while the process serves (what load balancers check). Its body
/// also says how full this node is: `runs.available` is 0 when new runs would wait in the
/// queue instead of starting here (`full`).
pub async fn ok(State(app): State<AppState>) -> Response {
    let max = app.queue_config().max_concurrent_runs;
    let available = app.free_run_slots();
    json_ok(&json!({
        "ok": true,
        "services": {},
        "demo_model": app.demo.is_some(),
        "runs": {
            "max_concurrent": max,
            "executing": app.runs_executing_here(),
            "available": available,
            "full": available == 0,
        },
    }))
}

pub async fn info(State(app): State<AppState>) -> Response {
    json_ok(&json!({
        "version": crate::VERSION,
        "langgraph_py_version": Value::Null,
        "flags": {
            "assistants": true,
            "crons": true,
            "langsmith": fawn_telemetry::trace::destinations().contains(&"langsmith"),
            "langsmith_tracing_replicas": false,
            "langsmith_tracing_session_on_runs": false,
        },
        "host": {
            "kind": "self-hosted",
            "project_id": null,
            "host_revision_id": null,
            "revision_id": null,
            "tenant_id": null,
        },
        "fawn": {
            "database": app.store().backend(),
            "graphs": app.graphs.ids().collect::<Vec<_>>(),
            "models": app.models.all().iter().map(|m| m.info().name.clone()).collect::<Vec<_>>(),
            "demo_model": demo_json(&app),
        },
    }))
}

pub async fn health(State(app): State<AppState>) -> Response {
    let db = app.store().ping().await;
    // DeerFlow's gateway answers {"status": "healthy", "service": "deer-flow-gateway"};
    // clients that check it see the same, with Fawn's details beside it.
    let body = json!({
        "status": if db { "healthy" } else { "unhealthy" },
        "service": "deer-flow-gateway",
        "server": "fawn",
        "database": {"backend": app.store().backend(), "ok": db},
        "runs": {"active_here": app.runs_executing_here()},
        "demo_model": demo_json(&app),
    });
    if db {
        json_ok(&body)
    } else {
        crate::wire::json_response(axum::http::StatusCode::SERVICE_UNAVAILABLE, &body)
    }
}

/// `GET /metrics`: every metric family in Prometheus' text format, or with `?format=json`
/// the same figures as JSON, with the official server's `queue` and `workers` keys and the
/// pool under the backend's name. The gauges of the moment (queue, pool, process) are read
/// now; an unknown format answers the text format, as the official server does.
pub async fn metrics(State(app): State<AppState>, query: Query) -> Response {
    let m = fawn_telemetry::metrics();
    let queue = match app.store().queue_stats().await {
        Ok(q) => {
            m.runs_pending
                .set(i64::try_from(q.pending).unwrap_or(i64::MAX));
            m.runs_running
                .set(i64::try_from(q.running).unwrap_or(i64::MAX));
            m.runs_pending_oldest.set(q.oldest_pending_seconds);
            Some(q)
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading the queue for /metrics failed");
            None
        }
    };
    let pool = app.store().pool_stats();
    m.db_pool
        .with_label_values(&["open"])
        .set(i64::from(pool.open));
    m.db_pool
        .with_label_values(&["idle"])
        .set(i64::from(pool.idle));
    m.db_pool
        .with_label_values(&["in_use"])
        .set(i64::from(pool.in_use));
    m.db_pool_max.set(i64::from(pool.max));
    m.db_pool_waiting.set(i64::from(pool.waiting));
    let max = app.queue_config().max_concurrent_runs;
    let active = app.runs_executing_here();
    let available = app.free_run_slots();
    m.runs_executing_max
        .set(i64::try_from(max).unwrap_or(i64::MAX));
    if query.get("format") == Some("json") {
        let mut body = m.render_json();
        if let Value::Object(o) = &mut body {
            o.insert(
                "queue".into(),
                match queue {
                    Some(q) => json!({
                        "n_pending": q.pending,
                        "n_running": q.running,
                        "pending_runs_wait_time_max_secs": q.oldest_pending_seconds,
                    }),
                    None => Value::Null,
                },
            );
            o.insert(
                "workers".into(),
                json!({"max": max, "active": active, "available": available}),
            );
            o.insert(
                app.store().backend().into(),
                json!({
                    "pool_max": pool.max,
                    "pool_size": pool.open,
                    "pool_available": pool.idle,
                    "requests_queued": pool.waiting,
                }),
            );
        }
        return json_ok(&body);
    }
    let mut resp = m.render_text().into_response();
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static(fawn_telemetry::metrics::TEXT_CONTENT_TYPE),
    );
    resp
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TruncateBody {
    runs: bool,
    threads: bool,
    assistants: bool,
    checkpointer: bool,
    store: bool,
}

/// `POST /internal/truncate` (JS test-suite hook), only with test hooks enabled.
pub async fn truncate(
    State(app): State<AppState>,
    OptionalJsonBody(body): OptionalJsonBody<TruncateBody>,
) -> ApiResult<Response> {
    if !app.test_hooks {
        return Err(ApiError::not_found("Not Found"));
    }
    let b = body.unwrap_or_default();
    app.store()
        .truncate(&Truncate {
            runs: b.runs,
            threads: b.threads,
            assistants: b.assistants,
            checkpointer: b.checkpointer,
            store: b.store,
        })
        .await
        .map_err(|e| ApiError::store("truncating", e))?;
    app.forget_assistants();
    Ok(json_ok(&json!({"ok": true})))
}
