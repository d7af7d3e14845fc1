//! DeerFlow's conversation operations: regenerate and edit-and-rerun (prepare, then stream
//! the prepared run as the web UI does) and branches, on both backends.

use crate::auth::{admin_and_users, call, spawn_auth};
use crate::helpers::run_to_success as run;
use crate::helpers::*;
use fawn_testkit::Turn;
use serde_json::{Value, json};
use std::sync::Arc;

backends!(
    regenerate_replaces_the_latest_answer,
    regenerate_refuses_what_deerflow_refuses,
    edit_replaces_the_latest_turn,
    lead_agent_first_turn_replays_from_its_input_checkpoint,
    branch_forks_a_thread_at_a_turn,
    other_users_threads_are_not_found,
);

/// A thread with two turns: "hello" → "Answer one.", "question two" → "Answer two.".
async fn two_turns(app: &TestApp) -> (String, String, String) {
    let tid = app.create_thread().await;
    app.mock.push(Turn::text("Answer one."));
    let r1 = run(app, &tid, "hello").await;
    app.mock.push(Turn::text("Answer two."));
    let r2 = run(app, &tid, "question two").await;
    (tid, r1, r2)
}

async fn messages(app: &TestApp, tid: &str) -> Vec<Value> {
    let (s, st) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(s, 200, "{st}");
    st["values"]["messages"].as_array().unwrap().clone()
}

fn ids(msgs: &[Value]) -> Vec<String> {
    msgs.iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

fn text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<String>(),
        _ => String::new(),
    }
}

/// The message rows of the thread's page: `(run_id, message type, text)`.
async fn page(app: &TestApp, tid: &str) -> Vec<(String, String, String)> {
    let (s, p) = app
        .get_json(&format!("/api/threads/{tid}/messages/page"))
        .await;
    assert_eq!(s, 200, "{p}");
    p["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run_id"].as_str().unwrap().to_string(),
                r["content"]["type"].as_str().unwrap().to_string(),
                text(&r["content"]),
            )
        })
        .collect()
}

async fn prepare(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    app.post_json(path, body).await
}

/// Streams the prepared run the way the UI submits it; returns the run id.
async fn stream_prepared(app: &TestApp, tid: &str, prepared: &Value) -> String {
    let r = app
        .post(
            &format!("/api/threads/{tid}/runs/stream"),
            json!({
                "assistant_id": "lead_agent",
                "input": prepared["input"],
                "checkpoint": prepared["checkpoint"],
                "metadata": prepared["metadata"],
                "stream_mode": ["values", "messages-tuple"],
                "config": {"recursion_limit": 1000},
                "context": {"thinking_enabled": false, "thread_id": tid},
            }),
        )
        .await;
    assert_eq!(r.status(), 200);
    let events = parse_sse(&r.text().await.unwrap());
    assert!(!names(&events).contains(&"error"), "{events:?}");
    let rid = events[0].data["run_id"].as_str().unwrap().to_string();
    let done = app.wait_run(tid, &rid).await;
    assert_eq!(done["status"], "success", "{done}");
    rid
}

/// The checkpoint `id` of the thread's history.
async fn checkpoint(app: &TestApp, tid: &str, id: &str) -> Value {
    let (s, h) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await;
    assert_eq!(s, 200, "{h}");
    h.as_array()
        .unwrap()
        .iter()
        .find(|c| c["checkpoint"]["checkpoint_id"] == id)
        .unwrap_or_else(|| panic!("no checkpoint {id} in {h}"))
        .clone()
}

async fn regenerate_replaces_the_latest_answer(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (tid, r1, r2) = two_turns(&app).await;
    let before = messages(&app, &tid).await;
    let old = ids(&before);
    assert_eq!(old.len(), 4);
    let (s, p) = prepare(
        &app,
        &format!("/api/threads/{tid}/runs/regenerate/prepare"),
        json!({"message_id": old[3]}),
    )
    .await;
    assert_eq!(s, 200, "{p}");
    assert_eq!(p["target_run_id"], r2.as_str());
    let base = p["checkpoint"]["checkpoint_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        p["checkpoint"],
        json!({"checkpoint_ns": "", "checkpoint_id": base, "checkpoint_map": null})
    );
    assert_eq!(
        p["metadata"],
        json!({"regenerate_from_message_id": old[3], "regenerate_from_run_id": r2,
               "regenerate_checkpoint_id": base})
    );
    let human = &p["input"]["messages"][0];
    assert_eq!(human["id"], old[2].as_str());
    assert_eq!(human["type"], "human");
    assert_eq!(
        human["content"],
        json!([{"type": "text", "text": "question two"}])
    );
    assert!(p.get("replacement_human_message_id").is_none());
    // The base is the state before the turn: the first turn, settled.
    let cp = checkpoint(&app, &tid, &base).await;
    assert_eq!(ids(cp["values"]["messages"].as_array().unwrap()), old[..2]);
    assert_eq!(cp["next"], json!([]));

    app.mock.push(Turn::text("Answer two, again."));
    let r3 = stream_prepared(&app, &tid, &p).await;
    let after = messages(&app, &tid).await;
    let new = ids(&after);
    assert_eq!(new.len(), 4, "{after:?}");
    assert_eq!(new[..3], old[..3]);
    assert_ne!(new[3], old[3]);
    assert_eq!(text(&after[3]), "Answer two, again.");
    // The new branch of the checkpoint chain starts under the base.
    let (_, h) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 100}))
        .await;
    let first = h
        .as_array()
        .unwrap()
        .iter()
        .rfind(|c| c["metadata"]["run_id"] == r3.as_str())
        .unwrap();
    assert_eq!(first["parent_checkpoint"]["checkpoint_id"], base.as_str());
    let (_, run3) = app.get_json(&format!("/threads/{tid}/runs/{r3}")).await;
    assert_eq!(run3["metadata"]["regenerate_from_run_id"], r2.as_str());
    // The page shows the new answer instead of the old turn.
    let rows = page(&app, &tid).await;
    let expect = |r: &str, t: &str, x: &str| (r.to_string(), t.to_string(), x.to_string());
    assert_eq!(
        rows,
        vec![
            expect(&r1, "human", "hello"),
            expect(&r1, "ai", "Answer one."),
            expect(&r3, "human", "question two"),
            expect(&r3, "ai", "Answer two, again."),
        ]
    );
    // The flat list hides it too, and pages still fill up across hidden rows.
    let (_, flat) = app.get_json(&format!("/api/threads/{tid}/messages")).await;
    assert_eq!(flat.as_array().unwrap().len(), 4, "{flat}");
    let (_, p1) = app
        .get_json(&format!("/api/threads/{tid}/messages/page?limit=3"))
        .await;
    assert_eq!(p1["data"].as_array().unwrap().len(), 3, "{p1}");
    assert_eq!(p1["has_more"], true);
    let (_, p2) = app
        .get_json(&format!(
            "/api/threads/{tid}/messages/page?limit=3&before_seq={}",
            p1["next_before_seq"]
        ))
        .await;
    assert_eq!(p2["data"].as_array().unwrap().len(), 1, "{p2}");
    assert_eq!(p2["data"][0]["run_id"], r1.as_str());
    assert_eq!(p2["has_more"], false);

    // The regenerated answer can be regenerated again, from the same base.
    let (s, p) = prepare(
        &app,
        &format!("/api/threads/{tid}/runs/regenerate/prepare"),
        json!({"message_id": new[3]}),
    )
    .await;
    assert_eq!(s, 200, "{p}");
    assert_eq!(p["target_run_id"], r3.as_str());
    assert_eq!(p["checkpoint"]["checkpoint_id"], base.as_str());
    app.stop().await;
}

async fn regenerate_refuses_what_deerflow_refuses(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (tid, _, _) = two_turns(&app).await;
    let m = ids(&messages(&app, &tid).await);
    let path = format!("/api/threads/{tid}/runs/regenerate/prepare");
    for (body, status, detail) in [
        (json!({"message_id": "nope"}), 404, "Message nope not found"),
        (
            json!({"message_id": m[2]}),
            409,
            "Only visible assistant messages can be regenerated",
        ),
        (
            json!({"message_id": m[1]}),
            409,
            "Only the latest assistant message can be regenerated",
        ),
    ] {
        let (s, r) = prepare(&app, &path, body.clone()).await;
        assert_eq!(
            (s, r["detail"].as_str().unwrap()),
            (status, detail),
            "{body}"
        );
    }
    for body in [
        json!({"message_id": ""}),
        json!({}),
        json!({"message_id": 3}),
    ] {
        let (s, r) = prepare(&app, &path, body.clone()).await;
        assert_eq!(s, 422, "{body}: {r}");
    }
    // The first turn of this graph has no checkpoint before its input.
    let one = app.create_thread().await;
    app.mock.push(Turn::text("Only answer."));
    run(&app, &one, "hi").await;
    let a = ids(&messages(&app, &one).await);
    let (s, r) = prepare(
        &app,
        &format!("/api/threads/{one}/runs/regenerate/prepare"),
        json!({"message_id": a[1]}),
    )
    .await;
    assert_eq!(
        (s, r["detail"].as_str().unwrap()),
        (
            409,
            "Could not find an addressable checkpoint before the target user message"
        )
    );
    // No such thread; a thread without a checkpoint.
    let ghost = uuid::Uuid::new_v4();
    let (s, _) = prepare(
        &app,
        &format!("/api/threads/{ghost}/runs/regenerate/prepare"),
        json!({"message_id": "x"}),
    )
    .await;
    assert_eq!(s, 404);
    let empty = app.create_thread().await;
    let (s, r) = prepare(
        &app,
        &format!("/api/threads/{empty}/runs/regenerate/prepare"),
        json!({"message_id": "x"}),
    )
    .await;
    assert_eq!(s, 404, "{r}");
    app.stop().await;
}

async fn edit_replaces_the_latest_turn(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (tid, r1, r2) = two_turns(&app).await;
    let old = ids(&messages(&app, &tid).await);
    let path = format!("/api/threads/{tid}/runs/edit-regenerate/prepare");
    for (body, status, detail) in [
        (
            json!({"human_message_id": old[2], "replacement_text": " \n\t"}),
            409,
            "Edited message cannot be empty",
        ),
        (
            json!({"human_message_id": old[2], "replacement_text": " question two "}),
            409,
            "Edited message is unchanged",
        ),
        (
            json!({"human_message_id": old[0], "replacement_text": "hello again"}),
            409,
            "Only the latest completed user turn can be edited",
        ),
        (
            json!({"human_message_id": old[3], "replacement_text": "x"}),
            409,
            "Only the latest completed user turn can be edited",
        ),
    ] {
        let (s, r) = prepare(&app, &path, body.clone()).await;
        assert_eq!(
            (s, r["detail"].as_str().unwrap()),
            (status, detail),
            "{body}"
        );
    }
    for body in [
        json!({"human_message_id": old[2], "replacement_text": ""}),
        json!({"human_message_id": "", "replacement_text": "x"}),
        json!({"human_message_id": old[2]}),
    ] {
        let (s, r) = prepare(&app, &path, body.clone()).await;
        assert_eq!(s, 422, "{body}: {r}");
    }

    let (s, p) = prepare(
        &app,
        &path,
        json!({"human_message_id": old[2], "replacement_text": "  question two, edited\n  "}),
    )
    .await;
    assert_eq!(s, 200, "{p}");
    let replacement = p["replacement_human_message_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(replacement, old[2]);
    assert_eq!(p["source_message_ids"], json!([old[2], old[3]]));
    assert_eq!(p["target_run_id"], r2.as_str());
    let base = p["checkpoint"]["checkpoint_id"].as_str().unwrap();
    assert_eq!(
        p["metadata"],
        json!({"replay_kind": "edit", "regenerate_from_message_id": old[3],
               "regenerate_from_run_id": r2, "regenerate_checkpoint_id": base,
               "edit_from_message_id": old[2], "edit_message_id": replacement,
               "edit_version_group_id": old[2]})
    );
    assert_eq!(
        p["input"]["messages"],
        json!([{"type": "human", "id": replacement,
                "content": [{"type": "text", "text": "question two, edited"}],
                "additional_kwargs": {}}])
    );

    app.mock.push(Turn::text("Edited answer."));
    let r3 = stream_prepared(&app, &tid, &p).await;
    let after = messages(&app, &tid).await;
    assert_eq!(ids(&after)[..2], old[..2]);
    assert_eq!(after.len(), 4);
    assert_eq!(after[2]["id"], replacement.as_str());
    assert_eq!(text(&after[2]), "question two, edited");
    assert_eq!(text(&after[3]), "Edited answer.");
    assert!(!ids(&after).contains(&old[2]) && !ids(&after).contains(&old[3]));
    let rows = page(&app, &tid).await;
    let runs: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        runs,
        vec![r1.as_str(), r1.as_str(), r3.as_str(), r3.as_str()]
    );
    assert_eq!(rows[2].2, "question two, edited");

    // The edited turn can be edited again; the group stays the first human message's.
    let (s, p) = prepare(
        &app,
        &path,
        json!({"human_message_id": replacement, "replacement_text": "third try"}),
    )
    .await;
    assert_eq!(s, 200, "{p}");
    assert_eq!(p["target_run_id"], r3.as_str());
    assert_eq!(p["metadata"]["edit_version_group_id"], old[2].as_str());
    assert_eq!(p["checkpoint"]["checkpoint_id"], base);
    app.stop().await;
}

/// The real lead agent: the first turn's user message is re-keyed `{id}__user` by the
/// dynamic-context middleware and its only earlier checkpoint is the run's `input` one.
async fn lead_agent_first_turn_replays_from_its_input_checkpoint(db: Db) {
    let mock = fawn_testkit::MockLlm::start_with(fawn_testkit::MockConfig::default())
        .await
        .unwrap();
    let Some(app) = spawn_with(Spawn {
        mock: Some(Arc::new(mock)),
        lead_agent: true,
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let tid = app.create_thread().await;
    let r1 = run(&app, &tid, "tell me a story").await;
    let before = messages(&app, &tid).await;
    let human = before
        .iter()
        .find(|m| m["type"] == "human")
        .unwrap()
        .clone();
    let human_id = human["id"].as_str().unwrap().to_string();
    assert!(human_id.ends_with("__user"), "{before:?}");
    let answer = before.last().unwrap().clone();
    assert_eq!(answer["type"], "ai");

    let (s, p) = prepare(
        &app,
        &format!("/api/threads/{tid}/runs/regenerate/prepare"),
        json!({"message_id": answer["id"]}),
    )
    .await;
    assert_eq!(s, 200, "{p}");
    assert_eq!(p["target_run_id"], r1.as_str());
    assert_eq!(
        p["input"]["messages"][0]["id"],
        human_id.trim_end_matches("__user")
    );
    assert_eq!(
        p["input"]["messages"][0]["content"][0]["text"],
        "tell me a story"
    );
    let base = p["checkpoint"]["checkpoint_id"].as_str().unwrap();
    let cp = checkpoint(&app, &tid, base).await;
    assert_eq!(
        cp["values"]["messages"]
            .as_array()
            .map(Vec::len)
            .unwrap_or(0),
        0
    );
    assert_eq!(cp["metadata"]["source"], "input");

    let r2 = stream_prepared(&app, &tid, &p).await;
    let after = messages(&app, &tid).await;
    let humans: Vec<&Value> = after.iter().filter(|m| m["type"] == "human").collect();
    assert_eq!(humans.len(), 1, "{after:?}");
    assert_eq!(humans[0]["id"], human_id.as_str());
    let last = after.last().unwrap();
    assert_eq!(last["type"], "ai");
    assert_ne!(last["id"], answer["id"]);
    let rows = page(&app, &tid).await;
    assert!(
        !rows.is_empty() && rows.iter().all(|r| r.0 == r2),
        "{rows:?}"
    );

    // Editing that first turn forks from the same place.
    let (s, p) = prepare(
        &app,
        &format!("/api/threads/{tid}/runs/edit-regenerate/prepare"),
        json!({"human_message_id": human_id, "replacement_text": "tell me a poem"}),
    )
    .await;
    assert_eq!(s, 200, "{p}");
    let cp = checkpoint(
        &app,
        &tid,
        p["checkpoint"]["checkpoint_id"].as_str().unwrap(),
    )
    .await;
    assert_eq!(
        cp["values"]["messages"]
            .as_array()
            .map(Vec::len)
            .unwrap_or(0),
        0
    );
    assert_eq!(cp["metadata"]["source"], "input");
    let r3 = stream_prepared(&app, &tid, &p).await;
    let after = messages(&app, &tid).await;
    let humans: Vec<&Value> = after.iter().filter(|m| m["type"] == "human").collect();
    assert_eq!(humans.len(), 1, "{after:?}");
    assert!(text(humans[0]).contains("tell me a poem"), "{after:?}");
    let rows = page(&app, &tid).await;
    assert!(
        !rows.is_empty() && rows.iter().all(|r| r.0 == r3),
        "{rows:?}"
    );
    assert!(rows[0].2.contains("tell me a poem"), "{rows:?}");
    app.stop().await;
}

async fn branch_forks_a_thread_at_a_turn(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (tid, r1, r2) = two_turns(&app).await;
    let src = messages(&app, &tid).await;
    let m = ids(&src);
    let src_page = page(&app, &tid).await;
    // Files of the source: a symlink and an unfinished upload are not copied.
    let outputs = app
        .home
        .join(format!("users/default/threads/{tid}/user-data/outputs"));
    std::fs::create_dir_all(&outputs).unwrap();
    std::fs::write(outputs.join("report.md"), "# report").unwrap();
    let uploads = outputs.parent().unwrap().join("uploads");
    std::fs::create_dir_all(&uploads).unwrap();
    std::fs::write(uploads.join(".upload-x.part"), "partial").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", outputs.join("link")).unwrap();
    let path = format!("/api/threads/{tid}/branches");

    // From the latest turn: the whole conversation and the files.
    let (s, b) = app
        .post_json(&path, json!({"message_id": m[3], "message_ids": [m[3]]}))
        .await;
    assert_eq!(s, 200, "{b}");
    let new = b["thread_id"].as_str().unwrap().to_string();
    assert_ne!(new, tid);
    assert_eq!(b["parent_thread_id"], tid.as_str());
    assert_eq!(b["branched_from_message_id"], m[3].as_str());
    assert_eq!(b["workspace_clone_mode"], "current_thread_best_effort");
    assert_eq!(b["history_seed_mode"], "seeded");
    let parent_cp = b["parent_checkpoint_id"].as_str().unwrap();
    assert_eq!(
        ids(
            checkpoint(&app, &tid, parent_cp).await["values"]["messages"]
                .as_array()
                .unwrap()
        ),
        m
    );
    let (s, t) = app.get_json(&format!("/threads/{new}")).await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(t["metadata"]["deerflow_branch"], true);
    assert_eq!(t["metadata"]["branch_parent_thread_id"], tid.as_str());
    assert_eq!(t["metadata"]["branch_parent_message_id"], m[3].as_str());
    assert_eq!(t["status"], "idle");
    assert_eq!(ids(&messages(&app, &new).await), m);
    let seeded = page(&app, &new).await;
    let seed = |n: u32| format!("branch-seed-{new}-{n}");
    let texts: Vec<(&str, &str)> = seeded
        .iter()
        .map(|r| (r.0.as_str(), r.2.as_str()))
        .collect();
    assert_eq!(
        texts,
        vec![
            (seed(1).as_str(), "hello"),
            (seed(1).as_str(), "Answer one."),
            (seed(2).as_str(), "question two"),
            (seed(2).as_str(), "Answer two."),
        ]
    );
    let (s, f) = app
        .get_json(&format!(
            "/api/threads/{new}/artifacts/mnt/user-data/outputs/report.md"
        ))
        .await;
    assert_eq!((s, f), (200, json!("# report")));
    let branch_data = app
        .home
        .join(format!("users/default/threads/{new}/user-data"));
    assert!(!branch_data.join("outputs/link").exists());
    assert!(!branch_data.join("uploads/.upload-x.part").exists());

    // The run routes take the seeded turns' ids, as DeerFlow's UI asks for them: nothing was
    // recorded of their workspace changes, their rows are read from the journal.
    let runs = format!("/api/threads/{new}/runs");
    let (s, w) = app
        .get_json(&format!(
            "{runs}/{}/workspace-changes?include_files=true&include_diff=false",
            seed(2)
        ))
        .await;
    assert_eq!(s, 200, "{w}");
    assert_eq!(
        (&w["available"], &w["files"], &w["summary"]["created"]),
        (&json!(false), &json!([]), &json!(0)),
        "{w}"
    );
    let (s, rm) = app.get_json(&format!("{runs}/{}/messages", seed(2))).await;
    assert_eq!((s, &rm["has_more"]), (200, &json!(false)), "{rm}");
    let rows: Vec<(String, String)> = rm["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run_id"].as_str().unwrap().to_string(),
                text(&r["content"]),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (seed(2), "question two".to_string()),
            (seed(2), "Answer two.".to_string())
        ]
    );
    let (s, ev) = app.get_json(&format!("{runs}/{}/events", seed(1))).await;
    assert_eq!(s, 200, "{ev}");
    let ev = ev.as_array().unwrap();
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert!(ev.iter().all(|e| e["run_id"] == seed(1).as_str()), "{ev:?}");
    // A seeded answer can be rated like any other; its feedback reads back.
    let fb = format!("{runs}/{}/feedback", seed(2));
    let r = app
        .client
        .put(app.u(&fb))
        .json(&json!({"rating": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let f: Value = r.json().await.unwrap();
    assert_eq!(
        (&f["run_id"], &f["thread_id"], &f["rating"]),
        (&json!(seed(2)), &json!(new), &json!(1)),
        "{f}"
    );
    let (s, l) = app.get_json(&fb).await;
    assert_eq!((s, l.as_array().map(Vec::len)), (200, Some(1)), "{l}");
    let (s, st) = app.get_json(&format!("{fb}/stats")).await;
    assert_eq!((s, &st["positive"]), (200, &json!(1)), "{st}");
    // A journal-only id without rows has none of anything, and cannot be rated.
    let (s, w) = app
        .get_json(&format!("{runs}/checkpoint-9/workspace-changes"))
        .await;
    assert_eq!((s, &w["available"]), (200, &json!(false)), "{w}");
    let (s, rm) = app.get_json(&format!("{runs}/checkpoint-9/messages")).await;
    assert_eq!((s, rm), (200, json!({"data": [], "has_more": false})));
    let (s, ev) = app.get_json(&format!("{runs}/checkpoint-9/events")).await;
    assert_eq!((s, ev), (200, json!([])));
    let (s, l) = app.get_json(&format!("{runs}/checkpoint-9/feedback")).await;
    assert_eq!((s, l), (200, json!([])));
    let (s, e) = app
        .post_json(
            &format!("{runs}/checkpoint-9/feedback"),
            json!({"rating": 1}),
        )
        .await;
    assert_eq!(s, 404, "{e}");
    // A UUID must still be a run of the thread; anything else is refused.
    let other = uuid::Uuid::new_v4();
    for (rid, status) in [
        (other.to_string(), 404),
        (r1.clone(), 404),
        ("bad.id".to_string(), 422),
        ("x".repeat(129), 422),
    ] {
        for tail in ["messages", "events", "workspace-changes", "feedback"] {
            let (s, e) = app.get_json(&format!("{runs}/{rid}/{tail}")).await;
            let want = if tail == "feedback" && status == 404 {
                200
            } else {
                status
            };
            assert_eq!(s, want, "{rid}/{tail}: {e}");
            if s == 422 {
                assert!(
                    e["detail"].as_str().unwrap().starts_with("Invalid run ID"),
                    "{e}"
                );
            }
        }
    }

    // Its inherited last answer can be regenerated, from the branch's own checkpoint
    // before that turn; the superseded run is the turn's seed.
    let (s, r) = app
        .post_json(
            &format!("/api/threads/{new}/runs/regenerate/prepare"),
            json!({"message_id": m[3]}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["target_run_id"], seed(2).as_str());
    let base = r["checkpoint"]["checkpoint_id"].as_str().unwrap();
    assert_eq!(
        ids(checkpoint(&app, &new, base).await["values"]["messages"]
            .as_array()
            .unwrap()),
        m[..2]
    );

    // The branch goes on as a thread of its own.
    app.mock.push(Turn::text("Branch answer."));
    let rb = run(&app, &new, "on the branch").await;
    assert_eq!(messages(&app, &new).await.len(), 6);
    assert_eq!(messages(&app, &tid).await, src);
    let rows = page(&app, &new).await;
    assert_eq!(rows.len(), 6);
    assert_eq!(
        (rows[4].0.as_str(), rows[5].2.as_str()),
        (rb.as_str(), "Branch answer.")
    );

    // From the first turn: only its history, no files.
    let (s, b) = app
        .post_json(
            &path,
            json!({"message_id": m[1], "title": "Just the start"}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let first = b["thread_id"].as_str().unwrap().to_string();
    assert_eq!(b["workspace_clone_mode"], "skipped_historical_turn");
    assert_eq!(ids(&messages(&app, &first).await), m[..2]);
    let (_, t) = app.get_json(&format!("/threads/{first}")).await;
    assert_eq!(t["values"]["title"], "Just the start");
    assert_eq!(page(&app, &first).await.len(), 2);
    assert!(
        !app.home
            .join(format!(
                "users/default/threads/{first}/user-data/outputs/report.md"
            ))
            .exists()
    );

    // What cannot be branched.
    for (body, status) in [
        (json!({"message_id": "nope"}), 409),
        (json!({"message_id": m[2]}), 409),
        (json!({"message_id": ""}), 422),
        (json!({}), 422),
        (json!({"message_id": m[3], "title": "x".repeat(257)}), 422),
    ] {
        let (s, r) = app.post_json(&path, body.clone()).await;
        assert_eq!(s, status, "{body}: {r}");
    }
    let (s, r) = app.post_json(&path, json!({"message_id": "nope"})).await;
    assert_eq!(
        (s, r["detail"].as_str().unwrap()),
        (409, "This turn can no longer be branched from.")
    );
    // The source is as it was.
    assert_eq!(messages(&app, &tid).await, src);
    assert_eq!(page(&app, &tid).await, src_page);
    let _ = (r1, r2);
    app.stop().await;
}

async fn other_users_threads_are_not_found(db: Db) {
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
    let r = call(
        &app,
        &ann,
        "GET",
        &format!("/api/threads/{tid}/state"),
        None,
    )
    .await;
    let msgs = r.body["values"]["messages"].as_array().unwrap().clone();
    let (h, a) = (msgs[0]["id"].clone(), msgs[1]["id"].clone());
    for (path, body) in [
        (
            format!("/api/threads/{tid}/runs/regenerate/prepare"),
            json!({"message_id": a}),
        ),
        (
            format!("/api/threads/{tid}/runs/edit-regenerate/prepare"),
            json!({"human_message_id": h, "replacement_text": "changed"}),
        ),
        (
            format!("/api/threads/{tid}/branches"),
            json!({"message_id": a}),
        ),
    ] {
        let r = call(&app, &bob, "POST", &path, Some(body)).await;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
    }
    // Ann's branch is Ann's.
    let r = call(
        &app,
        &ann,
        "POST",
        &format!("/api/threads/{tid}/branches"),
        Some(json!({"message_id": a})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let new = r.body["thread_id"].as_str().unwrap().to_string();
    let r = call(&app, &ann, "GET", &format!("/api/threads/{new}"), None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call(&app, &bob, "GET", &format!("/api/threads/{new}"), None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = call(
        &app,
        &ann,
        "GET",
        &format!("/api/threads/{new}/messages/page"),
        None,
    )
    .await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2, "{}", r.body);
    // Its seeded turn's run routes are Ann's too.
    let run = format!("/api/threads/{new}/runs/branch-seed-{new}-1");
    for tail in ["messages", "events", "workspace-changes", "feedback"] {
        let path = format!("{run}/{tail}");
        let r = call(&app, &ann, "GET", &path, None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let r = call(&app, &bob, "GET", &path, None).await;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
    }
    let r = call(
        &app,
        &bob,
        "PUT",
        &format!("{run}/feedback"),
        Some(json!({"rating": -1})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    app.stop().await;
}
