//! What of a conversation memory learns from: the user's own messages and the agent's final
//! answers. Tool traffic, framework reminders, hidden context blocks, the `<current_uploads>`
//! block and error fallbacks are left out.

use fawn_state::{Message, MessageKind};
use serde_json::Value;

/// Characters kept per message.
pub const MAX_CHARS_PER_MESSAGE: usize = 4000;
/// Messages kept per conversation (the most recent).
pub const MAX_MESSAGES: usize = 60;

/// Framework-written human messages (never the user's words).
const FRAMEWORK_NAMES: &[&str] = &[
    "todo_reminder",
    "todo_completion_reminder",
    "summary",
    "loop_warning",
    "view_image_context",
    "memory",
];

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Removes `<current_uploads>…</current_uploads>` blocks.
pub fn strip_uploads_block(text: &str) -> String {
    let mut out = text.to_string();
    while let Some(start) = out.find("<current_uploads>") {
        match out[start..].find("</current_uploads>") {
            Some(rel) => {
                let end = start + rel + "</current_uploads>".len();
                out.replace_range(start..end, "");
            }
            None => {
                out.truncate(start);
                break;
            }
        }
    }
    out.trim().to_string()
}

fn is_user_message(m: &Message) -> bool {
    if m.kind != MessageKind::Human {
        return false;
    }
    if m.name
        .as_deref()
        .is_some_and(|n| FRAMEWORK_NAMES.contains(&n))
    {
        return false;
    }
    if m.id
        .as_deref()
        .is_some_and(|id| id.ends_with("__memory") || id.starts_with("view-image-context:"))
    {
        return false;
    }
    let hidden = m
        .additional_kwargs
        .get("hide_from_ui")
        .and_then(Value::as_bool)
        == Some(true);
    let card_reply = m.additional_kwargs.get("human_input_response").is_some();
    !hidden || card_reply
}

fn is_final_answer(m: &Message) -> bool {
    m.kind.is_ai()
        && m.tool_calls.is_empty()
        && m.invalid_tool_calls.is_empty()
        && m.additional_kwargs
            .get("deerflow_error_fallback")
            .and_then(Value::as_bool)
            != Some(true)
}

/// The user messages (their own text) and final AI answers of `messages`, trimmed.
pub fn filter_conversation(messages: &[Message]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    for m in messages {
        if is_user_message(m) {
            let raw = match m.additional_kwargs.get("original_user_content") {
                Some(Value::String(s)) => s.clone(),
                _ => m.text(),
            };
            let text = strip_uploads_block(&raw);
            if !text.is_empty() {
                let mut h = Message::human(truncate(&text, MAX_CHARS_PER_MESSAGE));
                h.id = m.id.clone();
                out.push(h);
            }
        } else if is_final_answer(m) {
            let text = m.text();
            let text = text.trim();
            if !text.is_empty() {
                let mut a = Message::ai(truncate(text, MAX_CHARS_PER_MESSAGE));
                a.id = m.id.clone();
                out.push(a);
            }
        }
    }
    if out.len() > MAX_MESSAGES {
        out.drain(..out.len() - MAX_MESSAGES);
    }
    out
}

/// `User: …` / `Assistant: …` lines.
pub fn transcript(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| {
            let who = if m.kind == MessageKind::Human {
                "User"
            } else {
                "Assistant"
            };
            format!("{who}: {}", m.text())
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_state::ToolCall;
    use serde_json::json;

    #[test]
    fn keeps_user_text_and_final_answers() {
        let mut upload =
            Message::human("<current_uploads>\nfiles\n</current_uploads>\n\nsummarise r.pdf");
        upload
            .additional_kwargs
            .insert("original_user_content".into(), json!("summarise r.pdf"));
        let mut reminder =
            Message::human("<system_reminder>x</system_reminder>").with_name("todo_reminder");
        reminder
            .additional_kwargs
            .insert("hide_from_ui".into(), json!(true));
        let mut fallback = Message::ai("provider down");
        fallback
            .additional_kwargs
            .insert("deerflow_error_fallback".into(), json!(true));
        let out = filter_conversation(&[
            upload,
            reminder,
            Message::ai("").with_tool_calls(vec![ToolCall::new("read_file", json!({}), "c")]),
            Message::tool("contents", "c", None),
            Message::ai("It is about X."),
            fallback,
        ]);
        assert_eq!(
            transcript(&out),
            "User: summarise r.pdf\n\nAssistant: It is about X."
        );
        assert_eq!(
            strip_uploads_block("a<current_uploads>x</current_uploads>b"),
            "ab"
        );
    }
}
