//! The loop with DeerFlow's real middleware chain, tool assembly and skills
//! (`AgentDeps::deerflow`).

use crate::support::*;
use fawn_agent::{AgentDeps, GraphRunner, LeadAgent, RunOutcome};
use fawn_config::Settings;
use fawn_llm::ModelRegistry;
use fawn_llm::scripted::{ScriptedModel, ScriptedTurn};
use fawn_state::{Command, MessageKind};
use serde_json::json;
use std::sync::Arc;

fn deerflow_agent(home: &std::path::Path, model: Arc<ScriptedModel>) -> LeadAgent {
    let settings = Settings::with_home(home);
    let deps = AgentDeps::deerflow(
        Arc::new(settings),
        ModelRegistry::from_models(vec![model]),
        Arc::new(NoSandbox),
        false,
    )
    .unwrap();
    LeadAgent::new(deps)
}

#[tokio::test]
async fn real_chain_plain_turn() {
    let home = tempfile::tempdir().unwrap();
    let model = scripted([ScriptedTurn::text("Hello from the lead agent.")]);
    let agent = deerflow_agent(home.path(), model.clone());
    let (out, rec) = run(&agent, spec("Say hello")).await;
    ok(&out);
    let nodes = rec.updated_nodes();
    assert!(
        nodes.contains(&"ThreadDataMiddleware.before_agent".to_string()),
        "{nodes:?}"
    );
    assert!(nodes.contains(&"model".to_string()));
    assert!(
        nodes.contains(&"TitleMiddleware.after_model".to_string()),
        "{nodes:?}"
    );
    let state = rec.last_state();
    assert_eq!(state.title.as_deref(), Some("Say hello"));
    assert!(state.thread_data.is_some());
    assert_eq!(
        state.messages.last().unwrap().text(),
        "Hello from the lead agent."
    );
    assert!(rec.checkpoints().last().unwrap().next.is_empty());
    // The model saw the composed prompt and DeerFlow's built-in tools.
    let req = &model.requests()[0];
    let prompt = req.messages[0].text();
    assert!(prompt.contains("<clarification_system>"));
    assert!(!prompt.contains("<subagent_system>"));
    let tools: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(tools.contains(&"present_files"), "{tools:?}");
    assert!(tools.contains(&"ask_clarification"), "{tools:?}");
    assert!(!tools.contains(&"task"), "{tools:?}");
    assert_writes_replay(&rec, Default::default());
}

#[tokio::test]
async fn real_clarification_middleware_raises_an_interrupt() {
    let home = tempfile::tempdir().unwrap();
    let model = scripted([
        ScriptedTurn::tool_call(
            "ask_clarification",
            json!({"question": "Which environment?", "clarification_type": "approach_choice",
                   "options": ["staging", "production"]}),
            "call_env",
        ),
        ScriptedTurn::text("Deploying to production."),
    ]);
    let agent = deerflow_agent(home.path(), model.clone());
    let (out, rec) = run(&agent, spec("deploy")).await;
    let RunOutcome::Success { interrupts, .. } = &out else {
        panic!("{out:?}")
    };
    assert_eq!(interrupts.len(), 1);
    let i = &interrupts[0];
    assert_eq!(i.value["kind"], "human_input_request");
    assert_eq!(i.value["question"], "Which environment?");
    assert_eq!(i.value["options"][1]["value"], "production");
    let state = rec.last_state();
    let tm = state
        .messages
        .iter()
        .rev()
        .find(|m| m.kind == MessageKind::Tool)
        .unwrap();
    assert!(tm.text().contains("Which environment?"), "{}", tm.text());
    let last = rec.checkpoints().pop().unwrap();
    assert!(!last.next.is_empty());
    assert_eq!(last.tasks[0].interrupts, interrupts.clone());
    assert_eq!(model.requests().len(), 1);
    // Answer through command.resume.
    let mut resume = follow_up(&rec, None);
    resume.command = Some(Command {
        resume: Some(json!("production")),
        ..Default::default()
    });
    let (out, rec2) = run(&agent, resume).await;
    ok(&out);
    let state = rec2.last_state();
    assert_eq!(
        state.messages.last().unwrap().text(),
        "Deploying to production."
    );
    let answer = state
        .messages
        .iter()
        .rev()
        .find(|m| m.kind == MessageKind::Human)
        .unwrap();
    assert_eq!(
        answer.additional_kwargs["human_input_response"]["option_id"],
        "option-2"
    );
    assert!(rec2.checkpoints().last().unwrap().next.is_empty());
}

#[tokio::test]
async fn subagents_enabled_adds_task_tool_and_prompt_section() {
    let home = tempfile::tempdir().unwrap();
    let model = scripted([ScriptedTurn::text("ok")]);
    let agent = deerflow_agent(home.path(), model.clone());
    let mut sp = spec("plan");
    sp.context.insert("subagent_enabled".into(), json!(true));
    sp.context
        .insert("max_concurrent_subagents".into(), json!(9));
    let (out, _) = run(&agent, sp).await;
    ok(&out);
    let req = &model.requests()[0];
    let prompt = req.messages[0].text();
    assert!(prompt.contains("<subagent_system>"));
    assert!(
        prompt.contains("at most 4 `task` calls in one response"),
        "clamped to 4"
    );
    assert!(prompt.contains("- **general-purpose**"));
    assert!(!prompt.contains("- **bash**"), "no bash in this sandbox");
    let task = req
        .tools
        .iter()
        .find(|t| t.name == "task")
        .expect("task tool");
    assert_eq!(
        task.parameters["properties"]["subagent_type"]["enum"],
        json!(["general-purpose"])
    );
    let _ = agent.describe();
}

#[tokio::test]
async fn model_failure_answered_by_the_error_middleware_ends_the_run_as_an_error() {
    use fawn_testkit::{Fault, MockLlm, Turn};
    let home = tempfile::tempdir().unwrap();
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::InsufficientQuota));
    let settings = Settings::with_home(home.path());
    let deps = AgentDeps::deerflow(
        Arc::new(settings),
        ModelRegistry::from_models(vec![mock_model(&mock, false)]),
        Arc::new(NoSandbox),
        false,
    )
    .unwrap();
    let agent = LeadAgent::new(deps);
    let (out, rec) = run(&agent, spec("hello")).await;
    match &out {
        RunOutcome::Error { error, message } => {
            assert_eq!(error, "RateLimitError", "{message}");
        }
        other => panic!("{other:?}"),
    }
    // The user-facing fallback answer is kept in the thread.
    let last = rec.last_state().messages.last().unwrap().clone();
    assert_eq!(last.kind, MessageKind::Ai);
    assert_eq!(last.additional_kwargs["deerflow_error_fallback"], true);
    assert_eq!(
        mock.chat_requests().len(),
        1,
        "quota errors are not retried"
    );
}

#[test]
fn describe_lists_deerflow_hook_nodes() {
    let home = tempfile::tempdir().unwrap();
    let agent = deerflow_agent(home.path(), scripted([]));
    let d = agent.describe();
    let ids: Vec<String> = d.graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect();
    for want in [
        "__start__",
        "ThreadDataMiddleware.before_agent",
        "UploadsMiddleware.before_agent",
        "model",
        "TitleMiddleware.after_model",
        "tools",
        "__end__",
    ] {
        assert!(ids.iter().any(|i| i == want), "{want} not in {ids:?}");
    }
}
