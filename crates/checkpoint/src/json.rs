//! JSON helpers shared by both backends: containment (Postgres `@>` semantics, used where
//! SQLite cannot express a filter), shallow merges, and the store's namespace encoding.

use serde_json::{Map, Value};

/// Postgres `jsonb @>` semantics for the filters the API sends (objects at the top):
/// objects contain objects key by key, arrays contain arrays element by element (order and
/// duplicates ignored), scalars are equal (numbers numerically).
pub fn json_contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e
            .iter()
            .all(|(k, ev)| a.get(k).is_some_and(|av| json_contains(av, ev))),
        (Value::Array(a), Value::Array(e)) => e
            .iter()
            .all(|ev| a.iter().any(|av| array_element_contains(av, ev))),
        (Value::Number(a), Value::Number(e)) => numbers_equal(a, e),
        (a, e) => a == e,
    }
}

/// Inside arrays a scalar only matches an equal scalar (no array-contains-scalar rule).
fn array_element_contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Array(_), Value::Array(_)) | (Value::Object(_), Value::Object(_)) => {
            json_contains(actual, expected)
        }
        (Value::Number(a), Value::Number(e)) => numbers_equal(a, e),
        (a, e) => a == e,
    }
}

fn numbers_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    if a == b {
        return true;
    }
    match (a.as_i64(), b.as_i64(), a.as_u64(), b.as_u64()) {
        (Some(x), Some(y), _, _) => x == y,
        (_, _, Some(x), Some(y)) => x == y,
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    }
}

/// `actual` (an object, or `None`) contains every key of `filter`.
pub fn map_contains(actual: Option<&Value>, filter: &Map<String, Value>) -> bool {
    if filter.is_empty() {
        return true;
    }
    match actual {
        Some(v @ Value::Object(_)) => json_contains(v, &Value::Object(filter.clone())),
        _ => false,
    }
}

/// Structural equality with numeric comparison of numbers (jsonb `=`).
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Shallow merge: every key of `patch` replaces the one in `base`.
pub fn merge_shallow(base: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (k, v) in patch {
        base.insert(k.clone(), v.clone());
    }
}

// ------------------------------------------------------------------------ namespaces

/// Encodes store namespace labels as one text key that sorts and prefix-matches by label:
/// each label, with `%`, `.` and NUL percent-escaped, followed by `.`. `["users", "u1"]` is
/// `users.u1.`; every namespace under the prefix `["users"]` starts with `users.`.
pub fn encode_namespace(labels: &[String]) -> String {
    let mut out = String::new();
    for label in labels {
        for ch in label.chars() {
            match ch {
                '%' => out.push_str("%25"),
                '.' => out.push_str("%2E"),
                '\0' => out.push_str("%00"),
                c => out.push(c),
            }
        }
        out.push('.');
    }
    out
}

/// The inverse of [`encode_namespace`]; `None` for text it cannot have produced.
pub fn decode_namespace(encoded: &str) -> Option<Vec<String>> {
    if encoded.is_empty() {
        return Some(Vec::new());
    }
    let body = encoded.strip_suffix('.')?;
    body.split('.').map(unescape_label).collect()
}

fn unescape_label(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('%') {
        out.push_str(&rest[..pos]);
        let code = rest.get(pos + 1..pos + 3)?;
        out.push(match code {
            "25" => '%',
            "2E" => '.',
            "00" => '\0',
            _ => return None,
        });
        rest = &rest[pos + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// The half-open range `[lower, upper)` of encoded namespaces under `prefix`; `upper` is
/// `None` for the empty prefix (everything).
pub fn namespace_range(prefix: &[String]) -> (String, Option<String>) {
    let lower = encode_namespace(prefix);
    if lower.is_empty() {
        return (lower, None);
    }
    // Every encoding under the prefix starts with `lower`, which ends in '.'; the next
    // character ('/') bounds the range.
    let mut upper = lower[..lower.len() - 1].to_string();
    upper.push('/');
    (lower, Some(upper))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containment_follows_jsonb() {
        let doc = json!({"a": 1, "b": {"c": [1, 2, {"d": "x"}], "e": null}, "t": ["x", "y"]});
        assert!(json_contains(&doc, &json!({})));
        assert!(json_contains(&doc, &json!({"a": 1.0})));
        assert!(json_contains(&doc, &json!({"b": {"c": [2]}})));
        assert!(json_contains(&doc, &json!({"b": {"c": [{"d": "x"}, 1]}})));
        assert!(json_contains(&doc, &json!({"b": {"e": null}})));
        assert!(json_contains(&doc, &json!({"t": ["y", "x", "y"]})));
        assert!(!json_contains(&doc, &json!({"t": "x"})));
        assert!(!json_contains(&doc, &json!({"a": "1"})));
        assert!(!json_contains(&doc, &json!({"b": {"c": [3]}})));
        assert!(!json_contains(&doc, &json!({"z": null})));
        assert!(!json_contains(&json!([1, [2, 3]]), &json!([2])));
        assert!(json_contains(&json!([1, [2, 3]]), &json!([[2]])));
    }

    #[test]
    fn namespaces_round_trip_and_prefix_ranges_are_exact() {
        let cases: Vec<Vec<String>> = vec![
            vec![],
            vec!["users".into()],
            vec!["users".into(), "u1".into()],
            vec!["a.b".into(), "50%".into(), "nul\0x".into(), "".into()],
        ];
        for ns in &cases {
            assert_eq!(decode_namespace(&encode_namespace(ns)).as_ref(), Some(ns));
        }
        let (lo, hi) = namespace_range(&["users".to_string()]);
        let hi = hi.unwrap();
        let inside = encode_namespace(&["users".into(), "zzz\u{10FFFF}".into()]);
        let outside = encode_namespace(&["users2".into()]);
        let outside2 = encode_namespace(&["user".into()]);
        assert!(lo <= inside && inside < hi);
        assert!(!(lo <= outside && outside < hi));
        assert!(!(lo <= outside2 && outside2 < hi));
        assert!(decode_namespace("no-trailing-dot").is_none());
        assert!(decode_namespace("bad%ZZ.").is_none());
    }
}
