//! Manual context compaction (DeerFlow's `/compact`): the summarization middleware's
//! compaction run once, forced, against a thread's latest state, written as a new
//! checkpoint (writer `manual_compaction`): `messages = [RemoveMessage(REMOVE_ALL),
//! *preserved]`, `summary_text` = the new summary. The run-event journal is untouched, so
//! the conversation the UI pages stays whole; only what the model sees shrinks.
//!
//! The summary comes from `summarization.model_name` when set (falling back to the thread's
//! model), else from the thread's model: the request's `model_name` when configured, else
//! the custom agent's model, else the default one.
//!
//! A thread with a run pending or in flight is refused, and so is a thread whose state moved
//! while the summary was being written (both conflicts): the compaction never overwrites
//! what a run wrote.

use crate::error::RuntimeError;
use crate::runtime::Runtime;
use fawn_checkpoint::{Thread, ThreadStatus};
use fawn_config::ContextSize;
use fawn_llm::ChatModel;
use fawn_middleware::summarization::DeerFlowSummarizationMiddleware;
use std::sync::Arc;

/// The writer name of a compaction's checkpoint.
pub const NODE: &str = "manual_compaction";
/// `reason` of a compaction that found nothing to summarise.
pub const NOT_ENOUGH_MESSAGES: &str = "not_enough_messages";

/// What the caller asked for.
#[derive(Clone, Debug, Default)]
pub struct CompactRequest {
    /// Compact even when no automatic trigger fires.
    pub force: bool,
    /// How much to keep, for this compaction only (default: `summarization.keep`).
    pub keep: Option<ContextSize>,
    pub agent_name: Option<String>,
    pub model_name: Option<String>,
    /// The directory-safe user whose custom agents are looked up.
    pub user_id: String,
}

/// What a compaction did (DeerFlow's `ThreadCompactResponse`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Compacted {
    pub compacted: bool,
    pub reason: Option<String>,
    pub removed_message_count: usize,
    pub preserved_message_count: usize,
    pub summary_updated: bool,
    pub checkpoint_id: Option<String>,
    /// The estimated tokens of the context before it was compacted (summary included).
    pub total_tokens: usize,
}

impl Compacted {
    fn nothing() -> Compacted {
        Compacted {
            reason: Some(NOT_ENOUGH_MESSAGES.into()),
            ..Default::default()
        }
    }
}

/// Why a compaction did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// No model could write the summary (or none is configured).
    #[error("the summarization model failed: {0}")]
    Model(String),
}

fn busy() -> CompactError {
    RuntimeError::conflict("Thread has a run in flight. Compact after the run finishes.").into()
}

/// The model a thread works with: `model_name` when configured, else the custom agent's
/// model (`agent_name`, `user_id`'s agents) when configured, else the default one.
pub(crate) async fn resolve_model(
    rt: &Runtime,
    model_name: Option<&str>,
    agent_name: Option<&str>,
    user_id: &str,
) -> Option<Arc<dyn ChatModel>> {
    if let Some(m) = model_name.and_then(|n| rt.models.get(n)) {
        return Some(m);
    }
    if let Some(name) = agent_name.filter(|n| !n.is_empty()) {
        match fawn_agent::options::load_agent(&rt.settings.home, user_id, name).await {
            Ok(agent) => {
                if let Some(m) = agent.model.as_deref().and_then(|n| rt.models.get(n)) {
                    return Some(m);
                }
            }
            Err(e) => {
                tracing::warn!(agent = name, error = %e.message, "the custom agent's config was not read; using the default model")
            }
        }
    }
    rt.models.default_model()
}

/// Compacts `thread`'s latest state (see the module docs).
pub async fn compact_thread(
    rt: &Runtime,
    thread: &Thread,
    req: CompactRequest,
) -> Result<Compacted, CompactError> {
    let mut config = rt.settings.app.summarization.clone();
    if !config.enabled {
        return Err(RuntimeError::conflict("Context compaction is disabled.").into());
    }
    if thread.status == ThreadStatus::Busy {
        return Err(busy());
    }
    let Some(cp) = crate::threads::head(rt, &thread.thread_id).await? else {
        return Ok(Compacted::nothing());
    };
    if let Some(keep) = req.keep.clone() {
        config.keep = keep;
    }
    let model = resolve_model(
        rt,
        req.model_name.as_deref(),
        req.agent_name.as_deref(),
        &req.user_id,
    )
    .await
    .ok_or_else(|| CompactError::Model("no model is configured".into()))?;
    let state = &*cp.state;
    let total_tokens = fawn_llm::estimate_tokens(&state.messages)
        + state
            .summary_text
            .as_deref()
            .map(fawn_llm::estimate_text_tokens)
            .unwrap_or(0);
    let middleware = DeerFlowSummarizationMiddleware::new(config);
    let compaction = middleware
        .compact(state, &model, &rt.models, req.force)
        .await
        .map_err(|e| CompactError::Model(e.to_string()))?;
    let Some(c) = compaction else {
        return Ok(Compacted::nothing());
    };
    // The summary took a while: a run may have started since (it would be overwritten).
    let now = rt
        .store
        .get_thread(&thread.thread_id)
        .await
        .map_err(|e| RuntimeError::store("loading the thread", e))?
        .ok_or_else(|| {
            RuntimeError::not_found(format!("Thread with ID {} not found", thread.thread_id))
        })?;
    if now.status == ThreadStatus::Busy {
        return Err(busy());
    }
    let (checkpoint_id, _) =
        crate::threads::write_runtime_update(rt, &now, NODE, c.update, Some(&cp.checkpoint_id))
            .await?;
    tracing::info!(
        thread_id = %thread.thread_id,
        removed = c.removed_message_count,
        preserved = c.preserved_message_count,
        "thread context compacted"
    );
    Ok(Compacted {
        compacted: true,
        reason: None,
        removed_message_count: c.removed_message_count,
        preserved_message_count: c.preserved_message_count,
        summary_updated: true,
        checkpoint_id: Some(checkpoint_id),
        total_tokens,
    })
}
