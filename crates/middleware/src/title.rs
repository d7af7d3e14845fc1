//! `TitleMiddleware` (`after_model`): after the first exchange of a thread (exactly one real
//! user message and at least one AI answer, no title yet) sets `title`. Without
//! `title.model_name` the title is the user's text cut to 50 characters; with it, the named
//! model is asked for a short title (the local fallback is used when that fails).

use crate::util::is_real_user_message;
use crate::{Hook, HookOutcome, Middleware, MiddlewareError, RunContext};
use async_trait::async_trait;
use fawn_config::TitleConfig;
use fawn_llm::ChatRequest;
use fawn_state::{Content, Message, MessageKind, StateUpdate, ThreadState};
use serde_json::Value;

pub const DEFAULT_TITLE: &str = "New Conversation";
/// The local fallback is never longer than this (before the `...`).
pub const FALLBACK_MAX_CHARS: usize = 50;
/// Characters of each message shown to the title model.
const PROMPT_EXCERPT_CHARS: usize = 500;

const DEFAULT_PROMPT: &str = "Write a short title (at most {max_words} words) for the conversation below. Use the user's language. Answer with the title only: no quotes, no punctuation at the end, no explanation.

User: {user_msg}
Assistant: {assistant_msg}";

#[derive(Debug)]
pub struct TitleMiddleware {
    config: TitleConfig,
}

/// The text of message content: strings and text blocks, joined by newlines.
fn content_text(content: &Content) -> String {
    match content {
        Content::Text(s) => s.clone(),
        Content::Blocks(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => o.get("text").and_then(Value::as_str).map(str::to_string),
                _ => None,
            })
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

impl TitleMiddleware {
    pub fn new(config: TitleConfig) -> Self {
        TitleMiddleware { config }
    }

    fn max_chars(&self) -> usize {
        self.config.max_chars.clamp(10, 200)
    }

    /// Whether this state is the end of the first exchange of an untitled thread.
    pub fn should_title(&self, state: &ThreadState) -> bool {
        if !self.config.enabled || state.title.as_deref().is_some_and(|t| !t.is_empty()) {
            return false;
        }
        let users = state
            .messages
            .iter()
            .filter(|m| is_real_user_message(m))
            .count();
        let ais = state
            .messages
            .iter()
            .filter(|m| m.kind == MessageKind::Ai)
            .count();
        users == 1 && ais >= 1
    }

    /// First user text cut to `min(max_chars, 50)` characters (right-stripped) plus `...`,
    /// or the whole text when short enough, or `New Conversation` when empty.
    pub fn fallback_title(&self, user_text: &str) -> String {
        let limit = self.max_chars().min(FALLBACK_MAX_CHARS);
        if user_text.chars().count() > limit {
            let cut = crate::util::truncate_chars(user_text, limit);
            format!("{}...", cut.trim_end())
        } else if user_text.is_empty() {
            DEFAULT_TITLE.to_string()
        } else {
            user_text.to_string()
        }
    }

    /// A model answer made into a title: thinking dropped (as
    /// [`fawn_llm::answer::strip_think`] does), its first non-empty line with surrounding
    /// quotes removed, cut to `max_chars`.
    pub fn parse_title(&self, raw: &str) -> String {
        let no_think = fawn_llm::answer::strip_think(raw);
        let line = no_think
            .trim()
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
            .trim();
        let t = line.trim_matches(|c| c == '"' || c == '\'' || c == '“' || c == '”');
        crate::util::truncate_chars(t.trim(), self.max_chars()).to_string()
    }

    fn prompt(&self, user: &str, assistant: &str) -> String {
        let template = self
            .config
            .prompt_template
            .as_deref()
            .filter(|t| !t.trim().is_empty())
            .unwrap_or(DEFAULT_PROMPT);
        template
            .replace("{max_words}", &self.config.max_words.to_string())
            .replace(
                "{user_msg}",
                crate::util::truncate_chars(user, PROMPT_EXCERPT_CHARS),
            )
            .replace(
                "{assistant_msg}",
                crate::util::truncate_chars(assistant, PROMPT_EXCERPT_CHARS),
            )
    }

    async fn generate(&self, state: &ThreadState, ctx: &RunContext) -> String {
        let first = |pred: fn(&Message) -> bool| {
            state
                .messages
                .iter()
                .find(|m| pred(m))
                .map(|m| content_text(&m.content))
                .unwrap_or_default()
        };
        let user = first(is_real_user_message);
        let fallback = self.fallback_title(&user);
        let Some(name) = self.config.model_name.as_deref() else {
            return fallback;
        };
        let Some(model) = ctx.models.get(name) else {
            tracing::warn!(
                model = name,
                "title.model_name is not a configured model; using the fallback title"
            );
            return fallback;
        };
        let assistant = first(|m| m.kind == MessageKind::Ai);
        let request = ChatRequest {
            messages: vec![Message::human(self.prompt(&user, &assistant))].into(),
            purpose: "title",
            ..Default::default()
        };
        match model.invoke(request).await {
            Ok(answer) => {
                let t = self.parse_title(&content_text(&answer.content));
                if t.is_empty() { fallback } else { t }
            }
            Err(e) => {
                tracing::warn!(error = %e, "title model failed; using the fallback title");
                fallback
            }
        }
    }
}

#[async_trait]
impl Middleware for TitleMiddleware {
    fn name(&self) -> &str {
        "TitleMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::AfterModel]
    }

    async fn after_model(
        &self,
        state: &ThreadState,
        ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        if !self.should_title(state) {
            return Ok(HookOutcome::none());
        }
        let title = self.generate(state, ctx).await;
        Ok(HookOutcome::update(StateUpdate {
            title: Some(Some(title)),
            ..Default::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_rules() {
        let t = TitleMiddleware::new(TitleConfig::default());
        assert_eq!(t.fallback_title(""), DEFAULT_TITLE);
        assert_eq!(t.fallback_title("short"), "short");
        let long = format!("{} tail", "a".repeat(49));
        // 50 chars = 49 a's + space; right-stripped before the dots.
        assert_eq!(t.fallback_title(&long), format!("{}...", "a".repeat(49)));
        let exact = "b".repeat(50);
        assert_eq!(t.fallback_title(&exact), exact);
        let small = TitleMiddleware::new(TitleConfig {
            max_chars: 12,
            ..Default::default()
        });
        assert_eq!(
            small.fallback_title("hello wonderful world"),
            "hello wonder..."
        );
    }

    #[test]
    fn parse_strips_think_and_quotes() {
        let t = TitleMiddleware::new(TitleConfig::default());
        assert_eq!(
            t.parse_title("<think>hmm\nx</think>\n\"Rust Ports\"\n"),
            "Rust Ports"
        );
        assert_eq!(t.parse_title(&"x".repeat(100)), "x".repeat(60));
    }

    /// Thinking is read as `fawn_llm::answer::strip_think` reads it: an answer cut off while
    /// thinking has no title (the caller falls back), a tag after the title is text.
    #[test]
    fn unclosed_think_tags() {
        let t = TitleMiddleware::new(TitleConfig::default());
        assert_eq!(
            t.parse_title(
                "<think>the user wants
a title"
            ),
            ""
        );
        assert_eq!(t.parse_title("<THINK>x</THINK>Ports"), "Ports");
        assert_eq!(t.parse_title("Ports <think>x"), "Ports <think>x");
    }
}
