//! Where spans go, read from the environment variables each destination's users already
//! set, and how they get there without ever holding up a run.
//!
//! * **Any OTLP collector** (Jaeger, Phoenix, Tempo, an OpenTelemetry Collector, …):
//!   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as it is) or `OTEL_EXPORTER_OTLP_ENDPOINT`
//!   (`/v1/traces` appended), `OTEL_EXPORTER_OTLP_(TRACES_)HEADERS`, over HTTP with protobuf
//!   (`OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL` may only say `http/protobuf`);
//!   `OTEL_TRACES_EXPORTER=none` turns it off. It receives every span.
//! * **LangSmith**, as DeerFlow reads it: `LANGSMITH_TRACING` (or `LANGCHAIN_TRACING_V2`,
//!   `LANGCHAIN_TRACING`), `LANGSMITH_API_KEY` (or `LANGCHAIN_API_KEY`),
//!   `LANGSMITH_ENDPOINT` (or `LANGCHAIN_ENDPOINT`, default `https://api.smith.langchain.com`),
//!   `LANGSMITH_PROJECT` (or `LANGCHAIN_PROJECT`, default `deer-flow`),
//!   `LANGSMITH_WORKSPACE_ID`: spans go to `{endpoint}/otel/v1/traces` with `x-api-key` and
//!   `Langsmith-Project`.
//! * **Langfuse**, as DeerFlow reads it: `LANGFUSE_TRACING`, `LANGFUSE_PUBLIC_KEY`,
//!   `LANGFUSE_SECRET_KEY`, `LANGFUSE_BASE_URL` (default `https://cloud.langfuse.com`):
//!   spans go to `{base}/api/public/otel/v1/traces` with basic auth.
//!
//! A destination that is enabled but incomplete is an error naming what is missing (DeerFlow
//! refuses to start the same way). LangSmith and Langfuse receive only the agent scope
//! (runs, model and tool calls…), with a run's parent request span cut off, so each run is
//! one trace there; the OTLP collector receives request spans too.
//!
//! Each destination has its own bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`, default 2048) fed
//! without waiting when a span ends: a full queue drops the span and counts it
//! (`fawn_trace_spans_dropped_total`). One task per destination sends batches
//! (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, every `OTEL_BSP_SCHEDULE_DELAY` ms) through the
//! `opentelemetry-otlp` exporter and our own HTTP client, which sends exactly the
//! destination's headers (the exporter would otherwise add `OTEL_EXPORTER_OTLP_HEADERS`
//! to every destination, handing one vendor's key to another). A dead destination costs
//! failed batches (`fawn_trace_export_failures_total`), never a slower run.
//!
//! Sampling follows `OTEL_TRACES_SAMPLER(_ARG)`; the resource follows `OTEL_SERVICE_NAME`
//! (default `fawn`) and `OTEL_RESOURCE_ATTRIBUTES`. `OTEL_SDK_DISABLED=true` turns all
//! tracing off.

use super::InstallError;
use crate::metrics::metrics;
use base64::Engine as _;
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanId;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter, SpanProcessor};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

/// One place spans are sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Destination {
    /// `otlp`, `langsmith` or `langfuse`.
    pub name: &'static str,
    /// The full traces URL.
    pub endpoint: String,
    /// Exactly the headers sent (credentials included).
    pub headers: Vec<(String, String)>,
    /// Only the agent scope, with runs as roots (LLM observability tools).
    pub agent_only: bool,
}

impl std::fmt::Debug for Destination {
    // Headers carry credentials: only their names are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Destination")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("agent_only", &self.agent_only)
            .finish()
    }
}

/// Tracing as the environment configures it.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceConfig {
    pub destinations: Vec<Destination>,
    /// Prompts, tool arguments and run inputs go into spans.
    pub capture_inputs: bool,
    /// Answers, tool results and final values go into spans.
    pub capture_outputs: bool,
    pub service_name: String,
    pub queue_size: usize,
    pub batch_size: usize,
    pub schedule_delay: Duration,
    pub export_timeout: Duration,
}

/// A configuration problem, naming the variable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

const LANGSMITH_DEFAULT_ENDPOINT: &str = "https://api.smith.langchain.com";
const LANGSMITH_DEFAULT_PROJECT: &str = "deer-flow";
const LANGFUSE_DEFAULT_BASE: &str = "https://cloud.langfuse.com";

fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

fn falsy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "0" | "false" | "no" | "off"
    )
}

/// `k1=v1,k2=v2` with percent-encoded values (the OTLP exporter variables' format).
pub fn parse_headers(raw: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(format!("'{pair}' is not key=value"));
        };
        let key = k.trim();
        if key.is_empty() || http::HeaderName::from_bytes(key.as_bytes()).is_err() {
            return Err(format!("'{key}' is not a header name"));
        }
        let value = percent_decode(v.trim())
            .ok_or_else(|| format!("the value of '{key}' is not valid percent-encoding"))?;
        if http::HeaderValue::from_str(&value).is_err() {
            return Err(format!("the value of '{key}' is not a valid header value"));
        }
        out.push((key.to_ascii_lowercase(), value));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn checked_url(var: &str, url: &str) -> Result<String, ConfigError> {
    let ok = url.parse::<http::Uri>().ok().is_some_and(|u| {
        matches!(u.scheme_str(), Some("http") | Some("https")) && u.host().is_some()
    });
    if ok {
        Ok(url.to_string())
    } else {
        Err(ConfigError(format!("{var}: '{url}' is not an http(s) URL")))
    }
}

/// `base` with `path` appended (one slash between them).
fn join(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

fn env_usize(get: &dyn Fn(&str) -> Option<String>, var: &str, default: usize) -> usize {
    get(var)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

impl TraceConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<TraceConfig, Vec<ConfigError>> {
        TraceConfig::from_vars(&|k| std::env::var(k).ok())
    }

    /// Reads the variables through `get` (tests pass a map). Every problem is reported.
    pub fn from_vars(
        get: &dyn Fn(&str) -> Option<String>,
    ) -> Result<TraceConfig, Vec<ConfigError>> {
        let var = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let first = |ks: &[&str]| ks.iter().find_map(|k| var(k));
        let flag = |ks: &[&str]| first(ks).is_some_and(|v| truthy(&v));
        let mut errors = Vec::new();
        let mut destinations = Vec::new();
        let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| truthy(&v));

        // Any OTLP collector.
        let traces_exporter = var("OTEL_TRACES_EXPORTER").unwrap_or_else(|| "otlp".into());
        let endpoint = match (
            var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            var("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(e), _) => Some(("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", e)),
            (None, Some(e)) => Some(("OTEL_EXPORTER_OTLP_ENDPOINT", join(&e, "v1/traces"))),
            (None, None) => None,
        };
        if let Some((endpoint_var, url)) = endpoint
            && traces_exporter
                .split(',')
                .any(|e| e.trim().eq_ignore_ascii_case("otlp"))
        {
            for pvar in [
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ] {
                if let Some(p) = var(pvar) {
                    if p != "http/protobuf" {
                        errors.push(ConfigError(format!(
                            "{pvar}={p} is not supported: Fawn exports traces over OTLP/HTTP \
                             with protobuf (`http/protobuf`, usually port 4318)"
                        )));
                    }
                    break;
                }
            }
            let (hvar, raw) = match (
                var("OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
                var("OTEL_EXPORTER_OTLP_HEADERS"),
            ) {
                (Some(h), _) => ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", h),
                (None, Some(h)) => ("OTEL_EXPORTER_OTLP_HEADERS", h),
                (None, None) => ("", String::new()),
            };
            let headers = match parse_headers(&raw) {
                Ok(h) => h,
                Err(e) => {
                    errors.push(ConfigError(format!("{hvar}: {e}")));
                    Vec::new()
                }
            };
            match checked_url(endpoint_var, &url) {
                Ok(endpoint) => destinations.push(Destination {
                    name: "otlp",
                    endpoint,
                    headers,
                    agent_only: false,
                }),
                Err(e) => errors.push(e),
            }
        }

        // LangSmith.
        if flag(&[
            "LANGSMITH_TRACING",
            "LANGCHAIN_TRACING_V2",
            "LANGCHAIN_TRACING",
        ]) {
            match first(&["LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"]) {
                None => errors.push(ConfigError(
                    "LangSmith tracing is enabled (LANGSMITH_TRACING) but LANGSMITH_API_KEY \
                     (or LANGCHAIN_API_KEY) is not set"
                        .into(),
                )),
                Some(key) => {
                    let base = first(&["LANGSMITH_ENDPOINT", "LANGCHAIN_ENDPOINT"])
                        .unwrap_or_else(|| LANGSMITH_DEFAULT_ENDPOINT.into());
                    let project = first(&["LANGSMITH_PROJECT", "LANGCHAIN_PROJECT"])
                        .unwrap_or_else(|| LANGSMITH_DEFAULT_PROJECT.into());
                    let mut headers = vec![
                        ("x-api-key".to_string(), key),
                        ("langsmith-project".to_string(), project),
                    ];
                    if let Some(ws) = var("LANGSMITH_WORKSPACE_ID") {
                        headers.push(("x-tenant-id".into(), ws));
                    }
                    let bad_header = headers
                        .iter()
                        .find(|(_, v)| http::HeaderValue::from_str(v).is_err())
                        .map(|(k, _)| k.clone());
                    if let Some(k) = bad_header {
                        errors.push(ConfigError(format!(
                            "LangSmith: the value for the {k} header is not a valid header value"
                        )));
                    }
                    match checked_url("LANGSMITH_ENDPOINT", &join(&base, "otel/v1/traces")) {
                        Ok(endpoint) => destinations.push(Destination {
                            name: "langsmith",
                            endpoint,
                            headers,
                            agent_only: true,
                        }),
                        Err(e) => errors.push(e),
                    }
                }
            }
        }

        // Langfuse.
        if flag(&["LANGFUSE_TRACING"]) {
            let public = var("LANGFUSE_PUBLIC_KEY");
            let secret = var("LANGFUSE_SECRET_KEY");
            let mut missing = Vec::new();
            if public.is_none() {
                missing.push("LANGFUSE_PUBLIC_KEY");
            }
            if secret.is_none() {
                missing.push("LANGFUSE_SECRET_KEY");
            }
            if let (Some(public), Some(secret)) = (public, secret) {
                let base = var("LANGFUSE_BASE_URL").unwrap_or_else(|| LANGFUSE_DEFAULT_BASE.into());
                let auth =
                    base64::engine::general_purpose::STANDARD.encode(format!("{public}:{secret}"));
                match checked_url(
                    "LANGFUSE_BASE_URL",
                    &join(&base, "api/public/otel/v1/traces"),
                ) {
                    Ok(endpoint) => destinations.push(Destination {
                        name: "langfuse",
                        endpoint,
                        headers: vec![
                            ("authorization".into(), format!("Basic {auth}")),
                            ("x-langfuse-ingestion-version".into(), "4".into()),
                        ],
                        agent_only: true,
                    }),
                    Err(e) => errors.push(e),
                }
            } else {
                errors.push(ConfigError(format!(
                    "Langfuse tracing is enabled (LANGFUSE_TRACING) but required settings are \
                     missing: {}",
                    missing.join(", ")
                )));
            }
        }

        if !errors.is_empty() {
            return Err(errors);
        }
        if disabled {
            destinations.clear();
        }
        // Content goes into spans unless one of the variables people use to keep it out
        // says so.
        let otel_capture = var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT");
        let capture_all = !otel_capture.as_deref().is_some_and(falsy);
        let hide_inputs = var("LANGSMITH_HIDE_INPUTS").is_some_and(|v| truthy(&v));
        let hide_outputs = var("LANGSMITH_HIDE_OUTPUTS").is_some_and(|v| truthy(&v));
        let ms = |k: &str, d: u64| Duration::from_millis(env_usize(get, k, d as usize) as u64);
        Ok(TraceConfig {
            capture_inputs: !destinations.is_empty() && capture_all && !hide_inputs,
            capture_outputs: !destinations.is_empty() && capture_all && !hide_outputs,
            destinations,
            service_name: var("OTEL_SERVICE_NAME").unwrap_or_else(|| "fawn".into()),
            queue_size: env_usize(get, "OTEL_BSP_MAX_QUEUE_SIZE", 2048),
            batch_size: env_usize(get, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
            schedule_delay: ms("OTEL_BSP_SCHEDULE_DELAY", 5000),
            export_timeout: match var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
                .or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT"))
                .and_then(|v| v.parse::<u64>().ok())
            {
                Some(t) if t > 0 => Duration::from_millis(t),
                _ => Duration::from_secs(10),
            },
        })
    }

    /// Whether LangSmith is one of the destinations (`/info`'s `flags.langsmith`).
    pub fn langsmith(&self) -> bool {
        self.destinations.iter().any(|d| d.name == "langsmith")
    }
}

/// The HTTP client the OTLP exporter sends through: our reqwest client, with exactly the
/// destination's headers (plus the body's content headers).
#[derive(Debug)]
struct ExactHeaders {
    client: reqwest::Client,
    headers: http::HeaderMap,
}

#[async_trait::async_trait]
impl HttpClient for ExactHeaders {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let mut headers = self.headers.clone();
        for name in [http::header::CONTENT_TYPE, http::header::CONTENT_ENCODING] {
            if let Some(v) = parts.headers.get(&name) {
                headers.insert(name, v.clone());
            }
        }
        let url = parts.uri.to_string();
        let resp = self
            .client
            .request(parts.method, url)
            .headers(headers)
            .body(body)
            .send()
            .await?;
        let status = resp.status();
        let mut builder = Response::builder().status(status);
        if let Some(h) = builder.headers_mut() {
            *h = resp.headers().clone();
        }
        // OTLP answers are small; a huge one is cut rather than buffered.
        let bytes = resp.bytes().await?;
        let bytes = if bytes.len() > 1024 * 1024 {
            bytes.slice(..1024 * 1024)
        } else {
            bytes
        };
        Ok(builder.body(bytes)?)
    }
}

/// Feeds one destination's queue when spans end; never waits.
#[derive(Debug)]
struct QueueProcessor {
    destination: &'static str,
    agent_only: bool,
    tx: Mutex<Option<mpsc::Sender<SpanData>>>,
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, mut span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.agent_only {
            if span.instrumentation_scope.name() == super::HTTP_SCOPE {
                return;
            }
            let under_request = span
                .attributes
                .iter()
                .any(|kv| kv.key.as_str() == super::attrs::PARENT_LAYER);
            if under_request {
                span.parent_span_id = SpanId::INVALID;
                span.parent_span_is_remote = false;
            }
        }
        let tx = match self.tx.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let Some(tx) = tx else { return };
        if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(span) {
            metrics()
                .spans_dropped
                .with_label_values(&[self.destination])
                .inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        // Dropping the sender ends the export loop once it has sent what is queued.
        match self.tx.lock() {
            Ok(mut g) => *g = None,
            Err(p) => *p.into_inner() = None,
        }
        Ok(())
    }
}

/// Sends a destination's queued spans in batches until its queue closes.
async fn pump(
    destination: &'static str,
    mut rx: mpsc::Receiver<SpanData>,
    exporter: opentelemetry_otlp::SpanExporter,
    batch_size: usize,
    delay: Duration,
    timeout: Duration,
) {
    let m = metrics();
    loop {
        let Some(first) = rx.recv().await else { return };
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + delay;
        let mut closed = false;
        while batch.len() < batch_size {
            tokio::select! {
                next = rx.recv() => match next {
                    Some(s) => batch.push(s),
                    None => { closed = true; break; }
                },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        let n = batch.len() as u64;
        match tokio::time::timeout(timeout, exporter.export(batch)).await {
            Ok(Ok(())) => m.spans_exported.with_label_values(&[destination]).inc_by(n),
            Ok(Err(e)) => {
                m.export_failures.with_label_values(&[destination]).inc();
                tracing::debug!(destination, error = %e, "exporting spans failed");
            }
            Err(_) => {
                m.export_failures.with_label_values(&[destination]).inc();
                tracing::debug!(destination, "exporting spans timed out");
            }
        }
        if closed {
            // Drain what is left, one last batch at a time.
            let mut rest = Vec::new();
            while let Ok(s) = rx.try_recv() {
                rest.push(s);
            }
            if !rest.is_empty() {
                let n = rest.len() as u64;
                if let Ok(Ok(())) = tokio::time::timeout(timeout, exporter.export(rest)).await {
                    m.spans_exported.with_label_values(&[destination]).inc_by(n);
                } else {
                    m.export_failures.with_label_values(&[destination]).inc();
                }
            }
            return;
        }
    }
}

fn header_map(headers: &[(String, String)]) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (k, v) in headers {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            http::HeaderValue::from_str(v),
        ) {
            map.insert(name, value);
        }
    }
    map
}

/// The tracer provider with one queue and export task per destination.
pub(super) fn build_provider(
    config: &TraceConfig,
) -> Result<(SdkTracerProvider, Vec<tokio::task::JoinHandle<()>>), InstallError> {
    let mut resource = Resource::builder();
    resource = resource.with_service_name(config.service_name.clone());
    resource = resource.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    let resource = resource.build();
    let mut builder = SdkTracerProvider::builder()
        .with_resource(resource.clone())
        .with_id_generator(super::Ids::new());
    let mut pumps = Vec::new();
    for d in &config.destinations {
        let failed = |message: String| InstallError::Exporter {
            destination: d.name,
            message,
        };
        let client = fawn_net::client_builder()
            .timeout(config.export_timeout)
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(ExactHeaders {
                client,
                headers: header_map(&d.headers),
            })
            .with_endpoint(d.endpoint.clone())
            .with_protocol(Protocol::HttpBinary)
            .with_timeout(config.export_timeout)
            .build()
            .map_err(|e| failed(e.to_string()))?;
        exporter.set_resource(&resource);
        let (tx, rx) = mpsc::channel(config.queue_size);
        pumps.push(tokio::spawn(pump(
            d.name,
            rx,
            exporter,
            config.batch_size,
            config.schedule_delay,
            config.export_timeout,
        )));
        builder = builder.with_span_processor(QueueProcessor {
            destination: d.name,
            agent_only: d.agent_only,
            tx: Mutex::new(Some(tx)),
        });
    }
    Ok((builder.build(), pumps))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<TraceConfig, Vec<ConfigError>> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TraceConfig::from_vars(&move |k| map.get(k).cloned())
    }

    #[test]
    fn nothing_configured_means_no_destination_and_no_capture() {
        let c = cfg(&[]).unwrap();
        assert!(c.destinations.is_empty());
        assert!(!c.capture_inputs && !c.capture_outputs);
    }

    #[test]
    fn a_generic_collector_gets_its_headers_and_path() {
        let c = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-token=a%20b,other=1"),
        ])
        .unwrap();
        assert_eq!(c.destinations.len(), 1);
        let d = &c.destinations[0];
        assert_eq!(d.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(
            d.headers,
            vec![
                ("x-token".into(), "a b".into()),
                ("other".into(), "1".into())
            ]
        );
        assert!(!d.agent_only);
        assert!(c.capture_inputs && c.capture_outputs);
        // A traces endpoint is used as it is.
        let c = cfg(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom")]).unwrap();
        assert_eq!(c.destinations[0].endpoint, "http://c:4318/custom");
        let c = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ])
        .unwrap();
        assert!(c.destinations.is_empty());
    }

    #[test]
    fn langsmith_and_langfuse_read_deerflows_variables() {
        let c = cfg(&[
            ("LANGSMITH_TRACING", "true"),
            ("LANGSMITH_API_KEY", "lsv2_key"),
            ("LANGSMITH_ENDPOINT", "http://127.0.0.1:9/"),
            ("LANGSMITH_PROJECT", "proj"),
            ("LANGFUSE_TRACING", "1"),
            ("LANGFUSE_PUBLIC_KEY", "pk-lf-1"),
            ("LANGFUSE_SECRET_KEY", "sk-lf-2"),
            ("LANGFUSE_BASE_URL", "http://127.0.0.1:8"),
        ])
        .unwrap();
        assert!(c.langsmith());
        let ls = &c.destinations[0];
        assert_eq!(ls.endpoint, "http://127.0.0.1:9/otel/v1/traces");
        assert!(
            ls.headers
                .contains(&("x-api-key".into(), "lsv2_key".into()))
        );
        assert!(
            ls.headers
                .contains(&("langsmith-project".into(), "proj".into()))
        );
        let lf = &c.destinations[1];
        assert_eq!(lf.endpoint, "http://127.0.0.1:8/api/public/otel/v1/traces");
        // base64("pk-lf-1:sk-lf-2")
        assert!(
            lf.headers
                .contains(&("authorization".into(), "Basic cGstbGYtMTpzay1sZi0y".into()))
        );
        assert!(ls.agent_only && lf.agent_only);
        // Credentials never show in debug output.
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("lsv2_key") && !dbg.contains("cGstbGYt"));
        // The legacy names work, and the defaults are DeerFlow's.
        let c = cfg(&[("LANGCHAIN_TRACING_V2", "true"), ("LANGCHAIN_API_KEY", "k")]).unwrap();
        assert_eq!(
            c.destinations[0].endpoint,
            "https://api.smith.langchain.com/otel/v1/traces"
        );
        assert!(
            c.destinations[0]
                .headers
                .contains(&("langsmith-project".into(), "deer-flow".into()))
        );
    }

    #[test]
    fn incomplete_destinations_name_what_is_missing() {
        let errs = cfg(&[
            ("LANGSMITH_TRACING", "true"),
            ("LANGFUSE_TRACING", "true"),
            ("LANGFUSE_PUBLIC_KEY", "pk"),
        ])
        .unwrap_err();
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert!(text[0].contains("LANGSMITH_API_KEY"), "{text:?}");
        assert!(
            text[1].contains("LANGFUSE_SECRET_KEY") && !text[1].contains("LANGFUSE_PUBLIC_KEY"),
            "{text:?}"
        );
        let errs = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])
        .unwrap_err();
        assert!(
            errs[0]
                .to_string()
                .contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc")
        );
        let errs = cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url")]).unwrap_err();
        assert!(errs[0].to_string().contains("OTEL_EXPORTER_OTLP_ENDPOINT"));
        // Disabled flags need nothing.
        assert!(
            cfg(&[("LANGSMITH_TRACING", "false")])
                .unwrap()
                .destinations
                .is_empty()
        );
    }

    #[test]
    fn content_capture_follows_the_variables_people_set() {
        let base = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")];
        let c = cfg(&[
            base[0],
            (
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                "false",
            ),
        ])
        .unwrap();
        assert!(!c.capture_inputs && !c.capture_outputs);
        let c = cfg(&[base[0], ("LANGSMITH_HIDE_INPUTS", "true")]).unwrap();
        assert!(!c.capture_inputs && c.capture_outputs);
        let c = cfg(&[base[0], ("LANGSMITH_HIDE_OUTPUTS", "true")]).unwrap();
        assert!(c.capture_inputs && !c.capture_outputs);
        let c = cfg(&[base[0], ("OTEL_SDK_DISABLED", "true")]).unwrap();
        assert!(c.destinations.is_empty());
    }

    #[test]
    fn header_lists_are_validated() {
        assert!(parse_headers("a=1,b").is_err());
        assert!(parse_headers("bad name=1").is_err());
        assert!(parse_headers("a=%zz").is_err());
        assert_eq!(parse_headers("").unwrap(), vec![]);
    }
}
