//! `glob`: paths matching a pattern under a directory.

use super::{de_bool, de_description, de_opt_int, effective_max_results, fail, sandbox, schema};
use crate::args::parse_args;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use fawn_sandbox::SandboxError;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;

/// DeerFlow's default `max_results` for glob.
pub const GLOB_DEFAULT_MAX_RESULTS: usize = 200;

fn default_max() -> Option<i64> {
    Some(GLOB_DEFAULT_MAX_RESULTS as i64)
}

#[derive(Deserialize, JsonSchema)]
struct GlobArgs {
    /// Why you are making this call, in a few words; it is shown to the user. Always give this argument first.
    #[serde(default, deserialize_with = "de_description")]
    #[allow(dead_code)]
    description: String,
    /// Glob pattern relative to `path`, e.g. `**/*.py`. A pattern without `/` matches file names at any depth; `**` spans directories.
    pattern: String,
    /// Absolute path of the directory to search under.
    path: String,
    /// Also return matching directories.
    #[serde(default, deserialize_with = "de_bool")]
    #[schemars(with = "bool")]
    include_dirs: bool,
    /// Most paths to return (default 200).
    #[serde(default = "default_max", deserialize_with = "de_opt_int")]
    #[schemars(with = "i64", default = "default_max")]
    max_results: Option<i64>,
}

/// DeerFlow's `glob`.
pub struct GlobTool {
    parameters: Arc<Value>,
    configured_max: Option<i64>,
}

impl GlobTool {
    /// `configured_max`: `max_results` of the tool's `tools:` entry, if any.
    pub fn new(configured_max: Option<i64>) -> GlobTool {
        GlobTool {
            parameters: schema::<GlobArgs>(),
            configured_max,
        }
    }
}

/// DeerFlow's result text.
pub(crate) fn format_glob(root: &str, matches: &[String], truncated: bool) -> String {
    if matches.is_empty() {
        return format!("No files matched under {root}");
    }
    let mut s = format!("Found {} paths under {root}", matches.len());
    if truncated {
        s.push_str(&format!(" (showing first {})", matches.len()));
    }
    for (i, m) in matches.iter().enumerate() {
        s.push_str(&format!("\n{}. {m}", i + 1));
    }
    if truncated {
        s.push_str("\nResults truncated. Narrow the path or pattern to see fewer matches.");
    }
    s
}

#[async_trait]
impl Tool for GlobTool {
    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> &str {
        "Find files (and, with include_dirs, directories) whose path under a directory matches \
         a glob pattern, such as `*.md` for Markdown files at any depth or `src/**/*.rs`."
    }

    fn parameters(&self) -> Arc<Value> {
        self.parameters.clone()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let a: GlobArgs = parse_args("glob", args)?;
        let max = effective_max_results(
            a.max_results.unwrap_or(0),
            self.configured_max,
            GLOB_DEFAULT_MAX_RESULTS,
            ctx.settings.app.sandbox.glob_max_results,
        );
        let sb = match sandbox(ctx).await {
            Ok(s) => s,
            Err(out) => return Ok(out),
        };
        let p = &a.path;
        match sb.glob(p, &a.pattern, a.include_dirs, max).await {
            Ok((m, truncated)) => Ok(ToolOutput::text(format_glob(p, &m, truncated))),
            Err(SandboxError::NotFound(_)) => Ok(fail(format!("Error: Directory not found: {p}"))),
            Err(SandboxError::NotADirectory(_)) => {
                Ok(fail(format!("Error: Path is not a directory: {p}")))
            }
            Err(SandboxError::PermissionDenied(_)) => {
                Ok(fail(format!("Error: Permission denied: {p}")))
            }
            Err(SandboxError::Invalid(msg)) => Ok(fail(format!("Error: {msg}"))),
            Err(e @ (SandboxError::SkillDisabled(_) | SandboxError::Unavailable(_))) => {
                Ok(fail(format!("Error: {e}")))
            }
            Err(e) => Ok(fail(format!(
                "Error: Unexpected error searching paths: {e}"
            ))),
        }
    }
}
