//! `write_todos`: the plan-mode todo list (reference §3.4, §6.3).
//!
//! Each call replaces the whole list in state (`todos`). Rejecting several `write_todos`
//! calls in one model response is the todo middleware's job, not this tool's.

use crate::args::{parse_args, schema_for};
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use fawn_state::{StateUpdate, Todo};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;

const DESCRIPTION: &str = "\
Create or update your todo list for the current task. Each call replaces the whole list, so \
always send every item with its current status.

Use it for work with three or more distinct steps, or when the user asks for a plan. Skip it \
for simple one- or two-step requests.

Rules:
- Write the list before you start, with the first item `in_progress`.
- Keep exactly one item `in_progress` while you work.
- Mark an item `completed` as soon as it is done; do not save completions for later.
- Add items you discover, and remove items that turn out to be unnecessary.
- Only mark an item `completed` when it is fully done; if you are blocked, keep it \
`in_progress` and add an item for what must be resolved.
- Call this tool at most once per response.";

/// Status of a todo item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
}

impl TodoStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TodoStatus::Pending => "pending",
            TodoStatus::InProgress => "in_progress",
            TodoStatus::Completed => "completed",
        }
    }
}

/// One item of the list.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct TodoItem {
    /// What has to be done, as a short imperative sentence.
    pub content: String,
    /// pending, in_progress or completed.
    pub status: TodoStatus,
}

/// Arguments of `write_todos`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteTodosArgs {
    /// The complete, updated todo list.
    pub todos: Vec<TodoItem>,
}

/// The ToolMessage text: `Updated todo list to ` followed by the list as compact JSON, e.g.
/// `Updated todo list to [{"content":"Read the data","status":"completed"}]`.
pub fn todos_message(todos: &[TodoItem]) -> String {
    let json = serde_json::to_string(todos).unwrap_or_else(|_| "[]".to_string());
    format!("Updated todo list to {json}")
}

/// `write_todos(todos)`.
#[derive(Debug, Default)]
pub struct WriteTodosTool;

impl WriteTodosTool {
    pub fn new() -> Self {
        WriteTodosTool
    }
}

#[async_trait]
impl Tool for WriteTodosTool {
    fn name(&self) -> &str {
        "write_todos"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Arc<Value> {
        schema_for::<WriteTodosArgs>()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        _ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: WriteTodosArgs = parse_args(self.name(), args)?;
        let todos: Vec<Todo> = args
            .todos
            .iter()
            .map(|t| Todo {
                content: t.content.clone(),
                status: t.status.as_str().to_string(),
                extra: Map::new(),
            })
            .collect();
        let mut out = ToolOutput::text(todos_message(&args.todos));
        out.update = Some(StateUpdate {
            todos: Some(todos),
            ..Default::default()
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_format() {
        let items = vec![
            TodoItem {
                content: "Read".into(),
                status: TodoStatus::Completed,
            },
            TodoItem {
                content: "Write \"x\"".into(),
                status: TodoStatus::InProgress,
            },
        ];
        assert_eq!(
            todos_message(&items),
            r#"Updated todo list to [{"content":"Read","status":"completed"},{"content":"Write \"x\"","status":"in_progress"}]"#
        );
        assert_eq!(todos_message(&[]), "Updated todo list to []");
    }
}
