//! Server load benchmark: the real `fawn serve` binary (a child process, so its CPU and RSS
//! are measured alone) against the `fawn-mock-llm` binary, driven over HTTP.
//!
//! Workload per iteration: create a thread, then one tool-calling turn of the lead agent
//! (model → `present_files` → model), in `wait` mode or `stream` mode, at concurrency
//! 1 / 16 / 64, on SQLite and (when `BENCH_DATABASE_URL` or `TEST_DATABASE_URL` is set) on
//! Postgres. Reports runs/s, p50/p99 latency, time to the first SSE event, server CPU per
//! run, idle RSS and RSS after 10,000 threads. The full plan measures after a warm-up of 200
//! runs at c=16 (the first line printed after the idle RSS).
//!
//! ```text
//! cargo build --profile dist -p fawn -p fawn-testkit -p fawn-bench
//! target/dist/server_load            # [--quick] [--sqlite-only | --pg-only] [--workload deerflow]
//! target/dist/server_load --sqlite-only --only wait:1:2000 --only stream:16:4000
//! ```
//!
//! `--only MODE:CONCURRENCY:RUNS` (repeatable) runs just those loads on one server, after a
//! warm-up of 200 runs, and skips the RSS measurements: for profiling and A/B comparisons.
//!
//! `--workload deerflow` swaps today's minimal turn for the DeerFlow-shaped one: Fawn's
//! config turns title generation on (`title.model_name` is the mock, so a title costs one
//! more model call) and configures the file tools (`ls`, `read_file`, `glob`, `grep`,
//! `write_file`, `str_replace`), which every model request then offers.
//!
//! # Any LangGraph server
//!
//! `--target [NAME=]URL[@PID]` (repeatable) drives servers that are already running — Fawn
//! or the official LangGraph server — with this same client and workload, instead of
//! starting Fawn and the mock. Such servers must use a `fawn-mock-llm` started as
//! [`MOCK_ARGS`] say (`--mode rules --tool present_files ...`). Runs name `--assistant ID`
//! (default `lead_agent`; `--assistant NAME=ID` for one target, e.g. `official=agent`).
//! With a PID (`@PID`, or `--target-pid PID` for a single target) the server CPU per run is
//! the CPU of that process and all its descendants. Each target first gets a probe run
//! checked for the workload's shape (the `present_files` call, the answer after it and, for
//! `deerflow`, a title), then a warm-up (`--warmup N`, default 200 runs at c=16), then the
//! `--only` loads (default `wait:16:500` and `stream:16:500`) for `--rounds N` rounds; each
//! round runs each load on every target in turn, alternating which target goes first, and
//! a summary adds the rounds up per target. A target's lines end with `others N%`: the CPU
//! the rest of the machine used meanwhile, as a share of all cores (what else ran).
//!
//! ```text
//! target/dist/server_load --workload deerflow \
//!     --target fawn=http://127.0.0.1:2024@$FAWN_PID \
//!     --target official=http://127.0.0.1:2025@$OFFICIAL_PID --assistant official=agent
//! ```
//!
//! `--versus-official` does all of it in one command: it starts the mock, Fawn (release,
//! SQLite) and the official server (`scripts/official-server/run.sh`, or
//! `--official-script PATH`), then runs the DeerFlow-shaped loads above on both, alternating
//! (`--rounds`, default 3; `--runs N` per load, default 500).
//!
//! `--tracing-cost` measures what traces cost: it starts the mock, an in-process OTLP sink,
//! Fawn without any trace destination and Fawn exporting to the sink (and, with
//! `--base-fawn PATH`, another `fawn` binary, e.g. a build of the commit before
//! observability), runs the DeerFlow-shaped loads on each, alternating, and prints each
//! target's server CPU per run over the plain Fawn's.
//!
//! `--backends` sets Fawn on Postgres beside Fawn on SQLite: it starts the mock and both
//! servers (Postgres at `BENCH_DATABASE_URL` or `TEST_DATABASE_URL`, a schema of its own),
//! runs the DeerFlow-shaped loads on both, alternating which goes first, round after round
//! (`--rounds`, default 3), and prints Postgres over SQLite: runs/s and the box's CPU per
//! run (Fawn's plus, when the database runs on this machine, the database server's), for
//! the rounds added up and round by round with their median. Two servers loaded in turn
//! within one run see the same machine, where separate runs on a shared machine can differ
//! by a fifth; rounds still differ, and the spread of their ratios shows by how much.
//!
//! `--streams N` holds N streaming runs open at once against a slowly streaming mock (a
//! word every `--chunk-ms`, 100, for `--stream-secs`, 10) and reports errors, the server's
//! peak RSS and CPU, and first-event and chunk-delay percentiles (see `streams.rs`):
//!
//! ```text
//! target/release/server_load --streams 10000
//! ```
//!
//! SIGINT or SIGTERM stops the benchmark together with the servers and the mock it started.

#[path = "server_load/streams.rs"]
mod streams;

use anyhow::{Context, Result, bail};
use fawn_bench::{create_thread, wait_ok};
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Proc {
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child started in its own process group; dropping it kills the whole group (the
/// official server's script, the server and anything either started).
struct ProcGroup {
    child: Child,
}

impl Drop for ProcGroup {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bin(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("no exe dir")?;
    let p = dir.join(name);
    if !p.exists() {
        bail!(
            "{} not found; build it first (beside this binary): cargo build --profile dist -p fawn -p fawn-testkit -p fawn-bench",
            p.display()
        );
    }
    Ok(p)
}

/// The mock LLM's script, the same for every server measured: after the user's message
/// call `present_files`, after the tool result answer [`AFTER_TOOL`] (and echo anything
/// else, such as a title request). Servers driven with `--target` must use a
/// `fawn-mock-llm` started with these arguments.
const MOCK_ARGS: [&str; 8] = [
    "--mode",
    "rules",
    "--tool",
    "present_files",
    "--tool-args",
    r#"{"filepaths": ["/mnt/user-data/outputs/report.md"]}"#,
    "--after-tool",
    AFTER_TOOL,
];

/// The mock's answer after the tool result: the last message of every run.
const AFTER_TOOL: &str = "Done: the report is ready.";

/// [`MOCK_ARGS`] as one shell command line (single-quoted where needed).
fn mock_args_for_shell() -> String {
    MOCK_ARGS
        .iter()
        .map(|a| {
            if a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./:".contains(&b))
            {
                a.to_string()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn start_mock() -> Result<(Proc, String)> {
    let (child, url) = fawn_bench::start_mock_llm(MOCK_ARGS)?;
    Ok((Proc { child }, url))
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// What one run does.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Workload {
    /// Today's minimal turn: no title, no configured tools (the lead agent's built-ins only).
    Minimal,
    /// DeerFlow's shape: title generation on (one more model call per new thread) and the
    /// file tools configured, so every model request offers them.
    Deerflow,
}

impl Workload {
    fn parse(s: &str) -> Result<Workload> {
        match s {
            "minimal" => Ok(Workload::Minimal),
            "deerflow" => Ok(Workload::Deerflow),
            other => bail!("unknown workload {other:?} (minimal or deerflow)"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Workload::Minimal => "minimal",
            Workload::Deerflow => "deerflow",
        }
    }

    /// What this workload adds to Fawn's `config.yaml` after the model.
    fn fawn_config(self) -> &'static str {
        match self {
            Workload::Minimal => "title:\n  enabled: false\nmemory:\n  enabled: false\n",
            Workload::Deerflow => {
                "title:\n  enabled: true\n  model_name: mock\nmemory:\n  enabled: false\n\
                 tool_groups:\n  - name: file:read\n  - name: file:write\n\
                 tools:\n\
                 \x20 - name: ls\n    group: file:read\n    use: deerflow.sandbox.tools:ls_tool\n\
                 \x20 - name: read_file\n    group: file:read\n    use: deerflow.sandbox.tools:read_file_tool\n\
                 \x20 - name: glob\n    group: file:read\n    use: deerflow.sandbox.tools:glob_tool\n\
                 \x20 - name: grep\n    group: file:read\n    use: deerflow.sandbox.tools:grep_tool\n\
                 \x20 - name: write_file\n    group: file:write\n    use: deerflow.sandbox.tools:write_file_tool\n\
                 \x20 - name: str_replace\n    group: file:write\n    use: deerflow.sandbox.tools:str_replace_tool\n\
                 sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n"
            }
        }
    }
}

struct Server {
    _proc: Proc,
    url: String,
    pid: u32,
    _home: tempfile_dir::TempDir,
    /// The Postgres schema this server created (dropped by [`stop_server`]).
    pg_schema: Option<(String, String)>,
    /// The Postgres server's postmaster, when it runs on this machine (its CPU is the
    /// database's share of a run).
    db_pid: Option<u32>,
}

impl Server {
    /// This server as a load target: `lead_agent`, its own process's CPU.
    fn target(&self) -> Target {
        Target {
            name: String::new(),
            url: self.url.clone(),
            assistant: "lead_agent".to_string(),
            cpu: Cpu::Process(self.pid),
            db: self.db_pid,
        }
    }
}

/// Stops the server and drops the Postgres schema it used, so repeated runs leave nothing
/// behind in the database.
async fn stop_server(server: Server) -> Result<()> {
    let schema = server.pg_schema.clone();
    drop(server);
    if let Some((url, schema)) = schema {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        )))
        .execute(&mut conn)
        .await?;
        conn.close().await?;
    }
    Ok(())
}

mod tempfile_dir {
    /// A temporary directory removed on drop (no extra dependency).
    pub struct TempDir(pub std::path::PathBuf);
    impl TempDir {
        pub fn new() -> std::io::Result<TempDir> {
            let p = std::env::temp_dir().join(format!("fawn-bench-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&p)?;
            Ok(TempDir(p))
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

async fn start_server(
    mock_url: &str,
    postgres: Option<&str>,
    workload: Workload,
) -> Result<Server> {
    start_server_with(mock_url, postgres, workload, None, &[]).await
}

/// [`start_server`] with another `fawn` binary and extra environment variables.
async fn start_server_with(
    mock_url: &str,
    postgres: Option<&str>,
    workload: Workload,
    binary: Option<&Path>,
    env: &[(&str, String)],
) -> Result<Server> {
    let home = tempfile_dir::TempDir::new()?;
    let pg_schema = postgres.map(|url| {
        (
            url.to_string(),
            format!("bench_{}", uuid::Uuid::new_v4().simple()),
        )
    });
    let db = match &pg_schema {
        Some((url, schema)) => {
            format!("database:\n  backend: postgres\n  url: {url}\n  postgres_schema: {schema}\n")
        }
        None => String::new(),
    };
    let config = format!(
        "models:\n  - name: mock\n    use: langchain_openai:ChatOpenAI\n    model: fawn-mock\n    \
         base_url: {mock_url}\n    api_key: bench\n    max_retries: 0\n{}{db}",
        workload.fawn_config()
    );
    let cfg = home.0.join("config.yaml");
    std::fs::write(&cfg, config)?;
    let port = free_port()?;
    let program = match binary {
        Some(b) => b.to_path_buf(),
        None => bin("fawn")?,
    };
    let child = fawn_bench::fawn_serve(&program, port, &cfg, &home.0)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .spawn()
        .context("starting fawn serve")?;
    let pid = child.id();
    let db_pid = match postgres {
        Some(url) => postmaster_pid(url).await,
        None => None,
    };
    let server = Server {
        _proc: Proc { child },
        url: format!("http://127.0.0.1:{port}"),
        pid,
        _home: home,
        pg_schema,
        db_pid,
    };
    wait_ok(&server.url, Duration::from_secs(30), || Ok(()))
        .await
        .context("the server did not start")?;
    Ok(server)
}

/// The PID of the Postgres server behind `url` when it runs on this machine: the parent
/// of the backend serving a connection (Postgres forks a backend per connection from its
/// postmaster). `None` when the database is elsewhere or the process cannot be read.
async fn postmaster_pid(url: &str) -> Option<u32> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.ok()?;
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .ok()?;
    let parent = stat_fields(u32::try_from(backend).ok()?)
        .ok()?
        .get(1)?
        .parse::<u32>()
        .ok();
    let _ = conn.close().await;
    parent
}

/// Polls `GET {url}/ok` until it answers 2xx, `alive` fails or `limit` passes.
/// The official LangGraph server, started by `scripts/official-server/run.sh`.
struct Official {
    _group: ProcGroup,
    url: String,
    pid: u32,
    log: PathBuf,
    _dir: tempfile_dir::TempDir,
}

/// `scripts/official-server/run.sh` of the checkout this binary was built from.
fn default_official_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/official-server/run.sh")
}

/// Starts the official server over the mock. Its first start creates the script's venv
/// from PyPI, so it may take minutes; its output goes to a log file that a failure names.
async fn start_official(script: &Path, mock_url: &str) -> Result<Official> {
    if !script.exists() {
        bail!(
            "{} not found (give --official-script PATH)",
            script.display()
        );
    }
    let dir = tempfile_dir::TempDir::new()?;
    let log = dir.0.join("official-server.log");
    let out = std::fs::File::create(&log)?;
    let port = free_port()?;
    let child = Command::new("bash")
        .arg(script)
        .arg(port.to_string())
        .env("MOCK_LLM_URL", mock_url)
        .env("OFFICIAL_WORKSPACE_ROOT", dir.0.join("workspace"))
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", script.display()))?;
    let pid = child.id();
    // Owned by the group from here on, so that an early return or a signal kills it.
    let mut group = ProcGroup { child };
    let url = format!("http://127.0.0.1:{port}");
    let started = wait_ok(&url, Duration::from_secs(900), || {
        match group.child.try_wait()? {
            Some(status) => bail!("it exited with {status}"),
            None => Ok(()),
        }
    })
    .await;
    if let Err(e) = started {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "the official server did not start: {e:#}\n--- {} (last lines)\n{}",
            log.display(),
            tail.join("\n")
        );
    }
    Ok(Official {
        _group: group,
        url,
        pid,
        log,
        _dir: dir,
    })
}

/// Fields of `/proc/PID/stat` after the command name.
fn stat_fields(pid: u32) -> Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit(')').next().context("stat")?;
    Ok(after.split_whitespace().map(str::to_string).collect())
}

/// utime + stime of a process, in milliseconds.
fn cpu_ms(pid: u32) -> Result<f64> {
    let f = stat_fields(pid)?;
    let utime: f64 = f[11].parse()?;
    let stime: f64 = f[12].parse()?;
    // USER_HZ is 100 on Linux.
    Ok((utime + stime) * 10.0)
}

/// CPU of a process and all its live descendants, each with the CPU of its children that
/// already exited and were waited for (cutime + cstime), in milliseconds: what a server
/// that forks workers (the official server's supervisor, Python multiprocessing) costs.
fn tree_cpu_ms(root: u32) -> Result<f64> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut cpu: HashMap<u32, f64> = HashMap::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(pid) = entry?.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // A process may exit while the table is read: skip it.
        let Ok(f) = stat_fields(pid) else { continue };
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let ppid = f.get(1).and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
        children.entry(ppid).or_default().push(pid);
        cpu.insert(pid, (num(11) + num(12) + num(13) + num(14)) * 10.0);
    }
    if !cpu.contains_key(&root) {
        bail!("process {root} is gone");
    }
    let mut total = 0.0;
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        total += cpu.get(&pid).copied().unwrap_or(0.0);
        if let Some(c) = children.get(&pid) {
            todo.extend(c);
        }
    }
    Ok(total)
}

/// The processes of a target's server tree, for the report (`pid command` each).
fn tree_commands(root: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in dir.flatten() {
        if let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>()
            && let Ok(f) = stat_fields(pid)
            && let Some(ppid) = f.get(1).and_then(|v| v.parse::<u32>().ok())
        {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.push(format!("{pid} {}", cmd.trim()));
        if let Some(c) = children.get(&pid) {
            todo.extend(c);
        }
    }
    out
}

/// Busy CPU of the whole machine (all cores, every process), in milliseconds.
fn machine_busy_ms() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let cpu = stat.lines().next().context("/proc/stat is empty")?;
    let f: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse::<f64>())
        .collect::<Result<_, _>>()?;
    // user nice system idle iowait irq softirq steal, in USER_HZ (100 on Linux).
    let idle = f.get(3).copied().unwrap_or(0.0) + f.get(4).copied().unwrap_or(0.0);
    Ok((f.iter().sum::<f64>() - idle) * 10.0)
}

fn rss_mb(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    for l in status.lines() {
        if let Some(v) = l.strip_prefix("VmRSS:") {
            let kb: f64 = v.trim().trim_end_matches("kB").trim().parse()?;
            return Ok(kb / 1024.0);
        }
    }
    bail!("no VmRSS")
}

/// How a target's server CPU is read.
#[derive(Clone, Copy, Debug)]
enum Cpu {
    /// Not measured: no PID was given.
    Unknown,
    /// One process's utime + stime (the server this benchmark started itself).
    Process(u32),
    /// A process and its descendants ([`tree_cpu_ms`]).
    Tree(u32),
}

impl Cpu {
    fn read(self) -> Result<Option<f64>> {
        match self {
            Cpu::Unknown => Ok(None),
            Cpu::Process(pid) => cpu_ms(pid).map(Some),
            Cpu::Tree(pid) => tree_cpu_ms(pid).map(Some),
        }
    }
}

/// A server under load.
#[derive(Clone, Debug)]
struct Target {
    /// Empty for the server this benchmark started (its lines keep today's format).
    name: String,
    url: String,
    /// What runs name as `assistant_id` (a graph id works on both servers).
    assistant: String,
    cpu: Cpu,
    /// The database server's process tree, when it is on this machine (Postgres).
    db: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Wait,
    Stream,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Wait => "wait",
            Mode::Stream => "stream",
        }
    }
}

struct Sample {
    total: Duration,
    first_event: Option<Duration>,
}

fn run_body(assistant: &str) -> Value {
    json!({"assistant_id": assistant,
        "input": {"messages": [{"role": "user", "content": "write the report"}]},
        "stream_mode": ["values", "messages-tuple"]})
}

async fn one_iteration(client: &reqwest::Client, target: &Target, mode: Mode) -> Result<Sample> {
    let url = &target.url;
    let started = Instant::now();
    let tid = create_thread(client, url).await?;
    let body = run_body(&target.assistant);
    match mode {
        Mode::Wait => {
            fawn_bench::run_wait(client, url, &tid, &body).await?;
            Ok(Sample {
                total: started.elapsed(),
                first_event: None,
            })
        }
        Mode::Stream => {
            let sent = Instant::now();
            let r = client
                .post(format!("{url}/threads/{tid}/runs/stream"))
                .json(&body)
                .send()
                .await?
                .error_for_status()?;
            let mut s = r.bytes_stream();
            let mut first = None;
            let mut tail = Vec::new();
            while let Some(chunk) = s.next().await {
                let chunk = chunk?;
                if first.is_none() && chunk.windows(6).any(|w| w == b"event:") {
                    first = Some(sent.elapsed());
                }
                tail.extend_from_slice(&chunk);
                if tail.len() > 4096 {
                    tail.drain(..tail.len() - 4096);
                }
            }
            if tail.windows(12).any(|w| w == b"event: error") {
                bail!("run failed: {}", String::from_utf8_lossy(&tail));
            }
            Ok(Sample {
                total: started.elapsed(),
                first_event: first,
            })
        }
    }
}

/// The text of a message's content (a string or text blocks).
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.as_str().or_else(|| b.get("text").and_then(Value::as_str)))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// One checked run: the target does the workload's turn (model → `present_files` → model,
/// and a title for `deerflow`). Returns a one-line description of what it saw.
async fn probe(target: &Target, workload: Workload) -> Result<String> {
    let client = fawn_net::client();
    let tid = create_thread(&client, &target.url).await?;
    let r = client
        .post(format!("{}/threads/{tid}/runs/wait", target.url))
        .json(&run_body(&target.assistant))
        .send()
        .await?;
    let status = r.status();
    let v: Value = r.json().await?;
    if !status.is_success() || v.get("__error__").is_some() {
        bail!("{}: the probe run failed ({status}): {v}", target.url);
    }
    let messages = v["messages"]
        .as_array()
        .context("no messages in the state")?;
    let called = messages.iter().any(|m| {
        m["tool_calls"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["name"] == "present_files"))
    });
    let tool_answered = messages
        .iter()
        .any(|m| m["type"] == "tool" && m["name"] == "present_files");
    let last = messages.last().map(|m| content_text(&m["content"]));
    if !called || !tool_answered || last.as_deref() != Some(AFTER_TOOL) {
        bail!(
            "{}: the run is not model → present_files → model (is its mock started with {}?): {v}",
            target.url,
            MOCK_ARGS.join(" ")
        );
    }
    let title = v["title"].as_str().unwrap_or_default();
    if workload == Workload::Deerflow && title.is_empty() {
        bail!("{}: no title after the first turn: {v}", target.url);
    }
    let kinds: Vec<String> = messages
        .iter()
        .map(|m| {
            let kind = m["type"].as_str().unwrap_or("?");
            match m["tool_calls"].as_array().filter(|c| !c.is_empty()) {
                Some(calls) => format!(
                    "{kind}[{}]",
                    calls
                        .iter()
                        .filter_map(|c| c["name"].as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                None => kind.to_string(),
            }
        })
        .collect();
    Ok(format!(
        "messages {}; last {:?}; title {:?}",
        kinds.join(" "),
        AFTER_TOOL,
        title
    ))
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

/// What one load measured (or several added up, for the summary).
#[derive(Clone, Debug)]
struct LoadStats {
    mode: Mode,
    concurrency: usize,
    errors: usize,
    /// Seconds under load.
    elapsed: f64,
    /// Server CPU over the load, ms (`None`: no PID).
    server_cpu: Option<f64>,
    /// The database server's CPU over the load, ms (Postgres on this machine).
    db_cpu: Option<f64>,
    /// This benchmark's own CPU over the load, ms.
    client_cpu: f64,
    /// The mock LLM's CPU over the load, ms (when this benchmark started it).
    mock_cpu: Option<f64>,
    /// CPU the rest of the machine used over the load, ms: everything busy but the
    /// server, this benchmark and the mock (another build or test run skews the figures;
    /// without a PID the server's own CPU counts here too, and so does a mock this
    /// benchmark did not start).
    others_cpu: f64,
    /// Milliseconds per successful run.
    totals: Vec<f64>,
    /// Milliseconds to the first SSE event, per stream run.
    firsts: Vec<f64>,
}

impl LoadStats {
    fn runs(&self) -> usize {
        self.totals.len()
    }

    fn per_run(&self, ms: f64) -> f64 {
        ms / self.runs().max(1) as f64
    }

    fn first_p50(&self) -> f64 {
        pct(&mut self.firsts.clone(), 0.5)
    }

    /// [`LoadStats::others_cpu`] as a share of the machine's cores over the load, in %.
    fn others_pct(&self) -> f64 {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        100.0 * self.others_cpu / (self.elapsed * 1000.0 * cores as f64)
    }

    /// Adds another load of the same mode and concurrency.
    fn add(&mut self, other: &LoadStats) {
        self.errors += other.errors;
        self.elapsed += other.elapsed;
        self.server_cpu = self.server_cpu.zip(other.server_cpu).map(|(a, b)| a + b);
        self.db_cpu = self.db_cpu.zip(other.db_cpu).map(|(a, b)| a + b);
        self.client_cpu += other.client_cpu;
        self.mock_cpu = self.mock_cpu.zip(other.mock_cpu).map(|(a, b)| a + b);
        self.others_cpu += other.others_cpu;
        self.totals.extend(&other.totals);
        self.firsts.extend(&other.firsts);
    }

    /// One line, as the benchmark always printed it (a target's name first, when it has one).
    fn line(&self, name: &str) -> String {
        let first = if self.firsts.is_empty() {
            String::new()
        } else {
            format!(
                "  first event p50 {:.2} ms p99 {:.2} ms",
                self.first_p50(),
                pct(&mut self.firsts.clone(), 0.99)
            )
        };
        let cpu = match (self.server_cpu, self.db_cpu) {
            (Some(ms), Some(db)) => format!(
                "{:.2} ms/run + db {:.2} = {:.2} ms/run",
                self.per_run(ms),
                self.per_run(db),
                self.per_run(ms + db)
            ),
            (Some(ms), None) => format!("{:.2} ms/run", self.per_run(ms)),
            (None, _) => "n/a (no PID)".to_string(),
        };
        // A target's line also says how busy the rest of the machine was.
        let (name, others) = if name.is_empty() {
            (String::new(), String::new())
        } else {
            (
                format!(" {name:<10}"),
                format!("  others {:.0}%", self.others_pct()),
            )
        };
        let n = self.runs();
        format!(
            " {name} {:<6} c={:<3} runs={:<5} err={:<3} {:>7.1} runs/s  p50 {:>7.2} ms  p99 {:>7.2} ms  server CPU {cpu}{first}{others}",
            self.mode.name(),
            self.concurrency,
            n,
            self.errors,
            n as f64 / self.elapsed,
            pct(&mut self.totals.clone(), 0.5),
            pct(&mut self.totals.clone(), 0.99),
        )
    }
}

async fn measure(
    target: &Target,
    mode: Mode,
    concurrency: usize,
    iterations: usize,
    mock_pid: Option<u32>,
) -> Result<LoadStats> {
    let client = fawn_net::client_builder()
        .pool_max_idle_per_host(concurrency)
        .tcp_nodelay(true)
        .build()?;
    // Warm-up.
    for _ in 0..3 {
        one_iteration(&client, target, mode).await?;
    }
    let cpu0 = target.cpu.read()?;
    let db0 = target.db.map(tree_cpu_ms).transpose()?;
    let client0 = cpu_ms(std::process::id())?;
    let mock0 = mock_pid.map(cpu_ms).transpose()?;
    let machine0 = machine_busy_ms()?;
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client = client.clone();
        let target = target.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < iterations {
                out.push(one_iteration(&client, &target, mode).await);
            }
            out
        }));
    }
    let mut totals = Vec::new();
    let mut firsts = Vec::new();
    let mut errors = 0;
    for t in tasks {
        for s in t.await? {
            match s {
                Ok(s) => {
                    totals.push(s.total.as_secs_f64() * 1000.0);
                    if let Some(f) = s.first_event {
                        firsts.push(f.as_secs_f64() * 1000.0);
                    }
                }
                Err(e) => {
                    errors += 1;
                    if errors <= 3 {
                        eprintln!("  error: {e:#}");
                    }
                }
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let server_cpu = target.cpu.read()?.zip(cpu0).map(|(a, b)| a - b);
    let db_cpu = match (target.db, db0) {
        (Some(pid), Some(d0)) => Some(tree_cpu_ms(pid)? - d0),
        _ => None,
    };
    let client_cpu = cpu_ms(std::process::id())? - client0;
    let mock_cpu = match (mock_pid, mock0) {
        (Some(pid), Some(m0)) => Some(cpu_ms(pid)? - m0),
        _ => None,
    };
    let machine = machine_busy_ms()? - machine0;
    let others_cpu = (machine
        - server_cpu.unwrap_or(0.0)
        - db_cpu.unwrap_or(0.0)
        - client_cpu
        - mock_cpu.unwrap_or(0.0))
    .max(0.0);
    Ok(LoadStats {
        mode,
        concurrency,
        errors,
        elapsed,
        server_cpu,
        db_cpu,
        client_cpu,
        mock_cpu,
        others_cpu,
        totals,
        firsts,
    })
}

async fn load(target: &Target, mode: Mode, concurrency: usize, iterations: usize) -> Result<()> {
    let stats = measure(target, mode, concurrency, iterations, None).await?;
    println!("{}", stats.line(&target.name));
    Ok(())
}

async fn threads_rss(server: &Server, count: usize) -> Result<f64> {
    let client = fawn_net::client();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let client = client.clone();
        let url = server.url.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < count {
                let _ = client
                    .post(format!("{url}/threads"))
                    .json(&json!({"metadata": {"bench": true}}))
                    .send()
                    .await;
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    rss_mb(server.pid)
}

/// One `--only MODE:CONCURRENCY:RUNS` load.
fn parse_only(spec: &str) -> Result<(Mode, usize, usize)> {
    let parts: Vec<&str> = spec.split(':').collect();
    let [mode, c, n] = parts.as_slice() else {
        bail!("--only wants MODE:CONCURRENCY:RUNS, got {spec:?}");
    };
    let mode = match *mode {
        "wait" => Mode::Wait,
        "stream" => Mode::Stream,
        other => bail!("unknown mode {other:?} (wait or stream)"),
    };
    Ok((mode, c.parse()?, n.parse()?))
}

/// Just the `--only` loads on one warmed-up server.
async fn bench_only(
    name: &str,
    mock_url: &str,
    pg: Option<&str>,
    workload: Workload,
    only: &[(Mode, usize, usize)],
) -> Result<()> {
    println!("== {name}");
    let server = start_server(mock_url, pg, workload).await?;
    let target = server.target();
    load(&target, Mode::Wait, 16, 200).await?;
    for (mode, c, n) in only {
        load(&target, *mode, *c, *n).await?;
    }
    stop_server(server).await
}

async fn bench_backend(
    name: &str,
    mock_url: &str,
    pg: Option<&str>,
    workload: Workload,
    quick: bool,
) -> Result<()> {
    println!("== {name}");
    let server = start_server(mock_url, pg, workload).await?;
    let target = server.target();
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!("  idle RSS {:.1} MB", rss_mb(server.pid)?);
    // The first runs pay one-time costs (pool connections, statement caches, allocator
    // growth): they are the warm-up line, not part of the figures.
    let plan: &[(usize, usize)] = if quick {
        &[(1, 30), (16, 200), (64, 400)]
    } else {
        load(&target, Mode::Wait, 16, 200).await?;
        &[(1, 1000), (16, 1000), (64, 2000)]
    };
    for mode in [Mode::Wait, Mode::Stream] {
        for (c, n) in plan {
            load(&target, mode, *c, *n).await?;
        }
    }
    stop_server(server).await?;
    let server = start_server(mock_url, pg, workload).await?;
    let rss = threads_rss(&server, 10_000).await?;
    println!("  RSS after 10,000 threads {rss:.1} MB");
    stop_server(server).await?;
    Ok(())
}

/// How to load a set of targets side by side.
struct Plan {
    workload: Workload,
    loads: Vec<(Mode, usize, usize)>,
    rounds: usize,
    warmup: usize,
    /// The mock's PID, when this benchmark started it (its CPU is reported too).
    mock_pid: Option<u32>,
}

/// Probes, warms up and loads every target, round after round, alternating which target
/// goes first; then prints the rounds added up per target.
async fn bench_targets(targets: &[Target], plan: &Plan) -> Result<()> {
    println!(
        "== workload {}: {} round(s) of {} on {} target(s), same client",
        plan.workload.name(),
        plan.rounds,
        plan.loads
            .iter()
            .map(|(m, c, n)| format!("{}:{c}:{n}", m.name()))
            .collect::<Vec<_>>()
            .join(" "),
        targets.len()
    );
    for t in targets {
        println!(
            "  {:<10} {} assistant {:?} CPU {}",
            t.name,
            t.url,
            t.assistant,
            match t.cpu {
                Cpu::Unknown => "not measured (no PID)".to_string(),
                Cpu::Process(pid) => format!("of process {pid}"),
                Cpu::Tree(pid) => format!("of process tree {pid}"),
            }
        );
        if let Cpu::Tree(pid) | Cpu::Process(pid) = t.cpu {
            for p in tree_commands(pid) {
                println!("  {:<10}   {p}", "");
            }
        }
        println!("  {:<10} probe: {}", t.name, probe(t, plan.workload).await?);
    }
    if plan.warmup > 0 {
        println!("== warm-up (wait c=16, {} runs each)", plan.warmup);
        for t in targets {
            load(t, Mode::Wait, 16, plan.warmup).await?;
        }
    }
    // (target index, load index) → the rounds added up, and each round's own figures.
    let mut sums: HashMap<(usize, usize), LoadStats> = HashMap::new();
    let mut rounds: HashMap<(usize, usize), Vec<LoadStats>> = HashMap::new();
    for round in 0..plan.rounds {
        println!("== round {}/{}", round + 1, plan.rounds);
        for (li, (mode, c, n)) in plan.loads.iter().enumerate() {
            let mut order: Vec<usize> = (0..targets.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for ti in order {
                let t = &targets[ti];
                let stats = measure(t, *mode, *c, *n, plan.mock_pid).await?;
                println!("{}", stats.line(&t.name));
                rounds.entry((ti, li)).or_default().push(stats.clone());
                match sums.get_mut(&(ti, li)) {
                    Some(sum) => sum.add(&stats),
                    None => {
                        sums.insert((ti, li), stats);
                    }
                }
            }
        }
    }
    print_summary(targets, plan, &sums, &rounds);
    Ok(())
}

/// `ratios` as `a / b / c (median m)`, smallest first.
fn spread(mut ratios: Vec<f64>, digits: usize) -> String {
    ratios.sort_by(f64::total_cmp);
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.digits$}")).collect();
    format!(
        "{} (median {:.digits$})",
        each.join(" / "),
        pct(&mut ratios, 0.5)
    )
}

fn print_summary(
    targets: &[Target],
    plan: &Plan,
    sums: &HashMap<(usize, usize), LoadStats>,
    rounds: &HashMap<(usize, usize), Vec<LoadStats>>,
) {
    let ms = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.2}"));
    println!(
        "== summary: workload {}, {} round(s) added up",
        plan.workload.name(),
        plan.rounds
    );
    println!(
        "  {:<10} {:<6} {:>4} {:>6} {:>4} {:>8} {:>8} {:>8} {:>11} {:>12} {:>12} {:>10} {:>7}",
        "target",
        "mode",
        "c",
        "runs",
        "err",
        "runs/s",
        "p50 ms",
        "p99 ms",
        "1st ev p50",
        "server CPU",
        "client CPU",
        "mock CPU",
        "others"
    );
    println!(
        "  {:<10} {:<6} {:>4} {:>6} {:>4} {:>8} {:>8} {:>8} {:>11} {:>12} {:>12} {:>10} {:>7}",
        "", "", "", "", "", "", "", "", "ms", "ms/run", "ms/run", "ms/run", "% CPU"
    );
    for (li, _) in plan.loads.iter().enumerate() {
        for (ti, t) in targets.iter().enumerate() {
            let Some(s) = sums.get(&(ti, li)) else {
                continue;
            };
            let first = if s.firsts.is_empty() {
                "-".to_string()
            } else {
                format!("{:.2}", s.first_p50())
            };
            println!(
                "  {:<10} {:<6} {:>4} {:>6} {:>4} {:>8.1} {:>8.2} {:>8.2} {:>11} {:>12} {:>12.2} {:>10} {:>7.1}",
                t.name,
                s.mode.name(),
                s.concurrency,
                s.runs(),
                s.errors,
                s.runs() as f64 / s.elapsed,
                pct(&mut s.totals.clone(), 0.5),
                pct(&mut s.totals.clone(), 0.99),
                first,
                ms(s.server_cpu.map(|c| s.per_run(c))),
                s.per_run(s.client_cpu),
                ms(s.mock_cpu.map(|c| s.per_run(c))),
                s.others_pct(),
            );
        }
    }
    // Each target over the first (with two, the first over the second, as before).
    let pairs: Vec<(usize, usize)> = match targets.len() {
        2 => vec![(0, 1)],
        n => (1..n).map(|i| (i, 0)).collect(),
    };
    for (ai, bi) in pairs {
        let (a, b) = (&targets[ai], &targets[bi]);
        println!("== {} / {}", a.name, b.name);
        for (li, (mode, c, _)) in plan.loads.iter().enumerate() {
            let (Some(x), Some(y)) = (sums.get(&(ai, li)), sums.get(&(bi, li))) else {
                continue;
            };
            let rate = |s: &LoadStats| s.runs() as f64 / s.elapsed;
            let cpu = match (x.server_cpu, y.server_cpu) {
                (Some(cx), Some(cy)) => format!(
                    "server CPU/run {:.3}x ({:.1}x less)",
                    x.per_run(cx) / y.per_run(cy),
                    y.per_run(cy) / x.per_run(cx)
                ),
                _ => "server CPU/run n/a".to_string(),
            };
            // With a database server's CPU on either side, the box's: the server's plus it.
            let boxed =
                |s: &LoadStats| s.server_cpu.map(|c| s.per_run(c + s.db_cpu.unwrap_or(0.0)));
            let boxes = match (boxed(x), boxed(y)) {
                (Some(bx), Some(by)) if x.db_cpu.is_some() || y.db_cpu.is_some() => {
                    format!(", box CPU/run {:.3}x ({bx:.2} vs {by:.2} ms)", bx / by)
                }
                _ => String::new(),
            };
            let first = if x.firsts.is_empty() || y.firsts.is_empty() {
                String::new()
            } else {
                format!(
                    ", first event p50 {:.3}x ({:.1}x sooner)",
                    x.first_p50() / y.first_p50(),
                    y.first_p50() / x.first_p50()
                )
            };
            println!(
                "  {:<6} c={c:<3} runs/s {:.2}x, {cpu}{boxes}{first}",
                mode.name(),
                rate(x) / rate(y)
            );
            // Round by round: the two loads of a round ran one after the other, so their
            // ratio sees one state of a shared machine; the spread shows how far noise moves it.
            let (Some(xs), Some(ys)) = (rounds.get(&(ai, li)), rounds.get(&(bi, li))) else {
                continue;
            };
            if xs.len() < 2 {
                continue;
            }
            let pairs = xs.iter().zip(ys);
            let rates: Vec<f64> = pairs.clone().map(|(x, y)| rate(x) / rate(y)).collect();
            let cpus: Vec<f64> = pairs
                .filter_map(|(x, y)| match (boxed(x), boxed(y)) {
                    (Some(bx), Some(by)) if x.db_cpu.is_some() || y.db_cpu.is_some() => {
                        Some(bx / by)
                    }
                    _ => x
                        .server_cpu
                        .zip(y.server_cpu)
                        .map(|(cx, cy)| x.per_run(cx) / y.per_run(cy)),
                })
                .collect();
            let what = if x.db_cpu.is_some() || y.db_cpu.is_some() {
                "box"
            } else {
                "server"
            };
            print!(
                "  {:<6} c={c:<3} per round: runs/s {}",
                mode.name(),
                spread(rates, 2)
            );
            if cpus.len() == xs.len() {
                print!(", {what} CPU/run {}", spread(cpus, 3));
            }
            println!();
        }
    }
}

/// `--backends`: the mock, Fawn on Postgres and Fawn on SQLite, then [`bench_targets`] on
/// both (Postgres first, so the summary's ratios are Postgres over SQLite).
async fn backends(mut plan: Plan) -> Result<()> {
    let url = std::env::var("BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("TEST_DATABASE_URL"))
        .context("--backends wants BENCH_DATABASE_URL or TEST_DATABASE_URL (Postgres)")?;
    let (mock, mock_url) = start_mock()?;
    plan.mock_pid = Some(mock.child.id());
    println!("mock LLM at {mock_url}");
    let pg = start_server(&mock_url, Some(&url), plan.workload).await?;
    let lite = start_server(&mock_url, None, plan.workload).await?;
    let mut targets = vec![pg.target(), lite.target()];
    targets[0].name = "postgres".to_string();
    targets[1].name = "sqlite".to_string();
    if targets[0].db.is_none() {
        println!("  (the database does not run on this machine: its CPU is not counted)");
    }
    let result = bench_targets(&targets, &plan).await;
    stop_server(lite).await?;
    stop_server(pg).await?;
    drop(mock);
    result
}

/// `--versus-official`: the mock, Fawn (release, SQLite) and the official server, all
/// started here, then [`bench_targets`] on both with the DeerFlow-shaped workload.
async fn versus_official(script: &Path, mut plan: Plan) -> Result<()> {
    let (mock, mock_url) = start_mock()?;
    plan.mock_pid = Some(mock.child.id());
    println!("mock LLM at {mock_url}");
    let fawn = start_server(&mock_url, None, plan.workload).await?;
    println!("fawn at {} (SQLite)", fawn.url);
    println!("starting the official server ({})", script.display());
    let official = start_official(script, &mock_url).await?;
    println!(
        "official server at {} (log {})",
        official.url,
        official.log.display()
    );
    let client = fawn_net::client();
    for url in [&fawn.url, &official.url] {
        let info: Value = client
            .get(format!("{url}/info"))
            .send()
            .await?
            .json()
            .await
            .unwrap_or(Value::Null);
        println!("  {url}/info {info}");
    }
    let targets = [
        Target {
            name: "fawn".to_string(),
            url: fawn.url.clone(),
            assistant: "lead_agent".to_string(),
            cpu: Cpu::Tree(fawn.pid),
            db: None,
        },
        Target {
            name: "official".to_string(),
            url: official.url.clone(),
            assistant: "agent".to_string(),
            cpu: Cpu::Tree(official.pid),
            db: None,
        },
    ];
    bench_targets(&targets, &plan).await?;
    drop(official);
    stop_server(fawn).await?;
    drop(mock);
    Ok(())
}

/// A stand-in OTLP/HTTP collector: answers every request `200` (after reading its body),
/// counting requests and bytes. Its CPU is the client's, not the server's.
async fn start_otlp_sink() -> Result<(String, Arc<std::sync::atomic::AtomicU64>)> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let received = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = received.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut reader = tokio::io::BufReader::new(socket);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        match reader.read_line(&mut line).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        let l = line.trim_end();
                        if l.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = l.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    counter.fetch_add(length as u64, std::sync::atomic::Ordering::Relaxed);
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if reader.get_mut().write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok((url, received))
}

/// `--tracing-cost`: what tracing costs a run. The same Fawn with no trace destination and
/// with one OTLP destination (an in-process sink), plus — with `--base-fawn PATH` — another
/// build without destinations (e.g. the commit before observability), all on the
/// DeerFlow-shaped workload, alternating; the ratios of the server CPU per run are printed
/// against the first target (`fawn`, no destination).
async fn tracing_cost(base: Option<PathBuf>, plan: Plan) -> Result<()> {
    let (mock, mock_url) = start_mock()?;
    let mut plan = plan;
    plan.mock_pid = Some(mock.child.id());
    let (sink, received) = start_otlp_sink().await?;
    println!("mock LLM at {mock_url}, OTLP sink at {sink}");
    let plain = start_server(&mock_url, None, plan.workload).await?;
    let traced = start_server_with(
        &mock_url,
        None,
        plan.workload,
        None,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.clone()),
            ("OTEL_BSP_SCHEDULE_DELAY", "1000".to_string()),
        ],
    )
    .await?;
    let based = match &base {
        Some(b) => Some(start_server_with(&mock_url, None, plan.workload, Some(b), &[]).await?),
        None => None,
    };
    let mut targets = vec![
        Target {
            name: "fawn".to_string(),
            url: plain.url.clone(),
            assistant: "lead_agent".to_string(),
            cpu: Cpu::Tree(plain.pid),
            db: None,
        },
        Target {
            name: "fawn+otlp".to_string(),
            url: traced.url.clone(),
            assistant: "lead_agent".to_string(),
            cpu: Cpu::Tree(traced.pid),
            db: None,
        },
    ];
    if let Some(b) = &based {
        targets.push(Target {
            name: "base".to_string(),
            url: b.url.clone(),
            assistant: "lead_agent".to_string(),
            cpu: Cpu::Tree(b.pid),
            db: None,
        });
    }
    bench_targets(&targets, &plan).await?;
    println!(
        "== the OTLP sink received {} bytes of spans",
        received.load(std::sync::atomic::Ordering::Relaxed)
    );
    if let Some(b) = based {
        stop_server(b).await?;
    }
    stop_server(traced).await?;
    stop_server(plain).await?;
    drop(mock);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let signal = tokio::select! {
        r = run() => return r,
        signal = stop_signal() => signal,
    };
    // Dropping `run` dropped every `Proc`, which kills its child: no server or mock outlives
    // the benchmark. A Postgres schema in use at that moment stays behind.
    eprintln!("stopped by {signal}; the servers and the mock LLM were stopped too");
    std::process::exit(130)
}

/// Resolves on SIGINT or SIGTERM.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return "SIGINT";
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

const USAGE: &str = "\
usage: server_load [--quick] [--sqlite-only | --pg-only] [--only MODE:C:RUNS]... [--workload minimal|deerflow]
       server_load --target [NAME=]URL[@PID]... [--target-pid PID] [--assistant [NAME=]ID]...
                   [--workload minimal|deerflow] [--only MODE:C:RUNS]... [--rounds N] [--warmup N] [--runs N]
       server_load --versus-official [--official-script PATH] [--rounds N] [--warmup N] [--runs N] [--only MODE:C:RUNS]...
       server_load --tracing-cost [--base-fawn PATH] [--rounds N] [--warmup N] [--runs N] [--only MODE:C:RUNS]...
       server_load --backends [--rounds N] [--warmup N] [--runs N] [--only MODE:C:RUNS]... [--workload minimal|deerflow]
       server_load --streams N [--stream-secs 10] [--chunk-ms 100] [--ramp-secs S] [--hold-secs S]";

/// `[NAME=]URL[@PID]`.
fn parse_target(spec: &str, index: usize) -> Result<(String, String, Option<u32>)> {
    let (name, rest) = match spec.split_once('=') {
        Some((n, r)) if !n.is_empty() && !n.contains([':', '/']) => (n.to_string(), r),
        _ => (format!("target{}", index + 1), spec),
    };
    let (url, pid) = match rest.rsplit_once('@') {
        Some((u, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            (u, Some(p.parse()?))
        }
        _ => (rest, None),
    };
    if !url.starts_with("http://") && !url.starts_with("https://") {
        bail!("--target wants [NAME=]URL[@PID], got {spec:?}");
    }
    Ok((name, url.trim_end_matches('/').to_string(), pid))
}

#[derive(Debug, Default)]
struct Args {
    quick: bool,
    sqlite_only: bool,
    pg_only: bool,
    only: Vec<(Mode, usize, usize)>,
    workload: Option<Workload>,
    targets: Vec<String>,
    target_pid: Option<u32>,
    assistants: Vec<String>,
    rounds: Option<usize>,
    warmup: Option<usize>,
    runs: Option<usize>,
    versus: bool,
    official_script: Option<PathBuf>,
    tracing_cost: bool,
    backends: bool,
    base_fawn: Option<PathBuf>,
    streams: Option<usize>,
    stream_secs: Option<f64>,
    chunk_ms: Option<u64>,
    ramp_secs: Option<f64>,
    hold_secs: Option<f64>,
}

fn parse_args(args: &[String]) -> Result<Args> {
    let mut a = Args::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .with_context(|| format!("{flag} wants a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--quick" => a.quick = true,
            "--sqlite-only" => a.sqlite_only = true,
            "--pg-only" => a.pg_only = true,
            "--versus-official" => a.versus = true,
            "--tracing-cost" => a.tracing_cost = true,
            "--backends" => a.backends = true,
            "--base-fawn" => a.base_fawn = Some(value()?.into()),
            "--only" => a.only.push(parse_only(&value()?)?),
            "--workload" => a.workload = Some(Workload::parse(&value()?)?),
            "--target" => a.targets.push(value()?),
            "--target-pid" => a.target_pid = Some(value()?.parse().context("--target-pid")?),
            "--assistant" => a.assistants.push(value()?),
            "--rounds" => a.rounds = Some(value()?.parse().context("--rounds")?),
            "--warmup" => a.warmup = Some(value()?.parse().context("--warmup")?),
            "--runs" => a.runs = Some(value()?.parse().context("--runs")?),
            "--official-script" => a.official_script = Some(value()?.into()),
            "--streams" => a.streams = Some(value()?.parse().context("--streams")?),
            "--stream-secs" => a.stream_secs = Some(value()?.parse().context("--stream-secs")?),
            "--chunk-ms" => a.chunk_ms = Some(value()?.parse().context("--chunk-ms")?),
            "--ramp-secs" => a.ramp_secs = Some(value()?.parse().context("--ramp-secs")?),
            "--hold-secs" => a.hold_secs = Some(value()?.parse().context("--hold-secs")?),
            "-h" | "--help" => {
                println!(
                    "{USAGE}\n\nServers driven with --target answer through a mock LLM started as\n  \
                     target/dist/fawn-mock-llm --port PORT {}",
                    mock_args_for_shell()
                );
                std::process::exit(0)
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(a)
}

/// The targets named on the command line, each with its assistant and CPU source.
fn targets_of(a: &Args) -> Result<Vec<Target>> {
    let mut targets = Vec::new();
    for (i, spec) in a.targets.iter().enumerate() {
        let (name, url, pid) = parse_target(spec, i)?;
        if targets.iter().any(|t: &Target| t.name == name) {
            bail!("two targets are named {name:?}");
        }
        targets.push(Target {
            name,
            url,
            assistant: "lead_agent".to_string(),
            cpu: pid.map_or(Cpu::Unknown, Cpu::Tree),
            db: None,
        });
    }
    if let Some(pid) = a.target_pid {
        match targets.as_mut_slice() {
            [t] if matches!(t.cpu, Cpu::Unknown) => t.cpu = Cpu::Tree(pid),
            [_] => bail!("--target-pid and --target ...@PID both give the PID"),
            _ => bail!("--target-pid is for a single --target; give each NAME=URL@PID"),
        }
    }
    // A bare `ID` is every target's; `NAME=ID` then overrides one target, whatever the order.
    for spec in a.assistants.iter().filter(|s| !s.contains('=')) {
        for t in &mut targets {
            t.assistant = spec.clone();
        }
    }
    for spec in &a.assistants {
        if let Some((name, id)) = spec.split_once('=') {
            let t = targets
                .iter_mut()
                .find(|t| t.name == name)
                .with_context(|| format!("--assistant {spec}: no target is named {name:?}"))?;
            t.assistant = id.to_string();
        }
    }
    Ok(targets)
}

async fn run() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let a = parse_args(&argv)?;
    if let Some(n) = a.streams {
        if n == 0 {
            bail!("--streams wants at least 1");
        }
        return streams::run(streams::StreamPlan {
            streams: n,
            stream_secs: a.stream_secs.unwrap_or(10.0).max(0.1),
            chunk_ms: a.chunk_ms.unwrap_or(100).max(1),
            ramp_secs: a.ramp_secs,
            hold_secs: a.hold_secs,
        })
        .await;
    }
    if a.stream_secs.is_some()
        || a.chunk_ms.is_some()
        || a.ramp_secs.is_some()
        || a.hold_secs.is_some()
    {
        bail!("--stream-secs, --chunk-ms, --ramp-secs and --hold-secs go with --streams\n{USAGE}");
    }
    let side_by_side = a.versus || a.tracing_cost || a.backends || !a.targets.is_empty();
    if a.backends
        && (a.versus || a.tracing_cost || a.pg_only || a.sqlite_only || !a.targets.is_empty())
    {
        bail!(
            "--backends starts its own servers: drop --target, --versus-official and --tracing-cost"
        );
    }
    if a.versus && !a.targets.is_empty() {
        bail!("--versus-official starts its own servers: drop --target");
    }
    if !side_by_side
        && (a.target_pid.is_some()
            || !a.assistants.is_empty()
            || a.rounds.is_some()
            || a.warmup.is_some()
            || a.runs.is_some()
            || a.official_script.is_some())
    {
        bail!(
            "--target-pid, --assistant, --rounds, --warmup, --runs and --official-script go with --target or --versus-official\n{USAGE}"
        );
    }
    if side_by_side {
        let runs = a.runs.unwrap_or(500);
        let loads = if a.only.is_empty() {
            vec![(Mode::Wait, 16, runs), (Mode::Stream, 16, runs)]
        } else {
            a.only.clone()
        };
        let mut plan = Plan {
            workload: a.workload.unwrap_or(Workload::Minimal),
            loads,
            rounds: a.rounds.unwrap_or(1),
            warmup: a.warmup.unwrap_or(200),
            mock_pid: None,
        };
        if a.tracing_cost {
            plan.workload = a.workload.unwrap_or(Workload::Deerflow);
            plan.rounds = a.rounds.unwrap_or(3);
            return tracing_cost(a.base_fawn.clone(), plan).await;
        }
        if a.backends {
            plan.workload = a.workload.unwrap_or(Workload::Deerflow);
            plan.rounds = a.rounds.unwrap_or(3);
            return backends(plan).await;
        }
        if a.versus {
            if a.workload == Some(Workload::Minimal) {
                bail!("--versus-official runs the deerflow workload");
            }
            plan.workload = Workload::Deerflow;
            plan.rounds = a.rounds.unwrap_or(3);
            let script = a
                .official_script
                .clone()
                .unwrap_or_else(default_official_script);
            return versus_official(&script, plan).await;
        }
        return bench_targets(&targets_of(&a)?, &plan).await;
    }
    let workload = a.workload.unwrap_or(Workload::Minimal);
    let (_mock, mock_url) = start_mock()?;
    println!("mock LLM at {mock_url}");
    if workload != Workload::Minimal {
        println!("workload {}", workload.name());
    }
    if !a.pg_only {
        if a.only.is_empty() {
            bench_backend("sqlite", &mock_url, None, workload, a.quick).await?;
        } else {
            bench_only("sqlite", &mock_url, None, workload, &a.only).await?;
        }
    }
    if !a.sqlite_only {
        let pg = std::env::var("BENCH_DATABASE_URL")
            .or_else(|_| std::env::var("TEST_DATABASE_URL"))
            .ok();
        match pg {
            Some(url) if a.only.is_empty() => {
                bench_backend("postgres", &mock_url, Some(&url), workload, a.quick).await?
            }
            Some(url) => bench_only("postgres", &mock_url, Some(&url), workload, &a.only).await?,
            None => println!("== postgres: skipped (set BENCH_DATABASE_URL)"),
        }
    }
    Ok(())
}
