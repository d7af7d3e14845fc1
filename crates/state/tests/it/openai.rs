//! OpenAI-style input is accepted and normalised as langchain-core's `convert_to_messages`
//! does; bad input is a `MessageError` naming the field, never a panic.

use crate::fixture;
use fawn_state::{Message, MessageError, StateUpdate, messages_from_value};
use serde_json::{Value, json};

#[test]
fn openai_style_dicts_normalise_like_langchain() {
    let f = fixture("langchain_openai_inputs.json");
    assert_eq!(f["langchain_core_version"], "1.8.2");
    let mut failures = Vec::new();
    for item in f["inputs"].as_array().unwrap() {
        let m = match Message::from_value(item["input"].clone()) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{}: {e}", item["input"]));
                continue;
            }
        };
        let got = serde_json::to_string(&m).unwrap();
        let want = serde_json::to_string(&item["message"]).unwrap();
        if got != want {
            failures.push(format!("{}:\n  want {want}\n  got  {got}", item["input"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn field_of(e: &MessageError) -> Option<&'static str> {
    match e {
        MessageError::BadField { field, .. } => Some(field),
        _ => None,
    }
}

#[test]
fn bad_input_names_the_field() {
    let cases: Vec<(Value, &str)> = vec![
        (json!({"role": "user", "content": 5}), "content"),
        (json!({"role": "user", "content": true}), "content"),
        (json!({"type": 3, "content": "x"}), "type"),
        (
            json!({"role": "user", "content": "x", "id": {"a": 1}}),
            "id",
        ),
        (json!({"role": "user", "content": "x", "name": []}), "name"),
        (
            json!({"role": "user", "content": "x", "additional_kwargs": "s"}),
            "additional_kwargs",
        ),
        (
            json!({"role": "user", "content": "x", "response_metadata": [1]}),
            "response_metadata",
        ),
        (
            json!({"role": "assistant", "content": "", "tool_calls": "nope"}),
            "tool_calls",
        ),
        (
            json!({"role": "assistant", "content": "", "tool_calls": [1]}),
            "tool_calls",
        ),
        (
            json!({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": 1, "arguments": "{}"}}]}),
            "tool_calls",
        ),
        (
            json!({"type": "ai", "content": "", "invalid_tool_calls": {}}),
            "invalid_tool_calls",
        ),
        (
            json!({"type": "ai", "content": "", "usage_metadata": "many"}),
            "usage_metadata",
        ),
        (
            json!({"type": "ai", "content": "", "usage_metadata": {"input_tokens": "1"}}),
            "usage_metadata",
        ),
        (
            json!({"type": "AIMessageChunk", "content": "", "tool_call_chunks": [{"index": "x"}]}),
            "tool_call_chunks",
        ),
        (
            json!({"role": "tool", "content": "x", "tool_call_id": [7]}),
            "tool_call_id",
        ),
        (
            json!({"role": "tool", "content": "x", "tool_call_id": "c", "status": "weird"}),
            "status",
        ),
        (json!({"type": "chat", "content": "x", "role": 1}), "role"),
    ];
    for (input, field) in cases {
        let err = Message::from_value(input.clone()).expect_err(&input.to_string());
        assert_eq!(field_of(&err), Some(field), "{input}: {err}");
        assert!(err.to_string().contains(field), "{err}");
    }
}

#[test]
fn not_a_message_at_all() {
    assert!(matches!(
        Message::from_value(json!(5)),
        Err(MessageError::NotAnObject(_))
    ));
    assert!(matches!(
        Message::from_value(json!({"content": "x"})),
        Err(MessageError::MissingType)
    ));
    assert!(messages_from_value(json!([{"role": "user", "content": "ok"}, 7])).is_err());
    let err =
        StateUpdate::from_value(json!({"messages": [{"role": "user", "content": 1}]})).unwrap_err();
    assert!(err.to_string().contains("content"), "{err}");
}

#[test]
fn openai_tool_call_with_bad_arguments_becomes_invalid() {
    let m = Message::from_value(json!({
        "role": "assistant", "content": null,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{oops"}},
            {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "[1]"}},
            {"id": "c3", "type": "function", "function": {"name": "ls", "arguments": {"path": "/"}}},
        ]
    }))
    .unwrap();
    assert_eq!(m.tool_calls.len(), 1);
    assert_eq!(m.tool_calls[0].id.as_deref(), Some("c3"));
    assert_eq!(m.invalid_tool_calls.len(), 2);
    assert_eq!(m.invalid_tool_calls[0].args.as_deref(), Some("{oops"));
    assert!(m.invalid_tool_calls[0].error.is_some());
}

#[test]
fn bare_strings_and_lists_are_human_messages() {
    let ms = messages_from_value(json!("hi")).unwrap();
    assert_eq!(ms.len(), 1);
    assert_eq!(ms[0].text(), "hi");
    assert_eq!(ms[0].kind.as_str(), "human");
    let ms = messages_from_value(json!([{"role": "user", "content": "a"}, "b"])).unwrap();
    assert_eq!(ms.len(), 2);
}

#[test]
fn langchain_constructor_envelope_is_accepted() {
    let m = Message::from_value(json!({
        "lc": 1, "type": "constructor",
        "id": ["langchain", "schema", "messages", "HumanMessage"],
        "kwargs": {"content": "hello", "id": "x1"}
    }))
    .unwrap();
    assert_eq!(m.kind.as_str(), "human");
    assert_eq!(m.text(), "hello");
    assert_eq!(m.id.as_deref(), Some("x1"));
}

/// Arbitrary JSON never panics the parser.
mod fuzz {
    use fawn_state::Message;
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-z_]{0,6}".prop_map(Value::String),
            prop_oneof![
                Just("human"),
                Just("ai"),
                Just("tool"),
                Just("user"),
                Just("assistant"),
                Just("AIMessageChunk"),
                Just("remove"),
                Just("chat"),
                Just("system")
            ]
            .prop_map(|s| Value::String(s.to_string())),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(
                    (
                        prop_oneof![
                            Just("type"),
                            Just("role"),
                            Just("content"),
                            Just("id"),
                            Just("name"),
                            Just("tool_calls"),
                            Just("invalid_tool_calls"),
                            Just("tool_call_chunks"),
                            Just("usage_metadata"),
                            Just("args"),
                            Just("function"),
                            Just("arguments"),
                            Just("index"),
                            Just("additional_kwargs"),
                            Just("status"),
                            Just("artifact"),
                            Just("tool_call_id"),
                            Just("other")
                        ],
                        inner
                    ),
                    0..6
                )
                .prop_map(|kv| {
                    let mut m = Map::new();
                    for (k, v) in kv {
                        m.insert(k.to_string(), v);
                    }
                    Value::Object(m)
                }),
            ]
        })
    }

    proptest! {
        #[test]
        fn parsing_never_panics_and_ok_results_round_trip(v in json()) {
            if let Ok(m) = Message::from_value(v) {
                let again = Message::from_value(m.to_value()).unwrap();
                prop_assert_eq!(again.to_value(), m.to_value());
            }
        }
    }
}
