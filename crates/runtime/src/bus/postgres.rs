//! The Postgres-only event bus: nodes share the store and nothing else, so a node whose
//! client joins a run executing elsewhere *relays* it from the store at step granularity:
//! its `metadata` event, a `values` event each time the run persisted a new checkpoint, and
//! the end of the stream once the run finished. Token chunks and custom events stay on the
//! executing node (that is what Redis adds).
//!
//! * **Announcing.** The executing node's log mirrors into a writer task that, for every run
//!   that published something since its last round, sends one `NOTIFY fawn_run_progress`
//!   (one statement for all of them, at most every [`ANNOUNCE_EVERY`]); a run's end is
//!   announced the same way, after its status is stored.
//! * **Relaying.** The relay of a run reads the run and its thread's latest checkpoint when
//!   a progress notification for it arrives (through the store's `LISTEN` connection, see
//!   [`crate::runs::follow_signals`]), and every [`FALLBACK_POLL`] (`QueueConfig::relay_poll`) in case one was missed
//!   ([`FAST_POLL`] when this node could not `LISTEN`). It lives only while the run is
//!   joined here and ends as soon as the run executes here instead.

use super::EventBus;
use crate::broker::{Mirror, Mirrored, RunLog};
use crate::runs::{latest_checkpoint, publish_metadata, state_value};
use crate::runtime::RuntimeHandle;
use bytes::Bytes;
use fawn_checkpoint::{Persistence, Run};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// The shortest time between two progress announcements of one node.
pub const ANNOUNCE_EVERY: Duration = Duration::from_millis(20);
/// How often a relay looks at the store without being told to.
pub const FALLBACK_POLL: Duration = Duration::from_secs(1);
/// How often a relay looks when this node cannot hear notifications.
pub const FAST_POLL: Duration = Duration::from_millis(100);

/// The Postgres-only bus of one node.
pub struct PgBus {
    out: mpsc::UnboundedSender<String>,
    /// The runs relayed here, each with what wakes its relay.
    relays: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
    /// Whether this node hears other nodes' notifications (set once `LISTEN` works).
    listening: Arc<AtomicBool>,
    /// How often a relay looks without being woken (while listening).
    fallback: Duration,
}

impl std::fmt::Debug for PgBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgBus").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl PgBus {
    /// Starts the announcing task (it ends with the runtime's `stop` token). Relays look
    /// at the store every `fallback` when no notification woke them.
    pub fn start(
        store: Arc<dyn Persistence>,
        stop: CancellationToken,
        fallback: Duration,
    ) -> Arc<PgBus> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(announce_loop(store, rx, stop));
        Arc::new(PgBus {
            out: tx,
            relays: Arc::new(Mutex::new(HashMap::new())),
            listening: Arc::new(AtomicBool::new(false)),
            fallback,
        })
    }

    /// This node now hears other nodes' notifications: relays may poll slowly.
    pub fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::Relaxed);
    }

    /// Whether a relay of `run_id` runs here.
    pub fn relays(&self, run_id: &str) -> bool {
        lock(&self.relays).contains_key(run_id)
    }
}

impl EventBus for PgBus {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn mirror(&self) -> Option<Mirror> {
        let out = self.out.clone();
        Some(Arc::new(move |run_id: &str, _m: Mirrored| {
            let _ = out.send(run_id.to_string());
        }))
    }

    fn follow(&self, rt: &RuntimeHandle, run: &Run, log: Arc<RunLog>) {
        let wake = {
            let mut relays = lock(&self.relays);
            if relays.contains_key(&run.run_id) {
                return;
            }
            let wake = Arc::new(Notify::new());
            relays.insert(run.run_id.clone(), wake.clone());
            wake
        };
        let rt2 = rt.clone();
        let run = run.clone();
        let relays = self.relays.clone();
        let listening = self.listening.clone();
        let fallback = self.fallback;
        rt.queue.spawn(async move {
            let period = || {
                if listening.load(Ordering::Relaxed) {
                    fallback
                } else {
                    FAST_POLL.min(fallback)
                }
            };
            relay(&rt2, &run, &log, &wake, period).await;
            let mut relays = lock(&relays);
            if relays
                .get(&run.run_id)
                .is_some_and(|w| Arc::ptr_eq(w, &wake))
            {
                relays.remove(&run.run_id);
            }
        });
    }

    fn unfollow(&self, run_id: &str) {
        if let Some(wake) = lock(&self.relays).remove(run_id) {
            wake.notify_one();
        }
    }

    fn progress(&self, run_id: &str) {
        if let Some(wake) = lock(&self.relays).get(run_id) {
            wake.notify_one();
        }
    }
}

async fn relay(
    rt: &RuntimeHandle,
    run: &Run,
    log: &RunLog,
    wake: &Notify,
    period: impl Fn() -> Duration,
) {
    if log.begin_attempt(run.attempt.max(1)) {
        publish_metadata(log, &run.run_id, &run.thread_id, run.attempt.max(1));
    }
    let mut last: Option<String> = None;
    loop {
        if rt.queue.active(&run.run_id).is_some() {
            return;
        }
        let current = rt.store.get_run(&run.run_id).await;
        let cp = latest_checkpoint(rt, &run.thread_id).await;
        if let Some(cp) = &cp
            && last.as_deref() != Some(cp.checkpoint_id.as_str())
            && cp.metadata.get("run_id").and_then(Value::as_str) == Some(run.run_id.as_str())
        {
            last = Some(cp.checkpoint_id.clone());
            log.publish("values", Bytes::from(state_value(&cp.state).to_string()));
            let m = fawn_telemetry::metrics();
            m.bus_relayed.with_label_values(&["postgres"]).inc();
            if let Ok(lag) = (chrono::Utc::now() - cp.created_at).to_std() {
                m.bus_lag
                    .with_label_values(&["postgres"])
                    .observe(lag.as_secs_f64());
            }
        }
        match current {
            Ok(Some(r)) if r.status.is_active() => {}
            _ => {
                // No final body: `/wait` here builds it from the stored outcome.
                rt.broker.finish(&run.run_id, None);
                return;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(period()) => {}
            _ = wake.notified() => {}
            _ = rt.shutdown.cancelled() => return,
        }
    }
}

async fn announce_loop(
    store: Arc<dyn Persistence>,
    mut rx: mpsc::UnboundedReceiver<String>,
    stop: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            m = rx.recv() => m,
            _ = stop.cancelled() => None,
        };
        let Some(first) = first else { return };
        let mut runs: HashSet<String> = HashSet::from([first]);
        while let Ok(r) = rx.try_recv() {
            runs.insert(r);
        }
        let runs: Vec<String> = runs.into_iter().collect();
        if let Err(e) = store.announce_progress(&runs).await {
            tracing::debug!(error = %e, runs = runs.len(), "announcing progress failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(ANNOUNCE_EVERY) => {}
            _ = stop.cancelled() => return,
        }
    }
}
