//! The run-event journal writer: when a run ends, the messages it added to its thread
//! (those of its final state whose ids the state it started from did not have, the human
//! input included) are appended as DeerFlow's message events in the store call that writes
//! the run's status, ahead of it (one transaction on SQLite), so a client that sees the run
//! finished finds its journal.
//!
//! Nothing is written per token or per step. Rows are never rewritten: a message the run
//! replaced in place (same id) or a summarization that removes old messages leaves earlier
//! rows as they are. System messages, removals, the `summary` message and hidden human
//! messages (reminders) are not history and are skipped. The first run of a thread whose
//! history predates the journal seeds it with that history (one synthetic run per turn,
//! `checkpoint-{n}`), so its page does not lose it. The run's last AI message
//! carries `turn_duration` (whole seconds from the run's creation to its end) in its
//! metadata.
//!
//! A run recovered after a lost lease continues from its last checkpoint, so only what it
//! adds from there on is journaled.
//!
//! Rows that are not messages come from the run itself through
//! [`fawn_state::EventSink::journal`] (kept in memory by its observer) and follow the
//! run's message rows in the same append: `subagent.start` / `subagent.step` /
//! `subagent.end` (category `subagent`, from the `task` tool) and `workspace_changes`
//! (category `workspace`, from the lead agent's workspace snapshot).

use crate::runtime::RuntimeHandle;
use chrono::{DateTime, Utc};
use fawn_checkpoint::{JournalAppend, NewRunEvent, Run, RunFinish};
use fawn_state::{Message, MessageKind, Messages, ThreadState};
use serde_json::{Map, Value, json};
use std::collections::HashSet;

/// DeerFlow's event types for conversation rows.
pub const HUMAN_INPUT: &str = "llm.human.input";
pub const AI_RESPONSE: &str = "llm.ai.response";
pub const TOOL_RESULT: &str = "llm.tool.result";
/// The category of conversation rows.
pub const MESSAGE: &str = "message";
/// The caller every lead-agent row carries.
pub const LEAD_AGENT: &str = "lead_agent";

/// What a run starts from: its messages (a cheap clone) and their ids.
pub struct Start {
    ids: HashSet<String>,
    messages: Messages,
}

impl Start {
    pub fn of(state: &ThreadState) -> Start {
        Start {
            ids: message_ids(state),
            messages: state.messages.clone(),
        }
    }

    /// The rows of a thread whose history predates the journal: its messages, one
    /// synthetic run (`checkpoint-{n}`) per human turn. Only built when the thread has no
    /// journal rows yet.
    pub fn seed(&self, at: DateTime<Utc>) -> Vec<(String, NewRunEvent)> {
        let mut turn = 0;
        self.messages
            .iter()
            .filter_map(|m| {
                if m.kind == MessageKind::Human && event_type(m).is_some() {
                    turn += 1;
                }
                let mut row = row(m, at)?;
                row.metadata
                    .insert("seeded_from".into(), json!("checkpoint"));
                Some((format!("checkpoint-{turn}"), row))
            })
            .collect()
    }
}

/// The ids of the messages a run starts from.
pub fn message_ids(state: &ThreadState) -> HashSet<String> {
    state.messages.iter().filter_map(|m| m.id.clone()).collect()
}

/// The summary and hidden human messages (reminders) are not history. Hidden AI and tool
/// messages are kept, as DeerFlow does: its UI hides them itself.
fn hidden(m: &Message) -> bool {
    m.name.as_deref() == Some("summary")
        || (m.kind == MessageKind::Human
            && m.additional_kwargs.get("hide_from_ui") == Some(&Value::Bool(true)))
}

fn row(m: &Message, created_at: DateTime<Utc>) -> Option<NewRunEvent> {
    let event_type = event_type(m)?;
    let content = serde_json::to_value(m).ok()?;
    let mut metadata = Map::new();
    metadata.insert("caller".into(), json!(LEAD_AGENT));
    Some(NewRunEvent {
        event_type: event_type.to_string(),
        category: MESSAGE.to_string(),
        content,
        metadata,
        created_at,
    })
}

fn event_type(m: &Message) -> Option<&'static str> {
    if hidden(m) {
        return None;
    }
    match m.kind {
        MessageKind::Human => Some(HUMAN_INPUT),
        MessageKind::Ai | MessageKind::AiChunk => Some(AI_RESPONSE),
        MessageKind::Tool => Some(TOOL_RESULT),
        _ => None,
    }
}

/// The rows of the messages in `end` that are not in `start`, oldest first.
pub fn new_rows(
    start: &HashSet<String>,
    end: &ThreadState,
    started_at: DateTime<Utc>,
    ended_at: DateTime<Utc>,
    run_created_at: DateTime<Utc>,
) -> Vec<NewRunEvent> {
    let mut rows: Vec<NewRunEvent> = end
        .messages
        .iter()
        .filter(|m| m.id.as_ref().is_some_and(|id| !start.contains(id)))
        .filter_map(|m| {
            let at = if m.kind == MessageKind::Human {
                started_at
            } else {
                ended_at
            };
            row(m, at)
        })
        .collect();
    if let Some(last_ai) = rows.iter_mut().rev().find(|r| r.event_type == AI_RESPONSE) {
        let seconds = (ended_at - run_created_at).num_seconds().max(0);
        last_ai
            .metadata
            .insert("turn_duration".into(), json!(seconds));
    }
    rows
}

/// What a run leaves in the journal, written with its end by [`finish`].
pub struct Entry<'a> {
    /// What the run started from.
    pub start: &'a Start,
    /// Its final state.
    pub end: &'a ThreadState,
    pub started_at: DateTime<Utc>,
    /// The other rows the run produced (subagent steps, workspace changes), in the order
    /// it produced them.
    pub extra: Vec<NewRunEvent>,
}

/// Records the end of a run this worker owns together with what it added to the journal
/// (see the module docs), then `entry.extra`, in one store call (one transaction on SQLite).
/// Journal failures are logged: the journal never fails a run. Returns what
/// [`fawn_checkpoint::RunStore::finish_run`] would.
pub async fn finish(
    rt: &RuntimeHandle,
    run: &Run,
    outcome: RunFinish,
    entry: Option<Entry<'_>>,
) -> fawn_checkpoint::Result<Run> {
    let mut rows = Vec::new();
    let mut start = None;
    if let Some(e) = entry {
        rows = new_rows(
            &e.start.ids,
            e.end,
            e.started_at,
            Utc::now(),
            run.created_at,
        );
        rows.extend(e.extra);
        start = Some((e.start, e.started_at));
    }
    let seed = || start.map(|(start, at)| start.seed(at)).unwrap_or_default();
    // Only a run that starts from messages can have history to seed.
    let seed: Option<&(dyn Fn() -> Vec<(String, NewRunEvent)> + Send + Sync)> = start
        .is_some_and(|(start, _)| !start.messages.is_empty())
        .then_some(&seed);
    let journal = (!rows.is_empty()).then(|| JournalAppend {
        thread_id: &run.thread_id,
        run_id: &run.run_id,
        events: rows,
        seed,
    });
    let ended = rt
        .store
        .finish_run_with_journal(&run.run_id, &rt.queue.worker_id, outcome, journal)
        .await;
    if let Err(e) = &ended.journal {
        tracing::warn!(run_id = %run.run_id, error = %e, "writing the run's journal failed");
    }
    ended.run
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_state::StateUpdate;

    fn msg(mut m: Message, id: &str) -> Message {
        m.id = Some(id.into());
        m
    }

    #[test]
    fn only_new_visible_messages_and_duration_on_the_last_ai() {
        let mut start = ThreadState::default();
        start
            .apply(&mut StateUpdate::messages(vec![
                msg(Message::human("old"), "h0"),
                msg(Message::ai("old answer"), "a0"),
            ]))
            .unwrap();
        let begin = Start::of(&start);
        let seeded = begin.seed(Utc::now());
        let seeded_runs: Vec<&str> = seeded.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(seeded_runs, vec!["checkpoint-1", "checkpoint-1"]);
        assert_eq!(seeded[1].1.event_type, AI_RESPONSE);
        let ids = message_ids(&start);
        assert_eq!(ids.len(), 2);
        let mut end = start.clone();
        let mut hidden = Message::human("reminder");
        hidden
            .additional_kwargs
            .insert("hide_from_ui".into(), json!(true));
        end.apply(&mut StateUpdate::messages(vec![
            msg(Message::human("question"), "h1"),
            msg(Message::ai("calling"), "a1"),
            msg(Message::tool("result", "call1", Some("ls".into())), "t1"),
            msg(hidden, "x1"),
            msg(Message::system("sys"), "s1"),
            msg(Message::ai("answer"), "a2"),
        ]))
        .unwrap();
        let t0 = Utc::now();
        let t1 = t0 + chrono::Duration::seconds(3);
        let created = t0 - chrono::Duration::seconds(1);
        let rows = new_rows(&ids, &end, t0, t1, created);
        let kinds: Vec<&str> = rows.iter().map(|r| r.event_type.as_str()).collect();
        assert_eq!(
            kinds,
            vec![HUMAN_INPUT, AI_RESPONSE, TOOL_RESULT, AI_RESPONSE]
        );
        let ids: Vec<&str> = rows
            .iter()
            .map(|r| r.content["id"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(ids, vec!["h1", "a1", "t1", "a2"]);
        assert!(rows.iter().all(|r| r.metadata["caller"] == LEAD_AGENT));
        assert_eq!(rows[0].created_at, t0);
        assert_eq!(rows[3].created_at, t1);
        assert_eq!(rows[3].metadata.get("turn_duration"), Some(&json!(4)));
        assert!(
            rows[..3]
                .iter()
                .all(|r| !r.metadata.contains_key("turn_duration"))
        );
    }
}
