//! Anthropic Messages shapes: request views, stream events, full responses, errors.

use crate::openai::{call_id, usage_for};
use crate::script::{Chunking, Fault, LastRole, RequestView, Turn, fragments};
use serde_json::{Value, json};

/// The text of an Anthropic `content` (string or blocks), tool results excluded.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn tool_result_text(content: Option<&Value>) -> Option<String> {
    let blocks = content?.as_array()?;
    let result = blocks
        .iter()
        .rev()
        .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))?;
    Some(match result.get("content") {
        Some(Value::String(s)) => s.clone(),
        other => content_text(other),
    })
}

/// Reads what the mock needs from a Messages request body.
pub(crate) fn view(body: &Value) -> RequestView {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut prompt_chars = match body.get("system") {
        Some(Value::String(s)) => s.chars().count(),
        other => content_text(other).chars().count(),
    };
    let mut last_user_text = String::new();
    for m in &messages {
        let text = content_text(m.get("content"));
        prompt_chars += text.chars().count();
        if m.get("role").and_then(Value::as_str) == Some("user") && !text.is_empty() {
            last_user_text = text;
        }
    }
    let last = messages.last();
    let mut last_tool_result = String::new();
    let last_role = match last.and_then(|m| m.get("role")).and_then(Value::as_str) {
        Some("user") => match tool_result_text(last.and_then(|m| m.get("content"))) {
            Some(t) => {
                last_tool_result = t;
                LastRole::Tool
            }
            None => LastRole::User,
        },
        Some("assistant") => LastRole::Assistant,
        _ => LastRole::None,
    };
    let tools = body
        .get("tools")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
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
        include_usage: true,
        tools,
        last_role,
        last_user_text,
        last_tool_result,
        prompt_chars,
    }
}

fn stop_reason(turn: &Turn) -> String {
    turn.finish_reason.clone().unwrap_or_else(|| {
        if turn.tool_calls.is_empty() {
            "end_turn".to_string()
        } else {
            "tool_use".to_string()
        }
    })
}

fn message_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("msg_{}", &u[..24])
}

fn signature(turn: &Turn) -> String {
    turn.thinking_signature
        .clone()
        .unwrap_or_else(|| "mock-signature-EqQBCgIYAhIM".to_string())
}

fn input_usage(turn: &Turn, view: &RequestView) -> Value {
    let u = usage_for(turn, view);
    json!({
        "input_tokens": u.prompt_tokens,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached_tokens.unwrap_or(0),
    })
}

/// The `(event, data)` pairs of a streamed answer.
pub(crate) fn stream_events(
    turn: &Turn,
    view: &RequestView,
    chunking: &Chunking,
) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let usage = usage_for(turn, view);
    out.push((
        "message_start".to_string(),
        json!({"type": "message_start", "message": {
            "id": message_id(),
            "type": "message",
            "role": "assistant",
            "model": view.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": input_usage(turn, view),
        }}),
    ));
    out.push(("ping".to_string(), json!({"type": "ping"})));
    let mut index = 0;
    if let Some(r) = &turn.reasoning {
        out.push((
            "content_block_start".into(),
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ));
        for piece in chunking.split(r) {
            out.push((
                "content_block_delta".into(),
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "thinking_delta", "thinking": piece}}),
            ));
        }
        out.push((
            "content_block_delta".into(),
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "signature_delta", "signature": signature(turn)}}),
        ));
        out.push((
            "content_block_stop".into(),
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if !turn.text.is_empty() {
        out.push((
            "content_block_start".into(),
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "text", "text": ""}}),
        ));
        for piece in chunking.split(&turn.text) {
            out.push((
                "content_block_delta".into(),
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        out.push((
            "content_block_stop".into(),
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for call in &turn.tool_calls {
        out.push((
            "content_block_start".into(),
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": call_id(call, "toolu_"),
                                     "name": call.name, "input": {}}}),
        ));
        for frag in fragments(&call.arguments, turn.args_fragments) {
            out.push((
                "content_block_delta".into(),
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": frag}}),
            ));
        }
        out.push((
            "content_block_stop".into(),
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    out.push((
        "message_delta".into(),
        json!({"type": "message_delta",
               "delta": {"stop_reason": stop_reason(turn), "stop_sequence": null},
               "usage": {"output_tokens": usage.completion_tokens}}),
    ));
    out.push(("message_stop".into(), json!({"type": "message_stop"})));
    out
}

/// A non-streamed Messages response.
pub(crate) fn full_response(turn: &Turn, view: &RequestView) -> Value {
    let mut content = Vec::new();
    if let Some(r) = &turn.reasoning {
        content.push(json!({"type": "thinking", "thinking": r, "signature": signature(turn)}));
    }
    if !turn.text.is_empty() {
        content.push(json!({"type": "text", "text": turn.text}));
    }
    for call in &turn.tool_calls {
        let input: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
        content.push(json!({"type": "tool_use", "id": call_id(call, "toolu_"),
                            "name": call.name, "input": input}));
    }
    let u = usage_for(turn, view);
    json!({
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": view.model,
        "content": content,
        "stop_reason": stop_reason(turn),
        "stop_sequence": null,
        "usage": {
            "input_tokens": u.prompt_tokens,
            "output_tokens": u.completion_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": u.cached_tokens.unwrap_or(0),
        }
    })
}

/// Status, body and `Retry-After` of an HTTP-level fault (`None` for stream faults).
pub(crate) fn error_for(fault: &Fault) -> Option<(u16, Value, Option<u64>)> {
    let err = |kind: &str, message: &str| json!({"type": "error", "error": {"type": kind, "message": message}});
    match fault {
        Fault::RateLimit { retry_after_secs } => Some((
            429,
            err(
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit.",
            ),
            *retry_after_secs,
        )),
        Fault::InsufficientQuota => Some((
            400,
            err(
                "invalid_request_error",
                "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
            ),
            None,
        )),
        Fault::Unauthorized => Some((401, err("authentication_error", "invalid x-api-key"), None)),
        Fault::ServerError => Some((500, err("api_error", "Internal server error"), None)),
        Fault::Status {
            status,
            body,
            retry_after_secs,
        } => Some((*status, body.clone(), *retry_after_secs)),
        Fault::MalformedChunk { .. } | Fault::DropConnection { .. } | Fault::Hang => None,
    }
}
