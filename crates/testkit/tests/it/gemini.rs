use crate::support::sse;
use fawn_testkit::{
    Behavior, Chunking, Fault, MockConfig, MockLlm, MockToolCall, MockUsage, Rules, Turn,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn body(tools: bool) -> Value {
    let mut b = json!({
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "contents": [{"role": "user", "parts": [{"text": "hello"}]}]
    });
    if tools {
        b["tools"] = json!([{"functionDeclarations": [{"name": "lookup"}]}]);
    }
    b
}

fn stream_url(mock: &MockLlm) -> String {
    format!(
        "{}/v1beta/models/gemini-test:streamGenerateContent?alt=sse",
        mock.url()
    )
}

async fn chunks(mock: &MockLlm, body: &Value) -> Vec<Value> {
    sse(&stream_url(mock), body)
        .await
        .unwrap()
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect()
}

fn parts(chunks: &[Value]) -> Vec<Value> {
    chunks
        .iter()
        .flat_map(|c| {
            c["candidates"][0]["content"]["parts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

#[tokio::test]
async fn streams_thoughts_text_and_function_calls_with_signatures() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::tool_calls([
            MockToolCall::new("lookup", json!({"k": "v"})),
            MockToolCall::new("lookup", json!({"k": "w"})).with_id("fc-2"),
        ])
        .with_text("Let me look.")
        .with_reasoning("I should look it up")
        .with_thinking_signature("c2lnLTEyMw==")
        .with_usage(MockUsage {
            prompt_tokens: 20,
            completion_tokens: 9,
            cached_tokens: Some(4),
            reasoning_tokens: Some(3),
        }),
    );
    let data = chunks(&mock, &body(true)).await;
    let all = parts(&data);
    let thought: String = all
        .iter()
        .filter(|p| p["thought"] == true)
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(thought, "I should look it up");
    let text: String = all
        .iter()
        .filter(|p| p.get("thought").is_none())
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, "Let me look.");
    let calls: Vec<&Value> = all
        .iter()
        .filter(|p| p.get("functionCall").is_some())
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0]["functionCall"],
        json!({"name": "lookup", "args": {"k": "v"}})
    );
    assert_eq!(calls[0]["thoughtSignature"], "c2lnLTEyMw==");
    assert_eq!(calls[1]["functionCall"]["id"], "fc-2");
    assert!(calls[1].get("thoughtSignature").is_none());
    let last = data.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(
        last["usageMetadata"],
        json!({"promptTokenCount": 20, "candidatesTokenCount": 6, "thoughtsTokenCount": 3,
               "cachedContentTokenCount": 4, "totalTokenCount": 29})
    );
    assert_eq!(last["modelVersion"], "gemini-test");
    let r = mock.last_request().unwrap();
    assert!(r.is_chat());
    assert_eq!(r.path, "/v1beta/models/gemini-test:streamGenerateContent");
    assert_eq!(r.query.as_deref(), Some("alt=sse"));
}

#[tokio::test]
async fn plain_answers_close_with_a_signed_empty_part_and_honour_delays() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::text("a b c")
            .with_thinking_signature("dHM=")
            .with_chunking(Chunking::Words)
            .with_chunk_delay(Duration::from_millis(30)),
    );
    let started = Instant::now();
    let data = chunks(&mock, &body(false)).await;
    assert!(started.elapsed() >= Duration::from_millis(90));
    assert_eq!(data.len(), 4);
    assert_eq!(
        data[3]["candidates"][0]["content"]["parts"],
        json!([{"text": "", "thoughtSignature": "dHM="}])
    );
}

#[tokio::test]
async fn whole_responses_and_google_errors() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::reasoning("hm", "hi there"));
    mock.push(Turn::fault(Fault::RateLimit {
        retry_after_secs: Some(2),
    }));
    mock.push(Turn::fault(Fault::Unauthorized));
    mock.push(Turn::fault(Fault::InsufficientQuota));
    let c = fawn_net::client();
    let url = format!("{}/v1beta/models/g:generateContent", mock.url());
    let r: Value = c
        .post(&url)
        .json(&body(false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        r["candidates"][0]["content"]["parts"],
        json!([{"text": "hm", "thought": true}, {"text": "hi there"}])
    );
    let r = c.post(&url).json(&body(false)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_none());
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(b["error"]["details"][0]["retryDelay"], "2s");
    let r = c.post(&url).json(&body(false)).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["details"][0]["reason"], "API_KEY_INVALID");
    let r = c.post(&url).json(&body(false)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let b: Value = r.json().await.unwrap();
    assert!(b["error"].get("details").is_none());
}

#[tokio::test]
async fn rules_see_function_responses() {
    let mock = MockLlm::start_with(
        MockConfig::default().with_behavior(Behavior::Rules(
            Rules::new()
                .call_tool("lookup", json!({"q": 1}))
                .after_tool("found it"),
        )),
    )
    .await
    .unwrap();
    let data = chunks(&mock, &body(true)).await;
    assert_eq!(parts(&data)[0]["functionCall"]["name"], "lookup");
    let mut b = body(true);
    b["contents"] = json!([
        {"role": "user", "parts": [{"text": "hello"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "lookup", "args": {"q": 1}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "lookup", "response": {"output": "42"}}}]}
    ]);
    let data = chunks(&mock, &b).await;
    let text: String = parts(&data)
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, "found it");
    // Echo (the default) sees the last user text.
    let echo = MockLlm::start().await.unwrap();
    let data = chunks(&echo, &body(false)).await;
    let text: String = parts(&data)
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, "hello");
}

#[tokio::test]
async fn broken_streams() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("a b c").with_fault(Fault::MalformedChunk { after_chunks: 1 }));
    mock.push(Turn::text("a b c").with_fault(Fault::DropConnection { after_chunks: 2 }));
    let events = sse(&stream_url(&mock), &body(false)).await.unwrap();
    assert_eq!(events.len(), 2);
    assert!(serde_json::from_str::<Value>(&events[1].1).is_err());
    let err = sse(&stream_url(&mock), &body(false)).await;
    assert!(err.is_err(), "a dropped connection is an error");
}
