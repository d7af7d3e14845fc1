//! `POST /api/threads/{id}/compact` and `GET|PUT|DELETE /api/threads/{id}/goal`, with the
//! goal's hidden continuation turns, on both backends. The mock LLM writes the summaries,
//! the agent's replies and the evaluator's verdicts, in script order.

use crate::auth::{admin_and_users, call, spawn_auth};
use crate::helpers::run_to_success as run;
use crate::helpers::*;
use fawn_config::{ContextSize, ContextSizeKind};
use fawn_runtime::hooks::Point;
use fawn_testkit::{Fault, Turn};
use serde_json::{Value, json};
use std::time::Duration;

backends!(
    compact_summarizes_the_context_not_the_history,
    compact_refuses_what_deerflow_refuses,
    goal_routes_set_read_and_clear,
    goal_continues_until_the_evaluator_is_satisfied,
    goal_stands_down_at_its_limit,
    goal_evaluation_ends_with_a_cancel,
    lead_agent_goal_turns_and_compaction,
    another_users_goal_and_compact_are_not_found,
);

/// Summarization on, keeping the last two messages.
async fn spawn_summarizing(db: Db) -> Option<TestApp> {
    let mut spec = Spawn::new(db);
    spec.settings = Some(Box::new(|s| {
        s.app.summarization.enabled = true;
        s.app.summarization.keep = ContextSize {
            kind: ContextSizeKind::Messages,
            value: 2.0,
        };
    }));
    spawn_with(spec).await
}

/// The thread's state as DeerFlow's UI reads it (under `/api/langgraph`, hidden messages
/// included; at `/` they are left out).
async fn state(app: &TestApp, tid: &str) -> Value {
    let (s, st) = app
        .get_json(&format!("/api/langgraph/threads/{tid}/state"))
        .await;
    assert_eq!(s, 200, "{st}");
    st
}

fn texts(st: &Value) -> Vec<String> {
    st["values"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn page_len(app: &TestApp, tid: &str) -> usize {
    let (s, p) = app
        .get_json(&format!("/api/threads/{tid}/messages/page"))
        .await;
    assert_eq!(s, 200, "{p}");
    p["data"].as_array().unwrap().len()
}

async fn compact_summarizes_the_context_not_the_history(db: Db) {
    let Some(app) = spawn_summarizing(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    app.mock.push(Turn::text("first answer"));
    run(&app, &tid, "first question").await;
    app.mock.push(Turn::text("second answer"));
    run(&app, &tid, "second question").await;
    assert_eq!(page_len(&app, &tid).await, 4);

    app.mock.clear_requests();
    app.mock
        .push(Turn::text("SUMMARY: asked twice, answered twice"));
    let (s, r) = app
        .post_json(
            &format!("/api/threads/{tid}/compact"),
            json!({"force": true}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["thread_id"], tid.as_str());
    assert_eq!(r["compacted"], true, "{r}");
    assert_eq!(r["reason"], Value::Null);
    assert_eq!(
        (&r["removed_message_count"], &r["preserved_message_count"]),
        (&json!(2), &json!(2)),
        "{r}"
    );
    assert_eq!(r["summary_updated"], true);
    assert!(r["total_tokens"].as_u64().unwrap() > 0, "{r}");
    // The summary prompt quoted the summarised part only.
    let reqs = app.mock.chat_requests();
    assert_eq!(reqs.len(), 1);
    assert!(
        reqs[0].body_text.contains("first answer"),
        "{}",
        reqs[0].body_text
    );
    assert!(!reqs[0].body_text.contains("second answer"));

    // The state is the compacted one, at the checkpoint the answer named.
    let st = state(&app, &tid).await;
    assert_eq!(
        st["checkpoint"]["checkpoint_id"], r["checkpoint_id"],
        "{st}"
    );
    assert_eq!(
        st["values"]["summary_text"],
        "SUMMARY: asked twice, answered twice"
    );
    assert_eq!(texts(&st), ["second question", "second answer"]);
    assert_eq!(st["next"], json!([]));
    // The journal (what the UI pages) is untouched.
    assert_eq!(page_len(&app, &tid).await, 4);
    let (s, t) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!((s, &t["status"]), (200, &json!("idle")), "{t}");

    // A following run works on the compacted state; the journal grows.
    app.mock.push(Turn::text("third answer"));
    run(&app, &tid, "third question").await;
    let st = state(&app, &tid).await;
    assert_eq!(
        texts(&st),
        [
            "second question",
            "second answer",
            "third question",
            "third answer"
        ]
    );
    assert_eq!(
        st["values"]["summary_text"],
        "SUMMARY: asked twice, answered twice"
    );
    assert_eq!(page_len(&app, &tid).await, 6);

    // Not forced: only a configured trigger compacts (none is configured here).
    app.mock.clear_requests();
    let (s, r) = app
        .post_json(
            &format!("/api/threads/{tid}/compact"),
            json!({"force": false}),
        )
        .await;
    assert_eq!((s, &r["compacted"]), (200, &json!(false)), "{r}");
    assert_eq!(app.mock.chat_requests().len(), 0);
    // Keeping more than there is: nothing to compact, no model call, nothing written.
    let (s, r) = app
        .post_json(
            &format!("/api/threads/{tid}/compact"),
            json!({"keep": {"type": "messages", "value": 50}}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(
        (&r["compacted"], &r["reason"], &r["checkpoint_id"]),
        (&json!(false), &json!("not_enough_messages"), &Value::Null),
        "{r}"
    );
    assert_eq!(app.mock.chat_requests().len(), 0);
    assert_eq!(
        state(&app, &tid).await["checkpoint"]["checkpoint_id"],
        st["checkpoint"]["checkpoint_id"]
    );
    // A thread without messages has nothing to compact either.
    let empty = app.create_thread().await;
    let (s, r) = app
        .post_json(&format!("/api/threads/{empty}/compact"), json!({}))
        .await;
    assert_eq!((s, &r["compacted"]), (200, &json!(false)), "{r}");
    assert_eq!(r["reason"], "not_enough_messages");
    app.stop().await;
}

async fn compact_refuses_what_deerflow_refuses(db: Db) {
    let Some(app) = spawn_summarizing(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    app.mock.push(Turn::text("an answer"));
    run(&app, &tid, "a question").await;
    app.mock.push(Turn::text("another answer"));
    run(&app, &tid, "another question").await;
    let before = state(&app, &tid).await;
    let path = format!("/api/threads/{tid}/compact");

    for bad in [
        json!({"force": "yes"}),
        json!({"keep": {"type": "bogus", "value": 1}}),
        json!({"keep": {"type": "messages", "value": 0}}),
        json!({"keep": {"type": "messages", "value": 1.5}}),
        json!({"keep": {"type": "fraction", "value": 2}}),
        json!({"agent_name": "x".repeat(129)}),
        json!({"model_name": 7}),
    ] {
        let (s, e) = app.post_json(&path, bad.clone()).await;
        assert_eq!(s, 422, "{bad} → {e}");
        assert!(e["detail"].is_string(), "{e}");
    }
    let (s, _) = app
        .post_json(
            &format!("/api/threads/{}/compact", uuid::Uuid::new_v4()),
            json!({}),
        )
        .await;
    assert_eq!(s, 404);

    // The summary model fails: 503 and nothing is written.
    app.mock.push(Turn::fault(Fault::ServerError));
    let (s, e) = app.post_json(&path, json!({})).await;
    assert_eq!(s, 503, "{e}");
    assert_eq!(state(&app, &tid).await["checkpoint"], before["checkpoint"]);

    // A run pending or in flight: 409 (the run is held where it was claimed).
    let mut claimed = app.hooks().pause(Point::Claimed, 1);
    app.mock.push(Turn::text("busy answer"));
    let (s, r) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("go")}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    let rid = claimed.reached().await;
    let (s, e) = app.post_json(&path, json!({})).await;
    assert_eq!(s, 409, "{e}");
    assert!(e["detail"].as_str().unwrap().contains("in flight"), "{e}");
    claimed.resume();
    app.wait_run(&tid, &rid).await;
    app.mock.push(Turn::text("SUMMARY"));
    let (s, r) = app.post_json(&path, json!({})).await;
    assert_eq!((s, &r["compacted"]), (200, &json!(true)), "{r}");
    app.stop().await;

    // Summarization off: compaction is disabled (409), as in DeerFlow.
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let (s, e) = app
        .post_json(&format!("/api/threads/{tid}/compact"), json!({}))
        .await;
    assert_eq!(s, 409, "{e}");
    assert_eq!(e["detail"], "Context compaction is disabled.");
    app.stop().await;
}

async fn put_goal(app: &TestApp, tid: &str, body: Value) -> (u16, Value) {
    let r = app
        .client
        .put(app.u(&format!("/api/threads/{tid}/goal")))
        .json(&body)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn delete_goal(app: &TestApp, tid: &str) -> (u16, Value) {
    let r = app
        .client
        .delete(app.u(&format!("/api/threads/{tid}/goal")))
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn goal_routes_set_read_and_clear(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let path = format!("/api/threads/{tid}/goal");
    let (s, g) = app.get_json(&path).await;
    assert_eq!((s, g), (200, json!({"goal": null})));

    let (s, g) = put_goal(&app, &tid, json!({"objective": "  write\n the   report "})).await;
    assert_eq!(s, 200, "{g}");
    let goal = g["goal"].clone();
    assert_eq!(goal["objective"], "write the report");
    assert_eq!(goal["status"], "active");
    assert_eq!(
        (
            &goal["continuation_count"],
            &goal["max_continuations"],
            &goal["no_progress_count"],
            &goal["max_no_progress_continuations"]
        ),
        (&json!(0), &json!(8), &json!(0), &json!(2))
    );
    assert_eq!(goal["created_at"], goal["updated_at"]);
    assert!(goal.get("last_evaluation").is_none());
    let (s, g) = app.get_json(&path).await;
    assert_eq!((s, &g["goal"]), (200, &goal));
    assert_eq!(state(&app, &tid).await["values"]["goal"], goal);

    let (s, g) = put_goal(
        &app,
        &tid,
        json!({"objective": "ship it", "max_continuations": 0}),
    )
    .await;
    assert_eq!(s, 200, "{g}");
    assert_eq!(
        (&g["goal"]["objective"], &g["goal"]["max_continuations"]),
        (&json!("ship it"), &json!(0))
    );

    for bad in [
        json!({}),
        json!({"objective": ""}),
        json!({"objective": " \n "}),
        json!({"objective": 5}),
        json!({"objective": "é".repeat(4001)}),
        json!({"objective": "x", "max_continuations": 9}),
        json!({"objective": "x", "max_continuations": -1}),
        json!({"objective": "x", "max_continuations": "many"}),
    ] {
        let (s, e) = put_goal(&app, &tid, bad.clone()).await;
        assert_eq!(s, 422, "{bad} → {e}");
        assert!(e["detail"].is_string(), "{e}");
    }
    assert_eq!(app.get_json(&path).await.1["goal"]["objective"], "ship it");

    // Busy thread: setting and clearing wait for the run.
    let mut claimed = app.hooks().pause(Point::Claimed, 1);
    // The run's turn is judged (a goal is set) but may not continue (max 0).
    app.mock
        .push_all([Turn::text("ok"), verdict(false, "goal_not_met_yet", "x")]);
    let (s, r) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("go")}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    let rid = claimed.reached().await;
    assert_eq!(put_goal(&app, &tid, json!({"objective": "y"})).await.0, 409);
    assert_eq!(delete_goal(&app, &tid).await.0, 409);
    claimed.resume();
    app.wait_run(&tid, &rid).await;
    // One turn only (max_continuations 0); the goal stays, with the verdict.
    assert_eq!(app.mock.pending_turns(), 0);
    assert_eq!(texts(&state(&app, &tid).await).len(), 2);
    let g = app.get_json(&path).await.1;
    assert_eq!(g["goal"]["objective"], "ship it");
    assert_eq!(
        g["goal"]["last_evaluation"]["stand_down_reason"], "max_continuations_reached",
        "{g}"
    );

    let (s, g) = delete_goal(&app, &tid).await;
    assert_eq!((s, g), (200, json!({"goal": null})));
    assert_eq!(app.get_json(&path).await.1, json!({"goal": null}));
    assert!(state(&app, &tid).await["values"].get("goal").is_none());
    // Clearing again writes nothing.
    let cp = state(&app, &tid).await["checkpoint"].clone();
    assert_eq!(delete_goal(&app, &tid).await.0, 200);
    assert_eq!(state(&app, &tid).await["checkpoint"], cp);

    // A new chat: the goal is set before the thread exists, which creates it.
    let new = uuid::Uuid::new_v4().to_string();
    assert_eq!(
        app.get_json(&format!("/api/threads/{new}/goal")).await.1,
        json!({"goal": null})
    );
    assert_eq!(delete_goal(&app, &new).await.0, 200);
    let (s, g) = put_goal(
        &app,
        &new,
        json!({"objective": "plan a trip", "max_continuations": 0}),
    )
    .await;
    assert_eq!(s, 200, "{g}");
    let (s, t) = app.get_json(&format!("/threads/{new}")).await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(t["values"]["goal"]["objective"], "plan a trip", "{t}");
    app.mock.push_all([
        Turn::text("here is a plan"),
        verdict(true, "none", "planned"),
    ]);
    run(&app, &new, "plan a trip").await;
    assert!(state(&app, &new).await["values"].get("goal").is_none());
    assert_eq!(
        texts(&state(&app, &new).await),
        ["plan a trip", "here is a plan"]
    );
    app.stop().await;
}

fn verdict(satisfied: bool, blocker: &str, reason: &str) -> Turn {
    Turn::text(
        json!({"satisfied": satisfied, "blocker": blocker, "reason": reason,
            "evidence_summary": "seen in the chat"})
        .to_string(),
    )
}

async fn goal_continues_until_the_evaluator_is_satisfied(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let (s, g) = put_goal(&app, &tid, json!({"objective": "a finished report"})).await;
    assert_eq!(s, 200, "{g}");
    app.mock.push_all([
        Turn::text("Here is a first draft."),
        verdict(false, "goal_not_met_yet", "only a draft"),
        Turn::text("Here is the finished report."),
        verdict(true, "none", "the report is finished"),
    ]);
    let rid = run(&app, &tid, "write the report").await;
    assert_eq!(app.mock.pending_turns(), 0);

    // One run: the user's turn, the hidden continuation and the second reply.
    let st = state(&app, &tid).await;
    let msgs = st["values"]["messages"].as_array().unwrap().clone();
    assert_eq!(
        texts(&st)
            .iter()
            .map(|t| t.split('\n').next().unwrap())
            .collect::<Vec<_>>(),
        [
            "write the report",
            "Here is a first draft.",
            "<goal_continuation>",
            "Here is the finished report."
        ]
    );
    assert_eq!(msgs[2]["type"], "human");
    assert_eq!(msgs[2]["additional_kwargs"]["hide_from_ui"], true);
    assert!(
        msgs[2]["content"]
            .as_str()
            .unwrap()
            .contains("only a draft")
    );
    // Satisfied: the goal is gone.
    assert!(st["values"].get("goal").is_none(), "{st}");
    let (s, runs) = app.get_json(&format!("/threads/{tid}/runs")).await;
    assert_eq!((s, runs.as_array().unwrap().len()), (200, 1), "{runs}");
    assert_eq!(runs[0]["run_id"], rid.as_str());

    // The evaluator saw the visible conversation, not the hidden turn.
    let reqs = app.mock.chat_requests();
    assert_eq!(reqs.len(), 4);
    let judged = &reqs[3].body_text;
    assert!(judged.contains("a finished report"), "{judged}");
    assert!(judged.contains("Here is the finished report."));
    assert!(!judged.contains("goal_continuation"));
    // The agent's second turn got the hidden message.
    assert!(reqs[2].body_text.contains("goal_continuation"));

    // The history pages the run's visible messages: the hidden turn is no history.
    assert_eq!(page_len(&app, &tid).await, 3);
    app.stop().await;
}

async fn goal_stands_down_at_its_limit(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let (s, g) = put_goal(
        &app,
        &tid,
        json!({"objective": "a finished report", "max_continuations": 1}),
    )
    .await;
    assert_eq!(s, 200, "{g}");
    let rid = {
        app.mock.push_all([
            Turn::text("draft one"),
            verdict(false, "goal_not_met_yet", "a draft"),
            Turn::text("draft two"),
            verdict(false, "goal_not_met_yet", "still a draft"),
        ]);
        run(&app, &tid, "write the report").await
    };
    assert_eq!(app.mock.pending_turns(), 0);
    let st = state(&app, &tid).await;
    assert_eq!(texts(&st).len(), 4, "{st}");
    let goal = &st["values"]["goal"];
    assert_eq!(goal["continuation_count"], 1, "{goal}");
    let last = &goal["last_evaluation"];
    assert_eq!(
        (
            &last["satisfied"],
            &last["blocker"],
            &last["reason"],
            &last["run_id"],
            &last["stand_down_reason"]
        ),
        (
            &json!(false),
            &json!("goal_not_met_yet"),
            &json!("still a draft"),
            &json!(rid),
            &json!("max_continuations_reached")
        ),
        "{goal}"
    );

    // The next run's turn is judged again; a blocker other than "not met yet" stands down
    // at once. An evaluator that answers nonsense leaves the goal as it was.
    app.mock.push_all([
        Turn::text("which format?"),
        verdict(false, "needs_user_input", "asked the user"),
    ]);
    run(&app, &tid, "go on").await;
    let goal = state(&app, &tid).await["values"]["goal"].clone();
    assert_eq!(
        goal["last_evaluation"]["stand_down_reason"], "blocked:needs_user_input",
        "{goal}"
    );
    app.mock
        .push_all([Turn::text("PDF it is"), Turn::text("I cannot judge this")]);
    run(&app, &tid, "PDF").await;
    assert_eq!(state(&app, &tid).await["values"]["goal"], goal);
    assert_eq!(app.mock.pending_turns(), 0);
    app.stop().await;
}

async fn goal_evaluation_ends_with_a_cancel(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let (s, g) = put_goal(&app, &tid, json!({"objective": "a report"})).await;
    assert_eq!(s, 200, "{g}");
    // The verdict would take 40 s to stream: it ends only if the cancel drops it.
    let words: String = (0..2000).map(|i| format!("w{i} ")).collect();
    app.mock.push_all([
        Turn::text("a draft"),
        verdict(false, "goal_not_met_yet", &words).with_chunk_delay(Duration::from_millis(20)),
    ]);
    let (s, r) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("go")}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    let rid = r["run_id"].as_str().unwrap().to_string();
    assert!(
        app.mock
            .wait_until(Duration::from_secs(10), |m| m.chat_requests().len() == 2)
            .await
    );
    let r = app
        .client
        .post(app.u(&format!("/threads/{tid}/runs/{rid}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let done = app.wait_run(&tid, &rid).await;
    assert_eq!(done["status"], "interrupted", "{done}");
    assert!(
        app.mock
            .wait_until(Duration::from_secs(10), |m| m.streams_aborted() == 1)
            .await
    );
    // The turn stays; the goal has no verdict and no continuation was sent.
    let st = state(&app, &tid).await;
    assert_eq!(texts(&st), ["go", "a draft"]);
    assert_eq!(st["values"]["goal"], g["goal"]);
    assert_eq!(app.mock.chat_requests().len(), 2);
    app.stop().await;
}

/// The real lead agent (its middleware chain) through a goal loop, then a compaction whose
/// summary the next turn's model request carries.
async fn lead_agent_goal_turns_and_compaction(db: Db) {
    let mut spec = Spawn::new(db);
    spec.lead_agent = true;
    spec.settings = Some(Box::new(|s| {
        s.app.summarization.enabled = true;
        s.app.summarization.keep = ContextSize {
            kind: ContextSizeKind::Messages,
            value: 2.0,
        };
    }));
    let Some(app) = spawn_with(spec).await else {
        return;
    };
    let tid = app.create_thread().await;
    let (s, g) = put_goal(&app, &tid, json!({"objective": "a poem about rain"})).await;
    assert_eq!(s, 200, "{g}");
    app.mock.push_all([
        Turn::text("Rain falls."),
        verdict(false, "goal_not_met_yet", "one line is no poem"),
        Turn::text("Rain falls on roofs,\nsoft and slow."),
        verdict(true, "none", "a poem"),
    ]);
    let (s, r) = app
        .post_json(
            &format!("/api/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("write a poem"),
                   "context": {"thinking_enabled": false}}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    let done = app.wait_run(&tid, r["run_id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "success", "{done}");
    assert_eq!(app.mock.pending_turns(), 0);
    let st = state(&app, &tid).await;
    assert!(st["values"].get("goal").is_none(), "{st}");
    let msgs = st["values"]["messages"].as_array().unwrap();
    let hidden: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["additional_kwargs"]["deerflow_goal_continuation"] == true)
        .collect();
    assert_eq!(hidden.len(), 1, "{st}");
    assert_eq!(
        msgs.last().unwrap()["content"],
        "Rain falls on roofs,\nsoft and slow."
    );
    // The continuation turn's request carried the hidden message, not escaped.
    let reqs = app.mock.chat_requests();
    assert!(
        reqs[2].body_text.contains("<goal_continuation>"),
        "{}",
        reqs[2].body_text
    );

    app.mock
        .push(Turn::text("SUMMARY: a poem about rain was written"));
    let (s, c) = app
        .post_json(&format!("/api/threads/{tid}/compact"), json!({}))
        .await;
    assert_eq!((s, &c["compacted"]), (200, &json!(true)), "{c}");
    app.mock.clear_requests();
    app.mock.push(Turn::text("Thanks!"));
    let (s, r) = app
        .post_json(
            &format!("/api/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("thank you"),
                   "context": {"thinking_enabled": false}}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    let done = app.wait_run(&tid, r["run_id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "success", "{done}");
    let reqs = app.mock.chat_requests();
    assert_eq!(reqs.len(), 1);
    assert!(
        reqs[0]
            .body_text
            .contains("SUMMARY: a poem about rain was written"),
        "{}",
        reqs[0].body_text
    );
    assert!(!reqs[0].body_text.contains("Rain falls."));
    app.stop().await;
}

/// Goal and compact are the thread owner's: to another user the thread does not exist, and
/// a goal `PUT` on it neither creates nor changes anything.
async fn another_users_goal_and_compact_are_not_found(db: Db) {
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    let (_admin, ann, bob) = admin_and_users(&app).await;
    let r = call(&app, &ann, "POST", "/api/threads", Some(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let tid = r.body["thread_id"].as_str().unwrap().to_string();
    let goal = format!("/api/threads/{tid}/goal");
    let r = call(
        &app,
        &ann,
        "PUT",
        &goal,
        Some(json!({"objective": "Ann's aim"})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for (method, path, body) in [
        ("GET", goal.clone(), None),
        ("PUT", goal.clone(), Some(json!({"objective": "Bob's aim"}))),
        ("DELETE", goal.clone(), None),
        (
            "POST",
            format!("/api/threads/{tid}/compact"),
            Some(json!({})),
        ),
    ] {
        let r = call(&app, &bob, method, &path, body).await;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.body);
    }
    let r = call(&app, &ann, "GET", &goal, None).await;
    assert_eq!(r.body["goal"]["objective"], "Ann's aim", "{}", r.body);
    app.stop().await;
}
