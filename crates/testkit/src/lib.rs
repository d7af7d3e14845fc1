//! Test support: a scripted mock LLM server speaking OpenAI chat completions
//! (`POST /v1/chat/completions`, streaming and not, `GET /v1/models`), Anthropic Messages
//! (`POST /v1/messages`), Gemini (`POST /v1beta/models/{model}:streamGenerateContent?alt=sse`
//! and `:generateContent`) and Ollama (`POST /api/chat`, NDJSON, `GET /api/tags`), all
//! answering from the same script; also shipped as the `fawn-mock-llm` binary for demos and
//! benchmarks.
//!
//! Owns: the script of [`Turn`]s, injectable [`Fault`]s, the stateless [`Behavior`]s used when
//! the script is empty (echo, demo, rules), the [`RecordedRequest`] log for assertions, and
//! provider response bodies replayed byte for byte ([`Turn::recorded`], the files under
//! [`RECORDINGS_DIR`]).
//! Must never know Fawn's own types: it speaks only JSON on the wire, so every Fawn crate
//! (including `fawn-llm`, whose tests use it) can depend on it.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use fawn_testkit::{MockLlm, Turn};
//! let mock = MockLlm::start().await?;
//! mock.push(Turn::text("Hello!"));
//! // point an OpenAI-compatible client at mock.base_url() …
//! assert_eq!(mock.request_count(), 0);
//! # Ok(()) }
//! ```

mod anthropic;
mod gemini;
mod ollama;
mod openai;
mod record;
mod script;
mod server;

pub use record::RecordedRequest;
pub use script::{
    Behavior, Chunking, DEMO_PREFIX, DIRECTIVE_MARKER, Directive, Fault, LastRole, MockToolCall,
    MockUsage, RECORDINGS_DIR, RequestView, Rules, Turn,
};

use axum::serve::ListenerExt;
use server::{Shared, lock};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How a [`MockLlm`] is started.
#[derive(Clone, Debug, PartialEq)]
pub struct MockConfig {
    /// Where to listen; default `127.0.0.1:0` (a free port).
    pub addr: SocketAddr,
    /// What to answer when the script is empty. Default [`Behavior::Echo`].
    pub behavior: Behavior,
    /// Default chunking of streamed text. Default [`Chunking::Words`].
    pub chunking: Chunking,
    /// Default delay between streamed chunks. Default zero.
    pub chunk_delay: Duration,
    /// The model id listed by `GET /v1/models`.
    pub model: String,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            behavior: Behavior::Echo,
            chunking: Chunking::Words,
            chunk_delay: Duration::ZERO,
            model: "fawn-mock".to_string(),
        }
    }
}

impl MockConfig {
    pub fn with_behavior(mut self, behavior: Behavior) -> Self {
        self.behavior = behavior;
        self
    }

    pub fn with_chunking(mut self, chunking: Chunking) -> Self {
        self.chunking = chunking;
        self
    }

    pub fn with_chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    pub fn with_addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }
}

/// A running mock LLM server. Stops when dropped or on [`MockLlm::stop`].
pub struct MockLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockLlm").field("addr", &self.addr).finish()
    }
}

impl MockLlm {
    /// Starts a mock on a free local port that echoes when its script is empty.
    pub async fn start() -> std::io::Result<MockLlm> {
        MockLlm::start_with(MockConfig::default()).await
    }

    /// Starts a mock with `config`.
    pub async fn start_with(config: MockConfig) -> std::io::Result<MockLlm> {
        let listener = tokio::net::TcpListener::bind(config.addr).await?;
        let addr = listener.local_addr()?;
        let cancel = CancellationToken::new();
        let shared = Arc::new(Shared {
            turns: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
            notify: tokio::sync::Notify::new(),
            config,
            cancel: cancel.clone(),
            streams_completed: AtomicUsize::new(0),
            streams_aborted: AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .fallback(server::handle)
            .with_state(shared.clone());
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(cancel.cancelled_owned())
                .await;
        });
        Ok(MockLlm {
            addr,
            shared,
            task: Some(task),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:<port>/v1`: the `base_url` for OpenAI-compatible clients.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Appends a turn to the script.
    pub fn push(&self, turn: Turn) -> &Self {
        lock(&self.shared.turns).push_back(turn);
        self
    }

    /// Appends several turns to the script.
    pub fn push_all(&self, turns: impl IntoIterator<Item = Turn>) -> &Self {
        lock(&self.shared.turns).extend(turns);
        self
    }

    /// Turns not yet consumed.
    pub fn pending_turns(&self) -> usize {
        lock(&self.shared.turns).len()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// Only the chat calls (every protocol's, see [`RecordedRequest::is_chat`]).
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests)
            .iter()
            .filter(|r| r.is_chat())
            .cloned()
            .collect()
    }

    pub fn request_count(&self) -> usize {
        lock(&self.shared.requests).len()
    }

    pub fn last_request(&self) -> Option<RecordedRequest> {
        lock(&self.shared.requests).last().cloned()
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.requests).clear();
    }

    /// Streamed responses sent to their end.
    pub fn streams_completed(&self) -> usize {
        self.shared.streams_completed.load(Ordering::SeqCst)
    }

    /// Streamed responses abandoned by the client (it disconnected before the end).
    pub fn streams_aborted(&self) -> usize {
        self.shared.streams_aborted.load(Ordering::SeqCst)
    }

    /// Waits until `check(self)` holds; false if `timeout` passed first.
    pub async fn wait_until(&self, timeout: Duration, check: impl Fn(&MockLlm) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while !check(self) {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// Waits until at least `n` requests were received; false if `timeout` passed first.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.notify.notified();
            if self.request_count() >= n {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.request_count() >= n;
            }
        }
    }

    /// Stops the server: hanging requests are released, streams end, the port is freed.
    pub async fn stop(mut self) {
        self.shared.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
    }
}
