//! Which tools a run gets: the `tools:` entries of `config.yaml` mapped to Fawn's
//! implementations, plus the built-ins, MCP tools and run-specific extras.
//!
//! # `use:` paths
//!
//! A `tools:` entry selects its implementation with DeerFlow's reflection path, or Fawn's own
//! `fawn.tools:<name>` spelling (see [`SUPPORTED_USES`]):
//!
//! | `use:` | tool |
//! |---|---|
//! | `deerflow.sandbox.tools:{bash,ls,read_file,write_file,str_replace,glob,grep}_tool`, `fawn.tools:{bash,…}` | sandbox file tools and bash |
//! | `deerflow.community.ddg_search.tools:web_search_tool`, `fawn.tools:web_search_duckduckgo` | DuckDuckGo search |
//! | `deerflow.community.tavily.tools:web_search_tool`, `fawn.tools:web_search_tavily` | Tavily search |
//! | `deerflow.community.searxng.tools:web_search_tool`, `fawn.tools:web_search_searxng` | SearXNG search |
//! | `deerflow.community.jina_ai.tools:web_fetch_tool`, `fawn.tools:web_fetch_jina` | Jina reader |
//! | `deerflow.community.tavily.tools:web_fetch_tool`, `fawn.tools:web_fetch_tavily` | Tavily extract |
//! | `fawn.tools:web_fetch_direct` | Fawn's own fetch (HTML → Markdown) |
//!
//! Every other key of the entry (`max_results`, `timeout`, `api_key`, …) is handed to the
//! implementation. An unknown `use:` or an option of the wrong type is a configuration
//! error ([`validate_tool_config`], reported by `fawn check-config`, and by
//! [`ToolRegistry::from_settings`]).
//!
//! The model sees each config tool under the entry's `name:` (DeerFlow configs use the
//! implementation's own name there, e.g. `web_search`).
//!
//! # Per-run assembly
//!
//! Build one [`ToolRegistry`] per process (it holds the HTTP clients), then call
//! [`ToolRegistry::assemble`] for each run with a [`ToolSetup`]. The order follows DeerFlow's
//! `get_available_tools` (reference §3.1):
//!
//! 1. config tools, in file order, restricted to `setup.groups` when a custom agent names
//!    tool groups, and without `bash` when `setup.bash_available` is false;
//! 2. built-ins: `present_files`, `ask_clarification` (unless `non_interactive`), `task`
//!    (when `setup.subagents` is set), `view_image` (when `supports_vision`);
//! 3. `setup.mcp_tools`;
//! 4. `write_todos` (when `plan_mode`);
//! 5. `setup.extra_tools` (e.g. `update_agent`, `setup_agent`).
//!
//! When two tools share a name the first one wins and the later one is dropped with a
//! warning in the log.

use crate::builtins::{
    AskClarificationTool, PresentFilesTool, TaskTool, ViewImageTool, WriteTodosTool,
};
use crate::web::{
    FetchBackend, SearchBackend, SsrfPolicy, WebFetchTool, WebSearchTool, WebToolOptions,
};
use crate::{SubagentRunner, Tool};
use fawn_config::{AppConfig, ConfigIssue, Settings, ToolConfig};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::sync::Arc;

/// A sandbox tool (implemented in [`crate::sandbox_tools`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SandboxToolKind {
    Bash,
    Ls,
    ReadFile,
    WriteFile,
    StrReplace,
    Glob,
    Grep,
}

impl SandboxToolKind {
    /// The tool's own name (`read_file`, …).
    pub fn tool_name(self) -> &'static str {
        match self {
            SandboxToolKind::Bash => "bash",
            SandboxToolKind::Ls => "ls",
            SandboxToolKind::ReadFile => "read_file",
            SandboxToolKind::WriteFile => "write_file",
            SandboxToolKind::StrReplace => "str_replace",
            SandboxToolKind::Glob => "glob",
            SandboxToolKind::Grep => "grep",
        }
    }
}

/// The implementation a `use:` path selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolImpl {
    Sandbox(SandboxToolKind),
    WebSearch(SearchProviderKind),
    WebFetch(FetchProviderKind),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchProviderKind {
    Tavily,
    DuckDuckGo,
    Searxng,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchProviderKind {
    Direct,
    Jina,
    Tavily,
}

use FetchProviderKind as F;
use SandboxToolKind as S;
use SearchProviderKind as W;

/// Every `use:` path Fawn understands, with what it selects.
pub const SUPPORTED_USES: &[(&str, ToolImpl)] = &[
    (
        "deerflow.sandbox.tools:bash_tool",
        ToolImpl::Sandbox(S::Bash),
    ),
    ("deerflow.sandbox.tools:ls_tool", ToolImpl::Sandbox(S::Ls)),
    (
        "deerflow.sandbox.tools:read_file_tool",
        ToolImpl::Sandbox(S::ReadFile),
    ),
    (
        "deerflow.sandbox.tools:write_file_tool",
        ToolImpl::Sandbox(S::WriteFile),
    ),
    (
        "deerflow.sandbox.tools:str_replace_tool",
        ToolImpl::Sandbox(S::StrReplace),
    ),
    (
        "deerflow.sandbox.tools:glob_tool",
        ToolImpl::Sandbox(S::Glob),
    ),
    (
        "deerflow.sandbox.tools:grep_tool",
        ToolImpl::Sandbox(S::Grep),
    ),
    (
        "deerflow.community.ddg_search.tools:web_search_tool",
        ToolImpl::WebSearch(W::DuckDuckGo),
    ),
    (
        "deerflow.community.tavily.tools:web_search_tool",
        ToolImpl::WebSearch(W::Tavily),
    ),
    (
        "deerflow.community.searxng.tools:web_search_tool",
        ToolImpl::WebSearch(W::Searxng),
    ),
    (
        "deerflow.community.jina_ai.tools:web_fetch_tool",
        ToolImpl::WebFetch(F::Jina),
    ),
    (
        "deerflow.community.tavily.tools:web_fetch_tool",
        ToolImpl::WebFetch(F::Tavily),
    ),
    ("fawn.tools:bash", ToolImpl::Sandbox(S::Bash)),
    ("fawn.tools:ls", ToolImpl::Sandbox(S::Ls)),
    ("fawn.tools:read_file", ToolImpl::Sandbox(S::ReadFile)),
    ("fawn.tools:write_file", ToolImpl::Sandbox(S::WriteFile)),
    ("fawn.tools:str_replace", ToolImpl::Sandbox(S::StrReplace)),
    ("fawn.tools:glob", ToolImpl::Sandbox(S::Glob)),
    ("fawn.tools:grep", ToolImpl::Sandbox(S::Grep)),
    (
        "fawn.tools:web_search_duckduckgo",
        ToolImpl::WebSearch(W::DuckDuckGo),
    ),
    (
        "fawn.tools:web_search_tavily",
        ToolImpl::WebSearch(W::Tavily),
    ),
    (
        "fawn.tools:web_search_searxng",
        ToolImpl::WebSearch(W::Searxng),
    ),
    ("fawn.tools:web_fetch_direct", ToolImpl::WebFetch(F::Direct)),
    ("fawn.tools:web_fetch_jina", ToolImpl::WebFetch(F::Jina)),
    ("fawn.tools:web_fetch_tavily", ToolImpl::WebFetch(F::Tavily)),
];

/// The implementation `use_path` selects (surrounding whitespace ignored).
pub fn resolve_use(use_path: &str) -> Option<ToolImpl> {
    let p = use_path.trim();
    SUPPORTED_USES
        .iter()
        .find(|(u, _)| *u == p)
        .map(|(_, imp)| *imp)
}

fn unknown_use_message(use_path: &str) -> String {
    let supported: Vec<&str> = SUPPORTED_USES.iter().map(|(u, _)| *u).collect();
    let note = if use_path.trim().starts_with("deerflow.") {
        " (not a DeerFlow tool Fawn implements)"
    } else {
        ""
    };
    format!(
        "unknown tool '{use_path}'{note}; supported: {}",
        supported.join(", ")
    )
}

/// A `tools:` entry, checked: what it selects and its typed options.
#[derive(Clone, Debug)]
struct Planned {
    imp: ToolImpl,
    web: WebToolOptions,
}

fn plan_entry(index: usize, t: &ToolConfig) -> Result<Planned, Vec<ConfigIssue>> {
    let base = format!("tools[{index}]");
    let Some(imp) = resolve_use(&t.use_) else {
        if t.use_.trim().is_empty() {
            // The config loader already reports a missing `use`.
            return Err(Vec::new());
        }
        return Err(vec![ConfigIssue::unsupported(
            format!("{base}.use"),
            unknown_use_message(&t.use_),
        )]);
    };
    let web = match imp {
        ToolImpl::WebSearch(_) | ToolImpl::WebFetch(_) => WebToolOptions::from_extra(&t.extra)
            .map_err(|errs| {
                errs.into_iter()
                    .map(|e| {
                        let path = if e.key.is_empty() {
                            base.clone()
                        } else {
                            format!("{base}.{}", e.key)
                        };
                        ConfigIssue::new(path, e.message)
                    })
                    .collect::<Vec<_>>()
            })?,
        ToolImpl::Sandbox(_) => WebToolOptions::default(),
    };
    if let ToolImpl::Sandbox(S::Glob | S::Grep) = imp
        && let Some(v) = t.extra.get("max_results")
        && !v.is_null()
        && v.as_i64().is_none()
    {
        return Err(vec![ConfigIssue::new(
            format!("{base}.max_results"),
            format!("expected an integer, got {v}"),
        )]);
    }
    if let ToolImpl::WebSearch(W::Searxng) = imp
        && web.base_url.is_none()
    {
        return Err(vec![ConfigIssue::new(
            format!("{base}.base_url"),
            "is required for SearXNG: the address of your SearXNG instance",
        )]);
    }
    Ok(Planned { imp, web })
}

/// Every error in the `tools:` section that the tool registry owns: unknown `use:` paths
/// (`tools[3].use: unknown tool 'x.y:z'; supported: …`) and tool options of the wrong type
/// or out of range (`tools[0].max_results: …`). Undeclared groups and duplicate names are
/// reported by the config loader (as warnings) and not repeated here.
pub fn validate_tool_config(app: &AppConfig) -> Vec<ConfigIssue> {
    let mut issues = Vec::new();
    for (i, t) in app.tools.iter().enumerate() {
        if let Err(mut e) = plan_entry(i, t) {
            issues.append(&mut e);
        }
    }
    issues
}

/// One `tools:` entry, built.
#[derive(Clone)]
pub struct ConfiguredTool {
    /// The entry's `name:`, which the model sees.
    pub name: String,
    pub group: Option<String>,
    pub use_path: String,
    pub implementation: ToolImpl,
    /// The entry's extra keys, as given.
    pub extra: Map<String, Value>,
    pub tool: Arc<dyn Tool>,
}

impl std::fmt::Debug for ConfiguredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfiguredTool")
            .field("name", &self.name)
            .field("group", &self.group)
            .field("use_path", &self.use_path)
            .finish_non_exhaustive()
    }
}

/// What one run needs besides the config tools. `Default` is the most restrictive setup: no
/// bash, no vision, no subagents, no plan mode, clarification on.
#[derive(Clone, Default)]
pub struct ToolSetup {
    /// A custom agent's `tool_groups`: `Some` keeps only config tools in these groups
    /// (built-ins and MCP tools are unaffected); `None` keeps all.
    pub groups: Option<Vec<String>>,
    /// False drops `bash` config tools (local sandbox without an OS sandbox or
    /// `allow_host_bash`).
    pub bash_available: bool,
    /// The model accepts images: adds `view_image`.
    pub supports_vision: bool,
    /// `subagent_enabled`: the runner for `task` (its `available()` list becomes the
    /// `subagent_type` enum). `None`: no `task` tool.
    pub subagents: Option<Arc<dyn SubagentRunner>>,
    /// Adds `write_todos` (plan mode). Leave it false when the middleware chain's
    /// `TodoMiddleware` already contributes the tool; a duplicate would be dropped anyway.
    pub plan_mode: bool,
    /// `non_interactive`: removes `ask_clarification`.
    pub non_interactive: bool,
    /// MCP tools (already filtered and named by the MCP layer).
    pub mcp_tools: Vec<Arc<dyn Tool>>,
    /// Run-specific tools appended last (`update_agent`, `setup_agent`, memory tools, …).
    pub extra_tools: Vec<Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSetup")
            .field("groups", &self.groups)
            .field("bash_available", &self.bash_available)
            .field("supports_vision", &self.supports_vision)
            .field("subagents", &self.subagents.is_some())
            .field("plan_mode", &self.plan_mode)
            .field("non_interactive", &self.non_interactive)
            .field("mcp_tools", &self.mcp_tools.len())
            .field("extra_tools", &self.extra_tools.len())
            .finish()
    }
}

/// The configured tools of a process. Cheap to share (`Arc`); build once.
#[derive(Clone, Debug)]
pub struct ToolRegistry {
    configured: Vec<ConfiguredTool>,
}

/// A tool under another name (a `tools:` entry whose `name:` differs from the
/// implementation's).
struct Renamed {
    name: String,
    inner: Arc<dyn Tool>,
}

#[async_trait::async_trait]
impl Tool for Renamed {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn parameters(&self) -> Arc<Value> {
        self.inner.parameters()
    }
    fn return_direct(&self) -> bool {
        self.inner.return_direct()
    }
    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &crate::ToolContext,
    ) -> Result<crate::ToolOutput, crate::ToolError> {
        self.inner.call(args, ctx).await
    }
}

/// Builds a sandbox tool from [`crate::sandbox_tools`], handing it the entry's extra keys
/// (`max_results` for `glob`/`grep`).
fn build_sandbox_tool(
    kind: SandboxToolKind,
    settings: &Settings,
    extra: &Map<String, Value>,
) -> Result<Arc<dyn Tool>, String> {
    crate::sandbox_tools::sandbox_tool(kind.tool_name(), settings, extra)
        .ok_or_else(|| format!("no sandbox tool named '{}'", kind.tool_name()))
}

impl ToolRegistry {
    /// Builds every `tools:` entry of `settings`, with the SSRF policy from `web:`.
    pub fn from_settings(settings: &Settings) -> Result<ToolRegistry, Vec<ConfigIssue>> {
        let policy = SsrfPolicy {
            allow_private: settings.app.web.allow_private_addresses,
            exempt: Vec::new(),
        };
        Self::with_policy(settings, policy)
    }

    /// As [`ToolRegistry::from_settings`] with an explicit SSRF policy for `web_fetch`.
    pub fn with_policy(
        settings: &Settings,
        policy: SsrfPolicy,
    ) -> Result<ToolRegistry, Vec<ConfigIssue>> {
        let mut issues = Vec::new();
        let mut configured = Vec::new();
        for (i, t) in settings.app.tools.iter().enumerate() {
            let planned = match plan_entry(i, t) {
                Ok(p) => p,
                Err(mut e) => {
                    issues.append(&mut e);
                    continue;
                }
            };
            if matches!(planned.imp, ToolImpl::WebSearch(_) | ToolImpl::WebFetch(_)) {
                let unknown = WebToolOptions::unknown_keys(&t.extra);
                if !unknown.is_empty() {
                    tracing::warn!(tool = %t.name, keys = ?unknown, "tool options not used by this tool");
                }
            }
            let built: Result<Arc<dyn Tool>, String> = match planned.imp {
                ToolImpl::Sandbox(kind) => build_sandbox_tool(kind, settings, &t.extra),
                ToolImpl::WebSearch(p) => {
                    let backend = match p {
                        W::Tavily => SearchBackend::Tavily,
                        W::DuckDuckGo => SearchBackend::DuckDuckGo,
                        W::Searxng => SearchBackend::Searxng,
                    };
                    WebSearchTool::new(t.name.clone(), backend, planned.web)
                        .map(|x| Arc::new(x) as Arc<dyn Tool>)
                }
                ToolImpl::WebFetch(p) => {
                    let backend = match p {
                        F::Direct => FetchBackend::Direct,
                        F::Jina => FetchBackend::Jina,
                        F::Tavily => FetchBackend::Tavily,
                    };
                    WebFetchTool::new(t.name.clone(), backend, planned.web, policy.clone())
                        .map(|x| Arc::new(x) as Arc<dyn Tool>)
                }
            };
            match built {
                Ok(tool) => {
                    let tool = if tool.name() != t.name {
                        Arc::new(Renamed {
                            name: t.name.clone(),
                            inner: tool,
                        }) as Arc<dyn Tool>
                    } else {
                        tool
                    };
                    configured.push(ConfiguredTool {
                        name: t.name.clone(),
                        group: t.group.clone(),
                        use_path: t.use_.clone(),
                        implementation: planned.imp,
                        extra: t.extra.clone(),
                        tool,
                    });
                }
                Err(e) => issues.push(ConfigIssue::new(format!("tools[{i}]"), e)),
            }
        }
        if issues.is_empty() {
            Ok(ToolRegistry { configured })
        } else {
            Err(issues)
        }
    }

    /// The built `tools:` entries, in file order.
    pub fn configured(&self) -> &[ConfiguredTool] {
        &self.configured
    }

    /// Group names in `groups` that no configured tool belongs to (a custom agent's typo).
    pub fn unknown_groups(&self, groups: &[String]) -> Vec<String> {
        groups
            .iter()
            .filter(|g| {
                !self
                    .configured
                    .iter()
                    .any(|c| c.group.as_deref() == Some(g.as_str()))
            })
            .cloned()
            .collect()
    }

    /// The tools of one run, in DeerFlow's order (see the module docs).
    pub fn assemble(&self, setup: &ToolSetup) -> Vec<Arc<dyn Tool>> {
        if let Some(groups) = &setup.groups {
            let unknown = self.unknown_groups(groups);
            if !unknown.is_empty() {
                tracing::warn!(groups = ?unknown, "agent names tool groups that no configured tool belongs to");
            }
        }
        let mut candidates: Vec<Arc<dyn Tool>> = Vec::new();
        for c in &self.configured {
            if let Some(groups) = &setup.groups
                && !c
                    .group
                    .as_ref()
                    .is_some_and(|g| groups.iter().any(|x| x == g))
            {
                continue;
            }
            if c.implementation == ToolImpl::Sandbox(SandboxToolKind::Bash) && !setup.bash_available
            {
                continue;
            }
            candidates.push(c.tool.clone());
        }
        candidates.push(Arc::new(PresentFilesTool::new()));
        if !setup.non_interactive {
            candidates.push(Arc::new(AskClarificationTool::new()));
        }
        if let Some(runner) = &setup.subagents {
            candidates.push(Arc::new(TaskTool::new(&runner.available())));
        }
        if setup.supports_vision {
            candidates.push(Arc::new(ViewImageTool::new()));
        }
        candidates.extend(setup.mcp_tools.iter().cloned());
        if setup.plan_mode {
            candidates.push(Arc::new(WriteTodosTool::new()));
        }
        candidates.extend(setup.extra_tools.iter().cloned());
        dedupe_first_wins(candidates)
    }
}

/// Keeps the first tool of each name, logging a warning for each one dropped.
pub fn dedupe_first_wins(tools: Vec<Arc<dyn Tool>>) -> Vec<Arc<dyn Tool>> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = Vec::with_capacity(tools.len());
    for t in tools {
        if seen.insert(t.name().to_string()) {
            out.push(t);
        } else {
            tracing::warn!(tool = %t.name(), "duplicate tool name; keeping the first one");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_deerflow_default_use_resolves() {
        for u in [
            "deerflow.sandbox.tools:bash_tool",
            "deerflow.sandbox.tools:ls_tool",
            "deerflow.sandbox.tools:read_file_tool",
            "deerflow.sandbox.tools:write_file_tool",
            "deerflow.sandbox.tools:str_replace_tool",
            "deerflow.sandbox.tools:glob_tool",
            "deerflow.sandbox.tools:grep_tool",
            "deerflow.community.ddg_search.tools:web_search_tool",
            "deerflow.community.tavily.tools:web_search_tool",
            "deerflow.community.jina_ai.tools:web_fetch_tool",
            " fawn.tools:web_fetch_direct ",
        ] {
            assert!(resolve_use(u).is_some(), "{u}");
        }
        assert_eq!(
            resolve_use("deerflow.sandbox.tools:glob_tool"),
            Some(ToolImpl::Sandbox(SandboxToolKind::Glob))
        );
        assert!(resolve_use("deerflow.community.firecrawl.tools:web_search_tool").is_none());
    }

    #[test]
    fn unknown_use_is_reported_with_its_index() {
        let mut app = AppConfig::default();
        app.tools.push(ToolConfig {
            name: "web_search".into(),
            group: Some("web".into()),
            use_: "deerflow.community.ddg_search.tools:web_search_tool".into(),
            extra: Map::new(),
        });
        app.tools.push(ToolConfig {
            name: "x".into(),
            group: None,
            use_: "x.y:z".into(),
            extra: Map::new(),
        });
        let issues = validate_tool_config(&app);
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].path, "tools[1].use");
        assert!(
            issues[0].to_string().starts_with(
                "tools[1].use: unknown tool 'x.y:z'; supported: deerflow.sandbox.tools:bash_tool, "
            ),
            "{}",
            issues[0]
        );
    }
}
