use crate::support::*;
use fawn_llm::ModelInfo;
use fawn_middleware::{Hook, RunOptions, build_lead_chain, build_subagent_chain};

fn names(fx: &Fx, options: &RunOptions, vision: bool) -> Vec<String> {
    let info = ModelInfo {
        name: "m".into(),
        supports_vision: vision,
        ..Default::default()
    };
    build_lead_chain(&fx.deps(), options, &info)
        .names()
        .into_iter()
        .map(str::to_string)
        .collect()
}

#[test]
fn lead_chain_default_options() {
    let fx = Fx::new([]);
    assert_eq!(
        names(&fx, &fx.options, false),
        [
            "InputSanitizationMiddleware",
            "ThreadDataMiddleware",
            "UploadsMiddleware",
            "SandboxMiddleware",
            "DanglingToolCallMiddleware",
            "LLMErrorHandlingMiddleware",
            "ReadBeforeWriteMiddleware",
            "ToolErrorHandlingMiddleware",
            "DynamicContextMiddleware",
            "TitleMiddleware",
            "MemoryMiddleware",
            "SystemMessageCoalescingMiddleware",
            "LoopDetectionMiddleware",
            "ClarificationMiddleware",
        ]
    );
}

#[test]
fn lead_chain_everything_on() {
    let fx = Fx::with(
        |s| {
            s.app.summarization.enabled = true;
        },
        [],
    );
    let options = RunOptions {
        is_plan_mode: true,
        subagent_enabled: true,
        ..fx.options.clone()
    };
    assert_eq!(
        names(&fx, &options, true),
        [
            "InputSanitizationMiddleware",
            "ThreadDataMiddleware",
            "UploadsMiddleware",
            "SandboxMiddleware",
            "DanglingToolCallMiddleware",
            "LLMErrorHandlingMiddleware",
            "ReadBeforeWriteMiddleware",
            "ToolErrorHandlingMiddleware",
            "DynamicContextMiddleware",
            "DeerFlowSummarizationMiddleware",
            "TodoMiddleware",
            "TitleMiddleware",
            "MemoryMiddleware",
            "ViewImageMiddleware",
            "SystemMessageCoalescingMiddleware",
            "SubagentLimitMiddleware",
            "LoopDetectionMiddleware",
            "ClarificationMiddleware",
        ]
    );
}

#[test]
fn lead_chain_conditions_off() {
    let fx = Fx::with(
        |s| {
            s.app.memory.enabled = false;
            s.app.loop_detection.enabled = false;
        },
        [],
    );
    let n = names(&fx, &fx.options, false);
    assert!(!n.iter().any(|x| x == "MemoryMiddleware"));
    assert!(!n.iter().any(|x| x == "LoopDetectionMiddleware"));
    assert!(!n.iter().any(|x| x == "TodoMiddleware"));
    assert_eq!(n.last().unwrap(), "ClarificationMiddleware");
    // Tool mode keeps memory out of the chain too.
    let fx = Fx::with(|s| s.app.memory.mode = "tool".into(), []);
    assert!(
        !names(&fx, &fx.options, false)
            .iter()
            .any(|x| x == "MemoryMiddleware")
    );
}

#[test]
fn subagent_chain() {
    let fx = Fx::with(|s| s.app.summarization.enabled = true, []);
    let info = ModelInfo {
        supports_vision: true,
        ..Default::default()
    };
    assert_eq!(
        build_subagent_chain(&fx.deps(), &info, "t:subagent:1").names(),
        [
            "InputSanitizationMiddleware",
            "ThreadDataMiddleware",
            "SandboxMiddleware",
            "DanglingToolCallMiddleware",
            "LLMErrorHandlingMiddleware",
            "ReadBeforeWriteMiddleware",
            "ToolErrorHandlingMiddleware",
            "ViewImageMiddleware",
            "LoopDetectionMiddleware",
            "DeerFlowSummarizationMiddleware",
            "SystemMessageCoalescingMiddleware",
        ]
    );
}

/// LangChain ordering on the full chain: `before_*` in list order, `after_*` reversed.
#[test]
fn hook_order() {
    let fx = Fx::with(|s| s.app.summarization.enabled = true, []);
    let options = RunOptions {
        is_plan_mode: true,
        subagent_enabled: true,
        ..fx.options.clone()
    };
    let info = ModelInfo {
        supports_vision: true,
        ..Default::default()
    };
    let chain = build_lead_chain(&fx.deps(), &options, &info);
    let order = |h: Hook| -> Vec<String> {
        chain
            .state_hook_order(h)
            .iter()
            .map(|m| m.name().to_string())
            .collect()
    };
    assert_eq!(
        order(Hook::BeforeAgent),
        [
            "ThreadDataMiddleware",
            "UploadsMiddleware",
            "SandboxMiddleware",
            "DynamicContextMiddleware",
            "TodoMiddleware",
            "LoopDetectionMiddleware"
        ]
    );
    assert_eq!(
        order(Hook::BeforeModel),
        [
            "DeerFlowSummarizationMiddleware",
            "TodoMiddleware",
            "ViewImageMiddleware"
        ]
    );
    assert_eq!(
        order(Hook::AfterModel),
        [
            "LoopDetectionMiddleware",
            "SubagentLimitMiddleware",
            "ViewImageMiddleware",
            "TitleMiddleware",
            "TodoMiddleware"
        ]
    );
    assert_eq!(
        order(Hook::AfterAgent),
        [
            "LoopDetectionMiddleware",
            "MemoryMiddleware",
            "TodoMiddleware",
            "SandboxMiddleware"
        ]
    );
    let wrappers = |h: Hook| -> Vec<&str> {
        chain
            .middlewares()
            .iter()
            .filter(|m| m.hooks().contains(&h))
            .map(|m| m.name())
            .collect()
    };
    // Outermost first.
    assert_eq!(
        wrappers(Hook::WrapModelCall),
        [
            "InputSanitizationMiddleware",
            "DanglingToolCallMiddleware",
            "LLMErrorHandlingMiddleware",
            "DeerFlowSummarizationMiddleware",
            "TodoMiddleware",
            "SystemMessageCoalescingMiddleware",
            "LoopDetectionMiddleware"
        ]
    );
    assert_eq!(
        wrappers(Hook::WrapToolCall),
        [
            "SandboxMiddleware",
            "ReadBeforeWriteMiddleware",
            "ToolErrorHandlingMiddleware",
            "TodoMiddleware",
            "ClarificationMiddleware"
        ]
    );
    // Plan mode brings write_todos and its prompt section.
    let tools: Vec<String> = chain
        .middlewares()
        .iter()
        .flat_map(|m| m.tools())
        .map(|t| t.name().to_string())
        .collect();
    assert_eq!(tools, ["write_todos"]);
    let sections: Vec<String> = chain
        .middlewares()
        .iter()
        .filter_map(|m| m.system_prompt_section())
        .collect();
    assert_eq!(sections.len(), 1);
    assert!(sections[0].starts_with("<todo_list_system>"));
}

/// Process-wide pieces are shared by every chain built from the same deps.
#[test]
fn shared_state_is_per_process() {
    let fx = Fx::new([]);
    let deps = fx.deps();
    let a = deps.clone();
    assert!(std::sync::Arc::ptr_eq(
        &a.shared.circuits,
        &deps.shared.circuits
    ));
    assert!(std::sync::Arc::ptr_eq(&a.shared.loops, &deps.shared.loops));
    let other = fx.deps();
    assert!(!std::sync::Arc::ptr_eq(
        &other.shared.loops,
        &deps.shared.loops
    ));
}
