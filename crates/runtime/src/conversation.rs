//! Conversation operations over a thread's checkpoint chain (DeerFlow's regenerate,
//! edit-and-rerun and branch from a turn): finding the checkpoint a turn can be replayed
//! from, preparing the input and metadata a client then submits as an ordinary run forked
//! from that checkpoint, building a branch thread, and which runs a replay superseded.
//!
//! **Replay base.** A turn is replayed from the nearest ancestor of the thread's latest
//! checkpoint (following parent links, so a sibling branch left by an earlier replay is never
//! picked) that does not hold the turn's human message and has nothing scheduled (`next` is
//! empty). A thread's first turn has no such checkpoint: its `input` checkpoint (the state
//! before the input, only `__start__` scheduled) is used then — a run with new input from it
//! ignores what it had scheduled. A dangling parent link or a cycle is a conflict, never a
//! guess.
//!
//! **Superseded runs.** A replay run carries `metadata.regenerate_from_run_id` (and, for an
//! edit, `replay_kind: "edit"`). The journal keeps every run's rows; the history pages hide
//! the rows of [`hidden_runs`]: the sources of successful replays, the source of an edit
//! whose latest attempt is pending, running or succeeded, and failed edit attempts.
//!
//! **Branch.** A new thread owned by the source's owner, with two checkpoints: the replay
//! base of the target turn (when there is one) and, as its child, the state at the end of
//! that turn — `sandbox` and `thread_data` left out (they name the source thread). Its
//! journal is seeded with that turn's history (one synthetic run per turn,
//! `branch-seed-{thread}-{n}`), and its files are copied from the source (symlinks and
//! unfinished uploads skipped) only when the turn is the latest one: files are not
//! checkpointed, so an older turn would get files from its future.

use crate::error::{Result, RuntimeError};
use crate::journal::{AI_RESPONSE, MESSAGE};
use crate::runtime::Runtime;
use fawn_checkpoint::{
    Checkpoint, EventQuery, HistoryQuery, IfExists, JsonMap, NewCheckpoint, NewRunEvent, NewThread,
    RunStatus, Thread, ThreadSummary,
};
use fawn_middleware::dynamic_context::USER_SUFFIX;
use fawn_middleware::uploads::ORIGINAL_USER_CONTENT_KEY;
use fawn_state::{Message, MessageKind, REMOVE_ALL_MESSAGES, StateUpdate, ThreadState};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Most checkpoints a lineage walk or a branch search reads.
const SCAN_LIMIT: usize = 400;
/// Most recent AI rows searched for the run that wrote a message.
const JOURNAL_SCAN: u64 = 200;
/// Checkpoints read per page while searching a branch point.
const HISTORY_PAGE: u64 = 20;

const NO_BASE: &str = "Could not find an addressable checkpoint before the target user message";
const UNSAFE_LINEAGE: &str =
    "Could not safely resolve the checkpoint before the target user message";
const NO_SOURCE_RUN: &str = "Could not find source run for assistant message";
const NOT_BRANCHABLE: &str = "This turn can no longer be branched from.";
/// Thread metadata marking a branch.
pub const BRANCH_KEY: &str = "deerflow_branch";
/// Thread metadata marking a side conversation (cannot be branched).
const SIDECAR_KEY: &str = "deerflow_sidecar";

/// What a client submits to replay a turn: `input` as the run's input, forked from
/// `checkpoint_id`, with `metadata` as the run's metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    pub input: Value,
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub metadata: JsonMap,
    /// The run whose answer the replay supersedes.
    pub target_run_id: String,
    /// Edits only: the id of the new human message.
    pub replacement_human_message_id: Option<String>,
    /// Edits only: the ids of the replaced turn, human message first.
    pub source_message_ids: Vec<String>,
}

fn flag(m: &Message, key: &str) -> bool {
    m.additional_kwargs.get(key) == Some(&Value::Bool(true))
}

fn hidden(m: &Message) -> bool {
    m.kind == MessageKind::Remove || m.name.as_deref() == Some("summary") || flag(m, "hide_from_ui")
}

fn visible_human(m: &Message) -> bool {
    m.kind == MessageKind::Human && !hidden(m)
}

fn visible_ai(m: &Message) -> bool {
    m.kind.is_ai() && !hidden(m)
}

/// The user's own text: from before the middlewares wrapped it, else the content's.
fn original_text(m: &Message) -> String {
    match m.additional_kwargs.get(ORIGINAL_USER_CONTENT_KEY) {
        Some(Value::String(s)) => s.clone(),
        _ => m.content.text(),
    }
}

fn kwarg_str<'a>(m: &'a Message, key: &str) -> Option<&'a str> {
    m.additional_kwargs
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn text_block(text: &str) -> Value {
    json!([{"type": "text", "text": text}])
}

/// The human message of a regenerated turn as the client sends it again: the user's own
/// text, under the id the client first sent (the dynamic-context id swap undone, so the
/// replay gets its reminder again).
fn replayed_human(m: &Message) -> Value {
    let mut kwargs = m.additional_kwargs.clone();
    kwargs.remove(ORIGINAL_USER_CONTENT_KEY);
    kwargs.remove("hide_from_ui");
    let mut v = Map::new();
    v.insert("type".into(), json!("human"));
    v.insert("content".into(), text_block(&original_text(m)));
    v.insert("additional_kwargs".into(), Value::Object(kwargs));
    if let Some(id) = m.id.as_deref().filter(|s| !s.is_empty()) {
        let id = id
            .strip_suffix(USER_SUFFIX)
            .filter(|s| !s.is_empty())
            .unwrap_or(id);
        v.insert("id".into(), json!(id));
    }
    if let Some(name) = m.name.as_deref().filter(|s| !s.is_empty()) {
        v.insert("name".into(), json!(name));
    }
    Value::Object(v)
}

/// The new human message of an edit: `text` under `id`, keeping only the attachments.
fn edited_human(m: &Message, id: &str, text: &str) -> Value {
    let mut kwargs = Map::new();
    for key in ["files", "referenced_message_contexts"] {
        if let Some(v) = m.additional_kwargs.get(key) {
            kwargs.insert(key.into(), v.clone());
        }
    }
    let mut v = Map::new();
    v.insert("type".into(), json!("human"));
    v.insert("id".into(), json!(id));
    v.insert("content".into(), text_block(text));
    v.insert("additional_kwargs".into(), Value::Object(kwargs));
    if let Some(name) = m.name.as_deref().filter(|s| !s.is_empty()) {
        v.insert("name".into(), json!(name));
    }
    Value::Object(v)
}

fn holds(cp: &Checkpoint, message_id: &str) -> bool {
    cp.state.messages.rfind_id(message_id).is_some()
}

/// An `input` checkpoint: the state before a run's input, only `__start__` scheduled.
fn is_input(cp: &Checkpoint) -> bool {
    cp.metadata.get("source").and_then(Value::as_str) == Some("input")
        && cp.next.len() == 1
        && cp.next[0] == "__start__"
}

async fn latest(rt: &Runtime, thread_id: &str) -> Result<Checkpoint> {
    rt.store
        .get_checkpoint(thread_id, "", None)
        .await
        .map_err(|e| RuntimeError::store("loading the thread's state", e))?
        .ok_or_else(|| RuntimeError::not_found(format!("Thread {thread_id} has no checkpoint")))
}

/// The checkpoint a replay of the turn of `message_id` forks from (see the module docs):
/// `None` when the lineage of `head` ends before one.
pub async fn replay_base(
    rt: &Runtime,
    head: &Checkpoint,
    message_id: &str,
) -> Result<Option<Checkpoint>> {
    let mut seen = HashSet::from([head.checkpoint_id.clone()]);
    let mut parent = head.parent_id.clone();
    let mut input = None;
    for _ in 0..SCAN_LIMIT {
        let Some(id) = parent else {
            return Ok(input);
        };
        if !seen.insert(id.clone()) {
            return Err(RuntimeError::conflict(UNSAFE_LINEAGE));
        }
        let cp = rt
            .store
            .get_checkpoint(&head.thread_id, &head.checkpoint_ns, Some(&id))
            .await
            .map_err(|e| RuntimeError::store("loading a checkpoint", e))?
            .ok_or_else(|| RuntimeError::conflict(UNSAFE_LINEAGE))?;
        parent = cp.parent_id.clone();
        if holds(&cp, message_id) {
            continue;
        }
        if cp.next.is_empty() {
            return Ok(Some(cp));
        }
        if input.is_none() && is_input(&cp) {
            input = Some(cp);
        }
    }
    Err(RuntimeError::conflict(format!(
        "Could not locate target user message in recent checkpoint history (limit={SCAN_LIMIT})"
    )))
}

/// The run that wrote AI message `ai_id`: its journal row, else the run stamped on the
/// turn's human message.
async fn source_run(rt: &Runtime, thread_id: &str, ai_id: &str, human: &Message) -> Result<String> {
    let rows = rt
        .store
        .thread_events(
            thread_id,
            &EventQuery {
                limit: JOURNAL_SCAN,
                category: Some(MESSAGE.to_string()),
                event_types: vec![AI_RESPONSE.to_string()],
                ..Default::default()
            },
        )
        .await
        .map_err(|e| RuntimeError::store("reading the thread's journal", e))?;
    if let Some(row) = rows
        .iter()
        .rev()
        .find(|r| r.content.get("id").and_then(Value::as_str) == Some(ai_id))
    {
        return Ok(row.run_id.clone());
    }
    kwarg_str(human, "run_id")
        .map(str::to_string)
        .ok_or_else(|| RuntimeError::conflict(NO_SOURCE_RUN))
}

/// The run a human message names, when it is a run of this thread that was interrupted
/// (its answer may never have reached a checkpoint).
async fn interrupted_run(rt: &Runtime, thread_id: &str, human: &Message) -> Result<Option<String>> {
    let Some(run_id) = kwarg_str(human, "run_id") else {
        return Ok(None);
    };
    let run = rt
        .store
        .get_run(run_id)
        .await
        .map_err(|e| RuntimeError::store("loading the run", e))?;
    Ok(run
        .filter(|r| r.thread_id == thread_id && r.status == RunStatus::Interrupted)
        .map(|r| r.run_id))
}

fn title(state: &ThreadState) -> Option<&str> {
    state.title.as_deref().filter(|t| !t.is_empty())
}

/// `POST /threads/{id}/runs/regenerate/prepare`: a new answer to the turn of AI message
/// `message_id`, which must be the latest visible one.
pub async fn prepare_regenerate(rt: &Runtime, thread_id: &str, message_id: &str) -> Result<Replay> {
    let head = latest(rt, thread_id).await?;
    let messages: Vec<&Message> = head.state.messages.iter().collect();
    let target = messages
        .iter()
        .position(|m| m.id.as_deref() == Some(message_id));
    let (human, target_run_id) = match target {
        None => {
            // An answer interrupted mid-call may never reach a checkpoint: the latest turn's
            // run, when it was interrupted, is the one regenerated.
            let human = messages.iter().rev().find(|m| visible_human(m));
            let run = match human {
                Some(h) => interrupted_run(rt, thread_id, h).await?,
                None => None,
            };
            match (human, run) {
                (Some(h), Some(run)) => (*h, run),
                _ => {
                    return Err(RuntimeError::not_found(format!(
                        "Message {message_id} not found"
                    )));
                }
            }
        }
        Some(i) => {
            if !visible_ai(messages[i]) {
                return Err(RuntimeError::conflict(
                    "Only visible assistant messages can be regenerated",
                ));
            }
            let latest_ai = messages.iter().rev().find(|m| visible_ai(m));
            if latest_ai.and_then(|m| m.id.as_deref()) != Some(message_id) {
                return Err(RuntimeError::conflict(
                    "Only the latest assistant message can be regenerated",
                ));
            }
            let human = messages[..i]
                .iter()
                .rev()
                .find(|m| visible_human(m))
                .ok_or_else(|| {
                    RuntimeError::conflict(
                        "Could not find the user message for this assistant response",
                    )
                })?;
            (*human, source_run(rt, thread_id, message_id, human).await?)
        }
    };
    let human_id = human
        .id
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| RuntimeError::conflict("The source user message is missing an id"))?;
    let base = replay_base(rt, &head, human_id)
        .await?
        .ok_or_else(|| RuntimeError::conflict(NO_BASE))?;
    let mut metadata = Map::new();
    metadata.insert("regenerate_from_message_id".into(), json!(message_id));
    metadata.insert("regenerate_from_run_id".into(), json!(target_run_id));
    metadata.insert("regenerate_checkpoint_id".into(), json!(base.checkpoint_id));
    let mut input = Map::new();
    input.insert("messages".into(), json!([replayed_human(human)]));
    // The base may predate a rename: the current title goes with the input.
    if let Some(t) = title(&head.state) {
        input.insert("title".into(), json!(t));
    }
    Ok(Replay {
        input: Value::Object(input),
        checkpoint_ns: base.checkpoint_ns,
        checkpoint_id: base.checkpoint_id,
        metadata,
        target_run_id,
        replacement_human_message_id: None,
        source_message_ids: Vec::new(),
    })
}

/// `POST /threads/{id}/runs/edit-regenerate/prepare`: the latest completed turn asked again
/// with `replacement_text` as the human message (a new id).
pub async fn prepare_edit(
    rt: &Runtime,
    thread_id: &str,
    human_message_id: &str,
    replacement_text: &str,
) -> Result<Replay> {
    let text = replacement_text.trim();
    if text.is_empty() {
        return Err(RuntimeError::conflict("Edited message cannot be empty"));
    }
    let head = latest(rt, thread_id).await?;
    if head
        .state
        .goal
        .as_ref()
        .is_some_and(|g| g.status == "active")
    {
        return Err(RuntimeError::conflict("Cannot edit while a goal is active"));
    }
    let messages: Vec<&Message> = head.state.messages.iter().collect();
    let hi = messages
        .iter()
        .rposition(|m| visible_human(m))
        .filter(|&i| messages[i].id.as_deref() == Some(human_message_id))
        .ok_or_else(|| {
            RuntimeError::conflict("Only the latest completed user turn can be edited")
        })?;
    let ai = messages[hi + 1..]
        .iter()
        .rposition(|m| visible_ai(m))
        .map(|i| hi + 1 + i)
        .filter(|&i| {
            let m = messages[i];
            !m.content.text().trim().is_empty() && m.tool_calls.is_empty()
        })
        .ok_or_else(|| {
            RuntimeError::conflict("Only completed assistant text turns can be edited")
        })?;
    let (human, answer) = (messages[hi], messages[ai]);
    if original_text(human).trim() == text {
        return Err(RuntimeError::conflict("Edited message is unchanged"));
    }
    let answer_id = answer
        .id
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| RuntimeError::conflict("The source assistant message is missing an id"))?;
    let source_message_ids: Vec<String> = messages[hi..=ai]
        .iter()
        .filter_map(|m| m.id.clone().filter(|s| !s.is_empty()))
        .collect();
    let base = replay_base(rt, &head, human_message_id)
        .await?
        .ok_or_else(|| RuntimeError::conflict(NO_BASE))?;
    let target_run_id = source_run(rt, thread_id, answer_id, human).await?;
    let source = rt
        .store
        .get_run(&target_run_id)
        .await
        .map_err(|e| RuntimeError::store("loading the run", e))?
        .filter(|r| r.thread_id == thread_id)
        .ok_or_else(|| RuntimeError::conflict(NO_SOURCE_RUN))?;
    if source.status != RunStatus::Success {
        return Err(RuntimeError::conflict(
            "Only successful assistant runs can be edited and rerun",
        ));
    }
    let replacement = uuid::Uuid::new_v4().to_string();
    let group = source
        .metadata
        .get("edit_version_group_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(human_message_id);
    let mut metadata = Map::new();
    metadata.insert("replay_kind".into(), json!("edit"));
    metadata.insert("regenerate_from_message_id".into(), json!(answer_id));
    metadata.insert("regenerate_from_run_id".into(), json!(target_run_id));
    metadata.insert("regenerate_checkpoint_id".into(), json!(base.checkpoint_id));
    metadata.insert("edit_from_message_id".into(), json!(human_message_id));
    metadata.insert("edit_message_id".into(), json!(replacement));
    metadata.insert("edit_version_group_id".into(), json!(group));
    let mut input = Map::new();
    input.insert(
        "messages".into(),
        json!([edited_human(human, &replacement, text)]),
    );
    // A renamed thread keeps its name; an untitled base lets the edited turn name it.
    if title(&base.state).is_some()
        && let Some(t) = title(&head.state)
    {
        input.insert("title".into(), json!(t));
    }
    Ok(Replay {
        input: Value::Object(input),
        checkpoint_ns: base.checkpoint_ns,
        checkpoint_id: base.checkpoint_id,
        metadata,
        target_run_id,
        replacement_human_message_id: Some(replacement),
        source_message_ids,
    })
}

/// The runs of a thread whose journal rows the history pages hide (see the module docs).
pub async fn hidden_runs(rt: &Runtime, thread_id: &str) -> Result<HashSet<String>> {
    let runs = rt
        .store
        .replay_runs(thread_id)
        .await
        .map_err(|e| RuntimeError::store("listing the thread's runs", e))?;
    let mut hidden = HashSet::new();
    let mut latest_edit: HashMap<&str, RunStatus> = HashMap::new();
    for r in &runs {
        let Some(source) = r
            .metadata
            .get("regenerate_from_run_id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        if r.status == RunStatus::Success {
            hidden.insert(source.to_string());
        }
        if r.metadata.get("replay_kind").and_then(Value::as_str) == Some("edit") {
            latest_edit.insert(source, r.status);
            if matches!(
                r.status,
                RunStatus::Error | RunStatus::Timeout | RunStatus::Interrupted
            ) {
                hidden.insert(r.run_id.clone());
            }
        }
    }
    for (source, status) in latest_edit {
        if matches!(
            status,
            RunStatus::Pending | RunStatus::Running | RunStatus::Success
        ) {
            hidden.insert(source.to_string());
        }
    }
    Ok(hidden)
}

/// `POST /threads/{id}/branches`.
#[derive(Clone, Debug, Default)]
pub struct BranchRequest {
    /// The assistant message the branch ends with.
    pub message_id: String,
    /// Every assistant message of that turn.
    pub message_ids: Vec<String>,
    pub title: Option<String>,
}

/// A branch created.
#[derive(Clone, Debug)]
pub struct Branched {
    pub thread: Thread,
    /// The source checkpoint at the end of the turn.
    pub parent_checkpoint_id: String,
    /// `current_thread_best_effort`, `not_found`, `failed` or `skipped_historical_turn`.
    pub workspace_clone_mode: &'static str,
    /// `seeded`, `skipped_empty` or `failed`.
    pub history_seed_mode: &'static str,
}

/// The state ends with the target turn: every target is an AI message in it and no visible
/// human or AI message follows them.
fn ends_with_turn(state: &ThreadState, targets: &HashSet<&str>) -> bool {
    let mut last = None;
    for id in targets {
        match state.messages.rfind_id(id) {
            Some(i) if state.messages.get(i).is_some_and(|m| m.kind.is_ai()) => {
                last = last.max(Some(i));
            }
            _ => return false,
        }
    }
    let Some(last) = last else {
        return false;
    };
    !state
        .messages
        .range(last + 1..)
        .any(|m| (m.kind == MessageKind::Human || m.kind.is_ai()) && !flag(m, "hide_from_ui"))
}

/// The human message that opened the turn of `targets` in `state`.
fn turn_human<'a>(state: &'a ThreadState, targets: &HashSet<&str>) -> Option<&'a Message> {
    let first = targets
        .iter()
        .filter_map(|id| state.messages.rfind_id(id))
        .min()?;
    state
        .messages
        .range(..first)
        .rev()
        .find(|m| m.kind == MessageKind::Human && !flag(m, "hide_from_ui"))
}

/// `state` as a branch starts it: without the channels that name the source thread.
fn branch_state(state: &ThreadState) -> ThreadState {
    let mut s = state.clone();
    s.sandbox = None;
    s.thread_data = None;
    s
}

/// A write that turns `from` into `to`, when one exists (checked by applying it).
fn overwrite(from: &ThreadState, to: &ThreadState) -> Option<StateUpdate> {
    let mut u = to.to_update();
    let mut messages = vec![Message::remove(REMOVE_ALL_MESSAGES)];
    messages.extend(u.messages.take().unwrap_or_default());
    u.messages = Some(messages);
    if from.title.is_some() && to.title.is_none() {
        u.title = Some(None);
    }
    if from.uploaded_files.is_some() && to.uploaded_files.is_none() {
        u.uploaded_files = Some(None);
    }
    if from.summary_text.is_some() && to.summary_text.is_none() {
        u.summary_text = Some(None);
    }
    if from.goal.is_some() && to.goal.is_none() {
        u.goal = Some(None);
    }
    let mut check = from.clone();
    let mut writes = vec![u];
    check.apply_writes(&mut writes).ok()?;
    (check == *to).then(|| writes.pop()).flatten()
}

/// A snapshot of `state` as one write from an empty state.
fn snapshot(state: &ThreadState) -> StateUpdate {
    state.to_update()
}

/// Where the branch point is: the newest checkpoint (any branch of the source's history)
/// that ends with the target turn, and whether it is also the latest turn of the thread.
async fn find_turn(
    rt: &Runtime,
    thread_id: &str,
    targets: &HashSet<&str>,
) -> Result<(Checkpoint, bool)> {
    let mut before = None;
    let mut latest_matches = None;
    let mut scanned = 0;
    while scanned < SCAN_LIMIT {
        let page = rt
            .store
            .list_checkpoints(
                thread_id,
                &HistoryQuery {
                    checkpoint_ns: String::new(),
                    limit: HISTORY_PAGE,
                    before: before.clone(),
                    metadata: None,
                },
            )
            .await
            .map_err(|e| RuntimeError::store("reading the thread's history", e))?;
        let Some(last) = page.last() else {
            break;
        };
        before = Some(last.checkpoint_id.clone());
        for cp in page {
            scanned += 1;
            let matches = ends_with_turn(&cp.state, targets);
            if latest_matches.is_none() && !cp.state.messages.is_empty() {
                latest_matches = Some(matches);
            }
            if matches {
                return Ok((cp, latest_matches == Some(true)));
            }
        }
    }
    Err(RuntimeError::conflict(NOT_BRANCHABLE))
}

/// Creates a branch of `source` ending with the turn of `req.message_id` (see the module
/// docs). The caller has checked that it may read `source`.
pub async fn branch(rt: &Runtime, source: &Thread, req: BranchRequest) -> Result<Branched> {
    if source.metadata.get(SIDECAR_KEY) == Some(&Value::Bool(true)) {
        return Err(RuntimeError::conflict(
            "Branching is only available in the main conversation.",
        ));
    }
    let mut targets: HashSet<&str> = req.message_ids.iter().map(String::as_str).collect();
    targets.insert(req.message_id.as_str());
    let (snapshot_cp, from_latest) = find_turn(rt, &source.thread_id, &targets).await?;
    let human_id = turn_human(&snapshot_cp.state, &targets)
        .and_then(|m| m.id.clone())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| RuntimeError::conflict(NOT_BRANCHABLE))?;
    let base = match replay_base(rt, &snapshot_cp, &human_id).await {
        Ok(b) => b,
        Err(RuntimeError::Conflict(_)) => return Err(RuntimeError::conflict(NOT_BRANCHABLE)),
        Err(e) => return Err(e),
    };

    let new_id = uuid::Uuid::now_v7().to_string();
    let now = chrono::Utc::now();
    let mut branch_meta = Map::new();
    branch_meta.insert(BRANCH_KEY.into(), json!(true));
    branch_meta.insert("branch_parent_thread_id".into(), json!(source.thread_id));
    branch_meta.insert(
        "branch_parent_checkpoint_id".into(),
        json!(snapshot_cp.checkpoint_id),
    );
    branch_meta.insert("branch_parent_message_id".into(), json!(req.message_id));
    branch_meta.insert(
        "branch_created_at".into(),
        json!(now.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
    );
    let mut metadata = branch_meta.clone();
    for key in [crate::create::OWNER_KEY, "graph_id", "assistant_id"] {
        if let Some(v) = source.metadata.get(key) {
            metadata.insert(key.into(), v.clone());
        }
    }

    // The branch's name: the one asked for, else the source's (without "Branch:" prefixes
    // when the source is itself a branch).
    let source_title = source
        .values
        .as_ref()
        .and_then(|v| v.get("title"))
        .and_then(Value::as_str);
    let display = req
        .title
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .or_else(|| {
            let mut t = source_title?.trim();
            if source.metadata.get(BRANCH_KEY) == Some(&Value::Bool(true)) {
                while t.len() >= 7 && t[..7].eq_ignore_ascii_case("branch:") {
                    t = t[7..].trim_start();
                }
            }
            (!t.is_empty()).then(|| t.to_string())
        });

    let base_state = base.as_ref().map(|b| branch_state(&b.state));
    let mut head_state = branch_state(&snapshot_cp.state);
    if let Some(t) = &display {
        head_state.title = Some(t.clone());
    }
    let cp_meta = |step: i64| {
        let mut m = crate::checkpoints::metadata(
            &crate::checkpoints::update_base_metadata(&metadata),
            "update",
            step,
        );
        m.extend(branch_meta.clone());
        m
    };
    let new_cp = |state: ThreadState, write: StateUpdate, step: i64| NewCheckpoint {
        thread_id: new_id.clone(),
        checkpoint_ns: String::new(),
        parent_id: None,
        run_id: None,
        metadata: cp_meta(step),
        writes: vec![("branch".to_string(), write)],
        state: Arc::new(state),
        next: Vec::new(),
        tasks: Vec::new(),
    };
    let chain = match base_state
        .as_ref()
        .and_then(|b| overwrite(b, &head_state).map(|w| (b, w)))
    {
        Some((b, w)) => vec![
            new_cp(b.clone(), snapshot(b), -1),
            new_cp(head_state.clone(), w, 0),
        ],
        None => {
            if base_state.is_some() {
                tracing::warn!(thread_id = %new_id, "a branch's base state does not lead to its head; writing the head alone");
            }
            vec![new_cp(head_state.clone(), snapshot(&head_state), -1)]
        }
    };

    rt.store
        .create_thread(NewThread {
            thread_id: Some(new_id.clone()),
            metadata,
            if_exists: IfExists::Raise,
            ttl: None,
        })
        .await
        .map_err(|e| RuntimeError::store("creating the branch", e))?;
    let written = async {
        rt.store.put_checkpoints(chain).await?;
        rt.store
            .set_thread_summary(
                &new_id,
                ThreadSummary {
                    values: Some(serde_json::to_value(&head_state).unwrap_or(Value::Null)),
                    interrupts: Map::new(),
                    has_next: false,
                    error: None,
                    metadata: Map::new(),
                    config: None,
                },
            )
            .await
    }
    .await;
    let thread = match written {
        Ok(t) => t,
        Err(e) => {
            if let Err(d) = rt.store.delete_thread(&new_id).await {
                tracing::error!(thread_id = %new_id, error = %d, "a branch whose state failed was not deleted");
            }
            return Err(RuntimeError::store("writing the branch's state", e));
        }
    };

    let history_seed_mode = seed_journal(rt, &new_id, &source.thread_id, &head_state).await;
    let workspace_clone_mode = if from_latest {
        copy_files(rt, &source.thread_id, &new_id).await
    } else {
        "skipped_historical_turn"
    };
    Ok(Branched {
        thread,
        parent_checkpoint_id: snapshot_cp.checkpoint_id,
        workspace_clone_mode,
        history_seed_mode,
    })
}

/// Seeds the branch's journal with its inherited history, one synthetic run per turn, in
/// one append. Never fails the branch.
async fn seed_journal(
    rt: &Runtime,
    thread_id: &str,
    parent: &str,
    state: &ThreadState,
) -> &'static str {
    let prefix = format!("branch-seed-{thread_id}");
    let rows: Vec<(String, NewRunEvent)> = crate::journal::Start::of(state)
        .seed(chrono::Utc::now())
        .into_iter()
        .map(|(run, mut row)| {
            let n = run.rsplit('-').next().unwrap_or("0").to_string();
            row.metadata.remove("seeded_from");
            row.metadata.insert("branch_seed".into(), json!(true));
            row.metadata
                .insert("branch_parent_thread_id".into(), json!(parent));
            (format!("{prefix}-{n}"), row)
        })
        .collect();
    let Some((last_run, _)) = rows.last() else {
        return "skipped_empty";
    };
    let last_run = last_run.clone();
    // The last turn goes in as the append's run; the earlier ones as its seed (the journal
    // is empty), so the whole history is one transaction.
    let split = rows.iter().position(|(r, _)| *r == last_run).unwrap_or(0);
    let (earlier, last) = rows.split_at(split);
    let earlier = earlier.to_vec();
    let seed = move || earlier.clone();
    let seed: &(dyn Fn() -> Vec<(String, NewRunEvent)> + Send + Sync) = &seed;
    let last: Vec<NewRunEvent> = last.iter().map(|(_, e)| e.clone()).collect();
    match rt
        .store
        .append_run_events_seeded(thread_id, &last_run, last, Some(seed))
        .await
    {
        Ok(_) => "seeded",
        Err(e) => {
            tracing::warn!(%thread_id, error = %e, "seeding a branch's journal failed");
            "failed"
        }
    }
}

/// Copies the source thread's files into the branch's (best effort): through
/// [`fawn_sandbox::host_fs::copy_tree`], so symlinks are skipped, never followed; unfinished
/// uploads (`.upload-*.part`) are skipped too.
async fn copy_files(rt: &Runtime, from: &str, to: &str) -> &'static str {
    use fawn_sandbox::host_fs::{self, FsError};
    if !fawn_sandbox::valid_thread_id(from) || !fawn_sandbox::valid_thread_id(to) {
        return "failed";
    }
    let src = fawn_sandbox::ThreadPaths::new(&rt.settings.home, &rt.user_id, from).user_data;
    let dst = fawn_sandbox::ThreadPaths::new(&rt.settings.home, &rt.user_id, to).user_data;
    let copied = host_fs::blocking(move || {
        host_fs::copy_tree(&src, &dst, |name| {
            let text = name.to_string_lossy();
            text.starts_with(".upload-") && text.ends_with(".part")
        })
    })
    .await;
    match copied {
        Ok(()) => "current_thread_best_effort",
        Err(FsError::NotFound | FsError::NotDir) => "not_found",
        Err(e) => {
            tracing::warn!(from, to, error = %e, "copying a branch's files failed");
            "failed"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(mut m: Message, id: &str) -> Message {
        m.id = Some(id.into());
        m
    }

    #[test]
    fn replayed_human_keeps_the_users_text_and_first_id() {
        let mut h = msg(
            Message::human("<uploaded_files>x</uploaded_files>\n\nhi"),
            "h1__user",
        )
        .with_name("user-input");
        h.additional_kwargs
            .insert(ORIGINAL_USER_CONTENT_KEY.into(), json!("hi"));
        h.additional_kwargs
            .insert("hide_from_ui".into(), json!(false));
        h.additional_kwargs
            .insert("files".into(), json!([{"filename": "a"}]));
        let v = replayed_human(&h);
        assert_eq!(
            v,
            json!({"type": "human", "content": [{"type": "text", "text": "hi"}],
                   "additional_kwargs": {"files": [{"filename": "a"}]},
                   "id": "h1", "name": "user-input"})
        );
        let e = edited_human(&h, "new", "edited");
        assert_eq!(
            e["additional_kwargs"],
            json!({"files": [{"filename": "a"}]})
        );
        assert_eq!(e["id"], "new");
        assert_eq!(e["content"][0]["text"], "edited");
    }

    #[test]
    fn overwrite_reproduces_the_head() {
        let mut base = ThreadState::default();
        base.apply(&mut StateUpdate::messages(vec![
            msg(Message::human("q1"), "h1"),
            msg(Message::ai("a1"), "a1"),
        ]))
        .unwrap();
        base.title = Some("old".into());
        let mut head = ThreadState::default();
        head.apply(&mut StateUpdate::messages(vec![
            msg(Message::ai("a1"), "a1"),
            msg(Message::human("q2"), "h2"),
            msg(Message::ai("a2"), "a2"),
        ]))
        .unwrap();
        let w = overwrite(&base, &head).unwrap();
        let mut check = base.clone();
        check.apply(&mut w.clone()).unwrap();
        assert_eq!(check, head);
    }

    #[test]
    fn a_turn_ends_the_state() {
        let mut s = ThreadState::default();
        let mut hidden = Message::ai("hidden");
        hidden
            .additional_kwargs
            .insert("hide_from_ui".into(), json!(true));
        s.apply(&mut StateUpdate::messages(vec![
            msg(Message::human("q1"), "h1"),
            msg(Message::ai("a1"), "a1"),
            msg(hidden, "x"),
            msg(Message::human("q2"), "h2"),
            msg(Message::ai("a2"), "a2"),
        ]))
        .unwrap();
        let t = |ids: &[&'static str]| ids.iter().copied().collect::<HashSet<&str>>();
        assert!(ends_with_turn(&s, &t(&["a2"])));
        assert!(!ends_with_turn(&s, &t(&["a1"])));
        assert!(!ends_with_turn(&s, &t(&["h2"])));
        assert!(!ends_with_turn(&s, &t(&["a2", "nope"])));
        assert_eq!(
            turn_human(&s, &t(&["a2"])).and_then(|m| m.id.as_deref()),
            Some("h2")
        );
    }
}
