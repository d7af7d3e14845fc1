//! The legacy HTTP+SSE transport (MCP protocol 2024-11-05), which rmcp 3 no longer ships and
//! DeerFlow configs still use (`"type": "sse"`).
//!
//! The client opens `GET <url>` as an event stream; the server's first `endpoint` event
//! names the URL to POST client messages to; every server message then arrives as a
//! `message` event. The endpoint must be on the same origin as `url` (the configured
//! headers and OAuth token are sent there). Events larger than [`MAX_EVENT_BYTES`] end the
//! stream.

use super::oauth::TokenSource;
use super::redact::display_url;
use futures::StreamExt;
use futures::stream::BoxStream;
use http::HeaderMap;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RoleClient;
use rmcp::transport::Transport;
use std::sync::Arc;
use std::time::Duration;

/// Largest SSE event accepted.
pub(crate) const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;
/// A POST of one client message gives up after this long.
const POST_TIMEOUT: Duration = Duration::from_secs(60);

/// A transport failure (text already fit for users).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SseError(String);

/// One server-sent event.
#[derive(Debug, Default, PartialEq)]
struct Event {
    event: Option<String>,
    data: String,
}

/// Incremental SSE parser (the subset MCP uses: `event`, `data`, comments).
#[derive(Default)]
struct Parser {
    buf: Vec<u8>,
    /// `buf[..scanned]` holds no newline.
    scanned: usize,
    event: Option<String>,
    data: Option<String>,
    size: usize,
}

impl Parser {
    /// Feeds bytes; returns the events completed by them.
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<Event>, String> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(pos) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=self.scanned + pos).collect();
            self.scanned = 0;
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8(line).map_err(|_| "event stream is not UTF-8")?;
            if line.is_empty() {
                if let Some(data) = self.data.take() {
                    out.push(Event {
                        event: self.event.take(),
                        data,
                    });
                }
                self.event = None;
                self.size = 0;
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line.as_str(), ""),
            };
            self.size += value.len();
            if self.size > MAX_EVENT_BYTES {
                return Err(format!("an event is larger than {MAX_EVENT_BYTES} bytes"));
            }
            match field {
                "event" => self.event = Some(value.to_string()),
                "data" => match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => self.data = Some(value.to_string()),
                },
                _ => {}
            }
        }
        self.scanned = self.buf.len();
        if self.buf.len() > MAX_EVENT_BYTES {
            return Err(format!("an event is larger than {MAX_EVENT_BYTES} bytes"));
        }
        Ok(out)
    }
}

/// Sends requests with the configured headers and OAuth token.
struct Requests {
    http: reqwest::Client,
    headers: HeaderMap,
    token: Option<Arc<TokenSource>>,
}

impl Requests {
    /// Sends `build()` with headers and token; on 401, once more with a fresh token.
    async fn send(
        &self,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, String> {
        let mut rejected: Option<String> = None;
        loop {
            let mut req = build().headers(self.headers.clone());
            let auth = match &self.token {
                Some(t) => Some(t.authorization().await?),
                None => None,
            };
            if let Some(a) = &auth {
                req = req.header(http::header::AUTHORIZATION, a);
            }
            let resp = req.send().await.map_err(|e| e.to_string())?;
            if resp.status() == reqwest::StatusCode::UNAUTHORIZED
                && let (Some(t), Some(a)) = (&self.token, auth)
                && rejected.is_none()
            {
                t.invalidate(&a).await;
                rejected = Some(a);
                continue;
            }
            return Ok(resp);
        }
    }
}

/// A legacy-SSE session's transport.
pub(crate) struct LegacySse {
    requests: Arc<Requests>,
    endpoint: String,
    events: BoxStream<'static, Result<Vec<u8>, String>>,
    parser: Parser,
    ready: std::collections::VecDeque<Event>,
}

impl LegacySse {
    /// Opens the event stream at `url` and waits for the `endpoint` event.
    pub(crate) async fn open(
        url: &str,
        http: reqwest::Client,
        headers: HeaderMap,
        token: Option<Arc<TokenSource>>,
    ) -> Result<LegacySse, String> {
        let shown = display_url(url);
        let requests = Arc::new(Requests {
            http,
            headers,
            token,
        });
        let resp = requests
            .send(|| {
                requests
                    .http
                    .get(url)
                    .header(http::header::ACCEPT, "text/event-stream")
            })
            .await
            .map_err(|e| format!("GET {shown} failed: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("GET {shown} answered HTTP {}", resp.status()));
        }
        let is_sse = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        if !is_sse {
            return Err(format!("GET {shown} did not answer with an event stream"));
        }
        let mut sse = LegacySse {
            requests,
            endpoint: String::new(),
            events: resp
                .bytes_stream()
                .map(|r| r.map(|b| b.to_vec()).map_err(|e| e.to_string()))
                .boxed(),
            parser: Parser::default(),
            ready: Default::default(),
        };
        let data = loop {
            match sse.next_event().await {
                Some(Ok(ev)) if ev.event.as_deref() == Some("endpoint") => break ev.data,
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(format!("event stream from {shown} failed: {e}")),
                None => {
                    return Err(format!(
                        "event stream from {shown} ended before its endpoint event"
                    ));
                }
            }
        };
        sse.endpoint = endpoint_url(url, data.trim())?;
        Ok(sse)
    }

    async fn next_event(&mut self) -> Option<Result<Event, String>> {
        loop {
            if let Some(ev) = self.ready.pop_front() {
                return Some(Ok(ev));
            }
            match self.events.next().await? {
                Ok(bytes) => match self.parser.feed(&bytes) {
                    Ok(evs) => self.ready.extend(evs),
                    Err(e) => return Some(Err(e)),
                },
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The POST URL an `endpoint` event names, resolved against the stream's URL and required
/// to be on the same origin.
fn endpoint_url(base: &str, endpoint: &str) -> Result<String, String> {
    let base_url = url::Url::parse(base).map_err(|_| "invalid url".to_string())?;
    let target = base_url
        .join(endpoint)
        .map_err(|_| "the server's endpoint event is not a valid URL".to_string())?;
    if target.origin() != base_url.origin() {
        return Err(format!(
            "the server's endpoint {} is not on the origin of {}; refused",
            display_url(target.as_str()),
            display_url(base)
        ));
    }
    Ok(target.to_string())
}

impl Transport<RoleClient> for LegacySse {
    type Error = SseError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let requests = self.requests.clone();
        let endpoint = self.endpoint.clone();
        async move {
            let body = serde_json::to_vec(&item).map_err(|e| SseError(e.to_string()))?;
            let resp = requests
                .send(|| {
                    requests
                        .http
                        .post(&endpoint)
                        .header(http::header::CONTENT_TYPE, "application/json")
                        .timeout(POST_TIMEOUT)
                        .body(body.clone())
                })
                .await
                .map_err(|e| SseError(format!("POST {} failed: {e}", display_url(&endpoint))))?;
            if !resp.status().is_success() {
                return Err(SseError(format!(
                    "POST {} answered HTTP {}",
                    display_url(&endpoint),
                    resp.status()
                )));
            }
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            match self.next_event().await? {
                Ok(ev) if matches!(ev.event.as_deref(), None | Some("message")) => {
                    match serde_json::from_str::<ServerJsonRpcMessage>(&ev.data) {
                        Ok(msg) => return Some(msg),
                        Err(e) => tracing::warn!("legacy SSE: unreadable MCP message skipped: {e}"),
                    }
                }
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!("legacy SSE stream ended: {e}");
                    return None;
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.events = futures::stream::empty().boxed();
        self.ready.clear();
        async { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_across_chunks() {
        let mut p = Parser::default();
        assert_eq!(p.feed(b": ping\n\nevent: endpoint\nda").unwrap(), vec![]);
        let evs = p
            .feed(b"ta: /messages?s=1\r\n\r\ndata: {\"a\":1}\ndata: {}\n\n")
            .unwrap();
        assert_eq!(
            evs,
            vec![
                Event {
                    event: Some("endpoint".into()),
                    data: "/messages?s=1".into()
                },
                Event {
                    event: None,
                    data: "{\"a\":1}\n{}".into()
                },
            ]
        );
    }

    #[test]
    fn oversized_events_are_refused() {
        let mut p = Parser::default();
        let big = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert!(p.feed(&big).is_err());
    }

    #[test]
    fn endpoint_must_stay_on_the_origin() {
        assert_eq!(
            endpoint_url("http://h:1/sse", "/messages?sid=a").unwrap(),
            "http://h:1/messages?sid=a"
        );
        assert_eq!(
            endpoint_url("http://h:1/base/sse", "messages").unwrap(),
            "http://h:1/base/messages"
        );
        let err = endpoint_url("http://h:1/sse", "http://evil:1/m").unwrap_err();
        assert!(err.contains("not on the origin"), "{err}");
    }
}
