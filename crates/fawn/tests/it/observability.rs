//! Observability of `fawn serve` as a process, configured the way its users configure it
//! (environment variables): traces reach an OTLP/HTTP receiver in this test (the protobuf
//! decoded with the OTLP types) as one tree per run, LangSmith's and Langfuse's variables
//! turn into their endpoints and headers, a dead collector costs runs nothing, JSON log
//! lines name their request, run and trace, and no secret appears in any span or log line.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use fawn_testkit::{Fault, MockLlm, Turn};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span as PSpan;
use prost::Message;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Secrets the server is given or sent; none may show up in spans or logs.
const MODEL_KEY: &str = "sk-test-SECRET-model-7f3a";
const COOKIE: &str = "cookie-SECRET-91b2";
const API_KEY: &str = "fawn_SECRETapikey0123456789";
const LANGSMITH_KEY: &str = "lsv2_SECRET_langsmith";
const LANGFUSE_SECRET: &str = "sk-lf-SECRET-langfuse";

// ------------------------------------------------------------------ the OTLP receiver

#[derive(Clone)]
struct Batch {
    path: String,
    headers: HeaderMap,
    raw: Bytes,
    spans: Vec<PSpan>,
}

#[derive(Clone, Default)]
struct Receiver {
    batches: Arc<Mutex<Vec<Batch>>>,
}

async fn receive(
    State(r): State<Receiver>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> &'static str {
    let req = ExportTraceServiceRequest::decode(body.clone()).expect("OTLP protobuf");
    let spans = req
        .resource_spans
        .into_iter()
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect();
    r.batches.lock().unwrap().push(Batch {
        path: uri.path().to_string(),
        headers,
        raw: body,
        spans,
    });
    ""
}

impl Receiver {
    async fn start() -> (Receiver, String) {
        let r = Receiver::default();
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .route("/otel/v1/traces", post(receive))
            .route("/api/public/otel/v1/traces", post(receive))
            .with_state(r.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (r, base)
    }

    fn spans_at(&self, path: &str) -> Vec<PSpan> {
        self.batches
            .lock()
            .unwrap()
            .iter()
            .filter(|b| b.path == path)
            .flat_map(|b| b.spans.clone())
            .collect()
    }

    /// Waits until `done` holds for the spans received at `path`.
    async fn wait_for(
        &self,
        path: &str,
        what: &str,
        done: impl Fn(&[PSpan]) -> bool,
    ) -> Vec<PSpan> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans_at(path);
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "never received {what} at {path}; got: {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn attr<'a>(s: &'a PSpan, key: &str) -> Option<&'a AnyValue> {
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text(s: &PSpan, key: &str) -> Option<String> {
    match attr(s, key) {
        Some(AnyValue::StringValue(v)) => Some(v.clone()),
        _ => None,
    }
}

fn int(s: &PSpan, key: &str) -> Option<i64> {
    match attr(s, key) {
        Some(AnyValue::IntValue(v)) => Some(*v),
        _ => None,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn named<'a>(spans: &'a [PSpan], name: &str) -> Vec<&'a PSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [PSpan], name: &str) -> &'a PSpan {
    let found = named(spans, name);
    assert_eq!(
        found.len(),
        1,
        "{name}: {:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    found[0]
}

/// A span's status code: 0 unset, 1 ok, 2 error.
fn status(s: &PSpan) -> i32 {
    s.status.as_ref().map(|st| st.code).unwrap_or(0)
}

// ------------------------------------------------------------------ the server

/// `fawn serve` with its stdout lines kept; killed when dropped.
struct Fawn {
    child: Child,
    addr: String,
    lines: Arc<Mutex<Vec<String>>>,
    _home: tempfile::TempDir,
}

impl Drop for Fawn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(mock: &MockLlm) -> String {
    format!(
        "models:\n\
         \x20 - name: mock\n\
         \x20   use: langchain_openai:ChatOpenAI\n\
         \x20   model: fawn-mock\n\
         \x20   base_url: {}\n\
         \x20   api_key: {MODEL_KEY}\n\
         \x20   max_retries: 0\n\
         tools:\n\
         \x20 - name: ls\n\
         \x20   group: file:read\n\
         \x20   use: deerflow.sandbox.tools:ls_tool\n\
         tool_groups:\n\
         \x20 - name: file:read\n\
         sandbox:\n\
         \x20 use: deerflow.sandbox.local:LocalSandboxProvider\n\
         title:\n\
         \x20 enabled: false\n\
         memory:\n\
         \x20 enabled: false\n\
         summarization:\n\
         \x20 enabled: false\n",
        mock.base_url()
    )
}

fn command(home: &std::path::Path, config_path: &std::path::Path, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fawn"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("FAWN_HOME", home.join("fawn"))
        .env("FAWN_LOG_FORMAT", "json")
        .env("FAWN_LOG", "info")
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .args(["serve", "--no-auth", "--port", "0", "--config"])
        .arg(config_path);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn start(mock: &MockLlm, env: &[(&str, &str)]) -> Fawn {
    let home = tempfile::tempdir().unwrap();
    let config_path = home.path().join("config.yaml");
    std::fs::write(&config_path, config(mock)).unwrap();
    let mut child = command(home.path(), &config_path, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let kept = lines.clone();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("listening on http://").nth(1)
                && let Some(tx) = tx.take()
            {
                let addr: String = rest
                    .chars()
                    .take_while(|c| !c.is_whitespace() && *c != '"' && *c != ' ')
                    .collect();
                let _ = tx.send(
                    addr.trim_end_matches(|c: char| !c.is_ascii_digit())
                        .to_string(),
                );
            }
            kept.lock().unwrap().push(line);
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the server announces its address");
    Fawn {
        child,
        addr,
        lines,
        _home: home,
    }
}

impl Fawn {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn logs(&self) -> Vec<Value> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}"))
            })
            .collect()
    }

    fn raw_logs(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

async fn new_thread(http: &reqwest::Client, fawn: &Fawn) -> String {
    let t: Value = http
        .post(fawn.url("/threads"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    t["thread_id"].as_str().unwrap().to_string()
}

/// A `/runs/wait` call; returns the final values.
async fn run_wait(
    http: &reqwest::Client,
    fawn: &Fawn,
    thread: &str,
    text: &str,
    headers: &[(&str, &str)],
    context: Value,
) -> Value {
    let mut req = http
        .post(fawn.url(&format!("/threads/{thread}/runs/wait")))
        .json(&json!({
            "assistant_id": "lead_agent",
            "input": {"messages": [{"role": "user", "content": text}]},
            "context": context,
        }));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

fn assert_no_secrets(receiver: &Receiver, fawn: &Fawn) {
    let logs = fawn.raw_logs();
    let exported: Vec<u8> = receiver
        .batches
        .lock()
        .unwrap()
        .iter()
        .flat_map(|b| b.raw.to_vec())
        .collect();
    let exported = String::from_utf8_lossy(&exported);
    for secret in [MODEL_KEY, COOKIE, API_KEY, LANGSMITH_KEY, LANGFUSE_SECRET] {
        assert!(!logs.contains(secret), "{secret} in the logs");
        assert!(!exported.contains(secret), "{secret} in an exported span");
    }
}

// ------------------------------------------------------------------ the tests

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_tool_calling_run_is_one_trace_of_its_model_and_tool_calls() {
    let (receiver, base) = Receiver::start().await;
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::tool_call("ls", json!({"path": "/mnt/user-data"})));
    mock.push(Turn::text("all listed"));
    let fawn = start(&mock, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &base)]);
    let http = fawn_net::client();
    let thread = new_thread(&http, &fawn).await;
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let cookie = format!("access_token={COOKIE}");
    let values = run_wait(
        &http,
        &fawn,
        &thread,
        "list my files",
        &[
            ("traceparent", &traceparent),
            ("x-request-id", "req-observed-1"),
            ("cookie", &cookie),
            ("x-api-key", API_KEY),
        ],
        json!({}),
    )
    .await;
    assert!(values.to_string().contains("all listed"), "{values}");

    let spans = receiver
        .wait_for(
            "/v1/traces",
            "a run with two model calls and a tool call",
            |s| {
                named(s, "invoke_agent lead_agent").len() == 1
                    && named(s, "chat fawn-mock").len() == 2
                    && named(s, "execute_tool ls").len() == 1
                    && named(s, "POST /threads/{thread_id}/runs/wait").len() == 1
            },
        )
        .await;
    // One trace: the caller's.
    let in_trace: Vec<&PSpan> = spans
        .iter()
        .filter(|s| hex(&s.trace_id) == CALLER_TRACE)
        .collect();
    let request = one(&spans, "POST /threads/{thread_id}/runs/wait");
    assert_eq!(hex(&request.trace_id), CALLER_TRACE);
    assert_eq!(
        hex(&request.parent_span_id),
        CALLER_SPAN,
        "the caller's span is continued"
    );
    assert_eq!(
        text(request, "http.route").as_deref(),
        Some("/threads/{thread_id}/runs/wait")
    );
    assert_eq!(int(request, "http.response.status_code"), Some(200));
    let run = one(&spans, "invoke_agent lead_agent");
    assert_eq!(
        run.parent_span_id, request.span_id,
        "the run belongs to the request"
    );
    assert_eq!(hex(&run.trace_id), CALLER_TRACE);
    assert_eq!(
        text(run, "openinference.span.kind").as_deref(),
        Some("AGENT")
    );
    assert_eq!(text(run, "session.id").as_deref(), Some(thread.as_str()));
    assert_eq!(
        text(run, "fawn.thread_id").as_deref(),
        Some(thread.as_str())
    );
    assert_eq!(
        text(run, "fawn.request_id").as_deref(),
        Some("req-observed-1")
    );
    assert_eq!(text(run, "fawn.run.status").as_deref(), Some("success"));
    assert!(text(run, "input.value").unwrap().contains("list my files"));
    let chats = named(&spans, "chat fawn-mock");
    let tool = one(&spans, "execute_tool ls");
    for span in chats.iter().copied().chain([tool]) {
        assert_eq!(
            span.parent_span_id, run.span_id,
            "{} is the run's child",
            span.name
        );
        assert!(in_trace.iter().any(|s| s.span_id == span.span_id));
    }
    // root → model call → tool call → model call, in time.
    let (first, second) = if chats[0].start_time_unix_nano < chats[1].start_time_unix_nano {
        (chats[0], chats[1])
    } else {
        (chats[1], chats[0])
    };
    assert!(first.end_time_unix_nano <= tool.start_time_unix_nano);
    assert!(tool.end_time_unix_nano <= second.start_time_unix_nano);
    for chat in [first, second] {
        assert_eq!(text(chat, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(
            text(chat, "gen_ai.request.model").as_deref(),
            Some("fawn-mock")
        );
        assert_eq!(text(chat, "gen_ai.system").as_deref(), Some("openai"));
        assert_eq!(
            text(chat, "openinference.span.kind").as_deref(),
            Some("LLM")
        );
        assert_eq!(text(chat, "llm.model_name").as_deref(), Some("fawn-mock"));
        let input = int(chat, "gen_ai.usage.input_tokens").unwrap();
        let output = int(chat, "gen_ai.usage.output_tokens").unwrap();
        assert!(input > 0 && output > 0, "{input} {output}");
        assert_eq!(int(chat, "llm.token_count.prompt"), Some(input));
        assert_eq!(int(chat, "llm.token_count.completion"), Some(output));
        assert_eq!(int(chat, "llm.token_count.total"), Some(input + output));
        assert_eq!(status(chat), 1);
        assert!(text(chat, "llm.input_messages.0.message.role").is_some());
    }
    assert!(
        text(first, "input.value")
            .unwrap()
            .contains("list my files")
    );
    assert_eq!(
        text(
            first,
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name"
        )
        .as_deref(),
        Some("ls")
    );
    assert!(text(second, "output.value").unwrap().contains("all listed"));
    assert_eq!(text(tool, "tool.name").as_deref(), Some("ls"));
    assert_eq!(text(tool, "gen_ai.tool.name").as_deref(), Some("ls"));
    assert_eq!(
        text(tool, "openinference.span.kind").as_deref(),
        Some("TOOL")
    );
    assert_eq!(text(tool, "fawn.tool.outcome").as_deref(), Some("ok"));
    assert!(int(tool, "fawn.tool.arguments_bytes").unwrap() > 0);

    // Outgoing model requests carry the model call's span as their parent.
    let model_requests: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect();
    assert_eq!(model_requests.len(), 2);
    for r in &model_requests {
        let tp = r
            .header("traceparent")
            .expect("a traceparent on the model request");
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(parts[1], CALLER_TRACE);
        assert!(chats.iter().any(|c| hex(&c.span_id) == parts[2]), "{tp}");
    }

    // Log lines name their request, run and trace.
    let logs = fawn.logs();
    let spans_of = |l: &Value| l["spans"].as_array().cloned().unwrap_or_default();
    let field = |l: &Value, k: &str| -> Option<String> {
        spans_of(l)
            .iter()
            .find_map(|s| s.get(k).and_then(Value::as_str).map(str::to_string))
    };
    let finished = logs
        .iter()
        .find(|l| l["fields"]["message"] == "run finished")
        .expect("a `run finished` line");
    assert_eq!(
        field(finished, "request_id").as_deref(),
        Some("req-observed-1")
    );
    assert_eq!(
        field(finished, "thread_id").as_deref(),
        Some(thread.as_str())
    );
    assert_eq!(
        field(finished, "run_id").as_deref(),
        text(run, "fawn.run_id").as_deref()
    );
    assert_eq!(field(finished, "trace_id").as_deref(), Some(CALLER_TRACE));
    let access = logs
        .iter()
        .find(|l| {
            l["fields"]["message"] == "request"
                && l["fields"]["route"] == "/threads/{thread_id}/runs/wait"
        })
        .expect("an access line for the run");
    assert_eq!(
        field(access, "request_id").as_deref(),
        Some("req-observed-1")
    );
    assert_eq!(field(access, "trace_id").as_deref(), Some(CALLER_TRACE));
    assert_eq!(access["fields"]["status"], 200);
    assert_no_secrets(&receiver, &fawn);
}

#[tokio::test]
async fn a_subagent_and_a_failed_model_call_are_traced() {
    let (receiver, base) = Receiver::start().await;
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::tool_call(
        "task",
        json!({"description": "look around", "prompt": "say hi", "subagent_type": "general-purpose"}),
    ));
    mock.push(Turn::text("the subagent's answer"));
    mock.push(Turn::text("all done"));
    let fawn = start(&mock, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &base)]);
    let http = fawn_net::client();
    let thread = new_thread(&http, &fawn).await;
    run_wait(
        &http,
        &fawn,
        &thread,
        "delegate",
        &[],
        json!({"subagent_enabled": true}),
    )
    .await;
    let spans = receiver
        .wait_for("/v1/traces", "a run with a subagent", |s| {
            named(s, "invoke_agent general-purpose").len() == 1
                && named(s, "invoke_agent lead_agent").len() == 1
                && named(s, "chat fawn-mock").len() == 3
        })
        .await;
    let run = one(&spans, "invoke_agent lead_agent");
    // Without a caller's trace, the run starts its own, whose id is the run's.
    assert!(run.parent_span_id.is_empty());
    let run_id = text(run, "fawn.run_id").unwrap();
    assert_eq!(hex(&run.trace_id), run_id.replace('-', ""));
    assert_eq!(run.links.len(), 1, "linked to the request that created it");
    let task = one(&spans, "execute_tool task");
    assert_eq!(task.parent_span_id, run.span_id);
    let sub = one(&spans, "invoke_agent general-purpose");
    assert_eq!(
        sub.parent_span_id, task.span_id,
        "the subagent runs under its task call"
    );
    assert_eq!(
        text(sub, "openinference.span.kind").as_deref(),
        Some("AGENT")
    );
    let chats = named(&spans, "chat fawn-mock");
    let under_sub: Vec<_> = chats
        .iter()
        .filter(|c| c.parent_span_id == sub.span_id)
        .collect();
    let under_run: Vec<_> = chats
        .iter()
        .filter(|c| c.parent_span_id == run.span_id)
        .collect();
    assert_eq!((under_sub.len(), under_run.len()), (1, 2));
    assert!(
        text(under_sub[0], "output.value")
            .unwrap()
            .contains("the subagent's answer")
    );

    // A model that fails: the model call and the run end in error, in one trace.
    mock.push(Turn::fault(Fault::Unauthorized));
    let thread2 = new_thread(&http, &fawn).await;
    let failed = run_wait(&http, &fawn, &thread2, "fail please", &[], json!({})).await;
    assert!(failed.get("__error__").is_some(), "{failed}");
    let spans = receiver
        .wait_for("/v1/traces", "a failed run", |s| {
            s.iter()
                .any(|x| x.name == "invoke_agent lead_agent" && status(x) == 2)
        })
        .await;
    let run = spans
        .iter()
        .find(|x| x.name == "invoke_agent lead_agent" && status(x) == 2)
        .unwrap();
    assert_eq!(text(run, "fawn.run.status").as_deref(), Some("error"));
    assert!(text(run, "error.type").is_some());
    let failed_chat = spans
        .iter()
        .find(|x| x.name == "chat fawn-mock" && x.parent_span_id == run.span_id)
        .expect("the failed model call, under the run");
    assert_eq!(status(failed_chat), 2);
    assert_eq!(text(failed_chat, "error.type").as_deref(), Some("auth"));
    assert_no_secrets(&receiver, &fawn);
}

#[tokio::test]
async fn langsmith_and_langfuse_variables_work_unchanged() {
    let (receiver, base) = Receiver::start().await;
    let mock = MockLlm::start().await.unwrap();
    let fawn = start(
        &mock,
        &[
            ("LANGSMITH_TRACING", "true"),
            ("LANGSMITH_API_KEY", LANGSMITH_KEY),
            ("LANGSMITH_ENDPOINT", &base),
            ("LANGSMITH_PROJECT", "fawn-tests"),
            ("LANGFUSE_TRACING", "true"),
            ("LANGFUSE_PUBLIC_KEY", "pk-lf-public"),
            ("LANGFUSE_SECRET_KEY", LANGFUSE_SECRET),
            ("LANGFUSE_BASE_URL", &base),
            // Meant for some other collector: must reach neither.
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-other-vendor=do-not-forward",
            ),
        ],
    );
    let http = fawn_net::client();
    let info: Value = http
        .get(fawn.url("/info"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["flags"]["langsmith"], true);
    let thread = new_thread(&http, &fawn).await;
    run_wait(&http, &fawn, &thread, "hello", &[], json!({})).await;
    for path in ["/otel/v1/traces", "/api/public/otel/v1/traces"] {
        let spans = receiver
            .wait_for(path, "a run", |s| {
                named(s, "invoke_agent lead_agent").len() == 1
                    && !named(s, "chat fawn-mock").is_empty()
            })
            .await;
        // LLM observability tools get the run as the root, and no request spans.
        let run = one(&spans, "invoke_agent lead_agent");
        assert!(run.parent_span_id.is_empty());
        assert!(
            spans
                .iter()
                .all(|s| !s.name.starts_with("POST ") && !s.name.starts_with("GET "))
        );
        assert_eq!(
            text(run, "langfuse.trace.name").as_deref(),
            Some("lead_agent")
        );
        assert_eq!(text(run, "langsmith.span.kind").as_deref(), Some("chain"));
        let chat = named(&spans, "chat fawn-mock")[0];
        assert_eq!(text(chat, "langsmith.span.kind").as_deref(), Some("llm"));
        assert_eq!(
            text(chat, "langfuse.observation.type").as_deref(),
            Some("generation")
        );
    }
    let batches = receiver.batches.lock().unwrap().clone();
    for b in &batches {
        assert!(
            b.headers.get("x-other-vendor").is_none(),
            "{}: forwarded another vendor's header",
            b.path
        );
        match b.path.as_str() {
            "/otel/v1/traces" => {
                assert_eq!(b.headers.get("x-api-key").unwrap(), LANGSMITH_KEY);
                assert_eq!(b.headers.get("langsmith-project").unwrap(), "fawn-tests");
                assert!(b.headers.get("authorization").is_none());
            }
            "/api/public/otel/v1/traces" => {
                let expected = format!(
                    "Basic {}",
                    base64_encode(format!("pk-lf-public:{LANGFUSE_SECRET}").as_bytes())
                );
                assert_eq!(
                    b.headers.get("authorization").unwrap().to_str().unwrap(),
                    expected
                );
                assert_eq!(b.headers.get("x-langfuse-ingestion-version").unwrap(), "4");
                assert!(b.headers.get("x-api-key").is_none());
            }
            other => panic!("nothing else is configured, got {other}"),
        }
    }
    // The credentials are in the headers they belong to, never in the spans or the logs.
    let logs = fawn.raw_logs();
    for secret in [LANGSMITH_KEY, LANGFUSE_SECRET, MODEL_KEY] {
        assert!(!logs.contains(secret));
        for b in &batches {
            assert!(!String::from_utf8_lossy(&b.raw).contains(secret));
        }
    }
}

fn base64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test]
async fn a_dead_collector_neither_slows_nor_fails_runs() {
    // A collector that accepts connections and never answers.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole_url = format!("http://{}", hole.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = hole.accept().await {
            held.push(s);
        }
    });
    let mock = MockLlm::start().await.unwrap();
    let fawn = start(
        &mock,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &hole_url),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "600000"),
        ],
    );
    let http = fawn_net::client();
    let thread = new_thread(&http, &fawn).await;
    // Each run makes several spans; the export of the first batch never returns, so the
    // queue fills and spans are dropped — while every run completes.
    for i in 0..12 {
        let v = run_wait(&http, &fawn, &thread, &format!("hello {i}"), &[], json!({})).await;
        assert!(v.get("__error__").is_none(), "{v}");
    }
    let metrics = http
        .get(fawn.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let dropped: f64 = metrics
        .lines()
        .find(|l| l.starts_with("fawn_trace_spans_dropped_total{destination=\"otlp\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(dropped > 0.0, "no span was dropped:\n{metrics}");
    let finished: f64 = metrics
        .lines()
        .find(|l| l.starts_with("fawn_runs_finished_total{status=\"success\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert_eq!(finished, 12.0);
}

#[test]
fn an_incomplete_destination_is_refused_and_named() {
    let home = tempfile::tempdir().unwrap();
    let config_path = home.path().join("config.yaml");
    std::fs::write(&config_path, "title:\n  enabled: false\n").unwrap();
    let out = command(
        home.path(),
        &config_path,
        &[("LANGFUSE_TRACING", "true"), ("LANGFUSE_PUBLIC_KEY", "pk")],
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("LANGFUSE_SECRET_KEY"), "{err}");
    let check = Command::new(env!("CARGO_BIN_EXE_fawn"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("FAWN_HOME", home.path().join("fawn"))
        .env("LANGSMITH_TRACING", "true")
        .args(["check-config"])
        .arg(&config_path)
        .output()
        .unwrap();
    assert!(!check.status.success());
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(
        err.contains("error: tracing:") && err.contains("LANGSMITH_API_KEY"),
        "{err}"
    );
}
