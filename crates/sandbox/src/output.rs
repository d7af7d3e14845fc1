//! Tool texts the way DeerFlow shapes them: bash output assembly, middle truncation for bash
//! (both ends kept, exit marker preserved), head truncation for `read_file` and `ls`, and
//! secret redaction. All lengths are in characters (Python `len`), not bytes.

use crate::ExecOutput;

/// Marker replacing a secret value in bash output.
pub const REDACTED: &str = "[redacted]";
/// Secret values shorter than this are not redacted (they would shred unrelated output).
pub const MIN_SECRET_LEN: usize = 8;
/// The smallest effective bash limit: the exit marker must always fit.
pub const BASH_MIN_LIMIT_CHARS: usize = 32;

fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// First `n` characters.
fn head_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Last `n` characters.
fn tail_chars(s: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    match s.char_indices().rev().nth(n - 1) {
        Some((i, _)) => &s[i..],
        None => s,
    }
}

/// Replaces every secret value (≥ [`MIN_SECRET_LEN`] chars) in `text` by [`REDACTED`],
/// longest first so a secret containing another is not half revealed.
pub fn redact_secrets<'a>(text: &str, secrets: impl IntoIterator<Item = &'a str>) -> String {
    let mut values: Vec<&str> = secrets
        .into_iter()
        .filter(|v| char_len(v) >= MIN_SECRET_LEN)
        .collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    values.dedup();
    let mut s = text.to_string();
    for v in values {
        if s.contains(v) {
            s = s.replace(v, REDACTED);
        }
    }
    s
}

/// DeerFlow's notice for a command killed at its timeout.
pub fn timeout_notice(timeout: std::time::Duration) -> String {
    let secs = timeout.as_secs_f64();
    let amount = if secs.fract() == 0.0 {
        format!("{}", secs as u64)
    } else {
        format!("{secs}")
    };
    let unit = if secs == 1.0 { "second" } else { "seconds" };
    format!(
        "Command timed out after {amount} {unit} and was terminated. To run a long-lived \
         process such as a web server, start it in the background and redirect its output, \
         e.g. `your-command > /mnt/user-data/workspace/server.log 2>&1 &`."
    )
}

/// Assembles bash output (stdout, `Std Error:` section, timeout notice, `Exit Code: N`, or
/// `(no output)`) and middle-truncates it to `max_chars` (0 = no truncation).
pub fn render_bash_output(out: &ExecOutput, max_chars: usize) -> String {
    let mut s = out.stdout.clone();
    if !out.stderr.is_empty() {
        if !s.is_empty() {
            s.push_str("\nStd Error:\n");
        }
        s.push_str(&out.stderr);
    }
    if out.timed_out {
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str(&timeout_notice(out.timeout));
        s.push_str("\nExit Code: 124");
    } else if let Some(code) = out.exit_code
        && code != 0
    {
        s.push_str(&format!("\nExit Code: {code}"));
    }
    if s.is_empty() {
        s.push_str("(no output)");
    }
    truncate_middle(&s, max_chars, out.stdout_omitted + out.stderr_omitted)
}

/// Length of a trailing `\nExit Code: N` (plus trailing whitespace) in `s`, if any.
fn exit_marker_len(s: &str) -> Option<usize> {
    let trimmed = s.trim_end();
    let idx = trimmed.rfind("\nExit Code: ")?;
    let num = &trimmed[idx + "\nExit Code: ".len()..];
    let digits = num.strip_prefix('-').unwrap_or(num);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.len() - idx)
}

/// Middle truncation for bash output: keeps the head and the tail (half each) around
/// `... [middle truncated: N chars skipped] ...`, never cuts a trailing exit marker, and
/// stays within `max(max_chars, 32)` characters. `already_skipped` counts characters dropped
/// earlier (bounded capture) so the marker reports the true total. `max_chars == 0` returns
/// the text unchanged.
pub fn truncate_middle(output: &str, max_chars: usize, already_skipped: usize) -> String {
    if max_chars == 0 {
        return output.to_string();
    }
    let mut limit = max_chars.max(BASH_MIN_LIMIT_CHARS);
    let total_chars = char_len(output);
    if total_chars <= limit && already_skipped == 0 {
        return output.to_string();
    }
    let mut body = output;
    let mut preserved = "";
    if let Some(len) = exit_marker_len(output) {
        let marker = &output[output.len() - len..];
        let marker_chars = char_len(marker);
        if marker_chars < limit {
            preserved = marker;
            body = &output[..output.len() - len];
            limit -= marker_chars;
            if char_len(body) <= limit && already_skipped == 0 {
                return output.to_string();
            }
        }
    }
    let body_chars = char_len(body);
    let worst = format!(
        "\n... [middle truncated: {} chars skipped] ...\n",
        body_chars + already_skipped
    );
    let kept = limit.saturating_sub(char_len(&worst));
    if kept == 0 {
        return format!("{}{}", head_chars(body, limit), preserved);
    }
    let kept = kept.min(body_chars);
    let head_len = kept / 2;
    let tail_len = kept - head_len;
    let skipped = body_chars - kept + already_skipped;
    format!(
        "{}\n... [middle truncated: {skipped} chars skipped] ...\n{}{}",
        head_chars(body, head_len),
        tail_chars(body, tail_len),
        preserved
    )
}

fn truncate_head(output: &str, max_chars: usize, hint: &str) -> String {
    if max_chars == 0 {
        return output.to_string();
    }
    let total = char_len(output);
    if total <= max_chars {
        return output.to_string();
    }
    let worst = format!("\n... [truncated: showing first {total} of {total} chars. {hint}] ...");
    let kept = max_chars.saturating_sub(char_len(&worst));
    if kept == 0 {
        return head_chars(output, max_chars).to_string();
    }
    format!(
        "{}\n... [truncated: showing first {kept} of {total} chars. {hint}] ...",
        head_chars(output, kept)
    )
}

/// Head truncation for `read_file` (the marker points at `start_line`/`end_line`).
pub fn truncate_read_file(output: &str, max_chars: usize) -> String {
    truncate_head(
        output,
        max_chars,
        "Use start_line/end_line to read a specific range",
    )
}

/// Head truncation for `ls`.
pub fn truncate_ls(output: &str, max_chars: usize) -> String {
    truncate_head(
        output,
        max_chars,
        "Use a more specific path to see fewer results",
    )
}

/// Middle truncation of a `write_file` error detail (DeerFlow bounds them to 2000 chars).
pub fn truncate_error_detail(detail: &str, max_chars: usize) -> String {
    if max_chars == 0 || char_len(detail) <= max_chars {
        return detail.to_string();
    }
    let total = char_len(detail);
    let worst = format!("\n... [write_file error truncated: {total} chars skipped] ...\n");
    let kept = max_chars.saturating_sub(char_len(&worst));
    if kept == 0 {
        return head_chars(detail, max_chars).to_string();
    }
    let head_len = kept / 2;
    let tail_len = kept - head_len;
    format!(
        "{}\n... [write_file error truncated: {} chars skipped] ...\n{}",
        head_chars(detail, head_len),
        total - kept,
        tail_chars(detail, tail_len)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn middle_truncation_keeps_both_ends() {
        let lines: Vec<String> = (0..3000).map(|i| format!("line{i:05}")).collect();
        let text = lines.join("\n");
        assert!(text.chars().count() > 20_000);
        let t = truncate_middle(&text, 20_000, 0);
        assert!(t.chars().count() <= 20_000, "{}", t.chars().count());
        assert!(t.contains("[middle truncated: "));
        assert!(t.starts_with("line00000"));
        assert!(t.ends_with("line02999"));
        assert_eq!(truncate_middle(&text, 0, 0), text);
        assert_eq!(truncate_middle("short", 20_000, 0), "short");
    }

    #[test]
    fn middle_truncation_counts_skipped_exactly() {
        let text = "z".repeat(1000);
        let t = truncate_middle(&text, 100, 0);
        let kept = t.chars().filter(|c| *c == 'z').count();
        assert!(t.contains(&format!(
            "[middle truncated: {} chars skipped]",
            1000 - kept
        )));
        let t = truncate_middle(&text, 100, 50);
        let kept = t.chars().filter(|c| *c == 'z').count();
        assert!(t.contains(&format!(
            "[middle truncated: {} chars skipped]",
            1050 - kept
        )));
    }

    #[test]
    fn exit_marker_survives_truncation() {
        let text = format!("{}\nExit Code: 3", "x".repeat(5000));
        let t = truncate_middle(&text, 200, 0);
        assert!(t.ends_with("\nExit Code: 3"));
        assert!(t.chars().count() <= 200);
        // tiny limits are raised to the floor
        let t = truncate_middle(&text, 5, 0);
        assert!(t.ends_with("\nExit Code: 3"));
        assert!(t.chars().count() <= BASH_MIN_LIMIT_CHARS);
    }

    #[test]
    fn multibyte_is_cut_on_char_boundaries() {
        let text = "é".repeat(500);
        let t = truncate_middle(&text, 100, 0);
        assert!(t.chars().count() <= 100);
        let r = truncate_read_file(&text, 100);
        assert!(r.chars().count() <= 100);
    }

    #[test]
    fn head_truncation_markers() {
        let text = "b".repeat(60_000);
        let r = truncate_read_file(&text, 50_000);
        assert!(r.chars().count() <= 50_000);
        assert!(r.contains("Use start_line/end_line to read a specific range"));
        let l = truncate_ls(&text, 20_000);
        assert!(l.chars().count() <= 20_000);
        assert!(l.contains("Use a more specific path"));
        assert_eq!(truncate_ls("x", 0), "x");
    }

    #[test]
    fn bash_render_shapes() {
        let mut o = ExecOutput {
            exit_code: Some(0),
            ..Default::default()
        };
        assert_eq!(render_bash_output(&o, 20_000), "(no output)");
        o.stdout = "out".into();
        o.stderr = "err".into();
        o.exit_code = Some(2);
        assert_eq!(
            render_bash_output(&o, 20_000),
            "out\nStd Error:\nerr\nExit Code: 2"
        );
        o.stdout.clear();
        assert_eq!(render_bash_output(&o, 20_000), "err\nExit Code: 2");
        let o = ExecOutput {
            timed_out: true,
            timeout: Duration::from_secs(1),
            ..Default::default()
        };
        let r = render_bash_output(&o, 20_000);
        assert!(r.starts_with("Command timed out after 1 second and was terminated."));
        assert!(r.ends_with("\nExit Code: 124"));
    }

    #[test]
    fn secrets_are_redacted_longest_first() {
        let out = redact_secrets(
            "token=abcdefgh12 short=abc",
            ["abcdefgh", "abcdefgh12", "abc"],
        );
        assert_eq!(out, "token=[redacted] short=abc");
    }

    #[test]
    fn error_detail_bound() {
        let d = "e".repeat(5000);
        let t = truncate_error_detail(&d, 2000);
        assert!(t.chars().count() <= 2000);
        assert!(t.contains("write_file error truncated"));
    }
}
