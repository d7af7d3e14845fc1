//! What authentication costs the server per request: the real `fawn serve` (release build),
//! once with authentication off and once with it on, answering the same cheap request
//! (`GET /threads/{id}`) `--requests` times from 8 concurrent clients. The server's CPU
//! (utime + stime from `/proc`) per request with a key or a session cookie, minus the same
//! with authentication off, is what checking the credential costs. Logins are measured
//! apart: they verify an argon2id hash, which is deliberately slow.
//!
//! ```sh
//! cargo build --profile dist -p fawn -p fawn-bench
//! target/dist/auth_cost            # [--requests N] [--logins N]
//! ```

use anyhow::{Context, Result, bail};
use fawn_bench::{Proc, bin, cpu_ms, free_port};
use futures::StreamExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    proc: Proc,
    url: String,
    home: PathBuf,
    config: PathBuf,
}

fn fawn(home: &std::path::Path) -> Result<Command> {
    let mut c = Command::new(bin("fawn")?);
    c.env("FAWN_HOME", home.join("home"))
        .env("RUST_LOG", "error")
        .env_remove("DATABASE_URL")
        .env_remove("DEER_FLOW_AUTH_DISABLED");
    Ok(c)
}

async fn start(auth: bool) -> Result<Server> {
    let home = std::env::temp_dir().join(format!("fawn-auth-cost-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&home)?;
    let config = home.join("config.yaml");
    std::fs::write(
        &config,
        "title:\n  enabled: false\nmemory:\n  enabled: false\n",
    )?;
    let port = free_port()?;
    let mut cmd = fawn(&home)?;
    cmd.args(["serve", "--port", &port.to_string(), "--config"])
        .arg(&config);
    if !auth {
        cmd.arg("--no-auth");
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting fawn serve")?;
    let server = Server {
        proc: Proc(child),
        url: format!("http://127.0.0.1:{port}"),
        home,
        config,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = fawn_net::client();
    while client
        .get(format!("{}/ok", server.url))
        .send()
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            bail!("the server did not start");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(server)
}

/// Runs `n` requests from 8 clients; returns the server's CPU per request in µs.
async fn measure(
    server: &Server,
    n: usize,
    path: &str,
    headers: reqwest::header::HeaderMap,
) -> Result<f64> {
    let client = fawn_net::client_builder()
        .default_headers(headers)
        .build()?;
    let url = format!("{}{path}", server.url);
    // Warm up.
    for _ in 0..200 {
        let r = client.get(&url).send().await?;
        if !r.status().is_success() {
            bail!("{url}: {}", r.status());
        }
    }
    let before = cpu_ms(server.proc.0.id())?;
    let results: Vec<Result<()>> = futures::stream::iter(0..n)
        .map(|_| {
            let client = client.clone();
            let url = url.clone();
            async move {
                let r = client.get(&url).send().await?;
                if !r.status().is_success() {
                    bail!("{}", r.status());
                }
                r.bytes().await?;
                Ok(())
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for r in results {
        r?;
    }
    let after = cpu_ms(server.proc.0.id())?;
    Ok((after - before) * 1000.0 / n as f64)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| -> Result<usize> {
        match args.iter().position(|a| a == name) {
            Some(i) => Ok(args.get(i + 1).context("value")?.parse()?),
            None => Ok(default),
        }
    };
    let n = arg("--requests", 20_000)?;
    let logins = arg("--logins", 20)?;

    // Authentication off: the baseline.
    let off = start(false).await?;
    let client = fawn_net::client();
    let t: serde_json::Value = client
        .post(format!("{}/threads", off.url))
        .json(&serde_json::json!({}))
        .send()
        .await?
        .json()
        .await?;
    let tid = t["thread_id"].as_str().context("thread id")?.to_string();
    let base = measure(&off, n, &format!("/threads/{tid}"), Default::default()).await?;
    drop(off);

    // Authentication on: an admin with a password and an API key.
    let on = start(true).await?;
    let r = client
        .post(format!("{}/api/v1/auth/initialize", on.url))
        .json(&serde_json::json!({"email": "bench@example.com", "password": "bench-password"}))
        .send()
        .await?;
    if r.status().as_u16() != 201 {
        bail!("initialize: {}", r.status());
    }
    let out = fawn(&on.home)?
        .args(["api-key", "create", "bench@example.com", "--config"])
        .arg(&on.config)
        .output()?;
    if !out.status.success() {
        bail!("api-key create: {}", String::from_utf8_lossy(&out.stderr));
    }
    let key = String::from_utf8(out.stdout)?.trim().to_string();
    let mut key_headers = reqwest::header::HeaderMap::new();
    key_headers.insert("x-api-key", key.parse()?);
    let t: serde_json::Value = fawn_net::client_builder()
        .default_headers(key_headers.clone())
        .build()?
        .post(format!("{}/threads", on.url))
        .json(&serde_json::json!({}))
        .send()
        .await?
        .json()
        .await?;
    let tid = t["thread_id"].as_str().context("thread id")?.to_string();
    let path = format!("/threads/{tid}");
    let with_key = measure(&on, n, &path, key_headers).await?;

    let form = [
        ("username", "bench@example.com"),
        ("password", "bench-password"),
    ];
    let body = form
        .iter()
        .map(|(k, v)| format!("{k}={}", v.replace('@', "%40")))
        .collect::<Vec<_>>()
        .join("&");
    let before = cpu_ms(on.proc.0.id())?;
    let started = Instant::now();
    let mut cookie = String::new();
    for _ in 0..logins {
        let r = client
            .post(format!("{}/api/v1/auth/login/local", on.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.clone())
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("login: {}", r.status());
        }
        cookie = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|v| v.split(';').next())
            .collect::<Vec<_>>()
            .join("; ");
    }
    let login_cpu = (cpu_ms(on.proc.0.id())? - before) / logins as f64;
    let login_wall = started.elapsed().as_secs_f64() * 1000.0 / logins as f64;
    let mut cookie_headers = reqwest::header::HeaderMap::new();
    cookie_headers.insert("cookie", cookie.parse()?);
    let with_cookie = measure(&on, n, &path, cookie_headers).await?;

    println!("GET /threads/{{id}}, {n} requests, 8 concurrent clients; server CPU per request:");
    println!("  auth off          {base:8.1} µs");
    println!(
        "  API key           {with_key:8.1} µs   (auth: {:+.1} µs)",
        with_key - base
    );
    println!(
        "  session cookie    {with_cookie:8.1} µs   (auth: {:+.1} µs)",
        with_cookie - base
    );
    println!(
        "login (argon2id verify), {logins} logins: {login_cpu:.1} ms CPU, {login_wall:.1} ms wall each"
    );
    let _ = std::fs::remove_dir_all(&on.home);
    Ok(())
}
