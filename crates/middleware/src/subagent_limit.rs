//! `SubagentLimitMiddleware` (`after_model`, when subagents are enabled): keeps at most
//! `max_concurrent` `task` calls per response and `max_total` per run; extra calls are
//! dropped in order. When every call of a response is dropped, the response says so and the
//! run's stop reason becomes `subagent_limit_capped`.

use crate::util::{append_text, last_ai, with_tool_calls};
use crate::{Hook, HookOutcome, Middleware, MiddlewareError, RunContext};
use async_trait::async_trait;
use fawn_state::{StateUpdate, ThreadState};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Mutex;

pub const TASK_TOOL: &str = "task";
pub const STOP_REASON: &str = "subagent_limit_capped";
pub const LIMIT_REACHED_TEXT: &str = "[SUBAGENT LIMIT REACHED] The subagent delegation limit for this run has been reached. Work with the subagent results you already have, do the remaining simple work yourself, or summarize what is left instead of starting more subagents.";

/// `max_concurrent_subagents` clamped to 1..=4.
pub fn clamp_concurrent(n: u32) -> u32 {
    n.clamp(1, 4)
}

/// `max_total_subagents` clamped to 1..=50.
pub fn clamp_total(n: u32) -> u32 {
    n.clamp(1, 50)
}

#[derive(Debug)]
pub struct SubagentLimitMiddleware {
    max_concurrent: u32,
    max_total: u32,
    /// `task` call ids let through during this run.
    allowed: Mutex<HashSet<String>>,
}

impl SubagentLimitMiddleware {
    pub fn new(max_concurrent: u32, max_total: u32) -> Self {
        SubagentLimitMiddleware {
            max_concurrent: clamp_concurrent(max_concurrent),
            max_total: clamp_total(max_total),
            allowed: Mutex::new(HashSet::new()),
        }
    }

    pub fn limits(&self) -> (u32, u32) {
        (self.max_concurrent, self.max_total)
    }
}

/// Delegations recorded in state (`delegations` ledger) for this run.
fn ledger_count(state: &ThreadState, run_id: &str) -> usize {
    let Some(Value::Array(entries)) = state.extra.get("delegations") else {
        return 0;
    };
    entries
        .iter()
        .filter(|e| run_id.is_empty() || e.get("run_id").and_then(Value::as_str) == Some(run_id))
        .filter_map(|e| e.get("id").and_then(Value::as_str))
        .collect::<HashSet<_>>()
        .len()
}

#[async_trait]
impl Middleware for SubagentLimitMiddleware {
    fn name(&self) -> &str {
        "SubagentLimitMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::AfterModel]
    }

    async fn after_model(
        &self,
        state: &ThreadState,
        ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        let Some(ai) = last_ai(&state.messages) else {
            return Ok(HookOutcome::none());
        };
        let tasks = ai.tool_calls.iter().filter(|c| c.name == TASK_TOOL).count();
        if tasks == 0 {
            return Ok(HookOutcome::none());
        }
        let mut allowed_ids = match self.allowed.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        // Calls of this very message already counted (after_model re-run) are not new.
        let already: usize = allowed_ids.len().max(ledger_count(state, &ctx.run_id));
        let remaining = (self.max_total as usize).saturating_sub(already);
        let allowed = (self.max_concurrent as usize).min(remaining);
        let mut kept = Vec::with_capacity(ai.tool_calls.len());
        let mut seen = 0usize;
        for c in &ai.tool_calls {
            if c.name != TASK_TOOL {
                kept.push(c.clone());
                continue;
            }
            let counted = c.id.as_deref().is_some_and(|id| allowed_ids.contains(id));
            if counted || seen < allowed {
                if !counted {
                    seen += 1;
                    if let Some(id) = &c.id {
                        allowed_ids.insert(id.clone());
                    }
                }
                kept.push(c.clone());
            }
        }
        if kept.len() == ai.tool_calls.len() {
            return Ok(HookOutcome::none());
        }
        tracing::warn!(
            dropped = ai.tool_calls.len() - kept.len(),
            max_concurrent = self.max_concurrent,
            max_total = self.max_total,
            "dropped task calls over the subagent limit"
        );
        let mut updated = with_tool_calls(ai, kept);
        if updated.tool_calls.is_empty() {
            updated.content = append_text(&ai.content, LIMIT_REACHED_TEXT);
            ctx.set_stop_reason(STOP_REASON);
        }
        Ok(HookOutcome::update(StateUpdate::messages(vec![updated])))
    }
}
