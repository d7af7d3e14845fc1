//! Every problem is reported at once, one line each, with its key path.

use crate::{error_lines, load_with, warning_lines};

#[test]
fn unset_variable_message_is_exact() {
    let yaml = "models:\n  - name: a\n    use: langchain_openai:ChatOpenAI\n    model: m\n    api_key: x\n  - name: b\n    use: langchain_openai:ChatOpenAI\n    model: m\n    api_key: $OPENAI_API_KEY\n";
    assert_eq!(
        error_lines(load_with(yaml, None, &[])),
        ["models[1].api_key: environment variable OPENAI_API_KEY is not set"]
    );
    let ok = load_with(yaml, None, &[("OPENAI_API_KEY", "sk-x")]).unwrap();
    assert_eq!(ok.settings.app.models[1].api_key.as_deref(), Some("sk-x"));
}

#[test]
fn braced_variables_resolve_too() {
    let yaml = "models:\n  - name: a\n    use: u\n    model: m\n    api_key: ${KEY}\n    base_url: ${BASE}\n";
    assert_eq!(
        error_lines(load_with(yaml, None, &[("KEY", "k")])),
        ["models[0].base_url: environment variable BASE is not set"]
    );
    let ok = load_with(yaml, None, &[("KEY", "k"), ("BASE", "http://x")]).unwrap();
    assert_eq!(
        ok.settings.app.models[0].base_url.as_deref(),
        Some("http://x")
    );
}

#[test]
fn several_problems_across_sections_and_entries_at_once() {
    let yaml = r#"
models:
  - name: good
    use: langchain_openai:ChatOpenAI
    model: m
    api_key: $OPENAI_API_KEY
  - name: bad-types
    use: langchain_openai:ChatOpenAI
    model: m
    max_tokens: lots
    supports_vision: maybe
    headers: {X-Thing: [1, 2]}
  - use: langchain_openai:ChatOpenAI
  - name: good
    use: langchain_openai:ChatOpenAI
    model: m
    api_key: $DEEPSEEK_API_KEY
tools:
  - name: bash
  - use: deerflow.sandbox.tools:ls_tool
    max_results: many
sandbox:
  bash_command_timeout: ten
  allow_host_bash: 3
title:
  max_words: 50
summarization:
  trigger:
    - type: tokens
      value: 0
    - type: minutes
      value: 3
    - type: fraction
      value: 1.5
  keep: {type: messages, value: many}
database:
  backend: mysql
loop_detection:
  warn_threshold: 6
  hard_limit: 5
"#;
    let lines = error_lines(load_with(yaml, None, &[]));
    let expected = [
        "models[0].api_key: environment variable OPENAI_API_KEY is not set",
        "models[3].api_key: environment variable DEEPSEEK_API_KEY is not set",
        "models[1].max_tokens: expected an unsigned integer, got a string",
        "models[1].supports_vision: expected a boolean, got a string",
        "models[1].headers.X-Thing: expected a string, got a list",
        "tools[0].use: is required",
        "tools[1].name: is required",
        "sandbox.bash_command_timeout: expected an unsigned integer, got a string",
        "sandbox.allow_host_bash: expected a boolean, got 3",
        "summarization.keep.value: expected a number, got a string",
        "summarization.trigger[1].type: expected one of tokens, messages, fraction, got \"minutes\"",
        "models[2].name: is required",
        "models[2].model: is required",
        "models[3].name: duplicate model name \"good\" (also models[0])",
        "title.max_words: must be between 1 and 20",
        "summarization.trigger[0].value: must be a whole number greater than 0, got 0",
        "summarization.trigger[2].value: a fraction must be greater than 0 and at most 1, got 1.5",
        "loop_detection.hard_limit: must be greater than or equal to warn_threshold",
        "database.backend: expected one of sqlite, postgres, memory, got \"mysql\"",
    ];
    let mut sorted_lines = lines.clone();
    sorted_lines.sort();
    let mut sorted_expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    sorted_expected.sort();
    assert_eq!(sorted_lines, sorted_expected, "got:\n{}", lines.join("\n"));
}

#[test]
fn display_prints_one_problem_per_line() {
    let err = load_with(
        "sandbox: {bash_command_timeout: x}\ntitle: {max_chars: 5}\n",
        None,
        &[],
    )
    .unwrap_err();
    assert_eq!(err.0.len(), 2);
    assert_eq!(
        err.to_string(),
        "sandbox.bash_command_timeout: expected an unsigned integer, got a string\n\
         title.max_chars: must be between 10 and 200"
    );
}

#[test]
fn wrong_type_paths_for_nested_and_whole_sections() {
    let yaml = r#"
sandbox: "not a mapping"
subagents:
  timeout_seconds: -5
  agents:
    general-purpose:
      max_turns: "a lot"
  custom_agents:
    analyst:
      description: d
      system_prompt: p
      tools: read_file
memory:
  fact_confidence_threshold: high
uploads:
  max_files: [1]
models: {name: x}
tool_groups: 5
"#;
    let mut lines = error_lines(load_with(yaml, None, &[]));
    lines.sort();
    let mut expected = vec![
        "sandbox: expected a mapping, got a string",
        "subagents.timeout_seconds: expected an unsigned integer, got -5",
        "subagents.agents.general-purpose.max_turns: expected an unsigned integer, got a string",
        "subagents.custom_agents.analyst.tools: expected a list, got a string",
        "memory.fact_confidence_threshold: expected a number, got a string",
        "uploads.max_files: expected an unsigned integer, got a list",
        "models: expected a list, got a mapping",
        "tool_groups: expected a list, got 5",
    ];
    expected.sort();
    assert_eq!(lines, expected);
}

#[test]
fn values_pydantic_would_coerce_are_accepted() {
    // Env-resolved values are strings; DeerFlow (pydantic, lax) turns "600" into 600.
    let yaml = "sandbox:\n  bash_command_timeout: $TIMEOUT\n  allow_host_bash: $HOST_BASH\nmemory:\n  shutdown_flush_timeout_seconds: 30.0\n  fact_confidence_threshold: '0.5'\n";
    let ok = load_with(yaml, None, &[("TIMEOUT", "120"), ("HOST_BASH", "true")]).unwrap();
    assert_eq!(ok.settings.app.sandbox.bash_command_timeout, 120);
    assert!(ok.settings.app.sandbox.allow_host_bash);
    assert_eq!(ok.settings.app.memory.shutdown_flush_timeout_seconds, 30);
    assert_eq!(ok.settings.app.memory.fact_confidence_threshold, 0.5);
    assert!(ok.warnings.is_empty(), "{:?}", ok.warnings);
    assert_eq!(
        error_lines(load_with(
            "sandbox: {bash_command_timeout: 2.5}\n",
            None,
            &[]
        )),
        ["sandbox.bash_command_timeout: expected an unsigned integer, got 2.5"]
    );
    assert_eq!(
        error_lines(load_with("sandbox: {bash_command_timeout: 0}\n", None, &[])),
        ["sandbox.bash_command_timeout: must be greater than 0"]
    );
}

#[test]
fn unknown_keys_warn_with_their_path_and_never_fail() {
    let yaml = r#"
modles: []
guardrails: {enabled: true, provider: {use: x}}
tool_search: {enabled: false}
token_budget: {enabled: false}
channels: {feishu: {}}
sandbox:
  use: deerflow.sandbox.local:LocalSandboxProvider
  image: some/image
  replicas: 3
title:
  enabled: true
  emoji: yes
models:
  - name: m
    use: langchain_openai:ChatOpenAI
    model: gpt
    use_responses_api: true
    pricing: {currency: USD, input_per_million: 1.0}
tools:
  - name: web_search
    use: deerflow.community.ddg_search.tools:web_search_tool
    max_results: 5
    region: wt-wt
database:
  backend: sqlite
  pool_recycle: 300
"#;
    let warnings = warning_lines(load_with(yaml, None, &[]));
    assert_eq!(
        warnings,
        [
            "modles: unknown key; ignored",
            "guardrails: DeerFlow setting that Fawn does not implement; ignored",
            "tool_search: DeerFlow setting that Fawn does not implement; ignored",
            "token_budget: DeerFlow setting that Fawn does not implement; ignored",
            "channels: DeerFlow setting that Fawn does not implement; ignored",
            "sandbox.image: unknown key; ignored",
            "sandbox.replicas: unknown key; ignored",
            "title.emoji: unknown key; ignored",
            "database.pool_recycle: unknown key; ignored",
        ]
    );
    // Model and tool extras are kept, without warnings (DeerFlow passes them through).
    let ok = load_with(yaml, None, &[]).unwrap();
    assert_eq!(ok.settings.app.models[0].extra["use_responses_api"], true);
    assert_eq!(
        ok.settings.app.models[0].extra["pricing"]["currency"],
        "USD"
    );
    assert_eq!(ok.settings.app.tools[0].extra["region"], "wt-wt");
}

#[test]
fn ignored_sections_are_not_resolved() {
    // An unset variable inside a section Fawn ignores is no reason to fail.
    let yaml = "guardrails:\n  api_key: $NOT_SET\n";
    let warnings = warning_lines(load_with(yaml, None, &[]));
    assert_eq!(warnings.len(), 1);
}

#[test]
fn yaml_syntax_errors_and_wrong_top_level() {
    let lines = error_lines(load_with("models: [\n", None, &[]));
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("config.yaml: invalid YAML: "),
        "{}",
        lines[0]
    );
    assert_eq!(
        error_lines(load_with("- a\n- b\n", None, &[])),
        ["config.yaml: expected a mapping at the top level, got a list"]
    );
    assert!(
        load_with("", None, &[])
            .unwrap()
            .settings
            .app
            .models
            .is_empty()
    );
    let huge = format!("x: \"{}\"\n", "a".repeat(5 * 1024 * 1024));
    assert_eq!(
        error_lines(load_with(&huge, None, &[])),
        ["config.yaml: file is larger than 4 MiB"]
    );
}

#[test]
fn null_values_fall_back_to_defaults() {
    // DeerFlow: a section left with only comments is null and means "absent".
    let yaml = "models:\n  # - name: x\ntools:\nsandbox:\nsummarization:\n  enabled: true\n  trigger:\n  keep: null\ntitle:\n  max_words: null\n";
    let ok = load_with(yaml, None, &[]).unwrap();
    assert!(ok.settings.app.models.is_empty());
    assert_eq!(ok.settings.app.title.max_words, 6);
    let warnings: Vec<String> = ok.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "summarization.keep: null is not allowed here; using the default",
            "title.max_words: null is not allowed here; using the default",
            "summarization.trigger: summarization is enabled but has no trigger, so it never runs",
        ]
    );
}

#[test]
fn extensions_problems_are_reported_with_their_paths() {
    let ext = r#"{
      "mcpServers": {
        "github": {"type": "stdio", "command": "npx", "env": {"GITHUB_TOKEN": "$GITHUB_TOKEN"}},
        "remote": {"transport": "http", "headers": {"X-Key": "$REMOTE_KEY"}},
        "odd": {"type": "websocket", "url": "ws://x", "tool_call_timeout": "soon"},
        "off": {"enabled": false, "type": "stdio", "env": {"T": "$OFF_TOKEN"}}
      },
      "skills": {"deep-research": {"enabled": "nope"}},
      "somethingElse": 1
    }"#;
    let lines = error_lines(load_with("", Some(ext), &[]));
    let mut sorted = lines.clone();
    sorted.sort();
    let mut expected = vec![
        "mcpServers.github.env.GITHUB_TOKEN: environment variable GITHUB_TOKEN is not set",
        "mcpServers.remote.headers.X-Key: environment variable REMOTE_KEY is not set",
        "mcpServers.remote.url: is required for a http server",
        "mcpServers.odd.tool_call_timeout: expected a number, got a string",
        "mcpServers.odd.type: expected one of stdio, sse, http, got \"websocket\"",
        "skills.deep-research.enabled: expected a boolean, got a string",
    ];
    expected.sort();
    assert_eq!(sorted, expected, "got:\n{}", lines.join("\n"));
    // With the variables set and the problems fixed, the disabled server only warns.
    let fixed = r#"{
      "mcpServers": {
        "github": {"type": "stdio", "command": "npx", "env": {"GITHUB_TOKEN": "$GITHUB_TOKEN"}},
        "off": {"enabled": false, "type": "stdio", "env": {"T": "$OFF_TOKEN"}}
      }
    }"#;
    let ok = load_with("", Some(fixed), &[("GITHUB_TOKEN", "t")]).unwrap();
    let warnings: Vec<String> = ok.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "mcpServers.off.env.T: environment variable OFF_TOKEN is not set (server is disabled); using \"\"",
            "mcpServers.off.command: is required for a stdio server (server is disabled)",
        ]
    );
    assert_eq!(ok.settings.extensions.mcp_servers["off"].env["T"], "");
    assert_eq!(
        error_lines(load_with("", Some("{\"mcpServers\": "), &[]))[0]
            .split(':')
            .next(),
        Some("extensions_config.json")
    );
}

/// A load that fails still says what it would have skipped or ignored: the errors stop it,
/// the warnings come with them, each with its key path.
#[test]
fn a_failed_load_keeps_its_warnings() {
    let yaml = "models:\n\
                \x20 - name: a\n\
                \x20   use: langchain_openai:ChatOpenAI\n\
                \x20   model: m\n\
                \x20   max_tokens: lots\n\
                \x20 - name: b\n\
                \x20   use: acme.models:ChatAcme\n\
                \x20   model: m\n\
                \x20   api_key: $ACME_KEY_SURELY_UNSET\n\
                surely_unknown_section: 1\n";
    // The registries' check of `use:` values, as `fawn check-config` installs it.
    let acme: fawn_config::Validator = std::sync::Arc::new(|app: &fawn_config::AppConfig| {
        app.models
            .iter()
            .enumerate()
            .filter(|(_, m)| m.use_.starts_with("acme."))
            .map(|(i, m)| {
                fawn_config::ConfigIssue::unsupported(
                    format!("models[{i}].use"),
                    format!("unsupported model class '{}'", m.use_),
                )
            })
            .collect()
    });
    let opts = fawn_config::LoadOptions::with_vars("/nonexistent-cwd", Vec::<(&str, &str)>::new())
        .validator(acme);
    let err = fawn_config::load_str(yaml, None, &opts).unwrap_err();
    let errors: Vec<String> = err.0.iter().map(ToString::to_string).collect();
    assert_eq!(
        errors,
        ["models[0].max_tokens: expected an unsigned integer, got a string"],
        "the skipped entry's own problems (its unset $VAR) are not errors"
    );
    let mut warnings: Vec<String> = err.warnings().iter().map(ToString::to_string).collect();
    warnings.sort();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "models[1].use: unsupported model class 'acme.models:ChatAcme'; the entry is skipped"
        ),
        "{warnings:?}"
    );
    assert!(
        warnings[1].starts_with("surely_unknown_section: "),
        "{warnings:?}"
    );
    // Display (what `serve` prints when it refuses to start) stays the errors.
    assert_eq!(
        err.to_string(),
        "models[0].max_tokens: expected an unsigned integer, got a string"
    );
}

#[test]
fn retention_keys_are_checked() {
    let yaml = "checkpointer:\n  ttl:\n    strategy: delete\n    sweep_interval_minutes: 30\n    default_ttl: 1440\n  retention:\n    keep_turns: 20\n    keep_days: 7\n    runs_days: 90\n";
    let ok = load_with(yaml, None, &[]).unwrap();
    let cp = ok.settings.app.checkpointer.as_ref().unwrap();
    let ttl = cp.ttl.as_ref().unwrap();
    assert_eq!(ttl.sweep_interval_minutes, 30.0);
    assert_eq!(ttl.default_ttl, Some(1440.0));
    let ret = cp.retention.as_ref().unwrap();
    assert_eq!(ret.keep_turns, Some(20));
    assert_eq!(ret.keep_days, Some(7.0));
    assert_eq!(ret.runs_days, Some(90.0));
    assert_eq!(ret.batch, 100);
    // No backend is chosen by these keys alone.
    assert_eq!(cp.kind, None);

    let bad = "checkpointer:\n  ttl:\n    strategy: archive\n    sweep_interval_minutes: 0\n    default_ttl: -5\n  retention:\n    keep_turns: 0\n    keep_days: 5000\n    runs_days: 0\n    batch: 0\n";
    assert_eq!(
        error_lines(load_with(bad, None, &[])),
        [
            "checkpointer.ttl.strategy: expected one of delete, keep_latest, got \"archive\"",
            "checkpointer.ttl.sweep_interval_minutes: must be a number of minutes above 0 and at most 5256000, got 0",
            "checkpointer.ttl.default_ttl: must be a number of minutes above 0 and at most 5256000, got -5",
            "checkpointer.retention.keep_turns: must be at least 1 (the latest turn keeps its steps); leave it unset to prune by age alone",
            "checkpointer.retention.keep_days: must be a number of days from 0 to 3650, got 5000",
            "checkpointer.retention.runs_days: must be above 0 (finished runs would go as soon as they end)",
            "checkpointer.retention.batch: must be between 1 and 5000, got 0",
        ]
    );
    let unknown = "checkpointer:\n  retention:\n    keep_weeks: 2\n";
    assert_eq!(
        warning_lines(load_with(unknown, None, &[])),
        ["checkpointer.retention.keep_weeks: unknown key; ignored"]
    );
    let typed = "checkpointer:\n  retention:\n    keep_turns: many\n";
    assert_eq!(error_lines(load_with(typed, None, &[])).len(), 1);
}
