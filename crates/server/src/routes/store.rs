//! `/store/*`: the long-term key/value store. With authentication on, each user has a
//! store of their own: namespaces are kept under `["~users", <user id>]`, added on the way in
//! and removed on the way out, so clients see only their own namespaces, as they wrote them.

use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, OptionalJsonBody, Query};
use crate::wire;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fawn_checkpoint::{ItemQuery, JsonMap, NamespaceQuery, PutItem};
use serde::Deserialize;
use serde_json::{Value, json};

/// Namespace labels and keys are stored as text, which cannot hold U+0000 on Postgres:
/// refused on every backend, so that what one accepts the other does too.
fn check_no_nul<'a>(texts: impl IntoIterator<Item = &'a String>, field: &str) -> ApiResult<()> {
    if texts.into_iter().any(|t| t.contains('\0')) {
        return Err(ApiError::unprocessable(format!(
            "Invalid request body at `{field}`: cannot contain NUL characters"
        )));
    }
    Ok(())
}

/// The labels the caller's namespaces are kept under (none with authentication off).
fn scope(principal: &Principal) -> Vec<String> {
    match principal.scope() {
        Some(id) => vec!["~users".to_string(), id.to_string()],
        None => Vec::new(),
    }
}

fn within(scope: &[String], ns: Vec<String>) -> Vec<String> {
    let mut out = scope.to_vec();
    out.extend(ns);
    out
}

fn outside(scope: &[String], mut ns: Vec<String>) -> Vec<String> {
    if ns.starts_with(scope) {
        ns.drain(..scope.len());
    }
    ns
}

fn item_json(scope: &[String], item: &fawn_checkpoint::Item) -> Value {
    let mut v = wire::item(item);
    if !scope.is_empty()
        && let Some(Value::Array(ns)) = v.get_mut("namespace")
    {
        ns.drain(..scope.len().min(ns.len()));
    }
    v
}

fn check_namespace(ns: &[String], field: &str) -> ApiResult<()> {
    check_no_nul(ns, field)?;
    for label in ns {
        if label.is_empty() {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `{field}`: namespace labels cannot be empty"
            )));
        }
        if label.contains('.') {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `{field}`: namespace labels cannot contain periods ('.'), got '{label}'"
            )));
        }
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
pub struct PutBody {
    namespace: Vec<String>,
    key: String,
    value: Value,
    #[serde(default)]
    #[allow(dead_code)]
    index: Option<Value>,
    #[serde(default)]
    ttl: Option<f64>,
}

pub async fn put_item(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(b): JsonBody<PutBody>,
) -> ApiResult<Response> {
    check_namespace(&b.namespace, "namespace")?;
    if b.namespace.is_empty() {
        return Err(ApiError::unprocessable(
            "Invalid request body at `namespace`: must not be empty",
        ));
    }
    if b.key.is_empty() {
        return Err(ApiError::unprocessable(
            "Invalid request body at `key`: must not be empty",
        ));
    }
    check_no_nul([&b.key], "key")?;
    let Value::Object(value) = b.value else {
        return Err(ApiError::unprocessable(
            "Invalid request body at `value`: must be an object",
        ));
    };
    if let Some(t) = b.ttl
        && !fawn_checkpoint::valid_ttl_minutes(t)
    {
        return Err(ApiError::unprocessable(format!(
            "Invalid request body at `ttl`: {}",
            crate::routes::threads::TTL_RULE
        )));
    }
    app.store()
        .put_item(PutItem {
            namespace: within(&scope(&principal), b.namespace),
            key: b.key,
            value,
            ttl_minutes: b.ttl,
        })
        .await
        .map_err(|e| ApiError::store("storing the item", e))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn get_item(
    State(app): State<AppState>,
    principal: Principal,
    q: Query,
) -> ApiResult<Response> {
    let ns: Vec<String> = match q.get("namespace") {
        None | Some("") => Vec::new(),
        Some(s) => s.split('.').map(str::to_string).collect(),
    };
    let Some(key) = q.get("key").filter(|k| !k.is_empty()) else {
        return Err(ApiError::unprocessable("Missing query parameter `key`"));
    };
    if ns.iter().any(|l| l.contains('\0')) || key.contains('\0') {
        return Err(ApiError::unprocessable(
            "Invalid query parameters `namespace`, `key`: cannot contain NUL characters",
        ));
    }
    let refresh = q.bool("refresh_ttl")?.unwrap_or(true);
    let scope = scope(&principal);
    let item = app
        .store()
        .get_item(&within(&scope, ns), key, refresh)
        .await
        .map_err(|e| ApiError::store("loading the item", e))?;
    Ok(match item {
        Some(i) => wire::ok(&item_json(&scope, &i)),
        None => wire::ok(&Value::Null),
    })
}

#[derive(Debug, Deserialize)]
pub struct DeleteBody {
    #[serde(default)]
    namespace: Vec<String>,
    key: String,
}

pub async fn delete_item(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(b): JsonBody<DeleteBody>,
) -> ApiResult<Response> {
    check_namespace(&b.namespace, "namespace")?;
    check_no_nul([&b.key], "key")?;
    app.store()
        .delete_item(&within(&scope(&principal), b.namespace), &b.key)
        .await
        .map_err(|e| ApiError::store("deleting the item", e))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SearchBody {
    namespace_prefix: Vec<String>,
    filter: Option<JsonMap>,
    limit: Option<u64>,
    offset: Option<u64>,
    #[allow(dead_code)]
    query: Option<String>,
    refresh_ttl: Option<bool>,
}

pub async fn search(
    State(app): State<AppState>,
    principal: Principal,
    OptionalJsonBody(b): OptionalJsonBody<SearchBody>,
) -> ApiResult<Response> {
    let b = b.unwrap_or_default();
    check_namespace(&b.namespace_prefix, "namespace_prefix")?;
    let scope = scope(&principal);
    let items = app
        .store()
        .search_items(&ItemQuery {
            namespace_prefix: within(&scope, b.namespace_prefix),
            filter: b.filter,
            limit: b.limit.unwrap_or(10).min(1000),
            offset: b.offset.unwrap_or(0),
            refresh_ttl: b.refresh_ttl.unwrap_or(false),
        })
        .await
        .map_err(|e| ApiError::store("searching items", e))?;
    let out: Vec<Value> = items
        .iter()
        .map(|i| {
            let mut v = item_json(&scope, i);
            if let Value::Object(m) = &mut v {
                m.insert("score".into(), Value::Null);
            }
            v
        })
        .collect();
    Ok(wire::ok(&json!({"items": out})))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NamespacesBody {
    prefix: Option<Vec<String>>,
    suffix: Option<Vec<String>>,
    max_depth: Option<usize>,
    limit: Option<u64>,
    offset: Option<u64>,
}

pub async fn namespaces(
    State(app): State<AppState>,
    principal: Principal,
    OptionalJsonBody(b): OptionalJsonBody<NamespacesBody>,
) -> ApiResult<Response> {
    let b = b.unwrap_or_default();
    check_no_nul(b.prefix.iter().flatten(), "prefix")?;
    check_no_nul(b.suffix.iter().flatten(), "suffix")?;
    let scope = scope(&principal);
    let prefix = match (b.prefix, scope.is_empty()) {
        (p, true) => p,
        (p, false) => Some(within(&scope, p.unwrap_or_default())),
    };
    let ns = app
        .store()
        .list_namespaces(&NamespaceQuery {
            prefix,
            suffix: b.suffix,
            max_depth: b.max_depth.map(|d| d.saturating_add(scope.len())),
            limit: b.limit.unwrap_or(100).min(1000),
            offset: b.offset.unwrap_or(0),
        })
        .await
        .map_err(|e| ApiError::store("listing namespaces", e))?;
    let ns: Vec<Vec<String>> = ns.into_iter().map(|n| outside(&scope, n)).collect();
    Ok(wire::ok(&json!({"namespaces": ns})))
}
