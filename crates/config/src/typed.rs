//! Turning a JSON value into a typed section while collecting *every* problem.
//!
//! Each attempt deserializes through `serde_path_to_error` (where did it fail?) and
//! `serde_ignored` (which keys were not used?). On a failure the problem is recorded with its
//! key path, the offending key is taken out, and the section is tried again, so one bad key
//! does not hide the next. Values DeerFlow (pydantic, lax mode) would coerce are coerced
//! instead of reported: numeric strings such as an env-resolved `"600"`, `"true"`/`"false"`,
//! whole floats like `30.0` for integers; a `null` where a value is required falls back to
//! the default with a warning.

use crate::ConfigIssue;
use crate::keypath::{self, Seg};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Where problems go while loading.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub errors: Vec<ConfigIssue>,
    pub warnings: Vec<ConfigIssue>,
}

impl Report {
    /// Records an error. A key that already has one keeps only the first: a later
    /// "is required" after "expected a string" would describe the same problem twice.
    pub fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        let issue = ConfigIssue::new(path, message);
        if self.errors.iter().any(|e| e.path == issue.path) && !issue.path.is_empty() {
            return;
        }
        self.errors.push(issue);
    }

    pub fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(ConfigIssue::new(path, message));
    }
}

/// A short description of a JSON value for "got …".
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(_) => "a boolean".to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(_) => "a string".to_string(),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "a mapping".to_string(),
    }
}

fn friendly_expected(exp: &str) -> String {
    let exp = exp.trim();
    match exp {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "an unsigned integer".to_string(),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer".to_string(),
        "f32" | "f64" => "a number".to_string(),
        "a boolean" => "a boolean".to_string(),
        "a string" | "a borrowed string" => "a string".to_string(),
        "a sequence" => "a list".to_string(),
        "a map" | "map" => "a mapping".to_string(),
        e if e.starts_with("struct ") => "a mapping".to_string(),
        e if e.starts_with("one of ") => e.replace('`', ""),
        other => other.replace('`', ""),
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Unsigned,
    Signed,
    Float,
    Bool,
    Other,
}

fn want_of(exp: &str) -> Want {
    match exp.trim() {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => Want::Unsigned,
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => Want::Signed,
        "f32" | "f64" => Want::Float,
        "a boolean" => Want::Bool,
        _ => Want::Other,
    }
}

/// A replacement DeerFlow's lax parsing would have made, if any.
fn coerce(v: &Value, want: Want) -> Option<Value> {
    match (v, want) {
        (Value::String(s), Want::Unsigned) => s.trim().parse::<u64>().ok().map(Value::from),
        (Value::String(s), Want::Signed) => s.trim().parse::<i64>().ok().map(Value::from),
        (Value::String(s), Want::Float) => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        (Value::String(s), Want::Bool) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" | "t" | "y" => Some(Value::Bool(true)),
            "false" | "0" | "no" | "off" | "f" | "n" => Some(Value::Bool(false)),
            _ => None,
        },
        (Value::Number(n), Want::Unsigned | Want::Signed) => {
            let f = n.as_f64()?;
            if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 {
                // `f` is whole and well inside i64's exact range.
                #[allow(clippy::cast_possible_truncation)]
                let i = f as i64;
                Some(Value::from(i))
            } else {
                None
            }
        }
        _ => None,
    }
}

fn segs_of(path: &serde_path_to_error::Path) -> Vec<Seg> {
    path.iter()
        .filter_map(|s| match s {
            serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
            serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
            serde_path_to_error::Segment::Enum { variant } => Some(Seg::Key(variant.clone())),
            serde_path_to_error::Segment::Unknown => None,
        })
        .collect()
}

fn ignored_segs(path: &serde_ignored::Path<'_>, out: &mut Vec<Seg>) {
    match path {
        serde_ignored::Path::Root => {}
        serde_ignored::Path::Seq { parent, index } => {
            ignored_segs(parent, out);
            out.push(Seg::Index(*index));
        }
        serde_ignored::Path::Map { parent, key } => {
            ignored_segs(parent, out);
            out.push(Seg::Key(key.clone()));
        }
        serde_ignored::Path::Some { parent }
        | serde_ignored::Path::NewtypeStruct { parent }
        | serde_ignored::Path::NewtypeVariant { parent } => ignored_segs(parent, out),
    }
}

fn get<'v>(v: &'v Value, segs: &[Seg]) -> Option<&'v Value> {
    let mut cur = v;
    for s in segs {
        cur = match (s, cur) {
            (Seg::Key(k), Value::Object(o)) => o.get(k)?,
            (Seg::Index(i), Value::Array(a)) => a.get(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn get_mut<'v>(v: &'v mut Value, segs: &[Seg]) -> Option<&'v mut Value> {
    let mut cur = v;
    for s in segs {
        cur = match (s, cur) {
            (Seg::Key(k), Value::Object(o)) => o.get_mut(k)?,
            (Seg::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Removes the key at `segs`; inside a list the whole list goes (removing one element would
/// shift the indices of later problems). False when nothing could be removed.
fn remove(v: &mut Value, segs: &[Seg]) -> bool {
    let cut = segs
        .iter()
        .position(|s| matches!(s, Seg::Index(_)))
        .unwrap_or(segs.len());
    let Some((Seg::Key(last), parent)) = segs[..cut].split_last() else {
        return false;
    };
    match get_mut(v, parent) {
        Some(Value::Object(o)) => o.shift_remove(last).is_some(),
        _ => false,
    }
}

fn unquote(s: &str) -> &str {
    s.trim_matches('`')
}

/// Deserializes `value` as `T`, reporting problems under `base`. `None` when the value as a
/// whole is unusable (not a mapping, a required field missing at the top, …).
pub(crate) fn parse_typed<T: DeserializeOwned>(
    base: &str,
    value: Value,
    report: &mut Report,
) -> Option<T> {
    fix_and_parse(base, value, None, report).map(|(t, _)| t)
}

/// The message's "got" part (`invalid type: string "x", expected …`) in plain words.
fn got_from_message(unexpected: &str) -> String {
    let u = unexpected.trim();
    if u.starts_with("string ") {
        return "a string".to_string();
    }
    for prefix in ["integer ", "floating point "] {
        if let Some(n) = u.strip_prefix(prefix) {
            return unquote(n).to_string();
        }
    }
    match u {
        "map" => "a mapping".to_string(),
        "sequence" => "a list".to_string(),
        "unit value" | "null" => "null".to_string(),
        b if b.starts_with("boolean ") => "a boolean".to_string(),
        other => other.replace('`', ""),
    }
}

/// The workhorse behind [`parse_typed`]: also returns the value as finally accepted
/// (coerced, problem keys removed). With `flat_key`, `value` is `{flat_key: v}` for a type
/// whose fields serde reaches through `#[serde(flatten)]` (where error paths are lost), and
/// a problem without a path is a problem of `flat_key`.
pub(crate) fn fix_and_parse<T: DeserializeOwned>(
    base: &str,
    mut value: Value,
    flat_key: Option<&str>,
    report: &mut Report,
) -> Option<(T, Value)> {
    // Paths removed because of a reported problem: a later "missing field" there is a
    // consequence, not a new problem.
    let mut removed: Vec<Vec<Seg>> = Vec::new();
    for _ in 0..512 {
        let mut ignored: Vec<Vec<Seg>> = Vec::new();
        let result = {
            let mut on_ignored = |p: serde_ignored::Path<'_>| {
                let mut segs = Vec::new();
                ignored_segs(&p, &mut segs);
                ignored.push(segs);
            };
            let de = serde_ignored::Deserializer::new(&value, &mut on_ignored);
            serde_path_to_error::deserialize::<_, T>(de)
        };
        let err = match result {
            Ok(t) => {
                for segs in ignored {
                    report.warn(keypath::join(base, &segs), "unknown key; ignored");
                }
                return Some((t, value));
            }
            Err(e) => e,
        };
        let mut segs = segs_of(err.path());
        if segs.is_empty()
            && let Some(k) = flat_key
        {
            segs.push(Seg::Key(k.to_string()));
        }
        let msg = err.into_inner().to_string();
        let at = get(&value, &segs).cloned();
        let path = keypath::join(base, &segs);

        // "invalid type: X, expected Y" / "invalid value: X, expected Y"
        if let Some((unexpected, expected)) = msg
            .strip_prefix("invalid type: ")
            .or_else(|| msg.strip_prefix("invalid value: "))
            .and_then(|rest| rest.rsplit_once(", expected "))
        {
            let want = want_of(expected);
            if let Some(found) = &at {
                if let Some(fixed) = coerce(found, want)
                    && let Some(slot) = get_mut(&mut value, &segs)
                {
                    *slot = fixed;
                    continue;
                }
                if found.is_null() && !segs.is_empty() && remove(&mut value, &segs) {
                    report.warn(path, "null is not allowed here; using the default");
                    removed.push(segs);
                    continue;
                }
            }
            let got = got_from_message(unexpected);
            let extra = match (want, &at) {
                (Want::Unsigned, Some(Value::Number(n))) if n.as_i64().is_some_and(|i| i >= 0) => {
                    " (out of range)"
                }
                (Want::Signed, Some(Value::Number(n))) if !n.is_f64() => " (out of range)",
                _ => "",
            };
            report.error(
                &path,
                format!("expected {}, got {got}{extra}", friendly_expected(expected)),
            );
        } else if let Some(rest) = msg.strip_prefix("unknown variant ") {
            // "unknown variant `x`, expected one of `a`, `b`"
            let (variant, expected) = rest.split_once(", expected ").unwrap_or((rest, ""));
            let options = expected
                .trim()
                .trim_start_matches("one of ")
                .replace('`', "")
                .replace(" or ", ", ");
            report.error(
                &path,
                format!("expected one of {options}, got \"{}\"", unquote(variant)),
            );
        } else if let Some(field) = msg.strip_prefix("missing field ") {
            let field = unquote(field).to_string();
            let mut full = segs.clone();
            full.push(Seg::Key(field.clone()));
            if !removed.contains(&full) {
                report.error(keypath::key(&path, &field), "is required");
            }
            if segs.is_empty() || !remove(&mut value, &segs) {
                return None;
            }
            removed.push(segs);
            continue;
        } else if let Some(field) = msg.strip_prefix("duplicate field ") {
            report.error(
                &path,
                format!("`{}` is given twice (under two spellings)", unquote(field)),
            );
        } else {
            report.error(&path, msg);
        }
        if segs.is_empty() || !remove(&mut value, &segs) {
            return None;
        }
        removed.push(segs);
    }
    report.error(base, "too many problems; giving up on this section");
    None
}

/// Like [`parse_typed`] for a whole mapping value where `null` means "absent".
pub(crate) fn parse_section<T: DeserializeOwned + Default>(
    base: &str,
    value: Value,
    report: &mut Report,
) -> T {
    if value.is_null() {
        return T::default();
    }
    parse_typed(base, value, report).unwrap_or_default()
}

/// The entries of a list section (`models`, `tools`, …): `null` is an empty list.
pub(crate) fn list_entries(base: &str, value: Value, report: &mut Report) -> Vec<Value> {
    match value {
        Value::Null => Vec::new(),
        Value::Array(a) => a,
        other => {
            report.error(base, format!("expected a list, got {}", describe(&other)));
            Vec::new()
        }
    }
}

/// Takes `key` out of a mapping value (for fields parsed by hand).
pub(crate) fn take(value: &mut Value, key: &str) -> Option<Value> {
    match value {
        Value::Object(o) => o.shift_remove(key),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Inner {
        n: u32,
        flag: bool,
        f: f64,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Outer {
        a: u64,
        s: String,
        inner: Inner,
        list: Vec<u32>,
        kind: Option<Kind>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Tokens,
        Messages,
    }

    #[test]
    fn collects_every_problem_with_paths() {
        let mut r = Report::default();
        let v = json!({"a": "ten", "s": 5, "inner": {"n": -1, "flag": "maybe", "f": []},
                       "list": [1, "x"], "kind": "fraction", "zzz": 1});
        let out: Outer = parse_section("sec", v, &mut r);
        let errs: Vec<String> = r.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errs,
            [
                "sec.a: expected an unsigned integer, got a string",
                "sec.s: expected a string, got 5",
                "sec.inner.n: expected an unsigned integer, got -1",
                "sec.inner.flag: expected a boolean, got a string",
                "sec.inner.f: expected a number, got a list",
                "sec.list[1]: expected an unsigned integer, got a string",
                "sec.kind: expected one of tokens, messages, got \"fraction\"",
            ]
        );
        assert_eq!(r.warnings[0].to_string(), "sec.zzz: unknown key; ignored");
        assert_eq!(out, Outer::default());
    }

    #[test]
    fn coerces_like_pydantic_lax_mode() {
        let mut r = Report::default();
        let v = json!({"a": "600", "inner": {"n": 30.0, "flag": "true", "f": "0.5"}, "s": null});
        let out: Outer = parse_section("sec", v, &mut r);
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(out.a, 600);
        assert_eq!(
            out.inner,
            Inner {
                n: 30,
                flag: true,
                f: 0.5
            }
        );
        assert_eq!(r.warnings.len(), 1);
        assert!(r.warnings[0].to_string().starts_with("sec.s: null"));
        let mut r = Report::default();
        let _: Outer = parse_section("sec", json!({"inner": {"n": 2.5}}), &mut r);
        assert_eq!(
            r.errors[0].to_string(),
            "sec.inner.n: expected an unsigned integer, got 2.5"
        );
    }

    #[test]
    fn a_whole_section_of_the_wrong_type() {
        let mut r = Report::default();
        let out: Outer = parse_section("sec", json!("nope"), &mut r);
        assert_eq!(out, Outer::default());
        assert_eq!(
            r.errors[0].to_string(),
            "sec: expected a mapping, got a string"
        );
    }
}
