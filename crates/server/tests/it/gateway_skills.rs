//! DeerFlow's skills management: `POST /api/skills/install` of a `.skill` archive from a
//! thread's outputs, custom skill editing with history and rollback, and reading members of
//! `.skill` archives through the artifact route, on both backends. (The archive safety rules
//! are unit tests of `fawn_tools::skills::archive`.)

use crate::auth::{Cred, admin_and_users, call, spawn_auth};
use crate::helpers::*;
use fawn_testkit::Turn;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};

backends!(
    an_installed_skill_is_listed_and_offered_to_the_next_run,
    install_refuses_clashes_and_bad_archives_and_leaves_nothing,
    install_is_for_admins_on_their_own_threads,
    custom_skills_are_edited_with_history_and_rollback,
    custom_skill_history_is_bounded,
    skill_archive_members_are_served_as_artifacts,
);

const SKILL_MD: &str = "---\nname: demo-skill\ndescription: Demonstrates installs.\nlicense: MIT\n---\n# Demo\nDo the demo.\n";

/// A `.skill` archive of `(name, unix mode or 0, content)` members.
fn archive(members: &[(&str, u32, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, mode, content) in members {
        let mut opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        if *mode != 0 {
            opts = opts.external_attributes(mode << 16);
        }
        w.start_file(*name, opts).unwrap();
        w.write_all(content).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn demo_archive() -> Vec<u8> {
    archive(&[
        ("demo-skill/SKILL.md", 0, SKILL_MD.as_bytes()),
        (
            "demo-skill/scripts/run.sh",
            0o100_755,
            b"#!/bin/sh\necho demo\n",
        ),
        ("demo-skill/link", 0o120_777, b"/etc/passwd"),
    ])
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

fn custom_dir(app: &TestApp) -> PathBuf {
    app.home.join("skills/custom")
}

/// Sorted names in `dir` (hidden ones included); empty when it does not exist.
fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn write_public_skill(app: &TestApp, name: &str) {
    let dir = app.home.join("skills/public").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: Built in.\n---\n# {name}\n"),
    )
    .unwrap();
}

/// A request without credentials (authentication is off: the synthetic admin).
async fn req(app: &TestApp, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = call(app, &Cred::Anon, method, path, body).await;
    (r.status, r.body)
}

async fn install(app: &TestApp, tid: &str, path: &str) -> (u16, Value) {
    req(
        app,
        "POST",
        "/api/skills/install",
        Some(json!({"thread_id": tid, "path": path})),
    )
    .await
}

fn skill_entry(list: &Value, name: &str) -> Option<Value> {
    list["skills"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
}

async fn an_installed_skill_is_listed_and_offered_to_the_next_run(db: Db) {
    let Some(app) = spawn_with(Spawn {
        lead_agent: true,
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let tid = app.create_thread().await;
    std::fs::write(outputs(&app, &tid).join("demo.skill"), demo_archive()).unwrap();

    let (s, v) = install(&app, &tid, "/mnt/user-data/outputs/demo.skill").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v,
        json!({"success": true, "skill_name": "demo-skill", "message": "Skill 'demo-skill' installed successfully"})
    );
    // Unwrapped into place, the symlink not materialised, nothing staged left over.
    assert_eq!(names_in(&custom_dir(&app)), ["demo-skill"]);
    let dir = custom_dir(&app).join("demo-skill");
    assert_eq!(names_in(&dir), ["SKILL.md", "scripts"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("SKILL.md")).unwrap(),
        SKILL_MD
    );

    let (s, list) = req(&app, "GET", "/api/skills", None).await;
    assert_eq!(s, 200);
    assert_eq!(
        skill_entry(&list, "demo-skill"),
        Some(json!({
            "name": "demo-skill", "description": "Demonstrates installs.", "license": "MIT",
            "category": "custom", "enabled": true, "editable": true,
        }))
    );
    let (_, custom) = req(&app, "GET", "/api/skills/custom", None).await;
    assert_eq!(custom["skills"].as_array().unwrap().len(), 1);

    // The next run is offered the skill, mounted read-only where the prompt says.
    app.mock.push(Turn::text("ok"));
    let (s, v) = app
        .post_json(
            &format!("/api/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("hello")}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let req0 = app.mock.chat_requests()[0].clone();
    let system = req0
        .messages()
        .iter()
        .find(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        system.contains("<name>demo-skill</name>")
            && system.contains("/mnt/skills/custom/demo-skill/SKILL.md"),
        "{system}"
    );
    let sandbox = {
        use fawn_sandbox::SandboxProvider;
        let p = &app.handle.state.services.sandbox;
        let id = p.acquire(&tid).await.unwrap();
        p.get(&id).unwrap()
    };
    let read = sandbox
        .read_bytes("/mnt/skills/custom/demo-skill/SKILL.md", 1 << 20)
        .await
        .unwrap();
    assert_eq!(read, SKILL_MD.as_bytes());
    app.stop().await;
}

async fn install_refuses_clashes_and_bad_archives_and_leaves_nothing(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    write_public_skill(&app, "built-in");
    let tid = app.create_thread().await;
    let out = outputs(&app, &tid);
    std::fs::write(out.join("demo.skill"), demo_archive()).unwrap();
    let (s, v) = install(&app, &tid, "mnt/user-data/outputs/demo.skill").await;
    assert_eq!(s, 200, "{v}");
    let before = std::fs::read_to_string(custom_dir(&app).join("demo-skill/SKILL.md")).unwrap();

    // The same name again: 409, the installed skill untouched.
    let other = SKILL_MD.replace("Demonstrates installs.", "Another one.");
    std::fs::write(
        out.join("again.skill"),
        archive(&[("SKILL.md", 0, other.as_bytes())]),
    )
    .unwrap();
    let (s, v) = install(&app, &tid, "/mnt/user-data/outputs/again.skill").await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["detail"], "Skill 'demo-skill' already exists");
    assert_eq!(
        std::fs::read_to_string(custom_dir(&app).join("demo-skill/SKILL.md")).unwrap(),
        before
    );
    // A public skill's name: 409 too.
    std::fs::write(
        out.join("builtin.skill"),
        archive(&[(
            "SKILL.md",
            0,
            b"---\nname: built-in\ndescription: Mine.\n---\n",
        )]),
    )
    .unwrap();
    let (s, v) = install(&app, &tid, "/mnt/user-data/outputs/builtin.skill").await;
    assert_eq!(s, 409, "{v}");

    // Bad archives: 400 saying why.
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "slip.skill",
            archive(&[
                ("x/SKILL.md", 0, SKILL_MD.as_bytes()),
                ("x/../../evil", 0, b"x"),
            ]),
            "unsafe member path",
        ),
        (
            "abs.skill",
            archive(&[("/etc/evil", 0, b"x")]),
            "unsafe member path",
        ),
        (
            "fifo.skill",
            archive(&[
                ("x/SKILL.md", 0, SKILL_MD.as_bytes()),
                ("x/pipe", 0o010_644, b""),
            ]),
            "not a regular file or directory",
        ),
        (
            "elf.skill",
            archive(&[
                ("x/SKILL.md", 0, SKILL_MD.as_bytes()),
                ("x/tool", 0o100_755, b"\x7fELF\x02\x01\x01\0\0\0"),
            ]),
            "executable binary member",
        ),
        (
            "nofm.skill",
            archive(&[("x/SKILL.md", 0, b"# no front matter")]),
            "Invalid skill: No YAML frontmatter",
        ),
        (
            "key.skill",
            archive(&[(
                "x/SKILL.md",
                0,
                b"---\nname: fresh\ndescription: d\nhomepage: x\n---\n",
            )]),
            "Unexpected key(s) in SKILL.md frontmatter: homepage",
        ),
        (
            "empty.skill",
            archive(&[("__MACOSX/._x", 0, b"")]),
            "Skill archive is empty",
        ),
        (
            "text.skill",
            b"not a zip".to_vec(),
            "not a valid ZIP archive",
        ),
    ];
    for (file, bytes, want) in &cases {
        std::fs::write(out.join(file), bytes).unwrap();
        let (s, v) = install(&app, &tid, &format!("/mnt/user-data/outputs/{file}")).await;
        assert_eq!(s, 400, "{file}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains(want), "{file}: {detail}");
    }
    // Nothing was left behind by any of them.
    assert_eq!(names_in(&custom_dir(&app)), ["demo-skill"]);

    // Paths.
    std::fs::write(out.join("notes.zip"), demo_archive()).unwrap();
    let (s, v) = install(&app, &tid, "/mnt/user-data/outputs/notes.zip").await;
    assert_eq!(
        (s, v["detail"].as_str()),
        (400, Some("File must have .skill extension"))
    );
    let (s, _) = install(&app, &tid, "/mnt/user-data/outputs/missing.skill").await;
    assert_eq!(s, 404);
    let (s, _) = install(&app, &tid, "/mnt/user-data/outputs").await;
    assert_eq!(s, 400);
    let (s, _) = install(&app, &tid, "/mnt/user-data/../../etc/x.skill").await;
    assert_eq!(s, 403);
    let (s, _) = install(&app, &tid, "/mnt/skills/public/x.skill").await;
    assert_eq!(s, 400);
    let (s, _) = install(&app, "not a thread!", "/mnt/user-data/outputs/demo.skill").await;
    assert_eq!(s, 422);
    let fresh = app.create_thread().await;
    let (s, _) = install(&app, &fresh, "/mnt/user-data/outputs/demo.skill").await;
    assert_eq!(s, 404);
    let (s, _) = req(
        &app,
        "POST",
        "/api/skills/install",
        Some(json!({"path": "x"})),
    )
    .await;
    assert_eq!(s, 422);
    app.stop().await;
}

async fn install_is_for_admins_on_their_own_threads(db: Db) {
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    let (admin, alice, bob) = admin_and_users(&app).await;
    let thread_of = |who: &Cred| {
        let who = who.clone();
        let app = &app;
        async move {
            let t = call(app, &who, "POST", "/threads", Some(json!({}))).await;
            let tid = t.body["thread_id"].as_str().unwrap().to_string();
            std::fs::write(outputs(app, &tid).join("demo.skill"), demo_archive()).unwrap();
            tid
        }
    };
    let alices = thread_of(&alice).await;
    let body =
        |tid: &str| Some(json!({"thread_id": tid, "path": "/mnt/user-data/outputs/demo.skill"}));
    // A plain user may not install, even from their own thread.
    let r = call(&app, &alice, "POST", "/api/skills/install", body(&alices)).await;
    assert_eq!(r.status, 403, "{}", r.body);
    // An admin may not reach into another user's thread: it does not exist for them.
    let r = call(&app, &admin, "POST", "/api/skills/install", body(&alices)).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(names_in(&custom_dir(&app)), Vec::<String>::new());
    let admins = thread_of(&admin).await;
    let r = call(&app, &admin, "POST", "/api/skills/install", body(&admins)).await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Everyone sees custom skills; only an admin reads or changes them.
    for who in [&alice, &bob] {
        let r = call(&app, who, "GET", "/api/skills/custom", None).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body["skills"][0]["name"], "demo-skill");
        let r = call(&app, who, "GET", "/api/skills", None).await;
        assert!(skill_entry(&r.body, "demo-skill").is_some());
        for (m, path, body) in [
            ("GET", "/api/skills/custom/demo-skill", None),
            (
                "PUT",
                "/api/skills/custom/demo-skill",
                Some(json!({"content": SKILL_MD})),
            ),
            ("DELETE", "/api/skills/custom/demo-skill", None),
            ("GET", "/api/skills/custom/demo-skill/history", None),
            (
                "POST",
                "/api/skills/custom/demo-skill/rollback",
                Some(json!({})),
            ),
        ] {
            let r = call(&app, who, m, path, body).await;
            assert_eq!(r.status, 403, "{m} {path}: {}", r.body);
        }
    }
    let r = call(&app, &admin, "GET", "/api/skills/custom/demo-skill", None).await;
    assert_eq!(
        (r.status, r.body["content"].as_str()),
        (200, Some(SKILL_MD))
    );
    let r = call(&app, &Cred::Anon, "GET", "/api/skills/custom", None).await;
    assert_eq!(r.status, 401);
    app.stop().await;
}

fn skill_md(description: &str) -> String {
    format!("---\nname: my-skill\ndescription: {description}\n---\n# My skill\n")
}

async fn put_content(app: &TestApp, name: &str, content: &str) -> (u16, Value) {
    req(
        app,
        "PUT",
        &format!("/api/skills/custom/{name}"),
        Some(json!({"content": content})),
    )
    .await
}

async fn rollback(app: &TestApp, body: Value) -> (u16, Value) {
    req(
        app,
        "POST",
        "/api/skills/custom/my-skill/rollback",
        Some(body),
    )
    .await
}

async fn custom_skills_are_edited_with_history_and_rollback(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    write_public_skill(&app, "built-in");
    let dir = custom_dir(&app).join("my-skill");
    std::fs::create_dir_all(&dir).unwrap();
    let (v1, v2, v3) = (skill_md("First."), skill_md("Second."), skill_md("Third."));
    std::fs::write(dir.join("SKILL.md"), &v1).unwrap();
    let on_disk = || std::fs::read_to_string(dir.join("SKILL.md")).unwrap();

    let (s, l) = req(&app, "GET", "/api/skills/custom", None).await;
    assert_eq!(s, 200);
    assert_eq!(
        l,
        json!({"skills": [{"name": "my-skill", "description": "First.", "license": null, "category": "custom", "enabled": true, "editable": true}]})
    );
    let (s, g) = req(&app, "GET", "/api/skills/custom/my-skill", None).await;
    assert_eq!(s, 200);
    assert_eq!(
        g,
        json!({"name": "my-skill", "description": "First.", "license": null, "category": "custom", "enabled": true, "editable": true, "content": v1})
    );
    let (s, h) = req(&app, "GET", "/api/skills/custom/my-skill/history", None).await;
    assert_eq!((s, h), (200, json!({"history": []})));

    // Two edits: each answers the new content and shows in the catalog at once.
    let (s, p) = put_content(&app, "my-skill", &v2).await;
    assert_eq!(s, 200, "{p}");
    assert_eq!(
        (p["description"].as_str(), p["content"].as_str()),
        (Some("Second."), Some(v2.as_str()))
    );
    assert_eq!(on_disk(), v2);
    let (_, one) = req(&app, "GET", "/api/skills/my-skill", None).await;
    assert_eq!(one["description"], "Second.");
    let (s, _) = put_content(&app, "my-skill", &v3).await;
    assert_eq!(s, 200);
    let (_, h) = req(&app, "GET", "/api/skills/custom/my-skill/history", None).await;
    let h = h["history"].as_array().unwrap().clone();
    assert_eq!(h.len(), 2);
    for (rec, (prev, new)) in h.iter().zip([(&v1, &v2), (&v2, &v3)]) {
        assert_eq!(rec["action"], "human_edit");
        assert_eq!(rec["author"], "human");
        assert_eq!(rec["thread_id"], Value::Null);
        assert_eq!(rec["file_path"], "SKILL.md");
        assert_eq!(rec["prev_content"], json!(prev));
        assert_eq!(rec["new_content"], json!(new));
        assert!(rec["ts"].as_str().unwrap().starts_with("20"), "{rec}");
    }
    // The history is kept outside the skill's directory (never mounted into sandboxes).
    assert_eq!(names_in(&dir), ["SKILL.md"]);

    // Rollback: by default the latest record's previous content.
    let (s, r) = rollback(&app, json!({})).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["content"], json!(v2));
    assert_eq!(on_disk(), v2);
    let (_, h2) = req(&app, "GET", "/api/skills/custom/my-skill/history", None).await;
    let last = h2["history"][2].clone();
    assert_eq!(last["action"], "rollback");
    assert_eq!(last["prev_content"], json!(v3));
    assert_eq!(last["new_content"], json!(v2));
    assert_eq!(last["rollback_from_ts"], h[1]["ts"]);
    let (s, r) = rollback(&app, json!({"history_index": 0})).await;
    assert_eq!((s, &r["content"]), (200, &json!(v1)));
    assert_eq!(on_disk(), v1);
    for bad in [json!({"history_index": 99}), json!({"history_index": -99})] {
        let (s, e) = rollback(&app, bad).await;
        assert_eq!(
            (s, e["detail"].as_str()),
            (400, Some("history_index is out of range"))
        );
    }
    let (s, _) = rollback(&app, json!({"history_index": "last"})).await;
    assert_eq!(s, 422);

    // Bad content: 400, the file unchanged.
    let bad_cases = [
        (
            "---\nname: my-skill\ndescription: d\nfoo: 1\n---\n",
            "Unexpected key(s)",
        ),
        (
            "---\nname: other\ndescription: d\n---\n",
            "must match requested skill name",
        ),
        ("no front matter", "No YAML frontmatter"),
        (
            "---\nname: my-skill\ndescription: a <b>\n---\n",
            "angle brackets",
        ),
    ];
    for (content, want) in bad_cases {
        let (s, e) = put_content(&app, "my-skill", content).await;
        assert_eq!(s, 400, "{content}: {e}");
        assert!(e["detail"].as_str().unwrap().contains(want), "{e}");
    }
    assert_eq!(on_disk(), v1);
    let big = format!("{}{}", skill_md("Big."), "x".repeat(1024 * 1024));
    let (s, _) = put_content(&app, "my-skill", &big).await;
    assert_eq!(s, 400);
    // Other names.
    let (s, e) = put_content(
        &app,
        "built-in",
        &skill_md("x").replace("my-skill", "built-in"),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert!(
        e["detail"].as_str().unwrap().contains("built-in skill"),
        "{e}"
    );
    let (s, e) = put_content(&app, "nope", &skill_md("x").replace("my-skill", "nope")).await;
    assert_eq!(
        (s, e["detail"].as_str()),
        (404, Some("Custom skill 'nope' not found"))
    );
    let (s, _) = put_content(&app, "Bad_Name", "x").await;
    assert_eq!(s, 400);
    for path in [
        "/api/skills/custom/nope",
        "/api/skills/custom/built-in",
        "/api/skills/custom/Bad_Name",
        "/api/skills/custom/nope/history",
    ] {
        assert_eq!(req(&app, "GET", path, None).await.0, 404, "{path}");
    }
    assert_eq!(
        req(&app, "DELETE", "/api/skills/custom/built-in", None)
            .await
            .0,
        400
    );
    assert_eq!(
        req(&app, "DELETE", "/api/skills/custom/nope", None).await.0,
        404
    );
    assert_eq!(
        req(
            &app,
            "POST",
            "/api/skills/custom/nope/rollback",
            Some(json!({}))
        )
        .await
        .0,
        404
    );

    // Delete: gone from disk and the catalog; the history stays and a rollback restores it.
    let (s, d) = req(&app, "DELETE", "/api/skills/custom/my-skill", None).await;
    assert_eq!((s, d), (200, json!({"success": true})));
    assert!(!dir.exists());
    assert_eq!(
        req(&app, "GET", "/api/skills/custom/my-skill", None)
            .await
            .0,
        404
    );
    let (_, l) = req(&app, "GET", "/api/skills", None).await;
    assert_eq!(skill_entry(&l, "my-skill"), None);
    let (s, h) = req(&app, "GET", "/api/skills/custom/my-skill/history", None).await;
    assert_eq!(s, 200);
    let last = h["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["action"], "human_delete");
    assert_eq!(last["prev_content"], json!(v1));
    assert_eq!(last["new_content"], Value::Null);
    let (s, r) = rollback(&app, json!({})).await;
    assert_eq!((s, &r["content"]), (200, &json!(v1)), "{r}");
    assert_eq!(on_disk(), v1);
    let (_, l) = req(&app, "GET", "/api/skills", None).await;
    assert_eq!(skill_entry(&l, "my-skill").unwrap()["category"], "custom");
    // A record without previous content cannot be rolled back to: the restore after the
    // delete had no file to replace, so its record's `prev_content` is null.
    let (_, h) = req(&app, "GET", "/api/skills/custom/my-skill/history", None).await;
    let last = h["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["action"].as_str(), &last["prev_content"]),
        (Some("rollback"), &Value::Null)
    );
    let (s, e) = rollback(&app, json!({})).await;
    assert_eq!(s, 400, "{e}");
    assert!(
        e["detail"]
            .as_str()
            .unwrap()
            .contains("no previous content"),
        "{e}"
    );
    app.stop().await;
}

async fn custom_skill_history_is_bounded(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let dir = custom_dir(&app).join("my-skill");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), skill_md("v0")).unwrap();
    for i in 1..=55 {
        let (s, e) = put_content(&app, "my-skill", &skill_md(&format!("v{i}"))).await;
        assert_eq!(s, 200, "{e}");
    }
    let (_, h) = req(&app, "GET", "/api/skills/custom/my-skill/history", None).await;
    let h = h["history"].as_array().unwrap();
    assert_eq!(h.len(), 50);
    // The oldest were dropped: the first kept record is the 6th edit (v5 → v6).
    assert_eq!(h[0]["prev_content"], json!(skill_md("v5")));
    assert_eq!(h[49]["new_content"], json!(skill_md("v55")));
    app.stop().await;
}

async fn get_raw(app: &TestApp, path: &str, range: Option<&str>) -> reqwest::Response {
    let mut r = app.client.get(app.u(path));
    if let Some(range) = range {
        r = r.header("range", range);
    }
    r.send().await.unwrap()
}

async fn skill_archive_members_are_served_as_artifacts(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let tid = app.create_thread().await;
    let out = outputs(&app, &tid);
    std::fs::write(out.join("demo.skill"), demo_archive()).unwrap();
    let base = format!("/api/threads/{tid}/artifacts/mnt/user-data/outputs");

    // Relative to the single top-level directory, or with it.
    for member in ["SKILL.md", "demo-skill/SKILL.md"] {
        let r = get_raw(&app, &format!("{base}/demo.skill/{member}"), None).await;
        assert_eq!(r.status(), 200, "{member}");
        assert_eq!(r.headers()["cache-control"], "private, max-age=300");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/markdown"),
            "{:?}",
            r.headers()
        );
        assert!(
            r.headers()["content-disposition"]
                .to_str()
                .unwrap()
                .starts_with("inline; filename*=UTF-8''SKILL.md")
        );
        assert_eq!(r.text().await.unwrap(), SKILL_MD);
    }
    let r = get_raw(
        &app,
        &format!("{base}/demo.skill/scripts/run.sh"),
        Some("bytes=0-8"),
    )
    .await;
    assert_eq!(r.status(), 206);
    assert_eq!(r.text().await.unwrap(), "#!/bin/sh");
    let r = get_raw(
        &app,
        &format!("{base}/demo.skill/SKILL.md?download=true"),
        None,
    )
    .await;
    assert!(
        r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment")
    );
    // The archive itself is an ordinary artifact.
    let r = get_raw(&app, &format!("{base}/demo.skill"), None).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["cache-control"], "no-cache");

    // Symlinks are never served; missing members, archives and non-archives are 404s.
    for (path, status) in [
        ("demo.skill/link", 404),
        ("demo.skill/nope.md", 404),
        ("missing.skill/SKILL.md", 404),
        ("demo.skill/a%2F..%2Fb", 403),
        ("demo.skill/a%3Ab", 400),
    ] {
        let r = get_raw(&app, &format!("{base}/{path}"), None).await;
        assert_eq!(r.status(), status, "{path}");
    }
    std::fs::write(out.join("text.skill"), "not a zip").unwrap();
    let r = get_raw(&app, &format!("{base}/text.skill/SKILL.md"), None).await;
    assert_eq!(r.status(), 404);
    // A member too large to preview: 413.
    let big = vec![b'a'; 16 * 1024 * 1024 + 1];
    std::fs::write(
        out.join("big.skill"),
        archive(&[
            ("x/SKILL.md", 0, SKILL_MD.as_bytes()),
            ("x/big.txt", 0, &big),
        ]),
    )
    .unwrap();
    let r = get_raw(&app, &format!("{base}/big.skill/big.txt"), None).await;
    assert_eq!(r.status(), 413);
    // A directory named like an archive is an ordinary path.
    std::fs::create_dir_all(out.join("folder.skill")).unwrap();
    std::fs::write(out.join("folder.skill/notes.txt"), "plain").unwrap();
    let r = get_raw(&app, &format!("{base}/folder.skill/notes.txt"), None).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "plain");

    // Editing a member stays refused.
    let (s, _) = req(
        &app,
        "PUT",
        &format!("{base}/demo.skill/SKILL.md"),
        Some(json!({"content": "x", "expected_sha256": "0".repeat(64)})),
    )
    .await;
    assert_eq!(s, 415);
    app.stop().await;
}
