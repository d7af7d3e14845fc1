//! `ls`: a directory listed two levels deep.

use super::{de_description, fail, sandbox, schema};
use crate::args::parse_args;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use fawn_sandbox::SandboxError;
use fawn_sandbox::output::truncate_ls;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;

#[derive(Deserialize, JsonSchema)]
struct LsArgs {
    /// Why you are making this call, in a few words; it is shown to the user. Always give this argument first.
    #[serde(default, deserialize_with = "de_description")]
    #[allow(dead_code)]
    description: String,
    /// Absolute path of the directory to list, e.g. `/mnt/user-data/workspace`.
    path: String,
}

/// DeerFlow's `ls`.
pub struct LsTool {
    parameters: Arc<Value>,
}

impl LsTool {
    pub fn new() -> LsTool {
        LsTool {
            parameters: schema::<LsArgs>(),
        }
    }
}

impl Default for LsTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for LsTool {
    fn name(&self) -> &str {
        "ls"
    }

    fn description(&self) -> &str {
        "List the files and directories under a directory, two levels deep, one absolute path \
         per line (directories end with `/`). Dependency, cache and VCS directories such as \
         node_modules or .git are left out."
    }

    fn parameters(&self) -> Arc<Value> {
        self.parameters.clone()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let a: LsArgs = parse_args("ls", args)?;
        let sb = match sandbox(ctx).await {
            Ok(s) => s,
            Err(out) => return Ok(out),
        };
        let p = &a.path;
        match sb.list_dir(p, 2).await {
            Ok(entries) if entries.is_empty() => Ok(ToolOutput::text("(empty)")),
            Ok(entries) => {
                let max = ctx.settings.app.sandbox.ls_output_max_chars;
                Ok(ToolOutput::text(truncate_ls(&entries.join("\n"), max)))
            }
            Err(SandboxError::NotFound(_) | SandboxError::NotADirectory(_)) => {
                Ok(fail(format!("Error: Directory not found: {p}")))
            }
            Err(SandboxError::PermissionDenied(_)) => {
                Ok(fail(format!("Error: Permission denied: {p}")))
            }
            Err(
                e @ (SandboxError::SkillDisabled(_)
                | SandboxError::Unavailable(_)
                | SandboxError::Invalid(_)),
            ) => Ok(fail(format!("Error: {e}"))),
            Err(e) => Ok(fail(format!(
                "Error: Unexpected error listing directory: {e}"
            ))),
        }
    }
}
