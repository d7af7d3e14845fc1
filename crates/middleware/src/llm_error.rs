//! `LLMErrorHandlingMiddleware` (`wrap_model_call`): retries failed model calls with
//! decorrelated-jitter backoff (honouring `Retry-After`), emits an `llm_retry` custom event
//! before each retry, guards the provider with a process-wide circuit breaker and concurrency
//! cap, and turns a final failure into an assistant message marked
//! `additional_kwargs.deerflow_error_fallback = true` so the run ends normally and the worker
//! marks it as `error` (see [`error_fallback`]).
//!
//! Streaming note: a retry calls the inner model step again. Chunks a failed attempt had
//! already streamed were sent to clients; the agent gives each attempt's message its own id
//! (or replaces it by id), so the final state holds only the successful attempt's message.

use crate::util::{object, truncate_chars};
use crate::{
    Hook, Middleware, MiddlewareError, ModelCall, ModelRequest, ModelResponse, RunContext,
};
use async_trait::async_trait;
use fawn_config::{CircuitBreakerConfig, LlmCallConfig};
use fawn_llm::LlmError;
use fawn_state::{Message, StreamEvent, ThreadState};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// `Retry-After` values above this are capped.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Retry budget for burst-rate limits and stream-chunk timeouts.
const SHORT_RETRY_BUDGET: u32 = 2;

pub const FALLBACK_MARKER: &str = "deerflow_error_fallback";

/// Text of the assistant message returned while the circuit is open.
pub const CIRCUIT_OPEN_TEXT: &str = "The model provider is unavailable after repeated failures, so the circuit breaker is engaged to protect the system. Please wait a moment before trying again.";

// ---------------------------------------------------------------------------
// Circuit breaker (process-wide)
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CircuitState {
    Closed,
    Open,
    HalfOpen,
}

#[derive(Debug)]
struct CircuitInner {
    state: CircuitState,
    failures: u32,
    open_until: Option<Instant>,
    probe_in_flight: bool,
}

/// Opens after `failure_threshold` consecutive retriable failures, fails fast for
/// `recovery_timeout`, then lets one probe call through (half-open): its success closes the
/// circuit, its failure re-opens it.
#[derive(Debug)]
pub struct CircuitBreaker {
    threshold: u32,
    recovery: Duration,
    inner: Mutex<CircuitInner>,
}

impl CircuitBreaker {
    pub fn new(failure_threshold: u32, recovery_timeout: Duration) -> Self {
        CircuitBreaker {
            threshold: failure_threshold.max(1),
            recovery: recovery_timeout,
            inner: Mutex::new(CircuitInner {
                state: CircuitState::Closed,
                failures: 0,
                open_until: None,
                probe_in_flight: false,
            }),
        }
    }

    pub fn from_config(c: &CircuitBreakerConfig) -> Self {
        CircuitBreaker::new(
            c.failure_threshold,
            Duration::from_secs(c.recovery_timeout_sec),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CircuitInner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub fn state(&self) -> CircuitState {
        self.lock().state
    }

    /// True when the call must fail fast. In half-open state the first caller becomes the
    /// probe (and is let through); others fail fast until it reports.
    pub fn is_open(&self) -> bool {
        let mut g = self.lock();
        if g.state == CircuitState::Open {
            if g.open_until.is_some_and(|t| Instant::now() < t) {
                return true;
            }
            g.state = CircuitState::HalfOpen;
            g.probe_in_flight = false;
        }
        if g.state == CircuitState::HalfOpen {
            if g.probe_in_flight {
                return true;
            }
            g.probe_in_flight = true;
        }
        false
    }

    pub fn record_success(&self) {
        let mut g = self.lock();
        if g.state != CircuitState::Closed || g.failures > 0 {
            tracing::info!("circuit breaker closed: the model provider recovered");
        }
        g.state = CircuitState::Closed;
        g.failures = 0;
        g.open_until = None;
        g.probe_in_flight = false;
    }

    /// A retriable failure (after retries).
    pub fn record_failure(&self) {
        let mut g = self.lock();
        let reopen = Instant::now() + self.recovery;
        if g.state == CircuitState::HalfOpen {
            g.state = CircuitState::Open;
            g.open_until = Some(reopen);
            g.probe_in_flight = false;
            tracing::error!(
                recovery_secs = self.recovery.as_secs(),
                "circuit breaker probe failed; open again"
            );
            return;
        }
        g.failures += 1;
        if g.failures >= self.threshold && g.state != CircuitState::Open {
            g.state = CircuitState::Open;
            g.open_until = Some(reopen);
            g.probe_in_flight = false;
            tracing::error!(
                threshold = self.threshold,
                recovery_secs = self.recovery.as_secs(),
                "circuit breaker open"
            );
        }
    }

    /// The call ended without saying anything about provider health (cancelled, a request
    /// error): a half-open probe slot is freed for the next caller.
    pub fn release_probe(&self) {
        self.lock().probe_in_flight = false;
    }
}

/// One circuit breaker per model (by config name), created on first use: a provider that
/// keeps failing does not fail-fast runs on other models.
#[derive(Debug)]
pub struct CircuitBreakers {
    threshold: u32,
    recovery: Duration,
    by_model: Mutex<std::collections::HashMap<String, Arc<CircuitBreaker>>>,
}

impl CircuitBreakers {
    pub fn new(failure_threshold: u32, recovery_timeout: Duration) -> Self {
        CircuitBreakers {
            threshold: failure_threshold,
            recovery: recovery_timeout,
            by_model: Mutex::new(std::collections::HashMap::new()),
        }
    }

    pub fn from_config(c: &CircuitBreakerConfig) -> Self {
        CircuitBreakers::new(
            c.failure_threshold,
            Duration::from_secs(c.recovery_timeout_sec),
        )
    }

    /// The breaker of `model`.
    pub fn get(&self, model: &str) -> Arc<CircuitBreaker> {
        let mut g = match self.by_model.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        g.entry(model.to_string())
            .or_insert_with(|| Arc::new(CircuitBreaker::new(self.threshold, self.recovery)))
            .clone()
    }
}

/// The process-wide cap on concurrent model calls (`llm_call.max_concurrent_calls`, 0 = no
/// cap), fixed when the process starts.
#[derive(Debug, Clone)]
pub struct LlmConcurrency {
    sem: Option<Arc<Semaphore>>,
}

impl LlmConcurrency {
    pub fn new(max_concurrent_calls: usize) -> Self {
        LlmConcurrency {
            sem: (max_concurrent_calls > 0).then(|| Arc::new(Semaphore::new(max_concurrent_calls))),
        }
    }

    pub fn limit(&self) -> Option<usize> {
        self.sem.as_ref().map(|s| s.available_permits())
    }

    async fn acquire(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        match &self.sem {
            Some(s) => s.clone().acquire_owned().await.ok(),
            None => None,
        }
    }
}

// ---------------------------------------------------------------------------
// Classification and backoff
// ---------------------------------------------------------------------------

/// How a failure is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classification {
    pub retriable: bool,
    /// `quota`, `auth`, `busy`, `burst_rate`, `stream_chunk_timeout`, `transient`, `generic`.
    pub reason: &'static str,
    /// Attempts allowed for this kind of failure (first call included).
    pub budget: u32,
    /// Use the burst base delay.
    pub burst: bool,
}

const BUSY_PATTERNS: &[&str] = &[
    "server busy",
    "server is busy",
    "system busy",
    "overloaded",
    "temporarily unavailable",
    "try again later",
    "high demand",
    "服务繁忙",
    "系统繁忙",
    "负载较高",
    "稍后重试",
];

fn matches_any(text: &str, patterns: &[&str]) -> bool {
    let lower = text.to_lowercase();
    patterns.iter().any(|p| lower.contains(p))
}

/// DeerFlow's classification, on Fawn's typed [`LlmError`].
pub fn classify(e: &LlmError, max_attempts: u32) -> Classification {
    let max = max_attempts.max(1);
    let short = max.min(SHORT_RETRY_BUDGET);
    let c = |retriable, reason, budget, burst| Classification {
        retriable,
        reason,
        budget: if retriable { budget } else { 1 },
        burst,
    };
    match e {
        LlmError::Quota { .. } => c(false, "quota", 1, false),
        LlmError::Auth { .. } => c(false, "auth", 1, false),
        LlmError::RateLimit { message, .. } if message.contains("limit_burst_rate") => {
            c(true, "burst_rate", short, true)
        }
        LlmError::RateLimit { .. } => c(true, "busy", max, false),
        LlmError::Server {
            status, message, ..
        } => {
            if matches!(status, 503 | 529) || matches_any(message, BUSY_PATTERNS) {
                c(true, "busy", max, false)
            } else {
                c(true, "transient", max, false)
            }
        }
        LlmError::Timeout { message }
            if message.contains("stream chunk") || message.contains("stream event") =>
        {
            c(true, "stream_chunk_timeout", short, false)
        }
        LlmError::Timeout { .. } | LlmError::Connection { .. } | LlmError::Malformed { .. } => {
            c(true, "transient", max, false)
        }
        LlmError::BadRequest { message, .. } if matches_any(message, BUSY_PATTERNS) => {
            c(true, "busy", max, false)
        }
        LlmError::BadRequest { .. } | LlmError::Cancelled => c(false, "generic", 1, false),
    }
}

/// A uniform random fraction in [0, 1).
fn random_unit() -> f64 {
    (uuid::Uuid::new_v4().as_u128() % 1_000_000) as f64 / 1_000_000.0
}

/// Decorrelated jitter: `min(cap, uniform(base, previous * 3))`.
pub fn decorrelated_delay(base: Duration, cap: Duration, previous: Duration) -> Duration {
    let lo = base.as_secs_f64();
    let hi = (previous.as_secs_f64() * 3.0).max(lo);
    let d = lo + (hi - lo) * random_unit();
    Duration::from_secs_f64(d.min(cap.as_secs_f64()).max(0.0))
}

fn reason_text(reason: &str) -> &'static str {
    match reason {
        "busy" | "burst_rate" => "provider is busy",
        "stream_chunk_timeout" => "provider stream stalled",
        _ => "temporary provider error",
    }
}

/// `LLM request retry 1/3: provider is busy. Retrying in 2s.`
pub fn retry_message(attempt: u32, max_attempts: u32, wait: Duration, reason: &str) -> String {
    let secs = ((wait.as_millis() as f64) / 1000.0).round().max(1.0) as u64;
    format!(
        "LLM request retry {attempt}/{max_attempts}: {}. Retrying in {secs}s.",
        reason_text(reason)
    )
}

fn user_message(e: &LlmError, reason: &str) -> String {
    match reason {
        "quota" => "The model provider refused the request because the account is out of quota or billing is unavailable. Please fix the provider account, then try again.".to_string(),
        "auth" => "The model provider refused the request because its credentials are invalid or lack access. Please check the provider credentials, then try again.".to_string(),
        "busy" | "burst_rate" | "transient" | "stream_chunk_timeout" => "The model provider is temporarily unavailable, even after several retries. Please wait a moment and continue the conversation.".to_string(),
        _ => format!("LLM request failed: {}", truncate_chars(&e.to_string(), 500)),
    }
}

/// What a fallback answer says about the failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorFallback {
    /// [`LlmError::kind`] (`quota`, `rate_limit`, …) or `circuit_open`.
    pub error_type: String,
    /// The classification reason (`quota`, `busy`, `transient`, …).
    pub error_reason: String,
    pub error_detail: String,
}

/// The failure an AI message stands in for, when it is a fallback answer written by
/// [`LLMErrorHandlingMiddleware`]. The run worker uses this to end the run as `error`.
pub fn error_fallback(m: &Message) -> Option<ErrorFallback> {
    if m.additional_kwargs
        .get(FALLBACK_MARKER)
        .and_then(Value::as_bool)
        != Some(true)
    {
        return None;
    }
    let s = |k: &str| {
        m.additional_kwargs
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Some(ErrorFallback {
        error_type: s("error_type"),
        error_reason: s("error_reason"),
        error_detail: s("error_detail"),
    })
}

fn fallback_message(text: String, error_type: &str, reason: &str, detail: &str) -> Message {
    let mut m = Message::ai(text);
    m.additional_kwargs = object([
        (FALLBACK_MARKER, Value::Bool(true)),
        ("error_type", json!(error_type)),
        ("error_reason", json!(reason)),
        ("error_detail", json!(truncate_chars(detail, 500))),
    ]);
    m.response_metadata
        .insert("finish_reason".into(), json!("stop"));
    m
}

// ---------------------------------------------------------------------------
// The middleware
// ---------------------------------------------------------------------------

pub struct LLMErrorHandlingMiddleware {
    config: LlmCallConfig,
    circuits: Arc<CircuitBreakers>,
    limiter: LlmConcurrency,
}

impl std::fmt::Debug for LLMErrorHandlingMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LLMErrorHandlingMiddleware")
            .field("config", &self.config)
            .finish()
    }
}

impl LLMErrorHandlingMiddleware {
    pub fn new(
        config: LlmCallConfig,
        circuits: Arc<CircuitBreakers>,
        limiter: LlmConcurrency,
    ) -> Self {
        LLMErrorHandlingMiddleware {
            config,
            circuits,
            limiter,
        }
    }

    fn base_delay(&self, burst: bool) -> Duration {
        Duration::from_millis(if burst {
            self.config.burst_retry_base_delay_ms
        } else {
            self.config.retry_base_delay_ms
        })
    }

    fn cap_delay(&self, burst: bool) -> Duration {
        let cap = Duration::from_millis(self.config.retry_cap_delay_ms);
        // A burst base above the cap would never wait its base.
        cap.max(if burst {
            self.base_delay(true)
        } else {
            Duration::ZERO
        })
    }
}

#[async_trait]
impl Middleware for LLMErrorHandlingMiddleware {
    fn name(&self) -> &str {
        "LLMErrorHandlingMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::WrapModelCall]
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        _state: &ThreadState,
        ctx: &RunContext,
        next: &dyn ModelCall,
    ) -> Result<ModelResponse, MiddlewareError> {
        let circuit = self.circuits.get(&request.model.info().name);
        if circuit.is_open() {
            return Ok(ModelResponse {
                message: fallback_message(
                    CIRCUIT_OPEN_TEXT.to_string(),
                    "circuit_open",
                    "circuit_open",
                    "circuit breaker is open",
                ),
            });
        }
        let mut attempt: u32 = 1;
        let mut previous: Option<Duration> = None;
        loop {
            let permit = tokio::select! {
                p = self.limiter.acquire() => p,
                _ = ctx.cancel.cancelled() => {
                    circuit.release_probe();
                    return Err(MiddlewareError::Cancelled);
                }
            };
            let result = next.call(request.clone()).await;
            drop(permit);
            let e = match result {
                Ok(r) => {
                    circuit.record_success();
                    return Ok(r);
                }
                Err(MiddlewareError::Llm(LlmError::Cancelled))
                | Err(MiddlewareError::Cancelled) => {
                    circuit.release_probe();
                    return Err(MiddlewareError::Cancelled);
                }
                Err(MiddlewareError::Failed(f)) => {
                    circuit.release_probe();
                    return Err(MiddlewareError::Failed(f));
                }
                Err(MiddlewareError::Llm(e)) => e,
            };
            if ctx.cancel.is_cancelled() {
                circuit.release_probe();
                return Err(MiddlewareError::Cancelled);
            }
            let cls = classify(&e, self.config.retry_max_attempts);
            if cls.retriable && attempt < cls.budget {
                let base = self.base_delay(cls.burst);
                let wait = match e.retry_after() {
                    Some(ra) => ra.min(MAX_RETRY_AFTER),
                    None => decorrelated_delay(
                        base,
                        self.cap_delay(cls.burst),
                        previous.unwrap_or(base),
                    ),
                };
                previous = Some(wait);
                let wait_ms = wait.as_millis() as u64;
                tracing::warn!(
                    attempt,
                    max_attempts = cls.budget,
                    wait_ms,
                    reason = cls.reason,
                    error = %e,
                    "transient model error; retrying"
                );
                ctx.events.emit(StreamEvent::Custom(json!({
                    "type": "llm_retry",
                    "attempt": attempt,
                    "max_attempts": cls.budget,
                    "wait_ms": wait_ms,
                    "reason": cls.reason,
                    "message": retry_message(attempt, cls.budget, wait, cls.reason),
                })));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = ctx.cancel.cancelled() => {
                        circuit.release_probe();
                        return Err(MiddlewareError::Cancelled);
                    }
                }
                attempt += 1;
                continue;
            }
            tracing::warn!(attempt, reason = cls.reason, error = %e, "model call failed; answering with a fallback message");
            if cls.retriable {
                circuit.record_failure();
            } else {
                circuit.release_probe();
            }
            return Ok(ModelResponse {
                message: fallback_message(
                    user_message(&e, cls.reason),
                    e.kind(),
                    cls.reason,
                    &e.to_string(),
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let q = LlmError::Quota {
            message: "insufficient_quota".into(),
        };
        assert_eq!(classify(&q, 3).reason, "quota");
        assert!(!classify(&q, 3).retriable);
        let rl = LlmError::RateLimit {
            retry_after: None,
            message: "slow".into(),
        };
        assert_eq!(
            classify(&rl, 3),
            Classification {
                retriable: true,
                reason: "busy",
                budget: 3,
                burst: false
            }
        );
        let burst = LlmError::RateLimit {
            retry_after: None,
            message: "limit_burst_rate exceeded".into(),
        };
        assert_eq!(classify(&burst, 3).budget, 2);
        assert!(classify(&burst, 3).burst);
        let chunk = LlmError::Timeout {
            message: "no stream chunk within 5.0s".into(),
        };
        assert_eq!(classify(&chunk, 5).reason, "stream_chunk_timeout");
        assert_eq!(classify(&chunk, 5).budget, 2);
        let s500 = LlmError::Server {
            status: 500,
            retry_after: None,
            message: "boom".into(),
        };
        assert_eq!(classify(&s500, 3).reason, "transient");
        let bad = LlmError::BadRequest {
            status: 400,
            message: "bad".into(),
        };
        assert!(!classify(&bad, 3).retriable);
    }

    #[test]
    fn retry_message_format() {
        assert_eq!(
            retry_message(1, 3, Duration::from_millis(2000), "busy"),
            "LLM request retry 1/3: provider is busy. Retrying in 2s."
        );
        assert_eq!(
            retry_message(2, 3, Duration::from_millis(10), "transient"),
            "LLM request retry 2/3: temporary provider error. Retrying in 1s."
        );
    }

    #[test]
    fn jitter_bounds() {
        let base = Duration::from_millis(100);
        let cap = Duration::from_millis(800);
        for _ in 0..200 {
            let d = decorrelated_delay(base, cap, Duration::from_millis(200));
            assert!(d >= base && d <= Duration::from_millis(600), "{d:?}");
            let d = decorrelated_delay(base, cap, Duration::from_secs(10));
            assert!(d <= cap);
        }
    }

    #[test]
    fn circuit_opens_probes_and_closes() {
        let cb = CircuitBreaker::new(2, Duration::from_millis(30));
        assert!(!cb.is_open());
        cb.record_failure();
        assert_eq!(cb.state(), CircuitState::Closed);
        cb.record_failure();
        assert_eq!(cb.state(), CircuitState::Open);
        assert!(cb.is_open());
        std::thread::sleep(Duration::from_millis(40));
        // First caller is the probe; the second fails fast while it is in flight.
        assert!(!cb.is_open());
        assert_eq!(cb.state(), CircuitState::HalfOpen);
        assert!(cb.is_open());
        cb.record_failure();
        assert_eq!(cb.state(), CircuitState::Open);
        std::thread::sleep(Duration::from_millis(40));
        assert!(!cb.is_open());
        cb.record_success();
        assert_eq!(cb.state(), CircuitState::Closed);
        assert!(!cb.is_open());
    }
}
