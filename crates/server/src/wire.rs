//! The LangGraph wire shapes (`langgraph-api.md` §6) built from storage records: Assistant,
//! AssistantVersion, Thread, ThreadState, Run, Cron, Item. Timestamps are RFC 3339 with
//! microseconds and `+00:00`; messages serialize through `fawn_state::Message`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use fawn_checkpoint::{
    Assistant, AssistantVersion, Checkpoint, Cron, Item, Run, TaskRecord, Thread,
};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::HashMap;

pub use fawn_runtime::wire::{checkpoint_ref, interrupts_by_task, run, run_out, ts};

/// [`ts`] (`2026-11-21T12:31:24.238037+00:00`), or `null`.
pub fn ts_opt(t: &Option<DateTime<Utc>>) -> Value {
    match t {
        Some(t) => Value::String(ts(t)),
        None => Value::Null,
    }
}

/// A JSON response serialized straight into the body buffer.
pub fn json_response<T: Serialize + ?Sized>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => {
            let mut r = (status, bytes).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => {
            tracing::error!(error = %e, "could not serialize a response");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                [(header::CONTENT_TYPE, "application/json")],
                r#"{"detail":"Internal error: could not serialize the response"}"#,
            )
                .into_response()
        }
    }
}

/// 200 with a JSON body.
pub fn ok<T: Serialize + ?Sized>(body: &T) -> Response {
    json_response(StatusCode::OK, body)
}

/// Keeps only `select`ed keys of each object (no-op when `select` is empty).
pub fn select_keys(v: Value, select: &[String]) -> Value {
    if select.is_empty() {
        return v;
    }
    match v {
        Value::Object(mut m) => {
            let mut out = Map::new();
            for k in select {
                if let Some(x) = m.remove(k) {
                    out.insert(k.clone(), x);
                }
            }
            Value::Object(out)
        }
        other => other,
    }
}

// ------------------------------------------------------------------------------ assistants

pub fn assistant(a: &Assistant) -> Value {
    json!({
        "assistant_id": a.assistant_id,
        "graph_id": a.graph_id,
        "config": a.config,
        "context": a.context,
        "metadata": a.metadata,
        "name": a.name,
        "description": a.description,
        "version": a.version,
        "created_at": ts(&a.created_at),
        "updated_at": ts(&a.updated_at),
    })
}

pub fn assistant_version(a: &AssistantVersion) -> Value {
    json!({
        "assistant_id": a.assistant_id,
        "version": a.version,
        "graph_id": a.graph_id,
        "config": a.config,
        "context": a.context,
        "metadata": a.metadata,
        "created_at": ts(&a.created_at),
        "name": a.name,
        "description": a.description,
    })
}

// ------------------------------------------------------------------------- hidden messages

/// What DeerFlow marks the messages its UI must not show with (`additional_kwargs`): the
/// date reminder and memory block of the lead agent, goal continuations, injected images, ….
const HIDE_FROM_UI: &str = "hide_from_ui";

/// Whether the request being answered leaves DeerFlow's hidden messages out of thread
/// values: at `/`, the LangGraph-native mount. LangGraph-native UIs know no such marker
/// (LangChain's Agent Chat UI hides only ids starting with `do-not-render-`, and labels a
/// thread with its first message), so there the values a client reads or streams are the
/// conversation as its user sees it; every id in them is the stored one, and forks from any
/// checkpoint work as before. Under `/api` and `/api/langgraph` (DeerFlow's UI, which hides
/// them itself and whose history features read them) values are whole. Read while a
/// handler runs (the mount is a task-local of the request).
pub fn hides_internal_messages() -> bool {
    !crate::extract::deerflow_mount()
}

/// Whether a (serialized) message is one DeerFlow hides from its UI.
pub fn is_hidden_message(m: &Value) -> bool {
    m.get("additional_kwargs")
        .and_then(|k| k.get(HIDE_FROM_UI))
        .and_then(Value::as_bool)
        == Some(true)
}

/// Drops the hidden messages from `values.messages`.
pub fn drop_hidden_messages(values: &mut Value) {
    if let Some(Value::Array(messages)) = values.get_mut("messages") {
        messages.retain(|m| !is_hidden_message(m));
    }
}

/// [`drop_hidden_messages`] on serialized values (a `values` event, a `/wait` body): `None`
/// when there is nothing to drop, so the bytes go out as they are. Every `values` event of
/// a lead-agent run carries a hidden reminder, so this is on the streaming path: the values
/// are not parsed into a tree and written again. One pass finds the top-level `messages`
/// array and each message's bytes (borrowed [`RawValue`]s), up to the last marker in the
/// bytes (the rest is not read: the reminder is a thread's first message); only a message whose bytes
/// contain the marker is parsed (and judged by [`is_hidden_message`]), and the hidden ones
/// are cut out of the original bytes, separators included.
///
/// [`RawValue`]: serde_json::value::RawValue
pub fn without_hidden_messages(data: &[u8]) -> Option<bytes::Bytes> {
    // The key, quoted: inside a JSON string its quotes would be escaped.
    // Built once: building a finder costs more than most searches.
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"hide_from_ui\""));
    let has_marker = |b: &[u8]| FINDER.find(b).is_some();
    if !has_marker(data) {
        return None;
    }
    // Nothing after the last marker can be hidden: the messages are read up to the first
    // one that starts past it, and the rest of the bytes are not parsed.
    let until = FINDER.find_iter(data).last().unwrap_or(0);
    let messages = leading_messages(data, until)?;
    // The byte range of each message within `data` (the raw values borrow from it).
    let base = data.as_ptr() as usize;
    let ranges: Vec<(usize, usize)> = messages
        .iter()
        .map(|m| {
            let start = (m.get().as_ptr() as usize).wrapping_sub(base);
            (start, start + m.get().len())
        })
        .collect();
    if ranges.iter().any(|&(_, end)| end > data.len()) {
        return None;
    }
    let hidden: Vec<bool> = messages
        .iter()
        .map(|m| {
            has_marker(m.get().as_bytes())
                && serde_json::from_str::<HideProbe<'_>>(m.get()).is_ok_and(|p| p.hidden())
        })
        .collect();
    if !hidden.iter().any(|h| *h) {
        return None;
    }
    // Cut each hidden message with the separator that follows it (up to the next message),
    // or — for the last one kept before the end — the separator before it.
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    let n = ranges.len();
    for i in (0..n).filter(|i| hidden[*i]) {
        let (start, end) = ranges[i];
        let cut = if i + 1 < n {
            (start, ranges[i + 1].0)
        } else if let Some(prev) = (0..i).rev().find(|j| !hidden[*j]) {
            (ranges[prev].1, end)
        } else {
            (start, end)
        };
        cuts.push(cut);
    }
    // A run of hidden messages at the end, cut "from the kept one before": merge overlaps.
    cuts.sort_unstable();
    let mut out = Vec::with_capacity(data.len());
    let mut at = 0;
    for (start, end) in cuts {
        let start = start.max(at);
        if start > at {
            out.extend_from_slice(&data[at..start]);
        }
        at = at.max(end);
    }
    out.extend_from_slice(&data[at..]);
    Some(bytes::Bytes::from(out))
}

/// The messages of serialized values (their top-level `messages` array) as borrowed raw
/// values, in order, up to and including the first one that starts past byte `until`; the
/// rest of the document is not read. `None` when `data` is not an object with a `messages`
/// array (as far as it was read).
fn leading_messages(data: &[u8], until: usize) -> Option<Vec<&serde_json::value::RawValue>> {
    use serde::de::{DeserializeSeed, Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde_json::value::RawValue;
    use std::fmt;

    struct Doc<'a, 'o> {
        base: usize,
        until: usize,
        out: &'o mut Option<Vec<&'a RawValue>>,
    }
    struct Messages<'a, 'o> {
        base: usize,
        until: usize,
        out: &'o mut Vec<&'a RawValue>,
    }
    struct IsMessages(bool);
    impl<'de> serde::Deserialize<'de> for IsMessages {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = IsMessages;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a key")
                }
                fn visit_str<E: Error>(self, v: &str) -> Result<IsMessages, E> {
                    Ok(IsMessages(v == "messages"))
                }
            }
            d.deserialize_str(V)
        }
    }
    /// Raised to stop reading once the wanted part is read; not a parse error.
    const DONE: &str = "fawn: read enough";

    impl<'de: 'a, 'a> DeserializeSeed<'de> for Messages<'a, '_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }
    impl<'de: 'a, 'a> Visitor<'de> for Messages<'a, '_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an array of messages")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(m) = seq.next_element::<&'de RawValue>()? {
                let start = (m.get().as_ptr() as usize).wrapping_sub(self.base);
                self.out.push(m);
                if start > self.until {
                    return Err(A::Error::custom(DONE));
                }
            }
            Ok(())
        }
    }
    impl<'de: 'a, 'a> DeserializeSeed<'de> for Doc<'a, '_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de: 'a, 'a> Visitor<'de> for Doc<'a, '_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("thread values")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(IsMessages(is)) = map.next_key()? {
                if is && self.out.is_none() {
                    let mut out = Vec::new();
                    let read = map.next_value_seed(Messages {
                        base: self.base,
                        until: self.until,
                        out: &mut out,
                    });
                    *self.out = Some(out);
                    read?;
                    // Nothing else in the document matters.
                    return Err(A::Error::custom(DONE));
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }

    let mut out = None;
    let doc = Doc {
        base: data.as_ptr() as usize,
        until,
        out: &mut out,
    };
    let mut de = serde_json::Deserializer::from_slice(data);
    match doc.deserialize(&mut de) {
        Ok(()) => {}
        Err(e) if e.to_string().starts_with(DONE) => {}
        Err(_) => return None,
    }
    out
}

/// What [`is_hidden_message`] reads of a message, and nothing else (a reminder's text is
/// skipped, not copied into a tree). A message that does not fit this shape is not hidden,
/// as there.
#[derive(serde::Deserialize)]
struct HideProbe<'a> {
    #[serde(default, borrow)]
    additional_kwargs: Option<&'a serde_json::value::RawValue>,
}

#[derive(serde::Deserialize)]
struct HideKwargs {
    #[serde(default)]
    hide_from_ui: Option<Value>,
}

impl HideProbe<'_> {
    fn hidden(&self) -> bool {
        // Only an object has keys (a derived struct would also read an array).
        self.additional_kwargs
            .filter(|k| k.get().starts_with('{'))
            .and_then(|k| serde_json::from_str::<HideKwargs>(k.get()).ok())
            .is_some_and(|k| k.hide_from_ui == Some(Value::Bool(true)))
    }
}

/// Thread values as this request answers them (see [`hides_internal_messages`]).
fn answered_values(mut values: Value) -> Value {
    if hides_internal_messages() {
        drop_hidden_messages(&mut values);
    }
    values
}

// --------------------------------------------------------------------------------- threads

pub fn thread(t: &Thread) -> Value {
    let mut m = Map::new();
    m.insert("thread_id".into(), Value::String(t.thread_id.clone()));
    m.insert("created_at".into(), Value::String(ts(&t.created_at)));
    m.insert("updated_at".into(), Value::String(ts(&t.updated_at)));
    m.insert(
        "state_updated_at".into(),
        Value::String(ts(&t.state_updated_at)),
    );
    m.insert("metadata".into(), Value::Object(t.metadata.clone()));
    m.insert("status".into(), Value::String(t.status.as_str().into()));
    m.insert("config".into(), Value::Object(t.config.clone()));
    m.insert(
        "values".into(),
        t.values.clone().map_or(Value::Null, answered_values),
    );
    m.insert("interrupts".into(), Value::Object(t.interrupts.clone()));
    m.insert("error".into(), t.error.clone().unwrap_or(Value::Null));
    Value::Object(m)
}

/// `Thread` plus `ttl` (for `?include=ttl`).
pub fn thread_with_ttl(t: &Thread) -> Value {
    let mut v = thread(t);
    if let Value::Object(m) = &mut v {
        let ttl = match &t.ttl {
            Some(ttl) => json!({
                "ttl": ttl.minutes,
                "strategy": match ttl.strategy {
                    fawn_checkpoint::PruneStrategy::Delete => "delete",
                    fawn_checkpoint::PruneStrategy::KeepLatest => "keep_latest",
                },
                "expires_at": ts_opt(&t.expires_at),
            }),
            None => Value::Null,
        };
        m.insert("ttl".into(), ttl);
    }
    v
}

/// A task of a checkpoint. `ran` holds the writes of the step that ran from it (the
/// checkpoint it produced), when known: a task that finished carries its writes as `result`.
fn task_json(t: &TaskRecord, ran: Option<&[(String, Value)]>) -> Value {
    let result = match (ran, &t.error) {
        (Some(writes), None) => writes
            .iter()
            .find(|(node, _)| *node == t.name)
            .map(|(_, w)| w.clone())
            .unwrap_or(Value::Null),
        _ => Value::Null,
    };
    json!({
        "id": t.id,
        "name": t.name,
        "path": ["__pregel_pull", t.name],
        "error": t.error,
        "interrupts": t.interrupts,
        "checkpoint": null,
        "state": null,
        "result": result,
    })
}

/// `ThreadState`s of a history page (newest first). A task that already ran carries its
/// writes as `result`, read from the checkpoint its step produced: the oldest `loop` child
/// of the checkpoint within the page (a fork or a state update made from it later is not
/// the step that ran). Tasks of the page's newest checkpoint, or whose step is not in the
/// page, keep `result: null`.
pub fn history(items: &[Checkpoint]) -> Vec<Value> {
    let mut ran_from: HashMap<&str, &Checkpoint> = HashMap::new();
    for c in items {
        let (Some(parent), Some("loop")) = (
            c.parent_id.as_deref(),
            c.metadata.get("source").and_then(Value::as_str),
        ) else {
            continue;
        };
        let slot = ran_from.entry(parent).or_insert(c);
        if c.checkpoint_id < slot.checkpoint_id {
            *slot = c;
        }
    }
    items
        .iter()
        .map(|c| {
            let ran = ran_from
                .get(c.checkpoint_id.as_str())
                .map(|child| child.writes.as_slice());
            thread_state_with(c, ran)
        })
        .collect()
}

/// DeerFlow's checkpoint history entries (its gateway's `POST /api/threads/{id}/history`):
/// `{checkpoint_id, parent_checkpoint_id, metadata, values, created_at, next}`, newest first.
/// `values` holds `title` and `thread_data`, plus, on the newest entry, `messages` (AI and
/// tool messages carry the `run_id` of their turn's human message) and the `goal`, `todos`
/// and `artifacts` the UI renders. There is no
/// `checkpoint` object, so the LangGraph SDK's `useStream` does not pin its next run to the
/// head it last fetched (a compaction or goal written since would be forked away).
/// Metadata loses the bookkeeping keys, `step` stays.
pub fn deerflow_history(items: &[Checkpoint]) -> Vec<Value> {
    const HIDDEN: [&str; 6] = [
        "created_at",
        "updated_at",
        "source",
        "writes",
        "parents",
        "run_durations",
    ];
    items
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut values = Map::new();
            if let Some(t) = c.state.title.as_ref().filter(|t| !t.is_empty()) {
                values.insert("title".into(), Value::String(t.clone()));
            }
            if let Some(d) = &c.state.thread_data {
                values.insert("thread_data".into(), json!(d));
            }
            if i == 0 && !c.state.messages.is_empty() {
                let mut msgs = match json!(c.state.messages) {
                    Value::Array(a) => a,
                    _ => Vec::new(),
                };
                let mut turn: Option<Value> = None;
                for m in &mut msgs {
                    let Some(m) = m.as_object_mut() else { continue };
                    match m.get("type").and_then(Value::as_str) {
                        Some("human") => {
                            turn = m
                                .get("additional_kwargs")
                                .and_then(|k| k.get("run_id"))
                                .filter(|r| r.as_str().is_some_and(|r| !r.is_empty()))
                                .cloned();
                        }
                        Some("ai" | "tool") => {
                            if let Some(r) = &turn {
                                m.entry("run_id").or_insert_with(|| r.clone());
                            }
                        }
                        _ => {}
                    }
                }
                values.insert("messages".into(), Value::Array(msgs));
            }
            // Beyond DeerFlow's entry: the newest also carries the other channels its UI
            // renders from `values` (the goal chip, todos, the artifacts panel), so they
            // survive the history refetch that follows every run and a reload.
            if i == 0 {
                if let Some(g) = &c.state.goal {
                    values.insert("goal".into(), json!(g));
                }
                if let Some(t) = &c.state.todos {
                    values.insert("todos".into(), json!(t));
                }
                if let Some(a) = &c.state.artifacts {
                    values.insert("artifacts".into(), json!(a));
                }
            }
            let mut metadata = c.metadata.clone();
            metadata.retain(|k, _| !HIDDEN.contains(&k.as_str()));
            json!({
                "checkpoint_id": c.checkpoint_id,
                "parent_checkpoint_id": c.parent_id,
                "metadata": metadata,
                "values": values,
                "created_at": ts(&c.created_at),
                "next": c.next,
            })
        })
        .collect()
}

/// `ThreadState` of a checkpoint.
pub fn thread_state(c: &Checkpoint) -> Value {
    thread_state_with(c, None)
}

/// `ThreadState` of a checkpoint whose step is known to have run with the writes `ran`:
/// its finished tasks carry their writes as `result`.
pub fn thread_state_with(c: &Checkpoint, ran: Option<&[(String, Value)]>) -> Value {
    let interrupts: Vec<&fawn_state::Interrupt> =
        c.tasks.iter().flat_map(|t| t.interrupts.iter()).collect();
    let parent = match &c.parent_id {
        Some(p) => checkpoint_ref(&c.thread_id, &c.checkpoint_ns, p),
        None => Value::Null,
    };
    let mut m = Map::new();
    m.insert(
        "values".into(),
        answered_values(
            serde_json::to_value(&c.state).unwrap_or_else(|_| Value::Object(Map::new())),
        ),
    );
    m.insert("next".into(), json!(c.next));
    m.insert(
        "tasks".into(),
        Value::Array(c.tasks.iter().map(|t| task_json(t, ran)).collect()),
    );
    m.insert("metadata".into(), Value::Object(c.metadata.clone()));
    m.insert("created_at".into(), Value::String(ts(&c.created_at)));
    m.insert(
        "checkpoint".into(),
        checkpoint_ref(&c.thread_id, &c.checkpoint_ns, &c.checkpoint_id),
    );
    m.insert("parent_checkpoint".into(), parent);
    m.insert("interrupts".into(), json!(interrupts));
    m.insert(
        "checkpoint_id".into(),
        Value::String(c.checkpoint_id.clone()),
    );
    m.insert(
        "parent_checkpoint_id".into(),
        c.parent_id
            .clone()
            .map(Value::String)
            .unwrap_or(Value::Null),
    );
    Value::Object(m)
}

/// `ThreadState` of a thread without checkpoints.
pub fn empty_thread_state() -> Value {
    json!({
        "values": {}, "next": [], "tasks": [], "metadata": null, "created_at": null,
        "checkpoint": null, "parent_checkpoint": null, "interrupts": [],
        "checkpoint_id": null, "parent_checkpoint_id": null,
    })
}

// ------------------------------------------------------------------------------------ runs

/// A `Run` response serialized without an intermediate `Value`.
pub fn run_response(r: &Run) -> Response {
    ok(&run_out(r))
}

// ----------------------------------------------------------------------------------- crons

pub fn cron(c: &Cron) -> Value {
    json!({
        "cron_id": c.cron_id,
        "assistant_id": c.assistant_id,
        "thread_id": c.thread_id,
        "user_id": c.user_id.clone().unwrap_or_default(),
        "schedule": c.schedule,
        "timezone": c.timezone,
        "end_time": ts_opt(&c.end_time),
        "payload": c.payload,
        "next_run_date": ts_opt(&c.next_run_date),
        "metadata": c.metadata,
        "on_run_completed": c.on_run_completed,
        "enabled": c.enabled,
        "created_at": ts(&c.created_at),
        "updated_at": ts(&c.updated_at),
    })
}

// ----------------------------------------------------------------------------------- store

pub fn item(i: &Item) -> Value {
    json!({
        "namespace": i.namespace,
        "key": i.key,
        "value": i.value,
        "created_at": ts(&i.created_at),
        "updated_at": ts(&i.updated_at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The semantics [`without_hidden_messages`] must keep: parse, drop, write.
    fn reference(data: &[u8]) -> Option<Value> {
        let mut v: Value = serde_json::from_slice(data).ok()?;
        let before = v.get("messages")?.as_array()?.len();
        drop_hidden_messages(&mut v);
        (v["messages"].as_array()?.len() != before).then_some(v)
    }

    #[test]
    fn hidden_messages_are_cut_out_of_the_bytes_as_a_parse_would() {
        let hidden = |id: &str| json!({"content": "r", "additional_kwargs": {"hide_from_ui": true}, "type": "system", "id": id});
        let shown = |id: &str| json!({"content": "x \"hide_from_ui\":true", "additional_kwargs": {}, "type": "human", "id": id});
        let nested = json!({"content": "y", "additional_kwargs": {"meta": {"hide_from_ui": true}}, "type": "ai", "id": "n"});
        let cases = vec![
            json!({"messages": [hidden("a"), shown("b"), shown("c")], "title": "t"}),
            json!({"title": "t", "messages": [shown("b"), hidden("a"), shown("c")]}),
            json!({"messages": [shown("b"), hidden("a")], "x": 1}),
            json!({"messages": [shown("b"), hidden("a"), hidden("d")]}),
            json!({"messages": [hidden("a"), hidden("d")]}),
            json!({"messages": [hidden("a")]}),
            json!({"messages": [shown("b"), nested.clone()]}),
            json!({"messages": [], "other": {"hide_from_ui": true}}),
            json!({"messages": [hidden("a"), nested, hidden("d"), shown("b")]}),
            // Shapes the probe must judge as the tree does: not hidden.
            json!({"messages": [{"additional_kwargs": null, "x": {"hide_from_ui": true}}, shown("b")]}),
            json!({"messages": [{"additional_kwargs": {"hide_from_ui": "true"}}, hidden("a")]}),
            json!({"messages": [{"additional_kwargs": {"hide_from_ui": 1}}, shown("b")]}),
            json!({"messages": [{"additional_kwargs": [1], "hide_from_ui": true}, hidden("a")]}),
            json!({"messages": [{"additional_kwargs": [true], "hide_from_ui": true}, shown("b")]}),
            json!({"messages": [{"additional_kwargs": {"hide_from_ui": null}}, hidden("a")]}),
        ];
        for case in cases {
            for pretty in [false, true] {
                let bytes = if pretty {
                    serde_json::to_vec_pretty(&case).unwrap()
                } else {
                    serde_json::to_vec(&case).unwrap()
                };
                let fast = without_hidden_messages(&bytes)
                    .map(|b| serde_json::from_slice::<Value>(&b).unwrap());
                assert_eq!(fast, reference(&bytes), "{case}");
            }
        }
        // Not values, or not JSON: left as they are.
        assert_eq!(without_hidden_messages(br#"{"hide_from_ui":true}"#), None);
        assert_eq!(
            without_hidden_messages(br#"not json "hide_from_ui":true"#),
            None
        );
    }
    use chrono::TimeZone;

    #[test]
    fn hidden_messages_leave_serialized_values_and_nothing_else_does() {
        let hidden = json!({"type": "system", "id": "x", "content": "<system-reminder>…",
                            "additional_kwargs": {"hide_from_ui": true}});
        let user = json!({"type": "human", "id": "x__user",
                          "content": "say \"hide_from_ui\":true", "additional_kwargs": {}});
        let tool_args = json!({"type": "ai", "id": "a", "content": "",
                               "tool_calls": [{"name": "t", "id": "c", "args": {"hide_from_ui": true}}],
                               "additional_kwargs": {"hide_from_ui": false}});
        let values = json!({"messages": [hidden, user, tool_args], "title": "t"});
        let out = without_hidden_messages(&serde_json::to_vec(&values).unwrap()).unwrap();
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out, json!({"messages": [user, tool_args], "title": "t"}));
        // Nothing hidden (the marker text only inside a string, or in tool arguments): the
        // bytes go out untouched.
        for v in [
            json!({"messages": [user, tool_args]}),
            json!({"messages": []}),
            json!({"title": "no messages"}),
        ] {
            assert!(without_hidden_messages(&serde_json::to_vec(&v).unwrap()).is_none());
        }
        assert!(without_hidden_messages(b"not json \"hide_from_ui\":true").is_none());
    }

    #[test]
    fn timestamps_have_micros_and_offset() {
        let t = Utc
            .timestamp_opt(1_795_264_317, 238_037_000)
            .single()
            .unwrap();
        assert_eq!(ts(&t), "2026-11-21T12:31:57.238037+00:00");
    }

    #[test]
    fn select_filters_keys() {
        let v = json!({"a": 1, "b": 2, "c": 3});
        assert_eq!(
            select_keys(v, &["a".into(), "c".into(), "z".into()]),
            json!({"a": 1, "c": 3})
        );
    }
}
