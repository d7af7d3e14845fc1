//! A node's capacity: `queue.max_concurrent_runs` runs execute at once; the next ones wait
//! `pending` in the durable queue, and `/metrics` and `/ok` say the node is full.

use crate::helpers::*;
use fawn_runtime::hooks::Point;
use serde_json::{Value, json};

backends!(a_full_node_leaves_new_runs_pending);

async fn background_run(app: &TestApp, text: &str) -> (String, String) {
    let tid = app.create_thread().await;
    let (s, run) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input(text)}),
        )
        .await;
    assert_eq!(s, 200, "{run}");
    assert_eq!(run["status"], "pending", "the run as created: {run}");
    (tid, run["run_id"].as_str().unwrap().to_string())
}

async fn status(app: &TestApp, tid: &str, rid: &str) -> Value {
    let (s, r) = app.get_json(&format!("/threads/{tid}/runs/{rid}")).await;
    assert_eq!(s, 200, "{r}");
    r["status"].clone()
}

async fn a_full_node_leaves_new_runs_pending(db: Db) {
    let mut spec = Spawn::new(db);
    // Through config.yaml's key, as `fawn serve` passes it.
    spec.settings = Some(Box::new(|s| s.app.queue.max_concurrent_runs = Some(2)));
    let Some(app) = spawn_with(spec).await else {
        return;
    };
    let (_, ok) = app.get_json("/ok").await;
    assert_eq!(
        ok["runs"],
        json!({"max_concurrent": 2, "executing": 0, "available": 2, "full": false})
    );

    // The first two runs hold the node's two slots: each waits at the seam once claimed.
    let mut first = app.hooks().pause(Point::Claimed, 1);
    let mut second = app.hooks().pause(Point::Claimed, 2);
    let (t1, r1) = background_run(&app, "one").await;
    // A free slot: the write that created the run claimed it, so it is running as soon as
    // its creation has answered (no claim of its own follows).
    assert_eq!(status(&app, &t1, &r1).await, "running");
    let (t2, r2) = background_run(&app, "two").await;
    let held = [first.reached().await, second.reached().await];
    assert!(held.contains(&r1) && held.contains(&r2), "{held:?}");
    let (t3, r3) = background_run(&app, "three").await;
    assert_eq!(status(&app, &t3, &r3).await, "pending");

    let (s, m) = app.get_json("/metrics?format=json").await;
    assert_eq!(s, 200, "{m}");
    assert_eq!(
        (&m["queue"]["n_running"], &m["queue"]["n_pending"]),
        (&json!(2), &json!(1)),
        "{m}"
    );
    assert_eq!(
        m["workers"],
        json!({"max": 2, "active": 2, "available": 0}),
        "{m}"
    );
    let (s, ok) = app.get_json("/ok").await;
    assert_eq!(s, 200, "a full node still answers /ok");
    assert_eq!(
        ok["runs"],
        json!({"max_concurrent": 2, "executing": 2, "available": 0, "full": true})
    );
    // Nothing starts the third run while both slots are held.
    assert_eq!(status(&app, &t3, &r3).await, "pending");

    // One slot frees: the waiting run is claimed and finishes.
    let runs = [(t1, r1), (t2, r2)];
    let held_run = |id: &str| runs.iter().find(|(_, r)| r == id).unwrap().clone();
    first.resume();
    let done = app.wait_run(&t3, &r3).await;
    assert_eq!(done["status"], "success", "{done}");
    // The run still held is running; the metrics say so.
    let (tid, rid) = held_run(&held[1]);
    assert_eq!(status(&app, &tid, &rid).await, "running");
    let (_, m) = app.get_json("/metrics?format=json").await;
    assert_eq!(
        (&m["queue"]["n_running"], &m["queue"]["n_pending"]),
        (&json!(1), &json!(0)),
        "{m}"
    );
    second.resume();
    let done = app.wait_run(&tid, &rid).await;
    assert_eq!(done["status"], "success", "{done}");
    let (tid, rid) = held_run(&held[0]);
    assert_eq!(app.wait_run(&tid, &rid).await["status"], "success");
    app.stop().await;
}
