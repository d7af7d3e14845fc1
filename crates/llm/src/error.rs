//! Turning HTTP failures and provider error bodies into [`LlmError`]s.

use crate::LlmError;
use serde_json::Value;
use std::time::Duration;

/// A non-2xx HTTP response, with what is needed to classify it. Carried through
/// async-openai's `OpenAIError::Boxed` by our tower service, because async-openai's own
/// `ApiErrorResponse` drops the headers (and with them `Retry-After`).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpError {
    pub status: u16,
    pub retry_after: Option<Duration>,
    /// The response body (truncated to [`MAX_ERROR_BODY`] bytes).
    pub body: String,
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}: {}", self.status, self.body)
    }
}

impl std::error::Error for HttpError {}

/// Error bodies are read up to this many bytes.
pub const MAX_ERROR_BODY: usize = 64 * 1024;

impl HttpError {
    /// Reads status, `Retry-After` and (a bounded prefix of) the body of a failed response.
    pub async fn from_response(mut resp: reqwest::Response) -> HttpError {
        let status = resp.status().as_u16();
        let retry_after = retry_after(resp.headers());
        let mut body = Vec::new();
        while body.len() < MAX_ERROR_BODY {
            match resp.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        body.truncate(MAX_ERROR_BODY);
        HttpError {
            status,
            retry_after,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    pub fn classify(&self) -> LlmError {
        classify_http(self.status, self.retry_after, &self.body)
    }
}

/// `retry-after-ms`, or `Retry-After` as seconds or an HTTP date.
pub fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let raw = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = raw.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let date = chrono::DateTime::parse_from_rfc2822(raw).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// What an error body says: `(message, type, code)`, for OpenAI
/// (`{"error": {message, type, code}}`), Anthropic (`{"type":"error","error":{type,message}}`)
/// and the usual variants (`{"error": "text"}`, `{"message": …}`, `{"detail": …}`).
pub fn error_fields(body: &str) -> (String, String, String) {
    let v: Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(_) => return (body.trim().to_string(), String::new(), String::new()),
    };
    let s = |v: Option<&Value>| match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    let err = v.get("error");
    match err {
        Some(Value::Object(e)) => (
            s(e.get("message")),
            s(e.get("type")),
            s(e.get("code")).to_string(),
        ),
        Some(Value::String(m)) => (m.clone(), String::new(), s(v.get("code"))),
        _ => {
            let msg = [v.get("message"), v.get("detail"), v.get("msg")]
                .into_iter()
                .map(s)
                .find(|m| !m.is_empty())
                .unwrap_or_else(|| body.trim().to_string());
            (msg, s(v.get("type")), s(v.get("code")))
        }
    }
}

const QUOTA_PATTERNS: &[&str] = &[
    "insufficient_quota",
    "exceeded your current quota",
    "quota exceeded",
    "quota_exceeded",
    "billing",
    "credit balance",
    "insufficient balance",
    "insufficient_balance",
    "payment required",
    "余额不足",
    "欠费",
    "额度不足",
    "配额",
];

const AUTH_PATTERNS: &[&str] = &[
    "invalid_api_key",
    "invalid api key",
    "incorrect api key",
    "authentication_error",
    "unauthorized",
];

const RATE_PATTERNS: &[&str] = &[
    "rate limit",
    "rate_limit",
    "ratelimit",
    "too many requests",
    "limit_burst_rate",
    "请求过于频繁",
];

const BUSY_PATTERNS: &[&str] = &[
    "overloaded",
    "server busy",
    "server is busy",
    "system busy",
    "temporarily unavailable",
    "服务繁忙",
    "系统繁忙",
];

fn contains_any(haystack: &str, needles: &[&str]) -> bool {
    needles.iter().any(|n| haystack.contains(n))
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// Classifies a failed HTTP call: quota (`insufficient_quota`, billing bodies, 402) and auth
/// (401/403) are final; 429 is a rate limit; 408/409/425/5xx are server errors; any other 4xx
/// is a bad request unless its body says the provider is rate limited or busy.
pub fn classify_http(status: u16, retry_after: Option<Duration>, body: &str) -> LlmError {
    let (message, kind, code) = error_fields(body);
    let message = if message.is_empty() {
        format!("HTTP {status}")
    } else {
        shorten(&message, 500)
    };
    let haystack = format!("{message} {kind} {code}").to_lowercase();
    if status == 402 || ((400..500).contains(&status) && contains_any(&haystack, QUOTA_PATTERNS)) {
        return LlmError::Quota { message };
    }
    if status == 401 || status == 403 {
        return LlmError::Auth { status, message };
    }
    if status == 429 {
        return LlmError::RateLimit {
            retry_after,
            message,
        };
    }
    if matches!(status, 408 | 409 | 425) || status >= 500 {
        return LlmError::Server {
            status,
            retry_after,
            message,
        };
    }
    if (400..500).contains(&status) {
        if contains_any(&haystack, AUTH_PATTERNS) && !contains_any(&haystack, RATE_PATTERNS) {
            return LlmError::Auth { status, message };
        }
        if contains_any(&haystack, RATE_PATTERNS) {
            return LlmError::RateLimit {
                retry_after,
                message,
            };
        }
        if contains_any(&haystack, BUSY_PATTERNS) {
            return LlmError::Server {
                status,
                retry_after,
                message,
            };
        }
        return LlmError::BadRequest { status, message };
    }
    // 1xx/3xx that reached us as a failure.
    LlmError::Malformed {
        message: format!("unexpected HTTP status {status}: {message}"),
    }
}

/// Classifies a transport error from reqwest.
pub fn classify_reqwest(e: &reqwest::Error) -> LlmError {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    if e.is_timeout() {
        LlmError::Timeout { message }
    } else if e.is_decode() {
        LlmError::Malformed { message }
    } else if e.is_builder() {
        LlmError::BadRequest {
            status: 400,
            message: format!("could not build the request: {message}"),
        }
    } else {
        LlmError::Connection { message }
    }
}

/// Classifies an error of an SSE stream from `eventsource-stream` (over reqwest): a body
/// that ended early or broke is a connection error; bad UTF-8 or framing is malformed.
pub fn classify_stream_error<E: std::fmt::Display>(
    e: &eventsource_stream::EventStreamError<E>,
) -> LlmError {
    match e {
        eventsource_stream::EventStreamError::Transport(t) => LlmError::Connection {
            message: format!("stream interrupted: {t}"),
        },
        other => LlmError::Malformed {
            message: format!("invalid event stream: {other}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_statuses_and_bodies() {
        let quota = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        assert!(matches!(
            classify_http(429, None, quota),
            LlmError::Quota { .. }
        ));
        assert!(matches!(
            classify_http(
                400,
                None,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low"}}"#
            ),
            LlmError::Quota { .. }
        ));
        assert!(matches!(
            classify_http(401, None, "{}"),
            LlmError::Auth { status: 401, .. }
        ));
        assert!(matches!(
            classify_http(403, None, "nope"),
            LlmError::Auth { status: 403, .. }
        ));
        let rl = classify_http(
            429,
            Some(Duration::from_secs(3)),
            r#"{"error":{"message":"slow down"}}"#,
        );
        assert_eq!(rl.retry_after(), Some(Duration::from_secs(3)));
        assert_eq!(rl.kind(), "rate_limit");
        for s in [408, 409, 425, 500, 502, 503, 504, 529] {
            assert!(
                matches!(classify_http(s, None, ""), LlmError::Server { .. }),
                "{s}"
            );
        }
        assert!(matches!(
            classify_http(400, None, r#"{"error":{"message":"bad param"}}"#),
            LlmError::BadRequest { status: 400, .. }
        ));
        assert!(matches!(
            classify_http(
                400,
                None,
                r#"{"error":{"message":"Server busy, try later"}}"#
            ),
            LlmError::Server { .. }
        ));
        assert!(matches!(
            classify_http(402, None, ""),
            LlmError::Quota { .. }
        ));
        match classify_http(400, None, r#"{"error":{"message":"bad param"}}"#) {
            LlmError::BadRequest { message, .. } => assert_eq!(message, "bad param"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_retry_after_forms() {
        let mut h = http::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "1500".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        let mut h = http::HeaderMap::new();
        h.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }
}
