//! The OpenAI-compatible provider: our own wire types, non-streamed calls through
//! `async-openai` (`create_byot`) with our own tower service over reqwest that turns non-2xx
//! responses into [`HttpError`]s that keep `Retry-After`, and streamed calls sent on the same
//! reqwest client and read by our own event-stream framing ([`sse`]).

pub mod request;
pub mod response;
mod sse;
pub mod wire;

use crate::error::{HttpError, classify_http, classify_reqwest};
use crate::retry::{RetryObserver, with_retries};
use crate::settings::ModelSettings;
use crate::{ChatModel, ChatRequest, ChunkStream, LlmError, ModelInfo};
use async_openai::config::Config;
use async_openai::error::{OpenAIError, StreamError};
use async_openai::middleware::HttpRequestFactory;
use async_trait::async_trait;
use futures::StreamExt;
use request::{Quirks, build_request};
use response::Converter;
use secrecy::SecretString;
use std::sync::Arc;
use std::time::Duration;
use wire::{ChatCompletionChunk, ChatCompletionRequest};

pub use request::{ReasoningReplay, ReasoningSource};

/// Client configuration for async-openai: base URL, bearer key and extra headers, all fixed
/// at construction (no environment lookups, no panics on odd values).
#[derive(Clone, Debug)]
struct WireConfig {
    api_base: String,
    api_key: SecretString,
    headers: reqwest::header::HeaderMap,
}

impl Config for WireConfig {
    fn headers(&self) -> reqwest::header::HeaderMap {
        self.headers.clone()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.api_base, path)
    }

    fn query(&self) -> Vec<(&str, &str)> {
        Vec::new()
    }

    fn api_base(&self) -> &str {
        &self.api_base
    }

    fn api_key(&self) -> &SecretString {
        &self.api_key
    }
}

/// The tower service async-openai sends every request through: plain reqwest, except that a
/// non-2xx response becomes `OpenAIError::Boxed(HttpError)` carrying status, `Retry-After`
/// and body (async-openai's own error path drops the headers).
fn http_service(
    client: reqwest::Client,
) -> impl tower::Service<
    HttpRequestFactory,
    Response = reqwest::Response,
    Error = OpenAIError,
    Future = impl Future<Output = Result<reqwest::Response, OpenAIError>> + Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    tower::service_fn(move |factory: HttpRequestFactory| {
        let client = client.clone();
        async move {
            let request = factory.build().await?;
            let response = client
                .execute(request)
                .await
                .map_err(OpenAIError::Reqwest)?;
            if response.status().is_success() {
                Ok(response)
            } else {
                Err(OpenAIError::Boxed(Box::new(
                    HttpError::from_response(response).await,
                )))
            }
        }
    })
}

/// Maps async-openai's errors to ours.
pub(crate) fn map_error(e: OpenAIError) -> LlmError {
    match e {
        OpenAIError::Boxed(b) => match b.downcast::<HttpError>() {
            Ok(h) => h.classify(),
            Err(b) => match b.downcast::<LlmError>() {
                Ok(l) => *l,
                Err(b) => LlmError::Connection {
                    message: b.to_string(),
                },
            },
        },
        OpenAIError::Reqwest(r) => classify_reqwest(&r),
        OpenAIError::ApiError(a) => classify_http(
            a.status_code.as_u16(),
            None,
            &serde_json::json!({"error": {
                "message": a.api_error.message,
                "type": a.api_error.r#type,
                "code": a.api_error.code,
            }})
            .to_string(),
        ),
        OpenAIError::JSONDeserialize(err, content) => {
            let mut shown: String = content.chars().take(200).collect();
            if shown.len() < content.len() {
                shown.push('…');
            }
            LlmError::Malformed {
                message: format!("invalid JSON from the provider ({err}): {shown}"),
            }
        }
        OpenAIError::StreamError(se) => match *se {
            StreamError::EventStream(msg) if msg.contains("Transport") => LlmError::Connection {
                message: format!("stream interrupted: {msg}"),
            },
            StreamError::EventStream(msg) => LlmError::Malformed {
                message: format!("invalid event stream: {msg}"),
            },
            StreamError::UnknownEvent(ev) => LlmError::Malformed {
                message: format!("unexpected stream event '{}'", ev.event),
            },
        },
        OpenAIError::InvalidArgument(m) => LlmError::BadRequest {
            status: 400,
            message: m,
        },
        other => LlmError::BadRequest {
            status: 400,
            message: other.to_string(),
        },
    }
}

fn timed_out(what: &str, after: Duration) -> LlmError {
    LlmError::Timeout {
        message: format!("{what} within {:.1}s", after.as_secs_f64()),
    }
}

/// A chat model on any OpenAI-compatible chat-completions endpoint.
pub struct OpenAiCompatible {
    info: ModelInfo,
    settings: ModelSettings,
    quirks: Quirks,
    client: async_openai::Client<WireConfig>,
    /// Streamed calls go out on it directly (see [`sse`]).
    http: reqwest::Client,
    observer: Option<RetryObserver>,
}

impl std::fmt::Debug for OpenAiCompatible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiCompatible")
            .field("info", &self.info)
            .field("class", &self.quirks.class)
            .field("base_url", &self.client.config().api_base)
            .finish()
    }
}

impl OpenAiCompatible {
    pub(crate) fn new(
        info: ModelInfo,
        settings: ModelSettings,
        quirks: Quirks,
        http: reqwest::Client,
    ) -> Result<OpenAiCompatible, String> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            let v = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| "api_key contains characters that cannot be sent in a header")?;
            headers.insert(reqwest::header::AUTHORIZATION, v);
        }
        for (k, v) in &settings.headers {
            headers.insert(k.clone(), v.clone());
        }
        let base = settings
            .base_url
            .clone()
            .unwrap_or_else(|| quirks.default_base_url.to_string());
        let config = WireConfig {
            api_base: base.trim_end_matches('/').to_string(),
            api_key: SecretString::from(settings.api_key.clone().unwrap_or_default()),
            headers,
        };
        let client = async_openai::Client::build(http.clone(), config)
            .with_http_service(http_service(http.clone()));
        Ok(OpenAiCompatible {
            info,
            settings,
            quirks,
            client,
            http,
            observer: None,
        })
    }

    /// Called before every retry.
    pub fn set_retry_observer(&mut self, observer: Option<RetryObserver>) {
        self.observer = observer;
    }

    /// The retry policy in use.
    pub fn retry_policy_mut(&mut self) -> &mut crate::retry::RetryPolicy {
        &mut self.settings.retry
    }

    /// The request body this model would send for `req` (for tests and debugging).
    pub fn request_body(&self, req: &ChatRequest) -> Result<serde_json::Value, LlmError> {
        let body = build_request(req, &self.settings, &self.quirks, self.settings.streaming)?;
        serde_json::to_value(&body).map_err(|e| LlmError::BadRequest {
            status: 400,
            message: format!("request cannot be serialized: {e}"),
        })
    }

    async fn attempt(
        &self,
        body: Arc<ChatCompletionRequest>,
        message_id: String,
    ) -> Result<ChunkStream, LlmError> {
        let mut conv = Converter::new(
            message_id,
            self.quirks.provider,
            self.quirks.reasoning_source,
        );
        let timeout = self.settings.timeout;
        if !body.stream {
            let chat = self.client.chat();
            let call = chat.create_byot::<&ChatCompletionRequest, ChatCompletionChunk>(&body);
            let resp = tokio::time::timeout(timeout, call)
                .await
                .map_err(|_| timed_out("no response", timeout))?
                .map_err(map_error)?;
            let msg = conv.full(resp)?;
            return Ok(futures::stream::iter([Ok(msg)]).boxed());
        }
        let inner = tokio::time::timeout(timeout, self.open_stream(&body))
            .await
            .map_err(|_| timed_out("no response", timeout))??;
        let mut state = StreamState {
            inner,
            conv,
            first_timeout: timeout,
            chunk_timeout: self.settings.stream_chunk_timeout,
            idle: Default::default(),
            started: false,
            done: false,
        };
        match state.next().await {
            Some(Ok(first)) => {
                let rest = futures::stream::unfold(state, |mut st| async move {
                    let item = st.next().await?;
                    Some((item, st))
                });
                Ok(futures::stream::once(async move { Ok(first) })
                    .chain(rest)
                    .boxed())
            }
            Some(Err(e)) => Err(e),
            None => Err(LlmError::Connection {
                message: "stream ended without any chunk".into(),
            }),
        }
    }
}

impl OpenAiCompatible {
    /// `POST {base}/chat/completions` as async-openai would send it (the same URL, headers
    /// and JSON body); a non-2xx answer is classified as by [`http_service`].
    async fn open_stream(
        &self,
        body: &ChatCompletionRequest,
    ) -> Result<sse::ChunkEvents, LlmError> {
        let config = self.client.config();
        let bytes = serde_json::to_vec(body).map_err(|e| LlmError::BadRequest {
            status: 400,
            message: format!("request cannot be serialized: {e}"),
        })?;
        let response = self
            .http
            .post(config.url("/chat/completions"))
            .headers(crate::traced(config.headers()))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(bytes)
            .send()
            .await
            .map_err(|e| classify_reqwest(&e))?;
        if !response.status().is_success() {
            return Err(HttpError::from_response(response).await.classify());
        }
        Ok(sse::ChunkEvents::new(response))
    }
}

struct StreamState {
    inner: sse::ChunkEvents,
    conv: Converter,
    first_timeout: Duration,
    chunk_timeout: Duration,
    idle: crate::idle::IdleTimer,
    started: bool,
    done: bool,
}

impl StreamState {
    async fn next(&mut self) -> Option<Result<crate::Message, LlmError>> {
        if self.done {
            return None;
        }
        loop {
            let wait = if self.started {
                self.chunk_timeout
            } else {
                self.first_timeout
            };
            match self.idle.within(wait, self.inner.next()).await {
                Err(_) => {
                    self.done = true;
                    let what = if self.started {
                        "no stream chunk"
                    } else {
                        "no first stream chunk"
                    };
                    return Some(Err(timed_out(what, wait)));
                }
                Ok(None) => {
                    self.done = true;
                    return Some(self.conv.finish());
                }
                Ok(Some(Err(e))) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Ok(Some(Ok(chunk))) => {
                    self.started = true;
                    match self.conv.chunk(chunk) {
                        Ok(Some(m)) => return Some(Ok(m)),
                        Ok(None) => {}
                        Err(e) => {
                            self.done = true;
                            return Some(Err(e));
                        }
                    }
                }
            }
        }
    }
}

#[async_trait]
impl ChatModel for OpenAiCompatible {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChunkStream, LlmError> {
        let body = Arc::new(build_request(
            &request,
            &self.settings,
            &self.quirks,
            self.settings.streaming,
        )?);
        let message_id = format!("lc_run--{}", uuid::Uuid::new_v4());
        with_retries(
            &self.info.name,
            &self.settings.retry,
            self.observer.as_ref(),
            || self.attempt(body.clone(), message_id.clone()),
        )
        .await
    }
}
