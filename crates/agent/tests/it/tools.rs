//! The tools node: concurrent calls with results in call order, unknown tools, failures,
//! state updates from tools.

use crate::support::*;
use async_trait::async_trait;
use fawn_llm::scripted::ScriptedTurn;
use fawn_state::{MessageKind, StreamEvent};
use fawn_tools::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Returns only once `n` calls are inside it at the same time (fails after 5 s otherwise).
struct Rendezvous {
    barrier: Arc<tokio::sync::Barrier>,
}

#[async_trait]
impl Tool for Rendezvous {
    fn name(&self) -> &str {
        "meet"
    }
    fn description(&self) -> &str {
        "Waits for the other calls."
    }
    fn parameters(&self) -> Arc<Value> {
        Arc::new(
            json!({"type": "object", "properties": {"who": {"type": "string"}, "linger_ms": {"type": "integer"}}}),
        )
    }
    async fn call(
        &self,
        args: Map<String, Value>,
        _: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        tokio::time::timeout(Duration::from_secs(5), self.barrier.wait())
            .await
            .map_err(|_| ToolError::Failed("calls did not run concurrently".into()))?;
        if let Some(ms) = args.get("linger_ms").and_then(Value::as_u64) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Ok(ToolOutput::text(format!(
            "met {}",
            args["who"].as_str().unwrap_or("?")
        )))
    }
}

#[tokio::test]
async fn calls_of_one_message_run_concurrently_results_in_call_order() {
    let model = scripted([
        ScriptedTurn::ToolCalls {
            text: String::new(),
            calls: vec![
                (
                    "meet".into(),
                    json!({"who": "a", "linger_ms": 150}),
                    "c_a".into(),
                ),
                ("meet".into(), json!({"who": "b"}), "c_b".into()),
                (
                    "meet".into(),
                    json!({"who": "c", "linger_ms": 60}),
                    "c_c".into(),
                ),
            ],
        },
        ScriptedTurn::text("done"),
    ]);
    let agent = AgentBuilder::new(model)
        .tool(Rendezvous {
            barrier: Arc::new(tokio::sync::Barrier::new(3)),
        })
        .build();
    let (out, rec) = run(&agent, spec("meet")).await;
    ok(&out);
    // Streamed as each call finishes…
    let streamed: Vec<String> = rec
        .events()
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Message { message, .. } => message.tool_call_id.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, ["c_b", "c_c", "c_a"]);
    // …stored in call order.
    let (_, update) = rec
        .updates()
        .into_iter()
        .find(|(n, _)| n == "tools")
        .unwrap();
    let ids: Vec<&str> = update["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c_a", "c_b", "c_c"]);
    let texts: Vec<String> = rec
        .last_state()
        .messages
        .range(2..5)
        .map(|m| m.text())
        .collect();
    assert_eq!(texts, ["met a", "met b", "met c"]);
}

#[tokio::test]
async fn unknown_tool_gets_an_error_message_listing_tools() {
    let model = scripted([
        ScriptedTurn::tool_call("teleport", json!({}), "c1"),
        ScriptedTurn::text("sorry"),
    ]);
    let agent = AgentBuilder::new(model.clone())
        .tool(Echo)
        .tool(Broken)
        .build();
    let (out, rec) = run(&agent, spec("go")).await;
    ok(&out);
    let tm = &rec.last_state().messages[2];
    assert_eq!(tm.kind, MessageKind::Tool);
    assert_eq!(tm.status.as_deref(), Some("error"));
    assert_eq!(
        tm.text(),
        "Error: teleport is not a valid tool, try one of [echo, broken]."
    );
    assert_eq!(
        model.requests().len(),
        2,
        "the model hears about it and answers"
    );
}

#[tokio::test]
async fn tool_failure_becomes_an_error_message_without_middleware() {
    let model = scripted([
        ScriptedTurn::tool_call("broken", json!({}), "c1"),
        ScriptedTurn::text("it failed"),
    ]);
    let agent = AgentBuilder::new(model).tool(Broken).build();
    let (out, rec) = run(&agent, spec("go")).await;
    ok(&out);
    let tm = &rec.last_state().messages[2];
    assert_eq!(tm.status.as_deref(), Some("error"));
    assert_eq!(
        tm.text(),
        "Error: Tool 'broken' failed with ToolError: disk on fire. Continue with available \
         context, or choose an alternative tool."
    );
    assert_eq!(rec.last_state().messages[3].text(), "it failed");
}

#[tokio::test]
async fn tool_updates_are_written_with_the_message() {
    let model = scripted([
        ScriptedTurn::tool_call(
            "present_files",
            json!({"filepaths": ["/mnt/user-data/outputs/a.md"]}),
            "c1",
        ),
        ScriptedTurn::text("here"),
    ]);
    let agent = AgentBuilder::new(model).tool(Present).build();
    let (out, rec) = run(&agent, spec("go")).await;
    ok(&out);
    let (_, update) = rec
        .updates()
        .into_iter()
        .find(|(n, _)| n == "tools")
        .unwrap();
    assert_eq!(update["artifacts"], json!(["/mnt/user-data/outputs/a.md"]));
    assert_eq!(
        update["messages"][0]["content"],
        "Successfully presented files"
    );
    assert_eq!(
        rec.last_state().artifacts.as_deref(),
        Some(&["/mnt/user-data/outputs/a.md".to_string()][..])
    );
}

#[tokio::test]
async fn return_direct_tools_end_the_run() {
    struct Direct;
    #[async_trait]
    impl Tool for Direct {
        fn name(&self) -> &str {
            "direct"
        }
        fn description(&self) -> &str {
            "Answers directly."
        }
        fn parameters(&self) -> Arc<Value> {
            Arc::new(json!({"type": "object", "properties": {}}))
        }
        fn return_direct(&self) -> bool {
            true
        }
        async fn call(
            &self,
            _: Map<String, Value>,
            _: &ToolContext,
        ) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text("final from tool"))
        }
    }
    let model = scripted([ScriptedTurn::tool_call("direct", json!({}), "c1")]);
    let agent = AgentBuilder::new(model.clone()).tool(Direct).build();
    let (out, rec) = run(&agent, spec("go")).await;
    ok(&out);
    assert_eq!(model.requests().len(), 1);
    assert_eq!(
        rec.last_state().messages.last().unwrap().text(),
        "final from tool"
    );
    assert!(rec.checkpoints().last().unwrap().next.is_empty());
}

#[tokio::test]
async fn a_panicking_tool_becomes_an_error_answer() {
    struct Panics;
    #[async_trait]
    impl Tool for Panics {
        fn name(&self) -> &str {
            "panics"
        }
        fn description(&self) -> &str {
            "Panics."
        }
        fn parameters(&self) -> Arc<Value> {
            Arc::new(json!({"type": "object", "properties": {}}))
        }
        async fn call(
            &self,
            _: Map<String, Value>,
            _: &ToolContext,
        ) -> Result<ToolOutput, ToolError> {
            panic!("bug in a tool");
        }
    }
    let model = scripted([
        ScriptedTurn::tool_call("panics", json!({}), "c1"),
        ScriptedTurn::text("recovered"),
    ]);
    let agent = AgentBuilder::new(model).tool(Panics).build();
    let (out, rec) = run(&agent, spec("go")).await;
    ok(&out);
    let state = rec.last_state();
    assert_eq!(state.messages[2].status.as_deref(), Some("error"));
    assert!(state.messages[2].text().contains("the tool panicked"));
    assert_eq!(state.messages[3].text(), "recovered");
}
