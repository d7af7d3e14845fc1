use fawn_testkit::{Fault, MockLlm, Turn};
use futures::StreamExt;
use serde_json::json;

async fn post(mock: &MockLlm, path: &str, stream: bool) -> reqwest::Response {
    fawn_net::client()
        .post(format!("{}{path}", mock.url()))
        .json(&json!({"model": "m", "stream": stream, "max_tokens": 8,
                      "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn recorded_streams_are_replayed_byte_for_byte() {
    let mock = MockLlm::start().await.unwrap();
    for (path, file, content_type) in [
        (
            "/v1/messages",
            "anthropic/tool_use_empty_name.sse",
            "text/event-stream",
        ),
        (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            "gemini/function_call_partial_args.sse",
            "text/event-stream",
        ),
        (
            "/api/chat",
            "ollama/tool_call_empty_name.ndjson",
            "application/x-ndjson",
        ),
        (
            "/v1/chat/completions",
            "openai/tool_call_empty_name.sse",
            "text/event-stream",
        ),
    ] {
        let turn = Turn::recording(file).unwrap();
        let expected = turn.recording.clone().unwrap();
        mock.push(turn);
        let r = post(&mock, path, true).await;
        assert_eq!(r.status(), 200, "{file}");
        assert_eq!(r.headers()["content-type"], content_type, "{file}");
        let mut body = Vec::new();
        let mut reads = r.bytes_stream();
        while let Some(bytes) = reads.next().await {
            body.extend_from_slice(&bytes.unwrap());
        }
        assert_eq!(String::from_utf8(body).unwrap(), expected, "{file}");
    }
    assert!(
        std::fs::read_to_string(format!(
            "{}/gemini/function_call_partial_args.sse",
            fawn_testkit::RECORDINGS_DIR
        ))
        .unwrap()
        .contains("}\r\n\r\ndata: "),
        "Gemini recordings keep their CRLF line ends"
    );
    assert_eq!(mock.streams_completed(), 4);
    assert_eq!(mock.chat_requests().len(), 4, "requests are still recorded");
}

#[tokio::test]
async fn recorded_streams_take_cutting_faults_and_plain_bodies() {
    let mock = MockLlm::start().await.unwrap();
    // Three SSE events, then the connection is dropped.
    mock.push(
        Turn::recording("anthropic/tool_use_empty_name.sse")
            .unwrap()
            .with_fault(Fault::DropConnection { after_chunks: 3 }),
    );
    let r = post(&mock, "/v1/messages", true).await;
    let mut text = String::new();
    let mut reads = r.bytes_stream();
    let mut failed = false;
    while let Some(bytes) = reads.next().await {
        match bytes {
            Ok(b) => text.push_str(std::str::from_utf8(&b).unwrap()),
            Err(_) => failed = true,
        }
    }
    assert!(failed, "the body ends in an error, not cleanly");
    assert_eq!(text.matches("\n\n").count(), 3, "{text}");
    assert!(
        text.ends_with("event: ping\ndata: {\"type\": \"ping\"}\n\n"),
        "{text}"
    );

    // A request that does not stream gets the recorded body as its JSON document.
    mock.push(Turn::recorded(r#"{"id": "msg_1", "content": []}"#));
    let r = post(&mock, "/v1/messages", false).await;
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.text().await.unwrap(), r#"{"id": "msg_1", "content": []}"#);
    assert!(Turn::recording("no/such.sse").is_err());
}
