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
//!
//! **Group commit.** A commit writes every page the transaction touched to the WAL, which
//! is most of a small write's cost. When other writes are already queued for the writer, a
//! finishing transaction does not commit on its own: it stays inside the open group
//! transaction, hands the writer on, and waits until the group is committed by
//! the last member (the one that finds nobody waiting, or the group full). Its caller only
//! hears "committed" once the group's `COMMIT` has succeeded, so nothing acknowledged can be
//! lost; if the group fails, every member gets a transient error and its operation is
//! retried. Each member after the first runs inside its own savepoint, so one member's
//! failure rolls back only its own changes; the first is alone in the transaction until it
//! hands the writer on, so it rolls back the transaction itself. A member whose committer
//! vanished (a waiting task dropped) commits the group itself after a short wait.
//!
//! **Statement journals.** Every write runs inside the group transaction, where SQLite
//! first copies each page a *multi-row* statement touches into a statement journal, so that
//! the statement alone can be undone: `INSERT … SELECT`, a multi-row `VALUES`, and anything
//! with `RETURNING` (SQLite runs it as a trigger). A run's writes therefore avoid those
//! forms: a lookup then a one-row `INSERT … VALUES`, an affected-row count, or the row read
//! back by key (`checkpoints::insert_in`, `runs::finish_in`, run and thread creation).

use super::db::{Arg, DbErr, DbResult, Sql};
use rusqlite::types::{Value as LiteValue, ValueRef};
use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde_json::Value;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard, watch};

/// Extended result codes of unique and primary-key constraint violations.
const SQLITE_CONSTRAINT_PRIMARYKEY: i32 = 1555;
const SQLITE_CONSTRAINT_UNIQUE: i32 = 2067;

/// A group commits once it holds this many transactions or has been open this long, even
/// with writes still queued (bounds the wait of its first members).
const GROUP_MAX_MEMBERS: u32 = 32;
const GROUP_MAX_OPEN: Duration = Duration::from_millis(2);
/// A member that handed the writer on commits the group itself if nobody has after this.
const GROUP_FALLBACK: Duration = Duration::from_millis(20);
/// Failed groups remembered for their waiting members.
const FAILURES_KEPT: usize = 64;
/// Whenever the WAL restarts from its beginning, SQLite cuts the file back to this size
/// (without it the file keeps its high-water mark for as long as the server runs).
pub(crate) const JOURNAL_SIZE_LIMIT: i64 = 4 * 1024 * 1024;
/// Pages one maintenance step hands back to the file system (`PRAGMA incremental_vacuum`):
/// 256 KiB of 4 KiB pages, a step that held the writer for under a millisecond on the test
/// machine (256 pages: up to 12 ms). Steps come every 250 ms while idle.
pub(crate) const VACUUM_STEP_PAGES: i64 = 64;
/// While writes go on, a quarter of the file's pages may stay free
/// ([`Lite::shed_free_pages`]).
const SLACK_DIVISOR: i64 = 4;

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
    // Answers with a row, as `journal_mode` does.
    conn.query_row(
        &format!("PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}"),
        [],
        |_| Ok(()),
    )?;
    conn.set_prepared_statement_cache_capacity(256);
    Ok(conn)
}

/// The writer connection and the group transaction open on it.
pub(crate) struct Writer {
    /// `None` once closed.
    conn: Option<Connection>,
    open: Option<Group>,
    next_group: u64,
}

#[derive(Clone, Copy, Debug)]
struct Group {
    id: u64,
    members: u32,
    opened: Instant,
}

/// What members of a group share outside the writer's lock.
struct Shared {
    /// Tasks queued for the writer (a finishing member hands over only when this is > 0).
    waiting: AtomicUsize,
    /// How many times the writer has been taken: a task queued behind others keeps waiting
    /// for as long as this moves (see [`lock_writer`]).
    taken: AtomicU64,
    /// The highest group id that has finished (committed or failed).
    finished: watch::Sender<u64>,
    /// Recently failed groups and why.
    failures: Mutex<VecDeque<(u64, String)>>,
    /// Rows the writer has changed, as of its last commit (`sqlite3_total_changes`): a
    /// transaction that changed nothing (a claim finding no run) writes nothing to the WAL.
    changes: std::sync::atomic::AtomicU64,
}

/// Counts a task as waiting for the writer until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(n: &'a AtomicUsize) -> Waiting<'a> {
        n.fetch_add(1, Ordering::SeqCst);
        Waiting(n)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The connections of one SQLite database.
pub(crate) struct Lite {
    writer: Arc<AsyncMutex<Writer>>,
    shared: Arc<Shared>,
    /// Read connections; a read takes the first free one.
    readers: Arc<[Mutex<Option<Connection>>]>,
    next_reader: AtomicUsize,
    /// The connection of the background WAL checkpoints (which may wait for the disk, so
    /// they never hold a connection that reads need).
    checkpointer: Arc<Mutex<Option<Connection>>>,
    /// How long a write waits for the writer.
    acquire_timeout: Duration,
    /// The database file (its WAL is the same path with `-wal`).
    path: std::path::PathBuf,
    /// `PRAGMA auto_vacuum` of the file: 2 (incremental) lets maintenance return freed
    /// pages to the file system.
    auto_vacuum: i64,
}

/// What one maintenance step did (see [`Lite::maintain`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Maintained {
    /// False when the writer or a reader was busy: nothing was done.
    pub ran: bool,
    pub wal_truncated: bool,
    pub pages_vacuumed: u64,
    /// Pages still on the freelist afterwards.
    pub free_pages: u64,
}

impl Lite {
    pub fn open(path: &Path, readers: u32, acquire_timeout: Duration) -> rusqlite::Result<Lite> {
        let writer = connect(path)?;
        let auto_vacuum: i64 = writer.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
        let checkpointer = connect(path)?;
        // A truncating checkpoint that would have to wait for a reader or a writer gives up
        // at once instead (it is retried at the next idle moment).
        checkpointer.busy_timeout(Duration::ZERO)?;
        let readers = (0..readers.max(1))
            .map(|_| connect(path).map(|c| Mutex::new(Some(c))))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(Lite {
            writer: Arc::new(AsyncMutex::new(Writer {
                conn: Some(writer),
                open: None,
                next_group: 1,
            })),
            shared: Arc::new(Shared {
                waiting: AtomicUsize::new(0),
                taken: AtomicU64::new(0),
                finished: watch::channel(0).0,
                failures: Mutex::new(VecDeque::new()),
                changes: std::sync::atomic::AtomicU64::new(0),
            }),
            readers: readers.into(),
            next_reader: AtomicUsize::new(0),
            checkpointer: Arc::new(Mutex::new(Some(checkpointer))),
            acquire_timeout,
            path: path.to_path_buf(),
            auto_vacuum,
        })
    }

    /// An existing database opened for reading only (`fawn db stats`): every connection is
    /// read-only and there is no writer, so a write fails as on a closed database.
    pub fn open_read_only(path: &Path, readers: u32) -> rusqlite::Result<Lite> {
        let connect = || {
            let conn = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(Duration::from_secs(10))?;
            Ok(conn)
        };
        let readers = (0..readers.max(1))
            .map(|_| connect().map(|c| Mutex::new(Some(c))))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(Lite {
            writer: Arc::new(AsyncMutex::new(Writer {
                conn: None,
                open: None,
                next_group: 1,
            })),
            shared: Arc::new(Shared {
                waiting: AtomicUsize::new(0),
                taken: AtomicU64::new(0),
                finished: watch::channel(0).0,
                failures: Mutex::new(VecDeque::new()),
                changes: std::sync::atomic::AtomicU64::new(0),
            }),
            readers: readers.into(),
            next_reader: AtomicUsize::new(0),
            checkpointer: Arc::new(Mutex::new(None)),
            acquire_timeout: Duration::from_secs(10),
            path: path.to_path_buf(),
            auto_vacuum: 0,
        })
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A number that changes whenever a committed write changed rows: the maintenance
    /// loop sees the database idle while it stays put.
    pub fn writes_seen(&self) -> u64 {
        self.shared.changes.load(Ordering::Relaxed)
    }

    /// One step of idle maintenance, in three phases so that the writer is held only
    /// for work that does not wait for the disk: (1) with the writer, hand up to
    /// [`VACUUM_STEP_PAGES`] free pages back to the file system (incremental auto-vacuum
    /// databases only; a WAL commit, no sync); (2) without it, a passive checkpoint copies
    /// the WAL into the database and syncs it; (3) with the writer again,
    /// `wal_checkpoint(TRUNCATE)`, which finds nothing left to copy and cuts the WAL file to
    /// zero bytes. Writes of this process that arrive meanwhile wait on the async mutex,
    /// never on a thread; the checkpoint gives up at once if a reader still uses the WAL.
    /// `wait`: wait for the writer (and commit a group left open) instead of doing nothing
    /// when it is busy.
    pub async fn maintain(&self, wait: bool) -> Maintained {
        let Some(mut out) = self.vacuum_step(wait, 0).await else {
            return Maintained::default();
        };
        self.wal_checkpoint().await;
        let checkpointer = self.checkpointer.clone();
        let truncated = self
            .with_idle_writer(wait, move |_| {
                let cp = checkpointer
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let Some(cp) = cp.as_ref() else {
                    return Ok(false);
                };
                // (busy, frames in the WAL, frames checkpointed); busy = 1 when a reader
                // or a writer of another process kept it from finishing.
                let busy: i64 = cp
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
                    .or_else(|e| match e.sqlite_error_code() {
                        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Ok(1),
                        _ => Err(e),
                    })?;
                Ok(busy == 0)
            })
            .await;
        out.wal_truncated = truncated.unwrap_or(false);
        out
    }

    /// What a sweep does after deleting, while writes go on: one step handing free pages
    /// above a slack of a quarter of the file's pages back to the file system (up to
    /// [`VACUUM_STEP_PAGES`]), waiting for the writer, and nothing else. A busy database
    /// reuses its free pages for the writes that follow, so handing them all back only
    /// makes the file grow again; and the WAL is left to the background checkpointer (a
    /// checkpoint and a cut to zero bytes after each step made every step sync the disk
    /// and the WAL start again from nothing). The idle maintenance returns the rest.
    pub async fn shed_free_pages(&self) -> Maintained {
        self.vacuum_step(true, SLACK_DIVISOR)
            .await
            .unwrap_or_default()
    }

    /// With the writer: up to [`VACUUM_STEP_PAGES`] free pages back to the file system
    /// (incremental auto-vacuum databases only), keeping `1 / slack_divisor` of the file's
    /// pages free (`0`: keep none). `None` when it could not run.
    async fn vacuum_step(&self, wait: bool, slack_divisor: i64) -> Option<Maintained> {
        let vacuum = self.auto_vacuum == 2;
        self.with_idle_writer(wait, move |conn| {
            let int = |conn: &Connection, q: &str| -> rusqlite::Result<i64> {
                conn.query_row(q, [], |r| r.get(0))
            };
            let before = int(conn, "PRAGMA freelist_count")?;
            let mut out = Maintained {
                ran: true,
                free_pages: u64::try_from(before).unwrap_or(0),
                ..Maintained::default()
            };
            let slack = match slack_divisor {
                0 => 0,
                d => int(conn, "PRAGMA page_count")? / d,
            };
            let pages = (before - slack).min(VACUUM_STEP_PAGES);
            if vacuum && pages > 0 {
                // One result row per page freed: step it to the end.
                let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({pages})"))?;
                let mut rows = stmt.raw_query();
                while rows.next()?.is_some() {}
                drop(rows);
                let after = int(conn, "PRAGMA freelist_count")?;
                out.pages_vacuumed = u64::try_from(before - after).unwrap_or(0);
                out.free_pages = u64::try_from(after).unwrap_or(0);
            }
            Ok(out)
        })
        .await
    }

    /// Runs `f` on the writer connection on a blocking thread, holding the writer (no group
    /// open) meanwhile. `None` when the writer is busy (and `wait` is false), the database
    /// is closed, or `f` failed (logged).
    async fn with_idle_writer<T: Send + 'static>(
        &self,
        wait: bool,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Option<T> {
        let guard = if wait {
            self.lock_writer().await.ok()?
        } else {
            match self.writer.clone().try_lock_owned() {
                Ok(g) if g.open.is_none() && g.conn.is_some() => g,
                _ => return None,
            }
        };
        let shared = self.shared.clone();
        let done = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut guard = guard;
            if guard.open.is_some() {
                finish_group(&mut guard, &shared);
            }
            let out = match guard.conn.as_ref() {
                Some(conn) => f(conn).map(Some),
                None => Ok(None),
            };
            drop(guard);
            tracing::debug!(
                held_us = started.elapsed().as_micros() as u64,
                "SQLite maintenance held the writer"
            );
            out
        })
        .await;
        match done {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "SQLite maintenance failed");
                None
            }
            Err(e) => {
                tracing::debug!(error = %e, "SQLite maintenance task failed");
                None
            }
        }
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

    async fn lock_writer(&self) -> DbResult<OwnedMutexGuard<Writer>> {
        lock_writer(&self.writer, &self.shared, self.acquire_timeout).await
    }

    /// Runs one writing statement as a transaction of its own.
    pub async fn write(&self, sql: Sql) -> DbResult<(Vec<LiteRow>, u64)> {
        let mut tx = self.begin(false).await?;
        let out = tx.run(sql)?;
        tx.commit().await?;
        Ok(out)
    }

    /// Joins (or opens) the group transaction on the writer, inside a savepoint of its
    /// own unless it opens the group; the transaction holds the writer until commit or
    /// drop. An `urgent` transaction (someone is waiting on it, such as a client for its
    /// run's first event) commits the group as soon as it is done instead of handing the
    /// writer on.
    pub async fn begin(&self, urgent: bool) -> DbResult<LiteTx> {
        let mut guard = self.lock_writer().await?;
        let w = &mut *guard;
        if w.open.is_some() && w.conn.as_ref().is_some_and(Connection::is_autocommit) {
            // SQLite rolled the group's transaction back on an error (disk full, I/O):
            // fail that group's members and start afresh.
            finish_group(w, &self.shared);
        }
        let conn = w.conn.as_ref().ok_or_else(closed)?;
        let group = match w.open {
            Some(g) => g,
            None => {
                cached(conn, "BEGIN IMMEDIATE")?;
                let g = Group {
                    id: w.next_group,
                    members: 0,
                    opened: Instant::now(),
                };
                w.next_group += 1;
                w.open = Some(g);
                g
            }
        };
        // The group's first member is alone in its transaction (others join only after it
        // hands the writer on), so rolling it back is rolling the transaction back: it
        // needs no savepoint. Inside one, SQLite copies every page a member first touches
        // into the sub-journal (a 4 KiB copy and allocations per page), whether or not the
        // member ever rolls back.
        let savepoint = group.members > 0;
        if savepoint && let Err(e) = cached(conn, "SAVEPOINT member") {
            return Err(e);
        }
        if let Some(g) = w.open.as_mut() {
            g.members += 1;
        }
        Ok(LiteTx {
            guard: Some(guard),
            group: group.id,
            savepoint,
            urgent,
            shared: self.shared.clone(),
            writer: self.writer.clone(),
            acquire_timeout: self.acquire_timeout,
        })
    }

    /// A passive WAL checkpoint on its own connection, on a blocking thread (it syncs the
    /// database file).
    pub async fn wal_checkpoint(&self) {
        let checkpointer = self.checkpointer.clone();
        let done = tokio::task::spawn_blocking(move || {
            let guard = checkpointer
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

    /// The connections now: the writer, the readers and the WAL checkpointer.
    pub fn pool_stats(&self) -> crate::PoolStats {
        let busy_readers = self
            .readers
            .iter()
            .filter(|r| r.try_lock().is_err())
            .count();
        let writer_busy = usize::from(self.writer.try_lock().is_err());
        let checkpointing = usize::from(self.checkpointer.try_lock().is_err());
        let open = self.readers.len() + 2;
        let in_use = busy_readers + writer_busy + checkpointing;
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        crate::PoolStats {
            open: n(open),
            idle: n(open.saturating_sub(in_use)),
            in_use: n(in_use),
            max: n(open),
            waiting: n(self.shared.waiting.load(Ordering::Relaxed)),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.readers[0].lock().map(|g| g.is_none()).unwrap_or(true)
    }

    /// Closes every connection; later operations fail with "the database is closed".
    pub async fn close(&self) {
        for reader in self
            .readers
            .iter()
            .chain(std::iter::once(&*self.checkpointer))
        {
            let mut guard = reader
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            guard.take();
        }
        let mut w = self.writer.lock().await;
        finish_group(&mut w, &self.shared);
        w.conn.take();
    }
}

/// Waits for the writer, in turn (the queue is first come, first served). A long queue
/// that moves is not a failure: under a burst of thousands of runs a write may wait longer
/// than `acquire_timeout` behind the others, and failing it would fail a run that was only
/// slow. The wait fails when the writer has not changed hands for `acquire_timeout` (a
/// transaction that holds it and does not finish: a stuck disk, a leaked transaction).
async fn lock_writer(
    writer: &Arc<AsyncMutex<Writer>>,
    shared: &Shared,
    acquire_timeout: Duration,
) -> DbResult<OwnedMutexGuard<Writer>> {
    let waiting = Waiting::new(&shared.waiting);
    let lock = writer.clone().lock_owned();
    tokio::pin!(lock);
    let mut seen = shared.taken.load(Ordering::Relaxed);
    let guard = loop {
        match tokio::time::timeout(acquire_timeout, lock.as_mut()).await {
            Ok(guard) => break guard,
            Err(_) => {
                let now = shared.taken.load(Ordering::Relaxed);
                if now == seen {
                    return Err(DbErr::Store(crate::StoreError::Database(format!(
                        "timed out waiting for the database writer (held for over {} ms \
                         without being released)",
                        acquire_timeout.as_millis()
                    ))));
                }
                seen = now;
            }
        }
    };
    shared.taken.fetch_add(1, Ordering::Relaxed);
    drop(waiting);
    if guard.conn.is_none() {
        return Err(closed());
    }
    Ok(guard)
}

/// Runs a statement without parameters through the statement cache.
fn cached(conn: &Connection, sql: &str) -> DbResult<()> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.raw_execute())
        .map(|_| ())
        .map_err(DbErr::Lite)
}

/// Commits the open group (if any) and tells its waiting members how it went.
fn finish_group(w: &mut Writer, shared: &Shared) {
    let Some(group) = w.open.take() else {
        return;
    };
    let failure = match w.conn.as_ref() {
        None => Some("the database was closed".to_string()),
        Some(conn) if conn.is_autocommit() => {
            Some("the group transaction was rolled back by the database".to_string())
        }
        Some(conn) => match cached(conn, "COMMIT") {
            Ok(()) => {
                shared
                    .changes
                    .store(conn.total_changes(), Ordering::Relaxed);
                None
            }
            Err(e) => {
                let msg = match &e {
                    DbErr::Lite(e) => e.to_string(),
                    _ => "commit failed".to_string(),
                };
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                Some(msg)
            }
        },
    };
    if let Some(msg) = failure {
        tracing::warn!(group = group.id, error = %msg, "an SQLite group commit failed");
        let mut failures = shared
            .failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if failures.len() >= FAILURES_KEPT {
            failures.pop_front();
        }
        failures.push_back((group.id, msg));
    }
    shared.finished.send_replace(group.id);
}

/// How group `id` ended, once it has.
fn outcome(shared: &Shared, id: u64) -> DbResult<()> {
    let failures = shared
        .failures
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    match failures.iter().find(|(g, _)| *g == id) {
        Some((_, msg)) => Err(DbErr::GroupFailed(msg.clone())),
        None => Ok(()),
    }
}

/// A write transaction (a member of the open group): owns the writer until committed;
/// dropped uncommitted, it rolls back its own changes.
pub(crate) struct LiteTx {
    guard: Option<OwnedMutexGuard<Writer>>,
    group: u64,
    /// Runs inside savepoint `member` (every member but the group's first).
    savepoint: bool,
    urgent: bool,
    shared: Arc<Shared>,
    writer: Arc<AsyncMutex<Writer>>,
    acquire_timeout: Duration,
}

impl LiteTx {
    fn conn(&self) -> DbResult<&Connection> {
        self.guard
            .as_ref()
            .and_then(|g| g.conn.as_ref())
            .ok_or_else(closed)
    }

    pub fn run(&mut self, sql: Sql) -> DbResult<(Vec<LiteRow>, u64)> {
        run(self.conn()?, &sql)
    }

    /// Releases this member's savepoint (if it has one), then either commits the group
    /// (nobody waiting, or the group full) or hands the writer on and waits for the
    /// group's commit.
    pub async fn commit(mut self) -> DbResult<()> {
        let conn = self.conn()?;
        if self.savepoint {
            cached(conn, "RELEASE member")?;
        } else if conn.is_autocommit() {
            // The database rolled the transaction back (disk full, I/O): nothing of this
            // member is left to commit (a member in a savepoint learns it from RELEASE).
            return Err(DbErr::GroupFailed(
                "the transaction was rolled back by the database".into(),
            ));
        }
        let Some(mut guard) = self.guard.take() else {
            return Err(closed());
        };
        let hand_on = !self.urgent
            && guard.open.is_some_and(|g| {
                g.id == self.group
                    && g.members < GROUP_MAX_MEMBERS
                    && g.opened.elapsed() < GROUP_MAX_OPEN
            })
            && self.shared.waiting.load(Ordering::SeqCst) > 0;
        if !hand_on {
            finish_group(&mut guard, &self.shared);
            drop(guard);
            return outcome(&self.shared, self.group);
        }
        drop(guard);
        let mut finished = self.shared.finished.subscribe();
        let committed = matches!(
            tokio::time::timeout(
                GROUP_FALLBACK,
                finished.wait_for(|done| *done >= self.group),
            )
            .await,
            Ok(Ok(_))
        );
        if !committed {
            // Nobody committed the group in time (its would-be committer went away):
            // commit it here.
            let mut guard = lock_writer(&self.writer, &self.shared, self.acquire_timeout).await?;
            if guard.open.is_some_and(|g| g.id == self.group) {
                finish_group(&mut guard, &self.shared);
            }
        }
        outcome(&self.shared, self.group)
    }
}

impl Drop for LiteTx {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        if let Some(conn) = guard.conn.as_ref()
            && !conn.is_autocommit()
        {
            if self.savepoint {
                if let Err(e) = conn.execute_batch("ROLLBACK TO member; RELEASE member") {
                    tracing::warn!(error = %e, "rolling back an abandoned SQLite transaction failed");
                }
            } else {
                // The group's first member: the transaction holds nothing else.
                if let Err(e) = conn.execute_batch("ROLLBACK") {
                    tracing::warn!(error = %e, "rolling back an abandoned SQLite transaction failed");
                }
                if guard.open.is_some_and(|g| g.id == self.group) {
                    guard.open = None;
                    self.shared.finished.send_replace(self.group);
                }
            }
        }
        // Whatever other members left in the group must not wait for a committer that
        // will not come.
        if self.shared.waiting.load(Ordering::SeqCst) == 0 {
            finish_group(&mut guard, &self.shared);
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
            Arg::Blob(v) => stmt.raw_bind_parameter(i, v.as_deref()),
            Arg::Texts(_) | Arg::Ints(_) | Arg::Jsons(_) => {
                return Err(DbErr::invalid(format!(
                    "SQL parameter ${n} is an array, which only Postgres binds"
                )));
            }
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
            LiteValue::Blob(b) => match super::pack::unpack(b) {
                Some(text) => text
                    .map(Some)
                    .map_err(|e| DbErr::corrupt(format!("column {col}: {e}"))),
                None => String::from_utf8(b.clone())
                    .map(Some)
                    .map_err(|_| DbErr::corrupt(format!("column {col}: not UTF-8"))),
            },
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

    /// A JSON column: TEXT holding JSON, a packed BLOB (see `pack`), or a number a JSON
    /// function produced.
    pub fn opt_json(&self, col: &str) -> DbResult<Option<Value>> {
        let parse = |bytes: &[u8]| {
            serde_json::from_slice::<Value>(bytes)
                .map_err(|e| DbErr::corrupt(format!("column {col}: invalid JSON: {e}")))
        };
        match self.value(col)? {
            LiteValue::Null => Ok(None),
            LiteValue::Text(s) => parse(s.as_bytes()).map(Some),
            LiteValue::Blob(b) => match super::pack::unpack(b) {
                Some(text) => parse(
                    text.map_err(|e| DbErr::corrupt(format!("column {col}: {e}")))?
                        .as_bytes(),
                )
                .map(Some),
                None => parse(b).map(Some),
            },
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
        assert!(
            matches!(row.opt_int("k"), Err(DbErr::Store(crate::StoreError::Corrupt(m)))
                if m == "column k: expected an integer, found Text"),
            "text is not an integer"
        );
        assert!(matches!(
            row.opt_text("missing"),
            Err(DbErr::Store(crate::StoreError::Corrupt(m))) if m == "column missing: not in the result"
        ));
    }

    #[tokio::test]
    async fn a_dropped_transaction_rolls_back_and_frees_the_writer() {
        let (_dir, lite) = db().await;
        let mut tx = lite.begin(false).await.unwrap();
        tx.run(insert("gone")).unwrap();
        drop(tx);
        let mut tx = lite.begin(false).await.unwrap();
        tx.run(insert("kept")).unwrap();
        tx.commit().await.unwrap();
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
        // A background checkpoint while reads go on, then close.
        lite.wal_checkpoint().await;
        assert_eq!(count(&lite, "a"), 1);
        lite.close().await;
        assert!(lite.is_closed());
        lite.wal_checkpoint().await;
        let is_closed = |e: DbErr| matches!(e, DbErr::Store(crate::StoreError::Database(m)) if m == "the database is closed");
        assert!(is_closed(
            lite.read_all(Sql::new("SELECT 1")).err().unwrap()
        ));
        assert!(is_closed(lite.write(insert("b")).await.err().unwrap()));
        assert!(is_closed(lite.begin(false).await.err().unwrap()));
    }

    /// Spawns `op` on its own handle to the database and returns once it is queued for
    /// the writer (which the caller holds).
    async fn spawn_queued<F, T>(
        lite: &Arc<Lite>,
        op: impl FnOnce(Arc<Lite>) -> F,
    ) -> tokio::task::JoinHandle<T>
    where
        F: std::future::Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let handle = tokio::spawn(op(lite.clone()));
        while lite.shared.waiting.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        handle
    }

    /// A database whose writer is held by an open transaction that inserted "a".
    async fn writer_holding_a(urgent: bool) -> (tempfile::TempDir, Arc<Lite>, LiteTx) {
        let (dir, lite) = db().await;
        let lite = Arc::new(lite);
        let mut a = lite.begin(urgent).await.unwrap();
        a.run(insert("a")).unwrap();
        (dir, lite, a)
    }

    /// Queues a write of "b" behind the held writer.
    async fn queue_write_b(
        lite: &Arc<Lite>,
    ) -> tokio::task::JoinHandle<DbResult<(Vec<LiteRow>, u64)>> {
        spawn_queued(lite, |lite| async move { lite.write(insert("b")).await }).await
    }

    fn count(lite: &Lite, k: &str) -> i64 {
        lite.read_opt(Sql::new("SELECT COUNT(*) AS n FROM t WHERE k = $1").bind(k))
            .unwrap()
            .unwrap()
            .opt_int("n")
            .unwrap()
            .unwrap()
    }

    /// Returns once `n` tasks are queued for the writer.
    async fn queued(lite: &Lite, n: usize) {
        while lite.shared.waiting.load(Ordering::SeqCst) < n {
            tokio::task::yield_now().await;
        }
    }

    /// A write queued behind others that each hold the writer for a while waits longer
    /// than the acquire timeout (1 s here) in all, and succeeds: the queue moved. (Virtual
    /// time: the holders' 600 ms are the paused clock's, not the machine's.)
    #[tokio::test(start_paused = true)]
    async fn a_write_behind_a_moving_queue_outwaits_the_acquire_timeout() {
        let (_dir, lite, a) = writer_holding_a(true).await;
        let hold = Duration::from_millis(600);
        let mut holders = Vec::new();
        for n in 1..=3 {
            let l = lite.clone();
            holders.push(tokio::spawn(async move {
                let tx = l.begin(true).await?;
                tokio::time::sleep(hold).await;
                tx.commit().await
            }));
            queued(&lite, n).await;
        }
        let started = tokio::time::Instant::now();
        let w = tokio::spawn({
            let l = lite.clone();
            async move { l.write(insert("w")).await }
        });
        queued(&lite, 4).await;
        tokio::time::sleep(hold).await;
        a.commit().await.unwrap();
        for h in holders {
            h.await.unwrap().unwrap();
        }
        w.await.unwrap().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(2400));
        assert_eq!(count(&lite, "w"), 1);
    }

    /// A writer held without being released fails the writes queued behind it after the
    /// acquire timeout, with a message that says so; the holder itself still commits.
    #[tokio::test(start_paused = true)]
    async fn a_write_behind_a_stuck_writer_times_out() {
        let (_dir, lite, a) = writer_holding_a(true).await;
        let started = tokio::time::Instant::now();
        let b = queue_write_b(&lite).await;
        match b.await.unwrap() {
            Err(DbErr::Store(crate::StoreError::Database(m))) => assert_eq!(
                m,
                "timed out waiting for the database writer (held for over 1000 ms without \
                 being released)"
            ),
            other => panic!("expected a timeout, got {:?}", other.map(|r| r.1)),
        }
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        a.commit().await.unwrap();
        assert_eq!(count(&lite, "a"), 1);
        assert_eq!(count(&lite, "b"), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_share_commits_and_are_visible_once_acknowledged() {
        let (_dir, lite) = db().await;
        let lite = Arc::new(lite);
        let before = *lite.shared.finished.borrow();
        let mut tasks = Vec::new();
        for t in 0..32 {
            let lite = lite.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..10 {
                    let k = format!("{t}-{i}");
                    lite.write(insert(&k)).await.unwrap();
                    // Acknowledged means committed: another connection sees it.
                    assert_eq!(count(&lite, &k), 1, "{k} not visible after its commit");
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let all = lite
            .read_opt(Sql::new("SELECT COUNT(*) AS n FROM t"))
            .unwrap();
        assert_eq!(all.unwrap().opt_int("n").unwrap(), Some(320));
        let groups = *lite.shared.finished.borrow() - before;
        assert!(
            groups < 320,
            "320 writes took {groups} commits: none were grouped"
        );
    }

    #[tokio::test]
    async fn a_failing_member_rolls_back_only_its_own_changes() {
        let (_dir, lite) = db().await;
        let lite = Arc::new(lite);
        lite.write(insert("dup")).await.unwrap();
        let mut a = lite.begin(false).await.unwrap();
        a.run(insert("a")).unwrap();
        let b = spawn_queued(&lite, |lite| async move {
            let mut tx = lite.begin(false).await?;
            tx.run(insert("b"))?;
            tx.run(insert("dup"))?;
            tx.commit().await
        })
        .await;
        // `a` hands the writer to `b` (same group), `b` fails and rolls back its own
        // savepoint, and the group with `a`'s row commits.
        a.commit().await.unwrap();
        assert!(matches!(b.await.unwrap(), Err(DbErr::Lite(ref e)) if is_unique_violation(e)));
        assert_eq!(count(&lite, "a"), 1);
        assert_eq!(count(&lite, "b"), 0);
    }

    #[tokio::test]
    async fn a_member_commits_the_group_itself_when_its_committer_vanishes() {
        let (_dir, lite, a) = writer_holding_a(false).await;
        let b = queue_write_b(&lite).await;
        let commit = a.commit();
        tokio::pin!(commit);
        // `a` sees `b` waiting, hands the writer on and waits for the group's commit…
        assert!(futures::poll!(&mut commit).is_pending());
        // …but `b` is gone before it ever runs.
        b.abort();
        assert!(matches!(b.await, Err(e) if e.is_cancelled()));
        commit.await.unwrap();
        assert_eq!(count(&lite, "a"), 1);
        assert_eq!(count(&lite, "b"), 0);
        // The writer is free and no group is left open.
        lite.write(insert("c")).await.unwrap();
        assert_eq!(count(&lite, "c"), 1);
    }

    #[tokio::test]
    async fn an_urgent_transaction_commits_without_waiting_for_queued_writes() {
        let (_dir, lite, a) = writer_holding_a(true).await;
        let b = queue_write_b(&lite).await;
        let commit = a.commit();
        tokio::pin!(commit);
        // Committed at once, with `b` still queued (it has not run since).
        assert!(matches!(
            futures::poll!(&mut commit),
            std::task::Poll::Ready(Ok(()))
        ));
        assert_eq!(count(&lite, "a"), 1);
        assert_eq!(count(&lite, "b"), 0);
        b.await.unwrap().unwrap();
        assert_eq!(count(&lite, "b"), 1);
    }

    #[tokio::test]
    async fn only_members_after_the_first_pay_for_a_savepoint() {
        let (_dir, lite, mut a) = writer_holding_a(false).await;
        assert!(!a.savepoint);
        // No savepoint `member` exists to release in the group's first member.
        assert!(a.run(Sql::new("RELEASE member")).is_err());
        let b = spawn_queued(&lite, |lite| async move {
            let mut tx = lite.begin(false).await?;
            let joined = tx.savepoint;
            tx.run(insert("b"))?;
            tx.commit().await.map(|()| joined)
        })
        .await;
        a.commit().await.unwrap();
        assert!(
            b.await.unwrap().unwrap(),
            "the second member joined inside a savepoint"
        );
        assert_eq!(count(&lite, "a") + count(&lite, "b"), 2);
    }

    #[tokio::test]
    async fn a_dropped_first_member_takes_its_group_with_it_and_the_queue_goes_on() {
        // `a` opens the group (no savepoint: it is alone in the transaction).
        let (_dir, lite, a) = writer_holding_a(false).await;
        let b = queue_write_b(&lite).await;
        drop(a);
        // `b` runs in a group of its own, not inside the rolled-back one.
        b.await.unwrap().unwrap();
        assert_eq!(count(&lite, "a"), 0);
        assert_eq!(count(&lite, "b"), 1);
        assert!(lite.writer.lock().await.open.is_none());
    }

    #[tokio::test]
    async fn a_group_the_database_rolled_back_is_not_joined() {
        let (_dir, lite, mut a) = writer_holding_a(false).await;
        // What SQLite does on some errors (disk full, I/O): the transaction is gone.
        a.run(Sql::new("ROLLBACK")).unwrap();
        let b = queue_write_b(&lite).await;
        // The group's transaction went with it: `a` (its first member) is told so.
        assert!(matches!(a.commit().await, Err(DbErr::GroupFailed(_))));
        // `b` starts a new group instead of writing outside any transaction and then
        // being told its (long gone) group failed.
        b.await.unwrap().unwrap();
        assert_eq!(count(&lite, "a"), 0);
        assert_eq!(count(&lite, "b"), 1);
    }
}
