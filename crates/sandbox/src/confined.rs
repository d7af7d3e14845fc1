//! File operations confined beneath a directory handle.
//!
//! Every path is opened relative to an `O_PATH` handle of the mount's directory with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: the kernel resolves `..` and symlinks
//! and fails (`EXDEV`) as soon as resolution would leave the directory, including absolute
//! symlinks and renames racing with the lookup. Writes create missing parent directories one
//! level at a time beneath the same handle and open the final component with `O_NOFOLLOW`, so
//! a symlinked destination is refused rather than followed. Directory walks (list, glob,
//! grep) descend with `openat(O_NOFOLLOW | O_DIRECTORY)` one component at a time and never
//! follow a symlink; a symlink entry is only reported when it resolves beneath the mount.
//!
//! On kernels without `openat2` (`ENOSYS`) a component-by-component walk with `O_NOFOLLOW`
//! is used instead: stricter (no symlinks at all), equally race-free.
//!
//! All functions here block; callers run them in `spawn_blocking`.

use rustix::fs::{self, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Why a confined operation failed. Carries no host path (also in its `Display`).
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("not found")]
    NotFound,
    /// Escape attempt (`..`, an absolute path, a symlink leading out), a NUL byte, a
    /// hard-linked destination, or EACCES/EPERM/EROFS.
    #[error("{0}")]
    Denied(&'static str),
    /// A symbolic link where none may be (`ELOOP`: a symlinked destination, any symlink on
    /// a path that must have none, or a symlink loop).
    #[error("symbolic link refused")]
    Symlink,
    #[error("is a directory")]
    IsDir,
    #[error("not a directory")]
    NotDir,
    /// A FIFO, socket or device (or, where a file is expected, anything but a file).
    #[error("not a regular file")]
    NotRegular,
    #[error("too large ({0} bytes)")]
    TooLarge(u64),
    #[error("I/O error: {0}")]
    Other(std::io::Error),
}

impl From<Errno> for FsError {
    fn from(e: Errno) -> FsError {
        match e {
            Errno::NOENT => FsError::NotFound,
            Errno::XDEV => FsError::Denied("path escapes its root"),
            Errno::LOOP => FsError::Symlink,
            Errno::ACCESS | Errno::PERM => FsError::Denied("permission denied"),
            Errno::ROFS => FsError::Denied("read-only file system"),
            Errno::ISDIR => FsError::IsDir,
            Errno::NOTDIR => FsError::NotDir,
            Errno::NXIO => FsError::NotRegular,
            other => FsError::Other(std::io::Error::from(other)),
        }
    }
}

impl From<std::io::Error> for FsError {
    fn from(e: std::io::Error) -> FsError {
        match e.raw_os_error() {
            Some(code) => FsError::from(Errno::from_raw_os_error(code)),
            None => FsError::Other(e),
        }
    }
}

/// The result of a confined operation.
pub type FsResult<T> = Result<T, FsError>;

/// Opens the directory every operation of a mount is confined beneath.
pub(crate) fn open_root(host_root: &Path) -> FsResult<OwnedFd> {
    Ok(fs::open(
        host_root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The one path rule of the crate: a path relative to a root is a list of normal components.
/// `.` is dropped; `..`, an absolute path and a NUL byte are refused (never interpreted).
/// Resolution against the root (symlinks) is the kernel's, in [`open_beneath`].
pub(crate) fn normal_components(rel: &Path) -> FsResult<Vec<&OsStr>> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(s) if s.as_bytes().contains(&0) => {
                return Err(FsError::Denied("path contains a NUL byte"));
            }
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            // Never produced by `vpath`; refuse rather than interpret.
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(FsError::Denied("path escapes its root"));
            }
        }
    }
    Ok(out)
}

/// Opens `rel` beneath `root` (symlinks allowed while they stay beneath).
pub(crate) fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
) -> FsResult<OwnedFd> {
    open_beneath_with(root, rel, flags, mode, ResolveFlags::empty())
}

/// Opens `rel` beneath `root` with no symlink anywhere on the way or at the leaf
/// ([`FsError::Symlink`] otherwise). `flags` must not hold `O_PATH | O_NOFOLLOW` (that pair
/// would open a leaf symlink itself).
pub(crate) fn open_beneath_no_symlinks(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
) -> FsResult<OwnedFd> {
    open_beneath_with(root, rel, flags, mode, ResolveFlags::NO_SYMLINKS)
}

fn open_beneath_with(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
    extra: ResolveFlags,
) -> FsResult<OwnedFd> {
    let comps = normal_components(rel)?;
    let path: &Path = if comps.is_empty() {
        Path::new(".")
    } else {
        rel
    };
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let mut attempts = 0;
        loop {
            match fs::openat2(
                root,
                path,
                flags | OFlags::CLOEXEC,
                mode,
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | extra,
            ) {
                Ok(fd) => return Ok(fd),
                // A rename raced with the lookup: the kernel asks us to retry.
                Err(Errno::AGAIN) if attempts < 8 => attempts += 1,
                Err(Errno::NOSYS) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    // Fallback: one component at a time, no symlinks at all.
    let mut cur = fs::openat(
        root,
        ".",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let Some((last, dirs)) = comps.split_last() else {
        return Ok(fs::openat(root, ".", flags | OFlags::CLOEXEC, mode)?);
    };
    for c in dirs {
        cur = fs::openat(
            &cur,
            *c,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
    }
    let fd = fs::openat(
        &cur,
        *last,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        mode,
    )?;
    if FileType::from_raw_mode(fs::fstat(&fd)?.st_mode) == FileType::Symlink {
        return Err(FsError::Symlink);
    }
    Ok(fd)
}

/// The kind of an open file.
pub(crate) fn file_type(fd: BorrowedFd<'_>) -> FsResult<(FileType, u64, u64)> {
    let st = fs::fstat(fd)?;
    Ok((
        FileType::from_raw_mode(st.st_mode),
        st.st_size.max(0) as u64,
        st.st_nlink as u64,
    ))
}

/// Reads a regular file, at most `max_bytes`.
pub(crate) fn read_file(host_root: &Path, rel: &Path, max_bytes: u64) -> FsResult<Vec<u8>> {
    let root = open_root(host_root)?;
    let fd = open_beneath(
        root.as_fd(),
        rel,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    let (ft, size, _) = file_type(fd.as_fd())?;
    match ft {
        FileType::RegularFile => {}
        FileType::Directory => return Err(FsError::IsDir),
        _ => return Err(FsError::NotRegular),
    }
    if size > max_bytes {
        return Err(FsError::TooLarge(size));
    }
    let mut data = Vec::with_capacity(size as usize);
    std::fs::File::from(fd)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut data)?;
    if data.len() as u64 > max_bytes {
        return Err(FsError::TooLarge(data.len() as u64));
    }
    Ok(data)
}

/// Creates the directories of `rel` beneath `root` (like `mkdir -p`), giving new ones to
/// `owner`. Returns a handle on the deepest one.
fn make_dirs(root: BorrowedFd<'_>, rel: &Path, owner: Option<(u32, u32)>) -> FsResult<OwnedFd> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY;
    match open_beneath(root, rel, dir_flags, Mode::empty()) {
        Ok(fd) => return Ok(fd),
        Err(FsError::NotFound) => {}
        Err(e) => return Err(e),
    }
    let comps = normal_components(rel)?;
    let mut cur = open_beneath(root, Path::new(""), dir_flags, Mode::empty())?;
    for c in comps {
        match fs::mkdirat(&cur, c, Mode::from_raw_mode(0o755)) {
            Ok(()) => {
                let fd = fs::openat(
                    &cur,
                    c,
                    dir_flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::fchown(&fd, Some(uid), Some(gid))?;
                }
                cur = fd;
            }
            Err(Errno::EXIST) => {
                // Exists: step into it without following a symlink.
                cur = fs::openat(
                    &cur,
                    c,
                    dir_flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(FsError::from)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(cur)
}

/// Writes `data` to `rel` beneath `host_root`: parents created, symlinked or hard-linked
/// destinations refused, non-regular files refused, new files given to `owner`.
pub(crate) fn write_file(
    host_root: &Path,
    rel: &Path,
    data: &[u8],
    append: bool,
    owner: Option<(u32, u32)>,
) -> FsResult<()> {
    let comps = normal_components(rel)?;
    let Some((name, parents)) = comps.split_last() else {
        return Err(FsError::IsDir);
    };
    let parent_rel: std::path::PathBuf = parents.iter().collect();
    let root = open_root(host_root)?;
    let parent = make_dirs(root.as_fd(), &parent_rel, owner)?;
    let base =
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let base = if append { base | OFlags::APPEND } else { base };
    let mode = Mode::from_raw_mode(0o644);
    let (fd, created) = match fs::openat(&parent, *name, base | OFlags::CREATE | OFlags::EXCL, mode)
    {
        Ok(fd) => (fd, true),
        Err(Errno::EXIST) => (fs::openat(&parent, *name, base, mode)?, false),
        Err(e) => return Err(e.into()),
    };
    let (ft, _, nlink) = file_type(fd.as_fd())?;
    if ft != FileType::RegularFile {
        return Err(FsError::NotRegular);
    }
    if !created && nlink > 1 {
        return Err(FsError::Denied("hard-linked destination refused"));
    }
    if created && let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&fd, Some(uid), Some(gid))?;
    }
    if !append {
        fs::ftruncate(&fd, 0)?;
    }
    let mut f = std::fs::File::from(fd);
    f.write_all(data)?;
    f.flush()?;
    Ok(())
}

/// One directory entry.
pub(crate) struct DirEntry {
    pub name: OsString,
    pub kind: FileType,
}

impl DirEntry {
    pub fn display_name(&self) -> String {
        self.name.to_string_lossy().into_owned()
    }
}

/// Entries of an open directory (without `.`/`..`), sorted by name, types filled in.
pub(crate) fn read_entries(dir: BorrowedFd<'_>, limit: usize) -> FsResult<Vec<DirEntry>> {
    let fd = fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut d = fs::Dir::new(fd)?;
    let mut out = Vec::new();
    while let Some(entry) = d.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = OsStr::from_bytes(name).to_os_string();
        let mut kind = entry.file_type();
        if kind == FileType::Unknown {
            kind = match fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode),
                Err(_) => continue,
            };
        }
        out.push(DirEntry { name, kind });
        if out.len() >= limit {
            break;
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Opens the subdirectory `name` of `dir` without following a symlink.
pub(crate) fn open_subdir(dir: BorrowedFd<'_>, name: &OsStr) -> FsResult<OwnedFd> {
    Ok(fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens the regular file `name` of `dir` for reading without following a symlink.
pub(crate) fn open_file_in(dir: BorrowedFd<'_>, name: &OsStr) -> FsResult<OwnedFd> {
    let fd = fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if file_type(fd.as_fd())?.0 != FileType::RegularFile {
        return Err(FsError::NotRegular);
    }
    Ok(fd)
}

/// Where the symlink at `rel` (beneath `root`) leads, if it stays beneath: `Some(true)` for
/// a directory, `Some(false)` for anything else, `None` when it escapes or dangles.
pub(crate) fn symlink_target_kind(root: BorrowedFd<'_>, rel: &Path) -> Option<bool> {
    let fd = open_beneath(root, rel, OFlags::PATH, Mode::empty()).ok()?;
    let (ft, _, _) = file_type(fd.as_fd()).ok()?;
    Some(ft == FileType::Directory)
}

/// Creates `dir` (and parents) if missing and makes sure it belongs to `owner`.
pub(crate) fn ensure_owned_dir(dir: &Path, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if let Some((uid, gid)) = owner {
        use std::os::unix::fs::MetadataExt;
        let md = std::fs::symlink_metadata(dir)?;
        if md.uid() != uid || md.gid() != gid {
            std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_roundtrip_and_refusals() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(tmp.path().join("secret"), "s").unwrap();
        write_file(&root, Path::new("a/b/c.txt"), b"hello", false, None).unwrap();
        write_file(&root, Path::new("a/b/c.txt"), b" world", true, None).unwrap();
        assert_eq!(
            read_file(&root, Path::new("a/b/c.txt"), 100).unwrap(),
            b"hello world"
        );
        assert!(matches!(
            read_file(&root, Path::new("a/b/c.txt"), 3),
            Err(FsError::TooLarge(11))
        ));
        assert!(matches!(
            read_file(&root, Path::new("nope"), 3),
            Err(FsError::NotFound)
        ));
        assert!(matches!(
            read_file(&root, Path::new("a"), 3),
            Err(FsError::IsDir)
        ));
        std::os::unix::fs::symlink("../secret", root.join("up")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret"), root.join("abs")).unwrap();
        std::os::unix::fs::symlink("a/b/c.txt", root.join("inside")).unwrap();
        assert!(matches!(
            read_file(&root, Path::new("up"), 100),
            Err(FsError::Denied(_))
        ));
        assert!(matches!(
            read_file(&root, Path::new("abs"), 100),
            Err(FsError::Denied(_))
        ));
        assert_eq!(
            read_file(&root, Path::new("inside"), 100).unwrap(),
            b"hello world"
        );
        assert!(matches!(
            write_file(&root, Path::new("inside"), b"x", false, None),
            Err(FsError::Symlink)
        ));
        assert!(matches!(
            write_file(&root, Path::new("up"), b"x", false, None),
            Err(FsError::Symlink)
        ));
        assert_eq!(std::fs::read(tmp.path().join("secret")).unwrap(), b"s");
        std::os::unix::fs::symlink(tmp.path(), root.join("dirlink")).unwrap();
        assert!(matches!(
            write_file(&root, Path::new("dirlink/new"), b"x", false, None),
            Err(FsError::Denied(_))
        ));
        assert!(!tmp.path().join("new").exists());
        assert!(matches!(
            normal_components(Path::new("../x")),
            Err(FsError::Denied(_))
        ));
    }

    #[test]
    fn entries_are_sorted_and_typed() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("b"), "").unwrap();
        std::os::unix::fs::symlink("b", tmp.path().join("a")).unwrap();
        let root = open_root(tmp.path()).unwrap();
        let e = read_entries(root.as_fd(), 100).unwrap();
        let names: Vec<String> = e.iter().map(|e| e.display_name()).collect();
        assert_eq!(names, ["a", "b", "d"]);
        assert_eq!(e[0].kind, FileType::Symlink);
        assert_eq!(e[2].kind, FileType::Directory);
    }
}
