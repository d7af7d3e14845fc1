//! `fawn`: the single binary. Parses flags, loads the configuration and hands over to the
//! server crate. Everything with behaviour lives in the library crates.

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc instead of the system allocator: a run allocates and frees many small JSON
/// values, and glibc malloc spent about a quarter of the server's CPU on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "fawn",
    version,
    about = "A LangGraph-Platform-compatible agent server that runs DeerFlow's lead agent.",
    long_about = "Fawn serves the LangGraph Platform HTTP API (assistants, threads, runs, state, \
history, store, SSE streaming) and runs DeerFlow's lead agent, with checkpoints in SQLite by \
default and in Postgres when DATABASE_URL is set. It reads DeerFlow's config.yaml and \
extensions_config.json as they are."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start the HTTP server.
    Serve(ServeArgs),
    /// Load and validate a config.yaml (and its extensions_config.json); print every problem
    /// with its key path. Exits 1 when the configuration cannot be used.
    CheckConfig {
        /// The config file; default: FAWN_CONFIG, DEER_FLOW_CONFIG_PATH, then ./config.yaml.
        path: Option<PathBuf>,
        /// Entries whose `use:` Fawn does not implement are errors, not skipped with a
        /// warning.
        #[arg(long)]
        strict: bool,
    },
    /// Create or upgrade the database schema (SQLite under the data dir, or DATABASE_URL),
    /// then exit. `serve` does this too at startup.
    Migrate {
        /// The config file; default: FAWN_CONFIG, DEER_FLOW_CONFIG_PATH, then ./config.yaml.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Accounts: `fawn user add EMAIL [--admin]`.
    #[command(subcommand)]
    User(UserCommand),
    /// API keys for SDK clients (`x-api-key` / LANGGRAPH_API_KEY): create, list, revoke.
    #[command(subcommand, name = "api-key")]
    ApiKey(KeyCommand),
    /// The database: where the bytes go, an online backup (SQLite), compaction (SQLite).
    #[command(subcommand)]
    Db(DbCommand),
}

#[derive(Subcommand, Debug)]
enum DbCommand {
    /// Sizes per table and index, the largest threads, the WAL and free space, and what
    /// retention (`checkpointer.ttl` / `checkpointer.retention`, or the flags below, which
    /// take precedence) would remove. Read-only; safe while the server runs.
    Stats {
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        retention: RetentionFlags,
    },
    /// A consistent copy of the SQLite database at PATH (a new file), taken while the
    /// server may be running: it holds every write committed when the copy began. Start
    /// Fawn on the copy to restore it. Postgres: use pg_dump (docs/operations.md).
    Backup {
        path: PathBuf,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Rewrites the SQLite database compactly and switches it to incremental auto-vacuum,
    /// so a running server hands freed space back from then on. Stop the server first:
    /// writes wait for as long as the rewrite takes.
    Vacuum {
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// `fawn db stats`: the retention to estimate, instead of the configured one.
#[derive(clap::Args, Debug, Default, Clone)]
struct RetentionFlags {
    /// Keep the step checkpoints of each thread's newest N turns (`retention.keep_turns`).
    #[arg(long, value_name = "N")]
    keep_turns: Option<u32>,
    /// Keep step checkpoints younger than D days (`retention.keep_days`).
    #[arg(long, value_name = "D")]
    keep_days: Option<f64>,
    /// Expire finished runs not updated for D days (`retention.runs_days`).
    #[arg(long, value_name = "D")]
    runs_days: Option<f64>,
    /// Remove threads idle for M minutes (`ttl.default_ttl`, strategy `delete`).
    #[arg(long, value_name = "M")]
    thread_ttl_minutes: Option<f64>,
}

impl RetentionFlags {
    /// The configured `checkpointer` section with the flags laid over it.
    fn over(
        &self,
        configured: Option<&fawn_config::CheckpointerConfig>,
    ) -> fawn_config::CheckpointerConfig {
        let mut cp = configured.cloned().unwrap_or_default();
        let mut ret = cp.retention.clone().unwrap_or_default();
        ret.keep_turns = self.keep_turns.or(ret.keep_turns);
        ret.keep_days = self.keep_days.or(ret.keep_days);
        ret.runs_days = self.runs_days.or(ret.runs_days);
        cp.retention = Some(ret);
        if let Some(m) = self.thread_ttl_minutes {
            let mut ttl = cp.ttl.clone().unwrap_or_default();
            ttl.default_ttl = Some(m);
            ttl.strategy = "delete".to_string();
            cp.ttl = Some(ttl);
        }
        cp
    }
}

#[derive(Subcommand, Debug)]
enum UserCommand {
    /// Create an account. Without --password-stdin it has no password: it can only act
    /// through API keys.
    Add {
        email: String,
        /// Make it an admin (the first admin can also be created from the web UI's setup).
        #[arg(long)]
        admin: bool,
        /// Read the password from the first line of standard input.
        #[arg(long)]
        password_stdin: bool,
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum KeyCommand {
    /// Mint a key acting for the account EMAIL and print it (it is shown only once).
    Create {
        email: String,
        /// A label to recognise the key by.
        #[arg(long, default_value = "api key")]
        name: String,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// List keys (never the keys themselves), of one account or of all.
    List {
        email: Option<String>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Revoke a key by its id (from `list`); it stops working at once.
    Revoke {
        key_id: String,
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Args, Debug, Clone)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1", env = "FAWN_HOST")]
    host: String,
    /// Port to listen on (a busy port is an error, never silently replaced).
    #[arg(long, default_value_t = 2024, env = "FAWN_PORT")]
    port: u16,
    /// The config file; default: FAWN_CONFIG, DEER_FLOW_CONFIG_PATH, then ./config.yaml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Runtime worker threads; default: one per CPU core. Fewer workers cost less CPU per
    /// run when runs rarely overlap (a worker waking another is most of the overhead of a
    /// lone run), more serve more concurrent runs; one worker also means a slow statement
    /// holds up every request until it finishes.
    #[arg(long, env = "FAWN_WORKERS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    workers: Option<u16>,
    /// Refuse to start when an entry's `use:` is not implemented by Fawn (by default such
    /// entries are skipped with a warning).
    #[arg(long, env = "FAWN_STRICT_CONFIG")]
    strict: bool,
    /// Turn authentication off: every caller acts as the admin `default` and nothing is
    /// per user (also DEER_FLOW_AUTH_DISABLED=1, ignored when DEER_FLOW_ENV or
    /// ENVIRONMENT is `production`). Only on loopback unless --insecure-no-auth.
    #[arg(long)]
    no_auth: bool,
    /// With authentication off, listen on a non-loopback address anyway: anyone who can
    /// reach the port can read and change every thread and spend the configured model
    /// keys. Without it, serve refuses such an address.
    #[arg(long, env = "FAWN_INSECURE_NO_AUTH")]
    insecure_no_auth: bool,
    /// On first start (authentication on, no account yet), create an admin with an API key
    /// and no password, print the key once and keep it in {data dir}/admin_api_key (mode
    /// 0600); the web UI's setup then gives that admin an email and a password. Default:
    /// only on a loopback address; `--first-admin-key` on any, `--first-admin-key=false`
    /// never.
    #[arg(
        long,
        env = "FAWN_FIRST_ADMIN_KEY",
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    first_admin_key: Option<bool>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { path, strict } => check_config(path, strict),
        Command::Migrate { config } => match migrate(config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fawn: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Serve(args) => match serve(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fawn: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::User(cmd) => {
            LOGS_TO_STDERR.store(true, std::sync::atomic::Ordering::Relaxed);
            report(user_command(cmd))
        }
        Command::ApiKey(cmd) => {
            LOGS_TO_STDERR.store(true, std::sync::atomic::Ordering::Relaxed);
            report(key_command(cmd))
        }
        Command::Db(cmd) => {
            LOGS_TO_STDERR.store(true, std::sync::atomic::Ordering::Relaxed);
            report(db_command(cmd))
        }
    }
}

fn report(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fawn: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The process environment plus the registries' checks of `use:` values, so that one
/// `check-config` run reports every problem.
fn load_options(path: Option<PathBuf>, strict: bool) -> fawn_config::LoadOptions {
    let opts = fawn_config::LoadOptions::from_process()
        .strict(strict)
        .validator(std::sync::Arc::new(fawn_llm::validate_models))
        .validator(std::sync::Arc::new(
            fawn_tools::registry::validate_tool_config,
        ))
        .validator(std::sync::Arc::new(fawn_sandbox::validate_sandbox_config));
    match path {
        Some(p) => opts.config_path(p),
        None => opts,
    }
}

/// Every problem of the configuration, one line each with its key path. Invalid skills are
/// warnings.
fn check_config(path: Option<PathBuf>, strict: bool) -> ExitCode {
    // Tracing destinations come from the environment (as DeerFlow's do): an enabled but
    // incomplete one is an error too.
    let trace_errors = match fawn_telemetry::trace::export::TraceConfig::from_env() {
        Ok(_) => Vec::new(),
        Err(errors) => errors,
    };
    let loaded = match fawn_config::load(&load_options(path, strict)) {
        Ok(l) if trace_errors.is_empty() => l,
        Ok(l) => {
            for e in &trace_errors {
                eprintln!("error: tracing: {e}");
            }
            for issue in &l.warnings {
                eprintln!("warning: {issue}");
            }
            eprintln!("config check failed: {} problem(s)", trace_errors.len());
            return ExitCode::FAILURE;
        }
        Err(errors) => {
            for issue in &errors.0 {
                eprintln!("error: {issue}");
            }
            for e in &trace_errors {
                eprintln!("error: tracing: {e}");
            }
            // Errors first, then what would be skipped or ignored: every problem at once.
            for issue in errors.warnings() {
                eprintln!("warning: {issue}");
            }
            eprintln!(
                "config check failed: {} problem(s)",
                errors.0.len() + trace_errors.len()
            );
            return ExitCode::FAILURE;
        }
    };
    let skills = fawn_tools::skills::SkillCatalog::scan(
        &loaded.settings.skills_dir,
        &loaded.settings.extensions.skills,
        &loaded.settings.app.skills.container_path,
    );
    for issue in &loaded.warnings {
        eprintln!("warning: {issue}");
    }
    for invalid in skills.invalid() {
        eprintln!("warning: {invalid} (skill not loaded)");
    }
    let s = &loaded.settings;
    match &s.config_path {
        Some(p) => println!("config OK: {}", p.display()),
        None => println!("config OK (no config file found; using defaults)"),
    }
    println!(
        "  models: {}, tools: {}, MCP servers: {}, skills: {} enabled of {}, data dir: {}",
        s.app.models.len(),
        s.app.tools.len(),
        s.extensions.mcp_servers.len(),
        skills.enabled().count(),
        skills.skills().len(),
        s.home.display()
    );
    ExitCode::SUCCESS
}

/// Commands whose standard output is their result (an API key, a list) log to stderr.
static LOGS_TO_STDERR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Log lines: the level from `FAWN_LOG`, else `RUST_LOG`, else `log_level` (default
/// `info`); the format from `FAWN_LOG_FORMAT`, else `log.format` (`text` or `json`: one
/// object per line, with the fields of every span it was written in — `request_id`,
/// `run_id`, `thread_id`, `trace_id`).
fn init_logging(level: Option<&str>, format: fawn_config::LogFormat) {
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    let default = level.unwrap_or("info").to_ascii_lowercase();
    let filter = tracing_subscriber::EnvFilter::try_from_env("FAWN_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let to_stderr = LOGS_TO_STDERR.load(std::sync::atomic::Ordering::Relaxed);
    // Colours only on a terminal: log files and CI output stay plain text.
    let ansi = if to_stderr {
        std::io::IsTerminal::is_terminal(&std::io::stderr())
    } else {
        std::io::IsTerminal::is_terminal(&std::io::stdout())
    };
    let writer = if to_stderr {
        BoxMakeWriter::new(std::io::stderr)
    } else {
        BoxMakeWriter::new(std::io::stdout)
    };
    let json = match std::env::var("FAWN_LOG_FORMAT")
        .ok()
        .as_deref()
        .map(str::trim)
    {
        Some(f) if f.eq_ignore_ascii_case("json") => true,
        Some(f) if f.eq_ignore_ascii_case("text") => false,
        _ => format == fawn_config::LogFormat::Json,
    };
    // A log write that fails (stdout closed by whoever read it) is dropped: reporting it
    // on stderr, closed too, would panic the task that logged.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .log_internal_errors(false);
    let _ = if json {
        builder
            .json()
            .with_current_span(false)
            .with_span_list(true)
            .try_init()
    } else {
        builder.with_ansi(ansi).try_init()
    };
}

fn load_settings(path: Option<PathBuf>, strict: bool) -> anyhow::Result<fawn_config::Settings> {
    let loaded = fawn_config::load(&load_options(path, strict))
        .map_err(|e| anyhow::anyhow!("invalid configuration:\n{e}"))
        .context("loading configuration")?;
    init_logging(
        loaded.settings.app.log_level.as_deref(),
        loaded.settings.app.log.format,
    );
    for w in &loaded.warnings {
        tracing::warn!("config: {w}");
    }
    Ok(loaded.settings)
}

fn runtime(workers: Option<u16>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(usize::from(n));
    }
    builder
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Raises the soft limit on open files to the hard limit: each streaming run holds one
/// socket to its client and one to its model, so the usual soft limit of 1024 would cap a
/// node at a few hundred runs. Logs what it did (or why not).
fn raise_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let show = |v: Option<u64>| v.map_or_else(|| "unlimited".to_string(), |n| n.to_string());
    if limit.current == limit.maximum {
        tracing::info!(
            open_files = %show(limit.current),
            "open file limit (soft = hard)"
        );
        return;
    }
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::info!(
            from = %show(limit.current),
            to = %show(limit.maximum),
            "raised the open file limit to its hard limit"
        ),
        Err(e) => tracing::warn!(
            soft = %show(limit.current),
            hard = %show(limit.maximum),
            error = %e,
            "could not raise the open file limit; concurrent streams are capped by it"
        ),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let settings = load_settings(args.config.clone(), args.strict)?;
    raise_fd_limit();
    let tracing_config =
        fawn_telemetry::trace::export::TraceConfig::from_env().map_err(|errors| {
            let lines: Vec<String> = errors.iter().map(|e| format!("  tracing: {e}")).collect();
            anyhow::anyhow!("invalid configuration:\n{}", lines.join("\n"))
        })?;
    runtime(args.workers)?.block_on(async move {
        if fawn_telemetry::trace::install(&tracing_config).context("starting trace export")? {
            tracing::info!(
                destinations = ?fawn_telemetry::trace::destinations(),
                capture_inputs = tracing_config.capture_inputs,
                capture_outputs = tracing_config.capture_outputs,
                "exporting traces"
            );
        }
        let mut auth = fawn_server::auth::AuthOptions::from_env();
        if args.no_auth {
            auth.enabled = false;
        }
        let mut options = fawn_server::AppOptions {
            host: args.host.clone(),
            port: args.port,
            insecure_no_auth: args.insecure_no_auth,
            auth,
            test_seed: fawn_server::gateway::seed::TestSeed::from_env(),
            ..fawn_server::AppOptions::default()
        };
        let ownership = &settings.app.run_ownership;
        options.queue.lease = std::time::Duration::from_secs(ownership.lease_seconds.max(1));
        options.queue.reap_grace = std::time::Duration::from_secs(ownership.grace_seconds);
        let bridge = &settings.app.stream_bridge;
        options.redis_url = match bridge.type_.as_deref() {
            Some("redis") => bridge
                .redis_url
                .clone()
                .or_else(|| std::env::var("REDIS_URL").ok()),
            _ => std::env::var("REDIS_URL").ok(),
        }
        .filter(|u| !u.trim().is_empty());
        // SIGTERM: runs get 10 s to finish before they are released to another node.
        options.queue.drain = std::time::Duration::from_secs(10);
        if !ownership.heartbeat_enabled {
            tracing::warn!(
                "run_ownership.heartbeat_enabled: false is ignored: Fawn's run leases always heartbeat"
            );
        }
        let app = fawn_server::Application::build(settings, options)
            .await
            .context("starting the server")?;
        // Printed before the address is announced: whoever waits for that line has the key.
        let handle = app.handle();
        let first = fawn_server::auth::bootstrap::first_admin(
            &handle,
            &args.host,
            args.first_admin_key,
        );
        if let Some(first) = first.await.context("first start")? {
            eprintln!("{}", first.banner());
        }
        tracing::info!(
            "Fawn is listening on http://{} (LangGraph API at /, /api/langgraph and /api)",
            app.address()
        );
        let served = app.run_until_stopped().await.context("serving");
        // Spans still queued go out before the process ends.
        fawn_telemetry::trace::shutdown(std::time::Duration::from_secs(5)).await;
        served?;
        Ok(())
    })
}

/// Opens (and migrates) the configured database.
async fn open_store(
    settings: &fawn_config::Settings,
) -> anyhow::Result<std::sync::Arc<dyn fawn_checkpoint::Persistence>> {
    let backend = fawn_checkpoint::BackendConfig::from_settings(settings)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if let fawn_checkpoint::BackendConfig::Sqlite { path } = &backend
        && let Some(dir) = path.parent()
    {
        tokio::fs::create_dir_all(dir)
            .await
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    fawn_checkpoint::open(&backend)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("opening the database")
}

fn user_command(cmd: UserCommand) -> anyhow::Result<()> {
    let UserCommand::Add {
        email,
        admin,
        password_stdin,
        config,
    } = cmd;
    let password = if password_stdin {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("reading the password from stdin")?;
        let p = line.trim_end_matches(['\r', '\n']).to_string();
        fawn_auth::password::check_strength(&p).map_err(|e| anyhow::anyhow!(e))?;
        Some(fawn_auth::password::hash(&p)?)
    } else {
        None
    };
    let settings = load_settings(config, false)?;
    runtime(None)?.block_on(async move {
        let store = open_store(&settings).await?;
        let user = store
            .create_user(
                fawn_checkpoint::NewUser {
                    email: email.trim().to_string(),
                    password_hash: password,
                    system_role: if admin { "admin" } else { "user" }.into(),
                    needs_setup: false,
                },
                false,
            )
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        store.close().await;
        println!("created {} {} ({})", user.system_role, user.email, user.id);
        Ok(())
    })
}

fn key_command(cmd: KeyCommand) -> anyhow::Result<()> {
    let config = match &cmd {
        KeyCommand::Create { config, .. }
        | KeyCommand::List { config, .. }
        | KeyCommand::Revoke { config, .. } => config.clone(),
    };
    let settings = load_settings(config, false)?;
    runtime(None)?.block_on(async move {
        let store = open_store(&settings).await?;
        let result = run_key_command(store.as_ref(), cmd).await;
        store.close().await;
        result
    })
}

async fn find_user(
    store: &dyn fawn_checkpoint::Persistence,
    email: &str,
) -> anyhow::Result<fawn_checkpoint::User> {
    store
        .user_by_email(email.trim())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .ok_or_else(|| {
            anyhow::anyhow!("no account with email {email}; create it with `fawn user add`")
        })
}

async fn run_key_command(
    store: &dyn fawn_checkpoint::Persistence,
    cmd: KeyCommand,
) -> anyhow::Result<()> {
    match cmd {
        KeyCommand::Create { email, name, .. } => {
            let user = find_user(store, &email).await?;
            let (stored, key) = fawn_server::auth::routes::mint_key(store, &user, &name)
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
            eprintln!(
                "API key {} for {} ({}). It is shown only once:",
                stored.id, user.email, stored.name
            );
            println!("{key}");
        }
        KeyCommand::List { email, .. } => {
            let user = match &email {
                Some(e) => Some(find_user(store, e).await?),
                None => None,
            };
            let keys = store
                .list_api_keys(user.as_ref().map(|u| u.id.as_str()))
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            for k in keys {
                println!(
                    "{}\t{}…\t{}\t{}\t{}",
                    k.id,
                    k.prefix,
                    k.name,
                    k.user_id,
                    match k.revoked_at {
                        Some(t) => format!("revoked {}", t.to_rfc3339()),
                        None => "active".into(),
                    }
                );
            }
        }
        KeyCommand::Revoke { key_id, .. } => {
            if store
                .revoke_api_key(&key_id)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?
            {
                println!("revoked {key_id}");
            } else {
                anyhow::bail!("no active key with id {key_id}");
            }
        }
    }
    Ok(())
}

fn migrate(config: Option<PathBuf>) -> anyhow::Result<()> {
    let settings = load_settings(config, false)?;
    runtime(None)?.block_on(async move {
        let backend = fawn_checkpoint::BackendConfig::from_settings(&settings)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if let fawn_checkpoint::BackendConfig::Sqlite { path } = &backend
            && let Some(dir) = path.parent()
        {
            tokio::fs::create_dir_all(dir)
                .await
                .with_context(|| format!("creating {}", dir.display()))?;
        }
        let store = fawn_checkpoint::open(&backend)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("opening the database")?;
        store.close().await;
        match &backend {
            fawn_checkpoint::BackendConfig::Sqlite { path } => {
                println!("database ready: SQLite {}", path.display())
            }
            fawn_checkpoint::BackendConfig::Postgres { schema, .. } => println!(
                "database ready: Postgres{}",
                schema
                    .as_deref()
                    .map(|s| format!(" (schema {s})"))
                    .unwrap_or_default()
            ),
        }
        Ok(())
    })
}

fn megabytes(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1_000_000.0)
}

/// `fawn db stats`: what a retention sweep would remove now, with the configured policy
/// (or the flags'), planned by the store's own sweep rules.
async fn print_retention_estimate(
    backend: &fawn_checkpoint::BackendConfig,
    settings: &fawn_config::Settings,
    flags: &RetentionFlags,
) -> anyhow::Result<()> {
    use fawn_runtime::retention::RetentionPolicy;
    let cp = flags.over(settings.app.checkpointer.as_ref());
    let Some(policy) = RetentionPolicy::from_config(Some(&cp)) else {
        println!(
            "\nretention: none configured (checkpointer.ttl / checkpointer.retention, or \
             --keep-turns, --keep-days, --runs-days, --thread-ttl-minutes)"
        );
        return Ok(());
    };
    let query = policy.query(fawn_checkpoint::ids::now());
    let e = fawn_checkpoint::admin::retention_estimate(backend, &query)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut rules = Vec::new();
    if let Some(k) = policy.keep_turns {
        rules.push(format!("keep_turns {k}"));
    }
    if let Some(d) = cp.retention.as_ref().and_then(|r| r.keep_days) {
        rules.push(format!("keep_days {d}"));
    }
    if let Some(d) = cp.retention.as_ref().and_then(|r| r.runs_days) {
        rules.push(format!("runs_days {d}"));
    }
    if let Some((_, strategy)) = policy.idle_threads {
        let m = cp
            .ttl
            .as_ref()
            .and_then(|t| t.default_ttl)
            .unwrap_or_default();
        rules.push(format!("default_ttl {m} min ({strategy:?})"));
    }
    println!("\nretention ({}) would remove now:", rules.join(", "));
    println!(
        "  {} threads, {} checkpoints, {} runs with {} journal rows: about {} of stored values",
        e.threads,
        e.checkpoints,
        e.runs,
        e.run_events,
        megabytes(e.bytes)
    );
    Ok(())
}

fn db_command(cmd: DbCommand) -> anyhow::Result<()> {
    let config = match &cmd {
        DbCommand::Stats { config, .. } | DbCommand::Vacuum { config } => config.clone(),
        DbCommand::Backup { config, .. } => config.clone(),
    };
    let settings = load_settings(config, false)?;
    let backend = fawn_checkpoint::BackendConfig::from_settings(&settings)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    runtime(Some(1))?.block_on(async move {
        match cmd {
            DbCommand::Stats { retention, .. } => {
                let s = fawn_checkpoint::admin::stats(&backend)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                match &backend {
                    fawn_checkpoint::BackendConfig::Sqlite { path } => {
                        println!("SQLite {} (schema version {})", path.display(), s.schema_version);
                        println!(
                            "database {}, WAL {}, free pages {}, auto_vacuum {}",
                            megabytes(s.db_bytes),
                            megabytes(s.wal_bytes),
                            megabytes(s.free_bytes),
                            s.auto_vacuum.as_deref().unwrap_or("?")
                        );
                        if s.auto_vacuum.as_deref() != Some("incremental") {
                            println!("  (`fawn db vacuum` converts it, so freed space goes back to the disk)");
                        }
                    }
                    fawn_checkpoint::BackendConfig::Postgres { schema, .. } => println!(
                        "Postgres{} (schema version {}): tables and indexes {}",
                        schema
                            .as_deref()
                            .map(|s| format!(" schema {s}"))
                            .unwrap_or_default(),
                        s.schema_version,
                        megabytes(s.db_bytes)
                    ),
                }
                println!("\ntables and indexes:");
                for o in s.objects.iter().filter(|o| o.bytes > 0) {
                    println!("  {:>10}  {:<5}  {}", megabytes(o.bytes), o.kind, o.name);
                }
                println!("\nlargest threads (stored values):");
                for t in &s.largest_threads {
                    println!("  {:>10}  {}", megabytes(t.bytes), t.thread_id);
                }
                print_retention_estimate(&backend, &settings, &retention).await?;
            }
            DbCommand::Backup { path, .. } => {
                let size = fawn_checkpoint::admin::backup(&backend, &path)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                println!("backup written: {} ({})", path.display(), megabytes(size));
            }
            DbCommand::Vacuum { .. } => {
                let v = fawn_checkpoint::admin::vacuum(&backend)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                println!(
                    "vacuumed: {} -> {} (auto_vacuum incremental)",
                    megabytes(v.bytes_before),
                    megabytes(v.bytes_after)
                );
            }
        }
        Ok(())
    })
}
