use crate::support::*;
use fawn_config::{ContextSize, ContextSizeKind, OneOrMany, SummarizationConfig};
use fawn_llm::scripted::{ScriptedModel, ScriptedTurn};
use fawn_llm::{LlmError, ModelInfo};
use fawn_middleware::summarization::SUMMARY_MESSAGE_NAME;
use fawn_middleware::{DeerFlowSummarizationMiddleware, Hook, Middleware};
use fawn_state::{Message, MessageKind, ThreadState, ToolCall};
use serde_json::json;
use std::sync::Arc;

fn size(kind: ContextSizeKind, value: f64) -> ContextSize {
    ContextSize { kind, value }
}

fn config(trigger: Vec<ContextSize>, keep: ContextSize) -> SummarizationConfig {
    SummarizationConfig {
        enabled: true,
        trigger: Some(OneOrMany::Many(trigger)),
        keep,
        ..Default::default()
    }
}

fn history() -> ThreadState {
    state_of(vec![
        Message::human("Find the bug in parser.rs").with_id("h1"),
        Message::ai("")
            .with_id("a1")
            .with_tool_calls(vec![ToolCall::new(
                "read_file",
                json!({"path": "/p.rs"}),
                "c1",
            )]),
        Message::tool("fn parse() {}", "c1", Some("read_file".into())).with_id("t1"),
        Message::ai("The bug is on line 3.").with_id("a2"),
        Message::human("Now fix it").with_id("h2"),
        Message::ai("")
            .with_id("a3")
            .with_tool_calls(vec![ToolCall::new(
                "str_replace",
                json!({"path": "/p.rs"}),
                "c2",
            )]),
        Message::tool("OK", "c2", Some("str_replace".into())).with_id("t2"),
        Message::ai("Fixed.").with_id("a4"),
    ])
}

#[tokio::test]
async fn compacts_older_messages_keeping_pairs_and_latest_user_message() {
    let fx = Fx::new([ScriptedTurn::text(
        "  The user asked to find and fix a parser bug.  ",
    )]);
    let mw = DeerFlowSummarizationMiddleware::new(config(
        vec![size(ContextSizeKind::Messages, 8.0)],
        size(ContextSizeKind::Messages, 2.0),
    ));
    let mut st = history();
    let out = mw.before_model(&st, &fx.ctx()).await.unwrap();
    let u = out.update.clone().unwrap();
    assert_eq!(
        u.summary_text,
        Some(Some("The user asked to find and fix a parser bug.".into()))
    );
    let msgs = u.messages.clone().unwrap();
    assert!(msgs[0].is_remove_all());
    let ids: Vec<_> = msgs[1..].iter().map(|m| m.id.clone().unwrap()).collect();
    // keep 2 would start at tool result t2 → moved back to its AI message a3; the latest
    // user message h2 is kept in front.
    assert_eq!(ids, ["h2", "a3", "t2", "a4"]);
    // What the summariser saw: the older part only.
    let prompt = fx.model.requests()[0].messages[0].text();
    assert!(prompt.contains("Human: Find the bug in parser.rs"));
    assert!(prompt.contains("[called read_file({\"path\":\"/p.rs\"})]"));
    assert!(prompt.contains("Tool result (read_file): fn parse() {}"));
    assert!(!prompt.contains("Now fix it"));
    assert!(!prompt.contains("Fixed."));
    apply(&mut st, out.update);
    assert_eq!(st.messages.len(), 4);
    assert_eq!(
        Hook::BeforeModel.node_name(mw.name()),
        "DeerFlowSummarizationMiddleware.before_model"
    );
}

#[tokio::test]
async fn below_every_trigger_nothing_happens() {
    let fx = Fx::new([ScriptedTurn::text("never")]);
    let mw = DeerFlowSummarizationMiddleware::new(config(
        vec![
            size(ContextSizeKind::Messages, 50.0),
            size(ContextSizeKind::Tokens, 100_000.0),
        ],
        size(ContextSizeKind::Messages, 2.0),
    ));
    assert!(
        mw.before_model(&history(), &fx.ctx())
            .await
            .unwrap()
            .update
            .is_none()
    );
    assert!(fx.model.requests().is_empty());
}

#[tokio::test]
async fn fraction_of_the_context_window_and_existing_summary_count() {
    let mut fx = Fx::new([ScriptedTurn::text("S2")]);
    fx.model = Arc::new(
        ScriptedModel::new([ScriptedTurn::text("S2")]).with_info(ModelInfo {
            name: "scripted".into(),
            context_window: Some(400),
            ..Default::default()
        }),
    );
    let mw = DeerFlowSummarizationMiddleware::new(config(
        vec![size(ContextSizeKind::Fraction, 0.5)],
        size(ContextSizeKind::Messages, 2.0),
    ));
    let mut st = history();
    assert!(
        mw.before_model(&st, &fx.ctx())
            .await
            .unwrap()
            .update
            .is_none()
    );
    // A long earlier summary pushes the total over 200 tokens.
    st.summary_text = Some("earlier ".repeat(120));
    let u = mw
        .before_model(&st, &fx.ctx())
        .await
        .unwrap()
        .update
        .unwrap();
    assert_eq!(u.summary_text, Some(Some("S2".into())));
    // The new summary merges the previous one.
    let prompt = fx.model.requests()[0].messages[0].text();
    assert!(prompt.contains("earlier earlier"));
}

#[tokio::test]
async fn configured_model_with_fallback_to_the_run_model() {
    let mut fx = Fx::new([ScriptedTurn::text("from run model")]);
    let summarizer = Arc::new(
        ScriptedModel::new([ScriptedTurn::Error(LlmError::Server {
            status: 500,
            retry_after: None,
            message: "x".into(),
        })])
        .with_info(ModelInfo {
            name: "summarizer".into(),
            ..Default::default()
        }),
    );
    fx.extra_models.push(summarizer.clone());
    let mut cfg = config(
        vec![size(ContextSizeKind::Messages, 4.0)],
        size(ContextSizeKind::Messages, 2.0),
    );
    cfg.model_name = Some("summarizer".into());
    let u = DeerFlowSummarizationMiddleware::new(cfg)
        .before_model(&history(), &fx.ctx())
        .await
        .unwrap()
        .update
        .unwrap();
    assert_eq!(summarizer.requests().len(), 1);
    assert_eq!(u.summary_text, Some(Some("from run model".into())));
}

#[tokio::test]
async fn failing_summary_keeps_history() {
    let fx = Fx::new([ScriptedTurn::Error(LlmError::Timeout {
        message: "slow".into(),
    })]);
    let mw = DeerFlowSummarizationMiddleware::new(config(
        vec![size(ContextSizeKind::Messages, 4.0)],
        size(ContextSizeKind::Messages, 2.0),
    ));
    assert!(
        mw.before_model(&history(), &fx.ctx())
            .await
            .unwrap()
            .update
            .is_none()
    );
}

#[tokio::test]
async fn summary_is_projected_into_every_request() {
    let fx = Fx::new([ScriptedTurn::text("ok")]);
    let mw = DeerFlowSummarizationMiddleware::new(SummarizationConfig::default());
    let mut st = state_of(vec![Message::human("next step").with_id("h")]);
    st.summary_text = Some("We fixed the parser.".into());
    mw.wrap_model_call(fx.request(st.messages.clone()), &st, &fx.ctx(), &Invoke)
        .await
        .unwrap();
    let sent = &fx.model.requests()[0].messages;
    assert_eq!(sent[0].kind, MessageKind::System);
    assert_eq!(sent[1].kind, MessageKind::Human);
    assert_eq!(sent[1].name.as_deref(), Some(SUMMARY_MESSAGE_NAME));
    assert!(sent[1].text().contains("We fixed the parser."));
    assert_eq!(sent[2].text(), "next step");
    // The state itself never holds the projection.
    assert_eq!(st.messages.len(), 1);
}

/// Manual compaction (`POST /api/threads/{id}/compact {force: true}`) ignores the triggers.
#[tokio::test]
async fn forced_compaction_reports_counts() {
    let fx = Fx::new([ScriptedTurn::text("S")]);
    let mw = DeerFlowSummarizationMiddleware::new(config(
        vec![size(ContextSizeKind::Messages, 1000.0)],
        size(ContextSizeKind::Messages, 2.0),
    ));
    let st = history();
    let model: Arc<dyn fawn_llm::ChatModel> = fx.model.clone();
    assert!(
        mw.compact(&st, &model, &fx.registry(), false)
            .await
            .unwrap()
            .is_none()
    );
    let c = mw
        .compact(&st, &model, &fx.registry(), true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((c.removed_message_count, c.preserved_message_count), (4, 4));
    assert_eq!(c.update.summary_text, Some(Some("S".into())));
    // Nothing older than the kept part: nothing to do.
    let short = state_of(vec![
        Message::human("hi").with_id("h"),
        Message::ai("yo").with_id("a"),
    ]);
    assert!(
        mw.compact(&short, &model, &fx.registry(), true)
            .await
            .unwrap()
            .is_none()
    );
}
