//! The thread-centric streaming protocol that langgraph-sdk 0.4's `client.threads.stream()`
//! speaks (the official server's "v2 event streaming"; its message schema is the
//! `langchain-protocol` package): commands in, filtered event streams out, over SSE or a
//! WebSocket.
//!
//! | route | what |
//! |---|---|
//! | `POST /threads/{thread_id}/commands` | one command, one response ([`commands`]) |
//! | `POST /threads/{thread_id}/stream/events` | an SSE stream of the events one filter matches ([`http`]) |
//! | `GET /threads/{thread_id}/stream/events` (WebSocket) | commands and events, full duplex ([`ws`]) |
//! | `GET /threads/{thread_id}/runs/{run_id}/protocol` (WebSocket) | the same, bound to one run |
//!
//! Nothing here executes a graph: `run.start` and friends create runs through
//! [`fawn_runtime::create`] (streaming every mode the protocol projects), and events are
//! projected ([`project`]) from the runs' logs, read one run after the other through
//! [`fawn_runtime::thread_feed`] — the logs the classic run streams read, relayed from other
//! nodes the way joins are. Every route is the caller's own: another user's thread is a 404,
//! and a stream of a thread that does not exist yet shows only the caller's runs.

pub mod commands;
pub mod http;
pub mod project;
pub mod session;
pub mod wire;
pub mod ws;

use crate::authz::{Allowed, Routes, Verb};
use axum::routing::{get, post};

/// The protocol's routes, with their access rules.
pub fn routes() -> Routes {
    Routes::new()
        .route(
            "/threads/{thread_id}/commands",
            &[(Verb::Post, Allowed::User)],
            post(http::command),
        )
        .route(
            "/threads/{thread_id}/stream/events",
            &[(Verb::Get, Allowed::User), (Verb::Post, Allowed::User)],
            get(ws::thread_socket).post(http::stream_events),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/protocol",
            &[(Verb::Get, Allowed::User)],
            get(ws::run_socket),
        )
}
