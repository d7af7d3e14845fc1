//! `DanglingToolCallMiddleware` (`wrap_model_call`, request only, never persisted): repairs
//! the history the provider sees so every tool call of an AI message is answered by a
//! ToolMessage right after it — an interrupted call gets a placeholder error result, an
//! orphan tool result (its call is gone) is dropped, empty call ids get synthetic ones and
//! malformed tool names are made valid.

use crate::{
    Hook, Middleware, MiddlewareError, ModelCall, ModelRequest, ModelResponse, RunContext,
};
use async_trait::async_trait;
use fawn_state::{Message, MessageKind, Messages, ThreadState};
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

    /// Whether [`Self::repair`] would change `messages`. Reads the list without copying it
    /// (the common case: a well-formed history goes to the model as it is).
    pub fn needs_repair(messages: &Messages) -> bool {
        // Tool results seen so far: a second result for the same call id is never used.
        let mut results: HashSet<&str> = HashSet::new();
        // The call ids of the last AI message, to be answered in order right after it.
        let mut expected: Vec<&str> = Vec::new();
        let mut answered = 0;
        for m in messages {
            if answered < expected.len() {
                let id = expected[answered];
                if m.kind != MessageKind::Tool
                    || m.tool_call_id.as_deref() != Some(id)
                    || !results.insert(id)
                {
                    return true;
                }
                answered += 1;
                continue;
            }
            if m.kind == MessageKind::Tool {
                // Not right after its call: moved or dropped by the repair.
                return true;
            }
            if !m.kind.is_ai() {
                continue;
            }
            expected.clear();
            answered = 0;
            for tc in &m.tool_calls {
                match tc.id.as_deref() {
                    Some(id) if !id.is_empty() && is_valid_tool_name(&tc.name) => expected.push(id),
                    _ => return true,
                }
            }
            for tc in &m.invalid_tool_calls {
                match (tc.id.as_deref(), tc.name.as_deref()) {
                    (Some(id), Some(name)) if !id.is_empty() && is_valid_tool_name(name) => {
                        expected.push(id)
                    }
                    _ => return true,
                }
            }
        }
        answered < expected.len()
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

/// True when [`sanitize_tool_name`] leaves `name` as it is.
fn is_valid_tool_name(name: &str) -> bool {
    let valid = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(valid)
        && !name.bytes().all(|b| b == b'_')
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
        if Self::needs_repair(&request.messages) {
            let messages = std::mem::take(&mut request.messages).into_vec();
            request.messages = Self::repair(messages).into();
        }
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
    fn well_formed_history_needs_no_repair() {
        let history: Messages = vec![
            Message::human("hi"),
            Message::ai("").with_tool_calls(vec![
                ToolCall::new("ls", json!({}), "a"),
                ToolCall::new("read_file", json!({}), "b"),
            ]),
            Message::tool("ok", "a", Some("ls".into())),
            Message::tool("ok", "b", Some("read_file".into())),
            Message::ai("done"),
        ]
        .into();
        assert!(!DanglingToolCallMiddleware::needs_repair(&history));
        assert_eq!(
            DanglingToolCallMiddleware::repair(history.to_vec()),
            history
        );
        let mut dangling = history.clone();
        dangling.push(Message::ai("").with_tool_calls(vec![ToolCall::new("ls", json!({}), "c")]));
        assert!(DanglingToolCallMiddleware::needs_repair(&dangling));
    }

    fn arb_message() -> impl proptest::strategy::Strategy<Value = Message> {
        use proptest::prelude::*;
        let id = prop_oneof![Just(""), Just("a"), Just("b"), Just("c")];
        let name = prop_oneof![Just("ls"), Just(""), Just("web search"), Just("__")];
        let call = (id.clone(), name.clone()).prop_map(|(id, name)| ToolCall {
            name: name.into(),
            args: Default::default(),
            id: (!id.is_empty()).then(|| id.to_string()),
            extra: Default::default(),
        });
        let invalid =
            (id.clone(), proptest::option::of(name)).prop_map(|(id, name)| InvalidToolCall {
                name: name.map(str::to_string),
                args: None,
                id: Some(id.to_string()),
                error: None,
                extra: Default::default(),
            });
        prop_oneof![
            Just(Message::human("h")),
            Just(Message::system("s")),
            (
                proptest::collection::vec(call, 0..3),
                proptest::collection::vec(invalid, 0..2)
            )
                .prop_map(|(calls, invalid)| {
                    let mut m = Message::ai("").with_tool_calls(calls);
                    m.invalid_tool_calls = invalid;
                    m
                }),
            id.prop_map(|id| Message::tool("r", id, None)),
        ]
    }

    proptest::proptest! {
        /// `needs_repair` is false exactly when the repair would change nothing.
        #[test]
        fn needs_repair_agrees_with_repair(
            history in proptest::collection::vec(arb_message(), 0..12)
        ) {
            let list: Messages = history.clone().into();
            let changed = DanglingToolCallMiddleware::repair(history.clone()) != history;
            proptest::prop_assert_eq!(DanglingToolCallMiddleware::needs_repair(&list), changed);
        }
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
