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
//! cargo build --release -p fawn -p fawn-testkit -p fawn-bench
//! target/release/server_load            # [--quick] [--sqlite-only | --pg-only] [--workload deerflow]
//! target/release/server_load --sqlite-only --only wait:1:2000 --only stream:16:4000
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
//! SIGINT or SIGTERM stops the benchmark together with the servers and the mock it started.

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
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

fn bin(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("no exe dir")?;
    let p = dir.join(name);
    if !p.exists() {
        bail!(
            "{} not found; build it first: cargo build --release -p fawn -p fawn-testkit",
            p.display()
        );
    }
    Ok(p)
}

fn start_mock() -> Result<(Proc, String)> {
    let mut child = Command::new(bin("fawn-mock-llm")?)
        .args([
            "--port",
            "0",
            "--mode",
            "rules",
            "--tool",
            "present_files",
            "--tool-args",
            r#"{"filepaths": ["/mnt/user-data/outputs/report.md"]}"#,
            "--after-tool",
            "Done: the report is ready.",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting fawn-mock-llm")?;
    let out = child.stdout.take().context("mock stdout")?;
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line)?;
    let url = line
        .split_whitespace()
        .last()
        .context("mock did not print its URL")?
        .to_string();
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
    let child = Command::new(bin("fawn")?)
        .args(["serve", "--port", &port.to_string(), "--config"])
        .arg(&cfg)
        .env("FAWN_HOME", home.0.join("home"))
        .env("RUST_LOG", "error")
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting fawn serve")?;
    let pid = child.id();
    let server = Server {
        _proc: Proc { child },
        url: format!("http://127.0.0.1:{port}"),
        pid,
        _home: home,
        pg_schema,
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = client.get(format!("{}/ok", server.url)).send().await
            && r.status().is_success()
        {
            break;
        }
        if Instant::now() > deadline {
            bail!("the server did not start");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(server)
}

/// utime + stime of a process, in milliseconds.
fn cpu_ms(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit(')').next().context("stat")?;
    let f: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = f[11].parse()?;
    let stime: f64 = f[12].parse()?;
    // USER_HZ is 100 on Linux.
    Ok((utime + stime) * 10.0)
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

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Wait,
    Stream,
}

struct Sample {
    total: Duration,
    first_event: Option<Duration>,
}

async fn one_iteration(client: &reqwest::Client, url: &str, mode: Mode) -> Result<Sample> {
    let started = Instant::now();
    let t: Value = client
        .post(format!("{url}/threads"))
        .json(&json!({}))
        .send()
        .await?
        .json()
        .await?;
    let tid = t["thread_id"].as_str().context("thread id")?;
    let body = json!({"assistant_id": "lead_agent",
        "input": {"messages": [{"role": "user", "content": "write the report"}]},
        "stream_mode": ["values", "messages-tuple"]});
    match mode {
        Mode::Wait => {
            let v: Value = client
                .post(format!("{url}/threads/{tid}/runs/wait"))
                .json(&body)
                .send()
                .await?
                .json()
                .await?;
            if v.get("__error__").is_some() {
                bail!("run failed: {v}");
            }
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
                .await?;
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

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

async fn load(server: &Server, mode: Mode, concurrency: usize, iterations: usize) -> Result<()> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .tcp_nodelay(true)
        .build()?;
    // Warm-up.
    for _ in 0..3 {
        one_iteration(&client, &server.url, mode).await?;
    }
    let cpu0 = cpu_ms(server.pid)?;
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client = client.clone();
        let url = server.url.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < iterations {
                out.push(one_iteration(&client, &url, mode).await);
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
    let cpu = cpu_ms(server.pid)? - cpu0;
    let n = totals.len();
    let first = if firsts.is_empty() {
        String::new()
    } else {
        format!(
            "  first event p50 {:.2} ms p99 {:.2} ms",
            pct(&mut firsts.clone(), 0.5),
            pct(&mut firsts, 0.99)
        )
    };
    println!(
        "  {:<6} c={:<3} runs={:<5} err={:<3} {:>7.1} runs/s  p50 {:>7.2} ms  p99 {:>7.2} ms  server CPU {:.2} ms/run{}",
        format!("{mode:?}").to_lowercase(),
        concurrency,
        n,
        errors,
        n as f64 / elapsed,
        pct(&mut totals.clone(), 0.5),
        pct(&mut totals, 0.99),
        cpu / n.max(1) as f64,
        first
    );
    Ok(())
}

async fn threads_rss(server: &Server, count: usize) -> Result<f64> {
    let client = reqwest::Client::new();
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
    load(&server, Mode::Wait, 16, 200).await?;
    for (mode, c, n) in only {
        load(&server, *mode, *c, *n).await?;
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
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!("  idle RSS {:.1} MB", rss_mb(server.pid)?);
    // The first runs pay one-time costs (pool connections, statement caches, allocator
    // growth): they are the warm-up line, not part of the figures.
    let plan: &[(usize, usize)] = if quick {
        &[(1, 30), (16, 200), (64, 400)]
    } else {
        load(&server, Mode::Wait, 16, 200).await?;
        &[(1, 1000), (16, 1000), (64, 2000)]
    };
    for mode in [Mode::Wait, Mode::Stream] {
        for (c, n) in plan {
            load(&server, mode, *c, *n).await?;
        }
    }
    stop_server(server).await?;
    let server = start_server(mock_url, pg, workload).await?;
    let rss = threads_rss(&server, 10_000).await?;
    println!("  RSS after 10,000 threads {rss:.1} MB");
    stop_server(server).await?;
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

async fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let sqlite_only = args.iter().any(|a| a == "--sqlite-only");
    let pg_only = args.iter().any(|a| a == "--pg-only");
    let only = args
        .windows(2)
        .filter(|w| w[0] == "--only")
        .map(|w| parse_only(&w[1]))
        .collect::<Result<Vec<_>>>()?;
    let workload = match args.windows(2).find(|w| w[0] == "--workload") {
        Some(w) => Workload::parse(&w[1])?,
        None => Workload::Minimal,
    };
    let (_mock, mock_url) = start_mock()?;
    println!("mock LLM at {mock_url}");
    if workload != Workload::Minimal {
        println!("workload {}", workload.name());
    }
    if !pg_only {
        if only.is_empty() {
            bench_backend("sqlite", &mock_url, None, workload, quick).await?;
        } else {
            bench_only("sqlite", &mock_url, None, workload, &only).await?;
        }
    }
    if !sqlite_only {
        let pg = std::env::var("BENCH_DATABASE_URL")
            .or_else(|_| std::env::var("TEST_DATABASE_URL"))
            .ok();
        match pg {
            Some(url) if only.is_empty() => {
                bench_backend("postgres", &mock_url, Some(&url), workload, quick).await?
            }
            Some(url) => bench_only("postgres", &mock_url, Some(&url), workload, &only).await?,
            None => println!("== postgres: skipped (set BENCH_DATABASE_URL)"),
        }
    }
    Ok(())
}
