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

    /// Spawns a submit of `item` whose batch execution records its items in `log`, takes
    /// 5 ms and answers each item with `answer`.
    fn spawn_recorded<T, R>(
        b: &Arc<Batcher<T, R>>,
        item: T,
        log: &Log<T>,
        answer: fn(&T) -> R,
    ) -> tokio::task::JoinHandle<DbResult<R>>
    where
        T: Clone + Send + Sync + 'static,
        R: Send + 'static,
    {
        let (b, log) = (b.clone(), log.clone());
        tokio::spawn(async move {
            b.submit(item, |items| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push(items.clone());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    items.iter().map(|i| Ok(answer(i))).collect()
                }
            })
            .await
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_share_batches_and_each_gets_its_own_result() {
        let b: Arc<Batcher<u32, u32>> = Arc::new(Batcher::new(1, 64, 1 << 20, |_| 1));
        let log: Log<u32> = Arc::default();
        let tasks: Vec<_> = (0..40u32)
            .map(|i| spawn_recorded(&b, i, &log, |i| i + 1000))
            .collect();
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await.unwrap().ok(), Some(i as u32 + 1000));
        }
        let n = log.lock().unwrap().len();
        assert!(n < 40, "40 writes took {n} batches");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_respect_the_count_and_size_limits() {
        let b: Arc<Batcher<usize, ()>> = Arc::new(Batcher::new(1, 3, 100, |w| *w));
        let sizes: Log<usize> = Arc::default();
        let mut tasks = Vec::new();
        for w in [10, 10, 10, 10, 60, 60, 500, 1] {
            tasks.push(spawn_recorded(&b, w, &sizes, |_| ()));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for t in tasks {
            assert!(t.await.unwrap().is_ok());
        }
        for batch in sizes.lock().unwrap().iter() {
            assert!(batch.len() <= 3, "{batch:?}");
            let before_last: usize = batch[..batch.len() - 1].iter().sum();
            assert!(before_last < 100, "{batch:?}");
        }
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
        tokio::time::sleep(Duration::from_millis(20)).await;
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
        // Occupy the slot so that the next two writes queue together.
        let blocker = {
            let (b, gate) = (b.clone(), gate.clone());
            tokio::spawn(async move {
                b.submit(0, |items| {
                    let gate = gate.clone();
                    async move {
                        let _ = gate.acquire().await;
                        items.iter().map(|_| Ok(0)).collect()
                    }
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
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
        tokio::time::sleep(Duration::from_millis(20)).await;
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
