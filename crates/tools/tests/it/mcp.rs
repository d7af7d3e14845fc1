//! MCP tools against real MCP servers (rmcp's server side) started by each test.
//!
//! * streamable HTTP: an rmcp `StreamableHttpService` in an axum app on 127.0.0.1:0, with an
//!   optional OAuth layer (a token endpoint plus an `Authorization` check).
//! * stdio: the MCP client spawns a real child process — `bash` running a two-line bridge
//!   that connects its stdin/stdout to a TCP socket (bash's `/dev/tcp`) — and the rmcp
//!   server serves that socket in the test process. So the stdio path (spawn, scrubbed env,
//!   cwd, pipes, process-group shutdown) is exercised for real without a separate server
//!   binary.

use fawn_config::{ExtensionsConfig, LoadOptions, McpOAuthConfig, McpServerConfig, Settings};
use fawn_sandbox::{SandboxError, SandboxProvider, ThreadPaths};
use fawn_state::{Content, NullSink, ThreadState};
use fawn_tools::mcp::{McpManager, McpOptions, McpServerState, McpServerStatus};
use fawn_tools::{SandboxSlot, Tool, ToolContext, ToolError, ToolOutput, ToolStatus};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------
// The MCP server
// ---------------------------------------------------------------------------

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// Text to send back.
    text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SleepArgs {
    ms: u64,
}

#[derive(Clone)]
struct TestServer {
    tool_router: ToolRouter<Self>,
}

impl TestServer {
    fn new() -> Self {
        TestServer {
            tool_router: Self::tool_router(),
        }
    }
}

#[tool_router]
impl TestServer {
    #[tool(description = "Echo the text back.")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        format!("echo: {text}")
    }

    #[tool(description = "Sleep for `ms` milliseconds.")]
    async fn sleep(&self, Parameters(SleepArgs { ms }): Parameters<SleepArgs>) -> String {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        "slept".to_string()
    }

    #[tool(description = "Always reports an error.")]
    fn fail(&self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text("it broke")])
    }

    #[tool(description = "Returns a caption and an image.")]
    fn picture(&self) -> CallToolResult {
        CallToolResult::success(vec![
            ContentBlock::text("a red dot"),
            ContentBlock::image("iVBORw0KGgo=", "image/png"),
        ])
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

const SERVER_TOOLS: [&str; 4] = ["echo", "fail", "picture", "sleep"];

// ---------------------------------------------------------------------------
// Streamable HTTP, with optional OAuth
// ---------------------------------------------------------------------------

/// A token endpoint and the `Authorization` check in front of `/mcp`.
#[derive(Default)]
struct OAuth {
    /// `expires_in` of issued tokens.
    ttl: u64,
    issued: Mutex<Vec<String>>,
    forms: Mutex<Vec<HashMap<String, String>>>,
    /// `Authorization` values the MCP endpoint accepted.
    accepted: Mutex<Vec<String>>,
    /// Tokens refused even if current.
    revoked: Mutex<Vec<String>>,
}

impl OAuth {
    fn current(&self) -> Option<String> {
        self.issued.lock().unwrap().last().cloned()
    }
}

async fn token_endpoint(
    axum::extract::State(oauth): axum::extract::State<Arc<OAuth>>,
    axum::Form(form): axum::Form<HashMap<String, String>>,
) -> axum::Json<Value> {
    oauth.forms.lock().unwrap().push(form);
    let token = {
        let mut issued = oauth.issued.lock().unwrap();
        let t = format!("token-{}", issued.len() + 1);
        issued.push(t.clone());
        t
    };
    // Field names are not the defaults: the config names them.
    axum::Json(json!({"tok": token, "kind": "Bearer", "ttl": oauth.ttl}))
}

async fn check_auth(
    axum::extract::State(oauth): axum::extract::State<Arc<OAuth>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let given = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let current = oauth.current().unwrap_or_default();
    let ok = !current.is_empty()
        && given == format!("Bearer {current}")
        && !oauth.revoked.lock().unwrap().contains(&current);
    if !ok {
        return axum::response::IntoResponse::into_response((
            http::StatusCode::UNAUTHORIZED,
            "bad token",
        ));
    }
    oauth.accepted.lock().unwrap().push(given);
    next.run(req).await
}

struct HttpServer {
    /// `http://127.0.0.1:PORT`
    base: String,
    /// The `X-Api-Key` of every request to `/mcp` ("" when absent).
    keys: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
}

async fn record_key(
    axum::extract::State(keys): axum::extract::State<Arc<Mutex<Vec<String>>>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    keys.lock().unwrap().push(api_key(req.headers()));
    next.run(req).await
}

impl HttpServer {
    fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn http_server_on(
    listener: tokio::net::TcpListener,
    oauth: Option<Arc<OAuth>>,
) -> HttpServer {
    let stop = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_sse_keep_alive(None)
        .with_cancellation_token(stop.child_token());
    let service: StreamableHttpService<TestServer, LocalSessionManager> =
        StreamableHttpService::new(|| Ok(TestServer::new()), Default::default(), config);
    let keys = Arc::new(Mutex::new(Vec::new()));
    let mut router = axum::Router::new().nest_service("/mcp", service).layer(
        axum::middleware::from_fn_with_state(keys.clone(), record_key),
    );
    if let Some(oauth) = oauth {
        router = router
            .layer(axum::middleware::from_fn_with_state(
                oauth.clone(),
                check_auth,
            ))
            .route(
                "/token",
                axum::routing::post(token_endpoint).with_state(oauth),
            );
    }
    let addr = listener.local_addr().unwrap();
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { token.cancelled_owned().await })
            .await;
    });
    HttpServer {
        base: format!("http://{addr}"),
        keys,
        stop,
    }
}

async fn http_server(oauth: Option<Arc<OAuth>>) -> HttpServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    http_server_on(listener, oauth).await
}

fn http_cfg(url: &str) -> McpServerConfig {
    McpServerConfig {
        kind: Some("http".into()),
        url: Some(url.into()),
        session_init_timeout: 10.0,
        tool_call_timeout: 10.0,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------
// stdio: bash bridge to an in-process server
// ---------------------------------------------------------------------------

/// Writes the child's environment to `$ENV_OUT` when set, then joins stdin/stdout to the
/// TCP server at `$MCP_PORT`; when either side closes, it stops both copies and exits.
/// (A background job's stdin is /dev/null unless redirected, hence fd 4.)
const BRIDGE: &str = r#"[ -n "$ENV_OUT" ] && env > "$ENV_OUT"
exec 3<>"/dev/tcp/127.0.0.1/$MCP_PORT" 4<&0 || exit 1
cat <&4 >&3 &
up=$!
cat <&3 &
down=$!
wait -n
kill $up $down 2>/dev/null"#;

struct Bridge {
    port: u16,
    /// Sessions being served right now.
    live: Arc<AtomicUsize>,
    stop: CancellationToken,
    /// Cancelling it drops the connections of the moment (the server "crashes").
    kick: Arc<Mutex<CancellationToken>>,
}

impl Bridge {
    fn drop_connections(&self) {
        let mut k = self.kick.lock().unwrap();
        k.cancel();
        *k = CancellationToken::new();
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn bridge() -> Bridge {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let live = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let kick = Arc::new(Mutex::new(CancellationToken::new()));
    let (live2, stop2, kick2) = (live.clone(), stop.clone(), kick.clone());
    tokio::spawn(async move {
        loop {
            let sock = tokio::select! {
                _ = stop2.cancelled() => return,
                r = listener.accept() => match r { Ok((s, _)) => s, Err(_) => return },
            };
            let live = live2.clone();
            let ct = stop2.child_token();
            let kick = kick2.lock().unwrap().clone();
            live.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (r, w) = sock.into_split();
                if let Ok(service) = TestServer::new().serve_with_ct((r, w), ct.clone()).await {
                    // Ends with the connection, or when kicked (dropping the service
                    // closes the socket).
                    tokio::select! {
                        _ = kick.cancelled() => {}
                        _ = service.waiting() => {}
                    }
                }
                live.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Bridge {
        port,
        live,
        stop,
        kick,
    }
}

fn bash_cfg(script: &str, env: &[(&str, &str)]) -> McpServerConfig {
    McpServerConfig {
        kind: Some("stdio".into()),
        command: Some("bash".into()),
        args: vec!["-c".into(), script.into()],
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        session_init_timeout: 10.0,
        tool_call_timeout: 10.0,
        ..Default::default()
    }
}

fn stdio_cfg(bridge: &Bridge) -> McpServerConfig {
    bash_cfg(BRIDGE, &[("MCP_PORT", &bridge.port.to_string())])
}

// ---------------------------------------------------------------------------
// Legacy HTTP+SSE (MCP 2024-11-05): the framing written here, the MCP server is rmcp's
// ---------------------------------------------------------------------------

type SseWriter = Arc<tokio::sync::Mutex<tokio::io::WriteHalf<tokio::io::DuplexStream>>>;

#[derive(Default)]
struct SseState {
    sessions: Mutex<HashMap<String, SseWriter>>,
    /// (method, X-Api-Key) of every request.
    seen: Arc<Mutex<Vec<(String, String)>>>,
    live: Arc<AtomicUsize>,
}

struct SseServer {
    base: String,
    seen: Arc<Mutex<Vec<(String, String)>>>,
    live: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl Drop for SseServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn api_key(headers: &http::HeaderMap) -> String {
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// Decrements the live count when the stream is dropped (the client went away).
struct LiveGuard(Arc<AtomicUsize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn sse_stream(
    axum::extract::State(state): axum::extract::State<Arc<SseState>>,
    headers: http::HeaderMap,
) -> axum::response::sse::Sse<
    impl futures::Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>>,
> {
    use axum::response::sse::Event;
    use futures::StreamExt;
    use tokio::io::AsyncBufReadExt;
    state
        .seen
        .lock()
        .unwrap()
        .push(("GET".into(), api_key(&headers)));
    let id = format!("s{}", state.sessions.lock().unwrap().len() + 1);
    let (client_side, server_side) = tokio::io::duplex(64 * 1024);
    let (from_server, to_server) = tokio::io::split(client_side);
    state
        .sessions
        .lock()
        .unwrap()
        .insert(id.clone(), Arc::new(tokio::sync::Mutex::new(to_server)));
    tokio::spawn(async move {
        if let Ok(service) = TestServer::new().serve(tokio::io::split(server_side)).await {
            let _ = service.waiting().await;
        }
    });
    state.live.fetch_add(1, Ordering::SeqCst);
    let guard = LiveGuard(state.live.clone());
    let endpoint = Event::default()
        .event("endpoint")
        .data(format!("/messages?session_id={id}"));
    let lines = tokio::io::BufReader::new(from_server).lines();
    let messages = futures::stream::unfold((lines, guard), |(mut lines, guard)| async move {
        let line = lines.next_line().await.ok().flatten()?;
        Some((
            Ok(Event::default().event("message").data(line)),
            (lines, guard),
        ))
    });
    axum::response::sse::Sse::new(futures::stream::once(async { Ok(endpoint) }).chain(messages))
}

async fn sse_post(
    axum::extract::State(state): axum::extract::State<Arc<SseState>>,
    axum::extract::Query(q): axum::extract::Query<HashMap<String, String>>,
    headers: http::HeaderMap,
    body: String,
) -> http::StatusCode {
    use tokio::io::AsyncWriteExt;
    state
        .seen
        .lock()
        .unwrap()
        .push(("POST".into(), api_key(&headers)));
    let writer = q
        .get("session_id")
        .and_then(|id| state.sessions.lock().unwrap().get(id).cloned());
    let Some(writer) = writer else {
        return http::StatusCode::NOT_FOUND;
    };
    let mut w = writer.lock().await;
    let line = format!("{}\n", body.trim());
    if w.write_all(line.as_bytes()).await.is_err() {
        return http::StatusCode::GONE;
    }
    http::StatusCode::ACCEPTED
}

async fn sse_server() -> SseServer {
    let state = Arc::new(SseState::default());
    let router = axum::Router::new()
        .route("/sse", axum::routing::get(sse_stream))
        .route("/messages", axum::routing::post(sse_post))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { token.cancelled_owned().await })
            .await;
    });
    SseServer {
        base: format!("http://{addr}"),
        seen: state.seen.clone(),
        live: state.live.clone(),
        stop,
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn manager(servers: Vec<(&str, McpServerConfig)>) -> McpManager {
    let ext = ExtensionsConfig {
        mcp_servers: servers
            .into_iter()
            .map(|(n, c)| (n.to_string(), c))
            .collect(),
        ..Default::default()
    };
    McpManager::new(
        &ext,
        None,
        McpOptions {
            retry_after: Duration::from_millis(200),
            ..Default::default()
        },
    )
}

struct NoSandbox;

#[async_trait::async_trait]
impl SandboxProvider for NoSandbox {
    async fn acquire(&self, _thread_id: &str) -> Result<String, SandboxError> {
        Err(SandboxError::Unavailable("no sandbox in MCP tests".into()))
    }
    fn get(&self, _sandbox_id: &str) -> Option<Arc<dyn fawn_sandbox::Sandbox>> {
        None
    }
    async fn release(&self, _sandbox_id: &str) {}
    fn thread_paths(&self, thread_id: &str) -> ThreadPaths {
        ThreadPaths::new(Path::new("/nonexistent"), "user", thread_id)
    }
}

fn ctx() -> ToolContext {
    ToolContext {
        thread_id: "thread".into(),
        run_id: "run".into(),
        tool_call_id: "call-1".into(),
        state: Arc::new(ThreadState::default()),
        settings: Arc::new(Settings::default()),
        sandbox: Arc::new(SandboxSlot::new(Arc::new(NoSandbox), "thread", None)),
        events: Arc::new(NullSink),
        cancel: CancellationToken::new(),
        subagents: None,
        model_name: "model".into(),
        context: Map::new(),
    }
}

/// `tools()`, failing the test instead of hanging.
async fn tools(m: &McpManager) -> Vec<Arc<dyn Tool>> {
    tokio::time::timeout(Duration::from_secs(60), m.tools())
        .await
        .expect("tools() must not hang")
}

fn names(tools: &[Arc<dyn Tool>]) -> Vec<String> {
    let mut n: Vec<String> = tools.iter().map(|t| t.name().to_string()).collect();
    n.sort();
    n
}

fn find(tools: &[Arc<dyn Tool>], name: &str) -> Arc<dyn Tool> {
    tools
        .iter()
        .find(|t| t.name() == name)
        .cloned()
        .unwrap_or_else(|| panic!("no tool {name} in {:?}", names(tools)))
}

async fn call(tool: &Arc<dyn Tool>, args: Value) -> Result<ToolOutput, ToolError> {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    tool.call(args, &ctx()).await
}

fn text(o: &ToolOutput) -> String {
    match &o.content {
        Content::Text(t) => t.clone(),
        other => panic!("expected text content, got {other:?}"),
    }
}

async fn status_of(m: &McpManager, name: &str) -> McpServerStatus {
    m.servers_status()
        .await
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no status for {name}"))
}

/// Polls `cond` for up to 20 s.
async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn prefixed(server: &str) -> Vec<String> {
    SERVER_TOOLS
        .iter()
        .map(|t| format!("{server}_{t}"))
        .collect()
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[tokio::test]
async fn stdio_server_lists_and_calls_tools() {
    let b = bridge().await;
    let m = manager(vec![("local", stdio_cfg(&b))]);
    let tools = tools(&m).await;
    assert_eq!(names(&tools), prefixed("local"));

    let echo = find(&tools, "local_echo");
    assert_eq!(echo.description(), "Echo the text back.");
    let params = echo.parameters();
    // Built once when the tool is listed; every spec shares it.
    assert!(Arc::ptr_eq(&echo.spec().parameters, &params));
    assert_eq!(params["type"], "object");
    assert_eq!(params["properties"]["text"]["type"], "string");
    assert_eq!(params["required"], json!(["text"]));

    let out = call(&echo, json!({"text": "hi"})).await.unwrap();
    assert_eq!(out.status, ToolStatus::Success);
    assert_eq!(text(&out), "echo: hi");

    let out = call(&find(&tools, "local_picture"), json!({}))
        .await
        .unwrap();
    assert_eq!(text(&out), "a red dot\n[image: image/png, 8 bytes]");

    let st = status_of(&m, "local").await;
    assert_eq!(st.state, McpServerState::Connected);
    assert_eq!(st.transport, "stdio");
    assert_eq!(st.tools, prefixed("local"));

    // Closing the session ends the child (its stdin closes, the bridge exits).
    assert_eq!(b.live.load(Ordering::SeqCst), 1);
    m.reset().await;
    eventually("the stdio session to close", || async {
        b.live.load(Ordering::SeqCst) == 0
    })
    .await;
}

#[tokio::test]
async fn http_server_lists_and_calls_tools_without_prefix() {
    let s = http_server(None).await;
    let m = manager(vec![(
        "remote",
        McpServerConfig {
            tool_name_prefix: false,
            headers: BTreeMap::from([("X-Api-Key".to_string(), "k-123456".to_string())]),
            ..http_cfg(&s.url())
        },
    )]);
    let tools = tools(&m).await;
    assert_eq!(names(&tools), SERVER_TOOLS.to_vec());
    let out = call(&find(&tools, "echo"), json!({"text": "over http"}))
        .await
        .unwrap();
    assert_eq!(text(&out), "echo: over http");
    assert_eq!(status_of(&m, "remote").await.transport, "http");
    // The configured header went with every request.
    let keys = s.keys.lock().unwrap().clone();
    assert!(keys.len() >= 3, "{keys:?}");
    assert!(keys.iter().all(|k| k == "k-123456"), "{keys:?}");
}

#[tokio::test]
async fn is_error_results_and_bad_arguments_become_error_messages() {
    let s = http_server(None).await;
    let m = manager(vec![("srv", http_cfg(&s.url()))]);
    let tools = tools(&m).await;

    let out = call(&find(&tools, "srv_fail"), json!({})).await.unwrap();
    assert_eq!(out.status, ToolStatus::Error);
    assert_eq!(text(&out), "it broke");
    let msg = out.into_message("call-1", "srv_fail");
    assert_eq!(msg.status.as_deref(), Some("error"));

    // Arguments that do not match the schema: rmcp's server answers with an `isError`
    // result naming the field, which the model sees as an error ToolMessage.
    let out = call(&find(&tools, "srv_echo"), json!({"wrong": 1}))
        .await
        .unwrap();
    assert_eq!(out.status, ToolStatus::Error);
    assert!(
        text(&out).contains("missing field `text`"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn call_timeout_becomes_an_error_text() {
    let b = bridge().await;
    let m = manager(vec![(
        "slow",
        McpServerConfig {
            tool_call_timeout: 0.3,
            ..stdio_cfg(&b)
        },
    )]);
    let tools = tools(&m).await;
    let err = call(&find(&tools, "slow_sleep"), json!({"ms": 5000}))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ToolError::Failed(
            "MCP tool 'sleep' of server 'slow' timed out after 0.3s (tool_call_timeout)".into()
        )
    );
    // The session survives a timed-out call.
    let out = call(&find(&tools, "slow_sleep"), json!({"ms": 10}))
        .await
        .unwrap();
    assert_eq!(text(&out), "slept");
}

#[tokio::test]
async fn cancelled_run_cancels_the_call() {
    let s = http_server(None).await;
    let m = manager(vec![("srv", http_cfg(&s.url()))]);
    let tools = tools(&m).await;
    let sleep = find(&tools, "srv_sleep");
    let cx = ctx();
    let cancel = cx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    });
    let Value::Object(args) = json!({"ms": 30000}) else {
        unreachable!()
    };
    let r = tokio::time::timeout(Duration::from_secs(20), sleep.call(args, &cx))
        .await
        .expect("cancellation must end the call");
    assert_eq!(r.unwrap_err(), ToolError::Cancelled);
}

#[tokio::test]
async fn hanging_server_times_out_without_blocking_a_healthy_one() {
    let s = http_server(None).await;
    let m = manager(vec![
        (
            "hang",
            McpServerConfig {
                session_init_timeout: 0.5,
                ..bash_cfg("sleep 300", &[])
            },
        ),
        ("ok", http_cfg(&s.url())),
    ]);
    let tools = tools(&m).await;
    assert_eq!(names(&tools), prefixed("ok"));
    let hang = status_of(&m, "hang").await;
    assert_eq!(hang.state, McpServerState::Failed);
    assert_eq!(
        hang.error.as_deref(),
        Some("did not finish initializing within 0.5s (session_init_timeout)")
    );
    assert_eq!(status_of(&m, "ok").await.state, McpServerState::Connected);
}

#[tokio::test]
async fn servers_that_fail_to_start_do_not_break_the_others() {
    let b = bridge().await;
    let m = manager(vec![
        (
            "missing",
            McpServerConfig {
                command: Some("/nonexistent/fawn-no-such-mcp-server".into()),
                ..bash_cfg("", &[])
            },
        ),
        (
            "crashes",
            bash_cfg(
                r#"echo "cannot start: token $MY_TOKEN rejected" >&2; exit 3"#,
                &[("MY_TOKEN", "sup3r-secret-value")],
            ),
        ),
        ("good", stdio_cfg(&b)),
    ]);
    let tools = tools(&m).await;
    assert_eq!(names(&tools), prefixed("good"));

    let missing = status_of(&m, "missing").await;
    assert_eq!(missing.state, McpServerState::Failed);
    let err = missing.error.unwrap();
    assert!(
        err.contains("could not start `/nonexistent/fawn-no-such-mcp-server`: not found"),
        "{err}"
    );

    // The server's stderr explains the failure; the configured secret is masked.
    let err = status_of(&m, "crashes").await.error.unwrap();
    assert!(err.contains("initialization failed"), "{err}");
    assert!(err.contains("cannot start: token *** rejected"), "{err}");
    assert!(!err.contains("sup3r-secret-value"), "{err}");
}

#[tokio::test]
async fn a_server_whose_env_makes_its_launcher_run_code_is_not_started() {
    // A configuration planted before the API refused it (or written by hand): the start is
    // refused, so the variable never reaches the launcher.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("owned");
    let script = format!("touch {}", marker.display());
    let m = manager(vec![(
        "planted",
        bash_cfg(
            &script,
            &[
                ("npm_config_call", "touch /tmp/fawn-owned"),
                ("API_KEY", "k"),
            ],
        ),
    )]);
    assert!(names(&tools(&m).await).is_empty());
    let status = status_of(&m, "planted").await;
    assert_eq!(status.state, McpServerState::Failed);
    let err = status.error.unwrap();
    assert!(err.contains("'npm_config_call'"), "{err}");
    assert!(!marker.exists(), "the server process was not started");
}

#[tokio::test]
async fn stdio_env_is_scrubbed_and_cwd_configurable() {
    // Cargo sets this for the test process: a stand-in for a secret in Fawn's environment.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let b = bridge().await;
    let dir = tempfile::tempdir().unwrap();
    let env_out = dir.path().join("env.txt");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut cfg = bash_cfg(
        BRIDGE,
        &[
            ("MCP_PORT", &b.port.to_string()),
            ("ENV_OUT", env_out.to_str().unwrap()),
            ("CONFIGURED", "yes"),
        ],
    );
    cfg.extra
        .insert("cwd".into(), Value::String(work.display().to_string()));
    let m = manager(vec![("envcheck", cfg)]);
    assert_eq!(names(&tools(&m).await), prefixed("envcheck"));

    let env = std::fs::read_to_string(&env_out).unwrap();
    let vars: HashMap<&str, &str> = env.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(vars.get("CONFIGURED"), Some(&"yes"));
    assert!(vars.contains_key("PATH"));
    assert!(!vars.contains_key("CARGO_MANIFEST_DIR"), "{env}");
    assert!(!vars.contains_key("CARGO_PKG_NAME"), "{env}");
    assert_eq!(vars.get("PWD"), Some(&work.to_str().unwrap()));

    // A cwd that does not exist is a clear error.
    let mut cfg = stdio_cfg(&b);
    cfg.extra
        .insert("cwd".into(), Value::String("/nonexistent/fawn-cwd".into()));
    let m = manager(vec![("nocwd", cfg)]);
    assert!(tools(&m).await.is_empty());
    assert_eq!(
        status_of(&m, "nocwd").await.error.as_deref(),
        Some("working directory /nonexistent/fawn-cwd does not exist")
    );
}

#[tokio::test]
async fn legacy_sse_server_lists_and_calls_tools() {
    let s = sse_server().await;
    let m = manager(vec![(
        "legacy",
        McpServerConfig {
            kind: Some("sse".into()),
            url: Some(format!("{}/sse", s.base)),
            headers: BTreeMap::from([("X-Api-Key".to_string(), "sse-key-1234".to_string())]),
            session_init_timeout: 10.0,
            tool_call_timeout: 10.0,
            ..Default::default()
        },
    )]);
    let tools = tools(&m).await;
    assert_eq!(names(&tools), prefixed("legacy"));
    let out = call(&find(&tools, "legacy_echo"), json!({"text": "old school"}))
        .await
        .unwrap();
    assert_eq!(text(&out), "echo: old school");
    let out = call(&find(&tools, "legacy_fail"), json!({})).await.unwrap();
    assert_eq!(out.status, ToolStatus::Error);

    let st = status_of(&m, "legacy").await;
    assert_eq!(
        (st.transport.as_str(), st.state),
        ("sse", McpServerState::Connected)
    );
    // The configured header went with the stream and with every message.
    let seen = s.seen.lock().unwrap().clone();
    assert!(seen.iter().any(|(m, _)| m == "GET"), "{seen:?}");
    assert!(
        seen.iter().filter(|(m, _)| m == "POST").count() >= 3,
        "{seen:?}"
    );
    assert!(
        seen.iter().all(|(_, key)| key == "sse-key-1234"),
        "{seen:?}"
    );

    // Closing the session ends the server side of the stream.
    m.reset().await;
    eventually("the SSE session to close", || async {
        s.live.load(Ordering::SeqCst) == 0
    })
    .await;
}

#[tokio::test]
async fn sse_and_unknown_type_failures_are_clear() {
    let s = http_server(None).await;
    let m = manager(vec![
        (
            // Not a legacy-SSE endpoint.
            "legacy",
            McpServerConfig {
                kind: Some("sse".into()),
                url: Some(format!("{}/sse", s.base)),
                ..Default::default()
            },
        ),
        (
            "odd",
            McpServerConfig {
                kind: Some("websocket".into()),
                url: Some("ws://127.0.0.1:1".into()),
                ..Default::default()
            },
        ),
        ("ok", http_cfg(&s.url())),
    ]);
    assert_eq!(names(&tools(&m).await), prefixed("ok"));

    let legacy = status_of(&m, "legacy").await;
    assert_eq!(legacy.transport, "sse");
    assert_eq!(legacy.state, McpServerState::Failed);
    assert_eq!(
        legacy.error.as_deref(),
        Some(format!("GET {}/sse answered HTTP 404 Not Found", s.base).as_str())
    );

    let odd = status_of(&m, "odd").await;
    assert_eq!(odd.transport, "websocket");
    assert_eq!(
        odd.error.as_deref(),
        Some(
            "unknown MCP server type \"websocket\"; expected one of stdio, http \
             (streamable-http) or sse"
        )
    );
}

#[tokio::test]
async fn disabled_servers_are_listed_but_not_started() {
    let b = bridge().await;
    let m = manager(vec![(
        "off",
        McpServerConfig {
            enabled: false,
            ..stdio_cfg(&b)
        },
    )]);
    let before = status_of(&m, "off").await;
    assert_eq!(before.state, McpServerState::Disabled);
    assert!(tools(&m).await.is_empty());
    assert_eq!(b.live.load(Ordering::SeqCst), 0);
    assert_eq!(status_of(&m, "off").await.state, McpServerState::Disabled);
}

fn oauth_cfg(s: &HttpServer) -> McpOAuthConfig {
    McpOAuthConfig {
        token_url: format!("{}/token", s.base),
        client_id: Some("fawn-client".into()),
        client_secret: Some("client-secret-xyz".into()),
        scope: Some("tools:read".into()),
        audience: Some("mcp".into()),
        token_field: "tok".into(),
        token_type_field: "kind".into(),
        expires_in_field: "ttl".into(),
        refresh_skew_seconds: 1,
        extra_token_params: BTreeMap::from([("resource".to_string(), "r1".to_string())]),
        ..Default::default()
    }
}

#[tokio::test]
async fn oauth_token_is_injected_and_refreshed_before_expiry() {
    let oauth = Arc::new(OAuth {
        ttl: 4,
        ..Default::default()
    });
    let s = http_server(Some(oauth.clone())).await;
    let m = manager(vec![(
        "secure",
        McpServerConfig {
            oauth: Some(oauth_cfg(&s)),
            ..http_cfg(&s.url())
        },
    )]);
    let tools = tools(&m).await;
    assert_eq!(names(&tools), prefixed("secure"));

    let form = oauth.forms.lock().unwrap()[0].clone();
    let want = [
        ("grant_type", "client_credentials"),
        ("client_id", "fawn-client"),
        ("client_secret", "client-secret-xyz"),
        ("scope", "tools:read"),
        ("audience", "mcp"),
        ("resource", "r1"),
    ];
    for (k, v) in want {
        assert_eq!(form.get(k).map(String::as_str), Some(v), "form field {k}");
    }
    assert!(
        oauth
            .accepted
            .lock()
            .unwrap()
            .iter()
            .all(|a| a == "Bearer token-1")
    );

    let echo = find(&tools, "secure_echo");
    assert_eq!(
        text(&call(&echo, json!({"text": "a"})).await.unwrap()),
        "echo: a"
    );
    let issued_before = oauth.issued.lock().unwrap().len();
    assert_eq!(issued_before, 1);

    // The token lives 4 s and is refreshed 1 s before it expires.
    tokio::time::sleep(Duration::from_millis(3300)).await;
    assert_eq!(
        text(&call(&echo, json!({"text": "b"})).await.unwrap()),
        "echo: b"
    );
    let issued = oauth.issued.lock().unwrap().clone();
    assert!(issued.len() >= 2, "{issued:?}");
    assert_eq!(
        oauth.accepted.lock().unwrap().last(),
        Some(&format!("Bearer {}", issued[issued.len() - 1]))
    );
}

#[tokio::test]
async fn a_rejected_token_is_replaced_once() {
    let oauth = Arc::new(OAuth {
        ttl: 3600,
        ..Default::default()
    });
    let s = http_server(Some(oauth.clone())).await;
    let m = manager(vec![(
        "secure",
        McpServerConfig {
            oauth: Some(oauth_cfg(&s)),
            ..http_cfg(&s.url())
        },
    )]);
    let tools = tools(&m).await;
    let echo = find(&tools, "secure_echo");
    oauth.revoked.lock().unwrap().push("token-1".into());
    // The server answers 401; a fresh token is fetched and the request sent again.
    let out = call(&echo, json!({"text": "again"})).await.unwrap();
    assert_eq!(text(&out), "echo: again");
    assert_eq!(oauth.issued.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn oauth_failures_are_reported_without_secrets() {
    let s = http_server(None).await; // no /token route: 404
    let m = manager(vec![(
        "secure",
        McpServerConfig {
            oauth: Some(oauth_cfg(&s)),
            ..http_cfg(&s.url())
        },
    )]);
    assert!(tools(&m).await.is_empty());
    let err = status_of(&m, "secure").await.error.unwrap();
    assert!(
        err.starts_with(&format!(
            "OAuth token request to {}/token failed: HTTP 404",
            s.base
        )),
        "{err}"
    );
    assert!(!err.contains("client-secret-xyz"), "{err}");
}

#[tokio::test]
async fn failed_server_is_retried_in_the_background() {
    // A port nothing listens on yet.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let m = manager(vec![(
        "later",
        McpServerConfig {
            session_init_timeout: 2.0,
            ..http_cfg(&format!("http://{addr}/mcp"))
        },
    )]);
    assert!(tools(&m).await.is_empty());
    assert_eq!(status_of(&m, "later").await.state, McpServerState::Failed);

    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let _server = http_server_on(listener, None).await;
    eventually("the server to be reconnected", || async {
        // Each call may start a background retry; none waits for it.
        let t = tools(&m).await;
        !t.is_empty()
    })
    .await;
    assert_eq!(
        status_of(&m, "later").await.state,
        McpServerState::Connected
    );
}

/// Writes `value` as the extensions file.
fn write_extensions(path: &Path, value: Value) {
    std::fs::write(path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
}

#[tokio::test]
async fn config_file_changes_take_effect_on_the_next_call() {
    let b = bridge().await;
    let s = http_server(None).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("extensions_config.json");
    write_extensions(
        &path,
        json!({"mcpServers": {
            "first": {"type": "stdio", "command": "bash", "args": ["-c", BRIDGE],
                      "env": {"MCP_PORT": "$BRIDGE_PORT"}}
        }}),
    );
    let options = McpOptions {
        load_options: LoadOptions::with_vars(
            dir.path(),
            [
                ("BRIDGE_PORT", b.port.to_string()),
                ("API_KEY", "key-from-env".to_string()),
            ],
        ),
        ..Default::default()
    };
    let m = McpManager::new(&ExtensionsConfig::default(), Some(path.clone()), options);
    assert_eq!(names(&tools(&m).await), prefixed("first"));
    assert_eq!(b.live.load(Ordering::SeqCst), 1);

    // Unchanged file: same session.
    assert_eq!(names(&tools(&m).await), prefixed("first"));
    assert_eq!(b.live.load(Ordering::SeqCst), 1);

    // Replace `first` by an HTTP server given with the MCP-spec `transport` key.
    write_extensions(
        &path,
        json!({"mcpServers": {
            "second": {"transport": "streamable-http", "url": s.url(),
                       "headers": {"X-Api-Key": "$API_KEY"}, "tool_name_prefix": false}
        }}),
    );
    let t = tools(&m).await;
    assert_eq!(names(&t), SERVER_TOOLS.to_vec());
    assert_eq!(
        text(
            &call(&find(&t, "echo"), json!({"text": "new"}))
                .await
                .unwrap()
        ),
        "echo: new"
    );
    // `$API_KEY` was resolved from the loader's environment.
    let keys = s.keys.lock().unwrap().clone();
    assert!(
        !keys.is_empty() && keys.iter().all(|k| k == "key-from-env"),
        "{keys:?}"
    );
    // The stale stdio session was closed.
    eventually("the old stdio session to close", || async {
        b.live.load(Ordering::SeqCst) == 0
    })
    .await;
    let status = m.servers_status().await;
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].name, "second");

    // A broken file keeps the previous servers and says why.
    std::fs::write(&path, b"{ not json").unwrap();
    assert_eq!(names(&tools(&m).await), SERVER_TOOLS.to_vec());
    let err = m.config_error().await.unwrap();
    assert!(err.contains("invalid JSON"), "{err}");

    // Fixed again, with a variable that is not set: also an error naming it.
    write_extensions(
        &path,
        json!({"mcpServers": {"third": {"type": "http", "url": "$NOT_SET_URL"}}}),
    );
    assert_eq!(names(&tools(&m).await), SERVER_TOOLS.to_vec());
    let err = m.config_error().await.unwrap();
    assert!(err.contains("NOT_SET_URL is not set"), "{err}");

    // Deleting the file removes every server.
    std::fs::remove_file(&path).unwrap();
    assert!(tools(&m).await.is_empty());
    assert!(m.servers_status().await.is_empty());
    assert_eq!(m.config_error().await, None);
}

#[tokio::test]
async fn reset_reconnects_on_next_use() {
    let b = bridge().await;
    let m = manager(vec![("local", stdio_cfg(&b))]);
    let old = tools(&m).await;
    m.reset().await;
    assert_eq!(status_of(&m, "local").await.state, McpServerState::Pending);
    // Tools handed out before the reset fail cleanly.
    let err = call(&find(&old, "local_echo"), json!({"text": "x"}))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Failed(_)), "{err:?}");
    let new = tools(&m).await;
    let out = call(&find(&new, "local_echo"), json!({"text": "y"}))
        .await
        .unwrap();
    assert_eq!(text(&out), "echo: y");
}

/// True when process `pid` is gone (or a zombie nobody reaped yet).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn a_timed_out_stdio_server_is_killed_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("child.pid");
    let m = manager(vec![(
        "tree",
        McpServerConfig {
            session_init_timeout: 1.5,
            ..bash_cfg(
                r#"sleep 300 & echo $! > "$PID_FILE"; wait"#,
                &[("PID_FILE", pid_file.to_str().unwrap())],
            )
        },
    )]);
    assert!(tools(&m).await.is_empty());
    assert_eq!(status_of(&m, "tree").await.state, McpServerState::Failed);
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The grandchild `sleep` goes with its process group.
    eventually("the server's child process to be killed", || async {
        process_gone(pid)
    })
    .await;
}

#[tokio::test]
async fn a_lost_session_fails_calls_cleanly_and_reconnects() {
    let b = bridge().await;
    let m = manager(vec![("flaky", stdio_cfg(&b))]);
    let before = tools(&m).await;
    assert_eq!(b.live.load(Ordering::SeqCst), 1);

    b.drop_connections();
    eventually("the server side to drop", || async {
        b.live.load(Ordering::SeqCst) == 0
    })
    .await;
    // The bridge exits, the client sees its stdout close.
    let echo = find(&before, "flaky_echo");
    let mut last = None;
    for _ in 0..100 {
        let r = call(&echo, json!({"text": "x"})).await;
        if r.is_err() {
            last = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some(Err(ToolError::Failed(err))) = last else {
        panic!("calls on a lost session must fail, got {last:?}")
    };
    assert!(err.contains("MCP tool 'echo' of server 'flaky'"), "{err}");

    // The next runs reconnect in the background.
    eventually("the session to be re-established", || async {
        !tools(&m).await.is_empty()
    })
    .await;
    assert_eq!(b.live.load(Ordering::SeqCst), 1);
    let t = tools(&m).await;
    let out = call(&find(&t, "flaky_echo"), json!({"text": "back"}))
        .await
        .unwrap();
    assert_eq!(text(&out), "echo: back");
}

#[tokio::test]
async fn a_tool_name_taken_by_an_earlier_server_is_skipped() {
    let s = http_server(None).await;
    let unprefixed = McpServerConfig {
        tool_name_prefix: false,
        ..http_cfg(&s.url())
    };
    let m = manager(vec![("a", unprefixed.clone()), ("b", unprefixed)]);
    let tools = tools(&m).await;
    // One `echo`, `fail`, … — from server `a` (servers are taken in name order).
    assert_eq!(names(&tools), SERVER_TOOLS.to_vec());
    assert_eq!(status_of(&m, "b").await.state, McpServerState::Connected);
}
