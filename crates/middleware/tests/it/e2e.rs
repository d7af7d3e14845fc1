//! End to end through the agent's loop (`fawn_agent::LeadAgent`) with the DeerFlow chains:
//! what the model was sent, the resulting state, events and run outcome (reference §11.1
//! items 33–39 and 42, plus plan mode, summarization and memory).

use crate::support::*;
use fawn_agent::{AgentDeps, LeadAgent, RunOutcome, StartPoint, StaticTools};
use fawn_llm::scripted::ScriptedTurn;
use fawn_llm::{ChatModel, ModelRegistry};
use fawn_middleware::MemorySink;
use fawn_state::{Message, MessageKind, ThreadState, ToolCall};
use fawn_testkit::{Fault, MockLlm, Turn};
use fawn_tools::Tool;
use serde_json::{Value, json};
use std::sync::Arc;

fn calls(name: &str, args: Value, id: &str) -> ScriptedTurn {
    ScriptedTurn::ToolCalls {
        text: String::new(),
        calls: vec![(name.to_string(), args, id.to_string())],
    }
}

fn success(out: &RunOutcome) -> Option<String> {
    match out {
        RunOutcome::Success { stop_reason, .. } => stop_reason.clone(),
        other => panic!("run did not succeed: {other:?}"),
    }
}

fn last(state: &ThreadState) -> &Message {
    state.messages.last().unwrap()
}

/// The run's user message (moved to `<id>__user` by the dynamic-context id swap).
fn user_message(state: &ThreadState) -> &Message {
    state
        .messages
        .iter()
        .find(|m| {
            m.kind == MessageKind::Human && m.id.as_deref().is_some_and(|id| id.ends_with("__user"))
        })
        .unwrap()
}

/// Item 33: `ask_clarification` ends the run with the formatted question; no further model call.
#[tokio::test]
async fn clarification_ends_the_run() {
    let fx = Fx::new([
        calls(
            "ask_clarification",
            json!({"question": "Which env?", "clarification_type": "approach_choice",
                   "context": "Need target", "options": ["dev", "prod"]}),
            "call_1",
        ),
        ScriptedTurn::text("must not be asked"),
    ]);
    let agent = fx.agent(vec![Arc::new(
        fawn_tools::builtins::AskClarificationTool::new(),
    )]);
    let (out, obs) = run(&agent, spec(user("deploy it"), json!({}))).await;
    success(&out);
    assert_eq!(fx.model.requests().len(), 1);
    let st = obs.state();
    let m = last(&st);
    assert_eq!(m.kind, MessageKind::Tool);
    assert_eq!(
        m.text(),
        "🔀 Need target\n\nWhich env?\n\n  1. dev\n  2. prod"
    );
    assert_eq!(m.id.as_deref(), Some("clarification:call_1"));
    assert_eq!(m.artifact["human_input"]["version"], 1);
    assert_eq!(m.artifact["human_input"]["input_mode"], "choice_with_other");
    assert_eq!(m.artifact["human_input"]["options"][1]["id"], "option-2");
}

/// Item 34: three identical tool-call sets → the 4th request carries `[LOOP DETECTED]`;
/// the 5th is stopped.
#[tokio::test]
async fn loop_detection_warns_then_forces_a_stop() {
    let fx =
        Fx::new((1..=5).map(|i| calls("bash", json!({"command": "ls -la"}), &format!("c{i}"))));
    let bash = Fake::new("bash");
    let agent = fx.agent(vec![bash.clone()]);
    let (out, obs) = run(&agent, spec(user("list files"), json!({}))).await;
    assert_eq!(success(&out).as_deref(), Some("loop_capped"));
    let reqs = fx.model.requests();
    assert_eq!(reqs.len(), 5);
    let has_warning = |i: usize| {
        reqs[i]
            .messages
            .iter()
            .any(|m| m.kind == MessageKind::Human && m.text().starts_with("[LOOP DETECTED]"))
    };
    assert!(!has_warning(2));
    assert!(has_warning(3), "{:?}", transcript(&reqs[3]));
    assert!(!has_warning(4), "the warning is sent once and never stored");
    let st = obs.state();
    let m = last(&st);
    assert_eq!(m.kind, MessageKind::Ai);
    assert!(m.tool_calls.is_empty());
    assert!(
        m.text()
            .ends_with(fawn_middleware::loop_detection::HARD_STOP_TEXT),
        "{}",
        m.text()
    );
    assert_eq!(bash.calls(), 4);
    assert!(
        st.messages
            .iter()
            .all(|m| !m.text().starts_with("[LOOP DETECTED]"))
    );
}

/// Item 34, frequency layer: 50 `read_file` calls on different paths.
#[tokio::test]
async fn loop_detection_frequency_rule() {
    let fx = Fx::new((0..50).map(|i| {
        calls(
            "read_file",
            json!({"path": format!("/mnt/user-data/workspace/f{i}.txt")}),
            &format!("r{i}"),
        )
    }));
    let read = Fake::new("read_file");
    let agent = fx.agent(vec![read.clone()]);
    let mut s = spec(user("read everything"), json!({}));
    s.recursion_limit = Some(json!(1000));
    let (out, obs) = run(&agent, s).await;
    assert_eq!(success(&out).as_deref(), Some("loop_capped"));
    assert_eq!(read.calls(), 49);
    let st = obs.state();
    assert!(
        last(&st)
            .text()
            .contains("[FORCED STOP] Tool read_file called 50 times")
    );
    let reqs = fx.model.requests();
    assert!(
        transcript(&reqs[30])
            .iter()
            .any(|l| l.contains("You have called read_file 30 times"))
    );
}

/// Item 35: per-response clamp and per-run total.
#[tokio::test]
async fn subagent_limit_clamps_task_calls() {
    for (configured, executed) in [(3, 3), (10, 4), (0, 1)] {
        let five = ScriptedTurn::ToolCalls {
            text: String::new(),
            calls: (0..5).map(|i| ("task".to_string(), json!({"description": format!("t{i}"), "prompt": "p", "subagent_type": "general-purpose"}), format!("t{i}"))).collect(),
        };
        let fx = Fx::new([five, ScriptedTurn::text("done")]);
        let task = Fake::new("task");
        let agent = fx.agent(vec![task.clone()]);
        let ctx = json!({"subagent_enabled": true, "max_concurrent_subagents": configured});
        let (out, _) = run(&agent, spec(user("research"), ctx)).await;
        success(&out);
        assert_eq!(
            task.calls(),
            executed,
            "max_concurrent_subagents={configured}"
        );
    }
}

#[tokio::test]
async fn subagent_total_limit_per_run() {
    let three = |p: &str| ScriptedTurn::ToolCalls {
        text: "Delegating.".into(),
        calls: (0..3)
            .map(|i| {
                (
                    "task".to_string(),
                    json!({"description": "d", "prompt": "p", "subagent_type": "general-purpose"}),
                    format!("{p}{i}"),
                )
            })
            .collect(),
    };
    let fx = Fx::new([
        three("a"),
        three("b"),
        three("c"),
        ScriptedTurn::text("never"),
    ]);
    let task = Fake::new("task");
    let agent = fx.agent(vec![task.clone()]);
    let ctx = json!({"subagent_enabled": true, "max_total_subagents": 4});
    let (out, obs) = run(&agent, spec(user("research"), ctx)).await;
    assert_eq!(success(&out).as_deref(), Some("subagent_limit_capped"));
    assert_eq!(task.calls(), 4);
    assert_eq!(fx.model.requests().len(), 3);
    let st = obs.state();
    assert!(last(&st).text().contains("[SUBAGENT LIMIT REACHED]"));
    assert!(last(&st).tool_calls.is_empty());
}

/// Item 36: local title after the first exchange, never replaced later.
#[tokio::test]
async fn title_after_first_exchange_only() {
    let fx = Fx::new([ScriptedTurn::text("Sure."), ScriptedTurn::text("Again.")]);
    let agent = fx.agent(vec![]);
    let text = "Please compare the performance of Rust and Go for web servers today";
    let (out, obs) = run(&agent, spec(user(text), json!({}))).await;
    success(&out);
    assert_eq!(
        obs.state().title.as_deref(),
        Some("Please compare the performance of Rust and Go for...")
    );
    assert!(
        obs.updates()
            .iter()
            .any(|(n, u)| n == "TitleMiddleware.after_model" && u["title"].is_string())
    );
    let mut next = spec(user("Something else entirely"), json!({}));
    next.run_id = "run-2".into();
    next.start = obs.start_point();
    let (out, obs2) = run(&agent, next).await;
    success(&out);
    assert_eq!(
        obs2.state().title.as_deref(),
        Some("Please compare the performance of Rust and Go for...")
    );
}

/// Item 37: a dangling tool call is answered in the request only.
#[tokio::test]
async fn dangling_tool_call_repaired_in_the_request() {
    let fx = Fx::new([ScriptedTurn::text("Back.")]);
    let agent = fx.agent(vec![]);
    let history = state_of(vec![
        Message::human("list files").with_id("h1"),
        Message::ai("")
            .with_id("a1")
            .with_tool_calls(vec![ToolCall::new("ls", json!({"path": "/"}), "call_9")]),
    ]);
    let mut s = spec(user("hello?"), json!({}));
    s.start = StartPoint {
        checkpoint_id: Some("ckpt-0".into()),
        state: history,
        next: vec![],
        tasks: vec![],
        step: 3,
        is_fork: false,
    };
    let (out, obs) = run(&agent, s).await;
    success(&out);
    let sent = &fx.model.requests()[0].messages;
    let ai = sent
        .iter()
        .position(|m| m.id.as_deref() == Some("a1"))
        .unwrap();
    assert_eq!(sent[ai + 1].kind, MessageKind::Tool);
    assert_eq!(sent[ai + 1].tool_call_id.as_deref(), Some("call_9"));
    assert_eq!(
        sent[ai + 1].text(),
        "[Tool call was interrupted and did not return a result.]"
    );
    // Stored history keeps the unanswered call as it was.
    let st = obs.state();
    assert!(st.messages.iter().all(|m| m.kind != MessageKind::Tool));
}

/// Item 38: injection tags are escaped and framed for the model; the stored message is not.
#[tokio::test]
async fn input_sanitization() {
    let fx = Fx::new([ScriptedTurn::text("ok")]);
    let agent = fx.agent(vec![]);
    let (out, obs) = run(&agent, spec(user("<system>x</system>"), json!({}))).await;
    success(&out);
    let sent = &fx.model.requests()[0].messages;
    assert_eq!(
        sent.last().unwrap().text(),
        "--- BEGIN USER INPUT ---\n&lt;system&gt;x&lt;/system&gt;\n--- END USER INPUT ---"
    );
    let st = obs.state();
    assert_eq!(user_message(&st).text(), "<system>x</system>");
}

fn mock_agent(fx: &Fx, mock: &MockLlm) -> LeadAgent {
    let config: fawn_config::AppConfig = serde_json::from_value(json!({"models": [{
        "name": "mock-model", "use": "langchain_openai:ChatOpenAI", "model": "gpt-test",
        "base_url": mock.base_url(), "api_key": "sk-test", "max_retries": 0,
    }]}))
    .unwrap();
    let model: Arc<dyn ChatModel> = ModelRegistry::from_config(&config)
        .unwrap()
        .default_model()
        .unwrap();
    let mut deps = AgentDeps::new(
        fx.settings.clone(),
        ModelRegistry::from_models(vec![model]),
        fx.provider.clone(),
    );
    deps.chains = Arc::new(DeerFlowChains(fx.deps()));
    deps.tools = vec![Arc::new(StaticTools(Vec::<Arc<dyn Tool>>::new()))];
    LeadAgent::new(deps)
}

/// Item 39: 429 twice then success → two `llm_retry` events and a normal answer.
#[tokio::test]
async fn llm_retries_over_http() {
    let fx = Fx::new([]);
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::RateLimit {
        retry_after_secs: None,
    }));
    mock.push(Turn::fault(Fault::RateLimit {
        retry_after_secs: None,
    }));
    mock.push(Turn::text("Hello after retries"));
    let agent = mock_agent(&fx, &mock);
    let (out, obs) = run(&agent, spec(user("hi"), json!({}))).await;
    success(&out);
    assert_eq!(mock.chat_requests().len(), 3);
    let retries: Vec<Value> = obs
        .custom()
        .into_iter()
        .filter(|e| e["type"] == "llm_retry")
        .collect();
    assert_eq!(retries.len(), 2);
    assert_eq!(
        (retries[0]["attempt"].clone(), retries[1]["attempt"].clone()),
        (json!(1), json!(2))
    );
    assert!(retries.iter().all(|e| e["max_attempts"] == 3));
    assert!(
        retries[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("LLM request retry 1/3: provider is busy.")
    );
    assert_eq!(last(&obs.state()).text(), "Hello after retries");
}

/// Item 39: insufficient quota → no retry, marked fallback answer, run status error.
#[tokio::test]
async fn quota_error_ends_the_run_as_error() {
    let fx = Fx::new([]);
    let mock = MockLlm::start().await.unwrap();
    mock.push(Turn::fault(Fault::InsufficientQuota));
    let agent = mock_agent(&fx, &mock);
    let (out, obs) = run(&agent, spec(user("hi"), json!({}))).await;
    assert!(matches!(out, RunOutcome::Error { .. }), "{out:?}");
    assert_eq!(mock.chat_requests().len(), 1);
    assert!(obs.custom().iter().all(|e| e["type"] != "llm_retry"));
    let st = obs.state();
    let m = last(&st);
    assert_eq!(m.kind, MessageKind::Ai);
    assert_eq!(m.additional_kwargs["deerflow_error_fallback"], true);
    assert_eq!(m.additional_kwargs["error_reason"], "quota");
}

/// Item 42: the model sees the current uploads; a missing file is not listed.
#[tokio::test]
async fn upload_context_reaches_the_model() {
    let fx = Fx::new([ScriptedTurn::text("It is a report.")]);
    let uploads = fx.paths().uploads;
    std::fs::create_dir_all(&uploads).unwrap();
    std::fs::write(uploads.join("r.pdf"), vec![7u8; 2048]).unwrap();
    let agent = fx.agent(vec![]);
    let input = json!({"messages": [{"role": "user", "content": "What is this?", "additional_kwargs": {
        "files": [{"filename": "r.pdf", "size": 2048, "path": "/mnt/user-data/uploads/r.pdf", "status": "uploaded"},
                  {"filename": "missing.pdf", "size": 10}]}}]});
    let (out, obs) = run(&agent, spec(input, json!({}))).await;
    success(&out);
    let sent = fx.model.requests()[0].messages.last().unwrap().text();
    assert!(sent.starts_with("<current_uploads>"), "{sent}");
    assert!(sent.contains("- r.pdf (2.0 KB)"));
    assert!(sent.contains("Path: /mnt/user-data/uploads/r.pdf"));
    assert!(!sent.contains("missing.pdf"));
    // Only the user's own words are framed as untrusted input.
    assert!(sent.ends_with("--- BEGIN USER INPUT ---\nWhat is this?\n--- END USER INPUT ---"));
    let st = obs.state();
    assert_eq!(st.uploaded_files.as_ref().unwrap().len(), 1);
    let u = user_message(&st);
    assert_eq!(
        u.additional_kwargs["original_user_content"],
        "What is this?"
    );
    assert_eq!(u.name.as_deref(), Some("user-input"));
    assert_eq!(u.additional_kwargs["run_id"], RUN);
}

/// Plan mode: `write_todos` and its prompt are offered; finishing early is sent back.
#[tokio::test]
async fn plan_mode_todos_and_reminders() {
    let todos = |a: &str, b: &str| json!({"todos": [{"content": "Collect data", "status": a}, {"content": "Write report", "status": b}]});
    let fx = Fx::new([
        calls("write_todos", todos("in_progress", "pending"), "w1"),
        ScriptedTurn::text("I am done."),
        calls("write_todos", todos("completed", "completed"), "w2"),
        ScriptedTurn::text("Report finished."),
    ]);
    let agent = fx.agent(vec![]);
    let (out, obs) = run(
        &agent,
        spec(user("make a report"), json!({"is_plan_mode": true})),
    )
    .await;
    success(&out);
    let reqs = fx.model.requests();
    assert_eq!(reqs.len(), 4);
    assert!(reqs[0].tools.iter().any(|t| t.name == "write_todos"));
    assert!(reqs[0].messages[0].text().contains("<todo_list_system>"));
    let reminder = reqs[2].messages.last().unwrap();
    assert!(
        reminder
            .text()
            .starts_with("<system_reminder>\nYou have incomplete todo items")
    );
    assert!(reminder.text().contains("- [pending] Write report"));
    let st = obs.state();
    assert_eq!(last(&st).text(), "Report finished.");
    assert!(
        st.todos
            .as_ref()
            .unwrap()
            .iter()
            .all(|t| t.status == "completed")
    );
    assert!(
        st.messages
            .iter()
            .all(|m| m.name.as_deref() != Some("todo_completion_reminder"))
    );
}

/// Summarization: the `updates` event is keyed by the DeerFlow node name, and the summary
/// is projected into the model request that follows.
#[tokio::test]
async fn summarization_through_the_loop() {
    let fx = Fx::with(
        |s| {
            s.app.summarization.enabled = true;
            s.app.summarization.trigger =
                Some(fawn_config::OneOrMany::One(fawn_config::ContextSize {
                    kind: fawn_config::ContextSizeKind::Messages,
                    value: 5.0,
                }));
            s.app.summarization.keep = fawn_config::ContextSize {
                kind: fawn_config::ContextSizeKind::Messages,
                value: 2.0,
            };
        },
        [
            ScriptedTurn::text("SUMMARY: earlier chat about Rust."),
            ScriptedTurn::text("Answer."),
        ],
    );
    let agent = fx.agent(vec![]);
    let history = state_of(vec![
        Message::human("q1").with_id("h1"),
        Message::ai("a1").with_id("a1"),
        Message::human("q2").with_id("h2"),
        Message::ai("a2").with_id("a2"),
    ]);
    let mut s = spec(user("q3"), json!({}));
    s.start = StartPoint {
        checkpoint_id: Some("c".into()),
        state: history,
        next: vec![],
        tasks: vec![],
        step: 5,
        is_fork: false,
    };
    let (out, obs) = run(&agent, s).await;
    success(&out);
    let (_, update) = obs
        .updates()
        .into_iter()
        .find(|(n, _)| n == "DeerFlowSummarizationMiddleware.before_model")
        .expect("summarization update event");
    assert_eq!(update["messages"][0]["type"], "remove");
    assert_eq!(update["messages"][0]["id"], "__remove_all__");
    assert_eq!(update["summary_text"], "SUMMARY: earlier chat about Rust.");
    let reqs = fx.model.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs[0].messages[0].text().contains("Human: q1"));
    let main = transcript(&reqs[1]);
    assert!(
        main[1].contains("SUMMARY: earlier chat about Rust."),
        "{main:?}"
    );
    let st = obs.state();
    assert_eq!(
        st.summary_text.as_deref(),
        Some("SUMMARY: earlier chat about Rust.")
    );
    assert!(st.messages.iter().all(|m| m.id.as_deref() != Some("h1")));
}

/// Memory: the finished conversation is handed to the queue after the run.
#[tokio::test]
async fn memory_gets_the_run() {
    let fx = Fx::new([ScriptedTurn::text("Noted, uv it is.")]);
    let agent = fx.agent(vec![]);
    let (out, _) = run(&agent, spec(user("Always use uv."), json!({}))).await;
    success(&out);
    let calls = fx.memory.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    let texts: Vec<String> = calls[0]
        .3
        .iter()
        .filter(|m| m.kind != MessageKind::System)
        .map(Message::text)
        .collect();
    assert_eq!(texts, ["Always use uv.", "Noted, uv it is."]);
    let _: &dyn MemorySink = fx.memory.as_ref();
}

/// Memory reaches the model on the thread's first turn (hidden `__memory` message), the
/// date reminder is folded into the system prompt, and the UI-visible user message keeps its
/// text under `<id>__user`.
#[tokio::test]
async fn memory_and_date_injected_on_the_first_turn() {
    let fx = Fx::new([
        ScriptedTurn::text("Using uv."),
        ScriptedTurn::text("Again."),
    ]);
    let reader = crate::dynamic_context::seeded_reader(&fx).await;
    let mut deps = AgentDeps::new(fx.settings.clone(), fx.registry(), fx.provider.clone());
    deps.chains = Arc::new(DeerFlowChains(fx.deps().with_memory(reader)));
    let agent = LeadAgent::new(deps);
    let (out, obs) = run(&agent, spec(user("install requests"), json!({}))).await;
    success(&out);
    let sent = &fx.model.requests()[0];
    assert_eq!(sent.messages[0].kind, MessageKind::System);
    assert!(sent.messages[0].text().contains("<current_date>"));
    assert_eq!(
        sent.messages
            .iter()
            .filter(|m| m.kind == MessageKind::System)
            .count(),
        1
    );
    let t = transcript(sent);
    assert!(
        t[1].starts_with("human: <memory>\nFacts:\n- [correction | 0.95] Prefers uv over pip"),
        "{t:?}"
    );
    assert!(t[2].contains("install requests"));
    let st = obs.state();
    assert_eq!(user_message(&st).text(), "install requests");
    // Second turn of the same thread: no second memory block.
    let mut next = spec(user("and numpy"), json!({}));
    next.run_id = "run-2".into();
    next.start = obs.start_point();
    let (out, _) = run(&agent, next).await;
    success(&out);
    let second = transcript(&fx.model.requests()[1]);
    assert_eq!(second.iter().filter(|l| l.contains("<memory>")).count(), 1);
}

/// Item 42 again with the real local sandbox provider: uploads are listed and read through
/// the confined sandbox, and a symlink pointing outside the thread is not followed.
#[tokio::test]
async fn upload_context_with_the_local_sandbox() {
    let fx = Fx::new([ScriptedTurn::text("ok")]);
    let provider = Arc::new(fawn_sandbox::LocalSandboxProvider::new(&fx.settings).unwrap());
    let uploads = fx.paths().uploads;
    std::fs::create_dir_all(&uploads).unwrap();
    std::fs::write(uploads.join("notes.md"), "# Plan\n## Budget\n").unwrap();
    let secret = fx.dir.path().join("secret.md");
    std::fs::write(&secret, "# Top secret heading\n").unwrap();
    std::os::unix::fs::symlink(&secret, uploads.join("link.md")).unwrap();
    let mut deps = AgentDeps::new(fx.settings.clone(), fx.registry(), provider);
    deps.chains = Arc::new(DeerFlowChains(fx.deps()));
    let agent = LeadAgent::new(deps);
    let input = json!({"messages": [{"role": "user", "content": "read them", "additional_kwargs": {
        "files": [{"filename": "notes.md", "size": 17}, {"filename": "link.md", "size": 21}]}}]});
    let (out, _) = run(&agent, spec(input, json!({}))).await;
    success(&out);
    let sent = fx.model.requests()[0].messages.last().unwrap().text();
    assert!(sent.contains("- notes.md (0.0 KB)"), "{sent}");
    assert!(sent.contains("    L1: Plan\n    L2: Budget"));
    assert!(!sent.contains("Top secret"), "{sent}");
}

/// Read-before-write (DeerFlow #3857) with the real file tools and local sandbox: creating
/// a file needs no read; changing it needs a read of its current version, and every write
/// makes earlier reads stale. Turned off by `read_before_write.enabled: false`.
#[tokio::test]
async fn writes_need_a_read_of_the_current_version() {
    // Under the workspace: a file under outputs would also have to be presented.
    let path = "/mnt/user-data/workspace/r.md";
    let w = |content: &str, append: bool, id: &str| {
        calls(
            "write_file",
            json!({"description": "d", "path": path, "content": content, "append": append}),
            id,
        )
    };
    let read = |id: &str| calls("read_file", json!({"description": "d", "path": path}), id);
    let replace = |id: &str| {
        calls(
            "str_replace",
            json!({"description": "d", "path": path, "old_str": "## B", "new_str": "## C"}),
            id,
        )
    };
    let script = || {
        [
            w("# A\n", false, "c1"),
            w("## B\n", true, "c2"),
            read("c3"),
            w("## B\n", true, "c4"),
            replace("c5"),
            read("c6"),
            replace("c7"),
            ScriptedTurn::text("done"),
        ]
    };
    let run_with = |enabled: bool| async move {
        let fx = Fx::with(|s| s.app.read_before_write.enabled = enabled, script());
        let provider = Arc::new(fawn_sandbox::LocalSandboxProvider::new(&fx.settings).unwrap());
        let mut deps = AgentDeps::new(fx.settings.clone(), fx.registry(), provider);
        deps.chains = Arc::new(DeerFlowChains(fx.deps()));
        deps.tools = vec![Arc::new(StaticTools(vec![
            Arc::new(fawn_tools::sandbox_tools::ReadFileTool::new()) as Arc<dyn Tool>,
            Arc::new(fawn_tools::sandbox_tools::WriteFileTool::new(&fx.settings)),
            Arc::new(fawn_tools::sandbox_tools::StrReplaceTool::new()),
        ]))];
        let agent = LeadAgent::new(deps);
        let (out, obs) = run(&agent, spec(user("write"), json!({}))).await;
        success(&out);
        let file = std::fs::read_to_string(fx.paths().workspace.join("r.md")).unwrap();
        let state = obs.state();
        let tool_messages: Vec<&Message> = state
            .messages
            .iter()
            .filter(|m| m.kind == MessageKind::Tool)
            .collect();
        let marked = tool_messages
            .iter()
            .filter(|m| m.additional_kwargs.contains_key("deerflow_read_mark"))
            .count();
        let tools: Vec<(String, bool)> = tool_messages
            .iter()
            .map(|m| (m.text(), m.status.as_deref() == Some("error")))
            .collect();
        (file, tools, marked)
    };
    let (file, tools, marked) = run_with(true).await;
    let blocked: Vec<bool> = tools.iter().map(|(_, e)| *e).collect();
    assert_eq!(
        blocked,
        [false, true, false, false, true, false, false],
        "{tools:#?}"
    );
    assert!(
        tools[1]
            .0
            .starts_with("Error: write_file refused: /mnt/user-data/workspace/r.md exists"),
        "{}",
        tools[1].0
    );
    assert!(tools[4].0.starts_with("Error: str_replace refused"));
    assert_eq!(file, "# A\n## C\n");
    // Each read carries its mark: the conversation is the gate's memory.
    assert_eq!(marked, 2);
    let (file, tools, marked) = run_with(false).await;
    assert!(tools.iter().all(|(_, e)| !e), "{tools:#?}");
    assert_eq!(marked, 0);
    assert_eq!(file, "# A\n## C\n## C\n");
}

/// Artifact delivery (DeerFlow's `run.delivery`): a run that writes a file under outputs
/// ends as an error unless it presents one of its outputs (the file or its directory);
/// scratch files elsewhere and hidden process files do not count.
#[tokio::test]
async fn outputs_a_run_makes_must_be_presented() {
    let write = |path: &str, id: &str| {
        calls(
            "write_file",
            json!({"description": "d", "path": path, "content": "x"}),
            id,
        )
    };
    let present = |paths: Value, id: &str| calls("present_files", json!({"filepaths": paths}), id);
    let run_script = |turns: Vec<ScriptedTurn>| async move {
        let fx = Fx::new(turns);
        let provider = Arc::new(fawn_sandbox::LocalSandboxProvider::new(&fx.settings).unwrap());
        let mut deps = AgentDeps::new(fx.settings.clone(), fx.registry(), provider);
        deps.chains = Arc::new(DeerFlowChains(fx.deps()));
        deps.tools = vec![Arc::new(StaticTools(vec![
            Arc::new(fawn_tools::sandbox_tools::WriteFileTool::new(&fx.settings)) as Arc<dyn Tool>,
            Arc::new(fawn_tools::builtins::PresentFilesTool::new()),
        ]))];
        let agent = LeadAgent::new(deps);
        run(&agent, spec(user("make a report"), json!({}))).await.0
    };
    let out = run_script(vec![
        write("/mnt/user-data/outputs/report.md", "c1"),
        ScriptedTurn::text("Done, the report is in outputs."),
    ])
    .await;
    match &out {
        RunOutcome::Error { message, .. } => assert_eq!(
            message,
            "Artifact delivery incomplete: no produced output artifact was presented"
        ),
        other => panic!("expected an error: {other:?}"),
    }
    for shown in [
        json!(["/mnt/user-data/outputs/charts/report.md"]),
        json!(["/mnt/user-data/outputs/charts"]),
    ] {
        let out = run_script(vec![
            write("/mnt/user-data/outputs/charts/report.md", "c1"),
            present(shown.clone(), "c2"),
            ScriptedTurn::text("Here it is."),
        ])
        .await;
        success(&out);
    }
    // Presenting something else does not deliver the report.
    let out = run_script(vec![
        write("/mnt/user-data/outputs/report.md", "c1"),
        write("/mnt/user-data/outputs/other.md", "c2"),
        present(json!(["/mnt/user-data/outputs/missing.md"]), "c3"),
        ScriptedTurn::text("Here it is."),
    ])
    .await;
    assert!(matches!(out, RunOutcome::Error { .. }), "{out:?}");
    // Nothing produced under outputs: nothing to deliver.
    let out = run_script(vec![
        write("/mnt/user-data/workspace/scratch.py", "c1"),
        write("/mnt/user-data/outputs/.tool-results/t.txt", "c2"),
        ScriptedTurn::text("ok"),
    ])
    .await;
    success(&out);
}
