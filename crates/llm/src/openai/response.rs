//! Turning chat-completions chunks (and whole responses) into `AIMessageChunk`s.

use super::request::ReasoningSource;
use super::wire::{ChatCompletionChunk, WireDelta, WireUsage};
use crate::LlmError;
use fawn_state::{Content, Message, ToolCallChunk, UsageMetadata};
use serde_json::{Map, Value, json};

/// Converts one response's chunks; remembers what must be reported at the end.
#[derive(Debug)]
pub(crate) struct Converter {
    /// Shared by every chunk of the response.
    pub message_id: String,
    pub provider: String,
    pub source: ReasoningSource,
    saw_finish: bool,
    usage: Option<UsageMetadata>,
}

/// The text of a reasoning value: a string, or the `text` parts of a structured list.
fn reasoning_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().filter_map(reasoning_text).collect();
            (!parts.is_empty()).then(|| parts.concat())
        }
        Value::Object(o) => ["text", "content", "reasoning"]
            .iter()
            .find_map(|k| o.get(*k).and_then(reasoning_text)),
        _ => None,
    }
}

fn details_usage(details: &Option<Value>, map: &[(&str, &str)]) -> Option<Value> {
    let d = details.as_ref()?.as_object()?;
    let mut out = Map::new();
    for (from, to) in map {
        if let Some(n) = d.get(*from).filter(|v| v.is_number()) {
            out.insert((*to).to_string(), n.clone());
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// OpenAI usage → LangChain `usage_metadata` (cached prompt tokens → `cache_read`, reasoning
/// tokens → `reasoning`).
pub(crate) fn usage_metadata(u: &WireUsage) -> UsageMetadata {
    let input = u.prompt_tokens.unwrap_or(0);
    let output = u.completion_tokens.unwrap_or(0);
    UsageMetadata {
        input_tokens: input,
        output_tokens: output,
        total_tokens: u.total_tokens.unwrap_or(input + output),
        input_token_details: details_usage(
            &u.prompt_tokens_details,
            &[("audio_tokens", "audio"), ("cached_tokens", "cache_read")],
        ),
        output_token_details: details_usage(
            &u.completion_tokens_details,
            &[("audio_tokens", "audio"), ("reasoning_tokens", "reasoning")],
        ),
        extra: Map::new(),
    }
}

fn is_empty(m: &Message) -> bool {
    m.content.is_empty()
        && m.additional_kwargs.is_empty()
        && m.response_metadata.is_empty()
        && m.tool_call_chunks.is_empty()
        && m.usage_metadata.is_none()
}

impl Converter {
    pub(crate) fn new(message_id: String, provider: &str, source: ReasoningSource) -> Converter {
        Converter {
            message_id,
            provider: provider.to_string(),
            source,
            saw_finish: false,
            usage: None,
        }
    }

    fn blank(&self) -> Message {
        Message::ai_chunk("").with_id(self.message_id.clone())
    }

    fn apply_delta(&self, m: &mut Message, delta: WireDelta) {
        match delta.content {
            Some(Value::String(s)) => m.content = Content::Text(s),
            Some(Value::Array(parts)) => {
                m.content = Content::Text(
                    parts
                        .iter()
                        .filter_map(|p| match p {
                            Value::String(s) => Some(s.as_str()),
                            Value::Object(o) => o.get("text").and_then(Value::as_str),
                            _ => None,
                        })
                        .collect(),
                )
            }
            _ => {}
        }
        let rc = delta.reasoning_content.as_ref().and_then(reasoning_text);
        let r = delta.reasoning.as_ref().and_then(reasoning_text);
        let rd = delta.reasoning_details.as_ref().and_then(reasoning_text);
        let reasoning = match self.source {
            ReasoningSource::Standard => rc.or(r).or(rd),
            ReasoningSource::Vllm => r.or(rc),
            ReasoningSource::MiniMax => rd.or(rc),
        };
        if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
            m.additional_kwargs
                .insert("reasoning_content".into(), Value::String(text));
        }
        if self.source == ReasoningSource::Vllm
            && let Some(raw) = delta.reasoning.filter(|v| !v.is_null())
        {
            m.additional_kwargs.insert("reasoning".into(), raw);
        }
        if let Some(refusal) = delta.refusal.filter(|v| !v.is_null()) {
            m.additional_kwargs.insert("refusal".into(), refusal);
        }
        let mut raw_calls = Vec::new();
        for (pos, tc) in delta.tool_calls.into_iter().enumerate() {
            let index = tc.index.unwrap_or(pos as i64);
            let (name, args) = match tc.function {
                Some(f) => (
                    f.name,
                    match f.arguments {
                        Some(Value::String(s)) => Some(s),
                        Some(Value::Null) | None => None,
                        Some(other) => Some(other.to_string()),
                    },
                ),
                None => (None, None),
            };
            if !tc.extra.is_empty() {
                let mut raw = Map::new();
                raw.insert("index".into(), Value::from(index));
                if let Some(id) = &tc.id {
                    raw.insert("id".into(), Value::String(id.clone()));
                }
                for (k, v) in &tc.extra {
                    if !v.is_null() {
                        raw.insert(k.clone(), v.clone());
                    }
                }
                raw_calls.push(Value::Object(raw));
            }
            m.tool_call_chunks.push(ToolCallChunk {
                name,
                args,
                id: tc.id,
                index: Some(index),
                extra: Map::new(),
            });
        }
        if !raw_calls.is_empty() {
            m.additional_kwargs
                .insert("tool_calls".into(), Value::Array(raw_calls));
        }
        for (k, v) in delta.extra {
            if !v.is_null() && !m.additional_kwargs.contains_key(&k) {
                m.additional_kwargs.insert(k, v);
            }
        }
    }

    fn finish_metadata(&self, m: &mut Message, reason: String, chunk: &ChatCompletionChunk) {
        let md = &mut m.response_metadata;
        md.insert("finish_reason".into(), Value::String(reason));
        if let Some(model) = &chunk.model {
            md.insert("model_name".into(), Value::String(model.clone()));
        }
        if let Some(fp) = &chunk.system_fingerprint {
            md.insert("system_fingerprint".into(), Value::String(fp.clone()));
        }
        if let Some(tier) = &chunk.service_tier {
            md.insert("service_tier".into(), Value::String(tier.clone()));
        }
        md.insert(
            "model_provider".into(),
            Value::String(self.provider.clone()),
        );
    }

    /// One streamed chunk → at most one message chunk (empty deltas are skipped). Usage is
    /// held back and reported once, on the last chunk, so providers that repeat cumulative
    /// usage on every chunk are not counted twice.
    pub(crate) fn chunk(
        &mut self,
        mut chunk: ChatCompletionChunk,
    ) -> Result<Option<Message>, LlmError> {
        if let Some(err) = chunk.error.as_ref().filter(|e| e.is_object()) {
            // Gateways (OpenRouter, LiteLLM, …) report failures mid-stream as a data line
            // carrying an `error` object, sometimes with an HTTP-like numeric code.
            let status = err
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .filter(|c| (400..600).contains(c))
                .unwrap_or(500);
            let body = json!({ "error": err }).to_string();
            return Err(crate::error::classify_http(status, None, &body));
        }
        if let Some(u) = &chunk.usage {
            self.usage = Some(usage_metadata(u));
        }
        let Some(pos) = chunk.choices.iter().position(|c| c.index.unwrap_or(0) == 0) else {
            return Ok(None);
        };
        let choice = chunk.choices.swap_remove(pos);
        let mut m = self.blank();
        if let Some(delta) = choice.delta.or(choice.message) {
            self.apply_delta(&mut m, delta);
        }
        if let Some(reason) = choice.finish_reason {
            self.saw_finish = true;
            self.finish_metadata(&mut m, reason, &chunk);
        }
        if let Some(lp) = choice.logprobs.filter(|v| !v.is_null()) {
            m.response_metadata.insert("logprobs".into(), lp);
        }
        Ok((!is_empty(&m)).then_some(m))
    }

    /// The closing chunk (`chunk_position: "last"`, with the usage), or an error when the
    /// stream ended before the model said it was done.
    pub(crate) fn finish(&mut self) -> Result<Message, LlmError> {
        if !self.saw_finish {
            return Err(LlmError::Connection {
                message: "stream ended before the model finished (no finish_reason, no [DONE])"
                    .into(),
            });
        }
        let mut m = self.blank();
        m.usage_metadata = self.usage.take();
        m.chunk_position = Some("last".into());
        Ok(m)
    }

    /// A whole (non-streamed) `chat.completion` as one chunk.
    pub(crate) fn full(&mut self, mut resp: ChatCompletionChunk) -> Result<Message, LlmError> {
        let pos = resp
            .choices
            .iter()
            .position(|c| c.index.unwrap_or(0) == 0)
            .ok_or_else(|| LlmError::Malformed {
                message: "response has no choices".into(),
            })?;
        let choice = resp.choices.swap_remove(pos);
        let mut m = self.blank();
        if let Some(msg) = choice.message.or(choice.delta) {
            self.apply_delta(&mut m, msg);
        }
        let reason = choice.finish_reason.unwrap_or_else(|| "stop".into());
        self.finish_metadata(&mut m, reason, &resp);
        if let Some(u) = &resp.usage {
            m.usage_metadata = Some(usage_metadata(u));
        }
        if let Some(id) = &resp.id {
            m.response_metadata.insert("id".into(), json!(id));
        }
        m.chunk_position = Some("last".into());
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_state::merge_chunks;

    fn chunk(v: Value) -> ChatCompletionChunk {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn folds_text_reasoning_tools_and_usage() {
        let mut c = Converter::new("lc_run--1".into(), "deepseek", ReasoningSource::Standard);
        let raw = [
            json!({"model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"index": 0, "delta": {"reasoning_content": "thin"}}]}),
            json!({"choices": [{"index": 0, "delta": {"reasoning_content": "king"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Hi", "vendor_x": 1}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}}]}),
            json!({"model": "m-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": null}),
            json!({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                    "prompt_tokens_details": {"cached_tokens": 4}, "completion_tokens_details": {"reasoning_tokens": 2}}}),
        ];
        let mut out: Vec<Message> = raw
            .into_iter()
            .filter_map(|r| c.chunk(chunk(r)).unwrap())
            .collect();
        out.push(c.finish().unwrap());
        assert!(out.iter().all(|m| m.id.as_deref() == Some("lc_run--1")));
        let m = merge_chunks(&out);
        assert_eq!(m.text(), "Hi");
        assert_eq!(m.additional_kwargs["reasoning_content"], "thinking");
        assert_eq!(m.additional_kwargs["vendor_x"], 1);
        assert_eq!(m.tool_calls[0].name, "f");
        assert_eq!(m.tool_calls[0].args["a"], 1);
        assert_eq!(m.response_metadata["finish_reason"], "tool_calls");
        assert_eq!(m.response_metadata["model_name"], "m-1");
        assert_eq!(m.response_metadata["model_provider"], "deepseek");
        let u = m.usage_metadata.unwrap();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.total_tokens),
            (10, 5, 15)
        );
        assert_eq!(u.input_token_details.unwrap()["cache_read"], 4);
        assert_eq!(u.output_token_details.unwrap()["reasoning"], 2);
    }

    #[test]
    fn error_objects_in_the_stream_are_classified() {
        let mut c = Converter::new("x".into(), "openai", ReasoningSource::Standard);
        let e = c
            .chunk(chunk(
                json!({"error": {"code": 429, "message": "Rate limit exceeded"}}),
            ))
            .unwrap_err();
        assert!(matches!(e, LlmError::RateLimit { .. }), "{e:?}");
        let e = c
            .chunk(chunk(
                json!({"error": {"message": "upstream died"}, "choices": []}),
            ))
            .unwrap_err();
        assert!(matches!(e, LlmError::Server { status: 500, .. }), "{e:?}");
    }

    #[test]
    fn missing_finish_is_a_connection_error() {
        let mut c = Converter::new("x".into(), "openai", ReasoningSource::Standard);
        assert!(
            c.chunk(chunk(json!({"choices": [{"delta": {"content": "a"}}]})))
                .unwrap()
                .is_some()
        );
        assert!(matches!(c.finish(), Err(LlmError::Connection { .. })));
    }

    #[test]
    fn vllm_and_minimax_reasoning_sources() {
        let mut c = Converter::new("x".into(), "openai", ReasoningSource::Vllm);
        let m = c
            .chunk(chunk(
                json!({"choices": [{"delta": {"reasoning": "r1", "reasoning_content": "other"}}]}),
            ))
            .unwrap()
            .unwrap();
        assert_eq!(m.additional_kwargs["reasoning_content"], "r1");
        assert_eq!(m.additional_kwargs["reasoning"], "r1");
        let mut c = Converter::new("x".into(), "openai", ReasoningSource::MiniMax);
        let m = c
            .chunk(chunk(json!({"choices": [{"delta": {"reasoning_details": [{"type": "reasoning.text", "text": "md"}]}}]})))
            .unwrap()
            .unwrap();
        assert_eq!(m.additional_kwargs["reasoning_content"], "md");
    }
}
