//! `SystemMessageCoalescingMiddleware` (`wrap_model_call`, request only): every system
//! message in the conversation (the date reminder, …) is merged into the one leading system
//! prompt, in order, because many providers reject system messages after the first.

use crate::{
    Hook, Middleware, MiddlewareError, ModelCall, ModelRequest, ModelResponse, RunContext,
};
use async_trait::async_trait;
use fawn_state::{MessageKind, ThreadState};

#[derive(Debug, Default)]
pub struct SystemMessageCoalescingMiddleware;

impl SystemMessageCoalescingMiddleware {
    pub fn new() -> Self {
        SystemMessageCoalescingMiddleware
    }

    /// The request with its system messages folded into `system_prompt`.
    pub fn coalesce(mut request: ModelRequest) -> ModelRequest {
        if !request
            .messages
            .iter()
            .any(|m| m.kind == MessageKind::System)
        {
            return request;
        }
        let mut parts: Vec<String> = request.system_prompt.take().into_iter().collect();
        request.messages.retain(|m| {
            if m.kind == MessageKind::System {
                let t = m.text();
                if !t.trim().is_empty() {
                    parts.push(t);
                }
                false
            } else {
                true
            }
        });
        request.system_prompt = (!parts.is_empty()).then(|| parts.join("\n\n"));
        request
    }
}

#[async_trait]
impl Middleware for SystemMessageCoalescingMiddleware {
    fn name(&self) -> &str {
        "SystemMessageCoalescingMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::WrapModelCall]
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        _state: &ThreadState,
        _ctx: &RunContext,
        next: &dyn ModelCall,
    ) -> Result<ModelResponse, MiddlewareError> {
        next.call(Self::coalesce(request)).await
    }
}
