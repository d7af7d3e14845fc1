//! Building and running the server: [`Application::build`] binds the port, opens the
//! database, resolves models (or starts the announced demo model), starts the shared
//! services (sandbox provider, skills catalog, MCP manager, long-term memory; see
//! [`crate::gateway::Services`]), registers graphs and their system assistants, recovers runs
//! orphaned by a previous process and starts the background tasks (dispatcher, reaper,
//! sweeper, cron scheduler); [`Application::run_until_stopped`] serves until a signal or
//! [`AppHandle::shutdown`], then stops the runs, flushes pending memory updates and closes
//! MCP sessions.

use crate::graphs::{Graphs, system_assistant_id};
use crate::runs::{Queue, QueueConfig};
use crate::sse::StreamSettings;
use crate::stream::{Broker, BrokerConfig};
use axum::serve::ListenerExt;
use chrono::{DateTime, Utc};
use fawn_checkpoint::{BackendConfig, IfExists, NewAssistant, Persistence};
use fawn_config::Settings;
use fawn_llm::ModelRegistry;
use serde_json::{Map, json};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A source of "now" (tests use a manual clock to fire crons).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// Everything that is not in `config.yaml`: where to listen and how the machinery is tuned.
#[derive(Clone)]
pub struct AppOptions {
    pub host: String,
    /// `0` picks a free port.
    pub port: u16,
    /// Overrides the database chosen by the settings (tests).
    pub backend: Option<BackendConfig>,
    /// Overrides the graph registry (tests, or the binary once the lead agent is wired).
    pub graphs: Option<Graphs>,
    /// Overrides the models built from `config.yaml`.
    pub models: Option<ModelRegistry>,
    pub queue: QueueConfig,
    pub broker: BrokerConfig,
    /// SSE heartbeat comment interval.
    pub heartbeat: Duration,
    /// `/wait` and `/join` keep-alive interval.
    pub keepalive: Duration,
    pub body_limit: usize,
    /// Enables `POST /internal/truncate` (also `FAWN_TEST_HOOKS=1`).
    pub test_hooks: bool,
    pub clock: Option<Clock>,
    /// How often the cron scheduler looks for due crons.
    pub cron_interval: Duration,
    /// Treat every `running` run as orphaned at startup (default: on for SQLite, whose file
    /// only one process serves; off for Postgres, where only expired leases are reaped).
    pub recover_all_on_startup: Option<bool>,
    /// Thread files live under `{home}/users/{user_id}/threads/{id}`.
    pub user_id: String,
}

impl std::fmt::Debug for AppOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppOptions")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl Default for AppOptions {
    fn default() -> Self {
        AppOptions {
            host: "127.0.0.1".into(),
            port: 2024,
            backend: None,
            graphs: None,
            models: None,
            queue: QueueConfig::default(),
            broker: BrokerConfig::default(),
            heartbeat: Duration::from_secs(10),
            keepalive: Duration::from_secs(5),
            body_limit: crate::extract::DEFAULT_BODY_LIMIT,
            test_hooks: std::env::var("FAWN_TEST_HOOKS").is_ok_and(|v| v == "1" || v == "true"),
            clock: None,
            cron_interval: Duration::from_secs(1),
            recover_all_on_startup: None,
            user_id: "default".into(),
        }
    }
}

/// The demo model started when no model is configured.
pub struct DemoModel {
    pub name: String,
    pub base_url: String,
    _mock: fawn_testkit::MockLlm,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("port {port} on {host} is already in use; stop the other process or pass --port")]
    PortInUse { host: String, port: u16 },
    #[error("cannot listen on {host}:{port}: {source}")]
    Bind {
        host: String,
        port: u16,
        source: std::io::Error,
    },
    #[error("database: {0}")]
    Database(String),
    #[error("models: {0}")]
    Models(String),
    #[error("demo model: {0}")]
    Demo(String),
    #[error("lead agent: {0}")]
    Agent(String),
}

/// State shared by every handler and background task.
pub struct Shared {
    pub settings: Settings,
    pub store: Arc<dyn Persistence>,
    pub graphs: Graphs,
    pub models: ModelRegistry,
    pub broker: Broker,
    pub queue: Queue,
    pub stream: StreamSettings,
    pub webhook_client: reqwest::Client,
    pub demo: Option<DemoModel>,
    pub body_limit: usize,
    pub test_hooks: bool,
    pub user_id: String,
    pub cron_interval: Duration,
    pub cron_notify: tokio::sync::Notify,
    /// Sandbox provider, extensions file, skills, MCP and memory (gateway routes and agent).
    pub gateway: crate::gateway::Services,
    clock: Clock,
    local_addr: OnceLock<SocketAddr>,
    pub shutdown: CancellationToken,
    /// Assistants read by run creation, kept briefly (see [`Shared::assistant`]).
    assistants: std::sync::RwLock<
        std::collections::HashMap<String, (fawn_checkpoint::Assistant, std::time::Instant)>,
    >,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("backend", &self.store.backend())
            .field("graphs", &self.graphs)
            .finish_non_exhaustive()
    }
}

pub type AppState = Arc<Shared>;

impl Shared {
    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    pub fn local_port(&self) -> Option<u16> {
        self.local_addr.get().map(SocketAddr::port)
    }

    /// An assistant for run creation, from a short-lived cache: changes made through this
    /// process are seen at once, changes made by another process within
    /// `ASSISTANT_CACHE_TTL`.
    pub async fn assistant(
        &self,
        id: &str,
    ) -> fawn_checkpoint::Result<Option<fawn_checkpoint::Assistant>> {
        {
            let cache = match self.assistants.read() {
                Ok(c) => c,
                Err(p) => p.into_inner(),
            };
            if let Some((a, at)) = cache.get(id)
                && at.elapsed() < ASSISTANT_CACHE_TTL
            {
                return Ok(Some(a.clone()));
            }
        }
        let found = self.store.get_assistant(id).await?;
        let mut cache = match self.assistants.write() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        match &found {
            Some(a) => {
                if cache.len() >= 1024 {
                    cache.clear();
                }
                cache.insert(id.to_string(), (a.clone(), std::time::Instant::now()));
            }
            None => {
                cache.remove(id);
            }
        }
        Ok(found)
    }

    /// Drops every cached assistant.
    pub fn forget_assistants(&self) {
        match self.assistants.write() {
            Ok(mut c) => c.clear(),
            Err(p) => p.into_inner().clear(),
        }
    }

    /// Drops a cached assistant (after this process changed or deleted it).
    pub fn forget_assistant(&self, id: &str) {
        let mut cache = match self.assistants.write() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        cache.remove(id);
    }
}

/// How long run creation trusts a cached assistant.
pub const ASSISTANT_CACHE_TTL: Duration = Duration::from_secs(2);

/// The listener type: every accepted connection gets `TCP_NODELAY`.
pub type Listener = axum::serve::TapIo<TcpListener, fn(&mut TcpStream)>;

fn set_nodelay(tcp: &mut TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY");
    }
}

/// Binds `host:port` with `TCP_NODELAY` on every accepted connection. A busy port is an
/// error, never silently replaced.
pub async fn bind_listener(host: &str, port: u16) -> Result<Listener, BuildError> {
    match TcpListener::bind((host, port)).await {
        Ok(l) => Ok(l.tap_io(set_nodelay as fn(&mut TcpStream))),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(BuildError::PortInUse {
            host: host.to_string(),
            port,
        }),
        Err(e) => Err(BuildError::Bind {
            host: host.to_string(),
            port,
            source: e,
        }),
    }
}

/// The graphs served when the caller does not provide any: DeerFlow's lead agent
/// (`lead_agent`) with its middleware chains, config tools, built-ins, MCP tools (through the
/// shared manager), the cached skills catalog and long-term memory (queue and injection),
/// running tools in the shared local sandbox provider.
pub async fn default_graphs(
    settings: &Settings,
    models: &ModelRegistry,
    services: &crate::gateway::Services,
) -> Result<Graphs, BuildError> {
    let provider = services.sandbox.clone();
    let bash_available = match provider.bash_mode().await {
        fawn_sandbox::BashMode::Sandboxed => true,
        fawn_sandbox::BashMode::Host(why) => {
            tracing::warn!("bash runs on the host, not sandboxed: {why}");
            true
        }
        fawn_sandbox::BashMode::Unavailable(why) => {
            tracing::warn!("bash is unavailable to the agent: {why}");
            false
        }
    };
    let settings = Arc::new(settings.clone());
    let mcp: Arc<dyn fawn_agent::ToolSource> =
        Arc::new(crate::gateway::McpToolSource(services.mcp.clone()));
    let mut deps = fawn_agent::AgentDeps::deerflow_with_mcp(
        settings.clone(),
        models.clone(),
        provider,
        bash_available,
        Some(mcp),
    )
    .map_err(|issues| {
        BuildError::Agent(
            issues
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        )
    })?;
    deps.skills = Arc::new(crate::gateway::CachedSkills(services.skills.clone()));
    if let Some(memory) = &services.memory {
        deps.memory = Some(memory.queue.clone());
        let reader: Arc<dyn fawn_middleware::MemoryReader> = memory.clone();
        let chain_deps = fawn_middleware::ChainDeps::new(settings)
            .with_write_todos(Some(Arc::new(fawn_tools::builtins::WriteTodosTool::new())))
            .with_memory(reader);
        deps.chains = Arc::new(fawn_agent::DeerFlowChains { deps: chain_deps });
    }
    Ok(Graphs::new().with(Arc::new(fawn_agent::LeadAgent::new(deps))))
}

async fn start_demo_model() -> Result<(DemoModel, ModelRegistry), BuildError> {
    let mock = fawn_testkit::MockLlm::start_with(
        fawn_testkit::MockConfig::default()
            .with_behavior(fawn_testkit::Behavior::Demo)
            .with_model("fawn-demo"),
    )
    .await
    .map_err(|e| BuildError::Demo(e.to_string()))?;
    let cfg = fawn_config::ModelConfig {
        name: "fawn-demo".into(),
        display_name: Some("Fawn demo model (no LLM configured)".into()),
        use_: "langchain_openai:ChatOpenAI".into(),
        model: Some("fawn-demo".into()),
        base_url: Some(mock.base_url()),
        api_key: Some("fawn-demo-no-key".into()),
        ..Default::default()
    };
    let model = fawn_llm::build_model(&cfg, 0, &fawn_llm::ProviderOptions::default()).map_err(
        |issues| {
            BuildError::Demo(
                issues
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        },
    )?;
    let demo = DemoModel {
        name: "fawn-demo".into(),
        base_url: mock.base_url(),
        _mock: mock,
    };
    Ok((demo, ModelRegistry::from_models(vec![model])))
}

/// A built server, ready to run.
pub struct Application {
    listener: Listener,
    addr: SocketAddr,
    state: AppState,
}

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Controls a running application from outside (tests, the binary's signal handler).
#[derive(Clone, Debug)]
pub struct AppHandle {
    pub state: AppState,
}

impl AppHandle {
    /// Graceful stop: no new claims, in-flight runs released, connections drained.
    pub fn shutdown(&self) {
        self.state.shutdown.cancel();
    }

    /// Simulates a crash: every task of the run machinery is aborted without writing
    /// anything (the HTTP server task must be aborted by its owner).
    pub fn crash(&self) {
        self.state.queue.abort_all();
        self.state.shutdown.cancel();
    }

    /// Makes the cron scheduler look for due crons now.
    pub fn tick_crons(&self) {
        self.state.cron_notify.notify_one();
    }
}

impl Application {
    pub async fn build(settings: Settings, options: AppOptions) -> Result<Application, BuildError> {
        let listener = bind_listener(&options.host, options.port).await?;
        let addr = axum::serve::Listener::local_addr(&listener).map_err(|e| BuildError::Bind {
            host: options.host.clone(),
            port: options.port,
            source: e,
        })?;
        let backend = match options.backend.clone() {
            Some(b) => b,
            None => BackendConfig::from_settings(&settings)
                .map_err(|e| BuildError::Database(e.to_string()))?,
        };
        if let BackendConfig::Sqlite { path } = &backend
            && let Some(dir) = path.parent()
        {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| BuildError::Database(format!("{}: {e}", dir.display())))?;
        }
        let store = fawn_checkpoint::open(&backend)
            .await
            .map_err(|e| BuildError::Database(e.to_string()))?;

        let (models, demo) = match options.models.clone() {
            Some(m) => (m, None),
            None if !settings.app.models.is_empty() => {
                let m = ModelRegistry::from_config(&settings.app).map_err(|issues| {
                    BuildError::Models(
                        issues
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; "),
                    )
                })?;
                (m, None)
            }
            None => {
                let (demo, m) = start_demo_model().await?;
                tracing::warn!(
                    "NO MODEL CONFIGURED: answering with the built-in DEMO model `{}` \
                     (a local mock, not a language model). Add `models:` to config.yaml \
                     for real answers.",
                    demo.name
                );
                (m, Some(demo))
            }
        };
        let services =
            crate::gateway::Services::start(&settings, &models, &options.user_id, demo.is_none())
                .await?;
        let graphs = match options.graphs.clone() {
            Some(g) => g,
            None => default_graphs(&settings, &models, &services).await?,
        };
        for graph_id in graphs.ids() {
            let mut meta = Map::new();
            meta.insert("created_by".into(), json!("system"));
            store
                .upsert_system_assistant(NewAssistant {
                    assistant_id: Some(system_assistant_id(graph_id)),
                    graph_id: graph_id.to_string(),
                    config: Map::new(),
                    context: Map::new(),
                    metadata: meta,
                    name: graph_id.to_string(),
                    description: None,
                    if_exists: IfExists::DoNothing,
                })
                .await
                .map_err(|e| BuildError::Database(format!("system assistant: {e}")))?;
        }
        let recover_all = options
            .recover_all_on_startup
            .unwrap_or(matches!(backend, BackendConfig::Sqlite { .. }));
        let shutdown = CancellationToken::new();
        let webhook_client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| BuildError::Bind {
                host: options.host.clone(),
                port: options.port,
                source: std::io::Error::other(e.to_string()),
            })?;
        let state = Arc::new(Shared {
            settings,
            store,
            graphs,
            models,
            broker: Broker::new(options.broker.clone()),
            queue: Queue::new(options.queue.clone()),
            stream: StreamSettings {
                heartbeat: options.heartbeat,
                keepalive: options.keepalive,
                shutdown: shutdown.clone(),
            },
            webhook_client,
            demo,
            body_limit: options.body_limit,
            test_hooks: options.test_hooks,
            user_id: options.user_id.clone(),
            cron_interval: options.cron_interval,
            cron_notify: tokio::sync::Notify::new(),
            gateway: services,
            clock: options.clock.clone().unwrap_or_else(|| Arc::new(Utc::now)),
            local_addr: OnceLock::new(),
            shutdown,
            assistants: std::sync::RwLock::new(std::collections::HashMap::new()),
        });
        let _ = state.local_addr.set(addr);

        // Startup recovery: runs a dead process left `running` go back to the queue and
        // resume from their last checkpoint.
        let horizon = if recover_all {
            Utc::now() + chrono::Duration::days(3650)
        } else {
            Utc::now()
        };
        crate::runs::reap(&state, horizon).await;

        let q = &state.queue;
        q.spawn(crate::runs::dispatcher(state.clone()));
        q.spawn(crate::runs::reaper(state.clone()));
        q.spawn(sweeper(state.clone()));
        q.spawn(crate::crons::scheduler(state.clone()));
        q.notify.notify_one();
        Ok(Application {
            listener,
            addr,
            state,
        })
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn address(&self) -> SocketAddr {
        self.addr
    }

    pub fn handle(&self) -> AppHandle {
        AppHandle {
            state: self.state.clone(),
        }
    }

    /// Serves until SIGINT/SIGTERM or [`AppHandle::shutdown`], then stops the run
    /// machinery within its grace period.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let state = self.state.clone();
        let router = crate::routes::router(state.clone());
        let token = state.shutdown.clone();
        let signals = tokio::spawn(wait_for_signal(token.clone()));
        // `into_make_service` resolves the routes' state once; serving the `Router` itself
        // would redo that (cloning the whole route table) for every accepted connection.
        let result = axum::serve(self.listener, router.into_make_service())
            .with_graceful_shutdown(token.cancelled_owned())
            .await;
        signals.abort();
        crate::runs::shutdown(&state).await;
        state.gateway.shutdown().await;
        state.store.close().await;
        result
    }
}

async fn wait_for_signal(token: CancellationToken) {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    token.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutting down");
    token.cancel();
}

/// Drops expired stream logs, expired threads (TTL) and expired store items.
async fn sweeper(app: AppState) {
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = app.queue.stopping.cancelled() => return,
        }
        ticks += 1;
        app.broker.sweep();
        if ticks.is_multiple_of(12) {
            let now = Utc::now();
            match app.store.expired_threads(now, 100).await {
                Ok(threads) => {
                    for t in threads {
                        let strategy = t.ttl.as_ref().map(|t| t.strategy).unwrap_or_default();
                        let ids = [t.thread_id.clone()];
                        if let Err(e) = app.store.prune_threads(&ids, strategy).await {
                            tracing::warn!(thread_id = %t.thread_id, error = %e, "TTL sweep failed");
                        } else if strategy == fawn_checkpoint::PruneStrategy::Delete {
                            crate::routes::threads::delete_thread_files(&app, &t.thread_id).await;
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "TTL sweep failed"),
            }
            if let Err(e) = app.store.sweep_expired_items(now).await {
                tracing::warn!(error = %e, "store TTL sweep failed");
            }
        }
    }
}
