//! Lease renewal for every run this node executes, many runs per statement.
//!
//! Each executing run renews its lease at a third of it and learns from the answer whether
//! another process asked to cancel it. Asked one run at a time, a node with N runs open
//! writes N/(lease/3) statements a second whatever the runs do (3,000 a second for 10,000
//! streams waiting on their models, queued behind SQLite's one writer like every other
//! write). Here a run hands its renewal to one task per node, which takes every renewal
//! waiting at that moment into a single [`RunStore::heartbeat_many`]: while one statement
//! runs, the next batch gathers, so the database sees a statement per round, not per run,
//! and each run still gets its own answer (its cancellation, or that it lost the run).
//!
//! [`RunStore::heartbeat_many`]: fawn_checkpoint::RunStore::heartbeat_many

use super::lock;
use crate::runtime::RuntimeHandle;
use fawn_checkpoint::{CancelAction, Persistence, StoreError};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Runs in one statement at most (a statement's arguments stay far below both databases'
/// limits; the store pads a batch to a power of two).
const MAX_BATCH: usize = 512;

type Answer = Result<Option<CancelAction>, StoreError>;

/// One run's request for a renewal, with where its answer goes.
pub(crate) type Renewal = (String, oneshot::Sender<Answer>);

fn stopped() -> StoreError {
    StoreError::Database("the lease renewer stopped".into())
}

/// Renews the lease of `run_id` (executing here): the cancellation another process asked
/// for, if any; `Err(NotFound)` when this node no longer owns the run.
pub(crate) async fn renew_lease(rt: &RuntimeHandle, run_id: &str) -> Answer {
    let (reply, answer) = oneshot::channel();
    let tx = {
        let mut g = lock(&rt.queue.renewals);
        match &*g {
            Some(tx) if !tx.is_closed() => tx.clone(),
            _ => {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(renewer(
                    Arc::downgrade(&rt.store),
                    rt.queue.worker_id.clone(),
                    rt.queue.cfg.lease,
                    rx,
                ));
                *g = Some(tx.clone());
                tx
            }
        }
    };
    if tx.send((run_id.to_string(), reply)).is_err() {
        return Err(stopped());
    }
    answer.await.unwrap_or_else(|_| Err(stopped()))
}

/// Takes the renewals waiting, renews them in one statement and answers each; ends when
/// the queue (the last sender) or the store is gone.
async fn renewer(
    store: Weak<dyn Persistence>,
    worker_id: String,
    lease: Duration,
    mut rx: mpsc::UnboundedReceiver<Renewal>,
) {
    let mut batch: Vec<Renewal> = Vec::new();
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let Some(store) = store.upgrade() else {
            return;
        };
        let ids: Vec<String> = batch.iter().map(|(id, _)| id.clone()).collect();
        match store.heartbeat_many(&ids, &worker_id, lease).await {
            Ok(owned) => {
                for (run_id, reply) in batch.drain(..) {
                    let answer = match owned.get(&run_id) {
                        Some(action) => Ok(*action),
                        None => Err(StoreError::NotFound(format!(
                            "run {run_id} is no longer owned by worker {worker_id}"
                        ))),
                    };
                    let _ = reply.send(answer);
                }
            }
            Err(e) => {
                for (_, reply) in batch.drain(..) {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use fawn_checkpoint::{BackendConfig, CancelTarget, NewRun, NewThread};

    async fn claimed(store: &Arc<dyn Persistence>, worker: &str) -> String {
        let t = store.create_thread(NewThread::default()).await.unwrap();
        let run = store
            .create_run(NewRun {
                thread_id: t.thread_id,
                assistant_id: "a".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .run;
        store
            .claim_run(&run.run_id, worker, Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        run.run_id
    }

    /// Renewals sent together are answered each for its own run: a cancellation for the
    /// run that has one, nothing for the others of this worker, `NotFound` for a run
    /// another worker holds; and the renewer ends with its last sender.
    #[tokio::test]
    async fn each_renewal_of_a_batch_gets_its_own_answer() {
        let dir = tempfile::tempdir().unwrap();
        let store = fawn_checkpoint::open(&BackendConfig::Sqlite {
            path: dir.path().join("fawn.db"),
        })
        .await
        .unwrap();
        let plain = claimed(&store, "w").await;
        let cancelled = claimed(&store, "w").await;
        let theirs = claimed(&store, "other").await;
        store
            .cancel_runs(
                &CancelTarget::Runs {
                    thread_id: None,
                    run_ids: vec![cancelled.clone()],
                },
                CancelAction::Rollback,
            )
            .await
            .unwrap();

        let (tx, rx) = mpsc::unbounded_channel();
        let mut answers = Vec::new();
        // All three wait in the channel before the renewer first looks: one batch.
        for id in [&plain, &cancelled, &theirs] {
            let (reply, answer) = oneshot::channel();
            tx.send((id.clone(), reply)).unwrap();
            answers.push(answer);
        }
        let renewer = tokio::spawn(renewer(
            Arc::downgrade(&store),
            "w".into(),
            Duration::from_secs(30),
            rx,
        ));
        let mut got = Vec::new();
        for a in answers {
            got.push(a.await.unwrap());
        }
        assert_eq!(got[0], Ok(None));
        assert_eq!(got[1], Ok(Some(CancelAction::Rollback)));
        assert!(
            matches!(got[2], Err(StoreError::NotFound(_))),
            "{:?}",
            got[2]
        );
        drop(tx);
        renewer.await.unwrap();
    }
}
