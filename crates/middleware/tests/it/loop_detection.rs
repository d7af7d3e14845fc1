use crate::support::*;
use fawn_config::LoopDetectionConfig;
use fawn_llm::scripted::ScriptedTurn;
use fawn_middleware::loop_detection::{HARD_STOP_TEXT, LoopTracker, WARNING_TEXT};
use fawn_middleware::{LoopDetectionMiddleware, Middleware};
use fawn_state::{Message, ThreadState, ToolCall};
use serde_json::json;
use std::sync::Arc;

fn ai_calls(id: &str, calls: Vec<ToolCall>) -> Message {
    let mut m = Message::ai("Let me look.")
        .with_id(id)
        .with_tool_calls(calls);
    m.response_metadata
        .insert("finish_reason".into(), json!("tool_calls"));
    m.additional_kwargs.insert(
        "tool_calls".into(),
        json!([{"id": "x", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]),
    );
    m
}

fn state_after(ai: Message) -> ThreadState {
    state_of(vec![Message::human("go").with_id("h"), ai])
}

#[tokio::test]
async fn warning_goes_into_the_next_request_then_forced_stop() {
    let fx = Fx::new((0..10).map(|_| ScriptedTurn::text("ok")));
    let ctx = fx.ctx();
    let tracker = Arc::new(LoopTracker::new(100));
    let mw = LoopDetectionMiddleware::new(LoopDetectionConfig::default(), tracker);
    mw.before_agent(&ThreadState::default(), &ctx)
        .await
        .unwrap();
    let call = || {
        vec![ToolCall::new(
            "bash",
            json!({"command": "ls", "timeout": 1}),
            "c",
        )]
    };
    for i in 1..=4 {
        let st = state_after(ai_calls(&format!("a{i}"), call()));
        let out = mw.after_model(&st, &ctx).await.unwrap();
        assert!(out.update.is_none(), "iteration {i}");
        // The model call that follows.
        mw.wrap_model_call(fx.request(st.messages.clone()), &st, &ctx, &Invoke)
            .await
            .unwrap();
    }
    let reqs = fx.model.requests();
    let last_msg = |i: usize| reqs[i].messages.last().unwrap().clone();
    // Requests 1–3 end with the AI message; the 4th model call (after the 3rd repeat) carries
    // the warning as a hidden human message; the warning is sent once.
    assert_eq!(last_msg(1).text(), "Let me look.");
    assert_eq!(last_msg(2).text(), WARNING_TEXT);
    assert_eq!(last_msg(2).kind, fawn_state::MessageKind::Human);
    assert_eq!(last_msg(2).additional_kwargs["hide_from_ui"], true);
    assert_eq!(last_msg(3).text(), "Let me look.");
    // The 5th identical set is stopped.
    let st = state_after(ai_calls("a5", call()));
    let out = mw.after_model(&st, &ctx).await.unwrap();
    let stopped = &out.update.unwrap().messages.unwrap()[0];
    assert_eq!(stopped.id.as_deref(), Some("a5"));
    assert!(stopped.tool_calls.is_empty());
    assert!(!stopped.additional_kwargs.contains_key("tool_calls"));
    assert_eq!(stopped.text(), format!("Let me look.\n\n{HARD_STOP_TEXT}"));
    assert_eq!(stopped.response_metadata["finish_reason"], "stop");
    assert_eq!(ctx.stop_reason().as_deref(), Some("loop_capped"));
}

#[tokio::test]
async fn history_is_per_thread_and_survives_runs() {
    let fx = Fx::new([]);
    let tracker = Arc::new(LoopTracker::new(100));
    let call = vec![ToolCall::new("web_search", json!({"query": "rust"}), "c")];
    // Two runs of the same thread (two chains) share the process-wide history.
    for _ in 0..2 {
        let mw = LoopDetectionMiddleware::new(LoopDetectionConfig::default(), tracker.clone());
        let out = mw
            .after_model(&state_after(ai_calls("a", call.clone())), &fx.ctx())
            .await
            .unwrap();
        assert!(out.update.is_none());
    }
    let mw = LoopDetectionMiddleware::new(LoopDetectionConfig::default(), tracker.clone());
    for _ in 0..2 {
        mw.after_model(&state_after(ai_calls("a", call.clone())), &fx.ctx())
            .await
            .unwrap();
    }
    let out = mw
        .after_model(&state_after(ai_calls("a", call.clone())), &fx.ctx())
        .await
        .unwrap();
    assert!(out.update.is_some(), "5th repeat across runs is stopped");
    // Another thread starts clean.
    let other =
        LoopDetectionMiddleware::new(LoopDetectionConfig::default(), tracker).with_key("thread-2");
    let out = other
        .after_model(&state_after(ai_calls("a", call)), &fx.ctx())
        .await
        .unwrap();
    assert!(out.update.is_none());
}

#[tokio::test]
async fn frequency_rule_and_overrides() {
    let fx = Fx::new([]);
    let mut cfg = LoopDetectionConfig::default();
    cfg.tool_freq_overrides.insert(
        "bash".into(),
        fawn_config::ToolFreqOverride {
            warn: Some(2),
            hard_limit: Some(3),
        },
    );
    let mw = LoopDetectionMiddleware::new(cfg, Arc::new(LoopTracker::new(10)));
    let ctx = fx.ctx();
    let mut last = None;
    for i in 0..3 {
        let st = state_after(ai_calls(
            "a",
            vec![ToolCall::new(
                "bash",
                json!({"command": format!("ls {i}")}),
                "c",
            )],
        ));
        last = mw.after_model(&st, &ctx).await.unwrap().update;
    }
    let m = &last.unwrap().messages.unwrap()[0];
    assert!(m.text().ends_with("[FORCED STOP] Tool bash called 3 times — exceeded the per-tool safety limit. Answering with the results collected so far."), "{}", m.text());
}

#[tokio::test]
async fn disabled_does_nothing() {
    let fx = Fx::new([]);
    let cfg = LoopDetectionConfig {
        enabled: false,
        hard_limit: 1,
        ..Default::default()
    };
    let mw = LoopDetectionMiddleware::new(cfg, Arc::new(LoopTracker::new(10)));
    let out = mw
        .after_model(
            &state_after(ai_calls("a", vec![ToolCall::new("bash", json!({}), "c")])),
            &fx.ctx(),
        )
        .await
        .unwrap();
    assert!(out.update.is_none());
}
