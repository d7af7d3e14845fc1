//! Host files of the gateway's own (custom agents, `USER.md`): existence checks, and the
//! atomic replace the agent tools use too ([`replace_files`], from `fawn_tools`).

use std::path::Path;

pub use fawn_tools::builtins::replace_files;

/// `true` when `path` exists (a dangling symlink counts: it is something).
pub async fn exists(path: &Path) -> bool {
    tokio::fs::symlink_metadata(path).await.is_ok()
}

/// `true` when `path` is a regular file (symlinks are not followed).
pub async fn is_file(path: &Path) -> bool {
    tokio::fs::symlink_metadata(path)
        .await
        .is_ok_and(|m| m.file_type().is_file())
}
