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
                   "stream_mode": ["values", "messages-tuple", "updates", "events"],
                   "context": {"thinking_enabled": false}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let events = parse_sse(&r.text().await.unwrap());
    let n = names(&events);
    assert_eq!(n[0], "metadata");
    assert!(!n.contains(&"error"), "{events:?}");
    assert!(n.contains(&"messages") && n.contains(&"updates"), "{n:?}");
    // `events`: the graph's chain around everything, the tool call's start and end.
    let ev: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e.event == "events")
        .map(|e| &e.data)
        .collect();
    assert_eq!(ev[0]["event"], "on_chain_start");
    assert_eq!(ev[0]["name"], "LangGraph");
    assert_eq!(ev[ev.len() - 1]["event"], "on_chain_end");
    assert_eq!(ev[ev.len() - 1]["name"], "LangGraph");
    let tool = |kind: &str| {
        ev.iter()
            .find(|e| e["event"] == kind && e["name"] == "present_files")
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    let (start, end) = (tool("on_tool_start"), tool("on_tool_end"));
    assert_eq!(start["run_id"], end["run_id"]);
    assert_eq!(
        start["data"]["input"]["filepaths"],
        json!(["/mnt/user-data/outputs/report.md"])
    );
    assert_eq!(end["data"]["output"]["type"], "tool");
    assert!(ev.iter().any(|e| e["event"] == "on_chat_model_end"));
    // The model's input is what it was sent (the middlewares' rewrite): DeerFlow's system
    // prompt first, the question (wrapped as user input) last.
    let sent = ev
        .iter()
        .find(|e| e["event"] == "on_chat_model_start")
        .unwrap()["data"]["input"]["messages"][0]
        .as_array()
        .unwrap();
    assert_eq!(sent[0]["type"], "system");
    let question = &sent[sent.len() - 1];
    assert_eq!(question["type"], "human");
    assert!(
        question["content"]
            .as_str()
            .unwrap()
            .contains("write the report"),
        "{question}"
    );
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

backends!(lead_agent_values_stream_starts_like_langgraph);

/// LangGraph's `values` stream: no event for the input checkpoint (its state precedes the
/// input), and a resumed run (no input) starts with the state it resumes from — also when
/// there is nothing left to run, where wait returns that state.
async fn lead_agent_values_stream_starts_like_langgraph(db: Db) {
    let mock = MockLlm::start_with(MockConfig::default().with_behavior(Behavior::Directives))
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
    let stream = |body: serde_json::Value| {
        let app = &app;
        let tid = tid.clone();
        async move {
            let r = app.post(&format!("/threads/{tid}/runs/stream"), body).await;
            assert_eq!(r.status(), 200);
            parse_sse(&r.text().await.unwrap())
        }
    };
    // A new turn: the first values already hold the input.
    let call = r#"@mock {"tool": "present_files", "args": {"filepaths": ["/mnt/user-data/outputs/a.md"]}, "after_tool": "done"}"#;
    let ev = stream(
        json!({"assistant_id": "lead_agent", "input": user_input(call),
                           "stream_mode": "values", "interrupt_before": ["tools"]}),
    )
    .await;
    assert_eq!(names(&ev)[1], "values");
    let first = ev[1].data["messages"].as_array().unwrap();
    assert!(
        first.iter().any(|m| m["type"] == "human"),
        "the first values event holds the input: {first:?}"
    );
    // DeerFlow's list and dict channels are in every `values`, empty until written.
    for e in ev.iter().filter(|e| e.event == "values") {
        assert_eq!(e.data["viewed_images"], json!({}), "{}", e.data);
        assert_eq!(e.data["delegations"], json!([]), "{}", e.data);
        assert_eq!(e.data["skill_context"], json!([]), "{}", e.data);
        assert!(e.data["artifacts"].is_array(), "{}", e.data);
    }
    assert_eq!(ev[1].data["artifacts"], json!([]));
    // Resume from the breakpoint: the current state comes first.
    let (_, st) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(st["next"], json!(["tools"]));
    let ev =
        stream(json!({"assistant_id": "lead_agent", "input": null, "stream_mode": "values"})).await;
    assert_eq!(ev[1].data, st["values"]);
    assert_eq!(
        ev.last().unwrap().data["artifacts"],
        json!(["/mnt/user-data/outputs/a.md"])
    );
    assert_eq!(
        ev.last().unwrap().data["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["content"],
        "done"
    );
    // Resume from an earlier, finished checkpoint: nothing to run, its state is the answer.
    let (_, done) = app.get_json(&format!("/threads/{tid}/state")).await;
    let cid = done["checkpoint"]["checkpoint_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, out) = app
        .post_json(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": user_input("more")}),
        )
        .await;
    assert_ne!(out, done["values"]);
    let (_, out) = app
        .post_json(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": null, "checkpoint_id": cid}),
        )
        .await;
    assert_eq!(out, done["values"]);
    app.stop().await;
}

backends!(messages_of_unknown_type_are_refused);

/// A message type LangChain does not know would reach the model on every later turn and
/// fail each: refused with 422 before anything is written.
async fn messages_of_unknown_type_are_refused(db: Db) {
    let Some(app) = spawn_with(Spawn {
        lead_agent: true,
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let tid = app.create_thread().await;
    for body in [
        json!({"assistant_id": "lead_agent", "input": {"messages": [{"role": "robot", "content": "x"}]}}),
        json!({"assistant_id": "lead_agent", "input": {"messages": [{"type": "robot", "content": "x"}]}}),
        json!({"assistant_id": "lead_agent", "command": {"update": {"messages": [{"type": "robot", "content": "x"}]}}}),
    ] {
        let (status, err) = app
            .post_json(&format!("/threads/{tid}/runs"), body.clone())
            .await;
        assert_eq!(status, 422, "{body} → {err}");
        assert!(
            err["detail"]
                .as_str()
                .unwrap()
                .contains("unexpected message type 'robot'"),
            "{err}"
        );
    }
    let (status, err) = app
        .post_json(
            &format!("/threads/{tid}/state"),
            json!({"values": {"messages": [{"type": "robot", "content": "x"}]}}),
        )
        .await;
    assert_eq!(status, 422, "{err}");
    let (_, runs) = app.get_json(&format!("/threads/{tid}/runs")).await;
    assert_eq!(runs, json!([]));
    let (_, st) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(st["checkpoint"], serde_json::Value::Null);
    // Chunk types (a client echoing a streamed message back) are still accepted.
    let (status, _) = app
        .post_json(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "lead_agent", "input": {"messages": [
                {"type": "HumanMessageChunk", "content": "hello"}]}}),
        )
        .await;
    assert_eq!(status, 200);
    app.stop().await;
}
