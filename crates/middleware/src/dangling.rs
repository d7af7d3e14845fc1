//! `DanglingToolCallMiddleware` (`wrap_model_call`, request only, never persisted): repairs
//! the history the provider sees so every tool call of an AI message is answered by a
//! ToolMessage right after it — an interrupted call gets a placeholder error result, an
//! orphan tool result (its call is gone) is dropped, empty call ids get synthetic ones and
//! malformed tool names are made valid.

use crate::{
    Hook, Middleware, MiddlewareError, ModelCall, ModelRequest, ModelResponse, RunContext,
};
use async_trait::async_trait;
use fawn_state::{Message, MessageKind, ThreadState};
use std::collections::{HashMap, HashSet};

/// The text of the placeholder answering a call that never returned.
pub const INTERRUPTED_TOOL_CALL_TEXT: &str =
    "[Tool call was interrupted and did not return a result.]";
/// The placeholder answering a call whose arguments could not be parsed.
pub const INVALID_ARGS_TOOL_CALL_TEXT: &str = "[Tool call was not executed because its arguments were invalid JSON. Call the tool again with valid arguments.]";
/// The placeholder for a `write_file` call whose arguments could not be parsed: usually the
/// model ran out of output tokens in the middle of a long `content`.
pub const INVALID_WRITE_FILE_TEXT: &str = "[write_file was not executed because its arguments were invalid or cut off (often a `content` too long for one response). Nothing was written. Write the file in smaller parts: create it with the first part, then call write_file with append=true for each following part.]";

pub const UNKNOWN_TOOL_NAME: &str = "unknown_tool";

#[derive(Debug, Default)]
pub struct DanglingToolCallMiddleware;

impl DanglingToolCallMiddleware {
    pub fn new() -> Self {
        DanglingToolCallMiddleware
    }

    /// The repaired message list.
    pub fn repair(messages: Vec<Message>) -> Vec<Message> {
        let mut messages = messages;
        // 1. Ids and names: every call gets a non-empty id and a valid name.
        for (mi, m) in messages.iter_mut().enumerate() {
            if !m.kind.is_ai() {
                continue;
            }
            for (pos, tc) in m.tool_calls.iter_mut().enumerate() {
                if tc.id.as_deref().is_none_or(str::is_empty) {
                    tc.id = Some(format!("deerflow_synthetic_tool_call_{mi}_tc_{pos}"));
                }
                tc.name = sanitize_tool_name(&tc.name);
            }
            for (pos, tc) in m.invalid_tool_calls.iter_mut().enumerate() {
                if tc.id.as_deref().is_none_or(str::is_empty) {
                    tc.id = Some(format!("deerflow_synthetic_tool_call_{mi}_itc_{pos}"));
                }
                tc.name = Some(sanitize_tool_name(tc.name.as_deref().unwrap_or_default()));
            }
        }
        // 2. Where each tool result is (first one per call id wins).
        let mut results: HashMap<String, usize> = HashMap::new();
        for (i, m) in messages.iter().enumerate() {
            if m.kind == MessageKind::Tool
                && let Some(id) = &m.tool_call_id
            {
                results.entry(id.clone()).or_insert(i);
            }
        }
        // 3. Rebuild: each AI message is followed by the answers to its calls, in call
        //    order; tool results that answer no preceding call are dropped.
        let mut used: HashSet<usize> = HashSet::new();
        let mut out = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            match m.kind {
                MessageKind::Tool => {
                    // Kept only when pulled in after its AI message (below).
                    continue;
                }
                _ if m.kind.is_ai() => {
                    out.push(m.clone());
                    let valid = m
                        .tool_calls
                        .iter()
                        .map(|tc| (tc.id.clone().unwrap_or_default(), tc.name.clone(), None));
                    let invalid = m.invalid_tool_calls.iter().map(|tc| {
                        (
                            tc.id.clone().unwrap_or_default(),
                            tc.name.clone().unwrap_or_default(),
                            Some(()),
                        )
                    });
                    for (id, name, is_invalid) in valid.chain(invalid) {
                        match results.get(&id) {
                            Some(&ri) if ri > i && !used.contains(&ri) => {
                                used.insert(ri);
                                out.push(messages[ri].clone());
                            }
                            _ => {
                                let text = match (is_invalid, name.as_str()) {
                                    (Some(()), "write_file") => INVALID_WRITE_FILE_TEXT,
                                    (Some(()), _) => INVALID_ARGS_TOOL_CALL_TEXT,
                                    (None, _) => INTERRUPTED_TOOL_CALL_TEXT,
                                };
                                out.push(
                                    Message::tool(text, id.clone(), Some(name.clone()))
                                        .with_status_error(),
                                );
                            }
                        }
                    }
                }
                _ => out.push(m.clone()),
            }
        }
        out
    }
}

/// Provider tool names: `[A-Za-z0-9_-]{1,64}`; anything else is replaced by `_`, an empty
/// name becomes [`UNKNOWN_TOOL_NAME`].
pub fn sanitize_tool_name(name: &str) -> String {
    let cleaned: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if cleaned.is_empty() || cleaned.chars().all(|c| c == '_') {
        UNKNOWN_TOOL_NAME.to_string()
    } else {
        cleaned
    }
}

#[async_trait]
impl Middleware for DanglingToolCallMiddleware {
    fn name(&self) -> &str {
        "DanglingToolCallMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::WrapModelCall]
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        _state: &ThreadState,
        _ctx: &RunContext,
        next: &dyn ModelCall,
    ) -> Result<ModelResponse, MiddlewareError> {
        request.messages = Self::repair(std::mem::take(&mut request.messages));
        next.call(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_state::{InvalidToolCall, ToolCall};
    use serde_json::json;

    fn ids(ms: &[Message]) -> Vec<String> {
        ms.iter()
            .map(|m| match m.kind {
                MessageKind::Tool => format!("tool:{}", m.tool_call_id.clone().unwrap_or_default()),
                _ => m.kind.as_str().to_string(),
            })
            .collect()
    }

    #[test]
    fn placeholder_after_unanswered_call() {
        let ai = Message::ai("").with_tool_calls(vec![
            ToolCall::new("ls", json!({}), "a"),
            ToolCall::new("ls", json!({}), "b"),
        ]);
        let out = DanglingToolCallMiddleware::repair(vec![
            Message::human("hi"),
            ai,
            Message::tool("ok", "a", Some("ls".into())),
            Message::human("again"),
            Message::tool("orphan", "zzz", None),
        ]);
        assert_eq!(ids(&out), ["human", "ai", "tool:a", "tool:b", "human"]);
        assert_eq!(out[3].text(), INTERRUPTED_TOOL_CALL_TEXT);
        assert_eq!(out[3].status.as_deref(), Some("error"));
    }

    #[test]
    fn synthetic_ids_names_and_invalid_calls() {
        let mut ai = Message::ai("").with_tool_calls(vec![ToolCall {
            name: "".into(),
            args: Default::default(),
            id: None,
            extra: Default::default(),
        }]);
        ai.invalid_tool_calls.push(InvalidToolCall {
            name: Some("write_file".into()),
            args: Some("{\"content\": \"trunc".into()),
            id: Some("w".into()),
            error: None,
            extra: Default::default(),
        });
        let out = DanglingToolCallMiddleware::repair(vec![Message::human("x"), ai]);
        assert_eq!(out[1].tool_calls[0].name, UNKNOWN_TOOL_NAME);
        assert_eq!(
            out[1].tool_calls[0].id.as_deref(),
            Some("deerflow_synthetic_tool_call_1_tc_0")
        );
        assert_eq!(out[2].text(), INTERRUPTED_TOOL_CALL_TEXT);
        assert_eq!(out[3].text(), INVALID_WRITE_FILE_TEXT);
        assert_eq!(sanitize_tool_name("web search!"), "web_search_");
    }

    #[test]
    fn result_before_call_is_not_reused() {
        let out = DanglingToolCallMiddleware::repair(vec![
            Message::tool("early", "a", None),
            Message::ai("").with_tool_calls(vec![ToolCall::new("ls", json!({}), "a")]),
        ]);
        assert_eq!(ids(&out), ["ai", "tool:a"]);
        assert_eq!(out[1].text(), INTERRUPTED_TOOL_CALL_TEXT);
    }
}
