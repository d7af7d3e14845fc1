//! Storage size benchmark: how many bytes a conversation costs on disk, and where they go.
//!
//! Starts the real `fawn serve` (SQLite, title generation on) over `fawn-mock-llm` in rules
//! mode (every user message gets one `present_files` call, then the answer after the tool
//! result; the title request is echoed), drives one thread through N turns with ~1 KB user
//! messages (`runs/wait`, one after another), and at each mark reports the messages in the
//! thread, its state as JSON, and `fawn.db` + `fawn.db-wal` on disk *while the server runs*
//! (sizes read after the server's idle maintenance, if any, has had its chance: see
//! `--settle`). Then it stops the server and reports the database file alone, and
//! optionally starts it again for M one-turn threads. Each mark also says where the bytes
//! go: per table and index (SQLite's `dbstat`: pages, payload, unused bytes; freelist
//! pages) and per kind of checkpoint column (deltas, snapshots, metadata, journal rows,
//! thread values).
//!
//! ```text
//! cargo build --release -p fawn -p fawn-testkit -p fawn-bench
//! target/release/storage_size                      # marks 10,50,100,200; then 300 threads
//! target/release/storage_size --marks 10,50 --threads 0 --breakdown
//! ```
//!
//! `--retention N` then starts the server once more with `checkpointer.retention.keep_turns:
//! N` (and `runs_days: D` with `--runs-days D`; a sweep every 6 s), waits for its first
//! sweep, and reports the thread's size after retention (server running, then after a
//! restart).
//!
//! Sizes do not depend on the build profile; a debug build gives the same figures, slower.
//! `--fawn PATH` measures another `fawn` binary (e.g. a build of an earlier commit).

use anyhow::{Context, Result, bail};
use fawn_bench::{Proc, bin, create_thread, free_port};
use serde_json::{Value, json};
use sqlx::{Connection, Row, SqliteConnection};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

struct Options {
    marks: Vec<usize>,
    threads: usize,
    breakdown: bool,
    settle: Duration,
    keep: Option<PathBuf>,
    fawn: Option<PathBuf>,
    retention: Option<u32>,
    runs_days: Option<f64>,
}

fn parse_args() -> Result<Options> {
    let mut o = Options {
        marks: vec![10, 50, 100, 200],
        threads: 300,
        breakdown: false,
        settle: Duration::from_secs(3),
        keep: None,
        fawn: None,
        retention: None,
        runs_days: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--marks" => {
                o.marks = args
                    .next()
                    .context("--marks N,N,...")?
                    .split(',')
                    .map(|n| n.trim().parse::<usize>())
                    .collect::<Result<_, _>>()?;
                o.marks.sort_unstable();
            }
            "--threads" => o.threads = args.next().context("--threads N")?.parse()?,
            "--breakdown" => o.breakdown = true,
            "--settle" => {
                o.settle = Duration::from_millis(args.next().context("--settle MS")?.parse()?)
            }
            "--keep" => o.keep = Some(PathBuf::from(args.next().context("--keep DIR")?)),
            "--fawn" => o.fawn = Some(PathBuf::from(args.next().context("--fawn PATH")?)),
            "--retention" => {
                o.retention = Some(args.next().context("--retention KEEP_TURNS")?.parse()?)
            }
            "--runs-days" => o.runs_days = Some(args.next().context("--runs-days DAYS")?.parse()?),
            "-h" | "--help" => {
                println!(
                    "storage_size [--marks 10,50,100,200] [--threads 300] [--breakdown] \
                     [--settle MS] [--keep DIR] [--fawn PATH] [--retention KEEP_TURNS [--runs-days D]]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if o.marks.is_empty() {
        bail!("--marks needs at least one number");
    }
    Ok(o)
}

fn start_mock() -> Result<(Proc, String)> {
    let (child, url) = fawn_bench::start_mock_llm([
        "--mode",
        "rules",
        "--tool",
        "present_files",
        "--tool-args",
        r#"{"filepaths": ["/mnt/user-data/outputs/report.md"]}"#,
        "--after-tool",
        "Done: the report is ready.",
    ])?;
    Ok((Proc(child), url))
}

struct Server {
    proc: Proc,
    url: String,
}

impl Server {
    /// SIGTERM, then wait for the process to end (a clean close folds the WAL back).
    fn stop(mut self) -> Result<()> {
        let pid = self.proc.0.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status()?;
        self.proc.0.wait()?;
        Ok(())
    }
}

async fn start_server(home: &Path, mock_url: &str, fawn: Option<&Path>) -> Result<Server> {
    start_server_with(home, mock_url, fawn, "").await
}

/// [`start_server`] with more `config.yaml` text.
async fn start_server_with(
    home: &Path,
    mock_url: &str,
    fawn: Option<&Path>,
    extra: &str,
) -> Result<Server> {
    let config = format!(
        "models:\n  - name: mock\n    use: langchain_openai:ChatOpenAI\n    model: fawn-mock\n    \
         base_url: {mock_url}\n    api_key: bench\n    max_retries: 0\n\
         title:\n  enabled: true\n  model_name: mock\nmemory:\n  enabled: false\n{extra}"
    );
    let cfg = home.join("config.yaml");
    std::fs::write(&cfg, config)?;
    let port = free_port()?;
    let program = match fawn {
        Some(p) => p.to_path_buf(),
        None => bin("fawn")?,
    };
    let child = fawn_bench::fawn_serve(&program, port, &cfg, home)
        .spawn()
        .context("starting fawn serve")?;
    let server = Server {
        proc: Proc(child),
        url: format!("http://127.0.0.1:{port}"),
    };
    fawn_bench::wait_ok(&server.url, Duration::from_secs(60), || Ok(()))
        .await
        .context("the server did not start")?;
    Ok(server)
}

/// About 1 KB of user text, different every turn (so nothing compresses to a repeat).
fn user_message(turn: usize) -> String {
    let lead = format!("Turn {turn}: please write the report on ");
    let words = [
        "latency",
        "storage",
        "growth",
        "retention",
        "backups",
        "indexes",
        "pages",
        "journal",
        "snapshots",
        "deltas",
        "threads",
        "runs",
        "tools",
        "titles",
        "models",
        "vacuum",
    ];
    fawn_bench::user_message(lead, turn, &words)
}

/// One turn; returns the thread's values after it.
async fn turn(client: &reqwest::Client, url: &str, tid: &str, n: usize) -> Result<Value> {
    let body = json!({"assistant_id": "lead_agent",
        "input": {"messages": [{"role": "user", "content": user_message(n)}]}});
    fawn_bench::run_wait(client, url, tid, &body).await
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn mb(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1_000_000.0)
}

/// Where the bytes of the database go: `dbstat` per table and index, the freelist, and
/// the checkpoint columns per kind.
async fn breakdown(db: &Path) -> Result<()> {
    let url = format!("sqlite://{}?mode=ro", db.display());
    let mut conn = SqliteConnection::connect(&url).await?;
    let page_size: i64 = sqlx::query("PRAGMA page_size")
        .fetch_one(&mut conn)
        .await?
        .try_get(0)?;
    let pages: i64 = sqlx::query("PRAGMA page_count")
        .fetch_one(&mut conn)
        .await?
        .try_get(0)?;
    let free: i64 = sqlx::query("PRAGMA freelist_count")
        .fetch_one(&mut conn)
        .await?
        .try_get(0)?;
    let auto_vacuum: i64 = sqlx::query("PRAGMA auto_vacuum")
        .fetch_one(&mut conn)
        .await?
        .try_get(0)?;
    println!(
        "    file: {pages} pages of {page_size} B, {free} on the freelist ({}), auto_vacuum={auto_vacuum}",
        mb((free * page_size) as u64)
    );
    match sqlx::query(
        "SELECT name, COUNT(*) AS pages, SUM(pgsize) AS bytes, SUM(payload) AS payload, \
         SUM(unused) AS unused FROM dbstat GROUP BY name ORDER BY bytes DESC",
    )
    .fetch_all(&mut conn)
    .await
    {
        Ok(rows) => {
            println!(
                "    {:<32} {:>7} {:>11} {:>11} {:>11}",
                "table/index", "pages", "bytes", "payload", "unused"
            );
            for r in rows.iter().take(14) {
                let name: String = r.try_get("name")?;
                let pages: i64 = r.try_get("pages")?;
                let bytes: i64 = r.try_get("bytes")?;
                let payload: i64 = r.try_get("payload")?;
                let unused: i64 = r.try_get("unused")?;
                println!("    {name:<32} {pages:>7} {bytes:>11} {payload:>11} {unused:>11}");
            }
        }
        Err(e) => println!("    (no dbstat in this SQLite: {e})"),
    }
    let kinds = [
        (
            "checkpoints: writes (deltas)",
            "SELECT COUNT(*), COALESCE(SUM(length(writes)), 0) FROM checkpoints",
        ),
        (
            "checkpoints: snapshots",
            "SELECT COUNT(*), COALESCE(SUM(length(snapshot)), 0) FROM checkpoints WHERE snapshot IS NOT NULL",
        ),
        (
            "checkpoints: metadata+next+tasks",
            "SELECT COUNT(*), COALESCE(SUM(length(metadata) + length(next) + length(tasks)), 0) FROM checkpoints",
        ),
        (
            "checkpoint_writes (pending)",
            "SELECT COUNT(*), COALESCE(SUM(length(value)), 0) FROM checkpoint_writes",
        ),
        (
            "run_events (journal)",
            "SELECT COUNT(*), COALESCE(SUM(length(content) + length(metadata)), 0) FROM run_events",
        ),
        (
            "runs (metadata+kwargs)",
            "SELECT COUNT(*), COALESCE(SUM(length(metadata) + length(kwargs)), 0) FROM runs",
        ),
        (
            "threads.state_values",
            "SELECT COUNT(*), COALESCE(SUM(length(state_values)), 0) FROM threads",
        ),
    ];
    for (what, sql) in kinds {
        let r = sqlx::query(sql).fetch_one(&mut conn).await?;
        let n: i64 = r.try_get(0)?;
        let bytes: i64 = r.try_get(1)?;
        println!("    {what:<34} {n:>6} rows {:>12}", mb(bytes as u64));
    }
    conn.close().await?;
    Ok(())
}

/// A sample of a `/metrics` family with its labels, e.g. `fawn_x{what="y"}`.
fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits (up to a minute) for the server's first finished retention sweep; the checkpoints
/// it removed.
async fn wait_for_sweep(client: &reqwest::Client, url: &str) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = client
            .get(format!("{url}/metrics"))
            .send()
            .await?
            .text()
            .await?;
        if metric(&text, "fawn_retention_sweeps_total{outcome=\"done\"}") >= 1.0 {
            return Ok(metric(&text, "fawn_retention_removed_total{what=\"checkpoints\"}") as u64);
        }
        if Instant::now() > deadline {
            bail!("no retention sweep within a minute");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let o = parse_args()?;
    let dir = match &o.keep {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => std::env::temp_dir().join(format!("fawn-storage-{}", uuid::Uuid::new_v4())),
    };
    std::fs::create_dir_all(&dir)?;
    let result = run(&o, &dir).await;
    if o.keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run(o: &Options, dir: &Path) -> Result<()> {
    let (_mock, mock_url) = start_mock()?;
    let db = dir.join("home").join("data").join("fawn.db");
    let wal = dir.join("home").join("data").join("fawn.db-wal");
    let client = fawn_net::client();
    let server = start_server(dir, &mock_url, o.fawn.as_deref()).await?;
    tokio::time::sleep(o.settle).await;
    println!(
        "empty: fawn.db {} + WAL {}",
        mb(file_len(&db)),
        mb(file_len(&wal))
    );
    let tid = create_thread(&client, &server.url).await?;
    let mut values = Value::Null;
    let mut done = 0;
    let max = o.marks.last().copied().unwrap_or(0);
    let started = Instant::now();
    for &mark in &o.marks {
        while done < mark {
            done += 1;
            values = turn(&client, &server.url, &tid, done).await?;
        }
        // Sizes while the server runs, once it has been idle for a moment (what an
        // operator sees between conversations).
        tokio::time::sleep(o.settle).await;
        let messages = values["messages"].as_array().map_or(0, Vec::len);
        let state = values.to_string().len() as u64;
        let (d, w) = (file_len(&db), file_len(&wal));
        println!(
            "{mark:>4} turns: {messages} messages, state {} as JSON; on disk {} (fawn.db {} + WAL {}), {:.1}x the state",
            mb(state),
            mb(d + w),
            mb(d),
            mb(w),
            (d + w) as f64 / state.max(1) as f64
        );
        if o.breakdown || mark == max {
            breakdown(&db).await?;
        }
    }
    eprintln!("({max} turns in {:.1} s)", started.elapsed().as_secs_f64());
    server.stop()?;
    println!(
        "after a restart of the {max}-turn thread: fawn.db {} + WAL {}",
        mb(file_len(&db)),
        mb(file_len(&wal))
    );
    if let Some(keep) = o.retention {
        let mut extra = format!(
            "checkpointer:\n  ttl:\n    sweep_interval_minutes: 0.1\n  retention:\n    keep_turns: {keep}\n"
        );
        if let Some(d) = o.runs_days {
            extra.push_str(&format!("    runs_days: {d}\n"));
        }
        let server = start_server_with(dir, &mock_url, o.fawn.as_deref(), &extra).await?;
        let removed = wait_for_sweep(&client, &server.url).await?;
        tokio::time::sleep(o.settle).await;
        let (d, w) = (file_len(&db), file_len(&wal));
        println!(
            "after retention (keep_turns {keep}, runs_days {:?}, {removed} checkpoints removed): on disk {} (fawn.db {} + WAL {}) (server running)",
            o.runs_days,
            mb(d + w),
            mb(d),
            mb(w)
        );
        breakdown(&db).await?;
        server.stop()?;
        println!(
            "after retention and a restart: fawn.db {} + WAL {}",
            mb(file_len(&db)),
            mb(file_len(&wal))
        );
    }
    if o.threads > 0 {
        let server = start_server(dir, &mock_url, o.fawn.as_deref()).await?;
        for i in 0..o.threads {
            let t = create_thread(&client, &server.url).await?;
            turn(&client, &server.url, &t, i).await?;
        }
        tokio::time::sleep(o.settle).await;
        println!(
            "then {} one-turn threads: fawn.db {} + WAL {} (server running)",
            o.threads,
            mb(file_len(&db)),
            mb(file_len(&wal))
        );
        breakdown(&db).await?;
        server.stop()?;
    }
    Ok(())
}
