//! Retention: what the sweeper may remove, and the store operations it uses
//! ([`RetentionStore`]). The policy comes from `checkpointer.retention` and
//! `checkpointer.ttl` in `config.yaml`; the schedule and the lease between nodes live in
//! the runtime (`fawn_runtime::retention`).
//!
//! Checkpoint pruning works on one thread's root namespace at a time and never removes a
//! checkpoint that a history feature reads: the head and every leaf, turn starts (any
//! checkpoint not written by the step loop: `input`, `update`, `fork`, …) and turn ends
//! (nothing scheduled next), checkpoints waiting on an interrupt or holding pending writes,
//! branch points (two or more children, or a child not written by the loop), the checkpoint
//! a branch thread was made from (`branch_parent_checkpoint_id`), and whatever the policy
//! keeps (the newest `keep_turns` turns, everything newer than `keep_after`). Threads with
//! a pending or running run, and threads with subgraph namespaces, are left alone.
//!
//! A kept checkpoint whose parent goes is re-based onto its nearest kept ancestor in the
//! same transaction: the writes of the removed steps are put in front of its own (exact:
//! only writes the replayer already folds into one are joined), or, when that is not
//! exact (removals of messages, writes whose message ids were assigned when they were
//! stored), it gets a snapshot of its own. A batch is planned (and the joined writes
//! computed) from a read; the write transaction only checks that what the plan relied on
//! is unchanged (else the batch is left for the next sweep) and applies it.

use crate::PruneStrategy;
use chrono::{DateTime, Utc};

/// Which intermediate checkpoints [`RetentionStore::prune_checkpoints`] removes.
#[derive(Clone, Debug, PartialEq)]
pub struct PrunePolicy {
    /// Checkpoints of the newest this-many turns (runs' `input` checkpoints) stay; `None`:
    /// turns do not protect anything.
    pub keep_turns: Option<u32>,
    /// Checkpoints created at or after this instant stay; `None`: age does not protect.
    pub keep_after: Option<DateTime<Utc>>,
    /// Checkpoints removed per transaction.
    pub batch: usize,
    /// At most this many batches per call (the sweeper comes back next time).
    pub max_batches: usize,
}

impl Default for PrunePolicy {
    fn default() -> Self {
        PrunePolicy {
            keep_turns: None,
            keep_after: None,
            batch: 100,
            max_batches: 50,
        }
    }
}

/// What one [`RetentionStore::prune_checkpoints`] call did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneOutcome {
    /// Checkpoints deleted.
    pub deleted: u64,
    /// Kept checkpoints whose parent went, re-based onto an older one (writes joined).
    pub rebased: u64,
    /// Kept checkpoints whose parent went that were given a snapshot of their own.
    pub materialized: u64,
    /// Transactions committed.
    pub batches: u64,
}

impl PruneOutcome {
    pub fn add(&mut self, other: &PruneOutcome) {
        self.deleted += other.deleted;
        self.rebased += other.rebased;
        self.materialized += other.materialized;
        self.batches += other.batches;
    }
}

/// What one [`RetentionStore::expire_runs`] call deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpiredRuns {
    pub runs: u64,
    /// Rows of the run-event journal of those runs.
    pub run_events: u64,
}

/// A whole sweep as the store sees it: what [`RetentionStore::estimate_sweep`] estimates
/// (the runtime's sweeper makes the same calls with the same thresholds).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SweepQuery {
    /// Threads without activity before this instant ([`RetentionStore::idle_threads`])
    /// are deleted, or cut to their latest checkpoint ([`PruneStrategy::KeepLatest`]).
    pub idle_threads: Option<(DateTime<Utc>, PruneStrategy)>,
    /// Finished runs last updated before this instant expire ([`RetentionStore::expire_runs`]).
    pub runs_before: Option<DateTime<Utc>>,
    /// Checkpoint pruning of the other threads ([`RetentionStore::prune_checkpoints`]).
    pub prune: Option<PrunePolicy>,
}

/// What a sweep would remove now ([`RetentionStore::estimate_sweep`]), counted as a
/// sweep's report counts: threads removed (or cut to their latest checkpoint),
/// checkpoints pruned, runs expired and their journal rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionEstimate {
    pub threads: u64,
    pub checkpoints: u64,
    pub runs: u64,
    pub run_events: u64,
    /// Bytes of the stored values that would go (rows' payload as stored, so packed
    /// values count packed; not pages). Rough: the steps' writes that pruning joins into
    /// the checkpoints it keeps are counted as gone.
    pub bytes: u64,
}

/// The store side of retention (both databases).
#[async_trait::async_trait]
pub trait RetentionStore: Send + Sync {
    /// Takes the lease `name` for `owner` until `until` when it is free, expired (before
    /// `now`) or already `owner`'s; false when another owner holds it.
    async fn try_lease(
        &self,
        name: &str,
        owner: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> crate::Result<bool>;
    /// Up to `limit` thread ids after `after` (in id order) with no pending or running run,
    /// and, with `since`, last updated at or after it (a run's end or a state update
    /// updates a thread): the threads a sweep visits, page by page.
    async fn retention_threads(
        &self,
        after: Option<&str>,
        since: Option<DateTime<Utc>>,
        limit: u64,
    ) -> crate::Result<Vec<String>>;
    /// Prunes intermediate checkpoints of one thread (see the module docs), one
    /// transaction per `policy.batch` checkpoints, oldest first.
    async fn prune_checkpoints(
        &self,
        thread_id: &str,
        policy: &PrunePolicy,
    ) -> crate::Result<PruneOutcome>;
    /// Deletes up to `limit` finished runs (any status but `pending` and `running`) last
    /// updated before `before`, with their rows of the run-event journal, in one
    /// transaction.
    async fn expire_runs(&self, before: DateTime<Utc>, limit: u64) -> crate::Result<ExpiredRuns>;
    /// Up to `limit` threads without activity since `before` (last update), not busy and
    /// without a TTL of their own, oldest first: what `checkpointer.ttl.default_ttl` expires.
    async fn idle_threads(&self, before: DateTime<Utc>, limit: u64) -> crate::Result<Vec<String>>;
    /// What a sweep of `query` would remove now, read only: the idle threads, the runs
    /// that expire (not those of threads that go), and the checkpoints each other thread's
    /// pruning plan removes (the plan pruning itself makes; all of them, where a sweep
    /// prunes at most `max_batches` batches of a thread and leaves the rest for the next).
    async fn estimate_sweep(&self, query: &SweepQuery) -> crate::Result<RetentionEstimate>;
}
