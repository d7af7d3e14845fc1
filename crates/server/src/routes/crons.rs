//! `/runs/crons*` and `/threads/{id}/runs/crons`.

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
use chrono::{DateTime, Utc};
use fawn_checkpoint::{CronFilter, CronPatch, CronQuery, CronSort, JsonMap, NewCron};
use fawn_runtime::create::{RunCreate, RunTarget, prepare_run, resolve_assistant};
use fawn_runtime::crons::{CRON_KEYS, next_run, parse_schedule, parse_tz};
use serde::Deserialize;
use serde_json::{Value, json};

fn parse_time(field: &str, v: &Value) -> ApiResult<Option<DateTime<Utc>>> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => DateTime::parse_from_rfc3339(s)
            .map(|d| Some(d.with_timezone(&Utc)))
            .map_err(|_| {
                ApiError::unprocessable(format!(
                    "Invalid request body at `{field}`: '{s}' is not an ISO 8601 date-time"
                ))
            }),
        _ => Err(ApiError::unprocessable(format!(
            "Invalid request body at `{field}`: must be an ISO 8601 date-time string"
        ))),
    }
}

fn str_field<'a>(body: &'a JsonMap, field: &str) -> ApiResult<Option<&'a str>> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(ApiError::unprocessable(format!(
            "Invalid request body at `{field}`: must be a string"
        ))),
    }
}

async fn create_cron(
    app: &AppState,
    principal: &Principal,
    body: JsonMap,
    thread_id: Option<String>,
) -> ApiResult<Response> {
    let Some(schedule) = str_field(&body, "schedule")? else {
        return Err(ApiError::unprocessable(
            "Invalid request body: `schedule` is required",
        ));
    };
    parse_schedule(schedule).map_err(ApiError::unprocessable)?;
    let timezone = str_field(&body, "timezone")?.map(str::to_string);
    if let Some(tz) = &timezone {
        parse_tz(tz).map_err(ApiError::unprocessable)?;
    }
    let end_time = parse_time("end_time", body.get("end_time").unwrap_or(&Value::Null))?;
    let enabled = match body.get("enabled") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::unprocessable(
                "Invalid request body at `enabled`: must be a boolean",
            ));
        }
    };
    let on_run_completed = match str_field(&body, "on_run_completed")? {
        None | Some("delete") => "delete",
        Some("keep") => "keep",
        Some(o) => {
            return Err(ApiError::unprocessable(format!(
                "Invalid request body at `on_run_completed`: '{o}' is not one of ['delete', 'keep']"
            )));
        }
    };
    let mut payload = body.clone();
    for k in CRON_KEYS {
        payload.remove(*k);
    }
    let run_body: RunCreate = serde_json::from_value(Value::Object(payload.clone()))
        .map_err(|e| ApiError::unprocessable(format!("Invalid request body: {e}")))?;
    let assistant = resolve_assistant(&app.rt, &run_body.assistant_id).await?;
    let target = match &thread_id {
        Some(t) => RunTarget::Thread(t.clone()),
        None => RunTarget::CronStateless {
            keep: on_run_completed == "keep",
        },
    };
    // Validate the run each tick will create, now.
    let run_body = RunCreate {
        owner: principal.scope().map(str::to_string),
        ..run_body
    };
    prepare_run(&app.rt, run_body, target, &[]).await?;
    payload.insert("assistant_id".into(), json!(assistant.assistant_id));
    let metadata = match body.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => JsonMap::new(),
    };
    let next = next_run(schedule, timezone.as_deref(), app.now(), end_time)
        .map_err(ApiError::unprocessable)?;
    let cron = app
        .store()
        .create_cron(NewCron {
            assistant_id: assistant.assistant_id.clone(),
            thread_id: thread_id.clone(),
            schedule: schedule.to_string(),
            timezone,
            end_time,
            payload,
            next_run_date: next,
            metadata,
            on_run_completed: thread_id.is_none().then(|| on_run_completed.to_string()),
            enabled,
            user_id: principal.scope().map(str::to_string),
            task: None,
        })
        .await
        .map_err(|e| ApiError::store("creating the cron", e))?;
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

async fn load_cron(app: &AppState, id: &str) -> ApiResult<fawn_checkpoint::Cron> {
    match app.store().get_cron(id).await {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(ApiError::not_found(format!("Cron {id} not found"))),
        Err(e) => Err(ApiError::store("loading the cron", e)),
    }
}

pub async fn get_one(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = uuid_param("cron", &id)?;
    Ok(wire::ok(&wire::cron(&load_cron(&app, &id).await?)))
}

pub async fn delete(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = uuid_param("cron", &id)?;
    let existed = app
        .store()
        .delete_cron(&id)
        .await
        .map_err(|e| ApiError::store("deleting the cron", e))?;
    if !existed {
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
    if body.is_empty() {
        return Err(ApiError::bad_request("No fields to update"));
    }
    let current = load_cron(&app, &id).await?;
    let mut patch = CronPatch::default();
    let schedule = match str_field(&body, "schedule")? {
        Some(s) => {
            parse_schedule(s).map_err(ApiError::unprocessable)?;
            patch.schedule = Some(s.to_string());
            s.to_string()
        }
        None => current.schedule.clone(),
    };
    let timezone = if body.contains_key("timezone") {
        let tz = str_field(&body, "timezone")?.map(str::to_string);
        if let Some(t) = &tz {
            parse_tz(t).map_err(ApiError::unprocessable)?;
        }
        patch.timezone = Some(tz.clone());
        tz
    } else {
        current.timezone.clone()
    };
    let end_time = match body.get("end_time") {
        Some(v) => {
            let e = parse_time("end_time", v)?;
            patch.end_time = Some(e);
            e
        }
        None => current.end_time,
    };
    if let Some(v) = body.get("enabled") {
        match v {
            Value::Bool(b) => patch.enabled = Some(*b),
            _ => {
                return Err(ApiError::unprocessable(
                    "Invalid request body at `enabled`: must be a boolean",
                ));
            }
        }
    }
    if body.contains_key("on_run_completed") {
        match str_field(&body, "on_run_completed")? {
            None => patch.on_run_completed = Some(None),
            Some(s @ ("delete" | "keep")) => patch.on_run_completed = Some(Some(s.to_string())),
            Some(o) => {
                return Err(ApiError::unprocessable(format!(
                    "Invalid request body at `on_run_completed`: '{o}' is not one of ['delete', 'keep']"
                )));
            }
        }
    }
    if let Some(m) = body.get("metadata") {
        match m {
            Value::Object(m) => patch.metadata = Some(m.clone()),
            Value::Null => {}
            _ => {
                return Err(ApiError::unprocessable(
                    "Invalid request body at `metadata`: must be an object",
                ));
            }
        }
    }
    let mut payload_patch = body.clone();
    for k in CRON_KEYS {
        payload_patch.remove(*k);
    }
    if !payload_patch.is_empty() {
        let mut merged = current.payload.clone();
        merged.extend(payload_patch.clone());
        let run_body: RunCreate = serde_json::from_value(Value::Object(merged.clone()))
            .map_err(|e| ApiError::unprocessable(format!("Invalid request body: {e}")))?;
        let target = match &current.thread_id {
            Some(t) => RunTarget::Thread(t.clone()),
            None => RunTarget::CronStateless { keep: true },
        };
        let assistant = resolve_assistant(&app.rt, &run_body.assistant_id).await?;
        prepare_run(&app.rt, run_body, target, &[]).await?;
        payload_patch.insert("assistant_id".into(), json!(assistant.assistant_id));
        patch.payload = Some(payload_patch);
    }
    if patch.schedule.is_some() || patch.timezone.is_some() || patch.end_time.is_some() {
        let next = next_run(&schedule, timezone.as_deref(), app.now(), end_time)
            .map_err(ApiError::unprocessable)?;
        patch.next_run_date = Some(next);
    }
    let c = app
        .store()
        .update_cron(&id, patch)
        .await
        .map_err(|e| ApiError::store("updating the cron", e))?;
    Ok(wire::ok(&wire::cron(&c)))
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
