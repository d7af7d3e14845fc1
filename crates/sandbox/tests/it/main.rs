//! Integration tests of the sandbox crate: the local provider through the `Sandbox` trait,
//! with real directories and real bubblewrap.

mod bash;
mod common;
mod files;
