use fawn_testkit::{Behavior, Fault, MockConfig, MockLlm, MockToolCall, MockUsage, Rules, Turn};
use serde_json::{Value, json};

fn body(stream: Option<bool>) -> Value {
    let mut b = json!({
        "model": "qwen3:8b",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    });
    if let Some(s) = stream {
        b["stream"] = json!(s);
    }
    b
}

/// Every NDJSON line of the answer to `body`, and the response's content type.
async fn lines(mock: &MockLlm, body: &Value) -> (Vec<Value>, String) {
    let r = fawn_net::client()
        .post(format!("{}/api/chat", mock.url()))
        .json(body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    let text = r.text().await.unwrap();
    assert!(text.ends_with('\n'));
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (lines, ct)
}

#[tokio::test]
async fn streams_ndjson_thinking_text_tool_calls_and_counts() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::tool_calls([
            MockToolCall::new("lookup", json!({"k": "v"})),
            MockToolCall::new("lookup", json!({"k": "w"})),
        ])
        .with_text("Let me look.")
        .with_reasoning("I should look")
        .with_usage(MockUsage {
            prompt_tokens: 11,
            completion_tokens: 5,
            cached_tokens: None,
            reasoning_tokens: None,
        }),
    );
    // Ollama streams when `stream` is absent.
    let (lines, ct) = lines(&mock, &body(None)).await;
    assert_eq!(ct, "application/x-ndjson");
    let thinking: String = lines
        .iter()
        .filter_map(|l| l["message"]["thinking"].as_str())
        .collect();
    assert_eq!(thinking, "I should look");
    let text: String = lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    assert_eq!(text, "Let me look.");
    let calls: Vec<&Value> = lines
        .iter()
        .filter_map(|l| l["message"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1]["function"]["arguments"], json!({"k": "w"}));
    assert!(calls[0].get("id").is_none(), "Ollama sends no call ids");
    assert!(lines[..lines.len() - 1].iter().all(|l| l["done"] == false));
    let last = lines.last().unwrap();
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "stop");
    assert_eq!(last["prompt_eval_count"], 11);
    assert_eq!(last["eval_count"], 5);
    assert_eq!(last["model"], "qwen3:8b");
    assert!(mock.last_request().unwrap().is_chat());
}

#[tokio::test]
async fn whole_responses_errors_and_tags() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::reasoning("hm", "hi there"));
    mock.push(Turn::fault(Fault::RateLimit {
        retry_after_secs: Some(3),
    }));
    mock.push(Turn::fault(Fault::ServerError));
    let c = fawn_net::client();
    let url = format!("{}/api/chat", mock.url());
    let r: Value = c
        .post(&url)
        .json(&body(Some(false)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        r["message"],
        json!({"role": "assistant", "content": "hi there", "thinking": "hm"})
    );
    assert_eq!(r["done"], true);
    let r = c.post(&url).json(&body(Some(false))).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "3");
    let r = c.post(&url).json(&body(None)).send().await.unwrap();
    assert_eq!(r.status(), 500);
    let b: Value = r.json().await.unwrap();
    assert!(b["error"].as_str().unwrap().contains("llama runner"));
    let tags: Value = c
        .get(format!("{}/api/tags", mock.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tags["models"][0]["name"], "fawn-mock");
}

#[tokio::test]
async fn rules_see_tool_messages_and_broken_streams() {
    let mock = MockLlm::start_with(
        MockConfig::default().with_behavior(Behavior::Rules(
            Rules::new()
                .call_tool("lookup", json!({}))
                .after_tool("found"),
        )),
    )
    .await
    .unwrap();
    let (l, _) = lines(&mock, &body(None)).await;
    assert!(
        l.iter()
            .any(|l| l["message"]["tool_calls"][0]["function"]["name"] == "lookup")
    );
    let mut b = body(None);
    b["messages"] = json!([
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "lookup", "arguments": {}}}]},
        {"role": "tool", "content": "42", "tool_name": "lookup"}
    ]);
    let (l, _) = lines(&mock, &b).await;
    let text: String = l
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    assert_eq!(text, "found");

    mock.push(Turn::text("a b c").with_fault(Fault::MalformedChunk { after_chunks: 1 }));
    let text = fawn_net::client()
        .post(format!("{}/api/chat", mock.url()))
        .json(&body(None))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let raw: Vec<&str> = text.lines().collect();
    assert_eq!(raw.len(), 2);
    assert!(serde_json::from_str::<Value>(raw[1]).is_err());
}
