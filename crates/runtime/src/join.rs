//! Joining a run's event stream from any node: which log a join subscribes to (opened here,
//! and relayed from the database, when another node executes the run) and the check a joined
//! stream makes at each heartbeat. The server calls these; it never opens or finishes a log
//! itself (the broker is private to the runtime; its `clippy.toml` also forbids
//! `Broker::open` and `Broker::finish`). Reads of the logs are the `Runtime` methods below.

use crate::broker::{RunLog, ThreadWatch};
use crate::kwargs::RunKwargs;
use crate::runtime::{Runtime, RuntimeHandle};
use fawn_checkpoint::Run;
use std::sync::Arc;

/// The log a client joining `run` subscribes to: this node's, or, for a run still active
/// that this node has no log of, a new one (fed by the bus when another node executes the
/// run). `None` for a finished run this node kept no log of.
pub fn log_to_join(rt: &RuntimeHandle, run: &Run) -> Option<Arc<RunLog>> {
    if let Some(log) = rt.broker.get(&run.run_id) {
        return Some(log);
    }
    if !run.status.is_active() {
        return None;
    }
    let resumable = RunKwargs::from_map(&run.kwargs).is_ok_and(|k| k.resumable);
    let log = rt.broker.open(&run.run_id, &run.thread_id, resumable);
    if rt.queue.active(&run.run_id).is_none() {
        // Executed (or about to be) by another node: relay it from the database.
        crate::runs::relay_remote_run(rt, run, log.clone());
    }
    Some(log)
}

/// Has run `run_id` ended without this process closing its log (another node finished it,
/// or it is gone)? If so its log is closed here, and the joined stream can end.
pub async fn ended_elsewhere(rt: &RuntimeHandle, run_id: &str) -> bool {
    if rt.queue.is_local(run_id) {
        return false;
    }
    match rt.store.get_run(run_id).await {
        Ok(Some(r)) if r.status.is_active() => false,
        Ok(_) => {
            rt.broker.finish(run_id, None);
            true
        }
        Err(_) => false,
    }
}

/// What callers read of the event logs (the broker itself is private to the runtime).
impl Runtime {
    /// This node's event log of run `run_id`, if it has one.
    pub fn run_log(&self, run_id: &str) -> Option<Arc<RunLog>> {
        self.broker.get(run_id)
    }

    /// Watches the runs of `thread_id` on this node (the thread stream).
    pub fn watch_thread(&self, thread_id: &str) -> ThreadWatch {
        self.broker.hub.subscribe(thread_id)
    }

    /// This node's logs of the runs of `thread_id`.
    pub fn thread_logs(&self, thread_id: &str) -> Vec<Arc<RunLog>> {
        self.broker.logs_of_thread(thread_id)
    }
}
