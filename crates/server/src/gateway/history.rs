//! Conversation history from the run-event journal (reference §9.2): the DeerFlow UI's
//! `GET /api/threads/{id}/messages/page`, `GET …/messages`, a run's messages and events, and
//! thumbs feedback on runs.
//!
//! Rows are the journal's: `{thread_id, run_id, seq, event_type, category, content (the
//! message dict), metadata ({caller, …}), created_at}` in ascending thread-global `seq`. A
//! run's last AI message row carries `content.additional_kwargs.turn_duration` (whole
//! seconds, the run's wall-clock time) and, in the message lists, `feedback`
//! (`{feedback_id, rating, comment}` of the caller, else `null`; `null` on every other row).
//!
//! The message lists leave out the rows of runs a regenerate or an edit superseded
//! ([`fawn_runtime::conversation::hidden_runs`]); a page still holds `limit` rows when older
//! visible ones exist.
//!
//! A thread with no journal rows (its runs predate the journal) pages its latest
//! checkpoint's messages instead, as before (see [`super::threads::page`]).
//!
//! Feedback is per user (one per run and user; without authentication every caller is the
//! same user): `PUT` `{rating, comment?}` and `POST` `{rating, comment?, message_id?}` both
//! create or replace it and answer the feedback; `rating` must be +1 or -1 (400). `GET`
//! lists the caller's, `GET …/stats` counts them, `DELETE` removes the caller's
//! (`{"success": true}`, 404 when there is none), `DELETE …/{feedback_id}` one by id.
//!
//! A `{rid}` is a UUID, which must be a run of the thread (404), or a journal-only id
//! (`^[A-Za-z0-9_-]{1,128}$`: a branch's seeded turns `branch-seed-{thread_id}-{n}`, the turns
//! of a thread older than the journal `checkpoint-{n}`), read from the thread's journal like
//! DeerFlow's event store: an unknown one has no rows. Rating one needs rows of it in the
//! thread's journal (404). Anything else is a 422; the thread must be the caller's (404).

use super::thread_param;
use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path, Query};
use crate::routes::threads::load_thread;
use crate::wire::{ok, ts};
use axum::extract::State;
use axum::response::Response;
use fawn_checkpoint::{EventQuery, Feedback, NewFeedback, RunEvent};
use fawn_runtime::journal::{AI_RESPONSE, MESSAGE};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};

/// Largest page of the message lists.
pub const MAX_MESSAGES: u64 = 200;
/// Largest page of `…/events`.
pub const MAX_EVENTS: u64 = 2000;

fn limit(q: &Query, default: u64, max: u64) -> ApiResult<u64> {
    let limit = q.u64("limit")?.unwrap_or(default);
    if !(1..=max).contains(&limit) {
        return Err(ApiError::unprocessable(format!(
            "Invalid value for query parameter `limit`: must be between 1 and {max}"
        )));
    }
    Ok(limit)
}

fn seq_param(q: &Query, name: &str) -> ApiResult<Option<i64>> {
    match q.u64(name)? {
        None => Ok(None),
        Some(0) => Err(ApiError::unprocessable(format!(
            "Invalid value for query parameter `{name}`: must be at least 1"
        ))),
        Some(n) => i64::try_from(n).map(Some).map_err(|_| {
            ApiError::unprocessable(format!("Invalid value for query parameter `{name}`"))
        }),
    }
}

fn store_err(context: &'static str) -> impl Fn(fawn_checkpoint::StoreError) -> ApiError {
    move |e| ApiError::store(context, e)
}

/// A journal row on the wire.
fn event_json(e: &RunEvent) -> Value {
    json!({
        "thread_id": e.thread_id,
        "run_id": e.run_id,
        "seq": e.seq,
        "event_type": e.event_type,
        "category": e.category,
        "content": e.content,
        "metadata": e.metadata,
        "created_at": ts(&e.created_at),
    })
}

/// The caller's feedback by run (only read when some row is a run's last AI message).
async fn feedback_by_run(
    app: &AppState,
    thread_id: &str,
    principal: &Principal,
    rows: &[RunEvent],
) -> ApiResult<HashMap<String, Feedback>> {
    if !rows.iter().any(is_last_ai) {
        return Ok(HashMap::new());
    }
    let list = app
        .store()
        .list_feedback(thread_id, None, principal.scope())
        .await
        .map_err(store_err("loading feedback"))?;
    Ok(list.into_iter().map(|f| (f.run_id.clone(), f)).collect())
}

/// The row the writer marked as its run's last AI message.
fn is_last_ai(e: &RunEvent) -> bool {
    e.event_type == AI_RESPONSE && e.metadata.contains_key("turn_duration")
}

/// A message row: `turn_duration` copied into the message and `feedback`.
fn message_json(e: &RunEvent, feedback: &HashMap<String, Feedback>) -> Value {
    let mut v = event_json(e);
    let mut fb = Value::Null;
    if is_last_ai(e) {
        if let (Some(d), Some(Value::Object(content))) =
            (e.metadata.get("turn_duration"), v.get_mut("content"))
        {
            let kwargs = content
                .entry("additional_kwargs")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(k) = kwargs {
                k.insert("turn_duration".into(), d.clone());
            }
        }
        if let Some(f) = feedback.get(&e.run_id) {
            fb = json!({"feedback_id": f.feedback_id, "rating": f.rating, "comment": f.comment});
        }
    }
    if let Value::Object(m) = &mut v {
        m.insert("feedback".into(), fb);
    }
    v
}

fn message_query(limit: u64, before: Option<i64>, after: Option<i64>) -> EventQuery {
    EventQuery {
        before_seq: before,
        after_seq: after,
        limit,
        category: Some(MESSAGE.to_string()),
        event_types: Vec::new(),
    }
}

/// Rows read per query while skipping hidden runs.
const SCAN_BATCH: u64 = 201;

/// Up to `want` message rows of the thread that are not of a `hidden` run, ascending: the
/// oldest after `after` when given, else the newest before `before`.
async fn visible_rows(
    app: &AppState,
    thread_id: &str,
    hidden: &HashSet<String>,
    want: u64,
    before: Option<i64>,
    after: Option<i64>,
) -> ApiResult<Vec<RunEvent>> {
    let batch = if hidden.is_empty() { want } else { SCAN_BATCH };
    let (mut before, mut after) = (before, after);
    let forward = after.is_some();
    let mut out: Vec<RunEvent> = Vec::new();
    loop {
        let rows = app
            .store()
            .thread_events(thread_id, &message_query(batch, before, after))
            .await
            .map_err(store_err("reading the thread's journal"))?;
        let full = rows.len() as u64 >= batch;
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            break;
        };
        if forward {
            after = Some(last.seq);
        } else {
            before = Some(first.seq);
        }
        let ordered: Box<dyn Iterator<Item = RunEvent>> = if forward {
            Box::new(rows.into_iter())
        } else {
            Box::new(rows.into_iter().rev())
        };
        for r in ordered.filter(|r| !hidden.contains(&r.run_id)) {
            out.push(r);
            if out.len() as u64 >= want {
                break;
            }
        }
        if out.len() as u64 >= want || !full {
            break;
        }
    }
    if !forward {
        out.reverse();
    }
    Ok(out)
}

async fn hidden_runs(app: &AppState, thread_id: &str) -> ApiResult<HashSet<String>> {
    Ok(fawn_runtime::conversation::hidden_runs(app, thread_id).await?)
}

/// `GET /api/threads/{id}/messages/page?limit=50&before_seq=`.
pub async fn messages_page(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
    principal: Principal,
    q: Query,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    if q.get("after_seq").is_some() {
        return Err(ApiError::unprocessable(
            "after_seq is not supported by this backward-only endpoint",
        ));
    }
    let limit = limit(&q, 50, MAX_MESSAGES)?;
    let before = seq_param(&q, "before_seq")?;
    load_thread(&app, &thread_id).await?;
    let hidden = hidden_runs(&app, &thread_id).await?;
    let mut rows = visible_rows(&app, &thread_id, &hidden, limit + 1, before, None).await?;
    if rows.is_empty() && !has_journal(&app, &thread_id).await? {
        return checkpoint_page(&app, &thread_id, limit, before).await;
    }
    let has_more = rows.len() as u64 > limit;
    if has_more {
        rows.remove(0);
    }
    let feedback = feedback_by_run(&app, &thread_id, &principal, &rows).await?;
    let data: Vec<Value> = rows.iter().map(|r| message_json(r, &feedback)).collect();
    let next = match rows.first() {
        Some(first) if has_more => json!(first.seq),
        _ => Value::Null,
    };
    Ok(ok(
        &json!({"data": data, "has_more": has_more, "next_before_seq": next}),
    ))
}

async fn has_journal(app: &AppState, thread_id: &str) -> ApiResult<bool> {
    let any = app
        .store()
        .thread_events(
            thread_id,
            &EventQuery {
                limit: 1,
                ..Default::default()
            },
        )
        .await
        .map_err(store_err("reading the thread's journal"))?;
    Ok(!any.is_empty())
}

/// The page of a thread without journal rows, from its latest checkpoint.
async fn checkpoint_page(
    app: &AppState,
    thread_id: &str,
    limit: u64,
    before: Option<i64>,
) -> ApiResult<Response> {
    let cp = app
        .store()
        .get_checkpoint(thread_id, "", None)
        .await
        .map_err(store_err("loading the thread's state"))?;
    let state = cp.map(|c| c.state).unwrap_or_default();
    let before = before.and_then(|b| u64::try_from(b).ok());
    let (data, has_more, next) = super::threads::page(
        &state.messages,
        usize::try_from(limit).unwrap_or(usize::MAX),
        before,
    );
    Ok(ok(
        &json!({"data": data, "has_more": has_more, "next_before_seq": next}),
    ))
}

/// `GET /api/threads/{id}/messages?limit=50&before_seq=&after_seq=`: a flat list.
pub async fn messages(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
    principal: Principal,
    q: Query,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    let limit = limit(&q, 50, MAX_MESSAGES)?;
    let before = seq_param(&q, "before_seq")?;
    let after = seq_param(&q, "after_seq")?;
    load_thread(&app, &thread_id).await?;
    let hidden = hidden_runs(&app, &thread_id).await?;
    let rows = visible_rows(&app, &thread_id, &hidden, limit, before, after).await?;
    let feedback = feedback_by_run(&app, &thread_id, &principal, &rows).await?;
    let data: Vec<Value> = rows.iter().map(|r| message_json(r, &feedback)).collect();
    Ok(ok(&data))
}

/// Longest journal-only run id (see [`journal_run_param`]).
pub const MAX_RUN_ID: usize = 128;

/// A run id in a journal route: a UUID (canonical lowercase, a row of `runs`) or a journal-only
/// id such as a branch's seeded turns (`branch-seed-{thread_id}-{n}`) or the turns of a thread
/// older than the journal (`checkpoint-{n}`), matching `^[A-Za-z0-9_-]{1,128}$`, kept as it
/// is. Anything else is a 422. The flag tells whether it was a UUID.
pub(crate) fn journal_run_param(raw: &str) -> ApiResult<(String, bool)> {
    if let Ok(u) = uuid::Uuid::parse_str(raw.trim()) {
        return Ok((u.hyphenated().to_string(), true));
    }
    let plain = (1..=MAX_RUN_ID).contains(&raw.len())
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        return Ok((raw.to_string(), false));
    }
    Err(ApiError::unprocessable(format!(
        "Invalid run ID: must be a UUID or match ^[A-Za-z0-9_-]{{1,{MAX_RUN_ID}}}$"
    )))
}

/// The run of a thread named in a path (404 when it is not that thread's).
async fn thread_run_row(app: &AppState, thread_id: &str, run_id: &str) -> ApiResult<()> {
    match app.store().get_run(run_id).await {
        Ok(Some(r)) if r.thread_id == thread_id => Ok(()),
        Ok(Some(_)) => Err(ApiError::not_found(format!(
            "Run {run_id} not found in thread {thread_id}"
        ))),
        Ok(None) => Err(ApiError::not_found(format!("Run {run_id} not found"))),
        Err(e) => Err(ApiError::store("loading the run", e)),
    }
}

/// The run of a thread's journal named in a path, for reading its rows: a UUID must be a run
/// of that thread (404 otherwise); a journal-only id is taken as it is (the thread must exist
/// and is the caller's, checked by the route's guard) — its rows are read within the thread,
/// so an unknown one just has none, as in DeerFlow's event store.
pub(crate) async fn thread_run(app: &AppState, thread_id: &str, run_id: &str) -> ApiResult<String> {
    let thread_id = thread_param(thread_id)?;
    let (run_id, is_uuid) = journal_run_param(run_id)?;
    load_thread(app, &thread_id).await?;
    if is_uuid {
        thread_run_row(app, &thread_id, &run_id).await?;
    }
    Ok(run_id)
}

/// A run that can be rated: a run of the thread, or a journal-only run with rows in the
/// thread's journal (a branch's seeded turn, whose answers the UI shows like any other).
async fn rateable_run(app: &AppState, thread_id: &str, run_id: &str) -> ApiResult<String> {
    let (run_id, is_uuid) = journal_run_param(run_id)?;
    load_thread(app, thread_id).await?;
    if is_uuid {
        thread_run_row(app, thread_id, &run_id).await?;
        return Ok(run_id);
    }
    let rows = app
        .store()
        .run_events(
            thread_id,
            &run_id,
            &EventQuery {
                after_seq: Some(0),
                limit: 1,
                ..Default::default()
            },
        )
        .await
        .map_err(store_err("reading the run's journal"))?;
    if rows.is_empty() {
        return Err(ApiError::not_found(format!("Run {run_id} not found")));
    }
    Ok(run_id)
}

/// `GET /api/threads/{id}/runs/{rid}/messages?limit=50&before_seq=&after_seq=` →
/// `{data, has_more}`.
pub async fn run_messages(
    State(app): State<AppState>,
    Path((thread_id, run_id)): Path<(String, String)>,
    principal: Principal,
    q: Query,
) -> ApiResult<Response> {
    let limit = limit(&q, 50, MAX_MESSAGES)?;
    let before = seq_param(&q, "before_seq")?;
    let after = seq_param(&q, "after_seq")?;
    let thread_id = thread_param(&thread_id)?;
    let run_id = thread_run(&app, &thread_id, &run_id).await?;
    let mut rows = app
        .store()
        .run_events(
            &thread_id,
            &run_id,
            &message_query(limit + 1, before, after),
        )
        .await
        .map_err(store_err("reading the run's journal"))?;
    let has_more = rows.len() as u64 > limit;
    if has_more {
        if after.is_some() {
            rows.pop();
        } else {
            rows.remove(0);
        }
    }
    let feedback = feedback_by_run(&app, &thread_id, &principal, &rows).await?;
    let data: Vec<Value> = rows.iter().map(|r| message_json(r, &feedback)).collect();
    Ok(ok(&json!({"data": data, "has_more": has_more})))
}

/// `GET /api/threads/{id}/runs/{rid}/events?event_types=a,b&task_id=&limit=500&after_seq=`:
/// the run's rows, oldest first. `task_id` keeps the rows of one subagent task
/// (`metadata.task_id`), so the UI's subtask card pages through its steps: the page holds
/// `limit` of that task's rows after `after_seq` (fewer only at the end).
pub async fn run_events(
    State(app): State<AppState>,
    Path((thread_id, run_id)): Path<(String, String)>,
    q: Query,
) -> ApiResult<Response> {
    let limit = limit(&q, 500, MAX_EVENTS)?;
    let after = seq_param(&q, "after_seq")?;
    let event_types: Vec<String> = q
        .get("event_types")
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let task_id = q.get("task_id").filter(|t| !t.is_empty());
    let thread_id = thread_param(&thread_id)?;
    let run_id = thread_run(&app, &thread_id, &run_id).await?;
    let mut query = EventQuery {
        after_seq: Some(after.unwrap_or(0)),
        limit,
        event_types,
        ..Default::default()
    };
    let Some(task_id) = task_id else {
        let rows = app
            .store()
            .run_events(&thread_id, &run_id, &query)
            .await
            .map_err(store_err("reading the run's journal"))?;
        let data: Vec<Value> = rows.iter().map(event_json).collect();
        return Ok(ok(&data));
    };
    // The task's rows are a subset: read the run's rows page by page until `limit` of them.
    query.limit = MAX_EVENTS;
    let mut data = Vec::new();
    loop {
        let rows = app
            .store()
            .run_events(&thread_id, &run_id, &query)
            .await
            .map_err(store_err("reading the run's journal"))?;
        let short = (rows.len() as u64) < query.limit;
        query.after_seq = rows.last().map(|r| r.seq).or(query.after_seq);
        for r in rows
            .iter()
            .filter(|r| r.metadata.get("task_id").and_then(Value::as_str) == Some(task_id))
        {
            if data.len() as u64 >= limit {
                return Ok(ok(&data));
            }
            data.push(event_json(r));
        }
        if short {
            return Ok(ok(&data));
        }
    }
}

/// `POST …/feedback` (PUT takes no `message_id`).
#[derive(Deserialize)]
pub struct FeedbackBody {
    rating: i64,
    #[serde(default)]
    comment: Option<String>,
    #[serde(default)]
    message_id: Option<String>,
}

/// Postgres text cannot hold U+0000: stored as U+FFFD (as in JSON columns).
fn no_nul(s: String) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{FFFD}")
    } else {
        s
    }
}

fn feedback_json(f: &Feedback) -> Value {
    json!({
        "feedback_id": f.feedback_id,
        "run_id": f.run_id,
        "thread_id": f.thread_id,
        "user_id": (!f.user_id.is_empty()).then_some(&f.user_id),
        "message_id": f.message_id,
        "rating": f.rating,
        "comment": f.comment,
        "created_at": ts(&f.created_at),
    })
}

async fn save_feedback(
    app: &AppState,
    (thread_id, run_id): (String, String),
    principal: &Principal,
    body: FeedbackBody,
    with_message: bool,
) -> ApiResult<Response> {
    if body.rating != 1 && body.rating != -1 {
        return Err(ApiError::bad_request("rating must be +1 or -1"));
    }
    let thread_id = thread_param(&thread_id)?;
    let run_id = rateable_run(app, &thread_id, &run_id).await?;
    let f = app
        .store()
        .upsert_feedback(NewFeedback {
            thread_id,
            run_id,
            user_id: principal.scope().unwrap_or_default().to_string(),
            message_id: if with_message {
                body.message_id.map(no_nul)
            } else {
                None
            },
            rating: body.rating,
            comment: body.comment.map(no_nul),
        })
        .await
        .map_err(store_err("saving feedback"))?;
    Ok(ok(&feedback_json(&f)))
}

/// `PUT /api/threads/{id}/runs/{rid}/feedback` `{rating, comment?}`.
pub async fn put_feedback(
    State(app): State<AppState>,
    Path(ids): Path<(String, String)>,
    principal: Principal,
    JsonBody(body): JsonBody<FeedbackBody>,
) -> ApiResult<Response> {
    save_feedback(&app, ids, &principal, body, false).await
}

/// `POST /api/threads/{id}/runs/{rid}/feedback` `{rating, comment?, message_id?}`.
pub async fn post_feedback(
    State(app): State<AppState>,
    Path(ids): Path<(String, String)>,
    principal: Principal,
    JsonBody(body): JsonBody<FeedbackBody>,
) -> ApiResult<Response> {
    save_feedback(&app, ids, &principal, body, true).await
}

async fn my_feedback(
    app: &AppState,
    thread_id: &str,
    run_id: &str,
    principal: &Principal,
) -> ApiResult<(String, String, Vec<Feedback>)> {
    let thread_id = thread_param(thread_id)?;
    let (run_id, _) = journal_run_param(run_id)?;
    load_thread(app, &thread_id).await?;
    let list = app
        .store()
        .list_feedback(&thread_id, Some(&run_id), principal.scope())
        .await
        .map_err(store_err("loading feedback"))?;
    Ok((thread_id, run_id, list))
}

/// `GET /api/threads/{id}/runs/{rid}/feedback`: the caller's feedback on the run.
pub async fn list_feedback(
    State(app): State<AppState>,
    Path((thread_id, run_id)): Path<(String, String)>,
    principal: Principal,
) -> ApiResult<Response> {
    let (_, _, list) = my_feedback(&app, &thread_id, &run_id, &principal).await?;
    let data: Vec<Value> = list.iter().map(feedback_json).collect();
    Ok(ok(&data))
}

/// `GET /api/threads/{id}/runs/{rid}/feedback/stats` → `{run_id, total, positive, negative}`.
pub async fn feedback_stats(
    State(app): State<AppState>,
    Path((thread_id, run_id)): Path<(String, String)>,
    principal: Principal,
) -> ApiResult<Response> {
    let (_, run_id, list) = my_feedback(&app, &thread_id, &run_id, &principal).await?;
    let positive = list.iter().filter(|f| f.rating > 0).count();
    let negative = list.iter().filter(|f| f.rating < 0).count();
    Ok(ok(&json!({
        "run_id": run_id,
        "total": list.len(),
        "positive": positive,
        "negative": negative,
    })))
}

/// `DELETE /api/threads/{id}/runs/{rid}/feedback`: the caller's feedback on the run.
pub async fn delete_feedback(
    State(app): State<AppState>,
    Path((thread_id, run_id)): Path<(String, String)>,
    principal: Principal,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    let (run_id, _) = journal_run_param(&run_id)?;
    load_thread(&app, &thread_id).await?;
    let deleted = app
        .store()
        .delete_run_feedback(&thread_id, &run_id, principal.scope().unwrap_or_default())
        .await
        .map_err(store_err("deleting feedback"))?;
    if !deleted {
        return Err(ApiError::not_found("No feedback found for this run"));
    }
    Ok(ok(&json!({"success": true})))
}

/// `DELETE /api/threads/{id}/runs/{rid}/feedback/{feedback_id}`.
pub async fn delete_feedback_by_id(
    State(app): State<AppState>,
    Path((thread_id, run_id, feedback_id)): Path<(String, String, String)>,
    principal: Principal,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    let (run_id, _) = journal_run_param(&run_id)?;
    load_thread(&app, &thread_id).await?;
    let found = app
        .store()
        .get_feedback(&feedback_id)
        .await
        .map_err(store_err("loading feedback"))?
        .filter(|f| principal.scope().is_none_or(|me| f.user_id == me));
    let Some(f) = found else {
        return Err(ApiError::not_found(format!(
            "Feedback {feedback_id} not found"
        )));
    };
    if f.thread_id != thread_id || f.run_id != run_id {
        return Err(ApiError::not_found(format!(
            "Feedback {feedback_id} not found in run {run_id}"
        )));
    }
    if !app
        .store()
        .delete_feedback(&feedback_id)
        .await
        .map_err(store_err("deleting feedback"))?
    {
        return Err(ApiError::not_found(format!(
            "Feedback {feedback_id} not found"
        )));
    }
    Ok(ok(&json!({"success": true})))
}
