//! `--streams N`: N streaming runs held open at once against a slowly streaming mock.
//!
//! The mock echoes the user's message one word per chunk, a chunk every `--chunk-ms` (100),
//! and the message has as many words as make a run last `--stream-secs` (10). Each of N
//! client slots starts at `i * ramp / N` (`--ramp-secs`, default the run length, so the
//! node reaches N open streams without a burst of N connections at once) and streams run
//! after run (a new thread each, `POST /threads/{id}/runs/stream`) until the hold
//! (`--hold-secs`, default twice the run length) is over; then each finishes its run.
//!
//! Reported: runs and errors (an HTTP error, a broken stream, an `error` event, or a run
//! with fewer chunks than the mock sent), the peak of streams open at once, the server's
//! peak RSS (sampled every 200 ms) and its CPU, the first event's latency (request sent →
//! first SSE event), the first token's (request sent → first token chunk: the run started
//! and reached the model) and the chunk delay: the gap between consecutive token chunks of a run
//! minus the mock's interval, all as percentiles. The mock's and this client's CPU are
//! printed too: on a small machine they share the cores with the server.

use super::{Proc, Workload, cpu_ms, pct, rss_mb, start_server_with, stop_server};
use anyhow::{Context, Result, bail};
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What `--streams` was asked for.
#[derive(Clone, Debug)]
pub struct StreamPlan {
    pub streams: usize,
    pub stream_secs: f64,
    pub chunk_ms: u64,
    pub ramp_secs: Option<f64>,
    pub hold_secs: Option<f64>,
}

/// Open files this process (and the server and mock it starts, which inherit the limit)
/// needs for `streams` streams: a client socket each here, a server socket and a model
/// socket each in the server, a socket each in the mock, and some to spare.
fn raise_fd_limit(streams: usize) -> Result<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let want = u64::try_from(streams)
        .unwrap_or(u64::MAX)
        .saturating_mul(2)
        .saturating_add(4096);
    let limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(u64::MAX);
    // Root may raise the hard limit too (up to fs.nr_open); others get the hard limit.
    let target = if hard < want {
        match setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(want),
                maximum: Some(want),
            },
        ) {
            Ok(()) => return Ok(want),
            Err(_) => hard,
        }
    } else {
        want.max(limit.current.unwrap_or(0))
    };
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum: limit.maximum,
        },
    )
    .context("raising RLIMIT_NOFILE")?;
    if target < want {
        println!(
            "warning: RLIMIT_NOFILE is {target}, {streams} streams want {want}: expect connection errors"
        );
    }
    Ok(target)
}

fn start_slow_mock(chunk_ms: u64) -> Result<(Proc, String)> {
    let chunk_ms = chunk_ms.to_string();
    let (child, url) =
        fawn_bench::start_mock_llm(["--mode", "echo", "--chunk-delay-ms", chunk_ms.as_str()])?;
    Ok((Proc { child }, url))
}

/// What one run saw.
#[derive(Default)]
struct RunSample {
    first_event_ms: Option<f64>,
    /// Request sent → first token chunk (the run started and its model answered).
    first_token_ms: Option<f64>,
    /// Gaps between consecutive token chunks minus the mock's interval, ms.
    chunk_delays_ms: Vec<f64>,
    chunks: usize,
}

/// Streams one run: creates a thread, posts the streaming run and reads it to its end.
async fn one_stream(
    client: &reqwest::Client,
    url: &str,
    input: &str,
    chunk_ms: f64,
    open: &AtomicUsize,
    peak: &AtomicUsize,
) -> Result<RunSample> {
    let tid = fawn_bench::create_thread(client, url).await?;
    let tid = tid.as_str();
    let body = json!({"assistant_id": "lead_agent",
        "input": {"messages": [{"role": "user", "content": input}]},
        "stream_mode": ["messages-tuple"]});
    let sent = Instant::now();
    let r = client
        .post(format!("{url}/threads/{tid}/runs/stream"))
        .json(&body)
        .send()
        .await?
        .error_for_status()?;
    let now_open = open.fetch_add(1, Ordering::Relaxed) + 1;
    peak.fetch_max(now_open, Ordering::Relaxed);
    let result = read_events(r, sent, chunk_ms).await;
    open.fetch_sub(1, Ordering::Relaxed);
    result
}

async fn read_events(r: reqwest::Response, sent: Instant, chunk_ms: f64) -> Result<RunSample> {
    let mut sample = RunSample::default();
    let mut s = r.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut last_chunk: Option<Instant> = None;
    while let Some(piece) = s.next().await {
        let piece = piece?;
        let at = Instant::now();
        buf.extend_from_slice(&piece);
        // Complete events end with a blank line.
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            if sample.first_event_ms.is_none() {
                sample.first_event_ms = Some(at.duration_since(sent).as_secs_f64() * 1000.0);
            }
            if event.starts_with(b"event: error") {
                bail!("error event: {}", String::from_utf8_lossy(&event));
            }
            // Token chunks with text (the role and finish chunks carry none).
            if event.starts_with(b"event: messages")
                && !event.windows(12).any(|w| w == br#""content":"""#)
            {
                sample.chunks += 1;
                if sample.first_token_ms.is_none() {
                    sample.first_token_ms = Some(at.duration_since(sent).as_secs_f64() * 1000.0);
                }
                if let Some(prev) = last_chunk {
                    let gap = at.duration_since(prev).as_secs_f64() * 1000.0;
                    sample.chunk_delays_ms.push((gap - chunk_ms).max(0.0));
                }
                last_chunk = Some(at);
            }
        }
    }
    Ok(sample)
}

pub async fn run(plan: StreamPlan) -> Result<()> {
    let n = plan.streams.max(1);
    let limit = raise_fd_limit(n)?;
    let words = ((plan.stream_secs * 1000.0) / plan.chunk_ms.max(1) as f64)
        .round()
        .max(1.0) as usize;
    let input: String = (0..words)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let ramp = plan.ramp_secs.unwrap_or(plan.stream_secs);
    let hold = plan.hold_secs.unwrap_or(2.0 * plan.stream_secs);
    println!(
        "streams: {n} at once, {words} chunks per run every {} ms (~{:.0} s), ramp {ramp:.0} s, hold {hold:.0} s; open file limit {limit}",
        plan.chunk_ms, plan.stream_secs
    );
    let (mock, mock_url) = start_slow_mock(plan.chunk_ms)?;
    let mock_pid = mock.child.id();
    // The server's own limit comes from `fawn serve` (soft raised to the hard limit it
    // inherits from here); its concurrency default is sized from memory.
    let server = start_server_with(&mock_url, None, Workload::Minimal, None, &[]).await?;
    println!("mock LLM at {mock_url}, fawn at {} (SQLite)", server.url);
    let status: serde_json::Value = fawn_net::client()
        .get(format!("{}/ok", server.url))
        .send()
        .await?
        .json()
        .await?;
    println!("  /ok runs {}", status["runs"]);
    let max_concurrent = status["runs"]["max_concurrent"].as_u64().unwrap_or(0);
    if max_concurrent < n as u64 {
        println!(
            "warning: the server executes at most {max_concurrent} runs at once; the rest wait pending"
        );
    }

    let client = fawn_net::client_builder()
        // Every stream holds its own connection; idle ones are reused for the next run.
        .pool_max_idle_per_host(n)
        .tcp_nodelay(true)
        .build()?;
    let open = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let server_pid = server.pid;
    let client_pid = std::process::id();
    let cpu0 = (cpu_ms(server_pid)?, cpu_ms(mock_pid)?, cpu_ms(client_pid)?);
    let idle_rss = rss_mb(server_pid)?;
    let started = Instant::now();
    let hold_end = started + Duration::from_secs_f64(ramp + hold);

    // RSS sampler.
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        let open = open.clone();
        tokio::spawn(async move {
            let mut peak_rss: f64 = 0.0;
            let mut last_print = Instant::now();
            while sampling.load(Ordering::Relaxed) {
                if let Ok(r) = rss_mb(server_pid) {
                    peak_rss = peak_rss.max(r);
                }
                if last_print.elapsed() >= Duration::from_secs(5) {
                    last_print = Instant::now();
                    println!(
                        "  t={:>5.1}s open {:>6}  server RSS {:>7.1} MB",
                        started.elapsed().as_secs_f64(),
                        open.load(Ordering::Relaxed),
                        rss_mb(server_pid).unwrap_or(f64::NAN)
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            peak_rss
        })
    };

    let mut slots = tokio::task::JoinSet::new();
    let input = Arc::new(input);
    for i in 0..n {
        let client = client.clone();
        let url = server.url.clone();
        let input = input.clone();
        let open = open.clone();
        let peak = peak.clone();
        let delay = Duration::from_secs_f64(ramp * i as f64 / n as f64);
        let chunk_ms = plan.chunk_ms as f64;
        slots.spawn(async move {
            tokio::time::sleep(delay).await;
            let mut samples = Vec::new();
            let mut errors = Vec::new();
            loop {
                match one_stream(&client, &url, &input, chunk_ms, &open, &peak).await {
                    Ok(s) if s.chunks < words => {
                        errors.push(format!("a run streamed {} of {words} chunks", s.chunks))
                    }
                    Ok(s) => samples.push(s),
                    Err(e) => errors.push(format!("{e:#}")),
                }
                if Instant::now() >= hold_end {
                    break;
                }
            }
            (samples, errors)
        });
    }
    let mut firsts = Vec::new();
    let mut tokens = Vec::new();
    let mut delays = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    let mut runs = 0usize;
    while let Some(joined) = slots.join_next().await {
        let (samples, errs) = joined.context("a client slot panicked")?;
        runs += samples.len() + errs.len();
        for s in samples {
            firsts.extend(s.first_event_ms);
            tokens.extend(s.first_token_ms);
            delays.extend(s.chunk_delays_ms);
        }
        errors.extend(errs);
    }
    let elapsed = started.elapsed().as_secs_f64();
    sampling.store(false, Ordering::Relaxed);
    let peak_rss = sampler.await.unwrap_or(f64::NAN);
    let cpu1 = (cpu_ms(server_pid)?, cpu_ms(mock_pid)?, cpu_ms(client_pid)?);
    let (server_cpu, mock_cpu, client_cpu) = (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1, cpu1.2 - cpu0.2);

    println!(
        "== streams={n}: runs={runs} errors={} peak open {} in {elapsed:.1} s",
        errors.len(),
        peak.load(Ordering::Relaxed)
    );
    let mut distinct: Vec<&String> = errors.iter().collect();
    distinct.sort();
    distinct.dedup();
    for e in distinct.iter().take(5) {
        println!("   error: {e}");
    }
    println!("   server RSS idle {idle_rss:.1} MB, peak {peak_rss:.1} MB");
    println!(
        "   first event p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms ({} runs)",
        pct(&mut firsts, 0.5),
        pct(&mut firsts, 0.99),
        pct(&mut firsts, 1.0),
        firsts.len()
    );
    println!(
        "   first token p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        pct(&mut tokens, 0.5),
        pct(&mut tokens, 0.99),
        pct(&mut tokens, 1.0),
    );
    println!(
        "   chunk delay above the mock's {} ms: p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms ({} gaps)",
        plan.chunk_ms,
        pct(&mut delays, 0.5),
        pct(&mut delays, 0.99),
        pct(&mut delays, 1.0),
        delays.len()
    );
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as f64;
    let share = |ms: f64| 100.0 * ms / (elapsed * 1000.0);
    println!(
        "   CPU over the load (% of one core; {cores} cores): server {:.0}% ({:.2} ms/run), mock {:.0}%, client {:.0}%",
        share(server_cpu),
        server_cpu / runs.max(1) as f64,
        share(mock_cpu),
        share(client_cpu)
    );
    drop(client);
    stop_server(server).await?;
    drop(mock);
    Ok(())
}
