//! Retrying a model call before its first chunk: exponential backoff with jitter, honouring
//! the provider's `Retry-After` (capped).

use crate::{ChunkStream, LlmError};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How a provider retries a call that failed before its first chunk.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (DeerFlow/LangChain default: 2).
    pub max_retries: u32,
    /// Delay before the first retry; doubles each retry.
    pub base_delay: Duration,
    /// Upper bound of the exponential delay.
    pub max_delay: Duration,
    /// `Retry-After` values above this are capped to it.
    pub retry_after_cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            retry_after_cap: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based) after `error`: the provider's
    /// `Retry-After` (capped) when given, else `base * 2^(retry-1)` (capped) with up to 25%
    /// jitter taken off.
    pub fn delay(&self, retry: u32, error: &LlmError) -> Duration {
        if let Some(ra) = error.retry_after() {
            return ra.min(self.retry_after_cap);
        }
        let exp = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry.saturating_sub(1)));
        let capped = exp.min(self.max_delay);
        let jitter = (uuid::Uuid::new_v4().as_u128() % 1000) as f64 / 1000.0; // [0, 1)
        capped.mul_f64(1.0 - 0.25 * jitter)
    }
}

/// One retry about to happen.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryEvent {
    /// The config name of the model.
    pub model: String,
    /// 1 for the first retry.
    pub attempt: u32,
    pub max_retries: u32,
    /// How long the provider waits before the retry.
    pub delay: Duration,
    /// What failed.
    pub error: LlmError,
}

/// Called before every retry (for logs, metrics, `llm_retry` events, tests).
pub type RetryObserver = Arc<dyn Fn(&RetryEvent) + Send + Sync>;

/// Runs `attempt` until it succeeds, fails with a non-retryable error, or retries run out.
/// `attempt` must return only once the first chunk is in hand (errors after that are the
/// stream's, never retried here).
pub(crate) async fn with_retries<F, Fut>(
    model: &str,
    policy: &RetryPolicy,
    observer: Option<&RetryObserver>,
    mut attempt: F,
) -> Result<ChunkStream, LlmError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<ChunkStream, LlmError>>,
{
    let mut retry = 0;
    loop {
        match attempt().await {
            Ok(stream) => return Ok(stream),
            Err(e) if e.is_retryable() && retry < policy.max_retries => {
                retry += 1;
                let delay = policy.delay(retry, &e);
                tracing::warn!(model, attempt = retry, max = policy.max_retries, ?delay, error = %e, "retrying model call");
                let m = fawn_telemetry::metrics();
                m.model_retries
                    .with_label_values(&[&m.model_label.get(model), e.kind()])
                    .inc();
                if let Some(obs) = observer {
                    obs(&RetryEvent {
                        model: model.to_string(),
                        attempt: retry,
                        max_retries: policy.max_retries,
                        delay,
                        error: e,
                    });
                }
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_honour_retry_after() {
        let p = RetryPolicy::default();
        let e = LlmError::Connection {
            message: "x".into(),
        };
        let d1 = p.delay(1, &e);
        let d3 = p.delay(3, &e);
        assert!(d1 <= Duration::from_millis(500) && d1 >= Duration::from_millis(375));
        assert!(d3 <= Duration::from_secs(2) && d3 >= Duration::from_millis(1500));
        assert!(p.delay(30, &e) <= Duration::from_secs(8));
        let rl = LlmError::RateLimit {
            retry_after: Some(Duration::from_secs(3)),
            message: String::new(),
        };
        assert_eq!(p.delay(1, &rl), Duration::from_secs(3));
        let long = LlmError::RateLimit {
            retry_after: Some(Duration::from_secs(3600)),
            message: String::new(),
        };
        assert_eq!(p.delay(1, &long), Duration::from_secs(60));
    }
}
