//! The DeerFlow lead agent.
//!
//! Owns: resolving one run's options (model, thinking, plan mode, subagents, custom agent),
//! assembling its tools and ordered middleware chain, and driving the step loop
//! before_agent → [before_model → model → after_model → tools]* → after_agent with recursion
//! limits, interrupts and cancellation; plus subagent runs. Must never know about HTTP, SSE
//! framing or SQL: it talks to its caller only through the [`contract`] types.

pub mod contract;

pub use contract::*;
