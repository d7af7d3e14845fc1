//! DeerFlow's gateway API (reference §9.3–§9.5, §10.3), mounted under `/api/` only, next to
//! the LangGraph API mounted there too.
//!
//! | routes | module |
//! |---|---|
//! | `GET /api/models`, `/api/models/{name}`, `GET /api/features`, `GET /api/v1/auth/{me,setup-status}` | [`config`] |
//! | `POST /api/threads/{id}/uploads`, `GET …/uploads/list`, `GET …/uploads/limits`, `DELETE …/uploads/{filename}` | [`uploads`] |
//! | `GET /api/threads/{id}/artifacts/{path}` | [`artifacts`] |
//! | `GET /api/skills`, `GET\|PUT /api/skills/{name}`, `POST /api/skills/reload` | [`skills`] |
//! | `GET\|PUT\|PATCH /api/mcp/config`, `POST /api/mcp/cache/reset` | [`mcp`] |
//! | `GET\|DELETE /api/memory`, `POST /api/memory/reload`, facts CRUD, export/import, config, status | [`memory`] |
//! | `GET /api/threads/{id}/messages/page`, `GET …/token-usage`, suggestions | [`threads`] |
//!
//! Fawn runs DeerFlow's auth-disabled mode: every caller is the admin user `default`, so the
//! admin-only routes (skill toggles and reload, MCP config writes, MCP cache reset) are open
//! to anyone who can reach the port. Put Fawn behind an authenticating proxy when that
//! matters.
//!
//! `DELETE /api/threads/{id}` is the LangGraph route (mounted at `/api` as well): it answers
//! `204` (not DeerFlow's `{success, message}`) and removes the thread's checkpoints, runs and
//! files. The DeerFlow UI treats any 2xx or 404 as success, so the LangGraph contract wins.
//!
//! Errors are `{"detail": …}`: 4xx for anything the caller can fix, 5xx only for failures of
//! the server itself (logged).

pub mod artifacts;
pub mod channels;
pub mod config;
pub mod mcp;
pub mod memory;
pub mod skills;
pub mod threads;
pub mod uploads;

use crate::app::AppState;
use crate::error::{ApiError, ApiResult, method_not_allowed_fallback};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};

/// The gateway routes, relative to `/api`.
pub fn router(state: &AppState) -> Router<AppState> {
    let u = &state.settings.app.uploads;
    let upload_limit = usize::try_from(u.max_total_size)
        .unwrap_or(usize::MAX)
        .saturating_add(uploads::MULTIPART_SLACK);
    Router::new()
        .route("/models", get(config::models))
        .route("/models/{name}", get(config::model))
        .route("/features", get(config::features))
        .route("/v1/auth/me", get(config::me))
        .route("/v1/auth/setup-status", get(config::setup_status))
        .route(
            "/threads/{thread_id}/uploads",
            post(uploads::upload).layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route("/threads/{thread_id}/uploads/list", get(uploads::list))
        .route("/threads/{thread_id}/uploads/limits", get(uploads::limits))
        .route(
            "/threads/{thread_id}/uploads/{filename}",
            delete(uploads::delete),
        )
        .route(
            "/threads/{thread_id}/artifacts/{*path}",
            get(artifacts::get),
        )
        .route("/skills", get(skills::list))
        .route("/skills/reload", post(skills::reload))
        .route("/skills/{name}", get(skills::get_one).put(skills::put))
        .route("/mcp/config", get(mcp::get).put(mcp::put).patch(mcp::patch))
        .route("/mcp/cache/reset", post(mcp::reset))
        .route("/memory", get(memory::get).delete(memory::clear))
        .route("/memory/reload", post(memory::get))
        .route("/memory/facts", post(memory::add_fact))
        .route(
            "/memory/facts/{fact_id}",
            axum::routing::patch(memory::patch_fact).delete(memory::delete_fact),
        )
        .route("/memory/export", get(memory::export))
        .route("/memory/import", post(memory::import))
        .route("/memory/config", get(memory::config))
        .route("/memory/status", get(memory::status))
        .route("/channels/providers", get(channels::providers))
        .route("/channels/connections", get(channels::connections))
        .route("/channels/connections/{id}", delete(channels::unsupported))
        .route("/channels/{provider}/connect", post(channels::unsupported))
        .route(
            "/channels/{provider}/runtime-config",
            post(channels::unsupported)
                .put(channels::unsupported)
                .delete(channels::unsupported),
        )
        .route("/suggestions/config", get(threads::suggestions_config))
        .route(
            "/threads/{thread_id}/suggestions",
            post(threads::suggestions),
        )
        .route(
            "/threads/{thread_id}/token-usage",
            get(threads::token_usage),
        )
        .route(
            "/threads/{thread_id}/messages/page",
            get(threads::messages_page),
        )
        .method_not_allowed_fallback(method_not_allowed_fallback)
}

/// A thread id in a gateway path: a UUID (canonicalised, as the LangGraph routes store
/// it) or DeerFlow's `^[A-Za-z0-9_-]{1,64}$`; anything else is a 422.
pub fn thread_param(raw: &str) -> ApiResult<String> {
    if let Ok(u) = uuid::Uuid::parse_str(raw.trim()) {
        return Ok(u.hyphenated().to_string());
    }
    if fawn_sandbox::valid_thread_id(raw) {
        return Ok(raw.to_string());
    }
    Err(ApiError::unprocessable(
        "Invalid thread ID: must be a UUID or match ^[A-Za-z0-9_-]{1,64}$",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids() {
        assert_eq!(
            thread_param("6BA7B821-9DAD-11D1-80B4-00C04FD430C8").unwrap(),
            "6ba7b821-9dad-11d1-80b4-00c04fd430c8"
        );
        assert_eq!(thread_param("abc_DEF-123").unwrap(), "abc_DEF-123");
        for bad in ["", "a/b", "a.b", &"x".repeat(65)] {
            assert_eq!(thread_param(bad).unwrap_err().status, 422, "{bad}");
        }
    }
}
