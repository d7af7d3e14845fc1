#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Export end to end, in one process: spans made through the crate's API reach an OTLP/HTTP
//! receiver (decoded with the OTLP protobuf types), with their parents, kinds and headers,
//! and each destination gets what it should. Only one test installs tracing (it is
//! process-wide).

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use fawn_telemetry::trace::{self, Kind, RunParent, attrs, export};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span as PSpan;
use prost::Message;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Received {
    /// (path, headers, spans)
    batches: Vec<(String, HeaderMap, Vec<PSpan>)>,
}

type Shared = Arc<Mutex<Received>>;

async fn receive(
    State(s): State<Shared>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> &'static str {
    let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
    let spans: Vec<PSpan> = req
        .resource_spans
        .into_iter()
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect();
    s.lock()
        .unwrap()
        .batches
        .push((uri.path().to_string(), headers, spans));
    ""
}

fn attr<'a>(
    s: &'a PSpan,
    key: &str,
) -> Option<&'a opentelemetry_proto::tonic::common::v1::any_value::Value> {
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn string_attr(s: &PSpan, key: &str) -> Option<String> {
    match attr(s, key) {
        Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(v)) => {
            Some(v.clone())
        }
        _ => None,
    }
}

#[tokio::test]
async fn spans_reach_every_destination_with_their_parents_and_headers() {
    let received: Shared = Arc::default();
    let app = Router::new()
        .route("/v1/traces", post(receive))
        .route("/otel/v1/traces", post(receive))
        .route("/api/public/otel/v1/traces", post(receive))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let vars: Vec<(String, String)> = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), base.clone()),
        ("OTEL_EXPORTER_OTLP_HEADERS".into(), "x-collector=c1".into()),
        ("LANGSMITH_TRACING".into(), "true".into()),
        ("LANGSMITH_API_KEY".into(), "ls-secret".into()),
        ("LANGSMITH_ENDPOINT".into(), base.clone()),
        ("LANGSMITH_PROJECT".into(), "p1".into()),
        ("LANGFUSE_TRACING".into(), "true".into()),
        ("LANGFUSE_PUBLIC_KEY".into(), "pk".into()),
        ("LANGFUSE_SECRET_KEY".into(), "sk".into()),
        ("LANGFUSE_BASE_URL".into(), base.clone()),
        ("OTEL_BSP_SCHEDULE_DELAY".into(), "50".into()),
    ];
    let config = export::TraceConfig::from_vars(&|k| {
        vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })
    .unwrap();
    assert!(trace::install(&config).unwrap());
    assert!(trace::enabled() && trace::capture_inputs());

    // A request that continues the caller's trace, a run under it, a model call in the run.
    let mut h = http::HeaderMap::new();
    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    h.insert("traceparent", caller.parse().unwrap());
    let (request, continued) = trace::start_request("POST", &h, |a| {
        a.push(trace::Attr::new(attrs::HTTP_ROUTE, "/runs/wait"))
    });
    assert!(continued);
    request.rename("POST /runs/wait".into());
    let tp = request.traceparent().unwrap();
    let run_id = "0199a4c2-8d2e-7a31-9c55-1b2d3e4f5a6b";
    let run = trace::start_run(
        || "run lead_agent",
        run_id,
        &RunParent::Child(tp.clone()),
        |a| attrs::SpanKind::Agent.attrs(a),
    );
    let model = trace::instrument(
        async {
            let m = trace::start(
                || "chat demo",
                Kind::Client,
                |a| attrs::SpanKind::Llm.attrs(a),
            );
            // An outgoing request carries the model span's traceparent.
            let mut out = http::HeaderMap::new();
            trace::instrument(async { trace::inject(&mut out) }, &m).await;
            m.end();
            (m, out)
        },
        &run,
    );
    let (model, out) = model.await;
    assert_eq!(
        out.get("traceparent").unwrap().to_str().unwrap(),
        model.traceparent().unwrap()
    );
    run.end();
    request.end();
    // A run of no request has its run id as trace id.
    let lone = trace::start_run(|| "run lone", run_id, &RunParent::None, |_| {});
    assert_eq!(lone.trace_id().unwrap(), run_id.replace('-', ""));
    lone.end();

    trace::shutdown(Duration::from_secs(5)).await;
    let got = received.lock().unwrap();
    let by_path = |p: &str| -> Vec<&(String, HeaderMap, Vec<PSpan>)> {
        got.batches
            .iter()
            .filter(|(path, _, _)| path == p)
            .collect()
    };
    let spans_at = |p: &str| -> Vec<PSpan> {
        by_path(p)
            .iter()
            .flat_map(|(_, _, s)| s.iter().cloned())
            .collect()
    };

    // The collector: all four spans, parents linked.
    let otlp = spans_at("/v1/traces");
    assert_eq!(otlp.len(), 4, "{otlp:?}");
    let find =
        |spans: &[PSpan], name: &str| spans.iter().find(|s| s.name == name).cloned().unwrap();
    let req = find(&otlp, "POST /runs/wait");
    assert_eq!(hex(&req.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(hex(&req.parent_span_id), "00f067aa0ba902b7");
    let run_s = find(&otlp, "run lead_agent");
    assert_eq!(run_s.parent_span_id, req.span_id);
    let model_s = find(&otlp, "chat demo");
    assert_eq!(model_s.parent_span_id, run_s.span_id);
    assert_eq!(
        string_attr(&model_s, attrs::OI_SPAN_KIND).as_deref(),
        Some("LLM")
    );
    for (_, headers, _) in by_path("/v1/traces") {
        assert_eq!(headers.get("x-collector").unwrap(), "c1");
        assert!(headers.get("x-api-key").is_none());
    }

    // LangSmith: no request span, the run is a root, its own headers only.
    for p in ["/otel/v1/traces", "/api/public/otel/v1/traces"] {
        let spans = spans_at(p);
        assert_eq!(spans.len(), 3, "{p}: {spans:?}");
        assert!(spans.iter().all(|s| s.name != "POST /runs/wait"));
        let r = find(&spans, "run lead_agent");
        assert!(r.parent_span_id.is_empty(), "{p}: the run is a root");
        assert_eq!(find(&spans, "chat demo").parent_span_id, r.span_id);
    }
    for (_, headers, _) in by_path("/otel/v1/traces") {
        assert_eq!(headers.get("x-api-key").unwrap(), "ls-secret");
        assert_eq!(headers.get("langsmith-project").unwrap(), "p1");
        assert!(
            headers.get("x-collector").is_none(),
            "no other destination's headers"
        );
        assert!(headers.get("authorization").is_none());
    }
    for (_, headers, _) in by_path("/api/public/otel/v1/traces") {
        assert_eq!(headers.get("authorization").unwrap(), "Basic cGs6c2s=");
        assert!(headers.get("x-api-key").is_none());
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
