//! What a running agent reports while it runs, before any wire formatting.
//!
//! The agent emits these through an [`EventSink`]; the server turns them into SSE frames for
//! each stream mode (`messages`, `updates`, `custom`, `tasks`, `debug`). `values` and
//! `checkpoints` come from persisted steps, not from here.

use crate::list::Messages;
use crate::message::Message;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;

/// A pending human-in-the-loop question (LangGraph `Interrupt`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    /// Stable 32-hex id; `command.resume` maps are keyed by it.
    pub id: String,
    pub value: Value,
}

/// LangGraph `Command`: resume an interrupt, update state, and/or jump to a node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Command {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Value>,
    /// An object, or a list of `[key, value]` pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<Value>,
    /// Node names to go to next.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub goto: Vec<String>,
}

/// One thing that happened during a run.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// A model call is about to start: its message id (every chunk of the answer carries
    /// it), the conversation sent (system messages included) and the chunks' metadata.
    ModelStart {
        message_id: String,
        messages: Messages,
        metadata: Arc<Map<String, Value>>,
    },
    /// A token delta of a streamed AI message (`AIMessageChunk`), with LangGraph's metadata
    /// (`langgraph_node`, `langgraph_step`, `run_id`, …). Every chunk of a message shares its id.
    MessageChunk {
        chunk: Message,
        /// Shared by every chunk of the call (cloning it per token was a map copy each).
        metadata: Arc<Map<String, Value>>,
    },
    /// A whole message produced at once by a node (e.g. a tool result).
    Message {
        message: Message,
        metadata: Map<String, Value>,
    },
    /// A payload a middleware or tool sent to the stream writer (`custom` mode).
    Custom(Value),
    /// A node started.
    NodeStart {
        step: i64,
        task_id: String,
        node: String,
        input: Value,
        triggers: Vec<String>,
    },
    /// One tool call of a tool-running node started (the calls of a step run concurrently).
    ToolStart {
        step: i64,
        /// The node's task.
        task_id: String,
        call_id: String,
        name: String,
        args: Map<String, Value>,
    },
    /// That tool call finished: `message` is its answer (a tool message, possibly an error
    /// one).
    ToolEnd {
        step: i64,
        task_id: String,
        call_id: String,
        name: String,
        message: Message,
    },
    /// A node finished. `update` is what it wrote (`updates` mode payload under its name).
    NodeEnd {
        step: i64,
        task_id: String,
        node: String,
        update: Value,
        error: Option<String>,
        interrupts: Vec<Interrupt>,
    },
}

/// A row for the run's event journal (DeerFlow's `run_events`), not for the stream: a
/// subagent step, the run's workspace changes. The run's journal is written when it ends.
#[derive(Clone, Debug, PartialEq)]
pub struct JournalEntry {
    pub event_type: String,
    pub category: String,
    pub content: Value,
    pub metadata: Map<String, Value>,
}

/// Receives stream events. Must not block: implementations buffer or drop.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: StreamEvent);
    /// Keeps `entry` for the run's journal; dropped by sinks that keep none.
    fn journal(&self, entry: JournalEntry) {
        let _ = entry;
    }
}

/// A sink that drops everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: StreamEvent) {}
}

/// A sink that records events in memory (tests, the in-process benchmark).
#[derive(Debug, Default)]
pub struct VecSink {
    events: std::sync::Mutex<Vec<StreamEvent>>,
}

impl VecSink {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn take(&self) -> Vec<StreamEvent> {
        match self.events.lock() {
            Ok(mut g) => std::mem::take(&mut *g),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        }
    }
}

impl EventSink for VecSink {
    fn emit(&self, event: StreamEvent) {
        match self.events.lock() {
            Ok(mut g) => g.push(event),
            Err(poisoned) => poisoned.into_inner().push(event),
        }
    }
}
