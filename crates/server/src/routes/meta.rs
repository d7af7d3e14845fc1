//! `/ok`, `/info`, `/health` and the `/internal/truncate` test hook.

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::OptionalJsonBody;
use crate::wire::ok as json_ok;
use axum::extract::State;
use axum::response::Response;
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

pub async fn ok(State(app): State<AppState>) -> Response {
    json_ok(&json!({"ok": true, "services": {}, "demo_model": app.demo.is_some()}))
}

pub async fn info(State(app): State<AppState>) -> Response {
    json_ok(&json!({
        "version": crate::VERSION,
        "langgraph_py_version": Value::Null,
        "flags": {
            "assistants": true,
            "crons": true,
            "langsmith": false,
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
            "database": app.store.backend(),
            "graphs": app.graphs.ids().collect::<Vec<_>>(),
            "models": app.models.all().iter().map(|m| m.info().name.clone()).collect::<Vec<_>>(),
            "demo_model": demo_json(&app),
        },
    }))
}

pub async fn health(State(app): State<AppState>) -> Response {
    let db = app.store.ping().await;
    // DeerFlow's gateway answers {"status": "healthy", "service": "deer-flow-gateway"};
    // clients that check it see the same, with Fawn's details beside it.
    let body = json!({
        "status": if db { "healthy" } else { "unhealthy" },
        "service": "deer-flow-gateway",
        "server": "fawn",
        "database": {"backend": app.store.backend(), "ok": db},
        "runs": {"active_here": app.queue.active_count()},
        "demo_model": demo_json(&app),
    });
    if db {
        json_ok(&body)
    } else {
        crate::wire::json_response(axum::http::StatusCode::SERVICE_UNAVAILABLE, &body)
    }
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
    app.store
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
