//! The HTTP face of Fawn: the LangGraph Platform API (mounted at `/`, `/api/langgraph` and
//! `/api`), DeerFlow's gateway API (under `/api` only: models, uploads, artifacts, skills,
//! MCP config, memory, …; see [`gateway`]), SSE framing, lenient request bodies and the one
//! error envelope. The only crate that knows HTTP and the LangGraph wire format. It drives
//! runs only through the runtime's API (`fawn_runtime`): it must never claim, execute or
//! finish a run, write a checkpoint itself, or know how storage is laid out.

pub mod access;
pub mod app;
pub mod auth;
pub mod authz;
pub mod error;
pub mod extract;
pub mod gateway;
pub mod observe;
pub mod openapi;
pub mod protocol;
pub mod routes;
pub mod sse;
pub mod wire;

pub use app::{AppHandle, AppOptions, AppState, Application, BuildError, Clock, bind_listener};
pub use fawn_runtime::{Graphs, LEAD_AGENT, default_graphs, system_assistant_id};

/// Version reported by `/info`.
pub const VERSION: &str = fawn_runtime::VERSION;
