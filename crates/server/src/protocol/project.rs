//! Projection of a thread's feed (the runs' classic events, [`fawn_runtime::thread_feed`])
//! into protocol events. One [`Projector`] per connection; it is deterministic: the same
//! feed gives the same events, with the same `seq` and `event_id`, on every connection and
//! every node, which is what makes a reconnect (`since`, the SDK's `event_id` dedupe) exact.
//!
//! | run log event | protocol events |
//! |---|---|
//! | `metadata` (an attempt starts) | `lifecycle` `running` |
//! | `values` | `input.requested` per new interrupt in `__interrupt__`, then `values` without it |
//! | `updates` `{node: update}` | `updates` `{node, values}`; `__interrupt__` → `input.requested` |
//! | `messages` (tuple) AI chunk | `messages`: `message-start`, `content-block-start` per new block (text, reasoning, tool call chunk), `content-block-delta`, and on the last chunk `content-block-finish` per block and `message-finish` (usage, response metadata) |
//! | `messages` whole AI message | the same lifecycle at once |
//! | `tools` | `tools` (`tool-started` / `tool-finished` / `tool-error`); a finished call's result also as a `tool` message under `[…, "tools:<call id>"]` |
//! | `custom` | `custom` `{payload}`; DeerFlow's subagent events (`task_started`, `task_running`, `task_completed`, …) also as the subagent's own events under `["tools:<call id>"]`: `lifecycle` `started` (cause: the tool call) … `completed`/`failed`, its messages and tool calls |
//! | `tasks` | `tasks` |
//! | `checkpoints` | `checkpoints` `{id, parent_id, step, source}` |
//! | `error` | `lifecycle` `failed` |
//! | the run's end | `lifecycle` `completed`, `interrupted` (an interrupt or breakpoint is pending, or the run was cancelled) or `failed` |
//!
//! `seq` = `(ordinal + 1) << 40 | log id << 8 | n`: the run's position on the thread, the
//! id of the log event it comes from (attempt folded into the top bits) and its rank among
//! the events that log event gives. It grows along the thread, stays below 2^53 (exact in
//! JavaScript) for the first 8191 runs of a thread, and is never 0, so a cursor of `0`
//! (`applied_through_seq`) skips nothing. `event_id` = `<run id>:<log id>[.<n>]`.

use super::wire::ProtoEvent;
use fawn_checkpoint::RunStatus;
use fawn_runtime::broker::{ATTEMPT_STRIDE, Event};
use fawn_runtime::thread_feed::{FeedItem, FeedRun};
use fawn_state::{Content, Message, MessageKind};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// What a projector hands on.
#[derive(Debug, Clone)]
pub enum Out {
    Event(Arc<ProtoEvent>),
    /// An unsolicited error frame (`{"type": "error", "id": null, …}`), sent to every
    /// subscriber.
    Error(Arc<str>),
    /// Events of a run before `first_seq` were dropped from its log before they were read:
    /// an error frame for the readers whose cursor is before that (the others miss nothing).
    Gap {
        first_seq: u64,
        frame: Arc<str>,
    },
}

fn compact(log_id: u64) -> u64 {
    let attempt = (log_id / ATTEMPT_STRIDE).min(3);
    (attempt << 30) | (log_id % ATTEMPT_STRIDE)
}

/// The `seq` of the `n`th event projected from log event `log_id` of run `ordinal`.
pub fn seq_of(ordinal: u64, log_id: u64, n: u32) -> u64 {
    ((ordinal + 1) << 40) | (compact(log_id) << 8) | u64::from(n.min(255))
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Builds the events of one log event (or of a run's end).
struct Emit<'a> {
    ordinal: u64,
    run_id: &'a str,
    /// `None`: the run's end.
    log_id: Option<u64>,
    slot: u64,
    n: u32,
    out: &'a mut Vec<Out>,
}

impl Emit<'_> {
    fn event(&mut self, method: &'static str, ns: &[String], node: Option<&str>, data: Value) {
        let n = self.n;
        self.n += 1;
        let base = match self.log_id {
            Some(id) => format!("{}:{id}", self.run_id),
            None => format!("{}:end", self.run_id),
        };
        let event_id = if n == 0 { base } else { format!("{base}.{n}") };
        let seq = seq_of(self.ordinal, self.slot, n);
        self.out.push(Out::Event(Arc::new(ProtoEvent::new(
            seq,
            event_id,
            method,
            ns.to_vec(),
            node,
            now_ms(),
            data,
        ))));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum BlockKey {
    Text(i64),
    Reasoning(i64),
    Tool(i64),
    Other(i64),
}

#[derive(Debug)]
struct Block {
    key: BlockKey,
    /// Text, reasoning or tool-call arguments so far.
    acc: String,
    tool_id: Option<String>,
    tool_name: Option<String>,
    /// Self-contained blocks: the block as it came.
    whole: Option<Value>,
}

#[derive(Debug, Default)]
struct OpenMessage {
    blocks: Vec<Block>,
    response_metadata: Map<String, Value>,
    usage: Option<Map<String, Value>>,
    namespace: Vec<String>,
}

#[derive(Debug)]
struct Subagent {
    namespace: Vec<String>,
    graph_name: String,
    ended: bool,
}

/// Per-run projection state.
#[derive(Debug, Default)]
struct RunState {
    open: HashMap<String, OpenMessage>,
    open_order: Vec<String>,
    interrupts: HashSet<String>,
    /// An interrupt or a breakpoint is pending.
    interrupted: bool,
    /// `lifecycle` `failed` was sent.
    failed: bool,
    /// Tool calls started: name and input (a `task` call names its subagent).
    tool_calls: HashMap<String, (String, Value)>,
    subagents: HashMap<String, Subagent>,
    graph_name: String,
}

/// A connection's projection of its thread's feed.
#[derive(Debug, Default)]
pub struct Projector {
    runs: HashMap<String, RunState>,
}

impl Projector {
    pub fn new() -> Projector {
        Projector::default()
    }

    /// The protocol events of one feed item.
    pub fn project(&mut self, item: &FeedItem) -> Vec<Out> {
        let mut out = Vec::new();
        match item {
            FeedItem::Event { run, event } => self.event(run, event, &mut out),
            FeedItem::Gap { run, gap } => {
                let first_seq = seq_of(run.ordinal, gap.earliest.unwrap_or(0), 0);
                let message = format!(
                    "Events of run {} before seq {first_seq} were dropped from the replay \
                     window; reload the thread's state.",
                    run.run.run_id,
                );
                let frame = json!({"type": "error", "id": null, "error": "unknown_error",
                    "message": message});
                out.push(Out::Gap {
                    first_seq,
                    frame: Arc::from(frame.to_string()),
                });
            }
            FeedItem::End {
                run,
                status,
                last_id,
            } => self.end(run, *status, *last_id, &mut out),
        }
        out
    }

    fn state<'a>(runs: &'a mut HashMap<String, RunState>, run: &FeedRun) -> &'a mut RunState {
        runs.entry(run.run.run_id.clone())
            .or_insert_with(|| RunState {
                graph_name: graph_name(run),
                ..RunState::default()
            })
    }

    fn event(&mut self, run: &FeedRun, event: &Event, out: &mut Vec<Out>) {
        let st = Self::state(&mut self.runs, run);
        let mut emit = Emit {
            ordinal: run.ordinal,
            run_id: &run.run.run_id,
            log_id: Some(event.id),
            slot: event.id,
            n: 0,
            out,
        };
        let mut parts = event.name.split('|');
        let base = parts.next().unwrap_or_default();
        let ns: Vec<String> = parts.map(str::to_string).collect();
        let data: Value = match serde_json::from_slice(&event.data()) {
            Ok(v) => v,
            Err(_) => return,
        };
        match base {
            "metadata" => {
                let graph = st.graph_name.clone();
                emit.event(
                    "lifecycle",
                    &ns,
                    None,
                    json!({"event": "running", "graph_name": graph}),
                );
            }
            "values" => {
                let mut data = data;
                if let Value::Object(m) = &mut data
                    && let Some(interrupts) = m.remove("__interrupt__")
                {
                    input_requested(st, &mut emit, &ns, &interrupts);
                }
                if data.as_object().is_some_and(|m| !m.is_empty()) {
                    emit.event("values", &ns, None, data);
                }
            }
            "updates" => {
                let Value::Object(m) = data else { return };
                for (node, update) in m {
                    if node == "__interrupt__" {
                        st.interrupted = true;
                        input_requested(st, &mut emit, &ns, &update);
                    } else {
                        let d = json!({"node": node, "values": update});
                        emit.event("updates", &ns, Some(&node), d);
                    }
                }
            }
            "messages" => {
                let Value::Array(mut pair) = data else { return };
                if pair.is_empty() {
                    return;
                }
                let meta = if pair.len() > 1 {
                    pair.swap_remove(1)
                } else {
                    Value::Null
                };
                let Ok(msg) = Message::from_value(pair.swap_remove(0)) else {
                    return;
                };
                if msg.kind == MessageKind::AiChunk {
                    ai_chunk(st, &mut emit, &ns, &meta, &msg);
                } else if msg.kind == MessageKind::Ai {
                    whole_message(&mut emit, &ns, &meta, &msg);
                }
                // Tool results are on the `tools` channel (and mirrored from it); inputs
                // are not streamed.
            }
            "tools" => tool_event(st, &mut emit, &ns, data),
            "custom" => {
                emit.event("custom", &ns, None, json!({"payload": &data}));
                subagent_event(st, &mut emit, &ns, &data);
            }
            "tasks" => emit.event("tasks", &ns, None, data),
            "checkpoints" => {
                let id = data
                    .pointer("/config/configurable/checkpoint_id")
                    .cloned()
                    .unwrap_or(Value::Null);
                let mut d = Map::new();
                d.insert("id".into(), id);
                if let Some(p) = data
                    .pointer("/parent_config/configurable/checkpoint_id")
                    .filter(|p| p.is_string())
                {
                    d.insert("parent_id".into(), p.clone());
                }
                d.insert(
                    "step".into(),
                    data.pointer("/metadata/step").cloned().unwrap_or(json!(0)),
                );
                d.insert(
                    "source".into(),
                    data.pointer("/metadata/source")
                        .cloned()
                        .unwrap_or(json!("loop")),
                );
                emit.event("checkpoints", &ns, None, Value::Object(d));
            }
            "error" => {
                let message = data
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| data.to_string());
                fail_open_messages(st, &mut emit, &message);
                st.failed = true;
                let graph = st.graph_name.clone();
                emit.event(
                    "lifecycle",
                    &ns,
                    None,
                    json!({"event": "failed", "graph_name": graph, "error": message}),
                );
            }
            _ => {}
        }
    }

    fn end(&mut self, run: &FeedRun, status: RunStatus, last_id: Option<u64>, out: &mut Vec<Out>) {
        let st = Self::state(&mut self.runs, run);
        let mut emit = Emit {
            ordinal: run.ordinal,
            run_id: &run.run.run_id,
            log_id: None,
            slot: last_id.map(|l| l + 1).unwrap_or(0),
            n: 0,
            out,
        };
        let failed = matches!(status, RunStatus::Error | RunStatus::Timeout);
        if failed {
            fail_open_messages(st, &mut emit, "the run failed");
        } else {
            let ids = std::mem::take(&mut st.open_order);
            for id in ids {
                if let Some(m) = st.open.remove(&id) {
                    finish_message(&mut emit, &id, m);
                }
            }
        }
        let mut subs: Vec<(String, Subagent)> = st.subagents.drain().collect();
        subs.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, s) in subs.into_iter().filter(|(_, s)| !s.ended) {
            let event = if failed { "failed" } else { "completed" };
            emit.event(
                "lifecycle",
                &s.namespace,
                None,
                json!({"event": event, "graph_name": s.graph_name}),
            );
        }
        let graph = st.graph_name.clone();
        let lifecycle = match status {
            RunStatus::Success if st.interrupted => Some("interrupted"),
            RunStatus::Success => Some("completed"),
            RunStatus::Interrupted => Some("interrupted"),
            RunStatus::Error | RunStatus::Timeout if !st.failed => Some("failed"),
            _ => None,
        };
        if let Some(event) = lifecycle {
            let mut d = json!({"event": event, "graph_name": graph});
            if event == "failed"
                && let Some(e) = run.run.error.as_ref().and_then(|e| e.get("message"))
            {
                d["error"] = e.clone();
            }
            emit.event("lifecycle", &[], None, d);
        }
        self.runs.remove(&run.run.run_id);
    }
}

fn graph_name(run: &FeedRun) -> String {
    fawn_runtime::RunKwargs::from_map(&run.run.kwargs)
        .ok()
        .and_then(|k| k.graph_id)
        .or_else(|| {
            run.run
                .metadata
                .get("graph_id")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// `input.requested` for each interrupt not requested yet in this run.
fn input_requested(st: &mut RunState, emit: &mut Emit, ns: &[String], interrupts: &Value) {
    let Some(list) = interrupts.as_array() else {
        return;
    };
    st.interrupted = true;
    for i in list {
        let Some(id) = i.get("id").and_then(Value::as_str) else {
            continue;
        };
        if !st.interrupts.insert(id.to_string()) {
            continue;
        }
        let value = i.get("value").cloned().unwrap_or(Value::Null);
        // `payload` is the protocol's field; `value` is where langgraph-sdk 0.4 reads it.
        emit.event(
            "input.requested",
            ns,
            None,
            json!({"interrupt_id": id, "payload": value, "value": value}),
        );
    }
}

/// `message-start` metadata: the provider (the chunk's, else the model's LangChain
/// `ls_provider`), the model when the first chunk names it, and the node.
fn start_metadata(msg: &Message, meta: &Value) -> Map<String, Value> {
    let mut m = Map::new();
    let provider = msg
        .response_metadata
        .get("model_provider")
        .or_else(|| meta.get("ls_provider"))
        .filter(|v| v.is_string());
    if let Some(p) = provider {
        m.insert("provider".into(), p.clone());
    }
    if let Some(p) = msg
        .response_metadata
        .get("model_name")
        .filter(|v| v.is_string())
    {
        m.insert("model".into(), p.clone());
    }
    if let Some(n) = meta.get("langgraph_node").filter(|v| v.is_string()) {
        m.insert("langgraph_node".into(), n.clone());
    }
    m
}

fn message_start(emit: &mut Emit, ns: &[String], meta: &Value, id: &str, msg: &Message) {
    let mut d = json!({"event": "message-start", "role": "ai", "id": id});
    let meta = start_metadata(msg, meta);
    if !meta.is_empty() {
        d["metadata"] = Value::Object(meta);
    }
    emit.event("messages", ns, None, d);
}

/// The pieces of a message (or chunk): `(key, kind of delta, text, block)`.
enum Piece {
    Text(i64, String),
    Reasoning(i64, String),
    ToolChunk {
        index: i64,
        id: Option<String>,
        name: Option<String>,
        args: String,
    },
    ToolCall {
        index: i64,
        call: Value,
    },
    Other(i64, Value),
}

fn pieces(msg: &Message) -> Vec<Piece> {
    let mut out = Vec::new();
    if let Some(Value::String(r)) = msg.additional_kwargs.get("reasoning_content")
        && !r.is_empty()
    {
        out.push(Piece::Reasoning(-1, r.clone()));
    }
    match &msg.content {
        Content::Text(t) => {
            if !t.is_empty() {
                out.push(Piece::Text(0, t.clone()));
            }
        }
        Content::Blocks(blocks) => {
            for (i, b) in blocks.iter().enumerate() {
                let pos = b.get("index").and_then(Value::as_i64).unwrap_or(i as i64);
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let t = b.get("text").and_then(Value::as_str).unwrap_or_default();
                        if !t.is_empty() {
                            out.push(Piece::Text(pos, t.to_string()));
                        }
                    }
                    Some("reasoning") | Some("thinking") => {
                        let r = b
                            .get("reasoning")
                            .or_else(|| b.get("thinking"))
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        if !r.is_empty() {
                            out.push(Piece::Reasoning(pos, r.to_string()));
                        }
                    }
                    // Tool calls come from the message's own fields.
                    Some("tool_call") | Some("tool_call_chunk") | Some("tool_use") => {}
                    _ => out.push(Piece::Other(pos, b.clone())),
                }
            }
        }
    }
    for (i, c) in msg.tool_call_chunks.iter().enumerate() {
        out.push(Piece::ToolChunk {
            index: c.index.unwrap_or(i as i64),
            id: c.id.clone(),
            name: c.name.clone(),
            args: c.args.clone().unwrap_or_default(),
        });
    }
    if msg.kind == MessageKind::Ai {
        for (i, c) in msg.tool_calls.iter().enumerate() {
            out.push(Piece::ToolCall {
                index: i as i64,
                call: json!({"type": "tool_call", "id": c.id, "name": c.name, "args": c.args}),
            });
        }
        for (i, c) in msg.invalid_tool_calls.iter().enumerate() {
            out.push(Piece::Other(
                1000 + i as i64,
                json!({"type": "invalid_tool_call", "id": c.id, "name": c.name,
                    "args": c.args, "error": c.error}),
            ));
        }
    }
    out
}

fn skeleton(piece: &Piece) -> Value {
    match piece {
        Piece::Text(..) => json!({"type": "text", "text": ""}),
        Piece::Reasoning(..) => json!({"type": "reasoning", "reasoning": ""}),
        Piece::ToolChunk {
            index, id, name, ..
        } => json!({"type": "tool_call_chunk", "id": id, "name": name, "args": "", "index": index}),
        Piece::ToolCall { call, .. } => {
            let mut c = call.clone();
            c["args"] = json!({});
            c
        }
        Piece::Other(_, b) => {
            let mut b = b.clone();
            if let Value::Object(m) = &mut b {
                for heavy in ["args", "data", "output", "transcript", "value", "base64"] {
                    m.remove(heavy);
                }
            }
            b
        }
    }
}

fn key_of(piece: &Piece) -> BlockKey {
    match piece {
        Piece::Text(i, _) => BlockKey::Text(*i),
        Piece::Reasoning(i, _) => BlockKey::Reasoning(*i),
        Piece::ToolChunk { index, .. } | Piece::ToolCall { index, .. } => BlockKey::Tool(*index),
        Piece::Other(i, _) => BlockKey::Other(*i),
    }
}

fn delta_of(piece: &Piece) -> Option<Value> {
    match piece {
        Piece::Text(_, t) => Some(json!({"type": "text-delta", "text": t})),
        Piece::Reasoning(_, r) => Some(json!({"type": "reasoning-delta", "reasoning": r})),
        Piece::ToolChunk { args, .. } if !args.is_empty() => {
            Some(json!({"type": "tool-call-delta", "args": args}))
        }
        _ => None,
    }
}

/// Adds a piece to an open message: `content-block-start` the first time its block is
/// seen, then its delta.
fn add_piece(m: &mut OpenMessage, emit: &mut Emit, ns: &[String], p: Piece) {
    let key = key_of(&p);
    let idx = match m.blocks.iter().position(|b| b.key == key) {
        Some(i) => i,
        None => {
            let (tool_id, tool_name) = match &p {
                Piece::ToolChunk { id, name, .. } => (id.clone(), name.clone()),
                _ => (None, None),
            };
            m.blocks.push(Block {
                key,
                acc: String::new(),
                tool_id,
                tool_name,
                whole: match &p {
                    Piece::ToolCall { call, .. } => Some(call.clone()),
                    Piece::Other(_, b) => Some(b.clone()),
                    _ => None,
                },
            });
            let i = m.blocks.len() - 1;
            let d = json!({"event": "content-block-start", "index": i, "content": skeleton(&p)});
            emit.event("messages", ns, None, d);
            i
        }
    };
    if let Some(delta) = delta_of(&p) {
        let d = json!({"event": "content-block-delta", "index": idx, "delta": delta});
        emit.event("messages", ns, None, d);
    }
    let b = &mut m.blocks[idx];
    match p {
        Piece::Text(_, t) | Piece::Reasoning(_, t) => b.acc.push_str(&t),
        Piece::ToolChunk { id, name, args, .. } => {
            b.acc.push_str(&args);
            if b.tool_id.is_none() {
                b.tool_id = id;
            }
            if b.tool_name.is_none() {
                b.tool_name = name;
            }
        }
        Piece::ToolCall { call, .. } => b.whole = Some(call),
        Piece::Other(_, v) => b.whole = Some(v),
    }
}

fn finalized(b: &Block) -> Value {
    match b.key {
        BlockKey::Text(_) => json!({"type": "text", "text": b.acc}),
        BlockKey::Reasoning(_) => json!({"type": "reasoning", "reasoning": b.acc}),
        BlockKey::Tool(_) if b.whole.is_some() => b.whole.clone().unwrap_or(Value::Null),
        BlockKey::Tool(_) => {
            let raw = if b.acc.trim().is_empty() {
                "{}"
            } else {
                b.acc.as_str()
            };
            match serde_json::from_str::<Value>(raw) {
                Ok(args @ Value::Object(_)) => {
                    json!({"type": "tool_call", "id": b.tool_id.clone().unwrap_or_default(),
                        "name": b.tool_name.clone().unwrap_or_default(), "args": args})
                }
                _ => json!({"type": "invalid_tool_call", "id": b.tool_id, "name": b.tool_name,
                    "args": b.acc, "error": "Failed to parse tool call arguments as JSON"}),
            }
        }
        BlockKey::Other(_) => b.whole.clone().unwrap_or(Value::Null),
    }
}

fn finish_message(emit: &mut Emit, _id: &str, m: OpenMessage) {
    for (i, b) in m.blocks.iter().enumerate() {
        let d = json!({"event": "content-block-finish", "index": i, "content": finalized(b)});
        emit.event("messages", &m.namespace, None, d);
    }
    let mut d = json!({"event": "message-finish"});
    if let Some(u) = m.usage {
        d["usage"] = Value::Object(u);
    }
    if !m.response_metadata.is_empty() {
        d["metadata"] = Value::Object(m.response_metadata);
    }
    emit.event("messages", &m.namespace, None, d);
}

fn usage_of(msg: &Message) -> Option<Map<String, Value>> {
    let u = msg.usage_metadata.as_ref()?;
    match serde_json::to_value(u) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

fn add_usage(into: &mut Option<Map<String, Value>>, more: Map<String, Value>) {
    let Some(cur) = into else {
        *into = Some(more);
        return;
    };
    for (k, v) in more {
        match (cur.get(&k).and_then(Value::as_i64), v.as_i64()) {
            (Some(a), Some(b)) => {
                cur.insert(k, json!(a + b));
            }
            _ => {
                cur.insert(k, v);
            }
        }
    }
}

fn ai_chunk(st: &mut RunState, emit: &mut Emit, ns: &[String], meta: &Value, msg: &Message) {
    let id = msg.id.clone().unwrap_or_else(|| "ai-message".to_string());
    if !st.open.contains_key(&id) {
        message_start(emit, ns, meta, &id, msg);
        st.open.insert(
            id.clone(),
            OpenMessage {
                namespace: ns.to_vec(),
                ..OpenMessage::default()
            },
        );
        st.open_order.push(id.clone());
    }
    let Some(m) = st.open.get_mut(&id) else {
        return;
    };
    for p in pieces(msg) {
        add_piece(m, emit, ns, p);
    }
    for (k, v) in &msg.response_metadata {
        m.response_metadata.insert(k.clone(), v.clone());
    }
    if let Some(u) = usage_of(msg) {
        add_usage(&mut m.usage, u);
    }
    if msg.chunk_position.as_deref() == Some("last")
        && let Some(m) = st.open.remove(&id)
    {
        st.open_order.retain(|o| *o != id);
        finish_message(emit, &id, m);
    }
}

/// A whole AI message as the full event lifecycle at once.
fn whole_message(emit: &mut Emit, ns: &[String], meta: &Value, msg: &Message) {
    let id = msg.id.clone().unwrap_or_else(|| "ai-message".to_string());
    message_start(emit, ns, meta, &id, msg);
    let mut m = OpenMessage {
        namespace: ns.to_vec(),
        response_metadata: msg.response_metadata.clone(),
        usage: usage_of(msg),
        ..OpenMessage::default()
    };
    for p in pieces(msg) {
        add_piece(&mut m, emit, ns, p);
    }
    finish_message(emit, &id, m);
}

fn fail_open_messages(st: &mut RunState, emit: &mut Emit, message: &str) {
    let ids = std::mem::take(&mut st.open_order);
    for id in ids {
        if let Some(m) = st.open.remove(&id) {
            let d = json!({"event": "error", "message": message});
            emit.event("messages", &m.namespace, None, d);
        }
    }
}

/// A finished tool call's result as a `tool` message under the call's namespace.
fn tool_message(emit: &mut Emit, ns: &[String], call_id: &str, output: &Value) {
    let text = match output.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(c @ Value::Array(_)) => {
            Content::Blocks(c.as_array().cloned().unwrap_or_default()).text()
        }
        Some(other) => other.to_string(),
        None => match output {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
    };
    let id = output
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| format!("tool-{call_id}"));
    let mut sub = ns.to_vec();
    sub.push(format!("tools:{call_id}"));
    emit.event(
        "messages",
        &sub,
        None,
        json!({"event": "message-start", "role": "tool", "id": id, "tool_call_id": call_id}),
    );
    emit.event(
        "messages",
        &sub,
        None,
        json!({"event": "content-block-start", "index": 0, "content": {"type": "text", "text": ""}}),
    );
    emit.event(
        "messages",
        &sub,
        None,
        json!({"event": "content-block-delta", "index": 0, "delta": {"type": "text-delta", "text": text}}),
    );
    emit.event(
        "messages",
        &sub,
        None,
        json!({"event": "content-block-finish", "index": 0, "content": {"type": "text", "text": text}}),
    );
    emit.event(
        "messages",
        &sub,
        None,
        json!({"event": "message-finish", "metadata": {}}),
    );
}

fn tool_event(st: &mut RunState, emit: &mut Emit, ns: &[String], data: Value) {
    let call_id = data
        .get("tool_call_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    match data.get("event").and_then(Value::as_str) {
        Some("tool-started") => {
            let name = data
                .get("tool_name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let input = data.get("input").cloned().unwrap_or(Value::Null);
            st.tool_calls.insert(call_id, (name, input));
            emit.event("tools", ns, Some("tools"), data);
        }
        Some("tool-finished") => {
            let output = data.get("output").cloned().unwrap_or(Value::Null);
            emit.event("tools", ns, Some("tools"), data);
            tool_message(emit, ns, &call_id, &output);
        }
        _ => emit.event("tools", ns, Some("tools"), data),
    }
}

/// DeerFlow's `task` tool reports its subagent as `custom` events; the subagent's work is
/// also projected under its own namespace, `["tools:<call id>"]`.
fn subagent_event(st: &mut RunState, emit: &mut Emit, ns: &[String], data: &Value) {
    let (Some(kind), Some(task_id)) = (
        data.get("type").and_then(Value::as_str),
        data.get("task_id").and_then(Value::as_str),
    ) else {
        return;
    };
    if !kind.starts_with("task_") {
        return;
    }
    let mut sub_ns = ns.to_vec();
    sub_ns.push(format!("tools:{task_id}"));
    match kind {
        "task_started" => {
            let graph_name = st
                .tool_calls
                .get(task_id)
                .and_then(|(_, input)| input.get("subagent_type"))
                .and_then(Value::as_str)
                .unwrap_or("subagent")
                .to_string();
            emit.event(
                "lifecycle",
                &sub_ns,
                None,
                json!({"event": "started", "graph_name": graph_name,
                    "cause": {"type": "toolCall", "tool_call_id": task_id}}),
            );
            st.subagents.insert(
                task_id.to_string(),
                Subagent {
                    namespace: sub_ns,
                    graph_name,
                    ended: false,
                },
            );
        }
        "task_running" => {
            let Some(Ok(msg)) = data.get("message").cloned().map(Message::from_value) else {
                return;
            };
            match msg.kind {
                MessageKind::Ai | MessageKind::AiChunk => {
                    let whole = msg.to_message();
                    whole_message(emit, &sub_ns, &Value::Null, &whole);
                    for c in &whole.tool_calls {
                        let id = c.id.clone().unwrap_or_default();
                        emit.event(
                            "tools",
                            &sub_ns,
                            None,
                            json!({"event": "tool-started", "tool_call_id": id,
                                "tool_name": c.name, "input": c.args}),
                        );
                    }
                }
                MessageKind::Tool => {
                    let id = msg.tool_call_id.clone().unwrap_or_default();
                    if msg.status.as_deref() == Some("error") {
                        emit.event(
                            "tools",
                            &sub_ns,
                            None,
                            json!({"event": "tool-error", "tool_call_id": id, "message": msg.text()}),
                        );
                    } else {
                        let output = msg.to_value();
                        emit.event(
                            "tools",
                            &sub_ns,
                            None,
                            json!({"event": "tool-finished", "tool_call_id": id, "output": output}),
                        );
                        tool_message(emit, &sub_ns, &id, &output);
                    }
                }
                _ => {}
            }
        }
        "task_completed" | "task_failed" | "task_cancelled" | "task_timed_out" => {
            let graph_name = st
                .subagents
                .get(task_id)
                .map(|s| s.graph_name.clone())
                .unwrap_or_else(|| "subagent".into());
            let mut d = json!({"event": if kind == "task_completed" { "completed" } else { "failed" },
                "graph_name": graph_name});
            if kind != "task_completed" {
                d["error"] = data
                    .get("error")
                    .filter(|e| !e.is_null())
                    .cloned()
                    .unwrap_or_else(|| json!(kind.trim_start_matches("task_")));
            }
            emit.event("lifecycle", &sub_ns, None, d);
            if let Some(s) = st.subagents.get_mut(task_id) {
                s.ended = true;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use fawn_checkpoint::Run;

    fn run(ordinal: u64) -> Arc<FeedRun> {
        let now = chrono::Utc::now();
        Arc::new(FeedRun {
            run: Run {
                run_id: "r1".into(),
                thread_id: "t".into(),
                assistant_id: "a".into(),
                created_at: now,
                updated_at: now,
                status: RunStatus::Running,
                metadata: serde_json::from_value(json!({"graph_id": "lead_agent"})).unwrap(),
                kwargs: Map::new(),
                multitask_strategy: fawn_checkpoint::MultitaskStrategy::Enqueue,
                attempt: 1,
                available_at: now,
                cancel_requested: None,
                error: None,
                stop_reason: None,
                owner: None,
                lease_expires_at: None,
            },
            ordinal,
        })
    }

    fn item(run: &Arc<FeedRun>, id: u64, name: &str, data: Value) -> FeedItem {
        FeedItem::Event {
            run: run.clone(),
            event: Arc::new(Event::new(id, name, Bytes::from(data.to_string()))),
        }
    }

    fn events(out: Vec<Out>) -> Vec<Value> {
        out.into_iter()
            .filter_map(|o| match o {
                Out::Event(e) => Some(serde_json::from_str(&e.json).unwrap()),
                Out::Error(_) | Out::Gap { .. } => None,
            })
            .collect()
    }

    fn chunk(id: &str, content: &str, extra: Value) -> Value {
        let mut c = json!({"type": "AIMessageChunk", "content": content, "id": id});
        if let (Value::Object(c), Value::Object(e)) = (&mut c, extra) {
            c.extend(e);
        }
        json!([c, {"langgraph_node": "model", "ls_provider": "openai"}])
    }

    #[test]
    fn seqs_grow_along_the_thread_and_stay_exact_in_javascript() {
        assert!(seq_of(0, 0, 0) > 0);
        assert!(seq_of(0, 5, 1) < seq_of(0, 6, 0));
        assert!(seq_of(0, 999, 255) < seq_of(1, 0, 0));
        assert!(seq_of(0, 3, 0) < seq_of(0, ATTEMPT_STRIDE, 0));
        assert!(seq_of(8190, 3 * ATTEMPT_STRIDE + 999_999_999, 255) < (1u64 << 53));
    }

    #[test]
    fn a_streamed_answer_with_a_tool_call() {
        let r = run(0);
        let mut p = Projector::new();
        let mut all = Vec::new();
        all.extend(events(p.project(&item(
            &r,
            0,
            "metadata",
            json!({"run_id": "r1"}),
        ))));
        all.extend(events(p.project(&item(
            &r,
            1,
            "messages",
            chunk(
                "m1",
                "Hel",
                json!({"additional_kwargs": {"reasoning_content": "think"}}),
            ),
        ))));
        all.extend(events(p.project(&item(
            &r,
            2,
            "messages",
            chunk(
                "m1",
                "lo",
                json!({"tool_call_chunks": [{"name": "ls", "args": "{\"pa", "id": "c1", "index": 0}]}),
            ),
        ))));
        all.extend(events(p.project(&item(
            &r,
            3,
            "messages",
            chunk(
                "m1",
                "",
                json!({"tool_call_chunks": [{"args": "th\":\"/\"}", "index": 0}],
                    "chunk_position": "last",
                    "usage_metadata": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
                    "response_metadata": {"finish_reason": "tool_calls"}}),
            ),
        ))));
        let data: Vec<Value> = all.iter().map(|e| e["params"]["data"].clone()).collect();
        assert_eq!(
            data[0],
            json!({"event": "running", "graph_name": "lead_agent"})
        );
        assert_eq!(
            data[1],
            json!({"event": "message-start", "role": "ai", "id": "m1",
                "metadata": {"provider": "openai", "langgraph_node": "model"}})
        );
        let kinds: Vec<String> = data[1..]
            .iter()
            .map(|d| {
                format!(
                    "{}{}",
                    d["event"].as_str().unwrap(),
                    d.get("index").map(|i| format!("#{i}")).unwrap_or_default()
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "message-start",
                "content-block-start#0",
                "content-block-delta#0",
                "content-block-start#1",
                "content-block-delta#1",
                "content-block-delta#1",
                "content-block-start#2",
                "content-block-delta#2",
                "content-block-delta#2",
                "content-block-finish#0",
                "content-block-finish#1",
                "content-block-finish#2",
                "message-finish"
            ]
        );
        assert_eq!(
            data[2]["content"],
            json!({"type": "reasoning", "reasoning": ""})
        );
        assert_eq!(
            data[11]["content"],
            json!({"type": "text", "text": "Hello"})
        );
        assert_eq!(
            data[12]["content"],
            json!({"type": "tool_call", "id": "c1", "name": "ls", "args": {"path": "/"}})
        );
        assert_eq!(data[13]["usage"]["total_tokens"], 5);
        assert_eq!(data[13]["metadata"]["finish_reason"], "tool_calls");
        // seqs strictly grow; ids are unique
        let seqs: Vec<u64> = all.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
        let ids: HashSet<String> = all.iter().map(|e| e["event_id"].to_string()).collect();
        assert_eq!(ids.len(), all.len());
    }

    #[test]
    fn the_same_feed_projects_the_same_events() {
        let r = run(2);
        let feed = [
            item(&r, 0, "metadata", json!({})),
            item(&r, 1, "values", json!({"messages": []})),
            item(
                &r,
                2,
                "messages",
                chunk("m", "hi", json!({"chunk_position": "last"})),
            ),
        ];
        let strip = |v: Vec<Value>| {
            v.into_iter()
                .map(|mut e| {
                    e["params"]["timestamp"] = json!(0);
                    e
                })
                .collect::<Vec<_>>()
        };
        let mut a = Projector::new();
        let mut b = Projector::new();
        let ea: Vec<Value> = strip(feed.iter().flat_map(|i| events(a.project(i))).collect());
        let eb: Vec<Value> = strip(feed.iter().flat_map(|i| events(b.project(i))).collect());
        assert_eq!(ea, eb);
    }

    #[test]
    fn interrupts_are_requested_once_and_the_run_ends_interrupted() {
        let r = run(0);
        let mut p = Projector::new();
        let intr = json!([{"id": "i1", "value": {"question": "colour?"}}]);
        let mut all = events(p.project(&item(&r, 1, "updates", json!({"__interrupt__": intr}))));
        all.extend(events(p.project(&item(
            &r,
            2,
            "values",
            json!({"messages": [], "__interrupt__": intr}),
        ))));
        all.extend(events(p.project(&FeedItem::End {
            run: r.clone(),
            status: RunStatus::Success,
            last_id: Some(2),
        })));
        let methods: Vec<&str> = all.iter().map(|e| e["method"].as_str().unwrap()).collect();
        assert_eq!(methods, ["input.requested", "values", "lifecycle"]);
        assert_eq!(
            all[0]["params"]["data"],
            json!({"interrupt_id": "i1", "payload": {"question": "colour?"},
                "value": {"question": "colour?"}})
        );
        assert_eq!(all[1]["params"]["data"], json!({"messages": []}));
        assert_eq!(all[2]["params"]["data"]["event"], "interrupted");
    }

    #[test]
    fn tools_and_subagents() {
        let r = run(0);
        let mut p = Projector::new();
        let mut all = events(p.project(&item(
            &r,
            1,
            "tools",
            json!({"event": "tool-started", "tool_call_id": "t1", "tool_name": "task",
                "input": {"subagent_type": "general-purpose"}}),
        )));
        all.extend(events(p.project(&item(
            &r,
            2,
            "custom",
            json!({"type": "task_started", "task_id": "t1", "description": "d"}),
        ))));
        all.extend(events(p.project(&item(
            &r,
            3,
            "custom",
            json!({"type": "task_running", "task_id": "t1",
                "message": {"type": "ai", "content": "sub answer", "id": "s1"}}),
        ))));
        all.extend(events(p.project(&item(
            &r,
            4,
            "custom",
            json!({"type": "task_completed", "task_id": "t1", "result": "ok"}),
        ))));
        all.extend(events(p.project(&item(
            &r,
            5,
            "tools",
            json!({"event": "tool-finished", "tool_call_id": "t1",
                "output": {"type": "tool", "content": "ok", "tool_call_id": "t1", "id": "tm"}}),
        ))));
        let sub: Vec<(String, String)> = all
            .iter()
            .filter(|e| e["params"]["namespace"] == json!(["tools:t1"]))
            .map(|e| {
                (
                    e["method"].as_str().unwrap().to_string(),
                    e["params"]["data"]["event"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
            })
            .collect();
        assert_eq!(sub[0], ("lifecycle".into(), "started".into()));
        assert!(sub.contains(&("messages".into(), "message-start".into())));
        assert!(sub.contains(&("lifecycle".into(), "completed".into())));
        let started = all
            .iter()
            .find(|e| e["params"]["data"]["event"] == "started")
            .unwrap();
        assert_eq!(started["params"]["data"]["graph_name"], "general-purpose");
        assert_eq!(
            started["params"]["data"]["cause"],
            json!({"type": "toolCall", "tool_call_id": "t1"})
        );
        let root_tools: Vec<&str> = all
            .iter()
            .filter(|e| e["method"] == "tools" && e["params"]["namespace"] == json!([]))
            .map(|e| e["params"]["data"]["event"].as_str().unwrap())
            .collect();
        assert_eq!(root_tools, ["tool-started", "tool-finished"]);
    }

    #[test]
    fn a_gap_names_the_first_seq_still_held() {
        let r = run(1);
        let mut p = Projector::new();
        let out = p.project(&FeedItem::Gap {
            run: r.clone(),
            gap: fawn_runtime::broker::Gap {
                run_id: "r1".into(),
                requested: None,
                earliest: Some(40),
                latest: Some(50),
            },
        });
        match out.as_slice() {
            [Out::Gap { first_seq, frame }] => {
                assert_eq!(*first_seq, seq_of(1, 40, 0));
                let v: Value = serde_json::from_str(frame).unwrap();
                assert_eq!(
                    (v["type"].as_str(), v["id"].is_null()),
                    (Some("error"), true)
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_error_fails_the_run_once() {
        let r = run(0);
        let mut p = Projector::new();
        let mut all = events(p.project(&item(&r, 1, "messages", chunk("m", "par", json!({})))));
        all.extend(events(p.project(&item(
            &r,
            2,
            "error",
            json!({"error": "LlmError", "message": "boom"}),
        ))));
        all.extend(events(p.project(&FeedItem::End {
            run: r.clone(),
            status: RunStatus::Error,
            last_id: Some(2),
        })));
        let last: Vec<Value> = all.iter().map(|e| e["params"]["data"].clone()).collect();
        assert_eq!(
            last[last.len() - 2],
            json!({"event": "error", "message": "boom"})
        );
        assert_eq!(
            last[last.len() - 1],
            json!({"event": "failed", "graph_name": "lead_agent", "error": "boom"})
        );
    }
}
