// Stub servers in these tests are not Fawn routes: they need no access rules.
#![allow(clippy::disallowed_methods)]
//! Integration tests of the server over real HTTP. Persistence-dependent cases run on SQLite
//! and on Postgres (`TEST_DATABASE_URL`, a fresh schema per test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod helpers;

/// Generates `<case>::sqlite` and `<case>::postgres` tests from `async fn <case>(db: Db)`.
macro_rules! backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::helpers::Db::Sqlite).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::helpers::Db::Postgres).await
                }
            }
        )*
    };
}

mod access;
mod assistants_store;
mod auth;
mod bad_input;
mod capacity;
mod crons;
mod deerflow_e2e;
mod gateway;
mod gateway_agents;
mod gateway_compact_goal;
mod gateway_conversation;
mod gateway_history;
mod gateway_scheduled;
mod gateway_skills;
mod gateway_workspace;
mod hidden_messages;
mod lead_agent;
mod meta;
mod nodes;
mod observe;
mod processes;
mod protocol;
mod recovery;
mod retention;
mod runs;
mod sse_reader;
mod thread_storage;
mod threads;
