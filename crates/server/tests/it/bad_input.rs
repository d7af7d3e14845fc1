//! Bad input: a 4xx with a JSON `detail`, never a 5xx or 429, nothing half-written, and
//! the server keeps serving.

use crate::helpers::*;
use serde_json::{Value, json};

backends!(bad_input_table);

async fn bad_input_table(db: Db) {
    let Some(app) = spawn_with(Spawn {
        tweak: Some(Box::new(|o| o.body_limit = 64 * 1024)),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let tid = app.create_thread().await;
    let missing = uuid::Uuid::new_v4();
    let run = format!("/threads/{tid}/runs");
    let big = "x".repeat(200 * 1024);
    // (method, path, raw body, expected status, expected detail substring)
    let cases: Vec<(&str, String, String, u16, &str)> = vec![
        (
            "POST",
            "/threads".into(),
            "{not json".into(),
            400,
            "Invalid JSON",
        ),
        (
            "POST",
            "/threads".into(),
            "[1,2]".into(),
            422,
            "Invalid request body",
        ),
        (
            "POST",
            "/threads".into(),
            r#"{"thread_id":"nope"}"#.into(),
            422,
            "Invalid thread ID: must be a UUID",
        ),
        (
            "POST",
            "/threads".into(),
            r#"{"metadata":5}"#.into(),
            422,
            "metadata",
        ),
        (
            "POST",
            "/threads".into(),
            r#"{"if_exists":"explode"}"#.into(),
            422,
            "if_exists",
        ),
        (
            "POST",
            "/threads".into(),
            format!(r#"{{"metadata":{{"a":"{big}"}}}}"#),
            413,
            "too large",
        ),
        (
            "GET",
            "/threads/not-a-uuid".into(),
            String::new(),
            422,
            "Invalid thread ID: must be a UUID",
        ),
        (
            "GET",
            format!("/threads/{missing}"),
            String::new(),
            404,
            "not found",
        ),
        (
            "DELETE",
            format!("/threads/{missing}"),
            String::new(),
            404,
            "not found",
        ),
        (
            "GET",
            format!("/threads/{tid}/runs/not-a-uuid"),
            String::new(),
            422,
            "Invalid run ID",
        ),
        (
            "GET",
            format!("/threads/{tid}/runs/{missing}"),
            String::new(),
            404,
            "Not Found",
        ),
        (
            "GET",
            format!("/threads/{tid}/runs?limit=abc"),
            String::new(),
            422,
            "limit",
        ),
        (
            "GET",
            format!("/threads/{tid}/runs?status=sleeping"),
            String::new(),
            422,
            "status",
        ),
        (
            "POST",
            format!("/threads/{missing}/runs"),
            r#"{"assistant_id":"lead_agent"}"#.into(),
            404,
            "Thread or assistant not found.",
        ),
        ("POST", run.clone(), "{}".into(), 422, "assistant_id"),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":"no-such-graph"}"#.into(),
            422,
            "Invalid assistant: 'no-such-graph'",
        ),
        (
            "POST",
            run.clone(),
            format!(r#"{{"assistant_id":"{missing}"}}"#),
            404,
            "Thread or assistant not found.",
        ),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":42}"#.into(),
            422,
            "assistant_id",
        ),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":"lead_agent","stream_mode":"bogus"}"#.into(),
            422,
            "bogus",
        ),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":"lead_agent","stream_mode":["values","lifecycle"]}"#.into(),
            422,
            "lifecycle",
        ),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":"lead_agent","input":"just text"}"#.into(),
            422,
            "input",
        ),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":"lead_agent","input":{"messages":5}}"#.into(),
            422,
            "input",
        ),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":"lead_agent","config":{"configurable":{"a":1}},"context":{"b":2}}"#
                .into(),
            400,
            "configurable and context",
        ),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":"lead_agent","multitask_strategy":"yolo"}"#.into(),
            422,
            "multitask_strategy",
        ),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":"lead_agent","after_seconds":-1}"#.into(),
            422,
            "after_seconds",
        ),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":"lead_agent","interrupt_before":5}"#.into(),
            422,
            "interrupt_before",
        ),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":"lead_agent","command":{"update":7}}"#.into(),
            422,
            "command.update",
        ),
        (
            "POST",
            run.clone(),
            r#"{"assistant_id":"lead_agent","on_disconnect":"explode"}"#.into(),
            422,
            "on_disconnect",
        ),
        (
            "POST",
            format!("{run}/stream"),
            r#"{"assistant_id":"lead_agent","stream_resumable":"yes"}"#.into(),
            422,
            "stream_resumable",
        ),
        (
            "POST",
            format!("{run}/wait"),
            r#"{"assistant_id":"lead_agent","config":[]}"#.into(),
            422,
            "config",
        ),
        (
            "POST",
            format!("{run}/{missing}/cancel?action=explode"),
            String::new(),
            422,
            "action",
        ),
        (
            "POST",
            format!("{run}/{missing}/cancel"),
            String::new(),
            404,
            "No matching runs",
        ),
        (
            "POST",
            "/runs/batch".into(),
            r#"{"assistant_id":"lead_agent"}"#.into(),
            422,
            "Invalid request body",
        ),
        (
            "POST",
            "/assistants/search".into(),
            r#"{"limit":"ten"}"#.into(),
            422,
            "limit",
        ),
        (
            "POST",
            "/assistants".into(),
            r#"{"graph_id":"lead_agent","assistant_id":"x"}"#.into(),
            422,
            "Invalid assistant ID",
        ),
        (
            "GET",
            "/assistants/not-a-uuid".into(),
            String::new(),
            422,
            "Invalid assistant ID",
        ),
        (
            "POST",
            format!("/assistants/{missing}/latest"),
            r#"{"version":"one"}"#.into(),
            422,
            "version",
        ),
        (
            "GET",
            "/runs/crons/not-a-uuid".into(),
            String::new(),
            422,
            "Invalid cron ID",
        ),
        (
            "GET",
            format!("/runs/crons/{missing}"),
            String::new(),
            404,
            "not found",
        ),
        (
            "PUT",
            "/store/items".into(),
            r#"{"namespace":["a"],"key":"k"}"#.into(),
            422,
            "value",
        ),
        (
            "POST",
            format!("/threads/{tid}/state"),
            r#"{"values":{"messages":[{"type":"remove","id":"nope"}]}}"#.into(),
            400,
            "nope",
        ),
        (
            "POST",
            format!("/threads/{tid}/history"),
            r#"{"limit":-3}"#.into(),
            422,
            "limit",
        ),
        (
            "POST",
            format!("/threads/{tid}/history"),
            r#"{"before":7}"#.into(),
            422,
            "before",
        ),
    ];
    for (method, path, body, status, detail) in &cases {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = app.client.request(m, app.u(path));
        if !body.is_empty() {
            req = req
                .header("content-type", "application/json")
                .body(body.clone());
        }
        let r = req.send().await.unwrap();
        let got = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(got, *status, "{method} {path} {body:.80} → {got} {text}");
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: body is not JSON: {text}"));
        let d = v["detail"]
            .as_str()
            .unwrap_or_else(|| panic!("no detail: {v}"));
        assert!(
            d.contains(detail),
            "{method} {path}: detail {d:?} lacks {detail:?}"
        );
    }
    // Nothing was half-written: one thread, no runs, no checkpoints.
    let (_, n) = app.post_json("/threads/count", json!({})).await;
    assert_eq!(n, json!(1));
    let (_, runs) = app.get_json(&format!("/threads/{tid}/runs")).await;
    assert_eq!(runs, json!([]));
    let (_, h) = app
        .post_json(&format!("/threads/{tid}/history"), json!({}))
        .await;
    assert_eq!(h, json!([]));
    let (_, t) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(t["status"], "idle");
    // Lenient inputs: text/plain JSON bodies, bodies on DELETE, both list encodings.
    let r = app
        .client
        .post(app.u("/threads"))
        .header("content-type", "text/plain")
        .body(r#"{"metadata":{"via":"text"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (_, ok) = app.get_json("/ok").await;
    assert_eq!(ok["ok"], true, "still serving");
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("still works"),
                   "unknown_field": 1, "durability": "async", "checkpoint_during": true}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    app.stop().await;
}
