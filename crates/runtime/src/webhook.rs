//! Run-completion webhooks: POST the run with its status, times, final values and error.
//!
//! Only absolute `http(s)` URLs and `/path` (a loopback call into this server) are accepted;
//! redirects are not followed, each call has a timeout, and a failed call is retried once
//! after a short pause (no retry storm).
//!
//! Webhooks go through web_fetch's SSRF guard: a URL whose host is (or resolves to) a
//! loopback, private, link-local, CGNAT or cloud-metadata address is refused — an IP literal
//! at run creation (422), a name when it is resolved for the call (inside the client's
//! resolver, so a name that changes its answer between two lookups is caught too). Internal
//! receivers are allowed by name in [`WebhookPolicy::allowed_hosts`]
//! (`FAWN_WEBHOOK_ALLOWED_HOSTS`, comma-separated `host` or `host:port`).

use crate::error::{Result, RuntimeError};
use crate::runtime::RuntimeHandle;
use fawn_checkpoint::Run;
use fawn_tools::web::SsrfPolicy;
use fawn_tools::web::guard::GuardedResolver;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The environment variable listing internal webhook receivers.
pub const ALLOWED_HOSTS_VAR: &str = "FAWN_WEBHOOK_ALLOWED_HOSTS";

/// Which webhook receivers are trusted although they are internal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookPolicy {
    /// `host` (any port) or `host:port`, compared case-insensitively with the URL's.
    pub allowed_hosts: Vec<String>,
}

impl WebhookPolicy {
    /// From [`ALLOWED_HOSTS_VAR`].
    pub fn from_env() -> WebhookPolicy {
        let allowed_hosts = std::env::var(ALLOWED_HOSTS_VAR)
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_ascii_lowercase())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        WebhookPolicy { allowed_hosts }
    }

    /// Whether `url`'s host is an allowed internal receiver.
    pub fn allows(&self, url: &url::Url) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = url.port_or_known_default().unwrap_or(0);
        self.allowed_hosts.iter().any(|a| {
            a == &host || a == &format!("{host}:{port}") || a == &format!("[{host}]:{port}")
        })
    }

    /// Checks a webhook URL at run creation: its form, and an IP-literal host against the
    /// guard (a name is checked when the call is made).
    pub fn validate_url(&self, raw: &str) -> Result<String> {
        let s = raw.trim();
        if s.starts_with('/') && !s.starts_with("//") {
            return Ok(s.to_string());
        }
        let url = match url::Url::parse(s) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => u,
            _ => {
                return Err(RuntimeError::invalid(format!(
                    "Invalid webhook URL '{s}': must be an absolute http(s) URL or a path starting with '/'"
                )));
            }
        };
        if !self.allows(&url)
            && let Err(e) = SsrfPolicy::strict().check_literal(&url)
        {
            return Err(RuntimeError::invalid(format!(
                "Invalid webhook URL '{s}': {e}; internal receivers must be listed in \
                 {ALLOWED_HOSTS_VAR}"
            )));
        }
        Ok(s.to_string())
    }
}

/// The HTTP clients webhooks are sent with.
#[derive(Debug, Clone)]
pub struct WebhookClients {
    /// For the public internet: every address checked, no proxy, no redirects.
    guarded: reqwest::Client,
    /// For allowed internal receivers and `/path` calls into this server.
    trusted: reqwest::Client,
}

impl WebhookClients {
    pub fn new() -> std::result::Result<WebhookClients, String> {
        let base = || {
            fawn_net::client_builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_secs(5))
                .tcp_nodelay(true)
        };
        let guarded = base()
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver))
            .build()
            .map_err(|e| e.to_string())?;
        let trusted = base().build().map_err(|e| e.to_string())?;
        Ok(WebhookClients { guarded, trusted })
    }
}

/// Why a webhook was not delivered.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("refused: {0}")]
    Refused(String),
    #[error("the receiver answered {0}")]
    Rejected(u16),
    #[error("failed twice: {0}")]
    Failed(String),
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

/// Sends a webhook (at most two attempts) and logs the outcome.
pub async fn send(rt: RuntimeHandle, url: String, payload: Value) {
    match deliver(&rt, &url, &payload).await {
        Ok(()) => {}
        Err(e) => tracing::warn!(%url, error = %e, "webhook not delivered"),
    }
}

/// Delivers a webhook: at most two attempts, through the guarded client unless the receiver
/// is allowed or this server itself.
pub async fn deliver(
    rt: &crate::Runtime,
    url: &str,
    payload: &Value,
) -> std::result::Result<(), WebhookError> {
    let Some(target) = resolve(rt, url) else {
        return Err(WebhookError::Refused(
            "no local address for a path webhook".into(),
        ));
    };
    let client = if url.starts_with('/') {
        &rt.webhooks.trusted
    } else {
        let parsed = url::Url::parse(&target).map_err(|e| WebhookError::Refused(e.to_string()))?;
        if rt.webhook_policy.allows(&parsed) {
            &rt.webhooks.trusted
        } else {
            SsrfPolicy::strict()
                .check_literal(&parsed)
                .map_err(|e| WebhookError::Refused(e.to_string()))?;
            &rt.webhooks.guarded
        }
    };
    let mut last = String::new();
    for attempt in 1..=2u32 {
        let result = client
            .post(&target)
            .json(payload)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        match result {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) if r.status().is_client_error() => {
                return Err(WebhookError::Rejected(r.status().as_u16()));
            }
            Ok(r) => last = format!("status {}", r.status()),
            Err(e) => {
                let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
                while let Some(err) = source {
                    if let Some(g) = err.downcast_ref::<fawn_tools::web::guard::GuardError>() {
                        return Err(WebhookError::Refused(g.to_string()));
                    }
                    source = err.source();
                }
                last = e.to_string();
            }
        }
        tracing::debug!(%target, attempt, error = %last, "webhook attempt failed");
        if attempt == 1 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Err(WebhookError::Failed(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let p = WebhookPolicy::default();
        assert!(p.validate_url("https://example.com/hook").is_ok());
        assert!(p.validate_url("/internal/hook").is_ok());
        for bad in [
            "//evil.com/x",
            "file:///etc/passwd",
            "ftp://x/y",
            "not a url",
        ] {
            assert!(
                matches!(p.validate_url(bad), Err(RuntimeError::Invalid(m))
                    if m == format!("Invalid webhook URL '{bad}': must be an absolute http(s) URL or a path starting with '/'")),
                "{bad}"
            );
        }
        for internal in [
            "http://127.0.0.1:8080/hook",
            "http://[::1]/hook",
            "http://169.254.169.254/latest/meta-data",
            "http://10.0.0.5/hook",
            "http://[::ffff:127.0.0.1]/x",
        ] {
            assert!(p.validate_url(internal).is_err(), "{internal}");
        }
    }

    #[test]
    fn allowed_receivers_by_host_or_host_and_port() {
        let p = WebhookPolicy {
            allowed_hosts: vec!["127.0.0.1".into(), "hooks.internal:8080".into()],
        };
        assert!(p.validate_url("http://127.0.0.1:9999/hook").is_ok());
        let u = |s: &str| url::Url::parse(s).unwrap();
        assert!(p.allows(&u("http://HOOKS.internal:8080/x")));
        assert!(!p.allows(&u("http://hooks.internal:8081/x")));
        assert!(!p.allows(&u("http://10.0.0.1/x")));
    }
}
