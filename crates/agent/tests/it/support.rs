//! Shared fixtures: a recording observer, a fake sandbox provider, test tools and
//! middlewares, and builders for agents and run specs.

use async_trait::async_trait;
use fawn_agent::{
    AgentDeps, ChainBuilder, CheckpointSource, LeadAgent, ObserverError, RunObserver, RunOutcome,
    RunSetup, RunSpec, StaticTools, StepCheckpoint,
};
use fawn_config::Settings;
use fawn_llm::scripted::{ScriptedModel, ScriptedTurn};
use fawn_llm::{ChatModel, ModelRegistry};
use fawn_middleware::{
    Chain, Hook, HookOutcome, JumpTo, Middleware, MiddlewareError, ModelCall, ModelRequest,
    ModelResponse, RunContext, ToolCallHandler, ToolCallRequest, ToolCallResult,
};
use fawn_sandbox::{Sandbox, SandboxError, SandboxProvider, ThreadPaths};
use fawn_state::{EventSink, StateUpdate, StreamEvent, ThreadState};
use fawn_tools::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Map, Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Records every event and checkpoint of a run.
#[derive(Default)]
pub struct Recorder {
    pub events: Mutex<Vec<StreamEvent>>,
    pub checkpoints: Mutex<Vec<StepCheckpoint>>,
    /// The interleaving of events and checkpoints, as short labels.
    pub log: Mutex<Vec<String>>,
}

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        Arc::new(Recorder::default())
    }

    pub fn events(&self) -> Vec<StreamEvent> {
        self.events.lock().unwrap().clone()
    }

    pub fn checkpoints(&self) -> Vec<StepCheckpoint> {
        self.checkpoints.lock().unwrap().clone()
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// `(step, source, next)` of every checkpoint.
    pub fn checkpoint_summary(&self) -> Vec<(i64, &'static str, Vec<String>)> {
        self.checkpoints()
            .iter()
            .map(|c| (c.step, c.source.as_str(), c.next.clone()))
            .collect()
    }

    /// The nodes of every `NodeEnd`, in order.
    pub fn updated_nodes(&self) -> Vec<String> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                StreamEvent::NodeEnd { node, .. } => Some(node.clone()),
                _ => None,
            })
            .collect()
    }

    /// The `(node, update)` of every `NodeEnd`.
    pub fn updates(&self) -> Vec<(String, Value)> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                StreamEvent::NodeEnd { node, update, .. } => Some((node.clone(), update.clone())),
                _ => None,
            })
            .collect()
    }

    pub fn last_state(&self) -> Arc<ThreadState> {
        self.checkpoints()
            .last()
            .expect("a checkpoint")
            .state
            .clone()
    }

    /// The state a run starting after the last checkpoint would see.
    pub fn start_point(&self) -> fawn_agent::StartPoint {
        let c = self.checkpoints();
        let last = c.last().expect("a checkpoint");
        fawn_agent::StartPoint {
            checkpoint_id: Some(format!("ckpt-{}", c.len() - 1)),
            state: (*last.state).clone(),
            next: last.next.clone(),
            tasks: last.tasks.clone(),
            step: last.step,
            is_fork: false,
        }
    }
}

impl EventSink for Recorder {
    fn emit(&self, event: StreamEvent) {
        let label = match &event {
            StreamEvent::MessageChunk { .. } => "chunk".to_string(),
            StreamEvent::Message { message, .. } => format!("message:{}", message.kind.as_str()),
            StreamEvent::Custom(_) => "custom".to_string(),
            StreamEvent::NodeStart { node, .. } => format!("start:{node}"),
            StreamEvent::NodeEnd { node, .. } => format!("end:{node}"),
            StreamEvent::ModelStart { .. } => "model_start".to_string(),
            StreamEvent::ToolStart { name, .. } => format!("tool_start:{name}"),
            StreamEvent::ToolEnd { name, .. } => format!("tool_end:{name}"),
        };
        self.log.lock().unwrap().push(label);
        self.events.lock().unwrap().push(event);
    }
}

#[async_trait]
impl RunObserver for Recorder {
    async fn checkpoint(&self, checkpoint: StepCheckpoint) -> Result<(), ObserverError> {
        let mut c = self.checkpoints.lock().unwrap();
        self.log.lock().unwrap().push(format!(
            "checkpoint:{}:{}",
            checkpoint.step,
            checkpoint.source.as_str()
        ));
        c.push(checkpoint);
        Ok(())
    }
}

/// Checks that replaying every checkpoint's writes reproduces its state.
pub fn assert_writes_replay(rec: &Recorder, mut state: ThreadState) {
    for c in rec.checkpoints() {
        let mut writes: Vec<StateUpdate> = c.writes.iter().map(|(_, w)| w.clone()).collect();
        state.apply_writes(&mut writes).unwrap();
        assert_eq!(
            &state,
            c.state.as_ref(),
            "replay of step {} ({:?})",
            c.step,
            c.source
        );
    }
    let _ = CheckpointSource::Loop;
}

/// A sandbox provider that has no sandboxes (tests' tools do not use them).
pub struct NoSandbox;

#[async_trait]
impl SandboxProvider for NoSandbox {
    async fn acquire(&self, _thread_id: &str) -> Result<String, SandboxError> {
        Err(SandboxError::Unavailable("no sandbox in tests".into()))
    }
    fn get(&self, _sandbox_id: &str) -> Option<Arc<dyn Sandbox>> {
        None
    }
    async fn release(&self, _sandbox_id: &str) {}
    fn thread_paths(&self, thread_id: &str) -> ThreadPaths {
        ThreadPaths::new(Path::new("/tmp/fawn-agent-tests"), "default", thread_id)
    }
}

/// A chain builder returning fixed middleware lists.
#[derive(Clone, Default)]
pub struct FixedChains {
    pub lead: Vec<Arc<dyn Middleware>>,
    pub subagent: Vec<Arc<dyn Middleware>>,
}

impl ChainBuilder for FixedChains {
    fn lead_chain(&self, _: &RunSetup<'_>, _: &[Arc<dyn Tool>]) -> Chain {
        Chain::new(self.lead.clone())
    }
    fn subagent_chain(&self, _: &RunSetup<'_>, _: &[Arc<dyn Tool>]) -> Chain {
        Chain::new(self.subagent.clone())
    }
}

/// Builds a lead agent.
pub struct AgentBuilder {
    pub settings: Settings,
    pub models: Vec<Arc<dyn ChatModel>>,
    pub tools: Vec<Arc<dyn Tool>>,
    pub chains: FixedChains,
    pub skills: Option<Arc<dyn fawn_agent::SkillsPrompt>>,
}

impl AgentBuilder {
    pub fn new(model: Arc<dyn ChatModel>) -> AgentBuilder {
        AgentBuilder {
            settings: Settings::with_home(std::env::temp_dir().join("fawn-agent-tests")),
            models: vec![model],
            tools: Vec::new(),
            chains: FixedChains::default(),
            skills: None,
        }
    }

    pub fn tool(mut self, t: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(t));
        self
    }

    pub fn middleware(mut self, m: Arc<dyn Middleware>) -> Self {
        self.chains.lead.push(m);
        self
    }

    pub fn build(self) -> LeadAgent {
        let mut deps = AgentDeps::new(
            Arc::new(self.settings),
            ModelRegistry::from_models(self.models),
            Arc::new(NoSandbox),
        );
        deps.tools = vec![Arc::new(StaticTools(self.tools))];
        deps.chains = Arc::new(self.chains);
        if let Some(s) = self.skills {
            deps.skills = s;
        }
        LeadAgent::new(deps)
    }
}

/// A scripted model.
pub fn scripted(turns: impl IntoIterator<Item = ScriptedTurn>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(turns))
}

/// A run spec for a new thread with one user message.
pub fn spec(text: &str) -> RunSpec {
    RunSpec {
        thread_id: "thread-1".into(),
        run_id: "run-1".into(),
        assistant_id: "lead_agent".into(),
        graph_id: "lead_agent".into(),
        attempt: 1,
        input: Some(
            StateUpdate::from_value(json!({"messages": [{"role": "user", "content": text}]}))
                .unwrap(),
        ),
        ..Default::default()
    }
}

/// A follow-up run on the thread `rec` recorded.
pub fn follow_up(rec: &Recorder, input: Option<Value>) -> RunSpec {
    RunSpec {
        thread_id: "thread-1".into(),
        run_id: "run-2".into(),
        assistant_id: "lead_agent".into(),
        graph_id: "lead_agent".into(),
        attempt: 1,
        input: input.map(|v| StateUpdate::from_value(v).unwrap()),
        start: rec.start_point(),
        ..Default::default()
    }
}

pub async fn run(agent: &LeadAgent, spec: RunSpec) -> (RunOutcome, Arc<Recorder>) {
    use fawn_agent::GraphRunner;
    let rec = Recorder::new();
    let out = agent.run(spec, rec.clone(), CancellationToken::new()).await;
    (out, rec)
}

pub fn ok(out: &RunOutcome) {
    assert!(
        matches!(out, RunOutcome::Success { .. }),
        "run failed: {out:?}"
    );
}

// ---------- tools ----------

/// Returns its `text` argument after `delay_ms`.
pub struct Echo;

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Echoes its text."
    }
    fn parameters(&self) -> Arc<Value> {
        Arc::new(
            json!({"type": "object", "properties": {"text": {"type": "string"}, "delay_ms": {"type": "integer"}}}),
        )
    }
    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        if let Some(ms) = args.get("delay_ms").and_then(Value::as_u64) {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            }
        }
        let text = args.get("text").and_then(Value::as_str).unwrap_or_default();
        Ok(ToolOutput::text(format!("echo: {text}")))
    }
}

/// Always fails.
pub struct Broken;

#[async_trait]
impl Tool for Broken {
    fn name(&self) -> &str {
        "broken"
    }
    fn description(&self) -> &str {
        "Fails."
    }
    fn parameters(&self) -> Arc<Value> {
        Arc::new(json!({"type": "object", "properties": {}}))
    }
    async fn call(&self, _: Map<String, Value>, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed("disk on fire".into()))
    }
}

/// Writes `artifacts` besides its message.
pub struct Present;

#[async_trait]
impl Tool for Present {
    fn name(&self) -> &str {
        "present_files"
    }
    fn description(&self) -> &str {
        "Presents files."
    }
    fn parameters(&self) -> Arc<Value> {
        Arc::new(json!({"type": "object", "properties": {"filepaths": {"type": "array"}}}))
    }
    async fn call(
        &self,
        args: Map<String, Value>,
        _: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let paths: Vec<String> =
            serde_json::from_value(args.get("filepaths").cloned().unwrap_or(json!([])))
                .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let mut out = ToolOutput::text("Successfully presented files");
        out.update = Some(StateUpdate {
            artifacts: Some(paths),
            ..Default::default()
        });
        Ok(out)
    }
}

/// Mimics DeerFlow's `ask_clarification` + ClarificationMiddleware: ends the run with the
/// question and its structured form.
pub struct AskClarification;

#[async_trait]
impl Tool for AskClarification {
    fn name(&self) -> &str {
        "ask_clarification"
    }
    fn description(&self) -> &str {
        "Asks the user."
    }
    fn parameters(&self) -> Arc<Value> {
        Arc::new(json!({"type": "object", "properties": {"question": {"type": "string"}}}))
    }
    fn return_direct(&self) -> bool {
        true
    }
    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let q = args
            .get("question")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        let mut out = ToolOutput::text(format!("❓ {q}"));
        out.artifact = Some(json!({"human_input": {
            "version": 1, "kind": "human_input_request", "source": "ask_clarification",
            "request_id": format!("clarification:{}", ctx.tool_call_id),
            "clarification_type": "approach_choice", "question": q, "input_mode": "choice_with_other",
            "tool_call_id": ctx.tool_call_id,
            "options": [{"id": "option-1", "label": "staging", "value": "staging"}],
        }}));
        out.end_run = true;
        Ok(out)
    }
}

// ---------- middlewares ----------

/// A middleware that logs its hook calls into a shared log and can be told what to return.
pub struct Probe {
    pub name: String,
    pub hooks: &'static [Hook],
    pub log: Arc<Mutex<Vec<String>>>,
    /// Per hook: the update to return (on every call).
    pub updates: Mutex<Vec<(Hook, Value)>>,
    /// Per hook: jump once (the first time the hook runs).
    pub jumps: Mutex<Vec<(Hook, JumpTo)>>,
    /// Append this to the last message of every model request (never persisted).
    pub rewrite_request: bool,
}

impl Probe {
    pub fn new(name: &str, hooks: &'static [Hook], log: &Arc<Mutex<Vec<String>>>) -> Probe {
        Probe {
            name: name.into(),
            hooks,
            log: log.clone(),
            updates: Mutex::new(Vec::new()),
            jumps: Mutex::new(Vec::new()),
            rewrite_request: false,
        }
    }

    pub fn update_on(self, hook: Hook, update: Value) -> Probe {
        self.updates.lock().unwrap().push((hook, update));
        self
    }

    pub fn jump_once(self, hook: Hook, to: JumpTo) -> Probe {
        self.jumps.lock().unwrap().push((hook, to));
        self
    }

    fn record(&self, hook: Hook) -> HookOutcome {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}.{}", self.name, hook.as_str()));
        let update = self
            .updates
            .lock()
            .unwrap()
            .iter()
            .find(|(h, _)| *h == hook)
            .map(|(_, v)| StateUpdate::from_value(v.clone()).unwrap());
        let mut jumps = self.jumps.lock().unwrap();
        let jump = jumps
            .iter()
            .position(|(h, _)| *h == hook)
            .map(|i| jumps.remove(i).1);
        HookOutcome {
            update,
            jump_to: jump,
        }
    }
}

#[async_trait]
impl Middleware for Probe {
    fn name(&self) -> &str {
        &self.name
    }
    fn hooks(&self) -> &'static [Hook] {
        self.hooks
    }
    async fn before_agent(
        &self,
        _: &ThreadState,
        _: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(self.record(Hook::BeforeAgent))
    }
    async fn before_model(
        &self,
        _: &ThreadState,
        _: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(self.record(Hook::BeforeModel))
    }
    async fn after_model(
        &self,
        _: &ThreadState,
        _: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(self.record(Hook::AfterModel))
    }
    async fn after_agent(
        &self,
        _: &ThreadState,
        _: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(self.record(Hook::AfterAgent))
    }
    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        _: &ThreadState,
        _: &RunContext,
        next: &dyn ModelCall,
    ) -> Result<ModelResponse, MiddlewareError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}.wrap_model_call:enter", self.name));
        if self.rewrite_request
            && let Some(last) = request.messages.last_mut()
        {
            last.content = format!("{} [rewritten by {}]", last.text(), self.name).into();
        }
        let r = next.call(request).await;
        self.log
            .lock()
            .unwrap()
            .push(format!("{}.wrap_model_call:exit", self.name));
        r
    }
    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        _: &RunContext,
        next: &dyn ToolCallHandler,
    ) -> Result<ToolCallResult, ToolError> {
        self.log.lock().unwrap().push(format!(
            "{}.wrap_tool_call:{}",
            self.name, request.call.name
        ));
        next.call(request).await
    }
}

/// An OpenAI-compatible model on the testkit mock, without retries.
pub fn mock_model(mock: &fawn_testkit::MockLlm, supports_thinking: bool) -> Arc<dyn ChatModel> {
    let config: fawn_config::AppConfig = serde_json::from_value(json!({"models": [{
        "name": "mock-model",
        "use": "langchain_openai:ChatOpenAI",
        "model": "gpt-test",
        "base_url": mock.base_url(),
        "api_key": "sk-test",
        "max_retries": 0,
        "supports_thinking": supports_thinking,
    }]}))
    .unwrap();
    fawn_llm::ModelRegistry::from_config(&config)
        .unwrap()
        .default_model()
        .unwrap()
}

/// A skills section that shows which allowlist it was asked for.
pub struct EchoSkills;

#[async_trait]
impl fawn_agent::SkillsPrompt for EchoSkills {
    async fn skill_section(&self, setup: &RunSetup<'_>) -> String {
        let allow = setup.run.agent.as_ref().and_then(|a| a.skills.clone());
        format!(
            "<skill_system>\n<available_skills>allow={allow:?}</available_skills>\n</skill_system>"
        )
    }
}
