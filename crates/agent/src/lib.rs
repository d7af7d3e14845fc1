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
//! ```ignore
//! let mut deps = AgentDeps::new(settings, models, sandbox_provider);
//! deps.memory = Some(memory_queue);
//! deps.chains = Arc::new(my_chain_builder);      // the DeerFlow middlewares
//! deps.tools = vec![config_tools, mcp_tools];    // tool sources, in order
//! deps.skills = Arc::new(skill_catalog);         // for the <skill_system> prompt section
//! let agent: Arc<dyn GraphRunner> = Arc::new(LeadAgent::new(deps));
//! let outcome = agent.run(spec, observer, cancel).await;
//! ```
//!
//! What a run writes is documented on [`engine`]; how a clarification question becomes an
//! interrupt on [`interrupts`].

pub mod contract;
mod describe;
pub mod engine;
mod graph;
pub mod interrupts;
pub mod lead;
pub mod options;
pub mod prompt;
pub mod subagents;

pub use contract::*;
pub use engine::AgentGraph;
pub use lead::{
    AgentDeps, ChainBuilder, LEAD_AGENT_GRAPH_ID, LeadAgent, NoMiddlewares, NoSkills, RunSetup,
    SkillCatalog, SkillListing, StaticTools, ToolSource,
};
pub use options::{AgentProfile, ResolvedRun, SetupError};
