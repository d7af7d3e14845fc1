//! The demo model: what `fawn serve` answers with when no model is configured. It runs in
//! the process (no port, no HTTP), streams like a provider, and says in every answer that it
//! is not a language model.

use crate::scripted::{ScriptedTurn, turn_chunks};
use crate::{ChatModel, ChatRequest, ChunkStream, LlmError, ModelInfo};
use async_trait::async_trait;
use fawn_state::MessageKind;
use futures::StreamExt;

/// The name the demo model is registered under.
pub const DEMO_MODEL_NAME: &str = "fawn-demo";

/// How every demo answer starts.
pub const DEMO_PREFIX: &str = "This is the Fawn demo model: no language model is configured, so this answer is generated locally.";

/// Echoes the user's last words (or the last tool result) behind [`DEMO_PREFIX`].
#[derive(Debug)]
pub struct DemoModel {
    info: ModelInfo,
}

impl Default for DemoModel {
    fn default() -> Self {
        DemoModel {
            info: ModelInfo {
                name: DEMO_MODEL_NAME.to_string(),
                model: DEMO_MODEL_NAME.to_string(),
                provider: "demo".to_string(),
                display_name: Some("Fawn demo model (no LLM configured)".to_string()),
                ..Default::default()
            },
        }
    }
}

/// The user's own words: text wrapped between boundary lines (`--- BEGIN USER INPUT ---` …
/// `--- END USER INPUT ---`, a prompt-injection defence) is echoed without them.
fn quoted(text: &str) -> &str {
    const BEGIN: &str = "--- BEGIN USER INPUT ---";
    const END: &str = "--- END USER INPUT ---";
    match (text.find(BEGIN), text.rfind(END)) {
        (Some(b), Some(e)) if b + BEGIN.len() <= e => text[b + BEGIN.len()..e].trim(),
        _ => text.trim(),
    }
}

fn clip(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        None => s.to_string(),
        Some((at, _)) => format!("{}…", &s[..at]),
    }
}

/// The demo answer to a conversation.
pub fn demo_answer(request: &ChatRequest) -> String {
    let last = request
        .messages
        .iter()
        .rev()
        .find(|m| matches!(m.kind, MessageKind::Human | MessageKind::Tool));
    match last {
        Some(m) if m.kind == MessageKind::Tool => {
            format!("{DEMO_PREFIX} The tool returned: {}", clip(&m.text(), 500))
        }
        Some(m) if !m.text().trim().is_empty() => {
            format!("{DEMO_PREFIX} You said: {}", quoted(&m.text()))
        }
        _ => format!("{DEMO_PREFIX} Configure a model in config.yaml to get real answers."),
    }
}

#[async_trait]
impl ChatModel for DemoModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChunkStream, LlmError> {
        let turn = ScriptedTurn::Text(demo_answer(&request));
        let chunks = turn_chunks(&turn, &self.info.model);
        Ok(futures::stream::iter(chunks.into_iter().map(Ok)).boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_state::Message;

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            messages: messages.into_iter().collect(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn echoes_the_user_and_says_what_it_is() {
        let m = DemoModel::default();
        let a = m
            .invoke(request(vec![
                Message::system("be nice"),
                Message::human("--- BEGIN USER INPUT ---\nhello\n--- END USER INPUT ---"),
            ]))
            .await
            .unwrap();
        assert_eq!(a.text(), format!("{DEMO_PREFIX} You said: hello"));
        let empty = demo_answer(&request(vec![Message::system("x")]));
        assert!(empty.ends_with("Configure a model in config.yaml to get real answers."));
    }
}
