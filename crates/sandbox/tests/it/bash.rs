//! bash inside bubblewrap: what a command can and cannot do. These tests need `bwrap`
//! (installed by `.ci/run` and the Dockerfile); they fail, not skip, without it.

use crate::common::{env, env_with, eventually, processes_of_uid, processes_with};
use fawn_sandbox::output::render_bash_output;
use fawn_sandbox::{BashMode, ExecOptions, ExecOutput, Sandbox, SandboxError, SandboxProvider};
use std::sync::Arc;
use std::time::Duration;

async fn run(sb: &Arc<dyn Sandbox>, cmd: &str) -> ExecOutput {
    sb.execute(cmd, ExecOptions::default())
        .await
        .expect("execute")
}

async fn run_t(sb: &Arc<dyn Sandbox>, cmd: &str, secs: u64) -> ExecOutput {
    let opts = ExecOptions {
        timeout: Some(Duration::from_secs(secs)),
        ..Default::default()
    };
    sb.execute(cmd, opts).await.expect("execute")
}

#[tokio::test]
async fn bubblewrap_is_used() {
    let e = env();
    assert_eq!(e.provider.bash_mode().await, BashMode::Sandboxed);
    let sb = e.sandbox("t1").await;
    let out = run(&sb, "pwd; echo hi >&2; exit 3").await;
    assert_eq!(out.stdout, "/mnt/user-data/workspace\n");
    assert_eq!(out.stderr, "hi\n");
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(
        render_bash_output(&out, 20_000),
        "/mnt/user-data/workspace\n\nStd Error:\nhi\n\nExit Code: 3"
    );
    let out = run(&sb, "true").await;
    assert_eq!(render_bash_output(&out, 20_000), "(no output)");
}

#[tokio::test]
async fn files_are_shared_with_the_file_tools() {
    let e = env();
    let sb = e.sandbox("t1").await;
    sb.write_text("/mnt/user-data/workspace/in.txt", "from tools\n", false)
        .await
        .unwrap();
    let out = run(&sb, "cat in.txt && echo edited >> in.txt && echo out > /mnt/user-data/outputs/o.txt && ls /mnt/user-data").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "from tools\noutputs\nuploads\nworkspace\n");
    assert_eq!(
        sb.read_bytes("/mnt/user-data/workspace/in.txt", 100)
            .await
            .unwrap(),
        b"from tools\nedited\n"
    );
    assert_eq!(
        sb.read_bytes("/mnt/user-data/outputs/o.txt", 100)
            .await
            .unwrap(),
        b"out\n"
    );
}

#[tokio::test]
async fn etc_shadow_is_unreadable() {
    let e = env();
    let sb = e.sandbox("t1").await;
    let out = run(&sb, "cat /etc/shadow; cat /etc/gshadow; id -u").await;
    assert!(!out.stdout.contains("root:"), "{out:?}");
    assert_ne!(out.stdout.trim(), "0", "runs as root: {out:?}");
    let out = run(&sb, "head -c 100 /etc/shadow | wc -c").await;
    assert_eq!(out.stdout.trim(), "0", "{out:?}");
}

#[tokio::test]
async fn other_threads_files_are_invisible() {
    let e = env();
    let a = e.sandbox("thread-a").await;
    let b = e.sandbox("thread-b").await;
    b.write_text("/mnt/user-data/workspace/secret.txt", "B-SECRET", false)
        .await
        .unwrap();
    let b_host = b
        .paths()
        .workspace
        .join("secret.txt")
        .to_string_lossy()
        .into_owned();
    let home = e.home().to_string_lossy().into_owned();
    let cmd = format!(
        "cat {b_host}; ls {home}; ls /mnt/user-data/..; find / \\( -path /proc -o -path /usr -o -path /sys \\) -prune -o -name secret.txt -print 2>/dev/null; grep -rs --devices=skip B-SECRET /mnt /tmp /etc /dev/shm; echo done"
    );
    let out = run_t(&a, &cmd, 120).await;
    assert!(
        !out.stdout.contains("B-SECRET") && !out.stderr.contains("B-SECRET"),
        "{out:?}"
    );
    assert!(out.stdout.ends_with("done\n"), "{out:?}");
    // Control: the same probe in B does find it.
    let out = run_t(&b, &cmd, 120).await;
    assert!(
        out.stdout
            .contains("/mnt/user-data/workspace/secret.txt:B-SECRET"),
        "{out:?}"
    );
    // A symlink planted from inside A towards B's host path leads nowhere.
    let out = run(&a, &format!("ln -s {b_host} link && cat link")).await;
    assert!(!out.stdout.contains("B-SECRET"), "{out:?}");
    assert!(matches!(
        a.read_bytes("/mnt/user-data/workspace/link", 100).await,
        Err(SandboxError::PermissionDenied(_))
    ));
}

#[tokio::test]
async fn writes_outside_user_data_fail() {
    let e = env();
    let skills = e.dir.path().join("skills/public/a");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::write(skills.join("SKILL.md"), "orig").unwrap();
    e.provider
        .set_skills(fawn_sandbox::SkillsView {
            enabled: vec![fawn_sandbox::SkillMount {
                subpath: "public/a".into(),
                host_dir: skills.clone(),
            }],
            disabled: vec![],
        })
        .await
        .unwrap();
    let sb = e.sandbox("t1").await;
    let marker = format!("fawn-escape-{}", std::process::id());
    let targets = [
        format!("/etc/{marker}"),
        format!("/usr/{marker}"),
        format!("/{marker}"),
        format!("/mnt/{marker}"),
        format!("/mnt/user-data/{marker}"),
        format!("/mnt/skills/{marker}"),
        "/mnt/skills/public/a/SKILL.md".to_string(),
        format!("{}/{marker}", e.home().display()),
    ];
    for t in &targets {
        let out = run(&sb, &format!("echo pwned > {t} && echo WROTE")).await;
        assert!(!out.stdout.contains("WROTE"), "{t}: {out:?}");
    }
    assert_eq!(
        std::fs::read_to_string(skills.join("SKILL.md")).unwrap(),
        "orig"
    );
    for p in [
        format!("/etc/{marker}"),
        format!("/usr/{marker}"),
        format!("/{marker}"),
        format!("{}/{marker}", e.home().display()),
    ] {
        assert!(!std::path::Path::new(&p).exists(), "{p}");
    }
    // Skills are readable.
    let out = run(&sb, "cat /mnt/skills/public/a/SKILL.md").await;
    assert_eq!(out.stdout, "orig");
}

#[tokio::test]
async fn network_is_off_by_default() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cmd = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED");
    let e = env();
    let sb = e.sandbox("t1").await;
    let out = run(&sb, &cmd).await;
    assert!(!out.stdout.contains("CONNECTED"), "{out:?}");
    assert_ne!(out.exit_code, Some(0));
    let out = run(&sb, "cat /proc/net/dev | grep -c :").await;
    assert_eq!(out.stdout.trim(), "1", "only loopback: {out:?}");

    let e = env_with(|s, _| s.app.sandbox.network = true);
    let sb = e.sandbox("t1").await;
    let out = run(&sb, &cmd).await;
    assert!(out.stdout.contains("CONNECTED"), "{out:?}");
    drop(listener);
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let e = env();
    let sb = e.sandbox("t1").await;
    let m = format!("9{}", std::process::id());
    let cmd = format!(
        "sleep {m}1 & setsid sleep {m}2 & nohup sleep {m}3 >/dev/null 2>&1 & (sleep {m}4 &) ; echo started; sleep {m}5"
    );
    let start = std::time::Instant::now();
    let out = run_t(&sb, &cmd, 2).await;
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.stdout, "started\n");
    let text = render_bash_output(&out, 20_000);
    assert!(
        text.contains("Command timed out after 2 seconds and was terminated."),
        "{text}"
    );
    assert!(text.ends_with("\nExit Code: 124"));
    assert!(
        eventually(Duration::from_secs(5), || processes_with(&m).is_empty()).await,
        "left behind: {:?}",
        processes_with(&m)
    );
}

#[tokio::test]
async fn background_processes_do_not_outlive_the_command() {
    let e = env();
    let sb = e.sandbox("t1").await;
    let m = format!("8{}", std::process::id());
    let out = run(&sb, &format!("(sleep {m}1 &); setsid sleep {m}2 & echo ok")).await;
    assert_eq!(out.stdout, "ok\n");
    assert!(!out.timed_out);
    assert!(
        eventually(Duration::from_secs(5), || processes_with(&m).is_empty()).await,
        "left behind: {:?}",
        processes_with(&m)
    );
}

#[tokio::test]
async fn dropping_the_call_kills_the_command() {
    let e = env();
    let sb = e.sandbox("t1").await;
    let m = format!("7{}", std::process::id());
    let cmd = format!("sleep {m}1 & sleep {m}2");
    let fut = sb.execute(&cmd, ExecOptions::default());
    let r = tokio::time::timeout(Duration::from_millis(700), fut).await;
    assert!(r.is_err(), "command finished early");
    assert!(
        eventually(Duration::from_secs(5), || processes_with(&m).is_empty()).await,
        "left behind: {:?}",
        processes_with(&m)
    );
}

#[tokio::test]
async fn fork_bomb_is_contained() {
    let e = env();
    let sb = e.sandbox("bomb").await;
    let id = e.provider.acquire("bomb").await.unwrap();
    let uid = e.provider.get_local(&id).unwrap().owner().map(|o| o.0);
    let out = run_t(&sb, "bomb() { bomb | bomb & }; bomb; sleep 30", 4).await;
    assert!(out.timed_out || out.exit_code.is_some());
    if let Some(uid) = uid {
        assert!(
            eventually(Duration::from_secs(10), || processes_of_uid(uid) == 0).await,
            "{} processes of uid {uid} left",
            processes_of_uid(uid)
        );
        // The cap held: never more than the per-thread limit (checked from inside).
        let out = run(&sb, "ulimit -u").await;
        assert_eq!(out.stdout.trim(), "512");
    }
    // The sandbox still works afterwards, and so does another thread's.
    assert_eq!(run(&sb, "echo alive").await.stdout, "alive\n");
    let other = e.sandbox("other").await;
    assert_eq!(run(&other, "echo alive").await.stdout, "alive\n");
}

#[tokio::test]
async fn environment_is_scrubbed_and_secrets_redacted() {
    let e = env_with(|s, _| {
        s.app
            .sandbox
            .environment
            .insert("FROM_CONFIG".into(), "cfg-value".into());
    });
    let sb = e.sandbox("t1").await;
    let out = run(&sb, "env | sort").await;
    let names: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.split('=').next())
        .collect();
    for n in &names {
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "TMPDIR",
                "PWD",
                "SHLVL",
                "_",
                "FROM_CONFIG"
            ]
            .contains(n),
            "unexpected variable {n} in {names:?}"
        );
    }
    assert!(out.stdout.contains("HOME=/mnt/user-data/workspace"));
    assert!(out.stdout.contains("FROM_CONFIG=cfg-value"));
    let opts = ExecOptions {
        env: vec![
            ("API_TOKEN".into(), "supersecretvalue123".into()),
            ("PIN".into(), "1234".into()),
        ],
        ..Default::default()
    };
    let out = sb
        .execute("echo $API_TOKEN $PIN; echo $API_TOKEN >&2", opts)
        .await
        .unwrap();
    assert_eq!(out.stdout, "[redacted] 1234\n");
    assert_eq!(out.stderr, "[redacted]\n");
    let bad = ExecOptions {
        env: vec![("BAD NAME".into(), "x".into())],
        ..Default::default()
    };
    assert!(matches!(
        sb.execute("true", bad).await,
        Err(SandboxError::Invalid(_))
    ));
}

#[tokio::test]
async fn output_is_masked_and_bounded() {
    let e = env();
    let sb = e.sandbox("t1").await;
    let host_ws = sb.paths().workspace.to_string_lossy().into_owned();
    let out = run(
        &sb,
        &format!("echo {host_ws}/a.txt; echo /mnt/user-data-backup/x"),
    )
    .await;
    assert_eq!(
        out.stdout,
        "/mnt/user-data/workspace/a.txt\n/mnt/user-data-backup/x\n"
    );
    // 5 MB of output: memory stays bounded, both ends kept, exact skip count.
    let out = run(&sb, "for i in $(seq 1 200000); do echo line$i; done").await;
    let text = render_bash_output(&out, 20_000);
    assert!(text.chars().count() <= 20_000);
    assert!(text.starts_with("line1\nline2\n"));
    assert!(text.ends_with("line200000\n"));
    let total: usize = (1..=200_000)
        .map(|i: usize| format!("line{i}\n").len())
        .sum();
    let kept = text.chars().count()
        - text
            .lines()
            .find(|l| l.contains("middle truncated"))
            .unwrap()
            .len()
        - 2;
    assert!(
        text.contains(&format!(
            "[middle truncated: {} chars skipped]",
            total - kept
        )),
        "{}",
        &text[..200]
    );
}

#[tokio::test]
async fn missing_bubblewrap_refuses_bash() {
    let e = env_with(|_, o| o.bwrap_path = Some("/nonexistent/bwrap".into()));
    let sb = e.sandbox("t1").await;
    match e.provider.bash_mode().await {
        BashMode::Unavailable(m) => assert!(m.contains("bubblewrap"), "{m}"),
        other => panic!("{other:?}"),
    }
    match sb.execute("echo hi", ExecOptions::default()).await {
        Err(SandboxError::Unavailable(m)) => {
            assert!(
                m.contains("bubblewrap") && m.contains("allow_host_bash"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn host_bash_only_when_explicitly_allowed() {
    let e = env_with(|s, o| {
        o.bwrap_path = Some("/nonexistent/bwrap".into());
        s.app.sandbox.allow_host_bash = true;
    });
    assert!(matches!(e.provider.bash_mode().await, BashMode::Host(_)));
    let sb = e.sandbox("t1").await;
    let out = run(&sb, "pwd; echo data > /mnt/user-data/outputs/h.txt; cat /mnt/user-data/outputs/h.txt; echo https://example.com/api/v1; ls /dev/null").await;
    assert_eq!(
        out.stdout, "/mnt/user-data/workspace\ndata\nhttps://example.com/api/v1\n/dev/null\n",
        "{out:?}"
    );
    assert_eq!(
        std::fs::read_to_string(sb.paths().outputs.join("h.txt")).unwrap(),
        "data\n"
    );
    // DeerFlow's best-effort path guard (§11.1 item 28); not a boundary.
    for (cmd, want) in [
        (
            "cat /etc/passwd",
            "Unsafe absolute paths in command: /etc/passwd",
        ),
        (
            "cat file:///etc/passwd",
            "Unsafe file:// URL in command: file:///etc/passwd",
        ),
        ("cd .. && ls", "Access denied: path traversal detected"),
        (
            "ls /mnt/user-data-backup",
            "Unsafe absolute paths in command: /mnt/user-data-backup",
        ),
    ] {
        match sb.execute(cmd, ExecOptions::default()).await {
            Err(SandboxError::Invalid(m)) => assert!(m.starts_with(want), "{cmd}: {m}"),
            other => panic!("{cmd}: {other:?}"),
        }
    }
    // Timeouts still kill the whole group.
    let m = format!("6{}", std::process::id());
    let out = run_t(&sb, &format!("sleep {m}1 & sleep {m}2"), 1).await;
    assert!(out.timed_out);
    assert!(
        eventually(Duration::from_secs(5), || processes_with(&m).is_empty()).await,
        "left behind: {:?}",
        processes_with(&m)
    );
}

#[tokio::test]
async fn custom_mounts_inside_bash() {
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    let rw = dir.path().join("rw");
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::create_dir_all(&rw).unwrap();
    std::fs::write(ro.join("data.csv"), "a,b\n").unwrap();
    // The sandboxed uid must be able to write the read-write mount.
    std::process::Command::new("chmod")
        .arg("0777")
        .arg(&rw)
        .status()
        .unwrap();
    let e = env_with(|s, _| {
        s.app.sandbox.mounts = vec![
            fawn_config::MountConfig {
                host_path: ro.to_string_lossy().into(),
                container_path: "/mnt/data".into(),
                read_only: true,
            },
            fawn_config::MountConfig {
                host_path: rw.to_string_lossy().into(),
                container_path: "/mnt/scratch".into(),
                read_only: false,
            },
        ];
    });
    let sb = e.sandbox("t1").await;
    let out = run(&sb, "cat /mnt/data/data.csv; echo x > /mnt/data/new 2>/dev/null || echo ro-refused; echo y > /mnt/scratch/y.txt && echo rw-ok").await;
    assert_eq!(out.stdout, "a,b\nro-refused\nrw-ok\n", "{out:?}");
    assert!(!ro.join("new").exists());
    assert_eq!(std::fs::read_to_string(rw.join("y.txt")).unwrap(), "y\n");
    let host = ro.join("data.csv").to_string_lossy().into_owned();
    assert_eq!(sb.mask(&host), "/mnt/data/data.csv");
}

#[tokio::test]
async fn broken_bubblewrap_refuses_bash() {
    // An executable that exits non-zero stands in for a bwrap that cannot create namespaces.
    let e = env_with(|_, o| o.bwrap_path = Some("/bin/false".into()));
    let sb = e.sandbox("t1").await;
    match sb.execute("echo hi", ExecOptions::default()).await {
        Err(SandboxError::Unavailable(m)) => {
            assert!(m.contains("cannot create a sandbox"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    let e = env_with(|s, o| {
        o.bwrap_path = Some("/bin/false".into());
        s.app.sandbox.allow_host_bash = true;
    });
    assert!(
        matches!(e.provider.bash_mode().await, BashMode::Host(m) if m.contains("cannot create a sandbox"))
    );
}

#[tokio::test]
async fn memory_file_size_and_cpu_are_limited() {
    let e = env_with(|s, _| {
        s.app.sandbox.memory_limit_mb = 256;
        s.app.sandbox.file_size_limit_mb = 8;
        s.app.sandbox.cpu_time_limit_seconds = 2;
    });
    let sb = e.sandbox("t1").await;
    // 3 GiB at once: refused by the data limit, the host is not touched.
    let out = run(
        &sb,
        "python3 -c 'b = bytearray(3 * 1024**3); print(\"allocated\", len(b))'",
    )
    .await;
    assert!(!out.stdout.contains("allocated"), "{out:?}");
    assert!(out.stderr.contains("MemoryError"), "{out:?}");
    assert_ne!(out.exit_code, Some(0));
    // Small allocations still work.
    let out = run(
        &sb,
        "python3 -c 'b = bytearray(64 * 1024**2); print(len(b))'",
    )
    .await;
    assert_eq!(out.stdout.trim(), "67108864", "{out:?}");
    // A file past the size limit stops at it.
    let out = run(
        &sb,
        "head -c 20M /dev/zero > big.bin; echo status $?; stat -c %s big.bin",
    )
    .await;
    assert!(
        out.stdout.contains("status 1") || !out.stdout.contains("status 0"),
        "{out:?}"
    );
    assert!(out.stdout.trim_end().ends_with("8388608"), "{out:?}");
    // A command cannot raise its limits.
    let out = run(&sb, "ulimit -d unlimited; echo raised $?; ulimit -d").await;
    assert!(!out.stdout.contains("raised 0"), "{out:?}");
    assert!(out.stdout.trim_end().ends_with("262144"), "{out:?}");
    // A CPU hog is stopped after its CPU seconds (SIGXCPU), long before the wall timeout.
    let out = run_t(&sb, "while :; do :; done", 60).await;
    assert!(!out.timed_out, "{out:?}");
    assert!(
        matches!(out.exit_code, Some(c) if c != 0),
        "stopped by the kernel: {out:?}"
    );
}

#[tokio::test]
async fn the_workspace_quota_stops_writes_but_not_cleanup() {
    let e = env_with(|s, _| {
        s.app.sandbox.workspace_quota_mb = 1;
    });
    let sb = e.sandbox("t1").await;
    let half = "x".repeat(600 * 1024);
    sb.write_text("/mnt/user-data/workspace/a.txt", &half, false)
        .await
        .expect("under the quota");
    let err = sb
        .write_text("/mnt/user-data/workspace/b.txt", &half, false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("workspace quota"), "{err}");
    // A command may pass it once; it is told, and the next one cannot write.
    let out = run(&sb, "head -c 2M /dev/zero > big.bin; echo done").await;
    assert!(out.stderr.contains("workspace quota"), "{out:?}");
    let out = run(&sb, "echo more > more.txt; echo status $?; ls").await;
    assert!(!out.stdout.contains("status 0"), "{out:?}");
    assert!(out.stderr.contains("workspace quota"), "{out:?}");
    // Deleting is still possible, and then writing works again.
    run(&sb, "rm big.bin a.txt more.txt").await;
    let out = run(&sb, "echo more > more.txt; echo status $?").await;
    assert!(out.stdout.contains("status 0"), "{out:?}");
    assert!(!out.stderr.contains("quota"), "{out:?}");
}

/// Every command is counted by how it ended, and the limits it ran into
/// (`fawn_sandbox_commands_total`, `fawn_sandbox_limits_hit_total`). Other tests of this
/// binary run commands too, so the counters grow by at least what this one did.
#[tokio::test]
async fn commands_and_the_limits_they_hit_are_counted() {
    let m = fawn_telemetry::metrics();
    let exits = |k: &str| m.sandbox_commands.with_label_values(&[k]).get();
    let limits = |k: &str| m.sandbox_limits.with_label_values(&[k]).get();
    let before = (
        exits("ok"),
        exits("nonzero"),
        exits("timeout"),
        limits("timeout"),
        m.sandbox_duration.get_sample_count(),
    );
    let e = env();
    let sb = e.sandbox("t1").await;
    assert_eq!(run(&sb, "true").await.exit_code, Some(0));
    assert_eq!(run(&sb, "exit 7").await.exit_code, Some(7));
    assert!(run_t(&sb, "sleep 30", 1).await.timed_out);
    assert!(exits("ok") > before.0);
    assert!(exits("nonzero") > before.1);
    assert!(exits("timeout") > before.2);
    assert!(limits("timeout") > before.3);
    assert!(m.sandbox_duration.get_sample_count() >= before.4 + 3);
}
