//! The record of every request the mock received.

use serde_json::Value;
use std::collections::BTreeMap;

/// One request as the mock received it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    /// Path without the query string.
    pub path: String,
    pub query: Option<String>,
    /// Header names lowercased; repeated headers joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON (`None` when empty or not JSON).
    pub body: Option<Value>,
    /// The raw body as text (lossy UTF-8).
    pub body_text: String,
}

impl RecordedRequest {
    /// A header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The JSON body, or `Value::Null`.
    pub fn json(&self) -> &Value {
        static NULL: Value = Value::Null;
        self.body.as_ref().unwrap_or(&NULL)
    }

    /// `body.messages` (empty when absent).
    pub fn messages(&self) -> &[Value] {
        self.json()
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// True for chat calls: OpenAI chat completions, Anthropic messages, Gemini
    /// `generateContent`/`streamGenerateContent` and Ollama `/api/chat`.
    pub fn is_chat(&self) -> bool {
        self.method == "POST"
            && (is_openai_chat_path(&self.path)
                || is_anthropic_path(&self.path)
                || crate::gemini::route(&self.path).is_some()
                || crate::ollama::is_chat_path(&self.path))
    }
}

pub(crate) fn is_openai_chat_path(path: &str) -> bool {
    matches!(path, "/v1/chat/completions" | "/chat/completions")
}

pub(crate) fn is_anthropic_path(path: &str) -> bool {
    matches!(path, "/v1/messages" | "/messages")
}

pub(crate) fn is_models_path(path: &str) -> bool {
    matches!(path, "/v1/models" | "/models")
}
