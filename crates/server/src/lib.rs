//! The HTTP face of Fawn: the LangGraph Platform API (mounted at `/`, `/api/langgraph` and
//! `/api`), DeerFlow's gateway API (under `/api` only: models, uploads, artifacts, skills,
//! MCP config, memory, …; see [`gateway`]), the run manager (the runs table as a durable
//! queue: leases, heartbeats, reaper, recovery, cancellation, multitask strategies, webhooks,
//! crons) and the stream broker (SSE, resumable replay with `Last-Event-ID`). The only crate that knows HTTP and the LangGraph
//! wire format. It must never know how a graph works inside (it only drives a
//! `GraphRunner`) nor how storage is laid out (it only calls the `Persistence` traits).

pub mod app;
pub mod crons;
pub mod error;
pub mod extract;
pub mod gateway;
pub mod graphs;
pub mod routes;
pub mod runs;
pub mod sse;
pub mod stream;
pub mod testing;
pub mod wire;

pub use app::{
    AppHandle, AppOptions, AppState, Application, BuildError, Clock, bind_listener, default_graphs,
};
pub use graphs::{Graphs, LEAD_AGENT, system_assistant_id};

/// Version reported by `/info`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
