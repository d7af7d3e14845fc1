use crate::support::{ask, drain, openai};
use fawn_llm::{ChatRequest, ToolSpec};
use fawn_state::{MessageKind, merge_chunks};
use fawn_testkit::{MockLlm, MockToolCall, MockUsage, Turn};
use serde_json::json;

#[tokio::test]
async fn streams_text_as_ai_chunks_with_usage_on_the_last() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("Hello brave new world").with_usage(MockUsage {
        prompt_tokens: 12,
        completion_tokens: 5,
        cached_tokens: Some(8),
        reasoning_tokens: None,
    }));
    let m = openai(&mock, "langchain_openai:ChatOpenAI", json!({}));
    let (chunks, err) = drain(&m.model, ask("hi")).await;
    assert!(err.is_none(), "{err:?}");
    assert!(
        chunks.len() >= 5,
        "one chunk per word plus finish and last: {chunks:?}"
    );
    assert!(chunks.iter().all(|c| c.kind == MessageKind::AiChunk));
    let id = chunks[0].id.clone().unwrap();
    assert!(id.starts_with("lc_run--"), "{id}");
    assert!(chunks.iter().all(|c| c.id.as_deref() == Some(id.as_str())));
    let last = chunks.last().unwrap();
    assert_eq!(last.chunk_position.as_deref(), Some("last"));
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c.usage_metadata.is_none())
    );
    let msg = merge_chunks(&chunks);
    assert_eq!(msg.kind, MessageKind::Ai);
    assert_eq!(msg.text(), "Hello brave new world");
    assert_eq!(msg.response_metadata["finish_reason"], "stop");
    assert_eq!(msg.response_metadata["model_name"], "gpt-test");
    assert_eq!(msg.response_metadata["model_provider"], "openai");
    let u = msg.usage_metadata.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.total_tokens),
        (12, 5, 17)
    );
    assert_eq!(u.input_token_details.unwrap()["cache_read"], 8);

    let req = mock.last_request().unwrap();
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), Some("Bearer sk-test"));
    let body = req.json();
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        body["messages"],
        json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}])
    );
}

#[tokio::test]
async fn streams_parallel_tool_calls() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::tool_calls([
        MockToolCall::new("get_weather", json!({"city": "Paris", "unit": "C"})).with_id("call_w"),
        MockToolCall::new("get_time", json!({"tz": "Europe/Paris"})).with_id("call_t"),
    ]));
    let m = openai(&mock, "langchain_openai:ChatOpenAI", json!({}));
    let mut req = ask("weather and time?");
    req.tools = vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Weather for a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}})
                .into(),
        },
        ToolSpec {
            name: "get_time".into(),
            description: String::new(),
            parameters: serde_json::Value::Null.into(),
        },
    ]
    .into();
    req.tool_choice = Some(json!("auto"));
    let (chunks, err) = drain(&m.model, req).await;
    assert!(err.is_none(), "{err:?}");
    // Argument fragments arrive in several chunks per call.
    let fragments = chunks
        .iter()
        .flat_map(|c| &c.tool_call_chunks)
        .filter(|t| t.args.as_deref().is_some_and(|a| !a.is_empty()))
        .count();
    assert!(fragments >= 4, "{fragments}");
    let msg = merge_chunks(&chunks);
    assert!(
        msg.invalid_tool_calls.is_empty(),
        "{:?}",
        msg.invalid_tool_calls
    );
    assert_eq!(msg.tool_calls.len(), 2);
    assert_eq!(msg.tool_calls[0].name, "get_weather");
    assert_eq!(msg.tool_calls[0].id.as_deref(), Some("call_w"));
    assert_eq!(msg.tool_calls[0].args["city"], "Paris");
    assert_eq!(msg.tool_calls[1].name, "get_time");
    assert_eq!(msg.tool_calls[1].args["tz"], "Europe/Paris");
    assert_eq!(msg.response_metadata["finish_reason"], "tool_calls");

    let body = mock.last_request().unwrap().json().clone();
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(
        body["tools"][0]["function"]["description"],
        "Weather for a city"
    );
    assert_eq!(
        body["tools"][1]["function"]["parameters"],
        json!({"type": "object", "properties": {}})
    );
    assert!(body["tools"][1]["function"].get("description").is_none());
}

#[tokio::test]
async fn tool_call_history_is_sent_back_in_openai_shape() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::tool_call("lookup", json!({"q": "x"})));
    mock.push(Turn::text("done"));
    let m = openai(&mock, "langchain_openai:ChatOpenAI", json!({}));
    let mut req = ask("find x");
    let first = m.model.invoke(req.clone()).await.unwrap();
    let call_id = first.tool_calls[0].id.clone().unwrap();
    req.messages.push(first);
    req.messages.push(fawn_state::Message::tool(
        "found",
        call_id.clone(),
        Some("lookup".into()),
    ));
    let answer = m.model.invoke(req).await.unwrap();
    assert_eq!(answer.text(), "done");
    let msgs = mock.last_request().unwrap().messages().to_vec();
    assert_eq!(msgs[2]["role"], "assistant");
    assert!(msgs[2]["content"].is_null());
    assert_eq!(msgs[2]["tool_calls"][0]["id"], call_id.as_str());
    assert_eq!(msgs[2]["tool_calls"][0]["type"], "function");
    assert_eq!(
        msgs[2]["tool_calls"][0]["function"]["arguments"],
        "{\"q\":\"x\"}"
    );
    assert_eq!(
        msgs[3],
        json!({"role": "tool", "content": "found", "tool_call_id": call_id})
    );
}

#[tokio::test]
async fn non_streaming_mode_and_base_url_without_v1() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::reasoning("because", "Plain answer"));
    let m = openai(
        &mock,
        "langchain_openai:ChatOpenAI",
        json!({"streaming": false, "base_url": mock.url()}),
    );
    let (chunks, err) = drain(&m.model, ask("q")).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(chunks.len(), 1);
    let msg = merge_chunks(&chunks);
    assert_eq!(msg.text(), "Plain answer");
    assert_eq!(msg.additional_kwargs["reasoning_content"], "because");
    assert!(msg.usage_metadata.is_some());
    let req = mock.last_request().unwrap();
    assert_eq!(req.path, "/chat/completions");
    assert_eq!(req.json()["stream"], false);
    assert!(req.json().get("stream_options").is_none());
}

#[tokio::test]
async fn unknown_vendor_delta_fields_land_in_additional_kwargs() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("ok").with_delta_extra("citations", json!(["https://a"])));
    let m = openai(&mock, "langchain_openai:ChatOpenAI", json!({}));
    let msg = m.model.invoke(ask("q")).await.unwrap();
    assert_eq!(msg.additional_kwargs["citations"], json!(["https://a"]));
    // `refusal: null` on the first delta is not copied.
    assert!(msg.additional_kwargs.get("refusal").is_none());
}

#[tokio::test]
async fn dropping_the_stream_aborts_the_http_request() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::text("one two three four five six seven eight nine ten")
            .with_chunk_delay(std::time::Duration::from_millis(100)),
    );
    let m = openai(&mock, "langchain_openai:ChatOpenAI", json!({}));
    let mut stream = m
        .model
        .stream(ChatRequest { ..ask("count") })
        .await
        .unwrap();
    use futures::StreamExt;
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.text(), "one ");
    drop(stream);
    assert!(
        mock.wait_until(std::time::Duration::from_secs(5), |m| m.streams_aborted()
            == 1)
            .await,
        "the mock never saw the client go away"
    );
    assert_eq!(mock.streams_completed(), 0);
}
