//! Messages in LangChain's wire shape (`BaseMessage.model_dump()`).
//!
//! One flat [`Message`] struct covers every message type; which fields are
//! serialized depends on [`MessageKind`], matching what langchain-core emits,
//! and any unknown field is kept in `extra` so it round-trips.

use serde::de::Error as _;
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

    /// Adds two usages field by field (token details are summed where numeric).
    pub fn add(&self, other: &UsageMetadata) -> UsageMetadata {
        UsageMetadata {
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
            total_tokens: self.total_tokens + other.total_tokens,
            input_token_details: add_details(&self.input_token_details, &other.input_token_details),
            output_token_details: add_details(
                &self.output_token_details,
                &other.output_token_details,
            ),
            extra: {
                let mut e = self.extra.clone();
                for (k, v) in &other.extra {
                    e.insert(k.clone(), v.clone());
                }
                e
            },
        }
    }
}

fn add_details(a: &Option<Value>, b: &Option<Value>) -> Option<Value> {
    match (a, b) {
        (None, None) => None,
        (Some(x), None) | (None, Some(x)) => Some(x.clone()),
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut out = x.clone();
            for (k, v) in y {
                let merged = match (out.get(k), v) {
                    (Some(Value::Number(p)), Value::Number(q)) => match (p.as_i64(), q.as_i64()) {
                        (Some(p), Some(q)) => Value::from(p + q),
                        _ => v.clone(),
                    },
                    _ => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
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

fn take_opt_string(
    o: &mut Map<String, Value>,
    key: &'static str,
) -> Result<Option<String>, MessageError> {
    match o.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Number(n)) if key == "id" => Ok(Some(n.to_string())),
        Some(other) => Err(MessageError::BadField {
            field: key,
            reason: format!("expected a string, got {}", json_kind(&other)),
        }),
    }
}

fn take_map(
    o: &mut Map<String, Value>,
    key: &'static str,
) -> Result<Map<String, Value>, MessageError> {
    match o.remove(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(other) => Err(MessageError::BadField {
            field: key,
            reason: format!("expected an object, got {}", json_kind(&other)),
        }),
    }
}

fn parse_content(v: Option<Value>) -> Result<Content, MessageError> {
    match v {
        None | Some(Value::Null) => Ok(Content::default()),
        Some(Value::String(s)) => Ok(Content::Text(s)),
        Some(Value::Array(a)) => Ok(Content::Blocks(a)),
        Some(Value::Object(o)) => Ok(Content::Blocks(vec![Value::Object(o)])),
        Some(other) => Err(MessageError::BadField {
            field: "content",
            reason: format!(
                "expected a string or a list of blocks, got {}",
                json_kind(&other)
            ),
        }),
    }
}

/// Parses JSON text of tool arguments into an object. `""` parses as `{}`.
pub fn parse_tool_args(raw: &str) -> Result<Map<String, Value>, String> {
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(other) => Err(format!(
            "tool arguments must be a JSON object, got {}",
            json_kind(&other)
        )),
        Err(e) => Err(format!("invalid JSON in tool arguments: {e}")),
    }
}

fn parse_tool_call(v: Value) -> Result<Result<ToolCall, InvalidToolCall>, MessageError> {
    let Value::Object(mut o) = v else {
        return Err(MessageError::BadField {
            field: "tool_calls",
            reason: format!("each tool call must be an object, got {}", json_kind(&v)),
        });
    };
    // OpenAI shape: {id, type: "function", function: {name, arguments}}
    if let Some(Value::Object(mut f)) = o.remove("function") {
        let id = take_opt_string(&mut o, "id")?;
        let name = take_opt_string(&mut f, "name")?;
        let raw = match f.remove("arguments") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s,
            Some(Value::Object(m)) => {
                return Ok(Ok(ToolCall {
                    name: name.unwrap_or_default(),
                    args: m,
                    id,
                    extra: Map::new(),
                }));
            }
            Some(other) => other.to_string(),
        };
        return Ok(match (name, parse_tool_args(&raw)) {
            (Some(name), Ok(args)) => Ok(ToolCall {
                name,
                args,
                id,
                extra: Map::new(),
            }),
            (name, Err(e)) => Err(InvalidToolCall {
                name,
                args: Some(raw),
                id,
                error: Some(e),
                extra: Map::new(),
            }),
            (None, Ok(_)) => Err(InvalidToolCall {
                name: None,
                args: Some(raw),
                id,
                error: Some("tool call has no name".to_string()),
                extra: Map::new(),
            }),
        });
    }
    let name = take_opt_string(&mut o, "name")?;
    let id = take_opt_string(&mut o, "id")?;
    o.remove("type");
    let args = match o.remove("args") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(Value::String(s)) => parse_tool_args(&s).map_err(|e| (s, e)),
        Some(other) => Err((
            other.to_string(),
            format!(
                "tool arguments must be an object, got {}",
                json_kind(&other)
            ),
        )),
    };
    Ok(match (name, args) {
        (Some(name), Ok(args)) => Ok(ToolCall {
            name,
            args,
            id,
            extra: o,
        }),
        (name, Err((raw, e))) => Err(InvalidToolCall {
            name,
            args: Some(raw),
            id,
            error: Some(e),
            extra: o,
        }),
        (None, Ok(args)) => Err(InvalidToolCall {
            name: None,
            args: Some(Value::Object(args).to_string()),
            id,
            error: Some("tool call has no name".to_string()),
            extra: o,
        }),
    })
}

fn parse_invalid_tool_call(v: Value) -> Result<InvalidToolCall, MessageError> {
    let Value::Object(mut o) = v else {
        return Err(MessageError::BadField {
            field: "invalid_tool_calls",
            reason: "each entry must be an object".to_string(),
        });
    };
    o.remove("type");
    let args = match o.remove("args") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    };
    Ok(InvalidToolCall {
        name: take_opt_string(&mut o, "name")?,
        args,
        id: take_opt_string(&mut o, "id")?,
        error: match o.remove("error") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(other) => Some(other.to_string()),
        },
        extra: o,
    })
}

fn parse_tool_call_chunk(v: Value) -> Result<ToolCallChunk, MessageError> {
    let Value::Object(mut o) = v else {
        return Err(MessageError::BadField {
            field: "tool_call_chunks",
            reason: "each entry must be an object".to_string(),
        });
    };
    o.remove("type");
    let args = match o.remove("args") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    };
    let index = match o.remove("index") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_i64(),
        Some(other) => {
            return Err(MessageError::BadField {
                field: "tool_call_chunks",
                reason: format!("index must be an integer, got {}", json_kind(&other)),
            });
        }
    };
    Ok(ToolCallChunk {
        name: take_opt_string(&mut o, "name")?,
        args,
        id: take_opt_string(&mut o, "id")?,
        index,
        extra: o,
    })
}

fn take_list(o: &mut Map<String, Value>, key: &'static str) -> Result<Vec<Value>, MessageError> {
    match o.remove(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(MessageError::BadField {
            field: key,
            reason: format!("expected a list, got {}", json_kind(&other)),
        }),
    }
}

fn parse_message(v: Value) -> Result<Message, MessageError> {
    let mut o = match v {
        Value::Object(o) => o,
        Value::String(s) => return Ok(Message::human(s)),
        other => return Err(MessageError::NotAnObject(json_kind(&other))),
    };
    let kind = match (o.remove("type"), o.remove("role")) {
        (Some(Value::String(t)), role) => {
            let kind = MessageKind::parse(&t);
            if kind == MessageKind::Chat
                && let Some(r) = role
            {
                o.insert("role".to_string(), r);
            }
            kind
        }
        (None | Some(Value::Null), Some(Value::String(r))) => MessageKind::parse(&r),
        (Some(other), _) => {
            return Err(MessageError::BadField {
                field: "type",
                reason: format!("expected a string, got {}", json_kind(&other)),
            });
        }
        _ => return Err(MessageError::MissingType),
    };
    let mut m = Message::blank(kind.clone(), parse_content(o.remove("content"))?);
    m.additional_kwargs = take_map(&mut o, "additional_kwargs")?;
    m.response_metadata = take_map(&mut o, "response_metadata")?;
    m.name = take_opt_string(&mut o, "name")?;
    m.id = take_opt_string(&mut o, "id")?;
    if kind.is_ai() || kind == MessageKind::Other("AIMessage".into()) {
        for tc in take_list(&mut o, "tool_calls")? {
            match parse_tool_call(tc)? {
                Ok(call) => m.tool_calls.push(call),
                Err(bad) => m.invalid_tool_calls.push(bad),
            }
        }
        for itc in take_list(&mut o, "invalid_tool_calls")? {
            m.invalid_tool_calls.push(parse_invalid_tool_call(itc)?);
        }
        m.usage_metadata = match o.remove("usage_metadata") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                serde_json::from_value(v).map_err(|e| MessageError::BadField {
                    field: "usage_metadata",
                    reason: e.to_string(),
                })?,
            ),
        };
        if kind == MessageKind::AiChunk {
            for c in take_list(&mut o, "tool_call_chunks")? {
                m.tool_call_chunks.push(parse_tool_call_chunk(c)?);
            }
            m.chunk_position = take_opt_string(&mut o, "chunk_position")?;
        }
    }
    if kind == MessageKind::Tool {
        m.tool_call_id = take_opt_string(&mut o, "tool_call_id")?;
        m.artifact = o.remove("artifact").unwrap_or(Value::Null);
        m.status = take_opt_string(&mut o, "status")?;
        if m.status.is_none() {
            m.status = Some("success".to_string());
        }
    }
    if kind == MessageKind::Chat {
        m.role = take_opt_string(&mut o, "role")?;
    }
    if kind == MessageKind::Function && m.name.is_none() {
        m.name = None;
    }
    m.extra = o;
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

fn invalid_tool_call_value(tc: &InvalidToolCall) -> Value {
    let mut o = Map::new();
    o.insert("name".into(), opt_str(&tc.name));
    o.insert("args".into(), opt_str(&tc.args));
    o.insert("id".into(), opt_str(&tc.id));
    o.insert("error".into(), opt_str(&tc.error));
    o.insert("type".into(), Value::String("invalid_tool_call".into()));
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
                            .map(invalid_tool_call_value)
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

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(s)
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
