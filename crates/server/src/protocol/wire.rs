//! The protocol's JSON shapes: event envelopes, command responses and errors, and the
//! subscription filter (channels, namespaces, depth) with its matching rules.
//!
//! * An event: `{"type": "event", "event_id", "seq", "method", "params": {"namespace",
//!   "timestamp", "data", "node"?}}`. `method` is the channel, except `input.requested`
//!   (channel `input`); a `custom` event whose data has a `name` is also on
//!   `custom:<name>`.
//! * A response: `{"type": "success", "id", "result", "meta": {"applied_through_seq"}}` or
//!   `{"type": "error", "id", "error": <code>, "message"}`; an error frame a stream sends
//!   unasked has `"id": null`.
//! * Namespaces match by prefix: a filter segment without `:` also matches a segment
//!   `name:<id>` of that name; `depth` bounds how far below the prefix an event may be.

use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The channels a subscription may name (besides `custom:<name>`).
pub const CHANNELS: &[&str] = &[
    "values",
    "updates",
    "messages",
    "tools",
    "lifecycle",
    "input",
    "checkpoints",
    "tasks",
    "custom",
];

/// Error codes of the protocol (`langchain-protocol` `ErrorCode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    InvalidArgument,
    UnknownCommand,
    UnknownError,
    NoSuchRun,
    NoSuchSubscription,
    NoSuchNamespace,
    NoSuchInterrupt,
    NoSuchCheckpoint,
    PermissionDenied,
    NotSupported,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid_argument",
            Code::UnknownCommand => "unknown_command",
            Code::UnknownError => "unknown_error",
            Code::NoSuchRun => "no_such_run",
            Code::NoSuchSubscription => "no_such_subscription",
            Code::NoSuchNamespace => "no_such_namespace",
            Code::NoSuchInterrupt => "no_such_interrupt",
            Code::NoSuchCheckpoint => "no_such_checkpoint",
            Code::PermissionDenied => "permission_denied",
            Code::NotSupported => "not_supported",
        }
    }
}

/// A failed command: its code and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError {
    pub code: Code,
    pub message: String,
}

impl ProtocolError {
    pub fn new(code: Code, message: impl Into<String>) -> ProtocolError {
        ProtocolError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> ProtocolError {
        ProtocolError::new(Code::InvalidArgument, message)
    }

    /// The error response to command `id` (`None`: an unsolicited error frame).
    pub fn response(&self, id: Option<u64>) -> Value {
        json!({"type": "error", "id": id, "error": self.code.as_str(), "message": self.message})
    }
}

impl From<fawn_runtime::RuntimeError> for ProtocolError {
    fn from(e: fawn_runtime::RuntimeError) -> Self {
        use fawn_runtime::RuntimeError as E;
        match e {
            E::NotFound(m) if m.starts_with("Checkpoint ") => {
                ProtocolError::new(Code::NoSuchCheckpoint, m)
            }
            E::NotFound(m) | E::Invalid(m) | E::Rejected(m) => ProtocolError::invalid(m),
            E::InvalidField { path, reason } => {
                ProtocolError::invalid(crate::error::invalid_field_detail(&path, &reason))
            }
            E::MissingField { path } => {
                ProtocolError::invalid(crate::error::missing_field_detail(&path))
            }
            E::Conflict(m) => ProtocolError::new(Code::UnknownError, m),
            E::Store { context, source } => {
                tracing::error!(error = %source, "protocol command: {context}");
                ProtocolError::new(Code::UnknownError, format!("Internal error: {context}"))
            }
        }
    }
}

impl From<fawn_checkpoint::StoreError> for ProtocolError {
    fn from(e: fawn_checkpoint::StoreError) -> Self {
        tracing::error!(error = %e, "protocol command: storage");
        ProtocolError::new(Code::UnknownError, "Internal error: storage failed")
    }
}

/// A success response to command `id`.
pub fn success(id: u64, result: Value, applied_through_seq: u64) -> Value {
    json!({"type": "success", "id": id, "result": result,
        "meta": {"applied_through_seq": applied_through_seq}})
}

/// A parsed command: `{"id": <uint>, "method": <string>, "params"?: <object>}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    pub id: u64,
    pub method: String,
    pub params: Map<String, Value>,
}

impl Command {
    /// Reads a command; on failure, the error and the id to answer it with (when the
    /// command had a readable one).
    pub fn parse(v: &Value) -> Result<Command, (Option<Value>, ProtocolError)> {
        let bad = || {
            ProtocolError::invalid(
                "Protocol commands must include an integer id and string method.",
            )
        };
        let Value::Object(o) = v else {
            return Err((None, bad()));
        };
        let (Some(id), Some(method)) = (
            o.get("id").and_then(Value::as_u64),
            o.get("method").and_then(Value::as_str),
        ) else {
            return Err((o.get("id").cloned(), bad()));
        };
        let params = match o.get("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(_) => {
                return Err((
                    Some(json!(id)),
                    ProtocolError::invalid("`params` must be an object."),
                ));
            }
        };
        Ok(Command {
            id,
            method: method.to_string(),
            params,
        })
    }
}

/// One protocol event, built once and shared by every connection that sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtoEvent {
    pub seq: u64,
    pub event_id: String,
    /// `values`, `messages`, …, `input.requested`.
    pub method: &'static str,
    pub namespace: Vec<String>,
    /// `custom` events: the `name` in their data, if any.
    pub custom_name: Option<String>,
    /// The serialized envelope.
    pub json: Arc<str>,
}

impl ProtoEvent {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        seq: u64,
        event_id: String,
        method: &'static str,
        namespace: Vec<String>,
        node: Option<&str>,
        timestamp: i64,
        data: Value,
    ) -> ProtoEvent {
        let custom_name = (method == "custom")
            .then(|| data.get("name").and_then(Value::as_str).map(str::to_string))
            .flatten();
        let mut params = Map::new();
        params.insert("namespace".into(), json!(namespace));
        params.insert("timestamp".into(), json!(timestamp));
        params.insert("data".into(), data);
        if let Some(n) = node {
            params.insert("node".into(), json!(n));
        }
        let envelope = json!({"type": "event", "event_id": event_id, "seq": seq,
            "method": method, "params": params});
        ProtoEvent {
            seq,
            event_id,
            method,
            namespace,
            custom_name,
            json: Arc::from(envelope.to_string()),
        }
    }

    /// The channel a subscription names to get this event.
    pub fn channel(&self) -> &'static str {
        match self.method {
            "input.requested" => "input",
            m => m,
        }
    }
}

/// A subscription's filter.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Filter {
    pub channels: Vec<String>,
    /// `None`: every namespace.
    pub namespaces: Option<Vec<Vec<String>>>,
    /// `None`: any depth below the prefixes.
    pub depth: Option<u64>,
}

fn is_channel(c: &str) -> bool {
    CHANNELS.contains(&c) || c.strip_prefix("custom:").is_some_and(|n| !n.is_empty())
}

impl Filter {
    /// Reads `channels`, `namespaces` and `depth` of a subscription (or of a stream
    /// request's body). Channels must be known; namespaces a list of lists of strings;
    /// depth a non-negative integer.
    pub fn parse(o: &Map<String, Value>) -> Result<Filter, ProtocolError> {
        let channels = match o.get("channels") {
            Some(Value::Array(a)) if !a.is_empty() => a,
            _ => {
                return Err(ProtocolError::invalid(
                    "channels is required and must be a non-empty array",
                ));
            }
        };
        let mut out = Vec::new();
        let mut bad = Vec::new();
        for c in channels {
            match c.as_str() {
                Some(s) if is_channel(s) => {
                    if !out.iter().any(|o| o == s) {
                        out.push(s.to_string())
                    }
                }
                Some(s) => bad.push(s.to_string()),
                None => bad.push(c.to_string()),
            }
        }
        if !bad.is_empty() {
            return Err(ProtocolError::invalid(format!(
                "channels contains unsupported entries: {}. Allowed: {}, or any `custom:<name>`.",
                bad.join(", "),
                CHANNELS.join(", ")
            )));
        }
        let namespaces = match o.get("namespaces") {
            None | Some(Value::Null) => None,
            Some(Value::Array(list)) => {
                let mut nss = Vec::with_capacity(list.len());
                for ns in list {
                    let Some(segs) = ns.as_array() else {
                        return Err(ProtocolError::invalid(
                            "namespaces must be a list of namespaces (lists of strings)",
                        ));
                    };
                    let mut out = Vec::with_capacity(segs.len());
                    for s in segs {
                        match s.as_str() {
                            Some(s) => out.push(s.to_string()),
                            None => {
                                return Err(ProtocolError::invalid(
                                    "namespaces must be a list of namespaces (lists of strings)",
                                ));
                            }
                        }
                    }
                    nss.push(out);
                }
                Some(nss)
            }
            Some(_) => {
                return Err(ProtocolError::invalid(
                    "namespaces must be a list of namespaces (lists of strings)",
                ));
            }
        };
        let depth = match o.get("depth") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(d) => Some(d),
                None => {
                    return Err(ProtocolError::invalid(
                        "depth must be a non-negative integer",
                    ));
                }
            },
        };
        Ok(Filter {
            channels: out,
            namespaces,
            depth,
        })
    }

    /// Whether `event` is on one of the channels and under one of the namespaces.
    pub fn matches(&self, event: &ProtoEvent) -> bool {
        let channel = event.channel();
        let on_channel = self.channels.iter().any(|c| {
            c == channel
                || (channel == "custom"
                    && c.strip_prefix("custom:")
                        .is_some_and(|name| event.custom_name.as_deref() == Some(name)))
        });
        on_channel && namespace_matches(&event.namespace, self.namespaces.as_deref(), self.depth)
    }
}

/// A namespace segment without its `:<id>` suffix.
fn segment_name(s: &str) -> &str {
    s.split_once(':').map(|(n, _)| n).unwrap_or(s)
}

fn is_prefix(namespace: &[String], prefix: &[String]) -> bool {
    prefix.len() <= namespace.len()
        && prefix
            .iter()
            .zip(namespace)
            .all(|(p, n)| p == n || (!p.contains(':') && segment_name(n) == p.as_str()))
}

/// Whether `namespace` is under one of `prefixes` (all when `None` or empty), at most
/// `depth` segments below it.
pub fn namespace_matches(
    namespace: &[String],
    prefixes: Option<&[Vec<String>]>,
    depth: Option<u64>,
) -> bool {
    let Some(prefixes) = prefixes.filter(|p| !p.is_empty()) else {
        return true;
    };
    prefixes.iter().any(|p| {
        is_prefix(namespace, p) && depth.is_none_or(|d| (namespace.len() - p.len()) as u64 <= d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(method: &'static str, ns: &[&str], data: Value) -> ProtoEvent {
        ProtoEvent::new(
            1,
            "e".into(),
            method,
            ns.iter().map(|s| s.to_string()).collect(),
            None,
            0,
            data,
        )
    }

    fn filter(v: Value) -> Filter {
        match v {
            Value::Object(o) => Filter::parse(&o).unwrap(),
            _ => panic!(),
        }
    }

    #[test]
    fn channels_and_custom_names() {
        let f = filter(json!({"channels": ["values", "input", "custom:progress"]}));
        assert!(f.matches(&ev("values", &[], json!({}))));
        assert!(f.matches(&ev("input.requested", &[], json!({}))));
        assert!(!f.matches(&ev("messages", &[], json!({}))));
        assert!(f.matches(&ev(
            "custom",
            &[],
            json!({"name": "progress", "payload": 1})
        )));
        assert!(!f.matches(&ev("custom", &[], json!({"payload": 1}))));
        let all_custom = filter(json!({"channels": ["custom"]}));
        assert!(all_custom.matches(&ev("custom", &[], json!({"name": "x", "payload": 1}))));
    }

    #[test]
    fn namespaces_by_prefix_and_depth() {
        let root_only = filter(json!({"channels": ["messages"], "namespaces": [[]], "depth": 0}));
        assert!(root_only.matches(&ev("messages", &[], json!({}))));
        assert!(!root_only.matches(&ev("messages", &["tools:1"], json!({}))));
        let under = filter(json!({"channels": ["messages"], "namespaces": [["tools"]]}));
        assert!(under.matches(&ev("messages", &["tools:abc"], json!({}))));
        assert!(under.matches(&ev("messages", &["tools:abc", "model:2"], json!({}))));
        assert!(!under.matches(&ev("messages", &[], json!({}))));
        let exact =
            filter(json!({"channels": ["messages"], "namespaces": [["tools:abc"]], "depth": 0}));
        assert!(exact.matches(&ev("messages", &["tools:abc"], json!({}))));
        assert!(!exact.matches(&ev("messages", &["tools:abd"], json!({}))));
        assert!(!exact.matches(&ev("messages", &["tools:abc", "x"], json!({}))));
    }

    #[test]
    fn bad_filters_are_refused() {
        for bad in [
            json!({}),
            json!({"channels": []}),
            json!({"channels": ["bogus"]}),
            json!({"channels": [3]}),
            json!({"channels": ["custom:"]}),
            json!({"channels": ["values"], "namespaces": "x"}),
            json!({"channels": ["values"], "namespaces": [[1]]}),
            json!({"channels": ["values"], "depth": -1}),
            json!({"channels": ["values"], "depth": "2"}),
        ] {
            let Value::Object(o) = bad.clone() else {
                panic!()
            };
            let e = Filter::parse(&o).unwrap_err();
            assert_eq!(e.code, Code::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn commands() {
        let c =
            Command::parse(&json!({"id": 3, "method": "run.start", "params": {"a": 1}})).unwrap();
        assert_eq!((c.id, c.method.as_str()), (3, "run.start"));
        for bad in [
            json!([1]),
            json!({"method": "x"}),
            json!({"id": -1, "method": "x"}),
            json!({"id": "1", "method": "x"}),
            json!({"id": 1, "method": 2}),
            json!({"id": 1, "method": "x", "params": 3}),
        ] {
            assert!(Command::parse(&bad).is_err(), "{bad}");
        }
    }
}
