//! `spawn_app()`: a real server on port 0 with a fresh database (SQLite temp file, or a fresh
//! Postgres schema in `TEST_DATABASE_URL`), the testkit mock LLM behind an OpenAI-compatible
//! model, and the minimal test graph registered as `lead_agent`.

#![allow(dead_code)]

use fawn_checkpoint::BackendConfig;
use fawn_config::{ModelConfig, Settings};
use fawn_llm::ModelRegistry;
use fawn_runtime::testing::MiniAgent;
use fawn_server::{AppHandle, AppOptions, Application, Graphs};
use fawn_testkit::{MockConfig, MockLlm};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// Which database a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// A database for one test; dropping it removes it.
pub struct TestDb {
    pub config: BackendConfig,
    pub dir: tempfile::TempDir,
    pg: Option<(String, String)>,
}

impl TestDb {
    /// For Postgres: panics when `TEST_DATABASE_URL` is not set; `None` (saying so) only when
    /// `FAWN_SKIP_POSTGRES_TESTS` asks to skip the Postgres tests.
    pub fn new(db: Db) -> Option<TestDb> {
        let dir = tempfile::tempdir().expect("temp dir");
        match db {
            Db::Sqlite => Some(TestDb {
                config: BackendConfig::Sqlite {
                    path: dir.path().join("data").join("fawn.db"),
                },
                dir,
                pg: None,
            }),
            Db::Postgres => {
                let Ok(url) = std::env::var("TEST_DATABASE_URL") else {
                    // A Postgres test passes only by running: without a database it fails, unless
                    // skipping was asked for by name (and then says so).
                    if std::env::var("FAWN_SKIP_POSTGRES_TESTS")
                        .is_ok_and(|v| !v.is_empty() && v != "0")
                    {
                        eprintln!(
                            "FAWN_SKIP_POSTGRES_TESTS is set: SKIPPED a Postgres server test"
                        );
                        return None;
                    }
                    panic!(
                        "TEST_DATABASE_URL is not set: this Postgres server test needs it \
                         (e.g. postgres://postgres@127.0.0.1:5432/test, as `make test` sets), \
                         or set FAWN_SKIP_POSTGRES_TESTS=1 to skip the Postgres tests"
                    );
                };
                let schema = format!("fawn_srv_{}", uuid::Uuid::new_v4().simple());
                Some(TestDb {
                    config: BackendConfig::Postgres {
                        url: url.clone(),
                        schema: Some(schema.clone()),
                    },
                    dir,
                    pg: Some((url, schema)),
                })
            }
        }
    }
}

impl TestDb {
    /// Runs SQL on the test's database behind the server's back (fault injection). On
    /// Postgres `{schema}` in `sql` is replaced by the test's quoted schema.
    pub async fn exec(&self, sql: &str) {
        use sqlx::Connection;
        match (&self.config, &self.pg) {
            (BackendConfig::Sqlite { path }, _) => {
                let url = format!("sqlite://{}", path.display());
                let mut conn = sqlx::SqliteConnection::connect(&url).await.expect("sqlite");
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
                    .execute(&mut conn)
                    .await
                    .expect("exec");
                conn.close().await.expect("close");
            }
            (_, Some((url, schema))) => {
                let mut conn = sqlx::PgConnection::connect(url).await.expect("postgres");
                let sql = sql.replace("{schema}", &format!("\"{schema}\""));
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(&mut conn)
                    .await
                    .expect("exec");
                conn.close().await.expect("close");
            }
            _ => panic!("no database to run SQL on"),
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((url, schema)) = self.pg.take() else {
            return;
        };
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
        let _ = handle.join();
    }
}

/// A manual clock for crons.
#[derive(Clone)]
pub struct ManualClock(pub Arc<Mutex<chrono::DateTime<chrono::Utc>>>);

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock(Arc::new(Mutex::new(chrono::Utc::now())))
    }
    pub fn advance(&self, secs: i64) {
        let mut g = self.0.lock().unwrap();
        *g += chrono::Duration::seconds(secs);
    }
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        *self.0.lock().unwrap()
    }
}

pub struct TestApp {
    pub url: String,
    pub port: u16,
    pub client: reqwest::Client,
    pub handle: AppHandle,
    pub server: Option<JoinHandle<std::io::Result<()>>>,
    pub mock: Arc<MockLlm>,
    pub db: Arc<TestDb>,
    pub home: std::path::PathBuf,
}

/// Adjusts the options of a spawned app.
pub type Tweak = Box<dyn FnOnce(&mut AppOptions) + Send>;

/// Adjusts the settings (config.yaml) of a spawned app.
pub type SettingsTweak = Box<dyn FnOnce(&mut Settings) + Send>;

pub struct Spawn {
    pub db: Db,
    pub mock: Option<Arc<MockLlm>>,
    pub existing_db: Option<Arc<TestDb>>,
    pub tweak: Option<Tweak>,
    pub no_models: bool,
    /// Serve the real DeerFlow lead agent (the default graphs) instead of the test graph.
    pub lead_agent: bool,
    /// Adjusts the settings (config.yaml) before the models are built.
    pub settings: Option<SettingsTweak>,
}

impl Spawn {
    pub fn new(db: Db) -> Spawn {
        Spawn {
            db,
            mock: None,
            existing_db: None,
            tweak: None,
            no_models: false,
            lead_agent: false,
            settings: None,
        }
    }
}

pub fn mock_model_config(mock: &MockLlm) -> ModelConfig {
    ModelConfig {
        name: "mock".into(),
        use_: "langchain_openai:ChatOpenAI".into(),
        model: Some("mock-model".into()),
        base_url: Some(mock.base_url()),
        api_key: Some("test-key".into()),
        max_retries: Some(0),
        ..Default::default()
    }
}

/// Starts a server. `None` only when the Postgres tests are skipped on purpose
/// (`FAWN_SKIP_POSTGRES_TESTS`, see [`TestDb::new`]).
pub async fn spawn_with(spec: Spawn) -> Option<TestApp> {
    let db = match spec.existing_db {
        Some(d) => d,
        None => Arc::new(TestDb::new(spec.db)?),
    };
    let mock = match spec.mock {
        Some(m) => m,
        None => Arc::new(
            MockLlm::start_with(MockConfig::default())
                .await
                .expect("mock"),
        ),
    };
    let home = db.dir.path().join("home");
    let mut settings = Settings::with_home(&home);
    let mut options = AppOptions {
        port: 0,
        backend: Some(db.config.clone()),
        heartbeat: Duration::from_millis(300),
        keepalive: Duration::from_millis(200),
        test_hooks: true,
        ..AppOptions::default()
    };
    options.queue.poll_interval = Duration::from_millis(200);
    if !spec.no_models {
        settings.app.models = vec![mock_model_config(&mock)];
    }
    if let Some(f) = spec.settings {
        f(&mut settings);
    }
    if !spec.no_models && !spec.lead_agent {
        let models = ModelRegistry::from_config(&settings.app).expect("models");
        options.graphs =
            Some(Graphs::new().with(Arc::new(MiniAgent::new("lead_agent", models.clone()))));
        options.models = Some(models);
    }
    if let Some(t) = spec.tweak {
        t(&mut options);
    }
    let app = Application::build(settings, options)
        .await
        .expect("build app");
    let port = app.port();
    let handle = app.handle();
    let server = tokio::spawn(app.run_until_stopped());
    Some(TestApp {
        url: format!("http://127.0.0.1:{port}"),
        port,
        client: fawn_net::client(),
        handle,
        server: Some(server),
        mock,
        db,
        home,
    })
}

pub async fn spawn_app(db: Db) -> Option<TestApp> {
    spawn_with(Spawn::new(db)).await
}

impl TestApp {
    /// The runtime's test seams: pause a run at a named point, or make it fail there.
    pub fn hooks(&self) -> &fawn_runtime::hooks::Hooks {
        &self.handle.state.rt.hooks
    }

    /// Fires the crons due now (by the app's clock); returns how many fired.
    pub async fn tick_crons(&self) -> usize {
        fawn_runtime::crons::tick(&self.handle.state.rt).await
    }

    pub fn u(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }

    pub async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.client
            .post(self.u(path))
            .json(&body)
            .send()
            .await
            .expect("request")
    }

    pub async fn post_json(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self.post(path, body).await;
        let s = r.status().as_u16();
        let text = r.text().await.expect("body");
        (
            s,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let r = self.client.get(self.u(path)).send().await.expect("request");
        let s = r.status().as_u16();
        let text = r.text().await.expect("body");
        (
            s,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn patch_json(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .patch(self.u(path))
            .json(&body)
            .send()
            .await
            .expect("request");
        let s = r.status().as_u16();
        let text = r.text().await.expect("body");
        (
            s,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn delete(&self, path: &str) -> u16 {
        self.client
            .delete(self.u(path))
            .send()
            .await
            .expect("request")
            .status()
            .as_u16()
    }

    pub async fn create_thread(&self) -> String {
        let (s, t) = self.post_json("/threads", json!({})).await;
        assert_eq!(s, 200, "{t}");
        t["thread_id"].as_str().unwrap().to_string()
    }

    /// Polls a run until it is no longer pending/running.
    pub async fn wait_run(&self, tid: &str, rid: &str) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (s, r) = self.get_json(&format!("/threads/{tid}/runs/{rid}")).await;
            if s == 200 {
                let st = r["status"].as_str().unwrap_or("");
                if st != "pending" && st != "running" {
                    return r;
                }
            } else if s == 404 {
                return r;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "run {rid} did not finish: {r}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Polls until `f` holds or 10 s pass.
    pub async fn eventually<F, Fut>(&self, what: &str, f: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !f().await {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn stop(mut self) {
        self.handle.shutdown();
        if let Some(s) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), s).await;
        }
    }

    /// Kills the server without letting it finish anything.
    pub fn crash(&mut self) {
        self.handle.crash();
        if let Some(s) = self.server.take() {
            s.abort();
        }
    }
}

/// One SSE event as parsed from the raw body.
#[derive(Clone, Debug, PartialEq)]
pub struct Sse {
    pub event: String,
    pub data: Value,
    pub id: Option<String>,
}

/// Parses a raw SSE body (checking that every data field is one line of JSON).
pub fn parse_sse(text: &str) -> Vec<Sse> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        if block.trim().is_empty() {
            continue;
        }
        let mut event = None;
        let mut data = None;
        let mut id = None;
        for line in block.lines() {
            if line.starts_with(':') {
                continue;
            }
            if let Some(v) = line.strip_prefix("event: ") {
                event = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("data: ") {
                assert!(data.is_none(), "more than one data line in {block:?}");
                data = Some(
                    serde_json::from_str::<Value>(v)
                        .unwrap_or_else(|e| panic!("data is not one line of JSON ({e}): {v}")),
                );
            } else if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.to_string());
            } else {
                panic!("unexpected SSE line {line:?}");
            }
        }
        if let Some(event) = event {
            out.push(Sse {
                event,
                data: data.expect("every event has data"),
                id,
            });
        }
    }
    out
}

pub fn names(events: &[Sse]) -> Vec<&str> {
    events.iter().map(|e| e.event.as_str()).collect()
}

/// A tool-calling turn then a text answer.
pub fn weather_script(mock: &MockLlm) {
    mock.push(fawn_testkit::Turn::tool_call(
        "get_weather",
        json!({"city": "Paris"}),
    ));
    mock.push(fawn_testkit::Turn::text("The weather in Paris is sunny."));
}

pub fn user_input(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

/// Starts a background run of `lead_agent` on `tid` under `/api` with `text` as the user's
/// message, waits for its end and checks it succeeded; returns its id.
pub async fn run_to_success(app: &TestApp, tid: &str, text: &str) -> String {
    run_to_success_with(app, tid, text, Value::Null).await
}

/// [`run_to_success`] with the run's `context` (none when `Null`).
pub async fn run_to_success_with(app: &TestApp, tid: &str, text: &str, context: Value) -> String {
    let mut body = json!({"assistant_id": "lead_agent", "input": user_input(text)});
    if !context.is_null() {
        body["context"] = context;
    }
    let (s, r) = app
        .post_json(&format!("/api/threads/{tid}/runs"), body)
        .await;
    assert_eq!(s, 200, "{r}");
    let rid = r["run_id"].as_str().unwrap().to_string();
    let done = app.wait_run(tid, &rid).await;
    assert_eq!(done["status"], "success", "{done}");
    rid
}
