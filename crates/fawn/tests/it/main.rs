//! The `fawn` binary as a user runs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod check_config;
mod db;
mod layout;
mod observability;
mod serve;
mod upgrade;
