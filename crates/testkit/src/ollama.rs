//! Ollama `/api/chat` shapes: request views, NDJSON streamed responses, whole responses,
//! errors, and `GET /api/tags`.

use crate::openai::{content_text, usage_for};
use crate::script::{Chunking, Fault, LastRole, RequestView, Turn};
use serde_json::{Value, json};

pub(crate) fn is_chat_path(path: &str) -> bool {
    path == "/api/chat"
}

/// Reads what the mock needs from an `/api/chat` body. Ollama streams unless told not to.
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
        Some("tool") => LastRole::Tool,
        Some("assistant") => LastRole::Assistant,
        Some("system") => LastRole::System,
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
                .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    RequestView {
        model: body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("fawn-mock")
            .to_string(),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(true),
        include_usage: true,
        tools,
        last_role,
        last_user_text,
        last_tool_result,
        prompt_chars,
    }
}

/// Ollama stamps every line; the mock's clock is fixed.
fn created_at() -> &'static str {
    "2025-01-01T00:00:00.000000Z"
}

fn tool_calls(turn: &Turn) -> Vec<Value> {
    turn.tool_calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let args: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
            let mut c = json!({"function": {"index": i, "name": call.name, "arguments": args}});
            if let Some(id) = &call.id {
                c["id"] = json!(id);
            }
            c
        })
        .collect()
}

fn line(model: &str, message: Value) -> Value {
    json!({"model": model, "created_at": created_at(), "message": message, "done": false})
}

fn closing(turn: &Turn, view: &RequestView, mut message: Value) -> Value {
    let u = usage_for(turn, view);
    if message.get("role").is_none() {
        message["role"] = json!("assistant");
    }
    json!({
        "model": view.model,
        "created_at": created_at(),
        "message": message,
        "done": true,
        "done_reason": turn.finish_reason.clone().unwrap_or_else(|| "stop".into()),
        "total_duration": 1_000_000,
        "load_duration": 100_000,
        "prompt_eval_count": u.prompt_tokens,
        "prompt_eval_duration": 200_000,
        "eval_count": u.completion_tokens,
        "eval_duration": 700_000,
    })
}

/// The JSON objects of every line of a streamed answer: thinking, then content, then one
/// line per tool call, then the `done` line with the counts.
pub(crate) fn stream_lines(turn: &Turn, view: &RequestView, chunking: &Chunking) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(r) = &turn.reasoning {
        for piece in chunking.split(r) {
            out.push(line(
                &view.model,
                json!({"role": "assistant", "content": "", "thinking": piece}),
            ));
        }
    }
    for piece in chunking.split(&turn.text) {
        out.push(line(
            &view.model,
            json!({"role": "assistant", "content": piece}),
        ));
    }
    for call in tool_calls(turn) {
        out.push(line(
            &view.model,
            json!({"role": "assistant", "content": "", "tool_calls": [call]}),
        ));
    }
    out.push(closing(
        turn,
        view,
        json!({"role": "assistant", "content": ""}),
    ));
    out
}

/// A non-streamed answer: one object with the whole message and the counts.
pub(crate) fn full_response(turn: &Turn, view: &RequestView) -> Value {
    let mut message = json!({"role": "assistant", "content": turn.text});
    if let Some(r) = &turn.reasoning {
        message["thinking"] = json!(r);
    }
    let calls = tool_calls(turn);
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    closing(turn, view, message)
}

/// Status, body and `Retry-After` of an HTTP-level fault (`None` for stream faults).
pub(crate) fn error_for(fault: &Fault) -> Option<(u16, Value, Option<u64>)> {
    let err = |m: &str| json!({ "error": m });
    match fault {
        Fault::RateLimit { retry_after_secs } => Some((
            429,
            err("too many requests: rate limit exceeded"),
            *retry_after_secs,
        )),
        Fault::InsufficientQuota => {
            Some((402, err("payment required: usage quota exceeded"), None))
        }
        Fault::Unauthorized => Some((401, err("unauthorized"), None)),
        Fault::ServerError => Some((
            500,
            err("llama runner process has terminated: exit status 2"),
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

/// `GET /api/tags`: the one model the mock serves.
pub(crate) fn tags(model: &str) -> Value {
    json!({"models": [{
        "name": model,
        "model": model,
        "modified_at": "1970-01-01T00:00:00Z",
        "size": 0,
        "digest": "0000000000000000000000000000000000000000000000000000000000000000",
        "details": {"format": "gguf", "family": "fawn-mock", "parameter_size": "0B",
                    "quantization_level": "none"}
    }]})
}
