//! `/runs/crons*` and `/threads/{id}/runs/crons`: bodies read leniently and access checked
//! here; validation, scheduling and the store writes are `fawn_runtime::crons`'s.

use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, OptionalJsonBody, Path, uuid_param};
use crate::routes::assistants::{paginated, sort_order};
use crate::routes::threads::load_thread;
use crate::wire;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fawn_checkpoint::{CronFilter, CronQuery, CronSort, JsonMap};
use fawn_runtime::crons;
use serde::Deserialize;
use serde_json::Value;

async fn create_cron(
    app: &AppState,
    principal: &Principal,
    body: JsonMap,
    thread_id: Option<String>,
) -> ApiResult<Response> {
    let owner = principal.scope().map(str::to_string);
    let cron = crons::create_from_body(&app.rt, owner, thread_id, body).await?;
    Ok(wire::ok(&wire::cron(&cron)))
}

pub async fn create(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody<JsonMap>,
) -> ApiResult<Response> {
    create_cron(&app, &principal, body, None).await
}

pub async fn create_for_thread(
    State(app): State<AppState>,
    principal: Principal,
    Path(tid): Path<String>,
    JsonBody(body): JsonBody<JsonMap>,
) -> ApiResult<Response> {
    let tid = uuid_param("thread", &tid)?;
    load_thread(&app, &tid).await?;
    create_cron(&app, &principal, body, Some(tid)).await
}

pub async fn get_one(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = uuid_param("cron", &id)?;
    match crons::get(&app.rt, &id).await? {
        Some(c) => Ok(wire::ok(&wire::cron(&c))),
        None => Err(ApiError::not_found(format!("Cron {id} not found"))),
    }
}

pub async fn delete(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = uuid_param("cron", &id)?;
    if !crons::delete(&app.rt, &id).await? {
        return Err(ApiError::not_found(format!("Cron {id} not found")));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn patch(
    State(app): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<JsonMap>,
) -> ApiResult<Response> {
    let id = uuid_param("cron", &id)?;
    let cron = crons::update_from_body(&app.rt, &id, body).await?;
    Ok(wire::ok(&wire::cron(&cron)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SearchBody {
    assistant_id: Option<String>,
    thread_id: Option<String>,
    enabled: Option<bool>,
    metadata: Option<JsonMap>,
    limit: Option<u64>,
    offset: Option<u64>,
    sort_by: Option<String>,
    sort_order: Option<String>,
    select: Option<Vec<String>>,
}

fn assistant_filter(app: &AppState, a: Option<String>) -> ApiResult<Option<String>> {
    match a {
        None => Ok(None),
        Some(a) => match app.graphs.assistant_for_graph(&a) {
            Some(id) => Ok(Some(id)),
            None => uuid_param("assistant", &a).map(Some),
        },
    }
}

pub async fn search(
    State(app): State<AppState>,
    principal: Principal,
    OptionalJsonBody(b): OptionalJsonBody<SearchBody>,
) -> ApiResult<Response> {
    let b = b.unwrap_or_default();
    let sort_by = match b.sort_by.as_deref() {
        None | Some("created_at") => CronSort::CreatedAt,
        Some("cron_id") => CronSort::CronId,
        Some("assistant_id") => CronSort::AssistantId,
        Some("thread_id") => CronSort::ThreadId,
        Some("updated_at") => CronSort::UpdatedAt,
        Some("next_run_date") => CronSort::NextRunDate,
        Some("end_time") => CronSort::EndTime,
        Some(o) => {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `sort_by`: '{o}' is not a cron sort key"
            )));
        }
    };
    let limit = b.limit.unwrap_or(10).min(1000);
    let offset = b.offset.unwrap_or(0);
    let thread_id = match b.thread_id {
        Some(t) => Some(uuid_param("thread", &t)?),
        None => None,
    };
    let page = app
        .store()
        .search_crons(&CronQuery {
            filter: CronFilter {
                assistant_id: assistant_filter(&app, b.assistant_id)?,
                thread_id,
                enabled: b.enabled,
                metadata: b.metadata,
                user_id: principal.scope().map(str::to_string),
                task: None,
            },
            limit,
            offset,
            sort_by,
            sort_order: sort_order(b.sort_order.as_deref())?,
        })
        .await
        .map_err(|e| ApiError::store("searching crons", e))?;
    let select = b.select.unwrap_or_default();
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|c| wire::select_keys(wire::cron(c), &select))
        .collect();
    let n = items.len();
    Ok(paginated(Value::Array(items), page.total, offset, n))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CountBody {
    assistant_id: Option<String>,
    thread_id: Option<String>,
    metadata: Option<JsonMap>,
}

pub async fn count(
    State(app): State<AppState>,
    principal: Principal,
    OptionalJsonBody(b): OptionalJsonBody<CountBody>,
) -> ApiResult<Response> {
    let b = b.unwrap_or_default();
    let thread_id = match b.thread_id {
        Some(t) => Some(uuid_param("thread", &t)?),
        None => None,
    };
    let n = app
        .store()
        .count_crons(&CronFilter {
            assistant_id: assistant_filter(&app, b.assistant_id)?,
            thread_id,
            enabled: None,
            metadata: b.metadata,
            user_id: principal.scope().map(str::to_string),
            task: None,
        })
        .await
        .map_err(|e| ApiError::store("counting crons", e))?;
    Ok(wire::ok(&n))
}
