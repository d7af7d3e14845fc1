use crate::support::{ask, drain, lookup_tool, ollama};
use fawn_llm::{ChatRequest, LlmError};
use fawn_state::{Content, Message, merge_chunks};
use fawn_testkit::{Fault, MockLlm, MockToolCall, MockUsage, Turn};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn streams_ndjson_text_with_usage() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::text("Hello from Ollama")
            .with_chunk_delay(Duration::from_millis(20))
            .with_usage(MockUsage {
                prompt_tokens: 15,
                completion_tokens: 4,
                cached_tokens: None,
                reasoning_tokens: None,
            }),
    );
    let m = ollama(&mock, json!({}));
    assert_eq!(m.model.info().provider, "ollama");
    let started = Instant::now();
    let (chunks, err) = drain(&m.model, ask("hi")).await;
    assert!(err.is_none(), "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(40));
    assert!(chunks.len() >= 4, "{}", chunks.len());
    assert_eq!(
        chunks.last().unwrap().chunk_position.as_deref(),
        Some("last")
    );
    let msg = merge_chunks(&chunks);
    assert_eq!(msg.content, Content::Text("Hello from Ollama".into()));
    assert_eq!(msg.response_metadata["finish_reason"], "stop");
    assert_eq!(msg.response_metadata["model_name"], "qwen3:8b");
    let u = msg.usage_metadata.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.total_tokens),
        (15, 4, 19)
    );

    let r = mock.last_request().unwrap();
    assert_eq!(r.path, "/api/chat");
    assert!(r.header("authorization").is_none(), "no key, no header");
    assert_eq!(
        r.json().clone(),
        json!({"model": "qwen3:8b", "stream": true, "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "hi"}
        ]})
    );
}

#[tokio::test]
async fn tool_call_round_trip_with_thinking() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::tool_calls([
            MockToolCall::new("lookup", json!({"key": "a"})),
            MockToolCall::new("lookup", json!({"key": "b"})),
        ])
        .with_reasoning("Both, then."),
    );
    mock.push(Turn::text("a and b"));
    let m = ollama(
        &mock,
        json!({"supports_thinking": true, "reasoning": true, "num_predict": 4096,
               "temperature": 0.7, "num_ctx": 32768, "keep_alive": "10m",
               "context_window": 32768, "validate_model_on_init": true}),
    );
    let mut req = ChatRequest {
        thinking_enabled: true,
        tools: vec![lookup_tool()].into(),
        ..ask("a and b?")
    };
    let first = m.model.invoke(req.clone()).await.unwrap();
    let b = mock.last_request().unwrap().json().clone();
    assert_eq!(b["think"], true);
    assert_eq!(b["keep_alive"], "10m");
    assert_eq!(
        b["options"],
        json!({"num_predict": 4096, "temperature": 0.7, "num_ctx": 32768})
    );
    assert_eq!(b["tools"][0]["type"], "function");
    assert_eq!(b["tools"][0]["function"]["name"], "lookup");
    assert_eq!(
        b["tools"][0]["function"]["parameters"]["additionalProperties"], false,
        "Ollama takes the schema as it is"
    );
    assert_eq!(first.additional_kwargs["reasoning_content"], "Both, then.");
    assert_eq!(first.tool_calls.len(), 2);
    assert_eq!(first.tool_calls[1].args["key"], "b");
    let ids: Vec<String> = first
        .tool_calls
        .iter()
        .map(|t| t.id.clone().unwrap())
        .collect();
    assert_ne!(ids[0], ids[1]);
    assert_eq!(first.response_metadata["finish_reason"], "tool_calls");

    req.messages
        .push(Message::from_value(first.to_value()).unwrap());
    req.messages
        .push(Message::tool("A", ids[0].clone(), Some("lookup".into())));
    req.messages.push(Message::tool("B", ids[1].clone(), None));
    let answer = m.model.invoke(req).await.unwrap();
    assert_eq!(answer.text(), "a and b");
    let msgs = mock.last_request().unwrap().messages().to_vec();
    assert_eq!(
        msgs[2],
        json!({"role": "assistant", "content": "", "thinking": "Both, then.", "tool_calls": [
            {"function": {"name": "lookup", "arguments": {"key": "a"}}},
            {"function": {"name": "lookup", "arguments": {"key": "b"}}},
        ]})
    );
    assert_eq!(
        msgs[3],
        json!({"role": "tool", "content": "A", "tool_name": "lookup"})
    );
    assert_eq!(
        msgs[4],
        json!({"role": "tool", "content": "B", "tool_name": "lookup"})
    );
}

#[tokio::test]
async fn think_follows_the_thinking_toggle_and_options_map() {
    let mock = MockLlm::start().await.unwrap();
    mock.push_all([
        Turn::text("1"),
        Turn::text("2"),
        Turn::text("3"),
        Turn::text("4"),
    ]);
    let m = ollama(
        &mock,
        json!({"supports_thinking": true, "reasoning": "high", "max_tokens": 300,
               "stop": ["</s>"], "top_k": 20, "format": "json", "api_key": "ol-key",
               "options": {"mirostat": 2}}),
    );
    m.model
        .invoke(ChatRequest {
            thinking_enabled: true,
            ..ask("q")
        })
        .await
        .unwrap();
    let r = mock.last_request().unwrap();
    assert_eq!(r.header("authorization"), Some("Bearer ol-key"));
    let b = r.json().clone();
    assert_eq!(b["think"], "high", "a level is kept");
    assert_eq!(b["format"], "json");
    assert_eq!(
        b["options"],
        json!({"num_predict": 300, "stop": ["</s>"], "top_k": 20, "mirostat": 2})
    );
    m.model.invoke(ask("q")).await.unwrap();
    assert_eq!(
        mock.last_request().unwrap().json()["think"],
        false,
        "thinking off"
    );
    // The request's cap and temperature win.
    m.model
        .invoke(ChatRequest {
            max_tokens: Some(50),
            temperature: Some(0.1),
            ..ask("q")
        })
        .await
        .unwrap();
    let o = mock.last_request().unwrap().json()["options"].clone();
    assert_eq!(
        (o["num_predict"].clone(), o["temperature"].clone()),
        (json!(50), json!(0.1))
    );
    // A model without supports_thinking: the configured value, unchanged.
    let m = ollama(&mock, json!({"reasoning": false}));
    m.model.invoke(ask("q")).await.unwrap();
    assert_eq!(mock.last_request().unwrap().json()["think"], false);
}

#[tokio::test]
async fn errors_are_classified_and_retried() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::ServerError));
    mock.push(Turn::fault(Fault::RateLimit {
        retry_after_secs: Some(0),
    }));
    mock.push(Turn::text("ok"));
    mock.push(Turn::fault(Fault::Status {
        status: 404,
        body: json!({"error": "model \"nope\" not found, try pulling it first"}),
        retry_after_secs: None,
    }));
    mock.push(Turn::fault(Fault::Unauthorized));
    let m = ollama(&mock, json!({}));
    assert_eq!(m.model.invoke(ask("q")).await.unwrap().text(), "ok");
    let kinds: Vec<&str> = m.retries().iter().map(|r| r.error.kind()).collect();
    assert_eq!(kinds, ["server", "rate_limit"]);
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(
        matches!(err, LlmError::BadRequest { status: 404, ref message } if message.contains("try pulling")),
        "{err:?}"
    );
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(matches!(err, LlmError::Auth { status: 401, .. }), "{err:?}");
    assert_eq!(mock.chat_requests().len(), 5);
}

#[tokio::test]
async fn broken_streams_and_cancellation() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("a b c d").with_fault(Fault::DropConnection { after_chunks: 2 }));
    mock.push(Turn::text("a b c d").with_fault(Fault::MalformedChunk { after_chunks: 2 }));
    let m = ollama(&mock, json!({"max_retries": 0}));
    let (chunks, err) = drain(&m.model, ask("q")).await;
    assert_eq!(chunks.len(), 2);
    assert!(matches!(err, Some(LlmError::Connection { .. })), "{err:?}");
    let (chunks, err) = drain(&m.model, ask("q")).await;
    assert_eq!(chunks.len(), 2);
    assert!(matches!(err, Some(LlmError::Malformed { .. })), "{err:?}");

    mock.push(
        Turn::text("one two three four five six").with_chunk_delay(Duration::from_millis(200)),
    );
    let mut stream = m.model.stream(ask("q")).await.unwrap();
    use futures::StreamExt;
    assert!(stream.next().await.unwrap().is_ok());
    drop(stream);
    assert!(
        mock.wait_until(Duration::from_secs(3), |m| m.streams_aborted() == 1)
            .await
    );
}

#[tokio::test]
async fn non_streaming_chat() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::tool_call("lookup", json!({"key": "x"})).with_text("calling"));
    let m = ollama(&mock, json!({"streaming": false}));
    let mut req = ask("q");
    req.tools = vec![lookup_tool()].into();
    let (chunks, err) = drain(&m.model, req).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(chunks.len(), 1);
    let msg = merge_chunks(&chunks);
    assert_eq!(msg.text(), "calling");
    assert_eq!(msg.tool_calls[0].args["key"], "x");
    assert_eq!(mock.last_request().unwrap().json()["stream"], false);
}
