//! Reading one-shot model answers (titles, follow-up suggestions, input polish, goal verdicts):
//! the one place that decides what of a reasoning model's `<think>` output is dropped and how
//! a JSON value is found in a chatty answer.

use serde_json::Value;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// `answer` without its thinking: every complete `<think>…</think>` block is removed (the tags
/// matched ASCII case-insensitively). An unclosed `<think>` is read by where it stands:
/// - with nothing but whitespace before it (the model was cut off while thinking), it and
///   everything after it go: the answer is all thinking, and nothing of it is an answer;
/// - after some answer text, it is text (an answer may mention the tag: "what `<think>`
///   does") and stays, with everything after it.
pub fn strip_think(answer: &str) -> String {
    let mut text = answer.to_string();
    let mut from = 0;
    while let Some(start) = find_ci(&text, OPEN, from) {
        match find_ci(&text, CLOSE, start + OPEN.len()) {
            Some(end) => {
                text.replace_range(start..end + CLOSE.len(), "");
                from = start;
            }
            None if text[..start].trim().is_empty() => {
                text.truncate(start);
                break;
            }
            None => break,
        }
    }
    text
}

/// The first JSON value in `text` that starts at its first `open` (`'['` or `'{'`), text after
/// it ignored; failing that, the text from that `open` to the last matching closing bracket
/// read as one value. `None` when neither is JSON. Callers strip `<think>` first.
pub fn json_in(text: &str, open: char) -> Option<Value> {
    let close = match open {
        '[' => ']',
        '{' => '}',
        _ => return None,
    };
    let start = text.find(open)?;
    let first = serde_json::Deserializer::from_str(&text[start..])
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok);
    first.or_else(|| {
        let end = text.rfind(close).filter(|e| *e > start)?;
        serde_json::from_str::<Value>(&text[start..=end]).ok()
    })
}

/// The byte offset of the first ASCII case-insensitive match of `needle` (ASCII) at or after
/// `from`.
fn find_ci(haystack: &str, needle: &str, from: usize) -> Option<usize> {
    let h = haystack.as_bytes();
    let n = needle.as_bytes();
    if from > h.len() || n.is_empty() {
        return None;
    }
    h[from..]
        .windows(n.len())
        .position(|w| w.eq_ignore_ascii_case(n))
        .map(|i| from + i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn complete_blocks_go_wherever_they_are() {
        assert_eq!(strip_think("<think>hmm</think>Answer"), "Answer");
        assert_eq!(
            strip_think("<think>a</think>One <THINK>b\nc</Think>two"),
            "One two"
        );
        assert_eq!(strip_think("<think>only thoughts</think>"), "");
        assert_eq!(strip_think("no tags"), "no tags");
        // The first close ends a block (no nesting).
        assert_eq!(
            strip_think("<think>a<think>b</think>c</think>"),
            "c</think>"
        );
    }

    #[test]
    fn an_unclosed_tag_is_thinking_only_at_the_start() {
        // Cut off while thinking: nothing is an answer.
        assert_eq!(strip_think("<think>still thinking [\"a\"]"), "");
        // (Whitespace before it is left for the caller, who trims.)
        assert_eq!(strip_think("  \n<think>still thinking"), "  \n");
        assert_eq!(strip_think("<think>done</think>\n<think>again"), "\n");
        // After answer text, the tag is text.
        assert_eq!(
            strip_think("Explain what <think> does."),
            "Explain what <think> does."
        );
        assert_eq!(
            strip_think("<think>x</think>Rust <think> tags"),
            "Rust <think> tags"
        );
    }

    #[test]
    fn non_ascii_text_around_tags_is_kept_whole() {
        assert_eq!(strip_think("é<think>ü</think>ß"), "éß");
        assert_eq!(strip_think("<think>ü"), "");
        assert_eq!(strip_think("ß<think>ü"), "ß<think>ü");
    }

    #[test]
    fn json_is_the_first_value_at_the_first_bracket() {
        assert_eq!(json_in(r#"["a", "b"]"#, '['), Some(json!(["a", "b"])));
        assert_eq!(
            json_in("Here:\n[\"a\"]\nHope this helps [1].", '['),
            Some(json!(["a"]))
        );
        assert_eq!(
            json_in("```json\n{\"ok\": true}\n```", '{'),
            Some(json!({"ok": true}))
        );
        assert_eq!(
            json_in(r#"{"a": [1]} then {"b": 2}"#, '{'),
            Some(json!({"a": [1]}))
        );
        for bad in ["", "none", "[", "]", "] [", "[\"open", "{x}"] {
            assert_eq!(json_in(bad, '['), None, "{bad}");
            assert_eq!(json_in(bad, '{'), None, "{bad}");
        }
        assert_eq!(json_in("[1]", '('), None);
    }
}
