//! The in-process side of the queue (the runs table is the queue itself): runs submitted
//! at creation, the dispatcher claiming due runs while there is capacity, the reaper
//! returning runs of dead workers, and shutdown.

use super::execute::execute;
use super::{ActiveRun, StopReason, lock};
use crate::broker::RunLog;
use crate::runtime::RuntimeHandle;
use fawn_checkpoint::{CancelAction, Run, RunClaim};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

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
    pub(super) active: Mutex<HashMap<String, Arc<ActiveRun>>>,
    /// Cancels that arrived for a run the store reported running but that is not (yet)
    /// executing here.
    pub(super) early_cancels: Mutex<HashMap<String, (CancelAction, Instant)>>,
    pub notify: Notify,
    /// About how many runs this process saw wait in the queue (not claimable when created:
    /// busy thread, delay, no capacity), minus those the dispatcher claimed since. The
    /// dispatcher is woken after a run ends only when this is non-zero (an over-count only
    /// costs a query); runs from other processes are found by polling.
    pub(super) maybe_pending: std::sync::atomic::AtomicUsize,
    pub(super) permits: Arc<Semaphore>,
    pub stopping: CancellationToken,
    pub(super) tasks: Mutex<JoinSet<()>>,
    /// Where executing runs send their lease renewals (see [`super::renew`]); started by
    /// the first renewal.
    pub(super) renewals: Mutex<Option<tokio::sync::mpsc::UnboundedSender<super::renew::Renewal>>>,
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
            renewals: Mutex::new(None),
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

/// A run created here that this node did not claim at once may execute on another node
/// sharing the store: its creator's stream and `/wait` here follow it through the event bus
/// (which stops as soon as the run executes here after all; a no-op on a single node).
fn follow_if_shared(rt: &RuntimeHandle, run: &Run) {
    if let Some(log) = rt.broker.get(&run.run_id) {
        rt.bus().follow(rt, run, log);
    }
}

/// A slot to execute a run being created here at once, when it is due now and this node
/// has one free: its creation then claims it in the same write ([`NewRun::claim`]).
///
/// [`NewRun::claim`]: fawn_checkpoint::NewRun::claim
pub fn reserve(rt: &RuntimeHandle, after_seconds: f64) -> Option<(OwnedSemaphorePermit, RunClaim)> {
    let q = &rt.queue;
    if after_seconds > 0.0 || q.stopping.is_cancelled() {
        return None;
    }
    let permit = q.permits.clone().try_acquire_owned().ok()?;
    Some((
        permit,
        RunClaim {
            worker_id: q.worker_id.clone(),
            lease: q.cfg.lease,
        },
    ))
}

/// Hands a freshly created run to the queue: executed here at once when its creation
/// claimed it (with the slot [`reserve`]d for it), otherwise left for the dispatcher (of
/// any node) — at once when the node was full or its thread busy, after its delay when it
/// has one.
pub fn submit(
    rt: &RuntimeHandle,
    run: &Run,
    after_seconds: f64,
    claimed: Option<(Run, OwnedSemaphorePermit)>,
) {
    let q = &rt.queue;
    if let Some((run, permit)) = claimed {
        // Boxed: the run's future is large, and spawning moves (copies) whatever the
        // spawned future holds several times over.
        q.spawn(Box::pin(execute(rt.clone(), run, permit)));
        return;
    }
    if q.stopping.is_cancelled() {
        return;
    }
    follow_if_shared(rt, run);
    if after_seconds > 0.0 {
        let rt2 = rt.clone();
        let delay = Duration::from_secs_f64(after_seconds);
        q.spawn(async move {
            tokio::time::sleep(delay).await;
            rt2.queue.note_pending();
        });
        return;
    }
    q.note_pending();
}

/// Claims due runs while there is capacity. Runs until the queue stops.
pub async fn dispatcher(rt: RuntimeHandle) {
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
pub async fn reaper(rt: RuntimeHandle) {
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
pub async fn reap(rt: &RuntimeHandle, now: chrono::DateTime<chrono::Utc>) -> usize {
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
pub fn relay_remote_run(rt: &RuntimeHandle, run: &Run, log: Arc<RunLog>) {
    rt.bus().follow(rt, run, log);
}
