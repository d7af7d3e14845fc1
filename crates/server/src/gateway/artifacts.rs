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
//! * Files are read whole, up to [`MAX_ARTIFACT_BYTES`] (413 beyond).
//! * `…/x.skill/inner/path` reads one member of the `.skill` archive `x.skill` (a ZIP file;
//!   a *directory* named `x.skill` is an ordinary path), named relative to the archive's
//!   root or to its single top-level directory (`x.skill/SKILL.md` finds
//!   `my-skill/SKILL.md`), with the archive rules of [`fawn_tools::skills::archive`]: a
//!   member name with `..` → 403, otherwise unsafe (absolute, `:`) → 400; symlinks and
//!   special files are never served; the archive missing → 404, not a ZIP or no such
//!   member → 404; a member over 16 MiB → 413; an archive over 128 MiB → 413. Members are
//!   served like files (type, disposition, `Range`) with `Cache-Control: private,
//!   max-age=300`. Only `GET`: edits refuse archives and their members (415).
//!
//! `PUT /api/threads/{id}/artifacts/{path}` `{content, expected_sha256}` replaces an existing
//! UTF-8 text file under `mnt/user-data/outputs/` (DeerFlow's editor in the artifacts panel):
//!
//! * another prefix → 400; a `..` segment → 403; a `.skill` archive or a member of one, a
//!   symlink (the file or a directory on its way), a file holding a NUL byte or that is not
//!   UTF-8, or new content with a NUL byte → 415; missing → 404; a directory → 400;
//!   `expected_sha256` not 64 lowercase hex digits → 422;
//! * the file or the new content over [`MAX_EDITABLE_BYTES`] (2 MiB) → 413, and so is a
//!   write past the thread's workspace quota;
//! * the file's SHA-256 differs from `expected_sha256` (it changed since the editor opened
//!   it) → 412; the thread is busy (a run pending or in flight) → 409;
//! * the new content is written through the sandbox under a staging name in the same
//!   directory (so it is confined, counted against the quota and owned like the agent's
//!   files), then given the old file's permissions and renamed over it by
//!   [`fawn_sandbox::host_fs::replace_file`]: readers see the old file or the new one.
//!   Answer: `{path, sha256, size}` with the virtual path.
//!
//! The busy check is not a lock: a run created between the check and the rename may see
//! either version of the file.

use super::thread_param;
use super::uploads::thread_sandbox;
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, Path, Query};
use crate::routes::threads::load_thread;
use crate::wire::ok;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use fawn_checkpoint::ThreadStatus;
use fawn_sandbox::host_fs::{self, FsError, Kind, Replace};
use fawn_sandbox::{SandboxError, SandboxProvider};
use fawn_tools::skills::archive::{self, MAX_ARCHIVE_BYTES, MemberError};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

/// Largest artifact served.
pub const MAX_ARTIFACT_BYTES: u64 = 256 * 1024 * 1024;

/// Largest artifact edited (before and after), DeerFlow's limit.
pub const MAX_EDITABLE_BYTES: u64 = 2 * 1024 * 1024;
/// What an editable artifact's path starts with.
const EDITABLE_PREFIX: &str = "mnt/user-data/outputs/";
/// Staging names of edits (a hidden sibling of the file).
const EDIT_STAGING_PREFIX: &str = ".artifact-edit-";

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

/// `x.skill/inner/path` → (`x.skill`, `inner/path`): the first `.skill` path segment.
pub fn split_skill_member(rel: &str) -> Option<(&str, &str)> {
    let at = rel.find(".skill/")?;
    let end = at + ".skill".len();
    Some((&rel[..end], &rel[end + 1..]))
}

fn member_error(e: MemberError) -> ApiError {
    match e {
        MemberError::BadName(_) => ApiError::bad_request(e.to_string()),
        MemberError::BadArchive(_) | MemberError::NotFound(_) => ApiError::not_found(e.to_string()),
        MemberError::TooLarge => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
    }
}

/// A member of the `.skill` archive `archive` (relative virtual path), or `None` when
/// `archive` is a directory (then the path is an ordinary one).
async fn skill_member(
    sandbox: &dyn fawn_sandbox::Sandbox,
    archive: &str,
    member: &str,
) -> ApiResult<Option<Vec<u8>>> {
    let bytes = match sandbox
        .read_bytes(&format!("/{archive}"), MAX_ARCHIVE_BYTES)
        .await
    {
        Ok(b) => b,
        Err(SandboxError::IsADirectory(_)) => return Ok(None),
        Err(SandboxError::TooLarge(_)) => {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "Skill archive is too large to read (limit {} MiB)",
                    MAX_ARCHIVE_BYTES / (1024 * 1024)
                ),
            ));
        }
        Err(SandboxError::NotFound(_) | SandboxError::NotADirectory(_)) => {
            return Err(ApiError::not_found(format!(
                "Skill file not found: {archive}"
            )));
        }
        Err(e) => return Err(sandbox_error(archive, e)),
    };
    let member = member.to_string();
    tokio::task::spawn_blocking(move || {
        archive::read_member(&bytes, &member, archive::MAX_MEMBER_PREVIEW_BYTES)
    })
    .await
    .map_err(|e| ApiError::internal("reading a skill archive", e))?
    .map(Some)
    .map_err(member_error)
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
    if !host_fs::is_dir(&user_data) {
        return Err(ApiError::not_found(format!("Artifact not found: {rel}")));
    }
    let sandbox = thread_sandbox(&app, &thread_id).await?;
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    if let Some((archive, member)) = split_skill_member(rel)
        && let Some(bytes) = skill_member(sandbox.as_ref(), archive, member).await?
    {
        let name = member.rsplit('/').next().unwrap_or(member);
        return file_response(bytes, name, download, range, SKILL_MEMBER_CACHE);
    }
    let virtual_path = format!("/{rel}");
    let bytes = sandbox
        .read_bytes(&virtual_path, MAX_ARTIFACT_BYTES)
        .await
        .map_err(|e| sandbox_error(rel, e))?;
    let name = rel.rsplit('/').next().unwrap_or(rel);
    file_response(bytes, name, download, range, "no-cache")
}

/// `Cache-Control` of archive members (DeerFlow's: they are extracted on every read).
const SKILL_MEMBER_CACHE: &str = "private, max-age=300";

/// The answer for a file's bytes: type, disposition and one `Range`.
fn file_response(
    bytes: Vec<u8>,
    name: &str,
    download: bool,
    range: Option<&str>,
    cache_control: &'static str,
) -> ApiResult<Response> {
    let head = &bytes[..bytes.len().min(8192)];
    let (mime, active) = content_type(name, head);
    let kind = if active || download {
        "attachment"
    } else {
        "inline"
    };
    let size = bytes.len() as u64;
    let range = parse_range(range, size);
    let mut builder = Response::builder()
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::CACHE_CONTROL, cache_control);
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

fn unsupported(detail: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, detail)
}

fn too_large_to_edit() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "Artifact is too large to edit",
    )
}

/// `PUT /api/threads/{id}/artifacts/{path}` body.
#[derive(Debug, Deserialize)]
pub struct EditBody {
    content: String,
    expected_sha256: String,
}

/// The segments below `outputs/` of an editable artifact path, or the error to answer.
pub fn editable_segments(path: &str) -> ApiResult<Vec<&str>> {
    let rel = path.trim_start_matches('/');
    let Some(sub) = rel.strip_prefix(EDITABLE_PREFIX) else {
        return Err(ApiError::bad_request(
            "Only files in /mnt/user-data/outputs can be edited",
        ));
    };
    if rel.split(['/', '\\']).any(|seg| seg == "..") {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Access denied: path traversal detected",
        ));
    }
    if rel.contains(".skill/") || rel.ends_with(".skill") {
        return Err(unsupported(
            "Skill archives cannot be edited in the artifacts panel",
        ));
    }
    let segments: Vec<&str> = sub
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if segments.is_empty() {
        return Err(ApiError::bad_request(format!("Path is not a file: {rel}")));
    }
    Ok(segments)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `PUT /api/threads/{id}/artifacts/{path}`: replaces a text file of the thread's outputs.
pub async fn put(
    State(app): State<AppState>,
    Path((thread_id, path)): Path<(String, String)>,
    JsonBody(body): JsonBody<EditBody>,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    let segments = editable_segments(&path)?;
    let expected = &body.expected_sha256;
    if expected.len() != 64
        || !expected
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(ApiError::unprocessable(
            "Invalid request body at `expected_sha256`: must match ^[0-9a-f]{64}$",
        ));
    }
    let virtual_path = format!("/{EDITABLE_PREFIX}{}", segments.join("/"));
    let shown = &virtual_path[1..];
    let not_found = || ApiError::not_found(format!("Artifact not found: {shown}"));
    let thread = load_thread(&app, &thread_id).await?;
    if thread.status == ThreadStatus::Busy {
        return Err(ApiError::conflict(
            "Thread has a run in flight. Save after the run finishes.",
        ));
    }
    // A thread without files has no artifacts (and is not given a directory by asking).
    let outputs = app.services.sandbox.thread_paths(&thread_id).outputs;
    if !host_fs::is_dir(&outputs) {
        return Err(not_found());
    }
    let sandbox = thread_sandbox(&app, &thread_id).await?;
    let _guard = sandbox.lock_path(&virtual_path).await;
    // The rename below works on host files: nothing on the way may be a symlink.
    let rel: std::path::PathBuf = segments.iter().collect();
    let meta = {
        let (outputs, rel) = (outputs.clone(), rel.clone());
        host_fs::blocking(move || host_fs::metadata(&outputs, &rel)).await
    };
    match meta {
        Ok(m) if m.kind == Kind::Symlink => {
            return Err(unsupported("Symlinked artifacts cannot be edited"));
        }
        Ok(m) if m.kind != Kind::File => {
            return Err(ApiError::bad_request(format!(
                "Path is not a file: {shown}"
            )));
        }
        Ok(m) if m.len > MAX_EDITABLE_BYTES => return Err(too_large_to_edit()),
        Ok(_) => {}
        Err(FsError::Symlink) => {
            return Err(unsupported("Symlinked artifacts cannot be edited"));
        }
        Err(FsError::NotFound | FsError::NotDir) => return Err(not_found()),
        Err(e) => return Err(ApiError::internal("reading an artifact", e)),
    }
    let current = match sandbox.read_bytes(&virtual_path, MAX_EDITABLE_BYTES).await {
        Ok(b) => b,
        Err(SandboxError::TooLarge(_)) => return Err(too_large_to_edit()),
        Err(e) => return Err(sandbox_error(shown, e)),
    };
    if current.contains(&0) {
        return Err(unsupported("Binary artifacts cannot be edited"));
    }
    if std::str::from_utf8(&current).is_err() {
        return Err(unsupported("Only UTF-8 text artifacts can be edited"));
    }
    if sha256_hex(&current) != *expected {
        return Err(ApiError::new(
            StatusCode::PRECONDITION_FAILED,
            "Artifact changed since it was opened",
        ));
    }
    let updated = body.content.into_bytes();
    if updated.len() as u64 > MAX_EDITABLE_BYTES {
        return Err(too_large_to_edit());
    }
    if updated.contains(&0) {
        return Err(unsupported("Binary content cannot be saved as an artifact"));
    }
    let staging = format!("{EDIT_STAGING_PREFIX}{}.tmp", uuid::Uuid::new_v4().simple());
    let parent_virtual = virtual_path
        .rsplit_once('/')
        .map(|(p, _)| p)
        .unwrap_or(fawn_sandbox::VIRTUAL_OUTPUTS);
    let staged = rel.with_file_name(&staging);
    if let Err(e) = sandbox
        .write_bytes(&format!("{parent_virtual}/{staging}"), &updated)
        .await
    {
        // A write that failed half-way leaves no staged part behind.
        let (outputs, staged) = (outputs.clone(), staged.clone());
        let _ = host_fs::blocking(move || host_fs::remove_file(&outputs, &staged)).await;
        return Err(match e {
            SandboxError::TooLarge(m) => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, m),
            other => sandbox_error(shown, other),
        });
    }
    // Renamed over the file with its permissions (checked again right before the rename:
    // still a regular file, not a symlink); on failure the staged file is removed.
    let how = Replace {
        must_exist: true,
        keep_mode: true,
    };
    let replaced =
        host_fs::blocking(move || host_fs::replace_file(&outputs, &staged, &rel, how)).await;
    match replaced {
        Ok(()) => {}
        Err(FsError::NotFound) => return Err(not_found()),
        Err(e) => return Err(ApiError::internal("replacing an artifact", e)),
    }
    Ok(ok(&json!({
        "path": virtual_path,
        "sha256": sha256_hex(&updated),
        "size": updated.len(),
    })))
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

    #[test]
    fn editable_paths() {
        fn status(p: &str) -> Result<Vec<&str>, u16> {
            editable_segments(p).map_err(|e| e.status.as_u16())
        }
        assert_eq!(
            status("mnt/user-data/outputs/a/b.md"),
            Ok(vec!["a", "b.md"])
        );
        assert_eq!(status("/mnt/user-data/outputs//./b.md"), Ok(vec!["b.md"]));
        assert_eq!(status("mnt/user-data/uploads/a.md"), Err(400));
        assert_eq!(status("mnt/user-data/outputs"), Err(400));
        assert_eq!(status("mnt/user-data/outputs/"), Err(400));
        assert_eq!(status("outputs/a.txt"), Err(400));
        assert_eq!(status("mnt/user-data/outputs/../workspace/a"), Err(403));
        assert_eq!(status("mnt/user-data/outputs/a\\..\\..\\b"), Err(403));
        assert_eq!(status("mnt/user-data/outputs/x.skill"), Err(415));
        assert_eq!(status("mnt/user-data/outputs/x.skill/SKILL.md"), Err(415));
    }
}
