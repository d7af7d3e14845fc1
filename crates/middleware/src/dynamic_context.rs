//! `DynamicContextMiddleware` (`before_agent`): the date and the user's memory reach the
//! model as messages, not in the (static, cacheable) system prompt.
//!
//! On the first run of a thread the current user message `X` is replaced through an "id
//! swap": a hidden `SystemMessage` with `X`'s id carries
//! `<system-reminder>\n<current_date>2026-05-08, Friday</current_date>\n</system-reminder>`,
//! then (when memory has something) a hidden `HumanMessage` `X.id + "__memory"` carries the
//! `<memory>` block, then the user's message comes back as `X.id + "__user"`. The memory is
//! frozen from then on (prefix-cache friendly); on a later turn only a changed date is
//! inserted, the same way. DeerFlow's UI knows the `__user` suffix.

use crate::util::HIDE_FROM_UI;
use crate::{Hook, HookOutcome, Middleware, MiddlewareError, RunContext};
use async_trait::async_trait;
use fawn_memory::MemoryReader;
use fawn_state::{Message, MessageKind, Messages, StateUpdate, ThreadState};
use serde_json::Value;
use std::sync::Arc;

pub const REMINDER_MARKER: &str = "dynamic_context_reminder";
pub const REMINDER_DATE: &str = "reminder_date";
pub const USER_SUFFIX: &str = "__user";
pub const MEMORY_SUFFIX: &str = "__memory";

/// `2026-05-08, Friday`.
pub fn format_date(date: chrono::NaiveDate) -> String {
    date.format("%Y-%m-%d, %A").to_string()
}

/// The date reminder text.
pub fn date_reminder_text(date: chrono::NaiveDate) -> String {
    format!(
        "<system-reminder>\n<current_date>{}</current_date>\n</system-reminder>",
        format_date(date)
    )
}

pub struct DynamicContextMiddleware {
    memory: Option<Arc<dyn MemoryReader>>,
    /// Fixed "today" (tests); `None` = the local date.
    today: Option<chrono::NaiveDate>,
}

impl std::fmt::Debug for DynamicContextMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicContextMiddleware")
            .field("memory", &self.memory.is_some())
            .finish()
    }
}

impl DynamicContextMiddleware {
    /// `memory`: where the `<memory>` block comes from (`None`: date only).
    pub fn new(memory: Option<Arc<dyn MemoryReader>>) -> Self {
        DynamicContextMiddleware {
            memory,
            today: None,
        }
    }

    /// Uses `date` as today (tests).
    pub fn with_today(mut self, date: chrono::NaiveDate) -> Self {
        self.today = Some(date);
        self
    }

    fn today(&self) -> chrono::NaiveDate {
        self.today
            .unwrap_or_else(|| chrono::Local::now().date_naive())
    }
}

fn is_reminder(m: &Message) -> bool {
    m.additional_kwargs
        .get(REMINDER_MARKER)
        .and_then(Value::as_bool)
        == Some(true)
}

/// The date of the newest reminder in the thread.
fn last_reminder_date(messages: &Messages) -> Option<String> {
    messages
        .iter()
        .rev()
        .filter(|m| is_reminder(m))
        .find_map(|m| {
            m.additional_kwargs
                .get(REMINDER_DATE)
                .and_then(Value::as_str)
                .map(str::to_string)
        })
}

/// Index of the current user message: the last human message that is not a reminder, a
/// summary, a memory block or an already swapped message.
fn current_user_message(messages: &Messages) -> Option<usize> {
    let i = messages.iter().rposition(|m| {
        m.kind == MessageKind::Human
            && !is_reminder(m)
            && m.name.as_deref() != Some("summary")
            && !m
                .id
                .as_deref()
                .is_some_and(|id| id.ends_with(MEMORY_SUFFIX))
    })?;
    let id = messages[i].id.as_deref()?;
    (!id.is_empty() && !id.ends_with(USER_SUFFIX)).then_some(i)
}

fn hidden(mut m: Message) -> Message {
    m.additional_kwargs
        .insert(HIDE_FROM_UI.into(), Value::Bool(true));
    m
}

#[async_trait]
impl Middleware for DynamicContextMiddleware {
    fn name(&self) -> &str {
        "DynamicContextMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::BeforeAgent]
    }

    async fn before_agent(
        &self,
        state: &ThreadState,
        ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        let today = self.today();
        let today_key = today.format("%Y-%m-%d").to_string();
        let previous = last_reminder_date(&state.messages);
        if previous.as_deref() == Some(today_key.as_str()) {
            return Ok(HookOutcome::none());
        }
        let Some(idx) = current_user_message(&state.messages) else {
            return Ok(HookOutcome::none());
        };
        let user = &state.messages[idx];
        let id = user.id.clone().unwrap_or_default();
        let mut reminder = hidden(Message::system(date_reminder_text(today)).with_id(id.clone()));
        reminder
            .additional_kwargs
            .insert(REMINDER_MARKER.into(), Value::Bool(true));
        reminder
            .additional_kwargs
            .insert(REMINDER_DATE.into(), Value::String(today_key));
        let mut out = vec![reminder];
        // Memory only on the thread's first turn; it stays frozen afterwards.
        let memory_on =
            ctx.settings.app.memory.enabled && ctx.settings.app.memory.injection_enabled;
        if previous.is_none()
            && memory_on
            && let Some(reader) = &self.memory
            && let Some(block) = reader
                .memory_block(&ctx.user_id, ctx.options.agent_name.as_deref())
                .await
        {
            out.push(
                hidden(Message::human(block))
                    .with_id(format!("{id}{MEMORY_SUFFIX}"))
                    .with_name("memory"),
            );
        }
        let mut moved = user.clone();
        moved.id = Some(format!("{id}{USER_SUFFIX}"));
        out.push(moved);
        Ok(HookOutcome::update(StateUpdate::messages(out)))
    }
}
