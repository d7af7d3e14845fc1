//! Shared test helpers: a tool context over a temporary thread directory, local stub servers.

use async_trait::async_trait;
use fawn_config::Settings;
use fawn_sandbox::{
    ExecOptions, ExecOutput, GrepMatch, GrepOptions, Sandbox, SandboxError, SandboxProvider,
    ThreadPaths, VIRTUAL_USER_DATA,
};
use fawn_state::{StreamEvent, ThreadState, VecSink};
use fawn_tools::{SandboxSlot, SubagentRunner, ToolContext};
use serde_json::{Map, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A minimal sandbox over a thread directory: only `read_bytes` is implemented (enough for
/// `view_image`); everything else says so. The real provider lives in the sandbox crate.
pub struct DirSandbox {
    paths: ThreadPaths,
}

impl DirSandbox {
    fn host(&self, path: &str) -> Result<std::path::PathBuf, SandboxError> {
        let rest = path
            .strip_prefix(VIRTUAL_USER_DATA)
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| SandboxError::PermissionDenied(path.to_string()))?;
        if rest.split('/').any(|s| s == "..") {
            return Err(SandboxError::PermissionDenied(path.to_string()));
        }
        Ok(self.paths.user_data.join(rest))
    }
}

fn unsupported<T>() -> Result<T, SandboxError> {
    Err(SandboxError::Unavailable(
        "not supported by the test sandbox".into(),
    ))
}

#[async_trait]
impl Sandbox for DirSandbox {
    fn id(&self) -> &str {
        "test"
    }
    fn paths(&self) -> &ThreadPaths {
        &self.paths
    }
    async fn execute(&self, _: &str, _: ExecOptions) -> Result<ExecOutput, SandboxError> {
        unsupported()
    }
    async fn read_bytes(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, SandboxError> {
        let host = self.host(path)?;
        let meta = tokio::fs::metadata(&host)
            .await
            .map_err(|_| SandboxError::NotFound(path.to_string()))?;
        if meta.len() > max_bytes {
            return Err(SandboxError::Invalid(format!(
                "{path} is larger than {max_bytes} bytes"
            )));
        }
        tokio::fs::read(&host)
            .await
            .map_err(|e| SandboxError::Io(e.kind().to_string()))
    }
    async fn write_text(&self, _: &str, _: &str, _: bool) -> Result<(), SandboxError> {
        unsupported()
    }
    async fn write_bytes(&self, _: &str, _: &[u8]) -> Result<(), SandboxError> {
        unsupported()
    }
    async fn list_dir(&self, _: &str, _: usize) -> Result<Vec<String>, SandboxError> {
        unsupported()
    }
    async fn glob(
        &self,
        _: &str,
        _: &str,
        _: bool,
        _: usize,
    ) -> Result<(Vec<String>, bool), SandboxError> {
        unsupported()
    }
    async fn grep(
        &self,
        _: &str,
        _: &str,
        _: GrepOptions,
    ) -> Result<(Vec<GrepMatch>, bool), SandboxError> {
        unsupported()
    }
    fn mask(&self, text: &str) -> String {
        text.replace(
            &self.paths.user_data.display().to_string(),
            VIRTUAL_USER_DATA,
        )
    }
}

pub struct DirProvider {
    home: std::path::PathBuf,
}

#[async_trait]
impl SandboxProvider for DirProvider {
    async fn acquire(&self, thread_id: &str) -> Result<String, SandboxError> {
        Ok(thread_id.to_string())
    }
    fn get(&self, sandbox_id: &str) -> Option<Arc<dyn Sandbox>> {
        Some(Arc::new(DirSandbox {
            paths: self.thread_paths(sandbox_id),
        }))
    }
    async fn release(&self, _: &str) {}
    fn thread_paths(&self, thread_id: &str) -> ThreadPaths {
        ThreadPaths::new(&self.home, "default", thread_id)
    }
}

/// A thread directory with `workspace`, `uploads` and `outputs`, and a context for tools.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub paths: ThreadPaths,
    pub sink: Arc<VecSink>,
    pub ctx: ToolContext,
}

pub const THREAD: &str = "thread-1";

impl Harness {
    pub fn new() -> Harness {
        Self::with_runner(None)
    }

    pub fn with_runner(runner: Option<Arc<dyn SubagentRunner>>) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let provider = Arc::new(DirProvider {
            home: dir.path().to_path_buf(),
        });
        let paths = provider.thread_paths(THREAD);
        for d in [&paths.workspace, &paths.uploads, &paths.outputs] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let sink = Arc::new(VecSink::new());
        let ctx = ToolContext {
            thread_id: THREAD.into(),
            run_id: "run-1".into(),
            tool_call_id: "call_1".into(),
            state: Arc::new(ThreadState::default()),
            settings: Arc::new(Settings::with_home(dir.path())),
            sandbox: Arc::new(SandboxSlot::new(provider, THREAD, None)),
            events: sink.clone(),
            cancel: CancellationToken::new(),
            subagents: runner,
            model_name: "lead-model".into(),
            context: Map::new(),
        };
        Harness {
            dir,
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
