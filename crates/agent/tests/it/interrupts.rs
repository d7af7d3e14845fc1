//! Static breakpoints, `command` (resume/update/goto) and clarification as an interrupt.

use crate::support::*;
use fawn_agent::{Breakpoints, RunOutcome};
use fawn_llm::scripted::ScriptedTurn;
use fawn_middleware::Hook;
use fawn_state::{Command, MessageKind, ThreadState};
use serde_json::json;
use std::sync::{Arc, Mutex};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn nodes(v: &[&str]) -> Breakpoints {
    Breakpoints::Nodes(s(v))
}

fn tool_then_answer() -> Vec<ScriptedTurn> {
    vec![
        ScriptedTurn::tool_call("echo", json!({"text": "x"}), "c1"),
        ScriptedTurn::text("done"),
    ]
}

fn paused(out: &RunOutcome) {
    assert_eq!(
        out,
        &RunOutcome::Success {
            interrupts: vec![],
            stop_reason: None
        }
    );
}

#[tokio::test]
async fn interrupt_before_tools_then_resume_with_null_input() {
    let model = scripted(tool_then_answer());
    let agent = AgentBuilder::new(model.clone()).tool(Echo).build();
    let mut sp = spec("go");
    sp.interrupt_before = nodes(&["tools"]);
    let (out, rec) = run(&agent, sp).await;
    paused(&out);
    assert_eq!(
        rec.checkpoint_summary(),
        vec![
            (-1, "input", s(&["__start__"])),
            (0, "loop", s(&["model"])),
            (1, "loop", s(&["tools"])),
        ]
    );
    let last = rec.checkpoints().pop().unwrap();
    assert_eq!(last.tasks.len(), 1);
    assert_eq!(last.tasks[0].name, "tools");
    assert!(last.tasks[0].interrupts.is_empty());
    // Resume: the same breakpoint does not fire again on the node it paused before.
    let mut resume = follow_up(&rec, None);
    resume.interrupt_before = nodes(&["tools"]);
    let (out, rec2) = run(&agent, resume).await;
    ok(&out);
    assert_eq!(
        rec2.checkpoint_summary(),
        vec![(2, "loop", s(&["model"])), (3, "loop", vec![])]
    );
    assert_eq!(rec2.updated_nodes(), ["tools", "model"]);
    // The task id listed while paused is the id of the task that ran.
    let ran = rec2.events().into_iter().find_map(|e| match e {
        fawn_state::StreamEvent::NodeStart { task_id, node, .. } if node == "tools" => {
            Some(task_id)
        }
        _ => None,
    });
    assert_eq!(ran.as_deref(), Some(last.tasks[0].id.as_str()));
    assert_eq!(rec2.last_state().messages.last().unwrap().text(), "done");
    assert_eq!(model.requests().len(), 2);
}

#[tokio::test]
async fn interrupt_after_model_and_before_model() {
    let model = scripted(tool_then_answer());
    let agent = AgentBuilder::new(model).tool(Echo).build();
    let mut sp = spec("go");
    sp.interrupt_after = nodes(&["model"]);
    let (out, rec) = run(&agent, sp).await;
    paused(&out);
    assert_eq!(rec.checkpoints().last().unwrap().next, s(&["tools"]));
    assert_eq!(rec.updated_nodes(), ["model"]);

    let model = scripted(tool_then_answer());
    let agent = AgentBuilder::new(model.clone()).tool(Echo).build();
    let mut sp = spec("go");
    sp.interrupt_before = Breakpoints::All;
    let (out, rec) = run(&agent, sp).await;
    paused(&out);
    assert_eq!(rec.checkpoints().last().unwrap().next, s(&["model"]));
    assert!(model.requests().is_empty());
    // Resuming with "*" still set pauses before the next node each time.
    let mut resume = follow_up(&rec, None);
    resume.interrupt_before = Breakpoints::All;
    let (out, rec2) = run(&agent, resume).await;
    paused(&out);
    assert_eq!(rec2.updated_nodes(), ["model"]);
    assert_eq!(rec2.checkpoints().last().unwrap().next, s(&["tools"]));
}

#[tokio::test]
async fn breakpoint_after_a_silent_hook_records_next() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let model = scripted(tool_then_answer());
    let agent = AgentBuilder::new(model)
        .tool(Echo)
        .middleware(Arc::new(Probe::new("A", &[Hook::BeforeModel], &log)))
        .build();
    let mut sp = spec("go");
    sp.interrupt_before = nodes(&["model"]);
    let (out, rec) = run(&agent, sp).await;
    paused(&out);
    // Step 1 (A.before_model) changed nothing but the pause must say `model` is next.
    assert_eq!(
        rec.checkpoint_summary(),
        vec![
            (-1, "input", s(&["__start__"])),
            (0, "loop", s(&["A.before_model"])),
            (1, "loop", s(&["model"])),
        ]
    );
    assert!(rec.checkpoints()[2].writes.is_empty());
}

#[tokio::test]
async fn command_update_then_continue_and_goto() {
    let model = scripted(tool_then_answer());
    let agent = AgentBuilder::new(model.clone()).tool(Echo).build();
    let mut sp = spec("go");
    sp.interrupt_before = nodes(&["tools"]);
    let (_, rec) = run(&agent, sp).await;
    // Edit the state while paused; the run continues with the pending `tools`.
    let mut resume = follow_up(&rec, None);
    resume.command = Some(Command {
        update: Some(json!([["title", "Edited"]])),
        ..Default::default()
    });
    let (out, rec2) = run(&agent, resume).await;
    ok(&out);
    assert_eq!(
        rec2.checkpoint_summary(),
        vec![
            (2, "input", s(&["__start__"])),
            (3, "loop", s(&["tools"])),
            (4, "loop", s(&["model"])),
            (5, "loop", vec![]),
        ]
    );
    assert_eq!(rec2.last_state().title.as_deref(), Some("Edited"));
    assert_writes_replay(
        &rec2,
        rec.checkpoints().last().unwrap().state.as_ref().clone(),
    );

    // goto on a finished thread runs that node.
    model.push(ScriptedTurn::text("again"));
    let mut again = follow_up(&rec2, None);
    again.command = Some(Command {
        goto: vec!["model".into()],
        ..Default::default()
    });
    let (out, rec3) = run(&agent, again).await;
    ok(&out);
    assert_eq!(rec3.updated_nodes(), ["model"]);
    assert_eq!(rec3.last_state().messages.last().unwrap().text(), "again");

    // An update alone on a finished thread runs nothing.
    let mut only = follow_up(&rec3, None);
    only.command = Some(Command {
        update: Some(json!({"title": "Renamed"})),
        ..Default::default()
    });
    let requests = model.requests().len();
    let (out, rec4) = run(&agent, only).await;
    ok(&out);
    assert_eq!(model.requests().len(), requests);
    assert_eq!(
        rec4.checkpoints().last().unwrap().next,
        Vec::<String>::new()
    );
    assert_eq!(rec4.last_state().title.as_deref(), Some("Renamed"));

    // Unknown goto target is an error.
    let mut bad = follow_up(&rec4, None);
    bad.command = Some(Command {
        goto: vec!["nowhere".into()],
        ..Default::default()
    });
    let (out, _) = run(&agent, bad).await;
    assert!(
        matches!(&out, RunOutcome::Error { error, message } if error == "InvalidUpdateError" && message.contains("nowhere")),
        "{out:?}"
    );
}

#[tokio::test]
async fn clarification_is_an_interrupt_until_answered() {
    let model = scripted([
        ScriptedTurn::tool_call(
            "ask_clarification",
            json!({"question": "Which env?"}),
            "call_q",
        ),
        ScriptedTurn::text("Deploying to staging."),
    ]);
    let agent = AgentBuilder::new(model.clone())
        .tool(AskClarification)
        .tool(Echo)
        .build();
    let (out, rec) = run(&agent, spec("deploy it")).await;
    let RunOutcome::Success { interrupts, .. } = &out else {
        panic!("{out:?}")
    };
    assert_eq!(interrupts.len(), 1);
    let interrupt = interrupts[0].clone();
    assert_eq!(interrupt.id.len(), 32);
    assert!(interrupt.id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(interrupt.value["question"], "Which env?");
    assert_eq!(interrupt.value["request_id"], "clarification:call_q");
    // The run ended normally with the ToolMessage; the thread shows the pending question.
    let state = rec.last_state();
    let tm = state.messages.last().unwrap();
    assert_eq!(tm.kind, MessageKind::Tool);
    assert_eq!(tm.text(), "❓ Which env?");
    // The tools step's own checkpoint records the pending question (no extra checkpoint).
    assert_eq!(
        rec.checkpoint_summary(),
        vec![
            (-1, "input", s(&["__start__"])),
            (0, "loop", s(&["model"])),
            (1, "loop", s(&["tools"])),
            (2, "loop", s(&["model"])),
        ]
    );
    let last = rec.checkpoints().pop().unwrap();
    assert_eq!(last.writes[0].0, "tools");
    assert_eq!(last.tasks[0].interrupts, vec![interrupt.clone()]);
    assert_eq!(model.requests().len(), 1);

    // Running again without an answer re-raises the same question and does nothing.
    let (out, again) = run(&agent, follow_up(&rec, None)).await;
    assert_eq!(
        out,
        RunOutcome::Success {
            interrupts: vec![interrupt.clone()],
            stop_reason: None
        }
    );
    assert!(again.checkpoints().is_empty());

    // command.resume answers it: the model sees the answer as a user message.
    let mut resume = follow_up(&rec, None);
    resume.command = Some(Command {
        resume: Some(json!({ interrupt.id.clone(): "staging" })),
        ..Default::default()
    });
    let (out, rec2) = run(&agent, resume).await;
    ok(&out);
    let RunOutcome::Success { interrupts, .. } = out else {
        unreachable!()
    };
    assert!(interrupts.is_empty());
    assert_eq!(
        rec2.checkpoints().last().unwrap().next,
        Vec::<String>::new()
    );
    let state = rec2.last_state();
    let answer = &state.messages[state.messages.len() - 2];
    assert_eq!(answer.kind, MessageKind::Human);
    assert_eq!(answer.text(), "staging");
    let resp = &answer.additional_kwargs["human_input_response"];
    assert_eq!(resp["kind"], "human_input_response");
    assert_eq!(resp["request_id"], "clarification:call_q");
    assert_eq!(resp["response_kind"], "option");
    assert_eq!(resp["option_id"], "option-1");
    assert_eq!(
        state.messages.last().unwrap().text(),
        "Deploying to staging."
    );
    let sent = &model.requests()[1];
    assert_eq!(sent.messages.last().unwrap().text(), "staging");
}

#[tokio::test]
async fn a_new_user_message_also_answers_the_clarification() {
    let model = scripted([
        ScriptedTurn::tool_call(
            "ask_clarification",
            json!({"question": "Which env?"}),
            "call_q",
        ),
        ScriptedTurn::text("ok, production"),
    ]);
    let agent = AgentBuilder::new(model).tool(AskClarification).build();
    let (_, rec) = run(&agent, spec("deploy it")).await;
    let (out, rec2) = run(
        &agent,
        follow_up(
            &rec,
            Some(json!({"messages": [{"role": "user", "content": "production"}]})),
        ),
    )
    .await;
    ok(&out);
    let last = rec2.checkpoints().pop().unwrap();
    assert!(last.next.is_empty());
    assert!(last.tasks.is_empty());
    assert_eq!(
        rec2.last_state().messages.last().unwrap().text(),
        "ok, production"
    );
    assert_writes_replay(
        &rec2,
        rec.checkpoints().last().unwrap().state.as_ref().clone(),
    );
    let _ = ThreadState::default();
}

#[tokio::test]
async fn a_resume_for_another_interrupt_leaves_the_question_pending() {
    let model = scripted([ScriptedTurn::tool_call(
        "ask_clarification",
        json!({"question": "Which env?"}),
        "call_q",
    )]);
    let agent = AgentBuilder::new(model.clone())
        .tool(AskClarification)
        .build();
    let (out, rec) = run(&agent, spec("deploy")).await;
    let RunOutcome::Success { interrupts, .. } = out else {
        panic!()
    };
    let mut resume = follow_up(&rec, None);
    resume.command = Some(Command {
        resume: Some(json!({ fawn_agent::interrupts::interrupt_id("other"): "x" })),
        ..Default::default()
    });
    let (out, rec2) = run(&agent, resume).await;
    assert_eq!(
        out,
        RunOutcome::Success {
            interrupts,
            stop_reason: None
        }
    );
    assert!(rec2.checkpoints().is_empty());
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn command_resume_continues_from_a_breakpoint() {
    let model = scripted(tool_then_answer());
    let agent = AgentBuilder::new(model.clone()).tool(Echo).build();
    let mut sp = spec("go");
    sp.interrupt_before = nodes(&["tools"]);
    let (_, rec) = run(&agent, sp).await;
    let mut resume = follow_up(&rec, None);
    resume.command = Some(Command {
        resume: Some(json!("go on")),
        ..Default::default()
    });
    let (out, rec2) = run(&agent, resume).await;
    ok(&out);
    assert_eq!(rec2.updated_nodes(), ["tools", "model"]);
    assert_eq!(rec2.last_state().messages.last().unwrap().text(), "done");
}
