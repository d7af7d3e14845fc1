use crate::support::{openai_chunks, sse};
use fawn_testkit::{
    Behavior, Chunking, DEMO_PREFIX, MockConfig, MockLlm, MockToolCall, MockUsage, Rules, Turn,
};
use serde_json::{Value, json};

fn chat(stream: bool, usage: bool) -> Value {
    let mut b = json!({
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello there"}
        ],
        "stream": stream,
    });
    if usage {
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

fn content(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect()
}

#[tokio::test]
async fn streams_text_with_usage_chunk_last() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("Hello brave new world").with_usage(MockUsage {
        prompt_tokens: 11,
        completion_tokens: 4,
        cached_tokens: Some(3),
        reasoning_tokens: None,
    }));
    let url = format!("{}/chat/completions", mock.base_url());
    let chunks = openai_chunks(&url, &chat(true, true)).await.unwrap();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(chunks[0]["model"], "gpt-test");
    assert_eq!(content(&chunks), "Hello brave new world");
    // One chunk per word.
    assert_eq!(
        chunks
            .iter()
            .filter(|c| c
                .pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty()))
            .count(),
        4
    );
    let n = chunks.len();
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "stop");
    let last = &chunks[n - 1];
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["prompt_tokens"], 11);
    assert_eq!(last["usage"]["total_tokens"], 15);
    assert_eq!(last["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
    // Every other chunk carries usage: null.
    assert!(chunks[..n - 1].iter().all(|c| c["usage"].is_null()));
}

#[tokio::test]
async fn no_usage_chunk_without_include_usage_and_path_without_v1() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("hi").with_chunking(Chunking::Chars(1)));
    let url = format!("{}/chat/completions", mock.url());
    let chunks = openai_chunks(&url, &chat(true, false)).await.unwrap();
    assert_eq!(content(&chunks), "hi");
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
}

#[tokio::test]
async fn streams_parallel_tool_calls() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::tool_calls([
        MockToolCall::new("get_weather", json!({"city": "Paris"})).with_id("call_a"),
        MockToolCall::new("get_time", json!({"tz": "UTC"})),
    ]));
    let url = format!("{}/chat/completions", mock.base_url());
    let chunks = openai_chunks(&url, &chat(true, true)).await.unwrap();
    let mut args = [String::new(), String::new()];
    let mut names = [None, None];
    let mut ids = [None, None];
    for c in &chunks {
        if let Some(tcs) = c
            .pointer("/choices/0/delta/tool_calls")
            .and_then(Value::as_array)
        {
            for tc in tcs {
                let i = tc["index"].as_u64().unwrap() as usize;
                if let Some(n) = tc.pointer("/function/name").and_then(Value::as_str) {
                    names[i] = Some(n.to_string());
                }
                if let Some(id) = tc.get("id").and_then(Value::as_str) {
                    ids[i] = Some(id.to_string());
                }
                args[i].push_str(
                    tc.pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                );
            }
        }
    }
    assert_eq!(
        names,
        [
            Some("get_weather".to_string()),
            Some("get_time".to_string())
        ]
    );
    assert_eq!(ids[0].as_deref(), Some("call_a"));
    assert!(ids[1].as_deref().unwrap().starts_with("call_"));
    assert_eq!(
        serde_json::from_str::<Value>(&args[0]).unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(
        serde_json::from_str::<Value>(&args[1]).unwrap(),
        json!({"tz": "UTC"})
    );
    let finish: Vec<_> = chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(finish, vec!["tool_calls"]);
}

#[tokio::test]
async fn streams_reasoning_before_text_and_vendor_fields() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::reasoning("think hard", "answer").with_delta_extra("vendor_flag", json!({"x": 1})),
    );
    mock.push(Turn::reasoning("vllm style", "ok").with_reasoning_field("reasoning"));
    let url = format!("{}/chat/completions", mock.base_url());
    let chunks = openai_chunks(&url, &chat(true, false)).await.unwrap();
    assert_eq!(
        chunks[0]["choices"][0]["delta"]["vendor_flag"],
        json!({"x": 1})
    );
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/delta/reasoning_content")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(reasoning, "think hard");
    let first_reasoning = chunks
        .iter()
        .position(|c| c.pointer("/choices/0/delta/reasoning_content").is_some())
        .unwrap();
    let first_text = chunks
        .iter()
        .position(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                == Some("answer")
        })
        .unwrap();
    assert!(first_reasoning < first_text);
    let chunks = openai_chunks(&url, &chat(true, false)).await.unwrap();
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/delta/reasoning")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(reasoning, "vllm style");
}

#[tokio::test]
async fn non_streaming_completion_shape() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::tool_call("search", json!({"q": "rust"})).with_reasoning("hmm"));
    let url = format!("{}/chat/completions", mock.base_url());
    let resp: Value = fawn_net::client()
        .post(&url)
        .json(&chat(false, false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(resp["object"], "chat.completion");
    let msg = &resp["choices"][0]["message"];
    assert_eq!(msg["role"], "assistant");
    assert!(msg["content"].is_null());
    assert_eq!(msg["reasoning_content"], "hmm");
    assert_eq!(msg["tool_calls"][0]["function"]["name"], "search");
    assert_eq!(
        msg["tool_calls"][0]["function"]["arguments"],
        "{\"q\":\"rust\"}"
    );
    assert_eq!(resp["choices"][0]["finish_reason"], "tool_calls");
    assert!(resp["usage"]["total_tokens"].as_u64().unwrap() >= 2);
}

#[tokio::test]
async fn models_listing_and_unknown_route() {
    let mock = MockLlm::start_with(MockConfig::default().with_model("demo-1"))
        .await
        .unwrap();
    let c = fawn_net::client();
    let models: Value = c
        .get(format!("{}/models", mock.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "demo-1");
    let r = c.get(format!("{}/nope", mock.url())).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let r = c
        .post(format!("{}/chat/completions", mock.base_url()))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(mock.request_count(), 3);
    assert_eq!(mock.chat_requests().len(), 1);
}

#[tokio::test]
async fn records_method_path_headers_and_body() {
    let mock = MockLlm::start().await.unwrap();
    let url = format!("{}/chat/completions?x=1", mock.base_url());
    sse(&url, &chat(true, false)).await.unwrap();
    fawn_net::client()
        .post(format!("{}/chat/completions", mock.base_url()))
        .header("Authorization", "Bearer sk-test")
        .header("X-Custom", "abc")
        .json(&chat(false, false))
        .send()
        .await
        .unwrap();
    assert!(
        mock.wait_for_requests(2, std::time::Duration::from_secs(5))
            .await
    );
    let reqs = mock.requests();
    assert_eq!(reqs[0].query.as_deref(), Some("x=1"));
    let r = &reqs[1];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(r.header("X-CUSTOM"), Some("abc"));
    assert_eq!(r.json()["model"], "gpt-test");
    assert_eq!(r.messages().len(), 2);
    mock.clear_requests();
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test]
async fn empty_script_echoes_by_default() {
    let mock = MockLlm::start().await.unwrap();
    let url = format!("{}/chat/completions", mock.base_url());
    let chunks = openai_chunks(&url, &chat(true, false)).await.unwrap();
    assert_eq!(content(&chunks), "hello there");
}

#[tokio::test]
async fn rules_mode_is_stateless_and_demo_says_what_it_is() {
    let rules = Rules::new()
        .call_tool("calculator", json!({"expr": "1+1"}))
        .after_tool("The answer is 2.");
    let mock = MockLlm::start_with(MockConfig::default().with_behavior(Behavior::Rules(rules)))
        .await
        .unwrap();
    let url = format!("{}/chat/completions", mock.base_url());
    let tools = json!([{"type": "function", "function": {"name": "calculator", "parameters": {}}}]);
    let mut req = chat(true, false);
    req["tools"] = tools.clone();
    // The same request always gets the same answer: a tool call.
    for _ in 0..2 {
        let chunks = openai_chunks(&url, &req).await.unwrap();
        let name = chunks
            .iter()
            .find_map(|c| c.pointer("/choices/0/delta/tool_calls/0/function/name"))
            .cloned();
        assert_eq!(name, Some(json!("calculator")));
    }
    req["messages"] = json!([
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "2"}
    ]);
    let chunks = openai_chunks(&url, &req).await.unwrap();
    assert_eq!(content(&chunks), "The answer is 2.");
    // Without tools offered: echo.
    let chunks = openai_chunks(&url, &chat(true, false)).await.unwrap();
    assert_eq!(content(&chunks), "hello there");

    let demo = MockLlm::start_with(MockConfig::default().with_behavior(Behavior::Demo))
        .await
        .unwrap();
    let chunks = openai_chunks(
        &format!("{}/chat/completions", demo.base_url()),
        &chat(true, false),
    )
    .await
    .unwrap();
    let text = content(&chunks);
    assert!(text.starts_with(DEMO_PREFIX), "{text}");
    assert!(text.ends_with("You said: hello there"), "{text}");
}
