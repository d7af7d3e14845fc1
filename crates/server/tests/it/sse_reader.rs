//! Reads SSE events incrementally from a streaming response.

#![allow(dead_code)]

use crate::helpers::{Sse, parse_sse};
use futures::StreamExt;
use std::time::Duration;

pub struct SseReader {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
    pub raw: String,
    pub ended: bool,
}

impl SseReader {
    pub fn new(resp: reqwest::Response) -> SseReader {
        SseReader {
            stream: resp.bytes_stream().boxed(),
            buf: String::new(),
            raw: String::new(),
            ended: false,
        }
    }

    /// The next event (comments skipped), `None` at the end of the stream.
    pub async fn next(&mut self, timeout: Duration) -> Option<Sse> {
        loop {
            while let Some(pos) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..pos + 2).collect();
                let events = parse_sse(&block);
                if let Some(e) = events.into_iter().next() {
                    return Some(e);
                }
            }
            if self.ended {
                return None;
            }
            match tokio::time::timeout(timeout, self.stream.next()).await {
                Ok(Some(Ok(chunk))) => {
                    let s = String::from_utf8_lossy(&chunk).to_string();
                    self.raw.push_str(&s);
                    self.buf.push_str(&s);
                }
                Ok(Some(Err(e))) => panic!("stream error: {e}"),
                Ok(None) => self.ended = true,
                Err(_) => panic!(
                    "no SSE event within {timeout:?}; got so far: {:?}",
                    self.raw
                ),
            }
        }
    }

    /// Everything until the stream ends.
    pub async fn rest(&mut self, timeout: Duration) -> Vec<Sse> {
        let mut out = Vec::new();
        while let Some(e) = self.next(timeout).await {
            out.push(e);
        }
        out
    }

    /// True if nothing but comments arrives within `d` and the stream stays open.
    pub async fn quiet_for(&mut self, d: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            if self.buf.contains("event:") {
                return false;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return !self.ended;
            }
            match tokio::time::timeout(left, self.stream.next()).await {
                Ok(Some(Ok(chunk))) => {
                    let s = String::from_utf8_lossy(&chunk).to_string();
                    self.raw.push_str(&s);
                    self.buf.push_str(&s);
                    // Drop comment-only blocks.
                    while let Some(pos) = self.buf.find("\n\n") {
                        let block: String = self.buf[..pos + 2].to_string();
                        if block.lines().all(|l| l.starts_with(':') || l.is_empty()) {
                            self.buf.drain(..pos + 2);
                        } else {
                            return false;
                        }
                    }
                }
                Ok(Some(Err(_))) | Ok(None) => {
                    self.ended = true;
                    return false;
                }
                Err(_) => return !self.ended,
            }
        }
    }
}
