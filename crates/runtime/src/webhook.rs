//! Run-completion webhooks: POST the run with its status, times, final values and error.
//!
//! Only absolute `http(s)` URLs and `/path` (a loopback call into this server) are accepted;
//! redirects are not followed, each call has a timeout, and a failed call is retried once
//! after a short pause (no retry storm).

use crate::error::{Result, RuntimeError};
use crate::runtime::Rt;
use fawn_checkpoint::Run;
use serde_json::{Value, json};
use std::time::Duration;

/// Checks a webhook URL at run creation.
pub fn validate_url(raw: &str) -> Result<String> {
    let s = raw.trim();
    if s.starts_with('/') && !s.starts_with("//") {
        return Ok(s.to_string());
    }
    match url::Url::parse(s) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(s.to_string()),
        _ => Err(RuntimeError::invalid(format!(
            "Invalid webhook URL '{s}': must be an absolute http(s) URL or a path starting with '/'"
        ))),
    }
}

/// Where a webhook goes: `/path` → this server on loopback.
pub fn resolve(rt: &crate::Runtime, url: &str) -> Option<String> {
    if url.starts_with('/') {
        let port = rt.local_port()?;
        Some(format!("http://127.0.0.1:{port}{url}"))
    } else {
        Some(url.to_string())
    }
}

/// The webhook body.
pub fn body(run: &Run, values: Value, started_at: &str, ended_at: &str) -> Value {
    let mut v = crate::wire::run(run);
    if let Value::Object(m) = &mut v {
        m.insert("run_started_at".into(), json!(started_at));
        m.insert("run_ended_at".into(), json!(ended_at));
        m.insert(
            "webhook_sent_at".into(),
            json!(crate::wire::ts(&chrono::Utc::now())),
        );
        m.insert("values".into(), values);
        if let Some(e) = &run.error {
            m.insert("error".into(), e.clone());
        }
    }
    v
}

/// Sends a webhook (at most two attempts).
pub async fn send(rt: Rt, url: String, payload: Value) {
    let Some(target) = resolve(&rt, &url) else {
        tracing::warn!(%url, "webhook: no local address for a path webhook");
        return;
    };
    for attempt in 1..=2u32 {
        let result = rt
            .webhook_client
            .post(&target)
            .json(&payload)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        match result {
            Ok(r) if r.status().is_success() => return,
            Ok(r) if r.status().is_client_error() => {
                tracing::warn!(url = %target, status = %r.status(), "webhook rejected");
                return;
            }
            Ok(r) => tracing::warn!(url = %target, status = %r.status(), attempt, "webhook failed"),
            Err(e) => tracing::warn!(url = %target, error = %e, attempt, "webhook failed"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert!(validate_url("https://example.com/hook").is_ok());
        assert!(validate_url("/internal/hook").is_ok());
        assert!(validate_url("//evil.com/x").is_err());
        assert!(validate_url("file:///etc/passwd").is_err());
        assert!(validate_url("ftp://x/y").is_err());
        assert!(validate_url("not a url").is_err());
    }
}
