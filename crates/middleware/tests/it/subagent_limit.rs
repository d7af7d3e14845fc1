use crate::support::*;
use fawn_middleware::subagent_limit::LIMIT_REACHED_TEXT;
use fawn_middleware::{Middleware, SubagentLimitMiddleware};
use fawn_state::{Message, ThreadState, ToolCall};
use serde_json::json;

fn tasks(prefix: &str, n: usize) -> Vec<ToolCall> {
    (0..n)
        .map(|i| {
            ToolCall::new(
                "task",
                json!({"description": format!("t{i}")}),
                format!("{prefix}{i}"),
            )
        })
        .collect()
}

fn after(calls: Vec<ToolCall>) -> ThreadState {
    state_of(vec![
        Message::human("do it").with_id("h"),
        Message::ai("Delegating.")
            .with_id("ai")
            .with_tool_calls(calls),
    ])
}

fn kept(out: fawn_middleware::HookOutcome) -> Option<Vec<String>> {
    out.update.map(|u| {
        u.messages.unwrap()[0]
            .tool_calls
            .iter()
            .map(|c| c.id.clone().unwrap())
            .collect()
    })
}

#[tokio::test]
async fn clamps_concurrency() {
    let fx = Fx::new([]);
    for (configured, effective) in [(3, 3), (10, 4), (0, 1)] {
        let mw = SubagentLimitMiddleware::new(configured, 50);
        let out = mw
            .after_model(&after(tasks("c", 5)), &fx.ctx())
            .await
            .unwrap();
        assert_eq!(
            kept(out).unwrap().len(),
            effective,
            "max_concurrent_subagents={configured}"
        );
    }
    assert_eq!(SubagentLimitMiddleware::new(3, 0).limits(), (3, 1));
    assert_eq!(SubagentLimitMiddleware::new(3, 99).limits(), (3, 50));
}

#[tokio::test]
async fn total_per_run_then_limit_reached() {
    let fx = Fx::new([]);
    let ctx = fx.ctx();
    let mw = SubagentLimitMiddleware::new(3, 4);
    // First response: 3 of 3.
    assert!(kept(mw.after_model(&after(tasks("a", 3)), &ctx).await.unwrap()).is_none());
    // Second: only 1 left.
    assert_eq!(
        kept(mw.after_model(&after(tasks("b", 3)), &ctx).await.unwrap()).unwrap(),
        ["b0"]
    );
    assert_eq!(ctx.stop_reason(), None);
    // Third: nothing left; the answer says so.
    let out = mw.after_model(&after(tasks("c", 3)), &ctx).await.unwrap();
    let m = &out.update.unwrap().messages.unwrap()[0];
    assert!(m.tool_calls.is_empty());
    assert_eq!(m.text(), format!("Delegating.\n\n{LIMIT_REACHED_TEXT}"));
    assert!(m.text().contains("[SUBAGENT LIMIT REACHED]"));
    assert_eq!(ctx.stop_reason().as_deref(), Some("subagent_limit_capped"));
}

#[tokio::test]
async fn other_tools_are_kept_and_ledger_counts() {
    let fx = Fx::new([]);
    let mw = SubagentLimitMiddleware::new(2, 3);
    let mut calls = tasks("t", 3);
    calls.insert(1, ToolCall::new("read_file", json!({"path": "/a"}), "r"));
    let mut st = after(calls);
    // Two delegations of this run already in the ledger, one of another run.
    st.extra.insert(
        "delegations".into(),
        json!([{"id": "d1", "run_id": RUN}, {"id": "d2", "run_id": RUN}, {"id": "d3", "run_id": "other"}]),
    );
    let ids = kept(mw.after_model(&st, &fx.ctx()).await.unwrap()).unwrap();
    assert_eq!(ids, ["t0", "r"]);
}
