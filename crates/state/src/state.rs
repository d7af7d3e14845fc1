//! `ThreadState` (DeerFlow's channels) and the reducers that apply updates to it.

use crate::list::{Messages, id_of, needs_fixing};
use crate::message::{
    Message, MessageError, MessageKind, REMOVE_ALL_MESSAGES, messages_from_value,
};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// `sandbox` channel.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `thread_data` channel: the thread's host directories.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploads_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_path: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One plan-mode todo item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    /// `pending` | `in_progress` | `completed`.
    pub status: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `goal` channel: a thread-scoped objective the agent keeps pursuing (DeerFlow's
/// `GoalState`, `/goal`). Fields Fawn does not know are kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoalState {
    pub objective: String,
    /// Always `active` (a goal that is no longer active is removed).
    #[serde(default = "goal_active")]
    pub status: String,
    #[serde(default)]
    pub created_at: String,
    #[serde(default)]
    pub updated_at: String,
    #[serde(default)]
    pub continuation_count: u32,
    #[serde(default)]
    pub max_continuations: u32,
    #[serde(default)]
    pub no_progress_count: u32,
    #[serde(default)]
    pub max_no_progress_continuations: u32,
    /// The evaluator's latest verdict (`{satisfied, blocker, reason, evidence_summary,
    /// run_id, evaluated_at, progress_key, stand_down_reason?}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_evaluation: Option<Map<String, Value>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn goal_active() -> String {
    "active".to_string()
}

/// The lead agent's thread state. Channels that were never written are `None`; most are then
/// left out of `values`, as LangGraph does. The channels DeerFlow declares with a reducer
/// over a list or a map start out empty there rather than missing, so `values` always has
/// `artifacts`, `viewed_images`, `delegations` and `skill_context` (see [`ALWAYS_PRESENT`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadState {
    pub messages: Messages,
    pub sandbox: Option<SandboxState>,
    pub thread_data: Option<ThreadData>,
    pub title: Option<String>,
    pub artifacts: Option<Vec<String>>,
    pub todos: Option<Vec<Todo>>,
    pub uploaded_files: Option<Vec<Value>>,
    pub viewed_images: Option<Map<String, Value>>,
    pub summary_text: Option<String>,
    pub goal: Option<GoalState>,
    /// Any other key a client or tool wrote (last value wins).
    pub extra: Map<String, Value>,
}

/// Keys `values` always carries, empty when never written: DeerFlow's `ThreadState` declares
/// them as reducer channels over a list or a dict, which LangGraph starts out empty.
pub const ALWAYS_PRESENT: [&str; 4] =
    ["artifacts", "viewed_images", "delegations", "skill_context"];

impl Serialize for ThreadState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        fn opt<M: SerializeMap, T: Serialize>(
            m: &mut M,
            key: &str,
            v: &Option<T>,
        ) -> Result<(), M::Error> {
            match v {
                Some(v) => m.serialize_entry(key, v),
                None => Ok(()),
            }
        }
        let empty_map = Map::new();
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("messages", &self.messages)?;
        opt(&mut m, "sandbox", &self.sandbox)?;
        opt(&mut m, "thread_data", &self.thread_data)?;
        opt(&mut m, "title", &self.title)?;
        m.serialize_entry("artifacts", self.artifacts.as_deref().unwrap_or_default())?;
        opt(&mut m, "todos", &self.todos)?;
        opt(&mut m, "uploaded_files", &self.uploaded_files)?;
        m.serialize_entry(
            "viewed_images",
            self.viewed_images.as_ref().unwrap_or(&empty_map),
        )?;
        opt(&mut m, "summary_text", &self.summary_text)?;
        opt(&mut m, "goal", &self.goal)?;
        for (k, v) in &self.extra {
            m.serialize_entry(k, v)?;
        }
        for key in ["delegations", "skill_context"] {
            if !self.extra.contains_key(key) {
                m.serialize_entry(key, &[] as &[Value])?;
            }
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for ThreadState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        let update = StateUpdate::from_value(v).map_err(serde::de::Error::custom)?;
        let mut state = ThreadState::default();
        // A stored state is a snapshot: apply it as a single write to an empty state.
        let mut writes = vec![update];
        state
            .apply_writes(&mut writes)
            .map_err(serde::de::Error::custom)?;
        // The empty channels `values` always shows read back as never written, so a
        // snapshot round-trips to the state it was taken from.
        if state.artifacts.as_ref().is_some_and(Vec::is_empty) {
            state.artifacts = None;
        }
        if state.viewed_images.as_ref().is_some_and(Map::is_empty) {
            state.viewed_images = None;
        }
        for key in ["delegations", "skill_context"] {
            if state
                .extra
                .get(key)
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                state.extra.remove(key);
            }
        }
        Ok(state)
    }
}

/// A write to the state: what a node (or a client via `POST /state`) returns.
///
/// `None` means "not written". For last-value channels, `Some(None)` writes `null`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StateUpdate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_data: Option<Option<ThreadData>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub todos: Option<Vec<Todo>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uploaded_files: Option<Option<Vec<Value>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub viewed_images: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_text: Option<Option<String>>,
    /// DeerFlow's `merge_goal`: not written keeps the goal, a goal replaces it. An explicit
    /// `null` (`Some(None)`) removes it: DeerFlow's goal writer and its state-update route
    /// both overwrite the channel past the reducer, which is the only way a `null` reaches it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<Option<GoalState>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl<'de> Deserialize<'de> for StateUpdate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        StateUpdate::from_value(v).map_err(serde::de::Error::custom)
    }
}

/// A state update or stored state that cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StateError {
    #[error("state values must be a JSON object, got {0}")]
    NotAnObject(String),
    #[error("`messages`: {0}")]
    Message(#[from] MessageError),
    #[error("`{channel}`: {reason}")]
    BadChannel {
        channel: &'static str,
        reason: String,
    },
}

/// A reducer refused a write.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReducerError {
    #[error("Attempting to delete a message with an ID that doesn't exist ('{0}')")]
    RemoveUnknownMessage(String),
    #[error("conflicting sandbox ids written in one step: '{0}' and '{1}'")]
    SandboxConflict(String, String),
}

fn typed<T: serde::de::DeserializeOwned>(channel: &'static str, v: Value) -> Result<T, StateError> {
    serde_json::from_value(v).map_err(|e| StateError::BadChannel {
        channel,
        reason: e.to_string(),
    })
}

fn last_value<T: serde::de::DeserializeOwned>(
    channel: &'static str,
    v: Value,
) -> Result<Option<T>, StateError> {
    if v.is_null() {
        Ok(None)
    } else {
        typed(channel, v).map(Some)
    }
}

impl StateUpdate {
    /// Parses an update from client JSON (`{"messages": [...], "title": "…", …}`).
    /// `messages` may be a list, one message, or a string; OpenAI-style roles are accepted.
    pub fn from_value(v: Value) -> Result<StateUpdate, StateError> {
        let map = match v {
            Value::Object(m) => m,
            Value::Null => return Ok(StateUpdate::default()),
            other => {
                return Err(StateError::NotAnObject(
                    match other {
                        Value::Array(_) => "an array",
                        Value::String(_) => "a string",
                        Value::Number(_) => "a number",
                        _ => "a boolean",
                    }
                    .to_string(),
                ));
            }
        };
        let mut u = StateUpdate::default();
        for (k, v) in map {
            match k.as_str() {
                "messages" => u.messages = Some(messages_from_value(v)?),
                "sandbox" => {
                    if !v.is_null() {
                        u.sandbox = Some(typed("sandbox", v)?);
                    }
                }
                "thread_data" => u.thread_data = Some(last_value("thread_data", v)?),
                "title" => u.title = Some(last_value("title", v)?),
                "artifacts" => {
                    if !v.is_null() {
                        u.artifacts = Some(typed("artifacts", v)?);
                    }
                }
                "todos" => {
                    if !v.is_null() {
                        u.todos = Some(typed("todos", v)?);
                    }
                }
                "uploaded_files" => u.uploaded_files = Some(last_value("uploaded_files", v)?),
                "viewed_images" => {
                    if !v.is_null() {
                        u.viewed_images = Some(typed("viewed_images", v)?);
                    }
                }
                "summary_text" => u.summary_text = Some(last_value("summary_text", v)?),
                "goal" => u.goal = Some(last_value("goal", v)?),
                _ => {
                    u.extra.insert(k, v);
                }
            }
        }
        Ok(u)
    }

    pub fn is_empty(&self) -> bool {
        self == &StateUpdate::default()
    }

    pub fn messages(messages: Vec<Message>) -> StateUpdate {
        StateUpdate {
            messages: Some(messages),
            ..Default::default()
        }
    }

    /// The update as the wire JSON a client would see in an `updates` event.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Object(Map::new()))
    }

    /// Merges `other` into `self`, so that applying `self` afterwards equals applying the
    /// old `self` and then `other` (as two separate applications) — with four exceptions
    /// that a single write cannot express:
    ///
    /// * `messages`: `self` holds a `RemoveMessage` for an unknown id (an error on its own)
    ///   and `other` a remove-all, which in one `add_messages` call discards it.
    /// * `messages`: a `RemoveMessage(id)` in `self` followed by a message with the same id
    ///   in `other`, when that id was already in the state. In one `add_messages` call the
    ///   message is replaced in place; in two calls it is removed and then appended.
    /// * `messages`: `self` and `other` both hold a `RemoveMessage` for the same id. In two
    ///   calls the second one fails (the id is gone); in one call both find it and it is
    ///   removed once. (Only an update that fails on its own is affected.)
    /// * `viewed_images`: `self` clears (`{}`) and `other` adds images. Merged, the images
    ///   are added to the old ones instead of replacing them.
    ///
    /// Every other channel merges exactly: messages and artifacts concatenate, the others
    /// (sandbox, todos, last-value channels, unknown keys) take `other`'s value when written.
    pub fn merge(&mut self, other: StateUpdate) {
        if let Some(m) = other.messages {
            self.messages.get_or_insert_with(Vec::new).extend(m);
        }
        if other.sandbox.is_some() {
            self.sandbox = other.sandbox;
        }
        if other.thread_data.is_some() {
            self.thread_data = other.thread_data;
        }
        if other.title.is_some() {
            self.title = other.title;
        }
        if let Some(a) = other.artifacts {
            self.artifacts.get_or_insert_with(Vec::new).extend(a);
        }
        if other.todos.is_some() {
            self.todos = other.todos;
        }
        if other.uploaded_files.is_some() {
            self.uploaded_files = other.uploaded_files;
        }
        if let Some(v) = other.viewed_images {
            if clears_viewed_images(&v) {
                self.viewed_images = Some(Map::new());
            } else {
                let target = self.viewed_images.get_or_insert_with(Map::new);
                target.extend(v);
            }
        }
        if other.summary_text.is_some() {
            self.summary_text = other.summary_text;
        }
        if other.goal.is_some() {
            self.goal = other.goal;
        }
        self.extra.extend(other.extra);
    }
}

/// Assigns a fresh id to every message that has none (as `add_messages` does).
pub fn assign_missing_ids(messages: &mut [Message]) {
    for m in messages.iter_mut() {
        if m.id.as_deref().is_none_or(str::is_empty) {
            m.id = Some(uuid::Uuid::new_v4().to_string());
        }
    }
}

/// What `add_messages` does to its input first: chunks become messages
/// (`message_chunk_to_message`) and missing ids are assigned.
pub fn normalize_messages(messages: &mut [Message]) {
    for m in messages.iter_mut() {
        if m.is_chunk() {
            *m = m.to_message();
        }
    }
    assign_missing_ids(messages);
}

/// Checks that applying `writes` (each one `add_messages` call) to messages with the ids
/// `ids` cannot fail, i.e. every `RemoveMessage` names an id present at that point.
fn check_removals<'a>(
    ids: &mut std::collections::HashSet<&'a str>,
    right: &'a [Message],
) -> Result<(), ReducerError> {
    let right = match right.iter().rposition(Message::is_remove_all) {
        Some(pos) => {
            ids.clear();
            &right[pos + 1..]
        }
        None => right,
    };
    let mut removed = std::collections::HashSet::new();
    for m in right {
        let id = id_of(m);
        if m.kind == MessageKind::Remove {
            if !ids.contains(id) {
                return Err(ReducerError::RemoveUnknownMessage(id.to_string()));
            }
            removed.insert(id);
        } else {
            ids.insert(id);
            removed.remove(id);
        }
    }
    for id in removed {
        ids.remove(id);
    }
    Ok(())
}

/// LangGraph `add_messages`: append; same id replaces in place; `RemoveMessage(id)` deletes;
/// `RemoveMessage(REMOVE_ALL_MESSAGES)` drops everything before it. Chunks are turned into
/// messages and messages without an id get a fresh one (pass the write through
/// [`normalize_messages`] first to know those ids). On error `left` is unchanged.
///
/// One deliberate difference: the messages after a remove-all go through the usual rules
/// (LangGraph returns them verbatim, so a duplicate id there would appear twice and a
/// `RemoveMessage` would be stored as a message).
///
/// Cost: a write without removals costs a hash lookup per chunk of `left` per written
/// message (see [`Messages::rfind_id`]), never a copy or a scan of the whole list.
pub fn add_messages(left: &mut Messages, right: &[Message]) -> Result<(), ReducerError> {
    let normalized;
    let right = if right.iter().any(needs_fixing) {
        let mut copy = right.to_vec();
        normalize_messages(&mut copy);
        normalized = copy;
        &normalized[..]
    } else {
        right
    };
    if left.any_needs_fixing() {
        left.fix_with(normalize_messages);
    }
    if has_removals(right) {
        let mut ids: std::collections::HashSet<&str> = left.iter().map(id_of).collect();
        check_removals(&mut ids, right)?;
    }
    apply_add_messages(left, right);
    Ok(())
}

/// True when a write holds a `RemoveMessage` (including remove-all).
fn has_removals(right: &[Message]) -> bool {
    right.iter().any(|m| m.kind == MessageKind::Remove)
}

/// `add_messages` on input already checked by [`check_removals`] and normalised.
fn apply_add_messages(left: &mut Messages, right: &[Message]) {
    let right = match right.iter().rposition(Message::is_remove_all) {
        Some(pos) => {
            left.clear();
            &right[pos + 1..]
        }
        None => right,
    };
    if !has_removals(right) {
        // Appends and replacements: one id lookup each (the list keeps an id index).
        for m in right {
            match left.rfind_id(id_of(m)) {
                Some(i) => {
                    left.replace(i, m.clone());
                }
                None => left.push(m.clone()),
            }
        }
        return;
    }
    // With removals, every written id is resolved against the list as it was before the
    // write (plus what the write appended), then the removed positions are dropped at once.
    let mut index: HashMap<String, usize> = left
        .iter()
        .enumerate()
        .map(|(i, m)| (id_of(m).to_string(), i))
        .collect();
    let mut removed: Vec<bool> = vec![false; left.len()];
    for m in right {
        let id = id_of(m);
        match (index.get(id).copied(), &m.kind) {
            (Some(i), MessageKind::Remove) => removed[i] = true,
            (Some(i), _) => {
                left.replace(i, m.clone());
                removed[i] = false;
            }
            // Checked beforehand: cannot happen.
            (None, MessageKind::Remove) => {}
            (None, _) => {
                index.insert(id.to_string(), left.len());
                left.push(m.clone());
                removed.push(false);
            }
        }
    }
    if removed.iter().any(|r| *r) {
        let mut i = 0;
        left.retain(|_| {
            let keep = !removed.get(i).copied().unwrap_or(false);
            i += 1;
            keep
        });
    }
}

/// DeerFlow `merge_artifacts`: concatenation with order-preserving dedupe. (DeerFlow skips
/// the dedupe on the very first write; Fawn always dedupes, so the channel never holds a
/// duplicate.)
pub fn merge_artifacts(existing: &mut Vec<String>, new: &[String]) {
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    existing.retain(|a| seen.insert(a.clone()));
    for a in new {
        if seen.insert(a.clone()) {
            existing.push(a.clone());
        }
    }
}

/// Key DeerFlow uses as an explicit "clear viewed images" marker (`CLEAR_VIEWED_IMAGES`).
pub const CLEAR_VIEWED_IMAGES_KEY: &str = "__deerflow_clear__";

/// `{}` clears `viewed_images` (as the reference documents); so does DeerFlow's newer
/// explicit marker key.
fn clears_viewed_images(v: &Map<String, Value>) -> bool {
    v.is_empty() || v.contains_key(CLEAR_VIEWED_IMAGES_KEY)
}

fn sandbox_id_text(s: &SandboxState) -> String {
    s.sandbox_id.clone().unwrap_or_else(|| "null".to_string())
}

impl ThreadState {
    /// Applies the writes of one step through the reducers, atomically: on error the state
    /// is unchanged. Chunks in `messages` writes become messages and missing message ids are
    /// assigned *in the writes themselves*, so that persisting the writes and replaying them
    /// later reproduces exactly the same state.
    ///
    /// `sandbox`: every value written in one step must carry the same `sandbox_id` (an
    /// error otherwise); the step's value then replaces the stored one.
    pub fn apply_writes(&mut self, writes: &mut [StateUpdate]) -> Result<(), ReducerError> {
        let mut step_sandbox: Option<&SandboxState> = None;
        for w in writes.iter() {
            if let Some(s) = &w.sandbox {
                match step_sandbox {
                    Some(prev) if prev.sandbox_id != s.sandbox_id => {
                        return Err(ReducerError::SandboxConflict(
                            sandbox_id_text(prev),
                            sandbox_id_text(s),
                        ));
                    }
                    Some(_) => {}
                    None => step_sandbox = Some(s),
                }
            }
        }
        let step_sandbox = step_sandbox.cloned();
        for w in writes.iter_mut() {
            if let Some(msgs) = w.messages.as_mut() {
                normalize_messages(msgs);
            }
        }
        // Everything below is infallible once the removals are known to be valid.
        if self.messages.any_needs_fixing() {
            self.messages.fix_with(normalize_messages);
        }
        // Only removals can fail; a step without any skips the id set (O(thread length)).
        if writes
            .iter()
            .any(|w| w.messages.as_deref().is_some_and(has_removals))
        {
            let mut ids: std::collections::HashSet<&str> =
                self.messages.iter().map(id_of).collect();
            for w in writes.iter() {
                if let Some(msgs) = &w.messages {
                    check_removals(&mut ids, msgs)?;
                }
            }
        }
        for w in writes.iter() {
            if let Some(msgs) = &w.messages {
                apply_add_messages(&mut self.messages, msgs);
            }
            if let Some(td) = &w.thread_data {
                self.thread_data = td.clone();
            }
            if let Some(t) = &w.title {
                self.title = t.clone();
            }
            if let Some(a) = &w.artifacts {
                merge_artifacts(self.artifacts.get_or_insert_with(Vec::new), a);
            }
            if let Some(t) = &w.todos {
                self.todos = Some(t.clone());
            }
            if let Some(u) = &w.uploaded_files {
                self.uploaded_files = u.clone();
            }
            if let Some(v) = &w.viewed_images {
                if clears_viewed_images(v) {
                    self.viewed_images = Some(Map::new());
                } else {
                    self.viewed_images
                        .get_or_insert_with(Map::new)
                        .extend(v.clone());
                }
            }
            if let Some(s) = &w.summary_text {
                self.summary_text = s.clone();
            }
            if let Some(g) = &w.goal {
                self.goal = g.clone();
            }
            for (k, v) in &w.extra {
                self.extra.insert(k.clone(), v.clone());
            }
        }
        if let Some(s) = step_sandbox {
            self.sandbox = Some(s);
        }
        Ok(())
    }

    /// Applies a single update (one write in its own step).
    pub fn apply(&mut self, update: &mut StateUpdate) -> Result<(), ReducerError> {
        self.apply_writes(std::slice::from_mut(update))
    }

    /// The state as wire JSON (`values`).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Object(Map::new()))
    }

    /// The state as a write that recreates it from an empty state (used for snapshots).
    pub fn to_update(&self) -> StateUpdate {
        StateUpdate {
            messages: Some(self.messages.to_vec()),
            sandbox: self.sandbox.clone(),
            thread_data: self.thread_data.clone().map(Some),
            title: self.title.clone().map(Some),
            artifacts: self.artifacts.clone(),
            todos: self.todos.clone(),
            uploaded_files: self.uploaded_files.clone().map(Some),
            viewed_images: self.viewed_images.clone(),
            summary_text: self.summary_text.clone().map(Some),
            goal: self.goal.clone().map(Some),
            extra: self.extra.clone(),
        }
    }

    /// The last message, if any.
    pub fn last_message(&self) -> Option<&Message> {
        self.messages.last()
    }
}

/// Id used to clear all messages, re-exported for convenience.
pub const REMOVE_ALL: &str = REMOVE_ALL_MESSAGES;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn upd(v: Value) -> StateUpdate {
        StateUpdate::from_value(v).unwrap()
    }

    #[test]
    fn messages_append_replace_remove() {
        let mut s = ThreadState::default();
        s.apply(&mut upd(json!({"messages": [
            {"role": "user", "content": "a", "id": "1"},
            {"type": "ai", "content": "b", "id": "2"}
        ]})))
        .unwrap();
        s.apply(&mut upd(
            json!({"messages": [{"type": "ai", "content": "B", "id": "2"}]}),
        ))
        .unwrap();
        assert_eq!(s.messages.len(), 2);
        assert_eq!(s.messages[1].text(), "B");
        s.apply(&mut upd(
            json!({"messages": [{"type": "remove", "id": "1"}]}),
        ))
        .unwrap();
        assert_eq!(s.messages.len(), 1);
        assert!(
            s.apply(&mut upd(
                json!({"messages": [{"type": "remove", "id": "zz"}]})
            ))
            .is_err()
        );
        s.apply(&mut upd(json!({"messages": [
            {"type": "remove", "id": "__remove_all__"},
            {"type": "human", "content": "fresh"}
        ]})))
        .unwrap();
        assert_eq!(s.messages.len(), 1);
        assert!(s.messages[0].id.is_some());
    }

    #[test]
    fn ids_are_assigned_in_the_write() {
        let mut s = ThreadState::default();
        let mut u = upd(json!({"messages": "hi"}));
        s.apply(&mut u).unwrap();
        let id = u.messages.as_ref().unwrap()[0].id.clone();
        assert!(id.is_some());
        assert_eq!(s.messages[0].id, id);
    }

    #[test]
    fn channel_reducers() {
        let mut s = ThreadState::default();
        s.apply(&mut upd(
            json!({"artifacts": ["a", "b"], "todos": [{"content": "x", "status": "pending"}],
            "viewed_images": {"p": {"size": 1}}, "title": "T"}),
        ))
        .unwrap();
        s.apply(&mut upd(
            json!({"artifacts": ["b", "c"], "todos": null, "artifacts2": 1}),
        ))
        .unwrap();
        assert_eq!(s.artifacts.as_deref().unwrap(), ["a", "b", "c"]);
        assert_eq!(s.todos.as_ref().unwrap().len(), 1);
        s.apply(&mut upd(
            json!({"todos": [], "viewed_images": {}, "title": null}),
        ))
        .unwrap();
        assert!(s.todos.as_ref().unwrap().is_empty());
        assert!(s.viewed_images.as_ref().unwrap().is_empty());
        assert_eq!(s.title, None);
        assert_eq!(s.extra["artifacts2"], 1);
    }

    #[test]
    fn small_writes_take_the_linear_path_with_the_same_result() {
        let mut a = ThreadState::default();
        let mut base: Vec<Value> = (0..40)
            .map(|i| json!({"type": "human", "content": format!("m{i}"), "id": format!("id{i}")}))
            .collect();
        a.apply(&mut upd(json!({"messages": base.clone()})))
            .unwrap();
        // Replace a recent and an old message, append two, one of them twice.
        let write = json!({"messages": [
            {"type": "ai", "content": "R38", "id": "id38"},
            {"type": "ai", "content": "R1", "id": "id1"},
            {"type": "ai", "content": "new", "id": "n1"},
            {"type": "ai", "content": "new2", "id": "n2"},
            {"type": "ai", "content": "new1b", "id": "n1"},
        ]});
        a.apply(&mut upd(write)).unwrap();
        base[38] = json!({"type": "ai", "content": "R38", "id": "id38"});
        base[1] = json!({"type": "ai", "content": "R1", "id": "id1"});
        base.push(json!({"type": "ai", "content": "new1b", "id": "n1"}));
        base.push(json!({"type": "ai", "content": "new2", "id": "n2"}));
        let mut b = ThreadState::default();
        b.apply(&mut upd(json!({"messages": base}))).unwrap();
        assert_eq!(a, b);
        // A larger write gives the same result as one message at a time.
        let many: Vec<Value> = (0..21)
            .map(
                |i| json!({"type": "ai", "content": format!("x{i}"), "id": format!("id{}", i % 3)}),
            )
            .collect();
        let mut c = a.clone();
        c.apply(&mut upd(json!({"messages": many.clone()})))
            .unwrap();
        let mut d = a.clone();
        for m in many {
            d.apply(&mut upd(json!({"messages": [m]}))).unwrap();
        }
        assert_eq!(c, d);
    }

    #[test]
    fn sandbox_conflict_in_one_step_is_an_error() {
        let mut s = ThreadState::default();
        let mut writes = vec![
            upd(json!({"sandbox": {"sandbox_id": "a"}})),
            upd(json!({"sandbox": {"sandbox_id": "b"}})),
        ];
        assert!(s.apply_writes(&mut writes).is_err());
        assert_eq!(s, ThreadState::default());
        let mut same = vec![
            upd(json!({"sandbox": {"sandbox_id": "a"}})),
            upd(json!({"sandbox": {"sandbox_id": "a"}})),
        ];
        s.apply_writes(&mut same).unwrap();
        assert_eq!(s.sandbox.unwrap().sandbox_id.as_deref(), Some("a"));
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut s = ThreadState::default();
        s.apply(&mut upd(
            json!({"messages": [{"role": "user", "content": "hi"}],
            "title": "t", "custom_key": {"x": 1}}),
        ))
        .unwrap();
        let v = s.to_value();
        let back: ThreadState = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.to_value(), v);
    }

    #[test]
    fn goal_is_kept_unless_written_and_cleared_by_null() {
        let goal = json!({"objective": "ship it", "status": "active",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            "continuation_count": 0, "max_continuations": 8, "no_progress_count": 0,
            "max_no_progress_continuations": 2, "future_field": [1]});
        let mut s = ThreadState::default();
        s.apply(&mut upd(json!({"goal": goal.clone()}))).unwrap();
        // A write that does not name the goal keeps it.
        s.apply(&mut upd(json!({"title": "t"}))).unwrap();
        assert_eq!(s.goal.as_ref().unwrap().objective, "ship it");
        assert_eq!(s.to_value()["goal"], goal);
        // Round trip (a stored snapshot), unknown goal fields included.
        let back: ThreadState = serde_json::from_value(s.to_value()).unwrap();
        assert_eq!(back, s);
        // A new goal replaces; an explicit null removes it (no `goal` key left).
        s.apply(&mut upd(json!({"goal": {"objective": "other"}})))
            .unwrap();
        let g = s.goal.clone().unwrap();
        assert_eq!(
            (g.objective.as_str(), g.status.as_str()),
            ("other", "active")
        );
        assert!(g.extra.is_empty());
        let mut clear = upd(json!({"goal": null}));
        assert_eq!(clear.to_value(), json!({"goal": null}));
        s.apply(&mut clear).unwrap();
        assert!(s.goal.is_none());
        assert!(s.to_value().get("goal").is_none());
        // Not a goal: refused with the channel named.
        let e = StateUpdate::from_value(json!({"goal": {"status": "active"}})).unwrap_err();
        assert!(e.to_string().starts_with("`goal`:"), "{e}");
        // Merged writes keep the last goal write.
        let mut a = upd(json!({"goal": {"objective": "a"}}));
        a.merge(upd(json!({"goal": null})));
        assert_eq!(a.goal, Some(None));
    }
}
