//! An in-process scripted [`ChatModel`] for tests and benchmarks: answers from a script,
//! streams like a real provider (text split into word chunks, tool-call arguments split into
//! fragments, usage on the last chunk) and records every request it received.
//!
//! For tests that must exercise the real HTTP path, use the OpenAI-compatible mock server in
//! `fawn-testkit` instead.

use crate::{ChatModel, ChatRequest, ChunkStream, LlmError, ModelInfo};
use async_trait::async_trait;
use fawn_state::{Message, ToolCallChunk, UsageMetadata};
use futures::StreamExt;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Mutex;

/// One scripted answer.
#[derive(Clone, Debug, PartialEq)]
pub enum ScriptedTurn {
    /// A plain text answer.
    Text(String),
    /// Tool calls `(name, args, call_id)`, optionally with some text before them.
    ToolCalls {
        text: String,
        calls: Vec<(String, Value, String)>,
    },
    /// Reasoning then text; reasoning arrives as `additional_kwargs.reasoning_content`.
    Reasoning { reasoning: String, text: String },
    /// Fail the call before any chunk.
    Error(LlmError),
}

impl ScriptedTurn {
    pub fn text(s: impl Into<String>) -> Self {
        ScriptedTurn::Text(s.into())
    }

    pub fn tool_call(name: impl Into<String>, args: Value, id: impl Into<String>) -> Self {
        ScriptedTurn::ToolCalls {
            text: String::new(),
            calls: vec![(name.into(), args, id.into())],
        }
    }
}

/// A model that answers from a queue of [`ScriptedTurn`]s. When the queue is empty it answers
/// with `fallback` (default: `"done"`), so a script can never hang a run.
pub struct ScriptedModel {
    info: ModelInfo,
    turns: Mutex<VecDeque<ScriptedTurn>>,
    fallback: Option<ScriptedTurn>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("info", &self.info)
            .finish()
    }
}

impl ScriptedModel {
    pub fn new(turns: impl IntoIterator<Item = ScriptedTurn>) -> Self {
        ScriptedModel {
            info: ModelInfo {
                name: "scripted".to_string(),
                model: "scripted".to_string(),
                provider: "mock".to_string(),
                supports_thinking: true,
                supports_reasoning_effort: true,
                supports_vision: true,
                ..Default::default()
            },
            turns: Mutex::new(turns.into_iter().collect()),
            fallback: Some(ScriptedTurn::Text("done".to_string())),
            requests: Mutex::new(Vec::new()),
        }
    }

    pub fn with_info(mut self, info: ModelInfo) -> Self {
        self.info = info;
        self
    }

    /// What to answer once the script is exhausted; `None` makes an exhausted script an error.
    pub fn with_fallback(mut self, fallback: Option<ScriptedTurn>) -> Self {
        self.fallback = fallback;
        self
    }

    /// Appends turns to the script.
    pub fn push(&self, turn: ScriptedTurn) {
        lock(&self.turns).push_back(turn);
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<ChatRequest> {
        lock(&self.requests).clone()
    }

    fn next_turn(&self) -> Result<ScriptedTurn, LlmError> {
        match lock(&self.turns).pop_front() {
            Some(t) => Ok(t),
            None => self.fallback.clone().ok_or_else(|| LlmError::BadRequest {
                status: 400,
                message: "scripted model has no more turns".to_string(),
            }),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Splits text into word-sized chunks (each keeps its trailing space).
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for ch in text.chars() {
        cur.push(ch);
        if ch == ' ' {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The chunks a provider would stream for `turn`.
pub fn turn_chunks(turn: &ScriptedTurn, model_name: &str) -> Vec<Message> {
    let mut chunks = Vec::new();
    let text = match turn {
        ScriptedTurn::Text(t) => t.clone(),
        ScriptedTurn::ToolCalls { text, .. } => text.clone(),
        ScriptedTurn::Reasoning { reasoning, text } => {
            for w in words(reasoning) {
                let mut c = Message::ai_chunk("");
                c.additional_kwargs
                    .insert("reasoning_content".to_string(), Value::String(w));
                chunks.push(c);
            }
            text.clone()
        }
        ScriptedTurn::Error(_) => String::new(),
    };
    for w in words(&text) {
        chunks.push(Message::ai_chunk(w));
    }
    if let ScriptedTurn::ToolCalls { calls, .. } = turn {
        for (i, (name, args, id)) in calls.iter().enumerate() {
            let raw = args.to_string();
            let mid = raw.len() / 2;
            let split = (0..=mid)
                .rev()
                .find(|i| raw.is_char_boundary(*i))
                .unwrap_or(0);
            let (a, b) = raw.split_at(split);
            let mut first = Message::ai_chunk("");
            first.tool_call_chunks.push(ToolCallChunk {
                name: Some(name.clone()),
                args: Some(a.to_string()),
                id: Some(id.clone()),
                index: Some(i as i64),
                ..Default::default()
            });
            chunks.push(first);
            let mut second = Message::ai_chunk("");
            second.tool_call_chunks.push(ToolCallChunk {
                args: Some(b.to_string()),
                index: Some(i as i64),
                ..Default::default()
            });
            chunks.push(second);
        }
    }
    let mut last = Message::ai_chunk("");
    let finish = if matches!(turn, ScriptedTurn::ToolCalls { calls, .. } if !calls.is_empty()) {
        "tool_calls"
    } else {
        "stop"
    };
    last.response_metadata.insert(
        "finish_reason".to_string(),
        Value::String(finish.to_string()),
    );
    last.response_metadata.insert(
        "model_name".to_string(),
        Value::String(model_name.to_string()),
    );
    last.usage_metadata = Some(UsageMetadata::new(10, 5));
    last.chunk_position = Some("last".to_string());
    chunks.push(last);
    chunks
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChunkStream, LlmError> {
        lock(&self.requests).push(request);
        let turn = self.next_turn()?;
        if let ScriptedTurn::Error(e) = turn {
            return Err(e);
        }
        let chunks = turn_chunks(&turn, &self.info.model);
        Ok(futures::stream::iter(chunks.into_iter().map(Ok)).boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn invoke_folds_text_and_tool_calls() {
        let m = ScriptedModel::new([
            ScriptedTurn::text("Hello there world"),
            ScriptedTurn::tool_call("get_weather", json!({"city": "Paris"}), "call_1"),
        ]);
        let a = m.invoke(ChatRequest::default()).await.unwrap();
        assert_eq!(a.text(), "Hello there world");
        let b = m.invoke(ChatRequest::default()).await.unwrap();
        assert_eq!(b.tool_calls[0].args["city"], "Paris");
        assert_eq!(b.response_metadata["finish_reason"], "tool_calls");
        assert_eq!(m.requests().len(), 2);
        // Exhausted script falls back.
        assert_eq!(
            m.invoke(ChatRequest::default()).await.unwrap().text(),
            "done"
        );
    }
}
