//! Integration tests of the sandbox crate.
