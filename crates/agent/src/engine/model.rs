//! The `model` node's innermost step: one streamed call to the chat model, every chunk
//! forwarded as a `messages` event with LangGraph's metadata.

use fawn_llm::{ChatModel, ChatRequest, LlmError};
use fawn_middleware::{MiddlewareError, ModelCall, ModelRequest, ModelResponse};
use fawn_state::{ChunkAccumulator, EventSink, Message, MessageKind, StreamEvent};
use futures::StreamExt;
use serde_json::{Map, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Calls the model for the chain (the innermost `ModelCall`).
pub(crate) struct ModelInvoker {
    pub(crate) events: Arc<dyn EventSink>,
    /// Run metadata plus the node context (`langgraph_step`, `langgraph_node`, …).
    pub(crate) metadata: Map<String, Value>,
    pub(crate) tags: Vec<String>,
    pub(crate) cancel: CancellationToken,
    /// False for subagents: their tokens are not part of the parent's stream.
    pub(crate) stream_tokens: bool,
}

/// The provider request. Its conversation shares the request's chunks (the system prompt
/// is a chunk of its own in front), so no message is copied.
fn into_chat_request(request: ModelRequest) -> (Arc<dyn ChatModel>, ChatRequest) {
    let chat = request.to_chat_request();
    (request.model, chat)
}

impl ModelInvoker {
    fn chunk_metadata(
        &self,
        model: &dyn ChatModel,
        temperature: Option<f64>,
    ) -> Map<String, Value> {
        let mut m = self.metadata.clone();
        let info = model.info();
        m.insert("ls_provider".into(), Value::String(info.provider.clone()));
        m.insert("ls_model_name".into(), Value::String(info.model.clone()));
        m.insert("ls_model_type".into(), Value::String("chat".into()));
        if let Some(t) = temperature.and_then(serde_json::Number::from_f64) {
            m.insert("ls_temperature".into(), Value::Number(t));
        }
        m.insert(
            "tags".into(),
            Value::Array(self.tags.iter().cloned().map(Value::String).collect()),
        );
        m
    }
}

#[async_trait::async_trait]
impl ModelCall for ModelInvoker {
    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, MiddlewareError> {
        let temperature = request.temperature;
        let (model, chat) = into_chat_request(request);
        let metadata = Arc::new(if self.stream_tokens {
            self.chunk_metadata(model.as_ref(), temperature)
        } else {
            Map::new()
        });
        let id = format!("lc_run--{}", uuid::Uuid::new_v4());
        if self.stream_tokens {
            self.events.emit(StreamEvent::ModelStart {
                message_id: id.clone(),
                messages: chat.messages.clone(),
                metadata: metadata.clone(),
            });
        }
        let mut stream = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Err(MiddlewareError::Cancelled),
            s = model.stream(chat) => s.map_err(cancel_or_llm)?,
        };
        let mut acc = ChunkAccumulator::new();
        let mut saw_last = false;
        let mut chunks = 0usize;
        loop {
            let item = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(MiddlewareError::Cancelled),
                item = stream.next() => item,
            };
            let Some(item) = item else { break };
            let mut chunk = item.map_err(cancel_or_llm)?;
            chunk.kind = MessageKind::AiChunk;
            chunk.id = Some(id.clone());
            saw_last = chunk.chunk_position.as_deref() == Some("last");
            acc.push(&chunk);
            chunks += 1;
            if self.stream_tokens {
                self.events.emit(StreamEvent::MessageChunk {
                    chunk,
                    metadata: metadata.clone(),
                });
            }
        }
        drop(stream);
        if chunks == 0 {
            // langchain raises on a generation without chunks; the error handling middleware
            // treats it as retryable.
            return Err(MiddlewareError::Llm(LlmError::Malformed {
                message: "the model returned no output".into(),
            }));
        }
        if !saw_last && self.stream_tokens {
            let mut last = Message::ai_chunk("");
            last.id = Some(id.clone());
            last.chunk_position = Some("last".into());
            self.events.emit(StreamEvent::MessageChunk {
                chunk: last,
                metadata,
            });
        }
        let mut message = acc.finish();
        // A call that names no tool is never run nor answered: the answer goes on without it.
        let dropped = message.drop_nameless_tool_calls();
        if dropped > 0 {
            tracing::warn!(model = %model.info().name, dropped, "dropped tool calls without a tool name");
        }
        message.kind = MessageKind::Ai;
        message.id = Some(id);
        Ok(ModelResponse { message })
    }
}

fn cancel_or_llm(e: LlmError) -> MiddlewareError {
    match e {
        LlmError::Cancelled => MiddlewareError::Cancelled,
        other => MiddlewareError::Llm(other),
    }
}

/// The exception class LangChain's OpenAI client would raise for `e` (what LangGraph puts in
/// the `error` event's `error` field).
pub(crate) fn error_class(e: &LlmError) -> &'static str {
    match e {
        LlmError::Auth { status: 403, .. } => "PermissionDeniedError",
        LlmError::Auth { .. } => "AuthenticationError",
        LlmError::Quota { .. } | LlmError::RateLimit { .. } => "RateLimitError",
        LlmError::Timeout { .. } => "APITimeoutError",
        LlmError::Connection { .. } => "APIConnectionError",
        LlmError::Server { .. } => "InternalServerError",
        LlmError::BadRequest { status: 404, .. } => "NotFoundError",
        LlmError::BadRequest { status: 422, .. } => "UnprocessableEntityError",
        LlmError::BadRequest { .. } => "BadRequestError",
        LlmError::Malformed { .. } => "APIError",
        LlmError::Cancelled => "CancelledError",
    }
}
