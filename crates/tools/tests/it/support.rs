//! Shared test helpers: a tool context over a temporary thread directory, local stub servers.

use fawn_config::Settings;
use fawn_sandbox::{LocalSandboxProvider, SandboxProvider, ThreadPaths};
use fawn_state::{StreamEvent, ThreadState, VecSink};
use fawn_tools::{SandboxSlot, SubagentRunner, ToolContext};
use serde_json::{Map, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A thread of the real local sandbox provider in a temporary data dir, and a context for
/// tools.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub provider: Arc<LocalSandboxProvider>,
    pub paths: ThreadPaths,
    pub sink: Arc<VecSink>,
    pub ctx: ToolContext,
}

pub const THREAD: &str = "thread-1";

impl Harness {
    pub async fn new() -> Harness {
        Self::with_runner(None).await
    }

    pub async fn with_runner(runner: Option<Arc<dyn SubagentRunner>>) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let settings = Settings::with_home(dir.path());
        let provider =
            Arc::new(LocalSandboxProvider::new(&settings).expect("local sandbox provider"));
        let id = provider.acquire(THREAD).await.expect("acquire");
        let paths = provider.thread_paths(THREAD);
        let sink = Arc::new(VecSink::new());
        let ctx = ToolContext {
            thread_id: THREAD.into(),
            run_id: "run-1".into(),
            tool_call_id: "call_1".into(),
            state: Arc::new(ThreadState::default()),
            settings: Arc::new(settings),
            sandbox: Arc::new(SandboxSlot::new(provider.clone(), THREAD, Some(id))),
            events: sink.clone(),
            cancel: CancellationToken::new(),
            subagents: runner,
            model_name: "lead-model".into(),
            context: Map::new(),
        };
        Harness {
            dir,
            provider,
            paths,
            sink,
            ctx,
        }
    }

    /// Writes `bytes` at the virtual path `/mnt/user-data/<rel>`.
    pub fn write(&self, rel: &str, bytes: &[u8]) {
        let p = self.paths.user_data.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(p, bytes).expect("write");
    }

    /// `custom` events emitted so far.
    pub fn custom_events(&self) -> Vec<Value> {
        self.sink
            .take()
            .into_iter()
            .filter_map(|e| match e {
                StreamEvent::Custom(v) => Some(v),
                _ => None,
            })
            .collect()
    }
}

pub fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("args must be an object, got {other}"),
    }
}

/// Serves `router` on 127.0.0.1 (port 0) for the rest of the test.
pub async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

pub fn text(out: &fawn_tools::ToolOutput) -> String {
    out.content.text()
}

pub fn settings_from_yaml(yaml: &str, home: &Path) -> Settings {
    let opts =
        fawn_config::LoadOptions::with_vars(home, [("FAWN_HOME", home.display().to_string())]);
    match fawn_config::load_str(yaml, None, &opts) {
        Ok(l) => l.settings,
        Err(e) => panic!("config did not load:\n{e}"),
    }
}
