//! The thin layer between the stores and the drivers (sqlx for Postgres, rusqlite for
//! SQLite, see [`lite`]): one query representation ([`Sql`]: text with `$N` placeholders
//! plus owned arguments) that runs unchanged on both, rows that decode the same way from
//! both, transactions, pools, migrations and the retry of transient failures.
//!
//! Both schemas store timestamps as integer microseconds and JSON as TEXT (SQLite) or
//! JSONB (Postgres), so most statements are shared; the few that differ are chosen with
//! [`Dialect::pick`].

use super::lite::{self, Lite, LiteRow, LiteTx};
use crate::{StoreError, types::JsonMap};
use chrono::{DateTime, Utc};
use serde_json::Value;
use serde_json::value::RawValue;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{
    AssertSqlSafe, Database, Decode, PgPool, Postgres, Row as _, SqlStr, Transaction, Type,
};
use std::borrow::Cow;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Transient failures (serialization failures, deadlocks, dropped connections) are retried
/// this many times before the error is returned.
pub(crate) const MAX_RETRIES: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The SQLite or the Postgres spelling of a statement.
    pub fn pick(self, sqlite: &'static str, postgres: &'static str) -> &'static str {
        match self {
            Dialect::Sqlite => sqlite,
            Dialect::Postgres => postgres,
        }
    }
}

// ------------------------------------------------------------------------------ errors

/// An internal error: either a store error already decided, or a database error that may
/// still be retried or mapped (unique violations) by the caller.
#[derive(Debug)]
pub(crate) enum DbErr {
    Store(StoreError),
    /// Postgres (through sqlx).
    Sql(sqlx::Error),
    /// SQLite (through rusqlite).
    Lite(rusqlite::Error),
    /// The SQLite group transaction this write was part of failed to commit (see
    /// [`lite`]), or the Postgres batch it was part of failed or was abandoned (see
    /// [`super::batch`]); the write may be retried.
    GroupFailed(String),
    /// A read made of several statements found a row gone that an earlier statement of it
    /// returned (a rollback or delete committed in between); the read may be retried.
    Vanished(String),
}

pub(crate) type DbResult<T> = std::result::Result<T, DbErr>;

impl From<sqlx::Error> for DbErr {
    fn from(e: sqlx::Error) -> Self {
        DbErr::Sql(e)
    }
}

impl From<StoreError> for DbErr {
    fn from(e: StoreError) -> Self {
        DbErr::Store(e)
    }
}

impl DbErr {
    pub fn not_found(msg: impl Into<String>) -> DbErr {
        DbErr::Store(StoreError::NotFound(msg.into()))
    }

    pub fn conflict(msg: impl Into<String>) -> DbErr {
        DbErr::Store(StoreError::Conflict(msg.into()))
    }

    pub fn invalid(msg: impl Into<String>) -> DbErr {
        DbErr::Store(StoreError::Invalid(msg.into()))
    }

    pub fn corrupt(msg: impl Into<String>) -> DbErr {
        DbErr::Store(StoreError::Corrupt(msg.into()))
    }

    /// The SQLSTATE of a Postgres error.
    pub fn pg_code(&self) -> Option<String> {
        match self {
            DbErr::Sql(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()),
            _ => None,
        }
    }

    pub fn is_unique_violation(&self) -> bool {
        match self {
            DbErr::Sql(e) => e
                .as_database_error()
                .is_some_and(|d| d.is_unique_violation()),
            DbErr::Lite(e) => lite::is_unique_violation(e),
            DbErr::Store(_) | DbErr::GroupFailed(_) | DbErr::Vanished(_) => false,
        }
    }

    /// Worth retrying the whole operation: serialization failure, deadlock, a connection
    /// that went away, or SQLite being busy.
    pub fn is_transient(&self) -> bool {
        let e = match self {
            DbErr::Sql(e) => e,
            DbErr::Lite(e) => return lite::is_transient(e),
            DbErr::GroupFailed(_) | DbErr::Vanished(_) => return true,
            DbErr::Store(_) => return false,
        };
        match e {
            sqlx::Error::Io(_) => true,
            sqlx::Error::Database(db) => {
                let code = db.code();
                let code = code.as_deref().unwrap_or_default();
                matches!(
                    code,
                    // Postgres: serialization_failure, deadlock_detected, connection
                    // exceptions, admin shutdown.
                    "40001" | "40P01" | "57P01" | "57P02" | "57P03"
                ) || code.starts_with("08")
            }
            _ => false,
        }
    }

    pub fn into_store(self) -> StoreError {
        match self {
            DbErr::Store(e) => e,
            DbErr::Sql(sqlx::Error::RowNotFound) => {
                StoreError::Database("a row the operation needed disappeared".to_string())
            }
            DbErr::Sql(sqlx::Error::Database(db)) if is_bad_data(db.code().as_deref()) => {
                StoreError::Invalid(format!(
                    "the database cannot store this value: {}",
                    db.message()
                ))
            }
            DbErr::Sql(e) => StoreError::Database(e.to_string()),
            DbErr::Lite(rusqlite::Error::QueryReturnedNoRows) => {
                StoreError::Database("a row the operation needed disappeared".to_string())
            }
            DbErr::Lite(e) if lite::is_too_big(&e) => {
                StoreError::Invalid(format!("the database cannot store this value: {e}"))
            }
            DbErr::Lite(e) => StoreError::Database(e.to_string()),
            DbErr::GroupFailed(msg) => {
                StoreError::Database(format!("the write could not be committed: {msg}"))
            }
            DbErr::Vanished(msg) => {
                StoreError::Database(format!("the data changed while it was read: {msg}"))
            }
        }
    }
}

/// Deterministic refusals of a value: Postgres data exceptions (class 22) and limits
/// (54000). (SQLite's `TOOBIG` is recognized in [`lite`].)
fn is_bad_data(code: Option<&str>) -> bool {
    code.is_some_and(|c| c.starts_with("22") || c == "54000")
}

/// Runs `$op` (an expression producing a fresh future each time it is evaluated) and
/// retries it on transient database errors, at most [`MAX_RETRIES`] times. Evaluates to
/// `crate::Result<T>`.
macro_rules! retry {
    ($op:expr) => {{
        let mut attempt: u32 = 0;
        loop {
            match $op.await {
                Err(e) if attempt < $crate::backend::db::MAX_RETRIES && e.is_transient() => {
                    attempt += 1;
                    tracing::debug!(attempt, error = ?e, "retrying a transient database error");
                    tokio::time::sleep(std::time::Duration::from_millis(4u64 << attempt)).await;
                }
                other => break other.map_err($crate::backend::db::DbErr::into_store),
            }
        }
    }};
}
pub(crate) use retry;

// ---------------------------------------------------------------------------- queries

/// One bound argument. Every variant carries an `Option` so that NULLs keep their type
/// (Postgres checks parameter types even for NULL).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Arg {
    Text(Option<String>),
    Int(Option<i64>),
    Float(Option<f64>),
    Bool(Option<bool>),
    /// JSON text; bound as TEXT on SQLite and JSONB on Postgres.
    Json(Option<String>),
    /// Bytes (a packed value, SQLite only: see `pack`).
    Blob(Option<Vec<u8>>),
    /// Postgres only: one column of many rows, bound as an array (`text[]`, `int8[]`,
    /// `jsonb[]`) for `unnest`, so a multi-row statement's text does not depend on how many
    /// rows it carries.
    Texts(Vec<Option<String>>),
    Ints(Vec<Option<i64>>),
    Jsons(Vec<Option<String>>),
}

impl Arg {
    /// An empty column of `like`'s type (see [`Arg::Texts`]).
    pub fn column_of(like: &Arg) -> DbResult<Arg> {
        match like {
            Arg::Text(_) => Ok(Arg::Texts(Vec::new())),
            Arg::Int(_) => Ok(Arg::Ints(Vec::new())),
            Arg::Json(_) => Ok(Arg::Jsons(Vec::new())),
            other => Err(DbErr::invalid(format!("no array column for {other:?}"))),
        }
    }

    /// Appends `value` (one row's) to this column.
    pub fn push_row(&mut self, value: Arg) -> DbResult<()> {
        match (self, value) {
            (Arg::Texts(col), Arg::Text(v)) => col.push(v),
            (Arg::Ints(col), Arg::Int(v)) => col.push(v),
            (Arg::Jsons(col), Arg::Json(v)) => col.push(v),
            (col, v) => {
                return Err(DbErr::invalid(format!(
                    "a row's {v:?} does not fit the column {col:?}"
                )));
            }
        }
        Ok(())
    }

    /// The Postgres array type of a column (for a cast in `unnest`).
    pub fn pg_array_type(&self) -> &'static str {
        match self {
            Arg::Ints(_) => "int8[]",
            Arg::Jsons(_) => "jsonb[]",
            _ => "text[]",
        }
    }

    pub fn json(v: &Value) -> Arg {
        Arg::Json(Some(json_text(v)))
    }

    pub fn json_map(v: &JsonMap) -> Arg {
        Arg::Json(Some(
            serde_json::to_string(v).unwrap_or_else(|_| "{}".to_string()),
        ))
    }

    pub fn opt_json(v: Option<&Value>) -> Arg {
        Arg::Json(v.map(json_text))
    }

    pub fn ts(t: DateTime<Utc>) -> Arg {
        Arg::Int(Some(crate::ids::to_micros(t)))
    }

    pub fn opt_ts(t: Option<DateTime<Utc>>) -> Arg {
        Arg::Int(t.map(crate::ids::to_micros))
    }

    /// A large text value of a column no SQL looks into: on SQLite deflated (a BLOB behind
    /// the pack prefix, see `pack`) when that pays, else the text. Every `Row` text and
    /// JSON accessor reads both.
    pub fn packed_text(dialect: Dialect, text: String) -> Arg {
        match packed(dialect, &text) {
            Some(bytes) => Arg::Blob(Some(bytes)),
            None => Arg::Text(Some(text)),
        }
    }

    /// [`Arg::packed_text`] for a JSON column (JSONB on Postgres, which compresses large
    /// values itself).
    pub fn packed_json(dialect: Dialect, text: String) -> Arg {
        match packed(dialect, &text) {
            Some(bytes) => Arg::Blob(Some(bytes)),
            None => Arg::Json(Some(text)),
        }
    }

    /// [`Arg::packed_json`] of an optional value.
    pub fn opt_packed_json(dialect: Dialect, v: Option<&Value>) -> Arg {
        match v {
            Some(v) => Arg::packed_json(dialect, json_text(v)),
            None => Arg::Json(None),
        }
    }
}

/// `v` as compact JSON text. The same text as `v.to_string()`, written straight into a
/// buffer: `Display` goes through the formatter, one dynamic call per token.
pub(crate) fn json_text(v: &Value) -> String {
    // A `Value` always serializes (its map keys are strings); were it not to, `Display`.
    serde_json::to_string(v).unwrap_or_else(|_| v.to_string())
}

/// `text` packed, on SQLite only.
fn packed(dialect: Dialect, text: &str) -> Option<Vec<u8>> {
    match dialect {
        Dialect::Sqlite => super::pack::pack(text),
        Dialect::Postgres => None,
    }
}

impl From<&str> for Arg {
    fn from(v: &str) -> Arg {
        Arg::Text(Some(v.to_string()))
    }
}
impl From<&String> for Arg {
    fn from(v: &String) -> Arg {
        Arg::Text(Some(v.clone()))
    }
}
impl From<String> for Arg {
    fn from(v: String) -> Arg {
        Arg::Text(Some(v))
    }
}
impl From<Option<String>> for Arg {
    fn from(v: Option<String>) -> Arg {
        Arg::Text(v)
    }
}
impl From<Option<&str>> for Arg {
    fn from(v: Option<&str>) -> Arg {
        Arg::Text(v.map(str::to_string))
    }
}
impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::Int(Some(v))
    }
}
impl From<Option<i64>> for Arg {
    fn from(v: Option<i64>) -> Arg {
        Arg::Int(v)
    }
}
impl From<bool> for Arg {
    fn from(v: bool) -> Arg {
        Arg::Bool(Some(v))
    }
}
impl From<Option<f64>> for Arg {
    fn from(v: Option<f64>) -> Arg {
        Arg::Float(v)
    }
}
impl From<f64> for Arg {
    fn from(v: f64) -> Arg {
        Arg::Float(Some(v))
    }
}

/// A statement and its arguments. Static text is the norm; dynamic text (search filters)
/// is assembled only from fixed fragments and `$N` placeholders, never from input.
#[derive(Debug)]
pub(crate) struct Sql {
    text: Cow<'static, str>,
    args: Vec<Arg>,
}

impl Sql {
    pub fn new(text: &'static str) -> Sql {
        Sql {
            text: Cow::Borrowed(text),
            args: Vec::new(),
        }
    }

    pub fn dynamic(text: String, args: Vec<Arg>) -> Sql {
        Sql {
            text: Cow::Owned(text),
            args,
        }
    }

    pub fn bind(mut self, arg: impl Into<Arg>) -> Sql {
        self.args.push(arg.into());
        self
    }

    pub fn arg(mut self, arg: Arg) -> Sql {
        self.args.push(arg);
        self
    }

    fn sql_str(text: Cow<'static, str>) -> SqlStr {
        match text {
            Cow::Borrowed(s) => SqlStr::from_static(s),
            Cow::Owned(s) => sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(s)),
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn args(&self) -> &[Arg] {
        &self.args
    }

    pub fn into_args(self) -> Vec<Arg> {
        self.args
    }

    fn postgres(
        self,
    ) -> DbResult<sqlx::query::Query<'static, Postgres, <Postgres as Database>::Arguments>> {
        let mut q = sqlx::query::<Postgres>(Sql::sql_str(self.text));
        for a in self.args {
            q = match a {
                Arg::Text(v) => q.bind(v),
                Arg::Int(v) => q.bind(v),
                Arg::Float(v) => q.bind(v),
                Arg::Bool(v) => q.bind(v),
                Arg::Blob(v) => q.bind(v),
                Arg::Json(v) => q.bind(v.map(pg_json).transpose()?),
                Arg::Texts(v) => q.bind(v),
                Arg::Ints(v) => q.bind(v),
                Arg::Jsons(v) => q.bind(
                    v.into_iter()
                        .map(|j| j.map(pg_json).transpose())
                        .collect::<DbResult<Vec<_>>>()?,
                ),
            };
        }
        Ok(q)
    }
}

/// JSON text as Postgres receives it (see [`jsonb_safe`]).
fn pg_json(text: String) -> DbResult<sqlx::types::Json<Box<RawValue>>> {
    RawValue::from_string(jsonb_safe(text))
        .map(sqlx::types::Json)
        .map_err(|e| DbErr::invalid(format!("invalid JSON: {e}")))
}

/// Postgres `jsonb` cannot hold U+0000 in strings; such characters (which an LLM can
/// produce) are stored as U+FFFD instead of failing the write. Checkpoint payloads are
/// TEXT and keep them exactly.
fn jsonb_safe(text: String) -> String {
    if !text.contains("\\u0000") {
        return text;
    }
    fn scrub(v: &mut Value) {
        match v {
            Value::String(s) if s.contains('\0') => *s = s.replace('\0', "\u{FFFD}"),
            Value::Array(items) => items.iter_mut().for_each(scrub),
            Value::Object(map) => {
                let keys: Vec<String> = map.keys().filter(|k| k.contains('\0')).cloned().collect();
                for k in keys {
                    if let Some(val) = map.remove(&k) {
                        map.insert(k.replace('\0', "\u{FFFD}"), val);
                    }
                }
                map.values_mut().for_each(scrub);
            }
            _ => {}
        }
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(mut v) => {
            scrub(&mut v);
            v.to_string()
        }
        Err(_) => text,
    }
}

/// Builds the `$N` placeholders of a dynamic statement as its arguments are added.
#[derive(Debug, Default)]
pub(crate) struct Binds {
    pub args: Vec<Arg>,
}

impl Binds {
    pub fn new() -> Binds {
        Binds::default()
    }

    /// Adds an argument and returns its placeholder.
    pub fn push(&mut self, arg: impl Into<Arg>) -> String {
        self.args.push(arg.into());
        format!("${}", self.args.len())
    }
}

// -------------------------------------------------------------------------------- rows

/// A result row from either database.
pub(crate) enum Row {
    Lite(LiteRow),
    Pg(PgRow),
}

impl Row {
    fn pg<T>(r: &PgRow, col: &str) -> DbResult<T>
    where
        T: for<'r> Decode<'r, Postgres> + Type<Postgres>,
    {
        r.try_get::<T, _>(col)
            .map_err(|e| DbErr::corrupt(format!("column {col}: {e}")))
    }

    fn required<T>(col: &str, v: Option<T>) -> DbResult<T> {
        v.ok_or_else(|| DbErr::corrupt(format!("column {col}: unexpected NULL")))
    }

    pub fn text(&self, col: &str) -> DbResult<String> {
        Row::required(col, self.opt_text(col)?)
    }

    pub fn opt_text(&self, col: &str) -> DbResult<Option<String>> {
        match self {
            Row::Lite(r) => r.opt_text(col),
            Row::Pg(r) => Row::pg(r, col),
        }
    }

    pub fn int(&self, col: &str) -> DbResult<i64> {
        Row::required(col, self.opt_int(col)?)
    }

    pub fn opt_int(&self, col: &str) -> DbResult<Option<i64>> {
        match self {
            Row::Lite(r) => r.opt_int(col),
            Row::Pg(r) => Row::pg(r, col),
        }
    }

    pub fn opt_float(&self, col: &str) -> DbResult<Option<f64>> {
        match self {
            Row::Lite(r) => r.opt_float(col),
            Row::Pg(r) => Row::pg(r, col),
        }
    }

    pub fn boolean(&self, col: &str) -> DbResult<bool> {
        let v = match self {
            Row::Lite(r) => r.opt_bool(col)?,
            Row::Pg(r) => Row::pg(r, col)?,
        };
        Row::required(col, v)
    }

    pub fn json(&self, col: &str) -> DbResult<Value> {
        Row::required(col, self.opt_json(col)?)
    }

    pub fn opt_json(&self, col: &str) -> DbResult<Option<Value>> {
        match self {
            Row::Lite(r) => r.opt_json(col),
            Row::Pg(r) => Ok(Row::pg::<Option<sqlx::types::Json<Value>>>(r, col)?.map(|j| j.0)),
        }
    }

    pub fn map(&self, col: &str) -> DbResult<JsonMap> {
        match self.json(col)? {
            Value::Object(m) => Ok(m),
            other => Err(DbErr::corrupt(format!(
                "column {col}: expected a JSON object, got {other}"
            ))),
        }
    }

    pub fn ts(&self, col: &str) -> DbResult<DateTime<Utc>> {
        Ok(crate::ids::from_micros(self.int(col)?))
    }

    pub fn opt_ts(&self, col: &str) -> DbResult<Option<DateTime<Utc>>> {
        Ok(self.opt_int(col)?.map(crate::ids::from_micros))
    }
}

// ------------------------------------------------------------------------ transactions

/// A write transaction. SQLite: `BEGIN IMMEDIATE` on the single writer connection, so
/// transactions are serialized in-process. Postgres: `READ COMMITTED`; statements that
/// derive a thread's status lock the thread row first (see the run store).
pub(crate) enum Tx {
    Sqlite(LiteTx),
    Pg(Transaction<'static, Postgres>),
}

impl Tx {
    pub async fn all(&mut self, sql: Sql) -> DbResult<Vec<Row>> {
        Ok(match self {
            Tx::Sqlite(tx) => tx.run(sql)?.0.into_iter().map(Row::Lite).collect(),
            Tx::Pg(tx) => sql
                .postgres()?
                .fetch_all(&mut **tx)
                .await?
                .into_iter()
                .map(Row::Pg)
                .collect(),
        })
    }

    pub async fn opt(&mut self, sql: Sql) -> DbResult<Option<Row>> {
        Ok(match self {
            Tx::Sqlite(tx) => tx.run(sql)?.0.into_iter().next().map(Row::Lite),
            Tx::Pg(tx) => sql
                .postgres()?
                .fetch_optional(&mut **tx)
                .await?
                .map(Row::Pg),
        })
    }

    pub async fn exec(&mut self, sql: Sql) -> DbResult<u64> {
        Ok(match self {
            Tx::Sqlite(tx) => tx.run(sql)?.1,
            Tx::Pg(tx) => sql.postgres()?.execute(&mut **tx).await?.rows_affected(),
        })
    }

    pub async fn commit(self) -> DbResult<()> {
        match self {
            Tx::Sqlite(tx) => tx.commit().await?,
            Tx::Pg(tx) => tx.commit().await?,
        }
        Ok(())
    }
}

/// Where a read runs: on the read pool, or inside a write transaction (to see its own
/// uncommitted changes).
pub(crate) enum Exec<'a> {
    Read(&'a Db),
    Tx(&'a mut Tx),
}

impl Exec<'_> {
    pub async fn all(&mut self, sql: Sql) -> DbResult<Vec<Row>> {
        match self {
            Exec::Read(db) => db.read_all(sql).await,
            Exec::Tx(tx) => tx.all(sql).await,
        }
    }
}

// ------------------------------------------------------------------------------- pools

/// Tuning for [`Db::open_sqlite`] / [`Db::open_postgres`].
#[derive(Clone, Debug)]
pub(crate) struct PoolSettings {
    pub sqlite_readers: u32,
    pub pg_max_connections: u32,
    pub acquire_timeout: Duration,
}

enum Pools {
    Sqlite {
        lite: Arc<Lite>,
        /// Background WAL checkpoints (see [`wal_checkpoints`]).
        checkpointer: tokio::task::JoinHandle<()>,
    },
    Pg {
        pool: PgPool,
        /// Callers waiting for a connection.
        waiting: Arc<std::sync::atomic::AtomicUsize>,
    },
}

/// Counts a caller as waiting for a connection while it lives.
struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(n: &'a std::sync::atomic::AtomicUsize) -> Waiting<'a> {
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Waiting(n)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One optional row from Postgres. Boxed, as every Postgres path of [`Db`]: the futures
/// of a connection's acquisition and of a query are large, and an unboxed one would grow
/// every store method's future (copied whole into its box on each call) on SQLite too.
fn pg_opt<'a>(
    pool: &'a PgPool,
    waiting: &'a std::sync::atomic::AtomicUsize,
    sql: Sql,
) -> futures::future::BoxFuture<'a, DbResult<Option<Row>>> {
    Box::pin(async move {
        let mut conn = pg_conn(pool, waiting).await?;
        Ok(sql
            .postgres()?
            .fetch_optional(&mut *conn)
            .await?
            .map(Row::Pg))
    })
}

/// A pooled Postgres connection, counting the wait for it.
async fn pg_conn(
    pool: &PgPool,
    waiting: &std::sync::atomic::AtomicUsize,
) -> DbResult<sqlx::pool::PoolConnection<Postgres>> {
    let _waiting = Waiting::new(waiting);
    Ok(pool.acquire().await?)
}

pub(crate) struct Db {
    pub dialect: Dialect,
    pools: Pools,
}

impl Db {
    /// The Postgres pool (for LISTEN), if this is Postgres.
    pub fn pg_pool(&self) -> Option<&PgPool> {
        match &self.pools {
            Pools::Pg { pool, .. } => Some(pool),
            Pools::Sqlite { .. } => None,
        }
    }
}

fn migrator(dialect: Dialect) -> Migrator {
    let files: &[(i64, &'static str, &'static str)] = match dialect {
        Dialect::Sqlite => &[
            (
                1,
                "init",
                include_str!("../../../../migrations/sqlite/0001_init.sql"),
            ),
            (
                2,
                "drop checkpoints_parent",
                include_str!("../../../../migrations/sqlite/0002_drop_checkpoints_parent.sql"),
            ),
            (
                3,
                "clear out-of-range ttls",
                include_str!("../../../../migrations/sqlite/0003_clear_out_of_range_ttls.sql"),
            ),
            (
                4,
                "users and api keys",
                include_str!("../../../../migrations/sqlite/0004_users.sql"),
            ),
            (
                5,
                "cron tasks",
                include_str!("../../../../migrations/sqlite/0005_cron_tasks.sql"),
            ),
            (
                6,
                "run events and feedback",
                include_str!("../../../../migrations/sqlite/0006_run_events.sql"),
            ),
            (
                7,
                "user needs_setup",
                include_str!("../../../../migrations/sqlite/0007_user_needs_setup.sql"),
            ),
            (
                8,
                "packed snapshots",
                include_str!("../../../../migrations/sqlite/0008_packed_snapshots.sql"),
            ),
            (
                9,
                "maintenance leases",
                include_str!("../../../../migrations/sqlite/0009_maintenance_leases.sql"),
            ),
            (
                10,
                "packed values, no checkpoints_run",
                include_str!("../../../../migrations/sqlite/0010_packed_values.sql"),
            ),
            (
                11,
                "threads by branch parent",
                include_str!("../../../../migrations/sqlite/0011_threads_branch_parent.sql"),
            ),
        ],
        Dialect::Postgres => &[
            (
                1,
                "init",
                include_str!("../../../../migrations/postgres/0001_init.sql"),
            ),
            (
                2,
                "claim function",
                include_str!("../../../../migrations/postgres/0002_claim_function.sql"),
            ),
            (
                3,
                "claim function plpgsql",
                include_str!("../../../../migrations/postgres/0003_claim_function_plpgsql.sql"),
            ),
            (
                4,
                "create run function",
                include_str!("../../../../migrations/postgres/0004_create_run_function.sql"),
            ),
            (
                5,
                "drop checkpoints_parent",
                include_str!("../../../../migrations/postgres/0005_drop_checkpoints_parent.sql"),
            ),
            (
                6,
                "finish run function",
                include_str!("../../../../migrations/postgres/0006_finish_run_function.sql"),
            ),
            (
                7,
                "clear out-of-range ttls",
                include_str!("../../../../migrations/postgres/0007_clear_out_of_range_ttls.sql"),
            ),
            (
                8,
                "users and api keys",
                include_str!("../../../../migrations/postgres/0008_users.sql"),
            ),
            (
                9,
                "cron tasks",
                include_str!("../../../../migrations/postgres/0009_cron_tasks.sql"),
            ),
            (
                10,
                "run events and feedback",
                include_str!("../../../../migrations/postgres/0010_run_events.sql"),
            ),
            (
                11,
                "user needs_setup",
                include_str!("../../../../migrations/postgres/0011_user_needs_setup.sql"),
            ),
            (
                12,
                "maintenance leases",
                include_str!("../../../../migrations/postgres/0012_maintenance_leases.sql"),
            ),
            (
                13,
                "threads by branch parent",
                include_str!("../../../../migrations/postgres/0013_threads_branch_parent.sql"),
            ),
            (
                14,
                "create run with claim",
                include_str!("../../../../migrations/postgres/0014_create_run_claim.sql"),
            ),
            (
                15,
                "create run claimed at insert",
                include_str!("../../../../migrations/postgres/0015_create_run_claimed_insert.sql"),
            ),
            (
                16,
                "fewer index writes per run",
                include_str!("../../../../migrations/postgres/0016_fewer_index_writes.sql"),
            ),
        ],
    };
    Migrator::with_migrations(
        files
            .iter()
            .map(|(version, description, sql)| {
                Migration::new(
                    *version,
                    Cow::Borrowed(*description),
                    MigrationType::Simple,
                    SqlStr::from_static(sql),
                    false,
                )
            })
            .collect(),
    )
}

/// The newest migration this binary knows, per dialect.
pub(crate) fn latest_migration(dialect: Dialect) -> i64 {
    migrator(dialect)
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or(0)
}

/// Refuses a database whose newest applied migration is one this binary does not know (a
/// newer Fawn wrote it): migrating it, or serving it with an older schema in mind, could
/// lose data. `newest` is the database's newest applied migration and its description.
fn refuse_newer(dialect: Dialect, newest: Option<(i64, String)>) -> crate::Result<()> {
    let known = latest_migration(dialect);
    match newest {
        Some((found, description)) if found > known => Err(StoreError::Database(format!(
            "this database was written by a newer Fawn: its schema is at migration {found} \
             ({description:?}), but this Fawn ({}) knows migrations up to {known}. It was \
             left unchanged; run the newer Fawn, or restore a backup taken before the upgrade",
            env!("CARGO_PKG_VERSION")
        ))),
        _ => Ok(()),
    }
}

/// The newest migration applied to the SQLite database at `path`, read through a read-only
/// connection (nothing is written), or `None` for a new or empty database.
fn sqlite_newest_migration(path: &Path) -> crate::Result<Option<(i64, String)>> {
    if std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) == 0 {
        return Ok(None);
    }
    let opened = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .and_then(|conn| {
        conn.busy_timeout(Duration::from_secs(10))?;
        let exists: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' \
             AND name = '_sqlx_migrations')",
            [],
            |r| r.get(0),
        )?;
        if !exists {
            return Ok(None);
        }
        conn.query_row(
            "SELECT version, description FROM _sqlx_migrations ORDER BY version DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })
    });
    opened.map_err(|e| db_error(&format!("cannot read {}", path.display()), e))
}

/// The newest migration applied to the Postgres schema the pool uses, if any.
async fn pg_newest_migration(pool: &PgPool) -> crate::Result<Option<(i64, String)>> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(pool)
        .await
        .map_err(|e| db_error("cannot read the Postgres schema", e))?;
    if !exists {
        return Ok(None);
    }
    sqlx::query_as::<_, (i64, String)>(
        "SELECT version, description FROM _sqlx_migrations ORDER BY version DESC LIMIT 1",
    )
    .fetch_optional(pool)
    .await
    .map_err(|e| db_error("cannot read the Postgres schema", e))
}

fn db_error(context: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Database(format!("{context}: {e}"))
}

/// A database whose committed writes have changed no row for this long is idle:
/// maintenance may run.
const IDLE_BEFORE_MAINTENANCE: Duration = Duration::from_secs(1);
/// While writes go on, a WAL file bigger than this is cut back anyway, at most once per
/// [`IDLE_BEFORE_MAINTENANCE`] (readers that never let the WAL restart would otherwise let
/// it grow up to the autocheckpoint size, 32 MiB, between idle moments).
const WAL_BUSY_LIMIT: u64 = 4 * lite::JOURNAL_SIZE_LIMIT as u64;

/// Copies the WAL back into the database every 250 ms from a connection of its own
/// (`PASSIVE`: it never waits for, nor blocks, the writer). A checkpoint syncs the database
/// file; run by the writer on commit (SQLite's default) that sync stalls every write
/// queued behind it whenever the disk is slow. Once no committed write has changed a row
/// for [`IDLE_BEFORE_MAINTENANCE`], it runs [`Lite::maintain`] instead (free pages back to the
/// file system in small steps, then the WAL cut to zero bytes) until there is nothing
/// left to do, and reads the files' sizes into `/metrics` every second.
async fn wal_checkpoints(lite: Arc<Lite>) {
    let mut seen = lite.writes_seen();
    let mut last_write = std::time::Instant::now();
    let mut tidy = false;
    let mut last_forced = std::time::Instant::now();
    let mut tick: u64 = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if lite.is_closed() {
            return;
        }
        tick += 1;
        let now = lite.writes_seen();
        if now != seen {
            seen = now;
            last_write = std::time::Instant::now();
            tidy = false;
        }
        if !tidy && last_write.elapsed() >= IDLE_BEFORE_MAINTENANCE {
            let m = lite.maintain(false).await;
            record_maintenance(&m);
            tidy = m.ran && m.wal_truncated && (m.pages_vacuumed == 0 || m.free_pages == 0);
        } else if last_forced.elapsed() >= IDLE_BEFORE_MAINTENANCE
            && sqlite_file_sizes(lite.path()).1 > WAL_BUSY_LIMIT
        {
            let m = lite.maintain(false).await;
            record_maintenance(&m);
            if m.ran {
                last_forced = std::time::Instant::now();
            }
        } else {
            lite.wal_checkpoint().await;
        }
        if tick % 4 == 1 {
            record_sizes(lite.path());
        }
    }
}

/// What a maintenance step did, counted in `/metrics`, with the files' sizes afterwards.
fn maintenance(lite: &Lite, m: super::lite::Maintained) -> crate::Maintenance {
    record_maintenance(&m);
    let (db_bytes, wal_bytes) = sqlite_file_sizes(lite.path());
    crate::Maintenance {
        ran: m.ran,
        wal_truncated: m.wal_truncated,
        pages_vacuumed: m.pages_vacuumed,
        free_pages: m.free_pages,
        db_bytes,
        wal_bytes,
    }
}

/// Counts what a maintenance step did in `/metrics`.
fn record_maintenance(m: &super::lite::Maintained) {
    let metrics = fawn_telemetry::metrics();
    if m.wal_truncated {
        metrics
            .db_maintenance
            .with_label_values(&["wal_truncate"])
            .inc();
    }
    if m.pages_vacuumed > 0 {
        metrics
            .db_maintenance
            .with_label_values(&["incremental_vacuum"])
            .inc();
        metrics.db_pages_vacuumed.inc_by(m.pages_vacuumed);
    }
}

/// The database file and its WAL on disk, for `/metrics`.
fn record_sizes(path: &Path) {
    let metrics = fawn_telemetry::metrics();
    let (db, wal) = sqlite_file_sizes(path);
    metrics
        .db_size
        .with_label_values(&["database"])
        .set(i64::try_from(db).unwrap_or(i64::MAX));
    metrics
        .db_size
        .with_label_values(&["wal"])
        .set(i64::try_from(wal).unwrap_or(i64::MAX));
}

/// Bytes of a SQLite database file and of its WAL (0 for a file that is not there).
pub(crate) fn sqlite_file_sizes(path: &Path) -> (u64, u64) {
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let mut wal = path.as_os_str().to_os_string();
    wal.push("-wal");
    (len(path), len(Path::new(&wal)))
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Pools::Sqlite { checkpointer, .. } = &self.pools {
            checkpointer.abort();
        }
    }
}

/// Runs one statement on the pool (autocommit) and returns all its rows.
async fn pg_all(conn: &mut sqlx::pool::PoolConnection<Postgres>, sql: Sql) -> DbResult<Vec<Row>> {
    Ok(sql
        .postgres()?
        .fetch_all(&mut **conn)
        .await?
        .into_iter()
        .map(Row::Pg)
        .collect())
}

/// A Postgres schema name we are willing to put into `CREATE SCHEMA` and `search_path`.
pub(crate) fn valid_schema_name(schema: &str) -> bool {
    let mut chars = schema.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && schema.len() <= 63
}

impl Db {
    /// Opens (creating the file and its directory) and migrates a SQLite database: WAL,
    /// `synchronous=NORMAL`, a busy timeout, one writer connection and a set of readers
    /// (see [`lite`]). Migrations run through sqlx on a connection of their own.
    pub async fn open_sqlite(path: &Path, settings: &PoolSettings) -> crate::Result<Db> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| db_error(&format!("cannot create directory {}", dir.display()), e))?;
        }
        // Before anything opens it for writing: a database of a newer Fawn is left alone.
        refuse_newer(Dialect::Sqlite, sqlite_newest_migration(path)?)?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            // Takes effect only on a database without tables (a new one; sqlx sets it
            // before the journal mode, which would otherwise fix the file's format):
            // freed pages can then be handed back in small steps while idle. An older
            // database is converted by `fawn db vacuum`.
            .auto_vacuum(SqliteAutoVacuum::Incremental)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(false);
        let migrations = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(settings.acquire_timeout)
            .connect_with(options)
            .await
            .map_err(|e| db_error(&format!("cannot open {}", path.display()), e))?;
        let migrated = migrator(Dialect::Sqlite).run(&migrations).await;
        migrations.close().await;
        migrated.map_err(|e| db_error("migrating the SQLite database failed", e))?;
        let owned = path.to_path_buf();
        let readers = settings.sqlite_readers;
        let timeout = settings.acquire_timeout;
        let lite = tokio::task::spawn_blocking(move || Lite::open(&owned, readers, timeout))
            .await
            .map_err(|e| db_error(&format!("cannot open {}", path.display()), e))?
            .map_err(|e| db_error(&format!("cannot open {}", path.display()), e))?;
        let lite = Arc::new(lite);
        record_sizes(path);
        Ok(Db {
            dialect: Dialect::Sqlite,
            pools: Pools::Sqlite {
                checkpointer: tokio::spawn(wal_checkpoints(lite.clone())),
                lite,
            },
        })
    }

    /// An existing database opened to read only (`fawn db stats`): no migration, no
    /// background maintenance, nothing created; writes fail. A database of a newer Fawn is
    /// refused as at start.
    pub async fn open_read_only(config: &crate::BackendConfig) -> crate::Result<Db> {
        match config {
            crate::BackendConfig::Sqlite { path } => {
                if !path.exists() {
                    return Err(StoreError::NotFound(format!(
                        "no database at {}",
                        path.display()
                    )));
                }
                refuse_newer(Dialect::Sqlite, sqlite_newest_migration(path)?)?;
                let owned = path.to_path_buf();
                let lite = tokio::task::spawn_blocking(move || Lite::open_read_only(&owned, 1))
                    .await
                    .map_err(|e| db_error(&format!("cannot open {}", path.display()), e))?
                    .map_err(|e| db_error(&format!("cannot open {}", path.display()), e))?;
                Ok(Db {
                    dialect: Dialect::Sqlite,
                    pools: Pools::Sqlite {
                        checkpointer: tokio::spawn(async {}),
                        lite: Arc::new(lite),
                    },
                })
            }
            crate::BackendConfig::Postgres { url, schema } => {
                let mut options = PgConnectOptions::from_str(url)
                    .map_err(|e| StoreError::Invalid(format!("invalid Postgres URL: {e}")))?;
                if let Some(schema) = schema {
                    if !valid_schema_name(schema) {
                        return Err(StoreError::Invalid(format!(
                            "invalid Postgres schema name {schema:?}: use letters, digits and _"
                        )));
                    }
                    options = options.options([("search_path", schema.as_str())]);
                }
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .connect_with(options)
                    .await
                    .map_err(|e| db_error("cannot connect to Postgres", e))?;
                if let Err(e) = refuse_newer(Dialect::Postgres, pg_newest_migration(&pool).await?) {
                    pool.close().await;
                    return Err(e);
                }
                Ok(Db {
                    dialect: Dialect::Postgres,
                    pools: Pools::Pg {
                        pool,
                        waiting: Arc::default(),
                    },
                })
            }
        }
    }

    /// Connects to Postgres, creates `schema` if needed (every pooled connection then has
    /// it as its `search_path`), and migrates.
    pub async fn open_postgres(
        url: &str,
        schema: Option<&str>,
        settings: &PoolSettings,
    ) -> crate::Result<Db> {
        let mut options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Invalid(format!("invalid Postgres URL: {e}")))?;
        if let Some(schema) = schema {
            if !valid_schema_name(schema) {
                return Err(StoreError::Invalid(format!(
                    "invalid Postgres schema name {schema:?}: use letters, digits and _"
                )));
            }
            let admin = PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(settings.acquire_timeout)
                .connect_with(options.clone())
                .await
                .map_err(|e| db_error("cannot connect to Postgres", e))?;
            let create = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
            let created = sqlx::query::<Postgres>(AssertSqlSafe(create))
                .execute(&admin)
                .await;
            admin.close().await;
            if let Err(e) = created {
                // Two processes creating the same schema at once: one of them loses the
                // race on the catalog's unique index, and the schema exists either way.
                if !DbErr::Sql(e).is_unique_violation() {
                    return Err(StoreError::Database(format!(
                        "cannot create schema {schema}"
                    )));
                }
            }
            options = options.options([("search_path", schema)]);
        }
        let pool = PgPoolOptions::new()
            .test_before_acquire(false)
            .max_connections(settings.pg_max_connections.max(1))
            .acquire_timeout(settings.acquire_timeout)
            .connect_with(options)
            .await
            .map_err(|e| db_error("cannot connect to Postgres", e))?;
        if let Err(e) = refuse_newer(Dialect::Postgres, pg_newest_migration(&pool).await?) {
            pool.close().await;
            return Err(e);
        }
        migrator(Dialect::Postgres)
            .run(&pool)
            .await
            .map_err(|e| db_error("migrating the Postgres database failed", e))?;
        Ok(Db {
            dialect: Dialect::Postgres,
            pools: Pools::Pg {
                pool,
                waiting: Arc::default(),
            },
        })
    }

    /// Begins a write transaction.
    pub async fn begin(&self) -> DbResult<Tx> {
        self.begin_with(false).await
    }

    /// Begins a write transaction that someone is waiting on right now (SQLite: it commits
    /// its group at once instead of waiting for a later member, see [`lite`]).
    pub async fn begin_urgent(&self) -> DbResult<Tx> {
        self.begin_with(true).await
    }

    async fn begin_with(&self, urgent: bool) -> DbResult<Tx> {
        Ok(match &self.pools {
            Pools::Sqlite { lite, .. } => Tx::Sqlite(lite.begin(urgent).await?),
            Pools::Pg { pool, waiting } => {
                Box::pin(async move {
                    let conn = pg_conn(pool, waiting).await?;
                    DbResult::Ok(Tx::Pg(Transaction::begin(conn, None).await?))
                })
                .await?
            }
        })
    }

    /// Runs a read-only statement outside any transaction.
    pub async fn read_all(&self, sql: Sql) -> DbResult<Vec<Row>> {
        match &self.pools {
            Pools::Sqlite { lite, .. } => {
                Ok(lite.read_all(sql)?.into_iter().map(Row::Lite).collect())
            }
            Pools::Pg { pool, waiting } => {
                Box::pin(async move {
                    let mut conn = pg_conn(pool, waiting).await?;
                    pg_all(&mut conn, sql).await
                })
                .await
            }
        }
    }

    pub async fn read_opt(&self, sql: Sql) -> DbResult<Option<Row>> {
        Ok(match &self.pools {
            Pools::Sqlite { lite, .. } => lite.read_opt(sql)?.map(Row::Lite),
            Pools::Pg { pool, waiting } => pg_opt(pool, waiting, sql).await?,
        })
    }

    /// Runs one writing statement on its own (autocommit).
    pub async fn write_opt(&self, sql: Sql) -> DbResult<Option<Row>> {
        Ok(match &self.pools {
            Pools::Sqlite { lite, .. } => {
                lite.write(sql).await?.0.into_iter().next().map(Row::Lite)
            }
            Pools::Pg { pool, waiting } => pg_opt(pool, waiting, sql).await?,
        })
    }

    /// Runs one writing statement on its own (autocommit) and returns all its rows.
    pub async fn write_all(&self, sql: Sql) -> DbResult<Vec<Row>> {
        match &self.pools {
            Pools::Sqlite { lite, .. } => Ok(lite
                .write(sql)
                .await?
                .0
                .into_iter()
                .map(Row::Lite)
                .collect()),
            Pools::Pg { pool, waiting } => {
                Box::pin(async move {
                    let mut conn = pg_conn(pool, waiting).await?;
                    pg_all(&mut conn, sql).await
                })
                .await
            }
        }
    }

    pub async fn write_exec(&self, sql: Sql) -> DbResult<u64> {
        Ok(match &self.pools {
            Pools::Sqlite { lite, .. } => lite.write(sql).await?.1,
            Pools::Pg { pool, waiting } => {
                Box::pin(async move {
                    let mut conn = pg_conn(pool, waiting).await?;
                    DbResult::Ok(sql.postgres()?.execute(&mut *conn).await?.rows_affected())
                })
                .await?
            }
        })
    }

    /// SQLite: one step of idle maintenance now, waiting for the writer (see
    /// [`Lite::maintain`]); Postgres: nothing (autovacuum does its part).
    pub async fn maintain(&self) -> crate::Maintenance {
        match &self.pools {
            Pools::Sqlite { lite, .. } => maintenance(lite, lite.maintain(true).await),
            Pools::Pg { .. } => crate::Maintenance::default(),
        }
    }

    /// SQLite: one step handing back free pages above a busy database's slack (see
    /// [`Lite::shed_free_pages`]); Postgres: nothing.
    pub async fn shed_free_pages(&self) -> crate::Maintenance {
        match &self.pools {
            Pools::Sqlite { lite, .. } => maintenance(lite, lite.shed_free_pages().await),
            Pools::Pg { .. } => crate::Maintenance::default(),
        }
    }

    pub async fn ping(&self) -> bool {
        self.read_opt(Sql::new("SELECT 1")).await.is_ok()
    }

    pub async fn close(&self) {
        match &self.pools {
            Pools::Sqlite { lite, checkpointer } => {
                checkpointer.abort();
                lite.close().await;
            }
            Pools::Pg { pool, .. } => pool.close().await,
        }
    }

    /// The connections now.
    pub fn pool_stats(&self) -> crate::PoolStats {
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        match &self.pools {
            Pools::Sqlite { lite, .. } => lite.pool_stats(),
            Pools::Pg { pool, waiting } => {
                let open = pool.size();
                let idle = n(pool.num_idle());
                crate::PoolStats {
                    open,
                    idle,
                    in_use: open.saturating_sub(idle),
                    max: pool.options().get_max_connections(),
                    waiting: n(waiting.load(std::sync::atomic::Ordering::Relaxed)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_values_gather_into_typed_columns() {
        let row = [
            Arg::Text(None),
            Arg::Int(Some(1)),
            Arg::Json(Some("{}".into())),
        ];
        let mut columns: Vec<Arg> = row.iter().map(|a| Arg::column_of(a).unwrap()).collect();
        for (c, v) in columns.iter_mut().zip(row) {
            c.push_row(v).unwrap();
        }
        columns[0].push_row(Arg::Text(Some("t".into()))).unwrap();
        assert_eq!(columns[0], Arg::Texts(vec![None, Some("t".into())]));
        assert_eq!(columns[1], Arg::Ints(vec![Some(1)]));
        assert_eq!(columns[2], Arg::Jsons(vec![Some("{}".into())]));
        let types: Vec<&str> = columns.iter().map(Arg::pg_array_type).collect();
        assert_eq!(types, ["text[]", "int8[]", "jsonb[]"]);
        // A value of another type, or a type with no column, is an error, not a guess.
        assert!(columns[1].push_row(Arg::Text(None)).is_err());
        assert!(Arg::column_of(&Arg::Blob(None)).is_err());
    }

    /// Every migration runs in one transaction with its bookkeeping row: one that fails
    /// halfway leaves nothing of itself behind, and is not recorded.
    #[tokio::test]
    async fn a_failing_migration_leaves_nothing_behind() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            assert!(migrator(dialect).iter().all(|m| !m.no_tx));
        }
        let dir = tempfile::tempdir().unwrap();
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(dir.path().join("m.db"))
                    .create_if_missing(true),
            )
            .await
            .unwrap();
        let bad = Migrator::with_migrations(vec![Migration::new(
            1,
            Cow::Borrowed("half done"),
            MigrationType::Simple,
            SqlStr::from_static("CREATE TABLE half (x INTEGER); INSERT INTO missing VALUES (1);"),
            false,
        )]);
        assert!(bad.run(&pool).await.is_err());
        let left: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'half'")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(left, 0, "the migration's first statement was rolled back");
        let recorded: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(recorded, 0);
        pool.close().await;
    }

    #[test]
    fn latest_migrations() {
        assert_eq!(latest_migration(Dialect::Sqlite), 11);
        assert_eq!(latest_migration(Dialect::Postgres), 16);
        assert!(refuse_newer(Dialect::Sqlite, Some((11, "x".into()))).is_ok());
        assert!(refuse_newer(Dialect::Sqlite, None).is_ok());
        let e = refuse_newer(Dialect::Sqlite, Some((12, "next".into())))
            .unwrap_err()
            .to_string();
        assert!(e.contains("migration 12") && e.contains("up to 11"), "{e}");
    }

    #[test]
    fn schema_names() {
        assert!(valid_schema_name("fawn"));
        assert!(valid_schema_name("_t_123"));
        assert!(!valid_schema_name("1abc"));
        assert!(!valid_schema_name("a-b"));
        assert!(!valid_schema_name("a\"; drop"));
        assert!(!valid_schema_name(""));
    }

    #[test]
    fn nul_characters_are_replaced_only_for_jsonb() {
        let v = serde_json::json!({"a\u{0}": ["x\u{0}y", {"k": "\\u0000 literal"}]});
        let out: Value = serde_json::from_str(&jsonb_safe(v.to_string())).unwrap();
        assert_eq!(
            out,
            serde_json::json!({"a\u{FFFD}": ["x\u{FFFD}y", {"k": "\\u0000 literal"}]})
        );
        let plain = serde_json::json!({"k": "\\u0000 literal"}).to_string();
        assert_eq!(jsonb_safe(plain.clone()), plain);
    }

    #[test]
    fn binds_number_placeholders() {
        let mut b = Binds::new();
        assert_eq!(b.push("a"), "$1");
        assert_eq!(b.push(2i64), "$2");
        assert_eq!(b.args.len(), 2);
    }
}
