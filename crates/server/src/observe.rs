//! What every request leaves behind, from the outermost layer: its id (`X-Request-Id`,
//! taken from the client when it is usable — bounded, printable — or generated, and
//! returned on every response), a `request` log span naming it (so every log line written
//! while serving it carries `request_id`, and `trace_id` when tracing is on), its server
//! span (continuing an incoming `traceparent`), and `fawn_http_requests_total` /
//! `fawn_http_request_duration_seconds` by method, route template and status class.
//!
//! The route template is known only once routing is done: [`RouteSlot`] travels in the
//! request's extensions and the route's own access layer ([`crate::authz::Routes::route`])
//! fills it in; a request no route matched counts as `unmatched`. Durations are to the
//! response head: an SSE stream's lifetime is not a request latency.

use axum::extract::Request;
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use fawn_telemetry::request::{RequestInfo, sanitize};
use fawn_telemetry::trace::{self, Attr, attrs};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tracing::Instrument;

/// The request header (and response header) carrying the request id.
pub const REQUEST_ID: &str = "x-request-id";

/// Where the matched route template is written.
#[derive(Clone, Debug, Default)]
pub struct RouteSlot(Arc<OnceLock<&'static str>>);

impl RouteSlot {
    pub fn set(&self, template: &'static str) {
        let _ = self.0.set(template);
    }

    fn get(&self) -> Option<&'static str> {
        self.0.get().copied()
    }
}

/// The mount a path was served under (the same routes answer at each).
fn mount(path: &str) -> &'static str {
    if path == "/api/langgraph" || path.starts_with("/api/langgraph/") {
        "/api/langgraph"
    } else if path == "/api" || path.starts_with("/api/") {
        "/api"
    } else {
        ""
    }
}

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// The middleware (outermost).
pub async fn observe(mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    let id: Arc<str> = match req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| sanitize(v.as_bytes()))
    {
        Some(id) => Arc::from(id),
        None => {
            let mut buf = uuid::Uuid::encode_buffer();
            Arc::from(&*uuid::Uuid::new_v4().simple().encode_lower(&mut buf))
        }
    };
    let mount = mount(req.uri().path());
    let slot = RouteSlot::default();
    req.extensions_mut().insert(slot.clone());
    let (span, continued) = trace::start_request(method, req.headers(), |a| {
        a.push(Attr::new(attrs::HTTP_METHOD, method));
        a.push(Attr::new(attrs::URL_PATH, req.uri().path().to_string()));
        a.push(Attr::new(attrs::REQUEST_ID, id.to_string()));
    });
    let log_span = tracing::info_span!(
        "request",
        request_id = %id,
        trace_id = tracing::field::Empty,
    );
    if let Some(t) = span.trace_id() {
        log_span.record("trace_id", t);
    }
    let info = RequestInfo {
        id: id.clone(),
        traceparent: span.traceparent(),
        continued,
    };
    let handled = async move {
        let mut resp =
            fawn_telemetry::request::scope(info, trace::instrument(next.run(req), &span)).await;
        let status = resp.status().as_u16();
        let route = match slot.get() {
            Some(t) if mount.is_empty() => std::borrow::Cow::Borrowed(t),
            Some(t) => std::borrow::Cow::Owned(format!("{mount}{t}")),
            None => std::borrow::Cow::Borrowed("unmatched"),
        };
        let seconds = started.elapsed().as_secs_f64();
        fawn_telemetry::metrics().http_response(method, &route, status, seconds);
        if span.is_recording() {
            span.rename(format!("{method} {route}"));
            span.set(Attr::new(attrs::HTTP_ROUTE, route.to_string()));
            span.set(Attr::new(attrs::HTTP_STATUS, i64::from(status)));
            if status >= 500 {
                span.fail(&status.to_string(), "server error");
            }
        }
        span.end();
        // One line per request; probes and scrapes only at debug level.
        let ms = seconds * 1000.0;
        if is_probe(slot.get()) {
            tracing::debug!(method, route = %route, status, duration_ms = ms, "request");
        } else {
            tracing::info!(method, route = %route, status, duration_ms = ms, "request");
        }
        if let Ok(v) = HeaderValue::from_str(&id) {
            resp.headers_mut().insert(REQUEST_ID, v);
        }
        resp
    };
    handled.instrument(log_span).await
}

/// Health probes and metric scrapes, which come every few seconds.
fn is_probe(template: Option<&str>) -> bool {
    matches!(
        template,
        Some("/ok" | "/health" | "/metrics" | "/info" | "/")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_are_read_off_paths() {
        assert_eq!(mount("/threads"), "");
        assert_eq!(mount("/api/threads"), "/api");
        assert_eq!(mount("/api/langgraph/threads"), "/api/langgraph");
        assert_eq!(mount("/apix"), "");
        assert_eq!(mount("/api/langgraphx"), "/api");
    }
}
