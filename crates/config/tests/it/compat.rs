//! DeerFlow spellings: `api_base`, `mcpServers`, `transport`, aliases, legacy sections.

use crate::{load_with, warning_lines};
use fawn_config::RunEventsBackend;

#[test]
fn model_aliases() {
    let yaml = r#"
models:
  - name: a
    use: deerflow.models.patched_deepseek:PatchedChatDeepSeek
    model: m
    api_base: https://api.example.com/v1
    openai_api_key: k
    request_timeout: 30
    default_headers: {X-Org: o}
  - name: b
    use: langchain_anthropic:ChatAnthropic
    model: claude
    default_request_timeout: 600.0
    openai_api_base: https://b.example.com
  - name: c
    use: langchain_openai:ChatOpenAI
    model: m
    base_url: https://canonical.example.com
    api_base: https://alias.example.com
"#;
    let l = load_with(yaml, None, &[]).unwrap();
    let m = &l.settings.app.models;
    assert_eq!(m[0].base_url.as_deref(), Some("https://api.example.com/v1"));
    assert_eq!(m[0].api_key.as_deref(), Some("k"));
    assert_eq!(m[0].timeout, Some(30.0));
    assert_eq!(m[0].headers["X-Org"], "o");
    assert_eq!(m[1].timeout, Some(600.0));
    assert_eq!(m[1].base_url.as_deref(), Some("https://b.example.com"));
    assert_eq!(
        m[2].base_url.as_deref(),
        Some("https://canonical.example.com")
    );
    let warnings: Vec<String> = l.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        ["models[2].api_base: ignored: `base_url` is also set"]
    );
}

#[test]
fn mcp_servers_and_transport_alias() {
    let ext = r#"{
      "mcpServers": {
        "a": {"transport": "sse", "url": "https://a/sse"},
        "b": {"type": "http", "transport": "sse", "url": "https://b/mcp"},
        "c": {"command": "uvx", "args": ["srv"], "routing": {"mode": "prefer"}, "tool_name_prefix": false}
      }
    }"#;
    let l = load_with("", Some(ext), &[]).unwrap();
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let s = &l.settings.extensions.mcp_servers;
    assert_eq!(s["a"].kind.as_deref(), Some("sse"));
    assert_eq!(s["b"].kind.as_deref(), Some("http"));
    assert_eq!(s["c"].kind, None);
    assert!(!s["c"].tool_name_prefix);
    assert_eq!(s["c"].extra["routing"]["mode"], "prefer");
    // The snake_case spelling is accepted too.
    let l = load_with(
        "",
        Some(r#"{"mcp_servers": {"x": {"command": "npx"}}}"#),
        &[],
    )
    .unwrap();
    assert!(l.settings.extensions.mcp_servers.contains_key("x"));
}

#[test]
fn deerflow_memory_knobs_under_backend_config_are_used() {
    let yaml = r#"
memory:
  enabled: true
  shutdown_flush_timeout_seconds: 30.0
  manager_class: deermem
  backend_config:
    storage_path: ""
    debounce_seconds: 12
    max_facts: 40
    fact_confidence_threshold: 0.8
    token_counting: char
"#;
    let l = load_with(yaml, None, &[]).unwrap();
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let m = &l.settings.app.memory;
    assert_eq!((m.debounce_seconds, m.max_facts), (12, 40));
    assert_eq!(m.fact_confidence_threshold, 0.8);
    assert_eq!(m.storage_path, None);
    assert_eq!(m.backend_config["token_counting"], "char");
}

#[test]
fn legacy_and_deerflow_spellings_of_database_and_checkpointer() {
    let yaml = "database:\n  backend: postgres\n  postgres_url: $DB\n  sqlite_dir: .deer-flow/data\ncheckpointer:\n  type: sqlite\n  connection_string: checkpoints.db\n";
    let l = load_with(yaml, None, &[("DB", "postgresql://h/d")]).unwrap();
    let db = l.settings.app.database.as_ref().unwrap();
    assert_eq!(db.url.as_deref(), Some("postgresql://h/d"));
    assert_eq!(db.sqlite_dir.as_deref(), Some(".deer-flow/data"));
    let cp = l.settings.app.checkpointer.as_ref().unwrap();
    assert_eq!(cp.kind.as_deref(), Some("sqlite"));
}

#[test]
fn subagent_limits_clamp_like_deerflow() {
    let yaml = "subagents:\n  max_concurrent: 9\n  max_total_per_run: 80\n";
    let l = load_with(yaml, None, &[]).unwrap();
    assert_eq!(l.settings.app.subagents.max_concurrent, 4);
    assert_eq!(l.settings.app.subagents.max_total_per_run, 50);
    assert_eq!(
        warning_lines(load_with(yaml, None, &[])),
        [
            "subagents.max_total_per_run: above 50; clamped to 50",
            "subagents.max_concurrent: outside 1..=4; clamped to 4",
        ]
    );
    assert_eq!(
        crate::error_lines(load_with("subagents:\n  max_total_per_run: 0\n", None, &[])),
        ["subagents.max_total_per_run: must be at least 1"]
    );
}

#[test]
fn suggestions_default_on_and_take_deerflow_limits() {
    let l = load_with("", None, &[]).unwrap();
    assert!(l.settings.app.suggestions.enabled);
    assert_eq!(l.settings.app.suggestions.max_suggestions, 3);
    let l = load_with(
        "suggestions:\n  enabled: false\n  max_suggestions: 5\n",
        None,
        &[],
    )
    .unwrap();
    assert!(!l.settings.app.suggestions.enabled);
    assert_eq!(l.settings.app.suggestions.max_suggestions, 5);
    for bad in [0, 6] {
        assert_eq!(
            crate::error_lines(load_with(
                &format!("suggestions:\n  max_suggestions: {bad}\n"),
                None,
                &[]
            )),
            [format!(
                "suggestions.max_suggestions: must be between 1 and 5, got {bad}"
            )]
        );
    }
}

#[test]
fn input_polish_and_scheduler_take_deerflow_defaults_and_bounds() {
    let l = load_with("", None, &[]).unwrap();
    let p = &l.settings.app.input_polish;
    assert_eq!(
        (p.enabled, p.max_chars, p.model_name.as_deref()),
        (true, 4000, None)
    );
    let s = &l.settings.app.scheduler;
    assert!(!s.enabled, "off by default, as in DeerFlow");
    assert_eq!((s.max_concurrent_runs, s.min_once_delay_seconds), (3, 60));

    let yaml = "input_polish:\n  enabled: false\n  max_chars: 10\n  model_name: fast\n\
                scheduler:\n  enabled: true\n  multi_instance: false\n  poll_interval_seconds: 5\n  \
                lease_seconds: 120\n  max_concurrent_runs: 2\n  min_once_delay_seconds: 1\n";
    let l = load_with(yaml, None, &[]).unwrap();
    assert!(
        l.warnings.is_empty(),
        "{:?}",
        warning_lines(load_with(yaml, None, &[]))
    );
    let p = &l.settings.app.input_polish;
    assert_eq!(
        (p.enabled, p.max_chars, p.model_name.as_deref()),
        (false, 10, Some("fast"))
    );
    let s = &l.settings.app.scheduler;
    assert!(s.enabled);
    assert_eq!((s.max_concurrent_runs, s.min_once_delay_seconds), (2, 1));

    assert_eq!(
        crate::error_lines(load_with("input_polish:\n  max_chars: 0\n", None, &[])),
        ["input_polish.max_chars: must be at least 1"]
    );
    assert_eq!(
        crate::error_lines(load_with(
            "scheduler:\n  max_concurrent_runs: 33\n  min_once_delay_seconds: 0\n",
            None,
            &[]
        )),
        [
            "scheduler.max_concurrent_runs: must be between 1 and 32, got 33",
            "scheduler.min_once_delay_seconds: must be between 1 and 86400, got 0",
        ]
    );
}

#[test]
fn run_events_typed_with_deerflow_defaults() {
    let l = load_with("", None, &[]).unwrap();
    let e = &l.settings.app.run_events;
    assert_eq!(
        (e.backend, e.max_trace_content, e.track_token_usage),
        (RunEventsBackend::Memory, 10240, true)
    );
    // DeerFlow's example section loads without a warning.
    let yaml =
        "run_events:\n  backend: memory\n  max_trace_content: 10240\n  track_token_usage: true\n";
    assert!(warning_lines(load_with(yaml, None, &[])).is_empty());
    let l = load_with(
        "run_events:\n  backend: db\n  max_trace_content: 64\n",
        None,
        &[],
    )
    .unwrap();
    let e = &l.settings.app.run_events;
    assert_eq!((e.backend, e.max_trace_content), (RunEventsBackend::Db, 64));
    // jsonl is said out loud, not silently swapped.
    assert_eq!(
        warning_lines(load_with("run_events:\n  backend: jsonl\n", None, &[])),
        [
            "run_events.backend: jsonl run events are not implemented; Fawn keeps the journal in its database"
        ]
    );
    assert_eq!(
        crate::error_lines(load_with(
            "run_events:\n  max_trace_content: 0\n",
            None,
            &[]
        )),
        ["run_events.max_trace_content: must be at least 1"]
    );
    assert!(
        !crate::error_lines(load_with("run_events:\n  backend: redis\n", None, &[])).is_empty()
    );
}

#[test]
fn summarization_trigger_as_a_single_mapping() {
    let yaml = "summarization:\n  enabled: true\n  trigger: {type: messages, value: 50}\n";
    let l = load_with(yaml, None, &[]).unwrap();
    let t = l.settings.app.summarization.trigger.unwrap().to_vec();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].value, 50.0);
}

#[test]
fn yaml_one_one_booleans_and_duplicate_keys() {
    // PyYAML (YAML 1.1) reads yes/no/on/off as booleans and lets a repeated key win.
    let yaml = "title:\n  enabled: no\nsandbox:\n  allow_host_bash: on\nsandbox:\n  allow_host_bash: off\n";
    let l = load_with(yaml, None, &[]).unwrap();
    assert!(!l.settings.app.title.enabled);
    assert!(!l.settings.app.sandbox.allow_host_bash);
    assert_eq!(l.warnings.len(), 1);
    assert!(
        l.warnings[0].to_string().contains("duplicate"),
        "{}",
        l.warnings[0]
    );
}

/// A config shaped like DeerFlow's own `config.example.yaml` (its active sections, written
/// out here): it loads, with warnings only for what Fawn does not implement.
#[test]
fn a_deerflow_shaped_config_loads_with_warnings_only() {
    let yaml = r#"
config_version: 33
log_level: info
logging:
  enhance: {enabled: false, format: text}
token_usage:
  enabled: true
token_budget:
  enabled: false
  max_tokens: 200000
  max_input_tokens: null
  warn_threshold: 0.8
max_recursion_limit: 1000
models:
  # - name: gpt-4
  #   use: langchain_openai:ChatOpenAI
tool_groups:
  - name: web
  - name: file:read
  - name: file:write
  - name: bash
tools:
  - name: web_search
    group: web
    use: deerflow.community.ddg_search.tools:web_search_tool
    max_results: 5
  - name: web_fetch
    group: web
    use: deerflow.community.jina_ai.tools:web_fetch_tool
    timeout: 10
  - name: image_search
    group: web
    use: deerflow.community.image_search.tools:image_search_tool
    max_results: 5
  - {name: ls, group: "file:read", use: "deerflow.sandbox.tools:ls_tool"}
  - {name: read_file, group: "file:read", use: "deerflow.sandbox.tools:read_file_tool"}
  - {name: glob, group: "file:read", use: "deerflow.sandbox.tools:glob_tool", max_results: 200}
  - {name: grep, group: "file:read", use: "deerflow.sandbox.tools:grep_tool", max_results: 100}
  - {name: write_file, group: "file:write", use: "deerflow.sandbox.tools:write_file_tool"}
  - {name: str_replace, group: "file:write", use: "deerflow.sandbox.tools:str_replace_tool"}
  - {name: bash, group: bash, use: "deerflow.sandbox.tools:bash_tool"}
tool_search:
  enabled: false
  auto_promote_top_k: 3
tool_output:
  enabled: true
  externalize_min_chars: 12000
suggestions:
  enabled: true
  max_suggestions: 3
input_polish:
  enabled: true
  max_chars: 4000
  model_name: null
loop_detection:
  enabled: true
  warn_threshold: 3
  hard_limit: 5
  window_size: 20
  max_tracked_threads: 100
  tool_freq_warn: 30
  tool_freq_hard_limit: 50
read_before_write:
  enabled: true
safety_finish_reason:
  enabled: true
uploads:
  max_files: 10
  max_file_size: 52428800
  max_total_size: 104857600
  auto_convert_documents: false
  pdf_converter: auto
sandbox:
  use: deerflow.sandbox.local:LocalSandboxProvider
  allow_host_bash: false
  bash_output_max_chars: 20000
  read_file_output_max_chars: 50000
  ls_output_max_chars: 20000
  bash_command_timeout: 600
skills:
  container_path: /mnt/skills
skill_scan:
  enabled: true
title:
  enabled: true
  max_words: 6
  max_chars: 60
  model_name: null
summarization:
  enabled: true
  model_name: null
  trigger:
    - type: tokens
      value: 32000
  keep:
    type: messages
    value: 10
  trim_tokens_to_summarize: 15564
  summary_prompt: null
  skill_file_read_tool_names: [read_file, read, view, cat]
memory:
  enabled: true
  injection_enabled: true
  shutdown_flush_timeout_seconds: 30.0
  manager_class: deermem
  mode: middleware
  backend_config:
    storage_path: ""
    storage_class: file
    debounce_seconds: 30
    queue_max_depth: 1000
    model:
    max_facts: 100
    fact_confidence_threshold: 0.7
    max_injection_tokens: 2000
    token_counting: tiktoken
    guaranteed_categories: [correction]
agents_api:
  enabled: false
skill_evolution:
  enabled: false
  moderation_model_name: null
database:
  backend: sqlite
  sqlite_dir: .deer-flow/data
  pool_recycle: 300
  command_timeout: 30
  checkpoint_channel_mode: full
  checkpoint_delta:
    snapshot_frequency: 10
"#;
    let warnings = warning_lines(load_with(yaml, None, &[]));
    assert_eq!(
        warnings,
        [
            "logging: DeerFlow setting that Fawn does not implement; ignored",
            "token_budget: DeerFlow setting that Fawn does not implement; ignored",
            "tool_search: DeerFlow setting that Fawn does not implement; ignored",
            "tool_output: DeerFlow setting that Fawn does not implement; ignored",
            "safety_finish_reason: DeerFlow setting that Fawn does not implement; ignored",
            "skill_scan: DeerFlow setting that Fawn does not implement; ignored",
            "skill_evolution: DeerFlow setting that Fawn does not implement; ignored",
            "database.pool_recycle: unknown key; ignored",
            "database.command_timeout: unknown key; ignored",
            "database.checkpoint_delta: unknown key; ignored",
        ]
    );
    let l = load_with(yaml, None, &[]).unwrap();
    assert_eq!(l.settings.app.tools.len(), 10);
    assert_eq!(l.settings.app.memory.shutdown_flush_timeout_seconds, 30);
}

#[test]
fn yaml_11_booleans_stay_strings_where_strings_are_expected() {
    let yaml = "models:\n  - name: n\n    use: langchain_openai:ChatOpenAI\n    model: y\n    api_key: k\n    supports_vision: yes\nsandbox:\n  allow_host_bash: on\n";
    let loaded = fawn_config::load_str(
        yaml,
        None,
        &fawn_config::LoadOptions::with_vars("/tmp", Vec::<(String, String)>::new()),
    )
    .expect("loads");
    let m = &loaded.settings.app.models[0];
    assert_eq!(m.name, "n");
    assert_eq!(m.model.as_deref(), Some("y"));
    assert!(m.supports_vision);
    assert!(loaded.settings.app.sandbox.allow_host_bash);
}
