//! The mock's HTTP side: one handler that records every request and answers it.

use crate::record::{RecordedRequest, is_anthropic_path, is_models_path, is_openai_chat_path};
use crate::script::{Fault, Turn};
use crate::{MockConfig, anthropic, gemini, ollama, openai};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

/// Request bodies above this size are refused with 413.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

pub(crate) struct Shared {
    pub turns: Mutex<VecDeque<Turn>>,
    pub requests: Mutex<Vec<RecordedRequest>>,
    pub notify: Notify,
    pub config: MockConfig,
    pub cancel: CancellationToken,
    /// Streamed bodies sent to the end.
    pub streams_completed: AtomicUsize,
    /// Streamed bodies the client stopped reading (disconnected) before the end.
    pub streams_aborted: AtomicUsize,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[derive(Clone, PartialEq, Eq)]
enum Protocol {
    OpenAi,
    Anthropic,
    /// Model and streaming come from the path.
    Gemini {
        model: String,
        stream: bool,
    },
    Ollama,
}

pub(crate) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            return json_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({"error": {"message": format!("could not read request body: {e}"),
                                 "type": "invalid_request_error", "param": null, "code": null}}),
                None,
            );
        }
    };
    let mut headers = BTreeMap::new();
    for (name, value) in &parts.headers {
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_ascii_lowercase())
            .and_modify(|existing: &mut String| {
                existing.push_str(", ");
                existing.push_str(&v);
            })
            .or_insert(v);
    }
    let body_json: Option<Value> = serde_json::from_slice(&bytes).ok();
    let path = parts.uri.path().to_string();
    let record = RecordedRequest {
        method: parts.method.as_str().to_string(),
        path: path.clone(),
        query: parts.uri.query().map(str::to_string),
        headers,
        body: body_json.clone(),
        body_text: String::from_utf8_lossy(&bytes).into_owned(),
    };
    lock(&shared.requests).push(record);
    shared.notify.notify_waiters();

    let method = parts.method.as_str();
    if method == "GET" && is_models_path(&path) {
        return json_response(StatusCode::OK, openai::models(&shared.config.model), None);
    }
    if method == "GET" && (path == "/" || path == "/health") {
        return json_response(StatusCode::OK, json!({"ok": true}), None);
    }
    if method == "GET" && path == "/api/tags" {
        return json_response(StatusCode::OK, ollama::tags(&shared.config.model), None);
    }
    if method == "GET" && path == "/api/version" {
        return json_response(StatusCode::OK, json!({"version": "0.0.0-fawn-mock"}), None);
    }
    let protocol = if method == "POST" && is_openai_chat_path(&path) {
        Protocol::OpenAi
    } else if method == "POST" && is_anthropic_path(&path) {
        Protocol::Anthropic
    } else if method == "POST"
        && let Some((model, stream)) = gemini::route(&path)
    {
        Protocol::Gemini { model, stream }
    } else if method == "POST" && ollama::is_chat_path(&path) {
        Protocol::Ollama
    } else {
        return json_response(
            StatusCode::NOT_FOUND,
            json!({"error": {"message": format!("mock LLM has no route {method} {path}"),
                             "type": "invalid_request_error", "param": null, "code": "not_found"}}),
            None,
        );
    };
    let Some(body) = body_json else {
        return json_response(
            StatusCode::BAD_REQUEST,
            json!({"error": {"message": "request body is not valid JSON",
                             "type": "invalid_request_error", "param": null, "code": null}}),
            None,
        );
    };
    answer(&shared, protocol, &body).await
}

async fn answer(shared: &Arc<Shared>, protocol: Protocol, body: &Value) -> Response {
    let view = match &protocol {
        Protocol::OpenAi => openai::view(body),
        Protocol::Anthropic => anthropic::view(body),
        Protocol::Gemini { model, stream } => gemini::view(body, model, *stream),
        Protocol::Ollama => ollama::view(body),
    };
    let scripted = lock(&shared.turns).pop_front();
    let turn = match scripted {
        Some(t) => t,
        None => shared.config.behavior.answer(&view),
    };
    let chunking = turn
        .chunking
        .clone()
        .unwrap_or_else(|| shared.config.chunking.clone());
    let delay = turn.chunk_delay.unwrap_or(shared.config.chunk_delay);

    if let Some(fault) = &turn.fault {
        let http = match protocol {
            Protocol::OpenAi => openai::error_for(fault),
            Protocol::Anthropic => anthropic::error_for(fault),
            Protocol::Gemini { .. } => gemini::error_for(fault),
            Protocol::Ollama => ollama::error_for(fault),
        };
        if let Some((status, body, retry_after)) = http {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return json_response(status, body, retry_after);
        }
        if *fault == Fault::Hang {
            shared.cancel.cancelled().await;
            return json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": {"message": "mock LLM stopped", "type": "server_error",
                                 "param": null, "code": null}}),
                None,
            );
        }
    }

    if let Some(body) = &turn.recording {
        return replay(
            shared,
            &protocol,
            view.stream,
            body,
            turn.fault.as_ref(),
            delay,
        );
    }

    if view.stream {
        let mut frames: Vec<Bytes> = match protocol {
            Protocol::OpenAi => {
                let env = openai::Envelope::new(&view.model);
                openai::stream_chunks(&turn, &view, &env, &chunking)
                    .into_iter()
                    .map(|c| Bytes::from(format!("data: {c}\n\n")))
                    .collect()
            }
            Protocol::Anthropic => anthropic::stream_events(&turn, &view, &chunking)
                .into_iter()
                .map(|(event, data)| Bytes::from(format!("event: {event}\ndata: {data}\n\n")))
                .collect(),
            // Gemini ends its SSE events with CRLF pairs.
            Protocol::Gemini { .. } => gemini::stream_chunks(&turn, &view, &chunking)
                .into_iter()
                .map(|c| Bytes::from(format!("data: {c}\r\n\r\n")))
                .collect(),
            Protocol::Ollama => ollama::stream_lines(&turn, &view, &chunking)
                .into_iter()
                .map(|l| Bytes::from(format!("{l}\n")))
                .collect(),
        };
        if protocol == Protocol::OpenAi {
            frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
        }
        let drop_at_end = cut_stream(&mut frames, turn.fault.as_ref(), &protocol);
        return stream_response(
            stream_content_type(&protocol),
            frames,
            delay,
            drop_at_end,
            shared.clone(),
        );
    }

    let full = match protocol {
        Protocol::OpenAi => {
            openai::full_response(&turn, &view, &openai::Envelope::new(&view.model))
        }
        Protocol::Anthropic => anthropic::full_response(&turn, &view),
        Protocol::Gemini { .. } => gemini::full_response(&turn, &view),
        Protocol::Ollama => ollama::full_response(&turn, &view),
    };
    match &turn.fault {
        Some(Fault::MalformedChunk { .. }) => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from("{\"id\": \"chatcmpl-broken\", \"choices\": "))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()),
        Some(Fault::DropConnection { .. }) => {
            let text = full.to_string();
            let half = text.len() / 2;
            let cut = (0..=half)
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            stream_response(
                "application/json",
                vec![Bytes::from(text[..cut].to_string())],
                Duration::ZERO,
                true,
                shared.clone(),
            )
        }
        _ => json_response(StatusCode::OK, full, None),
    }
}

fn stream_content_type(protocol: &Protocol) -> &'static str {
    if *protocol == Protocol::Ollama {
        "application/x-ndjson"
    } else {
        "text/event-stream"
    }
}

/// Applies a fault that cuts a stream short: `MalformedChunk` keeps `after_chunks` frames and
/// adds one the protocol's parser must reject, `DropConnection` keeps `after_chunks` frames
/// and asks for the connection to be aborted (the returned flag).
fn cut_stream(frames: &mut Vec<Bytes>, fault: Option<&Fault>, protocol: &Protocol) -> bool {
    match fault {
        Some(Fault::MalformedChunk { after_chunks }) => {
            frames.truncate(*after_chunks);
            match protocol {
                Protocol::OpenAi => {
                    frames.push(Bytes::from_static(
                        b"data: {\"id\": \"chatcmpl-broken\", \"choices\": [{\"delta\": \n\n",
                    ));
                    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
                }
                Protocol::Anthropic => frames.push(Bytes::from_static(
                    b"event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": \n\n",
                )),
                Protocol::Gemini { .. } => frames.push(Bytes::from_static(
                    b"data: {\"candidates\": [{\"content\": \r\n\r\n",
                )),
                Protocol::Ollama => frames.push(Bytes::from_static(
                    b"{\"model\": \"broken\", \"message\": {\n",
                )),
            }
            false
        }
        Some(Fault::DropConnection { after_chunks }) => {
            frames.truncate(*after_chunks);
            true
        }
        _ => false,
    }
}

/// The frames of a recorded stream: one per SSE event (its lines up to and including the
/// blank line that ends it; `\n` or `\r\n`), or one per NDJSON line. Whatever follows the
/// last separator is a frame of its own.
pub(crate) fn recorded_frames(body: &str, ndjson: bool) -> Vec<Bytes> {
    let mut frames = Vec::new();
    let mut current = String::new();
    for line in body.split_inclusive('\n') {
        current.push_str(line);
        if ndjson || line.trim_end_matches(['\r', '\n']).is_empty() {
            frames.push(Bytes::from(std::mem::take(&mut current)));
        }
    }
    if !current.is_empty() {
        frames.push(Bytes::from(current));
    }
    frames
}

/// Answers with a recorded body (see [`Turn::recorded`](crate::Turn::recorded)).
fn replay(
    shared: &Arc<Shared>,
    protocol: &Protocol,
    stream: bool,
    body: &str,
    fault: Option<&Fault>,
    delay: Duration,
) -> Response {
    if !stream {
        return Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    }
    let mut frames = recorded_frames(body, *protocol == Protocol::Ollama);
    let drop_at_end = cut_stream(&mut frames, fault, protocol);
    stream_response(
        stream_content_type(protocol),
        frames,
        delay,
        drop_at_end,
        shared.clone(),
    )
}

fn json_response(status: StatusCode, body: Value, retry_after: Option<u64>) -> Response {
    let mut resp = (status, axum::Json(body)).into_response();
    if let Some(secs) = retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// Streams `frames` with `delay` between them; ends by aborting the connection when
/// `drop_at_end` (the client sees a body cut short, never a clean end).
fn stream_response(
    content_type: &'static str,
    frames: Vec<Bytes>,
    delay: Duration,
    drop_at_end: bool,
    shared: Arc<Shared>,
) -> Response {
    // A small buffer, so a client that stops reading is noticed quickly.
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    tokio::spawn(async move {
        for (i, frame) in frames.into_iter().enumerate() {
            if i > 0 && !delay.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shared.cancel.cancelled() => return,
                    _ = tx.closed() => {
                        shared.streams_aborted.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
            }
            if tx.send(Ok(frame)).await.is_err() {
                shared.streams_aborted.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
        if !drop_at_end {
            shared.streams_completed.fetch_add(1, Ordering::SeqCst);
        }
        if drop_at_end {
            // Let the server flush what was sent before the connection is aborted.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tx
                .send(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "mock LLM dropped the connection",
                )))
                .await;
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(ReceiverStream::new(rx)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    use super::recorded_frames;

    #[test]
    fn recorded_bodies_split_into_events_or_lines() {
        let sse = "event: a\ndata: {}\n\ndata: {\"x\": 1}\r\n\r\ndata: [DONE]\n\ntrailing";
        let frames: Vec<_> = recorded_frames(sse, false)
            .iter()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
            .collect();
        assert_eq!(
            frames,
            [
                "event: a\ndata: {}\n\n",
                "data: {\"x\": 1}\r\n\r\n",
                "data: [DONE]\n\n",
                "trailing"
            ]
        );
        assert_eq!(frames.concat(), sse, "nothing is lost or added");
        let nd = "{\"a\": 1}\n{\"b\": 2}\n";
        assert_eq!(recorded_frames(nd, true).len(), 2);
    }
}
