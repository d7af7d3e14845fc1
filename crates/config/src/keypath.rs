//! Key paths as they appear in messages: `models[1].api_key`, `mcpServers.github.env.TOKEN`.

/// Appends a mapping key to a path. Keys that are not plain identifiers are quoted:
/// `tool_freq_overrides["a.b"]`.
pub(crate) fn key(base: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == ':');
    match (base.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{base}.{key}"),
        (_, false) => format!("{base}[{}]", serde_json::Value::String(key.to_string())),
    }
}

/// Appends a list index to a path.
pub(crate) fn index(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

/// One step into a JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

pub(crate) fn join(base: &str, segs: &[Seg]) -> String {
    let mut out = base.to_string();
    for s in segs {
        out = match s {
            Seg::Key(k) => key(&out, k),
            Seg::Index(i) => index(&out, *i),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting() {
        assert_eq!(key("", "models"), "models");
        assert_eq!(index("models", 1), "models[1]");
        assert_eq!(key("models[1]", "api_key"), "models[1].api_key");
        assert_eq!(key("x", "a.b"), "x[\"a.b\"]");
        assert_eq!(key("tool_groups", "file:read"), "tool_groups.file:read");
        assert_eq!(
            join(
                "a",
                &[Seg::Key("b".into()), Seg::Index(2), Seg::Key("c".into())]
            ),
            "a.b[2].c"
        );
    }
}
