//! Persistence conformance suite: every case runs against SQLite and Postgres.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod assistants;
mod checkpoints;
mod crons;
mod durability;
mod journal;
mod maintenance;
mod replay;
mod retention;
mod runs;
mod store;
mod threads;
