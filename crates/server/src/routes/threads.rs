//! `/threads*`: CRUD, search, copy, prune, state, history.

use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, OptionalJsonBody, Path, Query, header_str, uuid_param};
use crate::routes::assistants::{paginated, sort_order};
use crate::wire;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use fawn_checkpoint::{
    Checkpoint, HistoryQuery, IfExists, JsonMap, NewThread, PruneStrategy, Thread, ThreadFilter,
    ThreadPatch, ThreadQuery, ThreadSort, ThreadStatus, ThreadTtl, valid_ttl_minutes,
};
use fawn_runtime::create::OWNER_KEY;
use serde::Deserialize;
use serde_json::{Map, Value, json};

pub fn thread_not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("Thread with ID {id} not found"))
}

pub async fn load_thread(app: &AppState, id: &str) -> ApiResult<Thread> {
    match app.store().get_thread(id).await {
        Ok(Some(t)) => Ok(t),
        Ok(None) => Err(thread_not_found(id)),
        Err(e) => Err(ApiError::store("loading the thread", e)),
    }
}

/// What a TTL must be (threads and store items), for 422 messages.
pub const TTL_RULE: &str = "must be a positive number of minutes, at most 52596000 (100 years)";

fn parse_ttl(v: &Option<Value>) -> ApiResult<Option<ThreadTtl>> {
    let strategy = |s: Option<&str>| match s {
        None | Some("delete") => Ok(PruneStrategy::Delete),
        Some("keep_latest") => Ok(PruneStrategy::KeepLatest),
        Some(o) => Err(ApiError::unprocessable(format!(
            "Invalid request body at `ttl.strategy`: '{o}' is not one of ['delete', 'keep_latest']"
        ))),
    };
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64().filter(|m| valid_ttl_minutes(*m)) {
            Some(m) => Ok(Some(ThreadTtl {
                minutes: m,
                strategy: PruneStrategy::Delete,
            })),
            None => Err(ApiError::unprocessable(format!(
                "Invalid request body at `ttl`: {TTL_RULE}"
            ))),
        },
        Some(Value::Object(o)) => {
            let minutes = o
                .get("ttl")
                .and_then(Value::as_f64)
                .filter(|m| valid_ttl_minutes(*m));
            let Some(minutes) = minutes else {
                return Err(ApiError::unprocessable(format!(
                    "Invalid request body at `ttl.ttl`: {TTL_RULE}"
                )));
            };
            Ok(Some(ThreadTtl {
                minutes,
                strategy: strategy(o.get("strategy").and_then(Value::as_str))?,
            }))
        }
        Some(_) => Err(ApiError::unprocessable(
            "Invalid request body at `ttl`: must be an object {ttl, strategy}",
        )),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CreateBody {
    thread_id: Option<String>,
    metadata: Option<JsonMap>,
    if_exists: Option<String>,
    ttl: Option<Value>,
    supersteps: Option<Vec<Superstep>>,
    graph_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Superstep {
    #[serde(default)]
    updates: Vec<SuperstepUpdate>,
}

#[derive(Debug, Default, Deserialize)]
pub struct SuperstepUpdate {
    #[serde(default)]
    values: Value,
    #[serde(default)]
    as_node: Option<String>,
}

/// `metadata` with the caller stamped as the owner (when data is per user): a client can
/// neither choose nor change who a thread belongs to.
fn owned_metadata(principal: &Principal, metadata: Option<JsonMap>) -> Option<JsonMap> {
    let Some(me) = principal.scope() else {
        return metadata;
    };
    let mut m = metadata.unwrap_or_default();
    m.insert(OWNER_KEY.into(), json!(me));
    Some(m)
}

/// A search filter restricted to the caller's threads; `None` when it names another owner
/// (it can match nothing).
fn owned_filter(principal: &Principal, metadata: Option<JsonMap>) -> Option<Option<JsonMap>> {
    if let (Some(me), Some(m)) = (principal.scope(), &metadata)
        && m.get(OWNER_KEY).is_some_and(|o| o.as_str() != Some(me))
    {
        return None;
    }
    Some(owned_metadata(principal, metadata))
}

pub async fn create(
    State(app): State<AppState>,
    principal: Principal,
    OptionalJsonBody(b): OptionalJsonBody<CreateBody>,
) -> ApiResult<Response> {
    let b = b.unwrap_or_default();
    let thread_id = match b.thread_id.as_deref() {
        Some(id) => Some(uuid_param("thread", id)?),
        None => None,
    };
    let if_exists = match b.if_exists.as_deref() {
        None | Some("raise") => IfExists::Raise,
        Some("do_nothing") => IfExists::DoNothing,
        Some(o) => {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `if_exists`: '{o}' is not one of ['raise', 'do_nothing']"
            )));
        }
    };
    if let (Some(id), Some(_)) = (&thread_id, principal.scope())
        && let Some(existing) = app
            .store()
            .get_thread(id)
            .await
            .map_err(|e| ApiError::store("loading the thread", e))?
        && !principal.owns_thread(&existing.metadata)
    {
        // Someone else's: never returned (`do_nothing`), only said to exist.
        return Err(ApiError::conflict(format!("Thread {id} already exists")));
    }
    let mut metadata = owned_metadata(&principal, b.metadata).unwrap_or_default();
    if let Some(g) = b.graph_id {
        metadata.insert("graph_id".into(), json!(g));
    }
    let ttl = parse_ttl(&b.ttl)?;
    let supersteps = b
        .supersteps
        .unwrap_or_default()
        .into_iter()
        .flat_map(|step| step.updates)
        .map(|u| fawn_runtime::threads::StateWrite {
            values: u.values,
            as_node: u.as_node,
        })
        .collect();
    let t = fawn_runtime::threads::create_thread(
        &app,
        NewThread {
            thread_id,
            metadata,
            if_exists,
            ttl,
        },
        supersteps,
    )
    .await?;
    Ok(wire::ok(&wire::thread(&t)))
}

pub async fn get_one(
    State(app): State<AppState>,
    Path(id): Path<String>,
    q: Query,
) -> ApiResult<Response> {
    let id = uuid_param("thread", &id)?;
    let t = load_thread(&app, &id).await?;
    let include_ttl = q.list(&["include"]).iter().any(|i| i == "ttl");
    Ok(wire::ok(&if include_ttl {
        wire::thread_with_ttl(&t)
    } else {
        wire::thread(&t)
    }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PatchBody {
    metadata: Option<JsonMap>,
    ttl: Option<Value>,
}

pub async fn patch(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<PatchBody>,
) -> ApiResult<Response> {
    let id = uuid_param("thread", &id)?;
    let metadata = match b.metadata {
        Some(m) if principal.scope().is_some() => owned_metadata(&principal, Some(m)),
        other => other,
    };
    let t = app
        .store()
        .update_thread(
            &id,
            ThreadPatch {
                metadata,
                ttl: parse_ttl(&b.ttl)?,
            },
        )
        .await
        .map_err(|e| match e {
            fawn_checkpoint::StoreError::NotFound(_) => thread_not_found(&id),
            other => ApiError::store("updating the thread", other),
        })?;
    let minimal = header_str(&headers, "prefer").is_some_and(|p| p.contains("return=minimal"));
    if minimal {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Ok(wire::ok(&wire::thread(&t)))
}

pub async fn delete(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = uuid_param("thread", &id)?;
    if !fawn_runtime::threads::delete_thread(&app.rt, &id).await? {
        return Err(thread_not_found(&id));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SearchBody {
    metadata: Option<JsonMap>,
    values: Option<JsonMap>,
    ids: Option<Vec<String>>,
    status: Option<String>,
    limit: Option<u64>,
    offset: Option<u64>,
    sort_by: Option<String>,
    sort_order: Option<String>,
    select: Option<Vec<String>>,
    extract: Option<Map<String, Value>>,
}

fn status_filter(s: Option<&str>) -> ApiResult<Option<ThreadStatus>> {
    match s {
        None => Ok(None),
        Some(s) => ThreadStatus::parse(s).map(Some).ok_or_else(|| {
            ApiError::unprocessable(format!(
                "Invalid request body at `status`: '{s}' is not one of ['idle', 'busy', 'interrupted', 'error']"
            ))
        }),
    }
}

fn ids_filter(ids: Option<Vec<String>>) -> ApiResult<Option<Vec<String>>> {
    match ids {
        None => Ok(None),
        Some(v) => v
            .iter()
            .map(|i| uuid_param("thread", i))
            .collect::<ApiResult<Vec<_>>>()
            .map(Some),
    }
}

/// Evaluates `values.messages[-1]`-style paths (dots and `[i]`, negative indexes).
fn extract_path(v: &Value, path: &str) -> Value {
    let mut cur = v;
    for part in path.split('.') {
        let (key, rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            match cur.get(key) {
                Some(x) => cur = x,
                None => return Value::Null,
            }
        }
        let mut r = rest;
        while let Some(end) = r.find(']') {
            let idx = r[1..end].trim().parse::<i64>().ok();
            let Some(idx) = idx else { return Value::Null };
            let Some(arr) = cur.as_array() else {
                return Value::Null;
            };
            let i = if idx < 0 { arr.len() as i64 + idx } else { idx };
            match usize::try_from(i).ok().and_then(|i| arr.get(i)) {
                Some(x) => cur = x,
                None => return Value::Null,
            }
            r = &r[end + 1..];
        }
    }
    cur.clone()
}

pub async fn search(
    State(app): State<AppState>,
    principal: Principal,
    OptionalJsonBody(b): OptionalJsonBody<SearchBody>,
) -> ApiResult<Response> {
    let b = b.unwrap_or_default();
    let sort_by = match b.sort_by.as_deref() {
        None | Some("created_at") => ThreadSort::CreatedAt,
        Some("thread_id") => ThreadSort::ThreadId,
        Some("status") => ThreadSort::Status,
        Some("updated_at") => ThreadSort::UpdatedAt,
        Some("state_updated_at") => ThreadSort::StateUpdatedAt,
        Some(o) => {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `sort_by`: '{o}' is not one of ['thread_id', 'status', 'created_at', 'updated_at', 'state_updated_at']"
            )));
        }
    };
    const SELECTABLE: &[&str] = &[
        "thread_id",
        "created_at",
        "updated_at",
        "state_updated_at",
        "metadata",
        "config",
        "context",
        "status",
        "values",
        "interrupts",
        "error",
    ];
    let select = b.select.unwrap_or_default();
    if let Some(bad) = select.iter().find(|s| !SELECTABLE.contains(&s.as_str())) {
        return Err(ApiError::unprocessable(format!(
            "Invalid request body at `select`: '{bad}' is not one of {SELECTABLE:?}"
        )));
    }
    let extract = b.extract.unwrap_or_default();
    if extract.len() > 10 {
        return Err(ApiError::unprocessable(
            "Invalid request body at `extract`: at most 10 paths",
        ));
    }
    let limit = b.limit.unwrap_or(10).min(1000);
    let offset = b.offset.unwrap_or(0);
    let Some(metadata) = owned_filter(&principal, b.metadata) else {
        return Ok(paginated(Value::Array(Vec::new()), 0, offset, 0));
    };
    let page = app
        .store()
        .search_threads(&ThreadQuery {
            filter: ThreadFilter {
                metadata,
                values: b.values,
                status: status_filter(b.status.as_deref())?,
                ids: ids_filter(b.ids)?,
            },
            limit,
            offset,
            sort_by,
            sort_order: sort_order(b.sort_order.as_deref())?,
        })
        .await
        .map_err(|e| ApiError::store("searching threads", e))?;
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|t| {
            let full = wire::thread(t);
            let extracted = if extract.is_empty() {
                None
            } else {
                let mut m = Map::new();
                for (alias, path) in &extract {
                    m.insert(
                        alias.clone(),
                        extract_path(&full, path.as_str().unwrap_or_default()),
                    );
                }
                Some(Value::Object(m))
            };
            let mut v = wire::select_keys(full, &select);
            if let (Some(e), Value::Object(m)) = (extracted, &mut v) {
                m.insert("extracted".into(), e);
            }
            v
        })
        .collect();
    let n = items.len();
    Ok(paginated(Value::Array(items), page.total, offset, n))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CountBody {
    metadata: Option<JsonMap>,
    values: Option<JsonMap>,
    status: Option<String>,
}

pub async fn count(
    State(app): State<AppState>,
    principal: Principal,
    OptionalJsonBody(b): OptionalJsonBody<CountBody>,
) -> ApiResult<Response> {
    let b = b.unwrap_or_default();
    let Some(metadata) = owned_filter(&principal, b.metadata) else {
        return Ok(wire::ok(&0));
    };
    let n = app
        .store()
        .count_threads(&ThreadFilter {
            metadata,
            values: b.values,
            status: status_filter(b.status.as_deref())?,
            ids: None,
        })
        .await
        .map_err(|e| ApiError::store("counting threads", e))?;
    Ok(wire::ok(&n))
}

pub async fn copy(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = uuid_param("thread", &id)?;
    load_thread(&app, &id).await?;
    let t = fawn_runtime::threads::copy_thread(&app, &id).await?;
    Ok(wire::ok(&wire::thread(&t)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PruneBody {
    thread_ids: Vec<String>,
    strategy: Option<String>,
}

pub async fn prune(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(b): JsonBody<PruneBody>,
) -> ApiResult<Response> {
    let strategy = match b.strategy.as_deref() {
        None | Some("delete") => PruneStrategy::Delete,
        Some("keep_latest") => PruneStrategy::KeepLatest,
        Some(o) => {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `strategy`: '{o}' is not one of ['delete', 'keep_latest']"
            )));
        }
    };
    let ids = b
        .thread_ids
        .iter()
        .map(|i| uuid_param("thread", i))
        .collect::<ApiResult<Vec<_>>>()?;
    // Only the caller's own threads are pruned; others' ids are skipped like missing ones.
    let mut owned = Vec::with_capacity(ids.len());
    for id in ids {
        if crate::authz::owns_thread(&app, &principal, &id)
            .await
            .is_ok()
        {
            owned.push(id);
        }
    }
    let ids = owned;
    let n = fawn_runtime::threads::prune_threads(&app, &ids, strategy).await?;
    Ok(wire::ok(&json!({"pruned_count": n})))
}

// ------------------------------------------------------------------------------- state

fn state_json(cp: Option<&Checkpoint>) -> Value {
    match cp {
        Some(c) => wire::thread_state(c),
        None => wire::empty_thread_state(),
    }
}

pub async fn get_state(
    State(app): State<AppState>,
    Path(id): Path<String>,
    q: Query,
) -> ApiResult<Response> {
    let id = uuid_param("thread", &id)?;
    q.bool("subgraphs")?;
    load_thread(&app, &id).await?;
    let cp = app
        .store()
        .get_checkpoint(&id, "", None)
        .await
        .map_err(|e| ApiError::store("loading the state", e))?;
    Ok(wire::ok(&state_json(cp.as_ref())))
}

async fn state_at(app: &AppState, id: &str, ns: &str, checkpoint_id: &str) -> ApiResult<Response> {
    load_thread(app, id).await?;
    let cp = app
        .store()
        .get_checkpoint(id, ns, Some(checkpoint_id))
        .await
        .map_err(|e| ApiError::store("loading the state", e))?;
    let Some(c) = cp else {
        return Err(ApiError::not_found(format!(
            "Checkpoint {checkpoint_id} not found"
        )));
    };
    // A past checkpoint's tasks may have run since: they carry that step's writes.
    let ran = if c.tasks.is_empty() {
        None
    } else {
        app.store()
            .step_writes(id, ns, checkpoint_id)
            .await
            .map_err(|e| ApiError::store("loading the state", e))?
    };
    Ok(wire::ok(&wire::thread_state_with(&c, ran.as_deref())))
}

pub async fn state_at_checkpoint(
    State(app): State<AppState>,
    Path((id, checkpoint_id)): Path<(String, String)>,
    q: Query,
) -> ApiResult<Response> {
    let id = uuid_param("thread", &id)?;
    q.bool("subgraphs")?;
    state_at(&app, &id, "", &checkpoint_id).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CheckpointRef {
    checkpoint_id: Option<String>,
    checkpoint_ns: Option<String>,
    #[allow(dead_code)]
    checkpoint_map: Option<Value>,
    #[allow(dead_code)]
    thread_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StateAtBody {
    checkpoint: CheckpointRef,
    #[allow(dead_code)]
    subgraphs: Option<bool>,
}

pub async fn state_at_checkpoint_post(
    State(app): State<AppState>,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<StateAtBody>,
) -> ApiResult<Response> {
    let id = uuid_param("thread", &id)?;
    let ns = b.checkpoint.checkpoint_ns.unwrap_or_default();
    match b.checkpoint.checkpoint_id {
        Some(cid) => state_at(&app, &id, &ns, &cid).await,
        None => {
            load_thread(&app, &id).await?;
            let cp = app
                .store()
                .get_checkpoint(&id, &ns, None)
                .await
                .map_err(|e| ApiError::store("loading the state", e))?;
            Ok(wire::ok(&state_json(cp.as_ref())))
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UpdateStateBody {
    values: Value,
    as_node: Option<String>,
    checkpoint: Option<CheckpointRef>,
    checkpoint_id: Option<String>,
}

pub async fn update_state(
    State(app): State<AppState>,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<UpdateStateBody>,
) -> ApiResult<Response> {
    let id = uuid_param("thread", &id)?;
    let thread = load_thread(&app, &id).await?;
    let (ns, cid) = match (&b.checkpoint, &b.checkpoint_id) {
        (Some(c), _) if c.checkpoint_id.is_some() => (
            c.checkpoint_ns.clone().unwrap_or_default(),
            c.checkpoint_id.clone(),
        ),
        (_, Some(cid)) => (String::new(), Some(cid.clone())),
        (Some(c), None) => (c.checkpoint_ns.clone().unwrap_or_default(), None),
        (None, None) => (String::new(), None),
    };
    let base = cid.map(|c| (ns.clone(), c));
    let new_id =
        fawn_runtime::threads::update_state(&app, &thread, b.values, b.as_node, base).await?;
    let r = wire::checkpoint_ref(&id, &ns, &new_id);
    Ok(wire::ok(&json!({
        "checkpoint": r,
        "configurable": r,
        "checkpoint_id": new_id,
    })))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PatchStateBody {
    metadata: JsonMap,
}

pub async fn patch_state(
    State(app): State<AppState>,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<PatchStateBody>,
) -> ApiResult<Response> {
    let id = uuid_param("thread", &id)?;
    load_thread(&app, &id).await?;
    fawn_runtime::threads::patch_state_metadata(&app, &id, &b.metadata).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----------------------------------------------------------------------------- history

/// `before`: a checkpoint id, a Checkpoint object, or `{configurable: {checkpoint_id}}`.
fn before_id(v: &Value) -> ApiResult<Option<String>> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Object(o) => {
            let id = o
                .get("checkpoint_id")
                .or_else(|| o.get("configurable").and_then(|c| c.get("checkpoint_id")));
            match id {
                Some(Value::String(s)) => Ok(Some(s.clone())),
                None | Some(Value::Null) => Ok(None),
                Some(_) => Err(ApiError::unprocessable(
                    "Invalid request body at `before`: checkpoint_id must be a string",
                )),
            }
        }
        _ => Err(ApiError::unprocessable(
            "Invalid request body at `before`: must be a checkpoint id or a checkpoint object",
        )),
    }
}

async fn history(
    app: &AppState,
    id: &str,
    limit: u64,
    before: Option<String>,
    metadata: Option<JsonMap>,
    ns: String,
) -> ApiResult<Response> {
    load_thread(app, id).await?;
    let items = app
        .store()
        .list_checkpoints(
            id,
            &HistoryQuery {
                checkpoint_ns: ns,
                limit: limit.min(1000),
                before,
                metadata,
            },
        )
        .await
        .map_err(|e| ApiError::store("loading the history", e))?;
    if crate::extract::deerflow_mount() {
        return Ok(wire::ok(&wire::deerflow_history(&items)));
    }
    Ok(wire::ok(&wire::history(&items)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct HistoryBody {
    limit: Option<u64>,
    before: Value,
    metadata: Option<JsonMap>,
    checkpoint: Option<CheckpointRef>,
}

pub async fn history_post(
    State(app): State<AppState>,
    Path(id): Path<String>,
    OptionalJsonBody(b): OptionalJsonBody<HistoryBody>,
) -> ApiResult<Response> {
    let id = uuid_param("thread", &id)?;
    let b = b.unwrap_or_default();
    // DeerFlow's gateway takes 1..=100 entries.
    if crate::extract::deerflow_mount() && b.limit.is_some_and(|l| !(1..=100).contains(&l)) {
        return Err(ApiError::unprocessable(
            "Invalid request body at `limit`: must be between 1 and 100",
        ));
    }
    let before = before_id(&b.before)?;
    let ns = b
        .checkpoint
        .and_then(|c| c.checkpoint_ns)
        .unwrap_or_default();
    history(&app, &id, b.limit.unwrap_or(10), before, b.metadata, ns).await
}

pub async fn history_get(
    State(app): State<AppState>,
    Path(id): Path<String>,
    q: Query,
) -> ApiResult<Response> {
    let id = uuid_param("thread", &id)?;
    let limit = q.u64("limit")?.unwrap_or(10);
    let before = q.get("before").map(str::to_string);
    history(&app, &id, limit, before, None, String::new()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extract_paths() {
        let v = json!({"values": {"messages": [{"c": 1}, {"c": 2}]}, "x": 3});
        assert_eq!(extract_path(&v, "values.messages[-1]"), json!({"c": 2}));
        assert_eq!(extract_path(&v, "values.messages[0].c"), json!(1));
        assert_eq!(extract_path(&v, "x"), json!(3));
        assert_eq!(extract_path(&v, "values.messages[5]"), Value::Null);
        assert_eq!(extract_path(&v, "nope.x"), Value::Null);
    }

    #[test]
    fn ttl_rule_names_the_bound() {
        assert!(TTL_RULE.contains(&fawn_checkpoint::MAX_TTL_MINUTES.to_string()));
        assert!(parse_ttl(&Some(json!(52_596_000))).unwrap().is_some());
        let e = parse_ttl(&Some(json!({"ttl": 52_596_000.5}))).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.detail),
            (
                422,
                format!("Invalid request body at `ttl.ttl`: {TTL_RULE}")
            )
        );
        let e = parse_ttl(&Some(json!(200_000_000_000u64))).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.detail),
            (422, format!("Invalid request body at `ttl`: {TTL_RULE}"))
        );
    }

    #[test]
    fn before_forms() {
        assert_eq!(before_id(&json!("a")).unwrap(), Some("a".into()));
        assert_eq!(
            before_id(&json!({"checkpoint_id": "b"})).unwrap(),
            Some("b".into())
        );
        assert_eq!(
            before_id(&json!({"configurable": {"checkpoint_id": "c"}})).unwrap(),
            Some("c".into())
        );
        assert_eq!(before_id(&Value::Null).unwrap(), None);
        let e = before_id(&json!(3)).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.detail.as_str()),
            (
                422,
                "Invalid request body at `before`: must be a checkpoint id or a checkpoint object"
            )
        );
    }
}
