//! The records the stores read and write. These are storage types, not wire types: the server
//! maps them to the LangGraph JSON shapes.

use chrono::{DateTime, Utc};
use fawn_state::{Interrupt, StateUpdate, ThreadState};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;

pub type JsonMap = Map<String, Value>;

/// One page of a search, with the total number of matches.
#[derive(Clone, Debug, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortOrder {
    Asc,
    #[default]
    Desc,
}

/// `if_exists` on create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IfExists {
    #[default]
    Raise,
    DoNothing,
}

// ---------------------------------------------------------------------------- assistants

#[derive(Clone, Debug, PartialEq)]
pub struct Assistant {
    pub assistant_id: String,
    pub graph_id: String,
    pub config: JsonMap,
    pub context: JsonMap,
    pub metadata: JsonMap,
    pub name: String,
    pub description: Option<String>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AssistantVersion {
    pub assistant_id: String,
    pub graph_id: String,
    pub config: JsonMap,
    pub context: JsonMap,
    pub metadata: JsonMap,
    pub name: String,
    pub description: Option<String>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewAssistant {
    /// Generated (UUIDv4) when `None`.
    pub assistant_id: Option<String>,
    pub graph_id: String,
    pub config: JsonMap,
    pub context: JsonMap,
    pub metadata: JsonMap,
    pub name: String,
    pub description: Option<String>,
    pub if_exists: IfExists,
}

/// `PATCH /assistants/{id}`: `None` keeps the current value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AssistantPatch {
    pub graph_id: Option<String>,
    pub config: Option<JsonMap>,
    pub context: Option<JsonMap>,
    /// Merged shallowly into the current metadata.
    pub metadata: Option<JsonMap>,
    pub name: Option<String>,
    pub description: Option<Option<String>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct AssistantFilter {
    /// JSON containment.
    pub metadata: Option<JsonMap>,
    pub graph_id: Option<String>,
    pub name: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AssistantSort {
    AssistantId,
    GraphId,
    Name,
    #[default]
    CreatedAt,
    UpdatedAt,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct AssistantQuery {
    pub filter: AssistantFilter,
    /// `0` = no limit (as in every query below).
    pub limit: u64,
    pub offset: u64,
    pub sort_by: AssistantSort,
    pub sort_order: SortOrder,
}

// ------------------------------------------------------------------------------- threads

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    #[default]
    Idle,
    Busy,
    Interrupted,
    Error,
}

impl ThreadStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            ThreadStatus::Idle => "idle",
            ThreadStatus::Busy => "busy",
            ThreadStatus::Interrupted => "interrupted",
            ThreadStatus::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<ThreadStatus> {
        match s {
            "idle" => Some(ThreadStatus::Idle),
            "busy" => Some(ThreadStatus::Busy),
            "interrupted" => Some(ThreadStatus::Interrupted),
            "error" => Some(ThreadStatus::Error),
            _ => None,
        }
    }
}

/// The longest TTL a thread or a store item may have: 100 years (of 365.25 days), in
/// minutes. Expiries are microsecond timestamps; a TTL without a bound overflows them.
pub const MAX_TTL_MINUTES: f64 = 52_596_000.0;

/// Whether `minutes` is a TTL the store keeps: positive, finite, at most
/// [`MAX_TTL_MINUTES`].
pub fn valid_ttl_minutes(minutes: f64) -> bool {
    minutes.is_finite() && minutes > 0.0 && minutes <= MAX_TTL_MINUTES
}

/// Thread TTL: minutes after the last update, then `delete` or `keep_latest`.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadTtl {
    pub minutes: f64,
    pub strategy: PruneStrategy,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Thread {
    pub thread_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When `values` last changed.
    pub state_updated_at: DateTime<Utc>,
    pub metadata: JsonMap,
    pub status: ThreadStatus,
    /// `{"configurable": {...}}` of the last run; `{}` before any run.
    pub config: JsonMap,
    /// Latest state values; `None` before the first checkpoint.
    pub values: Option<Value>,
    /// `{task_id: [Interrupt, …]}` pending at the latest checkpoint.
    pub interrupts: JsonMap,
    /// `{"error": type, "message": text}` when the last run failed.
    pub error: Option<Value>,
    pub ttl: Option<ThreadTtl>,
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewThread {
    /// Generated (UUIDv7) when `None`.
    pub thread_id: Option<String>,
    pub metadata: JsonMap,
    pub if_exists: IfExists,
    pub ttl: Option<ThreadTtl>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadPatch {
    /// Merged shallowly.
    pub metadata: Option<JsonMap>,
    pub ttl: Option<ThreadTtl>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadFilter {
    /// JSON containment on metadata.
    pub metadata: Option<JsonMap>,
    /// JSON containment on values.
    pub values: Option<JsonMap>,
    pub status: Option<ThreadStatus>,
    pub ids: Option<Vec<String>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThreadSort {
    ThreadId,
    Status,
    #[default]
    CreatedAt,
    UpdatedAt,
    StateUpdatedAt,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadQuery {
    pub filter: ThreadFilter,
    pub limit: u64,
    pub offset: u64,
    pub sort_by: ThreadSort,
    pub sort_order: SortOrder,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PruneStrategy {
    #[default]
    Delete,
    KeepLatest,
}

/// What a finished run (or a state update) leaves on its thread.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadSummary {
    /// Latest values (`None` keeps the stored ones).
    pub values: Option<Value>,
    /// Pending interrupts by task id (replaces the stored ones).
    pub interrupts: JsonMap,
    /// The latest checkpoint has nodes scheduled next (dynamic interrupt or breakpoint).
    pub has_next: bool,
    /// `{"error", "message"}` when the run failed; `None` clears it.
    pub error: Option<Value>,
    /// Merged into the thread metadata (`graph_id`, `assistant_id` of the last run).
    pub metadata: JsonMap,
    /// `{"configurable": …}` of the last run, when set.
    pub config: Option<JsonMap>,
}

// --------------------------------------------------------------------------- checkpoints

/// A task scheduled in a checkpoint, with the interrupts it raised.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub interrupts: Vec<Interrupt>,
    /// Error text if the task failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A checkpoint to persist.
#[derive(Clone, Debug)]
pub struct NewCheckpoint {
    pub thread_id: String,
    /// `""` for the root graph.
    pub checkpoint_ns: String,
    pub parent_id: Option<String>,
    /// The run that wrote it (rollback deletes by run).
    pub run_id: Option<String>,
    /// LangGraph checkpoint metadata: `source`, `step`, `parents`, plus the run metadata.
    pub metadata: JsonMap,
    /// `(node, write)` of this step, in order: the delta that is persisted.
    pub writes: Vec<(String, StateUpdate)>,
    /// The full state after the writes (used when the store decides to snapshot, and to
    /// check replay in debug builds). The store keeps only a weak reference to it, so a
    /// writer that holds its state in an `Arc` and updates it with `Arc::make_mut` never
    /// pays for a copy of the message list.
    pub state: Arc<ThreadState>,
    pub next: Vec<String>,
    pub tasks: Vec<TaskRecord>,
}

/// A stored checkpoint with its reconstructed state.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub thread_id: String,
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub parent_id: Option<String>,
    pub run_id: Option<String>,
    pub metadata: JsonMap,
    pub created_at: DateTime<Utc>,
    /// The full state at this checkpoint. Shared, so that a read served from the store's
    /// cache (the latest state of a thread) costs no copy of the message list.
    pub state: Arc<ThreadState>,
    /// The step's writes, `(node, update JSON)`.
    pub writes: Vec<(String, Value)>,
    pub next: Vec<String>,
    pub tasks: Vec<TaskRecord>,
}

/// How many stored items and bytes (serialized JSON) a part of a thread's storage takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageUsage {
    pub count: u64,
    pub bytes: u64,
}

/// What a thread's checkpoints occupy in the store (every namespace): the checkpoint rows
/// without their channel data (ids, metadata, `next`, tasks), the channel values they store
/// — each step's writes and the snapshots, per channel (`count` = values stored) —, and the
/// pending writes of unfinished steps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadStorage {
    pub checkpoints: StorageUsage,
    pub channel_values: StorageUsage,
    pub by_channel: std::collections::BTreeMap<String, StorageUsage>,
    pub pending_writes: StorageUsage,
}

/// A write of one task inside a step that did not complete (LangGraph `put_writes`): kept
/// with the checkpoint the step started from, so that resuming does not redo the task.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingWrite {
    pub task_id: String,
    pub channel: String,
    pub value: Value,
}

/// `POST /threads/{id}/history`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistoryQuery {
    pub checkpoint_ns: String,
    /// `0` = no limit.
    pub limit: u64,
    /// Only checkpoints with an id strictly smaller than this.
    pub before: Option<String>,
    /// JSON containment on checkpoint metadata.
    pub metadata: Option<JsonMap>,
}

// ---------------------------------------------------------------------------------- runs

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    #[default]
    Pending,
    Running,
    Success,
    Error,
    Timeout,
    Interrupted,
}

impl RunStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Success => "success",
            RunStatus::Error => "error",
            RunStatus::Timeout => "timeout",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        match s {
            "pending" => Some(RunStatus::Pending),
            "running" => Some(RunStatus::Running),
            "success" => Some(RunStatus::Success),
            "error" => Some(RunStatus::Error),
            "timeout" => Some(RunStatus::Timeout),
            "interrupted" => Some(RunStatus::Interrupted),
            _ => None,
        }
    }

    pub fn is_active(&self) -> bool {
        matches!(self, RunStatus::Pending | RunStatus::Running)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MultitaskStrategy {
    Reject,
    Interrupt,
    Rollback,
    #[default]
    Enqueue,
}

impl MultitaskStrategy {
    pub fn as_str(&self) -> &'static str {
        match self {
            MultitaskStrategy::Reject => "reject",
            MultitaskStrategy::Interrupt => "interrupt",
            MultitaskStrategy::Rollback => "rollback",
            MultitaskStrategy::Enqueue => "enqueue",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelAction {
    Interrupt,
    Rollback,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub run_id: String,
    pub thread_id: String,
    pub assistant_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub status: RunStatus,
    pub metadata: JsonMap,
    /// What the run was created with (`input`, `command`, `config`, `stream_mode`, …).
    pub kwargs: JsonMap,
    pub multitask_strategy: MultitaskStrategy,
    /// 0 before the first claim.
    pub attempt: u32,
    /// Not before this time (`after_seconds`).
    pub available_at: DateTime<Utc>,
    /// A cancellation requested while running.
    pub cancel_requested: Option<CancelAction>,
    /// `{"error", "message"}` of a failed run.
    pub error: Option<Value>,
    /// DeerFlow `stop_reason` (`loop_capped`, `orphan_recovered`, …).
    pub stop_reason: Option<String>,
    /// The worker holding the lease while running.
    pub owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewRun {
    /// Generated (UUIDv7) when `None`.
    pub run_id: Option<String>,
    pub thread_id: String,
    pub assistant_id: String,
    pub metadata: JsonMap,
    pub kwargs: JsonMap,
    pub multitask_strategy: MultitaskStrategy,
    /// Delay before the run may be claimed.
    pub after_seconds: f64,
    /// Create the thread (with this metadata) if it does not exist.
    pub create_thread_if_missing: Option<JsonMap>,
    /// Claim the run in the same write, as [`crate::RunStore::claim_run`] would, when it is
    /// due at once and nothing else of its thread is pending or running: the creating node
    /// has a free slot and saves a second write.
    pub claim: Option<RunClaim>,
}

/// Who claims a new run at its creation ([`NewRun::claim`]), and for how long.
#[derive(Clone, Debug, PartialEq)]
pub struct RunClaim {
    pub worker_id: String,
    pub lease: std::time::Duration,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CreatedRun {
    /// The run as created (`pending`).
    pub run: Run,
    /// Runs that were pending/running on the thread when this one was created.
    pub inflight: Vec<Run>,
    /// The run as claimed (`running`, its lease taken) when [`NewRun::claim`] asked and it
    /// could be; `None` leaves it pending in the queue.
    pub claimed: Option<Run>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunQuery {
    pub limit: u64,
    pub offset: u64,
    pub status: Option<RunStatus>,
}

/// The terminal state of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunFinish {
    pub status: RunStatus,
    pub error: Option<Value>,
    pub stop_reason: Option<String>,
    /// What to record on the thread.
    pub thread: ThreadSummary,
}

/// Which runs to cancel.
#[derive(Clone, Debug, PartialEq)]
pub enum CancelTarget {
    /// These runs of this thread.
    Runs {
        thread_id: Option<String>,
        run_ids: Vec<String>,
    },
    /// Every run with this status (`pending`, `running`, or both).
    Status { pending: bool, running: bool },
}

// --------------------------------------------------------------------------------- crons

#[derive(Clone, Debug, PartialEq)]
pub struct Cron {
    pub cron_id: String,
    pub assistant_id: String,
    pub thread_id: Option<String>,
    pub user_id: Option<String>,
    pub schedule: String,
    pub timezone: Option<String>,
    pub end_time: Option<DateTime<Utc>>,
    /// The run payload each tick creates (a `RunCreate` body).
    pub payload: JsonMap,
    pub next_run_date: Option<DateTime<Utc>>,
    pub metadata: JsonMap,
    /// `delete` | `keep` (stateless crons), `None` for thread crons.
    pub on_run_completed: Option<String>,
    pub enabled: bool,
    /// A DeerFlow scheduled task carried by this cron (its title, prompt, schedule as
    /// written, …); `None` for a plain LangGraph cron.
    pub task: Option<JsonMap>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewCron {
    pub assistant_id: String,
    pub thread_id: Option<String>,
    /// The user the cron belongs to (its runs act for them).
    pub user_id: Option<String>,
    pub schedule: String,
    pub timezone: Option<String>,
    pub end_time: Option<DateTime<Utc>>,
    pub payload: JsonMap,
    pub next_run_date: Option<DateTime<Utc>>,
    pub metadata: JsonMap,
    pub on_run_completed: Option<String>,
    pub enabled: bool,
    /// See [`Cron::task`].
    pub task: Option<JsonMap>,
}

/// `PATCH /runs/crons/{id}`: `None` keeps the current value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CronPatch {
    pub schedule: Option<String>,
    pub timezone: Option<Option<String>>,
    pub end_time: Option<Option<DateTime<Utc>>>,
    /// Merged into the payload.
    pub payload: Option<JsonMap>,
    pub next_run_date: Option<Option<DateTime<Utc>>>,
    pub metadata: Option<JsonMap>,
    pub on_run_completed: Option<Option<String>>,
    pub enabled: Option<bool>,
    /// The thread each tick runs on (`Some(None)`: a fresh thread per tick).
    pub thread_id: Option<Option<String>>,
    /// Replaces the task (see [`Cron::task`]).
    pub task: Option<JsonMap>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CronFilter {
    pub assistant_id: Option<String>,
    pub thread_id: Option<String>,
    /// Only the crons of this user.
    pub user_id: Option<String>,
    pub enabled: Option<bool>,
    pub metadata: Option<JsonMap>,
    /// `Some(true)`: only crons carrying a scheduled task; `Some(false)`: only plain ones.
    pub task: Option<bool>,
}

/// Which due crons a claim takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CronKinds {
    #[default]
    All,
    /// Plain LangGraph crons only.
    Plain,
    /// Crons carrying a scheduled task only.
    Tasks,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CronSort {
    CronId,
    AssistantId,
    ThreadId,
    #[default]
    CreatedAt,
    UpdatedAt,
    NextRunDate,
    EndTime,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CronQuery {
    pub filter: CronFilter,
    pub limit: u64,
    pub offset: u64,
    pub sort_by: CronSort,
    pub sort_order: SortOrder,
}

// --------------------------------------------------------------------------------- store

#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub namespace: Vec<String>,
    pub key: String,
    pub value: JsonMap,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct PutItem {
    pub namespace: Vec<String>,
    pub key: String,
    pub value: JsonMap,
    /// Minutes; `None` = never expires.
    pub ttl_minutes: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ItemQuery {
    pub namespace_prefix: Vec<String>,
    /// Equality on top-level value fields.
    pub filter: Option<JsonMap>,
    pub limit: u64,
    pub offset: u64,
    pub refresh_ttl: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NamespaceQuery {
    pub prefix: Option<Vec<String>>,
    pub suffix: Option<Vec<String>>,
    pub max_depth: Option<usize>,
    pub limit: u64,
    pub offset: u64,
}

/// The database connections now (`/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Connections open (SQLite: the writer, the readers and the WAL checkpointer).
    pub open: u32,
    pub idle: u32,
    pub in_use: u32,
    /// The most the pool opens.
    pub max: u32,
    /// Callers waiting for a connection (SQLite: for the writer).
    pub waiting: u32,
}

/// What one step of database maintenance did ([`crate::Persistence::maintain`]). SQLite
/// only; on Postgres every field is zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Maintenance {
    /// False when it could not run (the database is closed, or it failed: see the log).
    pub ran: bool,
    /// The write-ahead log was copied into the database and cut to zero bytes (false when a
    /// reader, e.g. another process, still used it).
    pub wal_truncated: bool,
    /// Free pages handed back to the file system (incremental auto-vacuum databases only).
    pub pages_vacuumed: u64,
    /// Free pages left in the file.
    pub free_pages: u64,
    /// The database file and its WAL afterwards.
    pub db_bytes: u64,
    pub wal_bytes: u64,
}

/// The run queue now, database-wide (`/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QueueStats {
    pub pending: u64,
    pub running: u64,
    /// Age of the oldest pending run (0 when none).
    pub oldest_pending_seconds: f64,
}

/// What `truncate` wipes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Truncate {
    pub runs: bool,
    pub threads: bool,
    pub assistants: bool,
    pub checkpointer: bool,
    pub store: bool,
}

/// A user account.
#[derive(Clone, Debug, PartialEq)]
pub struct User {
    pub id: String,
    /// Lower-cased.
    pub email: String,
    /// argon2id in PHC form; `None` for accounts that cannot log in with a password.
    pub password_hash: Option<String>,
    /// `admin` or `user`.
    pub system_role: String,
    /// Bumped to revoke every session of the user.
    pub token_version: i64,
    /// Waiting for its setup (DeerFlow's `needs_setup`): the admin created on first start,
    /// with an API key and no password, until `/api/v1/auth/initialize` gives it an email
    /// and a password. It does not count as the system's admin
    /// ([`UserStore::has_admin`](crate::UserStore::has_admin)).
    pub needs_setup: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A user to create.
#[derive(Clone, Debug, PartialEq)]
pub struct NewUser {
    pub email: String,
    pub password_hash: Option<String>,
    pub system_role: String,
    /// See [`User::needs_setup`].
    pub needs_setup: bool,
}

/// An API key as stored: never the key itself.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiKey {
    pub id: String,
    pub user_id: String,
    pub name: String,
    /// The first characters of the key, to recognise it in a list.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// An API key to store.
#[derive(Clone, Debug, PartialEq)]
pub struct NewApiKey {
    pub user_id: String,
    pub name: String,
    /// Hex SHA-256 of the key.
    pub key_hash: String,
    pub prefix: String,
}
