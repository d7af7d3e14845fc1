//! The Redis Streams event bus: every event of a run crosses nodes, with its id.
//!
//! * **Publishing.** The node that executes a run mirrors its log into the stream
//!   `fawn:run:{run_id}`: one entry per event (`i` its id, `e` its name, `d` its data), then an
//!   end entry (`end`, and `d` the final body). One writer task per node sends whatever queued
//!   up as one pipeline, so a burst of token chunks costs one round trip. Streams are capped
//!   (`XADD MAXLEN ~`) and expire (`EXPIRE`) an hour after they start, five minutes after
//!   their end.
//! * **Subscribing.** A node with a client joining a run it does not execute *follows* the
//!   run: one reader task per node (`XREAD BLOCK` over every followed stream) appends the
//!   entries to the local log with their ids, so cursors (`Last-Event-ID`) mean the same on
//!   every node and a cursor older than what the stream kept gets the `gap` event.
//!   A run started here streams from here without crossing the bus.

use crate::broker::{Mirror, Mirrored, RunLog};
use crate::runtime::RuntimeHandle;
use bytes::Bytes;
use redis::AsyncCommands;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// Entries kept per run stream (approximately).
pub const MAX_LEN: usize = 10_000;
const TTL_LIVE_SECS: i64 = 3600;
const TTL_DONE_SECS: i64 = 300;
/// How long one `XREAD` waits before looking again at which runs are followed.
const BLOCK_MS: usize = 250;

fn key(run_id: &str) -> String {
    format!("fawn:run:{run_id}")
}

struct Follow {
    log: Arc<RunLog>,
    /// The last stream entry read.
    last: String,
}

/// The Redis event bus of one node.
pub struct RedisBus {
    out: mpsc::UnboundedSender<(String, Mirrored)>,
    follows: Mutex<HashMap<String, Follow>>,
    wake: Notify,
}

impl std::fmt::Debug for RedisBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBus").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl RedisBus {
    /// Connects to `url` and starts the writer and reader tasks (they end with the
    /// runtime).
    pub async fn connect(
        url: &str,
        rt: &RuntimeHandle,
    ) -> Result<Arc<RedisBus>, redis::RedisError> {
        let stop = rt.shutdown.clone();
        let client = redis::Client::open(url)?;
        let writer = redis::aio::ConnectionManager::new(client.clone()).await?;
        let reader = redis::aio::ConnectionManager::new(client).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let bus = Arc::new(RedisBus {
            out: tx,
            follows: Mutex::new(HashMap::new()),
            wake: Notify::new(),
        });
        tokio::spawn(write_loop(writer, rx, stop.clone()));
        tokio::spawn(read_loop(bus.clone(), reader, rt.clone(), stop));
        Ok(bus)
    }

    /// What the executing node's log mirrors into.
    pub fn mirror_fn(&self) -> Mirror {
        let out = self.out.clone();
        Arc::new(move |run_id: &str, m: Mirrored| {
            let _ = out.send((run_id.to_string(), m));
        })
    }

    /// Starts appending the run's stream to `log` (from its beginning).
    pub fn follow_stream(&self, run_id: &str, log: Arc<RunLog>) {
        lock(&self.follows)
            .entry(run_id.to_string())
            .or_insert(Follow {
                log,
                last: "0".into(),
            });
        self.wake.notify_one();
    }

    /// Stops following a run (it executes here now, or its log is gone).
    pub fn unfollow_stream(&self, run_id: &str) {
        lock(&self.follows).remove(run_id);
    }

    /// Whether the run's stream is being read into a local log.
    pub fn follows(&self, run_id: &str) -> bool {
        lock(&self.follows).contains_key(run_id)
    }
}

async fn write_loop(
    mut con: redis::aio::ConnectionManager,
    mut rx: mpsc::UnboundedReceiver<(String, Mirrored)>,
    stop: CancellationToken,
) {
    let mut started: std::collections::HashSet<String> = std::collections::HashSet::new();
    loop {
        let first = tokio::select! {
            m = rx.recv() => m,
            _ = stop.cancelled() => None,
        };
        let Some(first) = first else { return };
        let mut batch = vec![first];
        while batch.len() < 512 {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        let mut pipe = redis::pipe();
        for (run_id, m) in &batch {
            let k = key(run_id);
            match m {
                Mirrored::Event(ev) => {
                    pipe.cmd("XADD")
                        .arg(&k)
                        .arg("MAXLEN")
                        .arg("~")
                        .arg(MAX_LEN)
                        .arg("*")
                        .arg("i")
                        .arg(ev.id)
                        .arg("e")
                        .arg(&*ev.name)
                        .arg("d")
                        .arg(&*ev.data())
                        .ignore();
                    if started.insert(run_id.clone()) {
                        pipe.cmd("EXPIRE").arg(&k).arg(TTL_LIVE_SECS).ignore();
                    }
                }
                Mirrored::End(body) => {
                    let d: &[u8] = body.as_deref().unwrap_or(b"");
                    pipe.cmd("XADD")
                        .arg(&k)
                        .arg("*")
                        .arg("end")
                        .arg(1)
                        .arg("d")
                        .arg(d)
                        .ignore();
                    pipe.cmd("EXPIRE").arg(&k).arg(TTL_DONE_SECS).ignore();
                    started.remove(run_id);
                }
            }
        }
        if let Err(e) = pipe.query_async::<()>(&mut con).await {
            tracing::warn!(error = %e, events = batch.len(), "publishing to Redis failed");
        }
    }
}

async fn read_loop(
    bus: Arc<RedisBus>,
    mut con: redis::aio::ConnectionManager,
    rt: RuntimeHandle,
    stop: CancellationToken,
) {
    let broker = &rt.broker;
    loop {
        let (keys, ids): (Vec<String>, Vec<String>) = {
            let f = lock(&bus.follows);
            f.iter()
                .map(|(run, fo)| (key(run), fo.last.clone()))
                .unzip()
        };
        if keys.is_empty() {
            tokio::select! {
                _ = bus.wake.notified() => continue,
                _ = stop.cancelled() => return,
            }
        }
        let opts = redis::streams::StreamReadOptions::default()
            .block(BLOCK_MS)
            .count(1000);
        let read = tokio::select! {
            r = con.xread_options::<_, _, Option<redis::streams::StreamReadReply>>(&keys, &ids, &opts) => r,
            _ = stop.cancelled() => return,
        };
        let reply = match read {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "reading from Redis failed");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(500)) => continue,
                    _ = stop.cancelled() => return,
                }
            }
        };
        for stream in reply.keys {
            let Some(run_id) = stream.key.strip_prefix("fawn:run:").map(str::to_string) else {
                continue;
            };
            let Some(log) = lock(&bus.follows).get(&run_id).map(|f| f.log.clone()) else {
                continue;
            };
            let mut ended = None;
            let mut last = None;
            for entry in &stream.ids {
                last = Some(entry.id.clone());
                let data: Vec<u8> = entry.get("d").unwrap_or_default();
                if entry.map.contains_key("end") {
                    ended = Some((!data.is_empty()).then(|| Bytes::from(data)));
                    break;
                }
                let (Some(id), Some(name)) = (entry.get::<u64>("i"), entry.get::<String>("e"))
                else {
                    continue;
                };
                log.publish_at(id, name, Bytes::from(data));
                // Stream entry ids start with the time Redis appended the entry (ms).
                let m = fawn_telemetry::metrics();
                m.bus_relayed.with_label_values(&["redis"]).inc();
                if let Some(ms) = entry
                    .id
                    .split('-')
                    .next()
                    .and_then(|t| t.parse::<i64>().ok())
                {
                    let lag = chrono::Utc::now().timestamp_millis() - ms;
                    m.bus_lag
                        .with_label_values(&["redis"])
                        .observe(lag.max(0) as f64 / 1000.0);
                }
            }
            if let Some(body) = ended {
                bus.unfollow_stream(&run_id);
                if broker.get(&run_id).is_some() {
                    broker.finish(&run_id, body);
                } else {
                    log.close(body);
                }
            } else if let Some(l) = last
                && let Some(f) = lock(&bus.follows).get_mut(&run_id)
            {
                f.last = l;
            }
        }
    }
}
