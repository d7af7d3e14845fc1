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
    assert_eq!(errors.len(), 3, "{stderr}");
    assert_eq!(
        errors[0],
        "error: models[0].api_key: environment variable FAWN_TEST_SURELY_UNSET_KEY is not set"
    );
    assert!(
        errors[1].starts_with("error: models[1].max_tokens: "),
        "{stderr}"
    );
    assert!(
        errors[2]
            .starts_with("error: models[2].use: unsupported model class 'acme.models:ChatAcme'"),
        "{stderr}"
    );
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
