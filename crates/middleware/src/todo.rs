//! `TodoMiddleware` (plan mode): adds the `write_todos` tool and the `<todo_list_system>`
//! prompt section, reminds the model of its todo list when the `write_todos` call has left
//! the context (summarised away), and stops it from finishing while items are still open
//! (a transient reminder and a jump back to the model, at most twice per run).

use crate::util::{hidden_human, last_ai};
use crate::{
    Hook, HookOutcome, JumpTo, Middleware, MiddlewareError, ModelCall, ModelRequest, ModelResponse,
    RunContext, ToolCallHandler, ToolCallRequest, ToolCallResult,
};
use async_trait::async_trait;
use fawn_state::{Message, MessageKind, Messages, StateUpdate, ThreadState, Todo};
use fawn_tools::{Tool, ToolError};
use std::sync::{Arc, Mutex};

pub const WRITE_TODOS: &str = "write_todos";
pub const TODO_REMINDER_NAME: &str = "todo_reminder";
pub const COMPLETION_REMINDER_NAME: &str = "todo_completion_reminder";
/// Completion reminders per run before the model is allowed to finish anyway.
pub const MAX_COMPLETION_REMINDERS: u32 = 2;

/// The prompt section added in plan mode.
pub const TODO_SYSTEM_PROMPT: &str = "<todo_list_system>
You have a `write_todos` tool to plan and track work that takes several steps.

When to use it:
- Tasks with three or more distinct steps, or when the user asks for a plan.
- Not for simple one- or two-step requests: just do those.

How to use it:
- Write the list before starting, with the first item `in_progress`.
- Keep exactly one item `in_progress` at a time.
- Mark each item `completed` as soon as it is done; never batch completions.
- Add items you discover and remove ones that turn out to be unnecessary.
- Call `write_todos` at most once per response, always with the complete list.
- Do not give your final answer while items are still pending or in progress.
</todo_list_system>";

const PARALLEL_CALLS_ERROR: &str = "Error: `write_todos` was called more than once in a single response, so none of these calls were applied. Call it once per response with the complete, updated list.";

fn format_todos<'a>(todos: impl IntoIterator<Item = &'a Todo>) -> String {
    todos
        .into_iter()
        .map(|t| format!("- [{}] {}", t.status, t.content))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The reminder injected when the todo list is no longer visible in the context.
pub fn context_reminder_text(todos: &[Todo]) -> String {
    format!(
        "<system_reminder>\nYour todo list is no longer visible in the conversation, but it is still active. Its current state:\n\n{}\n\nKeep working through it and call `write_todos` whenever an item's status changes.\n</system_reminder>",
        format_todos(todos)
    )
}

/// The reminder sent when the model tries to finish with open items.
pub fn completion_reminder_text(todos: &[Todo]) -> String {
    format!(
        "<system_reminder>\nYou have incomplete todo items that must be finished before your final response:\n\n{}\n\nContinue with them, mark each one `completed` with `write_todos` as you finish it, and answer only when every item is done.\n</system_reminder>",
        format_todos(todos.iter().filter(|t| t.status != "completed"))
    )
}

#[derive(Default)]
struct RunState {
    pending: Option<Message>,
    reminders: u32,
}

pub struct TodoMiddleware {
    tool: Option<Arc<dyn Tool>>,
    run: Mutex<RunState>,
}

impl std::fmt::Debug for TodoMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TodoMiddleware")
            .field("tool", &self.tool.as_ref().map(|t| t.name().to_string()))
            .finish()
    }
}

impl TodoMiddleware {
    /// `write_todos` is the tool this middleware adds to the run.
    pub fn new(write_todos: Option<Arc<dyn Tool>>) -> Self {
        TodoMiddleware {
            tool: write_todos,
            run: Mutex::new(RunState::default()),
        }
    }

    fn run(&self) -> std::sync::MutexGuard<'_, RunState> {
        match self.run.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

fn has_write_todos_call(messages: &Messages) -> bool {
    messages
        .iter()
        .any(|m| m.kind.is_ai() && m.tool_calls.iter().any(|c| c.name == WRITE_TODOS))
}

fn has_reminder(messages: &Messages) -> bool {
    messages
        .iter()
        .any(|m| m.kind == MessageKind::Human && m.name.as_deref() == Some(TODO_REMINDER_NAME))
}

#[async_trait]
impl Middleware for TodoMiddleware {
    fn name(&self) -> &str {
        "TodoMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[
            Hook::BeforeAgent,
            Hook::BeforeModel,
            Hook::WrapModelCall,
            Hook::AfterModel,
            Hook::WrapToolCall,
            Hook::AfterAgent,
        ]
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tool.iter().cloned().collect()
    }

    fn system_prompt_section(&self) -> Option<String> {
        Some(TODO_SYSTEM_PROMPT.to_string())
    }

    async fn before_agent(
        &self,
        _state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        *self.run() = RunState::default();
        Ok(HookOutcome::none())
    }

    async fn before_model(
        &self,
        state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        let Some(todos) = state.todos.as_ref().filter(|t| !t.is_empty()) else {
            return Ok(HookOutcome::none());
        };
        if has_write_todos_call(&state.messages) || has_reminder(&state.messages) {
            return Ok(HookOutcome::none());
        }
        let reminder = hidden_human(context_reminder_text(todos), TODO_REMINDER_NAME);
        Ok(HookOutcome::update(StateUpdate::messages(vec![reminder])))
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        _state: &ThreadState,
        _ctx: &RunContext,
        next: &dyn ModelCall,
    ) -> Result<ModelResponse, MiddlewareError> {
        let pending = self.run().pending.take();
        if let Some(reminder) = pending {
            request.messages.push(reminder);
        }
        next.call(request).await
    }

    async fn after_model(
        &self,
        state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        let Some(ai) = last_ai(&state.messages) else {
            return Ok(HookOutcome::none());
        };
        if !ai.tool_calls.is_empty() {
            return Ok(HookOutcome::none());
        }
        let todos = state.todos.as_deref().unwrap_or_default();
        if todos.iter().all(|t| t.status == "completed") {
            return Ok(HookOutcome::none());
        }
        let mut run = self.run();
        if run.reminders >= MAX_COMPLETION_REMINDERS {
            return Ok(HookOutcome::none());
        }
        run.reminders += 1;
        run.pending = Some(hidden_human(
            completion_reminder_text(todos),
            COMPLETION_REMINDER_NAME,
        ));
        Ok(HookOutcome::none().with_jump(JumpTo::Model))
    }

    /// Several `write_todos` calls in one response are all refused (the list is replaced
    /// wholesale, so parallel calls would race).
    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        _ctx: &RunContext,
        next: &dyn ToolCallHandler,
    ) -> Result<ToolCallResult, ToolError> {
        if request.call.name == WRITE_TODOS {
            let call_id = request.call.id.clone().unwrap_or_default();
            let parallel = request
                .state
                .messages
                .iter()
                .rev()
                .find(|m| {
                    m.kind.is_ai()
                        && m.tool_calls
                            .iter()
                            .any(|c| c.id.as_deref() == Some(call_id.as_str()))
                })
                .map(|m| {
                    m.tool_calls
                        .iter()
                        .filter(|c| c.name == WRITE_TODOS)
                        .count()
                        > 1
                })
                .unwrap_or(false);
            if parallel {
                return Ok(ToolCallResult {
                    message: Message::tool(PARALLEL_CALLS_ERROR, call_id, Some(WRITE_TODOS.into()))
                        .with_status_error(),
                    update: None,
                    end_run: false,
                });
            }
        }
        next.call(request).await
    }

    async fn after_agent(
        &self,
        _state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        *self.run() = RunState::default();
        Ok(HookOutcome::none())
    }
}
