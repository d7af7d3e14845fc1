//! `/api/memory` (reference §5.2, §9.4): the user's memory document (DeerMem's JSON shape)
//! from the memory store, fact CRUD, export/import, config and status.
//!
//! Writes go through the store's per-user lock (the same one the extraction queue uses)
//! and its atomic file replace. The store keeps no optimistic revision per client, so
//! concurrent edits do not get DeerFlow's 409: the last write wins.

use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path};
use crate::wire::ok;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use fawn_memory::model::CATEGORIES;
use fawn_memory::{Fact, MemoryData, MemoryError};
use serde::Deserialize;
use serde_json::{Value, json};

fn memory_error(e: MemoryError) -> ApiError {
    match e {
        MemoryError::InvalidUser(u) => ApiError::bad_request(format!("invalid user id '{u}'")),
        MemoryError::Corrupt(m) => ApiError::conflict(format!(
            "the memory file cannot be read ({m}); fix or import it"
        )),
        other => ApiError::internal("memory storage", other),
    }
}

fn data_json(d: &MemoryData) -> Value {
    serde_json::to_value(d).unwrap_or_else(|_| json!({}))
}

/// `GET /api/memory` (also `POST /api/memory/reload`: nothing is cached, so it reads again).
pub async fn get(State(app): State<AppState>, principal: Principal) -> ApiResult<Response> {
    let d = app
        .services
        .memory_store
        .load(&principal.data_user(&app))
        .await
        .map_err(memory_error)?;
    Ok(ok(&data_json(&d)))
}

/// `DELETE /api/memory`: forgets everything (the revision keeps counting).
pub async fn clear(State(app): State<AppState>, principal: Principal) -> ApiResult<Response> {
    let d = app
        .services
        .memory_store
        .update(&principal.data_user(&app), |d| {
            let revision = d.revision;
            *d = MemoryData::default();
            d.revision = revision;
            true
        })
        .await
        .map_err(memory_error)?;
    Ok(ok(&data_json(&d)))
}

fn check_category(c: &str) -> ApiResult<()> {
    if CATEGORIES.contains(&c) || c == "other" {
        Ok(())
    } else {
        Err(ApiError::unprocessable(format!(
            "Invalid category '{c}': expected one of {}, other",
            CATEGORIES.join(", ")
        )))
    }
}

fn check_confidence(c: f64) -> ApiResult<()> {
    if (0.0..=1.0).contains(&c) {
        Ok(())
    } else {
        Err(ApiError::unprocessable(
            "Invalid confidence: must be between 0 and 1",
        ))
    }
}

fn check_content(c: &str) -> ApiResult<String> {
    let t = c.trim();
    if t.is_empty() {
        return Err(ApiError::unprocessable("Fact content cannot be empty"));
    }
    if t.chars().count() > 2000 {
        return Err(ApiError::unprocessable(
            "Fact content is too long (at most 2000 characters)",
        ));
    }
    Ok(t.to_string())
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[derive(Debug, Deserialize)]
pub struct NewFact {
    content: String,
    #[serde(default = "default_category")]
    category: String,
    #[serde(default = "default_confidence")]
    confidence: f64,
}

fn default_category() -> String {
    "context".into()
}

fn default_confidence() -> f64 {
    0.5
}

/// `POST /api/memory/facts` `{content, category="context", confidence=0.5}`.
pub async fn add_fact(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody<NewFact>,
) -> ApiResult<Response> {
    let content = check_content(&body.content)?;
    check_category(&body.category)?;
    check_confidence(body.confidence)?;
    let fact = Fact {
        id: format!("fact_{}", uuid::Uuid::new_v4().simple()),
        content,
        category: body.category,
        confidence: body.confidence,
        created_at: now(),
        source: "manual".into(),
        ..Default::default()
    };
    let d = app
        .services
        .memory_store
        .update(&principal.data_user(&app), move |d| {
            d.facts.push(fact);
            true
        })
        .await
        .map_err(memory_error)?;
    Ok(ok(&data_json(&d)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct FactPatch {
    content: Option<String>,
    category: Option<String>,
    confidence: Option<f64>,
}

/// `PATCH /api/memory/facts/{id}`.
pub async fn patch_fact(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<FactPatch>,
) -> ApiResult<Response> {
    let content = body.content.as_deref().map(check_content).transpose()?;
    if let Some(c) = &body.category {
        check_category(c)?;
    }
    if let Some(c) = body.confidence {
        check_confidence(c)?;
    }
    let mut found = false;
    let d = app
        .services
        .memory_store
        .update(&principal.data_user(&app), |d| {
            let Some(f) = d.facts.iter_mut().find(|f| f.id == id) else {
                return false;
            };
            found = true;
            if let Some(c) = content {
                f.content = c;
            }
            if let Some(c) = body.category {
                f.category = c;
            }
            if let Some(c) = body.confidence {
                f.confidence = c;
            }
            f.updated_at = Some(now());
            true
        })
        .await
        .map_err(memory_error)?;
    if !found {
        return Err(ApiError::not_found(format!("Fact '{id}' not found")));
    }
    Ok(ok(&data_json(&d)))
}

/// `DELETE /api/memory/facts/{id}`.
pub async fn delete_fact(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let mut found = false;
    let d = app
        .services
        .memory_store
        .update(&principal.data_user(&app), |d| {
            let before = d.facts.len();
            d.facts.retain(|f| f.id != id);
            found = d.facts.len() != before;
            found
        })
        .await
        .map_err(memory_error)?;
    if !found {
        return Err(ApiError::not_found(format!("Fact '{id}' not found")));
    }
    Ok(ok(&data_json(&d)))
}

/// `GET /api/memory/export`: the document, as a download.
pub async fn export(State(app): State<AppState>, principal: Principal) -> ApiResult<Response> {
    let d = app
        .services
        .memory_store
        .load(&principal.data_user(&app))
        .await
        .map_err(memory_error)?;
    let mut r = ok(&data_json(&d));
    r.headers_mut().insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"memory.json\""),
    );
    Ok(r)
}

/// `POST /api/memory/import`: replaces the document with a MemoryResponse-shaped one
/// (validated: categories, confidences, non-empty unique fact ids).
pub async fn import(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(mut body): JsonBody<MemoryData>,
) -> ApiResult<Response> {
    let mut ids = std::collections::HashSet::new();
    for (i, f) in body.facts.iter_mut().enumerate() {
        if f.content.trim().is_empty() {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `facts[{i}].content`: cannot be empty"
            )));
        }
        if f.category.is_empty() {
            f.category = default_category();
        }
        check_category(&f.category)?;
        check_confidence(f.confidence)?;
        if f.id.trim().is_empty() {
            f.id = format!("fact_{}", uuid::Uuid::new_v4().simple());
        }
        if !ids.insert(f.id.clone()) {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `facts[{i}].id`: duplicate fact id '{}'",
                f.id
            )));
        }
    }
    let d = app
        .services
        .memory_store
        .update(&principal.data_user(&app), move |d| {
            let revision = d.revision;
            *d = body;
            d.revision = revision;
            true
        })
        .await
        .map_err(memory_error)?;
    Ok(ok(&data_json(&d)))
}

fn config_json(app: &AppState) -> Value {
    let m = &app.settings.app.memory;
    json!({
        "enabled": m.enabled,
        "running": app.services.memory.is_some(),
        "mode": m.mode,
        "injection_enabled": m.injection_enabled,
        "shutdown_flush_timeout_seconds": m.shutdown_flush_timeout_seconds,
        "manager_class": m.manager_class,
        "debounce_seconds": m.debounce_seconds,
        "max_facts": m.max_facts,
        "fact_confidence_threshold": m.fact_confidence_threshold,
        "max_injection_tokens": m.max_injection_tokens,
        "backend_config": m.backend_config,
    })
}

/// `GET /api/memory/config`.
pub async fn config(State(app): State<AppState>) -> Response {
    ok(&config_json(&app))
}

/// `GET /api/memory/status`: `{config, data}` (+ queue counters when memory runs).
pub async fn status(State(app): State<AppState>, principal: Principal) -> ApiResult<Response> {
    let d = app
        .services
        .memory_store
        .load(&principal.data_user(&app))
        .await
        .map_err(memory_error)?;
    let queue = app.services.memory.as_ref().map(|m| {
        let s = m.queue.stats();
        json!({
            "pending": m.queue.pending_count(),
            "enqueued": s.enqueued,
            "processed": s.processed,
            "failed": s.failed,
            "dropped": s.dropped,
        })
    });
    Ok(ok(&json!({
        "config": config_json(&app),
        "data": data_json(&d),
        "queue": queue,
    })))
}
