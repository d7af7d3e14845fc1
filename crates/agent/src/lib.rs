//! The DeerFlow lead agent.
//!
//! Owns: resolving one run's options (model, thinking, plan mode, subagents, custom agent),
//! assembling its tools and ordered middleware chain, and driving the step loop
//! before_agent → [before_model → model → after_model → tools]* → after_agent with recursion
//! limits, interrupts and cancellation; plus subagent runs. Must never know about HTTP, SSE
//! framing or SQL: it talks to its caller only through the [`contract`] types.
//!
//! The server builds one [`LeadAgent`] per process and calls it through [`GraphRunner`]:
//!
//! ```text
//! // DeerFlow's chains, config tools + built-ins (+ MCP), skills:
//! let mut deps = AgentDeps::deerflow_with_mcp(settings, models, sandbox_provider,
//!     bash_available, Some(mcp_tool_source))?;
//! deps.memory = Some(memory_queue);
//! let agent: Arc<dyn GraphRunner> = Arc::new(LeadAgent::new(deps));
//! let outcome = agent.run(spec, observer, cancel).await;
//! ```
//!
//! Every piece can be replaced: [`AgentDeps::new`] starts bare (no middlewares, tools or
//! skills) and its fields take any [`ChainBuilder`], [`ToolSource`]s and [`SkillsPrompt`].
//! What a run writes is documented on [`engine`]; how a clarification question becomes an
//! interrupt on [`interrupts`].

pub mod contract;
pub mod deerflow;
pub mod delivery;
mod describe;
pub mod engine;
mod graph;
pub mod interrupts;
pub mod lead;
pub mod options;
pub mod prompt;
pub mod subagents;
pub mod workspace_changes;

pub use contract::*;
pub use deerflow::{DeerFlowChains, DeerFlowSkills, DeerFlowTools};
pub use engine::AgentGraph;
pub use lead::{
    AgentDeps, ChainBuilder, LEAD_AGENT_GRAPH_ID, LeadAgent, NoMiddlewares, NoSkills, RunSetup,
    SkillsPrompt, StaticTools, ToolSource,
};
pub use options::{AgentProfile, ResolvedRun, SetupError};
