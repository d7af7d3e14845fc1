//! Integration tests of the memory crate: injection format, store, queue and LLM updater.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod format;
mod queue;
mod store;
mod updater;
