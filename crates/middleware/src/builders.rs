//! Assembling DeerFlow's middleware chains for one run (reference §1.1 and §1.2), and the
//! process-wide state some middlewares share across runs.
//!
//! ```text
//! lead:      InputSanitization, ThreadData, Uploads, Sandbox, DanglingToolCall,
//!            LLMErrorHandling, ToolErrorHandling, DynamicContext, [DeerFlowSummarization],
//!            [Todo], Title, [Memory], [ViewImage], SystemMessageCoalescing,
//!            [SubagentLimit], [LoopDetection], Clarification
//! subagent:  InputSanitization, ThreadData, Sandbox, DanglingToolCall, LLMErrorHandling,
//!            ToolErrorHandling, [ViewImage], [LoopDetection], [DeerFlowSummarization],
//!            SystemMessageCoalescing
//! ```

use crate::clarification::ClarificationMiddleware;
use crate::dangling::DanglingToolCallMiddleware;
use crate::dynamic_context::DynamicContextMiddleware;
use crate::input_sanitization::InputSanitizationMiddleware;
use crate::llm_error::{CircuitBreakers, LLMErrorHandlingMiddleware, LlmConcurrency};
use crate::loop_detection::{LoopDetectionMiddleware, LoopTracker};
use crate::memory::MemoryMiddleware;
use crate::read_before_write::{FileGates, ReadBeforeWriteMiddleware};
use crate::sandbox::SandboxMiddleware;
use crate::subagent_limit::SubagentLimitMiddleware;
use crate::summarization::DeerFlowSummarizationMiddleware;
use crate::system_coalescing::SystemMessageCoalescingMiddleware;
use crate::thread_data::ThreadDataMiddleware;
use crate::title::TitleMiddleware;
use crate::todo::TodoMiddleware;
use crate::tool_error::ToolErrorHandlingMiddleware;
use crate::uploads::UploadsMiddleware;
use crate::view_image::ViewImageMiddleware;
use crate::{Chain, Middleware, RunOptions};
use fawn_config::{AppConfig, Settings};
use fawn_llm::ModelInfo;
use fawn_memory::MemoryReader;
use fawn_tools::Tool;
use fawn_tools::builtins::WriteTodosTool;
use std::sync::Arc;

/// State DeerFlow keeps per process, shared by every run's chain: the LLM circuit breakers
/// (one per model), the cap on concurrent model calls and the per-thread loop-detection
/// history. Create it
/// once at startup (the concurrency cap is fixed then).
#[derive(Debug)]
pub struct SharedState {
    pub circuits: Arc<CircuitBreakers>,
    pub llm_limiter: LlmConcurrency,
    pub loops: Arc<LoopTracker>,
    /// The read-before-write gate's per-(thread, path) locks.
    pub file_gates: Arc<FileGates>,
}

impl SharedState {
    pub fn new(app: &AppConfig) -> Self {
        SharedState {
            circuits: Arc::new(CircuitBreakers::from_config(&app.circuit_breaker)),
            llm_limiter: LlmConcurrency::new(app.llm_call.max_concurrent_calls),
            loops: Arc::new(LoopTracker::new(app.loop_detection.max_tracked_threads)),
            file_gates: Arc::new(FileGates::new()),
        }
    }
}

/// What the chain builders need besides the run's options: built once per process and
/// shared.
#[derive(Clone)]
pub struct ChainDeps {
    pub settings: Arc<Settings>,
    pub shared: Arc<SharedState>,
    /// The `write_todos` tool `TodoMiddleware` adds in plan mode (default: the tools crate's
    /// [`WriteTodosTool`]; `None` when the run's tools already carry one).
    pub write_todos: Option<Arc<dyn Tool>>,
    /// Where `DynamicContextMiddleware` reads the `<memory>` block (e.g. `fawn_memory::Memory`);
    /// `None`: no memory injection.
    pub memory: Option<Arc<dyn MemoryReader>>,
}

impl std::fmt::Debug for ChainDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainDeps")
            .field("shared", &self.shared)
            .field("write_todos", &self.write_todos.is_some())
            .field("memory", &self.memory.is_some())
            .finish()
    }
}

impl ChainDeps {
    /// Fresh process-wide state for `settings`.
    pub fn new(settings: Arc<Settings>) -> Self {
        let shared = Arc::new(SharedState::new(&settings.app));
        ChainDeps {
            settings,
            shared,
            write_todos: Some(Arc::new(WriteTodosTool::new())),
            memory: None,
        }
    }

    /// Replaces (or, with `None`, removes) the tool plan mode adds.
    pub fn with_write_todos(mut self, tool: Option<Arc<dyn Tool>>) -> Self {
        self.write_todos = tool;
        self
    }

    /// Memory injected into the first turn of each thread.
    pub fn with_memory(mut self, memory: Arc<dyn MemoryReader>) -> Self {
        self.memory = Some(memory);
        self
    }

    fn base(&self, lead: bool) -> Vec<Arc<dyn Middleware>> {
        let app = &self.settings.app;
        let mut v: Vec<Arc<dyn Middleware>> = vec![
            Arc::new(InputSanitizationMiddleware::new()),
            Arc::new(ThreadDataMiddleware::new()),
        ];
        if lead {
            v.push(Arc::new(UploadsMiddleware::new()));
        }
        v.push(Arc::new(SandboxMiddleware::new()));
        v.push(Arc::new(DanglingToolCallMiddleware::new()));
        v.push(Arc::new(LLMErrorHandlingMiddleware::new(
            app.llm_call.clone(),
            self.shared.circuits.clone(),
            self.shared.llm_limiter.clone(),
        )));
        if app.read_before_write.enabled {
            v.push(Arc::new(ReadBeforeWriteMiddleware::new(
                self.shared.file_gates.clone(),
            )));
        }
        v.push(Arc::new(ToolErrorHandlingMiddleware::new()));
        v
    }
}

/// The lead agent's chain for one run (reference §1.1, positions 1–35 minus the
/// middlewares Fawn does not have). Conditions: `summarization.enabled` →
/// Summarization; `is_plan_mode` → Todo; memory enabled in `middleware` mode → Memory;
/// `model_info.supports_vision` → ViewImage; `subagent_enabled` → SubagentLimit;
/// `loop_detection.enabled` → LoopDetection. DynamicContext injects memory only when
/// `deps.memory` is set and `memory.enabled`/`injection_enabled` hold. Clarification is
/// always last.
///
/// Build a new chain per run: middlewares keep per-run state (queued reminders, counters).
pub fn build_lead_chain(deps: &ChainDeps, options: &RunOptions, model_info: &ModelInfo) -> Chain {
    let app = &deps.settings.app;
    let mut v = deps.base(true);
    v.push(Arc::new(DynamicContextMiddleware::new(deps.memory.clone())));
    if app.summarization.enabled {
        v.push(Arc::new(DeerFlowSummarizationMiddleware::new(
            app.summarization.clone(),
        )));
    }
    if options.is_plan_mode {
        v.push(Arc::new(TodoMiddleware::new(deps.write_todos.clone())));
    }
    v.push(Arc::new(TitleMiddleware::new(app.title.clone())));
    if app.memory.enabled && app.memory.mode == "middleware" {
        v.push(Arc::new(MemoryMiddleware::new()));
    }
    if model_info.supports_vision {
        v.push(Arc::new(ViewImageMiddleware::new()));
    }
    v.push(Arc::new(SystemMessageCoalescingMiddleware::new()));
    if options.subagent_enabled {
        v.push(Arc::new(SubagentLimitMiddleware::new(
            options.max_concurrent_subagents,
            options.max_total_subagents,
        )));
    }
    if app.loop_detection.enabled {
        v.push(Arc::new(LoopDetectionMiddleware::new(
            app.loop_detection.clone(),
            deps.shared.loops.clone(),
        )));
    }
    v.push(Arc::new(ClarificationMiddleware::new()));
    Chain::new(v)
}

/// A subagent's chain (reference §1.2): the shared base without Uploads, then ViewImage
/// (vision models), LoopDetection, Summarization and SystemMessageCoalescing. No Title, Memory,
/// Todo, SubagentLimit or Clarification. `loop_key` names the subagent run in the loop-detection history (e.g.
/// `"{thread_id}:subagent:{task_id}"`) so it does not count towards the lead agent's loops.
pub fn build_subagent_chain(deps: &ChainDeps, model_info: &ModelInfo, loop_key: &str) -> Chain {
    let app = &deps.settings.app;
    let mut v = deps.base(false);
    if model_info.supports_vision {
        v.push(Arc::new(ViewImageMiddleware::new()));
    }
    if app.loop_detection.enabled {
        v.push(Arc::new(
            LoopDetectionMiddleware::new(app.loop_detection.clone(), deps.shared.loops.clone())
                .with_key(loop_key),
        ));
    }
    if app.summarization.enabled {
        v.push(Arc::new(DeerFlowSummarizationMiddleware::new(
            app.summarization.clone(),
        )));
    }
    v.push(Arc::new(SystemMessageCoalescingMiddleware::new()));
    Chain::new(v)
}
