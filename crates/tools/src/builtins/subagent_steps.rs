//! The journal rows of a subagent's timeline (DeerFlow's `subagent.start` / `subagent.step` /
//! `subagent.end`, category `subagent`): what the UI's subtask card reads back from
//! `GET /api/threads/{id}/runs/{rid}/events?event_types=subagent.step&task_id=…` after a
//! reload. The `task` tool hands them to its run through [`fawn_state::EventSink::journal`]
//! as it streams the matching `task_*` custom events; the run appends them when it ends.
//!
//! A step is one subagent message: an AI turn (`kind: "ai"`, its text and tool calls as
//! `{name, args}`) or a tool result (`kind: "tool"`, its text and `tool_name`). Texts, tool
//! call arguments and the final result or error are cut at [`STEP_MAX_CHARS`] characters
//! (flagged `truncated` / `args_truncated` / `result_truncated` / `error_truncated`), so a
//! row stays bounded. Every row's metadata has `task_id` (the `task` tool call id) and
//! `caller` (`subagent:{subagent_type}`); a step's also its `message_index` (1-based).

use fawn_state::{JournalEntry, Message, MessageKind};
use serde_json::{Map, Value, json};

pub const SUBAGENT_START: &str = "subagent.start";
pub const SUBAGENT_STEP: &str = "subagent.step";
pub const SUBAGENT_END: &str = "subagent.end";
/// The category of subagent rows (not `message`: they are not conversation history).
pub const SUBAGENT_CATEGORY: &str = "subagent";
/// Longest step text, tool-call arguments (serialized) or result/error, in characters.
pub const STEP_MAX_CHARS: usize = 8192;

/// A subagent's `caller` tag.
pub fn caller(subagent_type: &str) -> String {
    format!("subagent:{subagent_type}")
}

fn cut(text: &str) -> (String, bool) {
    match text.char_indices().nth(STEP_MAX_CHARS) {
        Some((at, _)) => (text[..at].to_string(), true),
        None => (text.to_string(), false),
    }
}

fn entry(event_type: &str, content: Value, task_id: &str, caller: &str) -> JournalEntry {
    let mut metadata = Map::new();
    metadata.insert("task_id".into(), json!(task_id));
    metadata.insert("caller".into(), json!(caller));
    JournalEntry {
        event_type: event_type.into(),
        category: SUBAGENT_CATEGORY.into(),
        content,
        metadata,
    }
}

/// `subagent.start` `{task_id, description}`.
pub fn started(task_id: &str, description: &str, caller: &str) -> JournalEntry {
    let content = json!({"task_id": task_id, "description": description});
    entry(SUBAGENT_START, content, task_id, caller)
}

/// `subagent.step` `{task_id, message_index, kind, text, truncated, tool_calls | tool_name}`.
pub fn step(task_id: &str, message_index: usize, message: &Message, caller: &str) -> JournalEntry {
    let (text, truncated) = cut(&message.text());
    let mut content = Map::new();
    content.insert("task_id".into(), json!(task_id));
    content.insert("message_index".into(), json!(message_index));
    if message.kind == MessageKind::Tool {
        content.insert("kind".into(), json!("tool"));
        content.insert("text".into(), json!(text));
        content.insert("truncated".into(), json!(truncated));
        content.insert("tool_name".into(), json!(message.name));
    } else {
        content.insert("kind".into(), json!("ai"));
        content.insert("text".into(), json!(text));
        content.insert("truncated".into(), json!(truncated));
        let calls: Vec<Value> = message
            .tool_calls
            .iter()
            .map(|c| {
                let serialized = Value::Object(c.args.clone()).to_string();
                match cut(&serialized) {
                    (preview, true) => {
                        json!({"name": c.name, "args": preview, "args_truncated": true})
                    }
                    (_, false) => json!({"name": c.name, "args": c.args}),
                }
            })
            .collect();
        content.insert("tool_calls".into(), Value::Array(calls));
    }
    let mut e = entry(SUBAGENT_STEP, Value::Object(content), task_id, caller);
    e.metadata
        .insert("message_index".into(), json!(message_index));
    e
}

/// How a subagent ended, for [`ended`].
pub struct End<'a> {
    /// `completed`, `failed`, `cancelled` or `timed_out`.
    pub status: &'a str,
    pub model_name: &'a str,
    pub usage: Option<Value>,
    pub result: Option<&'a str>,
    pub error: Option<&'a str>,
}

/// `subagent.end` `{task_id, status, model_name?, usage?, result?, error?}`.
pub fn ended(task_id: &str, end: End<'_>, caller: &str) -> JournalEntry {
    let mut content = Map::new();
    content.insert("task_id".into(), json!(task_id));
    content.insert("status".into(), json!(end.status));
    let model = end.model_name.trim();
    if !model.is_empty() {
        content.insert("model_name".into(), json!(model));
    }
    if let Some(u) = end.usage {
        content.insert("usage".into(), u);
    }
    for (key, value) in [("result", end.result), ("error", end.error)] {
        if let Some(v) = value {
            let (v, truncated) = cut(v);
            content.insert(key.into(), json!(v));
            if truncated {
                content.insert(format!("{key}_truncated"), json!(true));
            }
        }
    }
    entry(SUBAGENT_END, Value::Object(content), task_id, caller)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_bounded() {
        let mut ai = Message::ai("x".repeat(STEP_MAX_CHARS + 5));
        ai.tool_calls.push(fawn_state::ToolCall {
            name: "write_file".into(),
            args: serde_json::from_value(json!({"content": "y".repeat(STEP_MAX_CHARS)})).unwrap(),
            id: Some("c1".into()),
            extra: Map::new(),
        });
        let e = step("t1", 1, &ai, &caller("general-purpose"));
        assert_eq!(e.event_type, SUBAGENT_STEP);
        assert_eq!(e.content["kind"], "ai");
        assert_eq!(e.content["truncated"], true);
        assert_eq!(
            e.content["text"].as_str().unwrap().chars().count(),
            STEP_MAX_CHARS
        );
        assert_eq!(e.content["tool_calls"][0]["args_truncated"], true);
        assert_eq!(e.metadata["caller"], "subagent:general-purpose");
        assert_eq!(e.metadata["message_index"], 1);

        let tool = Message::tool("ok", "c1", Some("write_file".into()));
        let e = step("t1", 2, &tool, "subagent:bash");
        assert_eq!(e.content["kind"], "tool");
        assert_eq!(e.content["tool_name"], "write_file");
        assert_eq!(e.content["truncated"], false);

        let e = ended(
            "t1",
            End {
                status: "completed",
                model_name: " m ",
                usage: None,
                result: Some("done"),
                error: None,
            },
            "subagent:bash",
        );
        assert_eq!(
            e.content,
            json!({"task_id": "t1", "status": "completed", "model_name": "m", "result": "done"})
        );
    }
}
