//! Skills (reference §7, §9.4) over the cached catalog:
//!
//! * `GET /api/skills`, `GET|PUT /api/skills/{name}`, `POST /api/skills/reload`. `PUT
//!   {enabled}` writes `skills.<name>.enabled` into `extensions_config.json` atomically; the
//!   catalog, the prompt of the next run and the sandbox's `/mnt/skills` follow at once.
//! * `POST /api/skills/install` ([`super::skill_install`]): a `.skill` archive from a
//!   thread's files becomes a custom skill.
//! * Custom skills: `GET /api/skills/custom`, `GET|PUT|DELETE /api/skills/custom/{name}`
//!   (the content is the raw `SKILL.md`), `GET …/{name}/history`, `POST …/{name}/rollback
//!   {history_index}`.
//!
//! **Where custom skills live.** DeerFlow keeps them per user
//! (`{home}/users/{uid}/skills/custom/{name}`), but only an admin may install, edit or
//! delete one there. Fawn keeps one catalog for the deployment, scanned from
//! `{skills_dir}/public` and `{skills_dir}/custom` (DeerFlow's shared "legacy" layout), and
//! mounts it into every sandbox; install and edits write to `{skills_dir}/custom/{name}`. So
//! custom skills are curated by admins and offered to every user (`category: custom`,
//! `editable: true`, like DeerFlow's own listing), and what an admin installs is picked up
//! by the next run of anyone without a restart. A custom skill shadows a public one of the
//! same name when placed by hand, but install refuses a name any skill already has (409).
//!
//! **History.** Every change through these routes (edit, delete, rollback) appends a record to
//! `{skills_dir}/custom/.history/{name}.jsonl`, DeerFlow's layout and record shape: `{ts,
//! action: human_edit|human_delete|rollback, author: "human", thread_id: null, file_path:
//! "SKILL.md", prev_content, new_content}` (`rollback_from_ts` on rollbacks). The file is
//! outside every skill directory, so it is not mounted into sandboxes, and keeps the last
//! [`MAX_HISTORY`] records (rewritten atomically). `history_index` indexes it like a Python
//! list (`-1`, the default, is the latest record); a rollback restores that record's
//! `prev_content`, and works after a delete (it recreates the skill).
//!
//! **Who.** As in DeerFlow: listing (`/skills`, `/skills/custom`) is for every user;
//! installing, toggling, reloading and everything under `/skills/custom/{name}` (reads
//! included) is admin only. Changes are serialised in this process.
//!
//! **Errors.** `{name}` must be a valid skill name (hyphen-case, ≤ 64): 400 on writes, 404 on
//! reads. A public skill named on a write → 400; no such custom skill → 404; content whose
//! front matter fails DeerFlow's rules, whose `name` differs from `{name}`, or over 1 MiB →
//! 400; an index out of range or a record without previous content → 400.

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path};
use crate::wire::ok;
use axum::extract::State;
use axum::response::Response;
use fawn_tools::skills::frontmatter::validate_name;
use fawn_tools::skills::{
    FrontMatter, MAX_SKILL_FILE_BYTES, SKILL_FILE, Skill, SkillCatalog, SkillCategory,
    parse_skill_md,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::path::PathBuf;

/// Records kept in a custom skill's history.
pub const MAX_HISTORY: usize = 50;
/// The history directory under `custom/` (hidden: never scanned as a skill).
const HISTORY_DIR: &str = ".history";

/// Serialises installs and custom-skill changes (files, history, catalog reload).
pub(crate) static CUSTOM_SKILLS_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn skill_json(s: &Skill) -> Value {
    json!({
        "name": s.name,
        "description": s.description,
        "license": s.license,
        "category": s.category.as_str(),
        "enabled": s.enabled,
        "editable": s.category == SkillCategory::Custom,
    })
}

pub async fn list(State(app): State<AppState>) -> Response {
    let catalog = app.services.skills.catalog().await;
    let skills: Vec<Value> = catalog.skills().iter().map(skill_json).collect();
    ok(&json!({"skills": skills}))
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("Skill '{name}' not found"))
}

pub async fn get_one(State(app): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    let catalog = app.services.skills.catalog().await;
    match catalog.get(&name) {
        Some(s) => Ok(ok(&skill_json(s))),
        None => Err(not_found(&name)),
    }
}

#[derive(Debug, Deserialize)]
pub struct ToggleBody {
    enabled: bool,
}

/// `PUT /api/skills/{name}` `{enabled}`.
pub async fn put(
    State(app): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<ToggleBody>,
) -> ApiResult<Response> {
    let gw = &app.services;
    if gw.skills.catalog().await.get(&name).is_none() {
        return Err(not_found(&name));
    }
    {
        let _guard = gw.extensions.lock().await;
        let mut raw = gw
            .extensions
            .current()
            .await
            .map_err(|e| ApiError::conflict(format!("extensions_config.json: {e}")))?;
        let skills = raw
            .entry("skills".to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !skills.is_object() {
            *skills = Value::Object(Map::new());
        }
        if let Value::Object(m) = skills {
            let entry = m
                .entry(name.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            if let Value::Object(e) = entry {
                e.insert("enabled".into(), Value::Bool(body.enabled));
            }
        }
        gw.extensions
            .write(&raw)
            .await
            .map_err(|e| ApiError::internal("saving the skill setting", e))?;
    }
    let catalog = gw.skills.reload().await;
    match catalog.get(&name) {
        Some(s) => Ok(ok(&skill_json(s))),
        None => Err(not_found(&name)),
    }
}

/// `POST /api/skills/reload`: scans the skills directory again now.
pub async fn reload(State(app): State<AppState>) -> Response {
    let catalog = app.services.skills.reload().await;
    ok(&json!({
        "success": true,
        "scope": "process",
        "message": format!("Reloaded {} skill(s)", catalog.skills().len()),
    }))
}

// ------------------------------------------------------------------------ custom skills

/// `{skills_dir}/custom`: where custom skills are installed and edited.
pub fn custom_root(app: &AppState) -> PathBuf {
    app.settings.skills_dir.join(SkillCategory::Custom.as_str())
}

fn history_file(app: &AppState, name: &str) -> PathBuf {
    custom_root(app)
        .join(HISTORY_DIR)
        .join(format!("{name}.jsonl"))
}

fn custom_not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("Custom skill '{name}' not found"))
}

/// A valid custom skill of the catalog by its name.
fn catalog_custom<'a>(catalog: &'a SkillCatalog, name: &str) -> Option<&'a Skill> {
    catalog
        .skills()
        .iter()
        .find(|s| s.category == SkillCategory::Custom && s.name == name)
}

/// `{name}` of a write: a valid skill name, or 400.
fn writable_name(name: &str) -> ApiResult<()> {
    validate_name(name).map_err(|e| ApiError::bad_request(format!("Invalid skill name: {e}")))
}

/// `true` when `path` is a directory itself (not a symlink to one).
async fn is_plain_dir(path: &std::path::Path) -> bool {
    tokio::fs::symlink_metadata(path)
        .await
        .is_ok_and(|m| m.is_dir())
}

/// The directory of the custom skill `name` that a write may change: the catalog's (whatever
/// its directory is called), else `custom/{name}` when it holds a `SKILL.md` (a skill whose
/// front matter is broken can be repaired). A public skill of that name → 400; none → 404.
async fn editable_dir(app: &AppState, catalog: &SkillCatalog, name: &str) -> ApiResult<PathBuf> {
    if let Some(s) = catalog_custom(catalog, name)
        && is_plain_dir(&s.host_dir).await
    {
        return Ok(s.host_dir.clone());
    }
    let dir = custom_root(app).join(name);
    if is_plain_dir(&dir).await && super::files::is_file(&dir.join(SKILL_FILE)).await {
        return Ok(dir);
    }
    if catalog.get(name).is_some() || catalog.shadowed().iter().any(|s| s.name == name) {
        return Err(ApiError::bad_request(format!(
            "'{name}' is a built-in skill and cannot be edited. To customise it, install a custom skill under another name."
        )));
    }
    Err(custom_not_found(name))
}

/// The `SKILL.md` text of a skill directory, if it has a readable one.
async fn read_skill_md(dir: &std::path::Path) -> ApiResult<Option<String>> {
    let file = dir.join(SKILL_FILE);
    let meta = match tokio::fs::symlink_metadata(&file).await {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ApiError::internal("reading a custom skill", e)),
    };
    if !meta.is_file() || meta.len() > MAX_SKILL_FILE_BYTES {
        return Ok(None);
    }
    match tokio::fs::read(&file).await {
        Ok(b) => Ok(String::from_utf8(b).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ApiError::internal("reading a custom skill", e)),
    }
}

/// Checks new `SKILL.md` content for the skill `name`; returns its front matter.
fn validate_content(name: &str, content: &str) -> ApiResult<FrontMatter> {
    if content.len() as u64 > MAX_SKILL_FILE_BYTES {
        return Err(ApiError::bad_request(format!(
            "{SKILL_FILE} is larger than 1 MiB"
        )));
    }
    let (fm, _) = parse_skill_md(content).map_err(ApiError::bad_request)?;
    if fm.name != name {
        return Err(ApiError::bad_request(format!(
            "Frontmatter name '{}' must match requested skill name '{name}'.",
            fm.name
        )));
    }
    Ok(fm)
}

/// Replaces `dir/SKILL.md` atomically (creating `dir`).
async fn write_skill_md(dir: &std::path::Path, content: &str) -> ApiResult<()> {
    let written = async {
        tokio::fs::create_dir_all(dir).await?;
        super::files::replace_files(&[(dir.join(SKILL_FILE), content.as_bytes().to_vec())]).await
    }
    .await;
    written.map_err(|e| ApiError::internal("writing a custom skill", e))
}

/// The history records of `name`, oldest first (lines that are not JSON objects are
/// skipped).
async fn read_history(app: &AppState, name: &str) -> ApiResult<Vec<Map<String, Value>>> {
    let text = match tokio::fs::read_to_string(history_file(app, name)).await {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ApiError::internal("reading a skill's history", e)),
    };
    let mut records = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(m)) => records.push(m),
            _ => tracing::warn!(skill = %name, "unreadable skill history line skipped"),
        }
    }
    Ok(records)
}

/// Appends a record (stamped `ts`, DeerFlow's common fields filled in) and keeps the last
/// [`MAX_HISTORY`].
async fn append_history(app: &AppState, name: &str, record: Value) -> ApiResult<()> {
    let mut records = read_history(app, name).await?;
    let mut entry = Map::new();
    entry.insert(
        "ts".into(),
        json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, false)),
    );
    entry.insert("author".into(), json!("human"));
    entry.insert("thread_id".into(), Value::Null);
    entry.insert("file_path".into(), json!(SKILL_FILE));
    if let Value::Object(m) = record {
        entry.extend(m);
    }
    records.push(entry);
    let skip = records.len().saturating_sub(MAX_HISTORY);
    let mut text = String::new();
    for r in &records[skip..] {
        text.push_str(&Value::Object(r.clone()).to_string());
        text.push('\n');
    }
    let file = history_file(app, name);
    let written = async {
        if let Some(parent) = file.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        super::files::replace_files(&[(file, text.into_bytes())]).await
    }
    .await;
    written.map_err(|e| ApiError::internal("writing a skill's history", e))
}

/// DeerFlow's custom skill answer: the skill's fields and its raw `SKILL.md`.
fn content_json(catalog: &SkillCatalog, fm: &FrontMatter, content: &str) -> Value {
    let mut v = match catalog_custom(catalog, &fm.name) {
        Some(s) => skill_json(s),
        None => json!({
            "name": fm.name,
            "description": fm.description,
            "license": fm.license,
            "category": SkillCategory::Custom.as_str(),
            "enabled": true,
            "editable": true,
        }),
    };
    if let Value::Object(m) = &mut v {
        m.insert("content".into(), json!(content));
    }
    v
}

/// `GET /api/skills/custom`: the custom skills (every user sees them).
pub async fn list_custom(State(app): State<AppState>) -> Response {
    let catalog = app.services.skills.catalog().await;
    let skills: Vec<Value> = catalog
        .skills()
        .iter()
        .filter(|s| s.category == SkillCategory::Custom)
        .map(skill_json)
        .collect();
    ok(&json!({"skills": skills}))
}

/// `GET /api/skills/custom/{name}`: the skill and its `SKILL.md`.
pub async fn get_custom(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let catalog = app.services.skills.catalog().await;
    let skill = catalog_custom(&catalog, &name).ok_or_else(|| custom_not_found(&name))?;
    let content = read_skill_md(&skill.host_dir)
        .await?
        .ok_or_else(|| custom_not_found(&name))?;
    let mut v = skill_json(skill);
    if let Value::Object(m) = &mut v {
        m.insert("content".into(), json!(content));
    }
    Ok(ok(&v))
}

#[derive(Debug, Deserialize)]
pub struct ContentBody {
    content: String,
}

/// `PUT /api/skills/custom/{name}` `{content}`: replaces `SKILL.md`, keeping the old one in
/// the history.
pub async fn put_custom(
    State(app): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<ContentBody>,
) -> ApiResult<Response> {
    writable_name(&name)?;
    let _guard = CUSTOM_SKILLS_LOCK.lock().await;
    let catalog = app.services.skills.catalog().await;
    let dir = editable_dir(&app, &catalog, &name).await?;
    let fm = validate_content(&name, &body.content)?;
    let prev = read_skill_md(&dir).await?;
    write_skill_md(&dir, &body.content).await?;
    append_history(
        &app,
        &name,
        json!({"action": "human_edit", "prev_content": prev, "new_content": body.content}),
    )
    .await?;
    let catalog = app.services.skills.reload().await;
    Ok(ok(&content_json(&catalog, &fm, &body.content)))
}

/// `DELETE /api/skills/custom/{name}`: removes the skill's directory; its history stays (a
/// rollback brings it back).
pub async fn delete_custom(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    writable_name(&name)?;
    let _guard = CUSTOM_SKILLS_LOCK.lock().await;
    let catalog = app.services.skills.catalog().await;
    let dir = editable_dir(&app, &catalog, &name).await?;
    let prev = read_skill_md(&dir).await?;
    append_history(
        &app,
        &name,
        json!({"action": "human_delete", "prev_content": prev, "new_content": null}),
    )
    .await?;
    match tokio::fs::remove_dir_all(&dir).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(ApiError::internal("deleting a custom skill", e)),
    }
    app.services.skills.reload().await;
    Ok(ok(&json!({"success": true})))
}

/// Whether `name` has a custom skill directory or a history (what history and rollback
/// need to answer something other than 404).
async fn known_custom(app: &AppState, catalog: &SkillCatalog, name: &str) -> bool {
    validate_name(name).is_ok()
        && (catalog_custom(catalog, name).is_some()
            || super::files::is_file(&custom_root(app).join(name).join(SKILL_FILE)).await
            || super::files::is_file(&history_file(app, name)).await)
}

/// `GET /api/skills/custom/{name}/history`: `{history: [record…]}`, oldest first.
pub async fn history(State(app): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    let catalog = app.services.skills.catalog().await;
    if !known_custom(&app, &catalog, &name).await {
        return Err(custom_not_found(&name));
    }
    let records: Vec<Value> = read_history(&app, &name)
        .await?
        .into_iter()
        .map(Value::Object)
        .collect();
    Ok(ok(&json!({"history": records})))
}

fn latest() -> i64 {
    -1
}

#[derive(Debug, Deserialize)]
pub struct RollbackBody {
    #[serde(default = "latest")]
    history_index: i64,
}

/// `POST /api/skills/custom/{name}/rollback` `{history_index = -1}`: restores the
/// `prev_content` of that history record.
pub async fn rollback(
    State(app): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<RollbackBody>,
) -> ApiResult<Response> {
    writable_name(&name)?;
    let _guard = CUSTOM_SKILLS_LOCK.lock().await;
    let catalog = app.services.skills.catalog().await;
    if !known_custom(&app, &catalog, &name).await {
        return Err(custom_not_found(&name));
    }
    let records = read_history(&app, &name).await?;
    if records.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Custom skill '{name}' has no history"
        )));
    }
    let len = records.len() as i64;
    let index = if body.history_index < 0 {
        len + body.history_index
    } else {
        body.history_index
    };
    let record = usize::try_from(index)
        .ok()
        .and_then(|i| records.get(i))
        .ok_or_else(|| ApiError::bad_request("history_index is out of range"))?;
    let Some(Value::String(target)) = record.get("prev_content") else {
        return Err(ApiError::bad_request(
            "Selected history entry has no previous content to roll back to",
        ));
    };
    let fm = validate_content(&name, target)?;
    let dir = match catalog_custom(&catalog, &name) {
        Some(s) => s.host_dir.clone(),
        None => custom_root(&app).join(&name),
    };
    if tokio::fs::symlink_metadata(&dir).await.is_ok() && !is_plain_dir(&dir).await {
        return Err(ApiError::conflict(format!(
            "Custom skill '{name}' is not a plain directory and cannot be restored"
        )));
    }
    let current = read_skill_md(&dir).await?;
    write_skill_md(&dir, target).await?;
    append_history(
        &app,
        &name,
        json!({
            "action": "rollback",
            "prev_content": current,
            "new_content": target,
            "rollback_from_ts": record.get("ts").cloned().unwrap_or(Value::Null),
        }),
    )
    .await?;
    let catalog = app.services.skills.reload().await;
    Ok(ok(&content_json(&catalog, &fm, target)))
}
