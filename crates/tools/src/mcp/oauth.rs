//! OAuth token acquisition for HTTP MCP servers (`client_credentials` and `refresh_token`
//! grants), and the HTTP client that puts `Authorization: <type> <token>` on every request.
//!
//! The token is fetched from `token_url` with the configured field names, cached, and
//! fetched again `refresh_skew_seconds` before it expires. A request the MCP server answers
//! with 401 drops the cached token and is retried once with a fresh one.

use super::redact::{Redactor, display_url};
use fawn_config::McpOAuthConfig;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use serde_json::Value;
use sse_stream::Sse;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Token requests give up after this long.
const TOKEN_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// `expires_in` when the token response has none (DeerFlow's default).
const DEFAULT_EXPIRES_IN: u64 = 3600;
/// Largest token response read.
const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

struct Cached {
    /// `<type> <token>`.
    header: String,
    refresh_at: Instant,
}

/// One server's token: fetched on demand, cached, refreshed before expiry.
pub(crate) struct TokenSource {
    server: String,
    cfg: McpOAuthConfig,
    http: reqwest::Client,
    cached: tokio::sync::Mutex<Option<Cached>>,
    redactor: Redactor,
}

impl TokenSource {
    /// Checks that the grant has what it needs.
    pub(crate) fn new(
        server: &str,
        cfg: McpOAuthConfig,
        http: reqwest::Client,
        redactor: Redactor,
    ) -> Result<TokenSource, String> {
        if cfg.token_url.trim().is_empty() {
            return Err("oauth.token_url is required".into());
        }
        match url::Url::parse(&cfg.token_url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => return Err("oauth.token_url must be an http(s) URL".into()),
        }
        let present = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.trim().is_empty());
        match cfg.grant_type.as_str() {
            "client_credentials" => {
                if !present(&cfg.client_id) || !present(&cfg.client_secret) {
                    return Err(
                        "oauth grant client_credentials needs client_id and client_secret".into(),
                    );
                }
            }
            "refresh_token" => {
                if !present(&cfg.refresh_token) {
                    return Err("oauth grant refresh_token needs refresh_token".into());
                }
            }
            other => {
                return Err(format!(
                    "unsupported oauth grant_type \"{other}\"; expected client_credentials or \
                     refresh_token"
                ));
            }
        }
        Ok(TokenSource {
            server: server.to_string(),
            cfg,
            http,
            cached: tokio::sync::Mutex::new(None),
            redactor,
        })
    }

    /// The `Authorization` value to send now, fetching a token if none is fresh.
    pub(crate) async fn authorization(&self) -> Result<String, String> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref()
            && Instant::now() < c.refresh_at
        {
            return Ok(c.header.clone());
        }
        let fresh = self.fetch().await?;
        let header = fresh.header.clone();
        *cached = Some(fresh);
        Ok(header)
    }

    /// Forgets the cached token if it is still `rejected` (the server refused it).
    pub(crate) async fn invalidate(&self, rejected: &str) {
        let mut cached = self.cached.lock().await;
        if cached.as_ref().is_some_and(|c| c.header == rejected) {
            *cached = None;
        }
    }

    fn form(&self) -> Vec<(String, String)> {
        let c = &self.cfg;
        let mut form: Vec<(String, String)> = vec![("grant_type".into(), c.grant_type.clone())];
        form.extend(
            c.extra_token_params
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        let mut put = |k: &str, v: &Option<String>| {
            if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
                form.retain(|(name, _)| name != k);
                form.push((k.to_string(), v.to_string()));
            }
        };
        put("scope", &c.scope);
        put("audience", &c.audience);
        if c.grant_type == "refresh_token" {
            put("refresh_token", &c.refresh_token);
        }
        put("client_id", &c.client_id);
        put("client_secret", &c.client_secret);
        form
    }

    async fn fetch(&self) -> Result<Cached, String> {
        let c = &self.cfg;
        let at = display_url(&c.token_url);
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(self.form())
            .finish();
        let started = Instant::now();
        let response = self
            .http
            .post(&c.token_url)
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .timeout(TOKEN_REQUEST_TIMEOUT)
            .body(body)
            .send()
            .await
            .map_err(|e| {
                self.redactor
                    .apply(&format!("OAuth token request to {at} failed: {e}"))
            })?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| {
            self.redactor
                .apply(&format!("OAuth token response from {at} unreadable: {e}"))
        })?;
        if bytes.len() > MAX_TOKEN_RESPONSE {
            return Err(format!("OAuth token response from {at} is too large"));
        }
        if !status.is_success() {
            let snippet: String = String::from_utf8_lossy(&bytes).chars().take(200).collect();
            return Err(self.redactor.apply(&format!(
                "OAuth token request to {at} failed: HTTP {status}: {snippet}"
            )));
        }
        let payload: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("OAuth token response from {at} is not JSON: {e}"))?;
        let token = match payload.get(&c.token_field) {
            Some(Value::String(t)) if !t.is_empty() => t.clone(),
            _ => {
                return Err(format!(
                    "OAuth token response from {at} has no \"{}\"",
                    c.token_field
                ));
            }
        };
        let token_type = match payload.get(&c.token_type_field) {
            Some(Value::String(t)) if !t.is_empty() => t.clone(),
            _ => c.default_token_type.clone(),
        };
        let expires_in = match payload.get(&c.expires_in_field) {
            Some(Value::Number(n)) => n
                .as_u64()
                .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
            Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
            _ => None,
        }
        .unwrap_or(DEFAULT_EXPIRES_IN)
        .max(1);
        // Refreshed `refresh_skew_seconds` before it expires (at once if the token lives
        // shorter than the skew).
        let lifetime = Duration::from_secs(expires_in.saturating_sub(c.refresh_skew_seconds));
        self.redactor.add(&token);
        tracing::info!(
            server = %self.server,
            expires_in,
            "fetched OAuth access token for MCP server"
        );
        Ok(Cached {
            header: format!("{token_type} {token}"),
            refresh_at: started + lifetime,
        })
    }
}

/// The streamable-HTTP client of one server: reqwest, plus the OAuth header when configured.
#[derive(Clone)]
pub(crate) struct AuthedClient {
    pub(crate) http: reqwest::Client,
    pub(crate) token: Option<Arc<TokenSource>>,
}

type HttpError = StreamableHttpError<reqwest::Error>;

/// The server refused the credentials.
fn is_unauthorized(e: &HttpError) -> bool {
    match e {
        StreamableHttpError::AuthRequired(_) => true,
        StreamableHttpError::UnexpectedServerResponse(m) => m.starts_with("HTTP 401"),
        StreamableHttpError::Client(e) => e.status() == Some(reqwest::StatusCode::UNAUTHORIZED),
        _ => false,
    }
}

impl AuthedClient {
    /// Runs `call` with the `Authorization` header added (when OAuth is configured); on a
    /// 401, once more with a fresh token.
    async fn with_auth<T, F, Fut>(
        &self,
        headers: HashMap<HeaderName, HeaderValue>,
        call: F,
    ) -> Result<T, HttpError>
    where
        F: Fn(HashMap<HeaderName, HeaderValue>) -> Fut,
        Fut: Future<Output = Result<T, HttpError>>,
    {
        let Some(token) = &self.token else {
            return call(headers).await;
        };
        let with = |auth: &str| -> Result<HashMap<HeaderName, HeaderValue>, HttpError> {
            let mut h = headers.clone();
            let mut v = HeaderValue::from_str(auth).map_err(|_| {
                StreamableHttpError::UnexpectedServerResponse(Cow::Borrowed(
                    "OAuth token is not a valid header value",
                ))
            })?;
            v.set_sensitive(true);
            h.insert(http::header::AUTHORIZATION, v);
            Ok(h)
        };
        let auth = token
            .authorization()
            .await
            .map_err(|e| StreamableHttpError::UnexpectedServerResponse(Cow::Owned(e)))?;
        match call(with(&auth)?).await {
            Err(e) if is_unauthorized(&e) => {
                token.invalidate(&auth).await;
                let fresh = token
                    .authorization()
                    .await
                    .map_err(|e| StreamableHttpError::UnexpectedServerResponse(Cow::Owned(e)))?;
                if fresh == auth {
                    return Err(e);
                }
                call(with(&fresh)?).await
            }
            other => other,
        }
    }
}

impl StreamableHttpClient for AuthedClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.with_auth(custom_headers, |h| {
            self.http.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth_header.clone(),
                h,
            )
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.with_auth(custom_headers, |h| {
            self.http.post_message_with_max_sse_event_size(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth_header.clone(),
                h,
                max_sse_event_size,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.with_auth(custom_headers, |h| {
            self.http
                .delete_session(uri.clone(), session_id.clone(), auth_header.clone(), h)
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.with_auth(custom_headers, |h| {
            self.http.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                auth_header.clone(),
                h,
            )
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.with_auth(custom_headers, |h| {
            self.http.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                auth_header.clone(),
                h,
                max_sse_event_size,
            )
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(cfg: McpOAuthConfig) -> Result<TokenSource, String> {
        TokenSource::new("s", cfg, fawn_net::client(), Redactor::default())
    }

    #[test]
    fn grants_need_their_fields() {
        let base = McpOAuthConfig {
            token_url: "http://127.0.0.1:1/token".into(),
            ..Default::default()
        };
        let err = source(base.clone()).err().unwrap_or_default();
        assert!(err.contains("client_id and client_secret"), "{err}");
        let err = source(McpOAuthConfig {
            grant_type: "refresh_token".into(),
            ..base.clone()
        })
        .err()
        .unwrap_or_default();
        assert!(err.contains("needs refresh_token"), "{err}");
        let err = source(McpOAuthConfig {
            grant_type: "password".into(),
            ..base.clone()
        })
        .err()
        .unwrap_or_default();
        assert!(
            err.contains("unsupported oauth grant_type \"password\""),
            "{err}"
        );
        let err = source(McpOAuthConfig {
            token_url: "ftp://x/token".into(),
            ..base
        })
        .err()
        .unwrap_or_default();
        assert!(err.contains("http(s) URL"), "{err}");
    }

    #[test]
    fn refresh_grant_form_carries_the_refresh_token() {
        let s = source(McpOAuthConfig {
            token_url: "http://127.0.0.1:1/token".into(),
            grant_type: "refresh_token".into(),
            refresh_token: Some("rt-1".into()),
            client_id: Some("cid".into()),
            scope: Some("read".into()),
            extra_token_params: [("resource".to_string(), "r".to_string())].into(),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let form = s.form();
        let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("grant_type"), Some("refresh_token"));
        assert_eq!(get("refresh_token"), Some("rt-1"));
        assert_eq!(get("client_id"), Some("cid"));
        assert_eq!(get("client_secret"), None);
        assert_eq!(get("scope"), Some("read"));
        assert_eq!(get("resource"), Some("r"));
    }
}
