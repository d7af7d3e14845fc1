//! A cheap token estimate for budget decisions (summarization triggers, context gauges):
//! about four ASCII characters per token, one token per CJK character, two other characters
//! per token, a fixed cost per image and per message. It is a heuristic, not a tokenizer.

use fawn_state::{Content, Message};
use serde_json::Value;

/// Tokens charged per message for role and framing.
pub const MESSAGE_OVERHEAD_TOKENS: usize = 4;
/// Tokens charged per image block (a high-detail 512px tile set, roughly).
pub const IMAGE_TOKENS: usize = 765;

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3000..=0x303F   // CJK punctuation
        | 0x3040..=0x30FF // kana
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xAC00..=0xD7AF // hangul
        | 0xF900..=0xFAFF
        | 0xFF00..=0xFFEF // full-width forms
        | 0x20000..=0x2FFFF)
}

/// Estimated tokens of a piece of text.
pub fn estimate_text_tokens(text: &str) -> usize {
    let (mut ascii, mut cjk, mut other) = (0usize, 0usize, 0usize);
    for c in text.chars() {
        if c.is_ascii() {
            ascii += 1;
        } else if is_cjk(c) {
            cjk += 1;
        } else {
            other += 1;
        }
    }
    ascii.div_ceil(4) + cjk + other.div_ceil(2)
}

fn block_tokens(block: &Value) -> usize {
    match block {
        Value::String(s) => estimate_text_tokens(s),
        Value::Object(o) => {
            if crate::content::is_image_block(block) {
                return IMAGE_TOKENS;
            }
            match o.get("type").and_then(Value::as_str) {
                Some("text") => {
                    estimate_text_tokens(o.get("text").and_then(Value::as_str).unwrap_or(""))
                }
                Some("thinking") => {
                    estimate_text_tokens(o.get("thinking").and_then(Value::as_str).unwrap_or(""))
                }
                _ => estimate_text_tokens(&block.to_string()),
            }
        }
        other => estimate_text_tokens(&other.to_string()),
    }
}

/// Estimated tokens of one message: content, tool calls, replayable reasoning and name.
pub fn estimate_message_tokens(m: &Message) -> usize {
    let mut n = MESSAGE_OVERHEAD_TOKENS;
    n += match &m.content {
        Content::Text(s) => estimate_text_tokens(s),
        Content::Blocks(blocks) => blocks.iter().map(block_tokens).sum(),
    };
    for tc in &m.tool_calls {
        n += estimate_text_tokens(&tc.name);
        n += estimate_text_tokens(&Value::Object(tc.args.clone()).to_string());
    }
    for tc in &m.invalid_tool_calls {
        n += tc.args.as_deref().map(estimate_text_tokens).unwrap_or(0);
    }
    if let Some(Value::String(r)) = m.additional_kwargs.get("reasoning_content") {
        n += estimate_text_tokens(r);
    }
    if let Some(name) = &m.name {
        n += estimate_text_tokens(name);
    }
    n
}

/// Estimated tokens of a conversation.
pub fn estimate_tokens<'a>(messages: impl IntoIterator<Item = &'a Message>) -> usize {
    messages.into_iter().map(estimate_message_tokens).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_state::ToolCall;
    use serde_json::json;

    #[test]
    fn ascii_cjk_and_images() {
        assert_eq!(estimate_text_tokens(""), 0);
        assert_eq!(estimate_text_tokens("abcd"), 1);
        assert_eq!(estimate_text_tokens("abcde"), 2);
        assert_eq!(estimate_text_tokens("你好世界"), 4);
        assert_eq!(estimate_text_tokens("éé"), 1);
        let img = Message::human(Content::Blocks(vec![
            json!({"type": "text", "text": "abcd"}),
            json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", "A".repeat(100_000))}}),
        ]));
        assert_eq!(
            estimate_message_tokens(&img),
            MESSAGE_OVERHEAD_TOKENS + 1 + IMAGE_TOKENS
        );
        let call = Message::ai("").with_tool_calls(vec![ToolCall::new("f", json!({"a": 1}), "c")]);
        assert!(estimate_message_tokens(&call) > MESSAGE_OVERHEAD_TOKENS);
        let long = Message::human("word ".repeat(400));
        let cjk = Message::human("字".repeat(400));
        assert_eq!(
            estimate_tokens(std::slice::from_ref(&long)),
            MESSAGE_OVERHEAD_TOKENS + 500
        );
        assert!(estimate_tokens(&[cjk]) > estimate_tokens(&[Message::human("x".repeat(400))]));
        assert_eq!(
            estimate_tokens(&[long.clone(), long]),
            2 * (MESSAGE_OVERHEAD_TOKENS + 500)
        );
    }
}
