//! Integration tests of the sandbox crate: the local provider through the `Sandbox` trait,
//! with real directories and real bubblewrap.

// Tests may unwrap (project standard); helper functions are not `#[test]`s, so say it here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bash;
mod common;
mod files;
mod host_fs;
