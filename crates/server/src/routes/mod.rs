//! The LangGraph Platform API router, mounted at `/`, `/api/langgraph` and `/api`; under
//! `/api` it is merged with DeerFlow's gateway routes ([`crate::gateway`]).

pub mod assistants;
pub mod crons;
pub mod meta;
pub mod runs;
pub mod store;
pub mod threads;

use crate::app::AppState;
use crate::error::{method_not_allowed_fallback, not_found_fallback};
use crate::extract::BodyLimit;
use axum::Router;
use axum::routing::{get, post};

fn api() -> Router<AppState> {
    Router::new()
        // meta
        .route("/", get(meta::ok))
        .route("/ok", get(meta::ok))
        .route("/info", get(meta::info))
        .route("/health", get(meta::health))
        .route("/internal/truncate", post(meta::truncate))
        // assistants
        .route("/assistants", post(assistants::create))
        .route("/assistants/search", post(assistants::search))
        .route("/assistants/count", post(assistants::count))
        .route(
            "/assistants/{assistant_id}",
            get(assistants::get_one)
                .patch(assistants::patch)
                .delete(assistants::delete),
        )
        .route("/assistants/{assistant_id}/graph", get(assistants::graph))
        .route(
            "/assistants/{assistant_id}/schemas",
            get(assistants::schemas),
        )
        .route(
            "/assistants/{assistant_id}/subgraphs",
            get(assistants::subgraphs),
        )
        .route(
            "/assistants/{assistant_id}/subgraphs/{namespace}",
            get(assistants::subgraphs_ns),
        )
        .route(
            "/assistants/{assistant_id}/versions",
            post(assistants::versions),
        )
        .route(
            "/assistants/{assistant_id}/latest",
            post(assistants::latest),
        )
        // threads
        .route("/threads", post(threads::create))
        .route("/threads/search", post(threads::search))
        .route("/threads/count", post(threads::count))
        .route("/threads/prune", post(threads::prune))
        .route(
            "/threads/{thread_id}",
            get(threads::get_one)
                .patch(threads::patch)
                .delete(threads::delete),
        )
        .route("/threads/{thread_id}/copy", post(threads::copy))
        .route(
            "/threads/{thread_id}/state",
            get(threads::get_state)
                .post(threads::update_state)
                .patch(threads::patch_state),
        )
        .route(
            "/threads/{thread_id}/state/checkpoint",
            post(threads::state_at_checkpoint_post),
        )
        .route(
            "/threads/{thread_id}/state/{checkpoint_id}",
            get(threads::state_at_checkpoint),
        )
        .route(
            "/threads/{thread_id}/history",
            get(threads::history_get).post(threads::history_post),
        )
        .route("/threads/{thread_id}/stream", get(runs::thread_stream))
        // thread runs
        .route(
            "/threads/{thread_id}/runs",
            get(runs::list).post(runs::create_background),
        )
        .route(
            "/threads/{thread_id}/runs/stream",
            post(runs::create_stream),
        )
        .route("/threads/{thread_id}/runs/wait", post(runs::create_wait))
        .route(
            "/threads/{thread_id}/runs/crons",
            post(crons::create_for_thread),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}",
            get(runs::get_one).delete(runs::delete),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/cancel",
            post(runs::cancel_one),
        )
        .route("/threads/{thread_id}/runs/{run_id}/join", get(runs::join))
        .route(
            "/threads/{thread_id}/runs/{run_id}/stream",
            get(runs::join_stream),
        )
        // stateless runs
        .route("/runs", post(runs::stateless_background))
        .route("/runs/stream", post(runs::stateless_stream))
        .route("/runs/wait", post(runs::stateless_wait))
        .route("/runs/batch", post(runs::batch))
        .route("/runs/cancel", post(runs::cancel_many))
        .route("/runs/{run_id}/stream", get(runs::join_stream_threadless))
        // crons
        .route("/runs/crons", post(crons::create))
        .route("/runs/crons/search", post(crons::search))
        .route("/runs/crons/count", post(crons::count))
        .route(
            "/runs/crons/{cron_id}",
            get(crons::get_one)
                .patch(crons::patch)
                .delete(crons::delete),
        )
        // store
        .route(
            "/store/items",
            get(store::get_item)
                .put(store::put_item)
                .delete(store::delete_item),
        )
        .route("/store/items/search", post(store::search))
        .route("/store/namespaces", post(store::namespaces))
        .method_not_allowed_fallback(method_not_allowed_fallback)
}

/// The whole HTTP app.
pub fn router(state: AppState) -> Router {
    let api = api();
    let with_gateway = api.clone().merge(crate::gateway::router(&state));
    let cors = crate::access::cors(&state.access);
    Router::new()
        .merge(api.clone())
        .nest("/api/langgraph", api.clone())
        .nest("/api", with_gateway)
        .fallback(not_found_fallback)
        .layer(axum::Extension(BodyLimit(state.body_limit)))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::access::guard,
        ))
        .layer(cors)
        .with_state(state)
}
