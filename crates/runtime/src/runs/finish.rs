//! The end of an attempt: its queued checkpoints flushed, then one of three ends — released
//! or taken over (not an end: the run goes on elsewhere), rolled back, or a terminal status
//! with the thread's summary, the run's journal rows, the final events and `/wait` body, the
//! webhook and a temporary thread's deletion. The `/wait` and `/join` result body is built
//! here only ([`result_body`], [`wait_result`]).

use super::{Attempt, StopReason, latest_checkpoint, state_value};
use crate::hooks::Point;
use crate::observer::{Observer, interrupts_wire, to_bytes};
use crate::runtime::{Runtime, RuntimeHandle};
use crate::webhook;
use bytes::Bytes;
use fawn_agent::{PendingTask, RunOutcome};
use fawn_checkpoint::{
    CancelAction, Checkpoint, JsonMap, Run, RunFinish, RunStatus, ThreadStatus, ThreadSummary,
};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// The `/wait` and `/join` result of a run that ended: `values`, with `__interrupt__` (the
/// interrupts raised) when `interrupts` is given and `values` is an object.
pub fn result_body(values: &Value, interrupts: Option<Value>) -> Bytes {
    match (interrupts, values) {
        (Some(interrupts), Value::Object(m)) => {
            let mut m = m.clone();
            m.insert("__interrupt__".into(), interrupts);
            to_bytes(&Value::Object(m))
        }
        _ => to_bytes(values),
    }
}

/// The `/wait` and `/join` result of a run that failed with `error`.
pub fn error_body(error: &Value) -> Bytes {
    Bytes::from(json!({ "__error__": error }).to_string())
}

/// The `/wait` and `/join` result of a run that is over: the body its end left in this
/// node's log, else what its thread shows now ([`thread_result`]).
pub async fn wait_result(rt: &Runtime, run_id: &str, thread_id: &str) -> Bytes {
    if let Some(log) = rt.run_log(run_id)
        && let Some(b) = log.final_body()
    {
        return b;
    }
    thread_result(rt, thread_id).await
}

/// A thread's current values as a `/wait` result: with `__interrupt__` when it is
/// interrupted, `__error__` when its last run failed; `{}` for a thread that is gone.
pub async fn thread_result(rt: &Runtime, thread_id: &str) -> Bytes {
    let Ok(Some(t)) = rt.store.get_thread(thread_id).await else {
        return Bytes::from_static(b"{}");
    };
    if t.status == ThreadStatus::Error
        && let Some(e) = &t.error
    {
        return error_body(e);
    }
    let values = t.values.clone().unwrap_or_else(|| json!({}));
    let mut interrupts = None;
    if t.status == ThreadStatus::Interrupted {
        let all: Vec<Value> = t
            .interrupts
            .values()
            .filter_map(Value::as_array)
            .flatten()
            .cloned()
            .collect();
        if !all.is_empty() {
            interrupts = Some(Value::Array(all));
        }
    }
    result_body(&values, interrupts)
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

/// Ends an attempt: [`settle`] between the test seams `BeforeFinish` and `Finished`.
pub(super) async fn finish_attempt(a: &Attempt<'_>, observer: &Observer, outcome: RunOutcome) {
    let _ =
        a.rt.hooks
            .reach(Point::BeforeFinish, &a.run.run_id, &a.active.token)
            .await;
    settle(a, observer, outcome).await;
    let _ =
        a.rt.hooks
            .reach(Point::Finished, &a.run.run_id, &CancellationToken::new())
            .await;
}

/// Records the outcome, publishes the final events and closes the stream.
async fn settle(a: &Attempt<'_>, observer: &Observer, outcome: RunOutcome) {
    let reason = a.active.reason();
    // Checkpoints still being written belong to this run: they land before anything reads
    // the run's last checkpoint, rolls the run back or lets the thread's next run start.
    let outcome = match (observer.flush().await, outcome) {
        (Err(message), RunOutcome::Success { .. }) => RunOutcome::Error {
            error: "CheckpointError".into(),
            message,
        },
        (Err(message), outcome) => {
            tracing::warn!(run_id = %a.run.run_id, error = %message, "a checkpoint of an ending run was not written");
            outcome
        }
        (Ok(()), outcome) => outcome,
    };
    match reason {
        Some(StopReason::Shutdown | StopReason::LostLease)
            if matches!(outcome, RunOutcome::Cancelled) =>
        {
            hand_over(a, reason == Some(StopReason::Shutdown)).await
        }
        Some(StopReason::Cancel(CancelAction::Rollback)) => roll_back(a).await,
        _ => record_outcome(a, observer, outcome).await,
    }
}

/// Released (shutdown) or taken over: not an end, the run goes on elsewhere.
async fn hand_over(a: &Attempt<'_>, released: bool) {
    let (rt, run) = (a.rt, a.run);
    fawn_telemetry::trace::current().set(fawn_telemetry::trace::Attr::new(
        fawn_telemetry::trace::attrs::RUN_STATUS,
        if released { "released" } else { "lost_lease" },
    ));
    if released && let Err(e) = rt.store.release_run(&run.run_id, &rt.queue.worker_id).await {
        tracing::warn!(run_id = %run.run_id, error = %e, "releasing the run failed");
    }
    a.log.close(None);
    rt.broker.remove(&run.run_id);
}

/// The thread's metadata and config as a finished run leaves them.
fn thread_metadata_and_config(a: &Attempt<'_>) -> (JsonMap, Option<JsonMap>) {
    let graph_id = a.kw.graph_id.clone().unwrap_or_default();
    let mut thread_meta = Map::new();
    thread_meta.insert("graph_id".into(), json!(graph_id));
    thread_meta.insert("assistant_id".into(), json!(a.run.assistant_id));
    let mut config = Map::new();
    config.insert(
        "configurable".into(),
        Value::Object(a.kw.config.configurable.clone()),
    );
    (thread_meta, Some(config))
}

/// Cancelled with rollback: the run's checkpoints and the run itself go; the thread is left
/// as its latest remaining checkpoint says.
async fn roll_back(a: &Attempt<'_>) {
    let (rt, run) = (a.rt, a.run);
    let (metadata, config) = thread_metadata_and_config(a);
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
            metadata,
            config,
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
    record_end(RunStatus::Interrupted.as_str(), a.started_at, None, None);
    rt.broker
        .finish(&run.run_id, Some(Bytes::from_static(b"{}")));
    cleanup_temporary(rt, run, a.kw.temporary).await;
}

/// A terminal status: the final events and `/wait` body, the status with the run's journal
/// rows and the thread's summary, the webhook, a temporary thread's deletion.
async fn record_outcome(a: &Attempt<'_>, observer: &Observer, outcome: RunOutcome) {
    let (rt, run, kw) = (a.rt, a.run, &a.kw);
    let modes = observer.modes();
    let last = observer.last();
    let (thread_meta, thread_config) = thread_metadata_and_config(a);
    // What the run leaves on the thread, from its own last checkpoint if it wrote one.
    let (values, interrupts, has_next) = match &last {
        Some(l) => (
            Some(state_value(&l.state)),
            pending_interrupts(&l.tasks),
            !l.next.is_empty(),
        ),
        None => summary_from_checkpoint(latest_checkpoint(rt, &run.thread_id).await.as_ref()),
    };
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
                result_body(body_values, None)
            } else {
                let wire = interrupts_wire(&raised);
                if modes.updates && !observer.interrupt_update_sent() {
                    observer.publish(
                        "updates",
                        Bytes::from(json!({"__interrupt__": wire}).to_string()),
                    );
                }
                let body = result_body(body_values, Some(wire));
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
            let body = error_body(&err);
            (RunStatus::Error, Some(err), None, body)
        }
        RunOutcome::Cancelled => (
            RunStatus::Interrupted,
            None,
            Some("cancelled".to_string()),
            result_body(body_values, None),
        ),
    };
    record_end(
        status.as_str(),
        a.started_at,
        error.as_ref(),
        Some(body_values),
    );
    // The run's messages go to the journal with its status, ahead of it: whoever sees it
    // finished finds them.
    let journal = match (&a.journal_start, &last) {
        (Some(start), Some(l)) => Some(crate::journal::Entry {
            start,
            end: &l.state,
            started_at: a.started_at,
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
    if finished.is_some() && !kw.temporary {
        crate::retention::prune_after_run(rt, &run.thread_id);
    }
    if let (Some(url), Some(finished), Some(values)) = (&kw.webhook, finished, webhook_values) {
        let payload = webhook::body(
            &finished,
            values,
            &crate::wire::ts(&a.started_at),
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
pub(super) async fn cleanup_temporary(rt: &RuntimeHandle, run: &Run, temporary: bool) {
    if !temporary {
        return;
    }
    if let Err(e) = rt.store.delete_thread(&run.thread_id).await {
        tracing::warn!(thread_id = %run.thread_id, error = %e, "deleting a temporary thread failed");
    }
    crate::threads::delete_thread_files(rt, &run.thread_id).await;
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
