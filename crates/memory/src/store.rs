//! Per-user storage of the memory document: `{root}/users/{user_id}/memory.json`, written
//! atomically (temporary file + rename) under a per-user lock, with the revision bumped on
//! every change. A file that cannot be parsed is reported, never overwritten.

use crate::MemoryError;
use crate::model::MemoryData;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Memory files larger than this are refused (a sane document is a few KB).
pub const MAX_MEMORY_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Where memory lives.
#[derive(Debug)]
pub struct MemoryStore {
    root: PathBuf,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A user id is a path component: it must stay one.
pub fn valid_user_id(user_id: &str) -> bool {
    !user_id.is_empty()
        && user_id != "."
        && user_id != ".."
        && user_id.len() <= 128
        && !user_id
            .chars()
            .any(|c| c == '/' || c == '\\' || c == '\0' || c.is_control())
}

pub(crate) fn now_iso() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl MemoryStore {
    /// Memory under `root` (normally the data directory).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        MemoryStore {
            root: root.into(),
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// `memory.storage_path` when set, else the data directory.
    pub fn from_settings(settings: &fawn_config::Settings) -> Self {
        let root = match settings
            .app
            .memory
            .storage_path
            .as_deref()
            .filter(|s| !s.is_empty())
        {
            Some(p) if Path::new(p).is_absolute() => PathBuf::from(p),
            Some(p) => settings.home.join(p),
            None => settings.home.clone(),
        };
        MemoryStore::new(root)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `{root}/users/{user_id}/memory.json`.
    pub fn path_for(&self, user_id: &str) -> Result<PathBuf, MemoryError> {
        if !valid_user_id(user_id) {
            return Err(MemoryError::InvalidUser(user_id.to_string()));
        }
        Ok(self.root.join("users").join(user_id).join("memory.json"))
    }

    fn lock_for(&self, user_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut g = match self.locks.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        g.entry(user_id.to_string()).or_default().clone()
    }

    /// The user's memory (empty when none was written yet).
    pub async fn load(&self, user_id: &str) -> Result<MemoryData, MemoryError> {
        let path = self.path_for(user_id)?;
        read_file(&path).await
    }

    /// Reads, changes and writes the user's memory under its lock. `change` returns whether
    /// it changed anything; only then is the file written (revision + 1, `lastUpdated` now).
    pub async fn update<F>(&self, user_id: &str, change: F) -> Result<MemoryData, MemoryError>
    where
        F: FnOnce(&mut MemoryData) -> bool,
    {
        let path = self.path_for(user_id)?;
        let lock = self.lock_for(user_id);
        let _guard = lock.lock().await;
        let mut data = read_file(&path).await?;
        if change(&mut data) {
            data.revision += 1;
            data.last_updated = now_iso();
            write_file(&path, &data).await?;
        }
        Ok(data)
    }

    /// Replaces the user's memory (e.g. the gateway's import endpoint).
    pub async fn save(&self, user_id: &str, data: &MemoryData) -> Result<(), MemoryError> {
        let path = self.path_for(user_id)?;
        let lock = self.lock_for(user_id);
        let _guard = lock.lock().await;
        write_file(&path, data).await
    }
}

async fn read_file(path: &Path) -> Result<MemoryData, MemoryError> {
    let meta = match tokio::fs::metadata(path).await {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(MemoryData::default()),
        Err(e) => return Err(MemoryError::Io(e.to_string())),
    };
    if meta.len() > MAX_MEMORY_FILE_BYTES {
        return Err(MemoryError::Corrupt(format!(
            "memory file is {} bytes (limit {MAX_MEMORY_FILE_BYTES})",
            meta.len()
        )));
    }
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|e| MemoryError::Io(e.to_string()))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(MemoryData::default());
    }
    serde_json::from_slice(&bytes).map_err(|e| MemoryError::Corrupt(e.to_string()))
}

async fn write_file(path: &Path, data: &MemoryData) -> Result<(), MemoryError> {
    let dir = path
        .parent()
        .ok_or_else(|| MemoryError::Io("memory path has no parent".into()))?;
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| MemoryError::Io(e.to_string()))?;
    let body = serde_json::to_vec_pretty(data).map_err(|e| MemoryError::Io(e.to_string()))?;
    let tmp = dir.join(format!(
        ".memory.json.{}.tmp",
        uuid::Uuid::new_v4().simple()
    ));
    let result = async {
        tokio::fs::write(&tmp, &body).await?;
        let f = tokio::fs::File::open(&tmp).await?;
        f.sync_all().await?;
        tokio::fs::rename(&tmp, path).await
    }
    .await;
    if let Err(e) = result {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(MemoryError::Io(e.to_string()));
    }
    Ok(())
}

impl MemoryStore {
    /// The `<memory>` block of a user for a custom agent (`None`: the default agent), with
    /// `opts`; `None` when empty or unreadable (logged).
    pub async fn memory_block(
        &self,
        user_id: &str,
        agent_name: Option<&str>,
        opts: &crate::format::InjectionOptions,
    ) -> Option<String> {
        let data = match self.load(user_id).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(user_id, error = %e, "memory not injected");
                return None;
            }
        };
        let mut view = data;
        view.facts.retain(|f| f.agent() == agent_name);
        crate::format::memory_block(&view, opts)
    }
}
