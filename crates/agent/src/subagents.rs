//! Subagents for the `task` tool: DeerFlow's built-in `general-purpose` and `bash` types and
//! the custom ones of `subagents.custom_agents`, each a nested run of the loop with the
//! subagent chain and its own prompt, on a fresh state holding one human message, sharing the
//! parent's sandbox and thread id, without checkpoints.
//!
//! Limits: at most `max_concurrent_subagents` run at once (a semaphore per lead run), at most
//! `max_total_subagents` start per run, each within its timeout (`subagents.timeout_seconds`,
//! per-type overrides) and turn cap (its recursion limit: `max_turns`, hitting it is
//! `turn_capped`). Cancelling the parent run cancels every subagent.

use crate::engine::{AgentGraph, Begin, Loop, LoopConfig, LoopEnd};
use crate::lead::{AgentDeps, RunSetup};
use crate::options::ResolvedRun;
use crate::prompt::{builtin_subagent_description, subagent_system_prompt};
use async_trait::async_trait;
use fawn_llm::ChatModel;
use fawn_middleware::RunContext;
use fawn_state::{Message, MessageKind, NullSink, StateUpdate, ThreadState, UsageMetadata};
use fawn_telemetry::trace;
use fawn_tools::{
    SubagentInfo, SubagentOutcome, SubagentRequest, SubagentRunner, SubagentStatus, Tool,
    ToolContext,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::sync::mpsc::UnboundedSender;

pub const GENERAL_PURPOSE: &str = "general-purpose";
pub const BASH: &str = "bash";

/// Tools a subagent never gets (delegation, questions to the user, presenting files).
const EXCLUDED_TOOLS: [&str; 5] = [
    "task",
    "ask_clarification",
    "present_files",
    "setup_agent",
    "update_agent",
];
/// The `bash` subagent's tools.
const BASH_TOOLS: [&str; 5] = ["bash", "ls", "read_file", "write_file", "str_replace"];
const GENERAL_MAX_TURNS: u32 = 150;
const BASH_MAX_TURNS: u32 = 60;
const CUSTOM_TIMEOUT_SECONDS: u64 = 900;

/// Runs the subagents of one lead run.
pub struct SubagentPool {
    deps: AgentDeps,
    parent: ResolvedRun,
    thread_id: String,
    run_id: String,
    /// The lead's tools (set once they are assembled; the `task` tool is built from
    /// [`SubagentRunner::available`] before that).
    tools: OnceLock<Vec<Arc<dyn Tool>>>,
    running: Arc<Semaphore>,
    started: AtomicU32,
}

/// How one subagent type runs.
struct TypeSetup {
    system_prompt: String,
    /// Skill allowlist of this type (`None`: the parent's).
    skills: Option<Vec<String>>,
    tools: Vec<Arc<dyn Tool>>,
    model: Arc<dyn ChatModel>,
    max_turns: u32,
    timeout: Duration,
}

impl SubagentPool {
    pub(crate) fn new(
        deps: AgentDeps,
        parent: ResolvedRun,
        thread_id: &str,
        run_id: &str,
    ) -> SubagentPool {
        let permits = parent.options.max_concurrent_subagents.max(1) as usize;
        SubagentPool {
            deps,
            parent,
            thread_id: thread_id.to_string(),
            run_id: run_id.to_string(),
            tools: OnceLock::new(),
            running: Arc::new(Semaphore::new(permits)),
            started: AtomicU32::new(0),
        }
    }

    /// Gives the pool the lead's tools (once).
    pub(crate) fn set_tools(&self, tools: Vec<Arc<dyn Tool>>) {
        let _ = self.tools.set(tools);
    }

    fn tools(&self) -> &[Arc<dyn Tool>] {
        self.tools.get().map(Vec::as_slice).unwrap_or_default()
    }

    /// Whether the lead has a `bash` tool (the `bash` subagent needs one). Before the tools
    /// are known: whether the sandbox can run bash and `config.yaml` declares one.
    pub fn bash_available(&self) -> bool {
        match self.tools.get() {
            Some(tools) => tools.iter().any(|t| t.name() == "bash"),
            None => {
                self.deps.bash_available
                    && self
                        .deps
                        .settings
                        .app
                        .tools
                        .iter()
                        .any(|t| t.name == "bash")
            }
        }
    }

    fn parent_tools_except(&self, excluded: &[&str]) -> Vec<Arc<dyn Tool>> {
        self.tools()
            .iter()
            .filter(|t| !excluded.contains(&t.name()))
            .cloned()
            .collect()
    }

    fn model_named(&self, name: Option<&str>) -> Arc<dyn ChatModel> {
        match name {
            Some(n) if n != "inherit" && !n.is_empty() => {
                self.deps.models.get(n).unwrap_or_else(|| {
                    tracing::warn!(
                        model = n,
                        "subagent model not configured; using the parent's"
                    );
                    self.parent.model.clone()
                })
            }
            _ => self.parent.model.clone(),
        }
    }

    fn setup_for(&self, kind: &str) -> Result<TypeSetup, String> {
        let cfg = &self.deps.settings.app.subagents;
        let over = cfg.agents.get(kind);
        let builtin = |tools: Vec<Arc<dyn Tool>>, default_turns: u32| TypeSetup {
            system_prompt: subagent_system_prompt(kind),
            skills: over.and_then(|o| o.skills.clone()),
            tools,
            model: self.model_named(over.and_then(|o| o.model.as_deref())),
            max_turns: over
                .and_then(|o| o.max_turns)
                .or(cfg.max_turns)
                .unwrap_or(default_turns),
            timeout: Duration::from_secs(
                over.and_then(|o| o.timeout_seconds)
                    .unwrap_or(cfg.timeout_seconds),
            ),
        };
        match kind {
            GENERAL_PURPOSE => Ok(builtin(
                self.parent_tools_except(&EXCLUDED_TOOLS),
                GENERAL_MAX_TURNS,
            )),
            BASH => {
                if !self.bash_available() {
                    return Err(
                        "The bash subagent is not available: this sandbox has no bash tool \
                         (host bash is disabled). Use the general-purpose subagent or direct tools."
                            .into(),
                    );
                }
                let tools = self
                    .tools()
                    .iter()
                    .filter(|t| BASH_TOOLS.contains(&t.name()))
                    .cloned()
                    .collect();
                Ok(builtin(tools, BASH_MAX_TURNS))
            }
            custom => {
                let Some(c) = cfg.custom_agents.get(custom) else {
                    let names: Vec<String> = self.available().into_iter().map(|a| a.name).collect();
                    return Err(format!(
                        "Unknown subagent type '{custom}'. Available: {}",
                        names.join(", ")
                    ));
                };
                let tools = match &c.tools {
                    None => self.parent_tools_except(&EXCLUDED_TOOLS),
                    Some(allow) => self
                        .tools()
                        .iter()
                        .filter(|t| {
                            allow.iter().any(|a| a == t.name())
                                && !EXCLUDED_TOOLS.contains(&t.name())
                        })
                        .cloned()
                        .collect(),
                };
                let model_name = over.and_then(|o| o.model.as_deref()).or(c.model.as_deref());
                Ok(TypeSetup {
                    system_prompt: c.system_prompt.clone(),
                    skills: over
                        .and_then(|o| o.skills.clone())
                        .or_else(|| c.skills.clone()),
                    tools,
                    model: self.model_named(model_name),
                    max_turns: over
                        .and_then(|o| o.max_turns)
                        .or(c.max_turns)
                        .or(cfg.max_turns)
                        .unwrap_or(GENERAL_MAX_TURNS),
                    timeout: Duration::from_secs(
                        over.and_then(|o| o.timeout_seconds)
                            .or(c.timeout_seconds)
                            .unwrap_or(CUSTOM_TIMEOUT_SECONDS),
                    ),
                })
            }
        }
    }

    fn outcome(status: SubagentStatus, model_name: &str, error: Option<String>) -> SubagentOutcome {
        SubagentOutcome {
            status,
            result: String::new(),
            error,
            stop_reason: None,
            usage: UsageMetadata::default(),
            model_name: model_name.to_string(),
        }
    }
}

/// The final answer and token usage of a subagent's state.
fn summarize(state: &ThreadState) -> (String, UsageMetadata) {
    let mut usage = UsageMetadata::default();
    let mut last_ai = None;
    for m in &state.messages {
        if m.kind == MessageKind::Ai {
            if let Some(u) = &m.usage_metadata {
                usage = usage.add(u);
            }
            last_ai = Some(m);
        }
    }
    (last_ai.map(Message::text).unwrap_or_default(), usage)
}

#[async_trait]
impl SubagentRunner for SubagentPool {
    fn available(&self) -> Vec<SubagentInfo> {
        let bash = self.bash_available();
        let mut v = vec![SubagentInfo {
            name: GENERAL_PURPOSE.into(),
            description: builtin_subagent_description(GENERAL_PURPOSE, bash)
                .unwrap_or_default()
                .into(),
        }];
        if bash {
            v.push(SubagentInfo {
                name: BASH.into(),
                description: builtin_subagent_description(BASH, bash)
                    .unwrap_or_default()
                    .into(),
            });
        }
        for (name, c) in &self.deps.settings.app.subagents.custom_agents {
            if name != GENERAL_PURPOSE && name != BASH {
                v.push(SubagentInfo {
                    name: name.clone(),
                    description: c.description.clone(),
                });
            }
        }
        v
    }

    async fn run(
        &self,
        request: SubagentRequest,
        ctx: &ToolContext,
        progress: UnboundedSender<Message>,
    ) -> SubagentOutcome {
        let setup = match self.setup_for(&request.subagent_type) {
            Ok(s) => s,
            Err(e) => {
                return Self::outcome(
                    SubagentStatus::Failed,
                    &self.parent.options.model_name,
                    Some(e),
                );
            }
        };
        let model_name = setup.model.info().name.clone();
        let max_total = self.parent.options.max_total_subagents;
        if self.started.fetch_add(1, Ordering::SeqCst) >= max_total {
            return Self::outcome(
                SubagentStatus::Failed,
                &model_name,
                Some(format!(
                    "Subagent limit reached: at most {max_total} subagents may run in one run of the lead agent."
                )),
            );
        }
        let cancel = ctx.cancel.child_token();
        let _permit = tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                return Self::outcome(SubagentStatus::Cancelled, &model_name, Some("Task cancelled by user.".into()));
            }
            p = self.running.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => {
                    return Self::outcome(SubagentStatus::Failed, &model_name, Some("subagent pool closed".into()));
                }
            },
        };
        let mut run = self.parent.clone();
        run.options.model_name = model_name.clone();
        run.options.thinking_enabled = false;
        run.options.reasoning_effort = None;
        run.options.subagent_enabled = false;
        run.options.is_plan_mode = false;
        run.options.recursion_limit = setup.max_turns;
        run.model = setup.model.clone();
        if let Some(allow) = &setup.skills {
            let mut agent = run.agent.clone().unwrap_or_default();
            agent.skills = Some(allow.clone());
            run.agent = Some(agent);
        }
        let rs = RunSetup {
            settings: &self.deps.settings,
            models: &self.deps.models,
            run: &run,
            model: setup.model.info(),
            thread_id: &self.thread_id,
            run_id: &self.run_id,
            memory: None,
            subagents: None,
            subagent_task: Some(&request.task_id),
        };
        let chain = self.deps.chains.subagent_chain(&rs, &setup.tools);
        // The skills this subagent may use, after its own instructions.
        let skills = self.deps.skills.skill_section(&rs).await;
        let mut prompt = setup.system_prompt;
        if !skills.trim().is_empty() {
            prompt.push_str("\n\n");
            prompt.push_str(skills.trim());
            prompt.push('\n');
        }
        let graph = AgentGraph::new(chain, setup.tools, Some(prompt));
        let rctx = RunContext {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            user_id: run.user_id.clone(),
            settings: self.deps.settings.clone(),
            options: run.options.clone(),
            context: run.context.clone(),
            model: setup.model.clone(),
            models: self.deps.models.clone(),
            events: Arc::new(NullSink),
            cancel: cancel.clone(),
            sandbox: ctx.sandbox.clone(),
            memory: None,
            stop_reason: Mutex::new(None),
        };
        let mut state = ThreadState {
            sandbox: ctx.state.sandbox.clone(),
            thread_data: ctx.state.thread_data.clone(),
            ..Default::default()
        };
        if state.sandbox.is_none()
            && let Some(id) = ctx.sandbox.acquired_id()
        {
            state.sandbox = Some(fawn_state::SandboxState {
                sandbox_id: Some(id),
                extra: Default::default(),
            });
        }
        let cfg = LoopConfig {
            recursion_limit: setup.max_turns,
            stream: false,
            ..Default::default()
        };
        let begin = Begin::Input {
            update: Box::new(StateUpdate::messages(vec![Message::human(
                request.prompt.clone(),
            )])),
            then: None,
        };
        // The subagent's own span: its model and tool calls are its children, under the
        // `task` tool call that started it.
        let span = trace::start(
            || format!("invoke_agent {}", request.subagent_type),
            trace::Kind::Internal,
            |a| {
                use fawn_telemetry::trace::{Attr, attrs};
                attrs::SpanKind::Agent.attrs(a);
                a.push(Attr::new(attrs::GEN_AI_OPERATION, "invoke_agent"));
                a.push(Attr::new(
                    attrs::GEN_AI_AGENT_NAME,
                    request.subagent_type.clone(),
                ));
                a.push(Attr::new("fawn.subagent.task_id", request.task_id.clone()));
                a.push(Attr::new("fawn.model.name", model_name.clone()));
                if trace::capture_inputs() {
                    a.push(Attr::new(
                        attrs::INPUT_VALUE,
                        attrs::clip(request.prompt.clone()),
                    ));
                }
            },
        );
        let fut = Loop::new(&graph, &rctx, &cfg, Arc::new(state), -2)
            .with_progress(&progress)
            .run(begin, None);
        let fut = trace::instrument(fut, &span);
        let output = match tokio::time::timeout(setup.timeout, fut).await {
            Ok(o) => o,
            Err(_) => {
                cancel.cancel();
                span.fail("timeout", "the subagent timed out");
                span.end();
                return Self::outcome(
                    SubagentStatus::TimedOut,
                    &model_name,
                    Some(format!(
                        "Task timed out after {} seconds.",
                        setup.timeout.as_secs()
                    )),
                );
            }
        };
        let (result, usage) = summarize(&output.state);
        let stop_reason = rctx.stop_reason();
        let (status, error, stop_reason) = match output.end {
            LoopEnd::Done { .. } | LoopEnd::Paused => {
                (SubagentStatus::Completed, None, stop_reason)
            }
            LoopEnd::RecursionLimit(_) => (
                SubagentStatus::Completed,
                None,
                Some("turn_capped".to_string()),
            ),
            LoopEnd::Failed { error, message } => (
                SubagentStatus::Failed,
                Some(format!("{error}: {message}")),
                stop_reason,
            ),
            LoopEnd::Cancelled => (
                SubagentStatus::Cancelled,
                Some("Task cancelled by user.".into()),
                stop_reason,
            ),
        };
        match &error {
            Some(e) => span.fail(&format!("{status:?}").to_ascii_lowercase(), e),
            None => span.ok(),
        }
        if trace::capture_outputs() {
            span.set(fawn_telemetry::trace::Attr::new(
                fawn_telemetry::trace::attrs::OUTPUT_VALUE,
                fawn_telemetry::trace::attrs::clip(result.clone()),
            ));
        }
        span.end();
        SubagentOutcome {
            status,
            result: if status == SubagentStatus::Completed {
                result
            } else {
                String::new()
            },
            error,
            stop_reason,
            usage,
            model_name,
        }
    }
}
