//! The typed options of a stored run (`runs.kwargs`). Run creation builds a [`RunKwargs`] and
//! stores it as JSON; every process that claims the run reads it back through this type, so
//! a misspelled key is a compile error, not a silent default. Keys this version does not know
//! (written by a newer one) are kept in [`RunKwargs::extra`] and written back unchanged.

use fawn_agent::Breakpoints;
use fawn_checkpoint::JsonMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Every option a run carries from its creation to whichever worker executes it. The field
/// order is the stored JSON's key order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunKwargs {
    /// The input (a state update), `null` when the run has none.
    #[serde(default)]
    pub input: Option<Value>,
    /// The `Command` (resume / update / goto), `null` when none.
    #[serde(default)]
    pub command: Option<Value>,
    #[serde(default)]
    pub config: RunConfig,
    #[serde(default)]
    pub context: JsonMap,
    /// The stream modes asked for (`["values"]` when none).
    #[serde(default = "default_modes", deserialize_with = "one_or_many")]
    pub stream_mode: Vec<String>,
    #[serde(default, with = "breakpoints")]
    pub interrupt_before: Breakpoints,
    #[serde(default, with = "breakpoints")]
    pub interrupt_after: Breakpoints,
    /// A URL (or a `/path` on this server) to POST the finished run to.
    #[serde(default)]
    pub webhook: Option<String>,
    #[serde(default)]
    pub feedback_keys: Option<Value>,
    /// A stateless run's thread, deleted (with its files) when the run ends.
    #[serde(default)]
    pub temporary: bool,
    #[serde(default)]
    pub subgraphs: bool,
    /// Keep the event log after the run ends and send event ids (`stream_resumable`).
    #[serde(default)]
    pub resumable: bool,
    #[serde(default = "yes")]
    pub checkpoint_during: bool,
    #[serde(default)]
    pub durability: Durability,
    #[serde(default)]
    pub on_disconnect: OnDisconnect,
    /// The checkpoint a run forks from (`checkpoint_id` given at creation).
    #[serde(default)]
    pub checkpoint: Option<CheckpointTarget>,
    /// The graph, resolved from the assistant at creation.
    #[serde(default)]
    pub graph_id: Option<String>,
    /// The request that created the run (its id and trace), for the logs and the trace of
    /// whichever worker executes it. Not shown to clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<RunOrigin>,
    /// Keys this version does not know, kept as they are.
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl Default for RunKwargs {
    fn default() -> Self {
        RunKwargs {
            input: None,
            command: None,
            config: RunConfig::default(),
            context: JsonMap::new(),
            stream_mode: default_modes(),
            interrupt_before: Breakpoints::None,
            interrupt_after: Breakpoints::None,
            webhook: None,
            feedback_keys: None,
            temporary: false,
            subgraphs: false,
            resumable: false,
            checkpoint_during: true,
            durability: Durability::default(),
            on_disconnect: OnDisconnect::default(),
            checkpoint: None,
            graph_id: None,
            origin: None,
            extra: JsonMap::new(),
        }
    }
}

/// The key of [`RunKwargs::origin`] in the stored JSON.
pub const ORIGIN_KEY: &str = "origin";

/// Where a run came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunOrigin {
    /// The creating request's `X-Request-Id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The creating request's span (W3C `traceparent`), when tracing was on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The request continued its caller's trace: the run belongs to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continued: bool,
}

impl RunOrigin {
    /// The request being handled now, if any.
    pub fn current() -> Option<RunOrigin> {
        fawn_telemetry::request::current().map(|r| RunOrigin {
            request_id: Some(r.id.to_string()),
            traceparent: r.traceparent,
            continued: r.continued,
        })
    }

    /// How the run's span joins the request's trace.
    pub fn run_parent(origin: Option<&RunOrigin>) -> fawn_telemetry::trace::RunParent {
        use fawn_telemetry::trace::RunParent;
        match origin.and_then(|o| o.traceparent.clone().map(|tp| (tp, o.continued))) {
            Some((tp, true)) => RunParent::Child(tp),
            Some((tp, false)) => RunParent::Linked(tp),
            None => RunParent::None,
        }
    }
}

/// The key of `config.configurable` naming the user a run acts for (set at creation: the
/// caller's identity wins over anything the client sent).
pub const USER_ID: &str = "user_id";

/// A run's `config`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    #[serde(default)]
    pub configurable: JsonMap,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursion_limit: Option<Value>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl RunConfig {
    /// The user the run acts for (`configurable.user_id`).
    pub fn user_id(&self) -> Option<&str> {
        self.configurable.get(USER_ID).and_then(Value::as_str)
    }
}

/// The checkpoint a run starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointTarget {
    pub checkpoint_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_ns: Option<String>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl CheckpointTarget {
    pub fn ns(&self) -> &str {
        self.checkpoint_ns.as_deref().unwrap_or("")
    }
}

/// When a run's checkpoints are written (the run's `durability`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Option<String>", into = "&'static str")]
pub enum Durability {
    /// Each before the next step starts.
    Sync,
    /// Each while the next steps run (LangGraph's default): queued, and written in order by
    /// one task per run, what accumulated during a write as one chain.
    #[default]
    Async,
    /// All of them when the run ends, as one chain: a run that dies leaves none.
    Exit,
}

impl Durability {
    pub const NAMES: [&'static str; 3] = ["sync", "async", "exit"];

    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
            Durability::Exit => "exit",
        }
    }
}

impl From<Option<String>> for Durability {
    /// Absent or unknown: `async`.
    fn from(v: Option<String>) -> Durability {
        match v.as_deref() {
            Some("sync") => Durability::Sync,
            Some("exit") => Durability::Exit,
            _ => Durability::Async,
        }
    }
}

impl From<Durability> for &'static str {
    fn from(d: Durability) -> &'static str {
        d.as_str()
    }
}

/// What a client's disconnect does to the run it created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Option<String>", into = "&'static str")]
pub enum OnDisconnect {
    Cancel,
    #[default]
    Continue,
}

impl OnDisconnect {
    pub const NAMES: [&'static str; 2] = ["cancel", "continue"];
}

impl From<Option<String>> for OnDisconnect {
    fn from(v: Option<String>) -> OnDisconnect {
        match v.as_deref() {
            Some("cancel") => OnDisconnect::Cancel,
            _ => OnDisconnect::Continue,
        }
    }
}

impl From<OnDisconnect> for &'static str {
    fn from(d: OnDisconnect) -> &'static str {
        match d {
            OnDisconnect::Cancel => "cancel",
            OnDisconnect::Continue => "continue",
        }
    }
}

fn default_modes() -> Vec<String> {
    vec!["values".to_string()]
}

fn yes() -> bool {
    true
}

/// A string or a list of strings (other items are dropped); `null` or empty → `["values"]`.
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    let out: Vec<String> = match v {
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(a)) => a
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    Ok(if out.is_empty() { default_modes() } else { out })
}

/// `null` | `"*"` | `["node", …]`, as the API writes breakpoints.
mod breakpoints {
    use super::*;

    pub fn serialize<S: Serializer>(b: &Breakpoints, s: S) -> Result<S::Ok, S::Error> {
        match b {
            Breakpoints::None => s.serialize_none(),
            Breakpoints::All => s.serialize_str("*"),
            Breakpoints::Nodes(n) => n.serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Breakpoints, D::Error> {
        Ok(match Option::<Value>::deserialize(d)? {
            Some(Value::String(s)) if s == "*" => Breakpoints::All,
            Some(Value::Array(a)) => Breakpoints::Nodes(
                a.into_iter()
                    .filter_map(|v| match v {
                        Value::String(s) => Some(s),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => Breakpoints::None,
        })
    }
}

impl RunKwargs {
    /// Reads a stored run's kwargs.
    pub fn from_map(m: &JsonMap) -> Result<RunKwargs, String> {
        serde_json::from_value(Value::Object(m.clone()))
            .map_err(|e| format!("the run's stored options are unreadable: {e}"))
    }

    /// The user a stored run acts for (`config.configurable.user_id`; `None` when it has
    /// none), read from the stored JSON without deserializing the rest of the options (this
    /// runs on every run-scoped request's ownership check). The path is the one this type
    /// writes: a test ties the two.
    pub fn stored_user(stored: &JsonMap) -> Option<&str> {
        stored
            .get("config")?
            .get("configurable")?
            .get(USER_ID)?
            .as_str()
    }

    /// The graph of a stored run ([`RunKwargs::graph_id`]), read as
    /// [`RunKwargs::stored_user`] is (for the run's span, before the options are parsed).
    pub fn stored_graph_id(stored: &JsonMap) -> Option<&str> {
        stored.get("graph_id")?.as_str()
    }

    /// The input of a stored run ([`RunKwargs::input`]; `None` when it is absent or null),
    /// read as [`RunKwargs::stored_user`] is.
    pub fn stored_input(stored: &JsonMap) -> Option<&Value> {
        stored.get("input").filter(|v| !v.is_null())
    }

    /// The JSON stored in `runs.kwargs`.
    pub fn to_map(&self) -> JsonMap {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m,
            _ => JsonMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stored_row_round_trips_unchanged() {
        let stored = json!({
            "input": {"messages": [{"role": "user", "content": "hi"}]},
            "command": null,
            "config": {"configurable": {"thread_id": "t", "model_name": "m"},
                       "tags": ["a"], "recursion_limit": 50},
            "context": {"k": 1},
            "stream_mode": ["values", "messages-tuple"],
            "interrupt_before": "*",
            "interrupt_after": ["tools"],
            "webhook": null,
            "feedback_keys": null,
            "temporary": false,
            "subgraphs": true,
            "resumable": true,
            "checkpoint_during": true,
            "durability": "exit",
            "on_disconnect": "cancel",
            "checkpoint": {"checkpoint_id": "c1", "checkpoint_ns": ""},
            "graph_id": "lead_agent",
            "from_a_newer_version": {"x": 1},
        });
        let Value::Object(m) = stored.clone() else {
            unreachable!()
        };
        let kw = RunKwargs::from_map(&m).unwrap();
        assert_eq!(kw.durability, Durability::Exit);
        assert_eq!(kw.on_disconnect, OnDisconnect::Cancel);
        assert_eq!(kw.interrupt_before, Breakpoints::All);
        assert_eq!(kw.interrupt_after, Breakpoints::Nodes(vec!["tools".into()]));
        assert_eq!(kw.config.tags, ["a"]);
        assert_eq!(kw.checkpoint.as_ref().unwrap().checkpoint_id, "c1");
        assert_eq!(kw.extra["from_a_newer_version"], json!({"x": 1}));
        let back = Value::Object(kw.to_map());
        assert_eq!(back, stored);
        assert_eq!(
            serde_json::to_string(&back).unwrap(),
            serde_json::to_string(&stored).unwrap(),
            "same key order"
        );
    }

    #[test]
    fn old_and_sparse_rows_load_with_defaults() {
        let kw = RunKwargs::from_map(&JsonMap::new()).unwrap();
        assert_eq!(kw, RunKwargs::default());
        assert_eq!(kw.stream_mode, ["values"]);
        assert!(kw.checkpoint_during);
        let Value::Object(m) = json!({"stream_mode": "updates", "durability": "weird",
                                      "interrupt_before": null, "input": null})
        else {
            unreachable!()
        };
        let kw = RunKwargs::from_map(&m).unwrap();
        assert_eq!(kw.stream_mode, ["updates"]);
        assert_eq!(kw.durability, Durability::Async);
        assert_eq!(kw.input, None);
    }

    #[test]
    fn a_wrong_type_is_an_error_not_a_panic() {
        let Value::Object(m) = json!({"temporary": "yes"}) else {
            unreachable!()
        };
        let e = RunKwargs::from_map(&m).unwrap_err();
        assert!(
            e.starts_with("the run's stored options are unreadable: ") && e.contains("bool"),
            "{e}"
        );
    }

    /// Ownership checks read the user of a stored run without deserializing it: the path
    /// they read is the one the type writes.
    #[test]
    fn the_stored_user_is_the_typed_one() {
        let mut kw = RunKwargs::default();
        assert_eq!(RunKwargs::stored_user(&kw.to_map()), None);
        kw.config
            .configurable
            .insert(USER_ID.into(), Value::String("u1".into()));
        assert_eq!(kw.config.user_id(), Some("u1"));
        let stored = kw.to_map();
        assert_eq!(RunKwargs::stored_user(&stored), Some("u1"));
        assert_eq!(
            RunKwargs::from_map(&stored).unwrap().config.user_id(),
            Some("u1")
        );
        kw.config.configurable.insert(USER_ID.into(), json!(7));
        assert_eq!(RunKwargs::stored_user(&kw.to_map()), None, "not a string");
        // The other fields read before the options are parsed.
        assert_eq!(RunKwargs::stored_graph_id(&kw.to_map()), None);
        assert_eq!(RunKwargs::stored_input(&kw.to_map()), None);
        kw.graph_id = Some("g".into());
        kw.input = Some(json!({"messages": []}));
        let stored = kw.to_map();
        assert_eq!(RunKwargs::stored_graph_id(&stored), Some("g"));
        assert_eq!(
            RunKwargs::stored_input(&stored),
            Some(&json!({"messages": []}))
        );
    }
}
