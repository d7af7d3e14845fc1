//! Integration tests for the mock LLM, driven over HTTP with reqwest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod anthropic;
mod faults;
mod gemini;
mod ollama;
mod openai;
mod recorded;
mod support;
