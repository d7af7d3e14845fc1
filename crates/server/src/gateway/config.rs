//! `GET /api/models`, `/api/models/{name}` and `/api/features`.

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::Path;
use crate::wire::ok;
use axum::extract::State;
use axum::response::Response;
use fawn_llm::ModelInfo;
use serde_json::{Value, json};

fn model_json(m: &ModelInfo) -> Value {
    json!({
        "name": m.name,
        "model": m.model,
        "display_name": m.display_name.clone().unwrap_or_else(|| m.name.clone()),
        "description": m.description,
        "supports_thinking": m.supports_thinking,
        "supports_reasoning_effort": m.supports_reasoning_effort,
        "supports_vision": m.supports_vision,
    })
}

/// `{models: [...], token_usage: {enabled}}`: the configured models in order (the first is
/// the default), or the demo model when none is configured.
pub async fn models(State(app): State<AppState>) -> Response {
    let models: Vec<Value> = app
        .models
        .all()
        .iter()
        .map(|m| model_json(m.info()))
        .collect();
    ok(&json!({
        "models": models,
        "token_usage": {"enabled": app.settings.app.token_usage.enabled},
    }))
}

pub async fn model(State(app): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    match app.models.get(&name) {
        Some(m) => Ok(ok(&model_json(m.info()))),
        None => Err(ApiError::not_found(format!("Model '{name}' not found"))),
    }
}

/// What the UI may offer: the custom-agent API when `agents_api.enabled`; Fawn serves
/// neither the browser panel nor durable MCP tasks.
pub async fn features(State(app): State<AppState>) -> Response {
    ok(&json!({
        "agents_api": {"enabled": app.settings.app.agents_api.enabled},
        "browser_control": {"enabled": false},
        "mcp_tasks": {"enabled": false},
    }))
}
