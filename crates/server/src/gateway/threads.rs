//! Thread helpers of the DeerFlow UI: `GET /api/threads/{id}/token-usage`, follow-up
//! suggestions, and the checkpoint-derived history page ([`page`]).
//!
//! `messages/page` is served from the run-event journal ([`super::history`]); a thread with
//! no journal rows (its runs predate it) falls back to [`page`]: the latest checkpoint's
//! messages with `seq` = the message's 1-based position in the thread, unique and stable
//! as long as messages are only appended (summarization, which removes old messages, shifts
//! them). There `run_id` is the message's `additional_kwargs.run_id` when present and
//! `created_at` is `null`: checkpoints do not record them per message.
//!
//! Suggestions follow `suggestions:` (on by default, as in DeerFlow): the default model (or
//! `model_name`) is asked for follow-up questions as a JSON array, and whatever goes wrong
//! answers `{"suggestions": []}`, never an error.

use super::thread_param;
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path};
use crate::routes::threads::load_thread;
use crate::wire::ok;
use axum::extract::State;
use axum::response::Response;
use fawn_checkpoint::RunQuery;
use fawn_llm::ChatRequest;
use fawn_state::{Message, MessageKind, Messages, ThreadState};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

async fn latest_state(app: &AppState, thread_id: &str) -> ApiResult<Arc<ThreadState>> {
    load_thread(app, thread_id).await?;
    let cp = app
        .store()
        .get_checkpoint(thread_id, "", None)
        .await
        .map_err(|e| ApiError::store("loading the thread's state", e))?;
    Ok(cp.map(|c| c.state).unwrap_or_default())
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
        .store()
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

/// `GET /api/suggestions/config`: `suggestions:` of config.yaml.
pub async fn suggestions_config(State(app): State<AppState>) -> Response {
    let c = &app.settings.app.suggestions;
    ok(&json!({"enabled": c.enabled, "max_suggestions": c.max_suggestions}))
}

/// One message of a suggestions request.
#[derive(Debug, Deserialize)]
pub struct SuggestionMessage {
    role: String,
    content: String,
}

/// `POST /api/threads/{id}/suggestions` body.
#[derive(Debug, Deserialize)]
pub struct SuggestionsBody {
    messages: Vec<SuggestionMessage>,
    #[serde(default = "default_n")]
    n: u32,
    #[serde(default)]
    model_name: Option<String>,
}

fn default_n() -> u32 {
    3
}

/// Messages of a conversation given to the suggestions model (the last ones).
const SUGGESTION_MESSAGES: usize = 20;
/// Characters of one message given to the suggestions model.
const SUGGESTION_MESSAGE_CHARS: usize = 4000;
/// How long the suggestions model may take.
const SUGGESTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The conversation as `User: …` / `Assistant: …` lines.
fn conversation(messages: &[SuggestionMessage]) -> String {
    let start = messages.len().saturating_sub(SUGGESTION_MESSAGES);
    messages[start..]
        .iter()
        .filter_map(|m| {
            let text: String = m
                .content
                .trim()
                .chars()
                .take(SUGGESTION_MESSAGE_CHARS)
                .collect();
            if text.is_empty() {
                return None;
            }
            let role = m.role.trim();
            let who = match role.to_ascii_lowercase().as_str() {
                "user" | "human" => "User",
                "assistant" | "ai" => "Assistant",
                _ => role,
            };
            Some(format!("{who}: {text}"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn suggestions_prompt(n: u32) -> String {
    format!(
        "You suggest what the user could ask next in a conversation with an assistant.\n\
         Read the conversation and write {n} follow-up questions the user is likely to want \
         to ask now.\n\
         - Each question follows from what was just discussed and moves it forward.\n\
         - Write them in the language the user writes in.\n\
         - Keep each one short: one sentence, about twenty words at most.\n\
         - Answer with a JSON array of {n} strings and nothing else: no numbering, no \
         markdown, no explanation."
    )
}

/// The strings of the JSON array in a model's answer (thinking dropped and the array found as
/// [`fawn_llm::answer`] reads them; code fences around it ignored): only non-empty strings are
/// kept (newlines folded). Anything else is no suggestions.
pub fn parse_suggestions(answer: &str) -> Vec<String> {
    let text = fawn_llm::answer::strip_think(answer);
    let Some(Value::Array(items)) = fawn_llm::answer::json_in(&text, '[') else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(Value::as_str)
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty())
        .collect()
}

/// `POST /api/threads/{id}/suggestions`: `{suggestions: [...]}`, at most `min(n,
/// max_suggestions)`. Generation failing in any way (no model, unknown `model_name`, a
/// model error or timeout, an answer that is not a JSON list) is logged and answers `[]`.
pub async fn suggestions(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
    JsonBody(body): JsonBody<SuggestionsBody>,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    let none = || Ok(ok(&json!({"suggestions": []})));
    let config = &app.settings.app.suggestions;
    if !(1..=fawn_config::SuggestionsConfig::MAX_LIMIT).contains(&body.n) {
        return Err(ApiError::unprocessable(format!(
            "Invalid request body at `n`: must be between 1 and {}",
            fawn_config::SuggestionsConfig::MAX_LIMIT
        )));
    }
    if !config.enabled || body.messages.is_empty() {
        return none();
    }
    let n = body.n.min(config.max_suggestions).max(1);
    let convo = conversation(&body.messages);
    if convo.is_empty() {
        return none();
    }
    let model = match body.model_name.as_deref().filter(|m| !m.is_empty()) {
        Some(name) => app.models.get(name),
        None => app.models.default_model(),
    };
    let Some(model) = model else {
        tracing::warn!(%thread_id, model = ?body.model_name, "no model for suggestions");
        return none();
    };
    let request = ChatRequest {
        messages: vec![
            Message::system(suggestions_prompt(n)),
            Message::human(format!(
                "The conversation:\n{convo}\n\nWrite {n} follow-up questions."
            )),
        ]
        .into(),
        purpose: "suggestions",
        ..Default::default()
    };
    let answer = match tokio::time::timeout(SUGGESTION_TIMEOUT, model.invoke(request)).await {
        Ok(Ok(m)) => m.text(),
        Ok(Err(e)) => {
            tracing::warn!(%thread_id, error = %e, "suggestions model failed");
            return none();
        }
        Err(_) => {
            tracing::warn!(%thread_id, "suggestions model timed out");
            return none();
        }
    };
    let mut list = parse_suggestions(&answer);
    list.truncate(n as usize);
    Ok(ok(&json!({ "suggestions": list })))
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

    #[test]
    fn suggestions_are_parsed_robustly() {
        let p = |s: &str| parse_suggestions(s);
        assert_eq!(p(r#"["a?", "b?"]"#), ["a?", "b?"]);
        assert_eq!(p("```json\n[\"a?\",\n \"b?\"]\n```"), ["a?", "b?"]);
        assert_eq!(
            p("Sure! Here they are:\n[\"a?\"]\nHope this helps [1]."),
            ["a?"]
        );
        assert_eq!(p("<think>maybe [\"x\"]</think>[\"a?\"]"), ["a?"]);
        assert_eq!(
            p(r#"["a", 1, null, {"q": "b"}, ["c"], "  ", "two\nlines"]"#),
            ["a", "two lines"]
        );
        assert_eq!(p(r#"{"suggestions": ["a"]}"#), ["a"]);
        for bad in [
            "",
            "no list here",
            "[",
            "]",
            "] [",
            "[\"unterminated",
            "<think>[\"a\"]",
            "[1, 2]",
        ] {
            assert!(p(bad).is_empty(), "{bad}");
        }
    }

    #[test]
    fn conversations_keep_the_last_messages() {
        let msgs: Vec<SuggestionMessage> = (0..25)
            .map(|i| SuggestionMessage {
                role: if i % 2 == 0 {
                    "human".into()
                } else {
                    "AI".into()
                },
                content: format!(" m{i} "),
            })
            .chain([SuggestionMessage {
                role: "tool".into(),
                content: " ".into(),
            }])
            .collect();
        let c = conversation(&msgs);
        assert!(c.starts_with("User: m6\nAssistant: m7"), "{c}");
        assert!(c.ends_with("User: m24"), "{c}");
    }
}
