//! Integration tests of the tools crate (one binary, one module per area).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod builtins;
mod mcp;
mod registry;
mod sandbox_tools;
mod sandboxed;
mod skills;
mod support;
mod web;
