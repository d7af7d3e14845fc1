//! Runs: streaming (framing, modes, headers), background/join/wait, resumable joins and
//! gaps, multitask strategies, cancellation, interrupts, forks, stateless and batch runs,
//! webhooks, errors.

use crate::helpers::*;
use crate::sse_reader::SseReader;
use fawn_runtime::hooks::Point;
use fawn_testkit::Turn;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

fn slow_text(words: usize, delay_ms: u64) -> Turn {
    let text: String = (0..words).map(|i| format!("w{i} ")).collect();
    Turn::text(text).with_chunk_delay(Duration::from_millis(delay_ms))
}

backends!(
    stream_tool_calling_run,
    legacy_messages_and_other_modes,
    background_join_wait_list_delete,
    resumable_join_and_replay,
    multitask_reject_and_enqueue,
    multitask_interrupt_and_rollback,
    cancel_interrupt_and_rollback,
    breakpoints_then_resume,
    dynamic_interrupt_then_resume,
    fork_from_an_older_checkpoint,
    stateless_and_batch_runs,
    graph_errors_are_events_not_http_errors,
    thread_stream_multiplexes_runs,
    after_seconds_delays_the_start,
    a_checkpoint_that_cannot_be_written_fails_the_run,
    events_nest_model_calls_in_nodes_in_the_graph,
    durability_exit_writes_when_the_run_ends,
);

async fn stream_tool_calling_run(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    weather_script(&app.mock);
    let r = app
        .post(
            &format!("/api/langgraph/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": user_input("weather in paris?"),
                   "stream_mode": ["values", "messages-tuple", "updates"]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["content-type"], "text/event-stream; charset=utf-8");
    assert_eq!(h["cache-control"], "no-store, no-transform");
    let cl = h["content-location"].to_str().unwrap().to_string();
    assert!(
        cl.starts_with(&format!("/api/langgraph/threads/{tid}/runs/")),
        "{cl}"
    );
    assert_eq!(h["location"].to_str().unwrap(), format!("{cl}/stream"));
    let rid = cl.rsplit('/').next().unwrap().to_string();
    let text = r.text().await.unwrap();
    // Exact framing of the first event.
    let first = format!(
        "event: metadata\ndata: {{\"run_id\":\"{rid}\",\"thread_id\":\"{tid}\",\"attempt\":1}}\n\n"
    );
    assert!(text.starts_with(&first), "{text}");
    assert!(!text.contains("\nid: "), "no ids on a non-resumable stream");
    assert!(!text.contains("event: end"));
    let events = parse_sse(&text);
    let n = names(&events);
    assert_eq!(n[0], "metadata");
    assert_eq!(n[1], "values");
    // The first state is the input applied (LangGraph sends no empty state before it).
    assert_eq!(
        events[1].data["messages"][0]["content"],
        "weather in paris?"
    );
    assert_eq!(events[1].data["messages"].as_array().unwrap().len(), 1);
    // Every `values` event is a state that changed: no two in a row are equal.
    let values: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "values")
        .map(|e| &e.data)
        .collect();
    assert!(values.windows(2).all(|w| w[0] != w[1]), "{values:?}");
    // Token chunks, then the agent's update, then the new state; then the tool message.
    let first_update = n.iter().position(|e| *e == "updates").unwrap();
    assert!(n[2..first_update].iter().all(|e| *e == "messages"));
    assert_eq!(
        events[first_update].data["agent"]["messages"][0]["type"],
        "ai"
    );
    assert_eq!(
        events[first_update].data["agent"]["messages"][0]["tool_calls"][0]["name"],
        "get_weather"
    );
    let chunk = &events[2].data;
    assert_eq!(chunk[0]["type"], "AIMessageChunk");
    assert!(chunk[0]["id"].as_str().unwrap().starts_with("lc_run--"));
    assert_eq!(chunk[1]["langgraph_node"], "agent");
    let tool_msg = events
        .iter()
        .find(|e| e.event == "messages" && e.data[0]["type"] == "tool")
        .unwrap();
    assert_eq!(tool_msg.data[0]["content"], "It is sunny in Paris.");
    let last = events.last().unwrap();
    assert_eq!(last.event, "values");
    let msgs = last.data["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[3]["content"], "The weather in Paris is sunny.");
    // The terminal status is visible as soon as the stream closed.
    let (_, run) = app.get_json(&format!("/threads/{tid}/runs/{rid}")).await;
    assert_eq!(run["status"], "success", "{run}");
    let (_, thread) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "idle");
    assert_eq!(thread["values"]["messages"].as_array().unwrap().len(), 4);
    assert_eq!(thread["metadata"]["graph_id"], "lead_agent");
    // History: a task that already ran carries its writes as `result`.
    let (s, history) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await;
    assert_eq!(s, 200, "{history}");
    let history = history.as_array().unwrap();
    assert_eq!(history[0]["next"], json!([]));
    assert_eq!(history[0]["tasks"], json!([]));
    let at = |source: &str, next: &str| {
        history
            .iter()
            .find(|h| h["next"] == json!([next]) && h["metadata"]["source"] == source)
            .unwrap()
    };
    let agent_task = &at("input", "agent")["tasks"][0];
    assert_eq!(agent_task["name"], "agent");
    assert_eq!(
        agent_task["result"]["messages"][0]["tool_calls"][0]["name"], "get_weather",
        "{agent_task}"
    );
    let answer_task = &at("loop", "agent")["tasks"][0];
    assert_eq!(
        answer_task["result"]["messages"][0]["content"], "The weather in Paris is sunny.",
        "{answer_task}"
    );
    let tools_task = &at("loop", "tools")["tasks"][0];
    assert_eq!(tools_task["name"], "tools");
    assert_eq!(
        tools_task["result"]["messages"][0]["content"], "It is sunny in Paris.",
        "{tools_task}"
    );
    // The state at one of those checkpoints carries the same results.
    for h in [at("input", "agent"), at("loop", "tools")] {
        let cid = h["checkpoint"]["checkpoint_id"].as_str().unwrap();
        let (s, state) = app.get_json(&format!("/threads/{tid}/state/{cid}")).await;
        assert_eq!(s, 200, "{state}");
        assert_eq!(state["tasks"], h["tasks"], "{state}");
        let (s, state) = app
            .post_json(
                &format!("/threads/{tid}/state/checkpoint"),
                json!({"checkpoint": {"checkpoint_id": cid}}),
            )
            .await;
        assert_eq!(s, 200, "{state}");
        assert_eq!(state["tasks"], h["tasks"], "{state}");
    }
    // A page without the step that ran from a checkpoint cannot know its result.
    let (_, page) = app
        .post_json(
            &format!("/threads/{tid}/history"),
            json!({"limit": 1, "before": {"checkpoint_id": history[1]["checkpoint_id"]}}),
        )
        .await;
    assert_eq!(page[0]["checkpoint_id"], history[2]["checkpoint_id"]);
    assert!(
        page[0]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["result"].is_null()),
        "{page}"
    );
    app.stop().await;
}

async fn legacy_messages_and_other_modes(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    weather_script(&app.mock);
    let r = app
        .post(
            &format!("/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": user_input("weather?"),
                   "stream_mode": ["messages", "tasks", "checkpoints", "debug", "events", "custom"]}),
        )
        .await;
    let events = parse_sse(&r.text().await.unwrap());
    let n = names(&events);
    assert_eq!(n[0], "metadata");
    assert!(n.contains(&"messages/metadata"));
    let partials: Vec<&Sse> = events
        .iter()
        .filter(|e| e.event == "messages/partial")
        .collect();
    assert!(!partials.is_empty());
    assert!(partials.iter().all(|p| p.data[0]["type"] == "ai"));
    // Partials accumulate: the last partial of the answer is the whole text.
    let last_text = partials
        .iter()
        .rev()
        .find(|p| p.data[0]["content"].as_str().is_some_and(|c| !c.is_empty()))
        .unwrap();
    assert_eq!(
        last_text.data[0]["content"],
        "The weather in Paris is sunny."
    );
    let complete = events
        .iter()
        .find(|e| e.event == "messages/complete")
        .unwrap();
    assert_eq!(complete.data[0]["type"], "tool");
    for mode in ["tasks", "checkpoints", "debug", "events"] {
        assert!(n.contains(&mode), "no {mode} event in {n:?}");
    }
    let cp = events.iter().find(|e| e.event == "checkpoints").unwrap();
    assert!(cp.data["config"]["configurable"]["checkpoint_id"].is_string());
    assert_eq!(cp.data["metadata"]["source"], "input");
    assert!(!n.contains(&"values"), "values was not requested");
    app.stop().await;
}

async fn background_join_wait_list_delete(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    app.mock.push(slow_text(10, 30));
    let r = app
        .post(
            &format!("/api/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("hi"), "metadata": {"k": 1}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let cl = r.headers()["content-location"]
        .to_str()
        .unwrap()
        .to_string();
    let run: Value = r.json().await.unwrap();
    let rid = run["run_id"].as_str().unwrap().to_string();
    assert_eq!(cl, format!("/api/threads/{tid}/runs/{rid}"));
    assert_eq!(run["status"], "pending");
    assert_eq!(run["multitask_strategy"], "enqueue");
    assert_eq!(run["metadata"]["k"], 1);
    assert_eq!(
        run["assistant_id"],
        fawn_server::system_assistant_id("lead_agent")
    );
    assert!(run["created_at"].as_str().unwrap().ends_with("+00:00"));
    let (_, thread) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "busy");
    // Join blocks until the end and returns the final values.
    let (s, joined) = app
        .get_json(&format!("/threads/{tid}/runs/{rid}/join"))
        .await;
    assert_eq!(s, 200);
    assert_eq!(joined["messages"].as_array().unwrap().len(), 2, "{joined}");
    // Wait: a new run, the body is the final state.
    let r = app
        .post(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("again")}),
        )
        .await;
    assert!(r.headers()["location"].to_str().unwrap().ends_with("/join"));
    let waited: Value = serde_json::from_str(r.text().await.unwrap().trim()).unwrap();
    assert_eq!(waited["messages"].as_array().unwrap().len(), 4);
    assert_eq!(waited["messages"][3]["content"], "again");
    let (s, runs) = app.get_json(&format!("/threads/{tid}/runs?limit=10")).await;
    assert_eq!(s, 200);
    assert_eq!(runs.as_array().unwrap().len(), 2);
    assert_eq!(runs[1]["run_id"], rid.as_str(), "newest first");
    let (_, sel) = app
        .get_json(&format!("/threads/{tid}/runs?select=run_id&select=status"))
        .await;
    assert_eq!(sel[0].as_object().unwrap().len(), 2);
    let (_, sel) = app
        .get_json(&format!("/threads/{tid}/runs?select=%5B%22run_id%22%5D"))
        .await;
    assert_eq!(sel[0].as_object().unwrap().len(), 1);
    // Join of a missing run.
    let missing = uuid::Uuid::new_v4();
    let (s, v) = app
        .get_json(&format!("/threads/{tid}/runs/{missing}/join"))
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["__error__"]["error"], "HTTPException");
    let r = app
        .client
        .get(app.u(&format!("/threads/{tid}/runs/{missing}/stream")))
        .send()
        .await
        .unwrap();
    let ev = parse_sse(&r.text().await.unwrap());
    assert_eq!(names(&ev), vec!["error"]);
    // if_not_exists: create makes the thread on the fly.
    let new_tid = uuid::Uuid::new_v4().to_string();
    let (s, v) = app
        .post_json(
            &format!("/threads/{new_tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("new"), "if_not_exists": "create"}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (_, t) = app.get_json(&format!("/threads/{new_tid}")).await;
    assert_eq!(t["metadata"]["graph_id"], "lead_agent");
    assert_eq!(t["values"]["messages"][0]["content"], "new");
    assert_eq!(app.delete(&format!("/threads/{tid}/runs/{rid}")).await, 204);
    let (s, _) = app.get_json(&format!("/threads/{tid}/runs/{rid}")).await;
    assert_eq!(s, 404);
    app.stop().await;
}

async fn resumable_join_and_replay(db: Db) {
    let Some(app) = spawn_with(Spawn {
        tweak: Some(Box::new(|o| o.broker.resumable_max_events = 8)),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let tid = app.create_thread().await;
    app.mock.push(slow_text(6, 40));
    let r = app
        .post(
            &format!("/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": user_input("hi"),
                   "stream_mode": ["values", "messages-tuple", "updates"],
                   "stream_resumable": true, "on_disconnect": "continue"}),
        )
        .await;
    let cl = r.headers()["content-location"]
        .to_str()
        .unwrap()
        .to_string();
    let rid = cl.rsplit('/').next().unwrap().to_string();
    let mut reader = SseReader::new(r);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(reader.next(T).await.unwrap());
    }
    let ids: Vec<&str> = seen.iter().map(|e| e.id.as_deref().unwrap()).collect();
    assert_eq!(ids, vec!["0", "1", "2"]);
    drop(reader); // the client goes away; the run continues
    let r = app
        .client
        .get(app.u(&format!("/threads/{tid}/runs/{rid}/stream")))
        .header("last-event-id", "2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let rest = SseReader::new(r).rest(T).await;
    assert_eq!(
        rest[0].id.as_deref(),
        Some("3"),
        "resumes right after the cursor"
    );
    let all_ids: Vec<u64> = rest
        .iter()
        .map(|e| e.id.as_ref().unwrap().parse().unwrap())
        .collect();
    assert!(all_ids.windows(2).all(|w| w[1] == w[0] + 1), "{all_ids:?}");
    assert_eq!(rest.last().unwrap().event, "values");
    let (_, run) = app.get_json(&format!("/threads/{tid}/runs/{rid}")).await;
    assert_eq!(run["status"], "success");
    // After the run: a join from a trimmed cursor gets DeerFlow's gap event.
    let r = app
        .client
        .get(app.u(&format!("/threads/{tid}/runs/{rid}/stream")))
        .header("last-event-id", "-1")
        .send()
        .await
        .unwrap();
    let ev = parse_sse(&r.text().await.unwrap());
    assert_eq!(names(&ev), vec!["gap"]);
    assert_eq!(ev[0].data["code"], "stream_replay_gap");
    assert_eq!(ev[0].data["recovery"], "reload_durable_state");
    assert!(ev[0].id.is_none());
    let latest = ev[0].data["latest_available_event_id"]
        .as_str()
        .unwrap()
        .to_string();
    let earliest: u64 = ev[0].data["earliest_available_event_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // From a retained cursor, replay works, filtered by mode.
    let r = app
        .client
        .get(app.u(&format!(
            "/threads/{tid}/runs/{rid}/stream?stream_mode=values"
        )))
        .header("last-event-id", (earliest).to_string())
        .send()
        .await
        .unwrap();
    let ev = parse_sse(&r.text().await.unwrap());
    assert!(!ev.is_empty());
    assert!(ev.iter().all(|e| e.event == "values"), "{:?}", names(&ev));
    assert_eq!(ev.last().unwrap().id.as_deref(), Some(latest.as_str()));
    // No Last-Event-ID on a finished run: an empty stream.
    let r = app
        .client
        .get(app.u(&format!("/runs/{rid}/stream")))
        .send()
        .await
        .unwrap();
    assert!(parse_sse(&r.text().await.unwrap()).is_empty());
    app.stop().await;
}

/// Starts a run on the slow scripted answer and waits until it is running *and* has sent
/// its own model request: the mock's script is one queue for every request, so a run
/// stopped before it asked the model would leave the slow answer to whichever run asks
/// next. (Waiting for "any request so far" let a second case in the same test go on too
/// early.)
async fn start_slow_run(app: &TestApp, tid: &str, extra: Value) -> String {
    let requests_before = app.mock.request_count();
    let mut body = json!({"assistant_id": "lead_agent", "input": user_input("slow")});
    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
        b.extend(e);
    }
    let (s, run) = app.post_json(&format!("/threads/{tid}/runs"), body).await;
    assert_eq!(s, 200, "{run}");
    let rid = run["run_id"].as_str().unwrap().to_string();
    app.eventually("run is running and streaming", || async {
        let (_, r) = app.get_json(&format!("/threads/{tid}/runs/{rid}")).await;
        r["status"] == "running" && app.mock.request_count() > requests_before
    })
    .await;
    rid
}

async fn multitask_reject_and_enqueue(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    app.mock.push(slow_text(10, 50));
    let a = start_slow_run(&app, &tid, json!({})).await;
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("b"), "multitask_strategy": "reject"}),
        )
        .await;
    assert_eq!(s, 409);
    assert_eq!(
        v["detail"],
        "Thread is already running a task. Wait for it to finish or choose a different multitask strategy."
    );
    // Enqueue (the default): B waits for A.
    let (s, b) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("b")}),
        )
        .await;
    assert_eq!(s, 200);
    let b = b["run_id"].as_str().unwrap().to_string();
    let (_, rb) = app.get_json(&format!("/threads/{tid}/runs/{b}")).await;
    assert_eq!(rb["status"], "pending");
    let ra = app.wait_run(&tid, &a).await;
    let rb = app.wait_run(&tid, &b).await;
    assert_eq!(ra["status"], "success");
    assert_eq!(rb["status"], "success");
    let (_, state) = app.get_json(&format!("/threads/{tid}/state")).await;
    let msgs = state["values"]["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[2]["content"], "b");
    app.stop().await;
}

async fn multitask_interrupt_and_rollback(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    // interrupt: A ends interrupted, its checkpoints are kept.
    let tid = app.create_thread().await;
    app.mock.push(slow_text(40, 50));
    let a = start_slow_run(&app, &tid, json!({})).await;
    let (s, b) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("second"), "multitask_strategy": "interrupt"}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let b = b["run_id"].as_str().unwrap().to_string();
    let ra = app.wait_run(&tid, &a).await;
    assert_eq!(ra["status"], "interrupted");
    let rb = app.wait_run(&tid, &b).await;
    assert_eq!(rb["status"], "success");
    let (_, state) = app.get_json(&format!("/threads/{tid}/state")).await;
    let contents: Vec<&str> = state["values"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        contents,
        vec!["slow", "second", "second"],
        "A's input checkpoint is kept"
    );

    // rollback: A is deleted with everything it wrote.
    let tid = app.create_thread().await;
    app.mock.push(slow_text(40, 50));
    let a = start_slow_run(&app, &tid, json!({})).await;
    let (s, b) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("second"), "multitask_strategy": "rollback"}),
        )
        .await;
    assert_eq!(s, 200);
    let b = b["run_id"].as_str().unwrap().to_string();
    let rb = app.wait_run(&tid, &b).await;
    assert_eq!(rb["status"], "success");
    let (s, _) = app.get_json(&format!("/threads/{tid}/runs/{a}")).await;
    assert_eq!(s, 404, "a rolled-back run is deleted");
    let (_, state) = app.get_json(&format!("/threads/{tid}/state")).await;
    let contents: Vec<&str> = state["values"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(contents, vec!["second", "second"]);
    let (_, hist) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await;
    assert!(
        hist.as_array()
            .unwrap()
            .iter()
            .all(|h| h["metadata"]["run_id"] == b.as_str()),
        "only B's checkpoints remain"
    );
    app.stop().await;
}

async fn cancel_interrupt_and_rollback(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    app.mock.push(slow_text(2000, 20));
    let a = start_slow_run(&app, &tid, json!({})).await;
    app.mock
        .wait_until(T, |m| m.chat_requests().len() == 1)
        .await;
    assert_eq!(app.mock.streams_aborted(), 0);
    let started = Instant::now();
    let r = app
        .client
        .post(app.u(&format!("/threads/{tid}/runs/{a}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    // The stream would take 40 s to finish: it ends only if the cancel drops it. (How fast
    // that happens is a benchmark's question; this prints it.)
    assert!(
        app.mock.wait_until(T, |m| m.streams_aborted() == 1).await,
        "the model stream was not dropped after the cancel"
    );
    let latency = started.elapsed();
    let ra = app.wait_run(&tid, &a).await;
    assert_eq!(ra["status"], "interrupted", "{ra}");
    // The thread follows its latest checkpoint (the input's, with `agent` still to run), as
    // langgraph-api does: `interrupted`, not `idle`.
    let (_, thread) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "interrupted", "{thread}");
    let (_, state) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(state["next"], json!(["agent"]), "{state}");
    eprintln!("cancel → model stream dropped in {latency:?}");
    // Cancelling it again: nothing to cancel. 404 on the LangGraph mounts (the SDKs expect
    // it), 409 under /api (DeerFlow's UI treats that as a harmless no-op); an unknown run
    // is 404 everywhere.
    for (prefix, status) in [("", 404), ("/api/langgraph", 404), ("/api", 409)] {
        let (s, v) = app
            .post_json(
                &format!("{prefix}/threads/{tid}/runs/{a}/cancel"),
                json!({}),
            )
            .await;
        assert_eq!(s, status, "{prefix}: {v}");
    }
    let unknown = uuid::Uuid::new_v4();
    let (s, _) = app
        .post_json(
            &format!("/api/threads/{tid}/runs/{unknown}/cancel"),
            json!({}),
        )
        .await;
    assert_eq!(s, 404);
    // Rollback with wait=1: the run and its checkpoints are gone.
    let before = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await
        .1
        .as_array()
        .unwrap()
        .len();
    app.mock.push(slow_text(200, 20));
    let b = start_slow_run(&app, &tid, json!({})).await;
    let r = app
        .client
        .post(app.u(&format!(
            "/threads/{tid}/runs/{b}/cancel?action=rollback&wait=1"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["location"].to_str().unwrap().ends_with("/join"));
    let (s, _) = app.get_json(&format!("/threads/{tid}/runs/{b}")).await;
    assert_eq!(s, 404);
    let after = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await
        .1
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        before, after,
        "rollback removed every checkpoint of the run"
    );
    // Bulk cancel: body validation and nothing-matched.
    let (s, _) = app
        .post_json("/runs/cancel", json!({"status": "all", "run_ids": [a]}))
        .await;
    assert_eq!(s, 422);
    let (s, _) = app
        .post_json("/runs/cancel", json!({"status": "running"}))
        .await;
    assert_eq!(s, 404);
    app.mock.push(slow_text(200, 20));
    let c = start_slow_run(&app, &tid, json!({})).await;
    let r = app
        .post(
            "/runs/cancel?action=interrupt",
            json!({"thread_id": tid, "run_ids": [c]}),
        )
        .await;
    assert_eq!(r.status(), 204);
    assert_eq!(app.wait_run(&tid, &c).await["status"], "interrupted");
    app.stop().await;
}

async fn breakpoints_then_resume(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    weather_script(&app.mock);
    let r = app
        .post(
            &format!("/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": user_input("weather?"),
                   "interrupt_before": ["tools"], "stream_mode": ["updates", "values"]}),
        )
        .await;
    let events = parse_sse(&r.text().await.unwrap());
    let bp = events.iter().rev().find(|e| e.event == "updates").unwrap();
    assert_eq!(bp.data, json!({"__interrupt__": []}));
    let (_, thread) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "interrupted");
    assert_eq!(thread["interrupts"], json!({}));
    let (_, state) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(state["next"], json!(["tools"]));
    assert_eq!(state["interrupts"], json!([]));
    // Resume with no input: the stream starts with the current state, then goes on.
    let r = app
        .post(
            &format!("/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": null, "stream_mode": ["values"]}),
        )
        .await;
    let events = parse_sse(&r.text().await.unwrap());
    assert_eq!(names(&events)[..2], ["metadata", "values"]);
    assert_eq!(events[1].data["messages"].as_array().unwrap().len(), 2);
    let v = &events.last().unwrap().data;
    assert_eq!(v["messages"].as_array().unwrap().len(), 4, "{v}");
    let (_, thread) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "idle");
    app.stop().await;
}

async fn dynamic_interrupt_then_resume(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    app.mock.push(Turn::tool_call(
        "ask_human",
        json!({"question": "Approve?"}),
    ));
    let r = app
        .post(
            &format!("/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": user_input("ship it"),
                   "stream_mode": ["updates", "values"], "stream_resumable": true}),
        )
        .await;
    let cl = r.headers()["content-location"]
        .to_str()
        .unwrap()
        .to_string();
    let rid = cl.rsplit('/').next().unwrap().to_string();
    let events = parse_sse(&r.text().await.unwrap());
    let upd = events
        .iter()
        .find(|e| e.event == "updates" && e.data.get("__interrupt__").is_some())
        .unwrap();
    assert_eq!(
        upd.data["__interrupt__"][0]["value"],
        json!({"question": "Approve?"})
    );
    let iid = upd.data["__interrupt__"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(iid.len(), 32);
    let last = events.last().unwrap();
    assert_eq!(last.event, "values");
    assert_eq!(last.data["__interrupt__"][0]["id"], iid.as_str());
    let (_, run) = app.get_json(&format!("/threads/{tid}/runs/{rid}")).await;
    assert_eq!(run["status"], "success");
    // `Last-Event-ID: -1` (useStream after a reload) replays the whole run.
    let r = app
        .client
        .get(app.u(&format!("/threads/{tid}/runs/{rid}/stream")))
        .header("last-event-id", "-1")
        .send()
        .await
        .unwrap();
    let replay = parse_sse(&r.text().await.unwrap());
    assert_eq!(replay.len(), events.len());
    assert_eq!(replay[0].id.as_deref(), Some("0"));
    assert_eq!(replay[0].event, "metadata");
    assert_eq!(replay.last().unwrap().data, last.data);
    let (_, thread) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "interrupted");
    let per_task = thread["interrupts"].as_object().unwrap();
    assert_eq!(per_task.len(), 1);
    let (_, state) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(state["next"], json!(["tools"]));
    assert_eq!(state["interrupts"][0]["id"], iid.as_str());
    assert_eq!(state["tasks"][0]["interrupts"][0]["id"], iid.as_str());
    let (_, joined) = app
        .get_json(&format!("/threads/{tid}/runs/{rid}/join"))
        .await;
    assert_eq!(joined["__interrupt__"][0]["id"], iid.as_str(), "{joined}");
    // Resume: the tool returns the answer, the model answers.
    app.mock.push(Turn::text("Shipped."));
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "command": {"resume": "yes"}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let msgs = v["messages"].as_array().unwrap();
    assert_eq!(msgs[2]["type"], "tool");
    assert_eq!(msgs[2]["content"], "yes");
    assert_eq!(msgs[3]["content"], "Shipped.");
    let (_, thread) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "idle");
    assert_eq!(thread["interrupts"], json!({}));
    app.stop().await;
}

async fn fork_from_an_older_checkpoint(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    for text in ["one", "two"] {
        let (s, _) = app
            .post_json(
                &format!("/threads/{tid}/runs/wait"),
                json!({"assistant_id": "lead_agent", "input": user_input(text)}),
            )
            .await;
        assert_eq!(s, 200);
    }
    let (_, hist) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await;
    let hist = hist.as_array().unwrap().clone();
    // Newest first; the end of run one has two messages.
    let end_of_one = hist
        .iter()
        .find(|h| h["values"]["messages"].as_array().unwrap().len() == 2 && h["next"] == json!([]))
        .unwrap();
    let cid = end_of_one["checkpoint"]["checkpoint_id"].as_str().unwrap();
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("three"),
                   "checkpoint": {"checkpoint_id": cid, "thread_id": tid}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let contents: Vec<&str> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, vec!["one", "one", "three", "three"]);
    let (_, hist2) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await;
    let hist2 = hist2.as_array().unwrap();
    // New input from an older checkpoint: the run's first checkpoint is its `input`, under
    // the fork point (langgraph-api writes no `fork` copy then).
    assert!(
        hist2.iter().all(|h| h["metadata"]["source"] != "fork"),
        "{hist2:?}"
    );
    let input = hist2
        .iter()
        .find(|h| {
            h["metadata"]["source"] == "input" && h["parent_checkpoint"]["checkpoint_id"] == cid
        })
        .expect("an input checkpoint under the fork point");
    assert_eq!(input["next"], json!(["agent"]));
    assert!(
        hist2.len() > hist.len(),
        "the old branch is still in the history"
    );
    // Bad checkpoint ids.
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "checkpoint_id": "not-a-uuid"}),
        )
        .await;
    assert_eq!(
        (s, v["detail"].as_str().unwrap()),
        (422, "Invalid checkpoint ID")
    );
    let (s, _) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "checkpoint_id": uuid::Uuid::new_v4()}),
        )
        .await;
    assert_eq!(s, 404);
    app.stop().await;
}

async fn stateless_and_batch_runs(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let count = |app: &TestApp| {
        let app_url = app.u("/threads/count");
        let c = app.client.clone();
        async move {
            c.post(app_url)
                .json(&json!({}))
                .send()
                .await
                .unwrap()
                .json::<u64>()
                .await
                .unwrap()
        }
    };
    let r = app
        .post(
            "/runs/wait",
            json!({"assistant_id": "lead_agent", "input": user_input("temp")}),
        )
        .await;
    let cl = r.headers()["content-location"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(cl.starts_with("/threads/"), "{cl}");
    let tmp_tid = cl.split('/').nth(2).unwrap().to_string();
    let v: Value = serde_json::from_str(r.text().await.unwrap().trim()).unwrap();
    assert_eq!(v["messages"][1]["content"], "temp");
    app.eventually("temporary thread deleted", || async {
        app.get_json(&format!("/threads/{tmp_tid}")).await.0 == 404
    })
    .await;
    // keep
    let r = app
        .post(
            "/runs/stream",
            json!({"assistant_id": "lead_agent", "input": user_input("keep me"), "on_completion": "keep"}),
        )
        .await;
    let cl = r.headers()["content-location"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(cl.starts_with("/runs/"), "{cl}");
    assert_eq!(
        r.headers()["location"].to_str().unwrap(),
        format!("{cl}/stream")
    );
    let events = parse_sse(&r.text().await.unwrap());
    let kept_tid = events[0].data["thread_id"].as_str().unwrap().to_string();
    let (s, t) = app.get_json(&format!("/threads/{kept_tid}")).await;
    assert_eq!(s, 200);
    assert_eq!(t["values"]["messages"][0]["content"], "keep me");
    // resume without a thread
    let (s, v) = app
        .post_json(
            "/runs",
            json!({"assistant_id": "lead_agent", "command": {"resume": "x"}}),
        )
        .await;
    assert_eq!(
        (s, v["detail"].as_str().unwrap()),
        (400, "You must provide a thread_id when resuming.")
    );
    // batch: everything or nothing
    let before = count(&app).await;
    let (s, v) = app
        .post_json(
            "/runs/batch",
            json!([{"assistant_id": "lead_agent", "input": user_input("a")},
                   {"assistant_id": "nope", "input": user_input("b")}]),
        )
        .await;
    assert_eq!(s, 422, "{v}");
    assert_eq!(
        count(&app).await,
        before,
        "a rejected batch creates nothing"
    );
    let (s, v) = app
        .post_json(
            "/runs/batch",
            json!([{"assistant_id": "lead_agent", "input": user_input("a"), "on_completion": "keep"},
                   {"assistant_id": fawn_server::system_assistant_id("lead_agent"), "input": user_input("b"), "on_completion": "keep"}]),
        )
        .await;
    assert_eq!(s, 200);
    let runs = v.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        let done = app
            .wait_run(
                r["thread_id"].as_str().unwrap(),
                r["run_id"].as_str().unwrap(),
            )
            .await;
        assert_eq!(done["status"], "success");
    }
    app.stop().await;
}

async fn graph_errors_are_events_not_http_errors(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    app.mock
        .push(Turn::tool_call("fail", json!({"message": "boom"})));
    let r = app
        .post(
            &format!("/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": user_input("x"), "stream_mode": "updates"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let events = parse_sse(&r.text().await.unwrap());
    let last = events.last().unwrap();
    assert_eq!(last.event, "error");
    assert_eq!(
        last.data,
        json!({"error": "ToolException", "message": "boom"})
    );
    let (_, thread) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "error");
    assert_eq!(thread["error"]["error"], "ToolException");
    // Wait returns 200 with __error__.
    app.mock
        .push(Turn::tool_call("fail", json!({"message": "again"})));
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("y")}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["__error__"]["message"], "again");
    // Recursion limit.
    app.mock
        .push(Turn::tool_call("get_weather", json!({"city": "x"})));
    app.mock
        .push(Turn::tool_call("get_weather", json!({"city": "y"})));
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("z"), "config": {"recursion_limit": 2}}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["__error__"]["error"], "GraphRecursionError", "{v}");
    app.stop().await;
}

async fn thread_stream_multiplexes_runs(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let r = app
        .client
        .get(app.u(&format!("/threads/{tid}/stream?stream_mode=run_modes")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut reader = SseReader::new(r);
    let (s, run) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("hi")}),
        )
        .await;
    assert_eq!(s, 200);
    let rid = run["run_id"].as_str().unwrap();
    let mut got = Vec::new();
    loop {
        let e = reader.next(T).await.expect("the thread stream stays open");
        let done = e.event == "metadata" && e.data["status"] == "run_done";
        got.push(e);
        if done {
            break;
        }
    }
    assert_eq!(got[0].event, "metadata");
    assert_eq!(got[0].data["run_id"], rid);
    assert!(got[0].id.is_some(), "thread streams carry ids");
    assert!(got.iter().any(|e| e.event == "values"));
    assert_eq!(got.last().unwrap().data["run_id"], rid);
    assert!(
        reader.quiet_for(Duration::from_millis(700)).await,
        "never closes by itself"
    );
    assert!(
        reader.raw.contains(": heartbeat\n\n"),
        "heartbeats while idle"
    );
    let (s, _) = app
        .get_json(&format!("/threads/{tid}/stream?stream_modes=bogus"))
        .await;
    assert_eq!(s, 422);
    app.stop().await;
}

async fn after_seconds_delays_the_start(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let mut claimed = app.hooks().pause(Point::Claimed, 1);
    let asked = Instant::now();
    let (s, run) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("later"), "after_seconds": 1}),
        )
        .await;
    assert_eq!(s, 200);
    let rid = run["run_id"].as_str().unwrap();
    let (_, r) = app.get_json(&format!("/threads/{tid}/runs/{rid}")).await;
    assert_eq!(r["status"], "pending");
    let (_, t) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(t["status"], "busy");
    // No worker claims it before its time.
    assert_eq!(claimed.reached().await, rid);
    assert!(
        asked.elapsed() >= Duration::from_secs(1),
        "claimed {:?} after it was asked for",
        asked.elapsed()
    );
    claimed.resume();
    assert_eq!(app.wait_run(&tid, rid).await["status"], "success");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_disconnect_cancel_stops_the_run() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let tid = app.create_thread().await;
    app.mock.push(slow_text(200, 20));
    let r = app
        .post(
            &format!("/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": user_input("x"),
                   "stream_mode": "messages-tuple", "on_disconnect": "cancel"}),
        )
        .await;
    let rid = r.headers()["content-location"]
        .to_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    let mut reader = SseReader::new(r);
    reader.next(T).await.unwrap();
    reader.next(T).await.unwrap();
    drop(reader);
    assert_eq!(app.wait_run(&tid, &rid).await["status"], "interrupted");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_posts_the_finished_run() {
    use axum::routing::post;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let stub = axum::Router::new().route(
        "/hook",
        post(move |axum::Json(v): axum::Json<Value>| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(v);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, stub).await });
    // An internal receiver is refused unless it is allowed by name (the SSRF guard).
    let Some(guarded) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let tid = guarded.create_thread().await;
    let (s, v) = guarded
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("hook"),
                   "webhook": format!("http://127.0.0.1:{port}/hook")}),
        )
        .await;
    assert_eq!(s, 422, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("loopback"), "{v}");
    let (_, runs) = guarded.get_json(&format!("/threads/{tid}/runs")).await;
    assert_eq!(runs, json!([]), "nothing was created");
    guarded.stop().await;
    let Some(app) = spawn_with(Spawn {
        tweak: Some(Box::new(|o| {
            o.webhook_policy.allowed_hosts = vec!["127.0.0.1".into()];
        })),
        ..Spawn::new(Db::Sqlite)
    })
    .await
    else {
        return;
    };
    let tid = app.create_thread().await;
    let (s, run) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("hook"),
                   "webhook": format!("http://127.0.0.1:{port}/hook")}),
        )
        .await;
    assert_eq!(s, 200);
    let got = tokio::time::timeout(T, rx.recv()).await.unwrap().unwrap();
    assert_eq!(got["run_id"], run["run_id"]);
    assert_eq!(got["status"], "success");
    assert_eq!(got["values"]["messages"][1]["content"], "hook");
    assert!(got["run_started_at"].is_string());
    assert!(got["run_ended_at"].is_string());
    assert!(got["webhook_sent_at"].is_string());
    let (s, _) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "webhook": "file:///etc/passwd"}),
        )
        .await;
    assert_eq!(s, 422);
    app.stop().await;
}

/// With `durability: async` (the default) a step's checkpoint is written while the next step
/// runs. A write that fails still fails the run (here when the run ends), and the thread
/// stays readable and usable: nothing after the failed checkpoint was written.
async fn a_checkpoint_that_cannot_be_written_fails_the_run(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    // The run waits after its tool ran (the 3rd step: input, agent, tools) until the
    // trigger is in.
    let mut tools_step = app.hooks().pause(Point::Step, 3);
    app.mock
        .push(Turn::tool_call("get_weather", json!({"city": "Paris"})))
        .push(Turn::text("done"));
    let (s, run) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("nap")}),
        )
        .await;
    assert_eq!(s, 200, "{run}");
    let rid = run["run_id"].as_str().unwrap().to_string();
    assert_eq!(tools_step.reached().await, rid);
    // The model's answer is stored (the checkpoint that schedules `tools`).
    app.eventually("the agent step is stored", || async {
        let (_, h) = app
            .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
            .await;
        h[0]["next"] == json!(["tools"])
    })
    .await;
    let (_, before) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await;
    // While the run waits, checkpoints can no longer be inserted.
    let fail = match db {
        Db::Sqlite => {
            "CREATE TRIGGER fail_checkpoints BEFORE INSERT ON checkpoints \
                       BEGIN SELECT RAISE(ABORT, 'injected checkpoint failure'); END"
        }
        Db::Postgres => {
            "CREATE FUNCTION {schema}.fail_checkpoints() RETURNS trigger \
                         LANGUAGE plpgsql AS $$ BEGIN \
                         RAISE EXCEPTION 'injected checkpoint failure' USING ERRCODE = 'XX000'; \
                         END $$; \
                         CREATE TRIGGER fail_checkpoints BEFORE INSERT ON {schema}.checkpoints \
                         FOR EACH ROW EXECUTE FUNCTION {schema}.fail_checkpoints()"
        }
    };
    app.db.exec(fail).await;
    tools_step.resume();
    let r = app.wait_run(&tid, &rid).await;
    assert_eq!(r["status"], "error", "{r}");
    let (s, v) = app
        .get_json(&format!("/threads/{tid}/runs/{rid}/join"))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["__error__"]["error"], "CheckpointError", "{v}");
    assert!(
        v["__error__"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("injected checkpoint failure"),
        "{v}"
    );
    // Nothing was written after the first failed checkpoint.
    let (s, after) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await;
    assert_eq!(s, 200, "{after}");
    assert_eq!(after, before);

    let unfail = match db {
        Db::Sqlite => "DROP TRIGGER fail_checkpoints",
        Db::Postgres => "DROP TRIGGER fail_checkpoints ON {schema}.checkpoints",
    };
    app.db.exec(unfail).await;
    app.mock.push(Turn::text("awake again"));
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("again")}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let messages = v["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["content"], "awake again", "{v}");
    let (s, state) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(s, 200, "{state}");
    assert_eq!(state["values"], v);
    app.stop().await;
}

/// `events` mode follows `astream_events(v2)`: the graph's `on_chain_start` first and its
/// `on_chain_end` last; each node's events inside it; each model call's start, stream and
/// end, and each tool call's start and end, inside its node, parented by the run and the
/// node's task.
async fn events_nest_model_calls_in_nodes_in_the_graph(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    weather_script(&app.mock);
    let input = user_input("weather?");
    let r = app
        .post(
            &format!("/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": input, "stream_mode": "events"}),
        )
        .await;
    let events = parse_sse(&r.text().await.unwrap());
    let run_id = events[0].data["run_id"].as_str().unwrap().to_string();
    let ev: Vec<&Value> = events[1..].iter().map(|e| &e.data).collect();
    assert!(
        events[1..].iter().all(|e| e.event == "events"),
        "{:?}",
        names(&events)
    );
    let kinds: Vec<&str> = ev.iter().map(|e| e["event"].as_str().unwrap()).collect();

    let root = ev[0];
    assert_eq!(root["event"], "on_chain_start");
    assert_eq!(root["name"], "LangGraph");
    assert_eq!(root["run_id"], run_id.as_str());
    assert_eq!(root["parent_ids"], json!([]));
    assert_eq!(root["data"]["input"], input);
    assert_eq!(root["metadata"]["thread_id"], tid.as_str());
    assert_eq!(root["metadata"]["graph_id"], "lead_agent");
    let end = ev[ev.len() - 1];
    assert_eq!(end["event"], "on_chain_end", "{kinds:?}");
    assert_eq!(end["name"], "LangGraph");
    assert_eq!(
        end["data"]["output"]["messages"].as_array().unwrap().len(),
        4
    );
    assert_eq!(ev[ev.len() - 2]["event"], "on_chain_stream");

    // Every node's events sit between its start and its end, under the run.
    let position = |kind: &str, id: &Value| {
        ev.iter()
            .position(|e| e["event"] == kind && e["run_id"] == *id)
            .unwrap_or_else(|| panic!("no {kind} for {id} in {kinds:?}"))
    };
    let node_starts: Vec<usize> = (0..ev.len())
        .filter(|&i| kinds[i] == "on_chain_start" && ev[i]["name"] != "LangGraph")
        .collect();
    assert!(!node_starts.is_empty());
    for &i in &node_starts {
        let node = ev[i];
        assert_eq!(node["parent_ids"], json!([run_id]));
        let step = node["metadata"]["langgraph_step"].as_i64().unwrap();
        assert_eq!(node["tags"], json!([format!("graph:step:{step}")]));
        assert_eq!(node["metadata"]["langgraph_node"], node["name"]);
        assert!(position("on_chain_end", &node["run_id"]) > i);
    }

    // Two model calls, each start → stream… → end inside the node that made it.
    let starts: Vec<usize> = (0..ev.len())
        .filter(|&i| kinds[i] == "on_chat_model_start")
        .collect();
    assert_eq!(starts.len(), 2, "{kinds:?}");
    let mut outputs = Vec::new();
    let mut inputs = Vec::new();
    for &i in &starts {
        let call = &ev[i]["run_id"];
        let parents = ev[i]["parent_ids"].as_array().unwrap();
        assert_eq!(parents.len(), 2);
        assert_eq!(parents[0], run_id.as_str());
        let node_start = position("on_chain_start", &parents[1]);
        let node_end = position("on_chain_end", &parents[1]);
        let model_end = position("on_chat_model_end", call);
        assert!(node_start < i && i < model_end && model_end < node_end);
        let streams: Vec<&&Value> = ev
            .iter()
            .filter(|e| e["event"] == "on_chat_model_stream" && e["run_id"] == *call)
            .collect();
        assert!(!streams.is_empty());
        assert!(
            streams
                .iter()
                .all(|e| e["data"]["chunk"]["type"] == "AIMessageChunk"),
            "{streams:?}"
        );
        outputs.push(&ev[model_end]["data"]["output"]);
        inputs.push(&ev[i]["data"]["input"]["messages"][0]);
    }
    // What each call was sent: the question, then the question, the call and its answer.
    let types = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|m| m["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(types(inputs[0]), ["human"], "{}", inputs[0]);
    assert_eq!(types(inputs[1]), ["human", "ai", "tool"], "{}", inputs[1]);
    assert_eq!(outputs[0]["type"], "ai");
    assert_eq!(
        outputs[0]["tool_calls"][0]["name"], "get_weather",
        "{}",
        outputs[0]
    );
    assert_eq!(outputs[1]["content"], "The weather in Paris is sunny.");

    // The tool call: start and end inside the tools node, with its arguments and answer.
    let i = kinds.iter().position(|k| *k == "on_tool_start").unwrap();
    let start = ev[i];
    assert_eq!(start["name"], "get_weather");
    assert_eq!(start["data"]["input"], json!({"city": "Paris"}));
    let parents = start["parent_ids"].as_array().unwrap();
    assert_eq!(parents[0], run_id.as_str());
    assert_eq!(ev[position("on_chain_start", &parents[1])]["name"], "tools");
    let end = position("on_tool_end", &start["run_id"]);
    assert!(i < end && end < position("on_chain_end", &parents[1]));
    assert_eq!(ev[end]["data"]["output"]["type"], "tool");
    assert_eq!(
        ev[end]["data"]["output"]["content"],
        "It is sunny in Paris."
    );
    app.stop().await;
}

/// `durability: exit`: nothing of the run is stored while it runs; when it ends, all its
/// checkpoints are, exactly as a default run leaves them.
async fn durability_exit_writes_when_the_run_ends(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    // The run waits when its graph is done, before its end writes anything.
    let mut before_finish = app.hooks().pause(Point::BeforeFinish, 1);
    app.mock
        .push(Turn::tool_call("get_weather", json!({"city": "Paris"})))
        .push(Turn::text("done"));
    let (s, run) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("nap"),
                   "durability": "exit"}),
        )
        .await;
    assert_eq!(s, 200, "{run}");
    let rid = run["run_id"].as_str().unwrap().to_string();
    // Every step ran (both model calls): under `async` all its checkpoints would be
    // stored or queued by now; under `exit` none is.
    assert_eq!(before_finish.reached().await, rid);
    assert_eq!(app.mock.chat_requests().len(), 2);
    let (s, history) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await;
    assert_eq!(s, 200, "{history}");
    assert_eq!(history, json!([]), "nothing is stored before the run ends");
    before_finish.resume();
    let r = app.wait_run(&tid, &rid).await;
    assert_eq!(r["status"], "success", "{r}");
    let (_, history) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await;
    let sources: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["metadata"]["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["loop", "loop", "loop", "input"], "{history}");
    let (_, state) = app.get_json(&format!("/threads/{tid}/state")).await;
    let messages = state["values"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[3]["content"], "done");
    app.stop().await;
}
