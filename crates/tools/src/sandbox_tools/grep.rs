//! `grep`: lines matching a pattern in a file or under a directory.

use super::{de_bool, de_description, de_opt_int, effective_max_results, fail, sandbox, schema};
use crate::args::parse_args;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use fawn_sandbox::{GrepMatch, GrepOptions, SandboxError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;

/// DeerFlow's default `max_results` for grep.
pub const GREP_DEFAULT_MAX_RESULTS: usize = 100;

fn default_max() -> Option<i64> {
    Some(GREP_DEFAULT_MAX_RESULTS as i64)
}

#[derive(Deserialize, JsonSchema)]
struct GrepArgs {
    /// Why you are making this call, in a few words; it is shown to the user. Always give this argument first.
    #[serde(default, deserialize_with = "de_description")]
    #[allow(dead_code)]
    description: String,
    /// Regular expression to search for (a plain string when `literal` is true).
    pattern: String,
    /// Absolute path of a file, or of a directory to search under.
    path: String,
    /// Only search files whose path (relative to `path`) matches this glob, e.g. `**/*.py`.
    #[serde(default)]
    glob: Option<String>,
    /// Treat `pattern` as a plain string.
    #[serde(default, deserialize_with = "de_bool")]
    #[schemars(with = "bool")]
    literal: bool,
    /// Match case exactly (the default ignores case).
    #[serde(default, deserialize_with = "de_bool")]
    #[schemars(with = "bool")]
    case_sensitive: bool,
    /// Most matching lines to return (default 100).
    #[serde(default = "default_max", deserialize_with = "de_opt_int")]
    #[schemars(with = "i64", default = "default_max")]
    max_results: Option<i64>,
}

/// DeerFlow's `grep`.
pub struct GrepTool {
    parameters: Arc<Value>,
    configured_max: Option<i64>,
}

impl GrepTool {
    /// `configured_max`: `max_results` of the tool's `tools:` entry, if any.
    pub fn new(configured_max: Option<i64>) -> GrepTool {
        GrepTool {
            parameters: schema::<GrepArgs>(),
            configured_max,
        }
    }
}

/// DeerFlow's result text.
pub(crate) fn format_grep(root: &str, matches: &[GrepMatch], truncated: bool) -> String {
    if matches.is_empty() {
        return format!("No matches found under {root}");
    }
    let mut s = format!("Found {} matches under {root}", matches.len());
    if truncated {
        s.push_str(&format!(" (showing first {})", matches.len()));
    }
    for m in matches {
        s.push_str(&format!("\n{}:{}: {}", m.path, m.line_number, m.line));
    }
    if truncated {
        s.push_str("\nResults truncated. Narrow the path or add a glob filter.");
    }
    s
}

#[async_trait]
impl Tool for GrepTool {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search the contents of a text file, or of every text file under a directory, for a \
         regular expression (case-insensitive unless case_sensitive is true). Each match is \
         shown as `path:line: text`. Binary files and files over 1 MB are skipped."
    }

    fn parameters(&self) -> Arc<Value> {
        self.parameters.clone()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let a: GrepArgs = parse_args("grep", args)?;
        let max = effective_max_results(
            a.max_results.unwrap_or(0),
            self.configured_max,
            GREP_DEFAULT_MAX_RESULTS,
            ctx.settings.app.sandbox.grep_max_results,
        );
        let sb = match sandbox(ctx).await {
            Ok(s) => s,
            Err(out) => return Ok(out),
        };
        let p = &a.path;
        let opts = GrepOptions {
            glob: a.glob.filter(|g| !g.is_empty()),
            literal: a.literal,
            case_sensitive: a.case_sensitive,
            max_results: max,
        };
        match sb.grep(p, &a.pattern, opts).await {
            Ok((m, truncated)) => Ok(ToolOutput::text(format_grep(p, &m, truncated))),
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
                "Error: Unexpected error searching file contents: {e}"
            ))),
        }
    }
}
