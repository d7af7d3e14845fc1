//! The thread-centric protocol (`client.threads.stream()`): commands and their protocol
//! errors (never a 5xx), the SSE event stream (filters, replay after `since`), the
//! WebSocket (commands, subscriptions, replay to late subscribers), and who may use them:
//! credentials on the handshake, another user's thread, a foreign `Origin`. One case runs a
//! protocol run on one node and streams it from another.

use crate::auth::{Cred, admin_and_users, spawn_auth};
use crate::helpers::*;
use crate::sse_reader::SseReader;
use fawn_testkit::Turn;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const WAIT: Duration = Duration::from_secs(20);

backends!(
    commands_answer_protocol_errors,
    stream_requests_are_checked,
    events_replay_after_since_without_loss_or_duplicates,
    websocket_commands_subscriptions_and_replay,
    clarification_is_requested_and_answered,
    handshakes_are_authenticated_and_checked,
);

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

async fn command(app: &TestApp, tid: &str, body: Value) -> (u16, Value) {
    app.post_json(&format!("/threads/{tid}/commands"), body)
        .await
}

/// Sends `method` with `params`; the response must be a protocol error with `code`.
async fn expect_error(app: &TestApp, tid: &str, method: &str, params: Value, code: &str) {
    let (s, r) = command(
        app,
        tid,
        json!({"id": 9, "method": method, "params": params}),
    )
    .await;
    assert_eq!(s, 200, "{method} {r}");
    assert_eq!(r["type"], "error", "{method} {params}: {r}");
    assert_eq!(r["id"], 9, "{r}");
    assert_eq!(r["error"], code, "{method} {params}: {r}");
    assert!(r["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
}

/// Starts a run through the protocol; its id.
async fn run_start(app: &TestApp, tid: &str, text: &str) -> String {
    let (s, r) = command(
        app,
        tid,
        json!({"id": 1, "method": "run.start",
               "params": {"assistant_id": "lead_agent", "input": user_input(text)}}),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["type"], "success", "{r}");
    assert_eq!(r["meta"]["applied_through_seq"], 0);
    r["result"]["run_id"].as_str().unwrap().to_string()
}

async fn open_stream(app: &TestApp, tid: &str, body: Value) -> SseReader {
    let r = app
        .client
        .post(app.u(&format!("/threads/{tid}/stream/events")))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    SseReader::new(r)
}

fn is_root_end(e: &Value) -> bool {
    e["method"] == "lifecycle"
        && e["params"]["namespace"] == json!([])
        && matches!(
            e["params"]["data"]["event"].as_str(),
            Some("completed" | "failed" | "interrupted")
        )
}

/// Events of a stream until `ends` runs ended; checks the SSE framing of each.
async fn read_until_end(reader: &mut SseReader, ends: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut seen = 0;
    while seen < ends {
        let e = reader.next(WAIT).await.expect("the stream stays open");
        assert_eq!(e.event, e.data["method"].as_str().unwrap());
        assert_eq!(e.id.as_deref(), Some(e.data["seq"].to_string().as_str()));
        assert_eq!(e.data["type"], "event");
        if is_root_end(&e.data) {
            seen += 1;
        }
        out.push(e.data);
    }
    out
}

async fn commands_answer_protocol_errors(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = uuid();
    // Not a command: the protocol's envelope, with a 400.
    for (body, id) in [
        (json!({"method": "run.start"}), Value::Null),
        (json!({"id": "x", "method": "run.start"}), json!("x")),
        (json!({"id": 1, "method": 5}), json!(1)),
        (json!([1, 2]), Value::Null),
        (
            json!({"id": 1, "method": "run.start", "params": 3}),
            json!(1),
        ),
    ] {
        let (s, r) = command(&app, &tid, body.clone()).await;
        assert_eq!(s, 400, "{body}: {r}");
        assert_eq!(
            (r["type"].clone(), r["error"].clone(), r["id"].clone()),
            (json!("error"), json!("invalid_argument"), id),
            "{body}: {r}"
        );
    }
    let r = app
        .client
        .post(app.u(&format!("/threads/{tid}/commands")))
        .header("content-type", "application/json")
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"detail": "Invalid JSON body"})
    );
    let (s, r) = command(&app, "not-a-uuid", json!({"id": 1, "method": "run.start"})).await;
    assert_eq!(s, 422, "{r}");

    expect_error(&app, &tid, "run.stop", json!({}), "unknown_command").await;
    expect_error(&app, &tid, "run.start", json!({}), "invalid_argument").await;
    for params in [
        json!({"assistant_id": "nope", "input": user_input("x")}),
        json!({"assistant_id": "lead_agent", "input": "not a state"}),
        json!({"assistant_id": "lead_agent", "config": 3}),
        json!({"assistant_id": "lead_agent", "metadata": []}),
        json!({"assistant_id": "lead_agent", "multitask_strategy": "sometimes"}),
        json!({"assistant_id": "lead_agent",
               "config": {"configurable": {"checkpoint_id": "not-a-uuid"}}}),
    ] {
        expect_error(&app, &tid, "run.start", params, "invalid_argument").await;
    }
    // Nothing was created by the refused starts.
    let (s, _) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(s, 404);

    expect_error(&app, &tid, "input.respond", json!({}), "invalid_argument").await;
    expect_error(
        &app,
        &tid,
        "input.respond",
        json!({"interrupt_id": "a", "namespace": "x"}),
        "invalid_argument",
    )
    .await;
    expect_error(
        &app,
        &tid,
        "input.respond",
        json!({"interrupt_id": "a", "namespace": [], "response": 1}),
        "no_such_run",
    )
    .await;
    expect_error(&app, &tid, "input.inject", json!({}), "invalid_argument").await;
    expect_error(
        &app,
        &tid,
        "input.inject",
        json!({"namespace": ["tools:x"], "message": {"role": "user", "content": "x"}}),
        "no_such_namespace",
    )
    .await;
    expect_error(
        &app,
        &tid,
        "input.inject",
        json!({"namespace": [], "message": {"role": "tool", "content": "x"}}),
        "invalid_argument",
    )
    .await;
    expect_error(
        &app,
        &tid,
        "subscription.subscribe",
        json!({"channels": []}),
        "invalid_argument",
    )
    .await;
    expect_error(
        &app,
        &tid,
        "subscription.subscribe",
        json!({"channels": ["values", "bogus"]}),
        "invalid_argument",
    )
    .await;
    expect_error(
        &app,
        &tid,
        "subscription.subscribe",
        json!({"channels": ["values"]}),
        "not_supported",
    )
    .await;
    expect_error(
        &app,
        &tid,
        "subscription.unsubscribe",
        json!({}),
        "invalid_argument",
    )
    .await;
    expect_error(
        &app,
        &tid,
        "subscription.unsubscribe",
        json!({"subscription_id": "s"}),
        "no_such_subscription",
    )
    .await;
    expect_error(
        &app,
        &tid,
        "subscription.reconnect",
        json!({"run_id": uuid()}),
        "no_such_run",
    )
    .await;
    expect_error(&app, &tid, "agent.getTree", json!({}), "no_such_run").await;
    expect_error(
        &app,
        &tid,
        "state.get",
        json!({"namespace": ["a"]}),
        "no_such_namespace",
    )
    .await;
    expect_error(
        &app,
        &tid,
        "state.listCheckpoints",
        json!({"limit": 0}),
        "invalid_argument",
    )
    .await;
    expect_error(&app, &tid, "state.fork", json!({}), "invalid_argument").await;

    // A thread the client minted an id for, created by run.start.
    app.mock.push(Turn::text("hello"));
    let rid = run_start(&app, &tid, "hi").await;
    app.wait_run(&tid, &rid).await;
    let (s, t) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(s, 200, "{t}");
    let (_, r) = command(
        &app,
        &tid,
        json!({"id": 2, "method": "state.get",
        "params": {"namespace": [], "keys": ["messages"]}}),
    )
    .await;
    let values = &r["result"]["values"];
    assert_eq!(values.as_object().unwrap().len(), 1, "{r}");
    assert_eq!(values["messages"].as_array().unwrap().len(), 2, "{r}");
    let head = r["result"]["checkpoint"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, r) = command(
        &app,
        &tid,
        json!({"id": 3, "method": "state.listCheckpoints",
        "params": {"limit": 2}}),
    )
    .await;
    let cps = r["result"]["checkpoints"].as_array().unwrap();
    assert_eq!(cps.len(), 2, "{r}");
    assert_eq!(cps[0]["id"], head.as_str());
    assert!(
        cps[0]["timestamp"].is_string() && cps[0]["step"].is_i64(),
        "{r}"
    );
    let first = cps[1]["id"].as_str().unwrap();
    expect_error(
        &app,
        &tid,
        "state.fork",
        json!({"checkpoint_id": "1ef00000-0000-6000-8000-000000000000"}),
        "no_such_checkpoint",
    )
    .await;
    app.mock.push(Turn::text("forked"));
    let (_, r) = command(
        &app,
        &tid,
        json!({"id": 4, "method": "state.fork",
        "params": {"checkpoint_id": first}}),
    )
    .await;
    assert_eq!(r["type"], "success", "{r}");
    assert_eq!(r["result"]["thread_id"], tid.as_str());
    let forked = r["result"]["run_id"].as_str().unwrap().to_string();
    app.wait_run(&tid, &forked).await;
    let (_, r) = command(
        &app,
        &tid,
        json!({"id": 5, "method": "agent.getTree", "params": {}}),
    )
    .await;
    assert_eq!(
        r["result"]["tree"],
        json!({"namespace": [], "status": "completed", "graph_name": "lead_agent", "children": []}),
        "{r}"
    );
    expect_error(
        &app,
        &tid,
        "input.respond",
        json!({"interrupt_id": "0".repeat(32), "namespace": [], "response": 1}),
        "no_such_interrupt",
    )
    .await;
    // A message injected into an idle thread runs as the next turn.
    app.mock.push(Turn::text("injected answer"));
    let (_, r) = command(
        &app,
        &tid,
        json!({"id": 6, "method": "input.inject",
        "params": {"namespace": [], "message": {"role": "user", "content": "more"}}}),
    )
    .await;
    assert_eq!(
        r,
        json!({"type": "success", "id": 6, "result": {}, "meta": {"applied_through_seq": 0}})
    );
    app.eventually("the injected turn answered", || async {
        let (_, st) = app.get_json(&format!("/threads/{tid}/state")).await;
        st["values"]["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["content"] == "injected answer")
    })
    .await;
    app.stop().await;
}

async fn stream_requests_are_checked(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = uuid();
    for body in [
        json!({}),
        json!([]),
        json!({"channels": []}),
        json!({"channels": ["bogus"]}),
        json!({"channels": ["custom:"]}),
        json!({"channels": ["values"], "namespaces": "x"}),
        json!({"channels": ["values"], "namespaces": [[1]]}),
        json!({"channels": ["values"], "depth": -1}),
        json!({"channels": ["values"], "since": "x"}),
        json!({"channels": ["values"], "since": -3}),
    ] {
        let (s, r) = app
            .post_json(&format!("/threads/{tid}/stream/events"), body.clone())
            .await;
        assert_eq!(s, 400, "{body}: {r}");
        assert!(r["detail"].is_string(), "{r}");
    }
    let (s, _) = app
        .post_json(
            "/threads/nope/stream/events",
            json!({"channels": ["values"]}),
        )
        .await;
    assert_eq!(s, 422);
    // A plain GET of the WebSocket route is no upgrade.
    let r = app
        .client
        .get(app.u(&format!("/threads/{tid}/stream/events")))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    app.stop().await;
}

async fn events_replay_after_since_without_loss_or_duplicates(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = uuid();
    // Opened before the thread exists: the stream waits for its runs.
    let mut live = open_stream(
        &app,
        &tid,
        json!({"channels": ["values", "messages", "lifecycle", "tools", "updates"]}),
    )
    .await;
    app.mock
        .push(Turn::tool_call("get_weather", json!({"city": "Paris"})));
    app.mock.push(Turn::text("The weather: sunny."));
    run_start(&app, &tid, "weather?").await;
    let first = read_until_end(&mut live, 1).await;
    let seqs: Vec<u64> = first.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(seqs.iter().all(|s| *s > 0 && *s < (1u64 << 53)));
    let methods: Vec<&str> = first
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    for m in ["lifecycle", "values", "messages", "tools", "updates"] {
        assert!(methods.contains(&m), "{m} in {methods:?}");
    }
    let tools: Vec<Value> = first
        .iter()
        .filter(|e| e["method"] == "tools")
        .map(|e| e["params"]["data"].clone())
        .collect();
    assert_eq!(tools[0]["event"], "tool-started");
    assert_eq!(tools[0]["tool_name"], "get_weather");
    assert_eq!(tools[0]["input"], json!({"city": "Paris"}));
    assert_eq!(tools[1]["event"], "tool-finished");
    assert_eq!(tools[1]["output"]["type"], "tool");
    let text = |ns: Value| -> String {
        first
            .iter()
            .filter(|e| e["params"]["namespace"] == ns)
            .filter(|e| e["params"]["data"]["event"] == "content-block-delta")
            .filter_map(|e| e["params"]["data"]["delta"]["text"].as_str())
            .collect()
    };
    let call = tools[0]["tool_call_id"].as_str().unwrap().to_string();
    assert_eq!(text(json!([])), "The weather: sunny.", "{first:#?}");
    // The tool's result, mirrored as a tool message under the call's namespace.
    assert_eq!(
        text(json!([format!("tools:{call}")])),
        "It is sunny in Paris."
    );

    // A second turn on the same stream: its events come after the first's.
    app.mock.push(Turn::text("Still sunny."));
    run_start(&app, &tid, "and now?").await;
    let second = read_until_end(&mut live, 1).await;
    assert!(second[0]["seq"].as_u64() > first.last().unwrap()["seq"].as_u64());
    let all: Vec<Value> = first.iter().chain(&second).cloned().collect();

    // A reconnect from any cursor gets exactly what followed it, with the same ids.
    for cut in [0, 3, first.len() - 1, first.len() + 2] {
        let since = all[cut]["seq"].as_u64().unwrap();
        let mut again = open_stream(
            &app,
            &tid,
            json!({"channels": ["values", "messages", "lifecycle", "tools", "updates"],
                   "since": since}),
        )
        .await;
        let ends = all[cut + 1..].iter().filter(|e| is_root_end(e)).count();
        let replay = read_until_end(&mut again, ends).await;
        let strip = |v: &[Value]| -> Vec<(Value, Value, Value)> {
            v.iter()
                .map(|e| {
                    (
                        e["seq"].clone(),
                        e["event_id"].clone(),
                        e["params"]["data"].clone(),
                    )
                })
                .collect()
        };
        assert_eq!(strip(&replay), strip(&all[cut + 1..]), "after event {cut}");
    }
    // Filters: one channel, and the root namespace only.
    let mut only = open_stream(
        &app,
        &tid,
        json!({"channels": ["messages"], "namespaces": [[]], "depth": 0}),
    )
    .await;
    let mut got = Vec::new();
    while got.len() < 3 {
        let e = only.next(WAIT).await.unwrap();
        got.push(e.data);
    }
    assert!(
        got.iter()
            .all(|e| e["method"] == "messages" && e["params"]["namespace"] == json!([]))
    );
    let mut under = open_stream(
        &app,
        &tid,
        json!({"channels": ["messages"], "namespaces": [["tools"]]}),
    )
    .await;
    let e = under.next(WAIT).await.unwrap();
    assert_eq!(
        e.data["params"]["namespace"],
        json!([format!("tools:{call}")])
    );
    assert_eq!(e.data["params"]["data"]["role"], "tool");
    app.stop().await;
}

async fn clarification_is_requested_and_answered(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = uuid();
    app.mock.push(Turn::tool_call(
        "ask_human",
        json!({"question": "Which colour?"}),
    ));
    run_start(&app, &tid, "paint it").await;
    let mut s = open_stream(&app, &tid, json!({"channels": ["input", "lifecycle"]})).await;
    let events = read_until_end(&mut s, 1).await;
    let requested: Vec<&Value> = events
        .iter()
        .filter(|e| e["method"] == "input.requested")
        .collect();
    assert_eq!(requested.len(), 1, "{events:?}");
    let data = &requested[0]["params"]["data"];
    let id = data["interrupt_id"].as_str().unwrap().to_string();
    assert_eq!(data["payload"], data["value"]);
    assert_eq!(
        events.last().unwrap()["params"]["data"]["event"],
        "interrupted"
    );
    // Answered: a new run resumes the thread, on the same stream.
    expect_error(
        &app,
        &tid,
        "input.respond",
        json!({"interrupt_id": id, "namespace": ["tools:x"], "response": "blue"}),
        "no_such_interrupt",
    )
    .await;
    app.mock.push(Turn::text("Blue it is."));
    let (_, r) = command(
        &app,
        &tid,
        json!({"id": 2, "method": "input.respond",
        "params": {"interrupt_id": id, "namespace": [], "response": "blue"}}),
    )
    .await;
    assert_eq!(r["type"], "success", "{r}");
    let events = read_until_end(&mut s, 1).await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["params"]["data"]["event"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["running", "completed"]);
    let (_, t) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(t["status"], "idle", "{t}");
    app.stop().await;
}

fn ws_request(
    app: &TestApp,
    path: &str,
    headers: &[(&str, String)],
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    let url = format!("{}{}", app.url.replace("http://", "ws://"), path);
    let mut req = url.into_client_request().unwrap();
    for (k, v) in headers {
        let name = axum_header_name(k);
        req.headers_mut()
            .insert(name, v.parse().expect("header value"));
    }
    req
}

fn axum_header_name(k: &str) -> tokio_tungstenite::tungstenite::http::HeaderName {
    tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes()).expect("name")
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_connect(app: &TestApp, path: &str, headers: &[(&str, String)]) -> Result<Ws, u16> {
    match tokio_tungstenite::connect_async(ws_request(app, path, headers)).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("websocket: {e}"),
    }
}

async fn ws_send(ws: &mut Ws, v: Value) {
    ws.send(WsMessage::Text(v.to_string().into()))
        .await
        .unwrap();
}

async fn ws_next(ws: &mut Ws) -> Value {
    loop {
        let m = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time")
            .expect("the socket stays open")
            .unwrap();
        match m {
            WsMessage::Text(t) => return serde_json::from_str(&t).unwrap(),
            WsMessage::Ping(_) | WsMessage::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

async fn websocket_commands_subscriptions_and_replay(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = uuid();
    let mut ws = ws_connect(&app, &format!("/threads/{tid}/stream/events"), &[])
        .await
        .unwrap();
    // Frames that are not commands get error frames; the socket stays open.
    ws.send(WsMessage::Text("not json".into())).await.unwrap();
    let r = ws_next(&mut ws).await;
    assert_eq!(
        (r["type"].clone(), r["id"].clone(), r["error"].clone()),
        (json!("error"), Value::Null, json!("invalid_argument"))
    );
    ws_send(&mut ws, json!({"id": 1, "method": "nope"})).await;
    assert_eq!(ws_next(&mut ws).await["error"], "unknown_command");
    ws_send(
        &mut ws,
        json!({"id": 2, "method": "subscription.subscribe",
        "params": {"channels": ["lifecycle"]}}),
    )
    .await;
    let sub = ws_next(&mut ws).await;
    assert_eq!(sub["type"], "success", "{sub}");
    let sub_id = sub["result"]["subscription_id"]
        .as_str()
        .unwrap()
        .to_string();
    // A run started over the socket: its response, then the subscribed events.
    app.mock.push(Turn::text("over the socket"));
    ws_send(
        &mut ws,
        json!({"id": 3, "method": "run.start",
        "params": {"assistant_id": "lead_agent", "input": user_input("ws")}}),
    )
    .await;
    let mut frames = Vec::new();
    loop {
        let f = ws_next(&mut ws).await;
        let end = is_root_end(&f);
        frames.push(f);
        if end {
            break;
        }
    }
    let started = frames
        .iter()
        .find(|f| f["id"] == 3)
        .expect("run.start answered");
    assert_eq!(started["type"], "success", "{started}");
    let events: Vec<&Value> = frames.iter().filter(|f| f["type"] == "event").collect();
    assert!(
        events.iter().all(|e| e["method"] == "lifecycle"),
        "{events:?}"
    );
    assert_eq!(events.len(), 2);
    // A later subscription gets what it missed, once.
    ws_send(
        &mut ws,
        json!({"id": 4, "method": "subscription.subscribe",
        "params": {"channels": ["messages", "lifecycle"]}}),
    )
    .await;
    let r = ws_next(&mut ws).await;
    assert_eq!(r["id"], 4);
    let replayed = r["result"]["replayed_events"].as_u64().unwrap();
    let mut replay = Vec::new();
    for _ in 0..replayed {
        replay.push(ws_next(&mut ws).await);
    }
    assert!(
        replay.iter().all(|e| e["method"] == "messages"),
        "lifecycle events were sent already"
    );
    let text: String = replay
        .iter()
        .filter_map(|e| e["params"]["data"]["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "over the socket");
    ws_send(
        &mut ws,
        json!({"id": 5, "method": "subscription.unsubscribe",
        "params": {"subscription_id": sub_id}}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["type"], "success");
    ws_send(
        &mut ws,
        json!({"id": 6, "method": "subscription.unsubscribe",
        "params": {"subscription_id": sub_id}}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["error"], "no_such_subscription");
    ws.close(None).await.unwrap();

    // The run-bound route: another thread's run is not found; this run's events only.
    let (_, runs) = app.get_json(&format!("/threads/{tid}/runs")).await;
    let rid = runs[0]["run_id"].as_str().unwrap().to_string();
    let other = uuid();
    assert_eq!(
        ws_connect(&app, &format!("/threads/{other}/runs/{rid}/protocol"), &[])
            .await
            .err(),
        Some(404)
    );
    let mut bound = ws_connect(&app, &format!("/threads/{tid}/runs/{rid}/protocol"), &[])
        .await
        .unwrap();
    ws_send(
        &mut bound,
        json!({"id": 1, "method": "subscription.subscribe",
        "params": {"channels": ["lifecycle"], "since": 0}}),
    )
    .await;
    let mut got = Vec::new();
    while got.len() < 3 {
        got.push(ws_next(&mut bound).await);
    }
    assert_eq!(got[0]["type"], "success");
    assert_eq!(got[2]["params"]["data"]["event"], "completed");
    app.stop().await;
}

async fn handshakes_are_authenticated_and_checked(db: Db) {
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    let (_admin, alice, bob) = admin_and_users(&app).await;
    let (Cred::Key(alice_key), Cred::Key(bob_key)) = (&alice, &bob) else {
        panic!("api keys");
    };
    let tid = uuid();
    let path = format!("/threads/{tid}/stream/events");
    let as_alice = [("x-api-key", alice_key.clone())];
    // Alice's thread, created by her run.
    app.mock.push(Turn::text("mine"));
    let r = app
        .client
        .post(app.u(&format!("/threads/{tid}/commands")))
        .header("x-api-key", alice_key)
        .json(&json!({"id": 1, "method": "run.start",
                      "params": {"assistant_id": "lead_agent", "input": user_input("hi")}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let rid = r.json::<Value>().await.unwrap()["result"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(ws_connect(&app, &path, &[]).await.err(), Some(401));
    let bad_key = [("x-api-key", format!("fawn_{}", "A".repeat(43)))];
    assert_eq!(ws_connect(&app, &path, &bad_key).await.err(), Some(401));
    let as_bob = [("x-api-key", bob_key.clone())];
    assert_eq!(ws_connect(&app, &path, &as_bob).await.err(), Some(404));
    assert_eq!(
        ws_connect(
            &app,
            &format!("/threads/{tid}/runs/{rid}/protocol"),
            &as_bob
        )
        .await
        .err(),
        Some(404)
    );
    // Bob cannot use Alice's thread over HTTP either.
    for (route, body) in [
        (
            "commands",
            json!({"id": 1, "method": "state.get", "params": {}}),
        ),
        ("stream/events", json!({"channels": ["values"]})),
    ] {
        let r = app
            .client
            .post(app.u(&format!("/threads/{tid}/{route}")))
            .header("x-api-key", bob_key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{route}");
    }
    // A stream of a thread that does not exist yet shows Bob nothing of Alice's later runs.
    let later = uuid();
    let mut bobs = app
        .client
        .post(app.u(&format!("/threads/{later}/stream/events")))
        .header("x-api-key", bob_key)
        .json(&json!({"channels": ["lifecycle"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(bobs.status(), 200);
    app.mock.push(Turn::text("still mine"));
    let r = app
        .client
        .post(app.u(&format!("/threads/{later}/commands")))
        .header("x-api-key", alice_key)
        .json(&json!({"id": 1, "method": "run.start",
                      "params": {"assistant_id": "lead_agent", "input": user_input("hi")}}))
        .send()
        .await
        .unwrap();
    let later_run = r.json::<Value>().await.unwrap()["result"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    app.eventually("alice's run finished", || async {
        let r = app
            .client
            .get(app.u(&format!("/threads/{later}/runs/{later_run}")))
            .header("x-api-key", alice_key)
            .send()
            .await
            .unwrap();
        let v = r.json::<Value>().await.unwrap();
        !matches!(v["status"].as_str(), Some("pending" | "running"))
    })
    .await;
    // Only heartbeats (or nothing) reached Bob: no event of Alice's run.
    let got = tokio::time::timeout(Duration::from_millis(300), bobs.chunk()).await;
    if let Ok(Ok(Some(chunk))) = got {
        assert!(
            !String::from_utf8_lossy(&chunk).contains("event:"),
            "{chunk:?}"
        );
    }
    // Now that the thread is Alice's, Bob cannot open a stream of it at all.
    let r = app
        .client
        .post(app.u(&format!("/threads/{later}/stream/events")))
        .header("x-api-key", bob_key)
        .json(&json!({"channels": ["lifecycle"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // Origins: a foreign page is refused, one served from this machine is not.
    let foreign = [
        ("x-api-key", alice_key.clone()),
        ("origin", "https://evil.example".to_string()),
    ];
    assert_eq!(ws_connect(&app, &path, &foreign).await.err(), Some(403));
    let local = [
        ("x-api-key", alice_key.clone()),
        ("origin", "http://localhost:3000".to_string()),
    ];
    assert!(ws_connect(&app, &path, &local).await.is_ok());
    assert!(ws_connect(&app, &path, &as_alice).await.is_ok());
    // A browser session (the cookie) works over the socket, from the same origin.
    let r = app
        .client
        .post(app.u("/api/v1/auth/login/local"))
        .json(&json!({"username": "alice@example.com", "password": "user-password"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let session = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("access_token="))
        .and_then(|c| c.split(';').next())
        .expect("session cookie")
        .to_string();
    let cookie = [("cookie", format!("access_token={session}"))];
    let mut ws = ws_connect(&app, &path, &cookie).await.unwrap();
    ws_send(
        &mut ws,
        json!({"id": 1, "method": "subscription.subscribe",
        "params": {"channels": ["lifecycle"]}}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["type"], "success");
    // The same session token as a bearer token.
    let bearer = [("authorization", format!("Bearer {session}"))];
    assert!(ws_connect(&app, &path, &bearer).await.is_ok());
    let with_foreign_origin = [
        ("cookie", format!("access_token={session}")),
        ("origin", "https://evil.example".to_string()),
    ];
    assert_eq!(
        ws_connect(&app, &path, &with_foreign_origin).await.err(),
        Some(403)
    );
    app.stop().await;
}

/// A protocol run executed by one node, streamed from the other (Postgres `NOTIFY`
/// relays its steps, as for a join).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_another_node_streams_from_this_one() {
    let Some(a) = spawn_app(Db::Postgres).await else {
        return;
    };
    let Some(b) = spawn_with(Spawn {
        existing_db: Some(a.db.clone()),
        mock: Some(a.mock.clone()),
        ..Spawn::new(Db::Postgres)
    })
    .await
    else {
        return;
    };
    let tid = uuid();
    a.mock.push(
        Turn::text((0..30).map(|i| format!("w{i} ")).collect::<String>())
            .with_chunk_delay(Duration::from_millis(20)),
    );
    let rid = run_start(&a, &tid, "slow").await;
    let on = |app: &TestApp| app.handle.state.rt.executes_here(&rid);
    a.eventually("a node executes the run", || async { on(&a) || on(&b) })
        .await;
    // Stream it from the node that does not execute it.
    let other = if on(&a) { &b } else { &a };
    let mut s = open_stream(other, &tid, json!({"channels": ["lifecycle", "values"]})).await;
    let events = read_until_end(&mut s, 1).await;
    assert_eq!(
        events.last().unwrap()["params"]["data"]["event"],
        "completed"
    );
    let last_values = events
        .iter()
        .rev()
        .find(|e| e["method"] == "values")
        .expect("the run's steps were relayed");
    let messages = last_values["params"]["data"]["messages"]
        .as_array()
        .unwrap();
    assert!(
        messages.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .starts_with("w0 w1")
    );
    let (_, run) = other.get_json(&format!("/threads/{tid}/runs/{rid}")).await;
    assert_eq!(run["status"], "success");
    b.stop().await;
    a.stop().await;
}
