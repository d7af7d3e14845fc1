//! The real DeerFlow lead agent behind the API (the graphs `fawn serve` registers).

use crate::helpers::*;
use fawn_testkit::{Behavior, MockConfig, MockLlm, Rules};
use serde_json::json;
use std::sync::Arc;

backends!(lead_agent_tool_calling_turn);

async fn lead_agent_tool_calling_turn(db: Db) {
    let mock = MockLlm::start_with(
        MockConfig::default().with_behavior(Behavior::Rules(
            Rules::new()
                .call_tool(
                    "present_files",
                    json!({"filepaths": ["/mnt/user-data/outputs/report.md"]}),
                )
                .after_tool("Here is your report."),
        )),
    )
    .await
    .unwrap();
    let Some(app) = spawn_with(Spawn {
        mock: Some(Arc::new(mock)),
        lead_agent: true,
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let tid = app.create_thread().await;
    let r = app
        .post(
            &format!("/api/langgraph/threads/{tid}/runs/stream"),
            json!({"assistant_id": "lead_agent", "input": user_input("write the report"),
                   "stream_mode": ["values", "messages-tuple", "updates"],
                   "context": {"thinking_enabled": false}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let events = parse_sse(&r.text().await.unwrap());
    let n = names(&events);
    assert_eq!(n[0], "metadata");
    assert!(!n.contains(&"error"), "{events:?}");
    assert!(n.contains(&"messages") && n.contains(&"updates"), "{n:?}");
    let last = events.iter().rev().find(|e| e.event == "values").unwrap();
    let msgs = last.data["messages"].as_array().unwrap();
    assert!(
        msgs.iter()
            .any(|m| m["type"] == "tool" && m["name"] == "present_files"),
        "{msgs:?}"
    );
    assert_eq!(msgs.last().unwrap()["content"], "Here is your report.");
    let (_, t) = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(t["status"], "idle", "{t}");
    let (_, h) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 50}))
        .await;
    assert!(h.as_array().unwrap().len() >= 3);
    app.stop().await;
}
