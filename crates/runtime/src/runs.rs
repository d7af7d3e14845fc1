//! The run manager. The runs table is the queue: a run is claimed with a lease (in-process
//! notify for immediate pickup, jittered polling for runs created by other processes),
//! executed here through its graph's [`GraphRunner`], kept alive by heartbeats at lease/3
//! (which also deliver cancellations requested by other processes), and finished with a
//! terminal status written before its stream closes. A reaper returns runs whose worker died
//! to the queue; they resume from their last checkpoint with `attempt` + 1.
//!
//! [`GraphRunner`]: fawn_agent::GraphRunner

use crate::broker::RunLog;
use crate::checkpoints::run_base_metadata;
use crate::error::{Result, RuntimeError};
use crate::hooks::Point;
use crate::kwargs::RunKwargs;
use crate::observer::{Modes, Observer, interrupts_wire};
use crate::runtime::Rt;
use crate::webhook;
use bytes::Bytes;
use fawn_agent::{PendingTask, RunObserver, RunOutcome, RunSpec, StartPoint};
use fawn_checkpoint::{
    CancelAction, CancelTarget, Checkpoint, JsonMap, Run, RunFinish, RunStatus, Signal, StoreError,
    ThreadSummary,
};
use futures::FutureExt;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

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

/// Queue tuning.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// A claimed run's lease; heartbeats renew it at a third of it.
    pub lease: Duration,
    /// How long past an expired lease the reaper waits before taking a run back.
    pub reap_grace: Duration,
    /// Graceful shutdown: how long running runs may go on to finish before they are
    /// released for another worker.
    pub drain: Duration,
    pub max_attempts: u32,
    /// Runs executing here at once (`queue.max_concurrent_runs`, `FAWN_MAX_CONCURRENT_RUNS`,
    /// `N_JOBS_PER_WORKER`; default [`default_max_concurrent_runs`]). Past it, runs wait
    /// `pending` in the database queue.
    pub max_concurrent_runs: usize,
    pub poll_interval: Duration,
    pub shutdown_grace: Duration,
    /// Postgres without Redis: how often a node relaying a run that another node executes
    /// looks at the store when no progress notification woke it (see [`crate::bus::postgres`]).
    pub relay_poll: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            lease: Duration::from_secs(10),
            reap_grace: Duration::ZERO,
            // `fawn serve` lets runs finish for 10 s; embedded and test servers release at once.
            drain: Duration::ZERO,
            max_attempts: 3,
            max_concurrent_runs: default_max_concurrent_runs(),
            poll_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
            relay_poll: crate::bus::postgres::FALLBACK_POLL,
        }
    }
}

/// Memory budgeted per concurrent run by [`default_max_concurrent_runs`].
pub const MEMORY_PER_RUN: u64 = 1024 * 1024;
/// Bounds of [`default_max_concurrent_runs`].
pub const DEFAULT_MAX_CONCURRENT_RUNS: (usize, usize) = (1024, 16_384);
/// What [`default_max_concurrent_runs`] assumes when the memory cannot be read.
const FALLBACK_MAX_CONCURRENT_RUNS: usize = 4096;

/// The default cap on runs executing at once: runs mostly wait on a model (I/O), so the cap
/// follows memory rather than cores — one run per [`MEMORY_PER_RUN`] of the memory this
/// process may use (the cgroup's `memory.max` when it is set, else the machine's
/// `MemTotal`), within [`DEFAULT_MAX_CONCURRENT_RUNS`]; 4096 when neither can be read.
pub fn default_max_concurrent_runs() -> usize {
    let (low, high) = DEFAULT_MAX_CONCURRENT_RUNS;
    match memory_limit_bytes() {
        Some(bytes) => usize::try_from(bytes / MEMORY_PER_RUN)
            .unwrap_or(high)
            .clamp(low, high),
        None => FALLBACK_MAX_CONCURRENT_RUNS,
    }
}

/// The memory this process may use: the cgroup v2 limit when there is one, else `MemTotal`.
fn memory_limit_bytes() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    match (cgroup, total) {
        (Some(c), Some(t)) => Some(c.min(t)),
        (c, t) => c.or(t),
    }
}

/// The in-process side of the queue.
pub struct Queue {
    pub worker_id: String,
    pub cfg: QueueConfig,
    active: Mutex<HashMap<String, Arc<ActiveRun>>>,
    /// Cancels that arrived for a run the store reported running but that is not (yet)
    /// executing here.
    early_cancels: Mutex<HashMap<String, (CancelAction, Instant)>>,
    pub notify: Notify,
    /// About how many runs this process saw wait in the queue (not claimable when created:
    /// busy thread, delay, no capacity), minus those the dispatcher claimed since. The
    /// dispatcher is woken after a run ends only when this is non-zero (an over-count only
    /// costs a query); runs from other processes are found by polling.
    maybe_pending: std::sync::atomic::AtomicUsize,
    permits: Arc<Semaphore>,
    pub stopping: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("worker_id", &self.worker_id)
            .finish_non_exhaustive()
    }
}

impl Queue {
    pub fn new(cfg: QueueConfig) -> Queue {
        Queue {
            worker_id: format!("fawn-{}", uuid::Uuid::new_v4().simple()),
            permits: Arc::new(Semaphore::new(cfg.max_concurrent_runs.max(1))),
            cfg,
            active: Mutex::new(HashMap::new()),
            early_cancels: Mutex::new(HashMap::new()),
            notify: Notify::new(),
            maybe_pending: std::sync::atomic::AtomicUsize::new(0),
            stopping: CancellationToken::new(),
            tasks: Mutex::new(JoinSet::new()),
        }
    }

    /// Spawns a task the queue can abort (crash simulation) or wait for (shutdown).
    pub fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut set = lock(&self.tasks);
        while set.try_join_next().is_some() {}
        set.spawn(fut);
    }

    pub fn active(&self, run_id: &str) -> Option<Arc<ActiveRun>> {
        lock(&self.active).get(run_id).cloned()
    }

    pub fn is_local(&self, run_id: &str) -> bool {
        lock(&self.active).contains_key(run_id)
    }

    pub fn active_count(&self) -> usize {
        lock(&self.active).len()
    }

    /// How many more runs this node would start now (free slots of `max_concurrent_runs`).
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// Aborts every task without touching the database (a simulated crash).
    pub fn abort_all(&self) {
        self.stopping.cancel();
        lock(&self.tasks).abort_all();
    }

    /// Notes that a run is waiting and wakes the dispatcher.
    pub fn note_pending(&self) {
        self.maybe_pending
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.notify.notify_one();
    }

    fn forget_old_cancels(&self) {
        let now = Instant::now();
        lock(&self.early_cancels)
            .retain(|_, (_, at)| now.duration_since(*at) < Duration::from_secs(120));
    }
}

/// Publishes a run's `metadata` event.
pub fn publish_metadata(log: &RunLog, run_id: &str, thread_id: &str, attempt: u32) {
    let data = json!({"run_id": run_id, "thread_id": thread_id, "attempt": attempt}).to_string();
    log.publish("metadata", Bytes::from(data));
}

/// A run created here that this node did not claim at once may execute on another node
/// sharing the store: its creator's stream and `/wait` here follow it through the event bus
/// (which stops as soon as the run executes here after all; a no-op on a single node).
fn follow_if_shared(rt: &Rt, run: &Run) {
    if let Some(log) = rt.broker.get(&run.run_id) {
        rt.bus().follow(rt, run, log);
    }
}

/// Hands a freshly created run to the queue: claimed and executed here at once when it is
/// due and its thread is free, otherwise left for the dispatcher (of any node).
pub fn submit(rt: &Rt, run: &Run, after_seconds: f64) {
    let q = &rt.queue;
    if q.stopping.is_cancelled() {
        return;
    }
    if after_seconds > 0.0 {
        follow_if_shared(rt, run);
        let rt2 = rt.clone();
        let delay = Duration::from_secs_f64(after_seconds);
        q.spawn(async move {
            tokio::time::sleep(delay).await;
            rt2.queue.note_pending();
        });
        return;
    }
    let Ok(permit) = q.permits.clone().try_acquire_owned() else {
        follow_if_shared(rt, run);
        q.note_pending();
        return;
    };
    let rt2 = rt.clone();
    let created = run.clone();
    q.spawn(async move {
        let lease = rt2.queue.cfg.lease;
        let run_id = created.run_id.clone();
        match rt2
            .store
            .claim_run(&run_id, &rt2.queue.worker_id, lease)
            .await
        {
            // Boxed: the run's future is large, and spawning moves (copies) whatever the
            // spawned future holds several times over.
            Ok(Some(run)) => Box::pin(execute(rt2, run, permit)).await,
            Ok(None) => {
                drop(permit);
                follow_if_shared(&rt2, &created);
                rt2.queue.note_pending();
            }
            Err(e) => {
                drop(permit);
                tracing::warn!(%run_id, error = %e, "claiming a new run failed");
                follow_if_shared(&rt2, &created);
                rt2.queue.note_pending();
            }
        }
    });
}

/// Claims due runs while there is capacity. Runs until the queue stops.
pub async fn dispatcher(rt: Rt) {
    let q = &rt.queue;
    loop {
        let jitter = q.cfg.poll_interval.mul_f64(0.5 + (rand_unit() * 0.5));
        tokio::select! {
            _ = q.notify.notified() => {}
            _ = tokio::time::sleep(jitter) => {}
            _ = q.stopping.cancelled() => return,
        }
        loop {
            if q.stopping.is_cancelled() {
                return;
            }
            let Ok(permit) = q.permits.clone().try_acquire_owned() else {
                break;
            };
            match rt.store.claim_next_run(&q.worker_id, q.cfg.lease).await {
                Ok(Some(run)) => {
                    let _ = q.maybe_pending.fetch_update(
                        std::sync::atomic::Ordering::Relaxed,
                        std::sync::atomic::Ordering::Relaxed,
                        |n| Some(n.saturating_sub(1)),
                    );
                    let rt2 = rt.clone();
                    q.spawn(Box::pin(execute(rt2, run, permit)));
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "claiming runs failed");
                    break;
                }
            }
        }
    }
}

/// A number in [0, 1) without a RNG dependency.
fn rand_unit() -> f64 {
    (uuid::Uuid::new_v4().as_u128() % 1_000_000) as f64 / 1_000_000.0
}

/// Returns runs whose worker died to the queue. Runs until the queue stops.
pub async fn reaper(rt: Rt) {
    let q = &rt.queue;
    // A dead node's runs are taken over within lease + grace + a quarter of the lease.
    let period = (q.cfg.lease / 4).max(Duration::from_millis(200));
    let grace = chrono::Duration::from_std(q.cfg.reap_grace).unwrap_or_default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = q.stopping.cancelled() => return,
        }
        reap(&rt, chrono::Utc::now() - grace).await;
        q.forget_old_cancels();
    }
}

/// Reaps runs whose lease expired before `now`; returns how many were touched.
pub async fn reap(rt: &Rt, now: chrono::DateTime<chrono::Utc>) -> usize {
    match rt
        .store
        .reap_expired_runs(now, rt.queue.cfg.max_attempts)
        .await
    {
        Ok(runs) => {
            fawn_telemetry::metrics()
                .runs_recovered
                .inc_by(runs.len() as u64);
            for r in &runs {
                tracing::warn!(run_id = %r.run_id, thread_id = %r.thread_id, attempt = r.attempt,
                    status = r.status.as_str(), "recovered a run whose worker stopped");
                if !r.status.is_active() {
                    rt.broker.finish(&r.run_id, None);
                }
            }
            if !runs.is_empty() {
                rt.queue.notify.notify_one();
            }
            runs.len()
        }
        Err(e) => {
            tracing::warn!(error = %e, "reaping expired runs failed");
            0
        }
    }
}

async fn heartbeat_loop(rt: Rt, run_id: String, active: Arc<ActiveRun>) {
    let lease = rt.queue.cfg.lease;
    let period = (lease / 3).max(Duration::from_millis(50));
    loop {
        tokio::time::sleep(period).await;
        match rt
            .store
            .heartbeat(&run_id, &rt.queue.worker_id, lease)
            .await
        {
            Ok(Some(action)) => {
                if !active.token.is_cancelled() {
                    fawn_telemetry::metrics().bus_cancels.inc();
                }
                active.stop(StopReason::Cancel(action))
            }
            Ok(None) => {}
            Err(StoreError::NotFound(_)) => {
                active.stop(StopReason::LostLease);
                return;
            }
            Err(e) => tracing::warn!(%run_id, error = %e, "run heartbeat failed"),
        }
    }
}

/// Executes a claimed run to its end.
pub async fn execute(rt: Rt, run: Run, permit: OwnedSemaphorePermit) {
    let run_id = run.run_id.clone();
    let active = Arc::new(ActiveRun::new());
    lock(&rt.queue.active).insert(run_id.clone(), active.clone());
    if let Some((action, _)) = lock(&rt.queue.early_cancels).remove(&run_id) {
        active.stop(StopReason::Cancel(action));
    }
    if let Some(action) = run.cancel_requested {
        active.stop(StopReason::Cancel(action));
    }
    let metrics = fawn_telemetry::metrics();
    metrics
        .run_attempts
        .with_label_values(&[if run.attempt > 1 { "resumed" } else { "first" }])
        .inc();
    let _executing = Executing::new();
    let origin = run
        .kwargs
        .get(crate::kwargs::ORIGIN_KEY)
        .and_then(|v| <crate::kwargs::RunOrigin as serde::Deserialize>::deserialize(v).ok());
    let trace_span = run_span(&run, origin.as_ref());
    let span = tracing::info_span!(
        "run",
        run_id = %run_id,
        thread_id = %run.thread_id,
        attempt = run.attempt,
        request_id = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    if let Some(id) = origin.as_ref().and_then(|o| o.request_id.as_deref()) {
        span.record("request_id", id);
    }
    if let Some(id) = trace_span.trace_id() {
        span.record("trace_id", id);
    }
    // The heartbeat runs in this task, so aborting the task (a crash) stops both.
    let heartbeat = heartbeat_loop(rt.clone(), run_id.clone(), active.clone());
    let work = fawn_telemetry::trace::instrument(
        async {
            let _ = rt.hooks.reach(Point::Claimed, &run_id, &active.token).await;
            run_attempt(&rt, &run, &active).await
        },
        &trace_span,
    )
    .instrument(span);
    tokio::pin!(heartbeat);
    tokio::pin!(work);
    let mut heartbeat_done = false;
    loop {
        tokio::select! {
            _ = &mut work => break,
            _ = &mut heartbeat, if !heartbeat_done => heartbeat_done = true,
        }
    }
    trace_span.end();
    lock(&rt.queue.active).remove(&run_id);
    drop(permit);
    // Only look for more work when some is known to wait (polling finds the rest).
    if rt
        .queue
        .maybe_pending
        .load(std::sync::atomic::Ordering::Relaxed)
        > 0
    {
        rt.queue.notify.notify_one();
    }
}

/// Counts a run as executing on this node while it lives.
struct Executing;

impl Executing {
    fn new() -> Executing {
        fawn_telemetry::metrics().runs_executing.inc();
        Executing
    }
}

impl Drop for Executing {
    fn drop(&mut self) {
        fawn_telemetry::metrics().runs_executing.dec();
    }
}

/// The span of one attempt of a run: in the trace of the request that created it (see
/// [`crate::kwargs::RunOrigin::run_parent`]), with the run's ids and, when content is
/// captured, its input.
fn run_span(run: &Run, origin: Option<&crate::kwargs::RunOrigin>) -> fawn_telemetry::trace::Span {
    use fawn_telemetry::trace::{Attr, attrs};
    if !fawn_telemetry::trace::enabled() {
        return fawn_telemetry::trace::Span::none();
    }
    let graph_id = crate::kwargs::RunKwargs::stored_graph_id(&run.kwargs)
        .unwrap_or(&run.assistant_id)
        .to_string();
    let parent = crate::kwargs::RunOrigin::run_parent(origin);
    fawn_telemetry::trace::start_run(
        || format!("invoke_agent {graph_id}"),
        &run.run_id,
        &parent,
        |a| {
            attrs::SpanKind::Agent.attrs(a);
            a.push(Attr::new(attrs::GEN_AI_OPERATION, "invoke_agent"));
            a.push(Attr::new(attrs::GEN_AI_AGENT_NAME, graph_id.clone()));
            a.push(Attr::new(
                attrs::GEN_AI_CONVERSATION_ID,
                run.thread_id.clone(),
            ));
            a.push(Attr::new(attrs::SESSION_ID, run.thread_id.clone()));
            a.push(Attr::new(attrs::THREAD_ID, run.thread_id.clone()));
            a.push(Attr::new(attrs::RUN_ID, run.run_id.clone()));
            a.push(Attr::new(attrs::ASSISTANT_ID, run.assistant_id.clone()));
            a.push(Attr::new(attrs::GRAPH_ID, graph_id.clone()));
            a.push(Attr::new(attrs::LANGFUSE_TRACE_NAME, graph_id.clone()));
            a.push(Attr::new("langsmith.trace.name", graph_id.clone()));
            a.push(Attr::new(attrs::RUN_ATTEMPT, i64::from(run.attempt.max(1))));
            if let Some(id) = origin.and_then(|o| o.request_id.clone()) {
                a.push(Attr::new(attrs::REQUEST_ID, id));
            }
            let user = crate::kwargs::RunKwargs::stored_user(&run.kwargs).filter(|u| !u.is_empty());
            if let Some(u) = user {
                a.push(Attr::new(attrs::USER_ID, u.to_string()));
            }
            if fawn_telemetry::trace::capture_inputs()
                && let Some(input) = crate::kwargs::RunKwargs::stored_input(&run.kwargs)
            {
                a.push(Attr::new(
                    attrs::INPUT_VALUE,
                    attrs::clip(input.to_string()),
                ));
                a.push(Attr::new(attrs::INPUT_MIME, "application/json"));
            }
        },
    )
}

/// Records how a run attempt ended: metrics, and the run's span.
fn record_end(
    status: &str,
    started_at: chrono::DateTime<chrono::Utc>,
    error: Option<&Value>,
    output: Option<&Value>,
) {
    let seconds = (chrono::Utc::now() - started_at)
        .to_std()
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    fawn_telemetry::metrics().run_finished(status, seconds);
    match error {
        Some(e) => {
            tracing::info!(status, duration_ms = seconds * 1000.0, error = %e, "run finished")
        }
        None => tracing::info!(status, duration_ms = seconds * 1000.0, "run finished"),
    }
    let span = fawn_telemetry::trace::current();
    span.set(fawn_telemetry::trace::Attr::new(
        fawn_telemetry::trace::attrs::RUN_STATUS,
        status.to_string(),
    ));
    match error {
        Some(e) => span.fail(
            e.get("error").and_then(Value::as_str).unwrap_or("Error"),
            e.get("message").and_then(Value::as_str).unwrap_or(""),
        ),
        None => span.ok(),
    }
    if let Some(out) = output
        && fawn_telemetry::trace::capture_outputs()
    {
        // The run's answer: its last message, not the whole state (the conversation is in
        // the model calls' spans already, and a long thread's state costs every run).
        let last = out
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|m| m.last());
        span.set_with(|a| {
            use fawn_telemetry::trace::{Attr, attrs};
            let value = serde_json::to_string(last.unwrap_or(out)).unwrap_or_default();
            a.push(Attr::new(attrs::OUTPUT_VALUE, attrs::clip(value)));
            a.push(Attr::new(attrs::OUTPUT_MIME, "application/json"));
        });
    }
}

fn start_point(cp: Option<&Checkpoint>, is_fork: bool) -> StartPoint {
    match cp {
        Some(cp) => StartPoint {
            checkpoint_id: Some(cp.checkpoint_id.clone()),
            state: (*cp.state).clone(),
            next: cp.next.clone(),
            tasks: cp
                .tasks
                .iter()
                .map(|t| PendingTask {
                    id: t.id.clone(),
                    name: t.name.clone(),
                    interrupts: t.interrupts.clone(),
                })
                .collect(),
            step: cp
                .metadata
                .get("step")
                .and_then(Value::as_i64)
                .unwrap_or(-1),
            is_fork,
        },
        // No checkpoint yet: the first one the run writes is the input checkpoint (-1).
        None => StartPoint {
            step: -2,
            ..StartPoint::default()
        },
    }
}

/// Builds the `RunSpec` of a claimed run from its stored kwargs.
async fn build_spec(
    rt: &Rt,
    run: &Run,
    kw: &RunKwargs,
    graph_id: &str,
) -> std::result::Result<RunSpec, String> {
    let latest = rt
        .store
        .get_checkpoint(&run.thread_id, "", None)
        .await
        .map_err(|e| format!("loading the thread's state failed: {e}"))?;
    // The run already wrote checkpoints (a recovered or released run): continue from the
    // last one instead of applying its input again.
    let resumed = latest
        .as_ref()
        .is_some_and(|c| c.run_id.as_deref() == Some(run.run_id.as_str()));
    let start = if resumed {
        start_point(latest.as_ref(), false)
    } else if let Some(target) = &kw.checkpoint {
        let cid = target.checkpoint_id.as_str();
        let cp = rt
            .store
            .get_checkpoint(&run.thread_id, target.ns(), Some(cid))
            .await
            .map_err(|e| format!("loading checkpoint {cid} failed: {e}"))?
            .ok_or_else(|| format!("Checkpoint {cid} not found"))?;
        start_point(Some(&cp), true)
    } else {
        start_point(latest.as_ref(), false)
    };
    let (input, command) = if resumed {
        (None, None)
    } else {
        let input = match &kw.input {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                fawn_state::StateUpdate::from_value(v.clone())
                    .map_err(|e| format!("invalid input: {e}"))?,
            ),
        };
        let command = match &kw.command {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                serde_json::from_value::<fawn_state::Command>(v.clone())
                    .map_err(|e| format!("invalid command: {e}"))?,
            ),
        };
        (input, command)
    };
    let mut metadata = run.metadata.clone();
    metadata.insert("run_attempt".into(), json!(run.attempt.max(1)));
    Ok(RunSpec {
        thread_id: run.thread_id.clone(),
        run_id: run.run_id.clone(),
        assistant_id: run.assistant_id.clone(),
        graph_id: graph_id.to_string(),
        attempt: run.attempt.max(1),
        configurable: kw.config.configurable.clone(),
        context: kw.context.clone(),
        recursion_limit: kw.config.recursion_limit.clone(),
        tags: kw.config.tags.clone(),
        metadata,
        input,
        command,
        interrupt_before: kw.interrupt_before.clone(),
        interrupt_after: kw.interrupt_after.clone(),
        start,
    })
}

async fn run_attempt(rt: &Rt, run: &Run, active: &Arc<ActiveRun>) {
    let attempt = run.attempt.max(1);
    let started_at = chrono::Utc::now();
    // Unreadable options (a corrupt row) end the run with an error, never a panic.
    let (kw, unreadable) = match RunKwargs::from_map(&run.kwargs) {
        Ok(k) => (k, None),
        Err(e) => (RunKwargs::default(), Some(e)),
    };
    let log = rt.broker.open(&run.run_id, &run.thread_id, kw.resumable);
    // Executed here: stop relaying it from elsewhere; other nodes' joiners read it from
    // the bus.
    let bus = rt.bus();
    bus.unfollow(&run.run_id);
    if let Some(mirror) = bus.mirror() {
        log.mirror_to(mirror);
    }
    if log.begin_attempt(attempt) {
        publish_metadata(&log, &run.run_id, &run.thread_id, attempt);
    }
    let graph_id = match &kw.graph_id {
        Some(g) => g.clone(),
        None => match rt.store.get_assistant(&run.assistant_id).await {
            Ok(Some(a)) => a.graph_id,
            _ => String::new(),
        },
    };
    let modes = Modes::from_list(&kw.stream_mode);
    let observer_for = |base_meta: JsonMap, parent: Option<String>| {
        Observer::new(
            rt.clone(),
            log.clone(),
            run.thread_id.clone(),
            run.run_id.clone(),
            modes,
            base_meta,
            parent,
            kw.durability,
            active.token.clone(),
        )
    };
    // A run that cannot start (unreadable options, unknown graph, no such checkpoint, bad
    // input) ends as an error without writing anything.
    let prepared = async {
        if let Some(message) = unreadable {
            return Err(message);
        }
        let graph = rt
            .graphs
            .get(&graph_id)
            .cloned()
            .ok_or_else(|| format!("Graph '{graph_id}' not found"))?;
        let spec = build_spec(rt, run, &kw, &graph_id).await?;
        Ok((graph, spec))
    }
    .await;
    let (graph, spec) = match prepared {
        Ok(p) => p,
        Err(message) => {
            let obs = observer_for(JsonMap::new(), None);
            let outcome = RunOutcome::Error {
                error: "ValueError".into(),
                message,
            };
            complete(rt, run, &kw, &log, &obs, outcome, active, started_at, None).await;
            return;
        }
    };
    let observer = Arc::new(observer_for(
        run_base_metadata(run, &graph_id),
        spec.start.checkpoint_id.clone(),
    ));
    if spec.input.is_none() && spec.start.checkpoint_id.is_some() {
        observer.resuming_from(&spec.start.state);
    }
    observer.graph_start(kw.input.as_ref());
    // What the journal compares the run's final messages with (not for temporary threads).
    let journal_start = (!kw.temporary).then(|| crate::journal::Start::of(&spec.start.state));
    let dyn_obs: Arc<dyn RunObserver> = observer.clone();
    let run_graph = |spec: RunSpec| {
        let graph_run = graph.run(spec, dyn_obs.clone(), active.token.clone());
        async move {
            match std::panic::AssertUnwindSafe(graph_run).catch_unwind().await {
                Ok(o) => o,
                Err(_) => {
                    tracing::error!(run_id = %run.run_id, "the graph panicked");
                    RunOutcome::Error {
                        error: "InternalError".into(),
                        message: "the graph panicked".into(),
                    }
                }
            }
        }
    };
    // A thread goal: hidden continuation turns in this same run until the goal's evaluator
    // is satisfied or a limit is hit (`goal`). Stopped between turns, the run was cancelled
    // (released at shutdown, a recovered run judges its last turn again).
    let goal_template = crate::goal::may_continue(&spec).then(|| spec.clone());
    let mut outcome = run_graph(spec).await;
    while let Some(template) = &goal_template {
        let Some(turn) =
            crate::goal::next_turn(rt, &observer, &outcome, template, &active.token).await
        else {
            if active.token.is_cancelled() && matches!(outcome, RunOutcome::Success { .. }) {
                outcome = RunOutcome::Cancelled;
            }
            break;
        };
        outcome = run_graph(turn).await;
    }
    complete(
        rt,
        run,
        &kw,
        &log,
        &observer,
        outcome,
        active,
        started_at,
        journal_start.as_ref(),
    )
    .await;
}

pub(crate) fn state_value(state: &fawn_state::ThreadState) -> Value {
    serde_json::to_value(state).unwrap_or_else(|_| Value::Object(Map::new()))
}

/// The thread's latest checkpoint (for summaries when the run wrote none).
pub(crate) async fn latest_checkpoint(rt: &Rt, thread_id: &str) -> Option<Checkpoint> {
    rt.store
        .get_checkpoint(thread_id, "", None)
        .await
        .ok()
        .flatten()
}

fn summary_from_checkpoint(cp: Option<&Checkpoint>) -> (Option<Value>, JsonMap, bool) {
    match cp {
        Some(cp) => (
            Some(state_value(&cp.state)),
            crate::wire::interrupts_by_task(&cp.tasks),
            !cp.next.is_empty(),
        ),
        None => (None, JsonMap::new(), false),
    }
}

/// Records the outcome, publishes the final events and closes the stream.
#[allow(clippy::too_many_arguments)]
async fn complete(
    rt: &Rt,
    run: &Run,
    kw: &RunKwargs,
    log: &Arc<RunLog>,
    observer: &Observer,
    outcome: RunOutcome,
    active: &Arc<ActiveRun>,
    started_at: chrono::DateTime<chrono::Utc>,
    start: Option<&crate::journal::Start>,
) {
    let _ = rt
        .hooks
        .reach(Point::BeforeFinish, &run.run_id, &active.token)
        .await;
    finish(
        rt, run, kw, log, observer, outcome, active, started_at, start,
    )
    .await;
    let _ = rt
        .hooks
        .reach(Point::Finished, &run.run_id, &CancellationToken::new())
        .await;
}

#[allow(clippy::too_many_arguments)]
async fn finish(
    rt: &Rt,
    run: &Run,
    kw: &RunKwargs,
    log: &Arc<RunLog>,
    observer: &Observer,
    outcome: RunOutcome,
    active: &Arc<ActiveRun>,
    started_at: chrono::DateTime<chrono::Utc>,
    start: Option<&crate::journal::Start>,
) {
    let modes = observer.modes();
    let reason = active.reason();
    // Checkpoints still being written belong to this run: they land before anything reads
    // the run's last checkpoint, rolls the run back or lets the thread's next run start.
    let outcome = match (observer.flush().await, outcome) {
        (Err(message), RunOutcome::Success { .. }) => RunOutcome::Error {
            error: "CheckpointError".into(),
            message,
        },
        (Err(message), outcome) => {
            tracing::warn!(run_id = %run.run_id, error = %message, "a checkpoint of an ending run was not written");
            outcome
        }
        (Ok(()), outcome) => outcome,
    };
    let last = observer.last();
    let graph_id = kw.graph_id.clone().unwrap_or_default();
    let mut thread_meta = Map::new();
    thread_meta.insert("graph_id".into(), json!(graph_id));
    thread_meta.insert("assistant_id".into(), json!(run.assistant_id));
    let thread_config = {
        let mut m = Map::new();
        m.insert(
            "configurable".into(),
            Value::Object(kw.config.configurable.clone()),
        );
        Some(m)
    };

    // What the run leaves on the thread, from its own last checkpoint if it wrote one.
    let (values, interrupts, has_next) = match &last {
        Some(l) => (
            Some(state_value(&l.state)),
            pending_interrupts(&l.tasks),
            !l.next.is_empty(),
        ),
        None => summary_from_checkpoint(latest_checkpoint(rt, &run.thread_id).await.as_ref()),
    };

    if matches!(
        reason,
        Some(StopReason::Shutdown) | Some(StopReason::LostLease)
    ) && matches!(outcome, RunOutcome::Cancelled)
    {
        // Released (shutdown) or taken over: not an end, the run goes on elsewhere.
        fawn_telemetry::trace::current().set(fawn_telemetry::trace::Attr::new(
            fawn_telemetry::trace::attrs::RUN_STATUS,
            if reason == Some(StopReason::Shutdown) {
                "released"
            } else {
                "lost_lease"
            },
        ));
        if reason == Some(StopReason::Shutdown)
            && let Err(e) = rt.store.release_run(&run.run_id, &rt.queue.worker_id).await
        {
            tracing::warn!(run_id = %run.run_id, error = %e, "releasing the run failed");
        }
        log.close(None);
        rt.broker.remove(&run.run_id);
        return;
    }

    if reason == Some(StopReason::Cancel(CancelAction::Rollback)) {
        if let Err(e) = rt
            .store
            .delete_checkpoints_for_run(&run.thread_id, &run.run_id)
            .await
        {
            tracing::warn!(run_id = %run.run_id, error = %e, "rollback: deleting checkpoints failed");
        }
        let cp = latest_checkpoint(rt, &run.thread_id).await;
        let (values, interrupts, has_next) = summary_from_checkpoint(cp.as_ref());
        let finish = RunFinish {
            status: RunStatus::Interrupted,
            error: None,
            stop_reason: Some("rollback".into()),
            thread: ThreadSummary {
                values: Some(values.unwrap_or(Value::Null)),
                interrupts,
                has_next,
                error: None,
                metadata: thread_meta,
                config: thread_config,
            },
        };
        if let Err(e) = rt
            .store
            .finish_run(&run.run_id, &rt.queue.worker_id, finish)
            .await
        {
            tracing::warn!(run_id = %run.run_id, error = %e, "rollback: finishing the run failed");
        }
        if let Err(e) = rt.store.delete_run(&run.run_id).await {
            tracing::warn!(run_id = %run.run_id, error = %e, "rollback: deleting the run failed");
        }
        record_end(RunStatus::Interrupted.as_str(), started_at, None, None);
        rt.broker
            .finish(&run.run_id, Some(Bytes::from_static(b"{}")));
        cleanup_temporary(rt, run, kw.temporary).await;
        return;
    }

    // The wait/join body is the last `values` the run produced: its last checkpoint, else
    // the state it resumed from (a run with nothing left to do), else the thread's state.
    let start_values = if last.is_none() {
        observer.start_values()
    } else {
        None
    };
    let empty = json!({});
    let body_values: &Value = start_values.as_ref().or(values.as_ref()).unwrap_or(&empty);
    let webhook_values = kw.webhook.as_ref().map(|_| body_values.clone());
    let (status, error, stop_reason, body) = match outcome {
        RunOutcome::Success {
            interrupts: raised,
            stop_reason,
        } => {
            let body = if raised.is_empty() {
                if has_next && last.is_some() && modes.updates {
                    observer.publish("updates", Bytes::from_static(br#"{"__interrupt__":[]}"#));
                }
                Bytes::from(body_values.to_string())
            } else {
                let wire = interrupts_wire(&raised);
                if modes.updates && !observer.interrupt_update_sent() {
                    observer.publish(
                        "updates",
                        Bytes::from(json!({"__interrupt__": wire}).to_string()),
                    );
                }
                let mut with_interrupts = body_values.clone();
                if let Value::Object(m) = &mut with_interrupts {
                    m.insert("__interrupt__".into(), wire);
                }
                let body = Bytes::from(with_interrupts.to_string());
                if modes.values {
                    observer.publish("values", body.clone());
                }
                body
            };
            observer.graph_end(body_values);
            (RunStatus::Success, None, stop_reason, body)
        }
        RunOutcome::Error { error, message } => {
            let err = json!({"error": error, "message": message});
            observer.publish("error", Bytes::from(err.to_string()));
            let body = Bytes::from(json!({"__error__": &err}).to_string());
            (RunStatus::Error, Some(err), None, body)
        }
        RunOutcome::Cancelled => (
            RunStatus::Interrupted,
            None,
            Some("cancelled".to_string()),
            Bytes::from(body_values.to_string()),
        ),
    };
    record_end(
        status.as_str(),
        started_at,
        error.as_ref(),
        Some(body_values),
    );
    // The run's messages go to the journal with its status, ahead of it: whoever sees it
    // finished finds them.
    let journal = match (start, &last) {
        (Some(start), Some(l)) => Some(crate::journal::Entry {
            start,
            end: &l.state,
            started_at,
            extra: observer.take_journal(),
        }),
        _ => None,
    };
    // The thread's status follows its latest checkpoint, also after a cancel: nodes still
    // scheduled next leave it `interrupted` (as the official server does), none `idle`.
    let finish = RunFinish {
        status,
        error: error.clone(),
        stop_reason,
        thread: ThreadSummary {
            values,
            interrupts,
            has_next,
            error: error.clone(),
            metadata: thread_meta,
            config: thread_config,
        },
    };
    let finished = match crate::journal::finish(rt, run, finish, journal).await {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(run_id = %run.run_id, error = %e, "recording the run's end failed");
            None
        }
    };
    rt.broker.finish(&run.run_id, Some(body));
    if let (Some(url), Some(finished), Some(values)) = (&kw.webhook, finished, webhook_values) {
        let payload = webhook::body(
            &finished,
            values,
            &crate::wire::ts(&started_at),
            &crate::wire::ts(&chrono::Utc::now()),
        );
        let rt2 = rt.clone();
        let url = url.clone();
        rt.queue
            .spawn(async move { webhook::send(rt2, url, payload).await });
    }
    cleanup_temporary(rt, run, kw.temporary).await;
}

fn pending_interrupts(tasks: &[PendingTask]) -> JsonMap {
    let mut m = Map::new();
    for t in tasks {
        if !t.interrupts.is_empty() {
            m.insert(t.id.clone(), json!(t.interrupts));
        }
    }
    m
}

/// Deletes a stateless run's temporary thread (and its files).
async fn cleanup_temporary(rt: &Rt, run: &Run, temporary: bool) {
    if !temporary {
        return;
    }
    if let Err(e) = rt.store.delete_thread(&run.thread_id).await {
        tracing::warn!(thread_id = %run.thread_id, error = %e, "deleting a temporary thread failed");
    }
    crate::threads::delete_thread_files(rt, &run.thread_id).await;
}

/// Acts on what other processes announce through the store (Postgres `NOTIFY`): stops the
/// runs executing here that one was asked to cancel, at once instead of at the next
/// heartbeat, and wakes the relays of runs that made progress.
pub async fn follow_signals(rt: Rt, mut signals: fawn_checkpoint::Signals) {
    use futures::StreamExt;
    loop {
        // Ends with the runtime, so the listening connection goes back before the pool
        // closes.
        let next = tokio::select! {
            _ = rt.shutdown.cancelled() => return,
            next = signals.next() => next,
        };
        match next {
            None => return,
            Some(Signal::Cancel { run_id, action }) => {
                if let Some(a) = rt.queue.active(&run_id) {
                    fawn_telemetry::metrics().bus_cancels.inc();
                    tracing::debug!(%run_id, "cancelled from another process");
                    a.stop(StopReason::Cancel(action));
                }
            }
            Some(Signal::Progress { run_id }) => rt.bus().progress(&run_id),
        }
    }
}

/// Cancels runs: pending ones end at once in the store, running ones here get their token
/// fired (the model stream is dropped within milliseconds); running ones elsewhere are told
/// through the store's cancel signals (Postgres) or see the request on their next heartbeat.
pub async fn cancel(rt: &Rt, target: CancelTarget, action: CancelAction) -> Result<Vec<Run>> {
    let matched = rt
        .store
        .cancel_runs(&target, action)
        .await
        .map_err(|e| RuntimeError::store("cancelling runs", e))?;
    let action_label = match action {
        CancelAction::Interrupt => "interrupt",
        CancelAction::Rollback => "rollback",
    };
    fawn_telemetry::metrics()
        .run_cancels
        .with_label_values(&[action_label])
        .inc_by(matched.len() as u64);
    for r in &matched {
        if let Some(a) = rt.queue.active(&r.run_id) {
            a.stop(StopReason::Cancel(action));
            continue;
        }
        match r.status {
            RunStatus::Pending => {
                let body = if action == CancelAction::Rollback {
                    Bytes::from_static(b"{}")
                } else {
                    Bytes::from(
                        latest_checkpoint(rt, &r.thread_id)
                            .await
                            .map(|c| state_value(&c.state))
                            .unwrap_or_else(|| json!({}))
                            .to_string(),
                    )
                };
                rt.broker.finish(&r.run_id, Some(body));
                let temporary = RunKwargs::from_map(&r.kwargs).is_ok_and(|k| k.temporary);
                cleanup_temporary(rt, r, temporary).await;
            }
            RunStatus::Running => {
                lock(&rt.queue.early_cancels).insert(r.run_id.clone(), (action, Instant::now()));
                // It may be about to start here: check again once it is registered.
                if let Some(a) = rt.queue.active(&r.run_id) {
                    a.stop(StopReason::Cancel(action));
                }
            }
            _ => {}
        }
    }
    rt.queue.notify.notify_one();
    Ok(matched)
}

/// Deletes a run: an active one is cancelled first (and waited for up to 5 s), then the
/// run and its event log go.
pub async fn delete_run(rt: &Rt, run: &Run) -> Result<()> {
    if run.status.is_active() {
        let _ = cancel(
            rt,
            CancelTarget::Runs {
                thread_id: Some(run.thread_id.clone()),
                run_ids: vec![run.run_id.clone()],
            },
            CancelAction::Interrupt,
        )
        .await;
        wait_terminal(rt, &run.run_id, Duration::from_secs(5)).await;
    }
    rt.store
        .delete_run(&run.run_id)
        .await
        .map_err(|e| RuntimeError::store("deleting the run", e))?;
    rt.broker.remove(&run.run_id);
    Ok(())
}

/// Waits until a run is no longer pending/running (or `timeout` passes).
pub async fn wait_terminal(rt: &Rt, run_id: &str, timeout: Duration) {
    let deadline = tokio::time::Instant::now() + timeout;
    if let Some(log) = rt.broker.get(run_id) {
        let _ = tokio::time::timeout_at(deadline, log.wait_done()).await;
        return;
    }
    while tokio::time::Instant::now() < deadline {
        match rt.store.get_run(run_id).await {
            Ok(Some(r)) if r.status.is_active() => {}
            _ => return,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops claiming, lets in-flight runs finish for up to `drain`, then stops the rest (they
/// are released for another worker, which resumes them from their last checkpoint) and
/// waits for them up to the grace period.
pub async fn shutdown(rt: &crate::Runtime) {
    let q = &rt.queue;
    q.stopping.cancel();
    let drained = tokio::time::Instant::now() + q.cfg.drain;
    while q.active_count() > 0 && tokio::time::Instant::now() < drained {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let actives: Vec<Arc<ActiveRun>> = lock(&q.active).values().cloned().collect();
    for a in actives {
        a.stop(StopReason::Shutdown);
    }
    let deadline = tokio::time::Instant::now() + q.cfg.shutdown_grace;
    while q.active_count() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Feeds the local log of a run that another node executes (or will), for the joiners on
/// this node, through the event bus (see [`crate::bus`]).
pub fn relay_remote_run(rt: &Rt, run: &Run, log: Arc<RunLog>) {
    rt.bus().follow(rt, run, log);
}
