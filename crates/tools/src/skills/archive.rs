//! `.skill` archives (reference §7): a ZIP file holding one skill directory, as DeerFlow's
//! skill-creator writes them into a thread's outputs. The archive is untrusted input, so
//! every rule below is checked while reading it, never assumed:
//!
//! * **Entry count**: the count the archive declares (end-of-central-directory record, read
//!   before the central directory is parsed) and the count parsed are both at most
//!   [`MAX_ENTRIES`]; duplicate member names are refused.
//! * **Names**: an absolute name (`/x`, `\x`), a `..` component, a `:` anywhere (drive letters,
//!   NTFS alternate streams), a NUL byte, a component over 255 bytes or a name over 1024 bytes
//!   refuse the whole archive. `\` counts as a separator; empty and `.` components are dropped.
//! * **Types** (the unix mode in the external attributes): symlinks are skipped, never
//!   created; device files, FIFOs and sockets refuse the archive. Only directories and
//!   regular files are written (files `0o644`, or `0o755` when the archive marks them
//!   executable).
//! * **Size**: the bytes actually written are counted as they are inflated (declared sizes
//!   are not trusted); more than [`MAX_TOTAL_BYTES`] in all refuses the archive. A member's
//!   CRC is checked by the reader at its end.
//! * **Executables**: a member starting with an ELF, PE (`MZ`) or Mach-O magic refuses the
//!   archive.
//! * **Noise**: members under `__MACOSX/` or with a component starting with `.` (`.DS_Store`,
//!   `._x`, `.git/`) are not extracted.
//! * **Layout**: a single top-level directory is unwrapped; the skill's root must hold a
//!   `SKILL.md` of at most 1 MiB whose front matter passes [`super::frontmatter`].
//!
//! [`install`] extracts into a hidden staging directory inside the destination root, checks
//! the result and renames the skill directory into place as `<root>/<name>`: the skill
//! appears whole or not at all, and a failure leaves nothing behind. [`read_member`] reads
//! one member for previews, with the same name rules.

use super::{MAX_SKILL_FILE_BYTES, SKILL_FILE, parse_skill_md};
use std::io::{Cursor, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Largest `.skill` file read (it is held in memory while it is read).
pub const MAX_ARCHIVE_BYTES: u64 = 128 * 1024 * 1024;
/// Most members an archive may have.
pub const MAX_ENTRIES: usize = 4096;
/// Most bytes an archive may extract to.
pub const MAX_TOTAL_BYTES: u64 = 512 * 1024 * 1024;
/// Largest member [`read_member`] returns for a preview (DeerFlow's limit).
pub const MAX_MEMBER_PREVIEW_BYTES: u64 = 16 * 1024 * 1024;
/// Prefix of the staging directories [`install`] creates (hidden: the catalog skips them).
pub const STAGING_PREFIX: &str = ".installing-";

const MAX_NAME_BYTES: usize = 1024;
const MAX_COMPONENT_BYTES: usize = 255;
const CHUNK: usize = 64 * 1024;

/// Magic numbers of native executables: ELF, PE/DOS, Mach-O (32/64-bit, both byte orders)
/// and Mach-O universal binaries.
const EXECUTABLE_MAGICS: [&[u8]; 10] = [
    b"\x7fELF",
    b"MZ",
    b"\xfe\xed\xfa\xce",
    b"\xfe\xed\xfa\xcf",
    b"\xce\xfa\xed\xfe",
    b"\xcf\xfa\xed\xfe",
    b"\xca\xfe\xba\xbe",
    b"\xbe\xba\xfe\xca",
    b"\xca\xfe\xba\xbf",
    b"\xbf\xba\xfe\xca",
];

/// The limits extraction enforces (tests lower them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_entries: usize,
    pub max_total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_entries: MAX_ENTRIES,
            max_total_bytes: MAX_TOTAL_BYTES,
        }
    }
}

/// Why an archive was not installed.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The archive breaks a rule or is not a usable ZIP: the caller's to fix.
    #[error("{0}")]
    Invalid(String),
    /// A skill of that name exists already.
    #[error("Skill '{0}' already exists")]
    Exists(String),
    /// The server's own file I/O failed.
    #[error("skill archive I/O failed: {0}")]
    Io(std::io::Error),
}

fn invalid(msg: impl Into<String>) -> ArchiveError {
    ArchiveError::Invalid(msg.into())
}

/// Whether `head` (a file's first bytes, at least 4 when the file has them) is a native
/// executable.
pub fn is_native_executable(head: &[u8]) -> bool {
    EXECUTABLE_MAGICS.iter().any(|m| head.starts_with(m))
}

/// The path components of an archive member name, or why the name is refused.
pub fn member_components(name: &str) -> Result<Vec<&str>, String> {
    if name.contains('\0') {
        return Err("contains a NUL byte".into());
    }
    if name.starts_with(['/', '\\']) {
        return Err("absolute path".into());
    }
    if name.contains(':') {
        return Err("contains ':'".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!("longer than {MAX_NAME_BYTES} bytes"));
    }
    let mut parts = Vec::new();
    for part in name.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => return Err("path traversal ('..')".into()),
            p if p.len() > MAX_COMPONENT_BYTES => {
                return Err(format!(
                    "a path component is longer than {MAX_COMPONENT_BYTES} bytes"
                ));
            }
            p => parts.push(p),
        }
    }
    Ok(parts)
}

/// Members that are not extracted: macOS resource forks and hidden files.
fn ignored(parts: &[&str]) -> bool {
    parts.iter().any(|p| *p == "__MACOSX" || p.starts_with('.'))
}

/// What a member is, by its unix mode (and its name for archives without one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
    Special,
}

fn kind_of(mode: Option<u32>, named_dir: bool) -> Kind {
    match mode.map(|m| m & 0o170_000) {
        Some(0o120_000) => Kind::Symlink,
        Some(0o040_000) => Kind::Dir,
        None | Some(0) | Some(0o100_000) if named_dir => Kind::Dir,
        None | Some(0) | Some(0o100_000) => Kind::File,
        Some(_) => Kind::Special,
    }
}

fn zip_error(e: zip::result::ZipError) -> ArchiveError {
    use zip::result::ZipError;
    match e {
        ZipError::UnsupportedArchive(m) => invalid(format!("Unsupported skill archive: {m}")),
        ZipError::CompressionMethodNotSupported(m) => invalid(format!(
            "Unsupported skill archive: compression method {m} (use deflate or store)"
        )),
        ZipError::InvalidPassword => invalid("Encrypted skill archives are not supported"),
        other => invalid(format!("File is not a valid ZIP archive: {other}")),
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 2)
        .map(|s| u64::from(u16::from_le_bytes([s[0], s[1]])))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(s))
}

/// The entry count the archive's end-of-central-directory record declares (the ZIP64 one
/// when the classic field is saturated), read before anything is parsed so that a central
/// directory of millions of entries is refused without being loaded. `None` when no record
/// is found (the ZIP reader then refuses the file).
pub fn declared_entries(bytes: &[u8]) -> Option<u64> {
    const EOCD: &[u8] = b"PK\x05\x06";
    const LOCATOR: &[u8] = b"PK\x06\x07";
    const EOCD64: &[u8] = b"PK\x06\x06";
    // The record is 22 bytes plus a comment of at most 65535.
    let from = bytes.len().saturating_sub(22 + 65_535);
    let at = (from..=bytes.len().saturating_sub(22))
        .rev()
        .find(|&i| bytes.get(i..i + 4) == Some(EOCD))?;
    let total = u16_at(bytes, at + 10)?;
    if total != 0xFFFF {
        return Some(total);
    }
    let loc = at.checked_sub(20)?;
    if bytes.get(loc..loc + 4) != Some(LOCATOR) {
        return Some(total);
    }
    let rec = usize::try_from(u64_at(bytes, loc + 8)?).ok()?;
    if bytes.get(rec..rec + 4) != Some(EOCD64) {
        return None;
    }
    u64_at(bytes, rec + 32)
}

fn open_archive(
    bytes: &[u8],
    limits: Limits,
) -> Result<zip::ZipArchive<Cursor<&[u8]>>, ArchiveError> {
    let too_many = |n: u64| {
        invalid(format!(
            "Skill archive contains too many entries ({n} > {})",
            limits.max_entries
        ))
    };
    if let Some(n) = declared_entries(bytes)
        && n > limits.max_entries as u64
    {
        return Err(too_many(n));
    }
    let zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(zip_error)?;
    if zip.len() > limits.max_entries {
        return Err(too_many(zip.len() as u64));
    }
    if zip.metadata().has_duplicate_names() {
        return Err(invalid("Skill archive contains duplicate member names"));
    }
    Ok(zip)
}

/// A failure writing `path` while extracting `name`: the archive's fault when the layout
/// is impossible (two members at one path, a file where a directory must be), ours
/// otherwise.
fn fs_error(e: std::io::Error, name: &str) -> ArchiveError {
    use std::io::ErrorKind::*;
    match e.kind() {
        AlreadyExists | NotADirectory | IsADirectory | DirectoryNotEmpty => invalid(format!(
            "Archive member {name:?} collides with another member"
        )),
        InvalidFilename => invalid(format!("Archive member {name:?} has an unusable name")),
        _ => ArchiveError::Io(e),
    }
}

/// Copies one member to `out`, counting what is written against the archive's budget and
/// refusing native executables by their first bytes.
fn copy_member(
    src: &mut impl Read,
    out: &mut impl Write,
    name: &str,
    total: &mut u64,
    limits: Limits,
) -> Result<(), ArchiveError> {
    let mut buf = vec![0u8; CHUNK];
    let mut head = [0u8; 4];
    let mut head_len = 0usize;
    let mut checked = false;
    let check = |head: &[u8]| {
        if is_native_executable(head) {
            Err(invalid(format!(
                "Archive contains executable binary member: {name:?}"
            )))
        } else {
            Ok(())
        }
    };
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(invalid(format!(
                    "Archive member {name:?} cannot be read: {e}"
                )));
            }
        };
        if !checked {
            let take = n.min(head.len() - head_len);
            head[head_len..head_len + take].copy_from_slice(&buf[..take]);
            head_len += take;
            if head_len == head.len() {
                check(&head)?;
                checked = true;
            }
        }
        *total = total.saturating_add(n as u64);
        if *total > limits.max_total_bytes {
            return Err(invalid(format!(
                "Skill archive is too large: it extracts to more than {} MiB",
                limits.max_total_bytes / (1024 * 1024)
            )));
        }
        out.write_all(&buf[..n]).map_err(|e| fs_error(e, name))?;
    }
    if !checked {
        check(&head[..head_len])?;
    }
    Ok(())
}

/// Extracts `bytes` (a ZIP file) into `dest`, an existing empty directory, under the rules
/// of this module. On error `dest` holds whatever was written so far: the caller removes it.
pub fn extract(bytes: &[u8], dest: &Path, limits: Limits) -> Result<(), ArchiveError> {
    let mut zip = open_archive(bytes, limits)?;
    let mut total = 0u64;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(zip_error)?;
        let name = entry
            .name()
            .map_err(|e| invalid(format!("Archive member name is not readable: {e}")))?
            .into_owned();
        let parts = member_components(&name).map_err(|why| {
            invalid(format!(
                "Archive contains unsafe member path {name:?}: {why}"
            ))
        })?;
        let mode = entry.unix_mode();
        match kind_of(mode, entry.is_dir()) {
            Kind::Symlink => {
                tracing::warn!(member = %name, "symlink in a skill archive skipped");
                continue;
            }
            Kind::Special => {
                return Err(invalid(format!(
                    "Archive member {name:?} is not a regular file or directory (device, FIFO or socket)"
                )));
            }
            Kind::Dir => {
                if parts.is_empty() || ignored(&parts) {
                    continue;
                }
                let path: PathBuf = parts.iter().fold(dest.to_path_buf(), |p, c| p.join(c));
                std::fs::create_dir_all(&path).map_err(|e| fs_error(e, &name))?;
            }
            Kind::File => {
                if parts.is_empty() {
                    return Err(invalid(format!(
                        "Archive contains unsafe member path {name:?}: no file name"
                    )));
                }
                if ignored(&parts) {
                    continue;
                }
                let path: PathBuf = parts.iter().fold(dest.to_path_buf(), |p, c| p.join(c));
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| fs_error(e, &name))?;
                }
                let executable = mode.is_some_and(|m| m & 0o111 != 0);
                let mut out = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(if executable { 0o755 } else { 0o644 })
                    .open(&path)
                    .map_err(|e| fs_error(e, &name))?;
                copy_member(&mut entry, &mut out, &name, &mut total, limits)?;
                out.flush().map_err(|e| fs_error(e, &name))?;
            }
        }
    }
    Ok(())
}

/// The skill's root in an extracted archive: its single top-level directory, or the
/// extraction directory itself.
pub fn skill_root(extracted: &Path) -> Result<PathBuf, ArchiveError> {
    let mut items = Vec::new();
    for e in std::fs::read_dir(extracted).map_err(ArchiveError::Io)? {
        let e = e.map_err(ArchiveError::Io)?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "__MACOSX" {
            continue;
        }
        items.push(e.path());
    }
    match items.as_slice() {
        [] => Err(invalid("Skill archive is empty")),
        [only] if std::fs::symlink_metadata(only).is_ok_and(|m| m.is_dir()) => Ok(only.clone()),
        _ => Ok(extracted.to_path_buf()),
    }
}

/// Reads and validates `dir/SKILL.md`; returns the skill's name.
pub fn skill_name(dir: &Path) -> Result<String, ArchiveError> {
    let file = dir.join(SKILL_FILE);
    let meta = match std::fs::symlink_metadata(&file) {
        Ok(m) if m.is_file() => m,
        _ => return Err(invalid(format!("Invalid skill: {SKILL_FILE} not found"))),
    };
    if meta.len() > MAX_SKILL_FILE_BYTES {
        return Err(invalid(format!(
            "Invalid skill: {SKILL_FILE} is larger than 1 MiB"
        )));
    }
    let bytes = std::fs::read(&file).map_err(ArchiveError::Io)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| invalid(format!("Invalid skill: {SKILL_FILE} is not valid UTF-8")))?;
    let (fm, _) = parse_skill_md(&text).map_err(|m| invalid(format!("Invalid skill: {m}")))?;
    Ok(fm.name)
}

/// A fresh, unique staging name.
fn staging_name() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{STAGING_PREFIX}{}-{nanos:x}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Installs the skill in `bytes` (a `.skill` archive) as `root/<name>`, `<name>` being its
/// front matter's. `taken(name)` says whether the name is used elsewhere (a public skill):
/// then, as when `root/<name>` exists, nothing is installed ([`ArchiveError::Exists`]).
/// Blocking file I/O; callers serialise installs into one `root`.
pub fn install(
    bytes: &[u8],
    root: &Path,
    taken: &dyn Fn(&str) -> bool,
    limits: Limits,
) -> Result<String, ArchiveError> {
    std::fs::create_dir_all(root).map_err(ArchiveError::Io)?;
    let staging = root.join(staging_name());
    std::fs::create_dir(&staging).map_err(ArchiveError::Io)?;
    let result = stage_and_move(bytes, root, &staging, taken, limits);
    if std::fs::symlink_metadata(&staging).is_ok()
        && let Err(e) = std::fs::remove_dir_all(&staging)
    {
        tracing::warn!(dir = %staging.display(), error = %e, "skill staging directory not removed");
    }
    result
}

fn stage_and_move(
    bytes: &[u8],
    root: &Path,
    staging: &Path,
    taken: &dyn Fn(&str) -> bool,
    limits: Limits,
) -> Result<String, ArchiveError> {
    extract(bytes, staging, limits)?;
    let skill_dir = skill_root(staging)?;
    let name = skill_name(&skill_dir)?;
    let target = root.join(&name);
    if taken(&name) || std::fs::symlink_metadata(&target).is_ok() {
        return Err(ArchiveError::Exists(name));
    }
    // The skill must be readable by the sandbox like any other, whatever the umask.
    set_dir_mode(&skill_dir)?;
    match std::fs::rename(&skill_dir, &target) {
        Ok(()) => Ok(name),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::DirectoryNotEmpty
            ) =>
        {
            Err(ArchiveError::Exists(name))
        }
        Err(e) => Err(ArchiveError::Io(e)),
    }
}

fn set_dir_mode(dir: &Path) -> Result<(), ArchiveError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(ArchiveError::Io)
}

/// Why [`read_member`] returned nothing.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MemberError {
    /// The requested name breaks the member name rules.
    #[error("Invalid path inside the skill archive: {0}")]
    BadName(String),
    /// The file is not a ZIP archive (or breaks the archive rules).
    #[error("{0}")]
    BadArchive(String),
    /// No regular-file member of that name.
    #[error("File '{0}' not found in skill archive")]
    NotFound(String),
    /// The member is larger than the limit.
    #[error("Skill archive member is too large to preview")]
    TooLarge,
}

/// One member of a `.skill` archive, for previews: `member` names it relative to the
/// archive's root or to its single top-level directory (`SKILL.md` finds `my-skill/SKILL.md`).
/// Members with unsafe names, symlinks and special files are never returned; at most
/// `max_bytes` are read (counted as inflated).
pub fn read_member(bytes: &[u8], member: &str, max_bytes: u64) -> Result<Vec<u8>, MemberError> {
    let want = member_components(member).map_err(MemberError::BadName)?;
    if want.is_empty() {
        return Err(MemberError::BadName("no file name".into()));
    }
    let not_found = || MemberError::NotFound(member.to_string());
    let mut zip = match open_archive(bytes, Limits::default()) {
        Ok(z) => z,
        Err(e) => return Err(MemberError::BadArchive(e.to_string())),
    };
    let mut exact = None;
    let mut wrapped = None;
    for i in 0..zip.len() {
        let Ok(entry) = zip.by_index_raw(i) else {
            continue;
        };
        let Ok(name) = entry.name() else {
            continue;
        };
        let Ok(parts) = member_components(&name) else {
            continue;
        };
        if kind_of(entry.unix_mode(), entry.is_dir()) != Kind::File {
            continue;
        }
        if parts == want {
            exact = Some(i);
            break;
        }
        if wrapped.is_none() && parts.len() == want.len() + 1 && parts[1..] == want[..] {
            wrapped = Some(i);
        }
    }
    let index = exact.or(wrapped).ok_or_else(not_found)?;
    let mut entry = zip
        .by_index(index)
        .map_err(|e| MemberError::BadArchive(zip_error(e).to_string()))?;
    if entry.size() > max_bytes {
        return Err(MemberError::TooLarge);
    }
    let mut out = Vec::new();
    let mut limited = (&mut entry).take(max_bytes.saturating_add(1));
    limited.read_to_end(&mut out).map_err(|e| {
        MemberError::BadArchive(format!("Skill archive member cannot be read: {e}"))
    })?;
    if out.len() as u64 > max_bytes {
        return Err(MemberError::TooLarge);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zip::write::SimpleFileOptions;

    const SKILL_MD: &str = "---\nname: demo-skill\ndescription: A demo.\n---\n# Demo\n";

    /// An archive of `(name, unix mode or 0, content)` members (stored, or deflated when
    /// `deflate`).
    fn zip_of(members: &[(&str, u32, &[u8])], deflate: bool) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let method = if deflate {
            zip::CompressionMethod::Deflated
        } else {
            zip::CompressionMethod::Stored
        };
        for (name, mode, content) in members {
            let mut opts = SimpleFileOptions::default().compression_method(method);
            if *mode != 0 {
                opts = opts.external_attributes(mode << 16);
            }
            if name.ends_with('/') {
                w.add_directory(*name, opts).unwrap();
            } else {
                w.start_file(*name, opts).unwrap();
                w.write_all(content).unwrap();
            }
        }
        w.finish().unwrap().into_inner()
    }

    fn skill(extra: &[(&str, u32, &[u8])]) -> Vec<u8> {
        let mut m: Vec<(&str, u32, &[u8])> = vec![("demo-skill/SKILL.md", 0, SKILL_MD.as_bytes())];
        m.extend_from_slice(extra);
        zip_of(&m, true)
    }

    fn install_into(root: &Path, bytes: &[u8]) -> Result<String, ArchiveError> {
        install(bytes, root, &|_| false, Limits::default())
    }

    /// Everything under `root`, hidden entries included, as sorted relative paths.
    fn tree(root: &Path) -> Vec<String> {
        fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd {
                let p = e.unwrap().path();
                out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
                if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                    walk(base, &p, out);
                }
            }
        }
        let mut v = Vec::new();
        walk(root, root, &mut v);
        v.sort();
        v
    }

    fn refused(bytes: &[u8], want: &str) {
        let dir = tempfile::tempdir().unwrap();
        let err = install_into(dir.path(), bytes).unwrap_err();
        assert!(
            matches!(&err, ArchiveError::Invalid(m) if m.contains(want)),
            "want {want:?}, got {err:?}"
        );
        // Nothing is left behind: no staging directory, no skill.
        assert_eq!(tree(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn a_wrapped_skill_installs_whole() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = skill(&[
            ("demo-skill/scripts/", 0o040_755, b""),
            (
                "demo-skill/scripts/run.sh",
                0o100_755,
                b"#!/bin/sh\necho hi\n",
            ),
            ("demo-skill/references/notes.md", 0o100_644, b"notes"),
        ]);
        assert_eq!(install_into(dir.path(), &bytes).unwrap(), "demo-skill");
        assert_eq!(
            tree(dir.path()),
            [
                "demo-skill",
                "demo-skill/SKILL.md",
                "demo-skill/references",
                "demo-skill/references/notes.md",
                "demo-skill/scripts",
                "demo-skill/scripts/run.sh",
            ]
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &str| {
            std::fs::metadata(dir.path().join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o111
        };
        assert_ne!(mode("demo-skill/scripts/run.sh"), 0);
        assert_eq!(mode("demo-skill/references/notes.md"), 0);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("demo-skill/SKILL.md")).unwrap(),
            SKILL_MD
        );
    }

    #[test]
    fn an_unwrapped_skill_installs_under_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = zip_of(
            &[("SKILL.md", 0, SKILL_MD.as_bytes()), ("a.txt", 0, b"a")],
            false,
        );
        assert_eq!(install_into(dir.path(), &bytes).unwrap(), "demo-skill");
        assert_eq!(
            tree(dir.path()),
            ["demo-skill", "demo-skill/SKILL.md", "demo-skill/a.txt"]
        );
    }

    #[test]
    fn absolute_members_are_refused() {
        refused(&skill(&[("/etc/evil", 0, b"x")]), "absolute path");
        refused(&skill(&[("\\evil", 0, b"x")]), "absolute path");
    }

    #[test]
    fn parent_directory_members_are_refused() {
        refused(&skill(&[("demo-skill/../../evil", 0, b"x")]), "traversal");
        refused(&skill(&[("..\\evil", 0, b"x")]), "traversal");
    }

    #[test]
    fn colons_in_member_names_are_refused() {
        refused(&skill(&[("C:/evil", 0, b"x")]), "contains ':'");
        refused(
            &skill(&[("demo-skill/run.sh:hidden", 0, b"x")]),
            "contains ':'",
        );
    }

    #[test]
    fn symlinks_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = skill(&[("demo-skill/passwd", 0o120_777, b"/etc/passwd")]);
        assert_eq!(install_into(dir.path(), &bytes).unwrap(), "demo-skill");
        assert_eq!(tree(dir.path()), ["demo-skill", "demo-skill/SKILL.md"]);
    }

    #[test]
    fn device_files_and_fifos_are_refused() {
        for mode in [0o020_644, 0o060_644, 0o010_644, 0o140_644] {
            refused(
                &skill(&[("demo-skill/dev", mode, b"")]),
                "not a regular file or directory",
            );
        }
    }

    #[test]
    fn too_many_entries_are_refused() {
        let names: Vec<String> = (0..MAX_ENTRIES)
            .map(|i| format!("demo-skill/f{i}"))
            .collect();
        let mut members: Vec<(&str, u32, &[u8])> =
            vec![("demo-skill/SKILL.md", 0, SKILL_MD.as_bytes())];
        members.extend(names.iter().map(|n| (n.as_str(), 0, &b""[..])));
        let bytes = zip_of(&members, false);
        assert_eq!(declared_entries(&bytes), Some(MAX_ENTRIES as u64 + 1));
        refused(&bytes, "too many entries (4097 > 4096)");
        // Exactly at the limit is fine.
        let dir = tempfile::tempdir().unwrap();
        assert!(install_into(dir.path(), &zip_of(&members[..MAX_ENTRIES], false)).is_ok());
    }

    #[test]
    fn the_total_size_is_counted_as_written() {
        let limits = Limits {
            max_entries: MAX_ENTRIES,
            max_total_bytes: 1024 * 1024,
        };
        assert_eq!(Limits::default().max_total_bytes, 512 * 1024 * 1024);
        let big = vec![b'a'; 600 * 1024];
        let bytes = skill(&[
            ("demo-skill/a.txt", 0, &big[..]),
            ("demo-skill/b.txt", 0, &big[..]),
        ]);
        // Highly compressible: the archive itself is tiny.
        assert!(bytes.len() < 16 * 1024, "{}", bytes.len());
        let dir = tempfile::tempdir().unwrap();
        let err = install(&bytes, dir.path(), &|_| false, limits).unwrap_err();
        assert!(
            matches!(&err, ArchiveError::Invalid(m) if m.contains("too large")),
            "{err:?}"
        );
        assert_eq!(tree(dir.path()), Vec::<String>::new());

        // Declared sizes that lie (patched to 1 byte in both headers) change nothing: the
        // bytes inflated are what counts, or the reader refuses the member.
        let mut lying = bytes.clone();
        patch_sizes(&mut lying, "demo-skill/a.txt", 1);
        let err = install(&lying, dir.path(), &|_| false, limits).unwrap_err();
        assert!(matches!(err, ArchiveError::Invalid(_)), "{err:?}");
        assert_eq!(tree(dir.path()), Vec::<String>::new());
    }

    /// Sets the uncompressed size of member `name` in its local and central headers.
    fn patch_sizes(bytes: &mut [u8], name: &str, size: u32) {
        let mut i = 0;
        while i + 4 <= bytes.len() {
            let (sig_local, sig_central) = (
                &bytes[i..i + 4] == b"PK\x03\x04",
                &bytes[i..i + 4] == b"PK\x01\x02",
            );
            let (name_len_at, size_at, name_at) = if sig_local {
                (i + 26, i + 22, i + 30)
            } else if sig_central {
                (i + 28, i + 24, i + 46)
            } else {
                i += 1;
                continue;
            };
            let n = u16::from_le_bytes([bytes[name_len_at], bytes[name_len_at + 1]]) as usize;
            if bytes.get(name_at..name_at + n) == Some(name.as_bytes()) {
                bytes[size_at..size_at + 4].copy_from_slice(&size.to_le_bytes());
            }
            i += 4;
        }
    }

    #[test]
    fn native_executables_are_refused() {
        for magic in EXECUTABLE_MAGICS {
            let mut content = magic.to_vec();
            content.extend_from_slice(&[0u8; 64]);
            refused(
                &skill(&[("demo-skill/tool", 0o100_755, &content[..])]),
                "executable binary member",
            );
        }
        // A script is fine, and so is a file too short to be a binary.
        let dir = tempfile::tempdir().unwrap();
        let ok = skill(&[
            ("demo-skill/x.py", 0, b"print(1)"),
            ("demo-skill/y", 0, b"M"),
        ]);
        assert!(install_into(dir.path(), &ok).is_ok());
    }

    #[test]
    fn macos_metadata_and_dotfiles_are_not_extracted() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = zip_of(
            &[
                ("demo-skill/SKILL.md", 0, SKILL_MD.as_bytes()),
                ("demo-skill/.DS_Store", 0, b"junk"),
                ("demo-skill/.git/config", 0, b"junk"),
                ("__MACOSX/demo-skill/._SKILL.md", 0, b"junk"),
                (".hidden-top", 0, b"junk"),
            ],
            true,
        );
        // Without the noise there is one top-level directory: it is unwrapped.
        assert_eq!(install_into(dir.path(), &bytes).unwrap(), "demo-skill");
        assert_eq!(tree(dir.path()), ["demo-skill", "demo-skill/SKILL.md"]);
    }

    #[test]
    fn skill_md_must_exist_and_be_valid() {
        refused(
            &zip_of(&[("demo-skill/README.md", 0, b"hi")], false),
            "Invalid skill: SKILL.md not found",
        );
        refused(
            &zip_of(
                &[(
                    "demo-skill/SKILL.md",
                    0,
                    b"---\nname: x\ndescription: y\nfoo: 1\n---\n",
                )],
                false,
            ),
            "Invalid skill: Unexpected key(s) in SKILL.md frontmatter: foo",
        );
        refused(
            &zip_of(
                &[("SKILL.md", 0, b"---\nname: Bad_Name\ndescription: y\n---\n")],
                false,
            ),
            "hyphen-case",
        );
        refused(
            &zip_of(&[("SKILL.md", 0, b"\xff\xfe")], false),
            "not valid UTF-8",
        );
        refused(&zip_of(&[], false), "Skill archive is empty");
        refused(
            &zip_of(&[("__MACOSX/x", 0, b"x")], false),
            "Skill archive is empty",
        );
        refused(b"this is not a zip file", "not a valid ZIP archive");
    }

    #[test]
    fn an_existing_or_taken_name_is_a_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = skill(&[]);
        install_into(dir.path(), &bytes).unwrap();
        let before = tree(dir.path());
        let err = install_into(dir.path(), &bytes).unwrap_err();
        assert!(
            matches!(&err, ArchiveError::Exists(n) if n == "demo-skill"),
            "{err:?}"
        );
        assert_eq!(tree(dir.path()), before);
        let other = tempfile::tempdir().unwrap();
        let err = install(
            &bytes,
            other.path(),
            &|n| n == "demo-skill",
            Limits::default(),
        )
        .unwrap_err();
        assert!(matches!(err, ArchiveError::Exists(_)), "{err:?}");
        assert_eq!(tree(other.path()), Vec::<String>::new());
    }

    #[test]
    fn colliding_members_are_refused() {
        refused(
            &skill(&[
                ("demo-skill/a", 0, b"file"),
                ("demo-skill//a/b", 0, b"under a file"),
            ]),
            "collides with another member",
        );
        refused(
            &skill(&[("demo-skill/a", 0, b"one"), ("demo-skill\\a", 0, b"two")]),
            "collides with another member",
        );
    }

    #[test]
    fn member_names() {
        assert_eq!(member_components("a/./b//c").unwrap(), ["a", "b", "c"]);
        assert_eq!(member_components("a\\b").unwrap(), ["a", "b"]);
        for bad in ["/a", "\\a", "a/../b", "..", "c:x", "a\0b", &"x".repeat(256)] {
            assert!(member_components(bad).is_err(), "{bad:?}");
        }
        assert!(member_components(&"a/".repeat(600)).is_err());
    }

    #[test]
    fn members_are_read_for_previews() {
        let bytes = skill(&[
            ("demo-skill/refs/a.md", 0, b"A"),
            ("demo-skill/link", 0o120_777, b"/etc/passwd"),
            ("demo-skill/big.txt", 0, &[b'b'; 2048][..]),
        ]);
        assert_eq!(
            read_member(&bytes, "SKILL.md", 1 << 20).unwrap(),
            SKILL_MD.as_bytes()
        );
        assert_eq!(
            read_member(&bytes, "demo-skill/refs/a.md", 1 << 20).unwrap(),
            b"A"
        );
        assert_eq!(read_member(&bytes, "refs/a.md", 1 << 20).unwrap(), b"A");
        assert_eq!(
            read_member(&bytes, "link", 1 << 20),
            Err(MemberError::NotFound("link".into()))
        );
        assert_eq!(
            read_member(&bytes, "nope.md", 1 << 20),
            Err(MemberError::NotFound("nope.md".into()))
        );
        assert_eq!(
            read_member(&bytes, "big.txt", 1024),
            Err(MemberError::TooLarge)
        );
        assert!(matches!(
            read_member(&bytes, "../x", 1024),
            Err(MemberError::BadName(_))
        ));
        assert!(matches!(
            read_member(&bytes, "/SKILL.md", 1024),
            Err(MemberError::BadName(_))
        ));
        assert!(matches!(
            read_member(&bytes, "a:b", 1024),
            Err(MemberError::BadName(_))
        ));
        assert!(matches!(
            read_member(b"nope", "SKILL.md", 1024),
            Err(MemberError::BadArchive(_))
        ));
    }
}
