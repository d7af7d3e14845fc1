//! Framework overhead per agent step: one run of N tool-call steps (model + tool), with an
//! in-process model that answers instantly and does not record requests, a trivial tool, and
//! an in-memory store that keeps every checkpoint's writes (the deltas a real store
//! persists). Reports, per step, the wall time minus the time spent inside the model, as
//! p50/p99 over the steps of the run (pooled over repetitions).
//!
//! `cargo run --release -p fawn-bench --bin agent_steps [-- --keep-state] [--deerflow]`
//!
//! `--keep-state` also runs with a store that keeps each checkpoint's full state `Arc` (as a
//! latest-state cache does), which makes the agent copy its state on the next step.
//! `--deerflow` also runs DeerFlow's full middleware chain (informational: several of its
//! middlewares look at the whole history on every call, by design).

use async_trait::async_trait;
use fawn_agent::{
    AgentDeps, GraphRunner, LeadAgent, ObserverError, RunObserver, RunOutcome, RunSpec,
    StaticTools, StepCheckpoint,
};
use fawn_config::Settings;
use fawn_llm::{ChatModel, ChatRequest, ChunkStream, LlmError, ModelInfo, ModelRegistry};
use fawn_sandbox::{Sandbox, SandboxError, SandboxProvider, ThreadPaths};
use fawn_state::{EventSink, Message, StateUpdate, StreamEvent, ToolCallChunk, UsageMetadata};
use fawn_tools::{Tool, ToolContext, ToolError, ToolOutput};
use futures::StreamExt;
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Answers `steps` tool calls, then a final text; never looks at (or keeps) the request.
struct BenchModel {
    info: ModelInfo,
    calls: AtomicUsize,
    steps: usize,
    /// Nanoseconds spent producing answers (excluded from the framework's overhead).
    model_nanos: Arc<AtomicU64>,
}

fn chunks(call: usize, steps: usize) -> Vec<Message> {
    let mut out = Vec::with_capacity(3);
    if call < steps {
        let id = format!("call_{call}");
        let mut a = Message::ai_chunk("");
        a.tool_call_chunks.push(ToolCallChunk {
            name: Some("echo".into()),
            args: Some(r#"{"text": "ste"#.into()),
            id: Some(id),
            index: Some(0),
            ..Default::default()
        });
        out.push(a);
        let mut b = Message::ai_chunk("");
        b.tool_call_chunks.push(ToolCallChunk {
            args: Some(format!(r#"p {call}"}}"#)),
            index: Some(0),
            ..Default::default()
        });
        out.push(b);
    } else {
        out.push(Message::ai_chunk("All "));
        out.push(Message::ai_chunk("done."));
    }
    let mut last = Message::ai_chunk("");
    last.response_metadata.insert(
        "finish_reason".into(),
        json!(if call < steps { "tool_calls" } else { "stop" }),
    );
    last.usage_metadata = Some(UsageMetadata::new(10, 5));
    last.chunk_position = Some("last".into());
    out.push(last);
    out
}

#[async_trait]
impl ChatModel for BenchModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChunkStream, LlmError> {
        // Dropping the request is the framework's cost (it built the request), so it happens
        // before the model's own time starts.
        drop(request);
        let t = Instant::now();
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let s = futures::stream::iter(chunks(call, self.steps).into_iter().map(Ok)).boxed();
        self.model_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(s)
    }
}

struct Echo;

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Echoes its text."
    }
    fn parameters(&self) -> Arc<Value> {
        Arc::new(json!({"type": "object", "properties": {"text": {"type": "string"}}}))
    }
    async fn call(
        &self,
        args: Map<String, Value>,
        _: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let t = args.get("text").and_then(Value::as_str).unwrap_or_default();
        Ok(ToolOutput::text(format!("echo: {t}")))
    }
}

struct NoSandbox;

#[async_trait]
impl SandboxProvider for NoSandbox {
    async fn acquire(&self, _: &str) -> Result<String, SandboxError> {
        Err(SandboxError::Unavailable("benchmark".into()))
    }
    fn get(&self, _: &str) -> Option<Arc<dyn Sandbox>> {
        None
    }
    async fn release(&self, _: &str) {}
    fn thread_paths(&self, thread_id: &str) -> ThreadPaths {
        ThreadPaths::new(
            std::path::Path::new("/tmp/fawn-bench"),
            "default",
            thread_id,
        )
    }
}

/// An in-memory checkpoint store: keeps every checkpoint's metadata and writes (what a real
/// store persists) and lets go of the full state, as the server does once it has sent it.
/// One stored checkpoint: step, source, writes, next.
type Row = (i64, &'static str, Vec<(String, StateUpdate)>, Vec<String>);

#[derive(Default)]
struct MemoryStore {
    rows: Mutex<Vec<Row>>,
    /// Keep the latest state like a latest-state cache does (`--keep-state`).
    keep_state: bool,
    latest: Mutex<Option<Arc<fawn_state::ThreadState>>>,
    /// Time at which each `tools` checkpoint was handed over (the end of a step).
    step_ends: Mutex<Vec<(Instant, u64)>>,
    model_nanos: Arc<AtomicU64>,
    events: AtomicUsize,
}

impl EventSink for MemoryStore {
    fn emit(&self, _event: StreamEvent) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl RunObserver for MemoryStore {
    async fn checkpoint(&self, c: StepCheckpoint) -> Result<(), ObserverError> {
        let is_tools = c.writes.first().is_some_and(|(n, _)| n == "tools");
        if self.keep_state
            && let Ok(mut l) = self.latest.lock()
        {
            *l = Some(c.state.clone());
        }
        let mut rows = self
            .rows
            .lock()
            .map_err(|_| ObserverError("poisoned".into()))?;
        rows.push((c.step, c.source.as_str(), c.writes, c.next));
        drop(rows);
        if is_tools {
            let now = Instant::now();
            let model = self.model_nanos.load(Ordering::Relaxed);
            if let Ok(mut e) = self.step_ends.lock() {
                e.push((now, model));
            }
        }
        Ok(())
    }
}

/// Per-step framework overhead of one run of `steps` steps.
async fn one_run(
    steps: usize,
    deerflow: bool,
    keep_state: bool,
    home: &std::path::Path,
) -> anyhow::Result<Vec<Duration>> {
    let model_nanos = Arc::new(AtomicU64::new(0));
    let model = Arc::new(BenchModel {
        info: ModelInfo {
            name: "bench".into(),
            model: "bench".into(),
            provider: "mock".into(),
            ..Default::default()
        },
        calls: AtomicUsize::new(0),
        steps,
        model_nanos: model_nanos.clone(),
    });
    let mut settings = Settings::with_home(home);
    // One long run: allow every superstep (DeerFlow's chain adds a node per hook), and do not
    // let loop detection stop a run that calls the same tool hundreds of times on purpose.
    settings.app.max_recursion_limit = 1_000_000;
    settings.app.loop_detection.enabled = false;
    let settings = Arc::new(settings);
    let models = ModelRegistry::from_models(vec![model]);
    let mut deps = if deerflow {
        AgentDeps::deerflow(settings, models, Arc::new(NoSandbox), false)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
    } else {
        AgentDeps::new(settings, models, Arc::new(NoSandbox))
    };
    deps.tools.push(Arc::new(StaticTools(vec![Arc::new(Echo)])));
    let agent = LeadAgent::new(deps);
    let store = Arc::new(MemoryStore {
        model_nanos: model_nanos.clone(),
        keep_state,
        ..Default::default()
    });
    let spec = RunSpec {
        thread_id: format!("bench-{steps}"),
        run_id: "run".into(),
        assistant_id: "lead_agent".into(),
        graph_id: "lead_agent".into(),
        attempt: 1,
        recursion_limit: Some(json!(1_000_000)),
        input: Some(StateUpdate::from_value(json!({"messages": "go"}))?),
        ..Default::default()
    };
    let start = Instant::now();
    let out = agent
        .run(spec, store.clone(), CancellationToken::new())
        .await;
    if !matches!(out, RunOutcome::Success { .. }) {
        anyhow::bail!("run failed: {out:?}");
    }
    let _ = start;
    let ends = store
        .step_ends
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    if ends.len() != steps {
        anyhow::bail!("expected {steps} tool steps, saw {}", ends.len());
    }
    // Step i spans from the end of step i-1 (its tools checkpoint) to the end of step i.
    let mut out = Vec::with_capacity(steps.saturating_sub(1));
    for w in ends.windows(2) {
        let wall = w[1].0 - w[0].0;
        let model = Duration::from_nanos(w[1].1 - w[0].1);
        out.push(wall.saturating_sub(model));
    }
    Ok(out)
}

/// The conversation of a run after `steps` steps, as the loop stores it.
fn conversation(steps: usize) -> Vec<Message> {
    let mut v = vec![Message::human("go").with_id(uuid::Uuid::new_v4().to_string())];
    for call in 0..steps {
        let mut acc = fawn_state::ChunkAccumulator::new();
        for c in chunks(call, steps) {
            acc.push(&c);
        }
        let mut ai = acc.finish();
        ai.id = Some(format!("lc_run--{}", uuid::Uuid::new_v4()));
        v.push(ai);
        v.push(
            Message::tool(
                format!("echo: step {call}"),
                format!("call_{call}"),
                Some("echo".into()),
            )
            .with_id(uuid::Uuid::new_v4().to_string()),
        );
    }
    v
}

/// What handing the conversation to one model request costs at each size: a clone of the
/// state's `Messages` (what a `ModelRequest` holds), next to a deep `Vec<Message>` copy (what
/// it held before), for reading the tables above.
fn copy_costs() {
    println!("\nthe conversation handed to one model request (clone + drop)");
    println!(
        "{:>6} {:>9} {:>14} {:>14}",
        "steps", "messages", "Messages µs", "Vec<Message> µs"
    );
    fn per_clone<T: Clone>(value: &T, reps: u32) -> Duration {
        let t = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(value.clone());
        }
        t.elapsed() / reps
    }
    for steps in [10usize, 30, 100, 300] {
        let conv = conversation(steps);
        let shared = fawn_state::Messages::from(conv.clone());
        println!(
            "{steps:>6} {:>9} {:>14.2} {:>14.1}",
            conv.len(),
            us(per_clone(&shared, 2000)),
            us(per_clone(&conv, 200))
        );
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn table(deerflow: bool, keep_state: bool, home: &std::path::Path) -> anyhow::Result<()> {
    println!(
        "\n{}, store {} — framework overhead per step (model + tool), excluding model time",
        if deerflow {
            "DeerFlow middleware chain"
        } else {
            "bare loop (no middlewares)"
        },
        if keep_state {
            "keeps writes + latest state"
        } else {
            "keeps writes"
        }
    );
    println!(
        "{:>6} {:>8} {:>10} {:>10} {:>10}",
        "steps", "samples", "p50 µs", "p99 µs", "mean µs"
    );
    // Warm up allocators and lazy statics.
    one_run(20, deerflow, keep_state, home).await?;
    let mut p50_10 = None;
    for steps in [10usize, 30, 100, 300] {
        let reps = (3000 / steps).clamp(3, 100);
        let mut samples = Vec::new();
        for _ in 0..reps {
            samples.extend(one_run(steps, deerflow, keep_state, home).await?);
        }
        samples.sort();
        let mean = samples.iter().sum::<Duration>() / samples.len().max(1) as u32;
        let p50 = percentile(&samples, 0.5);
        println!(
            "{steps:>6} {:>8} {:>10.1} {:>10.1} {:>10.1}",
            samples.len(),
            us(p50),
            us(percentile(&samples, 0.99)),
            us(mean)
        );
        if steps == 10 {
            p50_10 = Some(p50);
        } else if steps == 300
            && let Some(base) = p50_10
        {
            println!(
                "growth 10 → 300 steps (p50): {:.2}×",
                p50.as_secs_f64() / base.as_secs_f64().max(1e-9)
            );
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let deerflow = std::env::args().any(|a| a == "--deerflow");
    let keep_state = std::env::args().any(|a| a == "--keep-state");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let home = std::env::temp_dir().join(format!("fawn-bench-{}", std::process::id()));
    rt.block_on(async {
        table(false, false, &home).await?;
        if keep_state {
            table(false, true, &home).await?;
        }
        if deerflow {
            table(true, false, &home).await?;
        }
        copy_costs();
        anyhow::Ok(())
    })?;
    let _ = std::fs::remove_dir_all(&home);
    Ok(())
}
