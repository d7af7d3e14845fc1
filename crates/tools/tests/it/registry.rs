//! The config-driven tool registry: `use:` mapping, options reaching the tools, errors, and
//! per-run assembly.

use crate::support::{Harness, args, serve, settings_from_yaml, text};
use async_trait::async_trait;
use axum::Router;
use axum::http::header;
use axum::routing::{get, post};
use fawn_state::Message;
use fawn_tools::registry::{
    SandboxToolKind, ToolImpl, ToolRegistry, ToolSetup, resolve_use, validate_tool_config,
};
use fawn_tools::{
    SubagentInfo, SubagentOutcome, SubagentRequest, SubagentRunner, Tool, ToolContext, ToolError,
    ToolOutput,
};
use serde_json::{Map, Value, json};
use std::sync::Arc;

fn names(tools: &[Arc<dyn Tool>]) -> Vec<String> {
    tools.iter().map(|t| t.name().to_string()).collect()
}

/// A stand-in for an MCP tool or a run-specific tool.
struct Named(&'static str);

#[async_trait]
impl Tool for Named {
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "stand-in"
    }
    fn parameters(&self) -> Arc<Value> {
        Arc::new(json!({"type": "object", "properties": {}}))
    }
    async fn call(&self, _: Map<String, Value>, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self.0))
    }
}

struct Runner;

#[async_trait]
impl SubagentRunner for Runner {
    fn available(&self) -> Vec<SubagentInfo> {
        vec![SubagentInfo {
            name: "general-purpose".into(),
            description: "anything".into(),
        }]
    }
    async fn run(
        &self,
        _: SubagentRequest,
        _: &ToolContext,
        _: tokio::sync::mpsc::UnboundedSender<Message>,
    ) -> SubagentOutcome {
        unreachable!("not called in these tests")
    }
}

const WEB_ONLY: &str = r#"
tool_groups: [{name: web}, {name: fetch}]
tools:
  - name: web_search
    group: web
    use: deerflow.community.ddg_search.tools:web_search_tool
    max_results: 5
  - name: web_fetch
    group: fetch
    use: fawn.tools:web_fetch_direct
    timeout: 3
  - name: jina_fetch
    group: fetch
    use: deerflow.community.jina_ai.tools:web_fetch_tool
"#;

#[test]
fn use_paths_select_fawn_implementations() {
    assert_eq!(
        resolve_use("deerflow.sandbox.tools:bash_tool"),
        Some(ToolImpl::Sandbox(SandboxToolKind::Bash))
    );
    assert_eq!(
        resolve_use("fawn.tools:read_file"),
        Some(ToolImpl::Sandbox(SandboxToolKind::ReadFile))
    );
    let dir = tempfile::tempdir().unwrap();
    let s = settings_from_yaml(WEB_ONLY, dir.path());
    assert!(validate_tool_config(&s.app).is_empty());
    let reg = ToolRegistry::from_settings(&s).unwrap();
    let c = reg.configured();
    assert_eq!(
        c.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        vec!["web_search", "web_fetch", "jina_fetch"]
    );
    // The model sees the config entry's name.
    assert_eq!(c[2].tool.name(), "jina_fetch");
    assert_eq!(c[1].extra["timeout"], 3);
}

#[test]
fn unknown_use_and_bad_options_are_config_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings_from_yaml(
        r#"
tools:
  - {name: web_search, use: deerflow.community.ddg_search.tools:web_search_tool, max_results: "lots"}
  - {name: crawl, use: deerflow.community.firecrawl.tools:web_fetch_tool}
  - {name: fetch, use: fawn.tools:web_fetch_direct, timeout: 0}
  - {name: x, use: "x.y:z"}
  - {name: searx, use: deerflow.community.searxng.tools:web_search_tool}
"#,
        dir.path(),
    );
    let issues = validate_tool_config(&s.app);
    let shown: Vec<String> = issues.iter().map(|i| i.to_string()).collect();
    assert_eq!(issues.len(), 5, "{shown:#?}");
    assert!(
        shown[0].starts_with("tools[0].max_results: invalid type"),
        "{}",
        shown[0]
    );
    assert!(
        shown[1].starts_with(
            "tools[1].use: unknown tool 'deerflow.community.firecrawl.tools:web_fetch_tool' (not a DeerFlow tool Fawn implements); supported: "
        ),
        "{}",
        shown[1]
    );
    assert!(shown[1].contains("deerflow.community.jina_ai.tools:web_fetch_tool"));
    assert!(
        shown[2].starts_with("tools[2].timeout: must be a number of seconds"),
        "{}",
        shown[2]
    );
    assert!(shown[3].starts_with("tools[3].use: unknown tool 'x.y:z'; supported: "));
    assert_eq!(
        shown[4],
        "tools[4].base_url: is required for SearXNG: the address of your SearXNG instance"
    );
    let err = ToolRegistry::from_settings(&s).unwrap_err();
    assert_eq!(err, issues);
}

#[tokio::test]
async fn extra_keys_reach_the_tools() {
    async fn html() -> impl axum::response::IntoResponse {
        let items: String = (0..6)
            .map(|i| {
                format!(
                    r##"<div class="result"><a class="result__a" href="https://e.example/{i}">T{i}</a><a class="result__snippet" href="#">S{i}</a></div>"##
                )
            })
            .collect();
        (
            [(header::CONTENT_TYPE, "text/html")],
            format!("<html>{items}</html>"),
        )
    }
    async fn page() -> impl axum::response::IntoResponse {
        (
            [(header::CONTENT_TYPE, "text/plain")],
            "0123456789abcdefghij",
        )
    }
    let addr = serve(
        Router::new()
            .route("/html/", post(html))
            .route("/page", get(page)),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let s = settings_from_yaml(
        &format!(
            r#"
web: {{allow_private_addresses: true}}
tools:
  - name: web_search
    use: deerflow.community.ddg_search.tools:web_search_tool
    base_url: http://{addr}
    max_results: 2
  - name: web_fetch
    use: fawn.tools:web_fetch_direct
    max_chars: 7
"#
        ),
        dir.path(),
    );
    let reg = ToolRegistry::from_settings(&s).unwrap();
    let tools = reg.assemble(&ToolSetup::default());
    let h = Harness::new().await;
    let search = tools.iter().find(|t| t.name() == "web_search").unwrap();
    let out = search
        .call(args(json!({"query": "q"})), &h.ctx)
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&text(&out)).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2, "max_results: 2 applied");
    assert_eq!(v[1]["url"], "https://e.example/1");

    let fetch = tools.iter().find(|t| t.name() == "web_fetch").unwrap();
    let out = fetch
        .call(args(json!({"url": format!("http://{addr}/page")})), &h.ctx)
        .await
        .unwrap();
    assert_eq!(text(&out), "0123456", "max_chars: 7 applied");
}

#[tokio::test]
async fn the_web_section_turns_the_guard_on_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings_from_yaml(
        "tools:\n  - {name: web_fetch, use: fawn.tools:web_fetch_direct}\n",
        dir.path(),
    );
    let reg = ToolRegistry::from_settings(&s).unwrap();
    let h = Harness::new().await;
    let out = reg.configured()[0]
        .tool
        .call(args(json!({"url": "http://127.0.0.1:9/"})), &h.ctx)
        .await
        .unwrap();
    assert!(text(&out).starts_with("Error: Refusing to fetch http://127.0.0.1:9/"));
}

/// DeerFlow's default tool list, as shipped in `config.example.yaml`.
const DEERFLOW_TOOLS: &str = r#"
tool_groups: [{name: web}, {name: "file:read"}, {name: "file:write"}, {name: bash}]
tools:
  - {name: web_search, group: web, use: deerflow.community.ddg_search.tools:web_search_tool, max_results: 5}
  - {name: web_fetch, group: web, use: deerflow.community.jina_ai.tools:web_fetch_tool, timeout: 10}
  - {name: ls, group: "file:read", use: deerflow.sandbox.tools:ls_tool}
  - {name: read_file, group: "file:read", use: deerflow.sandbox.tools:read_file_tool}
  - {name: glob, group: "file:read", use: deerflow.sandbox.tools:glob_tool, max_results: 2}
  - {name: grep, group: "file:read", use: deerflow.sandbox.tools:grep_tool, max_results: 100}
  - {name: write_file, group: "file:write", use: deerflow.sandbox.tools:write_file_tool}
  - {name: str_replace, group: "file:write", use: deerflow.sandbox.tools:str_replace_tool}
  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}
"#;

#[tokio::test]
async fn deerflow_default_tools_build_and_sandbox_options_arrive() {
    let h = Harness::new().await;
    let s = settings_from_yaml(DEERFLOW_TOOLS, h.dir.path());
    assert!(validate_tool_config(&s.app).is_empty());
    let reg = ToolRegistry::from_settings(&s).unwrap();
    let with_bash = reg.assemble(&ToolSetup {
        bash_available: true,
        ..Default::default()
    });
    assert_eq!(
        names(&with_bash),
        vec![
            "web_search",
            "web_fetch",
            "ls",
            "read_file",
            "glob",
            "grep",
            "write_file",
            "str_replace",
            "bash",
            "present_files",
            "ask_clarification"
        ]
    );
    let without = reg.assemble(&ToolSetup::default());
    assert!(!names(&without).contains(&"bash".to_string()));
    let readers = reg.assemble(&ToolSetup {
        groups: Some(vec!["file:read".into()]),
        bash_available: true,
        ..Default::default()
    });
    assert_eq!(
        names(&readers),
        vec![
            "ls",
            "read_file",
            "glob",
            "grep",
            "present_files",
            "ask_clarification"
        ]
    );

    // `max_results: 2` of the glob entry caps what glob returns.
    for f in ["a.md", "b.md", "c.md"] {
        h.write(&format!("workspace/{f}"), b"x");
    }
    let glob = with_bash.iter().find(|t| t.name() == "glob").unwrap();
    let out = glob
        .call(
            args(json!({"description": "find", "pattern": "*.md", "path": "/mnt/user-data/workspace"})),
            &h.ctx,
        )
        .await
        .unwrap();
    assert!(
        text(&out).starts_with("Found 2 paths under /mnt/user-data/workspace (showing first 2)"),
        "{}",
        text(&out)
    );

    let bad = settings_from_yaml(
        "tools:\n  - {name: glob, use: deerflow.sandbox.tools:glob_tool, max_results: many}\n",
        h.dir.path(),
    );
    let issues = validate_tool_config(&bad.app);
    assert_eq!(
        issues.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
        vec!["tools[0].max_results: expected an integer, got \"many\"".to_string()]
    );
}

#[test]
fn assembly_order_and_switches() {
    let dir = tempfile::tempdir().unwrap();
    let reg = ToolRegistry::from_settings(&settings_from_yaml(WEB_ONLY, dir.path())).unwrap();

    let minimal = reg.assemble(&ToolSetup::default());
    assert_eq!(
        names(&minimal),
        vec![
            "web_search",
            "web_fetch",
            "jina_fetch",
            "present_files",
            "ask_clarification"
        ]
    );

    let full = reg.assemble(&ToolSetup {
        supports_vision: true,
        subagents: Some(Arc::new(Runner)),
        plan_mode: true,
        mcp_tools: vec![
            Arc::new(Named("github_search")),
            Arc::new(Named("web_search")),
        ],
        extra_tools: vec![
            Arc::new(Named("update_agent")),
            Arc::new(Named("present_files")),
        ],
        ..Default::default()
    });
    assert_eq!(
        names(&full),
        vec![
            "web_search",
            "web_fetch",
            "jina_fetch",
            "present_files",
            "ask_clarification",
            "task",
            "view_image",
            "github_search",
            "write_todos",
            "update_agent"
        ],
        "first wins on duplicate names"
    );
    let task = full.iter().find(|t| t.name() == "task").unwrap();
    assert_eq!(
        task.parameters()["properties"]["subagent_type"]["enum"],
        json!(["general-purpose"])
    );

    let restricted = reg.assemble(&ToolSetup {
        groups: Some(vec!["fetch".into(), "nope".into()]),
        non_interactive: true,
        ..Default::default()
    });
    assert_eq!(
        names(&restricted),
        vec!["web_fetch", "jina_fetch", "present_files"]
    );
    assert_eq!(
        reg.unknown_groups(&["fetch".into(), "nope".into()]),
        vec!["nope".to_string()]
    );

    let none = reg.assemble(&ToolSetup {
        groups: Some(vec![]),
        ..Default::default()
    });
    assert_eq!(names(&none), vec!["present_files", "ask_clarification"]);
}
