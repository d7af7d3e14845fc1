//! The SQL implementation of [`Persistence`], shared by SQLite and Postgres.
//!
//! Statements use `$N` placeholders, integer-microsecond timestamps and JSON bound as text
//! (SQLite) or `jsonb` (Postgres), so almost all of them run unchanged on both databases; the
//! differences (row locks, `SKIP LOCKED`, JSON containment) go through [`Dialect`].
//!
//! Concurrency: SQLite serializes every write transaction on one writer connection
//! (`BEGIN IMMEDIATE`), so each operation is trivially atomic. Postgres runs at `READ
//! COMMITTED`; an operation that derives a thread's status first updates the run rows it
//! changes, then locks the thread row (`SELECT … FOR UPDATE`) and only then reads the
//! thread's active runs, so concurrent run changes on one thread serialize on that row and
//! the status is always computed from committed data. Transient errors are retried.

mod assistants;
mod batch;
mod chain;
mod checkpoints;
mod crons;
pub(crate) mod db;
mod items;
mod journal;
mod lite;
pub(crate) mod pack;
mod retention;
mod runs;
mod storage;
mod threads;
mod users;

use crate::cache::StateCache;
use crate::json::{json_equal, map_contains};
use crate::types::*;
use crate::{BackendConfig, OpenOptions, Persistence, Result};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use db::{Arg, Binds, Db, DbErr, DbResult, Dialect, PoolSettings, Row, Sql, Tx, retry};
use serde_json::{Map, Value};

/// Columns of `threads`, in the order every thread query selects them.
macro_rules! thread_cols {
    () => {
        "thread_id, created_at, updated_at, state_updated_at, metadata, status, config, \
         state_values, interrupts, error, has_next, ttl_minutes, ttl_strategy, expires_at"
    };
}
pub(crate) use thread_cols;

/// [`MAX_TTL_MINUTES`] as SQL text, for statements built with `concat!`.
macro_rules! max_ttl_minutes {
    () => {
        "52596000"
    };
}
pub(crate) use max_ttl_minutes;

macro_rules! run_cols {
    () => {
        "seq, run_id, thread_id, assistant_id, created_at, updated_at, status, metadata, \
         kwargs, multitask_strategy, attempt, available_at, cancel_requested, error, \
         stop_reason, owner, lease_expires_at"
    };
}
pub(crate) use run_cols;

/// The one backend type: a database plus the latest-state cache.
pub(crate) struct SqlStore {
    db: Db,
    cache: StateCache,
    /// Postgres: concurrent checkpoint inserts share statements (unused on SQLite, whose
    /// writes already share group transactions).
    inserts: batch::Batcher<checkpoints::Links, Vec<bool>>,
}

impl SqlStore {
    pub async fn open(config: &BackendConfig, options: &OpenOptions) -> Result<SqlStore> {
        let settings = PoolSettings {
            sqlite_readers: options.sqlite_readers,
            pg_max_connections: options.pg_max_connections,
            acquire_timeout: options.acquire_timeout,
        };
        let db = match config {
            BackendConfig::Sqlite { path } => Db::open_sqlite(path, &settings).await?,
            BackendConfig::Postgres { url, schema } => {
                Db::open_postgres(url, schema.as_deref(), &settings).await?
            }
        };
        Ok(SqlStore {
            db,
            cache: StateCache::new(options.cache_entries, options.cache_bytes),
            inserts: checkpoints::insert_batcher(),
        })
    }

    /// An existing database opened to read only (see [`Db::open_read_only`]).
    pub async fn open_read_only(config: &BackendConfig) -> Result<SqlStore> {
        Ok(SqlStore {
            db: Db::open_read_only(config).await?,
            cache: StateCache::new(0, 0),
            inserts: checkpoints::insert_batcher(),
        })
    }

    /// Closes the connections.
    pub async fn close_db(&self) {
        self.db.close().await;
    }

    fn dialect(&self) -> Dialect {
        self.db.dialect
    }

    async fn truncate_once(&self, what: &Truncate) -> DbResult<()> {
        let mut tx = self.db.begin().await?;
        if what.runs {
            tx.exec(Sql::new("DELETE FROM runs")).await?;
            tx.exec(Sql::new("DELETE FROM crons")).await?;
        }
        if what.threads {
            tx.exec(Sql::new("DELETE FROM threads")).await?;
            tx.exec(Sql::new("DELETE FROM run_events")).await?;
            tx.exec(Sql::new("DELETE FROM feedback")).await?;
        } else if what.runs {
            tx.exec(Sql::new(concat!(
                "UPDATE threads SET status = CASE WHEN error IS NOT NULL THEN 'error' ",
                "WHEN has_next THEN 'interrupted' ELSE 'idle' END"
            )))
            .await?;
        }
        if what.checkpointer {
            tx.exec(Sql::new("DELETE FROM checkpoints")).await?;
            tx.exec(Sql::new("DELETE FROM checkpoint_writes")).await?;
        }
        if what.assistants {
            let not_system = self.dialect().pick(
                "json_extract(metadata, '$.created_by') IS NOT 'system'",
                "metadata->>'created_by' IS DISTINCT FROM 'system'",
            );
            tx.exec(Sql::dynamic(
                format!(
                    "DELETE FROM assistant_versions WHERE assistant_id IN \
                     (SELECT assistant_id FROM assistants WHERE {not_system})"
                ),
                Vec::new(),
            ))
            .await?;
            tx.exec(Sql::dynamic(
                format!("DELETE FROM assistants WHERE {not_system}"),
                Vec::new(),
            ))
            .await?;
        }
        if what.store {
            tx.exec(Sql::new("DELETE FROM store_items")).await?;
        }
        tx.commit().await?;
        self.cache.clear();
        Ok(())
    }
}

#[async_trait]
impl Persistence for SqlStore {
    fn backend(&self) -> &'static str {
        match self.dialect() {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
        }
    }

    async fn ping(&self) -> bool {
        self.db.ping().await
    }

    async fn truncate(&self, what: &Truncate) -> Result<()> {
        retry!(self.truncate_once(what))
    }

    async fn close(&self) {
        self.db.close().await;
        self.cache.clear();
    }

    fn pool_stats(&self) -> PoolStats {
        self.db.pool_stats()
    }

    async fn maintain(&self) -> Maintenance {
        self.db.maintain().await
    }

    async fn shed_free_pages(&self) -> Maintenance {
        self.db.shed_free_pages().await
    }

    async fn queue_stats(&self) -> Result<QueueStats> {
        let pending = self
            .db
            .read_opt(Sql::new(
                "SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM runs WHERE status = 'pending'",
            ))
            .await
            .map_err(db::DbErr::into_store)?;
        let running = self
            .db
            .read_opt(Sql::new(
                "SELECT COUNT(*) AS n FROM runs WHERE status = 'running'",
            ))
            .await
            .map_err(db::DbErr::into_store)?;
        let count = |r: &Option<Row>| -> Result<u64> {
            match r {
                Some(r) => {
                    Ok(u64::try_from(r.int("n").map_err(db::DbErr::into_store)?).unwrap_or(0))
                }
                None => Ok(0),
            }
        };
        let oldest = match &pending {
            Some(r) => r.opt_int("oldest").map_err(db::DbErr::into_store)?,
            None => None,
        };
        let oldest_pending_seconds = oldest
            .map(|micros| {
                let age = crate::ids::to_micros(Utc::now()) - micros;
                (age.max(0) as f64) / 1e6
            })
            .unwrap_or(0.0);
        Ok(QueueStats {
            pending: count(&pending)?,
            running: count(&running)?,
            oldest_pending_seconds,
        })
    }

    /// Postgres: `LISTEN` on [`CANCEL_CHANNEL`] and [`PROGRESS_CHANNEL`] (one connection per
    /// process; it reconnects by itself, and a notification missed meanwhile is made up for
    /// by heartbeats and the relays' slow poll).
    async fn signals(&self) -> Option<crate::Signals> {
        use futures::StreamExt;
        let pool = self.db.pg_pool()?;
        let mut listener = match sqlx::postgres::PgListener::connect_with(pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN for other nodes' signals; heartbeats and polls carry them");
                return None;
            }
        };
        if let Err(e) = listener
            .listen_all([CANCEL_CHANNEL, PROGRESS_CHANNEL])
            .await
        {
            tracing::warn!(error = %e, "cannot LISTEN for other nodes' signals; heartbeats and polls carry them");
            return None;
        }
        let stream = listener
            .into_stream()
            .filter_map(|n| async move { parse_signal(&n.ok()?) });
        Some(stream.boxed())
    }

    /// One `NOTIFY` per run, in one statement (one round trip however many runs).
    async fn announce_progress(&self, run_ids: &[String]) -> Result<()> {
        let Some(pool) = self.db.pg_pool() else {
            return Ok(());
        };
        if run_ids.is_empty() {
            return Ok(());
        }
        sqlx::query("SELECT pg_notify($1, r) FROM unnest($2::text[]) AS r")
            .bind(PROGRESS_CHANNEL)
            .bind(run_ids)
            .execute(pool)
            .await
            .map_err(|e| DbErr::from(e).into_store())?;
        Ok(())
    }

    /// SQLite: one transaction (see `runs.rs`); Postgres: the two calls in turn.
    async fn finish_run_with_journal(
        &self,
        run_id: &str,
        worker_id: &str,
        outcome: RunFinish,
        journal: Option<crate::JournalAppend<'_>>,
    ) -> crate::FinishedWithJournal {
        self.finish_with_journal(run_id, worker_id, outcome, journal)
            .await
    }
}

fn parse_signal(n: &sqlx::postgres::PgNotification) -> Option<crate::Signal> {
    match n.channel() {
        CANCEL_CHANNEL => {
            let (run_id, action) = n.payload().rsplit_once(':')?;
            Some(crate::Signal::Cancel {
                run_id: run_id.to_string(),
                action: parse_cancel_action(action)?,
            })
        }
        PROGRESS_CHANNEL => Some(crate::Signal::Progress {
            run_id: n.payload().to_string(),
        }),
        _ => None,
    }
}

// ------------------------------------------------------------------------ conversions

fn parse_enum<T>(col: &str, text: &str, parse: impl Fn(&str) -> Option<T>) -> DbResult<T> {
    parse(text).ok_or_else(|| DbErr::corrupt(format!("column {col}: unknown value {text:?}")))
}

pub(crate) fn prune_strategy_str(s: PruneStrategy) -> &'static str {
    match s {
        PruneStrategy::Delete => "delete",
        PruneStrategy::KeepLatest => "keep_latest",
    }
}

fn parse_prune_strategy(s: &str) -> Option<PruneStrategy> {
    match s {
        "delete" => Some(PruneStrategy::Delete),
        "keep_latest" => Some(PruneStrategy::KeepLatest),
        _ => None,
    }
}

fn parse_multitask(s: &str) -> Option<MultitaskStrategy> {
    match s {
        "reject" => Some(MultitaskStrategy::Reject),
        "interrupt" => Some(MultitaskStrategy::Interrupt),
        "rollback" => Some(MultitaskStrategy::Rollback),
        "enqueue" => Some(MultitaskStrategy::Enqueue),
        _ => None,
    }
}

/// The Postgres channel cancellation requests of running runs are announced on, as
/// `run_id:action`.
pub(crate) const CANCEL_CHANNEL: &str = "fawn_run_cancel";

/// The Postgres channel runs' progress is announced on (the run id): a node relaying a run
/// that another node executes looks at the store again when it hears of it.
pub(crate) const PROGRESS_CHANNEL: &str = "fawn_run_progress";

pub(crate) fn cancel_action_str(a: CancelAction) -> &'static str {
    match a {
        CancelAction::Interrupt => "interrupt",
        CancelAction::Rollback => "rollback",
    }
}

pub(crate) fn parse_cancel_action(s: &str) -> Option<CancelAction> {
    match s {
        "interrupt" => Some(CancelAction::Interrupt),
        "rollback" => Some(CancelAction::Rollback),
        _ => None,
    }
}

/// A TTL in minutes as stored, or `None` when it is absent or unusable: out of range
/// (written before TTLs were bounded) or not a number. Such a value is logged, never an
/// error, so that one bad row cannot break a listing.
fn stored_ttl_minutes(r: &Row, col: &str, owner: &str) -> Option<f64> {
    match r.opt_float(col) {
        Ok(Some(m)) if valid_ttl_minutes(m) => Some(m),
        Ok(Some(m)) => {
            tracing::warn!(%owner, ttl_minutes = m, "stored TTL out of range; read as none");
            None
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(%owner, error = ?e, "stored TTL unreadable; read as none");
            None
        }
    }
}

/// An expiry timestamp as stored, or `None` when it is absent or unusable (not an integer,
/// or outside the dates a timestamp can hold); logged like [`stored_ttl_minutes`].
pub(crate) fn stored_expiry(r: &Row, col: &str, owner: &str) -> Option<DateTime<Utc>> {
    match r.opt_int(col) {
        Ok(Some(us)) => {
            let t = DateTime::from_timestamp_micros(us);
            if t.is_none() {
                tracing::warn!(%owner, expires_at = us, "stored expiry out of range; read as none");
            }
            t
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(%owner, error = ?e, "stored expiry unreadable; read as none");
            None
        }
    }
}

pub(crate) fn thread_from_row(r: &Row) -> DbResult<Thread> {
    let thread_id = r.text("thread_id")?;
    let ttl = match stored_ttl_minutes(r, "ttl_minutes", &thread_id) {
        Some(minutes) => Some(ThreadTtl {
            minutes,
            strategy: match r.opt_text("ttl_strategy")? {
                Some(s) => parse_enum("ttl_strategy", &s, parse_prune_strategy)?,
                None => PruneStrategy::Delete,
            },
        }),
        None => None,
    };
    // Without a usable TTL the thread does not expire.
    let expires_at = match ttl {
        Some(_) => stored_expiry(r, "expires_at", &thread_id),
        None => None,
    };
    Ok(Thread {
        thread_id,
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
        state_updated_at: r.ts("state_updated_at")?,
        metadata: r.map("metadata")?,
        status: parse_enum("status", &r.text("status")?, ThreadStatus::parse)?,
        config: r.map("config")?,
        values: r.opt_json("state_values")?,
        interrupts: r.map("interrupts")?,
        error: r.opt_json("error")?,
        ttl,
        expires_at,
    })
}

pub(crate) fn run_from_row(r: &Row) -> DbResult<Run> {
    Ok(Run {
        run_id: r.text("run_id")?,
        thread_id: r.text("thread_id")?,
        assistant_id: r.text("assistant_id")?,
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
        status: parse_enum("status", &r.text("status")?, RunStatus::parse)?,
        metadata: r.map("metadata")?,
        kwargs: r.map("kwargs")?,
        multitask_strategy: parse_enum(
            "multitask_strategy",
            &r.text("multitask_strategy")?,
            parse_multitask,
        )?,
        attempt: u32::try_from(r.int("attempt")?).unwrap_or(u32::MAX),
        available_at: r.ts("available_at")?,
        cancel_requested: match r.opt_text("cancel_requested")? {
            Some(s) => Some(parse_enum("cancel_requested", &s, parse_cancel_action)?),
            None => None,
        },
        error: r.opt_json("error")?,
        stop_reason: r.opt_text("stop_reason")?,
        owner: r.opt_text("owner")?,
        lease_expires_at: r.opt_ts("lease_expires_at")?,
    })
}

// ---------------------------------------------------------------------------- filters

/// A WHERE clause under construction, with the checks SQL could not express (SQLite JSON
/// containment of nested values) left for Rust.
pub(crate) struct Where {
    pub dialect: Dialect,
    pub binds: Binds,
    clauses: Vec<String>,
    /// `(column, filter)`: the row's JSON in `column` must contain `filter`.
    post: Vec<(&'static str, Map<String, Value>)>,
    /// `(column, filter)`: each key of `filter` equals that field of the row's JSON.
    post_eq: Vec<(&'static str, Map<String, Value>)>,
}

impl Where {
    pub fn new(dialect: Dialect) -> Where {
        Where {
            dialect,
            binds: Binds::new(),
            clauses: Vec::new(),
            post: Vec::new(),
            post_eq: Vec::new(),
        }
    }

    /// Adds a fixed SQL condition.
    pub fn clause(&mut self, sql: impl Into<String>) {
        self.clauses.push(sql.into());
    }

    /// `column = value`.
    pub fn eq(&mut self, column: &str, value: impl Into<Arg>) {
        let p = self.binds.push(value);
        self.clauses.push(format!("{column} = {p}"));
    }

    /// Equality of top-level fields: `column->key = value` for every key of `filter`.
    pub fn fields_equal(&mut self, column: &'static str, filter: &Map<String, Value>) {
        if filter.is_empty() {
            return;
        }
        match self.dialect {
            Dialect::Postgres => {
                for (key, value) in filter {
                    // Stored keys had U+0000 replaced (jsonb cannot hold it, see
                    // `db::jsonb_safe`); so does the key looked up, which is bound as text
                    // (which cannot hold it either).
                    let k = self.binds.push(key.replace('\0', "\u{FFFD}"));
                    let v = self.binds.push(Arg::json(value));
                    self.clauses.push(format!("{column} -> {k} = {v}"));
                }
            }
            Dialect::Sqlite => {
                // For scalars, containment at a key is equality; nested values get an exact
                // check in Rust.
                if self.sqlite_key_clauses(column, filter, false) {
                    self.post_eq.push((column, filter.clone()));
                }
            }
        }
    }

    /// JSON containment: the object in `column` contains `filter` (jsonb `@>`).
    pub fn contains(&mut self, column: &'static str, filter: &Map<String, Value>) {
        if filter.is_empty() {
            return;
        }
        match self.dialect {
            Dialect::Postgres => {
                let p = self.binds.push(Arg::json_map(filter));
                self.clauses.push(format!("{column} @> {p}"));
            }
            Dialect::Sqlite => {
                if self.sqlite_key_clauses(column, filter, false) {
                    self.post.push((column, filter.clone()));
                }
            }
        }
    }

    /// [`Where::contains`] on a column that SQLite may store packed (see `pack`): SQL
    /// cannot look into a packed row, so it lets those through and Rust checks every row.
    pub fn contains_packed(&mut self, column: &'static str, filter: &Map<String, Value>) {
        if filter.is_empty() || self.dialect == Dialect::Postgres {
            return self.contains(column, filter);
        }
        self.sqlite_key_clauses(column, filter, true);
        self.post.push((column, filter.clone()));
    }

    /// SQLite conditions on each top-level key of `filter`: type and value for scalars, type
    /// only for objects and arrays (`packed`: a packed row passes them all). Returns true
    /// when Rust must finish the check.
    fn sqlite_key_clauses(
        &mut self,
        column: &'static str,
        filter: &Map<String, Value>,
        packed: bool,
    ) -> bool {
        // Top-level scalars are checked in SQL; nested objects and arrays get a type
        // check in SQL and the full containment check in Rust.
        let mut post = false;
        for (key, value) in filter {
            // A key is quoted into a JSON path: one that quoting cannot carry (a quote, a
            // backslash, a NUL, which ends the path as SQLite reads it) is left to Rust.
            if key.contains(['"', '\\']) || key.chars().any(char::is_control) {
                post = true;
                continue;
            }
            let path = self.binds.push(format!("$.\"{key}\""));
            let ty = format!("json_type({column}, {path})");
            let clause = match value {
                Value::String(s) => {
                    let p = self.binds.push(s.as_str());
                    format!("({ty} = 'text' AND json_extract({column}, {path}) = {p})")
                }
                Value::Number(n) => {
                    let p = match n.as_i64() {
                        Some(i) => self.binds.push(i),
                        None => {
                            post = true;
                            self.binds.push(n.as_f64().unwrap_or(f64::NAN))
                        }
                    };
                    format!(
                        "({ty} IN ('integer', 'real') AND json_extract({column}, {path}) = {p})"
                    )
                }
                Value::Bool(true) => format!("{ty} = 'true'"),
                Value::Bool(false) => format!("{ty} = 'false'"),
                Value::Null => format!("{ty} = 'null'"),
                Value::Object(_) => {
                    post = true;
                    format!("{ty} = 'object'")
                }
                Value::Array(_) => {
                    post = true;
                    format!("{ty} = 'array'")
                }
            };
            let clause = if packed {
                // CASE, not OR: the JSON functions must never see a packed BLOB.
                format!("(CASE WHEN typeof({column}) = 'blob' THEN 1 ELSE {clause} END)")
            } else {
                clause
            };
            self.clauses.push(clause);
        }
        post
    }

    /// `column IN (…)`; an empty list matches nothing.
    pub fn in_list(&mut self, column: &str, values: &[String]) {
        if values.is_empty() {
            self.clauses.push("1 = 0".to_string());
            return;
        }
        let ps: Vec<String> = values.iter().map(|v| self.binds.push(v)).collect();
        self.clauses
            .push(format!("{column} IN ({})", ps.join(", ")));
    }

    pub fn sql(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.clauses.join(" AND "))
        }
    }

    /// Whether some conditions are left for [`Where::passes`].
    pub fn has_post(&self) -> bool {
        !self.post.is_empty() || !self.post_eq.is_empty()
    }

    fn passes(&self, row: &Row) -> DbResult<bool> {
        for (column, filter) in &self.post {
            if !map_contains(row.opt_json(column)?.as_ref(), filter) {
                return Ok(false);
            }
        }
        for (column, filter) in &self.post_eq {
            let doc = row.opt_json(column)?;
            let ok = filter.iter().all(|(k, v)| {
                doc.as_ref()
                    .and_then(|d| d.get(k))
                    .is_some_and(|actual| json_equal(actual, v))
            });
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// `LIMIT`/`OFFSET` for a page (`limit == 0`: no limit).
fn limit_sql(dialect: Dialect, binds: &mut Binds, limit: u64, offset: u64) -> String {
    let mut s = String::new();
    if limit != 0 {
        let p = binds.push(clamp_i64(limit));
        s.push_str(&format!(" LIMIT {p}"));
    } else if offset != 0 && dialect == Dialect::Sqlite {
        // SQLite has no OFFSET without LIMIT; a negative limit means none.
        s.push_str(" LIMIT -1");
    }
    if offset != 0 {
        let p = binds.push(clamp_i64(offset));
        s.push_str(&format!(" OFFSET {p}"));
    }
    s
}

pub(crate) fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `SELECT {cols} FROM {from} … ORDER BY {order}`.
pub(crate) struct Select<'a> {
    pub cols: &'a str,
    pub from: &'a str,
    pub order: &'a str,
}

impl SqlStore {
    /// Runs `SELECT {cols} FROM {from}{where} ORDER BY {order}` for one page, with the
    /// total number of matches.
    async fn search_page<T>(
        &self,
        select: Select<'_>,
        mut filter: Where,
        limit: u64,
        offset: u64,
        decode: fn(&Row) -> DbResult<T>,
    ) -> DbResult<Page<T>> {
        let Select { cols, from, order } = select;
        let where_sql = filter.sql();
        if filter.has_post() {
            // Some conditions are checked in Rust: read every candidate, then page.
            let text = format!("SELECT {cols} FROM {from}{where_sql} ORDER BY {order}");
            let rows = self
                .db
                .read_all(Sql::dynamic(text, std::mem::take(&mut filter.binds.args)))
                .await?;
            let mut matched = Vec::new();
            for row in &rows {
                if filter.passes(row)? {
                    matched.push(decode(row)?);
                }
            }
            let total = matched.len() as u64;
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(matched.len());
            let mut items = matched.split_off(start);
            if limit != 0 {
                items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            }
            return Ok(Page { items, total });
        }
        let count_args = filter.binds.args.clone();
        let page = limit_sql(filter.dialect, &mut filter.binds, limit, offset);
        let text = format!(
            "SELECT {cols}, COUNT(*) OVER () AS total_count FROM {from}{where_sql} \
             ORDER BY {order}{page}"
        );
        let rows = self
            .db
            .read_all(Sql::dynamic(text, filter.binds.args))
            .await?;
        let total = match rows.first() {
            Some(r) => u64::try_from(r.int("total_count")?).unwrap_or(0),
            None if offset > 0 => {
                let text = format!("SELECT COUNT(*) AS n FROM {from}{where_sql}");
                let row = self.db.read_opt(Sql::dynamic(text, count_args)).await?;
                match row {
                    Some(r) => u64::try_from(r.int("n")?).unwrap_or(0),
                    None => 0,
                }
            }
            None => 0,
        };
        let items = rows.iter().map(decode).collect::<DbResult<Vec<T>>>()?;
        Ok(Page { items, total })
    }

    /// The number of rows matching `filter`.
    async fn count_matching(&self, cols: &str, from: &str, filter: Where) -> DbResult<u64> {
        if !filter.has_post() {
            let text = format!("SELECT COUNT(*) AS n FROM {from}{}", filter.sql());
            let row = self
                .db
                .read_opt(Sql::dynamic(text, filter.binds.args))
                .await?;
            return Ok(match row {
                Some(r) => u64::try_from(r.int("n")?).unwrap_or(0),
                None => 0,
            });
        }
        let text = format!("SELECT {cols} FROM {from}{}", filter.sql());
        let rows = self
            .db
            .read_all(Sql::dynamic(text, filter.binds.args.clone()))
            .await?;
        let mut n = 0;
        for row in &rows {
            if filter.passes(row)? {
                n += 1;
            }
        }
        Ok(n)
    }
}

/// `ASC` / `DESC`.
pub(crate) fn dir(order: SortOrder) -> &'static str {
    match order {
        SortOrder::Asc => "ASC",
        SortOrder::Desc => "DESC",
    }
}

/// The derived status of a thread, as one UPDATE: busy while a run is pending or
/// running, else error / interrupted / idle from what its last run left.
pub(crate) const REFRESH_THREAD_STATUS: &str = concat!(
    "UPDATE threads SET status = CASE ",
    "WHEN EXISTS (SELECT 1 FROM runs WHERE runs.thread_id = threads.thread_id ",
    "AND runs.status IN ('pending', 'running')) THEN 'busy' ",
    "WHEN error IS NOT NULL THEN 'error' ",
    "WHEN has_next THEN 'interrupted' ",
    "ELSE 'idle' END ",
    "WHERE thread_id = $1"
);

/// Locks a thread row for the rest of the transaction (Postgres; SQLite's writer already
/// holds the database). Returns false when the thread does not exist.
pub(crate) async fn lock_thread(tx: &mut Tx, dialect: Dialect, thread_id: &str) -> DbResult<bool> {
    let sql = dialect.pick(
        "SELECT thread_id FROM threads WHERE thread_id = $1",
        "SELECT thread_id FROM threads WHERE thread_id = $1 FOR UPDATE",
    );
    Ok(tx.opt(Sql::new(sql).bind(thread_id)).await?.is_some())
}

/// Recomputes a thread's status inside `tx` (after [`lock_thread`]).
pub(crate) async fn refresh_thread_status(tx: &mut Tx, thread_id: &str) -> DbResult<()> {
    tx.exec(Sql::new(REFRESH_THREAD_STATUS).bind(thread_id))
        .await?;
    Ok(())
}

pub(crate) fn thread_not_found(thread_id: &str) -> DbErr {
    DbErr::not_found(format!("Thread with ID {thread_id} not found"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sql_ttl_bound_is_the_constant() {
        assert_eq!(
            max_ttl_minutes!().parse::<f64>().ok(),
            Some(crate::MAX_TTL_MINUTES)
        );
        assert!(crate::valid_ttl_minutes(crate::MAX_TTL_MINUTES));
        assert!(!crate::valid_ttl_minutes(crate::MAX_TTL_MINUTES + 1.0));
    }
}
