//! DeerFlow's custom-agent routes (`/api/agents*`, `/api/user-profile`), follow-up
//! suggestions and artifact edits, on both backends.

use crate::auth::{Cred, admin_and_users, call, spawn_auth};
use crate::helpers::*;
use fawn_runtime::hooks::Point;
use fawn_testkit::{Fault, Turn};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

backends!(
    agents_round_trip,
    agents_api_off_answers_403,
    agent_names_cannot_leave_the_agents_directory,
    legacy_agents_are_read_only,
    agents_and_profiles_belong_to_their_user,
    an_agent_made_over_http_drives_a_run,
    suggestions_ask_the_model_and_never_fail,
    suggestions_follow_the_config,
    artifacts_are_edited_in_place,
    artifact_edits_refuse_what_deerflow_refuses,
    assistants_search_lists_custom_agents_under_api,
);

fn agents_on(s: &mut fawn_config::Settings) {
    s.app.agents_api.enabled = true;
}

async fn spawn_agents(db: Db) -> Option<TestApp> {
    spawn_with(Spawn {
        settings: Some(Box::new(agents_on)),
        ..Spawn::new(db)
    })
    .await
}

/// A request without credentials (authentication is off: the synthetic admin `default`).
async fn req(app: &TestApp, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = call(app, &Cred::Anon, method, path, body).await;
    (r.status, r.body)
}

fn agent_dir(app: &TestApp, user: &str, name: &str) -> PathBuf {
    app.home.join("users").join(user).join("agents").join(name)
}

async fn agents_round_trip(db: Db) {
    let Some(app) = spawn_agents(db).await else {
        return;
    };
    let (s, f) = req(&app, "GET", "/api/features", None).await;
    assert_eq!((s, &f["agents_api"]), (200, &json!({"enabled": true})));
    let (s, l) = req(&app, "GET", "/api/agents", None).await;
    assert_eq!((s, l), (200, json!({"agents": []})));
    let (s, c) = req(&app, "GET", "/api/agents/check?name=My-Agent", None).await;
    assert_eq!(
        (s, c),
        (200, json!({"available": true, "name": "my-agent"}))
    );

    let (s, a) = req(
        &app,
        "POST",
        "/api/agents",
        Some(json!({
            "name": "My-Agent",
            "description": "Writes haiku",
            "model": "mock",
            "tool_groups": ["web"],
            "model_settings": {"temperature": 0.2},
            "thinking_enabled": false,
            "reasoning_effort": "low",
            "soul": "You are terse.\n",
        })),
    )
    .await;
    assert_eq!(s, 201, "{a}");
    assert_eq!(
        a,
        json!({
            "name": "my-agent", "description": "Writes haiku", "model": "mock",
            "tool_groups": ["web"], "skills": null,
            "model_settings": {"temperature": 0.2, "max_tokens": null},
            "thinking_enabled": false, "reasoning_effort": "low", "soul": "You are terse.",
        })
    );
    let dir = agent_dir(&app, "default", "my-agent");
    assert_eq!(
        std::fs::read_to_string(dir.join("SOUL.md")).unwrap(),
        "You are terse.\n"
    );
    let cfg = std::fs::read_to_string(dir.join("config.yaml")).unwrap();
    assert!(
        cfg.contains("name: my-agent") && cfg.contains("Writes haiku"),
        "{cfg}"
    );
    // The name is taken, in any case.
    for name in ["my-agent", "MY-AGENT"] {
        let (s, e) = req(&app, "POST", "/api/agents", Some(json!({"name": name}))).await;
        assert_eq!(s, 409, "{e}");
        assert_eq!(e["detail"], "Agent 'my-agent' already exists");
    }
    let (_, c) = req(&app, "GET", "/api/agents/check?name=MY-agent", None).await;
    assert_eq!(c, json!({"available": false, "name": "my-agent"}));
    let (s, got) = req(&app, "GET", "/api/agents/My-Agent", None).await;
    assert_eq!((s, &got), (200, &a));
    let (_, l) = req(&app, "GET", "/api/agents", None).await;
    assert_eq!(l, json!({"agents": [a]}));

    // A key the API does not manage survives an update.
    let with_extra = format!("{cfg}allowed_subagents:\n- general-purpose\n");
    std::fs::write(dir.join("config.yaml"), with_extra).unwrap();
    // Only what is given changes; null clears; model_settings merges by sub-field.
    let (s, u) = req(
        &app,
        "PUT",
        "/api/agents/my-agent",
        Some(json!({
            "description": "Writes limericks",
            "tool_groups": null,
            "model_settings": {"max_tokens": 100},
        })),
    )
    .await;
    assert_eq!(s, 200, "{u}");
    assert_eq!(u["description"], "Writes limericks");
    assert_eq!(u["tool_groups"], Value::Null);
    assert_eq!(
        u["model_settings"],
        json!({"temperature": 0.2, "max_tokens": 100})
    );
    assert_eq!(
        (&u["model"], &u["reasoning_effort"], &u["soul"]),
        (&json!("mock"), &json!("low"), &json!("You are terse."))
    );
    let cfg = std::fs::read_to_string(dir.join("config.yaml")).unwrap();
    assert!(cfg.contains("allowed_subagents"), "{cfg}");
    let (s, u) = req(
        &app,
        "PUT",
        "/api/agents/my-agent",
        Some(json!({"soul": "You are kind.", "model": null, "model_settings": null})),
    )
    .await;
    assert_eq!(s, 200, "{u}");
    assert_eq!(
        (&u["soul"], &u["model"], &u["model_settings"]),
        (&json!("You are kind."), &Value::Null, &Value::Null)
    );
    assert_eq!(u["description"], "Writes limericks");
    // An empty body changes nothing.
    let (s, same) = req(&app, "PUT", "/api/agents/my-agent", Some(json!({}))).await;
    assert_eq!((s, &same), (200, &u));
    // No temporary file is left next to the agent's files.
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["SOUL.md", "config.yaml"]);

    // What DeerFlow refuses with 422.
    for (body, what) in [
        (json!({}), "name"),
        (
            json!({"name": "x", "model": "nope"}),
            "Unknown model 'nope'",
        ),
        (
            json!({"name": "x", "reasoning_effort": "max"}),
            "reasoning_effort",
        ),
        (
            json!({"name": "x", "model_settings": {"temperature": 3}}),
            "temperature",
        ),
        (
            json!({"name": "x", "model_settings": {"top_p": 1}}),
            "top_p",
        ),
        (json!({"name": "x", "tool_groups": "web"}), "tool_groups"),
    ] {
        let (s, e) = req(&app, "POST", "/api/agents", Some(body.clone())).await;
        assert_eq!(s, 422, "{body}: {e}");
        assert!(e["detail"].as_str().unwrap().contains(what), "{body}: {e}");
    }
    assert!(!agent_dir(&app, "default", "x").exists());
    let (s, _) = req(
        &app,
        "PUT",
        "/api/agents/my-agent",
        Some(json!({"model": "nope"})),
    )
    .await;
    assert_eq!(s, 422);
    let (s, _) = req(&app, "GET", "/api/agents/check", None).await;
    assert_eq!(s, 422);

    // Missing agents.
    for m in ["GET", "PUT", "DELETE"] {
        let (s, e) = req(&app, m, "/api/agents/ghost", Some(json!({}))).await;
        assert_eq!(s, 404, "{m}: {e}");
        assert_eq!(e["detail"], "Agent 'ghost' not found");
    }
    // A directory holding only an agent's memory is not an agent: kept, and its name taken.
    let memory_only = agent_dir(&app, "default", "memo");
    std::fs::create_dir_all(&memory_only).unwrap();
    std::fs::write(memory_only.join("memory.json"), "{}").unwrap();
    let (s, _) = req(&app, "DELETE", "/api/agents/memo", None).await;
    assert_eq!(s, 409);
    assert!(memory_only.join("memory.json").exists());
    let (s, _) = req(&app, "POST", "/api/agents", Some(json!({"name": "memo"}))).await;
    assert_eq!(s, 409);
    // A broken config.yaml is the caller's to fix, not a server failure; the list skips it.
    let broken = agent_dir(&app, "default", "broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("config.yaml"), "name: [unclosed").unwrap();
    let (s, e) = req(&app, "GET", "/api/agents/broken", None).await;
    assert_eq!(s, 409, "{e}");
    let (s, l) = req(&app, "GET", "/api/agents", None).await;
    assert_eq!(s, 200);
    assert_eq!(l["agents"].as_array().unwrap().len(), 1, "{l}");

    let (s, _) = req(&app, "DELETE", "/api/agents/My-Agent", None).await;
    assert_eq!(s, 204);
    assert!(!dir.exists());
    let (s, _) = req(&app, "GET", "/api/agents/my-agent", None).await;
    assert_eq!(s, 404);

    // The user profile.
    let (s, p) = req(&app, "GET", "/api/user-profile", None).await;
    assert_eq!((s, p), (200, json!({"content": null})));
    let (s, p) = req(
        &app,
        "PUT",
        "/api/user-profile",
        Some(json!({"content": "I like Rust.\n"})),
    )
    .await;
    assert_eq!((s, p), (200, json!({"content": "I like Rust.\n"})));
    assert_eq!(
        std::fs::read_to_string(app.home.join("users/default/USER.md")).unwrap(),
        "I like Rust.\n"
    );
    let (_, p) = req(&app, "GET", "/api/user-profile", None).await;
    assert_eq!(p, json!({"content": "I like Rust."}));
    let (s, p) = req(&app, "PUT", "/api/user-profile", Some(json!({}))).await;
    assert_eq!((s, p), (200, json!({"content": null})));
    let (_, p) = req(&app, "GET", "/api/user-profile", None).await;
    assert_eq!(p, json!({"content": null}));
    app.stop().await;
}

async fn agents_api_off_answers_403(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (_, f) = req(&app, "GET", "/api/features", None).await;
    assert_eq!(f["agents_api"], json!({"enabled": false}));
    for (m, path, body) in [
        ("GET", "/api/agents", None),
        ("POST", "/api/agents", Some(json!({"name": "a"}))),
        ("GET", "/api/agents/check?name=a", None),
        ("GET", "/api/agents/a", None),
        ("PUT", "/api/agents/a", Some(json!({"soul": "x"}))),
        ("DELETE", "/api/agents/a", None),
        ("GET", "/api/user-profile", None),
        ("PUT", "/api/user-profile", Some(json!({"content": "x"}))),
    ] {
        let (s, e) = req(&app, m, path, body).await;
        assert_eq!(s, 403, "{m} {path}: {e}");
        assert!(
            e["detail"].as_str().unwrap().contains("agents_api.enabled"),
            "{e}"
        );
    }
    assert!(!app.home.join("users/default/agents").exists());
    assert!(!app.home.join("users/default/USER.md").exists());
    app.stop().await;
}

async fn agent_names_cannot_leave_the_agents_directory(db: Db) {
    let Some(app) = spawn_agents(db).await else {
        return;
    };
    let long = "a".repeat(129);
    for name in [
        "a.b",
        "a_b",
        "a%20b",
        // (`%2E%2E` alone is resolved by the client as `..`; an encoded slash is not.)
        "..%2F..%2Fescaped",
        "..%5C..%5Cescaped",
        "a%2Fb",
        "a%5Cb",
        "%C3%A9",
        long.as_str(),
    ] {
        for (m, path, body) in [
            ("GET", format!("/api/agents/check?name={name}"), None),
            ("GET", format!("/api/agents/{name}"), None),
            (
                "PUT",
                format!("/api/agents/{name}"),
                Some(json!({"soul": "x"})),
            ),
            ("DELETE", format!("/api/agents/{name}"), None),
        ] {
            let (s, e) = req(&app, m, &path, body).await;
            assert_eq!(s, 422, "{m} {path}: {e}");
        }
    }
    for name in ["../escaped", "a/b", "..", "a\\b", "", " a", "a\n"] {
        let (s, e) = req(
            &app,
            "POST",
            "/api/agents",
            Some(json!({"name": name, "soul": "x"})),
        )
        .await;
        assert_eq!(s, 422, "{name:?}: {e}");
    }
    // Nothing was written anywhere.
    assert!(!app.home.join("users/default/agents").exists());
    assert!(!app.home.join("users/escaped").exists());
    assert!(!app.home.join("escaped").exists());
    app.stop().await;
}

async fn legacy_agents_are_read_only(db: Db) {
    let Some(app) = spawn_agents(db).await else {
        return;
    };
    let legacy = app.home.join("agents").join("old");
    std::fs::create_dir_all(&legacy).unwrap();
    std::fs::write(
        legacy.join("config.yaml"),
        "name: old\ndescription: From before users\n",
    )
    .unwrap();
    std::fs::write(legacy.join("SOUL.md"), "Old soul").unwrap();
    let (s, l) = req(&app, "GET", "/api/agents", None).await;
    assert_eq!(s, 200);
    assert_eq!(l["agents"][0]["name"], "old");
    assert_eq!(l["agents"][0]["soul"], "Old soul");
    let (s, a) = req(&app, "GET", "/api/agents/old", None).await;
    assert_eq!((s, &a["description"]), (200, &json!("From before users")));
    let (_, c) = req(&app, "GET", "/api/agents/check?name=old", None).await;
    assert_eq!(c["available"], false);
    for (m, body) in [("PUT", Some(json!({"soul": "new"}))), ("DELETE", None)] {
        let (s, e) = req(&app, m, "/api/agents/old", body).await;
        assert_eq!(s, 409, "{m}: {e}");
        assert!(e["detail"].as_str().unwrap().contains("legacy"), "{e}");
    }
    let (s, _) = req(&app, "POST", "/api/agents", Some(json!({"name": "old"}))).await;
    assert_eq!(s, 409);
    assert_eq!(
        std::fs::read_to_string(legacy.join("SOUL.md")).unwrap(),
        "Old soul"
    );
    app.stop().await;
}

async fn agents_and_profiles_belong_to_their_user(db: Db) {
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    let (admin, alice, bob) = admin_and_users(&app).await;
    let r = call(
        &app,
        &alice,
        "POST",
        "/api/agents",
        Some(json!({"name": "helper", "soul": "Alice's helper"})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = call(
        &app,
        &alice,
        "PUT",
        "/api/user-profile",
        Some(json!({"content": "Alice"})),
    )
    .await;
    assert_eq!(r.status, 200);
    let alice_id = call(&app, &alice, "GET", "/api/v1/auth/me", None)
        .await
        .body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let alice_dir = agent_dir(&app, &alice_id, "helper");
    assert!(
        alice_dir.join("SOUL.md").exists(),
        "{}",
        alice_dir.display()
    );
    assert!(
        app.home
            .join("users")
            .join(&alice_id)
            .join("USER.md")
            .exists()
    );

    for other in [&bob, &admin] {
        let r = call(&app, other, "GET", "/api/agents", None).await;
        assert_eq!(r.body, json!({"agents": []}));
        let r = call(&app, other, "GET", "/api/agents/helper", None).await;
        assert_eq!(r.status, 404);
        let r = call(
            &app,
            other,
            "PUT",
            "/api/agents/helper",
            Some(json!({"soul": "mine"})),
        )
        .await;
        assert_eq!(r.status, 404);
        let r = call(&app, other, "DELETE", "/api/agents/helper", None).await;
        assert_eq!(r.status, 404);
        let r = call(&app, other, "GET", "/api/agents/check?name=helper", None).await;
        assert_eq!(r.body["available"], true);
        let r = call(&app, other, "GET", "/api/user-profile", None).await;
        assert_eq!(r.body, json!({"content": null}));
    }
    // Bob has his own agent of that name; Alice's is untouched.
    let r = call(
        &app,
        &bob,
        "POST",
        "/api/agents",
        Some(json!({"name": "Helper", "soul": "Bob's helper"})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = call(&app, &bob, "DELETE", "/api/agents/helper", None).await;
    assert_eq!(r.status, 204);
    let r = call(&app, &alice, "GET", "/api/agents/helper", None).await;
    assert_eq!((r.status, &r.body["soul"]), (200, &json!("Alice's helper")));
    let r = call(&app, &alice, "GET", "/api/user-profile", None).await;
    assert_eq!(r.body, json!({"content": "Alice"}));
    // Anonymous callers are refused before anything else.
    let r = call(&app, &Cred::Anon, "GET", "/api/agents", None).await;
    assert_eq!(r.status, 401);
    // Another user's thread: its artifacts and suggestions are not found.
    let t = call(&app, &alice, "POST", "/threads", Some(json!({}))).await;
    let tid = t.body["thread_id"].as_str().unwrap();
    let r = call(
        &app,
        &bob,
        "PUT",
        &format!("/api/threads/{tid}/artifacts/mnt/user-data/outputs/a.md"),
        Some(json!({"content": "x", "expected_sha256": "0".repeat(64)})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    app.stop().await;
}

async fn an_agent_made_over_http_drives_a_run(db: Db) {
    let Some(app) = spawn_with(Spawn {
        settings: Some(Box::new(agents_on)),
        lead_agent: true,
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let soul = "You only ever answer in rhyme.";
    let (s, e) = req(
        &app,
        "POST",
        "/api/agents",
        Some(json!({"name": "Rhymer", "soul": soul})),
    )
    .await;
    assert_eq!(s, 201, "{e}");
    app.mock.push(Turn::text("A rhyme in time."));
    let tid = app.create_thread().await;
    let (s, v) = app
        .post_json(
            &format!("/api/threads/{tid}/runs/wait"),
            json!({
                "assistant_id": "lead_agent",
                "input": user_input("hello"),
                "context": {"agent_name": "Rhymer"},
            }),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let req = app.mock.chat_requests()[0].clone();
    let system = req
        .messages()
        .iter()
        .find(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(system.contains(soul), "{system}");
    app.stop().await;
}

async fn suggest(app: &TestApp, tid: &str, body: Value) -> (u16, Value) {
    req(
        app,
        "POST",
        &format!("/api/threads/{tid}/suggestions"),
        Some(body),
    )
    .await
}

fn convo(n: u32) -> Value {
    json!({
        "messages": [
            {"role": "user", "content": "How do I bake bread?"},
            {"role": "assistant", "content": "Mix flour, water, salt and yeast, then bake."},
        ],
        "n": n,
    })
}

async fn suggestions_ask_the_model_and_never_fail(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let (s, c) = req(&app, "GET", "/api/suggestions/config", None).await;
    assert_eq!(
        (s, c),
        (200, json!({"enabled": true, "max_suggestions": 3}))
    );
    let tid = app.create_thread().await;

    // A fenced list with chatter around it; n is capped by max_suggestions.
    app.mock.push(Turn::text(
        "Here you go:\n```json\n[\"Which flour?\", \"How long\\nto knead?\", \"Why salt?\", \"Oven temperature?\"]\n```\nEnjoy [1]!",
    ));
    let (s, r) = suggest(&app, &tid, convo(5)).await;
    assert_eq!(
        (s, r),
        (
            200,
            json!({"suggestions": ["Which flour?", "How long to knead?", "Why salt?"]})
        )
    );
    let asked = app.mock.chat_requests().pop().unwrap();
    let text = serde_json::to_string(&asked.messages()).unwrap();
    assert!(
        text.contains("How do I bake bread?") && text.contains("JSON array of 3"),
        "{text}"
    );
    app.mock.push(Turn::text(r#"["Only one?"]"#));
    let (_, r) = suggest(&app, &tid, convo(1)).await;
    assert_eq!(r, json!({"suggestions": ["Only one?"]}));

    // Whatever the model does wrong is an empty list, never an error.
    for turn in [
        Turn::text("I cannot help with that."),
        Turn::text(r#"{"questions": "a, b"}"#),
        Turn::text(r#"[1, 2, {"q": "x"}, null]"#),
        Turn::text("[\"unterminated"),
        Turn::fault(Fault::Unauthorized),
        Turn::fault(Fault::ServerError),
    ] {
        app.mock.push(turn);
        let (s, r) = suggest(&app, &tid, convo(3)).await;
        assert_eq!((s, r), (200, json!({"suggestions": []})));
    }
    // An unknown model_name and a conversation with nothing in it do not reach a model.
    let before = app.mock.chat_requests().len();
    let mut body = convo(3);
    body["model_name"] = json!("nope");
    assert_eq!(
        suggest(&app, &tid, body).await,
        (200, json!({"suggestions": []}))
    );
    let (s, r) = suggest(&app, &tid, json!({"messages": []})).await;
    assert_eq!((s, r), (200, json!({"suggestions": []})));
    let (s, r) = suggest(
        &app,
        &tid,
        json!({"messages": [{"role": "user", "content": "  "}]}),
    )
    .await;
    assert_eq!((s, r), (200, json!({"suggestions": []})));
    assert_eq!(app.mock.chat_requests().len(), before);

    // Bad requests are 422, as in DeerFlow.
    for body in [
        json!({}),
        json!({"messages": "hi"}),
        json!({"messages": [{"role": "user"}]}),
        json!({"messages": [{"role": "user", "content": ["x"]}]}),
        convo(0),
        convo(6),
    ] {
        let (s, e) = suggest(&app, &tid, body.clone()).await;
        assert_eq!(s, 422, "{body}: {e}");
    }
    let (s, _) = suggest(&app, "not a thread!", convo(3)).await;
    assert_eq!(s, 422);
    app.stop().await;
}

async fn suggestions_follow_the_config(db: Db) {
    let Some(app) = spawn_with(Spawn {
        settings: Some(Box::new(|s| {
            s.app.suggestions.enabled = false;
            s.app.suggestions.max_suggestions = 2;
        })),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let (_, c) = req(&app, "GET", "/api/suggestions/config", None).await;
    assert_eq!(c, json!({"enabled": false, "max_suggestions": 2}));
    let tid = app.create_thread().await;
    let (s, r) = suggest(&app, &tid, convo(3)).await;
    assert_eq!((s, r), (200, json!({"suggestions": []})));
    assert!(app.mock.chat_requests().is_empty());
    app.stop().await;
}

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The host directory of a thread's outputs (created).
fn outputs(app: &TestApp, tid: &str) -> PathBuf {
    let dir = app
        .home
        .join("users/default/threads")
        .join(tid)
        .join("user-data/outputs");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn edit(app: &TestApp, tid: &str, path: &str, content: &str, expected: &str) -> (u16, Value) {
    req(
        app,
        "PUT",
        &format!("/api/threads/{tid}/artifacts/{path}"),
        Some(json!({"content": content, "expected_sha256": expected})),
    )
    .await
}

async fn artifacts_are_edited_in_place(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let dir = outputs(&app, &tid);
    std::fs::create_dir_all(dir.join("notes")).unwrap();
    std::fs::write(dir.join("notes/report.md"), "# Draft\n").unwrap();
    let path = "mnt/user-data/outputs/notes/report.md";
    let (s, r) = edit(&app, &tid, path, "# Final ✓\n", &sha(b"# Draft\n")).await;
    assert_eq!(s, 200, "{r}");
    let new = "# Final ✓\n".as_bytes();
    assert_eq!(
        r,
        json!({
            "path": "/mnt/user-data/outputs/notes/report.md",
            "sha256": sha(new),
            "size": new.len(),
        })
    );
    assert_eq!(std::fs::read(dir.join("notes/report.md")).unwrap(), new);
    // The GET route serves the new content.
    let got = app
        .client
        .get(app.u(&format!("/api/threads/{tid}/artifacts/{path}")))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&got[..], new);
    // The old hash is stale now: 412, and nothing changes.
    let (s, e) = edit(&app, &tid, path, "lost", &sha(b"# Draft\n")).await;
    assert_eq!(s, 412, "{e}");
    assert_eq!(e["detail"], "Artifact changed since it was opened");
    assert_eq!(std::fs::read(dir.join("notes/report.md")).unwrap(), new);
    // A leading slash is accepted too; an empty file can be edited.
    std::fs::write(dir.join("empty.txt"), "").unwrap();
    let (s, _) = edit(
        &app,
        &tid,
        "/mnt/user-data/outputs/empty.txt",
        "now full",
        &sha(b""),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        std::fs::read_to_string(dir.join("empty.txt")).unwrap(),
        "now full"
    );
    // No staging file is left behind.
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .chain(std::fs::read_dir(dir.join("notes")).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["empty.txt", "notes", "report.md"]);

    // A busy thread (a run waiting to start) is not edited: 409.
    let mut claimed = app.hooks().pause(Point::Claimed, 1);
    app.mock.push(Turn::text("done"));
    let (s, run) = app
        .post_json(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "lead_agent", "input": user_input("go")}),
        )
        .await;
    assert_eq!(s, 200, "{run}");
    let rid = claimed.reached().await;
    let current = std::fs::read(dir.join("empty.txt")).unwrap();
    let (s, e) = edit(
        &app,
        &tid,
        "mnt/user-data/outputs/empty.txt",
        "x",
        &sha(&current),
    )
    .await;
    assert_eq!(s, 409, "{e}");
    claimed.resume();
    app.wait_run(&tid, &rid).await;
    let (s, _) = edit(
        &app,
        &tid,
        "mnt/user-data/outputs/empty.txt",
        "x",
        &sha(&current),
    )
    .await;
    assert_eq!(s, 200);
    app.stop().await;
}

async fn artifact_edits_refuse_what_deerflow_refuses(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    // A thread without files has nothing to edit.
    let (s, _) = edit(&app, &tid, "mnt/user-data/outputs/a.md", "x", &sha(b"")).await;
    assert_eq!(s, 404);
    let dir = outputs(&app, &tid);
    let user_data = dir.parent().unwrap().to_path_buf();
    std::fs::write(dir.join("a.md"), "text").unwrap();
    std::fs::write(dir.join("bin.dat"), b"ab\0cd").unwrap();
    std::fs::write(dir.join("latin1.txt"), b"caf\xe9").unwrap();
    std::fs::write(dir.join("big.txt"), vec![b'x'; 2 * 1024 * 1024 + 1]).unwrap();
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(user_data.join("workspace.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(dir.join("a.md"), dir.join("link.md")).unwrap();
    std::os::unix::fs::symlink(&user_data, dir.join("up")).unwrap();
    std::fs::write(dir.join("x.skill"), "PK").unwrap();
    let a = sha(b"text");
    let two_mib_plus = "y".repeat(2 * 1024 * 1024 + 1);
    for (path, content, expected, status) in [
        ("mnt/user-data/uploads/a.md", "x", a.as_str(), 400),
        ("mnt/user-data/workspace/a.md", "x", &a, 400),
        ("mnt/user-data/outputs", "x", &a, 400),
        ("etc/passwd", "x", &a, 400),
        // (A bare `%2E%2E` segment is resolved by the client; encoded slashes are not.)
        ("mnt/user-data/outputs/..%2Fworkspace.txt", "x", &a, 403),
        (
            "mnt/user-data/outputs/sub/..%2F..%2Fworkspace.txt",
            "x",
            &a,
            403,
        ),
        ("mnt/user-data/outputs/..%5Cworkspace.txt", "x", &a, 403),
        ("mnt/user-data/outputs/x.skill", "x", &a, 415),
        ("mnt/user-data/outputs/x.skill/SKILL.md", "x", &a, 415),
        ("mnt/user-data/outputs/link.md", "x", &a, 415),
        ("mnt/user-data/outputs/up/workspace.txt", "x", &a, 415),
        ("mnt/user-data/outputs/bin.dat", "x", &sha(b"ab\0cd"), 415),
        (
            "mnt/user-data/outputs/latin1.txt",
            "x",
            &sha(b"caf\xe9"),
            415,
        ),
        ("mnt/user-data/outputs/a.md", "nul\0byte", &a, 415),
        ("mnt/user-data/outputs/big.txt", "x", &a, 413),
        ("mnt/user-data/outputs/a.md", &two_mib_plus, &a, 413),
        ("mnt/user-data/outputs/missing.md", "x", &a, 404),
        ("mnt/user-data/outputs/nodir/a.md", "x", &a, 404),
        ("mnt/user-data/outputs/sub", "x", &a, 400),
        ("mnt/user-data/outputs/a.md", "x", "ABC", 422),
        ("mnt/user-data/outputs/a.md", "x", &a.to_uppercase(), 422),
    ] {
        let (s, e) = edit(&app, &tid, path, content, expected).await;
        assert_eq!(s, status, "{path}: {e}");
        assert!(e["detail"].is_string(), "{path}: {e}");
    }
    let (s, _) = req(
        &app,
        "PUT",
        &format!("/api/threads/{tid}/artifacts/mnt/user-data/outputs/a.md"),
        Some(json!({"content": "x"})),
    )
    .await;
    assert_eq!(s, 422);
    let (s, _) = edit(&app, "bad.id", "mnt/user-data/outputs/a.md", "x", &a).await;
    assert_eq!(s, 422);
    let (s, _) = edit(
        &app,
        &uuid::Uuid::new_v4().to_string(),
        "mnt/user-data/outputs/a.md",
        "x",
        &a,
    )
    .await;
    assert_eq!(s, 404);
    // Nothing was changed by any of them.
    assert_eq!(std::fs::read_to_string(dir.join("a.md")).unwrap(), "text");
    assert_eq!(
        std::fs::read_to_string(user_data.join("workspace.txt")).unwrap(),
        "secret"
    );
    assert!(
        std::fs::symlink_metadata(dir.join("link.md"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    app.stop().await;
}

/// Under `/api` (and `/api/langgraph`) the assistants search lists the caller's custom
/// agents after the stored assistants, as DeerFlow's does; at `/` it is the LangGraph store
/// alone.
async fn assistants_search_lists_custom_agents_under_api(db: Db) {
    let Some(app) = spawn_agents(db).await else {
        return;
    };
    for name in ["poet", "critic"] {
        let (s, a) = req(
            &app,
            "POST",
            "/api/agents",
            Some(json!({"name": name, "description": format!("The {name}")})),
        )
        .await;
        assert_eq!(s, 201, "{a}");
    }
    let search = |path: &'static str, body: Value| {
        let app = &app;
        async move {
            let r = app
                .client
                .post(app.u(path))
                .json(&body)
                .send()
                .await
                .unwrap();
            let total = r
                .headers()
                .get("x-pagination-total")
                .map(|v| v.to_str().unwrap().to_string());
            let list: Value = r.json().await.unwrap();
            let ids: Vec<String> = list
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["assistant_id"].as_str().unwrap().to_string())
                .collect();
            (ids, total, list)
        }
    };
    let (stored, _, _) = search("/assistants/search", json!({})).await;
    assert!(!stored.is_empty());
    assert!(!stored.iter().any(|i| i == "poet" || i == "critic"));
    for base in ["/api/assistants/search", "/api/langgraph/assistants/search"] {
        let (ids, total, list) = search(base, json!({})).await;
        let mut want = stored.clone();
        want.extend(["critic".to_string(), "poet".to_string()]);
        assert_eq!(ids, want, "{base}");
        assert_eq!(total, Some(want.len().to_string()));
        let poet = list.as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            (
                &poet["graph_id"],
                &poet["name"],
                &poet["metadata"],
                &poet["description"]
            ),
            (
                &json!("lead_agent"),
                &json!("poet"),
                &json!({"created_by": "user"}),
                &json!("The poet")
            )
        );
    }
    // Filters and paging apply to the whole list.
    let (ids, _, _) = search("/api/assistants/search", json!({"name": "PO"})).await;
    assert_eq!(ids, ["poet"]);
    let (ids, _, _) = search(
        "/api/assistants/search",
        json!({"metadata": {"created_by": "user"}}),
    )
    .await;
    assert_eq!(ids, ["critic", "poet"]);
    let (ids, _, _) = search("/api/assistants/search", json!({"graph_id": "other"})).await;
    assert!(ids.is_empty());
    let n = stored.len() as u64;
    let (ids, _, _) = search("/api/assistants/search", json!({"offset": n, "limit": 1})).await;
    assert_eq!(ids, ["critic"]);
    let (ids, _, _) = search(
        "/api/assistants/search",
        json!({"offset": n + 1, "limit": 5, "select": ["assistant_id"]}),
    )
    .await;
    assert_eq!(ids, ["poet"]);
    app.stop().await;
}
