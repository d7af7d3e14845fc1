//! `ClarificationMiddleware` (`wrap_tool_call`, always last): intercepts `ask_clarification`
//! before the tool runs, answers it with a ToolMessage holding the formatted question (text
//! fallback) and the structured `artifact.human_input` request the UI renders as a card, and
//! ends the run (status `success`; the user answers with a new run). With
//! `context.disable_clarification` the model is told to proceed on its own instead.

use crate::{Hook, Middleware, RunContext, ToolCallHandler, ToolCallRequest, ToolCallResult};
use async_trait::async_trait;
use fawn_state::Message;
use fawn_tools::ToolError;
use regex::Regex;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::LazyLock;

pub const ASK_CLARIFICATION: &str = "ask_clarification";

pub const MAX_FORM_FIELDS: usize = 16;
pub const MAX_FIELD_OPTIONS: usize = 24;
pub const MAX_FIELD_TEXT_CHARS: usize = 200;
pub const MAX_FORM_BYTES: usize = 16 * 1024;

const FIELD_TYPES: &[&str] = &[
    "text",
    "textarea",
    "number",
    "select",
    "multi_select",
    "checkbox",
    "date",
];

/// Names that would read `Object.prototype` members in the UI's form state.
const RESERVED_FIELD_NAMES: &[&str] = &[
    "__proto__",
    "constructor",
    "prototype",
    "toString",
    "toLocaleString",
    "valueOf",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
];

/// What the model is told when clarification is disabled for the run.
pub const DISABLED_TEXT: &str = "Clarification is disabled for this run: nobody is available to answer questions right now. Do not ask for confirmation. Proceed with your best judgement, carry out the request, and state the assumptions you made in your final answer.";

static XML_TAG_RE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"</?[A-Za-z_][\w:.\-]*(?:\s[^<>]*?)?\s*/?>").ok());

fn strip_tags(s: &str) -> String {
    match XML_TAG_RE.as_ref() {
        Some(re) => re.replace_all(s, "").into_owned(),
        None => s.to_string(),
    }
}

/// A JSON value as display text.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn flatten_scalars(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(o) => o.values().for_each(|x| flatten_scalars(x, out)),
        Value::Array(a) => a.iter().for_each(|x| flatten_scalars(x, out)),
        Value::String(_) | Value::Number(_) => out.push(v.clone()),
        _ => {}
    }
}

/// Options as display strings: JSON-string arrays parsed, objects flattened, XML tags
/// removed, trimmed, blanks dropped, duplicates dropped (order kept).
pub fn normalize_options(raw: Option<&Value>) -> Vec<String> {
    let parsed;
    let mut v = match raw {
        None | Some(Value::Null) => return Vec::new(),
        Some(v) => v,
    };
    if let Value::String(s) = v {
        parsed = serde_json::from_str::<Value>(s).unwrap_or_else(|_| Value::String(s.clone()));
        v = &parsed;
    }
    let items: Vec<Value> = match v {
        Value::Null => return Vec::new(),
        Value::Object(_) => {
            let mut out = Vec::new();
            flatten_scalars(v, &mut out);
            out
        }
        Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    };
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for item in &items {
        let t = strip_tags(&text_of(item)).trim().to_string();
        if t.is_empty() || !seen.insert(t.clone()) {
            continue;
        }
        out.push(t);
    }
    out
}

fn truthy(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => s.trim().eq_ignore_ascii_case("true"),
        _ => false,
    }
}

/// Form fields in the v2 schema, or empty when the form is structurally invalid (any bad
/// entry invalidates the whole form, so a card never silently misses a field).
pub fn normalize_fields(raw: Option<&Value>) -> Vec<Value> {
    let parsed;
    let mut v = match raw {
        None | Some(Value::Null) => return Vec::new(),
        Some(v) => v,
    };
    if let Value::String(s) = v {
        match serde_json::from_str::<Value>(s) {
            Ok(p) => {
                parsed = p;
                v = &parsed;
            }
            Err(_) => return Vec::new(),
        }
    }
    let Value::Array(entries) = v else {
        return Vec::new();
    };
    if entries.len() > MAX_FORM_FIELDS {
        return Vec::new();
    }
    let too_long = |s: &str| s.chars().count() > MAX_FIELD_TEXT_CHARS;
    let mut names = HashSet::new();
    let mut out = Vec::new();
    for entry in entries {
        let Value::Object(e) = entry else {
            return Vec::new();
        };
        let Some(name) = e.get("name").and_then(Value::as_str).map(str::trim) else {
            return Vec::new();
        };
        if name.is_empty()
            || RESERVED_FIELD_NAMES.contains(&name)
            || too_long(name)
            || !names.insert(name.to_string())
        {
            return Vec::new();
        }
        let label = e
            .get("label")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .unwrap_or(name);
        if too_long(label) {
            return Vec::new();
        }
        let mut kind = e
            .get("type")
            .and_then(Value::as_str)
            .filter(|t| FIELD_TYPES.contains(t))
            .unwrap_or("text");
        let is_choice = kind == "select" || kind == "multi_select";
        let options = if is_choice {
            normalize_options(e.get("options"))
        } else {
            Vec::new()
        };
        if options.len() > MAX_FIELD_OPTIONS || options.iter().any(|o| too_long(o)) {
            return Vec::new();
        }
        if is_choice && options.is_empty() {
            kind = "text";
        }
        let mut f = Map::new();
        f.insert("name".into(), json!(name));
        f.insert("label".into(), json!(label));
        f.insert("type".into(), json!(kind));
        f.insert("required".into(), json!(truthy(e.get("required"))));
        if kind == "select" || kind == "multi_select" {
            let opts: Vec<Value> = options
                .iter()
                .enumerate()
                .map(|(i, o)| json!({"id": format!("{name}-option-{}", i + 1), "label": o, "value": o}))
                .collect();
            f.insert("options".into(), Value::Array(opts));
        }
        if let Some(p) = e
            .get("placeholder")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            if too_long(p) {
                return Vec::new();
            }
            f.insert("placeholder".into(), json!(p));
        }
        out.push(Value::Object(f));
    }
    let size = serde_json::to_string(&out)
        .map(|s| s.len())
        .unwrap_or(usize::MAX);
    if size > MAX_FORM_BYTES {
        return Vec::new();
    }
    out
}

fn icon(kind: &str) -> &'static str {
    match kind {
        "missing_info" => "❓",
        "ambiguous_requirement" => "🤔",
        "approach_choice" => "🔀",
        "risk_confirmation" => "⚠️",
        "suggestion" => "💡",
        _ => "❓",
    }
}

fn clarification_type(args: &Map<String, Value>) -> String {
    match args.get("clarification_type") {
        None | Some(Value::Null) => "missing_info".to_string(),
        Some(v) => text_of(v),
    }
}

/// The text fallback of a clarification (`ToolMessage.content`).
pub fn format_clarification(args: &Map<String, Value>, fields: &[Value]) -> String {
    let question = args.get("question").map(text_of).unwrap_or_default();
    let context = args.get("context").map(text_of).unwrap_or_default();
    let options = normalize_options(args.get("options"));
    let icon = icon(&clarification_type(args));
    let mut parts = Vec::new();
    if context.is_empty() {
        parts.push(format!("{icon} {question}"));
    } else {
        parts.push(format!("{icon} {context}"));
        parts.push(format!("\n{question}"));
    }
    if !fields.is_empty() {
        parts.push(String::new());
        for (i, f) in fields.iter().enumerate() {
            let mut line = format!(
                "  {}. {}",
                i + 1,
                f.get("label").and_then(Value::as_str).unwrap_or_default()
            );
            if f.get("required").and_then(Value::as_bool) == Some(true) {
                line.push_str(" (required)");
            }
            if let Some(Value::Array(opts)) = f.get("options")
                && !opts.is_empty()
            {
                let labels: Vec<&str> = opts
                    .iter()
                    .filter_map(|o| o.get("label").and_then(Value::as_str))
                    .collect();
                line.push_str(&format!(" — options: {}", labels.join(" / ")));
                if f.get("type").and_then(Value::as_str) == Some("multi_select") {
                    line.push_str(" (multiple allowed)");
                }
            }
            parts.push(line);
        }
        parts.push(String::new());
        parts.push("Please reply with a value for each field.".to_string());
    } else if !options.is_empty() {
        parts.push(String::new());
        for (i, o) in options.iter().enumerate() {
            parts.push(format!("  {}. {o}", i + 1));
        }
    }
    parts.join("\n")
}

/// `clarification:<tool call id>` (or a digest of the text when the call has no id).
pub fn request_id(tool_call_id: &str, text: &str) -> String {
    if tool_call_id.is_empty() {
        let d = Sha256::digest(text.as_bytes());
        format!("clarification:{}", &hex::encode(d)[..16])
    } else {
        format!("clarification:{tool_call_id}")
    }
}

/// The structured `human_input` request (v1 `free_text`/`choice_with_other`, v2 `form`).
pub fn human_input_payload(
    args: &Map<String, Value>,
    tool_call_id: &str,
    request_id: &str,
    fields: &[Value],
) -> Value {
    let options = normalize_options(args.get("options"));
    let (version, mode) = if !fields.is_empty() {
        (2, "form")
    } else if !options.is_empty() {
        (1, "choice_with_other")
    } else {
        (1, "free_text")
    };
    let mut p = Map::new();
    p.insert("version".into(), json!(version));
    p.insert("kind".into(), json!("human_input_request"));
    p.insert("source".into(), json!(ASK_CLARIFICATION));
    p.insert("request_id".into(), json!(request_id));
    p.insert("clarification_type".into(), json!(clarification_type(args)));
    p.insert(
        "question".into(),
        json!(args.get("question").map(text_of).unwrap_or_default()),
    );
    p.insert("input_mode".into(), json!(mode));
    if !tool_call_id.is_empty() {
        p.insert("tool_call_id".into(), json!(tool_call_id));
    }
    if let Some(c) = args.get("context") {
        p.insert(
            "context".into(),
            if c.is_null() {
                Value::Null
            } else {
                json!(text_of(c))
            },
        );
    }
    if mode == "form" {
        p.insert("fields".into(), Value::Array(fields.to_vec()));
    } else if !options.is_empty() {
        let opts: Vec<Value> = options
            .iter()
            .enumerate()
            .map(|(i, o)| json!({"id": format!("option-{}", i + 1), "label": o, "value": o}))
            .collect();
        p.insert("options".into(), Value::Array(opts));
    }
    Value::Object(p)
}

/// The ToolMessage answering an `ask_clarification` call.
pub fn clarification_message(args: &Map<String, Value>, tool_call_id: &str) -> Message {
    let fields = normalize_fields(args.get("fields"));
    let text = format_clarification(args, &fields);
    let rid = request_id(tool_call_id, &text);
    let payload = human_input_payload(args, tool_call_id, &rid, &fields);
    let mut m = Message::tool(text, tool_call_id, Some(ASK_CLARIFICATION.to_string())).with_id(rid);
    m.artifact = json!({ "human_input": payload });
    m
}

#[derive(Debug, Default)]
pub struct ClarificationMiddleware;

impl ClarificationMiddleware {
    pub fn new() -> Self {
        ClarificationMiddleware
    }
}

#[async_trait]
impl Middleware for ClarificationMiddleware {
    fn name(&self) -> &str {
        "ClarificationMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::WrapToolCall]
    }

    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        ctx: &RunContext,
        next: &dyn ToolCallHandler,
    ) -> Result<ToolCallResult, ToolError> {
        if request.call.name != ASK_CLARIFICATION {
            return next.call(request).await;
        }
        let call_id = request.call.id.clone().unwrap_or_default();
        if truthy(ctx.context.get("disable_clarification")) {
            tracing::info!(
                "ask_clarification suppressed (disable_clarification); the model proceeds"
            );
            let m = Message::tool(
                DISABLED_TEXT,
                call_id.clone(),
                Some(ASK_CLARIFICATION.into()),
            )
            .with_id(request_id(&call_id, "proceed-without-clarification"));
            return Ok(ToolCallResult {
                message: m,
                update: None,
                end_run: false,
            });
        }
        Ok(ToolCallResult {
            message: clarification_message(&request.call.args, &call_id),
            update: None,
            end_run: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(o) => o,
            _ => Map::new(),
        }
    }

    #[test]
    fn reference_example() {
        let a = args(
            json!({"question": "Which env?", "clarification_type": "approach_choice",
            "context": "Need target", "options": ["dev", "prod"]}),
        );
        let m = clarification_message(&a, "call_1");
        assert_eq!(
            m.text(),
            "🔀 Need target\n\nWhich env?\n\n  1. dev\n  2. prod"
        );
        assert_eq!(m.id.as_deref(), Some("clarification:call_1"));
        let hi = &m.artifact["human_input"];
        assert_eq!(hi["version"], 1);
        assert_eq!(hi["input_mode"], "choice_with_other");
        assert_eq!(
            hi["options"][1],
            json!({"id": "option-2", "label": "prod", "value": "prod"})
        );
        assert_eq!(hi["request_id"], "clarification:call_1");
    }

    #[test]
    fn options_normalised() {
        assert_eq!(
            normalize_options(Some(&json!(["a", " a ", "", "<b>x</b>"]))),
            ["a", "x"]
        );
        assert_eq!(
            normalize_options(Some(&json!("[\"p\", \"q\"]"))),
            ["p", "q"]
        );
        assert_eq!(
            normalize_options(Some(&json!({"o": {"a": "1", "b": 2}}))),
            ["1", "2"]
        );
        assert_eq!(normalize_options(Some(&json!("just one"))), ["just one"]);
    }

    #[test]
    fn forms() {
        let a = args(json!({"question": "Details?", "fields": [
            {"name": "env", "label": "Environment", "type": "select", "options": ["a", "b"], "required": true},
            {"name": "tags", "type": "multi_select", "options": ["x"]},
            {"name": "note", "type": "weird"}
        ]}));
        let m = clarification_message(&a, "c");
        assert_eq!(m.artifact["human_input"]["version"], 2);
        assert_eq!(m.artifact["human_input"]["input_mode"], "form");
        assert_eq!(m.artifact["human_input"]["fields"][2]["type"], "text");
        assert_eq!(
            m.text(),
            "❓ Details?\n\n  1. Environment (required) — options: a / b\n  2. tags — options: x (multiple allowed)\n  3. note\n\nPlease reply with a value for each field."
        );
        // Any structural error degrades the whole form to v1.
        for bad in [
            json!([{"name": "__proto__"}]),
            json!([{"name": "a"}, {"name": "a"}]),
            json!([{"label": "no name"}]),
            json!([1]),
            Value::Array((0..17).map(|i| json!({"name": format!("f{i}")})).collect()),
        ] {
            assert!(normalize_fields(Some(&bad)).is_empty(), "{bad}");
        }
    }
}
