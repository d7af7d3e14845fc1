//! Recorded provider streams (`crates/testkit/recordings/`) through the whole loop: a tool
//! call without a usable name is never executed and never looped on, whatever the provider.

use crate::support::*;
use async_trait::async_trait;
use fawn_llm::ChatModel;
use fawn_state::MessageKind;
use fawn_testkit::{MockLlm, Turn};
use fawn_tools::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The tool the recordings' calls would have meant; counts its calls.
struct Lookup(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Lookup {
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "Look up a key"
    }
    fn parameters(&self) -> Arc<Value> {
        Arc::new(json!({"type": "object", "properties": {"key": {"type": "string"}}}))
    }
    async fn call(&self, _: Map<String, Value>, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::text("red"))
    }
}

/// A model of `provider` on `mock`, built from a config entry, without retries.
fn provider_model(provider: &str, mock: &MockLlm) -> Arc<dyn ChatModel> {
    let entry = match provider {
        "openai" => json!({"use": "langchain_openai:ChatOpenAI", "model": "gpt-test",
                           "base_url": mock.base_url(), "api_key": "sk-test"}),
        "anthropic" => json!({"use": "langchain_anthropic:ChatAnthropic", "model": "claude-test",
                              "base_url": mock.url(), "api_key": "ant-key"}),
        "gemini" => json!({"use": "langchain_google_genai:ChatGoogleGenerativeAI",
                           "model": "gemini-2.5-flash", "base_url": mock.url(), "api_key": "g-key"}),
        "ollama" => json!({"use": "langchain_ollama:ChatOllama", "model": "qwen3:8b",
                           "base_url": mock.url()}),
        other => panic!("no provider {other}"),
    };
    let mut entry = entry.as_object().unwrap().clone();
    entry.insert("name".into(), json!("recorded"));
    entry.insert("max_retries".into(), json!(0));
    let config: fawn_config::AppConfig =
        serde_json::from_value(json!({ "models": [entry] })).unwrap();
    fawn_llm::ModelRegistry::from_config(&config)
        .unwrap()
        .default_model()
        .unwrap()
}

/// A model that keeps answering with the recording `file`: the run ends after its first
/// answer, normally, without running a tool or asking the model again.
async fn nameless_call_ends_the_run(provider: &str, file: &str) {
    let mock = MockLlm::start().await.unwrap();
    let turn = Turn::recording(file).unwrap();
    mock.push_all([turn.clone(), turn.clone(), turn]);
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = AgentBuilder::new(provider_model(provider, &mock))
        .tool(Lookup(calls.clone()))
        .build();
    let (out, rec) = run(&agent, spec("what colour is it?")).await;
    assert!(
        matches!(out, fawn_agent::RunOutcome::Success { .. }),
        "{file}: {out:?}"
    );
    assert_eq!(
        mock.chat_requests().len(),
        1,
        "{file}: the model was asked again"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "{file}: a tool ran");
    let state = rec.last_state();
    let kinds: Vec<_> = state.messages.iter().map(|m| m.kind.clone()).collect();
    assert_eq!(kinds, [MessageKind::Human, MessageKind::Ai], "{file}");
    let ai = &state.messages[1];
    assert!(ai.tool_calls.is_empty(), "{file}: {:?}", ai.tool_calls);
    assert!(
        ai.invalid_tool_calls.is_empty(),
        "{file}: {:?}",
        ai.invalid_tool_calls
    );
    assert!(rec.checkpoints().last().unwrap().next.is_empty(), "{file}");
}

#[tokio::test]
async fn openai_call_without_a_name_ends_the_run() {
    nameless_call_ends_the_run("openai", "openai/tool_call_empty_name.sse").await;
    nameless_call_ends_the_run("openai", "openai/tool_call_name_not_string.sse").await;
}

#[tokio::test]
async fn anthropic_call_without_a_name_ends_the_run() {
    nameless_call_ends_the_run("anthropic", "anthropic/tool_use_empty_name.sse").await;
    nameless_call_ends_the_run("anthropic", "anthropic/tool_use_name_not_string.sse").await;
    nameless_call_ends_the_run("anthropic", "anthropic/server_tool_web_search.sse").await;
}

#[tokio::test]
async fn gemini_call_without_a_name_ends_the_run() {
    nameless_call_ends_the_run("gemini", "gemini/function_call_empty_name.sse").await;
    nameless_call_ends_the_run("gemini", "gemini/function_call_name_not_string.sse").await;
    nameless_call_ends_the_run("gemini", "gemini/unknown_parts.sse").await;
}

#[tokio::test]
async fn ollama_call_without_a_name_ends_the_run() {
    nameless_call_ends_the_run("ollama", "ollama/tool_call_empty_name.ndjson").await;
    nameless_call_ends_the_run("ollama", "ollama/tool_call_name_not_string.ndjson").await;
}

#[tokio::test]
async fn gemini_streamed_arguments_run_the_tool_once_per_call() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::recording("gemini/function_call_partial_args.sse").unwrap());
    mock.push(Turn::text("Favourite colour red, size red."));
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = AgentBuilder::new(provider_model("gemini", &mock))
        .tool(Lookup(calls.clone()))
        .build();
    let (out, rec) = run(&agent, spec("look up two things")).await;
    ok(&out);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(mock.chat_requests().len(), 2);
    let state = rec.last_state();
    let ai = &state.messages[1];
    assert_eq!(ai.tool_calls.len(), 2);
    assert_eq!(ai.tool_calls[0].args["key"], "favourite colour");
    assert_eq!(ai.tool_calls[1].args["key"], "size");
    assert_eq!(
        state.messages.last().unwrap().text(),
        "Favourite colour red, size red."
    );
}
