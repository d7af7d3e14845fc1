use fawn_checkpoint::{BackendConfig, NewThread, RunStatus, ThreadStatus};
use fawn_config::Settings;
use fawn_llm::ModelRegistry;
use fawn_llm::scripted::{ScriptedModel, ScriptedTurn};
use fawn_runtime::create::{RunCreate, RunTarget, create_run};
use fawn_runtime::hooks::Point;
use fawn_runtime::testing::MiniAgent;
use fawn_runtime::{Graphs, Runtime, RuntimeHandle, RuntimeOptions};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

struct Fixture {
    rt: RuntimeHandle,
    _dir: tempfile::TempDir,
}

impl Fixture {
    async fn start(turns: Vec<ScriptedTurn>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let model: Arc<dyn fawn_llm::ChatModel> = Arc::new(ScriptedModel::new(turns));
        let models = ModelRegistry::from_models(vec![model]);
        let options = RuntimeOptions {
            backend: Some(BackendConfig::Sqlite {
                path: dir.path().join("data").join("fawn.db"),
            }),
            graphs: Some(
                Graphs::new().with(Arc::new(MiniAgent::new("lead_agent", models.clone()))),
            ),
            models: Some(models),
            ..RuntimeOptions::default()
        };
        let rt = Runtime::start(Settings::with_home(dir.path().join("home")), options)
            .await
            .unwrap();
        Fixture { rt, _dir: dir }
    }

    async fn thread(&self) -> String {
        self.rt
            .store()
            .create_thread(NewThread::default())
            .await
            .unwrap()
            .thread_id
    }

    async fn run(&self, thread_id: &str, body: Value) -> String {
        let body: RunCreate = serde_json::from_value(body).unwrap();
        create_run(&self.rt, body, RunTarget::Thread(thread_id.into()), &[])
            .await
            .unwrap()
            .run
            .run_id
    }

    async fn finished(&self, run_id: &str) -> fawn_checkpoint::Run {
        fawn_runtime::runs::wait_terminal(&self.rt, run_id, Duration::from_secs(30)).await;
        let run = self.rt.store().get_run(run_id).await.unwrap().unwrap();
        assert!(!run.status.is_active(), "still {:?}", run.status);
        run
    }

    async fn thread_status(&self, thread_id: &str) -> ThreadStatus {
        self.rt
            .store()
            .get_thread(thread_id)
            .await
            .unwrap()
            .unwrap()
            .status
    }

    async fn sources(&self, thread_id: &str) -> Vec<String> {
        let history = self
            .rt
            .store()
            .list_checkpoints(thread_id, &Default::default())
            .await
            .unwrap();
        history
            .iter()
            .map(|c| c.metadata["source"].as_str().unwrap_or("").to_string())
            .collect()
    }

    async fn stop(self) {
        self.rt.stop().await;
    }
}

fn input(text: &str) -> Value {
    json!({"assistant_id": "lead_agent",
           "input": {"messages": [{"role": "user", "content": text}]}})
}

fn weather() -> ScriptedTurn {
    ScriptedTurn::tool_call("get_weather", json!({"city": "Lyon"}), "call_1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_goes_from_creation_to_success_with_typed_options() {
    let f = Fixture::start(vec![weather(), ScriptedTurn::text("Sunny.")]).await;
    let tid = f.thread().await;
    let rid = f
        .run(
            &tid,
            json!({"assistant_id": "lead_agent", "durability": "sync", "stream_mode": "updates",
                   "input": {"messages": [{"role": "user", "content": "weather?"}]}}),
        )
        .await;
    let run = f.finished(&rid).await;
    assert_eq!(run.status, RunStatus::Success);
    // The stored options are the typed ones, readable by any process.
    let kw = fawn_runtime::RunKwargs::from_map(&run.kwargs).unwrap();
    assert_eq!(kw.durability, fawn_runtime::Durability::Sync);
    assert_eq!(kw.stream_mode, ["updates"]);
    assert_eq!(kw.graph_id.as_deref(), Some("lead_agent"));
    assert_eq!(kw.config.configurable["thread_id"], tid.as_str());
    assert_eq!(f.thread_status(&tid).await, ThreadStatus::Idle);
    assert_eq!(f.sources(&tid).await, ["loop", "loop", "loop", "input"]);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_at_a_step_has_stored_nothing_after_it() {
    let f = Fixture::start(vec![weather(), ScriptedTurn::text("Sunny.")]).await;
    let tid = f.thread().await;
    // The 3rd step handed over is the tools step.
    let mut paused = f.rt.hooks.pause(Point::Step, 3);
    let rid = f.run(&tid, input("weather?")).await;
    assert_eq!(paused.reached().await, rid);
    // The input and agent checkpoints are queued or written; the tool's is not. Flushing is
    // the run's own business, so look once it is stored: exactly two, never three.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while f.sources(&tid).await.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first two checkpoints"
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(f.sources(&tid).await, ["loop", "input"]);
    assert_eq!(
        f.rt.store().get_run(&rid).await.unwrap().unwrap().status,
        RunStatus::Running
    );
    paused.resume();
    assert_eq!(f.finished(&rid).await.status, RunStatus::Success);
    assert_eq!(f.sources(&tid).await.len(), 4);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_with_interrupt_leaves_the_thread_as_its_latest_checkpoint_says() {
    let f = Fixture::start(vec![weather(), ScriptedTurn::text("Sunny.")]).await;
    let tid = f.thread().await;
    // Cancel while the agent's step (which schedules `tools`) is being handed over.
    let mut paused = f.rt.hooks.pause(Point::Step, 2);
    let rid = f.run(&tid, input("weather?")).await;
    paused.reached().await;
    fawn_runtime::runs::cancel(
        &f.rt,
        fawn_checkpoint::CancelTarget::Runs {
            thread_id: Some(tid.clone()),
            run_ids: vec![rid.clone()],
        },
        fawn_checkpoint::CancelAction::Interrupt,
    )
    .await
    .unwrap();
    let run = f.finished(&rid).await;
    assert_eq!(run.status, RunStatus::Interrupted);
    let latest =
        f.rt.store()
            .get_checkpoint(&tid, "", None)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(latest.next, ["tools"]);
    assert_eq!(f.thread_status(&tid).await, ThreadStatus::Interrupted);
    drop(paused);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_injected_at_a_step_fails_the_run_and_stores_nothing_after_it() {
    let f = Fixture::start(vec![weather(), ScriptedTurn::text("Sunny.")]).await;
    let tid = f.thread().await;
    f.rt.hooks.fail(Point::Step, 2, "disk full");
    let rid = f.run(&tid, input("weather?")).await;
    let run = f.finished(&rid).await;
    assert_eq!(run.status, RunStatus::Error);
    let error = run.error.unwrap();
    assert!(error.to_string().contains("disk full"), "{error}");
    assert_eq!(f.sources(&tid).await, ["input"]);
    assert_eq!(f.thread_status(&tid).await, ThreadStatus::Error);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_typed_errors() {
    let f = Fixture::start(vec![]).await;
    let tid = f.thread().await;
    let bad = |v: Value| serde_json::from_value::<RunCreate>(v).unwrap();
    let e = create_run(
        &f.rt,
        bad(json!({"assistant_id": "lead_agent", "durability": "never"})),
        RunTarget::Thread(tid.clone()),
        &[],
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, fawn_runtime::RuntimeError::InvalidField { path, .. } if path == "durability"),
        "{e}"
    );
    let e = create_run(
        &f.rt,
        bad(json!({"assistant_id": "nope"})),
        RunTarget::Thread(tid.clone()),
        &[],
    )
    .await
    .unwrap_err();
    assert!(matches!(e, fawn_runtime::RuntimeError::Invalid(_)), "{e}");
    let e = create_run(
        &f.rt,
        bad(json!({"assistant_id": "lead_agent", "command": {"resume": 1}})),
        RunTarget::Stateless,
        &[],
    )
    .await
    .unwrap_err();
    assert!(matches!(e, fawn_runtime::RuntimeError::Rejected(_)), "{e}");
    let e = create_run(
        &f.rt,
        bad(json!({"assistant_id": "lead_agent"})),
        RunTarget::Thread(uuid::Uuid::new_v4().to_string()),
        &[],
    )
    .await
    .unwrap_err();
    assert!(matches!(e, fawn_runtime::RuntimeError::NotFound(_)), "{e}");
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_to_internal_addresses_are_refused_unless_allowed() {
    // A receiver on loopback, reached by name: the name resolves to 127.0.0.1, which the
    // guard refuses inside the client's resolver, before any connection.
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(stream);
        }
    });
    let f = Fixture::start(vec![]).await;
    let payload = json!({"run_id": "r"});
    for url in [
        format!("http://localhost:{port}/hook"),
        format!("http://127.0.0.1:{port}/hook"),
        "http://169.254.169.254/latest/meta-data".to_string(),
    ] {
        let e = fawn_runtime::webhook::deliver(&f.rt, &url, &payload)
            .await
            .unwrap_err();
        assert!(
            matches!(e, fawn_runtime::webhook::WebhookError::Refused(_)),
            "{url}: {e}"
        );
    }
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no connection made"
    );
    f.stop().await;
}
