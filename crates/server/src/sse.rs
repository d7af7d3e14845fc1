//! SSE framing and the streaming response bodies: run streams (creator and joiners), the
//! thread stream, and the `/wait`/`/join` JSON bodies with `\n` keep-alives.
//!
//! Framing (`langgraph-api.md` §5.1): `event: <name>\n`, one `data: <json>\n` line, an
//! optional `id: <n>\n`, a blank line. Heartbeats are `: heartbeat\n\n` comments.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use bytes::Bytes;
use fawn_runtime::broker::{Event, Next, Subscription, ThreadItem, ThreadWatch};
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// Appends one SSE event to `buf`.
pub fn frame(buf: &mut Vec<u8>, name: &str, data: &[u8], id: Option<u64>) {
    buf.extend_from_slice(b"event: ");
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b"\ndata: ");
    buf.extend_from_slice(data);
    buf.push(b'\n');
    if let Some(id) = id {
        buf.extend_from_slice(b"id: ");
        buf.extend_from_slice(id.to_string().as_bytes());
        buf.push(b'\n');
    }
    buf.push(b'\n');
}

pub const HEARTBEAT: &[u8] = b": heartbeat\n\n";

/// `Cache-Control` of every SSE response: `no-transform` keeps proxies that compress (such as
/// Next.js rewrites under `next start`) from gzipping the stream and holding it until it ends.
pub const SSE_CACHE_CONTROL: &str = "no-store, no-transform";

/// Headers of every SSE response.
pub fn sse_headers(location: Option<&str>, content_location: Option<&str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(SSE_CACHE_CONTROL),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Some(l) = location.and_then(|l| HeaderValue::from_str(l).ok()) {
        h.insert(header::LOCATION, l);
    }
    if let Some(l) = content_location.and_then(|l| HeaderValue::from_str(l).ok()) {
        h.insert(header::CONTENT_LOCATION, l);
    }
    h
}

/// Shared knobs of streaming bodies.
#[derive(Clone, Debug)]
pub struct StreamSettings {
    pub heartbeat: Duration,
    /// `/wait` and `/join` keep-alive interval.
    pub keepalive: Duration,
    /// Server shutdown: every stream ends.
    pub shutdown: CancellationToken,
}

fn interval(period: Duration) -> Interval {
    let mut i = tokio::time::interval_at(Instant::now() + period, period);
    i.set_missed_tick_behavior(MissedTickBehavior::Delay);
    i
}

/// Runs a callback when a stream body is dropped before it completed (client went away).
pub struct DisconnectGuard {
    on_disconnect: Option<Box<dyn FnOnce() + Send>>,
}

impl DisconnectGuard {
    pub fn new(f: Option<Box<dyn FnOnce() + Send>>) -> DisconnectGuard {
        DisconnectGuard { on_disconnect: f }
    }

    pub fn none() -> DisconnectGuard {
        DisconnectGuard {
            on_disconnect: None,
        }
    }

    /// The stream ended normally: the callback will not run.
    pub fn complete(&mut self) {
        self.on_disconnect = None;
    }
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        if let Some(f) = self.on_disconnect.take() {
            f();
        }
    }
}

/// Counts an SSE stream as open (`fawn_http_sse_streams_open`) while it lives.
pub struct SseOpen(#[allow(dead_code)] fawn_telemetry::metrics::Open);

impl SseOpen {
    pub fn new() -> SseOpen {
        SseOpen(fawn_telemetry::metrics::Open::new(
            &fawn_telemetry::metrics().sse_open,
        ))
    }
}

impl Default for SseOpen {
    fn default() -> Self {
        SseOpen::new()
    }
}

/// Asked at each heartbeat: true = the run ended elsewhere, close the stream.
pub type Liveness = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

struct RunStreamState {
    sub: Subscription,
    include_ids: bool,
    /// `values` events leave out DeerFlow's hidden messages ([`crate::wire::hides_internal_messages`]).
    hide: bool,
    heartbeat: Interval,
    shutdown: CancellationToken,
    finished: bool,
    guard: DisconnectGuard,
    liveness: Option<Liveness>,
    _open: SseOpen,
}

fn frame_events(events: &[Arc<Event>], include_ids: bool, hide: bool) -> Bytes {
    let size: usize = events
        .iter()
        .map(|e| e.data_len() + e.name.len() + 32)
        .sum();
    let mut buf = Vec::with_capacity(size);
    for e in events {
        let data = e.data();
        let visible = visible_values(hide, e.base(), &data);
        frame(
            &mut buf,
            &e.name,
            visible.as_deref().unwrap_or(&data),
            if include_ids { Some(e.id) } else { None },
        );
    }
    Bytes::from(buf)
}

/// The data of a `values` event without DeerFlow's hidden messages, when `hide` and there
/// are some; `None` sends the data as it is.
fn visible_values(hide: bool, base: &str, data: &[u8]) -> Option<Bytes> {
    (hide && base == "values")
        .then(|| crate::wire::without_hidden_messages(data))
        .flatten()
}

/// The SSE body of a run stream: replay from the subscription's cursor, then live events,
/// heartbeats while idle, end when the run's log closes (or with a `gap` event). Called by
/// the handler: the request's mount decides whether `values` show hidden messages.
pub fn run_stream_body(
    sub: Subscription,
    include_ids: bool,
    settings: &StreamSettings,
    guard: DisconnectGuard,
    liveness: Option<Liveness>,
) -> Body {
    let state = RunStreamState {
        sub,
        include_ids,
        hide: crate::wire::hides_internal_messages(),
        heartbeat: interval(settings.heartbeat),
        shutdown: settings.shutdown.clone(),
        finished: false,
        guard,
        liveness,
        _open: SseOpen::new(),
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        loop {
            if st.finished {
                return None;
            }
            match st.sub.poll(128) {
                Next::Events(events) => {
                    let bytes = frame_events(&events, st.include_ids, st.hide);
                    return Some((Ok::<Bytes, std::convert::Infallible>(bytes), st));
                }
                Next::Gap(gap) => {
                    st.finished = true;
                    st.guard.complete();
                    let mut buf = Vec::new();
                    frame(&mut buf, "gap", &gap.to_json(), None);
                    return Some((Ok(Bytes::from(buf)), st));
                }
                Next::Done => {
                    st.guard.complete();
                    return None;
                }
                Next::Pending => {}
            }
            tokio::select! {
                _ = st.sub.changed() => {}
                _ = st.heartbeat.tick() => {
                    if let Some(l) = &st.liveness
                        && l().await
                    {
                        // The run ended without this process seeing it: drain and stop.
                        if let Next::Events(events) = st.sub.poll(usize::MAX) {
                            st.finished = true;
                            st.guard.complete();
                            let bytes = frame_events(&events, st.include_ids, st.hide);
                            return Some((Ok(bytes), st));
                        }
                        st.guard.complete();
                        return None;
                    }
                    return Some((Ok(Bytes::from_static(HEARTBEAT)), st));
                }
                _ = st.shutdown.cancelled() => {
                    st.guard.complete();
                    return None;
                }
            }
        }
    });
    Body::from_stream(stream)
}

/// An SSE body with a single event, then the end (e.g. the `error` of a join on a missing run).
pub fn single_event_body(name: &str, data: &[u8]) -> Body {
    let mut buf = Vec::new();
    frame(&mut buf, name, data, None);
    Body::from(buf)
}

/// Which items a thread stream forwards.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadModes {
    pub run_modes: bool,
    pub lifecycle: bool,
    pub state_update: bool,
}

struct ThreadStreamState {
    watch: ThreadWatch,
    replay: std::vec::IntoIter<Arc<Event>>,
    modes: ThreadModes,
    hide: bool,
    heartbeat: Interval,
    shutdown: CancellationToken,
    _open: SseOpen,
}

fn thread_item_bytes(
    modes: ThreadModes,
    hide: bool,
    run_id: &str,
    item: &ThreadItem,
) -> Option<Bytes> {
    let mut buf = Vec::new();
    match item {
        ThreadItem::Event(e) => {
            let is_meta = e.base() == "metadata";
            if modes.run_modes || (modes.lifecycle && is_meta) {
                let data = e.data();
                let visible = visible_values(hide, e.base(), &data);
                frame(
                    &mut buf,
                    &e.name,
                    visible.as_deref().unwrap_or(&data),
                    Some(e.id),
                );
            } else {
                return None;
            }
        }
        ThreadItem::RunDone(rid) => {
            if !(modes.run_modes || modes.lifecycle) {
                return None;
            }
            let rid = if rid.is_empty() { run_id } else { rid };
            let data = serde_json::json!({"status": "run_done", "run_id": rid}).to_string();
            frame(&mut buf, "metadata", data.as_bytes(), None);
        }
        ThreadItem::StateUpdate(data) => {
            if !modes.state_update {
                return None;
            }
            let visible = visible_values(hide, "values", data);
            frame(&mut buf, "values", visible.as_deref().unwrap_or(data), None);
        }
    }
    Some(Bytes::from(buf))
}

/// `GET /threads/{id}/stream`: every run of the thread, never closing by itself. Called by
/// the handler (the mount decides whether `values` show hidden messages).
pub fn thread_stream_body(
    watch: ThreadWatch,
    replay: Vec<Arc<Event>>,
    modes: ThreadModes,
    settings: &StreamSettings,
) -> Body {
    let state = ThreadStreamState {
        watch,
        replay: replay.into_iter(),
        modes,
        hide: crate::wire::hides_internal_messages(),
        heartbeat: interval(settings.heartbeat),
        shutdown: settings.shutdown.clone(),
        _open: SseOpen::new(),
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        for e in st.replay.by_ref() {
            if let Some(b) = thread_item_bytes(st.modes, st.hide, "", &ThreadItem::Event(e)) {
                return Some((Ok::<Bytes, std::convert::Infallible>(b), st));
            }
        }
        loop {
            tokio::select! {
                item = st.watch.rx.recv() => match item {
                    Ok((run_id, item)) => {
                        if let Some(b) = thread_item_bytes(st.modes, st.hide, &run_id, &item) {
                            return Some((Ok(b), st));
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        // Keep the stream open: only heartbeats from now on.
                        st.heartbeat.tick().await;
                        return Some((Ok(Bytes::from_static(HEARTBEAT)), st));
                    }
                },
                _ = st.heartbeat.tick() => return Some((Ok(Bytes::from_static(HEARTBEAT)), st)),
                _ = st.shutdown.cancelled() => return None,
            }
        }
    });
    Body::from_stream(stream)
}

struct WaitState {
    fut: Option<BoxFuture<'static, Bytes>>,
    keepalive: Interval,
    guard: DisconnectGuard,
}

/// A JSON body that is written when `fut` resolves, preceded by `\n` keep-alives. `fut`
/// yields a run's output (thread values): called by the handler, whose mount decides
/// whether they show hidden messages.
pub fn wait_body(
    fut: BoxFuture<'static, Bytes>,
    settings: &StreamSettings,
    guard: DisconnectGuard,
) -> Body {
    use futures::FutureExt;
    let fut = if crate::wire::hides_internal_messages() {
        fut.map(|b| crate::wire::without_hidden_messages(&b).unwrap_or(b))
            .boxed()
    } else {
        fut
    };
    let state = WaitState {
        fut: Some(fut),
        keepalive: interval(settings.keepalive),
        guard,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        let fut = st.fut.as_mut()?;
        tokio::select! {
            body = fut => {
                st.fut = None;
                st.guard.complete();
                Some((Ok::<Bytes, std::convert::Infallible>(body), st))
            }
            _ = st.keepalive.tick() => Some((Ok(Bytes::from_static(b"\n")), st)),
        }
    });
    Body::from_stream(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_is_exact() {
        let mut b = Vec::new();
        frame(&mut b, "values", br#"{"a":1}"#, None);
        frame(&mut b, "messages", b"[1,2]", Some(7));
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "event: values\ndata: {\"a\":1}\n\nevent: messages\ndata: [1,2]\nid: 7\n\n"
        );
    }
}
