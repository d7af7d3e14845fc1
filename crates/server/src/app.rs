//! Building and running the server: [`Application::build`] binds the port and starts the
//! run lifecycle ([`fawn_runtime::Runtime::start`]: database, models or the announced demo
//! model, shared services, graphs and their system assistants, recovery, background tasks);
//! [`Application::run_until_stopped`] serves until a signal or [`AppHandle::shutdown`], then
//! stops the runtime gracefully.

use crate::sse::StreamSettings;
use axum::serve::ListenerExt;
use fawn_checkpoint::BackendConfig;
use fawn_config::Settings;
use fawn_llm::ModelRegistry;
use fawn_runtime::broker::BrokerConfig;
use fawn_runtime::runs::QueueConfig;
use fawn_runtime::{Graphs, Runtime, RuntimeHandle, RuntimeOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub use fawn_runtime::Clock;

/// Everything that is not in `config.yaml`: where to listen and how the machinery is tuned.
#[derive(Clone)]
pub struct AppOptions {
    pub host: String,
    /// `0` picks a free port.
    pub port: u16,
    /// Overrides the database chosen by the settings (tests).
    pub backend: Option<BackendConfig>,
    /// Overrides the graph registry (tests, benchmarks).
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
    /// Internal webhook receivers trusted despite the SSRF guard
    /// (`FAWN_WEBHOOK_ALLOWED_HOSTS`).
    pub webhook_policy: fawn_runtime::webhook::WebhookPolicy,
    /// Allowed `Host` names and trusted browser origins ([`crate::access`]); the bound
    /// address is added when it is a specific one.
    pub access: crate::access::AccessPolicy,
    /// Listen beyond loopback although authentication is off (`--insecure-no-auth`).
    pub insecure_no_auth: bool,
    /// Authentication: off by default here (tests, embedding); `fawn serve` turns it on
    /// unless told otherwise.
    pub auth: crate::auth::AuthOptions,
    /// The Redis event bus between nodes, if any.
    pub redis_url: Option<String>,
    /// `POST /api/test-only/seed-runs` (off by default; `fawn serve` reads
    /// `DEERFLOW_ENABLE_TEST_SEED`), never in production.
    pub test_seed: crate::gateway::seed::TestSeed,
    /// The bearer token that lets a scraper read `/metrics` (`FAWN_METRICS_TOKEN`);
    /// `metrics.token` in `config.yaml` wins.
    pub metrics_token: Option<String>,
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
            webhook_policy: fawn_runtime::webhook::WebhookPolicy::from_env(),
            access: crate::access::AccessPolicy::from_env(),
            insecure_no_auth: false,
            auth: crate::auth::AuthOptions::disabled(),
            redis_url: None,
            test_seed: crate::gateway::seed::TestSeed::default(),
            metrics_token: std::env::var("FAWN_METRICS_TOKEN")
                .ok()
                .filter(|t| !t.trim().is_empty()),
        }
    }
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
    #[error(
        "refusing to listen on {host} with authentication disabled: anyone who can reach \
         the port could read and change every thread and spend the configured model keys. \
         Turn authentication on (drop --no-auth / DEER_FLOW_AUTH_DISABLED), listen on \
         127.0.0.1, or pass --insecure-no-auth (FAWN_INSECURE_NO_AUTH=1) on a network you \
         trust"
    )]
    Unauthenticated { host: String },
    #[error("authentication: {0}")]
    AuthSecret(#[from] fawn_auth::secret::SecretError),
    #[error("FAWN_METRICS_TOKEN must be at least {min} characters")]
    MetricsToken { min: usize },
    #[error(transparent)]
    Runtime(#[from] fawn_runtime::BuildError),
}

/// Whether `host` (an address or name to listen on) stays on this machine.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim().trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// State shared by every handler: the runtime, and how HTTP answers are shaped.
pub struct ServerState {
    pub rt: RuntimeHandle,
    pub stream: StreamSettings,
    pub body_limit: usize,
    /// `POST /internal/truncate` is served.
    pub test_hooks: bool,
    /// Allowed hosts and trusted origins.
    pub access: crate::access::AccessPolicy,
    /// Authentication: secret, options, lockout.
    pub auth: crate::auth::Auth,
    /// `POST /api/test-only/seed-runs` is served.
    pub test_seed: bool,
    /// The bearer token scrapers may read `/metrics` with.
    pub metrics_token: Option<String>,
}

impl std::fmt::Debug for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerState")
            .field("rt", &self.rt)
            .finish_non_exhaustive()
    }
}

/// Handlers read the runtime's parts (`app.store()`, `app.graphs`, …) through the state.
impl std::ops::Deref for ServerState {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        &self.rt
    }
}

pub type AppState = Arc<ServerState>;

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
        self.state.rt.shutdown.cancel();
    }

    /// Simulates a crash: every task of the run machinery is aborted without writing
    /// anything (the HTTP server task must be aborted by its owner).
    pub fn crash(&self) {
        self.state.rt.crash();
    }
}

impl Application {
    pub async fn build(settings: Settings, options: AppOptions) -> Result<Application, BuildError> {
        if !options.auth.enabled && !is_loopback_host(&options.host) {
            if !options.insecure_no_auth {
                return Err(BuildError::Unauthenticated {
                    host: options.host.clone(),
                });
            }
            tracing::warn!(
                host = %options.host,
                "listening beyond loopback WITHOUT authentication (--insecure-no-auth): anyone \
                 who can reach this port can read and change every thread and spend the \
                 configured model keys. Requests must name an allowed Host (loopback names, \
                 the bound address, FAWN_ALLOWED_HOSTS)."
            );
        }
        let metrics_token = match settings.app.metrics.token.clone() {
            Some(t) => Some(t),
            None => match options.metrics_token.clone() {
                Some(t) if t.trim().len() < fawn_config::types::MIN_METRICS_TOKEN_LEN => {
                    return Err(BuildError::MetricsToken {
                        min: fawn_config::types::MIN_METRICS_TOKEN_LEN,
                    });
                }
                other => other,
            },
        };
        let listener = bind_listener(&options.host, options.port).await?;
        let addr = axum::serve::Listener::local_addr(&listener).map_err(|e| BuildError::Bind {
            host: options.host.clone(),
            port: options.port,
            source: e,
        })?;
        let rt = Runtime::start(
            settings,
            RuntimeOptions {
                backend: options.backend.clone(),
                graphs: options.graphs.clone(),
                models: options.models.clone(),
                queue: options.queue.clone(),
                broker: options.broker.clone(),
                clock: options.clock.clone(),
                cron_interval: options.cron_interval,
                recover_all_on_startup: options.recover_all_on_startup,
                user_id: options.user_id.clone(),
                local_addr: Some(addr),
                webhook_policy: options.webhook_policy.clone(),
                redis_url: options.redis_url.clone(),
            },
        )
        .await?;
        let auth = crate::auth::Auth::new(options.auth.clone(), &rt.settings.home)?;
        if auth.enabled() {
            tracing::info!("authentication is on: sign in, or send an API key (x-api-key)");
        } else {
            tracing::warn!("authentication is OFF: every caller acts as the admin 'default'");
        }
        let seed = options.test_seed;
        if seed.requested && seed.production {
            tracing::warn!(
                "DEERFLOW_ENABLE_TEST_SEED is ignored in production; /api/test-only/seed-runs stays off"
            );
        } else if seed.enabled() {
            tracing::warn!("test-only route POST /api/test-only/seed-runs is ON");
        }
        let state = Arc::new(ServerState {
            metrics_token,
            test_seed: seed.enabled(),
            auth,
            stream: StreamSettings {
                heartbeat: options.heartbeat,
                keepalive: options.keepalive,
                shutdown: rt.shutdown.clone(),
            },
            rt,
            body_limit: options.body_limit,
            test_hooks: options.test_hooks,
            access: options.access.clone().with_bound_host(&options.host),
        });
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
        let token = state.rt.shutdown.clone();
        let signals = tokio::spawn(wait_for_signal(token.clone()));
        // A make-service resolves the routes' state once; serving the `Router` itself would
        // redo that (cloning the whole route table) for every accepted connection. The
        // client's address is kept for the login lockout.
        let result = axum::serve(
            self.listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(token.cancelled_owned())
        .await;
        signals.abort();
        state.rt.stop().await;
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
