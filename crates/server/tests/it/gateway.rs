//! DeerFlow's gateway API under `/api/` over real HTTP, and the runtime pieces wired into the
//! lead agent (memory, MCP, the skills cache, custom agents).

use crate::helpers::*;
use fawn_config::Settings;
use fawn_llm::ModelRegistry;
use fawn_runtime::testing::MiniAgent;
use fawn_server::{AppOptions, Application, Graphs};
use fawn_testkit::{Behavior, MockConfig, MockLlm, Rules, Turn};
use serde_json::{Value, json};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Configure = Box<dyn FnOnce(&mut Settings, &Path) + Send>;

struct Gw {
    lead_agent: bool,
    mock: Option<MockLlm>,
    db: Option<Arc<TestDb>>,
    configure: Option<Configure>,
}

impl Gw {
    fn new() -> Gw {
        Gw {
            lead_agent: false,
            mock: None,
            db: None,
            configure: None,
        }
    }

    fn lead(mut self, mock: MockLlm) -> Gw {
        self.lead_agent = true;
        self.mock = Some(mock);
        self
    }

    fn configure(mut self, f: impl FnOnce(&mut Settings, &Path) + Send + 'static) -> Gw {
        self.configure = Some(Box::new(f));
        self
    }

    fn on(mut self, db: Arc<TestDb>) -> Gw {
        self.db = Some(db);
        self
    }

    /// A server on SQLite whose settings live under the test database's temporary dir
    /// (`root`): data dir `root/home`, skills `root/home/skills`, and (unless `configure`
    /// changes it) a config path `root/config.yaml` so that the extensions file the gateway
    /// writes is `root/extensions_config.json`.
    async fn spawn(self) -> TestApp {
        let db = match self.db {
            Some(d) => d,
            None => Arc::new(TestDb::new(Db::Sqlite).expect("sqlite")),
        };
        let mock = match self.mock {
            Some(m) => Arc::new(m),
            None => Arc::new(MockLlm::start_with(MockConfig::default()).await.unwrap()),
        };
        let root = db.dir.path().to_path_buf();
        let home = root.join("home");
        let mut settings = Settings::with_home(&home);
        settings.config_path = Some(root.join("config.yaml"));
        settings.app.models = vec![mock_model_config(&mock)];
        let mut options = AppOptions {
            port: 0,
            backend: Some(db.config.clone()),
            heartbeat: Duration::from_millis(300),
            keepalive: Duration::from_millis(200),
            test_hooks: true,
            ..AppOptions::default()
        };
        options.queue.poll_interval = Duration::from_millis(100);
        if let Some(f) = self.configure {
            f(&mut settings, &root);
        }
        if !self.lead_agent {
            let models = ModelRegistry::from_config(&settings.app).unwrap();
            options.graphs =
                Some(Graphs::new().with(Arc::new(MiniAgent::new("lead_agent", models.clone()))));
            options.models = Some(models);
        }
        let app = Application::build(settings, options).await.expect("build");
        let port = app.port();
        let handle = app.handle();
        let server = tokio::spawn(app.run_until_stopped());
        TestApp {
            url: format!("http://127.0.0.1:{port}"),
            port,
            client: fawn_net::client(),
            handle,
            server: Some(server),
            mock,
            db,
            home,
        }
    }
}

fn thread_dir(app: &TestApp, tid: &str) -> PathBuf {
    app.home.join("users/default/threads").join(tid)
}

fn uploads_dir(app: &TestApp, tid: &str) -> PathBuf {
    thread_dir(app, tid).join("user-data/uploads")
}

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

/// A multipart body with one `files` part per `(filename, bytes)`.
fn multipart(parts: &[(&str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "fawn-test-boundary-7d0c1e";
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

async fn upload(app: &TestApp, tid: &str, parts: &[(&str, &[u8])]) -> (u16, Value) {
    let (ct, body) = multipart(parts);
    let r = app
        .client
        .post(app.u(&format!("/api/threads/{tid}/uploads")))
        .header("content-type", ct)
        .body(body)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn put_json(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    let r = app
        .client
        .put(app.u(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        s,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Sends a request line as given (no URL normalisation) and returns the status.
async fn raw_get(port: u16, path: &str) -> u16 {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Runs `input` on a new thread through `/api/threads/{id}/runs/wait` and returns
/// `(thread_id, final values)`.
async fn run(app: &TestApp, text: &str, context: Value) -> (String, Value) {
    let tid = app.create_thread().await;
    let (s, v) = app
        .post_json(
            &format!("/api/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input(text), "context": context}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    (tid, v)
}

fn system_prompt(req: &fawn_testkit::RecordedRequest) -> String {
    req.messages()
        .iter()
        .find(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn offered_tools(req: &fawn_testkit::RecordedRequest) -> Vec<String> {
    req.json()["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn available_skills(prompt: &str) -> String {
    let start = prompt.find("<available_skills>").unwrap_or(0);
    let end = prompt.find("</available_skills>").unwrap_or(prompt.len());
    prompt[start..end].to_string()
}

fn write_skill(skills: &Path, name: &str, description: &str) {
    let dir = skills.join("public").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\nSteps.\n"),
    )
    .unwrap();
}

// ------------------------------------------------------------------------------ config

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_features_and_auth() {
    let app = Gw::new().spawn().await;
    let (s, v) = app.get_json("/api/models").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["token_usage"], json!({"enabled": true}));
    let m = &v["models"][0];
    assert_eq!(m["name"], "mock");
    assert_eq!(m["model"], "mock-model");
    assert_eq!(m["display_name"], "mock");
    assert_eq!(m["supports_thinking"], false);
    assert_eq!(m["supports_reasoning_effort"], false);
    let (s, one) = app.get_json("/api/models/mock").await;
    assert_eq!((s, &one["name"]), (200, &json!("mock")));
    let (s, e) = app.get_json("/api/models/nope").await;
    assert_eq!(s, 404);
    assert_eq!(e["detail"], "Model 'nope' not found");

    let (s, f) = app.get_json("/api/features").await;
    assert_eq!(s, 200);
    assert_eq!(f["agents_api"]["enabled"], false);
    let (s, me) = app.get_json("/api/v1/auth/me").await;
    assert_eq!(s, 200);
    assert_eq!(me["id"], "default");
    assert_eq!(me["system_role"], "admin");
    assert_eq!(me["needs_setup"], false);
    assert_eq!(me["email"], "default@test.local");
    let (_, st) = app.get_json("/api/v1/auth/setup-status").await;
    assert_eq!(
        st,
        json!({"needs_setup": false, "registration_enabled": true})
    );
    let (_, sc) = app.get_json("/api/suggestions/config").await;
    assert_eq!(sc["enabled"], true);
    // IM channels are not implemented: the reads the UI makes on every page say so, the
    // writes answer 501 (never a 404 the UI retries).
    let (s, ch) = app.get_json("/api/channels/providers").await;
    assert_eq!((s, ch), (200, json!({"enabled": false, "providers": []})));
    let (s, ch) = app.get_json("/api/channels/connections").await;
    assert_eq!((s, ch), (200, json!({"enabled": false, "connections": []})));
    let (s, e) = app
        .post_json("/api/channels/slack/connect", json!({}))
        .await;
    assert_eq!(s, 501, "{e}");
    assert_eq!(e["detail"], "IM channels are not supported by Fawn");
    // Nor is the Lark integration: Settings reads its status, which says so (never connected).
    let (s, lark) = app.get_json("/api/integrations/lark/status").await;
    assert_eq!(s, 200, "{lark}");
    assert_eq!(
        (
            &lark["installed"],
            &lark["app_configured"],
            &lark["cli"]["available"],
            &lark["auth"]["status"],
            &lark["sandbox_runtime_ready"],
        ),
        (
            &json!(false),
            &json!(false),
            &json!(false),
            &json!("unavailable"),
            &json!(false),
        ),
        "{lark}"
    );
    assert_eq!(lark["installed_skills"], json!([]));

    // Gateway routes live under /api only; the LangGraph routes still answer there.
    assert_eq!(app.get_json("/api/langgraph/models").await.0, 404);
    assert_eq!(app.get_json("/models").await.0, 404);
    let tid = app.create_thread().await;
    assert_eq!(app.get_json(&format!("/api/threads/{tid}")).await.0, 200);
    let (s, sug) = app
        .post_json(
            &format!("/api/threads/{tid}/suggestions"),
            json!({"messages": [{"role": "user", "content": "hi"}], "n": 3}),
        )
        .await;
    assert_eq!((s, sug), (200, json!({"suggestions": []})));
    // Wrong method → 405 with the error envelope.
    let r = app
        .client
        .delete(app.u("/api/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(
        r.json::<Value>().await.unwrap()["detail"],
        "Method Not Allowed"
    );
    app.stop().await;
}

// ----------------------------------------------------------------------------- uploads

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_follow_deerflow_rules() {
    let app = Gw::new()
        .configure(|s, _| {
            s.app.uploads.max_files = 4;
            s.app.uploads.max_file_size = 1000;
            s.app.uploads.max_total_size = 2500;
        })
        .spawn()
        .await;
    let tid = "upload-thread_1";
    let dir = uploads_dir(&app, tid);

    let (s, l) = app
        .get_json(&format!("/api/threads/{tid}/uploads/limits"))
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        l,
        json!({"max_files": 4, "max_file_size": 1000, "max_total_size": 2500})
    );

    // Names reduced to their basename; duplicates renamed.
    let (s, v) = upload(
        &app,
        tid,
        &[
            ("../../etc/passwd", b"p"),
            ("report.pdf", b"one"),
            ("report.pdf", b"two"),
            ("report.pdf", b"three"),
        ],
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["success"], true);
    assert_eq!(v["skipped_files"], json!([]));
    let files = v["files"].as_array().unwrap();
    let names: Vec<&str> = files
        .iter()
        .map(|f| f["filename"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["passwd", "report.pdf", "report_1.pdf", "report_2.pdf"]
    );
    assert!(files[0].get("original_filename").is_none());
    assert_eq!(files[2]["original_filename"], "report.pdf");
    assert_eq!(
        files[2]["virtual_path"],
        "/mnt/user-data/uploads/report_1.pdf"
    );
    assert_eq!(
        files[2]["artifact_url"],
        format!("/api/threads/{tid}/artifacts/mnt/user-data/uploads/report_1.pdf")
    );
    assert_eq!(files[3]["size"], 5);
    assert_eq!(
        names_in(&dir),
        ["passwd", "report.pdf", "report_1.pdf", "report_2.pdf"]
    );
    assert_eq!(std::fs::read(dir.join("report_1.pdf")).unwrap(), b"two");
    assert!(!app.home.join("etc").exists());
    // Written through the sandbox: owned like the thread's workspace (the agent's bash can
    // edit them).
    let owner = std::fs::metadata(thread_dir(&app, tid).join("user-data/workspace"))
        .unwrap()
        .uid();
    assert_eq!(std::fs::metadata(dir.join("passwd")).unwrap().uid(), owner);

    // Unsafe names are dropped and reported in skipped_files as sent.
    let long = "x".repeat(256);
    let (s, v) = upload(
        &app,
        tid,
        &[(".", b"a"), ("..", b"b"), ("a\\b.txt", b"c"), (&long, b"d")],
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["success"], false);
    assert_eq!(v["files"], json!([]));
    assert_eq!(v["skipped_files"], json!([".", "..", "a\\b.txt", long]));
    assert_eq!(names_in(&dir).len(), 4);

    // Limits: nothing of a rejected request stays on disk (staged files included).
    let before = names_in(&dir);
    let (s, e) = upload(
        &app,
        tid,
        &[
            ("a", b"1"),
            ("b", b"2"),
            ("c", b"3"),
            ("d", b"4"),
            ("e", b"5"),
        ],
    )
    .await;
    assert_eq!(s, 413, "{e}");
    assert_eq!(e["detail"], "Too many files: maximum is 4");
    let big = vec![b'x'; 1001];
    let (s, e) = upload(&app, tid, &[("fine.txt", b"ok"), ("big.bin", &big)]).await;
    assert_eq!(s, 413, "{e}");
    assert_eq!(e["detail"], "File too large: big.bin");
    let k = vec![b'k'; 900];
    let (s, e) = upload(&app, tid, &[("k1", &k), ("k2", &k), ("k3", &k)]).await;
    assert_eq!(s, 413, "{e}");
    assert_eq!(e["detail"], "Total upload size too large");
    assert_eq!(names_in(&dir), before);

    // A destination that is a symlink is not followed nor replaced.
    std::os::unix::fs::symlink("/etc/hostname", dir.join("link.txt")).unwrap();
    let (s, v) = upload(&app, tid, &[("link.txt", b"evil"), ("ok.txt", b"fine")]).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["success"], false);
    assert_eq!(v["skipped_files"], json!(["link.txt"]));
    assert_eq!(v["files"][0]["filename"], "ok.txt");
    assert!(
        std::fs::symlink_metadata(dir.join("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    std::fs::remove_file(dir.join("link.txt")).unwrap();

    // List: regular files only, staging files hidden.
    std::fs::write(dir.join(".upload-stale.part"), b"x").unwrap();
    let (s, v) = app
        .get_json(&format!("/api/threads/{tid}/uploads/list"))
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["count"], 5);
    let listed: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["filename"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        [
            "ok.txt",
            "passwd",
            "report.pdf",
            "report_1.pdf",
            "report_2.pdf"
        ]
    );
    assert_eq!(v["files"][2]["extension"], ".pdf");
    assert!(v["files"][2]["modified"].as_f64().unwrap() > 0.0);

    // Delete: the sibling Markdown goes too; traversal → 400; missing → 404.
    std::fs::write(dir.join("report.md"), b"# converted").unwrap();
    let r = app
        .client
        .delete(app.u(&format!("/api/threads/{tid}/uploads/report.pdf")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"success": true, "message": "Deleted report.pdf"})
    );
    assert!(!dir.join("report.pdf").exists() && !dir.join("report.md").exists());
    assert!(dir.join("report_1.pdf").exists());
    assert_eq!(
        app.delete(&format!("/api/threads/{tid}/uploads/report.pdf"))
            .await,
        404
    );
    assert_eq!(
        app.delete(&format!("/api/threads/{tid}/uploads/..%2Fsecret"))
            .await,
        400
    );
    assert_eq!(
        app.delete(&format!("/api/threads/{tid}/uploads/a%5Cb"))
            .await,
        400
    );

    // Bad input.
    let (s, _) = upload(&app, "a.b", &[("x", b"1")]).await;
    assert_eq!(s, 422);
    let (s, e) = upload(&app, tid, &[]).await;
    assert_eq!((s, e["detail"].as_str()), (400, Some("No files provided")));
    let r = app
        .client
        .post(app.u(&format!("/api/threads/{tid}/uploads")))
        .header("content-type", "multipart/form-data; boundary=zz")
        .body("garbage")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = app
        .client
        .post(app.u(&format!("/api/threads/{tid}/uploads")))
        .json(&json!({"files": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.json::<Value>().await.unwrap()["detail"].is_string());

    // `DELETE /api/threads/{id}` is the LangGraph route: 204, and the thread's files go too.
    let uuid_thread = app.create_thread().await;
    let (s, _) = upload(&app, &uuid_thread, &[("notes.txt", b"n")]).await;
    assert_eq!(s, 200);
    assert!(uploads_dir(&app, &uuid_thread).join("notes.txt").exists());
    assert_eq!(
        app.delete(&format!("/api/threads/{uuid_thread}")).await,
        204
    );
    assert!(!thread_dir(&app, &uuid_thread).exists());
    assert_eq!(
        app.delete(&format!("/api/threads/{uuid_thread}")).await,
        404
    );
    app.stop().await;
}

// --------------------------------------------------------------------------- artifacts

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_follow_deerflow_rules() {
    let app = Gw::new().spawn().await;
    let tid = app.create_thread().await;
    let outputs = thread_dir(&app, &tid).join("user-data/outputs");
    std::fs::create_dir_all(outputs.join("sub")).unwrap();
    std::fs::write(outputs.join("a.html"), b"<h1>hi</h1>").unwrap();
    std::fs::write(outputs.join("a.svg"), b"<svg/>").unwrap();
    std::fs::write(outputs.join("a.txt"), b"0123456789abcdef").unwrap();
    std::fs::write(outputs.join("notes"), b"plain words").unwrap();
    std::fs::write(outputs.join("rapport été.md"), b"# ok").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", outputs.join("escape.txt")).unwrap();
    let base = format!("/api/threads/{tid}/artifacts");
    let get = |p: String| {
        let c = app.client.clone();
        let url = app.u(&p);
        async move { c.get(url).send().await.unwrap() }
    };

    let r = get(format!("{base}/mnt/user-data/outputs/a.html")).await;
    assert_eq!(r.status(), 200);
    let cd = r.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(cd.starts_with("attachment;"), "{cd}");
    let r = get(format!("{base}/mnt/user-data/outputs/a.svg")).await;
    assert!(
        r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment;")
    );

    let r = get(format!("{base}/mnt/user-data/outputs/a.txt")).await;
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert!(
        r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("inline;")
    );
    assert_eq!(r.headers()["accept-ranges"], "bytes");
    assert_eq!(r.text().await.unwrap(), "0123456789abcdef");
    let r = get(format!("{base}/mnt/user-data/outputs/a.txt?download=true")).await;
    assert!(
        r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment;")
    );
    let r = get(format!("{base}/mnt/user-data/outputs/notes")).await;
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let r = get(format!(
        "{base}/mnt/user-data/outputs/rapport%20%C3%A9t%C3%A9.md"
    ))
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-disposition"],
        "inline; filename*=UTF-8''rapport%20%C3%A9t%C3%A9.md"
    );

    // Ranges.
    let r = app
        .client
        .get(app.u(&format!("{base}/mnt/user-data/outputs/a.txt")))
        .header("range", "bytes=0-9")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(r.headers()["content-range"], "bytes 0-9/16");
    assert_eq!(r.text().await.unwrap(), "0123456789");
    let r = app
        .client
        .get(app.u(&format!("{base}/mnt/user-data/outputs/a.txt")))
        .header("range", "bytes=100-")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 416);
    assert_eq!(r.headers()["content-range"], "bytes */16");

    // Traversal → 403, wrong prefix → 400, missing → 404, directory → 400.
    let r = get(format!("{base}/mnt/user-data/..%2F..%2F..%2Fetc%2Fpasswd")).await;
    assert_eq!(r.status(), 403);
    assert!(r.json::<Value>().await.unwrap()["detail"].is_string());
    assert_eq!(
        raw_get(app.port, &format!("{base}/mnt/user-data/../../etc/passwd")).await,
        403
    );
    assert_eq!(get(format!("{base}/etc/passwd")).await.status(), 400);
    assert_eq!(
        get(format!("{base}/mnt/user-data/outputs/missing.txt"))
            .await
            .status(),
        404
    );
    assert_eq!(
        get(format!("{base}/mnt/user-data/outputs/sub"))
            .await
            .status(),
        400
    );
    // A symlink leading out of the thread is not followed.
    let r = get(format!("{base}/mnt/user-data/outputs/escape.txt")).await;
    assert!(r.status().is_client_error(), "{}", r.status());
    // A thread without files, and a bad thread id.
    let other = app.create_thread().await;
    assert_eq!(
        get(format!(
            "/api/threads/{other}/artifacts/mnt/user-data/outputs/a.txt"
        ))
        .await
        .status(),
        404
    );
    assert!(!thread_dir(&app, &other).exists());
    assert_eq!(
        get("/api/threads/bad.id/artifacts/mnt/user-data/outputs/a.txt".into())
            .await
            .status(),
        422
    );
    app.stop().await;
}

// ------------------------------------------------------------------------------ skills

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_toggle_persists_and_the_cache_follows_the_directory() {
    let mock = MockLlm::start_with(MockConfig::default()).await.unwrap();
    let app = Gw::new()
        .lead(mock)
        .configure(|s, root| {
            write_skill(&s.skills_dir, "alpha", "First skill");
            write_skill(&s.skills_dir, "beta", "Second skill");
            let ext = root.join("extensions_config.json");
            std::fs::write(
                &ext,
                r#"{"mcpServers": {}, "skills": {"beta": {"enabled": true}}, "custom": {"kept": 1}}"#,
            )
            .unwrap();
            s.extensions_path = Some(ext);
        })
        .spawn()
        .await;
    let root = app.db.dir.path().to_path_buf();
    let skills_dir = app.home.join("skills");

    let (s, v) = app.get_json("/api/skills").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["skills"],
        json!([
            {"name": "alpha", "description": "First skill", "license": null, "category": "public", "enabled": true, "editable": false},
            {"name": "beta", "description": "Second skill", "license": null, "category": "public", "enabled": true, "editable": false},
        ])
    );
    let (s, one) = app.get_json("/api/skills/alpha").await;
    assert_eq!((s, &one["name"]), (200, &json!("alpha")));
    assert_eq!(app.get_json("/api/skills/nope").await.0, 404);

    // The first run's prompt lists both.
    run(&app, "hello", json!({})).await;
    let prompt = system_prompt(&app.mock.chat_requests().last().unwrap().clone());
    let listed = available_skills(&prompt);
    assert!(
        listed.contains("alpha") && listed.contains("beta"),
        "{prompt}"
    );

    // Disable alpha: persisted atomically in the extensions file (other keys kept), shown
    // by the API, hidden from the next run and blocked in the sandbox.
    let (s, v) = put_json(&app, "/api/skills/alpha", json!({"enabled": false})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["enabled"], false);
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("extensions_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(file["skills"]["alpha"], json!({"enabled": false}));
    assert_eq!(file["skills"]["beta"], json!({"enabled": true}));
    assert_eq!(file["custom"], json!({"kept": 1}));
    assert_eq!(app.get_json("/api/skills/alpha").await.1["enabled"], false);
    let sandbox = {
        use fawn_sandbox::SandboxProvider;
        let p = &app.handle.state.services.sandbox;
        let id = p.acquire("skills-probe").await.unwrap();
        p.get(&id).unwrap()
    };
    let e = sandbox
        .read_bytes("/mnt/skills/public/alpha/SKILL.md", 1 << 20)
        .await
        .unwrap_err();
    assert!(
        matches!(e, fawn_sandbox::SandboxError::SkillDisabled(_)),
        "{e:?}"
    );
    assert!(
        sandbox
            .read_bytes("/mnt/skills/public/beta/SKILL.md", 1 << 20)
            .await
            .is_ok()
    );
    let (s, _) = put_json(&app, "/api/skills/nope", json!({"enabled": false})).await;
    assert_eq!(s, 404);
    let (s, e) = put_json(&app, "/api/skills/alpha", json!({"enabled": "maybe"})).await;
    assert_eq!(s, 422, "{e}");

    // A skill added on disk and an edited description are picked up without a restart.
    write_skill(&skills_dir, "gamma", "Third skill");
    write_skill(&skills_dir, "beta", "Second skill, revised");
    let (_, v) = app.get_json("/api/skills").await;
    let names: Vec<&str> = v["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    assert_eq!(v["skills"][1]["description"], "Second skill, revised");
    run(&app, "again", json!({})).await;
    let prompt = system_prompt(&app.mock.chat_requests().last().unwrap().clone());
    let listed = available_skills(&prompt);
    assert!(
        listed.contains("gamma") && listed.contains("beta"),
        "{prompt}"
    );
    assert!(!listed.contains("alpha"), "{listed}");

    // An edit to the toggles made by hand is seen too; reload answers DeerFlow's shape.
    std::fs::write(
        root.join("extensions_config.json"),
        r#"{"skills": {"alpha": {"enabled": true}, "gamma": {"enabled": false}}}"#,
    )
    .unwrap();
    let (s, v) = app.post_json("/api/skills/reload", json!({})).await;
    assert_eq!(s, 200);
    assert_eq!(v["success"], true);
    assert_eq!(v["scope"], "process");
    let (_, v) = app.get_json("/api/skills/gamma").await;
    assert_eq!(v["enabled"], false);
    assert_eq!(app.get_json("/api/skills/alpha").await.1["enabled"], true);
    app.stop().await;
}

// --------------------------------------------------------------------------------- MCP

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_config_masks_secrets_and_validates_writes() {
    let app = Gw::new()
        .configure(|s, root| {
            let ext = root.join("extensions_config.json");
            std::fs::write(
                &ext,
                r#"{
                  "mcpServers": {
                    "gh": {"enabled": false, "type": "stdio", "command": "npx",
                           "args": ["-y", "@modelcontextprotocol/server-github"],
                           "env": {"GITHUB_TOKEN": "$GITHUB_TOKEN_FOR_FAWN_TESTS"}},
                    "remote": {"enabled": false, "transport": "http", "url": "http://127.0.0.1:9/mcp",
                               "headers": {"X-Api-Key": "key-123"},
                               "oauth": {"enabled": true, "token_url": "http://127.0.0.1:9/token",
                                         "grant_type": "client_credentials", "client_id": "id",
                                         "client_secret": "shh"},
                               "apiKey": "extra-secret", "routing": {"mode": "prefer"}},
                    "local": {"enabled": false, "command": "python3", "args": ["server.py"]}
                  },
                  "skills": {"x": {"enabled": false}}
                }"#,
            )
            .unwrap();
            s.extensions_path = Some(ext);
        })
        .spawn()
        .await;
    let file = app.db.dir.path().join("extensions_config.json");
    let read_file =
        || -> Value { serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap() };

    let (s, v) = app.get_json("/api/mcp/config").await;
    assert_eq!(s, 200, "{v}");
    let gh = &v["mcp_servers"]["gh"];
    assert_eq!(gh["env"], json!({"GITHUB_TOKEN": "***"}));
    assert_eq!(gh["command"], "npx");
    let remote = &v["mcp_servers"]["remote"];
    assert_eq!(remote["type"], "http");
    assert_eq!(remote["headers"], json!({"X-Api-Key": "***"}));
    assert_eq!(remote["oauth"]["client_secret"], "***");
    assert_eq!(remote["oauth"]["client_id"], "id");
    assert_eq!(remote["apiKey"], "***");
    assert!(!v.to_string().contains("key-123") && !v.to_string().contains("shh"));

    // Round trip of the masked config with one change: secrets merged back, the rest of the
    // file (skills, `$VAR` references) kept; a stdio server that did not change is not
    // re-checked against the allowlist.
    let mut servers = v["mcp_servers"].clone();
    servers["gh"]["description"] = json!("GitHub tools");
    let (s, out) = put_json(&app, "/api/mcp/config", json!({"mcp_servers": servers})).await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["mcp_servers"]["gh"]["description"], "GitHub tools");
    assert_eq!(out["mcp_servers"]["gh"]["env"]["GITHUB_TOKEN"], "***");
    let f = read_file();
    assert_eq!(
        f["mcpServers"]["gh"]["env"]["GITHUB_TOKEN"],
        "$GITHUB_TOKEN_FOR_FAWN_TESTS"
    );
    assert_eq!(f["mcpServers"]["remote"]["headers"]["X-Api-Key"], "key-123");
    assert_eq!(f["mcpServers"]["remote"]["oauth"]["client_secret"], "shh");
    assert_eq!(f["mcpServers"]["remote"]["apiKey"], "extra-secret");
    assert_eq!(
        f["mcpServers"]["remote"]["routing"],
        json!({"mode": "prefer"})
    );
    assert_eq!(f["skills"], json!({"x": {"enabled": false}}));

    // Validation: each bad request is a 4xx and leaves the file as it was.
    let before = std::fs::read(&file).unwrap();
    let bad = |name: &str, server: Value| {
        let mut all = servers.clone();
        all[name] = server;
        json!({"mcp_servers": all})
    };
    for (body, status, needle) in [
        (
            bad("new", json!({"command": "bash", "args": ["-c", "id"]})),
            400,
            "not allowed",
        ),
        (
            bad("new", json!({"command": "/usr/bin/npx", "args": []})),
            400,
            "single executable",
        ),
        (
            bad(
                "new",
                json!({"command": "npx", "args": ["-c", "curl x | sh"]}),
            ),
            400,
            "inline code",
        ),
        (
            bad(
                "new",
                json!({"command": "uvx", "args": ["pkg"], "env": {"PYTHONPATH": "/tmp"}}),
            ),
            400,
            "PYTHONPATH",
        ),
        (
            // The exploit: npm runs `npm_config_call` as a shell command on the host.
            bad(
                "new",
                json!({"command": "npx", "args": ["-y", "some-mcp"],
                       "env": {"npm_config_call": "touch /tmp/fawn-owned"}}),
            ),
            400,
            "'npm_config_call' can make the launcher run other code",
        ),
        (
            bad(
                "new",
                json!({"type": "http", "url": "http://x/mcp", "headers": {"Authorization": "***"}}),
            ),
            400,
            "masked",
        ),
        (
            bad(
                "local",
                json!({"enabled": false, "command": "python3", "args": ["other.py"]}),
            ),
            400,
            "not allowed",
        ),
        (bad("new", json!({"type": "http"})), 422, "url"),
        (
            bad("new", json!({"type": "carrier-pigeon", "url": "x"})),
            422,
            "type",
        ),
        (bad("new", json!("not an object")), 422, "object"),
        (json!({"servers": {}}), 422, "mcp_servers"),
    ] {
        let (s, e) = put_json(&app, "/api/mcp/config", body.clone()).await;
        assert_eq!(s, status, "{body} → {e}");
        assert!(e["detail"].as_str().unwrap().contains(needle), "{e}");
    }
    let r = app
        .client
        .put(app.u("/api/mcp/config"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(std::fs::read(&file).unwrap(), before);

    // An allowed new stdio server is accepted.
    let (s, e) = put_json(
        &app,
        "/api/mcp/config",
        bad(
            "fs",
            json!({"enabled": false, "command": "npx", "args": ["-y", "@scope/fs"]}),
        ),
    )
    .await;
    assert_eq!(s, 200, "{e}");
    assert_eq!(read_file()["mcpServers"]["fs"]["command"], "npx");

    // PATCH toggles one server.
    let (s, v) = app
        .patch_json(
            "/api/mcp/config",
            json!({"server_name": "remote", "enabled": false}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = app
        .patch_json(
            "/api/mcp/config",
            json!({"server_name": "fs", "enabled": true}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["mcp_servers"]["fs"]["enabled"], true);
    assert_eq!(read_file()["mcpServers"]["fs"]["enabled"], true);
    let (s, _) = app
        .patch_json(
            "/api/mcp/config",
            json!({"server_name": "ghost", "enabled": true}),
        )
        .await;
    assert_eq!(s, 404);

    let (s, v) = app.post_json("/api/mcp/cache/reset", json!({})).await;
    assert_eq!(s, 200);
    assert_eq!(v["success"], true);
    app.stop().await;
}

mod mcp_server {
    use rmcp::handler::server::router::tool::ToolRouter;
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::model::{ServerCapabilities, ServerConfig};
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    use rmcp::{ServerHandler, schemars, tool, tool_handler, tool_router};
    use tokio_util::sync::CancellationToken;

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    pub struct EchoArgs {
        /// Text to send back.
        text: String,
    }

    #[derive(Clone)]
    pub struct EchoServer {
        tool_router: ToolRouter<Self>,
    }

    #[tool_router]
    impl EchoServer {
        #[tool(description = "Echo the text back.")]
        fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
            format!("echo: {text}")
        }
    }

    #[tool_handler(router = self.tool_router)]
    impl ServerHandler for EchoServer {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }
    }

    /// An MCP server (streamable HTTP) on 127.0.0.1; returns its URL and its stop token.
    pub async fn start() -> (String, CancellationToken) {
        let stop = CancellationToken::new();
        let config = StreamableHttpServerConfig::default()
            .with_sse_keep_alive(None)
            .with_cancellation_token(stop.child_token());
        let service: StreamableHttpService<EchoServer, LocalSessionManager> =
            StreamableHttpService::new(
                || {
                    Ok(EchoServer {
                        tool_router: EchoServer::tool_router(),
                    })
                },
                Default::default(),
                config,
            );
        let router = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move { token.cancelled_owned().await })
                .await;
        });
        (format!("http://{addr}/mcp"), stop)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_configured_through_the_api_reach_the_next_run() {
    let (url, stop) = mcp_server::start().await;
    let mock = MockLlm::start_with(
        MockConfig::default().with_behavior(Behavior::Rules(
            Rules::new()
                .call_tool("t_echo", json!({"text": "hi"}))
                .after_tool("The server answered."),
        )),
    )
    .await
    .unwrap();
    // No extensions file yet: the settings carry no MCP server.
    let app = Gw::new().lead(mock).spawn().await;
    let (_, v) = run(&app, "use the tool", json!({})).await;
    assert!(
        !offered_tools(&app.mock.chat_requests()[0])
            .iter()
            .any(|t| t == "t_echo"),
        "{v}"
    );

    let (s, v) = put_json(
        &app,
        "/api/mcp/config",
        json!({"mcp_servers": {"t": {"type": "http", "url": url, "session_init_timeout": 10}}}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert!(app.db.dir.path().join("extensions_config.json").exists());
    let (_, values) = run(&app, "use the tool", json!({})).await;
    let msgs = values["messages"].as_array().unwrap();
    let tool = msgs
        .iter()
        .find(|m| m["type"] == "tool")
        .unwrap_or_else(|| panic!("no tool message: {values}"));
    assert_eq!(tool["name"], "t_echo");
    assert_eq!(tool["content"], "echo: hi");
    assert_eq!(msgs.last().unwrap()["content"], "The server answered.");

    // Disabled through the API: gone from the next run.
    let (s, _) = app
        .patch_json(
            "/api/mcp/config",
            json!({"server_name": "t", "enabled": false}),
        )
        .await;
    assert_eq!(s, 200);
    app.mock.clear_requests();
    run(&app, "use the tool", json!({})).await;
    assert!(
        !offered_tools(&app.mock.chat_requests()[0])
            .iter()
            .any(|t| t == "t_echo")
    );
    app.stop().await;
    stop.cancel();
}

// ------------------------------------------------------------------------------ memory

const MEMORY_UPDATE: &str = r#"{"newFacts": [{"content": "Prefers uv over pip", "category": "preference", "confidence": 0.95}],
 "user": {"workContext": {"summary": "Packages Python tools", "shouldUpdate": true}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_is_flushed_at_shutdown_and_injected_into_new_threads() {
    let mock = MockLlm::start_with(MockConfig::default()).await.unwrap();
    mock.push(Turn::text("Noted: uv it is."));
    mock.push(Turn::text(MEMORY_UPDATE));
    let app = Gw::new()
        .lead(mock)
        .configure(|s, _| {
            // Long debounce: only the shutdown flush can process the conversation.
            s.app.memory.debounce_seconds = 3600;
            s.app.memory.shutdown_flush_timeout_seconds = 10;
        })
        .spawn()
        .await;
    let (tid, _) = run(&app, "I always use uv, never pip.", json!({})).await;
    let (_, status) = app.get_json("/api/memory/status").await;
    assert_eq!(status["queue"]["pending"], 1, "{status}");
    assert_eq!(app.get_json("/api/memory").await.1["facts"], json!([]));

    // Token usage and the message pages of the finished thread.
    let (s, u) = app
        .get_json(&format!("/api/threads/{tid}/token-usage"))
        .await;
    assert_eq!(s, 200, "{u}");
    assert_eq!(u["total_runs"], 1);
    let total = u["total_tokens"].as_i64().unwrap();
    assert!(total > 0, "{u}");
    assert_eq!(
        total,
        u["total_input_tokens"].as_i64().unwrap() + u["total_output_tokens"].as_i64().unwrap()
    );
    assert_eq!(u["by_caller"]["lead_agent"], total);
    let (s, p) = app
        .get_json(&format!("/api/threads/{tid}/messages/page"))
        .await;
    assert_eq!(s, 200, "{p}");
    let data = p["data"].as_array().unwrap();
    let seqs: Vec<u64> = data.iter().map(|d| d["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=data.len() as u64).collect::<Vec<_>>());
    assert_eq!(p["has_more"], false);
    assert_eq!(data.last().unwrap()["content"]["type"], "ai");
    assert_eq!(
        data.last().unwrap()["content"]["content"],
        "Noted: uv it is."
    );
    let n = data.len();
    let (_, p1) = app
        .get_json(&format!("/api/threads/{tid}/messages/page?limit=1"))
        .await;
    assert_eq!(p1["data"][0]["seq"], n);
    assert_eq!(p1["has_more"], n > 1);
    let (_, p2) = app
        .get_json(&format!(
            "/api/threads/{tid}/messages/page?limit=1&before_seq={n}"
        ))
        .await;
    assert_eq!(p2["data"][0]["seq"], n - 1);
    assert_eq!(
        app.get_json(&format!("/api/threads/{tid}/messages/page?limit=0"))
            .await
            .0,
        422
    );
    let ghost = uuid::Uuid::new_v4();
    assert_eq!(
        app.get_json(&format!("/api/threads/{ghost}/messages/page"))
            .await
            .0,
        404
    );
    assert_eq!(
        app.get_json(&format!("/api/threads/{ghost}/token-usage"))
            .await
            .0,
        404
    );

    // Graceful stop flushes the queue into the store.
    let db = app.db.clone();
    let home = app.home.clone();
    let mock = app.mock.clone();
    app.stop().await;
    let stored: Value = serde_json::from_str(
        &std::fs::read_to_string(home.join("users/default/memory.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(stored["facts"][0]["content"], "Prefers uv over pip");
    assert_eq!(stored["facts"][0]["source"], tid.as_str());
    assert_eq!(
        stored["user"]["workContext"]["summary"],
        "Packages Python tools"
    );
    let memory_call = mock.chat_requests().last().unwrap().clone();
    assert!(
        memory_call.body_text.contains("I always use uv"),
        "{}",
        memory_call.body_text
    );

    // A new process on the same data injects it into a new thread's first turn.
    let mock2 = MockLlm::start_with(MockConfig::default()).await.unwrap();
    let app = Gw::new().lead(mock2).on(db).spawn().await;
    let (s, m) = app.get_json("/api/memory").await;
    assert_eq!(s, 200);
    assert_eq!(m["facts"][0]["content"], "Prefers uv over pip");
    run(&app, "which tool do I use?", json!({})).await;
    let req = app.mock.chat_requests()[0].clone();
    assert!(req.body_text.contains("<memory>"), "{}", req.body_text);
    assert!(req.body_text.contains("Prefers uv over pip"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_api_edits_facts() {
    let app = Gw::new()
        .configure(|s, _| s.app.memory.debounce_seconds = 3600)
        .spawn()
        .await;
    let (s, v) = app
        .post_json("/api/memory/facts", json!({"content": "Likes Rust"}))
        .await;
    assert_eq!(s, 200, "{v}");
    let fact = v["facts"][0].clone();
    assert_eq!(fact["category"], "context");
    assert_eq!(fact["confidence"], 0.5);
    let id = fact["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("fact_"));
    let rev = v["revision"].as_u64().unwrap();
    let (s, v) = app
        .patch_json(
            &format!("/api/memory/facts/{id}"),
            json!({"content": "Loves Rust", "category": "preference", "confidence": 0.9}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["facts"][0]["content"], "Loves Rust");
    assert_eq!(v["facts"][0]["category"], "preference");
    assert!(v["revision"].as_u64().unwrap() > rev);
    for (body, status) in [
        (json!({"content": "  "}), 422),
        (json!({"content": "x", "category": "gossip"}), 422),
        (json!({"content": "x", "confidence": 3.0}), 422),
        (json!({"confidence": "high"}), 422),
    ] {
        assert_eq!(
            app.post_json("/api/memory/facts", body.clone()).await.0,
            status,
            "{body}"
        );
    }
    assert_eq!(
        app.patch_json("/api/memory/facts/fact_ghost", json!({"content": "x"}))
            .await
            .0,
        404
    );
    let (s, exported) = app.get_json("/api/memory/export").await;
    assert_eq!(s, 200);
    let (s, reloaded) = app.post_json("/api/memory/reload", json!({})).await;
    assert_eq!((s, &reloaded["facts"][0]["id"]), (200, &json!(id)));
    assert_eq!(app.delete(&format!("/api/memory/facts/{id}")).await, 200);
    assert_eq!(app.delete(&format!("/api/memory/facts/{id}")).await, 404);
    assert_eq!(app.get_json("/api/memory").await.1["facts"], json!([]));
    // Import restores the export; a bad document is refused whole.
    let (s, v) = app.post_json("/api/memory/import", exported.clone()).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["facts"][0]["content"], "Loves Rust");
    let mut bad = exported.clone();
    bad["facts"][0]["confidence"] = json!(7);
    assert_eq!(app.post_json("/api/memory/import", bad).await.0, 422);
    assert_eq!(
        app.get_json("/api/memory").await.1["facts"][0]["content"],
        "Loves Rust"
    );
    let r = app
        .client
        .delete(app.u("/api/memory"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(app.get_json("/api/memory").await.1["facts"], json!([]));
    let (s, c) = app.get_json("/api/memory/config").await;
    assert_eq!(s, 200);
    assert_eq!(c["enabled"], true);
    assert_eq!(c["mode"], "middleware");
    assert_eq!(c["debounce_seconds"], 3600);
    app.stop().await;
}

// ------------------------------------------------------------------------ custom agents

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_agent_creates_an_agent_that_later_runs_use() {
    let soul = "You are Quill, a terse poet who answers in haiku.";
    let mock = MockLlm::start_with(
        MockConfig::default().with_behavior(Behavior::Rules(
            Rules::new()
                .call_tool(
                    "setup_agent",
                    json!({"soul": soul, "description": "Writes haiku"}),
                )
                .after_tool("Your agent is ready."),
        )),
    )
    .await
    .unwrap();
    let app = Gw::new()
        .lead(mock)
        .configure(|s, _| write_skill(&s.skills_dir, "bootstrap", "Create a custom agent"))
        .spawn()
        .await;

    // The bootstrap run: only setup_agent (no update_agent) and only the bootstrap skill.
    let (tid, values) = run(
        &app,
        "make me a poet",
        json!({"is_bootstrap": true, "agent_name": "Quill"}),
    )
    .await;
    let first = app.mock.chat_requests()[0].clone();
    let tools = offered_tools(&first);
    assert!(tools.iter().any(|t| t == "setup_agent"), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "update_agent"), "{tools:?}");
    let msgs = values["messages"].as_array().unwrap();
    let tool = msgs.iter().find(|m| m["type"] == "tool").unwrap();
    assert_eq!(tool["content"], "Agent 'quill' created successfully!");
    assert_eq!(values["created_agent_name"], "quill", "{values}");
    let dir = app.home.join("users/default/agents/quill");
    assert_eq!(std::fs::read_to_string(dir.join("SOUL.md")).unwrap(), soul);
    let cfg = std::fs::read_to_string(dir.join("config.yaml")).unwrap();
    assert!(
        cfg.contains("name: quill") && cfg.contains("Writes haiku"),
        "{cfg}"
    );
    let (_, state) = app.get_json(&format!("/api/threads/{tid}/state")).await;
    assert_eq!(state["values"]["created_agent_name"], "quill");

    // A later run with the agent's name (any case) uses its soul and may update it.
    app.mock.clear_requests();
    run(&app, "a poem about rain", json!({"agent_name": "Quill"})).await;
    let req = app.mock.chat_requests()[0].clone();
    assert!(
        system_prompt(&req).contains(soul),
        "{}",
        system_prompt(&req)
    );
    let tools = offered_tools(&req);
    assert!(tools.iter().any(|t| t == "update_agent"), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "setup_agent"), "{tools:?}");
    // Without a name, neither tool.
    app.mock.clear_requests();
    run(&app, "hello", json!({})).await;
    let tools = offered_tools(&app.mock.chat_requests()[0]);
    assert!(
        !tools
            .iter()
            .any(|t| t == "update_agent" || t == "setup_agent"),
        "{tools:?}"
    );
    app.stop().await;
}
