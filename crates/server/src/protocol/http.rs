//! The HTTP side of the protocol: `POST /threads/{thread_id}/commands` (one command in,
//! its response out) and `POST /threads/{thread_id}/stream/events` (the body is one
//! subscription; the response an SSE stream of the matching events).
//!
//! * A command that is not `{"id": <uint>, "method": <string>, …}` is a 400 with the
//!   protocol's error envelope; a body that is not JSON is a 400 `{"detail"}`. A command
//!   that fails is a 200 whose body is the error response (the protocol's own envelope).
//! * The event stream answers 400 for a bad filter (`channels` required and known,
//!   `namespaces` a list of lists of strings, `depth` and `since` non-negative integers).
//!   It replays every run of the thread this node still holds from its start, skips events
//!   at or below `since` (the reconnect cursor: the last `seq` the client saw), then
//!   follows the thread live: it does not end when a run does. Each event is framed as
//!   `event: <method>`, `data: <envelope>`, `id: <seq>`; `: heartbeat` comments keep idle
//!   connections open. A thread that does not exist yet is streamed too (its id may be
//!   minted by the client, the thread created by `run.start`); only the caller's runs are
//!   ever shown.

use super::commands::{Ctx, handle};
use super::project::Out;
use super::session::{Session, open};
use super::wire::{Command, Filter};
use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Path, config_headers, read_body, uuid_param};
use crate::sse::{HEARTBEAT, sse_headers};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;
use tokio::time::{Instant, MissedTickBehavior};

fn json(status: StatusCode, v: &Value) -> Response {
    crate::wire::json_response(status, v)
}

async fn json_body(req: Request) -> ApiResult<Value> {
    let bytes = read_body(req).await?;
    serde_json::from_slice(&bytes).map_err(|_| ApiError::bad_request("Invalid JSON body"))
}

pub async fn command(
    State(app): State<AppState>,
    Path(tid): Path<String>,
    principal: Principal,
    req: Request,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let headers = config_headers(req.headers());
    let v = json_body(req).await?;
    let cmd = match Command::parse(&v) {
        Ok(c) => c,
        Err((id, e)) => {
            let mut r = e.response(None);
            r["id"] = id.unwrap_or(Value::Null);
            return Ok(json(StatusCode::BAD_REQUEST, &r));
        }
    };
    let ctx = Ctx {
        app: &app,
        principal: &principal,
        thread_id: &tid,
        headers: &headers,
    };
    let mut replay = Vec::new();
    let resp = handle(&ctx, cmd, None, &mut replay).await;
    Ok(json(StatusCode::OK, &resp))
}

/// Appends one event as an SSE frame.
fn frame(buf: &mut Vec<u8>, out: &Out) {
    match out {
        Out::Event(e) => crate::sse::frame(buf, e.method, e.json.as_bytes(), Some(e.seq)),
        Out::Error(f) | Out::Gap { frame: f, .. } => {
            crate::sse::frame(buf, "error", f.as_bytes(), None)
        }
    }
}

struct Stream {
    session: Session,
    filter: Filter,
    since: Option<u64>,
    heartbeat: tokio::time::Interval,
    shutdown: tokio_util::sync::CancellationToken,
    _open: crate::sse::SseOpen,
}

impl Stream {
    fn wants(&self, out: &Out) -> bool {
        match out {
            Out::Event(e) => self.filter.matches(e) && self.since.is_none_or(|s| e.seq > s),
            Out::Error(_) => true,
            // Only a reader whose cursor is before the lost events missed anything.
            Out::Gap { first_seq, .. } => {
                self.since.is_none_or(|s| s.saturating_add(1) < *first_seq)
            }
        }
    }
}

pub async fn stream_events(
    State(app): State<AppState>,
    Path(tid): Path<String>,
    principal: Principal,
    req: Request,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let v = json_body(req).await?;
    let Value::Object(o) = &v else {
        return Err(ApiError::bad_request(
            "The body must be an object {channels, namespaces?, depth?, since?}",
        ));
    };
    let filter = Filter::parse(o).map_err(|e| ApiError::bad_request(e.message))?;
    let since = match o.get("since") {
        None | Some(Value::Null) => None,
        Some(s) => Some(
            s.as_u64()
                .ok_or_else(|| ApiError::bad_request("since must be a non-negative integer"))?,
        ),
    };
    let session = open(&app, &tid, &principal, None);
    let period = app.stream.heartbeat;
    let mut heartbeat = tokio::time::interval_at(Instant::now() + period, period);
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = Stream {
        session,
        filter,
        since,
        heartbeat,
        shutdown: app.stream.shutdown.clone(),
        _open: crate::sse::SseOpen::new(),
    };
    let body = futures::stream::unfold(state, |mut st| async move {
        loop {
            tokio::select! {
                out = st.session.rx.recv() => {
                    let first = out?;
                    let mut buf = Vec::new();
                    if st.wants(&first) {
                        frame(&mut buf, &first);
                    }
                    // Whatever else is ready goes in the same chunk.
                    while buf.len() < 64 * 1024 {
                        match st.session.rx.try_recv() {
                            Ok(o) => {
                                if st.wants(&o) {
                                    frame(&mut buf, &o);
                                }
                            }
                            Err(_) => break,
                        }
                    }
                    if !buf.is_empty() {
                        return Some((Ok::<Bytes, std::convert::Infallible>(Bytes::from(buf)), st));
                    }
                }
                _ = st.heartbeat.tick() => {
                    return Some((Ok(Bytes::from_static(HEARTBEAT)), st));
                }
                _ = st.shutdown.cancelled() => return None,
            }
        }
    });
    let mut r = Body::from_stream(body).into_response();
    *r.headers_mut() = sse_headers(None, None);
    Ok(r)
}
