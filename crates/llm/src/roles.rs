//! What each message of a conversation is to a provider: the one place that classifies a
//! message's kind for the four providers (Anthropic, Gemini, Ollama, OpenAI-compatible), maps
//! tool-call ids to tool names, collects a leading system prompt and merges same-role turns.
//! The providers build their wire bodies from these; where they still differ (which kinds
//! they accept, what a legacy function message becomes, how a `ChatMessage`'s free-form role
//! is read) the difference is written in [`classify`], pinned by its table test.

use crate::LlmError;
use fawn_state::{Message, MessageKind};
use std::collections::HashMap;

/// The provider a conversation is converted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    Anthropic,
    Gemini,
    Ollama,
    OpenAi,
}

impl Provider {
    fn name(self) -> &'static str {
        match self {
            Provider::Anthropic => "Anthropic",
            Provider::Gemini => "Gemini",
            Provider::Ollama => "Ollama",
            Provider::OpenAi => "OpenAI",
        }
    }
}

/// The role a message takes in a provider's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role<'a> {
    /// System text. Providers without a mid-conversation system role take the leading ones
    /// as the system prompt ([`SystemPrompt`]) and send later ones as user text.
    System,
    User,
    Assistant,
    /// A tool's result (answering the message's `tool_call_id`).
    Tool,
    /// A legacy function result (OpenAI's `function` role).
    Function,
    /// A `ChatMessage`'s own role, none of the above, sent as it is (OpenAI only).
    Named(&'a str),
}

impl Role<'_> {
    /// The OpenAI chat role of this role.
    pub fn openai(&self) -> &str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::Function => "function",
            Role::Named(r) => r,
        }
    }
}

fn bad(message: String) -> LlmError {
    LlmError::BadRequest {
        status: 400,
        message,
    }
}

/// The role message `i` takes when sent to `provider`; `None` when it is not sent
/// (`RemoveMessage`). An error (400) for a message the provider cannot take.
pub fn classify(m: &Message, i: usize, provider: Provider) -> Result<Option<Role<'_>>, LlmError> {
    use Provider::*;
    Ok(Some(match &m.kind {
        MessageKind::Remove => return Ok(None),
        MessageKind::Human => Role::User,
        MessageKind::Ai | MessageKind::AiChunk => Role::Assistant,
        MessageKind::System => Role::System,
        MessageKind::Tool => Role::Tool,
        MessageKind::Function => match provider {
            OpenAi => Role::Function,
            // Ollama's `tool` role carries a tool name, which is what a function result is.
            Ollama => Role::Tool,
            Anthropic | Gemini => {
                return Err(bad(format!(
                    "messages[{i}]: legacy function messages cannot be sent to {}",
                    provider.name()
                )));
            }
        },
        MessageKind::Chat => {
            let role = m.role.as_deref();
            match (provider, role) {
                (_, Some("assistant")) => Role::Assistant,
                (Gemini, Some("model")) => Role::Assistant,
                (Ollama | OpenAi, Some("system")) => Role::System,
                (OpenAi, Some("tool")) => Role::Tool,
                (OpenAi, Some("function")) => Role::Function,
                (OpenAi, Some(r)) if r != "user" => Role::Named(r),
                _ => Role::User,
            }
        }
        MessageKind::Other(t) => {
            if t.starts_with("Human") {
                Role::User
            } else if t.starts_with("AI") {
                Role::Assistant
            } else if t.starts_with("System") && matches!(provider, Ollama | OpenAi) {
                Role::System
            } else if t.starts_with("Tool") && provider == OpenAi {
                Role::Tool
            } else {
                return Err(bad(format!(
                    "messages[{i}]: message type '{t}' cannot be sent to a chat model"
                )));
            }
        }
    }))
}

/// Tool-call id → tool name, over every tool call the conversation's AI messages made (for
/// providers whose tool results name the tool rather than the call).
pub fn tool_call_names<'a>(
    messages: impl IntoIterator<Item = &'a Message>,
) -> HashMap<String, String> {
    let mut names = HashMap::new();
    for m in messages {
        for tc in &m.tool_calls {
            if let Some(id) = &tc.id {
                names.insert(id.clone(), tc.name.clone());
            }
        }
    }
    names
}

/// The system prompt of a provider without a mid-conversation system role: the texts of the
/// system messages before any other (empty ones skipped), joined by a blank line. Later
/// system messages are not part of it.
#[derive(Debug)]
pub struct SystemPrompt {
    texts: Vec<String>,
    leading: bool,
}

impl Default for SystemPrompt {
    fn default() -> Self {
        SystemPrompt {
            texts: Vec::new(),
            leading: true,
        }
    }
}

impl SystemPrompt {
    /// Takes `m` (of `role`) into the prompt when it is a leading system message (`true`:
    /// the caller sends nothing for it); any other message ends the leading ones.
    pub fn take(&mut self, m: &Message, role: Role<'_>) -> bool {
        if self.leading && role == Role::System {
            let t = m.text();
            if !t.is_empty() {
                self.texts.push(t);
            }
            return true;
        }
        self.leading = false;
        false
    }

    pub fn text(self) -> Option<String> {
        (!self.texts.is_empty()).then(|| self.texts.join("\n\n"))
    }
}

/// Appends a turn of `role` made of `parts`: nothing when `parts` is empty, merged into the
/// last turn when it has the same role (providers that require alternating turns).
pub fn push_turn<R: PartialEq, P>(turns: &mut Vec<(R, Vec<P>)>, role: R, parts: Vec<P>) {
    if parts.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some((r, p)) if *r == role => p.extend(parts),
        _ => turns.push((role, parts)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_state::ToolCall;
    use serde_json::json;

    fn msg(kind: MessageKind, role: Option<&str>) -> Message {
        let mut m = Message::human("x");
        m.kind = kind;
        m.role = role.map(str::to_string);
        m
    }

    /// Every kind × provider: the role it takes, `-` for not sent, `ERR` for refused.
    #[test]
    fn kind_by_provider_table() {
        use MessageKind as K;
        let other = |t: &str| K::Other(t.to_string());
        #[rustfmt::skip]
        let table: Vec<(Message, [&str; 4])> = vec![
            //                                           Anthropic    Gemini       Ollama       OpenAI
            (msg(K::Human, None),                        ["user",      "user",      "user",      "user"]),
            (msg(K::Ai, None),                           ["assistant", "assistant", "assistant", "assistant"]),
            (msg(K::AiChunk, None),                      ["assistant", "assistant", "assistant", "assistant"]),
            (msg(K::System, None),                       ["system",    "system",    "system",    "system"]),
            (msg(K::Tool, None),                         ["tool",      "tool",      "tool",      "tool"]),
            (msg(K::Function, None),                     ["ERR",       "ERR",       "tool",      "function"]),
            (msg(K::Remove, None),                       ["-",         "-",         "-",         "-"]),
            (msg(K::Chat, None),                         ["user",      "user",      "user",      "user"]),
            (msg(K::Chat, Some("user")),                 ["user",      "user",      "user",      "user"]),
            (msg(K::Chat, Some("assistant")),            ["assistant", "assistant", "assistant", "assistant"]),
            (msg(K::Chat, Some("model")),                ["user",      "assistant", "user",      "model"]),
            (msg(K::Chat, Some("system")),               ["user",      "user",      "system",    "system"]),
            (msg(K::Chat, Some("tool")),                 ["user",      "user",      "user",      "tool"]),
            (msg(K::Chat, Some("function")),             ["user",      "user",      "user",      "function"]),
            (msg(K::Chat, Some("developer")),            ["user",      "user",      "user",      "developer"]),
            (msg(other("HumanMessageChunk"), None),      ["user",      "user",      "user",      "user"]),
            (msg(other("AIMessageChunk2"), None),        ["assistant", "assistant", "assistant", "assistant"]),
            (msg(other("SystemMessageChunk"), None),     ["ERR",       "ERR",       "system",    "system"]),
            (msg(other("ToolMessageChunk"), None),       ["ERR",       "ERR",       "ERR",       "tool"]),
            (msg(other("FunctionMessageChunk"), None),   ["ERR",       "ERR",       "ERR",       "ERR"]),
            (msg(other("widget"), None),                 ["ERR",       "ERR",       "ERR",       "ERR"]),
        ];
        let providers = [
            Provider::Anthropic,
            Provider::Gemini,
            Provider::Ollama,
            Provider::OpenAi,
        ];
        for (m, expected) in &table {
            for (p, want) in providers.iter().zip(expected) {
                let got = match classify(m, 3, *p) {
                    Ok(None) => "-".to_string(),
                    Ok(Some(Role::Named(r))) => r.to_string(),
                    Ok(Some(r)) => match r {
                        Role::System => "system",
                        Role::User => "user",
                        Role::Assistant => "assistant",
                        Role::Tool => "tool",
                        Role::Function => "function",
                        Role::Named(_) => unreachable!(),
                    }
                    .to_string(),
                    Err(e) => {
                        assert!(e.to_string().contains("messages[3]"), "{e}");
                        "ERR".to_string()
                    }
                };
                assert_eq!(got, *want, "{:?} / {:?} for {p:?}", m.kind, m.role);
            }
        }
    }

    #[test]
    fn refusals_say_why() {
        let f = msg(MessageKind::Function, None);
        let e = classify(&f, 0, Provider::Gemini).unwrap_err();
        assert!(
            matches!(
                &e,
                LlmError::BadRequest { status: 400, message }
                    if message == "messages[0]: legacy function messages cannot be sent to Gemini"
            ),
            "{e:?}"
        );
        let o = msg(MessageKind::Other("widget".into()), None);
        let e = classify(&o, 2, Provider::OpenAi).unwrap_err();
        assert!(
            matches!(
                &e,
                LlmError::BadRequest { status: 400, message }
                    if message == "messages[2]: message type 'widget' cannot be sent to a chat model"
            ),
            "{e:?}"
        );
    }

    #[test]
    fn openai_roles_are_the_wire_strings() {
        let chat = msg(MessageKind::Chat, Some("developer"));
        let r = classify(&chat, 0, Provider::OpenAi).unwrap().unwrap();
        assert_eq!(r.openai(), "developer");
        assert_eq!(Role::Assistant.openai(), "assistant");
        assert_eq!(Role::Function.openai(), "function");
    }

    #[test]
    fn the_system_prompt_is_the_leading_system_messages() {
        let sys = |t: &str| Message::system(t);
        let mut p = SystemPrompt::default();
        assert!(p.take(&sys("a"), Role::System));
        assert!(p.take(&sys(""), Role::System));
        assert!(p.take(&sys("b"), Role::System));
        assert!(!p.take(&Message::human("hi"), Role::User));
        assert!(
            !p.take(&sys("late"), Role::System),
            "a later one is not the prompt"
        );
        assert_eq!(p.text().as_deref(), Some("a\n\nb"));
        assert_eq!(SystemPrompt::default().text(), None);
    }

    #[test]
    fn turns_merge_by_role_and_skip_empty_ones() {
        let mut turns: Vec<(&str, Vec<i32>)> = Vec::new();
        push_turn(&mut turns, "user", vec![1]);
        push_turn(&mut turns, "user", vec![2]);
        push_turn(&mut turns, "model", vec![]);
        push_turn(&mut turns, "model", vec![3]);
        push_turn(&mut turns, "user", vec![4]);
        assert_eq!(
            turns,
            vec![("user", vec![1, 2]), ("model", vec![3]), ("user", vec![4])]
        );
    }

    #[test]
    fn tool_call_ids_name_their_tools() {
        let mut ai = Message::ai("");
        let mut unnamed = ToolCall::new("read", json!({}), "c2");
        unnamed.id = None;
        ai.tool_calls = vec![ToolCall::new("ls", json!({}), "c1"), unnamed];
        let names = tool_call_names([&ai, &Message::human("x")]);
        assert_eq!(names.len(), 1);
        assert_eq!(names["c1"], "ls");
    }
}
