//! OpenAI chat-completions shapes: request views, streamed chunks, full responses, errors.

use crate::script::{Chunking, Fault, LastRole, MockUsage, RequestView, Turn, fragments};
use serde_json::{Map, Value, json};

/// Reads what the mock needs from a chat-completions request body.
pub(crate) fn view(body: &Value) -> RequestView {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut prompt_chars = 0;
    let mut last_user_text = String::new();
    for m in &messages {
        let text = content_text(m.get("content"));
        prompt_chars += text.chars().count();
        if m.get("role").and_then(Value::as_str) == Some("user") {
            last_user_text = text;
        }
    }
    let last = messages.last();
    let last_role = match last.and_then(|m| m.get("role")).and_then(Value::as_str) {
        Some("user") => LastRole::User,
        Some("tool") | Some("function") => LastRole::Tool,
        Some("assistant") => LastRole::Assistant,
        Some("system") | Some("developer") => LastRole::System,
        _ => LastRole::None,
    };
    let last_tool_result = if last_role == LastRole::Tool {
        content_text(last.and_then(|m| m.get("content")))
    } else {
        String::new()
    };
    let tools = body
        .get("tools")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter_map(|t| {
                    t.pointer("/function/name")
                        .or_else(|| t.get("name"))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    RequestView {
        model: body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("fawn-mock")
            .to_string(),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        tools,
        last_role,
        last_user_text,
        last_tool_result,
        prompt_chars,
    }
}

/// The text of an OpenAI `content` (string or list of parts).
pub(crate) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) => o.get("text").and_then(Value::as_str),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Usage numbers for `turn`: the scripted ones, or an estimate.
pub(crate) fn usage_for(turn: &Turn, view: &RequestView) -> MockUsage {
    if let Some(u) = &turn.usage {
        return u.clone();
    }
    let reasoning_chars = turn
        .reasoning
        .as_deref()
        .map(|r| r.chars().count())
        .unwrap_or(0);
    let out_chars = turn.text.chars().count()
        + reasoning_chars
        + turn
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.len())
            .sum::<usize>();
    MockUsage {
        prompt_tokens: (view.prompt_chars as u64 / 4).max(1),
        completion_tokens: (out_chars as u64 / 4).max(1),
        cached_tokens: None,
        reasoning_tokens: turn.reasoning.as_ref().map(|_| reasoning_chars as u64 / 4),
    }
}

pub(crate) fn usage_json(u: &MockUsage) -> Value {
    let mut o = json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    });
    o["prompt_tokens_details"] = json!({
        "cached_tokens": u.cached_tokens.unwrap_or(0),
        "audio_tokens": 0
    });
    o["completion_tokens_details"] = json!({
        "reasoning_tokens": u.reasoning_tokens.unwrap_or(0),
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0
    });
    o
}

pub(crate) fn call_id(turn_call: &crate::script::MockToolCall, prefix: &str) -> String {
    turn_call.id.clone().unwrap_or_else(|| {
        let u = uuid::Uuid::new_v4().simple().to_string();
        format!("{prefix}{}", &u[..24])
    })
}

fn finish_reason(turn: &Turn) -> String {
    turn.finish_reason.clone().unwrap_or_else(|| {
        if turn.tool_calls.is_empty() {
            "stop".to_string()
        } else {
            "tool_calls".to_string()
        }
    })
}

/// Everything fixed for one response.
pub(crate) struct Envelope {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Envelope {
    pub fn new(model: &str) -> Envelope {
        let u = uuid::Uuid::new_v4().simple().to_string();
        Envelope {
            id: format!("chatcmpl-{}", &u[..24]),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            model: model.to_string(),
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>, include_usage: bool) -> Value {
        let mut c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fawn_mock",
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish,
            }],
        });
        if include_usage {
            c["usage"] = Value::Null;
        }
        c
    }
}

/// The JSON payloads of every `data:` line of a streamed answer (without `[DONE]`).
pub(crate) fn stream_chunks(
    turn: &Turn,
    view: &RequestView,
    env: &Envelope,
    chunking: &Chunking,
) -> Vec<Value> {
    let mut out = Vec::new();
    let mut first = Map::new();
    first.insert("role".into(), json!("assistant"));
    first.insert("content".into(), json!(""));
    first.insert("refusal".into(), Value::Null);
    for (k, v) in &turn.delta_extra {
        first.insert(k.clone(), v.clone());
    }
    out.push(env.chunk(Value::Object(first), None, view.include_usage));
    if let Some(r) = &turn.reasoning {
        for piece in chunking.split(r) {
            let mut d = Map::new();
            d.insert(turn.reasoning_field.clone(), Value::String(piece));
            out.push(env.chunk(Value::Object(d), None, view.include_usage));
        }
    }
    for piece in chunking.split(&turn.text) {
        out.push(env.chunk(json!({"content": piece}), None, view.include_usage));
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        let id = call_id(call, "call_");
        out.push(env.chunk(
            json!({"tool_calls": [{
                "index": i,
                "id": id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""}
            }]}),
            None,
            view.include_usage,
        ));
        for frag in fragments(&call.arguments, turn.args_fragments) {
            out.push(env.chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}),
                None,
                view.include_usage,
            ));
        }
    }
    let finish = finish_reason(turn);
    out.push(env.chunk(json!({}), Some(&finish), view.include_usage));
    if view.include_usage {
        out.push(json!({
            "id": env.id,
            "object": "chat.completion.chunk",
            "created": env.created,
            "model": env.model,
            "system_fingerprint": "fp_fawn_mock",
            "choices": [],
            "usage": usage_json(&usage_for(turn, view)),
        }));
    }
    out
}

/// A non-streamed `chat.completion` object.
pub(crate) fn full_response(turn: &Turn, view: &RequestView, env: &Envelope) -> Value {
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let has_calls = !turn.tool_calls.is_empty();
    message.insert(
        "content".into(),
        if turn.text.is_empty() && has_calls {
            Value::Null
        } else {
            Value::String(turn.text.clone())
        },
    );
    message.insert("refusal".into(), Value::Null);
    if let Some(r) = &turn.reasoning {
        message.insert(turn.reasoning_field.clone(), Value::String(r.clone()));
    }
    if has_calls {
        let calls: Vec<Value> = turn
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "id": call_id(c, "call_"),
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}
                })
            })
            .collect();
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    for (k, v) in &turn.delta_extra {
        message.insert(k.clone(), v.clone());
    }
    json!({
        "id": env.id,
        "object": "chat.completion",
        "created": env.created,
        "model": env.model,
        "system_fingerprint": "fp_fawn_mock",
        "choices": [{
            "index": 0,
            "message": Value::Object(message),
            "logprobs": null,
            "finish_reason": finish_reason(turn),
        }],
        "usage": usage_json(&usage_for(turn, view)),
    })
}

/// Status, body and `Retry-After` of an HTTP-level fault (`None` for stream faults).
pub(crate) fn error_for(fault: &Fault) -> Option<(u16, Value, Option<u64>)> {
    let err = |message: &str, kind: &str, code: Value| json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    match fault {
        Fault::RateLimit { retry_after_secs } => Some((
            429,
            err(
                "Rate limit reached for requests. Please try again later.",
                "requests",
                json!("rate_limit_exceeded"),
            ),
            *retry_after_secs,
        )),
        Fault::InsufficientQuota => Some((
            429,
            err(
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                json!("insufficient_quota"),
            ),
            None,
        )),
        Fault::Unauthorized => Some((
            401,
            err(
                "Incorrect API key provided: sk-mock***. You can find your API key in your account settings.",
                "invalid_request_error",
                json!("invalid_api_key"),
            ),
            None,
        )),
        Fault::ServerError => Some((
            500,
            err(
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                Value::Null,
            ),
            None,
        )),
        Fault::Status {
            status,
            body,
            retry_after_secs,
        } => Some((*status, body.clone(), *retry_after_secs)),
        Fault::MalformedChunk { .. } | Fault::DropConnection { .. } | Fault::Hang => None,
    }
}

/// `GET /v1/models`.
pub(crate) fn models(model: &str) -> Value {
    json!({
        "object": "list",
        "data": [{
            "id": model,
            "object": "model",
            "created": 0,
            "owned_by": "fawn-testkit"
        }]
    })
}
