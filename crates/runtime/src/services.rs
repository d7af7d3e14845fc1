//! The process-wide pieces the lead agent and the gateway routes share: the local sandbox
//! provider, `extensions_config.json` (read and written), the cached skills catalog, the MCP
//! manager and long-term memory.

use crate::runtime::BuildError;
use async_trait::async_trait;
use fawn_agent::{RunSetup, SetupError, SkillsPrompt, ToolSource};
use fawn_config::{ExtensionsConfig, Settings, SkillToggle};
use fawn_llm::ModelRegistry;
use fawn_memory::{Memory, MemoryStore};
use fawn_sandbox::LocalSandboxProvider;
use fawn_tools::Tool;
use fawn_tools::mcp::{McpManager, McpOptions};
use fawn_tools::skills::{DEFAULT_CONTAINER_ROOT, SkillCatalog};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// Largest extensions file read.
const MAX_EXTENSIONS_BYTES: u64 = fawn_config::MAX_CONFIG_BYTES;

/// `(modified, length)` of a file, to notice changes without reading it.
type Stamp = (Option<SystemTime>, u64);

/// Skill toggles as last read, with the stamp of the file they came from.
type CachedToggles = (Option<Stamp>, BTreeMap<String, SkillToggle>);

/// `extensions_config.json` as the gateway reads and writes it: the raw JSON (so `$VAR`
/// references and keys Fawn does not know survive a rewrite), written atomically under one
/// lock, and the skill toggles read from it when it changes.
pub struct ExtensionsFile {
    /// Where the file is read from and written to.
    path: PathBuf,
    /// Whether the settings were loaded from a file (when not, and the file does not exist,
    /// the settings' own extensions stand in for it).
    loaded_from_file: bool,
    fallback: ExtensionsConfig,
    write_lock: tokio::sync::Mutex<()>,
    toggles: std::sync::Mutex<Option<CachedToggles>>,
}

impl std::fmt::Debug for ExtensionsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtensionsFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Why the extensions file could not be read or written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExtensionsError {
    #[error("{0}")]
    Unreadable(String),
    #[error("{0}")]
    Write(String),
}

impl ExtensionsFile {
    /// The file of `settings`: where it was loaded from, else `extensions_config.json` beside
    /// the config file, else in the working directory (where the loader looks for it at the
    /// next start), else in the data directory.
    pub fn for_settings(settings: &Settings) -> ExtensionsFile {
        let path = match &settings.extensions_path {
            Some(p) => p.clone(),
            None => {
                let dir = settings
                    .config_path
                    .as_deref()
                    .and_then(Path::parent)
                    .map(Path::to_path_buf)
                    .or_else(|| std::env::current_dir().ok())
                    .unwrap_or_else(|| settings.home.clone());
                dir.join("extensions_config.json")
            }
        };
        ExtensionsFile {
            path,
            loaded_from_file: settings.extensions_path.is_some(),
            fallback: settings.extensions.clone(),
            write_lock: tokio::sync::Mutex::new(()),
            toggles: std::sync::Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serialises read-modify-write sequences (hold it across [`ExtensionsFile::current`]
    /// and [`ExtensionsFile::write`]).
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.write_lock.lock().await
    }

    /// The file's modification time and size (`None`: it cannot be read), blocking.
    fn stamp_of(path: &Path) -> Option<Stamp> {
        std::fs::metadata(path)
            .ok()
            .map(|m| (m.modified().ok(), m.len()))
    }

    /// The file's JSON object, `None` when it does not exist.
    pub async fn read_raw(&self) -> Result<Option<Map<String, Value>>, ExtensionsError> {
        let bytes = match tokio::fs::metadata(&self.path).await {
            Ok(m) if m.len() > MAX_EXTENSIONS_BYTES => {
                return Err(ExtensionsError::Unreadable(format!(
                    "extensions file is larger than {MAX_EXTENSIONS_BYTES} bytes"
                )));
            }
            Ok(_) => tokio::fs::read(&self.path).await,
            Err(e) => Err(e),
        };
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(ExtensionsError::Unreadable(format!(
                    "cannot read the extensions file: {}",
                    e.kind()
                )));
            }
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Some(Map::new()));
        }
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(o)) => Ok(Some(o)),
            Ok(_) => Err(ExtensionsError::Unreadable(
                "the extensions file is not a JSON object".into(),
            )),
            Err(e) => Err(ExtensionsError::Unreadable(format!(
                "the extensions file is not valid JSON: {e}"
            ))),
        }
    }

    /// The current extensions as raw JSON: the file, or (no file, settings not loaded from
    /// one) the settings' extensions.
    pub async fn current(&self) -> Result<Map<String, Value>, ExtensionsError> {
        if let Some(raw) = self.read_raw().await? {
            return Ok(raw);
        }
        if self.loaded_from_file {
            return Ok(Map::new());
        }
        match serde_json::to_value(&self.fallback) {
            Ok(Value::Object(mut o)) => {
                for k in ["middlewares", "mcpInterceptors"] {
                    if o.get(k)
                        .and_then(Value::as_array)
                        .is_some_and(Vec::is_empty)
                    {
                        o.remove(k);
                    }
                }
                Ok(o)
            }
            _ => Ok(Map::new()),
        }
    }

    /// Replaces the file atomically (temporary sibling, fsync, rename).
    pub async fn write(&self, raw: &Map<String, Value>) -> Result<(), ExtensionsError> {
        let dir = self
            .path
            .parent()
            .ok_or_else(|| ExtensionsError::Write("the extensions path has no parent".into()))?;
        let mut body = serde_json::to_vec_pretty(raw)
            .map_err(|e| ExtensionsError::Write(format!("cannot serialize: {e}")))?;
        body.push(b'\n');
        let tmp = dir.join(format!(
            ".extensions_config.json.{}.tmp",
            uuid::Uuid::new_v4().simple()
        ));
        let result = async {
            tokio::fs::create_dir_all(dir).await?;
            tokio::fs::write(&tmp, &body).await?;
            tokio::fs::File::open(&tmp).await?.sync_all().await?;
            tokio::fs::rename(&tmp, &self.path).await
        }
        .await;
        if let Err(e) = result {
            let _ = tokio::fs::remove_file(&tmp).await;
            tracing::warn!(path = %self.path.display(), error = %e, "extensions file not written");
            return Err(ExtensionsError::Write(format!(
                "cannot write the extensions file: {}",
                e.kind()
            )));
        }
        self.forget_toggles();
        Ok(())
    }

    fn forget_toggles(&self) {
        match self.toggles.lock() {
            Ok(mut g) => *g = None,
            Err(p) => *p.into_inner() = None,
        }
    }

    /// `skills.<name>.enabled` from the file, re-read when its stamp (taken by the caller
    /// with [`ExtensionsFile::stamp_of`], so it can share a blocking hop with other file
    /// work) changed.
    async fn skill_toggles_at(&self, stamp: Option<Stamp>) -> BTreeMap<String, SkillToggle> {
        {
            let g = match self.toggles.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            if let Some((s, t)) = g.as_ref()
                && *s == stamp
            {
                return t.clone();
            }
        }
        let toggles = match self.read_raw().await {
            Ok(Some(raw)) => parse_toggles(raw.get("skills")),
            Ok(None) if self.loaded_from_file => BTreeMap::new(),
            Ok(None) => self.fallback.skills.clone(),
            Err(e) => {
                tracing::warn!("skill toggles not reloaded: {e}");
                let g = match self.toggles.lock() {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                return g
                    .as_ref()
                    .map(|(_, t)| t.clone())
                    .unwrap_or_else(|| self.fallback.skills.clone());
            }
        };
        let mut g = match self.toggles.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *g = Some((stamp, toggles.clone()));
        toggles
    }
}

/// `{"name": {"enabled": bool}}`, leniently (a missing or odd `enabled` means enabled).
fn parse_toggles(v: Option<&Value>) -> BTreeMap<String, SkillToggle> {
    let mut out = BTreeMap::new();
    let Some(Value::Object(o)) = v else {
        return out;
    };
    for (name, t) in o {
        let enabled = match t.get("enabled") {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => !matches!(
                s.trim().to_ascii_lowercase().as_str(),
                "false" | "0" | "no" | "off"
            ),
            _ => true,
        };
        out.insert(name.clone(), SkillToggle { enabled });
    }
    out
}

/// What decides whether the skills catalog must be scanned again: the listing of
/// `public/` and `custom/` (with mtimes) and every `SKILL.md`'s mtime and size, plus the
/// toggles.
#[derive(Clone, Debug, PartialEq)]
struct Fingerprint {
    entries: Vec<(String, Stamp)>,
    toggles: BTreeMap<String, bool>,
}

/// Most entries looked at per category when fingerprinting.
const FINGERPRINT_MAX_ENTRIES: usize = 10_000;

fn listing(skills_dir: &Path) -> Vec<(String, Stamp)> {
    let stamp = |p: &Path| {
        std::fs::symlink_metadata(p)
            .ok()
            .map(|m| (m.modified().ok(), m.len()))
    };
    let mut out = Vec::new();
    for cat in ["public", "custom"] {
        let dir = skills_dir.join(cat);
        let Some(s) = stamp(&dir) else {
            continue;
        };
        out.push((cat.to_string(), s));
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<String> = rd
            .filter_map(Result::ok)
            .take(FINGERPRINT_MAX_ENTRIES)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for n in names {
            let p = dir.join(&n);
            if let Some(s) = stamp(&p) {
                out.push((format!("{cat}/{n}"), s));
            }
            let f = p.join(fawn_tools::skills::SKILL_FILE);
            if let Some(s) = stamp(&f) {
                out.push((format!("{cat}/{n}/SKILL.md"), s));
            }
        }
    }
    out
}

struct CachedCatalog {
    fingerprint: Fingerprint,
    catalog: Arc<SkillCatalog>,
}

/// The skills catalog, scanned once and again only when the skills directory or the
/// toggles change (or on [`SkillsCache::reload`]); every (re)scan updates what the sandbox
/// shows at `/mnt/skills`.
pub struct SkillsCache {
    skills_dir: PathBuf,
    container_root: String,
    extensions: Arc<ExtensionsFile>,
    provider: Arc<LocalSandboxProvider>,
    state: tokio::sync::Mutex<Option<CachedCatalog>>,
}

impl std::fmt::Debug for SkillsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkillsCache")
            .field("skills_dir", &self.skills_dir)
            .finish_non_exhaustive()
    }
}

impl SkillsCache {
    pub fn new(
        settings: &Settings,
        extensions: Arc<ExtensionsFile>,
        provider: Arc<LocalSandboxProvider>,
    ) -> SkillsCache {
        let root = settings.app.skills.container_path.trim();
        SkillsCache {
            skills_dir: settings.skills_dir.clone(),
            container_root: if root.is_empty() {
                DEFAULT_CONTAINER_ROOT.to_string()
            } else {
                root.to_string()
            },
            extensions,
            provider,
            state: tokio::sync::Mutex::new(None),
        }
    }

    async fn fingerprint(&self) -> Fingerprint {
        // One blocking hop for both: the extensions file's stamp and the skills listing.
        let dir = self.skills_dir.clone();
        let ext = self.extensions.path().to_path_buf();
        let (stamp, entries) =
            tokio::task::spawn_blocking(move || (ExtensionsFile::stamp_of(&ext), listing(&dir)))
                .await
                .unwrap_or_default();
        let toggles = self.extensions.skill_toggles_at(stamp).await;
        Fingerprint {
            entries,
            toggles: toggles.into_iter().map(|(k, v)| (k, v.enabled)).collect(),
        }
    }

    /// The current catalog (a cheap `stat` walk when nothing changed).
    pub async fn catalog(&self) -> Arc<SkillCatalog> {
        let fingerprint = self.fingerprint().await;
        let mut state = self.state.lock().await;
        if let Some(c) = state.as_ref()
            && c.fingerprint == fingerprint
        {
            return c.catalog.clone();
        }
        let toggles: BTreeMap<String, SkillToggle> = fingerprint
            .toggles
            .iter()
            .map(|(k, v)| (k.clone(), SkillToggle { enabled: *v }))
            .collect();
        let dir = self.skills_dir.clone();
        let root = self.container_root.clone();
        let catalog =
            match tokio::task::spawn_blocking(move || SkillCatalog::scan(&dir, &toggles, &root))
                .await
            {
                Ok(c) => Arc::new(c),
                Err(e) => {
                    tracing::error!(error = %e, "skill scan failed");
                    return state
                        .as_ref()
                        .map(|c| c.catalog.clone())
                        .unwrap_or_default();
                }
            };
        if let Err(e) = self.provider.set_skills(catalog.sandbox_view()).await {
            tracing::warn!(error = %e, "skills are not mounted in the sandbox");
        }
        tracing::debug!(skills = catalog.skills().len(), "skills catalog (re)loaded");
        *state = Some(CachedCatalog {
            fingerprint,
            catalog: catalog.clone(),
        });
        catalog
    }

    /// Forgets the cached catalog and scans again.
    pub async fn reload(&self) -> Arc<SkillCatalog> {
        *self.state.lock().await = None;
        self.catalog().await
    }
}

/// The `<skill_system>` prompt section from the cached catalog (DeerFlow's rules: only
/// `bootstrap` in bootstrap runs, else the custom agent's `skills` allowlist).
pub struct CachedSkills(pub Arc<SkillsCache>);

#[async_trait]
impl SkillsPrompt for CachedSkills {
    async fn skill_section(&self, setup: &RunSetup<'_>) -> String {
        let catalog = self.0.catalog().await;
        let allow: Option<Vec<String>> = if setup.options().is_bootstrap {
            Some(vec!["bootstrap".to_string()])
        } else {
            setup.run.agent.as_ref().and_then(|a| a.skills.clone())
        };
        catalog.prompt_section(allow.as_deref())
    }
}

/// The process's MCP manager. It follows the extensions file when the settings came from
/// one; otherwise it serves the settings' servers until the gateway first writes the file,
/// and from then on follows that file.
pub struct McpHub {
    manager: std::sync::RwLock<McpManager>,
    follows_file: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub").finish_non_exhaustive()
    }
}

impl McpHub {
    pub fn from_settings(settings: &Settings) -> McpHub {
        McpHub {
            manager: std::sync::RwLock::new(McpManager::from_settings(settings)),
            follows_file: std::sync::atomic::AtomicBool::new(settings.extensions_path.is_some()),
        }
    }

    /// The current manager (cheap clone).
    pub fn current(&self) -> McpManager {
        match self.manager.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// After the gateway wrote the extensions file at `path`: make sure the manager reads
    /// it (it re-reads a file it follows on every run by itself).
    pub async fn follow(&self, path: &Path) {
        use std::sync::atomic::Ordering;
        if self.follows_file.swap(true, Ordering::SeqCst) {
            return;
        }
        let fresh = McpManager::new(
            &ExtensionsConfig::default(),
            Some(path.to_path_buf()),
            McpOptions::default(),
        );
        let old = {
            let mut g = match self.manager.write() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            std::mem::replace(&mut *g, fresh)
        };
        old.shutdown().await;
    }

    pub async fn shutdown(&self) {
        self.current().shutdown().await;
    }
}

/// MCP tools for each run, from the hub's current manager.
pub struct McpToolSource(pub Arc<McpHub>);

#[async_trait]
impl ToolSource for McpToolSource {
    async fn tools(&self, _setup: &RunSetup<'_>) -> Result<Vec<Arc<dyn Tool>>, SetupError> {
        Ok(self.0.current().tools().await)
    }
}

/// Everything the lead agent and the gateway routes share.
pub struct Services {
    pub sandbox: Arc<LocalSandboxProvider>,
    pub extensions: Arc<ExtensionsFile>,
    pub skills: Arc<SkillsCache>,
    pub mcp: Arc<McpHub>,
    /// Memory's queue and store, when memory is enabled and a model can run extraction.
    pub memory: Option<Arc<Memory>>,
    /// The memory store the API reads and writes (the running memory's own when enabled, so
    /// both take the same per-user lock).
    pub memory_store: Arc<MemoryStore>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("extensions", &self.extensions)
            .field("memory", &self.memory.is_some())
            .finish_non_exhaustive()
    }
}

impl Services {
    /// Starts the shared pieces. `with_memory`: start memory's extraction queue (off for the
    /// demo model, which cannot extract anything).
    pub async fn start(
        settings: &Settings,
        models: &ModelRegistry,
        user_id: &str,
        with_memory: bool,
    ) -> Result<Services, BuildError> {
        let s = settings.clone();
        let user = user_id.to_string();
        let sandbox = tokio::task::spawn_blocking(move || {
            fawn_sandbox::LocalSandboxProvider::with_options(
                &s,
                fawn_sandbox::LocalSandboxOptions {
                    user_id: user,
                    ..Default::default()
                },
            )
        })
        .await
        .map_err(|e| BuildError::Agent(e.to_string()))?
        .map_err(|e| BuildError::Agent(format!("sandbox: {e}")))?;
        let sandbox = Arc::new(sandbox);
        let extensions = Arc::new(ExtensionsFile::for_settings(settings));
        let skills = Arc::new(SkillsCache::new(
            settings,
            extensions.clone(),
            sandbox.clone(),
        ));
        skills.catalog().await;
        let mcp = Arc::new(McpHub::from_settings(settings));
        let memory = if with_memory && settings.app.memory.enabled {
            match Memory::start(settings, models) {
                Ok(m) => Some(Arc::new(m)),
                Err(e) => {
                    tracing::warn!("long-term memory is off: {e}");
                    None
                }
            }
        } else {
            None
        };
        let memory_store = match &memory {
            Some(m) => m.store.clone(),
            None => Arc::new(MemoryStore::from_settings(settings)),
        };
        Ok(Services {
            sandbox,
            extensions,
            skills,
            mcp,
            memory,
            memory_store,
        })
    }

    /// Graceful stop: pending memory updates are processed (within
    /// `memory.shutdown_flush_timeout_seconds`), MCP sessions closed.
    pub async fn shutdown(&self) {
        if let Some(m) = &self.memory {
            let left = m.queue.shutdown().await;
            if left > 0 {
                tracing::warn!(left, "memory updates dropped at shutdown");
            }
        }
        self.mcp.shutdown().await;
    }
}
