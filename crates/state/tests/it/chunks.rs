//! `ChunkAccumulator` / `merge_chunks` against what langchain-core 1.8.2 makes of the same
//! chunk sequences (`chunks[0] + chunks[1:]`, then `message_chunk_to_message`).
//!
//! Deliberate deviations from langchain-core (none of them occurs in the fixture; each has a
//! unit test in `src/chunk.rs`):
//! * `name` of the merged message: langchain's chunk `+` drops it; we keep the first one.
//! * Equal identifier strings repeated on several chunks (`model_name`, `finish_reason`,
//!   `system_fingerprint`, `service_tier`, `model`, `type`, and a tool-call chunk `name`) are
//!   kept once instead of being concatenated (`"stopstop"`).
//! * Values langchain refuses to merge (different JSON types, two different booleans or
//!   floats) raise `TypeError` there; here the later value wins.
//! * `[] + "text"` keeps the text (langchain drops it).
//! * `NaN`/`Infinity` in tool arguments are not JSON and stay invalid here.

use crate::fixture;
use fawn_state::{ChunkAccumulator, Message, ToolCallChunk, merge_chunks};
use serde_json::{Map, Value};

fn sequences() -> Vec<Value> {
    let f = fixture("langchain_chunk_merges.json");
    assert_eq!(f["langchain_core_version"], "1.8.2");
    f["sequences"].as_array().unwrap().clone()
}

fn parse_chunks(seq: &Value) -> Vec<Message> {
    seq["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| serde_json::from_value(c.clone()).unwrap())
        .collect()
}

#[test]
fn merged_message_matches_langchain() {
    let mut failures = Vec::new();
    for seq in sequences() {
        let case = seq["case"].as_str().unwrap();
        let chunks = parse_chunks(&seq);
        let merged = serde_json::to_value(merge_chunks(&chunks)).unwrap();
        let expected = &seq["message"];
        for field in [
            "type",
            "content",
            "tool_calls",
            "invalid_tool_calls",
            "usage_metadata",
            "additional_kwargs",
            "response_metadata",
            "id",
            "name",
        ] {
            // `Value` maps compare regardless of key order: langchain's usage sum builds its
            // dict from a set, so its key order is random from one Python run to the next.
            if merged[field] != expected[field] {
                failures.push(format!(
                    "{case}.{field}:\n  langchain {}\n  fawn      {}",
                    expected[field], merged[field]
                ));
            }
        }
        // The whole message, key order included, once usage is in canonical order.
        let canonical: Message = serde_json::from_value(expected.clone()).unwrap();
        if failures.is_empty() {
            assert_eq!(
                serde_json::to_string(&merged).unwrap(),
                serde_json::to_string(&canonical).unwrap(),
                "{case}"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn running_sum_matches_langchain_summed_chunk() {
    let mut failures = Vec::new();
    for seq in sequences() {
        let case = seq["case"].as_str().unwrap();
        let mut acc = ChunkAccumulator::new();
        for c in parse_chunks(&seq) {
            acc.push(&c);
        }
        let current = serde_json::to_value(acc.current().unwrap()).unwrap();
        let expected = &seq["summed_chunk"];
        for field in [
            "type",
            "content",
            "tool_call_chunks",
            "additional_kwargs",
            "response_metadata",
            "usage_metadata",
            "id",
            "chunk_position",
        ] {
            if current[field] != expected[field] {
                failures.push(format!(
                    "{case}.{field}:\n  langchain {}\n  fawn      {}",
                    expected[field], current[field]
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn snapshot_mid_stream_equals_merge_of_the_prefix() {
    for seq in sequences() {
        let chunks = parse_chunks(&seq);
        let mut acc = ChunkAccumulator::new();
        for (i, c) in chunks.iter().enumerate() {
            acc.push(c);
            assert_eq!(
                acc.snapshot(),
                merge_chunks(&chunks[..=i]),
                "{}",
                seq["case"]
            );
        }
        assert_eq!(acc.finish(), merge_chunks(&chunks));
    }
}

#[test]
fn nameless_tool_calls_are_dropped_valid_or_not() {
    let mut a = Message::ai_chunk("").with_id("lc_run--1");
    a.tool_call_chunks = vec![
        ToolCallChunk {
            name: Some("lookup".into()),
            args: Some(r#"{"key": "a"}"#.into()),
            id: Some("call_1".into()),
            index: Some(0),
            extra: Map::new(),
        },
        ToolCallChunk {
            name: Some(" ".into()),
            args: Some(r#"{"key": "b"}"#.into()),
            id: Some("call_2".into()),
            index: Some(1),
            extra: Map::new(),
        },
        ToolCallChunk {
            name: None,
            args: Some(r#"{"key": "c"}"#.into()),
            id: Some("call_3".into()),
            index: Some(2),
            extra: Map::new(),
        },
        ToolCallChunk {
            name: None,
            args: Some("not json".into()),
            id: Some("call_4".into()),
            index: Some(3),
            extra: Map::new(),
        },
        ToolCallChunk {
            name: Some("lookup".into()),
            args: Some("not json".into()),
            id: Some("call_5".into()),
            index: Some(4),
            extra: Map::new(),
        },
    ];
    let mut m = merge_chunks([&a]);
    assert_eq!((m.tool_calls.len(), m.invalid_tool_calls.len()), (3, 2));
    assert_eq!(m.drop_nameless_tool_calls(), 3);
    assert_eq!(m.tool_calls.len(), 1);
    assert_eq!(m.tool_calls[0].id.as_deref(), Some("call_1"));
    assert_eq!(m.invalid_tool_calls.len(), 1);
    assert_eq!(m.invalid_tool_calls[0].id.as_deref(), Some("call_5"));
    assert_eq!(m.drop_nameless_tool_calls(), 0);
}
