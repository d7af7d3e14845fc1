//! Thread helpers of the DeerFlow UI: `GET /api/threads/{id}/messages/page` (its history
//! source), `GET /api/threads/{id}/token-usage`, and follow-up suggestions.
//!
//! Both read the thread's latest checkpoint. Fawn keeps no run-event journal, so
//! `messages/page` serves the checkpoint's messages with `seq` = the message's 1-based
//! position in the thread: unique and stable as long as messages are only appended
//! (summarization, which removes old messages, shifts them). `run_id` is the message's
//! `additional_kwargs.run_id` when present and `created_at` is `null`: checkpoints do not
//! record them per message.
//!
//! Suggestions are not implemented (Fawn's config has no `suggestions:` section): the
//! config says `enabled: false` and the endpoint always answers `{"suggestions": []}`, as
//! DeerFlow does when generation is off or fails.

use super::thread_param;
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path, Query};
use crate::routes::threads::load_thread;
use crate::wire::ok;
use axum::extract::State;
use axum::response::Response;
use fawn_checkpoint::RunQuery;
use fawn_state::{Message, MessageKind, Messages, ThreadState};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Largest page of `messages/page`.
pub const MAX_PAGE: u64 = 200;

async fn latest_state(app: &AppState, thread_id: &str) -> ApiResult<Arc<ThreadState>> {
    load_thread(app, thread_id).await?;
    let cp = app
        .store
        .get_checkpoint(thread_id, "", None)
        .await
        .map_err(|e| ApiError::store("loading the thread's state", e))?;
    Ok(cp.map(|c| c.state).unwrap_or_default())
}

/// `GET /api/threads/{id}/messages/page?limit=50&before_seq=`.
pub async fn messages_page(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
    q: Query,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    let limit = q.u64("limit")?.unwrap_or(50);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::unprocessable(format!(
            "Invalid value for query parameter `limit`: must be between 1 and {MAX_PAGE}"
        )));
    }
    let before = q.u64("before_seq")?;
    if before == Some(0) {
        return Err(ApiError::unprocessable(
            "Invalid value for query parameter `before_seq`: must be at least 1",
        ));
    }
    let state = latest_state(&app, &thread_id).await?;
    let (data, has_more, next) = page(&state.messages, limit as usize, before);
    Ok(ok(&json!({
        "data": data,
        "has_more": has_more,
        "next_before_seq": next,
    })))
}

/// One page ending just before `before` (1-based seqs), oldest first.
pub fn page(messages: &Messages, limit: usize, before: Option<u64>) -> (Vec<Value>, bool, Value) {
    let n = messages.len();
    let end = match before {
        Some(b) => usize::try_from(b - 1).unwrap_or(usize::MAX).min(n),
        None => n,
    };
    let start = end.saturating_sub(limit);
    let data = messages
        .range(start..end)
        .enumerate()
        .map(|(i, m)| {
            let run_id = m
                .additional_kwargs
                .get("run_id")
                .cloned()
                .unwrap_or(Value::Null);
            json!({
                "run_id": run_id,
                "seq": start + i + 1,
                "content": m,
                "metadata": {"caller": "lead_agent"},
                "created_at": null,
            })
        })
        .collect();
    let has_more = start > 0;
    let next = if has_more {
        json!(start + 1)
    } else {
        Value::Null
    };
    (data, has_more, next)
}

/// `GET /api/threads/{id}/token-usage`: totals over the `usage_metadata` of the thread's AI
/// messages (what its checkpoints hold), by model and by caller (subagent usage from the
/// `task` results' `subagent_token_usage`), and how full the context was on the last call.
pub async fn token_usage(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    let state = latest_state(&app, &thread_id).await?;
    let runs = app
        .store
        .list_runs(
            &thread_id,
            &RunQuery {
                limit: 10_000,
                offset: 0,
                status: None,
            },
        )
        .await
        .map_err(|e| ApiError::store("listing the thread's runs", e))?;
    let mut usage = usage_of(&state.messages);
    let window = usage.last_model.as_deref().and_then(|name| {
        app.models
            .all()
            .iter()
            .map(|m| m.info())
            .find(|i| i.model == name || i.name == name)
            .and_then(|i| i.context_window)
    });
    let window = window.or_else(|| {
        app.models
            .default_model()
            .and_then(|m| m.info().context_window)
    });
    let percentage = window
        .filter(|w| *w > 0)
        .map(|w| ((usage.context_tokens as f64 / w as f64) * 1000.0).round() / 10.0);
    let by_model: Map<String, Value> = std::mem::take(&mut usage.by_model)
        .into_iter()
        .map(|(k, (tokens, calls))| (k, json!({"tokens": tokens, "runs": calls})))
        .collect();
    Ok(ok(&json!({
        "thread_id": thread_id,
        "total_tokens": usage.input + usage.output,
        "total_input_tokens": usage.input,
        "total_output_tokens": usage.output,
        "total_runs": runs.len(),
        "by_model": by_model,
        "by_caller": {
            "lead_agent": usage.input + usage.output,
            "subagent": usage.subagent,
            "middleware": 0,
        },
        "context_usage": {
            "token_count": usage.context_tokens,
            "max_context_tokens": window,
            "percentage": percentage,
        },
    })))
}

/// Token counts found in a message list.
#[derive(Debug, Default, PartialEq)]
pub struct Usage {
    pub input: i64,
    pub output: i64,
    /// Model id → (tokens, model calls).
    pub by_model: BTreeMap<String, (i64, u64)>,
    pub subagent: i64,
    /// Input + output tokens of the last model call.
    pub context_tokens: i64,
    pub last_model: Option<String>,
}

pub fn usage_of<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Usage {
    let mut u = Usage::default();
    for m in messages {
        match m.kind {
            MessageKind::Ai | MessageKind::AiChunk => {
                let Some(um) = &m.usage_metadata else {
                    continue;
                };
                let total = if um.total_tokens > 0 {
                    um.total_tokens
                } else {
                    um.input_tokens + um.output_tokens
                };
                u.input += um.input_tokens;
                u.output += um.output_tokens;
                let model = m
                    .response_metadata
                    .get("model_name")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
                    .to_string();
                let e = u.by_model.entry(model.clone()).or_insert((0, 0));
                e.0 += total;
                e.1 += 1;
                u.context_tokens = total;
                u.last_model = Some(model);
            }
            MessageKind::Tool => {
                if let Some(t) = m
                    .additional_kwargs
                    .get("subagent_token_usage")
                    .and_then(|v| v.get("total_tokens"))
                    .and_then(Value::as_i64)
                {
                    u.subagent += t;
                }
            }
            _ => {}
        }
    }
    u
}

/// `GET /api/suggestions/config`.
pub async fn suggestions_config() -> Response {
    ok(&json!({"enabled": false, "max_suggestions": 3}))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SuggestionsBody {
    #[allow(dead_code)]
    messages: Vec<Value>,
    #[allow(dead_code)]
    n: Option<u32>,
    #[allow(dead_code)]
    model_name: Option<String>,
}

/// `POST /api/threads/{id}/suggestions`: always `{"suggestions": []}` (generation is off).
pub async fn suggestions(
    Path(thread_id): Path<String>,
    JsonBody(_body): JsonBody<SuggestionsBody>,
) -> ApiResult<Response> {
    thread_param(&thread_id)?;
    Ok(ok(&json!({"suggestions": []})))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(n: usize) -> Messages {
        (0..n).map(|i| Message::human(format!("m{i}"))).collect()
    }

    #[test]
    fn pages_walk_backwards() {
        let m = msgs(5);
        let (d, more, next) = page(&m, 2, None);
        assert_eq!(
            d.iter()
                .map(|x| x["seq"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            [4, 5]
        );
        assert!(more);
        assert_eq!(next, json!(4));
        let (d, more, next) = page(&m, 2, Some(4));
        assert_eq!(
            d.iter()
                .map(|x| x["seq"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            [2, 3]
        );
        assert!(more);
        assert_eq!(next, json!(2));
        let (d, more, next) = page(&m, 2, Some(2));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0]["content"]["content"], "m0");
        assert!(!more);
        assert_eq!(next, Value::Null);
        let (d, more, _) = page(&m, 50, Some(100));
        assert_eq!(d.len(), 5);
        assert!(!more);
        assert!(page(&Messages::new(), 5, None).0.is_empty());
    }

    #[test]
    fn usage_sums_ai_messages_and_subagents() {
        let mut a = Message::ai("x");
        a.usage_metadata = Some(fawn_state::UsageMetadata {
            input_tokens: 10,
            output_tokens: 5,
            total_tokens: 15,
            ..Default::default()
        });
        a.response_metadata.insert("model_name".into(), json!("m"));
        let mut b = a.clone();
        b.usage_metadata = Some(fawn_state::UsageMetadata {
            input_tokens: 30,
            output_tokens: 2,
            total_tokens: 0,
            ..Default::default()
        });
        let mut t = Message::tool("done", "call_1", Some("task".into()));
        t.additional_kwargs
            .insert("subagent_token_usage".into(), json!({"total_tokens": 7}));
        let u = usage_of(&[Message::human("q"), a, t, b]);
        assert_eq!((u.input, u.output, u.subagent), (40, 7, 7));
        assert_eq!(u.by_model["m"], (47, 2));
        assert_eq!(u.context_tokens, 32);
    }
}
