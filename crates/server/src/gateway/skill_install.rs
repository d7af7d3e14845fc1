//! `POST /api/skills/install` `{thread_id, path}` (admin only, reference §7, §9.4): installs
//! the `.skill` archive at a thread virtual path (usually `/mnt/user-data/outputs/x.skill`,
//! written by the skill-creator skill) as the custom skill `{skills_dir}/custom/{name}` (see
//! [`super::skills`] for why custom skills are shared), and answers `{success: true,
//! skill_name, message}`.
//!
//! * The thread must be the caller's: another user's answers 404 like a missing one. The
//!   path is resolved like an artifact's, through the thread's sandbox (confined by
//!   resolution, symlinks included): it must start with `/mnt/user-data` (400), a `..`
//!   segment → 403, a missing file → 404, a directory → 400, a name not ending in `.skill`
//!   → 400, a file over [`MAX_ARCHIVE_BYTES`] → 400.
//! * The archive is extracted under the rules of [`fawn_tools::skills::archive`] (zip-slip,
//!   symlinks, special files, entry count, size, native executables, front matter) into a
//!   hidden staging directory next to the destination and renamed into place; any broken
//!   rule → 400 naming it, and nothing is left behind.
//! * A name that any skill has already (custom or public) → 409.
//! * The catalog is reloaded before answering: the skill is listed by `GET /api/skills` and
//!   offered to the next run.
//!
//! DeerFlow also runs its static and LLM security scanners over the files; Fawn does not
//! (what the archive may hold is limited by the rules above, and installing is an admin's
//! decision).

use super::skills::{CUSTOM_SKILLS_LOCK, custom_root};
use super::thread_param;
use super::uploads::thread_sandbox;
use crate::app::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::wire::ok;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use fawn_sandbox::{SandboxError, SandboxProvider};
use fawn_tools::skills::archive::{self, ArchiveError, Limits, MAX_ARCHIVE_BYTES};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeSet;

#[derive(Debug, Deserialize)]
pub struct InstallBody {
    thread_id: String,
    path: String,
}

/// The virtual path of the archive (`/mnt/user-data/…`), or the error to answer.
fn archive_path(path: &str) -> ApiResult<String> {
    if path.split(['/', '\\']).any(|seg| seg == "..") {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Access denied: path traversal detected",
        ));
    }
    let rel = path.trim().trim_start_matches('/');
    if !(rel == "mnt/user-data" || rel.starts_with("mnt/user-data/")) {
        return Err(ApiError::bad_request(
            "Invalid path: it must start with /mnt/user-data",
        ));
    }
    Ok(format!("/{rel}"))
}

/// `POST /api/skills/install`.
pub async fn install(
    State(app): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody<InstallBody>,
) -> ApiResult<Response> {
    let thread_id = thread_param(&body.thread_id)?;
    crate::authz::owns_thread(&app, &principal, &thread_id).await?;
    let virtual_path = archive_path(&body.path)?;
    let not_found = || ApiError::not_found(format!("Skill file not found: {}", body.path));
    // A thread without files has none to install (and is not given a directory by asking).
    let user_data = app.services.sandbox.thread_paths(&thread_id).user_data;
    if !fawn_sandbox::host_fs::is_dir(&user_data) {
        return Err(not_found());
    }
    let sandbox = thread_sandbox(&app, &thread_id).await?;
    let bytes = match sandbox.read_bytes(&virtual_path, MAX_ARCHIVE_BYTES).await {
        Ok(b) => b,
        Err(SandboxError::NotFound(_) | SandboxError::NotADirectory(_)) => {
            return Err(not_found());
        }
        Err(SandboxError::IsADirectory(_)) => {
            return Err(ApiError::bad_request(format!(
                "Path is not a file: {}",
                body.path
            )));
        }
        Err(SandboxError::TooLarge(_)) => {
            return Err(ApiError::bad_request(format!(
                "Skill archive is too large (limit {} MiB)",
                MAX_ARCHIVE_BYTES / (1024 * 1024)
            )));
        }
        Err(SandboxError::PermissionDenied(_)) => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("Access denied: {}", body.path),
            ));
        }
        Err(SandboxError::Invalid(m)) => return Err(ApiError::bad_request(m)),
        Err(e) => return Err(ApiError::internal("reading a skill archive", e)),
    };
    if !virtual_path.ends_with(".skill") {
        return Err(ApiError::bad_request("File must have .skill extension"));
    }

    let _guard = CUSTOM_SKILLS_LOCK.lock().await;
    let catalog = app.services.skills.catalog().await;
    let taken: BTreeSet<String> = catalog
        .skills()
        .iter()
        .chain(catalog.shadowed())
        .map(|s| s.name.clone())
        .collect();
    let root = custom_root(&app);
    let installed = tokio::task::spawn_blocking(move || {
        archive::install(
            &bytes,
            &root,
            &|n: &str| taken.contains(n),
            Limits::default(),
        )
    })
    .await
    .map_err(|e| ApiError::internal("installing a skill", e))?;
    let name = match installed {
        Ok(n) => n,
        Err(ArchiveError::Invalid(m)) => return Err(ApiError::bad_request(m)),
        Err(e @ ArchiveError::Exists(_)) => return Err(ApiError::conflict(e.to_string())),
        Err(ArchiveError::Io(e)) => return Err(ApiError::internal("installing a skill", e)),
    };
    app.services.skills.reload().await;
    tracing::info!(skill = %name, user = %principal.id, "skill installed");
    Ok(ok(&json!({
        "success": true,
        "skill_name": name,
        "message": format!("Skill '{name}' installed successfully"),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_paths() {
        let status = |p: &str| archive_path(p).map_err(|e| e.status.as_u16());
        assert_eq!(
            status("/mnt/user-data/outputs/x.skill"),
            Ok("/mnt/user-data/outputs/x.skill".into())
        );
        assert_eq!(
            status("mnt/user-data/outputs/x.skill"),
            Ok("/mnt/user-data/outputs/x.skill".into())
        );
        assert_eq!(status("/mnt/user-data/../etc/x.skill"), Err(403));
        assert_eq!(status("/mnt/skills/public/x.skill"), Err(400));
        assert_eq!(status("/etc/passwd"), Err(400));
        assert_eq!(status("/mnt/user-data-other/x.skill"), Err(400));
    }
}
