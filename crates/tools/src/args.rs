//! Typed tool arguments: a JSON Schema generated from an args struct, and parsing of the
//! model's arguments into it with an error text the model can act on.

use crate::ToolError;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The JSON Schema of `A` as providers want tool parameters: an inline `object` schema
/// (no `$schema`, `title` or `$defs`). Generated once per type and process, then shared
/// (tool specs are built for every run); a tool that adjusts it copies it first.
pub fn schema_for<A: JsonSchema + 'static>() -> Arc<Value> {
    static CACHE: OnceLock<Mutex<HashMap<TypeId, Arc<Value>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let id = TypeId::of::<A>();
    if let Some(v) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
        return v.clone();
    }
    let v = Arc::new(generate_schema::<A>());
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(id)
        .or_insert(v)
        .clone()
}

fn generate_schema<A: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft07()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut v = generator.into_root_schema_for::<A>().to_value();
    if let Value::Object(o) = &mut v {
        o.remove("$schema");
        o.remove("title");
        o.remove("definitions");
        o.remove("$defs");
        if !o.contains_key("properties") {
            o.insert("properties".into(), Value::Object(Map::new()));
        }
    }
    v
}

/// Parses the model's arguments for tool `tool` into `A`. A mismatch becomes
/// [`ToolError::InvalidArguments`] naming the field, e.g.
/// `Invalid arguments for tool 'read_file': missing field `path``.
pub fn parse_args<A: DeserializeOwned>(
    tool: &str,
    args: Map<String, Value>,
) -> Result<A, ToolError> {
    let value = Value::Object(args);
    serde_path_to_error::deserialize::<_, A>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let detail = if path.is_empty() || path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        };
        ToolError::InvalidArguments(format!("Invalid arguments for tool '{tool}': {detail}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// Why the tool is called.
        description: String,
        path: String,
        #[serde(default)]
        start_line: Option<i64>,
        #[serde(default)]
        mode: Mode,
    }

    #[derive(Deserialize, JsonSchema, Default)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        #[default]
        Plain,
        Fancy,
    }

    #[test]
    fn schema_is_an_inline_object() {
        let s = schema_for::<Args>();
        // Generated once, then the same schema is served from the cache.
        assert!(Arc::ptr_eq(&schema_for::<Args>(), &s));
        assert_eq!(s["type"], "object");
        assert!(s.get("$schema").is_none() && s.get("title").is_none());
        assert!(s.get("definitions").is_none() && s.get("$defs").is_none());
        assert_eq!(s["properties"]["path"]["type"], "string");
        assert_eq!(
            s["properties"]["description"]["description"],
            "Why the tool is called."
        );
        let required: Vec<&str> = s["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(required.contains(&"path") && !required.contains(&"start_line"));
        assert!(s["properties"]["mode"].to_string().contains("fancy"));
    }

    #[test]
    fn errors_name_the_field() {
        let m = |v: Value| v.as_object().unwrap().clone();
        let e = parse_args::<Args>("read_file", m(json!({"description": "x"})))
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "Invalid arguments for tool 'read_file': missing field `path`"
        );
        let e = parse_args::<Args>("read_file", m(json!({"description": "x", "path": 3})))
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .starts_with("Invalid arguments for tool 'read_file': path: invalid type")
        );
        let ok: Args =
            parse_args("read_file", m(json!({"description": "x", "path": "/a"}))).unwrap();
        assert_eq!(ok.path, "/a");
    }
}
