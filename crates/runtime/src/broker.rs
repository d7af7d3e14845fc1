//! The stream broker: one append-only event log per run, shared by the run's live
//! subscribers and by joiners that reconnect with `Last-Event-ID`.
//!
//! Events are serialized once (`data` is the JSON line) and framed per subscriber. Ids are
//! integers, 0-based and strictly increasing per run; a recovered attempt `n` continues at
//! `(n-1) * ATTEMPT_STRIDE`, so ids stay increasing across server restarts and a cursor from
//! an earlier attempt resumes at the start of the current one. Retention is bounded by event
//! count and bytes; a cursor that fell out of the window gets DeerFlow's `gap` event
//! (`recovery: "reload_durable_state"`). Logs of finished runs stay for a short TTL when the
//! run is resumable and are dropped at once otherwise.

use bytes::Bytes;
use serde_json::json;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};

/// Id distance between attempts of one run.
pub const ATTEMPT_STRIDE: u64 = 1_000_000_000;

/// One published event.
#[derive(Debug)]
pub struct Event {
    pub id: u64,
    /// `values`, `messages`, `updates|sub:…`, `metadata`, `error`, …
    pub name: Arc<str>,
    data: Data,
}

/// The stream modes' event names, allocated once: a run's log holds an event per token
/// chunk, and each would otherwise carry its own copy of `messages`.
static EVENT_NAMES: std::sync::LazyLock<[Arc<str>; 12]> = std::sync::LazyLock::new(|| {
    [
        "messages",
        "values",
        "updates",
        "custom",
        "events",
        "metadata",
        "messages/partial",
        "messages/complete",
        "messages/metadata",
        "tasks",
        "checkpoints",
        "debug",
    ]
    .map(Arc::from)
});

/// `name` as a shared name when it is a stream mode's, else as given.
fn event_name<N: AsRef<str> + Into<Arc<str>>>(name: N) -> Arc<str> {
    match EVENT_NAMES.iter().find(|n| n.as_ref() == name.as_ref()) {
        Some(shared) => shared.clone(),
        None => name.into(),
    }
}

/// An event's JSON line as kept in the log.
#[derive(Debug)]
enum Data {
    Whole(Bytes),
    /// The array `[first,second]` whose `second` is shared with other events: a `messages`
    /// token chunk and its model call's metadata, which every chunk of the call repeats
    /// (about two thirds of a chunk's bytes, kept once per call instead of once per chunk).
    Pair(Bytes, Bytes),
}

impl Event {
    pub fn new(id: u64, name: impl Into<Arc<str>>, data: Bytes) -> Event {
        Event {
            id,
            name: name.into(),
            data: Data::Whole(data),
        }
    }

    /// One line of compact JSON.
    pub fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        match &self.data {
            Data::Whole(b) => std::borrow::Cow::Borrowed(b),
            Data::Pair(first, second) => {
                let mut v = Vec::with_capacity(first.len() + second.len() + 3);
                v.push(b'[');
                v.extend_from_slice(first);
                v.push(b',');
                v.extend_from_slice(second);
                v.push(b']');
                std::borrow::Cow::Owned(v)
            }
        }
    }

    /// The length of [`Event::data`].
    pub fn data_len(&self) -> usize {
        match &self.data {
            Data::Whole(b) => b.len(),
            Data::Pair(first, second) => first.len() + second.len() + 3,
        }
    }

    /// The stream mode part of the name (before any `|namespace`).
    pub fn base(&self) -> &str {
        self.name.split('|').next().unwrap_or(&self.name)
    }
}

/// Retention limits.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    pub resumable_max_events: usize,
    pub resumable_max_bytes: usize,
    pub live_max_events: usize,
    pub live_max_bytes: usize,
    /// How long a finished resumable run's log stays joinable.
    pub retention: Duration,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            resumable_max_events: 2048,
            resumable_max_bytes: 4 * 1024 * 1024,
            live_max_events: 256,
            live_max_bytes: 1024 * 1024,
            retention: Duration::from_secs(60),
        }
    }
}

/// Which events a joiner wants (`stream_mode` query of a join).
#[derive(Clone, Debug, Default)]
pub struct ModeFilter {
    modes: Option<Vec<String>>,
}

impl ModeFilter {
    pub fn all() -> ModeFilter {
        ModeFilter { modes: None }
    }

    /// An empty list means "everything".
    pub fn new(modes: Vec<String>) -> ModeFilter {
        if modes.is_empty() {
            ModeFilter::all()
        } else {
            ModeFilter { modes: Some(modes) }
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        let Some(modes) = &self.modes else {
            return true;
        };
        let base = name.split('|').next().unwrap_or(name);
        if base == "error" || base == "gap" {
            return true;
        }
        modes.iter().any(|m| {
            let m = m.split('|').next().unwrap_or(m);
            m == base
                || ((m == "messages" || m == "messages-tuple") && base.starts_with("messages"))
        })
    }
}

/// Where a subscriber starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cursor {
    /// From the first event (`Last-Event-ID: -1`, or a creator's own stream).
    Start,
    /// Strictly after this id.
    After(u64),
    /// Only events published from now on.
    Live,
}

impl Cursor {
    /// `Last-Event-ID` header: absent → `Live`; `-1` or garbage → `Start`; a number → after it.
    pub fn from_last_event_id(h: Option<&str>) -> Cursor {
        match h.map(str::trim) {
            None => Cursor::Live,
            Some(v) => match v.parse::<u64>() {
                Ok(n) => Cursor::After(n),
                // `-1`, `<ms>-<seq>` ids from other servers, garbage: from the start.
                Err(_) => Cursor::Start,
            },
        }
    }
}

/// Information for a `gap` event.
#[derive(Clone, Debug, PartialEq)]
pub struct Gap {
    pub run_id: String,
    pub requested: Option<u64>,
    pub earliest: Option<u64>,
    pub latest: Option<u64>,
}

impl Gap {
    pub fn to_json(&self) -> Bytes {
        Bytes::from(
            json!({
                "code": "stream_replay_gap",
                "run_id": self.run_id,
                "requested_event_id": self.requested.map(|v| v.to_string()),
                "earliest_available_event_id": self.earliest.map(|v| v.to_string()),
                "latest_available_event_id": self.latest.map(|v| v.to_string()),
                "recovery": "reload_durable_state",
            })
            .to_string(),
        )
    }
}

#[derive(Debug)]
struct LogInner {
    events: VecDeque<Arc<Event>>,
    bytes: usize,
    next_id: u64,
    first_id_of_attempt: u64,
    /// Ids below this were trimmed (within the current attempt).
    trimmed_below: u64,
    done: bool,
    done_at: Option<Instant>,
    resumable: bool,
    /// The `/wait` / `/join` body, set when the run ends.
    final_body: Option<Bytes>,
    /// The attempt being logged (0 before the first).
    attempt: u32,
}

/// What a mirrored log hands on: every event, then the end.
#[derive(Debug, Clone)]
pub enum Mirrored {
    Event(Arc<Event>),
    End(Option<Bytes>),
}

/// Where a mirrored log hands its events (the event bus of the node executing the run).
pub type Mirror = Arc<dyn Fn(&str, Mirrored) + Send + Sync>;

/// The event log of one run.
pub struct RunLog {
    pub run_id: String,
    pub thread_id: String,
    inner: Mutex<LogInner>,
    version: watch::Sender<u64>,
    hub: Arc<ThreadHub>,
    limits: (usize, usize),
    mirror: std::sync::OnceLock<Mirror>,
    /// When the run was created here: its first event after `metadata` is timed from then
    /// (`fawn_run_first_event_seconds`), once.
    created: std::sync::OnceLock<std::time::Instant>,
    first_timed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for RunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLog")
            .field("run_id", &self.run_id)
            .field("thread_id", &self.thread_id)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl RunLog {
    fn new(
        run_id: &str,
        thread_id: &str,
        resumable: bool,
        hub: Arc<ThreadHub>,
        cfg: &BrokerConfig,
    ) -> RunLog {
        let (tx, _) = watch::channel(0u64);
        RunLog {
            run_id: run_id.to_string(),
            thread_id: thread_id.to_string(),
            inner: Mutex::new(LogInner {
                events: VecDeque::new(),
                bytes: 0,
                next_id: 0,
                first_id_of_attempt: 0,
                trimmed_below: 0,
                done: false,
                done_at: None,
                resumable,
                final_body: None,
                attempt: 0,
            }),
            version: tx,
            hub,
            mirror: std::sync::OnceLock::new(),
            created: std::sync::OnceLock::new(),
            first_timed: std::sync::atomic::AtomicBool::new(false),
            limits: if resumable {
                (cfg.resumable_max_events, cfg.resumable_max_bytes)
            } else {
                (cfg.live_max_events, cfg.live_max_bytes)
            },
        }
    }

    pub fn is_resumable(&self) -> bool {
        lock(&self.inner).resumable
    }

    /// The run was just created here: time its first streamed event from now (whether it
    /// executes here or its events are relayed from another node).
    pub fn time_first_event(&self) {
        let _ = self.created.set(std::time::Instant::now());
    }

    fn note_first_event(&self, name: &str) {
        use std::sync::atomic::Ordering;
        if self.first_timed.load(Ordering::Relaxed) || name == "metadata" {
            return;
        }
        if let Some(created) = self.created.get()
            && !self.first_timed.swap(true, Ordering::Relaxed)
        {
            fawn_telemetry::metrics()
                .run_first_event
                .observe(created.elapsed().as_secs_f64());
        }
    }

    /// Starts attempt `attempt` (1-based): ids continue at the attempt's base, and the log is
    /// open again if a previous attempt closed it. Returns false when that attempt (or a
    /// later one) already started on this log.
    pub fn begin_attempt(&self, attempt: u32) -> bool {
        let mut g = lock(&self.inner);
        if attempt <= g.attempt {
            return false;
        }
        g.attempt = attempt;
        let base = u64::from(attempt.saturating_sub(1)) * ATTEMPT_STRIDE;
        if g.next_id < base {
            g.next_id = base;
        }
        g.first_id_of_attempt = g.next_id;
        g.trimmed_below = g.next_id;
        g.done = false;
        g.done_at = None;
        g.final_body = None;
        true
    }

    /// From now on, hands every event and the end to `mirror` too (the node executing the
    /// run, when there is an event bus). Set once.
    /// What the log already holds is handed on first (under the log's lock, so nothing is
    /// skipped; an event handed on twice is dropped by the reader as a duplicate).
    pub fn mirror_to(&self, mirror: Mirror) {
        let g = lock(&self.inner);
        for ev in &g.events {
            mirror(&self.run_id, Mirrored::Event(ev.clone()));
        }
        let _ = self.mirror.set(mirror);
    }

    /// Appends an event; returns its id.
    pub fn publish<N: AsRef<str> + Into<Arc<str>>>(&self, name: N, data: Bytes) -> u64 {
        self.append(event_name(name), Data::Whole(data))
    }

    /// Appends an event whose data is the JSON array `[first,second]`, keeping `second`
    /// shared (pass clones of one `Bytes` for a value many events repeat).
    pub fn publish_pair<N: AsRef<str> + Into<Arc<str>>>(
        &self,
        name: N,
        first: Bytes,
        second: Bytes,
    ) -> u64 {
        self.append(event_name(name), Data::Pair(first, second))
    }

    /// Appends an event that another node's log numbered `id` (relayed by the event bus),
    /// keeping its id so cursors mean the same on every node. An id already passed is a
    /// duplicate and dropped; a jump means the events between were not kept (a cursor
    /// before it gets the `gap` event).
    pub fn publish_at(&self, id: u64, name: impl Into<Arc<str>>, data: Bytes) -> Option<u64> {
        {
            let mut g = lock(&self.inner);
            if id < g.next_id {
                return None;
            }
            if id > g.next_id {
                g.next_id = id;
                g.trimmed_below = g.trimmed_below.max(id);
            }
        }
        Some(self.append(name.into(), Data::Whole(data)))
    }

    fn append(&self, name: Arc<str>, data: Data) -> u64 {
        self.note_first_event(&name);
        let ev;
        {
            let mut g = lock(&self.inner);
            let id = g.next_id;
            g.next_id += 1;
            ev = Arc::new(Event { id, name, data });
            g.bytes += ev.data_len() + ev.name.len();
            g.events.push_back(ev.clone());
            let (max_events, max_bytes) = self.limits;
            while g.events.len() > 1 && (g.events.len() > max_events || g.bytes > max_bytes) {
                if let Some(old) = g.events.pop_front() {
                    g.bytes -= old.data_len() + old.name.len();
                    if old.id >= g.first_id_of_attempt {
                        g.trimmed_below = old.id + 1;
                    }
                }
            }
        }
        self.version.send_modify(|v| *v += 1);
        if let Some(m) = self.mirror.get() {
            m(&self.run_id, Mirrored::Event(ev.clone()));
        }
        let id = ev.id;
        self.hub
            .forward(&self.thread_id, &self.run_id, ThreadItem::Event(ev));
        id
    }

    /// Ends the log: subscribers drain what is left and stop.
    pub fn close(&self, final_body: Option<Bytes>) {
        if let Some(m) = self.mirror.get() {
            m(&self.run_id, Mirrored::End(final_body.clone()));
        }
        {
            let mut g = lock(&self.inner);
            g.done = true;
            g.done_at = Some(Instant::now());
            if final_body.is_some() {
                g.final_body = final_body;
            }
        }
        self.version.send_modify(|v| *v += 1);
        self.hub.forward(
            &self.thread_id,
            &self.run_id,
            ThreadItem::RunDone(self.run_id.clone()),
        );
    }

    pub fn is_done(&self) -> bool {
        lock(&self.inner).done
    }

    pub fn final_body(&self) -> Option<Bytes> {
        lock(&self.inner).final_body.clone()
    }

    /// Waits until the log is closed.
    pub async fn wait_done(&self) {
        let mut rx = self.version.subscribe();
        loop {
            rx.borrow_and_update();
            if self.is_done() {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// A subscriber reading from `cursor`, keeping only events `filter` matches.
    pub fn subscribe(self: &Arc<Self>, cursor: Cursor, filter: ModeFilter) -> Subscription {
        let rx = self.version.subscribe();
        let (next, requested) = {
            let g = lock(&self.inner);
            match cursor {
                Cursor::Start => (0, None),
                Cursor::After(n) => (n.saturating_add(1), Some(n)),
                Cursor::Live => (g.next_id, None),
            }
        };
        Subscription {
            log: self.clone(),
            rx,
            next,
            requested,
            filter,
        }
    }

    /// Every retained event after `after` (thread-stream replay).
    pub fn retained_after(&self, after: Option<u64>) -> Vec<Arc<Event>> {
        let g = lock(&self.inner);
        g.events
            .iter()
            .filter(|e| after.is_none_or(|a| e.id > a))
            .cloned()
            .collect()
    }

    fn expired(&self, now: Instant, retention: Duration) -> bool {
        let g = lock(&self.inner);
        g.done
            && g.done_at
                .is_some_and(|t| now.duration_since(t) >= retention)
    }
}

/// What a subscriber gets next.
#[derive(Debug)]
pub enum Next {
    /// Events (possibly fewer than asked for, never empty).
    Events(Vec<Arc<Event>>),
    /// The cursor fell out of the retained window; the stream must end after this.
    Gap(Gap),
    /// The run ended and everything was read.
    Done,
    /// Nothing new yet: wait with [`Subscription::changed`].
    Pending,
}

/// A reader of one run's log.
#[derive(Debug)]
pub struct Subscription {
    log: Arc<RunLog>,
    rx: watch::Receiver<u64>,
    /// Next id wanted.
    next: u64,
    requested: Option<u64>,
    filter: ModeFilter,
}

impl Subscription {
    pub fn log(&self) -> &Arc<RunLog> {
        &self.log
    }

    /// Reads what is available now (up to `max` events).
    pub fn poll(&mut self, max: usize) -> Next {
        self.rx.borrow_and_update();
        let g = lock(&self.log.inner);
        if self.next < g.first_id_of_attempt {
            // A cursor from an earlier attempt: continue with the current attempt.
            self.next = g.first_id_of_attempt;
        }
        if self.next < g.trimmed_below {
            return Next::Gap(Gap {
                run_id: self.log.run_id.clone(),
                requested: self.requested,
                earliest: g.events.front().map(|e| e.id),
                latest: g.events.back().map(|e| e.id),
            });
        }
        let start = g.events.partition_point(|e| e.id < self.next);
        let mut out = Vec::new();
        let mut last = None;
        for e in g.events.iter().skip(start) {
            last = Some(e.id);
            if self.filter.matches(&e.name) {
                out.push(e.clone());
                if out.len() >= max {
                    break;
                }
            }
        }
        if let Some(l) = last {
            self.next = l + 1;
        }
        if !out.is_empty() {
            Next::Events(out)
        } else if g.done {
            Next::Done
        } else {
            Next::Pending
        }
    }

    /// Resolves when the log changed since the last [`poll`](Self::poll).
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            // Sender gone: the log was dropped; nothing more will come.
            std::future::pending::<()>().await;
        }
    }
}

/// What thread-stream subscribers receive.
#[derive(Clone, Debug)]
pub enum ThreadItem {
    Event(Arc<Event>),
    RunDone(String),
    /// A state write outside a run (`POST /threads/{id}/state`).
    StateUpdate(Bytes),
}

/// Fan-out to `GET /threads/{id}/stream` subscribers.
#[derive(Debug, Default)]
pub struct ThreadHub {
    watchers: AtomicUsize,
    channels: RwLock<HashMap<String, broadcast::Sender<(String, ThreadItem)>>>,
}

impl ThreadHub {
    fn forward(&self, thread_id: &str, run_id: &str, item: ThreadItem) {
        if self.watchers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let map = match self.channels.read() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        if let Some(tx) = map.get(thread_id) {
            let _ = tx.send((run_id.to_string(), item));
        }
    }

    /// Publishes a non-run item on a thread.
    pub fn publish(&self, thread_id: &str, item: ThreadItem) {
        self.forward(thread_id, "", item);
    }

    pub fn subscribe(self: &Arc<Self>, thread_id: &str) -> ThreadWatch {
        let mut map = match self.channels.write() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let rx = map
            .entry(thread_id.to_string())
            .or_insert_with(|| broadcast::channel(1024).0)
            .subscribe();
        self.watchers.fetch_add(1, Ordering::Relaxed);
        ThreadWatch {
            hub: self.clone(),
            thread_id: thread_id.to_string(),
            rx,
        }
    }
}

/// A subscription to a thread's runs. Unsubscribes when dropped.
#[derive(Debug)]
pub struct ThreadWatch {
    hub: Arc<ThreadHub>,
    thread_id: String,
    pub rx: broadcast::Receiver<(String, ThreadItem)>,
}

impl Drop for ThreadWatch {
    fn drop(&mut self) {
        self.hub.watchers.fetch_sub(1, Ordering::Relaxed);
        let mut map = match self.hub.channels.write() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        if let Some(tx) = map.get(&self.thread_id)
            && tx.receiver_count() <= 1
        {
            map.remove(&self.thread_id);
        }
    }
}

/// All run logs of this process.
#[derive(Debug)]
pub struct Broker {
    logs: RwLock<HashMap<String, Arc<RunLog>>>,
    pub hub: Arc<ThreadHub>,
    cfg: BrokerConfig,
}

impl Broker {
    pub fn new(cfg: BrokerConfig) -> Broker {
        Broker {
            logs: RwLock::new(HashMap::new()),
            hub: Arc::new(ThreadHub::default()),
            cfg,
        }
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.cfg
    }

    /// The log of `run_id`, created when missing.
    pub fn open(&self, run_id: &str, thread_id: &str, resumable: bool) -> Arc<RunLog> {
        if let Some(l) = self.get(run_id) {
            return l;
        }
        let mut map = match self.logs.write() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        map.entry(run_id.to_string())
            .or_insert_with(|| {
                Arc::new(RunLog::new(
                    run_id,
                    thread_id,
                    resumable,
                    self.hub.clone(),
                    &self.cfg,
                ))
            })
            .clone()
    }

    pub fn get(&self, run_id: &str) -> Option<Arc<RunLog>> {
        let map = match self.logs.read() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        map.get(run_id).cloned()
    }

    /// Logs of a thread's runs still retained (thread-stream replay).
    pub fn logs_of_thread(&self, thread_id: &str) -> Vec<Arc<RunLog>> {
        let map = match self.logs.read() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        map.values()
            .filter(|l| l.thread_id == thread_id)
            .cloned()
            .collect()
    }

    /// Closes a run's log; non-resumable logs leave the broker at once (current subscribers
    /// keep reading their copy), resumable ones after the retention TTL.
    pub fn finish(&self, run_id: &str, final_body: Option<Bytes>) {
        let Some(log) = self.get(run_id) else {
            return;
        };
        log.close(final_body);
        if !log.is_resumable() {
            self.remove(run_id);
        }
    }

    pub fn remove(&self, run_id: &str) {
        let mut map = match self.logs.write() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        map.remove(run_id);
    }

    /// Drops finished logs older than the retention TTL; returns how many.
    pub fn sweep(&self) -> usize {
        let now = Instant::now();
        let mut map = match self.logs.write() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let before = map.len();
        map.retain(|_, l| !l.expired(now, self.cfg.retention));
        before - map.len()
    }

    pub fn len(&self) -> usize {
        match self.logs.read() {
            Ok(m) => m.len(),
            Err(p) => p.into_inner().len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    fn ids(n: Next) -> Vec<u64> {
        match n {
            Next::Events(e) => e.iter().map(|e| e.id).collect(),
            other => panic!("expected events, got {other:?}"),
        }
    }

    /// A pair event reads back as the JSON array of its parts; events published with one
    /// shared second part keep it once, and the log counts the bytes they send.
    #[test]
    fn pair_events_share_their_second_part() {
        let b = Broker::new(BrokerConfig::default());
        let log = b.open("r", "t", false);
        log.begin_attempt(1);
        let meta = data(r#"{"run_id":"r","langgraph_node":"model"}"#);
        log.publish_pair("messages", data(r#"{"content":"a"}"#), meta.clone());
        log.publish_pair("messages", data(r#"{"content":"b"}"#), meta.clone());
        let mut s = log.subscribe(Cursor::Start, ModeFilter::all());
        let Next::Events(events) = s.poll(16) else {
            panic!("expected events");
        };
        let texts: Vec<String> = events
            .iter()
            .map(|e| String::from_utf8(e.data().into_owned()).unwrap())
            .collect();
        assert_eq!(
            texts,
            vec![
                r#"[{"content":"a"},{"run_id":"r","langgraph_node":"model"}]"#,
                r#"[{"content":"b"},{"run_id":"r","langgraph_node":"model"}]"#,
            ]
        );
        for (e, t) in events.iter().zip(&texts) {
            assert_eq!(e.data_len(), t.len());
            let Data::Pair(_, second) = &e.data else {
                panic!("stored whole");
            };
            assert_eq!(second.as_ptr(), meta.as_ptr(), "the metadata was copied");
        }
        for t in &texts {
            serde_json::from_str::<serde_json::Value>(t).unwrap();
        }
        assert!(
            Arc::ptr_eq(&events[0].name, &events[1].name),
            "each event carries its own copy of the mode's name"
        );
    }

    #[test]
    fn replay_after_cursor_and_filter() {
        let b = Broker::new(BrokerConfig::default());
        let log = b.open("r", "t", true);
        log.begin_attempt(1);
        log.publish("metadata", data("{}"));
        log.publish("values", data("{}"));
        log.publish("messages", data("[]"));
        log.publish("updates|sub:1", data("{}"));
        let mut s = log.subscribe(Cursor::Start, ModeFilter::all());
        assert_eq!(ids(s.poll(100)), vec![0, 1, 2, 3]);
        assert!(matches!(s.poll(100), Next::Pending));
        let mut s = log.subscribe(Cursor::After(1), ModeFilter::all());
        assert_eq!(ids(s.poll(100)), vec![2, 3]);
        let mut s = log.subscribe(
            Cursor::Start,
            ModeFilter::new(vec!["messages-tuple".into(), "updates".into()]),
        );
        assert_eq!(ids(s.poll(100)), vec![2, 3]);
        log.close(None);
        assert!(matches!(s.poll(100), Next::Done));
        let mut s = log.subscribe(Cursor::Start, ModeFilter::all());
        let Next::Events(events) = s.poll(100) else {
            panic!("expected events");
        };
        let names: Vec<&str> = events.iter().map(|e| &*e.name).collect();
        assert_eq!(names, ["metadata", "values", "messages", "updates|sub:1"]);
    }

    #[test]
    fn trimmed_cursor_gets_a_gap() {
        let cfg = BrokerConfig {
            resumable_max_events: 3,
            ..BrokerConfig::default()
        };
        let b = Broker::new(cfg);
        let log = b.open("r", "t", true);
        log.begin_attempt(1);
        for _ in 0..10 {
            log.publish("values", data("{}"));
        }
        let mut s = log.subscribe(Cursor::After(2), ModeFilter::all());
        match s.poll(10) {
            Next::Gap(g) => {
                assert_eq!(g.earliest, Some(7));
                assert_eq!(g.latest, Some(9));
                assert_eq!(g.requested, Some(2));
            }
            other => panic!("{other:?}"),
        }
        let mut s = log.subscribe(Cursor::After(7), ModeFilter::all());
        assert_eq!(ids(s.poll(10)), vec![8, 9]);
    }

    #[test]
    fn new_attempt_continues_ids_and_old_cursors_resume_there() {
        let b = Broker::new(BrokerConfig::default());
        let log = b.open("r", "t", true);
        log.begin_attempt(2);
        let id = log.publish("metadata", data("{}"));
        assert_eq!(id, ATTEMPT_STRIDE);
        let mut s = log.subscribe(Cursor::After(57), ModeFilter::all());
        assert_eq!(ids(s.poll(10)), vec![ATTEMPT_STRIDE]);
    }

    #[test]
    fn last_event_id_parsing() {
        assert_eq!(Cursor::from_last_event_id(None), Cursor::Live);
        assert_eq!(Cursor::from_last_event_id(Some("-1")), Cursor::Start);
        assert_eq!(Cursor::from_last_event_id(Some("garbage")), Cursor::Start);
        assert_eq!(Cursor::from_last_event_id(Some("5")), Cursor::After(5));
    }

    #[tokio::test]
    async fn waiters_wake_on_publish() {
        let b = Broker::new(BrokerConfig::default());
        let log = b.open("r", "t", false);
        let mut s = log.subscribe(Cursor::Start, ModeFilter::all());
        assert!(matches!(s.poll(10), Next::Pending));
        let l2 = log.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            l2.publish("values", Bytes::from_static(b"{}"));
        });
        tokio::time::timeout(Duration::from_secs(2), s.changed())
            .await
            .unwrap();
        assert_eq!(ids(s.poll(10)), vec![0]);
    }
}
