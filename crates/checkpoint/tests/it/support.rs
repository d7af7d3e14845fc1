//! Runs each conformance case against SQLite (a temp file) and Postgres (a fresh schema in
//! `TEST_DATABASE_URL`, dropped afterwards).

use fawn_checkpoint::{BackendConfig, Persistence, open};
use fawn_state::{Message, StateUpdate, ThreadState};
use serde_json::{Map, Value};
use std::future::Future;
use std::sync::Arc;

/// A database for one test; dropping it removes it.
pub struct TestDb {
    pub config: BackendConfig,
    _dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
}

impl TestDb {
    pub fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        TestDb {
            config: BackendConfig::Sqlite {
                path: dir.path().join("nested").join("fawn.db"),
            },
            _dir: Some(dir),
            pg: None,
        }
    }

    /// Panics when `TEST_DATABASE_URL` is not set; `None` (saying so) only when
    /// `FAWN_SKIP_POSTGRES_TESTS` asks to skip the Postgres tests.
    pub fn postgres() -> Option<TestDb> {
        let Ok(url) = std::env::var("TEST_DATABASE_URL") else {
            // A Postgres test passes only by running: without a database it fails, unless
            // skipping was asked for by name (and then says so).
            if std::env::var("FAWN_SKIP_POSTGRES_TESTS").is_ok_and(|v| !v.is_empty() && v != "0") {
                eprintln!("FAWN_SKIP_POSTGRES_TESTS is set: SKIPPED a Postgres persistence test");
                return None;
            }
            panic!(
                "TEST_DATABASE_URL is not set: this Postgres persistence test needs it \
                 (e.g. postgres://postgres@127.0.0.1:5432/test, as `make test` sets), \
                 or set FAWN_SKIP_POSTGRES_TESTS=1 to skip the Postgres tests"
            );
        };
        let schema = format!("fawn_test_{}", uuid::Uuid::new_v4().simple());
        Some(TestDb {
            config: BackendConfig::Postgres {
                url: url.clone(),
                schema: Some(schema.clone()),
            },
            _dir: None,
            pg: Some((url, schema)),
        })
    }

    pub async fn open(&self) -> Arc<dyn Persistence> {
        open(&self.config).await.expect("open backend")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((url, schema)) = self.pg.take() else {
            return;
        };
        // Drop the schema from a thread with its own runtime: this runs inside (or after)
        // the test's runtime, which cannot be blocked on.
        let handle = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&url).await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                )))
                .execute(&mut conn)
                .await?;
                conn.close().await
            })
        });
        if let Ok(Err(e)) = handle.join() {
            eprintln!("could not drop a test schema: {e}");
        }
    }
}

pub async fn run_sqlite<F, Fut>(case: F)
where
    F: FnOnce(Arc<dyn Persistence>) -> Fut,
    Fut: Future<Output = ()>,
{
    let db = TestDb::sqlite();
    let store = db.open().await;
    assert_eq!(store.backend(), "sqlite");
    case(store.clone()).await;
    store.close().await;
}

pub async fn run_postgres<F, Fut>(case: F)
where
    F: FnOnce(Arc<dyn Persistence>) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(db) = TestDb::postgres() else {
        return;
    };
    let store = db.open().await;
    assert_eq!(store.backend(), "postgres");
    case(store.clone()).await;
    store.close().await;
}

/// For cases that reopen the database themselves.
pub async fn run_sqlite_config<F, Fut>(case: F)
where
    F: FnOnce(BackendConfig) -> Fut,
    Fut: Future<Output = ()>,
{
    let db = TestDb::sqlite();
    case(db.config.clone()).await;
}

pub async fn run_postgres_config<F, Fut>(case: F)
where
    F: FnOnce(BackendConfig) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(db) = TestDb::postgres() else {
        return;
    };
    case(db.config.clone()).await;
}

/// Declares each case once per backend: `conformance!(store: a, b; config: c)`.
macro_rules! conformance {
    (store: $($case:ident),* $(,)? ; config: $($ccase:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::support::run_sqlite(super::$case).await
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $ccase() {
                    crate::support::run_sqlite_config(super::$ccase).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::support::run_postgres(super::$case).await
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $ccase() {
                    crate::support::run_postgres_config(super::$ccase).await
                }
            )*
        }
    };
    (store: $($case:ident),* $(,)?) => {
        conformance!(store: $($case),* ; config: );
    };
}
pub(crate) use conformance;

// ----------------------------------------------------------------------------- helpers

/// A new run, claimed by worker `w` (as an executing node holds it).
pub async fn claimed_run(
    db: &dyn Persistence,
    new: fawn_checkpoint::NewRun,
) -> fawn_checkpoint::Run {
    let run = db.create_run(new).await.unwrap().run;
    db.claim_run(&run.run_id, "w", std::time::Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    run
}

pub fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// A step that appends one human message with a known id.
pub fn say(id: &str, text: &str) -> StateUpdate {
    StateUpdate::messages(vec![Message::human(text).with_id(id)])
}

/// Applies writes to a state the way an agent does before checkpointing.
pub fn step(state: &ThreadState, writes: &mut [StateUpdate]) -> ThreadState {
    let mut next = state.clone();
    next.apply_writes(writes).expect("writes apply");
    next
}

/// Writes one checkpoint on top of `parent` (id and state) and returns its id and state.
pub async fn put_step(
    store: &dyn Persistence,
    thread_id: &str,
    parent: Option<(&str, &ThreadState)>,
    run_id: Option<&str>,
    metadata: Value,
    writes: Vec<(&str, StateUpdate)>,
) -> (String, ThreadState) {
    let base = parent.map(|(_, s)| s.clone()).unwrap_or_default();
    let mut updates: Vec<StateUpdate> = writes.iter().map(|(_, w)| w.clone()).collect();
    let state = step(&base, &mut updates);
    let writes = writes
        .iter()
        .zip(updates)
        .map(|((node, _), w)| (node.to_string(), w))
        .collect();
    let id = store
        .put_checkpoint(fawn_checkpoint::NewCheckpoint {
            thread_id: thread_id.to_string(),
            checkpoint_ns: String::new(),
            parent_id: parent.map(|(id, _)| id.to_string()),
            run_id: run_id.map(str::to_string),
            metadata: obj(metadata),
            writes,
            state: Arc::new(state.clone()),
            next: vec![],
            tasks: vec![],
        })
        .await
        .expect("put_checkpoint");
    (id, state)
}
