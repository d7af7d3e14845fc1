//! Every model call measured and traced in one place: [`Observed`] wraps a configured model
//! (the registry wraps them all, [`crate::ModelRegistry::observed`]), so the agent's steps,
//! titles, summaries, memory updates, suggestions, polish and goal evaluations are all seen
//! the same way.
//!
//! Per call: `fawn_model_calls_total{model,outcome}`, the duration and time-to-first-token
//! histograms, and `fawn_model_tokens_total` from the provider's usage — or, when the
//! provider reports none, estimated from the request and the streamed text and labelled
//! `source="estimated"`. When tracing is on, a `chat {model}` span (GenAI and OpenInference
//! attributes; messages only when content capture is on) is the current span while the
//! provider sends the request, so outgoing requests carry its `traceparent`.

use crate::{ChatModel, ChatRequest, ChunkStream, LlmError, ModelInfo};
use async_trait::async_trait;
use fawn_state::{ChunkAccumulator, Content, Message, MessageKind, Messages};
use fawn_telemetry::metrics;
use fawn_telemetry::metrics::{CounterHandle, HistogramHandle};
use fawn_telemetry::trace::{self, Attr, Kind, Span, attrs};
use futures::Stream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// What a call is for when the request does not say (a step of an agent loop).
const DEFAULT_PURPOSE: &str = "agent";

/// A model whose calls are measured and traced.
pub struct Observed {
    inner: Arc<dyn ChatModel>,
    handles: Arc<Handles>,
}

/// The model's metric series of every call, resolved once.
struct Handles {
    /// The bounded `model` label (the configured name).
    label: Arc<str>,
    ok: CounterHandle,
    duration: HistogramHandle,
    ttft: HistogramHandle,
    /// (input, output) tokens, reported and estimated.
    provider: (CounterHandle, CounterHandle),
    estimated: (CounterHandle, CounterHandle),
}

impl Observed {
    pub fn new(inner: Arc<dyn ChatModel>) -> Observed {
        let m = metrics();
        let label = m.model_label.get(&inner.info().name);
        let tokens =
            |dir: &str, source: &str| m.model_tokens.with_label_values(&[&label, dir, source]);
        let handles = Arc::new(Handles {
            ok: m.model_calls.with_label_values(&[&label, "ok"]),
            duration: m.model_duration.with_label_values(&[&label]),
            ttft: m.model_ttft.with_label_values(&[&label]),
            provider: (tokens("input", "provider"), tokens("output", "provider")),
            estimated: (tokens("input", "estimated"), tokens("output", "estimated")),
            label,
        });
        Observed { inner, handles }
    }
}

#[async_trait]
impl ChatModel for Observed {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }

    fn is_observed(&self) -> bool {
        true
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChunkStream, LlmError> {
        let started = Instant::now();
        let info = self.inner.info();
        let purpose = if request.purpose.is_empty() {
            DEFAULT_PURPOSE
        } else {
            request.purpose
        };
        let span = trace::start(
            || format!("chat {}", info.model),
            Kind::Client,
            |a| request_attributes(a, info, purpose, &request),
        );
        // Kept only to estimate input tokens if the provider reports none (a cheap clone:
        // the list shares its chunks).
        let messages = request.messages.clone();
        let result = trace::instrument(self.inner.stream(request), &span).await;
        match result {
            Ok(stream) => Ok(Box::pin(ObservedStream {
                inner: stream,
                call: Some(Call {
                    handles: self.handles.clone(),
                    started,
                    first_token: None,
                    usage: None,
                    estimated_output: 0,
                    messages,
                    finish_reason: None,
                    response_model: None,
                    output: trace::capture_outputs()
                        .then(ChunkAccumulator::new)
                        .filter(|_| span.is_recording()),
                    span,
                }),
            })),
            Err(e) => {
                let outcome = e.kind();
                metrics()
                    .model_calls
                    .with_label_values(&[&self.handles.label, outcome])
                    .inc();
                self.handles
                    .duration
                    .observe(started.elapsed().as_secs_f64());
                span.fail(outcome, &e.to_string());
                span.end();
                Err(e)
            }
        }
    }
}

fn role(m: &Message) -> &str {
    match &m.kind {
        MessageKind::Human => "user",
        MessageKind::Ai | MessageKind::AiChunk => "assistant",
        MessageKind::System => "system",
        MessageKind::Tool => "tool",
        other => other.as_str(),
    }
}

/// The request's attributes (built only when the span records).
fn request_attributes(a: &mut Vec<Attr>, info: &ModelInfo, purpose: &'static str, r: &ChatRequest) {
    attrs::SpanKind::Llm.attrs(a);
    a.push(Attr::new(attrs::GEN_AI_OPERATION, "chat"));
    a.push(Attr::new(attrs::GEN_AI_SYSTEM, info.provider.clone()));
    a.push(Attr::new(attrs::GEN_AI_PROVIDER, info.provider.clone()));
    a.push(Attr::new(attrs::GEN_AI_REQUEST_MODEL, info.model.clone()));
    a.push(Attr::new(attrs::LLM_MODEL_NAME, info.model.clone()));
    a.push(Attr::new(attrs::LLM_PROVIDER, info.provider.clone()));
    a.push(Attr::new(attrs::LLM_SYSTEM, info.provider.clone()));
    a.push(Attr::new("fawn.model.name", info.name.clone()));
    a.push(Attr::new(attrs::MODEL_PURPOSE, purpose));
    if let Some(t) = r.temperature {
        a.push(Attr::new(attrs::GEN_AI_REQUEST_TEMPERATURE, t));
    }
    if let Some(m) = r.max_tokens {
        a.push(Attr::new(attrs::GEN_AI_REQUEST_MAX_TOKENS, i64::from(m)));
    }
    if !r.tools.is_empty() {
        a.push(Attr::new(
            "fawn.model.tools",
            r.tools
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ));
    }
    if !trace::capture_inputs() {
        return;
    }
    // Each message's text goes in once per convention that renders it (OpenInference's
    // `llm.input_messages`, the GenAI `gen_ai.prompt` LangSmith reads), shared, not copied.
    // `input.value` is the span's one-line input in a trace's tree: the last message (what
    // this call answers), not the whole conversation a third time.
    let mut budget = attrs::MAX_VALUE_BYTES * 4;
    let mut last: Option<std::sync::Arc<str>> = None;
    for (i, m) in r.messages.iter().enumerate() {
        let text = m.text();
        let text = if text.len() > budget {
            attrs::clip(text.chars().take(budget).collect())
        } else {
            attrs::clip(text)
        };
        budget = budget.saturating_sub(text.len());
        let text: std::sync::Arc<str> = text.into();
        let role = role(m).to_string();
        a.push(Attr::new(
            format!("{}.{i}.message.role", attrs::LLM_INPUT_MESSAGES),
            role.clone(),
        ));
        a.push(Attr::new(
            format!("{}.{i}.message.content", attrs::LLM_INPUT_MESSAGES),
            text.clone(),
        ));
        a.push(Attr::new(
            format!("{}.{i}.role", attrs::GEN_AI_PROMPT),
            role,
        ));
        a.push(Attr::new(
            format!("{}.{i}.content", attrs::GEN_AI_PROMPT),
            text.clone(),
        ));
        last = Some(text);
    }
    if let Some(text) = last {
        a.push(Attr::new(attrs::INPUT_VALUE, text));
        a.push(Attr::new(attrs::INPUT_MIME, "text/plain"));
    }
}

/// What one call has seen so far.
struct Call {
    handles: Arc<Handles>,
    started: Instant,
    first_token: Option<Instant>,
    /// Summed over the chunks (providers send it once, at the end, or in parts).
    usage: Option<(i64, i64)>,
    /// Estimated output tokens, in case the provider reports none.
    estimated_output: usize,
    messages: Messages,
    finish_reason: Option<String>,
    response_model: Option<String>,
    /// The whole answer, when outputs go into spans.
    output: Option<ChunkAccumulator>,
    span: Span,
}

fn has_content(m: &Message) -> bool {
    let text = match &m.content {
        Content::Text(s) => !s.is_empty(),
        Content::Blocks(b) => !b.is_empty(),
    };
    text || !m.tool_call_chunks.is_empty()
        || !m.tool_calls.is_empty()
        || m.additional_kwargs.contains_key("reasoning_content")
}

impl Call {
    fn chunk(&mut self, m: &Message) {
        if self.first_token.is_none() && has_content(m) {
            let now = Instant::now();
            self.first_token = Some(now);
            self.handles
                .ttft
                .observe(now.duration_since(self.started).as_secs_f64());
        }
        if let Some(u) = &m.usage_metadata {
            let (i, o) = self.usage.unwrap_or((0, 0));
            self.usage = Some((i + u.input_tokens, o + u.output_tokens));
        }
        if let Content::Text(s) = &m.content {
            self.estimated_output += crate::estimate_text_tokens(s);
        }
        for c in &m.tool_call_chunks {
            if let Some(args) = &c.args {
                self.estimated_output += crate::estimate_text_tokens(args);
            }
        }
        if let Some(r) = m
            .response_metadata
            .get("finish_reason")
            .and_then(|v| v.as_str())
        {
            self.finish_reason = Some(r.to_string());
        }
        if let Some(r) = m
            .response_metadata
            .get("model_name")
            .or_else(|| m.response_metadata.get("model"))
            .and_then(|v| v.as_str())
        {
            self.response_model = Some(r.to_string());
        }
        if let Some(acc) = &mut self.output {
            acc.push(m);
        }
    }

    /// Records the call's end (`outcome` is `ok` or an error kind).
    fn end(mut self, outcome: &str, error: Option<&LlmError>) {
        let h = &self.handles;
        if outcome == "ok" {
            h.ok.inc();
        } else {
            metrics()
                .model_calls
                .with_label_values(&[&h.label, outcome])
                .inc();
        }
        h.duration.observe(self.started.elapsed().as_secs_f64());
        let (input, output, source) = match self.usage {
            Some((i, o)) if i > 0 || o > 0 => (i.max(0) as u64, o.max(0) as u64, "provider"),
            _ => (
                crate::estimate_tokens(self.messages.iter()) as u64,
                self.estimated_output as u64,
                "estimated",
            ),
        };
        if outcome == "ok" || output > 0 {
            let (i, o) = if source == "provider" {
                &h.provider
            } else {
                &h.estimated
            };
            i.inc_by(input);
            o.inc_by(output);
        }
        let span = std::mem::take(&mut self.span);
        span.set_with(|a| {
            a.push(Attr::new(attrs::GEN_AI_INPUT_TOKENS, input as i64));
            a.push(Attr::new(attrs::GEN_AI_OUTPUT_TOKENS, output as i64));
            a.push(Attr::new(attrs::LLM_PROMPT_TOKENS, input as i64));
            a.push(Attr::new(attrs::LLM_COMPLETION_TOKENS, output as i64));
            a.push(Attr::new(attrs::LLM_TOTAL_TOKENS, (input + output) as i64));
            a.push(Attr::new(attrs::TOKENS_ESTIMATED, source == "estimated"));
            if let Some(r) = &self.finish_reason {
                a.push(Attr::new(
                    attrs::GEN_AI_FINISH_REASONS,
                    trace::string_list(vec![r.clone()]),
                ));
            }
            if let Some(r) = &self.response_model {
                a.push(Attr::new(attrs::GEN_AI_RESPONSE_MODEL, r.clone()));
            }
            if let Some(acc) = self.output.take() {
                let message = acc.finish();
                let text: std::sync::Arc<str> = attrs::clip(message.text()).into();
                a.push(Attr::new(
                    format!("{}.0.message.role", attrs::LLM_OUTPUT_MESSAGES),
                    "assistant",
                ));
                a.push(Attr::new(
                    format!("{}.0.message.content", attrs::LLM_OUTPUT_MESSAGES),
                    text.clone(),
                ));
                a.push(Attr::new(format!("{}.0.role", attrs::GEN_AI_COMPLETION), "assistant"));
                a.push(Attr::new(format!("{}.0.content", attrs::GEN_AI_COMPLETION), text.clone()));
                for (i, tc) in message.tool_calls.iter().enumerate() {
                    let key = format!("{}.0.message.tool_calls.{i}.tool_call", attrs::LLM_OUTPUT_MESSAGES);
                    a.push(Attr::new(format!("{key}.function.name"), tc.name.clone()));
                    a.push(Attr::new(
                        format!("{key}.function.arguments"),
                        attrs::clip(serde_json::to_string(&tc.args).unwrap_or_default()),
                    ));
                }
                let out = serde_json::json!({
                    "role": "assistant",
                    "content": &*text,
                    "tool_calls": message.tool_calls.iter().map(|t| serde_json::json!({"name": t.name, "args": t.args})).collect::<Vec<_>>(),
                });
                a.push(Attr::new(attrs::OUTPUT_VALUE, attrs::clip(out.to_string())));
                a.push(Attr::new(attrs::OUTPUT_MIME, "application/json"));
            }
        });
        match error {
            Some(e) => span.fail(e.kind(), &e.to_string()),
            None if outcome == "ok" => span.ok(),
            None => span.fail(outcome, outcome),
        }
        span.end();
    }
}

/// The provider's chunk stream, seen chunk by chunk; its end (or its drop) ends the call.
struct ObservedStream {
    inner: ChunkStream,
    call: Option<Call>,
}

impl Stream for ObservedStream {
    type Item = Result<Message, LlmError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let polled = match this.call.as_ref().and_then(|c| c.span.context().cloned()) {
            Some(otel) => {
                let _guard = otel.attach();
                this.inner.as_mut().poll_next(cx)
            }
            None => this.inner.as_mut().poll_next(cx),
        };
        match &polled {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(call) = &mut this.call {
                    call.chunk(chunk);
                }
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(call) = this.call.take() {
                    call.end(e.kind(), Some(e));
                }
            }
            Poll::Ready(None) => {
                if let Some(call) = this.call.take() {
                    call.end("ok", None);
                }
            }
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for ObservedStream {
    fn drop(&mut self) {
        // Dropped before its end: the caller stopped reading (a cancel, a timeout).
        if let Some(call) = self.call.take() {
            call.end("cancelled", None);
        }
    }
}
