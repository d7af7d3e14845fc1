use fawn_config::Settings;
use fawn_sandbox::{LocalSandboxOptions, LocalSandboxProvider, Sandbox, SandboxProvider};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub struct Env {
    pub dir: tempfile::TempDir,
    pub provider: Arc<LocalSandboxProvider>,
}

impl Env {
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub async fn sandbox(&self, thread: &str) -> Arc<dyn Sandbox> {
        let id = self.provider.acquire(thread).await.expect("acquire");
        self.provider.get(&id).expect("get")
    }
}

pub fn settings(dir: &Path) -> Settings {
    let mut s = Settings::with_home(dir.join("home"));
    s.skills_dir = dir.join("skills");
    s
}

pub fn env_with(f: impl FnOnce(&mut Settings, &mut LocalSandboxOptions)) -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = settings(dir.path());
    let mut o = LocalSandboxOptions::default();
    f(&mut s, &mut o);
    let provider = Arc::new(LocalSandboxProvider::with_options(&s, o).expect("provider"));
    Env { dir, provider }
}

pub fn env() -> Env {
    env_with(|_, _| {})
}

/// Processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) && !cmd.contains("cargo") {
                out.push(format!("{}: {cmd}", name.to_string_lossy()));
            }
        }
    }
    out
}

/// Processes owned by `uid` (from `/proc/*/status`).
pub fn processes_of_uid(uid: u32) -> usize {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    rd.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("status")).is_ok_and(|s| {
                s.lines().any(|l| {
                    l.starts_with("Uid:")
                        && l.split_whitespace().nth(1) == Some(uid.to_string().as_str())
                })
            })
        })
        .count()
}

/// Waits up to `limit` for `cond`.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
