//! DeerFlow's IM channels (`/api/channels/*`: Feishu, Slack, Telegram, …), which Fawn does
//! not implement. The web UI asks for the providers on every page load and shows loading
//! placeholders while that fails, so the reads answer "disabled, none"; the writes answer
//! 501 with a reason, never a 404 the UI would retry.

use crate::error::ApiError;
use crate::wire::ok;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

/// `GET /api/channels/providers`.
pub async fn providers() -> Response {
    ok(&json!({"enabled": false, "providers": []}))
}

/// `GET /api/channels/connections`.
pub async fn connections() -> Response {
    ok(&json!({"enabled": false, "connections": []}))
}

/// Connecting, configuring or removing a channel.
pub async fn unsupported() -> ApiError {
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "IM channels are not supported by Fawn",
    )
}
