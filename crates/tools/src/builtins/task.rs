//! `task`: delegate a bounded piece of work to a subagent (reference §3.6).
//!
//! The tool blocks until the [`SubagentRunner`] returns, streaming `custom` events as it goes:
//!
//! * `task_started` `{type, task_id, description, model_name}`
//! * `task_running` `{type, task_id, message, message_index, total_messages, usage, model_name}`
//!   for every message the subagent produces (`message_index` is 1-based, `total_messages`
//!   is the number received so far, `usage` the sum of the AI messages' usage so far or
//!   `null`);
//! * one of `task_completed` `{…, result, usage, model_name}` or `task_failed` /
//!   `task_cancelled` / `task_timed_out` `{…, error, usage, model_name}`.
//!
//! `task_id` is the tool call id. The subagent's effective model is only known when it ends
//! ([`SubagentOutcome::model_name`]); `task_started`/`task_running` carry the run's model.
//!
//! The ToolMessage text and its `subagent_*` `additional_kwargs` follow DeerFlow's status
//! contract; see [`subagent_result_text`] and [`subagent_additional_kwargs`].

use super::subagent_steps as steps;
use crate::args::{parse_args, schema_for};
use crate::{
    SubagentInfo, SubagentOutcome, SubagentRequest, SubagentStatus, Tool, ToolContext, ToolError,
    ToolOutput, ToolStatus,
};
use async_trait::async_trait;
use fawn_state::{Message, StreamEvent, UsageMetadata};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Longest `subagent_result_brief` / `subagent_error` (characters).
pub const RESULT_BRIEF_MAX_CHARS: usize = 2000;

/// How long a runner may take to honour cancellation before the tool gives up on it.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, Deserialize, JsonSchema)]
struct TaskArgsSchema {
    /// A short (3-5 word) label of the task, shown to the user. Give this argument first.
    #[allow(dead_code)]
    description: String,
    /// Everything the subagent needs to do the task on its own: goal, inputs, constraints and
    /// what to report back. Give this argument second.
    #[allow(dead_code)]
    prompt: String,
    /// Which subagent runs the task. Give this argument third.
    #[allow(dead_code)]
    subagent_type: String,
}

/// Arguments of `task` (`subagent_type` is checked against the runner's list at call time).
#[derive(Debug, Deserialize)]
struct TaskArgs {
    description: String,
    prompt: String,
    subagent_type: String,
}

/// `task(description, prompt, subagent_type)`.
pub struct TaskTool {
    description: String,
    parameters: Arc<Value>,
}

impl std::fmt::Debug for TaskTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskTool").finish_non_exhaustive()
    }
}

impl TaskTool {
    /// A `task` tool whose `subagent_type` enum and description list `available`.
    pub fn new(available: &[SubagentInfo]) -> Self {
        let mut parameters = schema_for::<TaskArgsSchema>();
        if !available.is_empty()
            && let Some(p) = Arc::make_mut(&mut parameters)
                .get_mut("properties")
                .and_then(|p| p.get_mut("subagent_type"))
                .and_then(Value::as_object_mut)
        {
            p.insert(
                "enum".into(),
                Value::Array(
                    available
                        .iter()
                        .map(|s| Value::String(s.name.clone()))
                        .collect(),
                ),
            );
        }
        let mut description = String::from(
            "Hand a bounded task to a subagent that works in its own context and reports back \
a result. Delegate only when it clearly pays off: independent pieces of work that can run in \
parallel, a specialist subagent with tools or instructions you lack, or a self-contained \
investigation that would flood your own context. Do not delegate dependent steps, work that \
touches the same files as other running tasks, or anything that needs the user's input. \
The subagent sees only your prompt, so make it complete.",
        );
        if !available.is_empty() {
            description.push_str("\n\nAvailable subagent types:");
            for s in available {
                description.push_str(&format!("\n- {}: {}", s.name, s.description.trim()));
            }
        }
        TaskTool {
            description,
            parameters,
        }
    }
}

/// `s` trimmed, and if longer than `cap` characters, its head and tail around `\n...\n`.
pub fn bound_metadata_text(s: &str, cap: usize) -> String {
    let cleaned = s.trim();
    let n = cleaned.chars().count();
    if n <= cap {
        return cleaned.to_string();
    }
    let marker = "\n...\n";
    let head = cap * 2 / 3;
    let tail = cap.saturating_sub(head + marker.len());
    if cap <= marker.len() || tail == 0 {
        return cleaned.chars().take(cap).collect();
    }
    let head_s: String = cleaned.chars().take(head).collect();
    let tail_s: String = cleaned.chars().skip(n - tail).collect();
    format!("{head_s}{marker}{tail_s}")
}

fn status_str(s: SubagentStatus) -> &'static str {
    match s {
        SubagentStatus::Completed => "completed",
        SubagentStatus::Failed => "failed",
        SubagentStatus::Cancelled => "cancelled",
        SubagentStatus::TimedOut => "timed_out",
    }
}

fn cap_label(stop_reason: Option<&str>) -> Option<&'static str> {
    match stop_reason? {
        "token_capped" => Some("token budget"),
        "turn_capped" => Some("turn budget"),
        "loop_capped" => Some("repeated tool-call loop"),
        _ => None,
    }
}

/// The model-visible result text and the error recorded in metadata (`None` on success):
///
/// * completed: `Task Succeeded. Result: …` (`Task Succeeded (capped: token budget). Result: …`
///   when a cap ended it);
/// * failed: `Task failed.` or `Task failed. Error: …` (`Task failed (capped: turn budget). …`);
/// * cancelled: `Task cancelled by user.` (or `… Error: …` with another reason);
/// * timed out: `Task timed out.` (or `… Error: …`).
pub fn subagent_result_text(outcome: &SubagentOutcome) -> (String, Option<String>) {
    let error = outcome
        .error
        .as_deref()
        .map(str::trim)
        .filter(|e| !e.is_empty());
    let capped = cap_label(outcome.stop_reason.as_deref());
    let with_default = |default: &str| -> (String, String) {
        match error {
            None => (default.to_string(), default.to_string()),
            Some(e) if e == default => (default.to_string(), default.to_string()),
            Some(e) => (format!("{default} Error: {e}"), e.to_string()),
        }
    };
    match outcome.status {
        SubagentStatus::Completed => {
            let text = match capped {
                Some(c) => format!("Task Succeeded (capped: {c}). Result: {}", outcome.result),
                None => format!("Task Succeeded. Result: {}", outcome.result),
            };
            (text, None)
        }
        SubagentStatus::Cancelled => {
            let (t, e) = with_default("Task cancelled by user.");
            (t, Some(e))
        }
        SubagentStatus::TimedOut => {
            let (t, e) = with_default("Task timed out.");
            (t, Some(e))
        }
        SubagentStatus::Failed => {
            let detail = error.unwrap_or("Task failed.").to_string();
            let text = match (capped, detail == "Task failed.") {
                (Some(c), true) => format!("Task failed (capped: {c})."),
                (Some(c), false) => format!("Task failed (capped: {c}). Error: {detail}"),
                (None, true) => detail.clone(),
                (None, false) => format!("Task failed. Error: {detail}"),
            };
            (text, Some(detail))
        }
    }
}

fn usage_value(u: &UsageMetadata) -> Option<Value> {
    if u.input_tokens == 0 && u.output_tokens == 0 && u.total_tokens == 0 {
        return None;
    }
    if u.input_tokens < 0 || u.output_tokens < 0 || u.total_tokens < 0 {
        return None;
    }
    Some(json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
    }))
}

/// The `subagent_*` `additional_kwargs` of the result ToolMessage: `subagent_status`;
/// `subagent_result_brief` (≤ 2000 chars) and `subagent_result_sha256` (of the full result)
/// when completed with a non-blank result; `subagent_error` (bounded) for other statuses;
/// `subagent_stop_reason`, `subagent_model_name` and `subagent_token_usage` when known.
pub fn subagent_additional_kwargs(
    outcome: &SubagentOutcome,
    metadata_error: Option<&str>,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "subagent_status".into(),
        Value::String(status_str(outcome.status).into()),
    );
    if outcome.status == SubagentStatus::Completed && !outcome.result.trim().is_empty() {
        m.insert(
            "subagent_result_brief".into(),
            Value::String(bound_metadata_text(&outcome.result, RESULT_BRIEF_MAX_CHARS)),
        );
        m.insert(
            "subagent_result_sha256".into(),
            Value::String(super::view_image::hex_digest(outcome.result.as_bytes())),
        );
    }
    if outcome.status != SubagentStatus::Completed
        && let Some(e) = metadata_error.filter(|e| !e.trim().is_empty())
    {
        m.insert(
            "subagent_error".into(),
            Value::String(bound_metadata_text(e, RESULT_BRIEF_MAX_CHARS)),
        );
    }
    if let Some(r) = &outcome.stop_reason
        && cap_label(Some(r)).is_some()
    {
        m.insert("subagent_stop_reason".into(), Value::String(r.clone()));
    }
    let model = outcome.model_name.trim();
    if !model.is_empty() {
        m.insert("subagent_model_name".into(), Value::String(model.into()));
    }
    if let Some(u) = usage_value(&outcome.usage) {
        m.insert("subagent_token_usage".into(), u);
    }
    m
}

fn failed_output(error: String, model_name: &str) -> ToolOutput {
    let outcome = SubagentOutcome {
        status: SubagentStatus::Failed,
        result: String::new(),
        error: Some(error),
        stop_reason: None,
        usage: UsageMetadata::default(),
        model_name: model_name.to_string(),
    };
    let (text, meta_err) = subagent_result_text(&outcome);
    let mut out = ToolOutput::error(text);
    out.additional_kwargs = subagent_additional_kwargs(&outcome, meta_err.as_deref());
    out
}

struct Progress {
    count: usize,
    usage: UsageMetadata,
    /// The subagent's journal `caller`.
    caller: String,
}

impl Progress {
    fn emit(&mut self, ctx: &ToolContext, message: Message) {
        self.count += 1;
        if message.kind.is_ai()
            && let Some(u) = &message.usage_metadata
        {
            self.usage = self.usage.add(u);
        }
        ctx.events.journal(steps::step(
            &ctx.tool_call_id,
            self.count,
            &message,
            &self.caller,
        ));
        ctx.events.emit(StreamEvent::Custom(json!({
            "type": "task_running",
            "task_id": ctx.tool_call_id,
            "message": message.to_value(),
            "message_index": self.count,
            "total_messages": self.count,
            "usage": usage_value(&self.usage),
            "model_name": ctx.model_name,
        })));
    }
}

#[async_trait]
impl Tool for TaskTool {
    fn name(&self) -> &str {
        "task"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Arc<Value> {
        self.parameters.clone()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: TaskArgs = parse_args(self.name(), args)?;
        let Some(runner) = ctx.subagents.clone() else {
            return Ok(failed_output(
                "Subagents are not enabled for this run; do the work yourself.".into(),
                "",
            ));
        };
        let available = runner.available();
        if !available.iter().any(|s| s.name == args.subagent_type) {
            let names: Vec<&str> = available.iter().map(|s| s.name.as_str()).collect();
            let list = if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            };
            return Ok(failed_output(
                format!(
                    "Unknown subagent type '{}'. Available: {list}",
                    args.subagent_type
                ),
                "",
            ));
        }

        ctx.events.emit(StreamEvent::Custom(json!({
            "type": "task_started",
            "task_id": ctx.tool_call_id,
            "description": args.description,
            "model_name": ctx.model_name,
        })));
        let caller = steps::caller(&args.subagent_type);
        ctx.events.journal(steps::started(
            &ctx.tool_call_id,
            &args.description,
            &caller,
        ));

        let request = SubagentRequest {
            task_id: ctx.tool_call_id.clone(),
            subagent_type: args.subagent_type.clone(),
            description: args.description.clone(),
            prompt: args.prompt,
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Message>();
        let mut progress = Progress {
            count: 0,
            usage: UsageMetadata::default(),
            caller,
        };
        let run = runner.run(request, ctx, tx);
        tokio::pin!(run);
        let mut cancel_deadline: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        let mut rx_open = true;
        let outcome = loop {
            tokio::select! {
                biased;
                outcome = &mut run => break outcome,
                msg = rx.recv(), if rx_open => match msg {
                    Some(m) => progress.emit(ctx, m),
                    None => rx_open = false,
                },
                _ = ctx.cancel.cancelled(), if cancel_deadline.is_none() => {
                    cancel_deadline = Some(Box::pin(tokio::time::sleep(CANCEL_GRACE)));
                }
                _ = async {
                    match cancel_deadline.as_mut() {
                        Some(d) => d.as_mut().await,
                        None => std::future::pending().await,
                    }
                } => {
                    tracing::warn!(task_id = %ctx.tool_call_id, "subagent runner ignored cancellation; abandoning it");
                    break SubagentOutcome {
                        status: SubagentStatus::Cancelled,
                        result: String::new(),
                        error: None,
                        stop_reason: None,
                        usage: progress.usage.clone(),
                        model_name: ctx.model_name.clone(),
                    };
                }
            }
        };
        while let Ok(m) = rx.try_recv() {
            progress.emit(ctx, m);
        }

        let (event_type, payload_key, payload) = match outcome.status {
            SubagentStatus::Completed => (
                "task_completed",
                "result",
                Value::String(outcome.result.clone()),
            ),
            SubagentStatus::Failed => ("task_failed", "error", opt_str(&outcome.error)),
            SubagentStatus::Cancelled => ("task_cancelled", "error", opt_str(&outcome.error)),
            SubagentStatus::TimedOut => ("task_timed_out", "error", opt_str(&outcome.error)),
        };
        let usage = usage_value(&outcome.usage).or_else(|| usage_value(&progress.usage));
        let model_name = if outcome.model_name.trim().is_empty() {
            ctx.model_name.clone()
        } else {
            outcome.model_name.clone()
        };
        ctx.events.journal(steps::ended(
            &ctx.tool_call_id,
            steps::End {
                status: match outcome.status {
                    SubagentStatus::Completed => "completed",
                    SubagentStatus::Failed => "failed",
                    SubagentStatus::Cancelled => "cancelled",
                    SubagentStatus::TimedOut => "timed_out",
                },
                model_name: &model_name,
                usage: usage.clone(),
                result: (outcome.status == SubagentStatus::Completed)
                    .then_some(outcome.result.as_str()),
                error: outcome.error.as_deref(),
            },
            &progress.caller,
        ));
        let mut event = Map::new();
        event.insert("type".into(), Value::String(event_type.into()));
        event.insert("task_id".into(), Value::String(ctx.tool_call_id.clone()));
        event.insert(payload_key.into(), payload);
        event.insert("usage".into(), usage.unwrap_or(Value::Null));
        event.insert("model_name".into(), Value::String(model_name));
        ctx.events.emit(StreamEvent::Custom(Value::Object(event)));

        let (text, meta_err) = subagent_result_text(&outcome);
        let mut out = ToolOutput::text(text);
        if outcome.status != SubagentStatus::Completed {
            out.status = ToolStatus::Error;
        }
        out.additional_kwargs = subagent_additional_kwargs(&outcome, meta_err.as_deref());
        Ok(out)
    }
}

fn opt_str(s: &Option<String>) -> Value {
    match s {
        Some(s) => Value::String(s.clone()),
        None => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: SubagentStatus) -> SubagentOutcome {
        SubagentOutcome {
            status,
            result: String::new(),
            error: None,
            stop_reason: None,
            usage: UsageMetadata::default(),
            model_name: String::new(),
        }
    }

    #[test]
    fn result_texts() {
        let mut o = outcome(SubagentStatus::Completed);
        o.result = "42".into();
        assert_eq!(subagent_result_text(&o).0, "Task Succeeded. Result: 42");
        o.stop_reason = Some("token_capped".into());
        assert_eq!(
            subagent_result_text(&o).0,
            "Task Succeeded (capped: token budget). Result: 42"
        );

        let mut o = outcome(SubagentStatus::Failed);
        assert_eq!(
            subagent_result_text(&o),
            ("Task failed.".into(), Some("Task failed.".into()))
        );
        o.error = Some("boom".into());
        assert_eq!(subagent_result_text(&o).0, "Task failed. Error: boom");
        o.stop_reason = Some("turn_capped".into());
        assert_eq!(
            subagent_result_text(&o).0,
            "Task failed (capped: turn budget). Error: boom"
        );

        let o = outcome(SubagentStatus::Cancelled);
        assert_eq!(subagent_result_text(&o).0, "Task cancelled by user.");
        let mut o = outcome(SubagentStatus::TimedOut);
        assert_eq!(subagent_result_text(&o).0, "Task timed out.");
        o.error = Some("after 900s".into());
        assert_eq!(
            subagent_result_text(&o).0,
            "Task timed out. Error: after 900s"
        );
    }

    #[test]
    fn brief_is_bounded_head_and_tail() {
        let long: String = (0..3000)
            .map(|i| if i < 1500 { 'a' } else { 'b' })
            .collect();
        let b = bound_metadata_text(&long, 2000);
        assert_eq!(b.chars().count(), 2000);
        assert!(b.starts_with("aaa") && b.ends_with("bbb") && b.contains("\n...\n"));
        assert_eq!(bound_metadata_text("  short  ", 2000), "short");
    }

    #[test]
    fn kwargs() {
        let mut o = outcome(SubagentStatus::Completed);
        o.result = "abc".into();
        o.model_name = "m1".into();
        o.usage = UsageMetadata::new(3, 4);
        let k = subagent_additional_kwargs(&o, None);
        assert_eq!(k["subagent_status"], "completed");
        assert_eq!(k["subagent_result_brief"], "abc");
        assert_eq!(
            k["subagent_result_sha256"],
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(k["subagent_model_name"], "m1");
        assert_eq!(k["subagent_token_usage"]["total_tokens"], 7);
        assert!(k.get("subagent_error").is_none());

        let o = outcome(SubagentStatus::Failed);
        let k = subagent_additional_kwargs(&o, Some("Task failed."));
        assert_eq!(k["subagent_error"], "Task failed.");
        assert!(k.get("subagent_result_brief").is_none());
        assert!(k.get("subagent_token_usage").is_none());
    }

    #[test]
    fn schema_enum_lists_available() {
        let t = TaskTool::new(&[
            SubagentInfo {
                name: "general-purpose".into(),
                description: "anything".into(),
            },
            SubagentInfo {
                name: "bash".into(),
                description: "shell".into(),
            },
        ]);
        assert_eq!(
            t.parameters()["properties"]["subagent_type"]["enum"],
            json!(["general-purpose", "bash"])
        );
        assert!(t.description().contains("- bash: shell"));
        let req = t.parameters()["required"].to_string();
        assert!(req.contains("prompt") && req.contains("description"));
    }
}
