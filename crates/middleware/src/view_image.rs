//! `ViewImageMiddleware` (`before_model`, `after_model`; models with vision): once every
//! tool call of an AI message that called `view_image` has its result, the images recorded in
//! `viewed_images` are read again through the sandbox and shown to the model in a hidden
//! human message (id `view-image-context:<ai id>`); `after_model` removes that message, so
//! checkpoints keep only the metadata, never the pixels.

use crate::util::HIDE_FROM_UI;
use crate::{Hook, HookOutcome, Middleware, MiddlewareError, RunContext};
use async_trait::async_trait;
use base64::Engine;
use fawn_state::{Content, Message, MessageKind, Messages, StateUpdate, ThreadState};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashSet;

pub const VIEW_IMAGE_TOOL: &str = "view_image";
pub const CONTEXT_ID_PREFIX: &str = "view-image-context:";
/// Server-owned marker on the injected message (the gateway strips it from client input).
pub const CONTEXT_MARKER: &str = "deerflow_view_image_context";
pub const CONTEXT_INTRO: &str = "Here are the images you've viewed:";
/// Largest image read back (as the `view_image` tool).
pub const MAX_IMAGE_BYTES: u64 = 20 * 1024 * 1024;
/// Images attached to one request at most (the most recently recorded ones).
pub const MAX_IMAGES_PER_REQUEST: usize = 8;

const IMAGE_MIME_TYPES: &[&str] = &["image/png", "image/jpeg", "image/webp", "image/gif"];

#[derive(Debug, Default)]
pub struct ViewImageMiddleware;

impl ViewImageMiddleware {
    pub fn new() -> Self {
        ViewImageMiddleware
    }
}

/// The last AI message, when it called `view_image` and all its calls have results.
fn completed_view_call(messages: &Messages) -> Option<&Message> {
    let idx = messages.iter().rposition(|m| m.kind == MessageKind::Ai)?;
    let ai = &messages[idx];
    if !ai.tool_calls.iter().any(|c| c.name == VIEW_IMAGE_TOOL) {
        return None;
    }
    let answered: HashSet<&str> = messages
        .range(idx + 1..)
        .filter(|m| m.kind == MessageKind::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    ai.tool_calls
        .iter()
        .all(|c| c.id.as_deref().is_some_and(|id| answered.contains(id)))
        .then_some(ai)
}

#[async_trait]
impl Middleware for ViewImageMiddleware {
    fn name(&self) -> &str {
        "ViewImageMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::BeforeModel, Hook::AfterModel]
    }

    async fn before_model(
        &self,
        state: &ThreadState,
        ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        let Some(ai) = completed_view_call(&state.messages) else {
            return Ok(HookOutcome::none());
        };
        let context_id = format!(
            "{CONTEXT_ID_PREFIX}{}",
            ai.id.as_deref().unwrap_or_default()
        );
        if state
            .messages
            .iter()
            .any(|m| m.id.as_deref() == Some(context_id.as_str()))
        {
            return Ok(HookOutcome::none());
        }
        let Some(viewed) = state.viewed_images.as_ref().filter(|v| !v.is_empty()) else {
            return Ok(HookOutcome::none());
        };
        let sandbox = match ctx.sandbox.get().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "sandbox unavailable; viewed images not attached");
                return Ok(HookOutcome::none());
            }
        };
        let start = viewed.len().saturating_sub(MAX_IMAGES_PER_REQUEST);
        let mut blocks = vec![json!({"type": "text", "text": CONTEXT_INTRO})];
        let mut attached = 0;
        for (path, meta) in viewed.iter().skip(start) {
            let mime = meta
                .get("mime_type")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !IMAGE_MIME_TYPES.contains(&mime) {
                continue;
            }
            let actual = meta
                .get("actual_path")
                .and_then(Value::as_str)
                .unwrap_or(path.as_str());
            let bytes = match sandbox.read_bytes(actual, MAX_IMAGE_BYTES).await {
                Ok(b) => b,
                Err(e) => {
                    tracing::info!(path = %path, error = %e, "viewed image no longer readable");
                    continue;
                }
            };
            if let Some(size) = meta.get("size").and_then(Value::as_u64)
                && size != bytes.len() as u64
            {
                tracing::info!(path = %path, "viewed image changed size; not attached");
                continue;
            }
            if let Some(expected) = meta.get("sha256").and_then(Value::as_str)
                && !expected.eq_ignore_ascii_case(&hex::encode(Sha256::digest(&bytes)))
            {
                tracing::info!(path = %path, "viewed image changed content; not attached");
                continue;
            }
            let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
            blocks.push(json!({"type": "text", "text": format!("\n- {path} ({mime})")}));
            blocks.push(json!({"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{data}")}}));
            attached += 1;
        }
        if attached == 0 {
            return Ok(HookOutcome::none());
        }
        let mut m = Message::human(Content::Blocks(blocks))
            .with_id(context_id)
            .with_name("view_image_context");
        m.additional_kwargs
            .insert(HIDE_FROM_UI.into(), Value::Bool(true));
        m.additional_kwargs
            .insert(CONTEXT_MARKER.into(), Value::Bool(true));
        Ok(HookOutcome::update(StateUpdate::messages(vec![m])))
    }

    async fn after_model(
        &self,
        state: &ThreadState,
        _ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        let removals: Vec<Message> = state
            .messages
            .iter()
            .filter_map(|m| m.id.as_deref())
            .filter(|id| id.starts_with(CONTEXT_ID_PREFIX))
            .map(Message::remove)
            .collect();
        if removals.is_empty() {
            return Ok(HookOutcome::none());
        }
        Ok(HookOutcome::update(StateUpdate::messages(removals)))
    }
}
