//! The boundary between the agent and whoever runs it (the server's run workers).
//!
//! The server turns an HTTP `RunCreate` into a [`RunSpec`], hands it to a [`GraphRunner`]
//! with a [`RunObserver`], and gets a [`RunOutcome`] back. The observer persists checkpoints
//! and forwards stream events; the agent never sees HTTP, SSE or SQL.
//!
//! # What a run emits, in order
//!
//! One LangGraph superstep per graph node (`__start__`, each middleware hook
//! `<Middleware>.<hook>`, `model`, `tools`). Per superstep:
//!
//! 1. `NodeStart` (model and tools always; a hook only if it returned something);
//! 2. while it runs: `ModelStart` before each model call (the messages sent), then its
//!    `MessageChunk`s (model tokens; every chunk of one message shares its
//!    `lc_run--…` id, the last has `chunk_position: "last"`), a `ToolStart` per tool call
//!    when the tools start, then as each call finishes its `ToolEnd` and its result as a
//!    whole `Message`, `Custom` payloads from middlewares and tools;
//! 3. `NodeEnd` with the node's update (`updates` mode: `{"<node>": update}`);
//! 4. when the node changed the state: a [`StepCheckpoint`] (`values` / `checkpoints`).
//!
//! Hooks that return nothing are still supersteps (they count towards `recursion_limit` and
//! advance `step`, as in LangGraph) but are not reported and write no checkpoint.
//!
//! # Checkpoints of a typical tool-calling turn
//!
//! On a thread whose latest checkpoint is step `s` (a new thread counts as `s = −2`), with
//! input and no middlewares:
//!
//! | step  | source  | writes                    | next          |
//! |-------|---------|---------------------------|---------------|
//! | s+1   | `input` | —                         | `__start__`   |
//! | s+2   | `loop`  | `__start__`: the input    | `model`       |
//! | s+3   | `loop`  | `model`: AI with calls    | `tools`       |
//! | s+4   | `loop`  | `tools`: tool messages    | `model`       |
//! | s+5   | `loop`  | `model`: final answer     | —             |
//!
//! With middlewares, each hook that changes the state adds its own `loop` checkpoint (its
//! writes under `<Middleware>.<hook>`), and the step numbers count the silent hooks too.
//! When the run stops and the last checkpoint's `next` is no longer true (the final hooks
//! were silent, or a breakpoint fired after a silent hook), one more `loop` checkpoint with
//! **no writes** records the right `next` (`[]` when finished). A run from an older
//! checkpoint (`StartPoint::is_fork`) with new input writes its `input` checkpoint under it;
//! without input (a `command`, a resume) it first writes a `fork` copy of it. Nothing else is
//! written: a run that cannot start (bad options, unknown agent) writes no checkpoint.
//!
//! LangGraph emits `values` only for supersteps that changed the state: a checkpoint with
//! empty `writes` (input, fork, or a `next`-only checkpoint) needs no `values` event. A run
//! without input (resume, `command` without `update`) starts with the current state as its
//! first `values` in LangGraph; that one is the server's to send.
//!
//! # Cost per step
//!
//! The agent mutates its state in place when it is the only owner of the `Arc` it handed to
//! [`RunObserver::checkpoint`]. An observer that keeps `StepCheckpoint::state` beyond the
//! call (a latest-state cache) makes the next step copy the whole state (O(messages)).

use async_trait::async_trait;
use fawn_state::{Command, EventSink, Interrupt, StateUpdate, ThreadState};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// `interrupt_before` / `interrupt_after`: `"*"` or a list of node names.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Breakpoints {
    #[default]
    None,
    All,
    Nodes(Vec<String>),
}

impl Breakpoints {
    pub fn contains(&self, node: &str) -> bool {
        match self {
            Breakpoints::None => false,
            Breakpoints::All => true,
            Breakpoints::Nodes(n) => n.iter().any(|x| x == node),
        }
    }
}

/// A task waiting in a checkpoint (the node that runs next), with any interrupts it raised.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingTask {
    pub id: String,
    pub name: String,
    pub interrupts: Vec<Interrupt>,
}

/// Where a run starts: the state of the checkpoint it continues from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StartPoint {
    /// Id of the checkpoint the run continues from (`None` for a thread with no checkpoint;
    /// `step` is then ignored and taken as LangGraph's −2, so the input checkpoint is −1).
    pub checkpoint_id: Option<String>,
    pub state: ThreadState,
    /// Nodes that were scheduled next in that checkpoint (`[]` = finished).
    pub next: Vec<String>,
    pub tasks: Vec<PendingTask>,
    /// Step number of that checkpoint (`-1` for an input checkpoint).
    pub step: i64,
    /// True when the run starts from an older checkpoint (time travel): its first
    /// checkpoint is a `fork`.
    pub is_fork: bool,
}

/// Everything one run needs, already validated by the caller.
#[derive(Clone, Debug, Default)]
pub struct RunSpec {
    pub thread_id: String,
    pub run_id: String,
    pub assistant_id: String,
    pub graph_id: String,
    pub attempt: u32,
    /// `config.configurable` (assistant config merged with the run's).
    pub configurable: Map<String, Value>,
    /// `context` (assistant context merged with the run's).
    pub context: Map<String, Value>,
    /// Raw client value; the agent applies DeerFlow's default (100) and clamp (1000).
    pub recursion_limit: Option<Value>,
    pub tags: Vec<String>,
    /// Run metadata, copied into checkpoint metadata and `messages` event metadata.
    pub metadata: Map<String, Value>,
    /// New input written before the first step (`None` = continue from the checkpoint).
    pub input: Option<StateUpdate>,
    pub command: Option<Command>,
    pub interrupt_before: Breakpoints,
    pub interrupt_after: Breakpoints,
    pub start: StartPoint,
}

/// LangGraph checkpoint `metadata.source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointSource {
    Input,
    Loop,
    Update,
    Fork,
}

impl CheckpointSource {
    pub fn as_str(&self) -> &'static str {
        match self {
            CheckpointSource::Input => "input",
            CheckpointSource::Loop => "loop",
            CheckpointSource::Update => "update",
            CheckpointSource::Fork => "fork",
        }
    }
}

/// One checkpoint to persist. `writes` is the delta since the previous checkpoint (what the
/// storage layer persists); `state` is the full state after it (for `values` events).
#[derive(Clone, Debug)]
pub struct StepCheckpoint {
    pub step: i64,
    pub source: CheckpointSource,
    /// `(node name, what it wrote)` in order.
    pub writes: Vec<(String, StateUpdate)>,
    pub state: Arc<ThreadState>,
    pub next: Vec<String>,
    pub tasks: Vec<PendingTask>,
}

/// The observer could not persist a checkpoint; the run must stop.
#[derive(Debug, Clone, thiserror::Error)]
#[error("could not persist checkpoint: {0}")]
pub struct ObserverError(pub String);

/// Receives a run's events and persists its checkpoints.
#[async_trait]
pub trait RunObserver: EventSink {
    /// Persists a checkpoint, or queues it behind the run's earlier ones. Returns once it is
    /// durable enough for the run's `durability` (`sync`: written; `async`: queued, written
    /// while the next step runs); the agent does not start the next step before that. An
    /// error of a queued write surfaces at a later call or when the run ends.
    async fn checkpoint(&self, checkpoint: StepCheckpoint) -> Result<(), ObserverError>;
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum RunOutcome {
    /// The graph finished, or paused on an interrupt/breakpoint (still `success` in LangGraph).
    ///
    /// * Finished: the last checkpoint has `next: []`.
    /// * Static breakpoint: `interrupts` is empty and the last checkpoint's `next`/`tasks`
    ///   name the pending node (LangGraph streams `updates {"__interrupt__": []}`).
    /// * Pending clarification (DeerFlow's `ask_clarification`): the run ended normally with
    ///   the question's ToolMessage, and `interrupts` holds the question (`value` = the
    ///   structured `human_input` request, `id` stable); the last checkpoint's first task
    ///   carries the same interrupts, so the thread is `interrupted` until a new input or a
    ///   `command.resume` answers it (see `crate::interrupts`).
    Success {
        interrupts: Vec<Interrupt>,
        /// DeerFlow `stop_reason` (`loop_capped`, `subagent_limit_capped`, …), if any.
        stop_reason: Option<String>,
    },
    /// The graph raised. `error` is the exception type name LangGraph would report
    /// (e.g. `GraphRecursionError`), `message` its text.
    Error { error: String, message: String },
    /// The cancellation token fired.
    Cancelled,
}

/// A graph description for `/assistants/{id}/graph` and `/schemas`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphDescription {
    /// LangChain drawable-graph JSON (`{nodes, edges}`).
    pub graph: Value,
    pub input_schema: Value,
    pub output_schema: Value,
    pub state_schema: Value,
    pub config_schema: Value,
    pub context_schema: Value,
}

/// `POST /threads/{id}/state` names a node that does not exist.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("Node {0} does not exist")]
pub struct UnknownNode(pub String);

/// A runnable graph. The server holds one per graph id.
#[async_trait]
pub trait GraphRunner: Send + Sync {
    fn graph_id(&self) -> &str;

    fn describe(&self) -> GraphDescription;

    /// The nodes scheduled after a state update written "as" `as_node` (LangGraph
    /// `update_state` semantics). `None` = the graph's default for a manual update.
    fn next_after_update(
        &self,
        as_node: Option<&str>,
        state: &ThreadState,
    ) -> Result<Vec<String>, UnknownNode>;

    /// Runs to completion, an interrupt, an error or cancellation.
    async fn run(
        &self,
        spec: RunSpec,
        observer: Arc<dyn RunObserver>,
        cancel: CancellationToken,
    ) -> RunOutcome;
}

/// Adds LangGraph's context of a node's task to run metadata, as `messages` and `events`
/// records carry it: `langgraph_step`, `langgraph_node`, `langgraph_triggers`,
/// `langgraph_path` and `langgraph_checkpoint_ns`. Returns the task's namespace,
/// `<node>:<task id>`.
pub fn insert_node_context(
    m: &mut Map<String, Value>,
    step: i64,
    node: &str,
    task_id: &str,
) -> String {
    let ns = format!("{node}:{task_id}");
    m.insert("langgraph_step".into(), json!(step));
    m.insert("langgraph_node".into(), json!(node));
    m.insert(
        "langgraph_triggers".into(),
        json!([format!("branch:to:{node}")]),
    );
    m.insert("langgraph_path".into(), json!(["__pregel_pull", node]));
    m.insert("langgraph_checkpoint_ns".into(), json!(ns));
    ns
}
