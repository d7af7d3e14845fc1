//! The run manager. The runs table is the queue: a run is claimed with a lease (in-process
//! notify for immediate pickup, jittered polling for runs created by other processes),
//! executed here through its graph's [`GraphRunner`], kept alive by heartbeats at lease/3
//! (which also deliver cancellations requested by other processes; [`renew`] renews every
//! run of the node in one statement per round), and finished with a
//! terminal status written before its stream closes. A reaper returns runs whose worker died
//! to the queue; they resume from their last checkpoint with `attempt` + 1.
//!
//! One file per concern: [`queue`] (the in-process side of the queue: submit, dispatcher,
//! reaper, shutdown), [`execute`] (one attempt of a claimed run: lease, heartbeats, spec,
//! graph, goal turns), [`finish`] (the end of an attempt: status, wire body, journal,
//! webhook, temporary threads) and [`cancel`] (cancel, delete, wait, signals of other
//! processes).
//!
//! [`GraphRunner`]: fawn_agent::GraphRunner

mod cancel;
mod execute;
mod finish;
mod queue;
mod renew;

pub use cancel::{cancel, delete_run, wait_terminal};
pub use finish::{error_body, result_body, thread_result, wait_result};
pub use queue::{
    DEFAULT_MAX_CONCURRENT_RUNS, MEMORY_PER_RUN, QueueConfig, default_max_concurrent_runs,
};
// The queue's machinery is the runtime's alone: no caller claims, executes or finishes a
// run (the compiler enforces it).
pub(crate) use cancel::follow_signals;
pub(crate) use execute::publish_metadata;
pub(crate) use queue::{
    Queue, dispatcher, reap, reaper, relay_remote_run, reserve, shutdown, submit,
};

use crate::broker::RunLog;
use crate::kwargs::RunKwargs;
use crate::runtime::RuntimeHandle;
use fawn_checkpoint::{CancelAction, Checkpoint, Run};
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
/// Why a run's token fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Cancel(CancelAction),
    /// The server is shutting down: release the run for another worker.
    Shutdown,
    /// Another worker took the run over (our lease expired).
    LostLease,
}

/// A run executing in this process.
#[derive(Debug)]
pub struct ActiveRun {
    pub token: CancellationToken,
    reason: Mutex<Option<StopReason>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl ActiveRun {
    fn new() -> ActiveRun {
        ActiveRun {
            token: CancellationToken::new(),
            reason: Mutex::new(None),
        }
    }

    /// Fires the token with a reason (the first reason wins).
    pub fn stop(&self, reason: StopReason) {
        {
            let mut r = lock(&self.reason);
            if r.is_none() {
                *r = Some(reason);
            }
        }
        self.token.cancel();
    }

    pub fn reason(&self) -> Option<StopReason> {
        *lock(&self.reason)
    }
}

/// One attempt of a claimed run, as its execution hands it to its end: the run row (with
/// its claim), its options, its event log, its stop token and what the journal compares the
/// run's messages with.
struct Attempt<'a> {
    rt: &'a RuntimeHandle,
    /// The run row as claimed (this worker holds its lease).
    run: &'a Run,
    /// The run's stored options (defaults when they could not be read: the run then ends
    /// as an error).
    kw: RunKwargs,
    log: Arc<RunLog>,
    active: &'a Arc<ActiveRun>,
    started_at: chrono::DateTime<chrono::Utc>,
    /// The thread's state when the run started (not for temporary threads).
    journal_start: Option<crate::journal::Start>,
}

pub(crate) fn state_value(state: &fawn_state::ThreadState) -> Value {
    serde_json::to_value(state).unwrap_or_else(|_| Value::Object(Map::new()))
}

/// The thread's latest checkpoint (for summaries when the run wrote none).
pub(crate) async fn latest_checkpoint(rt: &RuntimeHandle, thread_id: &str) -> Option<Checkpoint> {
    rt.store
        .get_checkpoint(thread_id, "", None)
        .await
        .ok()
        .flatten()
}
