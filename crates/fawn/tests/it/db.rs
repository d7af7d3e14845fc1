//! `fawn db`: a backup of a running server restores on a new one; stats and vacuum.

use fawn_testkit::{Behavior, MockConfig, MockLlm};
use futures::StreamExt;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) struct Fawn {
    child: Child,
    addr: String,
}

impl Drop for Fawn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Fawn {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

pub(crate) fn fawn(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fawn"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("FAWN_HOME", home.join("fawn"))
        .env("FAWN_LOG", "info");
    c
}

fn write_config(home: &Path, mock: &MockLlm) -> std::path::PathBuf {
    let path = home.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "models:\n  - name: mock\n    use: langchain_openai:ChatOpenAI\n    model: fawn-mock\n    \
             base_url: {}\n    api_key: k\n    max_retries: 0\n\
             title:\n  enabled: false\nmemory:\n  enabled: false\n",
            mock.base_url()
        ),
    )
    .unwrap();
    path
}

pub(crate) fn serve(home: &Path, config: &Path) -> Fawn {
    let mut child = fawn(home)
        .args(["serve", "--no-auth", "--port", "0", "--config"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("listening on http://").nth(1)
                && let Some(tx) = tx.take()
            {
                let addr = rest.split_whitespace().next().unwrap_or_default();
                let _ = tx.send(addr.to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the server announces its address");
    Fawn { child, addr }
}

pub(crate) async fn json_of(r: reqwest::RequestBuilder) -> Value {
    let resp = r.send().await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.json().await.unwrap()
}

async fn history_ids(http: &reqwest::Client, f: &Fawn, thread: &str) -> Vec<String> {
    let h = json_of(
        http.post(f.url(&format!("/threads/{thread}/history")))
            .json(&json!({"limit": 1000})),
    )
    .await;
    h.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c["checkpoint"]["checkpoint_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

fn run_db(home: &Path, config: &Path, args: &[&str]) -> (bool, String, String) {
    let out = fawn(home)
        .arg("db")
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// `fawn db backup` while 16 runs stream: a new server started on the copy serves every
/// thread with every checkpoint that the first server had acknowledged before the backup
/// began, and takes new runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_taken_while_runs_stream_restores_on_a_new_server() {
    let mock = MockLlm::start_with(
        MockConfig::default()
            .with_behavior(Behavior::Echo)
            .with_chunk_delay(Duration::from_millis(15)),
    )
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let config = write_config(home.path(), &mock);
    let server = serve(home.path(), &config);
    let http = fawn_net::client();
    let mut threads = Vec::new();
    for i in 0..16 {
        let t = json_of(http.post(server.url("/threads")).json(&json!({}))).await;
        let tid = t["thread_id"].as_str().unwrap().to_string();
        // One finished turn each before the streams start.
        json_of(
            http.post(server.url(&format!("/threads/{tid}/runs/wait")))
                .json(&json!({"assistant_id": "lead_agent",
                    "input": {"messages": [{"role": "user", "content": format!("first {i}")}]}})),
        )
        .await;
        threads.push(tid);
    }
    // 16 streams, each answered word by word, slowly; each says when its first event came.
    let (started_tx, mut started_rx) = tokio::sync::mpsc::channel::<()>(16);
    let mut streams = Vec::new();
    for tid in &threads {
        let (http, url, started) = (
            http.clone(),
            server.url(&format!("/threads/{tid}/runs/stream")),
            started_tx.clone(),
        );
        let words: Vec<String> = (0..60).map(|w| format!("w{w}")).collect();
        streams.push(tokio::spawn(async move {
            let resp = http
                .post(url)
                .json(&json!({"assistant_id": "lead_agent",
                    "input": {"messages": [{"role": "user", "content": words.join(" ")}]},
                    "stream_mode": ["values", "messages-tuple"]}))
                .send()
                .await
                .unwrap();
            assert!(resp.status().is_success());
            let mut body = resp.bytes_stream();
            let mut told = false;
            let mut all = Vec::new();
            while let Some(chunk) = body.next().await {
                let chunk = chunk.unwrap();
                all.extend_from_slice(&chunk);
                if !told && all.windows(6).any(|w| w == b"event:") {
                    told = true;
                    let _ = started.send(()).await;
                }
            }
            String::from_utf8_lossy(&all).to_string()
        }));
    }
    for _ in 0..16 {
        started_rx.recv().await.unwrap();
    }
    // What the server has acknowledged now (every stream is under way).
    let mut acknowledged = Vec::new();
    for tid in &threads {
        acknowledged.push(history_ids(&http, &server, tid).await);
    }
    let backup = home.path().join("backups").join("fawn-copy.db");
    let (ok, out, err) = run_db(home.path(), &config, &["backup", backup.to_str().unwrap()]);
    assert!(ok, "backup failed: {out} {err}");
    assert!(out.contains("backup written"), "{out}");
    for s in streams {
        let body = s.await.unwrap();
        assert!(!body.contains("event: error"), "{body}");
    }
    drop(server);

    // Restore: the copy as the data of a new home.
    let restored = tempfile::tempdir().unwrap();
    let data = restored.path().join("fawn").join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(&backup, data.join("fawn.db")).unwrap();
    let config2 = write_config(restored.path(), &mock);
    let (ok, out, err) = run_db(restored.path(), &config2, &["stats"]);
    assert!(ok, "stats failed: {out} {err}");
    assert!(out.contains("checkpoints"), "{out}");
    assert!(out.contains("largest threads"), "{out}");
    assert!(out.contains("retention: none configured"), "{out}");
    // What retention would remove: every finished run (of age 0) and its journal rows.
    let (ok, out, err) = run_db(
        restored.path(),
        &config2,
        &["stats", "--runs-days", "0", "--keep-turns", "1"],
    );
    assert!(ok, "stats failed: {out} {err}");
    let line = out
        .lines()
        .skip_while(|l| !l.starts_with("retention (keep_turns 1, runs_days 0)"))
        .nth(1)
        .unwrap_or_else(|| panic!("no estimate: {out}"));
    let runs: u64 = line
        .split(" runs with ")
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(runs >= threads.len() as u64, "{line}");
    let server2 = serve(restored.path(), &config2);
    for (tid, acked) in threads.iter().zip(&acknowledged) {
        let got = history_ids(&http, &server2, tid).await;
        for id in acked {
            assert!(
                got.contains(id),
                "checkpoint {id} of {tid} survived the backup"
            );
        }
    }
    // A working server: a new turn on a restored thread.
    let v = json_of(
        http.post(server2.url(&format!("/threads/{}/runs/wait", threads[0])))
            .json(&json!({"assistant_id": "lead_agent",
                "input": {"messages": [{"role": "user", "content": "after the restore"}]}})),
    )
    .await;
    let last = v["messages"].as_array().unwrap().last().unwrap().clone();
    assert!(
        last["content"].to_string().contains("after the restore"),
        "{last}"
    );
    // A backup onto an existing file is refused.
    let (ok, _, err) = run_db(
        restored.path(),
        &config2,
        &["backup", data.join("fawn.db").to_str().unwrap()],
    );
    assert!(!ok);
    assert!(err.contains("exists already"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vacuum_reports_and_stats_see_incremental_mode() {
    let mock = MockLlm::start().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let config = write_config(home.path(), &mock);
    let out = fawn(home.path())
        .args(["migrate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success());
    let (ok, out, err) = run_db(home.path(), &config, &["vacuum"]);
    assert!(ok, "{out} {err}");
    assert!(out.contains("vacuumed"), "{out}");
    let (ok, out, err) = run_db(home.path(), &config, &["stats"]);
    assert!(ok, "{out} {err}");
    assert!(out.contains("auto_vacuum incremental"), "{out}");
}
