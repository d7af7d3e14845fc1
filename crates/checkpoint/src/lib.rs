//! Persistence: checkpoints, threads, runs (the run queue), assistants, crons and the store,
//! on SQLite (embedded default) or Postgres.
//!
//! Must never know about HTTP or the agent's internals; it stores plain typed JSON, never code.
