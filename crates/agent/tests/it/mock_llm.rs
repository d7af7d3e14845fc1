//! End to end over HTTP with the testkit mock LLM: what the model is sent, streaming,
//! cancellation, and bad model output (malformed arguments, unknown tools, empty answers,
//! dropped streams).

use crate::support::*;
use fawn_agent::{GraphRunner, RunOutcome};
use fawn_state::{MessageKind, StreamEvent};
use fawn_testkit::{Fault, MockLlm, MockToolCall, Turn};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn tool_turn_over_http_sends_history_and_tools() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::tool_call("echo", json!({"text": "ping"})));
    mock.push(Turn::text("All done."));
    let agent = AgentBuilder::new(mock_model(&mock, false))
        .tool(Echo)
        .build();
    let (out, rec) = run(&agent, spec("call echo")).await;
    ok(&out);
    let reqs = mock.chat_requests();
    assert_eq!(reqs.len(), 2);
    let first = reqs[0].json();
    assert_eq!(first["stream"], true);
    assert_eq!(first["model"], "gpt-test");
    let msgs = reqs[0].messages();
    assert_eq!(msgs[0]["role"], "system");
    assert!(
        msgs[0]["content"]
            .as_str()
            .unwrap()
            .contains("<critical_reminders>")
    );
    assert_eq!(msgs[1], json!({"role": "user", "content": "call echo"}));
    assert_eq!(first["tools"][0]["function"]["name"], "echo");
    assert_eq!(
        first["tools"][0]["function"]["parameters"]["properties"]["text"]["type"],
        "string"
    );
    let second = reqs[1].messages();
    assert_eq!(second.len(), 4);
    assert_eq!(second[2]["role"], "assistant");
    let call = &second[2]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "echo");
    assert_eq!(call["function"]["arguments"], r#"{"text":"ping"}"#);
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["tool_call_id"], call["id"]);
    assert_eq!(second[3]["content"], "echo: ping");
    // Streamed text arrives as chunks of one message, ending with a `last` chunk.
    let chunks: Vec<_> = rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::MessageChunk { chunk, metadata } if metadata["langgraph_step"] == 3 => {
                Some(chunk)
            }
            _ => None,
        })
        .collect();
    assert!(chunks.len() >= 3);
    let text: String = chunks.iter().map(|c| c.text()).collect();
    assert_eq!(text, "All done.");
    assert_eq!(
        chunks.last().unwrap().chunk_position.as_deref(),
        Some("last")
    );
    let state = rec.last_state();
    assert_eq!(state.messages.last().unwrap().id, chunks[0].id);
    assert_eq!(
        state.messages.last().unwrap().response_metadata["finish_reason"],
        "stop"
    );
}

#[tokio::test]
async fn cancellation_drops_the_model_stream_promptly() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::text("one two three four five six seven eight nine ten")
            .with_chunk_delay(Duration::from_millis(400)),
    );
    let agent = AgentBuilder::new(mock_model(&mock, false)).build();
    let rec = Recorder::new();
    let cancel = CancellationToken::new();
    let task = {
        let rec = rec.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move { agent.run(spec("count"), rec, cancel).await })
    };
    // Wait for the first token, then cancel.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !rec.log().iter().any(|l| l == "chunk") {
        assert!(Instant::now() < deadline, "no token arrived");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let fired = Instant::now();
    cancel.cancel();
    let out = tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the run returned promptly")
        .unwrap();
    let returned = fired.elapsed();
    assert_eq!(out, RunOutcome::Cancelled);
    assert!(
        mock.wait_until(Duration::from_secs(2), |m| m.streams_aborted() == 1)
            .await,
        "the mock saw the stream abandoned"
    );
    let dropped = fired.elapsed();
    // Ten chunks 400 ms apart would take 4 s; being cancelled means far less.
    assert!(
        returned < Duration::from_secs(1),
        "returned after {returned:?}"
    );
    eprintln!("cancel → run returned {returned:?}, stream dropped seen by mock {dropped:?}");
    assert_eq!(mock.streams_completed(), 0);
    // Nothing after the start checkpoint was written.
    assert_eq!(rec.checkpoints().len(), 2);
}

#[tokio::test]
async fn malformed_tool_arguments_get_an_error_tool_message() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::tool_calls([MockToolCall::raw(
        "echo",
        r#"{"text": oops}"#,
    )
    .with_id("call_bad")]));
    mock.push(Turn::text("Let me retry properly."));
    let agent = AgentBuilder::new(mock_model(&mock, false))
        .tool(Echo)
        .build();
    let (out, rec) = run(&agent, spec("go")).await;
    ok(&out);
    let state = rec.last_state();
    let ai = &state.messages[1];
    assert!(ai.tool_calls.is_empty());
    assert_eq!(ai.invalid_tool_calls.len(), 1);
    let tm = &state.messages[2];
    assert_eq!(tm.kind, MessageKind::Tool);
    assert_eq!(tm.tool_call_id.as_deref(), Some("call_bad"));
    assert_eq!(tm.status.as_deref(), Some("error"));
    assert!(tm.text().contains("could not be parsed"), "{}", tm.text());
    // The provider got a well-formed history: the call and its (error) answer.
    let second = mock.chat_requests()[1].messages().to_vec();
    assert_eq!(second[2]["tool_calls"][0]["id"], "call_bad");
    assert_eq!(second[3]["tool_call_id"], "call_bad");
    assert_eq!(
        state.messages.last().unwrap().text(),
        "Let me retry properly."
    );
}

#[tokio::test]
async fn unknown_tool_and_empty_answer_over_http() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::tool_call("no_such_tool", json!({"x": 1})));
    mock.push(Turn::text(""));
    let agent = AgentBuilder::new(mock_model(&mock, false))
        .tool(Echo)
        .build();
    let (out, rec) = run(&agent, spec("go")).await;
    ok(&out);
    let state = rec.last_state();
    assert!(
        state.messages[2]
            .text()
            .starts_with("Error: no_such_tool is not a valid tool, try one of [echo]")
    );
    let last = state.messages.last().unwrap();
    assert_eq!(last.kind, MessageKind::Ai);
    assert_eq!(last.text(), "");
    assert!(rec.checkpoints().last().unwrap().next.is_empty());
}

#[tokio::test]
async fn dropped_stream_fails_the_run_and_the_thread_stays_usable() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(
        Turn::text("this answer will be cut short")
            .with_fault(Fault::DropConnection { after_chunks: 2 }),
    );
    let agent = AgentBuilder::new(mock_model(&mock, false)).build();
    let (out, rec) = run(&agent, spec("go")).await;
    match &out {
        RunOutcome::Error { error, message } => {
            assert_eq!(error, "APIConnectionError", "{message}");
        }
        other => panic!("{other:?}"),
    }
    // State so far is consistent: the input was written, nothing half-done after it.
    let last = rec.checkpoints().pop().unwrap();
    assert_eq!(last.next, ["model"]);
    assert_eq!(last.state.messages.len(), 1);
    // The next run on the thread works.
    mock.push(Turn::text("Back again."));
    let (out, rec2) = run(&agent, follow_up(&rec, Some(json!({"messages": "retry"})))).await;
    ok(&out);
    let texts: Vec<String> = rec2
        .last_state()
        .messages
        .iter()
        .map(|m| m.text())
        .collect();
    assert_eq!(texts, ["go", "retry", "Back again."]);

    // A stream that sends garbage is reported too.
    mock.push(Turn::text("x y z").with_fault(Fault::MalformedChunk { after_chunks: 1 }));
    let (out, _) = run(&agent, spec("again")).await;
    assert!(matches!(out, RunOutcome::Error { .. }), "{out:?}");
    // So is an HTTP error before the stream.
    mock.push(Turn::fault(Fault::Unauthorized));
    let (out, _) = run(&agent, spec("again")).await;
    assert!(
        matches!(&out, RunOutcome::Error { error, .. } if error == "AuthenticationError"),
        "{out:?}"
    );
}

/// A model of DeerFlow class `use_` on `mock`, built through the registry.
fn native_model(
    mock: &MockLlm,
    use_: &str,
    model: &str,
) -> std::sync::Arc<dyn fawn_llm::ChatModel> {
    let config: fawn_config::AppConfig = serde_json::from_value(json!({"models": [{
        "name": "native", "use": use_, "model": model, "base_url": mock.url(),
        "api_key": "k", "max_retries": 0, "supports_thinking": true,
    }]}))
    .unwrap();
    fawn_llm::ModelRegistry::from_config(&config)
        .unwrap()
        .default_model()
        .unwrap()
}

/// The lead agent runs a tool-calling turn through the native Gemini and Ollama providers:
/// the call is executed, its result goes back in each API's own shape, the answer streams.
#[tokio::test]
async fn tool_turn_through_native_gemini_and_ollama() {
    for (use_, model) in [
        (
            "langchain_google_genai:ChatGoogleGenerativeAI",
            "gemini-3-flash",
        ),
        ("langchain_ollama:ChatOllama", "qwen3:8b"),
    ] {
        let mock = MockLlm::start().await.unwrap();
        mock.push(Turn::tool_call("echo", json!({"text": "ping"})).with_reasoning("Use echo."));
        mock.push(Turn::text("All done."));
        let agent = AgentBuilder::new(native_model(&mock, use_, model))
            .tool(Echo)
            .build();
        let (out, rec) = run(&agent, spec("call echo")).await;
        ok(&out);
        let reqs = mock.chat_requests();
        assert_eq!(reqs.len(), 2, "{use_}");
        let second = reqs[1].json();
        if use_.contains("google") {
            let contents = second["contents"].as_array().unwrap();
            let call = contents
                .iter()
                .flat_map(|c| c["parts"].as_array().unwrap())
                .find(|p| p.get("functionCall").is_some())
                .unwrap();
            assert_eq!(call["functionCall"]["args"], json!({"text": "ping"}));
            assert!(call["thoughtSignature"].is_string(), "signature replayed");
            let last = contents.last().unwrap();
            assert_eq!(
                last["parts"][0]["functionResponse"],
                json!({"name": "echo", "response": {"output": "echo: ping"}})
            );
            assert!(second["systemInstruction"]["parts"][0]["text"].is_string());
        } else {
            let msgs = reqs[1].messages();
            let n = msgs.len();
            assert_eq!(
                msgs[n - 2]["tool_calls"][0]["function"]["arguments"],
                json!({"text": "ping"})
            );
            assert_eq!(msgs[n - 2]["thinking"], "Use echo.");
            assert_eq!(
                msgs[n - 1],
                json!({"role": "tool", "content": "echo: ping", "tool_name": "echo"})
            );
            assert_eq!(second["think"], true);
        }
        let state = rec.last_state();
        let tool = &state.messages[2];
        assert_eq!(tool.kind, MessageKind::Tool, "{use_}");
        assert_eq!(tool.tool_call_id, state.messages[1].tool_calls[0].id);
        assert_eq!(state.messages.last().unwrap().text(), "All done.", "{use_}");
        let streamed = rec
            .events()
            .into_iter()
            .filter(|e| matches!(e, StreamEvent::MessageChunk { .. }))
            .count();
        assert!(streamed >= 3, "{use_}: {streamed}");
    }
}
