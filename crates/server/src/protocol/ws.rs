//! The WebSocket side of the protocol: `GET /threads/{thread_id}/stream/events` and the
//! compatibility route `GET /threads/{thread_id}/runs/{run_id}/protocol` (the same, bound
//! to one run's events).
//!
//! The upgrade is an ordinary request until it is accepted: the caller is authenticated
//! (API key, bearer token or session cookie), the route's access rule applies (another
//! user's thread is a 404) and so does the `Origin` check of [`crate::access`] (a page on a
//! foreign site gets a 403: browsers send cookies with WebSocket handshakes, and no CSRF
//! header can be asked of them).
//!
//! Every text frame the client sends is a command (the first one usually
//! `subscription.subscribe`) and gets its response frame; events matching one of the
//! socket's subscriptions follow as they come, each once. The socket keeps its last
//! [`SOCKET_BUFFER`](super::commands::SOCKET_BUFFER) events (at most
//! [`SOCKET_BUFFER_BYTES`](super::commands::SOCKET_BUFFER_BYTES)), so a subscription made
//! after them still gets them (`replayed_events`). A frame that is not a command gets an error
//! frame; the socket stays open. The server pings idle sockets at the heartbeat interval.

use super::commands::{Ctx, Socket, handle};
use super::project::Out;
use super::session::open;
use super::wire::{Command, ProtocolError};
use crate::app::AppState;
use crate::auth::Principal;
use crate::authz::run_user;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Path, config_headers, uuid_param};
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use std::sync::Arc;
use tokio::time::{Instant, MissedTickBehavior};

fn upgrade(ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>) -> ApiResult<WebSocketUpgrade> {
    ws.map_err(|r| ApiError::new(r.status(), r.body_text()))
}

pub async fn thread_socket(
    State(app): State<AppState>,
    Path(tid): Path<String>,
    principal: Principal,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let ws = upgrade(ws)?;
    let config = config_headers(&headers);
    Ok(accept(ws, app, tid, principal, config, None))
}

pub async fn run_socket(
    State(app): State<AppState>,
    Path((tid, rid)): Path<(String, String)>,
    principal: Principal,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    let rid = uuid_param("run", &rid)?;
    let ws = upgrade(ws)?;
    let run = app
        .store()
        .get_run(&rid)
        .await
        .map_err(|e| ApiError::store("loading the run", e))?;
    if !run.is_some_and(|r| r.thread_id == tid && principal.owns(run_user(&r))) {
        return Err(ApiError::not_found("Run not found"));
    }
    let config = config_headers(&headers);
    Ok(accept(ws, app, tid, principal, config, Some(rid)))
}

fn accept(
    ws: WebSocketUpgrade,
    app: AppState,
    tid: String,
    principal: Principal,
    config: Vec<(String, String)>,
    only_run: Option<String>,
) -> Response {
    let limit = app.body_limit;
    ws.max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| serve(socket, app, tid, principal, config, only_run))
        .into_response()
}

async fn send(sink: &mut futures::stream::SplitSink<WebSocket, Message>, text: &str) -> bool {
    sink.send(Message::Text(text.to_string().into()))
        .await
        .is_ok()
}

async fn serve(
    socket: WebSocket,
    app: AppState,
    tid: String,
    principal: Principal,
    config: Vec<(String, String)>,
    only_run: Option<String>,
) {
    let _open = fawn_telemetry::metrics::Open::new(&fawn_telemetry::metrics().ws_open);
    let (mut sink, mut incoming) = socket.split();
    let mut session = open(&app, &tid, &principal, only_run);
    let mut state = Socket::default();
    let period = app.stream.heartbeat;
    let mut ping = tokio::time::interval_at(Instant::now() + period, period);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let shutdown = app.stream.shutdown.clone();
    loop {
        tokio::select! {
            frame = incoming.next() => {
                let text = match frame {
                    Some(Ok(Message::Text(t))) => t.to_string(),
                    Some(Ok(Message::Binary(b))) => String::from_utf8_lossy(&b).into_owned(),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                };
                let ctx = Ctx { app: &app, principal: &principal, thread_id: &tid, headers: &config };
                let mut replay = Vec::new();
                let response = match serde_json::from_str::<Value>(&text) {
                    Err(_) => ProtocolError::invalid("Protocol commands must be valid JSON.").response(None),
                    Ok(v) => match Command::parse(&v) {
                        Err((id, e)) => {
                            let mut r = e.response(None);
                            r["id"] = id.unwrap_or(Value::Null);
                            r
                        }
                        Ok(cmd) => handle(&ctx, cmd, Some(&mut state), &mut replay).await,
                    },
                };
                if !send(&mut sink, &response.to_string()).await {
                    break;
                }
                for e in replay {
                    if !send(&mut sink, &e.json).await {
                        return;
                    }
                }
            }
            out = session.rx.recv() => match out {
                Some(Out::Event(e)) => {
                    if state.offer(Arc::clone(&e)) && !send(&mut sink, &e.json).await {
                        break;
                    }
                }
                Some(Out::Error(f) | Out::Gap { frame: f, .. }) => {
                    if !send(&mut sink, &f).await {
                        break;
                    }
                }
                None => {
                    let _ = sink.send(Message::Close(Some(CloseFrame {
                        code: 1011,
                        reason: "thread stream ended".into(),
                    }))).await;
                    break;
                }
            },
            _ = ping.tick() => {
                if sink.send(Message::Ping(Default::default())).await.is_err() {
                    break;
                }
            }
            _ = shutdown.cancelled() => {
                let _ = sink.send(Message::Close(Some(CloseFrame {
                    code: 1001,
                    reason: "server shutting down".into(),
                }))).await;
                break;
            }
        }
    }
}
