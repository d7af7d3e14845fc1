//! The one error envelope: `{"detail": "…"}` with a 4xx status for anything the client can
//! fix, a 5xx only for real internal failures (logged). SDK clients retry 5xx and 429, which
//! would duplicate runs, so nothing deterministic may end up there.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fawn_checkpoint::StoreError;

/// An HTTP error answered as `{"detail": …}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: String,
    /// A machine-readable code: the detail becomes `{"code", "message"}` (DeerFlow's auth
    /// errors, which its web UI tells apart by code).
    pub code: Option<&'static str>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> ApiError {
        ApiError {
            status,
            detail: detail.into(),
            code: None,
        }
    }

    /// An error answered as `{"detail": {"code": code, "message": detail}}`.
    pub fn coded(status: StatusCode, code: &'static str, detail: impl Into<String>) -> ApiError {
        ApiError {
            status,
            detail: detail.into(),
            code: Some(code),
        }
    }

    pub fn bad_request(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, detail)
    }

    pub fn not_found(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, detail)
    }

    pub fn conflict(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, detail)
    }

    pub fn unprocessable(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
    }

    /// An internal failure: logged with its cause, answered with a generic 500.
    pub fn internal(context: &str, cause: impl std::fmt::Display) -> ApiError {
        tracing::error!(%cause, "{context}");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("Internal error: {context}"),
        )
    }

    /// Converts a storage error, naming what was being done for internal failures.
    pub fn store(context: &str, e: StoreError) -> ApiError {
        match e {
            StoreError::NotFound(m) => ApiError::not_found(m),
            StoreError::Conflict(m) => ApiError::conflict(m),
            StoreError::Invalid(m) => ApiError::unprocessable(m),
            StoreError::Corrupt(_) | StoreError::Database(_) => ApiError::internal(context, e),
        }
    }
}

/// How a malformed field of a request body is answered (the runtime names the field and
/// the problem; the wording is the server's).
pub fn invalid_field_detail(path: &str, reason: &str) -> String {
    format!("Invalid request body at `{path}`: {reason}")
}

/// How a required field missing from a request body is answered.
pub fn missing_field_detail(path: &str) -> String {
    format!("Invalid request body: `{path}` is required")
}

/// The one place runtime errors become statuses: 404, 409, 422 and 400 for what the client
/// can fix, a logged 500 for a storage failure.
impl From<fawn_runtime::RuntimeError> for ApiError {
    fn from(e: fawn_runtime::RuntimeError) -> Self {
        use fawn_runtime::RuntimeError as E;
        match e {
            E::NotFound(m) => ApiError::not_found(m),
            E::Conflict(m) => ApiError::conflict(m),
            E::Invalid(m) => ApiError::unprocessable(m),
            E::InvalidField { path, reason } => {
                ApiError::unprocessable(invalid_field_detail(&path, &reason))
            }
            E::MissingField { path } => ApiError::unprocessable(missing_field_detail(&path)),
            E::Rejected(m) => ApiError::bad_request(m),
            E::Store { context, source } => ApiError::store(context, source),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::store("storage operation failed", e)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status, self.detail)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match self.code {
            Some(code) => serde_json::json!({ "detail": {"code": code, "message": self.detail} }),
            None => serde_json::json!({ "detail": self.detail }),
        };
        crate::wire::json_response(self.status, &body)
    }
}

/// `{"detail":"Not Found"}` for unknown routes.
pub async fn not_found_fallback() -> ApiError {
    ApiError::not_found("Not Found")
}

/// `{"detail":"Method Not Allowed"}` for known routes with the wrong method.
pub async fn method_not_allowed_fallback() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}
