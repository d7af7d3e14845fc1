//! History from the run-event journal: `messages/page`, `messages`, a run's messages and
//! events, and feedback, on both backends.

use crate::auth::{Cred, admin_and_users, call, spawn_auth};
use crate::helpers::run_to_success as run;
use crate::helpers::*;
use fawn_testkit::Turn;
use serde_json::{Value, json};

backends!(
    journal_pages_two_runs_in_order,
    run_messages_and_events,
    feedback_round_trip,
    feedback_and_history_belong_to_their_user,
    threads_without_a_journal_page_their_checkpoint,
    history_under_api_has_deerflows_shape,
);

/// A thread with two runs: the weather turn (human, ai tool call, tool, ai) and a chat turn
/// (human, ai).
async fn two_runs(app: &TestApp) -> (String, String, String) {
    let tid = app.create_thread().await;
    weather_script(&app.mock);
    let r1 = run(app, &tid, "weather in paris?").await;
    app.mock.push(Turn::text("Glad to help."));
    let r2 = run(app, &tid, "thanks").await;
    (tid, r1, r2)
}

fn col<'a>(rows: &'a [Value], key: &str) -> Vec<&'a Value> {
    rows.iter().map(|r| &r[key]).collect()
}

fn seqs(rows: &[Value]) -> Vec<i64> {
    rows.iter().map(|r| r["seq"].as_i64().unwrap()).collect()
}

async fn journal_pages_two_runs_in_order(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (tid, r1, r2) = two_runs(&app).await;
    let (s, p) = app
        .get_json(&format!("/api/threads/{tid}/messages/page"))
        .await;
    assert_eq!(s, 200, "{p}");
    assert_eq!(
        (&p["has_more"], &p["next_before_seq"]),
        (&json!(false), &Value::Null)
    );
    let data = p["data"].as_array().unwrap();
    assert_eq!(seqs(data), vec![1, 2, 3, 4, 5, 6], "{p}");
    assert_eq!(
        col(data, "run_id"),
        vec![
            &json!(r1),
            &json!(r1),
            &json!(r1),
            &json!(r1),
            &json!(r2),
            &json!(r2)
        ]
    );
    let types: Vec<&str> = data
        .iter()
        .map(|r| r["content"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, vec!["human", "ai", "tool", "ai", "human", "ai"]);
    assert_eq!(
        col(data, "event_type"),
        vec![
            "llm.human.input",
            "llm.ai.response",
            "llm.tool.result",
            "llm.ai.response",
            "llm.human.input",
            "llm.ai.response"
        ]
    );
    assert_eq!(data[0]["content"]["content"], "weather in paris?");
    assert_eq!(
        data[3]["content"]["content"],
        "The weather in Paris is sunny."
    );
    assert_eq!(data[5]["content"]["content"], "Glad to help.");
    for row in data {
        assert_eq!(row["metadata"]["caller"], "lead_agent", "{row}");
        assert_eq!(row["thread_id"], tid.as_str());
        assert_eq!(row["feedback"], Value::Null);
        let created = row["created_at"].as_str().unwrap();
        assert!(
            chrono::DateTime::parse_from_rfc3339(created).is_ok(),
            "{created}"
        );
    }
    // turn_duration only on each run's last AI message.
    let stamped: Vec<bool> = data
        .iter()
        .map(|r| r["content"]["additional_kwargs"]["turn_duration"].is_number())
        .collect();
    assert_eq!(stamped, vec![false, false, false, true, false, true]);

    // Backwards paging.
    let page = |q: &'static str| {
        let app = &app;
        let tid = tid.clone();
        async move {
            let (s, p) = app
                .get_json(&format!("/api/threads/{tid}/messages/page?{q}"))
                .await;
            assert_eq!(s, 200, "{p}");
            p
        }
    };
    let p = page("limit=2").await;
    assert_eq!(seqs(p["data"].as_array().unwrap()), vec![5, 6]);
    assert_eq!(
        (&p["has_more"], &p["next_before_seq"]),
        (&json!(true), &json!(5))
    );
    let p = page("limit=2&before_seq=5").await;
    assert_eq!(seqs(p["data"].as_array().unwrap()), vec![3, 4]);
    assert_eq!(p["next_before_seq"], 3);
    let p = page("limit=10&before_seq=3").await;
    assert_eq!(seqs(p["data"].as_array().unwrap()), vec![1, 2]);
    assert_eq!(
        (&p["has_more"], &p["next_before_seq"]),
        (&json!(false), &Value::Null)
    );
    let p = page("before_seq=1").await;
    assert_eq!(p["data"], json!([]));
    for bad in [
        "limit=0",
        "limit=201",
        "before_seq=0",
        "after_seq=2",
        "limit=x",
    ] {
        let (s, _) = app
            .get_json(&format!("/api/threads/{tid}/messages/page?{bad}"))
            .await;
        assert_eq!(s, 422, "{bad}");
    }

    // The flat list.
    let (s, l) = app.get_json(&format!("/api/threads/{tid}/messages")).await;
    assert_eq!(s, 200, "{l}");
    assert_eq!(seqs(l.as_array().unwrap()), vec![1, 2, 3, 4, 5, 6]);
    let (_, l) = app
        .get_json(&format!("/api/threads/{tid}/messages?after_seq=4&limit=1"))
        .await;
    assert_eq!(seqs(l.as_array().unwrap()), vec![5]);

    // The journal goes with its thread.
    assert_eq!(app.delete(&format!("/threads/{tid}")).await, 204);
    let (s, _) = app
        .get_json(&format!("/api/threads/{tid}/messages/page"))
        .await;
    assert_eq!(s, 404);
    app.stop().await;
}

async fn run_messages_and_events(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (tid, r1, r2) = two_runs(&app).await;
    let (s, m) = app
        .get_json(&format!("/api/threads/{tid}/runs/{r1}/messages"))
        .await;
    assert_eq!(s, 200, "{m}");
    assert_eq!(m["has_more"], false);
    let data = m["data"].as_array().unwrap();
    assert_eq!(seqs(data), vec![1, 2, 3, 4]);
    assert!(data[3]["content"]["additional_kwargs"]["turn_duration"].is_number());
    let (_, m) = app
        .get_json(&format!("/api/threads/{tid}/runs/{r1}/messages?limit=1"))
        .await;
    assert_eq!(
        (seqs(m["data"].as_array().unwrap()), &m["has_more"]),
        (vec![4], &json!(true))
    );
    let (_, m) = app
        .get_json(&format!(
            "/api/threads/{tid}/runs/{r1}/messages?limit=1&after_seq=1"
        ))
        .await;
    assert_eq!(
        (seqs(m["data"].as_array().unwrap()), &m["has_more"]),
        (vec![2], &json!(true))
    );
    let (_, m) = app
        .get_json(&format!("/api/threads/{tid}/runs/{r2}/messages"))
        .await;
    assert_eq!(seqs(m["data"].as_array().unwrap()), vec![5, 6]);

    let (s, e) = app
        .get_json(&format!("/api/threads/{tid}/runs/{r1}/events"))
        .await;
    assert_eq!(s, 200, "{e}");
    let events = e.as_array().unwrap();
    assert_eq!(seqs(events), vec![1, 2, 3, 4]);
    assert_eq!(events[2]["category"], "message");
    assert_eq!(events[2]["content"]["type"], "tool");
    assert!(events[2].get("feedback").is_none());
    let (_, e) = app
        .get_json(&format!(
            "/api/threads/{tid}/runs/{r1}/events?event_types=llm.ai.response,llm.tool.result"
        ))
        .await;
    assert_eq!(seqs(e.as_array().unwrap()), vec![2, 3, 4]);
    let (_, e) = app
        .get_json(&format!(
            "/api/threads/{tid}/runs/{r1}/events?after_seq=2&limit=1"
        ))
        .await;
    assert_eq!(seqs(e.as_array().unwrap()), vec![3]);
    let (_, e) = app
        .get_json(&format!(
            "/api/threads/{tid}/runs/{r1}/events?event_types=run.end"
        ))
        .await;
    assert_eq!(e, json!([]));
    for bad in ["limit=2001", "limit=0", "after_seq=0"] {
        let (s, _) = app
            .get_json(&format!("/api/threads/{tid}/runs/{r1}/events?{bad}"))
            .await;
        assert_eq!(s, 422, "{bad}");
    }

    // A run of another thread, an unknown run, a malformed run id.
    let other = app.create_thread().await;
    let (s, _) = app
        .get_json(&format!("/api/threads/{other}/runs/{r1}/messages"))
        .await;
    assert_eq!(s, 404);
    let ghost = uuid::Uuid::new_v4();
    let (s, _) = app
        .get_json(&format!("/api/threads/{tid}/runs/{ghost}/events"))
        .await;
    assert_eq!(s, 404);
    let (s, e) = app
        .get_json(&format!("/api/threads/{tid}/runs/not.a.run/messages"))
        .await;
    assert_eq!(s, 422, "{e}");
    // A journal-only id (like a branch's seeded turns) without rows has none.
    let (s, m) = app
        .get_json(&format!("/api/threads/{tid}/runs/not-a-run/messages"))
        .await;
    assert_eq!((s, m), (200, json!({"data": [], "has_more": false})));
    app.stop().await;
}

async fn req(app: &TestApp, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = call(app, &Cred::Anon, method, path, body).await;
    (r.status, r.body)
}

async fn feedback_round_trip(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (tid, r1, r2) = two_runs(&app).await;
    let base = format!("/api/threads/{tid}/runs/{r1}/feedback");
    let (s, f) = req(
        &app,
        "PUT",
        &base,
        Some(json!({"rating": 1, "comment": "nice"})),
    )
    .await;
    assert_eq!(s, 200, "{f}");
    let fid = f["feedback_id"].as_str().unwrap().to_string();
    assert_eq!(
        (&f["run_id"], &f["thread_id"], &f["rating"], &f["comment"]),
        (&json!(r1), &json!(tid), &json!(1), &json!("nice"))
    );
    assert_eq!(
        (&f["user_id"], &f["message_id"]),
        (&Value::Null, &Value::Null)
    );
    assert!(f["created_at"].is_string());

    // The page shows it on the run's last AI message only.
    let (_, p) = app
        .get_json(&format!("/api/threads/{tid}/messages/page"))
        .await;
    let fb = col(p["data"].as_array().unwrap(), "feedback");
    let mine = json!({"feedback_id": fid, "rating": 1, "comment": "nice"});
    assert_eq!(
        fb,
        vec![
            &Value::Null,
            &Value::Null,
            &Value::Null,
            &mine,
            &Value::Null,
            &Value::Null
        ]
    );

    // POST replaces it (one per run and user) and can name a message.
    let (s, f) = req(
        &app,
        "POST",
        &base,
        Some(json!({"rating": -1, "message_id": "m-1"})),
    )
    .await;
    assert_eq!(s, 200, "{f}");
    assert_eq!(f["feedback_id"], fid.as_str());
    assert_eq!(
        (&f["rating"], &f["comment"], &f["message_id"]),
        (&json!(-1), &Value::Null, &json!("m-1"))
    );
    let (s, l) = req(&app, "GET", &base, None).await;
    assert_eq!(s, 200, "{l}");
    assert_eq!(l.as_array().unwrap().len(), 1);
    assert_eq!(l[0]["rating"], -1);
    let (s, st) = req(&app, "GET", &format!("{base}/stats"), None).await;
    assert_eq!(s, 200, "{st}");
    assert_eq!(
        st,
        json!({"run_id": r1, "total": 1, "positive": 0, "negative": 1})
    );
    let (_, st) = req(
        &app,
        "GET",
        &format!("/api/threads/{tid}/runs/{r2}/feedback/stats"),
        None,
    )
    .await;
    assert_eq!(
        st,
        json!({"run_id": r2, "total": 0, "positive": 0, "negative": 0})
    );

    // Bad input.
    for bad in [json!({"rating": 0}), json!({"rating": 2})] {
        let (s, _) = req(&app, "PUT", &base, Some(bad.clone())).await;
        assert_eq!(s, 400, "{bad}");
    }
    let (s, _) = req(&app, "PUT", &base, Some(json!({"comment": "no rating"}))).await;
    assert_eq!(s, 422);
    let (s, f) = req(
        &app,
        "PUT",
        &base,
        Some(json!({"rating": -1, "comment": "a\u{0}b"})),
    )
    .await;
    assert_eq!((s, &f["comment"]), (200, &json!("a\u{FFFD}b")), "{f}");
    let ghost = uuid::Uuid::new_v4();
    let (s, _) = req(
        &app,
        "PUT",
        &format!("/api/threads/{tid}/runs/{ghost}/feedback"),
        Some(json!({"rating": 1})),
    )
    .await;
    assert_eq!(s, 404);

    // Deleting by id checks the run; deleting the caller's feedback.
    let (s, _) = req(
        &app,
        "DELETE",
        &format!("/api/threads/{tid}/runs/{r2}/feedback/{fid}"),
        None,
    )
    .await;
    assert_eq!(s, 404);
    let (s, d) = req(&app, "DELETE", &base, None).await;
    assert_eq!((s, d), (200, json!({"success": true})));
    let (s, _) = req(&app, "DELETE", &base, None).await;
    assert_eq!(s, 404);
    let (_, f) = req(&app, "POST", &base, Some(json!({"rating": 1}))).await;
    let fid = f["feedback_id"].as_str().unwrap().to_string();
    let (s, d) = req(&app, "DELETE", &format!("{base}/{fid}"), None).await;
    assert_eq!((s, d), (200, json!({"success": true})));
    let (s, _) = req(&app, "DELETE", &format!("{base}/{fid}"), None).await;
    assert_eq!(s, 404);
    let (_, l) = req(&app, "GET", &base, None).await;
    assert_eq!(l, json!([]));
    app.stop().await;
}

async fn feedback_and_history_belong_to_their_user(db: Db) {
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    let (_admin, ann, bob) = admin_and_users(&app).await;
    let r = call(&app, &ann, "POST", "/api/threads", Some(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let tid = r.body["thread_id"].as_str().unwrap().to_string();
    app.mock.push(Turn::text("Hello Ann."));
    let r = call(
        &app,
        &ann,
        "POST",
        &format!("/api/threads/{tid}/runs/wait"),
        Some(json!({"assistant_id": "lead_agent", "input": user_input("hi")})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call(&app, &ann, "GET", &format!("/api/threads/{tid}/runs"), None).await;
    let rid = r.body[0]["run_id"].as_str().unwrap().to_string();
    let base = format!("/api/threads/{tid}/runs/{rid}/feedback");

    let r = call(&app, &ann, "PUT", &base, Some(json!({"rating": 1}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body["user_id"].is_string());
    let r = call(
        &app,
        &ann,
        "GET",
        &format!("/api/threads/{tid}/messages/page"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let data = r.body["data"].as_array().unwrap().clone();
    assert_eq!(col(&data, "run_id"), vec![&json!(rid), &json!(rid)]);
    assert_eq!(data[1]["feedback"]["rating"], 1);

    // Bob sees none of it and cannot leave feedback on Ann's run.
    for (method, path, body) in [
        ("PUT", base.clone(), Some(json!({"rating": -1}))),
        ("POST", base.clone(), Some(json!({"rating": -1}))),
        ("GET", base.clone(), None),
        ("GET", format!("{base}/stats"), None),
        ("DELETE", base.clone(), None),
        ("GET", format!("/api/threads/{tid}/messages/page"), None),
        ("GET", format!("/api/threads/{tid}/messages"), None),
        (
            "GET",
            format!("/api/threads/{tid}/runs/{rid}/messages"),
            None,
        ),
        ("GET", format!("/api/threads/{tid}/runs/{rid}/events"), None),
    ] {
        let r = call(&app, &bob, method, &path, body).await;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.body);
    }
    let r = call(&app, &ann, "GET", &format!("{base}/stats"), None).await;
    assert_eq!(
        r.body,
        json!({"run_id": rid, "total": 1, "positive": 1, "negative": 0})
    );
    app.stop().await;
}

async fn threads_without_a_journal_page_their_checkpoint(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let (s, v) = app
        .post_json(
            &format!("/threads/{tid}/state"),
            json!({"values": {"messages": [
                {"type": "human", "content": "old question", "id": "h-old"},
                {"type": "ai", "content": "old answer", "id": "a-old"},
            ]}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, p) = app
        .get_json(&format!("/api/threads/{tid}/messages/page"))
        .await;
    assert_eq!(s, 200, "{p}");
    let data = p["data"].as_array().unwrap();
    assert_eq!(seqs(data), vec![1, 2]);
    let ids: Vec<&Value> = data.iter().map(|r| &r["content"]["id"]).collect();
    assert_eq!(ids, vec!["h-old", "a-old"]);
    assert_eq!(p["has_more"], false);
    let (_, p) = app
        .get_json(&format!("/api/threads/{tid}/messages/page?limit=1"))
        .await;
    assert_eq!(seqs(p["data"].as_array().unwrap()), vec![2]);
    assert_eq!(
        (&p["has_more"], &p["next_before_seq"]),
        (&json!(true), &json!(2))
    );
    let (_, p) = app
        .get_json(&format!("/api/threads/{tid}/messages/page?before_seq=2"))
        .await;
    assert_eq!(seqs(p["data"].as_array().unwrap()), vec![1]);
    // Its first run seeds the journal with that history, one synthetic run per turn.
    app.mock.push(Turn::text("New answer."));
    let rid = run(&app, &tid, "new question").await;
    let (_, p) = app
        .get_json(&format!("/api/threads/{tid}/messages/page"))
        .await;
    let data = p["data"].as_array().unwrap();
    assert_eq!(seqs(data), vec![1, 2, 3, 4], "{p}");
    assert_eq!(
        col(data, "run_id"),
        vec![
            &json!("checkpoint-1"),
            &json!("checkpoint-1"),
            &json!(rid),
            &json!(rid)
        ]
    );
    let ids: Vec<&Value> = data.iter().map(|r| &r["content"]["id"]).collect();
    assert_eq!(&ids[..2], &[&json!("h-old"), &json!("a-old")]);
    assert_eq!(data[3]["content"]["content"], "New answer.");
    assert!(data[3]["content"]["additional_kwargs"]["turn_duration"].is_number());
    assert!(data[1]["content"]["additional_kwargs"]["turn_duration"].is_null());

    // An empty thread pages nothing.
    let empty = app.create_thread().await;
    let (s, p) = app
        .get_json(&format!("/api/threads/{empty}/messages/page"))
        .await;
    assert_eq!(
        (s, p),
        (
            200,
            json!({"data": [], "has_more": false, "next_before_seq": null})
        )
    );
    app.stop().await;
}

/// Under `/api` the checkpoint history is DeerFlow's gateway's: no `checkpoint` object (so
/// the UI's SDK does not pin its next run to a stale head), `values` with the title and, on
/// the newest entry only, the messages, with each turn's run id; bookkeeping metadata gone.
/// At `/` it stays LangGraph's.
async fn history_under_api_has_deerflows_shape(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (tid, _, _) = two_runs(&app).await;
    // A turn whose human message names its run (the lead agent stamps it so): the answers
    // after it carry that run id.
    app.mock.push(Turn::text("Noted."));
    let (s, r) = app
        .post_json(
            &format!("/api/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": {"messages": [{"role": "user",
                "content": "note it", "additional_kwargs": {"run_id": "turn-3"}}]}}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    let (s, h) = app
        .post_json(&format!("/api/threads/{tid}/history"), json!({"limit": 3}))
        .await;
    assert_eq!(s, 200, "{h}");
    let h = h.as_array().unwrap();
    assert_eq!(h.len(), 3);
    for e in h {
        let mut keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "checkpoint_id",
                "created_at",
                "metadata",
                "next",
                "parent_checkpoint_id",
                "values"
            ],
            "{e}"
        );
        assert!(e["metadata"].get("source").is_none() && e["metadata"].get("writes").is_none());
        assert!(e["metadata"]["step"].is_i64(), "{e}");
    }
    assert_eq!(h[0]["parent_checkpoint_id"], h[1]["checkpoint_id"]);
    let msgs = h[0]["values"]["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 8, "{}", h[0]);
    assert!(
        msgs[..6].iter().all(|m| m.get("run_id").is_none()),
        "{}",
        h[0]
    );
    assert_eq!(msgs[7]["type"], "ai");
    assert_eq!(msgs[7]["run_id"], "turn-3", "{}", h[0]);
    assert!(h[1]["values"].get("messages").is_none(), "{}", h[1]);
    // The cursor pages on; DeerFlow's bounds on `limit`.
    let (s, older) = app
        .post_json(
            &format!("/api/threads/{tid}/history"),
            json!({"limit": 1, "before": h[0]["checkpoint_id"]}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(older[0]["checkpoint_id"], h[1]["checkpoint_id"]);
    for limit in [0, 101] {
        let (s, e) = app
            .post_json(
                &format!("/api/threads/{tid}/history"),
                json!({"limit": limit}),
            )
            .await;
        assert_eq!(s, 422, "{e}");
    }
    // LangGraph's shape at the root.
    let (_, lg) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 1}))
        .await;
    assert_eq!(lg[0]["checkpoint"]["checkpoint_id"], h[0]["checkpoint_id"]);
    // The newest entry also carries the goal the UI shows as a chip.
    let r = app
        .client
        .put(app.u(&format!("/api/threads/{tid}/goal")))
        .json(&json!({"objective": "ship it", "max_continuations": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (_, h) = app
        .post_json(&format!("/api/threads/{tid}/history"), json!({"limit": 2}))
        .await;
    assert_eq!(h[0]["values"]["goal"]["objective"], "ship it", "{h}");
    assert_eq!(h[0]["values"]["messages"].as_array().unwrap().len(), 8);
    assert!(h[1]["values"].get("goal").is_none(), "{h}");
    app.stop().await;
}
