//! DeerFlow's configuration files, understood as they are: `config.yaml` (models, tools,
//! sandbox, skills, title, summarization, memory, subagents, loop detection, uploads,
//! database, …) and `extensions_config.json` (MCP servers, skill toggles).
//!
//! Owns: typed config structs with DeerFlow's defaults, `$VAR` resolution, validation with
//! key-path errors, and where the files and the data directory live. Must never know about
//! HTTP, storage, models or the agent; other crates receive a [`Settings`].

pub mod types;

pub use types::*;

use std::path::PathBuf;

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
}

impl ConfigIssue {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigIssue {
            path: path.into(),
            message: message.into(),
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
