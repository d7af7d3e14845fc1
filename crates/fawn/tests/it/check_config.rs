use std::path::PathBuf;
use std::process::Command;

fn fawn() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fawn"));
    // A hermetic environment: no config or data dir leaks in from the developer's shell.
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::temp_dir());
    c
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn example_config_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let out = fawn()
        .current_dir(dir.path())
        .arg("check-config")
        .arg(repo_root().join("config.example.yaml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.starts_with("config OK: "), "{stdout}");
    assert!(!stderr.contains("error:"), "{stderr}");
}

#[test]
fn every_problem_is_one_line_with_its_key_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        "models:\n\
         \x20 - name: a\n\
         \x20   use: langchain_openai:ChatOpenAI\n\
         \x20   model: gpt-4o\n\
         \x20   api_key: $FAWN_TEST_SURELY_UNSET_KEY\n\
         \x20 - name: b\n\
         \x20   use: langchain_openai:ChatOpenAI\n\
         \x20   model: gpt-4o\n\
         \x20   max_tokens: lots\n\
         \x20 - name: c\n\
         \x20   use: acme.models:ChatAcme\n\
         \x20   model: acme-1\n",
    )
    .unwrap();
    let out = fawn()
        .current_dir(dir.path())
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 2, "{stderr}");
    assert_eq!(
        errors[0],
        "error: models[0].api_key: environment variable FAWN_TEST_SURELY_UNSET_KEY is not set"
    );
    assert!(
        errors[1].starts_with("error: models[1].max_tokens: "),
        "{stderr}"
    );
    // A class Fawn does not implement is skipped: a warning, listed with the errors
    // (after them), with its key path.
    let problems: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: ") || l.starts_with("warning: "))
        .collect();
    assert_eq!(problems.len(), 3, "{stderr}");
    assert_eq!(&problems[..2], &errors[..], "errors first: {stderr}");
    assert!(
        problems[2]
            .starts_with("warning: models[2].use: unsupported model class 'acme.models:ChatAcme'"),
        "{stderr}"
    );
    assert!(problems[2].contains("the entry is skipped"), "{stderr}");
    // With --strict it is an error instead.
    let out = fawn()
        .current_dir(dir.path())
        .args(["check-config", "--strict"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.lines().any(|l| l
            .starts_with("error: models[2].use: unsupported model class 'acme.models:ChatAcme'")),
        "{stderr}"
    );
}

/// DeerFlow's config and extensions files, as DeerFlow users have them (fixtures written
/// from DeerFlow's documented structure): long comment blocks under list keys, DeerFlow-only
/// sections, Gemini and Ollama models (whose key comes from `$GEMINI_API_KEY`), and a model
/// class (Codex) and an image-search tool Fawn does not implement.
pub(crate) fn deerflow_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/deerflow");
    std::fs::copy(
        fixtures.join("config.example.yaml"),
        dir.path().join("config.yaml"),
    )
    .unwrap();
    std::fs::copy(
        fixtures.join("extensions_config.example.json"),
        dir.path().join("extensions_config.json"),
    )
    .unwrap();
    dir
}

#[test]
fn a_deerflow_config_loads_and_says_what_it_skips() {
    let dir = deerflow_dir();
    let out = fawn()
        .current_dir(dir.path())
        .env("FAWN_FIXTURE_OPENAI_KEY", "k")
        .env("GEMINI_API_KEY", "k")
        .args(["check-config", "config.yaml"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains("models: 3, tools: 9, MCP servers: 2"),
        "{stdout}"
    );
    for skipped in [
        "warning: models[3].use: unsupported model class 'deerflow.models.openai_codex_provider:CodexChatModel'",
        "warning: tools[2].use: unknown tool 'deerflow.community.image_search.tools:image_search_tool'",
    ] {
        assert!(
            stderr.lines().any(|l| l.starts_with(skipped)),
            "{skipped}\n{stderr}"
        );
    }
    assert!(!stderr.contains("error:"), "{stderr}");
    let out = fawn()
        .current_dir(dir.path())
        .env("FAWN_FIXTURE_OPENAI_KEY", "k")
        .env("GEMINI_API_KEY", "k")
        .args(["check-config", "--strict", "config.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for unsupported in ["error: models[3].use: ", "error: tools[2].use: "] {
        assert!(
            stderr.lines().any(|l| l.starts_with(unsupported)),
            "{unsupported}\n{stderr}"
        );
    }
}

#[test]
fn a_missing_config_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = fawn()
        .current_dir(dir.path())
        .args(["check-config", "nope.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nope.yaml"), "{stderr}");
}

#[test]
fn a_sandbox_provider_fawn_lacks_is_said_out_loud() {
    let dir = deerflow_dir();
    let config = dir.path().join("config.yaml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "use: deerflow.sandbox.local:LocalSandboxProvider",
        "use: deerflow.community.aio_sandbox:AioSandboxProvider",
    );
    std::fs::write(&config, text).unwrap();
    let out = fawn()
        .current_dir(dir.path())
        .env("FAWN_FIXTURE_OPENAI_KEY", "k")
        .env("GEMINI_API_KEY", "k")
        .args(["check-config", "config.yaml"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.lines().any(|l| l.starts_with(
            "warning: sandbox.use: sandbox provider 'deerflow.community.aio_sandbox:AioSandboxProvider' is not implemented by Fawn"
        )),
        "{stderr}"
    );
    let out = fawn()
        .current_dir(dir.path())
        .env("FAWN_FIXTURE_OPENAI_KEY", "k")
        .env("GEMINI_API_KEY", "k")
        .args(["check-config", "--strict", "config.yaml"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("error: sandbox.use: ")),
        "{stderr}"
    );
}
