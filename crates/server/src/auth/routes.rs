//! DeerFlow's auth API under `/api/v1/auth` (reference §9.5), plus admin routes for API keys:
//!
//! | route | who | answer |
//! |---|---|---|
//! | `GET /setup-status` | anyone | `{needs_setup, registration_enabled}` |
//! | `POST /initialize` `{email, password}` | anyone, once | 201 the first admin, logged in; 409 once there is one |
//! | `POST /register` `{email, password, remember_me?}` | anyone (when enabled) | 201 a `user`, logged in |
//! | `POST /login/local` form or JSON `username`, `password`, `remember_me` | anyone | `{expires_in, needs_setup}` + cookies; 401; 429 when locked out |
//! | `POST /logout` | anyone | cookies cleared |
//! | `GET /me` | a user | `{id, email, system_role, needs_setup, oauth_provider}` |
//! | `POST /change-password` `{current_password, new_password}` | a user | every other session ends; a new cookie |
//! | `GET /providers` | anyone | `{providers: []}`: no SSO providers |
//! | `GET\|POST /api-keys`, `DELETE /api-keys/{key_id}` | admin | list, create (the key is shown once), revoke |
//!
//! Sessions are the `access_token` cookie (HttpOnly, `SameSite=Lax`, `Secure` when the
//! request came over HTTPS) and a `csrf_token` cookie the page repeats in `X-CSRF-Token`.

use super::{CSRF_COOKIE, Principal, SESSION_COOKIE, Via};
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path, read_body};
use crate::wire::{json_response, ok};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use fawn_checkpoint::{NewApiKey, NewUser, StoreError, User};
use serde::Deserialize;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn user_json(u: &User) -> Value {
    json!({
        "id": u.id,
        "email": u.email,
        "system_role": u.system_role,
        "needs_setup": u.needs_setup,
        "oauth_provider": null,
    })
}

/// Whether the client reached us over HTTPS (directly or through a proxy that says so).
fn https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .next()
                .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"))
        })
}

fn set_cookie(resp: &mut Response, value: String) {
    if let Ok(v) = HeaderValue::from_str(&value) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// Remembers whether the session was a `remember_me` one (for change-password's new
/// cookie), as DeerFlow does.
const PERSISTENT_COOKIE: &str = "deerflow_session_persistent";

/// Adds the session, CSRF and persistence cookies for `user` to `resp`; returns the
/// session token's lifetime in seconds. A `remember_me` session keeps its cookie for that
/// long; otherwise the cookie ends with the browser session.
fn start_session(
    app: &AppState,
    headers: &HeaderMap,
    user: &User,
    remember: bool,
    resp: &mut Response,
) -> Result<u64, ApiError> {
    let token = app.auth.session_token(user);
    let csrf =
        fawn_auth::random_token().map_err(|e| ApiError::internal("generating a CSRF token", e))?;
    let secure = if https(headers) { "; Secure" } else { "" };
    let age = app.auth.options.session_ttl.as_secs();
    let max_age = if remember {
        format!("; Max-Age={age}")
    } else {
        String::new()
    };
    set_cookie(
        resp,
        format!("{SESSION_COOKIE}={token}; HttpOnly; SameSite=Lax; Path=/{max_age}{secure}"),
    );
    set_cookie(
        resp,
        format!("{CSRF_COOKIE}={csrf}; SameSite=Strict; Path=/{max_age}{secure}"),
    );
    set_cookie(
        resp,
        format!(
            "{PERSISTENT_COOKIE}={}; HttpOnly; SameSite=Lax; Path=/{max_age}{secure}",
            if remember { 1 } else { 0 }
        ),
    );
    Ok(age)
}

fn end_session(headers: &HeaderMap, resp: &mut Response) {
    let secure = if https(headers) { "; Secure" } else { "" };
    for name in [SESSION_COOKIE, CSRF_COOKIE, PERSISTENT_COOKIE] {
        set_cookie(
            resp,
            format!("{name}=; Path=/; Max-Age=0; SameSite=Lax{secure}"),
        );
    }
}

/// A plausible email: `local@domain` with a dot in the domain, at most 254 characters.
fn valid_email(email: &str) -> bool {
    let e = email.trim();
    match e.split_once('@') {
        Some((local, domain)) => {
            e.len() <= 254
                && !local.is_empty()
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
                && !e.chars().any(|c| c.is_whitespace() || c.is_control())
                && !domain.contains('@')
        }
        None => false,
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Credentials {
    pub email: Option<String>,
    pub password: Option<String>,
    pub remember_me: Option<bool>,
}

fn credentials(c: Credentials) -> ApiResult<(String, String)> {
    let email = c.email.unwrap_or_default().trim().to_lowercase();
    if !valid_email(&email) {
        return Err(ApiError::unprocessable(
            "value is not a valid email address",
        ));
    }
    let password = c.password.unwrap_or_default();
    fawn_auth::password::check_strength(&password).map_err(ApiError::unprocessable)?;
    Ok((email, password))
}

async fn hash_password(password: String) -> ApiResult<String> {
    tokio::task::spawn_blocking(move || fawn_auth::password::hash(&password))
        .await
        .map_err(|e| ApiError::internal("hashing a password", e))?
        .map_err(|e| ApiError::internal("hashing a password", e))
}

async fn verify_password(password: String, hash: Option<String>) -> ApiResult<bool> {
    tokio::task::spawn_blocking(move || match hash {
        Some(h) => fawn_auth::password::verify(&password, &h),
        None => {
            fawn_auth::password::verify_dummy(&password);
            false
        }
    })
    .await
    .map_err(|e| ApiError::internal("checking a password", e))
}

fn disabled_here() -> ApiError {
    ApiError::coded(
        StatusCode::BAD_REQUEST,
        "invalid_credentials",
        "Not available when DEER_FLOW_AUTH_DISABLED=1.",
    )
}

fn email_taken() -> ApiError {
    ApiError::coded(
        StatusCode::BAD_REQUEST,
        "email_already_exists",
        "Email already registered",
    )
}

/// `GET /api/v1/auth/setup-status`. With authentication off there is nothing to set up
/// (every caller is the admin `default`), but registration works as it does in DeerFlow.
pub async fn setup_status(State(app): State<AppState>) -> ApiResult<Response> {
    if !app.auth.enabled() {
        return Ok(ok(&json!({
            "needs_setup": false,
            "registration_enabled": app.auth.options.registration_enabled,
        })));
    }
    let has_admin = app
        .store()
        .has_admin()
        .await
        .map_err(|e| ApiError::store("reading users", e))?;
    Ok(ok(&json!({
        "needs_setup": !has_admin,
        "registration_enabled": app.auth.options.registration_enabled,
    })))
}

/// `POST /api/v1/auth/initialize`: the first admin, only while there is none.
pub async fn initialize(
    State(app): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Credentials>,
) -> ApiResult<Response> {
    if !app.auth.enabled() {
        return Err(disabled_here());
    }
    let remember = body.remember_me.unwrap_or(true);
    let (email, password) = credentials(body)?;
    let already = || {
        ApiError::coded(
            StatusCode::CONFLICT,
            "system_already_initialized",
            "System already initialized",
        )
    };
    if app
        .store()
        .has_admin()
        .await
        .map_err(|e| ApiError::store("reading users", e))?
    {
        return Err(already());
    }
    let hash = hash_password(password).await?;
    // The admin `fawn serve` made on first start (an API key, no password) is the one the
    // setup completes: same account, so its key and threads are the new admin's.
    let user = app
        .store()
        .initialize_admin(&email, &hash)
        .await
        .map_err(|e| match e {
            StoreError::Conflict(m) if m.contains("initialized") => already(),
            StoreError::Conflict(_) => email_taken(),
            other => ApiError::store("creating the first admin", other),
        })?;
    tracing::info!(email = %user.email, "first admin set up");
    adopt_orphans(&app, &user).await;
    let mut resp = json_response(StatusCode::CREATED, &user_json(&user));
    start_session(&app, &headers, &user, remember, &mut resp)?;
    Ok(resp)
}

/// Threads written while authentication was off have no owner; the first admin adopts
/// them, so turning authentication on loses no conversation.
async fn adopt_orphans(app: &AppState, admin: &User) {
    use fawn_checkpoint::{ThreadPatch, ThreadQuery};
    let owner = fawn_runtime::create::OWNER_KEY;
    let mut offset = 0;
    loop {
        let page = match app
            .store()
            .search_threads(&ThreadQuery {
                limit: 500,
                offset,
                ..Default::default()
            })
            .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "could not list threads to adopt");
                return;
            }
        };
        let n = page.items.len() as u64;
        for t in page
            .items
            .iter()
            .filter(|t| !t.metadata.contains_key(owner))
        {
            let mut metadata = serde_json::Map::new();
            metadata.insert(owner.into(), json!(admin.id));
            if let Err(e) = app
                .store()
                .update_thread(
                    &t.thread_id,
                    ThreadPatch {
                        metadata: Some(metadata),
                        ..Default::default()
                    },
                )
                .await
            {
                tracing::warn!(thread_id = %t.thread_id, error = %e, "could not adopt a thread");
            }
        }
        if n < 500 {
            return;
        }
        offset += n;
    }
}

/// `POST /api/v1/auth/register`: a plain user, logged in. With authentication off it works
/// as in DeerFlow (DeerFlow's own end-to-end specs register a throwaway account in that
/// mode): the account is created and the session cookies set, while every request still
/// acts as the admin `default` until authentication is turned on.
pub async fn register(
    State(app): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Credentials>,
) -> ApiResult<Response> {
    if !app.auth.options.registration_enabled {
        return Err(ApiError::coded(
            StatusCode::FORBIDDEN,
            "registration_disabled",
            "Self-registration is disabled on this deployment",
        ));
    }
    if app.auth.enabled()
        && !app
            .store()
            .has_admin()
            .await
            .map_err(|e| ApiError::store("reading users", e))?
    {
        // Stricter than DeerFlow, which lets accounts be made before the first admin
        // exists: until setup is done, the only account anyone can create is the admin's.
        // (With authentication off there is no setup to wait for.)
        return Err(ApiError::coded(
            StatusCode::FORBIDDEN,
            "needs_setup",
            "The system is not set up yet: create the first admin with /api/v1/auth/initialize",
        ));
    }
    let remember = body.remember_me.unwrap_or(true);
    let (email, password) = credentials(body)?;
    let hash = hash_password(password).await?;
    let user = app
        .store()
        .create_user(
            NewUser {
                email,
                password_hash: Some(hash),
                system_role: "user".into(),
                needs_setup: false,
            },
            false,
        )
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => email_taken(),
            other => ApiError::store("creating a user", other),
        })?;
    let mut resp = json_response(StatusCode::CREATED, &user_json(&user));
    start_session(&app, &headers, &user, remember, &mut resp)?;
    Ok(resp)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Login {
    username: Option<String>,
    email: Option<String>,
    password: Option<String>,
    remember_me: Option<Value>,
}

/// `remember_me` as a form or JSON value; absent means yes (DeerFlow's default).
fn truthy(v: &Option<Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => {
            matches!(s.to_ascii_lowercase().as_str(), "true" | "1" | "on" | "yes")
        }
        Some(Value::Number(n)) => n.as_i64() == Some(1),
        _ => false,
    }
}

fn parse_login(headers: &HeaderMap, bytes: &[u8]) -> ApiResult<Login> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
    if json {
        return crate::extract::parse_json(bytes);
    }
    let mut l = Login::default();
    for (k, v) in form_urlencoded::parse(bytes) {
        match k.as_ref() {
            "username" => l.username = Some(v.into_owned()),
            "email" => l.email = Some(v.into_owned()),
            "password" => l.password = Some(v.into_owned()),
            "remember_me" => l.remember_me = Some(Value::String(v.into_owned())),
            _ => {}
        }
    }
    Ok(l)
}

/// The client address a lockout counts against.
fn client_key(req: &Request) -> String {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// `POST /api/v1/auth/login/local`. With authentication off it checks the password and
/// hands out the session as in DeerFlow; requests still act as the admin `default`.
pub async fn login(State(app): State<AppState>, req: Request) -> ApiResult<Response> {
    let key = client_key(&req);
    let headers = req.headers().clone();
    if let Some(left) = app.auth.lockout.locked(&key, Instant::now()) {
        return Err(locked(left));
    }
    let bytes = read_body(req).await?;
    let login = parse_login(&headers, &bytes)?;
    let email = login
        .username
        .or(login.email)
        .unwrap_or_default()
        .trim()
        .to_lowercase();
    let password = login.password.unwrap_or_default();
    if email.is_empty() || password.is_empty() {
        return Err(ApiError::unprocessable(
            "username and password are required",
        ));
    }
    let user = app
        .store()
        .user_by_email(&email)
        .await
        .map_err(|e| ApiError::store("reading users", e))?;
    let hash = user.as_ref().and_then(|u| u.password_hash.clone());
    let matches = verify_password(password, hash).await?;
    let user = match user {
        Some(u) if matches => u,
        _ => {
            if app.auth.lockout.fail(&key, Instant::now()) {
                tracing::warn!(client = %key, "login locked out after repeated failures");
            }
            return Err(ApiError::coded(
                StatusCode::UNAUTHORIZED,
                "invalid_credentials",
                "Incorrect email or password",
            ));
        }
    };
    app.auth.lockout.succeed(&key);
    let mut resp = ok(&json!({}));
    let age = start_session(&app, &headers, &user, truthy(&login.remember_me), &mut resp)?;
    let body = json!({"expires_in": age, "needs_setup": false});
    let mut out = ok(&body);
    for v in resp.headers().get_all(header::SET_COOKIE) {
        out.headers_mut().append(header::SET_COOKIE, v.clone());
    }
    Ok(out)
}

fn locked(left: Duration) -> ApiError {
    tracing::debug!(seconds = left.as_secs(), "login refused: locked out");
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "Too many login attempts. Try again later.",
    )
}

/// `POST /api/v1/auth/logout`.
pub async fn logout(headers: HeaderMap) -> Response {
    let mut resp = ok(&json!({"message": "Successfully logged out"}));
    end_session(&headers, &mut resp);
    resp
}

/// `GET /api/v1/auth/me`.
pub async fn me(principal: Principal) -> Response {
    ok(&json!({
        "id": principal.id,
        "email": principal.email,
        "system_role": principal.role.as_str(),
        "needs_setup": false,
        "oauth_provider": null,
    }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChangePassword {
    current_password: Option<String>,
    new_password: Option<String>,
    remember_me: Option<bool>,
}

/// `POST /api/v1/auth/change-password`: ends every other session of the user.
pub async fn change_password(
    State(app): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    JsonBody(body): JsonBody<ChangePassword>,
) -> ApiResult<Response> {
    if principal.via == Via::Disabled {
        return Err(ApiError::coded(
            StatusCode::BAD_REQUEST,
            "invalid_credentials",
            "Password changes are not available when DEER_FLOW_AUTH_DISABLED=1.",
        ));
    }
    let new = body.new_password.unwrap_or_default();
    fawn_auth::password::check_strength(&new).map_err(ApiError::unprocessable)?;
    let user = app
        .store()
        .get_user(&principal.id)
        .await
        .map_err(|e| ApiError::store("reading users", e))?
        .ok_or_else(super::unauthenticated)?;
    let current = body.current_password.unwrap_or_default();
    if !verify_password(current, user.password_hash.clone()).await? {
        return Err(ApiError::coded(
            StatusCode::BAD_REQUEST,
            "invalid_credentials",
            "Current password is incorrect",
        ));
    }
    let hash = hash_password(new).await?;
    let user = app
        .store()
        .set_password(&user.id, &hash)
        .await
        .map_err(|e| ApiError::store("changing a password", e))?;
    let mut resp = ok(&json!({"message": "Password changed successfully"}));
    if principal.via == Via::Cookie {
        let remember = body
            .remember_me
            .unwrap_or_else(|| super::cookie(&headers, PERSISTENT_COOKIE) != Some("0"));
        start_session(&app, &headers, &user, remember, &mut resp)?;
    }
    Ok(resp)
}

/// `GET /api/v1/auth/providers`: Fawn has no SSO providers, only local accounts.
pub async fn providers() -> Response {
    ok(&json!({"providers": []}))
}

fn key_json(k: &fawn_checkpoint::ApiKey) -> Value {
    json!({
        "id": k.id,
        "user_id": k.user_id,
        "name": k.name,
        "prefix": k.prefix,
        "created_at": crate::wire::ts(&k.created_at),
        "revoked_at": crate::wire::ts_opt(&k.revoked_at),
    })
}

/// `GET /api/v1/auth/api-keys` (admin): every key, revoked ones too; never a key itself.
pub async fn list_keys(State(app): State<AppState>) -> ApiResult<Response> {
    let keys = app
        .store()
        .list_api_keys(None)
        .await
        .map_err(|e| ApiError::store("listing API keys", e))?;
    Ok(ok(&keys.iter().map(key_json).collect::<Vec<_>>()))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NewKeyBody {
    /// The user the key acts for: an email or a user id; the caller when absent.
    user: Option<String>,
    name: Option<String>,
}

/// Mints a key for `user`; the key itself appears only in the answer.
pub async fn mint_key(
    store: &dyn fawn_checkpoint::Persistence,
    user: &User,
    name: &str,
) -> Result<(fawn_checkpoint::ApiKey, String), String> {
    let minted = fawn_auth::keys::mint().map_err(|e| e.to_string())?;
    let stored = store
        .create_api_key(NewApiKey {
            user_id: user.id.clone(),
            name: name.to_string(),
            key_hash: minted.hash,
            prefix: minted.prefix,
        })
        .await
        .map_err(|e| e.to_string())?;
    Ok((stored, minted.key))
}

/// `POST /api/v1/auth/api-keys` (admin) `{user?, name?}` → 201 with the key, shown once.
pub async fn create_key(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody<NewKeyBody>,
) -> ApiResult<Response> {
    if principal.via == Via::Disabled {
        return Err(disabled_here());
    }
    let who = body.user.unwrap_or_else(|| principal.id.clone());
    let user = match app.store().user_by_email(&who).await {
        Ok(Some(u)) => Some(u),
        Ok(None) => app
            .store()
            .get_user(&who)
            .await
            .map_err(|e| ApiError::store("reading users", e))?,
        Err(e) => return Err(ApiError::store("reading users", e)),
    }
    .ok_or_else(|| ApiError::not_found(format!("User '{who}' not found")))?;
    let name = body.name.unwrap_or_else(|| "api key".into());
    if name.chars().count() > 200 {
        return Err(ApiError::unprocessable(
            "name must be at most 200 characters",
        ));
    }
    let (stored, key) = mint_key(app.store().as_ref(), &user, &name)
        .await
        .map_err(|e| ApiError::internal("creating an API key", e))?;
    let mut body = key_json(&stored);
    body["key"] = json!(key);
    Ok(json_response(StatusCode::CREATED, &body))
}

/// `DELETE /api/v1/auth/api-keys/{key_id}` (admin).
pub async fn revoke_key(
    State(app): State<AppState>,
    Path(key_id): Path<String>,
) -> ApiResult<Response> {
    if app
        .store()
        .revoke_api_key(&key_id)
        .await
        .map_err(|e| ApiError::store("revoking an API key", e))?
    {
        Ok(ok(&json!({"success": true})))
    } else {
        Err(ApiError::not_found(format!("API key {key_id} not found")))
    }
}
