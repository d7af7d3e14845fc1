//! DeerFlow's scheduled tasks as crons of Fawn's one scheduler: a task is a cron whose `task`
//! column holds what DeerFlow shows and the cron itself does not say (title, prompt, context
//! mode, the schedule as the user wrote it). The LangGraph cron routes see, patch and delete
//! the same rows; [`crate::crons::tick`] fires both kinds.
//!
//! * `schedule_type: cron`: the cron's schedule (exactly five fields) in the task's time zone.
//! * `schedule_type: once`: a schedule naming `run_at`'s minute (and second, when it has one)
//!   with `end_time` = `next_run_date` = `run_at`, so the cron fires once and then has no
//!   next tick.
//! * `context_mode: reuse_thread`: a thread cron (every run on that thread);
//!   `fresh_thread_per_run`: a stateless cron that keeps the thread each run creates.
//! * Paused is the cron disabled. Trigger creates one run now, outside the schedule; as in
//!   DeerFlow, a one-off task's single occurrence is then used up.
//! * The run history is the runs carrying `metadata.cron_id`; a task's status, `last_*` and
//!   `run_count` are derived from them (a one-off task is `running`, `completed`, `failed` or
//!   `cancelled` after its run).
//! * An occurrence whose previous run is still active is skipped (DeerFlow's `skip` overlap
//!   policy). Skips of one-off tasks and runs that could not be created are kept on the task
//!   (`launch_error`) and shown as its `last_error`.

use crate::create::OWNER_KEY;
use crate::crons::{self, CronDraft, create_cron_run, next_run, parse_schedule, parse_tz};
use crate::graphs::LEAD_AGENT;
use crate::runtime::RuntimeHandle;
use crate::{Result, RuntimeError};
use chrono::{DateTime, Duration, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc};
use fawn_checkpoint::{
    Cron, CronFilter, CronPatch, CronQuery, CronSort, JsonMap, Run, RunStatus, SortOrder, Thread,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// `context_mode`: where a task's runs go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextMode {
    /// A new thread for every run (kept afterwards).
    #[default]
    FreshThreadPerRun,
    /// Every run on the task's thread.
    ReuseThread,
}

impl ContextMode {
    pub fn parse(s: &str) -> Result<ContextMode> {
        match s {
            "fresh_thread_per_run" => Ok(ContextMode::FreshThreadPerRun),
            "reuse_thread" => Ok(ContextMode::ReuseThread),
            _ => Err(RuntimeError::invalid("Unsupported context_mode")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ContextMode::FreshThreadPerRun => "fresh_thread_per_run",
            ContextMode::ReuseThread => "reuse_thread",
        }
    }
}

/// `schedule_type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleType {
    /// Once, at `schedule_spec.run_at`.
    Once,
    /// On `schedule_spec.cron`.
    #[default]
    Cron,
}

impl ScheduleType {
    pub fn parse(s: &str) -> Result<ScheduleType> {
        match s {
            "once" => Ok(ScheduleType::Once),
            "cron" => Ok(ScheduleType::Cron),
            _ => Err(RuntimeError::invalid("Unsupported schedule_type")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleType::Once => "once",
            ScheduleType::Cron => "cron",
        }
    }
}

/// Why the latest occurrence of a task created no run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchError {
    pub message: String,
    pub at: DateTime<Utc>,
}

/// What a cron's `task` column holds. Every field has a default, and keys this version does
/// not know are kept when the task is rewritten.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskSpec {
    pub title: String,
    pub prompt: String,
    pub context_mode: ContextMode,
    pub schedule_type: ScheduleType,
    /// `{cron}` or `{run_at}`, as given (the cron expression normalised).
    pub schedule_spec: JsonMap,
    /// The graph the task runs (DeerFlow: always the lead agent).
    pub assistant_id: String,
    pub launch_error: Option<LaunchError>,
}

impl TaskSpec {
    /// The task a cron carries, if any.
    pub fn of(cron: &Cron) -> Option<TaskSpec> {
        let task = cron.task.as_ref()?;
        Some(serde_json::from_value(Value::Object(task.clone())).unwrap_or_default())
    }

    /// This task as the cron's `task` column, over `base` (the stored one).
    fn to_map(&self, base: Option<&JsonMap>) -> JsonMap {
        let mut out = base.cloned().unwrap_or_default();
        if let Ok(Value::Object(m)) = serde_json::to_value(self) {
            out.extend(m);
        }
        if self.launch_error.is_none() {
            out.remove("launch_error");
        }
        out
    }
}

/// When a task fires, as its cron stores it.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The cron expression (for `once`, one naming `run_at`).
    pub schedule: String,
    /// `schedule_spec` as stored (the cron expression normalised).
    pub spec: JsonMap,
    pub end_time: Option<DateTime<Utc>>,
    pub next_run: Option<DateTime<Utc>>,
}

fn invalid(m: impl Into<String>) -> RuntimeError {
    RuntimeError::invalid(m)
}

/// An IANA time zone, with DeerFlow's message.
fn zone(name: &str) -> Result<chrono_tz::Tz> {
    parse_tz(name).map_err(|_| invalid(format!("Unknown timezone: {name}")))
}

/// `run_at` as Python's `datetime.fromisoformat` reads it: with an offset (or `Z`) it is
/// that instant; without one it is wall-clock time in `tz`.
pub fn parse_run_at(raw: &str, tz: chrono_tz::Tz) -> Result<DateTime<Utc>> {
    let bad = || invalid(format!("Invalid isoformat string: '{raw}'"));
    let s = raw.trim();
    if let Ok(d) = DateTime::parse_from_rfc3339(s) {
        return Ok(d.with_timezone(&Utc));
    }
    for f in ["%Y-%m-%dT%H:%M%:z", "%Y-%m-%d %H:%M%:z"] {
        if let Ok(d) = DateTime::parse_from_str(s, f) {
            return Ok(d.with_timezone(&Utc));
        }
    }
    let naive = [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
    .or_else(|| {
        NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
    })
    .ok_or_else(bad)?;
    tz.from_local_datetime(&naive)
        .earliest()
        .map(|d| d.with_timezone(&Utc))
        .ok_or_else(|| invalid(format!("run_at '{raw}' does not exist in {tz}")))
}

/// A cron expression with its fields separated by single spaces; exactly five fields.
pub fn normalize_cron(expr: &str) -> Result<String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(invalid("Cron expression must contain exactly 5 fields"));
    }
    let expr = fields.join(" ");
    parse_schedule(&expr).map_err(invalid)?;
    Ok(expr)
}

/// Validates a schedule and works out when it fires, from `now`. A one-off time must be at
/// least `min_once_delay` seconds ahead.
pub fn plan(
    kind: ScheduleType,
    spec: &JsonMap,
    timezone: &str,
    now: DateTime<Utc>,
    min_once_delay: u64,
) -> Result<Plan> {
    let tz = zone(timezone)?;
    let mut spec = spec.clone();
    match kind {
        ScheduleType::Cron => {
            let Some(Value::String(raw)) = spec.get("cron") else {
                return Err(invalid("cron schedule requires schedule_spec.cron"));
            };
            let expr = normalize_cron(raw)?;
            let next = next_run(&expr, Some(timezone), now, None).map_err(invalid)?;
            if next.is_none() {
                return Err(invalid("cron schedule never fires"));
            }
            spec.insert("cron".into(), json!(expr));
            Ok(Plan {
                schedule: expr,
                spec,
                end_time: None,
                next_run: next,
            })
        }
        ScheduleType::Once => {
            let Some(Value::String(raw)) = spec.get("run_at") else {
                return Err(invalid("once schedule requires run_at"));
            };
            let run_at = parse_run_at(raw, tz)?;
            if run_at <= now {
                return Err(invalid("once schedule must be in the future"));
            }
            let min = i64::try_from(min_once_delay).unwrap_or(i64::MAX);
            if run_at - now < Duration::seconds(min) {
                return Err(invalid(format!(
                    "once schedule must be at least {min_once_delay} seconds in the future"
                )));
            }
            Ok(Plan {
                schedule: once_schedule(run_at, tz),
                spec,
                end_time: Some(run_at),
                next_run: Some(run_at),
            })
        }
    }
}

/// A cron expression matching `at` (to the second) in `tz`.
fn once_schedule(at: DateTime<Utc>, tz: chrono_tz::Tz) -> String {
    let l = at.with_timezone(&tz);
    let minute = format!(
        "{} {} {} {} *",
        l.minute(),
        l.hour(),
        chrono::Datelike::day(&l),
        chrono::Datelike::month(&l)
    );
    match l.second() {
        0 => minute,
        s => format!("{s} {minute}"),
    }
}

/// The run a task's cron creates at each occurrence.
fn payload(prompt: &str) -> JsonMap {
    let mut p = JsonMap::new();
    p.insert("assistant_id".into(), json!(LEAD_AGENT));
    p.insert("input".into(), input(prompt));
    // Nobody is there to answer a clarifying question.
    p.insert("context".into(), json!({"non_interactive": true}));
    p.insert("multitask_strategy".into(), json!("reject"));
    p
}

fn input(prompt: &str) -> Value {
    json!({"messages": [{"role": "user", "content": prompt}]})
}

/// Whether a thread may be used by a task: given the thread, true when the caller owns it.
pub type ThreadCheck<'a> = &'a (dyn Fn(&Thread) -> bool + Send + Sync);

/// The thread a `reuse_thread` task runs on: it must exist and be the caller's.
async fn usable_thread(
    rt: &RuntimeHandle,
    thread_id: Option<&str>,
    owns: ThreadCheck<'_>,
) -> Result<String> {
    let Some(tid) = thread_id.filter(|t| !t.is_empty()) else {
        return Err(invalid("reuse_thread requires thread_id"));
    };
    match rt.store.get_thread(tid).await {
        Ok(Some(t)) if owns(&t) => Ok(tid.to_string()),
        Ok(_) => Err(RuntimeError::not_found("Thread not found")),
        Err(e) => Err(RuntimeError::store("loading the thread", e)),
    }
}

/// `true` when a thread's `owner` metadata is `owner` (anyone's when `owner` is `None`).
pub fn thread_owned_by(owner: Option<&str>, thread: &Thread) -> bool {
    match owner {
        None => true,
        Some(o) => thread.metadata.get(OWNER_KEY).and_then(Value::as_str) == Some(o),
    }
}

fn non_empty(field: &str, v: &str) -> Result<()> {
    if v.is_empty() {
        return Err(RuntimeError::invalid_field(field, "must not be empty"));
    }
    Ok(())
}

/// `POST /api/scheduled-tasks`.
#[derive(Clone, Debug, Default)]
pub struct NewTask {
    /// The user the task and its runs belong to (`None` without authentication).
    pub owner: Option<String>,
    pub context_mode: String,
    pub thread_id: Option<String>,
    pub title: String,
    pub prompt: String,
    pub schedule_type: String,
    pub schedule_spec: JsonMap,
    pub timezone: String,
}

/// Creates a task (its cron), enabled; checks in DeerFlow's order.
pub async fn create(rt: &RuntimeHandle, t: NewTask, owns: ThreadCheck<'_>) -> Result<Cron> {
    non_empty("title", &t.title)?;
    non_empty("prompt", &t.prompt)?;
    let mode = ContextMode::parse(&t.context_mode)?;
    let thread_id = match mode {
        ContextMode::ReuseThread => Some(usable_thread(rt, t.thread_id.as_deref(), owns).await?),
        ContextMode::FreshThreadPerRun => None,
    };
    let kind = ScheduleType::parse(&t.schedule_type)?;
    let plan = plan(
        kind,
        &t.schedule_spec,
        &t.timezone,
        rt.now(),
        rt.settings.app.scheduler.min_once_delay_seconds,
    )?;
    let payload = payload(&t.prompt);
    let spec = TaskSpec {
        title: t.title,
        prompt: t.prompt,
        context_mode: mode,
        schedule_type: kind,
        schedule_spec: plan.spec,
        assistant_id: LEAD_AGENT.to_string(),
        launch_error: None,
    };
    // The cron path checks that the run each occurrence creates is valid now.
    crons::create(
        rt,
        CronDraft {
            owner: t.owner,
            thread_id,
            schedule: plan.schedule,
            timezone: Some(t.timezone),
            end_time: plan.end_time,
            next_run: Some(plan.next_run),
            enabled: true,
            keep_thread: true,
            payload,
            metadata: JsonMap::new(),
            task: Some(spec.to_map(None)),
        },
    )
    .await
}

/// A task by id (its cron's id), whoever owns it; `None` for a plain cron.
pub async fn get(rt: &RuntimeHandle, task_id: &str) -> Result<Option<Cron>> {
    match rt.store.get_cron(task_id).await {
        Ok(c) => Ok(c.filter(|c| c.task.is_some())),
        Err(e) => Err(RuntimeError::store("loading the scheduled task", e)),
    }
}

/// The tasks of `owner` (every task when `None`), newest first; only those running on
/// `thread_id` when given.
pub async fn list(
    rt: &RuntimeHandle,
    owner: Option<&str>,
    thread_id: Option<&str>,
) -> Result<Vec<Cron>> {
    rt.store
        .search_crons(&CronQuery {
            filter: CronFilter {
                thread_id: thread_id.map(str::to_string),
                user_id: owner.map(str::to_string),
                task: Some(true),
                ..Default::default()
            },
            limit: 0,
            offset: 0,
            sort_by: CronSort::CreatedAt,
            sort_order: SortOrder::Desc,
        })
        .await
        .map(|p| p.items)
        .map_err(|e| RuntimeError::store("listing scheduled tasks", e))
}

/// What the runs of a task say about it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskState {
    /// `enabled` | `paused` | `running` | `completed` | `failed` | `cancelled`.
    pub status: &'static str,
    /// The newest run it created.
    pub last_run: Option<Run>,
    pub last_error: Option<String>,
    /// How many runs it created (that still exist).
    pub run_count: u64,
}

fn active(run: &Run) -> bool {
    matches!(run.status, RunStatus::Pending | RunStatus::Running)
}

/// A task's status and latest run.
pub async fn state(rt: &RuntimeHandle, cron: &Cron) -> Result<TaskState> {
    let page = rt
        .store
        .cron_runs(&cron.cron_id, 1, 0)
        .await
        .map_err(|e| RuntimeError::store("loading the task's runs", e))?;
    let spec = TaskSpec::of(cron).unwrap_or_default();
    let last_run = page.items.into_iter().next();
    // A launch error newer than the newest run is the latest outcome.
    let launch_error = spec
        .launch_error
        .filter(|e| last_run.as_ref().is_none_or(|r| e.at >= r.created_at));
    let run_outcome = last_run.as_ref().filter(|r| !active(r)).map(|r| r.status);
    let last_error = match (&launch_error, &last_run) {
        (Some(e), _) => Some(e.message.clone()),
        (None, Some(r)) => run_error(r),
        (None, None) => None,
    };
    let status = if !cron.enabled {
        "paused"
    } else if spec.schedule_type == ScheduleType::Cron {
        "enabled"
    } else if last_run.as_ref().is_some_and(active) {
        "running"
    } else if cron.next_run_date.is_some() {
        "enabled"
    } else if launch_error.is_some() {
        "failed"
    } else {
        match run_outcome {
            Some(RunStatus::Interrupted) => "cancelled",
            Some(RunStatus::Error | RunStatus::Timeout) => "failed",
            _ => "completed",
        }
    };
    Ok(TaskState {
        status,
        last_run,
        last_error,
        run_count: page.total,
    })
}

/// DeerFlow refuses to change a task while its one-off run is active.
async fn ensure_mutable(rt: &RuntimeHandle, cron: &Cron) -> Result<()> {
    if state(rt, cron).await?.status == "running" {
        return Err(RuntimeError::conflict(
            "Scheduled task is currently running; retry after the active execution finishes",
        ));
    }
    Ok(())
}

/// `PATCH /api/scheduled-tasks/{id}`: `None` keeps the current value. `schedule_type` cannot
/// change.
#[derive(Clone, Debug, Default)]
pub struct TaskPatch {
    pub context_mode: Option<String>,
    pub thread_id: Option<String>,
    pub title: Option<String>,
    pub prompt: Option<String>,
    pub schedule_spec: Option<JsonMap>,
    pub timezone: Option<String>,
}

/// Changes a task. A new schedule or time zone is planned again from now (which re-arms a
/// finished one-off task whose time moved ahead).
pub async fn update(
    rt: &RuntimeHandle,
    cron: &Cron,
    p: TaskPatch,
    owns: ThreadCheck<'_>,
) -> Result<Cron> {
    let mut spec =
        TaskSpec::of(cron).ok_or_else(|| RuntimeError::not_found("Scheduled task not found"))?;
    ensure_mutable(rt, cron).await?;
    if let Some(t) = &p.title {
        non_empty("title", t)?;
    }
    if let Some(t) = &p.prompt {
        non_empty("prompt", t)?;
    }
    let mode = match &p.context_mode {
        Some(m) => ContextMode::parse(m)?,
        None => spec.context_mode,
    };
    let thread_id = match mode {
        ContextMode::ReuseThread => {
            let wanted = p.thread_id.as_deref().or(cron.thread_id.as_deref());
            Some(usable_thread(rt, wanted, owns).await?)
        }
        ContextMode::FreshThreadPerRun => None,
    };
    let mut patch = CronPatch::default();
    if let Some(tz) = &p.timezone {
        zone(tz)?;
    }
    if p.schedule_spec.is_some() || p.timezone.is_some() {
        let timezone = p
            .timezone
            .clone()
            .or_else(|| cron.timezone.clone())
            .unwrap_or_else(|| "UTC".to_string());
        let given = p.schedule_spec.as_ref().unwrap_or(&spec.schedule_spec);
        let plan = plan(
            spec.schedule_type,
            given,
            &timezone,
            rt.now(),
            rt.settings.app.scheduler.min_once_delay_seconds,
        )?;
        patch.schedule = Some(plan.schedule);
        patch.timezone = Some(Some(timezone));
        patch.end_time = Some(plan.end_time);
        patch.next_run_date = Some(plan.next_run);
        spec.schedule_spec = plan.spec;
    }
    if let Some(prompt) = p.prompt {
        let mut pp = JsonMap::new();
        pp.insert("input".into(), input(&prompt));
        patch.payload = Some(pp);
        spec.prompt = prompt;
    }
    if let Some(title) = p.title {
        spec.title = title;
    }
    if thread_id != cron.thread_id {
        patch.on_run_completed = Some(thread_id.is_none().then(|| "keep".to_string()));
        patch.thread_id = Some(thread_id);
    }
    spec.context_mode = mode;
    patch.task = Some(spec.to_map(cron.task.as_ref()));
    crons::update(rt, cron, patch).await
}

/// Pause (`false`) or resume (`true`) a task: its cron's `enabled`. A resumed task whose
/// occurrence passed while it was paused fires at the next tick.
pub async fn set_enabled(rt: &RuntimeHandle, cron: &Cron, enabled: bool) -> Result<Cron> {
    ensure_mutable(rt, cron).await?;
    let patch = CronPatch {
        enabled: Some(enabled),
        ..Default::default()
    };
    crons::update(rt, cron, patch).await
}

/// Deletes a task (its cron); the runs and threads it created stay. False when it did not
/// exist.
pub async fn delete(rt: &RuntimeHandle, cron: &Cron) -> Result<bool> {
    crons::delete_as(rt, &cron.cron_id, "deleting the scheduled task").await
}

/// Why a trigger created no run.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    /// The task already has an active run, or the active runs of scheduled tasks are at
    /// `scheduler.max_concurrent_runs`.
    #[error("{0}")]
    Busy(String),
    /// The run could not be created.
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

fn run_metadata(cron: &Cron, trigger: &str, scheduled_for: DateTime<Utc>) -> JsonMap {
    let mut m = JsonMap::new();
    m.insert("scheduled_task_id".into(), json!(cron.cron_id));
    m.insert("scheduled_trigger".into(), json!(trigger));
    m.insert(
        "scheduled_for".into(),
        json!(scheduled_for.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
    );
    m
}

/// The task's newest run, when it is still pending or running.
async fn active_run(rt: &RuntimeHandle, cron: &Cron) -> Result<Option<Run>> {
    let page = rt
        .store
        .cron_runs(&cron.cron_id, 1, 0)
        .await
        .map_err(|e| RuntimeError::store("loading the task's runs", e))?;
    Ok(page.items.into_iter().next().filter(active))
}

/// Records (or clears) the task's launch error; a failure to record is only logged.
async fn record_launch(rt: &RuntimeHandle, cron: &Cron, error: Option<LaunchError>, used_up: bool) {
    let Some(mut spec) = TaskSpec::of(cron) else {
        return;
    };
    if spec.launch_error == error && !used_up {
        return;
    }
    spec.launch_error = error;
    let patch = CronPatch {
        task: Some(spec.to_map(cron.task.as_ref())),
        next_run_date: used_up.then_some(None),
        ..Default::default()
    };
    if let Err(e) = crons::update(rt, cron, patch).await {
        tracing::warn!(task_id = %cron.cron_id, error = %e, "recording a scheduled task's launch failed");
    }
}

/// "Run now": one run of the task, outside its schedule (a one-off task's occurrence is
/// used up).
pub async fn trigger(rt: &RuntimeHandle, cron: &Cron) -> Result<Run, TriggerError> {
    if active_run(rt, cron).await?.is_some() {
        return Err(TriggerError::Busy("task already has an active run".into()));
    }
    let active = rt
        .store
        .count_active_task_runs()
        .await
        .map_err(|e| RuntimeError::store("counting active scheduled runs", e))?;
    if active >= rt.settings.app.scheduler.max_concurrent_runs {
        return Err(TriggerError::Busy(
            "global concurrent-run limit reached".into(),
        ));
    }
    let now = rt.now();
    let once = TaskSpec::of(cron).is_some_and(|s| s.schedule_type == ScheduleType::Once);
    match create_cron_run(rt, cron, run_metadata(cron, "manual", now)).await {
        Ok(created) => {
            record_launch(rt, cron, None, once && cron.next_run_date.is_some()).await;
            Ok(created.run)
        }
        Err(RuntimeError::Conflict(m)) => Err(TriggerError::Busy(m)),
        Err(e @ RuntimeError::Store { .. }) => Err(TriggerError::Runtime(e)),
        Err(e) => {
            let message = e.to_string();
            let error = LaunchError {
                message: message.clone(),
                at: now,
            };
            record_launch(rt, cron, Some(error), false).await;
            Err(TriggerError::Failed(message))
        }
    }
}

/// Fires a task's claimed occurrence (`cron.next_run_date`, the tick being fired).
pub(crate) async fn fire(rt: &RuntimeHandle, cron: &Cron, now: DateTime<Utc>) {
    let once = TaskSpec::of(cron).is_some_and(|s| s.schedule_type == ScheduleType::Once);
    match active_run(rt, cron).await {
        Ok(Some(run)) => {
            tracing::info!(task_id = %cron.cron_id, run_id = %run.run_id, "scheduled task skipped: its previous run is still active");
            if once {
                let error = LaunchError {
                    message: "skipped: a previous run of this task is still active".into(),
                    at: now,
                };
                record_launch(rt, cron, Some(error), false).await;
            }
            return;
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(task_id = %cron.cron_id, error = %e, "scheduled task not fired");
            return;
        }
    }
    let scheduled_for = cron.next_run_date.unwrap_or(now);
    match create_cron_run(rt, cron, run_metadata(cron, "scheduled", scheduled_for)).await {
        Ok(c) => {
            tracing::info!(task_id = %cron.cron_id, run_id = %c.run.run_id, "scheduled task fired");
            record_launch(rt, cron, None, false).await;
        }
        Err(e) => {
            tracing::warn!(task_id = %cron.cron_id, error = %e, "scheduled task could not create a run");
            let error = LaunchError {
                message: e.to_string(),
                at: now,
            };
            record_launch(rt, cron, Some(error), false).await;
        }
    }
}

/// A run's status in DeerFlow's words: `queued`, `running`, `success`, `failed`,
/// `interrupted`.
pub fn run_status(run: &Run) -> &'static str {
    match run.status {
        RunStatus::Pending => "queued",
        RunStatus::Running => "running",
        RunStatus::Success => "success",
        RunStatus::Error | RunStatus::Timeout => "failed",
        RunStatus::Interrupted => "interrupted",
    }
}

/// A failed or interrupted run's error message.
pub fn run_error(run: &Run) -> Option<String> {
    match run.status {
        RunStatus::Error | RunStatus::Timeout => Some(
            run.error
                .as_ref()
                .and_then(|e| {
                    e.get("message")
                        .and_then(Value::as_str)
                        .filter(|m| !m.is_empty())
                        .or_else(|| e.get("error").and_then(Value::as_str))
                        .map(str::to_string)
                })
                .unwrap_or_else(|| format!("run ended with status {}", run.status.as_str())),
        ),
        RunStatus::Interrupted => Some("run was interrupted before completion".into()),
        _ => None,
    }
}

/// `manual` or `scheduled`.
pub fn run_trigger(run: &Run) -> &str {
    run.metadata
        .get("scheduled_trigger")
        .and_then(Value::as_str)
        .unwrap_or("scheduled")
}

/// The occurrence a run was created for (its creation time when unrecorded).
pub fn run_scheduled_for(run: &Run) -> DateTime<Utc> {
    run.metadata
        .get("scheduled_for")
        .and_then(Value::as_str)
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or(run.created_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn spec(v: Value) -> JsonMap {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn cron_plans_are_normalised_and_zoned() {
        let now = at("2026-01-01T00:00:00Z");
        let p = plan(
            ScheduleType::Cron,
            &spec(json!({"cron": "  0   9 * *  * "})),
            "Europe/Paris",
            now,
            60,
        )
        .unwrap();
        assert_eq!(p.schedule, "0 9 * * *");
        assert_eq!(p.spec, spec(json!({"cron": "0 9 * * *"})));
        assert_eq!(p.next_run, Some(at("2026-01-01T08:00:00Z")));
        assert_eq!(p.end_time, None);
        for (bad, msg) in [
            (json!({}), "cron schedule requires schedule_spec.cron"),
            (
                json!({"cron": 5}),
                "cron schedule requires schedule_spec.cron",
            ),
            (
                json!({"cron": "0 0 9 * * *"}),
                "Cron expression must contain exactly 5 fields",
            ),
        ] {
            let e = plan(ScheduleType::Cron, &spec(bad), "UTC", now, 60).unwrap_err();
            assert_eq!(e.to_string(), msg);
        }
        assert!(matches!(
            plan(
                ScheduleType::Cron,
                &spec(json!({"cron": "99 * * * *"})),
                "UTC",
                now,
                60
            ),
            Err(RuntimeError::Invalid(_))
        ));
        let e = plan(
            ScheduleType::Cron,
            &spec(json!({"cron": "* * * * *"})),
            "Mars/Base",
            now,
            60,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "Unknown timezone: Mars/Base");
    }

    #[test]
    fn once_plans_fire_once_at_run_at() {
        let now = at("2026-03-01T10:00:00Z");
        // Naive times are wall-clock time in the task's zone.
        let p = plan(
            ScheduleType::Once,
            &spec(json!({"run_at": "2026-03-01T12:30"})),
            "Asia/Tokyo",
            at("2026-03-01T00:00:00Z"),
            60,
        )
        .unwrap();
        assert_eq!(p.next_run, Some(at("2026-03-01T03:30:00Z")));
        assert_eq!(p.end_time, p.next_run);
        assert_eq!(p.schedule, "30 12 1 3 *");
        // Its schedule has no tick after it fired.
        let fired = at("2026-03-01T03:30:01Z");
        assert_eq!(
            next_run(&p.schedule, Some("Asia/Tokyo"), fired, p.end_time).unwrap(),
            None
        );
        let p = plan(
            ScheduleType::Once,
            &spec(json!({"run_at": "2026-03-01T11:00:15.500Z"})),
            "UTC",
            now,
            60,
        )
        .unwrap();
        assert_eq!(p.next_run, Some(at("2026-03-01T11:00:15.500Z")));
        assert_eq!(p.schedule, "15 0 11 1 3 *");
        // Seconds first: croner reads six fields as that.
        assert_eq!(
            next_run(&p.schedule, Some("UTC"), now, None).unwrap(),
            Some(at("2026-03-01T11:00:15Z"))
        );
        for (bad, msg) in [
            (json!({}), "once schedule requires run_at".to_string()),
            (
                json!({"run_at": "tomorrow"}),
                "Invalid isoformat string: 'tomorrow'".to_string(),
            ),
            (
                json!({"run_at": "2026-03-01T09:00:00Z"}),
                "once schedule must be in the future".to_string(),
            ),
            (
                json!({"run_at": "2026-03-01T10:00:30Z"}),
                "once schedule must be at least 60 seconds in the future".to_string(),
            ),
        ] {
            let e = plan(ScheduleType::Once, &spec(bad), "UTC", now, 60).unwrap_err();
            assert_eq!(e.to_string(), msg);
        }
    }

    #[test]
    fn unknown_task_keys_survive_a_rewrite() {
        let stored = spec(json!({"title": "t", "future_field": 1, "launch_error": {
            "message": "x", "at": "2026-01-01T00:00:00Z"}}));
        let mut s: TaskSpec = serde_json::from_value(Value::Object(stored.clone())).unwrap();
        assert_eq!(s.launch_error.as_ref().unwrap().message, "x");
        s.launch_error = None;
        s.title = "u".into();
        let m = s.to_map(Some(&stored));
        assert_eq!(m["title"], "u");
        assert_eq!(m["future_field"], 1);
        assert!(!m.contains_key("launch_error"));
        // A malformed task reads as defaults, never a panic.
        let weird: TaskSpec = serde_json::from_value(json!({"title": 5})).unwrap_or_default();
        assert_eq!(weird, TaskSpec::default());
    }
}
