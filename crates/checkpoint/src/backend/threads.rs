//! [`ThreadStore`]: threads, their derived status, copy, prune and TTL.

use super::db::{Arg, DbErr, DbResult, Dialect, Sql, Tx, retry};
use super::{
    Select, SqlStore, Where, checkpoints, dir, lock_thread, prune_strategy_str, thread_cols,
    thread_from_row, thread_not_found,
};
use crate::ids::{self, new_uuid7, plus_minutes};
use crate::json::merge_shallow;
use crate::types::*;
use crate::{Result, ThreadStore};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

fn validate_ttl(ttl: &Option<ThreadTtl>) -> DbResult<()> {
    if let Some(t) = ttl
        && !valid_ttl_minutes(t.minutes)
    {
        return Err(DbErr::invalid(format!(
            "ttl must be a positive number of minutes, at most {MAX_TTL_MINUTES} (100 years), got {}",
            t.minutes
        )));
    }
    Ok(())
}

fn expires(ttl: &Option<ThreadTtl>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    ttl.as_ref().map(|t| plus_minutes(now, t.minutes))
}

/// `SET expires_at = …` for a thread touched at `$n` (microseconds): pushed back by its TTL.
/// A TTL out of range (stored before TTLs were bounded) clears the expiry instead of
/// overflowing it.
macro_rules! refresh_expiry {
    ($now:literal) => {
        concat!(
            "expires_at = CASE WHEN ttl_minutes IS NULL THEN expires_at ",
            "WHEN NOT (ttl_minutes > 0 AND ttl_minutes <= ",
            super::max_ttl_minutes!(),
            ") THEN NULL ELSE ",
            $now,
            " + CAST(ttl_minutes * 60000000 AS BIGINT) END"
        )
    };
}
pub(crate) use refresh_expiry;

const SELECT_THREAD: &str = concat!(
    "SELECT ",
    thread_cols!(),
    " FROM threads WHERE thread_id = $1"
);

pub(crate) async fn get_thread_in(tx: &mut Tx, thread_id: &str) -> DbResult<Option<Thread>> {
    tx.opt(Sql::new(SELECT_THREAD).bind(thread_id))
        .await?
        .as_ref()
        .map(thread_from_row)
        .transpose()
}

/// Deletes a thread and everything that belongs to it. Runs go first, so that the lock
/// order (runs, then the thread) matches the run store's.
pub(crate) async fn delete_thread_rows(tx: &mut Tx, thread_id: &str) -> DbResult<bool> {
    for sql in [
        "DELETE FROM runs WHERE thread_id = $1",
        "DELETE FROM checkpoint_writes WHERE thread_id = $1",
        "DELETE FROM checkpoints WHERE thread_id = $1",
        "DELETE FROM crons WHERE thread_id = $1",
        "DELETE FROM run_events WHERE thread_id = $1",
        "DELETE FROM feedback WHERE thread_id = $1",
    ] {
        tx.exec(Sql::new(sql).bind(thread_id)).await?;
    }
    let n = tx
        .exec(Sql::new("DELETE FROM threads WHERE thread_id = $1").bind(thread_id))
        .await?;
    Ok(n > 0)
}

/// Whether a thread left with `summary` has work to resume: nodes next, or interrupts.
pub(crate) fn summary_has_next(summary: &ThreadSummary) -> bool {
    summary.has_next || !summary.interrupts.is_empty()
}

/// The thread config a summary sets, as an argument (`NULL` keeps the stored one).
pub(crate) fn summary_config(summary: &ThreadSummary) -> Arg {
    Arg::Json(
        summary
            .config
            .as_ref()
            .map(|c| serde_json::to_string(c).unwrap_or_else(|_| "{}".to_string())),
    )
}

/// The thread's new values as stored: packed on SQLite (see `pack`; the thread row holds a
/// whole state, as large as a snapshot). Computed before the writer is taken.
pub(crate) fn summary_values(dialect: super::db::Dialect, summary: &ThreadSummary) -> Arg {
    Arg::opt_packed_json(dialect, summary.values.as_ref())
}

/// Records a run's (or a state update's) outcome on its thread and recomputes its status,
/// in two statements: lock and read the metadata, then one UPDATE whose status CASE sees
/// the new values (and, taken after the lock, every committed run of the thread).
/// `values` is [`summary_values`] of `summary`.
pub(crate) async fn apply_summary(
    tx: &mut Tx,
    dialect: super::db::Dialect,
    thread_id: &str,
    summary: &ThreadSummary,
    values: Arg,
    now: DateTime<Utc>,
) -> DbResult<()> {
    let select = dialect.pick(
        "SELECT metadata FROM threads WHERE thread_id = $1",
        "SELECT metadata FROM threads WHERE thread_id = $1 FOR UPDATE",
    );
    let row = tx
        .opt(Sql::new(select).bind(thread_id))
        .await?
        .ok_or_else(|| thread_not_found(thread_id))?;
    let mut metadata = row.map("metadata")?;
    merge_shallow(&mut metadata, &summary.metadata);
    let has_next = summary_has_next(summary);
    let updated = tx
        .exec(
            Sql::new(concat!(
                "UPDATE threads SET state_values = COALESCE($2, state_values), ",
                "state_updated_at = CASE WHEN $2 IS NULL THEN state_updated_at ELSE $3 END, ",
                "interrupts = $4, has_next = $5, error = $6, metadata = $7, ",
                "config = COALESCE($8, config), updated_at = $3, ",
                refresh_expiry!("$3"),
                ", status = CASE WHEN EXISTS (SELECT 1 FROM runs WHERE runs.thread_id = $1 ",
                "AND runs.status IN ('pending', 'running')) THEN 'busy' ",
                "WHEN $6 IS NOT NULL THEN 'error' WHEN $5 THEN 'interrupted' ELSE 'idle' END ",
                // Nothing read back: parsing the values just written cost more than the
                // update (a run's end; `set_thread_summary` reads the thread itself), and a
                // `RETURNING` costs SQLite a statement journal (`lite`).
                "WHERE thread_id = $1"
            ))
            .bind(thread_id)
            .arg(values)
            .arg(Arg::ts(now))
            .arg(Arg::json_map(&summary.interrupts))
            .bind(has_next)
            .arg(Arg::opt_json(summary.error.as_ref()))
            .arg(Arg::json_map(&metadata))
            .arg(summary_config(summary)),
        )
        .await?;
    if updated == 0 {
        return Err(thread_not_found(thread_id));
    }
    Ok(())
}

fn thread_filter(store: &SqlStore, filter: &ThreadFilter) -> Where {
    let mut w = Where::new(store.dialect());
    if let Some(m) = &filter.metadata {
        w.contains("metadata", m);
    }
    if let Some(v) = &filter.values {
        w.contains_packed("state_values", v);
    }
    if let Some(s) = filter.status {
        w.eq("status", s.as_str());
    }
    if let Some(ids) = &filter.ids {
        w.in_list("thread_id", ids);
    }
    w
}

impl SqlStore {
    async fn create_thread_once(&self, thread: &NewThread, id: &str) -> DbResult<Thread> {
        validate_ttl(&thread.ttl)?;
        let now = ids::now();
        macro_rules! insert {
            () => {
                concat!(
                    "INSERT INTO threads (thread_id, created_at, updated_at, state_updated_at, ",
                    "metadata, status, config, state_values, interrupts, error, has_next, ",
                    "ttl_minutes, ttl_strategy, expires_at) ",
                    "VALUES ($1, $2, $2, $2, $3, 'idle', $4, NULL, $4, NULL, FALSE, $5, $6, $7) ",
                    "ON CONFLICT (thread_id) DO NOTHING"
                )
            };
        }
        let args = |sql: Sql| {
            sql.bind(id)
                .arg(Arg::ts(now))
                .arg(Arg::json_map(&thread.metadata))
                .arg(Arg::Json(Some("{}".to_string())))
                .bind(thread.ttl.as_ref().map(|t| t.minutes))
                .bind(thread.ttl.as_ref().map(|t| prune_strategy_str(t.strategy)))
                .arg(Arg::opt_ts(expires(&thread.ttl, now)))
        };
        let row = match self.dialect() {
            // One round trip.
            Dialect::Postgres => {
                self.db
                    .write_opt(args(Sql::new(concat!(
                        insert!(),
                        " RETURNING ",
                        thread_cols!()
                    ))))
                    .await?
            }
            // The row read back by key, not `RETURNING` (statement journals: `lite`).
            Dialect::Sqlite => {
                let mut tx = self.db.begin().await?;
                let row = if tx.exec(args(Sql::new(insert!()))).await? > 0 {
                    tx.opt(Sql::new(SELECT_THREAD).bind(id)).await?
                } else {
                    None
                };
                tx.commit().await?;
                row
            }
        };
        if let Some(row) = row {
            return thread_from_row(&row);
        }
        match thread.if_exists {
            IfExists::Raise => Err(DbErr::conflict(format!(
                "Thread with ID {id} already exists"
            ))),
            IfExists::DoNothing => self
                .get_thread_once(id)
                .await?
                .ok_or_else(|| thread_not_found(id)),
        }
    }

    async fn get_thread_once(&self, thread_id: &str) -> DbResult<Option<Thread>> {
        self.db
            .read_opt(Sql::new(SELECT_THREAD).bind(thread_id))
            .await?
            .as_ref()
            .map(thread_from_row)
            .transpose()
    }

    async fn update_thread_once(&self, thread_id: &str, patch: &ThreadPatch) -> DbResult<Thread> {
        validate_ttl(&patch.ttl)?;
        let mut tx = self.db.begin().await?;
        if !lock_thread(&mut tx, self.dialect(), thread_id).await? {
            return Err(thread_not_found(thread_id));
        }
        let current = get_thread_in(&mut tx, thread_id)
            .await?
            .ok_or_else(|| thread_not_found(thread_id))?;
        let mut metadata = current.metadata;
        if let Some(m) = &patch.metadata {
            merge_shallow(&mut metadata, m);
        }
        let now = ids::now();
        let ttl = patch.ttl.clone().or(current.ttl);
        tx.exec(
            Sql::new(concat!(
                "UPDATE threads SET metadata = $2, updated_at = $3, ttl_minutes = $4, ",
                "ttl_strategy = $5, expires_at = $6 WHERE thread_id = $1"
            ))
            .bind(thread_id)
            .arg(Arg::json_map(&metadata))
            .arg(Arg::ts(now))
            .bind(ttl.as_ref().map(|t| t.minutes))
            .bind(ttl.as_ref().map(|t| prune_strategy_str(t.strategy)))
            .arg(Arg::opt_ts(expires(&ttl, now))),
        )
        .await?;
        let thread = get_thread_in(&mut tx, thread_id)
            .await?
            .ok_or_else(|| thread_not_found(thread_id))?;
        tx.commit().await?;
        Ok(thread)
    }

    async fn delete_thread_once(&self, thread_id: &str) -> DbResult<bool> {
        let mut tx = self.db.begin().await?;
        let existed = delete_thread_rows(&mut tx, thread_id).await?;
        tx.commit().await?;
        self.cache.invalidate_thread(thread_id);
        Ok(existed)
    }

    async fn search_threads_once(&self, query: &ThreadQuery) -> DbResult<Page<Thread>> {
        let col = match query.sort_by {
            ThreadSort::ThreadId => "thread_id",
            ThreadSort::Status => "status",
            ThreadSort::CreatedAt => "created_at",
            ThreadSort::UpdatedAt => "updated_at",
            ThreadSort::StateUpdatedAt => "state_updated_at",
        };
        let d = dir(query.sort_order);
        let order = format!("{col} {d}, thread_id {d}");
        self.search_page(
            Select {
                cols: thread_cols!(),
                from: "threads",
                order: &order,
            },
            thread_filter(self, &query.filter),
            query.limit,
            query.offset,
            thread_from_row,
        )
        .await
    }

    async fn copy_thread_once(&self, thread_id: &str, new_thread_id: &str) -> DbResult<Thread> {
        let mut tx = self.db.begin().await?;
        if get_thread_in(&mut tx, thread_id).await?.is_none() {
            return Err(thread_not_found(thread_id));
        }
        let now = ids::now();
        let inserted = tx
            .exec(
                Sql::new(concat!(
                    "INSERT INTO threads (thread_id, created_at, updated_at, state_updated_at, ",
                    "metadata, status, config, state_values, interrupts, error, has_next, ",
                    "ttl_minutes, ttl_strategy, expires_at) ",
                    "SELECT $2, $3, $3, $3, metadata, CASE WHEN error IS NOT NULL THEN 'error' ",
                    "WHEN has_next THEN 'interrupted' ELSE 'idle' END, config, state_values, ",
                    "interrupts, error, has_next, NULL, NULL, NULL FROM threads ",
                    "WHERE thread_id = $1 ON CONFLICT (thread_id) DO NOTHING"
                ))
                .bind(thread_id)
                .bind(new_thread_id)
                .arg(Arg::ts(now)),
            )
            .await?;
        if inserted == 0 {
            return Err(DbErr::conflict(format!(
                "Thread with ID {new_thread_id} already exists"
            )));
        }
        let copy_checkpoints = self.dialect().pick(
            concat!(
                "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id, ",
                "run_id, metadata, writes, snapshot, snap_bytes, delta_bytes, next, tasks, ",
                "created_at) SELECT $2, checkpoint_ns, checkpoint_id, parent_id, run_id, ",
                "CASE WHEN json_type(metadata, '$.thread_id') IS NOT NULL ",
                "THEN json_set(metadata, '$.thread_id', $2) ELSE metadata END, ",
                "writes, snapshot, snap_bytes, delta_bytes, next, tasks, created_at ",
                "FROM checkpoints WHERE thread_id = $1"
            ),
            concat!(
                "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id, ",
                "run_id, metadata, writes, snapshot, snap_bytes, delta_bytes, next, tasks, ",
                "created_at) SELECT $2, checkpoint_ns, checkpoint_id, parent_id, run_id, ",
                "CASE WHEN metadata ? 'thread_id' ",
                "THEN jsonb_set(metadata, '{thread_id}', to_jsonb($2::text)) ELSE metadata END, ",
                "writes, snapshot, snap_bytes, delta_bytes, next, tasks, created_at ",
                "FROM checkpoints WHERE thread_id = $1"
            ),
        );
        tx.exec(
            Sql::new(copy_checkpoints)
                .bind(thread_id)
                .bind(new_thread_id),
        )
        .await?;
        tx.exec(
            Sql::new(concat!(
                "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, ",
                "task_id, idx, channel, value) SELECT $2, checkpoint_ns, checkpoint_id, ",
                "task_id, idx, channel, value FROM checkpoint_writes WHERE thread_id = $1"
            ))
            .bind(thread_id)
            .bind(new_thread_id),
        )
        .await?;
        let thread = get_thread_in(&mut tx, new_thread_id)
            .await?
            .ok_or_else(|| thread_not_found(new_thread_id))?;
        tx.commit().await?;
        Ok(thread)
    }

    async fn prune_threads_once(
        &self,
        thread_ids: &[String],
        strategy: PruneStrategy,
    ) -> DbResult<u64> {
        let mut tx = self.db.begin().await?;
        let mut pruned = 0;
        for thread_id in thread_ids {
            let existed = match strategy {
                PruneStrategy::Delete => delete_thread_rows(&mut tx, thread_id).await?,
                PruneStrategy::KeepLatest => {
                    if lock_thread(&mut tx, self.dialect(), thread_id).await? {
                        checkpoints::keep_latest_only(&mut tx, thread_id).await?;
                        tx.exec(
                            Sql::new("UPDATE threads SET expires_at = NULL WHERE thread_id = $1")
                                .bind(thread_id.as_str()),
                        )
                        .await?;
                        true
                    } else {
                        false
                    }
                }
            };
            if existed {
                pruned += 1;
            }
        }
        tx.commit().await?;
        for thread_id in thread_ids {
            self.cache.invalidate_thread(thread_id);
        }
        Ok(pruned)
    }

    async fn set_thread_summary_once(
        &self,
        thread_id: &str,
        summary: &ThreadSummary,
    ) -> DbResult<Thread> {
        let values = summary_values(self.dialect(), summary);
        let mut tx = self.db.begin().await?;
        apply_summary(
            &mut tx,
            self.dialect(),
            thread_id,
            summary,
            values,
            ids::now(),
        )
        .await?;
        let row = tx
            .opt(
                Sql::new(concat!(
                    "SELECT ",
                    thread_cols!(),
                    " FROM threads WHERE thread_id = $1"
                ))
                .bind(thread_id),
            )
            .await?
            .ok_or_else(|| thread_not_found(thread_id))?;
        tx.commit().await?;
        thread_from_row(&row)
    }

    async fn expired_threads_once(&self, now: DateTime<Utc>, limit: u64) -> DbResult<Vec<Thread>> {
        let rows = self
            .db
            .read_all(
                Sql::new(concat!(
                    "SELECT ",
                    thread_cols!(),
                    " FROM threads WHERE expires_at IS NOT NULL AND expires_at <= $1 ",
                    "AND status <> 'busy' ORDER BY expires_at LIMIT $2"
                ))
                .arg(Arg::ts(now))
                .bind(super::clamp_i64(if limit == 0 { u64::MAX } else { limit })),
            )
            .await?;
        rows.iter().map(thread_from_row).collect()
    }
}

#[async_trait]
impl ThreadStore for SqlStore {
    async fn create_thread(&self, thread: NewThread) -> Result<Thread> {
        let id = thread.thread_id.clone().unwrap_or_else(new_uuid7);
        retry!(self.create_thread_once(&thread, &id))
    }

    async fn get_thread(&self, thread_id: &str) -> Result<Option<Thread>> {
        retry!(self.get_thread_once(thread_id))
    }

    async fn update_thread(&self, thread_id: &str, patch: ThreadPatch) -> Result<Thread> {
        retry!(self.update_thread_once(thread_id, &patch))
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<bool> {
        retry!(self.delete_thread_once(thread_id))
    }

    async fn search_threads(&self, query: &ThreadQuery) -> Result<Page<Thread>> {
        retry!(self.search_threads_once(query))
    }

    async fn count_threads(&self, filter: &ThreadFilter) -> Result<u64> {
        retry!(self.count_matching(thread_cols!(), "threads", thread_filter(self, filter)))
    }

    async fn copy_thread(&self, thread_id: &str, new_thread_id: &str) -> Result<Thread> {
        retry!(self.copy_thread_once(thread_id, new_thread_id))
    }

    async fn prune_threads(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<u64> {
        retry!(self.prune_threads_once(thread_ids, strategy))
    }

    async fn set_thread_summary(&self, thread_id: &str, summary: ThreadSummary) -> Result<Thread> {
        retry!(self.set_thread_summary_once(thread_id, &summary))
    }

    async fn expired_threads(&self, now: DateTime<Utc>, limit: u64) -> Result<Vec<Thread>> {
        retry!(self.expired_threads_once(now, limit))
    }
}
