//! `Serialize for Message` writes the message directly; its output is byte for byte what
//! serializing `Message::to_map()` gives, key order and `extra` replacement included.

use crate::fixture;
use fawn_state::{
    Content, InvalidToolCall, Message, MessageKind, ToolCall, ToolCallChunk, UsageMetadata,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// The direct serialization of `m` and the one through `to_map`, as JSON text, compact and
/// pretty, and through `serde_json::to_value`.
fn assert_same_as_to_map(m: &Message) -> Result<(), String> {
    let want = serde_json::to_string(&Value::Object(m.to_map())).unwrap();
    let got = serde_json::to_string(m).unwrap();
    if got != want {
        return Err(format!("{m:?}:\n  to_map {want}\n  direct {got}"));
    }
    let want_pretty = serde_json::to_string_pretty(&Value::Object(m.to_map())).unwrap();
    let got_pretty = serde_json::to_string_pretty(m).unwrap();
    if got_pretty != want_pretty {
        return Err(format!("{m:?}: pretty output differs"));
    }
    // `Value` equality ignores key order, so compare the value's text.
    let via_value = serde_json::to_string(&serde_json::to_value(m).unwrap()).unwrap();
    if via_value != want {
        return Err(format!("{m:?}:\n  to_map   {want}\n  to_value {via_value}"));
    }
    Ok(())
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

fn usage(details: bool) -> UsageMetadata {
    let mut u = UsageMetadata::new(120, 30);
    if details {
        u.input_token_details = Some(json!({"audio": 0, "cache_read": 100}));
        u.output_token_details = Some(json!({"reasoning": 12}));
    }
    u
}

/// Every kind, with and without the optional parts, and `extra` keys both new and colliding
/// with known fields (at the message and at every nested level).
fn handmade() -> Vec<Message> {
    let mut out = vec![
        Message::human("hi"),
        Message::human("hi").with_id("h1").with_name("alice"),
        Message::human(Content::Blocks(vec![
            json!({"type": "text", "text": "look"}),
            json!({"type": "image_url", "image_url": {"url": "data:,"}}),
            json!("bare"),
            json!(1.5),
        ])),
        Message::system("be brief").with_id("s1"),
        Message::ai(""),
        Message::ai("done").with_id("a1").with_name("bot"),
        Message::ai_chunk("par"),
        Message::tool("42", "call_1", None),
        Message::tool("42", "call_1", Some("calc".into()))
            .with_id("t1")
            .with_status_error(),
        Message::remove("h1"),
        Message::remove(fawn_state::REMOVE_ALL_MESSAGES),
    ];

    // AI with tool calls (args, nested args, no id, extra), invalid calls, usage.
    let mut ai = Message::ai("calling").with_id("a2");
    ai.tool_calls = vec![
        ToolCall::new(
            "search",
            json!({"q": "rust", "opts": {"n": 3, "x": [1, -2]}}),
            "c1",
        ),
        ToolCall::new("noargs", Value::Null, "c2"),
        ToolCall {
            name: "weird".into(),
            args: Map::new(),
            id: None,
            extra: obj(json!({"id": "replaced", "type": "other", "z": true, "name": 5})),
        },
    ];
    ai.invalid_tool_calls = vec![
        InvalidToolCall {
            name: Some("bad".into()),
            args: Some("{oops".into()),
            id: Some("c3".into()),
            error: Some("parse".into()),
            extra: Map::new(),
        },
        InvalidToolCall {
            name: None,
            args: None,
            id: None,
            error: None,
            extra: obj(json!({"error": {"deep": 1}, "type": null, "more": "x"})),
        },
    ];
    ai.usage_metadata = Some(usage(false));
    ai.additional_kwargs = obj(json!({"refusal": null, "reasoning_content": "hm"}));
    ai.response_metadata = obj(json!({"finish_reason": "tool_calls", "model_name": "m"}));
    out.push(ai.clone());

    let mut ai_details = ai.clone();
    ai_details.usage_metadata = Some(usage(true));
    out.push(ai_details);

    // Usage with only one of the details, with extra keys, with a colliding extra key,
    // and with negative counts (a `Value` writes those as `i64`, the others as `u64`).
    let mut u = usage(false);
    u.output_token_details = Some(json!({"audio": 1}));
    u.extra = obj(json!({"cost": 0.25, "total_tokens": 999, "input_token_details": {"a": 1}}));
    let mut ai_u = Message::ai("u");
    ai_u.usage_metadata = Some(u);
    out.push(ai_u);
    let mut u = usage(true);
    u.input_tokens = -5;
    u.extra = obj(json!({"output_token_details": "replaced", "zz": -1}));
    let mut ai_u = Message::ai("u");
    ai_u.usage_metadata = Some(u);
    out.push(ai_u);

    // AI chunk: invalid calls (chunk key order), tool call chunks, position, usage.
    let mut chunk = Message::ai_chunk("").with_id("run-1");
    chunk.tool_calls = vec![ToolCall::new("f", json!({"a": 1}), "c1")];
    chunk.invalid_tool_calls = ai.invalid_tool_calls.clone();
    chunk.tool_call_chunks = vec![
        ToolCallChunk {
            name: Some("f".into()),
            args: Some("{\"a\":".into()),
            id: Some("c1".into()),
            index: Some(0),
            extra: Map::new(),
        },
        ToolCallChunk::default(),
        ToolCallChunk {
            index: Some(-1),
            extra: obj(json!({"index": 7, "args": null, "q": [1]})),
            ..ToolCallChunk::default()
        },
    ];
    chunk.chunk_position = Some("last".into());
    chunk.usage_metadata = Some(usage(true));
    out.push(chunk);

    // Tool messages: artifact and status present and absent.
    let mut tool = Message::tool(
        Content::Blocks(vec![json!({"type": "text", "text": "ok"})]),
        "call_2",
        Some("files".into()),
    );
    tool.artifact = json!({"paths": ["/a", "/b"]});
    out.push(tool);
    let mut tool = Message::tool("x", "call_3", None);
    tool.status = None;
    tool.tool_call_id = None;
    out.push(tool);

    // Chat with and without a role; function; other kinds.
    let mut chat = Message::human("c");
    chat.kind = MessageKind::Chat;
    chat.role = Some("critic".into());
    out.push(chat.clone());
    chat.role = None;
    out.push(chat);
    let mut function = Message::human("f").with_name("fn");
    function.kind = MessageKind::Function;
    out.push(function);
    let mut other = Message::human("o");
    other.kind = MessageKind::Other("HumanMessageChunk".into());
    out.push(other);

    // `extra`: new keys only, then keys equal to known fields (replaced in place), for
    // several kinds, including keys that are only known for another kind.
    let mut m = Message::human("hi").with_id("h9");
    m.extra = obj(json!({"example": false, "zeta": 1, "alpha": 2}));
    out.push(m);
    let mut m = Message::human("hi").with_name("n");
    m.extra = obj(json!({"new": 1, "name": "from-extra", "content": ["x"], "tool_calls": []}));
    out.push(m);
    let mut m = ai.clone();
    m.extra = obj(json!({"usage_metadata": {"x": 1}, "type": "ai", "id": null, "later": 1}));
    out.push(m);
    let mut m = Message::ai_chunk("c");
    m.extra = obj(json!({"chunk_position": "last", "tool_call_chunks": 3, "status": "x"}));
    out.push(m);
    let mut m = Message::tool("r", "c9", None);
    m.extra = obj(json!({"status": "error", "artifact": [1], "role": "r"}));
    out.push(m);
    let mut m = Message::human("c");
    m.kind = MessageKind::Chat;
    m.extra = obj(json!({"role": "judge", "additional_kwargs": {"k": 1}}));
    out.push(m);
    out
}

#[test]
fn direct_serialization_matches_to_map_for_handmade_messages() {
    let msgs = handmade();
    let failures: Vec<String> = msgs
        .iter()
        .filter_map(|m| assert_same_as_to_map(m).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // A list serializes as its messages do (what a `values` event carries).
    let want: Vec<Value> = msgs.iter().map(|m| Value::Object(m.to_map())).collect();
    assert_eq!(
        serde_json::to_string(&msgs).unwrap(),
        serde_json::to_string(&want).unwrap()
    );
}

#[test]
fn extra_keys_replace_known_fields_in_place_and_new_ones_come_last() {
    let mut m = Message::human("hi").with_id("h1");
    m.extra = obj(json!({"zz": 1, "name": "n", "content": "over"}));
    assert_eq!(
        serde_json::to_string(&m).unwrap(),
        r#"{"content":"over","additional_kwargs":{},"response_metadata":{},"type":"human","name":"n","id":"h1","zz":1}"#
    );
}

#[test]
fn direct_serialization_matches_to_map_for_every_fixture_message() {
    let mut all = Vec::new();
    let f = fixture("langchain_messages.json");
    for item in f["messages"].as_array().unwrap() {
        all.push(item["message"].clone());
    }
    let f = fixture("langchain_chunk_merges.json");
    for seq in f["sequences"].as_array().unwrap() {
        all.extend(seq["chunks"].as_array().unwrap().iter().cloned());
        all.push(seq["summed_chunk"].clone());
        all.push(seq["message"].clone());
    }
    let f = fixture("langchain_openai_inputs.json");
    for item in f["inputs"].as_array().unwrap() {
        all.push(item["input"].clone());
        all.push(item["message"].clone());
    }
    assert!(all.len() > 50);
    let mut failures = Vec::new();
    for v in all {
        let m = Message::from_value(v).unwrap();
        if let Err(e) = assert_same_as_to_map(&m) {
            failures.push(e);
        }
        // And the complete message a chunk stands for.
        if let Err(e) = assert_same_as_to_map(&m.to_message()) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// Random messages
// ---------------------------------------------------------------------------------------

/// Keys for `extra` maps: new ones and ones equal to fields of messages, tool calls and usage.
const KEYS: [&str; 24] = [
    "content",
    "additional_kwargs",
    "type",
    "name",
    "id",
    "tool_calls",
    "invalid_tool_calls",
    "usage_metadata",
    "tool_call_chunks",
    "chunk_position",
    "tool_call_id",
    "artifact",
    "status",
    "role",
    "args",
    "error",
    "index",
    "input_tokens",
    "total_tokens",
    "input_token_details",
    "output_token_details",
    "alpha",
    "zeta",
    "x",
];

fn small_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-50..50i64).prop_map(Value::from),
        (-2.0..2.0f64).prop_map(Value::from),
        "[a-z\"\\\\é]{0,4}".prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec(("[a-c]", inner), 0..3)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn json_map() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec(("[a-d]{1,2}", small_json()), 0..3)
        .prop_map(|kv| kv.into_iter().collect())
}

fn extra() -> impl Strategy<Value = Map<String, Value>> {
    prop_oneof![
        2 => Just(Map::new()),
        1 => prop::collection::vec((prop::sample::select(&KEYS[..]), small_json()), 1..4)
            .prop_map(|kv| kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
    ]
}

fn opt_str() -> impl Strategy<Value = Option<String>> {
    prop::option::of("[a-z0-9_]{0,4}")
}

fn content() -> impl Strategy<Value = Content> {
    prop_oneof![
        "[a-z \n]{0,6}".prop_map(Content::Text),
        prop::collection::vec(small_json(), 0..3).prop_map(Content::Blocks),
    ]
}

fn tool_call() -> impl Strategy<Value = ToolCall> {
    ("[a-z]{0,4}", json_map(), opt_str(), extra()).prop_map(|(name, args, id, extra)| ToolCall {
        name,
        args,
        id,
        extra,
    })
}

fn invalid_tool_call() -> impl Strategy<Value = InvalidToolCall> {
    (opt_str(), opt_str(), opt_str(), opt_str(), extra()).prop_map(
        |(name, args, id, error, extra)| InvalidToolCall {
            name,
            args,
            id,
            error,
            extra,
        },
    )
}

fn tool_call_chunk() -> impl Strategy<Value = ToolCallChunk> {
    (
        opt_str(),
        opt_str(),
        opt_str(),
        prop::option::of(-2..4i64),
        extra(),
    )
        .prop_map(|(name, args, id, index, extra)| ToolCallChunk {
            name,
            args,
            id,
            index,
            extra,
        })
}

fn usage_metadata() -> impl Strategy<Value = UsageMetadata> {
    (
        (-3..2000i64, -3..2000i64, -3..4000i64),
        prop::option::of(small_json()),
        prop::option::of(small_json()),
        extra(),
    )
        .prop_map(
            |((i, o, t), input_details, output_details, extra)| UsageMetadata {
                input_tokens: i,
                output_tokens: o,
                total_tokens: t,
                input_token_details: input_details,
                output_token_details: output_details,
                extra,
            },
        )
}

fn kind() -> impl Strategy<Value = MessageKind> {
    prop::sample::select(vec![
        MessageKind::Human,
        MessageKind::Ai,
        MessageKind::AiChunk,
        MessageKind::Tool,
        MessageKind::System,
        MessageKind::Remove,
        MessageKind::Chat,
        MessageKind::Function,
        MessageKind::Other("HumanMessageChunk".into()),
        MessageKind::Other("custom".into()),
    ])
}

/// Any message, every field set at random whatever the kind (fields a kind does not write
/// must not leak into its output either).
fn message() -> impl Strategy<Value = Message> {
    let common = (
        kind(),
        content(),
        json_map(),
        json_map(),
        opt_str(),
        opt_str(),
        extra(),
    );
    let ai = (
        prop::collection::vec(tool_call(), 0..3),
        prop::collection::vec(invalid_tool_call(), 0..3),
        prop::option::of(usage_metadata()),
        prop::collection::vec(tool_call_chunk(), 0..3),
        opt_str(),
    );
    let rest = (
        opt_str(),
        small_json(),
        prop::option::of(prop::sample::select(vec!["success", "error", "odd"])),
        opt_str(),
    );
    (common, ai, rest).prop_map(
        |(
            (kind, content, additional_kwargs, response_metadata, name, id, extra),
            (tool_calls, invalid_tool_calls, usage_metadata, tool_call_chunks, chunk_position),
            (tool_call_id, artifact, status, role),
        )| Message {
            kind,
            content,
            additional_kwargs,
            response_metadata,
            name,
            id,
            tool_calls,
            invalid_tool_calls,
            usage_metadata,
            tool_call_chunks,
            chunk_position,
            tool_call_id,
            artifact,
            status: status.map(str::to_string),
            role,
            extra,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Direct serialization equals serializing `to_map()`, byte for byte.
    #[test]
    fn direct_serialization_matches_to_map(m in message()) {
        if let Err(e) = assert_same_as_to_map(&m) {
            prop_assert!(false, "{}", e);
        }
    }
}
