//! The tools the agent can call.
//!
//! Owns: the `Tool` trait (name, description, JSON schema, call), argument validation, and
//! Fawn's tools — sandbox file tools, built-ins (`present_files`, `view_image`,
//! `ask_clarification`, `write_todos`, `task`, `setup_agent`, `update_agent`), web
//! search/fetch, skills and MCP. Must never know
//! about HTTP routes, storage or the middleware chain; tools see only a `ToolContext`.

/// MCP servers as tools.
pub mod mcp;

pub mod args;
pub mod builtins;
pub mod registry;
pub mod skills;
pub mod web;

use async_trait::async_trait;
use fawn_config::Settings;
use fawn_llm::ToolSpec;
use fawn_sandbox::{Sandbox, SandboxError, SandboxProvider};
use fawn_state::{Content, EventSink, Message, StateUpdate, ThreadState, UsageMetadata};
use serde_json::{Map, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The sandbox tools (`bash`, `ls`, `read_file`, `write_file`, `str_replace`, `glob`, `grep`).
pub mod sandbox_tools;

/// The sandbox of one run, acquired on first use and shared by all its tool calls.
pub struct SandboxSlot {
    provider: Arc<dyn SandboxProvider>,
    thread_id: String,
    /// Id persisted in state from an earlier run, if any.
    known_id: Option<String>,
    acquired: tokio::sync::OnceCell<String>,
}

impl SandboxSlot {
    pub fn new(
        provider: Arc<dyn SandboxProvider>,
        thread_id: impl Into<String>,
        known_id: Option<String>,
    ) -> Self {
        SandboxSlot {
            provider,
            thread_id: thread_id.into(),
            known_id,
            acquired: tokio::sync::OnceCell::new(),
        }
    }

    pub fn provider(&self) -> &Arc<dyn SandboxProvider> {
        &self.provider
    }

    /// The run's sandbox, acquiring it on first call.
    pub async fn get(&self) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let id = self
            .acquired
            .get_or_try_init(|| async {
                if let Some(id) = &self.known_id
                    && self.provider.get(id).is_some()
                {
                    return Ok(id.clone());
                }
                self.provider.acquire(&self.thread_id).await
            })
            .await?;
        self.provider
            .get(id)
            .ok_or_else(|| SandboxError::Unavailable(format!("sandbox {id} is gone")))
    }

    /// The id acquired during this run, if a tool asked for the sandbox.
    pub fn acquired_id(&self) -> Option<String> {
        self.acquired.get().cloned()
    }
}

/// Everything a tool call may use.
#[derive(Clone)]
pub struct ToolContext {
    pub thread_id: String,
    pub run_id: String,
    /// Id of the tool call being executed.
    pub tool_call_id: String,
    /// The state as it was when the tools step began.
    pub state: Arc<ThreadState>,
    pub settings: Arc<Settings>,
    pub sandbox: Arc<SandboxSlot>,
    /// `custom` stream events.
    pub events: Arc<dyn EventSink>,
    pub cancel: CancellationToken,
    /// Runs `task` subagents; `None` when subagents are disabled.
    pub subagents: Option<Arc<dyn SubagentRunner>>,
    /// The run's resolved model name.
    pub model_name: String,
    /// Runtime context (`configurable` overlaid with `context`).
    pub context: Map<String, Value>,
}

/// `success` or `error`, as on a ToolMessage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ToolStatus {
    #[default]
    Success,
    Error,
}

/// What a tool returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutput {
    pub content: Content,
    pub status: ToolStatus,
    /// State written by the tool besides its ToolMessage (`artifacts`, `todos`, …).
    pub update: Option<StateUpdate>,
    /// `ToolMessage.artifact`.
    pub artifact: Option<Value>,
    /// Extra `ToolMessage.additional_kwargs` (e.g. `subagent_status`).
    pub additional_kwargs: Map<String, Value>,
    /// End the run after this tool (DeerFlow `Command(goto=END)`).
    pub end_run: bool,
}

impl ToolOutput {
    pub fn text(s: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: Content::Text(s.into()),
            ..Default::default()
        }
    }

    pub fn error(s: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: Content::Text(s.into()),
            status: ToolStatus::Error,
            ..Default::default()
        }
    }

    /// The ToolMessage for call `call_id` of tool `name`.
    pub fn into_message(self, call_id: &str, name: &str) -> Message {
        let mut m = Message::tool(self.content, call_id, Some(name.to_string()));
        if self.status == ToolStatus::Error {
            m.status = Some("error".to_string());
        }
        if let Some(a) = self.artifact {
            m.artifact = a;
        }
        m.additional_kwargs = self.additional_kwargs;
        m
    }
}

/// A tool failed in a way the model should hear about.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// Arguments missing or of the wrong type; the text says which.
    #[error("{0}")]
    InvalidArguments(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
    #[error("cancelled")]
    Cancelled,
}

/// A tool the model can call.
#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object, shared: implementations keep it (or take it
    /// from [`args::schema_for`]) rather than build it per call, since every run asks every
    /// tool for its [`spec`](Tool::spec).
    fn parameters(&self) -> Arc<Value>;
    /// DeerFlow `return_direct`.
    fn return_direct(&self) -> bool {
        false
    }
    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError>;

    /// Two short string copies and the shared schema.
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_string(),
            description: self.description().to_string(),
            parameters: self.parameters(),
        }
    }
}

/// A subagent type the `task` tool can delegate to.
#[derive(Clone, Debug, PartialEq)]
pub struct SubagentInfo {
    pub name: String,
    pub description: String,
}

/// One delegation from the `task` tool.
#[derive(Clone, Debug, PartialEq)]
pub struct SubagentRequest {
    /// The `task` tool call id (DeerFlow's `task_id`).
    pub task_id: String,
    pub subagent_type: String,
    pub description: String,
    pub prompt: String,
}

/// Terminal state of a subagent run (`subagent_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubagentStatus {
    Completed,
    Failed,
    Cancelled,
    TimedOut,
}

/// What a subagent run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct SubagentOutcome {
    pub status: SubagentStatus,
    /// Final answer text (completed) or empty.
    pub result: String,
    pub error: Option<String>,
    /// `token_capped` | `turn_capped` | `loop_capped`.
    pub stop_reason: Option<String>,
    pub usage: UsageMetadata,
    pub model_name: String,
}

/// Runs subagents for the `task` tool. Implemented by the agent crate.
#[async_trait]
pub trait SubagentRunner: Send + Sync {
    fn available(&self) -> Vec<SubagentInfo>;

    /// Runs one subagent to completion, timeout or cancellation (`ctx.cancel`), sending each
    /// message it produces to `progress` as it goes.
    async fn run(
        &self,
        request: SubagentRequest,
        ctx: &ToolContext,
        progress: tokio::sync::mpsc::UnboundedSender<Message>,
    ) -> SubagentOutcome;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::{
        AskClarificationTool, PresentFilesTool, TaskTool, ViewImageTool, WriteTodosTool,
    };

    #[test]
    fn spec_shares_the_tool_schema() {
        let mut tools = sandbox_tools::sandbox_tools(&Settings::default());
        tools.push(Arc::new(PresentFilesTool::new()));
        tools.push(Arc::new(AskClarificationTool::new()));
        tools.push(Arc::new(ViewImageTool::new()));
        tools.push(Arc::new(WriteTodosTool::new()));
        tools.push(Arc::new(TaskTool::new(&[])));
        tools.push(Arc::new(TaskTool::new(&[SubagentInfo {
            name: "general-purpose".into(),
            description: "anything".into(),
        }])));
        for t in &tools {
            let spec = t.spec();
            assert_eq!(spec.name, t.name());
            assert_eq!(spec.description, t.description());
            assert!(
                Arc::ptr_eq(&spec.parameters, &t.parameters()),
                "{}: the spec copied the schema",
                t.name()
            );
            assert!(
                Arc::ptr_eq(&t.spec().parameters, &spec.parameters),
                "{}: a second spec got another schema",
                t.name()
            );
        }
    }
}
