//! The native Anthropic Messages provider (`langchain_anthropic:ChatAnthropic`), on reqwest +
//! `eventsource-stream`: system prompt split out, `tool_use`/`tool_result` blocks, thinking
//! blocks kept with their signature so they can be sent back, usage, `x-api-key` and
//! `anthropic-version` headers, the same error classification and retries as the
//! OpenAI-compatible provider.

use crate::content::{image_note, image_ref, is_image_block};
use crate::error::{HttpError, classify_http, classify_reqwest, classify_stream_error};
use crate::retry::{RetryObserver, with_retries};
use crate::roles::{self, Provider, Role, SystemPrompt};
use crate::settings::ModelSettings;
use crate::{ChatModel, ChatRequest, ChunkStream, LlmError, ModelInfo};
use async_trait::async_trait;
use eventsource_stream::Eventsource;
use fawn_state::{Content, Message, ToolCallChunk, UsageMetadata};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Default `max_tokens` (the Messages API requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// Parameters that are not Messages API fields and are dropped.
const NOT_SENT: &[&str] = &["reasoning_effort", "model", "messages", "stream", "system"];

fn bad(message: String) -> LlmError {
    LlmError::BadRequest {
        status: 400,
        message,
    }
}

/// The Messages endpoint for a configured base URL (`…/v1` or bare host both work).
pub fn messages_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1") {
        format!("{base}/messages")
    } else {
        format!("{base}/v1/messages")
    }
}

fn image_block(block: &Value, vision: bool) -> Value {
    if !vision {
        return image_note();
    }
    match image_ref(block) {
        Some(img) => match img.to_base64() {
            Some((media_type, data)) => json!({"type": "image", "source": {
                "type": "base64", "media_type": media_type, "data": data}}),
            None => json!({"type": "image", "source": {"type": "url", "url": img.to_url()}}),
        },
        None => image_note(),
    }
}

/// User-side blocks: text, images, documents and tool results pass; provider-private
/// blocks of other vendors are dropped.
fn user_blocks(content: &Content, vision: bool) -> Vec<Value> {
    match content {
        Content::Text(s) if s.is_empty() => Vec::new(),
        Content::Text(s) => vec![json!({"type": "text", "text": s})],
        Content::Blocks(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) if !s.is_empty() => Some(json!({"type": "text", "text": s})),
                Value::Object(o) => {
                    let ty = o.get("type").and_then(Value::as_str).unwrap_or("");
                    match ty {
                        "text" => {
                            let t = o.get("text").and_then(Value::as_str).unwrap_or("");
                            (!t.is_empty()).then(|| json!({"type": "text", "text": t}))
                        }
                        _ if is_image_block(b) => Some(image_block(b, vision)),
                        "document" | "tool_result" | "search_result" => Some(b.clone()),
                        _ => None,
                    }
                }
                _ => None,
            })
            .collect(),
    }
}

/// Assistant blocks: text and thinking (with signature) from the content, then `tool_use`
/// from the message's tool calls.
fn assistant_blocks(m: &Message) -> Vec<Value> {
    let mut out = Vec::new();
    match &m.content {
        Content::Text(s) if !s.is_empty() => out.push(json!({"type": "text", "text": s})),
        Content::Text(_) => {}
        Content::Blocks(blocks) => {
            for b in blocks {
                let ty = b.get("type").and_then(Value::as_str).unwrap_or("");
                match ty {
                    "text" => {
                        let t = b.get("text").and_then(Value::as_str).unwrap_or("");
                        if !t.is_empty() {
                            out.push(json!({"type": "text", "text": t}));
                        }
                    }
                    "thinking" => {
                        if let Some(sig) = b.get("signature").and_then(Value::as_str) {
                            out.push(json!({"type": "thinking",
                                "thinking": b.get("thinking").and_then(Value::as_str).unwrap_or(""),
                                "signature": sig}));
                        }
                    }
                    "redacted_thinking" => {
                        if let Some(data) = b.get("data") {
                            out.push(json!({"type": "redacted_thinking", "data": data}));
                        }
                    }
                    "tool_use" if m.tool_calls.is_empty() => {
                        let mut t = b.clone();
                        if let Some(o) = t.as_object_mut() {
                            o.remove("index");
                        }
                        out.push(t);
                    }
                    _ => {}
                }
            }
        }
    }
    for tc in &m.tool_calls {
        out.push(
            json!({"type": "tool_use", "id": tc.id.clone().unwrap_or_default(),
                        "name": tc.name, "input": Value::Object(tc.args.clone())}),
        );
    }
    out
}

fn tool_result_block(m: &Message, vision: bool, index: usize) -> Result<Value, LlmError> {
    let id = m.tool_call_id.clone().ok_or_else(|| {
        bad(format!(
            "messages[{index}]: tool message has no tool_call_id"
        ))
    })?;
    let content = match &m.content {
        Content::Text(s) => Value::String(s.clone()),
        other => Value::Array(user_blocks(other, vision)),
    };
    let mut b = json!({"type": "tool_result", "tool_use_id": id, "content": content});
    if m.status.as_deref() == Some("error") {
        b["is_error"] = Value::Bool(true);
    }
    Ok(b)
}

/// `(system, messages)` for the Messages API. Leading system messages form the system
/// prompt; later ones become user text (the API has no mid-conversation system role).
/// Consecutive turns of the same role are merged.
pub(crate) fn convert_messages<'a>(
    messages: impl IntoIterator<Item = &'a Message>,
    vision: bool,
) -> Result<(Option<String>, Vec<Value>), LlmError> {
    let mut system = SystemPrompt::default();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (i, m) in messages.into_iter().enumerate() {
        let Some(role) = roles::classify(m, i, Provider::Anthropic)? else {
            continue;
        };
        if system.take(m, role) {
            continue;
        }
        let (role, blocks) = match role {
            Role::System => ("user", user_blocks(&Content::Text(m.text()), vision)),
            Role::Assistant => ("assistant", assistant_blocks(m)),
            Role::Tool => ("user", vec![tool_result_block(m, vision, i)?]),
            Role::User | Role::Function | Role::Named(_) => {
                ("user", user_blocks(&m.content, vision))
            }
        };
        roles::push_turn(&mut turns, role, blocks);
    }
    let messages = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    Ok((system.text(), messages))
}

/// OpenAI-style `tool_choice` → Anthropic's.
fn tool_choice(v: &Value) -> Value {
    match v {
        Value::String(s) => match s.as_str() {
            "auto" => json!({"type": "auto"}),
            "none" => json!({"type": "none"}),
            "required" | "any" => json!({"type": "any"}),
            name => json!({"type": "tool", "name": name}),
        },
        Value::Object(o) => {
            if let Some(name) = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
            {
                json!({"type": "tool", "name": name})
            } else {
                v.clone()
            }
        }
        other => other.clone(),
    }
}

/// The request body, and whether text streams as plain strings (no tools, no thinking)
/// rather than indexed content blocks.
pub(crate) fn build_body(
    req: &ChatRequest,
    settings: &ModelSettings,
    stream: bool,
) -> Result<(Value, bool), LlmError> {
    let mut params = settings.resolve_params(
        req.thinking_enabled,
        req.reasoning_effort.as_deref(),
        req.max_tokens,
        req.temperature,
    );
    for key in ["model_kwargs", "extra_body"] {
        match params.remove(key) {
            Some(Value::Object(o)) => params.extend(o),
            Some(Value::Null) | None => {}
            Some(other) => return Err(bad(format!("{key} must be an object, got {other}"))),
        }
    }
    params.extend(req.extra.clone());
    for k in NOT_SENT {
        params.remove(*k);
    }
    let thinking_on = params
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t != "disabled");
    if thinking_on {
        // The API only accepts the default temperature with extended thinking.
        params.remove("temperature");
        params.remove("top_k");
    }
    let (system, messages) = convert_messages(&req.messages, settings.supports_vision)?;
    let mut body = Map::new();
    body.insert("model".into(), Value::String(settings.model.clone()));
    if !params.contains_key("max_tokens") {
        body.insert("max_tokens".into(), Value::from(DEFAULT_MAX_TOKENS));
    }
    if let Some(s) = system {
        body.insert("system".into(), Value::String(s));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                let mut o = json!({"name": t.name, "input_schema": if t.parameters.is_null() {
                    json!({"type": "object", "properties": {}})
                } else {
                    Value::clone(&t.parameters)
                }});
                if !t.description.is_empty() {
                    o["description"] = Value::String(t.description.clone());
                }
                o
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let choice = req
        .tool_choice
        .clone()
        .or_else(|| params.remove("tool_choice"));
    params.remove("tool_choice");
    if let Some(c) = choice {
        body.insert("tool_choice".into(), tool_choice(&c));
    }
    body.insert("stream".into(), Value::Bool(stream));
    body.extend(params);
    let as_text = req.tools.is_empty() && !thinking_on;
    Ok((Value::Object(body), as_text))
}

/// Folds Messages stream events into `AIMessageChunk`s.
#[derive(Debug)]
pub(crate) struct Converter {
    message_id: String,
    /// Plain string content (no tools, no thinking) instead of indexed blocks.
    as_text: bool,
    block_types: HashMap<i64, String>,
    /// The usage counts seen so far: `message_start`'s, each overwritten by the
    /// `message_delta`s that carry it (Anthropic documents those counts as cumulative).
    usage_counts: Map<String, Value>,
    model: Option<String>,
    usage: Option<UsageMetadata>,
    stopped: bool,
}

fn n(v: Option<&Value>) -> i64 {
    v.and_then(Value::as_i64).unwrap_or(0)
}

fn usage_metadata(input: Option<&Value>, output_tokens: i64) -> UsageMetadata {
    let cache_read = n(input.and_then(|u| u.get("cache_read_input_tokens")));
    let cache_creation = n(input.and_then(|u| u.get("cache_creation_input_tokens")));
    let input_tokens = n(input.and_then(|u| u.get("input_tokens"))) + cache_read + cache_creation;
    UsageMetadata {
        input_tokens,
        output_tokens,
        total_tokens: input_tokens + output_tokens,
        input_token_details: Some(
            json!({"cache_read": cache_read, "cache_creation": cache_creation}),
        ),
        output_token_details: None,
        extra: Map::new(),
    }
}

fn finish_reason(stop_reason: &str) -> &str {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        "refusal" => "content_filter",
        other => other,
    }
}

/// Classifies an `error` event or error body by its Anthropic error type.
fn stream_error(data: &Value) -> LlmError {
    let ty = data
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let status = match ty {
        "overloaded_error" => 529,
        "rate_limit_error" => 429,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "invalid_request_error" => 400,
        "billing_error" => 402,
        _ => 500,
    };
    classify_http(status, None, &data.to_string())
}

impl Converter {
    pub(crate) fn new(message_id: String, as_text: bool) -> Converter {
        Converter {
            message_id,
            as_text,
            block_types: HashMap::new(),
            usage_counts: Map::new(),
            model: None,
            usage: None,
            stopped: false,
        }
    }

    fn blank(&self) -> Message {
        Message::ai_chunk("").with_id(self.message_id.clone())
    }

    fn text_chunk(&self, index: i64, text: &str) -> Message {
        let mut m = self.blank();
        m.content = if self.as_text {
            Content::Text(text.to_string())
        } else {
            Content::Blocks(vec![json!({"type": "text", "text": text, "index": index})])
        };
        m
    }

    fn thinking_chunk(&self, index: i64, field: &str, value: &str) -> Message {
        let mut m = self.blank();
        if self.as_text {
            if field == "thinking" {
                m.additional_kwargs
                    .insert("reasoning_content".into(), Value::String(value.to_string()));
            }
        } else {
            let mut b = json!({"type": "thinking", "index": index});
            b[field] = Value::String(value.to_string());
            m.content = Content::Blocks(vec![b]);
        }
        m
    }

    /// One stream event → at most one chunk.
    pub(crate) fn event(&mut self, event: &str, data: &Value) -> Result<Option<Message>, LlmError> {
        let ty = data.get("type").and_then(Value::as_str).unwrap_or(event);
        let index = n(data.get("index"));
        match ty {
            "message_start" => {
                let msg = data.get("message");
                if let Some(Value::Object(u)) = msg.and_then(|m| m.get("usage")) {
                    self.usage_counts = u.clone();
                }
                self.model = msg
                    .and_then(|m| m.get("model"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                Ok(None)
            }
            "content_block_start" => {
                let block = data.get("content_block").cloned().unwrap_or(Value::Null);
                let mut bty = block
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.trim().is_empty());
                if bty == "tool_use" && name.is_none() {
                    // A call that names no tool can be neither run nor answered: drop it, and
                    // with it the arguments that stream into its block.
                    tracing::warn!(block = %block, "dropped a tool_use block without a tool name");
                    bty = "tool_use (no name)".to_string();
                }
                self.block_types.insert(index, bty.clone());
                match bty.as_str() {
                    "text" => {
                        let t = block.get("text").and_then(Value::as_str).unwrap_or("");
                        Ok((!t.is_empty()).then(|| self.text_chunk(index, t)))
                    }
                    "thinking" => {
                        let t = block.get("thinking").and_then(Value::as_str).unwrap_or("");
                        Ok((!t.is_empty()).then(|| self.thinking_chunk(index, "thinking", t)))
                    }
                    "redacted_thinking" if !self.as_text => {
                        let mut m = self.blank();
                        let mut b = block.clone();
                        b["index"] = Value::from(index);
                        m.content = Content::Blocks(vec![b]);
                        Ok(Some(m))
                    }
                    "tool_use" => {
                        let mut m = self.blank();
                        m.tool_call_chunks.push(ToolCallChunk {
                            name: name.map(str::to_string),
                            args: Some(String::new()),
                            id: block.get("id").and_then(Value::as_str).map(str::to_string),
                            index: Some(index),
                            extra: Map::new(),
                        });
                        Ok(Some(m))
                    }
                    _ => Ok(None),
                }
            }
            "content_block_delta" => {
                let delta = data.get("delta").cloned().unwrap_or(Value::Null);
                let dty = delta.get("type").and_then(Value::as_str).unwrap_or("");
                let s = |k: &str| {
                    delta
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                Ok(match dty {
                    "text_delta" => Some(self.text_chunk(index, &s("text"))),
                    "thinking_delta" => {
                        Some(self.thinking_chunk(index, "thinking", &s("thinking")))
                    }
                    "signature_delta" if !self.as_text => {
                        Some(self.thinking_chunk(index, "signature", &s("signature")))
                    }
                    // Only a client tool's input is a tool call: a server tool's
                    // (`server_tool_use`, run by Anthropic) or a dropped call's is not.
                    "input_json_delta"
                        if self.block_types.get(&index).map(String::as_str) == Some("tool_use") =>
                    {
                        let mut m = self.blank();
                        m.tool_call_chunks.push(ToolCallChunk {
                            name: None,
                            args: Some(s("partial_json")),
                            id: None,
                            index: Some(index),
                            extra: Map::new(),
                        });
                        Some(m)
                    }
                    _ => None,
                })
            }
            "message_delta" => {
                // Every count a delta carries replaces the one known so far: a server tool or
                // prompt caching can change the input figures after `message_start`.
                if let Some(Value::Object(u)) = data.get("usage") {
                    for (k, v) in u {
                        if !v.is_null() {
                            self.usage_counts.insert(k.clone(), v.clone());
                        }
                    }
                }
                let counts = Value::Object(self.usage_counts.clone());
                let output = n(counts.get("output_tokens"));
                self.usage = Some(usage_metadata(Some(&counts), output));
                let mut m = self.blank();
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    let md = &mut m.response_metadata;
                    md.insert("stop_reason".into(), json!(reason));
                    md.insert("finish_reason".into(), json!(finish_reason(reason)));
                    if let Some(seq) = data
                        .pointer("/delta/stop_sequence")
                        .filter(|v| !v.is_null())
                    {
                        md.insert("stop_sequence".into(), seq.clone());
                    }
                    if let Some(model) = &self.model {
                        md.insert("model_name".into(), json!(model));
                    }
                    md.insert("model_provider".into(), json!("anthropic"));
                    return Ok(Some(m));
                }
                Ok(None)
            }
            "message_stop" => {
                self.stopped = true;
                Ok(None)
            }
            "error" => Err(stream_error(data)),
            _ => Ok(None),
        }
    }

    /// The closing chunk with the usage, or an error if `message_stop` never came.
    pub(crate) fn finish(&mut self) -> Result<Message, LlmError> {
        if !self.stopped {
            return Err(LlmError::Connection {
                message: "stream ended before message_stop".into(),
            });
        }
        let mut m = self.blank();
        m.usage_metadata = self.usage.take();
        m.chunk_position = Some("last".into());
        Ok(m)
    }

    /// A whole (non-streamed) Messages response as one chunk.
    pub(crate) fn full(&mut self, resp: &Value) -> Result<Message, LlmError> {
        let blocks = resp
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| LlmError::Malformed {
                message: "response has no content list".into(),
            })?;
        let mut m = self.blank();
        let mut out_blocks = Vec::new();
        let mut text = String::new();
        for (i, b) in blocks.iter().enumerate() {
            let i = i as i64;
            match b.get("type").and_then(Value::as_str).unwrap_or("") {
                "text" => {
                    let t = b.get("text").and_then(Value::as_str).unwrap_or("");
                    text.push_str(t);
                    out_blocks.push(json!({"type": "text", "text": t, "index": i}));
                }
                "thinking" | "redacted_thinking" => {
                    if self.as_text {
                        if let Some(t) = b.get("thinking").and_then(Value::as_str) {
                            m.additional_kwargs
                                .insert("reasoning_content".into(), json!(t));
                        }
                    } else {
                        let mut b = b.clone();
                        b["index"] = Value::from(i);
                        out_blocks.push(b);
                    }
                }
                "tool_use" => {
                    let Some(name) = b
                        .get("name")
                        .and_then(Value::as_str)
                        .filter(|n| !n.trim().is_empty())
                    else {
                        tracing::warn!(block = %b, "dropped a tool_use block without a tool name");
                        continue;
                    };
                    m.tool_call_chunks.push(ToolCallChunk {
                        name: Some(name.to_string()),
                        args: Some(b.get("input").cloned().unwrap_or(json!({})).to_string()),
                        id: b.get("id").and_then(Value::as_str).map(str::to_string),
                        index: Some(i),
                        extra: Map::new(),
                    })
                }
                _ => {}
            }
        }
        m.content = if self.as_text {
            Content::Text(text)
        } else {
            Content::Blocks(out_blocks)
        };
        let reason = resp
            .get("stop_reason")
            .and_then(Value::as_str)
            .unwrap_or("end_turn");
        let md = &mut m.response_metadata;
        md.insert("stop_reason".into(), json!(reason));
        md.insert("finish_reason".into(), json!(finish_reason(reason)));
        if let Some(model) = resp.get("model").and_then(Value::as_str) {
            md.insert("model_name".into(), json!(model));
        }
        md.insert("model_provider".into(), json!("anthropic"));
        if let Some(id) = resp.get("id") {
            md.insert("id".into(), id.clone());
        }
        let usage = resp.get("usage");
        m.usage_metadata = Some(usage_metadata(
            usage,
            n(usage.and_then(|u| u.get("output_tokens"))),
        ));
        m.chunk_position = Some("last".into());
        Ok(m)
    }
}

/// A Claude model over the native Messages API.
pub struct Anthropic {
    info: ModelInfo,
    settings: ModelSettings,
    http: reqwest::Client,
    url: String,
    headers: reqwest::header::HeaderMap,
    observer: Option<RetryObserver>,
}

impl std::fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anthropic")
            .field("info", &self.info)
            .field("url", &self.url)
            .finish()
    }
}

type EventStream = BoxStream<'static, Result<eventsource_stream::Event, LlmError>>;

impl Anthropic {
    pub(crate) fn new(
        info: ModelInfo,
        settings: ModelSettings,
        betas: Option<String>,
        http: reqwest::Client,
    ) -> Result<Anthropic, String> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            let v = reqwest::header::HeaderValue::from_str(key)
                .map_err(|_| "api_key contains characters that cannot be sent in a header")?;
            headers.insert("x-api-key", v);
        }
        headers.insert(
            "anthropic-version",
            reqwest::header::HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if let Some(b) = betas {
            let v = reqwest::header::HeaderValue::from_str(&b)
                .map_err(|_| "betas contain characters that cannot be sent in a header")?;
            headers.insert("anthropic-beta", v);
        }
        for (k, v) in &settings.headers {
            headers.insert(k.clone(), v.clone());
        }
        let base = settings
            .base_url
            .clone()
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
        Ok(Anthropic {
            info,
            url: messages_url(&base),
            settings,
            http,
            headers,
            observer: None,
        })
    }

    /// Called before every retry.
    pub fn set_retry_observer(&mut self, observer: Option<RetryObserver>) {
        self.observer = observer;
    }

    pub fn retry_policy_mut(&mut self) -> &mut crate::retry::RetryPolicy {
        &mut self.settings.retry
    }

    /// The request body this model would send for `req`.
    pub fn request_body(&self, req: &ChatRequest) -> Result<Value, LlmError> {
        Ok(build_body(req, &self.settings, self.settings.streaming)?.0)
    }

    async fn send(&self, body: &Value) -> Result<reqwest::Response, LlmError> {
        let timeout = self.settings.timeout;
        let call = self
            .http
            .post(&self.url)
            .headers(crate::traced(self.headers.clone()))
            .json(body)
            .send();
        let resp = tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| LlmError::Timeout {
                message: format!("no response within {:.1}s", timeout.as_secs_f64()),
            })?
            .map_err(|e| classify_reqwest(&e))?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(HttpError::from_response(resp).await.classify())
        }
    }

    async fn attempt(
        &self,
        body: Arc<Value>,
        as_text: bool,
        message_id: String,
    ) -> Result<ChunkStream, LlmError> {
        let mut conv = Converter::new(message_id, as_text);
        let resp = self.send(&body).await?;
        if body.get("stream") != Some(&Value::Bool(true)) {
            let timeout = self.settings.timeout;
            let bytes = tokio::time::timeout(timeout, resp.bytes())
                .await
                .map_err(|_| LlmError::Timeout {
                    message: format!("no response body within {:.1}s", timeout.as_secs_f64()),
                })?
                .map_err(|e| classify_reqwest(&e))?;
            let v: Value = serde_json::from_slice(&bytes).map_err(|e| LlmError::Malformed {
                message: format!("invalid JSON from the provider: {e}"),
            })?;
            let msg = conv.full(&v)?;
            return Ok(futures::stream::iter([Ok(msg)]).boxed());
        }
        let events: EventStream = resp
            .bytes_stream()
            .eventsource()
            .map(|r| r.map_err(|e| classify_stream_error(&e)))
            .boxed();
        let mut state = StreamState {
            events,
            conv,
            first_timeout: self.settings.timeout,
            chunk_timeout: self.settings.stream_chunk_timeout,
            idle: Default::default(),
            started: false,
            done: false,
        };
        match state.next().await {
            Some(Ok(first)) => {
                let rest = futures::stream::unfold(state, |mut st| async move {
                    let item = st.next().await?;
                    Some((item, st))
                });
                Ok(futures::stream::once(async move { Ok(first) })
                    .chain(rest)
                    .boxed())
            }
            Some(Err(e)) => Err(e),
            None => Err(LlmError::Connection {
                message: "stream ended without any event".into(),
            }),
        }
    }
}

struct StreamState {
    events: EventStream,
    conv: Converter,
    first_timeout: Duration,
    chunk_timeout: Duration,
    idle: crate::idle::IdleTimer,
    started: bool,
    done: bool,
}

impl StreamState {
    async fn next(&mut self) -> Option<Result<Message, LlmError>> {
        if self.done {
            return None;
        }
        loop {
            let wait = if self.started {
                self.chunk_timeout
            } else {
                self.first_timeout
            };
            let item = match self.idle.within(wait, self.events.next()).await {
                Err(_) => Some(Err(LlmError::Timeout {
                    message: format!("no stream event within {:.1}s", wait.as_secs_f64()),
                })),
                Ok(None) => Some(self.conv.finish()),
                Ok(Some(Err(e))) => Some(Err(e)),
                Ok(Some(Ok(ev))) => {
                    self.started = true;
                    let data: Value = match serde_json::from_str(&ev.data) {
                        Ok(v) => v,
                        Err(e) => {
                            self.done = true;
                            return Some(Err(LlmError::Malformed {
                                message: format!("invalid JSON in '{}' event: {e}", ev.event),
                            }));
                        }
                    };
                    match self.conv.event(&ev.event, &data) {
                        Ok(Some(m)) => return Some(Ok(m)),
                        Ok(None) => continue,
                        Err(e) => Some(Err(e)),
                    }
                }
            };
            self.done = true;
            return item;
        }
    }
}

#[async_trait]
impl ChatModel for Anthropic {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChunkStream, LlmError> {
        let (body, as_text) = build_body(&request, &self.settings, self.settings.streaming)?;
        let body = Arc::new(body);
        let message_id = format!("lc_run--{}", uuid::Uuid::new_v4());
        with_retries(
            &self.info.name,
            &self.settings.retry,
            self.observer.as_ref(),
            || self.attempt(body.clone(), as_text, message_id.clone()),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_state::{ToolCall, merge_chunks};

    #[test]
    fn converts_conversation() {
        let mut ai = Message::ai(Content::Blocks(vec![
            json!({"type": "thinking", "thinking": "hm", "signature": "sig", "index": 0}),
            json!({"type": "text", "text": "calling", "index": 1}),
        ]))
        .with_tool_calls(vec![ToolCall::new("f", json!({"a": 1}), "toolu_1")]);
        ai.id = Some("x".into());
        let msgs = vec![
            Message::system("sys"),
            Message::human("hi"),
            ai,
            Message::tool("out", "toolu_1", None).with_status_error(),
            Message::system("<system-reminder>date</system-reminder>"),
            Message::human("more"),
        ];
        let (system, turns) = convert_messages(&msgs, false).unwrap();
        assert_eq!(system.as_deref(), Some("sys"));
        assert_eq!(turns.len(), 3);
        assert_eq!(
            turns[1]["content"],
            json!([
                {"type": "thinking", "thinking": "hm", "signature": "sig"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}
            ])
        );
        let user = &turns[2]["content"];
        assert_eq!(user[0]["type"], "tool_result");
        assert_eq!(user[0]["is_error"], true);
        assert_eq!(user[1]["text"], "<system-reminder>date</system-reminder>");
        assert_eq!(user[2]["text"], "more");
    }

    #[test]
    fn folds_stream_events_with_thinking_blocks() {
        let mut c = Converter::new("id".into(), false);
        let events = [
            json!({"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 10, "cache_read_input_tokens": 2}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "ok"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s1"}}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "2}"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ];
        let mut chunks: Vec<Message> = events
            .iter()
            .filter_map(|e| c.event("", e).unwrap())
            .collect();
        chunks.push(c.finish().unwrap());
        let m = merge_chunks(&chunks);
        assert_eq!(m.text(), "Hi");
        let Content::Blocks(blocks) = &m.content else {
            panic!("{:?}", m.content)
        };
        assert_eq!(blocks[0]["thinking"], "hmm ok");
        assert_eq!(blocks[0]["signature"], "s1");
        assert_eq!(m.tool_calls[0].args["a"], 2);
        assert_eq!(m.response_metadata["finish_reason"], "tool_calls");
        let u = m.usage_metadata.clone().unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (12, 7));
        // Replaying the folded message keeps the signed thinking block.
        let (_, turns) = convert_messages(&[Message::human("q"), m], false).unwrap();
        assert_eq!(
            turns[1]["content"][0],
            json!({"type": "thinking", "thinking": "hmm ok", "signature": "s1"})
        );
    }

    #[test]
    fn message_delta_usage_replaces_only_the_counts_it_carries() {
        let mut c = Converter::new("id".into(), true);
        let events = [
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 10,
                "cache_read_input_tokens": 4, "cache_creation_input_tokens": 2, "output_tokens": 1}}}),
            json!({"type": "message_delta", "delta": {"stop_reason": null},
                   "usage": {"output_tokens": 5}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                   "usage": {"input_tokens": 30, "cache_read_input_tokens": null, "output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ];
        for e in &events {
            c.event("", e).unwrap();
        }
        let u = c.finish().unwrap().usage_metadata.unwrap();
        // input 30 (last delta) + cache read 4 (null keeps the start's) + creation 2.
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.total_tokens),
            (36, 9, 45)
        );
        assert_eq!(
            u.input_token_details.unwrap(),
            json!({"cache_read": 4, "cache_creation": 2})
        );
    }

    #[test]
    fn error_events_and_urls() {
        let mut c = Converter::new("id".into(), true);
        let e = c
            .event("error", &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
            .unwrap_err();
        assert!(matches!(e, LlmError::Server { status: 529, .. }));
        assert_eq!(
            messages_url("https://api.anthropic.com"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(messages_url("http://h/v1/"), "http://h/v1/messages");
        assert_eq!(tool_choice(&json!("required")), json!({"type": "any"}));
        assert_eq!(
            tool_choice(&json!({"type": "function", "function": {"name": "f"}})),
            json!({"type": "tool", "name": "f"})
        );
    }
}
