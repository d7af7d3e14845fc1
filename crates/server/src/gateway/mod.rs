//! DeerFlow's gateway API (reference §9.3–§9.5, §10.3), mounted under `/api/` only, next to
//! the LangGraph API mounted there too.
//!
//! | routes | module |
//! |---|---|
//! | `GET /api/models`, `/api/models/{name}`, `GET /api/features` | [`config`] |
//! | `GET\|POST /api/agents`, `GET /api/agents/check`, `GET\|PUT\|DELETE /api/agents/{name}`, `GET\|PUT /api/user-profile` | [`agents`] |
//! | `/api/v1/auth/*` | [`crate::auth::routes`] |
//! | `POST /api/threads/{id}/uploads`, `GET …/uploads/list`, `GET …/uploads/limits`, `DELETE …/uploads/{filename}` | [`uploads`] |
//! | `GET\|PUT /api/threads/{id}/artifacts/{path}` | [`artifacts`] |
//! | `GET /api/skills`, `GET\|PUT /api/skills/{name}`, `POST /api/skills/reload`, `GET /api/skills/custom`, `GET\|PUT\|DELETE /api/skills/custom/{name}`, `GET …/history`, `POST …/rollback` | [`skills`] |
//! | `POST /api/skills/install` | [`skill_install`] |
//! | `GET\|PUT\|PATCH /api/mcp/config`, `POST /api/mcp/cache/reset` | [`mcp`] |
//! | `GET\|DELETE /api/memory`, `POST /api/memory/reload`, facts CRUD, export/import, config, status | [`memory`] |
//! | `GET /api/threads/{id}/token-usage`, suggestions | [`threads`] |
//! | `GET /api/threads/{id}/messages/page`, `GET …/messages`, `GET …/runs/{rid}/messages`, `GET …/runs/{rid}/events`, `GET\|PUT\|POST\|DELETE …/runs/{rid}/feedback`, `GET …/feedback/stats`, `DELETE …/feedback/{fid}` | [`history`] |
//! | `POST /api/threads/{id}/runs/regenerate/prepare`, `POST …/runs/edit-regenerate/prepare`, `POST /api/threads/{id}/branches` | [`conversation`] |
//! | `GET\|POST /api/scheduled-tasks`, `GET\|PATCH\|DELETE /api/scheduled-tasks/{task_id}`, `POST …/pause`, `…/resume`, `…/trigger`, `GET …/runs`, `GET /api/threads/{id}/scheduled-tasks` | [`scheduled`] |
//! | `POST /api/input-polish` | [`polish`] |
//! | `GET /api/threads/{id}/runs/{rid}/workspace-changes` | [`workspace_changes`] |
//! | `POST /api/test-only/seed-runs` (404 unless started with `DEERFLOW_ENABLE_TEST_SEED=1`) | [`seed`] |
//! | `POST /api/threads/{id}/compact` | [`compact`] |
//! | `GET /api/integrations/lark/status` (not installed, never connected) | [`integrations`] |
//! | `GET\|PUT\|DELETE /api/threads/{id}/goal` | [`goal`] |
//!
//! Admin only, as in DeerFlow: skill toggles, reload and install, reading and changing custom
//! skills (listing them is for everyone), MCP config writes, MCP cache reset.
//! Thread routes check that the caller owns the thread; memory, custom agents and the user
//! profile are the caller's own.
//!
//! `DELETE /api/threads/{id}` is the LangGraph route (mounted at `/api` as well): it answers
//! `204` (not DeerFlow's `{success, message}`) and removes the thread's checkpoints, runs and
//! files. The DeerFlow UI treats any 2xx or 404 as success, so the LangGraph contract wins.
//!
//! Errors are `{"detail": …}`: 4xx for anything the caller can fix, 5xx only for failures of
//! the server itself (logged).

pub mod agents;
pub mod artifacts;
pub mod channels;
pub mod compact;
pub mod config;
pub mod conversation;
pub mod files;
pub mod goal;
pub mod history;
pub mod integrations;
pub mod mcp;
pub mod memory;
pub mod polish;
pub mod scheduled;
pub mod seed;
pub mod skill_install;
pub mod skills;
pub mod threads;
pub mod uploads;
pub mod workspace_changes;

use crate::app::AppState;
use crate::auth::routes as auth;
use crate::authz::{Allowed, Routes, Verb};
use crate::error::ApiResult;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};

/// The gateway routes, relative to `/api`, with who may call them.
pub fn routes(state: &AppState) -> Routes {
    use Allowed::*;
    use Verb::*;
    let u = &state.settings.app.uploads;
    let upload_limit = usize::try_from(u.max_total_size)
        .unwrap_or(usize::MAX)
        .saturating_add(uploads::MULTIPART_SLACK);
    Routes::new()
        .route("/models", &[(Get, User)], get(config::models))
        .route("/models/{name}", &[(Get, User)], get(config::model))
        .route("/features", &[(Get, User)], get(config::features))
        .route(
            "/agents",
            &[(Get, User), (Post, User)],
            get(agents::list).post(agents::create),
        )
        .route("/agents/check", &[(Get, User)], get(agents::check))
        .route(
            "/agents/{name}",
            &[(Get, User), (Put, User), (Delete, User)],
            get(agents::get_one)
                .put(agents::update)
                .delete(agents::delete),
        )
        .route(
            "/user-profile",
            &[(Get, User), (Put, User)],
            get(agents::get_profile).put(agents::put_profile),
        )
        .route(
            "/v1/auth/setup-status",
            &[(Get, Public)],
            get(auth::setup_status),
        )
        .route(
            "/v1/auth/initialize",
            &[(Post, Public)],
            post(auth::initialize),
        )
        .route("/v1/auth/register", &[(Post, Public)], post(auth::register))
        .route("/v1/auth/login/local", &[(Post, Public)], post(auth::login))
        .route("/v1/auth/logout", &[(Post, Public)], post(auth::logout))
        .route("/v1/auth/providers", &[(Get, Public)], get(auth::providers))
        .route("/v1/auth/me", &[(Get, User)], get(auth::me))
        .route(
            "/v1/auth/change-password",
            &[(Post, User)],
            post(auth::change_password),
        )
        .route(
            "/v1/auth/api-keys",
            &[(Get, Admin), (Post, Admin)],
            get(auth::list_keys).post(auth::create_key),
        )
        .route(
            "/v1/auth/api-keys/{key_id}",
            &[(Delete, Admin)],
            delete(auth::revoke_key),
        )
        .route(
            "/threads/{thread_id}/uploads",
            &[(Post, User)],
            post(uploads::upload).layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route(
            "/threads/{thread_id}/uploads/list",
            &[(Get, User)],
            get(uploads::list),
        )
        .route(
            "/threads/{thread_id}/uploads/limits",
            &[(Get, User)],
            get(uploads::limits),
        )
        .route(
            "/threads/{thread_id}/uploads/{filename}",
            &[(Delete, User)],
            delete(uploads::delete),
        )
        .route(
            "/threads/{thread_id}/artifacts/{*path}",
            &[(Get, User), (Put, User)],
            get(artifacts::get).put(artifacts::put),
        )
        .route("/skills", &[(Get, User)], get(skills::list))
        .route("/skills/reload", &[(Post, Admin)], post(skills::reload))
        .route(
            "/skills/install",
            &[(Post, Admin)],
            post(skill_install::install),
        )
        .route("/skills/custom", &[(Get, User)], get(skills::list_custom))
        .route(
            "/skills/custom/{name}",
            &[(Get, Admin), (Put, Admin), (Delete, Admin)],
            get(skills::get_custom)
                .put(skills::put_custom)
                .delete(skills::delete_custom),
        )
        .route(
            "/skills/custom/{name}/history",
            &[(Get, Admin)],
            get(skills::history),
        )
        .route(
            "/skills/custom/{name}/rollback",
            &[(Post, Admin)],
            post(skills::rollback),
        )
        .route(
            "/skills/{name}",
            &[(Get, User), (Put, Admin)],
            get(skills::get_one).put(skills::put),
        )
        .route(
            "/mcp/config",
            &[(Get, User), (Put, Admin), (Patch, Admin)],
            get(mcp::get).put(mcp::put).patch(mcp::patch),
        )
        .route("/mcp/cache/reset", &[(Post, Admin)], post(mcp::reset))
        .route(
            "/memory",
            &[(Get, User), (Delete, User)],
            get(memory::get).delete(memory::clear),
        )
        .route("/memory/reload", &[(Post, User)], post(memory::get))
        .route("/memory/facts", &[(Post, User)], post(memory::add_fact))
        .route(
            "/memory/facts/{fact_id}",
            &[(Patch, User), (Delete, User)],
            axum::routing::patch(memory::patch_fact).delete(memory::delete_fact),
        )
        .route("/memory/export", &[(Get, User)], get(memory::export))
        .route("/memory/import", &[(Post, User)], post(memory::import))
        .route("/memory/config", &[(Get, User)], get(memory::config))
        .route("/memory/status", &[(Get, User)], get(memory::status))
        .route(
            "/channels/providers",
            &[(Get, User)],
            get(channels::providers),
        )
        .route(
            "/channels/connections",
            &[(Get, User)],
            get(channels::connections),
        )
        .route(
            "/channels/connections/{id}",
            &[(Delete, User)],
            delete(channels::unsupported),
        )
        .route(
            "/channels/{provider}/connect",
            &[(Post, User)],
            post(channels::unsupported),
        )
        .route(
            "/channels/{provider}/runtime-config",
            &[(Post, User), (Put, User), (Delete, User)],
            post(channels::unsupported)
                .put(channels::unsupported)
                .delete(channels::unsupported),
        )
        .route(
            "/integrations/lark/status",
            &[(Get, User)],
            get(integrations::lark_status),
        )
        .route(
            "/suggestions/config",
            &[(Get, User)],
            get(threads::suggestions_config),
        )
        .route(
            "/threads/{thread_id}/suggestions",
            &[(Post, User)],
            post(threads::suggestions),
        )
        .route(
            "/threads/{thread_id}/token-usage",
            &[(Get, User)],
            get(threads::token_usage),
        )
        .route(
            "/threads/{thread_id}/messages/page",
            &[(Get, User)],
            get(history::messages_page),
        )
        .route(
            "/threads/{thread_id}/messages",
            &[(Get, User)],
            get(history::messages),
        )
        .route(
            "/threads/{thread_id}/runs/regenerate/prepare",
            &[(Post, User)],
            post(conversation::regenerate),
        )
        .route(
            "/threads/{thread_id}/runs/edit-regenerate/prepare",
            &[(Post, User)],
            post(conversation::edit),
        )
        .route(
            "/threads/{thread_id}/branches",
            &[(Post, User)],
            post(conversation::branch),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/messages",
            &[(Get, User)],
            get(history::run_messages),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/events",
            &[(Get, User)],
            get(history::run_events),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/workspace-changes",
            &[(Get, User)],
            get(workspace_changes::get),
        )
        .route(
            "/test-only/seed-runs",
            &[(Post, User)],
            post(seed::seed_runs),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/feedback",
            &[(Get, User), (Put, User), (Post, User), (Delete, User)],
            get(history::list_feedback)
                .put(history::put_feedback)
                .post(history::post_feedback)
                .delete(history::delete_feedback),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/feedback/stats",
            &[(Get, User)],
            get(history::feedback_stats),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/feedback/{feedback_id}",
            &[(Delete, User)],
            delete(history::delete_feedback_by_id),
        )
        .route(
            "/threads/{thread_id}/compact",
            &[(Post, User)],
            post(compact::compact),
        )
        .route(
            "/threads/{thread_id}/goal",
            &[(Get, User), (Put, User), (Delete, User)],
            get(goal::get).put(goal::put).delete(goal::delete),
        )
        .route("/input-polish", &[(Post, User)], post(polish::polish))
        .route(
            "/scheduled-tasks",
            &[(Get, User), (Post, User)],
            get(scheduled::list).post(scheduled::create),
        )
        .route(
            "/scheduled-tasks/{task_id}",
            &[(Get, User), (Patch, User), (Delete, User)],
            get(scheduled::get_one)
                .patch(scheduled::update)
                .delete(scheduled::delete),
        )
        .route(
            "/scheduled-tasks/{task_id}/pause",
            &[(Post, User)],
            post(scheduled::pause),
        )
        .route(
            "/scheduled-tasks/{task_id}/resume",
            &[(Post, User)],
            post(scheduled::resume),
        )
        .route(
            "/scheduled-tasks/{task_id}/trigger",
            &[(Post, User)],
            post(scheduled::trigger),
        )
        .route(
            "/scheduled-tasks/{task_id}/runs",
            &[(Get, User)],
            get(scheduled::runs),
        )
        .route(
            "/threads/{thread_id}/scheduled-tasks",
            &[(Get, User)],
            get(scheduled::for_thread),
        )
}

/// A thread id in a gateway path: see [`crate::extract::deerflow_thread_id`].
pub fn thread_param(raw: &str) -> ApiResult<String> {
    crate::extract::deerflow_thread_id(raw)
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
