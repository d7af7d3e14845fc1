//! Shared fixture: settings under a temp dir, a scripted model, a run context, a sandbox
//! provider over real directories, model/tool steps for calling hooks directly, and a lead
//! agent wired with the DeerFlow chain builders for end-to-end runs.

use async_trait::async_trait;
use fawn_agent::{
    AgentDeps, ChainBuilder, LeadAgent, ObserverError, RunObserver, RunOutcome, RunSetup, RunSpec,
    StartPoint, StaticTools, StepCheckpoint,
};
use fawn_config::Settings;
use fawn_llm::scripted::{ScriptedModel, ScriptedTurn};
use fawn_llm::{ChatModel, ChatRequest, ModelRegistry};
use fawn_middleware::{
    Chain, ChainDeps, MemorySink, MiddlewareError, ModelCall, ModelRequest, ModelResponse,
    RunContext, RunOptions, ToolCallHandler, ToolCallRequest, ToolCallResult, build_lead_chain,
    build_subagent_chain,
};
use fawn_sandbox::{
    ExecOptions, ExecOutput, GrepMatch, GrepOptions, Sandbox, SandboxError, SandboxProvider,
    ThreadPaths, VIRTUAL_USER_DATA,
};
use fawn_state::{EventSink, Message, Messages, StateUpdate, StreamEvent, ThreadState, VecSink};
use fawn_tools::{SandboxSlot, Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

pub const THREAD: &str = "thread-1";
pub const RUN: &str = "run-1";
pub const USER: &str = "default";

// ---------------------------------------------------------------------------
// Sandbox over real directories
// ---------------------------------------------------------------------------

pub struct DirSandbox {
    id: String,
    paths: ThreadPaths,
}

impl DirSandbox {
    fn host(&self, virtual_path: &str) -> Result<PathBuf, SandboxError> {
        let rest = virtual_path
            .strip_prefix(VIRTUAL_USER_DATA)
            .ok_or_else(|| SandboxError::PermissionDenied(virtual_path.into()))?;
        if rest.split('/').any(|c| c == "..") {
            return Err(SandboxError::PermissionDenied(virtual_path.into()));
        }
        Ok(self.paths.user_data.join(rest.trim_start_matches('/')))
    }
}

#[async_trait]
impl Sandbox for DirSandbox {
    fn id(&self) -> &str {
        &self.id
    }
    fn paths(&self) -> &ThreadPaths {
        &self.paths
    }
    async fn execute(&self, _: &str, _: ExecOptions) -> Result<ExecOutput, SandboxError> {
        Err(SandboxError::Unavailable("no bash in tests".into()))
    }
    async fn read_bytes(&self, path: &str, max: u64) -> Result<Vec<u8>, SandboxError> {
        let p = self.host(path)?;
        let b = tokio::fs::read(&p)
            .await
            .map_err(|_| SandboxError::NotFound(path.into()))?;
        if b.len() as u64 > max {
            return Err(SandboxError::Invalid("too large".into()));
        }
        Ok(b)
    }
    async fn write_text(&self, path: &str, content: &str, _: bool) -> Result<(), SandboxError> {
        let p = self.host(path)?;
        if let Some(d) = p.parent() {
            tokio::fs::create_dir_all(d)
                .await
                .map_err(|e| SandboxError::Io(e.to_string()))?;
        }
        tokio::fs::write(p, content)
            .await
            .map_err(|e| SandboxError::Io(e.to_string()))
    }
    async fn write_bytes(&self, path: &str, content: &[u8]) -> Result<(), SandboxError> {
        let p = self.host(path)?;
        tokio::fs::write(p, content)
            .await
            .map_err(|e| SandboxError::Io(e.to_string()))
    }
    /// One level only (what the middlewares use).
    async fn list_dir(&self, path: &str, _: usize) -> Result<Vec<String>, SandboxError> {
        let dir = self.host(path)?;
        let mut rd = tokio::fs::read_dir(&dir)
            .await
            .map_err(|_| SandboxError::NotFound(path.into()))?;
        let mut out = Vec::new();
        while let Ok(Some(e)) = rd.next_entry().await {
            let name = e.file_name().to_string_lossy().into_owned();
            let is_dir = e.file_type().await.map(|t| t.is_dir()).unwrap_or(false);
            out.push(format!(
                "{}/{name}{}",
                path.trim_end_matches('/'),
                if is_dir { "/" } else { "" }
            ));
        }
        out.sort();
        Ok(out)
    }
    async fn glob(
        &self,
        _: &str,
        _: &str,
        _: bool,
        _: usize,
    ) -> Result<(Vec<String>, bool), SandboxError> {
        Err(SandboxError::Unavailable("not in tests".into()))
    }
    async fn grep(
        &self,
        _: &str,
        _: &str,
        _: GrepOptions,
    ) -> Result<(Vec<GrepMatch>, bool), SandboxError> {
        Err(SandboxError::Unavailable("not in tests".into()))
    }
    fn mask(&self, text: &str) -> String {
        text.to_string()
    }
}

/// Hands out one [`DirSandbox`] per thread and records acquire/release calls.
pub struct DirProvider {
    home: PathBuf,
    pub acquired: Mutex<Vec<String>>,
    pub released: Mutex<Vec<String>>,
    sandboxes: Mutex<Vec<Arc<DirSandbox>>>,
}

impl DirProvider {
    pub fn new(home: &Path) -> Arc<DirProvider> {
        Arc::new(DirProvider {
            home: home.to_path_buf(),
            acquired: Mutex::new(Vec::new()),
            released: Mutex::new(Vec::new()),
            sandboxes: Mutex::new(Vec::new()),
        })
    }
    pub fn released(&self) -> Vec<String> {
        self.released.lock().unwrap().clone()
    }
    pub fn acquired(&self) -> Vec<String> {
        self.acquired.lock().unwrap().clone()
    }
}

#[async_trait]
impl SandboxProvider for DirProvider {
    async fn acquire(&self, thread_id: &str) -> Result<String, SandboxError> {
        let id = format!("sb-{thread_id}");
        let paths = self.thread_paths(thread_id);
        for d in [&paths.workspace, &paths.uploads, &paths.outputs] {
            tokio::fs::create_dir_all(d)
                .await
                .map_err(|e| SandboxError::Io(e.to_string()))?;
        }
        self.acquired.lock().unwrap().push(id.clone());
        let mut s = self.sandboxes.lock().unwrap();
        if !s.iter().any(|x| x.id == id) {
            s.push(Arc::new(DirSandbox {
                id: id.clone(),
                paths,
            }));
        }
        Ok(id)
    }
    fn get(&self, sandbox_id: &str) -> Option<Arc<dyn Sandbox>> {
        self.sandboxes
            .lock()
            .unwrap()
            .iter()
            .find(|s| s.id == sandbox_id)
            .map(|s| s.clone() as Arc<dyn Sandbox>)
    }
    async fn release(&self, sandbox_id: &str) {
        self.released.lock().unwrap().push(sandbox_id.to_string());
    }
    fn thread_paths(&self, thread_id: &str) -> ThreadPaths {
        ThreadPaths::new(&self.home, USER, thread_id)
    }
}

// ---------------------------------------------------------------------------
// Memory sink that records
// ---------------------------------------------------------------------------

/// `(thread_id, user_id, agent_name, messages)` of one enqueue.
pub type MemoryCall = (String, String, Option<String>, Vec<Message>);

#[derive(Default)]
pub struct MemoryRecorder {
    pub calls: Mutex<Vec<MemoryCall>>,
}

impl MemorySink for MemoryRecorder {
    fn enqueue(
        &self,
        thread_id: &str,
        user_id: &str,
        agent_name: Option<&str>,
        messages: &[Message],
    ) {
        self.calls.lock().unwrap().push((
            thread_id.into(),
            user_id.into(),
            agent_name.map(str::to_string),
            messages.to_vec(),
        ));
    }
}

// ---------------------------------------------------------------------------
// The fixture
// ---------------------------------------------------------------------------

pub struct Fx {
    pub dir: tempfile::TempDir,
    pub settings: Arc<Settings>,
    pub model: Arc<ScriptedModel>,
    /// Other configured models (title/summary models).
    pub extra_models: Vec<Arc<dyn ChatModel>>,
    pub events: Arc<VecSink>,
    pub provider: Arc<DirProvider>,
    pub memory: Arc<MemoryRecorder>,
    pub options: RunOptions,
    pub context: Map<String, Value>,
}

impl Fx {
    pub fn new(turns: impl IntoIterator<Item = ScriptedTurn>) -> Fx {
        Fx::with(|_| {}, turns)
    }

    /// A fixture whose settings `tweak` adjusts (retry delays are always shortened).
    pub fn with(
        tweak: impl FnOnce(&mut Settings),
        turns: impl IntoIterator<Item = ScriptedTurn>,
    ) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::with_home(dir.path());
        settings.app.llm_call.retry_base_delay_ms = 1;
        settings.app.llm_call.retry_cap_delay_ms = 5;
        settings.app.llm_call.burst_retry_base_delay_ms = 2;
        tweak(&mut settings);
        let provider = DirProvider::new(dir.path());
        Fx {
            settings: Arc::new(settings),
            model: Arc::new(ScriptedModel::new(turns)),
            extra_models: Vec::new(),
            events: Arc::new(VecSink::new()),
            provider,
            memory: Arc::new(MemoryRecorder::default()),
            options: RunOptions {
                model_name: "scripted".into(),
                max_concurrent_subagents: 3,
                max_total_subagents: 6,
                recursion_limit: 100,
                ..Default::default()
            },
            context: Map::new(),
            dir,
        }
    }

    pub fn paths(&self) -> ThreadPaths {
        ThreadPaths::new(self.dir.path(), USER, THREAD)
    }

    pub fn registry(&self) -> ModelRegistry {
        let mut all: Vec<Arc<dyn ChatModel>> = vec![self.model.clone()];
        all.extend(self.extra_models.iter().cloned());
        ModelRegistry::from_models(all)
    }

    /// A run context for hook-level tests.
    pub fn ctx(&self) -> RunContext {
        RunContext {
            thread_id: THREAD.into(),
            run_id: RUN.into(),
            user_id: USER.into(),
            settings: self.settings.clone(),
            options: self.options.clone(),
            context: self.context.clone(),
            model: self.model.clone(),
            models: self.registry(),
            events: self.events.clone(),
            cancel: CancellationToken::new(),
            sandbox: Arc::new(SandboxSlot::new(self.provider.clone(), THREAD, None)),
            memory: Some(self.memory.clone() as Arc<dyn MemorySink>),
            stop_reason: Mutex::new(None),
        }
    }

    /// A model request for `messages` against the fixture's model.
    pub fn request(&self, messages: impl Into<Messages>) -> ModelRequest {
        ModelRequest {
            system_prompt: Some("SYSTEM".into()),
            messages: messages.into(),
            tools: Arc::from([]),
            tool_choice: None,
            model: self.model.clone(),
            thinking_enabled: false,
            reasoning_effort: None,
            max_tokens: None,
            temperature: None,
            extra: Map::new(),
        }
    }

    pub fn deps(&self) -> ChainDeps {
        ChainDeps::new(self.settings.clone())
    }

    /// Every `custom` event payload emitted so far.
    pub fn custom_events(&self) -> Vec<Value> {
        self.events
            .take()
            .into_iter()
            .filter_map(|e| match e {
                StreamEvent::Custom(v) => Some(v),
                _ => None,
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Inner steps for calling wrap hooks directly
// ---------------------------------------------------------------------------

/// The innermost model step: sends the request to its model (like the agent does).
pub struct Invoke;

#[async_trait]
impl ModelCall for Invoke {
    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, MiddlewareError> {
        let chat: ChatRequest = request.to_chat_request();
        let message = request
            .model
            .invoke(chat)
            .await
            .map_err(MiddlewareError::Llm)?;
        Ok(ModelResponse { message })
    }
}

/// A tool step from a closure.
pub struct ToolFn<F>(pub F);

#[async_trait]
impl<F> ToolCallHandler for ToolFn<F>
where
    F: Fn(ToolCallRequest) -> Result<ToolCallResult, ToolError> + Send + Sync,
{
    async fn call(&self, request: ToolCallRequest) -> Result<ToolCallResult, ToolError> {
        (self.0)(request)
    }
}

/// A tool result answering `request` with `text`.
pub fn answer(request: &ToolCallRequest, text: &str) -> ToolCallResult {
    ToolCallResult {
        message: Message::tool(
            text,
            request.call.id.clone().unwrap_or_default(),
            Some(request.call.name.clone()),
        ),
        update: None,
        end_run: false,
    }
}

pub fn tool_request(name: &str, args: Value, id: &str, state: ThreadState) -> ToolCallRequest {
    ToolCallRequest {
        call: fawn_state::ToolCall::new(name, args, id),
        tool: None,
        state: Arc::new(state),
    }
}

pub fn state_of(messages: Vec<Message>) -> ThreadState {
    let mut s = ThreadState::default();
    s.apply(&mut StateUpdate::messages(messages)).unwrap();
    s
}

/// Applies a hook's update to `state`.
pub fn apply(state: &mut ThreadState, update: Option<StateUpdate>) {
    if let Some(mut u) = update {
        state.apply(&mut u).unwrap();
    }
}

// ---------------------------------------------------------------------------
// End to end through the agent's loop
// ---------------------------------------------------------------------------

/// The DeerFlow chains, as the agent's [`ChainBuilder`].
pub struct DeerFlowChains(pub ChainDeps);

impl ChainBuilder for DeerFlowChains {
    fn lead_chain(&self, setup: &RunSetup<'_>, tools: &[Arc<dyn Tool>]) -> Chain {
        let mut deps = self.0.clone();
        if tools.iter().any(|t| t.name() == "write_todos") {
            deps.write_todos = None;
        }
        build_lead_chain(&deps, setup.options(), setup.model)
    }
    fn subagent_chain(&self, setup: &RunSetup<'_>, _: &[Arc<dyn Tool>]) -> Chain {
        build_subagent_chain(
            &self.0,
            setup.model,
            &format!("{}:subagent:{}", setup.thread_id, setup.run_id),
        )
    }
}

/// Records what a run emits and checkpoints.
#[derive(Default)]
pub struct Observer {
    pub events: Mutex<Vec<StreamEvent>>,
    pub checkpoints: Mutex<Vec<StepCheckpoint>>,
}

impl EventSink for Observer {
    fn emit(&self, event: StreamEvent) {
        self.events.lock().unwrap().push(event);
    }
}

#[async_trait]
impl RunObserver for Observer {
    async fn checkpoint(&self, checkpoint: StepCheckpoint) -> Result<(), ObserverError> {
        let mut c = self.checkpoints.lock().unwrap();
        c.push(checkpoint);
        Ok(())
    }
}

impl Observer {
    pub fn state(&self) -> ThreadState {
        (*self.checkpoints.lock().unwrap().last().unwrap().state).clone()
    }
    pub fn custom(&self) -> Vec<Value> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Custom(v) => Some(v.clone()),
                _ => None,
            })
            .collect()
    }
    /// `(node, update)` of every finished node.
    pub fn updates(&self) -> Vec<(String, Value)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                StreamEvent::NodeEnd { node, update, .. } => Some((node.clone(), update.clone())),
                _ => None,
            })
            .collect()
    }
    pub fn start_point(&self) -> StartPoint {
        let c = self.checkpoints.lock().unwrap();
        let last = c.last().unwrap();
        StartPoint {
            checkpoint_id: Some(format!("ckpt-{}", c.len())),
            state: (*last.state).clone(),
            next: last.next.clone(),
            tasks: last.tasks.clone(),
            step: last.step,
            is_fork: false,
        }
    }
}

impl Fx {
    /// A lead agent over the fixture's models, sandbox and memory, with the DeerFlow chains
    /// and `tools`.
    pub fn agent(&self, tools: Vec<Arc<dyn Tool>>) -> LeadAgent {
        let mut deps = AgentDeps::new(
            self.settings.clone(),
            self.registry(),
            self.provider.clone(),
        );
        deps.memory = Some(self.memory.clone() as Arc<dyn MemorySink>);
        deps.chains = Arc::new(DeerFlowChains(self.deps()));
        deps.tools = vec![Arc::new(StaticTools(tools))];
        LeadAgent::new(deps)
    }
}

/// A run of the fixture's thread with `input` (a `{"messages": …}` object) and `context`.
pub fn spec(input: Value, context: Value) -> RunSpec {
    RunSpec {
        thread_id: THREAD.into(),
        run_id: RUN.into(),
        assistant_id: "lead_agent".into(),
        graph_id: "lead_agent".into(),
        attempt: 1,
        context: match context {
            Value::Object(o) => o,
            _ => Map::new(),
        },
        input: Some(StateUpdate::from_value(input).unwrap()),
        ..Default::default()
    }
}

pub fn user(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

pub async fn run(agent: &LeadAgent, spec: RunSpec) -> (RunOutcome, Arc<Observer>) {
    use fawn_agent::GraphRunner;
    let obs = Arc::new(Observer::default());
    let out = agent.run(spec, obs.clone(), CancellationToken::new()).await;
    (out, obs)
}

// ---------------------------------------------------------------------------
// Tools for end-to-end runs
// ---------------------------------------------------------------------------

/// A tool that answers `<name>: <args>`; named as needed (`bash`, `read_file`, `task`, …).
pub struct Fake {
    pub name: &'static str,
    pub calls: Mutex<Vec<Map<String, Value>>>,
}

impl Fake {
    pub fn new(name: &'static str) -> Arc<Fake> {
        Arc::new(Fake {
            name,
            calls: Mutex::new(Vec::new()),
        })
    }
    pub fn calls(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

#[async_trait]
impl Tool for Fake {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "A test tool."
    }
    fn parameters(&self) -> Arc<Value> {
        Arc::new(json!({"type": "object", "properties": {}}))
    }
    async fn call(
        &self,
        args: Map<String, Value>,
        _: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        self.calls.lock().unwrap().push(args.clone());
        Ok(ToolOutput::text(format!(
            "{}: {}",
            self.name,
            Value::Object(args)
        )))
    }
}

/// The text of every message of a provider request, `role: text`.
pub fn transcript(req: &ChatRequest) -> Vec<String> {
    req.messages
        .iter()
        .map(|m| format!("{}: {}", m.kind.as_str(), m.text()))
        .collect()
}
