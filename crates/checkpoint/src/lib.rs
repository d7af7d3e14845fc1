//! Persistence: checkpoints, threads, runs (the run queue), assistants, crons, the store,
//! user accounts with their API keys, and the run-event journal with run feedback, on SQLite
//! (embedded default) or Postgres, behind one set of traits ([`Persistence`]).
//!
//! Checkpoints are stored as deltas (each step's writes) plus snapshots taken when the deltas
//! written since the last snapshot outweigh it, so the cost of a step does not grow with the
//! thread; reading replays the writes through `fawn-state`'s reducers. Everything is plain
//! typed JSON, never code. Must never know about HTTP, SSE or the agent's internals.
//!
//! * SQLite (default: `{FAWN_HOME}/data/fawn.db`): WAL, `synchronous=NORMAL`, one writer
//!   connection (write transactions are serialized in-process) and a pool of readers.
//! * Postgres (`DATABASE_URL=postgres://…`): a pool, an optional schema; the runs table is
//!   the queue, claimed with `FOR UPDATE SKIP LOCKED`, so several processes can share it.
//! * Checkpoint ids are UUIDv6-shaped and sort chronologically as strings; history is
//!   newest first by id across branches.
//! * Thread status is derived (busy while a run is pending or running, else error /
//!   interrupted / idle from the last run) and changes in the same transaction as the runs.

pub mod admin;
mod backend;
mod cache;
pub mod ids;
pub mod journal;
pub mod json;
pub mod retention;
pub mod types;

pub use ids::{checkpoint_id_after, new_checkpoint_id};
pub use journal::*;
pub use retention::{
    ExpiredRuns, PruneOutcome, PrunePolicy, RetentionEstimate, RetentionStore, SweepQuery,
};
pub use types::*;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fawn_state::ThreadState;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// A storage operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The named thing does not exist.
    #[error("{0}")]
    NotFound(String),
    /// It exists already, or the operation conflicts with the current state
    /// (e.g. `multitask_strategy: reject` on a busy thread).
    #[error("{0}")]
    Conflict(String),
    /// The request cannot be stored as given (bad filter, bad id, …).
    #[error("{0}")]
    Invalid(String),
    /// Stored data could not be decoded (a bug or a corrupted row).
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The database failed (connection, I/O, …). Transient errors are retried inside.
    #[error("database error: {0}")]
    Database(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Assistants (one system assistant per graph, plus user-created ones) and their versions.
#[async_trait]
pub trait AssistantStore: Send + Sync {
    /// Creates or refreshes a system assistant at startup (id = uuid5 of the graph id).
    async fn upsert_system_assistant(&self, assistant: NewAssistant) -> Result<Assistant>;
    /// `if_exists: raise` → [`StoreError::Conflict`]; `do_nothing` → the existing one.
    async fn create_assistant(&self, assistant: NewAssistant) -> Result<Assistant>;
    async fn get_assistant(&self, assistant_id: &str) -> Result<Option<Assistant>>;
    /// Writes a new version and makes it current; `metadata` is merged shallowly.
    async fn update_assistant(
        &self,
        assistant_id: &str,
        patch: AssistantPatch,
    ) -> Result<Assistant>;
    /// Deletes the assistant and its versions; returns false when it did not exist.
    async fn delete_assistant(&self, assistant_id: &str) -> Result<bool>;
    async fn search_assistants(&self, query: &AssistantQuery) -> Result<Page<Assistant>>;
    async fn count_assistants(&self, filter: &AssistantFilter) -> Result<u64>;
    /// Versions, newest first.
    async fn assistant_versions(
        &self,
        assistant_id: &str,
        metadata: Option<&Map<String, Value>>,
        limit: u64,
        offset: u64,
    ) -> Result<Vec<AssistantVersion>>;
    async fn set_latest_version(&self, assistant_id: &str, version: i64) -> Result<Assistant>;
}

/// Threads and their derived status.
#[async_trait]
pub trait ThreadStore: Send + Sync {
    /// `if_exists: raise` → [`StoreError::Conflict`]; `do_nothing` → the existing thread,
    /// unchanged.
    async fn create_thread(&self, thread: NewThread) -> Result<Thread>;
    async fn get_thread(&self, thread_id: &str) -> Result<Option<Thread>>;
    /// Merges `metadata` shallowly into the thread's metadata.
    async fn update_thread(&self, thread_id: &str, patch: ThreadPatch) -> Result<Thread>;
    /// Deletes the thread with its runs, checkpoints and crons; false when it did not exist.
    async fn delete_thread(&self, thread_id: &str) -> Result<bool>;
    async fn search_threads(&self, query: &ThreadQuery) -> Result<Page<Thread>>;
    async fn count_threads(&self, filter: &ThreadFilter) -> Result<u64>;
    /// Copies a thread (metadata and the whole checkpoint history) under a new id.
    async fn copy_thread(&self, thread_id: &str, new_thread_id: &str) -> Result<Thread>;
    /// `delete`: removes the threads; `keep_latest`: keeps only their latest checkpoint.
    /// Returns how many threads were pruned.
    async fn prune_threads(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<u64>;
    /// Records the outcome of a run or a state update on the thread: values, interrupts,
    /// error and metadata, and recomputes its status (busy while any run is pending or
    /// running, else interrupted / error / idle from `summary`).
    async fn set_thread_summary(&self, thread_id: &str, summary: ThreadSummary) -> Result<Thread>;
    /// Threads whose TTL expired (for the sweeper), at most `limit`.
    async fn expired_threads(&self, now: DateTime<Utc>, limit: u64) -> Result<Vec<Thread>>;
}

/// Checkpoints: the history of a thread's state.
#[async_trait]
pub trait CheckpointStore: Send + Sync {
    /// Persists a checkpoint (its writes, plus a snapshot when the policy says so) and
    /// returns its id, which sorts after every earlier checkpoint id of the thread.
    async fn put_checkpoint(&self, checkpoint: NewCheckpoint) -> Result<String>;

    /// Persists a chain of checkpoints of one thread: the first under its `parent_id`, each
    /// later one as the child of the one before (its own `parent_id` is ignored). Returns
    /// their ids in order. Both backends write a chain whole or not at all, with one commit;
    /// this default writes one checkpoint after another and stops at the first error.
    async fn put_checkpoints(&self, chain: Vec<NewCheckpoint>) -> Result<Vec<String>> {
        put_in_sequence(self, chain).await
    }

    /// The checkpoint with `checkpoint_id`, or the latest one of the namespace when `None`,
    /// with its full state reconstructed.
    async fn get_checkpoint(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: Option<&str>,
    ) -> Result<Option<Checkpoint>>;
    /// History, newest first by id across all branches, each with its full state.
    async fn list_checkpoints(
        &self,
        thread_id: &str,
        query: &HistoryQuery,
    ) -> Result<Vec<Checkpoint>>;
    /// Deletes every checkpoint written by `run_id` (rollback); returns how many.
    async fn delete_checkpoints_for_run(&self, thread_id: &str, run_id: &str) -> Result<u64>;
    /// Merges `metadata` into a checkpoint's metadata (`PATCH /threads/{id}/state`).
    async fn patch_checkpoint_metadata(
        &self,
        thread_id: &str,
        checkpoint_id: &str,
        metadata: &Map<String, Value>,
    ) -> Result<()>;
    /// Stores the writes of one task of the step that starts at `checkpoint_id`, before the
    /// step completes (LangGraph `put_writes`): `(channel, value)` pairs, replacing what the
    /// same task stored before. Deleted with the checkpoint.
    async fn put_writes(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
        task_id: &str,
        writes: Vec<(String, Value)>,
    ) -> Result<()>;
    /// The pending writes stored against a checkpoint, by task then in order.
    async fn pending_writes(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
    ) -> Result<Vec<PendingWrite>>;
    /// What the thread's checkpoints occupy (`GET /threads/{id}/storage`).
    async fn thread_storage(&self, thread_id: &str) -> Result<ThreadStorage>;
    /// The writes of the step that ran from `checkpoint_id`: those of its oldest `loop` child
    /// (a fork or state update made from it later is not that step). `None` when no step
    /// has run from it.
    async fn step_writes(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
    ) -> Result<Option<Vec<(String, Value)>>>;
}

/// Writes a chain of checkpoints one after another, each after the first as the child of the
/// one before; stops at the first error (the default [`CheckpointStore::put_checkpoints`]).
pub async fn put_in_sequence<S: CheckpointStore + ?Sized>(
    store: &S,
    chain: Vec<NewCheckpoint>,
) -> Result<Vec<String>> {
    let mut ids: Vec<String> = Vec::with_capacity(chain.len());
    for mut checkpoint in chain {
        if let Some(previous) = ids.last() {
            checkpoint.parent_id = Some(previous.clone());
        }
        ids.push(store.put_checkpoint(checkpoint).await?);
    }
    Ok(ids)
}

/// Runs: the durable run queue.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Creates a run atomically with the thread-level multitask rule: if the thread has
    /// pending/running runs, `reject` → [`StoreError::Conflict`]; other strategies create the
    /// run and return the in-flight runs so the caller can cancel them (`interrupt`,
    /// `rollback`) or leave them (`enqueue`). Creates the thread first when
    /// `create_thread_if_missing` is set; otherwise a missing thread is
    /// [`StoreError::NotFound`]. Marks the thread busy.
    async fn create_run(&self, run: NewRun) -> Result<CreatedRun>;
    async fn get_run(&self, run_id: &str) -> Result<Option<Run>>;
    /// Runs of a thread, newest first.
    async fn list_runs(&self, thread_id: &str, query: &RunQuery) -> Result<Vec<Run>>;
    /// The runs of a thread that replay an earlier run (DeerFlow's regenerate and
    /// edit-and-rerun: `metadata.regenerate_from_run_id` is set), oldest first.
    async fn replay_runs(&self, thread_id: &str) -> Result<Vec<Run>>;
    /// Deletes a run (not its checkpoints); false when it did not exist.
    async fn delete_run(&self, run_id: &str) -> Result<bool>;
    /// Claims the oldest pending run that is due and whose thread has no running run:
    /// status `running`, `attempt` + 1, lease owned by `worker_id` until now + `lease`.
    async fn claim_next_run(&self, worker_id: &str, lease: Duration) -> Result<Option<Run>>;
    /// Claims one specific pending run (a stream request executing on the node that
    /// accepted it). `None` when it is not claimable (not due, thread busy, already taken).
    async fn claim_run(
        &self,
        run_id: &str,
        worker_id: &str,
        lease: Duration,
    ) -> Result<Option<Run>>;
    /// Extends the lease of a run this worker owns. Returns a cancellation requested by
    /// another process, if any, and `Err(NotFound)` when the worker lost the run.
    async fn heartbeat(
        &self,
        run_id: &str,
        worker_id: &str,
        lease: Duration,
    ) -> Result<Option<CancelAction>>;
    /// [`RunStore::heartbeat`] for many runs of this worker at once, in one statement: the
    /// runs it still owns, each with the cancellation requested for it; a run missing from
    /// the answer was lost (what `heartbeat` says with `Err(NotFound)`).
    async fn heartbeat_many(
        &self,
        run_ids: &[String],
        worker_id: &str,
        lease: Duration,
    ) -> Result<std::collections::HashMap<String, Option<CancelAction>>>;
    /// Records the terminal status of a run this worker owns and refreshes its thread's
    /// status. `Err(NotFound)` when the worker no longer owns it.
    async fn finish_run(&self, run_id: &str, worker_id: &str, outcome: RunFinish) -> Result<Run>;
    /// Puts a claimed run back to `pending` (graceful shutdown).
    async fn release_run(&self, run_id: &str, worker_id: &str) -> Result<()>;
    /// Cancels runs: pending ones end at once (`interrupted`, or deleted for rollback);
    /// running ones get a cancel request their worker sees on its next heartbeat. Returns
    /// the runs that matched (before the change).
    async fn cancel_runs(&self, target: &CancelTarget, action: CancelAction) -> Result<Vec<Run>>;
    /// Running runs whose lease expired: back to `pending` while `attempt < max_attempts`
    /// (they resume from their last checkpoint), else `error` with reason
    /// `orphan_recovered`. Returns the runs it touched.
    async fn reap_expired_runs(&self, now: DateTime<Utc>, max_attempts: u32) -> Result<Vec<Run>>;
}

/// Cron jobs.
#[async_trait]
pub trait CronStore: Send + Sync {
    async fn create_cron(&self, cron: NewCron) -> Result<Cron>;
    async fn get_cron(&self, cron_id: &str) -> Result<Option<Cron>>;
    async fn update_cron(&self, cron_id: &str, patch: CronPatch) -> Result<Cron>;
    async fn delete_cron(&self, cron_id: &str) -> Result<bool>;
    async fn search_crons(&self, query: &CronQuery) -> Result<Page<Cron>>;
    async fn count_crons(&self, filter: &CronFilter) -> Result<u64>;
    /// Enabled crons whose `next_run_date <= now`, each claimed by moving its
    /// `next_run_date` to `next` (computed by the caller's schedule parser) in the same
    /// transaction, so two processes never fire the same tick.
    async fn claim_due_crons(
        &self,
        now: DateTime<Utc>,
        limit: u64,
        next: &(dyn for<'c> Fn(&'c Cron) -> Option<DateTime<Utc>> + Send + Sync),
    ) -> Result<Vec<Cron>> {
        self.claim_due_crons_of(now, limit, CronKinds::All, next)
            .await
    }
    /// [`CronStore::claim_due_crons`] restricted to plain crons or to scheduled tasks.
    async fn claim_due_crons_of(
        &self,
        now: DateTime<Utc>,
        limit: u64,
        kinds: CronKinds,
        next: &(dyn for<'c> Fn(&'c Cron) -> Option<DateTime<Utc>> + Send + Sync),
    ) -> Result<Vec<Cron>>;
    /// The runs a cron created (`metadata.cron_id`), newest first, with their total.
    async fn cron_runs(&self, cron_id: &str, limit: u64, offset: u64) -> Result<Page<Run>>;
    /// Pending or running runs created by scheduled tasks (`metadata.scheduled_task_id`).
    async fn count_active_task_runs(&self) -> Result<u64>;
}

/// The long-term key/value store (`/store/*`).
#[async_trait]
pub trait ItemStore: Send + Sync {
    async fn put_item(&self, item: PutItem) -> Result<()>;
    /// `refresh_ttl` extends the TTL of an item that has one.
    async fn get_item(
        &self,
        namespace: &[String],
        key: &str,
        refresh_ttl: bool,
    ) -> Result<Option<Item>>;
    async fn delete_item(&self, namespace: &[String], key: &str) -> Result<()>;
    async fn search_items(&self, query: &ItemQuery) -> Result<Vec<Item>>;
    async fn list_namespaces(&self, query: &NamespaceQuery) -> Result<Vec<Vec<String>>>;
    /// Deletes expired items; returns how many.
    async fn sweep_expired_items(&self, now: DateTime<Utc>) -> Result<u64>;
}

/// Accounts and API keys.
#[async_trait]
pub trait UserStore: Send + Sync {
    /// Creates a user (the email is stored lower-cased). A taken email is
    /// [`StoreError::Conflict`]. `first_admin`: only while no admin exists, atomically
    /// (`Conflict` otherwise), so two concurrent first-run setups cannot both succeed.
    async fn create_user(&self, user: NewUser, first_admin: bool) -> Result<User>;
    async fn get_user(&self, user_id: &str) -> Result<Option<User>>;
    /// By email, case-insensitively.
    async fn user_by_email(&self, email: &str) -> Result<Option<User>>;
    async fn count_users(&self) -> Result<u64>;
    /// Whether an admin exists that is set up (not [`User::needs_setup`]): until then the
    /// web UI offers its setup page.
    async fn has_admin(&self) -> Result<bool>;
    /// The first admin, from the web UI's setup: `Conflict("System already initialized")`
    /// once a set-up admin exists; else the admin waiting for its setup, if there is one,
    /// gets this email and password (keeping its id, API keys and threads); else a new
    /// admin is created. `Conflict("Email already registered")` when another account has
    /// the email. Atomic: of concurrent calls one wins.
    async fn initialize_admin(&self, email: &str, password_hash: &str) -> Result<User>;
    /// Replaces the password hash and bumps `token_version` (every session ends).
    async fn set_password(&self, user_id: &str, password_hash: &str) -> Result<User>;
    /// Stores a key for an existing user (`NotFound` otherwise).
    async fn create_api_key(&self, key: NewApiKey) -> Result<ApiKey>;
    /// The live (not revoked) key with this hash and its user.
    async fn api_key_user(&self, key_hash: &str) -> Result<Option<(ApiKey, User)>>;
    /// Every key (revoked ones too) of one user, or of everyone.
    async fn list_api_keys(&self, user_id: Option<&str>) -> Result<Vec<ApiKey>>;
    /// Revokes a key; false when there was no live key with that id.
    async fn revoke_api_key(&self, key_id: &str) -> Result<bool>;
}

/// The run-event journal and run feedback.
#[async_trait]
pub trait JournalStore: Send + Sync {
    /// Appends one run's events in one transaction, with consecutive thread-global `seq`s
    /// after the thread's last one (allocated under the thread's lock, so concurrent runs
    /// of one thread never share a seq). Returns the stored rows. A missing thread is
    /// [`StoreError::NotFound`].
    async fn append_run_events(
        &self,
        thread_id: &str,
        run_id: &str,
        events: Vec<NewRunEvent>,
    ) -> Result<Vec<RunEvent>> {
        self.append_run_events_seeded(thread_id, run_id, events, None)
            .await
    }
    /// [`JournalStore::append_run_events`], but when the thread has no rows yet the rows
    /// `seed` builds (each with its own run id) go first: the history of a thread from
    /// before the journal. `seed` is only called then.
    async fn append_run_events_seeded(
        &self,
        thread_id: &str,
        run_id: &str,
        events: Vec<NewRunEvent>,
        seed: Option<&(dyn Fn() -> Vec<(String, NewRunEvent)> + Send + Sync)>,
    ) -> Result<Vec<RunEvent>>;
    /// Rows of a thread (see [`EventQuery`]), ascending by `seq`.
    async fn thread_events(&self, thread_id: &str, query: &EventQuery) -> Result<Vec<RunEvent>>;
    /// Rows of one run of a thread (see [`EventQuery`]), ascending by `seq`.
    async fn run_events(
        &self,
        thread_id: &str,
        run_id: &str,
        query: &EventQuery,
    ) -> Result<Vec<RunEvent>>;
    /// Creates or replaces the feedback of (thread, run, user).
    async fn upsert_feedback(&self, feedback: NewFeedback) -> Result<Feedback>;
    async fn get_feedback(&self, feedback_id: &str) -> Result<Option<Feedback>>;
    /// Feedback on a thread's runs (one run when `run_id` is set), of one user when
    /// `user_id` is set, oldest first.
    async fn list_feedback(
        &self,
        thread_id: &str,
        run_id: Option<&str>,
        user_id: Option<&str>,
    ) -> Result<Vec<Feedback>>;
    /// False when there was no such feedback.
    async fn delete_feedback(&self, feedback_id: &str) -> Result<bool>;
    /// Deletes one user's feedback on a run; false when there was none.
    async fn delete_run_feedback(
        &self,
        thread_id: &str,
        run_id: &str,
        user_id: &str,
    ) -> Result<bool>;
}

/// Everything the server stores, in one backend.
#[async_trait]
pub trait Persistence:
    AssistantStore
    + ThreadStore
    + CheckpointStore
    + RunStore
    + CronStore
    + ItemStore
    + UserStore
    + JournalStore
    + RetentionStore
{
    /// `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    /// True when the database answers.
    async fn ping(&self) -> bool;
    /// Deletes everything except system assistants (test hook `POST /internal/truncate`).
    async fn truncate(&self, what: &Truncate) -> Result<()>;
    /// The connection pool now.
    fn pool_stats(&self) -> PoolStats;
    /// How many runs wait and run, database-wide.
    async fn queue_stats(&self) -> Result<QueueStats>;
    /// One step of the maintenance an idle SQLite database gets in the background anyway
    /// (free pages back to the file system, up to 64 per step; the WAL cut to zero bytes),
    /// now: waits for the writer when it is busy. Nothing on Postgres.
    async fn maintain(&self) -> Maintenance {
        Maintenance::default()
    }
    /// What a sweep does after deleting, while writes go on: one step handing free pages
    /// back to the file system, up to 64 and only those above a slack of a quarter of the
    /// file (a busy database reuses them), waiting for the writer; the WAL is left alone.
    /// Nothing on Postgres.
    async fn shed_free_pages(&self) -> Maintenance {
        Maintenance::default()
    }
    /// Waits for in-flight statements and closes the connections (graceful shutdown).
    /// Every later call fails with [`StoreError::Database`].
    async fn close(&self);
    /// What other processes sharing the store announce: cancellation requests for running
    /// runs and progress of the runs they execute. `None` when the backend has no push
    /// channel (SQLite, which one process serves); heartbeats carry cancellations and relays
    /// poll either way, this only makes them prompt.
    async fn signals(&self) -> Option<Signals> {
        None
    }
    /// Tells every process listening to [`Persistence::signals`] that these runs made
    /// progress (a step persisted, or the run ended). A no-op without a push channel.
    async fn announce_progress(&self, run_ids: &[String]) -> Result<()> {
        let _ = run_ids;
        Ok(())
    }
    /// Records the end of a run this worker owns ([`RunStore::finish_run`]) together with
    /// its journal rows ([`JournalStore::append_run_events_seeded`]), the journal first, so
    /// that whoever sees the run finished finds them. The two results are those of the two
    /// calls made in turn: rows that cannot be written do not keep the run from finishing,
    /// and a run that can no longer be finished (another worker took it) still gets its
    /// rows. The SQL store writes both with one commit (SQLite: one transaction; Postgres:
    /// one statement, for the journal's common case) and falls back to the two calls when
    /// that cannot be done or fails.
    async fn finish_run_with_journal(
        &self,
        run_id: &str,
        worker_id: &str,
        outcome: RunFinish,
        journal: Option<JournalAppend<'_>>,
    ) -> FinishedWithJournal {
        journal_then_finish(self, run_id, worker_id, outcome, journal).await
    }
}

/// A run's journal rows, written with its end by [`Persistence::finish_run_with_journal`]:
/// the arguments of [`JournalStore::append_run_events_seeded`].
pub struct JournalAppend<'a> {
    pub thread_id: &'a str,
    pub run_id: &'a str,
    pub events: Vec<NewRunEvent>,
    /// The history of a thread from before the journal, used only when it has no rows yet.
    pub seed: Option<&'a (dyn Fn() -> Vec<(String, NewRunEvent)> + Send + Sync)>,
}

/// What [`Persistence::finish_run_with_journal`] did, part by part.
#[derive(Debug)]
pub struct FinishedWithJournal {
    /// As [`RunStore::finish_run`] answers.
    pub run: Result<Run>,
    /// As [`JournalStore::append_run_events_seeded`] answers (no rows without a journal).
    pub journal: Result<Vec<RunEvent>>,
}

/// [`Persistence::finish_run_with_journal`] as two calls: the journal append, then the
/// finish (whatever became of the append).
pub(crate) async fn journal_then_finish<S>(
    store: &S,
    run_id: &str,
    worker_id: &str,
    outcome: RunFinish,
    journal: Option<JournalAppend<'_>>,
) -> FinishedWithJournal
where
    S: RunStore + JournalStore + ?Sized,
{
    let journal = match journal {
        Some(j) => {
            store
                .append_run_events_seeded(j.thread_id, j.run_id, j.events, j.seed)
                .await
        }
        None => Ok(Vec::new()),
    };
    let run = store.finish_run(run_id, worker_id, outcome).await;
    FinishedWithJournal { run, journal }
}

/// A signal from another process sharing the store.
#[derive(Clone, Debug, PartialEq)]
pub enum Signal {
    /// Stop this running run.
    Cancel {
        run_id: String,
        action: CancelAction,
    },
    /// This run persisted a step or ended: relays of it should look again.
    Progress { run_id: String },
}

/// A stream of [`Signal`]s.
pub type Signals = futures::stream::BoxStream<'static, Signal>;

/// How to open a backend.
#[derive(Clone, Debug, PartialEq)]
pub enum BackendConfig {
    /// A SQLite file (created with its directory if missing), in WAL mode.
    Sqlite { path: std::path::PathBuf },
    /// A Postgres URL; `schema` (created if missing) isolates Fawn's tables.
    Postgres { url: String, schema: Option<String> },
}

/// Where the SQLite database lives when the configuration does not say: under the data
/// directory (`FAWN_HOME`).
pub fn default_sqlite_path(home: &std::path::Path) -> std::path::PathBuf {
    home.join("data").join("fawn.db")
}

impl BackendConfig {
    /// The backend the configuration asks for. In order: `database` (with `DATABASE_URL`
    /// already folded in by the config loader), then the legacy `checkpointer` section,
    /// then SQLite at [`default_sqlite_path`]. SQLite paths that are relative are resolved
    /// against the data directory; `sqlite_dir` (DeerFlow's spelling) holds `fawn.db`.
    /// `memory` is a fresh SQLite file in the system temp directory.
    pub fn from_settings(settings: &fawn_config::Settings) -> Result<BackendConfig> {
        let home = settings.home.as_path();
        let resolve = |p: &str| {
            let p = std::path::Path::new(p);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                home.join(p)
            }
        };
        let memory = || BackendConfig::Sqlite {
            path: std::env::temp_dir().join(format!("fawn-memory-{}.db", ids::new_uuid4())),
        };
        if let Some(db) = &settings.app.database {
            let backend = db.backend.as_deref().unwrap_or("sqlite");
            return match backend {
                "postgres" => {
                    let url = db
                        .url
                        .clone()
                        .filter(|u| !u.trim().is_empty())
                        .ok_or_else(|| {
                            StoreError::Invalid(
                            "database.backend is postgres but no database.url / DATABASE_URL is set"
                                .to_string(),
                        )
                        })?;
                    Ok(BackendConfig::Postgres {
                        url,
                        schema: db.postgres_schema.clone().filter(|s| !s.is_empty()),
                    })
                }
                "memory" => Ok(memory()),
                "sqlite" => {
                    let from_url = db
                        .url
                        .as_deref()
                        .and_then(sqlite_path_from_url)
                        .map(|p| resolve(&p));
                    let path = from_url
                        .or_else(|| db.sqlite_path.as_deref().map(resolve))
                        .or_else(|| db.sqlite_dir.as_deref().map(|d| resolve(d).join("fawn.db")))
                        .unwrap_or_else(|| default_sqlite_path(home));
                    Ok(BackendConfig::Sqlite { path })
                }
                other => Err(StoreError::Invalid(format!(
                    "database.backend must be sqlite, postgres or memory, got {other:?}"
                ))),
            };
        }
        if let Some(cp) = &settings.app.checkpointer {
            let kind = cp.kind.as_deref().unwrap_or("sqlite").to_ascii_lowercase();
            let conn = cp
                .connection_string
                .clone()
                .filter(|c| !c.trim().is_empty());
            return match kind.as_str() {
                "postgres" => Ok(BackendConfig::Postgres {
                    url: conn.ok_or_else(|| {
                        StoreError::Invalid(
                            "checkpointer.type is postgres but checkpointer.connection_string is not set"
                                .to_string(),
                        )
                    })?,
                    schema: None,
                }),
                "memory" => Ok(memory()),
                "sqlite" => Ok(BackendConfig::Sqlite {
                    path: conn
                        .map(|c| sqlite_path_from_url(&c).unwrap_or(c))
                        .map(|p| resolve(&p))
                        .unwrap_or_else(|| default_sqlite_path(home)),
                }),
                other => Err(StoreError::Invalid(format!(
                    "checkpointer.type must be sqlite, postgres or memory, got {other:?}"
                ))),
            };
        }
        Ok(BackendConfig::Sqlite {
            path: default_sqlite_path(home),
        })
    }
}

/// `sqlite:path`, `sqlite://path`, `sqlite:///abs/path` → the path (query string dropped).
fn sqlite_path_from_url(url: &str) -> Option<String> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.split('?').next().unwrap_or_default();
    let path = rest.strip_prefix("//").unwrap_or(rest);
    (!path.is_empty()).then(|| path.to_string())
}

/// Tuning knobs of a backend; the defaults suit a 2-core server.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenOptions {
    /// Threads whose latest state is kept in memory (the next step reads it for free).
    pub cache_entries: usize,
    /// Upper bound of the cached states' serialized size, in bytes.
    pub cache_bytes: usize,
    /// SQLite read connections (writes always go through one connection).
    pub sqlite_readers: u32,
    /// Postgres pool size.
    pub pg_max_connections: u32,
    /// How long an operation waits for a free connection.
    pub acquire_timeout: Duration,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            cache_entries: 4096,
            cache_bytes: 256 * 1024 * 1024,
            sqlite_readers: 4,
            pg_max_connections: 16,
            acquire_timeout: Duration::from_secs(30),
        }
    }
}

/// Opens (and migrates) a backend with the default [`OpenOptions`].
pub async fn open(config: &BackendConfig) -> Result<Arc<dyn Persistence>> {
    open_with(config, &OpenOptions::default()).await
}

/// Opens (and migrates) a backend.
pub async fn open_with(
    config: &BackendConfig,
    options: &OpenOptions,
) -> Result<Arc<dyn Persistence>> {
    Ok(Arc::new(backend::SqlStore::open(config, options).await?))
}

/// Reconstructs a state from a snapshot and the writes after it, through the reducers.
pub fn replay(
    snapshot: Option<ThreadState>,
    writes: impl IntoIterator<Item = Vec<fawn_state::StateUpdate>>,
) -> std::result::Result<ThreadState, fawn_state::ReducerError> {
    let mut state = snapshot.unwrap_or_default();
    for mut step in writes {
        state.apply_writes(&mut step)?;
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_config::{CheckpointerConfig, DatabaseConfig, Settings};
    use std::path::PathBuf;

    fn settings(
        database: Option<DatabaseConfig>,
        checkpointer: Option<CheckpointerConfig>,
    ) -> Settings {
        let mut s = Settings::with_home("/srv/fawn");
        s.app.database = database;
        s.app.checkpointer = checkpointer;
        s
    }

    fn sqlite(path: &str) -> BackendConfig {
        BackendConfig::Sqlite {
            path: PathBuf::from(path),
        }
    }

    #[test]
    fn backend_from_settings() {
        let cases = [
            (settings(None, None), sqlite("/srv/fawn/data/fawn.db")),
            (
                settings(Some(DatabaseConfig::default()), None),
                sqlite("/srv/fawn/data/fawn.db"),
            ),
            (
                settings(
                    Some(DatabaseConfig {
                        sqlite_path: Some("db/x.db".into()),
                        ..Default::default()
                    }),
                    None,
                ),
                sqlite("/srv/fawn/db/x.db"),
            ),
            (
                settings(
                    Some(DatabaseConfig {
                        sqlite_dir: Some("/var/lib/deer".into()),
                        ..Default::default()
                    }),
                    None,
                ),
                sqlite("/var/lib/deer/fawn.db"),
            ),
            (
                settings(
                    Some(DatabaseConfig {
                        backend: Some("sqlite".into()),
                        url: Some("sqlite:///tmp/a.db?mode=rwc".into()),
                        ..Default::default()
                    }),
                    None,
                ),
                sqlite("/tmp/a.db"),
            ),
            (
                settings(
                    Some(DatabaseConfig {
                        backend: Some("postgres".into()),
                        url: Some("postgres://u@h/db".into()),
                        postgres_schema: Some("fawn".into()),
                        ..Default::default()
                    }),
                    None,
                ),
                BackendConfig::Postgres {
                    url: "postgres://u@h/db".into(),
                    schema: Some("fawn".into()),
                },
            ),
            (
                settings(
                    None,
                    Some(CheckpointerConfig {
                        kind: Some("postgres".into()),
                        connection_string: Some("postgresql://x/y".into()),
                        ..Default::default()
                    }),
                ),
                BackendConfig::Postgres {
                    url: "postgresql://x/y".into(),
                    schema: None,
                },
            ),
            (
                settings(
                    None,
                    Some(CheckpointerConfig {
                        kind: Some("sqlite".into()),
                        connection_string: Some("checkpoints.db".into()),
                        ..Default::default()
                    }),
                ),
                sqlite("/srv/fawn/checkpoints.db"),
            ),
        ];
        for (s, want) in cases {
            assert_eq!(BackendConfig::from_settings(&s).unwrap(), want);
        }
        let memory = settings(
            Some(DatabaseConfig {
                backend: Some("memory".into()),
                ..Default::default()
            }),
            None,
        );
        match BackendConfig::from_settings(&memory).unwrap() {
            BackendConfig::Sqlite { path } => assert!(path.starts_with(std::env::temp_dir())),
            other => panic!("{other:?}"),
        }
        let no_url = settings(
            Some(DatabaseConfig {
                backend: Some("postgres".into()),
                ..Default::default()
            }),
            None,
        );
        assert!(matches!(
            BackendConfig::from_settings(&no_url),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn replay_applies_steps_in_order() {
        let mut w1 =
            fawn_state::StateUpdate::from_value(serde_json::json!({"title": "a"})).unwrap();
        let w2 = fawn_state::StateUpdate::from_value(serde_json::json!({"title": "b"})).unwrap();
        let s = replay(None, vec![vec![w1.clone()], vec![w2]]).unwrap();
        assert_eq!(s.title.as_deref(), Some("b"));
        w1.title = Some(None);
        let s = replay(Some(s), vec![vec![w1]]).unwrap();
        assert_eq!(s.title, None);
    }
}
