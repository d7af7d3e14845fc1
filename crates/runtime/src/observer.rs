//! The [`RunObserver`] of one run: hands each `StepCheckpoint` to the run's checkpoint writer
//! ([`crate::checkpoints`]) and projects the agent's events into the events of the run's
//! stream modes.

use crate::broker::RunLog;
use crate::checkpoints::{LastCheckpoint, RunCheckpoints, Step};
use crate::hooks::Point;
use crate::kwargs::Durability;
use crate::runtime::RuntimeHandle;
use async_trait::async_trait;
use bytes::Bytes;
use fawn_agent::{ObserverError, PendingTask, RunObserver, StepCheckpoint};
use fawn_checkpoint::{JsonMap, TaskRecord};
use fawn_state::{
    ChunkAccumulator, EventSink, Interrupt, Message, MessageKind, Messages, StreamEvent,
    ThreadState,
};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The stream modes a run asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modes {
    pub values: bool,
    pub updates: bool,
    pub messages_tuple: bool,
    pub messages: bool,
    pub custom: bool,
    pub debug: bool,
    pub events: bool,
    pub tasks: bool,
    pub checkpoints: bool,
    /// Tool call starts and ends as `tools` events (runs of the thread-centric protocol).
    pub tools: bool,
}

impl Modes {
    pub fn from_list(list: &[String]) -> Modes {
        let mut m = Modes::default();
        for s in list {
            match s.as_str() {
                "values" => m.values = true,
                "updates" => m.updates = true,
                "messages-tuple" => m.messages_tuple = true,
                "messages" => m.messages = true,
                "custom" => m.custom = true,
                "debug" => m.debug = true,
                "events" => m.events = true,
                "tasks" => m.tasks = true,
                "checkpoints" => m.checkpoints = true,
                "tools" => m.tools = true,
                _ => {}
            }
        }
        m
    }
}

#[derive(Default)]
struct Inner {
    partial: HashMap<String, ChunkAccumulator>,
    seen_meta: HashSet<String>,
    /// `events` mode: model calls whose `on_chat_model_start` was sent, and their chunks so
    /// far (for `on_chat_model_end`).
    model_calls: HashMap<String, ChunkAccumulator>,
    interrupt_update_sent: bool,
    /// The state a resumed run started from (published first, as LangGraph does).
    start_values: Option<Value>,
}

/// One run's observer.
pub struct Observer {
    log: Arc<RunLog>,
    thread_id: String,
    run_id: String,
    modes: Modes,
    /// Checkpoint metadata shared by every checkpoint of the run.
    base_meta: JsonMap,
    inner: Mutex<Inner>,
    checkpoints: RunCheckpoints,
    /// The run's runtime (test seams) and cancellation (a paused seam ends with the run).
    rt: RuntimeHandle,
    cancel: CancellationToken,
    /// Journal rows the run produced besides its messages (subagent steps, workspace
    /// changes), in order; appended with the run's messages when it ends.
    journal: Mutex<Vec<fawn_checkpoint::NewRunEvent>>,
    /// The metadata of the model call now streaming, serialized once for all its
    /// `messages` chunks (which share it in the log, see [`RunLog::publish_pair`]).
    chunk_meta: Mutex<Option<(Arc<JsonMap>, Bytes)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// `v` as JSON in a buffer of its exact size: the run's log keeps every event until the
/// run ends, and the serializer's doubling would otherwise keep up to twice the bytes.
pub(crate) fn to_bytes<T: Serialize + ?Sized>(v: &T) -> Bytes {
    match serde_json::to_vec(v) {
        Ok(mut b) => {
            b.shrink_to_fit();
            Bytes::from(b)
        }
        Err(_) => Bytes::from_static(b"null"),
    }
}

fn now() -> String {
    crate::wire::ts(&chrono::Utc::now())
}

fn task_records(tasks: &[PendingTask]) -> Vec<TaskRecord> {
    tasks
        .iter()
        .map(|t| TaskRecord {
            id: t.id.clone(),
            name: t.name.clone(),
            interrupts: t.interrupts.clone(),
            error: None,
        })
        .collect()
}

impl Observer {
    /// The observer of one run. `durability` is how its checkpoints are written; runs
    /// streaming `checkpoints` or `debug` events always write each one first, since those
    /// events carry the new checkpoint's id.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rt: RuntimeHandle,
        log: Arc<RunLog>,
        thread_id: String,
        run_id: String,
        modes: Modes,
        base_meta: JsonMap,
        parent_id: Option<String>,
        durability: Durability,
        cancel: CancellationToken,
    ) -> Observer {
        let durability = if modes.checkpoints || modes.debug {
            Durability::Sync
        } else {
            durability
        };
        let checkpoints = RunCheckpoints::new(
            rt.store.clone(),
            thread_id.clone(),
            run_id.clone(),
            parent_id,
            durability,
        );
        Observer {
            log,
            thread_id,
            run_id,
            modes,
            base_meta,
            inner: Mutex::new(Inner::default()),
            checkpoints,
            rt,
            cancel,
            journal: Mutex::new(Vec::new()),
            chunk_meta: Mutex::new(None),
        }
    }

    /// The journal rows kept so far (see [`EventSink::journal`]), taken.
    pub fn take_journal(&self) -> Vec<fawn_checkpoint::NewRunEvent> {
        std::mem::take(&mut *lock(&self.journal))
    }

    /// Waits for every queued checkpoint write; the first error among them, if any. The
    /// run's end calls this before it reads [`Observer::last`] or touches the run's
    /// checkpoints.
    pub async fn flush(&self) -> Result<(), String> {
        self.checkpoints.flush().await
    }

    pub fn modes(&self) -> Modes {
        self.modes
    }

    /// The last checkpoint this run wrote.
    pub fn last(&self) -> Option<LastCheckpoint> {
        self.checkpoints.last()
    }

    /// A run without input (`input: null`, a `command`, a recovered run) resumes from the
    /// thread's current checkpoint: like LangGraph, its `values` stream starts with that state.
    pub fn resuming_from(&self, state: &ThreadState) {
        let v = serde_json::to_value(state).unwrap_or_else(|_| Value::Object(Map::new()));
        if self.modes.values {
            self.log.publish("values", to_bytes(&v));
        }
        lock(&self.inner).start_values = Some(v);
    }

    /// The state published by [`Observer::resuming_from`], if any.
    pub fn start_values(&self) -> Option<Value> {
        lock(&self.inner).start_values.clone()
    }

    pub fn interrupt_update_sent(&self) -> bool {
        lock(&self.inner).interrupt_update_sent
    }

    pub fn publish(&self, name: &'static str, data: Bytes) {
        self.log.publish(name, data);
    }

    /// `events` mode: the root graph's `on_chain_start` (LangChain names a compiled graph
    /// `LangGraph`), carrying the run's input.
    pub fn graph_start(&self, input: Option<&Value>) {
        if self.modes.events {
            let data = json!({"input": input.cloned().unwrap_or(Value::Null)});
            self.graph_event("on_chain_start", data);
        }
    }

    /// `events` mode: the root graph's `on_chain_stream` and `on_chain_end` with the run's
    /// final values (sent when the run succeeded).
    pub fn graph_end(&self, output: &Value) {
        if self.modes.events {
            self.graph_event("on_chain_stream", json!({"chunk": output}));
            self.graph_event("on_chain_end", json!({"output": output}));
        }
    }

    fn publish_event(&self, event: Value) {
        self.log.publish("events", to_bytes(&event));
    }

    /// Publishes an `events` record of the graph itself: the run's id, no parents.
    fn graph_event(&self, kind: &str, data: Value) {
        self.publish_event(json!({
            "event": kind, "name": "LangGraph", "run_id": self.run_id, "tags": [],
            "metadata": self.base_meta, "data": data, "parent_ids": [],
        }));
    }

    /// Publishes an `events` record of a node's task, under the run.
    fn node_event(&self, kind: &str, step: i64, node: &str, task_id: &str, data: Value) {
        self.publish_event(json!({
            "event": kind, "name": node, "run_id": task_id,
            "tags": [format!("graph:step:{step}")],
            "metadata": self.node_event_meta(step, node, task_id),
            "data": data, "parent_ids": [self.run_id],
        }));
    }

    /// The run metadata plus a node's context, as `events` carry it.
    fn node_event_meta(&self, step: i64, node: &str, task_id: &str) -> Value {
        let mut m = self.base_meta.clone();
        fawn_agent::insert_node_context(&mut m, step, node, task_id);
        Value::Object(m)
    }

    /// An `events` record of the model call whose answer has `message_id`: its run id is the
    /// message id without the `lc_run--` prefix; its parents are the run and the node's task.
    fn model_event(
        &self,
        kind: &str,
        message_id: &str,
        metadata: &Map<String, Value>,
        data: Value,
    ) -> Value {
        let call = message_id.strip_prefix("lc_run--").unwrap_or(message_id);
        let task = metadata
            .get("langgraph_checkpoint_ns")
            .and_then(Value::as_str)
            .and_then(|ns| ns.split_once(':'))
            .map(|(_, task)| task.to_string());
        let mut parents = vec![json!(self.run_id)];
        parents.extend(task.map(Value::String));
        json!({
            "event": kind,
            "name": metadata.get("ls_model_name").cloned().unwrap_or(Value::Null),
            "run_id": call,
            "tags": metadata.get("tags").cloned().unwrap_or(json!([])),
            "metadata": metadata,
            "data": data,
            "parent_ids": parents,
        })
    }

    /// `events` mode: `on_chat_model_start` with the conversation sent to the model.
    fn model_start(&self, message_id: &str, messages: &Messages, metadata: &Map<String, Value>) {
        lock(&self.inner)
            .model_calls
            .insert(message_id.to_string(), ChunkAccumulator::new());
        let data = json!({"input": {"messages": [messages]}});
        self.publish_event(self.model_event("on_chat_model_start", message_id, metadata, data));
    }

    /// `events` mode for one token chunk: `on_chat_model_stream`, and `on_chat_model_end`
    /// with the whole message after the last one. A call whose start was not reported gets
    /// an `on_chat_model_start` without input before its first chunk.
    fn model_events(&self, chunk: &Message, metadata: &Map<String, Value>) {
        let id = chunk.id.clone().unwrap_or_default();
        let last = chunk.chunk_position.as_deref() == Some("last");
        let (first, finished) = {
            let mut g = lock(&self.inner);
            let first = !g.model_calls.contains_key(&id);
            g.model_calls.entry(id.clone()).or_default().push(chunk);
            let finished = if last {
                g.model_calls.remove(&id).map(|acc| {
                    let mut message = acc.finish();
                    message.kind = MessageKind::Ai;
                    message.id = Some(id.clone());
                    message
                })
            } else {
                None
            };
            (first, finished)
        };
        if first {
            self.publish_event(self.model_event("on_chat_model_start", &id, metadata, json!({})));
        }
        let data = json!({"chunk": chunk});
        self.publish_event(self.model_event("on_chat_model_stream", &id, metadata, data));
        if let Some(message) = finished {
            let data = json!({"output": message});
            self.publish_event(self.model_event("on_chat_model_end", &id, metadata, data));
        }
    }

    /// Publishes an `events` record of one tool call of the tools node's task `task_id`: its
    /// run id is a UUID derived from the task and the call id (the same for its start and its
    /// end).
    fn tool_event(
        &self,
        kind: &str,
        step: i64,
        task_id: &str,
        call_id: &str,
        name: &str,
        data: Value,
    ) {
        let key = format!("{task_id}|{call_id}");
        let run_id = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, key.as_bytes()).to_string();
        self.publish_event(json!({
            "event": kind, "name": name, "run_id": run_id, "tags": [],
            "metadata": self.node_event_meta(step, "tools", task_id),
            "data": data, "parent_ids": [self.run_id, task_id],
        }));
    }

    fn checkpoint_ref(&self, id: &str) -> Value {
        crate::wire::checkpoint_ref(&self.thread_id, "", id)
    }

    fn config_of(&self, id: &Option<String>) -> Value {
        match id {
            Some(id) => json!({"configurable": {
                "thread_id": self.thread_id, "checkpoint_ns": "", "checkpoint_id": id}}),
            None => Value::Null,
        }
    }
}

#[async_trait]
impl RunObserver for Observer {
    async fn checkpoint(&self, cp: StepCheckpoint) -> Result<(), ObserverError> {
        self.rt
            .hooks
            .reach(Point::Step, &self.run_id, &self.cancel)
            .await
            .map_err(ObserverError)?;
        let metadata = crate::checkpoints::metadata(&self.base_meta, cp.source.as_str(), cp.step);
        let records = task_records(&cp.tasks);
        // LangGraph emits `values` only for supersteps that changed the state: the input
        // checkpoint, a fork copy and a `next`-only checkpoint carry no writes.
        let changed = !cp.writes.is_empty();
        // The `checkpoints` and `debug` events repeat the metadata and tasks; other modes do
        // not need copies of them.
        let for_events = (self.modes.checkpoints || self.modes.debug)
            .then(|| (metadata.clone(), records.clone()));
        let step = Step {
            metadata,
            writes: cp.writes,
            state: cp.state.clone(),
            next: cp.next.clone(),
            tasks: cp.tasks,
            records,
        };
        let Some((id, parent_id)) = self.checkpoints.submit(step).await.map_err(ObserverError)?
        else {
            // Queued (`async`/`exit`): events that carry its id are never asked for then.
            if self.modes.values && changed {
                self.log.publish("values", to_bytes(&*cp.state));
            }
            return Ok(());
        };
        if self.modes.values && changed {
            self.log.publish("values", to_bytes(&*cp.state));
        }
        if let Some((metadata, tasks)) = for_events {
            let task_json: Vec<Value> = tasks
                .iter()
                .map(|t| json!({"id": t.id, "name": t.name, "interrupts": t.interrupts, "state": null}))
                .collect();
            let payload = json!({
                "config": self.config_of(&Some(id.clone())),
                "parent_config": self.config_of(&parent_id),
                "values": &*cp.state,
                "metadata": metadata,
                "next": cp.next,
                "tasks": task_json,
            });
            if self.modes.checkpoints {
                self.log.publish("checkpoints", to_bytes(&payload));
            }
            if self.modes.debug {
                let mut p = payload;
                if let Value::Object(m) = &mut p {
                    m.insert("checkpoint".into(), self.checkpoint_ref(&id));
                    m.insert(
                        "parent_checkpoint".into(),
                        parent_id
                            .as_deref()
                            .map(|p| self.checkpoint_ref(p))
                            .unwrap_or(Value::Null),
                    );
                }
                self.log.publish(
                    "debug",
                    to_bytes(&json!({"step": cp.step, "timestamp": now(), "type": "checkpoint", "payload": p})),
                );
            }
        }
        Ok(())
    }
}

impl Observer {
    /// `metadata` as JSON, serialized once per model call: a call's chunks share one map.
    fn chunk_meta_bytes(&self, metadata: &Arc<JsonMap>) -> Bytes {
        let mut cached = lock(&self.chunk_meta);
        if let Some((m, b)) = cached.as_ref()
            && Arc::ptr_eq(m, metadata)
        {
            return b.clone();
        }
        let b = to_bytes(&**metadata);
        *cached = Some((metadata.clone(), b.clone()));
        b
    }
}

impl EventSink for Observer {
    fn journal(&self, entry: fawn_state::JournalEntry) {
        lock(&self.journal).push(fawn_checkpoint::NewRunEvent {
            event_type: entry.event_type,
            category: entry.category,
            content: entry.content,
            metadata: entry.metadata,
            created_at: chrono::Utc::now(),
        });
    }

    fn emit(&self, event: StreamEvent) {
        let m = self.modes;
        match event {
            StreamEvent::ModelStart {
                message_id,
                messages,
                metadata,
            } => {
                if m.events {
                    self.model_start(&message_id, &messages, &metadata);
                }
            }
            StreamEvent::MessageChunk { chunk, metadata } => {
                if m.messages_tuple {
                    let meta = self.chunk_meta_bytes(&metadata);
                    self.log.publish_pair("messages", to_bytes(&chunk), meta);
                }
                if m.messages {
                    let id = chunk.id.clone().unwrap_or_default();
                    let (first, snapshot) = {
                        let mut g = lock(&self.inner);
                        let first = g.seen_meta.insert(id.clone());
                        let acc = g.partial.entry(id.clone()).or_default();
                        acc.push(&chunk);
                        let mut snap = acc.snapshot();
                        if snap.id.is_none() {
                            snap.id = Some(id.clone());
                        }
                        (first, snap)
                    };
                    if first {
                        let mut meta = Map::new();
                        meta.insert(id.clone(), json!({"metadata": &*metadata}));
                        self.log.publish("messages/metadata", to_bytes(&meta));
                    }
                    self.log.publish("messages/partial", to_bytes(&[&snapshot]));
                }
                if m.events {
                    self.model_events(&chunk, &metadata);
                }
            }
            StreamEvent::Message { message, metadata } => {
                if m.messages_tuple {
                    self.log
                        .publish("messages", to_bytes(&(&message, &metadata)));
                }
                if m.messages {
                    let id = message.id.clone().unwrap_or_default();
                    let first = lock(&self.inner).seen_meta.insert(id.clone());
                    if first {
                        let mut meta = Map::new();
                        meta.insert(id, json!({"metadata": metadata}));
                        self.log.publish("messages/metadata", to_bytes(&meta));
                    }
                    self.log.publish("messages/complete", to_bytes(&[&message]));
                }
            }
            StreamEvent::Custom(v) => {
                if m.custom {
                    self.log.publish("custom", to_bytes(&v));
                }
            }
            StreamEvent::NodeStart {
                step,
                task_id,
                node,
                input,
                triggers,
            } => {
                if m.tasks || m.debug {
                    let payload =
                        json!({"id": task_id, "name": node, "input": input, "triggers": triggers});
                    if m.tasks {
                        self.log.publish("tasks", to_bytes(&payload));
                    }
                    if m.debug {
                        self.log.publish(
                            "debug",
                            to_bytes(&json!({"step": step, "timestamp": now(), "type": "task", "payload": payload})),
                        );
                    }
                }
                if m.events {
                    let data = json!({"input": input});
                    self.node_event("on_chain_start", step, &node, &task_id, data);
                }
            }
            StreamEvent::ToolStart {
                step,
                task_id,
                call_id,
                name,
                args,
            } => {
                if m.tools {
                    let data = json!({"event": "tool-started", "tool_call_id": call_id,
                        "tool_name": name, "input": args});
                    self.log.publish("tools", to_bytes(&data));
                }
                if m.events {
                    let data = json!({"input": args});
                    self.tool_event("on_tool_start", step, &task_id, &call_id, &name, data);
                }
            }
            StreamEvent::ToolEnd {
                step,
                task_id,
                call_id,
                name,
                message,
            } => {
                if m.tools {
                    self.log
                        .publish("tools", to_bytes(&tool_end_event(&call_id, &message)));
                }
                if m.events {
                    let data = json!({"output": message});
                    self.tool_event("on_tool_end", step, &task_id, &call_id, &name, data);
                }
            }
            StreamEvent::NodeEnd {
                step,
                task_id,
                node,
                update,
                error,
                interrupts,
            } => {
                if m.updates {
                    if !interrupts.is_empty() {
                        lock(&self.inner).interrupt_update_sent = true;
                        self.log.publish(
                            "updates",
                            to_bytes(&json!({"__interrupt__": interrupts_wire(&interrupts)})),
                        );
                    } else if !update.is_null() {
                        let mut o = Map::new();
                        o.insert(node.clone(), update.clone());
                        self.log.publish("updates", to_bytes(&o));
                    }
                } else if !interrupts.is_empty() {
                    lock(&self.inner).interrupt_update_sent = true;
                }
                if m.tasks || m.debug {
                    let result = match &update {
                        Value::Null => json!({}),
                        other => other.clone(),
                    };
                    let payload = json!({"id": task_id, "name": node, "error": error,
                        "result": result, "interrupts": interrupts_wire(&interrupts)});
                    if m.tasks {
                        self.log.publish("tasks", to_bytes(&payload));
                    }
                    if m.debug {
                        self.log.publish(
                            "debug",
                            to_bytes(&json!({"step": step, "timestamp": now(), "type": "task_result", "payload": payload})),
                        );
                    }
                }
                if m.events {
                    if !update.is_null() {
                        let data = json!({"chunk": &update});
                        self.node_event("on_chain_stream", step, &node, &task_id, data);
                    }
                    let data = json!({"output": update});
                    self.node_event("on_chain_end", step, &node, &task_id, data);
                }
            }
        }
    }
}

/// The `tools` event of a finished tool call: `tool-finished` with the tool message as its
/// output, or `tool-error` with its text when the call failed (a tool failure is an error
/// tool message, never an exception).
fn tool_end_event(call_id: &str, message: &Message) -> Value {
    if message.status.as_deref() == Some("error") {
        json!({"event": "tool-error", "tool_call_id": call_id, "message": message.text()})
    } else {
        json!({"event": "tool-finished", "tool_call_id": call_id, "output": message})
    }
}

/// Interrupts as stream events carry them: `{value, id}` (+ `response_schema` when set).
pub fn interrupts_wire(interrupts: &[Interrupt]) -> Value {
    Value::Array(
        interrupts
            .iter()
            .map(|i| json!({"value": i.value, "id": i.id}))
            .collect(),
    )
}
