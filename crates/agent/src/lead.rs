//! The `lead_agent` graph: builds one run's model, tools, prompt and middleware chain from
//! its options and drives the loop.

use crate::contract::{
    GraphDescription, GraphRunner, RunObserver, RunOutcome, RunSpec, UnknownNode,
};
use crate::delivery;
use crate::engine::{AgentGraph, Begin, Loop, LoopConfig, LoopEnd, recursion_message};
use crate::graph::{self, Node, Topology, has_pending_tool_calls};
use crate::interrupts;
use crate::options::{ResolvedRun, SetupError, resolve_run};
use crate::prompt::{LeadPromptInputs, SubagentPrompt, SubagentSummary, lead_system_prompt};
use crate::subagents::SubagentPool;
use crate::workspace_changes;
use async_trait::async_trait;
use fawn_config::Settings;
use fawn_llm::{ModelInfo, ModelRegistry};
use fawn_middleware::{Chain, MemorySink, RunContext, RunOptions};
use fawn_sandbox::SandboxProvider;
use fawn_state::{EventSink, Interrupt, MessageKind, StateUpdate, ThreadState};
use fawn_tools::{SandboxSlot, SubagentRunner, Tool};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The graph id this runner serves.
pub const LEAD_AGENT_GRAPH_ID: &str = "lead_agent";

/// What the builders of a run's chain and tools know about it.
pub struct RunSetup<'a> {
    pub settings: &'a Arc<Settings>,
    pub models: &'a ModelRegistry,
    /// The resolved options, the custom agent (if any) and the runtime context.
    pub run: &'a ResolvedRun,
    /// The run's model.
    pub model: &'a ModelInfo,
    pub thread_id: &'a str,
    pub run_id: &'a str,
    /// Memory queue, when memory is enabled.
    pub memory: Option<&'a Arc<dyn MemorySink>>,
    /// The runner for `task` when subagents are enabled (tool sources build the `task`
    /// tool from its `available()` list).
    pub subagents: Option<Arc<dyn SubagentRunner>>,
    /// Set when building a subagent's chain: the `task` call id it runs for.
    pub subagent_task: Option<&'a str>,
}

impl RunSetup<'_> {
    pub fn options(&self) -> &RunOptions {
        &self.run.options
    }
}

/// Builds the middleware chains (the `middleware` crate's builders plug in here).
pub trait ChainBuilder: Send + Sync {
    /// The lead agent's chain for a run; `tools` are the run's tools.
    fn lead_chain(&self, setup: &RunSetup<'_>, tools: &[Arc<dyn Tool>]) -> Chain;
    /// A subagent's chain.
    fn subagent_chain(&self, setup: &RunSetup<'_>, tools: &[Arc<dyn Tool>]) -> Chain;
}

/// No middlewares at all (a bare LangChain agent).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMiddlewares;

impl ChainBuilder for NoMiddlewares {
    fn lead_chain(&self, _: &RunSetup<'_>, _: &[Arc<dyn Tool>]) -> Chain {
        Chain::default()
    }
    fn subagent_chain(&self, _: &RunSetup<'_>, _: &[Arc<dyn Tool>]) -> Chain {
        Chain::default()
    }
}

/// A source of tools for the lead agent (config tools and built-ins, MCP, …). The run's tools
/// are the concatenation of every source, in order; on a name clash the first tool wins.
#[async_trait]
pub trait ToolSource: Send + Sync {
    async fn tools(&self, setup: &RunSetup<'_>) -> Result<Vec<Arc<dyn Tool>>, SetupError>;
}

/// A fixed list of tools, for every run.
#[derive(Clone, Default)]
pub struct StaticTools(pub Vec<Arc<dyn Tool>>);

#[async_trait]
impl ToolSource for StaticTools {
    async fn tools(&self, _: &RunSetup<'_>) -> Result<Vec<Arc<dyn Tool>>, SetupError> {
        Ok(self.0.clone())
    }
}

/// Renders the `<skill_system>` prompt section of a run (the `tools` crate's skills catalog
/// plugs in here).
#[async_trait]
pub trait SkillsPrompt: Send + Sync {
    /// The section for the skills visible to this run (enabled ones filtered by the custom
    /// agent's allowlist; only `bootstrap` in bootstrap mode). `""` when there is none.
    async fn skill_section(&self, setup: &RunSetup<'_>) -> String;
}

/// No skills.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoSkills;

#[async_trait]
impl SkillsPrompt for NoSkills {
    async fn skill_section(&self, _: &RunSetup<'_>) -> String {
        String::new()
    }
}

/// What the lead agent needs from the process.
#[derive(Clone)]
pub struct AgentDeps {
    pub settings: Arc<Settings>,
    pub models: ModelRegistry,
    pub sandbox_provider: Arc<dyn SandboxProvider>,
    pub memory: Option<Arc<dyn MemorySink>>,
    /// Chain builders (default: [`NoMiddlewares`]).
    pub chains: Arc<dyn ChainBuilder>,
    /// Tool sources, concatenated in order (default: none).
    pub tools: Vec<Arc<dyn ToolSource>>,
    /// Skills for the prompt (default: [`NoSkills`]).
    pub skills: Arc<dyn SkillsPrompt>,
    /// Whether the sandbox can run bash (the `bash` subagent needs it). Default false.
    pub bash_available: bool,
}

impl AgentDeps {
    /// Dependencies with no middlewares, tools or skills; set the fields to add them.
    pub fn new(
        settings: Arc<Settings>,
        models: ModelRegistry,
        sandbox_provider: Arc<dyn SandboxProvider>,
    ) -> AgentDeps {
        AgentDeps {
            settings,
            models,
            sandbox_provider,
            memory: None,
            chains: Arc::new(NoMiddlewares),
            tools: Vec::new(),
            skills: Arc::new(NoSkills),
            bash_available: false,
        }
    }
}

/// DeerFlow's lead agent as a LangGraph graph (`lead_agent`).
///
/// ```text
/// let agent = LeadAgent::new(AgentDeps::new(settings, models, sandbox_provider));
/// let outcome = agent.run(spec, observer, cancel).await;
/// ```
pub struct LeadAgent {
    deps: AgentDeps,
}

impl LeadAgent {
    pub fn new(deps: AgentDeps) -> LeadAgent {
        LeadAgent { deps }
    }

    pub fn deps(&self) -> &AgentDeps {
        &self.deps
    }

    /// The topology of a run with default options (for `describe` and state updates).
    fn default_topology(&self) -> Option<Topology> {
        let model = self.deps.models.default_model()?;
        let run = ResolvedRun {
            options: RunOptions {
                model_name: model.info().name.clone(),
                max_concurrent_subagents: 3,
                max_total_subagents: 6,
                recursion_limit: 100,
                ..Default::default()
            },
            model: model.clone(),
            user_id: "default".into(),
            context: Map::new(),
            agent: None,
            non_interactive: false,
            warnings: Vec::new(),
        };
        let setup = RunSetup {
            settings: &self.deps.settings,
            models: &self.deps.models,
            run: &run,
            model: model.info(),
            thread_id: "",
            run_id: "",
            memory: self.deps.memory.as_ref(),
            subagents: None,
            subagent_task: None,
        };
        Some(Topology::new(&self.deps.chains.lead_chain(&setup, &[])))
    }

    /// Builds the graph of one run: tools, chain and system prompt.
    pub async fn build_graph(
        &self,
        run: &ResolvedRun,
        thread_id: &str,
        run_id: &str,
    ) -> Result<(AgentGraph, Option<Arc<SubagentPool>>), SetupError> {
        let pool = run.options.subagent_enabled.then(|| {
            Arc::new(SubagentPool::new(
                self.deps.clone(),
                run.clone(),
                thread_id,
                run_id,
            ))
        });
        let setup = RunSetup {
            settings: &self.deps.settings,
            models: &self.deps.models,
            run,
            model: run.model.info(),
            thread_id,
            run_id,
            memory: self.deps.memory.as_ref(),
            subagents: pool.clone().map(|p| p as Arc<dyn SubagentRunner>),
            subagent_task: None,
        };
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for source in &self.deps.tools {
            tools.extend(source.tools(&setup).await?);
        }
        if run.non_interactive {
            tools.retain(|t| t.name() != "ask_clarification");
        }
        if !run.options.subagent_enabled {
            tools.retain(|t| t.name() != "task");
        }
        if let Some(p) = &pool {
            p.set_tools(tools.clone());
        }
        let chain = self.deps.chains.lead_chain(&setup, &tools);
        let skill_section = self.deps.skills.skill_section(&setup).await;
        let subagents = pool.as_ref().map(|p| SubagentPrompt {
            max_concurrent: run.options.max_concurrent_subagents,
            max_total: run.options.max_total_subagents,
            available: p
                .available()
                .into_iter()
                .map(|a| SubagentSummary {
                    name: a.name,
                    description: a.description,
                })
                .collect(),
            bash_available: p.bash_available(),
        });
        let extra_sections = chain
            .middlewares()
            .iter()
            .filter_map(|m| m.system_prompt_section())
            .collect();
        let inputs = LeadPromptInputs {
            agent_name: run.options.agent_name.clone(),
            soul: run.agent.as_ref().and_then(|a| a.soul.clone()),
            subagents,
            skill_section,
            clarification: !run.non_interactive,
            bootstrap: run.options.is_bootstrap,
            extra_sections,
        };
        let prompt = lead_system_prompt(&inputs);
        Ok((AgentGraph::new(chain, tools, Some(prompt)), pool))
    }

    async fn run_inner(
        &self,
        spec: RunSpec,
        observer: Arc<dyn RunObserver>,
        cancel: CancellationToken,
    ) -> RunOutcome {
        let run = match resolve_run(
            &spec.configurable,
            &spec.context,
            spec.recursion_limit.as_ref(),
            &self.deps.settings,
            &self.deps.models,
        )
        .await
        {
            Ok(r) => r,
            Err(e) => return setup_error(e),
        };
        let (graph, pool) = match self.build_graph(&run, &spec.thread_id, &spec.run_id).await {
            Ok(g) => g,
            Err(e) => return setup_error(e),
        };
        let RunSpec {
            thread_id,
            run_id,
            assistant_id,
            graph_id,
            attempt,
            tags,
            metadata,
            input,
            command,
            interrupt_before,
            interrupt_after,
            start,
            ..
        } = spec;
        let plan = match plan_start(&graph.topology, input, command, &start) {
            Ok(p) => p,
            Err(e) => return setup_error(e),
        };
        let (begin, fork) = match plan {
            Plan::Nothing { interrupts } => {
                return RunOutcome::Success {
                    interrupts,
                    stop_reason: None,
                };
            }
            Plan::Run { begin } => {
                // New input from an older checkpoint is an `input` checkpoint under it (as
                // LangGraph writes it); only a run without input forks a copy first.
                let copy = start.is_fork && !matches!(begin, Begin::Input { .. });
                (begin, copy.then(|| start.next.clone()))
            }
        };
        let known_sandbox = start
            .state
            .sandbox
            .as_ref()
            .and_then(|s| s.sandbox_id.clone());
        let events: Arc<dyn EventSink> = observer.clone();
        let ctx = RunContext {
            thread_id: thread_id.clone(),
            run_id: run_id.clone(),
            user_id: run.user_id.clone(),
            settings: self.deps.settings.clone(),
            options: run.options.clone(),
            context: run.context.clone(),
            model: run.model.clone(),
            models: self.deps.models.clone(),
            events,
            cancel,
            sandbox: Arc::new(SandboxSlot::new(
                self.deps.sandbox_provider.clone(),
                thread_id.clone(),
                known_sandbox,
            )),
            memory: self.deps.memory.clone(),
            stop_reason: Mutex::new(None),
        };
        let mut meta = metadata;
        for (k, v) in [
            ("thread_id", Value::String(thread_id)),
            ("run_id", Value::String(run_id)),
            ("assistant_id", Value::String(assistant_id)),
            ("graph_id", Value::String(graph_id)),
            ("run_attempt", Value::from(attempt.max(1))),
        ] {
            meta.entry(k.to_string()).or_insert(v);
        }
        let cfg = LoopConfig {
            recursion_limit: run.options.recursion_limit,
            interrupt_before,
            interrupt_after,
            metadata: meta,
            tags,
            stream: true,
        };
        // A thread without any checkpoint starts from LangGraph's empty checkpoint (step −2),
        // so that its input checkpoint is step −1.
        let start_step = if start.checkpoint_id.is_none() {
            -2
        } else {
            start.step
        };
        let subagents: Option<Arc<dyn SubagentRunner>> = pool.map(|p| p as Arc<dyn SubagentRunner>);
        // Artifact delivery: what the outputs held, and which messages were there, before.
        let paths = self.deps.sandbox_provider.thread_paths(&ctx.thread_id);
        let outputs = paths.outputs.clone();
        // Workspace change review: the thread's files before, compared after the loop. Both
        // snapshots are taken in one blocking hop (a hop costs two thread wake-ups).
        let (outputs_before, workspace_before) = match tokio::task::spawn_blocking(move || {
            (
                delivery::Snapshot::take(&paths.outputs),
                workspace_changes::Snapshot::take(&paths.workspace, &paths.outputs),
            )
        })
        .await
        {
            Ok((outputs, workspace)) => (Some(outputs), Some(workspace)),
            Err(_) => (None, None),
        };
        let ids_before: HashSet<String> = start
            .state
            .messages
            .iter()
            .filter_map(|m| m.id.clone())
            .collect();
        let output = Loop::new(&graph, &ctx, &cfg, Arc::new(start.state), start_step)
            .with_observer(observer.as_ref())
            .with_subagents(subagents)
            .run(begin, fork)
            .await;
        let stop_reason = ctx.stop_reason();
        // After the loop, one blocking hop again: the workspace comparison and, when the run
        // ended cleanly and the delivery check will run, the outputs as they are now.
        let check_delivery = matches!(&output.end, LoopEnd::Done { interrupts } if interrupts.is_empty())
            && outputs_before.is_some();
        let outputs_after = if workspace_before.is_some() || check_delivery {
            let dir = outputs.clone();
            match tokio::task::spawn_blocking(move || {
                (
                    workspace_before.and_then(|before| before.journal_entry()),
                    check_delivery.then(|| delivery::Snapshot::take(&dir)),
                )
            })
            .await
            {
                Ok((entry, after)) => {
                    if let Some(entry) = entry {
                        observer.journal(entry);
                    }
                    after
                }
                Err(_) => None,
            }
        } else {
            None
        };
        if !matches!(output.end, LoopEnd::Done { .. })
            && let Some(id) = ctx.sandbox.acquired_id()
        {
            // The after_agent hooks (which release it) did not run.
            self.deps.sandbox_provider.release(&id).await;
        }
        match output.end {
            LoopEnd::Done { interrupts } => {
                if let Some(e) = error_fallback(&output.state) {
                    return e;
                }
                if interrupts.is_empty()
                    && let (Some(before), Some(after)) = (outputs_before, outputs_after)
                {
                    let produced = before.produced(&after);
                    let shown = delivery::presented(&output.state, &ids_before, &outputs);
                    if let Some(message) = delivery::verdict(&produced, &shown) {
                        tracing::info!(?produced, "a run left outputs it never presented");
                        return RunOutcome::Error {
                            error: "ArtifactDeliveryError".into(),
                            message: message.into(),
                        };
                    }
                }
                RunOutcome::Success {
                    interrupts,
                    stop_reason,
                }
            }
            LoopEnd::Paused => RunOutcome::Success {
                interrupts: Vec::new(),
                stop_reason,
            },
            LoopEnd::RecursionLimit(limit) => RunOutcome::Error {
                error: "GraphRecursionError".into(),
                message: recursion_message(limit),
            },
            LoopEnd::Failed { error, message } => RunOutcome::Error { error, message },
            LoopEnd::Cancelled => RunOutcome::Cancelled,
        }
    }
}

fn setup_error(e: SetupError) -> RunOutcome {
    tracing::warn!(error = e.error, "run setup failed: {}", e.message);
    RunOutcome::Error {
        error: e.error.to_string(),
        message: e.message,
    }
}

/// DeerFlow's error-handling middleware ends a failed model call with a visible AI message
/// marked `deerflow_error_fallback`; the run itself is then reported as an error.
fn error_fallback(state: &ThreadState) -> Option<RunOutcome> {
    let last = state.messages.last()?;
    if last.kind != MessageKind::Ai {
        return None;
    }
    let f = fawn_middleware::error_fallback(last)?;
    let message = if f.error_detail.is_empty() {
        last.text()
    } else {
        f.error_detail
    };
    Some(RunOutcome::Error {
        error: fallback_class(&f.error_type).to_string(),
        message,
    })
}

/// The exception class for a fallback's `error_type` (an `LlmError::kind`).
fn fallback_class(kind: &str) -> &'static str {
    match kind {
        "auth" => "AuthenticationError",
        "quota" | "rate_limit" => "RateLimitError",
        "timeout" => "APITimeoutError",
        "connection" => "APIConnectionError",
        "server" => "InternalServerError",
        "bad_request" => "BadRequestError",
        "malformed_response" => "APIError",
        "circuit_open" => "CircuitBreakerOpenError",
        _ => "LLMError",
    }
}

/// How a run begins.
#[derive(Debug)]
enum Plan {
    Run {
        begin: Begin,
    },
    /// Nothing to run (a finished thread, or a pending question without an answer).
    Nothing {
        interrupts: Vec<Interrupt>,
    },
}

/// The node a checkpoint's `next` names; unknown names (a chain that changed since) resume
/// at the start of the next model turn.
fn resume_node(topology: &Topology, name: &str) -> Node {
    match topology.node(name) {
        Some(Node::Start) => topology.entry(),
        Some(n) => n,
        None => {
            tracing::warn!(
                node = name,
                "checkpoint names an unknown node; resuming at the model"
            );
            topology.loop_entry()
        }
    }
}

fn plan_start(
    topology: &Topology,
    input: Option<StateUpdate>,
    command: Option<fawn_state::Command>,
    start: &crate::contract::StartPoint,
) -> Result<Plan, SetupError> {
    let pending: Vec<Interrupt> = start
        .tasks
        .iter()
        .flat_map(|t| t.interrupts.iter().cloned())
        .collect();
    let continue_at = start.next.first().map(|n| resume_node(topology, n));
    let Some(command) = command else {
        if let Some(update) = input {
            return Ok(Plan::Run {
                begin: Begin::Input {
                    update: Box::new(update),
                    then: None,
                },
            });
        }
        // No input: continue where the thread stopped.
        if !pending.is_empty() {
            return Ok(Plan::Nothing {
                interrupts: pending,
            });
        }
        return Ok(match continue_at {
            None => Plan::Nothing {
                interrupts: Vec::new(),
            },
            Some(node) => Plan::Run {
                begin: Begin::At {
                    node,
                    skip_breakpoint: true,
                },
            },
        });
    };
    let goto = match command.goto.first() {
        None => None,
        Some(name) => Some(topology.node(name).ok_or_else(|| SetupError {
            error: "InvalidUpdateError",
            message: format!("Node {name} does not exist"),
        })?),
    };
    let mut update = match &command.update {
        Some(v) => Some(interrupts::command_update(v).map_err(|e| SetupError {
            error: "InvalidUpdateError",
            message: e.to_string(),
        })?),
        None => None,
    };
    if let Some(resume) = &command.resume {
        let answers: Vec<_> = pending
            .iter()
            .filter_map(|i| {
                interrupts::resume_value_for(i, resume).map(|v| interrupts::answer_message(i, v))
            })
            .collect();
        if !answers.is_empty() {
            // An answered question continues like a new user message.
            let mut u = StateUpdate::messages(answers);
            if let Some(extra) = update.take() {
                u.merge(extra);
            }
            return Ok(Plan::Run {
                begin: Begin::Input {
                    update: Box::new(u),
                    then: goto,
                },
            });
        }
    }
    if let Some(update) = update {
        let then = goto.or(continue_at).unwrap_or(Node::End);
        return Ok(Plan::Run {
            begin: Begin::Input {
                update: Box::new(update),
                then: Some(then),
            },
        });
    }
    if let Some(node) = goto {
        return Ok(Plan::Run {
            begin: Begin::At {
                node,
                skip_breakpoint: true,
            },
        });
    }
    // `resume` that answers nothing: like a null input — a pending question stays pending.
    if !pending.is_empty() && input.is_none() {
        return Ok(Plan::Nothing {
            interrupts: pending,
        });
    }
    if let Some(update) = input {
        return Ok(Plan::Run {
            begin: Begin::Input {
                update: Box::new(update),
                then: None,
            },
        });
    }
    Ok(match continue_at {
        None => Plan::Nothing {
            interrupts: Vec::new(),
        },
        Some(node) => Plan::Run {
            begin: Begin::At {
                node,
                skip_breakpoint: true,
            },
        },
    })
}

#[async_trait]
impl GraphRunner for LeadAgent {
    fn graph_id(&self) -> &str {
        LEAD_AGENT_GRAPH_ID
    }

    fn describe(&self) -> GraphDescription {
        let topology = self
            .default_topology()
            .unwrap_or_else(|| Topology::new(&Chain::default()));
        crate::describe::describe(&topology)
    }

    fn next_after_update(
        &self,
        as_node: Option<&str>,
        state: &ThreadState,
    ) -> Result<Vec<String>, UnknownNode> {
        let topology = self
            .default_topology()
            .unwrap_or_else(|| Topology::new(&Chain::default()));
        next_after_update(&topology, as_node, state)
    }

    async fn run(
        &self,
        spec: RunSpec,
        observer: Arc<dyn RunObserver>,
        cancel: CancellationToken,
    ) -> RunOutcome {
        self.run_inner(spec, observer, cancel).await
    }
}

/// LangGraph `update_state` semantics for this graph: the nodes that run after a write made
/// "as" `as_node`.
///
/// * `None` (a manual update such as a rename): `["tools"]` when the last AI message still has
///   unanswered tool calls, else `[]` — a manual edit never leaves a finished thread paused.
/// * `__input__` → `["__start__"]`; `__start__` → the entry node.
/// * a node → the node its edges lead to on the updated state (`model` → its first
///   `after_model` hook or `tools`/exit; `tools` → the next model turn; …); `[]` at the end.
pub(crate) fn next_after_update(
    topology: &Topology,
    as_node: Option<&str>,
    state: &ThreadState,
) -> Result<Vec<String>, UnknownNode> {
    let names = |n: Node| {
        if n == Node::End {
            Vec::new()
        } else {
            vec![topology.name(n).to_string()]
        }
    };
    let Some(as_node) = as_node else {
        return Ok(if has_pending_tool_calls(&state.messages) {
            vec![graph::TOOLS.to_string()]
        } else {
            Vec::new()
        });
    };
    if as_node == graph::INPUT {
        return Ok(vec![graph::START.to_string()]);
    }
    match topology.node(as_node) {
        None | Some(Node::End) => Err(UnknownNode(as_node.to_string())),
        Some(node) => Ok(names(topology.next(node, state))),
    }
}
