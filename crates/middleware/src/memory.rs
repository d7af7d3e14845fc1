//! `MemoryMiddleware` (`after_agent`): hands the finished conversation to the memory queue
//! ([`crate::MemorySink`], debounced per thread/user/agent). It never waits for the memory
//! update itself.

use crate::{Hook, HookOutcome, Middleware, MiddlewareError, RunContext};
use async_trait::async_trait;
use fawn_state::ThreadState;

#[derive(Debug, Default)]
pub struct MemoryMiddleware;

impl MemoryMiddleware {
    pub fn new() -> Self {
        MemoryMiddleware
    }
}

#[async_trait]
impl Middleware for MemoryMiddleware {
    fn name(&self) -> &str {
        "MemoryMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::AfterAgent]
    }

    async fn after_agent(
        &self,
        state: &ThreadState,
        ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        let memory = &ctx.settings.app.memory;
        if !memory.enabled || ctx.thread_id.is_empty() || state.messages.is_empty() {
            return Ok(HookOutcome::none());
        }
        let Some(sink) = &ctx.memory else {
            return Ok(HookOutcome::none());
        };
        sink.enqueue(
            &ctx.thread_id,
            &ctx.user_id,
            ctx.options.agent_name.as_deref(),
            &state.messages.to_vec(),
        );
        Ok(HookOutcome::none())
    }
}
