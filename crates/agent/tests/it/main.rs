//! fawn-agent integration tests: the lead agent's loop driven end to end with scripted models
//! (in process) and the testkit mock LLM (over HTTP).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod deerflow_chain;
mod describe;
mod hooks;
mod interrupts;
mod loop_basics;
mod mock_llm;
mod options;
mod recorded;
mod subagents;
mod tools;
