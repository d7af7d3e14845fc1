//! DeerFlow's own pieces plugged into the lead agent: the middleware chains of the
//! `middleware` crate, the config-driven tool assembly and the skills catalog of the `tools`
//! crate.

use crate::lead::{AgentDeps, ChainBuilder, RunSetup, SkillsPrompt, ToolSource};
use crate::options::SetupError;
use async_trait::async_trait;
use fawn_config::{ConfigIssue, Settings};
use fawn_llm::ModelRegistry;
use fawn_middleware::{Chain, ChainDeps, build_lead_chain, build_subagent_chain};
use fawn_sandbox::SandboxProvider;
use fawn_tools::Tool;
use fawn_tools::registry::{ToolRegistry, ToolSetup};
use std::sync::Arc;

/// The DeerFlow lead and subagent chains (`fawn_middleware::build_lead_chain` /
/// `build_subagent_chain`).
#[derive(Clone, Debug)]
pub struct DeerFlowChains {
    pub deps: ChainDeps,
}

impl ChainBuilder for DeerFlowChains {
    fn lead_chain(&self, setup: &RunSetup<'_>, _tools: &[Arc<dyn Tool>]) -> Chain {
        build_lead_chain(&self.deps, setup.options(), setup.model)
    }

    fn subagent_chain(&self, setup: &RunSetup<'_>, _tools: &[Arc<dyn Tool>]) -> Chain {
        let key = format!(
            "{}:subagent:{}",
            setup.thread_id,
            setup.subagent_task.unwrap_or(setup.run_id)
        );
        build_subagent_chain(&self.deps, setup.model, &key)
    }
}

/// DeerFlow's tool assembly (`get_available_tools`): config tools filtered by the custom
/// agent's `tool_groups`, built-ins, MCP tools, `write_todos` in plan mode.
pub struct DeerFlowTools {
    registry: ToolRegistry,
    mcp: Option<Arc<dyn ToolSource>>,
    bash_available: bool,
}

impl DeerFlowTools {
    pub fn new(registry: ToolRegistry, bash_available: bool) -> Self {
        DeerFlowTools {
            registry,
            mcp: None,
            bash_available,
        }
    }

    /// MCP tools, placed after the built-ins.
    pub fn with_mcp(mut self, mcp: Arc<dyn ToolSource>) -> Self {
        self.mcp = Some(mcp);
        self
    }
}

#[async_trait]
impl ToolSource for DeerFlowTools {
    async fn tools(&self, setup: &RunSetup<'_>) -> Result<Vec<Arc<dyn Tool>>, SetupError> {
        let mcp_tools = match &self.mcp {
            Some(m) => m.tools(setup).await?,
            None => Vec::new(),
        };
        let options = setup.options();
        let ts = ToolSetup {
            groups: setup.run.agent.as_ref().and_then(|a| a.tool_groups.clone()),
            bash_available: self.bash_available,
            supports_vision: setup.model.supports_vision,
            subagents: setup.subagents.clone(),
            plan_mode: options.is_plan_mode,
            non_interactive: setup.run.non_interactive,
            mcp_tools,
            extra_tools: custom_agent_tools(setup),
        };
        Ok(self.registry.assemble(&ts))
    }
}

/// DeerFlow §3.1: `setup_agent` in bootstrap runs; `update_agent` inside a custom agent's
/// chat (not on the `github` channel).
fn custom_agent_tools(setup: &RunSetup<'_>) -> Vec<Arc<dyn Tool>> {
    use fawn_tools::builtins::{SetupAgentTool, UpdateAgentTool};
    let options = setup.options();
    let home = &setup.settings.home;
    if options.is_bootstrap {
        return vec![Arc::new(SetupAgentTool::new(
            home,
            &setup.run.user_id,
            options.agent_name.clone(),
        ))];
    }
    let channel = setup
        .run
        .context
        .get("channel_name")
        .and_then(|v| v.as_str());
    match (&setup.run.agent, &options.agent_name) {
        (Some(_), Some(name)) if channel != Some("github") => {
            let models = setup
                .models
                .all()
                .iter()
                .map(|m| m.info().name.clone())
                .collect();
            vec![Arc::new(UpdateAgentTool::new(
                home,
                &setup.run.user_id,
                name,
                models,
            ))]
        }
        _ => Vec::new(),
    }
}

/// The `<skill_system>` section from the skills directory, scanned per run (DeerFlow keeps
/// no catalog cache either), filtered by the custom agent's `skills` (only `bootstrap` in
/// bootstrap mode).
#[derive(Debug, Default, Clone, Copy)]
pub struct DeerFlowSkills;

#[async_trait]
impl SkillsPrompt for DeerFlowSkills {
    async fn skill_section(&self, setup: &RunSetup<'_>) -> String {
        let catalog = fawn_tools::skills::SkillCatalog::load(setup.settings).await;
        let allow: Option<Vec<String>> = if setup.options().is_bootstrap {
            Some(vec!["bootstrap".to_string()])
        } else {
            setup.run.agent.as_ref().and_then(|a| a.skills.clone())
        };
        catalog.prompt_section(allow.as_deref())
    }
}

impl AgentDeps {
    /// Dependencies wired the DeerFlow way: its middleware chains, config tools, built-ins
    /// and skills. `bash_available`: the sandbox can run bash (an OS sandbox, or
    /// `allow_host_bash`). Add MCP tools with [`DeerFlowTools::with_mcp`] through
    /// [`AgentDeps::deerflow_with_mcp`], and memory by setting `memory`.
    pub fn deerflow(
        settings: Arc<Settings>,
        models: ModelRegistry,
        sandbox_provider: Arc<dyn SandboxProvider>,
        bash_available: bool,
    ) -> Result<AgentDeps, Vec<ConfigIssue>> {
        Self::deerflow_with_mcp(settings, models, sandbox_provider, bash_available, None)
    }

    /// [`AgentDeps::deerflow`] with MCP tools.
    pub fn deerflow_with_mcp(
        settings: Arc<Settings>,
        models: ModelRegistry,
        sandbox_provider: Arc<dyn SandboxProvider>,
        bash_available: bool,
        mcp: Option<Arc<dyn ToolSource>>,
    ) -> Result<AgentDeps, Vec<ConfigIssue>> {
        let registry = ToolRegistry::from_settings(&settings)?;
        let chain_deps = ChainDeps::new(settings.clone())
            .with_write_todos(Some(Arc::new(fawn_tools::builtins::WriteTodosTool::new())));
        let mut tools = DeerFlowTools::new(registry, bash_available);
        if let Some(m) = mcp {
            tools = tools.with_mcp(m);
        }
        let mut deps = AgentDeps::new(settings, models, sandbox_provider);
        deps.chains = Arc::new(DeerFlowChains { deps: chain_deps });
        deps.tools = vec![Arc::new(tools)];
        deps.skills = Arc::new(DeerFlowSkills);
        deps.bash_available = bash_available;
        Ok(deps)
    }
}
