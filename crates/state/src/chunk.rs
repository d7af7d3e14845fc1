//! Folding streamed `AIMessageChunk`s into one AI message, LangChain's way.

use crate::message::{
    Content, InvalidToolCall, Message, MessageKind, ToolCall, ToolCallChunk, parse_tool_args,
};
use serde_json::{Map, Value};

/// Accumulates chunks of one streamed AI message.
#[derive(Clone, Debug, Default)]
pub struct ChunkAccumulator {
    acc: Option<Message>,
}

impl ChunkAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one chunk (its `kind` should be `AiChunk`; others are treated the same).
    pub fn push(&mut self, chunk: &Message) {
        match &mut self.acc {
            None => {
                let mut first = chunk.clone();
                first.kind = MessageKind::AiChunk;
                self.acc = Some(first);
            }
            Some(acc) => merge_into(acc, chunk),
        }
    }

    /// The merged chunk so far (still an `AIMessageChunk`, tool calls not finalised).
    pub fn current(&self) -> Option<&Message> {
        self.acc.as_ref()
    }

    /// The accumulated message as a complete `ai` message: tool-call chunks parsed into
    /// `tool_calls`, unparseable ones into `invalid_tool_calls`.
    pub fn snapshot(&self) -> Message {
        match &self.acc {
            Some(acc) => finalize(acc.clone()),
            None => Message::ai(""),
        }
    }

    pub fn finish(self) -> Message {
        match self.acc {
            Some(acc) => finalize(acc),
            None => Message::ai(""),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.acc.is_none()
    }
}

/// Folds a whole stream of chunks into one `ai` message.
pub fn merge_chunks<'a>(chunks: impl IntoIterator<Item = &'a Message>) -> Message {
    let mut acc = ChunkAccumulator::new();
    for c in chunks {
        acc.push(c);
    }
    acc.finish()
}

fn merge_into(acc: &mut Message, chunk: &Message) {
    acc.content = merge_content(&acc.content, &chunk.content);
    merge_maps(&mut acc.additional_kwargs, &chunk.additional_kwargs);
    merge_maps(&mut acc.response_metadata, &chunk.response_metadata);
    if acc.id.is_none() {
        acc.id = chunk.id.clone();
    }
    if acc.name.is_none() {
        acc.name = chunk.name.clone();
    }
    for tc in &chunk.tool_call_chunks {
        merge_tool_call_chunk(&mut acc.tool_call_chunks, tc);
    }
    // Whole tool calls on a chunk (providers that do not stream arguments).
    if chunk.tool_call_chunks.is_empty() && !chunk.tool_calls.is_empty() {
        for tc in &chunk.tool_calls {
            acc.tool_call_chunks.push(ToolCallChunk {
                name: Some(tc.name.clone()),
                args: Some(Value::Object(tc.args.clone()).to_string()),
                id: tc.id.clone(),
                index: None,
                extra: Map::new(),
            });
        }
    }
    acc.usage_metadata = match (&acc.usage_metadata, &chunk.usage_metadata) {
        (Some(a), Some(b)) => Some(a.add(b)),
        (None, Some(b)) => Some(b.clone()),
        (a, None) => a.clone(),
    };
    if chunk.chunk_position.is_some() {
        acc.chunk_position = chunk.chunk_position.clone();
    }
    for (k, v) in &chunk.extra {
        acc.extra.insert(k.clone(), v.clone());
    }
}

fn merge_tool_call_chunk(list: &mut Vec<ToolCallChunk>, c: &ToolCallChunk) {
    if let Some(idx) = c.index
        && let Some(existing) = list.iter_mut().find(|e| e.index == Some(idx))
    {
        if let Some(a) = &c.args {
            existing.args.get_or_insert_with(String::new).push_str(a);
        }
        if existing.name.is_none() {
            existing.name = c.name.clone();
        }
        if existing.id.is_none() {
            existing.id = c.id.clone();
        }
        return;
    }
    list.push(c.clone());
}

fn merge_content(a: &Content, b: &Content) -> Content {
    match (a, b) {
        (Content::Text(x), Content::Text(y)) => Content::Text(format!("{x}{y}")),
        (Content::Blocks(x), Content::Blocks(y)) => Content::Blocks(merge_lists(x, y)),
        (Content::Text(x), Content::Blocks(y)) => {
            let mut blocks = Vec::new();
            if !x.is_empty() {
                blocks.push(serde_json::json!({"type": "text", "text": x}));
            }
            Content::Blocks(merge_lists(&blocks, y))
        }
        (Content::Blocks(x), Content::Text(y)) => {
            if y.is_empty() {
                return Content::Blocks(x.clone());
            }
            let mut blocks = x.clone();
            blocks.push(serde_json::json!({"type": "text", "text": y}));
            Content::Blocks(blocks)
        }
    }
}

/// LangChain `merge_lists`: elements carrying the same `index` are merged, others appended.
fn merge_lists(a: &[Value], b: &[Value]) -> Vec<Value> {
    let mut out = a.to_vec();
    for item in b {
        let idx = item.get("index").filter(|i| !i.is_null());
        if let Some(idx) = idx
            && let Some(Value::Object(existing)) = out
                .iter_mut()
                .find(|e| e.get("index").filter(|i| !i.is_null()) == Some(idx))
            && let Value::Object(new) = item
        {
            let mut merged = existing.clone();
            let mut rest = new.clone();
            rest.remove("index");
            // `type` is not concatenated.
            if merged.contains_key("type") {
                rest.remove("type");
            }
            merge_maps(&mut merged, &rest);
            *existing = merged;
            continue;
        }
        out.push(item.clone());
    }
    out
}

/// LangChain `merge_dicts`: strings concatenate, objects merge recursively, lists merge by index.
pub fn merge_maps(left: &mut Map<String, Value>, right: &Map<String, Value>) {
    for (k, rv) in right {
        match left.get_mut(k) {
            None | Some(Value::Null) => {
                left.insert(k.clone(), rv.clone());
            }
            Some(lv) => match (lv, rv) {
                (_, Value::Null) => {}
                (Value::String(l), Value::String(r)) => {
                    // Identifiers that repeat on every chunk are not concatenated.
                    if !(matches!(
                        k.as_str(),
                        "id" | "type"
                            | "model_name"
                            | "model"
                            | "finish_reason"
                            | "system_fingerprint"
                            | "model_provider"
                            | "service_tier"
                    ) && l == r)
                    {
                        l.push_str(r);
                    }
                }
                (Value::Object(l), Value::Object(r)) => merge_maps(l, r),
                (Value::Array(l), Value::Array(r)) => {
                    let merged = merge_lists(l, r);
                    *l = merged;
                }
                (Value::Number(l), Value::Number(r)) => {
                    if let (Some(a), Some(b)) = (l.as_i64(), r.as_i64()) {
                        if k == "index" || k == "created" {
                            *l = r.clone();
                        } else {
                            *l = serde_json::Number::from(a + b);
                        }
                    } else {
                        *l = r.clone();
                    }
                }
                (lv, rv) => *lv = rv.clone(),
            },
        }
    }
}

/// Best-effort parse of a possibly incomplete JSON object (LangChain `parse_partial_json`).
///
/// Open strings, arrays and objects are closed; when that does not parse, up to 64 trailing
/// characters are dropped one by one (a half-written key or literal) before giving up.
pub fn parse_partial_json(s: &str) -> Option<Map<String, Value>> {
    if s.trim().is_empty() {
        return Some(Map::new());
    }
    if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(s) {
        return Some(o);
    }
    let chars: Vec<char> = s.chars().collect();
    let min_len = chars.len().saturating_sub(64);
    let mut len = chars.len();
    while len > min_len {
        if let Some(closed) = close_json(&chars[..len])
            && let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&closed)
        {
            return Some(o);
        }
        len -= 1;
    }
    None
}

/// Appends the quote and brackets that would close `prefix`; `None` if brackets mismatch.
fn close_json(prefix: &[char]) -> Option<String> {
    let mut stack: Vec<char> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for &ch in prefix {
        if in_string {
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                in_string = false;
            }
            continue;
        }
        match ch {
            '"' => in_string = true,
            '{' => stack.push('}'),
            '[' => stack.push(']'),
            '}' | ']' if stack.pop() != Some(ch) => return None,
            _ => {}
        }
    }
    let mut out: String = prefix.iter().collect();
    if in_string {
        if escaped {
            out.pop();
        }
        out.push('"');
    }
    for c in stack.iter().rev() {
        out.push(*c);
    }
    Some(out)
}

/// Best-effort `tool_calls`/`invalid_tool_calls` of a single chunk, as LangChain computes them
/// for `AIMessageChunk` deltas (partial JSON allowed).
pub fn chunk_tool_calls(chunk: &Message) -> (Vec<ToolCall>, Vec<InvalidToolCall>) {
    let mut calls = Vec::new();
    let mut invalid = Vec::new();
    for c in &chunk.tool_call_chunks {
        let raw = c.args.clone().unwrap_or_default();
        match (&c.name, parse_partial_json(&raw)) {
            (Some(name), Some(args)) => calls.push(ToolCall {
                name: name.clone(),
                args,
                id: c.id.clone(),
                extra: Map::new(),
            }),
            _ => invalid.push(InvalidToolCall {
                name: c.name.clone(),
                args: c.args.clone(),
                id: c.id.clone(),
                error: None,
                extra: Map::new(),
            }),
        }
    }
    (calls, invalid)
}

fn finalize(mut acc: Message) -> Message {
    acc.kind = MessageKind::Ai;
    let chunks = std::mem::take(&mut acc.tool_call_chunks);
    if !chunks.is_empty() {
        acc.tool_calls.clear();
        for c in chunks {
            let raw = c.args.clone().unwrap_or_default();
            match (c.name.clone(), parse_tool_args(&raw)) {
                (Some(name), Ok(args)) if !name.is_empty() => acc.tool_calls.push(ToolCall {
                    name,
                    args,
                    id: c.id.clone(),
                    extra: Map::new(),
                }),
                (name, Ok(_)) => acc.invalid_tool_calls.push(InvalidToolCall {
                    name,
                    args: Some(raw),
                    id: c.id.clone(),
                    error: Some("tool call has no name".to_string()),
                    extra: Map::new(),
                }),
                (name, Err(e)) => acc.invalid_tool_calls.push(InvalidToolCall {
                    name,
                    args: Some(raw),
                    id: c.id.clone(),
                    error: Some(e),
                    extra: Map::new(),
                }),
            }
        }
    }
    acc.chunk_position = None;
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::UsageMetadata;

    fn chunk(content: &str) -> Message {
        Message::ai_chunk(content).with_id("lc_run--1")
    }

    #[test]
    fn text_chunks_concatenate_and_usage_adds() {
        let mut a = chunk("Hel");
        a.usage_metadata = Some(UsageMetadata::new(3, 1));
        let mut b = chunk("lo");
        b.usage_metadata = Some(UsageMetadata::new(0, 2));
        let m = merge_chunks([&a, &b]);
        assert_eq!(m.kind, MessageKind::Ai);
        assert_eq!(m.text(), "Hello");
        assert_eq!(m.usage_metadata.as_ref().map(|u| u.total_tokens), Some(6));
    }

    #[test]
    fn tool_call_chunks_merge_by_index_and_parse() {
        let mut a = chunk("");
        a.tool_call_chunks.push(ToolCallChunk {
            name: Some("get_weather".into()),
            args: Some("{\"cit".into()),
            id: Some("call_1".into()),
            index: Some(0),
            ..Default::default()
        });
        let mut b = chunk("");
        b.tool_call_chunks.push(ToolCallChunk {
            args: Some("y\": \"Paris\"}".into()),
            index: Some(0),
            ..Default::default()
        });
        let mut c = chunk("");
        c.tool_call_chunks.push(ToolCallChunk {
            name: Some("broken".into()),
            args: Some("{not json".into()),
            id: Some("call_2".into()),
            index: Some(1),
            ..Default::default()
        });
        let m = merge_chunks([&a, &b, &c]);
        assert_eq!(m.tool_calls.len(), 1);
        assert_eq!(m.tool_calls[0].args["city"], "Paris");
        assert_eq!(m.invalid_tool_calls.len(), 1);
        assert_eq!(m.invalid_tool_calls[0].id.as_deref(), Some("call_2"));
    }

    #[test]
    fn reasoning_content_concatenates_in_kwargs() {
        let mut a = chunk("");
        a.additional_kwargs
            .insert("reasoning_content".into(), "think ".into());
        let mut b = chunk("");
        b.additional_kwargs
            .insert("reasoning_content".into(), "more".into());
        let m = merge_chunks([&a, &b]);
        assert_eq!(m.additional_kwargs["reasoning_content"], "think more");
    }

    #[test]
    fn partial_json() {
        assert_eq!(parse_partial_json("{\"cit"), Some(Map::new()));
        let p = parse_partial_json("{\"city\": \"Par").unwrap();
        assert_eq!(p["city"], "Par");
        assert_eq!(parse_partial_json("y\": \"Paris\"}"), None);
    }
}
