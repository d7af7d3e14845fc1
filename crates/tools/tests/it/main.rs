//! fawn-tools integration tests.

// Tests may unwrap (project standard); helper functions are not `#[test]`s, so say it here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod mcp;
