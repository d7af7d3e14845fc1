//! Folding streamed `AIMessageChunk`s into one AI message, the way langchain-core 1.x does
//! it (`chunks[0] + chunks[1:]`, then `message_chunk_to_message`):
//!
//! * string content concatenates; content lists merge element by element on `index`;
//! * `additional_kwargs` / `response_metadata` merge with `merge_dicts` rules (strings
//!   concatenate, objects merge recursively, lists merge on `index`, integers add except
//!   `index`/`created`/`timestamp`, equal values stay);
//! * `tool_call_chunks` merge on `index` (argument strings joined);
//! * `usage_metadata` adds up;
//! * the id prefers a provider id over `lc_run-…` over other `lc_…` ids;
//! * the final `tool_calls` are parsed from the merged chunks with langchain's lenient
//!   `parse_partial_json`; what does not parse to an object lands in `invalid_tool_calls`
//!   with `error: null`.
//!
//! Deliberate deviations (each has a test below): the first `name` is kept (langchain drops
//! it); equal identifier strings repeated on several chunks (`model_name`, `finish_reason`,
//! a tool-call `name`, …) are kept once instead of concatenated; values langchain refuses to
//! merge (type clash) take the later value instead of raising; `[] + "text"` keeps the text.

use crate::message::{
    Content, InvalidToolCall, Message, MessageKind, ToolCall, ToolCallChunk, parse_json_lenient,
    push_control_escape,
};
use serde_json::{Map, Value};

/// Accumulates chunks of one streamed AI message.
#[derive(Clone, Debug, Default)]
pub struct ChunkAccumulator {
    acc: Option<Message>,
    /// Rank of `acc.id`: 2 provider id, 1 `lc_run-…`, 0 other `lc_…`, -1 none.
    id_rank: i8,
}

impl ChunkAccumulator {
    pub fn new() -> Self {
        ChunkAccumulator {
            acc: None,
            id_rank: -1,
        }
    }

    /// Adds one chunk (its `kind` should be `AiChunk`; others are treated the same).
    pub fn push(&mut self, chunk: &Message) {
        match &mut self.acc {
            None => {
                let mut first = chunk.clone();
                first.kind = MessageKind::AiChunk;
                first.tool_call_chunks = effective_tool_call_chunks(chunk);
                first.tool_calls.clear();
                first.invalid_tool_calls.clear();
                first.id = None;
                self.id_rank = -1;
                self.acc = Some(first);
            }
            Some(acc) => merge_into(acc, chunk),
        }
        self.offer_id(chunk.id.as_deref());
    }

    fn offer_id(&mut self, id: Option<&str>) {
        let Some(id) = id.filter(|s| !s.is_empty()) else {
            return;
        };
        let rank = id_rank(id);
        if rank > self.id_rank
            && let Some(acc) = &mut self.acc
        {
            acc.id = Some(id.to_string());
            self.id_rank = rank;
        }
    }

    /// The merged chunk so far: an `AIMessageChunk` with merged `tool_call_chunks`. Its
    /// `tool_calls`/`invalid_tool_calls` are left empty; [`snapshot`](Self::snapshot) parses them.
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

/// langchain's id preference: provider ids, then `lc_run-…`, then other `lc_…` ids.
fn id_rank(id: &str) -> i8 {
    if id.starts_with("lc_run-") {
        1
    } else if id.starts_with("lc_") {
        0
    } else {
        2
    }
}

/// The chunk's tool-call chunks; a chunk that carries whole `tool_calls` (and
/// `invalid_tool_calls`) but no chunks counts as chunks without an index, as
/// `AIMessageChunk`'s validator makes it.
fn effective_tool_call_chunks(chunk: &Message) -> Vec<ToolCallChunk> {
    if !chunk.tool_call_chunks.is_empty() {
        return chunk.tool_call_chunks.clone();
    }
    let whole = chunk.tool_calls.iter().map(|tc| ToolCallChunk {
        name: Some(tc.name.clone()),
        args: Some(Value::Object(tc.args.clone()).to_string()),
        id: tc.id.clone(),
        index: None,
        extra: Map::new(),
    });
    let invalid = chunk.invalid_tool_calls.iter().map(|tc| ToolCallChunk {
        name: tc.name.clone(),
        args: tc.args.clone(),
        id: tc.id.clone(),
        index: None,
        extra: Map::new(),
    });
    whole.chain(invalid).collect()
}

fn merge_into(acc: &mut Message, chunk: &Message) {
    let content = std::mem::take(&mut acc.content);
    acc.content = merge_content(content, &chunk.content);
    merge_maps(&mut acc.additional_kwargs, &chunk.additional_kwargs);
    merge_maps(&mut acc.response_metadata, &chunk.response_metadata);
    if acc.name.is_none() {
        acc.name = chunk.name.clone();
    }
    for tc in effective_tool_call_chunks(chunk) {
        merge_tool_call_chunk(&mut acc.tool_call_chunks, tc);
    }
    acc.usage_metadata = match (acc.usage_metadata.take(), &chunk.usage_metadata) {
        (Some(a), Some(b)) => Some(a.add(b)),
        (None, Some(b)) => Some(b.clone()),
        (a, None) => a,
    };
    if chunk.chunk_position.is_some() {
        acc.chunk_position = chunk.chunk_position.clone();
    }
    for (k, v) in &chunk.extra {
        acc.extra.insert(k.clone(), v.clone());
    }
}

fn blank_or_none(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

/// `merge_lists` on tool-call chunks: same integer `index` and no conflicting ids → merged.
fn merge_tool_call_chunk(list: &mut Vec<ToolCallChunk>, c: ToolCallChunk) {
    if let Some(idx) = c.index
        && let Some(existing) = list.iter_mut().find(|e| {
            e.index == Some(idx) && (blank_or_none(&e.id) || blank_or_none(&c.id) || e.id == c.id)
        })
    {
        merge_opt_str(&mut existing.args, c.args, "args");
        merge_opt_str(&mut existing.name, c.name, "name");
        merge_opt_str(&mut existing.id, c.id, "id");
        merge_maps(&mut existing.extra, &c.extra);
        return;
    }
    list.push(c);
}

fn merge_opt_str(left: &mut Option<String>, right: Option<String>, key: &str) {
    match (left.as_mut(), right) {
        (_, None) => {}
        (None, Some(r)) => *left = Some(r),
        (Some(l), Some(r)) => {
            if !keeps_left_string(key, l, &r) {
                l.push_str(&r);
            }
        }
    }
}

/// Strings that merge_dicts does not concatenate: an `lc_…` `index`, and equal ids /
/// `output_version` / `model_provider` (langchain); plus, deliberately, equal values of
/// identifiers that some providers repeat on every chunk.
fn keeps_left_string(key: &str, left: &str, right: &str) -> bool {
    (key == "index" && left.starts_with("lc_"))
        || (left == right
            && matches!(
                key,
                "id" | "output_version"
                    | "model_provider"
                    // Fawn: not concatenated when repeated with the same value.
                    | "type"
                    | "name"
                    | "model"
                    | "model_name"
                    | "finish_reason"
                    | "system_fingerprint"
                    | "service_tier"
            ))
}

/// langchain `merge_content`.
fn merge_content(left: Content, right: &Content) -> Content {
    match (left, right) {
        (Content::Text(mut x), Content::Text(y)) => {
            x.push_str(y);
            Content::Text(x)
        }
        // A string followed by a list becomes the list's first element, even when empty.
        (Content::Text(x), Content::Blocks(y)) => {
            let mut blocks = Vec::with_capacity(y.len() + 1);
            blocks.push(Value::String(x));
            blocks.extend(y.iter().cloned());
            Content::Blocks(blocks)
        }
        (Content::Blocks(mut x), Content::Blocks(y)) => {
            merge_lists(&mut x, y);
            Content::Blocks(x)
        }
        (Content::Blocks(mut x), Content::Text(y)) => {
            if let Some(Value::String(last)) = x.last_mut() {
                last.push_str(y);
            } else if !y.is_empty() {
                // langchain drops the text when the list is empty; Fawn keeps it.
                x.push(Value::String(y.clone()));
            }
            Content::Blocks(x)
        }
    }
}

fn mergeable_index(v: &Value) -> Option<&Value> {
    match v.get("index") {
        Some(i @ Value::Number(n)) if n.is_i64() || n.is_u64() => Some(i),
        Some(i @ Value::String(s)) if s.starts_with("lc_") => Some(i),
        _ => None,
    }
}

fn blank_id(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    }
}

/// langchain `merge_lists`: an object with an integer (or `lc_…`) `index` merges into the
/// first earlier object with the same index and no conflicting `id`; anything else is appended.
pub fn merge_lists(left: &mut Vec<Value>, right: &[Value]) {
    for item in right {
        let target = mergeable_index(item).and_then(|idx| {
            left.iter().position(|e| {
                e.is_object()
                    && e.get("index") == Some(idx)
                    && (blank_id(e.get("id"))
                        || blank_id(item.get("id"))
                        || e.get("id") == item.get("id"))
            })
        });
        let (Some(pos), Value::Object(new)) = (target, item) else {
            left.push(item.clone());
            continue;
        };
        let Value::Object(existing) = &mut left[pos] else {
            continue;
        };
        let left_type = existing
            .get("type")
            .filter(|t| !matches!(t, Value::Null | Value::Bool(false)))
            .cloned();
        let non_standard_value = match (new.get("type"), new.get("value")) {
            (Some(Value::String(t)), Some(Value::Object(v))) if t == "non_standard" => Some(v),
            _ => None,
        };
        let patch = match (left_type, non_standard_value) {
            (Some(lt), Some(value)) => {
                let inner: Map<String, Value> = value
                    .iter()
                    .filter(|(k, _)| k.as_str() != "type")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let mut p = Map::new();
                if lt.as_str() == Some("non_standard") {
                    p.insert("value".into(), Value::Object(inner));
                    if let Some(i) = new.get("index") {
                        p.insert("index".into(), i.clone());
                    }
                } else {
                    p.insert("extras".into(), Value::Object(inner));
                }
                p
            }
            _ => {
                let mut p = new.clone();
                p.shift_remove("type");
                p
            }
        };
        merge_maps(existing, &patch);
    }
}

/// Python's notion of the value's type, for merge_dicts' type check.
fn py_type(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Number(n) if n.is_f64() => 3,
        Value::Number(_) => 2,
        Value::String(_) => 4,
        Value::Array(_) => 5,
        Value::Object(_) => 6,
    }
}

/// langchain `merge_dicts`.
pub fn merge_maps(left: &mut Map<String, Value>, right: &Map<String, Value>) {
    for (k, rv) in right {
        let Some(lv) = left.get_mut(k) else {
            left.insert(k.clone(), rv.clone());
            continue;
        };
        if lv.is_null() {
            *lv = rv.clone();
            continue;
        }
        if rv.is_null() {
            continue;
        }
        if py_type(lv) != py_type(rv) {
            // langchain raises TypeError; the later value wins here.
            *lv = rv.clone();
            continue;
        }
        match (lv, rv) {
            (Value::String(l), Value::String(r)) => {
                if !keeps_left_string(k, l, r) {
                    l.push_str(r);
                }
            }
            (Value::Object(l), Value::Object(r)) => merge_maps(l, r),
            (Value::Array(l), Value::Array(r)) => merge_lists(l, r),
            (l, r) if *l == *r => {}
            (l @ Value::Number(_), Value::Number(r)) if py_type(l) == 2 => {
                let sum = match (l.as_i64(), r.as_i64()) {
                    (Some(a), Some(b)) => a.checked_add(b).map(Value::from),
                    _ => None,
                };
                *l = match sum {
                    Some(s) if !matches!(k.as_str(), "index" | "created" | "timestamp") => s,
                    _ => Value::Number(r.clone()),
                };
            }
            // Differing booleans or floats: langchain raises TypeError; the later value wins.
            (l, r) => *l = r.clone(),
        }
    }
}

/// Byte offset in `text` where serde_json reported `e` (never before the offending byte).
fn error_offset(text: &str, e: &serde_json::Error) -> usize {
    let mut line_start = 0;
    let mut line = 1;
    if e.line() > 1 {
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                line += 1;
                if line == e.line() {
                    line_start = i + 1;
                    break;
                }
            }
        }
    }
    line_start + e.column()
}

/// langchain's `parse_partial_json`: parse a possibly truncated JSON text.
///
/// Raw control characters inside strings are accepted (Python `strict=False`). When the text
/// does not parse, open strings are closed and the brackets still open in the *whole* text
/// are appended; while that fails, the text is cut back before the element the parser
/// rejected (or by one character when the failure is in the appended closers). `None` when
/// the brackets mismatch or nothing parses.
pub fn parse_partial_json_value(s: &str) -> Option<Value> {
    if let Ok(v) = parse_json_lenient(s) {
        return Some(v);
    }
    let mut buf = String::with_capacity(s.len() + 8);
    // `ends[i]`: byte length of `buf` after element `i` (one input character each).
    let mut ends: Vec<usize> = Vec::with_capacity(s.len() + 1);
    let mut stack: Vec<char> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for ch in s.chars() {
        if in_string {
            if ch == '"' && !escaped {
                in_string = false;
            } else if (ch as u32) < 0x20 && !escaped {
                push_control_escape(&mut buf, ch);
                ends.push(buf.len());
                continue;
            } else if ch == '\\' {
                escaped = !escaped;
            } else {
                escaped = false;
            }
        } else if ch == '"' {
            in_string = true;
            escaped = false;
        } else if ch == '{' {
            stack.push('}');
        } else if ch == '[' {
            stack.push(']');
        } else if ch == '}' || ch == ']' {
            if stack.last() == Some(&ch) {
                stack.pop();
            } else {
                return None;
            }
        }
        buf.push(ch);
        ends.push(buf.len());
    }
    if in_string {
        if escaped {
            ends.pop();
            buf.truncate(ends.last().copied().unwrap_or(0));
        }
        buf.push('"');
        ends.push(buf.len());
    }
    let closing: String = stack.iter().rev().collect();
    let mut n = ends.len();
    let mut candidate = String::with_capacity(buf.len() + closing.len());
    while n > 0 {
        candidate.clear();
        candidate.push_str(&buf[..ends[n - 1]]);
        candidate.push_str(&closing);
        match serde_json::from_str::<Value>(&candidate) {
            Ok(v) => return Some(v),
            Err(e) => {
                let pos = error_offset(&candidate, &e);
                let idx = ends[..n].partition_point(|&end| end <= pos);
                n = if idx < n { idx } else { n - 1 };
            }
        }
    }
    None
}

/// [`parse_partial_json_value`] when the result is an object. `""` gives `{}`.
pub fn parse_partial_json(s: &str) -> Option<Map<String, Value>> {
    if s.is_empty() {
        return Some(Map::new());
    }
    match parse_partial_json_value(s) {
        Some(Value::Object(o)) => Some(o),
        _ => None,
    }
}

/// How `AIMessageChunk` turns tool-call chunks into `tool_calls` and `invalid_tool_calls`:
/// arguments parsed with [`parse_partial_json`] (empty → `{}`), a missing name becomes `""`,
/// anything that is not an object is invalid with `error: null`.
fn tool_calls_from_chunks(chunks: &[ToolCallChunk]) -> (Vec<ToolCall>, Vec<InvalidToolCall>) {
    let mut calls = Vec::new();
    let mut invalid = Vec::new();
    for c in chunks {
        let args = match c.args.as_deref() {
            None | Some("") => Some(Map::new()),
            Some(raw) => parse_partial_json(raw),
        };
        match args {
            Some(args) => calls.push(ToolCall {
                name: c.name.clone().unwrap_or_default(),
                args,
                id: c.id.clone(),
                extra: Map::new(),
            }),
            None => invalid.push(InvalidToolCall {
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

/// Best-effort `tool_calls`/`invalid_tool_calls` of a single chunk, as LangChain computes them
/// for `AIMessageChunk` deltas (partial JSON allowed).
pub fn chunk_tool_calls(chunk: &Message) -> (Vec<ToolCall>, Vec<InvalidToolCall>) {
    tool_calls_from_chunks(&chunk.tool_call_chunks)
}

fn finalize(mut acc: Message) -> Message {
    acc.kind = MessageKind::Ai;
    let chunks = std::mem::take(&mut acc.tool_call_chunks);
    let (calls, invalid) = tool_calls_from_chunks(&chunks);
    acc.tool_calls = calls;
    acc.invalid_tool_calls = invalid;
    acc.chunk_position = None;
    acc
}

/// langchain `add_usage` on the extra integer keys of [`UsageMetadata`].
pub(crate) fn add_usage_values(left: &mut Map<String, Value>, right: &Map<String, Value>) {
    for (k, rv) in right {
        match (left.get_mut(k), rv) {
            (None, _) => {
                left.insert(k.clone(), rv.clone());
            }
            (Some(Value::Number(l)), Value::Number(r)) => {
                if let (Some(a), Some(b)) = (l.as_i64(), r.as_i64())
                    && let Some(s) = a.checked_add(b)
                {
                    *l = s.into();
                } else {
                    *l = r.clone();
                }
            }
            (Some(Value::Object(l)), Value::Object(r)) => add_usage_values(l, r),
            (Some(l), r) => *l = r.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::UsageMetadata;
    use serde_json::json;

    fn chunk(content: &str) -> Message {
        Message::ai_chunk(content).with_id("lc_run--1")
    }

    fn tcc(name: Option<&str>, args: &str, id: Option<&str>, index: i64) -> ToolCallChunk {
        ToolCallChunk {
            name: name.map(str::to_string),
            args: Some(args.to_string()),
            id: id.map(str::to_string),
            index: Some(index),
            ..Default::default()
        }
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
        a.tool_call_chunks
            .push(tcc(Some("get_weather"), "{\"cit", Some("call_1"), 0));
        let mut b = chunk("");
        b.tool_call_chunks
            .push(tcc(None, "y\": \"Paris\"}", None, 0));
        let mut c = chunk("");
        c.tool_call_chunks
            .push(tcc(Some("broken"), "not json", Some("call_2"), 1));
        let m = merge_chunks([&a, &b, &c]);
        assert_eq!(m.tool_calls.len(), 1);
        assert_eq!(m.tool_calls[0].args["city"], "Paris");
        assert_eq!(m.invalid_tool_calls.len(), 1);
        assert_eq!(m.invalid_tool_calls[0].id.as_deref(), Some("call_2"));
        assert_eq!(m.invalid_tool_calls[0].error, None);
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
        // Lenient like langchain: garbage after `{` leaves `{}`.
        assert_eq!(parse_partial_json("{not json"), Some(Map::new()));
        assert_eq!(parse_partial_json("[1, 2]"), None);
        assert_eq!(parse_partial_json("  "), None);
        assert_eq!(parse_partial_json("{\"a\": ]"), None);
        let p = parse_partial_json("{\"t\": \"a\nb\tc").unwrap();
        assert_eq!(p["t"], "a\nb\tc");
    }

    #[test]
    fn partial_json_is_fast_on_long_broken_input() {
        // Thousands of elements with the failure far from the end: the cut-back jumps to
        // the rejected element instead of retrying one character at a time.
        let mut s = String::from("{\"xs\": [");
        for i in 0..20_000 {
            s.push_str(&format!("{i}, "));
        }
        s.push_str("tru");
        let v = parse_partial_json(&s).unwrap();
        assert_eq!(v["xs"].as_array().unwrap().len(), 20_000);
    }

    #[test]
    fn whole_tool_calls_on_chunks_become_unindexed_chunks() {
        let a = chunk("").with_tool_calls(vec![ToolCall::new("ls", json!({"p": 1}), "w1")]);
        let b = chunk("").with_tool_calls(vec![ToolCall::new("ls", json!({"p": 2}), "w2")]);
        let m = merge_chunks([&a, &b]);
        assert_eq!(m.tool_calls.len(), 2);
        assert_eq!(m.tool_calls[1].args["p"], 2);
    }

    /// Deviation: langchain concatenates a name repeated on every chunk ("lsls").
    #[test]
    fn repeated_equal_identifiers_are_not_concatenated() {
        let mut a = chunk("");
        a.tool_call_chunks
            .push(tcc(Some("ls"), "{\"p\":", Some("c"), 0));
        a.response_metadata
            .insert("model_name".into(), "gpt-4o".into());
        let mut b = chunk("");
        b.tool_call_chunks
            .push(tcc(Some("ls"), " 1}", Some("c"), 0));
        b.response_metadata
            .insert("model_name".into(), "gpt-4o".into());
        b.response_metadata
            .insert("finish_reason".into(), "tool_calls".into());
        let mut c = chunk("");
        c.response_metadata
            .insert("finish_reason".into(), "tool_calls".into());
        let m = merge_chunks([&a, &b, &c]);
        assert_eq!(m.tool_calls[0].name, "ls");
        assert_eq!(m.tool_calls[0].args["p"], 1);
        assert_eq!(m.response_metadata["model_name"], "gpt-4o");
        assert_eq!(m.response_metadata["finish_reason"], "tool_calls");
        // Different values still concatenate, as in langchain.
        let mut d = chunk("");
        d.response_metadata
            .insert("model_name".into(), "gpt".into());
        let mut e = chunk("");
        e.response_metadata
            .insert("model_name".into(), "-4o".into());
        assert_eq!(
            merge_chunks([&d, &e]).response_metadata["model_name"],
            "gpt-4o"
        );
    }

    /// Deviation: langchain's `+` drops `name`; keeping it loses nothing.
    #[test]
    fn first_name_is_kept() {
        let a = chunk("a").with_name("researcher");
        let b = chunk("b");
        assert_eq!(merge_chunks([&a, &b]).name.as_deref(), Some("researcher"));
    }

    /// Deviation: langchain raises TypeError on a type clash; the later value wins here.
    #[test]
    fn type_clash_takes_the_later_value() {
        let mut left = json!({"a": 1, "b": true, "c": 1.5, "d": "s"})
            .as_object()
            .unwrap()
            .clone();
        let right = json!({"a": "x", "b": false, "c": 2.5, "d": 3})
            .as_object()
            .unwrap()
            .clone();
        merge_maps(&mut left, &right);
        assert_eq!(
            Value::Object(left),
            json!({"a": "x", "b": false, "c": 2.5, "d": 3})
        );
    }

    /// Deviation: langchain drops text appended to an empty list.
    #[test]
    fn text_after_an_empty_list_is_kept() {
        let a = Message::ai_chunk(Content::Blocks(vec![]));
        let b = Message::ai_chunk("text");
        assert_eq!(
            merge_chunks([&a, &b]).content,
            Content::Blocks(vec![json!("text")])
        );
    }

    #[test]
    fn merge_dicts_rules() {
        let mut left = json!({"n": 1, "same": 2, "index": 0, "created": 5, "s": "a", "l": [1],
                              "o": {"x": "1"}, "none": null})
        .as_object()
        .unwrap()
        .clone();
        let right = json!({"n": 2, "same": 2, "index": 3, "created": 9, "s": "b", "l": [2],
                           "o": {"x": "2", "y": 1}, "none": 4, "new": null})
        .as_object()
        .unwrap()
        .clone();
        merge_maps(&mut left, &right);
        assert_eq!(
            Value::Object(left),
            json!({"n": 3, "same": 2, "index": 3, "created": 9, "s": "ab", "l": [1, 2],
                   "o": {"x": "12", "y": 1}, "none": 4, "new": null})
        );
    }

    #[test]
    fn usage_details_and_extra_counts_add() {
        let a: UsageMetadata = serde_json::from_value(json!({
            "input_tokens": 1, "output_tokens": 2, "total_tokens": 3,
            "output_token_details": {"reasoning": 1, "nested": {"x": 1}}, "cost": 2
        }))
        .unwrap();
        let b: UsageMetadata = serde_json::from_value(json!({
            "input_tokens": 1, "output_tokens": 2, "total_tokens": 3,
            "output_token_details": {"reasoning": 2, "audio": 1, "nested": {"x": 2}}, "cost": 3
        }))
        .unwrap();
        let sum = serde_json::to_value(a.add(&b)).unwrap();
        assert_eq!(
            sum,
            json!({"input_tokens": 2, "output_tokens": 4, "total_tokens": 6,
                   "output_token_details": {"reasoning": 3, "nested": {"x": 3}, "audio": 1},
                   "cost": 5})
        );
    }
}
