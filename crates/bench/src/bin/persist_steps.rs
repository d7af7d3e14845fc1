//! Storage-side benchmark of the persistence layer (`fawn-checkpoint`), release build:
//!
//! * per-step persistence cost (`put_checkpoint` + `get_checkpoint` latest) on threads of
//!   ~10 and ~300 messages, and their ratio (the write cost must not grow with the thread);
//! * checkpoint writes/s with 1 and 16 concurrent writers;
//! * queue claims/s with 1 and 8 concurrent claimers;
//! * storage runs/s at concurrency 64 for a tool-calling run: create run (new thread),
//!   claim it, read the latest checkpoint, write 5 checkpoints, finish.
//!
//! `cargo run --release -p fawn-bench --bin persist_steps -- [--backend sqlite|postgres|both]
//! [--seconds N]`. Postgres uses `BENCH_DATABASE_URL` or `TEST_DATABASE_URL` and a schema
//! `fawn_bench` (emptied before and after).

use anyhow::{Context, Result, bail};
use fawn_checkpoint::{
    BackendConfig, NewCheckpoint, NewRun, NewThread, Persistence, RunFinish, RunStatus,
    ThreadSummary, Truncate,
};
use fawn_state::{Message, StateUpdate, ThreadState, ToolCall};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(30);

struct Args {
    sqlite: bool,
    postgres: bool,
    seconds: f64,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        sqlite: true,
        postgres: true,
        seconds: 3.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--backend" => match it.next().as_deref() {
                Some("sqlite") => args.postgres = false,
                Some("postgres") => args.sqlite = false,
                Some("both") => {}
                other => bail!("--backend sqlite|postgres|both, got {other:?}"),
            },
            "--seconds" => {
                args.seconds = it
                    .next()
                    .context("--seconds N")?
                    .parse()
                    .context("--seconds N")?
            }
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

fn text(n: usize, seed: usize) -> String {
    let words = [
        "alpha", "beta", "gamma", "delta", "tool", "search", "result", "the",
    ];
    let mut s = String::with_capacity(n + 8);
    let mut i = seed;
    while s.len() < n {
        s.push_str(words[i % words.len()]);
        s.push(' ');
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    s
}

/// One agent step's writes: an AI message with a tool call, or the tool's result.
fn agent_step(i: usize) -> StateUpdate {
    let msg = if i.is_multiple_of(2) {
        Message::ai(text(120, i))
            .with_id(format!("ai-{i}"))
            .with_tool_calls(vec![ToolCall::new(
                "web_search",
                json!({"query": text(40, i)}),
                format!("call-{i}"),
            )])
    } else {
        Message::tool(
            text(500, i),
            format!("call-{}", i - 1),
            Some("web_search".into()),
        )
        .with_id(format!("tool-{i}"))
    };
    StateUpdate::messages(vec![msg])
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

struct Chain {
    thread_id: String,
    last: Option<String>,
    state: Arc<ThreadState>,
}

impl Chain {
    fn new(thread_id: String) -> Chain {
        Chain {
            thread_id,
            last: None,
            state: Arc::new(ThreadState::default()),
        }
    }

    /// The next checkpoint. The state is updated in place (`Arc::make_mut`), as an agent
    /// does: no copy of the message list while nothing else holds the state strongly.
    fn next(
        &mut self,
        node: &str,
        update: StateUpdate,
        run_id: Option<&str>,
    ) -> Result<NewCheckpoint> {
        let mut writes = vec![update];
        Arc::make_mut(&mut self.state).apply_writes(&mut writes)?;
        Ok(NewCheckpoint {
            thread_id: self.thread_id.clone(),
            checkpoint_ns: String::new(),
            parent_id: self.last.clone(),
            run_id: run_id.map(str::to_string),
            metadata: obj(
                json!({"source": "loop", "step": 1, "parents": {}, "graph_id": "lead_agent"}),
            ),
            writes: writes.into_iter().map(|w| (node.to_string(), w)).collect(),
            state: self.state.clone(),
            next: vec!["tools".into()],
            tasks: vec![],
        })
    }

    async fn put(&mut self, db: &dyn Persistence, node: &str, update: StateUpdate) -> Result<()> {
        let cp = self.next(node, update, None)?;
        self.last = Some(db.put_checkpoint(cp).await?);
        Ok(())
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

#[derive(Default)]
struct StepSamples {
    put: Vec<f64>,
    get: Vec<f64>,
    total: Vec<f64>,
}

impl StepSamples {
    fn summary(&mut self) -> String {
        for v in [&mut self.put, &mut self.get, &mut self.total] {
            v.sort_by(f64::total_cmp);
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        format!(
            "mean {:.0} µs (put {:.0} + get {:.0}), p50 {:.0} µs, p99 {:.0} µs",
            mean(&self.total),
            mean(&self.put),
            mean(&self.get),
            percentile(&self.total, 0.5),
            percentile(&self.total, 0.99),
        )
    }

    fn mean(&self) -> f64 {
        self.total.iter().sum::<f64>() / self.total.len().max(1) as f64
    }
}

/// One step (put + get latest) on threads of ~10 and ~300 messages, measured alternately
/// in the same database so that both see the same database size and caches.
async fn step_costs(db: &Arc<dyn Persistence>) -> Result<(StepSamples, StepSamples)> {
    const THREADS: usize = 12;
    const STEPS: usize = 60;
    let mut chains = Vec::new();
    for (size, n) in [(10usize, THREADS), (300, THREADS)] {
        for t in 0..n {
            let thread = db.create_thread(NewThread::default()).await?.thread_id;
            let mut chain = Chain::new(thread);
            for i in 0..size {
                chain.put(&**db, "agent", agent_step(i + t)).await?;
            }
            chains.push((size, chain));
        }
    }
    let (mut small, mut big) = (StepSamples::default(), StepSamples::default());
    for s in 0..STEPS {
        for (size, chain) in chains.iter_mut() {
            let cp = chain.next("agent", agent_step(*size + s), None)?;
            let start = Instant::now();
            let id = db.put_checkpoint(cp).await?;
            let put = start.elapsed();
            let latest = db
                .get_checkpoint(&chain.thread_id, "", None)
                .await?
                .context("latest checkpoint")?;
            let total = start.elapsed();
            if latest.checkpoint_id != id {
                bail!("latest checkpoint is not the one just written");
            }
            drop(latest);
            chain.last = Some(id);
            let samples = if *size == 10 { &mut small } else { &mut big };
            samples.put.push(put.as_secs_f64() * 1e6);
            samples.get.push((total - put).as_secs_f64() * 1e6);
            samples.total.push(total.as_secs_f64() * 1e6);
        }
    }
    Ok((small, big))
}

/// Reading the latest checkpoint with nothing cached (a run starting on another process or
/// after a restart): mean µs at ~10 and ~300 messages.
async fn cold_reads(config: &BackendConfig) -> Result<(f64, f64)> {
    let writer = fawn_checkpoint::open(config).await?;
    let mut threads = Vec::new();
    for (size, t) in [(10usize, 0usize), (300, 1)] {
        for k in 0..8 {
            let thread = writer.create_thread(NewThread::default()).await?.thread_id;
            let mut chain = Chain::new(thread.clone());
            for i in 0..size {
                chain.put(&*writer, "agent", agent_step(i + k + t)).await?;
            }
            threads.push((size, thread));
        }
    }
    let warm_up = writer.create_thread(NewThread::default()).await?.thread_id;
    let mut chain = Chain::new(warm_up.clone());
    for i in 0..20 {
        chain.put(&*writer, "agent", agent_step(i)).await?;
    }
    writer.close().await;
    let mut out = [Vec::new(), Vec::new()];
    for _ in 0..3 {
        let reader = fawn_checkpoint::open(config).await?;
        // Connected and its statements prepared, but nothing of these threads cached.
        for _ in 0..3 {
            reader.get_checkpoint(&warm_up, "", None).await?;
        }
        for (size, thread) in &threads {
            let start = Instant::now();
            reader
                .get_checkpoint(thread, "", None)
                .await?
                .context("latest checkpoint")?;
            out[usize::from(*size == 300)].push(start.elapsed().as_secs_f64() * 1e6);
        }
        reader.close().await;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    Ok((mean(&out[0]), mean(&out[1])))
}

/// Checkpoint writes/s with `writers` concurrent writers.
async fn write_rate(db: &Arc<dyn Persistence>, writers: usize, seconds: f64) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let db = db.clone();
        let stop = stop.clone();
        let count = count.clone();
        tasks.push(tokio::spawn(async move {
            // Threads of up to 50 steps, so that what is measured is the store, not the
            // reducers working on ever longer message lists.
            let mut chain = Chain::new(db.create_thread(NewThread::default()).await?.thread_id);
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                if i % 50 == 49 {
                    chain = Chain::new(db.create_thread(NewThread::default()).await?.thread_id);
                }
                chain.put(&*db, "agent", agent_step(i)).await?;
                count.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            anyhow::Ok(())
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

/// Claims/s with `claimers` concurrent claimers over a pre-filled queue.
async fn claim_rate(db: &Arc<dyn Persistence>, claimers: usize, runs: usize) -> Result<f64> {
    for _ in 0..runs {
        let thread = db.create_thread(NewThread::default()).await?.thread_id;
        db.create_run(NewRun {
            thread_id: thread,
            assistant_id: "bench".into(),
            ..Default::default()
        })
        .await?;
    }
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..claimers {
        let db = db.clone();
        let count = count.clone();
        tasks.push(tokio::spawn(async move {
            let worker = format!("w{w}");
            while db.claim_next_run(&worker, LEASE).await?.is_some() {
                count.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let claimed = count.load(Ordering::Relaxed);
    if claimed != runs as u64 {
        bail!("claimed {claimed} of {runs} runs");
    }
    Ok(claimed as f64 / start.elapsed().as_secs_f64())
}

/// One tool-calling run as the server stores it.
async fn tool_calling_run(db: &dyn Persistence, worker: &str, n: u64) -> Result<()> {
    let thread_id = uuid::Uuid::now_v7().to_string();
    let created = db
        .create_run(NewRun {
            thread_id: thread_id.clone(),
            assistant_id: "bench".into(),
            kwargs: obj(
                json!({"input": {"messages": [{"type": "human", "content": "search it"}]},
                               "stream_mode": ["values", "messages-tuple"]}),
            ),
            create_thread_if_missing: Some(obj(json!({"graph_id": "lead_agent"}))),
            ..Default::default()
        })
        .await?;
    let run_id = created.run.run_id;
    db.claim_run(&run_id, worker, LEASE)
        .await?
        .context("claim the new run")?;
    let latest = db.get_checkpoint(&thread_id, "", None).await?;
    let mut chain = Chain::new(thread_id.clone());
    if let Some(cp) = latest {
        chain.last = Some(cp.checkpoint_id);
        chain.state = cp.state;
    }
    let n = n as usize;
    let steps = [
        (
            "__start__",
            StateUpdate::messages(vec![Message::human("search it").with_id(format!("h{n}"))]),
        ),
        ("agent", agent_step(2 * n)),
        ("tools", agent_step(2 * n + 1)),
        (
            "agent",
            StateUpdate::messages(vec![Message::ai(text(300, n)).with_id(format!("final{n}"))]),
        ),
        (
            "title",
            StateUpdate::from_value(json!({"title": "Search results"}))?,
        ),
    ];
    let last = steps.len() - 1;
    for (i, (node, update)) in steps.into_iter().enumerate() {
        let mut cp = chain.next(node, update, Some(&run_id))?;
        if i == last {
            cp.next.clear(); // the run ends here
        }
        chain.last = Some(db.put_checkpoint(cp).await?);
    }
    db.finish_run(
        &run_id,
        worker,
        RunFinish {
            status: RunStatus::Success,
            error: None,
            stop_reason: None,
            thread: ThreadSummary {
                values: Some(chain.state.to_value()),
                metadata: obj(json!({"graph_id": "lead_agent", "assistant_id": "bench"})),
                ..Default::default()
            },
        },
    )
    .await?;
    Ok(())
}

async fn run_rate(
    db: &Arc<dyn Persistence>,
    concurrency: usize,
    seconds: f64,
) -> Result<(f64, f64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let db = db.clone();
        let stop = stop.clone();
        let count = count.clone();
        let latencies = latencies.clone();
        tasks.push(tokio::spawn(async move {
            let worker = format!("w{w}");
            let mut local = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let n = count.fetch_add(1, Ordering::Relaxed);
                let start = Instant::now();
                tool_calling_run(&*db, &worker, n).await?;
                local.push(start.elapsed().as_secs_f64() * 1e3);
            }
            if let Ok(mut l) = latencies.lock() {
                l.extend(local);
            }
            anyhow::Ok(())
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut l = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    l.sort_by(f64::total_cmp);
    Ok((l.len() as f64 / elapsed, percentile(&l, 0.99)))
}

async fn bench(name: &str, config: BackendConfig, seconds: f64) -> Result<Vec<(String, String)>> {
    let db = fawn_checkpoint::open(&config).await?;
    let wipe = Truncate {
        runs: true,
        threads: true,
        assistants: true,
        checkpointer: true,
        store: true,
    };
    db.truncate(&wipe).await?;
    let mut rows = Vec::new();
    let (mut small, mut big) = step_costs(&db).await?;
    let ratio = big.mean() / small.mean();
    rows.push((
        format!("{name}: step (put + get latest), ~10 msgs"),
        small.summary(),
    ));
    rows.push((
        format!("{name}: step (put + get latest), ~300 msgs"),
        big.summary(),
    ));
    rows.push((
        format!("{name}: step cost ratio 300/10"),
        format!("{ratio:.2}× (target ≤ 1.5×)"),
    ));
    let (cold10, cold300) = cold_reads(&config).await?;
    rows.push((
        format!("{name}: cold read of the latest state (run start)"),
        format!("{cold10:.0} µs at ~10 msgs, {cold300:.0} µs at ~300 msgs"),
    ));
    for writers in [1, 16] {
        let rate = write_rate(&db, writers, seconds).await?;
        rows.push((
            format!("{name}: checkpoint writes/s, {writers} writer(s)"),
            format!("{rate:.0}/s"),
        ));
    }
    for claimers in [1, 8] {
        let rate = claim_rate(&db, claimers, 2000).await?;
        rows.push((
            format!("{name}: claims/s, {claimers} claimer(s)"),
            format!("{rate:.0}/s"),
        ));
    }
    db.truncate(&wipe).await?;
    let (runs, p99) = run_rate(&db, 64, seconds).await?;
    let target = if name == "sqlite" { 500 } else { 200 };
    rows.push((
        format!("{name}: tool-calling runs/s, concurrency 64"),
        format!("{runs:.0}/s, p99 {p99:.1} ms (target ≥ {target}/s)"),
    ));
    db.truncate(&wipe).await?;
    db.close().await;
    Ok(rows)
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut rows = Vec::new();
        if args.sqlite {
            let dir = std::env::temp_dir().join(format!("fawn-bench-{}", uuid::Uuid::new_v4()));
            let config = BackendConfig::Sqlite {
                path: dir.join("fawn.db"),
            };
            let result = bench("sqlite", config, args.seconds).await;
            let _ = tokio::fs::remove_dir_all(&dir).await;
            rows.extend(result?);
        }
        if args.postgres {
            match std::env::var("BENCH_DATABASE_URL")
                .or_else(|_| std::env::var("TEST_DATABASE_URL"))
            {
                Ok(url) => {
                    let config = BackendConfig::Postgres {
                        url,
                        schema: Some("fawn_bench".into()),
                    };
                    rows.extend(bench("postgres", config, args.seconds).await?);
                }
                Err(_) => {
                    eprintln!("BENCH_DATABASE_URL / TEST_DATABASE_URL not set: Postgres skipped")
                }
            }
        }
        let width = rows
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        println!("{:width$}  result", "persistence benchmark");
        println!("{}  {}", "-".repeat(width), "-".repeat(40));
        for (k, v) in rows {
            println!("{k:width$}  {v}");
        }
        anyhow::Ok(())
    })
}
