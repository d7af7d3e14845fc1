//! Thread goals (DeerFlow's `/goal`): the `goal` channel of a thread's state, set and
//! cleared as checkpoints of the writer `goal`, and the hidden continuation turns of a run
//! on a thread with an active goal.
//!
//! When such a run's graph finishes (successfully, not paused, not cancelled), an evaluator
//! — the run's model, thinking off — reads the visible conversation and answers whether the
//! goal is met. Its verdict is stored on the goal (`last_evaluation`) by a checkpoint of the
//! writer `goal_evaluator` in the run's own chain. Satisfied: the goal is removed. Not yet
//! met (`blocker: goal_not_met_yet`) with continuations left and progress being made: a
//! hidden human message (`<goal_continuation>`, `hide_from_ui`) is sent and the graph runs
//! again, in the same run and stream. Anything else (another blocker, `max_continuations`
//! reached, `max_no_progress_continuations` turns without new visible assistant output, no
//! assistant reply to judge) stands down with the reason recorded. An evaluator that fails
//! or answers nonsense ends the loop without touching the goal.
//!
//! The thread is busy for the whole run, so the goal routes (409 while busy) cannot race the
//! loop. A turn is judged only once its checkpoints are stored: under `durability: exit` a
//! goal run writes them turn by turn instead of all at the end.

use crate::error::{Result, RuntimeError};
use crate::observer::Observer;
use crate::runtime::Runtime;
use fawn_agent::{CheckpointSource, RunObserver, RunOutcome, RunSpec, StartPoint, StepCheckpoint};
use fawn_checkpoint::{Thread, ThreadStatus};
use fawn_llm::ChatRequest;
use fawn_state::{GoalState, Message, MessageKind, StateUpdate};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Writer of the goal routes' checkpoints.
pub const NODE: &str = "goal";
/// Writer of the evaluator's checkpoints.
pub const EVALUATOR_NODE: &str = "goal_evaluator";
pub const DEFAULT_MAX_CONTINUATIONS: u32 = 8;
pub const DEFAULT_MAX_NO_PROGRESS: u32 = 2;
pub const MAX_OBJECTIVE_CHARS: usize = 4000;
const MAX_REASON_CHARS: usize = 1000;
const MAX_CONVERSATION_CHARS: usize = 12_000;
const MAX_CONVERSATION_MESSAGES: usize = 30;
/// The only blocker that lets the loop go on.
const CONTINUABLE: &str = "goal_not_met_yet";
const BLOCKERS: &[&str] = &[
    "none",
    "missing_evidence",
    "needs_user_input",
    "run_failed",
    "external_wait",
    CONTINUABLE,
];

/// The objective with its whitespace collapsed; empty or longer than
/// [`MAX_OBJECTIVE_CHARS`] characters is an error.
pub fn normalize_objective(raw: &str) -> std::result::Result<String, String> {
    let text = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        return Err("Goal objective must not be empty.".into());
    }
    if text.chars().count() > MAX_OBJECTIVE_CHARS {
        return Err(format!(
            "Goal objective must be at most {MAX_OBJECTIVE_CHARS} characters."
        ));
    }
    Ok(text)
}

/// A fresh active goal (`max_continuations` capped at [`DEFAULT_MAX_CONTINUATIONS`]).
pub fn new_goal(
    objective: &str,
    max_continuations: u32,
    now: &str,
) -> std::result::Result<GoalState, String> {
    Ok(GoalState {
        objective: normalize_objective(objective)?,
        status: "active".into(),
        created_at: now.to_string(),
        updated_at: now.to_string(),
        continuation_count: 0,
        max_continuations: max_continuations.min(DEFAULT_MAX_CONTINUATIONS),
        no_progress_count: 0,
        max_no_progress_continuations: DEFAULT_MAX_NO_PROGRESS,
        last_evaluation: None,
        extra: Map::new(),
    })
}

/// The goal in the thread's latest state.
pub async fn read_goal(rt: &Runtime, thread_id: &str) -> Result<Option<GoalState>> {
    Ok(rt
        .store
        .get_checkpoint(thread_id, "", None)
        .await
        .map_err(|e| RuntimeError::store("loading the state", e))?
        .and_then(|cp| cp.state.goal.clone()))
}

fn refuse_busy(thread: &Thread, what: &str) -> Result<()> {
    if thread.status == ThreadStatus::Busy {
        return Err(RuntimeError::conflict(format!(
            "Thread has a run in flight. {what} after the run finishes."
        )));
    }
    Ok(())
}

/// Sets (or replaces) the thread's goal; a thread with a run pending or in flight is a
/// conflict.
pub async fn set_goal(rt: &Runtime, thread: &Thread, goal: GoalState) -> Result<()> {
    refuse_busy(thread, "Set the goal")?;
    let base = crate::threads::head(rt, &thread.thread_id).await?;
    let update = StateUpdate {
        goal: Some(Some(goal)),
        ..Default::default()
    };
    let expected = base.as_ref().map(|c| c.checkpoint_id.as_str());
    crate::threads::write_runtime_update(rt, thread, NODE, update, expected).await?;
    Ok(())
}

/// Removes the thread's goal (nothing is written when there is none); a thread with a run
/// pending or in flight is a conflict.
pub async fn clear_goal(rt: &Runtime, thread: &Thread) -> Result<()> {
    refuse_busy(thread, "Clear the goal")?;
    let Some(cp) = crate::threads::head(rt, &thread.thread_id).await? else {
        return Ok(());
    };
    if cp.state.goal.is_none() {
        return Ok(());
    }
    let update = StateUpdate {
        goal: Some(None),
        ..Default::default()
    };
    crate::threads::write_runtime_update(rt, thread, NODE, update, Some(&cp.checkpoint_id)).await?;
    Ok(())
}

// ------------------------------------------------------------------------------ evaluator

/// The evaluator's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    pub satisfied: bool,
    pub blocker: String,
    pub reason: String,
    pub evidence_summary: String,
}

impl Evaluation {
    fn failed(blocker: &str, reason: &str) -> Evaluation {
        Evaluation {
            satisfied: false,
            blocker: blocker.into(),
            reason: reason.into(),
            evidence_summary: String::new(),
        }
    }
}

fn is_visible(m: &Message) -> bool {
    let hidden = m.additional_kwargs.get("hide_from_ui") == Some(&Value::Bool(true));
    !hidden && (m.kind == MessageKind::Human || m.kind.is_ai())
}

/// The visible messages with text, oldest first: `(is_ai, text)`.
fn visible(messages: &fawn_state::Messages) -> Vec<(bool, String)> {
    messages
        .iter()
        .filter(|m| is_visible(m))
        .map(|m| (m.kind.is_ai(), m.text().trim().to_string()))
        .filter(|(_, t)| !t.is_empty())
        .collect()
}

/// The last visible messages as a transcript (its tail when too long).
fn transcript(visible: &[(bool, String)]) -> String {
    let start = visible.len().saturating_sub(MAX_CONVERSATION_MESSAGES);
    let text = visible[start..]
        .iter()
        .map(|(ai, t)| format!("{}: {t}", if *ai { "Assistant" } else { "User" }))
        .collect::<Vec<_>>()
        .join("\n\n");
    let n = text.chars().count();
    if n <= MAX_CONVERSATION_CHARS {
        return text;
    }
    text.chars().skip(n - MAX_CONVERSATION_CHARS).collect()
}

/// A stable signature of the newest visible assistant text ("" without one): a turn that
/// adds no new visible output leaves it unchanged.
fn evidence_signature(visible: &[(bool, String)]) -> String {
    visible
        .iter()
        .rev()
        .find(|(ai, _)| *ai)
        .map(|(_, t)| uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, t.as_bytes()).to_string())
        .unwrap_or_default()
}

fn clean_text(v: Option<&Value>, max: usize) -> String {
    let s = v.and_then(Value::as_str).unwrap_or_default();
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(max)
        .collect()
}

const NO_OBJECT: &str = "the evaluator's answer holds no JSON object";

/// Reads the evaluator's answer: the JSON object in it (thinking dropped and the object found
/// as [`fawn_llm::answer`] reads them; code fences around it ignored) with a boolean
/// `satisfied`.
pub fn parse_evaluation(text: &str) -> std::result::Result<Evaluation, String> {
    let text = fawn_llm::answer::strip_think(text);
    if !text.contains('{') {
        return Err(NO_OBJECT.into());
    }
    let Some(v) = fawn_llm::answer::json_in(&text, '{') else {
        return Err("the evaluator's answer is not valid JSON".into());
    };
    let Some(satisfied) = v.get("satisfied").and_then(Value::as_bool) else {
        return Err("the evaluator's answer has no boolean `satisfied`".into());
    };
    let blocker = match v.get("blocker").and_then(Value::as_str) {
        _ if satisfied => "none",
        Some(b) if b != "none" && BLOCKERS.contains(&b) => b,
        _ => "missing_evidence",
    };
    Ok(Evaluation {
        satisfied,
        blocker: blocker.into(),
        reason: clean_text(v.get("reason"), MAX_REASON_CHARS),
        evidence_summary: clean_text(v.get("evidence_summary"), MAX_REASON_CHARS),
    })
}

const EVALUATOR_INSTRUCTIONS: &str = "You judge whether an AI assistant has fully achieved a goal the user set for the conversation.

Base the verdict only on what the conversation below shows. Do not assume that work happened (files written, commands run, tests passed) unless the conversation says so. When the evidence is too thin to be sure, the goal is not satisfied and the blocker is missing_evidence.

Blockers: none (only when satisfied), goal_not_met_yet (more autonomous work would get closer), needs_user_input (the assistant waits for the user), external_wait (waiting for something outside), run_failed (the turn failed), missing_evidence.

Answer with one JSON object and nothing else: {\"satisfied\": true|false, \"blocker\": \"...\", \"reason\": \"...\", \"evidence_summary\": \"...\"}";

/// Asks `model` whether `goal` is met by the visible conversation (no call when there is no
/// visible assistant reply yet: `missing_evidence`).
pub async fn evaluate(
    model: &Arc<dyn fawn_llm::ChatModel>,
    goal: &GoalState,
    visible: &[(bool, String)],
) -> std::result::Result<Evaluation, String> {
    if !visible.iter().any(|(ai, _)| *ai) {
        return Ok(Evaluation::failed(
            "missing_evidence",
            "No visible assistant evidence is available yet.",
        ));
    }
    let question = format!(
        "Goal:\n{}\n\nConversation:\n{}\n\nIs the goal fully achieved?",
        goal.objective,
        transcript(visible)
    );
    let request = ChatRequest {
        messages: vec![
            Message::system(EVALUATOR_INSTRUCTIONS),
            Message::human(question),
        ]
        .into(),
        purpose: "goal",
        ..Default::default()
    };
    let answer = model.invoke(request).await.map_err(|e| e.to_string())?;
    parse_evaluation(&answer.text())
}

fn progress_key(e: &Evaluation, signature: &str) -> String {
    json!({"satisfied": e.satisfied, "blocker": e.blocker, "evidence_signature": signature})
        .to_string()
}

/// Turns in a row that brought neither a new verdict nor new visible assistant output.
fn no_progress_count(goal: &GoalState, e: &Evaluation, signature: &str) -> u32 {
    if e.satisfied {
        return 0;
    }
    let previous = goal
        .last_evaluation
        .as_ref()
        .and_then(|l| l.get("progress_key"))
        .and_then(Value::as_str);
    if previous == Some(progress_key(e, signature).as_str()) {
        goal.no_progress_count + 1
    } else {
        0
    }
}

/// Why the loop stops on an unsatisfied verdict (`None`: it goes on).
fn stand_down_reason(goal: &GoalState, e: &Evaluation, no_progress: u32) -> Option<String> {
    if e.blocker != CONTINUABLE {
        return Some(format!("blocked:{}", e.blocker));
    }
    if goal.continuation_count >= goal.max_continuations {
        return Some("max_continuations_reached".into());
    }
    if no_progress >= goal.max_no_progress_continuations {
        return Some("no_progress_detected".into());
    }
    None
}

/// `goal` with the verdict attached.
fn with_evaluation(
    goal: &GoalState,
    e: &Evaluation,
    run_id: &str,
    now: &str,
    signature: &str,
    no_progress: u32,
    stand_down: Option<String>,
) -> GoalState {
    let mut g = goal.clone();
    g.updated_at = now.to_string();
    g.no_progress_count = no_progress;
    let mut last = Map::new();
    last.insert("satisfied".into(), json!(e.satisfied));
    last.insert("blocker".into(), json!(e.blocker));
    last.insert("reason".into(), json!(e.reason));
    last.insert("evidence_summary".into(), json!(e.evidence_summary));
    last.insert("run_id".into(), json!(run_id));
    last.insert("evaluated_at".into(), json!(now));
    last.insert("progress_key".into(), json!(progress_key(e, signature)));
    if let Some(r) = stand_down {
        last.insert("stand_down_reason".into(), json!(r));
    }
    g.last_evaluation = Some(last);
    g
}

/// The hidden user turn that sends the agent back to work.
pub fn continuation_message(goal: &GoalState, e: &Evaluation) -> Message {
    let or = |s: &str, d: &str| {
        if s.is_empty() {
            d.to_string()
        } else {
            s.to_string()
        }
    };
    let text = format!(
        "<goal_continuation>\nThe goal is not met yet: {}\nEvaluator blocker: {}. Reason: {}\nEvidence so far: {}\nKeep working toward the goal with the tools and context you have. Only ask the user when you cannot go on without them.\n</goal_continuation>",
        goal.objective,
        e.blocker,
        or(&e.reason, "none given."),
        or(&e.evidence_summary, "none given."),
    );
    let mut m = Message::human(text);
    m.additional_kwargs
        .insert("hide_from_ui".into(), Value::Bool(true));
    m.additional_kwargs
        .insert("deerflow_goal_continuation".into(), Value::Bool(true));
    m
}

// ------------------------------------------------------------------------------ the loop

/// Whether a run starting from `spec` may need the loop (its state or input holds a goal).
pub fn may_continue(spec: &RunSpec) -> bool {
    spec.start.state.goal.is_some()
        || spec
            .input
            .as_ref()
            .is_some_and(|i| matches!(i.goal, Some(Some(_))))
}

/// The model the evaluator asks: the run's (`model_name`/`model` of its context, then of
/// its config; a custom agent's model), else the default one.
async fn evaluator_model(rt: &Runtime, spec: &RunSpec) -> Option<Arc<dyn fawn_llm::ChatModel>> {
    let pick = |key: &str| {
        spec.context
            .get(key)
            .or_else(|| spec.configurable.get(key))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let model_name = pick("model_name").or_else(|| pick("model"));
    let agent_name = pick("agent_name");
    let user_id = fawn_agent::options::run_user_id(&spec.configurable);
    crate::compact::resolve_model(rt, model_name.as_deref(), agent_name.as_deref(), &user_id).await
}

/// Writes the goal update `goal` as a checkpoint of the run's chain and waits until it is
/// stored; the new start point.
async fn write_goal(
    observer: &Observer,
    thread_id: &str,
    step: i64,
    state: &fawn_state::ThreadState,
    goal: Option<GoalState>,
) -> Option<StartPoint> {
    let mut update = StateUpdate {
        goal: Some(goal),
        ..Default::default()
    };
    let mut next_state = state.clone();
    next_state.apply(&mut update).ok()?;
    let cp = StepCheckpoint {
        step: step + 1,
        source: CheckpointSource::Update,
        writes: vec![(EVALUATOR_NODE.to_string(), update)],
        state: Arc::new(next_state.clone()),
        next: Vec::new(),
        tasks: Vec::new(),
    };
    if let Err(e) = observer.checkpoint(cp).await {
        tracing::warn!(%thread_id, error = %e, "goal: the evaluation was not stored");
        return None;
    }
    if let Err(e) = observer.flush().await {
        tracing::warn!(%thread_id, error = %e, "goal: the evaluation was not stored");
        return None;
    }
    Some(StartPoint {
        checkpoint_id: observer.last().map(|l| l.id),
        state: next_state,
        next: Vec::new(),
        tasks: Vec::new(),
        step: step + 1,
        is_fork: false,
    })
}

/// After a run's graph returned `outcome`: the spec of the next hidden continuation turn,
/// or `None` when there is none (see the module docs). `template` is the run's first spec.
pub(crate) async fn next_turn(
    rt: &Runtime,
    observer: &Observer,
    outcome: &RunOutcome,
    template: &RunSpec,
    cancel: &CancellationToken,
) -> Option<RunSpec> {
    let RunOutcome::Success { interrupts, .. } = outcome else {
        return None;
    };
    if !interrupts.is_empty() || cancel.is_cancelled() {
        return None;
    }
    let thread_id = template.thread_id.as_str();
    // Everything the turn wrote is stored before it is judged.
    observer.flush().await.ok()?;
    let last = observer.last()?;
    if !last.next.is_empty() {
        return None;
    }
    let goal = last.state.goal.clone().filter(|g| g.status == "active")?;
    let step = match rt.store.get_checkpoint(thread_id, "", Some(&last.id)).await {
        Ok(Some(cp)) => cp.metadata.get("step").and_then(Value::as_i64).unwrap_or(0),
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(%thread_id, error = %e, "goal: the run's last checkpoint was not read");
            return None;
        }
    };
    let visible = visible(&last.state.messages);
    let signature = evidence_signature(&visible);
    let now = crate::wire::ts(&rt.now());
    let run_id = template.run_id.as_str();
    // The turn must end with a visible assistant reply to be judged at all.
    if visible.last().is_none_or(|(ai, _)| !ai) {
        let e = Evaluation::failed(
            "run_failed",
            "The turn did not end with a visible assistant reply.",
        );
        let np = no_progress_count(&goal, &e, &signature);
        let g = with_evaluation(
            &goal,
            &e,
            run_id,
            &now,
            &signature,
            np,
            Some("no_durable_end_of_turn".into()),
        );
        write_goal(observer, thread_id, step, &last.state, Some(g)).await;
        return None;
    }
    let Some(model) = evaluator_model(rt, template).await else {
        tracing::warn!(%thread_id, "goal: no model to evaluate the goal with");
        return None;
    };
    let evaluation = tokio::select! {
        e = evaluate(&model, &goal, &visible) => e,
        _ = cancel.cancelled() => return None,
    };
    let evaluation = match evaluation {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(%thread_id, %run_id, error = %e, "goal: the evaluator failed; no continuation");
            return None;
        }
    };
    if cancel.is_cancelled() {
        return None;
    }
    if evaluation.satisfied {
        tracing::info!(%thread_id, %run_id, "goal: satisfied; cleared");
        write_goal(observer, thread_id, step, &last.state, None).await;
        return None;
    }
    let np = no_progress_count(&goal, &evaluation, &signature);
    if let Some(reason) = stand_down_reason(&goal, &evaluation, np) {
        tracing::info!(%thread_id, %run_id, %reason, "goal: standing down");
        let g = with_evaluation(
            &goal,
            &evaluation,
            run_id,
            &now,
            &signature,
            np,
            Some(reason),
        );
        write_goal(observer, thread_id, step, &last.state, Some(g)).await;
        return None;
    }
    let mut g = with_evaluation(&goal, &evaluation, run_id, &now, &signature, np, None);
    g.continuation_count = goal.continuation_count + 1;
    tracing::info!(
        %thread_id, %run_id,
        turn = g.continuation_count, of = g.max_continuations,
        "goal: not met yet; continuing"
    );
    let message = continuation_message(&g, &evaluation);
    let start = write_goal(observer, thread_id, step, &last.state, Some(g)).await?;
    Some(RunSpec {
        input: Some(StateUpdate::messages(vec![message])),
        command: None,
        start,
        ..template.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn goal() -> GoalState {
        new_goal("  write   the\nreport ", 3, "t0").unwrap()
    }

    #[test]
    fn objectives_are_normalised_and_bounded() {
        let g = goal();
        assert_eq!(g.objective, "write the report");
        assert_eq!(
            (g.max_continuations, g.max_no_progress_continuations),
            (3, 2)
        );
        assert_eq!(new_goal("x", 99, "t").unwrap().max_continuations, 8);
        assert_eq!(
            new_goal(" \n ", 1, "t").unwrap_err(),
            "Goal objective must not be empty."
        );
        assert!(new_goal(&"é".repeat(4000), 1, "t").is_ok());
        assert_eq!(
            new_goal(&"é".repeat(4001), 1, "t").unwrap_err(),
            format!("Goal objective must be at most {MAX_OBJECTIVE_CHARS} characters.")
        );
    }

    #[test]
    fn evaluator_answers_are_read_leniently() {
        let e = parse_evaluation(
            "<think>hmm {not this}</think>```json\n{\"satisfied\": false, \"blocker\": \"goal_not_met_yet\", \"reason\": \" more\\n to  do \"}\n```",
        )
        .unwrap();
        assert_eq!(
            (e.satisfied, e.blocker.as_str(), e.reason.as_str()),
            (false, "goal_not_met_yet", "more to do")
        );
        // Satisfied always means blocker none; unknown blockers fail closed.
        let e = parse_evaluation(r#"{"satisfied": true, "blocker": "run_failed"}"#).unwrap();
        assert_eq!(e.blocker, "none");
        let e = parse_evaluation(r#"{"satisfied": false, "blocker": "whatever"}"#).unwrap();
        assert_eq!(e.blocker, "missing_evidence");
        assert_eq!(parse_evaluation("yes").unwrap_err(), NO_OBJECT);
        assert_eq!(
            parse_evaluation(r#"{"satisfied": "yes"}"#).unwrap_err(),
            "the evaluator's answer has no boolean `satisfied`"
        );
        assert_eq!(
            parse_evaluation("{satisfied: yes}").unwrap_err(),
            "the evaluator's answer is not valid JSON"
        );
        // The first object is the verdict; text after it is ignored.
        let e = parse_evaluation(r#"{"satisfied": true} and {"satisfied": false}"#).unwrap();
        assert!(e.satisfied);
    }

    /// An answer cut off while thinking holds no verdict, even when the thoughts hold JSON
    /// (see `fawn_llm::answer::strip_think`).
    #[test]
    fn an_evaluator_cut_off_while_thinking_has_no_verdict() {
        assert_eq!(
            parse_evaluation("<think>maybe {\"satisfied\": true}").unwrap_err(),
            NO_OBJECT
        );
        let e = parse_evaluation("<think>x</think>{\"satisfied\": true}").unwrap();
        assert!(e.satisfied);
    }

    #[test]
    fn the_loop_stands_down_on_limits_and_stalls() {
        let mut g = goal();
        let go_on = Evaluation::failed(CONTINUABLE, "");
        assert_eq!(stand_down_reason(&g, &go_on, 0), None);
        assert_eq!(
            stand_down_reason(&g, &Evaluation::failed("needs_user_input", ""), 0).as_deref(),
            Some("blocked:needs_user_input")
        );
        assert_eq!(
            stand_down_reason(&g, &go_on, 2).as_deref(),
            Some("no_progress_detected")
        );
        // The same verdict on the same visible output counts as no progress.
        let g1 = with_evaluation(&g, &go_on, "r", "t1", "sig", 0, None);
        assert_eq!(no_progress_count(&g1, &go_on, "sig"), 1);
        assert_eq!(no_progress_count(&g1, &go_on, "new output"), 0);
        g.continuation_count = 3;
        assert_eq!(
            stand_down_reason(&g, &go_on, 0).as_deref(),
            Some("max_continuations_reached")
        );
        let m = continuation_message(&g, &go_on);
        assert!(m.text().starts_with("<goal_continuation>"));
        assert_eq!(m.additional_kwargs["hide_from_ui"], json!(true));
    }

    #[test]
    fn only_visible_replies_are_evidence() {
        let mut hidden = Message::ai("secret");
        hidden
            .additional_kwargs
            .insert("hide_from_ui".into(), json!(true));
        let msgs: fawn_state::Messages = vec![
            Message::human("do it"),
            Message::ai("done: report.md"),
            hidden,
            Message::tool("x", "t", None),
        ]
        .into();
        let v = visible(&msgs);
        assert_eq!(transcript(&v), "User: do it\n\nAssistant: done: report.md");
        assert_eq!(
            evidence_signature(&v),
            evidence_signature(&[(true, "done: report.md".into())])
        );
    }
}
