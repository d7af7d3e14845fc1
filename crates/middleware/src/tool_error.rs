//! `ToolErrorHandlingMiddleware` (`wrap_tool_call`): a tool that fails does not stop the run;
//! its failure becomes a `ToolMessage(status="error")` the model can react to.

use crate::util::truncate_chars;
use crate::{Hook, Middleware, RunContext, ToolCallHandler, ToolCallRequest, ToolCallResult};
use async_trait::async_trait;
use fawn_state::Message;
use fawn_tools::ToolError;

/// Longest error detail quoted to the model.
pub const MAX_ERROR_DETAIL_CHARS: usize = 500;

#[derive(Debug, Default)]
pub struct ToolErrorHandlingMiddleware;

impl ToolErrorHandlingMiddleware {
    pub fn new() -> Self {
        ToolErrorHandlingMiddleware
    }

    /// `Error: Tool 'x' failed with Cls: detail. Continue with available context, or choose
    /// an alternative tool.`
    pub fn error_text(tool: &str, error: &ToolError) -> String {
        // LangChain's names for the two failure kinds.
        let class = match error {
            ToolError::InvalidArguments(_) => "ToolInvocationError",
            ToolError::Failed(_) => "ToolException",
            ToolError::Cancelled => "CancelledError",
        };
        let detail = error.to_string();
        let detail = detail.trim();
        let mut detail = truncate_chars(detail, MAX_ERROR_DETAIL_CHARS).to_string();
        if detail.is_empty() {
            detail = class.to_string();
        }
        let detail = detail.trim_end_matches('.');
        format!(
            "Error: Tool '{tool}' failed with {class}: {detail}. Continue with available context, or choose an alternative tool."
        )
    }
}

#[async_trait]
impl Middleware for ToolErrorHandlingMiddleware {
    fn name(&self) -> &str {
        "ToolErrorHandlingMiddleware"
    }

    fn hooks(&self) -> &'static [crate::Hook] {
        &[Hook::WrapToolCall]
    }

    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        _ctx: &RunContext,
        next: &dyn ToolCallHandler,
    ) -> Result<ToolCallResult, ToolError> {
        let call_id = request.call.id.clone().unwrap_or_default();
        let name = request.call.name.clone();
        match next.call(request).await {
            Ok(r) => Ok(r),
            Err(ToolError::Cancelled) => Err(ToolError::Cancelled),
            Err(e) => {
                tracing::warn!(tool = %name, error = %e, "tool failed; answering with an error ToolMessage");
                Ok(ToolCallResult {
                    message: Message::tool(Self::error_text(&name, &e), call_id, Some(name))
                        .with_status_error(),
                    update: None,
                    end_run: false,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text() {
        assert_eq!(
            ToolErrorHandlingMiddleware::error_text("bash", &ToolError::Failed("boom.".into())),
            "Error: Tool 'bash' failed with ToolException: boom. Continue with available context, or choose an alternative tool."
        );
        let long = ToolErrorHandlingMiddleware::error_text(
            "x",
            &ToolError::InvalidArguments("a".repeat(900)),
        );
        assert!(long.contains(&format!("ToolInvocationError: {}.", "a".repeat(500))));
    }
}
