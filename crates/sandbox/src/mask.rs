//! Host ↔ virtual path rewriting in free text, with DeerFlow's segment-boundary rules.
//!
//! * **Masking** (host → virtual) runs over everything the agent reads back: command output,
//!   listings, error texts. A host base matches only where it ends at a path-segment
//!   boundary (`/`, `\`, end of text, or a character that cannot continue a path name), so
//!   `.../skills` does not match inside `.../skills-extra`. The tail after the base runs until
//!   whitespace or shell punctuation and is spliced onto the virtual base with `/`.
//! * **Command rewriting** (virtual → host) is only used for host bash (no OS sandbox), where
//!   the command sees the host layout. The boundary is shell-oriented: the virtual root must
//!   be followed by `/`, whitespace, shell punctuation or the end, so `/mnt/user-data-backup`
//!   is left alone.

use std::path::Path;

/// Characters that end a path tail.
fn is_tail_terminator(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | ';' | '&' | '|' | '<' | '>' | '(' | ')')
}

/// A character that could continue a path name (`\w`, `.`, `/`, `-`).
fn continues_name(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')
}

/// Replaces every occurrence of `base` (at a segment boundary, with its path tail) by
/// `replacement` + tail. `command_boundary` selects the shell-oriented boundary rule.
fn replace_matches(text: &str, base: &str, replacement: &str, command_boundary: bool) -> String {
    if base.is_empty() || text.len() < base.len() {
        return text.to_string();
    }
    let mut out = String::new();
    let mut copied = 0;
    let mut from = 0;
    while let Some(off) = text[from..].find(base) {
        let start = from + off;
        let base_end = start + base.len();
        let mut end = base_end;
        let next = text[base_end..].chars().next();
        let accept = match next {
            None => true,
            Some('/') => true,
            Some('\\') if !command_boundary => true,
            Some(c) if command_boundary => is_tail_terminator(c),
            Some(c) => !continues_name(c),
        };
        if !accept {
            // Advance by one character, not one byte.
            from = start + text[start..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        if matches!(next, Some('/') | Some('\\')) {
            end += 1;
            for c in text[end..].chars() {
                if is_tail_terminator(c) {
                    break;
                }
                end += c.len_utf8();
            }
        }
        let tail = text[base_end..end]
            .trim_start_matches(['/', '\\'])
            .replace('\\', "/");
        out.push_str(&text[copied..start]);
        out.push_str(replacement);
        if !tail.is_empty() {
            if !replacement.ends_with('/') {
                out.push('/');
            }
            out.push_str(&tail);
        } else if matches!(next, Some('/')) && command_boundary {
            // Keep a trailing separator in commands (`cd /mnt/user-data/workspace/`).
            out.push('/');
        }
        copied = end;
        from = end;
    }
    if copied == 0 {
        return text.to_string();
    }
    out.push_str(&text[copied..]);
    out
}

/// Host → virtual masking for one sandbox.
#[derive(Clone, Debug, Default)]
pub struct Masker {
    /// `(host, virtual)`, longest host first.
    pairs: Vec<(String, String)>,
}

impl Masker {
    pub fn new() -> Masker {
        Masker::default()
    }

    /// Adds a host directory and its virtual path, under both its given spelling and its
    /// resolved one (symlinked data dirs). Does a blocking `realpath`.
    pub fn add(&mut self, host: &Path, virtual_path: &str) {
        let raw = host.to_string_lossy().trim_end_matches('/').to_string();
        if raw.is_empty() {
            // `/` would rewrite every absolute path; refused by construction elsewhere.
            return;
        }
        self.push(raw, virtual_path);
        if let Ok(real) = std::fs::canonicalize(host) {
            let real = real.to_string_lossy().trim_end_matches('/').to_string();
            if !real.is_empty() {
                self.push(real, virtual_path);
            }
        }
    }

    /// Adds an exact host spelling (no filesystem access).
    pub fn add_raw(&mut self, host: &str, virtual_path: &str) {
        let raw = host.trim_end_matches('/').to_string();
        if !raw.is_empty() {
            self.push(raw, virtual_path);
        }
    }

    fn push(&mut self, host: String, virtual_path: &str) {
        if !self.pairs.iter().any(|(h, _)| *h == host) {
            self.pairs.push((host, virtual_path.to_string()));
        }
    }

    /// Adds every pair of `other`.
    pub fn extend(&mut self, other: &Masker) {
        for (h, v) in &other.pairs {
            self.push(h.clone(), v);
        }
    }

    /// Orders pairs longest host first (call after the last `add`).
    pub fn finish(mut self) -> Masker {
        self.pairs
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        self
    }

    /// Replaces host paths in `text` by virtual ones.
    pub fn mask(&self, text: &str) -> String {
        let mut s = text.to_string();
        for (host, virt) in &self.pairs {
            if s.contains(host.as_str()) {
                s = replace_matches(&s, host, virt, false);
            }
        }
        s
    }
}

/// Rewrites virtual roots in a shell command to host directories (host bash only).
/// `roots` are `(virtual, host)` pairs; the longest virtual root wins.
pub fn rewrite_command(command: &str, roots: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = roots.iter().collect();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
    // One pass per root, but never rewrite inside a host path produced by an earlier pass:
    // replace with placeholders first, then expand.
    let mut s = command.to_string();
    let mut expansions: Vec<String> = Vec::new();
    for (virt, host) in sorted {
        if !s.contains(virt.as_str()) {
            continue;
        }
        let token = format!("\u{0}{}\u{0}", expansions.len());
        expansions.push(host.clone());
        s = replace_matches(&s, virt, &token, true);
    }
    for (i, host) in expansions.iter().enumerate() {
        let token = format!("\u{0}{i}\u{0}");
        s = s.replace(&token, host);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masker() -> Masker {
        let mut m = Masker::new();
        m.add_raw(
            "/data/threads/t1/user-data/workspace",
            "/mnt/user-data/workspace",
        );
        m.add_raw("/data/threads/t1/user-data", "/mnt/user-data");
        m.add_raw("/opt/skills", "/mnt/skills");
        m.finish()
    }

    #[test]
    fn masks_at_segment_boundaries() {
        let m = masker();
        assert_eq!(
            m.mask("see /data/threads/t1/user-data/workspace/a.txt now"),
            "see /mnt/user-data/workspace/a.txt now"
        );
        assert_eq!(
            m.mask("/data/threads/t1/user-data/workspace"),
            "/mnt/user-data/workspace"
        );
        assert_eq!(
            m.mask("cwd=/data/threads/t1/user-data/outputs:"),
            "cwd=/mnt/user-data/outputs:"
        );
        // sibling sharing a prefix is untouched
        assert_eq!(m.mask("/opt/skills-extra/x"), "/opt/skills-extra/x");
        assert_eq!(
            m.mask("/opt/skills/public/a, /opt/skills"),
            "/mnt/skills/public/a, /mnt/skills"
        );
        // tail stops at quotes and shell punctuation
        assert_eq!(m.mask("'/opt/skills/a b'"), "'/mnt/skills/a b'");
        assert_eq!(m.mask("x(/opt/skills/a)y"), "x(/mnt/skills/a)y");
        // backslash separators after the base
        assert_eq!(m.mask("/opt/skills\\public\\a"), "/mnt/skills/public/a");
        // unicode around
        assert_eq!(m.mask("é/opt/skills/é é"), "é/mnt/skills/é é");
        assert_eq!(m.mask("nothing here"), "nothing here");
    }

    #[test]
    fn command_rewrite_respects_boundaries() {
        let roots = vec![
            ("/mnt/user-data".to_string(), "/h/ud".to_string()),
            (
                "/mnt/user-data/workspace".to_string(),
                "/h/ud/workspace".to_string(),
            ),
        ];
        assert_eq!(
            rewrite_command(
                "cat /mnt/user-data/workspace/a.txt; ls /mnt/user-data-backup",
                &roots
            ),
            "cat /h/ud/workspace/a.txt; ls /mnt/user-data-backup"
        );
        assert_eq!(
            rewrite_command("cd /mnt/user-data && ls", &roots),
            "cd /h/ud && ls"
        );
        assert_eq!(
            rewrite_command("echo \"/mnt/user-data/outputs/x\"", &roots),
            "echo \"/h/ud/outputs/x\""
        );
        assert_eq!(
            rewrite_command("cd /mnt/user-data/workspace/", &roots),
            "cd /h/ud/workspace/"
        );
    }
}
