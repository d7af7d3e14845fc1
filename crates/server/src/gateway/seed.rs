//! `POST /api/test-only/seed-runs` (DeerFlow's test-only seeder for end-to-end tests): stands
//! up a thread with finished runs and their journal message rows, without a model and
//! without any checkpoint, so a UI test can reload history from the per-run routes.
//!
//! Off unless the server was started with it ([`TestSeed`]: `DEERFLOW_ENABLE_TEST_SEED=1`,
//! read once by `fawn serve`); off it answers 404 as an unknown route does. It is never on
//! in production (`DEER_FLOW_ENV` or `ENVIRONMENT` = `production`/`prod`, as for
//! `DEER_FLOW_AUTH_DISABLED`): asked for there, it stays off with a warning.
//!
//! Body `{thread_id, runs: [{run_id, created_at, messages: [{role: human|ai, content, id}]}]}`
//! → `{ok: true, thread_id, runs: n}`. The thread is created for the caller when missing
//! (another user's is 404). Each run is stored as a run of the `lead_agent` assistant that
//! never executes (status `interrupted`: Fawn ends a run that did not run that way), and
//! its messages as `llm.human.input` / `llm.ai.response` rows (`caller: lead_agent`,
//! `created_at` the run's) in one append per run, in body order. Run ids are UUIDs or, as
//! DeerFlow's specs send them (`{thread_id}-r1`), plain ids (`^[A-Za-z0-9_-]{1,128}$`): the
//! journal routes (`…/runs/{run_id}/messages`, `events`, `feedback`) read those, the
//! LangGraph run routes take UUIDs only. A run id that exists is 409.

use super::thread_param;
use crate::app::AppState;
use crate::auth::Principal;
use crate::authz::owns_thread;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::wire::ok;
use axum::extract::State;
use axum::response::Response;
use chrono::{DateTime, Utc};
use fawn_runtime::seed::{SeededMessage, SeededRun, seed_finished_runs};
use serde::Deserialize;
use serde_json::json;

/// Whether the seeder is served: asked for, and not in production.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TestSeed {
    /// `DEERFLOW_ENABLE_TEST_SEED=1`.
    pub requested: bool,
    /// `DEER_FLOW_ENV` or `ENVIRONMENT` is `production` or `prod`.
    pub production: bool,
}

impl TestSeed {
    /// Read from the environment (once, by `fawn serve`).
    pub fn from_env() -> TestSeed {
        let var = |k: &str| std::env::var(k).ok();
        TestSeed::from_vars(
            var("DEERFLOW_ENABLE_TEST_SEED").as_deref(),
            var("DEER_FLOW_ENV").as_deref(),
            var("ENVIRONMENT").as_deref(),
        )
    }

    pub fn from_vars(
        enable: Option<&str>,
        deer_flow_env: Option<&str>,
        environment: Option<&str>,
    ) -> TestSeed {
        let prod = |v: Option<&str>| {
            v.is_some_and(|v| {
                let v = v.trim();
                v.eq_ignore_ascii_case("production") || v.eq_ignore_ascii_case("prod")
            })
        };
        TestSeed {
            requested: enable.is_some_and(|v| v.trim() == "1"),
            production: prod(deer_flow_env) || prod(environment),
        }
    }

    /// Served at all.
    pub fn enabled(self) -> bool {
        self.requested && !self.production
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    Human,
    Ai,
}

#[derive(Debug, Deserialize)]
pub struct SeedMessage {
    role: Role,
    content: String,
    id: String,
}

#[derive(Debug, Deserialize)]
pub struct SeedRun {
    run_id: String,
    created_at: String,
    messages: Vec<SeedMessage>,
}

#[derive(Debug, Deserialize)]
pub struct SeedBody {
    thread_id: String,
    runs: Vec<SeedRun>,
}

/// `POST /api/test-only/seed-runs`.
pub async fn seed_runs(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody<SeedBody>,
) -> ApiResult<Response> {
    if !app.test_seed {
        return Err(ApiError::not_found("Not Found"));
    }
    let thread_id = thread_param(&body.thread_id)?;
    // Everything is checked before anything is written.
    let mut runs = Vec::with_capacity(body.runs.len());
    for (i, r) in body.runs.iter().enumerate() {
        let (run_id, _) = super::history::journal_run_param(&r.run_id)
            .map_err(|e| ApiError::unprocessable(format!("runs[{i}].run_id: {}", e.detail)))?;
        let at = DateTime::parse_from_rfc3339(r.created_at.trim())
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| {
                ApiError::unprocessable(format!(
                    "runs[{i}].created_at: '{}' is not an ISO 8601 timestamp",
                    r.created_at
                ))
            })?;
        if r.messages.iter().any(|m| m.id.trim().is_empty()) {
            return Err(ApiError::unprocessable(format!(
                "runs[{i}].messages: every message needs an id"
            )));
        }
        runs.push((run_id, at, r));
    }
    owns_thread(&app, &principal, &thread_id).await?;
    let runs: Vec<SeededRun> = runs
        .into_iter()
        .map(|(run_id, created_at, r)| SeededRun {
            run_id,
            created_at,
            messages: r
                .messages
                .iter()
                .map(|m| SeededMessage {
                    human: matches!(m.role, Role::Human),
                    content: m.content.clone(),
                    id: m.id.clone(),
                })
                .collect(),
        })
        .collect();
    seed_finished_runs(&app.rt, &thread_id, principal.scope(), &runs).await?;
    Ok(ok(
        &json!({"ok": true, "thread_id": thread_id, "runs": runs.len()}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate() {
        assert!(!TestSeed::default().enabled());
        assert!(TestSeed::from_vars(Some("1"), None, None).enabled());
        assert!(!TestSeed::from_vars(Some("true"), None, None).enabled());
        assert!(!TestSeed::from_vars(Some("0"), None, None).enabled());
        let prod = TestSeed::from_vars(Some("1"), Some("Production"), None);
        assert!(prod.requested && prod.production && !prod.enabled());
        assert!(!TestSeed::from_vars(Some("1"), None, Some("prod")).enabled());
        assert!(TestSeed::from_vars(Some("1"), Some("staging"), Some("dev")).enabled());
    }
}
