//! One MCP tool as a Fawn [`Tool`], and MCP call results as ToolMessage content.
//!
//! Result content: text blocks are joined with newlines; an embedded text resource
//! contributes its text (after a `[resource <uri>]` line); images, audio and binary
//! resources are *described* (`[image: image/png, 1234 bytes]`), never passed on, so base64
//! payloads do not reach the model's context or the checkpoints; resource links are
//! described by URI. With no content blocks, `structuredContent` is given as JSON. An
//! `isError` result becomes an error ToolMessage with the same text.

use super::connect::Session;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use rmcp::model::CallToolResult;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// A tool of an MCP server.
pub(crate) struct McpTool {
    /// The name the model sees (`<server>_<tool>` unless prefixing is off).
    pub name: String,
    /// The tool's name on its server.
    pub remote: String,
    pub server: String,
    pub description: String,
    /// Built once per tool, then shared by its specs.
    pub parameters: Arc<Value>,
    pub session: Arc<Session>,
    pub call_timeout: Duration,
}

/// Longest tool name providers accept (OpenAI: 64); longer names are cut.
pub(crate) const MAX_TOOL_NAME: usize = 64;

/// A tool name providers accept: characters outside `[A-Za-z0-9_-]` become `_`, and the
/// name is cut at [`MAX_TOOL_NAME`] (a name the provider rejects would fail every run).
pub(crate) fn sanitize_name(name: &str) -> String {
    name.chars()
        .take(MAX_TOOL_NAME)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The tool's input schema as provider tool parameters: always an `object` with
/// `properties`.
pub(crate) fn parameters_of(schema: &Map<String, Value>) -> Value {
    let mut s = schema.clone();
    s.remove("$schema");
    if !s.contains_key("type") {
        s.insert("type".into(), Value::String("object".into()));
    }
    if !s.contains_key("properties") {
        s.insert("properties".into(), Value::Object(Map::new()));
    }
    Value::Object(s)
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
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
        let what = format!("MCP tool '{}' of server '{}'", self.remote, self.server);
        if !self.session.is_alive() {
            return Err(ToolError::Failed(format!(
                "{what} is unavailable: the connection to the server was lost"
            )));
        }
        let call = tokio::time::timeout(self.call_timeout, self.session.call(&self.remote, args));
        tokio::select! {
            _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            r = call => match r {
                Err(_) => Err(ToolError::Failed(format!(
                    "{what} timed out after {}s (tool_call_timeout)",
                    self.call_timeout.as_secs_f64()
                ))),
                Ok(Err(e)) => Err(ToolError::Failed(
                    self.session.redactor.apply(&format!("{what} failed: {e}")),
                )),
                Ok(Ok(result)) => Ok(output_of(result)),
            },
        }
    }
}

/// The ToolMessage content of an MCP call result (see the module docs).
pub(crate) fn output_of(result: CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        match serde_json::to_value(block) {
            Ok(v) => parts.push(describe_block(&v)),
            Err(e) => parts.push(format!("[unreadable content block: {e}]")),
        }
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        if text.is_empty() {
            return ToolOutput::error("The MCP tool reported an error without details.");
        }
        return ToolOutput::error(text);
    }
    ToolOutput::text(text)
}

/// Size in bytes of base64 `data`.
fn decoded_len(data: &str) -> usize {
    let trimmed = data.trim_end_matches('=');
    trimmed.len() * 3 / 4
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn describe_block(v: &Value) -> String {
    match str_of(v, "type") {
        "text" => str_of(v, "text").to_string(),
        kind @ ("image" | "audio") => format!(
            "[{kind}: {}, {} bytes]",
            or_unknown(str_of(v, "mimeType")),
            decoded_len(str_of(v, "data"))
        ),
        "resource" => {
            let r = v.get("resource").unwrap_or(&Value::Null);
            let uri = str_of(r, "uri");
            match r.get("text").and_then(Value::as_str) {
                Some(text) => format!("[resource {uri}]\n{text}"),
                None => format!(
                    "[resource {uri}: {}, {} bytes]",
                    or_unknown(str_of(r, "mimeType")),
                    decoded_len(str_of(r, "blob"))
                ),
            }
        }
        "resource_link" => {
            let name = str_of(v, "name");
            if name.is_empty() {
                format!("[resource link: {}]", str_of(v, "uri"))
            } else {
                format!("[resource link: {} ({name})]", str_of(v, "uri"))
            }
        }
        _ => v.to_string(),
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "unknown type" } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolStatus;
    use fawn_state::Content;
    use serde_json::json;

    fn result(v: Value) -> CallToolResult {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn text(o: &ToolOutput) -> String {
        match &o.content {
            Content::Text(t) => t.clone(),
            other => panic!("not text: {other:?}"),
        }
    }

    #[test]
    fn text_blocks_are_joined_and_binaries_described() {
        let out = output_of(result(json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "text", "text": "two"},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "alpha"}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAAAAA==",
                                              "mimeType": "application/octet-stream"}},
            {"type": "resource_link", "uri": "file:///c", "name": "c"}
        ]})));
        assert_eq!(out.status, ToolStatus::Success);
        assert_eq!(
            text(&out),
            "one\ntwo\n[image: image/png, 5 bytes]\n[audio: audio/wav, 3 bytes]\n\
             [resource file:///a.txt]\nalpha\n\
             [resource file:///b.bin: application/octet-stream, 4 bytes]\n\
             [resource link: file:///c (c)]"
        );
    }

    #[test]
    fn structured_content_is_used_when_there_is_no_block() {
        let out = output_of(result(
            json!({"content": [], "structuredContent": {"n": 3}}),
        ));
        assert_eq!(text(&out), r#"{"n":3}"#);
    }

    #[test]
    fn is_error_makes_an_error_message() {
        let out = output_of(result(
            json!({"content": [{"type": "text", "text": "boom"}], "isError": true}),
        ));
        assert_eq!(out.status, ToolStatus::Error);
        assert_eq!(text(&out), "boom");
        let out = output_of(result(json!({"content": [], "isError": true})));
        assert_eq!(out.status, ToolStatus::Error);
        assert!(text(&out).contains("without details"));
    }

    #[test]
    fn names_and_schemas() {
        assert_eq!(sanitize_name("git.hub/search tool"), "git_hub_search_tool");
        assert_eq!(sanitize_name("ok_name-1"), "ok_name-1");
        assert_eq!(sanitize_name(&"x".repeat(80)).len(), MAX_TOOL_NAME);
        let p = parameters_of(&Map::new());
        assert_eq!(p, json!({"type": "object", "properties": {}}));
        let Value::Object(s) = json!({"$schema": "x", "type": "object",
                                     "properties": {"a": {"type": "string"}}})
        else {
            unreachable!()
        };
        assert_eq!(
            parameters_of(&s),
            json!({"type": "object", "properties": {"a": {"type": "string"}}})
        );
    }
}
