//! `ThreadDataMiddleware` (`before_agent`): records the thread's directories in
//! `thread_data` (lazily: nothing is created here; the sandbox creates them on first use) and
//! stamps the run's human message with `name = "user-input"`, `run_id` and `timestamp`.
//!
//! DeerFlow writes host paths there; state is readable through the API, so Fawn writes the
//! agent-visible virtual paths (`/mnt/user-data/workspace`, …) instead and keeps host paths
//! out of state (reference §14 allows omitting them). The ids are still validated the way
//! the host layout `{home}/users/{user}/threads/{thread}` needs.

use crate::{Hook, HookOutcome, Middleware, MiddlewareError, RunContext};
use async_trait::async_trait;
use fawn_sandbox::{VIRTUAL_OUTPUTS, VIRTUAL_UPLOADS, VIRTUAL_WORKSPACE, valid_thread_id};
use fawn_state::{MessageKind, StateUpdate, ThreadData, ThreadState};
use serde_json::Value;

#[derive(Debug, Default)]
pub struct ThreadDataMiddleware;

impl ThreadDataMiddleware {
    pub fn new() -> Self {
        ThreadDataMiddleware
    }
}

/// A user id is a path component under `{home}/users/`: it must not be able to leave it.
pub(crate) fn safe_user_id(user_id: &str) -> bool {
    !user_id.is_empty()
        && user_id != "."
        && user_id != ".."
        && user_id.len() <= 128
        && !user_id
            .chars()
            .any(|c| c == '/' || c == '\\' || c == '\0' || c.is_control())
}

/// Checks that the run's ids can name its directories (DeerFlow raises without a thread id).
pub(crate) fn validate_ids(ctx: &RunContext) -> Result<(), MiddlewareError> {
    if ctx.thread_id.is_empty() {
        return Err(MiddlewareError::Failed(
            "Thread ID is required in runtime context or config.configurable".into(),
        ));
    }
    if !valid_thread_id(&ctx.thread_id) {
        return Err(MiddlewareError::Failed(format!(
            "invalid thread id '{}': expected 1-64 characters of A-Z, a-z, 0-9, '_' or '-'",
            ctx.thread_id
        )));
    }
    if !safe_user_id(&ctx.user_id) {
        return Err(MiddlewareError::Failed(format!(
            "invalid user id '{}'",
            ctx.user_id
        )));
    }
    Ok(())
}

#[async_trait]
impl Middleware for ThreadDataMiddleware {
    fn name(&self) -> &str {
        "ThreadDataMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::BeforeAgent]
    }

    async fn before_agent(
        &self,
        state: &ThreadState,
        ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        validate_ids(ctx)?;
        let mut update = StateUpdate {
            thread_data: Some(Some(ThreadData {
                workspace_path: Some(VIRTUAL_WORKSPACE.to_string()),
                uploads_path: Some(VIRTUAL_UPLOADS.to_string()),
                outputs_path: Some(VIRTUAL_OUTPUTS.to_string()),
                extra: Default::default(),
            })),
            ..Default::default()
        };
        if let Some(last) = state.messages.last()
            && last.kind == MessageKind::Human
        {
            let mut m = last.clone();
            if m.name.as_deref().is_none_or(str::is_empty) {
                m.name = Some("user-input".to_string());
            }
            m.additional_kwargs
                .insert("run_id".into(), Value::String(ctx.run_id.clone()));
            m.additional_kwargs.insert(
                "timestamp".into(),
                Value::String(
                    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, false),
                ),
            );
            update.messages = Some(vec![m]);
        }
        Ok(HookOutcome::update(update))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids() {
        assert!(safe_user_id("default"));
        assert!(safe_user_id("3f2a-uuid"));
        assert!(!safe_user_id(".."));
        assert!(!safe_user_id("a/b"));
        assert!(!safe_user_id(""));
    }
}
