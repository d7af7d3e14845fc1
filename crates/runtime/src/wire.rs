//! The JSON shapes the runtime itself emits (event payloads, webhook bodies, thread
//! summaries): LangGraph's timestamp format, checkpoint references, interrupts by task and
//! the `Run` object. The server answers with the same shapes.

use chrono::{DateTime, Utc};
use fawn_checkpoint::{JsonMap, Run, TaskRecord};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// LangGraph's timestamp format (`2024-01-01T00:00:00.000000+00:00`).
pub fn ts(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()
}

/// A checkpoint reference `{checkpoint_id, thread_id, checkpoint_ns}`.
pub fn checkpoint_ref(thread_id: &str, ns: &str, id: &str) -> Value {
    json!({"checkpoint_id": id, "thread_id": thread_id, "checkpoint_ns": ns})
}

/// `{task_id: [Interrupt…]}` for `Thread.interrupts`.
pub fn interrupts_by_task(tasks: &[TaskRecord]) -> JsonMap {
    let mut m = Map::new();
    for t in tasks {
        if !t.interrupts.is_empty() {
            m.insert(t.id.clone(), json!(t.interrupts));
        }
    }
    m
}

/// A `Run` as the API shows it (borrowed, serialized without an intermediate `Value`).
#[derive(Serialize)]
pub struct RunOut<'a> {
    run_id: &'a str,
    thread_id: &'a str,
    assistant_id: &'a str,
    created_at: String,
    updated_at: String,
    status: &'static str,
    metadata: &'a JsonMap,
    multitask_strategy: &'static str,
    #[serde(serialize_with = "client_kwargs")]
    kwargs: &'a JsonMap,
    attempt: u32,
    error: &'a Option<Value>,
    cancel_reason: Option<&'static str>,
    stop_reason: &'a Option<String>,
    langsmith_session_name: Option<()>,
}

/// A run's kwargs as clients see them: without the server's own [`crate::kwargs::ORIGIN_KEY`].
fn client_kwargs<S: serde::Serializer>(kwargs: &&JsonMap, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let shown = kwargs
        .iter()
        .filter(|(k, _)| k.as_str() != crate::kwargs::ORIGIN_KEY);
    let mut map = s.serialize_map(None)?;
    for (k, v) in shown {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

pub fn run_out(r: &Run) -> RunOut<'_> {
    RunOut {
        run_id: &r.run_id,
        thread_id: &r.thread_id,
        assistant_id: &r.assistant_id,
        created_at: ts(&r.created_at),
        updated_at: ts(&r.updated_at),
        status: r.status.as_str(),
        metadata: &r.metadata,
        multitask_strategy: r.multitask_strategy.as_str(),
        kwargs: &r.kwargs,
        attempt: r.attempt,
        error: &r.error,
        cancel_reason: r.cancel_requested.map(|a| match a {
            fawn_checkpoint::CancelAction::Interrupt => "interrupt",
            fawn_checkpoint::CancelAction::Rollback => "rollback",
        }),
        stop_reason: &r.stop_reason,
        langsmith_session_name: None,
    }
}

/// A `Run` as JSON.
pub fn run(r: &Run) -> Value {
    serde_json::to_value(run_out(r)).unwrap_or(Value::Null)
}
