//! Running bash for the agent.
//!
//! **Sandboxed (default).** Each command runs under bubblewrap in fresh mount, PID, IPC, UTS
//! and cgroup namespaces (plus network unless `sandbox.network: true`, and a user namespace
//! when the server is not root). The root is an empty tmpfs, remounted read-only at the end;
//! into it go the system directories read-only (`/usr`, `/bin`, `/sbin`, `/lib*`, `/etc` with
//! `/etc/shadow` and friends hidden under `/dev/null`), a private `/proc`, a minimal `/dev`, a
//! private `/tmp`, the thread's three user-data directories read-write at
//! `/mnt/user-data/{workspace,uploads,outputs}`, enabled skills read-only under `/mnt/skills`,
//! and `sandbox.mounts`. Nothing else of the host is visible: no data dir, no other thread.
//!
//! When the server runs as root, bubblewrap (which needs privileges for the mounts) starts
//! `setpriv`, which drops to the thread's own unprivileged uid/gid with no capabilities, an
//! empty bounding set and `no_new_privs` before bash starts. A real unprivileged uid is what
//! makes `RLIMIT_NPROC` bite (the kernel ignores it for uid 0), so a fork bomb hits the
//! per-thread process cap instead of the host; each thread gets its own uid so one thread's
//! bomb does not starve another's commands. Files the file tools create are given to that
//! uid, so bash can edit them.
//!
//! The command's environment is built from scratch (`PATH`, `HOME`, `LANG`, `TMPDIR`, then
//! `sandbox.environment`, then the request's variables); it is handed to bubblewrap through
//! its environment, never its argument list. At the timeout (or when the caller drops the
//! future) bubblewrap is killed; its child is PID 1 of the namespace and dies with it
//! (`--die-with-parent`), and the kernel kills every other process of a PID namespace whose
//! init exits, so background children, daemons and fork bombs all go. The same teardown
//! happens when the command ends normally: nothing a command starts outlives it.
//!
//! **Host bash** (`sandbox.allow_host_bash: true` and no usable bubblewrap): `bash -c` on the
//! host in its own process group, cwd the thread's workspace, virtual paths in the command
//! rewritten to host paths, same environment policy, timeout kills the whole group. This is
//! *not* a security boundary: the command can read anything the server's user can.
//!
//! Every command runs under resource limits it cannot raise (soft = hard): data memory
//! (`sandbox.memory_limit_mb`, `RLIMIT_DATA`), file size (`file_size_limit_mb`,
//! `RLIMIT_FSIZE`) and CPU time (`cpu_time_limit_seconds`, `RLIMIT_CPU`), so one thread's
//! command cannot take the host's memory, disk or CPU; in the sandbox also a process cap.
//!
//! Output is captured with bounded memory (head and tail of each stream), then masked and
//! redacted by the caller.

use crate::{ExecOutput, SandboxError};
use std::collections::VecDeque;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

/// What `bash` does in this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BashMode {
    /// Commands run inside bubblewrap.
    Sandboxed,
    /// Commands run on the host (`allow_host_bash: true`, no usable bubblewrap); the text
    /// says why bubblewrap is not used. Not a security boundary.
    Host(String),
    /// Bash is refused; the text says why and what to do.
    Unavailable(String),
}

/// How long a failed bubblewrap probe is trusted before trying again.
const PROBE_RETRY: Duration = Duration::from_secs(60);
/// Processes one sandboxed thread may have at once (its own uid; root mode only).
pub(crate) const SANDBOX_NPROC: u32 = 512;
/// Bytes of a stream kept when truncation is off.
const CAPTURE_MAX_BYTES: usize = 10 * 1024 * 1024;
/// How long host bash waits for pipes after the shell exits (background children may hold
/// them open).
const HOST_PIPE_GRACE: Duration = Duration::from_millis(200);
/// How long sandboxed bash waits for pipes after bubblewrap exits (the namespace is gone,
/// so EOF is immediate in practice).
const SANDBOX_PIPE_GRACE: Duration = Duration::from_secs(2);

const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];
const HIDDEN_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
];
const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn missing_bwrap_message() -> String {
    "bash is disabled: bubblewrap (bwrap) is not installed, so commands cannot run inside an \
     OS sandbox. Install bubblewrap, or set sandbox.allow_host_bash: true only in a fully \
     trusted local environment (host bash is not a security boundary)."
        .to_string()
}

fn broken_bwrap_message(detail: &str) -> String {
    format!(
        "bash is disabled: bubblewrap (bwrap) cannot create a sandbox here ({detail}). Allow \
         it to create namespaces, or set sandbox.allow_host_bash: true only in a fully trusted \
         local environment (host bash is not a security boundary)."
    )
}

/// A host directory made visible inside the sandbox.
#[derive(Clone, Debug)]
pub(crate) struct Bind {
    pub host: PathBuf,
    pub dest: String,
    pub read_only: bool,
}

/// One command to run.
pub(crate) struct Job {
    /// The command as the agent wrote it (virtual paths).
    pub command: String,
    /// The command with virtual paths rewritten to host paths (host bash only).
    pub host_command: String,
    /// Virtual roots a host-bash command may name (DeerFlow's best-effort path guard).
    pub host_allowed: Vec<String>,
    pub binds: Vec<Bind>,
    /// Virtual directories to create (parents first) before binding.
    pub dirs: Vec<String>,
    /// The thread's workspace on the host (host bash cwd).
    pub host_workspace: PathBuf,
    /// Working directory inside the sandbox.
    pub cwd: String,
    /// Variables on top of the base environment, in order (later wins).
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Drop to this uid/gid (server running as root).
    pub uid: Option<u32>,
    /// `bash_output_max_chars`, to size the capture window.
    pub max_chars: usize,
    /// Resource limits of the command (soft and hard, so it cannot raise them).
    pub limits: Limits,
}

/// Per-command resource limits; `None` = unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    /// `RLIMIT_DATA`, KiB.
    pub data_kib: Option<u64>,
    /// `RLIMIT_FSIZE`, KiB.
    pub file_kib: Option<u64>,
    /// `RLIMIT_CPU`, seconds.
    pub cpu_seconds: Option<u64>,
}

impl Limits {
    /// The `ulimit` calls that set them (bash counts `-d` and `-f` in KiB outside POSIX
    /// mode); a limit that cannot be set stops the command.
    fn ulimits(&self) -> String {
        let mut out = String::new();
        for (flag, v) in [
            ("-d", self.data_kib),
            ("-f", self.file_kib),
            ("-t", self.cpu_seconds),
        ] {
            if let Some(v) = v {
                out.push_str(&format!("ulimit {flag} {v} || exit 126; "));
            }
        }
        out
    }
}

#[derive(Clone, Debug)]
enum SysEntry {
    Bind(String),
    Symlink { target: PathBuf, path: String },
}

/// Runs jobs, sandboxed or on the host.
pub(crate) struct Runner {
    bwrap: Option<PathBuf>,
    /// `setpriv` as seen inside the sandbox (it lives under a bound system dir).
    setpriv: Option<PathBuf>,
    allow_host: bool,
    network: bool,
    is_root: bool,
    system: Vec<SysEntry>,
    hidden: Vec<PathBuf>,
    /// Last probe: success is kept for good, a failure for [`PROBE_RETRY`].
    probe: tokio::sync::Mutex<Option<(std::time::Instant, Result<(), String>)>>,
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `name` on `PATH` (or the usual system directories).
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/bin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

impl Runner {
    /// `bwrap`/`setpriv`: explicit paths (a missing file means "not installed"). `extra_hidden`
    /// are further host files to hide (e.g. the config file when it lives under `/etc`).
    pub fn new(
        bwrap: Option<PathBuf>,
        setpriv: Option<PathBuf>,
        allow_host: bool,
        network: bool,
        extra_hidden: &[PathBuf],
    ) -> Runner {
        let bwrap = bwrap.filter(|p| is_executable(p));
        let setpriv = setpriv.filter(|p| {
            is_executable(p)
                && ["/usr/", "/bin/", "/sbin/"]
                    .iter()
                    .any(|d| p.to_string_lossy().starts_with(d))
        });
        let mut system = Vec::new();
        for dir in SYSTEM_DIRS {
            match std::fs::symlink_metadata(dir) {
                Ok(md) if md.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(dir) {
                        system.push(SysEntry::Symlink {
                            target,
                            path: dir.to_string(),
                        });
                    }
                }
                Ok(md) if md.is_dir() => system.push(SysEntry::Bind(dir.to_string())),
                _ => {}
            }
        }
        let mut hidden: Vec<PathBuf> = HIDDEN_FILES.iter().map(PathBuf::from).collect();
        for p in extra_hidden {
            if SYSTEM_DIRS.iter().any(|d| p.starts_with(d)) {
                hidden.push(p.clone());
            }
        }
        hidden.retain(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()));
        Runner {
            bwrap,
            setpriv,
            allow_host,
            network,
            is_root: rustix::process::geteuid().is_root(),
            system,
            hidden,
            probe: tokio::sync::Mutex::new(None),
        }
    }

    pub fn is_root(&self) -> bool {
        self.is_root
    }

    /// What bash does here. The first call runs a trivial command in bubblewrap to find
    /// out whether namespaces can be created; the answer is kept.
    pub async fn mode(&self) -> BashMode {
        let Some(_) = &self.bwrap else {
            return if self.allow_host {
                BashMode::Host("bubblewrap (bwrap) is not installed".into())
            } else {
                BashMode::Unavailable(missing_bwrap_message())
            };
        };
        if self.is_root && self.setpriv.is_none() {
            let why = "setpriv (util-linux) is needed to drop root privileges inside the sandbox";
            return if self.allow_host {
                BashMode::Host(why.into())
            } else {
                BashMode::Unavailable(broken_bwrap_message(why))
            };
        }
        let probe = {
            let mut last = self.probe.lock().await;
            match &*last {
                Some((_, Ok(()))) => Ok(()),
                Some((at, Err(e))) if at.elapsed() < PROBE_RETRY => Err(e.clone()),
                _ => {
                    let r = self.probe_once().await;
                    *last = Some((std::time::Instant::now(), r.clone()));
                    r
                }
            }
        };
        match probe {
            Ok(()) => BashMode::Sandboxed,
            Err(e) => {
                tracing::warn!(error = %e, "bubblewrap cannot create a sandbox");
                if self.allow_host {
                    BashMode::Host(format!("bubblewrap cannot create a sandbox here: {e}"))
                } else {
                    BashMode::Unavailable(broken_bwrap_message(&e))
                }
            }
        }
    }

    /// Runs `true` in bubblewrap with the real namespace and privilege setup.
    async fn probe_once(&self) -> Result<(), String> {
        let job = Job {
            command: "true".into(),
            host_command: String::new(),
            host_allowed: Vec::new(),
            binds: Vec::new(),
            dirs: Vec::new(),
            host_workspace: PathBuf::new(),
            cwd: "/".into(),
            env: Vec::new(),
            timeout: Duration::from_secs(30),
            uid: self.is_root.then_some(65534),
            max_chars: 4000,
            limits: Limits::default(),
        };
        match self.run_sandboxed(&job).await {
            Ok(out) if out.exit_code == Some(0) => Ok(()),
            Ok(out) => {
                let detail = out.stderr.trim().to_string();
                Err(if detail.is_empty() {
                    format!("exit code {:?}", out.exit_code)
                } else {
                    detail
                })
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Runs a job in the mode [`Runner::mode`] chose.
    pub async fn run(&self, job: &Job) -> Result<ExecOutput, SandboxError> {
        match self.mode().await {
            BashMode::Sandboxed => self.run_sandboxed(job).await,
            BashMode::Host(_) => {
                // Not a boundary (see `hostguard`); DeerFlow's behaviour for host bash.
                crate::hostguard::check(&job.command, &job.host_allowed)
                    .map_err(SandboxError::Invalid)?;
                self.run_host(job).await
            }
            BashMode::Unavailable(msg) => Err(SandboxError::Unavailable(msg)),
        }
    }

    /// The inner command: bash with a process cap, behind `setpriv` when dropping root.
    fn inner_argv(&self, job: &Job, command: &str, setpriv: Option<&Path>) -> Vec<String> {
        let mut argv = Vec::new();
        let mut wrapper = String::from("ulimit -c 0 2>/dev/null; ");
        wrapper.push_str(&job.limits.ulimits());
        if let (Some(uid), Some(setpriv)) = (job.uid, setpriv) {
            argv.extend([
                setpriv.to_string_lossy().into_owned(),
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".into(),
                "--inh-caps=-all".into(),
                "--bounding-set=-all".into(),
                "--no-new-privs".into(),
                "--".into(),
            ]);
            // Enforced because the uid is a real unprivileged one; soft and hard limits.
            wrapper.push_str(&format!("ulimit -u {SANDBOX_NPROC} || exit 126; "));
        }
        wrapper.push_str("exec /bin/bash -c \"$1\"");
        argv.extend([
            "/bin/bash".into(),
            "-c".into(),
            wrapper,
            "bash".into(),
            command.to_string(),
        ]);
        argv
    }

    fn bwrap_args(&self, job: &Job) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
        if !self.is_root {
            push(&["--unshare-user"]);
        }
        push(&[
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]);
        if !self.network {
            push(&["--unshare-net"]);
        }
        push(&[
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "sandbox",
        ]);
        for e in &self.system {
            match e {
                SysEntry::Bind(d) => push(&["--ro-bind", d, d]),
                SysEntry::Symlink { target, path } => {
                    push(&["--symlink", &target.to_string_lossy(), path])
                }
            }
        }
        for h in &self.hidden {
            let h = h.to_string_lossy();
            push(&["--ro-bind", "/dev/null", &h]);
        }
        push(&["--proc", "/proc", "--dev", "/dev"]);
        push(&["--perms", "01777", "--tmpfs", "/tmp"]);
        for d in &job.dirs {
            push(&["--perms", "0755", "--dir", d]);
        }
        for b in &job.binds {
            let host = b.host.to_string_lossy();
            let flag = if b.read_only { "--ro-bind" } else { "--bind" };
            push(&[flag, &host, &b.dest]);
        }
        push(&["--remount-ro", "/", "--chdir", &job.cwd, "--"]);
        a.extend(self.inner_argv(job, &job.command, self.setpriv.as_deref()));
        a
    }

    fn base_env(home: &str, path: &str) -> Vec<(String, String)> {
        vec![
            ("PATH".into(), path.into()),
            ("HOME".into(), home.into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("TMPDIR".into(), "/tmp".into()),
        ]
    }

    async fn run_sandboxed(&self, job: &Job) -> Result<ExecOutput, SandboxError> {
        let Some(bwrap) = &self.bwrap else {
            return Err(SandboxError::Unavailable(missing_bwrap_message()));
        };
        let mut cmd = Command::new(bwrap);
        cmd.args(self.bwrap_args(job))
            .env_clear()
            .envs(Self::base_env(&job.cwd, SANDBOX_PATH))
            .envs(job.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| SandboxError::Io(format!("cannot start the sandbox: {e}")))?;
        collect(child, job.timeout, false, job.max_chars).await
    }

    async fn run_host(&self, job: &Job) -> Result<ExecOutput, SandboxError> {
        let host_setpriv = self.setpriv.as_deref().filter(|_| self.is_root);
        let argv = self.inner_argv(job, &job.host_command, host_setpriv);
        let mut cmd = Command::new(&argv[0]);
        let home = job.host_workspace.to_string_lossy().into_owned();
        let path = std::env::var("PATH").unwrap_or_else(|_| SANDBOX_PATH.to_string());
        cmd.args(&argv[1..])
            .current_dir(&job.host_workspace)
            .env_clear()
            .envs(Self::base_env(&home, &path))
            .envs(job.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| SandboxError::Io(format!("cannot start bash: {e}")))?;
        collect(child, job.timeout, true, job.max_chars).await
    }
}

/// Records one command's end: `fawn_sandbox_commands_total{exit}`, its duration, the
/// limits it ran into (`fawn_sandbox_limits_hit_total{limit}`) and its span. `quota` says
/// the thread's workspace was over its quota. Memory is recognised by what the command
/// printed (a failed allocation under `RLIMIT_DATA` has no signal of its own), so it is a
/// best effort; CPU time and file size are the signals those limits send.
pub(crate) fn record(
    result: &Result<(ExecOutput, bool), SandboxError>,
    elapsed: Duration,
    span: &fawn_telemetry::trace::Span,
) {
    use fawn_telemetry::trace::Attr;
    let m = fawn_telemetry::metrics();
    m.sandbox_duration.observe(elapsed.as_secs_f64());
    let limit = |name: &str| m.sandbox_limits.with_label_values(&[name]).inc();
    let (out, quota) = match result {
        Ok(r) => r,
        Err(e) => {
            m.sandbox_commands.with_label_values(&["error"]).inc();
            span.fail("sandbox_error", &e.to_string());
            return;
        }
    };
    // SIGXCPU and SIGXFSZ are what RLIMIT_CPU and RLIMIT_FSIZE send.
    const SIGXCPU: i32 = 24;
    const SIGXFSZ: i32 = 25;
    let exit = match out.exit_code {
        _ if out.timed_out => "timeout",
        Some(0) => "ok",
        Some(c) if c < 0 => "signal",
        Some(_) => "nonzero",
        None => "signal",
    };
    m.sandbox_commands.with_label_values(&[exit]).inc();
    if out.timed_out {
        limit("timeout");
    }
    match out.exit_code.map(|c| -c) {
        Some(SIGXCPU) => limit("cpu"),
        Some(SIGXFSZ) => limit("file_size"),
        _ => {}
    }
    let oom = [
        "Cannot allocate memory",
        "MemoryError",
        "out of memory",
        "std::bad_alloc",
    ];
    if out.exit_code != Some(0) && oom.iter().any(|p| out.stderr.contains(p)) {
        limit("memory");
    }
    if out.stdout_omitted > 0 || out.stderr_omitted > 0 {
        limit("output");
    }
    if *quota {
        limit("quota");
    }
    span.set(Attr::new("fawn.sandbox.exit", exit));
    if let Some(code) = out.exit_code {
        span.set(Attr::new("process.exit.code", i64::from(code)));
    }
    if exit == "ok" {
        span.ok();
    } else {
        span.fail(exit, &format!("the command ended: {exit}"));
    }
}

/// Kills a host command's process group unless disarmed (cancellation, timeout).
struct GroupKill {
    pgid: Option<u32>,
}

impl GroupKill {
    fn kill(&mut self) {
        if let Some(pid) = self.pgid.take()
            && let Some(pid) = rustix::process::Pid::from_raw(pid as i32)
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn pump<R: tokio::io::AsyncRead + Unpin>(mut r: R, cap: Arc<Mutex<Capture>>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Ok(mut c) = cap.lock() {
                    c.push(&buf[..n]);
                }
            }
        }
    }
}

async fn collect(
    mut child: Child,
    timeout: Duration,
    host: bool,
    max_chars: usize,
) -> Result<ExecOutput, SandboxError> {
    let mut group = GroupKill {
        pgid: if host { child.id() } else { None },
    };
    let out = Arc::new(Mutex::new(Capture::new(max_chars)));
    let err = Arc::new(Mutex::new(Capture::new(max_chars)));
    let mut readers = Vec::new();
    if let Some(s) = child.stdout.take() {
        readers.push(tokio::spawn(pump(s, out.clone())));
    }
    if let Some(s) = child.stderr.take() {
        readers.push(tokio::spawn(pump(s, err.clone())));
    }
    let (exit_code, timed_out) = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => {
            let code = status
                .code()
                .or_else(|| status.signal().map(|s| -s))
                .unwrap_or(-1);
            // Host bash: background children may keep running, as in DeerFlow.
            group.pgid = None;
            (Some(code), false)
        }
        Ok(Err(e)) => return Err(SandboxError::Io(format!("waiting for bash failed: {e}"))),
        Err(_) => {
            group.kill();
            let _ = child.start_kill();
            let _ = child.wait().await;
            (None, true)
        }
    };
    let grace = if host {
        HOST_PIPE_GRACE
    } else {
        SANDBOX_PIPE_GRACE
    };
    for mut r in readers {
        if tokio::time::timeout(grace, &mut r).await.is_err() {
            r.abort();
        }
    }
    let take = |c: &Arc<Mutex<Capture>>| match c.lock() {
        Ok(mut g) => std::mem::take(&mut *g).finish(),
        Err(_) => (String::new(), 0),
    };
    let (stdout, stdout_omitted) = take(&out);
    let (stderr, stderr_omitted) = take(&err);
    Ok(ExecOutput {
        stdout,
        stderr,
        exit_code,
        timed_out,
        stdout_omitted,
        stderr_omitted,
        timeout,
    })
}

/// Bounded capture of one stream: the first `head_cap` bytes and the last `tail_cap` bytes
/// (head only when truncation is off), counting the characters dropped in between.
#[derive(Default)]
pub(crate) struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
    omitted_chars: usize,
    head_only: bool,
}

fn is_char_start(b: u8) -> bool {
    b & 0xC0 != 0x80
}

impl Capture {
    pub fn new(max_chars: usize) -> Capture {
        if max_chars == 0 {
            Capture {
                head_cap: CAPTURE_MAX_BYTES,
                head_only: true,
                ..Default::default()
            }
        } else {
            // 4 bytes per char: each end alone can fill the final limit.
            let cap = max_chars.saturating_mul(4).clamp(8192, CAPTURE_MAX_BYTES);
            Capture {
                head_cap: cap,
                tail_cap: cap,
                ..Default::default()
            }
        }
    }

    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.head_cap.saturating_sub(self.head.len());
        let take = room.min(data.len());
        self.head.extend_from_slice(&data[..take]);
        data = &data[take..];
        if data.is_empty() || self.head_only {
            return;
        }
        if data.len() >= self.tail_cap {
            let drop_new = data.len() - self.tail_cap;
            self.omitted_chars += self.tail.iter().filter(|b| is_char_start(**b)).count();
            self.omitted_chars += data[..drop_new]
                .iter()
                .filter(|b| is_char_start(**b))
                .count();
            self.tail.clear();
            self.tail.extend(&data[drop_new..]);
        } else {
            self.tail.extend(data);
            let excess = self.tail.len().saturating_sub(self.tail_cap);
            self.omitted_chars += self
                .tail
                .drain(..excess)
                .filter(|b| is_char_start(*b))
                .count();
        }
    }

    /// The text and the number of characters dropped from its middle.
    pub fn finish(self) -> (String, usize) {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.head_only {
            if self.total > self.head.len() as u64 {
                s.push_str(&format!(
                    "\n... [output truncated after {} of {} bytes; remaining output discarded] ...",
                    self.head.len(),
                    self.total
                ));
            }
            return (s, 0);
        }
        let mut tail: Vec<u8> = self.tail.into();
        if self.omitted_chars > 0 {
            // The tail may begin inside a character whose start was dropped.
            let skip = tail.iter().take_while(|b| !is_char_start(**b)).count();
            tail.drain(..skip);
        }
        s.push_str(&String::from_utf8_lossy(&tail));
        (s, self.omitted_chars)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_head_and_tail() {
        let mut c = Capture::new(1000); // 8192-byte windows
        let data: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        for chunk in data.chunks(777) {
            c.push(chunk);
        }
        let (s, omitted) = c.finish();
        assert_eq!(s.len(), 8192 * 2);
        assert_eq!(omitted, 100_000 - 8192 * 2);
        assert!(s.as_bytes().starts_with(&data[..8192]));
        assert!(s.as_bytes().ends_with(&data[data.len() - 8192..]));
    }

    #[test]
    fn capture_head_only_when_unlimited() {
        let mut c = Capture::new(0);
        c.push(b"abc");
        assert_eq!(c.finish(), ("abc".to_string(), 0));
    }

    #[test]
    fn capture_counts_multibyte_chars() {
        let mut c = Capture::new(1);
        let data = "é".repeat(20_000); // 40 000 bytes
        c.push(data.as_bytes());
        let (s, omitted) = c.finish();
        assert_eq!(s.chars().count() + omitted, 20_000);
        assert!(!s.contains('\u{FFFD}'));
    }
}
