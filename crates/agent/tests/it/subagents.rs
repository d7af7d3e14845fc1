//! The subagent runner behind `task`: built-in and custom types, tools, limits, timeouts,
//! cancellation and progress.

use crate::support::*;
use async_trait::async_trait;
use fawn_agent::LeadAgent;
use fawn_agent::options::resolve_options;
use fawn_agent::subagents::SubagentPool;
use fawn_config::{CustomSubagentConfig, Settings, SubagentOverride};
use fawn_llm::scripted::{ScriptedModel, ScriptedTurn};
use fawn_llm::{ChatModel, ChatRequest, ChunkStream, LlmError, ModelInfo, ModelRegistry};
use fawn_state::{Message, MessageKind, ThreadState};
use fawn_tools::{SandboxSlot, SubagentRequest, SubagentRunner, SubagentStatus, ToolContext};
use serde_json::{Map, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn named(name: &str, turns: Vec<ScriptedTurn>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(turns).with_info(ModelInfo {
        name: name.into(),
        model: name.into(),
        provider: "mock".into(),
        ..Default::default()
    }))
}

/// A model that never answers (until cancelled), counting how many calls are waiting.
struct Hanging {
    info: ModelInfo,
    waiting: Arc<AtomicUsize>,
    max_seen: Arc<AtomicUsize>,
    release_after: Option<Duration>,
}

#[async_trait]
impl ChatModel for Hanging {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    async fn stream(&self, _: ChatRequest) -> Result<ChunkStream, LlmError> {
        let now = self.waiting.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_seen.fetch_max(now, Ordering::SeqCst);
        struct Dec(Arc<AtomicUsize>);
        impl Drop for Dec {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _d = Dec(self.waiting.clone());
        match self.release_after {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending::<()>().await,
        }
        let s = futures::stream::iter(fawn_llm::scripted::turn_chunks(
            &ScriptedTurn::text("released"),
            "hanging",
        ));
        Ok(Box::pin(futures::StreamExt::map(s, Ok)))
    }
}

fn hanging(release_after: Option<Duration>) -> (Arc<Hanging>, Arc<AtomicUsize>) {
    let max_seen = Arc::new(AtomicUsize::new(0));
    (
        Arc::new(Hanging {
            info: ModelInfo {
                name: "child".into(),
                model: "child".into(),
                provider: "mock".into(),
                ..Default::default()
            },
            waiting: Arc::new(AtomicUsize::new(0)),
            max_seen: max_seen.clone(),
            release_after,
        }),
        max_seen,
    )
}

struct Fixture {
    pool: Arc<SubagentPool>,
    ctx: ToolContext,
}

async fn fixture(
    settings: Settings,
    lead_model: Arc<dyn ChatModel>,
    child: Arc<dyn ChatModel>,
    cfg: serde_json::Value,
) -> Fixture {
    let settings = Arc::new(settings);
    let mut b = AgentBuilder::new(lead_model);
    b.models.push(child);
    b.settings = (*settings).clone();
    let agent: LeadAgent = b
        .tool(Echo)
        .tool(AskClarification)
        .tool(Present)
        .tool(Broken)
        .build();
    let models = agent.deps().models.clone();
    let mut cfg = cfg.as_object().unwrap().clone();
    cfg.insert("subagent_enabled".into(), json!(true));
    let run = resolve_options(&cfg, None, &settings, &models, None).unwrap();
    let (_, pool) = agent.build_graph(&run, "thread-1", "run-1").await.unwrap();
    let state = ThreadState {
        thread_data: Some(fawn_state::ThreadData {
            workspace_path: Some("/tmp/ws".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let ctx = ToolContext {
        thread_id: "thread-1".into(),
        run_id: "run-1".into(),
        tool_call_id: "call_task".into(),
        state: Arc::new(state),
        settings,
        sandbox: Arc::new(SandboxSlot::new(Arc::new(NoSandbox), "thread-1", None)),
        events: Recorder::new(),
        cancel: CancellationToken::new(),
        subagents: None,
        model_name: "lead".into(),
        context: Map::new(),
    };
    Fixture {
        pool: pool.expect("subagents enabled"),
        ctx,
    }
}

fn request(kind: &str, prompt: &str) -> SubagentRequest {
    SubagentRequest {
        task_id: format!("call_{kind}"),
        subagent_type: kind.into(),
        description: "a task".into(),
        prompt: prompt.into(),
    }
}

fn child_is_default_for_general_purpose() -> Settings {
    let mut s = Settings::default();
    s.app.subagents.agents.insert(
        "general-purpose".into(),
        SubagentOverride {
            model: Some("child".into()),
            ..Default::default()
        },
    );
    s
}

#[tokio::test]
async fn general_purpose_runs_a_nested_loop_with_the_parents_tools_minus_three() {
    let lead = named("lead", vec![]);
    let child = named(
        "child",
        vec![
            ScriptedTurn::tool_call("echo", json!({"text": "from child"}), "c1"),
            ScriptedTurn::text("child result"),
        ],
    );
    let f = fixture(
        child_is_default_for_general_purpose(),
        lead.clone(),
        child.clone(),
        json!({}),
    )
    .await;
    let names: Vec<String> = f.pool.available().into_iter().map(|a| a.name).collect();
    assert_eq!(names, ["general-purpose"]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = f
        .pool
        .run(request("general-purpose", "do the thing"), &f.ctx, tx)
        .await;
    assert_eq!(out.status, SubagentStatus::Completed, "{out:?}");
    assert_eq!(out.result, "child result");
    assert_eq!(out.model_name, "child");
    assert_eq!(out.usage.total_tokens, 30);
    assert_eq!(out.stop_reason, None);
    let mut progress: Vec<Message> = Vec::new();
    while let Ok(m) = rx.try_recv() {
        progress.push(m);
    }
    let kinds: Vec<MessageKind> = progress.iter().map(|m| m.kind.clone()).collect();
    assert_eq!(kinds, [MessageKind::Ai, MessageKind::Tool, MessageKind::Ai]);
    assert_eq!(progress[1].text(), "echo: from child");
    assert!(lead.requests().is_empty());
    let req = &child.requests()[0];
    let tools: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["echo", "broken"]);
    assert!(req.messages[0].text().contains("<guidelines>"));
    assert_eq!(req.messages[1].text(), "do the thing");
    assert_eq!(req.messages.len(), 2, "fresh state: one human message");
    assert!(!req.thinking_enabled);
}

#[tokio::test]
async fn bash_is_refused_without_a_bash_tool_and_unknown_types_fail() {
    let lead = named("lead", vec![]);
    let child = named("child", vec![]);
    let f = fixture(Settings::default(), lead, child, json!({})).await;
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let out = f.pool.run(request("bash", "ls"), &f.ctx, tx.clone()).await;
    assert_eq!(out.status, SubagentStatus::Failed);
    assert!(
        out.error
            .unwrap()
            .contains("bash subagent is not available")
    );
    let out = f.pool.run(request("wizard", "x"), &f.ctx, tx).await;
    assert_eq!(out.status, SubagentStatus::Failed);
    assert!(
        out.error
            .unwrap()
            .contains("Unknown subagent type 'wizard'. Available: general-purpose")
    );
}

#[tokio::test]
async fn custom_subagent_uses_its_prompt_tools_and_model() {
    let mut settings = Settings::default();
    settings.app.subagents.custom_agents.insert(
        "researcher".into(),
        CustomSubagentConfig {
            description: "Digs into sources.\nSecond line.".into(),
            system_prompt: "You research things carefully.".into(),
            tools: Some(vec!["echo".into(), "task".into()]),
            model: Some("child".into()),
            max_turns: Some(10),
            ..Default::default()
        },
    );
    let lead = named("lead", vec![]);
    let child = named("child", vec![ScriptedTurn::text("found it")]);
    let f = fixture(settings, lead, child.clone(), json!({})).await;
    let names: Vec<String> = f.pool.available().into_iter().map(|a| a.name).collect();
    assert_eq!(names, ["general-purpose", "researcher"]);
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let out = f.pool.run(request("researcher", "look"), &f.ctx, tx).await;
    assert_eq!(out.status, SubagentStatus::Completed);
    assert_eq!(out.result, "found it");
    let req = &child.requests()[0];
    assert_eq!(req.messages[0].text(), "You research things carefully.");
    let tools: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["echo"], "task is never given to a subagent");
}

#[tokio::test]
async fn turn_cap_timeout_and_cancellation() {
    // Turn cap: a child that calls a tool forever stops at max_turns.
    let mut settings = child_is_default_for_general_purpose();
    settings.app.subagents.max_turns = Some(4);
    let lead = named("lead", vec![]);
    let child = Arc::new(
        ScriptedModel::new([])
            .with_info(ModelInfo {
                name: "child".into(),
                model: "child".into(),
                provider: "mock".into(),
                ..Default::default()
            })
            .with_fallback(Some(ScriptedTurn::tool_call(
                "echo",
                json!({"text": "again"}),
                "loop",
            ))),
    );
    let f = fixture(settings, lead.clone(), child.clone(), json!({})).await;
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let out = f
        .pool
        .run(request("general-purpose", "loop"), &f.ctx, tx)
        .await;
    assert_eq!(out.status, SubagentStatus::Completed);
    assert_eq!(out.stop_reason.as_deref(), Some("turn_capped"));
    assert_eq!(
        child.requests().len(),
        2,
        "model, tools, model, tools: four turns"
    );

    // Timeout: a per-type override of one second on a model that never answers.
    let mut settings = child_is_default_for_general_purpose();
    settings
        .app
        .subagents
        .agents
        .get_mut("general-purpose")
        .unwrap()
        .timeout_seconds = Some(1);
    let (model, _) = hanging(None);
    let f = fixture(settings, named("lead", vec![]), model, json!({})).await;
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        f.pool.run(request("general-purpose", "wait"), &f.ctx, tx),
    )
    .await
    .expect("the runner honours its timeout");
    assert_eq!(out.status, SubagentStatus::TimedOut);
    assert!(out.error.unwrap().contains("timed out after 1 seconds"));

    // Cancelling the parent cancels the child.
    let (model, _) = hanging(None);
    let f = fixture(
        child_is_default_for_general_purpose(),
        named("lead", vec![]),
        model,
        json!({}),
    )
    .await;
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let cancel = f.ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        f.pool.run(request("general-purpose", "wait"), &f.ctx, tx),
    )
    .await
    .expect("cancellation reaches the child");
    assert_eq!(out.status, SubagentStatus::Cancelled);
}

#[tokio::test]
async fn concurrency_and_total_limits() {
    let (model, max_seen) = hanging(Some(Duration::from_millis(100)));
    let f = fixture(
        child_is_default_for_general_purpose(),
        named("lead", vec![]),
        model,
        json!({"max_concurrent_subagents": 1, "max_total_subagents": 2}),
    )
    .await;
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let (a, b, c) = tokio::join!(
        f.pool
            .run(request("general-purpose", "one"), &f.ctx, tx.clone()),
        f.pool
            .run(request("general-purpose", "two"), &f.ctx, tx.clone()),
        f.pool
            .run(request("general-purpose", "three"), &f.ctx, tx.clone()),
    );
    let statuses = [a.status, b.status, c.status];
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == SubagentStatus::Completed)
            .count(),
        2,
        "{statuses:?}"
    );
    let failed = [a, b, c]
        .into_iter()
        .find(|o| o.status == SubagentStatus::Failed)
        .unwrap();
    assert!(failed.error.unwrap().contains("Subagent limit reached"));
    assert_eq!(
        max_seen.load(Ordering::SeqCst),
        1,
        "never two children at once"
    );
    let _ = ModelRegistry::default();
}
