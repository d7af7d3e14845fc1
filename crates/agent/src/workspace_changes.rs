//! Workspace change review (DeerFlow's `workspace_changes`): which files a run created,
//! modified or deleted under the thread's `/mnt/user-data/workspace` and
//! `/mnt/user-data/outputs`, with unified diffs of text files. The lead agent takes a
//! [`Snapshot`] before its loop and compares after it (whatever the run's end); a run that
//! changed something hands one journal row to its run (`workspace_changes`, category
//! `workspace`, content `"N files changed +A -D"`, the result under
//! `metadata.workspace_changes`), which `GET …/runs/{rid}/workspace-changes` serves.
//!
//! Kept from the start, in memory: each file's size, modification time, kind and, for
//! regular files of at most [`MAX_FILE_BYTES_FOR_DIFF`], its SHA-256 and (text files) its
//! text — at most [`READ_BUDGET`] bytes read in all; files past it are compared by size and
//! modification time, and their diff is unavailable (`truncated`). At the end only files
//! whose size, time or kind changed are read again. Not read at all: sensitive-looking names
//! (`.env`, `*secret*`, `*.pem`, … — diff `sensitive`), binary files (by extension or
//! content — `binary`), larger files (`large`) and symlinks (never followed — `symlink`).
//! Tool caches and VCS/build directories (`.git`, `node_modules`, `.tool-results`, …) are
//! skipped, and so are symlinked directories. Limits are DeerFlow's: 2000 files scanned, 200
//! listed, 1 MiB of diffs in all; past them the summary says `truncated`.

use fawn_sandbox::host_fs::{self, Entry, Kind, Meta, Visit};
use fawn_state::JournalEntry;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub const EVENT_TYPE: &str = "workspace_changes";
pub const CATEGORY: &str = "workspace";
/// Where the result sits in the row's metadata.
pub const METADATA_KEY: &str = "workspace_changes";

pub const MAX_FILES: usize = 200;
pub const MAX_SCANNED_FILES: usize = 2000;
pub const MAX_FILE_BYTES_FOR_DIFF: u64 = 256 * 1024;
pub const MAX_TOTAL_DIFF_BYTES: usize = 1024 * 1024;
/// Bytes a scan reads (for hashes and texts) at most.
pub const READ_BUDGET: u64 = 16 * 1024 * 1024;

const SAMPLE_BYTES: usize = 4096;
/// Diff hunks carry this many lines of context (as `difflib.unified_diff`).
const CONTEXT: usize = 3;
/// Beyond this many cells the changed middle of two texts is diffed as one replacement.
const LCS_CELLS: usize = 4_000_000;

const EXCLUDED_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    ".cache",
    ".mcp",
    ".next",
    ".venv",
    ".browser-frames",
    ".tool-results",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
];

const BINARY_EXTENSIONS: &[&str] = &[
    "7z", "avif", "bmp", "class", "db", "dll", "dmg", "doc", "docx", "exe", "gif", "gz", "ico",
    "jar", "jpeg", "jpg", "mov", "mp3", "mp4", "o", "pdf", "png", "pyc", "so", "tar", "webp",
    "xls", "xlsx", "zip",
];

/// Name patterns (`*` wildcards) of files whose content is never read.
const SENSITIVE: &[&str] = &[
    ".env",
    ".env.*",
    "*api_key*",
    "*apikey*",
    "*.key",
    "*.pem",
    "*credential*",
    "*password*",
    "*private_key*",
    "*secret*",
    "*token*",
];

/// The two scanned roots: name, virtual prefix.
const ROOTS: [(&str, &str); 2] = [
    ("workspace", "/mnt/user-data/workspace"),
    ("outputs", "/mnt/user-data/outputs"),
];

#[derive(Debug, Clone, PartialEq)]
struct File {
    root: &'static str,
    size: u64,
    modified: Option<SystemTime>,
    sha256: Option<String>,
    binary: bool,
    sensitive: bool,
    text: Option<String>,
    /// Why there is no text to diff (`binary`, `large`, `sensitive`, `symlink`, or
    /// `truncated` when the read budget ran out).
    reason: Option<&'static str>,
    symlink: Option<Option<String>>,
}

/// The files of a thread's workspace and outputs at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    hosts: Vec<(PathBuf, &'static str, &'static str)>,
    files: BTreeMap<String, File>,
    truncated: bool,
}

fn glob(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || s.len() < first.len() + last.len() || !s.ends_with(last) {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// A path whose name (or a directory's) looks like it holds credentials.
pub fn is_sensitive(virtual_path: &str) -> bool {
    let lower = virtual_path.to_lowercase();
    lower
        .split('/')
        .filter(|p| !p.is_empty())
        .any(|part| SENSITIVE.iter().any(|p| glob(p, part)))
}

fn looks_binary(sample: &[u8]) -> bool {
    if utf16(sample).is_some() {
        return false;
    }
    if sample.contains(&0) {
        return true;
    }
    match std::str::from_utf8(sample) {
        Ok(_) => false,
        // A sequence cut by the sample's end is still text.
        Err(e) => e.error_len().is_some(),
    }
}

/// Text after a UTF-16 byte-order mark, if the bytes have one and decode.
fn utf16(bytes: &[u8]) -> Option<String> {
    let le = match bytes {
        [0xFF, 0xFE, ..] => true,
        [0xFE, 0xFF, ..] => false,
        _ => return None,
    };
    let units: Vec<u16> = bytes[2..]
        .chunks(2)
        .map(|c| {
            let pair = [c[0], c.get(1).copied().unwrap_or(0)];
            if le {
                u16::from_le_bytes(pair)
            } else {
                u16::from_be_bytes(pair)
            }
        })
        .collect();
    String::from_utf16(&units).ok()
}

fn decode(bytes: &[u8]) -> Option<String> {
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    match std::str::from_utf8(body) {
        Ok(s) => Some(s.to_string()),
        Err(_) => utf16(bytes),
    }
}

struct Scan {
    files: BTreeMap<String, File>,
    truncated: bool,
    scanned: usize,
    budget: u64,
}

impl Scan {
    /// Reads one regular file's facts (and text, when wanted and the budget allows).
    fn file(&mut self, root: &'static str, entry: &Entry<'_>, meta: &Meta, virt: &str) -> File {
        let size = meta.len;
        let mut f = File {
            root,
            size,
            modified: meta.modified,
            sha256: None,
            binary: false,
            sensitive: is_sensitive(virt),
            text: None,
            reason: None,
            symlink: None,
        };
        let ext_binary = Path::new(&entry.name)
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| BINARY_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
        if f.sensitive {
            f.reason = Some("sensitive");
        } else if ext_binary {
            f.binary = true;
            f.reason = Some("binary");
        } else if size > MAX_FILE_BYTES_FOR_DIFF {
            f.reason = Some("large");
            f.binary = entry
                .read_head(SAMPLE_BYTES as u64)
                .is_ok_and(|s| looks_binary(&s));
            if f.binary {
                f.reason = Some("binary");
            }
        } else if size > self.budget {
            f.reason = Some("truncated");
        } else if let Ok(bytes) = entry.read(self.budget) {
            self.budget = self.budget.saturating_sub(bytes.len() as u64);
            f.size = bytes.len() as u64;
            f.sha256 = Some(hex::encode(Sha256::digest(&bytes)));
            let head = &bytes[..bytes.len().min(SAMPLE_BYTES)];
            match (!looks_binary(head)).then(|| decode(&bytes)).flatten() {
                Some(text) => f.text = Some(text),
                None => {
                    f.binary = true;
                    f.reason = Some("binary");
                }
            }
        } else {
            f.reason = Some("truncated");
        }
        f
    }

    /// Walks one root ([`host_fs::walk`]: symlinks are listed, never followed). `before`
    /// lets unchanged files (same kind, size and time) be reused without reading them.
    fn root(&mut self, base: &Path, name: &'static str, prefix: &str, before: Option<&Snapshot>) {
        let _ = host_fs::walk(base, Path::new(""), |entry| {
            match entry.kind {
                Kind::Dir => {
                    let dir_name = entry.name.to_string_lossy();
                    return if EXCLUDED_DIRS.contains(&dir_name.as_ref()) {
                        Visit::Skip
                    } else {
                        Visit::Descend
                    };
                }
                Kind::File | Kind::Symlink => {}
                Kind::Other => return Visit::Skip,
            }
            if self.scanned >= MAX_SCANNED_FILES {
                self.truncated = true;
                return Visit::Stop;
            }
            let virt = format!("{prefix}/{}", entry.rel);
            let Ok(meta) = entry.metadata() else {
                return Visit::Skip;
            };
            let file = if entry.kind == Kind::Symlink {
                let target = entry
                    .read_link()
                    .ok()
                    .map(|t| t.to_string_lossy().into_owned());
                File {
                    root: name,
                    size: meta.len,
                    modified: meta.modified,
                    sha256: None,
                    binary: false,
                    sensitive: is_sensitive(&virt),
                    text: None,
                    reason: Some("symlink"),
                    symlink: Some(target),
                }
            } else {
                let known = before.and_then(|b| b.files.get(&virt)).filter(|f| {
                    f.symlink.is_none()
                        && f.size == meta.len
                        && f.modified.is_some()
                        && f.modified == meta.modified
                });
                match known {
                    Some(f) => f.clone(),
                    None => self.file(name, entry, &meta, &virt),
                }
            };
            self.scanned += 1;
            self.files.insert(virt, file);
            Visit::Skip
        });
    }
}

impl Snapshot {
    /// Scans `workspace` and `outputs` (missing directories are empty). Blocking.
    pub fn take(workspace: &Path, outputs: &Path) -> Snapshot {
        let hosts = vec![
            (workspace.to_path_buf(), ROOTS[0].0, ROOTS[0].1),
            (outputs.to_path_buf(), ROOTS[1].0, ROOTS[1].1),
        ];
        Snapshot::scan(hosts, None)
    }

    fn scan(
        hosts: Vec<(PathBuf, &'static str, &'static str)>,
        before: Option<&Snapshot>,
    ) -> Snapshot {
        let mut scan = Scan {
            files: BTreeMap::new(),
            truncated: false,
            scanned: 0,
            budget: READ_BUDGET,
        };
        for (base, name, prefix) in &hosts {
            if scan.truncated {
                break;
            }
            scan.root(base, name, prefix, before);
        }
        Snapshot {
            hosts,
            files: scan.files,
            truncated: scan.truncated,
        }
    }

    /// Scans the same directories again and compares (DeerFlow's result shape:
    /// `{version, summary, files, limits}`); `None` when nothing changed. Blocking.
    pub fn changes(&self) -> Option<Value> {
        let after = Snapshot::scan(self.hosts.clone(), Some(self));
        compare(self, &after)
    }

    /// [`Snapshot::changes`] as the run's journal row.
    pub fn journal_entry(&self) -> Option<JournalEntry> {
        let result = self.changes()?;
        let s = &result["summary"];
        let n = ["created", "modified", "deleted", "symlink_created"]
            .iter()
            .map(|k| s[*k].as_u64().unwrap_or(0))
            .sum::<u64>();
        let content = format!(
            "{n} file{} changed +{} -{}",
            if n == 1 { "" } else { "s" },
            s["additions"].as_u64().unwrap_or(0),
            s["deletions"].as_u64().unwrap_or(0)
        );
        let mut metadata = Map::new();
        metadata.insert(METADATA_KEY.into(), result);
        Some(JournalEntry {
            event_type: EVENT_TYPE.into(),
            category: CATEGORY.into(),
            content: Value::String(content),
            metadata,
        })
    }
}

fn same(a: &File, b: &File) -> bool {
    if a.symlink.is_some() || b.symlink.is_some() {
        return a.symlink == b.symlink && a.size == b.size && a.modified == b.modified;
    }
    match (&a.sha256, &b.sha256) {
        (Some(x), Some(y)) => x == y,
        _ => a.size == b.size && a.modified == b.modified,
    }
}

/// The empty summary (also the route's answer for a run without changes).
pub fn empty_summary() -> Value {
    json!({"created": 0, "modified": 0, "deleted": 0, "symlink_created": 0,
           "additions": 0, "deletions": 0, "truncated": false})
}

pub fn limits() -> Value {
    json!({
        "max_files": MAX_FILES,
        "max_scanned_files": MAX_SCANNED_FILES,
        "max_file_bytes_for_diff": MAX_FILE_BYTES_FOR_DIFF,
        "max_total_diff_bytes": MAX_TOTAL_DIFF_BYTES,
    })
}

fn compare(before: &Snapshot, after: &Snapshot) -> Option<Value> {
    let paths: BTreeSet<&String> = before.files.keys().chain(after.files.keys()).collect();
    let mut counts = [0u64; 4]; // created, modified, deleted, symlink_created
    let (mut additions, mut deletions) = (0usize, 0usize);
    let mut truncated = before.truncated || after.truncated;
    let mut diff_bytes = 0usize;
    let mut files = Vec::new();
    for path in paths {
        let (b, a) = (before.files.get(path), after.files.get(path));
        if let (Some(b), Some(a)) = (b, a)
            && same(b, a)
        {
            continue;
        }
        let was_link = b.is_some_and(|f| f.symlink.is_some());
        let is_link = a.is_some_and(|f| f.symlink.is_some());
        let status = if is_link && !was_link {
            counts[3] += 1;
            "symlink_created"
        } else if b.is_none() {
            counts[0] += 1;
            "created"
        } else if a.is_none() {
            counts[2] += 1;
            "deleted"
        } else {
            counts[1] += 1;
            "modified"
        };
        let reason = ["symlink", "sensitive", "binary", "large", "truncated"]
            .into_iter()
            .find(|r| [b, a].iter().flatten().any(|f| f.reason == Some(*r)));
        let (mut diff, mut diff_truncated, mut reason) = (String::new(), false, reason);
        let (mut adds, mut dels) = (0, 0);
        if reason.is_none()
            && let (Some(old), Some(new)) = (text_of(b), text_of(a))
        {
            let (d, x, y) = unified(path, old, new);
            adds = x;
            dels = y;
            if d.len() > MAX_TOTAL_DIFF_BYTES.saturating_sub(diff_bytes) {
                diff_truncated = true;
                reason = Some("truncated");
            } else {
                diff_bytes += d.len();
                diff = d;
            }
        }
        if reason == Some("truncated") || reason == Some("large") {
            truncated = true;
        }
        additions += adds;
        deletions += dels;
        if files.len() >= MAX_FILES {
            truncated = true;
            continue;
        }
        let Some(sample) = a.or(b) else { continue };
        files.push(json!({
            "path": path,
            "root": sample.root,
            "status": status,
            "binary": sample.binary,
            "sensitive": sample.sensitive,
            "size_before": b.map(|f| f.size),
            "size_after": a.map(|f| f.size),
            "sha256_before": b.and_then(|f| f.sha256.clone()),
            "sha256_after": a.and_then(|f| f.sha256.clone()),
            "diff": diff,
            "diff_truncated": diff_truncated,
            "diff_unavailable_reason": reason,
            "additions": adds,
            "deletions": dels,
            "symlink": sample.symlink.is_some(),
            "symlink_target_before": b.and_then(|f| f.symlink.clone().flatten()),
            "symlink_target_after": a.and_then(|f| f.symlink.clone().flatten()),
        }));
    }
    if counts.iter().all(|c| *c == 0) && additions == 0 && deletions == 0 {
        return None;
    }
    Some(json!({
        "version": 1,
        "summary": {
            "created": counts[0],
            "modified": counts[1],
            "deleted": counts[2],
            "symlink_created": counts[3],
            "additions": additions,
            "deletions": deletions,
            "truncated": truncated,
        },
        "files": files,
        "limits": limits(),
    }))
}

/// A side's text: empty when the file does not exist on that side.
fn text_of(f: Option<&File>) -> Option<&str> {
    f.map_or(Some(""), |f| f.text.as_deref())
}

enum Op {
    Same,
    Del,
    Add,
}

/// The line operations turning `a` into `b`: common ends kept, the middle by longest
/// common subsequence (one replacement when it is too big for that).
fn ops(a: &[&str], b: &[&str]) -> Vec<Op> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut out: Vec<Op> = (0..pre).map(|_| Op::Same).collect();
    if ma.len().saturating_mul(mb.len()) > LCS_CELLS {
        out.extend(ma.iter().map(|_| Op::Del));
        out.extend(mb.iter().map(|_| Op::Add));
    } else {
        let (n, m) = (ma.len(), mb.len());
        // lcs[i][j]: the LCS length of ma[i..] and mb[j..].
        let mut lcs = vec![0u32; (n + 1) * (m + 1)];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i * (m + 1) + j] = if ma[i] == mb[j] {
                    lcs[(i + 1) * (m + 1) + j + 1] + 1
                } else {
                    lcs[(i + 1) * (m + 1) + j].max(lcs[i * (m + 1) + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && ma[i] == mb[j] {
                out.push(Op::Same);
                i += 1;
                j += 1;
            } else if i < n && (j == m || lcs[(i + 1) * (m + 1) + j] >= lcs[i * (m + 1) + j + 1]) {
                out.push(Op::Del);
                i += 1;
            } else {
                out.push(Op::Add);
                j += 1;
            }
        }
    }
    out.extend((0..suf).map(|_| Op::Same));
    out
}

/// `difflib`'s hunk range: `start` (1-based) and `len`, `start` alone for one line.
fn range(start: usize, len: usize) -> String {
    match len {
        1 => format!("{}", start + 1),
        0 => format!("{start},0"),
        _ => format!("{},{len}", start + 1),
    }
}

/// A unified diff (`--- a{path}`, `+++ b{path}`, hunks with 3 lines of context) and its
/// added and deleted line counts; empty when the texts have the same lines.
fn unified(path: &str, old: &str, new: &str) -> (String, usize, usize) {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let ops = ops(&a, &b);
    // Positions (in `ops`) of changes, grouped into hunks when their context overlaps.
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| !matches!(o, Op::Same))
        .map(|(i, _)| i)
        .collect();
    if changed.is_empty() {
        return (String::new(), 0, 0);
    }
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for &i in &changed {
        match groups.last_mut() {
            Some((_, end)) if i <= *end + 2 * CONTEXT + 1 => *end = i,
            _ => groups.push((i, i)),
        }
    }
    // Line numbers in a and b before each op.
    let mut pos = Vec::with_capacity(ops.len() + 1);
    let (mut ia, mut ib) = (0, 0);
    for o in &ops {
        pos.push((ia, ib));
        match o {
            Op::Same => {
                ia += 1;
                ib += 1;
            }
            Op::Del => ia += 1,
            Op::Add => ib += 1,
        }
    }
    pos.push((ia, ib));
    let mut out = vec![format!("--- a{path}"), format!("+++ b{path}")];
    let (mut adds, mut dels) = (0, 0);
    for (first, last) in groups {
        let from = first.saturating_sub(CONTEXT);
        let to = (last + 1 + CONTEXT).min(ops.len());
        let (a0, b0) = pos[from];
        let (a1, b1) = pos[to];
        out.push(format!(
            "@@ -{} +{} @@",
            range(a0, a1 - a0),
            range(b0, b1 - b0)
        ));
        for (k, o) in ops[from..to].iter().enumerate() {
            let (x, y) = pos[from + k];
            match o {
                Op::Same => out.push(format!(" {}", a[x])),
                Op::Del => {
                    dels += 1;
                    out.push(format!("-{}", a[x]));
                }
                Op::Add => {
                    adds += 1;
                    out.push(format!("+{}", b[y]));
                }
            }
        }
    }
    (out.join("\n"), adds, dels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_like_difflib() {
        let (d, a, r) = unified("/x", "a\nb\nc\n", "a\nB\nc\nd\n");
        assert_eq!(d, "--- a/x\n+++ b/x\n@@ -1,3 +1,4 @@\n a\n-b\n+B\n c\n+d");
        assert_eq!((a, r), (2, 1));
        let (d, a, r) = unified("/n", "", "one\n");
        assert_eq!(d, "--- a/n\n+++ b/n\n@@ -0,0 +1 @@\n+one");
        assert_eq!((a, r), (1, 0));
        let old: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let new: String = (1..=20)
            .map(|i| match i {
                2 => "two\n".to_string(),
                19 => "nineteen\n".to_string(),
                i => format!("{i}\n"),
            })
            .collect();
        let (d, _, _) = unified("/f", &old, &new);
        assert_eq!(d.matches("@@ -").count(), 2, "{d}");
        assert!(d.contains("@@ -1,5 +1,5 @@"), "{d}");
        assert!(d.contains("@@ -16,5 +16,5 @@"), "{d}");
        assert_eq!(unified("/s", "a\n", "a").0, "");
    }

    #[test]
    fn sensitive_names() {
        for p in [
            "/w/.env",
            "/w/.env.local",
            "/w/my_secret.txt",
            "/w/certs/a.pem",
            "/w/TOKENS/x",
        ] {
            assert!(is_sensitive(p), "{p}");
        }
        for p in ["/w/notes.md", "/w/env.txt", "/w/keyboard.rs"] {
            assert!(!is_sensitive(p), "{p}");
        }
    }

    #[test]
    fn snapshot_compare() {
        let dir = tempfile::tempdir().unwrap();
        let (ws, out) = (dir.path().join("workspace"), dir.path().join("outputs"));
        std::fs::create_dir_all(ws.join("node_modules")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(ws.join("keep.txt"), "same\n").unwrap();
        std::fs::write(ws.join("edit.txt"), "one\ntwo\n").unwrap();
        std::fs::write(ws.join("gone.txt"), "bye\n").unwrap();
        let before = Snapshot::take(&ws, &out);
        assert!(before.changes().is_none());
        std::fs::write(ws.join("edit.txt"), "one\n2\n").unwrap();
        std::fs::remove_file(ws.join("gone.txt")).unwrap();
        std::fs::write(out.join("report.md"), "# r\n").unwrap();
        std::fs::write(out.join("img.png"), [0u8, 1, 2]).unwrap();
        std::fs::write(ws.join(".env"), "KEY=1\n").unwrap();
        std::fs::write(ws.join("node_modules/x.js"), "x\n").unwrap();
        let e = before.journal_entry().unwrap();
        assert_eq!(e.event_type, EVENT_TYPE);
        assert_eq!(e.content, json!("5 files changed +2 -2"));
        let r = &e.metadata[METADATA_KEY];
        assert_eq!(r["summary"]["created"], 3);
        assert_eq!(r["summary"]["modified"], 1);
        assert_eq!(r["summary"]["deleted"], 1);
        let by: BTreeMap<&str, &Value> = r["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["path"].as_str().unwrap(), f))
            .collect();
        let edit = by["/mnt/user-data/workspace/edit.txt"];
        assert_eq!(edit["status"], "modified");
        assert!(edit["diff"].as_str().unwrap().contains("-two\n+2"));
        assert_eq!(
            by["/mnt/user-data/outputs/img.png"]["diff_unavailable_reason"],
            "binary"
        );
        assert_eq!(
            by["/mnt/user-data/workspace/.env"]["diff_unavailable_reason"],
            "sensitive"
        );
        assert_eq!(
            by["/mnt/user-data/workspace/.env"]["sha256_after"],
            Value::Null
        );
        assert_eq!(by["/mnt/user-data/workspace/gone.txt"]["status"], "deleted");
        assert_eq!(by["/mnt/user-data/outputs/report.md"]["root"], "outputs");
        assert!(!by.contains_key("/mnt/user-data/workspace/node_modules/x.js"));
    }
}
