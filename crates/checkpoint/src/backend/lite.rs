//! The SQLite engine: rusqlite connections driven inline from the calling task.
//!
//! A statement on an embedded database in WAL mode with `synchronous=NORMAL` costs
//! microseconds and never waits for a disk sync on commit, so it runs on the task that asks
//! for it instead of being shipped to a worker thread and back (which cost two thread
//! hand-offs and wakeups per statement, most of the server's CPU per run). Writes go
//! through one connection behind an async mutex, so a task waiting for the writer yields
//! instead of blocking its thread; reads take any free connection of a small set.
//! The only work that may touch the disk synchronously, the periodic WAL checkpoint, runs
//! on a blocking thread.

use super::db::{Arg, DbErr, DbResult, Sql};
use rusqlite::types::{Value as LiteValue, ValueRef};
use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde_json::Value;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// Extended result codes of unique and primary-key constraint violations.
const SQLITE_CONSTRAINT_PRIMARYKEY: i32 = 1555;
const SQLITE_CONSTRAINT_UNIQUE: i32 = 2067;

/// What an operation on a closed database answers.
fn closed() -> DbErr {
    DbErr::Store(crate::StoreError::Database(
        "the database is closed".to_string(),
    ))
}

/// Opens one connection with the settings every connection shares.
pub(crate) fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // `journal_mode` answers with a row; the others are silent.
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL;
         PRAGMA foreign_keys = OFF;
         PRAGMA temp_store = MEMORY;
         PRAGMA wal_autocheckpoint = 8192;",
    )?;
    conn.set_prepared_statement_cache_capacity(256);
    Ok(conn)
}

/// The connections of one SQLite database.
pub(crate) struct Lite {
    /// The single writer. `None` once closed.
    writer: Arc<AsyncMutex<Option<Connection>>>,
    /// Read connections; a read takes the first free one.
    readers: Arc<[Mutex<Option<Connection>>]>,
    next_reader: AtomicUsize,
    /// How long a write waits for the writer.
    acquire_timeout: Duration,
}

impl Lite {
    pub fn open(path: &Path, readers: u32, acquire_timeout: Duration) -> rusqlite::Result<Lite> {
        let writer = connect(path)?;
        let readers = (0..readers.max(1))
            .map(|_| connect(path).map(|c| Mutex::new(Some(c))))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(Lite {
            writer: Arc::new(AsyncMutex::new(Some(writer))),
            readers: readers.into(),
            next_reader: AtomicUsize::new(0),
            acquire_timeout,
        })
    }

    /// Runs `f` on a free read connection (or waits briefly for one: reads hold a
    /// connection only while a statement runs, never across an await).
    fn with_reader<T>(&self, f: impl FnOnce(&Connection) -> DbResult<T>) -> DbResult<T> {
        let n = self.readers.len();
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        for i in 0..n {
            if let Ok(guard) = self.readers[(start + i) % n].try_lock() {
                return f(guard.as_ref().ok_or_else(closed)?);
            }
        }
        let guard = self.readers[start % n]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(guard.as_ref().ok_or_else(closed)?)
    }

    pub fn read_all(&self, sql: Sql) -> DbResult<Vec<LiteRow>> {
        self.with_reader(|conn| Ok(run(conn, &sql)?.0))
    }

    pub fn read_opt(&self, sql: Sql) -> DbResult<Option<LiteRow>> {
        self.with_reader(|conn| Ok(run(conn, &sql)?.0.into_iter().next()))
    }

    async fn lock_writer(&self) -> DbResult<OwnedMutexGuard<Option<Connection>>> {
        let guard = tokio::time::timeout(self.acquire_timeout, self.writer.clone().lock_owned())
            .await
            .map_err(|_| {
                DbErr::Store(crate::StoreError::Database(
                    "timed out waiting for the database writer".to_string(),
                ))
            })?;
        if guard.is_none() {
            return Err(closed());
        }
        Ok(guard)
    }

    /// Runs one writing statement on its own (autocommit).
    pub async fn write(&self, sql: Sql) -> DbResult<(Vec<LiteRow>, u64)> {
        let guard = self.lock_writer().await?;
        let conn = guard.as_ref().ok_or_else(closed)?;
        run(conn, &sql)
    }

    /// `BEGIN IMMEDIATE` on the writer; the transaction holds it until commit or drop.
    pub async fn begin(&self) -> DbResult<LiteTx> {
        let guard = self.lock_writer().await?;
        let conn = guard.as_ref().ok_or_else(closed)?;
        conn.execute_batch("BEGIN IMMEDIATE").map_err(DbErr::Lite)?;
        Ok(LiteTx { conn: guard })
    }

    /// A passive WAL checkpoint on a read connection, on a blocking thread (it syncs the
    /// database file).
    pub async fn wal_checkpoint(&self) {
        let readers = self.readers.clone();
        let done = tokio::task::spawn_blocking(move || {
            let guard = readers[0]
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match guard.as_ref() {
                Some(conn) => conn
                    .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    .map_err(|e| e.to_string()),
                None => Ok(()),
            }
        })
        .await;
        match done {
            Ok(Err(e)) => tracing::debug!(error = %e, "background WAL checkpoint failed"),
            Err(e) => tracing::debug!(error = %e, "background WAL checkpoint task failed"),
            Ok(Ok(())) => {}
        }
    }

    pub fn is_closed(&self) -> bool {
        self.readers[0].lock().map(|g| g.is_none()).unwrap_or(true)
    }

    /// Closes every connection; later operations fail with "the database is closed".
    pub async fn close(&self) {
        for reader in self.readers.iter() {
            let mut guard = reader
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            guard.take();
        }
        self.writer.lock().await.take();
    }
}

/// A write transaction: owns the writer until committed; dropped uncommitted, it rolls
/// back.
pub(crate) struct LiteTx {
    conn: OwnedMutexGuard<Option<Connection>>,
}

impl LiteTx {
    fn conn(&self) -> DbResult<&Connection> {
        self.conn.as_ref().ok_or_else(closed)
    }

    pub fn run(&mut self, sql: Sql) -> DbResult<(Vec<LiteRow>, u64)> {
        run(self.conn()?, &sql)
    }

    pub fn commit(self) -> DbResult<()> {
        self.conn()?.execute_batch("COMMIT").map_err(DbErr::Lite)
    }
}

impl Drop for LiteTx {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.as_ref()
            && !conn.is_autocommit()
            && let Err(e) = conn.execute_batch("ROLLBACK")
        {
            tracing::warn!(error = %e, "rolling back an abandoned SQLite transaction failed");
        }
    }
}

/// Binds `$N` (or `?N`) placeholders to `args[N-1]`; a bare `?` takes the argument at its
/// position.
fn bind(stmt: &mut rusqlite::Statement<'_>, args: &[Arg]) -> DbResult<()> {
    for i in 1..=stmt.parameter_count() {
        let n = match stmt.parameter_name(i) {
            Some(name) => name
                .strip_prefix('$')
                .or_else(|| name.strip_prefix('?'))
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| {
                    DbErr::Store(crate::StoreError::Database(format!(
                        "unsupported SQL parameter {name}"
                    )))
                })?,
            None => i,
        };
        let arg = n.checked_sub(1).and_then(|k| args.get(k)).ok_or_else(|| {
            DbErr::Store(crate::StoreError::Database(format!(
                "SQL parameter ${n} has no argument"
            )))
        })?;
        let bound = match arg {
            Arg::Text(v) | Arg::Json(v) => stmt.raw_bind_parameter(i, v.as_deref()),
            Arg::Int(v) => stmt.raw_bind_parameter(i, *v),
            Arg::Float(v) => stmt.raw_bind_parameter(i, *v),
            Arg::Bool(v) => stmt.raw_bind_parameter(i, v.map(i64::from)),
        };
        bound.map_err(DbErr::Lite)?;
    }
    Ok(())
}

/// Runs one statement to completion: its rows (if any) and the rows it changed.
fn run(conn: &Connection, sql: &Sql) -> DbResult<(Vec<LiteRow>, u64)> {
    let mut stmt = conn.prepare_cached(sql.text()).map_err(DbErr::Lite)?;
    bind(&mut stmt, sql.args())?;
    let width = stmt.column_count();
    let mut columns: Option<Arc<[Box<str>]>> = None;
    if width > 0 {
        let names = (0..width)
            .map(|i| stmt.column_name(i).map(Box::from))
            .collect::<rusqlite::Result<Vec<Box<str>>>>()
            .map_err(DbErr::Lite)?;
        columns = Some(names.into());
    }
    let mut out = Vec::new();
    let mut rows = stmt.raw_query();
    while let Some(row) = rows.next().map_err(DbErr::Lite)? {
        let mut values = Vec::with_capacity(width);
        for i in 0..width {
            values.push(owned(row.get_ref(i).map_err(DbErr::Lite)?));
        }
        if let Some(columns) = &columns {
            out.push(LiteRow {
                columns: columns.clone(),
                values,
            });
        }
    }
    drop(rows);
    Ok((out, conn.changes()))
}

/// Copies a value out of SQLite's buffers. Text that is not UTF-8 (only another writer
/// could have put it there) is kept as a blob, which the accessors refuse or decode.
fn owned(v: ValueRef<'_>) -> LiteValue {
    match v {
        ValueRef::Null => LiteValue::Null,
        ValueRef::Integer(i) => LiteValue::Integer(i),
        ValueRef::Real(f) => LiteValue::Real(f),
        ValueRef::Text(t) => match std::str::from_utf8(t) {
            Ok(s) => LiteValue::Text(s.to_string()),
            Err(_) => LiteValue::Blob(t.to_vec()),
        },
        ValueRef::Blob(b) => LiteValue::Blob(b.to_vec()),
    }
}

/// A materialized result row.
pub(crate) struct LiteRow {
    columns: Arc<[Box<str>]>,
    values: Vec<LiteValue>,
}

impl LiteRow {
    fn value(&self, col: &str) -> DbResult<&LiteValue> {
        self.columns
            .iter()
            .position(|c| &**c == col)
            .and_then(|i| self.values.get(i))
            .ok_or_else(|| DbErr::corrupt(format!("column {col}: not in the result")))
    }

    fn mismatch(col: &str, wanted: &str, got: &LiteValue) -> DbErr {
        DbErr::corrupt(format!(
            "column {col}: expected {wanted}, found {:?}",
            got.data_type()
        ))
    }

    pub fn opt_text(&self, col: &str) -> DbResult<Option<String>> {
        match self.value(col)? {
            LiteValue::Null => Ok(None),
            LiteValue::Text(s) => Ok(Some(s.clone())),
            LiteValue::Blob(b) => String::from_utf8(b.clone())
                .map(Some)
                .map_err(|_| DbErr::corrupt(format!("column {col}: not UTF-8"))),
            other => Err(Self::mismatch(col, "text", other)),
        }
    }

    pub fn opt_int(&self, col: &str) -> DbResult<Option<i64>> {
        match self.value(col)? {
            LiteValue::Null => Ok(None),
            LiteValue::Integer(i) => Ok(Some(*i)),
            other => Err(Self::mismatch(col, "an integer", other)),
        }
    }

    pub fn opt_float(&self, col: &str) -> DbResult<Option<f64>> {
        match self.value(col)? {
            LiteValue::Null => Ok(None),
            LiteValue::Real(f) => Ok(Some(*f)),
            LiteValue::Integer(i) => Ok(Some(*i as f64)),
            other => Err(Self::mismatch(col, "a number", other)),
        }
    }

    pub fn opt_bool(&self, col: &str) -> DbResult<Option<bool>> {
        Ok(self.opt_int(col)?.map(|i| i != 0))
    }

    /// A JSON column: TEXT holding JSON, or a number a JSON function produced.
    pub fn opt_json(&self, col: &str) -> DbResult<Option<Value>> {
        let parse = |bytes: &[u8]| {
            serde_json::from_slice::<Value>(bytes)
                .map_err(|e| DbErr::corrupt(format!("column {col}: invalid JSON: {e}")))
        };
        match self.value(col)? {
            LiteValue::Null => Ok(None),
            LiteValue::Text(s) => parse(s.as_bytes()).map(Some),
            LiteValue::Blob(b) => parse(b).map(Some),
            LiteValue::Integer(i) => Ok(Some(Value::from(*i))),
            LiteValue::Real(f) => Ok(Some(Value::from(*f))),
        }
    }
}

/// How SQLite's errors read to the retry and mapping logic of [`DbErr`].
pub(crate) fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error(),
        Some(f) if f.extended_code == SQLITE_CONSTRAINT_UNIQUE
            || f.extended_code == SQLITE_CONSTRAINT_PRIMARYKEY
    )
}

pub(crate) fn is_transient(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

pub(crate) fn is_too_big(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(ErrorCode::TooBig))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn db() -> (tempfile::TempDir, Lite) {
        let dir = tempfile::tempdir().unwrap();
        let lite = Lite::open(&dir.path().join("t.db"), 2, Duration::from_secs(1)).unwrap();
        lite.write(Sql::new(
            "CREATE TABLE t (k TEXT PRIMARY KEY, i INTEGER, f REAL, b BOOLEAN, j TEXT)",
        ))
        .await
        .unwrap();
        (dir, lite)
    }

    fn insert(k: &str) -> Sql {
        Sql::new("INSERT INTO t (k, i, f, b, j) VALUES ($1, $2, $3, $4, $5)")
            .bind(k)
            .bind(7i64)
            .bind(Some(1.5))
            .bind(true)
            .arg(Arg::json(&serde_json::json!({"a": [1, "x"]})))
    }

    #[tokio::test]
    async fn values_round_trip_and_placeholders_repeat() {
        let (_dir, lite) = db().await;
        assert_eq!(lite.write(insert("a")).await.unwrap().1, 1);
        let row = lite
            .read_opt(
                Sql::new("SELECT k, i, f, b, j, NULL AS n FROM t WHERE k = $1 AND $1 = k")
                    .bind("a"),
            )
            .unwrap()
            .unwrap();
        assert_eq!(row.opt_text("k").unwrap().as_deref(), Some("a"));
        assert_eq!(row.opt_int("i").unwrap(), Some(7));
        assert_eq!(row.opt_float("f").unwrap(), Some(1.5));
        assert_eq!(row.opt_bool("b").unwrap(), Some(true));
        assert_eq!(
            row.opt_json("j").unwrap(),
            Some(serde_json::json!({"a": [1, "x"]}))
        );
        assert_eq!(row.opt_text("n").unwrap(), None);
        assert!(row.opt_int("k").is_err(), "text is not an integer");
        assert!(row.opt_text("missing").is_err());
    }

    #[tokio::test]
    async fn a_dropped_transaction_rolls_back_and_frees_the_writer() {
        let (_dir, lite) = db().await;
        let mut tx = lite.begin().await.unwrap();
        tx.run(insert("gone")).unwrap();
        drop(tx);
        let mut tx = lite.begin().await.unwrap();
        tx.run(insert("kept")).unwrap();
        tx.commit().unwrap();
        let rows = lite
            .read_all(Sql::new("SELECT k FROM t ORDER BY k"))
            .unwrap();
        let keys: Vec<_> = rows.iter().map(|r| r.opt_text("k").unwrap()).collect();
        assert_eq!(keys, vec![Some("kept".to_string())]);
    }

    #[tokio::test]
    async fn unique_violations_and_closing_are_reported() {
        let (_dir, lite) = db().await;
        lite.write(insert("a")).await.unwrap();
        match lite.write(insert("a")).await {
            Err(DbErr::Lite(e)) => assert!(is_unique_violation(&e)),
            other => panic!("expected a unique violation, got {:?}", other.map(|r| r.1)),
        }
        lite.close().await;
        assert!(lite.is_closed());
        assert!(lite.read_all(Sql::new("SELECT 1")).is_err());
        assert!(lite.write(insert("b")).await.is_err());
        assert!(lite.begin().await.is_err());
    }
}
