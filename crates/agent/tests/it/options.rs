//! Run options: configurable/context overlay, defaults, clamps, model fallback, thinking,
//! custom agents; and what they change in the prompt the model sees.

use crate::support::*;
use fawn_agent::RunOutcome;
use fawn_agent::options::{load_agent, resolve_options, resolve_run};
use fawn_config::Settings;
use fawn_llm::scripted::{ScriptedModel, ScriptedTurn};
use fawn_llm::{ChatModel, ModelInfo, ModelRegistry};
use serde_json::{Map, Value, json};
use std::sync::Arc;

fn model(name: &str, thinking: bool, effort: bool) -> Arc<dyn ChatModel> {
    Arc::new(ScriptedModel::new([]).with_info(ModelInfo {
        name: name.into(),
        model: format!("{name}-id"),
        provider: "mock".into(),
        supports_thinking: thinking,
        supports_reasoning_effort: effort,
        ..Default::default()
    }))
}

fn registry() -> ModelRegistry {
    ModelRegistry::from_models(vec![
        model("default-m", true, true),
        model("plain", false, false),
    ])
}

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn option_resolution_table() {
    let settings = Settings::default();
    let models = registry();
    // (model, thinking, effort, plan, subagents, concurrent, total)
    type Want<'a> = (&'a str, bool, Option<&'a str>, bool, bool, u32, u32);
    let cases: Vec<(Value, Want)> = vec![
        (json!({}), ("default-m", true, None, false, false, 3, 6)),
        (
            json!({"model_name": "plain"}),
            ("plain", false, None, false, false, 3, 6),
        ),
        (
            json!({"model": "plain"}),
            ("plain", false, None, false, false, 3, 6),
        ),
        (
            json!({"model_name": "nope"}),
            ("default-m", true, None, false, false, 3, 6),
        ),
        (
            json!({"thinking_enabled": false}),
            ("default-m", false, None, false, false, 3, 6),
        ),
        (
            json!({"thinking_enabled": 0}),
            ("default-m", false, None, false, false, 3, 6),
        ),
        (
            json!({"reasoning_effort": "high"}),
            ("default-m", true, Some("high"), false, false, 3, 6),
        ),
        (
            json!({"model_name": "plain", "reasoning_effort": "high", "thinking_enabled": true}),
            ("plain", false, None, false, false, 3, 6),
        ),
        (
            json!({"is_plan_mode": true, "subagent_enabled": "yes"}),
            ("default-m", true, None, true, true, 3, 6),
        ),
        (
            json!({"max_concurrent_subagents": 9, "max_total_subagents": 0}),
            ("default-m", true, None, false, false, 4, 1),
        ),
        (
            json!({"max_concurrent_subagents": "2", "max_total_subagents": 80}),
            ("default-m", true, None, false, false, 2, 50),
        ),
        (
            json!({"max_concurrent_subagents": true}),
            ("default-m", true, None, false, false, 3, 6),
        ),
    ];
    for (cfg, want) in cases {
        let r = resolve_options(&obj(cfg.clone()), None, &settings, &models, None).unwrap();
        let o = &r.options;
        let got = (
            o.model_name.as_str(),
            o.thinking_enabled,
            o.reasoning_effort.as_deref(),
            o.is_plan_mode,
            o.subagent_enabled,
            o.max_concurrent_subagents,
            o.max_total_subagents,
        );
        assert_eq!(got, want, "{cfg}");
        assert_eq!(r.model.info().name, o.model_name);
    }
    let r = resolve_options(
        &obj(json!({"model_name": "nope"})),
        None,
        &settings,
        &models,
        None,
    )
    .unwrap();
    assert!(
        r.warnings[0].contains("Model 'nope' not found"),
        "{:?}",
        r.warnings
    );
    let r = resolve_options(
        &obj(json!({"model_name": "plain"})),
        None,
        &settings,
        &models,
        None,
    )
    .unwrap();
    assert!(
        r.warnings[0].contains("does not support it"),
        "{:?}",
        r.warnings
    );
}

#[test]
fn context_overlays_configurable_and_limits_clamp() {
    let mut settings = Settings::default();
    settings.app.max_recursion_limit = 500;
    settings.app.subagents.max_total_per_run = 12;
    let models = registry();
    let cfg = fawn_agent::options::runtime_config(
        &obj(json!({"model_name": "plain", "is_plan_mode": true})),
        &obj(json!({"model_name": "default-m"})),
    );
    let r = resolve_options(&cfg, Some(&json!(9999)), &settings, &models, None).unwrap();
    assert_eq!(r.options.model_name, "default-m");
    assert!(r.options.is_plan_mode);
    assert_eq!(r.options.recursion_limit, 500);
    assert_eq!(r.options.max_total_subagents, 12);
    let r = resolve_options(
        &obj(json!({})),
        Some(&json!(false)),
        &settings,
        &models,
        None,
    )
    .unwrap();
    assert_eq!(r.options.recursion_limit, 100);
    assert_eq!(r.user_id, "default");
    let r = resolve_options(
        &obj(json!({"user_id": "bob"})),
        None,
        &settings,
        &models,
        None,
    )
    .unwrap();
    assert_eq!(r.user_id, "bob");
}

#[test]
fn bad_setup_is_a_clear_error() {
    let settings = Settings::default();
    let e = resolve_options(
        &obj(json!({})),
        None,
        &settings,
        &ModelRegistry::default(),
        None,
    )
    .unwrap_err();
    assert_eq!(e.error, "ValueError");
    assert!(e.message.contains("No chat models are configured"));
    let e = resolve_options(
        &obj(json!({"agent_name": "../evil"})),
        None,
        &settings,
        &registry(),
        None,
    )
    .unwrap_err();
    assert!(
        e.message.contains("Invalid agent name '../evil'"),
        "{}",
        e.message
    );
}

fn write_agent(home: &std::path::Path, user: &str, name: &str, config: &str, soul: Option<&str>) {
    let dir = home.join("users").join(user).join("agents").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.yaml"), config).unwrap();
    if let Some(s) = soul {
        std::fs::write(dir.join("SOUL.md"), s).unwrap();
    }
}

#[tokio::test]
async fn custom_agents_load_config_and_soul() {
    let home = tempfile::tempdir().unwrap();
    write_agent(
        home.path(),
        "default",
        "reviewer",
        "name: reviewer\ndescription: Reviews code\nmodel: plain\ntool_groups: [web]\nskills: []\nunknown_key: 1\n",
        Some("  Be <strict>.\n"),
    );
    let a = load_agent(home.path(), "default", "reviewer")
        .await
        .unwrap();
    assert_eq!(a.model.as_deref(), Some("plain"));
    assert_eq!(a.tool_groups, Some(vec!["web".to_string()]));
    assert_eq!(a.skills, Some(vec![]));
    assert_eq!(a.soul.as_deref(), Some("Be <strict>."));
    // Missing agent: a clear error.
    let e = load_agent(home.path(), "default", "ghost")
        .await
        .unwrap_err();
    assert_eq!(e.error, "FileNotFoundError");
    assert!(e.message.contains("Agent 'ghost' not found"));
    // Broken YAML: a clear error.
    write_agent(home.path(), "default", "broken", "model: [unclosed\n", None);
    let e = load_agent(home.path(), "default", "broken")
        .await
        .unwrap_err();
    assert!(
        e.message
            .contains("Failed to parse the config of agent 'broken'"),
        "{}",
        e.message
    );
    // The agent's model applies unless the request names one.
    let settings = Settings::with_home(home.path());
    let r = resolve_run(
        &obj(json!({"agent_name": "reviewer"})),
        &Map::new(),
        None,
        &settings,
        &registry(),
    )
    .await
    .unwrap();
    assert_eq!(r.options.model_name, "plain");
    assert_eq!(r.options.agent_name.as_deref(), Some("reviewer"));
    let r = resolve_run(
        &obj(json!({"agent_name": "reviewer"})),
        &obj(json!({"model_name": "default-m"})),
        None,
        &settings,
        &registry(),
    )
    .await
    .unwrap();
    assert_eq!(r.options.model_name, "default-m");
    // Bootstrap runs do not load the agent they are about to create.
    let r = resolve_run(
        &obj(json!({"agent_name": "ghost", "is_bootstrap": true})),
        &Map::new(),
        None,
        &settings,
        &registry(),
    )
    .await
    .unwrap();
    assert!(r.agent.is_none());
}

#[tokio::test]
async fn custom_agent_run_uses_its_soul_and_model_and_missing_agent_fails_the_run() {
    let home = tempfile::tempdir().unwrap();
    write_agent(
        home.path(),
        "alice",
        "poet",
        "model: second\nmodel_settings: {temperature: 0.3, max_tokens: 123}\n",
        Some("Write in verse & rhyme."),
    );
    let first = scripted([ScriptedTurn::text("never used")]);
    let second = Arc::new(
        ScriptedModel::new([ScriptedTurn::text("Roses are red.")]).with_info(ModelInfo {
            name: "second".into(),
            model: "second".into(),
            provider: "mock".into(),
            ..Default::default()
        }),
    );
    let mut b = AgentBuilder::new(first.clone());
    b.models.push(second.clone());
    b.settings = Settings::with_home(home.path());
    let agent = b.build();
    let mut sp = spec("a poem");
    sp.context = obj(json!({"agent_name": "poet", "user_id": "alice", "thinking_enabled": true}));
    let (out, _) = run(&agent, sp).await;
    ok(&out);
    assert!(first.requests().is_empty());
    let req = &second.requests()[0];
    let prompt = req.messages[0].text();
    assert!(prompt.contains("You are poet, an open-source super agent."));
    assert!(prompt.contains("<soul>\nWrite in verse &amp; rhyme.\n</soul>"));
    assert!(prompt.contains("<self_update>"));
    assert!(
        !req.thinking_enabled,
        "the second model does not support thinking"
    );
    // The agent's model_settings go with every call of its runs.
    assert_eq!((req.temperature, req.max_tokens), (Some(0.3), Some(123)));

    let mut sp = spec("hello");
    sp.context = obj(json!({"agent_name": "nobody"}));
    let (out, rec) = run(&agent, sp).await;
    assert_eq!(
        out,
        RunOutcome::Error {
            error: "FileNotFoundError".into(),
            message: "Agent 'nobody' not found".into()
        }
    );
    assert!(
        rec.checkpoints().is_empty(),
        "nothing written for a run that cannot start"
    );
}

#[tokio::test]
async fn plan_mode_and_non_interactive_change_the_prompt_and_tools() {
    let model = scripted([ScriptedTurn::text("a"), ScriptedTurn::text("b")]);
    let agent = AgentBuilder::new(model.clone())
        .tool(AskClarification)
        .tool(Echo)
        .build();
    let mut sp = spec("x");
    sp.context = obj(json!({"non_interactive": true}));
    let (out, _) = run(&agent, sp).await;
    ok(&out);
    let req = &model.requests()[0];
    let tools: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["echo"]);
    assert!(!req.messages[0].text().contains("<clarification_system>"));
    let (out, _) = run(&agent, spec("y")).await;
    ok(&out);
    let req = &model.requests()[1];
    assert_eq!(req.tools.len(), 2);
    assert!(req.messages[0].text().contains("<clarification_system>"));
}
