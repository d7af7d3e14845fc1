//! The run lifecycle of Fawn: typed run creation ([`create`], [`kwargs`]), the runs table
//! as a durable queue and its workers — claim, lease, heartbeat, reaper, recovery,
//! cancellation, multitask follow-ups ([`runs`]) —, execution through a graph's
//! `GraphRunner`, checkpoint writing under the run's durability ([`checkpoints`]: the one
//! writer of checkpoint metadata), finishing (status derivation, webhooks), the per-run event
//! logs ([`broker`]) fed by the run's observer ([`observer`]) and joined from any node
//! ([`join`]), crons ([`crons`]), the test-only run seeder's writes ([`seed`]), thread
//! operations that are more than a store call ([`threads`]) and the agent's process-wide
//! services ([`services`]: sandbox provider, MCP hub, skills cache, memory).
//!
//! It must never know HTTP: no routes, status codes, headers or SSE framing. Callers get
//! typed results and a [`RuntimeError`] whose variants say what went wrong, not how to answer.

pub mod broker;
pub mod bus;
pub mod checkpoints;
pub mod compact;
pub mod conversation;
pub mod create;
pub mod crons;
pub mod error;
pub mod goal;
pub mod graphs;
pub mod hooks;
pub mod join;
pub mod journal;
pub mod kwargs;
pub mod observer;
pub mod retention;
pub mod runs;
pub mod runtime;
pub mod scheduled;
pub mod seed;
pub mod services;
pub mod testing;
pub mod thread_feed;
pub mod threads;
pub mod webhook;
pub mod wire;

pub use error::{Result, RuntimeError};
pub use graphs::{Graphs, LEAD_AGENT, system_assistant_id};
pub use kwargs::{Durability, OnDisconnect, RunKwargs};
pub use runtime::{
    BuildError, Clock, DemoInfo, Runtime, RuntimeHandle, RuntimeOptions, default_graphs,
};

/// Version reported by `/info` and stored in checkpoint metadata.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
