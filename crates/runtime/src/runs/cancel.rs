//! Stopping runs: cancel (here, in the store, or told to the node executing it), delete,
//! waiting for a run's end, and the cancels other processes announce.

use super::finish::cleanup_temporary;
use super::{StopReason, latest_checkpoint, lock, state_value};
use crate::error::{Result, RuntimeError};
use crate::kwargs::RunKwargs;
use crate::runtime::RuntimeHandle;
use bytes::Bytes;
use fawn_checkpoint::{CancelAction, CancelTarget, Run, RunStatus, Signal};
use serde_json::json;
use std::time::{Duration, Instant};

/// Acts on what other processes announce through the store (Postgres `NOTIFY`): stops the
/// runs executing here that one was asked to cancel, at once instead of at the next
/// heartbeat, and wakes the relays of runs that made progress.
pub async fn follow_signals(rt: RuntimeHandle, mut signals: fawn_checkpoint::Signals) {
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
pub async fn cancel(
    rt: &RuntimeHandle,
    target: CancelTarget,
    action: CancelAction,
) -> Result<Vec<Run>> {
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
pub async fn delete_run(rt: &RuntimeHandle, run: &Run) -> Result<()> {
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
pub async fn wait_terminal(rt: &RuntimeHandle, run_id: &str, timeout: Duration) {
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
