//! Gemini `generateContent` shapes: request views, streamed (`alt=sse`) responses, whole
//! responses, errors.

use crate::openai::usage_for;
use crate::script::{Chunking, Fault, LastRole, RequestView, Turn};
use serde_json::{Map, Value, json};

/// The signature put on the first function call of an answer (and, when the turn asks for
/// one, on its text) when the turn names none. Gemini 3 signs every function call.
pub(crate) const DEFAULT_SIGNATURE: &str = "bW9jay1nZW1pbmktdGhvdWdodC1zaWduYXR1cmU=";

/// `(model, streaming)` of a Gemini path: `/v1beta/models/{model}:streamGenerateContent`
/// or `…:generateContent` (any API version, tuned models too).
pub(crate) fn route(path: &str) -> Option<(String, bool)> {
    let (resource, method) = path.rsplit_once(':')?;
    let stream = match method {
        "streamGenerateContent" => true,
        "generateContent" => false,
        _ => return None,
    };
    let model = resource
        .rsplit_once("/models/")
        .map(|(_, m)| m)
        .or_else(|| resource.strip_prefix("/models/"))
        .or_else(|| resource.rsplit_once("/tunedModels/").map(|(_, m)| m))?;
    (!model.is_empty()).then(|| (model.to_string(), stream))
}

fn parts_text(parts: Option<&Value>) -> String {
    parts
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

/// The text of the last `functionResponse` among `parts`: its `output` (or `error`) when it
/// is a string, else the response as JSON.
fn function_response_text(parts: Option<&Value>) -> Option<String> {
    let fr = parts?
        .as_array()?
        .iter()
        .rev()
        .find_map(|p| p.get("functionResponse"))?;
    let response = fr.get("response").cloned().unwrap_or(Value::Null);
    Some(
        match response
            .get("output")
            .or_else(|| response.get("result"))
            .or_else(|| response.get("error"))
        {
            Some(Value::String(s)) => s.clone(),
            _ => response.to_string(),
        },
    )
}

/// Reads what the mock needs from a `generateContent` body (model and streaming come from
/// the path).
pub(crate) fn view(body: &Value, model: &str, stream: bool) -> RequestView {
    let contents = body
        .get("contents")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut prompt_chars = parts_text(body.pointer("/systemInstruction/parts"))
        .chars()
        .count();
    let mut last_user_text = String::new();
    for c in &contents {
        let text = parts_text(c.get("parts"));
        prompt_chars += text.chars().count();
        if c.get("role").and_then(Value::as_str) != Some("model") && !text.is_empty() {
            last_user_text = text;
        }
    }
    let last = contents.last();
    let mut last_tool_result = String::new();
    let last_role = match last.and_then(|c| c.get("role")).and_then(Value::as_str) {
        Some("model") => LastRole::Assistant,
        Some(_) => match function_response_text(last.and_then(|c| c.get("parts"))) {
            Some(t) => {
                last_tool_result = t;
                LastRole::Tool
            }
            None => LastRole::User,
        },
        None if last.is_some() => LastRole::User,
        None => LastRole::None,
    };
    let tools = body
        .get("tools")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t.get("functionDeclarations").and_then(Value::as_array))
                .flatten()
                .filter_map(|d| d.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    RequestView {
        model: model.to_string(),
        stream,
        include_usage: true,
        tools,
        last_role,
        last_user_text,
        last_tool_result,
        prompt_chars,
    }
}

fn finish_reason(turn: &Turn) -> String {
    // Gemini says STOP whether or not the answer calls functions.
    turn.finish_reason.clone().unwrap_or_else(|| "STOP".into())
}

fn usage(turn: &Turn, view: &RequestView) -> Value {
    let u = usage_for(turn, view);
    let thoughts = u.reasoning_tokens.unwrap_or(0);
    let candidates = u.completion_tokens.saturating_sub(thoughts);
    let mut o = json!({
        "promptTokenCount": u.prompt_tokens,
        "candidatesTokenCount": candidates,
        "totalTokenCount": u.prompt_tokens + candidates + thoughts,
    });
    if thoughts > 0 {
        o["thoughtsTokenCount"] = json!(thoughts);
    }
    if let Some(c) = u.cached_tokens {
        o["cachedContentTokenCount"] = json!(c);
    }
    o
}

fn signature(turn: &Turn) -> String {
    turn.thinking_signature
        .clone()
        .unwrap_or_else(|| DEFAULT_SIGNATURE.to_string())
}

/// The `functionCall` parts of a turn; the first carries the signature.
fn call_parts(turn: &Turn) -> Vec<Value> {
    turn.tool_calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let args: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
            let mut fc = json!({"name": call.name, "args": args});
            if let Some(id) = &call.id {
                fc["id"] = json!(id);
            }
            let mut part = json!({ "functionCall": fc });
            if i == 0 {
                part["thoughtSignature"] = json!(signature(turn));
            }
            part
        })
        .collect()
}

fn response_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    u[..22].to_string()
}

struct Envelope {
    id: String,
    model: String,
}

impl Envelope {
    fn chunk(&self, parts: Vec<Value>, finish: Option<&str>, usage: Value) -> Value {
        let mut candidate = Map::new();
        candidate.insert("content".into(), json!({"role": "model", "parts": parts}));
        if let Some(f) = finish {
            candidate.insert("finishReason".into(), json!(f));
        }
        candidate.insert("index".into(), json!(0));
        json!({
            "candidates": [Value::Object(candidate)],
            "usageMetadata": usage,
            "modelVersion": self.model,
            "responseId": self.id,
        })
    }
}

/// The JSON payloads of every `data:` line of a streamed answer: thoughts, then text, then
/// function calls, the last one carrying `finishReason` and the full `usageMetadata`.
pub(crate) fn stream_chunks(turn: &Turn, view: &RequestView, chunking: &Chunking) -> Vec<Value> {
    let env = Envelope {
        id: response_id(),
        model: view.model.clone(),
    };
    let prompt_only = json!({"promptTokenCount": usage_for(turn, view).prompt_tokens});
    let mut out = Vec::new();
    if let Some(r) = &turn.reasoning {
        for piece in chunking.split(r) {
            out.push(env.chunk(
                vec![json!({"text": piece, "thought": true})],
                None,
                prompt_only.clone(),
            ));
        }
    }
    for piece in chunking.split(&turn.text) {
        out.push(env.chunk(vec![json!({ "text": piece })], None, prompt_only.clone()));
    }
    let mut last_parts = call_parts(turn);
    if turn.tool_calls.is_empty() && turn.thinking_signature.is_some() {
        // Gemini 3 signs a plain answer on an empty closing text part.
        last_parts.push(json!({"text": "", "thoughtSignature": signature(turn)}));
    }
    if last_parts.is_empty() {
        last_parts.push(json!({ "text": "" }));
    }
    out.push(env.chunk(last_parts, Some(&finish_reason(turn)), usage(turn, view)));
    out
}

/// A non-streamed `GenerateContentResponse`.
pub(crate) fn full_response(turn: &Turn, view: &RequestView) -> Value {
    let env = Envelope {
        id: response_id(),
        model: view.model.clone(),
    };
    let mut parts = Vec::new();
    if let Some(r) = &turn.reasoning {
        parts.push(json!({"text": r, "thought": true}));
    }
    if !turn.text.is_empty() {
        let mut p = json!({ "text": turn.text });
        if turn.tool_calls.is_empty() && turn.thinking_signature.is_some() {
            p["thoughtSignature"] = json!(signature(turn));
        }
        parts.push(p);
    }
    parts.extend(call_parts(turn));
    env.chunk(parts, Some(&finish_reason(turn)), usage(turn, view))
}

fn google_error(code: u16, status: &str, message: &str, details: Vec<Value>) -> Value {
    let mut e = json!({"code": code, "message": message, "status": status});
    if !details.is_empty() {
        e["details"] = Value::Array(details);
    }
    json!({ "error": e })
}

/// Status, body and `Retry-After` of an HTTP-level fault (`None` for stream faults). Gemini
/// sends no `Retry-After` header: a rate limit's delay is a `RetryInfo` detail of the body.
pub(crate) fn error_for(fault: &Fault) -> Option<(u16, Value, Option<u64>)> {
    match fault {
        Fault::RateLimit { retry_after_secs } => {
            let details = retry_after_secs
                .map(|s| {
                    vec![json!({"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                "retryDelay": format!("{s}s")})]
                })
                .unwrap_or_default();
            Some((
                429,
                google_error(
                    429,
                    "RESOURCE_EXHAUSTED",
                    "Resource has been exhausted (e.g. check quota).",
                    details,
                ),
                None,
            ))
        }
        Fault::InsufficientQuota => Some((
            429,
            google_error(
                429,
                "RESOURCE_EXHAUSTED",
                "You exceeded your current quota, please check your plan and billing details.",
                Vec::new(),
            ),
            None,
        )),
        Fault::Unauthorized => Some((
            400,
            google_error(
                400,
                "INVALID_ARGUMENT",
                "API key not valid. Please pass a valid API key.",
                vec![json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                            "reason": "API_KEY_INVALID",
                            "domain": "googleapis.com"})],
            ),
            None,
        )),
        Fault::ServerError => Some((
            500,
            google_error(
                500,
                "INTERNAL",
                "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
                Vec::new(),
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
