//! DeerFlow's configuration files, understood as they are: `config.yaml` (models, tools,
//! sandbox, skills, title, summarization, memory, subagents, loop detection, uploads,
//! database, …) and `extensions_config.json` (MCP servers, skill toggles).
//!
//! Owns: typed config structs with DeerFlow's defaults, the loader ([`load`]: file discovery,
//! YAML/JSON parsing under size and depth budgets, `$VAR` resolution, section-by-section
//! typing that reports every problem with its key path, semantic validation), and where the
//! files and the data directory live. Must never know about HTTP, storage, models or the
//! agent, nor validate `use:` class paths (the llm and tools crates own those registries);
//! other crates receive a [`Settings`].

mod keypath;
mod loader;
mod options;
mod redact;
mod source;
mod typed;
pub mod types;
mod validate;

pub use loader::{IGNORED_DEERFLOW_SECTIONS, load, load_str};
pub use options::{LoadOptions, Validator};
pub use source::MAX_CONFIG_BYTES;
pub use types::*;

use std::path::PathBuf;

/// A successful load: the settings and every warning (unknown keys, ignored DeerFlow
/// sections, clamped values, …), each with its key path.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub settings: Settings,
    pub warnings: Vec<ConfigIssue>,
}

/// Every problem that stopped a load (`.0`; `Display` prints one per line), and the
/// warnings found beside them ([`ConfigErrors::warnings`]: entries skipped for an
/// unsupported `use:`, unknown keys, …), so that a check can list every problem at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigIssue>, Vec<ConfigIssue>);

impl ConfigErrors {
    /// What the load would have warned about had it succeeded, each with its key path.
    pub fn warnings(&self) -> &[ConfigIssue] {
        &self.1
    }
}

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, issue) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{issue}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Everything a Fawn process was configured with, after loading and validation.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub app: AppConfig,
    pub extensions: ExtensionsConfig,
    /// Data directory (`FAWN_HOME` / `DEER_FLOW_HOME`): threads, database, memory.
    pub home: PathBuf,
    /// Directory holding `public/` and `custom/` skills.
    pub skills_dir: PathBuf,
    pub config_path: Option<PathBuf>,
    pub extensions_path: Option<PathBuf>,
}

impl Settings {
    /// Settings with default config, rooted at `home` (tests, demos).
    pub fn with_home(home: impl Into<PathBuf>) -> Settings {
        let home = home.into();
        Settings {
            skills_dir: home.join("skills"),
            home,
            ..Default::default()
        }
    }
}

/// One problem found in the configuration, tied to the key path where it was found
/// (`models[1].api_key`). Displays as `path: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigIssue {
    pub path: String,
    pub message: String,
    /// The entry names an implementation (`use:`) Fawn does not have. By default the loader
    /// skips that `models[i]`/`tools[i]` entry with a warning; strict loading makes it an
    /// error.
    pub unsupported: bool,
}

impl ConfigIssue {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigIssue {
            path: path.into(),
            message: message.into(),
            unsupported: false,
        }
    }

    /// An entry whose `use:` Fawn does not implement (see [`ConfigIssue::unsupported`]).
    pub fn unsupported(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigIssue {
            unsupported: true,
            ..ConfigIssue::new(path, message)
        }
    }
}

impl std::fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}
