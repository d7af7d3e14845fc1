//! Virtual paths (`/mnt/user-data/...`, `/mnt/skills/...`, custom mounts): parsing and
//! mapping onto mounts.
//!
//! This module only decides *which* host directory a virtual path belongs to and which
//! relative path inside it is meant. It never touches the filesystem: confinement is the job
//! of `confined`, which opens the relative path beneath the mount's directory handle, so
//! symlinks and `..` are resolved by the kernel and cannot leave the mount.

use crate::{SandboxError, VIRTUAL_OUTPUTS, VIRTUAL_UPLOADS, VIRTUAL_USER_DATA, VIRTUAL_WORKSPACE};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Detail of a refusal for a path outside every allowed root (DeerFlow's wording).
pub fn outside_roots_detail(skills_root: &str) -> String {
    format!(
        "Only paths under {VIRTUAL_USER_DATA}/, {skills_root}/, or configured mount paths are allowed"
    )
}

/// Detail of a refusal for a path with a `..` segment (DeerFlow's wording).
pub const TRAVERSAL_DETAIL: &str = "Access denied: path traversal detected";

/// What a mount is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MountKind {
    /// One of `/mnt/user-data/{workspace,uploads,outputs}`.
    UserData,
    /// An enabled skill under `/mnt/skills`.
    Skill,
    /// A `sandbox.mounts` entry.
    Custom,
}

/// A host directory seen by the agent at `virtual_root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Normalised absolute virtual path, e.g. `/mnt/user-data/workspace`.
    pub virtual_root: String,
    /// The directory every operation on this mount is confined beneath.
    pub host_root: PathBuf,
    /// Where the mount's own directory is, relative to `host_root` (empty: `host_root`
    /// itself). The three user-data mounts share `host_root = user-data` so that a symlink
    /// from the workspace into outputs still resolves, as it does inside the OS sandbox.
    pub prefix: PathBuf,
    pub read_only: bool,
    pub kind: MountKind,
}

impl Mount {
    /// The host directory the agent sees at `virtual_root`.
    pub fn host_dir(&self) -> PathBuf {
        if self.prefix.as_os_str().is_empty() {
            self.host_root.clone()
        } else {
            self.host_root.join(&self.prefix)
        }
    }
}

/// Normalises an absolute virtual path: empty and `.` segments are dropped; a `..` segment,
/// a relative path or a NUL byte is refused. Returns `/a/b` (no trailing slash; `/` for the
/// root).
pub fn normalize(path: &str, skills_root: &str) -> Result<String, SandboxError> {
    if path.contains('\0') {
        return Err(SandboxError::Invalid("path contains a NUL byte".into()));
    }
    if !path.starts_with('/') {
        return Err(SandboxError::PermissionDenied(outside_roots_detail(
            skills_root,
        )));
    }
    let mut out = String::with_capacity(path.len());
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => return Err(SandboxError::PermissionDenied(TRAVERSAL_DETAIL.into())),
            s => {
                out.push('/');
                out.push_str(s);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// `path` equals `root` or lies beneath it (segment-aware: `/a/bc` is not under `/a/b`).
pub fn is_under(path: &str, root: &str) -> bool {
    if root == "/" {
        return path.starts_with('/');
    }
    path == root
        || (path.len() > root.len()
            && path.starts_with(root)
            && path.as_bytes()[root.len()] == b'/')
}

/// Whether an operation reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Where a virtual path leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// A location inside a mount: open `rel` beneath `mount.host_root`.
    Mounted {
        mount: &'a Mount,
        /// Relative to `mount.host_root` (includes `mount.prefix`).
        rel: PathBuf,
    },
    /// A directory that exists only in the virtual layout (`/mnt/user-data`, `/mnt/skills`,
    /// `/mnt/skills/public`, …): listable, never writable.
    VirtualDir,
}

/// Every mount a sandbox has, plus the virtual directories above them.
#[derive(Clone, Debug)]
pub struct MountTable {
    /// Most specific (longest virtual root) first.
    mounts: Vec<Mount>,
    virtual_dirs: BTreeSet<String>,
    skills_root: String,
    /// Virtual roots of skills that exist but are disabled.
    disabled_skills: Vec<String>,
}

impl MountTable {
    pub fn new(mut mounts: Vec<Mount>, skills_root: &str, disabled_skills: Vec<String>) -> Self {
        mounts.sort_by(|a, b| {
            b.virtual_root
                .len()
                .cmp(&a.virtual_root.len())
                .then_with(|| a.virtual_root.cmp(&b.virtual_root))
        });
        let mut virtual_dirs = BTreeSet::new();
        virtual_dirs.insert(VIRTUAL_USER_DATA.to_string());
        virtual_dirs.insert(skills_root.to_string());
        for m in &mounts {
            if m.kind == MountKind::Skill {
                let mut p = parent(&m.virtual_root);
                while let Some(dir) = p {
                    if !is_under(dir, skills_root) || dir == skills_root {
                        break;
                    }
                    virtual_dirs.insert(dir.to_string());
                    p = parent(dir);
                }
            }
        }
        MountTable {
            mounts,
            virtual_dirs,
            skills_root: skills_root.to_string(),
            disabled_skills,
        }
    }

    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    pub fn skills_root(&self) -> &str {
        &self.skills_root
    }

    /// Virtual directories (sorted, parents before children).
    pub fn virtual_dirs(&self) -> impl Iterator<Item = &str> {
        self.virtual_dirs.iter().map(String::as_str)
    }

    /// Maps `path` onto a mount for `access`, returning the normalised virtual path too.
    /// Refusals carry DeerFlow's detail texts (shown by `bash`; file tools show a generic
    /// text).
    pub fn resolve(
        &self,
        path: &str,
        access: Access,
    ) -> Result<(String, Target<'_>), SandboxError> {
        let norm = normalize(path, &self.skills_root)?;
        let in_skills = is_under(&norm, &self.skills_root);
        if in_skills {
            if access == Access::Write {
                return Err(SandboxError::PermissionDenied(format!(
                    "Write access to skills path is not allowed: {norm}"
                )));
            }
            if let Some(d) = self.disabled_skills.iter().find(|d| is_under(&norm, d)) {
                let name = d.rsplit('/').next().unwrap_or(d).to_string();
                return Err(SandboxError::SkillDisabled(name));
            }
        }
        if let Some(mount) = self
            .mounts
            .iter()
            .find(|m| is_under(&norm, &m.virtual_root))
        {
            if access == Access::Write && mount.read_only {
                return Err(SandboxError::PermissionDenied(format!(
                    "Write access to read-only mount is not allowed: {norm}"
                )));
            }
            let rest = norm[mount.virtual_root.len()..].trim_start_matches('/');
            let mut rel = mount.prefix.clone();
            if !rest.is_empty() {
                rel.push(rest);
            }
            return Ok((norm, Target::Mounted { mount, rel }));
        }
        if self.virtual_dirs.contains(&norm) {
            if access == Access::Write {
                return Err(SandboxError::PermissionDenied(format!(
                    "Write access to {norm} is not allowed"
                )));
            }
            return Ok((norm, Target::VirtualDir));
        }
        if in_skills {
            return Err(SandboxError::NotFound(norm));
        }
        if is_under(&norm, VIRTUAL_USER_DATA) {
            return Err(SandboxError::PermissionDenied(format!(
                "Only {VIRTUAL_WORKSPACE}, {VIRTUAL_UPLOADS} and {VIRTUAL_OUTPUTS} are accessible"
            )));
        }
        Err(SandboxError::PermissionDenied(outside_roots_detail(
            &self.skills_root,
        )))
    }

    /// Direct children of the virtual directory `dir`: `(virtual path, Some(mount))` for a
    /// mount root, `(virtual path, None)` for a nested virtual directory. Sorted.
    pub fn virtual_children(&self, dir: &str) -> Vec<(String, Option<&Mount>)> {
        let mut out: Vec<(String, Option<&Mount>)> = Vec::new();
        for m in &self.mounts {
            if parent(&m.virtual_root) == Some(dir) {
                out.push((m.virtual_root.clone(), Some(m)));
            }
        }
        for d in &self.virtual_dirs {
            if parent(d) == Some(dir) && !out.iter().any(|(p, _)| p == d) {
                out.push((d.clone(), None));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// Lexical parent of a normalised virtual path (`None` for `/`).
pub fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// Joins a normalised virtual directory and a relative `/`-separated path.
pub fn join(dir: &str, rel: &str) -> String {
    if rel.is_empty() {
        dir.to_string()
    } else if dir == "/" {
        format!("/{rel}")
    } else {
        format!("{dir}/{rel}")
    }
}

/// Validates a relative sub-path such as `public/deep-research`: `/`-separated, no empty,
/// `.` or `..` segments. The empty string is the root itself.
pub fn valid_subpath(sub: &str) -> bool {
    sub.is_empty()
        || (!sub.contains('\0')
            && sub
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != ".."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> MountTable {
        let ud = PathBuf::from("/h/user-data");
        let mut mounts = vec![];
        for name in ["workspace", "uploads", "outputs"] {
            mounts.push(Mount {
                virtual_root: format!("/mnt/user-data/{name}"),
                host_root: ud.clone(),
                prefix: PathBuf::from(name),
                read_only: false,
                kind: MountKind::UserData,
            });
        }
        mounts.push(Mount {
            virtual_root: "/mnt/skills/public/a".into(),
            host_root: "/s/public/a".into(),
            prefix: PathBuf::new(),
            read_only: true,
            kind: MountKind::Skill,
        });
        mounts.push(Mount {
            virtual_root: "/data".into(),
            host_root: "/srv/data".into(),
            prefix: PathBuf::new(),
            read_only: true,
            kind: MountKind::Custom,
        });
        MountTable::new(mounts, "/mnt/skills", vec!["/mnt/skills/public/off".into()])
    }

    #[test]
    fn normalize_rules() {
        assert_eq!(
            normalize("/mnt//user-data/./workspace/", "/mnt/skills").unwrap(),
            "/mnt/user-data/workspace"
        );
        assert_eq!(normalize("/", "/mnt/skills").unwrap(), "/");
        assert!(
            matches!(normalize("/mnt/user-data/../x", "/mnt/skills"), Err(SandboxError::PermissionDenied(d)) if d == TRAVERSAL_DETAIL)
        );
        assert!(matches!(
            normalize("a/b", "/mnt/skills"),
            Err(SandboxError::PermissionDenied(_))
        ));
        assert!(matches!(
            normalize("/a\0b", "/mnt/skills"),
            Err(SandboxError::Invalid(_))
        ));
    }

    #[test]
    fn segment_boundaries() {
        assert!(is_under(
            "/mnt/user-data/workspace/x",
            "/mnt/user-data/workspace"
        ));
        assert!(is_under(
            "/mnt/user-data/workspace",
            "/mnt/user-data/workspace"
        ));
        assert!(!is_under(
            "/mnt/user-data/workspace2",
            "/mnt/user-data/workspace"
        ));
        assert!(!is_under("/mnt/user-data-backup", "/mnt/user-data"));
    }

    #[test]
    fn resolve_maps_and_refuses() {
        let t = table();
        let (n, tg) = t
            .resolve("/mnt/user-data/workspace/a/b.txt", Access::Write)
            .unwrap();
        assert_eq!(n, "/mnt/user-data/workspace/a/b.txt");
        match tg {
            Target::Mounted { mount, rel } => {
                assert_eq!(mount.host_root, PathBuf::from("/h/user-data"));
                assert_eq!(rel, PathBuf::from("workspace/a/b.txt"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            t.resolve("/mnt/user-data", Access::Read).unwrap().1,
            Target::VirtualDir
        );
        assert!(matches!(
            t.resolve("/mnt/user-data", Access::Write),
            Err(SandboxError::PermissionDenied(_))
        ));
        assert!(matches!(
            t.resolve("/mnt/user-data/other", Access::Read),
            Err(SandboxError::PermissionDenied(_))
        ));
        assert!(matches!(
            t.resolve("/mnt/user-data-backup/x", Access::Read),
            Err(SandboxError::PermissionDenied(_))
        ));
        assert!(matches!(
            t.resolve("/etc/passwd", Access::Read),
            Err(SandboxError::PermissionDenied(_))
        ));
        assert!(
            matches!(t.resolve("/mnt/skills/public/a/SKILL.md", Access::Write), Err(SandboxError::PermissionDenied(d)) if d.contains("skills path"))
        );
        assert!(matches!(
            t.resolve("/mnt/skills/public/a/SKILL.md", Access::Read),
            Ok((_, Target::Mounted { .. }))
        ));
        assert_eq!(
            t.resolve("/mnt/skills/public", Access::Read).unwrap().1,
            Target::VirtualDir
        );
        assert!(matches!(
            t.resolve("/mnt/skills/public/zzz", Access::Read),
            Err(SandboxError::NotFound(_))
        ));
        assert!(
            matches!(t.resolve("/mnt/skills/public/off/x", Access::Read), Err(SandboxError::SkillDisabled(n)) if n == "off")
        );
        assert!(
            matches!(t.resolve("/data/x", Access::Write), Err(SandboxError::PermissionDenied(d)) if d.contains("read-only mount"))
        );
        assert!(t.resolve("/data/x", Access::Read).is_ok());
    }

    #[test]
    fn virtual_children_lists_mounts_and_dirs() {
        let t = table();
        let c: Vec<String> = t
            .virtual_children("/mnt/user-data")
            .into_iter()
            .map(|c| c.0)
            .collect();
        assert_eq!(
            c,
            [
                "/mnt/user-data/outputs",
                "/mnt/user-data/uploads",
                "/mnt/user-data/workspace"
            ]
        );
        let c: Vec<String> = t
            .virtual_children("/mnt/skills")
            .into_iter()
            .map(|c| c.0)
            .collect();
        assert_eq!(c, ["/mnt/skills/public"]);
    }

    #[test]
    fn subpaths() {
        assert!(valid_subpath("public/a"));
        assert!(valid_subpath(""));
        assert!(!valid_subpath("public/../x"));
        assert!(!valid_subpath("/public"));
        assert!(!valid_subpath("public//a"));
    }
}
