//! One connection's event source: a task that reads the thread's feed, projects it and
//! hands the protocol events on through a bounded channel (a slow reader slows the task,
//! never the run: the run writes its log whatever happens here). The task ends when the
//! connection drops its [`Session`], or when the server shuts down.

use super::project::{Out, Projector};
use crate::app::AppState;
use crate::auth::Principal;
use crate::authz::run_user;
use fawn_runtime::thread_feed::{FeedOptions, ThreadFeed};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Events waiting for a slow reader.
const CHANNEL: usize = 256;

/// The receiving end of a connection's events.
pub struct Session {
    pub rx: mpsc::Receiver<Out>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the events of `thread_id` as `principal` may see them (its own runs), from the
/// start of every run this node still holds, then live. `only_run` binds the session to
/// one run.
pub fn open(
    app: &AppState,
    thread_id: &str,
    principal: &Principal,
    only_run: Option<String>,
) -> Session {
    let who = principal.clone();
    let opts = FeedOptions {
        only_run,
        admit: Arc::new(move |run| who.owns(run_user(run))),
        poll: app.queue_config().relay_poll,
    };
    let mut feed = ThreadFeed::new(&app.rt, thread_id, opts);
    let shutdown = app.stream.shutdown.clone();
    let (tx, rx) = mpsc::channel(CHANNEL);
    let task = tokio::spawn(async move {
        let mut projector = Projector::new();
        loop {
            let item = tokio::select! {
                item = feed.next() => item,
                _ = tx.closed() => return,
                _ = shutdown.cancelled() => return,
            };
            match item {
                Ok(item) => {
                    for out in projector.project(&item) {
                        if tx.send(out).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(thread_id = %feed.thread_id(), error = %e, "thread event stream failed");
                    let frame = serde_json::json!({"type": "error", "id": null,
                        "error": "unknown_error", "message": "The thread's event stream failed; reconnect."});
                    let _ = tx.send(Out::Error(Arc::from(frame.to_string()))).await;
                    return;
                }
            }
        }
    });
    Session { rx, task }
}
