//! Several processes on one database, graceful shutdown, the truncate hook.

use crate::helpers::*;
use crate::sse_reader::SseReader;
use fawn_runtime::hooks::Point;
use fawn_testkit::Turn;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Processes sharing Postgres reap only expired leases (3 s: a loaded machine's heartbeats
/// at lease/3 still keep them).
fn short_lease() -> Tweak {
    Box::new(|o| {
        o.queue.lease = Duration::from_secs(3);
        o.recover_all_on_startup = Some(false);
    })
}

/// Two servers share one Postgres schema: a cancel sent to one reaches a run executing on
/// the other (NOTIFY, else its heartbeat), and a join on the other process ends with the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_postgres() {
    // Leases long enough that a loaded machine's heartbeats keep them; cancels still reach
    // the executing process at its next heartbeat (lease/3).
    let lease = |o: &mut fawn_server::AppOptions| {
        o.queue.lease = Duration::from_secs(3);
        o.recover_all_on_startup = Some(false);
    };
    let Some(a) = spawn_with(Spawn {
        tweak: Some(Box::new(lease)),
        ..Spawn::new(Db::Postgres)
    })
    .await
    else {
        return;
    };
    // B never polls for runs (it claims only what it creates): the run below executes on A
    // however slow A is to claim it.
    let b = spawn_with(Spawn {
        tweak: Some(Box::new(move |o| {
            lease(o);
            o.queue.poll_interval = Duration::from_secs(3600);
        })),
        mock: Some(Arc::clone(&a.mock)),
        existing_db: Some(a.db.clone()),
        ..Spawn::new(Db::Postgres)
    })
    .await
    .unwrap();
    let tid = a.create_thread().await;
    // 40 s of tokens: the stream ends early only if the cancel stops it.
    let text: String = (0..2000).map(|i| format!("w{i} ")).collect();
    a.mock
        .push(Turn::text(text).with_chunk_delay(Duration::from_millis(20)));
    // Streamed on A, so it executes on A.
    let r = a
        .post(
            &format!("/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": user_input("x"), "stream_mode": "messages-tuple"}),
        )
        .await;
    let rid = r.headers()["content-location"]
        .to_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    let mut on_a = SseReader::new(r);
    on_a.next(Duration::from_secs(10)).await.unwrap();
    on_a.next(Duration::from_secs(10)).await.unwrap();
    // B sees the thread busy and the run running.
    let (_, t) = b.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(t["status"], "busy");
    // A join on B (where the run is not executing) stays open until the run ends.
    let join = b
        .client
        .get(b.u(&format!("/threads/{tid}/runs/{rid}/stream")))
        .send()
        .await
        .unwrap();
    let mut join = SseReader::new(join);
    let r = b
        .client
        .post(b.u(&format!("/threads/{tid}/runs/{rid}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let run = b.wait_run(&tid, &rid).await;
    assert_eq!(run["status"], "interrupted", "{run}");
    assert!(
        a.mock
            .wait_until(Duration::from_secs(20), |m| m.streams_aborted() == 1)
            .await
    );
    // A's stream ends; B's join ends too (it polls the run at heartbeats).
    on_a.rest(Duration::from_secs(10)).await;
    join.rest(Duration::from_secs(10)).await;
    assert!(join.ended);
    b.stop().await;
    a.stop().await;
}

backends!(
    shutdown_releases_runs_to_the_next_process,
    shutdown_lets_runs_finish_first
);

/// With a drain period, a graceful stop lets a run that is about to end finish here.
async fn shutdown_lets_runs_finish_first(db: Db) {
    let Some(app) = spawn_with(Spawn {
        tweak: Some(Box::new(|o| {
            o.queue.drain = Duration::from_secs(60);
        })),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    app.mock
        .push(Turn::text("w ".repeat(20)).with_chunk_delay(Duration::from_millis(20)));
    let tid = app.create_thread().await;
    let (_, run) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("work")}),
        )
        .await;
    let rid = run["run_id"].as_str().unwrap().to_string();
    app.eventually("the model is streaming", || async {
        app.mock.chat_requests().len() == 1
    })
    .await;
    let db = app.db.clone();
    app.stop().await;
    let store = fawn_checkpoint::open(&db.config).await.unwrap();
    let run = store.get_run(&rid).await.unwrap().unwrap();
    assert_eq!(run.status, fawn_checkpoint::RunStatus::Success, "{run:?}");
}

async fn shutdown_releases_runs_to_the_next_process(db: Db) {
    let Some(first) = spawn_with(Spawn {
        tweak: Some(short_lease()),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let mock = first.mock.clone();
    mock.push(Turn::tool_call("get_weather", json!({"city": "Rome"})));
    mock.push(Turn::text("finished elsewhere"));
    // The run waits after its tool ran; the shutdown comes then (and releases the wait).
    let mut tools_step = first.hooks().pause(Point::Step, 3);
    let tid = first.create_thread().await;
    let (_, run) = first
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("work")}),
        )
        .await;
    let rid = run["run_id"].as_str().unwrap().to_string();
    assert_eq!(tools_step.reached().await, rid);
    first
        .eventually("the agent step is stored", || async {
            let (_, h) = first
                .post_json(&format!("/threads/{tid}/history"), json!({}))
                .await;
            h.as_array().unwrap().len() == 2
        })
        .await;
    let db_handle = first.db.clone();
    let started = std::time::Instant::now();
    first.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown is bounded"
    );
    let second = spawn_with(Spawn {
        tweak: Some(short_lease()),
        mock: Some(Arc::clone(&mock)),
        existing_db: Some(db_handle),
        ..Spawn::new(db)
    })
    .await
    .unwrap();
    let run = second.wait_run(&tid, &rid).await;
    assert_eq!(run["status"], "success", "{run}");
    assert_eq!(
        run["attempt"], 1,
        "a released run does not use up an attempt"
    );
    let (_, state) = second.get_json(&format!("/threads/{tid}/state")).await;
    let msgs = state["values"]["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4, "the input was not applied twice: {msgs:?}");
    assert_eq!(msgs[3]["content"], "finished elsewhere");
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_hook_needs_the_flag() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    app.create_thread().await;
    let (s, v) = app
        .post_json("/internal/truncate", json!({"threads": true, "runs": true}))
        .await;
    assert_eq!((s, v), (200, json!({"ok": true})));
    let (_, n) = app.post_json("/threads/count", json!({})).await;
    assert_eq!(n, json!(0));
    let (s, _) = app
        .get_json(&format!(
            "/assistants/{}",
            fawn_server::system_assistant_id("lead_agent")
        ))
        .await;
    assert_eq!(s, 200, "system assistants survive");
    app.stop().await;
    let Some(app) = spawn_with(Spawn {
        tweak: Some(Box::new(|o| o.test_hooks = false)),
        ..Spawn::new(Db::Sqlite)
    })
    .await
    else {
        return;
    };
    let (s, _) = app
        .post_json("/internal/truncate", json!({"threads": true}))
        .await;
    assert_eq!(s, 404);
    app.stop().await;
}
