//! A run's workspace changes, the subagent timeline in the run-event journal, and the
//! test-only run seeder, on both backends.

use crate::auth::{admin_and_users, call};
use crate::helpers::*;
use fawn_testkit::{MockToolCall, Turn};
use serde_json::{Value, json};

backends!(
    workspace_changes_of_a_run,
    subagent_steps_are_journaled,
    seed_runs_is_gated,
    seeded_runs_are_history,
);

/// The lead agent with the file tools.
fn lead_spawn(db: Db) -> Spawn {
    Spawn {
        lead_agent: true,
        settings: Some(Box::new(|s| {
            for (name, group) in [("read_file", "file:read"), ("write_file", "file:write")] {
                s.app.tools.push(fawn_config::ToolConfig {
                    name: name.into(),
                    group: Some(group.into()),
                    use_: format!("deerflow.sandbox.tools:{name}_tool"),
                    extra: Default::default(),
                });
            }
        })),
        ..Spawn::new(db)
    }
}

async fn lead_app(db: Db) -> Option<TestApp> {
    spawn_with(lead_spawn(db)).await
}

fn workspace(app: &TestApp, tid: &str) -> std::path::PathBuf {
    app.home
        .join("users/default/threads")
        .join(tid)
        .join("user-data/workspace")
}

fn write_file(path: &str, content: &str) -> MockToolCall {
    MockToolCall::new(
        "write_file",
        json!({"description": "write", "path": path, "content": content}),
    )
}

async fn workspace_changes_of_a_run(db: Db) {
    let kind = db;
    let Some(app) = lead_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let ws = workspace(&app, &tid);
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.md"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(ws.join("keep.md"), "same\n").unwrap();
    app.mock.push(Turn::tool_call(
        "read_file",
        json!({"description": "read", "path": "/mnt/user-data/workspace/notes.md"}),
    ));
    app.mock.push(Turn::tool_calls([
        write_file("/mnt/user-data/workspace/notes.md", "one\n2\nthree\n"),
        write_file("/mnt/user-data/workspace/new.txt", "hello\nworld\n"),
    ]));
    app.mock.push(Turn::text("Edited."));
    let ctx = json!({"thinking_enabled": false});
    let rid = run_to_success_with(&app, &tid, "edit my notes", ctx.clone()).await;
    let base = format!("/api/threads/{tid}/runs/{rid}/workspace-changes");

    let (s, r) = app.get_json(&base).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["available"], true, "{r}");
    assert_eq!(r["version"], 1);
    assert_eq!(
        r["summary"],
        json!({"created": 1, "modified": 1, "deleted": 0, "symlink_created": 0,
               "additions": 3, "deletions": 1, "truncated": false})
    );
    assert_eq!(r["limits"]["max_files"], 200);
    assert_eq!(r["limits"]["max_file_bytes_for_diff"], 262144);
    let files = r["files"].as_array().unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        vec![
            "/mnt/user-data/workspace/new.txt",
            "/mnt/user-data/workspace/notes.md"
        ]
    );
    let notes = &files[1];
    assert_eq!(notes["status"], "modified");
    assert_eq!(notes["root"], "workspace");
    assert_eq!(
        notes["diff"],
        "--- a/mnt/user-data/workspace/notes.md\n+++ b/mnt/user-data/workspace/notes.md\n\
         @@ -1,3 +1,3 @@\n one\n-two\n+2\n three"
    );
    assert_eq!(
        (&notes["additions"], &notes["deletions"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(
        (&notes["size_before"], &notes["size_after"]),
        (&json!(14), &json!(12))
    );
    assert!(notes["sha256_before"].is_string() && notes["sha256_after"].is_string());
    assert_eq!(notes["diff_unavailable_reason"], Value::Null);
    assert_eq!(files[0]["status"], "created");
    assert_eq!(files[0]["size_before"], Value::Null);

    let (_, r) = app.get_json(&format!("{base}?include_diff=false")).await;
    assert_eq!(r["files"][1]["diff"], "");
    assert_eq!(r["files"][1]["additions"], 1);
    let (_, r) = app
        .get_json(&format!("{base}?include_files=false&include_diff=true"))
        .await;
    assert_eq!(r["files"], json!([]));
    assert_eq!(r["summary"]["modified"], 1);
    let (s, r) = app.get_json(&format!("{base}?include_files=maybe")).await;
    assert_eq!(s, 422, "{r}");
    assert!(r["detail"].is_string());
    let (s, _) = app
        .get_json(&format!(
            "/api/threads/{tid}/runs/{}/workspace-changes",
            uuid::Uuid::new_v4()
        ))
        .await;
    assert_eq!(s, 404);

    // The journal row itself, next to the run's messages.
    let (_, ev) = app
        .get_json(&format!(
            "/api/threads/{tid}/runs/{rid}/events?event_types=workspace_changes"
        ))
        .await;
    assert_eq!(ev.as_array().unwrap().len(), 1, "{ev}");
    assert_eq!(ev[0]["category"], "workspace");
    assert_eq!(ev[0]["content"], "2 files changed +3 -1");

    // A run that changes nothing has nothing to show.
    app.mock.push(Turn::text("Nothing to do."));
    let quiet = run_to_success_with(&app, &tid, "just chat", ctx).await;
    let (s, r) = app
        .get_json(&format!(
            "/api/threads/{tid}/runs/{quiet}/workspace-changes"
        ))
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        r,
        json!({"available": false, "version": 1, "files": [], "limits": {},
               "summary": {"created": 0, "modified": 0, "deleted": 0, "symlink_created": 0,
                           "additions": 0, "deletions": 0, "truncated": false}})
    );

    // It is durable: a restarted server serves it from the store.
    let restart = Spawn {
        existing_db: Some(app.db.clone()),
        ..lead_spawn(kind)
    };
    app.stop().await;
    let again = spawn_with(restart).await.unwrap();
    let (s, r) = again.get_json(&base).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["summary"]["created"], 1);
    assert_eq!(r["files"][1]["diff_unavailable_reason"], Value::Null);
    again.stop().await;
}

async fn subagent_steps_are_journaled(db: Db) {
    let Some(app) = lead_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    app.mock.push(Turn::tool_calls([MockToolCall::new(
        "task",
        json!({"description": "draft notes", "prompt": "write the notes",
               "subagent_type": "general-purpose"}),
    )
    .with_id("call_task1")]));
    app.mock.push(Turn::tool_calls([write_file(
        "/mnt/user-data/workspace/draft.md",
        "draft\n",
    )]));
    app.mock.push(Turn::text("child result"));
    app.mock.push(Turn::text("All done."));
    let rid = run_to_success_with(
        &app,
        &tid,
        "delegate it",
        json!({"thinking_enabled": false, "subagent_enabled": true}),
    )
    .await;
    let events = format!("/api/threads/{tid}/runs/{rid}/events");
    let (s, ev) = app
        .get_json(&format!(
            "{events}?event_types=subagent.start,subagent.step,subagent.end"
        ))
        .await;
    assert_eq!(s, 200, "{ev}");
    let ev = ev.as_array().unwrap();
    let types: Vec<&str> = ev
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        vec![
            "subagent.start",
            "subagent.step",
            "subagent.step",
            "subagent.step",
            "subagent.end"
        ],
        "{ev:?}"
    );
    for e in ev {
        assert_eq!(e["category"], "subagent", "{e}");
        assert_eq!(e["metadata"]["caller"], "subagent:general-purpose", "{e}");
        assert_eq!(e["metadata"]["task_id"], "call_task1", "{e}");
        assert_eq!(e["run_id"], rid.as_str());
    }
    let seqs: Vec<i64> = ev.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(
        ev[0]["content"],
        json!({"task_id": "call_task1", "description": "draft notes"})
    );
    assert_eq!(ev[1]["content"]["kind"], "ai");
    assert_eq!(ev[1]["content"]["message_index"], 1);
    assert_eq!(ev[1]["content"]["tool_calls"][0]["name"], "write_file");
    assert_eq!(
        ev[1]["content"]["tool_calls"][0]["args"]["path"],
        "/mnt/user-data/workspace/draft.md"
    );
    assert_eq!(ev[2]["content"]["kind"], "tool");
    assert_eq!(ev[2]["content"]["tool_name"], "write_file");
    assert_eq!(ev[2]["metadata"]["message_index"], 2);
    assert_eq!(ev[3]["content"]["text"], "child result");
    assert_eq!(ev[4]["content"]["status"], "completed");
    assert_eq!(ev[4]["content"]["result"], "child result");

    // The subtask card's backfill: one task's steps, paged forward.
    let (_, page) = app
        .get_json(&format!(
            "{events}?event_types=subagent.step&task_id=call_task1&limit=2"
        ))
        .await;
    let page = page.as_array().unwrap().clone();
    assert_eq!(page.len(), 2);
    assert_eq!(page[1]["metadata"]["message_index"], 2);
    let (_, rest) = app
        .get_json(&format!(
            "{events}?event_types=subagent.step&task_id=call_task1&limit=2&after_seq={}",
            page[1]["seq"]
        ))
        .await;
    assert_eq!(rest.as_array().unwrap().len(), 1, "{rest}");
    assert_eq!(rest[0]["metadata"]["message_index"], 3);
    let (_, none) = app.get_json(&format!("{events}?task_id=other")).await;
    assert_eq!(none, json!([]));

    // Not conversation history; the subagent's file is in the run's workspace changes.
    let (_, p) = app
        .get_json(&format!("/api/threads/{tid}/messages/page"))
        .await;
    let categories: Vec<&str> = p["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["category"].as_str().unwrap())
        .collect();
    assert!(categories.iter().all(|c| *c == "message"), "{p}");
    let (_, w) = app
        .get_json(&format!("/api/threads/{tid}/runs/{rid}/workspace-changes"))
        .await;
    assert_eq!(
        w["files"][0]["path"], "/mnt/user-data/workspace/draft.md",
        "{w}"
    );
    app.stop().await;
}

fn seed_body(tid: &str, r1: &str, r2: &str) -> Value {
    json!({
        "thread_id": tid,
        "runs": [
            {"run_id": r1, "created_at": "2026-01-01T00:00:00+00:00", "messages": [
                {"role": "human", "content": "ALPHA", "id": format!("{tid}-a-h")},
                {"role": "ai", "content": "ALPHA reply", "id": format!("{tid}-a-a")},
            ]},
            {"run_id": r2, "created_at": "2026-01-01T00:01:00+00:00", "messages": [
                {"role": "human", "content": "OMEGA", "id": format!("{tid}-o-h")},
                {"role": "ai", "content": "OMEGA reply", "id": format!("{tid}-o-a")},
            ]},
        ],
    })
}

fn ids() -> (String, String) {
    (
        uuid::Uuid::new_v4().to_string(),
        uuid::Uuid::new_v4().to_string(),
    )
}

async fn seed_runs_is_gated(db: Db) {
    use fawn_server::gateway::seed::TestSeed;
    for (seed, status) in [
        (TestSeed::default(), 404),
        (
            TestSeed {
                requested: true,
                production: true,
            },
            404,
        ),
        (
            TestSeed {
                requested: true,
                production: false,
            },
            200,
        ),
    ] {
        let Some(app) = spawn_with(Spawn {
            tweak: Some(Box::new(move |o| o.test_seed = seed)),
            ..Spawn::new(db)
        })
        .await
        else {
            return;
        };
        let (r1, r2) = ids();
        let (s, r) = app
            .post_json(
                "/api/test-only/seed-runs",
                seed_body("seeded-thread", &r1, &r2),
            )
            .await;
        assert_eq!(s, status, "{seed:?}: {r}");
        if status == 404 {
            assert_eq!(r, json!({"detail": "Not Found"}));
        } else {
            assert_eq!(
                r,
                json!({"ok": true, "thread_id": "seeded-thread", "runs": 2})
            );
        }
        app.stop().await;
    }
}

async fn seeded_runs_are_history(db: Db) {
    let Some(app) = spawn_with(Spawn {
        tweak: Some(Box::new(|o| {
            o.auth = fawn_server::auth::AuthOptions::enabled();
            o.test_seed.requested = true;
        })),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let (_admin, ann, bob) = admin_and_users(&app).await;
    let tid = "e2e-thread-1";
    let (r1, r2) = ids();
    let r = call(
        &app,
        &ann,
        "POST",
        "/api/test-only/seed-runs",
        Some(seed_body(tid, &r1, &r2)),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    let r = call(
        &app,
        &ann,
        "GET",
        &format!("/api/threads/{tid}/messages/page"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let data = r.body["data"].as_array().unwrap();
    let texts: Vec<&str> = data
        .iter()
        .map(|m| m["content"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, vec!["ALPHA", "ALPHA reply", "OMEGA", "OMEGA reply"]);
    let runs: Vec<&str> = data.iter().map(|m| m["run_id"].as_str().unwrap()).collect();
    assert_eq!(
        runs,
        vec![r1.as_str(), r1.as_str(), r2.as_str(), r2.as_str()]
    );
    assert_eq!(data[1]["event_type"], "llm.ai.response");
    assert_eq!(data[1]["metadata"]["caller"], "lead_agent");
    assert_eq!(data[1]["content"]["id"], format!("{tid}-a-a"));
    assert_eq!(data[0]["created_at"], "2026-01-01T00:00:00.000000+00:00");

    // The runs exist, newest first, and are Ann's.
    let r = call(&app, &ann, "GET", &format!("/api/threads/{tid}/runs"), None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let listed: Vec<&str> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![r2.as_str(), r1.as_str()]);
    let r = call(
        &app,
        &ann,
        "GET",
        &format!("/api/threads/{tid}/runs/{r1}/messages"),
        None,
    )
    .await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2, "{}", r.body);

    let changes = format!("/api/threads/{tid}/runs/{r1}/workspace-changes");
    let r = call(&app, &ann, "GET", &changes, None).await;
    assert_eq!(
        (r.status, &r.body["available"]),
        (200, &json!(false)),
        "{}",
        r.body
    );

    // Bob can neither read them nor seed into Ann's thread.
    for path in [format!("/api/threads/{tid}/messages/page"), changes] {
        let r = call(&app, &bob, "GET", &path, None).await;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
    }
    let (r3, r4) = ids();
    let r = call(
        &app,
        &bob,
        "POST",
        "/api/test-only/seed-runs",
        Some(seed_body(tid, &r3, &r4)),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    // Bad input is a 4xx.
    let r = call(
        &app,
        &ann,
        "POST",
        "/api/test-only/seed-runs",
        Some(seed_body(tid, "not a run id", &r4)),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap()
            .starts_with("runs[0].run_id: Invalid run ID"),
        "{}",
        r.body
    );
    let mut bad = seed_body("other-thread", &r3, &r4);
    bad["runs"][0]["created_at"] = json!("yesterday");
    let r = call(&app, &ann, "POST", "/api/test-only/seed-runs", Some(bad)).await;
    assert_eq!(r.status, 422, "{}", r.body);
    let r = call(
        &app,
        &ann,
        "POST",
        "/api/test-only/seed-runs",
        Some(seed_body(tid, &r1, &r4)),
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.body);
    app.stop().await;
}
