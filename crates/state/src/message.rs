//! Messages in LangChain's wire shape (`BaseMessage.model_dump()`).
//!
//! One flat [`Message`] struct covers every message type; which fields are
//! serialized depends on [`MessageKind`], matching what langchain-core emits,
//! and any unknown field is kept in `extra` so it round-trips. The serialized key order is
//! langchain-core 1.8's `model_dump()` order (checked against fixtures generated with the
//! real library, see `tests/fixtures/gen_langchain_messages.py`). One case cannot be
//! reproduced without per-entry state: an `AIMessageChunk` built from `invalid_tool_calls`
//! without `tool_call_chunks` dumps them in `ai` order; Fawn writes chunk order.

use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// The `type` of a message on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MessageKind {
    Human,
    Ai,
    /// `AIMessageChunk`: a streamed delta.
    AiChunk,
    Tool,
    System,
    /// `RemoveMessage`; `id == REMOVE_ALL_MESSAGES` clears the list.
    Remove,
    /// `ChatMessage` with a free-form `role`.
    Chat,
    /// Legacy `FunctionMessage`.
    Function,
    /// Any other type string (e.g. `HumanMessageChunk`), kept verbatim.
    Other(String),
}

/// Id of a `RemoveMessage` that clears the whole list.
pub const REMOVE_ALL_MESSAGES: &str = "__remove_all__";

impl MessageKind {
    pub fn as_str(&self) -> &str {
        match self {
            MessageKind::Human => "human",
            MessageKind::Ai => "ai",
            MessageKind::AiChunk => "AIMessageChunk",
            MessageKind::Tool => "tool",
            MessageKind::System => "system",
            MessageKind::Remove => "remove",
            MessageKind::Chat => "chat",
            MessageKind::Function => "function",
            MessageKind::Other(s) => s,
        }
    }

    /// Parses a LangChain `type` or an OpenAI `role`.
    pub fn parse(s: &str) -> MessageKind {
        match s {
            "human" | "user" => MessageKind::Human,
            "ai" | "assistant" => MessageKind::Ai,
            "AIMessageChunk" => MessageKind::AiChunk,
            "tool" => MessageKind::Tool,
            "system" | "developer" => MessageKind::System,
            "remove" => MessageKind::Remove,
            "chat" => MessageKind::Chat,
            "function" => MessageKind::Function,
            other => MessageKind::Other(other.to_string()),
        }
    }

    /// True for `ai` and `AIMessageChunk`.
    pub fn is_ai(&self) -> bool {
        matches!(self, MessageKind::Ai | MessageKind::AiChunk)
    }
}

/// Message content: a plain string or a list of content blocks (kept as opaque JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<Value>),
}

impl Default for Content {
    fn default() -> Self {
        Content::Text(String::new())
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Text(s.to_string())
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Text(s)
    }
}

impl Content {
    /// The text of the content: the string itself, or the `text` of every text block joined.
    pub fn text(&self) -> String {
        match self {
            Content::Text(s) => s.clone(),
            Content::Blocks(blocks) => {
                let mut out = String::new();
                for b in blocks {
                    match b {
                        Value::String(s) => out.push_str(s),
                        Value::Object(o) => {
                            let is_text = o.get("type").and_then(Value::as_str) == Some("text");
                            if is_text && let Some(Value::String(t)) = o.get("text") {
                                out.push_str(t);
                            }
                        }
                        _ => {}
                    }
                }
                out
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Content::Text(s) => s.is_empty(),
            Content::Blocks(b) => b.is_empty(),
        }
    }
}

/// A complete tool call on an AI message (`{name, args, id, type: "tool_call"}`).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// Always a JSON object.
    pub args: Map<String, Value>,
    pub id: Option<String>,
    pub extra: Map<String, Value>,
}

/// A tool call whose arguments could not be parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct InvalidToolCall {
    pub name: Option<String>,
    pub args: Option<String>,
    pub id: Option<String>,
    pub error: Option<String>,
    pub extra: Map<String, Value>,
}

/// A streamed fragment of a tool call.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ToolCallChunk {
    pub name: Option<String>,
    pub args: Option<String>,
    pub id: Option<String>,
    pub index: Option<i64>,
    pub extra: Map<String, Value>,
}

/// Token usage, LangChain `UsageMetadata`.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct UsageMetadata {
    #[serde(default)]
    pub input_tokens: i64,
    #[serde(default)]
    pub output_tokens: i64,
    #[serde(default)]
    pub total_tokens: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_token_details: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_token_details: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl UsageMetadata {
    pub fn new(input: i64, output: i64) -> Self {
        UsageMetadata {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            ..Default::default()
        }
    }

    /// Adds two usages like langchain's `add_usage`: every integer, including those in the
    /// token details and in extra keys, is summed; nested objects add recursively.
    pub fn add(&self, other: &UsageMetadata) -> UsageMetadata {
        let mut extra = self.extra.clone();
        crate::chunk::add_usage_values(&mut extra, &other.extra);
        UsageMetadata {
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
            total_tokens: self.total_tokens + other.total_tokens,
            input_token_details: add_details(&self.input_token_details, &other.input_token_details),
            output_token_details: add_details(
                &self.output_token_details,
                &other.output_token_details,
            ),
            extra,
        }
    }
}

fn add_details(a: &Option<Value>, b: &Option<Value>) -> Option<Value> {
    match (a, b) {
        (None, None) => None,
        (Some(x), None) | (None, Some(x)) => Some(x.clone()),
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut sum = x.clone();
            crate::chunk::add_usage_values(&mut sum, y);
            // langchain re-validates the sum, which puts the known keys in schema order.
            let mut out = Map::new();
            for k in ["audio", "cache_creation", "cache_read", "reasoning"] {
                if let Some(v) = sum.shift_remove(k) {
                    out.insert(k.to_string(), v);
                }
            }
            out.extend(sum);
            Some(Value::Object(out))
        }
        (_, Some(y)) => Some(y.clone()),
    }
}

/// One LangChain message. Fields that do not apply to a kind are left at their defaults
/// and are not serialized for that kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub kind: MessageKind,
    pub content: Content,
    pub additional_kwargs: Map<String, Value>,
    pub response_metadata: Map<String, Value>,
    pub name: Option<String>,
    pub id: Option<String>,
    /// AI messages.
    pub tool_calls: Vec<ToolCall>,
    pub invalid_tool_calls: Vec<InvalidToolCall>,
    pub usage_metadata: Option<UsageMetadata>,
    /// AI chunks only.
    pub tool_call_chunks: Vec<ToolCallChunk>,
    pub chunk_position: Option<String>,
    /// Tool messages.
    pub tool_call_id: Option<String>,
    pub artifact: Value,
    pub status: Option<String>,
    /// Chat messages.
    pub role: Option<String>,
    /// Every other field, kept in arrival order.
    pub extra: Map<String, Value>,
}

impl Message {
    fn blank(kind: MessageKind, content: Content) -> Message {
        Message {
            kind,
            content,
            additional_kwargs: Map::new(),
            response_metadata: Map::new(),
            name: None,
            id: None,
            tool_calls: Vec::new(),
            invalid_tool_calls: Vec::new(),
            usage_metadata: None,
            tool_call_chunks: Vec::new(),
            chunk_position: None,
            tool_call_id: None,
            artifact: Value::Null,
            status: None,
            role: None,
            extra: Map::new(),
        }
    }

    pub fn human(content: impl Into<Content>) -> Message {
        Message::blank(MessageKind::Human, content.into())
    }

    pub fn system(content: impl Into<Content>) -> Message {
        Message::blank(MessageKind::System, content.into())
    }

    pub fn ai(content: impl Into<Content>) -> Message {
        Message::blank(MessageKind::Ai, content.into())
    }

    pub fn ai_chunk(content: impl Into<Content>) -> Message {
        Message::blank(MessageKind::AiChunk, content.into())
    }

    /// A tool result with `status: "success"`.
    pub fn tool(
        content: impl Into<Content>,
        tool_call_id: impl Into<String>,
        name: Option<String>,
    ) -> Message {
        let mut m = Message::blank(MessageKind::Tool, content.into());
        m.tool_call_id = Some(tool_call_id.into());
        m.name = name;
        m.status = Some("success".to_string());
        m
    }

    /// A `RemoveMessage` for `id` (use [`REMOVE_ALL_MESSAGES`] to clear everything).
    pub fn remove(id: impl Into<String>) -> Message {
        let mut m = Message::blank(MessageKind::Remove, Content::default());
        m.id = Some(id.into());
        m
    }

    pub fn with_id(mut self, id: impl Into<String>) -> Message {
        self.id = Some(id.into());
        self
    }

    pub fn with_name(mut self, name: impl Into<String>) -> Message {
        self.name = Some(name.into());
        self
    }

    pub fn with_tool_calls(mut self, calls: Vec<ToolCall>) -> Message {
        self.tool_calls = calls;
        self
    }

    pub fn with_status_error(mut self) -> Message {
        self.status = Some("error".to_string());
        self
    }

    /// The plain text of the content.
    pub fn text(&self) -> String {
        self.content.text()
    }

    pub fn is_remove_all(&self) -> bool {
        self.kind == MessageKind::Remove && self.id.as_deref() == Some(REMOVE_ALL_MESSAGES)
    }

    /// Removes the tool calls, valid or not, that name no tool (an empty or blank name, or
    /// none, which is what a provider's non-string name becomes) and returns how many went.
    /// Such a call can be neither run nor usefully answered: answered with an error, models
    /// tend to repeat it until a loop limit stops the run.
    pub fn drop_nameless_tool_calls(&mut self) -> usize {
        let before = self.tool_calls.len() + self.invalid_tool_calls.len();
        self.tool_calls.retain(|c| !c.name.trim().is_empty());
        self.invalid_tool_calls
            .retain(|c| c.name.as_deref().is_some_and(|n| !n.trim().is_empty()));
        before - self.tool_calls.len() - self.invalid_tool_calls.len()
    }

    /// True for streamed chunk kinds (`AIMessageChunk`, `HumanMessageChunk`, …).
    pub fn is_chunk(&self) -> bool {
        match &self.kind {
            MessageKind::AiChunk => true,
            MessageKind::Other(t) => chunk_base_type(t).is_some(),
            _ => false,
        }
    }

    /// langchain `message_chunk_to_message`: the complete message a chunk stands for
    /// (`AIMessageChunk` → `ai` without `tool_call_chunks`/`chunk_position`, and its
    /// `tool_calls` parsed from the chunks when it has none). Other messages are returned
    /// as they are.
    pub fn to_message(&self) -> Message {
        match &self.kind {
            MessageKind::AiChunk => {
                let mut m = self.clone();
                m.kind = MessageKind::Ai;
                if m.tool_calls.is_empty()
                    && m.invalid_tool_calls.is_empty()
                    && !m.tool_call_chunks.is_empty()
                {
                    let (calls, invalid) = crate::chunk::chunk_tool_calls(&m);
                    m.tool_calls = calls;
                    m.invalid_tool_calls = invalid;
                }
                m.tool_call_chunks.clear();
                m.chunk_position = None;
                m
            }
            MessageKind::Other(t) => match chunk_base_type(t) {
                Some(base) => {
                    let mut o = self.to_map();
                    o.insert("type".into(), Value::String(base.to_string()));
                    parse_message(Value::Object(o)).unwrap_or_else(|_| self.clone())
                }
                None => self.clone(),
            },
            _ => self.clone(),
        }
    }

    /// Converts any message kind to a wire `Value`.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Parses a message from LangChain or OpenAI shape.
    pub fn from_value(v: Value) -> Result<Message, MessageError> {
        parse_message(v)
    }
}

impl ToolCall {
    pub fn new(name: impl Into<String>, args: Value, id: impl Into<String>) -> ToolCall {
        let args = match args {
            Value::Object(o) => o,
            Value::Null => Map::new(),
            other => {
                let mut m = Map::new();
                m.insert("input".to_string(), other);
                m
            }
        };
        ToolCall {
            name: name.into(),
            args,
            id: Some(id.into()),
            extra: Map::new(),
        }
    }
}

fn chunk_base_type(t: &str) -> Option<&'static str> {
    match t {
        "AIMessageChunk" => Some("ai"),
        "HumanMessageChunk" => Some("human"),
        "SystemMessageChunk" => Some("system"),
        "ToolMessageChunk" => Some("tool"),
        "ChatMessageChunk" => Some("chat"),
        "FunctionMessageChunk" => Some("function"),
        _ => None,
    }
}

/// Why a JSON value could not become a [`Message`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MessageError {
    #[error("message must be an object or a string, got {0}")]
    NotAnObject(&'static str),
    #[error("message has neither `type` nor `role`")]
    MissingType,
    #[error("message field `{field}`: {reason}")]
    BadField { field: &'static str, reason: String },
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn bad(field: &'static str, reason: impl Into<String>) -> MessageError {
    MessageError::BadField {
        field,
        reason: reason.into(),
    }
}

/// A string or null. `what` names the key inside `field` (`""` for the field itself).
fn opt_string(field: &'static str, what: &str, v: Value) -> Result<Option<String>, MessageError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        other => Err(bad(
            field,
            format!("{what}expected a string, got {}", json_kind(&other)),
        )),
    }
}

/// An id: a string, null, or (leniently) a number.
fn opt_id(field: &'static str, what: &str, v: Value) -> Result<Option<String>, MessageError> {
    match v {
        Value::Number(n) => Ok(Some(n.to_string())),
        other => opt_string(field, what, other),
    }
}

fn object(field: &'static str, v: Value) -> Result<Map<String, Value>, MessageError> {
    match v {
        Value::Null => Ok(Map::new()),
        Value::Object(m) => Ok(m),
        other => Err(bad(
            field,
            format!("expected an object, got {}", json_kind(&other)),
        )),
    }
}

fn list(field: &'static str, v: Value) -> Result<Vec<Value>, MessageError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) => Ok(a),
        other => Err(bad(
            field,
            format!("expected a list, got {}", json_kind(&other)),
        )),
    }
}

fn entry_object(field: &'static str, v: Value) -> Result<Map<String, Value>, MessageError> {
    match v {
        Value::Object(o) => Ok(o),
        other => Err(bad(
            field,
            format!("each entry must be an object, got {}", json_kind(&other)),
        )),
    }
}

fn parse_content(v: Value) -> Result<Content, MessageError> {
    match v {
        Value::Null => Ok(Content::default()),
        Value::String(s) => Ok(Content::Text(s)),
        Value::Array(a) => Ok(Content::Blocks(a)),
        Value::Object(o) => Ok(Content::Blocks(vec![Value::Object(o)])),
        other => Err(bad(
            "content",
            format!(
                "expected a string or a list of blocks, got {}",
                json_kind(&other)
            ),
        )),
    }
}

/// Escapes raw control characters inside JSON strings, so that text Python's
/// `json.loads(strict=False)` accepts also parses with serde_json (same resulting values).
/// A control character right after a backslash is left alone: it is an invalid escape in
/// both parsers.
fn escape_controls_in_strings(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.bytes().any(|b| b < 0x20) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut in_string = false;
    let mut escaped = false;
    for ch in s.chars() {
        if in_string {
            if ch == '"' && !escaped {
                in_string = false;
            } else if ch == '\\' {
                escaped = !escaped;
            } else if (ch as u32) < 0x20 && !escaped {
                push_control_escape(&mut out, ch);
                continue;
            } else {
                escaped = false;
            }
        } else if ch == '"' {
            in_string = true;
            escaped = false;
        }
        out.push(ch);
    }
    std::borrow::Cow::Owned(out)
}

pub(crate) fn push_control_escape(out: &mut String, ch: char) {
    match ch {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c => out.push_str(&format!("\\u{:04x}", c as u32)),
    }
}

/// Parses JSON the way Python's `json.loads(s, strict=False)` does (raw control characters
/// allowed inside strings).
pub fn parse_json_lenient(s: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str(&escape_controls_in_strings(s))
}

/// Parses the JSON text of complete tool arguments into an object (strictly: no repair of
/// truncated JSON). `""` parses as `{}`.
pub fn parse_tool_args(raw: &str) -> Result<Map<String, Value>, String> {
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match parse_json_lenient(raw) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(other) => Err(format!(
            "tool arguments must be a JSON object, got {}",
            json_kind(&other)
        )),
        Err(e) => Err(format!("invalid JSON in tool arguments: {e}")),
    }
}

/// Tool arguments given as a string (OpenAI) or an object (LangChain).
fn tool_args(v: Value) -> Result<Map<String, Value>, (String, String)> {
    match v {
        Value::Null => Ok(Map::new()),
        Value::Object(m) => Ok(m),
        Value::String(s) => parse_tool_args(&s).map_err(|e| (s, e)),
        other => Err((
            other.to_string(),
            format!(
                "tool arguments must be an object, got {}",
                json_kind(&other)
            ),
        )),
    }
}

/// A tool call from input: usable, or kept as an invalid one.
enum ParsedCall {
    Valid(ToolCall),
    Invalid(InvalidToolCall),
}

fn finish_tool_call(
    name: Option<String>,
    args: Result<Map<String, Value>, (String, String)>,
    id: Option<String>,
    extra: Map<String, Value>,
) -> ParsedCall {
    match (name, args) {
        (Some(name), Ok(args)) => ParsedCall::Valid(ToolCall {
            name,
            args,
            id,
            extra,
        }),
        (name, Err((raw, e))) => ParsedCall::Invalid(InvalidToolCall {
            name,
            args: Some(raw),
            id,
            error: Some(e),
            extra,
        }),
        (None, Ok(args)) => ParsedCall::Invalid(InvalidToolCall {
            name: None,
            args: Some(Value::Object(args).to_string()),
            id,
            error: Some("tool call has no name".to_string()),
            extra,
        }),
    }
}

/// One entry of `tool_calls`, in LangChain shape (`{name, args, id, type}`) or OpenAI shape
/// (`{id, type: "function", function: {name, arguments}}`). Arguments that do not parse make
/// an [`InvalidToolCall`] rather than an error.
fn parse_tool_call(v: Value) -> Result<ParsedCall, MessageError> {
    const F: &str = "tool_calls";
    let o = entry_object(F, v)?;
    if matches!(o.get("function"), Some(Value::Object(_))) {
        let mut id = None;
        let mut name = None;
        let mut args = Ok(Map::new());
        let mut extra = Map::new();
        for (k, v) in o {
            match k.as_str() {
                "id" => id = opt_id(F, "`id`: ", v)?,
                "type" | "index" => {}
                "function" => {
                    for (fk, fv) in object(F, v)? {
                        match fk.as_str() {
                            "name" => name = opt_string(F, "`function.name`: ", fv)?,
                            "arguments" => args = tool_args(fv),
                            _ => {}
                        }
                    }
                }
                _ => {
                    extra.insert(k, v);
                }
            }
        }
        return Ok(finish_tool_call(name, args, id, extra));
    }
    let mut id = None;
    let mut name = None;
    let mut args = Ok(Map::new());
    let mut extra = Map::new();
    for (k, v) in o {
        match k.as_str() {
            "name" => name = opt_string(F, "`name`: ", v)?,
            "id" => id = opt_id(F, "`id`: ", v)?,
            "args" => args = tool_args(v),
            "type" => {}
            _ => {
                extra.insert(k, v);
            }
        }
    }
    Ok(finish_tool_call(name, args, id, extra))
}

/// A string, or any other JSON kept as its text.
fn loose_string(v: Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s),
        other => Some(other.to_string()),
    }
}

fn parse_invalid_tool_call(v: Value) -> Result<InvalidToolCall, MessageError> {
    const F: &str = "invalid_tool_calls";
    let mut tc = InvalidToolCall {
        name: None,
        args: None,
        id: None,
        error: None,
        extra: Map::new(),
    };
    for (k, v) in entry_object(F, v)? {
        match k.as_str() {
            "name" => tc.name = opt_string(F, "`name`: ", v)?,
            "id" => tc.id = opt_id(F, "`id`: ", v)?,
            "args" => tc.args = loose_string(v),
            "error" => tc.error = loose_string(v),
            "type" => {}
            _ => {
                tc.extra.insert(k, v);
            }
        }
    }
    Ok(tc)
}

fn parse_tool_call_chunk(v: Value) -> Result<ToolCallChunk, MessageError> {
    const F: &str = "tool_call_chunks";
    let mut tc = ToolCallChunk::default();
    for (k, v) in entry_object(F, v)? {
        match k.as_str() {
            "name" => tc.name = opt_string(F, "`name`: ", v)?,
            "id" => tc.id = opt_id(F, "`id`: ", v)?,
            "args" => tc.args = loose_string(v),
            "index" => {
                tc.index = match v {
                    Value::Null => None,
                    Value::Number(n) if n.as_i64().is_some() => n.as_i64(),
                    other => {
                        return Err(bad(
                            F,
                            format!("`index`: expected an integer, got {}", json_kind(&other)),
                        ));
                    }
                }
            }
            "type" => {}
            _ => {
                tc.extra.insert(k, v);
            }
        }
    }
    Ok(tc)
}

/// `{"lc": 1, "type": "constructor", "id": [..., "HumanMessage"], "kwargs": {...}}`, the
/// `Serializable` envelope, unpacked to `{"type": "human", ...kwargs}` as langchain-core does
/// (an allowlist of class names; nothing is instantiated by name).
fn unwrap_constructor_envelope(o: &Map<String, Value>) -> Result<Option<Value>, MessageError> {
    let is_envelope = o.get("lc").and_then(Value::as_i64) == Some(1)
        && o.get("type").and_then(Value::as_str) == Some("constructor");
    let (Some(Value::Array(id)), Some(Value::Object(kwargs))) = (o.get("id"), o.get("kwargs"))
    else {
        return Ok(None);
    };
    if !is_envelope || id.is_empty() {
        return Ok(None);
    }
    let class = id.last().and_then(Value::as_str).unwrap_or_default();
    let kind = match class {
        "HumanMessage" | "HumanMessageChunk" => "human",
        "AIMessage" | "AIMessageChunk" => "ai",
        "SystemMessage" | "SystemMessageChunk" => "system",
        "FunctionMessage" | "FunctionMessageChunk" => "function",
        "ToolMessage" | "ToolMessageChunk" => "tool",
        "ChatMessage" | "ChatMessageChunk" => "chat",
        "RemoveMessage" => "remove",
        other => {
            return Err(bad(
                "id",
                format!("unknown LangChain message class `{other}` in a constructor envelope"),
            ));
        }
    };
    let mut inner = Map::new();
    inner.insert("type".to_string(), Value::String(kind.to_string()));
    for (k, v) in kwargs {
        inner.insert(k.clone(), v.clone());
    }
    Ok(Some(Value::Object(inner)))
}

fn parse_message(v: Value) -> Result<Message, MessageError> {
    let o = match v {
        Value::Object(o) => o,
        Value::String(s) => return Ok(Message::human(s)),
        other => return Err(MessageError::NotAnObject(json_kind(&other))),
    };
    if let Some(inner) = unwrap_constructor_envelope(&o)? {
        return parse_message(inner);
    }
    // `type` (LangChain) wins over `role` (OpenAI); `role` then stays a field (ChatMessage).
    let (kind_str, role_is_kind) = match (o.get("type"), o.get("role")) {
        (Some(Value::String(t)), _) => (t.clone(), false),
        (Some(t), _) if !t.is_null() => {
            return Err(bad(
                "type",
                format!("expected a string, got {}", json_kind(t)),
            ));
        }
        (_, Some(Value::String(r))) => (r.clone(), true),
        (_, Some(r)) if !r.is_null() => {
            return Err(bad(
                "role",
                format!("expected a string, got {}", json_kind(r)),
            ));
        }
        _ => return Err(MessageError::MissingType),
    };
    let kind = MessageKind::parse(&kind_str);
    let is_ai = kind.is_ai();
    let mut m = Message::blank(kind.clone(), Content::default());
    for (k, v) in o {
        match k.as_str() {
            "type" => {}
            "role" if role_is_kind => {}
            "content" => m.content = parse_content(v)?,
            "additional_kwargs" => m.additional_kwargs = object("additional_kwargs", v)?,
            "response_metadata" => m.response_metadata = object("response_metadata", v)?,
            "name" => m.name = opt_string("name", "", v)?,
            "id" => m.id = opt_id("id", "", v)?,
            "tool_calls" if is_ai => {
                for tc in list("tool_calls", v)? {
                    match parse_tool_call(tc)? {
                        ParsedCall::Valid(call) => m.tool_calls.push(call),
                        ParsedCall::Invalid(bad_call) => m.invalid_tool_calls.push(bad_call),
                    }
                }
            }
            "invalid_tool_calls" if is_ai => {
                for tc in list("invalid_tool_calls", v)? {
                    m.invalid_tool_calls.push(parse_invalid_tool_call(tc)?);
                }
            }
            "usage_metadata" if is_ai => {
                m.usage_metadata = match v {
                    Value::Null => None,
                    Value::Object(u) => Some(
                        serde_json::from_value(Value::Object(u))
                            .map_err(|e| bad("usage_metadata", e.to_string()))?,
                    ),
                    other => {
                        return Err(bad(
                            "usage_metadata",
                            format!("expected an object, got {}", json_kind(&other)),
                        ));
                    }
                }
            }
            "tool_call_chunks" if kind == MessageKind::AiChunk => {
                for c in list("tool_call_chunks", v)? {
                    m.tool_call_chunks.push(parse_tool_call_chunk(c)?);
                }
            }
            "chunk_position" if kind == MessageKind::AiChunk => {
                m.chunk_position = opt_string("chunk_position", "", v)?;
            }
            "tool_call_id" if kind == MessageKind::Tool => {
                m.tool_call_id = opt_id("tool_call_id", "", v)?;
            }
            "artifact" if kind == MessageKind::Tool => m.artifact = v,
            "status" if kind == MessageKind::Tool => {
                m.status = match v {
                    Value::Null => None,
                    Value::String(s) if s == "success" || s == "error" => Some(s),
                    other => {
                        return Err(bad(
                            "status",
                            format!("expected \"success\" or \"error\", got {other}"),
                        ));
                    }
                }
            }
            "role" if kind == MessageKind::Chat => m.role = opt_string("role", "", v)?,
            _ => {
                m.extra.insert(k, v);
            }
        }
    }
    if kind == MessageKind::Tool && m.status.is_none() {
        m.status = Some("success".to_string());
    }
    if kind_str == "developer" && !m.additional_kwargs.contains_key("__openai_role__") {
        m.additional_kwargs.insert(
            "__openai_role__".to_string(),
            Value::String("developer".to_string()),
        );
    }
    Ok(m)
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        parse_message(v).map_err(D::Error::custom)
    }
}

fn tool_call_value(tc: &ToolCall) -> Value {
    let mut o = Map::new();
    o.insert("name".into(), Value::String(tc.name.clone()));
    o.insert("args".into(), Value::Object(tc.args.clone()));
    o.insert("id".into(), opt_str(&tc.id));
    o.insert("type".into(), Value::String("tool_call".into()));
    for (k, v) in &tc.extra {
        o.insert(k.clone(), v.clone());
    }
    Value::Object(o)
}

/// langchain-core emits two key orders: validated `InvalidToolCall`s (every `ai` message)
/// come out in schema order `type, id, name, args, error`; the ones an `AIMessageChunk`
/// derives from its `tool_call_chunks` come out as `name, args, id, error, type`.
fn invalid_tool_call_value(tc: &InvalidToolCall, chunk_order: bool) -> Value {
    let mut o = Map::new();
    let ty = Value::String("invalid_tool_call".into());
    if chunk_order {
        o.insert("name".into(), opt_str(&tc.name));
        o.insert("args".into(), opt_str(&tc.args));
        o.insert("id".into(), opt_str(&tc.id));
        o.insert("error".into(), opt_str(&tc.error));
        o.insert("type".into(), ty);
    } else {
        o.insert("type".into(), ty);
        o.insert("id".into(), opt_str(&tc.id));
        o.insert("name".into(), opt_str(&tc.name));
        o.insert("args".into(), opt_str(&tc.args));
        o.insert("error".into(), opt_str(&tc.error));
    }
    for (k, v) in &tc.extra {
        o.insert(k.clone(), v.clone());
    }
    Value::Object(o)
}

fn tool_call_chunk_value(tc: &ToolCallChunk) -> Value {
    let mut o = Map::new();
    o.insert("name".into(), opt_str(&tc.name));
    o.insert("args".into(), opt_str(&tc.args));
    o.insert("id".into(), opt_str(&tc.id));
    o.insert(
        "index".into(),
        tc.index.map(Value::from).unwrap_or(Value::Null),
    );
    o.insert("type".into(), Value::String("tool_call_chunk".into()));
    for (k, v) in &tc.extra {
        o.insert(k.clone(), v.clone());
    }
    Value::Object(o)
}

fn opt_str(s: &Option<String>) -> Value {
    s.as_ref()
        .map(|s| Value::String(s.clone()))
        .unwrap_or(Value::Null)
}

impl Message {
    /// The wire object, with fields in langchain-core's `model_dump()` order.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut o = Map::new();
        o.insert(
            "content".into(),
            serde_json::to_value(&self.content).unwrap_or(Value::Null),
        );
        o.insert(
            "additional_kwargs".into(),
            Value::Object(self.additional_kwargs.clone()),
        );
        o.insert(
            "response_metadata".into(),
            Value::Object(self.response_metadata.clone()),
        );
        o.insert("type".into(), Value::String(self.kind.as_str().to_string()));
        o.insert("name".into(), opt_str(&self.name));
        o.insert("id".into(), opt_str(&self.id));
        match &self.kind {
            MessageKind::Ai | MessageKind::AiChunk => {
                o.insert(
                    "tool_calls".into(),
                    Value::Array(self.tool_calls.iter().map(tool_call_value).collect()),
                );
                o.insert(
                    "invalid_tool_calls".into(),
                    Value::Array(
                        self.invalid_tool_calls
                            .iter()
                            .map(|tc| {
                                invalid_tool_call_value(tc, self.kind == MessageKind::AiChunk)
                            })
                            .collect(),
                    ),
                );
                o.insert(
                    "usage_metadata".into(),
                    self.usage_metadata
                        .as_ref()
                        .and_then(|u| serde_json::to_value(u).ok())
                        .unwrap_or(Value::Null),
                );
                if self.kind == MessageKind::AiChunk {
                    o.insert(
                        "tool_call_chunks".into(),
                        Value::Array(
                            self.tool_call_chunks
                                .iter()
                                .map(tool_call_chunk_value)
                                .collect(),
                        ),
                    );
                    o.insert("chunk_position".into(), opt_str(&self.chunk_position));
                }
            }
            MessageKind::Tool => {
                o.insert("tool_call_id".into(), opt_str(&self.tool_call_id));
                o.insert("artifact".into(), self.artifact.clone());
                o.insert(
                    "status".into(),
                    Value::String(self.status.clone().unwrap_or_else(|| "success".to_string())),
                );
            }
            MessageKind::Chat => {
                o.insert("role".into(), opt_str(&self.role));
            }
            _ => {}
        }
        for (k, v) in &self.extra {
            o.insert(k.clone(), v.clone());
        }
        o
    }
}

// Direct serialization. `Serialize for Message` writes exactly what serializing `to_map()`
// would, without building the `Map`: the same keys in the same order, and the same serializer
// calls a `Value` makes (`null` as unit, a non-negative integer as `u64`, every map and list
// with its exact length), so the output is the same for any serializer, not only JSON.
// `to_map` (and the `*_value` helpers) build each object by inserting the known fields and
// then every `extra` entry with `Map::insert`: an `extra` key equal to a known one replaces
// that value in place, the others are appended in `extra`'s order. [`Object`] writes that
// shape.

/// Keys `to_map` writes for each kind, in order.
const BASE_KEYS: &[&str] = &[
    "content",
    "additional_kwargs",
    "response_metadata",
    "type",
    "name",
    "id",
];
const AI_KEYS: &[&str] = &[
    "content",
    "additional_kwargs",
    "response_metadata",
    "type",
    "name",
    "id",
    "tool_calls",
    "invalid_tool_calls",
    "usage_metadata",
];
const AI_CHUNK_KEYS: &[&str] = &[
    "content",
    "additional_kwargs",
    "response_metadata",
    "type",
    "name",
    "id",
    "tool_calls",
    "invalid_tool_calls",
    "usage_metadata",
    "tool_call_chunks",
    "chunk_position",
];
const TOOL_KEYS: &[&str] = &[
    "content",
    "additional_kwargs",
    "response_metadata",
    "type",
    "name",
    "id",
    "tool_call_id",
    "artifact",
    "status",
];
const CHAT_KEYS: &[&str] = &[
    "content",
    "additional_kwargs",
    "response_metadata",
    "type",
    "name",
    "id",
    "role",
];
const TOOL_CALL_KEYS: &[&str] = &["name", "args", "id", "type"];
const INVALID_TOOL_CALL_CHUNK_ORDER_KEYS: &[&str] = &["name", "args", "id", "error", "type"];
const INVALID_TOOL_CALL_KEYS: &[&str] = &["type", "id", "name", "args", "error"];
const TOOL_CALL_CHUNK_KEYS: &[&str] = &["name", "args", "id", "index", "type"];
/// `UsageMetadata`'s derived `Serialize` skips the details that are `None`.
const USAGE_KEYS: &[&str] = &["input_tokens", "output_tokens", "total_tokens"];
const USAGE_IN_KEYS: &[&str] = &[
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "input_token_details",
];
const USAGE_OUT_KEYS: &[&str] = &[
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "output_token_details",
];
const USAGE_BOTH_KEYS: &[&str] = &[
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "input_token_details",
    "output_token_details",
];

/// An object of known fields followed by `extra`, written as the `Map` would be that gets the
/// known fields inserted and then every `extra` entry.
struct Object<'a, M> {
    map: M,
    /// Every key [`Object::field`] is called with, in call order.
    known: &'static [&'static str],
    extra: &'a Map<String, Value>,
    /// Entries announced to `serialize_map` and entries written, checked in debug builds.
    len: usize,
    written: usize,
}

impl<'a, M: SerializeMap> Object<'a, M> {
    fn begin<S>(
        s: S,
        known: &'static [&'static str],
        extra: &'a Map<String, Value>,
    ) -> Result<Self, S::Error>
    where
        S: Serializer<SerializeMap = M>,
    {
        let added = extra
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .count();
        let len = known.len() + added;
        Ok(Object {
            map: s.serialize_map(Some(len))?,
            known,
            extra,
            len,
            written: 0,
        })
    }

    /// Writes a known field, or `extra`'s value for the same key if it has one.
    fn field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), M::Error> {
        debug_assert!(
            self.known.get(self.written) == Some(&key),
            "field `{key}` out of the declared order"
        );
        self.written += 1;
        let replaced = if self.extra.is_empty() {
            None
        } else {
            self.extra.get(key)
        };
        match replaced {
            Some(v) => self.map.serialize_entry(key, v),
            None => self.map.serialize_entry(key, value),
        }
    }

    /// Writes the `extra` entries no known field took, in order, and closes the map.
    fn end(mut self) -> Result<M::Ok, M::Error> {
        for (k, v) in self.extra {
            if !self.known.contains(&k.as_str()) {
                self.written += 1;
                self.map.serialize_entry(k, v)?;
            }
        }
        debug_assert_eq!(self.written, self.len, "map length announced wrongly");
        self.map.end()
    }
}

/// An `Option<String>` as `opt_str` makes it: unit (`null`) or a string.
struct OptStr<'a>(&'a Option<String>);

impl Serialize for OptStr<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(v) => s.serialize_str(v),
            None => s.serialize_unit(),
        }
    }
}

/// An integer as `Value::from(i64)` writes it: `u64` when non-negative, else `i64`.
struct Int(i64);

impl Serialize for Int {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match u64::try_from(self.0) {
            Ok(u) => s.serialize_u64(u),
            Err(_) => s.serialize_i64(self.0),
        }
    }
}

/// An `Option<i64>` as `to_map` writes it: unit (`null`) or [`Int`].
struct OptInt(Option<i64>);

impl Serialize for OptInt {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(i) => Int(i).serialize(s),
            None => s.serialize_unit(),
        }
    }
}

/// `tool_call_value`, written directly.
struct ToolCallSer<'a>(&'a ToolCall);

impl Serialize for ToolCallSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let tc = self.0;
        let mut o = Object::begin(s, TOOL_CALL_KEYS, &tc.extra)?;
        o.field("name", tc.name.as_str())?;
        o.field("args", &tc.args)?;
        o.field("id", &OptStr(&tc.id))?;
        o.field("type", "tool_call")?;
        o.end()
    }
}

/// `invalid_tool_call_value`, written directly.
struct InvalidToolCallSer<'a> {
    call: &'a InvalidToolCall,
    chunk_order: bool,
}

impl Serialize for InvalidToolCallSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let tc = self.call;
        if self.chunk_order {
            let mut o = Object::begin(s, INVALID_TOOL_CALL_CHUNK_ORDER_KEYS, &tc.extra)?;
            o.field("name", &OptStr(&tc.name))?;
            o.field("args", &OptStr(&tc.args))?;
            o.field("id", &OptStr(&tc.id))?;
            o.field("error", &OptStr(&tc.error))?;
            o.field("type", "invalid_tool_call")?;
            o.end()
        } else {
            let mut o = Object::begin(s, INVALID_TOOL_CALL_KEYS, &tc.extra)?;
            o.field("type", "invalid_tool_call")?;
            o.field("id", &OptStr(&tc.id))?;
            o.field("name", &OptStr(&tc.name))?;
            o.field("args", &OptStr(&tc.args))?;
            o.field("error", &OptStr(&tc.error))?;
            o.end()
        }
    }
}

/// `tool_call_chunk_value`, written directly.
struct ToolCallChunkSer<'a>(&'a ToolCallChunk);

impl Serialize for ToolCallChunkSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let tc = self.0;
        let mut o = Object::begin(s, TOOL_CALL_CHUNK_KEYS, &tc.extra)?;
        o.field("name", &OptStr(&tc.name))?;
        o.field("args", &OptStr(&tc.args))?;
        o.field("id", &OptStr(&tc.id))?;
        o.field("index", &OptInt(tc.index))?;
        o.field("type", "tool_call_chunk")?;
        o.end()
    }
}

/// A message's `tool_calls`.
struct ToolCallsSer<'a>(&'a [ToolCall]);

impl Serialize for ToolCallsSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(ToolCallSer))
    }
}

/// A message's `invalid_tool_calls`, in `ai` or in chunk key order.
struct InvalidToolCallsSer<'a> {
    calls: &'a [InvalidToolCall],
    chunk_order: bool,
}

impl Serialize for InvalidToolCallsSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.calls.iter().map(|call| InvalidToolCallSer {
            call,
            chunk_order: self.chunk_order,
        }))
    }
}

/// A chunk's `tool_call_chunks`.
struct ToolCallChunksSer<'a>(&'a [ToolCallChunk]);

impl Serialize for ToolCallChunksSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(ToolCallChunkSer))
    }
}

/// `usage_metadata` as `to_map` writes it: `null`, or `UsageMetadata`'s derived `Serialize`
/// gone through a `Value` (where a flattened `extra` key equal to a field replaces it in
/// place, and the token counts are `Value` integers).
struct UsageSer<'a>(Option<&'a UsageMetadata>);

impl Serialize for UsageSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Some(u) = self.0 else {
            return s.serialize_unit();
        };
        let known = match (&u.input_token_details, &u.output_token_details) {
            (None, None) => USAGE_KEYS,
            (Some(_), None) => USAGE_IN_KEYS,
            (None, Some(_)) => USAGE_OUT_KEYS,
            (Some(_), Some(_)) => USAGE_BOTH_KEYS,
        };
        let mut o = Object::begin(s, known, &u.extra)?;
        o.field("input_tokens", &Int(u.input_tokens))?;
        o.field("output_tokens", &Int(u.output_tokens))?;
        o.field("total_tokens", &Int(u.total_tokens))?;
        if let Some(d) = &u.input_token_details {
            o.field("input_token_details", d)?;
        }
        if let Some(d) = &u.output_token_details {
            o.field("output_token_details", d)?;
        }
        o.end()
    }
}

impl Serialize for Message {
    /// The same output as serializing [`Message::to_map`], written directly.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let known = match self.kind {
            MessageKind::Ai => AI_KEYS,
            MessageKind::AiChunk => AI_CHUNK_KEYS,
            MessageKind::Tool => TOOL_KEYS,
            MessageKind::Chat => CHAT_KEYS,
            _ => BASE_KEYS,
        };
        let mut o = Object::begin(s, known, &self.extra)?;
        o.field("content", &self.content)?;
        o.field("additional_kwargs", &self.additional_kwargs)?;
        o.field("response_metadata", &self.response_metadata)?;
        o.field("type", self.kind.as_str())?;
        o.field("name", &OptStr(&self.name))?;
        o.field("id", &OptStr(&self.id))?;
        match &self.kind {
            MessageKind::Ai | MessageKind::AiChunk => {
                let chunk = self.kind == MessageKind::AiChunk;
                o.field("tool_calls", &ToolCallsSer(&self.tool_calls))?;
                o.field(
                    "invalid_tool_calls",
                    &InvalidToolCallsSer {
                        calls: &self.invalid_tool_calls,
                        chunk_order: chunk,
                    },
                )?;
                o.field("usage_metadata", &UsageSer(self.usage_metadata.as_ref()))?;
                if chunk {
                    o.field(
                        "tool_call_chunks",
                        &ToolCallChunksSer(&self.tool_call_chunks),
                    )?;
                    o.field("chunk_position", &OptStr(&self.chunk_position))?;
                }
            }
            MessageKind::Tool => {
                o.field("tool_call_id", &OptStr(&self.tool_call_id))?;
                o.field("artifact", &self.artifact)?;
                o.field("status", self.status.as_deref().unwrap_or("success"))?;
            }
            MessageKind::Chat => {
                o.field("role", &OptStr(&self.role))?;
            }
            _ => {}
        }
        o.end()
    }
}

/// Parses `messages` input: a list, a single message object, or a bare string.
pub fn messages_from_value(v: Value) -> Result<Vec<Message>, MessageError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items.into_iter().map(parse_message).collect(),
        other => Ok(vec![parse_message(other)?]),
    }
}
