use crate::support::sse;
use fawn_testkit::{Fault, MockLlm, Turn};
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;

fn body(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

async fn post(mock: &MockLlm, stream: bool) -> reqwest::Response {
    fawn_net::client()
        .post(format!("{}/chat/completions", mock.base_url()))
        .json(&body(stream))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn http_faults_have_openai_error_bodies() {
    let mock = MockLlm::start().await.unwrap();
    mock.push_all([
        Turn::fault(Fault::RateLimit {
            retry_after_secs: Some(7),
        }),
        Turn::fault(Fault::InsufficientQuota),
        Turn::fault(Fault::Unauthorized),
        Turn::fault(Fault::ServerError),
        Turn::fault(Fault::Status {
            status: 503,
            body: json!({"error": {"message": "busy"}}),
            retry_after_secs: None,
        }),
        Turn::text("recovered"),
    ]);
    let r = post(&mock, true).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], "rate_limit_exceeded");
    let r = post(&mock, true).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_none());
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], "insufficient_quota");
    let r = post(&mock, false).await;
    assert_eq!(r.status(), 401);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], "invalid_api_key");
    let r = post(&mock, true).await;
    assert_eq!(r.status(), 500);
    let r = post(&mock, true).await;
    assert_eq!(r.status(), 503);
    let r = post(&mock, false).await;
    assert_eq!(r.status(), 200);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["choices"][0]["message"]["content"], "recovered");
    assert_eq!(mock.chat_requests().len(), 6);
}

#[tokio::test]
async fn malformed_chunk_is_an_invalid_json_data_line() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("one two three").with_fault(Fault::MalformedChunk { after_chunks: 2 }));
    let events = sse(
        &format!("{}/chat/completions", mock.base_url()),
        &body(true),
    )
    .await
    .unwrap();
    assert_eq!(events.len(), 4);
    assert!(serde_json::from_str::<Value>(&events[0].1).is_ok());
    assert!(serde_json::from_str::<Value>(&events[1].1).is_ok());
    assert!(serde_json::from_str::<Value>(&events[2].1).is_err());
    assert_eq!(events[3].1, "[DONE]");
    // Non-streaming: a 200 whose body is not JSON.
    mock.push(Turn::text("x").with_fault(Fault::MalformedChunk { after_chunks: 0 }));
    let r = post(&mock, false).await;
    assert_eq!(r.status(), 200);
    assert!(r.json::<Value>().await.is_err());
}

#[tokio::test]
async fn dropped_connection_ends_the_body_with_an_error() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("a b c d e").with_fault(Fault::DropConnection { after_chunks: 3 }));
    let r = post(&mock, true).await;
    assert_eq!(r.status(), 200);
    let mut s = r.bytes_stream();
    let mut text = String::new();
    let mut failed = false;
    while let Some(item) = s.next().await {
        match item {
            Ok(b) => text.push_str(&String::from_utf8_lossy(&b)),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(failed, "the body must end with an error, got a clean end");
    assert_eq!(text.matches("data: ").count(), 3);
    assert!(!text.contains("[DONE]"));
}

#[tokio::test]
async fn slow_stream_delays_chunks_and_hang_is_released_on_stop() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("a b").with_chunk_delay(Duration::from_millis(30)));
    let events = sse(
        &format!("{}/chat/completions", mock.base_url()),
        &body(true),
    )
    .await
    .unwrap();
    assert_eq!(events.last().unwrap().1, "[DONE]");

    mock.push(Turn::fault(Fault::Hang));
    let url = format!("{}/chat/completions", mock.base_url());
    let pending =
        tokio::spawn(async move { fawn_net::client().post(url).json(&body(true)).send().await });
    assert!(mock.wait_for_requests(2, Duration::from_secs(5)).await);
    // Still no answer while the mock runs.
    tokio::task::yield_now().await;
    assert!(!pending.is_finished());
    mock.stop().await;
    let r = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("hang must end when the mock stops")
        .unwrap();
    // Either the 503 the mock sends when stopping, or a closed connection.
    if let Ok(r) = r {
        assert_eq!(r.status(), 503);
    }
}

#[tokio::test]
async fn counts_completed_and_abandoned_streams() {
    let mock = MockLlm::start().await.unwrap();
    sse(
        &format!("{}/chat/completions", mock.base_url()),
        &body(true),
    )
    .await
    .unwrap();
    assert_eq!(mock.streams_completed(), 1);
    mock.push(Turn::text("a b c d e f g h").with_chunk_delay(Duration::from_millis(50)));
    let r = post(&mock, true).await;
    let mut s = r.bytes_stream();
    let first = s.next().await.unwrap().unwrap();
    assert!(!first.is_empty());
    drop(s);
    assert!(
        mock.wait_until(Duration::from_secs(5), |m| m.streams_aborted() == 1)
            .await
    );
    assert_eq!(mock.streams_completed(), 1);
}
