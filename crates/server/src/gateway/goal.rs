//! `GET|PUT|DELETE /api/threads/{id}/goal` (DeerFlow's `/goal`): the thread's `goal` state
//! channel, kept by [`fawn_runtime::goal`] (which also runs the hidden continuation turns).
//! Every answer is `{"goal": GoalState | null}`.
//!
//! `PUT {objective, max_continuations = 8}`: `objective` 1..4000 characters, whitespace
//! collapsed (blank: 422); `max_continuations` 0..8 (422 outside). It replaces any goal and
//! creates the thread (owned by the caller) when it does not exist yet — the UI sets a goal
//! on a new chat before its first run. `DELETE` removes the goal. Both answer 409 while a
//! run is pending or in flight. `GET` and `DELETE` of a thread that does not exist answer
//! `{"goal": null}`.

use super::thread_param;
use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path};
use crate::routes::threads::load_thread;
use crate::wire::ok;
use axum::extract::State;
use axum::response::Response;
use fawn_checkpoint::{IfExists, JsonMap, NewThread, Thread};
use fawn_runtime::goal::{DEFAULT_MAX_CONTINUATIONS, MAX_OBJECTIVE_CHARS};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
pub struct GoalBody {
    objective: String,
    #[serde(default = "default_max")]
    max_continuations: i64,
}

fn default_max() -> i64 {
    i64::from(DEFAULT_MAX_CONTINUATIONS)
}

async fn existing(app: &AppState, id: &str) -> ApiResult<Option<Thread>> {
    app.store()
        .get_thread(id)
        .await
        .map_err(|e| ApiError::store("loading the thread", e))
}

fn answer(goal: Option<&fawn_state::GoalState>) -> Response {
    ok(&json!({"goal": goal.map_or(Value::Null, |g| json!(g))}))
}

/// `GET /api/threads/{id}/goal`.
pub async fn get(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
) -> ApiResult<Response> {
    let id = thread_param(&thread_id)?;
    if existing(&app, &id).await?.is_none() {
        return Ok(answer(None));
    }
    let goal = fawn_runtime::goal::read_goal(&app, &id).await?;
    Ok(answer(goal.as_ref()))
}

/// `PUT /api/threads/{id}/goal`.
pub async fn put(
    State(app): State<AppState>,
    principal: Principal,
    Path(thread_id): Path<String>,
    JsonBody(body): JsonBody<GoalBody>,
) -> ApiResult<Response> {
    let id = thread_param(&thread_id)?;
    let n = body.objective.chars().count();
    if n == 0 || n > MAX_OBJECTIVE_CHARS {
        return Err(ApiError::unprocessable(format!(
            "Invalid request body at `objective`: 1 to {MAX_OBJECTIVE_CHARS} characters"
        )));
    }
    let max = u32::try_from(body.max_continuations)
        .ok()
        .filter(|m| *m <= DEFAULT_MAX_CONTINUATIONS)
        .ok_or_else(|| {
            ApiError::unprocessable(format!(
                "Invalid request body at `max_continuations`: 0 to {DEFAULT_MAX_CONTINUATIONS}"
            ))
        })?;
    let now = crate::wire::ts(&app.now());
    let goal = fawn_runtime::goal::new_goal(&body.objective, max, &now)
        .map_err(ApiError::unprocessable)?;
    let thread = match existing(&app, &id).await? {
        Some(t) => t,
        None => {
            let mut metadata = JsonMap::new();
            if let Some(me) = principal.scope() {
                metadata.insert(fawn_runtime::create::OWNER_KEY.into(), json!(me));
            }
            let new = NewThread {
                thread_id: Some(id.clone()),
                metadata,
                if_exists: IfExists::DoNothing,
                ttl: None,
            };
            fawn_runtime::threads::create_thread(&app, new, Vec::new()).await?;
            // Created meanwhile by someone else: only its owner may go on.
            let t = load_thread(&app, &id).await?;
            if !principal.owns_thread(&t.metadata) {
                return Err(crate::routes::threads::thread_not_found(&id));
            }
            t
        }
    };
    fawn_runtime::goal::set_goal(&app, &thread, goal.clone()).await?;
    Ok(answer(Some(&goal)))
}

/// `DELETE /api/threads/{id}/goal`.
pub async fn delete(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
) -> ApiResult<Response> {
    let id = thread_param(&thread_id)?;
    if let Some(thread) = existing(&app, &id).await? {
        fawn_runtime::goal::clear_goal(&app, &thread).await?;
    }
    Ok(answer(None))
}
