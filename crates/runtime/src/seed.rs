//! Finished runs stood up without executing them: the runs and their journal message rows,
//! no model and no checkpoint (what the server's test-only seeder,
//! `POST /api/test-only/seed-runs`, stores after it has checked the request). The server
//! writes no run or journal row itself; this is the runtime call it makes instead.

use crate::error::{Result, RuntimeError};
use crate::journal::{AI_RESPONSE, HUMAN_INPUT, LEAD_AGENT, MESSAGE};
use crate::runtime::RuntimeHandle;
use chrono::{DateTime, Utc};
use fawn_checkpoint::{CancelAction, CancelTarget, MultitaskStrategy, NewRun, NewRunEvent};
use fawn_state::Message;
use serde_json::{Map, json};

/// A far future: the seeded runs are never due, so no worker claims one before it ends.
const NEVER_SECONDS: f64 = 100.0 * 365.0 * 24.0 * 3600.0;

/// One message of a seeded run.
#[derive(Clone, Debug)]
pub struct SeededMessage {
    /// A human input (else an AI response).
    pub human: bool,
    pub content: String,
    pub id: String,
}

/// One seeded run: a run of the `lead_agent` assistant that never executes.
#[derive(Clone, Debug)]
pub struct SeededRun {
    pub run_id: String,
    pub created_at: DateTime<Utc>,
    pub messages: Vec<SeededMessage>,
}

/// Stores each of `runs` on `thread_id` (created for `owner` when missing), in order: the run
/// (ended `interrupted` at once: Fawn ends a run that did not run that way, acting for
/// `owner`) and its messages as `llm.human.input` / `llm.ai.response` journal rows
/// (`caller: lead_agent`, `created_at` the run's) in one append.
pub async fn seed_finished_runs(
    rt: &RuntimeHandle,
    thread_id: &str,
    owner: Option<&str>,
    runs: &[SeededRun],
) -> Result<()> {
    let mut thread_meta = Map::new();
    let mut kwargs = Map::new();
    if let Some(me) = owner {
        thread_meta.insert(crate::create::OWNER_KEY.into(), json!(me));
        // The options of a seeded run: only whom it acts for.
        let mut configurable = Map::new();
        configurable.insert(crate::kwargs::USER_ID.into(), json!(me));
        kwargs.insert("config".into(), json!({ "configurable": configurable }));
    }
    let assistant_id = crate::graphs::system_assistant_id(crate::graphs::LEAD_AGENT);
    for r in runs {
        rt.store
            .create_run(NewRun {
                run_id: Some(r.run_id.clone()),
                thread_id: thread_id.to_string(),
                assistant_id: assistant_id.clone(),
                metadata: Map::new(),
                kwargs: kwargs.clone(),
                multitask_strategy: MultitaskStrategy::Enqueue,
                after_seconds: NEVER_SECONDS,
                create_thread_if_missing: Some(thread_meta.clone()),
                claim: None,
            })
            .await
            .map_err(|e| RuntimeError::store("seeding a run", e))?;
        rt.store
            .cancel_runs(
                &CancelTarget::Runs {
                    thread_id: Some(thread_id.to_string()),
                    run_ids: vec![r.run_id.clone()],
                },
                CancelAction::Interrupt,
            )
            .await
            .map_err(|e| RuntimeError::store("ending a seeded run", e))?;
        let rows: Vec<NewRunEvent> = r
            .messages
            .iter()
            .map(|m| {
                let (mut message, event_type) = if m.human {
                    (Message::human(m.content.clone()), HUMAN_INPUT)
                } else {
                    (Message::ai(m.content.clone()), AI_RESPONSE)
                };
                message.id = Some(m.id.clone());
                let mut metadata = Map::new();
                metadata.insert("caller".into(), json!(LEAD_AGENT));
                NewRunEvent {
                    event_type: event_type.into(),
                    category: MESSAGE.into(),
                    content: serde_json::to_value(&message).unwrap_or_default(),
                    metadata,
                    created_at: r.created_at,
                }
            })
            .collect();
        if !rows.is_empty() {
            rt.store
                .append_run_events(thread_id, &r.run_id, rows)
                .await
                .map_err(|e| RuntimeError::store("seeding the run's journal", e))?;
        }
    }
    Ok(())
}
