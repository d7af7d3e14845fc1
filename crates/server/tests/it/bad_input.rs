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

/// Sends a raw request and checks the answer is `status` with a JSON `detail` containing
/// `detail`; returns the parsed body.
async fn expect_error(
    app: &TestApp,
    method: &str,
    path: &str,
    body: Option<Value>,
    status: u16,
    detail: &str,
) -> Value {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = app.client.request(m, app.u(path));
    if let Some(b) = &body {
        req = req.json(b);
    }
    let r = req.send().await.unwrap();
    let got = r.status().as_u16();
    let text = r.text().await.unwrap();
    assert_eq!(got, status, "{method} {path} → {got} {text}");
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("{method} {path}: body is not JSON: {text}"));
    let d = v["detail"]
        .as_str()
        .unwrap_or_else(|| panic!("{method} {path}: no detail: {v}"));
    assert!(
        d.contains(detail),
        "{method} {path}: detail {d:?} lacks {detail:?}"
    );
    v
}
// ------------------------------------------------------------------------- thread TTLs

backends!(
    thread_ttl_out_of_range_is_422,
    stored_out_of_range_ttl_breaks_nothing,
    the_ttl_migration_clears_what_the_unbounded_server_stored
);

/// A TTL must be a positive, finite number of minutes of at most 100 years, on create and
/// on patch; a refused one changes nothing.
async fn thread_ttl_out_of_range_is_422(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let bad = [
        json!({"strategy": "delete", "ttl": 200_000_000_000u64}),
        json!({"ttl": 1e308}),
        json!({"ttl": 52_596_001}),
        json!({"ttl": 0}),
        json!({"ttl": -5}),
        json!(200_000_000_000u64),
        json!(-1),
    ];
    for ttl in &bad {
        expect_error(
            &app,
            "POST",
            "/threads",
            Some(json!({"ttl": ttl})),
            422,
            "ttl",
        )
        .await;
    }
    let v = expect_error(
        &app,
        "POST",
        "/threads",
        Some(json!({"ttl": {"strategy": "delete", "ttl": 200_000_000_000u64}})),
        422,
        "100 years",
    )
    .await;
    assert!(v["detail"].as_str().unwrap().contains("52596000"), "{v}");
    let (_, n) = app.post_json("/threads/count", json!({})).await;
    assert_eq!(n, json!(0), "a refused thread was created");

    // The bound itself is accepted.
    let (s, t) = app
        .post_json(
            "/threads",
            json!({"ttl": {"ttl": 52_596_000, "strategy": "delete"}}),
        )
        .await;
    assert_eq!(s, 200, "{t}");
    let tid = t["thread_id"].as_str().unwrap().to_string();
    let (s, before) = app.get_json(&format!("/threads/{tid}?include=ttl")).await;
    assert_eq!(s, 200, "{before}");
    assert_eq!(before["ttl"]["ttl"], json!(52_596_000.0));

    // PATCH: same rule, and the thread keeps its TTL.
    for ttl in &bad {
        let r = app
            .client
            .patch(app.u(&format!("/threads/{tid}")))
            .json(&json!({"ttl": ttl, "metadata": {"patched": true}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "PATCH ttl {ttl}");
        let v: Value = r.json().await.unwrap();
        assert!(v["detail"].as_str().unwrap().contains("ttl"), "{v}");
    }
    let (s, after) = app.get_json(&format!("/threads/{tid}?include=ttl")).await;
    assert_eq!(s, 200, "{after}");
    assert_eq!(after, before, "a refused patch changed the thread");
    let (s, page) = app.post_json("/threads/search", json!({})).await;
    assert_eq!(s, 200, "{page}");

    // Store items follow the same rule.
    for ttl in [json!(200_000_000_000u64), json!(52_596_001), json!(0)] {
        expect_error(
            &app,
            "PUT",
            "/store/items",
            Some(json!({"namespace": ["n"], "key": "k", "value": {}, "ttl": ttl})),
            422,
            "100 years",
        )
        .await;
    }
    let (s, v) = app.get_json("/store/items?namespace=n&key=k").await;
    assert_eq!((s, v), (200, Value::Null));
    app.stop().await;
}

/// A row stored before the TTL was validated (an expiry out of any date range, a TTL of
/// thousands of millennia) reads as a thread without expiry: listings, the thread's routes
/// and its state updates keep working, also after a restart, and a PATCH makes it whole.
async fn stored_out_of_range_ttl_breaks_nothing(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let good = app.create_thread().await;
    let bad = app.create_thread().await;
    let (s, v) = app
        .post_json(
            &format!("/threads/{bad}/state"),
            json!({"values": user_input("before")}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    // What the unvalidated server left behind: SQLite turned the overflowing expiry into a
    // REAL; Postgres holds the largest BIGINT, which no date can represent.
    match db {
        Db::Sqlite => {
            app.db
                .exec(&format!(
                    "UPDATE threads SET ttl_minutes = 200000000000.0, ttl_strategy = 'delete', \
                     expires_at = 1.2e19 WHERE thread_id = '{bad}'"
                ))
                .await
        }
        Db::Postgres => {
            app.db
                .exec(&format!(
                    "UPDATE {{schema}}.threads SET ttl_minutes = 200000000000, \
                     ttl_strategy = 'delete', expires_at = 9223372036854775807 \
                     WHERE thread_id = '{bad}'"
                ))
                .await
        }
    }
    // The row outlives the process that wrote it.
    let test_db = app.db.clone();
    app.stop().await;
    let app = spawn_with(Spawn {
        existing_db: Some(test_db),
        ..Spawn::new(db)
    })
    .await
    .unwrap();
    // Round 0 reads the row as it was left; round 1 after a state update refreshed it.
    for round in 0..2 {
        let (s, page) = app.post_json("/threads/search", json!({})).await;
        assert_eq!(s, 200, "round {round}: {page}");
        let ids: Vec<&str> = page
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["thread_id"].as_str().unwrap())
            .collect();
        assert!(
            ids.contains(&good.as_str()) && ids.contains(&bad.as_str()),
            "{page}"
        );
        let (s, n) = app.post_json("/threads/count", json!({})).await;
        assert_eq!((s, n), (200, json!(2)));
        let (s, t) = app.get_json(&format!("/threads/{bad}?include=ttl")).await;
        assert_eq!(s, 200, "round {round}: {t}");
        assert_eq!(t["ttl"], Value::Null, "{t}");
        let (s, t) = app.get_json(&format!("/threads/{bad}/state")).await;
        assert_eq!(s, 200, "round {round}: {t}");
        let (s, h) = app
            .post_json(&format!("/threads/{bad}/history"), json!({}))
            .await;
        assert_eq!(s, 200, "round {round}: {h}");
        // A state update refreshes the expiry from the TTL: not from that one.
        let (s, v) = app
            .post_json(
                &format!("/threads/{bad}/state"),
                json!({"values": user_input(&format!("round {round}"))}),
            )
            .await;
        assert_eq!(s, 200, "round {round}: {v}");
    }
    // A PATCH rewrites the TTL from what it read (none): the row is whole again, and a new
    // TTL can be set.
    let (s, v) = app
        .patch_json(&format!("/threads/{bad}"), json!({"metadata": {"x": 1}}))
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = app
        .patch_json(&format!("/threads/{bad}"), json!({"ttl": 60}))
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, t) = app.get_json(&format!("/threads/{bad}?include=ttl")).await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(t["ttl"]["ttl"], json!(60.0), "{t}");
    assert_eq!(t["metadata"]["x"], 1, "{t}");
    let (s, v) = app
        .post_json(
            &format!("/threads/{bad}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("after")}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    app.stop().await;
}

// ------------------------------------------------------------- NUL in JSON filter keys

backends!(nul_in_filter_keys_matches_like_any_key);

/// A filter key with a NUL character is a key like any other: it matches the rows stored
/// with it and nothing else, on every JSON filter of every resource (SQLite builds JSON
/// paths from keys, which cannot hold a NUL).
async fn nul_in_filter_keys_matches_like_any_key(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let nul = "a\u{0}b";
    let (s, t) = app
        .post_json("/threads", json!({"metadata": {nul: 1, "kind": "nul"}}))
        .await;
    assert_eq!(s, 200, "{t}");
    let tid = t["thread_id"].as_str().unwrap().to_string();
    let other = app.create_thread().await;
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/state"),
            json!({"values": user_input("hi")}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = app
        .post_json(
            "/assistants",
            json!({"graph_id": "lead_agent", "metadata": {nul: 1}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let aid = v["assistant_id"].as_str().unwrap().to_string();
    let (s, v) = app
        .post_json(
            &format!("/threads/{other}/runs/crons"),
            json!({"assistant_id": "lead_agent", "schedule": "0 0 1 1 *", "metadata": {"c": 1}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let r = app
        .client
        .put(app.u("/store/items"))
        .json(&json!({"namespace": ["ns"], "key": "k", "value": {nul: 1, "x": 2}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());

    let ids = |v: &Value, field: &str| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("not a list: {v}"))
            .iter()
            .map(|x| x[field].as_str().unwrap().to_string())
            .collect()
    };
    for key in [nul, "a\u{0}", "\u{0}", "a\u{0}c"] {
        let hit = key == nul;
        let (s, v) = app
            .post_json("/threads/search", json!({"metadata": {key: 1}}))
            .await;
        assert_eq!(s, 200, "{key:?}: {v}");
        let expected: Vec<String> = if hit { vec![tid.clone()] } else { vec![] };
        assert_eq!(ids(&v, "thread_id"), expected, "{key:?}");
        let (s, v) = app
            .post_json("/threads/count", json!({"metadata": {key: 1}}))
            .await;
        assert_eq!((s, v), (200, json!(usize::from(hit))), "{key:?}");
        for body in [
            json!({"values": {key: 1}}),
            json!({"values": {key: {"x": 1}}}),
            json!({"metadata": {key: [1]}}),
        ] {
            let (s, v) = app.post_json("/threads/search", body.clone()).await;
            assert_eq!((s, &v), (200, &json!([])), "{body}");
            let (s, v) = app.post_json("/threads/count", body.clone()).await;
            assert_eq!((s, &v), (200, &json!(0)), "{body}");
        }
        let (s, v) = app
            .post_json("/assistants/search", json!({"metadata": {key: 1}}))
            .await;
        assert_eq!(s, 200, "{key:?}: {v}");
        let expected: Vec<String> = if hit { vec![aid.clone()] } else { vec![] };
        assert_eq!(ids(&v, "assistant_id"), expected, "{key:?}");
        let (s, v) = app
            .post_json("/assistants/count", json!({"metadata": {key: 1}}))
            .await;
        assert_eq!((s, v), (200, json!(usize::from(hit))), "{key:?}");
        let (s, v) = app
            .post_json("/runs/crons/search", json!({"metadata": {key: 1}}))
            .await;
        assert_eq!((s, &v), (200, &json!([])), "{key:?}");
        let (s, v) = app
            .post_json("/runs/crons/count", json!({"metadata": {key: 1}}))
            .await;
        assert_eq!((s, v), (200, json!(0)), "{key:?}");
        let (s, v) = app
            .post_json(
                &format!("/threads/{tid}/history"),
                json!({"metadata": {key: 1}}),
            )
            .await;
        assert_eq!((s, &v), (200, &json!([])), "{key:?}");
        let (s, v) = app
            .post_json(
                "/store/items/search",
                json!({"namespace_prefix": ["ns"], "filter": {key: 1}}),
            )
            .await;
        assert_eq!(s, 200, "{key:?}: {v}");
        assert_eq!(
            v["items"].as_array().unwrap().len(),
            usize::from(hit),
            "{key:?}: {v}"
        );
        // Namespace labels are stored as text, which cannot hold a NUL on Postgres: they
        // are refused everywhere, like labels with a period.
        for (method, path, body) in [
            ("POST", "/store/namespaces", json!({"prefix": [key]})),
            ("POST", "/store/namespaces", json!({"suffix": ["ns", key]})),
            (
                "POST",
                "/store/items/search",
                json!({"namespace_prefix": [key]}),
            ),
            (
                "PUT",
                "/store/items",
                json!({"namespace": ["ns", key], "key": "k", "value": {}}),
            ),
            (
                "DELETE",
                "/store/items",
                json!({"namespace": [key], "key": "k"}),
            ),
        ] {
            expect_error(&app, method, path, Some(body), 422, "NUL").await;
        }
        let path = format!("/store/items?namespace=ns.{}&key=k", "a%00b");
        expect_error(&app, "GET", &path, None, 422, "NUL").await;
    }
    let (s, v) = app.post_json("/store/namespaces", json!({})).await;
    assert_eq!((s, v), (200, json!({"namespaces": [["ns"]]})));
    // Still serving, unfiltered listings intact.
    let (s, v) = app.post_json("/threads/count", json!({})).await;
    assert_eq!((s, v), (200, json!(2)));
    app.stop().await;
}

// ------------------------------------------------------------------ thread supersteps

backends!(supersteps_with_an_unknown_node_create_nothing);

/// `POST /threads` with supersteps is all or nothing: a superstep the state-update route
/// would refuse (an unknown node, bad values) is a 4xx and leaves no thread, no
/// checkpoint; on an existing thread (`if_exists: do_nothing`) it leaves the state as it
/// was.
async fn supersteps_with_an_unknown_node_create_nothing(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let given = uuid::Uuid::new_v4().to_string();
    let good = json!({"updates": [{"values": user_input("one"), "as_node": "__input__"}]});
    let cases = [
        (
            json!({"supersteps": [{"updates": [{"values": {}, "as_node": "nope"}]}]}),
            400,
            "nope",
        ),
        (
            json!({"thread_id": given, "supersteps": [good, {"updates": [{"values": {}, "as_node": "nope"}]}]}),
            400,
            "nope",
        ),
        (
            json!({"thread_id": given, "if_exists": "do_nothing",
                   "supersteps": [good, {"updates": [{"values": {"messages": 5}}]}]}),
            422,
            "values",
        ),
    ];
    for (body, status, detail) in &cases {
        expect_error(
            &app,
            "POST",
            "/threads",
            Some(body.clone()),
            *status,
            detail,
        )
        .await;
    }
    let (_, n) = app.post_json("/threads/count", json!({})).await;
    assert_eq!(n, json!(0), "a refused request left a thread");
    expect_error(
        &app,
        "GET",
        &format!("/threads/{given}"),
        None,
        404,
        "not found",
    )
    .await;

    // Good supersteps on a new thread: one checkpoint per update.
    let (s, t) = app
        .post_json(
            "/threads",
            json!({"thread_id": given, "supersteps": [good, {"updates": [{"values": {}, "as_node": "agent"}]}]}),
        )
        .await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(t["thread_id"], given.as_str());
    assert_eq!(t["values"]["messages"][0]["content"], "one", "{t}");
    let (_, h) = app
        .post_json(&format!("/threads/{given}/history"), json!({}))
        .await;
    assert_eq!(h.as_array().unwrap().len(), 2, "{h}");

    // On an existing thread a bad superstep leaves its state alone.
    let (_, state_before) = app.get_json(&format!("/threads/{given}/state")).await;
    expect_error(
        &app,
        "POST",
        "/threads",
        Some(json!({"thread_id": given, "if_exists": "do_nothing",
                    "supersteps": [good, {"updates": [{"values": {}, "as_node": "nope"}]}]})),
        400,
        "nope",
    )
    .await;
    let (_, state_after) = app.get_json(&format!("/threads/{given}/state")).await;
    assert_eq!(state_after, state_before);
    let (_, h) = app
        .post_json(&format!("/threads/{given}/history"), json!({}))
        .await;
    assert_eq!(h.as_array().unwrap().len(), 2, "{h}");
    // `raise` on an existing thread is a conflict, also with supersteps.
    expect_error(
        &app,
        "POST",
        "/threads",
        Some(json!({"thread_id": given, "supersteps": [good]})),
        409,
        "already exists",
    )
    .await;
    let (_, n) = app.post_json("/threads/count", json!({})).await;
    assert_eq!(n, json!(1));
    app.stop().await;
}

backends!(supersteps_that_fail_to_store_leave_no_thread);

/// Supersteps that pass every check but cannot be stored (a database failure, injected
/// with a trigger) leave no thread behind: the request fails as a whole.
async fn supersteps_that_fail_to_store_leave_no_thread(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    match db {
        Db::Sqlite => {
            app.db
                .exec(
                    "CREATE TRIGGER fail_checkpoints BEFORE INSERT ON checkpoints \
                     BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
                )
                .await
        }
        Db::Postgres => {
            app.db
                .exec(
                    "CREATE FUNCTION {schema}.fail_checkpoints() RETURNS trigger \
                     LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$; \
                     CREATE TRIGGER fail_checkpoints BEFORE INSERT ON {schema}.checkpoints \
                     FOR EACH ROW EXECUTE FUNCTION {schema}.fail_checkpoints();",
                )
                .await
        }
    }
    let given = uuid::Uuid::new_v4().to_string();
    let one = json!({"updates": [{"values": user_input("one"), "as_node": "__input__"}]});
    let two = json!({"updates": [{"values": {}, "as_node": "agent"}]});
    for steps in [json!([one]), json!([one, two])] {
        let (s, v) = app
            .post_json("/threads", json!({"thread_id": given, "supersteps": steps}))
            .await;
        assert_eq!(s, 500, "{v}");
        assert!(v["detail"].is_string(), "{v}");
        let (s, _) = app.get_json(&format!("/threads/{given}")).await;
        assert_eq!(s, 404, "a thread whose supersteps failed was left behind");
    }
    let (_, n) = app.post_json("/threads/count", json!({})).await;
    assert_eq!(n, json!(0));
    app.stop().await;
}

// --------------------------------------------------------------------- path parameters

/// Path parameters that are not UTF-8 once percent-decoded get the JSON envelope and a
/// 422, like any other invalid id, on the LangGraph routes and the gateway's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_utf8_path_params_get_the_json_envelope() {
    let app = spawn_app(Db::Sqlite).await.unwrap();
    let tid = app.create_thread().await;
    let cases = [
        ("GET", "/threads/%FF%FE".to_string()),
        ("GET", "/assistants/%C3%28".to_string()),
        ("GET", "/api/langgraph/threads/%FF".to_string()),
        ("PATCH", "/threads/%FF".to_string()),
        ("DELETE", "/threads/%FF".to_string()),
        ("GET", "/threads/%FF/state".to_string()),
        ("GET", format!("/threads/{tid}/state/%FF")),
        ("GET", format!("/threads/{tid}/runs/%FF")),
        ("POST", format!("/threads/{tid}/runs/%FF/cancel")),
        ("GET", "/runs/%FF/stream".to_string()),
        ("GET", "/runs/crons/%FF".to_string()),
        ("GET", "/assistants/%FF/subgraphs/%FE".to_string()),
        ("GET", "/api/threads/%FF/uploads/list".to_string()),
        ("DELETE", format!("/api/threads/{tid}/uploads/%FF")),
        ("GET", format!("/api/threads/{tid}/artifacts/mnt/%FF")),
        ("GET", "/api/skills/%FF".to_string()),
        ("GET", "/api/models/%FF".to_string()),
        ("DELETE", "/api/memory/facts/%FF".to_string()),
        ("GET", "/api/threads/%FF/token-usage".to_string()),
    ];
    for (method, path) in &cases {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let r = app.client.request(m, app.u(path)).send().await.unwrap();
        let status = r.status().as_u16();
        let ct = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let text = r.text().await.unwrap();
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: {status} not JSON: {text}"));
        assert!(ct.starts_with("application/json"), "{method} {path}: {ct}");
        let detail = v["detail"].as_str().unwrap_or_default();
        assert_eq!(status, 422, "{method} {path}: {text}");
        assert!(detail.contains("UTF-8"), "{method} {path}: {detail}");
    }
    let (_, ok) = app.get_json("/ok").await;
    assert_eq!(ok["ok"], true);
    app.stop().await;
}

// ------------------------------------------------------------------------ upload names

/// A multipart body with one `files` part per `(filename, data)`.
fn multipart(parts: &[(&str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "fawn-bad-input-boundary-41c2";
    let mut body = Vec::new();
    for (name, data) in parts {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// Upload parts whose names are dropped (empty, `.`, `..`, backslashes, control
/// characters, over 255 bytes, staging names) are reported in `skipped_files` under the
/// name the client sent, as DeerFlow does, and `success` is false; the other files of the
/// request are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_upload_names_are_reported_in_skipped_files() {
    let app = spawn_app(Db::Sqlite).await.unwrap();
    let tid = "skipped-names";
    let long = "x".repeat(256);
    let dropped = [
        "..",
        "a\\..\\..\\x",
        "",
        ".",
        "dir/..",
        "tab\there",
        long.as_str(),
        ".upload-0123.part",
    ];
    let mut parts: Vec<(&str, &[u8])> = dropped.iter().map(|n| (*n, &b"x"[..])).collect();
    parts.insert(2, ("kept.txt", b"kept"));
    let (ct, body) = multipart(&parts);
    let r = app
        .client
        .post(app.u(&format!("/api/threads/{tid}/uploads")))
        .header("content-type", ct)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["success"], false, "{v}");
    assert_eq!(v["skipped_files"], json!(dropped), "{v}");
    assert_eq!(v["files"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["files"][0]["filename"], "kept.txt");
    assert_eq!(
        v["message"],
        format!(
            "Successfully uploaded 1 file(s); skipped {} unsafe file(s)",
            dropped.len()
        )
    );
    let dir = app
        .home
        .join("users/default/threads")
        .join(tid)
        .join("user-data/uploads");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["kept.txt"]);
    app.stop().await;
}

/// Migration 0007 (Postgres) / 0003 (SQLite) turns the out-of-range TTLs the unbounded
/// server stored into "no TTL", so the run functions no longer overflow on them; valid TTLs
/// stay.
async fn the_ttl_migration_clears_what_the_unbounded_server_stored(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let bad = app.create_thread().await;
    let (s, good) = app
        .post_json(
            "/threads",
            json!({"ttl": {"strategy": "delete", "ttl": 60}}),
        )
        .await;
    assert_eq!(s, 200, "{good}");
    let good = good["thread_id"].as_str().unwrap().to_string();
    let (prefix, migration) = match db {
        Db::Sqlite => (
            "",
            include_str!("../../../../migrations/sqlite/0003_clear_out_of_range_ttls.sql"),
        ),
        Db::Postgres => (
            "SET search_path TO {schema}; ",
            include_str!("../../../../migrations/postgres/0007_clear_out_of_range_ttls.sql"),
        ),
    };
    app.db
        .exec(&format!(
            "{prefix}UPDATE threads SET ttl_minutes = 200000000000, ttl_strategy = 'delete', \
             expires_at = NULL WHERE thread_id = '{bad}'"
        ))
        .await;
    // Without the migration, Postgres answers this thread's runs with "bigint out of range".
    app.db.exec(&format!("{prefix}{migration}")).await;
    let (_, t) = app.get_json(&format!("/threads/{bad}?include=ttl")).await;
    assert_eq!(t["ttl"], Value::Null, "{t}");
    let (_, t) = app.get_json(&format!("/threads/{good}?include=ttl")).await;
    assert_eq!(t["ttl"]["ttl"], json!(60.0), "{t}");
    let (s, v) = app
        .post_json(
            &format!("/threads/{bad}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("after")}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    app.stop().await;
}

/// The runtime names a bad field (`RuntimeError::InvalidField` / `MissingField`); the server
/// words it. The wording is what SDK clients see, so it is pinned here word for word, for
/// run creation, state updates and scheduled tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_errors_keep_their_wire_text() {
    let app = spawn_app(Db::Sqlite).await.unwrap();
    let tid = app.create_thread().await;
    let runs = format!("/threads/{tid}/runs");
    let cases = [
        (
            runs.clone(),
            json!({"input": null}),
            "Invalid request body: `assistant_id` is required",
        ),
        (
            runs.clone(),
            json!({"assistant_id": 3}),
            "Invalid request body at `assistant_id`: must be a string",
        ),
        (
            runs.clone(),
            json!({"assistant_id": "lead_agent", "config": {"configurable": 3}}),
            "Invalid request body at `config.configurable`: must be an object",
        ),
        (
            runs.clone(),
            json!({"assistant_id": "lead_agent", "metadata": [1]}),
            "Invalid request body at `metadata`: must be an object",
        ),
        (
            runs.clone(),
            json!({"assistant_id": "lead_agent", "durability": "never"}),
            "Invalid request body at `durability`: 'never' is not one of [\"sync\", \"async\", \"exit\"]",
        ),
        (
            runs.clone(),
            json!({"assistant_id": "lead_agent", "command": "x"}),
            "Invalid request body at `command`: must be an object",
        ),
        (
            runs.clone(),
            json!({"assistant_id": "lead_agent", "after_seconds": "soon"}),
            "Invalid request body at `after_seconds`: must be a number",
        ),
        (
            "/runs/wait".to_string(),
            json!({"assistant_id": "lead_agent", "interrupt_before": 7}),
            "Invalid request body at `interrupt_before`: must be \"*\" or a list of node names",
        ),
        (
            "/api/scheduled-tasks".to_string(),
            json!({"title": "", "prompt": "p", "schedule_type": "cron",
                   "schedule_spec": {"cron": "0 9 * * *"}, "timezone": "UTC"}),
            "Invalid request body at `title`: must not be empty",
        ),
    ];
    for (path, body, detail) in cases {
        let v = expect_error(&app, "POST", &path, Some(body.clone()), 422, detail).await;
        assert_eq!(v["detail"], json!(detail), "{path} {body}");
    }
    app.stop().await;
}
