//! Our own serde types for the chat-completions wire format (async-openai's "bring your own
//! types"). Every struct keeps unknown fields in a flattened map so vendor extensions such as
//! `reasoning_content`, `reasoning`, `reasoning_details` or `thought_signature` survive.

use crate::ToolSpec;
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::sync::Arc;

/// Deserializes `null` as the type's default (some gateways send `"choices": null`).
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `POST /chat/completions` body.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatCompletionRequest {
    pub model: String,
    pub messages: Vec<WireMessage>,
    #[serde(skip_serializing_if = "WireTools::is_empty")]
    pub tools: WireTools,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<Value>,
    /// Every other request parameter (`max_tokens`, `temperature`, `reasoning_effort`,
    /// `extra_body` contents, vendor keys), flattened into the top level.
    #[serde(flatten)]
    pub params: Map<String, Value>,
}

/// One message of the request.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WireMessage {
    pub role: String,
    /// A string, a list of content parts, or `null` (assistant turns with tool calls).
    pub content: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<WireToolCall>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Replayed reasoning (DeepSeek, MiMo, StepFun, SiliconFlow style).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<Value>,
    /// Replayed reasoning (vLLM style).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl WireMessage {
    pub fn new(role: &str, content: Value) -> WireMessage {
        WireMessage {
            role: role.to_string(),
            content,
            name: None,
            tool_calls: None,
            tool_call_id: None,
            reasoning_content: None,
            reasoning: None,
            extra: Map::new(),
        }
    }
}

/// An assistant tool call in the request (`arguments` is JSON text).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WireToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: WireFunction,
    /// Provider extras replayed verbatim (e.g. Gemini's `thought_signature`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WireFunction {
    pub name: String,
    pub arguments: String,
}

/// The tools offered to the model: the run's shared specs, written in the wire shape
/// (`{"type": "function", "function": {…}}`) when the request is serialized, so a call
/// does not copy every schema.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WireTools(pub Arc<[ToolSpec]>);

impl WireTools {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for WireTools {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for t in self.0.iter() {
            let parameters = if t.parameters.is_null() {
                Cow::Owned(json!({"type": "object", "properties": {}}))
            } else {
                Cow::Borrowed(&t.parameters)
            };
            seq.serialize_element(&WireTool {
                kind: "function",
                function: WireToolFunction {
                    name: &t.name,
                    description: &t.description,
                    parameters,
                },
            })?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Serialize)]
struct WireToolFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    parameters: Cow<'a, Value>,
}

/// A streamed `chat.completion.chunk`, or (with `message` instead of `delta`) a whole
/// `chat.completion`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ChatCompletionChunk {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub choices: Vec<WireChoice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
    #[serde(default)]
    pub system_fingerprint: Option<String>,
    #[serde(default)]
    pub service_tier: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct WireChoice {
    #[serde(default)]
    pub index: Option<i64>,
    #[serde(default)]
    pub delta: Option<WireDelta>,
    /// Non-streamed responses.
    #[serde(default)]
    pub message: Option<WireDelta>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub logprobs: Option<Value>,
}

/// A streamed delta (or a whole response message).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct WireDelta {
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub content: Option<Value>,
    #[serde(default)]
    pub reasoning_content: Option<Value>,
    #[serde(default)]
    pub reasoning: Option<Value>,
    #[serde(default)]
    pub reasoning_details: Option<Value>,
    #[serde(default, deserialize_with = "null_default")]
    pub tool_calls: Vec<WireToolCallDelta>,
    #[serde(default)]
    pub refusal: Option<Value>,
    /// Unknown vendor fields.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct WireToolCallDelta {
    #[serde(default)]
    pub index: Option<i64>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub function: Option<WireFunctionDelta>,
    /// Vendor extras (`thought_signature`, `extra_content`, …).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct WireFunctionDelta {
    #[serde(default)]
    pub name: Option<String>,
    /// Normally a JSON text fragment; some gateways send an object.
    #[serde(default)]
    pub arguments: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: Option<i64>,
    #[serde(default)]
    pub completion_tokens: Option<i64>,
    #[serde(default)]
    pub total_tokens: Option<i64>,
    #[serde(default)]
    pub prompt_tokens_details: Option<Value>,
    #[serde(default)]
    pub completion_tokens_details: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chunks_keep_vendor_fields_and_tolerate_nulls() {
        let c: ChatCompletionChunk = serde_json::from_value(json!({
            "id": "x", "choices": null, "usage": null, "provider": "p"
        }))
        .unwrap();
        assert!(c.choices.is_empty());
        assert_eq!(c.extra["provider"], "p");
        let c: ChatCompletionChunk = serde_json::from_value(json!({
            "choices": [{"index": 0, "delta": {"content": "a", "reasoning_content": "r",
                          "tool_calls": null, "vendor": {"k": 1}}, "finish_reason": null}]
        }))
        .unwrap();
        let d = c.choices[0].delta.as_ref().unwrap();
        assert_eq!(d.extra["vendor"], json!({"k": 1}));
        assert_eq!(d.reasoning_content, Some(json!("r")));
    }

    #[test]
    fn request_flattens_params() {
        let mut params = Map::new();
        params.insert("max_tokens".into(), json!(5));
        let r = ChatCompletionRequest {
            model: "m".into(),
            messages: vec![WireMessage::new("user", json!("hi"))],
            tools: WireTools::default(),
            tool_choice: None,
            stream: true,
            stream_options: Some(json!({"include_usage": true})),
            params,
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["max_tokens"], 5);
        assert_eq!(v["messages"][0], json!({"role": "user", "content": "hi"}));
        assert!(v.get("tools").is_none());
    }
}
