//! DeerFlow's scheduled tasks (`/api/scheduled-tasks*`, crons of the one scheduler, fired by a
//! manual clock) and input polish (`/api/input-polish`), on both backends.

use crate::auth::{Cred, admin_and_users, call};
use crate::helpers::*;
use fawn_runtime::hooks::Point;
use fawn_testkit::{Fault, Turn};
use serde_json::{Value, json};
use std::sync::Arc;

backends!(
    scheduled_tasks_round_trip,
    scheduled_task_requests_are_validated,
    tasks_fire_on_schedule_and_pause_stops_them,
    trigger_runs_a_task_now,
    one_off_tasks_fire_once,
    scheduled_tasks_belong_to_their_user,
    input_polish_rewrites_drafts,
    input_polish_follows_the_config,
);

/// A server whose crons only fire on `tick_crons` (by `clock`), with `scheduler.enabled` as
/// given; authentication on when `auth`.
async fn spawn_sched(db: Db, enabled: bool, auth: bool) -> Option<(TestApp, ManualClock)> {
    let clock = ManualClock::new();
    let c2 = clock.clone();
    let app = spawn_with(Spawn {
        tweak: Some(Box::new(move |o| {
            o.clock = Some(Arc::new(move || c2.now()));
            o.cron_interval = std::time::Duration::from_secs(3600);
            if auth {
                o.auth = fawn_server::auth::AuthOptions::enabled();
            }
        })),
        settings: Some(Box::new(move |s| {
            s.app.scheduler.enabled = enabled;
            s.app.scheduler.max_concurrent_runs = 2;
        })),
        ..Spawn::new(db)
    })
    .await?;
    Some((app, clock))
}

async fn req(app: &TestApp, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = call(app, &Cred::Anon, method, path, body).await;
    (r.status, r.body)
}

fn daily(title: &str) -> Value {
    json!({
        "title": title,
        "prompt": "Summarise the news",
        "schedule_type": "cron",
        "schedule_spec": {"cron": "0 9 * * *"},
        "timezone": "UTC",
    })
}

fn every_minute(title: &str) -> Value {
    json!({
        "title": title,
        "prompt": "tick",
        "schedule_type": "cron",
        "schedule_spec": {"cron": "* * * * *"},
        "timezone": "UTC",
    })
}

fn iso(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `t` to the whole second (what [`iso`] writes).
fn secs(t: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(t.timestamp(), 0).unwrap()
}

fn time(v: &Value) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .with_timezone(&chrono::Utc)
}

async fn task(app: &TestApp, id: &str) -> Value {
    let (s, t) = req(app, "GET", &format!("/api/scheduled-tasks/{id}"), None).await;
    assert_eq!(s, 200, "{t}");
    t
}

async fn task_runs(app: &TestApp, id: &str) -> Vec<Value> {
    let (s, r) = req(app, "GET", &format!("/api/scheduled-tasks/{id}/runs"), None).await;
    assert_eq!(s, 200, "{r}");
    r.as_array().unwrap().clone()
}

/// Waits until the task's newest run finished; returns it.
async fn settled_run(app: &TestApp, id: &str) -> Value {
    let runs = task_runs(app, id).await;
    let r = &runs[0];
    app.wait_run(
        r["thread_id"].as_str().unwrap(),
        r["run_id"].as_str().unwrap(),
    )
    .await;
    task_runs(app, id).await[0].clone()
}

async fn scheduled_tasks_round_trip(db: Db) {
    let Some((app, clock)) = spawn_sched(db, true, false).await else {
        return;
    };
    let (s, l) = req(&app, "GET", "/api/scheduled-tasks", None).await;
    assert_eq!((s, l), (200, json!([])));

    let (s, t) = req(&app, "POST", "/api/scheduled-tasks", Some(daily("Digest"))).await;
    assert_eq!(s, 200, "{t}");
    let id = t["id"].as_str().unwrap().to_string();
    for (k, v) in [
        ("title", json!("Digest")),
        ("prompt", json!("Summarise the news")),
        ("context_mode", json!("fresh_thread_per_run")),
        ("thread_id", Value::Null),
        ("assistant_id", json!("lead_agent")),
        ("schedule_type", json!("cron")),
        ("schedule_spec", json!({"cron": "0 9 * * *"})),
        ("timezone", json!("UTC")),
        ("status", json!("enabled")),
        ("overlap_policy", json!("skip")),
        ("last_run_at", Value::Null),
        ("last_run_id", Value::Null),
        ("last_thread_id", Value::Null),
        ("last_error", Value::Null),
        ("run_count", json!(0)),
    ] {
        assert_eq!(t[k], v, "{k}: {t}");
    }
    let next = time(&t["next_run_at"]);
    assert!(next > clock.now() && next <= clock.now() + chrono::Duration::days(1));
    assert_eq!(next.format("%H:%M:%S").to_string(), "09:00:00");
    assert_eq!(task(&app, &id).await, t);
    let (_, l) = req(&app, "GET", "/api/scheduled-tasks", None).await;
    assert_eq!(l, json!([t.clone()]));

    // One scheduler, two APIs: the task is a cron of the LangGraph API.
    let (s, c) = app.get_json(&format!("/runs/crons/{id}")).await;
    assert_eq!(s, 200, "{c}");
    assert_eq!(c["schedule"], "0 9 * * *");
    assert_eq!(c["timezone"], "UTC");
    assert_eq!(time(&c["next_run_date"]), next);
    assert_eq!(
        c["payload"]["input"],
        user_input("Summarise the news"),
        "{c}"
    );
    assert_eq!(c["on_run_completed"], "keep");
    let (_, found) = app.post_json("/runs/crons/search", json!({})).await;
    assert!(
        found
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["cron_id"] == id.as_str()),
        "{found}"
    );

    // PATCH: only what is given changes; a new schedule is planned again.
    let (s, u) = req(
        &app,
        "PATCH",
        &format!("/api/scheduled-tasks/{id}"),
        Some(json!({
            "title": "Weekly digest",
            "prompt": "Summarise the week",
            "schedule_spec": {"cron": "30  8 * *   1"},
            "timezone": "Europe/Paris",
            "thread_id": null,
        })),
    )
    .await;
    assert_eq!(s, 200, "{u}");
    assert_eq!(u["title"], "Weekly digest");
    assert_eq!(u["prompt"], "Summarise the week");
    assert_eq!(u["schedule_spec"], json!({"cron": "30 8 * * 1"}));
    assert_eq!(u["timezone"], "Europe/Paris");
    assert_eq!(u["created_at"], t["created_at"]);
    let next = time(&u["next_run_at"]);
    assert_eq!(
        Some(next),
        fawn_runtime::crons::next_run("30 8 * * 1", Some("Europe/Paris"), clock.now(), None)
            .unwrap()
    );
    assert_eq!(next.format("%a").to_string(), "Mon");
    let (_, c) = app.get_json(&format!("/runs/crons/{id}")).await;
    assert_eq!(
        (&c["schedule"], &c["timezone"]),
        (&json!("30 8 * * 1"), &json!("Europe/Paris"))
    );
    assert_eq!(c["payload"]["input"], user_input("Summarise the week"));
    // An empty patch changes nothing.
    let (s, same) = req(
        &app,
        "PATCH",
        &format!("/api/scheduled-tasks/{id}"),
        Some(json!({})),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        (&same["title"], &same["next_run_at"]),
        (&u["title"], &u["next_run_at"])
    );

    // Delete; then it is gone from both APIs.
    let (s, d) = req(&app, "DELETE", &format!("/api/scheduled-tasks/{id}"), None).await;
    assert_eq!((s, d), (200, json!({"id": id, "deleted": true})));
    for (m, p) in [
        ("GET", format!("/api/scheduled-tasks/{id}")),
        ("DELETE", format!("/api/scheduled-tasks/{id}")),
        ("GET", format!("/api/scheduled-tasks/{id}/runs")),
    ] {
        let (s, e) = req(&app, m, &p, None).await;
        assert_eq!(
            (s, &e["detail"]),
            (404, &json!("Scheduled task not found")),
            "{m} {p}"
        );
    }
    assert_eq!(app.get_json(&format!("/runs/crons/{id}")).await.0, 404);

    // Deleting the cron through the LangGraph API deletes the task.
    let (_, t2) = req(&app, "POST", "/api/scheduled-tasks", Some(daily("Other"))).await;
    let id2 = t2["id"].as_str().unwrap();
    assert_eq!(app.delete(&format!("/runs/crons/{id2}")).await, 204);
    assert_eq!(
        req(&app, "GET", &format!("/api/scheduled-tasks/{id2}"), None)
            .await
            .0,
        404
    );
    // A plain LangGraph cron is not a task.
    let (_, plain) = app
        .post_json(
            "/runs/crons",
            json!({"assistant_id": "lead_agent", "schedule": "0 0 1 1 *"}),
        )
        .await;
    let plain_id = plain["cron_id"].as_str().unwrap();
    assert_eq!(
        req(
            &app,
            "GET",
            &format!("/api/scheduled-tasks/{plain_id}"),
            None
        )
        .await
        .0,
        404
    );
    let (_, l) = req(&app, "GET", "/api/scheduled-tasks", None).await;
    assert_eq!(l, json!([]));
    app.stop().await;
}

async fn scheduled_task_requests_are_validated(db: Db) {
    let Some((app, clock)) = spawn_sched(db, true, false).await else {
        return;
    };
    let soon = iso(clock.now() + chrono::Duration::seconds(30));
    let past = iso(clock.now() - chrono::Duration::seconds(30));
    let with = |patch: Value| {
        let mut b = daily("t");
        for (k, v) in patch.as_object().unwrap() {
            if v.is_null() {
                b.as_object_mut().unwrap().remove(k);
            } else {
                b[k] = v.clone();
            }
        }
        b
    };
    for (body, status, detail) in [
        (with(json!({"title": null})), 422, None),
        (with(json!({"title": ""})), 422, None),
        (with(json!({"prompt": 5})), 422, None),
        (with(json!({"schedule_spec": "0 9 * * *"})), 422, None),
        (
            with(json!({"context_mode": "sometimes"})),
            422,
            Some("Unsupported context_mode"),
        ),
        (
            with(json!({"context_mode": "reuse_thread"})),
            422,
            Some("reuse_thread requires thread_id"),
        ),
        (
            with(json!({"context_mode": "reuse_thread", "thread_id": "not a thread!"})),
            422,
            None,
        ),
        (
            with(json!({"context_mode": "reuse_thread",
                        "thread_id": "6ba7b821-9dad-11d1-80b4-00c04fd430c8"})),
            404,
            Some("Thread not found"),
        ),
        (
            with(json!({"schedule_type": "weekly"})),
            422,
            Some("Unsupported schedule_type"),
        ),
        (
            with(json!({"schedule_spec": {}})),
            422,
            Some("cron schedule requires schedule_spec.cron"),
        ),
        (
            with(json!({"schedule_spec": {"cron": "0 0 9 * * *"}})),
            422,
            Some("Cron expression must contain exactly 5 fields"),
        ),
        (
            with(json!({"schedule_spec": {"cron": "99 * * * *"}})),
            422,
            None,
        ),
        (
            with(json!({"timezone": "Mars/Olympus"})),
            422,
            Some("Unknown timezone: Mars/Olympus"),
        ),
        (
            with(json!({"schedule_type": "once", "schedule_spec": {}})),
            422,
            Some("once schedule requires run_at"),
        ),
        (
            with(json!({"schedule_type": "once", "schedule_spec": {"run_at": "soon"}})),
            422,
            Some("Invalid isoformat string: 'soon'"),
        ),
        (
            with(json!({"schedule_type": "once", "schedule_spec": {"run_at": past}})),
            422,
            Some("once schedule must be in the future"),
        ),
        (
            with(json!({"schedule_type": "once", "schedule_spec": {"run_at": soon}})),
            422,
            Some("once schedule must be at least 60 seconds in the future"),
        ),
    ] {
        let (s, e) = req(&app, "POST", "/api/scheduled-tasks", Some(body.clone())).await;
        assert_eq!(s, status, "{body} → {e}");
        if let Some(d) = detail {
            assert_eq!(e["detail"], d, "{body}");
        }
    }
    let (s, e) = req(&app, "POST", "/api/scheduled-tasks", Some(json!("x"))).await;
    assert_eq!(s, 422, "{e}");
    let (_, l) = req(&app, "GET", "/api/scheduled-tasks", None).await;
    assert_eq!(l, json!([]), "nothing was created");

    // The same rules on PATCH; a failed patch changes nothing.
    let (_, t) = req(&app, "POST", "/api/scheduled-tasks", Some(daily("t"))).await;
    let id = t["id"].as_str().unwrap().to_string();
    let path = format!("/api/scheduled-tasks/{id}");
    for (body, status) in [
        (json!({"timezone": "Nowhere/Land"}), 422),
        (json!({"schedule_spec": {"cron": "every day"}}), 422),
        (json!({"schedule_spec": {}}), 422),
        (json!({"context_mode": "reuse_thread"}), 422),
        (json!({"title": ""}), 422),
        (json!({"context_mode": "x"}), 422),
        (
            json!({"context_mode": "reuse_thread", "thread_id": "6ba7b821-9dad-11d1-80b4-00c04fd430c8"}),
            404,
        ),
        (json!({"schedule_spec": [1]}), 422),
    ] {
        let (s, e) = req(&app, "PATCH", &path, Some(body.clone())).await;
        assert_eq!(s, status, "{body} → {e}");
    }
    assert_eq!(task(&app, &id).await, t);
    for q in ["limit=0", "limit=201", "limit=x", "offset=-1"] {
        let (s, e) = req(&app, "GET", &format!("{path}/runs?{q}"), None).await;
        assert_eq!(s, 422, "{q}: {e}");
    }
    let (s, r) = req(
        &app,
        "GET",
        &format!("{path}/runs?limit=200&offset=5"),
        None,
    )
    .await;
    assert_eq!((s, r), (200, json!([])));
    // Unknown tasks are 404 on every route.
    for (m, p) in [
        ("GET", "/api/scheduled-tasks/nope"),
        ("PATCH", "/api/scheduled-tasks/nope"),
        ("DELETE", "/api/scheduled-tasks/nope"),
        ("POST", "/api/scheduled-tasks/nope/pause"),
        ("POST", "/api/scheduled-tasks/nope/resume"),
        ("POST", "/api/scheduled-tasks/nope/trigger"),
        ("GET", "/api/scheduled-tasks/nope/runs"),
        (
            "GET",
            "/api/scheduled-tasks/6ba7b821-9dad-11d1-80b4-00c04fd430c8",
        ),
    ] {
        let body = (m != "GET" && m != "DELETE").then(|| json!({}));
        let (s, e) = req(&app, m, p, body).await;
        assert_eq!(
            (s, &e["detail"]),
            (404, &json!("Scheduled task not found")),
            "{m} {p}"
        );
    }
    app.stop().await;
}

async fn tasks_fire_on_schedule_and_pause_stops_them(db: Db) {
    let Some((app, clock)) = spawn_sched(db, true, false).await else {
        return;
    };
    let (s, t) = req(
        &app,
        "POST",
        "/api/scheduled-tasks",
        Some(every_minute("Ticker")),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    let id = t["id"].as_str().unwrap().to_string();
    assert_eq!(app.tick_crons().await, 0, "not due yet");
    clock.advance(61);
    assert_eq!(app.tick_crons().await, 1);
    let run = settled_run(&app, &id).await;
    assert_eq!(run["trigger"], "scheduled");
    assert_eq!(run["status"], "success", "{run}");
    assert_eq!(run["task_id"], id.as_str());
    assert_eq!(run["error"], Value::Null);
    assert!(run["finished_at"].is_string());
    assert_eq!(time(&run["scheduled_for"]), time(&t["next_run_at"]));
    // The run went to a thread of its own, kept and the caller's, asked the prompt.
    let tid = run["thread_id"].as_str().unwrap().to_string();
    let (s, th) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(s, 200, "{th}");
    let (_, r) = app
        .get_json(&format!(
            "/threads/{tid}/runs/{}",
            run["run_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(r["metadata"]["cron_id"], id.as_str());
    assert_eq!(r["metadata"]["scheduled_task_id"], id.as_str());
    let t = task(&app, &id).await;
    assert_eq!(t["run_count"], 1);
    assert_eq!(t["last_run_id"], run["run_id"]);
    assert_eq!(t["last_thread_id"], tid.as_str());
    assert_eq!(t["status"], "enabled");
    assert!(time(&t["next_run_at"]) > clock.now());

    // Paused: nothing fires.
    let (s, p) = req(
        &app,
        "POST",
        &format!("/api/scheduled-tasks/{id}/pause"),
        None,
    )
    .await;
    assert_eq!((s, &p["status"]), (200, &json!("paused")), "{p}");
    let (_, c) = app.get_json(&format!("/runs/crons/{id}")).await;
    assert_eq!(c["enabled"], false, "pause is the cron's enabled");
    clock.advance(180);
    assert_eq!(app.tick_crons().await, 0, "a paused task does not fire");
    assert_eq!(task_runs(&app, &id).await.len(), 1);
    // Resumed: the occurrence it missed fires at the next tick, then the schedule goes on.
    let (s, r) = req(
        &app,
        "POST",
        &format!("/api/scheduled-tasks/{id}/resume"),
        None,
    )
    .await;
    assert_eq!((s, &r["status"]), (200, &json!("enabled")), "{r}");
    assert_eq!(app.tick_crons().await, 1);
    let second = settled_run(&app, &id).await;
    assert_ne!(
        second["thread_id"], run["thread_id"],
        "a fresh thread per run"
    );
    assert_eq!(app.tick_crons().await, 0);
    clock.advance(60);
    assert_eq!(app.tick_crons().await, 1);
    settled_run(&app, &id).await;
    let runs = task_runs(&app, &id).await;
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[2]["run_id"], run["run_id"], "newest first");
    let (_, page) = req(
        &app,
        "GET",
        &format!("/api/scheduled-tasks/{id}/runs?limit=1&offset=1"),
        None,
    )
    .await;
    assert_eq!(page, json!([runs[1].clone()]));
    assert_eq!(task(&app, &id).await["run_count"], 3);
    // Pausing through the LangGraph API is the same switch.
    let (s, _) = app
        .patch_json(&format!("/runs/crons/{id}"), json!({"enabled": false}))
        .await;
    assert_eq!(s, 200);
    assert_eq!(task(&app, &id).await["status"], "paused");
    app.stop().await;
}

async fn trigger_runs_a_task_now(db: Db) {
    // scheduler.enabled off (DeerFlow's default): tasks never fire on their own, plain
    // LangGraph crons still do, and a task can be run by hand.
    let Some((app, clock)) = spawn_sched(db, false, false).await else {
        return;
    };
    let tid = app.create_thread().await;
    let mut body = every_minute("On my thread");
    body["context_mode"] = json!("reuse_thread");
    body["thread_id"] = json!(tid);
    let (s, t) = req(&app, "POST", "/api/scheduled-tasks", Some(body)).await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(t["thread_id"], tid.as_str());
    let id = t["id"].as_str().unwrap().to_string();
    let scheduled_next = t["next_run_at"].clone();
    let (_, other) = req(&app, "POST", "/api/scheduled-tasks", Some(daily("Fresh"))).await;
    let other_id = other["id"].as_str().unwrap().to_string();
    let (s, plain) = app
        .post_json(
            &format!("/threads/{tid}/runs/crons"),
            json!({"assistant_id": "lead_agent", "schedule": "* * * * *", "input": user_input("plain")}),
        )
        .await;
    assert_eq!(s, 200, "{plain}");
    clock.advance(61);
    assert_eq!(app.tick_crons().await, 1, "only the plain cron fires");
    let (_, runs) = app.get_json(&format!("/threads/{tid}/runs")).await;
    let plain_run = runs[0]["run_id"].as_str().unwrap().to_string();
    app.wait_run(&tid, &plain_run).await;
    assert!(task_runs(&app, &id).await.is_empty());
    assert_eq!(task(&app, &id).await["status"], "enabled");

    // The thread lists the task running on it (and only that one).
    let (s, on_thread) = req(
        &app,
        "GET",
        &format!("/api/threads/{tid}/scheduled-tasks"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    let ids: Vec<&str> = on_thread
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()]);
    let other_thread = app.create_thread().await;
    let (_, none) = req(
        &app,
        "GET",
        &format!("/api/threads/{other_thread}/scheduled-tasks"),
        None,
    )
    .await;
    assert_eq!(none, json!([]));

    // Trigger: a run now, on the task's thread, in its history as manual.
    let mut claimed = app.hooks().pause(Point::Claimed, 1);
    let (s, r) = req(
        &app,
        "POST",
        &format!("/api/scheduled-tasks/{id}/trigger"),
        None,
    )
    .await;
    assert_eq!((s, r), (200, json!({"id": id, "triggered": true})));
    let rid = claimed.reached().await;
    let runs = task_runs(&app, &id).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (
            &runs[0]["run_id"],
            &runs[0]["trigger"],
            &runs[0]["thread_id"]
        ),
        (&json!(rid), &json!("manual"), &json!(tid))
    );
    assert_eq!(runs[0]["status"], "running");
    assert_eq!(runs[0]["finished_at"], Value::Null);
    // While it runs: a second trigger is a conflict, and so is a second task's run once
    // the active scheduled runs are at max_concurrent_runs (2).
    let (s, e) = req(
        &app,
        "POST",
        &format!("/api/scheduled-tasks/{id}/trigger"),
        None,
    )
    .await;
    assert_eq!(
        (s, &e["detail"]),
        (409, &json!("task already has an active run"))
    );
    let mut claimed2 = app.hooks().pause(Point::Claimed, 1);
    let (s, _) = req(
        &app,
        "POST",
        &format!("/api/scheduled-tasks/{other_id}/trigger"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    let rid2 = claimed2.reached().await;
    let (_, third) = req(&app, "POST", "/api/scheduled-tasks", Some(daily("Third"))).await;
    let (s, e) = req(
        &app,
        "POST",
        &format!(
            "/api/scheduled-tasks/{}/trigger",
            third["id"].as_str().unwrap()
        ),
        None,
    )
    .await;
    assert_eq!(
        (s, &e["detail"]),
        (409, &json!("global concurrent-run limit reached"))
    );
    claimed.resume();
    claimed2.resume();
    app.wait_run(&tid, &rid).await;
    let other_runs = task_runs(&app, &other_id).await;
    assert_eq!(other_runs[0]["run_id"], rid2.as_str());
    settled_run(&app, &other_id).await;
    let run = settled_run(&app, &id).await;
    assert_eq!(run["status"], "success");
    let t = task(&app, &id).await;
    assert_eq!(
        (&t["run_count"], &t["last_run_id"]),
        (&json!(1), &json!(rid))
    );
    // Neither the schedule (never fired: the scheduler is off) nor a manual run moved it.
    assert_eq!(t["next_run_at"], scheduled_next);
    app.stop().await;
}

async fn one_off_tasks_fire_once(db: Db) {
    let Some((app, clock)) = spawn_sched(db, true, false).await else {
        return;
    };
    let run_at = secs(clock.now() + chrono::Duration::seconds(120));
    let body = json!({
        "title": "Remind me",
        "prompt": "Remind me to stretch",
        "schedule_type": "once",
        "schedule_spec": {"run_at": iso(run_at)},
        "timezone": "Asia/Tokyo",
    });
    let (s, t) = req(&app, "POST", "/api/scheduled-tasks", Some(body.clone())).await;
    assert_eq!(s, 200, "{t}");
    let id = t["id"].as_str().unwrap().to_string();
    assert_eq!(t["schedule_type"], "once");
    assert_eq!(t["schedule_spec"], json!({"run_at": iso(run_at)}));
    assert_eq!(time(&t["next_run_at"]), run_at);
    assert_eq!(t["status"], "enabled");
    // The LangGraph view: a cron that ends at its only tick.
    let (_, c) = app.get_json(&format!("/runs/crons/{id}")).await;
    assert_eq!(time(&c["end_time"]), run_at, "{c}");
    assert_eq!(c["timezone"], "Asia/Tokyo");

    clock.advance(60);
    assert_eq!(app.tick_crons().await, 0, "not yet");
    clock.advance(61);
    let mut claimed = app.hooks().pause(Point::Claimed, 1);
    assert_eq!(app.tick_crons().await, 1);
    let rid = claimed.reached().await;
    let t = task(&app, &id).await;
    assert_eq!(t["status"], "running", "{t}");
    assert_eq!(t["next_run_at"], Value::Null);
    // A task whose one-off run is active is not changed.
    for (m, p, b) in [
        (
            "PATCH",
            format!("/api/scheduled-tasks/{id}"),
            Some(json!({"title": "x"})),
        ),
        ("POST", format!("/api/scheduled-tasks/{id}/pause"), None),
        ("POST", format!("/api/scheduled-tasks/{id}/resume"), None),
    ] {
        let (s, e) = req(&app, m, &p, b).await;
        assert_eq!(s, 409, "{m} {p}: {e}");
    }
    claimed.resume();
    let run = settled_run(&app, &id).await;
    assert_eq!(run["run_id"], rid.as_str());
    let t = task(&app, &id).await;
    assert_eq!(
        (&t["status"], &t["run_count"]),
        (&json!("completed"), &json!(1))
    );
    clock.advance(86_400 * 400);
    assert_eq!(app.tick_crons().await, 0, "it fired once");
    assert_eq!(task_runs(&app, &id).await.len(), 1);

    // Moving a finished one-off task ahead re-arms it.
    let later = secs(clock.now() + chrono::Duration::hours(2));
    let (s, u) = req(
        &app,
        "PATCH",
        &format!("/api/scheduled-tasks/{id}"),
        Some(json!({"schedule_spec": {"run_at": iso(later)}})),
    )
    .await;
    assert_eq!(s, 200, "{u}");
    assert_eq!(
        (&u["status"], time(&u["next_run_at"])),
        (&json!("enabled"), later)
    );

    // A one-off task run by hand is used up: it does not fire again at its time. A naive
    // run_at is wall-clock time in the task's zone.
    let tokyo = (clock.now() + chrono::Duration::hours(1))
        .with_timezone(&chrono::FixedOffset::east_opt(9 * 3600).unwrap())
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    let mut b2 = body.clone();
    b2["schedule_spec"] = json!({"run_at": tokyo});
    let (s, t2) = req(&app, "POST", "/api/scheduled-tasks", Some(b2)).await;
    assert_eq!(s, 200, "{t2}");
    let id2 = t2["id"].as_str().unwrap().to_string();
    assert_eq!(
        time(&t2["next_run_at"]),
        secs(clock.now() + chrono::Duration::hours(1))
    );
    let (s, _) = req(
        &app,
        "POST",
        &format!("/api/scheduled-tasks/{id2}/trigger"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    let run = settled_run(&app, &id2).await;
    assert_eq!(run["trigger"], "manual");
    let t2 = task(&app, &id2).await;
    assert_eq!(
        (&t2["status"], &t2["next_run_at"]),
        (&json!("completed"), &Value::Null)
    );
    clock.advance(7200);
    // Only the re-armed first task is due.
    assert_eq!(app.tick_crons().await, 1);
    assert_eq!(task_runs(&app, &id2).await.len(), 1);
    settled_run(&app, &id).await;
    app.stop().await;
}

async fn scheduled_tasks_belong_to_their_user(db: Db) {
    let Some((app, _clock)) = spawn_sched(db, true, true).await else {
        return;
    };
    let (admin, alice, bob) = admin_and_users(&app).await;
    let t = call(&app, &alice, "POST", "/threads", Some(json!({}))).await;
    let alice_thread = t.body["thread_id"].as_str().unwrap().to_string();
    let t = call(&app, &bob, "POST", "/threads", Some(json!({}))).await;
    let bob_thread = t.body["thread_id"].as_str().unwrap().to_string();
    let mut body = daily("Alice's");
    body["context_mode"] = json!("reuse_thread");
    body["thread_id"] = json!(alice_thread);
    let r = call(
        &app,
        &alice,
        "POST",
        "/api/scheduled-tasks",
        Some(body.clone()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    assert!(r.body["user_id"].is_string());
    // Nobody else sees or touches it: 404, as for a missing task (an admin too).
    for who in [&bob, &admin] {
        for (m, p, b) in [
            ("GET", format!("/api/scheduled-tasks/{id}"), None),
            (
                "PATCH",
                format!("/api/scheduled-tasks/{id}"),
                Some(json!({"title": "mine"})),
            ),
            ("POST", format!("/api/scheduled-tasks/{id}/pause"), None),
            ("POST", format!("/api/scheduled-tasks/{id}/resume"), None),
            ("POST", format!("/api/scheduled-tasks/{id}/trigger"), None),
            ("GET", format!("/api/scheduled-tasks/{id}/runs"), None),
            ("DELETE", format!("/api/scheduled-tasks/{id}"), None),
            ("GET", format!("/runs/crons/{id}"), None),
        ] {
            let r = call(&app, who, m, &p, b).await;
            assert_eq!(r.status, 404, "{m} {p}: {}", r.body);
        }
        let r = call(&app, who, "GET", "/api/scheduled-tasks", None).await;
        assert_eq!(r.body, json!([]));
        let r = call(
            &app,
            who,
            "GET",
            &format!("/api/threads/{alice_thread}/scheduled-tasks"),
            None,
        )
        .await;
        assert_eq!(r.status, 404, "{}", r.body);
    }
    // Nor can a task be put on someone else's thread.
    body["thread_id"] = json!(bob_thread);
    let r = call(&app, &alice, "POST", "/api/scheduled-tasks", Some(body)).await;
    assert_eq!(
        (r.status, &r.body["detail"]),
        (404, &json!("Thread not found"))
    );
    let r = call(
        &app,
        &alice,
        "PATCH",
        &format!("/api/scheduled-tasks/{id}"),
        Some(json!({"thread_id": bob_thread})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    // The owner sees it everywhere, unchanged.
    let r = call(&app, &alice, "GET", "/api/scheduled-tasks", None).await;
    assert_eq!(r.body.as_array().unwrap().len(), 1);
    assert_eq!(r.body[0]["title"], "Alice's");
    assert_eq!(r.body[0]["thread_id"], alice_thread.as_str());
    let r = call(
        &app,
        &alice,
        "GET",
        &format!("/api/threads/{alice_thread}/scheduled-tasks"),
        None,
    )
    .await;
    assert_eq!(r.body.as_array().unwrap().len(), 1);
    // Bob's own task is his alone.
    let r = call(
        &app,
        &bob,
        "POST",
        "/api/scheduled-tasks",
        Some(daily("Bob's")),
    )
    .await;
    assert_eq!(r.status, 200);
    let r = call(&app, &alice, "GET", "/api/scheduled-tasks", None).await;
    assert_eq!(r.body.as_array().unwrap().len(), 1);
    // A triggered run acts for the owner: its thread is hers.
    let r = call(
        &app,
        &alice,
        "POST",
        &format!("/api/scheduled-tasks/{id}/trigger"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call(
        &app,
        &alice,
        "GET",
        &format!("/api/scheduled-tasks/{id}/runs"),
        None,
    )
    .await;
    let rid = r.body[0]["run_id"].as_str().unwrap().to_string();
    let r = call(
        &app,
        &bob,
        "GET",
        &format!("/threads/{alice_thread}/runs/{rid}"),
        None,
    )
    .await;
    assert_eq!(r.status, 404);
    let r = call(
        &app,
        &alice,
        "GET",
        &format!("/threads/{alice_thread}/runs/{rid}"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call(
        &app,
        &alice,
        "DELETE",
        &format!("/api/scheduled-tasks/{id}"),
        None,
    )
    .await;
    assert_eq!(r.status, 200);
    app.stop().await;
}

async fn polish(app: &TestApp, body: Value) -> (u16, Value) {
    req(app, "POST", "/api/input-polish", Some(body)).await
}

async fn input_polish_rewrites_drafts(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    app.mock.push(Turn::text(
        "<think>make it precise</think>\n```text\nWrite a 300-word summary of /data/report.md in French.\n```",
    ));
    let (s, r) = polish(
        &app,
        json!({"text": "  summarise /data/report.md  ", "locale": "fr-FR", "thread_id": "t1"}),
    )
    .await;
    assert_eq!(
        (s, r),
        (
            200,
            json!({"rewritten_text": "Write a 300-word summary of /data/report.md in French.",
                   "changed": true})
        )
    );
    let asked = app.mock.chat_requests().pop().unwrap();
    let text = serde_json::to_string(&asked.messages()).unwrap();
    assert!(
        text.contains("summarise /data/report.md") && text.contains("fr-FR"),
        "{text}"
    );
    // Unchanged drafts say so.
    app.mock.push(Turn::text("Summarise the report."));
    let (_, r) = polish(&app, json!({"text": "Summarise the report."})).await;
    assert_eq!(r["changed"], false);

    // Too long (4000 characters by default, counted as characters, not bytes), empty,
    // malformed: refused before any model call.
    let before = app.mock.chat_requests().len();
    let (s, r) = polish(&app, json!({"text": "é".repeat(4001)})).await;
    assert_eq!(
        (s, &r["detail"]),
        (400, &json!("Input text exceeds 4000 characters"))
    );
    app.mock.push(Turn::text("ok"));
    let (s, _) = polish(&app, json!({"text": "é".repeat(4000)})).await;
    assert_eq!(s, 200);
    let before = before + 1;
    let (s, r) = polish(&app, json!({"text": "   "})).await;
    assert_eq!((s, &r["detail"]), (400, &json!("Input text is required")));
    for bad in [json!({}), json!({"text": 5}), json!({"text": ["a"]})] {
        let (s, r) = polish(&app, bad.clone()).await;
        assert_eq!(s, 422, "{bad}: {r}");
    }
    assert_eq!(app.mock.chat_requests().len(), before);

    // A model failure, or an answer with nothing in it, is DeerFlow's 503.
    for turn in [
        Turn::fault(Fault::ServerError),
        Turn::fault(Fault::Unauthorized),
        Turn::text("<think>nothing to say</think>"),
        Turn::text("   "),
    ] {
        app.mock.push(turn);
        let (s, r) = polish(&app, json!({"text": "fix this"})).await;
        assert_eq!(
            (s, &r["detail"]),
            (503, &json!("Failed to polish input")),
            "{r}"
        );
    }
    app.stop().await;
}

async fn input_polish_follows_the_config(db: Db) {
    let Some(app) = spawn_with(Spawn {
        settings: Some(Box::new(|s| {
            s.app.input_polish.max_chars = 10;
            s.app.input_polish.model_name = Some("nope".into());
        })),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let (s, r) = polish(&app, json!({"text": "eleven char"})).await;
    assert_eq!(
        (s, &r["detail"]),
        (400, &json!("Input text exceeds 10 characters"))
    );
    // An unknown model is a 503, without a call.
    let before = app.mock.chat_requests().len();
    let (s, _) = polish(&app, json!({"text": "ten chars!"})).await;
    assert_eq!(s, 503);
    assert_eq!(app.mock.chat_requests().len(), before);
    app.stop().await;

    let Some(app) = spawn_with(Spawn {
        settings: Some(Box::new(|s| s.app.input_polish.enabled = false)),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let (s, r) = polish(&app, json!({"text": "hi"})).await;
    assert_eq!(
        (s, &r["detail"]),
        (404, &json!("Input polishing is disabled"))
    );
    app.stop().await;
}
