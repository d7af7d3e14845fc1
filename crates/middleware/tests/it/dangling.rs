use crate::support::*;
use fawn_llm::scripted::ScriptedTurn;
use fawn_middleware::dangling::INTERRUPTED_TOOL_CALL_TEXT;
use fawn_middleware::{DanglingToolCallMiddleware, Middleware};
use fawn_state::{Message, MessageKind, ToolCall};
use serde_json::json;

#[tokio::test]
async fn placeholder_reaches_the_provider_and_state_is_untouched() {
    let fx = Fx::new([ScriptedTurn::text("ok")]);
    let st = state_of(vec![
        Message::human("list files").with_id("h1"),
        Message::ai("")
            .with_id("a1")
            .with_tool_calls(vec![ToolCall::new("ls", json!({"path": "/"}), "call_9")]),
        Message::human("are you there?").with_id("h2"),
    ]);
    let before = st.clone();
    DanglingToolCallMiddleware::new()
        .wrap_model_call(fx.request(st.messages.clone()), &st, &fx.ctx(), &Invoke)
        .await
        .unwrap();
    let sent = &fx.model.requests()[0].messages;
    // system, human, ai, placeholder tool, human
    assert_eq!(sent.len(), 5);
    assert_eq!(sent[2].kind, MessageKind::Ai);
    assert_eq!(sent[3].kind, MessageKind::Tool);
    assert_eq!(sent[3].tool_call_id.as_deref(), Some("call_9"));
    assert_eq!(sent[3].text(), INTERRUPTED_TOOL_CALL_TEXT);
    assert_eq!(sent[3].status.as_deref(), Some("error"));
    assert_eq!(sent[4].text(), "are you there?");
    assert_eq!(st, before);
}

#[tokio::test]
async fn orphan_results_are_dropped() {
    let fx = Fx::new([ScriptedTurn::text("ok")]);
    let st = state_of(vec![
        Message::human("hi").with_id("h1"),
        Message::tool("stale", "gone", Some("ls".into())).with_id("t1"),
        Message::ai("hello").with_id("a1"),
    ]);
    DanglingToolCallMiddleware::new()
        .wrap_model_call(fx.request(st.messages.clone()), &st, &fx.ctx(), &Invoke)
        .await
        .unwrap();
    let kinds: Vec<_> = fx.model.requests()[0]
        .messages
        .iter()
        .map(|m| m.kind.clone())
        .collect();
    assert_eq!(
        kinds,
        [MessageKind::System, MessageKind::Human, MessageKind::Ai]
    );
}
