//! Several `fawn serve` nodes on one Postgres (release builds, child processes), with and
//! without the Redis event bus:
//!
//! 1. **Cross-node delivery**: a run streams 300 token chunks on node A (its creator's
//!    stream) while a client joined on node B reads the same run; for every event both
//!    receive, B's arrival minus A's is the bus's added latency (p50/p99).
//! 2. **Throughput**: `--runs` short runs (`/runs/wait` on fresh threads) from 16 concurrent
//!    clients spread round-robin over 1, 2 and 3 nodes: runs/s and the nodes' CPU per run
//!    (utime + stime from `/proc`). This box has 2 cores, so more nodes share the same CPU;
//!    the figure that matters is CPU per run, and what the bus adds to it.
//! 3. **Cancel across nodes**: a long run created on node A (which claims it at once) is
//!    cancelled with `cancel?wait=true` on node B; the time that request takes, p50/max.
//! 4. **Takeover**: a long run executes on node C; C is killed (SIGKILL); the time until
//!    another node holds the run (its `owner` in the shared `runs` table changes), with the
//!    default `run_ownership` (10 s lease).
//!
//! ```sh
//! cargo build --profile dist -p fawn -p fawn-testkit -p fawn-bench
//! TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test target/dist/nodes [--runs N]
//! ```

use anyhow::{Context, Result, bail};
use fawn_bench::{Proc, bin, cpu_ms, free_port};
use futures::StreamExt;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn start_mock() -> Result<(Proc, String)> {
    let (child, url) = fawn_bench::start_mock_llm(["--mode", "directives"])?;
    Ok((Proc(child), url))
}

struct Node {
    proc: Proc,
    url: String,
}

async fn start_node(
    dir: &Path,
    i: usize,
    mock: &str,
    db_url: &str,
    schema: &str,
    redis: bool,
) -> Result<Node> {
    let config = dir.join(format!("config{i}.yaml"));
    std::fs::write(
        &config,
        format!(
            "models:\n  - name: mock\n    use: langchain_openai:ChatOpenAI\n    model: fawn-mock\n    \
             base_url: {mock}\n    api_key: bench\n    max_retries: 0\ntitle:\n  enabled: false\n\
             memory:\n  enabled: false\ndatabase:\n  backend: postgres\n  url: {db_url}\n  \
             postgres_schema: {schema}\n"
        ),
    )?;
    let port = free_port()?;
    let mut cmd = Command::new(bin("fawn")?);
    cmd.args([
        "serve",
        "--no-auth",
        "--port",
        &port.to_string(),
        "--config",
    ])
    .arg(&config)
    .env("FAWN_HOME", dir.join(format!("home{i}")))
    .env("RUST_LOG", "error")
    .env_remove("DATABASE_URL")
    .env_remove("REDIS_URL")
    .stdout(Stdio::null())
    .stderr(Stdio::inherit());
    if redis {
        cmd.env(
            "REDIS_URL",
            std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        );
    }
    let node = Node {
        proc: Proc(cmd.spawn().context("starting fawn serve")?),
        url: format!("http://127.0.0.1:{port}"),
    };
    let client = fawn_net::client();
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.get(format!("{}/ok", node.url)).send().await.is_err() {
        if Instant::now() > deadline {
            bail!("node {i} did not start");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(node)
}

fn directive(text: &str, delay_ms: u64) -> serde_json::Value {
    let d = serde_json::json!({"text": text, "delay_ms": delay_ms});
    serde_json::json!({"messages": [{"role": "user", "content": format!("@mock {d}")}]})
}

/// Reads an SSE body, recording when each event id arrived.
async fn arrivals(resp: reqwest::Response) -> Result<HashMap<String, Instant>> {
    let mut out = HashMap::new();
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    while let Some(chunk) = stream.next().await {
        let now = Instant::now();
        buf.push_str(&String::from_utf8_lossy(&chunk?));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let id = frame.lines().find_map(|l| l.strip_prefix("id: "));
            let messages = frame.lines().any(|l| l == "event: messages");
            if let (Some(id), true) = (id, messages) {
                out.entry(id.to_string()).or_insert(now);
            }
        }
    }
    Ok(out)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn cross_node(a: &Node, b: &Node) -> Result<Vec<f64>> {
    let client = fawn_net::client();
    let mut all = Vec::new();
    for _ in 0..3 {
        let t: serde_json::Value = client
            .post(format!("{}/threads", a.url))
            .json(&serde_json::json!({}))
            .send()
            .await?
            .json()
            .await?;
        let tid = t["thread_id"].as_str().context("thread id")?.to_string();
        let text: String = (0..300).map(|i| format!("w{i} ")).collect();
        let created = client
            .post(format!("{}/threads/{tid}/runs/stream", a.url))
            .json(&serde_json::json!({
                "assistant_id": "lead_agent", "input": directive(&text, 10),
                "stream_mode": ["messages-tuple"], "stream_resumable": true}))
            .send()
            .await?;
        let rid = created
            .headers()
            .get("content-location")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit('/').next())
            .context("run id")?
            .to_string();
        let joined = client
            .get(format!("{}/threads/{tid}/runs/{rid}/stream", b.url))
            .header("last-event-id", "-1")
            .send()
            .await?;
        let (on_a, on_b) = tokio::join!(arrivals(created), arrivals(joined));
        let (on_a, on_b) = (on_a?, on_b?);
        for (id, ta) in &on_a {
            if let Some(tb) = on_b.get(id)
                && *tb >= *ta
            {
                all.push((*tb - *ta).as_secs_f64() * 1000.0);
            } else if on_b.contains_key(id) {
                all.push(0.0);
            }
        }
    }
    all.sort_by(|x, y| x.total_cmp(y));
    Ok(all)
}

async fn throughput(nodes: &[&Node], runs: usize) -> Result<(f64, f64)> {
    let client = fawn_net::client();
    let pids: Vec<u32> = nodes.iter().map(|n| n.proc.0.id()).collect();
    let before: f64 = pids.iter().map(|p| cpu_ms(*p).unwrap_or(0.0)).sum();
    let started = Instant::now();
    let results: Vec<Result<()>> = futures::stream::iter(0..runs)
        .map(|i| {
            let client = client.clone();
            let url = nodes[i % nodes.len()].url.clone();
            async move {
                let r = client
                    .post(format!("{url}/runs/wait"))
                    .json(&serde_json::json!({
                        "assistant_id": "lead_agent", "input": directive("ok", 0)}))
                    .send()
                    .await?;
                if !r.status().is_success() {
                    bail!("{}", r.status());
                }
                r.bytes().await?;
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for r in results {
        r?;
    }
    let secs = started.elapsed().as_secs_f64();
    let after: f64 = pids.iter().map(|p| cpu_ms(*p).unwrap_or(0.0)).sum();
    Ok((runs as f64 / secs, (after - before) / runs as f64))
}

async fn pg(db_url: &str) -> Result<sqlx::PgConnection> {
    use sqlx::Connection;
    Ok(sqlx::PgConnection::connect(db_url).await?)
}

/// `(status, owner)` of a run, read from the shared database.
async fn run_row(
    con: &mut sqlx::PgConnection,
    schema: &str,
    run_id: &str,
) -> Result<(String, Option<String>)> {
    let q = format!("SELECT status, owner FROM \"{schema}\".runs WHERE run_id = $1");
    let row: (String, Option<String>) = sqlx::query_as(sqlx::AssertSqlSafe(q))
        .bind(run_id)
        .fetch_one(con)
        .await?;
    Ok(row)
}

/// Creates a long run on `node`; returns (thread, run) once the database shows it running.
async fn long_run(
    node: &Node,
    con: &mut sqlx::PgConnection,
    schema: &str,
) -> Result<(String, String, String)> {
    let client = fawn_net::client();
    let t: serde_json::Value = client
        .post(format!("{}/threads", node.url))
        .json(&serde_json::json!({}))
        .send()
        .await?
        .json()
        .await?;
    let tid = t["thread_id"].as_str().context("thread id")?.to_string();
    let text: String = (0..3000).map(|i| format!("w{i} ")).collect();
    let run: serde_json::Value = client
        .post(format!("{}/threads/{tid}/runs", node.url))
        .json(&serde_json::json!({"assistant_id": "lead_agent", "input": directive(&text, 10)}))
        .send()
        .await?
        .json()
        .await?;
    let rid = run["run_id"].as_str().context("run id")?.to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let (status, Some(owner)) = run_row(con, schema, &rid).await?
            && status == "running"
        {
            return Ok((tid, rid, owner));
        }
        if Instant::now() > deadline {
            bail!("run {rid} did not start");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `cancel?wait=true` on B of runs executing on A: milliseconds per request.
async fn cancels(a: &Node, b: &Node, db_url: &str, schema: &str) -> Result<Vec<f64>> {
    let client = fawn_net::client();
    let mut con = pg(db_url).await?;
    let mut out = Vec::new();
    for _ in 0..10 {
        let (tid, rid, _) = long_run(a, &mut con, schema).await?;
        // Let the model start streaming.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t0 = Instant::now();
        let r = client
            .post(format!(
                "{}/threads/{tid}/runs/{rid}/cancel?wait=true",
                b.url
            ))
            .send()
            .await?;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        if !r.status().is_success() {
            bail!("cancel: {}", r.status());
        }
        let (status, _) = run_row(&mut con, schema, &rid).await?;
        if status != "interrupted" {
            bail!("cancelled run ended {status}");
        }
        out.push(ms);
    }
    out.sort_by(|x, y| x.total_cmp(y));
    Ok(out)
}

/// Kills the node executing a long run; seconds until another node holds it.
async fn takeover(nodes: &mut [Node], victim: usize, ctx: &Ctx<'_>) -> Result<f64> {
    let mut con = pg(ctx.db_url).await?;
    let (tid, rid, owner) = long_run(&nodes[victim], &mut con, ctx.schema).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = nodes[victim].proc.0.kill();
    let _ = nodes[victim].proc.0.wait();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(60);
    let secs = loop {
        let (status, now_owner) = run_row(&mut con, ctx.schema, &rid).await?;
        if status != "running" && status != "pending" {
            bail!("the run ended {status} instead of being taken over");
        }
        if status == "running" && now_owner.is_some_and(|o| o != owner) {
            break t0.elapsed().as_secs_f64();
        }
        if Instant::now() > deadline {
            bail!("no node took the run over within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let survivor = &nodes[(victim + 1) % nodes.len()];
    fawn_net::client()
        .post(format!(
            "{}/threads/{tid}/runs/{rid}/cancel?wait=true",
            survivor.url
        ))
        .send()
        .await?;
    nodes[victim] =
        start_node(ctx.dir, victim, ctx.mock, ctx.db_url, ctx.schema, ctx.redis).await?;
    Ok(secs)
}

struct Ctx<'a> {
    dir: &'a Path,
    mock: &'a str,
    db_url: &'a str,
    schema: &'a str,
    redis: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).context("--runs N")?.parse()?,
        None => 1500,
    };
    let db_url = std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let (_mock, mock) = start_mock()?;
    for redis in [false, true] {
        let schema = format!("fawn_bench_nodes_{}", uuid::Uuid::new_v4().simple());
        let dir = std::env::temp_dir().join(&schema);
        std::fs::create_dir_all(&dir)?;
        let mut nodes = Vec::new();
        for i in 0..3 {
            nodes.push(start_node(&dir, i, &mock, &db_url, &schema, redis).await?);
        }
        let label = if redis {
            "Postgres + Redis"
        } else {
            "Postgres only"
        };
        let lat = cross_node(&nodes[0], &nodes[1]).await?;
        println!(
            "{label}: cross-node token delivery (joined on B vs creator on A), {} events: \
             p50 {:.2} ms, p99 {:.2} ms{}",
            lat.len(),
            pct(&lat, 0.5),
            pct(&lat, 0.99),
            if redis {
                ""
            } else {
                " (without a bus B gets steps, not tokens)"
            }
        );
        for n in 1..=3 {
            let set: Vec<&Node> = nodes.iter().take(n).collect();
            // Warm up, then measure.
            throughput(&set, 100).await?;
            let (rps, cpu) = throughput(&set, runs).await?;
            println!(
                "{label}: {n} node(s), {runs} runs, c=16: {rps:.1} runs/s, {cpu:.2} ms CPU/run (all nodes)"
            );
        }
        let c = cancels(&nodes[0], &nodes[1], &db_url, &schema).await?;
        println!(
            "{label}: cancel?wait=true on B of a run executing on A, {} runs: p50 {:.1} ms, max {:.1} ms",
            c.len(),
            pct(&c, 0.5),
            c.last().copied().unwrap_or(f64::NAN)
        );
        let ctx = Ctx {
            dir: &dir,
            mock: &mock,
            db_url: &db_url,
            schema: &schema,
            redis,
        };
        let mut takeovers = Vec::new();
        for _ in 0..3 {
            takeovers.push(takeover(&mut nodes, 2, &ctx).await?);
        }
        takeovers.sort_by(|x, y| x.total_cmp(y));
        println!(
            "{label}: takeover after SIGKILL of the executing node (10 s lease), {} kills: \
             {}",
            takeovers.len(),
            takeovers
                .iter()
                .map(|t| format!("{t:.1} s"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        drop(nodes);
        let _ = std::fs::remove_dir_all(&dir);
        if let Ok(mut conn) = pg(&db_url).await {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
            )))
            .execute(&mut conn)
            .await;
        }
    }
    Ok(())
}
