//! One attempt of a claimed run: its lease kept by heartbeats, its span, the [`RunSpec`]
//! built from its stored options, the graph run (and a goal's continuation turns), then
//! [`super::finish`].

use super::finish::finish_attempt;
use super::{ActiveRun, Attempt, StopReason, lock};
use crate::broker::RunLog;
use crate::checkpoints::run_base_metadata;
use crate::hooks::Point;
use crate::kwargs::RunKwargs;
use crate::observer::{Modes, Observer};
use crate::runtime::RuntimeHandle;
use bytes::Bytes;
use fawn_agent::{PendingTask, RunObserver, RunOutcome, RunSpec, StartPoint};
use fawn_checkpoint::{Checkpoint, JsonMap, Run, StoreError};
use futures::FutureExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

/// Publishes a run's `metadata` event.
pub fn publish_metadata(log: &RunLog, run_id: &str, thread_id: &str, attempt: u32) {
    let data = json!({"run_id": run_id, "thread_id": thread_id, "attempt": attempt}).to_string();
    log.publish("metadata", Bytes::from(data));
}

async fn heartbeat_loop(rt: RuntimeHandle, run_id: String, active: Arc<ActiveRun>) {
    let lease = rt.queue.cfg.lease;
    let period = (lease / 3).max(Duration::from_millis(50));
    loop {
        tokio::time::sleep(period).await;
        match super::renew::renew_lease(&rt, &run_id).await {
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
pub async fn execute(rt: RuntimeHandle, run: Run, permit: OwnedSemaphorePermit) {
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
    rt: &RuntimeHandle,
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

/// The observer of an attempt's graph run (or of its failure to start).
fn observer(a: &Attempt<'_>, base_meta: JsonMap, parent: Option<String>) -> Observer {
    Observer::new(
        a.rt.clone(),
        a.log.clone(),
        a.run.thread_id.clone(),
        a.run.run_id.clone(),
        Modes::from_list(&a.kw.stream_mode),
        base_meta,
        parent,
        a.kw.durability,
        a.active.token.clone(),
    )
}

async fn run_attempt(rt: &RuntimeHandle, run: &Run, active: &Arc<ActiveRun>) {
    let number = run.attempt.max(1);
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
    if log.begin_attempt(number) {
        publish_metadata(&log, &run.run_id, &run.thread_id, number);
    }
    let mut attempt = Attempt {
        rt,
        run,
        kw,
        log,
        active,
        started_at,
        journal_start: None,
    };
    let graph_id = match &attempt.kw.graph_id {
        Some(g) => g.clone(),
        None => match rt.store.get_assistant(&run.assistant_id).await {
            Ok(Some(a)) => a.graph_id,
            _ => String::new(),
        },
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
        let spec = build_spec(rt, run, &attempt.kw, &graph_id).await?;
        Ok((graph, spec))
    }
    .await;
    let (graph, spec) = match prepared {
        Ok(p) => p,
        Err(message) => {
            let obs = observer(&attempt, JsonMap::new(), None);
            let outcome = RunOutcome::Error {
                error: "ValueError".into(),
                message,
            };
            finish_attempt(&attempt, &obs, outcome).await;
            return;
        }
    };
    let observer = Arc::new(observer(
        &attempt,
        run_base_metadata(run, &graph_id),
        spec.start.checkpoint_id.clone(),
    ));
    if spec.input.is_none() && spec.start.checkpoint_id.is_some() {
        observer.resuming_from(&spec.start.state);
    }
    observer.graph_start(attempt.kw.input.as_ref());
    // What the journal compares the run's final messages with (not for temporary threads).
    attempt.journal_start =
        (!attempt.kw.temporary).then(|| crate::journal::Start::of(&spec.start.state));
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
    finish_attempt(&attempt, &observer, outcome).await;
}
