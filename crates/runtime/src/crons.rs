//! Cron jobs: 5-field schedules (croner), IANA time zones, `end_time`, `enabled`; the
//! scheduler claims due crons through the store (so two processes never fire the same tick)
//! and creates each tick's run through the same normalisation as every other run.
//!
//! DeerFlow's scheduled tasks are crons too (see [`crate::scheduled`]): the same claim fires
//! them, when `scheduler.enabled` is on, within `scheduler.max_concurrent_runs`, and the same
//! [`create`] / [`update`] / [`delete`] (in `write`) validate and store both kinds.

mod write;

pub use write::{CronDraft, create, create_from_body, delete, get, update, update_from_body};
pub(crate) use write::{delete_as, run_body};

use crate::Result;
use crate::create::{CreatedRun, RunTarget, create_run};
use crate::runtime::RuntimeHandle;
use chrono::{DateTime, Utc};
use fawn_checkpoint::{Cron, CronKinds, JsonMap};
use serde_json::{Value, json};

/// Keys of a cron body that are not part of the run it creates at each tick.
pub const CRON_KEYS: &[&str] = &[
    "schedule",
    "timezone",
    "end_time",
    "enabled",
    "on_run_completed",
    "thread_id",
];

/// Parses a cron expression (5 fields; 6 with seconds also accepted).
pub fn parse_schedule(s: &str) -> Result<croner::Cron, String> {
    s.trim()
        .parse::<croner::Cron>()
        .map_err(|e| format!("Invalid cron schedule '{s}': {e}"))
}

/// Parses an IANA time zone name.
pub fn parse_tz(s: &str) -> Result<chrono_tz::Tz, String> {
    s.trim()
        .parse::<chrono_tz::Tz>()
        .map_err(|_| format!("Invalid timezone '{s}'"))
}

/// The first tick strictly after `after`, in `tz` (UTC when `None`); `None` when it would
/// be past `end`.
pub fn next_run(
    schedule: &str,
    tz: Option<&str>,
    after: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
) -> Result<Option<DateTime<Utc>>, String> {
    let cron = parse_schedule(schedule)?;
    let next = match tz.filter(|t| !t.trim().is_empty()) {
        Some(t) => {
            let tz = parse_tz(t)?;
            cron.find_next_occurrence(&after.with_timezone(&tz), false)
                .map(|d| d.with_timezone(&Utc))
                .map_err(|e| e.to_string())?
        }
        None => cron
            .find_next_occurrence(&after, false)
            .map_err(|e| e.to_string())?,
    };
    Ok(match end {
        Some(end) if next > end => None,
        _ => Some(next),
    })
}

/// Looks for due crons every `cron_interval` (or when notified). Runs until the queue stops.
pub async fn scheduler(rt: RuntimeHandle) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(rt.cron_interval) => {}
            _ = rt.cron_notify.notified() => {}
            _ = rt.queue.stopping.cancelled() => return,
        }
        tick(&rt).await;
    }
}

/// Most crons one tick claims (of each kind).
const CLAIM_BATCH: u64 = 50;

/// Fires every due cron once; returns how many fired. Scheduled tasks fire only when
/// `scheduler.enabled` is on, and only as many as `scheduler.max_concurrent_runs` leaves
/// room for (the others stay due).
pub async fn tick(rt: &RuntimeHandle) -> usize {
    let now = rt.now();
    let next = move |c: &Cron| {
        next_run(&c.schedule, c.timezone.as_deref(), now, c.end_time)
            .ok()
            .flatten()
    };
    let mut due = match rt
        .store
        .claim_due_crons_of(now, CLAIM_BATCH, CronKinds::Plain, &next)
        .await
    {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "claiming due crons failed");
            Vec::new()
        }
    };
    let scheduler = &rt.settings.app.scheduler;
    if scheduler.enabled {
        match rt.store.count_active_task_runs().await {
            Ok(active) => {
                let room = scheduler
                    .max_concurrent_runs
                    .saturating_sub(active)
                    .min(CLAIM_BATCH);
                if room > 0 {
                    match rt
                        .store
                        .claim_due_crons_of(now, room, CronKinds::Tasks, &next)
                        .await
                    {
                        Ok(d) => due.extend(d),
                        Err(e) => tracing::warn!(error = %e, "claiming due scheduled tasks failed"),
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "counting active scheduled runs failed"),
        }
    }
    let n = due.len();
    for cron in due {
        if cron.task.is_some() {
            crate::scheduled::fire(rt, &cron, now).await;
        } else {
            fire(rt, &cron).await;
        }
    }
    n
}

async fn fire(rt: &RuntimeHandle, cron: &Cron) {
    match create_cron_run(rt, cron, JsonMap::new()).await {
        Ok(c) => {
            tracing::info!(cron_id = %cron.cron_id, run_id = %c.run.run_id, "cron fired");
        }
        Err(e) => {
            tracing::warn!(cron_id = %cron.cron_id, error = %e, "cron tick could not create a run");
        }
    }
}

/// Creates the run a cron's tick creates, for the cron's user, with `extra` (and
/// `cron_id`) added to its metadata.
pub async fn create_cron_run(
    rt: &RuntimeHandle,
    cron: &Cron,
    extra: JsonMap,
) -> Result<CreatedRun> {
    let mut payload = cron.payload.clone();
    payload.insert("assistant_id".into(), json!(cron.assistant_id));
    for k in CRON_KEYS {
        payload.remove(*k);
    }
    let mut meta = match payload.remove("metadata") {
        Some(Value::Object(m)) => m,
        _ => Default::default(),
    };
    meta.extend(extra);
    meta.insert("cron_id".into(), json!(cron.cron_id));
    payload.insert("metadata".into(), Value::Object(meta));
    let body = run_body(&payload, cron.user_id.clone())?;
    let target = match &cron.thread_id {
        Some(t) => RunTarget::Thread(t.clone()),
        None => RunTarget::CronStateless {
            keep: cron.on_run_completed.as_deref() == Some("keep"),
        },
    };
    create_run(rt, body, target, &[]).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn next_tick_and_end_time() {
        let t = Utc
            .with_ymd_and_hms(2026, 1, 1, 12, 2, 30)
            .single()
            .unwrap();
        let n = next_run("*/5 * * * *", None, t, None).unwrap().unwrap();
        assert_eq!(
            n,
            Utc.with_ymd_and_hms(2026, 1, 1, 12, 5, 0).single().unwrap()
        );
        let end = Utc.with_ymd_and_hms(2026, 1, 1, 12, 3, 0).single().unwrap();
        assert_eq!(next_run("*/5 * * * *", None, t, Some(end)).unwrap(), None);
        assert!(
            next_run("not a cron", None, t, None)
                .unwrap_err()
                .starts_with("Invalid cron schedule 'not a cron': ")
        );
        assert_eq!(
            next_run("* * * * *", Some("Mars/Base"), t, None).unwrap_err(),
            "Invalid timezone 'Mars/Base'"
        );
    }

    #[test]
    fn time_zones_shift_the_tick() {
        // 09:00 in Paris (winter, UTC+1) is 08:00 UTC.
        let t = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().unwrap();
        let n = next_run("0 9 * * *", Some("Europe/Paris"), t, None)
            .unwrap()
            .unwrap();
        assert_eq!(
            n,
            Utc.with_ymd_and_hms(2026, 1, 1, 8, 0, 0).single().unwrap()
        );
    }
}
