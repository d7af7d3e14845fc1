//! The local provider: one [`LocalSandbox`] per thread, backed by directories under the data
//! dir, with bash in bubblewrap.
//!
//! # Skills hand-off
//!
//! The provider does not discover skills. Whoever owns skills (enablement lives in
//! `extensions_config.json`) tells it what to show with [`LocalSandboxProvider::set_skills`]:
//! a [`SkillsView`] listing each enabled skill as a [`SkillMount`] (`public/deep-research` →
//! its host directory) and the virtual sub-paths of disabled ones. Only enabled skills are
//! visible, read-only, at `/mnt/skills/<subpath>` — to the file tools and inside bash. A path
//! under a disabled skill gets DeerFlow's "Skill 'x' is disabled" error. A single prepared
//! directory can be handed over as `SkillMount { subpath: "", host_dir }` (mounted at
//! `/mnt/skills` itself). Until `set_skills` is called no skill is visible (fail closed).

use crate::confined::{self, FsError};
use crate::exec::{self, BashMode, Bind, Job, Runner};
use crate::mask::{self, Masker};
use crate::output;
use crate::search::{self, GrepQuery, PathPattern};
use crate::vpath::{self, Access, Mount, MountKind, MountTable, Target};
use crate::{
    ExecOptions, ExecOutput, GrepMatch, GrepOptions, Sandbox, SandboxError, SandboxProvider,
    ThreadPaths, VIRTUAL_USER_DATA, VIRTUAL_WORKSPACE, valid_thread_id,
};
use async_trait::async_trait;
use fawn_config::{SandboxConfig, Settings};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// The user id DeerFlow uses without auth.
pub const DEFAULT_USER: &str = "default";
/// Sandboxes kept warm (DeerFlow's LRU size).
pub const DEFAULT_MAX_SANDBOXES: usize = 256;
/// Largest file `ls`/`read_bytes` callers should ask for by default (downloads, uploads).
pub const MAX_DOWNLOAD_BYTES: u64 = 100 * 1024 * 1024;
/// Entries `list_dir` collects at most (its output is truncated far below this).
const LIST_MAX_ENTRIES: usize = 10_000;

/// First uid of the per-thread range used when the server runs as root.
const THREAD_UID_BASE: u32 = 1_500_000_000;
/// Size of that range.
const THREAD_UID_SPAN: u32 = 1 << 24;
/// Fallback when the range is not mapped in this user namespace.
const NOBODY: u32 = 65534;

/// One enabled skill, shown read-only at `/mnt/skills/<subpath>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillMount {
    /// Virtual path under the skills root, relative (`public/deep-research`) or absolute
    /// (`/mnt/skills/public/deep-research`); empty for a directory mounted at the skills root
    /// itself.
    pub subpath: String,
    pub host_dir: PathBuf,
}

/// What `/mnt/skills` shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SkillsView {
    pub enabled: Vec<SkillMount>,
    /// Sub-paths (`public/foo`, or absolute `/mnt/skills/public/foo`) of skills that exist
    /// but are disabled.
    pub disabled: Vec<String>,
}

/// Construction options beyond [`Settings`].
#[derive(Clone, Debug)]
pub struct LocalSandboxOptions {
    /// Owner of threads acquired with [`SandboxProvider::acquire`].
    pub user_id: String,
    /// `bwrap` to use; `None` searches `PATH`. A path that does not exist means "not
    /// installed" (tests use this).
    pub bwrap_path: Option<PathBuf>,
    /// `setpriv` to use; `None` searches `PATH`.
    pub setpriv_path: Option<PathBuf>,
    pub skills: SkillsView,
    pub max_sandboxes: usize,
}

impl Default for LocalSandboxOptions {
    fn default() -> Self {
        LocalSandboxOptions {
            user_id: DEFAULT_USER.to_string(),
            bwrap_path: None,
            setpriv_path: None,
            skills: SkillsView::default(),
            max_sandboxes: DEFAULT_MAX_SANDBOXES,
        }
    }
}

/// The uid a thread's commands run as when the server is root.
#[derive(Clone, Copy, Debug)]
enum UidPolicy {
    /// Not root: commands run as the server's user.
    Inherit,
    /// One uid per thread from a reserved range.
    PerThread,
    /// The range is not mapped here: everyone is `nobody`.
    Nobody,
}

struct SkillsState {
    mounts: Vec<Mount>,
    disabled: Vec<String>,
    masker: Masker,
    generation: u64,
}

struct Shared {
    home: PathBuf,
    config: SandboxConfig,
    skills_root: String,
    skills_dir: PathBuf,
    /// Whether `skills_dir` existed at startup (host bash rewrites `/mnt/skills` to it).
    skills_dir_exists: bool,
    skills: RwLock<Arc<SkillsState>>,
    custom: Vec<Mount>,
    custom_masker: Masker,
    runner: Runner,
    uid_policy: UidPolicy,
}

impl Shared {
    fn skills(&self) -> Arc<SkillsState> {
        match self.skills.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

struct Entry {
    sandbox: Arc<LocalSandbox>,
    last_used: u64,
}

/// Per-thread sandboxes under `{home}/users/{user}/threads/{thread}/user-data`.
pub struct LocalSandboxProvider {
    shared: Arc<Shared>,
    user_id: String,
    max_sandboxes: usize,
    sandboxes: Mutex<HashMap<String, Entry>>,
    clock: AtomicU64,
}

/// DeerFlow's safe-id rule for user ids: `[A-Za-z0-9_-]{1,128}`.
fn valid_user_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Paths a custom mount may not use (or contain, or sit inside).
const RESERVED_VIRTUAL: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev", "/tmp",
];

fn overlaps(a: &str, b: &str) -> bool {
    vpath::is_under(a, b) || vpath::is_under(b, a)
}

/// A skill sub-path as given: relative (`public/a`) or absolute under the skills root
/// (`/mnt/skills/public/a`), returned relative. `None` when absolute elsewhere.
fn skill_subpath<'a>(sub: &'a str, skills_root: &str) -> Option<&'a str> {
    let sub = if sub.len() > 1 {
        sub.trim_end_matches('/')
    } else {
        sub
    };
    if sub.starts_with('/') {
        if !vpath::is_under(sub, skills_root) {
            return None;
        }
        return Some(sub[skills_root.len()..].trim_start_matches('/'));
    }
    Some(sub)
}

fn skill_mounts(
    view: &SkillsView,
    skills_root: &str,
) -> Result<(Vec<Mount>, Vec<String>, Masker), SandboxError> {
    let mut mounts = Vec::new();
    let mut masker = Masker::new();
    for s in &view.enabled {
        let sub = skill_subpath(&s.subpath, skills_root)
            .filter(|sub| vpath::valid_subpath(sub))
            .ok_or_else(|| {
                SandboxError::Invalid(format!("invalid skill sub-path: {:?}", s.subpath))
            })?;
        if !s.host_dir.is_absolute() {
            return Err(SandboxError::Invalid(format!(
                "skill directory must be absolute: {}",
                s.subpath
            )));
        }
        let virtual_root = vpath::join(skills_root, sub);
        if mounts
            .iter()
            .any(|m: &Mount| overlaps(&m.virtual_root, &virtual_root))
        {
            return Err(SandboxError::Invalid(format!(
                "skill sub-paths overlap: {virtual_root}"
            )));
        }
        masker.add(&s.host_dir, &virtual_root);
        mounts.push(Mount {
            virtual_root,
            host_root: s.host_dir.clone(),
            prefix: PathBuf::new(),
            read_only: true,
            kind: MountKind::Skill,
        });
    }
    let mut disabled = Vec::new();
    for d in &view.disabled {
        let sub = skill_subpath(d, skills_root)
            .filter(|sub| !sub.is_empty() && vpath::valid_subpath(sub))
            .ok_or_else(|| {
                SandboxError::Invalid(format!("invalid disabled skill sub-path: {d:?}"))
            })?;
        disabled.push(vpath::join(skills_root, sub));
    }
    Ok((mounts, disabled, masker))
}

/// Whether `[base, base + span)` is mapped in this process's user namespace (`uid_map`).
fn id_range_mapped(map_file: &str, base: u32, span: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(map_file) else {
        return false;
    };
    text.lines().any(|l| {
        let f: Vec<u64> = l
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        f.len() == 3 && f[0] <= base as u64 && (base as u64 + span as u64) <= f[0] + f[2]
    })
}

/// FNV-1a, stable across releases (the uid of a thread must not change).
fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in data {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

impl LocalSandboxProvider {
    /// A provider with default options (user `default`, `bwrap`/`setpriv` from `PATH`, no
    /// skills until [`set_skills`](Self::set_skills)).
    pub fn new(settings: &Settings) -> Result<LocalSandboxProvider, SandboxError> {
        Self::with_options(settings, LocalSandboxOptions::default())
    }

    /// Validates `sandbox.mounts` (absolute, no `..`, not `/`, not over the system, user-data
    /// or skills paths, not nested in each other); mounts whose host directory is missing are
    /// skipped with a warning, as DeerFlow does. Does a few blocking `stat`s: call at startup.
    pub fn with_options(
        settings: &Settings,
        opts: LocalSandboxOptions,
    ) -> Result<LocalSandboxProvider, SandboxError> {
        if !valid_user_id(&opts.user_id) {
            return Err(SandboxError::Invalid(format!(
                "invalid user id: {:?}",
                opts.user_id
            )));
        }
        let config = settings.app.sandbox.clone();
        let skills_root = vpath::normalize(&settings.app.skills.container_path, "/mnt/skills")
            .map_err(|_| {
                SandboxError::Invalid(format!(
                    "skills.container_path must be an absolute path: {}",
                    settings.app.skills.container_path
                ))
            })?;
        if skills_root == "/" {
            return Err(SandboxError::Invalid(
                "skills.container_path cannot be /".into(),
            ));
        }
        for r in RESERVED_VIRTUAL.iter().chain([&VIRTUAL_USER_DATA]) {
            if overlaps(&skills_root, r) {
                return Err(SandboxError::Invalid(format!(
                    "skills.container_path {skills_root} overlaps {r}"
                )));
            }
        }
        let mut custom: Vec<Mount> = Vec::new();
        let mut custom_masker = Masker::new();
        for (i, m) in config.mounts.iter().enumerate() {
            let bad = |why: &str| {
                SandboxError::Invalid(format!(
                    "sandbox.mounts[{i}]: {why} ({} -> {})",
                    m.host_path, m.container_path
                ))
            };
            let virt = vpath::normalize(&m.container_path, &skills_root)
                .map_err(|_| bad("container_path must be absolute without '..'"))?;
            if virt == "/" {
                return Err(bad("container_path cannot be /"));
            }
            for r in RESERVED_VIRTUAL
                .iter()
                .chain([&VIRTUAL_USER_DATA, &skills_root.as_str()])
            {
                if overlaps(&virt, r) {
                    return Err(bad(&format!("container_path overlaps {r}")));
                }
            }
            if custom.iter().any(|c| overlaps(&c.virtual_root, &virt)) {
                return Err(bad("container_path overlaps another mount"));
            }
            let host = PathBuf::from(&m.host_path);
            if !host.is_absolute() || host.parent().is_none() {
                return Err(bad("host_path must be an absolute path other than /"));
            }
            if !host.is_dir() {
                tracing::warn!(host = %m.host_path, container = %virt, "sandbox mount skipped: host directory missing");
                continue;
            }
            custom_masker.add(&host, &virt);
            custom.push(Mount {
                virtual_root: virt,
                host_root: host,
                prefix: PathBuf::new(),
                read_only: m.read_only,
                kind: MountKind::Custom,
            });
        }
        let (mounts, disabled, masker) = skill_mounts(&opts.skills, &skills_root)?;
        let bwrap = opts.bwrap_path.or_else(|| exec::find_program("bwrap"));
        let setpriv = opts.setpriv_path.or_else(|| exec::find_program("setpriv"));
        let hidden: Vec<PathBuf> = [&settings.config_path, &settings.extensions_path]
            .into_iter()
            .flatten()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        let runner = Runner::new(
            bwrap,
            setpriv,
            config.allow_host_bash,
            config.network,
            &hidden,
        );
        let uid_policy = if !runner.is_root() {
            UidPolicy::Inherit
        } else if id_range_mapped("/proc/self/uid_map", THREAD_UID_BASE, THREAD_UID_SPAN)
            && id_range_mapped("/proc/self/gid_map", THREAD_UID_BASE, THREAD_UID_SPAN)
        {
            UidPolicy::PerThread
        } else {
            UidPolicy::Nobody
        };
        Ok(LocalSandboxProvider {
            shared: Arc::new(Shared {
                home: settings.home.clone(),
                config,
                skills_root,
                skills_dir: settings.skills_dir.clone(),
                skills_dir_exists: settings.skills_dir.is_dir(),
                skills: RwLock::new(Arc::new(SkillsState {
                    mounts,
                    disabled,
                    masker: masker.finish(),
                    generation: 0,
                })),
                custom,
                custom_masker: custom_masker.finish(),
                runner,
                uid_policy,
            }),
            user_id: opts.user_id,
            max_sandboxes: opts.max_sandboxes.max(1),
            sandboxes: Mutex::new(HashMap::new()),
            clock: AtomicU64::new(0),
        })
    }

    /// Replaces what `/mnt/skills` shows, for every sandbox (running commands keep the view
    /// they started with).
    pub async fn set_skills(&self, view: SkillsView) -> Result<(), SandboxError> {
        let root = self.shared.skills_root.clone();
        let (mounts, disabled, masker) =
            tokio::task::spawn_blocking(move || skill_mounts(&view, &root))
                .await
                .map_err(|e| SandboxError::Io(e.to_string()))??;
        let mut guard = match self.shared.skills.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let generation = guard.generation + 1;
        *guard = Arc::new(SkillsState {
            mounts,
            disabled,
            masker: masker.finish(),
            generation,
        });
        Ok(())
    }

    /// What `bash` does here (runs a one-time bubblewrap probe).
    pub async fn bash_mode(&self) -> BashMode {
        self.shared.runner.mode().await
    }

    fn sandbox_id(user_id: &str, thread_id: &str) -> String {
        if user_id == DEFAULT_USER {
            format!("local:{thread_id}")
        } else {
            format!("local:{user_id}:{thread_id}")
        }
    }

    fn uid_for(&self, user_id: &str, thread_id: &str) -> Option<u32> {
        match self.shared.uid_policy {
            UidPolicy::Inherit => None,
            UidPolicy::Nobody => Some(NOBODY),
            UidPolicy::PerThread => {
                let key = format!("{user_id}\0{thread_id}");
                Some(THREAD_UID_BASE + (fnv1a(key.as_bytes()) % THREAD_UID_SPAN as u64) as u32)
            }
        }
    }

    fn touch(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// The sandbox object of an acquired id (concrete type; tests and the gateway).
    pub fn get_local(&self, sandbox_id: &str) -> Option<Arc<LocalSandbox>> {
        let tick = self.touch();
        let mut map = self.sandboxes.lock().ok()?;
        let e = map.get_mut(sandbox_id)?;
        e.last_used = tick;
        Some(e.sandbox.clone())
    }
}

#[async_trait]
impl SandboxProvider for LocalSandboxProvider {
    async fn acquire(&self, thread_id: &str) -> Result<String, SandboxError> {
        let user = self.user_id.clone();
        self.acquire_for_user(&user, thread_id).await
    }

    async fn acquire_for_user(
        &self,
        user_id: &str,
        thread_id: &str,
    ) -> Result<String, SandboxError> {
        if !valid_thread_id(thread_id) {
            return Err(SandboxError::Invalid(format!(
                "invalid thread id: {thread_id:?}"
            )));
        }
        if !valid_user_id(user_id) {
            return Err(SandboxError::Invalid(format!(
                "invalid user id: {user_id:?}"
            )));
        }
        let id = Self::sandbox_id(user_id, thread_id);
        if self.get_local(&id).is_some() {
            return Ok(id);
        }
        let paths = ThreadPaths::new(&self.shared.home, user_id, thread_id);
        let uid = self.uid_for(user_id, thread_id);
        let owner = uid.map(|u| (u, u));
        let p = paths.clone();
        let masker = tokio::task::spawn_blocking(move || -> Result<Masker, SandboxError> {
            ensure_dirs(&p, owner)?;
            let mut m = Masker::new();
            m.add(&p.workspace, VIRTUAL_WORKSPACE);
            m.add(&p.uploads, crate::VIRTUAL_UPLOADS);
            m.add(&p.outputs, crate::VIRTUAL_OUTPUTS);
            m.add(&p.user_data, VIRTUAL_USER_DATA);
            Ok(m.finish())
        })
        .await
        .map_err(|e| SandboxError::Io(e.to_string()))??;
        let sandbox = Arc::new(LocalSandbox {
            id: id.clone(),
            paths,
            owner,
            shared: self.shared.clone(),
            thread_masker: masker,
            masker_cache: Mutex::new(None),
            locks: Mutex::new(HashMap::new()),
        });
        let tick = self.touch();
        let mut map = self
            .sandboxes
            .lock()
            .map_err(|_| SandboxError::Unavailable("sandbox table poisoned".into()))?;
        if !map.contains_key(&id)
            && map.len() >= self.max_sandboxes
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.entry(id.clone()).or_insert(Entry {
            sandbox,
            last_used: tick,
        });
        Ok(id)
    }

    fn get(&self, sandbox_id: &str) -> Option<Arc<dyn Sandbox>> {
        self.get_local(sandbox_id).map(|s| s as Arc<dyn Sandbox>)
    }

    async fn release(&self, sandbox_id: &str) {
        // Kept warm: nothing runs between commands, so there is nothing to stop.
        let _ = self.get_local(sandbox_id);
    }

    fn thread_paths(&self, thread_id: &str) -> ThreadPaths {
        ThreadPaths::new(&self.shared.home, &self.user_id, thread_id)
    }
}

fn ensure_dirs(p: &ThreadPaths, owner: Option<(u32, u32)>) -> Result<(), SandboxError> {
    let io = |e: std::io::Error| {
        SandboxError::Io(format!("cannot create thread directories: {}", e.kind()))
    };
    std::fs::create_dir_all(&p.user_data).map_err(io)?;
    for d in [&p.workspace, &p.uploads, &p.outputs] {
        confined::ensure_owned_dir(d, owner).map_err(io)?;
    }
    Ok(())
}

/// One thread's sandbox.
pub struct LocalSandbox {
    id: String,
    paths: ThreadPaths,
    /// uid/gid that owns what the agent creates (root mode).
    owner: Option<(u32, u32)>,
    shared: Arc<Shared>,
    thread_masker: Masker,
    masker_cache: Mutex<Option<(u64, Arc<Masker>)>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

fn fs_error(e: FsError, path: &str) -> SandboxError {
    match e {
        FsError::NotFound => SandboxError::NotFound(path.to_string()),
        FsError::Denied(why) => SandboxError::PermissionDenied(format!("{path}: {why}")),
        FsError::Symlink => {
            SandboxError::PermissionDenied(format!("{path}: symbolic link refused"))
        }
        FsError::IsDir => SandboxError::IsADirectory(path.to_string()),
        FsError::NotDir => SandboxError::NotADirectory(path.to_string()),
        FsError::NotRegular => SandboxError::Invalid(format!("{path} is not a regular file")),
        FsError::TooLarge(n) => SandboxError::TooLarge(format!("{path} ({n} bytes)")),
        FsError::Other(e) => SandboxError::Io(format!("{path}: {}", e.kind())),
    }
}

fn join_err(e: tokio::task::JoinError) -> SandboxError {
    SandboxError::Io(format!("background task failed: {e}"))
}

fn valid_env_name(k: &str) -> bool {
    let mut b = k.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

impl LocalSandbox {
    fn table(&self) -> MountTable {
        let skills = self.shared.skills();
        let mut mounts = Vec::new();
        for name in ["workspace", "uploads", "outputs"] {
            mounts.push(Mount {
                virtual_root: format!("{VIRTUAL_USER_DATA}/{name}"),
                host_root: self.paths.user_data.clone(),
                prefix: PathBuf::from(name),
                read_only: false,
                kind: MountKind::UserData,
            });
        }
        mounts.extend(skills.mounts.iter().cloned());
        mounts.extend(self.shared.custom.iter().cloned());
        MountTable::new(mounts, &self.shared.skills_root, skills.disabled.clone())
    }

    fn masker(&self) -> Arc<Masker> {
        let skills = self.shared.skills();
        if let Ok(mut cache) = self.masker_cache.lock() {
            if let Some((generation, m)) = cache.as_ref()
                && *generation == skills.generation
            {
                return m.clone();
            }
            let m = Arc::new(self.build_masker(&skills));
            *cache = Some((skills.generation, m.clone()));
            return m;
        }
        Arc::new(self.build_masker(&skills))
    }

    fn build_masker(&self, skills: &SkillsState) -> Masker {
        let mut m = Masker::new();
        m.extend(&self.thread_masker);
        m.extend(&skills.masker);
        m.extend(&self.shared.custom_masker);
        m.add_raw(
            &self.shared.skills_dir.to_string_lossy(),
            &self.shared.skills_root,
        );
        m.finish()
    }

    /// The uid/gid commands run as (root mode), for diagnostics and tests.
    pub fn owner(&self) -> Option<(u32, u32)> {
        self.owner
    }

    async fn ensure_dirs(&self) -> Result<(), SandboxError> {
        let p = self.paths.clone();
        let owner = self.owner;
        tokio::task::spawn_blocking(move || ensure_dirs(&p, owner))
            .await
            .map_err(join_err)?
    }

    fn masked(&self, e: SandboxError) -> SandboxError {
        let m = self.masker();
        match e {
            SandboxError::PermissionDenied(s) => SandboxError::PermissionDenied(m.mask(&s)),
            SandboxError::NotFound(s) => SandboxError::NotFound(m.mask(&s)),
            SandboxError::Invalid(s) => SandboxError::Invalid(m.mask(&s)),
            SandboxError::Unavailable(s) => SandboxError::Unavailable(m.mask(&s)),
            SandboxError::Io(s) => SandboxError::Io(m.mask(&s)),
            SandboxError::IsADirectory(s) => SandboxError::IsADirectory(m.mask(&s)),
            SandboxError::NotADirectory(s) => SandboxError::NotADirectory(m.mask(&s)),
            SandboxError::TooLarge(s) => SandboxError::TooLarge(m.mask(&s)),
            SandboxError::SkillDisabled(s) => SandboxError::SkillDisabled(s),
        }
    }

    fn job(&self, command: &str, opts: &ExecOptions) -> Result<Job, SandboxError> {
        if command.contains('\0') {
            return Err(SandboxError::Invalid("command contains a NUL byte".into()));
        }
        let cfg = &self.shared.config;
        let mut env: Vec<(String, String)> = Vec::new();
        for (k, v) in cfg
            .environment
            .iter()
            .chain(opts.env.iter().map(|(k, v)| (k, v)))
        {
            if !valid_env_name(k) {
                return Err(SandboxError::Invalid(format!(
                    "invalid environment variable name: {k:?}"
                )));
            }
            if v.contains('\0') {
                return Err(SandboxError::Invalid(format!(
                    "environment variable {k} contains a NUL byte"
                )));
            }
            env.push((k.clone(), v.clone()));
        }
        let table = self.table();
        let mut binds = Vec::new();
        let mut dirs: Vec<String> = vec!["/mnt".into()];
        for d in table.virtual_dirs() {
            add_with_parents(&mut dirs, d);
        }
        let mut roots: Vec<(String, String)> = vec![(
            VIRTUAL_USER_DATA.to_string(),
            self.paths.user_data.to_string_lossy().into_owned(),
        )];
        if self.shared.skills_dir_exists {
            roots.push((
                self.shared.skills_root.clone(),
                self.shared.skills_dir.to_string_lossy().into_owned(),
            ));
        }
        for m in table.mounts() {
            if let Some(parent) = vpath::parent(&m.virtual_root) {
                add_with_parents(&mut dirs, parent);
            }
            let host = m.host_dir();
            roots.push((m.virtual_root.clone(), host.to_string_lossy().into_owned()));
            binds.push(Bind {
                host,
                dest: m.virtual_root.clone(),
                read_only: m.read_only,
            });
        }
        // Parents before children, so each bind lands on an existing directory.
        binds.sort_by(|a, b| a.dest.cmp(&b.dest));
        let host_command = mask::rewrite_command(command, &roots);
        let mut host_allowed = vec![
            VIRTUAL_USER_DATA.to_string(),
            self.shared.skills_root.clone(),
        ];
        host_allowed.extend(self.shared.custom.iter().map(|m| m.virtual_root.clone()));
        Ok(Job {
            command: command.to_string(),
            host_command,
            host_allowed,
            binds,
            dirs,
            host_workspace: self.paths.workspace.clone(),
            cwd: VIRTUAL_WORKSPACE.to_string(),
            env,
            timeout: opts
                .timeout
                .unwrap_or(Duration::from_secs(cfg.bash_command_timeout.max(1))),
            uid: self.owner.map(|o| o.0),
            max_chars: cfg.bash_output_max_chars,
            limits: crate::exec::Limits {
                data_kib: (cfg.memory_limit_mb > 0).then(|| cfg.memory_limit_mb * 1024),
                file_kib: (cfg.file_size_limit_mb > 0).then(|| cfg.file_size_limit_mb * 1024),
                cpu_seconds: (cfg.cpu_time_limit_seconds > 0).then_some(cfg.cpu_time_limit_seconds),
            },
        })
    }

    async fn list_virtual(
        &self,
        table: &MountTable,
        dir: &str,
        max_depth: usize,
    ) -> Result<Vec<String>, SandboxError> {
        let mut out = Vec::new();
        if max_depth == 0 {
            return Ok(out);
        }
        for (child, mount) in table.virtual_children(dir) {
            match mount {
                Some(m) => {
                    let host = m.host_dir();
                    let exists = tokio::task::spawn_blocking(move || host.is_dir())
                        .await
                        .map_err(join_err)?;
                    if !exists {
                        continue;
                    }
                    out.push(format!("{child}/"));
                    if max_depth > 1 {
                        let (root, rel) = (m.host_root.clone(), m.prefix.clone());
                        let depth = max_depth - 1;
                        let entries = tokio::task::spawn_blocking(move || {
                            search::list(&root, &rel, depth, LIST_MAX_ENTRIES)
                        })
                        .await
                        .map_err(join_err)?
                        .unwrap_or_default();
                        for (rel, is_dir) in entries {
                            out.push(format!(
                                "{}{}",
                                vpath::join(&child, &rel),
                                if is_dir { "/" } else { "" }
                            ));
                        }
                    }
                }
                None => {
                    out.push(format!("{child}/"));
                    let sub = Box::pin(self.list_virtual(table, &child, max_depth - 1)).await?;
                    out.extend(sub);
                }
            }
        }
        Ok(out)
    }

    fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = match self.locks.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        if map.len() > 1024 {
            map.retain(|_, l| Arc::strong_count(l) > 1);
        }
        map.entry(key.to_string()).or_default().clone()
    }
}

/// One mount to walk for a glob/grep starting at a virtual path.
struct WalkTarget {
    /// Virtual directory the walk starts at.
    vdir: String,
    host_root: PathBuf,
    rel: PathBuf,
    /// `vdir` relative to the requested start (empty when the start is inside a mount).
    prefix: String,
}

fn relative_to<'a>(path: &'a str, dir: &str) -> &'a str {
    path[dir.len()..].trim_start_matches('/')
}

fn walk_targets(table: &MountTable, norm: &str, target: Target<'_>) -> Vec<WalkTarget> {
    match target {
        Target::Mounted { mount, rel } => vec![WalkTarget {
            vdir: norm.to_string(),
            host_root: mount.host_root.clone(),
            rel,
            prefix: String::new(),
        }],
        Target::VirtualDir => {
            let mut v: Vec<WalkTarget> = table
                .mounts()
                .iter()
                .filter(|m| m.virtual_root != norm && vpath::is_under(&m.virtual_root, norm))
                .map(|m| WalkTarget {
                    vdir: m.virtual_root.clone(),
                    host_root: m.host_root.clone(),
                    rel: m.prefix.clone(),
                    prefix: relative_to(&m.virtual_root, norm).to_string(),
                })
                .collect();
            v.sort_by(|a, b| a.vdir.cmp(&b.vdir));
            v
        }
    }
}

fn add_with_parents(dirs: &mut Vec<String>, d: &str) {
    let mut chain = Vec::new();
    let mut cur = Some(d);
    while let Some(c) = cur {
        if c == "/" {
            break;
        }
        chain.push(c.to_string());
        cur = vpath::parent(c);
    }
    for c in chain.into_iter().rev() {
        if !dirs.contains(&c) {
            dirs.push(c);
        }
    }
}

impl LocalSandbox {
    /// [`Sandbox::execute`] without its span and metrics.
    async fn execute_inner(
        &self,
        command: &str,
        opts: ExecOptions,
    ) -> Result<(ExecOutput, bool), SandboxError> {
        self.ensure_dirs().await?;
        // Past the quota a command still runs (so it can delete files) but cannot write
        // a single byte to a file.
        let over_quota = self.check_quota(0).await.err();
        let mut job = self.job(command, &opts)?;
        if over_quota.is_some() {
            job.limits.file_kib = Some(0);
        }
        let mut out = self
            .shared
            .runner
            .run(&job)
            .await
            .map_err(|e| self.masked(e))?;
        let m = self.masker();
        let secrets: Vec<&str> = opts.env.iter().map(|(_, v)| v.as_str()).collect();
        out.stdout = output::redact_secrets(&m.mask(&out.stdout), secrets.iter().copied());
        out.stderr = output::redact_secrets(&m.mask(&out.stderr), secrets.iter().copied());
        let quota = over_quota.or(self.check_quota(0).await.err());
        let quota_hit = quota.is_some();
        if let Some(e) = quota {
            if !out.stderr.is_empty() && !out.stderr.ends_with('\n') {
                out.stderr.push('\n');
            }
            out.stderr
                .push_str(&format!("{e}; until then commands cannot write files"));
        }
        Ok((out, quota_hit))
    }
}

#[async_trait]
impl Sandbox for LocalSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    fn paths(&self) -> &ThreadPaths {
        &self.paths
    }

    async fn execute(&self, command: &str, opts: ExecOptions) -> Result<ExecOutput, SandboxError> {
        let started = std::time::Instant::now();
        let span = fawn_telemetry::trace::start(
            || "sandbox.exec",
            fawn_telemetry::trace::Kind::Internal,
            |a| {
                use fawn_telemetry::trace::{Attr, attrs};
                a.push(Attr::new(attrs::OI_SPAN_KIND, "CHAIN"));
                a.push(Attr::new("fawn.sandbox.id", self.id.clone()));
                if fawn_telemetry::trace::capture_inputs() {
                    a.push(Attr::new(
                        attrs::INPUT_VALUE,
                        attrs::clip(command.to_string()),
                    ));
                }
            },
        );
        let result =
            fawn_telemetry::trace::instrument(self.execute_inner(command, opts), &span).await;
        crate::exec::record(&result, started.elapsed(), &span);
        span.end();
        result.map(|(out, _)| out)
    }

    async fn read_bytes(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, SandboxError> {
        let table = self.table();
        let (norm, target) = table.resolve(path, Access::Read)?;
        let Target::Mounted { mount, rel } = target else {
            return Err(SandboxError::IsADirectory(norm));
        };
        let root = mount.host_root.clone();
        let r = tokio::task::spawn_blocking(move || confined::read_file(&root, &rel, max_bytes))
            .await
            .map_err(join_err)?;
        r.map_err(|e| self.masked(fs_error(e, &norm)))
    }

    async fn write_text(
        &self,
        path: &str,
        content: &str,
        append: bool,
    ) -> Result<(), SandboxError> {
        self.write(path, content.as_bytes().to_vec(), append).await
    }

    async fn write_bytes(&self, path: &str, content: &[u8]) -> Result<(), SandboxError> {
        self.write(path, content.to_vec(), false).await
    }

    async fn list_dir(&self, path: &str, max_depth: usize) -> Result<Vec<String>, SandboxError> {
        let table = self.table();
        let (norm, target) = table.resolve(path, Access::Read)?;
        let mut out = match target {
            Target::VirtualDir => self.list_virtual(&table, &norm, max_depth).await?,
            Target::Mounted { mount, rel } => {
                let root = mount.host_root.clone();
                let entries = tokio::task::spawn_blocking(move || {
                    search::list(&root, &rel, max_depth, LIST_MAX_ENTRIES)
                })
                .await
                .map_err(join_err)?
                .map_err(|e| self.masked(fs_error(e, &norm)))?;
                entries
                    .into_iter()
                    .map(|(rel, is_dir)| {
                        format!(
                            "{}{}",
                            vpath::join(&norm, &rel),
                            if is_dir { "/" } else { "" }
                        )
                    })
                    .collect()
            }
        };
        out.sort();
        Ok(out)
    }

    async fn glob(
        &self,
        path: &str,
        pattern: &str,
        include_dirs: bool,
        max_results: usize,
    ) -> Result<(Vec<String>, bool), SandboxError> {
        let table = self.table();
        let (norm, target) = table.resolve(path, Access::Read)?;
        let pat = Arc::new(
            PathPattern::new(pattern)
                .map_err(|e| SandboxError::Invalid(format!("Invalid glob pattern: {e}")))?,
        );
        let mut matches = Vec::new();
        if include_dirs && target == Target::VirtualDir {
            // Virtual directories and mount roots below the start are directories too.
            for d in table
                .virtual_dirs()
                .map(str::to_string)
                .chain(table.mounts().iter().map(|m| m.virtual_root.clone()))
            {
                if d != norm && vpath::is_under(&d, &norm) && pat.matches(relative_to(&d, &norm)) {
                    matches.push(d);
                }
            }
            matches.sort();
        }
        let mut truncated = false;
        for w in walk_targets(&table, &norm, target) {
            if matches.len() > max_results {
                break;
            }
            let want = max_results + 1 - matches.len();
            let pat = pat.clone();
            let (root, rel, prefix) = (w.host_root, w.rel, w.prefix.clone());
            let res = tokio::task::spawn_blocking(move || {
                search::glob(&root, &rel, &prefix, &pat, include_dirs, want)
            })
            .await
            .map_err(join_err)?;
            let (hits, t) = match res {
                Ok(r) => r,
                // A mount below a virtual start that is missing on disk has nothing to show.
                Err(FsError::NotFound) if !w.prefix.is_empty() => continue,
                Err(FsError::NotDir) => return Err(SandboxError::NotADirectory(norm)),
                Err(e) => return Err(self.masked(fs_error(e, &norm))),
            };
            truncated |= t;
            matches.extend(hits.into_iter().map(|p| vpath::join(&w.vdir, &p)));
        }
        if matches.len() > max_results {
            truncated = true;
            matches.truncate(max_results);
        }
        Ok((matches, truncated))
    }

    async fn grep(
        &self,
        path: &str,
        pattern: &str,
        opts: GrepOptions,
    ) -> Result<(Vec<GrepMatch>, bool), SandboxError> {
        let table = self.table();
        let (norm, target) = table.resolve(path, Access::Read)?;
        let query = Arc::new(
            GrepQuery::new(
                pattern,
                opts.literal,
                opts.case_sensitive,
                opts.glob.as_deref(),
            )
            .map_err(SandboxError::Invalid)?,
        );
        let max = opts.max_results;
        let mut out: Vec<GrepMatch> = Vec::new();
        let mut truncated = false;
        for w in walk_targets(&table, &norm, target) {
            if out.len() > max {
                break;
            }
            let q = query.clone();
            let want = max + 1 - out.len();
            let single = w.prefix.is_empty();
            let name = norm.rsplit('/').next().unwrap_or("").to_string();
            let (root, rel, prefix) = (w.host_root, w.rel, w.prefix.clone());
            let res = tokio::task::spawn_blocking(move || {
                match search::grep_dir(&root, &rel, &prefix, &q, want) {
                    Err(FsError::NotDir) if single => {
                        search::grep_file(&root, &rel, &name, &q, want)
                    }
                    r => r,
                }
            })
            .await
            .map_err(join_err)?;
            let (hits, t) = match res {
                Ok(r) => r,
                Err(FsError::NotFound) if !single => continue,
                Err(e) => return Err(self.masked(fs_error(e, &norm))),
            };
            truncated |= t;
            out.extend(hits.into_iter().map(|h| GrepMatch {
                path: vpath::join(&w.vdir, &h.rel),
                line_number: h.line_number,
                line: h.line,
            }));
        }
        if out.len() > max {
            truncated = true;
            out.truncate(max);
        }
        Ok((out, truncated))
    }

    fn mask(&self, text: &str) -> String {
        self.masker().mask(text)
    }

    async fn lock_path(&self, path: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let key =
            vpath::normalize(path, &self.shared.skills_root).unwrap_or_else(|_| path.to_string());
        self.lock_for(&key).lock_owned().await
    }
}

impl LocalSandbox {
    async fn write(&self, path: &str, data: Vec<u8>, append: bool) -> Result<(), SandboxError> {
        let table = self.table();
        let (norm, target) = table.resolve(path, Access::Write)?;
        let Target::Mounted { mount, rel } = target else {
            return Err(SandboxError::PermissionDenied(format!(
                "Write access to {norm} is not allowed"
            )));
        };
        if rel == mount.prefix {
            // The mount's own directory.
            return Err(SandboxError::IsADirectory(norm));
        }
        let root = mount.host_root.clone();
        // Sandboxed bash runs as `owner`; custom mounts keep their own ownership.
        let owner = if mount.kind == MountKind::UserData {
            self.owner
        } else {
            None
        };
        if mount.kind == MountKind::UserData {
            self.ensure_dirs().await?;
            self.check_quota(data.len() as u64).await?;
        }
        let r = tokio::task::spawn_blocking(move || {
            confined::write_file(&root, &rel, &data, append, owner)
        })
        .await
        .map_err(join_err)?;
        r.map_err(|e| self.masked(fs_error(e, &norm)))
    }

    /// `Err` when the thread's files plus `adding` bytes would pass
    /// `sandbox.workspace_quota_mb`. Counting stops as soon as the quota is passed.
    async fn check_quota(&self, adding: u64) -> Result<(), SandboxError> {
        let quota_mb = self.shared.config.workspace_quota_mb;
        if quota_mb == 0 {
            return Ok(());
        }
        let quota = quota_mb.saturating_mul(1024 * 1024);
        let root = self.paths.user_data.clone();
        let used = tokio::task::spawn_blocking(move || disk_usage(&root, quota))
            .await
            .map_err(join_err)?;
        if used.saturating_add(adding) > quota {
            return Err(SandboxError::TooLarge(format!(
                "this thread's files would take more than the workspace quota of {quota_mb} MiB \
                 (in use: {} MiB); delete files under /mnt/user-data first",
                used / (1024 * 1024)
            )));
        }
        Ok(())
    }

    /// Host path of the thread's workspace (tests, diagnostics).
    pub fn host_workspace(&self) -> &Path {
        &self.paths.workspace
    }
}

/// Bytes taken by the regular files under `root` (symlinks not followed), counting up to a
/// little past `cap`.
fn disk_usage(root: &Path, cap: u64) -> u64 {
    let mut total: u64 = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                use std::os::unix::fs::MetadataExt;
                // Blocks actually allocated: a sparse file takes what it takes.
                total = total.saturating_add(meta.blocks().saturating_mul(512));
                if total > cap {
                    return total;
                }
            }
        }
    }
    total
}
