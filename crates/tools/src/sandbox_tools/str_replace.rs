//! `str_replace`: replace a substring in a file.

use super::read_file::decode_text;
use super::{READ_MAX_BYTES, de_bool, de_description, fail, sandbox, schema};
use crate::args::parse_args;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use fawn_sandbox::SandboxError;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;

#[derive(Deserialize, JsonSchema)]
struct StrReplaceArgs {
    /// Why you are making this call, in a few words; it is shown to the user. Always give this argument first.
    #[serde(default, deserialize_with = "de_description")]
    #[allow(dead_code)]
    description: String,
    /// Absolute path of the file to edit.
    path: String,
    /// The exact text to replace (include enough surrounding text to make it unique).
    old_str: String,
    /// The replacement text.
    new_str: String,
    /// Replace every occurrence instead of only the first.
    #[serde(default, deserialize_with = "de_bool")]
    #[schemars(with = "bool")]
    replace_all: bool,
}

/// DeerFlow's `str_replace`.
pub struct StrReplaceTool {
    parameters: Arc<Value>,
}

impl StrReplaceTool {
    pub fn new() -> StrReplaceTool {
        StrReplaceTool {
            parameters: schema::<StrReplaceArgs>(),
        }
    }
}

impl Default for StrReplaceTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for StrReplaceTool {
    fn name(&self) -> &str {
        "str_replace"
    }

    fn description(&self) -> &str {
        "Edit a text file by replacing old_str with new_str: the first occurrence, or every \
         occurrence when replace_all is true. old_str should appear exactly once unless \
         replace_all is set."
    }

    fn parameters(&self) -> Arc<Value> {
        self.parameters.clone()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let a: StrReplaceArgs = parse_args("str_replace", args)?;
        let sb = match sandbox(ctx).await {
            Ok(s) => s,
            Err(out) => return Ok(out),
        };
        let p = &a.path;
        let _guard = sb.lock_path(p).await;
        let bytes = match sb.read_bytes(p, READ_MAX_BYTES).await {
            Ok(b) => b,
            Err(SandboxError::NotFound(_) | SandboxError::NotADirectory(_)) => {
                return Ok(fail(format!("Error: File not found: {p}")));
            }
            Err(SandboxError::PermissionDenied(_)) => {
                return Ok(fail(format!(
                    "Error: Permission denied accessing file: {p}"
                )));
            }
            Err(SandboxError::IsADirectory(_)) => {
                return Ok(fail(format!("Error: Path is a directory, not a file: {p}")));
            }
            Err(e @ (SandboxError::SkillDisabled(_) | SandboxError::Unavailable(_))) => {
                return Ok(fail(format!("Error: {e}")));
            }
            Err(e) => {
                return Ok(fail(format!(
                    "Error: Unexpected error replacing string: {e}"
                )));
            }
        };
        let Some(content) = decode_text(bytes) else {
            return Ok(fail(format!(
                "Error: cannot edit '{p}' as text — it appears to be a binary file."
            )));
        };
        if a.old_str.is_empty() {
            // Replacing "" would insert new_str between every character: a no-op instead.
            return Ok(ToolOutput::text("OK"));
        }
        if !content.contains(&a.old_str) {
            return Ok(fail(format!(
                "Error: String to replace not found in file: {p}"
            )));
        }
        let updated = if a.replace_all {
            content.replace(&a.old_str, &a.new_str)
        } else {
            content.replacen(&a.old_str, &a.new_str, 1)
        };
        match sb.write_text(p, &updated, false).await {
            Ok(()) => Ok(ToolOutput::text("OK")),
            Err(SandboxError::PermissionDenied(_)) => Ok(fail(format!(
                "Error: Permission denied accessing file: {p}"
            ))),
            Err(e @ (SandboxError::SkillDisabled(_) | SandboxError::Unavailable(_))) => {
                Ok(fail(format!("Error: {e}")))
            }
            Err(e) => Ok(fail(format!(
                "Error: Unexpected error replacing string: {e}"
            ))),
        }
    }
}
