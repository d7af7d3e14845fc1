//! Artifact delivery (DeerFlow's `run.delivery` verdict): a lead-agent run that creates or
//! changes files under `/mnt/user-data/outputs` must show at least one of them to the user
//! with `present_files`; otherwise it ends as an error ("Artifact delivery incomplete: …"),
//! as DeerFlow ends it. Its messages and checkpoints stay: only the run's status says the
//! deliverable was never handed over.
//!
//! What counts as produced: regular files under the outputs directory that are new or whose
//! size or modification time changed during the run. Hidden entries (`.tool-results/`,
//! dotfiles) are process files, not deliverables, and are skipped; so are symlinks.

use fawn_sandbox::host_fs::{self, Kind, Visit};
use fawn_state::{Message, MessageKind, ThreadState};
use fawn_tools::builtins::normalize_presented_path;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::SystemTime;

/// The run's error message when a produced output was never presented.
pub const DELIVERY_INCOMPLETE: &str =
    "Artifact delivery incomplete: no produced output artifact was presented";

/// The outputs directory as the model sees it.
const OUTPUTS: &str = "/mnt/user-data/outputs";

/// Files the snapshot looks at, at most (a bigger tree is not checked).
const MAX_FILES: usize = 10_000;

/// Regular files under the outputs directory: virtual path → (size, modified).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Snapshot {
    files: HashMap<String, (u64, Option<SystemTime>)>,
    complete: bool,
}

impl Snapshot {
    /// Reads the tree under `outputs` (missing → empty), through
    /// [`fawn_sandbox::host_fs::walk`]: symlinks are never followed.
    pub fn take(outputs: &Path) -> Snapshot {
        let mut s = Snapshot {
            files: HashMap::new(),
            complete: true,
        };
        let _ = host_fs::walk(outputs, Path::new(""), |entry| {
            if entry.name.as_encoded_bytes().starts_with(b".") {
                return Visit::Skip;
            }
            match entry.kind {
                Kind::Dir => Visit::Descend,
                Kind::File => {
                    if s.files.len() >= MAX_FILES {
                        s.complete = false;
                        return Visit::Stop;
                    }
                    let meta = entry.metadata().ok();
                    let size = meta.map_or(0, |m| m.len);
                    let modified = meta.and_then(|m| m.modified);
                    s.files
                        .insert(format!("{OUTPUTS}/{}", entry.rel), (size, modified));
                    Visit::Skip
                }
                _ => Visit::Skip,
            }
        });
        s
    }

    /// The files of `after` that are new or changed since `self`, sorted.
    pub fn produced(&self, after: &Snapshot) -> Vec<String> {
        if !self.complete || !after.complete {
            return Vec::new();
        }
        let mut out: Vec<String> = after
            .files
            .iter()
            .filter(|(p, v)| self.files.get(*p) != Some(*v))
            .map(|(p, _)| p.clone())
            .collect();
        out.sort();
        out
    }
}

/// Paths the run presented: the `filepaths` of its successful `present_files` calls (calls
/// of messages not in `before_ids`), as virtual paths under the outputs directory (normalised
/// as `present_files` does; `host_outputs` is that directory on the host).
pub fn presented(
    state: &ThreadState,
    before_ids: &HashSet<String>,
    host_outputs: &Path,
) -> Vec<String> {
    let answered_ok: HashSet<&str> = state
        .messages
        .iter()
        .filter(|m| m.kind == MessageKind::Tool && m.status.as_deref() != Some("error"))
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    let new_ai = state.messages.iter().filter(|m: &&Message| {
        m.kind == MessageKind::Ai && m.id.as_ref().is_none_or(|id| !before_ids.contains(id))
    });
    let mut out = Vec::new();
    for m in new_ai {
        for call in m.tool_calls.iter().filter(|c| c.name == "present_files") {
            if !call
                .id
                .as_deref()
                .is_some_and(|id| answered_ok.contains(id))
            {
                continue;
            }
            let Some(Value::Array(paths)) = call.args.get("filepaths") else {
                continue;
            };
            out.extend(
                paths
                    .iter()
                    .filter_map(Value::as_str)
                    .filter_map(|p| normalize_presented_path(p, host_outputs).ok()),
            );
        }
    }
    out
}

/// `None` when the run delivered (or produced nothing); the error message otherwise.
pub fn verdict(produced: &[String], presented: &[String]) -> Option<&'static str> {
    if produced.is_empty() {
        return None;
    }
    let covers = |shown: &str, made: &str| {
        let shown = shown.trim_end_matches('/');
        !shown.is_empty()
            && (made == shown
                || made
                    .strip_prefix(shown)
                    .is_some_and(|rest| rest.starts_with('/')))
    };
    let delivered = produced
        .iter()
        .any(|made| presented.iter().any(|shown| covers(shown, made)));
    (!delivered).then_some(DELIVERY_INCOMPLETE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produced_files_are_new_or_changed_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        std::fs::write(out.join("old.md"), "a").unwrap();
        std::fs::write(out.join("same.md"), "a").unwrap();
        let before = Snapshot::take(out);
        std::fs::write(out.join("old.md"), "ab").unwrap();
        std::fs::create_dir_all(out.join("charts")).unwrap();
        std::fs::write(out.join("charts/c.png"), "x").unwrap();
        std::fs::create_dir_all(out.join(".tool-results")).unwrap();
        std::fs::write(out.join(".tool-results/r.txt"), "x").unwrap();
        std::fs::write(out.join(".hidden"), "x").unwrap();
        std::os::unix::fs::symlink(out.join("same.md"), out.join("link.md")).unwrap();
        let after = Snapshot::take(out);
        assert_eq!(
            before.produced(&after),
            [
                "/mnt/user-data/outputs/charts/c.png",
                "/mnt/user-data/outputs/old.md"
            ]
        );
        assert!(Snapshot::take(&out.join("missing")).files.is_empty());
    }

    #[test]
    fn a_presented_file_or_its_directory_delivers() {
        let made = vec!["/mnt/user-data/outputs/charts/c.png".to_string()];
        assert_eq!(verdict(&[], &[]), None);
        assert_eq!(verdict(&made, &[]), Some(DELIVERY_INCOMPLETE));
        for shown in [
            "/mnt/user-data/outputs/charts/c.png",
            "/mnt/user-data/outputs/charts",
            "/mnt/user-data/outputs/charts/",
        ] {
            assert_eq!(verdict(&made, &[shown.to_string()]), None, "{shown}");
        }
        for shown in [
            "/mnt/user-data/outputs/chart",
            "/mnt/user-data/outputs/other.md",
        ] {
            assert_eq!(
                verdict(&made, &[shown.to_string()]),
                Some(DELIVERY_INCOMPLETE),
                "{shown}"
            );
        }
    }
}
