//! The run manager. The runs table is the queue: a run is claimed with a lease (in-process
//! notify for immediate pickup, jittered polling for runs created by other processes),
//! executed here through its graph's [`GraphRunner`], kept alive by heartbeats at lease/3
//! (which also deliver cancellations requested by other processes), and finished with a
//! terminal status written before its stream closes. A reaper returns runs whose worker died
//! to the queue; they resume from their last checkpoint with `attempt` + 1.
//!
//! [`GraphRunner`]: fawn_agent::GraphRunner

pub mod create;
pub mod observer;
pub mod webhook;

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::stream::RunLog;
use bytes::Bytes;
use fawn_agent::{Breakpoints, PendingTask, RunObserver, RunOutcome, RunSpec, StartPoint};
use fawn_checkpoint::{
    CancelAction, CancelTarget, Checkpoint, JsonMap, Run, RunFinish, RunStatus, StoreError,
    ThreadSummary,
};
use futures::FutureExt;
use observer::{Durability, Modes, Observer, interrupts_wire};
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
    pub lease: Duration,
    pub max_attempts: u32,
    pub max_concurrent_runs: usize,
    pub poll_interval: Duration,
    pub shutdown_grace: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            lease: Duration::from_secs(30),
            max_attempts: 3,
            max_concurrent_runs: 256,
            poll_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
        }
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

/// Hands a freshly created run to the queue: claimed and executed here at once when it is
/// due and its thread is free, otherwise left for the dispatcher.
pub fn submit(app: &AppState, run: &Run, after_seconds: f64) {
    let q = &app.queue;
    if q.stopping.is_cancelled() {
        return;
    }
    if after_seconds > 0.0 {
        let app2 = app.clone();
        let delay = Duration::from_secs_f64(after_seconds);
        q.spawn(async move {
            tokio::time::sleep(delay).await;
            app2.queue.note_pending();
        });
        return;
    }
    let Ok(permit) = q.permits.clone().try_acquire_owned() else {
        q.note_pending();
        return;
    };
    let app2 = app.clone();
    let run_id = run.run_id.clone();
    q.spawn(async move {
        let lease = app2.queue.cfg.lease;
        match app2
            .store
            .claim_run(&run_id, &app2.queue.worker_id, lease)
            .await
        {
            Ok(Some(run)) => execute(app2, run, permit).await,
            Ok(None) => {
                drop(permit);
                app2.queue.note_pending();
            }
            Err(e) => {
                drop(permit);
                tracing::warn!(%run_id, error = %e, "claiming a new run failed");
                app2.queue.note_pending();
            }
        }
    });
}

/// Claims due runs while there is capacity. Runs until the queue stops.
pub async fn dispatcher(app: AppState) {
    let q = &app.queue;
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
            match app.store.claim_next_run(&q.worker_id, q.cfg.lease).await {
                Ok(Some(run)) => {
                    let _ = q.maybe_pending.fetch_update(
                        std::sync::atomic::Ordering::Relaxed,
                        std::sync::atomic::Ordering::Relaxed,
                        |n| Some(n.saturating_sub(1)),
                    );
                    let app2 = app.clone();
                    q.spawn(async move { execute(app2, run, permit).await });
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
pub async fn reaper(app: AppState) {
    let q = &app.queue;
    let period = (q.cfg.lease / 2).max(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = q.stopping.cancelled() => return,
        }
        reap(&app, chrono::Utc::now()).await;
        q.forget_old_cancels();
    }
}

/// Reaps runs whose lease expired before `now`; returns how many were touched.
pub async fn reap(app: &AppState, now: chrono::DateTime<chrono::Utc>) -> usize {
    match app
        .store
        .reap_expired_runs(now, app.queue.cfg.max_attempts)
        .await
    {
        Ok(runs) => {
            for r in &runs {
                tracing::warn!(run_id = %r.run_id, thread_id = %r.thread_id, attempt = r.attempt,
                    status = r.status.as_str(), "recovered a run whose worker stopped");
                if !r.status.is_active() {
                    app.broker.finish(&r.run_id, None);
                }
            }
            if !runs.is_empty() {
                app.queue.notify.notify_one();
            }
            runs.len()
        }
        Err(e) => {
            tracing::warn!(error = %e, "reaping expired runs failed");
            0
        }
    }
}

async fn heartbeat_loop(app: AppState, run_id: String, active: Arc<ActiveRun>) {
    let lease = app.queue.cfg.lease;
    let period = (lease / 3).max(Duration::from_millis(50));
    loop {
        tokio::time::sleep(period).await;
        match app
            .store
            .heartbeat(&run_id, &app.queue.worker_id, lease)
            .await
        {
            Ok(Some(action)) => active.stop(StopReason::Cancel(action)),
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
pub async fn execute(app: AppState, run: Run, permit: OwnedSemaphorePermit) {
    let run_id = run.run_id.clone();
    let active = Arc::new(ActiveRun::new());
    lock(&app.queue.active).insert(run_id.clone(), active.clone());
    if let Some((action, _)) = lock(&app.queue.early_cancels).remove(&run_id) {
        active.stop(StopReason::Cancel(action));
    }
    if let Some(action) = run.cancel_requested {
        active.stop(StopReason::Cancel(action));
    }
    let span = tracing::info_span!("run", run_id = %run_id, thread_id = %run.thread_id, attempt = run.attempt);
    // The heartbeat runs in this task, so aborting the task (a crash) stops both.
    let heartbeat = heartbeat_loop(app.clone(), run_id.clone(), active.clone());
    let work = run_attempt(&app, &run, &active).instrument(span);
    tokio::pin!(heartbeat);
    tokio::pin!(work);
    let mut heartbeat_done = false;
    loop {
        tokio::select! {
            _ = &mut work => break,
            _ = &mut heartbeat, if !heartbeat_done => heartbeat_done = true,
        }
    }
    lock(&app.queue.active).remove(&run_id);
    drop(permit);
    // Only look for more work when some is known to wait (polling finds the rest).
    if app
        .queue
        .maybe_pending
        .load(std::sync::atomic::Ordering::Relaxed)
        > 0
    {
        app.queue.notify.notify_one();
    }
}

fn kw_str<'a>(kw: &'a JsonMap, key: &str) -> Option<&'a str> {
    kw.get(key).and_then(Value::as_str)
}

fn kw_bool(kw: &JsonMap, key: &str) -> bool {
    kw.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn kw_config(kw: &JsonMap) -> JsonMap {
    match kw.get("config") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    }
}

fn breakpoints(v: Option<&Value>) -> Breakpoints {
    match v {
        Some(Value::String(s)) if s == "*" => Breakpoints::All,
        Some(Value::Array(a)) => Breakpoints::Nodes(
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        ),
        _ => Breakpoints::None,
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
async fn build_spec(app: &AppState, run: &Run, graph_id: &str) -> Result<RunSpec, String> {
    let kw = &run.kwargs;
    let config = kw_config(kw);
    let configurable = match config.get("configurable") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    let context = match kw.get("context") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    let tags = match config.get("tags") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };
    let latest = app
        .store
        .get_checkpoint(&run.thread_id, "", None)
        .await
        .map_err(|e| format!("loading the thread's state failed: {e}"))?;
    // The run already wrote checkpoints (a recovered or released run): continue from the
    // last one instead of applying its input again.
    let resumed = latest
        .as_ref()
        .is_some_and(|c| c.run_id.as_deref() == Some(run.run_id.as_str()));
    let fork_id = kw
        .get("checkpoint")
        .and_then(|c| c.get("checkpoint_id"))
        .and_then(Value::as_str);
    let start = if resumed {
        start_point(latest.as_ref(), false)
    } else if let Some(cid) = fork_id {
        let ns = kw
            .get("checkpoint")
            .and_then(|c| c.get("checkpoint_ns"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let cp = app
            .store
            .get_checkpoint(&run.thread_id, ns, Some(cid))
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
        let input = match kw.get("input") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                fawn_state::StateUpdate::from_value(v.clone())
                    .map_err(|e| format!("invalid input: {e}"))?,
            ),
        };
        let command = match kw.get("command") {
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
        configurable,
        context,
        recursion_limit: config.get("recursion_limit").cloned(),
        tags,
        metadata,
        input,
        command,
        interrupt_before: breakpoints(kw.get("interrupt_before")),
        interrupt_after: breakpoints(kw.get("interrupt_after")),
        start,
    })
}

fn checkpoint_meta(run: &Run, graph_id: &str) -> JsonMap {
    let mut m = run.metadata.clone();
    m.insert("graph_id".into(), json!(graph_id));
    m.insert("assistant_id".into(), json!(run.assistant_id));
    m.insert("run_id".into(), json!(run.run_id));
    m.insert("thread_id".into(), json!(run.thread_id));
    m.insert("user_id".into(), json!(""));
    m.insert("run_attempt".into(), json!(run.attempt.max(1)));
    m.insert("langgraph_api_version".into(), json!(crate::VERSION));
    m
}

async fn run_attempt(app: &AppState, run: &Run, active: &Arc<ActiveRun>) {
    let kw = &run.kwargs;
    let attempt = run.attempt.max(1);
    let log = app
        .broker
        .open(&run.run_id, &run.thread_id, kw_bool(kw, "resumable"));
    if log.begin_attempt(attempt) {
        publish_metadata(&log, &run.run_id, &run.thread_id, attempt);
    }
    let started_at = chrono::Utc::now();
    let graph_id = match kw_str(kw, "graph_id") {
        Some(g) => g.to_string(),
        None => match app.store.get_assistant(&run.assistant_id).await {
            Ok(Some(a)) => a.graph_id,
            _ => String::new(),
        },
    };
    let Some(graph) = app.graphs.get(&graph_id).cloned() else {
        let outcome = RunOutcome::Error {
            error: "ValueError".into(),
            message: format!("Graph '{graph_id}' not found"),
        };
        let obs = Observer::new(
            app.clone(),
            log.clone(),
            run.thread_id.clone(),
            run.run_id.clone(),
            Modes::from_kwargs(kw),
            JsonMap::new(),
            None,
        );
        complete(app, run, &log, &obs, outcome, active, started_at).await;
        return;
    };
    let spec = match build_spec(app, run, &graph_id).await {
        Ok(s) => s,
        Err(message) => {
            let obs = Observer::new(
                app.clone(),
                log.clone(),
                run.thread_id.clone(),
                run.run_id.clone(),
                Modes::from_kwargs(kw),
                JsonMap::new(),
                None,
            );
            let outcome = RunOutcome::Error {
                error: "ValueError".into(),
                message,
            };
            complete(app, run, &log, &obs, outcome, active, started_at).await;
            return;
        }
    };
    let observer = Arc::new(
        Observer::new(
            app.clone(),
            log.clone(),
            run.thread_id.clone(),
            run.run_id.clone(),
            Modes::from_kwargs(kw),
            checkpoint_meta(run, &graph_id),
            spec.start.checkpoint_id.clone(),
        )
        .durability(Durability::from_kwarg(kw_str(kw, "durability"))),
    );
    if spec.input.is_none() && spec.start.checkpoint_id.is_some() {
        observer.resuming_from(&spec.start.state);
    }
    observer.graph_start(kw.get("input"));
    let dyn_obs: Arc<dyn RunObserver> = observer.clone();
    let outcome = match std::panic::AssertUnwindSafe(graph.run(spec, dyn_obs, active.token.clone()))
        .catch_unwind()
        .await
    {
        Ok(o) => o,
        Err(_) => {
            tracing::error!(run_id = %run.run_id, "the graph panicked");
            RunOutcome::Error {
                error: "InternalError".into(),
                message: "the graph panicked".into(),
            }
        }
    };
    complete(app, run, &log, &observer, outcome, active, started_at).await;
}

fn state_value(state: &fawn_state::ThreadState) -> Value {
    serde_json::to_value(state).unwrap_or_else(|_| Value::Object(Map::new()))
}

/// The thread's latest checkpoint (for summaries when the run wrote none).
async fn latest_checkpoint(app: &AppState, thread_id: &str) -> Option<Checkpoint> {
    app.store
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
async fn complete(
    app: &AppState,
    run: &Run,
    log: &Arc<RunLog>,
    observer: &Observer,
    outcome: RunOutcome,
    active: &Arc<ActiveRun>,
    started_at: chrono::DateTime<chrono::Utc>,
) {
    let kw = &run.kwargs;
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
    let graph_id = kw_str(kw, "graph_id").unwrap_or_default().to_string();
    let mut thread_meta = Map::new();
    thread_meta.insert("graph_id".into(), json!(graph_id));
    thread_meta.insert("assistant_id".into(), json!(run.assistant_id));
    let config = kw_config(kw);
    let thread_config = {
        let mut m = Map::new();
        m.insert(
            "configurable".into(),
            config.get("configurable").cloned().unwrap_or(json!({})),
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
        None => summary_from_checkpoint(latest_checkpoint(app, &run.thread_id).await.as_ref()),
    };

    if matches!(
        reason,
        Some(StopReason::Shutdown) | Some(StopReason::LostLease)
    ) && matches!(outcome, RunOutcome::Cancelled)
    {
        if reason == Some(StopReason::Shutdown)
            && let Err(e) = app
                .store
                .release_run(&run.run_id, &app.queue.worker_id)
                .await
        {
            tracing::warn!(run_id = %run.run_id, error = %e, "releasing the run failed");
        }
        log.close(None);
        app.broker.remove(&run.run_id);
        return;
    }

    if reason == Some(StopReason::Cancel(CancelAction::Rollback)) {
        if let Err(e) = app
            .store
            .delete_checkpoints_for_run(&run.thread_id, &run.run_id)
            .await
        {
            tracing::warn!(run_id = %run.run_id, error = %e, "rollback: deleting checkpoints failed");
        }
        let cp = latest_checkpoint(app, &run.thread_id).await;
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
        if let Err(e) = app
            .store
            .finish_run(&run.run_id, &app.queue.worker_id, finish)
            .await
        {
            tracing::warn!(run_id = %run.run_id, error = %e, "rollback: finishing the run failed");
        }
        if let Err(e) = app.store.delete_run(&run.run_id).await {
            tracing::warn!(run_id = %run.run_id, error = %e, "rollback: deleting the run failed");
        }
        app.broker
            .finish(&run.run_id, Some(Bytes::from_static(b"{}")));
        cleanup_temporary(app, run).await;
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
    let webhook_values = kw_str(kw, "webhook").map(|_| body_values.clone());
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
    // A cancelled run leaves the thread idle at its last checkpoint (not "interrupted",
    // even though that checkpoint has nodes scheduled next).
    let cancelled = status == RunStatus::Interrupted;
    let finish = RunFinish {
        status,
        error: error.clone(),
        stop_reason,
        thread: ThreadSummary {
            values,
            interrupts: if cancelled { Map::new() } else { interrupts },
            has_next: has_next && !cancelled,
            error: error.clone(),
            metadata: thread_meta,
            config: thread_config,
        },
    };
    let finished = match app
        .store
        .finish_run(&run.run_id, &app.queue.worker_id, finish)
        .await
    {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(run_id = %run.run_id, error = %e, "recording the run's end failed");
            None
        }
    };
    app.broker.finish(&run.run_id, Some(body));
    if let (Some(url), Some(finished), Some(values)) =
        (kw_str(kw, "webhook"), finished, webhook_values)
    {
        let payload = webhook::body(
            &finished,
            values,
            &crate::wire::ts(&started_at),
            &crate::wire::ts(&chrono::Utc::now()),
        );
        let app2 = app.clone();
        let url = url.to_string();
        app.queue
            .spawn(async move { webhook::send(app2, url, payload).await });
    }
    cleanup_temporary(app, run).await;
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
async fn cleanup_temporary(app: &AppState, run: &Run) {
    if !kw_bool(&run.kwargs, "temporary") {
        return;
    }
    if let Err(e) = app.store.delete_thread(&run.thread_id).await {
        tracing::warn!(thread_id = %run.thread_id, error = %e, "deleting a temporary thread failed");
    }
    crate::routes::threads::delete_thread_files(app, &run.thread_id).await;
}

/// Cancels runs: pending ones end at once in the store, running ones here get their token
/// fired (the model stream is dropped within milliseconds); running ones elsewhere see the
/// request on their next heartbeat.
pub async fn cancel(
    app: &AppState,
    target: CancelTarget,
    action: CancelAction,
) -> ApiResult<Vec<Run>> {
    let matched = app
        .store
        .cancel_runs(&target, action)
        .await
        .map_err(|e| ApiError::store("cancelling runs", e))?;
    for r in &matched {
        if let Some(a) = app.queue.active(&r.run_id) {
            a.stop(StopReason::Cancel(action));
            continue;
        }
        match r.status {
            RunStatus::Pending => {
                let body = if action == CancelAction::Rollback {
                    Bytes::from_static(b"{}")
                } else {
                    Bytes::from(
                        latest_checkpoint(app, &r.thread_id)
                            .await
                            .map(|c| state_value(&c.state))
                            .unwrap_or_else(|| json!({}))
                            .to_string(),
                    )
                };
                app.broker.finish(&r.run_id, Some(body));
                cleanup_temporary(app, r).await;
            }
            RunStatus::Running => {
                lock(&app.queue.early_cancels).insert(r.run_id.clone(), (action, Instant::now()));
                // It may be about to start here: check again once it is registered.
                if let Some(a) = app.queue.active(&r.run_id) {
                    a.stop(StopReason::Cancel(action));
                }
            }
            _ => {}
        }
    }
    app.queue.notify.notify_one();
    Ok(matched)
}

/// Waits until a run is no longer pending/running (or `timeout` passes).
pub async fn wait_terminal(app: &AppState, run_id: &str, timeout: Duration) {
    let deadline = tokio::time::Instant::now() + timeout;
    if let Some(log) = app.broker.get(run_id) {
        let _ = tokio::time::timeout_at(deadline, log.wait_done()).await;
        return;
    }
    while tokio::time::Instant::now() < deadline {
        match app.store.get_run(run_id).await {
            Ok(Some(r)) if r.status.is_active() => {}
            _ => return,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops claiming, cancels in-flight runs (they are released for another worker) and waits
/// for them up to the grace period.
pub async fn shutdown(app: &AppState) {
    let q = &app.queue;
    q.stopping.cancel();
    let actives: Vec<Arc<ActiveRun>> = lock(&q.active).values().cloned().collect();
    for a in actives {
        a.stop(StopReason::Shutdown);
    }
    let deadline = tokio::time::Instant::now() + q.cfg.shutdown_grace;
    while q.active_count() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
