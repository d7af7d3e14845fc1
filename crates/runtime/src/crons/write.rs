//! The one path that creates, changes and deletes crons, for both APIs: LangGraph's
//! `/runs/crons` bodies (read here leniently, field by field, into typed errors) and
//! DeerFlow's scheduled tasks ([`crate::scheduled`], which plans its own schedule first).
//! Every cron written here has a schedule and time zone that parse, a payload that is a valid
//! run for its target now, and a next tick worked out from the runtime's clock.

use super::{CRON_KEYS, next_run, parse_schedule, parse_tz};
use crate::create::{RunCreate, RunTarget, prepare_run, resolve_assistant};
use crate::runtime::RuntimeHandle;
use crate::{Result, RuntimeError};
use chrono::{DateTime, Utc};
use fawn_checkpoint::{Cron, CronPatch, JsonMap, NewCron};
use serde_json::{Value, json};

/// A cron to create.
#[derive(Clone, Debug, Default)]
pub struct CronDraft {
    /// The user the cron and its runs belong to (`None` without authentication).
    pub owner: Option<String>,
    /// The thread every tick runs on; `None`: a fresh thread per tick.
    pub thread_id: Option<String>,
    pub schedule: String,
    pub timezone: Option<String>,
    pub end_time: Option<DateTime<Utc>>,
    /// The first tick, when the schedule alone cannot say it (a one-off task's instant);
    /// `None`: the schedule's next tick from now.
    pub next_run: Option<Option<DateTime<Utc>>>,
    pub enabled: bool,
    /// Keep the fresh thread each tick creates (only without `thread_id`).
    pub keep_thread: bool,
    /// The run each tick creates (`assistant_id` may be a graph id).
    pub payload: JsonMap,
    pub metadata: JsonMap,
    /// A DeerFlow scheduled task (see [`Cron::task`]).
    pub task: Option<JsonMap>,
}

fn invalid(m: String) -> RuntimeError {
    RuntimeError::invalid(m)
}

fn target(thread_id: Option<&str>, keep_thread: bool) -> RunTarget {
    match thread_id {
        Some(t) => RunTarget::Thread(t.to_string()),
        None => RunTarget::CronStateless { keep: keep_thread },
    }
}

/// A cron's payload as the run it creates, for `owner`.
pub(crate) fn run_body(payload: &JsonMap, owner: Option<String>) -> Result<RunCreate> {
    serde_json::from_value::<RunCreate>(Value::Object(payload.clone()))
        .map(|b| RunCreate { owner, ..b })
        .map_err(|e| invalid(format!("The cron's payload is not a run: {e}")))
}

/// Checks that `payload` is a valid run for `target` now; returns its assistant's id.
async fn check_payload(
    rt: &RuntimeHandle,
    payload: &JsonMap,
    owner: Option<String>,
    target: RunTarget,
) -> Result<String> {
    let body = run_body(payload, owner)?;
    let assistant = resolve_assistant(rt, &body.assistant_id).await?;
    prepare_run(rt, body, target, &[]).await?;
    Ok(assistant.assistant_id)
}

fn check_schedule(schedule: &str, timezone: Option<&str>) -> Result<()> {
    parse_schedule(schedule).map_err(invalid)?;
    if let Some(tz) = timezone {
        parse_tz(tz).map_err(invalid)?;
    }
    Ok(())
}

/// Validates and stores a new cron.
pub async fn create(rt: &RuntimeHandle, d: CronDraft) -> Result<Cron> {
    check_schedule(&d.schedule, d.timezone.as_deref())?;
    let mut payload = d.payload;
    let assistant_id = check_payload(
        rt,
        &payload,
        d.owner.clone(),
        target(d.thread_id.as_deref(), d.keep_thread),
    )
    .await?;
    payload.insert("assistant_id".into(), json!(assistant_id));
    let next_run_date = match d.next_run {
        Some(n) => n,
        None => {
            next_run(&d.schedule, d.timezone.as_deref(), rt.now(), d.end_time).map_err(invalid)?
        }
    };
    let context = match d.task {
        Some(_) => "creating the scheduled task",
        None => "creating the cron",
    };
    let on_run_completed = match d.keep_thread {
        true => "keep",
        false => "delete",
    };
    rt.store
        .create_cron(NewCron {
            assistant_id,
            on_run_completed: d.thread_id.is_none().then(|| on_run_completed.to_string()),
            thread_id: d.thread_id,
            user_id: d.owner,
            schedule: d.schedule,
            timezone: d.timezone,
            end_time: d.end_time,
            payload,
            next_run_date,
            metadata: d.metadata,
            enabled: d.enabled,
            task: d.task,
        })
        .await
        .map_err(|e| RuntimeError::store(context, e))
}

/// Validates and applies a change to `cron`. A payload change is merged over the stored
/// payload and the result checked as a run; a new schedule, time zone or end time moves the
/// next tick (from now), unless the patch sets `next_run_date` itself.
pub async fn update(rt: &RuntimeHandle, cron: &Cron, mut patch: CronPatch) -> Result<Cron> {
    if let Some(s) = &patch.schedule {
        parse_schedule(s).map_err(invalid)?;
    }
    if let Some(Some(tz)) = &patch.timezone {
        parse_tz(tz).map_err(invalid)?;
    }
    if let Some(p) = patch.payload.as_mut() {
        let mut merged = cron.payload.clone();
        merged.extend(p.clone());
        let thread_id = match &patch.thread_id {
            Some(t) => t.as_deref(),
            None => cron.thread_id.as_deref(),
        };
        let assistant_id = check_payload(rt, &merged, None, target(thread_id, true)).await?;
        p.insert("assistant_id".into(), json!(assistant_id));
    }
    if patch.next_run_date.is_none()
        && (patch.schedule.is_some() || patch.timezone.is_some() || patch.end_time.is_some())
    {
        let schedule = patch.schedule.as_deref().unwrap_or(&cron.schedule);
        let timezone = match &patch.timezone {
            Some(tz) => tz.as_deref(),
            None => cron.timezone.as_deref(),
        };
        let end = patch.end_time.unwrap_or(cron.end_time);
        patch.next_run_date = Some(next_run(schedule, timezone, rt.now(), end).map_err(invalid)?);
    }
    let context = match cron.task {
        Some(_) => "updating the scheduled task",
        None => "updating the cron",
    };
    rt.store
        .update_cron(&cron.cron_id, patch)
        .await
        .map_err(|e| RuntimeError::store(context, e))
}

/// A cron by id, of any kind.
pub async fn get(rt: &RuntimeHandle, cron_id: &str) -> Result<Option<Cron>> {
    rt.store
        .get_cron(cron_id)
        .await
        .map_err(|e| RuntimeError::store("loading the cron", e))
}

/// Deletes a cron (the runs and threads it created stay); false when it did not exist.
pub async fn delete(rt: &RuntimeHandle, cron_id: &str) -> Result<bool> {
    delete_as(rt, cron_id, "deleting the cron").await
}

pub(crate) async fn delete_as(
    rt: &RuntimeHandle,
    cron_id: &str,
    context: &'static str,
) -> Result<bool> {
    rt.store
        .delete_cron(cron_id)
        .await
        .map_err(|e| RuntimeError::store(context, e))
}

fn str_field<'a>(body: &'a JsonMap, field: &str) -> Result<Option<&'a str>> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(RuntimeError::invalid_field(field, "must be a string")),
    }
}

fn time_field(field: &str, v: &Value) -> Result<Option<DateTime<Utc>>> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => DateTime::parse_from_rfc3339(s)
            .map(|d| Some(d.with_timezone(&Utc)))
            .map_err(|_| {
                RuntimeError::invalid_field(field, format!("'{s}' is not an ISO 8601 date-time"))
            }),
        _ => Err(RuntimeError::invalid_field(
            field,
            "must be an ISO 8601 date-time string",
        )),
    }
}

/// `on_run_completed`: `delete`, `keep` or absent.
fn on_run_completed(body: &JsonMap) -> Result<Option<&str>> {
    match str_field(body, "on_run_completed")? {
        o @ (None | Some("delete" | "keep")) => Ok(o),
        Some(o) => Err(RuntimeError::invalid_field(
            "on_run_completed",
            format!("'{o}' is not one of ['delete', 'keep']"),
        )),
    }
}

/// `timezone`: a string naming an IANA zone, or absent.
fn check_tz_field(body: &JsonMap) -> Result<Option<String>> {
    let tz = str_field(body, "timezone")?;
    if let Some(t) = tz {
        parse_tz(t).map_err(invalid)?;
    }
    Ok(tz.map(str::to_string))
}

/// `POST /runs/crons` (`thread_id: None`) and `POST /threads/{id}/runs/crons`: a LangGraph
/// cron body, for `owner`. The keys of [`CRON_KEYS`] configure the cron; the rest is the run
/// each tick creates.
pub async fn create_from_body(
    rt: &RuntimeHandle,
    owner: Option<String>,
    thread_id: Option<String>,
    body: JsonMap,
) -> Result<Cron> {
    let schedule = str_field(&body, "schedule")?
        .ok_or_else(|| RuntimeError::missing_field("schedule"))?
        .to_string();
    parse_schedule(&schedule).map_err(invalid)?;
    let timezone = check_tz_field(&body)?;
    let end_time = time_field("end_time", body.get("end_time").unwrap_or(&Value::Null))?;
    let enabled = match body.get("enabled") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(RuntimeError::invalid_field("enabled", "must be a boolean")),
    };
    let keep_thread = on_run_completed(&body)? == Some("keep");
    let metadata = match body.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => JsonMap::new(),
    };
    let mut payload = body;
    for k in CRON_KEYS {
        payload.remove(*k);
    }
    create(
        rt,
        CronDraft {
            owner,
            thread_id,
            schedule,
            timezone,
            end_time,
            next_run: None,
            enabled,
            keep_thread,
            payload,
            metadata,
            task: None,
        },
    )
    .await
}

/// `PATCH /runs/crons/{id}`: a LangGraph cron body of the fields to change.
pub async fn update_from_body(rt: &RuntimeHandle, cron_id: &str, body: JsonMap) -> Result<Cron> {
    if body.is_empty() {
        return Err(RuntimeError::rejected("No fields to update"));
    }
    let current = get(rt, cron_id)
        .await?
        .ok_or_else(|| RuntimeError::not_found(format!("Cron {cron_id} not found")))?;
    let mut patch = CronPatch::default();
    if let Some(s) = str_field(&body, "schedule")? {
        parse_schedule(s).map_err(invalid)?;
        patch.schedule = Some(s.to_string());
    }
    if body.contains_key("timezone") {
        patch.timezone = Some(check_tz_field(&body)?);
    }
    if let Some(v) = body.get("end_time") {
        patch.end_time = Some(time_field("end_time", v)?);
    }
    match body.get("enabled") {
        None => {}
        Some(Value::Bool(b)) => patch.enabled = Some(*b),
        Some(_) => return Err(RuntimeError::invalid_field("enabled", "must be a boolean")),
    }
    if body.contains_key("on_run_completed") {
        patch.on_run_completed = Some(on_run_completed(&body)?.map(str::to_string));
    }
    match body.get("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => patch.metadata = Some(m.clone()),
        Some(_) => return Err(RuntimeError::invalid_field("metadata", "must be an object")),
    }
    let mut payload = body;
    for k in CRON_KEYS {
        payload.remove(*k);
    }
    if !payload.is_empty() {
        patch.payload = Some(payload);
    }
    update(rt, &current, patch).await
}
