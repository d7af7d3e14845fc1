//! Per-thread workspaces and command execution for the agent.
//!
//! Owns: the `Sandbox`/`SandboxProvider` interface, the local provider with per-thread
//! directories under the data dir, the `/mnt/user-data` and `/mnt/skills` virtual path
//! contract (virtual → host translation, host → virtual masking), confinement by resolution,
//! and bash inside an OS sandbox (bubblewrap). This is the only crate that touches thread
//! files on the host or spawns processes for the agent. Must never know about the agent loop,
//! models or HTTP.
//!
//! Layout: [`vpath`] parses virtual paths and maps them onto mounts; `confined` does every
//! file operation relative to a directory handle with `openat2(RESOLVE_BENEATH)` so that no
//! `..`, symlink or rename race can leave the mount; `search` is glob/grep on top of it;
//! `exec` runs bash under bubblewrap; [`host_fs`] is the same rule for the other crates'
//! host-side work on thread files (branch copies, staged replaces, walks, removal);
//! [`mask`] turns host paths back into virtual ones;
//! [`output`] formats and truncates tool texts the way DeerFlow does; [`local`] ties it
//! together as [`LocalSandboxProvider`].

mod confined;
mod exec;
pub mod host_fs;
mod hostguard;
pub mod local;
pub mod mask;
pub mod output;
mod search;
pub mod vpath;

pub use exec::BashMode;
pub use local::{LocalSandbox, LocalSandboxOptions, LocalSandboxProvider, SkillMount, SkillsView};

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
    /// A file operation met a directory.
    #[error("Path is a directory: {0}")]
    IsADirectory(String),
    /// A directory operation met something else.
    #[error("Path is not a directory: {0}")]
    NotADirectory(String),
    /// The file is bigger than the caller allowed.
    #[error("File too large: {0}")]
    TooLarge(String),
    /// The path belongs to a skill that is installed but disabled.
    #[error(
        "Skill '{0}' is disabled. Access to its files is blocked. Enable the skill in settings before using it."
    )]
    SkillDisabled(String),
}

/// How a command is run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecOptions {
    /// Extra environment variables (request secrets), layered over the scrubbed base env.
    pub env: Vec<(String, String)>,
    /// Overrides `sandbox.bash_command_timeout`.
    pub timeout: Option<std::time::Duration>,
}

/// What a command produced, already masked (host paths → virtual paths) and with secret
/// values redacted. Capture is bounded: a stream longer than the capture window keeps its
/// head and its tail, and `*_omitted` counts the characters dropped in between (render with
/// [`output::render_bash_output`], which folds them into its truncation marker).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecOutput {
    pub stdout: String,
    pub stderr: String,
    /// `None` when the process was killed (timeout, cancellation). A process ended by a
    /// signal reports `-signal`, as Python's `returncode` does.
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// Characters dropped from the middle of stdout during capture.
    pub stdout_omitted: usize,
    /// Characters dropped from the middle of stderr during capture.
    pub stderr_omitted: usize,
    /// The timeout that applied.
    pub timeout: std::time::Duration,
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

    /// Serialises read-modify-write sequences on one path (`str_replace`, `write_file`).
    /// Hold the guard for the whole sequence. The default is a lock nobody else shares.
    async fn lock_path(&self, path: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let _ = path;
        Arc::new(tokio::sync::Mutex::new(())).lock_owned().await
    }
}

/// Hands out sandboxes per thread.
#[async_trait]
pub trait SandboxProvider: Send + Sync {
    /// Acquires (creating if needed) the sandbox of a thread; returns its id.
    async fn acquire(&self, thread_id: &str) -> Result<String, SandboxError>;
    /// Acquires the sandbox of a thread owned by `user_id` (DeerFlow's per-user thread
    /// directories). The default ignores the user.
    async fn acquire_for_user(
        &self,
        user_id: &str,
        thread_id: &str,
    ) -> Result<String, SandboxError> {
        let _ = user_id;
        self.acquire(thread_id).await
    }
    /// A sandbox acquired earlier. Never blocks.
    fn get(&self, sandbox_id: &str) -> Option<Arc<dyn Sandbox>>;
    /// Returns a sandbox after a run (to a warm pool; not destroyed).
    async fn release(&self, sandbox_id: &str);
    /// The host directories of a thread (without creating them).
    fn thread_paths(&self, thread_id: &str) -> ThreadPaths;
}

/// The `sandbox.use` values Fawn implements: DeerFlow's local provider, which Fawn runs with
/// bubblewrap.
pub const SUPPORTED_PROVIDERS: &[&str] = &["deerflow.sandbox.local:LocalSandboxProvider"];

/// Checks `sandbox.use` (for the config loader): a provider Fawn does not have is said out
/// loud (a warning, an error when loading strictly), never silently replaced.
pub fn validate_sandbox_config(app: &fawn_config::AppConfig) -> Vec<fawn_config::ConfigIssue> {
    match app.sandbox.use_.as_deref().map(str::trim) {
        None | Some("") => Vec::new(),
        Some(u) if SUPPORTED_PROVIDERS.contains(&u) => Vec::new(),
        Some(u) => vec![fawn_config::ConfigIssue::unsupported(
            "sandbox.use",
            format!(
                "sandbox provider '{u}' is not implemented by Fawn; bash and the file tools \
                 run in Fawn's local sandbox (bubblewrap) instead"
            ),
        )],
    }
}
