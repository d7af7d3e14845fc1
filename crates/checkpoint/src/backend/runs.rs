//! [`RunStore`]: the runs table is the run queue.
//!
//! A run is claimable when it is pending, due, and no other run of its thread is running
//! or was queued before it (FIFO per thread, at most one running run per thread — also
//! enforced by a partial unique index). Claims set a lease the worker extends with
//! heartbeats; the reaper requeues runs whose lease expired (they resume from their last
//! checkpoint) until the attempt bound, then fails them with `orphan_recovered`.

use super::checkpoints::delete_run_checkpoints;
use super::db::{Arg, Binds, DbErr, DbResult, Dialect, Sql, Tx, retry};
use super::journal::{INSERT_CHUNK, append_in_sqlite_tx, fast_insert_parts, into_stored};
use super::threads::{
    apply_summary, refresh_expiry, summary_config, summary_has_next, summary_values,
};
use super::{
    SqlStore, cancel_action_str, clamp_i64, lock_thread, parse_cancel_action,
    refresh_thread_status, run_cols, run_from_row, thread_not_found,
};
use crate::ids::{self, new_uuid7, plus_seconds};
use crate::journal::RunEvent;
use crate::types::*;
use crate::{FinishedWithJournal, JournalAppend, Result, RunStore, journal_then_finish};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::json;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// LangGraph's text for `multitask_strategy: reject` on a busy thread.
pub const REJECT_DETAIL: &str = "Thread is already running a task. Wait for it to finish or choose a different multitask strategy.";

/// `stop_reason` of a run given up on after its workers kept disappearing.
pub const ORPHAN_RECOVERED: &str = "orphan_recovered";

/// Reaped per call at most (the reaper runs periodically).
const REAP_BATCH: i64 = 256;

/// The condition "run `r` is the next one of its thread": nothing of its thread is running
/// or queued before it.
macro_rules! head_of_thread {
    ($r:literal) => {
        concat!(
            "NOT EXISTS (SELECT 1 FROM runs o WHERE o.thread_id = ",
            $r,
            ".thread_id AND o.seq <> ",
            $r,
            ".seq AND o.status IN ('pending', 'running') ",
            "AND (o.status = 'running' OR (o.created_at < ",
            $r,
            ".created_at OR (o.created_at = ",
            $r,
            ".created_at AND o.seq < ",
            $r,
            ".seq))))"
        )
    };
}

const CLAIM_NEXT_SQLITE: &str = concat!(
    "UPDATE runs SET status = 'running', attempt = attempt + 1, owner = $1, ",
    "lease_expires_at = $2, updated_at = $3 WHERE seq = (",
    "SELECT r.seq FROM runs r WHERE r.status = 'pending' AND r.available_at <= $3 AND ",
    head_of_thread!("r"),
    " ORDER BY r.created_at, r.seq LIMIT 1) RETURNING ",
    run_cols!()
);

/// The same claim, through the function of `migrations/postgres/0003_claim_function_plpgsql.sql`
/// (`FOR UPDATE SKIP LOCKED`, planned once per connection with `enable_sort = off`).
const CLAIM_NEXT_POSTGRES: &str = concat!(
    "SELECT ",
    run_cols!(),
    " FROM fawn_claim_next_run($1, $2, $3)"
);

const CLAIM_ONE: &str = concat!(
    "UPDATE runs SET status = 'running', attempt = attempt + 1, owner = $1, ",
    "lease_expires_at = $2, updated_at = $3 WHERE run_id = $4 AND status = 'pending' ",
    "AND available_at <= $3 AND ",
    head_of_thread!("runs"),
    " RETURNING ",
    run_cols!()
);

fn lease_until(now: DateTime<Utc>, lease: Duration) -> DateTime<Utc> {
    plus_seconds(now, lease.as_secs_f64())
}

fn not_owned(run_id: &str, worker_id: &str) -> DbErr {
    DbErr::not_found(format!("Run {run_id} is not running on worker {worker_id}"))
}

/// Locks (in a fixed order, Postgres) and refreshes the status of these threads.
async fn refresh_threads(tx: &mut Tx, dialect: Dialect, threads: BTreeSet<String>) -> DbResult<()> {
    for thread_id in threads {
        if lock_thread(tx, dialect, &thread_id).await? {
            refresh_thread_status(tx, &thread_id).await?;
        }
    }
    Ok(())
}

/// Ends a run that was asked to stop: `interrupted`, or deleted with its checkpoints.
async fn end_cancelled(
    tx: &mut Tx,
    dialect: Dialect,
    run: &Run,
    action: CancelAction,
) -> DbResult<Option<Run>> {
    match action {
        CancelAction::Interrupt => {
            let row = tx
                .opt(
                    Sql::new(concat!(
                        "UPDATE runs SET status = 'interrupted', owner = NULL, ",
                        "lease_expires_at = NULL, updated_at = $2 WHERE run_id = $1 RETURNING ",
                        run_cols!()
                    ))
                    .bind(run.run_id.as_str())
                    .arg(Arg::ts(ids::now())),
                )
                .await?;
            row.as_ref().map(run_from_row).transpose()
        }
        CancelAction::Rollback => {
            delete_run_checkpoints(tx, dialect, &run.thread_id, &run.run_id).await?;
            tx.exec(Sql::new("DELETE FROM runs WHERE run_id = $1").bind(run.run_id.as_str()))
                .await?;
            Ok(None)
        }
    }
}

/// A run's row by its id.
fn run_by_id(run_id: &str) -> Sql {
    Sql::new(concat!(
        "SELECT ",
        run_cols!(),
        " FROM runs WHERE run_id = $1"
    ))
    .bind(run_id)
}

/// Binds `$1…$8` of a new run's insert: id, thread, assistant, now, metadata, kwargs,
/// multitask strategy, available-at. The kwargs (the run's input and config, the bulk of
/// a run row) are packed on SQLite (see `pack`), before the caller takes the writer.
fn new_run_args(sql: Sql, run: &NewRun, run_id: &str, now: DateTime<Utc>, kwargs: Arg) -> Sql {
    sql.bind(run_id)
        .bind(run.thread_id.as_str())
        .bind(run.assistant_id.as_str())
        .arg(Arg::ts(now))
        .arg(Arg::json_map(&run.metadata))
        .arg(kwargs)
        .bind(run.multitask_strategy.as_str())
        .arg(Arg::ts(plus_seconds(now, run.after_seconds)))
}

/// Ends a run this worker owns inside `tx` (SQLite: Postgres calls `fawn_finish_run`): its
/// row, then its thread's summary and status.
async fn finish_in(
    tx: &mut Tx,
    dialect: Dialect,
    run_id: &str,
    worker_id: &str,
    outcome: &RunFinish,
    values: Arg,
    now: DateTime<Utc>,
) -> DbResult<Run> {
    // The update, then the row read back, not `RETURNING` (statement journals: `lite`).
    let updated = tx
        .exec(
            Sql::new(concat!(
                "UPDATE runs SET status = $3, error = $4, stop_reason = $5, owner = NULL, ",
                "lease_expires_at = NULL, updated_at = $6 WHERE run_id = $1 AND owner = $2 ",
                "AND status = 'running'"
            ))
            .bind(run_id)
            .bind(worker_id)
            .bind(outcome.status.as_str())
            .arg(Arg::opt_json(outcome.error.as_ref()))
            .bind(outcome.stop_reason.clone())
            .arg(Arg::ts(now)),
        )
        .await?;
    if updated == 0 {
        return Err(not_owned(run_id, worker_id));
    }
    let row = tx
        .opt(run_by_id(run_id))
        .await?
        .ok_or_else(|| not_owned(run_id, worker_id))?;
    let run = run_from_row(&row)?;
    apply_summary(tx, dialect, &run.thread_id, &outcome.thread, values, now).await?;
    Ok(run)
}

/// The journal rows a one-commit finish wrote: as read back (SQLite), or from the first
/// seq they took (Postgres), the rows then built from the events themselves.
enum Journaled {
    Rows(Vec<RunEvent>),
    From(i64),
}

/// The call of `fawn_finish_run` (migration 0006) for this outcome, its arguments pushed
/// to `b`.
fn finish_call(
    b: &mut Binds,
    run_id: &str,
    worker_id: &str,
    outcome: &RunFinish,
    now: DateTime<Utc>,
) -> String {
    let summary = &outcome.thread;
    let args = [
        b.push(run_id),
        b.push(worker_id),
        b.push(outcome.status.as_str()),
        b.push(Arg::opt_json(outcome.error.as_ref())),
        b.push(outcome.stop_reason.clone()),
        b.push(Arg::ts(now)),
        b.push(Arg::opt_json(summary.values.as_ref())),
        b.push(Arg::json_map(&summary.interrupts)),
        b.push(summary_has_next(summary)),
        b.push(Arg::opt_json(summary.error.as_ref())),
        b.push(Arg::json_map(&summary.metadata)),
        b.push(summary_config(summary)),
    ];
    format!("fawn_finish_run({})", args.join(", "))
}

/// What the errors `fawn_finish_run` raises mean.
fn finish_error(e: DbErr, run_id: &str, worker_id: &str) -> DbErr {
    match e.pg_code().as_deref() {
        Some("P0003") => not_owned(run_id, worker_id),
        Some("P0002") => DbErr::not_found(format!("the thread of run {run_id} no longer exists")),
        _ => e,
    }
}

impl SqlStore {
    async fn create_run_once(&self, run: &NewRun, run_id: &str) -> DbResult<CreatedRun> {
        if !(run.after_seconds.is_finite() && run.after_seconds >= 0.0) {
            return Err(DbErr::invalid(format!(
                "after_seconds must be a non-negative number, got {}",
                run.after_seconds
            )));
        }
        let now = ids::now();
        if self.dialect() == Dialect::Postgres {
            return self.create_run_postgres(run, run_id, now).await;
        }
        let kwargs = Arg::packed_json(
            self.dialect(),
            serde_json::to_string(&run.kwargs).unwrap_or_else(|_| "{}".to_string()),
        );
        // Urgent: the client's first event (and its response) waits on this commit.
        let mut tx = self.db.begin_urgent().await?;
        // Mark the thread busy (creating it if asked): this also takes its row lock, so
        // the in-flight runs read next are the committed ones. No `RETURNING` in this
        // transaction's writes (statement journals: `lite`).
        let thread = match &run.create_thread_if_missing {
            Some(metadata) => {
                tx.exec(
                    Sql::new(concat!(
                        "INSERT INTO threads (thread_id, created_at, updated_at, state_updated_at, ",
                        "metadata, status, config, state_values, interrupts, error, has_next) ",
                        "VALUES ($1, $2, $2, $2, $3, 'busy', $4, NULL, $4, NULL, FALSE) ",
                        "ON CONFLICT (thread_id) DO UPDATE SET status = 'busy', updated_at = $2, ",
                        "expires_at = CASE WHEN threads.ttl_minutes IS NULL THEN threads.expires_at ",
                        "ELSE $2 + CAST(threads.ttl_minutes * 60000000 AS BIGINT) END"
                    ))
                    .bind(run.thread_id.as_str())
                    .arg(Arg::ts(now))
                    .arg(Arg::json_map(metadata))
                    .arg(Arg::Json(Some("{}".to_string()))),
                )
                .await?
            }
            None => {
                tx.exec(
                    Sql::new(concat!(
                        "UPDATE threads SET status = 'busy', updated_at = $2, ",
                        refresh_expiry!("$2"),
                        " WHERE thread_id = $1"
                    ))
                    .bind(run.thread_id.as_str())
                    .arg(Arg::ts(now)),
                )
                .await?
            }
        };
        if thread == 0 {
            return Err(thread_not_found(&run.thread_id));
        }
        let inflight = tx
            .all(
                Sql::new(concat!(
                    "SELECT ",
                    run_cols!(),
                    " FROM runs WHERE thread_id = $1 AND status IN ('pending', 'running') ",
                    "ORDER BY created_at, seq"
                ))
                .bind(run.thread_id.as_str()),
            )
            .await?
            .iter()
            .map(run_from_row)
            .collect::<DbResult<Vec<Run>>>()?;
        if !inflight.is_empty() && run.multitask_strategy == MultitaskStrategy::Reject {
            return Err(DbErr::conflict(REJECT_DETAIL));
        }
        // Claimed now (a free slot, a free thread, due now): inserted running, the row
        // written once rather than inserted pending and updated in a second statement.
        let claim = run
            .claim
            .as_ref()
            .filter(|_| inflight.is_empty() && run.after_seconds <= 0.0);
        let sql = Sql::new(concat!(
            "INSERT INTO runs (run_id, thread_id, assistant_id, created_at, updated_at, ",
            "status, metadata, kwargs, multitask_strategy, attempt, available_at, owner, ",
            "lease_expires_at) ",
            "VALUES ($1, $2, $3, $4, $4, $9, $5, $6, $7, $10, $8, $11, $12)"
        ));
        let status = if claim.is_some() {
            "running"
        } else {
            "pending"
        };
        let sql = new_run_args(sql, run, run_id, now, kwargs)
            .bind(status)
            .arg(Arg::Int(Some(i64::from(claim.is_some()))))
            .arg(Arg::Text(claim.map(|c| c.worker_id.clone())))
            .arg(Arg::opt_ts(claim.map(|c| lease_until(now, c.lease))));
        match tx.exec(sql).await {
            Ok(_) => {}
            Err(e) if e.is_unique_violation() => {
                return Err(DbErr::conflict(format!(
                    "Run with ID {run_id} already exists"
                )));
            }
            Err(e) => return Err(e),
        }
        let row = tx
            .opt(run_by_id(run_id))
            .await?
            .ok_or_else(|| DbErr::corrupt("a run just inserted cannot be read back"))?;
        let inserted = run_from_row(&row)?;
        // The creation answers with the run as a pending run either way.
        let (created, claimed) = if claim.is_some() {
            let pending = Run {
                status: RunStatus::Pending,
                attempt: 0,
                owner: None,
                lease_expires_at: None,
                ..inserted.clone()
            };
            (pending, Some(inserted))
        } else {
            (inserted, None)
        };
        tx.commit().await?;
        Ok(CreatedRun {
            run: created,
            inflight,
            claimed,
        })
    }

    /// [`SqlStore::create_run_once`] on Postgres: the same steps in one round trip, through
    /// the function of `migrations/postgres/0015_create_run_claimed_insert.sql`.
    async fn create_run_postgres(
        &self,
        run: &NewRun,
        run_id: &str,
        now: DateTime<Utc>,
    ) -> DbResult<CreatedRun> {
        let rows = self
            .db
            .write_all(
                new_run_args(
                    Sql::new(concat!(
                        "SELECT ",
                        run_cols!(),
                        " FROM fawn_create_run($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
                    )),
                    run,
                    run_id,
                    now,
                    Arg::json_map(&run.kwargs),
                )
                .bind(run.create_thread_if_missing.is_some())
                .arg(
                    run.create_thread_if_missing
                        .as_ref()
                        .map_or(Arg::Json(None), Arg::json_map),
                )
                .arg(Arg::Text(run.claim.as_ref().map(|c| c.worker_id.clone())))
                .arg(Arg::opt_ts(
                    run.claim.as_ref().map(|c| lease_until(now, c.lease)),
                )),
            )
            .await;
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) if e.is_unique_violation() => {
                return Err(DbErr::conflict(format!(
                    "Run with ID {run_id} already exists"
                )));
            }
            Err(e) => {
                return Err(match e.pg_code().as_deref() {
                    Some("P0002") => thread_not_found(&run.thread_id),
                    Some("P0001") => DbErr::conflict(REJECT_DETAIL),
                    _ => e,
                });
            }
        };
        let mut runs = rows
            .iter()
            .map(run_from_row)
            .collect::<DbResult<Vec<Run>>>()?;
        // The in-flight runs, the new run as a pending run, then (claimed) as claimed.
        let claimed = match runs.last() {
            Some(last) if last.run_id == run_id && last.status == RunStatus::Running => runs.pop(),
            _ => None,
        };
        match runs.pop() {
            Some(created) if created.run_id == run_id => Ok(CreatedRun {
                run: created,
                inflight: runs,
                claimed,
            }),
            _ => Err(DbErr::corrupt("fawn_create_run did not return the new run")),
        }
    }

    async fn get_run_once(&self, run_id: &str) -> DbResult<Option<Run>> {
        self.db
            .read_opt(run_by_id(run_id))
            .await?
            .as_ref()
            .map(run_from_row)
            .transpose()
    }

    async fn list_runs_once(&self, thread_id: &str, query: &RunQuery) -> DbResult<Vec<Run>> {
        let limit = if query.limit == 0 {
            i64::MAX
        } else {
            clamp_i64(query.limit)
        };
        let sql = match query.status {
            Some(status) => Sql::new(concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs WHERE thread_id = $1 AND status = $4 ",
                "ORDER BY created_at DESC, seq DESC LIMIT $2 OFFSET $3"
            ))
            .bind(thread_id)
            .bind(limit)
            .bind(clamp_i64(query.offset))
            .bind(status.as_str()),
            None => Sql::new(concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs WHERE thread_id = $1 ",
                "ORDER BY created_at DESC, seq DESC LIMIT $2 OFFSET $3"
            ))
            .bind(thread_id)
            .bind(limit)
            .bind(clamp_i64(query.offset)),
        };
        self.db
            .read_all(sql)
            .await?
            .iter()
            .map(run_from_row)
            .collect()
    }

    async fn replay_runs_once(&self, thread_id: &str) -> DbResult<Vec<Run>> {
        let sql = self.dialect().pick(
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs WHERE thread_id = $1 ",
                "AND json_extract(metadata, '$.regenerate_from_run_id') IS NOT NULL ",
                "ORDER BY created_at, seq"
            ),
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs WHERE thread_id = $1 ",
                "AND (metadata ->> 'regenerate_from_run_id') IS NOT NULL ",
                "ORDER BY created_at, seq"
            ),
        );
        self.db
            .read_all(Sql::new(sql).bind(thread_id))
            .await?
            .iter()
            .map(run_from_row)
            .collect()
    }

    async fn delete_run_once(&self, run_id: &str) -> DbResult<bool> {
        let mut tx = self.db.begin().await?;
        let Some(row) = tx
            .opt(Sql::new("DELETE FROM runs WHERE run_id = $1 RETURNING thread_id").bind(run_id))
            .await?
        else {
            return Ok(false);
        };
        let thread_id = row.text("thread_id")?;
        refresh_threads(&mut tx, self.dialect(), BTreeSet::from([thread_id])).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn claim_next_run_once(&self, worker_id: &str, lease: Duration) -> DbResult<Option<Run>> {
        let now = ids::now();
        let sql = Sql::new(self.dialect().pick(CLAIM_NEXT_SQLITE, CLAIM_NEXT_POSTGRES))
            .bind(worker_id)
            .arg(Arg::ts(lease_until(now, lease)))
            .arg(Arg::ts(now));
        match self.db.write_opt(sql).await {
            Ok(row) => row.as_ref().map(run_from_row).transpose(),
            // The unique index caught a race the FIFO condition did not: nothing claimed.
            Err(e) if e.is_unique_violation() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn claim_run_once(
        &self,
        run_id: &str,
        worker_id: &str,
        lease: Duration,
    ) -> DbResult<Option<Run>> {
        let now = ids::now();
        let sql = Sql::new(CLAIM_ONE)
            .bind(worker_id)
            .arg(Arg::ts(lease_until(now, lease)))
            .arg(Arg::ts(now))
            .bind(run_id);
        match self.db.write_opt(sql).await {
            Ok(row) => row.as_ref().map(run_from_row).transpose(),
            Err(e) if e.is_unique_violation() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn heartbeat_once(
        &self,
        run_id: &str,
        worker_id: &str,
        lease: Duration,
    ) -> DbResult<Option<CancelAction>> {
        let row = self
            .db
            .write_opt(
                Sql::new(concat!(
                    "UPDATE runs SET lease_expires_at = $3 WHERE run_id = $1 AND owner = $2 ",
                    "AND status = 'running' RETURNING cancel_requested"
                ))
                .bind(run_id)
                .bind(worker_id)
                .arg(Arg::ts(lease_until(ids::now(), lease))),
            )
            .await?
            .ok_or_else(|| not_owned(run_id, worker_id))?;
        Ok(row
            .opt_text("cancel_requested")?
            .as_deref()
            .and_then(parse_cancel_action))
    }

    async fn heartbeat_many_once(
        &self,
        run_ids: &[String],
        worker_id: &str,
        lease: Duration,
    ) -> DbResult<HashMap<String, Option<CancelAction>>> {
        let mut owned = HashMap::new();
        if run_ids.is_empty() {
            return Ok(owned);
        }
        let mut b = Binds::new();
        let until = b.push(Arg::ts(lease_until(ids::now(), lease)));
        let owner = b.push(worker_id);
        let mut list: Vec<String> = run_ids.iter().map(|id| b.push(id.as_str())).collect();
        // Padded to a power of two with the last placeholder again, so the statement has a
        // handful of texts rather than one per batch size (each is a cached statement).
        if let Some(last) = list.last().cloned() {
            list.resize(run_ids.len().next_power_of_two(), last);
        }
        let text = format!(
            "UPDATE runs SET lease_expires_at = {until} WHERE owner = {owner} \
             AND status = 'running' AND run_id IN ({}) RETURNING run_id, cancel_requested",
            list.join(", ")
        );
        for row in self.db.write_all(Sql::dynamic(text, b.args)).await? {
            let action = row
                .opt_text("cancel_requested")?
                .as_deref()
                .and_then(parse_cancel_action);
            owned.insert(row.text("run_id")?, action);
        }
        Ok(owned)
    }

    async fn finish_run_once(
        &self,
        run_id: &str,
        worker_id: &str,
        outcome: &RunFinish,
    ) -> DbResult<Run> {
        if outcome.status.is_active() {
            return Err(DbErr::invalid(format!(
                "a run cannot finish with status {}",
                outcome.status.as_str()
            )));
        }
        let now = ids::now();
        if self.dialect() == Dialect::Postgres {
            return self
                .finish_run_postgres(run_id, worker_id, outcome, now)
                .await;
        }
        let values = summary_values(self.dialect(), &outcome.thread);
        let mut tx = self.db.begin().await?;
        let run = finish_in(
            &mut tx,
            self.dialect(),
            run_id,
            worker_id,
            outcome,
            values,
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(run)
    }

    /// [`Persistence::finish_run_with_journal`]: one commit where the journal append and
    /// the finish made two. SQLite writes both in one transaction (its commit writes every
    /// page it touched, and the two touched the thread's pages twice); Postgres sends one
    /// statement (one round trip instead of two) when the journal's one-statement append
    /// applies (up to [`INSERT_CHUNK`] rows after existing ones, or a first run's rows
    /// without a seed). Anything else, and any failure, falls back to the two calls in
    /// turn, so the outcome of each part is the same as theirs: rows that cannot be
    /// written are reported and the run finishes without them; a run this worker no
    /// longer owns still gets its rows, as it did when the append committed first.
    ///
    /// [`Persistence::finish_run_with_journal`]: crate::Persistence::finish_run_with_journal
    pub(super) async fn finish_with_journal(
        &self,
        run_id: &str,
        worker_id: &str,
        outcome: RunFinish,
        journal: Option<JournalAppend<'_>>,
    ) -> FinishedWithJournal {
        let journal = match journal {
            Some(j)
                if !j.events.is_empty()
                    && !outcome.status.is_active()
                    && (self.dialect() == Dialect::Sqlite || j.events.len() <= INSERT_CHUNK) =>
            {
                j
            }
            other => return journal_then_finish(self, run_id, worker_id, outcome, other).await,
        };
        let tried = match self.dialect() {
            Dialect::Sqlite => {
                retry!(self.finish_with_journal_once(run_id, worker_id, &outcome, &journal))
                    .map(|(run, rows)| Some((run, Journaled::Rows(rows))))
            }
            Dialect::Postgres => {
                retry!(self.finish_with_journal_postgres(run_id, worker_id, &outcome, &journal))
                    .map(|done| done.map(|(run, first)| (run, Journaled::From(first))))
            }
        };
        match tried {
            Ok(Some((run, journaled))) => FinishedWithJournal {
                run: Ok(run),
                journal: Ok(match journaled {
                    Journaled::Rows(rows) => rows,
                    // Consecutive seqs, in order; the events move into the rows.
                    Journaled::From(first) => (first..)
                        .zip(journal.events)
                        .map(|(seq, e)| into_stored(journal.thread_id, journal.run_id, seq, e))
                        .collect(),
                }),
            },
            // Nothing was written (the append needs the general path).
            Ok(None) => journal_then_finish(self, run_id, worker_id, outcome, Some(journal)).await,
            // Nothing of the transaction was kept: do it again as two writes, each
            // failing on its own.
            Err(e) => {
                tracing::debug!(%run_id, error = %e, "finishing a run with its journal in one transaction failed; writing them in turn");
                journal_then_finish(self, run_id, worker_id, outcome, Some(journal)).await
            }
        }
    }

    /// One try of [`SqlStore::finish_with_journal`] on SQLite: the rows, then the run's
    /// end, then one commit; an error anywhere rolls back both.
    async fn finish_with_journal_once(
        &self,
        run_id: &str,
        worker_id: &str,
        outcome: &RunFinish,
        journal: &JournalAppend<'_>,
    ) -> DbResult<(Run, Vec<RunEvent>)> {
        let values = summary_values(self.dialect(), &outcome.thread);
        let mut tx = self.db.begin().await?;
        let rows = append_in_sqlite_tx(
            &mut tx,
            journal.thread_id,
            journal.run_id,
            &journal.events,
            journal.seed,
        )
        .await?;
        let run = finish_in(
            &mut tx,
            self.dialect(),
            run_id,
            worker_id,
            outcome,
            values,
            ids::now(),
        )
        .await?;
        tx.commit().await?;
        Ok((run, rows))
    }

    /// The same steps as one call of `fawn_finish_run` (migration 0006): one round trip.
    async fn finish_run_postgres(
        &self,
        run_id: &str,
        worker_id: &str,
        outcome: &RunFinish,
        now: DateTime<Utc>,
    ) -> DbResult<Run> {
        let mut b = Binds::new();
        let call = finish_call(&mut b, run_id, worker_id, outcome, now);
        let text = format!(concat!("SELECT ", run_cols!(), " FROM {}"), call);
        let rows = self
            .db
            .write_all(Sql::dynamic(text, b.args))
            .await
            .map_err(|e| finish_error(e, run_id, worker_id))?;
        match rows.first() {
            Some(row) => run_from_row(row),
            None => Err(DbErr::corrupt("fawn_finish_run did not return the run")),
        }
    }

    /// One try of [`SqlStore::finish_with_journal`] on Postgres: one statement (one round
    /// trip, one commit) whose first CTE is the journal's one-statement append and whose
    /// query calls `fawn_finish_run` only when that append inserted its rows. `None` when
    /// it did not (an empty journal to seed, a missing thread): nothing was written, and
    /// the two calls do it. Else the run and the first seq its rows took (they took
    /// consecutive seqs, in order).
    async fn finish_with_journal_postgres(
        &self,
        run_id: &str,
        worker_id: &str,
        outcome: &RunFinish,
        journal: &JournalAppend<'_>,
    ) -> DbResult<Option<(Run, i64)>> {
        let mut b = Binds::new();
        let (last, insert) = fast_insert_parts(
            &mut b,
            Dialect::Postgres,
            journal.thread_id,
            journal.run_id,
            &journal.events,
            journal.seed.is_none(),
        );
        let call = finish_call(&mut b, run_id, worker_id, outcome, ids::now());
        // An uncorrelated EXISTS is a one-time filter: the function is not called at all
        // when the append inserted nothing.
        let text = format!(
            concat!(
                "WITH last AS ({}), ins AS ({}) SELECT ",
                run_cols!(),
                ", (SELECT MIN(seq) FROM ins) AS journal_first FROM {} ",
                "WHERE EXISTS (SELECT 1 FROM ins)"
            ),
            last, insert, call
        );
        let rows = self
            .db
            .write_all(Sql::dynamic(text, b.args))
            .await
            .map_err(|e| finish_error(e, run_id, worker_id))?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        Ok(Some((run_from_row(row)?, row.int("journal_first")?)))
    }

    async fn release_run_once(&self, run_id: &str, worker_id: &str) -> DbResult<()> {
        let mut tx = self.db.begin().await?;
        let select = self.dialect().pick(
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs WHERE run_id = $1 AND owner = $2 AND status = 'running'"
            ),
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs WHERE run_id = $1 AND owner = $2 AND status = 'running' FOR UPDATE"
            ),
        );
        let run = tx
            .opt(Sql::new(select).bind(run_id).bind(worker_id))
            .await?
            .as_ref()
            .map(run_from_row)
            .transpose()?
            .ok_or_else(|| not_owned(run_id, worker_id))?;
        let rolled_back = match run.cancel_requested {
            // Cancelled while it ran: end it as the cancel asked instead of requeueing it.
            Some(action) => {
                end_cancelled(&mut tx, self.dialect(), &run, action).await?;
                refresh_threads(
                    &mut tx,
                    self.dialect(),
                    BTreeSet::from([run.thread_id.clone()]),
                )
                .await?;
                action == CancelAction::Rollback
            }
            None => {
                tx.exec(
                    Sql::new(concat!(
                        "UPDATE runs SET status = 'pending', owner = NULL, lease_expires_at = NULL, ",
                        "attempt = CASE WHEN attempt > 0 THEN attempt - 1 ELSE 0 END, ",
                        "updated_at = $2 WHERE run_id = $1"
                    ))
                    .bind(run_id)
                    .arg(Arg::ts(ids::now())),
                )
                .await?;
                false
            }
        };
        tx.commit().await?;
        if rolled_back {
            self.cache.invalidate_thread(&run.thread_id);
        }
        Ok(())
    }

    async fn cancel_runs_once(
        &self,
        target: &CancelTarget,
        action: CancelAction,
    ) -> DbResult<Vec<Run>> {
        let lock = self.dialect().pick("", " FOR UPDATE");
        let (text, args) = match target {
            CancelTarget::Runs { thread_id, run_ids } => {
                if run_ids.is_empty() {
                    return Ok(Vec::new());
                }
                let mut args: Vec<Arg> = Vec::new();
                let mut ps = Vec::new();
                for id in run_ids {
                    args.push(Arg::from(id));
                    ps.push(format!("${}", args.len()));
                }
                let mut text = format!(
                    "SELECT {} FROM runs WHERE run_id IN ({}) AND status IN ('pending', 'running')",
                    run_cols!(),
                    ps.join(", ")
                );
                if let Some(t) = thread_id {
                    args.push(Arg::from(t));
                    text.push_str(&format!(" AND thread_id = ${}", args.len()));
                }
                (text, args)
            }
            CancelTarget::Status { pending, running } => {
                let statuses = match (pending, running) {
                    (true, true) => "'pending', 'running'",
                    (true, false) => "'pending'",
                    (false, true) => "'running'",
                    (false, false) => return Ok(Vec::new()),
                };
                (
                    format!(
                        "SELECT {} FROM runs WHERE status IN ({statuses})",
                        run_cols!()
                    ),
                    Vec::new(),
                )
            }
        };
        let mut tx = self.db.begin().await?;
        let matched = tx
            .all(Sql::dynamic(format!("{text} ORDER BY seq{lock}"), args))
            .await?
            .iter()
            .map(run_from_row)
            .collect::<DbResult<Vec<Run>>>()?;
        let now = ids::now();
        let mut threads = BTreeSet::new();
        for run in &matched {
            threads.insert(run.thread_id.clone());
            match run.status {
                RunStatus::Pending => {
                    end_cancelled(&mut tx, self.dialect(), run, action).await?;
                }
                _ => {
                    tx.exec(
                        Sql::new(
                            "UPDATE runs SET cancel_requested = $2, updated_at = $3 WHERE run_id = $1",
                        )
                        .bind(run.run_id.as_str())
                        .bind(cancel_action_str(action))
                        .arg(Arg::ts(now)),
                    )
                    .await?;
                    if self.dialect() == Dialect::Postgres {
                        // Delivered at commit to every node listening (see
                        // `signals`): the one executing the run stops it at once
                        // instead of at its next heartbeat.
                        tx.exec(
                            Sql::new("SELECT pg_notify($1, $2)")
                                .bind(super::CANCEL_CHANNEL)
                                .bind(format!("{}:{}", run.run_id, cancel_action_str(action))),
                        )
                        .await?;
                    }
                }
            }
        }
        refresh_threads(&mut tx, self.dialect(), threads.clone()).await?;
        tx.commit().await?;
        if action == CancelAction::Rollback {
            for t in &threads {
                self.cache.invalidate_thread(t);
            }
        }
        Ok(matched)
    }

    async fn reap_expired_runs_once(
        &self,
        now: DateTime<Utc>,
        max_attempts: u32,
    ) -> DbResult<Vec<Run>> {
        let select = self.dialect().pick(
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs WHERE status = 'running' AND lease_expires_at < $1 ",
                "ORDER BY seq LIMIT $2"
            ),
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs WHERE status = 'running' AND lease_expires_at < $1 ",
                "ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED"
            ),
        );
        let mut tx = self.db.begin().await?;
        let expired = tx
            .all(Sql::new(select).arg(Arg::ts(now)).bind(REAP_BATCH))
            .await?
            .iter()
            .map(run_from_row)
            .collect::<DbResult<Vec<Run>>>()?;
        let stamp = ids::now();
        let mut touched = Vec::new();
        let mut threads = BTreeSet::new();
        let mut rolled_back = BTreeSet::new();
        for run in expired {
            threads.insert(run.thread_id.clone());
            if let Some(action) = run.cancel_requested {
                if action == CancelAction::Rollback {
                    rolled_back.insert(run.thread_id.clone());
                }
                let after = end_cancelled(&mut tx, self.dialect(), &run, action).await?;
                touched.push(after.unwrap_or(run));
            } else if run.attempt < max_attempts {
                let row = tx
                    .opt(
                        Sql::new(concat!(
                            "UPDATE runs SET status = 'pending', owner = NULL, ",
                            "lease_expires_at = NULL, updated_at = $2 WHERE run_id = $1 RETURNING ",
                            run_cols!()
                        ))
                        .bind(run.run_id.as_str())
                        .arg(Arg::ts(stamp)),
                    )
                    .await?;
                if let Some(r) = row {
                    touched.push(run_from_row(&r)?);
                }
            } else {
                let error = json!({
                    "error": "RunOrphaned",
                    "message": format!(
                        "The worker running this run stopped renewing its lease; gave up after {} attempt(s).",
                        run.attempt
                    ),
                });
                let row = tx
                    .opt(
                        Sql::new(concat!(
                            "UPDATE runs SET status = 'error', owner = NULL, lease_expires_at = NULL, ",
                            "error = $2, stop_reason = $3, updated_at = $4 WHERE run_id = $1 RETURNING ",
                            run_cols!()
                        ))
                        .bind(run.run_id.as_str())
                        .arg(Arg::json(&error))
                        .bind(ORPHAN_RECOVERED)
                        .arg(Arg::ts(stamp)),
                    )
                    .await?;
                tx.exec(
                    Sql::new("UPDATE threads SET error = $2, updated_at = $3 WHERE thread_id = $1")
                        .bind(run.thread_id.as_str())
                        .arg(Arg::json(&error))
                        .arg(Arg::ts(stamp)),
                )
                .await?;
                if let Some(r) = row {
                    touched.push(run_from_row(&r)?);
                }
            }
        }
        refresh_threads(&mut tx, self.dialect(), threads).await?;
        tx.commit().await?;
        for t in &rolled_back {
            self.cache.invalidate_thread(t);
        }
        Ok(touched)
    }
}

#[async_trait]
impl RunStore for SqlStore {
    async fn create_run(&self, run: NewRun) -> Result<CreatedRun> {
        let run_id = run.run_id.clone().unwrap_or_else(new_uuid7);
        retry!(self.create_run_once(&run, &run_id))
    }

    async fn get_run(&self, run_id: &str) -> Result<Option<Run>> {
        retry!(self.get_run_once(run_id))
    }

    async fn list_runs(&self, thread_id: &str, query: &RunQuery) -> Result<Vec<Run>> {
        retry!(self.list_runs_once(thread_id, query))
    }

    async fn replay_runs(&self, thread_id: &str) -> Result<Vec<Run>> {
        retry!(self.replay_runs_once(thread_id))
    }

    async fn delete_run(&self, run_id: &str) -> Result<bool> {
        retry!(self.delete_run_once(run_id))
    }

    async fn claim_next_run(&self, worker_id: &str, lease: Duration) -> Result<Option<Run>> {
        retry!(self.claim_next_run_once(worker_id, lease))
    }

    async fn claim_run(
        &self,
        run_id: &str,
        worker_id: &str,
        lease: Duration,
    ) -> Result<Option<Run>> {
        retry!(self.claim_run_once(run_id, worker_id, lease))
    }

    async fn heartbeat(
        &self,
        run_id: &str,
        worker_id: &str,
        lease: Duration,
    ) -> Result<Option<CancelAction>> {
        retry!(self.heartbeat_once(run_id, worker_id, lease))
    }

    async fn heartbeat_many(
        &self,
        run_ids: &[String],
        worker_id: &str,
        lease: Duration,
    ) -> Result<HashMap<String, Option<CancelAction>>> {
        retry!(self.heartbeat_many_once(run_ids, worker_id, lease))
    }

    async fn finish_run(&self, run_id: &str, worker_id: &str, outcome: RunFinish) -> Result<Run> {
        retry!(self.finish_run_once(run_id, worker_id, &outcome))
    }

    async fn release_run(&self, run_id: &str, worker_id: &str) -> Result<()> {
        retry!(self.release_run_once(run_id, worker_id))
    }

    async fn cancel_runs(&self, target: &CancelTarget, action: CancelAction) -> Result<Vec<Run>> {
        retry!(self.cancel_runs_once(target, action))
    }

    async fn reap_expired_runs(&self, now: DateTime<Utc>, max_attempts: u32) -> Result<Vec<Run>> {
        retry!(self.reap_expired_runs_once(now, max_attempts))
    }
}
