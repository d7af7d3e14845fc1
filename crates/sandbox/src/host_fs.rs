//! Thread files on the host for the crates that are not the sandbox: the one place where the
//! runtime, the agent and the server copy, replace, publish, list, read and remove them
//! (branch copies, artifact edits, uploads, run snapshots, thread deletion).
//!
//! **The rule** (the same as the sandbox's own file operations, in `confined`): a path is a
//! `root` — a directory the caller built from [`crate::ThreadPaths`], whose last component
//! must not be a symlink — and a path relative to it made of normal components only (`.` is
//! dropped; `..`, an absolute path and a NUL byte are refused, never interpreted). It is
//! resolved by the kernel beneath an open handle of the root (`openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`), so no symlink is followed anywhere — not on the way, not at the
//! leaf, not out of the root and not within it — and a directory swapped for a symlink
//! between a check and a use makes the operation fail with [`FsError::Symlink`] instead of
//! leading elsewhere. Walks descend with `openat(O_NOFOLLOW)` relative to the directory
//! they listed, and renames and removals work on an open handle of the parent directory
//! (`renameat`/`unlinkat`), which a rename of that directory cannot redirect.
//!
//! Limits (file counts, read budgets) stay with the callers, which pass them in; writes that
//! count against a thread's quota go through [`crate::Sandbox::write_bytes`] and are then
//! published here ([`replace_file`]).
//!
//! Everything here blocks: call it from `spawn_blocking` (or [`blocking`]).

pub use crate::confined::{FsError, FsResult};

use crate::confined::{self, normal_components};
use rustix::fs::{self, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What a directory entry is (never the target of a symlink).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

impl Kind {
    fn of(ft: FileType) -> Kind {
        match ft {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Other,
        }
    }
}

/// Facts of one file, as `lstat` gives them (a symlink's own size and time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    pub len: u64,
    pub modified: Option<SystemTime>,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
}

#[allow(clippy::unnecessary_cast)] // the field types differ between targets
fn meta_of(st: &fs::Stat) -> Meta {
    let secs = st.st_mtime as i64;
    let nanos = st.st_mtime_nsec as u32;
    let modified = if secs >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs as u64, nanos))
    } else {
        None
    };
    Meta {
        kind: Kind::of(FileType::from_raw_mode(st.st_mode)),
        len: st.st_size.max(0) as u64,
        modified,
        mode: (st.st_mode as u32) & 0o7777,
    }
}

/// Opens a root: a directory, not a symlink itself (the path above it is the caller's).
fn open_root(root: &Path) -> FsResult<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match fs::open(root, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        // `O_DIRECTORY | O_NOFOLLOW` on a symlink says ENOTDIR: say what it is.
        Err(Errno::NOTDIR)
            if fs::lstat(root)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink) =>
        {
            Err(FsError::Symlink)
        }
        Err(e) => Err(e.into()),
    }
}

/// Opens the directory `rel` beneath `root` (no symlinks).
fn open_dir(root: BorrowedFd<'_>, rel: &Path) -> FsResult<OwnedFd> {
    confined::open_beneath_no_symlinks(root, rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
}

/// `rel` split into its parent directory (opened) and its last component.
fn open_parent<'a>(root: BorrowedFd<'_>, rel: &'a Path) -> FsResult<(OwnedFd, &'a OsStr)> {
    let comps = normal_components(rel)?;
    let Some((name, parents)) = comps.split_last() else {
        return Err(FsError::IsDir);
    };
    let parent: PathBuf = parents.iter().collect();
    Ok((open_dir(root, &parent)?, name))
}

fn stat_in(dir: BorrowedFd<'_>, name: &OsStr) -> FsResult<Meta> {
    Ok(meta_of(&fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?))
}

/// Runs a blocking operation of this module on tokio's blocking pool.
pub async fn blocking<T, F>(f: F) -> FsResult<T>
where
    F: FnOnce() -> FsResult<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| FsError::Other(std::io::Error::other(e.to_string())))?
}

/// Whether `dir` is a directory (not a symlink to one). For "does this thread have files
/// yet" checks on a path built from [`crate::ThreadPaths`].
pub fn is_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
}

/// The facts of `rel` beneath `root`. A symlink on the way is [`FsError::Symlink`]; a
/// symlink at the leaf is reported, not followed (`kind: Symlink`).
pub fn metadata(root: &Path, rel: &Path) -> FsResult<Meta> {
    let root = open_root(root)?;
    if normal_components(rel)?.is_empty() {
        return Ok(meta_of(&fs::fstat(&root)?));
    }
    let (dir, name) = open_parent(root.as_fd(), rel)?;
    stat_in(dir.as_fd(), name)
}

/// Reads the regular file `rel` beneath `root`, at most `max_bytes` ([`FsError::TooLarge`]
/// beyond).
pub fn read(root: &Path, rel: &Path, max_bytes: u64) -> FsResult<Vec<u8>> {
    let root = open_root(root)?;
    let (dir, name) = open_parent(root.as_fd(), rel)?;
    read_in(dir.as_fd(), name, max_bytes, true)
}

fn read_in(dir: BorrowedFd<'_>, name: &OsStr, max: u64, whole: bool) -> FsResult<Vec<u8>> {
    let fd = confined::open_file_in(dir, name)?;
    let mut data = Vec::new();
    std::fs::File::from(fd)
        .take(max.saturating_add(u64::from(whole)))
        .read_to_end(&mut data)?;
    if whole && data.len() as u64 > max {
        return Err(FsError::TooLarge(data.len() as u64));
    }
    Ok(data)
}

/// What a walk does after visiting an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    /// Go on; for a directory, walk into it.
    Descend,
    /// Go on; for a directory, do not walk into it.
    Skip,
    /// End the walk.
    Stop,
}

/// One entry met by [`walk`], with its directory open: reading it cannot be redirected.
pub struct Entry<'a> {
    dir: BorrowedFd<'a>,
    /// The entry's name.
    pub name: OsString,
    /// `/`-joined path from the walked directory, without a leading `/` (lossy UTF-8).
    pub rel: String,
    pub kind: Kind,
}

impl Entry<'_> {
    /// The entry's facts (`lstat`).
    pub fn metadata(&self) -> FsResult<Meta> {
        stat_in(self.dir, &self.name)
    }

    /// The whole regular file, at most `max_bytes` ([`FsError::TooLarge`] beyond). A file
    /// swapped for a symlink since the listing is [`FsError::Symlink`].
    pub fn read(&self, max_bytes: u64) -> FsResult<Vec<u8>> {
        read_in(self.dir, &self.name, max_bytes, true)
    }

    /// The first `n` bytes of the regular file (fewer when it is shorter).
    pub fn read_head(&self, n: u64) -> FsResult<Vec<u8>> {
        read_in(self.dir, &self.name, n, false)
    }

    /// A symlink's target text (never resolved).
    pub fn read_link(&self) -> FsResult<OsString> {
        let target = fs::readlinkat(self.dir, &self.name, Vec::new())?;
        Ok(OsStr::from_bytes(target.as_bytes()).to_os_string())
    }
}

/// Walks the directory `rel` beneath `root` depth first: each directory's entries are
/// visited sorted by name, then the subdirectories `visit` answered [`Visit::Descend`] for
/// are walked, the last first. Symlinks are visited, never followed. A directory that
/// cannot be opened or read below the start (gone, replaced by a symlink, no permission) is
/// skipped; the start itself not being a directory is an error ([`FsError::NotFound`] when
/// missing).
pub fn walk(root: &Path, rel: &Path, mut visit: impl FnMut(&Entry<'_>) -> Visit) -> FsResult<()> {
    let root = open_root(root)?;
    let start: PathBuf = normal_components(rel)?.iter().collect();
    let mut stack: Vec<(PathBuf, String)> = vec![(start, String::new())];
    let mut first = true;
    while let Some((path, prefix)) = stack.pop() {
        // Each pending directory is opened from the root when its turn comes (no symlink
        // allowed on the way), so the walk holds two handles at a time however wide the
        // tree is.
        let dir = match open_dir(root.as_fd(), &path) {
            Ok(d) => d,
            Err(e) if first => return Err(e),
            Err(_) => continue,
        };
        first = false;
        let Ok(entries) = confined::read_entries(dir.as_fd(), usize::MAX) else {
            continue;
        };
        for e in entries {
            let name = e.display_name();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let entry = Entry {
                dir: dir.as_fd(),
                name: e.name,
                rel,
                kind: Kind::of(e.kind),
            };
            match visit(&entry) {
                Visit::Stop => return Ok(()),
                Visit::Descend if entry.kind == Kind::Dir => {
                    stack.push((path.join(&entry.name), entry.rel));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Copies the tree under `from` into `to` (created, like `mkdir -p`; existing files are
/// overwritten): directories and regular files only, each with its permission bits.
/// Symlinks, special files and entries whose name `skip` accepts are left out, and so is an
/// entry replaced by a symlink or removed while the copy runs. Nothing is ever read or
/// written outside `from` and `to`. `from` missing is [`FsError::NotFound`].
pub fn copy_tree(from: &Path, to: &Path, skip: impl Fn(&OsStr) -> bool) -> FsResult<()> {
    let src_root = open_root(from)?;
    std::fs::create_dir_all(to)?;
    let dst_root = open_root(to)?;
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let src = match open_dir(src_root.as_fd(), &rel) {
            Ok(d) => d,
            // Changed since the listing (the start itself is checked by `open_root`).
            Err(FsError::NotFound | FsError::Symlink | FsError::NotDir)
                if !rel.as_os_str().is_empty() =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        let dst = open_dir(dst_root.as_fd(), &rel)?;
        for e in confined::read_entries(src.as_fd(), usize::MAX)? {
            if skip(&e.name) {
                continue;
            }
            match e.kind {
                FileType::Directory => {
                    match fs::mkdirat(&dst, &e.name, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(err) => return Err(err.into()),
                    }
                    stack.push(rel.join(&e.name));
                }
                FileType::RegularFile => copy_file(src.as_fd(), dst.as_fd(), &e.name)?,
                _ => {}
            }
        }
    }
    Ok(())
}

fn copy_file(src: BorrowedFd<'_>, dst: BorrowedFd<'_>, name: &OsStr) -> FsResult<()> {
    let from = match confined::open_file_in(src, name) {
        Ok(fd) => fd,
        // Changed since the listing: no longer a file to copy.
        Err(FsError::NotFound | FsError::Symlink | FsError::NotRegular) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mode = meta_of(&fs::fstat(&from)?).mode;
    let to = fs::openat(
        dst,
        name,
        OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::TRUNC
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?;
    if meta_of(&fs::fstat(&to)?).kind != Kind::File {
        return Err(FsError::NotRegular);
    }
    fs::fchmod(&to, Mode::from_raw_mode(mode))?;
    let mut to = std::fs::File::from(to);
    std::io::copy(&mut std::fs::File::from(from), &mut to)?;
    Ok(())
}

/// How [`replace_file`] treats the file it replaces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replace {
    /// The target must exist ([`FsError::NotFound`] otherwise).
    pub must_exist: bool,
    /// The new file takes the permission bits of the one it replaces.
    pub keep_mode: bool,
}

/// Publishes the staged file `staged` as `target` (both beneath `root`, in one directory)
/// with one `renameat`: readers see the old file or the new one, never a part. The target
/// may be missing (unless [`Replace::must_exist`]) or a regular file; a symlink there is
/// [`FsError::Symlink`], anything else [`FsError::NotRegular`] (or [`FsError::IsDir`]).
/// On any error the staged file is removed — unless its directory can no longer be reached
/// without a symlink (it was moved or swapped meanwhile): then it stays where it was
/// written, inside the root, and the target is untouched.
pub fn replace_file(root: &Path, staged: &Path, target: &Path, how: Replace) -> FsResult<()> {
    let root = open_root(root)?;
    let (staged_dir, staged_name) = split(staged)?;
    let dir = open_dir(root.as_fd(), &staged_dir)?;
    let r = match split(target) {
        Ok((target_dir, _)) if target_dir != staged_dir => {
            Err(FsError::Denied("a staged file must sit beside its target"))
        }
        Ok((_, target_name)) => publish(dir.as_fd(), staged_name, target_name, how),
        Err(e) => Err(e),
    };
    if r.is_err() {
        let _ = fs::unlinkat(&dir, staged_name, AtFlags::empty());
    }
    r
}

fn split(rel: &Path) -> FsResult<(PathBuf, &OsStr)> {
    let comps = normal_components(rel)?;
    let Some((name, parents)) = comps.split_last() else {
        return Err(FsError::IsDir);
    };
    Ok((parents.iter().collect(), name))
}

fn publish(dir: BorrowedFd<'_>, staged: &OsStr, target: &OsStr, how: Replace) -> FsResult<()> {
    let current = match stat_in(dir, target) {
        Ok(m) => Some(m),
        Err(FsError::NotFound) if !how.must_exist => None,
        Err(e) => return Err(e),
    };
    match current.map(|m| m.kind) {
        None | Some(Kind::File) => {}
        Some(Kind::Symlink) => return Err(FsError::Symlink),
        Some(Kind::Dir) => return Err(FsError::IsDir),
        Some(Kind::Other) => return Err(FsError::NotRegular),
    }
    let fd = confined::open_file_in(dir, staged)?;
    if how.keep_mode
        && let Some(m) = current
    {
        fs::fchmod(&fd, Mode::from_raw_mode(m.mode))?;
    }
    drop(fd);
    // The target may have become something else since the check: renaming over it replaces
    // that entry itself (a symlink is not followed), in this same directory.
    fs::renameat(dir, staged, dir, target)?;
    Ok(())
}

/// Removes the file (or symlink, not followed) `rel` beneath `root`; a directory is
/// [`FsError::IsDir`] and stays.
pub fn remove_file(root: &Path, rel: &Path) -> FsResult<()> {
    let root = open_root(root)?;
    let (dir, name) = open_parent(root.as_fd(), rel)?;
    match fs::unlinkat(&dir, name, AtFlags::empty()) {
        // Linux says EISDIR; POSIX allows EPERM.
        Err(Errno::PERM) if stat_in(dir.as_fd(), name).is_ok_and(|m| m.kind == Kind::Dir) => {
            Err(FsError::IsDir)
        }
        r => Ok(r?),
    }
}

/// Removes the directory `dir` and everything under it, following no symlink (entries are
/// removed relative to open directory handles, so a directory swapped for a symlink during
/// the removal makes it remove the symlink, not what it points to). `Ok(false)` when `dir`
/// did not exist. For thread deletion (a thread's `thread_dir`).
pub fn remove_tree(dir: &Path) -> FsResult<bool> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e.into()),
        Ok(m) if !m.is_dir() => return Err(FsError::NotDir),
        Ok(_) => {}
    }
    // std's implementation walks with openat/unlinkat and O_NOFOLLOW (the fix of
    // CVE-2022-21658), which is the rule above.
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e.into()),
    }
}
