use crate::support::sse;
use fawn_testkit::{Behavior, Fault, MockConfig, MockLlm, MockToolCall, Rules, Turn};
use serde_json::{Value, json};

fn body(stream: bool) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 100,
        "stream": stream,
        "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    })
}

#[tokio::test]
async fn streams_thinking_text_and_tool_use_events() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::tool_calls([MockToolCall::new("lookup", json!({"k": "v"}))])
            .with_text("Let me look.")
            .with_reasoning("I should look it up")
            .with_thinking_signature("sig-123"),
    );
    let events = sse(&format!("{}/messages", mock.base_url()), &body(true))
        .await
        .unwrap();
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(*names.last().unwrap(), "message_stop");
    let data: Vec<Value> = events
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    let starts: Vec<&str> = data
        .iter()
        .filter(|d| d["type"] == "content_block_start")
        .map(|d| d["content_block"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(starts, vec!["thinking", "text", "tool_use"]);
    let thinking: String = data
        .iter()
        .filter(|d| d["delta"]["type"] == "thinking_delta")
        .map(|d| d["delta"]["thinking"].as_str().unwrap())
        .collect();
    assert_eq!(thinking, "I should look it up");
    assert!(data.iter().any(|d| d["delta"]["signature"] == "sig-123"));
    let text: String = data
        .iter()
        .filter(|d| d["delta"]["type"] == "text_delta")
        .map(|d| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Let me look.");
    let json_text: String = data
        .iter()
        .filter(|d| d["delta"]["type"] == "input_json_delta")
        .map(|d| d["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json_text).unwrap(),
        json!({"k": "v"})
    );
    let delta = data.iter().find(|d| d["type"] == "message_delta").unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() >= 1);
    assert!(
        data[0]["message"]["usage"]["input_tokens"]
            .as_u64()
            .unwrap()
            >= 1
    );
}

#[tokio::test]
async fn non_streaming_message_and_errors() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("hi there"));
    mock.push(Turn::fault(Fault::RateLimit {
        retry_after_secs: Some(2),
    }));
    mock.push(Turn::fault(Fault::InsufficientQuota));
    let c = fawn_net::client();
    let url = format!("{}/messages", mock.base_url());
    let r: Value = c
        .post(&url)
        .json(&body(false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["type"], "message");
    assert_eq!(r["content"][0], json!({"type": "text", "text": "hi there"}));
    assert_eq!(r["stop_reason"], "end_turn");
    let r = c.post(&url).json(&body(true)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "2");
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["type"], "rate_limit_error");
    let r = c.post(&url).json(&body(true)).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let b: Value = r.json().await.unwrap();
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("credit balance")
    );
}

#[tokio::test]
async fn rules_see_anthropic_tool_results() {
    let mock = MockLlm::start_with(
        MockConfig::default().with_behavior(Behavior::Rules(
            Rules::new()
                .call_tool("lookup", json!({}))
                .after_tool("found it"),
        )),
    )
    .await
    .unwrap();
    let mut b = body(false);
    b["tools"] = json!([{"name": "lookup", "input_schema": {"type": "object"}}]);
    let c = fawn_net::client();
    let url = format!("{}/messages", mock.url());
    let r: Value = c
        .post(&url)
        .json(&b)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["content"][0]["type"], "tool_use");
    b["messages"] = json!([
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]}
    ]);
    let r: Value = c
        .post(&url)
        .json(&b)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "found it");
}
