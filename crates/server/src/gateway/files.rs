//! Replacing small files on the host atomically (custom agents, `USER.md`): each file is
//! written to a temporary sibling, synced, then renamed over its target, so a reader sees
//! the old content or the new one, never a half-written file.

use std::io;
use std::path::{Path, PathBuf};

/// A temporary sibling of `target` (hidden, unique, in the same directory so that the
/// rename stays on one file system).
fn temp_sibling(target: &Path) -> io::Result<PathBuf> {
    let dir = target
        .parent()
        .ok_or_else(|| io::Error::other("target has no parent directory"))?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple())))
}

/// Writes every `(target, bytes)`: all temporaries are written and synced before the first
/// rename, so a failure while writing changes nothing. Temporaries left by a failure are
/// removed. (The renames themselves are one after the other: a crash between two of them
/// leaves the first file new and the second old, as DeerFlow's file store does.)
pub async fn replace_files(files: &[(PathBuf, Vec<u8>)]) -> io::Result<()> {
    let mut staged: Vec<(PathBuf, &Path)> = Vec::with_capacity(files.len());
    let mut result = Ok(());
    for (target, bytes) in files {
        let tmp = match temp_sibling(target) {
            Ok(t) => t,
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        staged.push((tmp.clone(), target));
        let written = async {
            tokio::fs::write(&tmp, bytes).await?;
            tokio::fs::File::open(&tmp).await?.sync_all().await
        }
        .await;
        if let Err(e) = written {
            result = Err(e);
            break;
        }
    }
    if result.is_ok() {
        for (tmp, target) in &staged {
            if let Err(e) = tokio::fs::rename(tmp, target).await {
                result = Err(e);
                break;
            }
        }
    }
    if result.is_err() {
        for (tmp, _) in &staged {
            let _ = tokio::fs::remove_file(tmp).await;
        }
    }
    result
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn replaces_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, "old").unwrap();
        replace_files(&[(a.clone(), b"new".to_vec()), (b.clone(), b"bee".to_vec())])
            .await
            .unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "bee");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        // A target whose directory is missing: nothing changes, nothing is left behind.
        let c = dir.path().join("missing").join("c");
        assert!(
            replace_files(&[(a.clone(), b"x".to_vec()), (c, b"y".to_vec())])
                .await
                .is_err()
        );
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
