//! [`CronStore`]: cron jobs, and claiming due ticks so that no two processes fire the same
//! one (Postgres: `FOR UPDATE SKIP LOCKED`; SQLite: the single writer).

use super::db::{Arg, DbErr, DbResult, Row, Sql, retry};
use super::{Select, SqlStore, Where, clamp_i64, dir, run_cols, run_from_row};
use crate::ids::{self, new_uuid7};
use crate::json::merge_shallow;
use crate::types::*;
use crate::{CronStore, Result};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

macro_rules! cron_cols {
    () => {
        "cron_id, assistant_id, thread_id, user_id, schedule, timezone, end_time, payload, \
         next_run_date, metadata, on_run_completed, enabled, task, created_at, updated_at"
    };
}

fn cron_from_row(r: &Row) -> DbResult<Cron> {
    Ok(Cron {
        cron_id: r.text("cron_id")?,
        assistant_id: r.text("assistant_id")?,
        thread_id: r.opt_text("thread_id")?,
        user_id: r.opt_text("user_id")?,
        schedule: r.text("schedule")?,
        timezone: r.opt_text("timezone")?,
        end_time: r.opt_ts("end_time")?,
        payload: r.map("payload")?,
        next_run_date: r.opt_ts("next_run_date")?,
        metadata: r.map("metadata")?,
        on_run_completed: r.opt_text("on_run_completed")?,
        enabled: r.boolean("enabled")?,
        task: match r.opt_json("task")? {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(_) => return Err(DbErr::corrupt("crons.task is not a JSON object")),
        },
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
    })
}

fn not_found(cron_id: &str) -> DbErr {
    DbErr::not_found(format!("Cron {cron_id} not found"))
}

const SELECT_CRON: &str = concat!("SELECT ", cron_cols!(), " FROM crons WHERE cron_id = $1");

fn cron_filter(store: &SqlStore, filter: &CronFilter) -> Where {
    let mut w = Where::new(store.dialect());
    if let Some(a) = &filter.assistant_id {
        w.eq("assistant_id", a.as_str());
    }
    if let Some(t) = &filter.thread_id {
        w.eq("thread_id", t.as_str());
    }
    if let Some(u) = &filter.user_id {
        w.eq("user_id", u.as_str());
    }
    if let Some(e) = filter.enabled {
        w.eq("enabled", e);
    }
    if let Some(m) = &filter.metadata {
        w.contains("metadata", m);
    }
    match filter.task {
        Some(true) => w.clause("task IS NOT NULL"),
        Some(false) => w.clause("task IS NULL"),
        None => {}
    }
    w
}

fn task_arg(task: Option<&JsonMap>) -> Arg {
    match task {
        Some(t) => Arg::json_map(t),
        None => Arg::opt_json(None),
    }
}

impl SqlStore {
    async fn create_cron_once(&self, cron: &NewCron, id: &str) -> DbResult<Cron> {
        let now = ids::now();
        let row = self
            .db
            .write_opt(
                Sql::new(concat!(
                    "INSERT INTO crons (",
                    cron_cols!(),
                    ") VALUES ($1, $2, $3, $13, $4, $5, $6, $7, $8, $9, $10, $11, $14, $12, $12) ",
                    "RETURNING ",
                    cron_cols!()
                ))
                .bind(id)
                .bind(cron.assistant_id.as_str())
                .bind(cron.thread_id.clone())
                .bind(cron.schedule.as_str())
                .bind(cron.timezone.clone())
                .arg(Arg::opt_ts(cron.end_time))
                .arg(Arg::json_map(&cron.payload))
                .arg(Arg::opt_ts(cron.next_run_date))
                .arg(Arg::json_map(&cron.metadata))
                .bind(cron.on_run_completed.clone())
                .bind(cron.enabled)
                .arg(Arg::ts(now))
                .bind(cron.user_id.clone())
                .arg(task_arg(cron.task.as_ref())),
            )
            .await;
        match row {
            Ok(Some(row)) => cron_from_row(&row),
            Ok(None) => Err(DbErr::corrupt("INSERT … RETURNING returned no row")),
            Err(e) if e.is_unique_violation() => {
                Err(DbErr::conflict(format!("Cron {id} already exists")))
            }
            Err(e) => Err(e),
        }
    }

    async fn get_cron_once(&self, cron_id: &str) -> DbResult<Option<Cron>> {
        self.db
            .read_opt(Sql::new(SELECT_CRON).bind(cron_id))
            .await?
            .as_ref()
            .map(cron_from_row)
            .transpose()
    }

    async fn update_cron_once(&self, cron_id: &str, patch: &CronPatch) -> DbResult<Cron> {
        let mut tx = self.db.begin().await?;
        let select = self.dialect().pick(
            SELECT_CRON,
            concat!(
                "SELECT ",
                cron_cols!(),
                " FROM crons WHERE cron_id = $1 FOR UPDATE"
            ),
        );
        let mut c = tx
            .opt(Sql::new(select).bind(cron_id))
            .await?
            .as_ref()
            .map(cron_from_row)
            .transpose()?
            .ok_or_else(|| not_found(cron_id))?;
        if let Some(s) = &patch.schedule {
            c.schedule = s.clone();
        }
        if let Some(t) = &patch.timezone {
            c.timezone = t.clone();
        }
        if let Some(e) = patch.end_time {
            c.end_time = e;
        }
        if let Some(p) = &patch.payload {
            merge_shallow(&mut c.payload, p);
        }
        if let Some(n) = patch.next_run_date {
            c.next_run_date = n;
        }
        if let Some(m) = &patch.metadata {
            c.metadata = m.clone();
        }
        if let Some(o) = &patch.on_run_completed {
            c.on_run_completed = o.clone();
        }
        if let Some(e) = patch.enabled {
            c.enabled = e;
        }
        if let Some(t) = &patch.thread_id {
            c.thread_id = t.clone();
        }
        if let Some(t) = &patch.task {
            c.task = Some(t.clone());
        }
        let row = tx
            .opt(
                Sql::new(concat!(
                    "UPDATE crons SET schedule = $2, timezone = $3, end_time = $4, payload = $5, ",
                    "next_run_date = $6, metadata = $7, on_run_completed = $8, enabled = $9, ",
                    "updated_at = $10, thread_id = $11, task = $12 WHERE cron_id = $1 RETURNING ",
                    cron_cols!()
                ))
                .bind(cron_id)
                .bind(c.schedule.as_str())
                .bind(c.timezone.clone())
                .arg(Arg::opt_ts(c.end_time))
                .arg(Arg::json_map(&c.payload))
                .arg(Arg::opt_ts(c.next_run_date))
                .arg(Arg::json_map(&c.metadata))
                .bind(c.on_run_completed.clone())
                .bind(c.enabled)
                .arg(Arg::ts(ids::now()))
                .bind(c.thread_id.clone())
                .arg(task_arg(c.task.as_ref())),
            )
            .await?
            .ok_or_else(|| not_found(cron_id))?;
        let cron = cron_from_row(&row)?;
        tx.commit().await?;
        Ok(cron)
    }

    async fn delete_cron_once(&self, cron_id: &str) -> DbResult<bool> {
        Ok(self
            .db
            .write_exec(Sql::new("DELETE FROM crons WHERE cron_id = $1").bind(cron_id))
            .await?
            > 0)
    }

    async fn search_crons_once(&self, query: &CronQuery) -> DbResult<Page<Cron>> {
        let col = match query.sort_by {
            CronSort::CronId => "cron_id",
            CronSort::AssistantId => "assistant_id",
            CronSort::ThreadId => "thread_id",
            CronSort::CreatedAt => "created_at",
            CronSort::UpdatedAt => "updated_at",
            CronSort::NextRunDate => "next_run_date",
            CronSort::EndTime => "end_time",
        };
        let d = dir(query.sort_order);
        let order = format!("{col} {d} NULLS LAST, cron_id {d}");
        self.search_page(
            Select {
                cols: cron_cols!(),
                from: "crons",
                order: &order,
            },
            cron_filter(self, &query.filter),
            query.limit,
            query.offset,
            cron_from_row,
        )
        .await
    }

    async fn claim_due_crons_once(
        &self,
        now: DateTime<Utc>,
        limit: u64,
        kinds: CronKinds,
        next: &(dyn for<'c> Fn(&'c Cron) -> Option<DateTime<Utc>> + Send + Sync),
    ) -> DbResult<Vec<Cron>> {
        let kind = match kinds {
            CronKinds::All => "",
            CronKinds::Plain => "AND task IS NULL ",
            CronKinds::Tasks => "AND task IS NOT NULL ",
        };
        let lock = self.dialect().pick("", " FOR UPDATE SKIP LOCKED");
        let select = format!(
            concat!(
                "SELECT ",
                cron_cols!(),
                " FROM crons WHERE enabled = TRUE AND next_run_date IS NOT NULL ",
                "AND next_run_date <= $1 AND (end_time IS NULL OR next_run_date <= end_time) ",
                "{}ORDER BY next_run_date, cron_id LIMIT $2{}"
            ),
            kind, lock
        );
        let mut tx = self.db.begin().await?;
        let due = tx
            .all(
                Sql::dynamic(select, Vec::new())
                    .arg(Arg::ts(now))
                    .bind(clamp_i64(if limit == 0 { u64::MAX } else { limit })),
            )
            .await?
            .iter()
            .map(cron_from_row)
            .collect::<DbResult<Vec<Cron>>>()?;
        let stamp = ids::now();
        for cron in &due {
            let following = next(cron);
            tx.exec(
                Sql::new("UPDATE crons SET next_run_date = $2, updated_at = $3 WHERE cron_id = $1")
                    .bind(cron.cron_id.as_str())
                    .arg(Arg::opt_ts(following))
                    .arg(Arg::ts(stamp)),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(due)
    }
}

impl SqlStore {
    async fn cron_runs_once(&self, cron_id: &str, limit: u64, offset: u64) -> DbResult<Page<Run>> {
        // The expression the `runs_cron` index is built on.
        let key = self.dialect().pick(
            "json_extract(metadata, '$.cron_id')",
            "(metadata ->> 'cron_id')",
        );
        let mut w = Where::new(self.dialect());
        w.eq(key, cron_id);
        self.search_page(
            Select {
                cols: run_cols!(),
                from: "runs",
                order: "created_at DESC, seq DESC",
            },
            w,
            limit,
            offset,
            run_from_row,
        )
        .await
    }

    async fn count_active_task_runs_once(&self) -> DbResult<u64> {
        let sql = self.dialect().pick(
            "SELECT COUNT(*) AS n FROM runs WHERE status IN ('pending', 'running') \
             AND json_extract(metadata, '$.scheduled_task_id') IS NOT NULL",
            "SELECT COUNT(*) AS n FROM runs WHERE status IN ('pending', 'running') \
             AND (metadata ->> 'scheduled_task_id') IS NOT NULL",
        );
        let row = self.db.read_opt(Sql::new(sql)).await?;
        Ok(match row {
            Some(r) => u64::try_from(r.int("n")?).unwrap_or(0),
            None => 0,
        })
    }
}

#[async_trait]
impl CronStore for SqlStore {
    async fn create_cron(&self, cron: NewCron) -> Result<Cron> {
        let id = new_uuid7();
        retry!(self.create_cron_once(&cron, &id))
    }

    async fn get_cron(&self, cron_id: &str) -> Result<Option<Cron>> {
        retry!(self.get_cron_once(cron_id))
    }

    async fn update_cron(&self, cron_id: &str, patch: CronPatch) -> Result<Cron> {
        retry!(self.update_cron_once(cron_id, &patch))
    }

    async fn delete_cron(&self, cron_id: &str) -> Result<bool> {
        retry!(self.delete_cron_once(cron_id))
    }

    async fn search_crons(&self, query: &CronQuery) -> Result<Page<Cron>> {
        retry!(self.search_crons_once(query))
    }

    async fn count_crons(&self, filter: &CronFilter) -> Result<u64> {
        retry!(self.count_matching(cron_cols!(), "crons", cron_filter(self, filter)))
    }

    /// Returns the claimed crons as they were when due: `next_run_date` is the tick being
    /// fired (the stored row already points at the following one).
    async fn claim_due_crons_of(
        &self,
        now: DateTime<Utc>,
        limit: u64,
        kinds: CronKinds,
        next: &(dyn for<'c> Fn(&'c Cron) -> Option<DateTime<Utc>> + Send + Sync),
    ) -> Result<Vec<Cron>> {
        retry!(self.claim_due_crons_once(now, limit, kinds, next))
    }

    async fn cron_runs(&self, cron_id: &str, limit: u64, offset: u64) -> Result<Page<Run>> {
        retry!(self.cron_runs_once(cron_id, limit, offset))
    }

    async fn count_active_task_runs(&self) -> Result<u64> {
        retry!(self.count_active_task_runs_once())
    }
}
