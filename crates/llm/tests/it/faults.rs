use crate::support::{ask, drain, openai};
use fawn_llm::LlmError;
use fawn_testkit::{Fault, MockLlm, Turn};
use serde_json::json;
use std::time::Duration;

const OPENAI: &str = "langchain_openai:ChatOpenAI";

#[tokio::test]
async fn rate_limit_is_retried_after_retry_after() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::RateLimit {
        retry_after_secs: Some(1),
    }));
    mock.push(Turn::text("finally"));
    let m = openai(&mock, OPENAI, json!({}));
    let msg = m.model.invoke(ask("q")).await.unwrap();
    assert_eq!(msg.text(), "finally");
    assert_eq!(mock.chat_requests().len(), 2);
    let retries = m.retries();
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0].attempt, 1);
    assert_eq!(retries[0].max_retries, 2);
    assert_eq!(
        retries[0].delay,
        Duration::from_secs(1),
        "Retry-After honoured"
    );
    assert!(matches!(
        retries[0].error,
        LlmError::RateLimit { retry_after: Some(d), .. } if d == Duration::from_secs(1)
    ));
}

#[tokio::test]
async fn retries_stop_at_max_retries() {
    let mock = MockLlm::start().await.unwrap();
    for _ in 0..3 {
        mock.push(Turn::fault(Fault::ServerError));
    }
    mock.push(Turn::text("too late"));
    let m = openai(&mock, OPENAI, json!({}));
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(
        matches!(err, LlmError::Server { status: 500, .. }),
        "{err:?}"
    );
    assert_eq!(mock.chat_requests().len(), 3, "1 attempt + max_retries (2)");
    assert_eq!(m.retries().len(), 2);

    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::RateLimit {
        retry_after_secs: Some(0),
    }));
    let m = openai(&mock, OPENAI, json!({"max_retries": 0}));
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(matches!(err, LlmError::RateLimit { .. }), "{err:?}");
    assert_eq!(mock.chat_requests().len(), 1);
}

#[tokio::test]
async fn quota_and_auth_are_not_retried() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::InsufficientQuota));
    mock.push(Turn::fault(Fault::Unauthorized));
    mock.push(Turn::text("never reached"));
    let m = openai(&mock, OPENAI, json!({}));
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(matches!(err, LlmError::Quota { .. }), "{err:?}");
    assert!(!err.is_retryable());
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(matches!(err, LlmError::Auth { status: 401, .. }), "{err:?}");
    assert!(err.to_string().contains("Incorrect API key"), "{err}");
    assert_eq!(mock.chat_requests().len(), 2);
    assert!(m.retries().is_empty());
}

#[tokio::test]
async fn other_4xx_is_a_bad_request_and_not_retried() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::Status {
        status: 400,
        body: json!({"error": {"message": "Invalid 'messages[1].name'", "type": "invalid_request_error"}}),
        retry_after_secs: None,
    }));
    let m = openai(&mock, OPENAI, json!({}));
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    match err {
        LlmError::BadRequest { status, message } => {
            assert_eq!(status, 400);
            assert_eq!(message, "Invalid 'messages[1].name'");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.chat_requests().len(), 1);
}

#[tokio::test]
async fn server_error_then_success_is_retried() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::ServerError));
    mock.push(Turn::text("recovered"));
    let m = openai(&mock, OPENAI, json!({}));
    assert_eq!(m.model.invoke(ask("q")).await.unwrap().text(), "recovered");
    assert_eq!(mock.chat_requests().len(), 2);
    let r = m.retries();
    assert_eq!(r.len(), 1);
    assert!(matches!(r[0].error, LlmError::Server { status: 500, .. }));
    assert!(
        r[0].delay <= Duration::from_millis(20),
        "backoff from the policy: {:?}",
        r[0].delay
    );
}

#[tokio::test]
async fn malformed_chunk_mid_stream_is_an_error_item_and_not_retried() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("one two three").with_fault(Fault::MalformedChunk { after_chunks: 2 }));
    mock.push(Turn::text("unused"));
    let m = openai(&mock, OPENAI, json!({}));
    let (chunks, err) = drain(&m.model, ask("q")).await;
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].text(), "one ");
    assert!(matches!(err, Some(LlmError::Malformed { .. })), "{err:?}");
    assert_eq!(mock.chat_requests().len(), 1);
    assert!(m.retries().is_empty());
}

#[tokio::test]
async fn malformed_first_chunk_is_retried() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("x").with_fault(Fault::MalformedChunk { after_chunks: 0 }));
    mock.push(Turn::text("clean"));
    let m = openai(&mock, OPENAI, json!({}));
    assert_eq!(m.model.invoke(ask("q")).await.unwrap().text(), "clean");
    assert_eq!(mock.chat_requests().len(), 2);
    assert_eq!(m.retries()[0].error.kind(), "malformed_response");
}

#[tokio::test]
async fn dropped_connection_mid_stream_is_a_connection_error() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("a b c d e f").with_fault(Fault::DropConnection { after_chunks: 3 }));
    let m = openai(&mock, OPENAI, json!({}));
    let (chunks, err) = drain(&m.model, ask("q")).await;
    assert_eq!(chunks.iter().map(|c| c.text()).collect::<String>(), "a b ");
    assert!(matches!(err, Some(LlmError::Connection { .. })), "{err:?}");
    assert_eq!(
        mock.chat_requests().len(),
        1,
        "never retried after the first chunk"
    );
}

#[tokio::test]
async fn dropped_connection_before_the_first_chunk_is_retried() {
    let mock = MockLlm::start().await.unwrap();
    // Only the empty role chunk gets through.
    mock.push(Turn::text("lost").with_fault(Fault::DropConnection { after_chunks: 1 }));
    mock.push(Turn::text("second try"));
    let m = openai(&mock, OPENAI, json!({}));
    assert_eq!(m.model.invoke(ask("q")).await.unwrap().text(), "second try");
    assert_eq!(mock.chat_requests().len(), 2);
    assert_eq!(m.retries()[0].error.kind(), "connection");
}

#[tokio::test]
async fn hang_times_out() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::Hang));
    let m = openai(&mock, OPENAI, json!({"timeout": 0.3, "max_retries": 0}));
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(mock.chat_requests().len(), 1);
}

#[tokio::test]
async fn stalled_stream_times_out_between_chunks() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("slow words here").with_chunk_delay(Duration::from_secs(5)));
    let m = openai(
        &mock,
        OPENAI,
        json!({"stream_chunk_timeout": 0.2, "max_retries": 0}),
    );
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    match err {
        LlmError::Timeout { message } => assert!(message.contains("no stream chunk"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn connection_refused_is_a_retried_connection_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mock = MockLlm::start().await.unwrap();
    let m = openai(
        &mock,
        OPENAI,
        json!({"base_url": format!("http://{addr}/v1")}),
    );
    let err = m.model.invoke(ask("q")).await.unwrap_err();
    assert!(matches!(err, LlmError::Connection { .. }), "{err:?}");
    assert_eq!(m.retries().len(), 2);
    assert_eq!(mock.request_count(), 0);
}
