//! Per-thread workspaces and command execution for the agent.
//!
//! Owns: the `Sandbox`/`SandboxProvider` interface, the local provider with per-thread
//! directories under the data dir, the `/mnt/user-data` and `/mnt/skills` virtual path
//! contract (virtual → host translation, host → virtual masking), confinement by resolution,
//! and bash inside an OS sandbox (bubblewrap). This is the only crate that touches thread
//! files on the host or spawns processes for the agent. Must never know about the agent loop,
//! models or HTTP.

use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Agent-visible root of a thread's user data.
pub const VIRTUAL_USER_DATA: &str = "/mnt/user-data";
pub const VIRTUAL_WORKSPACE: &str = "/mnt/user-data/workspace";
pub const VIRTUAL_UPLOADS: &str = "/mnt/user-data/uploads";
pub const VIRTUAL_OUTPUTS: &str = "/mnt/user-data/outputs";
pub const VIRTUAL_SKILLS: &str = "/mnt/skills";

/// The host directories of one thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadPaths {
    /// `{home}/users/{user}/threads/{thread}`: everything the thread owns on disk.
    pub thread_dir: PathBuf,
    /// `{thread_dir}/user-data`, seen by the agent as `/mnt/user-data`.
    pub user_data: PathBuf,
    pub workspace: PathBuf,
    pub uploads: PathBuf,
    pub outputs: PathBuf,
}

impl ThreadPaths {
    /// Paths for `thread_id` of `user_id` under the data dir `home`. Callers must have
    /// validated `thread_id` (see [`valid_thread_id`]).
    pub fn new(home: &Path, user_id: &str, thread_id: &str) -> ThreadPaths {
        let thread_dir = home
            .join("users")
            .join(user_id)
            .join("threads")
            .join(thread_id);
        let user_data = thread_dir.join("user-data");
        ThreadPaths {
            workspace: user_data.join("workspace"),
            uploads: user_data.join("uploads"),
            outputs: user_data.join("outputs"),
            user_data,
            thread_dir,
        }
    }
}

/// DeerFlow's thread-id rule: `^[A-Za-z0-9_-]{1,64}$`.
pub fn valid_thread_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Sandbox failures. `Display` texts never contain host paths.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SandboxError {
    #[error("Permission denied: {0}")]
    PermissionDenied(String),
    #[error("Not found: {0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("I/O error: {0}")]
    Io(String),
}

/// How a command is run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecOptions {
    /// Extra environment variables (request secrets), layered over the scrubbed base env.
    pub env: Vec<(String, String)>,
    /// Overrides `sandbox.bash_command_timeout`.
    pub timeout: Option<std::time::Duration>,
}

/// What a command produced, already masked (host paths → virtual paths) and truncated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecOutput {
    pub stdout: String,
    pub stderr: String,
    /// `None` when the process was killed (timeout, cancellation).
    pub exit_code: Option<i32>,
    pub timed_out: bool,
}

/// One `grep` hit. `path` is virtual.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrepMatch {
    pub path: String,
    pub line_number: u64,
    pub line: String,
}

/// Options of [`Sandbox::grep`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GrepOptions {
    /// Only search files whose path matches this glob.
    pub glob: Option<String>,
    pub literal: bool,
    pub case_sensitive: bool,
    pub max_results: usize,
}

/// One thread's sandbox: files and command execution, addressed by **virtual** paths
/// (`/mnt/user-data/...`, `/mnt/skills/...`). Every path is resolved and confined before use;
/// every text returned is masked so that no host path leaks.
#[async_trait]
pub trait Sandbox: Send + Sync {
    fn id(&self) -> &str;
    fn paths(&self) -> &ThreadPaths;

    /// Runs `command` with bash, cwd `/mnt/user-data/workspace`, inside the OS sandbox.
    async fn execute(&self, command: &str, opts: ExecOptions) -> Result<ExecOutput, SandboxError>;

    /// Reads a whole file's bytes (at most `max_bytes`; larger files are an error).
    async fn read_bytes(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, SandboxError>;

    /// Writes text, creating parent directories. Refused on read-only roots and symlinked
    /// destinations.
    async fn write_text(&self, path: &str, content: &str, append: bool)
    -> Result<(), SandboxError>;

    /// Writes bytes (uploads), with the same rules as [`Sandbox::write_text`].
    async fn write_bytes(&self, path: &str, content: &[u8]) -> Result<(), SandboxError>;

    /// Entries under `path` up to `max_depth` levels, as virtual paths (directories end in `/`).
    async fn list_dir(&self, path: &str, max_depth: usize) -> Result<Vec<String>, SandboxError>;

    /// Paths under `path` matching `pattern`; the bool says the list was truncated.
    async fn glob(
        &self,
        path: &str,
        pattern: &str,
        include_dirs: bool,
        max_results: usize,
    ) -> Result<(Vec<String>, bool), SandboxError>;

    /// Lines matching `pattern` in `path` (a file or a directory); the bool says truncated.
    async fn grep(
        &self,
        path: &str,
        pattern: &str,
        opts: GrepOptions,
    ) -> Result<(Vec<GrepMatch>, bool), SandboxError>;

    /// Replaces every host path of this sandbox in `text` by its virtual path.
    fn mask(&self, text: &str) -> String;
}

/// Hands out sandboxes per thread.
#[async_trait]
pub trait SandboxProvider: Send + Sync {
    /// Acquires (creating if needed) the sandbox of a thread; returns its id.
    async fn acquire(&self, thread_id: &str) -> Result<String, SandboxError>;
    /// A sandbox acquired earlier. Never blocks.
    fn get(&self, sandbox_id: &str) -> Option<Arc<dyn Sandbox>>;
    /// Returns a sandbox after a run (to a warm pool; not destroyed).
    async fn release(&self, sandbox_id: &str);
    /// The host directories of a thread (without creating them).
    fn thread_paths(&self, thread_id: &str) -> ThreadPaths;
}
