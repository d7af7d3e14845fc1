//! [`JournalStore`]: the run-event journal and run feedback.

use super::db::{Arg, Binds, DbErr, DbResult, Dialect, Row, Sql, Tx, retry};
use super::{SqlStore, lock_thread, thread_not_found};
use crate::ids::{self, new_uuid7};
use crate::journal::*;
use crate::{JournalStore, Result};
use async_trait::async_trait;
use serde_json::Value;

macro_rules! event_cols {
    () => {
        "thread_id, seq, run_id, event_type, category, content, metadata, created_at"
    };
}

macro_rules! feedback_cols {
    () => {
        "feedback_id, thread_id, run_id, user_id, message_id, rating, comment, created_at, \
         updated_at"
    };
}

/// Rows per INSERT statement (8 parameters each, well under both databases' limits).
pub(super) const INSERT_CHUNK: usize = 400;
/// Tries of the one-statement append before the locking one.
const FAST_ATTEMPTS: usize = 8;

fn event_from_row(r: &Row) -> DbResult<RunEvent> {
    Ok(RunEvent {
        thread_id: r.text("thread_id")?,
        run_id: r.text("run_id")?,
        seq: r.int("seq")?,
        event_type: r.text("event_type")?,
        category: r.text("category")?,
        content: r.json("content")?,
        metadata: match r.json("metadata")? {
            Value::Object(m) => m,
            _ => Default::default(),
        },
        created_at: r.ts("created_at")?,
    })
}

fn feedback_from_row(r: &Row) -> DbResult<Feedback> {
    Ok(Feedback {
        feedback_id: r.text("feedback_id")?,
        thread_id: r.text("thread_id")?,
        run_id: r.text("run_id")?,
        user_id: r.text("user_id")?,
        message_id: r.opt_text("message_id")?,
        rating: r.int("rating")?,
        comment: r.opt_text("comment")?,
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
    })
}

/// `AND …` conditions and the ORDER/LIMIT of an [`EventQuery`]; the caller has pushed its
/// own binds first. Returns (conditions, tail, descending).
fn window(b: &mut Binds, q: &EventQuery) -> (String, String, bool) {
    let mut conds = String::new();
    if let Some(before) = q.before_seq {
        conds.push_str(&format!(" AND seq < {}", b.push(before)));
    }
    if let Some(after) = q.after_seq {
        conds.push_str(&format!(" AND seq > {}", b.push(after)));
    }
    if let Some(c) = &q.category {
        conds.push_str(&format!(" AND category = {}", b.push(c.as_str())));
    }
    if !q.event_types.is_empty() {
        let list: Vec<String> = q.event_types.iter().map(|t| b.push(t.as_str())).collect();
        conds.push_str(&format!(" AND event_type IN ({})", list.join(", ")));
    }
    let limit = i64::try_from(q.limit.max(1)).unwrap_or(i64::MAX);
    let descending = q.after_seq.is_none();
    let tail = format!(
        " ORDER BY seq {} LIMIT {}",
        if descending { "DESC" } else { "ASC" },
        b.push(limit)
    );
    (conds, tail, descending)
}

/// A row's content as stored: packed on SQLite when large (see `pack`; nothing in SQL
/// looks into it).
fn content_arg(dialect: Dialect, e: &NewRunEvent) -> Arg {
    Arg::packed_json(dialect, super::db::json_text(&e.content))
}

/// The one-statement append: the run's rows after the thread's last `seq`, `RETURNING` the
/// seqs they took. It inserts nothing when the journal is empty and `may_start` is false
/// (the caller seeds it), or when the thread is gone. At most [`INSERT_CHUNK`] rows.
fn fast_insert(
    dialect: Dialect,
    thread_id: &str,
    run_id: &str,
    events: &[NewRunEvent],
    may_start: bool,
) -> Sql {
    let mut b = Binds::new();
    let (last, insert) = fast_insert_parts(&mut b, dialect, thread_id, run_id, events, may_start);
    Sql::dynamic(format!("WITH last AS ({last}) {insert}"), b.args)
}

/// The two halves of [`fast_insert`], for statements that embed it (the run's end on
/// Postgres): the query of the CTE named `last` (the thread's last `seq`), and the
/// `INSERT … RETURNING seq` that reads it. The rows take consecutive seqs, in order.
pub(super) fn fast_insert_parts(
    b: &mut Binds,
    dialect: Dialect,
    thread_id: &str,
    run_id: &str,
    events: &[NewRunEvent],
    may_start: bool,
) -> (String, String) {
    let thread = b.push(thread_id);
    let run = b.push(run_id);
    let values: Vec<String> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            format!(
                "({}, {}, {}, {}, {}, {})",
                i + 1,
                b.push(e.event_type.as_str()),
                b.push(e.category.as_str()),
                b.push(content_arg(dialect, e)),
                b.push(Arg::json_map(&e.metadata)),
                b.push(Arg::ts(e.created_at)),
            )
        })
        .collect();
    // Without a seed an empty journal starts at 1 here too (the thread must exist).
    let (last, cond) = if may_start {
        (
            "COALESCE(MAX(seq), 0)",
            format!("EXISTS (SELECT 1 FROM threads WHERE thread_id = {thread})"),
        )
    } else {
        ("MAX(seq)", "last.seq IS NOT NULL".to_string())
    };
    (
        format!("SELECT {last} AS seq FROM run_events WHERE thread_id = {thread}"),
        format!(
            "INSERT INTO run_events ({cols}) \
             SELECT {thread}, last.seq + v.column1, {run}, v.column2, v.column3, v.column4, \
             v.column5, v.column6 FROM last, (VALUES {values}) AS v \
             WHERE {cond} RETURNING seq",
            cols = event_cols!(),
            values = values.join(", "),
        ),
    )
}

/// A row as stored (timestamps at the database's microsecond precision).
fn stored_event(thread_id: &str, run_id: &str, seq: i64, e: &NewRunEvent) -> RunEvent {
    into_stored(thread_id, run_id, seq, e.clone())
}

/// [`stored_event`] taking the event, for a caller that no longer needs it (its content
/// and metadata move instead of being copied).
pub(super) fn into_stored(thread_id: &str, run_id: &str, seq: i64, e: NewRunEvent) -> RunEvent {
    RunEvent {
        thread_id: thread_id.to_string(),
        run_id: run_id.to_string(),
        seq,
        event_type: e.event_type,
        category: e.category,
        content: e.content,
        metadata: e.metadata,
        created_at: ids::from_micros(ids::to_micros(e.created_at)),
    }
}

/// The rows a [`fast_insert`] stored, from the seqs it returned (in no particular order).
fn fast_stored(
    thread_id: &str,
    run_id: &str,
    events: &[NewRunEvent],
    rows: &[Row],
) -> DbResult<Vec<RunEvent>> {
    let mut seqs = rows
        .iter()
        .map(|r| r.int("seq"))
        .collect::<DbResult<Vec<_>>>()?;
    seqs.sort_unstable();
    Ok(seqs
        .into_iter()
        .zip(events)
        .map(|(seq, e)| stored_event(thread_id, run_id, seq, e))
        .collect())
}

/// The general append inside `tx`: locks the thread, reads its last `seq` and inserts
/// after it, seeding an empty journal first.
async fn append_locked_in(
    tx: &mut Tx,
    dialect: Dialect,
    thread_id: &str,
    run_id: &str,
    events: &[NewRunEvent],
    seed: Option<&(dyn Fn() -> Vec<(String, NewRunEvent)> + Send + Sync)>,
) -> DbResult<Vec<RunEvent>> {
    if !lock_thread(tx, dialect, thread_id).await? {
        return Err(thread_not_found(thread_id));
    }
    let last = tx
        .opt(
            Sql::new("SELECT COALESCE(MAX(seq), 0) AS last FROM run_events WHERE thread_id = $1")
                .bind(thread_id),
        )
        .await?
        .map(|r| r.int("last"))
        .transpose()?
        .unwrap_or(0);
    let seeded = match seed {
        Some(seed) if last == 0 => seed(),
        _ => Vec::new(),
    };
    let rows: Vec<(&str, &NewRunEvent)> = seeded
        .iter()
        .map(|(r, e)| (r.as_str(), e))
        .chain(events.iter().map(|e| (run_id, e)))
        .collect();
    let mut stored = Vec::with_capacity(rows.len());
    let mut seq = last;
    for chunk in rows.chunks(INSERT_CHUNK) {
        let mut b = Binds::new();
        let mut values = Vec::with_capacity(chunk.len());
        for (run_id, e) in chunk {
            seq += 1;
            values.push(format!(
                "({}, {}, {}, {}, {}, {}, {}, {})",
                b.push(thread_id),
                b.push(seq),
                b.push(*run_id),
                b.push(e.event_type.as_str()),
                b.push(e.category.as_str()),
                b.push(content_arg(dialect, e)),
                b.push(Arg::json_map(&e.metadata)),
                b.push(Arg::ts(e.created_at)),
            ));
            stored.push(stored_event(thread_id, run_id, seq, e));
        }
        tx.exec(Sql::dynamic(
            format!(
                concat!("INSERT INTO run_events (", event_cols!(), ") VALUES {}"),
                values.join(", ")
            ),
            b.args,
        ))
        .await?;
    }
    Ok(stored)
}

/// [`JournalStore::append_run_events_seeded`] inside a SQLite write transaction (the run's
/// end, see `finish_with_journal` in the run store). The transaction holds the only
/// writer, so no other append can take the seqs it reads: the one-statement insert needs
/// one try, and the general one runs when it inserted nothing (an empty journal to seed,
/// a missing thread, too many rows). SQLite only: on Postgres concurrent appends race.
pub(super) async fn append_in_sqlite_tx(
    tx: &mut Tx,
    thread_id: &str,
    run_id: &str,
    events: &[NewRunEvent],
    seed: Option<&(dyn Fn() -> Vec<(String, NewRunEvent)> + Send + Sync)>,
) -> DbResult<Vec<RunEvent>> {
    if events.len() <= INSERT_CHUNK {
        let rows = tx
            .all(fast_insert(
                Dialect::Sqlite,
                thread_id,
                run_id,
                events,
                seed.is_none(),
            ))
            .await?;
        if !rows.is_empty() {
            return fast_stored(thread_id, run_id, events, &rows);
        }
    }
    append_locked_in(tx, Dialect::Sqlite, thread_id, run_id, events, seed).await
}

impl SqlStore {
    /// The common case in one statement (one round trip): a thread that has journal rows
    /// gets the run's rows after its last `seq`. `None` when the journal is empty (or the
    /// thread is gone), the rows do not fit one statement, or concurrent appends kept
    /// taking the same seqs: then [`SqlStore::append_locked`] does it.
    async fn append_fast(
        &self,
        thread_id: &str,
        run_id: &str,
        events: &[NewRunEvent],
        may_start: bool,
    ) -> DbResult<Option<Vec<RunEvent>>> {
        if events.len() > INSERT_CHUNK {
            return Ok(None);
        }
        for _ in 0..FAST_ATTEMPTS {
            match self
                .db
                .write_all(fast_insert(
                    self.dialect(),
                    thread_id,
                    run_id,
                    events,
                    may_start,
                ))
                .await
            {
                Ok(rows) if rows.is_empty() => return Ok(None),
                Ok(rows) => return fast_stored(thread_id, run_id, events, &rows).map(Some),
                // Another run of the thread took these seqs first: read the last one again.
                Err(e) if e.is_unique_violation() => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    async fn append_once(
        &self,
        thread_id: &str,
        run_id: &str,
        events: &[NewRunEvent],
        seed: Option<&(dyn Fn() -> Vec<(String, NewRunEvent)> + Send + Sync)>,
    ) -> DbResult<Vec<RunEvent>> {
        // A one-statement append of another run of the thread can take the seqs the
        // locking one read (it does not wait for the lock): then both start again.
        for _ in 0..FAST_ATTEMPTS {
            if let Some(stored) = self
                .append_fast(thread_id, run_id, events, seed.is_none())
                .await?
            {
                return Ok(stored);
            }
            match self.append_locked(thread_id, run_id, events, seed).await {
                Err(e) if e.is_unique_violation() => continue,
                other => return other,
            }
        }
        self.append_locked(thread_id, run_id, events, seed).await
    }

    /// The general append: a transaction that locks the thread (seeding an empty journal).
    async fn append_locked(
        &self,
        thread_id: &str,
        run_id: &str,
        events: &[NewRunEvent],
        seed: Option<&(dyn Fn() -> Vec<(String, NewRunEvent)> + Send + Sync)>,
    ) -> DbResult<Vec<RunEvent>> {
        let mut tx = self.db.begin().await?;
        let stored =
            append_locked_in(&mut tx, self.dialect(), thread_id, run_id, events, seed).await?;
        tx.commit().await?;
        Ok(stored)
    }

    async fn events_once(
        &self,
        thread_id: &str,
        run_id: Option<&str>,
        q: &EventQuery,
    ) -> DbResult<Vec<RunEvent>> {
        let mut b = Binds::new();
        let mut sql = format!(
            concat!(
                "SELECT ",
                event_cols!(),
                " FROM run_events WHERE thread_id = {}"
            ),
            b.push(thread_id)
        );
        if let Some(run_id) = run_id {
            sql.push_str(&format!(" AND run_id = {}", b.push(run_id)));
        }
        let (conds, tail, descending) = window(&mut b, q);
        sql.push_str(&conds);
        sql.push_str(&tail);
        let rows = self.db.read_all(Sql::dynamic(sql, b.args)).await?;
        let mut events = rows
            .iter()
            .map(event_from_row)
            .collect::<DbResult<Vec<_>>>()?;
        if descending {
            events.reverse();
        }
        Ok(events)
    }

    async fn upsert_feedback_once(&self, f: &NewFeedback, id: &str) -> DbResult<Feedback> {
        if f.rating != 1 && f.rating != -1 {
            return Err(DbErr::invalid("rating must be +1 or -1"));
        }
        let now = Arg::ts(ids::now());
        let row = self
            .db
            .write_opt(
                Sql::new(concat!(
                    "INSERT INTO feedback (",
                    feedback_cols!(),
                    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) ",
                    "ON CONFLICT (thread_id, run_id, user_id) DO UPDATE SET ",
                    "rating = excluded.rating, comment = excluded.comment, ",
                    "message_id = COALESCE(excluded.message_id, feedback.message_id), ",
                    "updated_at = excluded.updated_at RETURNING ",
                    feedback_cols!()
                ))
                .bind(id)
                .bind(f.thread_id.as_str())
                .bind(f.run_id.as_str())
                .bind(f.user_id.as_str())
                .bind(f.message_id.clone())
                .bind(f.rating)
                .bind(f.comment.clone())
                .arg(now),
            )
            .await?
            .ok_or_else(|| DbErr::corrupt("INSERT … RETURNING returned no row"))?;
        feedback_from_row(&row)
    }

    async fn list_feedback_once(
        &self,
        thread_id: &str,
        run_id: Option<&str>,
        user_id: Option<&str>,
    ) -> DbResult<Vec<Feedback>> {
        let mut b = Binds::new();
        let mut sql = format!(
            concat!(
                "SELECT ",
                feedback_cols!(),
                " FROM feedback WHERE thread_id = {}"
            ),
            b.push(thread_id)
        );
        if let Some(run_id) = run_id {
            sql.push_str(&format!(" AND run_id = {}", b.push(run_id)));
        }
        if let Some(user_id) = user_id {
            sql.push_str(&format!(" AND user_id = {}", b.push(user_id)));
        }
        sql.push_str(" ORDER BY created_at, feedback_id");
        let rows = self.db.read_all(Sql::dynamic(sql, b.args)).await?;
        rows.iter().map(feedback_from_row).collect()
    }
}

#[async_trait]
impl JournalStore for SqlStore {
    async fn append_run_events_seeded(
        &self,
        thread_id: &str,
        run_id: &str,
        events: Vec<NewRunEvent>,
        seed: Option<&(dyn Fn() -> Vec<(String, NewRunEvent)> + Send + Sync)>,
    ) -> Result<Vec<RunEvent>> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        retry!(self.append_once(thread_id, run_id, &events, seed))
    }

    async fn thread_events(&self, thread_id: &str, query: &EventQuery) -> Result<Vec<RunEvent>> {
        retry!(self.events_once(thread_id, None, query))
    }

    async fn run_events(
        &self,
        thread_id: &str,
        run_id: &str,
        query: &EventQuery,
    ) -> Result<Vec<RunEvent>> {
        retry!(self.events_once(thread_id, Some(run_id), query))
    }

    async fn upsert_feedback(&self, feedback: NewFeedback) -> Result<Feedback> {
        let id = new_uuid7();
        retry!(self.upsert_feedback_once(&feedback, &id))
    }

    async fn get_feedback(&self, feedback_id: &str) -> Result<Option<Feedback>> {
        retry!(async {
            self.db
                .read_opt(
                    Sql::new(concat!(
                        "SELECT ",
                        feedback_cols!(),
                        " FROM feedback WHERE feedback_id = $1"
                    ))
                    .bind(feedback_id),
                )
                .await?
                .as_ref()
                .map(feedback_from_row)
                .transpose()
        })
    }

    async fn list_feedback(
        &self,
        thread_id: &str,
        run_id: Option<&str>,
        user_id: Option<&str>,
    ) -> Result<Vec<Feedback>> {
        retry!(self.list_feedback_once(thread_id, run_id, user_id))
    }

    async fn delete_feedback(&self, feedback_id: &str) -> Result<bool> {
        retry!(async {
            self.db
                .write_exec(
                    Sql::new("DELETE FROM feedback WHERE feedback_id = $1").bind(feedback_id),
                )
                .await
                .map(|n| n > 0)
        })
    }

    async fn delete_run_feedback(
        &self,
        thread_id: &str,
        run_id: &str,
        user_id: &str,
    ) -> Result<bool> {
        retry!(async {
            self.db
                .write_exec(
                    Sql::new(
                        "DELETE FROM feedback WHERE thread_id = $1 AND run_id = $2 AND user_id = $3",
                    )
                    .bind(thread_id)
                    .bind(run_id)
                    .bind(user_id),
                )
                .await
                .map(|n| n > 0)
        })
    }
}
