//! The `tools` node's innermost step: run one tool, or answer for a tool that cannot run.

use fawn_middleware::{RunContext, ToolCallHandler, ToolCallRequest, ToolCallResult};
use fawn_state::{InvalidToolCall, Message};
use fawn_telemetry::trace::{self, Attr, Kind, Span, attrs};
use fawn_tools::{SubagentRunner, ToolContext, ToolError};
use std::sync::Arc;
use std::time::Instant;

/// Executes tools for the chain (the innermost `ToolCallHandler`).
pub(crate) struct ToolExecutor<'a> {
    pub(crate) ctx: &'a RunContext,
    pub(crate) subagents: Option<Arc<dyn SubagentRunner>>,
    /// Names of the run's tools, for the "not a valid tool" answer.
    pub(crate) tool_names: &'a [String],
}

#[async_trait::async_trait]
impl ToolCallHandler for ToolExecutor<'_> {
    async fn call(&self, request: ToolCallRequest) -> Result<ToolCallResult, ToolError> {
        let call_id = request.call.id.clone().unwrap_or_default();
        let Some(tool) = request.tool else {
            return Ok(ToolCallResult {
                message: unknown_tool_message(&request.call.name, &call_id, self.tool_names),
                update: None,
                end_run: false,
            });
        };
        let tctx = ToolContext {
            thread_id: self.ctx.thread_id.clone(),
            run_id: self.ctx.run_id.clone(),
            tool_call_id: call_id.clone(),
            state: request.state.clone(),
            settings: self.ctx.settings.clone(),
            sandbox: self.ctx.sandbox.clone(),
            events: self.ctx.events.clone(),
            cancel: self.ctx.cancel.clone(),
            subagents: self.subagents.clone(),
            model_name: self.ctx.options.model_name.clone(),
            context: self.ctx.context.clone(),
        };
        let mut output = tool.call(request.call.args.clone(), &tctx).await?;
        let update = output.update.take();
        let end_run = output.end_run;
        let message = output.into_message(&call_id, tool.name());
        Ok(ToolCallResult {
            message,
            update,
            end_run,
        })
    }
}

/// One tool call, measured (`fawn_tool_calls_total`, `fawn_tool_call_duration_seconds`) and
/// traced (an `execute_tool {name}` span, current while the call runs, so a subagent's or
/// a sandbox command's spans hang under it). Calls to tools the run does not have count
/// as `unknown`, so a model inventing names cannot grow the label set.
pub(crate) struct ObservedCall {
    /// The bounded `tool` label (`unknown` for a tool the run does not have).
    label: std::sync::Arc<str>,
    started: Instant,
    span: Span,
}

impl ObservedCall {
    pub(crate) fn start(request: &ToolCallRequest) -> ObservedCall {
        let call = &request.call;
        let span = trace::start(
            || format!("execute_tool {}", call.name),
            Kind::Internal,
            |a| {
                attrs::SpanKind::Tool.attrs(a);
                a.push(Attr::new(attrs::GEN_AI_OPERATION, "execute_tool"));
                a.push(Attr::new(attrs::GEN_AI_TOOL_NAME, call.name.clone()));
                a.push(Attr::new(attrs::TOOL_NAME, call.name.clone()));
                if let Some(id) = &call.id {
                    a.push(Attr::new(attrs::GEN_AI_TOOL_CALL_ID, id.clone()));
                }
                let args = serde_json::Value::Object(call.args.clone()).to_string();
                a.push(Attr::new(attrs::TOOL_ARGS_BYTES, args.len() as i64));
                if trace::capture_inputs() {
                    a.push(Attr::new(attrs::INPUT_VALUE, attrs::clip(args)));
                    a.push(Attr::new(attrs::INPUT_MIME, "application/json"));
                }
            },
        );
        let labels = &fawn_telemetry::metrics().tool_label;
        ObservedCall {
            label: labels.get(if request.tool.is_some() {
                &call.name
            } else {
                "unknown"
            }),
            started: Instant::now(),
            span,
        }
    }

    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    pub(crate) fn end(self, result: &Result<ToolCallResult, ToolError>) {
        let outcome = match result {
            Ok(r) if r.message.status.as_deref() == Some("error") => "error",
            Ok(_) => "ok",
            Err(ToolError::Cancelled) => "cancelled",
            Err(_) => "error",
        };
        fawn_telemetry::metrics().tool_call(
            &self.label,
            outcome,
            self.started.elapsed().as_secs_f64(),
        );
        self.span.set(Attr::new(attrs::TOOL_OUTCOME, outcome));
        match result {
            Ok(r) => {
                if trace::capture_outputs() {
                    self.span.set(Attr::new(
                        attrs::OUTPUT_VALUE,
                        attrs::clip(r.message.text()),
                    ));
                }
                if outcome == "error" {
                    self.span.fail("tool_error", &attrs::clip(r.message.text()));
                } else {
                    self.span.ok();
                }
            }
            Err(e) => self.span.fail(outcome, &e.to_string()),
        }
        self.span.end();
    }
}

/// LangChain's answer for a call to a tool that does not exist.
pub(crate) fn unknown_tool_message(name: &str, call_id: &str, available: &[String]) -> Message {
    let text = format!(
        "Error: {name} is not a valid tool, try one of [{}].",
        available.join(", ")
    );
    Message::tool(text, call_id, Some(name.to_string())).with_status_error()
}

/// The answer for a call whose arguments were not valid JSON.
pub(crate) fn invalid_call_message(call: &InvalidToolCall, call_id: &str) -> Message {
    let name = call.name.clone().unwrap_or_default();
    let detail = call
        .error
        .clone()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| "the arguments are not a valid JSON object".to_string());
    let args = call.args.clone().unwrap_or_default();
    let text = format!(
        "Error: the arguments of the call to '{name}' could not be parsed ({detail}). \
         Arguments received: {}. Call the tool again with a valid JSON object.",
        truncate(&args, 500)
    );
    Message::tool(text, call_id, Some(name)).with_status_error()
}

/// The answer for a tool that failed when no middleware turned the failure into a message
/// (DeerFlow's tool-error wording).
pub(crate) fn tool_error_message(name: &str, call_id: &str, error: &ToolError) -> Message {
    let text = match error {
        ToolError::InvalidArguments(detail) => format!(
            "Error invoking tool '{name}' with error:\n{}\n Please fix the error and try again.",
            truncate(detail, 500)
        ),
        ToolError::Failed(detail) => format!(
            "Error: Tool '{name}' failed with ToolError: {}. Continue with available context, \
             or choose an alternative tool.",
            truncate(detail, 500)
        ),
        ToolError::Cancelled => format!("Error: Tool '{name}' was cancelled."),
    };
    Message::tool(text, call_id, Some(name.to_string())).with_status_error()
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}
