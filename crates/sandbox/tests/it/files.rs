//! File operations through the `Sandbox` trait: behaviour, confinement and masking.

use crate::common::{env, env_with};
use fawn_config::MountConfig;
use fawn_sandbox::{GrepOptions, SandboxError, SandboxProvider, SkillMount, SkillsView};
use std::os::unix::fs::symlink;

fn grep_opts(max: usize) -> GrepOptions {
    GrepOptions {
        max_results: max,
        ..Default::default()
    }
}

#[tokio::test]
async fn acquire_creates_thread_dirs_and_ids() {
    let e = env();
    let id = e.provider.acquire("t1").await.unwrap();
    assert_eq!(id, "local:t1");
    let sb = e.provider.get(&id).unwrap();
    let p = sb.paths();
    assert_eq!(
        p.workspace,
        e.home()
            .join("users/default/threads/t1/user-data/workspace")
    );
    assert!(p.workspace.is_dir() && p.uploads.is_dir() && p.outputs.is_dir());
    assert_eq!(e.provider.thread_paths("t1"), p.clone());
    // same id again, still there after release
    assert_eq!(e.provider.acquire("t1").await.unwrap(), id);
    e.provider.release(&id).await;
    assert!(e.provider.get(&id).is_some());
    let other = e.provider.acquire_for_user("alice", "t1").await.unwrap();
    assert_eq!(other, "local:alice:t1");
    assert_ne!(
        e.provider.get(&other).unwrap().paths().workspace,
        p.workspace
    );
    for bad in ["", "a/b", "..", "a.b", &"x".repeat(65)] {
        assert!(
            matches!(e.provider.acquire(bad).await, Err(SandboxError::Invalid(_))),
            "{bad}"
        );
    }
    assert!(e.provider.acquire_for_user("../x", "t").await.is_err());
}

#[tokio::test]
async fn lru_evicts_least_recently_used() {
    let e = env_with(|_, o| o.max_sandboxes = 2);
    let a = e.provider.acquire("a").await.unwrap();
    let b = e.provider.acquire("b").await.unwrap();
    assert!(e.provider.get(&a).is_some()); // a is now more recent than b
    let c = e.provider.acquire("c").await.unwrap();
    assert!(e.provider.get(&a).is_some());
    assert!(e.provider.get(&b).is_none());
    assert!(e.provider.get(&c).is_some());
}

#[tokio::test]
async fn write_read_list_roundtrip() {
    let e = env();
    let sb = e.sandbox("t1").await;
    sb.write_text("/mnt/user-data/workspace/a/b/c.txt", "hello", false)
        .await
        .unwrap();
    sb.write_text("/mnt/user-data/workspace/a/b/c.txt", " world", true)
        .await
        .unwrap();
    assert_eq!(
        sb.read_bytes("/mnt/user-data/workspace/a/b/c.txt", 100)
            .await
            .unwrap(),
        b"hello world"
    );
    assert_eq!(
        std::fs::read_to_string(sb.paths().workspace.join("a/b/c.txt")).unwrap(),
        "hello world"
    );
    sb.write_bytes("/mnt/user-data/uploads/u.bin", &[0, 1, 2])
        .await
        .unwrap();
    sb.write_text("/mnt/user-data/outputs/o.md", "# o", false)
        .await
        .unwrap();
    let l = sb.list_dir("/mnt/user-data/workspace", 2).await.unwrap();
    assert_eq!(
        l,
        [
            "/mnt/user-data/workspace/a/",
            "/mnt/user-data/workspace/a/b/"
        ]
    );
    let l = sb.list_dir("/mnt/user-data", 2).await.unwrap();
    assert_eq!(
        l,
        [
            "/mnt/user-data/outputs/",
            "/mnt/user-data/outputs/o.md",
            "/mnt/user-data/uploads/",
            "/mnt/user-data/uploads/u.bin",
            "/mnt/user-data/workspace/",
            "/mnt/user-data/workspace/a/",
        ]
    );
    assert!(matches!(
        sb.read_bytes("/mnt/user-data/workspace/a", 10).await,
        Err(SandboxError::IsADirectory(_))
    ));
    assert!(matches!(
        sb.read_bytes("/mnt/user-data/workspace/none", 10).await,
        Err(SandboxError::NotFound(_))
    ));
    assert!(matches!(
        sb.read_bytes("/mnt/user-data/workspace/a/b/c.txt", 3).await,
        Err(SandboxError::TooLarge(_))
    ));
    assert!(matches!(
        sb.list_dir("/mnt/user-data/workspace/nope", 2).await,
        Err(SandboxError::NotFound(_))
    ));
    assert!(matches!(
        sb.write_text("/mnt/user-data/workspace/a", "x", false)
            .await,
        Err(SandboxError::IsADirectory(_))
    ));
    assert!(matches!(
        sb.write_text("/mnt/user-data/workspace", "x", false).await,
        Err(SandboxError::IsADirectory(_))
    ));
}

#[tokio::test]
async fn path_traversal_is_refused() {
    let e = env();
    let sb = e.sandbox("t1").await;
    std::fs::write(e.home().join("users/default/threads/t1/secret.txt"), "top").unwrap();
    for p in [
        "/mnt/user-data/workspace/../../secret.txt",
        "/mnt/user-data/outputs/../../x",
        "/mnt/user-data/workspace/../../../../../../etc/passwd",
        "/mnt/skills/../user-data/workspace/x",
    ] {
        match sb.read_bytes(p, 1000).await {
            Err(SandboxError::PermissionDenied(d)) => assert!(d.contains("path traversal"), "{d}"),
            other => panic!("{p}: {other:?}"),
        }
        assert!(
            matches!(
                sb.write_text(p, "x", false).await,
                Err(SandboxError::PermissionDenied(_))
            ),
            "{p}"
        );
        assert!(
            matches!(
                sb.list_dir(p, 1).await,
                Err(SandboxError::PermissionDenied(_))
            ),
            "{p}"
        );
    }
}

#[tokio::test]
async fn absolute_host_paths_are_refused() {
    let e = env();
    let sb = e.sandbox("t1").await;
    let host_ws = sb.paths().workspace.clone();
    std::fs::write(host_ws.join("f.txt"), "data").unwrap();
    let host_file = host_ws.join("f.txt").to_string_lossy().into_owned();
    for p in [
        "/etc/passwd",
        "/etc/shadow",
        host_file.as_str(),
        "/",
        "/mnt",
        "/mnt/user-data-backup/x",
        "relative.txt",
        "~/x",
    ] {
        assert!(
            matches!(
                sb.read_bytes(p, 1000).await,
                Err(SandboxError::PermissionDenied(_))
            ),
            "{p}"
        );
        assert!(
            matches!(
                sb.write_text(p, "x", false).await,
                Err(SandboxError::PermissionDenied(_))
            ),
            "{p}"
        );
        assert!(
            matches!(
                sb.list_dir(p, 1).await,
                Err(SandboxError::PermissionDenied(_))
            ),
            "{p}"
        );
        assert!(sb.glob(p, "*", false, 10).await.is_err(), "{p}");
        assert!(sb.grep(p, "root", grep_opts(10)).await.is_err(), "{p}");
    }
    // Only the three user-data directories are reachable.
    assert!(matches!(
        sb.write_text("/mnt/user-data/x.txt", "x", false).await,
        Err(SandboxError::PermissionDenied(_))
    ));
    assert!(!sb.paths().user_data.join("x.txt").exists());
}

#[tokio::test]
async fn symlink_to_etc_is_not_followed() {
    let e = env();
    let sb = e.sandbox("t1").await;
    let ws = sb.paths().workspace.clone();
    symlink("/etc", ws.join("etc_link")).unwrap();
    symlink("/etc/passwd", ws.join("passwd_link")).unwrap();
    symlink("../../../../../../../../etc/passwd", ws.join("rel_link")).unwrap();
    for p in [
        "/mnt/user-data/workspace/etc_link/passwd",
        "/mnt/user-data/workspace/passwd_link",
        "/mnt/user-data/workspace/rel_link",
    ] {
        assert!(
            matches!(
                sb.read_bytes(p, 100_000).await,
                Err(SandboxError::PermissionDenied(_))
            ),
            "{p}"
        );
    }
    assert!(matches!(
        sb.list_dir("/mnt/user-data/workspace/etc_link", 1).await,
        Err(SandboxError::PermissionDenied(_))
    ));
    assert!(matches!(
        sb.glob("/mnt/user-data/workspace/etc_link", "*", false, 10)
            .await,
        Err(SandboxError::PermissionDenied(_))
    ));
    assert!(matches!(
        sb.grep(
            "/mnt/user-data/workspace/passwd_link",
            "root",
            grep_opts(10)
        )
        .await,
        Err(SandboxError::PermissionDenied(_))
    ));
    // Walks from the workspace neither list nor search through them.
    let l = sb.list_dir("/mnt/user-data/workspace", 2).await.unwrap();
    assert!(l.is_empty(), "{l:?}");
    let (g, _) = sb
        .glob("/mnt/user-data/workspace", "**/passwd", true, 100)
        .await
        .unwrap();
    assert!(g.is_empty(), "{g:?}");
    let (m, _) = sb
        .grep("/mnt/user-data/workspace", "root", grep_opts(100))
        .await
        .unwrap();
    assert!(m.is_empty(), "{m:?}");
    // Writing through a symlink is refused and leaves the target alone.
    let before = std::fs::read("/etc/passwd").unwrap();
    for p in [
        "/mnt/user-data/workspace/passwd_link",
        "/mnt/user-data/workspace/etc_link/x",
    ] {
        assert!(
            matches!(
                sb.write_text(p, "pwned", false).await,
                Err(SandboxError::PermissionDenied(_))
            ),
            "{p}"
        );
    }
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), before);
    assert!(!std::path::Path::new("/etc/x").exists());
}

#[tokio::test]
async fn symlink_to_another_thread_is_not_followed() {
    let e = env();
    let a = e.sandbox("thread-a").await;
    let b = e.sandbox("thread-b").await;
    b.write_text("/mnt/user-data/workspace/secret.txt", "B-SECRET", false)
        .await
        .unwrap();
    symlink(&b.paths().workspace, a.paths().workspace.join("b_ws")).unwrap();
    symlink(
        b.paths().workspace.join("secret.txt"),
        a.paths().workspace.join("b_secret"),
    )
    .unwrap();
    assert!(matches!(
        a.read_bytes("/mnt/user-data/workspace/b_ws/secret.txt", 100)
            .await,
        Err(SandboxError::PermissionDenied(_))
    ));
    assert!(matches!(
        a.read_bytes("/mnt/user-data/workspace/b_secret", 100).await,
        Err(SandboxError::PermissionDenied(_))
    ));
    assert!(matches!(
        a.write_text("/mnt/user-data/workspace/b_ws/new.txt", "x", false)
            .await,
        Err(SandboxError::PermissionDenied(_))
    ));
    assert!(!b.paths().workspace.join("new.txt").exists());
    let (m, _) = a
        .grep("/mnt/user-data", "B-SECRET", grep_opts(10))
        .await
        .unwrap();
    assert!(m.is_empty());
    let (g, _) = a
        .glob("/mnt/user-data", "**/secret.txt", false, 10)
        .await
        .unwrap();
    assert!(g.is_empty());
    // Thread A's own paths never resolve into B.
    assert_eq!(
        a.read_bytes("/mnt/user-data/workspace/secret.txt", 100)
            .await,
        Err(SandboxError::NotFound(
            "/mnt/user-data/workspace/secret.txt".into()
        ))
    );
}

#[tokio::test]
async fn symlinks_inside_user_data_work() {
    let e = env();
    let sb = e.sandbox("t1").await;
    sb.write_text("/mnt/user-data/outputs/report.md", "R", false)
        .await
        .unwrap();
    symlink(
        "../outputs/report.md",
        sb.paths().workspace.join("report_link"),
    )
    .unwrap();
    assert_eq!(
        sb.read_bytes("/mnt/user-data/workspace/report_link", 10)
            .await
            .unwrap(),
        b"R"
    );
    let l = sb.list_dir("/mnt/user-data/workspace", 1).await.unwrap();
    assert_eq!(l, ["/mnt/user-data/workspace/report_link"]);
}

#[tokio::test]
async fn skills_are_read_only_and_only_enabled_ones_show() {
    let e = env();
    let skills = e.dir.path().join("skills");
    for s in ["public/a", "public/off", "custom/c"] {
        std::fs::create_dir_all(skills.join(s)).unwrap();
        std::fs::write(skills.join(s).join("SKILL.md"), format!("skill {s}")).unwrap();
    }
    let sb = e.sandbox("t1").await;
    // Nothing is visible before the skills owner hands over a view.
    assert!(sb.list_dir("/mnt/skills", 2).await.unwrap().is_empty());
    assert!(matches!(
        sb.read_bytes("/mnt/skills/public/a/SKILL.md", 100).await,
        Err(SandboxError::NotFound(_))
    ));
    e.provider
        .set_skills(SkillsView {
            enabled: vec![
                SkillMount {
                    subpath: "public/a".into(),
                    host_dir: skills.join("public/a"),
                },
                SkillMount {
                    subpath: "/mnt/skills/custom/c".into(),
                    host_dir: skills.join("custom/c"),
                },
            ],
            disabled: vec!["/mnt/skills/public/off".into()],
        })
        .await
        .unwrap();
    assert_eq!(
        sb.read_bytes("/mnt/skills/public/a/SKILL.md", 100)
            .await
            .unwrap(),
        b"skill public/a"
    );
    let l = sb.list_dir("/mnt/skills", 2).await.unwrap();
    assert_eq!(
        l,
        [
            "/mnt/skills/custom/",
            "/mnt/skills/custom/c/",
            "/mnt/skills/public/",
            "/mnt/skills/public/a/"
        ]
    );
    let l = sb.list_dir("/mnt/skills/public", 2).await.unwrap();
    assert_eq!(
        l,
        ["/mnt/skills/public/a/", "/mnt/skills/public/a/SKILL.md"]
    );
    match sb.read_bytes("/mnt/skills/public/off/SKILL.md", 100).await {
        Err(SandboxError::SkillDisabled(n)) => assert_eq!(n, "off"),
        other => panic!("{other:?}"),
    }
    for p in [
        "/mnt/skills/public/a/SKILL.md",
        "/mnt/skills/public/a/new.md",
        "/mnt/skills/x",
        "/mnt/skills",
    ] {
        match sb.write_text(p, "pwned", false).await {
            Err(SandboxError::PermissionDenied(d)) => assert!(d.contains("skills path"), "{d}"),
            other => panic!("{p}: {other:?}"),
        }
    }
    assert_eq!(
        std::fs::read_to_string(skills.join("public/a/SKILL.md")).unwrap(),
        "skill public/a"
    );
    let (g, _) = sb
        .glob("/mnt/skills", "**/SKILL.md", false, 10)
        .await
        .unwrap();
    assert_eq!(
        g,
        [
            "/mnt/skills/custom/c/SKILL.md",
            "/mnt/skills/public/a/SKILL.md"
        ]
    );
    let (g, _) = sb.glob("/mnt/skills", "public/*", true, 10).await.unwrap();
    assert_eq!(g, ["/mnt/skills/public/a"]);
    let (m, _) = sb
        .grep("/mnt/skills", "skill", grep_opts(10))
        .await
        .unwrap();
    let paths: Vec<&str> = m.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/mnt/skills/custom/c/SKILL.md",
            "/mnt/skills/public/a/SKILL.md"
        ]
    );
    // Host paths of skills are masked back.
    let host = skills
        .join("public/a/SKILL.md")
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        sb.mask(&format!("at {host}")),
        "at /mnt/skills/public/a/SKILL.md"
    );
    // Bad views are refused.
    for bad in ["../x", "/abs", "a//b", "/mnt/skills/../x"] {
        let v = SkillsView {
            enabled: vec![SkillMount {
                subpath: bad.into(),
                host_dir: skills.clone(),
            }],
            disabled: vec![],
        };
        assert!(e.provider.set_skills(v).await.is_err(), "{bad}");
    }
}

#[tokio::test]
async fn custom_mounts_honour_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    let rw = dir.path().join("rw");
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::create_dir_all(&rw).unwrap();
    std::fs::write(ro.join("data.csv"), "a,b").unwrap();
    let e = env_with(|s, _| {
        s.app.sandbox.mounts = vec![
            MountConfig {
                host_path: ro.to_string_lossy().into(),
                container_path: "/mnt/data".into(),
                read_only: true,
            },
            MountConfig {
                host_path: rw.to_string_lossy().into(),
                container_path: "/mnt/scratch".into(),
                read_only: false,
            },
        ];
    });
    let sb = e.sandbox("t1").await;
    assert_eq!(
        sb.read_bytes("/mnt/data/data.csv", 100).await.unwrap(),
        b"a,b"
    );
    match sb.write_text("/mnt/data/x", "x", false).await {
        Err(SandboxError::PermissionDenied(d)) => assert!(d.contains("read-only mount"), "{d}"),
        other => panic!("{other:?}"),
    }
    sb.write_text("/mnt/scratch/y.txt", "y", false)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(rw.join("y.txt")).unwrap(), "y");
    assert!(matches!(
        sb.read_bytes("/mnt/data/../ro/data.csv", 100).await,
        Err(SandboxError::PermissionDenied(_))
    ));
}

#[test]
fn invalid_custom_mounts_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    for (host, container) in [
        ("/srv", "/"),
        ("/srv", "/mnt/user-data/workspace/x"),
        ("/srv", "/mnt"),
        ("/srv", "/etc/x"),
        ("/srv", "/mnt/skills/x"),
        ("/", "/mnt/root"),
        ("relative", "/mnt/rel"),
        ("/srv", "/mnt/../etc"),
    ] {
        let mut s = crate::common::settings(dir.path());
        s.app.sandbox.mounts = vec![MountConfig {
            host_path: host.into(),
            container_path: container.into(),
            read_only: true,
        }];
        assert!(
            fawn_sandbox::LocalSandboxProvider::new(&s).is_err(),
            "{host} -> {container} accepted"
        );
    }
}

#[tokio::test]
async fn glob_and_grep_behaviour() {
    let e = env();
    let sb = e.sandbox("t1").await;
    let ws = "/mnt/user-data/workspace";
    for (p, c) in [
        ("src/main.py", "import os\nprint('Hello')\n"),
        ("src/pkg/util.py", "def hello():\n    return 1\n"),
        ("README.md", "hello world\n"),
        ("node_modules/x/index.js", "hello\n"),
        ("build.log", "hello\n"),
    ] {
        sb.write_text(&format!("{ws}/{p}"), c, false).await.unwrap();
    }
    sb.write_bytes(&format!("{ws}/bin.dat"), b"hello\0world")
        .await
        .unwrap();
    let long = format!("{}hello{}", "x".repeat(300), "y".repeat(10));
    sb.write_text(&format!("{ws}/long.txt"), &long, false)
        .await
        .unwrap();
    let (g, t) = sb.glob(ws, "**/*.py", false, 100).await.unwrap();
    assert_eq!(
        g,
        [format!("{ws}/src/main.py"), format!("{ws}/src/pkg/util.py")]
    );
    assert!(!t);
    let (g, _) = sb.glob(ws, "*.py", false, 100).await.unwrap();
    assert_eq!(g.len(), 2);
    let (g, _) = sb.glob(ws, "src/*.py", false, 100).await.unwrap();
    assert_eq!(g, [format!("{ws}/src/main.py")]);
    let (g, _) = sb.glob(ws, "src*", true, 100).await.unwrap();
    assert_eq!(g, [format!("{ws}/src")]);
    let (g, t) = sb.glob(ws, "**/*", false, 2).await.unwrap();
    assert_eq!(g.len(), 2);
    assert!(t);
    assert!(
        matches!(sb.glob(ws, "[", false, 10).await, Err(SandboxError::Invalid(m)) if m.starts_with("Invalid glob pattern"))
    );
    assert!(matches!(
        sb.glob(&format!("{ws}/README.md"), "*", false, 10).await,
        Err(SandboxError::NotADirectory(_))
    ));
    assert!(matches!(
        sb.glob(&format!("{ws}/none"), "*", false, 10).await,
        Err(SandboxError::NotFound(_))
    ));

    let (m, _) = sb.grep(ws, "hello", grep_opts(100)).await.unwrap();
    let got: Vec<String> = m
        .iter()
        .map(|m| format!("{}:{}", m.path, m.line_number))
        .collect();
    assert_eq!(
        got,
        [
            format!("{ws}/README.md:1"),
            format!("{ws}/long.txt:1"),
            format!("{ws}/src/main.py:2"),
            format!("{ws}/src/pkg/util.py:1"),
        ]
    );
    let long_hit = &m[1].line;
    assert_eq!(long_hit.chars().count(), 200);
    assert!(long_hit.ends_with("..."));
    let (m, _) = sb
        .grep(
            ws,
            "hello",
            GrepOptions {
                case_sensitive: true,
                max_results: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(m.len(), 3);
    let (m, _) = sb
        .grep(
            ws,
            "print(",
            GrepOptions {
                literal: true,
                max_results: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(m.len(), 1);
    let (m, _) = sb
        .grep(
            ws,
            "hello",
            GrepOptions {
                glob: Some("**/*.py".into()),
                max_results: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(m.len(), 2);
    let (m, t) = sb.grep(ws, "hello", grep_opts(1)).await.unwrap();
    assert_eq!(m.len(), 1);
    assert!(t);
    let (m, t) = sb
        .grep(&format!("{ws}/README.md"), "world", grep_opts(10))
        .await
        .unwrap();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].path, format!("{ws}/README.md"));
    assert!(!t);
    assert!(
        matches!(sb.grep(ws, "(", grep_opts(10)).await, Err(SandboxError::Invalid(m)) if m.starts_with("Invalid regex pattern"))
    );
}

#[tokio::test]
async fn masking_and_errors_never_show_host_paths() {
    let e = env();
    let sb = e.sandbox("t1").await;
    let p = sb.paths().clone();
    let text = format!(
        "{}/a.txt {} {}/x,{} /mnt/user-data-backup/y {}-backup",
        p.workspace.display(),
        p.outputs.display(),
        p.uploads.display(),
        p.user_data.display(),
        p.user_data.display()
    );
    assert_eq!(
        sb.mask(&text),
        format!(
            "/mnt/user-data/workspace/a.txt /mnt/user-data/outputs /mnt/user-data/uploads/x,/mnt/user-data /mnt/user-data-backup/y {}-backup",
            p.user_data.display()
        )
    );
    let home = e.home().to_string_lossy().into_owned();
    for r in [
        sb.read_bytes("/mnt/user-data/workspace/none", 1)
            .await
            .err(),
        sb.list_dir("/mnt/user-data/workspace/none", 1).await.err(),
        sb.read_bytes("/etc/passwd", 1).await.err(),
        sb.write_text("/mnt/user-data/workspace", "x", false)
            .await
            .err(),
    ] {
        let msg = r.expect("an error").to_string();
        assert!(!msg.contains(&home), "{msg}");
    }
}

#[tokio::test]
async fn fifo_and_hardlink_destinations_are_refused() {
    let e = env();
    let sb = e.sandbox("t1").await;
    let ws = sb.paths().workspace.clone();
    let st = std::process::Command::new("mkfifo")
        .arg(ws.join("pipe"))
        .status()
        .unwrap();
    assert!(st.success());
    // Neither blocks nor succeeds.
    assert!(
        sb.read_bytes("/mnt/user-data/workspace/pipe", 10)
            .await
            .is_err()
    );
    assert!(
        sb.write_text("/mnt/user-data/workspace/pipe", "x", false)
            .await
            .is_err()
    );
    let outside = e.dir.path().join("outside.txt");
    std::fs::write(&outside, "keep").unwrap();
    std::fs::hard_link(&outside, ws.join("hl")).unwrap();
    assert!(matches!(
        sb.write_text("/mnt/user-data/workspace/hl", "pwned", false)
            .await,
        Err(SandboxError::PermissionDenied(_))
    ));
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
}

#[tokio::test]
async fn concurrent_writers_with_path_lock_do_not_lose_updates() {
    let e = env();
    let sb = e.sandbox("t1").await;
    let path = "/mnt/user-data/workspace/counter.txt";
    sb.write_text(path, "", false).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let sb = sb.clone();
        tasks.push(tokio::spawn(async move {
            let _g = sb.lock_path("/mnt/user-data/workspace/./counter.txt").await;
            let mut s = String::from_utf8(sb.read_bytes(path, 1000).await.unwrap()).unwrap();
            tokio::task::yield_now().await;
            s.push('x');
            sb.write_text(path, &s, false).await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(sb.read_bytes(path, 1000).await.unwrap().len(), 20);
}
