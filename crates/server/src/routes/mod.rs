//! The LangGraph Platform API router, mounted at `/`, `/api/langgraph` and `/api`; under
//! `/api` it is merged with DeerFlow's gateway routes ([`crate::gateway`]). Every route
//! declares who may call it ([`crate::authz`]). Under the two `/api` mounts thread ids may
//! also be DeerFlow's plain ids ([`crate::extract::deerflow_ids`]); at `/` they are UUIDs.

pub mod assistants;
pub mod crons;
pub mod meta;
pub mod runs;
pub mod store;
pub mod thread_storage;
pub mod threads;

use crate::app::AppState;
use crate::authz::{Allowed, Routes, Spec, Verb};
use crate::error::{method_not_allowed_fallback, not_found_fallback};
use crate::extract::BodyLimit;
use axum::Router;
use axum::routing::{get, post};

fn api() -> Routes {
    use Allowed::*;
    use Verb::*;
    Routes::new()
        .route("/", &[(Get, Public)], get(meta::ok))
        .route("/ok", &[(Get, Public)], get(meta::ok))
        .route("/info", &[(Get, Public)], get(meta::info))
        .route("/health", &[(Get, Public)], get(meta::health))
        .route("/metrics", &[(Get, Metrics)], get(meta::metrics))
        .route(
            "/openapi.json",
            &[(Get, Public)],
            get(crate::openapi::openapi),
        )
        .route("/docs", &[(Get, Public)], get(crate::openapi::docs))
        .route("/internal/truncate", &[(Post, Admin)], post(meta::truncate))
        .route("/assistants", &[(Post, User)], post(assistants::create))
        .route(
            "/assistants/search",
            &[(Post, User)],
            post(assistants::search),
        )
        .route(
            "/assistants/count",
            &[(Post, User)],
            post(assistants::count),
        )
        .route(
            "/assistants/{assistant_id}",
            &[(Get, User), (Patch, User), (Delete, User)],
            get(assistants::get_one)
                .patch(assistants::patch)
                .delete(assistants::delete),
        )
        .route(
            "/assistants/{assistant_id}/graph",
            &[(Get, User)],
            get(assistants::graph),
        )
        .route(
            "/assistants/{assistant_id}/schemas",
            &[(Get, User)],
            get(assistants::schemas),
        )
        .route(
            "/assistants/{assistant_id}/subgraphs",
            &[(Get, User)],
            get(assistants::subgraphs),
        )
        .route(
            "/assistants/{assistant_id}/subgraphs/{namespace}",
            &[(Get, User)],
            get(assistants::subgraphs_ns),
        )
        .route(
            "/assistants/{assistant_id}/versions",
            &[(Post, User)],
            post(assistants::versions),
        )
        .route(
            "/assistants/{assistant_id}/latest",
            &[(Post, User)],
            post(assistants::latest),
        )
        .route("/threads", &[(Post, User)], post(threads::create))
        .route("/threads/search", &[(Post, User)], post(threads::search))
        .route("/threads/count", &[(Post, User)], post(threads::count))
        .route("/threads/prune", &[(Post, User)], post(threads::prune))
        .route(
            "/threads/{thread_id}",
            &[(Get, User), (Patch, User), (Delete, User)],
            get(threads::get_one)
                .patch(threads::patch)
                .delete(threads::delete),
        )
        .route(
            "/threads/{thread_id}/copy",
            &[(Post, User)],
            post(threads::copy),
        )
        .route(
            "/threads/{thread_id}/state",
            &[(Get, User), (Post, User), (Patch, User)],
            get(threads::get_state)
                .post(threads::update_state)
                .patch(threads::patch_state),
        )
        .route(
            "/threads/{thread_id}/state/checkpoint",
            &[(Post, User)],
            post(threads::state_at_checkpoint_post),
        )
        .route(
            "/threads/{thread_id}/state/{checkpoint_id}",
            &[(Get, User)],
            get(threads::state_at_checkpoint),
        )
        .route(
            "/threads/{thread_id}/history",
            &[(Get, User), (Post, User)],
            get(threads::history_get).post(threads::history_post),
        )
        .route(
            "/threads/{thread_id}/stream",
            &[(Get, User)],
            get(runs::thread_stream),
        )
        .route(
            "/threads/{thread_id}/storage",
            &[(Get, User)],
            get(thread_storage::get),
        )
        .route(
            "/threads/{thread_id}/runs",
            &[(Get, User), (Post, User)],
            get(runs::list).post(runs::create_background),
        )
        .route(
            "/threads/{thread_id}/runs/stream",
            &[(Post, User)],
            post(runs::create_stream),
        )
        .route(
            "/threads/{thread_id}/runs/wait",
            &[(Post, User)],
            post(runs::create_wait),
        )
        .route(
            "/threads/{thread_id}/runs/crons",
            &[(Post, User)],
            post(crons::create_for_thread),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}",
            &[(Get, User), (Delete, User)],
            get(runs::get_one).delete(runs::delete),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/cancel",
            &[(Post, User)],
            post(runs::cancel_one),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/join",
            &[(Get, User)],
            get(runs::join),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/stream",
            &[(Get, User)],
            get(runs::join_stream),
        )
        .route("/runs", &[(Post, User)], post(runs::stateless_background))
        .route(
            "/runs/stream",
            &[(Post, User)],
            post(runs::stateless_stream),
        )
        .route("/runs/wait", &[(Post, User)], post(runs::stateless_wait))
        .route("/runs/batch", &[(Post, User)], post(runs::batch))
        .route("/runs/cancel", &[(Post, User)], post(runs::cancel_many))
        .route(
            "/runs/{run_id}/stream",
            &[(Get, User)],
            get(runs::join_stream_threadless),
        )
        .route("/runs/crons", &[(Post, User)], post(crons::create))
        .route("/runs/crons/search", &[(Post, User)], post(crons::search))
        .route("/runs/crons/count", &[(Post, User)], post(crons::count))
        .route(
            "/runs/crons/{cron_id}",
            &[(Get, User), (Patch, User), (Delete, User)],
            get(crons::get_one)
                .patch(crons::patch)
                .delete(crons::delete),
        )
        .route(
            "/store/items",
            &[(Get, User), (Put, User), (Delete, User)],
            get(store::get_item)
                .put(store::put_item)
                .delete(store::delete_item),
        )
        .route("/store/items/search", &[(Post, User)], post(store::search))
        .route(
            "/store/namespaces",
            &[(Post, User)],
            post(store::namespaces),
        )
        .merge(crate::protocol::routes())
}

/// Where the LangGraph API is mounted (the gateway is under `/api` only).
pub const MOUNTS: [&str; 3] = ["", "/api/langgraph", "/api"];

/// Every route with its access rule, under each mount: what the authorization tests walk.
pub fn table(state: &AppState) -> Vec<(String, Spec)> {
    let api = api();
    let gateway = crate::gateway::routes(state);
    let mut out = Vec::new();
    for mount in MOUNTS {
        for spec in api.specs() {
            out.push((format!("{mount}{}", spec.path), spec.clone()));
        }
    }
    for spec in gateway.specs() {
        out.push((format!("/api{}", spec.path), spec.clone()));
    }
    out
}

/// The whole HTTP app.
pub fn router(state: AppState) -> Router {
    let api = api()
        .into_router()
        .method_not_allowed_fallback(method_not_allowed_fallback);
    let gateway = crate::gateway::routes(&state)
        .into_router()
        .method_not_allowed_fallback(method_not_allowed_fallback);
    let with_gateway = api
        .clone()
        .merge(gateway)
        .layer(axum::middleware::from_fn(crate::extract::deerflow_ids));
    let cors = crate::access::cors(&state.access);
    Router::new()
        .merge(api.clone())
        .nest(
            "/api/langgraph",
            api.layer(axum::middleware::from_fn(crate::extract::deerflow_ids)),
        )
        .nest("/api", with_gateway)
        .fallback(not_found_fallback)
        .layer(axum::Extension(BodyLimit(state.body_limit)))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::access::guard,
        ))
        .layer(cors)
        .layer(axum::middleware::from_fn(crate::observe::observe))
        .with_state(state)
}
