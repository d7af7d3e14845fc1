//! Request extraction with the leniency the SDKs need and the error envelope they expect:
//! bodies parsed as JSON whatever the `Content-Type` says, oversized bodies → 413, malformed
//! JSON → 400, wrong shapes → 422 naming the field; query strings that accept both the
//! Python (repeated keys) and JS (JSON arrays, `"1"`/`"0"`) encodings; path parameters
//! whose rejections are the envelope too; UUID path params.

use crate::error::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, OriginalUri, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Request body limit default (bytes).
pub const DEFAULT_BODY_LIMIT: usize = 10 * 1024 * 1024;

/// Body limit in force, put into request extensions by the app.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit(pub usize);

/// A JSON body, whatever the content type; an empty body reads as `{}`.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

/// How much of an oversized body is read and discarded before answering 413, so that a
/// client still sending it can read the answer (beyond this the connection is dropped).
const DRAIN_CAP: usize = 32 * 1024 * 1024;

/// Reads the raw body under the configured limit.
pub async fn read_body(req: Request) -> Result<Bytes, ApiError> {
    use futures::StreamExt;
    let limit = req
        .extensions()
        .get::<BodyLimit>()
        .map(|l| l.0)
        .unwrap_or(DEFAULT_BODY_LIMIT);
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut too_big = declared.is_some_and(|n| n > limit as u64);
    let capacity = declared.map(|n| n.min(limit as u64) as usize).unwrap_or(0);
    let mut buf: Vec<u8> = Vec::with_capacity(capacity);
    let mut total = 0usize;
    let mut stream = req.into_body().into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) if too_big => {
                tracing::debug!(error = %e, "oversized body ended early");
                break;
            }
            Err(e) => return Err(ApiError::bad_request(format!("Could not read body: {e}"))),
        };
        total = total.saturating_add(chunk.len());
        if total > limit {
            too_big = true;
        }
        if too_big {
            if total > DRAIN_CAP.max(limit) {
                break;
            }
            continue;
        }
        buf.extend_from_slice(&chunk);
    }
    if too_big {
        return Err(too_large(limit));
    }
    Ok(Bytes::from(buf))
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::PAYLOAD_TOO_LARGE,
        format!("Request body too large (limit {limit} bytes)"),
    )
}

/// Parses JSON bytes into `T` with a 400 for syntax errors and a 422 naming the field for
/// shape errors.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let trimmed = bytes.iter().all(|b| b.is_ascii_whitespace());
    let bytes: &[u8] = if trimmed { b"{}" } else { bytes };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = match serde_path_to_error::deserialize(&mut de) {
        Ok(v) => v,
        Err(e) => return Err(shape_error(e)),
    };
    if let Err(e) = de.end() {
        return Err(ApiError::bad_request(format!("Invalid JSON body: {e}")));
    }
    Ok(value)
}

fn shape_error(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    use serde_json::error::Category;
    match inner.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::bad_request(format!("Invalid JSON body: {inner}"))
        }
        Category::Data => {
            if path.is_empty() || path == "." {
                ApiError::unprocessable(format!("Invalid request body: {inner}"))
            } else {
                ApiError::unprocessable(format!("Invalid request body at `{path}`: {inner}"))
            }
        }
    }
}

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// A body that may be absent: `None` when empty, else parsed like [`JsonBody`].
#[derive(Debug, Clone)]
pub struct OptionalJsonBody<T>(pub Option<T>);

impl<S, T> FromRequest<S> for OptionalJsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req).await?;
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(OptionalJsonBody(None));
        }
        parse_json(&bytes).map(|v| OptionalJsonBody(Some(v)))
    }
}

/// The raw query string, decoded into `(key, value)` pairs in order.
#[derive(Debug, Clone, Default)]
pub struct Query(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for Query {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Query::parse(parts.uri.query().unwrap_or("")))
    }
}

impl Query {
    pub fn parse(raw: &str) -> Query {
        Query(
            form_urlencoded::parse(raw.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The last value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean: `true/True/1/yes/on` or `false/False/0/no/off`; anything else → 422.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => parse_bool(v).map(Some).ok_or_else(|| {
                ApiError::unprocessable(format!(
                    "Invalid value for query parameter `{key}`: '{v}' is not a boolean"
                ))
            }),
        }
    }

    /// An unsigned integer; anything else → 422.
    pub fn u64(&self, key: &str) -> Result<Option<u64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.trim().parse::<u64>().map(Some).map_err(|_| {
                ApiError::unprocessable(format!(
                    "Invalid value for query parameter `{key}`: '{v}' is not a non-negative integer"
                ))
            }),
        }
    }

    /// A list under any of `keys`: repeated keys (union, in order), JSON array text,
    /// comma-separated text, or a single bare value. Duplicates are dropped.
    pub fn list(&self, keys: &[&str]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (k, v) in &self.0 {
            if !keys.contains(&k.as_str()) {
                continue;
            }
            for item in split_list_value(v) {
                if !out.contains(&item) {
                    out.push(item);
                }
            }
        }
        out
    }
}

/// One query value as list items: a JSON array, a comma list or a bare value.
pub fn split_list_value(v: &str) -> Vec<String> {
    let t = v.trim();
    if t.starts_with('[')
        && let Ok(Value::Array(items)) = serde_json::from_str::<Value>(t)
    {
        return items
            .into_iter()
            .filter_map(|i| match i {
                Value::String(s) => Some(s),
                Value::Null => None,
                other => Some(other.to_string()),
            })
            .filter(|s| !s.is_empty())
            .collect();
    }
    if let Ok(Value::String(s)) = serde_json::from_str::<Value>(t) {
        return vec![s];
    }
    t.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

pub fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "t" | "y" => Some(true),
        "false" | "0" | "no" | "off" | "f" | "n" | "" => Some(false),
        _ => None,
    }
}

/// Path parameters, like axum's `Path`, but with its rejections in the error envelope: a
/// parameter that is not UTF-8 once percent-decoded (`/threads/%FF`), or that does not
/// parse, is a 422 `{"detail": …}` like any other invalid id. (A route whose parameters do
/// not fit the handler is a bug of ours: a logged 500.) Handlers use this one, never
/// axum's (clippy's `disallowed-types` says so).
#[derive(Debug, Clone)]
pub struct Path<T>(pub T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        #[allow(clippy::disallowed_types)]
        let extracted = axum::extract::Path::<T>::from_request_parts(parts, state).await;
        match extracted {
            Ok(p) => Ok(Path(p.0)),
            Err(rejection) => Err(path_rejection(rejection)),
        }
    }
}

fn path_rejection(rejection: axum::extract::rejection::PathRejection) -> ApiError {
    use axum::extract::path::ErrorKind;
    use axum::extract::rejection::PathRejection;
    match rejection {
        PathRejection::FailedToDeserializePathParams(e) if !e.status().is_server_error() => {
            match e.into_kind() {
                ErrorKind::InvalidUtf8InPathParam { key } => ApiError::unprocessable(format!(
                    "Invalid path parameter `{key}`: not valid UTF-8"
                )),
                other => ApiError::unprocessable(format!("Invalid path parameter: {other}")),
            }
        }
        other => ApiError::internal("extracting path parameters", other.body_text()),
    }
}

tokio::task_local! {
    /// Set while a request that came in under `/api` or `/api/langgraph` is handled.
    static DEERFLOW_IDS: ();
}

/// Middleware of the `/api` and `/api/langgraph` mounts: there, thread ids may also be
/// DeerFlow's plain ids (`^[A-Za-z0-9_-]{1,64}$`), as its gateway accepts; at `/` the
/// LangGraph contract (UUIDs only) holds.
pub async fn deerflow_ids(req: Request, next: axum::middleware::Next) -> axum::response::Response {
    DEERFLOW_IDS.scope((), next.run(req)).await
}

/// Whether the request being handled came in under `/api` or `/api/langgraph`.
pub fn deerflow_mount() -> bool {
    DEERFLOW_IDS.try_with(|_| ()).is_ok()
}

/// Checks that an id is a UUID (`Invalid thread ID: must be a UUID` → 422) and returns it in
/// canonical lowercase hyphenated form. Under `/api` (see [`deerflow_ids`]) a thread id may
/// also be a DeerFlow plain id, kept as it is.
pub fn uuid_param(kind: &str, raw: &str) -> Result<String, ApiError> {
    if let Ok(u) = uuid::Uuid::parse_str(raw.trim()) {
        return Ok(u.hyphenated().to_string());
    }
    if kind == "thread" && deerflow_mount() {
        return deerflow_thread_id(raw);
    }
    Err(ApiError::unprocessable(format!(
        "Invalid {kind} ID: must be a UUID"
    )))
}

/// A thread id as DeerFlow accepts it: a UUID (canonicalised, as the LangGraph routes store
/// it) or `^[A-Za-z0-9_-]{1,64}$`; anything else is a 422.
pub fn deerflow_thread_id(raw: &str) -> Result<String, ApiError> {
    if let Ok(u) = uuid::Uuid::parse_str(raw.trim()) {
        return Ok(u.hyphenated().to_string());
    }
    if fawn_sandbox::valid_thread_id(raw) {
        return Ok(raw.to_string());
    }
    Err(ApiError::unprocessable(
        "Invalid thread ID: must be a UUID or match ^[A-Za-z0-9_-]{1,64}$",
    ))
}

/// The mount prefix the request came in on (`""`, `/api` or `/api/langgraph`), so that
/// `Location` headers point back through the same prefix.
#[derive(Debug, Clone, Default)]
pub struct Prefix(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Prefix {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let inner = parts.uri.path().to_string();
        let original = match parts.extensions.get::<OriginalUri>() {
            Some(o) => o.0.path().to_string(),
            None => inner.clone(),
        };
        let prefix = if original.len() > inner.len() && original.ends_with(&inner) {
            original[..original.len() - inner.len()].to_string()
        } else {
            String::new()
        };
        Ok(Prefix(prefix))
    }
}

/// A header value as text.
pub fn header_str<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether a request header is copied into a run's `configurable` (`x-*` except secrets,
/// and `user-agent`), as the official server does. Names are lower-case.
pub fn header_goes_to_config(name: &str) -> bool {
    (name.starts_with("x-") && !matches!(name, "x-api-key" | "x-tenant-id" | "x-service-key"))
        || name == "user-agent"
}

/// The request headers a run copies into its `configurable` ([`header_goes_to_config`]).
pub fn config_headers(headers: &axum::http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| header_goes_to_config(name.as_str()))
        .filter_map(|(name, value)| {
            value
                .to_str()
                .ok()
                .map(|v| (name.as_str().to_string(), v.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_encodings() {
        let q = Query::parse(
            "stream_mode=values&stream_mode=updates&select=%5B%22a%22%2C%22b%22%5D&m=x,y",
        );
        assert_eq!(q.list(&["stream_mode"]), vec!["values", "updates"]);
        assert_eq!(q.list(&["select"]), vec!["a", "b"]);
        assert_eq!(q.list(&["m"]), vec!["x", "y"]);
        assert!(q.list(&["nope"]).is_empty());
    }

    #[test]
    fn bools() {
        let q = Query::parse("a=1&b=False&c=maybe");
        assert_eq!(q.bool("a").unwrap(), Some(true));
        assert_eq!(q.bool("b").unwrap(), Some(false));
        let e = q.bool("c").unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.detail.as_str()),
            (
                422,
                "Invalid value for query parameter `c`: 'maybe' is not a boolean"
            )
        );
        assert_eq!(q.bool("d").unwrap(), None);
    }

    #[test]
    fn json_errors() {
        #[derive(serde::Deserialize, Debug)]
        struct T {
            #[allow(dead_code)]
            limit: u64,
        }
        let e = parse_json::<T>(b"{not json").unwrap_err();
        assert_eq!(e.status, 400);
        let e = parse_json::<T>(br#"{"limit":"x"}"#).unwrap_err();
        assert_eq!(e.status, 422);
        assert!(e.detail.contains("limit"), "{}", e.detail);
        assert!(parse_json::<T>(br#"{"limit":3}"#).is_ok());
    }

    #[test]
    fn uuid_check() {
        let e = uuid_param("thread", "nope").unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.detail.as_str()),
            (422, "Invalid thread ID: must be a UUID")
        );
        assert_eq!(
            uuid_param("thread", "6BA7B821-9DAD-11D1-80B4-00C04FD430C8").unwrap(),
            "6ba7b821-9dad-11d1-80b4-00c04fd430c8"
        );
    }
}
