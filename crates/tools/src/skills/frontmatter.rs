//! `SKILL.md` front matter: extraction, YAML parsing under budgets (the file is untrusted
//! input) and DeerFlow's validation rules (reference §7, §11.1 item 41).

use serde_json::{Map, Value};

/// Keys a skill's front matter may have; anything else makes the skill invalid.
pub const ALLOWED_KEYS: [&str; 10] = [
    "name",
    "description",
    "license",
    "allowed-tools",
    "required-secrets",
    "secrets-autonomous",
    "metadata",
    "compatibility",
    "version",
    "author",
];

/// Longest skill name.
pub const MAX_NAME_CHARS: usize = 64;
/// Longest description.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Largest front matter block accepted (bytes).
pub const MAX_FRONT_MATTER_BYTES: usize = 64 * 1024;

/// A secret a skill needs (`required-secrets`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequiredSecret {
    pub name: String,
    pub optional: bool,
}

/// The validated front matter of a skill.
#[derive(Clone, Debug, PartialEq)]
pub struct FrontMatter {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    /// `None`: not restricted; `Some([])`: no tools.
    pub allowed_tools: Option<Vec<String>>,
    pub required_secrets: Vec<RequiredSecret>,
    pub secrets_autonomous: bool,
    /// Every key as written.
    pub raw: Map<String, Value>,
}

/// Splits a `SKILL.md` into its front matter text and its body. The file must start with a
/// `---` line; the block ends at the next `---` line. A leading BOM and CRLF line ends are
/// accepted.
pub fn split_front_matter(content: &str) -> Option<(&str, &str)> {
    let content = content.strip_prefix('\u{feff}').unwrap_or(content);
    let first_end = content.find('\n')?;
    if content[..first_end].trim_end() != "---" {
        return None;
    }
    let rest = &content[first_end + 1..];
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            let fm = &rest[..offset];
            let body = &rest[offset + line.len()..];
            return Some((fm, body));
        }
        offset += line.len();
    }
    None
}

fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = 16;
    budget.max_nodes = 2_000;
    budget.max_total_scalar_bytes = MAX_FRONT_MATTER_BYTES;
    budget.max_aliases = 0;
    budget.max_anchors = 0;
    budget.max_documents = 1;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    options.with_snippet = false;
    options
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn first_line(e: &impl std::fmt::Display) -> String {
    let t = e.to_string();
    t.lines()
        .next()
        .unwrap_or_default()
        .trim()
        .trim_start_matches("error: ")
        .to_string()
}

/// Checks a skill name: `^[a-z0-9-]+$`, no leading, trailing or doubled hyphen, ≤ 64 chars.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("Name cannot be empty".into());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(format!(
            "Name '{name}' should be hyphen-case (lowercase letters, digits, and hyphens only)"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err(format!(
            "Name '{name}' cannot start/end with hyphen or contain consecutive hyphens"
        ));
    }
    let n = name.chars().count();
    if n > MAX_NAME_CHARS {
        return Err(format!(
            "Name is too long ({n} characters). Maximum is {MAX_NAME_CHARS} characters."
        ));
    }
    Ok(())
}

/// Parses and validates a whole `SKILL.md`. The error text says what is wrong.
pub fn parse_skill_md(content: &str) -> Result<(FrontMatter, String), String> {
    let Some((fm_text, body)) = split_front_matter(content) else {
        return Err(
            if content.trim_start_matches('\u{feff}').starts_with("---") {
                "Invalid frontmatter format: no closing '---' line".to_string()
            } else {
                "No YAML frontmatter found: SKILL.md must start with a '---' line".to_string()
            },
        );
    };
    if fm_text.len() > MAX_FRONT_MATTER_BYTES {
        return Err(format!(
            "Frontmatter is larger than {} KiB",
            MAX_FRONT_MATTER_BYTES / 1024
        ));
    }
    let value: Value = serde_saphyr::from_str_with_options(fm_text, yaml_options())
        .map_err(|e| format!("Invalid YAML in frontmatter: {}", first_line(&e)))?;
    let fm = validate_front_matter(value)?;
    Ok((fm, body.to_string()))
}

/// DeerFlow's rules on a parsed front matter value.
pub fn validate_front_matter(value: Value) -> Result<FrontMatter, String> {
    let Value::Object(map) = value else {
        return Err(format!(
            "Frontmatter must be a YAML mapping, got {}",
            type_name(&value)
        ));
    };
    let mut unexpected: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| !ALLOWED_KEYS.contains(k))
        .collect();
    if !unexpected.is_empty() {
        unexpected.sort_unstable();
        return Err(format!(
            "Unexpected key(s) in SKILL.md frontmatter: {}",
            unexpected.join(", ")
        ));
    }
    let name = match map.get("name") {
        None => return Err("Missing 'name' in frontmatter".into()),
        Some(Value::String(s)) => s.trim().to_string(),
        Some(other) => return Err(format!("Name must be a string, got {}", type_name(other))),
    };
    validate_name(&name)?;
    let description = match map.get("description") {
        None => return Err("Missing 'description' in frontmatter".into()),
        Some(Value::String(s)) => s.trim().to_string(),
        Some(other) => {
            return Err(format!(
                "Description must be a string, got {}",
                type_name(other)
            ));
        }
    };
    if description.is_empty() {
        return Err("Description cannot be empty".into());
    }
    if description.contains(['<', '>']) {
        return Err("Description cannot contain angle brackets (< or >)".into());
    }
    let n = description.chars().count();
    if n > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "Description is too long ({n} characters). Maximum is {MAX_DESCRIPTION_CHARS} characters."
        ));
    }
    let license = match map.get("license") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(other) => {
            return Err(format!(
                "license must be a string, got {}",
                type_name(other)
            ));
        }
    };
    let allowed_tools = match map.get("allowed-tools") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => {
            let mut tools = Vec::with_capacity(items.len());
            for item in items {
                let Value::String(s) = item else {
                    return Err("allowed-tools must contain only strings".into());
                };
                let s = s.trim();
                if s.is_empty() {
                    return Err("allowed-tools cannot contain empty tool names".into());
                }
                tools.push(s.to_string());
            }
            Some(tools)
        }
        Some(other) => {
            return Err(format!(
                "allowed-tools must be a list of strings, got {}",
                type_name(other)
            ));
        }
    };
    let required_secrets = match map.get("required-secrets") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                let secret = match item {
                    Value::String(s) => RequiredSecret {
                        name: s.trim().to_string(),
                        optional: false,
                    },
                    Value::Object(o) => {
                        let Some(Value::String(name)) = o.get("name") else {
                            return Err("required-secrets entries need a string 'name'".to_string());
                        };
                        let optional = match o.get("optional") {
                            None | Some(Value::Null) => false,
                            Some(Value::Bool(b)) => *b,
                            Some(other) => {
                                return Err(format!(
                                    "required-secrets 'optional' must be a boolean, got {}",
                                    type_name(other)
                                ));
                            }
                        };
                        RequiredSecret {
                            name: name.trim().to_string(),
                            optional,
                        }
                    }
                    other => {
                        return Err(format!(
                            "required-secrets entries must be names or {{name, optional}}, got {}",
                            type_name(other)
                        ));
                    }
                };
                if secret.name.is_empty() {
                    return Err("required-secrets cannot contain empty names".into());
                }
                out.push(secret);
            }
            out
        }
        Some(other) => {
            return Err(format!(
                "required-secrets must be a list, got {}",
                type_name(other)
            ));
        }
    };
    let secrets_autonomous = match map.get("secrets-autonomous") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(format!(
                "secrets-autonomous must be a boolean, got {}",
                type_name(other)
            ));
        }
    };
    Ok(FrontMatter {
        name,
        description,
        license,
        allowed_tools,
        required_secrets,
        secrets_autonomous,
        raw: map,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(fm: &str) -> String {
        format!("---\n{fm}\n---\n# Body\n")
    }

    #[test]
    fn valid_skill() {
        let (fm, body) = parse_skill_md(&md(
            "name: csv-peek\ndescription: Look at a CSV file.\nlicense: MIT\nallowed-tools: [bash, read_file]\nrequired-secrets:\n  - API_TOKEN\n  - {name: OTHER, optional: true}\nmetadata: {a: 1}\nversion: 1.2",
        ))
        .unwrap();
        assert_eq!(fm.name, "csv-peek");
        assert_eq!(fm.description, "Look at a CSV file.");
        assert_eq!(fm.license.as_deref(), Some("MIT"));
        assert_eq!(
            fm.allowed_tools,
            Some(vec!["bash".to_string(), "read_file".to_string()])
        );
        assert_eq!(fm.required_secrets.len(), 2);
        assert!(fm.required_secrets[1].optional);
        assert_eq!(body, "# Body\n");
    }

    #[test]
    fn crlf_and_bom() {
        let (fm, body) =
            parse_skill_md("\u{feff}---\r\nname: a\r\ndescription: b\r\n---\r\nbody").unwrap();
        assert_eq!((fm.name.as_str(), body.as_str()), ("a", "body"));
    }

    #[test]
    fn invalid_skills() {
        let cases = [
            (
                "name: a\ndescription: b\nfoo: 1",
                "Unexpected key(s) in SKILL.md frontmatter: foo",
            ),
            ("name: Bad_Name\ndescription: b", "should be hyphen-case"),
            (
                &format!("name: {}\ndescription: b", "a".repeat(65)),
                "Name is too long (65 characters)",
            ),
            ("name: a\ndescription: x < y", "angle brackets"),
            ("name: a\ndescription: x > y", "angle brackets"),
            ("name: -a\ndescription: b", "cannot start/end with hyphen"),
            ("name: a--b\ndescription: b", "consecutive hyphens"),
            ("description: b", "Missing 'name'"),
            ("name: a", "Missing 'description'"),
            ("name: 3\ndescription: b", "Name must be a string"),
            ("name: a\ndescription: \"\"", "Description cannot be empty"),
            (
                &format!("name: a\ndescription: {}", "d".repeat(1025)),
                "Description is too long",
            ),
            (
                "name: a\ndescription: b\nallowed-tools: bash",
                "allowed-tools must be a list",
            ),
            (
                "name: a\ndescription: b\nsecrets-autonomous: yes please",
                "secrets-autonomous must be a boolean",
            ),
            ("- a\n- b", "Frontmatter must be a YAML mapping"),
            ("name: a\nname: b\ndescription: c", "Invalid YAML"),
            ("name: [unclosed", "Invalid YAML"),
            ("a: &x [1]\nb: *x", "Invalid YAML"),
        ];
        for (fm, want) in cases {
            let err = parse_skill_md(&md(fm)).unwrap_err();
            assert!(err.contains(want), "{fm:?}: got {err:?}, want {want:?}");
        }
        assert!(
            parse_skill_md("# no front matter")
                .unwrap_err()
                .contains("No YAML frontmatter")
        );
        assert!(
            parse_skill_md("---\nname: a\n")
                .unwrap_err()
                .contains("no closing")
        );
        assert!(validate_name(&"a".repeat(64)).is_ok());
    }
}
