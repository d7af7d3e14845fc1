use crate::support::{ask, claude, drain};
use fawn_llm::{ChatRequest, LlmError, ToolSpec};
use fawn_state::{Content, Message, merge_chunks};
use fawn_testkit::{Fault, MockLlm, MockToolCall, MockUsage, Turn};
use serde_json::json;

#[tokio::test]
async fn streams_text_with_usage_and_sends_anthropic_headers() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("Hello from Claude").with_usage(MockUsage {
        prompt_tokens: 20,
        completion_tokens: 4,
        cached_tokens: Some(6),
        reasoning_tokens: None,
    }));
    let m = claude(&mock, json!({}));
    let (chunks, err) = drain(&m.model, ask("hi")).await;
    assert!(err.is_none(), "{err:?}");
    assert!(chunks.len() >= 3);
    let msg = merge_chunks(&chunks);
    assert_eq!(msg.content, Content::Text("Hello from Claude".into()));
    assert_eq!(msg.response_metadata["finish_reason"], "stop");
    assert_eq!(msg.response_metadata["stop_reason"], "end_turn");
    assert_eq!(msg.response_metadata["model_provider"], "anthropic");
    let u = msg.usage_metadata.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens),
        (26, 4),
        "cache reads count as input"
    );
    assert_eq!(u.input_token_details.unwrap()["cache_read"], 6);

    let r = mock.last_request().unwrap();
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some("ant-key"));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert!(r.header("authorization").is_none());
    let b = r.json();
    assert_eq!(b["system"], "You are terse.");
    assert_eq!(
        b["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    );
    assert_eq!(b["max_tokens"], 4096);
    assert_eq!(b["stream"], true);
}

#[tokio::test]
async fn thinking_and_tool_use_round_trip_with_signature() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::tool_calls([MockToolCall::new("lookup", json!({"key": "v"})).with_id("toolu_1")])
            .with_reasoning("I need to look this up.")
            .with_text("Looking.")
            .with_thinking_signature("sig-abc"),
    );
    mock.push(Turn::text("It is v."));
    let m = claude(
        &mock,
        json!({"supports_thinking": true, "max_tokens": 8000, "temperature": 0.5,
               "thinking": {"type": "enabled", "budget_tokens": 2048}}),
    );
    let mut req = ChatRequest {
        thinking_enabled: true,
        tools: vec![ToolSpec {
            name: "lookup".into(),
            description: "Look up a key".into(),
            parameters: json!({"type": "object", "properties": {"key": {"type": "string"}}}).into(),
        }]
        .into(),
        tool_choice: Some(json!("auto")),
        ..ask("what is key?")
    };
    let first = m.model.invoke(req.clone()).await.unwrap();
    let b = mock.last_request().unwrap().json().clone();
    assert_eq!(
        b["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert!(
        b.get("temperature").is_none(),
        "temperature is dropped with thinking on"
    );
    assert_eq!(b["max_tokens"], 8000);
    assert_eq!(
        b["tools"][0]["input_schema"]["properties"]["key"]["type"],
        "string"
    );
    assert_eq!(b["tool_choice"], json!({"type": "auto"}));

    let Content::Blocks(blocks) = &first.content else {
        panic!("blocks expected: {:?}", first.content)
    };
    assert_eq!(blocks[0]["type"], "thinking");
    assert_eq!(blocks[0]["thinking"], "I need to look this up.");
    assert_eq!(blocks[0]["signature"], "sig-abc");
    assert_eq!(first.text(), "Looking.");
    assert_eq!(first.tool_calls[0].name, "lookup");
    assert_eq!(first.tool_calls[0].args["key"], "v");
    assert_eq!(first.response_metadata["finish_reason"], "tool_calls");

    req.messages.push(first);
    req.messages
        .push(Message::tool("v", "toolu_1", Some("lookup".into())));
    let answer = m.model.invoke(req).await.unwrap();
    assert_eq!(answer.text(), "It is v.");
    let msgs = mock.last_request().unwrap().messages().to_vec();
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(
        msgs[1]["content"],
        json!([
            {"type": "thinking", "thinking": "I need to look this up.", "signature": "sig-abc"},
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"key": "v"}},
        ])
    );
    assert_eq!(
        msgs[2],
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "v"}]})
    );
    // Thinking off: the shortcut's type is flipped to disabled.
    let off = m.model.invoke(ask("again")).await;
    assert!(off.is_ok());
    assert_eq!(
        mock.last_request().unwrap().json()["thinking"],
        json!({"type": "disabled"})
    );
}

#[tokio::test]
async fn errors_are_classified_and_retried_like_openai() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::RateLimit {
        retry_after_secs: Some(0),
    }));
    mock.push(Turn::text("ok"));
    mock.push(Turn::fault(Fault::InsufficientQuota));
    mock.push(Turn::fault(Fault::Unauthorized));
    let m = claude(&mock, json!({}));
    assert_eq!(m.model.invoke(ask("q")).await.unwrap().text(), "ok");
    assert_eq!(mock.chat_requests().len(), 2);
    assert_eq!(m.retries()[0].error.kind(), "rate_limit");
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(matches!(err, LlmError::Quota { .. }), "{err:?}");
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(matches!(err, LlmError::Auth { status: 401, .. }), "{err:?}");
    assert_eq!(mock.chat_requests().len(), 4);
    assert_eq!(m.retries().len(), 1);
}

#[tokio::test]
async fn broken_streams() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("a b c d").with_fault(Fault::DropConnection { after_chunks: 5 }));
    mock.push(Turn::text("a b c d").with_fault(Fault::MalformedChunk { after_chunks: 5 }));
    let m = claude(&mock, json!({"max_retries": 0}));
    let (chunks, err) = drain(&m.model, ask("q")).await;
    assert!(!chunks.is_empty());
    assert!(matches!(err, Some(LlmError::Connection { .. })), "{err:?}");
    let (chunks, err) = drain(&m.model, ask("q")).await;
    assert!(!chunks.is_empty());
    assert!(matches!(err, Some(LlmError::Malformed { .. })), "{err:?}");
}

#[tokio::test]
async fn non_streaming_messages() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::tool_call("f", json!({"x": 1})).with_text("calling f"));
    let m = claude(&mock, json!({"streaming": false}));
    let mut req = ask("q");
    req.tools = vec![ToolSpec {
        name: "f".into(),
        description: String::new(),
        parameters: json!({"type": "object"}).into(),
    }]
    .into();
    let (chunks, err) = drain(&m.model, req).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(chunks.len(), 1);
    let msg = merge_chunks(&chunks);
    assert_eq!(msg.text(), "calling f");
    assert_eq!(msg.tool_calls[0].args["x"], 1);
    assert_eq!(mock.last_request().unwrap().json()["stream"], false);
}
