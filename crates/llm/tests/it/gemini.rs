use crate::support::{ask, drain, gemini, lookup_tool};
use fawn_llm::gemini::{CALL_SIGNATURES_KEY, PLACEHOLDER_SIGNATURE};
use fawn_llm::{ChatRequest, LlmError};
use fawn_state::{Content, Message, merge_chunks};
use fawn_testkit::{Chunking, Fault, MockLlm, MockToolCall, MockUsage, Turn};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn streams_text_with_usage_over_sse() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::text("Hello from Gemini")
            .with_chunk_delay(Duration::from_millis(20))
            .with_usage(MockUsage {
                prompt_tokens: 20,
                completion_tokens: 4,
                cached_tokens: Some(6),
                reasoning_tokens: None,
            }),
    );
    let m = gemini(&mock, json!({}));
    assert_eq!(m.model.info().provider, "google_genai");
    let started = Instant::now();
    let (chunks, err) = drain(&m.model, ask("hi")).await;
    assert!(err.is_none(), "{err:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(40),
        "chunks streamed with their delays"
    );
    assert!(chunks.len() >= 4, "{}", chunks.len());
    assert!(chunks.iter().all(|c| c.id == chunks[0].id));
    let msg = merge_chunks(&chunks);
    assert_eq!(msg.content, Content::Text("Hello from Gemini".into()));
    assert_eq!(msg.response_metadata["finish_reason"], "stop");
    assert_eq!(msg.response_metadata["stop_reason"], "STOP");
    assert_eq!(msg.response_metadata["model_provider"], "google_genai");
    assert_eq!(msg.response_metadata["model_name"], "gemini-2.5-flash");
    let u = msg.usage_metadata.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.total_tokens),
        (20, 4, 24)
    );
    assert_eq!(u.input_token_details.unwrap()["cache_read"], 6);

    let r = mock.last_request().unwrap();
    assert_eq!(
        r.path,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    );
    assert_eq!(r.query.as_deref(), Some("alt=sse"));
    assert_eq!(r.header("x-goog-api-key"), Some("g-key"));
    assert!(r.header("authorization").is_none());
    let b = r.json();
    assert_eq!(
        b["systemInstruction"],
        json!({"parts": [{"text": "You are terse."}]})
    );
    assert_eq!(
        b["contents"],
        json!([{"role": "user", "parts": [{"text": "hi"}]}])
    );
    assert!(
        b.get("generationConfig").is_none(),
        "nothing configured, nothing sent"
    );
    assert!(b.get("model").is_none() && b.get("stream").is_none());
}

#[tokio::test]
async fn tool_call_round_trip_replays_thought_signatures() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::tool_calls([
            MockToolCall::new("lookup", json!({"key": "a"})),
            MockToolCall::new("lookup", json!({"key": "b"})),
        ])
        .with_reasoning("I need to look both up.")
        .with_text("Looking.")
        .with_thinking_signature("c2lnLWFiYw=="),
    );
    mock.push(Turn::text("a and b").with_thinking_signature("c2lnLWVuZA=="));
    let m = gemini(&mock, json!({"supports_thinking": true}));
    let mut req = ChatRequest {
        thinking_enabled: true,
        tools: vec![lookup_tool()].into(),
        tool_choice: Some(json!("auto")),
        ..ask("what are a and b?")
    };
    let first = m.model.invoke(req.clone()).await.unwrap();
    let b = mock.last_request().unwrap().json().clone();
    assert_eq!(
        b["tools"],
        json!([{"functionDeclarations": [{"name": "lookup", "description": "Look up a key",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                           "required": ["key"]}}]}]),
        "additionalProperties is not sent"
    );
    assert_eq!(
        b["toolConfig"],
        json!({"functionCallingConfig": {"mode": "AUTO"}})
    );
    assert_eq!(
        b["generationConfig"]["thinkingConfig"],
        json!({"includeThoughts": true}),
        "thinking on shows the thoughts"
    );

    let Content::Blocks(blocks) = &first.content else {
        panic!("blocks expected: {:?}", first.content)
    };
    assert_eq!(blocks[0]["type"], "thinking");
    assert_eq!(blocks[0]["thinking"], "I need to look both up.");
    assert_eq!(first.text(), "Looking.");
    assert_eq!(first.tool_calls.len(), 2);
    assert_eq!(first.tool_calls[1].args["key"], "b");
    let ids: Vec<String> = first
        .tool_calls
        .iter()
        .map(|t| t.id.clone().unwrap())
        .collect();
    assert_ne!(ids[0], ids[1], "made-up ids are distinct");
    assert_eq!(
        first.additional_kwargs[CALL_SIGNATURES_KEY],
        json!({ids[0].clone(): "c2lnLWFiYw=="})
    );
    assert_eq!(first.response_metadata["finish_reason"], "tool_calls");

    // The answer survives a trip through its serialized form (a checkpoint).
    let stored = Message::from_value(first.to_value()).unwrap();
    req.messages.push(stored);
    req.messages
        .push(Message::tool("A", ids[0].clone(), Some("lookup".into())));
    req.messages.push(Message::tool("B", ids[1].clone(), None));
    let answer = m.model.invoke(req.clone()).await.unwrap();
    assert_eq!(answer.text(), "a and b");
    let Content::Blocks(blocks) = &answer.content else {
        panic!("{:?}", answer.content)
    };
    assert_eq!(blocks.last().unwrap()["signature"], "c2lnLWVuZA==");
    let contents = mock.last_request().unwrap().json()["contents"].clone();
    assert_eq!(contents.as_array().unwrap().len(), 3);
    assert_eq!(
        contents[1],
        json!({"role": "model", "parts": [
            {"text": "Looking."},
            {"functionCall": {"name": "lookup", "args": {"key": "a"}}, "thoughtSignature": "c2lnLWFiYw=="},
            {"functionCall": {"name": "lookup", "args": {"key": "b"}}},
        ]}),
        "unsigned thoughts stay home; the signature goes back on its call; made-up ids are not sent"
    );
    assert_eq!(
        contents[2],
        json!({"role": "user", "parts": [
            {"functionResponse": {"name": "lookup", "response": {"output": "A"}}},
            {"functionResponse": {"name": "lookup", "response": {"output": "B"}}},
        ]}),
        "parallel results share one content; a missing name comes from the call"
    );

    // The signed text of the second answer goes back too.
    req.messages.push(answer);
    req.messages.push(Message::human("thanks"));
    mock.push(Turn::text("welcome"));
    m.model.invoke(req).await.unwrap();
    let contents = mock.last_request().unwrap().json()["contents"].clone();
    assert_eq!(
        contents[3],
        json!({"role": "model", "parts": [{"text": "a and b", "thoughtSignature": "c2lnLWVuZA=="}]})
    );
}

#[tokio::test]
async fn gemini_3_gets_a_placeholder_for_calls_it_did_not_sign() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("ok"));
    let m = gemini(&mock, json!({"model": "gemini-3-pro-preview"}));
    let call = Message::ai("").with_tool_calls(vec![fawn_state::ToolCall::new(
        "lookup",
        json!({"key": "a"}),
        "call_from_elsewhere",
    )]);
    let mut req = ask("q");
    req.tools = vec![lookup_tool()].into();
    req.messages.push(call);
    req.messages.push(Message::tool(
        "A",
        "call_from_elsewhere",
        Some("lookup".into()),
    ));
    m.model.invoke(req).await.unwrap();
    let r = mock.last_request().unwrap();
    assert_eq!(
        r.path,
        "/v1beta/models/gemini-3-pro-preview:streamGenerateContent"
    );
    let contents = r.json()["contents"].clone();
    assert_eq!(
        contents[1]["parts"][0]["thoughtSignature"],
        PLACEHOLDER_SIGNATURE
    );
}

#[tokio::test]
async fn options_map_to_generation_config() {
    let mock = MockLlm::start().await.unwrap();
    mock.push_all([Turn::text("1"), Turn::text("2"), Turn::text("3")]);
    let m = gemini(
        &mock,
        json!({
            "temperature": 0.3, "top_p": 0.9, "top_k": 40, "max_tokens": 8192,
            "stop": "END", "seed": 7, "response_mime_type": "text/plain",
            "thinking_budget": 1024, "include_thoughts": false,
            "safety_settings": {"HARM_CATEGORY_HARASSMENT": "BLOCK_NONE"},
            "gemini_api_key": "from-config", "transport": "rest", "unknown_option": 1,
            "supports_thinking": true
        }),
    );
    m.model.invoke(ask("q")).await.unwrap();
    let r = mock.last_request().unwrap();
    assert_eq!(r.header("x-goog-api-key"), Some("g-key"), "api_key wins");
    let b = r.json().clone();
    assert_eq!(
        b["generationConfig"],
        json!({"temperature": 0.3, "topP": 0.9, "topK": 40, "maxOutputTokens": 8192,
               "stopSequences": ["END"], "seed": 7, "responseMimeType": "text/plain",
               "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": false}})
    );
    assert_eq!(
        b["safetySettings"],
        json!([{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}])
    );
    let keys: Vec<&String> = b.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "contents",
            "systemInstruction",
            "generationConfig",
            "safetySettings"
        ],
        "client keys and unknown options are not sent: Gemini refuses unknown fields"
    );

    // The request's own settings win; a thinking level replaces the budget.
    let req = ChatRequest {
        max_tokens: Some(100),
        temperature: Some(0.0),
        extra: serde_json::from_value(json!({"thinking_level": "low"})).unwrap(),
        ..ask("q")
    };
    m.model.invoke(req).await.unwrap();
    let g = mock.last_request().unwrap().json()["generationConfig"].clone();
    assert_eq!(g["maxOutputTokens"], 100);
    assert_eq!(g["temperature"], 0.0);
    assert_eq!(
        g["thinkingConfig"],
        json!({"includeThoughts": false, "thinkingLevel": "low"})
    );

    // langchain's `max_output_tokens`, the key from `gemini_api_key`, the `thinking:` shortcut.
    let m = gemini(
        &mock,
        json!({"api_key": null, "max_output_tokens": 512, "gemini_api_key": "from-config",
               "supports_thinking": true,
               "thinking": {"type": "enabled", "budget_tokens": 2048}}),
    );
    m.model
        .invoke(ChatRequest {
            thinking_enabled: true,
            ..ask("q")
        })
        .await
        .unwrap();
    let r = mock.last_request().unwrap();
    assert_eq!(r.header("x-goog-api-key"), Some("from-config"));
    assert_eq!(
        r.json()["generationConfig"],
        json!({"maxOutputTokens": 512,
               "thinkingConfig": {"includeThoughts": true, "thinkingBudget": 2048}})
    );
}

#[tokio::test]
async fn thoughts_stream_as_reasoning_content_without_tools_when_asked_for() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::reasoning("Think, think.", "42")
            .with_chunking(Chunking::Chars(3))
            .with_usage(MockUsage {
                prompt_tokens: 10,
                completion_tokens: 12,
                cached_tokens: None,
                reasoning_tokens: Some(9),
            }),
    );
    // Thoughts shown (include_thoughts) but no tools: content blocks with a thinking block.
    let m = gemini(&mock, json!({"include_thoughts": true}));
    let msg = m.model.invoke(ask("q")).await.unwrap();
    let Content::Blocks(blocks) = &msg.content else {
        panic!("{:?}", msg.content)
    };
    assert_eq!(
        blocks[0],
        json!({"type": "thinking", "thinking": "Think, think.", "index": 0})
    );
    assert_eq!(blocks[1], json!({"type": "text", "text": "42", "index": 1}));
    let u = msg.usage_metadata.unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (10, 12));
    assert_eq!(u.output_token_details.unwrap()["reasoning"], 9);
    // Thoughts not asked for but sent anyway: kept as reasoning_content beside plain text.
    mock.push(Turn::reasoning("hm", "plain"));
    let m = gemini(&mock, json!({}));
    let msg = m.model.invoke(ask("q")).await.unwrap();
    assert_eq!(msg.content, Content::Text("plain".into()));
    assert_eq!(msg.additional_kwargs["reasoning_content"], "hm");
}

#[tokio::test]
async fn errors_are_classified_and_retried() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::RateLimit {
        retry_after_secs: Some(0),
    }));
    mock.push(Turn::fault(Fault::ServerError));
    mock.push(Turn::text("ok"));
    mock.push(Turn::fault(Fault::Unauthorized));
    mock.push(Turn::fault(Fault::InsufficientQuota));
    let m = gemini(&mock, json!({}));
    assert_eq!(m.model.invoke(ask("q")).await.unwrap().text(), "ok");
    assert_eq!(mock.chat_requests().len(), 3);
    let kinds: Vec<&str> = m.retries().iter().map(|r| r.error.kind()).collect();
    assert_eq!(kinds, ["rate_limit", "server"]);
    assert_eq!(
        m.retries()[0].delay,
        Duration::ZERO,
        "RetryInfo's delay is honoured"
    );
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(matches!(err, LlmError::Auth { status: 400, .. }), "{err:?}");
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(matches!(err, LlmError::Quota { .. }), "{err:?}");
    assert_eq!(
        mock.chat_requests().len(),
        5,
        "auth and quota are not retried"
    );

    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::Status {
        status: 404,
        body: json!({"error": {"code": 404, "message": "models/nope is not found", "status": "NOT_FOUND"}}),
        retry_after_secs: None,
    }));
    let m = gemini(&mock, json!({}));
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(
        matches!(err, LlmError::BadRequest { status: 404, ref message } if message.contains("not found")),
        "{err:?}"
    );
}

#[tokio::test]
async fn broken_streams_and_cancellation() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("a b c d").with_fault(Fault::DropConnection { after_chunks: 2 }));
    mock.push(Turn::text("a b c d").with_fault(Fault::MalformedChunk { after_chunks: 2 }));
    let m = gemini(&mock, json!({"max_retries": 0}));
    let (chunks, err) = drain(&m.model, ask("q")).await;
    assert_eq!(chunks.len(), 2);
    assert!(matches!(err, Some(LlmError::Connection { .. })), "{err:?}");
    let (chunks, err) = drain(&m.model, ask("q")).await;
    assert_eq!(chunks.len(), 2);
    assert!(matches!(err, Some(LlmError::Malformed { .. })), "{err:?}");

    // Dropping the stream ends the request.
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
async fn non_streaming_generate_content() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::tool_call("lookup", json!({"key": "x"}))
            .with_text("calling")
            .with_reasoning("hm"),
    );
    let m = gemini(&mock, json!({"streaming": false}));
    let mut req = ask("q");
    req.tools = vec![lookup_tool()].into();
    let (chunks, err) = drain(&m.model, req).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(chunks.len(), 1);
    let msg = merge_chunks(&chunks);
    assert_eq!(msg.text(), "calling");
    assert_eq!(msg.tool_calls[0].args["key"], "x");
    assert_eq!(msg.response_metadata["finish_reason"], "tool_calls");
    assert!(msg.usage_metadata.is_some());
    let r = mock.last_request().unwrap();
    assert_eq!(r.path, "/v1beta/models/gemini-2.5-flash:generateContent");
    assert_eq!(r.query, None);
}
