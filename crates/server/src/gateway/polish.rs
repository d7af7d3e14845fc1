//! `POST /api/input-polish`: the composer's draft rewritten by a model into a clearer
//! instruction before it is sent (nothing is stored and no run is created).
//!
//! Follows `input_polish:` (on by default, as in DeerFlow): off → 404; an empty draft or one
//! longer than `max_chars` characters (after trimming) → 400; the model is `model_name`, else
//! the default one. A model that is missing, fails, times out or answers nothing usable →
//! 503 `Failed to polish input` (logged), as DeerFlow answers; never a 500.

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::wire::ok;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fawn_llm::ChatRequest;
use fawn_state::Message;
use serde::Deserialize;
use serde_json::json;

/// How long the model may take.
const POLISH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// `POST /api/input-polish` body.
#[derive(Debug, Deserialize)]
pub struct PolishBody {
    text: String,
    #[serde(default)]
    locale: Option<String>,
    /// For the logs only.
    #[serde(default)]
    thread_id: Option<String>,
}

fn instructions() -> &'static str {
    "You improve a message a user is about to send to an AI agent. You do not carry out the \
     request and you do not answer it: you only rewrite it.\n\
     - Keep the user's language, meaning and intent. Keep names, numbers, file paths, URLs, \
     code and a leading slash command exactly as written.\n\
     - Make the goal explicit, and the scope, constraints and expected result when the draft \
     implies them. Turn vague wishes (\"nicer\", \"better\") into concrete but general \
     criteria.\n\
     - Add nothing the draft does not imply: no new facts, tools, files, dates, numbers or \
     preferences.\n\
     - Be concise: a short paragraph or a few bullet points, under about 180 words unless the \
     draft itself is longer.\n\
     - Reply with the rewritten message only: no preamble, no quotes, no code fence, no \
     alternatives."
}

fn user_message(text: &str, locale: Option<&str>) -> String {
    let hint = locale
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .unwrap_or("the draft's own language");
    format!("Write the rewrite in: {hint}\n\nThe draft:\n<draft>\n{text}\n</draft>")
}

/// The rewrite in a model's answer: thinking dropped as [`fawn_llm::answer::strip_think`] does
/// (an unclosed `<think>` after some text is kept: the draft may mention it), a code fence
/// around the whole answer removed, whitespace trimmed.
pub fn clean_rewrite(answer: &str) -> String {
    let text = fawn_llm::answer::strip_think(answer);
    let trimmed = text.trim();
    if let Some(rest) = trimmed.strip_prefix("```")
        && let Some(inner) = rest.strip_suffix("```")
    {
        // Drop the fence's language tag (the rest of its first line).
        let body = match inner.split_once('\n') {
            Some((tag, body)) if !tag.trim().contains(' ') => body,
            _ => inner,
        };
        return body.trim().to_string();
    }
    trimmed.to_string()
}

fn failed() -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "Failed to polish input")
}

/// `POST /api/input-polish`: `{rewritten_text, changed}`.
pub async fn polish(
    State(app): State<AppState>,
    JsonBody(body): JsonBody<PolishBody>,
) -> ApiResult<Response> {
    let config = &app.settings.app.input_polish;
    if !config.enabled {
        return Err(ApiError::not_found("Input polishing is disabled"));
    }
    let text = body.text.trim();
    if text.is_empty() {
        return Err(ApiError::bad_request("Input text is required"));
    }
    let max = config.max_chars;
    if u64::try_from(text.chars().count()).unwrap_or(u64::MAX) > max {
        return Err(ApiError::bad_request(format!(
            "Input text exceeds {max} characters"
        )));
    }
    let thread_id = body.thread_id.as_deref().unwrap_or("");
    let model = match config.model_name.as_deref().filter(|m| !m.is_empty()) {
        Some(name) => app.models.get(name),
        None => app.models.default_model(),
    };
    let Some(model) = model else {
        tracing::warn!(thread_id, model = ?config.model_name, "no model for input polish");
        return Err(failed());
    };
    let request = ChatRequest {
        messages: vec![
            Message::system(instructions()),
            Message::human(user_message(text, body.locale.as_deref())),
        ]
        .into(),
        purpose: "polish",
        ..Default::default()
    };
    let answer = match tokio::time::timeout(POLISH_TIMEOUT, model.invoke(request)).await {
        Ok(Ok(m)) => m.text(),
        Ok(Err(e)) => {
            tracing::warn!(thread_id, error = %e, "input polish model failed");
            return Err(failed());
        }
        Err(_) => {
            tracing::warn!(thread_id, "input polish model timed out");
            return Err(failed());
        }
    };
    let rewritten = clean_rewrite(&answer);
    if rewritten.is_empty() {
        tracing::warn!(thread_id, "input polish model answered nothing usable");
        return Err(failed());
    }
    let changed = rewritten != text;
    Ok(ok(
        &json!({"rewritten_text": rewritten, "changed": changed}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_are_cleaned() {
        assert_eq!(clean_rewrite("  Plain text.\n"), "Plain text.");
        assert_eq!(
            clean_rewrite("<think>hmm</think>\nDo X.<think>again</think>"),
            "Do X."
        );
        // An unclosed tag is part of the rewrite (a draft may mention it).
        assert_eq!(
            clean_rewrite("Explain what <think> does."),
            "Explain what <think> does."
        );
        assert_eq!(clean_rewrite("```markdown\nDo X.\n- a\n```"), "Do X.\n- a");
        assert_eq!(clean_rewrite("```\nDo X.\n```"), "Do X.");
        // A fence inside the rewrite stays.
        assert_eq!(
            clean_rewrite("Run:\n```sh\nls\n```\nthen stop."),
            "Run:\n```sh\nls\n```\nthen stop."
        );
        assert_eq!(clean_rewrite("<think>only thoughts</think>"), "");
        // Cut off while thinking: no rewrite (the caller answers 503, nothing usable), not
        // the thoughts handed back as the user's text.
        assert_eq!(clean_rewrite("<think>the draft says"), "");
    }
}
