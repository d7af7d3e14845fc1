//! Soak benchmark: many runs over many threads with retention on, to see whether memory,
//! disk and throughput stay flat over a long life (issue 26 item 6).
//!
//! Starts the real `fawn serve` (SQLite, title generation on, retention configured) over
//! `fawn-mock-llm` in rules mode (every user message gets one `present_files` call, then
//! the answer after the tool result; the title request is echoed), and drives `--runs`
//! runs over `--threads` threads: `--concurrency` clients each take the next new thread
//! and give it its turns one after another (`runs/wait`, ~1 KB user messages), so every
//! stretch of the benchmark does the same work on a database that has lived longer.
//!
//! Every `--every` runs it prints the server's RSS, `fawn.db` + WAL, the thread files
//! under `FAWN_HOME`, the runs/s and server CPU per run of that stretch, and what the
//! retention sweeper removed so far (`/metrics`). At the end: how the second half's growth
//! of RSS and disk compares with the first half's (flat means the second half adds little),
//! and runs/s and CPU per run at the start against the end.
//!
//! Retention (`config.yaml`): `checkpointer.ttl.sweep_interval_minutes` (`--sweep-minutes`,
//! default 0.1 = 6 s), `checkpointer.retention.keep_turns` (`--keep-turns`, default 2),
//! `runs_days` (`--runs-minutes`, default 0.5), and a thread TTL
//! (`checkpointer.ttl.default_ttl`, `--thread-ttl-minutes`, default 0.5; `0` leaves it out,
//! and then every thread is kept for good, so the disk cannot flatten). The TTLs are short
//! because the whole benchmark lasts minutes: what is live at any moment is the last half
//! minute of threads, as a deployment's is the last weeks of them.
//!
//! ```text
//! cargo build --release -p fawn -p fawn-testkit -p fawn-bench
//! target/release/soak                                   # 20,000 runs over 2,000 threads
//! target/release/soak --runs 4000 --threads 400 --every 500
//! ```
//!
//! `--fawn PATH` runs another `fawn` binary; `--keep DIR` keeps the home directory.

use anyhow::{Context, Result, bail};
use fawn_bench::{Proc, bin, cpu_ms, create_thread, free_port};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

struct Options {
    runs: usize,
    threads: usize,
    concurrency: usize,
    every: usize,
    keep_turns: u32,
    runs_minutes: f64,
    thread_ttl_minutes: f64,
    sweep_minutes: f64,
    keep: Option<PathBuf>,
    fawn: Option<PathBuf>,
}

fn parse_args() -> Result<Options> {
    let mut o = Options {
        runs: 20_000,
        threads: 2_000,
        concurrency: 8,
        every: 1_000,
        keep_turns: 2,
        runs_minutes: 0.5,
        thread_ttl_minutes: 0.5,
        sweep_minutes: 0.1,
        keep: None,
        fawn: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--runs" => o.runs = value("--runs")?.parse()?,
            "--threads" => o.threads = value("--threads")?.parse()?,
            "--concurrency" => o.concurrency = value("--concurrency")?.parse()?,
            "--every" => o.every = value("--every")?.parse()?,
            "--keep-turns" => o.keep_turns = value("--keep-turns")?.parse()?,
            "--runs-minutes" => o.runs_minutes = value("--runs-minutes")?.parse()?,
            "--thread-ttl-minutes" => {
                o.thread_ttl_minutes = value("--thread-ttl-minutes")?.parse()?
            }
            "--sweep-minutes" => o.sweep_minutes = value("--sweep-minutes")?.parse()?,
            "--keep" => o.keep = Some(PathBuf::from(value("--keep")?)),
            "--fawn" => o.fawn = Some(PathBuf::from(value("--fawn")?)),
            "-h" | "--help" => {
                println!(
                    "soak [--runs 20000] [--threads 2000] [--concurrency 8] [--every 1000] \
                     [--keep-turns 2] [--runs-minutes 0.5] [--thread-ttl-minutes 0.5 (0: none)] \
                     [--sweep-minutes 0.1] [--keep DIR] [--fawn PATH]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if o.threads == 0 || o.runs < o.threads || !o.runs.is_multiple_of(o.threads) {
        bail!("--runs must be a positive multiple of --threads");
    }
    if o.every == 0 || o.concurrency == 0 {
        bail!("--every and --concurrency must be positive");
    }
    Ok(o)
}

fn retention_config(o: &Options) -> String {
    let mut c = format!(
        "checkpointer:\n  ttl:\n    strategy: delete\n    sweep_interval_minutes: {}\n",
        o.sweep_minutes
    );
    if o.thread_ttl_minutes > 0.0 {
        c.push_str(&format!("    default_ttl: {}\n", o.thread_ttl_minutes));
    }
    c.push_str(&format!(
        "  retention:\n    keep_turns: {}\n    runs_days: {}\n",
        o.keep_turns,
        o.runs_minutes / 1440.0
    ));
    c
}

async fn start_server(home: &Path, mock_url: &str, o: &Options) -> Result<(Proc, String)> {
    let config = format!(
        "models:\n  - name: mock\n    use: langchain_openai:ChatOpenAI\n    model: fawn-mock\n    \
         base_url: {mock_url}\n    api_key: bench\n    max_retries: 0\n\
         title:\n  enabled: true\n  model_name: mock\nmemory:\n  enabled: false\n{}",
        retention_config(o)
    );
    let cfg = home.join("config.yaml");
    std::fs::write(&cfg, config)?;
    let port = free_port()?;
    let program = match &o.fawn {
        Some(p) => p.clone(),
        None => bin("fawn")?,
    };
    let child = fawn_bench::fawn_serve(&program, port, &cfg, home)
        .spawn()
        .context("starting fawn serve")?;
    let proc = Proc(child);
    let url = format!("http://127.0.0.1:{port}");
    fawn_bench::wait_ok(&url, Duration::from_secs(60), || Ok(()))
        .await
        .context("the server did not start")?;
    Ok((proc, url))
}

/// About 1 KB of user text, different every run.
fn user_message(n: usize) -> String {
    let lead = format!("Run {n}: please write the report on ");
    let words = [
        "latency",
        "storage",
        "growth",
        "retention",
        "backups",
        "indexes",
        "pages",
        "journal",
    ];
    fawn_bench::user_message(lead, n, &words)
}

async fn turn(client: &reqwest::Client, url: &str, tid: &str, n: usize) -> Result<()> {
    let body = json!({"assistant_id": "lead_agent",
        "input": {"messages": [{"role": "user", "content": user_message(n)}]}});
    fawn_bench::run_wait(client, url, tid, &body).await?;
    Ok(())
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Bytes of the regular files under `dir` (thread workspaces, uploads, outputs).
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
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

/// A sample of a `/metrics` family with its labels, e.g. `fawn_x{what="y"}`.
fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

const MB: f64 = 1_000_000.0;

/// One line of the report: the state after `runs` runs.
struct Sample {
    runs: usize,
    at: Instant,
    cpu_ms: f64,
    rss_mb: f64,
    db_mb: f64,
    wal_mb: f64,
    files_mb: f64,
}

struct Paths {
    db: PathBuf,
    wal: PathBuf,
    users: PathBuf,
}

fn sample(runs: usize, pid: u32, p: &Paths) -> Result<Sample> {
    Ok(Sample {
        runs,
        at: Instant::now(),
        cpu_ms: cpu_ms(pid)?,
        rss_mb: rss_mb(pid)?,
        db_mb: file_len(&p.db) as f64 / MB,
        wal_mb: file_len(&p.wal) as f64 / MB,
        files_mb: tree_bytes(&p.users) as f64 / MB,
    })
}

async fn retention_counts(client: &reqwest::Client, url: &str) -> Result<String> {
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let removed = |what: &str| {
        metric(
            &text,
            &format!("fawn_retention_removed_total{{what=\"{what}\"}}"),
        )
    };
    Ok(format!(
        "sweeps {:.0}; removed threads {:.0}, checkpoints {:.0}, runs {:.0}, run events {:.0}",
        metric(&text, "fawn_retention_sweeps_total{outcome=\"done\"}"),
        removed("threads"),
        removed("checkpoints"),
        removed("runs"),
        removed("run_events"),
    ))
}

#[tokio::main]
async fn main() -> Result<()> {
    let o = parse_args()?;
    let dir = match &o.keep {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("fawn-soak-{}", uuid::Uuid::new_v4())),
    };
    std::fs::create_dir_all(&dir)?;
    let result = run(&o, &dir).await;
    if o.keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run(o: &Options, dir: &Path) -> Result<()> {
    let (mock, mock_url) = fawn_bench::start_mock_llm([
        "--mode",
        "rules",
        "--tool",
        "present_files",
        "--tool-args",
        r#"{"filepaths": ["/mnt/user-data/outputs/report.md"]}"#,
        "--after-tool",
        "Done: the report is ready.",
    ])?;
    let _mock = Proc(mock);
    let (server, url) = start_server(dir, &mock_url, o).await?;
    let pid = server.0.id();
    let data = dir.join("home").join("data");
    let paths = Paths {
        db: data.join("fawn.db"),
        wal: data.join("fawn.db-wal"),
        users: dir.join("home").join("users"),
    };
    let turns = o.runs / o.threads;
    println!(
        "soak: {} runs over {} threads ({turns} turns each), {} clients; retention:\n{}",
        o.runs,
        o.threads,
        o.concurrency,
        retention_config(o).trim_end()
    );
    let client = fawn_net::client_builder()
        .pool_max_idle_per_host(o.concurrency)
        .build()?;
    let next_thread = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let (marks_tx, mut marks_rx) = tokio::sync::mpsc::unbounded_channel::<usize>();
    let mut clients = tokio::task::JoinSet::new();
    let started = Instant::now();
    let mut samples = vec![sample(0, pid, &paths)?];
    println!(
        "{:>6} {:>7} {:>7} {:>9} {:>8} {:>8} {:>8} {:>9}  retention",
        "runs", "secs", "runs/s", "cpu ms/run", "RSS MB", "db MB", "WAL MB", "files MB"
    );
    for _ in 0..o.concurrency {
        let (client, url) = (client.clone(), url.clone());
        let (next_thread, done, marks) = (next_thread.clone(), done.clone(), marks_tx.clone());
        let (threads, every) = (o.threads, o.every);
        clients.spawn(async move {
            loop {
                let t = next_thread.fetch_add(1, Ordering::Relaxed);
                if t >= threads {
                    return Ok::<(), anyhow::Error>(());
                }
                let tid = create_thread(&client, &url).await?;
                for k in 0..turns {
                    turn(&client, &url, &tid, t * turns + k).await?;
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_multiple_of(every) {
                        let _ = marks.send(n);
                    }
                }
            }
        });
    }
    drop(marks_tx);
    while let Some(n) = marks_rx.recv().await {
        let s = sample(n, pid, &paths)?;
        let prev = samples.last().context("samples")?;
        let secs = s.at.duration_since(prev.at).as_secs_f64();
        let runs = (s.runs - prev.runs) as f64;
        println!(
            "{:>6} {:>7.1} {:>7.1} {:>9.2} {:>8.1} {:>8.2} {:>8.2} {:>9.2}  {}",
            s.runs,
            s.at.duration_since(started).as_secs_f64(),
            runs / secs,
            (s.cpu_ms - prev.cpu_ms) / runs,
            s.rss_mb,
            s.db_mb,
            s.wal_mb,
            s.files_mb,
            retention_counts(&client, &url).await?
        );
        samples.push(s);
    }
    while let Some(r) = clients.join_next().await {
        r??;
    }
    let total = started.elapsed().as_secs_f64();
    // One more sweep interval and the idle maintenance: what an operator finds afterwards.
    tokio::time::sleep(Duration::from_secs_f64(o.sweep_minutes * 60.0 + 3.0)).await;
    let idle = sample(o.runs, pid, &paths)?;
    println!(
        "idle afterwards: RSS {:.1} MB, fawn.db {:.2} MB + WAL {:.2} MB, files {:.2} MB; {}",
        idle.rss_mb,
        idle.db_mb,
        idle.wal_mb,
        idle.files_mb,
        retention_counts(&client, &url).await?
    );
    summary(&samples, total)?;
    drop(server);
    Ok(())
}

/// Growth in each half, and the start against the end.
fn summary(samples: &[Sample], total: f64) -> Result<()> {
    let n = samples.len() - 1;
    if n < 4 {
        println!(
            "({} runs in {total:.1} s; too few marks for a summary)",
            samples[n].runs
        );
        return Ok(());
    }
    let (first, mid, last) = (&samples[1], &samples[n / 2], &samples[n]);
    let disk = |s: &Sample| s.db_mb + s.wal_mb + s.files_mb;
    println!(
        "{} runs in {total:.1} s ({:.1} runs/s)",
        last.runs,
        last.runs as f64 / total
    );
    println!(
        "RSS: {:.1} MB after the first stretch, {:.1} at half way, {:.1} at the end \
         (first half +{:.1} MB, second half {:+.1} MB)",
        first.rss_mb,
        mid.rss_mb,
        last.rss_mb,
        mid.rss_mb - first.rss_mb,
        last.rss_mb - mid.rss_mb
    );
    println!(
        "disk (db + WAL + files): {:.2} MB, {:.2} MB, {:.2} MB (first half {:+.2} MB, second half {:+.2} MB)",
        disk(first),
        disk(mid),
        disk(last),
        disk(mid) - disk(first),
        disk(last) - disk(mid)
    );
    let wal_max = |part: &[Sample]| part.iter().map(|s| s.wal_mb).fold(0.0, f64::max);
    println!(
        "fawn.db alone: {:.2} MB, {:.2} MB, {:.2} MB (first half {:+.2} MB, second half {:+.2} MB); \
         largest WAL seen: {:.2} MB in the first half, {:.2} MB in the second",
        first.db_mb,
        mid.db_mb,
        last.db_mb,
        mid.db_mb - first.db_mb,
        last.db_mb - mid.db_mb,
        wal_max(&samples[1..=n / 2]),
        wal_max(&samples[n / 2..])
    );
    // Start and end: the first and the last two stretches.
    let rate =
        |a: &Sample, b: &Sample| (b.runs - a.runs) as f64 / b.at.duration_since(a.at).as_secs_f64();
    let cpu = |a: &Sample, b: &Sample| (b.cpu_ms - a.cpu_ms) / (b.runs - a.runs) as f64;
    let (s0, s1) = (&samples[0], &samples[2]);
    let (e0, e1) = (&samples[n - 2], &samples[n]);
    println!(
        "runs/s: {:.1} over runs {}–{}, {:.1} over runs {}–{} (end/start {:.3}); \
         server CPU per run {:.2} ms → {:.2} ms ({:.3})",
        rate(s0, s1),
        s0.runs + 1,
        s1.runs,
        rate(e0, e1),
        e0.runs + 1,
        e1.runs,
        rate(e0, e1) / rate(s0, s1),
        cpu(s0, s1),
        cpu(e0, e1),
        cpu(e0, e1) / cpu(s0, s1)
    );
    Ok(())
}
