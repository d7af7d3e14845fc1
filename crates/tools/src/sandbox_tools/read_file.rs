//! `read_file`: a UTF-8 text file, whole or a range of lines.

use super::{READ_MAX_BYTES, de_description, de_opt_int, fail, sandbox, schema};
use crate::args::parse_args;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use fawn_sandbox::SandboxError;
use fawn_sandbox::output::truncate_read_file;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;

#[derive(Deserialize, JsonSchema)]
struct ReadFileArgs {
    /// Why you are making this call, in a few words; it is shown to the user. Always give this argument first.
    #[serde(default, deserialize_with = "de_description")]
    #[allow(dead_code)]
    description: String,
    /// Absolute path of the file, e.g. `/mnt/user-data/uploads/report.md`.
    path: String,
    /// First line to return (1-based, inclusive). Omit to start at the beginning.
    #[serde(default, deserialize_with = "de_opt_int")]
    #[schemars(with = "Option<i64>")]
    start_line: Option<i64>,
    /// Last line to return (1-based, inclusive). Omit to read to the end.
    #[serde(default, deserialize_with = "de_opt_int")]
    #[schemars(with = "Option<i64>")]
    end_line: Option<i64>,
}

/// DeerFlow's `read_file`.
pub struct ReadFileTool {
    parameters: Arc<Value>,
}

impl ReadFileTool {
    pub fn new() -> ReadFileTool {
        ReadFileTool {
            parameters: schema::<ReadFileArgs>(),
        }
    }
}

impl Default for ReadFileTool {
    fn default() -> Self {
        Self::new()
    }
}

/// Text of a file as DeerFlow reads it: strict UTF-8 (NUL bytes count as binary too), with
/// universal newlines. `None` for binary content.
pub(crate) fn decode_text(bytes: Vec<u8>) -> Option<String> {
    if bytes.contains(&0) {
        return None;
    }
    let s = String::from_utf8(bytes).ok()?;
    Some(if s.contains('\r') {
        s.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        s
    })
}

/// Lines `start..=end` (1-based), each without its line break, joined by `\n`.
fn line_range(text: &str, start: i64, end: Option<i64>) -> String {
    let mut out: Vec<&str> = Vec::new();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let n = i as i64 + 1;
        if n < start {
            continue;
        }
        if end.is_some_and(|e| n > e) {
            break;
        }
        out.push(line.trim_end_matches(['\n', '\r']));
    }
    out.join("\n")
}

#[async_trait]
impl Tool for ReadFileTool {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a UTF-8 text file (source code, configuration, logs, documents). Give \
         start_line/end_line (1-based, inclusive) to read part of a long file; long output is \
         cut with a note saying so. Binary files (spreadsheets, PDFs, images) are refused: use \
         bash with a suitable program for those."
    }

    fn parameters(&self) -> Arc<Value> {
        self.parameters.clone()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let a: ReadFileArgs = parse_args("read_file", args)?;
        if a.start_line.is_some_and(|s| s < 1) {
            return Ok(ToolOutput::text("(start_line must be >= 1)"));
        }
        let start = a.start_line.unwrap_or(1);
        if a.end_line.is_some_and(|e| e < 1) {
            return Ok(ToolOutput::text("(end_line must be >= 1)"));
        }
        if a.end_line.is_some_and(|e| start > e) {
            return Ok(ToolOutput::text(
                "(start_line > end_line — no lines in range)",
            ));
        }
        let sb = match sandbox(ctx).await {
            Ok(s) => s,
            Err(out) => return Ok(out),
        };
        let p = &a.path;
        let bytes = match sb.read_bytes(p, READ_MAX_BYTES).await {
            Ok(b) => b,
            Err(SandboxError::NotFound(_) | SandboxError::NotADirectory(_)) => {
                return Ok(fail(format!("Error: File not found: {p}")));
            }
            Err(SandboxError::PermissionDenied(_)) => {
                return Ok(fail(format!("Error: Permission denied reading file: {p}")));
            }
            Err(SandboxError::IsADirectory(_)) => {
                return Ok(fail(format!("Error: Path is a directory, not a file: {p}")));
            }
            Err(SandboxError::TooLarge(_)) => {
                return Ok(fail(format!(
                    "Error: File too large to read: {p} (the limit is {} MiB). Use bash (head, \
                     tail, sed -n 'FROM,TOp') to read parts of it.",
                    READ_MAX_BYTES / (1024 * 1024)
                )));
            }
            Err(e @ (SandboxError::SkillDisabled(_) | SandboxError::Unavailable(_))) => {
                return Ok(fail(format!("Error: {e}")));
            }
            Err(e) => return Ok(fail(format!("Error: Unexpected error reading file: {e}"))),
        };
        let Some(text) = decode_text(bytes) else {
            return Ok(fail(format!(
                "Error: cannot read '{p}' as text — it appears to be a binary file (for example \
                 a spreadsheet, a PDF or an image). read_file only reads UTF-8 text; use bash \
                 with a suitable program instead (python with pandas/openpyxl for spreadsheets), \
                 or view_image for images."
            )));
        };
        let content = if a.start_line.is_some() || a.end_line.is_some() {
            line_range(&text, start, a.end_line)
        } else {
            text
        };
        if content.is_empty() {
            if a.start_line.is_some_and(|s| s > 1) {
                return Ok(ToolOutput::text("(start_line exceeds file length)"));
            }
            return Ok(ToolOutput::text("(empty)"));
        }
        let max = ctx.settings.app.sandbox.read_file_output_max_chars;
        Ok(ToolOutput::text(truncate_read_file(&content, max)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_python_line_iteration() {
        let t = "a\nb\nc\n";
        assert_eq!(line_range(t, 1, Some(2)), "a\nb");
        assert_eq!(line_range(t, 2, None), "b\nc");
        assert_eq!(line_range(t, 4, None), "");
        assert_eq!(line_range("x\n\n\n", 2, Some(3)), "\n");
        assert_eq!(line_range("no newline", 1, Some(1)), "no newline");
    }

    #[test]
    fn decoding() {
        assert_eq!(decode_text(b"a\r\nb\rc".to_vec()).unwrap(), "a\nb\nc");
        assert!(decode_text(vec![0xff, 0xfe]).is_none());
        assert!(decode_text(b"a\0b".to_vec()).is_none());
    }
}
