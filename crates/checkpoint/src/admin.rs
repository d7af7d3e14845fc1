//! Operator commands on a database, outside the server (`fawn db stats|backup|vacuum`):
//! where the bytes go, a consistent online copy of a SQLite store, and converting a SQLite
//! file to incremental auto-vacuum. Each opens connections of its own, so it works while a
//! server runs on the same file (SQLite's own locking keeps them apart).

use crate::backend::db::sqlite_file_sizes;
use crate::{BackendConfig, Result, RetentionEstimate, RetentionStore, StoreError, SweepQuery};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Bytes used by one table or index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectSize {
    pub name: String,
    /// `table` or `index`.
    pub kind: String,
    pub bytes: u64,
}

/// The bytes of one thread's rows (checkpoints, pending writes, journal, its own row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadSize {
    pub thread_id: String,
    pub bytes: u64,
}

/// Where a database's bytes go (`fawn db stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DbStats {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// SQLite: the database file; Postgres: the tables and indexes of Fawn's schema.
    pub db_bytes: u64,
    /// SQLite: the write-ahead log on disk.
    pub wal_bytes: u64,
    /// SQLite: pages on the freelist, in bytes (reused by later writes; handed back to the
    /// file system by incremental vacuum).
    pub free_bytes: u64,
    /// SQLite: `none`, `full` or `incremental`.
    pub auto_vacuum: Option<String>,
    /// Largest first.
    pub objects: Vec<ObjectSize>,
    /// The ten largest threads, largest first (bytes of their stored values).
    pub largest_threads: Vec<ThreadSize>,
    /// The schema's newest migration.
    pub schema_version: i64,
}

fn err(context: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Database(format!("{context}: {e}"))
}

fn sqlite_path(config: &BackendConfig) -> Option<&Path> {
    match config {
        BackendConfig::Sqlite { path } => Some(path),
        BackendConfig::Postgres { .. } => None,
    }
}

/// Opens an existing SQLite database (never creates one).
fn open_existing(path: &Path, flags: OpenFlags) -> Result<Connection> {
    if !path.exists() {
        return Err(StoreError::NotFound(format!(
            "no database at {}",
            path.display()
        )));
    }
    let conn = Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(|e| err(&format!("cannot open {}", path.display()), e))?;
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(|e| err("busy timeout", e))?;
    Ok(conn)
}

/// The ten largest threads by the bytes of their stored values: checkpoints (writes,
/// snapshots, metadata), pending writes, journal rows and the thread row itself.
fn largest_threads_sql(len: &str) -> String {
    format!(
        "SELECT thread_id, SUM(b) AS bytes FROM (\
         SELECT thread_id, {len}(writes) + COALESCE({len}(snapshot), 0) + {len}(metadata) AS b \
         FROM checkpoints \
         UNION ALL SELECT thread_id, {len}(value) FROM checkpoint_writes \
         UNION ALL SELECT thread_id, {len}(content) + {len}(metadata) FROM run_events \
         UNION ALL SELECT thread_id, COALESCE({len}(state_values), 0) + {len}(metadata) FROM threads\
         ) AS t GROUP BY thread_id ORDER BY bytes DESC LIMIT 10"
    )
}

fn sqlite_stats(path: &Path) -> Result<DbStats> {
    let conn = open_existing(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let q = |e| err("reading the database", e);
    let int = |sql: &str| -> Result<i64> { conn.query_row(sql, [], |r| r.get(0)).map_err(q) };
    let page_size = int("PRAGMA page_size")?;
    let free = int("PRAGMA freelist_count")?;
    let auto_vacuum = match int("PRAGMA auto_vacuum")? {
        0 => "none",
        1 => "full",
        _ => "incremental",
    };
    let schema_version = conn
        .query_row("SELECT MAX(version) FROM _sqlx_migrations", [], |r| {
            r.get::<_, Option<i64>>(0)
        })
        .map_err(q)?
        .unwrap_or(0);
    let mut stmt = conn
        .prepare(
            "SELECT d.name, COALESCE(m.type, 'table'), SUM(d.pgsize) FROM dbstat AS d \
             LEFT JOIN sqlite_master AS m ON m.name = d.name \
             GROUP BY d.name ORDER BY 3 DESC",
        )
        .map_err(q)?;
    let objects = stmt
        .query_map([], |r| {
            Ok(ObjectSize {
                name: r.get(0)?,
                kind: r.get(1)?,
                bytes: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
            })
        })
        .map_err(q)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(q)?;
    let mut stmt = conn.prepare(&largest_threads_sql("length")).map_err(q)?;
    let largest_threads = stmt
        .query_map([], |r| {
            Ok(ThreadSize {
                thread_id: r.get(0)?,
                bytes: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
            })
        })
        .map_err(q)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(q)?;
    let (db_bytes, wal_bytes) = sqlite_file_sizes(path);
    Ok(DbStats {
        backend: "sqlite",
        db_bytes,
        wal_bytes,
        free_bytes: u64::try_from(free * page_size).unwrap_or(0),
        auto_vacuum: Some(auto_vacuum.to_string()),
        objects,
        largest_threads,
        schema_version,
    })
}

async fn pg_stats(url: &str, schema: Option<&str>) -> Result<DbStats> {
    use sqlx::Connection as _;
    use std::str::FromStr;
    let mut options = sqlx::postgres::PgConnectOptions::from_str(url)
        .map_err(|e| StoreError::Invalid(format!("invalid Postgres URL: {e}")))?;
    if let Some(schema) = schema {
        if !crate::backend::db::valid_schema_name(schema) {
            return Err(StoreError::Invalid(format!(
                "invalid Postgres schema name {schema:?}"
            )));
        }
        options = options.options([("search_path", schema)]);
    }
    let mut conn = sqlx::PgConnection::connect_with(&options)
        .await
        .map_err(|e| err("cannot connect to Postgres", e))?;
    let q = |e| err("reading the database", e);
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT c.relname::text, CASE c.relkind WHEN 'i' THEN 'index' ELSE 'table' END, \
         pg_relation_size(c.oid) + COALESCE(pg_total_relation_size(c.reltoastrelid), 0) \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i') ORDER BY 3 DESC",
    )
    .fetch_all(&mut conn)
    .await
    .map_err(q)?;
    let objects: Vec<ObjectSize> = rows
        .into_iter()
        .map(|(name, kind, bytes)| ObjectSize {
            name,
            kind,
            bytes: u64::try_from(bytes).unwrap_or(0),
        })
        .collect();
    let threads: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT thread_id, bytes::bigint FROM ({}) AS s",
        largest_threads_sql("pg_column_size")
    )))
    .fetch_all(&mut conn)
    .await
    .map_err(q)?;
    let schema_version: Option<i64> =
        sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
            .fetch_one(&mut conn)
            .await
            .map_err(q)?;
    let _ = conn.close().await;
    Ok(DbStats {
        backend: "postgres",
        db_bytes: objects.iter().map(|o| o.bytes).sum(),
        objects,
        largest_threads: threads
            .into_iter()
            .map(|(thread_id, bytes)| ThreadSize {
                thread_id,
                bytes: u64::try_from(bytes).unwrap_or(0),
            })
            .collect(),
        schema_version: schema_version.unwrap_or(0),
        ..DbStats::default()
    })
}

/// Where the bytes of the database go. Read-only; safe while a server runs.
pub async fn stats(config: &BackendConfig) -> Result<DbStats> {
    match config {
        BackendConfig::Sqlite { path } => {
            let path = path.clone();
            tokio::task::spawn_blocking(move || sqlite_stats(&path))
                .await
                .map_err(|e| err("stats", e))?
        }
        BackendConfig::Postgres { url, schema } => pg_stats(url, schema.as_deref()).await,
    }
}

/// What a retention sweep of `query` would remove now (counts and rough bytes), by the
/// planning the sweeper itself uses ([`RetentionStore::estimate_sweep`]). Read-only, like
/// [`stats`]: no migration, nothing written; safe while a server runs.
pub async fn retention_estimate(
    config: &BackendConfig,
    query: &SweepQuery,
) -> Result<RetentionEstimate> {
    let store = crate::backend::SqlStore::open_read_only(config).await?;
    let estimate = store.estimate_sweep(query).await;
    store.close_db().await;
    estimate
}

/// A consistent copy of the SQLite database at `dest` (`VACUUM INTO`: one read
/// transaction, so the copy holds exactly the writes committed when it began, compacted,
/// and it never blocks the server's writer). `dest` must not exist. Returns its size.
/// Postgres: an error pointing at `pg_dump`.
pub async fn backup(config: &BackendConfig, dest: &Path) -> Result<u64> {
    let Some(path) = sqlite_path(config) else {
        return Err(StoreError::Invalid(
            "`fawn db backup` copies a SQLite database; back Postgres up with pg_dump \
             (see docs/operations.md)"
                .to_string(),
        ));
    };
    if dest.exists() {
        return Err(StoreError::Conflict(format!(
            "{} exists already; give a new file",
            dest.display()
        )));
    }
    let (path, dest): (PathBuf, PathBuf) = (path.to_path_buf(), dest.to_path_buf());
    tokio::task::spawn_blocking(move || {
        if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| err(&format!("cannot create {}", dir.display()), e))?;
        }
        let conn = open_existing(&path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        let target = dest.to_str().ok_or_else(|| {
            StoreError::Invalid(format!("{} is not a UTF-8 path", dest.display()))
        })?;
        conn.execute("VACUUM INTO ?1", [target])
            .map_err(|e| err(&format!("copying to {}", dest.display()), e))?;
        std::fs::metadata(&dest)
            .map(|m| m.len())
            .map_err(|e| err(&format!("reading {}", dest.display()), e))
    })
    .await
    .map_err(|e| err("backup", e))?
}

/// What `fawn db vacuum` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vacuumed {
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Rewrites the SQLite database compactly and switches it to incremental auto-vacuum (so a
/// running server hands freed pages back from then on), then cuts the WAL. Holds the
/// write lock for as long as the rewrite takes: run it with the server stopped. Postgres:
/// an error pointing at Postgres' own tools.
pub async fn vacuum(config: &BackendConfig) -> Result<Vacuumed> {
    let Some(path) = sqlite_path(config) else {
        return Err(StoreError::Invalid(
            "`fawn db vacuum` is for SQLite; Postgres' autovacuum reuses freed space, and \
             VACUUM FULL returns it (see docs/operations.md)"
                .to_string(),
        ));
    };
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let (db, wal) = sqlite_file_sizes(&path);
        let conn = open_existing(&path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")
            .map_err(|e| err("VACUUM", e))?;
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(|e| err("checkpointing the WAL", e))?;
        drop(conn);
        let (db_after, wal_after) = sqlite_file_sizes(&path);
        Ok(Vacuumed {
            bytes_before: db + wal,
            bytes_after: db_after + wal_after,
        })
    })
    .await
    .map_err(|e| err("vacuum", e))?
}
