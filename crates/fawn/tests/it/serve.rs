//! `fawn serve` as a process: flags that shape the runtime.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn fawn(home: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fawn"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("FAWN_HOME", home.join("fawn"))
        .env("RUST_LOG", "info");
    c
}

/// One HTTP/1.1 exchange on a fresh connection; returns the status line and the body.
fn request(addr: &str, method: &str, path: &str, body: &str) -> (String, String) {
    request_with(addr, method, path, body, "")
}

/// [`request`] with extra header lines (each ending in `\r\n`).
fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
    headers: &str,
) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         {headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.lines().next().unwrap_or_default().to_string();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    (status, body)
}

/// Starts `fawn serve` as `cmd` describes and returns it with the address it announces.
fn start(cmd: &mut Command) -> (Server, String) {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server(child);
    let stdout = server.0.stdout.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut addr = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            addr = rest.split_whitespace().next().map(str::to_string);
            break;
        }
        assert!(Instant::now() < deadline, "no address announced");
    }
    let addr = addr.expect("the server announces its address");
    (server, addr)
}

#[test]
fn one_worker_serves_requests() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.yaml");
    std::fs::write(
        &config,
        "title:\n  enabled: false\nmemory:\n  enabled: false\n",
    )
    .unwrap();
    let (_server, addr) = start(
        fawn(home.path())
            .args([
                "serve",
                "--no-auth",
                "--port",
                "0",
                "--workers",
                "1",
                "--config",
            ])
            .arg(&config),
    );
    let (status, _) = request(&addr, "GET", "/ok", "");
    assert!(status.contains(" 200 "), "{status}");
    let (status, body) = request(&addr, "POST", "/threads", "{}");
    assert!(status.contains(" 200 "), "{status}");
    assert!(body.contains("thread_id"), "{body}");
}

#[test]
fn zero_workers_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let out = fawn(home.path())
        .args(["serve", "--port", "0", "--workers", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--workers"), "{err}");
}

#[test]
fn a_non_loopback_address_without_auth_needs_the_insecure_flag() {
    let home = tempfile::tempdir().unwrap();
    for how in [&["--no-auth"][..], &[]] {
        let mut cmd = fawn(home.path());
        if how.is_empty() {
            cmd.env("DEER_FLOW_AUTH_DISABLED", "1");
        }
        let out = cmd
            .args(["serve", "--host", "0.0.0.0", "--port", "0"])
            .args(how)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("authentication disabled"), "{err}");
        assert!(err.contains("--insecure-no-auth"), "{err}");
    }
    assert!(
        !home.path().join("fawn").exists(),
        "refused before anything was created"
    );
}

#[test]
fn a_deerflow_config_serves_without_what_fawn_lacks() {
    let home = crate::check_config::deerflow_dir();
    let (_server, addr) = start(
        fawn(home.path())
            .env("FAWN_FIXTURE_OPENAI_KEY", "k")
            .env("GEMINI_API_KEY", "k")
            .env("DEER_FLOW_AUTH_DISABLED", "1")
            .args(["serve", "--port", "0", "--config"])
            .arg(home.path().join("config.yaml")),
    );
    let (status, body) = request(&addr, "GET", "/api/models", "");
    assert!(status.contains(" 200 "), "{status}");
    for served in [
        "\"gpt-example\"",
        "\"gemini-example\"",
        "\"ollama-example\"",
    ] {
        assert!(body.contains(served), "{served}: {body}");
    }
    assert!(!body.contains("codex-example"), "{body}");
}

/// Auth is on by default: anonymous callers get 401, and an operator mints an API key from
/// the command line for an account it creates, while the server runs on the same database.
#[test]
fn auth_is_on_by_default_and_api_keys_come_from_the_cli() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.yaml");
    std::fs::write(
        &config,
        "title:\n  enabled: false\nmemory:\n  enabled: false\n",
    )
    .unwrap();
    // With auth on, any address may be used.
    let (_server, addr) = start(
        fawn(home.path())
            .args(["serve", "--host", "0.0.0.0", "--port", "0", "--config"])
            .arg(&config),
    );
    let port = addr.rsplit(':').next().unwrap();
    let local = format!("127.0.0.1:{port}");
    let (status, _) = request(&local, "GET", "/ok", "");
    assert!(status.contains(" 200 "), "{status}");
    // Beyond loopback the first start makes no key unless asked (--first-admin-key).
    assert!(!home.path().join("fawn").join("admin_api_key").exists());
    let (status, body) = request(&local, "POST", "/threads", "{}");
    assert!(status.contains(" 401 "), "{status} {body}");

    let out = fawn(home.path())
        .args(["user", "add", "ops@example.com", "--admin", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = fawn(home.path())
        .args([
            "api-key",
            "create",
            "ops@example.com",
            "--name",
            "ci",
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(key.starts_with("fawn_"), "{key}");
    let header = format!("x-api-key: {key}\r\n");
    let (status, body) = request_with(&local, "POST", "/threads", "{}", &header);
    assert!(status.contains(" 200 "), "{status} {body}");
    let (_, me) = request_with(&local, "GET", "/api/v1/auth/me", "", &header);
    assert!(
        me.contains("ops@example.com") && me.contains("admin"),
        "{me}"
    );

    let out = fawn(home.path())
        .args(["api-key", "list", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let listed = String::from_utf8(out.stdout).unwrap();
    assert!(!listed.contains(&key), "keys are never printed again");
    let id = listed.split_whitespace().next().unwrap().to_string();
    let out = fawn(home.path())
        .args(["api-key", "revoke", &id, "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, _) = request_with(&local, "POST", "/threads", "{}", &header);
    assert!(status.contains(" 401 "), "revoked: {status}");
}

/// `fawn serve` on an empty data directory, on loopback: usable at once. The first start
/// creates an admin with an API key and no password, prints the key once (before the
/// address is announced) and keeps it in `{data dir}/admin_api_key`, readable by its owner
/// only; the README's SDK calls then work with that key. A later start prints nothing.
#[test]
fn the_first_start_prints_an_admin_key_that_works() {
    let home = tempfile::tempdir().unwrap();
    let serve = || {
        let mut cmd = fawn(home.path());
        cmd.current_dir(home.path())
            .args(["serve", "--port", "0"])
            .stderr(Stdio::piped());
        cmd
    };
    let (mut server, addr) = start_keeping_stderr(&mut serve());
    let stderr = server.0.stderr.take().unwrap();
    let mut banner = String::new();
    let mut key = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        banner.push_str(&line);
        banner.push('\n');
        if let Some(k) = line.trim().strip_prefix("fawn_") {
            key = Some(format!("fawn_{k}"));
            break;
        }
    }
    let key = key.unwrap_or_else(|| panic!("no key in what serve printed:\n{banner}"));
    assert!(banner.contains("shown only this once"), "{banner}");
    let file = home.path().join("fawn").join("admin_api_key");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("{key}\n"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "only its owner reads the key");
    }

    // Anonymous callers still get 401; the key does what the README's SDK snippet does.
    let (status, _) = request(&addr, "POST", "/threads", "{}");
    assert!(status.contains(" 401 "), "{status}");
    let auth = format!("x-api-key: {key}\r\n");
    let (status, thread) = request_with(&addr, "POST", "/threads", "{}", &auth);
    assert!(status.contains(" 200 "), "{status} {thread}");
    let tid = thread
        .split("\"thread_id\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no thread_id in {thread}"));
    let run = r#"{"assistant_id": "lead_agent",
                  "input": {"messages": [{"role": "user", "content": "Hello, Fawn!"}]},
                  "stream_mode": "messages-tuple"}"#;
    let (status, stream) = request_with(
        &addr,
        "POST",
        &format!("/threads/{tid}/runs/stream"),
        run,
        &auth,
    );
    assert!(status.contains(" 200 "), "{status} {stream}");
    assert!(stream.contains("event: messages"), "{stream}");
    assert!(!stream.contains("event: error"), "{stream}");
    let (status, state) = request_with(&addr, "GET", &format!("/threads/{tid}/state"), "", &auth);
    assert!(status.contains(" 200 "), "{status} {state}");
    assert!(state.contains("Hello, Fawn!"), "{state}");
    // The web UI's setup page is still offered, for this same admin.
    let (_, setup) = request(&addr, "GET", "/api/v1/auth/setup-status", "");
    assert!(setup.contains("\"needs_setup\":true"), "{setup}");
    drop(server);

    // Only once: a later start on the same data prints no key and leaves the file alone.
    let (mut server, addr) = start_keeping_stderr(&mut serve());
    let (status, _) = request_with(&addr, "GET", "/api/v1/auth/me", "", &auth);
    assert!(
        status.contains(" 200 "),
        "the key survives a restart: {status}"
    );
    let stderr = server.0.stderr.take().unwrap();
    let _ = server.0.kill();
    let mut printed = String::new();
    BufReader::new(stderr).read_to_string(&mut printed).unwrap();
    assert!(!printed.contains("fawn_"), "{printed}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("{key}\n"));
}

/// [`start`], with standard error left as `cmd` set it up (piped, to be read).
fn start_keeping_stderr(cmd: &mut Command) -> (Server, String) {
    let child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut server = Server(child);
    let stdout = server.0.stdout.take().unwrap();
    let mut addr = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            addr = rest.split_whitespace().next().map(str::to_string);
            break;
        }
    }
    let addr = addr.expect("the server announces its address");
    (server, addr)
}
