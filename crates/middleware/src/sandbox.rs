//! `SandboxMiddleware` (`before_agent`, `wrap_tool_call`, `after_agent`): the sandbox is
//! acquired lazily by the first tool that needs it (through [`fawn_tools::SandboxSlot`]);
//! `wrap_tool_call` turns a freshly acquired id into a `sandbox: {sandbox_id}` state write,
//! and `after_agent` hands the sandbox back to its provider (`release`, not destroy).

use crate::{
    Hook, HookOutcome, Middleware, MiddlewareError, RunContext, ToolCallHandler, ToolCallRequest,
    ToolCallResult,
};
use async_trait::async_trait;
use fawn_state::{SandboxState, StateUpdate, ThreadState};
use fawn_tools::ToolError;
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct SandboxMiddleware {
    /// The id already written to state during this run.
    written: Mutex<Option<String>>,
}

impl SandboxMiddleware {
    pub fn new() -> Self {
        SandboxMiddleware::default()
    }
}

#[async_trait]
impl Middleware for SandboxMiddleware {
    fn name(&self) -> &str {
        "SandboxMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::BeforeAgent, Hook::WrapToolCall, Hook::AfterAgent]
    }

    /// Lazy mode: nothing to do before the agent; tools acquire on first use.
    async fn before_agent(
        &self,
        _state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::none())
    }

    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        ctx: &RunContext,
        next: &dyn ToolCallHandler,
    ) -> Result<ToolCallResult, ToolError> {
        let known = request
            .state
            .sandbox
            .as_ref()
            .and_then(|s| s.sandbox_id.clone());
        let mut result = next.call(request).await?;
        let Some(id) = ctx.sandbox.acquired_id() else {
            return Ok(result);
        };
        if known.as_deref() == Some(id.as_str()) {
            return Ok(result);
        }
        {
            let mut written = match self.written.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            if written.as_deref() == Some(id.as_str()) {
                return Ok(result);
            }
            *written = Some(id.clone());
        }
        let write = StateUpdate {
            sandbox: Some(SandboxState {
                sandbox_id: Some(id),
                extra: Default::default(),
            }),
            ..Default::default()
        };
        match &mut result.update {
            Some(u) => u.merge(write),
            None => result.update = Some(write),
        }
        Ok(result)
    }

    async fn after_agent(
        &self,
        _state: &ThreadState,
        ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        if let Some(id) = ctx.sandbox.acquired_id() {
            ctx.sandbox.provider().release(&id).await;
        }
        Ok(HookOutcome::none())
    }
}
