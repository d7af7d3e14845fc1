//! Every message langchain-core 1.8.2 dumps deserializes into `Message` and serializes back to
//! the identical JSON, key order included.

use crate::fixture;
use fawn_state::Message;

#[test]
fn fixture_is_from_the_pinned_langchain_core() {
    let f = fixture("langchain_messages.json");
    assert_eq!(f["langchain_core_version"], "1.8.2");
    assert!(f["messages"].as_array().unwrap().len() >= 30);
}

#[test]
fn langchain_messages_round_trip_byte_for_byte() {
    let f = fixture("langchain_messages.json");
    let mut failures = Vec::new();
    for item in f["messages"].as_array().unwrap() {
        let case = item["case"].as_str().unwrap();
        let original = &item["message"];
        let expected = serde_json::to_string(original).unwrap();
        let msg: Message = match serde_json::from_value(original.clone()) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{case}: does not deserialize: {e}"));
                continue;
            }
        };
        let again = serde_json::to_string(&msg).unwrap();
        if again != expected {
            failures.push(format!(
                "{case}:\n  expected {expected}\n  got      {again}"
            ));
        }
        // Parsing through `Message::from_value` gives the same message.
        assert_eq!(
            Message::from_value(original.clone()).unwrap(),
            msg,
            "{case}"
        );
        // And a second round trip is stable.
        let twice: Message = serde_json::from_str(&again).unwrap();
        assert_eq!(twice, msg, "{case}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_langchain_kind_is_covered() {
    let f = fixture("langchain_messages.json");
    let kinds: std::collections::BTreeSet<String> = f["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message"]["type"].as_str().unwrap().to_string())
        .collect();
    for k in [
        "human",
        "system",
        "ai",
        "AIMessageChunk",
        "tool",
        "remove",
        "chat",
        "function",
        "HumanMessageChunk",
        "ToolMessageChunk",
    ] {
        assert!(kinds.contains(k), "fixture lacks a `{k}` message");
    }
}

#[test]
fn chunk_dumps_in_the_merge_fixture_round_trip_too() {
    let f = fixture("langchain_chunk_merges.json");
    for seq in f["sequences"].as_array().unwrap() {
        let all = seq["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .chain([&seq["summed_chunk"], &seq["message"]]);
        for v in all {
            let m: Message = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(
                serde_json::to_string(&m).unwrap(),
                serde_json::to_string(v).unwrap(),
                "{}",
                seq["case"]
            );
        }
    }
}
