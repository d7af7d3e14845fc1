//! Two Fawn nodes on one Postgres database: a cancel made on one node reaches the run the
//! other executes at once (Postgres NOTIFY), not at its next heartbeat; a run joined on the
//! node that does not execute it streams its steps, woken by NOTIFY (or every event, with
//! Redis); a run whose node died is taken over by the other from its last checkpoint.

use crate::helpers::*;
use crate::sse_reader::SseReader;
use fawn_runtime::hooks::Point;
use fawn_testkit::Turn;
use serde_json::json;
use std::time::Duration;

fn slow_text(words: usize, delay_ms: u64) -> Turn {
    let text: String = (0..words).map(|i| format!("w{i} ")).collect();
    Turn::text(text).with_chunk_delay(Duration::from_millis(delay_ms))
}

/// Node A, and node B on the same database and mock model, each with `lease`.
async fn two_nodes(lease: Duration) -> Option<(TestApp, TestApp)> {
    nodes_with(move |o| o.queue.lease = lease).await
}

/// Node A and node B on one database and mock model, each tweaked by `tweak`.
async fn nodes_with(
    tweak: impl Fn(&mut fawn_server::AppOptions) + Clone + Send + 'static,
) -> Option<(TestApp, TestApp)> {
    let a = spawn_with(Spawn {
        tweak: Some(Box::new(tweak.clone())),
        ..Spawn::new(Db::Postgres)
    })
    .await?;
    let b = spawn_with(Spawn {
        existing_db: Some(a.db.clone()),
        mock: Some(a.mock.clone()),
        tweak: Some(Box::new(tweak)),
        ..Spawn::new(Db::Postgres)
    })
    .await?;
    Some((a, b))
}

/// Starts a slow run on a thread; returns (thread, run, whether node `a` executes it).
async fn slow_run(a: &TestApp, b: &TestApp) -> (String, String, bool) {
    let tid = a.create_thread().await;
    a.mock.push(slow_text(4000, 20));
    let (s, run) = a
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("slow")}),
        )
        .await;
    assert_eq!(s, 200, "{run}");
    let rid = run["run_id"].as_str().unwrap().to_string();
    let on = |app: &TestApp| app.handle.state.rt.executes_here(&rid);
    a.eventually(
        "a node executes the run and streams from the model",
        || async { (on(a) || on(b)) && a.mock.chat_requests().len() == 1 },
    )
    .await;
    let on_a = on(a);
    (tid, rid, on_a)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_another_node_reaches_the_run_at_once() {
    // A 10-minute lease: heartbeats (every 200 s) cannot be what carries the cancel.
    let Some((a, b)) = two_nodes(Duration::from_secs(600)).await else {
        return;
    };
    let (tid, rid, on_a) = slow_run(&a, &b).await;
    let (executor, other) = if on_a { (&a, &b) } else { (&b, &a) };
    let r = other
        .client
        .post(other.u(&format!("/threads/{tid}/runs/{rid}/cancel?wait=true")))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let run = other.wait_run(&tid, &rid).await;
    assert_eq!(run["status"], "interrupted", "{run}");
    assert!(
        a.mock
            .wait_until(Duration::from_secs(10), |m| m.streams_aborted() == 1)
            .await,
        "the executing node dropped the model stream"
    );
    assert!(!executor.handle.state.rt.executes_here(&rid));
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_run_is_taken_over() {
    let Some((mut a, mut b)) = two_nodes(Duration::from_secs(1)).await else {
        return;
    };
    let (tid, rid, on_a) = slow_run(&a, &b).await;
    // The executing node dies without a word; the survivor answers from here on.
    a.mock.push(Turn::text("resumed"));
    let survivor = if on_a {
        a.crash();
        &b
    } else {
        b.crash();
        &a
    };
    let run = survivor.wait_run(&tid, &rid).await;
    assert_eq!(run["status"], "success", "{run}");
    let (_, state) = survivor.get_json(&format!("/threads/{tid}/state")).await;
    let last = state["values"]["messages"]
        .as_array()
        .and_then(|m| m.last().cloned())
        .unwrap_or_default();
    assert_eq!(last["content"], "resumed", "{state}");
}

/// Without Redis, the joining node relays the run from the store, woken by the executing
/// node's progress notifications: with the relays' fallback poll at ten minutes, only
/// those can carry the steps and the end within the test's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_joined_on_another_node_streams_its_steps() {
    let Some((a, b)) = nodes_with(|o| {
        o.queue.lease = Duration::from_secs(10);
        o.queue.relay_poll = Duration::from_secs(600);
    })
    .await
    else {
        return;
    };
    let tid = a.create_thread().await;
    a.mock
        .push(Turn::tool_call("get_weather", json!({"city": "Paris"})));
    a.mock.push(slow_text(20, 1));
    // The run waits at its tools step (on whichever node claims it) until the other node's
    // join is connected, so the steps after it can only reach the join through the relay.
    let mut at_a = a.hooks().pause(Point::Step, 3);
    let mut at_b = b.hooks().pause(Point::Step, 3);
    let (s, run) = a
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("weather?")}),
        )
        .await;
    assert_eq!(s, 200, "{run}");
    let rid = run["run_id"].as_str().unwrap().to_string();
    let (paused, other) = tokio::select! {
        _ = at_a.reached() => (at_a, &b),
        _ = at_b.reached() => (at_b, &a),
    };
    let resp = other
        .client
        .get(other.u(&format!("/threads/{tid}/runs/{rid}/stream")))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    let first = reader
        .next(Duration::from_secs(30))
        .await
        .expect("the joined stream starts");
    assert_eq!(first.event, "metadata", "{}", reader.raw);
    paused.resume();
    reader.rest(Duration::from_secs(30)).await;
    let text = reader.raw.clone();
    let events = parse_sse(&text);
    let values: Vec<_> = events.iter().filter(|e| e.event == "values").collect();
    assert!(
        values.len() >= 2,
        "steps arrive as they are persisted: {text}"
    );
    let run = other.wait_run(&tid, &rid).await;
    assert_eq!(run["status"], "success", "{run}");
    let (_, state) = other.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(
        values.last().unwrap().data["messages"],
        state["values"]["messages"],
        "the last step is the final state"
    );
    a.stop().await;
    b.stop().await;
}

/// Node A and node B on one Postgres and one Redis (streams are named by run id, so tests
/// need no key space of their own).
async fn two_nodes_with_redis() -> Option<(TestApp, TestApp)> {
    let url = std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    nodes_with(move |o| o.redis_url = Some(url.clone())).await
}

/// With Redis, a run joined on the other node streams exactly what the executing node's
/// log holds: every token chunk, with the same ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_a_joined_stream_is_the_executing_nodes_log() {
    let Some((a, b)) = two_nodes_with_redis().await else {
        return;
    };
    let tid = a.create_thread().await;
    a.mock
        .push(Turn::tool_call("get_weather", json!({"city": "Paris"})));
    a.mock.push(slow_text(60, 20));
    let body = json!({"assistant_id": "lead_agent", "input": user_input("weather?"),
                      "stream_mode": ["values", "messages-tuple", "updates"],
                      "stream_resumable": true});
    // Created (and so executed) on A, streamed there; joined on B.
    let created = a
        .client
        .post(a.u(&format!("/threads/{tid}/runs/stream")))
        .json(&body)
        .send()
        .await
        .unwrap();
    let location = created
        .headers()
        .get("content-location")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let rid = location.rsplit('/').next().unwrap().to_string();
    let joined = b
        .client
        .get(b.u(&format!("/threads/{tid}/runs/{rid}/stream")))
        .header("last-event-id", "-1")
        .send()
        .await
        .unwrap();
    let (on_a, on_b) = tokio::join!(created.text(), joined.text());
    let (on_a, on_b) = (on_a.unwrap(), on_b.unwrap());
    assert!(!a.handle.state.rt.executes_here(&rid));
    let ids = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(str::to_string)
            .collect()
    };
    let events = |text: &str| -> Vec<(String, serde_json::Value)> {
        parse_sse(text)
            .into_iter()
            .map(|e| (e.event, e.data))
            .collect()
    };
    let (ea, eb) = (events(&on_a), events(&on_b));
    assert!(
        ea.iter().filter(|(e, _)| e == "messages").count() > 10,
        "tokens streamed: {on_a}"
    );
    assert_eq!(eb, ea, "the joined stream is the executing node's log");
    assert_eq!(ids(&on_b), ids(&on_a));
    a.stop().await;
    b.stop().await;
}
