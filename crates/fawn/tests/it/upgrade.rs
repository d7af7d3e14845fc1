//! Upgrades: a database written by an earlier Fawn release, really serving runs, opens with
//! this build (its migrations run at start) with every thread, checkpoint, run and journal
//! row as the old server answered them, and takes new runs on the old threads.
//!
//! The fixture (`tests/fixtures/upgrade/`, made by its `make.py`; its README says from
//! which commit) holds the old database — `sqlite/fawn.db`, and `postgres.sql`, a plain
//! `pg_dump --inserts` of the schema `fawn_fixture` — and what the old server answered
//! about its three threads (`expected-<backend>.json`).

use crate::db::{Fawn, fawn, json_of, serve};
use fawn_testkit::MockLlm;
use serde_json::{Value, json};
use sqlx::Connection;
use std::path::{Path, PathBuf};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade")
}

fn expected(backend: &str) -> Value {
    let text = std::fs::read_to_string(fixture_dir().join(format!("expected-{backend}.json")))
        .expect("the fixture's expected answers");
    serde_json::from_str(&text).unwrap()
}

/// The newest migration this build knows for `dialect` (one file per migration).
fn latest_migration(dialect: &str) -> i64 {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../migrations")
        .join(dialect);
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            name.split('_').next().unwrap().parse::<i64>().unwrap()
        })
        .max()
        .unwrap()
}

fn write_config(home: &Path, mock: &MockLlm, database: &str) -> PathBuf {
    let path = home.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "models:\n  - name: mock\n    use: langchain_openai:ChatOpenAI\n    model: fawn-mock\n    \
             base_url: {}\n    api_key: k\n    max_retries: 0\n\
             title:\n  enabled: false\nmemory:\n  enabled: false\n{database}",
            mock.base_url()
        ),
    )
    .unwrap();
    path
}

/// A history as the fixture records it: ids, parents, `next`, message counts, newest first.
async fn history(http: &reqwest::Client, f: &Fawn, thread: &str) -> Vec<Value> {
    let h = json_of(
        http.post(f.url(&format!("/threads/{thread}/history")))
            .json(&json!({"limit": 1000})),
    )
    .await;
    h.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            json!({
                "checkpoint_id": c["checkpoint"]["checkpoint_id"],
                "parent_checkpoint_id": c["parent_checkpoint"]["checkpoint_id"],
                "next": c["next"],
                "messages": c["values"]["messages"].as_array().map_or(0, Vec::len),
            })
        })
        .collect()
}

async fn runs(http: &reqwest::Client, f: &Fawn, thread: &str) -> Vec<Value> {
    let r = json_of(http.get(f.url(&format!("/threads/{thread}/runs")))).await;
    r.as_array()
        .unwrap()
        .iter()
        .map(|r| json!({"run_id": r["run_id"], "status": r["status"]}))
        .collect()
}

/// DeerFlow's message history (the journal) of a thread: (seq, event type, message id).
async fn journal(http: &reqwest::Client, f: &Fawn, thread: &str) -> Vec<Value> {
    let page =
        json_of(http.get(f.url(&format!("/api/threads/{thread}/messages/page?limit=100")))).await;
    page_entries(&page)
}

fn page_entries(page: &Value) -> Vec<Value> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!([m["seq"], m["event_type"], m["content"]["id"]]))
        .collect()
}

/// Everything the old server answered about each thread, answered the same by this build;
/// then a new turn on the old `native` thread (LangGraph API) and on the old `deerflow`
/// thread (DeerFlow's streamed run), each continuing the old history.
async fn check_upgraded(server: &Fawn, expected: &Value) {
    let http = fawn_net::client();
    let threads = expected["threads"].as_object().unwrap();
    assert_eq!(threads.len(), 3);
    let listed = json_of(
        http.post(server.url("/threads/search"))
            .json(&json!({"limit": 100})),
    )
    .await;
    let mut listed: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["thread_id"].as_str().unwrap())
        .collect();
    listed.sort_unstable();
    let mut want: Vec<&str> = threads
        .values()
        .map(|t| t["thread_id"].as_str().unwrap())
        .collect();
    want.sort_unstable();
    assert_eq!(listed, want, "the thread list");
    for (name, old) in threads {
        let tid = old["thread_id"].as_str().unwrap();
        let thread = json_of(http.get(server.url(&format!("/threads/{tid}")))).await;
        for key in ["values", "metadata", "status", "created_at"] {
            assert_eq!(thread[key], old["thread"][key], "{name}: thread {key}");
        }
        let state = json_of(http.get(server.url(&format!("/threads/{tid}/state")))).await;
        for key in [
            "values",
            "next",
            "checkpoint",
            "parent_checkpoint",
            "metadata",
        ] {
            assert_eq!(state[key], old["state"][key], "{name}: state {key}");
        }
        assert_eq!(
            Value::from(history(&http, server, tid).await),
            old["history"],
            "{name}: history"
        );
        assert_eq!(
            Value::from(runs(&http, server, tid).await),
            old["runs"],
            "{name}: runs"
        );
        assert_eq!(
            journal(&http, server, tid).await,
            page_entries(&old["messages_page"]),
            "{name}: DeerFlow's message history"
        );
    }
    assert!(
        !threads["native"]["history"].as_array().unwrap().is_empty()
            && !threads["native"]["runs"].as_array().unwrap().is_empty()
            && !threads["deerflow"]["messages_page"]["data"]
                .as_array()
                .unwrap()
                .is_empty(),
        "the fixture holds runs, checkpoints and journal rows"
    );

    // A new turn on the old LangGraph thread continues from its old head.
    let native = &threads["native"];
    let tid = native["thread_id"].as_str().unwrap();
    let old_messages = native["state"]["values"]["messages"]
        .as_array()
        .unwrap()
        .len();
    let v = json_of(
        http.post(server.url(&format!("/threads/{tid}/runs/wait")))
            .json(&json!({"assistant_id": "lead_agent",
                "input": {"messages": [{"role": "user", "content": "after the upgrade"}]}})),
    )
    .await;
    let messages = v["messages"].as_array().unwrap();
    assert_eq!(messages.len(), old_messages + 2, "{v}");
    assert_eq!(
        messages[..old_messages],
        native["state"]["values"]["messages"].as_array().unwrap()[..],
        "the old messages come first"
    );
    assert!(
        messages[old_messages + 1]["content"]
            .to_string()
            .contains("after the upgrade"),
        "{v}"
    );
    let new_history = history(&http, server, tid).await;
    let old_history = native["history"].as_array().unwrap();
    assert!(new_history.len() > old_history.len());
    assert_eq!(
        new_history[new_history.len() - old_history.len()..],
        old_history[..],
        "the old checkpoints are the new history's ancestors"
    );
    let new_runs = runs(&http, server, tid).await;
    assert_eq!(new_runs.len(), native["runs"].as_array().unwrap().len() + 1);
    assert!(
        new_runs.iter().all(|r| r["status"] == "success"),
        "{new_runs:?}"
    );

    // A DeerFlow turn on the old DeerFlow thread: its message history keeps the old rows.
    let deerflow = &threads["deerflow"];
    let tid = deerflow["thread_id"].as_str().unwrap();
    let resp = http
        .post(server.url(&format!("/api/langgraph/threads/{tid}/runs/stream")))
        .json(&json!({"assistant_id": "lead_agent",
            "input": {"messages": [{"type": "human",
                "content": [{"type": "text", "text": "and after the upgrade"}]}]},
            "stream_mode": ["values", "messages-tuple", "custom"],
            "stream_subgraphs": true, "stream_resumable": true,
            "config": {"recursion_limit": 1000},
            "context": {"thinking_enabled": false, "is_plan_mode": false,
                "subagent_enabled": false, "thread_id": tid, "model_name": "mock"}}))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let body = resp.text().await.unwrap();
    assert!(!body.contains("event: error"), "{body}");
    let old_rows = page_entries(&deerflow["messages_page"]);
    let rows = journal(&http, server, tid).await;
    assert!(rows.len() >= old_rows.len() + 2, "{rows:?}");
    for row in &old_rows {
        assert!(rows.contains(row), "{row} kept in {rows:?}");
    }
    let state = json_of(http.get(server.url(&format!("/threads/{tid}/state")))).await;
    let last = state["values"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap();
    assert!(
        last["content"].to_string().contains("after the upgrade"),
        "{last}"
    );
}

async fn sqlite_migration(path: &Path) -> i64 {
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=ro", path.display()))
        .await
        .unwrap();
    let v: i64 = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    v
}

/// The SQLite database of an earlier release: migrated at start, everything kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_database_of_the_previous_release_upgrades_with_its_data() {
    let expected = expected("sqlite");
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("fawn").join("data");
    std::fs::create_dir_all(&data).unwrap();
    let db = data.join("fawn.db");
    std::fs::copy(fixture_dir().join("sqlite").join("fawn.db"), &db).unwrap();
    let before = sqlite_migration(&db).await;
    assert!(
        before < latest_migration("sqlite"),
        "the fixture is at migration {before}, behind this build"
    );
    let mock = MockLlm::start().await.unwrap();
    let config = write_config(home.path(), &mock, "");
    let server = serve(home.path(), &config);
    check_upgraded(&server, &expected).await;
    drop(server);
    assert_eq!(sqlite_migration(&db).await, latest_migration("sqlite"));
}

/// The same on Postgres: the old release's schema and rows (a plain SQL dump) loaded into a
/// new database, which this build migrates at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_schema_of_the_previous_release_upgrades_with_its_data() {
    let Ok(url) = std::env::var("TEST_DATABASE_URL") else {
        if std::env::var("FAWN_SKIP_POSTGRES_TESTS").is_ok_and(|v| !v.is_empty() && v != "0") {
            eprintln!("FAWN_SKIP_POSTGRES_TESTS is set: SKIPPED a Postgres upgrade test");
            return;
        }
        panic!(
            "TEST_DATABASE_URL is not set: this Postgres upgrade test needs it \
             (e.g. postgres://postgres@127.0.0.1:5432/test, as `make test` sets), \
             or set FAWN_SKIP_POSTGRES_TESTS=1 to skip the Postgres tests"
        );
    };
    let expected = expected("postgres");
    let name = format!("fawn_upgrade_{}", uuid_like());
    let (base, _) = url.rsplit_once('/').unwrap();
    let db_url = format!("{base}/{name}");
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut admin)
        .await
        .unwrap();
    let checked = tokio::spawn(async move {
        let dump = std::fs::read_to_string(fixture_dir().join("postgres.sql")).unwrap();
        let mut conn = sqlx::PgConnection::connect(&db_url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(dump))
            .execute(&mut conn)
            .await
            .unwrap();
        let migration = "SELECT MAX(version) FROM fawn_fixture._sqlx_migrations";
        let before: i64 = sqlx::query_scalar(migration)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert!(
            before < latest_migration("postgres"),
            "the fixture is at migration {before}, behind this build"
        );
        let home = tempfile::tempdir().unwrap();
        let mock = MockLlm::start().await.unwrap();
        let config = write_config(
            home.path(),
            &mock,
            &format!(
                "database:\n  backend: postgres\n  url: {db_url}\n  postgres_schema: fawn_fixture\n"
            ),
        );
        let server = serve(home.path(), &config);
        check_upgraded(&server, &expected).await;
        drop(server);
        let after: i64 = sqlx::query_scalar(migration)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(after, latest_migration("postgres"));
        conn.close().await.unwrap();
    })
    .await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE \"{name}\" WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    admin.close().await.unwrap();
    if let Err(e) = checked {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// A name unique to this test process and moment (no uuid crate in this test binary).
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}_{nanos}", std::process::id())
}

/// `fawn migrate` alone upgrades the old SQLite database too (what an operator runs before
/// starting the new version), and a second run has nothing left to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fawn_migrate_upgrades_the_previous_release_in_place() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("fawn").join("data");
    std::fs::create_dir_all(&data).unwrap();
    let db = data.join("fawn.db");
    std::fs::copy(fixture_dir().join("sqlite").join("fawn.db"), &db).unwrap();
    let mock = MockLlm::start().await.unwrap();
    let config = write_config(home.path(), &mock, "");
    for _ in 0..2 {
        let out = fawn(home.path())
            .args(["migrate", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(sqlite_migration(&db).await, latest_migration("sqlite"));
    }
}
