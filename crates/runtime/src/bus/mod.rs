//! The event bus: how the events of a run executing on one node reach clients joined to it
//! on another. One trait, [`EventBus`], three implementations, picked once per process:
//!
//! | bus | when | what crosses nodes |
//! |---|---|---|
//! | [`LocalBus`] | SQLite (one process serves the store) | nothing: every run executes here |
//! | [`postgres::PgBus`] | Postgres, no Redis | steps: the joining node relays the run from the stored checkpoints, woken by `NOTIFY` |
//! | [`redis::RedisBus`] | `REDIS_URL` or `stream_bridge: {type: redis}` | every event, ids kept, through Redis Streams |
//!
//! The node that executes a run *mirrors* its log into the bus; a node whose client joins a
//! run executing elsewhere *follows* it, feeding its local log for its local subscribers. A
//! stream started on a node streams from that node's log and never crosses the bus.

pub mod postgres;
pub mod redis;

use crate::broker::{Mirror, RunLog};
use crate::runtime::RuntimeHandle;
use fawn_checkpoint::Run;
use std::sync::Arc;

/// How runs' events travel between the nodes sharing one store.
pub trait EventBus: Send + Sync + std::fmt::Debug {
    /// A name for logs and `/info`.
    fn kind(&self) -> &'static str;
    /// Where the log of a run executing here hands its events, or `None` when nothing
    /// leaves this node.
    fn mirror(&self) -> Option<Mirror>;
    /// Feeds `log` with the events of `run`, which another node executes (or will), until
    /// the run ends there or starts executing here.
    fn follow(&self, rt: &RuntimeHandle, run: &Run, log: Arc<RunLog>);
    /// `run_id` executes here now: stop feeding its log from elsewhere.
    fn unfollow(&self, run_id: &str);
    /// Another node announced progress of `run_id` through the store (Postgres `NOTIFY`).
    fn progress(&self, run_id: &str) {
        let _ = run_id;
    }
}

/// One process serves the store: every run executes in this process, so nothing is relayed.
#[derive(Debug, Default)]
pub struct LocalBus;

impl EventBus for LocalBus {
    fn kind(&self) -> &'static str {
        "local"
    }
    fn mirror(&self) -> Option<Mirror> {
        None
    }
    fn follow(&self, _rt: &RuntimeHandle, _run: &Run, _log: Arc<RunLog>) {}
    fn unfollow(&self, _run_id: &str) {}
}

impl EventBus for redis::RedisBus {
    fn kind(&self) -> &'static str {
        "redis"
    }
    fn mirror(&self) -> Option<Mirror> {
        Some(self.mirror_fn())
    }
    fn follow(&self, _rt: &RuntimeHandle, run: &Run, log: Arc<RunLog>) {
        self.follow_stream(&run.run_id, log);
    }
    fn unfollow(&self, run_id: &str) {
        self.unfollow_stream(run_id);
    }
}
