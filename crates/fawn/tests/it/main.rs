//! The `fawn` binary as a user runs it.

mod check_config;
