//! What the loader needs from its surroundings: an explicit config path, the working
//! directory and an environment lookup. Tests pass a map; the binary passes the process env.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

type Lookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A check run by the loader on the typed configuration, so its problems are reported together
/// with the loader's own (e.g. the model and tool registries checking `use:` values). Issue paths
/// name entries by their position in the typed lists (`models[2].use`); the loader maps them
/// back to their index in the file.
pub type Validator = Arc<dyn Fn(&crate::AppConfig) -> Vec<crate::ConfigIssue> + Send + Sync>;

/// Inputs of [`load`](crate::load).
#[derive(Clone)]
pub struct LoadOptions {
    /// `--config PATH` / `fawn check-config PATH`: must exist.
    pub config_path: Option<PathBuf>,
    /// Directory relative paths are resolved against (`./config.yaml`, `./.fawn`, `./skills`).
    pub cwd: PathBuf,
    env: Lookup,
    validators: Vec<Validator>,
    strict: bool,
}

impl std::fmt::Debug for LoadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadOptions")
            .field("config_path", &self.config_path)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl LoadOptions {
    /// The real process: its environment and current directory.
    pub fn from_process() -> LoadOptions {
        LoadOptions {
            config_path: None,
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            env: Arc::new(|name| std::env::var(name).ok()),
            validators: Vec::new(),
            strict: false,
        }
    }

    /// A hermetic environment made of `vars` only, rooted at `cwd`.
    pub fn with_vars<K, V>(cwd: impl Into<PathBuf>, vars: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        let map: BTreeMap<String, String> = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        LoadOptions {
            config_path: None,
            cwd: cwd.into(),
            env: Arc::new(move |name| map.get(name).cloned()),
            validators: Vec::new(),
            strict: false,
        }
    }

    /// Any environment lookup, rooted at `cwd`.
    pub fn with_lookup(
        cwd: impl Into<PathBuf>,
        lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        LoadOptions {
            config_path: None,
            cwd: cwd.into(),
            env: Arc::new(lookup),
            validators: Vec::new(),
            strict: false,
        }
    }

    /// Sets the explicit config path.
    pub fn config_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_path = Some(path.into());
        self
    }

    /// Adds a check run on the typed configuration (see [`Validator`]).
    pub fn validator(mut self, v: Validator) -> Self {
        self.validators.push(v);
        self
    }

    pub(crate) fn validators(&self) -> &[Validator] {
        &self.validators
    }

    /// `--strict`: an entry whose `use:` Fawn does not implement is an error instead of a
    /// skipped entry and a warning.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    pub(crate) fn is_strict(&self) -> bool {
        self.strict
    }

    /// An environment variable (an empty value counts as set, as in DeerFlow).
    pub fn var(&self, name: &str) -> Option<String> {
        (self.env)(name)
    }

    /// An environment variable naming a path: empty counts as unset.
    pub(crate) fn path_var(&self, name: &str) -> Option<PathBuf> {
        self.var(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| self.absolute(Path::new(&v)))
    }

    /// `p` made absolute against `cwd`.
    pub(crate) fn absolute(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.cwd.join(p)
        }
    }
}
