//! `GET /api/threads/{id}/artifacts/{path}` (reference §9.3, §11.1 item 22): a file of the
//! thread's user data, read through its sandbox ([`fawn_sandbox::Sandbox::read_bytes`], so
//! the path is confined by resolution, symlinks included).
//!
//! * `path` is the virtual path without its leading `/` and must start with
//!   `mnt/user-data` (400 otherwise); a `..` segment anywhere → 403; a missing file → 404;
//!   a directory → 400.
//! * `text/html`, `application/xhtml+xml` and `image/svg+xml` are always sent as
//!   attachments (never rendered in the UI's origin); `?download=true` makes anything an
//!   attachment; everything else is inline with the MIME type guessed from the name (files
//!   with an unknown type are `text/plain` when their first 8 KiB hold no NUL byte,
//!   `application/octet-stream` otherwise).
//! * One `Range: bytes=…` range is honoured (206 with `Content-Range`; 416 with
//!   `Content-Range: bytes */size` when unsatisfiable); several ranges are ignored (200).
//! * Files are read whole, up to [`MAX_ARTIFACT_BYTES`] (413 beyond). Members of `.skill`
//!   archives (`x.skill/SKILL.md`) are not served (404), and `PUT` (editing) is not
//!   implemented.

use super::thread_param;
use super::uploads::thread_sandbox;
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Path, Query};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use fawn_sandbox::{SandboxError, SandboxProvider};

/// Largest artifact served.
pub const MAX_ARTIFACT_BYTES: u64 = 256 * 1024 * 1024;

const ACTIVE_CONTENT: [&str; 3] = ["text/html", "application/xhtml+xml", "image/svg+xml"];

/// What a requested range resolves to.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeAnswer {
    /// Serve everything (no range, or a form we ignore).
    Full,
    /// Inclusive byte range.
    Partial(u64, u64),
    Unsatisfiable,
}

/// Parses one `Range` header against a file of `size` bytes.
pub fn parse_range(header: Option<&str>, size: u64) -> RangeAnswer {
    let Some(h) = header else {
        return RangeAnswer::Full;
    };
    let Some(spec) = h.trim().strip_prefix("bytes=") else {
        return RangeAnswer::Unsatisfiable;
    };
    if spec.contains(',') {
        return RangeAnswer::Full;
    }
    let Some((a, b)) = spec.split_once('-') else {
        return RangeAnswer::Unsatisfiable;
    };
    let (a, b) = (a.trim(), b.trim());
    let (start, end) = if a.is_empty() {
        let Ok(n) = b.parse::<u64>() else {
            return RangeAnswer::Unsatisfiable;
        };
        if n == 0 || size == 0 {
            return RangeAnswer::Unsatisfiable;
        }
        (size.saturating_sub(n), size - 1)
    } else {
        let Ok(start) = a.parse::<u64>() else {
            return RangeAnswer::Unsatisfiable;
        };
        let end = if b.is_empty() {
            size.saturating_sub(1)
        } else {
            match b.parse::<u64>() {
                Ok(e) => e.min(size.saturating_sub(1)),
                Err(_) => return RangeAnswer::Unsatisfiable,
            }
        };
        (start, end)
    };
    if size == 0 || start >= size || end < start {
        return RangeAnswer::Unsatisfiable;
    }
    RangeAnswer::Partial(start, end)
}

/// `inline; filename*=UTF-8''…` / `attachment; …`.
fn disposition(kind: &str, name: &str) -> String {
    format!(
        "{kind}; filename*=UTF-8''{}",
        super::uploads::encode_segment(name)
    )
}

/// The MIME type to send and whether it must be an attachment.
pub fn content_type(path: &str, head: &[u8]) -> (String, bool) {
    let guessed = mime_guess::from_path(path).first_raw();
    let (mime, active) = match guessed {
        Some(m) => (m.to_string(), ACTIVE_CONTENT.contains(&m)),
        None if !head.contains(&0) => ("text/plain".to_string(), false),
        None => ("application/octet-stream".to_string(), false),
    };
    let mime = if mime.starts_with("text/") {
        format!("{mime}; charset=utf-8")
    } else {
        mime
    };
    (mime, active)
}

fn sandbox_error(path: &str, e: SandboxError) -> ApiError {
    match e {
        SandboxError::NotFound(_) | SandboxError::NotADirectory(_) => {
            ApiError::not_found(format!("Artifact not found: {path}"))
        }
        SandboxError::IsADirectory(_) => {
            ApiError::bad_request(format!("Path is not a file: {path}"))
        }
        SandboxError::PermissionDenied(_) | SandboxError::SkillDisabled(_) => {
            ApiError::new(StatusCode::FORBIDDEN, format!("Access denied: {path}"))
        }
        SandboxError::TooLarge(_) => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Artifact is too large to serve (limit {MAX_ARTIFACT_BYTES} bytes)"),
        ),
        SandboxError::Invalid(m) => ApiError::bad_request(m),
        other => ApiError::internal("reading an artifact", other),
    }
}

/// `GET /api/threads/{id}/artifacts/{path}`.
pub async fn get(
    State(app): State<AppState>,
    Path((thread_id, path)): Path<(String, String)>,
    q: Query,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    if path.split(['/', '\\']).any(|seg| seg == "..") {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Access denied: path traversal detected",
        ));
    }
    let rel = path.trim_start_matches('/');
    let under_user_data = rel == "mnt/user-data" || rel.starts_with("mnt/user-data/");
    if !under_user_data {
        return Err(ApiError::bad_request(
            "Invalid artifact path: it must start with mnt/user-data",
        ));
    }
    let download = q.bool("download")?.unwrap_or(false);
    // A thread without files has no artifacts (and is not given a directory by asking).
    let user_data = app.services.sandbox.thread_paths(&thread_id).user_data;
    if !tokio::fs::try_exists(&user_data).await.unwrap_or(false) {
        return Err(ApiError::not_found(format!("Artifact not found: {rel}")));
    }
    let sandbox = thread_sandbox(&app, &thread_id).await?;
    let virtual_path = format!("/{rel}");
    let bytes = sandbox
        .read_bytes(&virtual_path, MAX_ARTIFACT_BYTES)
        .await
        .map_err(|e| sandbox_error(rel, e))?;
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let head = &bytes[..bytes.len().min(8192)];
    let (mime, active) = content_type(name, head);
    let kind = if active || download {
        "attachment"
    } else {
        "inline"
    };
    let size = bytes.len() as u64;
    let range = parse_range(
        headers.get(header::RANGE).and_then(|v| v.to_str().ok()),
        size,
    );
    let mut builder = Response::builder()
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::CACHE_CONTROL, "no-cache");
    if let Ok(v) = HeaderValue::from_str(&disposition(kind, name)) {
        builder = builder.header(header::CONTENT_DISPOSITION, v);
    }
    let response = match range {
        RangeAnswer::Full => builder
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, mime)
            .body(Body::from(bytes)),
        RangeAnswer::Partial(start, end) => {
            let slice = bytes[start as usize..=end as usize].to_vec();
            builder
                .status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_TYPE, mime)
                .header(header::CONTENT_RANGE, format!("bytes {start}-{end}/{size}"))
                .body(Body::from(slice))
        }
        RangeAnswer::Unsatisfiable => builder
            .status(StatusCode::RANGE_NOT_SATISFIABLE)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_RANGE, format!("bytes */{size}"))
            .body(Body::from(
                r#"{"detail":"Requested range is not satisfiable"}"#,
            )),
    };
    response.map_err(|e| ApiError::internal("building an artifact response", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range(None, 10), RangeAnswer::Full);
        assert_eq!(
            parse_range(Some("bytes=0-3"), 10),
            RangeAnswer::Partial(0, 3)
        );
        assert_eq!(
            parse_range(Some("bytes=5-"), 10),
            RangeAnswer::Partial(5, 9)
        );
        assert_eq!(
            parse_range(Some("bytes=-4"), 10),
            RangeAnswer::Partial(6, 9)
        );
        assert_eq!(
            parse_range(Some("bytes=0-1048575"), 10),
            RangeAnswer::Partial(0, 9)
        );
        assert_eq!(parse_range(Some("bytes=0-1,4-5"), 10), RangeAnswer::Full);
        for bad in [
            "bytes=10-",
            "bytes=5-2",
            "items=0-1",
            "bytes=x-1",
            "bytes=-0",
            "bytes=3",
        ] {
            assert_eq!(
                parse_range(Some(bad), 10),
                RangeAnswer::Unsatisfiable,
                "{bad}"
            );
        }
        assert_eq!(
            parse_range(Some("bytes=0-0"), 0),
            RangeAnswer::Unsatisfiable
        );
    }

    #[test]
    fn types() {
        assert_eq!(
            content_type("a.html", b"<p>"),
            ("text/html; charset=utf-8".into(), true)
        );
        assert_eq!(
            content_type("a.svg", b"<svg>"),
            ("image/svg+xml".into(), true)
        );
        assert_eq!(
            content_type("a.txt", b"x"),
            ("text/plain; charset=utf-8".into(), false)
        );
        assert_eq!(
            content_type("a.png", b"\x89PNG"),
            ("image/png".into(), false)
        );
        assert_eq!(
            content_type("LICENSE", b"MIT"),
            ("text/plain; charset=utf-8".into(), false)
        );
        assert_eq!(
            content_type("blob", b"\0\x01"),
            ("application/octet-stream".into(), false)
        );
    }
}
