//! Message helpers shared by the middlewares.

use fawn_state::{Content, Message, MessageKind, Messages, ToolCall};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// `additional_kwargs` flag DeerFlow's UI uses to hide a message.
pub const HIDE_FROM_UI: &str = "hide_from_ui";

/// Names of the hidden human messages the framework itself writes (reminders, summaries,
/// warnings). They are never "the user's message".
pub const FRAMEWORK_HUMAN_NAMES: &[&str] = &[
    "todo_reminder",
    "todo_completion_reminder",
    "summary",
    "loop_warning",
    "view_image_context",
    "memory",
];

/// True when `additional_kwargs.hide_from_ui` is `true`.
pub fn is_hidden(m: &Message) -> bool {
    m.additional_kwargs
        .get(HIDE_FROM_UI)
        .and_then(Value::as_bool)
        == Some(true)
}

/// True for a hidden message that carries a human-input response (a clarification card
/// answer): hidden from the UI, but typed by the user.
pub fn is_human_input_response(m: &Message) -> bool {
    matches!(
        m.additional_kwargs.get("human_input_response"),
        Some(Value::Object(o)) if o.get("kind").and_then(Value::as_str) == Some("human_input_response")
    )
}

/// True for a human message written by the user (not a framework reminder, summary or
/// hidden context block; hidden card replies count as the user's).
pub fn is_real_user_message(m: &Message) -> bool {
    if m.kind != MessageKind::Human {
        return false;
    }
    if let Some(name) = &m.name
        && FRAMEWORK_HUMAN_NAMES.contains(&name.as_str())
    {
        return false;
    }
    if let Some(id) = &m.id
        && (id.ends_with("__memory") || id.starts_with("view-image-context:"))
    {
        return false;
    }
    !is_hidden(m) || is_human_input_response(m)
}

/// A hidden human message (`hide_from_ui: true`) with a framework name.
pub fn hidden_human(content: impl Into<Content>, name: &str) -> Message {
    let mut m = Message::human(content).with_name(name);
    m.additional_kwargs
        .insert(HIDE_FROM_UI.to_string(), Value::Bool(true));
    m
}

/// Appends `text` to message content after a blank line: a string grows, a block list gets a
/// new text block, empty content becomes `text`.
pub fn append_text(content: &Content, text: &str) -> Content {
    match content {
        Content::Text(s) if s.is_empty() => Content::Text(text.to_string()),
        Content::Text(s) => Content::Text(format!("{s}\n\n{text}")),
        Content::Blocks(blocks) => {
            let mut b = blocks.clone();
            b.push(serde_json::json!({"type": "text", "text": format!("\n\n{text}")}));
            Content::Blocks(b)
        }
    }
}

/// A copy of the AI message `m` carrying only `kept` tool calls: the provider's raw
/// `additional_kwargs.tool_calls` and Anthropic `tool_use` content blocks of the dropped
/// calls go too, and `finish_reason: tool_calls` becomes `stop` when none remain.
pub fn with_tool_calls(m: &Message, kept: Vec<ToolCall>) -> Message {
    let kept_ids: HashSet<String> = kept.iter().filter_map(|c| c.id.clone()).collect();
    let dropped: HashSet<String> = m
        .tool_calls
        .iter()
        .filter_map(|c| c.id.clone())
        .filter(|id| !kept_ids.contains(id))
        .collect();
    let mut out = m.clone();
    out.tool_calls = kept;
    if out.tool_calls.is_empty() {
        out.invalid_tool_calls.clear();
    }
    if let Some(Value::Array(raw)) = out.additional_kwargs.get_mut("tool_calls") {
        if out.tool_calls.is_empty() {
            raw.clear();
        } else {
            raw.retain(|r| match r.get("id").and_then(Value::as_str) {
                Some(id) => !dropped.contains(id),
                None => true,
            });
        }
    }
    if matches!(out.additional_kwargs.get("tool_calls"), Some(Value::Array(a)) if a.is_empty()) {
        out.additional_kwargs.shift_remove("tool_calls");
    }
    if let Content::Blocks(blocks) = &mut out.content {
        blocks.retain(|b| {
            let is_tool_use = b.get("type").and_then(Value::as_str) == Some("tool_use");
            let id = b.get("id").and_then(Value::as_str).unwrap_or_default();
            !(is_tool_use && (out.tool_calls.is_empty() || dropped.contains(id)))
        });
    }
    if out.tool_calls.is_empty()
        && out
            .response_metadata
            .get("finish_reason")
            .and_then(Value::as_str)
            == Some("tool_calls")
    {
        out.response_metadata
            .insert("finish_reason".to_string(), Value::String("stop".into()));
    }
    out
}

/// The last message if it is an AI message.
pub fn last_ai(messages: &Messages) -> Option<&Message> {
    messages.last().filter(|m| m.kind == MessageKind::Ai)
}

/// Truncates to at most `max` characters (not bytes).
pub fn truncate_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A JSON object from pairs (small convenience for payloads).
pub fn object(pairs: impl IntoIterator<Item = (&'static str, Value)>) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn append_text_shapes() {
        assert_eq!(append_text(&Content::Text(String::new()), "x"), "x".into());
        assert_eq!(append_text(&"a".into(), "x"), "a\n\nx".into());
        let blocks = append_text(
            &Content::Blocks(vec![json!({"type":"text","text":"a"})]),
            "x",
        );
        assert_eq!(
            blocks,
            Content::Blocks(vec![
                json!({"type":"text","text":"a"}),
                json!({"type":"text","text":"\n\nx"})
            ])
        );
    }

    #[test]
    fn with_tool_calls_syncs_raw_calls() {
        let mut m = Message::ai("").with_tool_calls(vec![
            ToolCall::new("task", json!({}), "a"),
            ToolCall::new("task", json!({}), "b"),
        ]);
        m.additional_kwargs.insert(
            "tool_calls".into(),
            json!([{"id": "a", "function": {}}, {"id": "b", "function": {}}]),
        );
        m.response_metadata
            .insert("finish_reason".into(), json!("tool_calls"));
        let one = with_tool_calls(&m, vec![m.tool_calls[0].clone()]);
        assert_eq!(
            one.additional_kwargs["tool_calls"],
            json!([{"id": "a", "function": {}}])
        );
        assert_eq!(one.response_metadata["finish_reason"], "tool_calls");
        let none = with_tool_calls(&m, vec![]);
        assert!(!none.additional_kwargs.contains_key("tool_calls"));
        assert_eq!(none.response_metadata["finish_reason"], "stop");
    }

    #[test]
    fn real_user_messages() {
        assert!(is_real_user_message(&Message::human("hi")));
        assert!(!is_real_user_message(&hidden_human("x", "todo_reminder")));
        let mut card = Message::human("dev");
        card.additional_kwargs
            .insert(HIDE_FROM_UI.into(), json!(true));
        assert!(!is_real_user_message(&card));
        card.additional_kwargs.insert(
            "human_input_response".into(),
            json!({"kind": "human_input_response", "value": "dev"}),
        );
        assert!(is_real_user_message(&card));
        assert!(!is_real_user_message(&Message::ai("x")));
    }

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("abc", 10), "abc");
    }
}
