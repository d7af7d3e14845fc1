//! `setup_agent` and `update_agent`: creating and refining custom agents (reference §3.4).
//!
//! A custom agent lives in `{home}/users/{user}/agents/{name}/` as `config.yaml` (name,
//! description, model, tool groups, skills, …) and `SOUL.md` (its personality). Names follow
//! DeerFlow's rule `^[A-Za-z0-9-]+$` and are stored lowercase.
//!
//! * `setup_agent(soul, description, skills?)` is offered to bootstrap runs
//!   (`is_bootstrap`): it writes both files for the run's `agent_name` and records
//!   `created_agent_name` in state.
//! * `update_agent(soul?, description?, skills?, tool_groups?, model?)` is offered inside a
//!   custom agent's chat: only the fields given change (`soul` replaces the whole file),
//!   other keys of `config.yaml` are kept, an unknown `model` is refused before anything is
//!   written, and the change applies from the next turn.
//!
//! Both tools are bound to one run (home, user and agent name are fixed when the run's tools
//! are assembled), write through tokio's file system API, and replace each file atomically
//! (temporary file + rename). Every failure is an error ToolMessage the model can act on.

use crate::args::{parse_args, schema_for};
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use fawn_state::StateUpdate;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The file holding an agent's settings.
pub const AGENT_CONFIG_FILE: &str = "config.yaml";
/// The file holding an agent's personality.
pub const AGENT_SOUL_FILE: &str = "SOUL.md";

/// Largest `config.yaml` read back by `update_agent`.
const MAX_CONFIG_BYTES: u64 = 256 * 1024;

/// DeerFlow's agent-name rule (`^[A-Za-z0-9-]+$`); returns the name trimmed and lowercased.
pub fn normalize_agent_name(raw: &str) -> Result<String, String> {
    let name = raw.trim();
    if name.is_empty()
        || name.len() > 128
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(format!(
            "Invalid agent name '{name}'. Must match pattern: ^[A-Za-z0-9-]+$"
        ));
    }
    Ok(name.to_ascii_lowercase())
}

fn valid_user_segment(user_id: &str) -> bool {
    !user_id.is_empty()
        && user_id.len() <= 128
        && user_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `{home}/users/{user}/agents/{name}` (both already validated).
pub fn agent_dir(home: &Path, user_id: &str, name: &str) -> PathBuf {
    home.join("users").join(user_id).join("agents").join(name)
}

/// Writes `bytes` to `path` through a temporary sibling and a rename.
async fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temp_sibling(path)?;
    let result = async {
        tokio::fs::write(&tmp, bytes).await?;
        tokio::fs::File::open(&tmp).await?.sync_all().await?;
        tokio::fs::rename(&tmp, path).await
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}

fn temp_sibling(path: &Path) -> std::io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("path has no parent"))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    Ok(dir.join(format!(".{name}.{}.{nanos}.{n}.tmp", std::process::id())))
}

/// Replaces files on the host atomically (a custom agent's `config.yaml` and `SOUL.md`,
/// `USER.md`): each is written to a hidden temporary sibling and synced, and only when every
/// one is written are they renamed over their targets, so a reader sees the old content or
/// the new, never half a file, and a failure while writing changes nothing (its temporaries
/// are removed). The renames are one after another: a crash between two leaves the first
/// file new and the second old, as DeerFlow's file store does.
pub async fn replace_files(files: &[(PathBuf, Vec<u8>)]) -> std::io::Result<()> {
    let mut staged: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut result = Ok(());
    for (path, bytes) in files {
        let tmp = match temp_sibling(path) {
            Ok(t) => t,
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        let written = async {
            tokio::fs::write(&tmp, bytes).await?;
            tokio::fs::File::open(&tmp).await?.sync_all().await
        }
        .await;
        staged.push((tmp, path.clone()));
        if let Err(e) = written {
            result = Err(e);
            break;
        }
    }
    if result.is_ok() {
        for (tmp, path) in &staged {
            if let Err(e) = tokio::fs::rename(tmp, path).await {
                result = Err(e);
                break;
            }
        }
    }
    if result.is_err() {
        for (tmp, _) in &staged {
            let _ = tokio::fs::remove_file(tmp).await;
        }
    }
    result
}

fn yaml(config: &Map<String, Value>) -> Result<String, String> {
    serde_saphyr::to_string(config).map_err(|e| format!("cannot write config.yaml: {e}"))
}

// ------------------------------------------------------------------------------ setup_agent

const SETUP_DESCRIPTION: &str = "\
Create the custom agent this conversation is setting up, once its personality is agreed.

Writes the agent's SOUL.md (its identity, tone and way of working) and its description. The \
agent's name is fixed by the conversation; call this tool once, at the end of the setup, with \
the complete SOUL.md text.";

/// Arguments of `setup_agent`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SetupAgentArgs {
    /// The complete SOUL.md content: who the agent is and how it behaves.
    pub soul: String,
    /// One line describing what the agent does.
    pub description: String,
    /// Skills the agent may use (omit for all enabled skills, [] for none).
    #[serde(default, deserialize_with = "nullish_list")]
    pub skills: Option<Vec<String>>,
}

/// `setup_agent`, bound to one bootstrap run.
#[derive(Debug, Clone)]
pub struct SetupAgentTool {
    home: PathBuf,
    user_id: String,
    agent_name: Option<String>,
}

impl SetupAgentTool {
    /// For a bootstrap run of `user_id` creating `agent_name` (the run's `agent_name`).
    pub fn new(home: impl Into<PathBuf>, user_id: &str, agent_name: Option<String>) -> Self {
        SetupAgentTool {
            home: home.into(),
            user_id: user_id.to_string(),
            agent_name,
        }
    }

    /// Writes the agent; returns its (lowercase) name or the error text.
    pub async fn create(&self, args: &SetupAgentArgs) -> Result<String, String> {
        if args.soul.trim().is_empty() {
            return Err(
                "soul content is empty; refusing to create an agent with an empty SOUL.md".into(),
            );
        }
        let Some(raw) = self.agent_name.as_deref() else {
            return Err("setup_agent needs the agent's name: this run has no `agent_name` in its context, so there is no agent to create".into());
        };
        let name = normalize_agent_name(raw)?;
        if !valid_user_segment(&self.user_id) {
            return Err(format!("invalid user id '{}'", self.user_id));
        }
        let dir = agent_dir(&self.home, &self.user_id, &name);
        let is_new = !tokio::fs::try_exists(&dir).await.unwrap_or(false);
        let mut config = Map::new();
        config.insert("name".into(), Value::String(name.clone()));
        if !args.description.trim().is_empty() {
            config.insert(
                "description".into(),
                Value::String(args.description.trim().to_string()),
            );
        }
        if let Some(skills) = &args.skills {
            config.insert(
                "skills".into(),
                Value::Array(skills.iter().cloned().map(Value::String).collect()),
            );
        }
        let config_text = yaml(&config)?;
        let written = async {
            tokio::fs::create_dir_all(&dir).await?;
            replace_files(&[
                (dir.join(AGENT_CONFIG_FILE), config_text.into_bytes()),
                (dir.join(AGENT_SOUL_FILE), args.soul.clone().into_bytes()),
            ])
            .await
        }
        .await;
        if let Err(e) = written {
            if is_new {
                let _ = tokio::fs::remove_dir_all(&dir).await;
            }
            tracing::warn!(agent = %name, error = %e, "setup_agent failed");
            return Err(format!("could not save agent '{name}': {}", e.kind()));
        }
        tracing::info!(agent = %name, user = %self.user_id, "custom agent created");
        Ok(name)
    }
}

#[async_trait]
impl Tool for SetupAgentTool {
    fn name(&self) -> &str {
        "setup_agent"
    }

    fn description(&self) -> &str {
        SETUP_DESCRIPTION
    }

    fn parameters(&self) -> Arc<Value> {
        schema_for::<SetupAgentArgs>()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        _ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: SetupAgentArgs = parse_args(self.name(), args)?;
        match self.create(&args).await {
            Ok(name) => {
                let mut out = ToolOutput::text(format!("Agent '{name}' created successfully!"));
                let mut update = StateUpdate::default();
                update
                    .extra
                    .insert("created_agent_name".into(), Value::String(name));
                out.update = Some(update);
                Ok(out)
            }
            Err(e) => Ok(ToolOutput::error(format!("Error: {e}"))),
        }
    }
}

// ----------------------------------------------------------------------------- update_agent

const UPDATE_DESCRIPTION: &str = "\
Save changes to this custom agent's own SOUL.md and config, when the user asks to refine its \
identity, description, skills, tool groups or default model.

Only the fields you pass change; leave out the ones that stay as they are (never pass \"null\" \
or \"none\" as text). `soul` replaces the whole SOUL.md, so start from the current text and \
apply the edits. `skills: []` removes every skill; `tool_groups: []` removes every \
configurable tool group. `model` must be one of the configured model names. Changes apply \
from the next user turn.";

/// Arguments of `update_agent`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct UpdateAgentArgs {
    /// The full replacement SOUL.md content.
    #[serde(default, deserialize_with = "nullish_text")]
    pub soul: Option<String>,
    /// A new one-line description.
    #[serde(default, deserialize_with = "nullish_text")]
    pub description: Option<String>,
    /// Skill allowlist ([] = no skills).
    #[serde(default, deserialize_with = "nullish_list")]
    pub skills: Option<Vec<String>>,
    /// Tool-group allowlist ([] = no configurable tools).
    #[serde(default, deserialize_with = "nullish_list")]
    pub tool_groups: Option<Vec<String>>,
    /// Default model (a configured model name).
    #[serde(default, deserialize_with = "nullish_text")]
    pub model: Option<String>,
}

fn is_nullish(s: &str) -> bool {
    matches!(
        s.trim().to_ascii_lowercase().as_str(),
        "null" | "none" | "undefined"
    )
}

fn nullish_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = Option::<String>::deserialize(d)?;
    Ok(v.filter(|s| !is_nullish(s)))
}

fn nullish_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrText {
        List(Vec<String>),
        Text(String),
    }
    match Option::<ListOrText>::deserialize(d)? {
        None => Ok(None),
        Some(ListOrText::List(l)) => Ok(Some(l)),
        Some(ListOrText::Text(t)) if is_nullish(&t) => Ok(None),
        Some(ListOrText::Text(t)) => Err(serde::de::Error::custom(format!(
            "expected a list of strings, got the text {t:?}"
        ))),
    }
}

/// `update_agent`, bound to one run of a custom agent.
#[derive(Debug, Clone)]
pub struct UpdateAgentTool {
    home: PathBuf,
    user_id: String,
    agent_name: String,
    models: Vec<String>,
}

impl UpdateAgentTool {
    /// For a run of `user_id` inside custom agent `agent_name`; `models` are the configured
    /// model names (`model` must be one of them).
    pub fn new(
        home: impl Into<PathBuf>,
        user_id: &str,
        agent_name: &str,
        models: Vec<String>,
    ) -> Self {
        UpdateAgentTool {
            home: home.into(),
            user_id: user_id.to_string(),
            agent_name: agent_name.to_string(),
            models,
        }
    }

    /// Applies the update; returns the ToolMessage text or the error text.
    pub async fn update(&self, args: &UpdateAgentArgs) -> Result<String, String> {
        if args.soul.is_none()
            && args.description.is_none()
            && args.skills.is_none()
            && args.tool_groups.is_none()
            && args.model.is_none()
        {
            return Err("No fields provided. Pass at least one of: soul, description, skills, tool_groups, model; leave out the fields that do not change.".into());
        }
        if args.soul.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err("soul content is empty; refusing to replace SOUL.md with nothing. Leave soul out to keep the current one.".into());
        }
        let name = normalize_agent_name(&self.agent_name)?;
        if !valid_user_segment(&self.user_id) {
            return Err(format!("invalid user id '{}'", self.user_id));
        }
        if let Some(m) = &args.model
            && !self.models.iter().any(|n| n == m)
        {
            return Err(format!(
                "Unknown model '{m}'. Use one of the configured models: {}",
                self.models.join(", ")
            ));
        }
        let dir = agent_dir(&self.home, &self.user_id, &name);
        let config_path = dir.join(AGENT_CONFIG_FILE);
        let existing = match tokio::fs::metadata(&config_path).await {
            Ok(m) if m.len() > MAX_CONFIG_BYTES => {
                return Err(format!("Agent '{name}' has an oversized config.yaml"));
            }
            Ok(_) => tokio::fs::read_to_string(&config_path)
                .await
                .map_err(|e| format!("Agent '{name}' config cannot be read: {}", e.kind()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!(
                    "Agent '{name}' does not exist for the current user. Use setup_agent to create a new agent first."
                ));
            }
            Err(e) => {
                return Err(format!(
                    "Agent '{name}' config cannot be read: {}",
                    e.kind()
                ));
            }
        };
        let mut config: Map<String, Value> = if existing.trim().is_empty() {
            Map::new()
        } else {
            match serde_saphyr::from_str::<Value>(&existing) {
                Ok(Value::Object(o)) => o,
                Ok(Value::Null) => Map::new(),
                Ok(_) => {
                    return Err(format!(
                        "Agent '{name}' has an unreadable config: expected a mapping"
                    ));
                }
                Err(e) => return Err(format!("Agent '{name}' has an unreadable config: {e}")),
            }
        };
        let mut changed: Vec<&str> = Vec::new();
        let mut set = |key: &'static str, value: Value, config: &mut Map<String, Value>| {
            if config.get(key) != Some(&value) {
                config.insert(key.to_string(), value);
                changed.push(key);
            }
        };
        if let Some(d) = &args.description {
            set(
                "description",
                Value::String(d.trim().to_string()),
                &mut config,
            );
        }
        if let Some(m) = &args.model {
            set("model", Value::String(m.clone()), &mut config);
        }
        if let Some(g) = &args.tool_groups {
            let v = Value::Array(g.iter().cloned().map(Value::String).collect());
            set("tool_groups", v, &mut config);
        }
        if let Some(s) = &args.skills {
            let v = Value::Array(s.iter().cloned().map(Value::String).collect());
            set("skills", v, &mut config);
        }
        let config_changed = !changed.is_empty();
        config.insert("name".into(), Value::String(name.clone()));
        let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        if config_changed {
            files.push((config_path, yaml(&config)?.into_bytes()));
        }
        if let Some(soul) = &args.soul {
            files.push((dir.join(AGENT_SOUL_FILE), soul.clone().into_bytes()));
            changed.push("soul");
        }
        if changed.is_empty() {
            return Ok(format!(
                "No changes applied to agent '{name}'. The provided values matched the existing config."
            ));
        }
        if files.len() == 1 {
            let (path, bytes) = &files[0];
            write_atomically(path, bytes).await
        } else {
            replace_files(&files).await
        }
        .map_err(|e| format!("Failed to update agent '{name}': {}", e.kind()))?;
        tracing::info!(agent = %name, user = %self.user_id, fields = ?changed, "custom agent updated");
        Ok(format!(
            "Agent '{name}' updated successfully. Changed: {}. The new configuration takes effect on the next user turn.",
            changed.join(", ")
        ))
    }
}

#[async_trait]
impl Tool for UpdateAgentTool {
    fn name(&self) -> &str {
        "update_agent"
    }

    fn description(&self) -> &str {
        UPDATE_DESCRIPTION
    }

    fn parameters(&self) -> Arc<Value> {
        schema_for::<UpdateAgentArgs>()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        _ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: UpdateAgentArgs = parse_args(self.name(), args)?;
        match self.update(&args).await {
            Ok(text) => Ok(ToolOutput::text(text)),
            Err(e) => Ok(ToolOutput::error(format!("Error: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {

    #[tokio::test]
    async fn replaces_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, "old").unwrap();
        replace_files(&[(a.clone(), b"new".to_vec()), (b.clone(), b"bee".to_vec())])
            .await
            .unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "bee");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        // A target whose directory is missing: nothing changes, nothing is left behind.
        let c = dir.path().join("missing").join("c");
        assert!(
            replace_files(&[(a.clone(), b"x".to_vec()), (c, b"y".to_vec())])
                .await
                .is_err()
        );
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    use super::*;
    use serde_json::json;

    fn setup_args(v: Value) -> SetupAgentArgs {
        serde_json::from_value(v).unwrap()
    }

    fn update_args(v: Value) -> UpdateAgentArgs {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn names_are_validated_and_lowercased() {
        assert_eq!(normalize_agent_name(" My-Agent ").unwrap(), "my-agent");
        for bad in ["", "my_agent", "../x", "a/b", "a.b", "é"] {
            let e = normalize_agent_name(bad).unwrap_err();
            assert!(e.contains("^[A-Za-z0-9-]+$"), "{e}");
        }
    }

    #[tokio::test]
    async fn setup_writes_config_and_soul() {
        let home = tempfile::tempdir().unwrap();
        let tool = SetupAgentTool::new(home.path(), "default", Some("Writer".into()));
        let name = tool
            .create(&setup_args(
                json!({"soul": "# Writer\nYou write.", "description": "Writes", "skills": ["a"]}),
            ))
            .await
            .unwrap();
        assert_eq!(name, "writer");
        let dir = home.path().join("users/default/agents/writer");
        let soul = std::fs::read_to_string(dir.join("SOUL.md")).unwrap();
        assert_eq!(soul, "# Writer\nYou write.");
        let cfg: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(dir.join("config.yaml")).unwrap())
                .unwrap();
        assert_eq!(
            cfg,
            json!({"name": "writer", "description": "Writes", "skills": ["a"]})
        );
        // No temporaries left behind.
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[tokio::test]
    async fn setup_refuses_bad_input_and_writes_nothing() {
        let home = tempfile::tempdir().unwrap();
        let empty = SetupAgentTool::new(home.path(), "default", Some("x".into()));
        let e = empty
            .create(&setup_args(json!({"soul": "  ", "description": "d"})))
            .await
            .unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let bad = SetupAgentTool::new(home.path(), "default", Some("bad_name".into()));
        assert!(
            bad.create(&setup_args(json!({"soul": "s", "description": "d"})))
                .await
                .is_err()
        );
        let none = SetupAgentTool::new(home.path(), "default", None);
        let e = none
            .create(&setup_args(json!({"soul": "s", "description": "d"})))
            .await
            .unwrap_err();
        assert!(e.contains("agent_name"), "{e}");
        assert!(!home.path().join("users").exists());
    }

    #[tokio::test]
    async fn update_changes_only_given_fields_and_keeps_other_keys() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("users/default/agents/writer");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.yaml"),
            "name: writer\ndescription: old\ngithub:\n  repo: a/b\n",
        )
        .unwrap();
        std::fs::write(dir.join("SOUL.md"), "old soul").unwrap();
        let tool = UpdateAgentTool::new(home.path(), "default", "writer", vec!["m1".into()]);
        let text = tool
            .update(&update_args(
                json!({"description": "new", "skills": [], "soul": "new soul", "model": "null"}),
            ))
            .await
            .unwrap();
        assert!(
            text.contains("Changed: description, skills, soul"),
            "{text}"
        );
        let cfg: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(dir.join("config.yaml")).unwrap())
                .unwrap();
        assert_eq!(
            cfg,
            json!({"name": "writer", "description": "new", "github": {"repo": "a/b"}, "skills": []})
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("SOUL.md")).unwrap(),
            "new soul"
        );
        let same = tool
            .update(&update_args(json!({"description": "new"})))
            .await
            .unwrap();
        assert!(same.starts_with("No changes applied"), "{same}");
    }

    #[tokio::test]
    async fn update_refuses_unknown_model_missing_agent_and_empty_calls() {
        let home = tempfile::tempdir().unwrap();
        let tool = UpdateAgentTool::new(home.path(), "default", "ghost", vec!["m1".into()]);
        let e = tool
            .update(&update_args(json!({"description": "x"})))
            .await
            .unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        let e = tool
            .update(&update_args(json!({"model": "m2"})))
            .await
            .unwrap_err();
        assert!(e.contains("Unknown model 'm2'"), "{e}");
        let e = tool.update(&update_args(json!({}))).await.unwrap_err();
        assert!(e.starts_with("No fields provided"), "{e}");
        let e = tool
            .update(&update_args(json!({"soul": " "})))
            .await
            .unwrap_err();
        assert!(e.contains("empty"), "{e}");
        assert!(
            serde_json::from_value::<UpdateAgentArgs>(json!({"skills": "web"})).is_err(),
            "a bare text is not a list"
        );
    }
}
