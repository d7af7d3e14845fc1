//! The sandbox tools as the agent calls them: arguments as JSON, a `ToolContext` with a real
//! local provider (real directories, real bubblewrap), the ToolMessage text checked.

use fawn_config::Settings;
use fawn_sandbox::{
    LocalSandboxOptions, LocalSandboxProvider, SandboxProvider, SkillMount, SkillsView,
};
use fawn_state::{NullSink, ThreadState};
use fawn_tools::sandbox_tools::{
    BashTool, GlobTool, GrepTool, LsTool, ReadFileTool, StrReplaceTool, WriteFileTool,
    sandbox_tool, sandbox_tools,
};
use fawn_tools::{SandboxSlot, Tool, ToolContext, ToolError, ToolOutput, ToolStatus};
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

struct Env {
    dir: tempfile::TempDir,
    settings: Settings,
    provider: Arc<LocalSandboxProvider>,
}

impl Env {
    fn new(f: impl FnOnce(&mut Settings, &mut LocalSandboxOptions)) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::with_home(dir.path().join("home"));
        settings.skills_dir = dir.path().join("skills");
        let mut opts = LocalSandboxOptions::default();
        f(&mut settings, &mut opts);
        let provider = Arc::new(LocalSandboxProvider::with_options(&settings, opts).unwrap());
        Env {
            dir,
            settings,
            provider,
        }
    }

    fn ctx(&self, thread: &str) -> ToolContext {
        ToolContext {
            thread_id: thread.into(),
            run_id: "run-1".into(),
            tool_call_id: "call-1".into(),
            state: Arc::new(ThreadState::default()),
            settings: Arc::new(self.settings.clone()),
            sandbox: Arc::new(SandboxSlot::new(self.provider.clone(), thread, None)),
            events: Arc::new(NullSink),
            cancel: CancellationToken::new(),
            subagents: None,
            model_name: "test".into(),
            context: Map::new(),
        }
    }

    async fn host(&self, thread: &str) -> fawn_sandbox::ThreadPaths {
        let id = self.provider.acquire(thread).await.unwrap();
        self.provider.get(&id).unwrap().paths().clone()
    }

    fn skills(&self) -> PathBuf {
        self.dir.path().join("skills")
    }
}

fn env() -> Env {
    Env::new(|_, _| {})
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn text(o: &ToolOutput) -> String {
    o.content.text()
}

/// Calls a tool that must produce a ToolMessage; returns (text, is_error).
async fn call(tool: &dyn Tool, ctx: &ToolContext, a: Value) -> (String, bool) {
    let out = tool.call(args(a), ctx).await.unwrap();
    (text(&out), out.status == ToolStatus::Error)
}

fn by(e: &Env, name: &str) -> Arc<dyn Tool> {
    sandbox_tool(name, &e.settings, &Map::new()).unwrap()
}

async fn bash(e: &Env, ctx: &ToolContext, cmd: &str) -> String {
    call(
        &*by(e, "bash"),
        ctx,
        json!({"description": "t", "command": cmd}),
    )
    .await
    .0
}

async fn write(e: &Env, ctx: &ToolContext, path: &str, content: &str) {
    let (t, err) = call(
        &*by(e, "write_file"),
        ctx,
        json!({"description": "t", "path": path, "content": content}),
    )
    .await;
    assert_eq!((t.as_str(), err), ("OK", false));
}

// ---------------------------------------------------------------- arguments and schemas

#[tokio::test]
async fn schemas_lead_with_description() {
    let e = env();
    for t in sandbox_tools(&e.settings) {
        let p = t.parameters();
        assert_eq!(p["type"], "object");
        let keys: Vec<&String> = p["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys[0], "description", "{}", t.name());
    }
    let g = GlobTool::new(None).parameters();
    assert_eq!(g["properties"]["max_results"]["type"], "integer");
    assert_eq!(g["properties"]["max_results"]["default"], 200);
    let g = GrepTool::new(None).parameters();
    assert_eq!(g["properties"]["max_results"]["default"], 100);
    let r = ReadFileTool::new().parameters();
    let req: Vec<&str> = r["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(req.contains(&"path") && !req.contains(&"start_line"));
}

#[tokio::test]
async fn bad_arguments_are_clear_errors() {
    let e = env();
    let ctx = e.ctx("t1");
    let cases: Vec<(Arc<dyn Tool>, Value, &str)> = vec![
        (
            Arc::new(ReadFileTool::new()),
            json!({"description": "d"}),
            "missing field `path`",
        ),
        (
            Arc::new(ReadFileTool::new()),
            json!({"description": "d", "path": 3}),
            "path: invalid type",
        ),
        (
            Arc::new(ReadFileTool::new()),
            json!({"path": "/mnt/user-data/workspace/x", "start_line": "abc"}),
            "start_line: expected an integer",
        ),
        (
            Arc::new(WriteFileTool::new(&e.settings)),
            json!({"description": "d", "path": "/mnt/user-data/workspace/x"}),
            "missing field `content`",
        ),
        (
            Arc::new(WriteFileTool::new(&e.settings)),
            json!({"path": "/mnt/user-data/workspace/x", "content": ["a"]}),
            "content: invalid type",
        ),
        (
            Arc::new(StrReplaceTool::new()),
            json!({"path": "/x", "old_str": "a"}),
            "missing field `new_str`",
        ),
        (
            Arc::new(BashTool::new(&e.settings)),
            json!({"description": "d", "command": {"a": 1}}),
            "command: invalid type",
        ),
        (
            Arc::new(GlobTool::new(None)),
            json!({"pattern": "*", "path": "/x", "include_dirs": "maybe"}),
            "include_dirs: expected a boolean",
        ),
        (
            Arc::new(GrepTool::new(None)),
            json!({"path": "/x"}),
            "missing field `pattern`",
        ),
        (Arc::new(LsTool::new()), json!({}), "missing field `path`"),
    ];
    for (tool, a, want) in cases {
        match tool.call(args(a.clone()), &ctx).await {
            Err(ToolError::InvalidArguments(m)) => {
                assert!(
                    m.starts_with(&format!("Invalid arguments for tool '{}'", tool.name())),
                    "{m}"
                );
                assert!(m.contains(want), "{a}: {m}");
            }
            other => panic!("{a}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn lenient_arguments_are_accepted() {
    let e = env();
    let ctx = e.ctx("t1");
    write(&e, &ctx, "/mnt/user-data/workspace/f.txt", "1\n2\n3\n").await;
    // no description, numbers as strings/floats, booleans as strings
    let (t, _) = call(
        &ReadFileTool::new(),
        &ctx,
        json!({"path": "/mnt/user-data/workspace/f.txt", "start_line": "2", "end_line": 2.0}),
    )
    .await;
    assert_eq!(t, "2");
    let (t, _) = call(
        &WriteFileTool::new(&e.settings),
        &ctx,
        json!({"path": "/mnt/user-data/workspace/f.txt", "content": "4\n", "append": "true"}),
    )
    .await;
    assert_eq!(t, "OK");
    let (t, _) = call(
        &ReadFileTool::new(),
        &ctx,
        json!({"path": "/mnt/user-data/workspace/f.txt", "start_line": null}),
    )
    .await;
    assert_eq!(t, "1\n2\n3\n4\n");
}

// ---------------------------------------------------------------- §11.1 item 24: read_file

#[tokio::test]
async fn read_file_texts() {
    let e = env();
    let ctx = e.ctx("t1");
    let rf = ReadFileTool::new();
    write(
        &e,
        &ctx,
        "/mnt/user-data/workspace/f.txt",
        "a\nb\nc\nd\ne\n",
    )
    .await;
    write(&e, &ctx, "/mnt/user-data/workspace/empty.txt", "").await;
    let p = "/mnt/user-data/workspace/f.txt";
    let r = |a: Value| call(&rf, &ctx, a);
    assert_eq!(
        r(json!({"description": "d", "path": p, "start_line": 0}))
            .await
            .0,
        "(start_line must be >= 1)"
    );
    assert_eq!(
        r(json!({"description": "d", "path": p, "end_line": 0}))
            .await
            .0,
        "(end_line must be >= 1)"
    );
    assert_eq!(
        r(json!({"description": "d", "path": p, "start_line": 5, "end_line": 2}))
            .await
            .0,
        "(start_line > end_line — no lines in range)"
    );
    assert_eq!(
        r(json!({"description": "d", "path": "/mnt/user-data/workspace/empty.txt"}))
            .await
            .0,
        "(empty)"
    );
    assert_eq!(
        r(json!({"description": "d", "path": p, "start_line": 9}))
            .await
            .0,
        "(start_line exceeds file length)"
    );
    assert_eq!(
        r(json!({"description": "d", "path": p, "start_line": 2, "end_line": 3}))
            .await
            .0,
        "b\nc"
    );
    assert_eq!(
        r(json!({"description": "d", "path": p, "start_line": 4}))
            .await
            .0,
        "d\ne"
    );
    assert_eq!(
        r(json!({"description": "d", "path": p})).await.0,
        "a\nb\nc\nd\ne\n"
    );
    assert_eq!(
        r(json!({"description": "d", "path": "/mnt/user-data/workspace/nope"})).await,
        (
            "Error: File not found: /mnt/user-data/workspace/nope".to_string(),
            true
        )
    );
    assert_eq!(
        r(json!({"description": "d", "path": "/mnt/user-data/workspace"})).await,
        (
            "Error: Path is a directory, not a file: /mnt/user-data/workspace".to_string(),
            true
        )
    );
}

#[tokio::test]
async fn read_file_binary_and_truncation() {
    let e = env();
    let ctx = e.ctx("t1");
    let host = e.host("t1").await;
    std::fs::write(
        host.uploads.join("sheet.xlsx"),
        b"PK\x03\x04\x00\x00\xff\xfe",
    )
    .unwrap();
    let (t, err) = call(
        &ReadFileTool::new(),
        &ctx,
        json!({"description": "d", "path": "/mnt/user-data/uploads/sheet.xlsx"}),
    )
    .await;
    assert!(err);
    assert!(
        t.starts_with("Error: cannot read '/mnt/user-data/uploads/sheet.xlsx' as text"),
        "{t}"
    );
    let big: String = (0..10_000).map(|i| format!("row {i}\n")).collect();
    std::fs::write(host.workspace.join("big.txt"), &big).unwrap();
    let (t, err) = call(
        &ReadFileTool::new(),
        &ctx,
        json!({"description": "d", "path": "/mnt/user-data/workspace/big.txt"}),
    )
    .await;
    assert!(!err);
    assert!(t.chars().count() <= 50_000);
    assert!(t.starts_with("row 0\nrow 1\n"));
    assert!(
        t.contains("Use start_line/end_line to read a specific range"),
        "{}",
        &t[t.len() - 200..]
    );
}

// ---------------------------------------------------------------- §11.1 item 25: write_file

#[tokio::test]
async fn write_file_size_limit_and_ok() {
    let e = env();
    let ctx = e.ctx("t1");
    let wf = WriteFileTool::new(&e.settings);
    let big = "x".repeat(81 * 1024);
    let p = "/mnt/user-data/workspace/big.md";
    let (t, err) = call(
        &wf,
        &ctx,
        json!({"description": "d", "path": p, "content": big}),
    )
    .await;
    assert!(err);
    assert!(t.contains("80 KB") && t.contains("append=true"), "{t}");
    assert!(!e.host("t1").await.workspace.join("big.md").exists());
    let (t, err) = call(
        &wf,
        &ctx,
        json!({"description": "d", "path": p, "content": big, "append": true}),
    )
    .await;
    assert_eq!((t.as_str(), err), ("OK", false));
    let (t, _) = call(&wf, &ctx, json!({"description": "d", "path": "/mnt/user-data/outputs/deep/er/r.md", "content": "# r"})).await;
    assert_eq!(t, "OK");
    assert_eq!(
        std::fs::read_to_string(e.host("t1").await.outputs.join("deep/er/r.md")).unwrap(),
        "# r"
    );
    // limit 0 disables the guard
    let e0 = Env::new(|s, _| s.app.sandbox.write_file_max_bytes = 0);
    let (t, _) = call(
        &WriteFileTool::new(&e0.settings),
        &e0.ctx("t1"),
        json!({"description": "d", "path": p, "content": big}),
    )
    .await;
    assert_eq!(t, "OK");
    let (t, err) = call(
        &wf,
        &ctx,
        json!({"description": "d", "path": "/mnt/user-data/workspace", "content": "x"}),
    )
    .await;
    assert!(
        err && t == "Error: Path is a directory, not a file: /mnt/user-data/workspace",
        "{t}"
    );
}

// ---------------------------------------------------------------- §11.1 item 26: str_replace

#[tokio::test]
async fn str_replace_texts() {
    let e = env();
    let ctx = e.ctx("t1");
    let sr = StrReplaceTool::new();
    let p = "/mnt/user-data/workspace/s.txt";
    write(&e, &ctx, p, "foo bar foo\n").await;
    let r = |a: Value| call(&sr, &ctx, a);
    assert_eq!(
        r(json!({"description": "d", "path": p, "old_str": "", "new_str": "X"}))
            .await
            .0,
        "OK"
    );
    let host = e.host("t1").await.workspace.join("s.txt");
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "foo bar foo\n");
    assert_eq!(
        r(json!({"description": "d", "path": p, "old_str": "zzz", "new_str": "X"})).await,
        (
            format!("Error: String to replace not found in file: {p}"),
            true
        )
    );
    assert_eq!(
        r(json!({"description": "d", "path": p, "old_str": "foo", "new_str": "baz"}))
            .await
            .0,
        "OK"
    );
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "baz bar foo\n");
    assert_eq!(r(json!({"description": "d", "path": p, "old_str": "a", "new_str": "4", "replace_all": true})).await.0, "OK");
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "b4z b4r foo\n");
    assert_eq!(r(json!({"description": "d", "path": "/mnt/user-data/workspace/none", "old_str": "a", "new_str": "b"})).await, ("Error: File not found: /mnt/user-data/workspace/none".to_string(), true));
}

// ---------------------------------------------------------------- §11.1 item 27: path rules

#[tokio::test]
async fn permission_texts_are_generic() {
    let e = env();
    let ctx = e.ctx("t1");
    std::fs::create_dir_all(e.skills().join("public/x")).unwrap();
    std::fs::write(e.skills().join("public/x/SKILL.md"), "orig").unwrap();
    e.provider
        .set_skills(SkillsView {
            enabled: vec![SkillMount {
                subpath: "public/x".into(),
                host_dir: e.skills().join("public/x"),
            }],
            disabled: vec![],
        })
        .await
        .unwrap();
    let (t, err) = call(
        &*by(&e, "read_file"),
        &ctx,
        json!({"description": "d", "path": "/etc/passwd"}),
    )
    .await;
    assert_eq!(
        (t.as_str(), err),
        ("Error: Permission denied reading file: /etc/passwd", true)
    );
    let (t, _) = call(
        &*by(&e, "write_file"),
        &ctx,
        json!({"description": "d", "path": "/mnt/skills/public/x/SKILL.md", "content": "pwned"}),
    )
    .await;
    assert_eq!(
        t,
        "Error: Permission denied writing to file: /mnt/skills/public/x/SKILL.md"
    );
    let (t, _) = call(&*by(&e, "str_replace"), &ctx, json!({"description": "d", "path": "/mnt/skills/public/x/SKILL.md", "old_str": "orig", "new_str": "pwned"})).await;
    assert_eq!(
        t,
        "Error: Permission denied accessing file: /mnt/skills/public/x/SKILL.md"
    );
    assert_eq!(
        std::fs::read_to_string(e.skills().join("public/x/SKILL.md")).unwrap(),
        "orig"
    );
    let (t, _) = call(
        &*by(&e, "read_file"),
        &ctx,
        json!({"description": "d", "path": "/mnt/user-data/outputs/../../x"}),
    )
    .await;
    assert_eq!(
        t,
        "Error: Permission denied reading file: /mnt/user-data/outputs/../../x"
    );
    let (t, _) = call(
        &*by(&e, "ls"),
        &ctx,
        json!({"description": "d", "path": "/etc"}),
    )
    .await;
    assert_eq!(t, "Error: Permission denied: /etc");
    // Skills stay readable.
    let (t, _) = call(
        &*by(&e, "read_file"),
        &ctx,
        json!({"description": "d", "path": "/mnt/skills/public/x/SKILL.md"}),
    )
    .await;
    assert_eq!(t, "orig");
}

#[tokio::test]
async fn disabled_skills_are_named() {
    let e = env();
    let ctx = e.ctx("t1");
    e.provider
        .set_skills(SkillsView {
            enabled: vec![],
            disabled: vec!["public/secret-skill".into()],
        })
        .await
        .unwrap();
    for tool in ["read_file", "ls"] {
        let (t, err) = call(
            &*by(&e, tool),
            &ctx,
            json!({"description": "d", "path": "/mnt/skills/public/secret-skill/SKILL.md"}),
        )
        .await;
        assert!(err);
        assert!(
            t.starts_with("Error: Skill 'secret-skill' is disabled."),
            "{tool}: {t}"
        );
    }
}

// ---------------------------------------------------------------- security through the tools

#[tokio::test]
async fn traversal_and_absolute_host_paths_are_refused_by_every_file_tool() {
    let e = env();
    let ctx = e.ctx("t1");
    let host = e.host("t1").await;
    std::fs::write(host.workspace.join("f.txt"), "data").unwrap();
    let host_file = host.workspace.join("f.txt").to_string_lossy().into_owned();
    let home = e.settings.home.to_string_lossy().into_owned();
    for p in [
        "/mnt/user-data/workspace/../../../../../../etc/passwd",
        "/etc/shadow",
        host_file.as_str(),
        "/mnt/user-data/../user-data/workspace/f.txt",
    ] {
        for (tool, a) in [
            ("read_file", json!({"description": "d", "path": p})),
            (
                "write_file",
                json!({"description": "d", "path": p, "content": "x"}),
            ),
            (
                "str_replace",
                json!({"description": "d", "path": p, "old_str": "d", "new_str": "x"}),
            ),
            ("ls", json!({"description": "d", "path": p})),
            (
                "glob",
                json!({"description": "d", "path": p, "pattern": "*"}),
            ),
            (
                "grep",
                json!({"description": "d", "path": p, "pattern": "root"}),
            ),
        ] {
            let (t, err) = call(&*by(&e, tool), &ctx, a).await;
            assert!(err, "{tool} {p}: {t}");
            assert!(t.starts_with("Error: Permission denied"), "{tool} {p}: {t}");
            assert!(!t.contains("root:"), "{tool} {p}: {t}");
            // Only a path the model itself gave is echoed.
            assert!(p.contains(&home) || !t.contains(&home), "{tool} {p}: {t}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(host.workspace.join("f.txt")).unwrap(),
        "data"
    );
}

#[tokio::test]
async fn planted_symlinks_are_refused() {
    let e = env();
    let a = e.ctx("thread-a");
    let b = e.ctx("thread-b");
    write(&e, &b, "/mnt/user-data/workspace/secret.txt", "B-SECRET").await;
    let b_ws = e.host("thread-b").await.workspace;
    let a_ws = e.host("thread-a").await.workspace;
    // Planted from inside bash (the way the agent would) and from the host side.
    let out = bash(
        &e,
        &a,
        "ln -s /etc etc_link && ln -s /etc/passwd passwd_link && echo planted",
    )
    .await;
    assert_eq!(out, "planted\n");
    std::os::unix::fs::symlink(&b_ws, a_ws.join("b_link")).unwrap();
    for p in [
        "/mnt/user-data/workspace/etc_link/passwd",
        "/mnt/user-data/workspace/passwd_link",
        "/mnt/user-data/workspace/b_link/secret.txt",
    ] {
        let (t, err) = call(
            &*by(&e, "read_file"),
            &a,
            json!({"description": "d", "path": p}),
        )
        .await;
        assert_eq!(
            (t, err),
            (format!("Error: Permission denied reading file: {p}"), true)
        );
        let (t, _) = call(
            &*by(&e, "write_file"),
            &a,
            json!({"description": "d", "path": p, "content": "pwned"}),
        )
        .await;
        assert_eq!(t, format!("Error: Permission denied writing to file: {p}"));
    }
    let (t, _) = call(
        &*by(&e, "ls"),
        &a,
        json!({"description": "d", "path": "/mnt/user-data/workspace"}),
    )
    .await;
    assert_eq!(t, "(empty)");
    let (t, _) = call(
        &*by(&e, "glob"),
        &a,
        json!({"description": "d", "path": "/mnt/user-data", "pattern": "**/*"}),
    )
    .await;
    assert_eq!(t, "No files matched under /mnt/user-data");
    let (t, _) = call(
        &*by(&e, "grep"),
        &a,
        json!({"description": "d", "path": "/mnt/user-data", "pattern": "B-SECRET|root"}),
    )
    .await;
    assert_eq!(t, "No matches found under /mnt/user-data");
    assert_eq!(
        std::fs::read_to_string(b_ws.join("secret.txt")).unwrap(),
        "B-SECRET"
    );
}

#[tokio::test]
async fn threads_are_isolated_through_every_tool() {
    let e = env();
    let a = e.ctx("thread-a");
    let b = e.ctx("thread-b");
    write(&e, &b, "/mnt/user-data/outputs/b.txt", "B-SECRET").await;
    let b_host = e
        .host("thread-b")
        .await
        .outputs
        .join("b.txt")
        .to_string_lossy()
        .into_owned();
    let (t, _) = call(
        &*by(&e, "read_file"),
        &a,
        json!({"description": "d", "path": "/mnt/user-data/outputs/b.txt"}),
    )
    .await;
    assert_eq!(t, "Error: File not found: /mnt/user-data/outputs/b.txt");
    let (t, _) = call(
        &*by(&e, "read_file"),
        &a,
        json!({"description": "d", "path": b_host}),
    )
    .await;
    assert!(t.starts_with("Error: Permission denied"), "{t}");
    let (t, _) = call(
        &*by(&e, "ls"),
        &a,
        json!({"description": "d", "path": "/mnt/user-data"}),
    )
    .await;
    assert_eq!(
        t,
        "/mnt/user-data/outputs/\n/mnt/user-data/uploads/\n/mnt/user-data/workspace/"
    );
    let (t, _) = call(
        &*by(&e, "grep"),
        &a,
        json!({"description": "d", "path": "/mnt/user-data", "pattern": "B-SECRET"}),
    )
    .await;
    assert_eq!(t, "No matches found under /mnt/user-data");
    let out = bash(
        &e,
        &a,
        &format!("cat /mnt/user-data/outputs/b.txt {b_host} 2>&1; ls /mnt/user-data/outputs"),
    )
    .await;
    assert!(!out.contains("B-SECRET"), "{out}");
    // B sees its own file everywhere.
    let (t, _) = call(
        &*by(&e, "grep"),
        &b,
        json!({"description": "d", "path": "/mnt/user-data", "pattern": "b-secret"}),
    )
    .await;
    assert_eq!(
        t,
        "Found 1 matches under /mnt/user-data\n/mnt/user-data/outputs/b.txt:1: B-SECRET"
    );
    assert_eq!(
        bash(&e, &b, "cat /mnt/user-data/outputs/b.txt").await,
        "B-SECRET"
    );
}

#[tokio::test]
async fn bash_security_cases() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let e = Env::new(|s, _| s.app.sandbox.bash_command_timeout = 3);
    let ctx = e.ctx("t1");
    // /etc/shadow
    let out = bash(&e, &ctx, "cat /etc/shadow").await;
    assert!(
        out.contains("Permission denied") && !out.contains("root:"),
        "{out}"
    );
    assert!(out.ends_with("Exit Code: 1"), "{out}");
    // write outside the workspace
    let out = bash(
        &e,
        &ctx,
        "touch /etc/fawn-x /usr/fawn-x /fawn-x /mnt/user-data/fawn-x 2>&1; echo rc=$?",
    )
    .await;
    assert!(out.ends_with("rc=1\n"), "{out}");
    assert!(
        !std::path::Path::new("/etc/fawn-x").exists() && !std::path::Path::new("/fawn-x").exists()
    );
    // network
    let out = bash(
        &e,
        &ctx,
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"),
    )
    .await;
    assert!(!out.contains("CONNECTED"), "{out}");
    // outliving the timeout
    let m = format!("5{}", std::process::id());
    let out = bash(
        &e,
        &ctx,
        &format!("nohup sleep {m}1 >/dev/null 2>&1 & sleep {m}2"),
    )
    .await;
    assert!(
        out.starts_with("Command timed out after 3 seconds and was terminated."),
        "{out}"
    );
    assert!(out.ends_with("Exit Code: 124"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let leftover = std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        std::fs::read(p.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&m))
    });
    assert!(!leftover, "a process outlived the timeout");
    // fork bomb
    let out = bash(&e, &ctx, "f() { f | f & }; f; sleep 10").await;
    assert!(
        out.contains("Command timed out") || out.contains("Resource temporarily unavailable"),
        "{}",
        &out[..out.len().min(300)]
    );
    assert_eq!(bash(&e, &ctx, "echo still-here").await, "still-here\n");
    drop(listener);
}

// ---------------------------------------------------------------- §11.1 items 29, 30: bash output

#[tokio::test]
async fn bash_output_masking() {
    let e = env();
    let ctx = e.ctx("t1");
    let ws = e.host("t1").await.workspace.to_string_lossy().into_owned();
    let out = bash(
        &e,
        &ctx,
        &format!(
            "echo {ws}/report.md; echo /mnt/user-data-backup/keep; ls -d /mnt/user-data/workspace"
        ),
    )
    .await;
    assert_eq!(
        out,
        "/mnt/user-data/workspace/report.md\n/mnt/user-data-backup/keep\n/mnt/user-data/workspace\n"
    );
    let out = bash(&e, &ctx, "echo out; echo err >&2; exit 7").await;
    assert_eq!(out, "out\n\nStd Error:\nerr\n\nExit Code: 7");
    assert_eq!(bash(&e, &ctx, "true").await, "(no output)");
}

#[tokio::test]
async fn bash_output_truncation() {
    let e = env();
    let ctx = e.ctx("t1");
    // 30 000+ characters: line numbers padded so first and last lines are recognisable.
    let cmd = "for i in $(seq -w 1 3000); do echo \"line-$i-xxxxx\"; done";
    let out = bash(&e, &ctx, cmd).await;
    assert!(out.chars().count() <= 20_000, "{}", out.chars().count());
    assert!(out.contains("[middle truncated: ") && out.contains(" chars skipped]"));
    assert!(out.starts_with("line-0001-xxxxx\n"));
    assert!(out.ends_with("line-3000-xxxxx\n"));
    let e0 = Env::new(|s, _| s.app.sandbox.bash_output_max_chars = 0);
    let out = bash(&e0, &e0.ctx("t1"), cmd).await;
    assert_eq!(out.lines().count(), 3000);
    assert!(!out.contains("truncated"));
}

#[tokio::test]
async fn bash_refused_without_bubblewrap() {
    let e = Env::new(|_, o| o.bwrap_path = Some("/nonexistent/bwrap".into()));
    let ctx = e.ctx("t1");
    let (t, err) = call(
        &*by(&e, "bash"),
        &ctx,
        json!({"description": "d", "command": "echo hi"}),
    )
    .await;
    assert!(err);
    assert!(
        t.starts_with("Error: bash is disabled: bubblewrap (bwrap) is not installed"),
        "{t}"
    );
    assert!(t.contains("sandbox.allow_host_bash: true"));
    // file tools keep working
    write(&e, &ctx, "/mnt/user-data/workspace/a.txt", "x").await;
}

#[tokio::test]
async fn bash_cancellation_kills_the_command() {
    let e = env();
    let ctx = e.ctx("t1");
    let m = format!("4{}", std::process::id());
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        cancel.cancel();
    });
    let r = by(&e, "bash")
        .call(
            args(json!({"description": "d", "command": format!("sleep {m}1 & sleep {m}2")})),
            &ctx,
        )
        .await;
    assert!(matches!(r, Err(ToolError::Cancelled)), "{r:?}");
    let mut gone = false;
    for _ in 0..100 {
        let alive = std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
            std::fs::read(p.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&m))
        });
        if !alive {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "command survived cancellation");
}

// ---------------------------------------------------------------- ls, glob, grep texts

#[tokio::test]
async fn ls_glob_grep_texts() {
    let e = env();
    let ctx = e.ctx("t1");
    let ws = "/mnt/user-data/workspace";
    let (t, _) = call(
        &*by(&e, "ls"),
        &ctx,
        json!({"description": "d", "path": ws}),
    )
    .await;
    assert_eq!(t, "(empty)");
    write(
        &e,
        &ctx,
        &format!("{ws}/src/a.py"),
        "def Alpha():\n    pass\n",
    )
    .await;
    write(&e, &ctx, &format!("{ws}/src/deep/b.py"), "alpha = 1\n").await;
    write(&e, &ctx, &format!("{ws}/notes.md"), "nothing\n").await;
    let (t, _) = call(
        &*by(&e, "ls"),
        &ctx,
        json!({"description": "d", "path": ws}),
    )
    .await;
    assert_eq!(
        t,
        format!("{ws}/notes.md\n{ws}/src/\n{ws}/src/a.py\n{ws}/src/deep/")
    );
    let (t, err) = call(
        &*by(&e, "ls"),
        &ctx,
        json!({"description": "d", "path": format!("{ws}/nope")}),
    )
    .await;
    assert_eq!(
        (t, err),
        (format!("Error: Directory not found: {ws}/nope"), true)
    );

    let (t, _) = call(
        &*by(&e, "glob"),
        &ctx,
        json!({"description": "d", "path": ws, "pattern": "**/*.py"}),
    )
    .await;
    assert_eq!(
        t,
        format!("Found 2 paths under {ws}\n1. {ws}/src/a.py\n2. {ws}/src/deep/b.py")
    );
    let (t, _) = call(
        &*by(&e, "glob"),
        &ctx,
        json!({"description": "d", "path": ws, "pattern": "*.py", "max_results": 1}),
    )
    .await;
    assert_eq!(
        t,
        format!(
            "Found 1 paths under {ws} (showing first 1)\n1. {ws}/src/a.py\nResults truncated. Narrow the path or pattern to see fewer matches."
        )
    );
    let (t, _) = call(
        &*by(&e, "glob"),
        &ctx,
        json!({"description": "d", "path": ws, "pattern": "*.rs"}),
    )
    .await;
    assert_eq!(t, format!("No files matched under {ws}"));
    let (t, _) = call(
        &*by(&e, "glob"),
        &ctx,
        json!({"description": "d", "path": format!("{ws}/notes.md"), "pattern": "*"}),
    )
    .await;
    assert_eq!(t, format!("Error: Path is not a directory: {ws}/notes.md"));

    let (t, _) = call(
        &*by(&e, "grep"),
        &ctx,
        json!({"description": "d", "path": ws, "pattern": "alpha"}),
    )
    .await;
    assert_eq!(
        t,
        format!(
            "Found 2 matches under {ws}\n{ws}/src/a.py:1: def Alpha():\n{ws}/src/deep/b.py:1: alpha = 1"
        )
    );
    let (t, _) = call(
        &*by(&e, "grep"),
        &ctx,
        json!({"description": "d", "path": ws, "pattern": "alpha", "case_sensitive": true}),
    )
    .await;
    assert_eq!(
        t,
        format!("Found 1 matches under {ws}\n{ws}/src/deep/b.py:1: alpha = 1")
    );
    let (t, _) = call(
        &*by(&e, "grep"),
        &ctx,
        json!({"description": "d", "path": ws, "pattern": ".*", "literal": true}),
    )
    .await;
    assert_eq!(t, format!("No matches found under {ws}"));
    let (t, err) = call(
        &*by(&e, "grep"),
        &ctx,
        json!({"description": "d", "path": ws, "pattern": "a("}),
    )
    .await;
    assert!(
        err && t.starts_with("Error: Invalid regex pattern: "),
        "{t}"
    );
    let (t, _) = call(
        &*by(&e, "grep"),
        &ctx,
        json!({"description": "d", "path": ws, "pattern": "alpha", "glob": "src/*.py"}),
    )
    .await;
    assert_eq!(
        t,
        format!("Found 1 matches under {ws}\n{ws}/src/a.py:1: def Alpha():")
    );
    let (t, _) = call(
        &*by(&e, "grep"),
        &ctx,
        json!({"description": "d", "path": format!("{ws}/src/a.py"), "pattern": "pass"}),
    )
    .await;
    assert_eq!(
        t,
        format!("Found 1 matches under {ws}/src/a.py\n{ws}/src/a.py:2:     pass")
    );
}

#[tokio::test]
async fn configured_max_results_cap_requests() {
    let e = env();
    let ctx = e.ctx("t1");
    for i in 0..5 {
        write(
            &e,
            &ctx,
            &format!("/mnt/user-data/workspace/f{i}.txt"),
            "hit\n",
        )
        .await;
    }
    let mut extra = Map::new();
    extra.insert("max_results".into(), json!(2));
    let glob = sandbox_tool("glob", &e.settings, &extra).unwrap();
    let (t, _) = call(&*glob, &ctx, json!({"description": "d", "path": "/mnt/user-data/workspace", "pattern": "*.txt", "max_results": 100})).await;
    assert!(
        t.starts_with("Found 2 paths under /mnt/user-data/workspace (showing first 2)"),
        "{t}"
    );
    let grep = sandbox_tool("grep", &e.settings, &extra).unwrap();
    let (t, _) = call(
        &*grep,
        &ctx,
        json!({"description": "d", "path": "/mnt/user-data/workspace", "pattern": "hit"}),
    )
    .await;
    assert!(
        t.starts_with("Found 2 matches under /mnt/user-data/workspace (showing first 2)"),
        "{t}"
    );
}

#[tokio::test]
async fn huge_listings_are_truncated() {
    let e = env();
    let ctx = e.ctx("t1");
    let ws = e.host("t1").await.workspace;
    for i in 0..600 {
        let d = ws.join(format!("directory-with-a-long-name-{i:04}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("file-with-a-long-name.txt"), "").unwrap();
    }
    let (t, err) = call(
        &*by(&e, "ls"),
        &ctx,
        json!({"description": "d", "path": "/mnt/user-data/workspace"}),
    )
    .await;
    assert!(!err);
    assert!(t.chars().count() <= 20_000);
    assert!(t.contains("Use a more specific path to see fewer results"));
}

// ---------------------------------------------------------------- §11.1 item 28: host bash guard

#[tokio::test]
async fn host_bash_path_guard() {
    let e = Env::new(|s, o| {
        o.bwrap_path = Some("/nonexistent/bwrap".into());
        s.app.sandbox.allow_host_bash = true;
    });
    let ctx = e.ctx("t1");
    let out = bash(&e, &ctx, "cat /etc/passwd").await;
    assert!(
        out.starts_with(
            "Error: Unsafe absolute paths in command: /etc/passwd. Use paths under /mnt/user-data"
        ),
        "{out}"
    );
    let out = bash(&e, &ctx, "cat file:///etc/passwd").await;
    assert!(
        out.starts_with("Error: Unsafe file:// URL in command"),
        "{out}"
    );
    let out = bash(&e, &ctx, "cd .. && ls").await;
    assert_eq!(out, "Error: Access denied: path traversal detected");
    // URLs and system paths pass the guard (echo, not curl: tests never touch the network).
    assert_eq!(
        bash(&e, &ctx, "echo https://example.com/api/v1").await,
        "https://example.com/api/v1\n"
    );
    assert_eq!(bash(&e, &ctx, "ls /dev/null").await, "/dev/null\n");
    let ws = e.host("t1").await.workspace;
    assert_eq!(bash(&e, &ctx, "pwd").await, "/mnt/user-data/workspace\n");
    assert!(ws.is_dir());
}
