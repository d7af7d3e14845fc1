//! Helpers the benchmark binaries share: finding the sibling release binaries, child
//! processes that die with the benchmark, a process's CPU time, free ports. Benchmarks
//! drive Fawn from outside (HTTP, `/proc`); they never reach into its crates' internals.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A child process killed (and reaped) when dropped.
#[derive(Debug)]
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A binary built next to the running benchmark (`target/dist/NAME`).
pub fn bin(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let p = exe.parent().context("no exe dir")?.join(name);
    if !p.exists() {
        bail!(
            "{} not found; build it first (beside this binary): cargo build --profile dist -p fawn -p fawn-testkit -p fawn-bench",
            p.display()
        );
    }
    Ok(p)
}

/// utime + stime of a process, in milliseconds.
pub fn cpu_ms(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').context("stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11).context("stat utime")?.parse()?;
    let stime: f64 = f.get(12).context("stat stime")?.parse()?;
    Ok((utime + stime) * 10.0)
}

/// A port free on 127.0.0.1 right now.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `fawn serve --no-auth` on `port` with `config`, its data under `home` (`FAWN_HOME`),
/// its stderr the benchmark's, never a `DATABASE_URL` from the caller's environment: how
/// every benchmark starts the server it measures. Authentication is off so the figures are
/// the run lifecycle's (`auth_cost` measures auth).
pub fn fawn_serve(program: &Path, port: u16, config: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.args([
        "serve",
        "--no-auth",
        "--port",
        &port.to_string(),
        "--config",
    ])
    .arg(config)
    .env("FAWN_HOME", home.join("home"))
    .env_remove("DATABASE_URL")
    .stderr(Stdio::inherit());
    // Errors only (the server logs to stdout), unless FAWN_BENCH_RUST_LOG asks for more
    // (e.g. `fawn_runtime::retention=info`: each sweep and what it took), which then
    // goes to the benchmark's stdout.
    match std::env::var("FAWN_BENCH_RUST_LOG") {
        Ok(filter) => cmd.env("RUST_LOG", filter).stdout(Stdio::inherit()),
        Err(_) => cmd.env("RUST_LOG", "error").stdout(Stdio::null()),
    };
    cmd
}

/// Starts `fawn-mock-llm` (built beside the benchmark) on a free port with `args` after
/// `--port 0`, and returns it with the base URL it prints on its first line.
pub fn start_mock_llm<I, S>(args: I) -> Result<(Child, String)>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(bin("fawn-mock-llm")?)
        .args(["--port", "0"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting fawn-mock-llm")?;
    let Some(out) = child.stdout.take() else {
        let _ = child.kill();
        bail!("the mock's stdout was not captured");
    };
    let mut line = String::new();
    if let Err(e) = BufReader::new(out).read_line(&mut line) {
        let _ = child.kill();
        return Err(e).context("reading the mock's URL");
    }
    match line.split_whitespace().last() {
        Some(url) => Ok((child, url.to_string())),
        None => {
            let _ = child.kill();
            bail!("the mock did not print its URL")
        }
    }
}

/// Creates a thread on the LangGraph server at `url` and returns its id.
pub async fn create_thread(client: &reqwest::Client, url: &str) -> Result<String> {
    let t: serde_json::Value = client
        .post(format!("{url}/threads"))
        .json(&serde_json::json!({}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(t["thread_id"]
        .as_str()
        .context("the server answered no thread id")?
        .to_string())
}

/// Waits until `{url}/ok` answers 200, calling `alive` between tries (to fail early when
/// the server's process has exited), for at most `limit`.
pub async fn wait_ok(
    url: &str,
    limit: std::time::Duration,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    let client = fawn_net::client();
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Ok(r) = client.get(format!("{url}/ok")).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        alive()?;
        if std::time::Instant::now() > deadline {
            bail!("{url}/ok did not answer within {} s", limit.as_secs());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// About 1 KB of user text: `lead`, then words of `words` and numbers drawn by a xorshift
/// seeded with `seed`, cut to 1,024 bytes. Different for every seed (so nothing compresses to
/// a repeat), the same for the same arguments (so stored sizes are comparable across runs).
pub fn user_message(lead: String, seed: usize, words: &[&str]) -> String {
    let mut s = lead;
    let mut x = seed as u64 * 2_654_435_761 + 1;
    while s.len() < 1024 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(words[(x % words.len() as u64) as usize]);
        s.push(' ');
        s.push_str(&(x % 10_000).to_string());
        s.push(' ');
    }
    s.truncate(1024);
    s
}

/// `POST /threads/{tid}/runs/wait` with `body`: the thread's values after the run; an error
/// when the request fails or the run ended in an error (`__error__`).
pub async fn run_wait(
    client: &reqwest::Client,
    url: &str,
    tid: &str,
    body: &serde_json::Value,
) -> Result<serde_json::Value> {
    let v: serde_json::Value = client
        .post(format!("{url}/threads/{tid}/runs/wait"))
        .json(body)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    if v.get("__error__").is_some() {
        bail!("run failed: {v}");
    }
    Ok(v)
}
