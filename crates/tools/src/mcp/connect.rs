//! Opening one MCP session: the transport named by the config (`stdio`, streamable `http`,
//! legacy `sse`), the MCP handshake, and the tool listing — all within
//! `session_init_timeout`.

use super::oauth::{AuthedClient, TokenSource};
use super::redact::{Redactor, display_url};
use super::sse::LegacySse;
use fawn_config::McpServerConfig;
use http::{HeaderName, HeaderValue};
use process_wrap::tokio::{CommandWrap, ProcessGroup};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
};
use rmcp::service::{RoleClient, RunningService, ServiceError, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// Variables a stdio server gets from Fawn's own environment; nothing else is inherited
/// (API keys and database URLs in Fawn's environment stay out of MCP servers). Anything
/// else a server needs goes in its `env`.
pub const STDIO_PASSTHROUGH_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ",
    "TMPDIR", "TERM",
];

/// Lines of a stdio server's stderr kept for error messages.
const STDERR_TAIL_LINES: usize = 20;
/// Characters kept per stderr line.
const STDERR_LINE_CHARS: usize = 300;
/// Timeout used when a configured one is not a positive finite number of seconds.
const FALLBACK_TIMEOUT: Duration = Duration::from_secs(60);

/// How a server is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransportKind {
    Stdio,
    Http,
    Sse,
}

impl TransportKind {
    /// The kind named by `type` (or its alias `transport`); none means `stdio`.
    pub(crate) fn of(cfg: &McpServerConfig) -> Result<TransportKind, String> {
        let Some(kind) = cfg.kind.as_deref().map(str::trim).filter(|k| !k.is_empty()) else {
            return Ok(TransportKind::Stdio);
        };
        match kind.to_ascii_lowercase().as_str() {
            "stdio" => Ok(TransportKind::Stdio),
            "http" | "streamable-http" | "streamable_http" | "streamablehttp" => {
                Ok(TransportKind::Http)
            }
            "sse" => Ok(TransportKind::Sse),
            _ => Err(format!(
                "unknown MCP server type \"{kind}\"; expected one of stdio, http \
                 (streamable-http) or sse"
            )),
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TransportKind::Stdio => "stdio",
            TransportKind::Http => "http",
            TransportKind::Sse => "sse",
        }
    }
}

/// A configured number of seconds as a duration.
pub(crate) fn seconds(s: f64) -> Duration {
    if s.is_finite() && s > 0.0 {
        Duration::try_from_secs_f64(s).unwrap_or(FALLBACK_TIMEOUT)
    } else {
        FALLBACK_TIMEOUT
    }
}

/// What connecting needs besides the server's config.
#[derive(Clone, Debug)]
pub(crate) struct ConnectContext {
    pub http: reqwest::Client,
    /// Working directory of stdio servers without a `cwd` of their own.
    pub stdio_cwd: Option<PathBuf>,
    /// Directory a relative `cwd` is resolved against (the extensions file's).
    pub base_dir: Option<PathBuf>,
}

/// The last lines a stdio server wrote to stderr.
#[derive(Clone, Default)]
struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    done: Arc<tokio::sync::Notify>,
    finished: Arc<std::sync::atomic::AtomicBool>,
}

impl StderrTail {
    fn follow(&self, server: String, stderr: tokio::process::ChildStderr, redactor: Redactor) {
        let tail = self.clone();
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let line: String = redactor
                    .apply(&line)
                    .chars()
                    .take(STDERR_LINE_CHARS)
                    .collect();
                tracing::debug!(server = %server, "mcp stderr: {line}");
                if let Ok(mut lines) = tail.lines.lock() {
                    if lines.len() == STDERR_TAIL_LINES {
                        lines.pop_front();
                    }
                    lines.push_back(line);
                }
            }
            tail.finished
                .store(true, std::sync::atomic::Ordering::SeqCst);
            tail.done.notify_waiters();
        });
    }

    /// The tail as a suffix for an error message, after giving the reader a moment to
    /// catch up with a process that just exited.
    async fn suffix(&self) -> String {
        let notified = self.done.notified();
        if !self.finished.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = tokio::time::timeout(Duration::from_millis(300), notified).await;
        }
        let lines = match self.lines.lock() {
            Ok(l) => l.iter().cloned().collect::<Vec<_>>(),
            Err(_) => Vec::new(),
        };
        if lines.is_empty() {
            String::new()
        } else {
            format!("; stderr: {}", lines.join(" | "))
        }
    }
}

/// A live MCP session.
pub(crate) struct Session {
    service: RunningService<RoleClient, ClientConfig>,
    pub(crate) redactor: Redactor,
}

impl Session {
    /// False once the transport is gone (server exited, connection lost, closed).
    pub(crate) fn is_alive(&self) -> bool {
        !self.service.is_closed() && !self.service.peer().is_transport_closed()
    }

    /// Closes the session (the child process is shut down, the HTTP session deleted);
    /// calls in flight fail.
    pub(crate) fn close(&self) {
        self.service.cancellation_token().cancel();
    }

    pub(crate) async fn call(
        &self,
        tool: &str,
        args: Map<String, Value>,
    ) -> Result<CallToolResult, ServiceError> {
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
        self.service.call_tool(params).await
    }
}

/// A session and the tools its server listed.
pub(crate) struct Connected {
    pub session: Arc<Session>,
    pub tools: Vec<rmcp::model::Tool>,
}

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("fawn", env!("CARGO_PKG_VERSION")),
    )
}

/// Connects to server `name`, performs the handshake and lists its tools, all within its
/// `session_init_timeout`. Errors are texts with secrets masked.
pub(crate) async fn connect(
    name: &str,
    cfg: &McpServerConfig,
    cx: &ConnectContext,
) -> Result<Connected, String> {
    let redactor = Redactor::for_server(cfg);
    let kind = TransportKind::of(cfg)?;
    let limit = seconds(cfg.session_init_timeout);
    let tail = StderrTail::default();
    let attempt = async {
        let service = match kind {
            TransportKind::Stdio => stdio(name, cfg, cx, &redactor, &tail).await?,
            TransportKind::Http => http(name, cfg, cx, &redactor).await?,
            TransportKind::Sse => sse(name, cfg, cx, &redactor).await?,
        };
        let has_tools = service
            .peer()
            .peer_info()
            .is_none_or(|info| info.capabilities.tools.is_some());
        let tools = if has_tools {
            service
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| format!("listing tools failed: {e}"))?
        } else {
            Vec::new()
        };
        Ok(Connected {
            session: Arc::new(Session {
                service,
                redactor: redactor.clone(),
            }),
            tools,
        })
    };
    let result = match tokio::time::timeout(limit, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "did not finish initializing within {}s (session_init_timeout)",
            limit.as_secs_f64()
        )),
    };
    match result {
        Ok(c) => Ok(c),
        Err(e) => {
            let suffix = if kind == TransportKind::Stdio {
                tail.suffix().await
            } else {
                String::new()
            };
            Err(redactor.apply(&format!("{e}{suffix}")))
        }
    }
}

async fn stdio(
    name: &str,
    cfg: &McpServerConfig,
    cx: &ConnectContext,
    redactor: &Redactor,
    tail: &StderrTail,
) -> Result<RunningService<RoleClient, ClientConfig>, String> {
    let command = cfg
        .command
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .ok_or("a stdio server needs a command")?;
    for key in cfg.env.keys() {
        if let Some(why) = super::launch::env_key_refusal(key) {
            return Err(format!(
                "the environment variable '{key}' {why}; remove it from the server's env"
            ));
        }
    }
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(&cfg.args).env_clear();
    for var in STDIO_PASSTHROUGH_ENV {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    cmd.envs(&cfg.env);
    if let Some(dir) = working_dir(cfg, cx)? {
        match tokio::fs::metadata(&dir).await {
            Ok(m) if m.is_dir() => {}
            _ => {
                return Err(format!(
                    "working directory {} does not exist",
                    dir.display()
                ));
            }
        }
        cmd.current_dir(dir);
    }
    cmd.kill_on_drop(true);
    let mut wrap = CommandWrap::from(cmd);
    // Its own process group, so that closing the session stops the server's children too
    // (npx → node).
    wrap.wrap(ProcessGroup::leader());
    let (process, stderr) = TokioChildProcess::builder(wrap)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                format!("could not start `{command}`: not found (is it installed and on PATH?)")
            }
            _ => format!("could not start `{command}`: {e}"),
        })?;
    if let Some(stderr) = stderr {
        tail.follow(name.to_string(), stderr, redactor.clone());
    }
    client_config()
        .serve(process)
        .await
        .map_err(|e| format!("initialization failed: {e}"))
}

/// `cwd` from the server's config (relative to the extensions file), else the default.
fn working_dir(cfg: &McpServerConfig, cx: &ConnectContext) -> Result<Option<PathBuf>, String> {
    match cfg.extra.get("cwd") {
        None | Some(Value::Null) => Ok(cx.stdio_cwd.clone()),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(cx.stdio_cwd.clone()),
        Some(Value::String(s)) => {
            let p = Path::new(s.trim());
            Ok(Some(match (&cx.base_dir, p.is_absolute()) {
                (Some(base), false) => base.join(p),
                _ => p.to_path_buf(),
            }))
        }
        Some(_) => Err("cwd must be a string".into()),
    }
}

/// Headers rmcp sets itself.
const RESERVED_HEADERS: &[&str] = &["accept", "mcp-session-id", "last-event-id"];

/// The `url` of an HTTP or SSE server, checked.
fn url_of(cfg: &McpServerConfig, kind: TransportKind) -> Result<&str, String> {
    let url = cfg
        .url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| format!("an {} server needs a url", kind.as_str()))?;
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(url),
        _ => Err(format!("url {} is not an http(s) URL", display_url(url))),
    }
}

/// The configured `headers`, checked.
fn headers_of(cfg: &McpServerConfig) -> Result<HashMap<HeaderName, HeaderValue>, String> {
    let mut headers = HashMap::new();
    for (k, v) in &cfg.headers {
        let header = HeaderName::from_bytes(k.trim().as_bytes())
            .map_err(|_| format!("header name \"{k}\" is not a valid HTTP header name"))?;
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(format!(
                "header \"{k}\" is set by the MCP client and cannot be configured"
            ));
        }
        let mut value = HeaderValue::from_str(v)
            .map_err(|_| format!("the value of header \"{k}\" is not a valid HTTP header value"))?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    Ok(headers)
}

/// The server's OAuth token source, with a first token already fetched (so that a bad
/// token endpoint reads as such).
async fn token_of(
    name: &str,
    cfg: &McpServerConfig,
    cx: &ConnectContext,
    redactor: &Redactor,
) -> Result<Option<Arc<TokenSource>>, String> {
    let Some(o) = cfg.oauth.as_ref().filter(|o| o.enabled) else {
        return Ok(None);
    };
    let source = TokenSource::new(name, o.clone(), cx.http.clone(), redactor.clone())
        .map_err(|e| format!("OAuth: {e}"))?;
    source.authorization().await?;
    Ok(Some(Arc::new(source)))
}

async fn http(
    name: &str,
    cfg: &McpServerConfig,
    cx: &ConnectContext,
    redactor: &Redactor,
) -> Result<RunningService<RoleClient, ClientConfig>, String> {
    let url = url_of(cfg, TransportKind::Http)?;
    let headers = headers_of(cfg)?;
    let client = AuthedClient {
        http: cx.http.clone(),
        token: token_of(name, cfg, cx, redactor).await?,
    };
    let transport = StreamableHttpClientTransport::with_client(
        client,
        StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers),
    );
    client_config()
        .serve(transport)
        .await
        .map_err(|e| format!("initialization with {} failed: {e}", display_url(url)))
}

async fn sse(
    name: &str,
    cfg: &McpServerConfig,
    cx: &ConnectContext,
    redactor: &Redactor,
) -> Result<RunningService<RoleClient, ClientConfig>, String> {
    let url = url_of(cfg, TransportKind::Sse)?;
    let headers: http::HeaderMap = headers_of(cfg)?.into_iter().collect();
    let token = token_of(name, cfg, cx, redactor).await?;
    let transport = LegacySse::open(url, cx.http.clone(), headers, token).await?;
    client_config()
        .serve(transport)
        .await
        .map_err(|e| format!("initialization with {} failed: {e}", display_url(url)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_kind(kind: Option<&str>) -> McpServerConfig {
        McpServerConfig {
            kind: kind.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn transport_kinds() {
        assert_eq!(
            TransportKind::of(&with_kind(None)),
            Ok(TransportKind::Stdio)
        );
        assert_eq!(
            TransportKind::of(&with_kind(Some("stdio"))),
            Ok(TransportKind::Stdio)
        );
        for k in ["http", "streamable-http", "streamable_http", "HTTP"] {
            assert_eq!(
                TransportKind::of(&with_kind(Some(k))),
                Ok(TransportKind::Http)
            );
        }
        assert_eq!(
            TransportKind::of(&with_kind(Some("sse"))),
            Ok(TransportKind::Sse)
        );
        let err = TransportKind::of(&with_kind(Some("websocket"))).unwrap_err();
        assert!(
            err.contains("unknown MCP server type \"websocket\""),
            "{err}"
        );
    }

    #[test]
    fn bad_timeouts_fall_back() {
        assert_eq!(seconds(1.5), Duration::from_millis(1500));
        assert_eq!(seconds(0.0), FALLBACK_TIMEOUT);
        assert_eq!(seconds(f64::NAN), FALLBACK_TIMEOUT);
        assert_eq!(seconds(f64::INFINITY), FALLBACK_TIMEOUT);
        assert_eq!(seconds(1e300), FALLBACK_TIMEOUT);
    }
}
