//! DeerFlow's best-effort path guard for **host** bash (`sandbox.allow_host_bash: true` with
//! no usable bubblewrap). It scans the command text for `file://` URLs, `..` segments,
//! working-directory changes and absolute paths outside the allowed roots, and refuses the
//! command with a text the model can act on.
//!
//! This is *not* a security boundary (a shell has countless ways to build a path the scan
//! cannot see) and is never used when commands run inside bubblewrap, where the mount
//! namespace is the boundary. It exists so that host bash behaves like DeerFlow's.

use crate::vpath::is_under;

const GUIDANCE: &str = "For questions about the environment use command-only probes such as \
                        uname; otherwise use an allowed virtual path, and do not repeat the \
                        rejected path.";

/// Executable and device prefixes host commands may name.
const SYSTEM_PREFIXES: &[&str] = &["/bin/", "/usr/bin/", "/usr/sbin/", "/sbin/", "/dev/"];

/// Commands whose bare `/` argument means "the whole host".
const ROOT_PATH_COMMANDS: &[&str] = &[
    "awk", "cat", "cp", "du", "find", "grep", "head", "less", "ln", "ls", "more", "mv", "rm",
    "sed", "tail", "tar",
];

const PREFIX_KEYWORDS: &[&str] = &[
    "!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "select",
    "then", "time", "until", "while",
];

#[derive(Debug, PartialEq)]
enum Tok {
    Word(String),
    Sep,
    Redirect,
}

fn is_punct(c: char) -> bool {
    matches!(c, ';' | '&' | '|' | '(' | ')' | '<' | '>')
}

/// Splits a command roughly as a POSIX shell would: quotes and backslashes group, shell
/// punctuation separates, newlines end commands.
fn tokenize(command: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = command.chars().peekable();
    let flush = |cur: &mut String, in_word: &mut bool, out: &mut Vec<Tok>| {
        if *in_word {
            out.push(Tok::Word(std::mem::take(cur)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for d in chars.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    cur.push(d);
                }
            }
            '"' => {
                in_word = true;
                while let Some(d) = chars.next() {
                    match d {
                        '"' => break,
                        '\\' => {
                            if let Some(e) = chars.next() {
                                cur.push(e);
                            }
                        }
                        _ => cur.push(d),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(e) = chars.next() {
                    cur.push(e);
                }
            }
            '\n' | '\r' => {
                flush(&mut cur, &mut in_word, &mut out);
                out.push(Tok::Sep);
            }
            c if c.is_whitespace() => flush(&mut cur, &mut in_word, &mut out),
            c if is_punct(c) => {
                flush(&mut cur, &mut in_word, &mut out);
                let mut op = c.to_string();
                while let Some(&n) = chars.peek() {
                    if is_punct(n) && !matches!(n, '(' | ')') && !matches!(c, '(' | ')') {
                        op.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                let redirect = op.contains('<') || op.contains('>');
                out.push(if redirect { Tok::Redirect } else { Tok::Sep });
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    flush(&mut cur, &mut in_word, &mut out);
    out
}

fn is_url(s: &str) -> bool {
    let Some(idx) = s.find("://") else {
        return false;
    };
    let scheme = &s[..idx];
    !scheme.is_empty()
        && scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
        && !scheme.eq_ignore_ascii_case("file")
}

fn has_dotdot_segment(token: &str) -> bool {
    let value = token.split_once('=').map_or(token, |(_, v)| v);
    if is_url(token) || is_url(value) {
        return false;
    }
    token.split(['/', '\\', '=']).any(|seg| seg == "..")
}

fn is_assignment(tok: &str) -> bool {
    match tok.split_once('=') {
        Some((name, _)) => {
            let mut b = name.bytes();
            matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
                && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
        }
        None => false,
    }
}

/// Spans of `scheme://…` URLs (other than `file://`) in the raw command.
fn url_spans(command: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(off) = command[from..].find("://") {
        let idx = from + off;
        let start = command[..idx]
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
            .last()
            .map_or(idx, |(i, _)| i);
        let end = command[idx..]
            .char_indices()
            .find(|(_, c)| {
                c.is_whitespace()
                    || matches!(
                        c,
                        '"' | '\'' | '`' | ';' | '&' | '|' | '<' | '>' | '(' | ')'
                    )
            })
            .map_or(command.len(), |(i, _)| idx + i);
        if start < idx && !command[start..idx].eq_ignore_ascii_case("file") {
            spans.push((start, end));
        }
        from = idx + 3;
    }
    spans
}

/// Absolute-path-looking fragments of the raw command: a `/` not preceded by a word
/// character or `:`, followed by path characters.
fn absolute_fragments(command: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut prev: Option<char> = None;
    let mut i = 0;
    let bytes = command;
    while i < bytes.len() {
        let Some(c) = bytes[i..].chars().next() else {
            break;
        };
        if c == '/'
            && !prev.is_some_and(|p| p.is_alphanumeric() || p == '_' || p == ':' || p == '/')
        {
            let rest = &bytes[i + 1..];
            let len = rest
                .char_indices()
                .find(|(_, c)| {
                    c.is_whitespace()
                        || matches!(
                            c,
                            '"' | '\'' | '`' | ';' | '&' | '|' | '<' | '>' | '(' | ')'
                        )
                })
                .map_or(rest.len(), |(j, _)| j);
            if len > 0 {
                let frag = &bytes[i..i + 1 + len];
                out.push((i, frag));
                prev = frag.chars().last();
                i += 1 + len;
                continue;
            }
        }
        prev = Some(c);
        i += c.len_utf8();
    }
    out
}

/// Text, not a path: non-ASCII characters or `{placeholder}` braces (REST templates,
/// f-strings). Brace expansion such as `{a,b}` and `${VAR}` still count as paths.
fn is_text_fragment(fragment: &str) -> bool {
    if !fragment.is_ascii() {
        return true;
    }
    if !fragment.contains('{') && !fragment.contains('}') {
        return false;
    }
    if fragment.contains("${") {
        return false;
    }
    let mut depth = 0;
    let mut inner = String::new();
    let mut blocks = 0;
    for c in fragment.chars() {
        match c {
            '{' => {
                if depth > 0 {
                    return false;
                }
                depth += 1;
                inner.clear();
            }
            '}' => {
                if depth == 0 {
                    return false;
                }
                depth -= 1;
                let mut b = inner.bytes();
                let ident = matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
                    && b.all(|c| c.is_ascii_alphanumeric() || c == b'_');
                if !ident {
                    return false;
                }
                blocks += 1;
            }
            c if depth > 0 => inner.push(c),
            _ => {}
        }
    }
    depth == 0 && blocks > 0
}

/// Checks a host-bash command. `allowed` are the virtual roots commands may name
/// (`/mnt/user-data`, the skills root, custom mounts). The error text is shown to the model.
pub(crate) fn check(command: &str, allowed: &[String]) -> Result<(), String> {
    let lower = command.to_ascii_lowercase();
    if let Some(i) = lower.find("file://") {
        let url: String = command[i..]
            .chars()
            .take_while(|c| !c.is_whitespace())
            .collect();
        return Err(format!(
            "Unsafe file:// URL in command: {url}. Use paths under /mnt/user-data. {GUIDANCE}"
        ));
    }
    let allowed_path = |p: &str, system: bool| {
        allowed.iter().any(|r| is_under(p, r))
            || (system
                && SYSTEM_PREFIXES
                    .iter()
                    .any(|s| p.starts_with(s) || p == s.trim_end_matches('/')))
    };
    if command.contains("$(") && (command.contains("cd ") || command.contains("pushd ")) {
        let sub = command.split("$(").skip(1).any(|s| {
            let s = s.split(')').next().unwrap_or("");
            s.split_whitespace().any(|w| w == "cd" || w == "pushd")
        });
        if sub {
            return Err(
                "Unsafe working directory change in command substitution. Use paths under /mnt/user-data"
                    .into(),
            );
        }
    }
    let toks = tokenize(command);
    for t in &toks {
        if let Tok::Word(w) = t
            && has_dotdot_segment(w)
        {
            return Err("Access denied: path traversal detected".into());
        }
    }
    let mut at_start = true;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Sep => {
                at_start = true;
                i += 1;
                continue;
            }
            Tok::Redirect => {
                i += 2;
                continue;
            }
            Tok::Word(w) => {
                if !at_start {
                    i += 1;
                    continue;
                }
                if is_assignment(w) || PREFIX_KEYWORDS.contains(&w.as_str()) {
                    i += 1;
                    continue;
                }
                at_start = false;
                let mut name = w.rsplit('/').next().unwrap_or(w).to_string();
                let mut args_from = i + 1;
                if (name == "command" || name == "builtin")
                    && let Some(Tok::Word(n)) = toks.get(i + 1)
                {
                    name = n.rsplit('/').next().unwrap_or(n).to_string();
                    args_from = i + 2;
                }
                // Arguments of this simple command.
                let mut args: Vec<&str> = Vec::new();
                let mut j = args_from;
                while j < toks.len() {
                    match &toks[j] {
                        Tok::Sep => break,
                        Tok::Redirect => j += 2,
                        Tok::Word(a) => {
                            args.push(a);
                            j += 1;
                        }
                    }
                }
                if name == "cd" || name == "pushd" {
                    let target = args
                        .iter()
                        .find(|a| !a.starts_with('-') || **a == "-")
                        .copied();
                    let bad = match target {
                        None | Some("-") => true,
                        Some(t) if t.starts_with(['$', '`', '~']) => true,
                        Some(t) if t.starts_with('/') => !allowed_path(t, false),
                        Some(_) => false,
                    };
                    if bad {
                        let shown = target.map(|t| format!(" {t}")).unwrap_or_default();
                        return Err(format!(
                            "Unsafe working directory change in command: {name}{shown}. Use paths under /mnt/user-data"
                        ));
                    }
                } else if ROOT_PATH_COMMANDS.contains(&name.as_str()) && args.contains(&"/") {
                    return Err(format!(
                        "Unsafe absolute paths in command: /. Use paths under /mnt/user-data. {GUIDANCE}"
                    ));
                }
                i = j;
            }
        }
    }
    let urls = url_spans(command);
    let mut unsafe_paths: Vec<&str> = Vec::new();
    for (pos, frag) in absolute_fragments(command) {
        if urls.iter().any(|(s, e)| *s <= pos && pos < *e) || is_text_fragment(frag) {
            continue;
        }
        if allowed_path(frag, true) {
            continue;
        }
        if !unsafe_paths.contains(&frag) {
            unsafe_paths.push(frag);
        }
    }
    if !unsafe_paths.is_empty() {
        unsafe_paths.sort();
        return Err(format!(
            "Unsafe absolute paths in command: {}. Use paths under /mnt/user-data. {GUIDANCE}",
            unsafe_paths.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> Vec<String> {
        vec!["/mnt/user-data".into(), "/mnt/skills".into()]
    }

    fn err(cmd: &str) -> String {
        check(cmd, &roots()).expect_err(cmd)
    }

    #[test]
    fn deerflow_cases() {
        assert!(
            err("cat /etc/passwd").starts_with("Unsafe absolute paths in command: /etc/passwd")
        );
        assert!(check("curl https://example.com/api/v1", &roots()).is_ok());
        assert!(err("cat file:///etc/passwd").starts_with("Unsafe file:// URL in command"));
        assert!(check("ls /dev/null", &roots()).is_ok());
        assert!(err("cd .. && ls").contains("path traversal"));
    }

    #[test]
    fn more_cases() {
        for ok in [
            "ls /mnt/user-data/workspace",
            "python3 -c 'print(1)' > /mnt/user-data/outputs/x.txt",
            "/usr/bin/env python3 /mnt/skills/public/a/run.py",
            "cd /mnt/user-data/workspace && ls",
            "cd sub && ls",
            "echo /mnt/user-data",
            "curl http://api/devices/{id}/port",
            "echo 'x' | grep -c x",
            "A=1 B=2 env",
            "ls -la",
        ] {
            assert!(
                check(ok, &roots()).is_ok(),
                "{ok}: {:?}",
                check(ok, &roots())
            );
        }
        for bad in [
            "cat /etc/{passwd,shadow}",
            "cd",
            "cd ~",
            "cd $HOME",
            "cd /etc",
            "cd -",
            "ls /",
            "cat ../x",
            "echo x > /tmp/y",
            "cat /mnt/user-data-backup/x",
            "ls $(cd /; pwd)",
            "cat /mnt/user-data/../x",
            "if true; then cd /root; fi",
            "command cd /root",
            "cat\n/etc/hosts",
        ] {
            assert!(check(bad, &roots()).is_err(), "{bad} accepted");
        }
    }
}
