//! The streaming loop shared by the native Gemini and Ollama providers: wire events (SSE
//! `data:` payloads, NDJSON lines) folded into `AIMessageChunk`s, the first event awaited
//! within the request timeout and every later one within the chunk timeout, and the first
//! chunk in hand before a call counts as started (so a retry only ever repeats a call that
//! produced nothing).

use crate::{ChunkStream, LlmError};
use fawn_state::Message;
use futures::StreamExt;
use futures::stream::BoxStream;
use std::time::Duration;

/// Wire events of one response, already decoded from the transport.
pub(crate) type Events<E> = BoxStream<'static, Result<E, LlmError>>;

/// Turns a provider's wire events into chunks.
pub(crate) trait Fold: Send + 'static {
    type Event: Send + 'static;

    /// One wire event → at most one chunk.
    fn event(&mut self, event: Self::Event) -> Result<Option<Message>, LlmError>;

    /// True once the protocol's last event was seen; the stream then ends without reading on.
    fn is_done(&self) -> bool;

    /// The wire ended before [`Fold::is_done`]: the closing chunk, or why the end came early.
    fn end(&mut self) -> Result<Option<Message>, LlmError>;
}

struct Driver<F: Fold> {
    events: Events<F::Event>,
    fold: F,
    first_timeout: Duration,
    chunk_timeout: Duration,
    idle: crate::idle::IdleTimer,
    started: bool,
    done: bool,
}

impl<F: Fold> Driver<F> {
    async fn next(&mut self) -> Option<Result<Message, LlmError>> {
        loop {
            if self.done {
                return None;
            }
            let wait = if self.started {
                self.chunk_timeout
            } else {
                self.first_timeout
            };
            let item = match self.idle.within(wait, self.events.next()).await {
                Err(_) => Err(LlmError::Timeout {
                    message: format!("no stream event within {:.1}s", wait.as_secs_f64()),
                }),
                Ok(None) => {
                    self.done = true;
                    return self.fold.end().transpose();
                }
                Ok(Some(Err(e))) => Err(e),
                Ok(Some(Ok(ev))) => {
                    self.started = true;
                    match self.fold.event(ev) {
                        Ok(Some(m)) => {
                            self.done = self.fold.is_done();
                            return Some(Ok(m));
                        }
                        Ok(None) if self.fold.is_done() => {
                            self.done = true;
                            return None;
                        }
                        Ok(None) => continue,
                        Err(e) => Err(e),
                    }
                }
            };
            self.done = true;
            return Some(item);
        }
    }
}

/// Reads `events` until the first chunk (or the error that prevents one) and returns the
/// rest as a stream. Dropping the stream drops `events`, and with them the HTTP response.
pub(crate) async fn start<F: Fold>(
    events: Events<F::Event>,
    fold: F,
    first_timeout: Duration,
    chunk_timeout: Duration,
) -> Result<ChunkStream, LlmError> {
    let mut driver = Driver {
        events,
        fold,
        first_timeout,
        chunk_timeout,
        idle: Default::default(),
        started: false,
        done: false,
    };
    match driver.next().await {
        Some(Ok(first)) => {
            let rest = futures::stream::unfold(driver, |mut d| async move {
                let item = d.next().await?;
                Some((item, d))
            });
            Ok(futures::stream::once(async move { Ok(first) })
                .chain(rest)
                .boxed())
        }
        Some(Err(e)) => Err(e),
        None => Err(LlmError::Connection {
            message: "stream ended without any event".into(),
        }),
    }
}

/// Longest NDJSON line accepted (a runaway line is a malformed stream, not a memory sink).
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// The non-empty lines of a newline-delimited JSON body, without their line ends. A body cut
/// off by the transport is a connection error; a last line without a newline still counts.
pub(crate) fn ndjson_lines(resp: reqwest::Response) -> Events<String> {
    struct Lines {
        body: BoxStream<'static, Result<Vec<u8>, LlmError>>,
        buf: Vec<u8>,
        ended: bool,
    }
    let body = resp
        .bytes_stream()
        .map(|r| {
            r.map(|b| b.to_vec()).map_err(|e| {
                if e.is_timeout() {
                    LlmError::Timeout {
                        message: format!("stream interrupted: {e}"),
                    }
                } else {
                    LlmError::Connection {
                        message: format!("stream interrupted: {e}"),
                    }
                }
            })
        })
        .boxed();
    let state = Lines {
        body,
        buf: Vec::new(),
        ended: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(pos) = st.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = st.buf.drain(..=pos).collect();
                match decode_line(&line) {
                    Ok(Some(l)) => return Some((Ok(l), st)),
                    Ok(None) => continue,
                    Err(e) => {
                        st.ended = true;
                        st.buf.clear();
                        return Some((Err(e), st));
                    }
                }
            }
            if st.ended {
                if st.buf.is_empty() {
                    return None;
                }
                let line = std::mem::take(&mut st.buf);
                return match decode_line(&line) {
                    Ok(Some(l)) => Some((Ok(l), st)),
                    Ok(None) => None,
                    Err(e) => Some((Err(e), st)),
                };
            }
            match st.body.next().await {
                Some(Ok(chunk)) => {
                    if st.buf.len() + chunk.len() > MAX_LINE_BYTES {
                        st.ended = true;
                        st.buf.clear();
                        return Some((
                            Err(LlmError::Malformed {
                                message: format!(
                                    "a stream line is longer than {MAX_LINE_BYTES} bytes"
                                ),
                            }),
                            st,
                        ));
                    }
                    st.buf.extend_from_slice(&chunk);
                }
                Some(Err(e)) => {
                    st.ended = true;
                    st.buf.clear();
                    return Some((Err(e), st));
                }
                None => st.ended = true,
            }
        }
    })
    .boxed()
}

fn decode_line(line: &[u8]) -> Result<Option<String>, LlmError> {
    let text = std::str::from_utf8(line).map_err(|e| LlmError::Malformed {
        message: format!("stream line is not UTF-8: {e}"),
    })?;
    let text = text.trim();
    Ok((!text.is_empty()).then(|| text.to_string()))
}
