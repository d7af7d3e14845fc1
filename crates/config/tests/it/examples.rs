//! The example files at the repository root load cleanly on a fresh machine.

use crate::repo_root;
use fawn_config::{LoadOptions, load};

#[test]
fn example_files_load_with_an_empty_environment() {
    let root = repo_root();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root.join("config.example.yaml"),
        dir.path().join("config.yaml"),
    )
    .unwrap();
    std::fs::copy(
        root.join("extensions_config.example.json"),
        dir.path().join("extensions_config.json"),
    )
    .unwrap();
    let opts = LoadOptions::with_vars(dir.path(), Vec::<(String, String)>::new());
    let loaded = load(&opts).unwrap_or_else(|e| panic!("example config failed:\n{e}"));
    let s = &loaded.settings;
    // The two disabled MCP servers use unset variables: a warning each, not an error.
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "mcpServers.github.env.GITHUB_TOKEN: environment variable GITHUB_TOKEN is not set (server is disabled); using \"\"",
            "mcpServers.docs.headers.X-API-Key: environment variable DOCS_MCP_TOKEN is not set (server is disabled); using \"\"",
        ]
    );
    assert_eq!(
        s.config_path.as_deref(),
        Some(dir.path().join("config.yaml").as_path())
    );
    assert_eq!(
        s.extensions_path.as_deref(),
        Some(dir.path().join("extensions_config.json").as_path())
    );
    assert_eq!(s.home, dir.path().join(".fawn"));
    assert_eq!(s.skills_dir, dir.path().join("skills"));

    let app = &s.app;
    assert_eq!(app.models.len(), 1);
    assert_eq!(app.models[0].name, "local");
    assert_eq!(
        app.models[0].base_url.as_deref(),
        Some("http://127.0.0.1:11434/v1")
    );
    assert_eq!(app.tools.len(), 9);
    assert!(
        app.tools
            .iter()
            .any(|t| t.use_ == "deerflow.sandbox.tools:bash_tool")
    );
    assert_eq!(app.tools[0].extra["max_results"], 5);
    assert_eq!(app.tool_groups.len(), 4);
    assert!(app.summarization.enabled);
    assert_eq!(app.sandbox.bash_command_timeout, 600);
    assert_eq!(
        app.database.as_ref().unwrap().backend.as_deref(),
        Some("sqlite")
    );
    let ext = &s.extensions;
    assert_eq!(ext.mcp_servers.len(), 2);
    assert!(!ext.mcp_servers["github"].enabled);
    assert_eq!(ext.mcp_servers["docs"].kind.as_deref(), Some("http"));
    assert!(ext.skills["deep-research"].enabled);
}

#[test]
fn example_files_with_their_variables_set_load_without_warnings() {
    let root = repo_root();
    let ext = root
        .join("extensions_config.example.json")
        .display()
        .to_string();
    let opts = LoadOptions::with_lookup(&root, move |name| match name {
        "FAWN_EXTENSIONS_CONFIG" => Some(ext.clone()),
        "GITHUB_TOKEN" => Some("ghp_x".into()),
        "DOCS_MCP_TOKEN" => Some("k".into()),
        _ => None,
    })
    .config_path(root.join("config.example.yaml"));
    let loaded = load(&opts).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let github = &loaded.settings.extensions.mcp_servers["github"];
    assert_eq!(github.env["GITHUB_TOKEN"], "ghp_x");
    assert_eq!(github.args, ["-y", "@modelcontextprotocol/server-github"]);
}

#[test]
fn every_commented_out_example_model_is_valid_when_uncommented() {
    // The secret-using examples are commented out; uncomment them all and they must load
    // once their variables are set, and fail naming each variable when they are not.
    let text = std::fs::read_to_string(repo_root().join("config.example.yaml")).unwrap();
    let mut out = String::new();
    let mut in_models = false;
    for line in text.lines() {
        if line.starts_with("models:") {
            in_models = true;
        } else if in_models && !line.starts_with(' ') && !line.is_empty() && !line.starts_with('#')
        {
            in_models = false;
        }
        if in_models && let Some(rest) = line.strip_prefix("  # ") {
            let looks_like_yaml = rest.starts_with("- name:") || rest.starts_with("  ");
            if looks_like_yaml {
                out.push_str("  ");
                out.push_str(rest);
                out.push('\n');
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    let vars = [
        ("OPENAI_API_KEY", "sk-1"),
        ("DEEPSEEK_API_KEY", "sk-2"),
        ("ANTHROPIC_API_KEY", "sk-3"),
    ];
    let loaded = crate::load_with(&out, None, &vars).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let names: Vec<&str> = loaded
        .settings
        .app
        .models
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(names, ["local", "gpt-4o", "deepseek-v3", "claude-sonnet-4"]);
    let claude = &loaded.settings.app.models[3];
    assert_eq!(claude.timeout, Some(600.0));
    assert_eq!(claude.api_key.as_deref(), Some("sk-3"));
    let lines = crate::error_lines(crate::load_with(&out, None, &[]));
    assert_eq!(
        lines,
        [
            "models[1].api_key: environment variable OPENAI_API_KEY is not set",
            "models[2].api_key: environment variable DEEPSEEK_API_KEY is not set",
            "models[3].api_key: environment variable ANTHROPIC_API_KEY is not set",
        ]
    );
}
