//! Reading the files: size and shape budgets for untrusted YAML/JSON, and `$VAR` resolution.

use crate::keypath;
use crate::options::LoadOptions;
use crate::typed::{Report, describe};
use serde_json::Value;
use std::path::Path;

/// Largest config or extensions file accepted.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

fn yaml_options(duplicates: serde_saphyr::DuplicateKeyPolicy) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = 64;
    budget.max_nodes = 200_000;
    budget.max_total_scalar_bytes = 8 * 1024 * 1024;
    budget.max_aliases = 10_000;
    budget.max_anchors = 10_000;
    budget.max_documents = 1;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.duplicate_keys = duplicates;
    options.with_snippet = false;
    // YAML 1.2 booleans only, so `model: y` or `name: no` stay strings. Fields that want a
    // boolean still accept `yes`/`on`/`y` through the loader's lax coercion (as pydantic does).
    options.strict_booleans = true;
    options
}

fn one_line(e: &impl std::fmt::Display) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default().trim();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// Reads a file under the size budget. Problems are reported under `name`.
pub(crate) fn read_file(path: &Path, name: &str, report: &mut Report) -> Option<String> {
    let too_big = match std::fs::metadata(path) {
        Ok(m) => m.len() > MAX_CONFIG_BYTES,
        Err(e) => {
            report.error(name, format!("cannot read {}: {e}", path.display()));
            return None;
        }
    };
    if too_big {
        report.error(
            name,
            format!(
                "file is larger than {} MiB",
                MAX_CONFIG_BYTES / (1024 * 1024)
            ),
        );
        return None;
    }
    match std::fs::read_to_string(path) {
        Ok(t) => Some(t),
        Err(e) => {
            report.error(name, format!("cannot read {}: {e}", path.display()));
            None
        }
    }
}

/// Parses YAML into JSON values, with budgets (depth, nodes, aliases, scalar bytes). A
/// duplicate key is a warning and the last one wins, as with PyYAML in DeerFlow.
pub(crate) fn parse_yaml(text: &str, name: &str, report: &mut Report) -> Option<Value> {
    if text.len() as u64 > MAX_CONFIG_BYTES {
        report.error(
            name,
            format!(
                "file is larger than {} MiB",
                MAX_CONFIG_BYTES / (1024 * 1024)
            ),
        );
        return None;
    }
    let strict = serde_saphyr::from_str_with_options::<Value>(
        text,
        yaml_options(serde_saphyr::DuplicateKeyPolicy::Error),
    );
    match strict {
        Ok(v) => Some(v),
        Err(e) if e.to_string().contains("duplicate mapping key") => {
            let msg = one_line(&e);
            let msg = msg
                .split(", set DuplicateKeyPolicy")
                .next()
                .unwrap_or_default()
                .to_string();
            report.warn(name, format!("{msg}; the last one wins"));
            match serde_saphyr::from_str_with_options::<Value>(
                text,
                yaml_options(serde_saphyr::DuplicateKeyPolicy::LastWins),
            ) {
                Ok(v) => Some(v),
                Err(e) => {
                    report.error(name, format!("invalid YAML: {}", one_line(&e)));
                    None
                }
            }
        }
        Err(e) => {
            report.error(name, format!("invalid YAML: {}", one_line(&e)));
            None
        }
    }
}

/// Parses JSON (serde_json limits nesting to 128 levels).
pub(crate) fn parse_json(text: &str, name: &str, report: &mut Report) -> Option<Value> {
    if text.len() as u64 > MAX_CONFIG_BYTES {
        report.error(
            name,
            format!(
                "file is larger than {} MiB",
                MAX_CONFIG_BYTES / (1024 * 1024)
            ),
        );
        return None;
    }
    match serde_json::from_str(text) {
        Ok(v) => Some(v),
        Err(e) => {
            report.error(name, format!("invalid JSON: {e}"));
            None
        }
    }
}

/// The top level must be a mapping (an empty YAML file is an empty mapping).
pub(crate) fn top_level(
    v: Value,
    name: &str,
    report: &mut Report,
) -> Option<serde_json::Map<String, Value>> {
    match v {
        Value::Object(o) => Some(o),
        Value::Null => Some(serde_json::Map::new()),
        other => {
            report.error(
                name,
                format!(
                    "expected a mapping at the top level, got {}",
                    describe(&other)
                ),
            );
            None
        }
    }
}

/// The variable a string refers to: `$NAME` or `${NAME}` (DeerFlow resolves any string that
/// starts with `$`, taking the rest as the name).
pub(crate) fn var_name(s: &str) -> Option<&str> {
    let rest = s.strip_prefix('$')?;
    Some(
        rest.strip_prefix('{')
            .and_then(|r| r.strip_suffix('}'))
            .unwrap_or(rest),
    )
}

/// What an unset variable means.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Unset {
    /// An error naming the variable and the key path.
    Error,
    /// A warning; the value becomes `""` (DeerFlow's behaviour for MCP settings). Used for
    /// disabled MCP servers, which must not stop Fawn from starting.
    WarnEmpty(&'static str),
}

/// Replaces every `$VAR` string value under `v` (keys are never resolved).
pub(crate) fn resolve_env(
    v: &mut Value,
    path: &str,
    opts: &LoadOptions,
    unset: Unset,
    report: &mut Report,
) {
    match v {
        Value::String(s) => {
            let Some(name) = var_name(s) else {
                return;
            };
            match opts.var(name) {
                Some(val) => *s = val,
                None => {
                    let msg = format!("environment variable {name} is not set");
                    match unset {
                        Unset::Error => report.error(path, msg),
                        Unset::WarnEmpty(why) => {
                            report.warn(path, format!("{msg} ({why}); using \"\""));
                            s.clear();
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                resolve_env(item, &keypath::index(path, i), opts, unset, report);
            }
        }
        Value::Object(o) => {
            for (k, item) in o.iter_mut() {
                resolve_env(item, &keypath::key(path, k), opts, unset, report);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn var_names() {
        assert_eq!(var_name("$OPENAI_API_KEY"), Some("OPENAI_API_KEY"));
        assert_eq!(var_name("${OPENAI_API_KEY}"), Some("OPENAI_API_KEY"));
        assert_eq!(var_name("plain"), None);
        assert_eq!(var_name("a$b"), None);
    }

    #[test]
    fn resolves_nested_values_and_reports_each_unset_one() {
        let opts = LoadOptions::with_vars("/", [("A", "1"), ("EMPTY", "")]);
        let mut v =
            json!({"x": "$A", "y": ["${A}", "$MISSING"], "z": {"$KEY": "$EMPTY", "w": "$NOPE"}});
        let mut r = Report::default();
        resolve_env(&mut v, "", &opts, Unset::Error, &mut r);
        assert_eq!(
            v,
            json!({"x": "1", "y": ["1", "$MISSING"], "z": {"$KEY": "", "w": "$NOPE"}})
        );
        let errs: Vec<String> = r.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errs,
            [
                "y[1]: environment variable MISSING is not set",
                "z.w: environment variable NOPE is not set"
            ]
        );
    }

    #[test]
    fn yaml_budgets_and_errors() {
        let mut r = Report::default();
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert!(parse_yaml(&deep, "config.yaml", &mut r).is_none());
        assert!(
            r.errors[0]
                .to_string()
                .starts_with("config.yaml: invalid YAML")
        );
        let mut r = Report::default();
        assert!(parse_yaml("a: [1, 2\n", "config.yaml", &mut r).is_none());
        assert!(r.errors[0].message.contains("line 1"), "{}", r.errors[0]);
        let mut r = Report::default();
        let v = parse_yaml("a: 1\na: 2\n", "config.yaml", &mut r).unwrap();
        assert_eq!(v, json!({"a": 2}));
        assert!(
            r.warnings[0].message.contains("duplicate"),
            "{}",
            r.warnings[0]
        );
        let mut r = Report::default();
        let bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n";
        assert!(parse_yaml(bomb, "config.yaml", &mut r).is_none());
    }
}
