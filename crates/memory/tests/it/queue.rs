use async_trait::async_trait;
use fawn_memory::{
    MemoryError, MemoryQueue, MemorySink, MemoryUpdater, PendingUpdate, QueueConfig, UpdateReport,
};
use fawn_state::{Message, ToolCall};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<PendingUpdate>>,
    delay: Duration,
}

#[async_trait]
impl MemoryUpdater for Recorder {
    async fn update(&self, item: &PendingUpdate) -> Result<UpdateReport, MemoryError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        self.seen.lock().unwrap().push(item.clone());
        Ok(UpdateReport::default())
    }
}

impl Recorder {
    fn seen(&self) -> Vec<PendingUpdate> {
        self.seen.lock().unwrap().clone()
    }
}

fn config(debounce_ms: u64) -> QueueConfig {
    QueueConfig {
        debounce: Duration::from_millis(debounce_ms),
        max_depth: 1000,
        shutdown_flush_timeout: Duration::from_secs(5),
    }
}

fn turn(user: &str, answer: &str) -> Vec<Message> {
    vec![
        Message::human(user),
        Message::ai("").with_tool_calls(vec![ToolCall::new("ls", json!({}), "c")]),
        Message::tool("listing", "c", None),
        Message::ai(answer),
    ]
}

#[tokio::test(start_paused = true)]
async fn debounced_and_newer_replaces_older() {
    let rec = Arc::new(Recorder::default());
    let q = MemoryQueue::start(config(30_000), rec.clone());
    q.enqueue("t1", "u", None, &turn("first", "a1"));
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(rec.seen().is_empty(), "processed before the debounce");
    // A newer turn for the same key replaces the pending one and restarts the timer.
    q.enqueue("t1", "u", None, &turn("second", "a2"));
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(rec.seen().is_empty());
    tokio::time::sleep(Duration::from_secs(11)).await;
    let seen = rec.seen();
    assert_eq!(seen.len(), 1);
    // Filtered: user text and final answer only.
    let texts: Vec<String> = seen[0].messages.iter().map(Message::text).collect();
    assert_eq!(texts, ["second", "a2"]);
    assert_eq!(q.stats().replaced, 1);
    assert_eq!(q.pending_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn keys_are_thread_user_agent() {
    let rec = Arc::new(Recorder::default());
    let q = MemoryQueue::start(config(1000), rec.clone());
    q.enqueue("t1", "u", None, &turn("a", "b"));
    q.enqueue("t1", "u", Some("coder"), &turn("c", "d"));
    q.enqueue("t1", "v", None, &turn("e", "f"));
    q.enqueue("t2", "u", None, &turn("g", "h"));
    assert_eq!(q.pending_count(), 4);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut keys: Vec<_> = rec
        .seen()
        .iter()
        .map(|p| (p.thread_id.clone(), p.user_id.clone(), p.agent_name.clone()))
        .collect();
    keys.sort();
    assert_eq!(keys.len(), 4);
    assert_eq!(keys[0], ("t1".into(), "u".into(), None));
    assert_eq!(keys[1], ("t1".into(), "u".into(), Some("coder".into())));
}

#[tokio::test(start_paused = true)]
async fn depth_limit_drops_new_keys() {
    let rec = Arc::new(Recorder::default());
    let q = MemoryQueue::start(
        QueueConfig {
            max_depth: 2,
            ..config(1000)
        },
        rec.clone(),
    );
    q.enqueue("t1", "u", None, &turn("a", "b"));
    q.enqueue("t2", "u", None, &turn("a", "b"));
    q.enqueue("t3", "u", None, &turn("a", "b"));
    // Replacing a pending key is still allowed at the limit.
    q.enqueue("t1", "u", None, &turn("newer", "b"));
    assert_eq!(q.pending_count(), 2);
    assert_eq!(q.stats().dropped, 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rec.seen().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn empty_conversations_are_not_queued() {
    let rec = Arc::new(Recorder::default());
    let q = MemoryQueue::start(config(10), rec.clone());
    q.enqueue("t1", "u", None, &[Message::tool("x", "c", None)]);
    assert_eq!(q.pending_count(), 0);
}

#[tokio::test]
async fn shutdown_flushes_pending_now() {
    let rec = Arc::new(Recorder::default());
    let q = MemoryQueue::start(config(3_600_000), rec.clone());
    q.enqueue("t1", "u", None, &turn("a", "b"));
    q.enqueue("t2", "u", None, &turn("c", "d"));
    let started = std::time::Instant::now();
    assert_eq!(q.shutdown().await, 0);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(rec.seen().len(), 2);
    // Closed: later turns are refused.
    q.enqueue("t3", "u", None, &turn("e", "f"));
    assert_eq!(q.pending_count(), 0);
    assert_eq!(q.stats().dropped, 1);
}

#[tokio::test]
async fn shutdown_gives_up_after_its_timeout() {
    let rec = Arc::new(Recorder {
        delay: Duration::from_secs(30),
        ..Default::default()
    });
    let q = MemoryQueue::start(
        QueueConfig {
            debounce: Duration::from_secs(3600),
            max_depth: 10,
            shutdown_flush_timeout: Duration::from_millis(200),
        },
        rec.clone(),
    );
    q.enqueue("t1", "u", None, &turn("a", "b"));
    q.enqueue("t2", "u", None, &turn("c", "d"));
    let started = std::time::Instant::now();
    let left = q.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    // One was in flight (lost), one still pending.
    assert_eq!(left, 1);
    assert!(rec.seen().is_empty());
}
