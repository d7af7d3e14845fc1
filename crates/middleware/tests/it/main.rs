//! Integration tests of the DeerFlow middlewares: hook-level tests that call each hook with
//! a run context built by the fixture, chain order tests, and end-to-end runs through the
//! agent's loop with the scripted model and the HTTP mock LLM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod chain_order;
mod clarification;
mod dangling;
mod dynamic_context;
mod e2e;
mod llm_errors;
mod loop_detection;
mod misc;
mod sanitization;
mod subagent_limit;
mod summarization;
mod title;
mod todo;
mod uploads;
