//! Keeping a database in shape: SQLite's WAL and freed pages handed back while idle, the
//! guard against a database of a newer Fawn, and the operator commands (`admin`).

use crate::support::{TestDb, claimed_run, conformance, obj, put_step, say};
use fawn_checkpoint::*;
use fawn_state::ThreadState;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

conformance!(store: ; config: a_database_of_a_newer_fawn_is_refused_unchanged);

fn sqlite_path(config: &BackendConfig) -> PathBuf {
    match config {
        BackendConfig::Sqlite { path } => path.clone(),
        BackendConfig::Postgres { .. } => panic!("not SQLite"),
    }
}

fn wal_len(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_os_string();
    wal.push("-wal");
    std::fs::metadata(PathBuf::from(wal))
        .map(|m| m.len())
        .unwrap_or(0)
}

/// `size` characters that deflate poorly (six bits of noise each), different per `seed`:
/// SQLite stores large values deflated, and these tests measure pages.
fn noise(seed: usize, size: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut x = (seed as u64).wrapping_mul(2_654_435_761) | 1;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(ALPHABET[(x % 64) as usize])
        })
        .collect()
}

/// Writes `steps` checkpoints of ~`size` bytes each on a new thread; returns the thread id
/// and every checkpoint id.
async fn burst(db: &dyn Persistence, steps: usize, size: usize) -> (String, Vec<String>) {
    let thread = db
        .create_thread(NewThread::default())
        .await
        .unwrap()
        .thread_id;
    let mut parent: Option<(String, ThreadState)> = None;
    let mut ids = Vec::new();
    for i in 0..steps {
        let text = format!("{i} {}", noise(i, size));
        let (id, state) = put_step(
            db,
            &thread,
            parent.as_ref().map(|(id, s)| (id.as_str(), s)),
            None,
            json!({"step": i}),
            vec![("agent", say(&format!("m{i}"), &text))],
        )
        .await;
        ids.push(id.clone());
        parent = Some((id, state));
    }
    (thread, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_sqlite_database_uses_incremental_auto_vacuum() {
    let t = TestDb::sqlite();
    let db = t.open().await;
    let path = sqlite_path(&t.config);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: i64 = conn
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, 2, "a new database is INCREMENTAL");
    drop(conn);
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_cut_to_nothing_by_maintenance() {
    let t = TestDb::sqlite();
    let db = t.open().await;
    let path = sqlite_path(&t.config);
    burst(&*db, 150, 8 * 1024).await;
    // Right after the burst (the background maintenance waits for a second of quiet).
    assert!(wal_len(&path) > 0, "the burst went through the WAL");
    let truncations = || {
        fawn_telemetry::metrics()
            .db_maintenance
            .with_label_values(&["wal_truncate"])
            .get()
    };
    let counted = truncations();
    let m = db.maintain().await;
    assert!(m.ran, "{m:?}");
    assert!(m.wal_truncated, "{m:?}");
    assert!(truncations() > counted, "counted in /metrics");
    assert_eq!(m.wal_bytes, 0, "{m:?}");
    assert_eq!(wal_len(&path), 0);
    // Still a working database afterwards.
    let (thread, ids) = burst(&*db, 3, 10).await;
    let latest = db.get_checkpoint(&thread, "", None).await.unwrap().unwrap();
    assert_eq!(latest.checkpoint_id, ids[2]);
    db.close().await;
}

/// What a sweep does after deleting while writes go on: free pages beyond a quarter of the
/// file go back, the rest stay for the writes that follow, and the WAL is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_database_keeps_a_quarter_of_its_pages_free() {
    let t = TestDb::sqlite();
    let db = t.open().await;
    let path = sqlite_path(&t.config);
    let (kept, _) = burst(&*db, 40, 32 * 1024).await;
    let (gone, _) = burst(&*db, 100, 32 * 1024).await;
    assert!(db.maintain().await.wal_truncated);
    assert!(db.delete_thread(&gone).await.unwrap());
    assert!(wal_len(&path) > 0, "the deletion went through the WAL");
    let mut vacuumed = 0;
    let mut last = db.shed_free_pages().await;
    for _ in 0..200 {
        assert!(last.ran, "{last:?}");
        assert!(!last.wal_truncated, "{last:?}");
        vacuumed += last.pages_vacuumed;
        if last.pages_vacuumed == 0 {
            break;
        }
        last = db.shed_free_pages().await;
    }
    assert!(vacuumed > 200, "pages handed back: {vacuumed}");
    // The file is cut when the WAL is next copied into it; a reader sees the pages now.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    let pages = u64::try_from(pages).unwrap();
    drop(conn);
    assert!(
        last.free_pages > 0
            && last.free_pages <= pages / 4 + 1
            && last.free_pages + 64 >= pages / 4,
        "a quarter of {pages} pages stays free: {last:?}"
    );
    assert!(wal_len(&path) > 0, "the WAL was not cut");
    // Nothing more to shed; the idle maintenance takes the rest.
    assert_eq!(db.shed_free_pages().await.pages_vacuumed, 0);
    let mut m = db.maintain().await;
    for _ in 0..200 {
        if m.free_pages == 0 {
            break;
        }
        m = db.maintain().await;
    }
    assert_eq!(m.free_pages, 0, "{m:?}");
    assert!(db.get_checkpoint(&kept, "", None).await.unwrap().is_some());
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freed_pages_go_back_to_the_file_system() {
    let t = TestDb::sqlite();
    let db = t.open().await;
    let path = sqlite_path(&t.config);
    let (thread, _) = burst(&*db, 100, 32 * 1024).await;
    let m = db.maintain().await;
    let full = m.db_bytes;
    assert!(full > 2_000_000, "{m:?}");
    assert!(db.delete_thread(&thread).await.unwrap());
    // Each step returns at most 64 pages; step until nothing is left.
    let mut vacuumed = 0;
    let mut last = db.maintain().await;
    for _ in 0..200 {
        vacuumed += last.pages_vacuumed;
        if last.free_pages == 0 {
            break;
        }
        last = db.maintain().await;
    }
    assert_eq!(last.free_pages, 0, "{last:?}");
    assert!(vacuumed > 400, "pages handed back: {vacuumed}");
    assert!(
        last.db_bytes < full / 4,
        "the file shrank: {full} -> {}",
        last.db_bytes
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), last.db_bytes);
    db.close().await;
}

/// Marks the database as migrated by a Fawn newer than this one.
async fn pretend_newer(config: &BackendConfig) {
    match config {
        BackendConfig::Sqlite { path } => {
            let conn = rusqlite::Connection::open(path).unwrap();
            conn.execute(
                "INSERT INTO _sqlx_migrations (version, description, success, checksum, \
                 execution_time) VALUES (9999, 'from the future', 1, x'00', 0)",
                [],
            )
            .unwrap();
        }
        BackendConfig::Postgres { url, schema } => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO \"{}\"._sqlx_migrations (version, description, success, checksum, \
                 execution_time) VALUES (9999, 'from the future', true, '\\x00', 0)",
                schema.as_deref().unwrap()
            )))
            .execute(&mut conn)
            .await
            .unwrap();
            conn.close().await.unwrap();
        }
    }
}

/// What a refused start must leave as it was: SQLite's file bytes; Postgres' migration
/// rows and the tables of the schema.
async fn fingerprint(config: &BackendConfig) -> Vec<u8> {
    match config {
        BackendConfig::Sqlite { path } => std::fs::read(path).unwrap(),
        BackendConfig::Postgres { url, schema } => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            let rows: Vec<(String,)> = sqlx::query_as(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = $1 ORDER BY table_name",
            )
            .bind(schema.as_deref().unwrap())
            .fetch_all(&mut conn)
            .await
            .unwrap();
            // search_path is not set on this connection: read the rows schema-qualified.
            let versions: Vec<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT version FROM \"{}\"._sqlx_migrations ORDER BY version",
                schema.as_deref().unwrap()
            )))
            .fetch_all(&mut conn)
            .await
            .unwrap();
            conn.close().await.unwrap();
            format!("{rows:?} {versions:?}").into_bytes()
        }
    }
}

/// A database a newer Fawn migrated is refused at start, with both versions named, and
/// nothing in it changes.
async fn a_database_of_a_newer_fawn_is_refused_unchanged(config: BackendConfig) {
    let db = open(&config).await.unwrap();
    let thread = db.create_thread(NewThread::default()).await.unwrap();
    db.close().await;
    pretend_newer(&config).await;
    let before = fingerprint(&config).await;
    let err = match open(&config).await {
        Ok(_) => panic!("a newer database was opened"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("newer Fawn"), "{err}");
    assert!(err.contains("9999"), "names the database's version: {err}");
    // The newest migration this build has: one file per migration.
    let dir = if matches!(config, BackendConfig::Sqlite { .. }) {
        "sqlite"
    } else {
        "postgres"
    };
    let known = std::fs::read_dir(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../migrations")
            .join(dir),
    )
    .unwrap()
    .filter(|e| {
        e.as_ref()
            .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".sql"))
    })
    .count();
    assert!(
        err.contains(&format!("up to {known}")),
        "names this binary's version: {err}"
    );
    assert_eq!(fingerprint(&config).await, before, "left unchanged");
    // Once this binary's own migrations are the newest again, it opens and the data is
    // all there.
    match &config {
        BackendConfig::Sqlite { path } => {
            let conn = rusqlite::Connection::open(path).unwrap();
            conn.execute("DELETE FROM _sqlx_migrations WHERE version = 9999", [])
                .unwrap();
        }
        BackendConfig::Postgres { url, schema } => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM \"{}\"._sqlx_migrations WHERE version = 9999",
                schema.as_deref().unwrap()
            )))
            .execute(&mut conn)
            .await
            .unwrap();
            conn.close().await.unwrap();
        }
    }
    let db = open(&config).await.unwrap();
    assert!(db.get_thread(&thread.thread_id).await.unwrap().is_some());
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_on_sqlite_and_postgres() {
    let mut dbs = vec![TestDb::sqlite()];
    dbs.extend(TestDb::postgres());
    for t in &dbs {
        let db = t.open().await;
        let (big, _) = burst(&*db, 20, 8192).await;
        let (small, _) = burst(&*db, 2, 10).await;
        db.maintain().await;
        let stats = admin::stats(&t.config).await.unwrap();
        assert_eq!(stats.backend, db.backend());
        assert!(stats.db_bytes > 80_000, "{stats:?}");
        assert!(stats.schema_version >= 7, "{stats:?}");
        let checkpoints = stats
            .objects
            .iter()
            .find(|o| o.name == "checkpoints")
            .expect("the checkpoints table is listed");
        assert_eq!(checkpoints.kind, "table");
        // Postgres compresses large values (TOAST), SQLite does not.
        let floor = if db.backend() == "sqlite" {
            80_000
        } else {
            16_000
        };
        assert!(checkpoints.bytes > floor, "{stats:?}");
        assert_eq!(stats.largest_threads[0].thread_id, big, "{stats:?}");
        assert!(stats.largest_threads.iter().any(|t| t.thread_id == small));
        if db.backend() == "sqlite" {
            assert_eq!(stats.auto_vacuum.as_deref(), Some("incremental"));
        }
        db.close().await;
    }
}

/// A backup taken while 16 writers put checkpoints holds every checkpoint acknowledged
/// before it began, and opens as a working database.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_taken_under_load_holds_every_acknowledged_checkpoint() {
    let t = TestDb::sqlite();
    let db = t.open().await;
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (enough_tx, mut enough_rx) = tokio::sync::watch::channel(0usize);
    let enough_tx = Arc::new(enough_tx);
    let mut writers = Vec::new();
    for w in 0..16 {
        let (db, acked, stop, enough_tx) =
            (db.clone(), acked.clone(), stop.clone(), enough_tx.clone());
        writers.push(tokio::spawn(async move {
            let thread = db
                .create_thread(NewThread {
                    metadata: obj(json!({"writer": w})),
                    ..Default::default()
                })
                .await
                .unwrap()
                .thread_id;
            let mut parent: Option<(String, ThreadState)> = None;
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let (id, state) = put_step(
                    &*db,
                    &thread,
                    parent.as_ref().map(|(id, s)| (id.as_str(), s)),
                    None,
                    json!({"step": i}),
                    vec![("agent", say(&format!("w{w}m{i}"), &"y".repeat(512)))],
                )
                .await;
                let n = {
                    let mut a = acked.lock().unwrap();
                    a.push((thread.clone(), id.clone()));
                    a.len()
                };
                enough_tx.send_replace(n);
                parent = Some((id, state));
                i += 1;
            }
        }));
    }
    enough_rx.wait_for(|n| *n >= 200).await.unwrap();
    let before: Vec<(String, String)> = acked.lock().unwrap().clone();
    let dest = sqlite_path(&t.config).with_file_name("backup.db");
    let size = admin::backup(&t.config, &dest).await.unwrap();
    assert!(size > 0);
    // The writers went on meanwhile.
    let during = acked.lock().unwrap().len();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in writers {
        w.await.unwrap();
    }
    db.close().await;
    assert!(during >= before.len());
    let copy = open(&BackendConfig::Sqlite { path: dest.clone() })
        .await
        .unwrap();
    for (thread, id) in &before {
        assert!(
            copy.get_checkpoint(thread, "", Some(id))
                .await
                .unwrap()
                .is_some(),
            "checkpoint {id} of {thread} acknowledged before the backup is in it"
        );
    }
    // A working database: it takes new writes.
    let (thread, ids) = burst(&*copy, 2, 10).await;
    assert_eq!(
        copy.get_checkpoint(&thread, "", None)
            .await
            .unwrap()
            .unwrap()
            .checkpoint_id,
        ids[1]
    );
    copy.close().await;
    // A second backup onto the same file is refused (never overwritten).
    let again = admin::backup(&BackendConfig::Sqlite { path: dest.clone() }, &dest).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vacuum_converts_an_old_database_and_shrinks_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    // A database as earlier Fawns made it: auto_vacuum NONE.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .unwrap();
        // A table fixes the file's auto_vacuum mode (NONE) before Fawn's migrations run.
        conn.execute_batch("CREATE TABLE made_before (x INTEGER)")
            .unwrap();
    }
    let config = BackendConfig::Sqlite { path: path.clone() };
    let db = open(&config).await.unwrap();
    let (thread, _) = burst(&*db, 60, 16 * 1024).await;
    let (kept, kept_ids) = burst(&*db, 3, 100).await;
    assert!(db.delete_thread(&thread).await.unwrap());
    let m = db.maintain().await;
    assert_eq!(m.pages_vacuumed, 0, "NONE: nothing is handed back: {m:?}");
    assert!(m.free_pages > 100, "{m:?}");
    db.close().await;
    let v = admin::vacuum(&config).await.unwrap();
    assert!(
        v.bytes_after * 2 < v.bytes_before,
        "vacuum shrank the file: {v:?}"
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: i64 = conn
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, 2);
    drop(conn);
    let db = open(&config).await.unwrap();
    assert_eq!(
        db.get_checkpoint(&kept, "", None)
            .await
            .unwrap()
            .unwrap()
            .checkpoint_id,
        kept_ids[2]
    );
    db.close().await;
}

/// What docs/operations.md tells Postgres operators: `pg_dump` of Fawn's schema, then
/// `pg_restore` into an empty database, gives a store that opens (no migration to run)
/// with every checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_dump_and_pg_restore_bring_a_schema_back() {
    use sqlx::Connection;
    let Some(t) = TestDb::postgres() else {
        return;
    };
    let has = |tool: &str| {
        std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has("pg_dump") || !has("pg_restore") {
        eprintln!("\n!!!!! pg_dump/pg_restore not installed: SKIPPING the restore test !!!!!\n");
        return;
    }
    let BackendConfig::Postgres { url, schema } = t.config.clone() else {
        unreachable!()
    };
    let schema = schema.unwrap();
    let db = t.open().await;
    let (thread, ids) = burst(&*db, 5, 2048).await;
    db.close().await;
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("fawn.dump");
    let out = std::process::Command::new("pg_dump")
        .args(["--format=custom", "--schema", &schema, "--file"])
        .arg(&dump)
        .arg(&url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = format!("fawn_restore_{}", uuid::Uuid::new_v4().simple());
    let (base, _) = url.rsplit_once('/').unwrap();
    let restored_url = format!("{base}/{name}");
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut admin)
        .await
        .unwrap();
    let out = std::process::Command::new("pg_restore")
        .args(["--no-owner", "--dbname", &restored_url])
        .arg(&dump)
        .output()
        .unwrap();
    let restored = BackendConfig::Postgres {
        url: restored_url.clone(),
        schema: Some(schema.clone()),
    };
    let checked = async {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let copy = open(&restored).await.unwrap();
        let latest = copy
            .get_checkpoint(&thread, "", None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(latest.checkpoint_id, ids[4]);
        assert_eq!(latest.state.messages.len(), 5);
        copy.close().await;
    };
    checked.await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE \"{name}\" WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    admin.close().await.unwrap();
}

/// Snapshots of 256 bytes or more are stored deflated on SQLite, smaller ones as text, and
/// a thread whose chain mixes both reads back every state after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_snapshots_are_packed_and_read_back() {
    let t = TestDb::sqlite();
    let db = t.open().await;
    let (thread, ids) = burst(&*db, 40, 20).await;
    db.close().await;
    let path = sqlite_path(&t.config);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let kinds: Vec<(String, i64, i64)> = conn
        .prepare(
            "SELECT typeof(snapshot), COUNT(*), SUM(length(snapshot)) FROM checkpoints \
             WHERE snapshot IS NOT NULL GROUP BY 1 ORDER BY 1",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(kinds.len(), 2, "text and packed snapshots: {kinds:?}");
    assert_eq!(kinds[0].0, "blob");
    assert_eq!(kinds[1].0, "text");
    drop(conn);
    let db = open(&t.config).await.unwrap();
    let all = db
        .list_checkpoints(&thread, &HistoryQuery::default())
        .await
        .unwrap();
    assert_eq!(all.len(), ids.len());
    for c in &all {
        let step = ids.iter().position(|id| *id == c.checkpoint_id).unwrap();
        assert_eq!(c.state.messages.len(), step + 1, "{}", c.checkpoint_id);
    }
    let storage = db.thread_storage(&thread).await.unwrap();
    assert!(format!("{storage:?}").contains("messages"), "{storage:?}");
    db.close().await;
}

/// A row as an earlier Fawn wrote it: the text of a packed value (`\0fz1` + deflate).
fn inflate(bytes: &[u8]) -> String {
    use std::io::Read;
    let body = bytes.strip_prefix(b"\0fz1").expect("a packed value");
    let mut text = String::new();
    flate2::read::DeflateDecoder::new(body)
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// Everything the packed columns feed, read through the store.
async fn read_back(db: &dyn Persistence, thread: &str, run: &str) -> Vec<String> {
    let mut out = Vec::new();
    out.push(format!("{:?}", db.get_thread(thread).await.unwrap()));
    out.push(format!("{:?}", db.get_run(run).await.unwrap()));
    out.push(format!(
        "{:?}",
        db.thread_events(thread, &EventQuery::default())
            .await
            .unwrap()
    ));
    for c in db
        .list_checkpoints(thread, &HistoryQuery::default())
        .await
        .unwrap()
    {
        out.push(format!("{} {:?} {:?}", c.checkpoint_id, c.state, c.writes));
    }
    // Thread search filters on values look into packed rows too.
    for (filter, hits) in [
        (json!({"title": "packed"}), 1),
        (json!({"title": "other"}), 0),
        (json!({"messages": [{"content": "m"}]}), 1),
        (json!({"messages": [{"content": "n"}]}), 0),
    ] {
        let page = db
            .search_threads(&ThreadQuery {
                filter: ThreadFilter {
                    values: Some(obj(filter.clone())),
                    ..ThreadFilter::default()
                },
                limit: 10,
                ..ThreadQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(page.items.len(), hits, "values filter {filter}");
        assert_eq!(page.total, hits as u64, "values filter {filter}");
        out.push(format!("{:?}", page.items));
    }
    out
}

/// On SQLite, large checkpoint writes, thread values, run kwargs and journal contents are
/// stored deflated (BLOBs), and the same rows stored as text, as earlier versions wrote
/// them, read back identically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_packed_on_sqlite_and_text_rows_of_older_versions_read_the_same() {
    let t = TestDb::sqlite();
    let db = t.open().await;
    let (thread, _) = burst(&*db, 6, 2000).await;
    let big = format!("m {}", "long words ".repeat(300));
    let kwargs = obj(json!({"input": {"messages": [{"role": "user", "content": big}]}}));
    let run = claimed_run(
        &*db,
        NewRun {
            thread_id: thread.clone(),
            assistant_id: "asst".into(),
            kwargs,
            ..Default::default()
        },
    )
    .await;
    let event = |text: &str| NewRunEvent {
        event_type: "llm.human.input".into(),
        category: "message".into(),
        content: json!({"text": text}),
        metadata: Default::default(),
        created_at: chrono::Utc::now(),
    };
    db.append_run_events(&thread, &run.run_id, vec![event(&big), event("short")])
        .await
        .unwrap();
    db.finish_run(
        &run.run_id,
        "w",
        RunFinish {
            status: RunStatus::Success,
            error: None,
            stop_reason: None,
            thread: ThreadSummary {
                values: Some(
                    json!({"title": "packed", "messages": [{"content": "m"}, {"content": big}]}),
                ),
                ..ThreadSummary::default()
            },
        },
    )
    .await
    .unwrap();
    let packed = read_back(&*db, &thread, &run.run_id).await;
    db.close().await;

    let columns = [
        ("checkpoints", "writes"),
        ("checkpoints", "snapshot"),
        ("threads", "state_values"),
        ("runs", "kwargs"),
        ("run_events", "content"),
    ];
    let conn = rusqlite::Connection::open(sqlite_path(&t.config)).unwrap();
    let blobs = |table: &str, column: &str| -> i64 {
        conn.query_row(
            &format!("SELECT COUNT(*) FROM {table} WHERE typeof({column}) = 'blob'"),
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    for (table, column) in columns {
        assert!(blobs(table, column) > 0, "{table}.{column} is packed");
    }
    // The small journal row stays text.
    let texts: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM run_events WHERE typeof(content) = 'text'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(texts, 1);
    // Write every packed value back as text, the way earlier versions stored it.
    for (table, column) in columns {
        let rows: Vec<(i64, Vec<u8>)> = conn
            .prepare(&format!(
                "SELECT rowid, {column} FROM {table} WHERE typeof({column}) = 'blob'"
            ))
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        for (rowid, bytes) in rows {
            conn.execute(
                &format!("UPDATE {table} SET {column} = ?1 WHERE rowid = ?2"),
                rusqlite::params![inflate(&bytes), rowid],
            )
            .unwrap();
        }
        assert_eq!(blobs(table, column), 0);
    }
    drop(conn);
    let db = open(&t.config).await.unwrap();
    let text = read_back(&*db, &thread, &run.run_id).await;
    assert_eq!(packed, text);
    db.close().await;
}
