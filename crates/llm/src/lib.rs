//! Talking to language models.
//!
//! Owns: the [`ChatModel`] trait (streaming first; `invoke` is a fold of the stream), the
//! request/response types the agent uses, typed [`LlmError`]s that say what is worth a retry,
//! the providers (OpenAI-compatible on async-openai, native Anthropic Messages, native Gemini
//! `generateContent`, native Ollama `/api/chat`), the registry that maps DeerFlow `use:` paths
//! in `config.yaml` to them, a cheap token estimate, and how a one-shot answer is read
//! ([`answer`]: `<think>` stripping, JSON extraction). Must never know about HTTP routes,
//! storage, tools' behaviour or middlewares; it only sees messages in and message chunks out.

pub mod answer;
pub mod anthropic;
pub mod content;
pub mod demo;
pub mod error;
pub mod gemini;
mod idle;
pub mod observed;
pub mod ollama;
pub mod openai;
pub mod registry;
pub mod retry;
pub mod roles;
pub mod scripted;
mod settings;
pub mod tokens;
mod wire_stream;

pub use anthropic::Anthropic;
pub use error::HttpError;
pub use gemini::Gemini;
pub use ollama::Ollama;
pub use openai::OpenAiCompatible;
pub use registry::{
    MODEL_POOL_MAX_IDLE, ProviderOptions, build_model, model_http_builder, supported_use_values,
    validate_models,
};
pub use retry::{RetryEvent, RetryObserver, RetryPolicy};
pub use settings::{DEFAULT_STREAM_CHUNK_TIMEOUT, DEFAULT_TIMEOUT};
pub use tokens::{estimate_message_tokens, estimate_text_tokens, estimate_tokens};

use async_trait::async_trait;
use fawn_state::{ChunkAccumulator, Message, Messages};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// Outgoing request headers plus the current span's `traceparent` (when tracing is on).
pub(crate) fn traced(mut headers: http::HeaderMap) -> http::HeaderMap {
    fawn_telemetry::trace::inject(&mut headers);
    headers
}

/// A tool the model may call: name, description and a JSON Schema for its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// Shared with the tool that owns it: specs are built for every run, and a deep copy of
    /// each schema per run is measurable. Compared by value.
    pub parameters: Arc<Value>,
}

/// One model call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatRequest {
    /// The whole conversation, system messages included (normally one, first).
    pub messages: Messages,
    /// Shared: the same specs go out on every call of a run.
    pub tools: Arc<[ToolSpec]>,
    /// OpenAI `tool_choice` (`"auto"`, `"none"`, `{"type":"function",…}`); `None` = provider default.
    pub tool_choice: Option<Value>,
    /// Thinking already resolved against the model's `supports_thinking`.
    pub thinking_enabled: bool,
    /// Only sent when the model `supports_reasoning_effort`.
    pub reasoning_effort: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    /// Extra request parameters merged into the provider payload.
    pub extra: Map<String, Value>,
    /// What the call is for (`title`, `summarization`, `memory`, …; empty: a step of an
    /// agent loop). Never sent; traces and logs name it.
    pub purpose: &'static str,
}

/// What is known about a configured model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelInfo {
    /// The config `name` (what runs pass as `model_name`).
    pub name: String,
    /// The provider's model id.
    pub model: String,
    /// `openai`, `anthropic`, `google_genai`, `ollama`, `mock`, …
    pub provider: String,
    pub display_name: Option<String>,
    pub description: Option<String>,
    pub supports_thinking: bool,
    pub supports_reasoning_effort: bool,
    pub supports_vision: bool,
    pub context_window: Option<u64>,
}

/// A stream of `AIMessageChunk` deltas.
pub type ChunkStream = BoxStream<'static, Result<Message, LlmError>>;

/// A chat model. Implementations stream; [`ChatModel::invoke`] folds the stream.
///
/// Dropping the returned stream must abort the underlying request.
#[async_trait]
pub trait ChatModel: Send + Sync {
    fn info(&self) -> &ModelInfo;

    /// Starts a call and returns its chunk stream. Errors before the first chunk (HTTP status,
    /// connection) are returned here; errors mid-stream arrive as stream items.
    async fn stream(&self, request: ChatRequest) -> Result<ChunkStream, LlmError>;

    /// Whether this is an [`observed::Observed`] wrapper (so it is not wrapped twice).
    fn is_observed(&self) -> bool {
        false
    }

    /// The whole answer as one `ai` message, without tool calls that name no tool.
    async fn invoke(&self, request: ChatRequest) -> Result<Message, LlmError> {
        let mut stream = self.stream(request).await?;
        let mut acc = ChunkAccumulator::new();
        while let Some(chunk) = stream.next().await {
            acc.push(&chunk?);
        }
        let mut message = acc.finish();
        message.drop_nameless_tool_calls();
        Ok(message)
    }
}

/// Why a model call failed, classified so callers can decide whether to retry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// 401/403 or an auth error body. Not retried.
    #[error("authentication failed ({status}): {message}")]
    Auth { status: u16, message: String },
    /// Billing/quota exhausted (`insufficient_quota`, …). Not retried.
    #[error("quota exceeded: {message}")]
    Quota { message: String },
    /// 429 or a rate-limit body. Retried after `retry_after` when the provider gave one.
    #[error("rate limited: {message}")]
    RateLimit {
        retry_after: Option<Duration>,
        message: String,
    },
    /// No response or no chunk within the configured time. Retried.
    #[error("timed out: {message}")]
    Timeout { message: String },
    /// Connection refused/reset/dropped mid-stream. Retried.
    #[error("connection error: {message}")]
    Connection { message: String },
    /// 5xx, 408, 409, 425. Retried.
    #[error("server error ({status}): {message}")]
    Server {
        status: u16,
        retry_after: Option<Duration>,
        message: String,
    },
    /// Other 4xx: the request itself is wrong. Not retried.
    #[error("request rejected ({status}): {message}")]
    BadRequest { status: u16, message: String },
    /// A body or stream chunk that is not what the protocol says. Retried.
    #[error("malformed response: {message}")]
    Malformed { message: String },
    /// The caller cancelled the call.
    #[error("cancelled")]
    Cancelled,
}

impl LlmError {
    /// Whether the same request may succeed if sent again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LlmError::RateLimit { .. }
                | LlmError::Timeout { .. }
                | LlmError::Connection { .. }
                | LlmError::Server { .. }
                | LlmError::Malformed { .. }
        )
    }

    /// The provider's `Retry-After`, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::RateLimit { retry_after, .. } | LlmError::Server { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }

    /// A short machine name (`auth`, `quota`, `rate_limit`, …) for events and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Auth { .. } => "auth",
            LlmError::Quota { .. } => "quota",
            LlmError::RateLimit { .. } => "rate_limit",
            LlmError::Timeout { .. } => "timeout",
            LlmError::Connection { .. } => "connection",
            LlmError::Server { .. } => "server",
            LlmError::BadRequest { .. } => "bad_request",
            LlmError::Malformed { .. } => "malformed_response",
            LlmError::Cancelled => "cancelled",
        }
    }
}

/// The configured models, by config name. The first one is the default.
#[derive(Clone, Default)]
pub struct ModelRegistry {
    models: Vec<std::sync::Arc<dyn ChatModel>>,
}

impl std::fmt::Debug for ModelRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.models.iter().map(|m| &m.info().name))
            .finish()
    }
}

impl ModelRegistry {
    pub fn from_models(models: Vec<std::sync::Arc<dyn ChatModel>>) -> Self {
        ModelRegistry { models }
    }

    /// The same models, each measured and traced ([`observed::Observed`]).
    pub fn observed(self) -> Self {
        let models = self
            .models
            .into_iter()
            .map(|m| {
                if m.is_observed() {
                    m
                } else {
                    std::sync::Arc::new(observed::Observed::new(m)) as std::sync::Arc<dyn ChatModel>
                }
            })
            .collect();
        ModelRegistry { models }
    }

    /// The model configured under `name`.
    pub fn get(&self, name: &str) -> Option<std::sync::Arc<dyn ChatModel>> {
        self.models.iter().find(|m| m.info().name == name).cloned()
    }

    /// The first configured model.
    pub fn default_model(&self) -> Option<std::sync::Arc<dyn ChatModel>> {
        self.models.first().cloned()
    }

    pub fn all(&self) -> &[std::sync::Arc<dyn ChatModel>] {
        &self.models
    }

    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }
}
