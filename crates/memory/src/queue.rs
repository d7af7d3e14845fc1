//! The debounced memory queue. Finished conversations are keyed by
//! `(thread_id, user_id, agent_name)`; a newer conversation for a pending key replaces the
//! older one and restarts its `debounce` timer, so a busy thread is processed once it goes
//! quiet. At most `max_depth` keys wait; beyond that new keys are dropped (logged). One
//! worker task processes due items one at a time. [`MemoryQueue::shutdown`] processes
//! everything still pending within the flush timeout.

use crate::conversation::filter_conversation;
use crate::updater::MemoryUpdater;
use crate::{MemorySink, PendingUpdate};
use fawn_state::Message;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Queue knobs (`memory.debounce_seconds`, `backend_config.queue_max_depth`,
/// `memory.shutdown_flush_timeout_seconds`).
#[derive(Clone, Debug, PartialEq)]
pub struct QueueConfig {
    pub debounce: Duration,
    pub max_depth: usize,
    pub shutdown_flush_timeout: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            debounce: Duration::from_secs(30),
            max_depth: 1000,
            shutdown_flush_timeout: Duration::from_secs(30),
        }
    }
}

impl QueueConfig {
    pub fn from_config(c: &fawn_config::MemoryConfig) -> Self {
        QueueConfig {
            debounce: Duration::from_secs(c.debounce_seconds),
            max_depth: c
                .backend_config
                .get("queue_max_depth")
                .and_then(serde_json::Value::as_u64)
                .map(|d| d as usize)
                .unwrap_or(1000)
                .max(1),
            shutdown_flush_timeout: Duration::from_secs(c.shutdown_flush_timeout_seconds),
        }
    }
}

type Key = (String, String, Option<String>);

struct Pending {
    item: PendingUpdate,
    due: Instant,
}

/// Counters for logs, metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub enqueued: u64,
    pub replaced: u64,
    pub dropped: u64,
    pub processed: u64,
    pub failed: u64,
}

struct Inner {
    config: QueueConfig,
    updater: Arc<dyn MemoryUpdater>,
    pending: Mutex<HashMap<Key, Pending>>,
    wake: Notify,
    /// No new items; the worker drains everything and exits.
    closing: AtomicBool,
    enqueued: AtomicU64,
    replaced: AtomicU64,
    dropped: AtomicU64,
    processed: AtomicU64,
    failed: AtomicU64,
}

impl Inner {
    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Pending>> {
        match self.pending.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Removes and returns the earliest item due now (any item when closing), and the time
    /// the next one is due. One at a time, so whatever is not yet processed stays visible
    /// (and counted) in `pending`.
    fn take_due(&self) -> (Option<PendingUpdate>, Option<Instant>) {
        let now = Instant::now();
        let all = self.closing.load(Ordering::SeqCst);
        let mut g = self.pending();
        let first = g
            .iter()
            .filter(|(_, p)| all || p.due <= now)
            .min_by_key(|(_, p)| p.due)
            .map(|(k, _)| k.clone());
        let item = first.and_then(|k| g.remove(&k)).map(|p| p.item);
        let next = g.values().map(|p| p.due).min();
        (item, next)
    }

    async fn process(&self, item: PendingUpdate) {
        match self.updater.update(&item).await {
            Ok(report) => {
                self.processed.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    thread_id = %item.thread_id,
                    user_id = %item.user_id,
                    added = report.facts_added,
                    removed = report.facts_removed,
                    summaries = report.summaries_updated,
                    "memory updated"
                );
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(thread_id = %item.thread_id, user_id = %item.user_id, error = %e, "memory update failed");
            }
        }
    }

    async fn run(self: Arc<Self>) {
        loop {
            let notified = self.wake.notified();
            let (item, next) = self.take_due();
            if let Some(item) = item {
                self.process(item).await;
                continue;
            }
            if self.closing.load(Ordering::SeqCst) && self.pending().is_empty() {
                return;
            }
            match next {
                Some(due) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(due) => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

/// The debounced queue; implements [`MemorySink`].
pub struct MemoryQueue {
    inner: Arc<Inner>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for MemoryQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryQueue")
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl MemoryQueue {
    /// Starts the queue and its worker (must be called inside a tokio runtime).
    pub fn start(config: QueueConfig, updater: Arc<dyn MemoryUpdater>) -> Self {
        let inner = Arc::new(Inner {
            config,
            updater,
            pending: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            closing: AtomicBool::new(false),
            enqueued: AtomicU64::new(0),
            replaced: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            processed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        let worker = tokio::spawn(inner.clone().run());
        MemoryQueue {
            inner,
            worker: Mutex::new(Some(worker)),
        }
    }

    pub fn config(&self) -> &QueueConfig {
        &self.inner.config
    }

    /// Keys waiting to be processed.
    pub fn pending_count(&self) -> usize {
        self.inner.pending().len()
    }

    pub fn stats(&self) -> QueueStats {
        let i = &self.inner;
        QueueStats {
            enqueued: i.enqueued.load(Ordering::Relaxed),
            replaced: i.replaced.load(Ordering::Relaxed),
            dropped: i.dropped.load(Ordering::Relaxed),
            processed: i.processed.load(Ordering::Relaxed),
            failed: i.failed.load(Ordering::Relaxed),
        }
    }

    /// Stops taking new items and processes everything pending (and in flight) within the
    /// flush timeout. Returns how many keys were still pending when the timeout hit.
    pub async fn shutdown(&self) -> usize {
        self.inner.closing.store(true, Ordering::SeqCst);
        self.inner.wake.notify_one();
        let worker = match self.worker.lock() {
            Ok(mut g) => g.take(),
            Err(p) => p.into_inner().take(),
        };
        let Some(mut worker) = worker else {
            return self.pending_count();
        };
        match tokio::time::timeout(self.inner.config.shutdown_flush_timeout, &mut worker).await {
            Ok(_) => 0,
            Err(_) => {
                worker.abort();
                let left = self.pending_count();
                tracing::warn!(
                    left,
                    "memory queue flush timed out; pending updates dropped"
                );
                left
            }
        }
    }
}

impl Drop for MemoryQueue {
    /// Dropping the queue lets the worker finish what is pending in the background.
    fn drop(&mut self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        self.inner.wake.notify_one();
    }
}

impl MemorySink for MemoryQueue {
    fn enqueue(
        &self,
        thread_id: &str,
        user_id: &str,
        agent_name: Option<&str>,
        messages: &[Message],
    ) {
        let inner = &self.inner;
        if inner.closing.load(Ordering::SeqCst) {
            inner.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                thread_id,
                "memory queue is shutting down; conversation not queued"
            );
            return;
        }
        let conversation = filter_conversation(messages);
        if conversation.is_empty() {
            return;
        }
        let key: Key = (
            thread_id.to_string(),
            user_id.to_string(),
            agent_name.map(str::to_string),
        );
        let item = PendingUpdate {
            thread_id: thread_id.to_string(),
            user_id: user_id.to_string(),
            agent_name: agent_name.map(str::to_string),
            messages: conversation,
        };
        let due = Instant::now() + inner.config.debounce;
        {
            let mut g = inner.pending();
            if let Some(p) = g.get_mut(&key) {
                p.item = item;
                p.due = due;
                inner.replaced.fetch_add(1, Ordering::Relaxed);
            } else if g.len() >= inner.config.max_depth {
                inner.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    thread_id,
                    depth = g.len(),
                    "memory queue full; conversation dropped"
                );
                return;
            } else {
                g.insert(key, Pending { item, due });
            }
        }
        inner.enqueued.fetch_add(1, Ordering::Relaxed);
        inner.wake.notify_one();
    }
}
