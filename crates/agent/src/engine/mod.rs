//! The step loop: `__start__` → before_agent → [before_model → model → after_model →
//! tools]* → after_agent → `__end__`, one LangGraph superstep per node.
//!
//! Per superstep the loop emits, in LangGraph's order: token chunks (`model`) or whole tool
//! messages (`tools`) while the node runs, then the node's `NodeEnd` (the `updates`
//! payload), then — when the node changed the state — a `loop` checkpoint whose `next` is the
//! node that runs after it. Hooks that return nothing are still supersteps (they count
//! towards the recursion limit, as in LangGraph) but are not reported and write no
//! checkpoint. When the run stops (finished, breakpoint) and the last checkpoint's `next`
//! is no longer true, one more checkpoint without writes records the right `next`. A run that
//! ends on a clarification question records `next = [<loop entry>]` with the question as the
//! task's interrupt (see [`crate::interrupts`]).
//!
//! Per-step cost does not depend on the thread's length except for one copy: the
//! conversation handed to the model chain (`ModelRequest` owns its messages). State writes
//! are applied in place (when the observer let go of the previous checkpoint's state) and
//! checkpoints carry deltas.

pub(crate) mod model;
pub(crate) mod tools;

use crate::contract::{Breakpoints, CheckpointSource, PendingTask, RunObserver, StepCheckpoint};
use crate::graph::{self, Node, Topology, last_ai_index};
use fawn_llm::ToolSpec;
use fawn_middleware::{Chain, Hook, MiddlewareError, ModelRequest, RunContext, ToolCallRequest};
use fawn_state::{
    Interrupt, Message, MessageKind, StateUpdate, StreamEvent, ThreadState, ToolCall,
};
use fawn_tools::{SubagentRunner, Tool, ToolError};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// What one run executes: its middleware chain, model, tools and system prompt.
pub struct AgentGraph {
    pub(crate) chain: Chain,
    pub(crate) topology: Topology,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    tool_index: HashMap<String, usize>,
    pub(crate) tool_names: Vec<String>,
    pub(crate) tool_specs: Arc<[ToolSpec]>,
    pub(crate) system_prompt: Option<String>,
}

impl std::fmt::Debug for AgentGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentGraph")
            .field("chain", &self.chain)
            .field("tools", &self.tool_names)
            .finish()
    }
}

impl AgentGraph {
    /// A graph from a chain, the run's tools and its system prompt. Tools contributed by
    /// middlewares (`Middleware::tools`) are added after `tools`; when two tools share a name
    /// the first one wins.
    pub fn new(chain: Chain, tools: Vec<Arc<dyn Tool>>, system_prompt: Option<String>) -> Self {
        let mut all: Vec<Arc<dyn Tool>> = Vec::with_capacity(tools.len());
        let mut tool_index = HashMap::new();
        let extra: Vec<Arc<dyn Tool>> =
            chain.middlewares().iter().flat_map(|m| m.tools()).collect();
        for t in tools.into_iter().chain(extra) {
            let name = t.name().to_string();
            if tool_index.contains_key(&name) {
                tracing::warn!(tool = %name, "duplicate tool name; the first one is kept");
                continue;
            }
            tool_index.insert(name, all.len());
            all.push(t);
        }
        let tool_names = all.iter().map(|t| t.name().to_string()).collect();
        let tool_specs = all.iter().map(|t| t.spec()).collect();
        let topology = Topology::new(&chain);
        AgentGraph {
            chain,
            topology,
            tools: all,
            tool_index,
            tool_names,
            tool_specs,
            system_prompt,
        }
    }

    pub(crate) fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tool_index.get(name).map(|i| self.tools[*i].clone())
    }

    /// The names of the run's tools, in the order the model sees them.
    pub fn tool_names(&self) -> &[String] {
        &self.tool_names
    }

    pub fn system_prompt(&self) -> Option<&str> {
        self.system_prompt.as_deref()
    }
}

/// Per-run settings of the loop.
#[derive(Clone, Debug, Default)]
pub(crate) struct LoopConfig {
    pub(crate) recursion_limit: u32,
    pub(crate) interrupt_before: Breakpoints,
    pub(crate) interrupt_after: Breakpoints,
    /// Run metadata copied into `messages` event metadata.
    pub(crate) metadata: Map<String, Value>,
    pub(crate) tags: Vec<String>,
    /// Emit token chunks, tool messages and node events (false for subagents).
    pub(crate) stream: bool,
}

/// Where a run begins.
#[derive(Clone, Debug)]
pub(crate) enum Begin {
    /// New input: an `input` checkpoint, then `__start__` writes it, then `then` (default:
    /// the entry node).
    Input {
        update: Box<StateUpdate>,
        then: Option<Node>,
    },
    /// Continue at a node (resume after a breakpoint, `command.goto`).
    At { node: Node, skip_breakpoint: bool },
}

/// How the loop stopped.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LoopEnd {
    /// Reached `__end__`; `interrupts` are pending questions (clarification).
    Done {
        interrupts: Vec<Interrupt>,
    },
    /// Stopped at a static breakpoint.
    Paused,
    RecursionLimit(u32),
    Failed {
        error: String,
        message: String,
    },
    Cancelled,
}

/// The loop's result: how it ended and the state it left.
pub(crate) struct LoopOutput {
    pub(crate) end: LoopEnd,
    pub(crate) state: Arc<ThreadState>,
}

/// The text LangGraph raises `GraphRecursionError` with.
pub(crate) fn recursion_message(limit: u32) -> String {
    format!(
        "Recursion limit of {limit} reached without hitting a stop condition. You can increase \
         the limit by setting the `recursion_limit` config key.\nFor troubleshooting, visit: \
         https://docs.langchain.com/oss/python/langgraph/errors/GRAPH_RECURSION_LIMIT"
    )
}

/// What a node did.
struct Executed {
    writes: Vec<StateUpdate>,
    /// Explicit next node (hook `jump_to`, `tools` ending the run).
    jump: Option<Node>,
    /// Emit `NodeStart`/`NodeEnd` (model and tools always; hooks only when they did something).
    reported: bool,
    /// A jump-only hook has no writes but is still reported with this payload.
    display: Option<Value>,
    interrupts: Vec<Interrupt>,
}

/// One run of the loop.
pub(crate) struct Loop<'a> {
    graph: &'a AgentGraph,
    ctx: &'a RunContext,
    cfg: &'a LoopConfig,
    observer: Option<&'a dyn RunObserver>,
    subagents: Option<Arc<dyn SubagentRunner>>,
    progress: Option<&'a UnboundedSender<Message>>,
    state: Arc<ThreadState>,
    /// The last superstep executed (or the step of the checkpoint the run started from).
    step: i64,
    /// `(step, next, interrupts)` of the last checkpoint written by this run.
    last_written: Option<(i64, Vec<String>, Vec<Interrupt>)>,
    /// Pending questions raised in this run (clarification).
    interrupts: Vec<Interrupt>,
    /// Task ids already derived, `(step, node, id)`: a checkpoint names its next tasks,
    /// and the step that runs them needs the same ids (each a SHA-1).
    task_ids: Vec<(i64, String, String)>,
}

impl<'a> Loop<'a> {
    pub(crate) fn new(
        graph: &'a AgentGraph,
        ctx: &'a RunContext,
        cfg: &'a LoopConfig,
        state: Arc<ThreadState>,
        start_step: i64,
    ) -> Self {
        Loop {
            graph,
            ctx,
            cfg,
            observer: None,
            subagents: None,
            progress: None,
            state,
            step: start_step,
            last_written: None,
            interrupts: Vec::new(),
            task_ids: Vec::new(),
        }
    }

    /// Persist checkpoints through `observer`.
    pub(crate) fn with_observer(mut self, observer: &'a dyn RunObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Runs `task` subagents with `runner`.
    pub(crate) fn with_subagents(mut self, runner: Option<Arc<dyn SubagentRunner>>) -> Self {
        self.subagents = runner;
        self
    }

    /// Sends every AI and tool message the run produces to `progress`.
    pub(crate) fn with_progress(mut self, progress: &'a UnboundedSender<Message>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Runs from `begin` until the graph ends, pauses, fails or is cancelled. `fork`: the
    /// run starts from an older checkpoint; a `fork` copy of it (with this `next`) is written
    /// first.
    pub(crate) async fn run(mut self, begin: Begin, fork: Option<Vec<String>>) -> LoopOutput {
        let end = self.drive(begin, fork).await;
        LoopOutput {
            end,
            state: self.state,
        }
    }

    async fn drive(&mut self, begin: Begin, fork: Option<Vec<String>>) -> LoopEnd {
        let limit = self.cfg.recursion_limit;
        // LangGraph: the loop starts at the checkpoint's step + 1 and stops after
        // `recursion_limit + 1` more supersteps.
        let stop = self.step + 1 + i64::from(limit) + 1;
        if let Some(next) = fork
            && let Err(e) = self
                .write_checkpoint(CheckpointSource::Fork, Vec::new(), next, Vec::new())
                .await
        {
            return e;
        }
        let (mut node, mut skip_breakpoint) = match begin {
            Begin::Input { update, then } => {
                // Only removals can make a write fail; try those before writing anything so
                // that a bad input leaves the thread as it was.
                if update
                    .messages
                    .as_deref()
                    .is_some_and(|m| m.iter().any(|m| m.kind == MessageKind::Remove))
                {
                    let mut trial = (*self.state).clone();
                    if let Err(e) = trial.apply(&mut (*update).clone()) {
                        return LoopEnd::Failed {
                            error: "InvalidUpdateError".into(),
                            message: e.to_string(),
                        };
                    }
                }
                self.step += 1;
                if let Err(e) = self
                    .write_checkpoint(
                        CheckpointSource::Input,
                        Vec::new(),
                        vec![graph::START.into()],
                        Vec::new(),
                    )
                    .await
                {
                    return e;
                }
                self.step += 1;
                let next = then.unwrap_or_else(|| self.graph.topology.entry());
                let mut writes = vec![*update];
                if let Err(e) = self.apply(&mut writes) {
                    return e;
                }
                let (next_names, pending) = self.checkpoint_next(next);
                let writes = writes
                    .into_iter()
                    .map(|w| (graph::START.to_string(), w))
                    .collect();
                if let Err(e) = self
                    .write_checkpoint(CheckpointSource::Loop, writes, next_names, pending)
                    .await
                {
                    return e;
                }
                (next, false)
            }
            Begin::At {
                node,
                skip_breakpoint,
            } => (node, skip_breakpoint),
        };
        loop {
            if self.ctx.cancel.is_cancelled() {
                return LoopEnd::Cancelled;
            }
            if node == Node::End {
                return self.finish().await;
            }
            if node == Node::Start {
                node = self.graph.topology.entry();
                continue;
            }
            if self.step + 1 > stop {
                return LoopEnd::RecursionLimit(limit);
            }
            let name = self.graph.topology.name(node).to_string();
            if !skip_breakpoint && self.cfg.interrupt_before.contains(&name) {
                return self.pause(node).await;
            }
            skip_breakpoint = false;
            self.step += 1;
            let task_id = self.task_id(self.step, &name);
            let executed = match self.execute(node, &name, &task_id).await {
                Ok(e) => e,
                Err(end) => return end,
            };
            let Executed {
                mut writes,
                jump,
                reported,
                display,
                interrupts,
            } = executed;
            writes.retain(|w| !w.is_empty());
            if let Err(e) = self.apply(&mut writes) {
                if reported {
                    self.node_end(&task_id, &name, Value::Null, Some(end_message(&e)));
                }
                return e;
            }
            self.interrupts.extend(interrupts);
            let next = jump.unwrap_or_else(|| self.graph.topology.next(node, &self.state));
            if reported {
                let payload = match display {
                    Some(d) => d,
                    None => display_of(&writes),
                };
                self.node_end(&task_id, &name, payload, None);
            }
            self.send_progress(&writes);
            if !writes.is_empty() {
                let (next_names, pending) = self.checkpoint_next(next);
                let writes = writes.into_iter().map(|w| (name.clone(), w)).collect();
                if let Err(e) = self
                    .write_checkpoint(CheckpointSource::Loop, writes, next_names, pending)
                    .await
                {
                    return e;
                }
            }
            if self.cfg.interrupt_after.contains(&name) && next != Node::End {
                return self.pause(next).await;
            }
            node = next;
        }
    }

    /// Applies writes through the reducers (atomically).
    fn apply(&mut self, writes: &mut [StateUpdate]) -> Result<(), LoopEnd> {
        if writes.is_empty() {
            return Ok(());
        }
        Arc::make_mut(&mut self.state)
            .apply_writes(writes)
            .map_err(|e| LoopEnd::Failed {
                error: "InvalidUpdateError".into(),
                message: e.to_string(),
            })
    }

    async fn execute(
        &mut self,
        node: Node,
        name: &str,
        task_id: &str,
    ) -> Result<Executed, LoopEnd> {
        match node {
            Node::Model => {
                self.node_start(task_id, name);
                self.run_model(name, task_id).await
            }
            Node::Tools => {
                self.node_start(task_id, name);
                self.run_tools(name, task_id).await
            }
            Node::Start | Node::End => Ok(Executed {
                writes: Vec::new(),
                jump: None,
                reported: false,
                display: None,
                interrupts: Vec::new(),
            }),
            hook_node => self.run_hook(hook_node, name, task_id).await,
        }
    }

    async fn run_hook(
        &mut self,
        node: Node,
        name: &str,
        task_id: &str,
    ) -> Result<Executed, LoopEnd> {
        let Some((mw, hook)) = self.graph.topology.middleware(node) else {
            return Err(LoopEnd::Failed {
                error: "InvalidUpdateError".into(),
                message: format!("Node {name} does not exist"),
            });
        };
        let mw = mw.clone();
        let state = self.state.clone();
        let ctx = self.ctx;
        let fut = async {
            match hook {
                Hook::BeforeAgent => mw.before_agent(&state, ctx).await,
                Hook::BeforeModel => mw.before_model(&state, ctx).await,
                Hook::AfterModel => mw.after_model(&state, ctx).await,
                Hook::AfterAgent => mw.after_agent(&state, ctx).await,
                Hook::WrapModelCall | Hook::WrapToolCall => Ok(Default::default()),
            }
        };
        let outcome = tokio::select! {
            biased;
            _ = self.ctx.cancel.cancelled() => return Err(LoopEnd::Cancelled),
            r = fut => r,
        };
        drop(state);
        let outcome = outcome.map_err(middleware_end)?;
        let update = outcome.update.filter(|u| !u.is_empty());
        let jump = outcome.jump_to.map(|j| self.graph.topology.jump(node, j));
        let reported = update.is_some() || jump.is_some();
        let display = match (&update, outcome.jump_to) {
            (None, Some(j)) => Some(json!({ "jump_to": jump_name(j) })),
            _ => None,
        };
        if reported {
            self.node_start(task_id, name);
        }
        Ok(Executed {
            writes: update.into_iter().collect(),
            jump,
            reported,
            display,
            interrupts: Vec::new(),
        })
    }

    async fn run_model(&mut self, name: &str, task_id: &str) -> Result<Executed, LoopEnd> {
        let state = self.state.clone();
        let request = ModelRequest {
            system_prompt: self.graph.system_prompt.clone(),
            // Shares the state's chunks: no message is copied.
            messages: state.messages.clone(),
            tools: self.graph.tool_specs.clone(),
            tool_choice: None,
            model: self.ctx.model.clone(),
            thinking_enabled: self.ctx.options.thinking_enabled,
            reasoning_effort: self.ctx.options.reasoning_effort.clone(),
            max_tokens: self.ctx.options.max_tokens,
            temperature: self.ctx.options.temperature,
            extra: Map::new(),
        };
        let invoker = model::ModelInvoker {
            events: self.ctx.events.clone(),
            metadata: self.node_metadata(name, task_id),
            tags: self.cfg.tags.clone(),
            cancel: self.ctx.cancel.clone(),
            stream_tokens: self.cfg.stream,
        };
        let response = tokio::select! {
            biased;
            _ = self.ctx.cancel.cancelled() => return Err(LoopEnd::Cancelled),
            r = self.graph.chain.call_model(request, &state, self.ctx, &invoker) => r,
        };
        drop(state);
        let mut message = response.map_err(middleware_end)?.message;
        repair_ai_message(&mut message);
        Ok(Executed {
            writes: vec![StateUpdate::messages(vec![message])],
            jump: None,
            reported: true,
            display: None,
            interrupts: Vec::new(),
        })
    }

    async fn run_tools(&mut self, name: &str, task_id: &str) -> Result<Executed, LoopEnd> {
        let state = self.state.clone();
        let Some(ai_index) = last_ai_index(&state.messages) else {
            return Ok(Executed {
                writes: Vec::new(),
                jump: None,
                reported: true,
                display: Some(Value::Null),
                interrupts: Vec::new(),
            });
        };
        let ai = &state.messages[ai_index];
        let answered: HashSet<&str> = state
            .messages
            .range(ai_index + 1..)
            .filter(|m| m.kind == MessageKind::Tool)
            .filter_map(|m| m.tool_call_id.as_deref())
            .collect();
        let calls: Vec<&ToolCall> = ai
            .tool_calls
            .iter()
            .filter(|c| !answered.contains(c.id.as_deref().unwrap_or_default()))
            .collect();
        let invalid: Vec<_> = ai
            .invalid_tool_calls
            .iter()
            .filter(|c| !answered.contains(c.id.as_deref().unwrap_or_default()))
            .collect();
        let metadata = if self.cfg.stream {
            self.node_metadata(name, task_id)
        } else {
            Map::new()
        };
        let executor = tools::ToolExecutor {
            ctx: self.ctx,
            subagents: self.subagents.clone(),
            tool_names: &self.graph.tool_names,
        };
        let mut slots: Vec<Option<(Message, Option<StateUpdate>, bool)>> = vec![None; calls.len()];
        if self.cfg.stream {
            for call in &calls {
                self.ctx.events.emit(StreamEvent::ToolStart {
                    step: self.step,
                    task_id: task_id.to_string(),
                    call_id: call.id.clone().unwrap_or_default(),
                    name: call.name.clone(),
                    args: call.args.clone(),
                });
            }
        }
        let mut pending: FuturesUnordered<_> = calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                let request = ToolCallRequest {
                    call: (*call).clone(),
                    tool: self.graph.tool(&call.name),
                    state: state.clone(),
                };
                let chain = &self.graph.chain;
                let executor = &executor;
                let ctx = self.ctx;
                async move {
                    let observed = tools::ObservedCall::start(&request);
                    // A tool that panics becomes an error answer, not a dead run.
                    let call = std::panic::AssertUnwindSafe(fawn_telemetry::trace::instrument(
                        chain.call_tool(request, ctx, executor),
                        observed.span(),
                    ));
                    let result = match futures::FutureExt::catch_unwind(call).await {
                        Ok(r) => r,
                        Err(_) => Err(ToolError::Failed("the tool panicked".into())),
                    };
                    observed.end(&result);
                    (i, result)
                }
            })
            .collect();
        loop {
            let next = tokio::select! {
                biased;
                _ = self.ctx.cancel.cancelled() => return Err(LoopEnd::Cancelled),
                n = pending.next() => n,
            };
            let Some((i, result)) = next else { break };
            let call = calls[i];
            let call_id = call.id.clone().unwrap_or_default();
            let (mut message, update, end_run) = match result {
                Ok(r) => (r.message, r.update, r.end_run),
                Err(ToolError::Cancelled) => return Err(LoopEnd::Cancelled),
                Err(e) => (
                    tools::tool_error_message(&call.name, &call_id, &e),
                    None,
                    false,
                ),
            };
            if message.id.as_deref().is_none_or(str::is_empty) {
                message.id = Some(uuid::Uuid::new_v4().to_string());
            }
            if self.cfg.stream {
                self.ctx.events.emit(StreamEvent::ToolEnd {
                    step: self.step,
                    task_id: task_id.to_string(),
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    message: message.clone(),
                });
                self.ctx.events.emit(StreamEvent::Message {
                    message: message.clone(),
                    metadata: metadata.clone(),
                });
            }
            slots[i] = Some((message, update, end_run));
        }
        drop(pending);
        let mut writes = Vec::with_capacity(calls.len() + invalid.len());
        let mut end_run = false;
        let mut interrupts = Vec::new();
        for slot in slots {
            let Some((message, update, ends)) = slot else {
                continue;
            };
            if ends {
                end_run = true;
                if let Some(i) = crate::interrupts::clarification_interrupt(&message) {
                    interrupts.push(i);
                }
            }
            writes.push(tool_write(message, update));
        }
        for c in invalid {
            let call_id = c.id.clone().unwrap_or_default();
            let mut message = tools::invalid_call_message(c, &call_id);
            message.id = Some(uuid::Uuid::new_v4().to_string());
            if self.cfg.stream {
                self.ctx.events.emit(StreamEvent::Message {
                    message: message.clone(),
                    metadata: metadata.clone(),
                });
            }
            writes.push(StateUpdate::messages(vec![message]));
        }
        let all_direct = !calls.is_empty()
            && calls
                .iter()
                .all(|c| self.graph.tool(&c.name).is_some_and(|t| t.return_direct()));
        drop(state);
        let jump = (end_run || all_direct).then(|| self.graph.topology.exit());
        Ok(Executed {
            writes,
            jump,
            reported: true,
            display: None,
            interrupts,
        })
    }

    /// Reaching `__end__`: make sure the last checkpoint says nothing is left to run, or —
    /// with a pending clarification — that the model runs next once it is answered.
    async fn finish(&mut self) -> LoopEnd {
        let (next, _) = self.checkpoint_next(Node::End);
        if let Err(e) = self.ensure_next(next).await {
            return e;
        }
        LoopEnd::Done {
            interrupts: self.interrupts.clone(),
        }
    }

    /// A static breakpoint before `node`.
    async fn pause(&mut self, node: Node) -> LoopEnd {
        let next = vec![self.graph.topology.name(node).to_string()];
        if let Err(e) = self.ensure_next(next).await {
            return e;
        }
        LoopEnd::Paused
    }

    /// Writes a checkpoint without writes when the last one does not already record `next`
    /// (and the pending interrupts) for the current step.
    async fn ensure_next(&mut self, next: Vec<String>) -> Result<(), LoopEnd> {
        let up_to_date = matches!(
            &self.last_written,
            Some((s, n, i)) if *s == self.step && *n == next && *i == self.interrupts
        );
        if up_to_date {
            return Ok(());
        }
        let interrupts = self.interrupts.clone();
        self.write_checkpoint(CheckpointSource::Loop, Vec::new(), next, interrupts)
            .await
    }

    /// What a checkpoint records when `next` runs next: `[name]`, or `[]` at the end — except
    /// that a run ending on a pending question records the next model turn with the question
    /// as its interrupt.
    fn checkpoint_next(&self, next: Node) -> (Vec<String>, Vec<Interrupt>) {
        match next {
            Node::End if self.interrupts.is_empty() => (Vec::new(), Vec::new()),
            Node::End => {
                let entry = self.graph.topology.loop_entry();
                (
                    vec![self.graph.topology.name(entry).to_string()],
                    self.interrupts.clone(),
                )
            }
            n => (vec![self.graph.topology.name(n).to_string()], Vec::new()),
        }
    }

    /// Persists a checkpoint at the current step. `interrupts` are attached to the first
    /// pending task.
    async fn write_checkpoint(
        &mut self,
        source: CheckpointSource,
        writes: Vec<(String, StateUpdate)>,
        next: Vec<String>,
        interrupts: Vec<Interrupt>,
    ) -> Result<(), LoopEnd> {
        let Some(observer) = self.observer else {
            self.last_written = Some((self.step, next, interrupts));
            return Ok(());
        };
        let tasks = next
            .iter()
            .enumerate()
            .map(|(i, n)| PendingTask {
                id: self.task_id(self.step + 1, n),
                name: n.clone(),
                interrupts: if i == 0 {
                    interrupts.clone()
                } else {
                    Vec::new()
                },
            })
            .collect();
        let checkpoint = StepCheckpoint {
            step: self.step,
            source,
            writes,
            state: self.state.clone(),
            next: next.clone(),
            tasks,
        };
        observer
            .checkpoint(checkpoint)
            .await
            .map_err(|e| LoopEnd::Failed {
                error: "CheckpointError".into(),
                message: e.to_string(),
            })?;
        self.last_written = Some((self.step, next, interrupts));
        Ok(())
    }

    /// A stable task id for `node` at `step` of this thread.
    fn task_id(&mut self, step: i64, node: &str) -> String {
        if let Some((_, _, id)) = self
            .task_ids
            .iter()
            .find(|(s, n, _)| *s == step && n == node)
        {
            return id.clone();
        }
        let key = format!("{}|{step}|{node}", self.ctx.thread_id);
        let id = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, key.as_bytes()).to_string();
        // Only the current and the next step are asked for again.
        self.task_ids.retain(|(s, _, _)| *s >= step - 1);
        self.task_ids.push((step, node.to_string(), id.clone()));
        id
    }

    /// Run metadata plus LangGraph's node context, for `messages` events.
    fn node_metadata(&self, name: &str, task_id: &str) -> Map<String, Value> {
        let mut m = self.cfg.metadata.clone();
        let ns = crate::contract::insert_node_context(&mut m, self.step, name, task_id);
        m.insert("checkpoint_ns".into(), json!(ns));
        m
    }

    fn node_start(&self, task_id: &str, name: &str) {
        if !self.cfg.stream {
            return;
        }
        self.ctx.events.emit(StreamEvent::NodeStart {
            step: self.step,
            task_id: task_id.to_string(),
            node: name.to_string(),
            // LangGraph sends the node's input (the whole state); Fawn sends null so that a
            // step's cost does not grow with the thread.
            input: Value::Null,
            triggers: vec![format!("branch:to:{name}")],
        });
    }

    fn node_end(&self, task_id: &str, name: &str, update: Value, error: Option<String>) {
        if !self.cfg.stream {
            return;
        }
        self.ctx.events.emit(StreamEvent::NodeEnd {
            step: self.step,
            task_id: task_id.to_string(),
            node: name.to_string(),
            update,
            error,
            interrupts: Vec::new(),
        });
    }

    fn send_progress(&self, writes: &[StateUpdate]) {
        let Some(progress) = self.progress else {
            return;
        };
        for w in writes {
            for m in w.messages.iter().flatten() {
                if matches!(m.kind, MessageKind::Ai | MessageKind::Tool) {
                    let _ = progress.send(m.clone());
                }
            }
        }
    }
}

/// The write of one tool call: its message first, then what else it wrote.
fn tool_write(message: Message, update: Option<StateUpdate>) -> StateUpdate {
    let mut w = StateUpdate::messages(vec![message]);
    if let Some(u) = update {
        w.merge(u);
    }
    w
}

/// The `updates` payload of a node that wrote `writes`.
fn display_of(writes: &[StateUpdate]) -> Value {
    match writes {
        [] => Value::Null,
        [one] => one.to_value(),
        many => {
            let mut merged = StateUpdate::default();
            for w in many {
                merged.merge(w.clone());
            }
            merged.to_value()
        }
    }
}

fn jump_name(j: fawn_middleware::JumpTo) -> &'static str {
    match j {
        fawn_middleware::JumpTo::Model => "model",
        fawn_middleware::JumpTo::Tools => "tools",
        fawn_middleware::JumpTo::End => "end",
    }
}

fn end_message(e: &LoopEnd) -> String {
    match e {
        LoopEnd::Failed { message, .. } => message.clone(),
        other => format!("{other:?}"),
    }
}

fn middleware_end(e: MiddlewareError) -> LoopEnd {
    match e {
        MiddlewareError::Cancelled | MiddlewareError::Llm(fawn_llm::LlmError::Cancelled) => {
            LoopEnd::Cancelled
        }
        MiddlewareError::Llm(e) => LoopEnd::Failed {
            error: model::error_class(&e).to_string(),
            message: e.to_string(),
        },
        MiddlewareError::Failed(message) => LoopEnd::Failed {
            error: "RuntimeError".into(),
            message,
        },
    }
}

/// Makes a model answer safe to store: an `ai` message with an id, and an id on every tool
/// call (a provider that sends none would leave the call impossible to answer).
fn repair_ai_message(message: &mut Message) {
    if message.is_chunk() {
        *message = message.to_message();
    }
    if !message.kind.is_ai() {
        message.kind = MessageKind::Ai;
    }
    if message.id.as_deref().is_none_or(str::is_empty) {
        message.id = Some(format!("lc_run--{}", uuid::Uuid::new_v4()));
    }
    for c in &mut message.tool_calls {
        if c.id.as_deref().is_none_or(str::is_empty) {
            c.id = Some(format!("call_{}", uuid::Uuid::new_v4().simple()));
        }
    }
    for c in &mut message.invalid_tool_calls {
        if c.id.as_deref().is_none_or(str::is_empty) {
            c.id = Some(format!("call_{}", uuid::Uuid::new_v4().simple()));
        }
    }
}
