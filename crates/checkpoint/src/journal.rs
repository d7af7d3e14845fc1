//! The run-event journal (every message of every run, with a thread-global `seq`) and the
//! per-user feedback on runs: DeerFlow's `run_events` and `feedback` tables.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One event to append (its thread, run and `seq` are given by the append).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRunEvent {
    /// `llm.human.input`, `llm.ai.response`, `llm.tool.result`, …
    pub event_type: String,
    /// `message` for conversation rows; other categories are not history.
    pub category: String,
    pub content: Value,
    pub metadata: Map<String, Value>,
    pub created_at: DateTime<Utc>,
}

/// A stored journal row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    pub thread_id: String,
    pub run_id: String,
    /// Thread-global, strictly increasing, starting at 1.
    pub seq: i64,
    pub event_type: String,
    pub category: String,
    pub content: Value,
    pub metadata: Map<String, Value>,
    pub created_at: DateTime<Utc>,
}

/// A window of journal rows. Without `after_seq` the newest `limit` rows before
/// `before_seq` are returned; with it, the oldest `limit` rows after it. Rows always come
/// in ascending `seq`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventQuery {
    pub before_seq: Option<i64>,
    pub after_seq: Option<i64>,
    pub limit: u64,
    /// Only rows of this category.
    pub category: Option<String>,
    /// Only rows of these event types (empty: all).
    pub event_types: Vec<String>,
}

/// Feedback on a run by one user (`user_id` empty without authentication).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Feedback {
    pub feedback_id: String,
    pub thread_id: String,
    pub run_id: String,
    pub user_id: String,
    pub message_id: Option<String>,
    /// +1 or -1.
    pub rating: i64,
    pub comment: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Creates or replaces the feedback of (`thread_id`, `run_id`, `user_id`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewFeedback {
    pub thread_id: String,
    pub run_id: String,
    pub user_id: String,
    /// Kept from an earlier feedback when `None`.
    pub message_id: Option<String>,
    pub rating: i64,
    pub comment: Option<String>,
}
