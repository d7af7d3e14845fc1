//! `write_file`: text to a file, replacing or appending.

use super::{de_bool, de_description, fail, sandbox, schema};
use crate::args::parse_args;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use fawn_config::Settings;
use fawn_sandbox::SandboxError;
use fawn_sandbox::output::truncate_error_detail;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;

/// DeerFlow bounds write_file error texts to this many characters.
const ERROR_MAX_CHARS: usize = 2000;

#[derive(Deserialize, JsonSchema)]
struct WriteFileArgs {
    /// Why you are making this call, in a few words; it is shown to the user. Always give this argument first.
    #[serde(default, deserialize_with = "de_description")]
    #[allow(dead_code)]
    description: String,
    /// Absolute path of the file, e.g. `/mnt/user-data/outputs/report.md`. Missing parent directories are created.
    path: String,
    /// The text to write.
    content: String,
    /// Add to the end of the file instead of replacing it.
    #[serde(default, deserialize_with = "de_bool")]
    #[schemars(with = "bool")]
    append: bool,
}

/// DeerFlow's `write_file`.
pub struct WriteFileTool {
    parameters: Arc<Value>,
    description: String,
}

/// "80 KB" for 81920, otherwise the byte count.
fn human_limit(bytes: usize) -> String {
    if bytes.is_multiple_of(1024) {
        format!("{} KB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}

impl WriteFileTool {
    pub fn new(settings: &Settings) -> WriteFileTool {
        let max = settings.app.sandbox.write_file_max_bytes;
        let size_rule = if max > 0 {
            format!(
                " One call without append may carry at most {} of content: for a longer \
                 document, write the first part, then add the rest with append=true in further \
                 calls, or edit sections with str_replace.",
                human_limit(max)
            )
        } else {
            String::new()
        };
        WriteFileTool {
            parameters: schema::<WriteFileArgs>(),
            description: format!(
                "Write text to a file, creating it and its parent directories if needed. The \
                 file is replaced unless append is true.{size_rule}"
            ),
        }
    }
}

/// Maps a failed write to DeerFlow's texts.
pub(crate) fn write_error(path: &str, e: SandboxError) -> ToolOutput {
    let text = match e {
        SandboxError::PermissionDenied(_) => {
            format!("Error: Permission denied writing to file: {path}")
        }
        SandboxError::IsADirectory(_) => format!("Error: Path is a directory, not a file: {path}"),
        e @ (SandboxError::SkillDisabled(_) | SandboxError::Unavailable(_)) => {
            format!("Error: {e}")
        }
        e => {
            let header = format!("Error: Failed to write file '{path}'");
            let budget = ERROR_MAX_CHARS
                .saturating_sub(header.chars().count() + 2)
                .max(1);
            format!(
                "{header}: {}",
                truncate_error_detail(&e.to_string(), budget)
            )
        }
    };
    fail(truncate_error_detail(&text, ERROR_MAX_CHARS))
}

#[async_trait]
impl Tool for WriteFileTool {
    fn name(&self) -> &str {
        "write_file"
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
        let a: WriteFileArgs = parse_args("write_file", args)?;
        let max = ctx.settings.app.sandbox.write_file_max_bytes;
        if !a.append && max > 0 && a.content.len() > max {
            return Ok(fail(format!(
                "Error: write_file content ({} bytes) exceeds the {max}-byte ({}) single-call \
                 limit. Split the content into smaller pieces: write the first section now, then \
                 either edit with `str_replace` or call write_file again with append=true for \
                 each further section (append calls are not limited).",
                a.content.len(),
                human_limit(max)
            )));
        }
        let sb = match sandbox(ctx).await {
            Ok(s) => s,
            Err(out) => return Ok(out),
        };
        let _guard = sb.lock_path(&a.path).await;
        match sb.write_text(&a.path, &a.content, a.append).await {
            Ok(()) => Ok(ToolOutput::text("OK")),
            Err(e) => Ok(write_error(&a.path, e)),
        }
    }
}
