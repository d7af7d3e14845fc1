//! The process's metric families (Prometheus), recorded from every crate and rendered by
//! the server's `/metrics` route.
//!
//! Names follow Prometheus' conventions (`fawn_` prefix, base units in the name, `_total` on
//! counters) and every label set is bounded: route templates, model and tool names from the
//! configuration, status classes — never ids or raw paths. Labels that come from outside
//! the configuration (tool names a model asked for, model names) go through a
//! [`BoundedLabel`], which maps values beyond its capacity to `other`.
//!
//! The encoder is the `prometheus` crate's (text format 0.0.4); the JSON form is built from
//! the same gathered families, so both answer the same figures.

use prometheus::core::Collector;
use prometheus::proto::{MetricFamily, MetricType};
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::sync::{Arc, LazyLock, RwLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Metric handles callers may keep (a handle resolved once skips the label lookup).
pub use prometheus::{Histogram as HistogramHandle, IntCounter as CounterHandle};

/// The content type of the text format.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const HTTP_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const RUN_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];
const FIRST_EVENT_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
const MODEL_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];
const TTFT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const TOOL_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
const STORE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];
const LAG_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Every metric family Fawn exports.
pub struct Metrics {
    registry: Registry,
    started: Instant,
    start_time: f64,

    // HTTP
    pub http_requests: IntCounterVec,
    pub http_duration: HistogramVec,
    pub sse_open: IntGauge,
    pub ws_open: IntGauge,

    // Runs
    pub runs_created: IntCounter,
    pub runs_finished: IntCounterVec,
    pub runs_pending: IntGauge,
    pub runs_running: IntGauge,
    pub runs_pending_oldest: Gauge,
    pub runs_executing: IntGauge,
    pub runs_executing_max: IntGauge,
    pub run_duration: HistogramVec,
    pub run_first_event: Histogram,
    pub run_attempts: IntCounterVec,
    pub runs_recovered: IntCounter,
    pub run_cancels: IntCounterVec,

    // Model calls
    pub model_calls: IntCounterVec,
    pub model_duration: HistogramVec,
    pub model_ttft: HistogramVec,
    pub model_tokens: IntCounterVec,
    pub model_retries: IntCounterVec,

    // Tools and the sandbox
    pub tool_calls: IntCounterVec,
    pub tool_duration: HistogramVec,
    pub sandbox_commands: IntCounterVec,
    pub sandbox_duration: Histogram,
    pub sandbox_limits: IntCounterVec,

    // Storage
    pub db_pool: IntGaugeVec,
    pub db_pool_max: IntGauge,
    pub db_pool_waiting: IntGauge,
    pub checkpoint_writes: IntCounter,
    pub checkpoint_write_duration: Histogram,
    pub checkpoint_bytes: IntCounter,
    pub db_size: IntGaugeVec,
    pub db_maintenance: IntCounterVec,
    pub db_pages_vacuumed: IntCounter,
    pub retention_sweeps: IntCounterVec,
    pub retention_removed: IntCounterVec,

    // The event bus between nodes
    pub bus_relayed: IntCounterVec,
    pub bus_lag: HistogramVec,
    pub bus_cancels: IntCounter,

    // Trace export
    pub spans_exported: IntCounterVec,
    pub spans_dropped: IntCounterVec,
    pub export_failures: IntCounterVec,

    // Process
    pub resident_memory: IntGauge,
    pub open_fds: IntGauge,
    pub process_start: Gauge,
    pub uptime: Gauge,
    pub build_info: IntGaugeVec,

    /// Bounded label values of the families whose labels come from configuration or from
    /// a model's answer.
    pub model_label: BoundedLabel,
    pub tool_label: BoundedLabel,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

fn hopts(name: &str, help: &str, buckets: &[f64]) -> HistogramOpts {
    HistogramOpts::new(name, help).buckets(buckets.to_vec())
}

/// Registers `c` (a name clash is a programming error that the unit tests catch; at run
/// time it only means the family is missing from the output, never a failed request).
fn reg<C: Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    if let Err(e) = r.register(Box::new(c.clone())) {
        tracing::error!(error = %e, "a metric family could not be registered");
    }
    c
}

impl Metrics {
    // The families are built from static names, label lists and bucket lists, which the
    // unit tests build once; a constructor error there is a programming error.
    #[allow(clippy::expect_used)]
    fn new() -> Metrics {
        let r = Registry::new();
        let counter =
            |name: &str, help: &str| reg(&r, IntCounter::new(name, help).expect("static counter"));
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            reg(
                &r,
                IntCounterVec::new(Opts::new(name, help), labels).expect("static counter vec"),
            )
        };
        let gauge = |name: &str, help: &str| reg(&r, IntGauge::new(name, help).expect("gauge"));
        let fgauge = |name: &str, help: &str| reg(&r, Gauge::new(name, help).expect("gauge"));
        let hist = |name: &str, help: &str, buckets: &[f64]| {
            reg(
                &r,
                Histogram::with_opts(hopts(name, help, buckets)).expect("static histogram"),
            )
        };
        let hist_vec = |name: &str, help: &str, labels: &[&str], buckets: &[f64]| {
            reg(
                &r,
                HistogramVec::new(hopts(name, help, buckets), labels)
                    .expect("static histogram vec"),
            )
        };
        let start_time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let m = Metrics {
            started: Instant::now(),
            start_time,
            http_requests: counter_vec(
                "fawn_http_requests_total",
                "HTTP requests answered, by method, route template and status class.",
                &["method", "route", "status"],
            ),
            http_duration: hist_vec(
                "fawn_http_request_duration_seconds",
                "Time from a request's arrival to its response head (an SSE stream's lifetime is not counted), by method and route template.",
                &["method", "route"],
                HTTP_BUCKETS,
            ),
            sse_open: gauge(
                "fawn_http_sse_streams_open",
                "Server-sent event streams open now.",
            ),
            ws_open: gauge(
                "fawn_http_websockets_open",
                "WebSocket connections (the thread-centric streaming protocol) open now.",
            ),
            runs_created: counter("fawn_runs_created_total", "Runs created on this node."),
            runs_finished: counter_vec(
                "fawn_runs_finished_total",
                "Runs this node finished, by status (success, error, interrupted, timeout).",
                &["status"],
            ),
            runs_pending: gauge(
                "fawn_runs_pending",
                "Runs waiting in the queue now (the whole database, every node).",
            ),
            runs_running: gauge(
                "fawn_runs_running",
                "Runs claimed by a worker now (the whole database, every node).",
            ),
            runs_pending_oldest: fgauge(
                "fawn_runs_pending_oldest_age_seconds",
                "How long the oldest pending run has been waiting.",
            ),
            runs_executing: gauge("fawn_runs_executing", "Runs executing on this node now."),
            runs_executing_max: gauge(
                "fawn_runs_executing_max",
                "How many runs this node executes at once at most.",
            ),
            run_duration: hist_vec(
                "fawn_run_duration_seconds",
                "Run durations on this node, from claim to finish, by status.",
                &["status"],
                RUN_BUCKETS,
            ),
            run_first_event: hist(
                "fawn_run_first_event_seconds",
                "Time from a run's creation to its first streamed event after `metadata`.",
                FIRST_EVENT_BUCKETS,
            ),
            run_attempts: counter_vec(
                "fawn_run_attempts_total",
                "Run attempts started on this node: first, or resumed after a crash, a release or an expired lease.",
                &["kind"],
            ),
            runs_recovered: counter(
                "fawn_runs_recovered_total",
                "Runs this node's reaper took back from a worker whose lease expired.",
            ),
            run_cancels: counter_vec(
                "fawn_run_cancels_total",
                "Runs cancelled through this node, by action (interrupt, rollback).",
                &["action"],
            ),
            model_calls: counter_vec(
                "fawn_model_calls_total",
                "Model calls by configured model and outcome (ok, or the error kind).",
                &["model", "outcome"],
            ),
            model_duration: hist_vec(
                "fawn_model_call_duration_seconds",
                "Model call durations, from the request to the stream's end, by model.",
                &["model"],
                MODEL_BUCKETS,
            ),
            model_ttft: hist_vec(
                "fawn_model_time_to_first_token_seconds",
                "Time from a model request to its first streamed content, by model.",
                &["model"],
                TTFT_BUCKETS,
            ),
            model_tokens: counter_vec(
                "fawn_model_tokens_total",
                "Tokens by model and direction (input, output); source says whether the provider reported them or Fawn estimated them.",
                &["model", "direction", "source"],
            ),
            model_retries: counter_vec(
                "fawn_model_retries_total",
                "Model call retries by model and the error that caused them.",
                &["model", "cause"],
            ),
            tool_calls: counter_vec(
                "fawn_tool_calls_total",
                "Tool calls by tool and outcome (ok, error, cancelled).",
                &["tool", "outcome"],
            ),
            tool_duration: hist_vec(
                "fawn_tool_call_duration_seconds",
                "Tool call durations by tool.",
                &["tool"],
                TOOL_BUCKETS,
            ),
            sandbox_commands: counter_vec(
                "fawn_sandbox_commands_total",
                "Sandbox (bash) commands by how they ended: ok, nonzero, signal, timeout, error.",
                &["exit"],
            ),
            sandbox_duration: hist(
                "fawn_sandbox_command_duration_seconds",
                "Sandbox (bash) command durations.",
                TOOL_BUCKETS,
            ),
            sandbox_limits: counter_vec(
                "fawn_sandbox_limits_hit_total",
                "Sandbox limits commands ran into: timeout, cpu, file_size, memory, output (captured output cut), quota (workspace quota).",
                &["limit"],
            ),
            db_pool: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "fawn_db_pool_connections",
                        "Database connections by state (open, idle, in_use).",
                    ),
                    &["state"],
                )
                .expect("static gauge vec"),
            ),
            db_pool_max: gauge(
                "fawn_db_pool_max_connections",
                "The most connections the database pool opens.",
            ),
            db_pool_waiting: gauge(
                "fawn_db_pool_waiting",
                "Callers waiting for a database connection (SQLite: for the writer).",
            ),
            checkpoint_writes: counter(
                "fawn_checkpoint_writes_total",
                "Checkpoints written by this node.",
            ),
            checkpoint_write_duration: hist(
                "fawn_checkpoint_write_duration_seconds",
                "Time to write a checkpoint, or a chain of them, to the database.",
                STORE_BUCKETS,
            ),
            checkpoint_bytes: counter(
                "fawn_checkpoint_written_bytes_total",
                "Bytes of checkpoint data (state, writes, metadata as stored) written by this node.",
            ),
            db_size: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "fawn_db_size_bytes",
                        "SQLite files on disk by file (database, wal).",
                    ),
                    &["file"],
                )
                .expect("static gauge vec"),
            ),
            db_maintenance: counter_vec(
                "fawn_db_maintenance_total",
                "SQLite idle maintenance steps by task (wal_truncate, incremental_vacuum).",
                &["task"],
            ),
            db_pages_vacuumed: counter(
                "fawn_db_pages_vacuumed_total",
                "Free SQLite pages handed back to the file system by incremental vacuum.",
            ),
            retention_sweeps: counter_vec(
                "fawn_retention_sweeps_total",
                "Retention sweeps by outcome (done; skipped: another node holds the lease; error).",
                &["outcome"],
            ),
            retention_removed: counter_vec(
                "fawn_retention_removed_total",
                "What retention sweeps removed (checkpoints, runs, run_events, threads) or rewrote (rebased, materialized).",
                &["what"],
            ),
            bus_relayed: counter_vec(
                "fawn_bus_events_relayed_total",
                "Events of runs executing on another node relayed to this node's streams, by bus.",
                &["bus"],
            ),
            bus_lag: hist_vec(
                "fawn_bus_relay_lag_seconds",
                "Time from an event's publication on the executing node to its relay here, by bus.",
                &["bus"],
                LAG_BUCKETS,
            ),
            bus_cancels: counter(
                "fawn_bus_cancels_delivered_total",
                "Cancellations announced by another node that stopped a run executing here.",
            ),
            spans_exported: counter_vec(
                "fawn_trace_spans_exported_total",
                "Spans accepted by a trace destination.",
                &["destination"],
            ),
            spans_dropped: counter_vec(
                "fawn_trace_spans_dropped_total",
                "Spans dropped because a destination's export queue was full.",
                &["destination"],
            ),
            export_failures: counter_vec(
                "fawn_trace_export_failures_total",
                "Span batches a destination failed to accept (their spans are lost).",
                &["destination"],
            ),
            resident_memory: gauge(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
            ),
            open_fds: gauge("process_open_fds", "Number of open file descriptors."),
            process_start: fgauge(
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds.",
            ),
            uptime: fgauge("fawn_uptime_seconds", "Seconds since the process started."),
            build_info: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "fawn_build_info",
                        "Always 1: the version, the store backend and the event bus of this node.",
                    ),
                    &["version", "store", "bus"],
                )
                .expect("static gauge vec"),
            ),
            model_label: BoundedLabel::new(256),
            tool_label: BoundedLabel::new(512),
            registry: r,
        };
        m.process_start.set(start_time);
        // Families whose label values are known up front start at zero, so dashboards and
        // alerts see them before the first event.
        for status in ["success", "error", "interrupted", "timeout"] {
            m.runs_finished.with_label_values(&[status]);
            m.run_duration.with_label_values(&[status]);
        }
        for kind in ["first", "resumed"] {
            m.run_attempts.with_label_values(&[kind]);
        }
        for action in ["interrupt", "rollback"] {
            m.run_cancels.with_label_values(&[action]);
        }
        for exit in ["ok", "nonzero", "signal", "timeout", "error"] {
            m.sandbox_commands.with_label_values(&[exit]);
        }
        for limit in ["timeout", "cpu", "file_size", "memory", "output", "quota"] {
            m.sandbox_limits.with_label_values(&[limit]);
        }
        for state in ["open", "idle", "in_use"] {
            m.db_pool.with_label_values(&[state]);
        }
        for task in ["wal_truncate", "incremental_vacuum"] {
            m.db_maintenance.with_label_values(&[task]);
        }
        for outcome in ["done", "skipped", "error"] {
            m.retention_sweeps.with_label_values(&[outcome]);
        }
        for what in [
            "checkpoints",
            "rebased",
            "materialized",
            "runs",
            "run_events",
            "threads",
        ] {
            m.retention_removed.with_label_values(&[what]);
        }
        m
    }

    /// Records what describes this node (`fawn_build_info`).
    pub fn set_build_info(&self, version: &str, store: &str, bus: &str) {
        self.build_info.reset();
        self.build_info
            .with_label_values(&[version, store, bus])
            .set(1);
    }

    /// Reads the process figures (memory, descriptors, uptime) now.
    pub fn refresh_process(&self) {
        self.uptime.set(self.started.elapsed().as_secs_f64());
        self.process_start.set(self.start_time);
        if let Some(rss) = resident_bytes() {
            self.resident_memory.set(rss);
        }
        if let Some(n) = open_fds() {
            self.open_fds.set(n);
        }
    }

    /// Every family, as gathered now.
    pub fn gather(&self) -> Vec<MetricFamily> {
        self.refresh_process();
        self.registry.gather()
    }

    /// The Prometheus text format.
    pub fn render_text(&self) -> String {
        let families = self.gather();
        let mut buf = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        String::from_utf8(buf).unwrap_or_default()
    }

    /// The same figures as JSON: `{"metrics": {family: {type, help, samples}}}`.
    pub fn render_json(&self) -> Value {
        families_json(&self.gather())
    }

    /// A run finished with `status` after `seconds` (claim to finish).
    pub fn run_finished(&self, status: &str, seconds: f64) {
        self.runs_finished.with_label_values(&[status]).inc();
        self.run_duration
            .with_label_values(&[status])
            .observe(seconds);
    }

    /// An HTTP response: `route` is the matched template (or `unmatched`).
    pub fn http_response(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let class = match status {
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        self.http_requests
            .with_label_values(&[method, route, class])
            .inc();
        self.http_duration
            .with_label_values(&[method, route])
            .observe(seconds);
    }

    /// A tool call ended; `tool` is a value of [`Metrics::tool_label`].
    pub fn tool_call(&self, tool: &str, outcome: &str, seconds: f64) {
        self.tool_calls.with_label_values(&[tool, outcome]).inc();
        self.tool_duration
            .with_label_values(&[tool])
            .observe(seconds);
    }
}

/// Counts one open thing (a stream, a socket) on a gauge while it lives.
pub struct Open(&'static IntGauge);

impl Open {
    pub fn new(gauge: &'static IntGauge) -> Open {
        gauge.inc();
        Open(gauge)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl std::fmt::Debug for Open {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Open")
    }
}

/// A label whose values come from outside the code (configured model names, tool names a
/// model asked for): the first `capacity` distinct values are kept, later ones become
/// `other`, so a misbehaving model cannot grow a family without bound.
pub struct BoundedLabel {
    seen: RwLock<HashSet<Arc<str>>>,
    capacity: usize,
}

impl std::fmt::Debug for BoundedLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundedLabel")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// What a value past a [`BoundedLabel`]'s capacity becomes.
pub const OTHER: &str = "other";

impl BoundedLabel {
    pub fn new(capacity: usize) -> BoundedLabel {
        BoundedLabel {
            seen: RwLock::new(HashSet::new()),
            capacity,
        }
    }

    /// The label value to record for `value`.
    pub fn get(&self, value: &str) -> Arc<str> {
        {
            let seen = match self.seen.read() {
                Ok(s) => s,
                Err(p) => p.into_inner(),
            };
            if let Some(v) = seen.get(value) {
                return v.clone();
            }
            if seen.len() >= self.capacity {
                return Arc::from(OTHER);
            }
        }
        let mut seen = match self.seen.write() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if seen.len() >= self.capacity {
            return Arc::from(OTHER);
        }
        let v: Arc<str> = Arc::from(value);
        seen.insert(v.clone());
        v
    }
}

fn resident_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: i64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib.saturating_mul(1024))
}

fn open_fds() -> Option<i64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count();
    // The directory handle being read is one of them.
    Some(i64::try_from(n.saturating_sub(1)).unwrap_or(i64::MAX))
}

fn type_name(t: MetricType) -> &'static str {
    match t {
        MetricType::COUNTER => "counter",
        MetricType::GAUGE => "gauge",
        MetricType::HISTOGRAM => "histogram",
        MetricType::SUMMARY => "summary",
        MetricType::UNTYPED => "untyped",
    }
}

/// JSON numbers cannot hold NaN or infinities; those become strings as Prometheus writes
/// them.
fn number(v: f64) -> Value {
    if v.is_finite() {
        json!(v)
    } else if v.is_nan() {
        json!("NaN")
    } else if v > 0.0 {
        json!("+Inf")
    } else {
        json!("-Inf")
    }
}

/// Gathered families as JSON, one object per family.
pub fn families_json(families: &[MetricFamily]) -> Value {
    let mut out = Map::new();
    for f in families {
        let mut samples = Vec::new();
        for m in f.get_metric() {
            let labels: Map<String, Value> = m
                .get_label()
                .iter()
                .map(|l| (l.name().to_string(), json!(l.value())))
                .collect();
            let mut sample = Map::new();
            sample.insert("labels".into(), Value::Object(labels));
            match f.get_field_type() {
                MetricType::COUNTER => {
                    sample.insert("value".into(), number(m.get_counter().get_value()));
                }
                MetricType::GAUGE => {
                    sample.insert("value".into(), number(m.get_gauge().get_value()));
                }
                MetricType::HISTOGRAM => {
                    let h = m.get_histogram();
                    sample.insert("count".into(), json!(h.get_sample_count()));
                    sample.insert("sum".into(), number(h.get_sample_sum()));
                    let buckets: Vec<Value> = h
                        .get_bucket()
                        .iter()
                        .map(|b| json!({"le": number(b.upper_bound()), "count": b.cumulative_count()}))
                        .collect();
                    sample.insert("buckets".into(), Value::Array(buckets));
                }
                MetricType::SUMMARY => {
                    let s = m.get_summary();
                    sample.insert("count".into(), json!(s.sample_count()));
                    sample.insert("sum".into(), number(s.sample_sum()));
                }
                // Fawn registers no untyped or summary families; these are only labelled.
                MetricType::UNTYPED => {}
            }
            samples.push(Value::Object(sample));
        }
        out.insert(
            f.name().to_string(),
            json!({
                "type": type_name(f.get_field_type()),
                "help": f.help(),
                "samples": samples,
            }),
        );
    }
    json!({ "metrics": out })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_builds_and_renders() {
        let m = Metrics::new();
        m.set_build_info("0.1.0", "sqlite", "local");
        m.run_finished("success", 0.5);
        m.http_response("GET", "/ok", 200, 0.001);
        m.tool_call("ls", "ok", 0.01);
        let text = m.render_text();
        for family in [
            "fawn_http_requests_total",
            "fawn_runs_finished_total",
            "fawn_run_duration_seconds_bucket",
            "fawn_build_info",
            "process_resident_memory_bytes",
            "fawn_tool_calls_total",
        ] {
            assert!(text.contains(family), "{family} missing from:\n{text}");
        }
        // Families with known label values are there before their first event.
        assert!(text.contains("fawn_runs_finished_total{status=\"timeout\"} 0"));
        assert!(text.contains("# HELP fawn_sandbox_limits_hit_total "));
        assert!(text.contains("fawn_db_maintenance_total{task=\"wal_truncate\"} 0"));
        assert!(text.contains("fawn_retention_removed_total{what=\"checkpoints\"} 0"));
        let json = m.render_json();
        let finished = json["metrics"]["fawn_runs_finished_total"]["samples"]
            .as_array()
            .unwrap();
        let success = finished
            .iter()
            .find(|s| s["labels"]["status"] == "success")
            .unwrap();
        assert_eq!(success["value"], json!(1.0));
        assert_eq!(
            json["metrics"]["fawn_runs_finished_total"]["type"],
            "counter"
        );
    }

    #[test]
    fn bounded_labels_stop_growing() {
        let b = BoundedLabel::new(2);
        assert_eq!(&*b.get("a"), "a");
        assert_eq!(&*b.get("b"), "b");
        assert_eq!(&*b.get("c"), OTHER);
        assert_eq!(&*b.get("a"), "a");
    }
}
