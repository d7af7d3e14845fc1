//! `GET /api/skills`, `GET|PUT /api/skills/{name}`, `POST /api/skills/reload` (reference
//! §7, §9.4), over the cached catalog. `PUT {enabled}` writes `skills.<name>.enabled` into
//! `extensions_config.json` atomically; the catalog, the prompt of the next run and the
//! sandbox's `/mnt/skills` follow at once. Installing `.skill` archives and editing custom
//! skills are not implemented.

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path};
use crate::wire::ok;
use axum::extract::State;
use axum::response::Response;
use fawn_tools::skills::{Skill, SkillCategory};
use serde::Deserialize;
use serde_json::{Map, Value, json};

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
