//! Who is calling: every request is resolved to a [`Caller`] before any route runs, from (in
//! order) an API key (`x-api-key`, or `Authorization: Bearer fawn_…`), a bearer session
//! token, or the `access_token` session cookie. With authentication off (DeerFlow's
//! `DEER_FLOW_AUTH_DISABLED=1`, `fawn serve --no-auth`) everyone is DeerFlow's synthetic
//! admin `default`, and nothing is scoped to a user.
//!
//! * A credential that is presented but wrong (unknown or revoked key, bad bearer token) is
//!   a 401 at once; a stale cookie just makes the caller anonymous.
//! * **CSRF** (double submit): a request authenticated by the cookie that changes state
//!   (POST/PUT/PATCH/DELETE) must carry `X-CSRF-Token` equal to the `csrf_token` cookie,
//!   else 403 and nothing changes. API keys and bearer tokens are not sent by browsers on
//!   their own, so they need none. The `Origin` check is [`crate::access`]'s.
//! * What a caller may do is declared per route ([`crate::authz`]).
//!
//! The auth API itself (`/api/v1/auth/*`) is [`routes`].

pub mod bootstrap;
pub mod routes;

use crate::app::AppState;
use crate::error::ApiError;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fawn_auth::Role;
use std::time::Duration;

/// The cookie carrying the session token.
pub const SESSION_COOKIE: &str = "access_token";
/// The cookie carrying the CSRF token (readable by the page's script).
pub const CSRF_COOKIE: &str = "csrf_token";
/// The header that must repeat the CSRF cookie.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The synthetic user of auth-disabled mode.
pub const DEFAULT_USER_EMAIL: &str = "default@test.local";

/// How authentication is set up.
#[derive(Clone, Debug)]
pub struct AuthOptions {
    /// Off: every caller is the admin `default` and nothing is per user.
    pub enabled: bool,
    /// `AUTH_JWT_SECRET`; when unset a secret is generated once under the data directory.
    pub jwt_secret: Option<String>,
    /// Anyone may create an account with `POST /api/v1/auth/register`.
    pub registration_enabled: bool,
    /// Lifetime of a session token (DeerFlow: 7 days). A `remember_me` login keeps the
    /// cookie that long; otherwise it is a browser-session cookie.
    pub session_ttl: Duration,
    /// Failed logins per client address before it is locked out, within `lockout_window`,
    /// for `lockout_for`.
    pub lockout_failures: u32,
    pub lockout_window: Duration,
    pub lockout_for: Duration,
}

impl AuthOptions {
    /// Authentication off: the library default (tests, embedding). `fawn serve` turns it on
    /// unless told otherwise ([`AuthOptions::from_env`]).
    pub fn disabled() -> AuthOptions {
        AuthOptions {
            enabled: false,
            ..AuthOptions::enabled()
        }
    }

    /// Authentication on, with DeerFlow's defaults.
    pub fn enabled() -> AuthOptions {
        AuthOptions {
            enabled: true,
            jwt_secret: None,
            registration_enabled: true,
            session_ttl: Duration::from_secs(7 * 24 * 3600),
            lockout_failures: 5,
            lockout_window: Duration::from_secs(15 * 60),
            lockout_for: Duration::from_secs(5 * 60),
        }
    }

    /// On unless `DEER_FLOW_AUTH_DISABLED=1` (ignored when `DEER_FLOW_ENV` or `ENVIRONMENT`
    /// is `production`, as DeerFlow does); `AUTH_JWT_SECRET`; `AUTH_REGISTRATION_ENABLED=0`
    /// closes self-registration.
    pub fn from_env() -> AuthOptions {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let truthy = |k: &str| {
            var(k).is_some_and(|v| {
                matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "1" | "true" | "yes" | "on"
                )
            })
        };
        let falsy = |k: &str| {
            var(k).is_some_and(|v| {
                matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "0" | "false" | "no" | "off"
                )
            })
        };
        let production = ["DEER_FLOW_ENV", "ENVIRONMENT"].iter().any(|k| {
            var(k).is_some_and(|v| {
                v.eq_ignore_ascii_case("production") || v.eq_ignore_ascii_case("prod")
            })
        });
        let disabled = truthy("DEER_FLOW_AUTH_DISABLED") && !production;
        if truthy("DEER_FLOW_AUTH_DISABLED") && production {
            tracing::warn!(
                "DEER_FLOW_AUTH_DISABLED is ignored in production; authentication stays on"
            );
        }
        AuthOptions {
            enabled: !disabled,
            jwt_secret: var(fawn_auth::secret::ENV),
            registration_enabled: !falsy("AUTH_REGISTRATION_ENABLED"),
            ..AuthOptions::enabled()
        }
    }
}

/// Authentication as the running server holds it.
#[derive(Debug)]
pub struct Auth {
    pub options: AuthOptions,
    secret: Vec<u8>,
    pub lockout: fawn_auth::Lockout,
}

impl Auth {
    /// Loads (or creates) the JWT secret under `data_dir`. With authentication off too: as
    /// in DeerFlow, `register` and `login/local` still create accounts and hand out real
    /// sessions then (ignored while authentication stays off).
    pub fn new(
        options: AuthOptions,
        data_dir: &std::path::Path,
    ) -> Result<Auth, fawn_auth::secret::SecretError> {
        let secret = fawn_auth::secret::load_or_create(options.jwt_secret.as_deref(), data_dir)?;
        Ok(Auth {
            lockout: fawn_auth::Lockout::new(
                options.lockout_failures,
                options.lockout_window,
                options.lockout_for,
            ),
            options,
            secret,
        })
    }

    pub fn enabled(&self) -> bool {
        self.options.enabled
    }

    /// A session token for `user`, valid for the session lifetime.
    pub fn session_token(&self, user: &fawn_checkpoint::User) -> String {
        let ttl = self.options.session_ttl;
        let now = chrono::Utc::now().timestamp();
        fawn_auth::token::sign(
            &self.secret,
            &fawn_auth::Claims {
                sub: user.id.clone(),
                ver: user.token_version,
                iat: now,
                exp: now + i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX / 2),
            },
        )
    }

    fn verify(&self, token: &str) -> Option<fawn_auth::Claims> {
        fawn_auth::token::verify(&self.secret, token, chrono::Utc::now().timestamp()).ok()
    }
}

/// How a caller proved who they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// Authentication is off.
    Disabled,
    /// The session cookie (a browser): CSRF applies.
    Cookie,
    /// A session token as `Authorization: Bearer`.
    Bearer,
    ApiKey,
}

/// An authenticated caller.
#[derive(Clone, Debug)]
pub struct Principal {
    pub id: String,
    pub email: String,
    pub role: Role,
    pub via: Via,
}

impl Principal {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// The user data is scoped to, or `None` when authentication is off (one user: nothing
    /// is stamped or filtered, so data written before and after stays visible).
    pub fn scope(&self) -> Option<&str> {
        (self.via != Via::Disabled).then_some(self.id.as_str())
    }

    /// Whether a resource whose `owner` is `owner` is this caller's.
    pub fn owns(&self, owner: Option<&str>) -> bool {
        match self.scope() {
            None => true,
            Some(me) => owner == Some(me),
        }
    }

    /// Whether a thread (by its metadata) is this caller's.
    pub fn owns_thread(&self, metadata: &serde_json::Map<String, serde_json::Value>) -> bool {
        self.owns(
            metadata
                .get(fawn_runtime::create::OWNER_KEY)
                .and_then(|v| v.as_str()),
        )
    }

    /// The directory-safe user id memory and custom agents are kept under.
    pub fn data_user(&self, app: &AppState) -> String {
        match self.scope() {
            Some(id) => fawn_agent::options::safe_user_id(id),
            None => app.user_id.clone(),
        }
    }

    fn from_user(u: &fawn_checkpoint::User, via: Via) -> Principal {
        Principal {
            id: u.id.clone(),
            email: u.email.clone(),
            role: Role::parse(&u.system_role),
            via,
        }
    }
}

/// A request that presented the metrics token: it may read `/metrics` ([`crate::authz::Allowed::Metrics`])
/// and is anonymous everywhere else.
#[derive(Clone, Copy, Debug)]
pub struct Scraper;

/// Whether `headers` present `token` as `Authorization: Bearer …` (compared in constant
/// time).
fn presents_metrics_token(headers: &HeaderMap, token: &str) -> bool {
    let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, cred)) = v.trim().split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer")
        && fawn_auth::constant_time_eq(cred.trim().as_bytes(), token.as_bytes())
}

/// The caller of a request, as resolved by [`authenticate`]: `None` is anonymous.
#[derive(Clone, Debug)]
pub struct Caller(pub Option<Principal>);

impl Caller {
    /// The principal, or a 401.
    pub fn require(&self) -> Result<&Principal, ApiError> {
        self.0.as_ref().ok_or_else(unauthenticated)
    }
}

/// The answer to a request that needs a user and has none.
pub fn unauthenticated() -> ApiError {
    ApiError::coded(
        StatusCode::UNAUTHORIZED,
        "not_authenticated",
        "Authentication required: sign in, or send an API key (x-api-key)",
    )
}

/// Handlers take the authenticated caller with this extractor; a request that reached a
/// handler without one (a route outside the access table) is refused, never served
/// anonymously.
impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<Caller>() {
            Some(Caller(Some(p))) => Ok(p.clone()),
            _ => Err(unauthenticated()),
        }
    }
}

/// The value of cookie `name`, if the request sends it.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().trim_matches('"'))
}

/// Routes that change state but come before a session exists (or end it), so a CSRF token
/// cannot be asked of them. The `Origin` check still applies to them.
fn csrf_exempt(path: &str) -> bool {
    let p = path.strip_prefix("/api").unwrap_or(path);
    matches!(
        p,
        "/v1/auth/login/local" | "/v1/auth/register" | "/v1/auth/initialize" | "/v1/auth/logout"
    )
}

fn unauthorized(detail: &str) -> Response {
    ApiError::new(StatusCode::UNAUTHORIZED, detail).into_response()
}

/// An API key or a bearer session token, whichever the request presents.
enum Presented<'a> {
    Key(&'a str),
    Bearer(&'a str),
}

fn presented(headers: &HeaderMap) -> Result<Option<Presented<'_>>, &'static str> {
    if let Some(v) = headers.get("x-api-key") {
        let v = v.to_str().map_err(|_| "Invalid API key")?.trim();
        return Ok(Some(Presented::Key(v)));
    }
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v
            .to_str()
            .map_err(|_| "Invalid authorization header")?
            .trim();
        let Some((scheme, cred)) = v.split_once(' ') else {
            return Err("Invalid authorization header");
        };
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err("Unsupported authorization scheme; use Bearer");
        }
        let cred = cred.trim();
        return Ok(Some(if fawn_auth::keys::looks_like_key(cred) {
            Presented::Key(cred)
        } else {
            Presented::Bearer(cred)
        }));
    }
    Ok(None)
}

async fn session_user(
    app: &AppState,
    token: &str,
    via: Via,
) -> Result<Option<Principal>, ApiError> {
    let Some(claims) = app.auth.verify(token) else {
        return Ok(None);
    };
    let user = app
        .store()
        .get_user(&claims.sub)
        .await
        .map_err(|e| ApiError::store("loading the session's user", e))?;
    Ok(user
        .filter(|u| u.token_version == claims.ver)
        .map(|u| Principal::from_user(&u, via)))
}

/// Resolves who is calling.
pub async fn resolve(app: &AppState, headers: &HeaderMap) -> Result<Caller, Response> {
    if !app.auth.enabled() {
        return Ok(Caller(Some(Principal {
            id: app.user_id.clone(),
            email: DEFAULT_USER_EMAIL.into(),
            role: Role::Admin,
            via: Via::Disabled,
        })));
    }
    match presented(headers).map_err(unauthorized)? {
        Some(Presented::Key(key)) => {
            match app.store().api_key_user(&fawn_auth::keys::hash(key)).await {
                Ok(Some((_, user))) => Ok(Caller(Some(Principal::from_user(&user, Via::ApiKey)))),
                Ok(None) => Err(unauthorized("Invalid API key")),
                Err(e) => Err(ApiError::store("checking an API key", e).into_response()),
            }
        }
        Some(Presented::Bearer(token)) => match session_user(app, token, Via::Bearer).await {
            Ok(Some(p)) => Ok(Caller(Some(p))),
            Ok(None) => Err(unauthorized("Invalid or expired token")),
            Err(e) => Err(e.into_response()),
        },
        None => match cookie(headers, SESSION_COOKIE) {
            Some(token) => session_user(app, token, Via::Cookie)
                .await
                .map(Caller)
                .map_err(IntoResponse::into_response),
            None => Ok(Caller(None)),
        },
    }
}

/// The authentication middleware (over every route, after the host/origin guard): resolves
/// the caller, checks CSRF for cookie sessions, and hands the caller to the route.
pub async fn authenticate(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    if app.auth.enabled()
        && let Some(token) = app.metrics_token.as_deref()
        && presents_metrics_token(req.headers(), token)
    {
        req.extensions_mut().insert(Caller(None));
        req.extensions_mut().insert(Scraper);
        req.extensions_mut().insert(app);
        return next.run(req).await;
    }
    let caller = match resolve(&app, req.headers()).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    let changes_state = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if changes_state
        && caller.0.as_ref().is_some_and(|p| p.via == Via::Cookie)
        && !csrf_exempt(req.uri().path())
    {
        let cookie_token = cookie(req.headers(), CSRF_COOKIE);
        let header_token = req.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        let valid = matches!((cookie_token, header_token), (Some(c), Some(h))
            if !c.is_empty() && fawn_auth::constant_time_eq(c.as_bytes(), h.trim().as_bytes()));
        if !valid {
            let detail = if header_token.is_none() {
                "CSRF token missing. Include X-CSRF-Token header."
            } else {
                "CSRF token mismatch."
            };
            return ApiError::new(StatusCode::FORBIDDEN, detail).into_response();
        }
    }
    req.extensions_mut().insert(caller);
    req.extensions_mut().insert(app);
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            "a=1; access_token=tok; csrf_token=\"c\"".parse().unwrap(),
        );
        assert_eq!(cookie(&h, "access_token"), Some("tok"));
        assert_eq!(cookie(&h, "csrf_token"), Some("c"));
        assert_eq!(cookie(&h, "missing"), None);
        assert_eq!(cookie(&h, "access"), None);
    }

    #[test]
    fn only_pre_session_routes_skip_csrf() {
        assert!(csrf_exempt("/api/v1/auth/login/local"));
        assert!(!csrf_exempt("/api/v1/auth/change-password"));
        assert!(!csrf_exempt("/threads"));
    }
}
