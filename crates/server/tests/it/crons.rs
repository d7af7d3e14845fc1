//! Crons fire on time (a manual clock drives the scheduler).

use crate::helpers::*;
use serde_json::{Value, json};
use std::sync::Arc;

backends!(crons_fire_on_schedule);

async fn crons_fire_on_schedule(db: Db) {
    let clock = ManualClock::new();
    let c2 = clock.clone();
    let Some(app) = spawn_with(Spawn {
        tweak: Some(Box::new(move |o| {
            o.clock = Some(Arc::new(move || c2.now()));
            o.cron_interval = std::time::Duration::from_secs(3600);
        })),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    // Validation.
    let (s, _) = app
        .post_json(
            "/runs/crons",
            json!({"assistant_id": "lead_agent", "schedule": "every minute"}),
        )
        .await;
    assert_eq!(s, 422);
    let (s, _) = app
        .post_json(
            "/runs/crons",
            json!({"assistant_id": "lead_agent", "schedule": "* * * * *", "timezone": "Mars/Olympus"}),
        )
        .await;
    assert_eq!(s, 422);
    let (s, _) = app
        .post_json(
            "/runs/crons",
            json!({"assistant_id": "nope", "schedule": "* * * * *"}),
        )
        .await;
    assert_eq!(s, 422);
    // A thread cron.
    let tid = app.create_thread().await;
    let (s, cron) = app
        .post_json(
            &format!("/threads/{tid}/runs/crons"),
            json!({"assistant_id": "lead_agent", "schedule": "* * * * *",
                   "input": user_input("tick"), "metadata": {"c": 1}}),
        )
        .await;
    assert_eq!(s, 200, "{cron}");
    assert_eq!(cron["thread_id"], tid.as_str());
    assert_eq!(cron["on_run_completed"], Value::Null);
    assert_eq!(cron["enabled"], true);
    let cron_id = cron["cron_id"].as_str().unwrap().to_string();
    let next =
        chrono::DateTime::parse_from_rfc3339(cron["next_run_date"].as_str().unwrap()).unwrap();
    assert!(next > clock.now() && next <= clock.now() + chrono::Duration::seconds(60));
    // Not due yet: nothing happens. (The scheduler's own interval is an hour: only these
    // explicit ticks fire anything.)
    assert_eq!(app.tick_crons().await, 0);
    let (_, runs) = app.get_json(&format!("/threads/{tid}/runs")).await;
    assert_eq!(runs.as_array().unwrap().len(), 0);
    // A minute later it fires once; its run exists when the tick returns.
    clock.advance(61);
    assert_eq!(app.tick_crons().await, 1);
    let (_, runs) = app.get_json(&format!("/threads/{tid}/runs")).await;
    let rid = runs[0]["run_id"].as_str().unwrap().to_string();
    assert_eq!(runs[0]["metadata"]["cron_id"], cron_id.as_str());
    assert_eq!(app.wait_run(&tid, &rid).await["status"], "success");
    assert_eq!(app.tick_crons().await, 0, "a tick fires once");
    let (_, runs) = app.get_json(&format!("/threads/{tid}/runs")).await;
    assert_eq!(runs.as_array().unwrap().len(), 1, "a tick fires once");
    let (_, c) = app.get_json(&format!("/runs/crons/{cron_id}")).await;
    let next2 = chrono::DateTime::parse_from_rfc3339(c["next_run_date"].as_str().unwrap()).unwrap();
    assert!(next2 > next);
    // Disabled crons do not fire.
    let (s, c) = app
        .patch_json(&format!("/runs/crons/{cron_id}"), json!({"enabled": false}))
        .await;
    assert_eq!(s, 200, "{c}");
    assert_eq!(c["enabled"], false);
    clock.advance(120);
    assert_eq!(app.tick_crons().await, 0, "a disabled cron does not fire");
    let (_, runs) = app.get_json(&format!("/threads/{tid}/runs")).await;
    assert_eq!(runs.as_array().unwrap().len(), 1);
    let (s, _) = app
        .patch_json(&format!("/runs/crons/{cron_id}"), json!({}))
        .await;
    assert_eq!(s, 400);
    // A stateless cron keeps its thread with `keep`.
    let (_, before) = app.post_json("/threads/count", json!({})).await;
    let (s, sc) = app
        .post_json(
            "/runs/crons",
            json!({"assistant_id": "lead_agent", "schedule": "*/5 * * * *",
                   "input": user_input("stateless tick"), "on_run_completed": "keep"}),
        )
        .await;
    assert_eq!(s, 200, "{sc}");
    assert_eq!(sc["on_run_completed"], "keep");
    assert_eq!(sc["thread_id"], Value::Null);
    clock.advance(301);
    assert_eq!(app.tick_crons().await, 1);
    app.eventually("the stateless cron's run finished", || async {
        let (_, n) = app
            .post_json("/threads/count", json!({"status": "idle"}))
            .await;
        n.as_u64().unwrap() > before.as_u64().unwrap()
    })
    .await;
    // Search, count, delete.
    let r = app.post("/runs/crons/search", json!({"limit": 1})).await;
    assert_eq!(r.headers()["x-pagination-total"], "2");
    let (_, n) = app
        .post_json("/runs/crons/count", json!({"thread_id": tid}))
        .await;
    assert_eq!(n, json!(1));
    assert_eq!(app.delete(&format!("/runs/crons/{cron_id}")).await, 204);
    assert_eq!(app.delete(&format!("/runs/crons/{cron_id}")).await, 404);
    app.stop().await;
}
