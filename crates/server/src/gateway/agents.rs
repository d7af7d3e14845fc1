//! Custom agents and the user profile (reference §9.4): `GET|POST /api/agents`,
//! `GET /api/agents/check?name=`, `GET|PUT|DELETE /api/agents/{name}`,
//! `GET|PUT /api/user-profile`.
//!
//! Every route answers 403 unless `agents_api.enabled: true` (DeerFlow keeps agent prompts
//! off HTTP by default), and acts on the caller's own directory
//! ([`Principal::data_user`]):
//!
//! * an agent is `{home}/users/{user}/agents/{name}/config.yaml` and `SOUL.md` — where the
//!   lead agent loads it from for a run with `agent_name`, and where its `setup_agent` /
//!   `update_agent` tools write. Agents of the legacy shared layout `{home}/agents/{name}`
//!   are listed and read (as DeerFlow does) but never written: updating or deleting one is
//!   a 409, and its name is taken;
//! * the profile is `{home}/users/{user}/USER.md`. (DeerFlow keeps one `USER.md` for the
//!   whole installation; with accounts that would let one user read and replace another's
//!   profile, so Fawn keeps one per user.)
//!
//! Names follow DeerFlow's rule `^[A-Za-z0-9-]+$` (422 otherwise; Fawn also caps them at
//! 128 bytes) and are stored lowercase, so no name can leave the agents directory. Files are
//! replaced atomically ([`super::files::replace_files`]). `config.yaml` keys this API does
//! not manage (`allowed_subagents`, `github`, …) are kept on update.

use super::files::{self, replace_files};
use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path, Query};
use crate::wire::{json_response, ok};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};
use std::path::PathBuf;

/// The file holding an agent's settings.
pub const CONFIG_FILE: &str = "config.yaml";
/// The file holding an agent's personality.
pub const SOUL_FILE: &str = "SOUL.md";
/// The user profile.
pub const USER_FILE: &str = "USER.md";
/// Longest agent name (bytes).
pub const MAX_NAME_LEN: usize = 128;
/// Largest `config.yaml` read.
const MAX_CONFIG_BYTES: u64 = 256 * 1024;
/// Largest `SOUL.md` / `USER.md` read back.
const MAX_TEXT_BYTES: u64 = 4 * 1024 * 1024;
/// DeerFlow's `MAX_AGENT_OUTPUT_TOKENS`.
const MAX_AGENT_OUTPUT_TOKENS: u64 = 200_000;
/// The keys of `config.yaml` this API reads and writes; others are kept as they are.
const MANAGED_KEYS: [&str; 8] = [
    "name",
    "description",
    "model",
    "tool_groups",
    "skills",
    "model_settings",
    "thinking_enabled",
    "reasoning_effort",
];

fn require_enabled(app: &AppState) -> ApiResult<()> {
    if app.settings.app.agents_api.enabled {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "The custom-agent API is disabled: set agents_api.enabled: true in config.yaml to \
         manage agents and the user profile over HTTP.",
    ))
}

/// DeerFlow's name rule; returns the stored (lowercase) name.
pub fn normalize_name(raw: &str) -> ApiResult<String> {
    let ok = !raw.is_empty()
        && raw.len() <= MAX_NAME_LEN
        && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !ok {
        let shown: String = raw.chars().take(MAX_NAME_LEN).collect();
        return Err(ApiError::unprocessable(format!(
            "Invalid agent name '{shown}'. Must match ^[A-Za-z0-9-]+$ (letters, digits, and \
             hyphens only, at most {MAX_NAME_LEN} characters)."
        )));
    }
    Ok(raw.to_ascii_lowercase())
}

/// Where the caller's agents live.
struct Dirs {
    /// `{home}/users/{user}`.
    user: PathBuf,
    /// `{home}/agents` (legacy, read only).
    legacy: PathBuf,
}

impl Dirs {
    fn of(app: &AppState, principal: &Principal) -> Dirs {
        let home = &app.settings.home;
        Dirs {
            user: home.join("users").join(principal.data_user(app)),
            legacy: home.join("agents"),
        }
    }

    fn agents(&self) -> PathBuf {
        self.user.join("agents")
    }

    fn agent(&self, name: &str) -> PathBuf {
        self.agents().join(name)
    }

    fn legacy_agent(&self, name: &str) -> PathBuf {
        self.legacy.join(name)
    }

    /// The directory an agent is read from: the caller's when it has a `config.yaml`, else
    /// the legacy one when that has, else `None`.
    async fn resolve(&self, name: &str) -> Option<PathBuf> {
        for dir in [self.agent(name), self.legacy_agent(name)] {
            if files::is_file(&dir.join(CONFIG_FILE)).await {
                return Some(dir);
            }
        }
        None
    }

    /// A name is taken when the caller's directory or a legacy one exists (a directory
    /// holding only an agent's memory counts: creating over it would adopt that memory).
    async fn taken(&self, name: &str) -> bool {
        files::exists(&self.agent(name)).await || files::exists(&self.legacy_agent(name)).await
    }
}

/// Reads a text file of at most `max` bytes; `Ok(None)` when it does not exist.
async fn read_text(path: &std::path::Path, max: u64) -> Result<Option<String>, String> {
    let meta = match tokio::fs::symlink_metadata(path).await {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if !meta.file_type().is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > max {
        return Err(format!("larger than {max} bytes"));
    }
    match tokio::fs::read(path).await {
        Ok(b) => String::from_utf8(b)
            .map(Some)
            .map_err(|_| "not UTF-8 text".to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// An agent's `config.yaml` as a mapping (an empty file is an empty mapping).
async fn read_config(dir: &std::path::Path, name: &str) -> ApiResult<Map<String, Value>> {
    let unreadable = |why: String| {
        ApiError::conflict(format!(
            "The config.yaml of agent '{name}' cannot be read ({why}); fix or delete it"
        ))
    };
    let text = read_text(&dir.join(CONFIG_FILE), MAX_CONFIG_BYTES)
        .await
        .map_err(unreadable)?
        .ok_or_else(|| ApiError::not_found(format!("Agent '{name}' not found")))?;
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_saphyr::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(unreadable("expected a mapping".into())),
        Err(e) => Err(unreadable(e.to_string())),
    }
}

fn string_list(v: Option<&Value>) -> Value {
    match v {
        Some(Value::Array(items)) => Value::Array(
            items
                .iter()
                .filter_map(|i| i.as_str().map(|s| json!(s)))
                .collect(),
        ),
        _ => Value::Null,
    }
}

/// `AgentResponse`: the managed fields of `config.yaml`, read leniently (a value of the
/// wrong type reads as unset), and the soul.
fn agent_json(name: &str, cfg: &Map<String, Value>, soul: Option<String>) -> Value {
    let text = |k: &str| match cfg.get(k) {
        Some(Value::String(s)) if !s.trim().is_empty() => json!(s),
        _ => Value::Null,
    };
    let model_settings = match cfg.get("model_settings") {
        Some(Value::Object(o)) => json!({
            "temperature": o.get("temperature").filter(|v| v.is_number()),
            "max_tokens": o.get("max_tokens").filter(|v| v.is_u64()),
        }),
        _ => Value::Null,
    };
    let effort = match cfg.get("reasoning_effort").and_then(Value::as_str) {
        Some(e @ ("low" | "medium" | "high")) => json!(e),
        _ => Value::Null,
    };
    json!({
        "name": cfg.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or(name),
        "description": cfg.get("description").and_then(Value::as_str).unwrap_or(""),
        "model": text("model"),
        "tool_groups": string_list(cfg.get("tool_groups")),
        "skills": string_list(cfg.get("skills")),
        "model_settings": model_settings,
        "thinking_enabled": cfg.get("thinking_enabled").filter(|v| v.is_boolean()),
        "reasoning_effort": effort,
        "soul": soul,
    })
}

/// `SOUL.md`, trimmed (`""` when absent).
async fn read_soul(dir: &std::path::Path, name: &str) -> ApiResult<String> {
    match read_text(&dir.join(SOUL_FILE), MAX_TEXT_BYTES).await {
        Ok(s) => Ok(s.map(|s| s.trim().to_string()).unwrap_or_default()),
        Err(why) => Err(ApiError::conflict(format!(
            "The SOUL.md of agent '{name}' cannot be read ({why}); fix or delete it"
        ))),
    }
}

async fn load(dir: &std::path::Path, name: &str) -> ApiResult<Value> {
    let cfg = read_config(dir, name).await?;
    let soul = read_soul(dir, name).await?;
    Ok(agent_json(name, &cfg, Some(soul)))
}

/// The names of the agent directories under `root` that hold a `config.yaml`.
async fn agent_names(root: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(mut rd) = tokio::fs::read_dir(root).await else {
        return out;
    };
    while let Ok(Some(entry)) = rd.next_entry().await {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if normalize_name(&name).ok().as_deref() != Some(name.as_str()) {
            continue;
        }
        let is_dir = entry.file_type().await.is_ok_and(|t| t.is_dir());
        if is_dir && files::is_file(&entry.path().join(CONFIG_FILE)).await {
            out.push(name);
        }
    }
    out
}

/// `GET /api/agents`: the caller's agents, then legacy ones not shadowed, by name. An agent
/// whose files cannot be read is left out (logged), never failing the list.
pub async fn list(State(app): State<AppState>, principal: Principal) -> ApiResult<Response> {
    require_enabled(&app)?;
    let agents = custom_agents(&app, &principal).await;
    Ok(ok(&json!({ "agents": agents })))
}

/// The caller's custom agents (and the legacy shared ones their own do not shadow), sorted by
/// name, as `AgentResponse` objects; unreadable ones are skipped (logged).
pub async fn custom_agents(app: &AppState, principal: &Principal) -> Vec<Value> {
    let dirs = Dirs::of(app, principal);
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for (root, is_user) in [(dirs.agents(), true), (dirs.legacy.clone(), false)] {
        for name in agent_names(&root).await {
            if is_user || !found.iter().any(|(n, _)| *n == name) {
                found.push((name.clone(), root.join(&name)));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let mut agents = Vec::with_capacity(found.len());
    for (name, dir) in found {
        match load(&dir, &name).await {
            Ok(a) => agents.push(a),
            Err(e) => tracing::warn!(agent = %name, detail = %e.detail, "agent skipped"),
        }
    }
    agents
}

/// `GET /api/agents/check?name=`: `{available, name}` (the name as it would be stored).
pub async fn check(
    State(app): State<AppState>,
    principal: Principal,
    q: Query,
) -> ApiResult<Response> {
    require_enabled(&app)?;
    let raw = q
        .get("name")
        .ok_or_else(|| ApiError::unprocessable("Missing query parameter `name`"))?;
    let name = normalize_name(raw)?;
    let taken = Dirs::of(&app, &principal).taken(&name).await;
    Ok(ok(&json!({"available": !taken, "name": name})))
}

/// `GET /api/agents/{name}`.
pub async fn get_one(
    State(app): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    require_enabled(&app)?;
    let name = normalize_name(&name)?;
    let dir = Dirs::of(&app, &principal)
        .resolve(&name)
        .await
        .ok_or_else(|| ApiError::not_found(format!("Agent '{name}' not found")))?;
    Ok(ok(&load(&dir, &name).await?))
}

/// `model_settings` as a request gives it: only these two keys, in range.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    #[serde(default, deserialize_with = "present")]
    temperature: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    max_tokens: Option<Option<u64>>,
}

impl ModelSettings {
    fn check(&self) -> ApiResult<()> {
        if let Some(Some(t)) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(ApiError::unprocessable(
                "Invalid request body at `model_settings.temperature`: must be between 0.0 and 2.0",
            ));
        }
        if let Some(Some(m)) = self.max_tokens
            && !(1..=MAX_AGENT_OUTPUT_TOKENS).contains(&m)
        {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `model_settings.max_tokens`: must be between 1 and \
                 {MAX_AGENT_OUTPUT_TOKENS}"
            )));
        }
        Ok(())
    }

    /// Laid over `existing`: a sub-field given as `null` is removed, one not given is kept.
    fn merged(&self, existing: Option<&Value>) -> Map<String, Value> {
        let mut out = match existing {
            Some(Value::Object(o)) => o.clone(),
            _ => Map::new(),
        };
        for (key, v) in [
            ("temperature", self.temperature.map(|t| t.map(|x| json!(x)))),
            ("max_tokens", self.max_tokens.map(|t| t.map(|x| json!(x)))),
        ] {
            match v {
                None => {}
                Some(None) => {
                    out.shift_remove(key);
                }
                Some(Some(x)) => {
                    out.insert(key.into(), x);
                }
            }
        }
        out
    }
}

/// Distinguishes a field given as `null` (`Some(None)`) from one left out (`None`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    Low,
    Medium,
    High,
}

impl Effort {
    fn as_str(&self) -> &'static str {
        match self {
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }
}

/// `POST /api/agents` body.
#[derive(Debug, Deserialize)]
pub struct CreateBody {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    tool_groups: Option<Vec<String>>,
    #[serde(default)]
    skills: Option<Vec<String>>,
    #[serde(default)]
    model_settings: Option<ModelSettings>,
    #[serde(default)]
    thinking_enabled: Option<bool>,
    #[serde(default)]
    reasoning_effort: Option<Effort>,
    #[serde(default)]
    soul: Option<String>,
}

/// `PUT /api/agents/{name}` body: a field left out is kept, one given as `null` is cleared.
#[derive(Debug, Default, Deserialize)]
pub struct UpdateBody {
    #[serde(default, deserialize_with = "present")]
    description: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    model: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    tool_groups: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "present")]
    skills: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "present")]
    model_settings: Option<Option<ModelSettings>>,
    #[serde(default, deserialize_with = "present")]
    thinking_enabled: Option<Option<bool>>,
    #[serde(default, deserialize_with = "present")]
    reasoning_effort: Option<Option<Effort>>,
    #[serde(default, deserialize_with = "present")]
    soul: Option<Option<String>>,
}

/// An agent's `model` must be a configured model (an empty one means the default).
fn check_model(app: &AppState, model: Option<&str>) -> ApiResult<()> {
    let Some(m) = model.filter(|m| !m.is_empty()) else {
        return Ok(());
    };
    let configured =
        app.settings.app.models.iter().any(|c| c.name == m) || app.models.get(m).is_some();
    if configured {
        Ok(())
    } else {
        Err(ApiError::unprocessable(format!(
            "Unknown model '{m}'. Use a model name defined under `models:` in config.yaml."
        )))
    }
}

fn yaml(cfg: &Map<String, Value>) -> ApiResult<Vec<u8>> {
    serde_saphyr::to_string(cfg)
        .map(String::into_bytes)
        .map_err(|e| ApiError::internal("writing an agent's config.yaml", e))
}

fn set_or_remove(cfg: &mut Map<String, Value>, key: &str, v: Option<Value>) {
    match v {
        Some(v) if !v.is_null() => {
            cfg.insert(key.into(), v);
        }
        _ => {
            cfg.shift_remove(key);
        }
    }
}

/// `POST /api/agents` → 201 with the agent; 409 when the name is taken.
pub async fn create(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody<CreateBody>,
) -> ApiResult<Response> {
    require_enabled(&app)?;
    let name = normalize_name(&body.name)?;
    check_model(&app, body.model.as_deref())?;
    if let Some(ms) = &body.model_settings {
        ms.check()?;
    }
    let dirs = Dirs::of(&app, &principal);
    let exists = || ApiError::conflict(format!("Agent '{name}' already exists"));
    if dirs.taken(&name).await {
        return Err(exists());
    }
    let mut cfg = Map::new();
    cfg.insert("name".into(), json!(name));
    if let Some(d) = body.description.filter(|d| !d.is_empty()) {
        cfg.insert("description".into(), json!(d));
    }
    set_or_remove(&mut cfg, "tool_groups", body.tool_groups.map(|v| json!(v)));
    set_or_remove(&mut cfg, "skills", body.skills.map(|v| json!(v)));
    set_or_remove(&mut cfg, "model", body.model.map(|v| json!(v)));
    if let Some(ms) = &body.model_settings {
        let merged = ms.merged(None);
        if !merged.is_empty() {
            cfg.insert("model_settings".into(), Value::Object(merged));
        }
    }
    set_or_remove(
        &mut cfg,
        "thinking_enabled",
        body.thinking_enabled.map(|v| json!(v)),
    );
    set_or_remove(
        &mut cfg,
        "reasoning_effort",
        body.reasoning_effort.map(|e| json!(e.as_str())),
    );
    let config_bytes = yaml(&cfg)?;
    let soul = body.soul.unwrap_or_default();

    tokio::fs::create_dir_all(dirs.agents())
        .await
        .map_err(|e| ApiError::internal("creating the agents directory", e))?;
    let dir = dirs.agent(&name);
    // `create_dir` (not `_all`) is the atomic claim on the name against a concurrent create.
    match tokio::fs::create_dir(&dir).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(exists()),
        Err(e) => return Err(ApiError::internal("creating an agent directory", e)),
    }
    let written = replace_files(&[
        (dir.join(CONFIG_FILE), config_bytes),
        (dir.join(SOUL_FILE), soul.into_bytes()),
    ])
    .await;
    if let Err(e) = written {
        let _ = tokio::fs::remove_dir_all(&dir).await;
        return Err(ApiError::internal("writing an agent", e));
    }
    tracing::info!(agent = %name, "custom agent created");
    Ok(json_response(
        StatusCode::CREATED,
        &load(&dir, &name).await?,
    ))
}

fn legacy_conflict(name: &str, action: &str) -> ApiError {
    ApiError::conflict(format!(
        "Agent '{name}' only exists in the legacy shared layout ({{home}}/agents/{name}) and \
         belongs to no user; move it to users/<user>/agents/ before {action} it."
    ))
}

/// `PUT /api/agents/{name}`: changes the fields given; `soul` replaces `SOUL.md`.
pub async fn update(
    State(app): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<UpdateBody>,
) -> ApiResult<Response> {
    require_enabled(&app)?;
    let name = normalize_name(&name)?;
    let dirs = Dirs::of(&app, &principal);
    let dir = dirs.agent(&name);
    let Some(found) = dirs.resolve(&name).await else {
        return Err(ApiError::not_found(format!("Agent '{name}' not found")));
    };
    if found != dir {
        return Err(legacy_conflict(&name, "updating"));
    }
    if let Some(m) = &body.model {
        check_model(&app, m.as_deref())?;
    }
    if let Some(Some(ms)) = &body.model_settings {
        ms.check()?;
    }
    let config_changed = body.description.is_some()
        || body.model.is_some()
        || body.tool_groups.is_some()
        || body.skills.is_some()
        || body.model_settings.is_some()
        || body.thinking_enabled.is_some()
        || body.reasoning_effort.is_some();
    let mut writes: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    if config_changed {
        let mut cfg = read_config(&dir, &name).await?;
        // Managed keys first, in DeerFlow's order; the others keep theirs after them.
        let mut out = Map::new();
        out.insert(
            "name".into(),
            cfg.get("name").cloned().unwrap_or_else(|| json!(name)),
        );
        let description = match &body.description {
            Some(d) => json!(d.clone().unwrap_or_default()),
            None => cfg.get("description").cloned().unwrap_or(json!("")),
        };
        out.insert("description".into(), description);
        let keep = |k: &str| cfg.get(k).cloned();
        set_or_remove(
            &mut out,
            "tool_groups",
            match &body.tool_groups {
                Some(v) => v.as_ref().map(|v| json!(v)),
                None => keep("tool_groups"),
            },
        );
        set_or_remove(
            &mut out,
            "skills",
            match &body.skills {
                Some(v) => v.as_ref().map(|v| json!(v)),
                None => keep("skills"),
            },
        );
        set_or_remove(
            &mut out,
            "model",
            match &body.model {
                Some(v) => v.as_ref().filter(|m| !m.is_empty()).map(|m| json!(m)),
                None => keep("model"),
            },
        );
        let settings = match &body.model_settings {
            Some(Some(ms)) => {
                let merged = ms.merged(cfg.get("model_settings"));
                (!merged.is_empty()).then_some(Value::Object(merged))
            }
            Some(None) => None,
            None => keep("model_settings"),
        };
        set_or_remove(&mut out, "model_settings", settings);
        set_or_remove(
            &mut out,
            "thinking_enabled",
            match &body.thinking_enabled {
                Some(v) => v.map(|b| json!(b)),
                None => keep("thinking_enabled"),
            },
        );
        set_or_remove(
            &mut out,
            "reasoning_effort",
            match &body.reasoning_effort {
                Some(v) => v.as_ref().map(|e| json!(e.as_str())),
                None => keep("reasoning_effort"),
            },
        );
        cfg.retain(|k, _| !MANAGED_KEYS.contains(&k.as_str()));
        out.extend(cfg);
        writes.push((dir.join(CONFIG_FILE), yaml(&out)?));
    }
    if let Some(Some(soul)) = &body.soul {
        writes.push((dir.join(SOUL_FILE), soul.clone().into_bytes()));
    }
    if !writes.is_empty() {
        replace_files(&writes)
            .await
            .map_err(|e| ApiError::internal("writing an agent", e))?;
        tracing::info!(agent = %name, "custom agent updated");
    }
    Ok(ok(&load(&dir, &name).await?))
}

/// `DELETE /api/agents/{name}` → 204; the agent's directory goes (memory included).
pub async fn delete(
    State(app): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    require_enabled(&app)?;
    let name = normalize_name(&name)?;
    let dirs = Dirs::of(&app, &principal);
    let dir = dirs.agent(&name);
    let meta = match tokio::fs::symlink_metadata(&dir).await {
        Ok(m) => m,
        Err(_) if files::exists(&dirs.legacy_agent(&name)).await => {
            return Err(legacy_conflict(&name, "deleting"));
        }
        Err(_) => return Err(ApiError::not_found(format!("Agent '{name}' not found"))),
    };
    if !meta.is_dir() || !files::is_file(&dir.join(CONFIG_FILE)).await {
        return Err(ApiError::conflict(format!(
            "'{name}' holds data but is not a custom agent (it has no config.yaml); it was left \
             in place."
        )));
    }
    tokio::fs::remove_dir_all(&dir)
        .await
        .map_err(|e| ApiError::internal("deleting an agent", e))?;
    tracing::info!(agent = %name, "custom agent deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn profile_path(app: &AppState, principal: &Principal) -> PathBuf {
    Dirs::of(app, principal).user.join(USER_FILE)
}

/// `GET /api/user-profile`: `{content}`, `null` when there is none yet.
pub async fn get_profile(State(app): State<AppState>, principal: Principal) -> ApiResult<Response> {
    require_enabled(&app)?;
    let text = read_text(&profile_path(&app, &principal), MAX_TEXT_BYTES)
        .await
        .map_err(|why| {
            ApiError::conflict(format!(
                "USER.md cannot be read ({why}); replace it with PUT /api/user-profile"
            ))
        })?;
    let content = text.map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
    Ok(ok(&json!({ "content": content })))
}

#[derive(Debug, Default, Deserialize)]
pub struct ProfileBody {
    #[serde(default)]
    content: String,
}

/// `PUT /api/user-profile` `{content}`: replaces `USER.md`.
pub async fn put_profile(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody<ProfileBody>,
) -> ApiResult<Response> {
    require_enabled(&app)?;
    let path = profile_path(&app, &principal);
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| ApiError::internal("creating the user directory", e))?;
    }
    replace_files(&[(path, body.content.clone().into_bytes())])
        .await
        .map_err(|e| ApiError::internal("writing USER.md", e))?;
    let content = (!body.content.is_empty()).then_some(body.content);
    Ok(ok(&json!({ "content": content })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(normalize_name("My-Agent-2").unwrap(), "my-agent-2");
        for bad in [
            "",
            "..",
            "a/b",
            "a\\b",
            "a.b",
            "a b",
            "a_b",
            "é",
            "%2e%2e",
            &"x".repeat(129),
        ] {
            assert_eq!(normalize_name(bad).unwrap_err().status, 422, "{bad}");
        }
    }

    #[test]
    fn responses_read_config_leniently() {
        let cfg: Map<String, Value> = serde_json::from_value(json!({
            "name": "a",
            "description": 3,
            "model": "",
            "tool_groups": ["web", 1],
            "model_settings": {"temperature": 0.5, "max_tokens": "x"},
            "thinking_enabled": "yes",
            "reasoning_effort": "extreme",
            "allowed_subagents": [],
        }))
        .unwrap();
        assert_eq!(
            agent_json("a", &cfg, Some("s".into())),
            json!({
                "name": "a", "description": "", "model": null, "tool_groups": ["web"],
                "skills": null, "model_settings": {"temperature": 0.5, "max_tokens": null},
                "thinking_enabled": null, "reasoning_effort": null, "soul": "s",
            })
        );
    }

    #[test]
    fn model_settings_merge() {
        let ms: ModelSettings = serde_json::from_value(json!({"temperature": null})).unwrap();
        let merged = ms.merged(Some(&json!({"temperature": 1.0, "max_tokens": 10})));
        assert_eq!(Value::Object(merged), json!({"max_tokens": 10}));
        let ms: ModelSettings = serde_json::from_value(json!({"max_tokens": 0})).unwrap();
        assert_eq!(ms.check().unwrap_err().status, 422);
        let e = serde_json::from_value::<ModelSettings>(json!({"top_p": 1})).unwrap_err();
        assert!(e.to_string().contains("unknown field `top_p`"), "{e}");
    }
}
