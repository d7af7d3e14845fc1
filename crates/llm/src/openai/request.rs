//! Building the chat-completions request body from a [`ChatRequest`], with the per-provider
//! quirks of DeerFlow's patched model classes.

use super::wire::{ChatCompletionRequest, WireFunction, WireMessage, WireToolCall, WireTools};
use crate::content::{image_note, image_ref, is_image_block};
use crate::roles::{self, Provider};
use crate::settings::ModelSettings;
use crate::{ChatRequest, LlmError};
use fawn_state::{Content, Message};
use serde_json::{Map, Value, json};
use std::collections::HashSet;

/// How earlier assistant reasoning is sent back to the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningReplay {
    /// Not sent (plain OpenAI, LangChain's ChatDeepSeek).
    Never,
    /// As `reasoning_content` on each assistant message (DeepSeek, MiMo, StepFun, Kimi, …).
    ReasoningContent,
    /// As vLLM's `reasoning` field.
    VllmReasoning,
}

/// Where streamed reasoning is read from, in order of preference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningSource {
    /// `reasoning_content`, then `reasoning`, then `reasoning_details`.
    Standard,
    /// `reasoning`, then `reasoning_content`; the raw `reasoning` is kept too (vLLM).
    Vllm,
    /// `reasoning_details`, then `reasoning_content` (MiniMax with `reasoning_split`).
    MiniMax,
}

/// The behaviour of one DeerFlow model class on the OpenAI-compatible wire.
#[derive(Clone, Debug, PartialEq)]
pub struct Quirks {
    /// The canonical `use:` value.
    pub class: &'static str,
    /// `response_metadata.model_provider` and `ModelInfo::provider`.
    pub provider: &'static str,
    pub replay: ReasoningReplay,
    pub reasoning_source: ReasoningSource,
    /// DeepSeek: tool-call history needs `content: ""` (not null) and, with thinking on,
    /// `reasoning_content: ""` when none was produced.
    pub deepseek_history: bool,
    /// MiMo: with thinking on, drop assistant turns that have no reasoning to replay (and
    /// their tool results), since MiMo rejects them.
    pub drop_unreasoned_turns: bool,
    /// MiniMax: drop `name` from user messages.
    pub strip_user_names: bool,
    /// MiniMax: send `reasoning_split: true`.
    pub reasoning_split: bool,
    /// Gemini via OpenAI gateways: replay provider extras (`thought_signature`, …) kept in
    /// `additional_kwargs.tool_calls` onto the outgoing tool calls.
    pub replay_tool_call_extras: bool,
    /// Send text-only content lists as plain strings.
    pub collapse_text_parts: bool,
    /// vLLM: `chat_template_kwargs.thinking` becomes `enable_thinking`.
    pub vllm_template_kwargs: bool,
    pub default_base_url: &'static str,
    /// Environment variables tried for the API key when the config has none.
    pub api_key_env: &'static [&'static str],
    /// The name `max_tokens` is sent under: LangChain's `ChatOpenAI` (and every DeerFlow
    /// class built on it) sends `max_completion_tokens`, which OpenAI's reasoning models
    /// require; `ChatDeepSeek` keeps `max_tokens`.
    pub max_tokens_field: &'static str,
}

impl Quirks {
    /// Plain `langchain_openai:ChatOpenAI`.
    pub const fn openai(class: &'static str) -> Quirks {
        Quirks {
            class,
            provider: "openai",
            replay: ReasoningReplay::Never,
            reasoning_source: ReasoningSource::Standard,
            deepseek_history: false,
            drop_unreasoned_turns: false,
            strip_user_names: false,
            reasoning_split: false,
            replay_tool_call_extras: false,
            collapse_text_parts: false,
            vllm_template_kwargs: false,
            default_base_url: "https://api.openai.com/v1",
            api_key_env: &["OPENAI_API_KEY"],
            max_tokens_field: "max_completion_tokens",
        }
    }
}

/// Keys the request structure owns; a parameter with one of these names is not flattened.
const RESERVED: &[&str] = &["model", "messages", "tools", "stream"];

fn bad(message: String) -> LlmError {
    LlmError::BadRequest {
        status: 400,
        message,
    }
}

/// The full request body for `req`.
pub(crate) fn build_request(
    req: &ChatRequest,
    settings: &ModelSettings,
    quirks: &Quirks,
    stream: bool,
) -> Result<ChatCompletionRequest, LlmError> {
    let mut params = settings.resolve_params(
        req.thinking_enabled,
        req.reasoning_effort.as_deref(),
        req.max_tokens,
        req.temperature,
    );
    let extra_body = params.remove("extra_body");
    let model_kwargs = params.remove("model_kwargs");
    for source in [model_kwargs, extra_body].into_iter().flatten() {
        match source {
            Value::Object(o) => params.extend(o),
            Value::Null => {}
            other => {
                return Err(bad(format!(
                    "extra_body/model_kwargs must be an object, got {other}"
                )));
            }
        }
    }
    if quirks.max_tokens_field != "max_tokens"
        && !params.contains_key(quirks.max_tokens_field)
        && let Some(v) = params.remove("max_tokens")
    {
        params.insert(quirks.max_tokens_field.to_string(), v);
    }
    params.extend(req.extra.clone());
    if quirks.reasoning_split {
        params.insert("reasoning_split".into(), Value::Bool(true));
    }
    if quirks.vllm_template_kwargs
        && let Some(Value::Object(ctk)) = params.get_mut("chat_template_kwargs")
        && let Some(v) = ctk.remove("thinking")
    {
        ctk.entry("enable_thinking").or_insert(v);
    }
    for k in RESERVED {
        params.remove(*k);
    }
    let tool_choice = req
        .tool_choice
        .clone()
        .or_else(|| params.remove("tool_choice"));
    params.remove("tool_choice");
    let stream_options = match params.remove("stream_options") {
        Some(v) if stream => Some(v),
        _ if stream && settings.stream_usage => Some(json!({"include_usage": true})),
        _ => None,
    };
    let thinking_on = params
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        == Some("enabled");
    let messages = convert_messages(&req.messages, quirks, settings.supports_vision, thinking_on)?;
    let tools = WireTools(req.tools.clone());
    Ok(ChatCompletionRequest {
        model: settings.model.clone(),
        messages,
        tools,
        tool_choice,
        stream,
        stream_options,
        params,
    })
}

/// Text of a content list's text blocks (and bare strings), joined with `sep`; `None` when
/// the list holds anything else.
fn text_only(blocks: &[Value], sep: &str) -> Option<String> {
    let mut parts = Vec::new();
    for b in blocks {
        match b {
            Value::String(s) => parts.push(s.as_str()),
            Value::Object(o) => {
                let ty = o.get("type").and_then(Value::as_str);
                if !matches!(ty, Some("text") | Some("input_text") | Some("output_text")) {
                    return None;
                }
                parts.push(o.get("text").and_then(Value::as_str)?);
            }
            _ => return None,
        }
    }
    Some(parts.join(sep))
}

/// User (and system) content: text parts, images (or a note for models without vision),
/// audio/file parts passed through, provider-private blocks (thinking, tool_use, …) dropped.
fn user_content(content: &Content, vision: bool, collapse: bool) -> Value {
    let blocks = match content {
        Content::Text(s) => return Value::String(s.clone()),
        Content::Blocks(b) => b,
    };
    let mut parts = Vec::new();
    for b in blocks {
        match b {
            Value::String(s) => parts.push(json!({"type": "text", "text": s})),
            Value::Object(o) => {
                let ty = o.get("type").and_then(Value::as_str).unwrap_or("");
                if ty == "text" {
                    let text = o.get("text").and_then(Value::as_str).unwrap_or("");
                    parts.push(json!({"type": "text", "text": text}));
                } else if is_image_block(b) {
                    if !vision {
                        parts.push(image_note());
                    } else if let Some(img) = image_ref(b) {
                        let mut iu = Map::new();
                        iu.insert("url".into(), Value::String(img.to_url()));
                        if let Some(detail) = o
                            .get("image_url")
                            .and_then(|i| i.get("detail"))
                            .or_else(|| o.get("detail"))
                        {
                            iu.insert("detail".into(), detail.clone());
                        }
                        parts.push(json!({"type": "image_url", "image_url": iu}));
                    } else {
                        parts.push(image_note());
                    }
                } else if matches!(ty, "input_audio" | "file") {
                    parts.push(b.clone());
                }
            }
            _ => {}
        }
    }
    if collapse && let Some(text) = text_only(&parts, "\n") {
        return Value::String(text);
    }
    if parts.is_empty() {
        return Value::String(String::new());
    }
    Value::Array(parts)
}

/// Assistant content as plain text (provider-private blocks are not sent back here).
fn assistant_text(content: &Content) -> String {
    content.text()
}

/// Tool-result content as text: text blocks joined, images noted, other blocks as JSON.
fn tool_text(content: &Content) -> String {
    match content {
        Content::Text(s) => s.clone(),
        Content::Blocks(blocks) => blocks
            .iter()
            .map(|b| match b {
                Value::String(s) => s.clone(),
                Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => o
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                other if is_image_block(other) => crate::content::IMAGE_OMITTED_NOTE.to_string(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(""),
    }
}

fn assistant_message(m: &Message, quirks: &Quirks, thinking_on: bool) -> WireMessage {
    let mut calls: Vec<WireToolCall> = m
        .tool_calls
        .iter()
        .map(|tc| WireToolCall {
            id: tc.id.clone().unwrap_or_default(),
            kind: "function".into(),
            function: WireFunction {
                name: tc.name.clone(),
                arguments: Value::Object(tc.args.clone()).to_string(),
            },
            extra: Map::new(),
        })
        .collect();
    calls.extend(m.invalid_tool_calls.iter().map(|tc| WireToolCall {
        id: tc.id.clone().unwrap_or_default(),
        kind: "function".into(),
        function: WireFunction {
            name: tc.name.clone().unwrap_or_default(),
            arguments: tc.args.clone().unwrap_or_default(),
        },
        extra: Map::new(),
    }));
    if quirks.replay_tool_call_extras
        && let Some(Value::Array(raw)) = m.additional_kwargs.get("tool_calls")
    {
        for (i, call) in calls.iter_mut().enumerate() {
            let by_id = raw.iter().find(|r| {
                !call.id.is_empty() && r.get("id").and_then(Value::as_str) == Some(&call.id)
            });
            let Some(Value::Object(r)) = by_id.or_else(|| raw.get(i)) else {
                continue;
            };
            for (k, v) in r {
                if !matches!(k.as_str(), "id" | "index" | "type" | "function") && !v.is_null() {
                    call.extra.insert(k.clone(), v.clone());
                }
            }
        }
    }
    let text = assistant_text(&m.content);
    let has_calls = !calls.is_empty();
    let content = if has_calls && text.is_empty() {
        if quirks.deepseek_history {
            Value::String(String::new())
        } else {
            Value::Null
        }
    } else {
        Value::String(text)
    };
    let mut w = WireMessage::new("assistant", content);
    w.name = m.name.clone();
    if has_calls {
        w.tool_calls = Some(calls);
    }
    let kw = &m.additional_kwargs;
    match quirks.replay {
        ReasoningReplay::Never => {}
        ReasoningReplay::ReasoningContent => {
            if let Some(rc) = kw.get("reasoning_content").filter(|v| !v.is_null()) {
                w.reasoning_content = Some(rc.clone());
            }
        }
        ReasoningReplay::VllmReasoning => {
            if let Some(r) = kw
                .get("reasoning")
                .filter(|v| !v.is_null())
                .or_else(|| kw.get("reasoning_content").filter(|v| !v.is_null()))
            {
                w.reasoning = Some(r.clone());
            }
        }
    }
    if quirks.deepseek_history && thinking_on && has_calls && w.reasoning_content.is_none() {
        w.reasoning_content = Some(Value::String(String::new()));
    }
    w
}

/// Converts the conversation to wire messages.
pub(crate) fn convert_messages<'a, I>(
    messages: I,
    quirks: &Quirks,
    vision: bool,
    thinking_on: bool,
) -> Result<Vec<WireMessage>, LlmError>
where
    I: IntoIterator<Item = &'a Message>,
    I::IntoIter: ExactSizeIterator,
{
    let messages = messages.into_iter();
    let mut out = Vec::with_capacity(messages.len());
    let mut dropped_calls: HashSet<String> = HashSet::new();
    for (i, m) in messages.enumerate() {
        let Some(role) = roles::classify(m, i, Provider::OpenAi)? else {
            continue;
        };
        let role = role.openai();
        let w = match role {
            "assistant" => {
                let w = assistant_message(m, quirks, thinking_on);
                if quirks.drop_unreasoned_turns && thinking_on {
                    let has_reasoning = w
                        .reasoning_content
                        .as_ref()
                        .and_then(Value::as_str)
                        .is_some_and(|s| !s.trim().is_empty());
                    if !has_reasoning {
                        for c in w.tool_calls.iter().flatten() {
                            if !c.id.is_empty() {
                                dropped_calls.insert(c.id.clone());
                            }
                        }
                        continue;
                    }
                }
                w
            }
            "tool" => {
                let Some(id) = m.tool_call_id.clone() else {
                    return Err(bad(format!(
                        "messages[{i}]: tool message has no tool_call_id"
                    )));
                };
                if dropped_calls.contains(&id) {
                    continue;
                }
                let mut w = WireMessage::new("tool", Value::String(tool_text(&m.content)));
                w.tool_call_id = Some(id);
                w
            }
            "function" => {
                let mut w = WireMessage::new("function", Value::String(tool_text(&m.content)));
                w.name = m.name.clone();
                w
            }
            "system" | "developer" => {
                let content = match &m.content {
                    Content::Text(s) => Value::String(s.clone()),
                    Content::Blocks(_) => Value::String(m.content.text()),
                };
                let mut w = WireMessage::new(role, content);
                w.name = m.name.clone();
                w
            }
            _ => {
                let mut w = WireMessage::new(
                    role,
                    user_content(&m.content, vision, quirks.collapse_text_parts),
                );
                if !(quirks.strip_user_names && role == "user") {
                    w.name = m.name.clone();
                }
                w
            }
        };
        out.push(w);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_state::ToolCall;

    fn deepseek() -> Quirks {
        Quirks {
            replay: ReasoningReplay::ReasoningContent,
            deepseek_history: true,
            collapse_text_parts: true,
            ..Quirks::openai("deerflow.models.patched_deepseek:PatchedChatDeepSeek")
        }
    }

    fn history() -> Vec<Message> {
        let mut ai = Message::ai("").with_tool_calls(vec![ToolCall::new(
            "search",
            json!({"q": "x"}),
            "call_1",
        )]);
        ai.additional_kwargs
            .insert("reasoning_content".into(), json!("let me search"));
        let plain = Message::ai("").with_tool_calls(vec![ToolCall::new("ls", json!({}), "call_2")]);
        vec![
            Message::system("sys"),
            Message::human("hi").with_name("user-input"),
            ai,
            Message::tool("result", "call_1", Some("search".into())),
            plain,
            Message::tool("files", "call_2", None),
            Message::remove("gone"),
        ]
    }

    #[test]
    fn deepseek_replays_reasoning_and_fills_tool_history() {
        let out = convert_messages(&history(), &deepseek(), false, true).unwrap();
        let v: Vec<Value> = out
            .iter()
            .map(|m| serde_json::to_value(m).unwrap())
            .collect();
        assert_eq!(v.len(), 6);
        assert_eq!(v[1]["name"], "user-input");
        assert_eq!(v[2]["content"], "");
        assert_eq!(v[2]["reasoning_content"], "let me search");
        assert_eq!(
            v[2]["tool_calls"][0]["function"]["arguments"],
            "{\"q\":\"x\"}"
        );
        assert_eq!(v[3]["tool_call_id"], "call_1");
        assert!(v[3].get("name").is_none());
        assert_eq!(
            v[4]["reasoning_content"], "",
            "thinking tool turn gets a placeholder"
        );
    }

    #[test]
    fn plain_openai_sends_no_reasoning_and_null_content() {
        let out = convert_messages(&history(), &Quirks::openai("x"), false, true).unwrap();
        let v = serde_json::to_value(&out[2]).unwrap();
        assert!(v["content"].is_null());
        assert!(v.get("reasoning_content").is_none());
    }

    #[test]
    fn mimo_drops_turns_without_reasoning_and_minimax_strips_user_names() {
        let q = Quirks {
            replay: ReasoningReplay::ReasoningContent,
            drop_unreasoned_turns: true,
            ..Quirks::openai("mimo")
        };
        let out = convert_messages(&history(), &q, false, true).unwrap();
        assert_eq!(out.len(), 4, "unreasoned turn and its tool result dropped");
        assert!(
            out.iter()
                .all(|m| m.tool_call_id.as_deref() != Some("call_2"))
        );
        let q = Quirks {
            strip_user_names: true,
            ..Quirks::openai("minimax")
        };
        let out = convert_messages(&history(), &q, false, false).unwrap();
        assert!(out[1].name.is_none());
    }

    #[test]
    fn images_for_vision_and_notes_otherwise() {
        let m = Message::human(Content::Blocks(vec![
            json!({"type": "text", "text": "look"}),
            json!({"type": "image", "source_type": "base64", "data": "QUJD", "mime_type": "image/png"}),
            json!({"type": "thinking", "thinking": "private"}),
        ]));
        let out =
            convert_messages(std::slice::from_ref(&m), &Quirks::openai("x"), true, false).unwrap();
        assert_eq!(
            out[0].content,
            json!([{"type": "text", "text": "look"},
                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}])
        );
        let out = convert_messages(&[m], &Quirks::openai("x"), false, false).unwrap();
        assert_eq!(
            out[0].content[1]["text"],
            crate::content::IMAGE_OMITTED_NOTE
        );
    }

    #[test]
    fn tool_message_without_id_is_a_clear_error() {
        let mut t = Message::tool("x", "id", None);
        t.tool_call_id = None;
        let err = convert_messages(&[t], &Quirks::openai("x"), false, false).unwrap_err();
        assert!(
            err.to_string()
                .contains("messages[0]: tool message has no tool_call_id")
        );
    }
}
