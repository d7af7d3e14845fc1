use crate::support::{ask, openai};
use fawn_state::Message;
use fawn_testkit::{MockLlm, Turn};
use serde_json::{Value, json};

/// First turn streams reasoning; the second request carries the first answer as history.
/// Returns the assistant message of the second request as the mock recorded it.
async fn round_trip(use_: &str, turn: Turn) -> (Message, Value) {
    let mock = MockLlm::start().await.unwrap();
    mock.push(turn);
    mock.push(Turn::text("second"));
    let m = openai(&mock, use_, json!({"supports_thinking": true}));
    let mut req = ask("first question");
    let first = m.model.invoke(req.clone()).await.unwrap();
    req.messages.push(first.clone());
    req.messages.push(Message::human("follow-up"));
    m.model.invoke(req).await.unwrap();
    let sent = mock.last_request().unwrap().messages()[2].clone();
    assert_eq!(sent["role"], "assistant");
    (first, sent)
}

#[tokio::test]
async fn deepseek_style_reasoning_is_streamed_in_and_replayed() {
    let (first, sent) = round_trip(
        "deerflow.models.patched_deepseek:PatchedChatDeepSeek",
        Turn::reasoning("Let me think step by step.", "The answer is 4."),
    )
    .await;
    assert_eq!(
        first.additional_kwargs["reasoning_content"],
        "Let me think step by step."
    );
    assert_eq!(first.text(), "The answer is 4.");
    assert_eq!(first.response_metadata["model_provider"], "deepseek");
    assert_eq!(sent["content"], "The answer is 4.");
    assert_eq!(sent["reasoning_content"], "Let me think step by step.");
}

#[tokio::test]
async fn plain_openai_receives_reasoning_but_does_not_replay_it() {
    let (first, sent) = round_trip(
        "langchain_openai:ChatOpenAI",
        Turn::reasoning("hidden thoughts", "visible"),
    )
    .await;
    assert_eq!(
        first.additional_kwargs["reasoning_content"],
        "hidden thoughts"
    );
    assert_eq!(sent, json!({"role": "assistant", "content": "visible"}));
}

#[tokio::test]
async fn other_replaying_classes() {
    for class in [
        "deerflow.models.patched_mimo:PatchedChatMiMo",
        "deerflow.models.patched_stepfun:PatchedChatStepFun",
        "deerflow.models.patched_siliconflow:PatchedChatSiliconFlow",
        "deerflow.models.patched_kimi:PatchedKimiK2",
        "deerflow.models.patched_openai:PatchedChatOpenAI",
    ] {
        let (_, sent) = round_trip(class, Turn::reasoning("r", "t")).await;
        assert_eq!(sent["reasoning_content"], "r", "{class}");
    }
    // LangChain's own ChatDeepSeek captures reasoning but does not send it back.
    let (first, sent) =
        round_trip("langchain_deepseek:ChatDeepSeek", Turn::reasoning("r", "t")).await;
    assert_eq!(first.additional_kwargs["reasoning_content"], "r");
    assert!(sent.get("reasoning_content").is_none());
}

#[tokio::test]
async fn vllm_reasoning_field_round_trips_as_reasoning() {
    let (first, sent) = round_trip(
        "deerflow.models.vllm_provider:VllmChatModel",
        Turn::reasoning("qwen thinks", "qwen answers").with_reasoning_field("reasoning"),
    )
    .await;
    assert_eq!(first.additional_kwargs["reasoning_content"], "qwen thinks");
    assert_eq!(first.additional_kwargs["reasoning"], "qwen thinks");
    assert_eq!(sent["reasoning"], "qwen thinks");
    assert!(sent.get("reasoning_content").is_none());
}

#[tokio::test]
async fn minimax_reasoning_details_become_reasoning_content() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::text("hi").with_delta_extra(
        "reasoning_details",
        json!([{"type": "reasoning.text", "text": "mm"}]),
    ));
    let m = openai(
        &mock,
        "deerflow.models.patched_minimax:PatchedChatMiniMax",
        json!({}),
    );
    let msg = m.model.invoke(ask("q")).await.unwrap();
    assert_eq!(msg.additional_kwargs["reasoning_content"], "mm");
}
