//! The chat-completions event stream, read in place: the response body's bytes are cut into
//! server-sent events and each `data` is parsed as a [`ChatCompletionChunk`] on the task
//! that polls the model's stream.
//!
//! async-openai's streaming spawned a task per call that parsed the events with a general
//! parser (most of the provider's CPU in a DeerFlow-shaped run, whose title call streams
//! dozens of chunks) and handed each over a channel (one more task wake-up per chunk). The
//! framing is the SSE one async-openai used: lines end in `\n`, `\r\n` or `\r`; `data:`
//! lines of an event are joined with `\n`; comments and other fields are ignored; an event
//! ends at a blank line; `[DONE]` ends the stream; `keepalive` events are skipped; an event
//! the body ends in the middle of is dropped.

use super::wire::ChatCompletionChunk;
use crate::LlmError;
use bytes::Bytes;
use futures::Stream;
use futures::StreamExt;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The chunks of one streamed response.
pub(crate) struct ChunkEvents {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    parser: Parser,
    done: bool,
}

impl ChunkEvents {
    pub(crate) fn new(response: reqwest::Response) -> ChunkEvents {
        ChunkEvents::from_body(response.bytes_stream())
    }

    fn from_body(body: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static) -> Self {
        ChunkEvents {
            body: Box::pin(body),
            parser: Parser::default(),
            done: false,
        }
    }
}

impl Stream for ChunkEvents {
    type Item = Result<ChatCompletionChunk, LlmError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match this.parser.next_event() {
                Some(Event::Done) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Some(Event::Data(data)) => return Poll::Ready(Some(parse_chunk(&data))),
                None => {}
            }
            match this.body.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(LlmError::Connection {
                        message: format!("stream interrupted: Transport error: {e}"),
                    })));
                }
                Poll::Ready(Some(Ok(bytes))) => this.parser.push(&bytes),
            }
        }
    }
}

fn parse_chunk(data: &[u8]) -> Result<ChatCompletionChunk, LlmError> {
    // Checked as UTF-8 once, so the parser does not check each of its ~20 strings again
    // (`from_slice` validates every string it reads). Bytes that are not UTF-8 take the
    // slice parser, for its error.
    let parsed = match std::str::from_utf8(data) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(data),
    };
    parsed.map_err(|e| {
        let content = String::from_utf8_lossy(data);
        let mut shown: String = content.chars().take(200).collect();
        if shown.len() < content.len() {
            shown.push('…');
        }
        LlmError::Malformed {
            message: format!("invalid JSON from the provider ({e}): {shown}"),
        }
    })
}

#[derive(Debug, PartialEq)]
enum Event {
    /// An event's `data` (its lines joined with `\n`).
    Data(Vec<u8>),
    /// `data: [DONE]`.
    Done,
}

/// Cuts bytes into events. Unconsumed bytes stay in `buf` from `pos` on.
#[derive(Default)]
struct Parser {
    buf: Vec<u8>,
    pos: usize,
    /// The current event's data so far, and whether it has any `data` line.
    data: Vec<u8>,
    has_data: bool,
    /// The current event's `event` field is `keepalive`.
    keepalive: bool,
    /// The last line ended in `\r`: a `\n` right after it belongs to that line end.
    after_cr: bool,
}

impl Parser {
    fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 4096 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete event in what was pushed, if any.
    fn next_event(&mut self) -> Option<Event> {
        loop {
            if self.after_cr && self.pos < self.buf.len() {
                if self.buf[self.pos] == b'\n' {
                    self.pos += 1;
                }
                self.after_cr = false;
            }
            let rest = &self.buf[self.pos..];
            let end = memchr::memchr2(b'\n', b'\r', rest)?;
            let line_start = self.pos;
            self.after_cr = rest[end] == b'\r';
            self.pos += end + 1;
            let line = &self.buf[line_start..line_start + end];
            if line.is_empty() {
                if let Some(event) = self.dispatch() {
                    return Some(event);
                }
                continue;
            }
            if line[0] == b':' {
                continue;
            }
            let (field, value) = match line.iter().position(|&b| b == b':') {
                Some(i) => {
                    let v = &line[i + 1..];
                    (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
                }
                None => (line, &b""[..]),
            };
            match field {
                b"data" => {
                    if self.has_data {
                        self.data.push(b'\n');
                    }
                    self.data.extend_from_slice(value);
                    self.has_data = true;
                }
                b"event" => self.keepalive = value == b"keepalive",
                _ => {}
            }
        }
    }

    /// Ends the current event at a blank line.
    fn dispatch(&mut self) -> Option<Event> {
        let has_data = std::mem::take(&mut self.has_data);
        let keepalive = std::mem::take(&mut self.keepalive);
        let data = std::mem::take(&mut self.data);
        if !has_data || keepalive {
            return None;
        }
        if data == b"[DONE]" {
            return Some(Event::Done);
        }
        Some(Event::Data(data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(parts: &[&[u8]]) -> Vec<Event> {
        let mut p = Parser::default();
        let mut out = Vec::new();
        for part in parts {
            p.push(part);
            while let Some(e) = p.next_event() {
                out.push(e);
            }
        }
        out
    }

    fn data(s: &str) -> Event {
        Event::Data(s.as_bytes().to_vec())
    }

    #[test]
    fn frames_events_whatever_the_line_ends_and_the_cuts() {
        let whole: &[u8] = b"data: {\"a\":1}\n\ndata:{\"b\":2}\r\n\r\n: comment\nevent: x\nid: 7\ndata: one\ndata: two\r\rdata: [DONE]\n\n";
        let want = vec![
            data("{\"a\":1}"),
            data("{\"b\":2}"),
            data("one\ntwo"),
            Event::Done,
        ];
        assert_eq!(events(&[whole]), want);
        // Every cut of the same bytes into two pushes gives the same events.
        for i in 0..whole.len() {
            assert_eq!(events(&[&whole[..i], &whole[i..]]), want, "cut at {i}");
        }
        // One byte at a time too.
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        assert_eq!(events(&bytes), want);
    }

    #[test]
    fn skips_keepalives_and_empty_events_and_drops_an_unfinished_one() {
        let got = events(&[b"event: keepalive\ndata: {}\n\n\n\nretry: 5\n\ndata: a\n\ndata: cut"]);
        assert_eq!(got, vec![data("a")]);
    }

    #[test]
    fn a_field_without_a_colon_and_a_data_line_without_a_value() {
        let got = events(&[b"data\n\ndata:\ndata:x\n\n"]);
        assert_eq!(got, vec![data(""), data("\nx")]);
    }

    #[tokio::test]
    async fn streams_chunks_until_done_and_reports_bad_json() {
        let body = futures::stream::iter(vec![
            Ok(Bytes::from_static(
                b"data: {\"id\":\"c1\",\"choices\":[]}\n",
            )),
            Ok(Bytes::from_static(b"\ndata: {not json}\n\n")),
            Ok(Bytes::from_static(
                b"data: [DONE]\n\ndata: {\"id\":\"after\"}\n\n",
            )),
        ]);
        let got: Vec<_> = ChunkEvents::from_body(body).collect().await;
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0].as_ref().ok().and_then(|c| c.id.as_deref()),
            Some("c1")
        );
        match &got[1] {
            Err(LlmError::Malformed { message }) => {
                assert!(message.contains("{not json}"), "{message}")
            }
            other => panic!("expected a malformed-chunk error, got {other:?}"),
        }
    }

    #[test]
    fn a_chunk_is_parsed_from_utf8_and_bytes_that_are_not_are_malformed() {
        let ok = parse_chunk("{\"id\":\"é🦌\",\"model\":\"m\\u00e9\"}".as_bytes());
        let ok = ok.ok();
        assert_eq!(ok.as_ref().and_then(|c| c.id.as_deref()), Some("é🦌"));
        assert_eq!(ok.as_ref().and_then(|c| c.model.as_deref()), Some("mé"));
        match parse_chunk(b"{\"id\":\"\xff\xfe\"}") {
            Err(LlmError::Malformed { message }) => {
                assert!(
                    message.starts_with("invalid JSON from the provider"),
                    "{message}"
                )
            }
            other => panic!("expected a malformed-chunk error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_body_that_ends_without_done_ends_the_stream() {
        let body =
            futures::stream::iter(vec![Ok(Bytes::from_static(b"data: {\"id\":\"c1\"}\n\n"))]);
        let got: Vec<_> = ChunkEvents::from_body(body).collect().await;
        assert_eq!(got.len(), 1);
    }
}
