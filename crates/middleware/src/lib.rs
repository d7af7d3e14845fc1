//! The middleware chain around the model/tool loop.
//!
//! Owns: the [`Middleware`] trait with its six hooks and LangChain's ordering rules
//! (`before_*` in list order, `after_*` in reverse, `wrap_*` nested with the first middleware
//! outermost), the per-run [`RunContext`] the hooks see, and DeerFlow's built-in middlewares.
//! Must never know about HTTP, SSE framing or storage: hooks return state updates and the
//! agent applies, streams and checkpoints them; thread files are only reached through the
//! run's sandbox, memory only through the [`MemorySink`]/[`MemoryReader`] traits.
//!
//! For the agent: build one [`ChainDeps`] per process (it holds the process-wide
//! [`SharedState`]: per-model circuit breakers, the model-call concurrency cap, the
//! loop-detection history, the read-before-write locks) and call [`build_lead_chain`] / [`build_subagent_chain`] for every
//! run — middlewares keep per-run state. A model answer standing in for a failed call carries
//! `additional_kwargs.deerflow_error_fallback` ([`error_fallback`]); the run then ends as
//! `error`. Stop reasons (`loop_capped`, `subagent_limit_capped`) are set on
//! [`RunContext::stop_reason`].

pub mod builders;
pub mod chain;
pub mod clarification;
pub mod dangling;
pub mod dynamic_context;
pub mod input_sanitization;
pub mod llm_error;
pub mod loop_detection;
pub mod memory;
pub mod read_before_write;
pub mod sandbox;
pub mod subagent_limit;
pub mod summarization;
pub mod system_coalescing;
pub mod thread_data;
pub mod title;
pub mod todo;
pub mod tool_error;
pub mod uploads;
pub mod util;
pub mod view_image;

pub use builders::{ChainDeps, SharedState, build_lead_chain, build_subagent_chain};
pub use chain::{Chain, ModelCall, ToolCallHandler};
pub use clarification::ClarificationMiddleware;
pub use dangling::DanglingToolCallMiddleware;
pub use dynamic_context::DynamicContextMiddleware;
pub use input_sanitization::InputSanitizationMiddleware;
pub use llm_error::{ErrorFallback, LLMErrorHandlingMiddleware, error_fallback};
pub use loop_detection::LoopDetectionMiddleware;
pub use memory::MemoryMiddleware;
pub use read_before_write::{FileGates, ReadBeforeWriteMiddleware};
pub use sandbox::SandboxMiddleware;
pub use subagent_limit::SubagentLimitMiddleware;
pub use summarization::DeerFlowSummarizationMiddleware;
pub use system_coalescing::SystemMessageCoalescingMiddleware;
pub use thread_data::ThreadDataMiddleware;
pub use title::TitleMiddleware;
pub use todo::TodoMiddleware;
pub use tool_error::ToolErrorHandlingMiddleware;
pub use uploads::UploadsMiddleware;
pub use view_image::ViewImageMiddleware;

use async_trait::async_trait;
use fawn_config::Settings;
use fawn_llm::{ChatModel, ChatRequest, LlmError, ModelRegistry, ToolSpec};
pub use fawn_memory::{MemoryReader, MemorySink};
use fawn_state::{EventSink, Message, Messages, StateUpdate, ThreadState, ToolCall};
use fawn_tools::{SandboxSlot, Tool, ToolError};
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The six hook points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hook {
    BeforeAgent,
    BeforeModel,
    WrapModelCall,
    AfterModel,
    WrapToolCall,
    AfterAgent,
}

impl Hook {
    pub fn as_str(&self) -> &'static str {
        match self {
            Hook::BeforeAgent => "before_agent",
            Hook::BeforeModel => "before_model",
            Hook::WrapModelCall => "wrap_model_call",
            Hook::AfterModel => "after_model",
            Hook::WrapToolCall => "wrap_tool_call",
            Hook::AfterAgent => "after_agent",
        }
    }

    /// The LangGraph node name of a state hook, as DeerFlow's graphs name it
    /// (`DeerFlowSummarizationMiddleware.before_model`). `updates` events are keyed by it.
    pub fn node_name(&self, middleware: &str) -> String {
        format!("{middleware}.{}", self.as_str())
    }
}

/// Where the loop goes after a state hook (LangChain `jump_to`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JumpTo {
    Model,
    Tools,
    End,
}

/// What a state hook (`before_agent`, `before_model`, `after_model`, `after_agent`) returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookOutcome {
    /// Written through the reducers; emitted as `updates {"<Mw>.<hook>": update}`.
    pub update: Option<StateUpdate>,
    pub jump_to: Option<JumpTo>,
}

impl HookOutcome {
    pub fn none() -> HookOutcome {
        HookOutcome::default()
    }

    pub fn update(update: StateUpdate) -> HookOutcome {
        HookOutcome {
            update: Some(update),
            jump_to: None,
        }
    }

    pub fn with_jump(mut self, jump: JumpTo) -> HookOutcome {
        self.jump_to = Some(jump);
        self
    }
}

/// The run options DeerFlow reads from `configurable` overlaid with `context`, resolved
/// (defaults applied, clamps applied, thinking forced off for models without support).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    pub model_name: String,
    pub thinking_enabled: bool,
    pub reasoning_effort: Option<String>,
    pub is_plan_mode: bool,
    pub subagent_enabled: bool,
    /// Clamped 1..=4 (default 3).
    pub max_concurrent_subagents: u32,
    /// Clamped 1..=50 (default `subagents.max_total_per_run`).
    pub max_total_subagents: u32,
    pub agent_name: Option<String>,
    pub is_bootstrap: bool,
    /// DeerFlow's `recursion_limit` after default (100) and clamp (`max_recursion_limit`).
    pub recursion_limit: u32,
    /// A custom agent's `model_settings.temperature`, sent with every model call.
    pub temperature: Option<f64>,
    /// A custom agent's `model_settings.max_tokens`, sent with every model call.
    pub max_tokens: Option<u32>,
}

/// Everything about one run that hooks may read. Built by the agent for each run.
pub struct RunContext {
    pub thread_id: String,
    pub run_id: String,
    /// `default` without auth.
    pub user_id: String,
    pub settings: Arc<Settings>,
    pub options: RunOptions,
    /// `configurable` overlaid with `context` (raw, for keys the options do not cover).
    pub context: Map<String, Value>,
    /// The run's model.
    pub model: Arc<dyn ChatModel>,
    /// Every configured model (title/summarization may use another one).
    pub models: ModelRegistry,
    /// `custom` events (`llm_retry`, …) and anything else a hook wants to stream.
    pub events: Arc<dyn EventSink>,
    pub cancel: CancellationToken,
    pub sandbox: Arc<SandboxSlot>,
    /// Memory queue, when memory is enabled.
    pub memory: Option<Arc<dyn MemorySink>>,
    /// DeerFlow `runtime.context["stop_reason"]` (`loop_capped`, …); surfaced on the run.
    pub stop_reason: Mutex<Option<String>>,
}

impl RunContext {
    /// Records a stop reason (the first one wins).
    pub fn set_stop_reason(&self, reason: &str) {
        let mut g = match self.stop_reason.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if g.is_none() {
            *g = Some(reason.to_string());
        }
    }

    pub fn stop_reason(&self) -> Option<String> {
        match self.stop_reason.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

/// One model call as the chain sees it. Middlewares may rewrite it for this call only;
/// nothing in it is persisted.
#[derive(Clone)]
pub struct ModelRequest {
    /// The system prompt, sent as a leading system message.
    pub system_prompt: Option<String>,
    /// The conversation (without the system prompt). Cloning it shares the state's chunks;
    /// rewriting it copies only what changes.
    pub messages: Messages,
    /// Shared by every call of a run (cloning the request does not copy them).
    pub tools: Arc<[ToolSpec]>,
    pub tool_choice: Option<Value>,
    pub model: Arc<dyn ChatModel>,
    pub thinking_enabled: bool,
    pub reasoning_effort: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub extra: Map<String, Value>,
}

impl std::fmt::Debug for ModelRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRequest")
            .field("model", &self.model.info().name)
            .field("messages", &self.messages.len())
            .field("tools", &self.tools.len())
            .finish()
    }
}

impl ModelRequest {
    /// The provider request: the system prompt first, then the messages (shared with the
    /// request, not copied).
    pub fn to_chat_request(&self) -> ChatRequest {
        let messages = match &self.system_prompt {
            Some(p) => Messages::prepended(Message::system(p.clone()), &self.messages),
            None => self.messages.clone(),
        };
        ChatRequest {
            messages,
            tools: self.tools.clone(),
            tool_choice: self.tool_choice.clone(),
            thinking_enabled: self.thinking_enabled,
            reasoning_effort: self.reasoning_effort.clone(),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            extra: self.extra.clone(),
            purpose: "",
        }
    }
}

/// The answer of a model call: one complete `ai` message.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResponse {
    pub message: Message,
}

/// One tool call as the chain sees it.
#[derive(Clone)]
pub struct ToolCallRequest {
    pub call: ToolCall,
    /// `None` when the model named a tool that does not exist.
    pub tool: Option<Arc<dyn Tool>>,
    /// The state when the tools step began.
    pub state: Arc<ThreadState>,
}

/// What one tool call produced.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCallResult {
    /// The `tool` message answering the call.
    pub message: Message,
    /// Other state the call writes (`artifacts`, `todos`, `sandbox`, …).
    pub update: Option<StateUpdate>,
    /// End the run after this tools step (DeerFlow `Command(goto=END)`).
    pub end_run: bool,
}

/// A hook failed in a way that must stop the run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MiddlewareError {
    #[error(transparent)]
    Llm(#[from] LlmError),
    #[error("{0}")]
    Failed(String),
    #[error("cancelled")]
    Cancelled,
}

/// One middleware. Every hook has a no-op default; [`Middleware::hooks`] must list the hooks
/// a middleware overrides (the agent only calls those, and names graph nodes after them).
#[async_trait]
pub trait Middleware: Send + Sync {
    /// The class name DeerFlow uses (`ThreadDataMiddleware`); node names derive from it.
    fn name(&self) -> &str;

    /// The hooks this middleware implements.
    fn hooks(&self) -> &'static [Hook];

    /// Tools this middleware adds to the run (e.g. `write_todos` in plan mode).
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// Text appended to the system prompt (e.g. `<todo_list_system>`).
    fn system_prompt_section(&self) -> Option<String> {
        None
    }

    async fn before_agent(
        &self,
        _state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::none())
    }

    async fn before_model(
        &self,
        _state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::none())
    }

    /// Wraps the model call. Call `next.call(request)` zero or more times (retries) and
    /// return a response; the request may be rewritten first.
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        _state: &ThreadState,
        _ctx: &RunContext,
        next: &dyn ModelCall,
    ) -> Result<ModelResponse, MiddlewareError> {
        next.call(request).await
    }

    async fn after_model(
        &self,
        _state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::none())
    }

    /// Wraps one tool call. Call `next.call(request)` (or not) and return a result.
    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        _ctx: &RunContext,
        next: &dyn ToolCallHandler,
    ) -> Result<ToolCallResult, ToolError> {
        next.call(request).await
    }

    async fn after_agent(
        &self,
        _state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::none())
    }
}
