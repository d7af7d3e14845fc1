//! `describe()` and `next_after_update()` for the lead agent graph.

use crate::support::*;
use fawn_agent::{GraphRunner, UnknownNode};
use fawn_middleware::Hook;
use fawn_state::{Message, ThreadState, ToolCall};
use serde_json::json;
use std::sync::{Arc, Mutex};

fn agent_with_hooks() -> fawn_agent::LeadAgent {
    let log = Arc::new(Mutex::new(Vec::new()));
    AgentBuilder::new(scripted([]))
        .tool(Echo)
        .middleware(Arc::new(Probe::new(
            "A",
            &[
                Hook::BeforeAgent,
                Hook::BeforeModel,
                Hook::AfterModel,
                Hook::AfterAgent,
            ],
            &log,
        )))
        .middleware(Arc::new(Probe::new("B", &[Hook::AfterModel], &log)))
        .build()
}

fn state_with(messages: Vec<Message>) -> ThreadState {
    ThreadState {
        messages: messages.into(),
        ..Default::default()
    }
}

fn ai_calling() -> Message {
    Message::ai("")
        .with_id("ai1")
        .with_tool_calls(vec![ToolCall::new("echo", json!({}), "c1")])
}

#[test]
fn describe_draws_hook_nodes_and_edges() {
    let d = agent_with_hooks().describe();
    let ids: Vec<&str> = d.graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "__start__",
            "A.before_agent",
            "A.before_model",
            "model",
            "B.after_model",
            "A.after_model",
            "tools",
            "A.after_agent",
            "__end__"
        ]
    );
    let edges: Vec<(String, String, bool)> = d.graph["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["source"].as_str().unwrap().to_string(),
                e["target"].as_str().unwrap().to_string(),
                e["conditional"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    let has = |s: &str, t: &str, c: bool| edges.contains(&(s.into(), t.into(), c));
    assert!(has("__start__", "A.before_agent", false));
    assert!(has("A.before_agent", "A.before_model", false));
    assert!(has("A.before_model", "model", false));
    assert!(has("model", "B.after_model", false));
    assert!(has("B.after_model", "A.after_model", false));
    assert!(has("A.after_model", "tools", true));
    assert!(has("A.after_model", "A.after_agent", true));
    assert!(has("tools", "A.before_model", true));
    assert!(has("A.after_agent", "__end__", false));
    assert_eq!(d.graph["nodes"][3]["type"], "runnable");
    assert!(d.state_schema["properties"]["messages"].is_object());
    assert!(d.input_schema["properties"]["todos"].is_object());
    assert!(d.config_schema["properties"]["thinking_enabled"].is_object());
    assert_eq!(
        d.context_schema["properties"]["max_concurrent_subagents"]["maximum"],
        4
    );
}

#[test]
fn next_after_update_follows_the_edges() {
    let agent = agent_with_hooks();
    let pending = state_with(vec![Message::human("hi").with_id("h"), ai_calling()]);
    let answered = state_with(vec![
        Message::human("hi").with_id("h"),
        ai_calling(),
        Message::tool("ok", "c1", Some("echo".into())).with_id("t"),
    ]);
    let done = state_with(vec![
        Message::human("hi").with_id("h"),
        Message::ai("bye").with_id("a"),
    ]);
    let n = |as_node: Option<&str>, s: &ThreadState| agent.next_after_update(as_node, s);
    assert_eq!(n(Some("model"), &pending).unwrap(), ["B.after_model"]);
    assert_eq!(n(Some("A.after_model"), &pending).unwrap(), ["tools"]);
    assert_eq!(n(Some("A.after_model"), &done).unwrap(), ["A.after_agent"]);
    assert_eq!(n(Some("tools"), &answered).unwrap(), ["A.before_model"]);
    assert_eq!(
        n(Some("A.before_agent"), &done).unwrap(),
        ["A.before_model"]
    );
    assert_eq!(
        n(Some("A.after_agent"), &done).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(n(Some("__start__"), &done).unwrap(), ["A.before_agent"]);
    assert_eq!(n(Some("__input__"), &done).unwrap(), ["__start__"]);
    assert_eq!(n(None, &pending).unwrap(), ["tools"]);
    assert_eq!(n(None, &done).unwrap(), Vec::<String>::new());
    assert_eq!(n(Some("nope"), &done), Err(UnknownNode("nope".into())));
    assert_eq!(
        n(Some("__end__"), &done),
        Err(UnknownNode("__end__".into()))
    );

    // Without middlewares: model → tools when calls are pending, else the end.
    let bare = AgentBuilder::new(scripted([])).build();
    assert_eq!(
        bare.next_after_update(Some("model"), &pending).unwrap(),
        ["tools"]
    );
    assert_eq!(
        bare.next_after_update(Some("model"), &done).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        bare.next_after_update(Some("tools"), &answered).unwrap(),
        ["model"]
    );
    assert_eq!(bare.graph_id(), "lead_agent");
}
