//! Who may call what. Every route is added through [`Routes::route`], which takes the access
//! rule of each method it serves; `Router::route` itself is banned outside this module
//! (`clippy.toml`), so a route cannot be added without declaring who may call it. The rules
//! are kept as a table ([`Routes::specs`]) that the authorization tests walk route by route.
//!
//! * [`Allowed::Public`]: anyone, anonymous included.
//! * [`Allowed::User`]: an authenticated user (401 otherwise). A route whose path names a
//!   thread, a cron, a run or a scheduled task (`{thread_id}`, `{cron_id}`, `{run_id}`,
//!   `{task_id}`) also checks that the caller owns it: another user's resource answers the
//!   same 404 as a missing one. A thread that does not exist yet passes (routes that create
//!   it stamp the caller as its owner).
//! * [`Allowed::Admin`]: an admin (401 anonymous, 403 a plain user).
//! * [`Allowed::Metrics`]: an admin, or a scraper presenting the configured metrics token
//!   (`metrics.token`, `FAWN_METRICS_TOKEN`) as `Authorization: Bearer …` — a token that
//!   opens nothing else ([`crate::auth::Scraper`]).
//!
//! A method the table does not declare for a route is refused (405), never served.
//! Listings and searches filter by owner in their handlers; ownership is never checked by
//! hiding a route.

use crate::app::AppState;
use crate::auth::{Caller, Principal, unauthenticated};
use crate::error::ApiError;
use axum::Router;
use axum::extract::{FromRequestParts, RawPathParams, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use std::sync::Arc;

/// Who may call a route's method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowed {
    Public,
    User,
    Admin,
    /// `/metrics`: admins, or the metrics token.
    Metrics,
}

/// The methods routes serve (`HEAD` is served as `GET`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Verb {
    fn of(m: &Method) -> Option<Verb> {
        Some(match *m {
            Method::GET | Method::HEAD => Verb::Get,
            Method::POST => Verb::Post,
            Method::PUT => Verb::Put,
            Method::PATCH => Verb::Patch,
            Method::DELETE => Verb::Delete,
            _ => return None,
        })
    }

    pub fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Patch => Method::PATCH,
            Verb::Delete => Method::DELETE,
        }
    }
}

/// What a route's path names, whose owner is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    None,
    Thread,
    Cron,
    Run,
    /// A DeerFlow scheduled task (a cron carrying a task, owned like a cron).
    Task,
}

impl Resource {
    /// Read off the path: `{thread_id}` wins over `{run_id}` (a thread's run is the
    /// thread's).
    pub fn of(path: &str) -> Resource {
        if path.contains("{thread_id}") {
            Resource::Thread
        } else if path.contains("{cron_id}") {
            Resource::Cron
        } else if path.contains("{run_id}") {
            Resource::Run
        } else if path.contains("{task_id}") {
            Resource::Task
        } else {
            Resource::None
        }
    }
}

/// One declared rule: `method path` may be called by `who`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub path: &'static str,
    pub method: Verb,
    pub who: Allowed,
}

/// A router whose every route declared its access rules.
pub struct Routes {
    router: Router<AppState>,
    specs: Vec<Spec>,
}

impl Default for Routes {
    fn default() -> Self {
        Routes::new()
    }
}

impl Routes {
    pub fn new() -> Routes {
        Routes {
            router: Router::new(),
            specs: Vec::new(),
        }
    }

    /// Adds `path` served by `methods`, with the rule of each method it serves.
    #[allow(clippy::disallowed_methods)]
    pub fn route(
        mut self,
        path: &'static str,
        rules: &[(Verb, Allowed)],
        methods: MethodRouter<AppState>,
    ) -> Routes {
        for (m, who) in rules {
            self.specs.push(Spec {
                path,
                method: *m,
                who: *who,
            });
        }
        let rules: Arc<[(Verb, Allowed)]> = rules.into();
        let resource = Resource::of(path);
        let layer = axum::middleware::from_fn(move |req: Request, next: Next| {
            let rules = rules.clone();
            if let Some(slot) = req.extensions().get::<crate::observe::RouteSlot>() {
                slot.set(path);
            }
            async move { enforce(&rules, resource, req, next).await }
        });
        self.router = self.router.route(path, methods.route_layer(layer));
        self
    }

    /// Both tables in one (their paths must not overlap).
    pub fn merge(mut self, other: Routes) -> Routes {
        self.router = self.router.merge(other.router);
        self.specs.extend(other.specs);
        self
    }

    pub fn specs(&self) -> &[Spec] {
        &self.specs
    }

    pub fn into_router(self) -> Router<AppState> {
        self.router
    }

    /// The router and its table.
    pub fn into_parts(self) -> (Router<AppState>, Vec<Spec>) {
        (self.router, self.specs)
    }
}

/// Answers a request refused here, before its handler read its body. An unread body left on
/// a kept-alive connection makes the server close it after the answer, and a client that
/// already sent its next request on that connection sees it drop ("server disconnected
/// without sending a response"); saying `Connection: close` with the answer tells the
/// client not to reuse it.
fn refuse(has_body: bool, answer: impl IntoResponse) -> Response {
    let mut r = answer.into_response();
    if has_body {
        r.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    r
}

/// Whether the request carries a body its handler would read.
fn has_body(req: &Request) -> bool {
    let h = req.headers();
    h.contains_key(axum::http::header::TRANSFER_ENCODING)
        || h.get(axum::http::header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0")
}

async fn enforce(
    rules: &[(Verb, Allowed)],
    resource: Resource,
    req: Request,
    next: Next,
) -> Response {
    let with_body = has_body(&req);
    let declared = Verb::of(req.method()).and_then(|m| rules.iter().find(|(rm, _)| *rm == m));
    let Some((_, who)) = declared else {
        return refuse(
            with_body,
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed"),
        );
    };
    if *who == Allowed::Public {
        return next.run(req).await;
    }
    if *who == Allowed::Metrics && req.extensions().get::<crate::auth::Scraper>().is_some() {
        return next.run(req).await;
    }
    let principal = match req.extensions().get::<Caller>() {
        Some(Caller(Some(p))) => p.clone(),
        _ => return refuse(with_body, unauthenticated()),
    };
    if matches!(who, Allowed::Admin | Allowed::Metrics) && !principal.is_admin() {
        return refuse(
            with_body,
            ApiError::new(StatusCode::FORBIDDEN, "Admin access required"),
        );
    }
    if resource == Resource::None || principal.scope().is_none() {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let params = RawPathParams::from_request_parts(&mut parts, &()).await;
    let app = parts.extensions.get::<AppState>().cloned();
    let req = Request::from_parts(parts, body);
    let (Ok(params), Some(app)) = (params, app) else {
        return ApiError::internal("checking ownership", "route parameters or state missing")
            .into_response();
    };
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    let check = match resource {
        Resource::Thread => match param("thread_id") {
            Some(id) => owns_thread(&app, &principal, &id).await,
            None => Ok(()),
        },
        Resource::Cron => match param("cron_id") {
            Some(id) => owns_cron(&app, &principal, &id).await,
            None => Ok(()),
        },
        Resource::Run => match param("run_id") {
            Some(id) => owns_run(&app, &principal, &id).await,
            None => Ok(()),
        },
        Resource::Task => match param("task_id") {
            Some(id) => owns_task(&app, &principal, &id).await,
            None => Ok(()),
        },
        Resource::None => Ok(()),
    };
    match check {
        Ok(()) => next.run(req).await,
        Err(e) => refuse(with_body, e),
    }
}

/// A thread id as stored: UUIDs canonical, DeerFlow's plain ids as they are.
pub fn canonical_thread_id(raw: &str) -> String {
    match uuid::Uuid::parse_str(raw.trim()) {
        Ok(u) => u.hyphenated().to_string(),
        Err(_) => raw.to_string(),
    }
}

/// `Ok` when the thread is the caller's or does not exist; the route's own 404 otherwise.
pub async fn owns_thread(app: &AppState, p: &Principal, raw_id: &str) -> Result<(), ApiError> {
    let id = canonical_thread_id(raw_id);
    match app.store().get_thread(&id).await {
        Ok(Some(t)) if !p.owns_thread(&t.metadata) => Err(ApiError::not_found(format!(
            "Thread with ID {raw_id} not found"
        ))),
        Ok(_) => Ok(()),
        Err(e) => Err(ApiError::store("checking the thread's owner", e)),
    }
}

async fn owns_cron(app: &AppState, p: &Principal, id: &str) -> Result<(), ApiError> {
    match app.store().get_cron(id).await {
        Ok(Some(c)) if !p.owns(c.user_id.as_deref()) => {
            Err(ApiError::not_found(format!("Cron {id} not found")))
        }
        Ok(_) => Ok(()),
        Err(e) => Err(ApiError::store("checking the cron's owner", e)),
    }
}

/// A scheduled task is its cron: `Ok` when the caller owns it or it does not exist.
async fn owns_task(app: &AppState, p: &Principal, id: &str) -> Result<(), ApiError> {
    match app.store().get_cron(id).await {
        Ok(Some(c)) if !p.owns(c.user_id.as_deref()) => {
            Err(ApiError::not_found("Scheduled task not found"))
        }
        Ok(_) => Ok(()),
        Err(e) => Err(ApiError::store("checking the scheduled task's owner", e)),
    }
}

/// The user a run acts for (its typed options' `config.configurable.user_id`, set at
/// creation).
pub fn run_user(run: &fawn_checkpoint::Run) -> Option<&str> {
    fawn_runtime::kwargs::RunKwargs::stored_user(&run.kwargs)
}

async fn owns_run(app: &AppState, p: &Principal, id: &str) -> Result<(), ApiError> {
    match app.store().get_run(id).await {
        Ok(Some(r)) if !p.owns(run_user(&r)) => Err(ApiError::not_found("Run not found")),
        Ok(_) => Ok(()),
        Err(e) => Err(ApiError::store("checking the run's owner", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_read_off_paths() {
        assert_eq!(
            Resource::of("/threads/{thread_id}/runs/{run_id}"),
            Resource::Thread
        );
        assert_eq!(Resource::of("/runs/{run_id}/stream"), Resource::Run);
        assert_eq!(Resource::of("/runs/crons/{cron_id}"), Resource::Cron);
        assert_eq!(
            Resource::of("/scheduled-tasks/{task_id}/runs"),
            Resource::Task
        );
        assert_eq!(Resource::of("/threads/search"), Resource::None);
    }
}
