//! `ReadBeforeWriteMiddleware` (`wrap_tool_call`, `read_before_write.enabled`, on by
//! default): changing a file that exists needs a `read_file` of its *current* version first.
//! Without it a model appends the same section again and again to a report it never reads
//! back (DeerFlow issue #3857).
//!
//! * A successful `read_file` gets a mark in its tool message's `additional_kwargs`
//!   (`deerflow_read_mark: {path, hash}`, the SHA-256 of the whole file as it is right
//!   after the read). The gate's memory is the conversation: a summarized-away read takes
//!   its mark with it.
//! * `write_file` on an existing file (overwrite or append) and `str_replace` run only when
//!   the newest mark for that path hashes the file's current content. A write never makes a
//!   mark, so each modification changes the hash and the next one needs a new read.
//!   Creating a file needs no read.
//! * Check and write (and read and mark) are serialized per (thread, path): calls of one
//!   model turn run concurrently, and two writes must not both pass on one stale read.
//! * When the gate cannot look at the file (binary, unreadable, no sandbox) it lets the
//!   tool run and report its own error.

use crate::{Hook, Middleware, RunContext, ToolCallHandler, ToolCallRequest, ToolCallResult};
use async_trait::async_trait;
use fawn_sandbox::SandboxError;
use fawn_state::{Message, MessageKind, ThreadState};
use fawn_tools::ToolError;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Where a read's mark is kept on its tool message.
pub const READ_MARK_KEY: &str = "deerflow_read_mark";

/// Largest file the gate hashes; bigger ones are not gated.
const MAX_HASHED_BYTES: u64 = 64 * 1024 * 1024;

type GateLock = tokio::sync::Mutex<()>;

/// The per-(thread, path) locks of every run in the process.
#[derive(Debug, Default)]
pub struct FileGates {
    locks: Mutex<HashMap<(String, String), Weak<GateLock>>>,
}

impl FileGates {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock_for(&self, thread_id: &str, path: &str) -> Arc<GateLock> {
        let mut map = match self.locks.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let key = (thread_id.to_string(), path.to_string());
        if let Some(l) = map.get(&key).and_then(Weak::upgrade) {
            return l;
        }
        // Forget the locks nobody holds any more before adding one.
        map.retain(|_, w| w.strong_count() > 0);
        let l = Arc::new(GateLock::new(()));
        map.insert(key, Arc::downgrade(&l));
        l
    }
}

pub struct ReadBeforeWriteMiddleware {
    gates: Arc<FileGates>,
}

impl ReadBeforeWriteMiddleware {
    pub fn new(gates: Arc<FileGates>) -> Self {
        ReadBeforeWriteMiddleware { gates }
    }

    /// The message a blocked write answers with.
    pub fn blocked_text(tool: &str, path: &str) -> String {
        format!(
            "Error: {tool} refused: {path} exists and has changed since you last read it (or you \
             never read it). Every write makes earlier reads stale. Read the file again with \
             read_file first (for an append, the last few dozen lines are enough), see what it \
             already contains, then retry."
        )
    }
}

/// `/a/./b/../c` → `/a/c`, so one file has one mark whatever the spelling.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    if path.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What the gate sees of a file.
enum Current {
    Missing,
    Hash(String),
    /// Not inspectable: let the tool speak for itself.
    Unknown,
}

async fn current(ctx: &RunContext, path: &str) -> Current {
    let sandbox = match ctx.sandbox.get().await {
        Ok(s) => s,
        Err(_) => return Current::Unknown,
    };
    match sandbox.read_bytes(path, MAX_HASHED_BYTES).await {
        Ok(bytes) => Current::Hash(sha256_hex(&bytes)),
        Err(SandboxError::NotFound(_)) => Current::Missing,
        Err(_) => Current::Unknown,
    }
}

/// The hash of the newest read mark for `path` in the conversation.
fn latest_mark(state: &ThreadState, path: &str) -> Option<String> {
    state
        .messages
        .iter()
        .rev()
        .filter(|m| m.kind == MessageKind::Tool)
        .find_map(|m| {
            let mark = m.additional_kwargs.get(READ_MARK_KEY)?;
            (mark.get("path").and_then(Value::as_str) == Some(path))
                .then(|| mark.get("hash").and_then(Value::as_str).map(str::to_string))
        })
        .flatten()
}

fn requested_path(req: &ToolCallRequest) -> Option<String> {
    req.call
        .args
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
}

#[async_trait]
impl Middleware for ReadBeforeWriteMiddleware {
    fn name(&self) -> &str {
        "ReadBeforeWriteMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::WrapToolCall]
    }

    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        ctx: &RunContext,
        next: &dyn ToolCallHandler,
    ) -> Result<ToolCallResult, ToolError> {
        let name = request.call.name.clone();
        let gated = matches!(name.as_str(), "write_file" | "str_replace");
        let read = name == "read_file";
        if !(gated || read) || request.tool.is_none() {
            return next.call(request).await;
        }
        let Some(raw_path) = requested_path(&request) else {
            return next.call(request).await;
        };
        let path = normalize(&raw_path);
        let lock = self.gates.lock_for(&ctx.thread_id, &path);
        let _held = lock.lock().await;
        if gated {
            if let Current::Hash(now) = current(ctx, &raw_path).await
                && latest_mark(&request.state, &path).as_deref() != Some(now.as_str())
            {
                let call_id = request.call.id.clone().unwrap_or_default();
                return Ok(ToolCallResult {
                    message: Message::tool(
                        Self::blocked_text(&name, &raw_path),
                        call_id,
                        Some(name),
                    )
                    .with_status_error(),
                    update: None,
                    end_run: false,
                });
            }
            return next.call(request).await;
        }
        let mut result = next.call(request).await?;
        if result.message.status.as_deref() != Some("error")
            && let Current::Hash(hash) = current(ctx, &raw_path).await
        {
            result.message.additional_kwargs.insert(
                READ_MARK_KEY.to_string(),
                json!({"path": path, "hash": hash}),
            );
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalize() {
        assert_eq!(
            normalize("/mnt/user-data/outputs/./a/../r.md"),
            "/mnt/user-data/outputs/r.md"
        );
        assert_eq!(normalize("/x//y/"), "/x/y");
    }

    #[test]
    fn newest_mark_wins() {
        let mut s = ThreadState::default();
        let mark = |hash: &str| {
            let mut m = Message::tool("text", "c", Some("read_file".into()));
            m.additional_kwargs.insert(
                READ_MARK_KEY.into(),
                json!({"path": "/mnt/user-data/outputs/r.md", "hash": hash}),
            );
            m
        };
        s.messages.push(mark("old"));
        s.messages
            .push(Message::tool("OK", "d", Some("write_file".into())));
        s.messages.push(mark("new"));
        assert_eq!(
            latest_mark(&s, "/mnt/user-data/outputs/r.md").as_deref(),
            Some("new")
        );
        assert_eq!(latest_mark(&s, "/mnt/user-data/outputs/other.md"), None);
    }

    #[test]
    fn gates_are_shared_per_thread_and_path() {
        let g = FileGates::new();
        let a = g.lock_for("t", "/p");
        let b = g.lock_for("t", "/p");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &g.lock_for("u", "/p")));
        drop((a, b));
        let _c = g.lock_for("t", "/q");
        let len = g.locks.lock().map(|m| m.len()).unwrap_or_default();
        assert_eq!(len, 1, "locks nobody holds are forgotten");
    }
}
