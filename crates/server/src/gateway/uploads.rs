//! Uploads (reference §9.3, §11.1 items 18–21): files a user attaches to a thread, stored in
//! its `/mnt/user-data/uploads`.
//!
//! `POST /api/threads/{id}/uploads` (multipart, repeatable field `files`):
//!
//! * **Names**: the multipart filename is reduced to its last `/` segment
//!   (`../../etc/passwd` → `passwd`); empty names, `.`, `..`, names with a backslash or a
//!   control character, names over 255 bytes and staging names are dropped: logged, and
//!   reported in `skipped_files` under the name the client sent (`success: false`), as
//!   DeerFlow does.
//!   Several parts with one name in a request become `name.ext`, `name_1.ext`, `name_2.ext`
//!   (`original_filename` tells the renamed ones); a file already on disk is replaced.
//! * **Limits** (`uploads:` in config.yaml): more than `max_files` file parts, one file over
//!   `max_file_size` or all of them over `max_total_size` → 413 and nothing is kept.
//! * **Writes**: each file is written through the thread's sandbox
//!   ([`fawn_sandbox::Sandbox::write_bytes`], so the agent's sandboxed `bash` owns and can
//!   edit it) under a staging name `.upload-<uuid>.part`; only when every part was read and
//!   checked are the staged files renamed onto their names
//!   ([`fawn_sandbox::host_fs::replace_file`]). A destination that is a symlink
//!   or not a regular file is left alone and its upload reported in `skipped_files`
//!   (`success: false`). Any failure removes every staged file. One file is held in memory at
//!   a time (at most `max_file_size`).
//! * Paths in answers are virtual (`path` = `virtual_path` = `/mnt/user-data/uploads/x`):
//!   Fawn does not hand host paths to clients. Document conversion to Markdown
//!   (`auto_convert_documents`) is not implemented.
//!
//! `GET …/uploads/list` lists regular files (staging files hidden), `GET …/uploads/limits`
//! the limits, `DELETE …/uploads/{filename}` removes a file and its sibling `<stem>.md`
//! (400 for anything that is not a plain file name, 404 when missing).

use super::thread_param;
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::Path;
use crate::wire::ok;
use axum::extract::State;
use axum::extract::multipart::{Field, Multipart, MultipartError, MultipartRejection};
use axum::http::StatusCode;
use axum::response::Response;
use fawn_sandbox::host_fs::{self, FsError, Kind, Replace, Visit};
use fawn_sandbox::{Sandbox, SandboxError, SandboxProvider, VIRTUAL_UPLOADS};
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

/// Room for multipart boundaries and part headers on top of `max_total_size`.
pub const MULTIPART_SLACK: usize = 1024 * 1024;
const STAGING_PREFIX: &str = ".upload-";
const STAGING_SUFFIX: &str = ".part";
/// How much of a rejected upload is still read (and discarded) so that the client reads the
/// 413 instead of a reset connection.
const DRAIN_CAP: usize = 32 * 1024 * 1024;
/// Longest file name kept (bytes).
const MAX_NAME_BYTES: usize = 255;

/// The limits in force (`uploads:`; zero values fall back to DeerFlow's defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_files: usize,
    pub max_file_size: u64,
    pub max_total_size: u64,
}

impl Limits {
    pub fn of(app: &AppState) -> Limits {
        let u = &app.settings.app.uploads;
        let d = fawn_config::UploadsConfig::default();
        Limits {
            max_files: if u.max_files == 0 {
                d.max_files
            } else {
                u.max_files
            },
            max_file_size: if u.max_file_size == 0 {
                d.max_file_size
            } else {
                u.max_file_size
            },
            max_total_size: if u.max_total_size == 0 {
                d.max_total_size
            } else {
                u.max_total_size
            },
        }
    }
}

fn is_staging(name: &str) -> bool {
    name.starts_with(STAGING_PREFIX) && name.ends_with(STAGING_SUFFIX)
}

/// The stored name of a multipart filename, or `None` when it must be dropped.
pub fn normalize_filename(raw: &str) -> Option<String> {
    if raw.contains('\\') || raw.chars().any(char::is_control) {
        return None;
    }
    let name = raw.rsplit('/').next().unwrap_or("");
    if name.trim().is_empty()
        || name == "."
        || name == ".."
        || name.len() > MAX_NAME_BYTES
        || is_staging(name)
    {
        return None;
    }
    Some(name.to_string())
}

/// `name.ext` → `name_1.ext`, `name_2.ext`, … until unused.
pub fn dedupe_name(name: &str, used: &HashSet<String>) -> String {
    if !used.contains(name) {
        return name.to_string();
    }
    let (stem, ext) = match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], &name[i..]),
        _ => (name, ""),
    };
    let mut n = 1usize;
    loop {
        let candidate = format!("{stem}_{n}{ext}");
        if !used.contains(&candidate) {
            return candidate;
        }
        n += 1;
    }
}

/// Percent-encodes one path segment.
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `/api/threads/{id}/artifacts/mnt/user-data/uploads/{name}`.
pub fn artifact_url(thread_id: &str, virtual_path: &str) -> String {
    let encoded: Vec<String> = virtual_path
        .trim_start_matches('/')
        .split('/')
        .map(encode_segment)
        .collect();
    format!("/api/threads/{thread_id}/artifacts/{}", encoded.join("/"))
}

fn file_info(thread_id: &str, name: &str, size: u64) -> Map<String, Value> {
    let virtual_path = format!("{VIRTUAL_UPLOADS}/{name}");
    let mut m = Map::new();
    m.insert("filename".into(), json!(name));
    m.insert("size".into(), json!(size));
    m.insert("path".into(), json!(virtual_path));
    m.insert("virtual_path".into(), json!(virtual_path));
    m.insert(
        "artifact_url".into(),
        json!(artifact_url(thread_id, &virtual_path)),
    );
    m
}

fn too_large(detail: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, detail)
}

fn multipart_error(e: &MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large("Total upload size too large")
    } else {
        ApiError::bad_request(format!("Invalid multipart body: {}", e.body_text()))
    }
}

/// A file written under its staging name, waiting to be renamed.
struct Staged {
    staged: String,
    name: String,
    original: String,
    size: u64,
}

/// Removes staged files (best effort).
async fn discard(dir: &std::path::Path, staged: &[Staged]) {
    let dir = dir.to_path_buf();
    let names: Vec<String> = staged.iter().map(|s| s.staged.clone()).collect();
    let _ = host_fs::blocking(move || {
        for name in names {
            match host_fs::remove_file(&dir, std::path::Path::new(&name)) {
                Ok(()) | Err(FsError::NotFound) => {}
                Err(e) => tracing::warn!(file = %name, error = %e, "staged upload not removed"),
            }
        }
        Ok(())
    })
    .await;
}

/// Reads and discards what is left of a rejected request, up to [`DRAIN_CAP`].
async fn drain(current: Option<Field<'_>>, already: usize) -> usize {
    let mut total = already;
    if let Some(mut f) = current {
        while total <= DRAIN_CAP {
            match f.chunk().await {
                Ok(Some(c)) => total += c.len(),
                _ => break,
            }
        }
    }
    total
}

async fn drain_rest(multipart: &mut Multipart, already: usize) {
    let mut total = already;
    while total <= DRAIN_CAP {
        match multipart.next_field().await {
            Ok(Some(f)) => total = drain(Some(f), total).await,
            _ => break,
        }
    }
}

fn sandbox_error(context: &str, e: SandboxError) -> ApiError {
    match e {
        SandboxError::Invalid(m) => ApiError::bad_request(m),
        SandboxError::PermissionDenied(m) => ApiError::new(StatusCode::FORBIDDEN, m),
        other => ApiError::internal(context, other),
    }
}

/// The thread's sandbox (created on first use).
pub async fn thread_sandbox(app: &AppState, thread_id: &str) -> ApiResult<Arc<dyn Sandbox>> {
    let provider = &app.services.sandbox;
    let id = provider
        .acquire(thread_id)
        .await
        .map_err(|e| sandbox_error("opening the thread's files", e))?;
    provider
        .get(&id)
        .ok_or_else(|| ApiError::internal("opening the thread's files", "sandbox vanished"))
}

/// `POST /api/threads/{id}/uploads`.
pub async fn upload(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    let mut multipart = multipart.map_err(|e| {
        ApiError::bad_request(format!(
            "Expected a multipart/form-data body with `files` parts: {}",
            e.body_text()
        ))
    })?;
    let limits = Limits::of(&app);
    let sandbox = thread_sandbox(&app, &thread_id).await?;
    let dir = sandbox.paths().uploads.clone();
    let mut staged: Vec<Staged> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    let mut used: HashSet<String> = HashSet::new();
    let mut parts = 0usize;
    let mut total: u64 = 0;
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                discard(&dir, &staged).await;
                return Err(multipart_error(&e));
            }
        };
        let Some(raw_name) = field.file_name().map(str::to_string) else {
            // A plain form field: not a file.
            continue;
        };
        parts += 1;
        if parts > limits.max_files {
            discard(&dir, &staged).await;
            drain(Some(field), 0).await;
            drain_rest(&mut multipart, 0).await;
            return Err(too_large(format!(
                "Too many files: maximum is {}",
                limits.max_files
            )));
        }
        let Some(original) = normalize_filename(&raw_name) else {
            tracing::warn!(filename = ?raw_name, %thread_id, "upload with an unsafe file name skipped");
            skipped.push(raw_name);
            continue;
        };
        let mut field = field;
        let mut data: Vec<u8> = Vec::new();
        loop {
            match field.chunk().await {
                Ok(Some(c)) => {
                    total += c.len() as u64;
                    let over = if data.len() as u64 + c.len() as u64 > limits.max_file_size {
                        Some(format!("File too large: {original}"))
                    } else if total > limits.max_total_size {
                        Some("Total upload size too large".to_string())
                    } else {
                        None
                    };
                    if let Some(detail) = over {
                        discard(&dir, &staged).await;
                        drop(data);
                        drain(Some(field), 0).await;
                        drain_rest(&mut multipart, 0).await;
                        return Err(too_large(detail));
                    }
                    data.extend_from_slice(&c);
                }
                Ok(None) => break,
                Err(e) => {
                    discard(&dir, &staged).await;
                    return Err(multipart_error(&e));
                }
            }
        }
        let name = dedupe_name(&original, &used);
        used.insert(name.clone());
        let staging = format!(
            "{STAGING_PREFIX}{}{STAGING_SUFFIX}",
            uuid::Uuid::new_v4().simple()
        );
        let size = data.len() as u64;
        // Registered before the write so a half-written file is cleaned up too.
        staged.push(Staged {
            staged: staging.clone(),
            name,
            original,
            size,
        });
        if let Err(e) = sandbox
            .write_bytes(&format!("{VIRTUAL_UPLOADS}/{staging}"), &data)
            .await
        {
            discard(&dir, &staged).await;
            return Err(sandbox_error("storing an upload", e));
        }
    }
    if parts == 0 {
        return Err(ApiError::bad_request("No files provided"));
    }
    publish(&thread_id, &dir, staged, skipped).await
}

/// Renames the staged files onto their names. `skipped`: the names already dropped.
async fn publish(
    thread_id: &str,
    dir: &std::path::Path,
    staged: Vec<Staged>,
    mut skipped: Vec<String>,
) -> ApiResult<Response> {
    if !host_fs::is_dir(dir) {
        discard(dir, &staged).await;
        return Err(ApiError::internal(
            "storing uploads",
            "the uploads directory is not a directory",
        ));
    }
    let mut files: Vec<Value> = Vec::new();
    for (i, s) in staged.iter().enumerate() {
        let (root, from, to) = (dir.to_path_buf(), s.staged.clone(), s.name.clone());
        let renamed = host_fs::blocking(move || {
            host_fs::replace_file(&root, from.as_ref(), to.as_ref(), Replace::default())
        })
        .await;
        match renamed {
            Ok(()) => {}
            // The staged file is gone with the error.
            Err(FsError::Symlink | FsError::NotRegular | FsError::IsDir) => {
                tracing::warn!(file = %s.name, %thread_id, "upload destination is not a regular file; skipped");
                skipped.push(s.name.clone());
                continue;
            }
            Err(e) => {
                discard(dir, &staged[i..]).await;
                return Err(ApiError::internal("storing uploads", e));
            }
        }
        let mut info = file_info(thread_id, &s.name, s.size);
        if s.name != s.original {
            info.insert("original_filename".into(), json!(s.original));
        }
        files.push(Value::Object(info));
    }
    let mut message = format!("Successfully uploaded {} file(s)", files.len());
    if !skipped.is_empty() {
        message.push_str(&format!("; skipped {} unsafe file(s)", skipped.len()));
    }
    Ok(ok(&json!({
        "success": skipped.is_empty(),
        "files": files,
        "message": message,
        "skipped_files": skipped,
    })))
}

fn uploads_dir(app: &AppState, thread_id: &str) -> PathBuf {
    app.services.sandbox.thread_paths(thread_id).uploads
}

/// `GET /api/threads/{id}/uploads/list`.
pub async fn list(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    let dir = uploads_dir(&app, &thread_id);
    let listed = host_fs::blocking(move || {
        let mut files: Vec<(String, host_fs::Meta)> = Vec::new();
        host_fs::walk(&dir, std::path::Path::new(""), |entry| {
            let name = match entry.name.to_str() {
                Some(n) if entry.kind == Kind::File && !is_staging(n) => n.to_string(),
                _ => return Visit::Skip,
            };
            if let Ok(meta) = entry.metadata() {
                files.push((name, meta));
            }
            if files.len() >= 10_000 {
                Visit::Stop
            } else {
                Visit::Skip
            }
        })
        .map(|()| files)
    })
    .await;
    let listed = match listed {
        Ok(files) => files,
        Err(FsError::NotFound) => Vec::new(),
        Err(e) => return Err(ApiError::internal("listing uploads", e)),
    };
    let mut files: Vec<(String, Value)> = Vec::new();
    for (name, meta) in listed {
        let mut info = file_info(&thread_id, &name, meta.len);
        let extension = match name.rfind('.') {
            Some(i) if i > 0 => name[i..].to_ascii_lowercase(),
            _ => String::new(),
        };
        info.insert("extension".into(), json!(extension));
        let modified = meta
            .modified
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64());
        info.insert("modified".into(), json!(modified));
        files.push((name, Value::Object(info)));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let count = files.len();
    let files: Vec<Value> = files.into_iter().map(|(_, v)| v).collect();
    Ok(ok(&json!({"files": files, "count": count})))
}

/// `GET /api/threads/{id}/uploads/limits`.
pub async fn limits(
    State(app): State<AppState>,
    Path(thread_id): Path<String>,
) -> ApiResult<Response> {
    thread_param(&thread_id)?;
    let l = Limits::of(&app);
    Ok(ok(&json!({
        "max_files": l.max_files,
        "max_file_size": l.max_file_size,
        "max_total_size": l.max_total_size,
    })))
}

/// A name `DELETE` accepts: one path segment.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\\')
        && !name.chars().any(char::is_control)
        && name.len() <= MAX_NAME_BYTES
}

/// `DELETE /api/threads/{id}/uploads/{filename}`.
pub async fn delete(
    State(app): State<AppState>,
    Path((thread_id, filename)): Path<(String, String)>,
) -> ApiResult<Response> {
    let thread_id = thread_param(&thread_id)?;
    if !plain_name(&filename) {
        return Err(ApiError::bad_request("Invalid path"));
    }
    let dir = uploads_dir(&app, &thread_id);
    let (root, name) = (dir.clone(), filename.clone());
    let removed = host_fs::blocking(move || host_fs::remove_file(&root, name.as_ref())).await;
    match removed {
        Ok(()) => {}
        Err(FsError::IsDir) => {
            return Err(ApiError::bad_request(format!("Not a file: {filename}")));
        }
        Err(FsError::NotFound) => {
            return Err(ApiError::not_found(format!("File not found: {filename}")));
        }
        Err(e) => return Err(ApiError::internal("deleting an upload", e)),
    }
    // The Markdown conversion of a document sits beside it as `<stem>.md`.
    if !filename.to_ascii_lowercase().ends_with(".md") {
        let stem = match filename.rfind('.') {
            Some(i) if i > 0 => &filename[..i],
            _ => filename.as_str(),
        };
        let md = format!("{stem}.md");
        let shown = md.clone();
        let removed = host_fs::blocking(move || host_fs::remove_file(&dir, md.as_ref())).await;
        match removed {
            Ok(()) | Err(FsError::NotFound | FsError::IsDir) => {}
            Err(e) => tracing::warn!(file = %shown, error = %e, "sibling markdown not removed"),
        }
    }
    Ok(ok(
        &json!({"success": true, "message": format!("Deleted {filename}")}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filenames() {
        assert_eq!(
            normalize_filename("../../etc/passwd").as_deref(),
            Some("passwd")
        );
        assert_eq!(
            normalize_filename("report.pdf").as_deref(),
            Some("report.pdf")
        );
        for bad in [
            ".",
            "..",
            "",
            "a\\b.txt",
            "dir/",
            "x/..",
            "a\nb",
            ".upload-1.part",
        ] {
            assert_eq!(normalize_filename(bad), None, "{bad:?}");
        }
        assert_eq!(normalize_filename(&"é".repeat(128)), None);
        assert!(normalize_filename(&"a".repeat(255)).is_some());
    }

    #[test]
    fn dedupes() {
        let mut used = HashSet::new();
        for want in ["report.pdf", "report_1.pdf", "report_2.pdf"] {
            let n = dedupe_name("report.pdf", &used);
            assert_eq!(n, want);
            used.insert(n);
        }
        used.insert("README".into());
        assert_eq!(dedupe_name("README", &used), "README_1");
        used.insert(".env".into());
        assert_eq!(dedupe_name(".env", &used), ".env_1");
    }

    #[test]
    fn urls() {
        assert_eq!(
            artifact_url("t1", "/mnt/user-data/uploads/a b#.txt"),
            "/api/threads/t1/artifacts/mnt/user-data/uploads/a%20b%23.txt"
        );
    }
}
