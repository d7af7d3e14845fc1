//! `DeerFlowSummarizationMiddleware` (`before_model`, plus `wrap_model_call` for the
//! projection): when the conversation crosses a trigger (tokens, message count, or a
//! fraction of the model's context window; OR semantics, the existing summary counts), the
//! older part is summarised into `summary_text` and the state keeps only the recent part:
//! `messages = [RemoveMessage(REMOVE_ALL), *preserved]`. The cutoff never separates an AI
//! tool-call message from its tool results, and the latest real user message is always
//! kept. Every later model request gets the summary projected in front of the messages.

use crate::util::{hidden_human, is_real_user_message, truncate_chars};
use crate::{
    Hook, HookOutcome, Middleware, MiddlewareError, ModelCall, ModelRequest, ModelResponse,
    RunContext,
};
use async_trait::async_trait;
use fawn_config::{ContextSize, ContextSizeKind, SummarizationConfig};
use fawn_llm::{
    ChatModel, ChatRequest, ModelRegistry, estimate_message_tokens, estimate_text_tokens,
};
use fawn_state::{Message, MessageKind, REMOVE_ALL_MESSAGES, StateUpdate, ThreadState};
use serde_json::Value;
use std::sync::Arc;

/// Name of the hidden message carrying the summary in model requests.
pub const SUMMARY_MESSAGE_NAME: &str = "summary";
/// Longest single message quoted in the summarisation prompt.
const MAX_CHARS_PER_MESSAGE: usize = 4000;

const DEFAULT_SUMMARY_PROMPT: &str = "You are compacting the history of a conversation between a user and an AI agent so the agent can keep working with less context.

Write a concise summary that keeps everything needed to continue: the user's goals and requests, decisions made, facts learned, files created or changed (with their paths), tool results that matter, open questions and the next steps. Keep names, numbers, paths and identifiers exactly. Write in the user's language. Answer with the summary only.

{previous_summary}Conversation to summarise:
{messages}";

/// Text of the projected summary message.
pub fn summary_projection_text(summary: &str) -> String {
    format!(
        "<conversation_summary>\nEarlier messages of this conversation were compacted into this summary:\n\n{summary}\n</conversation_summary>"
    )
}

pub struct DeerFlowSummarizationMiddleware {
    config: SummarizationConfig,
}

impl std::fmt::Debug for DeerFlowSummarizationMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeerFlowSummarizationMiddleware")
            .field("trigger", &self.config.trigger)
            .field("keep", &self.config.keep)
            .finish()
    }
}

/// What a summarisation would do to a message list.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryPlan {
    pub to_summarize: Vec<Message>,
    pub preserved: Vec<Message>,
}

impl DeerFlowSummarizationMiddleware {
    pub fn new(config: SummarizationConfig) -> Self {
        DeerFlowSummarizationMiddleware { config }
    }

    /// Whether any trigger fires for `total_tokens` over `message_count` messages.
    pub fn triggered(
        &self,
        total_tokens: usize,
        message_count: usize,
        context_window: Option<u64>,
    ) -> bool {
        let Some(triggers) = &self.config.trigger else {
            return false;
        };
        triggers.to_vec().iter().any(|t| match t.kind {
            ContextSizeKind::Tokens => t.value > 0.0 && total_tokens as f64 >= t.value,
            ContextSizeKind::Messages => t.value > 0.0 && message_count as f64 >= t.value,
            ContextSizeKind::Fraction => match context_window {
                Some(w) if w > 0 && t.value > 0.0 => total_tokens as f64 >= t.value * w as f64,
                _ => false,
            },
        })
    }

    /// Index of the first message kept by `keep` (before pair adjustment).
    fn raw_cutoff(keep: &ContextSize, messages: &[Message], context_window: Option<u64>) -> usize {
        let token_budget = |budget: f64| {
            let mut used = 0f64;
            let mut cut = messages.len();
            for (i, m) in messages.iter().enumerate().rev() {
                used += estimate_message_tokens(m) as f64;
                if used > budget {
                    break;
                }
                cut = i;
            }
            cut
        };
        match keep.kind {
            ContextSizeKind::Messages => {
                messages.len().saturating_sub(keep.value.max(0.0) as usize)
            }
            ContextSizeKind::Tokens => token_budget(keep.value),
            ContextSizeKind::Fraction => match context_window {
                Some(w) if w > 0 => token_budget(keep.value * w as f64),
                // Without a known window, fall back to DeerFlow's default keep.
                _ => messages.len().saturating_sub(20),
            },
        }
    }

    /// Splits `messages` into what gets summarised and what is kept.
    pub fn plan(&self, messages: &[Message], context_window: Option<u64>) -> Option<SummaryPlan> {
        let len = messages.len();
        let raw = Self::raw_cutoff(&self.config.keep, messages, context_window).min(len);
        // Never start the kept part on a tool result: move back to its AI message so the
        // pair stays together; if that leaves nothing to summarise, move forward instead.
        let mut cutoff = raw;
        while cutoff > 0 && cutoff < len && messages[cutoff].kind == MessageKind::Tool {
            cutoff -= 1;
        }
        if cutoff == 0 {
            cutoff = raw;
            while cutoff < len && messages[cutoff].kind == MessageKind::Tool {
                cutoff += 1;
            }
        }
        if cutoff == 0 || cutoff > len {
            return None;
        }
        let latest_user = messages.iter().rposition(is_real_user_message);
        let mut to_summarize = Vec::with_capacity(cutoff);
        let mut rescued = Vec::new();
        for (i, m) in messages[..cutoff].iter().enumerate() {
            let is_reminder = m
                .additional_kwargs
                .get("dynamic_context_reminder")
                .and_then(Value::as_bool)
                == Some(true);
            if Some(i) == latest_user || is_reminder {
                rescued.push(m.clone());
            } else {
                to_summarize.push(m.clone());
            }
        }
        if to_summarize.is_empty() {
            return None;
        }
        let mut preserved = rescued;
        preserved.extend(messages[cutoff..].iter().cloned());
        Some(SummaryPlan {
            to_summarize,
            preserved,
        })
    }

    /// The newest messages of `messages` that fit `trim_tokens_to_summarize`.
    fn trimmed<'a>(&self, messages: &'a [Message]) -> &'a [Message] {
        let Some(limit) = self.config.trim_tokens_to_summarize.filter(|l| *l > 0) else {
            return messages;
        };
        let mut used = 0u64;
        let mut start = messages.len();
        for (i, m) in messages.iter().enumerate().rev() {
            used += estimate_message_tokens(m) as u64;
            if used > limit && start < messages.len() {
                break;
            }
            start = i;
        }
        &messages[start..]
    }

    /// The summarisation prompt.
    pub fn prompt(&self, messages: &[Message], previous_summary: Option<&str>) -> String {
        let transcript = format_transcript(self.trimmed(messages));
        let previous = previous_summary
            .filter(|s| !s.trim().is_empty())
            .map(|s| format!("Summary of even earlier messages (merge it into yours):\n{s}\n\n"))
            .unwrap_or_default();
        match self
            .config
            .summary_prompt
            .as_deref()
            .filter(|p| !p.trim().is_empty())
        {
            Some(custom) => {
                let mut p = custom.replace("{previous_summary}", &previous);
                if p.contains("{messages}") {
                    p = p.replace("{messages}", &transcript);
                } else {
                    p = format!("{p}\n\n{previous}{transcript}");
                }
                p
            }
            None => DEFAULT_SUMMARY_PROMPT
                .replace("{previous_summary}", &previous)
                .replace("{messages}", &transcript),
        }
    }

    async fn summarize(
        &self,
        prompt: String,
        run_model: &Arc<dyn ChatModel>,
        models: &ModelRegistry,
    ) -> Result<String, fawn_llm::LlmError> {
        let request = ChatRequest {
            messages: vec![Message::human(prompt)].into(),
            purpose: "summarization",
            ..Default::default()
        };
        let configured: Option<Arc<dyn ChatModel>> = self
            .config
            .model_name
            .as_deref()
            .and_then(|n| models.get(n));
        if let Some(model) = configured {
            match model.invoke(request.clone()).await {
                Ok(m) => return Ok(m.text()),
                Err(e) => {
                    tracing::warn!(error = %e, "summarization model failed; using the run's model")
                }
            }
        }
        run_model.invoke(request).await.map(|m| m.text())
    }

    /// Compacts `state` when a trigger fires (or always, with `force`): the state update
    /// (`messages = [RemoveMessage(REMOVE_ALL), *preserved]`, `summary_text`) and what it
    /// did. `Ok(None)`: nothing to compact. The summary comes from `summarization.model_name`
    /// when configured (falling back to `run_model` when it fails). Also used by the
    /// gateway's manual compaction (`POST /api/threads/{id}/compact`).
    pub async fn compact(
        &self,
        state: &ThreadState,
        run_model: &Arc<dyn ChatModel>,
        models: &ModelRegistry,
        force: bool,
    ) -> Result<Option<Compaction>, fawn_llm::LlmError> {
        if state.messages.is_empty() {
            return Ok(None);
        }
        let summary = state.summary_text.as_deref().filter(|s| !s.is_empty());
        let window = run_model.info().context_window;
        if !force {
            let total = fawn_llm::estimate_tokens(&state.messages)
                + summary.map(estimate_text_tokens).unwrap_or(0);
            if !self.triggered(total, state.messages.len(), window) {
                return Ok(None);
            }
        }
        let Some(plan) = self.plan(&state.messages.to_vec(), window) else {
            return Ok(None);
        };
        let prompt = self.prompt(&plan.to_summarize, summary);
        let new_summary = self.summarize(prompt, run_model, models).await?;
        let new_summary = new_summary.trim();
        if new_summary.is_empty() {
            return Err(fawn_llm::LlmError::Malformed {
                message: "the summarization model returned an empty summary".into(),
            });
        }
        let removed = plan.to_summarize.len();
        let preserved = plan.preserved.len();
        let mut messages = Vec::with_capacity(preserved + 1);
        messages.push(Message::remove(REMOVE_ALL_MESSAGES));
        messages.extend(plan.preserved);
        Ok(Some(Compaction {
            update: StateUpdate {
                messages: Some(messages),
                summary_text: Some(Some(new_summary.to_string())),
                ..Default::default()
            },
            removed_message_count: removed,
            preserved_message_count: preserved,
        }))
    }
}

/// The result of [`DeerFlowSummarizationMiddleware::compact`].
#[derive(Clone, Debug, PartialEq)]
pub struct Compaction {
    /// `messages = [RemoveMessage(REMOVE_ALL), *preserved]`, `summary_text`.
    pub update: StateUpdate,
    pub removed_message_count: usize,
    pub preserved_message_count: usize,
}

fn format_transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let text = m.text();
        let text = truncate_chars(text.trim(), MAX_CHARS_PER_MESSAGE);
        let line = match &m.kind {
            MessageKind::Human => format!("Human: {text}"),
            k if k.is_ai() => {
                let mut s = format!("AI: {text}");
                for tc in &m.tool_calls {
                    let args = Value::Object(tc.args.clone()).to_string();
                    s.push_str(&format!(
                        "\n[called {}({})]",
                        tc.name,
                        truncate_chars(&args, 500)
                    ));
                }
                s
            }
            MessageKind::Tool => format!(
                "Tool result ({}): {text}",
                m.name.as_deref().unwrap_or("tool")
            ),
            MessageKind::System => format!("System: {text}"),
            _ => continue,
        };
        out.push_str(&line);
        out.push_str("\n\n");
    }
    out.trim_end().to_string()
}

#[async_trait]
impl Middleware for DeerFlowSummarizationMiddleware {
    fn name(&self) -> &str {
        "DeerFlowSummarizationMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::BeforeModel, Hook::WrapModelCall]
    }

    async fn before_model(
        &self,
        state: &ThreadState,
        ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        if !self.config.enabled {
            return Ok(HookOutcome::none());
        }
        match self.compact(state, &ctx.model, &ctx.models, false).await {
            Ok(Some(c)) => {
                tracing::info!(
                    thread_id = %ctx.thread_id,
                    summarized = c.removed_message_count,
                    preserved = c.preserved_message_count,
                    "conversation summarized"
                );
                Ok(HookOutcome::update(c.update))
            }
            Ok(None) => Ok(HookOutcome::none()),
            Err(e) => {
                tracing::warn!(error = %e, "summarization failed; history kept");
                Ok(HookOutcome::none())
            }
        }
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &ThreadState,
        _ctx: &RunContext,
        next: &dyn ModelCall,
    ) -> Result<ModelResponse, MiddlewareError> {
        if let Some(summary) = state
            .summary_text
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            let already = request
                .messages
                .first()
                .is_some_and(|m| m.name.as_deref() == Some(SUMMARY_MESSAGE_NAME));
            if !already {
                request.messages.insert(
                    0,
                    hidden_human(summary_projection_text(summary), SUMMARY_MESSAGE_NAME),
                );
            }
        }
        next.call(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_config::OneOrMany;
    use fawn_state::ToolCall;
    use serde_json::json;

    fn mw(keep: usize) -> DeerFlowSummarizationMiddleware {
        DeerFlowSummarizationMiddleware::new(SummarizationConfig {
            enabled: true,
            trigger: Some(OneOrMany::Many(vec![ContextSize {
                kind: ContextSizeKind::Messages,
                value: 4.0,
            }])),
            keep: ContextSize {
                kind: ContextSizeKind::Messages,
                value: keep as f64,
            },
            ..Default::default()
        })
    }

    #[test]
    fn triggers_or() {
        let m = DeerFlowSummarizationMiddleware::new(SummarizationConfig {
            trigger: Some(OneOrMany::Many(vec![
                ContextSize {
                    kind: ContextSizeKind::Tokens,
                    value: 1000.0,
                },
                ContextSize {
                    kind: ContextSizeKind::Fraction,
                    value: 0.5,
                },
            ])),
            ..Default::default()
        });
        assert!(!m.triggered(400, 3, Some(1000)));
        assert!(m.triggered(500, 3, Some(1000)));
        assert!(m.triggered(1000, 3, None));
        assert!(!m.triggered(999, 3, None));
        assert!(
            !DeerFlowSummarizationMiddleware::new(SummarizationConfig::default()).triggered(
                1 << 30,
                1000,
                None
            )
        );
    }

    #[test]
    fn cutoff_keeps_tool_pairs() {
        let msgs = vec![
            Message::human("a").with_id("1"),
            Message::ai("b").with_id("2"),
            Message::human("c").with_id("3"),
            Message::ai("")
                .with_id("4")
                .with_tool_calls(vec![ToolCall::new("ls", json!({}), "t")]),
            Message::tool("r", "t", None).with_id("5"),
            Message::ai("done").with_id("6"),
        ];
        // keep 2 would start at the tool result: moved back to its AI message.
        let plan = mw(2).plan(&msgs, None).unwrap();
        let kept: Vec<_> = plan
            .preserved
            .iter()
            .map(|m| m.id.clone().unwrap())
            .collect();
        // The latest user message (3) is rescued in front.
        assert_eq!(kept, ["3", "4", "5", "6"]);
        let gone: Vec<_> = plan
            .to_summarize
            .iter()
            .map(|m| m.id.clone().unwrap())
            .collect();
        assert_eq!(gone, ["1", "2"]);
    }
}
