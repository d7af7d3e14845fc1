//! `/assistants*`.

use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, OptionalJsonBody, Path, Query, uuid_param};
use crate::wire;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use fawn_checkpoint::{
    Assistant, AssistantFilter, AssistantPatch, AssistantQuery, AssistantSort, IfExists, JsonMap,
    NewAssistant, SortOrder, ThreadFilter, ThreadQuery,
};
use fawn_runtime::create::OWNER_KEY;
use serde::Deserialize;
use serde_json::{Value, json};

/// An assistant path id: a UUID, or a graph id standing for its system assistant.
pub fn assistant_path_id(app: &AppState, raw: &str) -> ApiResult<String> {
    if let Some(id) = app.graphs.assistant_for_graph(raw) {
        return Ok(id);
    }
    uuid_param("assistant", raw)
}

async fn load(app: &AppState, raw: &str) -> ApiResult<Assistant> {
    let id = assistant_path_id(app, raw)?;
    match app.store().get_assistant(&id).await {
        Ok(Some(a)) => Ok(a),
        Ok(None) => Err(ApiError::not_found(format!("Assistant {id} not found"))),
        Err(e) => Err(ApiError::store("loading the assistant", e)),
    }
}

/// Mirrors `config.configurable` and `context` when only one of them is given.
fn mirror(config: &mut JsonMap, context: &mut JsonMap) {
    let configurable = match config.get("configurable") {
        Some(Value::Object(m)) => m.clone(),
        _ => JsonMap::new(),
    };
    if context.is_empty() && !configurable.is_empty() {
        *context = configurable;
    } else if configurable.is_empty() && !context.is_empty() {
        config.insert("configurable".into(), Value::Object(context.clone()));
    }
}

fn if_exists(v: Option<&str>) -> ApiResult<IfExists> {
    match v {
        None | Some("raise") => Ok(IfExists::Raise),
        Some("do_nothing") => Ok(IfExists::DoNothing),
        Some(other) => Err(ApiError::unprocessable(format!(
            "Invalid request body at `if_exists`: '{other}' is not one of ['raise', 'do_nothing']"
        ))),
    }
}

pub fn sort_order(v: Option<&str>) -> ApiResult<SortOrder> {
    match v {
        None | Some("desc") | Some("DESC") => Ok(SortOrder::Desc),
        Some("asc") | Some("ASC") => Ok(SortOrder::Asc),
        Some(other) => Err(ApiError::unprocessable(format!(
            "Invalid request body at `sort_order`: '{other}' is not one of ['asc', 'desc']"
        ))),
    }
}

/// Adds `X-Pagination-Total` / `X-Pagination-Next` to a search response.
pub fn paginated(body: Value, total: u64, offset: u64, page_len: usize) -> Response {
    let mut r = wire::ok(&body);
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&total.to_string()) {
        h.insert("x-pagination-total", v);
    }
    let next = offset + page_len as u64;
    if next < total
        && let Ok(v) = HeaderValue::from_str(&next.to_string())
    {
        h.insert("x-pagination-next", v);
    }
    r
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CreateBody {
    graph_id: Option<String>,
    assistant_id: Option<String>,
    config: Option<JsonMap>,
    context: Option<JsonMap>,
    metadata: Option<JsonMap>,
    if_exists: Option<String>,
    name: Option<String>,
    description: Option<String>,
}

/// Whether `principal` may change assistant `id`: a system assistant (one per graph, shared
/// by everyone) only an admin; one a user created, that user or an admin. A missing one
/// passes (the route answers its own 404).
async fn may_change(app: &AppState, principal: &Principal, id: &str) -> ApiResult<()> {
    if principal.scope().is_none() || principal.is_admin() {
        return Ok(());
    }
    let Some(a) = app
        .store()
        .get_assistant(id)
        .await
        .map_err(|e| ApiError::store("loading the assistant", e))?
    else {
        return Ok(());
    };
    let system = a.metadata.get("created_by").and_then(Value::as_str) == Some("system");
    let owner = a.metadata.get(OWNER_KEY).and_then(Value::as_str);
    if system || !principal.owns(owner) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Only an admin or the assistant's creator can change it",
        ));
    }
    Ok(())
}

pub async fn create(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(b): JsonBody<CreateBody>,
) -> ApiResult<Response> {
    let Some(graph_id) = b.graph_id.filter(|g| !g.is_empty()) else {
        return Err(ApiError::unprocessable(
            "Invalid request body: `graph_id` is required",
        ));
    };
    if !app.graphs.contains(&graph_id) {
        return Err(ApiError::not_found(format!(
            "Graph '{graph_id}' not found. Expected one of: {}",
            app.graphs.list_text()
        )));
    }
    let assistant_id = match b.assistant_id.as_deref() {
        Some(id) => Some(uuid_param("assistant", id)?),
        None => None,
    };
    let mut config = b.config.unwrap_or_default();
    let mut context = b.context.unwrap_or_default();
    mirror(&mut config, &mut context);
    let mut metadata = b.metadata.unwrap_or_default();
    if let Some(me) = principal.scope() {
        metadata.insert(OWNER_KEY.into(), json!(me));
        if metadata.get("created_by").and_then(Value::as_str) == Some("system") {
            metadata.remove("created_by");
        }
    }
    let a = app
        .store()
        .create_assistant(NewAssistant {
            assistant_id,
            graph_id,
            config,
            context,
            metadata,
            name: b.name.unwrap_or_else(|| "Untitled".into()),
            description: b.description,
            if_exists: if_exists(b.if_exists.as_deref())?,
        })
        .await
        .map_err(|e| ApiError::store("creating the assistant", e))?;
    Ok(wire::ok(&wire::assistant(&a)))
}

pub async fn get_one(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let a = load(&app, &id).await?;
    Ok(wire::ok(&wire::assistant(&a)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PatchBody {
    graph_id: Option<String>,
    config: Option<JsonMap>,
    context: Option<JsonMap>,
    metadata: Option<JsonMap>,
    name: Option<String>,
    description: Option<Value>,
}

pub async fn patch(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    JsonBody(mut b): JsonBody<PatchBody>,
) -> ApiResult<Response> {
    let id = assistant_path_id(&app, &id)?;
    may_change(&app, &principal, &id).await?;
    if principal.scope().is_some()
        && let Some(m) = &mut b.metadata
    {
        // Who created an assistant is not the caller's to rewrite.
        m.remove(OWNER_KEY);
        m.remove("created_by");
    }
    if let Some(g) = &b.graph_id
        && !app.graphs.contains(g)
    {
        return Err(ApiError::not_found(format!(
            "Graph '{g}' not found. Expected one of: {}",
            app.graphs.list_text()
        )));
    }
    let (config, context) = match (b.config, b.context) {
        (None, None) => (None, None),
        (config, context) => {
            let mut c = config.clone().unwrap_or_default();
            let mut x = context.clone().unwrap_or_default();
            mirror(&mut c, &mut x);
            (Some(c), Some(x))
        }
    };
    let description = match b.description {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(s)) => Some(Some(s)),
        Some(_) => {
            return Err(ApiError::unprocessable(
                "Invalid request body at `description`: must be a string",
            ));
        }
    };
    app.forget_assistant(&id);
    let a = app
        .store()
        .update_assistant(
            &id,
            AssistantPatch {
                graph_id: b.graph_id,
                config,
                context,
                metadata: b.metadata,
                name: b.name,
                description,
            },
        )
        .await
        .map_err(|e| ApiError::store("updating the assistant", e))?;
    app.forget_assistant(&id);
    Ok(wire::ok(&wire::assistant(&a)))
}

pub async fn delete(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    q: Query,
) -> ApiResult<Response> {
    let id = assistant_path_id(&app, &id)?;
    may_change(&app, &principal, &id).await?;
    let delete_threads = q.bool("delete_threads")?.unwrap_or(false);
    if app
        .store()
        .get_assistant(&id)
        .await
        .map_err(|e| ApiError::store("loading the assistant", e))?
        .is_none()
    {
        return Err(ApiError::not_found(format!("Assistant {id} not found")));
    }
    if delete_threads {
        let mut meta = JsonMap::new();
        meta.insert("assistant_id".into(), json!(id));
        // Only the caller's own threads go with it.
        if let Some(me) = principal.scope() {
            meta.insert(OWNER_KEY.into(), json!(me));
        }
        loop {
            let page = app
                .store()
                .search_threads(&ThreadQuery {
                    filter: ThreadFilter {
                        metadata: Some(meta.clone()),
                        ..Default::default()
                    },
                    limit: 100,
                    offset: 0,
                    ..Default::default()
                })
                .await
                .map_err(|e| ApiError::store("listing the assistant's threads", e))?;
            if page.items.is_empty() {
                break;
            }
            for t in &page.items {
                fawn_runtime::threads::delete_thread(&app.rt, &t.thread_id).await?;
            }
        }
    }
    app.forget_assistant(&id);
    app.store()
        .delete_assistant(&id)
        .await
        .map_err(|e| ApiError::store("deleting the assistant", e))?;
    app.forget_assistant(&id);
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SearchBody {
    metadata: Option<JsonMap>,
    graph_id: Option<String>,
    name: Option<String>,
    limit: Option<u64>,
    offset: Option<u64>,
    sort_by: Option<String>,
    sort_order: Option<String>,
    select: Option<Vec<String>>,
}

fn filter_of(
    metadata: Option<JsonMap>,
    graph_id: Option<String>,
    name: Option<String>,
) -> AssistantFilter {
    AssistantFilter {
        metadata,
        graph_id,
        name,
    }
}

pub async fn search(
    State(app): State<AppState>,
    principal: Principal,
    OptionalJsonBody(b): OptionalJsonBody<SearchBody>,
) -> ApiResult<Response> {
    let b = b.unwrap_or_default();
    // Under `/api`, DeerFlow lists the caller's custom agents after the stored assistants.
    let agents = if crate::extract::deerflow_mount() {
        custom_agent_assistants(&app, &principal, &b).await
    } else {
        Vec::new()
    };
    let sort_by = match b.sort_by.as_deref() {
        None | Some("created_at") => AssistantSort::CreatedAt,
        Some("assistant_id") => AssistantSort::AssistantId,
        Some("graph_id") => AssistantSort::GraphId,
        Some("name") => AssistantSort::Name,
        Some("updated_at") => AssistantSort::UpdatedAt,
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `sort_by`: '{other}' is not one of ['assistant_id', 'graph_id', 'name', 'created_at', 'updated_at']"
            )));
        }
    };
    let limit = b.limit.unwrap_or(10).min(1000);
    let offset = b.offset.unwrap_or(0);
    let page = app
        .store()
        .search_assistants(&AssistantQuery {
            filter: filter_of(b.metadata.clone(), b.graph_id.clone(), b.name.clone()),
            limit,
            offset,
            sort_by,
            sort_order: sort_order(b.sort_order.as_deref())?,
        })
        .await
        .map_err(|e| ApiError::store("searching assistants", e))?;
    let select = b.select.unwrap_or_default();
    let mut items: Vec<Value> = page
        .items
        .iter()
        .map(|a| wire::select_keys(wire::assistant(a), &select))
        .collect();
    // The agents come after the stored assistants: index `page.total + i` in the whole list.
    let skip = usize::try_from(offset.saturating_sub(page.total)).unwrap_or(usize::MAX);
    let room = usize::try_from(limit)
        .unwrap_or(usize::MAX)
        .saturating_sub(items.len());
    items.extend(
        agents
            .iter()
            .skip(skip)
            .take(room)
            .map(|a| wire::select_keys(a.clone(), &select)),
    );
    let n = items.len();
    let total = page.total + agents.len() as u64;
    Ok(paginated(Value::Array(items), total, offset, n))
}

/// The caller's custom agents as DeerFlow's assistants search shows them (`assistant_id` =
/// the agent's name, graph `lead_agent`, `metadata.created_by: "user"`), filtered like the
/// stored ones: graph id, name (case-insensitive substring) and metadata.
async fn custom_agent_assistants(
    app: &AppState,
    principal: &Principal,
    b: &SearchBody,
) -> Vec<Value> {
    if b.graph_id
        .as_deref()
        .is_some_and(|g| g != fawn_runtime::LEAD_AGENT)
    {
        return Vec::new();
    }
    let metadata = json!({"created_by": "user"});
    if let Some(m) = &b.metadata
        && m.iter().any(|(k, v)| metadata.get(k) != Some(v))
    {
        return Vec::new();
    }
    let needle = b.name.as_deref().map(str::to_lowercase);
    let now = wire::ts(&chrono::Utc::now());
    crate::gateway::agents::custom_agents(app, principal)
        .await
        .into_iter()
        .filter_map(|a| {
            let name = a.get("name")?.as_str()?.to_string();
            if needle
                .as_deref()
                .is_some_and(|n| !name.to_lowercase().contains(n))
            {
                return None;
            }
            Some(json!({
                "assistant_id": name,
                "graph_id": fawn_runtime::LEAD_AGENT,
                "name": name,
                "config": {},
                "context": {},
                "metadata": metadata,
                "description": a.get("description").cloned().unwrap_or(Value::Null),
                "created_at": now,
                "updated_at": now,
                "version": 1,
            }))
        })
        .collect()
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CountBody {
    metadata: Option<JsonMap>,
    graph_id: Option<String>,
    name: Option<String>,
}

pub async fn count(
    State(app): State<AppState>,
    OptionalJsonBody(b): OptionalJsonBody<CountBody>,
) -> ApiResult<Response> {
    let b = b.unwrap_or_default();
    let n = app
        .store()
        .count_assistants(&filter_of(b.metadata, b.graph_id, b.name))
        .await
        .map_err(|e| ApiError::store("counting assistants", e))?;
    Ok(wire::ok(&n))
}

fn graph_of(
    app: &AppState,
    a: &Assistant,
) -> ApiResult<std::sync::Arc<dyn fawn_agent::GraphRunner>> {
    app.graphs
        .get(&a.graph_id)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("Graph '{}' not found", a.graph_id)))
}

pub async fn graph(
    State(app): State<AppState>,
    Path(id): Path<String>,
    q: Query,
) -> ApiResult<Response> {
    if let Some(x) = q.get("xray")
        && crate::extract::parse_bool(x).is_none()
        && x.trim().parse::<i64>().is_err()
    {
        return Err(ApiError::unprocessable(format!(
            "Invalid value for query parameter `xray`: '{x}' must be a boolean or an integer"
        )));
    }
    let a = load(&app, &id).await?;
    let g = graph_of(&app, &a)?;
    Ok(wire::ok(&g.describe().graph))
}

pub async fn schemas(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let a = load(&app, &id).await?;
    let d = graph_of(&app, &a)?.describe();
    Ok(wire::ok(&json!({
        "graph_id": a.graph_id,
        "input_schema": d.input_schema,
        "output_schema": d.output_schema,
        "state_schema": d.state_schema,
        "config_schema": d.config_schema,
        "context_schema": d.context_schema,
    })))
}

pub async fn subgraphs(
    State(app): State<AppState>,
    Path(id): Path<String>,
    q: Query,
) -> ApiResult<Response> {
    q.bool("recurse")?;
    let a = load(&app, &id).await?;
    graph_of(&app, &a)?;
    Ok(wire::ok(&json!({})))
}

pub async fn subgraphs_ns(
    State(app): State<AppState>,
    Path((id, _ns)): Path<(String, String)>,
    q: Query,
) -> ApiResult<Response> {
    q.bool("recurse")?;
    let a = load(&app, &id).await?;
    graph_of(&app, &a)?;
    Ok(wire::ok(&json!({})))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VersionsBody {
    metadata: Option<JsonMap>,
    limit: Option<u64>,
    offset: Option<u64>,
}

pub async fn versions(
    State(app): State<AppState>,
    Path(id): Path<String>,
    OptionalJsonBody(b): OptionalJsonBody<VersionsBody>,
) -> ApiResult<Response> {
    let b = b.unwrap_or_default();
    let a = load(&app, &id).await?;
    let v = app
        .store()
        .assistant_versions(
            &a.assistant_id,
            b.metadata.as_ref(),
            b.limit.unwrap_or(10).min(1000),
            b.offset.unwrap_or(0),
        )
        .await
        .map_err(|e| ApiError::store("listing versions", e))?;
    let items: Vec<Value> = v.iter().map(wire::assistant_version).collect();
    Ok(wire::ok(&items))
}

#[derive(Debug, Deserialize)]
pub struct LatestBody {
    version: i64,
}

pub async fn latest(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<LatestBody>,
) -> ApiResult<Response> {
    let id = assistant_path_id(&app, &id)?;
    may_change(&app, &principal, &id).await?;
    app.forget_assistant(&id);
    let a = app
        .store()
        .set_latest_version(&id, b.version)
        .await
        .map_err(|e| ApiError::store("setting the version", e))?;
    app.forget_assistant(&id);
    Ok(wire::ok(&wire::assistant(&a)))
}
