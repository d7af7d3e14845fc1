//! `ls`, `glob` and `grep` over one mount, walking directory handles (see `confined`): never
//! following a symlinked directory, reporting a symlink only when it resolves beneath the
//! mount, and searching file contents through handles opened without following symlinks.
//! Patterns use ripgrep's crates (`globset`, `grep-regex`, `grep-searcher`).
//!
//! Blocking; callers run these in `spawn_blocking`.

use crate::confined::{self, FsError, FsResult};
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, SearcherBuilder, sinks};
use rustix::fs::FileType;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Names DeerFlow leaves out of listings and searches (VCS dirs, dependency and build
/// trees, caches, editor and OS droppings, logs and temp files).
const IGNORED_NAMES: &[&str] = &[
    ".git",
    ".svn",
    ".hg",
    ".bzr",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    ".env",
    "env",
    ".tox",
    ".nox",
    ".eggs",
    "site-packages",
    "dist",
    "build",
    ".next",
    ".nuxt",
    ".output",
    ".turbo",
    "target",
    "out",
    ".idea",
    ".vscode",
    ".project",
    ".classpath",
    ".settings",
    ".DS_Store",
    "Thumbs.db",
    "desktop.ini",
    ".cache",
    "logs",
    ".coverage",
    "coverage",
    ".nyc_output",
    "htmlcov",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
];
const IGNORED_SUFFIXES: &[&str] = &[
    ".egg-info",
    ".swp",
    ".swo",
    "~",
    ".lnk",
    ".log",
    ".tmp",
    ".temp",
    ".bak",
    ".cache",
];

/// Whether a directory entry is hidden from listings and searches.
pub(crate) fn ignored(name: &str) -> bool {
    IGNORED_NAMES.contains(&name)
        || IGNORED_SUFFIXES.iter().any(|s| name.ends_with(s))
        || (name.starts_with(".upload-") && name.ends_with(".part"))
}

/// Files larger than this are not searched by grep.
pub(crate) const GREP_MAX_FILE_BYTES: u64 = 1_000_000;
/// Lines longer than this (characters) are skipped by grep.
const GREP_MAX_LINE_CHARS: usize = 2000;
/// A reported grep line is cut to this many characters.
const GREP_LINE_CHARS: usize = 200;
/// A walk stops (reporting truncation) after visiting this many entries.
pub(crate) const WALK_MAX_ENTRIES: usize = 200_000;
/// … or below this depth.
const WALK_MAX_DEPTH: usize = 64;
/// Entries read from one directory at most.
const DIR_MAX_ENTRIES: usize = 100_000;

/// A walk over one mount: handles plus the path of the start directory relative to the
/// mount's root (to check symlinks against the root, not just the start).
pub(crate) struct Walk {
    root: OwnedFd,
    start_rel: PathBuf,
    /// Prepended (with `/`) to relative paths before pattern matching, when the walk
    /// covers one mount below the directory the pattern is relative to.
    prefix: String,
    visited: usize,
    pub truncated: bool,
}

impl Walk {
    /// Opens the start directory `start_rel` beneath `host_root`.
    pub fn open(host_root: &Path, start_rel: &Path, prefix: &str) -> FsResult<(Walk, OwnedFd)> {
        let root = confined::open_root(host_root)?;
        let start = confined::open_beneath(
            root.as_fd(),
            start_rel,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )?;
        Ok((
            Walk {
                root,
                start_rel: start_rel.to_path_buf(),
                prefix: prefix.to_string(),
                visited: 0,
                truncated: false,
            },
            start,
        ))
    }

    /// `rel` as the pattern sees it.
    fn full<'a>(&self, rel: &'a str) -> std::borrow::Cow<'a, str> {
        if self.prefix.is_empty() {
            std::borrow::Cow::Borrowed(rel)
        } else {
            std::borrow::Cow::Owned(format!("{}/{rel}", self.prefix))
        }
    }

    fn symlink_kind(&self, rel: &str) -> Option<bool> {
        confined::symlink_target_kind(self.root.as_fd(), &self.start_rel.join(rel))
    }

    /// Entries of `dir` that are not ignored, with symlinks resolved to `Link(is_dir)` or
    /// dropped when they leave the mount.
    fn entries(
        &mut self,
        dir: BorrowedFd<'_>,
        rel_dir: &str,
    ) -> Vec<(String, std::ffi::OsString, Kind)> {
        let Ok(entries) = confined::read_entries(dir, DIR_MAX_ENTRIES) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries {
            if self.visited >= WALK_MAX_ENTRIES {
                self.truncated = true;
                break;
            }
            self.visited += 1;
            let name = e.display_name();
            if ignored(&name) {
                continue;
            }
            let rel = if rel_dir.is_empty() {
                name.clone()
            } else {
                format!("{rel_dir}/{name}")
            };
            let kind = match e.kind {
                FileType::Directory => Kind::Dir,
                FileType::RegularFile => Kind::File,
                FileType::Symlink => match self.symlink_kind(&rel) {
                    Some(true) => Kind::LinkDir,
                    Some(false) => Kind::LinkFile,
                    None => continue,
                },
                _ => Kind::Other,
            };
            out.push((rel, e.name, kind));
        }
        out
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    LinkDir,
    LinkFile,
    Other,
}

impl Kind {
    fn is_dir(self) -> bool {
        matches!(self, Kind::Dir | Kind::LinkDir)
    }
}

/// Entries under `start_rel` up to `max_depth` levels: `(relative path, is_dir)`, sorted.
pub(crate) fn list(
    host_root: &Path,
    start_rel: &Path,
    max_depth: usize,
    limit: usize,
) -> FsResult<Vec<(String, bool)>> {
    let (mut walk, start) = Walk::open(host_root, start_rel, "")?;
    let mut out = Vec::new();
    list_rec(&mut walk, start.as_fd(), "", 1, max_depth, limit, &mut out);
    out.sort();
    Ok(out)
}

fn list_rec(
    walk: &mut Walk,
    dir: BorrowedFd<'_>,
    rel_dir: &str,
    depth: usize,
    max_depth: usize,
    limit: usize,
    out: &mut Vec<(String, bool)>,
) {
    if depth > max_depth {
        return;
    }
    for (rel, name, kind) in walk.entries(dir, rel_dir) {
        if out.len() >= limit {
            walk.truncated = true;
            return;
        }
        out.push((rel.clone(), kind.is_dir()));
        if kind == Kind::Dir
            && depth < max_depth
            && let Ok(sub) = confined::open_subdir(dir, &name)
        {
            list_rec(walk, sub.as_fd(), &rel, depth + 1, max_depth, limit, out);
        }
    }
}

/// DeerFlow's path matching: a pattern without `/` matches the file name at any depth; any
/// other pattern is matched against the whole path relative to the search root, where `**`
/// spans zero or more directories and `*` stays within one.
pub(crate) struct PathPattern {
    matcher: GlobMatcher,
    basename_only: bool,
}

impl PathPattern {
    pub fn new(pattern: &str) -> Result<PathPattern, String> {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .backslash_escape(false)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(PathPattern {
            matcher: glob.compile_matcher(),
            basename_only: !pattern.contains('/'),
        })
    }

    pub fn matches(&self, rel: &str) -> bool {
        if self.basename_only {
            let base = rel.rsplit('/').next().unwrap_or(rel);
            self.matcher.is_match(base)
        } else {
            self.matcher.is_match(rel)
        }
    }
}

/// Paths under `start_rel` matching `pattern`, in walk order (per directory: matching
/// subdirectories if wanted, then files, then the subdirectories' contents). Collects one
/// past `max_results` to tell "exactly max" from "more".
pub(crate) fn glob(
    host_root: &Path,
    start_rel: &Path,
    prefix: &str,
    pattern: &PathPattern,
    include_dirs: bool,
    max_results: usize,
) -> FsResult<(Vec<String>, bool)> {
    let (mut walk, start) = Walk::open(host_root, start_rel, prefix)?;
    let mut out = Vec::new();
    glob_rec(
        &mut walk,
        start.as_fd(),
        "",
        1,
        pattern,
        include_dirs,
        max_results,
        &mut out,
    );
    let truncated = out.len() > max_results || walk.truncated;
    out.truncate(max_results);
    Ok((out, truncated))
}

#[allow(clippy::too_many_arguments)]
fn glob_rec(
    walk: &mut Walk,
    dir: BorrowedFd<'_>,
    rel_dir: &str,
    depth: usize,
    pattern: &PathPattern,
    include_dirs: bool,
    max_results: usize,
    out: &mut Vec<String>,
) -> bool {
    if depth > WALK_MAX_DEPTH {
        walk.truncated = true;
        return true;
    }
    let entries = walk.entries(dir, rel_dir);
    if include_dirs {
        for (rel, _, _) in entries.iter().filter(|e| e.2.is_dir()) {
            if pattern.matches(&walk.full(rel)) {
                out.push(rel.clone());
                if out.len() > max_results {
                    return false;
                }
            }
        }
    }
    for (rel, _, _) in entries.iter().filter(|e| !e.2.is_dir()) {
        if pattern.matches(&walk.full(rel)) {
            out.push(rel.clone());
            if out.len() > max_results {
                return false;
            }
        }
    }
    for (rel, name, kind) in &entries {
        if *kind == Kind::Dir
            && let Ok(sub) = confined::open_subdir(dir, name)
            && !glob_rec(
                walk,
                sub.as_fd(),
                rel,
                depth + 1,
                pattern,
                include_dirs,
                max_results,
                out,
            )
        {
            return false;
        }
    }
    true
}

/// A compiled grep query.
pub(crate) struct GrepQuery {
    matcher: RegexMatcher,
    glob: Option<PathPattern>,
}

impl GrepQuery {
    pub fn new(
        pattern: &str,
        literal: bool,
        case_sensitive: bool,
        glob: Option<&str>,
    ) -> Result<GrepQuery, String> {
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(!case_sensitive)
            .fixed_strings(literal)
            .line_terminator(Some(b'\n'))
            .size_limit(10 * (1 << 20))
            .dfa_size_limit(10 * (1 << 20))
            .build(pattern)
            .map_err(|e| format!("Invalid regex pattern: {e}"))?;
        let glob = match glob {
            Some(g) => Some(PathPattern::new(g).map_err(|e| format!("Invalid glob pattern: {e}"))?),
            None => None,
        };
        Ok(GrepQuery { matcher, glob })
    }
}

/// One hit, path relative to the search root.
pub(crate) struct Hit {
    pub rel: String,
    pub line_number: u64,
    pub line: String,
}

fn summarize(line: &str) -> String {
    let line = line.trim_end_matches(['\n', '\r']);
    if line.chars().count() <= GREP_LINE_CHARS {
        return line.to_string();
    }
    let cut: String = line.chars().take(GREP_LINE_CHARS - 3).collect();
    format!("{cut}...")
}

/// Searches one open regular file; returns false once `out` holds more than `max_results`.
fn grep_fd(fd: OwnedFd, rel: &str, q: &GrepQuery, max_results: usize, out: &mut Vec<Hit>) -> bool {
    let Ok((_, size, _)) = confined::file_type(fd.as_fd()) else {
        return true;
    };
    if size > GREP_MAX_FILE_BYTES {
        return true;
    }
    let mut file = std::fs::File::from(fd);
    let mut data = Vec::with_capacity(size as usize);
    if (&mut file)
        .take(GREP_MAX_FILE_BYTES + 1)
        .read_to_end(&mut data)
        .is_err()
        || data.len() as u64 > GREP_MAX_FILE_BYTES
    {
        return true;
    }
    // DeerFlow's binary test: a NUL byte in the first 8 KiB.
    if data[..data.len().min(8192)].contains(&0) {
        return true;
    }
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::none())
        .build();
    let mut keep_going = true;
    let _ = searcher.search_slice(
        &q.matcher,
        &data,
        sinks::Lossy(|lnum, line| {
            if line.chars().count() > GREP_MAX_LINE_CHARS {
                return Ok(true);
            }
            out.push(Hit {
                rel: rel.to_string(),
                line_number: lnum,
                line: summarize(line),
            });
            if out.len() > max_results {
                keep_going = false;
                return Ok(false);
            }
            Ok(true)
        }),
    );
    keep_going
}

/// Greps the regular file `rel` beneath `host_root` (symlinks beneath allowed). `name` is
/// what the glob filter sees.
pub(crate) fn grep_file(
    host_root: &Path,
    rel: &Path,
    name: &str,
    q: &GrepQuery,
    max_results: usize,
) -> FsResult<(Vec<Hit>, bool)> {
    let root = confined::open_root(host_root)?;
    let fd = confined::open_beneath(
        root.as_fd(),
        rel,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY,
        rustix::fs::Mode::empty(),
    )?;
    let (ft, _, _) = confined::file_type(fd.as_fd())?;
    if ft == FileType::Directory {
        return Err(FsError::IsDir);
    }
    let mut out = Vec::new();
    if ft == FileType::RegularFile && q.glob.as_ref().is_none_or(|g| g.matches(name)) {
        grep_fd(fd, "", q, max_results, &mut out);
    }
    let truncated = out.len() > max_results;
    out.truncate(max_results);
    Ok((out, truncated))
}

/// Greps every regular file under the directory `start_rel`, skipping symlinks.
pub(crate) fn grep_dir(
    host_root: &Path,
    start_rel: &Path,
    prefix: &str,
    q: &GrepQuery,
    max_results: usize,
) -> FsResult<(Vec<Hit>, bool)> {
    let (mut walk, start) = Walk::open(host_root, start_rel, prefix)?;
    let mut out = Vec::new();
    grep_rec(&mut walk, start.as_fd(), "", 1, q, max_results, &mut out);
    let truncated = out.len() > max_results || walk.truncated;
    out.truncate(max_results);
    Ok((out, truncated))
}

fn grep_rec(
    walk: &mut Walk,
    dir: BorrowedFd<'_>,
    rel_dir: &str,
    depth: usize,
    q: &GrepQuery,
    max_results: usize,
    out: &mut Vec<Hit>,
) -> bool {
    if depth > WALK_MAX_DEPTH {
        walk.truncated = true;
        return true;
    }
    let entries = walk.entries(dir, rel_dir);
    for (rel, name, kind) in &entries {
        if *kind != Kind::File || q.glob.as_ref().is_some_and(|g| !g.matches(&walk.full(rel))) {
            continue;
        }
        if let Ok(fd) = confined::open_file_in(dir, name)
            && !grep_fd(fd, rel, q, max_results, out)
        {
            return false;
        }
    }
    for (rel, name, kind) in &entries {
        if *kind == Kind::Dir
            && let Ok(sub) = confined::open_subdir(dir, name)
            && !grep_rec(walk, sub.as_fd(), rel, depth + 1, q, max_results, out)
        {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_semantics() {
        let p = PathPattern::new("*.py").unwrap();
        assert!(p.matches("a.py") && p.matches("x/y/a.py") && !p.matches("a.pyc"));
        let p = PathPattern::new("src/**/*.py").unwrap();
        assert!(p.matches("src/top.py") && p.matches("src/a/b/c.py") && !p.matches("lib/a.py"));
        let p = PathPattern::new("src/*.py").unwrap();
        assert!(p.matches("src/a.py") && !p.matches("src/a/b.py"));
        assert!(PathPattern::new("[").is_err());
    }

    #[test]
    fn ignore_rules() {
        for n in [
            "node_modules",
            ".git",
            "x.log",
            "a~",
            ".upload-1.part",
            "pkg.egg-info",
        ] {
            assert!(ignored(n), "{n}");
        }
        for n in ["src", "main.rs", ".gitignore", "logfile"] {
            assert!(!ignored(n), "{n}");
        }
    }

    #[test]
    fn walks_do_not_follow_escaping_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "needle secret").unwrap();
        std::fs::write(root.join("sub/a.txt"), "needle one\nother\n").unwrap();
        std::fs::write(root.join("b.txt"), "Needle two\n").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("leak.txt")).unwrap();
        std::os::unix::fs::symlink("sub", root.join("inner")).unwrap();

        let l = list(&root, Path::new(""), 2, 1000).unwrap();
        let names: Vec<&str> = l.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(names, ["b.txt", "inner", "sub", "sub/a.txt"]);
        assert!(l.iter().any(|e| e.0 == "inner" && e.1));

        let p = PathPattern::new("**/*.txt").unwrap();
        let (g, t) = glob(&root, Path::new(""), "", &p, false, 100).unwrap();
        assert_eq!(g, ["b.txt", "sub/a.txt"]);
        assert!(!t);
        let (g, t) = glob(&root, Path::new(""), "", &p, false, 1).unwrap();
        assert_eq!(g.len(), 1);
        assert!(t);

        let q = GrepQuery::new("needle", false, false, None).unwrap();
        let (hits, _) = grep_dir(&root, Path::new(""), "", &q, 100).unwrap();
        let got: Vec<(String, u64)> = hits
            .iter()
            .map(|h| (h.rel.clone(), h.line_number))
            .collect();
        assert_eq!(
            got,
            [("b.txt".to_string(), 1), ("sub/a.txt".to_string(), 1)]
        );
        assert!(hits.iter().all(|h| !h.line.contains("secret")));
        let q = GrepQuery::new("needle", false, true, None).unwrap();
        let (hits, _) = grep_dir(&root, Path::new(""), "", &q, 100).unwrap();
        assert_eq!(hits.len(), 1);
        assert!(matches!(
            grep_file(&root, Path::new("leak.txt"), "leak.txt", &q, 10),
            Err(FsError::Denied(_))
        ));
        assert!(
            GrepQuery::new("(", false, false, None)
                .err()
                .unwrap()
                .starts_with("Invalid regex pattern")
        );
    }
}
