//! fawn-llm integration tests: every provider driven through its real HTTP path against the
//! testkit mock LLM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod anthropic;
mod faults;
mod gemini;
mod http_version;
mod ollama;
mod openai;
mod params;
mod reasoning;
mod recorded;
mod registry;
mod support;
