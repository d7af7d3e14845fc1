//! The loop's supersteps, events and checkpoints for plain and tool-calling turns.

use crate::support::*;
use fawn_agent::RunOutcome;
use fawn_llm::scripted::ScriptedTurn;
use fawn_state::{MessageKind, StreamEvent, ThreadState};
use serde_json::json;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[tokio::test]
async fn plain_answer_writes_input_start_and_model_checkpoints() {
    let model = scripted([ScriptedTurn::text("Hello there")]);
    let agent = AgentBuilder::new(model.clone()).build();
    let (out, rec) = run(&agent, spec("hi")).await;
    assert_eq!(
        out,
        RunOutcome::Success {
            interrupts: vec![],
            stop_reason: None
        }
    );
    assert_eq!(
        rec.checkpoint_summary(),
        vec![
            (-1, "input", s(&["__start__"])),
            (0, "loop", s(&["model"])),
            (1, "loop", vec![]),
        ]
    );
    let cps = rec.checkpoints();
    assert!(cps[0].writes.is_empty());
    assert!(
        cps[0].state.messages.is_empty(),
        "input checkpoint holds the state before the input"
    );
    assert_eq!(cps[1].writes[0].0, "__start__");
    assert_eq!(cps[1].state.messages.len(), 1);
    assert_eq!(cps[2].writes[0].0, "model");
    let state = rec.last_state();
    assert_eq!(state.messages.len(), 2);
    assert_eq!(state.messages[1].text(), "Hello there");
    assert!(state.messages[0].id.is_some());
    assert_writes_replay(&rec, ThreadState::default());
    // The model saw the system prompt then the user message.
    let req = &model.requests()[0];
    assert_eq!(req.messages[0].kind, MessageKind::System);
    assert!(req.messages[0].text().contains("<role>"));
    assert_eq!(req.messages[1].text(), "hi");
    assert!(
        req.thinking_enabled,
        "scripted model supports thinking; default is on"
    );
}

#[tokio::test]
async fn token_chunks_share_one_id_and_carry_langgraph_metadata() {
    let model = scripted([ScriptedTurn::text("one two three")]);
    let agent = AgentBuilder::new(model).build();
    let mut sp = spec("hi");
    sp.metadata.insert("user_key".into(), json!("v"));
    sp.tags = vec!["t1".into()];
    let (_, rec) = run(&agent, sp).await;
    let chunks: Vec<_> = rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::MessageChunk { chunk, metadata } => Some((chunk, metadata)),
            _ => None,
        })
        .collect();
    assert!(chunks.len() >= 4, "{}", chunks.len());
    let id = chunks[0].0.id.clone().unwrap();
    assert!(id.starts_with("lc_run--"), "{id}");
    assert!(
        chunks
            .iter()
            .all(|(c, _)| c.id.as_deref() == Some(id.as_str()))
    );
    assert!(chunks.iter().all(|(c, _)| c.kind == MessageKind::AiChunk));
    let (last, _) = chunks.last().unwrap();
    assert_eq!(last.chunk_position.as_deref(), Some("last"));
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|(c, _)| c.chunk_position.is_none())
    );
    let text: String = chunks.iter().map(|(c, _)| c.text()).collect();
    assert_eq!(text, "one two three");
    let m = &chunks[0].1;
    assert_eq!(m["langgraph_node"], "model");
    assert_eq!(m["langgraph_step"], 1);
    assert_eq!(m["langgraph_triggers"], json!(["branch:to:model"]));
    assert_eq!(m["langgraph_path"], json!(["__pregel_pull", "model"]));
    let ns = m["langgraph_checkpoint_ns"].as_str().unwrap();
    assert!(ns.starts_with("model:"), "{ns}");
    assert_eq!(m["checkpoint_ns"], m["langgraph_checkpoint_ns"]);
    assert_eq!(m["ls_provider"], "mock");
    assert_eq!(m["ls_model_name"], "scripted");
    assert_eq!(m["ls_model_type"], "chat");
    assert_eq!(m["tags"], json!(["t1"]));
    assert_eq!(m["thread_id"], "thread-1");
    assert_eq!(m["run_id"], "run-1");
    assert_eq!(m["graph_id"], "lead_agent");
    assert_eq!(m["user_key"], "v");
    // The stored message has the streamed id.
    assert_eq!(
        rec.last_state().messages[1].id.as_deref(),
        Some(id.as_str())
    );
}

#[tokio::test]
async fn tool_turn_events_and_checkpoints_in_langgraph_order() {
    let model = scripted([
        ScriptedTurn::tool_call("echo", json!({"text": "ping"}), "call_1"),
        ScriptedTurn::text("done"),
    ]);
    let agent = AgentBuilder::new(model.clone()).tool(Echo).build();
    let (out, rec) = run(&agent, spec("use the tool")).await;
    ok(&out);
    assert_eq!(
        rec.checkpoint_summary(),
        vec![
            (-1, "input", s(&["__start__"])),
            (0, "loop", s(&["model"])),
            (1, "loop", s(&["tools"])),
            (2, "loop", s(&["model"])),
            (3, "loop", vec![]),
        ]
    );
    let log: Vec<String> = rec.log().into_iter().filter(|l| l != "chunk").collect();
    assert_eq!(
        log,
        s(&[
            "checkpoint:-1:input",
            "checkpoint:0:loop",
            "start:model",
            "model_start",
            "end:model",
            "checkpoint:1:loop",
            "start:tools",
            "tool_start:echo",
            "tool_end:echo",
            "message:tool",
            "end:tools",
            "checkpoint:2:loop",
            "start:model",
            "model_start",
            "end:model",
            "checkpoint:3:loop",
        ])
    );
    let updates = rec.updates();
    assert_eq!(updates[0].0, "model");
    let ai = &updates[0].1["messages"][0];
    assert_eq!(ai["type"], "ai");
    assert_eq!(ai["tool_calls"][0]["name"], "echo");
    assert_eq!(ai["tool_calls"][0]["args"], json!({"text": "ping"}));
    assert_eq!(updates[1].0, "tools");
    let tm = &updates[1].1["messages"][0];
    assert_eq!(tm["type"], "tool");
    assert_eq!(tm["content"], "echo: ping");
    assert_eq!(tm["tool_call_id"], "call_1");
    assert_eq!(tm["status"], "success");
    // The tool message streamed whole has the same id as the stored one.
    let streamed = rec
        .events()
        .into_iter()
        .find_map(|e| match e {
            StreamEvent::Message { message, metadata } => Some((message, metadata)),
            _ => None,
        })
        .unwrap();
    assert_eq!(streamed.1["langgraph_node"], "tools");
    assert_eq!(streamed.1["langgraph_step"], 2);
    let state = rec.last_state();
    assert_eq!(state.messages[2].id, streamed.0.id);
    assert_eq!(state.messages.len(), 4);
    assert_writes_replay(&rec, ThreadState::default());
    // The second request carries the tool result.
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].messages.last().unwrap().text(), "echo: ping");
    assert_eq!(reqs[0].tools.len(), 1);
    assert_eq!(reqs[0].tools[0].name, "echo");
}

#[tokio::test]
async fn follow_up_run_continues_step_numbers() {
    let model = scripted([ScriptedTurn::text("first"), ScriptedTurn::text("second")]);
    let agent = AgentBuilder::new(model).build();
    let (_, rec) = run(&agent, spec("one")).await;
    let next = follow_up(
        &rec,
        Some(json!({"messages": [{"role": "user", "content": "two"}]})),
    );
    let (out, rec2) = run(&agent, next).await;
    ok(&out);
    assert_eq!(
        rec2.checkpoint_summary(),
        vec![
            (2, "input", s(&["__start__"])),
            (3, "loop", s(&["model"])),
            (4, "loop", vec![]),
        ]
    );
    let texts: Vec<String> = rec2
        .last_state()
        .messages
        .iter()
        .map(|m| m.text())
        .collect();
    assert_eq!(texts, s(&["one", "first", "two", "second"]));
    assert_writes_replay(&rec2, rec.checkpoints()[2].state.as_ref().clone());
}

#[tokio::test]
async fn null_input_on_finished_thread_does_nothing() {
    let model = scripted([ScriptedTurn::text("first")]);
    let agent = AgentBuilder::new(model.clone()).build();
    let (_, rec) = run(&agent, spec("one")).await;
    let (out, rec2) = run(&agent, follow_up(&rec, None)).await;
    ok(&out);
    assert!(rec2.checkpoints().is_empty());
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn recursion_limit_one_runs_the_model_then_fails() {
    let model = scripted([ScriptedTurn::tool_call("echo", json!({"text": "x"}), "c1")]);
    let agent = AgentBuilder::new(model).tool(Echo).build();
    let mut sp = spec("go");
    sp.recursion_limit = Some(json!(1));
    let (out, rec) = run(&agent, sp).await;
    assert_eq!(
        out,
        RunOutcome::Error {
            error: "GraphRecursionError".into(),
            message: "Recursion limit of 1 reached without hitting a stop condition. You can \
                      increase the limit by setting the `recursion_limit` config key.\nFor \
                      troubleshooting, visit: \
                      https://docs.langchain.com/oss/python/langgraph/errors/GRAPH_RECURSION_LIMIT"
                .into()
        }
    );
    assert_eq!(rec.updated_nodes(), ["model"]);
    // What ran is kept: the thread can continue from the pending `tools`.
    assert_eq!(rec.checkpoints().last().unwrap().next, s(&["tools"]));
}

#[tokio::test]
async fn new_input_from_an_older_checkpoint_is_an_input_checkpoint_not_a_fork() {
    let model = scripted([ScriptedTurn::text("first"), ScriptedTurn::text("again")]);
    let agent = AgentBuilder::new(model).build();
    let (_, rec) = run(&agent, spec("one")).await;
    // Re-run from the end of the first run with new input.
    let c = rec.checkpoints().last().unwrap().clone();
    let mut sp = follow_up(
        &rec,
        Some(json!({"messages": [{"role": "user", "content": "two"}]})),
    );
    sp.start = fawn_agent::StartPoint {
        checkpoint_id: Some("ckpt-end".into()),
        state: (*c.state).clone(),
        next: c.next.clone(),
        tasks: c.tasks.clone(),
        step: c.step,
        is_fork: true,
    };
    let (out, rec2) = run(&agent, sp).await;
    ok(&out);
    let summary = rec2.checkpoint_summary();
    assert_eq!(summary[0].1, "input", "{summary:?}");
    assert!(summary.iter().all(|(_, source, _)| *source != "fork"));
}

#[tokio::test]
async fn a_run_from_an_older_checkpoint_starts_with_a_fork() {
    let model = scripted([ScriptedTurn::text("first"), ScriptedTurn::text("again")]);
    let agent = AgentBuilder::new(model).build();
    let (_, rec) = run(&agent, spec("one")).await;
    // Re-run from the checkpoint right after the input (step 0, next: model).
    let c = rec.checkpoints()[1].clone();
    let mut sp = follow_up(&rec, None);
    sp.start = fawn_agent::StartPoint {
        checkpoint_id: Some("ckpt-1".into()),
        state: (*c.state).clone(),
        next: c.next.clone(),
        tasks: c.tasks.clone(),
        step: c.step,
        is_fork: true,
    };
    let (out, rec2) = run(&agent, sp).await;
    ok(&out);
    assert_eq!(
        rec2.checkpoint_summary(),
        vec![(0, "fork", s(&["model"])), (1, "loop", vec![])]
    );
    let texts: Vec<String> = rec2
        .last_state()
        .messages
        .iter()
        .map(|m| m.text())
        .collect();
    assert_eq!(texts, s(&["one", "again"]));
}

#[tokio::test]
async fn cancelling_during_a_tool_stops_the_run() {
    let model = scripted([ScriptedTurn::tool_call(
        "echo",
        json!({"text": "slow", "delay_ms": 30000}),
        "c1",
    )]);
    let agent = AgentBuilder::new(model).tool(Echo).build();
    let rec = Recorder::new();
    let cancel = tokio_util::sync::CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        c2.cancel();
    });
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        fawn_agent::GraphRunner::run(&agent, spec("go"), rec.clone(), cancel),
    )
    .await
    .expect("cancelled promptly");
    assert_eq!(out, RunOutcome::Cancelled);
    // The model step was kept; the tools step never completed.
    assert_eq!(rec.checkpoints().last().unwrap().next, s(&["tools"]));
}

#[tokio::test]
async fn an_input_that_cannot_apply_writes_nothing() {
    let model = scripted([ScriptedTurn::text("never")]);
    let agent = AgentBuilder::new(model.clone()).build();
    let mut sp = spec("x");
    sp.input = Some(
        fawn_state::StateUpdate::from_value(
            json!({"messages": [{"type": "remove", "id": "ghost"}]}),
        )
        .unwrap(),
    );
    let (out, rec) = run(&agent, sp).await;
    match out {
        RunOutcome::Error { error, message } => {
            assert_eq!(error, "InvalidUpdateError");
            assert!(message.contains("ghost"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(rec.checkpoints().is_empty());
    assert!(model.requests().is_empty());
}
