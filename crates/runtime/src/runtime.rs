//! [`Runtime::start`] opens the database, resolves the models (or the announced in-process
//! demo model), starts the shared services, registers the graphs and their system
//! assistants, recovers runs a previous process left behind and spawns the background tasks
//! (dispatcher, reaper, sweeper, cron scheduler). [`Runtime::stop`] stops them gracefully.

use crate::broker::{Broker, BrokerConfig};
use crate::bus::EventBus;
use crate::graphs::{Graphs, system_assistant_id};
use crate::hooks::Hooks;
use crate::runs::{Queue, QueueConfig};
use crate::services::Services;
use crate::webhook::{WebhookClients, WebhookPolicy};
use chrono::{DateTime, Utc};
use fawn_checkpoint::{Assistant, BackendConfig, IfExists, NewAssistant, Persistence};
use fawn_config::Settings;
use fawn_llm::ModelRegistry;
use serde_json::{Map, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A source of "now" (tests use a manual clock to fire crons).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// How the runtime is tuned (everything that is not in `config.yaml`).
#[derive(Clone)]
pub struct RuntimeOptions {
    /// Overrides the database chosen by the settings (tests).
    pub backend: Option<BackendConfig>,
    /// Overrides the graph registry (tests, benchmarks).
    pub graphs: Option<Graphs>,
    /// Overrides the models built from `config.yaml`.
    pub models: Option<ModelRegistry>,
    pub queue: QueueConfig,
    pub broker: BrokerConfig,
    pub clock: Option<Clock>,
    /// How often the cron scheduler looks for due crons.
    pub cron_interval: Duration,
    /// Treat every `running` run as orphaned at startup (default: on for SQLite, whose file
    /// only one process serves; off for Postgres, where only expired leases are reaped).
    pub recover_all_on_startup: Option<bool>,
    /// Thread files live under `{home}/users/{user_id}/threads/{id}`.
    pub user_id: String,
    /// Where this process serves HTTP: webhooks given as `/path` are sent there.
    pub local_addr: Option<SocketAddr>,
    /// Internal webhook receivers trusted despite the SSRF guard.
    pub webhook_policy: WebhookPolicy,
    /// The Redis event bus between nodes (`REDIS_URL`, or DeerFlow's `stream_bridge`).
    pub redis_url: Option<String>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            backend: None,
            graphs: None,
            models: None,
            queue: QueueConfig::default(),
            broker: BrokerConfig::default(),
            clock: None,
            cron_interval: Duration::from_secs(1),
            recover_all_on_startup: None,
            user_id: "default".into(),
            local_addr: None,
            webhook_policy: WebhookPolicy::from_env(),
            redis_url: None,
        }
    }
}

impl std::fmt::Debug for RuntimeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeOptions")
            .field("backend", &self.backend)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("database: {0}")]
    Database(String),
    #[error("models: {0}")]
    Models(String),
    #[error("lead agent: {0}")]
    Agent(String),
    #[error("event bus: cannot reach Redis at the configured URL: {0}")]
    Bus(String),
    #[error("{0}")]
    Other(String),
}

/// The demo model answering because no model is configured.
#[derive(Debug, Clone)]
pub struct DemoInfo {
    pub name: String,
}

/// The run lifecycle of one process: storage, graphs, models, the queue and its workers,
/// the event logs, crons and the agent's shared services.
pub struct Runtime {
    pub settings: Settings,
    /// The database: the runtime's own for run, checkpoint and journal writes. Callers read
    /// it (and keep their own tables: assistants, store items, users) through
    /// [`Runtime::store`]; the server's `clippy.toml` forbids it the run lifecycle writes.
    pub(crate) store: Arc<dyn Persistence>,
    pub graphs: Graphs,
    pub models: ModelRegistry,
    /// The runs' event logs: the runtime's own (opened, fed and finished only here). Callers
    /// read them through [`Runtime::run_log`], [`Runtime::watch_thread`] and
    /// [`Runtime::thread_logs`], and join through [`crate::join`].
    pub(crate) broker: Broker,
    /// The in-process side of the queue (claims, executions, cancels): the runtime's own.
    /// Callers read its state through [`Runtime::queue_config`],
    /// [`Runtime::runs_executing_here`], [`Runtime::free_run_slots`] and
    /// [`Runtime::executes_here`].
    pub(crate) queue: Queue,
    pub webhooks: WebhookClients,
    pub webhook_policy: WebhookPolicy,
    pub demo: Option<DemoInfo>,
    pub user_id: String,
    pub cron_interval: Duration,
    pub cron_notify: tokio::sync::Notify,
    /// Sandbox provider, extensions file, skills, MCP and memory (agent and gateway routes).
    pub services: Services,
    /// Test seams (no-ops unless built for tests).
    pub hooks: Hooks,
    clock: Clock,
    local_addr: OnceLock<SocketAddr>,
    pub shutdown: CancellationToken,
    /// Assistants read by run creation, kept briefly (see [`Runtime::assistant`]).
    assistants: RwLock<HashMap<String, (Assistant, Instant)>>,
    /// The event bus between nodes (see [`crate::bus`]), set while the runtime is built.
    bus: OnceLock<Arc<dyn EventBus>>,
    /// `checkpointer.ttl` / `checkpointer.retention`, when they ask for anything: the
    /// sweeper's, and what a run's end prunes of its thread.
    pub(crate) retention: Option<crate::retention::RetentionPolicy>,
}

/// The runtime as its tasks and callers hold it.
pub type RuntimeHandle = Arc<Runtime>;

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("backend", &self.store.backend())
            .field("graphs", &self.graphs)
            .finish_non_exhaustive()
    }
}

/// How long run creation trusts a cached assistant.
pub const ASSISTANT_CACHE_TTL: Duration = Duration::from_secs(2);

fn join_issues<T: ToString>(issues: &[T]) -> String {
    issues
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The graphs served when the caller does not provide any: DeerFlow's lead agent
/// (`lead_agent`) with its middleware chains, config tools, built-ins, MCP tools (through the
/// shared manager), the cached skills catalog and long-term memory (queue and injection),
/// running tools in the shared local sandbox provider.
pub async fn default_graphs(
    settings: &Settings,
    models: &ModelRegistry,
    services: &Services,
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
        Arc::new(crate::services::McpToolSource(services.mcp.clone()));
    let mut deps = fawn_agent::AgentDeps::deerflow_with_mcp(
        settings.clone(),
        models.clone(),
        provider,
        bash_available,
        Some(mcp),
    )
    .map_err(|issues| BuildError::Agent(join_issues(&issues)))?;
    deps.skills = Arc::new(crate::services::CachedSkills(services.skills.clone()));
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

/// The in-process demo model, announced loudly.
fn demo_models() -> (DemoInfo, ModelRegistry) {
    let model: Arc<dyn fawn_llm::ChatModel> = Arc::new(fawn_llm::demo::DemoModel::default());
    let demo = DemoInfo {
        name: fawn_llm::demo::DEMO_MODEL_NAME.to_string(),
    };
    (demo, ModelRegistry::from_models(vec![model]))
}

impl Runtime {
    /// Opens everything and starts the background tasks.
    pub async fn start(
        settings: Settings,
        options: RuntimeOptions,
    ) -> Result<RuntimeHandle, BuildError> {
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
                let m = ModelRegistry::from_config(&settings.app)
                    .map_err(|issues| BuildError::Models(join_issues(&issues)))?;
                (m, None)
            }
            None => {
                let (demo, m) = demo_models();
                tracing::warn!(
                    "NO MODEL CONFIGURED: answering with the built-in DEMO model `{}` \
                     (it echoes, it is not a language model). Add `models:` to config.yaml \
                     for real answers.",
                    demo.name
                );
                (m, Some(demo))
            }
        };
        // Every model call, whoever makes it, is measured and traced in one place.
        let models = models.observed();
        let services =
            Services::start(&settings, &models, &options.user_id, demo.is_none()).await?;
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
        let webhooks =
            WebhookClients::new().map_err(|e| BuildError::Other(format!("webhook client: {e}")))?;
        // `queue.max_concurrent_runs` (or its environment variables) overrides the default.
        let mut queue_config = options.queue.clone();
        if let Some(n) = settings.app.queue.max_concurrent_runs {
            queue_config.max_concurrent_runs = usize::try_from(n).unwrap_or(usize::MAX);
        }
        tracing::info!(
            max_concurrent_runs = queue_config.max_concurrent_runs,
            "runs beyond this many at once wait in the queue"
        );
        let retention =
            crate::retention::RetentionPolicy::from_config(settings.app.checkpointer.as_ref());
        let rt = Arc::new(Runtime {
            retention,
            settings,
            store,
            graphs,
            models,
            broker: Broker::new(options.broker.clone()),
            queue: Queue::new(queue_config),
            webhooks,
            webhook_policy: options.webhook_policy.clone(),
            demo,
            user_id: options.user_id.clone(),
            cron_interval: options.cron_interval,
            cron_notify: tokio::sync::Notify::new(),
            services,
            hooks: Hooks::default(),
            clock: options.clock.clone().unwrap_or_else(|| Arc::new(Utc::now)),
            local_addr: OnceLock::new(),
            shutdown: CancellationToken::new(),
            assistants: RwLock::new(HashMap::new()),
            bus: OnceLock::new(),
        });
        let mut pg_bus = None;
        let bus: Arc<dyn EventBus> = match options
            .redis_url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
        {
            Some(url) => crate::bus::redis::RedisBus::connect(url, &rt)
                .await
                .map_err(|e| BuildError::Bus(e.to_string()))?,
            None if rt.store.backend() == "postgres" => {
                let b = crate::bus::postgres::PgBus::start(
                    rt.store.clone(),
                    rt.shutdown.clone(),
                    rt.queue.cfg.relay_poll,
                );
                pg_bus = Some(b.clone());
                b
            }
            None => Arc::new(crate::bus::LocalBus),
        };
        tracing::info!(bus = bus.kind(), "event bus");
        let m = fawn_telemetry::metrics();
        m.set_build_info(env!("CARGO_PKG_VERSION"), rt.store.backend(), bus.kind());
        m.runs_executing_max
            .set(i64::try_from(rt.queue.cfg.max_concurrent_runs).unwrap_or(i64::MAX));
        let _ = rt.bus.set(bus);
        if let Some(addr) = options.local_addr {
            let _ = rt.local_addr.set(addr);
        }

        // Startup recovery: runs a dead process left `running` go back to the queue and
        // resume from their last checkpoint.
        let horizon = if recover_all {
            Utc::now() + chrono::Duration::days(3650)
        } else {
            Utc::now()
        };
        crate::runs::reap(&rt, horizon).await;

        let q = &rt.queue;
        q.spawn(crate::runs::dispatcher(rt.clone()));
        q.spawn(crate::runs::reaper(rt.clone()));
        q.spawn(crate::threads::sweeper(rt.clone()));
        q.spawn(crate::retention::sweeper(rt.clone()));
        q.spawn(crate::crons::scheduler(rt.clone()));
        if let Some(signals) = rt.store.signals().await {
            if let Some(b) = &pg_bus {
                b.set_listening(true);
            }
            q.spawn(crate::runs::follow_signals(rt.clone(), signals));
        }
        q.notify.notify_one();
        Ok(rt)
    }

    /// The database, for reads and the callers' own tables (see the `store` field).
    pub fn store(&self) -> &Arc<dyn Persistence> {
        &self.store
    }

    /// How the queue is tuned (lease, polling, the cap on runs executing here).
    pub fn queue_config(&self) -> &QueueConfig {
        &self.queue.cfg
    }

    /// How many runs execute on this node now.
    pub fn runs_executing_here(&self) -> usize {
        self.queue.active_count()
    }

    /// How many more runs this node would start now (free slots of `max_concurrent_runs`).
    pub fn free_run_slots(&self) -> usize {
        self.queue.available()
    }

    /// Whether run `run_id` executes on this node.
    pub fn executes_here(&self, run_id: &str) -> bool {
        self.queue.is_local(run_id)
    }

    /// The event bus between nodes.
    pub fn bus(&self) -> &dyn EventBus {
        match self.bus.get() {
            Some(b) => b.as_ref(),
            None => &crate::bus::LocalBus,
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// Where this process serves HTTP, when known.
    pub fn local_port(&self) -> Option<u16> {
        self.local_addr.get().map(SocketAddr::port)
    }

    /// An assistant for run creation, from a short-lived cache: changes made through this
    /// process are seen at once, changes made by another process within
    /// [`ASSISTANT_CACHE_TTL`].
    pub async fn assistant(&self, id: &str) -> fawn_checkpoint::Result<Option<Assistant>> {
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
                cache.insert(id.to_string(), (a.clone(), Instant::now()));
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

    /// Graceful stop: no new claims, in-flight runs released for another worker (within the
    /// grace period), pending memory updates flushed, MCP sessions and the database closed.
    pub async fn stop(&self) {
        self.shutdown.cancel();
        crate::runs::shutdown(self).await;
        self.services.shutdown().await;
        self.store.close().await;
    }

    /// Simulates a crash: every task of the run machinery is aborted without writing
    /// anything.
    pub fn crash(&self) {
        self.queue.abort_all();
        self.shutdown.cancel();
    }

    /// Makes the cron scheduler look for due crons now.
    pub fn wake_crons(&self) {
        self.cron_notify.notify_one();
    }
}
