//! DeerFlow's sandbox tools: `bash`, `ls`, `read_file`, `write_file`, `str_replace`, `glob`,
//! `grep`. Names, arguments, result and error texts and limits follow DeerFlow
//! (`deerflow-reference.md` §3.3, §4.5); the work itself (confinement, masking, the OS
//! sandbox) is the `fawn-sandbox` crate's.
//!
//! Every tool takes a leading `description` (why the call is made; the UI shows it). Bad
//! arguments (missing, wrong type) come back as [`ToolError::InvalidArguments`] naming the
//! field; everything else that goes wrong is an `Error: …` text the model can act on, with
//! the generic permission texts DeerFlow uses for file tools (only `bash` shows the detailed
//! reason). No text carries a host path.

mod bash;
mod glob;
mod grep;
mod ls;
mod read_file;
mod str_replace;
mod write_file;

pub use bash::BashTool;
pub use glob::GlobTool;
pub use grep::GrepTool;
pub use ls::LsTool;
pub use read_file::ReadFileTool;
pub use str_replace::StrReplaceTool;
pub use write_file::WriteFileTool;

use crate::{Tool, ToolContext, ToolOutput};
use fawn_config::Settings;
use fawn_sandbox::Sandbox;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use std::sync::Arc;

/// The sandbox tools' names, in DeerFlow's `config.yaml` order.
pub const SANDBOX_TOOL_NAMES: [&str; 7] = [
    "ls",
    "read_file",
    "glob",
    "grep",
    "write_file",
    "str_replace",
    "bash",
];

/// Largest file `read_file` and `str_replace` load.
pub(crate) const READ_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// All seven tools, each with the options of its `tools:` entry (matched by name) if any.
pub fn sandbox_tools(settings: &Settings) -> Vec<Arc<dyn Tool>> {
    SANDBOX_TOOL_NAMES
        .iter()
        .filter_map(|name| {
            let extra = settings
                .app
                .tools
                .iter()
                .find(|t| t.name == *name)
                .map(|t| t.extra.clone())
                .unwrap_or_default();
            sandbox_tool(name, settings, &extra)
        })
        .collect()
}

/// One tool by its name (`bash`, `ls`, …), with the extra keys of its `tools:` entry
/// (`max_results` for `glob`/`grep`). `None` for another name.
pub fn sandbox_tool(
    name: &str,
    settings: &Settings,
    extra: &Map<String, Value>,
) -> Option<Arc<dyn Tool>> {
    let max_results = extra.get("max_results").and_then(Value::as_i64);
    Some(match name {
        "bash" => Arc::new(BashTool::new(settings)),
        "ls" => Arc::new(LsTool::new()),
        "read_file" => Arc::new(ReadFileTool::new()),
        "write_file" => Arc::new(WriteFileTool::new(settings)),
        "str_replace" => Arc::new(StrReplaceTool::new()),
        "glob" => Arc::new(GlobTool::new(max_results)),
        "grep" => Arc::new(GrepTool::new(max_results)),
        _ => return None,
    })
}

/// The parameters schema of `A`, with the leading `description` argument listed as
/// required (the model must give it; parsing still tolerates its absence). Built when the
/// tool is, then shared by its specs.
pub(crate) fn schema<A: schemars::JsonSchema + 'static>() -> Arc<Value> {
    let mut v = Value::clone(&crate::args::schema_for::<A>());
    if let Some(desc) = v
        .pointer_mut("/properties/description")
        .and_then(Value::as_object_mut)
    {
        desc.remove("default");
    }
    if let Some(o) = v.as_object_mut() {
        let req = o
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(arr) = req.as_array_mut()
            && !arr.iter().any(|x| x == "description")
        {
            arr.insert(0, Value::String("description".into()));
        }
    }
    Arc::new(v)
}

/// `Error: …` as an error ToolMessage.
pub(crate) fn fail(text: impl Into<String>) -> ToolOutput {
    ToolOutput::error(text)
}

/// The run's sandbox, or the error text to return.
pub(crate) async fn sandbox(ctx: &ToolContext) -> Result<Arc<dyn Sandbox>, ToolOutput> {
    ctx.sandbox
        .get()
        .await
        .map_err(|e| fail(format!("Error: {e}")))
}

/// DeerFlow's `max_results` rule: a non-positive value means the default; both the request
/// and the configured value are capped at `upper`; the smaller wins.
pub(crate) fn effective_max_results(
    requested: i64,
    configured: Option<i64>,
    default: usize,
    upper: usize,
) -> usize {
    let upper = upper.max(1);
    let clamp = |v: i64| {
        if v <= 0 {
            default.min(upper)
        } else {
            (v as u64).min(upper as u64) as usize
        }
    };
    clamp(requested).min(clamp(configured.unwrap_or(default as i64)))
}

/// The leading `description` argument: a string; tolerated when missing or null.
pub(crate) fn de_description<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

fn int_of<E: serde::de::Error>(v: &Value) -> Result<Option<i64>, E> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Some(i)),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Some(f as i64)),
            _ => Err(E::custom(format!("expected an integer, got {n}"))),
        },
        Value::String(s) => s
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| E::custom(format!("expected an integer, got \"{s}\""))),
        other => Err(E::custom(format!("expected an integer, got {other}"))),
    }
}

/// An optional integer, also accepted as `5.0` or `"5"` (models do that).
pub(crate) fn de_opt_int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    int_of(&Value::deserialize(d)?)
}

/// A boolean, also accepted as `"true"`/`"false"`, `"yes"`/`"no"`, `1`/`0`; null = false.
pub(crate) fn de_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    use serde::de::Error;
    match Value::deserialize(d)? {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(b),
        Value::Number(n) if n.as_i64() == Some(0) => Ok(false),
        Value::Number(n) if n.as_i64() == Some(1) => Ok(true),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" | "on" => Ok(true),
            "false" | "no" | "0" | "off" | "" => Ok(false),
            _ => Err(D::Error::custom(format!("expected a boolean, got \"{s}\""))),
        },
        other => Err(D::Error::custom(format!("expected a boolean, got {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_results_rule() {
        assert_eq!(effective_max_results(0, None, 200, 1000), 200);
        assert_eq!(effective_max_results(-5, None, 200, 1000), 200);
        assert_eq!(effective_max_results(50, None, 200, 1000), 50);
        assert_eq!(effective_max_results(5000, None, 200, 1000), 200);
        assert_eq!(effective_max_results(5000, Some(5000), 200, 1000), 1000);
        assert_eq!(effective_max_results(300, Some(20), 200, 1000), 20);
        assert_eq!(effective_max_results(0, Some(20), 200, 1000), 20);
    }

    #[test]
    fn every_tool_is_built() {
        let s = Settings::default();
        let tools = sandbox_tools(&s);
        let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
        assert_eq!(names, SANDBOX_TOOL_NAMES);
        for t in &tools {
            let p = t.parameters();
            let props: Vec<&String> = p["properties"].as_object().unwrap().keys().collect();
            assert_eq!(props[0], "description", "{}", t.name());
            let req: Vec<&str> = p["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert!(req.contains(&"description"), "{}: {p}", t.name());
            assert!(!t.description().is_empty());
        }
        assert!(sandbox_tool("web_search", &s, &Map::new()).is_none());
    }
}
