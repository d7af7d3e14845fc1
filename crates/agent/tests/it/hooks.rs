//! Middleware hooks as graph nodes: LangChain's ordering, reporting, jumps, request rewriting.

use crate::support::*;
use fawn_llm::scripted::ScriptedTurn;
use fawn_middleware::{Hook, JumpTo};
use fawn_state::ThreadState;
use serde_json::json;
use std::sync::{Arc, Mutex};

const ALL: &[Hook] = &[
    Hook::BeforeAgent,
    Hook::BeforeModel,
    Hook::WrapModelCall,
    Hook::AfterModel,
    Hook::WrapToolCall,
    Hook::AfterAgent,
];

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[tokio::test]
async fn hooks_run_in_langchain_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let model = scripted([
        ScriptedTurn::tool_call("echo", json!({"text": "x"}), "c1"),
        ScriptedTurn::text("done"),
    ]);
    let agent = AgentBuilder::new(model)
        .tool(Echo)
        .middleware(Arc::new(Probe::new("A", ALL, &log)))
        .middleware(Arc::new(Probe::new("B", ALL, &log)))
        .build();
    let (out, _) = run(&agent, spec("go")).await;
    ok(&out);
    let turn = [
        "A.before_model",
        "B.before_model",
        "A.wrap_model_call:enter",
        "B.wrap_model_call:enter",
        "B.wrap_model_call:exit",
        "A.wrap_model_call:exit",
        "B.after_model",
        "A.after_model",
    ];
    let mut want = s(&["A.before_agent", "B.before_agent"]);
    want.extend(s(&turn));
    want.extend(s(&["A.wrap_tool_call:echo", "B.wrap_tool_call:echo"]));
    want.extend(s(&turn));
    want.extend(s(&["B.after_agent", "A.after_agent"]));
    assert_eq!(*log.lock().unwrap(), want);
}

#[tokio::test]
async fn only_hooks_that_change_state_are_reported_and_checkpointed() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let a = Probe::new("A", ALL, &log).update_on(Hook::BeforeAgent, json!({"title": "T"}));
    let b = Probe::new("B", ALL, &log).update_on(Hook::AfterAgent, json!({"artifacts": ["x"]}));
    let model = scripted([
        ScriptedTurn::tool_call("echo", json!({"text": "x"}), "c1"),
        ScriptedTurn::text("done"),
    ]);
    let agent = AgentBuilder::new(model)
        .tool(Echo)
        .middleware(Arc::new(a))
        .middleware(Arc::new(b))
        .build();
    let (out, rec) = run(&agent, spec("go")).await;
    ok(&out);
    // Supersteps: 0 __start__, 1 A.before_agent, 2 B.before_agent, 3-4 before_model, 5 model,
    // 6-7 after_model, 8 tools, 9-10 before_model, 11 model, 12-13 after_model,
    // 14 B.after_agent, 15 A.after_agent.
    assert_eq!(
        rec.checkpoint_summary(),
        vec![
            (-1, "input", s(&["__start__"])),
            (0, "loop", s(&["A.before_agent"])),
            (1, "loop", s(&["B.before_agent"])),
            (5, "loop", s(&["B.after_model"])),
            (8, "loop", s(&["A.before_model"])),
            (11, "loop", s(&["B.after_model"])),
            (14, "loop", s(&["A.after_agent"])),
            (15, "loop", vec![]),
        ]
    );
    let updates = rec.updates();
    let nodes: Vec<&str> = updates.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        nodes,
        ["A.before_agent", "model", "tools", "model", "B.after_agent"]
    );
    assert_eq!(updates[0].1, json!({"title": "T"}));
    assert_eq!(updates[4].1, json!({"artifacts": ["x"]}));
    let state = rec.last_state();
    assert_eq!(state.title.as_deref(), Some("T"));
    assert_eq!(state.artifacts.as_deref(), Some(&["x".to_string()][..]));
    assert_writes_replay(&rec, ThreadState::default());
    let cps = rec.checkpoints();
    assert_eq!(cps[2].writes[0].0, "A.before_agent");
}

#[tokio::test]
async fn jump_to_model_and_end() {
    let log = Arc::new(Mutex::new(Vec::new()));
    // After the first answer, A asks for another model turn (like TodoMiddleware's reminder).
    let a = Probe::new(
        "A",
        &[Hook::BeforeModel, Hook::AfterModel, Hook::AfterAgent],
        &log,
    )
    .jump_once(Hook::AfterModel, JumpTo::Model);
    let model = scripted([ScriptedTurn::text("first"), ScriptedTurn::text("second")]);
    let agent = AgentBuilder::new(model.clone())
        .middleware(Arc::new(a))
        .build();
    let (out, rec) = run(&agent, spec("go")).await;
    ok(&out);
    assert_eq!(
        *log.lock().unwrap(),
        s(&[
            "A.before_model",
            "A.after_model",
            "A.before_model",
            "A.after_model",
            "A.after_agent",
        ])
    );
    let texts: Vec<String> = rec.last_state().messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts, s(&["go", "first", "second"]));
    let updates = rec.updates();
    assert_eq!(updates[1].0, "A.after_model");
    assert_eq!(updates[1].1, json!({"jump_to": "model"}));

    // jump_to end from before_model skips the model and goes to the after_agent hooks.
    let log = Arc::new(Mutex::new(Vec::new()));
    let a = Probe::new("A", &[Hook::BeforeModel, Hook::AfterAgent], &log)
        .jump_once(Hook::BeforeModel, JumpTo::End);
    let model = scripted([ScriptedTurn::text("never")]);
    let agent = AgentBuilder::new(model.clone())
        .middleware(Arc::new(a))
        .build();
    let (out, rec) = run(&agent, spec("go")).await;
    ok(&out);
    assert_eq!(
        *log.lock().unwrap(),
        s(&["A.before_model", "A.after_agent"])
    );
    assert!(model.requests().is_empty());
    assert_eq!(rec.checkpoints().last().unwrap().next, Vec::<String>::new());
}

#[tokio::test]
async fn request_rewrites_are_not_persisted() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut a = Probe::new("A", &[Hook::WrapModelCall], &log);
    a.rewrite_request = true;
    let model = scripted([ScriptedTurn::text("ok")]);
    let agent = AgentBuilder::new(model.clone())
        .middleware(Arc::new(a))
        .build();
    let (out, rec) = run(&agent, spec("hello")).await;
    ok(&out);
    let sent = model.requests()[0].messages.last().unwrap().text();
    assert_eq!(sent, "hello [rewritten by A]");
    assert_eq!(rec.last_state().messages[0].text(), "hello");
}

#[tokio::test]
async fn no_op_hooks_count_towards_the_recursion_limit() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let a = Probe::new("A", &[Hook::BeforeModel, Hook::AfterModel], &log);
    let model = scripted([ScriptedTurn::tool_call("echo", json!({"text": "x"}), "c1")]);
    let agent = AgentBuilder::new(model)
        .tool(Echo)
        .middleware(Arc::new(a))
        .build();
    // before_model, model, after_model, tools = 4 supersteps; a limit of 3 stops at tools.
    let mut sp = spec("go");
    sp.recursion_limit = Some(json!(3));
    let (out, _) = run(&agent, sp).await;
    match out {
        fawn_agent::RunOutcome::Error { error, message } => {
            assert_eq!(error, "GraphRecursionError");
            assert!(
                message.starts_with("Recursion limit of 3 reached"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn middleware_custom_events_stream_inside_their_node() {
    use async_trait::async_trait;
    use fawn_middleware::{HookOutcome, Middleware, MiddlewareError, RunContext};
    use fawn_state::{StateUpdate, StreamEvent};
    struct Signal;
    #[async_trait]
    impl Middleware for Signal {
        fn name(&self) -> &str {
            "Signal"
        }
        fn hooks(&self) -> &'static [Hook] {
            &[Hook::AfterModel]
        }
        async fn after_model(
            &self,
            _: &ThreadState,
            ctx: &RunContext,
        ) -> Result<HookOutcome, MiddlewareError> {
            ctx.events
                .emit(StreamEvent::Custom(json!({"type": "signal", "n": 1})));
            ctx.set_stop_reason("loop_capped");
            Ok(HookOutcome::update(
                StateUpdate::from_value(json!({"title": "S"})).unwrap(),
            ))
        }
    }
    let model = scripted([ScriptedTurn::text("hi")]);
    let agent = AgentBuilder::new(model)
        .middleware(Arc::new(Signal))
        .build();
    let (out, rec) = run(&agent, spec("go")).await;
    assert_eq!(
        out,
        fawn_agent::RunOutcome::Success {
            interrupts: vec![],
            stop_reason: Some("loop_capped".into())
        }
    );
    let log: Vec<String> = rec.log().into_iter().filter(|l| l != "chunk").collect();
    let at = log.iter().position(|l| l == "custom").unwrap();
    assert_eq!(
        &log[at..at + 3],
        [
            "custom",
            "start:Signal.after_model",
            "end:Signal.after_model"
        ]
    );
    let custom = rec.events().into_iter().find_map(|e| match e {
        StreamEvent::Custom(v) => Some(v),
        _ => None,
    });
    assert_eq!(custom, Some(json!({"type": "signal", "n": 1})));
}
