//! Write batching for Postgres: independent writes (a checkpoint, or a chain of one
//! thread's checkpoints) that arrive while others are in flight share one statement (and
//! one commit) instead of each paying a round trip and a WAL flush.
//!
//! A caller queues its item, then competes for one of a few execution slots. Whoever gets a
//! slot takes what is queued (up to a count and a size) and executes it as one batch; every
//! item's caller gets its own result. A lone caller finds an empty queue and a free slot, so
//! at low load nothing waits. A caller whose item another caller took simply waits for that
//! result. If the executing caller is dropped mid-batch, the others see a transient
//! [`DbErr::GroupFailed`] and retry; writes must therefore be idempotent (the checkpoint
//! insert is: `ON CONFLICT DO NOTHING` on a unique id).

use super::db::{DbErr, DbResult};
use std::future::Future;
use std::sync::Mutex;
use tokio::sync::{Semaphore, oneshot};

type Waiter<T, R> = (T, oneshot::Sender<DbResult<R>>);

pub(crate) struct Batcher<T, R> {
    queue: Mutex<Vec<Waiter<T, R>>>,
    slots: Semaphore,
    max_items: usize,
    max_bytes: usize,
    weight: fn(&T) -> usize,
}

impl<T, R> Batcher<T, R> {
    /// At most `slots` batches run at once; a batch holds at most `max_items` items and
    /// stops growing once it reaches `max_bytes` (by `weight`; a single item may exceed it).
    pub fn new(slots: usize, max_items: usize, max_bytes: usize, weight: fn(&T) -> usize) -> Self {
        Batcher {
            queue: Mutex::new(Vec::new()),
            slots: Semaphore::new(slots.max(1)),
            max_items: max_items.max(1),
            max_bytes,
            weight,
        }
    }

    /// Submits `item`; `run` executes a batch and returns one result per item, in order.
    pub async fn submit<F, Fut>(&self, item: T, run: F) -> DbResult<R>
    where
        F: Fn(Vec<T>) -> Fut,
        Fut: Future<Output = Vec<DbResult<R>>>,
    {
        let (tx, mut rx) = oneshot::channel();
        self.lock().push((item, tx));
        loop {
            tokio::select! {
                biased;
                r = &mut rx => return r.unwrap_or_else(|_| Err(dropped())),
                permit = self.slots.acquire() => {
                    let Ok(_permit) = permit else {
                        return Err(dropped());
                    };
                    let batch = self.take();
                    if batch.is_empty() {
                        // Another caller took this item (queued before the slot was won)
                        // and will answer it.
                        return rx.await.unwrap_or_else(|_| Err(dropped()));
                    }
                    let (items, senders): (Vec<T>, Vec<_>) = batch.into_iter().unzip();
                    let n = items.len();
                    let mut results = run(items).await.into_iter();
                    for (i, s) in senders.into_iter().enumerate() {
                        let r = results.next().unwrap_or_else(|| {
                            Err(DbErr::GroupFailed(format!(
                                "a batch of {n} writes returned fewer results (item {i})"
                            )))
                        });
                        let _ = s.send(r);
                    }
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Waiter<T, R>>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The oldest queued items, within the batch limits.
    fn take(&self) -> Vec<Waiter<T, R>> {
        let mut q = self.lock();
        let mut bytes = 0;
        let mut n = 0;
        while n < q.len() && n < self.max_items && (n == 0 || bytes < self.max_bytes) {
            bytes += (self.weight)(&q[n].0);
            n += 1;
        }
        q.drain(..n).collect()
    }
}

fn dropped() -> DbErr {
    DbErr::GroupFailed("the batch this write was part of was abandoned".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_lone_write_runs_alone_and_gets_its_result() {
        let b: Batcher<u32, u32> = Batcher::new(2, 8, 1 << 20, |_| 1);
        let r = b
            .submit(7, |items| async move {
                items.iter().map(|i| Ok(i * 2)).collect()
            })
            .await;
        assert_eq!(r.ok(), Some(14));
    }

    type Log<T> = Arc<Mutex<Vec<Vec<T>>>>;

    /// Returns once `n` items wait in `b`'s queue.
    async fn queued<T, R>(b: &Batcher<T, R>, n: usize) {
        while b.lock().len() < n {
            tokio::task::yield_now().await;
        }
    }

    /// Returns once `log` holds `n` batches.
    async fn logged<T>(log: &Log<T>, n: usize) {
        while log.lock().unwrap().len() < n {
            tokio::task::yield_now().await;
        }
    }

    /// Spawns a submit of `item` whose batch execution records its items in `log`, waits
    /// for `gate` to open and answers each item with `answer`.
    fn spawn_recorded<T, R>(
        b: &Arc<Batcher<T, R>>,
        item: T,
        log: &Log<T>,
        gate: &tokio::sync::watch::Receiver<bool>,
        answer: fn(&T) -> R,
    ) -> tokio::task::JoinHandle<DbResult<R>>
    where
        T: Clone + Send + Sync + 'static,
        R: Send + 'static,
    {
        let (b, log, gate) = (b.clone(), log.clone(), gate.clone());
        tokio::spawn(async move {
            b.submit(item, |items| {
                let (log, mut gate) = (log.clone(), gate.clone());
                async move {
                    log.lock().unwrap().push(items.clone());
                    let _ = gate.wait_for(|open| *open).await;
                    items.iter().map(|i| Ok(answer(i))).collect()
                }
            })
            .await
        })
    }

    /// Submits `items` in order: the first runs alone and holds the one slot until every
    /// other item is queued behind it. Returns the batches, in the order they ran.
    async fn batches_of<T>(b: Batcher<T, T>, items: Vec<T>) -> Vec<Vec<T>>
    where
        T: Clone + PartialEq + std::fmt::Debug + Send + Sync + 'static,
    {
        let b = Arc::new(b);
        let log: Log<T> = Arc::default();
        let (open, gate) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for (i, item) in items.iter().enumerate() {
            tasks.push(spawn_recorded(&b, item.clone(), &log, &gate, T::clone));
            if i == 0 {
                logged(&log, 1).await;
            } else {
                queued(&b, i).await;
            }
        }
        open.send_replace(true);
        for (t, item) in tasks.into_iter().zip(items) {
            assert_eq!(t.await.unwrap().ok(), Some(item));
        }
        log.lock().unwrap().clone()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_share_batches_and_each_gets_its_own_result() {
        let batches = batches_of(Batcher::new(1, 64, 1 << 20, |_| 1), (0..40u32).collect()).await;
        // The first alone, then the 39 that queued behind it in one batch.
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [1, 39], "{batches:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_respect_the_count_and_size_limits() {
        // At most 3 items, and no item added once a batch weighs 100.
        let batches = batches_of(
            Batcher::new(1, 3, 100, |w| *w),
            vec![10usize, 10, 10, 10, 60, 60, 500, 1],
        )
        .await;
        assert_eq!(
            batches,
            [vec![10], vec![10, 10, 10], vec![60, 60], vec![500], vec![1]]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_abandoned_batch_frees_its_slot() {
        let b: Arc<Batcher<u32, u32>> = Arc::new(Batcher::new(1, 64, 1 << 20, |_| 1));
        let started = Arc::new(tokio::sync::Notify::new());
        // The first caller takes the slot and hangs inside its batch.
        let leader = {
            let b = b.clone();
            let started = started.clone();
            tokio::spawn(async move {
                b.submit(1, |items| {
                    let started = started.clone();
                    async move {
                        started.notify_one();
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        items.iter().map(|_| Ok(0)).collect()
                    }
                })
                .await
            })
        };
        started.notified().await;
        // A second caller queues; a third takes the second's item once the slot frees.
        let follower = {
            let b = b.clone();
            tokio::spawn(async move {
                b.submit(2, |items| async move {
                    items.iter().map(|i| Ok(i * 10)).collect()
                })
                .await
            })
        };
        queued(&b, 1).await;
        leader.abort();
        let r = follower.await.unwrap();
        // The follower's item was still queued (the leader had drained only its own), so
        // it runs in the follower's own batch once the slot is free.
        assert_eq!(r.ok(), Some(20));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn members_of_a_dropped_batch_see_a_transient_error() {
        let b: Arc<Batcher<u32, u32>> = Arc::new(Batcher::new(1, 64, 1 << 20, |_| 1));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let started = Arc::new(tokio::sync::Notify::new());
        // Occupy the slot so that the next two writes queue together.
        let blocker = {
            let (b, gate, started) = (b.clone(), gate.clone(), started.clone());
            tokio::spawn(async move {
                b.submit(0, |items| {
                    let (gate, started) = (gate.clone(), started.clone());
                    async move {
                        started.notify_one();
                        let _ = gate.acquire().await;
                        items.iter().map(|_| Ok(0)).collect()
                    }
                })
                .await
            })
        };
        started.notified().await;
        let (exec_tx, mut exec_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut members = std::collections::HashMap::new();
        for v in [1u32, 2] {
            let (b, exec_tx) = (b.clone(), exec_tx.clone());
            members.insert(
                v,
                tokio::spawn(async move {
                    b.submit(v, |items| {
                        let exec_tx = exec_tx.clone();
                        async move {
                            // Tell the test which caller executes, then hang.
                            let _ = exec_tx.send((v, items.len()));
                            tokio::time::sleep(Duration::from_secs(60)).await;
                            items.iter().map(|_| Ok(1)).collect()
                        }
                    })
                    .await
                }),
            );
        }
        queued(&b, 2).await;
        gate.add_permits(1);
        assert!(blocker.await.unwrap().is_ok());
        let (executor, size) = exec_rx.recv().await.unwrap();
        assert_eq!(size, 2, "both queued writes share one batch");
        members.remove(&executor).unwrap().abort();
        let (_, other) = members.into_iter().next().unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), other)
            .await
            .expect("the other member must not hang")
            .unwrap();
        assert!(matches!(r, Err(DbErr::GroupFailed(_))), "{r:?}");
        assert!(r.unwrap_err().is_transient());
        // The slot is free again.
        let r = b
            .submit(
                5,
                |items| async move { items.iter().map(|i| Ok(*i)).collect() },
            )
            .await;
        assert_eq!(r.ok(), Some(5));
    }
}
