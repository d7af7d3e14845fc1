//! Our own serde types for the chat-completions wire format (async-openai's "bring your own
//! types"). The structs of a message keep unknown fields in a flattened map so vendor
//! extensions such as `reasoning_content`, `reasoning`, `reasoning_details` or
//! `thought_signature` survive.
//!
//! The four response structs (`ChatCompletionChunk`, `WireDelta`, `WireToolCallDelta`,
//! `WireUsage`) deserialize by hand: serde's derived `#[serde(flatten)]` buffers every object
//! into its private `Content` tree and deserializes it twice, which cost ~6.7% of the
//! server's CPU on streamed chunks. The visitors keep the derived semantics: every field
//! optional, `null` for a list means empty, unknown keys kept in `extra`, a repeated known
//! key is an error (`duplicate field`), a repeated unknown key keeps its last value. The
//! chunk itself keeps no unknown key: nothing reads its `object`, `created` or a gateway's
//! extras, and every streamed chunk carries some; it reads a gateway's `error` object.
//!
//! The offered tools are rendered to JSON text once per shared tool list ([`WireTools`]) and
//! reused by every call of a run.

use crate::ToolSpec;
use serde::de::{self, DeserializeSeed, MapAccess, Unexpected, Visitor};
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};

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
    /// Writes the cached wire JSON of each tool (see [`rendered_tools`]); the bytes are the
    /// same as serializing [`WireTool`] for every spec.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_empty() {
            return s.collect_seq(std::iter::empty::<&RawValue>());
        }
        let rendered = rendered_tools(&self.0).map_err(S::Error::custom)?;
        s.collect_seq(rendered.iter())
    }
}

/// One tool in the wire shape: `{"type":"function","function":{"name","description"
/// (omitted when empty),"parameters"}}`, a `null` schema written as an empty object schema.
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

impl<'a> WireTool<'a> {
    fn new(t: &'a ToolSpec) -> WireTool<'a> {
        let parameters = if t.parameters.is_null() {
            Cow::Owned(json!({"type": "object", "properties": {}}))
        } else {
            Cow::Borrowed(&*t.parameters)
        };
        WireTool {
            kind: "function",
            function: WireToolFunction {
                name: &t.name,
                description: &t.description,
                parameters,
            },
        }
    }
}

/// At most this many tool lists stay rendered. A run shares one list across all its model
/// calls, so this is roughly "runs in flight"; past it the oldest entry is dropped (and
/// re-rendered if it is used again).
const RENDERED_TOOLS_CAP: usize = 64;

/// A tool list rendered to wire JSON, keyed by the address of its shared allocation.
struct RenderedTools {
    /// Holding the `Weak` keeps the allocation (not the specs) alive, so no other list can
    /// get the same address while this entry exists; the specs behind an `Arc<[ToolSpec]>`
    /// cannot change while a `Weak` to them exists.
    tools: Weak<[ToolSpec]>,
    json: Arc<[Box<RawValue>]>,
}

static RENDERED_TOOLS: Mutex<Vec<RenderedTools>> = Mutex::new(Vec::new());

/// The wire JSON of each tool in `tools`, rendered on the first call for this list (the
/// run's `Arc<[ToolSpec]>`) and reused by later calls and retries.
fn rendered_tools(tools: &Arc<[ToolSpec]>) -> Result<Arc<[Box<RawValue>]>, serde_json::Error> {
    let addr = Arc::as_ptr(tools).cast::<ToolSpec>();
    let find = |cache: &[RenderedTools]| {
        cache
            .iter()
            .find(|e| e.tools.as_ptr().cast::<ToolSpec>() == addr)
            .map(|e| e.json.clone())
    };
    let lock = || {
        RENDERED_TOOLS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    };
    if let Some(json) = find(&lock()) {
        return Ok(json);
    }
    let json = tools
        .iter()
        .map(|t| serde_json::value::to_raw_value(&WireTool::new(t)))
        .collect::<Result<Arc<[_]>, _>>()?;
    let mut cache = lock();
    if let Some(json) = find(&cache) {
        return Ok(json);
    }
    cache.retain(|e| e.tools.strong_count() > 0);
    if cache.len() >= RENDERED_TOOLS_CAP {
        cache.remove(0);
    }
    cache.push(RenderedTools {
        tools: Arc::downgrade(tools),
        json: json.clone(),
    });
    Ok(json)
}

/// A streamed `chat.completion.chunk`, or (with `message` instead of `delta`) a whole
/// `chat.completion`. Deserialized by hand (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatCompletionChunk {
    pub id: Option<String>,
    pub model: Option<String>,
    /// `null` reads as empty (some gateways send `"choices": null`).
    pub choices: Vec<WireChoice>,
    pub usage: Option<WireUsage>,
    pub system_fingerprint: Option<String>,
    pub service_tier: Option<String>,
    /// The `error` object a gateway (OpenRouter, LiteLLM, …) sends in place of a chunk.
    /// Other top-level keys (`object`, `created`, a gateway's `provider`, …) are read
    /// nothing of and skipped without being kept: every streamed chunk carries some.
    pub error: Option<Value>,
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

/// A streamed delta (or a whole response message). Deserialized by hand.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WireDelta {
    pub role: Option<String>,
    pub content: Option<Value>,
    pub reasoning_content: Option<Value>,
    pub reasoning: Option<Value>,
    pub reasoning_details: Option<Value>,
    /// `null` reads as empty.
    pub tool_calls: Vec<WireToolCallDelta>,
    pub refusal: Option<Value>,
    /// Unknown vendor fields.
    pub extra: Map<String, Value>,
}

/// Deserialized by hand.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WireToolCallDelta {
    pub index: Option<i64>,
    pub id: Option<String>,
    /// The `type` key.
    pub kind: Option<String>,
    pub function: Option<WireFunctionDelta>,
    /// Vendor extras (`thought_signature`, `extra_content`, …).
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct WireFunctionDelta {
    /// A name that is not a string reads as none (the call then names no tool and is
    /// dropped) instead of failing the whole chunk.
    #[serde(default, deserialize_with = "string_or_none")]
    pub name: Option<String>,
    /// Normally a JSON text fragment; some gateways send an object.
    #[serde(default)]
    pub arguments: Option<Value>,
}

/// A string, or `None` for any other JSON value.
fn string_or_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

/// Deserialized by hand.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WireUsage {
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub total_tokens: Option<i64>,
    pub prompt_tokens_details: Option<Value>,
    pub completion_tokens_details: Option<Value>,
    /// Unknown usage keys.
    pub extra: Map<String, Value>,
}

/// A key of one of the hand-deserialized objects: a known field (its position in the
/// struct's key table, and its tag) or an unknown key for `extra`. Known keys are matched on
/// the borrowed text, so only unknown keys allocate.
enum Key<F> {
    Known(usize, F),
    Other(String),
    /// An unknown key of a struct that keeps none (not copied out of the input).
    Skipped,
}

/// Reads one map key against a struct's table of known keys; `.1`: whether an unknown key
/// is kept (for `extra`) or skipped.
struct KeySeed<F: 'static>(&'static [(&'static str, F)], bool);

impl<F: Copy> KeySeed<F> {
    fn find(&self, s: &str) -> Option<(usize, F)> {
        self.0
            .iter()
            .enumerate()
            .find_map(|(i, (name, f))| (*name == s).then_some((i, *f)))
    }
}

impl<'de, F: Copy> DeserializeSeed<'de> for KeySeed<F> {
    type Value = Key<F>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key<F>, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de, F: Copy> Visitor<'de> for KeySeed<F> {
    type Value = Key<F>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<F>, E> {
        Ok(match self.find(s) {
            Some((i, f)) => Key::Known(i, f),
            None if self.1 => Key::Other(s.to_owned()),
            None => Key::Skipped,
        })
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Key<F>, E> {
        Ok(match self.find(&s) {
            Some((i, f)) => Key::Known(i, f),
            None if self.1 => Key::Other(s),
            None => Key::Skipped,
        })
    }

    fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<Key<F>, E> {
        match std::str::from_utf8(b) {
            Ok(s) => self.visit_str(s),
            Err(_) => Err(E::invalid_value(Unexpected::Bytes(b), &self)),
        }
    }
}

/// Which known keys an object has had, so a repeated one is an error as with derived serde.
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn first<E: de::Error, F>(&mut self, i: usize, keys: &[(&'static str, F)]) -> Result<(), E> {
        let bit = 1u32 << i;
        if self.0 & bit != 0 {
            let name = keys.get(i).map_or("", |(name, _)| name);
            return Err(E::duplicate_field(name));
        }
        self.0 |= bit;
        Ok(())
    }
}

/// A struct deserialized by [`ExtraMapVisitor`]: known keys in a table, unknown keys in an
/// `extra` map (or, where [`ExtraMap::extra`] is `None`, skipped).
trait ExtraMap: Default {
    /// What a known key is.
    type Tag: Copy + 'static;
    /// For error messages (`struct …`, as derived serde says).
    const EXPECTING: &'static str;
    /// The known keys; a key's position is its bit in [`Seen`] (at most 32).
    const KEYS: &'static [(&'static str, Self::Tag)];
    /// Where unknown keys go; `None` when they are not kept (then not even copied).
    fn extra(&mut self) -> Option<&mut Map<String, Value>>;
    /// Reads the value of the known key `tag` into its field.
    fn read<'de, A: MapAccess<'de>>(&mut self, tag: Self::Tag, map: &mut A)
    -> Result<(), A::Error>;
}

/// The map visitor shared by the hand-written `Deserialize`s: fills `T::default()` key by
/// key, in one pass over the input.
struct ExtraMapVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: ExtraMap> Visitor<'de> for ExtraMapVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut out = T::default();
        let mut seen = Seen::default();
        let keeps_unknown = out.extra().is_some();
        while let Some(key) = map.next_key_seed(KeySeed(T::KEYS, keeps_unknown))? {
            match key {
                Key::Known(i, tag) => {
                    seen.first(i, T::KEYS)?;
                    out.read(tag, &mut map)?;
                }
                Key::Other(k) => {
                    let v = map.next_value()?;
                    if let Some(extra) = out.extra() {
                        extra.insert(k, v);
                    }
                }
                Key::Skipped => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

fn deserialize_extra_map<'de, D: Deserializer<'de>, T: ExtraMap>(d: D) -> Result<T, D::Error> {
    d.deserialize_map(ExtraMapVisitor(std::marker::PhantomData))
}

/// Reads a value that may be `null` for a list: `null` (or a missing key) is empty.
fn list_or_null<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
    map: &mut A,
) -> Result<Vec<T>, A::Error> {
    Ok(map.next_value::<Option<Vec<T>>>()?.unwrap_or_default())
}

#[derive(Clone, Copy)]
enum ChunkKey {
    Id,
    Model,
    Choices,
    Usage,
    SystemFingerprint,
    ServiceTier,
    Error,
}

impl ExtraMap for ChatCompletionChunk {
    type Tag = ChunkKey;
    const EXPECTING: &'static str = "struct ChatCompletionChunk";
    const KEYS: &'static [(&'static str, ChunkKey)] = &[
        ("id", ChunkKey::Id),
        ("model", ChunkKey::Model),
        ("choices", ChunkKey::Choices),
        ("usage", ChunkKey::Usage),
        ("system_fingerprint", ChunkKey::SystemFingerprint),
        ("service_tier", ChunkKey::ServiceTier),
        ("error", ChunkKey::Error),
    ];

    fn extra(&mut self) -> Option<&mut Map<String, Value>> {
        None
    }

    fn read<'de, A: MapAccess<'de>>(&mut self, tag: ChunkKey, map: &mut A) -> Result<(), A::Error> {
        match tag {
            ChunkKey::Id => self.id = map.next_value()?,
            ChunkKey::Model => self.model = map.next_value()?,
            ChunkKey::Choices => self.choices = list_or_null(map)?,
            ChunkKey::Usage => self.usage = map.next_value()?,
            ChunkKey::SystemFingerprint => self.system_fingerprint = map.next_value()?,
            ChunkKey::ServiceTier => self.service_tier = map.next_value()?,
            ChunkKey::Error => self.error = map.next_value()?,
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for ChatCompletionChunk {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ChatCompletionChunk, D::Error> {
        deserialize_extra_map(d)
    }
}

#[derive(Clone, Copy)]
enum DeltaKey {
    Role,
    Content,
    ReasoningContent,
    Reasoning,
    ReasoningDetails,
    ToolCalls,
    Refusal,
}

impl ExtraMap for WireDelta {
    type Tag = DeltaKey;
    const EXPECTING: &'static str = "struct WireDelta";
    const KEYS: &'static [(&'static str, DeltaKey)] = &[
        ("role", DeltaKey::Role),
        ("content", DeltaKey::Content),
        ("reasoning_content", DeltaKey::ReasoningContent),
        ("reasoning", DeltaKey::Reasoning),
        ("reasoning_details", DeltaKey::ReasoningDetails),
        ("tool_calls", DeltaKey::ToolCalls),
        ("refusal", DeltaKey::Refusal),
    ];

    fn extra(&mut self) -> Option<&mut Map<String, Value>> {
        Some(&mut self.extra)
    }

    fn read<'de, A: MapAccess<'de>>(&mut self, tag: DeltaKey, map: &mut A) -> Result<(), A::Error> {
        match tag {
            DeltaKey::Role => self.role = map.next_value()?,
            DeltaKey::Content => self.content = map.next_value()?,
            DeltaKey::ReasoningContent => self.reasoning_content = map.next_value()?,
            DeltaKey::Reasoning => self.reasoning = map.next_value()?,
            DeltaKey::ReasoningDetails => self.reasoning_details = map.next_value()?,
            DeltaKey::ToolCalls => self.tool_calls = list_or_null(map)?,
            DeltaKey::Refusal => self.refusal = map.next_value()?,
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for WireDelta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WireDelta, D::Error> {
        deserialize_extra_map(d)
    }
}

#[derive(Clone, Copy)]
enum ToolCallKey {
    Index,
    Id,
    Kind,
    Function,
}

impl ExtraMap for WireToolCallDelta {
    type Tag = ToolCallKey;
    const EXPECTING: &'static str = "struct WireToolCallDelta";
    const KEYS: &'static [(&'static str, ToolCallKey)] = &[
        ("index", ToolCallKey::Index),
        ("id", ToolCallKey::Id),
        ("type", ToolCallKey::Kind),
        ("function", ToolCallKey::Function),
    ];

    fn extra(&mut self) -> Option<&mut Map<String, Value>> {
        Some(&mut self.extra)
    }

    fn read<'de, A: MapAccess<'de>>(
        &mut self,
        tag: ToolCallKey,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match tag {
            ToolCallKey::Index => self.index = map.next_value()?,
            ToolCallKey::Id => self.id = map.next_value()?,
            ToolCallKey::Kind => self.kind = map.next_value()?,
            ToolCallKey::Function => self.function = map.next_value()?,
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for WireToolCallDelta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WireToolCallDelta, D::Error> {
        deserialize_extra_map(d)
    }
}

#[derive(Clone, Copy)]
enum UsageKey {
    PromptTokens,
    CompletionTokens,
    TotalTokens,
    PromptTokensDetails,
    CompletionTokensDetails,
}

impl ExtraMap for WireUsage {
    type Tag = UsageKey;
    const EXPECTING: &'static str = "struct WireUsage";
    const KEYS: &'static [(&'static str, UsageKey)] = &[
        ("prompt_tokens", UsageKey::PromptTokens),
        ("completion_tokens", UsageKey::CompletionTokens),
        ("total_tokens", UsageKey::TotalTokens),
        ("prompt_tokens_details", UsageKey::PromptTokensDetails),
        (
            "completion_tokens_details",
            UsageKey::CompletionTokensDetails,
        ),
    ];

    fn extra(&mut self) -> Option<&mut Map<String, Value>> {
        Some(&mut self.extra)
    }

    fn read<'de, A: MapAccess<'de>>(&mut self, tag: UsageKey, map: &mut A) -> Result<(), A::Error> {
        match tag {
            UsageKey::PromptTokens => self.prompt_tokens = map.next_value()?,
            UsageKey::CompletionTokens => self.completion_tokens = map.next_value()?,
            UsageKey::TotalTokens => self.total_tokens = map.next_value()?,
            UsageKey::PromptTokensDetails => self.prompt_tokens_details = map.next_value()?,
            UsageKey::CompletionTokensDetails => {
                self.completion_tokens_details = map.next_value()?
            }
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for WireUsage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WireUsage, D::Error> {
        deserialize_extra_map(d)
    }
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
        assert_eq!(c.error, None);
        // A gateway's error in place of a chunk is kept; its other top-level keys are not.
        let c: ChatCompletionChunk = serde_json::from_value(json!({
            "object": "chat.completion.chunk", "error": {"code": 429, "message": "slow down"}
        }))
        .unwrap();
        assert_eq!(c.error, Some(json!({"code": 429, "message": "slow down"})));
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

    /// The derive-based types this file had before the hand-written deserializers, kept as
    /// the oracle: same names (so error messages compare), `#[serde(flatten)]` extras.
    mod derived {
        use super::super::WireFunctionDelta;
        use serde::{Deserialize, Deserializer};
        use serde_json::{Map, Value};

        fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
        where
            D: Deserializer<'de>,
            T: Default + Deserialize<'de>,
        {
            Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
        }

        #[derive(Debug, Deserialize)]
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

        #[derive(Debug, Deserialize)]
        pub struct WireChoice {
            #[serde(default)]
            pub index: Option<i64>,
            #[serde(default)]
            pub delta: Option<WireDelta>,
            #[serde(default)]
            pub message: Option<WireDelta>,
            #[serde(default)]
            pub finish_reason: Option<String>,
            #[serde(default)]
            pub logprobs: Option<Value>,
        }

        #[derive(Debug, Deserialize)]
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
            #[serde(flatten)]
            pub extra: Map<String, Value>,
        }

        #[derive(Debug, Deserialize)]
        pub struct WireToolCallDelta {
            #[serde(default)]
            pub index: Option<i64>,
            #[serde(default)]
            pub id: Option<String>,
            #[serde(default, rename = "type")]
            pub kind: Option<String>,
            #[serde(default)]
            pub function: Option<WireFunctionDelta>,
            #[serde(flatten)]
            pub extra: Map<String, Value>,
        }

        #[derive(Debug, Deserialize)]
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

        impl From<ChatCompletionChunk> for super::ChatCompletionChunk {
            fn from(c: ChatCompletionChunk) -> Self {
                super::ChatCompletionChunk {
                    id: c.id,
                    model: c.model,
                    choices: c.choices.into_iter().map(Into::into).collect(),
                    usage: c.usage.map(Into::into),
                    system_fingerprint: c.system_fingerprint,
                    service_tier: c.service_tier,
                    // Of the unknown keys the derived type kept, the hand-written one keeps
                    // `error` only (and reads `null` as none).
                    error: c.extra.get("error").filter(|e| !e.is_null()).cloned(),
                }
            }
        }

        impl From<WireChoice> for super::WireChoice {
            fn from(c: WireChoice) -> Self {
                super::WireChoice {
                    index: c.index,
                    delta: c.delta.map(Into::into),
                    message: c.message.map(Into::into),
                    finish_reason: c.finish_reason,
                    logprobs: c.logprobs,
                }
            }
        }

        impl From<WireDelta> for super::WireDelta {
            fn from(d: WireDelta) -> Self {
                super::WireDelta {
                    role: d.role,
                    content: d.content,
                    reasoning_content: d.reasoning_content,
                    reasoning: d.reasoning,
                    reasoning_details: d.reasoning_details,
                    tool_calls: d.tool_calls.into_iter().map(Into::into).collect(),
                    refusal: d.refusal,
                    extra: d.extra,
                }
            }
        }

        impl From<WireToolCallDelta> for super::WireToolCallDelta {
            fn from(t: WireToolCallDelta) -> Self {
                super::WireToolCallDelta {
                    index: t.index,
                    id: t.id,
                    kind: t.kind,
                    function: t.function,
                    extra: t.extra,
                }
            }
        }

        impl From<WireUsage> for super::WireUsage {
            fn from(u: WireUsage) -> Self {
                super::WireUsage {
                    prompt_tokens: u.prompt_tokens,
                    completion_tokens: u.completion_tokens,
                    total_tokens: u.total_tokens,
                    prompt_tokens_details: u.prompt_tokens_details,
                    completion_tokens_details: u.completion_tokens_details,
                    extra: u.extra,
                }
            }
        }
    }

    /// Both results equal, `extra` key order included (`Map`'s `==` ignores order, its
    /// `Debug` does not), errors with the same message.
    fn assert_same(
        what: &str,
        new: Result<ChatCompletionChunk, serde_json::Error>,
        old: Result<derived::ChatCompletionChunk, serde_json::Error>,
    ) {
        let old = old.map(ChatCompletionChunk::from);
        match (&new, &old) {
            (Ok(n), Ok(o)) => {
                assert_eq!(n, o, "{what}");
                assert_eq!(format!("{n:?}"), format!("{o:?}"), "{what}");
            }
            (Err(n), Err(o)) => assert_eq!(n.to_string(), o.to_string(), "{what}"),
            _ => panic!("{what}: hand-written {new:?}, derived {old:?}"),
        }
    }

    /// Parses `input` with the hand-written and the derived deserializers, from text, bytes
    /// and (when it is valid JSON) a `Value`, and requires the same outcome.
    fn same_as_derived(input: &str) -> Result<ChatCompletionChunk, serde_json::Error> {
        assert_same(
            &format!("from_str {input}"),
            serde_json::from_str(input),
            serde_json::from_str(input),
        );
        assert_same(
            &format!("from_slice {input}"),
            serde_json::from_slice(input.as_bytes()),
            serde_json::from_slice(input.as_bytes()),
        );
        if let Ok(v) = serde_json::from_str::<Value>(input) {
            assert_same(
                &format!("from_value {input}"),
                serde_json::from_value(v.clone()),
                serde_json::from_value(v.clone()),
            );
            assert_same(
                &format!("Value::deserialize by reference {input}"),
                ChatCompletionChunk::deserialize(&v),
                derived::ChatCompletionChunk::deserialize(&v),
            );
        }
        serde_json::from_str(input)
    }

    #[test]
    fn chunk_parsing_matches_the_derived_deserializer() {
        let ok = [
            // plain content delta
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,
                "model":"gpt-x","system_fingerprint":"fp_1","service_tier":"default",
                "choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},
                "finish_reason":null,"logprobs":null}]}"#,
            // tool-call deltas with vendor extras
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[
                {"index":0,"id":"call_1","type":"function",
                 "function":{"name":"web_search","arguments":"{\"q\""},
                 "thought_signature":"c2ln==","extra_content":{"google":{"thought_signature":"x"}}},
                {"index":1,"function":{"arguments":{"k":[1,2.5,-3,null,true]}},"vendor_null":null}
               ]}}]}"#,
            // usage with details and unknown keys
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,
                "prompt_tokens_details":{"cached_tokens":3,"audio_tokens":0},
                "completion_tokens_details":{"reasoning_tokens":2},
                "cost":0.0012,"is_byok":false,"z_null":null,"a_first":{"n":18446744073709551615}}}"#,
            r#"{"usage":{"prompt_tokens":null,"completion_tokens":-1,"prompt_tokens_details":null}}"#,
            // nulls for the lists
            r#"{"id":"x","choices":null,"usage":null,"provider":"p"}"#,
            r#"{"choices":[{"delta":{"content":null,"tool_calls":null,"reasoning_content":"r",
                "reasoning":{"text":"t"},"reasoning_details":[{"type":"reasoning.text","text":"d"}],
                "refusal":null,"vendor":{"k":1}}}]}"#,
            // a whole chat.completion
            r#"{"id":"chatcmpl-2","object":"chat.completion","created":1,"model":"m",
                "choices":[{"index":0,"message":{"role":"assistant","content":"done",
                "tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}],
                "annotations":[]},"finish_reason":"tool_calls","logprobs":{"content":[]}}],
                "usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#,
            // unknown top-level keys, in an order that is not sorted, around known ones
            r#"{"zeta":1,"provider":"OpenRouter","choices":[],"alpha":[{"x":"y"}],"extra":"e",
                "model":"m","nested":{"b":1,"a":2},"f":1.5e300,"neg":-9223372036854775808}"#,
            // escaped keys and strings (parsed through serde_json's scratch buffer)
            r#"{"\u0069d":"a\"b\\c","ke\u00fd":"\ud83d\ude00","choices":[{"delta":
                {"c\u006fntent":"x\ny","v\u00e9ndor":"\u00e9"}}]}"#,
            // a gateway's error object (and a null one), among skipped keys
            r#"{"object":"chat.completion.chunk","error":{"code":502,"message":"upstream"},"created":1}"#,
            r#"{"error":null,"choices":[]}"#,
            // a repeated unknown key keeps its last value
            r#"{"x":1,"y":2,"x":3,"choices":[{"delta":{"v":1,"v":{"w":2}}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"sig":"a","sig":"b"}]}}]}"#,
            r#"{"usage":{"cost":1,"cost":2}}"#,
            r#"{}"#,
            r#"{"choices":[{}],"usage":{}}"#,
            r#"{"choices":[{"delta":{}},{"delta":null,"message":null}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{}]}}]}"#,
            // a function name that is not a string reads as none
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":42,"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":{"n":"f"}}}]}}]}"#,
        ];
        for input in ok {
            same_as_derived(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        }
        let errors = [
            r#"{"choices":5}"#,
            r#"{"choices":{}}"#,
            r#"{"choices":"x"}"#,
            r#"{"id":5}"#,
            r#"{"model":["m"]}"#,
            r#"{"usage":[]}"#,
            r#"{"usage":5}"#,
            r#"{"usage":{"prompt_tokens":"10"}}"#,
            r#"{"usage":{"total_tokens":1.5}}"#,
            r#"{"choices":[{"delta":5}]}"#,
            r#"{"choices":[{"delta":{"role":1}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":"x"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[5]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":"0"}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"type":1}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":"f"}]}}]}"#,
            r#"{"choices":[{"message":[]}]}"#,
            // a repeated known key is an error, as with derived serde
            r#"{"id":"a","id":"b"}"#,
            r#"{"choices":null,"choices":[]}"#,
            r#"{"usage":{"prompt_tokens":1,"prompt_tokens":2}}"#,
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","id":"b"}]}}]}"#,
            // not an object
            r#"[]"#,
            r#"[{"id":"x"}]"#,
            r#"null"#,
            r#""chunk""#,
            r#"5"#,
            // broken JSON
            r#"{"choices":[{"delta":{"content":"a"}]}"#,
            r#"{"id":"x""#,
        ];
        for input in errors {
            assert!(same_as_derived(input).is_err(), "{input} must be an error");
        }
    }

    #[test]
    fn chunk_fields_land_where_expected() {
        let c = same_as_derived(
            r#"{"id":"i","choices":[{"index":0,"delta":{"content":"hi","tool_calls":[
                {"index":2,"id":"call","type":"function","function":{"name":"f","arguments":"{}"},
                 "thought_signature":"sig","extra_content":{"google":{"thought_signature":"g"}}}]},
                "finish_reason":"stop"}],"usage":{"prompt_tokens":7,"cost":0.5},"b":1,"a":2}"#,
        )
        .unwrap();
        assert_eq!(c.id.as_deref(), Some("i"));
        assert_eq!(c.error, None);
        let choice = &c.choices[0];
        assert_eq!(choice.finish_reason.as_deref(), Some("stop"));
        let delta = choice.delta.as_ref().unwrap();
        assert_eq!(delta.content, Some(json!("hi")));
        let call = &delta.tool_calls[0];
        assert_eq!(call.index, Some(2));
        assert_eq!(call.kind.as_deref(), Some("function"));
        assert_eq!(call.function.as_ref().unwrap().name.as_deref(), Some("f"));
        let nameless = same_as_derived(
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":42,"arguments":"{}"}}]}}]}"#,
        )
        .unwrap();
        let f = nameless.choices[0].delta.as_ref().unwrap().tool_calls[0]
            .function
            .clone()
            .unwrap();
        assert_eq!((f.name, f.arguments), (None, Some(json!("{}"))));
        assert_eq!(call.extra["thought_signature"], "sig");
        assert_eq!(
            call.extra["extra_content"],
            json!({"google": {"thought_signature": "g"}})
        );
        let usage = c.usage.as_ref().unwrap();
        assert_eq!(usage.prompt_tokens, Some(7));
        assert_eq!(usage.extra["cost"], 0.5);
        let e = serde_json::from_str::<ChatCompletionChunk>(r#"{"choices":5}"#).unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
        // `error` is a known key now, so repeating it is an error like any known key's.
        let e = serde_json::from_str::<ChatCompletionChunk>(r#"{"error":{},"error":1}"#);
        assert!(e.is_err_and(|e| e.to_string().contains("duplicate field `error`")));
        let e = serde_json::from_str::<ChatCompletionChunk>(r#"{"id":"a","id":"b"}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate field `id`"), "{e}");
    }

    #[test]
    fn key_tables_fit_the_seen_mask() {
        assert!(ChatCompletionChunk::KEYS.len() <= 32);
        assert!(WireDelta::KEYS.len() <= 32);
        assert!(WireToolCallDelta::KEYS.len() <= 32);
        assert!(WireUsage::KEYS.len() <= 32);
    }

    /// The tool serialization this file had before the rendered cache: the oracle.
    struct DerivedWireTools(Arc<[ToolSpec]>);

    impl Serialize for DerivedWireTools {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeSeq;
            let mut seq = s.serialize_seq(Some(self.0.len()))?;
            for t in self.0.iter() {
                let parameters = if t.parameters.is_null() {
                    Cow::Owned(json!({"type": "object", "properties": {}}))
                } else {
                    Cow::Borrowed(&*t.parameters)
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

    /// `ChatCompletionRequest` as it was serialized before, with the oracle's tools.
    #[derive(Serialize)]
    struct DerivedRequest<'a> {
        model: &'a str,
        messages: &'a [WireMessage],
        #[serde(skip_serializing_if = "derived_tools_empty")]
        tools: DerivedWireTools,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool_choice: &'a Option<Value>,
        stream: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        stream_options: &'a Option<Value>,
        #[serde(flatten)]
        params: &'a Map<String, Value>,
    }

    fn derived_tools_empty(t: &DerivedWireTools) -> bool {
        t.0.is_empty()
    }

    fn derived_bytes(r: &ChatCompletionRequest) -> Vec<u8> {
        serde_json::to_vec(&DerivedRequest {
            model: &r.model,
            messages: &r.messages,
            tools: DerivedWireTools(r.tools.0.clone()),
            tool_choice: &r.tool_choice,
            stream: r.stream,
            stream_options: &r.stream_options,
            params: &r.params,
        })
        .unwrap()
    }

    fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: Arc::new(parameters),
        }
    }

    fn sample_tools() -> Vec<ToolSpec> {
        vec![
            spec(
                "web_search",
                "Search the web.",
                json!({"type": "object", "properties": {
                    "query": {"type": "string", "description": "What to look for"},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5}
                }, "required": ["query"]}),
            ),
            // keys deliberately not sorted: the order must survive
            spec(
                "write_file",
                "Write \"text\" to a file.\nLine two\t\u{1}é😀</script>",
                json!({"required": ["path", "content"], "type": "object", "properties": {
                    "path": {"type": "string"}, "content": {"type": "string"},
                    "append": {"type": "boolean", "default": false}
                }, "additionalProperties": false}),
            ),
            spec("no_description", "", json!({"type": "object"})),
            spec("null_schema", "Takes nothing.", Value::Null),
            spec("null_and_empty", "", Value::Null),
            spec(
                "numbers",
                "n",
                json!({"x": [1.5, -0.0, 1e300, 18446744073709551615u64, -9223372036854775807i64,
                             0, true, null, "s", [], {}]}),
            ),
            spec("scalar_schema", "odd but passed through", json!("string")),
        ]
    }

    fn request(tools: Arc<[ToolSpec]>) -> ChatCompletionRequest {
        let mut params = Map::new();
        params.insert("max_tokens".into(), json!(512));
        params.insert("temperature".into(), json!(0.2));
        ChatCompletionRequest {
            model: "m".into(),
            messages: vec![
                WireMessage::new("system", json!("be brief")),
                WireMessage::new("user", json!("hi")),
            ],
            tools: WireTools(tools),
            tool_choice: Some(json!("auto")),
            stream: true,
            stream_options: Some(json!({"include_usage": true})),
            params,
        }
    }

    #[test]
    fn tools_serialize_byte_identical_to_the_derived_rendering() {
        let tools: Arc<[ToolSpec]> = sample_tools().into();
        let r = request(tools.clone());
        let expected = derived_bytes(&r);
        // the first serialization renders, the later ones (other calls, retries) reuse
        for _ in 0..3 {
            assert_eq!(
                String::from_utf8(serde_json::to_vec(&r).unwrap()).unwrap(),
                String::from_utf8(expected.clone()).unwrap()
            );
        }
        assert_eq!(
            serde_json::to_string(&r.tools).unwrap(),
            serde_json::to_string(&DerivedWireTools(tools.clone())).unwrap()
        );
        // a request sharing the list, and a copy of the list in another allocation
        let mut r2 = request(tools.clone());
        r2.stream = false;
        assert_eq!(serde_json::to_vec(&r2).unwrap(), derived_bytes(&r2));
        let copy = request(sample_tools().into());
        assert_eq!(serde_json::to_vec(&copy).unwrap(), expected);
        // `to_value` (used by `request_body`) gives the same tree, key order included
        let v = serde_json::to_value(&r).unwrap();
        let old: Value = serde_json::from_slice(&expected).unwrap();
        assert_eq!(v, old);
        assert_eq!(v.to_string(), old.to_string());
        assert_eq!(v["tools"][2]["function"].get("description"), None);
        assert_eq!(
            v["tools"][3]["function"]["parameters"],
            json!({"type": "object", "properties": {}})
        );
        // no tools: the key is left out, and an empty list serializes as `[]`
        let empty = request(Arc::from([]));
        assert_eq!(serde_json::to_vec(&empty).unwrap(), derived_bytes(&empty));
        assert_eq!(serde_json::to_string(&WireTools::default()).unwrap(), "[]");
    }

    #[test]
    fn rendered_tools_are_reused_per_list_and_never_confused() {
        let tools: Arc<[ToolSpec]> = sample_tools().into();
        let first = rendered_tools(&tools).unwrap();
        let again = rendered_tools(&tools).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same list is rendered once"
        );
        // lists dropped and replaced (their memory is likely to be handed out again) never
        // get another list's rendering
        for i in 0..200 {
            let list: Arc<[ToolSpec]> =
                vec![spec(&format!("tool_{i}"), "d", json!({"i": i}))].into();
            let r = request(list);
            assert_eq!(
                serde_json::to_vec(&r).unwrap(),
                derived_bytes(&r),
                "list {i}"
            );
        }
        // more live lists than the cache holds: all still right, twice
        let lists: Vec<Arc<[ToolSpec]>> = (0..RENDERED_TOOLS_CAP * 2)
            .map(|i| vec![spec(&format!("live_{i}"), "", json!({"n": i}))].into())
            .collect();
        for _ in 0..2 {
            for (i, list) in lists.iter().enumerate() {
                let r = request(list.clone());
                assert_eq!(
                    serde_json::to_vec(&r).unwrap(),
                    derived_bytes(&r),
                    "live {i}"
                );
            }
        }
        let len = RENDERED_TOOLS.lock().unwrap().len();
        assert!(len <= RENDERED_TOOLS_CAP, "cache holds {len}");
        drop(lists);
        // dead lists are purged on the next insert
        let fresh: Arc<[ToolSpec]> = vec![spec("fresh", "", Value::Null)].into();
        rendered_tools(&fresh).unwrap();
        let live = RENDERED_TOOLS
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.tools.strong_count() > 0)
            .count();
        assert_eq!(RENDERED_TOOLS.lock().unwrap().len(), live);
        assert_eq!(
            serde_json::to_vec(&WireTools(tools.clone())).unwrap(),
            serde_json::to_vec(&DerivedWireTools(tools)).unwrap()
        );
    }
}
