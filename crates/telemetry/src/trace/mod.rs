//! Traces: OpenTelemetry spans for requests, runs, model calls, tool calls, subagents and
//! sandbox commands, exported over OTLP/HTTP to the destinations the environment names
//! ([`export`]).
//!
//! Tracing is process-wide and off until [`install`] succeeds. While it is off every
//! function here is a cheap no-op: [`Span`] holds nothing, no attribute is built (callers
//! pass closures), no context is attached to a future. While it is on, the current span
//! travels with the OpenTelemetry [`Context`] that [`instrument`] attaches to a future (or
//! stream) at every poll, so a span started deeper down finds its parent without being
//! handed it.
//!
//! Two instrumentation scopes: `fawn.http` (one server span per request) and `fawn.agent`
//! (runs and everything they do). Destinations made for LLM observability (LangSmith,
//! Langfuse) receive only the agent scope, so each run is one trace there; see
//! [`export`].

pub mod attrs;
pub mod export;

use futures::future::Either;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    FutureExt as _, Link, SpanContext, SpanKind, Status, TraceContextExt, TraceId, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::borrow::Cow;
use std::sync::OnceLock;

pub use opentelemetry::KeyValue as Attr;
pub use opentelemetry::trace::SpanKind as Kind;

/// The instrumentation scope of request spans.
pub const HTTP_SCOPE: &str = "fawn.http";
/// The instrumentation scope of runs and their work.
pub const AGENT_SCOPE: &str = "fawn.agent";

/// Tracing as installed for the process.
struct State {
    provider: SdkTracerProvider,
    http: SdkTracer,
    agent: SdkTracer,
    capture_inputs: bool,
    capture_outputs: bool,
    pumps: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    destinations: Vec<&'static str>,
}

static STATE: OnceLock<State> = OnceLock::new();

/// Whether spans are being recorded and exported.
pub fn enabled() -> bool {
    STATE.get().is_some()
}

/// Whether inputs (prompts, tool arguments, run input) go into spans.
pub fn capture_inputs() -> bool {
    STATE.get().is_some_and(|s| s.capture_inputs)
}

/// Whether outputs (answers, tool results, final values) go into spans.
pub fn capture_outputs() -> bool {
    STATE.get().is_some_and(|s| s.capture_outputs)
}

/// The destinations spans are exported to (`otlp`, `langsmith`, `langfuse`).
pub fn destinations() -> &'static [&'static str] {
    STATE
        .get()
        .map(|s| s.destinations.as_slice())
        .unwrap_or(&[])
}

/// Why tracing could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("tracing is already installed in this process")]
    AlreadyInstalled,
    #[error("{destination}: {message}")]
    Exporter {
        destination: &'static str,
        message: String,
    },
}

/// Installs tracing with `config`'s destinations (nothing happens when it has none). Must
/// be called inside a tokio runtime: each destination's export loop is a task of it.
pub fn install(config: &export::TraceConfig) -> Result<bool, InstallError> {
    if config.destinations.is_empty() {
        return Ok(false);
    }
    if STATE.get().is_some() {
        return Err(InstallError::AlreadyInstalled);
    }
    let (provider, pumps) = export::build_provider(config)?;
    let http = opentelemetry::trace::TracerProvider::tracer(&provider, HTTP_SCOPE);
    let agent = opentelemetry::trace::TracerProvider::tracer(&provider, AGENT_SCOPE);
    let state = State {
        provider,
        http,
        agent,
        capture_inputs: config.capture_inputs,
        capture_outputs: config.capture_outputs,
        pumps: std::sync::Mutex::new(pumps),
        destinations: config.destinations.iter().map(|d| d.name).collect(),
    };
    STATE
        .set(state)
        .map_err(|_| InstallError::AlreadyInstalled)?;
    Ok(true)
}

/// Stops accepting spans and waits (at most `timeout`) for the queued ones to be sent.
pub async fn shutdown(timeout: std::time::Duration) {
    let Some(state) = STATE.get() else { return };
    // Closes every destination's queue; the export loops drain what is left, then end.
    let _ = state.provider.shutdown();
    let pumps: Vec<_> = match state.pumps.lock() {
        Ok(mut p) => p.drain(..).collect(),
        Err(p) => p.into_inner().drain(..).collect(),
    };
    let _ = tokio::time::timeout(timeout, futures::future::join_all(pumps)).await;
}

/// Where a span hangs in the trace: what the nearest span above it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layer {
    Http,
    Agent,
}

/// A span in flight, or nothing (tracing off, or not sampled). Cloning shares the span;
/// it ends when [`Span::end`] is called (further calls do nothing).
#[derive(Clone, Debug, Default)]
pub struct Span {
    cx: Option<Context>,
}

impl Span {
    /// No span: every method does nothing.
    pub const fn none() -> Span {
        Span { cx: None }
    }

    fn of(cx: Context) -> Span {
        Span { cx: Some(cx) }
    }

    /// Whether attributes set on it are kept (recorded and sampled).
    pub fn is_recording(&self) -> bool {
        self.cx.as_ref().is_some_and(|cx| cx.span().is_recording())
    }

    /// The context that carries it (for children and for [`instrument`]).
    pub fn context(&self) -> Option<&Context> {
        self.cx.as_ref()
    }

    /// Sets one attribute.
    pub fn set(&self, attr: KeyValue) {
        if let Some(cx) = &self.cx {
            cx.span().set_attribute(attr);
        }
    }

    /// Sets attributes built only when the span records.
    pub fn set_with(&self, build: impl FnOnce(&mut Vec<KeyValue>)) {
        if self.is_recording()
            && let Some(cx) = &self.cx
        {
            let mut attrs = Vec::new();
            build(&mut attrs);
            cx.span().set_attributes(attrs);
        }
    }

    /// Renames it (a request span once its route is known).
    pub fn rename(&self, name: String) {
        if let Some(cx) = &self.cx {
            cx.span().update_name(name);
        }
    }

    /// Marks it failed: status error with `message`, and `error.type`.
    pub fn fail(&self, error_type: &str, message: &str) {
        if let Some(cx) = &self.cx {
            let span = cx.span();
            span.set_attribute(KeyValue::new(attrs::ERROR_TYPE, error_type.to_string()));
            span.set_status(Status::error(attrs::clip(message.to_string())));
        }
    }

    /// Marks it successful.
    pub fn ok(&self) {
        if let Some(cx) = &self.cx {
            cx.span().set_status(Status::Ok);
        }
    }

    /// Ends it now.
    pub fn end(&self) {
        if let Some(cx) = &self.cx {
            cx.span().end();
        }
    }

    /// Its W3C `traceparent`.
    pub fn traceparent(&self) -> Option<String> {
        let cx = self.cx.as_ref()?;
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| format_traceparent(&sc))
    }

    /// Its trace id (32 hex digits).
    pub fn trace_id(&self) -> Option<String> {
        let cx = self.cx.as_ref()?;
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| sc.trace_id().to_string())
    }
}

/// An attribute value holding a list of strings.
pub fn string_list(values: Vec<String>) -> opentelemetry::Value {
    opentelemetry::Value::Array(opentelemetry::Array::String(
        values.into_iter().map(Into::into).collect(),
    ))
}

/// The span current in this task (what [`instrument`] attached), if any.
pub fn current() -> Span {
    if STATE.get().is_none() {
        return Span::none();
    }
    let cx = Context::current();
    if cx.has_active_span() {
        Span::of(cx)
    } else {
        Span::none()
    }
}

/// Starts a span of the agent scope under the current span (or as a root). `name` and
/// `attributes` run only when tracing is on.
pub fn start<N: Into<Cow<'static, str>>>(
    name: impl FnOnce() -> N,
    kind: SpanKind,
    attributes: impl FnOnce(&mut Vec<KeyValue>),
) -> Span {
    let Some(state) = STATE.get() else {
        return Span::none();
    };
    let parent = Context::current();
    start_under(state, &parent, name(), kind, Vec::new(), attributes)
}

fn start_under(
    state: &State,
    parent: &Context,
    name: impl Into<Cow<'static, str>>,
    kind: SpanKind,
    links: Vec<Link>,
    attributes: impl FnOnce(&mut Vec<KeyValue>),
) -> Span {
    let mut attrs = Vec::new();
    attributes(&mut attrs);
    if parent.has_active_span() && parent.get::<Layer>() == Some(&Layer::Http) {
        attrs.push(KeyValue::new(attrs::PARENT_LAYER, "http"));
    }
    let span = state
        .agent
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attrs)
        .with_links(links)
        .start_with_context(&state.agent, parent);
    Span::of(parent.with_span(span).with_value(Layer::Agent))
}

/// How a run's span joins the trace of the request that created it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunParent {
    /// No request (a cron, a recovered run of unknown origin): a new trace.
    None,
    /// The request carried the caller's `traceparent`: the run is a child of the
    /// request's span, in the caller's trace.
    Child(String),
    /// The request had no trace of its own: the run starts a trace of its own, linked to
    /// the request's span.
    Linked(String),
}

/// Starts a run's span (see [`RunParent`]). A run that starts a trace of its own takes its
/// run id (a UUID) as the trace id, so every attempt of a run — a resume after a crash, a
/// takeover by another node — lands in the same trace, and the trace of a run is found by
/// its id.
pub fn start_run<N: Into<Cow<'static, str>>>(
    name: impl FnOnce() -> N,
    run_id: &str,
    parent: &RunParent,
    attributes: impl FnOnce(&mut Vec<KeyValue>),
) -> Span {
    let Some(state) = STATE.get() else {
        return Span::none();
    };
    let name = name();
    match parent {
        RunParent::Child(tp) => match parse_traceparent(tp) {
            // The request span (of this node or another) is the parent. Marked as a child
            // of HTTP so that LLM destinations, which drop request spans, see a root.
            Some(sc) => {
                let cx = Context::new()
                    .with_remote_span_context(sc)
                    .with_value(Layer::Http);
                start_under(state, &cx, name, SpanKind::Internal, Vec::new(), attributes)
            }
            None => run_root(state, name, run_id, Vec::new(), attributes),
        },
        RunParent::Linked(tp) => {
            let links = parse_traceparent(tp)
                .map(|sc| vec![Link::with_context(sc)])
                .unwrap_or_default();
            run_root(state, name, run_id, links, attributes)
        }
        RunParent::None => run_root(state, name, run_id, Vec::new(), attributes),
    }
}

/// A run's root span, in the trace whose id is the run's id.
fn run_root(
    state: &State,
    name: impl Into<Cow<'static, str>>,
    run_id: &str,
    links: Vec<Link>,
    attributes: impl FnOnce(&mut Vec<KeyValue>),
) -> Span {
    let hex: String = run_id.chars().filter(|c| *c != '-').collect();
    if let Ok(id) = TraceId::from_hex(&hex)
        && id != TraceId::INVALID
    {
        NEXT_TRACE_ID.with(|n| n.set(Some(id)));
    }
    let span = start_under(
        state,
        &Context::new(),
        name,
        SpanKind::Internal,
        links,
        attributes,
    );
    NEXT_TRACE_ID.with(|n| n.set(None));
    span
}

thread_local! {
    /// The trace id the next root span takes (set just before it is started).
    static NEXT_TRACE_ID: std::cell::Cell<Option<TraceId>> = const { std::cell::Cell::new(None) };
}

/// Random ids, except for a root span whose trace id was chosen (a run's).
#[derive(Debug)]
pub(crate) struct Ids(opentelemetry_sdk::trace::RandomIdGenerator);

impl Ids {
    pub(crate) fn new() -> Ids {
        Ids(opentelemetry_sdk::trace::RandomIdGenerator::default())
    }
}

impl opentelemetry_sdk::trace::IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE_ID
            .with(|n| n.take())
            .unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> opentelemetry::trace::SpanId {
        self.0.new_span_id()
    }
}

/// Starts the server span of an HTTP request, continuing the caller's trace when its
/// headers carry a valid `traceparent`. Returns the span and whether it continued one.
pub fn start_request(
    method: &str,
    headers: &http::HeaderMap,
    attributes: impl FnOnce(&mut Vec<KeyValue>),
) -> (Span, bool) {
    let Some(state) = STATE.get() else {
        return (Span::none(), false);
    };
    let parent = TraceContextPropagator::new().extract(&HeaderReader(headers));
    let continued = parent.span().span_context().is_valid();
    let mut attrs = Vec::new();
    attributes(&mut attrs);
    let span = state
        .http
        .span_builder(method.to_string())
        .with_kind(SpanKind::Server)
        .with_attributes(attrs)
        .start_with_context(&state.http, &parent);
    (
        Span::of(parent.with_span(span).with_value(Layer::Http)),
        continued,
    )
}

/// Runs `fut` with `span` current (a no-op when there is no span).
pub fn instrument<F>(fut: F, span: &Span) -> Either<opentelemetry::context::WithContext<F>, F> {
    match &span.cx {
        Some(cx) => Either::Left(fut.with_context(cx.clone())),
        None => Either::Right(fut),
    }
}

/// Adds the current span's `traceparent` (and `tracestate`) to outgoing request headers.
pub fn inject(headers: &mut http::HeaderMap) {
    if STATE.get().is_none() {
        return;
    }
    let cx = Context::current();
    if !cx.span().span_context().is_valid() {
        return;
    }
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderWriter(headers));
}

/// The current span's `traceparent`, for work that continues elsewhere.
pub fn current_traceparent() -> Option<String> {
    current().traceparent()
}

struct HeaderReader<'a>(&'a http::HeaderMap);

impl Extractor for HeaderReader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

struct HeaderWriter<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderWriter<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// `00-{trace id}-{span id}-{flags}`.
pub fn format_traceparent(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// A W3C `traceparent` as a remote span context (`None` when it is not valid).
pub fn parse_traceparent(tp: &str) -> Option<SpanContext> {
    let mut headers = http::HeaderMap::new();
    headers.insert("traceparent", http::HeaderValue::from_str(tp).ok()?);
    let cx = TraceContextPropagator::new().extract(&HeaderReader(&headers));
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_round_trip_and_invalid_ones_are_refused() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = parse_traceparent(tp).unwrap();
        assert!(sc.is_remote());
        assert_eq!(format_traceparent(&sc), tp);
        assert!(
            parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none()
        );
        assert!(parse_traceparent("garbage").is_none());
        assert!(
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7").is_none()
        );
    }

    #[test]
    fn everything_is_a_no_op_while_tracing_is_off() {
        // Nothing in this test binary installs tracing.
        assert!(!enabled());
        let s = start(
            || -> &'static str { panic!("name built while off") },
            SpanKind::Internal,
            |_| panic!("attributes built while off"),
        );
        assert!(!s.is_recording());
        s.set_with(|_| panic!("attributes built while off"));
        s.end();
        assert_eq!(s.traceparent(), None);
        let mut h = http::HeaderMap::new();
        inject(&mut h);
        assert!(h.is_empty());
        let (r, continued) = start_request("GET", &h, |_| panic!("built while off"));
        assert!(r.context().is_none() && !continued);
    }
}
