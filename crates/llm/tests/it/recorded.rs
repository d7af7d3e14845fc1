//! Provider streams as providers send them: recordings written from each provider's API
//! reference (`crates/testkit/recordings/`), replayed byte for byte by the mock.

use crate::support::{Built, ask, claude, drain, gemini, lookup_tool, ollama, openai};
use fawn_llm::ChatRequest;
use fawn_llm::gemini::CALL_SIGNATURES_KEY;
use fawn_state::{Message, merge_chunks};
use fawn_testkit::{MockLlm, Turn};
use serde_json::json;

fn recording(name: &str) -> Turn {
    Turn::recording(name).unwrap()
}

fn with_tools(text: &str) -> ChatRequest {
    ChatRequest {
        tools: vec![lookup_tool()].into(),
        ..ask(text)
    }
}

/// The model of `provider` on `mock`.
fn model(provider: &str, mock: &MockLlm) -> Built {
    match provider {
        "openai" => openai(mock, "langchain_openai:ChatOpenAI", json!({})),
        "anthropic" => claude(mock, json!({})),
        "gemini" => gemini(mock, json!({})),
        "ollama" => ollama(mock, json!({})),
        other => panic!("no provider {other}"),
    }
}

/// Replays `file` to `provider` and returns the answer as `invoke` folds it.
async fn answer(provider: &str, file: &str) -> Message {
    let mock = MockLlm::start().await.unwrap();
    mock.push(recording(file));
    let m = model(provider, &mock);
    m.model
        .invoke(with_tools("what colour?"))
        .await
        .unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn assert_no_nameless_call(file: &str, m: &Message) {
    assert!(
        m.tool_calls.is_empty(),
        "{file}: a call without a name came back: {:?}",
        m.tool_calls
    );
    assert!(
        m.invalid_tool_calls.is_empty(),
        "{file}: {:?}",
        m.invalid_tool_calls
    );
}

#[tokio::test]
async fn anthropic_last_message_delta_usage_wins_for_every_count() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(recording("anthropic/usage_in_final_message_delta.sse"));
    let m = claude(&mock, json!({}));
    let (chunks, err) = drain(&m.model, ask("when does it renew?")).await;
    assert!(err.is_none(), "{err:?}");
    let msg = merge_chunks(&chunks);
    assert_eq!(msg.text(), "The contract renews on 1 March.");
    let u = msg.usage_metadata.unwrap();
    // input 1520 + cache read 2400 + cache creation 1200, all from the final message_delta.
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.total_tokens),
        (5120, 87, 5207)
    );
    assert_eq!(
        u.input_token_details.unwrap(),
        json!({"cache_read": 2400, "cache_creation": 1200})
    );
}

#[tokio::test]
async fn anthropic_server_tool_use_is_not_a_tool_call_and_updates_usage() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(recording("anthropic/server_tool_web_search.sse"));
    let m = claude(&mock, json!({}));
    let msg = m
        .model
        .invoke(with_tools("weather in Lyon?"))
        .await
        .unwrap();
    assert_no_nameless_call("anthropic/server_tool_web_search.sse", &msg);
    assert_eq!(
        msg.text(),
        "I'll search for that.It is sunny in Lyon today, with a high of 24 °C."
    );
    assert_eq!(msg.response_metadata["finish_reason"], "stop");
    let u = msg.usage_metadata.unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (10682, 510));
}

#[tokio::test]
async fn openai_calls_without_a_name_are_dropped() {
    let m = answer("openai", "openai/tool_call_empty_name.sse").await;
    assert_no_nameless_call("openai/tool_call_empty_name.sse", &m);
    let m = answer("openai", "openai/tool_call_name_not_string.sse").await;
    assert_no_nameless_call("openai/tool_call_name_not_string.sse", &m);
    assert_eq!(m.text(), "Checking.");
}

#[tokio::test]
async fn anthropic_calls_without_a_name_are_dropped() {
    let m = answer("anthropic", "anthropic/tool_use_empty_name.sse").await;
    assert_no_nameless_call("anthropic/tool_use_empty_name.sse", &m);
    assert_eq!(m.text(), "Let me look that up.");
    let m = answer("anthropic", "anthropic/tool_use_name_not_string.sse").await;
    assert_no_nameless_call("anthropic/tool_use_name_not_string.sse", &m);
}

#[tokio::test]
async fn gemini_calls_without_a_name_are_dropped() {
    let m = answer("gemini", "gemini/function_call_empty_name.sse").await;
    assert_no_nameless_call("gemini/function_call_empty_name.sse", &m);
    assert!(
        !m.additional_kwargs.contains_key(CALL_SIGNATURES_KEY),
        "no signature kept for a call that was dropped: {:?}",
        m.additional_kwargs
    );
    let m = answer("gemini", "gemini/function_call_name_not_string.sse").await;
    assert_no_nameless_call("gemini/function_call_name_not_string.sse", &m);
    assert_eq!(m.text(), "Checking.");
}

#[tokio::test]
async fn ollama_calls_without_a_name_are_dropped() {
    let m = answer("ollama", "ollama/tool_call_empty_name.ndjson").await;
    assert_no_nameless_call("ollama/tool_call_empty_name.ndjson", &m);
    let m = answer("ollama", "ollama/tool_call_name_not_string.ndjson").await;
    assert_no_nameless_call("ollama/tool_call_name_not_string.ndjson", &m);
    assert_eq!(m.text(), "Checking.");
}

#[tokio::test]
async fn gemini_streamed_function_call_arguments_assemble_into_whole_calls() {
    let file = "gemini/function_call_partial_args.sse";
    let mock = MockLlm::start().await.unwrap();
    mock.push(recording(file));
    mock.push(Turn::text("Done."));
    let g = gemini(&mock, json!({}));
    let (chunks, err) = drain(&g.model, with_tools("look up two things")).await;
    assert!(err.is_none(), "{err:?}");
    let m = merge_chunks(&chunks);
    assert!(
        m.invalid_tool_calls.is_empty(),
        "{:?}",
        m.invalid_tool_calls
    );
    assert_eq!(m.tool_calls.len(), 2, "{:?}", m.tool_calls);
    let first = &m.tool_calls[0];
    assert_eq!(first.name, "lookup");
    assert_eq!(
        serde_json::Value::Object(first.args.clone()),
        json!({"key": "favourite colour",
               "options": {"limit": 3, "exact": true, "tags": ["paint", "wall"], "cursor": null}})
    );
    let first_id = first.id.clone().unwrap();
    assert_eq!(
        m.additional_kwargs[CALL_SIGNATURES_KEY][&first_id], "EpIDCo8DAdHtim8sF2o4c1uQ9w0bXx",
        "the signature of the call's first part is kept"
    );
    let second = &m.tool_calls[1];
    assert_eq!(second.name, "lookup");
    assert_eq!(second.id.as_deref(), Some("fc_size_2"));
    assert_eq!(
        serde_json::Value::Object(second.args.clone()),
        json!({"key": "size"})
    );
    assert_eq!(m.response_metadata["finish_reason"], "tool_calls");

    // Sent back, the answer is two whole function calls (no fragments), each answered.
    let mut history = with_tools("look up two things");
    history.messages.push(m.clone());
    history.messages.push(Message::tool(
        "red",
        first_id.clone(),
        Some("lookup".into()),
    ));
    history
        .messages
        .push(Message::tool("large", "fc_size_2", Some("lookup".into())));
    let reply = g.model.invoke(history).await.unwrap();
    assert_eq!(reply.text(), "Done.");
    let sent = mock.last_request().unwrap().json().clone();
    let model_turn = &sent["contents"][1];
    assert_eq!(model_turn["role"], "model");
    let parts = model_turn["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(parts[0]["functionCall"]["name"], "lookup");
    assert_eq!(parts[0]["functionCall"]["args"]["key"], "favourite colour");
    assert_eq!(
        parts[0]["thoughtSignature"],
        "EpIDCo8DAdHtim8sF2o4c1uQ9w0bXx"
    );
    assert_eq!(
        parts[1]["functionCall"],
        json!({"name": "lookup", "args": {"key": "size"}, "id": "fc_size_2"})
    );
    assert!(!model_turn.to_string().contains("partialArgs"));
}

#[tokio::test]
async fn gemini_parts_fawn_does_not_know_are_ignored() {
    let file = "gemini/unknown_parts.sse";
    let mock = MockLlm::start().await.unwrap();
    mock.push(recording(file));
    let g = gemini(&mock, json!({}));
    let (chunks, err) = drain(&g.model, with_tools("what is six times seven?")).await;
    assert!(err.is_none(), "{err:?}");
    let m = merge_chunks(&chunks);
    assert_no_nameless_call(file, &m);
    assert_eq!(m.text(), "Let me compute that. The answer is 42.");
    assert_eq!(m.response_metadata["finish_reason"], "stop");
}
