//! The native Ollama provider (`langchain_ollama:ChatOllama`): `POST {base_url}/api/chat`
//! with newline-delimited JSON streaming. Tools go in OpenAI function format; tool calls come
//! back whole in `message.tool_calls` (without ids, so stable ones are made up per call),
//! tool results go back as `tool` messages. `think` turns reasoning on for models that have
//! it (`message.thinking` becomes `reasoning_content`), sampling settings go in `options`
//! (`max_tokens` → `num_predict`), usage comes from the final chunk's `prompt_eval_count` and
//! `eval_count`. Errors are `{"error": "…"}` bodies, classified like every provider's.

use crate::content::{IMAGE_OMITTED_NOTE, image_ref, is_image_block};
use crate::error::{HttpError, classify_http, classify_reqwest};
use crate::retry::{RetryObserver, with_retries};
use crate::roles::{self, Provider, Role};
use crate::settings::ModelSettings;
use crate::wire_stream::{self, Fold};
use crate::{ChatModel, ChatRequest, ChunkStream, LlmError, ModelInfo};
use async_trait::async_trait;
use fawn_state::{Content, Message, ToolCallChunk, UsageMetadata};
use futures::StreamExt;
use serde_json::{Map, Value, json};
use std::sync::Arc;

pub const DEFAULT_BASE_URL: &str = "http://localhost:11434";
/// `response_metadata.model_provider` of Ollama answers.
pub const PROVIDER: &str = "ollama";
/// Where the key is looked up when the config gives none (Ollama's cloud and authenticating
/// proxies take it as a bearer token).
pub const API_KEY_ENV: &[&str] = &["OLLAMA_API_KEY"];

/// Config keys of ChatOllama that configure the client, never the request.
const CLIENT_KEYS: &[&str] = &[
    "validate_model_on_init",
    "client_kwargs",
    "async_client_kwargs",
    "sync_client_kwargs",
    "base_url",
    "model",
    "auth",
    "api_key",
    // Keys other providers read that mean nothing to Ollama.
    "thinking",
    "reasoning_effort",
    "tool_choice",
];

/// Top-level `/api/chat` fields a config may set directly.
const TOP_LEVEL_KEYS: &[&str] = &["format", "keep_alive"];

/// The chat endpoint under a configured base URL (bare host, or one ending in `/api`).
pub fn chat_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/api") {
        format!("{base}/chat")
    } else {
        format!("{base}/api/chat")
    }
}

/// The base URL from `OLLAMA_HOST` (`host`, `host:port` or a URL), as the Ollama clients
/// read it.
pub fn base_url_from_host(host: &str) -> Option<String> {
    let host = host.trim().trim_end_matches('/');
    if host.is_empty() {
        return None;
    }
    if host.starts_with("http://") || host.starts_with("https://") {
        return Some(host.to_string());
    }
    let with_port = if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:11434")
    };
    Some(format!("http://{with_port}"))
}

fn bad(message: String) -> LlmError {
    LlmError::BadRequest {
        status: 400,
        message,
    }
}

/// `(text, base64 images)` of user-side content. Ollama takes only inline images; a URL
/// image is replaced by a note.
fn user_content(content: &Content, vision: bool) -> (String, Vec<String>) {
    match content {
        Content::Text(s) => (s.clone(), Vec::new()),
        Content::Blocks(blocks) => {
            let mut text = String::new();
            let mut images = Vec::new();
            let mut push = |t: &str| {
                if !text.is_empty() && !t.is_empty() {
                    text.push('\n');
                }
                text.push_str(t);
            };
            for b in blocks {
                match b {
                    Value::String(s) => push(s),
                    Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
                        push(o.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                    _ if is_image_block(b) => {
                        match image_ref(b).filter(|_| vision).and_then(|i| i.to_base64()) {
                            Some((_, data)) => images.push(data),
                            None if !vision => push(IMAGE_OMITTED_NOTE),
                            None => push("[image omitted: Ollama accepts only inline images]"),
                        }
                    }
                    _ => {}
                }
            }
            (text, images)
        }
    }
}

/// Reasoning of an earlier answer: `reasoning_content`, or the text of `thinking` blocks.
fn reasoning_of(m: &Message) -> String {
    if let Some(r) = m
        .additional_kwargs
        .get("reasoning_content")
        .and_then(Value::as_str)
    {
        return r.to_string();
    }
    match &m.content {
        Content::Blocks(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("thinking"))
            .filter_map(|b| b.get("thinking").and_then(Value::as_str))
            .collect(),
        Content::Text(_) => String::new(),
    }
}

fn assistant_message(m: &Message) -> Value {
    let mut out = json!({"role": "assistant", "content": m.text()});
    let reasoning = reasoning_of(m);
    if !reasoning.is_empty() {
        out["thinking"] = json!(reasoning);
    }
    let mut calls: Vec<Value> = m
        .tool_calls
        .iter()
        .map(|tc| json!({"function": {"name": tc.name, "arguments": Value::Object(tc.args.clone())}}))
        .collect();
    calls.extend(m.invalid_tool_calls.iter().map(
        |tc| json!({"function": {"name": tc.name.clone().unwrap_or_default(), "arguments": {}}}),
    ));
    if !calls.is_empty() {
        out["tool_calls"] = Value::Array(calls);
    }
    out
}

/// `/api/chat` messages for a conversation.
pub(crate) fn convert_messages<'a>(
    messages: impl IntoIterator<Item = &'a Message> + Clone,
    vision: bool,
) -> Result<Vec<Value>, LlmError> {
    let names = roles::tool_call_names(messages.clone());
    let user = |m: &Message| {
        let (text, images) = user_content(&m.content, vision);
        let mut u = json!({"role": "user", "content": text});
        if !images.is_empty() {
            u["images"] = json!(images);
        }
        u
    };
    let mut out = Vec::new();
    for (i, m) in messages.into_iter().enumerate() {
        let Some(role) = roles::classify(m, i, Provider::Ollama)? else {
            continue;
        };
        let msg = match role {
            Role::System => json!({"role": "system", "content": m.text()}),
            Role::User | Role::Named(_) => user(m),
            Role::Assistant => assistant_message(m),
            Role::Tool | Role::Function => {
                let mut t = json!({"role": "tool", "content": m.text()});
                let name = m.name.clone().filter(|n| !n.is_empty()).or_else(|| {
                    m.tool_call_id
                        .as_ref()
                        .and_then(|id| names.get(id).cloned())
                });
                if let Some(name) = name {
                    t["tool_name"] = json!(name);
                }
                t
            }
        };
        out.push(msg);
    }
    Ok(out)
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Null => false,
        Value::String(s) => !matches!(s.as_str(), "" | "false" | "none" | "off"),
        _ => true,
    }
}

/// The `/api/chat` request body.
///
/// `think`: with `supports_thinking`, a thinking run sends the configured `reasoning`/`think`
/// value (a level such as `high` stays), or `true`; a run with thinking off sends `false`.
/// Without `supports_thinking` the configured value is sent as it is.
pub(crate) fn build_body(
    req: &ChatRequest,
    settings: &ModelSettings,
    stream: bool,
) -> Result<Value, LlmError> {
    let mut params = settings.resolve_params(
        req.thinking_enabled,
        req.reasoning_effort.as_deref(),
        req.max_tokens,
        req.temperature,
    );
    let mut raw = Map::new();
    for key in ["model_kwargs", "extra_body"] {
        match params.remove(key) {
            Some(Value::Object(o)) => raw.extend(o),
            Some(Value::Null) | None => {}
            Some(other) => return Err(bad(format!("{key} must be an object, got {other}"))),
        }
    }
    params.extend(req.extra.clone());
    let mut body = Map::new();
    let mut options = Map::new();
    let mut think_cfg = None;
    for (k, v) in &params {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "max_tokens" | "num_predict" => {}
            "reasoning" | "think" => think_cfg = Some(v.clone()),
            "options" => {
                if let Value::Object(o) = v {
                    options.extend(o.clone());
                }
            }
            "stop" => {
                let stops = match v {
                    Value::String(s) => json!([s]),
                    other => other.clone(),
                };
                options.insert("stop".into(), stops);
            }
            _ if TOP_LEVEL_KEYS.contains(&k.as_str()) => {
                body.insert(k.clone(), v.clone());
            }
            _ if CLIENT_KEYS.contains(&k.as_str()) => {}
            // Every other key is a model option (`num_ctx`, `top_k`, `mirostat`, …); Ollama
            // ignores the ones it does not know.
            _ => {
                options.insert(k.clone(), v.clone());
            }
        }
    }
    let num_predict = req
        .max_tokens
        .map(Value::from)
        .or_else(|| params.get("num_predict").cloned())
        .or_else(|| params.get("max_tokens").cloned())
        .filter(|v| !v.is_null());
    if let Some(n) = num_predict {
        options.insert("num_predict".into(), n);
    }
    let think = if settings.supports_thinking {
        if req.thinking_enabled {
            Some(match think_cfg {
                Some(v) if truthy(&v) => v,
                _ => Value::Bool(true),
            })
        } else {
            Some(Value::Bool(false))
        }
    } else {
        think_cfg
    };

    body.insert("model".into(), json!(settings.model));
    body.insert(
        "messages".into(),
        Value::Array(convert_messages(
            req.messages.iter(),
            settings.supports_vision,
        )?),
    );
    let choice_none = req
        .tool_choice
        .as_ref()
        .or_else(|| params.get("tool_choice"))
        .and_then(Value::as_str)
        == Some("none");
    if !req.tools.is_empty() && !choice_none {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let parameters = if t.parameters.is_null() {
                    json!({"type": "object", "properties": {}})
                } else {
                    Value::clone(&t.parameters)
                };
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": parameters}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("stream".into(), Value::Bool(stream));
    if let Some(t) = think {
        body.insert("think".into(), t);
    }
    if !options.is_empty() {
        body.insert("options".into(), Value::Object(options));
    }
    for (k, v) in raw {
        match (body.get_mut(&k), v) {
            (Some(Value::Object(b)), Value::Object(o)) => crate::settings::deep_merge(b, &o),
            (_, v) => {
                body.insert(k, v);
            }
        }
    }
    Ok(Value::Object(body))
}

fn n(v: Option<&Value>) -> i64 {
    v.and_then(Value::as_i64).unwrap_or(0)
}

/// The `{"error": …}` of a stream line or body as an [`LlmError`]. Ollama gives no status
/// for an error in the middle of a stream; it is treated as a server error.
fn line_error(v: &Value) -> Option<LlmError> {
    let err = v.get("error")?;
    if err.is_null() {
        return None;
    }
    Some(classify_http(500, None, &v.to_string()))
}

/// Folds `/api/chat` response objects (NDJSON lines, or one whole response) into chunks.
#[derive(Debug)]
pub(crate) struct Converter {
    message_id: String,
    calls: i64,
    done: bool,
}

impl Converter {
    pub(crate) fn new(message_id: String) -> Converter {
        Converter {
            message_id,
            calls: 0,
            done: false,
        }
    }

    /// One response object → at most one chunk; the `done` one closes the message.
    pub(crate) fn line(&mut self, v: &Value) -> Result<Option<Message>, LlmError> {
        if let Some(e) = line_error(v) {
            return Err(e);
        }
        let mut m = Message::ai_chunk("").with_id(self.message_id.clone());
        let msg = v.get("message");
        if let Some(t) = msg.and_then(|m| m.get("content")).and_then(Value::as_str) {
            m.content = Content::Text(t.to_string());
        }
        if let Some(t) = msg
            .and_then(|m| m.get("thinking"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            m.additional_kwargs
                .insert("reasoning_content".into(), json!(t));
        }
        let calls = msg
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for call in calls {
            let f = call.get("function").unwrap_or(call);
            let Some(name) = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.trim().is_empty())
            else {
                // A call that names no tool can be neither run nor answered.
                tracing::warn!(call = %call, "dropped a tool call without a tool name");
                continue;
            };
            let args = match f.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Object(o)) => Value::Object(o.clone()).to_string(),
                _ => "{}".to_string(),
            };
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .unwrap_or_else(|| {
                    let u = uuid::Uuid::new_v4().simple().to_string();
                    format!("call_{}", &u[..24])
                });
            m.tool_call_chunks.push(ToolCallChunk {
                name: Some(name.to_string()),
                args: Some(args),
                id: Some(id),
                index: Some(self.calls),
                extra: Map::new(),
            });
            self.calls += 1;
        }
        if v.get("done").and_then(Value::as_bool) == Some(true) {
            self.done = true;
            let reason = v
                .get("done_reason")
                .and_then(Value::as_str)
                .unwrap_or("stop");
            let finish = match reason {
                "stop" if self.calls > 0 => "tool_calls",
                other => other,
            };
            let md = &mut m.response_metadata;
            md.insert("finish_reason".into(), json!(finish));
            md.insert("done_reason".into(), json!(reason));
            if let Some(model) = v.get("model").and_then(Value::as_str) {
                md.insert("model_name".into(), json!(model));
            }
            md.insert("model_provider".into(), json!(PROVIDER));
            for key in [
                "created_at",
                "total_duration",
                "load_duration",
                "prompt_eval_duration",
                "eval_duration",
            ] {
                if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
                    md.insert(key.into(), x.clone());
                }
            }
            let input = n(v.get("prompt_eval_count"));
            let output = n(v.get("eval_count"));
            m.usage_metadata = Some(UsageMetadata::new(input, output));
            m.chunk_position = Some("last".into());
            return Ok(Some(m));
        }
        let empty =
            m.content.is_empty() && m.tool_call_chunks.is_empty() && m.additional_kwargs.is_empty();
        Ok((!empty).then_some(m))
    }
}

struct LineFold {
    conv: Converter,
}

impl Fold for LineFold {
    type Event = String;

    fn event(&mut self, line: String) -> Result<Option<Message>, LlmError> {
        let v: Value = serde_json::from_str(&line).map_err(|e| LlmError::Malformed {
            message: format!("invalid JSON line in the Ollama stream: {e}"),
        })?;
        self.conv.line(&v)
    }

    fn is_done(&self) -> bool {
        self.conv.done
    }

    fn end(&mut self) -> Result<Option<Message>, LlmError> {
        Err(LlmError::Connection {
            message: "stream ended before its final (done) line".into(),
        })
    }
}

/// A model served by Ollama's native API.
pub struct Ollama {
    info: ModelInfo,
    settings: ModelSettings,
    http: reqwest::Client,
    url: String,
    headers: reqwest::header::HeaderMap,
    observer: Option<RetryObserver>,
}

impl std::fmt::Debug for Ollama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ollama")
            .field("info", &self.info)
            .field("url", &self.url)
            .finish()
    }
}

impl Ollama {
    pub(crate) fn new(
        info: ModelInfo,
        settings: ModelSettings,
        http: reqwest::Client,
    ) -> Result<Ollama, String> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            let v = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| "api_key contains characters that cannot be sent in a header")?;
            headers.insert(reqwest::header::AUTHORIZATION, v);
        }
        for (k, v) in &settings.headers {
            headers.insert(k.clone(), v.clone());
        }
        let base = settings
            .base_url
            .clone()
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
        Ok(Ollama {
            info,
            url: chat_url(&base),
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
        build_body(req, &self.settings, self.settings.streaming)
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

    async fn attempt(&self, body: Arc<Value>, message_id: String) -> Result<ChunkStream, LlmError> {
        let mut conv = Converter::new(message_id);
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
                message: format!("invalid JSON from Ollama: {e}"),
            })?;
            return match conv.line(&v)? {
                Some(m) if conv.done => Ok(futures::stream::iter([Ok(m)]).boxed()),
                _ => Err(LlmError::Malformed {
                    message: "Ollama's response is not a finished message (no done: true)".into(),
                }),
            };
        }
        wire_stream::start(
            wire_stream::ndjson_lines(resp),
            LineFold { conv },
            self.settings.timeout,
            self.settings.stream_chunk_timeout,
        )
        .await
    }
}

#[async_trait]
impl ChatModel for Ollama {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChunkStream, LlmError> {
        let body = Arc::new(build_body(
            &request,
            &self.settings,
            self.settings.streaming,
        )?);
        let message_id = format!("lc_run--{}", uuid::Uuid::new_v4());
        with_retries(
            &self.info.name,
            &self.settings.retry,
            self.observer.as_ref(),
            || self.attempt(body.clone(), message_id.clone()),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_state::{ToolCall, merge_chunks};

    #[test]
    fn urls() {
        assert_eq!(
            chat_url("http://localhost:11434"),
            "http://localhost:11434/api/chat"
        );
        assert_eq!(chat_url("http://h:1/api/"), "http://h:1/api/chat");
        assert_eq!(
            base_url_from_host("0.0.0.0").as_deref(),
            Some("http://0.0.0.0:11434")
        );
        assert_eq!(
            base_url_from_host("box:8080").as_deref(),
            Some("http://box:8080")
        );
        assert_eq!(
            base_url_from_host("https://o.example/").as_deref(),
            Some("https://o.example")
        );
        assert_eq!(base_url_from_host(" "), None);
    }

    #[test]
    fn converts_a_tool_round_trip() {
        let mut ai = Message::ai("calling").with_tool_calls(vec![ToolCall::new(
            "f",
            json!({"a": 1}),
            "call_1",
        )]);
        ai.additional_kwargs
            .insert("reasoning_content".into(), json!("hm"));
        let msgs = [
            Message::system("sys"),
            Message::human(Content::Blocks(vec![
                json!({"type": "text", "text": "look"}),
                json!({"type": "image", "source_type": "base64", "data": "QUJD", "mime_type": "image/png"}),
            ])),
            ai,
            Message::tool("out", "call_1", None),
        ];
        let out = convert_messages(msgs.iter(), true).unwrap();
        assert_eq!(
            out,
            vec![
                json!({"role": "system", "content": "sys"}),
                json!({"role": "user", "content": "look", "images": ["QUJD"]}),
                json!({"role": "assistant", "content": "calling", "thinking": "hm",
                       "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}),
                json!({"role": "tool", "content": "out", "tool_name": "f"}),
            ]
        );
        let out = convert_messages(msgs.iter(), false).unwrap();
        assert_eq!(out[1]["content"], format!("look\n{IMAGE_OMITTED_NOTE}"));
    }

    #[test]
    fn folds_lines_into_one_message() {
        let mut c = Converter::new("id".into());
        let lines = [
            json!({"model": "qwen3", "message": {"role": "assistant", "content": "", "thinking": "hmm"}, "done": false}),
            json!({"model": "qwen3", "message": {"role": "assistant", "content": "Hi"}, "done": false}),
            json!({"model": "qwen3", "message": {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "f", "arguments": {"a": 2}}},
                {"function": {"index": 1, "name": "g", "arguments": {}}}
            ]}, "done": false}),
            json!({"model": "qwen3", "message": {"role": "assistant", "content": ""}, "done": true,
                   "done_reason": "stop", "prompt_eval_count": 12, "eval_count": 7, "total_duration": 5}),
        ];
        let chunks: Vec<Message> = lines.iter().filter_map(|l| c.line(l).unwrap()).collect();
        assert!(c.done);
        let m = merge_chunks(&chunks);
        assert_eq!(m.text(), "Hi");
        assert_eq!(m.additional_kwargs["reasoning_content"], "hmm");
        assert_eq!(m.tool_calls.len(), 2);
        assert_eq!(m.tool_calls[0].args["a"], 2);
        assert_ne!(m.tool_calls[0].id, m.tool_calls[1].id);
        assert!(m.tool_calls[0].id.as_deref().unwrap().starts_with("call_"));
        assert_eq!(m.response_metadata["finish_reason"], "tool_calls");
        assert_eq!(m.response_metadata["done_reason"], "stop");
        assert_eq!(m.response_metadata["model_provider"], "ollama");
        let u = m.usage_metadata.unwrap();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.total_tokens),
            (12, 7, 19)
        );
        let e = c.line(&json!({"error": "model runner has unexpectedly stopped"}));
        assert!(matches!(e, Err(LlmError::Server { .. })), "{e:?}");
    }
}
