//! Run options as DeerFlow reads them: `config.configurable` overlaid with `context`
//! (DeerFlow's `_get_runtime_config`), defaults and clamps applied, the model chosen, and a
//! custom agent's `config.yaml` / `SOUL.md` loaded.

use fawn_config::Settings;
use fawn_llm::{ChatModel, ModelRegistry};
use fawn_middleware::RunOptions;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// DeerFlow's default `recursion_limit`.
pub const DEFAULT_RECURSION_LIMIT: u32 = 100;

/// Why a run could not be set up. `error` is the exception class DeerFlow raises for it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct SetupError {
    pub error: &'static str,
    pub message: String,
}

impl SetupError {
    pub(crate) fn value(message: impl Into<String>) -> SetupError {
        SetupError {
            error: "ValueError",
            message: message.into(),
        }
    }
}

/// `configurable` with `context` laid over it.
pub fn runtime_config(
    configurable: &Map<String, Value>,
    context: &Map<String, Value>,
) -> Map<String, Value> {
    let mut cfg = configurable.clone();
    for (k, v) in context {
        cfg.insert(k.clone(), v.clone());
    }
    cfg
}

/// DeerFlow's rule for `config.recursion_limit`: a positive integer, clamped to
/// `max_recursion_limit`; anything else (absent, a bool, a float, ≤ 0) gives 100.
pub fn resolve_recursion_limit(raw: Option<&Value>, max: u32) -> u32 {
    let max = max.max(1);
    match raw {
        Some(Value::Number(n)) => match n.as_i64() {
            Some(v) if v > 0 => u32::try_from(v).unwrap_or(u32::MAX).min(max),
            _ => match n.as_u64() {
                Some(v) if v > 0 => u32::try_from(v).unwrap_or(u32::MAX).min(max),
                _ => DEFAULT_RECURSION_LIMIT.min(max),
            },
        },
        _ => DEFAULT_RECURSION_LIMIT.min(max),
    }
}

/// Python truthiness of a JSON value.
pub(crate) fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn flag(cfg: &Map<String, Value>, key: &str) -> bool {
    cfg.get(key).is_some_and(truthy)
}

fn int(cfg: &Map<String, Value>, key: &str) -> Option<i64> {
    match cfg.get(key)? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn string(cfg: &Map<String, Value>, key: &str) -> Option<String> {
    match cfg.get(key)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        _ => None,
    }
}

fn clamp(v: i64, lo: u32, hi: u32) -> u32 {
    v.clamp(i64::from(lo), i64::from(hi)) as u32
}

/// A custom agent: `{home}/users/{user}/agents/{name}/config.yaml` and `SOUL.md`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct AgentProfile {
    pub name: String,
    pub description: String,
    /// Model for this agent (a configured model name).
    pub model: Option<String>,
    /// Restricts config tools to these groups.
    pub tool_groups: Option<Vec<String>>,
    /// Skill allowlist (`None`: all enabled, `[]`: none).
    pub skills: Option<Vec<String>>,
    /// The agent's default for `thinking_enabled` (the request wins).
    pub thinking_enabled: Option<bool>,
    pub reasoning_effort: Option<String>,
    /// Subagent types this agent may delegate to (`[]` disables delegation).
    pub allowed_subagents: Option<Vec<String>>,
    /// Sampling overrides for this agent's model calls.
    pub model_settings: Option<AgentModelSettings>,
    /// `SOUL.md`, trimmed; `None` when absent or empty.
    #[serde(skip)]
    pub soul: Option<String>,
}

/// A custom agent's `model_settings`: layered over the model's own settings for every call
/// of its runs (the gateway validates the ranges when it writes them).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct AgentModelSettings {
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
}

/// DeerFlow's agent-name rule: `^[A-Za-z0-9-]+$`.
pub fn valid_agent_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A user id made safe as a path segment (`[A-Za-z0-9_-]`), with a short hash suffix when
/// characters had to be replaced.
pub fn safe_user_id(raw: &str) -> String {
    let raw = raw.trim();
    if raw.is_empty() {
        return "default".into();
    }
    let cleaned: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if cleaned == raw {
        return cleaned;
    }
    let hash = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, raw.as_bytes())
        .simple()
        .to_string();
    format!("{cleaned}-{}", &hash[..8])
}

/// The user a run acts for: `user_id` from the runtime config (the server puts the
/// authenticated identity there), else `default`.
pub fn run_user_id(cfg: &Map<String, Value>) -> String {
    string(cfg, "user_id")
        .map(|u| safe_user_id(&u))
        .unwrap_or_else(|| "default".into())
}

/// The directory of a custom agent: the per-user layout, else the legacy shared one.
async fn agent_dir(home: &Path, user_id: &str, name: &str) -> PathBuf {
    let user = home.join("users").join(user_id).join("agents").join(name);
    if tokio::fs::metadata(&user).await.is_ok() {
        return user;
    }
    let legacy = home.join("agents").join(name);
    if tokio::fs::metadata(&legacy).await.is_ok() {
        return legacy;
    }
    user
}

/// Loads a custom agent's `config.yaml` and `SOUL.md`.
pub async fn load_agent(
    home: &Path,
    user_id: &str,
    name: &str,
) -> Result<AgentProfile, SetupError> {
    if !valid_agent_name(name) {
        return Err(SetupError::value(format!(
            "Invalid agent name '{name}'. Must match pattern: ^[A-Za-z0-9-]+$"
        )));
    }
    // Agents are stored under their lowercase name (setup_agent, DeerFlow).
    let dir = agent_dir(home, user_id, &name.to_ascii_lowercase()).await;
    let config_path = dir.join("config.yaml");
    let text = match tokio::fs::read_to_string(&config_path).await {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SetupError {
                error: "FileNotFoundError",
                message: format!("Agent '{name}' not found"),
            });
        }
        Err(e) => {
            return Err(SetupError {
                error: "OSError",
                message: format!("Could not read the config of agent '{name}': {e}"),
            });
        }
    };
    let mut profile: AgentProfile = if text.trim().is_empty() {
        AgentProfile::default()
    } else {
        let value: Value = serde_saphyr::from_str(&text).map_err(|e| {
            SetupError::value(format!("Failed to parse the config of agent '{name}': {e}"))
        })?;
        match value {
            Value::Null => AgentProfile::default(),
            Value::Object(mut o) => {
                // Unknown keys are ignored, as DeerFlow does.
                o.retain(|k, _| {
                    matches!(
                        k.as_str(),
                        "name"
                            | "description"
                            | "model"
                            | "tool_groups"
                            | "skills"
                            | "thinking_enabled"
                            | "reasoning_effort"
                            | "allowed_subagents"
                            | "model_settings"
                    )
                });
                serde_json::from_value(Value::Object(o)).map_err(|e| {
                    SetupError::value(format!("Invalid config for agent '{name}': {e}"))
                })?
            }
            _ => {
                return Err(SetupError::value(format!(
                    "Invalid config for agent '{name}': expected a mapping"
                )));
            }
        }
    };
    if profile.name.is_empty() {
        profile.name = name.to_string();
    }
    profile.soul = match tokio::fs::read_to_string(dir.join("SOUL.md")).await {
        Ok(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        _ => None,
    };
    Ok(profile)
}

/// Everything resolved about one run before its graph is built.
#[derive(Clone)]
pub struct ResolvedRun {
    pub options: RunOptions,
    /// The run's model (after fallback).
    pub model: Arc<dyn ChatModel>,
    pub user_id: String,
    /// `configurable` overlaid with `context`.
    pub context: Map<String, Value>,
    /// The custom agent, when `agent_name` names one (not in bootstrap mode).
    pub agent: Option<AgentProfile>,
    /// `non_interactive` (internal callers): no `ask_clarification` tool at all.
    /// (`disable_clarification` keeps the tool; the clarification middleware answers it.)
    pub non_interactive: bool,
    /// Things that were adjusted (unknown model, thinking forced off, …).
    pub warnings: Vec<String>,
}

impl std::fmt::Debug for ResolvedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedRun")
            .field("options", &self.options)
            .field("user_id", &self.user_id)
            .field("agent", &self.agent.as_ref().map(|a| &a.name))
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// Resolves the options of a run from its runtime config (`configurable` overlaid with
/// `context`), the settings, the configured models and the custom agent, if any.
pub fn resolve_options(
    cfg: &Map<String, Value>,
    recursion_limit: Option<&Value>,
    settings: &Settings,
    models: &ModelRegistry,
    agent: Option<&AgentProfile>,
) -> Result<ResolvedRun, SetupError> {
    let mut warnings = Vec::new();
    let default = models.default_model().ok_or_else(|| {
        SetupError::value(
            "No chat models are configured. Please configure at least one model in config.yaml.",
        )
    })?;
    let requested = string(cfg, "model_name")
        .or_else(|| string(cfg, "model"))
        .or_else(|| {
            agent
                .and_then(|a| a.model.clone())
                .filter(|m| !m.is_empty())
        });
    let model = match &requested {
        Some(name) => match models.get(name) {
            Some(m) => m,
            None => {
                let w = format!(
                    "Model '{name}' not found in config; fallback to default model '{}'.",
                    default.info().name
                );
                tracing::warn!("{w}");
                warnings.push(w);
                default
            }
        },
        None => default,
    };
    let info = model.info().clone();
    let explicit_thinking = cfg.get("thinking_enabled").map(truthy);
    let mut thinking_enabled = match explicit_thinking {
        Some(v) => v,
        None => agent.and_then(|a| a.thinking_enabled).unwrap_or(true),
    };
    if thinking_enabled && !info.supports_thinking {
        let w = format!(
            "Thinking mode is enabled but model '{}' does not support it; fallback to non-thinking mode.",
            info.name
        );
        // Thinking is on by default: only a request that asked for it deserves a warning
        // in the log, or every run on such a model would print one.
        if explicit_thinking == Some(true) {
            tracing::warn!("{w}");
        } else {
            tracing::debug!("{w}");
        }
        warnings.push(w);
        thinking_enabled = false;
    }
    let reasoning_effort = if cfg.contains_key("reasoning_effort") {
        string(cfg, "reasoning_effort")
    } else {
        agent.and_then(|a| a.reasoning_effort.clone())
    }
    .filter(|_| info.supports_reasoning_effort);
    let sub = &settings.app.subagents;
    let max_concurrent_subagents = match int(cfg, "max_concurrent_subagents") {
        Some(v) => clamp(v, 1, 4),
        None => clamp(i64::from(sub.max_concurrent), 1, 4),
    };
    let max_total_subagents = match int(cfg, "max_total_subagents") {
        Some(v) => clamp(v, 1, 50),
        None => clamp(i64::from(sub.max_total_per_run), 1, 50),
    };
    let agent_name = match cfg.get("agent_name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s)) if valid_agent_name(s.trim()) => Some(s.trim().to_string()),
        Some(other) => {
            let shown = other
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| other.to_string());
            return Err(SetupError::value(format!(
                "Invalid agent name '{shown}'. Must match pattern: ^[A-Za-z0-9-]+$"
            )));
        }
    };
    // A custom agent may forbid delegation; the request can only narrow it.
    let subagent_enabled = flag(cfg, "subagent_enabled")
        && !agent.is_some_and(|a| a.allowed_subagents.as_ref().is_some_and(Vec::is_empty));
    let options = RunOptions {
        model_name: info.name.clone(),
        thinking_enabled,
        reasoning_effort,
        is_plan_mode: flag(cfg, "is_plan_mode"),
        subagent_enabled,
        max_concurrent_subagents,
        max_total_subagents,
        agent_name,
        is_bootstrap: flag(cfg, "is_bootstrap"),
        recursion_limit: resolve_recursion_limit(recursion_limit, settings.app.max_recursion_limit),
        temperature: agent
            .and_then(|a| a.model_settings.as_ref())
            .and_then(|m| m.temperature),
        max_tokens: agent
            .and_then(|a| a.model_settings.as_ref())
            .and_then(|m| m.max_tokens),
    };
    Ok(ResolvedRun {
        options,
        model,
        user_id: run_user_id(cfg),
        context: cfg.clone(),
        agent: agent.cloned(),
        non_interactive: flag(cfg, "non_interactive"),
        warnings,
    })
}

/// [`resolve_options`] after loading the custom agent named by `agent_name` (unless the
/// run is a bootstrap run, which creates that agent).
pub async fn resolve_run(
    configurable: &Map<String, Value>,
    context: &Map<String, Value>,
    recursion_limit: Option<&Value>,
    settings: &Settings,
    models: &ModelRegistry,
) -> Result<ResolvedRun, SetupError> {
    let cfg = runtime_config(configurable, context);
    // Validate the name (and the rest) before touching the filesystem.
    let first = resolve_options(&cfg, recursion_limit, settings, models, None)?;
    let Some(name) = first.options.agent_name.clone() else {
        return Ok(first);
    };
    if first.options.is_bootstrap {
        return Ok(first);
    }
    let agent = load_agent(&settings.home, &first.user_id, &name).await?;
    resolve_options(&cfg, recursion_limit, settings, models, Some(&agent))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn recursion_limit_rule() {
        let cases = [
            (None, 100),
            (Some(json!(25)), 25),
            (Some(json!(1000)), 1000),
            (Some(json!(5000)), 1000),
            (Some(json!(0)), 100),
            (Some(json!(-3)), 100),
            (Some(json!(true)), 100),
            (Some(json!(12.5)), 100),
            (Some(json!("50")), 100),
            (Some(Value::Null), 100),
        ];
        for (raw, want) in cases {
            assert_eq!(resolve_recursion_limit(raw.as_ref(), 1000), want, "{raw:?}");
        }
        assert_eq!(resolve_recursion_limit(None, 40), 40);
        assert_eq!(resolve_recursion_limit(Some(&json!(60)), 40), 40);
    }

    #[test]
    fn user_ids_are_path_safe() {
        assert_eq!(safe_user_id("alice"), "alice");
        assert_eq!(safe_user_id(""), "default");
        let odd = safe_user_id("../etc/passwd");
        assert!(odd.starts_with("___etc_passwd-"), "{odd}");
        assert!(
            odd.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        );
        assert_ne!(safe_user_id("a/b"), safe_user_id("a_b"));
    }

    #[test]
    fn agent_names() {
        assert!(valid_agent_name("my-agent-2"));
        assert!(!valid_agent_name("my_agent"));
        assert!(!valid_agent_name("../x"));
        assert!(!valid_agent_name(""));
    }

    #[test]
    fn context_overlays_configurable() {
        let c = runtime_config(
            json!({"model_name": "a", "x": 1}).as_object().unwrap(),
            json!({"model_name": "b"}).as_object().unwrap(),
        );
        assert_eq!(c["model_name"], "b");
        assert_eq!(c["x"], 1);
    }
}
