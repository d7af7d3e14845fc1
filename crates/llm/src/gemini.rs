//! The native Gemini provider (`langchain_google_genai:ChatGoogleGenerativeAI`), on the
//! Generative Language REST API: `POST …/v1beta/models/{model}:streamGenerateContent?alt=sse`
//! (`:generateContent` when streaming is off), key in `x-goog-api-key`.
//!
//! Messages become `contents` (roles `user`/`model`; leading system messages become
//! `systemInstruction`), tools become `functionDeclarations` with their JSON Schema cut down
//! to the subset Gemini accepts, tool calls come back as `functionCall` parts and go back as
//! `functionResponse` parts. `thoughtSignature`s are kept (on thinking and text blocks, and per
//! tool call id in `additional_kwargs`) and replayed on later turns, as Gemini 2.5/3 require
//! for function calling. Thought parts become `thinking` blocks (or `reasoning_content` when
//! the answer streams as plain text); usage comes from `usageMetadata`. A function call whose
//! arguments stream over several parts (`partialArgs` / `willContinue`) is assembled into one
//! call; a call that names no tool, and parts Fawn does not use (code execution, built-in
//! tool calls, …), are dropped. Errors are classified like the other providers', with
//! Google's `RetryInfo` delay honoured on 429.

use crate::content::{IMAGE_OMITTED_NOTE, image_ref, is_image_block};
use crate::error::{HttpError, classify_http, classify_reqwest, classify_stream_error};
use crate::retry::{RetryObserver, with_retries};
use crate::roles::{self, Provider, Role, SystemPrompt};
use crate::settings::ModelSettings;
use crate::wire_stream::{self, Events, Fold};
use crate::{ChatModel, ChatRequest, ChunkStream, LlmError, ModelInfo};
use async_trait::async_trait;
use eventsource_stream::Eventsource;
use fawn_state::{Content, Message, ToolCallChunk, UsageMetadata};
use futures::StreamExt;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";
/// The API version used when the base URL names none.
pub const API_VERSION: &str = "v1beta";
/// Where the key is looked up when the config gives none (langchain-google-genai's order).
pub const API_KEY_ENV: &[&str] = &["GOOGLE_API_KEY", "GEMINI_API_KEY"];
/// `response_metadata.model_provider` of Gemini answers (langchain's name).
pub const PROVIDER: &str = "google_genai";
/// `additional_kwargs` key holding `{tool_call_id: thoughtSignature}` of an answer's function
/// calls (the key langchain-google-genai uses, so histories written by DeerFlow replay too).
pub const CALL_SIGNATURES_KEY: &str = "__gemini_function_call_thought_signatures__";
/// The placeholder Google documents for function calls whose signature was lost (history
/// from another model, or edited): Gemini 3 rejects an unsigned call of the current turn.
pub const PLACEHOLDER_SIGNATURE: &str = "skip_thought_signature_validator";
/// Prefix of the tool call ids Fawn makes up when Gemini sends none; such ids are never sent
/// back to Gemini.
pub const SYNTHETIC_ID_PREFIX: &str = "gemini_call_";

fn bad(message: String) -> LlmError {
    LlmError::BadRequest {
        status: 400,
        message,
    }
}

/// The `(streaming, non-streaming)` endpoints of `model` under a configured base URL (bare
/// host, or one ending in an API version such as `/v1beta`).
pub fn endpoints(base: &str, model: &str) -> (String, String) {
    let base = base.trim_end_matches('/');
    let has_version = base
        .rsplit('/')
        .next()
        .is_some_and(|last| last.starts_with("v1") || last.starts_with("v2"));
    let root = if has_version {
        base.to_string()
    } else {
        format!("{base}/{API_VERSION}")
    };
    let path = if model.contains('/') {
        model.to_string()
    } else {
        format!("models/{model}")
    };
    (
        format!("{root}/{path}:streamGenerateContent?alt=sse"),
        format!("{root}/{path}:generateContent"),
    )
}

/// Whether `model` is Gemini 3 or later (these reject unsigned function calls).
fn signatures_enforced(model: &str) -> bool {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    let Some(rest) = name.strip_prefix("gemini-") else {
        return false;
    };
    let major: String = rest.chars().take_while(char::is_ascii_digit).collect();
    major.parse::<u32>().is_ok_and(|m| m >= 3)
}

// ---------------------------------------------------------------------------------------
// Tool schemas
// ---------------------------------------------------------------------------------------

/// Schema keys Gemini's `Schema` object accepts (everything else, such as
/// `additionalProperties`, `$schema`, `default` or `examples`, is dropped).
const SCHEMA_KEYS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "items",
    "properties",
    "required",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
    "propertyOrdering",
];

/// How deep `$ref`s are followed before a schema is cut off (recursive schemas).
const MAX_SCHEMA_DEPTH: usize = 24;

/// A JSON Schema cut down to what Gemini's function declarations accept: `$ref`s inlined,
/// `const` → `enum`, `oneOf` → `anyOf`, a single `allOf` merged, `["x", "null"]` types and
/// `null` alternatives → `nullable`, formats Gemini does not know dropped, non-string enums
/// dropped, arrays given `items`, `required` limited to declared properties.
pub fn sanitize_schema(schema: &Value) -> Value {
    sanitize_at(schema, schema, 0)
}

fn resolve_ref<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}

fn sanitize_at(node: &Value, root: &Value, depth: usize) -> Value {
    let Value::Object(o) = node else {
        return json!({"type": "string"});
    };
    if depth > MAX_SCHEMA_DEPTH {
        return json!({"type": "object"});
    }
    if let Some(target) = o
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| resolve_ref(root, r))
    {
        let mut resolved = sanitize_at(target, root, depth + 1);
        if let (Some(d), Value::Object(r)) = (o.get("description"), &mut resolved) {
            r.insert("description".into(), d.clone());
        }
        return resolved;
    }
    let mut o = o.clone();
    if let Some(Value::Array(all)) = o.remove("allOf") {
        for part in all {
            if let Value::Object(p) = part {
                for (k, v) in p {
                    o.entry(k).or_insert(v);
                }
            }
        }
        if let Some(target) = o
            .remove("$ref")
            .as_ref()
            .and_then(Value::as_str)
            .and_then(|r| resolve_ref(root, r))
            && let Value::Object(t) = sanitize_at(target, root, depth + 1)
        {
            for (k, v) in t {
                o.entry(k).or_insert(v);
            }
        }
    }
    if let Some(c) = o.remove("const")
        && !o.contains_key("enum")
    {
        o.insert("enum".into(), Value::Array(vec![c]));
    }
    if let Some(one) = o.remove("oneOf")
        && !o.contains_key("anyOf")
    {
        o.insert("anyOf".into(), one);
    }
    let mut out = Map::new();
    let mut nullable = o.get("nullable").and_then(Value::as_bool).unwrap_or(false);
    // `type`: a list with `null` becomes one type + nullable.
    match o.get("type") {
        Some(Value::String(t)) if t == "null" => {
            nullable = true;
        }
        Some(Value::String(t)) => {
            out.insert("type".into(), json!(t));
        }
        Some(Value::Array(ts)) => {
            let names: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            nullable |= names.contains(&"null");
            if let Some(t) = names.iter().find(|t| **t != "null") {
                out.insert("type".into(), json!(t));
            }
        }
        _ => {}
    }
    // `anyOf`: `null` alternatives become nullable; one remaining alternative is inlined.
    if let Some(Value::Array(alts)) = o.get("anyOf") {
        let mut kept = Vec::new();
        for alt in alts {
            let is_null = alt.get("type").and_then(Value::as_str) == Some("null");
            if is_null {
                nullable = true;
            } else {
                kept.push(sanitize_at(alt, root, depth + 1));
            }
        }
        if kept.len() == 1 && !out.contains_key("type") {
            if let Some(Value::Object(only)) = kept.pop() {
                for (k, v) in only {
                    out.entry(k).or_insert(v);
                }
            }
        } else if !kept.is_empty() {
            out.insert("anyOf".into(), Value::Array(kept));
        }
    }
    for (k, v) in &o {
        if !SCHEMA_KEYS.contains(&k.as_str()) || out.contains_key(k) {
            continue;
        }
        match k.as_str() {
            "type" | "anyOf" | "nullable" => {}
            "properties" => {
                if let Value::Object(props) = v {
                    let props: Map<String, Value> = props
                        .iter()
                        .map(|(name, s)| (name.clone(), sanitize_at(s, root, depth + 1)))
                        .collect();
                    if !props.is_empty() {
                        out.insert("properties".into(), Value::Object(props));
                    }
                }
            }
            "items" => {
                let items = match v {
                    Value::Array(tuple) => tuple.first().cloned().unwrap_or(json!({})),
                    other => other.clone(),
                };
                out.insert("items".into(), sanitize_at(&items, root, depth + 1));
            }
            "enum" => {
                if let Value::Array(values) = v
                    && !values.is_empty()
                    && values.iter().all(Value::is_string)
                {
                    out.insert("enum".into(), v.clone());
                }
            }
            "format" => {
                let ty = out.get("type").and_then(Value::as_str).unwrap_or("");
                let known = match ty {
                    "string" => matches!(v.as_str(), Some("enum" | "date-time")),
                    "integer" => matches!(v.as_str(), Some("int32" | "int64")),
                    "number" => matches!(v.as_str(), Some("float" | "double")),
                    _ => false,
                };
                if known {
                    out.insert("format".into(), v.clone());
                }
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if out.get("enum").is_some() && !out.contains_key("type") {
        out.insert("type".into(), json!("string"));
    }
    if out.get("type").and_then(Value::as_str) == Some("array") && !out.contains_key("items") {
        out.insert("items".into(), json!({"type": "string"}));
    }
    if let Some(Value::Array(req)) = out.get("required").cloned() {
        let props = out.get("properties").and_then(Value::as_object);
        let kept: Vec<Value> = req
            .into_iter()
            .filter(|r| {
                r.as_str()
                    .is_some_and(|n| props.is_some_and(|p| p.contains_key(n)))
            })
            .collect();
        if kept.is_empty() {
            out.remove("required");
        } else {
            out.insert("required".into(), Value::Array(kept));
        }
    }
    if nullable {
        out.insert("nullable".into(), Value::Bool(true));
    }
    Value::Object(out)
}

fn function_declaration(t: &crate::ToolSpec) -> Value {
    let mut d = Map::new();
    d.insert("name".into(), json!(t.name));
    if !t.description.is_empty() {
        d.insert("description".into(), json!(t.description));
    }
    if !t.parameters.is_null() {
        let params = sanitize_schema(&t.parameters);
        // A declaration without arguments leaves `parameters` out: Gemini refuses an
        // object schema with no properties.
        if params.get("properties").is_some() {
            d.insert("parameters".into(), params);
        }
    }
    Value::Object(d)
}

// ---------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------

fn text_part(s: &str) -> Value {
    json!({ "text": s })
}

fn guess_image_mime(url: &str) -> &'static str {
    let path = url
        .split(['?', '#'])
        .next()
        .unwrap_or(url)
        .to_ascii_lowercase();
    match path.rsplit('.').next() {
        Some("png") => "image/png",
        Some("webp") => "image/webp",
        Some("gif") => "image/gif",
        Some("heic") => "image/heic",
        Some("heif") => "image/heif",
        _ => "image/jpeg",
    }
}

fn image_part(block: &Value, vision: bool) -> Value {
    match image_ref(block).filter(|_| vision) {
        Some(img) => match img.to_base64() {
            Some((mime, data)) => json!({"inlineData": {"mimeType": mime, "data": data}}),
            None => {
                let url = img.to_url();
                json!({"fileData": {"mimeType": guess_image_mime(&url), "fileUri": url}})
            }
        },
        None => text_part(IMAGE_OMITTED_NOTE),
    }
}

/// User-side parts: text and images (inline or by URI); other blocks are dropped.
fn user_parts(content: &Content, vision: bool) -> Vec<Value> {
    match content {
        Content::Text(s) if s.is_empty() => Vec::new(),
        Content::Text(s) => vec![text_part(s)],
        Content::Blocks(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) if !s.is_empty() => Some(text_part(s)),
                Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                    Some("text") => o
                        .get("text")
                        .and_then(Value::as_str)
                        .filter(|t| !t.is_empty())
                        .map(text_part),
                    _ if is_image_block(b) => Some(image_part(b, vision)),
                    _ => None,
                },
                _ => None,
            })
            .collect(),
    }
}

/// Whether the signatures on `m` were issued by Gemini (a Claude thinking signature sent to
/// Gemini would be refused).
fn signed_by_gemini(m: &Message) -> bool {
    match m.response_metadata.get("model_provider") {
        Some(Value::String(p)) => p == PROVIDER,
        _ => true,
    }
}

fn block_signature(b: &Value) -> Option<&str> {
    b.get("signature")
        .or_else(|| b.pointer("/extras/signature"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Model-side parts: text (and signed thoughts) from the content, then one `functionCall`
/// per tool call, each with the signature Gemini gave it.
fn model_parts(m: &Message) -> Vec<Value> {
    let own = signed_by_gemini(m);
    let mut parts = Vec::new();
    match &m.content {
        Content::Text(s) if !s.is_empty() => parts.push(text_part(s)),
        Content::Text(_) => {}
        Content::Blocks(blocks) => {
            for b in blocks {
                if let Value::String(s) = b {
                    if !s.is_empty() {
                        parts.push(text_part(s));
                    }
                    continue;
                }
                let sig = if own { block_signature(b) } else { None };
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let t = b.get("text").and_then(Value::as_str).unwrap_or("");
                        if t.is_empty() && sig.is_none() {
                            continue;
                        }
                        let mut p = text_part(t);
                        if let Some(sig) = sig {
                            p["thoughtSignature"] = json!(sig);
                        }
                        parts.push(p);
                    }
                    // Thought text is only worth sending back with its signature.
                    Some("thinking") => {
                        if let Some(sig) = sig {
                            let t = b.get("thinking").and_then(Value::as_str).unwrap_or("");
                            parts
                                .push(json!({"text": t, "thought": true, "thoughtSignature": sig}));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    let signatures = if own {
        m.additional_kwargs
            .get(CALL_SIGNATURES_KEY)
            .and_then(Value::as_object)
    } else {
        None
    };
    let calls = m.tool_calls.iter().map(|tc| {
        (
            tc.name.clone(),
            Value::Object(tc.args.clone()),
            tc.id.clone(),
        )
    });
    let invalid = m.invalid_tool_calls.iter().map(|tc| {
        (
            tc.name.clone().unwrap_or_default(),
            json!({}),
            tc.id.clone(),
        )
    });
    for (name, args, id) in calls.chain(invalid) {
        let mut call = json!({"name": name, "args": args});
        if let Some(id) = id.as_deref().filter(|i| is_gemini_id(i)) {
            call["id"] = json!(id);
        }
        let mut part = json!({ "functionCall": call });
        if let Some(sig) = id
            .as_deref()
            .and_then(|i| signatures.and_then(|s| s.get(i)))
            .and_then(Value::as_str)
        {
            part["thoughtSignature"] = json!(sig);
        }
        parts.push(part);
    }
    parts
}

/// A tool call id Gemini issued (not one Fawn made up, not empty).
fn is_gemini_id(id: &str) -> bool {
    !id.is_empty() && !id.starts_with(SYNTHETIC_ID_PREFIX)
}

fn function_response(m: &Message, names: &HashMap<String, String>) -> Value {
    let id = m.tool_call_id.clone().unwrap_or_default();
    let name = m
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| names.get(&id).cloned())
        .unwrap_or_else(|| "tool".to_string());
    let text = m.text();
    let response = if m.status.as_deref() == Some("error") {
        json!({ "error": text })
    } else {
        json!({ "output": text })
    };
    let mut fr = json!({"name": name, "response": response});
    if is_gemini_id(&id) {
        fr["id"] = json!(id);
    }
    json!({ "functionResponse": fr })
}

/// `(systemInstruction, contents)` for a conversation. Leading system messages form the
/// system instruction; later ones become user text. Consecutive turns of the same role are
/// merged (parallel function responses must share one content).
pub(crate) fn convert_messages<'a>(
    messages: impl IntoIterator<Item = &'a Message> + Clone,
    model: &str,
    vision: bool,
) -> Result<(Option<Value>, Vec<Value>), LlmError> {
    let names = roles::tool_call_names(messages.clone());
    let mut system = SystemPrompt::default();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (i, m) in messages.into_iter().enumerate() {
        let Some(role) = roles::classify(m, i, Provider::Gemini)? else {
            continue;
        };
        if system.take(m, role) {
            continue;
        }
        let (role, parts) = match role {
            Role::System => ("user", user_parts(&Content::Text(m.text()), vision)),
            Role::Assistant => ("model", model_parts(m)),
            Role::Tool => ("user", vec![function_response(m, &names)]),
            Role::User | Role::Function | Role::Named(_) => {
                ("user", user_parts(&m.content, vision))
            }
        };
        roles::push_turn(&mut turns, role, parts);
    }
    if signatures_enforced(model) {
        add_placeholder_signatures(&mut turns);
    }
    let contents = turns
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect();
    let system = system.text().map(|t| json!({"parts": [{"text": t}]}));
    Ok((system, contents))
}

/// Gemini 3 refuses a function call of the current turn (everything after the last user
/// message that is not only function responses) whose first call has no signature; such
/// calls get Google's documented placeholder.
fn add_placeholder_signatures(turns: &mut [(&'static str, Vec<Value>)]) {
    let start = turns
        .iter()
        .rposition(|(role, parts)| {
            *role == "user" && parts.iter().any(|p| p.get("functionResponse").is_none())
        })
        .map_or(0, |i| i + 1);
    for (role, parts) in turns.iter_mut().skip(start) {
        if *role != "model" {
            continue;
        }
        if let Some(first) = parts.iter_mut().find(|p| p.get("functionCall").is_some())
            && first.get("thoughtSignature").is_none()
        {
            first["thoughtSignature"] = json!(PLACEHOLDER_SIGNATURE);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Request body
// ---------------------------------------------------------------------------------------

/// Config keys that configure the client, never the request.
const CLIENT_KEYS: &[&str] = &[
    "api_key",
    "google_api_key",
    "gemini_api_key",
    "transport",
    "client_options",
    "client_args",
    "additional_headers",
    "project",
    "location",
    "vertexai",
    "credentials",
    "retries",
    "timeout",
    "request_timeout",
    "max_retries",
    "base_url",
    "model",
    "convert_system_message_to_human",
    "safety_settings_default",
];

/// langchain's snake_case generation settings → Gemini's `generationConfig` fields.
const GENERATION_KEYS: &[(&str, &str)] = &[
    ("temperature", "temperature"),
    ("top_p", "topP"),
    ("top_k", "topK"),
    ("n", "candidateCount"),
    ("candidate_count", "candidateCount"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
    ("seed", "seed"),
    ("response_mime_type", "responseMimeType"),
    ("response_json_schema", "responseJsonSchema"),
    ("response_logprobs", "responseLogprobs"),
    ("logprobs", "logprobs"),
];

/// `generationConfig` fields that pass as they are when a config spells them Gemini's way
/// (in `extra_body`, say).
const GENERATION_FIELDS: &[&str] = &[
    "topP",
    "topK",
    "candidateCount",
    "stopSequences",
    "presencePenalty",
    "frequencyPenalty",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
    "responseLogprobs",
    "mediaResolution",
    "speechConfig",
    "imageConfig",
];

fn camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn camel_keys(v: &Value) -> Map<String, Value> {
    v.as_object()
        .map(|o| o.iter().map(|(k, v)| (camel(k), v.clone())).collect())
        .unwrap_or_default()
}

/// `{category: threshold}` (langchain) or a list of `{category, threshold}` → Gemini's list.
fn safety_settings(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Array(
            o.iter()
                .map(|(category, threshold)| json!({"category": category, "threshold": threshold}))
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.iter().map(|i| Value::Object(camel_keys(i))).collect())
        }
        other => other.clone(),
    }
}

/// OpenAI-style `tool_choice` → Gemini's `toolConfig`.
fn tool_config(choice: &Value) -> Option<Value> {
    let (mode, name) = match choice {
        Value::String(s) => match s.as_str() {
            "auto" => ("AUTO", None),
            "none" => ("NONE", None),
            "required" | "any" => ("ANY", None),
            name => ("ANY", Some(name.to_string())),
        },
        Value::Object(o) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str)?;
            ("ANY", Some(name.to_string()))
        }
        _ => return None,
    };
    let mut cfg = json!({ "mode": mode });
    if let Some(n) = name {
        cfg["allowedFunctionNames"] = json!([n]);
    }
    Some(json!({ "functionCallingConfig": cfg }))
}

fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

/// The request body, and whether text streams as plain strings (no tools, no thoughts)
/// rather than indexed content blocks.
pub(crate) fn build_body(
    req: &ChatRequest,
    settings: &ModelSettings,
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

    let mut generation = Map::new();
    let mut thinking = Map::new();
    // Request-level fields a config sets (`safetySettings`, …), sent after the content.
    let mut top = Map::new();
    let mut choice = req.tool_choice.clone();
    let mut level = None;
    let mut effort = None;
    for (k, v) in &params {
        if v.is_null() {
            continue;
        }
        if let Some((_, field)) = GENERATION_KEYS.iter().find(|(name, _)| name == k) {
            generation.insert((*field).into(), v.clone());
            continue;
        }
        if GENERATION_FIELDS.contains(&k.as_str()) {
            generation.insert(k.clone(), v.clone());
            continue;
        }
        match k.as_str() {
            "max_tokens" | "max_output_tokens" | "maxOutputTokens" => {}
            "stop" | "stop_sequences" => {
                let stops = match v {
                    Value::String(s) => json!([s]),
                    other => other.clone(),
                };
                generation.insert("stopSequences".into(), stops);
            }
            "response_schema" => {
                generation.insert("responseSchema".into(), sanitize_schema(v));
            }
            "response_modalities" => {
                let modes = match v {
                    Value::Array(items) => Value::Array(
                        items
                            .iter()
                            .map(|m| match m {
                                Value::String(s) => json!(s.to_ascii_uppercase()),
                                other => other.clone(),
                            })
                            .collect(),
                    ),
                    other => other.clone(),
                };
                generation.insert("responseModalities".into(), modes);
            }
            "media_resolution" => {
                let r = match v.as_str() {
                    Some(s) if !s.starts_with("MEDIA_RESOLUTION_") => {
                        json!(format!("MEDIA_RESOLUTION_{}", s.to_ascii_uppercase()))
                    }
                    _ => v.clone(),
                };
                generation.insert("mediaResolution".into(), r);
            }
            "thinking_budget" => {
                thinking.insert("thinkingBudget".into(), v.clone());
            }
            "include_thoughts" => {
                thinking.insert("includeThoughts".into(), v.clone());
            }
            "thinking_level" => level = Some(v.clone()),
            "reasoning_effort" => effort = Some(v.clone()),
            "thinking_config" | "thinkingConfig" => thinking.extend(camel_keys(v)),
            // The Anthropic-style `thinking:` shortcut DeerFlow configs use.
            "thinking" => {
                let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
                if matches!(ty, "enabled" | "adaptive") {
                    thinking
                        .entry("includeThoughts")
                        .or_insert(Value::Bool(true));
                    if let Some(b) = v.get("budget_tokens").and_then(as_u64) {
                        thinking.entry("thinkingBudget").or_insert(json!(b));
                    }
                }
            }
            "generation_config" | "generationConfig" => generation.extend(camel_keys(v)),
            "safety_settings" | "safetySettings" => {
                top.insert("safetySettings".into(), safety_settings(v));
            }
            "cached_content" | "cachedContent" => {
                top.insert("cachedContent".into(), v.clone());
            }
            "labels" => {
                top.insert("labels".into(), v.clone());
            }
            "tool_config" | "toolConfig" => {
                top.insert("toolConfig".into(), Value::Object(camel_keys(v)));
            }
            "tool_choice" => {
                if choice.is_none() {
                    choice = Some(v.clone());
                }
            }
            _ if CLIENT_KEYS.contains(&k.as_str()) => {}
            // Gemini refuses unknown fields, so anything else stays here.
            other => tracing::debug!(key = other, "model option not sent to Gemini"),
        }
    }
    // The request's own cap wins, then langchain's `max_output_tokens`, then `max_tokens`.
    let max_tokens = req
        .max_tokens
        .map(u64::from)
        .or_else(|| params.get("max_output_tokens").and_then(as_u64))
        .or_else(|| params.get("maxOutputTokens").and_then(as_u64))
        .or_else(|| params.get("max_tokens").and_then(as_u64));
    if let Some(n) = max_tokens {
        generation.insert("maxOutputTokens".into(), json!(n));
    }
    if let Some(l) = level.or(effort) {
        thinking.insert("thinkingLevel".into(), l);
    }
    if thinking.contains_key("thinkingLevel") {
        // Gemini refuses both at once; the level is what Gemini 3 reads.
        thinking.remove("thinkingBudget");
    }
    let thinking_on = req.thinking_enabled && settings.supports_thinking;
    if thinking_on {
        thinking
            .entry("includeThoughts")
            .or_insert(Value::Bool(true));
    }
    let include_thoughts = thinking.get("includeThoughts") == Some(&Value::Bool(true));
    if !thinking.is_empty() {
        generation.insert("thinkingConfig".into(), Value::Object(thinking));
    }

    let (system, contents) = convert_messages(
        req.messages.iter(),
        &settings.model,
        settings.supports_vision,
    )?;
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents));
    if let Some(s) = system {
        body.insert("systemInstruction".into(), s);
    }
    let tools_offered = !req.tools.is_empty();
    if tools_offered {
        let decls: Vec<Value> = req.tools.iter().map(function_declaration).collect();
        body.insert("tools".into(), json!([{ "functionDeclarations": decls }]));
        if let Some(cfg) = choice.as_ref().and_then(tool_config) {
            top.insert("toolConfig".into(), cfg);
        }
    } else {
        top.remove("toolConfig");
    }
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    body.extend(top);
    let as_text = !tools_offered && !include_thoughts;
    Ok((Value::Object(body), as_text))
}

// ---------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------

fn n(v: Option<&Value>) -> i64 {
    v.and_then(Value::as_i64).unwrap_or(0)
}

/// `usageMetadata` → usage: thoughts count as output (as Gemini bills them), cached prompt
/// tokens as `cache_read`.
fn usage_metadata(u: &Value) -> UsageMetadata {
    let input = n(u.get("promptTokenCount")) + n(u.get("toolUsePromptTokenCount"));
    let thoughts = n(u.get("thoughtsTokenCount"));
    let output = n(u.get("candidatesTokenCount")) + thoughts;
    let total = u
        .get("totalTokenCount")
        .and_then(Value::as_i64)
        .unwrap_or(input + output);
    UsageMetadata {
        input_tokens: input,
        output_tokens: output,
        total_tokens: total,
        input_token_details: Some(json!({"cache_read": n(u.get("cachedContentTokenCount"))})),
        output_token_details: (thoughts > 0).then(|| json!({"reasoning": thoughts})),
        extra: Map::new(),
    }
}

/// Gemini's finish reason → the OpenAI-style one the agent reads.
fn finish_reason(raw: &str, has_calls: bool) -> String {
    match raw {
        "STOP" if has_calls => "tool_calls".into(),
        "STOP" | "FINISH_REASON_UNSPECIFIED" => "stop".into(),
        "MAX_TOKENS" => "length".into(),
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => "content_filter".into(),
        other => other.to_ascii_lowercase(),
    }
}

/// `retryDelay` of a `google.rpc.RetryInfo` detail (`"7s"`, `"0.5s"`).
fn retry_delay(error: &Value) -> Option<Duration> {
    error
        .get("details")?
        .as_array()?
        .iter()
        .filter(|d| {
            d.get("@type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("google.rpc.RetryInfo"))
        })
        .find_map(|d| {
            let s = d.get("retryDelay")?.as_str()?.trim().strip_suffix('s')?;
            let secs: f64 = s.parse().ok()?;
            (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
        })
}

fn error_reason(error: &Value) -> Option<&str> {
    error
        .get("details")?
        .as_array()?
        .iter()
        .find_map(|d| d.get("reason").and_then(Value::as_str))
}

/// Classifies a Gemini error (`{"error": {code, message, status, details}}`): an invalid key
/// (which Gemini answers with 400) is an auth error, a 429 carrying `RetryInfo` is a rate
/// limit retried after that delay, the rest as for every provider.
pub fn classify_error(status: u16, retry_after: Option<Duration>, body: &str) -> LlmError {
    let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let error = parsed.get("error").cloned().unwrap_or(Value::Null);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let delay = retry_delay(&error).or(retry_after);
    if error_reason(&error) == Some("API_KEY_INVALID")
        || message.to_ascii_lowercase().contains("api key not valid")
    {
        return LlmError::Auth { status, message };
    }
    if status == 429 && retry_delay(&error).is_some() {
        return LlmError::RateLimit {
            retry_after: delay,
            message,
        };
    }
    classify_http(status, delay, body)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Open {
    Thinking,
    Text,
}

/// Folds `GenerateContentResponse`s (stream events or one whole response) into chunks.
#[derive(Debug)]
pub(crate) struct Converter {
    message_id: String,
    as_text: bool,
    /// The block text is going into, and its index.
    open: Option<(Open, i64)>,
    next_index: i64,
    calls: usize,
    usage: Option<Value>,
    model: Option<String>,
    response_id: Option<String>,
    finish: Option<String>,
    /// Function calls whose arguments are still streaming (`willContinue`), oldest first.
    pending: Vec<PendingCall>,
}

impl Converter {
    pub(crate) fn new(message_id: String, as_text: bool) -> Converter {
        Converter {
            message_id,
            as_text,
            open: None,
            next_index: 0,
            calls: 0,
            usage: None,
            model: None,
            response_id: None,
            finish: None,
            pending: Vec::new(),
        }
    }

    /// An empty chunk: plain text, or an empty block list (a `""` followed by blocks would
    /// stay in the merged content as a stray element).
    fn blank(&self) -> Message {
        let mut m = Message::ai_chunk("").with_id(self.message_id.clone());
        if !self.as_text {
            m.content = Content::Blocks(Vec::new());
        }
        m
    }

    fn fresh_index(&mut self) -> i64 {
        let i = self.next_index;
        self.next_index += 1;
        i
    }

    /// The index for more text of kind `kind`: the open block's, or a new one.
    fn index_for(&mut self, kind: Open) -> i64 {
        match self.open {
            Some((k, i)) if k == kind => i,
            _ => {
                let i = self.fresh_index();
                self.open = Some((kind, i));
                i
            }
        }
    }

    fn push_block(blocks: &mut Vec<Value>, block: Value) {
        // Parts of one event that continue the same block are joined.
        if let Some(last) = blocks.last_mut()
            && last.get("index") == block.get("index")
            && last.get("type") == block.get("type")
            && last.get("signature").is_none()
        {
            for field in ["text", "thinking"] {
                if let (Some(Value::String(l)), Some(Value::String(r))) =
                    (last.get(field).cloned(), block.get(field))
                {
                    last[field] = json!(format!("{l}{r}"));
                }
            }
            if let Some(sig) = block.get("signature") {
                last["signature"] = sig.clone();
            }
            return;
        }
        blocks.push(block);
    }

    /// One response (stream event) → at most one chunk.
    pub(crate) fn event(&mut self, data: &Value) -> Result<Option<Message>, LlmError> {
        if let Some(err) = data.get("error").filter(|e| e.is_object()) {
            let status = err
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(500);
            return Err(classify_error(status, None, &data.to_string()));
        }
        if let Some(u) = data.get("usageMetadata").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        if let Some(v) = data.get("modelVersion").and_then(Value::as_str) {
            self.model = Some(v.to_string());
        }
        if let Some(v) = data.get("responseId").and_then(Value::as_str) {
            self.response_id = Some(v.to_string());
        }
        let candidate = data
            .get("candidates")
            .and_then(Value::as_array)
            .and_then(|c| c.first());
        if candidate.is_none()
            && let Some(reason) = data
                .pointer("/promptFeedback/blockReason")
                .and_then(Value::as_str)
        {
            self.finish = Some(reason.to_string());
        }
        let mut m = self.blank();
        let mut blocks = Vec::new();
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut signatures = Map::new();
        let parts = candidate
            .and_then(|c| c.pointer("/content/parts"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for part in parts {
            let sig = part
                .get("thoughtSignature")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            if let Some(fc) = part.get("functionCall") {
                self.open = None;
                if let Some((chunk, signature)) = self.function_call(fc, sig)? {
                    if let (Some(sig), Some(id)) = (signature, &chunk.id) {
                        signatures.insert(id.clone(), json!(sig));
                    }
                    m.tool_call_chunks.push(chunk);
                }
                continue;
            }
            let Some(t) = part.get("text").and_then(Value::as_str) else {
                continue;
            };
            let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
            if self.as_text {
                if thought {
                    reasoning.push_str(t);
                } else {
                    text.push_str(t);
                }
                continue;
            }
            let (kind, field, ty) = if thought {
                (Open::Thinking, "thinking", "thinking")
            } else {
                (Open::Text, "text", "text")
            };
            if t.is_empty() && sig.is_none() {
                continue;
            }
            let index = self.index_for(kind);
            let mut block = json!({"type": ty, "index": index});
            block[field] = json!(t);
            if let Some(sig) = sig {
                block["signature"] = json!(sig);
                // A signed part ends its block: the next part starts a new one.
                self.open = None;
            }
            Self::push_block(&mut blocks, block);
        }
        if let Some(reason) = candidate
            .and_then(|c| c.get("finishReason"))
            .and_then(Value::as_str)
        {
            self.finish = Some(reason.to_string());
        }
        m.content = if self.as_text {
            Content::Text(text)
        } else {
            Content::Blocks(blocks)
        };
        if !reasoning.is_empty() {
            m.additional_kwargs
                .insert("reasoning_content".into(), json!(reasoning));
        }
        if !signatures.is_empty() {
            m.additional_kwargs
                .insert(CALL_SIGNATURES_KEY.into(), Value::Object(signatures));
        }
        let empty =
            m.content.is_empty() && m.tool_call_chunks.is_empty() && m.additional_kwargs.is_empty();
        Ok((!empty).then_some(m))
    }

    /// One `functionCall` part. A whole call comes back at once. A call whose arguments
    /// stream (`partialArgs` / `willContinue`, Vertex AI's streamed function-call arguments)
    /// is assembled across parts and comes back with its last part (one without
    /// `willContinue`, often an empty `functionCall`) or when the answer ends. A call that
    /// names no tool never comes back.
    fn function_call(
        &mut self,
        fc: &Value,
        sig: Option<&str>,
    ) -> Result<Option<(ToolCallChunk, Option<String>)>, LlmError> {
        let Some(fc) = fc.as_object() else {
            return Ok(None);
        };
        let wire_id = fc
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let name = fc
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.trim().is_empty());
        let partial = fc
            .get("partialArgs")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let continues = fc.get("willContinue").and_then(Value::as_bool) == Some(true);
        // The call this part continues: the one with its id, or, without an id, the call
        // opened last (unless the part names another tool).
        let open = match wire_id {
            Some(id) => self
                .pending
                .iter()
                .position(|c| c.wire_id.as_deref() == Some(id)),
            None => self
                .pending
                .len()
                .checked_sub(1)
                .filter(|i| name.is_none() || self.pending[*i].name.as_deref() == name),
        };
        let (mut call, slot) = match open {
            Some(i) => (self.pending.remove(i), i),
            None => (
                PendingCall::new(wire_id, self.fresh_index()),
                self.pending.len(),
            ),
        };
        if call.name.is_none() {
            call.name = name.map(str::to_string);
        }
        if call.signature.is_none() {
            call.signature = sig.map(str::to_string);
        }
        if let Some(Value::Object(args)) = fc.get("args") {
            call.args.extend(args.clone());
        }
        call.apply_partial_args(partial)?;
        if continues {
            self.pending.insert(slot, call);
            return Ok(None);
        }
        Ok(self.complete(call))
    }

    /// The tool-call chunk of a finished call (and its signature); none for a call that
    /// names no tool, which can be neither run nor answered.
    fn complete(&mut self, call: PendingCall) -> Option<(ToolCallChunk, Option<String>)> {
        let Some(name) = call.name else {
            if call.args.is_empty() && call.wire_id.is_none() {
                tracing::debug!("ignored an empty functionCall part");
            } else {
                tracing::warn!(args = ?call.args, "dropped a functionCall without a tool name");
            }
            return None;
        };
        let id = call.wire_id.unwrap_or_else(|| {
            let u = uuid::Uuid::new_v4().simple().to_string();
            format!("{SYNTHETIC_ID_PREFIX}{}", &u[..24])
        });
        self.calls += 1;
        let chunk = ToolCallChunk {
            name: Some(name),
            args: Some(Value::Object(call.args).to_string()),
            id: Some(id),
            index: Some(call.index),
            extra: Map::new(),
        };
        Some((chunk, call.signature))
    }

    /// The closing chunk with the finish reason, usage and any call whose arguments were
    /// still streaming, or an error if no response carried a finish reason.
    pub(crate) fn finish(&mut self) -> Result<Message, LlmError> {
        let Some(raw) = self.finish.clone() else {
            return Err(LlmError::Connection {
                message: "stream ended before a finish reason".into(),
            });
        };
        let mut m = self.blank();
        let mut signatures = Map::new();
        for call in std::mem::take(&mut self.pending) {
            if let Some((chunk, signature)) = self.complete(call) {
                if let (Some(sig), Some(id)) = (signature, &chunk.id) {
                    signatures.insert(id.clone(), json!(sig));
                }
                m.tool_call_chunks.push(chunk);
            }
        }
        if !signatures.is_empty() {
            m.additional_kwargs
                .insert(CALL_SIGNATURES_KEY.into(), Value::Object(signatures));
        }
        let md = &mut m.response_metadata;
        md.insert(
            "finish_reason".into(),
            json!(finish_reason(&raw, self.calls > 0)),
        );
        md.insert("stop_reason".into(), json!(raw));
        if let Some(model) = &self.model {
            md.insert("model_name".into(), json!(model));
        }
        md.insert("model_provider".into(), json!(PROVIDER));
        if let Some(id) = &self.response_id {
            md.insert("response_id".into(), json!(id));
        }
        m.usage_metadata = self.usage.as_ref().map(usage_metadata);
        m.chunk_position = Some("last".into());
        Ok(m)
    }

    /// A whole (non-streamed) response as one chunk.
    pub(crate) fn full(&mut self, resp: &Value) -> Result<Message, LlmError> {
        let mut m = match self.event(resp)? {
            Some(m) => m,
            None => self.blank(),
        };
        let last = self.finish()?;
        m.tool_call_chunks.extend(last.tool_call_chunks);
        if let Some(Value::Object(late)) = last.additional_kwargs.get(CALL_SIGNATURES_KEY) {
            if let Some(Value::Object(sigs)) = m.additional_kwargs.get_mut(CALL_SIGNATURES_KEY) {
                sigs.extend(late.clone());
            } else {
                m.additional_kwargs
                    .insert(CALL_SIGNATURES_KEY.into(), Value::Object(late.clone()));
            }
        }
        m.response_metadata.extend(last.response_metadata);
        m.usage_metadata = last.usage_metadata;
        m.chunk_position = last.chunk_position;
        Ok(m)
    }
}

/// A function call being assembled from its parts.
#[derive(Debug)]
struct PendingCall {
    /// The id Gemini gave the call, if any (later parts of the call repeat it).
    wire_id: Option<String>,
    name: Option<String>,
    /// Its place among the answer's blocks and calls (taken from its first part).
    index: i64,
    args: Map<String, Value>,
    /// `jsonPath`s whose last string fragment said `willContinue`: the next one appends.
    open_strings: HashSet<String>,
    /// The `thoughtSignature` of its first signed part.
    signature: Option<String>,
}

/// One step of a `jsonPath`.
#[derive(Debug, PartialEq)]
enum PathStep {
    Key(String),
    Index(usize),
}

/// Array indexes beyond this in a `jsonPath` are refused (a runaway index is not an array).
const MAX_PATH_INDEX: usize = 10_000;

impl PendingCall {
    fn new(wire_id: Option<&str>, index: i64) -> PendingCall {
        PendingCall {
            wire_id: wire_id.map(str::to_string),
            name: None,
            index,
            args: Map::new(),
            open_strings: HashSet::new(),
            signature: None,
        }
    }

    /// Applies `PartialArg`s: each sets the value at its `jsonPath` (objects and arrays made
    /// as needed); a string continues the one before it at the same path when that one said
    /// `willContinue`. A fragment without a value changes nothing.
    fn apply_partial_args(&mut self, partial: &[Value]) -> Result<(), LlmError> {
        for p in partial {
            let Some(path) = p.get("jsonPath").and_then(Value::as_str) else {
                continue;
            };
            let text = p.get("stringValue").and_then(Value::as_str);
            let value = if text.is_some() {
                None
            } else if let Some(v) = p
                .get("numberValue")
                .filter(|v| v.is_number())
                .or_else(|| p.get("boolValue").filter(|v| v.is_boolean()))
            {
                Some(v.clone())
            } else if p.get("nullValue").is_some() {
                Some(Value::Null)
            } else {
                continue;
            };
            let steps = parse_json_path(path).ok_or_else(|| LlmError::Malformed {
                message: format!("functionCall partialArgs: unsupported jsonPath '{path}'"),
            })?;
            let append = self.open_strings.contains(path);
            let slot = slot_at(&mut self.args, &steps).ok_or_else(|| LlmError::Malformed {
                message: format!(
                    "functionCall partialArgs: '{path}' does not fit the arguments streamed so far"
                ),
            })?;
            match (text, value) {
                (Some(t), _) => match slot {
                    Value::String(s) if append => s.push_str(t),
                    other => *other = Value::String(t.to_string()),
                },
                (None, Some(v)) => *slot = v,
                (None, None) => {}
            }
            if text.is_some() && p.get("willContinue").and_then(Value::as_bool) == Some(true) {
                self.open_strings.insert(path.to_string());
            } else {
                self.open_strings.remove(path);
            }
        }
        Ok(())
    }
}

/// The steps of an RFC 9535 normalized path below the root: `$.a.b`, `$['a']`, `$.a[0]`.
/// None for anything else (wildcards, filters, descendants, slices) or the root itself.
fn parse_json_path(path: &str) -> Option<Vec<PathStep>> {
    let mut rest = path.strip_prefix('$')?;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            if key.is_empty() || key == "*" {
                return None;
            }
            steps.push(PathStep::Key(key.to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            if let Some(quote) = r.chars().next().filter(|c| *c == '\'' || *c == '"') {
                let (key, after) = quoted_name(&r[1..], quote)?;
                steps.push(PathStep::Key(key));
                rest = after.strip_prefix(']')?;
            } else {
                let end = r.find(']')?;
                let i: usize = r[..end].parse().ok().filter(|i| *i <= MAX_PATH_INDEX)?;
                steps.push(PathStep::Index(i));
                rest = &r[end + 1..];
            }
        } else {
            return None;
        }
    }
    (!steps.is_empty()).then_some(steps)
}

/// A quoted member name (after its opening quote) and what follows its closing quote.
fn quoted_name(s: &str, quote: char) -> Option<(String, &str)> {
    let mut name = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        if c == quote {
            return Some((name, &s[i + 1..]));
        }
        if c != '\\' {
            name.push(c);
            continue;
        }
        let (_, e) = chars.next()?;
        name.push(match e {
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => {
                let hex: String = (0..4)
                    .filter_map(|_| chars.next().map(|(_, h)| h))
                    .collect();
                if hex.len() != 4 {
                    return None;
                }
                char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?
            }
            '\'' | '"' | '\\' | '/' => e,
            _ => return None,
        });
    }
    None
}

/// The value at `steps` below `root`, made (as `null`) with the objects and arrays that lead
/// to it; none when a step does not fit what is there (a key into a string, …).
fn slot_at<'a>(root: &'a mut Map<String, Value>, steps: &[PathStep]) -> Option<&'a mut Value> {
    let (PathStep::Key(first), rest) = steps.split_first()? else {
        return None;
    };
    let mut cur = root.entry(first.clone()).or_insert(Value::Null);
    for step in rest {
        if cur.is_null() {
            *cur = match step {
                PathStep::Key(_) => Value::Object(Map::new()),
                PathStep::Index(_) => Value::Array(Vec::new()),
            };
        }
        cur = match (step, cur) {
            (PathStep::Key(k), Value::Object(o)) => o.entry(k.clone()).or_insert(Value::Null),
            (PathStep::Index(i), Value::Array(a)) => {
                if a.len() <= *i {
                    a.resize(*i + 1, Value::Null);
                }
                &mut a[*i]
            }
            _ => return None,
        };
    }
    Some(cur)
}

struct SseFold {
    conv: Converter,
}

impl Fold for SseFold {
    type Event = eventsource_stream::Event;

    fn event(&mut self, ev: Self::Event) -> Result<Option<Message>, LlmError> {
        let data: Value = serde_json::from_str(&ev.data).map_err(|e| LlmError::Malformed {
            message: format!("invalid JSON in a Gemini stream event: {e}"),
        })?;
        self.conv.event(&data)
    }

    fn is_done(&self) -> bool {
        false
    }

    fn end(&mut self) -> Result<Option<Message>, LlmError> {
        self.conv.finish().map(Some)
    }
}

// ---------------------------------------------------------------------------------------
// The provider
// ---------------------------------------------------------------------------------------

/// A Gemini model over the native Generative Language API.
pub struct Gemini {
    info: ModelInfo,
    settings: ModelSettings,
    http: reqwest::Client,
    stream_url: String,
    generate_url: String,
    headers: reqwest::header::HeaderMap,
    observer: Option<RetryObserver>,
}

impl std::fmt::Debug for Gemini {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gemini")
            .field("info", &self.info)
            .field("url", &self.stream_url)
            .finish()
    }
}

impl Gemini {
    pub(crate) fn new(
        info: ModelInfo,
        settings: ModelSettings,
        http: reqwest::Client,
    ) -> Result<Gemini, String> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            let v = reqwest::header::HeaderValue::from_str(key)
                .map_err(|_| "api_key contains characters that cannot be sent in a header")?;
            headers.insert("x-goog-api-key", v);
        }
        for (k, v) in &settings.headers {
            headers.insert(k.clone(), v.clone());
        }
        let base = settings
            .base_url
            .clone()
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
        let (stream_url, generate_url) = endpoints(&base, &settings.model);
        Ok(Gemini {
            info,
            settings,
            http,
            stream_url,
            generate_url,
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
        Ok(build_body(req, &self.settings)?.0)
    }

    async fn send(&self, url: &str, body: &Value) -> Result<reqwest::Response, LlmError> {
        let timeout = self.settings.timeout;
        let call = self
            .http
            .post(url)
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
            let e = HttpError::from_response(resp).await;
            Err(classify_error(e.status, e.retry_after, &e.body))
        }
    }

    async fn attempt(
        &self,
        body: Arc<Value>,
        as_text: bool,
        message_id: String,
    ) -> Result<ChunkStream, LlmError> {
        let mut conv = Converter::new(message_id, as_text);
        if !self.settings.streaming {
            let resp = self.send(&self.generate_url, &body).await?;
            let timeout = self.settings.timeout;
            let bytes = tokio::time::timeout(timeout, resp.bytes())
                .await
                .map_err(|_| LlmError::Timeout {
                    message: format!("no response body within {:.1}s", timeout.as_secs_f64()),
                })?
                .map_err(|e| classify_reqwest(&e))?;
            let v: Value = serde_json::from_slice(&bytes).map_err(|e| LlmError::Malformed {
                message: format!("invalid JSON from Gemini: {e}"),
            })?;
            let msg = conv.full(&v)?;
            return Ok(futures::stream::iter([Ok(msg)]).boxed());
        }
        let resp = self.send(&self.stream_url, &body).await?;
        let events: Events<eventsource_stream::Event> = resp
            .bytes_stream()
            .eventsource()
            .map(|r| r.map_err(|e| classify_stream_error(&e)))
            .boxed();
        wire_stream::start(
            events,
            SseFold { conv },
            self.settings.timeout,
            self.settings.stream_chunk_timeout,
        )
        .await
    }
}

#[async_trait]
impl ChatModel for Gemini {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChunkStream, LlmError> {
        let (body, as_text) = build_body(&request, &self.settings)?;
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
    fn endpoints_and_versions() {
        assert_eq!(
            endpoints("https://generativelanguage.googleapis.com", "gemini-2.5-pro"),
            (
                "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse".to_string(),
                "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:generateContent".to_string()
            )
        );
        assert_eq!(
            endpoints("http://h/v1/", "models/g").1,
            "http://h/v1/models/g:generateContent"
        );
        assert_eq!(
            endpoints("http://h", "tunedModels/t").1,
            "http://h/v1beta/tunedModels/t:generateContent"
        );
        assert!(signatures_enforced("gemini-3-pro-preview"));
        assert!(signatures_enforced("models/gemini-3.1-flash"));
        assert!(!signatures_enforced("gemini-2.5-pro"));
        assert!(!signatures_enforced("gemma-3"));
    }

    #[test]
    fn schemas_are_cut_to_what_gemini_accepts() {
        let s = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "path": {"type": "string", "default": "/", "format": "uri", "description": "p"},
                "mode": {"const": "fast"},
                "limit": {"type": ["integer", "null"], "minimum": 1, "examples": [3]},
                "tags": {"type": "array"},
                "kind": {"anyOf": [{"$ref": "#/$defs/Kind"}, {"type": "null"}]},
                "n": {"enum": [1, 2]},
                "opts": {"type": "object", "properties": {}}
            },
            "required": ["path", "ghost"],
            "$defs": {"Kind": {"type": "string", "enum": ["a", "b"]}}
        });
        let out = sanitize_schema(&s);
        assert_eq!(
            out,
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "p"},
                    "mode": {"type": "string", "enum": ["fast"]},
                    "limit": {"type": "integer", "minimum": 1, "nullable": true},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "kind": {"type": "string", "enum": ["a", "b"], "nullable": true},
                    "n": {},
                    "opts": {"type": "object"}
                },
                "required": ["path"]
            })
        );
    }

    #[test]
    fn converts_a_tool_round_trip_with_signatures() {
        let mut ai = Message::ai(Content::Blocks(vec![
            json!({"type": "thinking", "thinking": "hm", "signature": "sig-t", "index": 0}),
            json!({"type": "text", "text": "calling", "index": 1}),
        ]))
        .with_tool_calls(vec![
            ToolCall::new("f", json!({"a": 1}), "gemini_call_1"),
            ToolCall::new("g", json!({}), "g-7"),
        ]);
        ai.additional_kwargs.insert(
            CALL_SIGNATURES_KEY.into(),
            json!({"gemini_call_1": "sig-call"}),
        );
        ai.response_metadata
            .insert("model_provider".into(), json!(PROVIDER));
        let msgs = [
            Message::system("sys"),
            Message::human("hi"),
            ai,
            Message::tool("out", "gemini_call_1", None),
            Message::tool("bad", "g-7", Some("g".into())).with_status_error(),
            Message::system("<system-reminder>date</system-reminder>"),
        ];
        let (system, contents) = convert_messages(msgs.iter(), "gemini-2.5-pro", false).unwrap();
        assert_eq!(system, Some(json!({"parts": [{"text": "sys"}]})));
        assert_eq!(contents.len(), 3);
        assert_eq!(
            contents[1],
            json!({"role": "model", "parts": [
                {"text": "hm", "thought": true, "thoughtSignature": "sig-t"},
                {"text": "calling"},
                {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "sig-call"},
                {"functionCall": {"name": "g", "args": {}, "id": "g-7"}}
            ]})
        );
        assert_eq!(
            contents[2],
            json!({"role": "user", "parts": [
                {"functionResponse": {"name": "f", "response": {"output": "out"}}},
                {"functionResponse": {"name": "g", "response": {"error": "bad"}, "id": "g-7"}},
                {"text": "<system-reminder>date</system-reminder>"}
            ]})
        );
    }

    #[test]
    fn foreign_signatures_are_dropped_and_gemini_3_gets_placeholders() {
        let mut claude = Message::ai(Content::Blocks(vec![
            json!({"type": "thinking", "thinking": "x", "signature": "claude-sig"}),
        ]))
        .with_tool_calls(vec![ToolCall::new("f", json!({}), "toolu_1")]);
        claude
            .response_metadata
            .insert("model_provider".into(), json!("anthropic"));
        let msgs = [
            Message::human("q"),
            claude,
            Message::tool("r", "toolu_1", Some("f".into())),
        ];
        let (_, contents) = convert_messages(msgs.iter(), "gemini-2.5-flash", false).unwrap();
        assert_eq!(
            contents[1]["parts"],
            json!([{"functionCall": {"name": "f", "args": {}, "id": "toolu_1"}}])
        );
        let (_, contents) = convert_messages(msgs.iter(), "gemini-3-pro", false).unwrap();
        assert_eq!(
            contents[1]["parts"][0]["thoughtSignature"],
            PLACEHOLDER_SIGNATURE
        );
    }

    #[test]
    fn folds_stream_events_with_thoughts_calls_and_usage() {
        let mut c = Converter::new("id".into(), false);
        let events = [
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "hmm ", "thought": true}]}}],
                   "usageMetadata": {"promptTokenCount": 9}, "modelVersion": "gemini-x"}),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok", "thought": true}]}}]}),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi"}, {"text": " there"}]}}]}),
            json!({"candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": "f", "args": {"a": 2}}, "thoughtSignature": "s1"},
                {"functionCall": {"name": "g", "args": {}, "id": "g1"}}
            ]}, "finishReason": "STOP"}],
                   "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                                     "thoughtsTokenCount": 3, "cachedContentTokenCount": 4,
                                     "totalTokenCount": 18}}),
        ];
        let mut chunks: Vec<Message> = events.iter().filter_map(|e| c.event(e).unwrap()).collect();
        chunks.push(c.finish().unwrap());
        let m = merge_chunks(&chunks);
        assert_eq!(m.text(), "Hi there");
        let Content::Blocks(blocks) = &m.content else {
            panic!("{:?}", m.content)
        };
        assert_eq!(blocks[0]["thinking"], "hmm ok");
        assert_eq!(m.tool_calls.len(), 2);
        assert_eq!(m.tool_calls[0].args["a"], 2);
        let id = m.tool_calls[0].id.clone().unwrap();
        assert!(id.starts_with(SYNTHETIC_ID_PREFIX));
        assert_eq!(m.tool_calls[1].id.as_deref(), Some("g1"));
        assert_eq!(m.additional_kwargs[CALL_SIGNATURES_KEY][&id], "s1");
        assert_eq!(m.response_metadata["finish_reason"], "tool_calls");
        assert_eq!(m.response_metadata["stop_reason"], "STOP");
        assert_eq!(m.response_metadata["model_name"], "gemini-x");
        let u = m.usage_metadata.clone().unwrap();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.total_tokens),
            (10, 8, 18)
        );
        assert_eq!(u.output_token_details.unwrap()["reasoning"], 3);
        assert_eq!(u.input_token_details.unwrap()["cache_read"], 4);
        // Replayed: the call keeps its signature, the made-up id stays local.
        let (_, contents) =
            convert_messages([Message::human("q"), m].iter(), "gemini-2.5-pro", false).unwrap();
        assert_eq!(
            contents[1]["parts"],
            json!([
                {"text": "Hi there"},
                {"functionCall": {"name": "f", "args": {"a": 2}}, "thoughtSignature": "s1"},
                {"functionCall": {"name": "g", "args": {}, "id": "g1"}}
            ]),
            "unsigned thoughts are not sent back"
        );
    }

    #[test]
    fn text_signatures_close_blocks_and_errors_classify() {
        let mut c = Converter::new("id".into(), false);
        let a = c
            .event(&json!({"candidates": [{"content": {"parts": [{"text": "a"}]}}]}))
            .unwrap()
            .unwrap();
        let b = c
            .event(&json!({"candidates": [{"content": {"parts": [{"text": "", "thoughtSignature": "ts"}]}, "finishReason": "STOP"}]}))
            .unwrap()
            .unwrap();
        let m = merge_chunks([&a, &b, &c.finish().unwrap()]);
        assert_eq!(
            m.content,
            Content::Blocks(vec![
                json!({"type": "text", "text": "a", "index": 0, "signature": "ts"})
            ])
        );
        assert_eq!(m.response_metadata["finish_reason"], "stop");

        let mut c = Converter::new("id".into(), true);
        assert!(matches!(c.finish(), Err(LlmError::Connection { .. })));
        let e = c
            .event(&json!({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}))
            .unwrap_err();
        assert!(matches!(e, LlmError::Server { status: 503, .. }), "{e:?}");
        let body = json!({"error": {"code": 429, "message": "You exceeded your current quota", "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}]}});
        let e = classify_error(429, None, &body.to_string());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert_eq!(e.kind(), "rate_limit");
        let body = json!({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]}});
        assert!(matches!(
            classify_error(400, None, &body.to_string()),
            LlmError::Auth { status: 400, .. }
        ));
        let blocked = c
            .full(&json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}))
            .unwrap();
        assert_eq!(blocked.response_metadata["finish_reason"], "content_filter");
    }

    #[test]
    fn json_paths_of_streamed_arguments() {
        use PathStep::{Index, Key};
        assert_eq!(
            parse_json_path("$.a.b[2]['c d'][\"e\\\"f\"]['\\u00e9']"),
            Some(vec![
                Key("a".into()),
                Key("b".into()),
                Index(2),
                Key("c d".into()),
                Key("e\"f".into()),
                Key("é".into())
            ])
        );
        for bad in [
            "$",
            "a",
            "$..a",
            "$.*",
            "$[*]",
            "$[-1]",
            "$[1:2]",
            "$['a'",
            "$[?@.a]",
            "$.a[",
            "$[100000]",
            "$['\\u00']",
        ] {
            assert_eq!(parse_json_path(bad), None, "{bad}");
        }
        let mut args = Map::new();
        let steps = parse_json_path("$.list[1].name").unwrap();
        *slot_at(&mut args, &steps).unwrap() = json!("x");
        assert_eq!(
            Value::Object(args.clone()),
            json!({"list": [null, {"name": "x"}]})
        );
        // A key into a string, an index into an object, an index at the root: no fit.
        for clash in ["$.list[1].name.first", "$.list.name", "$[0]"] {
            let steps = parse_json_path(clash).unwrap();
            assert!(slot_at(&mut args, &steps).is_none(), "{clash}");
        }
    }

    #[test]
    fn partial_args_append_strings_only_after_will_continue() {
        let mut call = PendingCall::new(None, 0);
        call.apply_partial_args(&[
            json!({"jsonPath": "$.a", "stringValue": "one ", "willContinue": true}),
            json!({"jsonPath": "$.a", "stringValue": "two"}),
            // The previous fragment closed $.a: this one replaces it.
            json!({"jsonPath": "$.b", "stringValue": "x"}),
            json!({"jsonPath": "$.b", "stringValue": "y"}),
            json!({"jsonPath": "$.n", "numberValue": 2.5}),
            json!({"jsonPath": "$.t", "boolValue": false}),
            json!({"jsonPath": "$.z", "nullValue": null}),
            json!({"jsonPath": "$.ignored", "willContinue": true}),
        ])
        .unwrap();
        assert_eq!(
            Value::Object(call.args.clone()),
            json!({"a": "one two", "b": "y", "n": 2.5, "t": false, "z": null})
        );
        let e = call
            .apply_partial_args(&[json!({"jsonPath": "$.a.b", "numberValue": 1})])
            .unwrap_err();
        assert!(matches!(e, LlmError::Malformed { .. }), "{e:?}");
        let e = call
            .apply_partial_args(&[json!({"jsonPath": "$..a", "numberValue": 1})])
            .unwrap_err();
        assert!(e.to_string().contains("unsupported jsonPath"), "{e}");
    }

    #[test]
    fn streamed_calls_end_with_their_last_part_or_with_the_answer() {
        let mut c = Converter::new("id".into(), false);
        let ev = |parts: Value| json!({"candidates": [{"content": {"parts": parts}}]});
        // Two calls streaming at once, told apart by id; the first ends without an end
        // marker, the second is still open when the answer ends.
        let events = [
            ev(
                json!([{"functionCall": {"id": "a", "name": "f", "willContinue": true}},
                      {"functionCall": {"id": "b", "name": "g", "willContinue": true,
                         "args": {"fixed": 1}}, "thoughtSignature": "sig-b"}]),
            ),
            ev(json!([{"functionCall": {"id": "a", "partialArgs": [
                {"jsonPath": "$.x", "stringValue": "1"}]}}])),
            ev(json!([{"functionCall": {"id": "b", "partialArgs": [
                {"jsonPath": "$.y", "stringValue": "par", "willContinue": true}],
                "willContinue": true}}])),
            json!({"candidates": [{"content": {"parts": [{"functionCall": {"id": "b",
                "partialArgs": [{"jsonPath": "$.y", "stringValue": "tial"}],
                "willContinue": true}}]}, "finishReason": "STOP"}]}),
        ];
        let mut chunks: Vec<Message> = events.iter().filter_map(|e| c.event(e).unwrap()).collect();
        assert_eq!(
            chunks.len(),
            1,
            "only the finished call comes back before the end"
        );
        chunks.push(c.finish().unwrap());
        let m = merge_chunks(&chunks);
        assert_eq!(m.tool_calls.len(), 2);
        assert_eq!(
            (m.tool_calls[0].name.as_str(), m.tool_calls[0].id.as_deref()),
            ("f", Some("a"))
        );
        assert_eq!(
            Value::Object(m.tool_calls[0].args.clone()),
            json!({"x": "1"})
        );
        assert_eq!(m.tool_calls[1].name, "g");
        assert_eq!(
            Value::Object(m.tool_calls[1].args.clone()),
            json!({"fixed": 1, "y": "partial"})
        );
        assert_eq!(
            m.additional_kwargs[CALL_SIGNATURES_KEY],
            json!({"b": "sig-b"})
        );
        assert_eq!(m.response_metadata["finish_reason"], "tool_calls");

        // A whole (non-streamed) response with streamed-style parts folds the same way.
        let mut c = Converter::new("id".into(), false);
        let whole = c
            .full(&json!({"candidates": [{"content": {"parts": [
                {"functionCall": {"name": "f", "willContinue": true}, "thoughtSignature": "s"},
                {"functionCall": {"partialArgs": [{"jsonPath": "$.k", "numberValue": 3}],
                                  "willContinue": true}}]},
                "finishReason": "STOP"}]}))
            .unwrap();
        let m = merge_chunks([&whole]);
        assert_eq!(m.tool_calls.len(), 1);
        assert_eq!(Value::Object(m.tool_calls[0].args.clone()), json!({"k": 3}));
        let id = m.tool_calls[0].id.clone().unwrap();
        assert_eq!(m.additional_kwargs[CALL_SIGNATURES_KEY][&id], "s");
    }
}
