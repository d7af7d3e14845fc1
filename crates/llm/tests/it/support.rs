use fawn_config::AppConfig;
use fawn_llm::{
    ChatModel, ChatRequest, LlmError, ModelRegistry, ProviderOptions, RetryEvent, RetryPolicy,
};
use fawn_state::Message;
use fawn_testkit::MockLlm;
use futures::StreamExt;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A model built from one `models:` entry through the registry, plus every retry it made.
pub struct Built {
    pub model: Arc<dyn ChatModel>,
    pub retries: Arc<Mutex<Vec<RetryEvent>>>,
}

impl Built {
    pub fn retries(&self) -> Vec<RetryEvent> {
        self.retries.lock().unwrap().clone()
    }
}

/// Merges `overrides` into an entry pointing at `mock` and builds it via the registry, with
/// short backoff delays (Retry-After is still honoured as given).
pub fn build(base: Value, overrides: Value) -> Built {
    let mut entry = base;
    if let (Some(e), Value::Object(o)) = (entry.as_object_mut(), overrides) {
        e.extend(o);
    }
    let config: AppConfig = serde_json::from_value(json!({ "models": [entry] })).unwrap();
    let retries = Arc::new(Mutex::new(Vec::new()));
    let sink = retries.clone();
    let options = ProviderOptions {
        retry_observer: Some(Arc::new(move |e: &RetryEvent| {
            sink.lock().unwrap().push(e.clone())
        })),
        retry_delays: Some(RetryPolicy {
            max_retries: 0,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(20),
            retry_after_cap: Duration::from_secs(60),
        }),
        http_client: None,
    };
    let registry = ModelRegistry::from_config_with(&config, &options)
        .unwrap_or_else(|issues| panic!("config issues: {issues:?}"));
    Built {
        model: registry.default_model().unwrap(),
        retries,
    }
}

/// An OpenAI-compatible model of class `use_` on `mock`.
pub fn openai(mock: &MockLlm, use_: &str, overrides: Value) -> Built {
    build(
        json!({
            "name": "test-model",
            "use": use_,
            "model": "gpt-test",
            "base_url": mock.base_url(),
            "api_key": "sk-test",
        }),
        overrides,
    )
}

/// A Claude model on `mock`.
pub fn claude(mock: &MockLlm, overrides: Value) -> Built {
    build(
        json!({
            "name": "claude",
            "use": "langchain_anthropic:ChatAnthropic",
            "model": "claude-test",
            "base_url": mock.url(),
            "api_key": "ant-key",
        }),
        overrides,
    )
}

/// A Gemini model on `mock` (native API, key in `x-goog-api-key`).
pub fn gemini(mock: &MockLlm, overrides: Value) -> Built {
    build(
        json!({
            "name": "gemini",
            "use": "langchain_google_genai:ChatGoogleGenerativeAI",
            "model": "gemini-2.5-flash",
            "base_url": mock.url(),
            "api_key": "g-key",
        }),
        overrides,
    )
}

/// An Ollama model on `mock` (native `/api/chat`).
pub fn ollama(mock: &MockLlm, overrides: Value) -> Built {
    build(
        json!({
            "name": "ollama",
            "use": "langchain_ollama:ChatOllama",
            "model": "qwen3:8b",
            "base_url": mock.url(),
        }),
        overrides,
    )
}

/// A tool taking one string `key`.
pub fn lookup_tool() -> fawn_llm::ToolSpec {
    fawn_llm::ToolSpec {
        name: "lookup".into(),
        description: "Look up a key".into(),
        parameters: json!({"type": "object", "properties": {"key": {"type": "string"}},
                           "required": ["key"], "additionalProperties": false})
        .into(),
    }
}

pub fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![Message::system("You are terse."), Message::human(text)].into(),
        ..Default::default()
    }
}

/// Every chunk until the stream ends, and the error that ended it, if any.
pub async fn drain(
    model: &Arc<dyn ChatModel>,
    req: ChatRequest,
) -> (Vec<Message>, Option<LlmError>) {
    let mut stream = match model.stream(req).await {
        Ok(s) => s,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut chunks = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(c) => chunks.push(c),
            Err(e) => return (chunks, Some(e)),
        }
    }
    (chunks, None)
}
