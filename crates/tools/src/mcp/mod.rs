//! MCP servers as tools.
//!
//! One [`McpManager`] per process (clone it to share) owns the sessions with the MCP
//! servers of `extensions_config.json` and hands each run their tools:
//!
//! * **Transports**: `stdio` (a child process in its own process group, with a scrubbed
//!   environment: only [`STDIO_PASSTHROUGH_ENV`] from Fawn's own plus the server's `env`;
//!   `cwd` from the server's `cwd` key or [`McpOptions::stdio_cwd`]) and streamable HTTP
//!   (`http`, `streamable-http`; `headers` sent on every request, OAuth `client_credentials`
//!   / `refresh_token` tokens injected as `Authorization` and refreshed before expiry), and
//!   the legacy HTTP+SSE transport (`sse`), which rmcp 3 removed, through a small client of
//!   our own (module `sse`) with the same headers and OAuth. `$VAR` values were resolved by the
//!   config loader.
//! * **Discovery**: lazy. The first [`McpManager::tools`] connects every enabled server in
//!   parallel, each bounded by its `session_init_timeout`; a server that fails or hangs is
//!   skipped with a warning, its error kept for [`McpManager::servers_status`], and retried
//!   in the background (after [`McpOptions::retry_after`]) without holding up runs. A session
//!   whose server went away is reconnected the same way.
//! * **Tools**: `<server>_<tool>` (or the bare tool name with `tool_name_prefix: false`),
//!   characters outside `[A-Za-z0-9_-]` replaced by `_`, cut at 64 characters (a name taken
//!   by an earlier server is skipped with a warning); the server's description and input
//!   schema; calls bounded by `tool_call_timeout`. Failures, timeouts and MCP `isError`
//!   results become error ToolMessages, never a failed run (module `tool` says how results
//!   become content).
//! * **Reload**: when built with the extensions file's path, every [`McpManager::tools`]
//!   re-reads it (a few KB) and compares its SHA-256 with the last one loaded; on change the
//!   file is loaded again through the config loader, sessions of removed or changed servers
//!   are closed, and new ones connected: edits take effect on the next run without a
//!   restart. A file that no longer loads keeps the previous servers and reports the error
//!   in [`McpManager::config_error`]. [`McpManager::reset`] drops everything.
//! * **Secrets**: header values, env values, OAuth secrets and fetched tokens are masked in
//!   every error text and log line.
//!
//! MCP HTTP URLs are trusted configuration (written by the administrator), so no SSRF
//! filtering is applied to them.
//!
//! Not implemented: DeerFlow's per-thread stdio session pools (sessions here are
//! process-wide), deferred tool loading (`tool_search`), routing hints and durable MCP tasks.

mod connect;
pub mod launch;
mod oauth;
mod redact;
mod sse;
pub(crate) mod tool;

pub use connect::STDIO_PASSTHROUGH_ENV;

use crate::Tool;
use connect::{ConnectContext, Connected, TransportKind, seconds};
use fawn_config::{ExtensionsConfig, LoadOptions, McpServerConfig, Settings};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;
use tool::{McpTool, parameters_of, sanitize_name};

/// Settings of an [`McpManager`] that are not in `extensions_config.json`.
#[derive(Clone, Debug)]
pub struct McpOptions {
    /// Working directory of stdio servers whose config has no `cwd`; `None` keeps Fawn's.
    pub stdio_cwd: Option<PathBuf>,
    /// How long a server that failed to connect waits before the next attempt.
    pub retry_after: Duration,
    /// Environment used to resolve `$VAR`s when the extensions file is re-read.
    pub load_options: LoadOptions,
}

impl Default for McpOptions {
    fn default() -> Self {
        McpOptions {
            stdio_cwd: None,
            retry_after: Duration::from_secs(30),
            load_options: LoadOptions::from_process(),
        }
    }
}

/// Where a server is in its life.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpServerState {
    /// `enabled: false`.
    Disabled,
    /// Configured; no connection attempted yet (no run asked for tools).
    Pending,
    Connecting,
    Connected,
    /// The last attempt failed; see `error`.
    Failed,
}

/// One server, as a status endpoint shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct McpServerStatus {
    pub name: String,
    pub enabled: bool,
    /// `stdio`, `http` or `sse` (or the unknown value given).
    pub transport: String,
    /// The configured `description`.
    pub description: Option<String>,
    pub state: McpServerState,
    /// Names of its tools as the model sees them (when connected).
    pub tools: Vec<String>,
    /// Why it is not connected (secrets masked).
    pub error: Option<String>,
}

/// A connection attempt's outcome.
enum Outcome {
    Ready {
        session: Arc<connect::Session>,
        tools: Vec<Arc<dyn Tool>>,
    },
    Failed {
        error: String,
        at: Instant,
    },
}

/// One enabled server's current connection attempt (or session).
struct Slot {
    /// The config the attempt uses; a different config replaces the slot.
    config: McpServerConfig,
    cell: Arc<OnceCell<Outcome>>,
    /// A reconnect in the background, which runs do not wait for.
    background: bool,
}

impl Slot {
    fn new(config: McpServerConfig, background: bool) -> Slot {
        Slot {
            config,
            cell: Arc::new(OnceCell::new()),
            background,
        }
    }

    fn close(&self) {
        if let Some(Outcome::Ready { session, .. }) = self.cell.get() {
            session.close();
        }
    }
}

#[derive(Default)]
struct State {
    /// The configured servers (after the last successful load).
    servers: BTreeMap<String, McpServerConfig>,
    /// SHA-256 of the extensions file last read (`None`: missing or never read).
    file_hash: Option<[u8; 32]>,
    loaded: bool,
    config_error: Option<String>,
    slots: BTreeMap<String, Slot>,
    /// `(server, tool)` pairs already warned about as duplicates.
    duplicates_warned: HashSet<(String, String)>,
}

struct Inner {
    initial: BTreeMap<String, McpServerConfig>,
    path: Option<PathBuf>,
    options: McpOptions,
    connect: ConnectContext,
    state: tokio::sync::Mutex<State>,
}

/// The process's MCP sessions and tools. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct McpManager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// Largest extensions file read on reload (the loader's own budget).
const MAX_EXTENSIONS_BYTES: usize = fawn_config::MAX_CONFIG_BYTES as usize;

impl McpManager {
    /// A manager for `extensions`. With `extensions_path`, the file is authoritative: it is
    /// read on first use and re-read (when changed) on every [`McpManager::tools`] (a missing
    /// file means no servers), and `extensions` is only used while the file has never
    /// loaded.
    pub fn new(
        extensions: &ExtensionsConfig,
        extensions_path: Option<PathBuf>,
        options: McpOptions,
    ) -> McpManager {
        let base_dir = extensions_path
            .as_deref()
            .and_then(|p| p.parent())
            .map(|p| p.to_path_buf());
        let http = fawn_net::client_builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        McpManager {
            inner: Arc::new(Inner {
                initial: extensions.mcp_servers.clone(),
                path: extensions_path,
                connect: ConnectContext {
                    http,
                    stdio_cwd: options.stdio_cwd.clone(),
                    base_dir,
                },
                options,
                state: tokio::sync::Mutex::new(State::default()),
            }),
        }
    }

    /// The manager of a loaded configuration (reloading from its extensions file).
    pub fn from_settings(settings: &Settings) -> McpManager {
        McpManager::new(
            &settings.extensions,
            settings.extensions_path.clone(),
            McpOptions::default(),
        )
    }

    /// The MCP tools for a run: picks up config changes, connects servers not yet
    /// connected (waiting at most their `session_init_timeout`), and returns the tools of
    /// every connected server. Servers that fail are left out (see
    /// [`McpManager::servers_status`]); this never fails.
    pub async fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let waits = {
            let mut st = self.inner.state.lock().await;
            self.refresh_config(&mut st).await;
            self.schedule(&mut st)
        };
        let pending = waits.into_iter().map(|(name, cfg, cell)| {
            let inner = self.inner.clone();
            async move {
                cell.get_or_init(|| attempt(inner, name, cfg, None)).await;
            }
        });
        futures::future::join_all(pending).await;

        let mut st = self.inner.state.lock().await;
        let State {
            slots,
            duplicates_warned,
            ..
        } = &mut *st;
        let mut seen = HashSet::new();
        let mut out: Vec<Arc<dyn Tool>> = Vec::new();
        for (name, slot) in slots.iter() {
            let Some(Outcome::Ready { tools, .. }) = slot.cell.get() else {
                continue;
            };
            for t in tools {
                if seen.insert(t.name().to_string()) {
                    out.push(t.clone());
                } else if duplicates_warned.insert((name.clone(), t.name().to_string())) {
                    tracing::warn!(
                        server = %name,
                        tool = %t.name(),
                        "MCP tool name already taken by another server; skipped"
                    );
                }
            }
        }
        out
    }

    /// Every configured server: state, tools, and the error that keeps it out.
    pub async fn servers_status(&self) -> Vec<McpServerStatus> {
        let st = self.inner.state.lock().await;
        let servers = if st.loaded {
            &st.servers
        } else {
            &self.inner.initial
        };
        servers
            .iter()
            .map(|(name, cfg)| {
                let transport = match TransportKind::of(cfg) {
                    Ok(k) => k.as_str().to_string(),
                    Err(_) => cfg.kind.clone().unwrap_or_default(),
                };
                let mut status = McpServerStatus {
                    name: name.clone(),
                    enabled: cfg.enabled,
                    transport,
                    description: cfg.description.clone(),
                    state: McpServerState::Pending,
                    tools: Vec::new(),
                    error: None,
                };
                if !cfg.enabled {
                    status.state = McpServerState::Disabled;
                    return status;
                }
                match st.slots.get(name).map(|s| s.cell.get()) {
                    None => {}
                    Some(None) => status.state = McpServerState::Connecting,
                    Some(Some(Outcome::Ready { tools, .. })) => {
                        status.state = McpServerState::Connected;
                        status.tools = tools.iter().map(|t| t.name().to_string()).collect();
                    }
                    Some(Some(Outcome::Failed { error, .. })) => {
                        status.state = McpServerState::Failed;
                        status.error = Some(error.clone());
                    }
                }
                status
            })
            .collect()
    }

    /// Why the extensions file could not be loaded the last time it changed (the previous
    /// servers stay in use meanwhile).
    pub async fn config_error(&self) -> Option<String> {
        self.inner.state.lock().await.config_error.clone()
    }

    /// Closes every session and forgets every tool; the next [`McpManager::tools`] reloads
    /// the config and connects again (DeerFlow's `POST /api/mcp/cache/reset`).
    pub async fn reset(&self) {
        let mut st = self.inner.state.lock().await;
        for slot in st.slots.values() {
            slot.close();
        }
        *st = State::default();
    }

    /// Closes every session (process shutdown). Same as [`McpManager::reset`].
    pub async fn shutdown(&self) {
        self.reset().await;
    }

    /// Re-reads the extensions file when it changed.
    async fn refresh_config(&self, st: &mut State) {
        let Some(path) = &self.inner.path else {
            if !st.loaded {
                st.servers = self.inner.initial.clone();
                st.loaded = true;
            }
            return;
        };
        let (hash, servers) = match tokio::fs::read(path).await {
            Ok(bytes) => {
                let hash: [u8; 32] = Sha256::digest(&bytes).into();
                if st.loaded && st.file_hash == Some(hash) {
                    return;
                }
                match self.parse(&bytes) {
                    Ok(servers) => (Some(hash), servers),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), "extensions file not reloaded: {e}");
                        st.file_hash = Some(hash);
                        st.config_error = Some(e);
                        if !st.loaded {
                            st.servers = self.inner.initial.clone();
                            st.loaded = true;
                        }
                        return;
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if st.loaded && st.file_hash.is_none() {
                    return;
                }
                if st.loaded {
                    tracing::warn!(path = %path.display(), "extensions file removed; no MCP servers");
                }
                (None, BTreeMap::new())
            }
            Err(e) => {
                let msg = format!("cannot read {}: {e}", path.display());
                if st.config_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!("{msg}");
                }
                st.config_error = Some(msg);
                if !st.loaded {
                    st.servers = self.inner.initial.clone();
                    st.loaded = true;
                }
                return;
            }
        };
        if st.loaded {
            tracing::info!(path = %path.display(), "extensions file changed; reloading MCP servers");
        }
        st.file_hash = hash;
        st.config_error = None;
        st.servers = servers;
        st.loaded = true;
    }

    /// The MCP servers of an extensions file, through the config loader.
    fn parse(&self, bytes: &[u8]) -> Result<BTreeMap<String, McpServerConfig>, String> {
        if bytes.len() > MAX_EXTENSIONS_BYTES {
            return Err("extensions file is too large".into());
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|_| "extensions file is not valid UTF-8".to_string())?;
        let base = self.inner.options.load_options.clone();
        // Only the extensions are wanted: keep `DATABASE_URL` from adding unrelated errors.
        let opts = LoadOptions::with_lookup(base.cwd.clone(), move |name| {
            (name != "DATABASE_URL").then(|| base.var(name)).flatten()
        });
        match fawn_config::load_str("", Some(text), &opts) {
            Ok(loaded) => {
                for w in &loaded.warnings {
                    tracing::warn!("extensions file: {w}");
                }
                Ok(loaded.settings.extensions.mcp_servers)
            }
            Err(e) => Err(e.to_string().replace('\n', "; ")),
        }
    }

    /// Brings the slots in line with the config: closes sessions of removed, disabled or
    /// changed servers, starts background reconnects of failed or lost ones, and returns the
    /// first attempts a run must wait for.
    fn schedule(&self, st: &mut State) -> Vec<(String, McpServerConfig, Arc<OnceCell<Outcome>>)> {
        let State { servers, slots, .. } = st;
        slots.retain(|name, slot| {
            let keep = servers
                .get(name)
                .is_some_and(|cfg| cfg.enabled && *cfg == slot.config);
            if !keep {
                slot.close();
            }
            keep
        });
        let mut waits = Vec::new();
        for (name, cfg) in servers.iter().filter(|(_, c)| c.enabled) {
            // The error of the failed attempt being retried.
            let previous = match slots.get(name).map(|s| s.cell.get()) {
                None => {
                    let slot = Slot::new(cfg.clone(), false);
                    waits.push((name.clone(), cfg.clone(), slot.cell.clone()));
                    slots.insert(name.clone(), slot);
                    continue;
                }
                // An attempt in flight: a first one is waited for too.
                Some(None) => {
                    if let Some(slot) = slots.get(name).filter(|s| !s.background) {
                        waits.push((name.clone(), cfg.clone(), slot.cell.clone()));
                    }
                    continue;
                }
                Some(Some(Outcome::Ready { session, .. })) => {
                    if session.is_alive() {
                        continue;
                    }
                    tracing::warn!(server = %name, "MCP session lost; reconnecting");
                    None
                }
                Some(Some(Outcome::Failed { at, error })) => {
                    if at.elapsed() < self.inner.options.retry_after {
                        continue;
                    }
                    Some(error.clone())
                }
            };
            // In the background: runs do not wait for a server that already failed.
            let slot = Slot::new(cfg.clone(), true);
            let cell = slot.cell.clone();
            let inner = self.inner.clone();
            let (name2, cfg2) = (name.clone(), cfg.clone());
            tokio::spawn(async move {
                cell.get_or_init(|| attempt(inner, name2, cfg2, previous))
                    .await;
            });
            slots.insert(name.clone(), slot);
        }
        waits
    }
}

/// One connection attempt, logged, as an [`Outcome`]. A retry failing the way the previous
/// attempt did (`previous`) is logged at debug level only.
async fn attempt(
    inner: Arc<Inner>,
    name: String,
    cfg: McpServerConfig,
    previous: Option<String>,
) -> Outcome {
    let started = Instant::now();
    match connect::connect(&name, &cfg, &inner.connect).await {
        Ok(Connected { session, tools }) => {
            let wrapped = wrap_tools(&name, &cfg, &session, tools);
            tracing::info!(
                server = %name,
                tools = wrapped.len(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "MCP server connected"
            );
            Outcome::Ready {
                session,
                tools: wrapped,
            }
        }
        Err(error) => {
            if previous.as_deref() == Some(error.as_str()) {
                tracing::debug!(server = %name, "MCP server still failing: {error}");
            } else {
                tracing::warn!(server = %name, "MCP server skipped: {error}");
            }
            Outcome::Failed {
                error,
                at: Instant::now(),
            }
        }
    }
}

fn wrap_tools(
    server: &str,
    cfg: &McpServerConfig,
    session: &Arc<connect::Session>,
    tools: Vec<rmcp::model::Tool>,
) -> Vec<Arc<dyn Tool>> {
    let call_timeout = seconds(cfg.tool_call_timeout);
    tools
        .into_iter()
        .map(|t| {
            let remote = t.name.to_string();
            let name = if cfg.tool_name_prefix {
                sanitize_name(&format!("{server}_{remote}"))
            } else {
                sanitize_name(&remote)
            };
            let description = t
                .description
                .as_deref()
                .filter(|d| !d.trim().is_empty())
                .map(str::to_string)
                .or_else(|| t.title.clone())
                .unwrap_or_else(|| format!("Tool {remote} of MCP server {server}."));
            Arc::new(McpTool {
                name,
                remote,
                server: server.to_string(),
                description,
                parameters: Arc::new(parameters_of(&t.input_schema)),
                session: session.clone(),
                call_timeout,
            }) as Arc<dyn Tool>
        })
        .collect()
}
