//! `bash`: a command in the thread's OS sandbox.

use super::{de_description, fail, sandbox, schema};
use crate::args::parse_args;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use fawn_config::Settings;
use fawn_sandbox::ExecOptions;
use fawn_sandbox::output::render_bash_output;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;

#[derive(Deserialize, JsonSchema)]
struct BashArgs {
    /// Why you are making this call, in a few words; it is shown to the user. Always give this argument first.
    #[serde(default, deserialize_with = "de_description")]
    #[allow(dead_code)]
    description: String,
    /// The bash command to run. Use absolute paths for files and directories.
    command: String,
}

/// DeerFlow's `bash`, run by the sandbox (bubblewrap by default).
pub struct BashTool {
    parameters: Arc<Value>,
    description: String,
}

impl BashTool {
    pub fn new(settings: &Settings) -> BashTool {
        let cfg = &settings.app.sandbox;
        let network = if cfg.network {
            "Network access is available."
        } else {
            "There is no network access (package installs from the internet will fail)."
        };
        BashTool {
            parameters: schema::<BashArgs>(),
            description: format!(
                "Run a bash command in this conversation's sandbox. The working directory is \
                 /mnt/user-data/workspace; uploaded files are in /mnt/user-data/uploads and \
                 results to hand to the user go in /mnt/user-data/outputs; skills are \
                 read-only under /mnt/skills. Use `python3` for Python. Every call starts a \
                 fresh shell and everything it started is stopped when it returns, so a server \
                 cannot be left running in the background; a command is killed after {} \
                 seconds. {network} Output is stdout, then stderr after `Std Error:`, then \
                 `Exit Code: N` when the command failed; very long output keeps its beginning \
                 and end.",
                cfg.bash_command_timeout
            ),
        }
    }
}

#[async_trait]
impl Tool for BashTool {
    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Arc<Value> {
        self.parameters.clone()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let a: BashArgs = parse_args("bash", args)?;
        let sb = match sandbox(ctx).await {
            Ok(s) => s,
            Err(out) => return Ok(out),
        };
        let run = sb.execute(&a.command, ExecOptions::default());
        // Dropping the call (cancellation) kills the command and everything it started.
        let result = tokio::select! {
            r = run => r,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        match result {
            Ok(out) => {
                let max = ctx.settings.app.sandbox.bash_output_max_chars;
                Ok(ToolOutput::text(render_bash_output(&out, max)))
            }
            Err(e) => Ok(fail(format!("Error: {e}"))),
        }
    }
}
