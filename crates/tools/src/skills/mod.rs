//! Skills (reference §7): directories with a `SKILL.md` under `skills_dir/public/*` and
//! `skills_dir/custom/*`.
//!
//! * **Discovery** ([`SkillCatalog::scan`] / [`SkillCatalog::load`]): one level deep, sorted
//!   by directory name; a `SKILL.md` deeper down is not a separate skill. Hidden directories
//!   are skipped; symlinked skill directories or `SKILL.md` files, files over 1 MiB,
//!   directory names outside `[A-Za-z0-9._-]` and front matter that fails validation
//!   ([`frontmatter`]) make the skill *invalid*, listed with a reason and never offered.
//! * **Shadowing**: a custom skill with the same `name` as a public one replaces it.
//! * **Enablement**: `extensions_config.json` `skills.<name>.enabled` (default enabled).
//! * **Prompt** ([`SkillCatalog::prompt_section`]): the `<skill_system>` block with
//!   `<available_skills>` (name, description, container location) and `<disabled_skills>`.
//! * **Sandbox** ([`SkillCatalog::sandbox_view`], for `LocalSandboxProvider::set_skills`;
//!   [`SkillCatalog::mounts`] for other providers): the host directories of enabled skills
//!   and where they appear read-only (`/mnt/skills/public/<dir>`); disabled ones are not
//!   mounted.

pub mod archive;
pub mod frontmatter;

pub use frontmatter::{FrontMatter, RequiredSecret, parse_skill_md, split_front_matter};

use fawn_config::{Settings, SkillToggle};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file that makes a directory a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// Largest `SKILL.md` read.
pub const MAX_SKILL_FILE_BYTES: u64 = 1024 * 1024;
/// Default container root of skills.
pub const DEFAULT_CONTAINER_ROOT: &str = "/mnt/skills";

/// Where a skill comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkillCategory {
    /// Shipped with the deployment (`skills/public`).
    Public,
    /// Added by users (`skills/custom`).
    Custom,
}

impl SkillCategory {
    /// The directory name (`public` / `custom`).
    pub fn as_str(self) -> &'static str {
        match self {
            SkillCategory::Public => "public",
            SkillCategory::Custom => "custom",
        }
    }
}

/// A valid skill.
#[derive(Clone, Debug, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    pub allowed_tools: Option<Vec<String>>,
    pub required_secrets: Vec<RequiredSecret>,
    pub category: SkillCategory,
    /// The skill's directory name (its container path segment).
    pub dir_name: String,
    /// Host directory of the skill.
    pub host_dir: PathBuf,
    pub enabled: bool,
}

impl Skill {
    /// `/mnt/skills/<category>/<dir>` for container root `root`.
    pub fn container_dir(&self, root: &str) -> String {
        format!(
            "{}/{}/{}",
            root.trim_end_matches('/'),
            self.category.as_str(),
            self.dir_name
        )
    }

    /// `/mnt/skills/<category>/<dir>/SKILL.md`.
    pub fn container_file(&self, root: &str) -> String {
        format!("{}/{SKILL_FILE}", self.container_dir(root))
    }

    /// Host path of the `SKILL.md`.
    pub fn host_file(&self) -> PathBuf {
        self.host_dir.join(SKILL_FILE)
    }
}

/// A skill directory that could not be used, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSkill {
    pub category: SkillCategory,
    pub dir_name: String,
    pub reason: String,
}

impl std::fmt::Display for InvalidSkill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "skills/{}/{}: {}",
            self.category.as_str(),
            self.dir_name,
            self.reason
        )
    }
}

/// A read-only mount of one enabled skill into the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillMountSpec {
    pub name: String,
    /// Host directory.
    pub host_dir: PathBuf,
    /// Where it appears, e.g. `/mnt/skills/public/csv-peek`.
    pub container_path: String,
}

/// Every skill found under a skills directory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SkillCatalog {
    container_root: String,
    /// Valid, non-shadowed skills: public first, then custom, each sorted by directory.
    skills: Vec<Skill>,
    /// Public skills replaced by a custom one of the same name.
    shadowed: Vec<Skill>,
    invalid: Vec<InvalidSkill>,
}

fn valid_dir_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Escapes text for the XML-ish prompt blocks.
fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl SkillCatalog {
    /// Scans `skills_dir` (blocking file I/O: call from `spawn_blocking`, or use
    /// [`SkillCatalog::load`]). A missing directory is an empty catalog.
    pub fn scan(
        skills_dir: &Path,
        toggles: &BTreeMap<String, SkillToggle>,
        container_root: &str,
    ) -> SkillCatalog {
        let mut found: Vec<Skill> = Vec::new();
        let mut invalid: Vec<InvalidSkill> = Vec::new();
        for category in [SkillCategory::Public, SkillCategory::Custom] {
            let dir = skills_dir.join(category.as_str());
            let mut entries: Vec<(String, PathBuf)> = match std::fs::read_dir(&dir) {
                Ok(rd) => rd
                    .filter_map(Result::ok)
                    .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                    .collect(),
                Err(_) => continue,
            };
            entries.sort();
            for (dir_name, path) in entries {
                if dir_name.starts_with('.') {
                    continue;
                }
                let bad = |reason: String| InvalidSkill {
                    category,
                    dir_name: dir_name.clone(),
                    reason,
                };
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if meta.file_type().is_symlink() {
                    if path.join(SKILL_FILE).exists() {
                        invalid.push(bad("symlinked skill directories are not loaded".into()));
                    }
                    continue;
                }
                if !meta.is_dir() {
                    continue;
                }
                let file = path.join(SKILL_FILE);
                let Ok(fmeta) = std::fs::symlink_metadata(&file) else {
                    continue; // not a skill directory
                };
                if !valid_dir_name(&dir_name) {
                    invalid.push(bad(
                        "directory name must use only letters, digits, '.', '_' and '-'".into(),
                    ));
                    continue;
                }
                if !fmeta.is_file() {
                    invalid.push(bad(format!("{SKILL_FILE} is not a regular file")));
                    continue;
                }
                if fmeta.len() > MAX_SKILL_FILE_BYTES {
                    invalid.push(bad(format!("{SKILL_FILE} is larger than 1 MiB")));
                    continue;
                }
                let bytes = match std::fs::read(&file) {
                    Ok(b) => b,
                    Err(e) => {
                        invalid.push(bad(format!("cannot read {SKILL_FILE}: {}", e.kind())));
                        continue;
                    }
                };
                let Ok(text) = String::from_utf8(bytes) else {
                    invalid.push(bad(format!("{SKILL_FILE} is not valid UTF-8")));
                    continue;
                };
                let fm = match parse_skill_md(&text) {
                    Ok((fm, _body)) => fm,
                    Err(reason) => {
                        invalid.push(bad(reason));
                        continue;
                    }
                };
                if let Some(other) = found
                    .iter()
                    .find(|s| s.category == category && s.name == fm.name)
                {
                    invalid.push(bad(format!(
                        "duplicate skill name '{}' (also skills/{}/{})",
                        fm.name,
                        category.as_str(),
                        other.dir_name
                    )));
                    continue;
                }
                let enabled = toggles.get(&fm.name).map(|t| t.enabled).unwrap_or(true);
                found.push(Skill {
                    name: fm.name,
                    description: fm.description,
                    license: fm.license,
                    allowed_tools: fm.allowed_tools,
                    required_secrets: fm.required_secrets,
                    category,
                    dir_name,
                    host_dir: path,
                    enabled,
                });
            }
        }
        let custom_names: Vec<String> = found
            .iter()
            .filter(|s| s.category == SkillCategory::Custom)
            .map(|s| s.name.clone())
            .collect();
        let (shadowed, skills): (Vec<Skill>, Vec<Skill>) = found
            .into_iter()
            .partition(|s| s.category == SkillCategory::Public && custom_names.contains(&s.name));
        for s in &invalid {
            tracing::warn!(skill = %s, "invalid skill");
        }
        SkillCatalog {
            container_root: container_root.trim_end_matches('/').to_string(),
            skills,
            shadowed,
            invalid,
        }
    }

    /// Scans the skills of `settings` (`skills_dir`, `extensions.skills`,
    /// `skills.container_path`) off the async runtime.
    pub async fn load(settings: &Settings) -> SkillCatalog {
        let dir = settings.skills_dir.clone();
        let toggles = settings.extensions.skills.clone();
        let root = settings.app.skills.container_path.clone();
        let root = if root.trim().is_empty() {
            DEFAULT_CONTAINER_ROOT.to_string()
        } else {
            root
        };
        match tokio::task::spawn_blocking(move || SkillCatalog::scan(&dir, &toggles, &root)).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "skill scan failed");
                SkillCatalog::default()
            }
        }
    }

    /// Container root (`/mnt/skills`).
    pub fn container_root(&self) -> &str {
        if self.container_root.is_empty() {
            DEFAULT_CONTAINER_ROOT
        } else {
            &self.container_root
        }
    }

    /// Every valid skill (enabled or not), shadowed public skills excluded.
    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    /// Public skills hidden by a custom skill of the same name.
    pub fn shadowed(&self) -> &[Skill] {
        &self.shadowed
    }

    /// Skill directories that could not be used.
    pub fn invalid(&self) -> &[InvalidSkill] {
        &self.invalid
    }

    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    pub fn enabled(&self) -> impl Iterator<Item = &Skill> {
        self.skills.iter().filter(|s| s.enabled)
    }

    pub fn disabled(&self) -> impl Iterator<Item = &Skill> {
        self.skills.iter().filter(|s| !s.enabled)
    }

    /// Enabled skills an agent may use: all of them for `None`, those named in the list
    /// for `Some` (`Some(&[])`: none), as a custom agent's `skills` setting says.
    pub fn visible(&self, allowlist: Option<&[String]>) -> Vec<&Skill> {
        self.enabled()
            .filter(|s| allowlist.is_none_or(|names| names.iter().any(|n| n == &s.name)))
            .collect()
    }

    /// The `<skill_system>` block of the system prompt, or `""` when there is nothing to say.
    /// Deterministic for a given catalog (the prompt prefix stays cacheable).
    pub fn prompt_section(&self, allowlist: Option<&[String]>) -> String {
        let visible = self.visible(allowlist);
        let disabled: Vec<&Skill> = self.disabled().collect();
        if visible.is_empty() && disabled.is_empty() {
            return String::new();
        }
        let root = self.container_root();
        let mut s = String::from("<skill_system>\n");
        s.push_str(&format!(
            "Skills are ready-made instructions for particular kinds of work, sometimes with \
scripts, templates or reference files next to them. They are mounted read-only under {root}.\n\
\n\
How to use them:\n\
1. Before you start a task, look for a skill below whose description matches it.\n\
2. If one matches, read its SKILL.md at the given location with read_file before doing \
anything else, and follow it.\n\
3. Files a skill mentions are relative to its directory; read them only when the \
instructions call for them.\n\
4. Never write into {root}; put your own files under /mnt/user-data.\n"
        ));
        if !visible.is_empty() {
            s.push_str("\n<available_skills>\n");
            for sk in &visible {
                let origin = match sk.category {
                    SkillCategory::Public => "built-in",
                    SkillCategory::Custom => "custom",
                };
                s.push_str(&format!(
                    "  <skill>\n    <name>{}</name>\n    <description>{} [{origin}]</description>\n    <location>{}</location>\n  </skill>\n",
                    xml_escape(&sk.name),
                    xml_escape(&sk.description),
                    xml_escape(&sk.container_file(root)),
                ));
            }
            s.push_str("</available_skills>\n");
        }
        if !disabled.is_empty() {
            s.push_str("\n<disabled_skills>\n");
            s.push_str(
                "These skills are installed but switched off. Do not use them or open their \
files; if one would help, tell the user it can be enabled in settings.\n",
            );
            for sk in &disabled {
                s.push_str(&format!("- {}\n", xml_escape(&sk.name)));
            }
            s.push_str("</disabled_skills>\n");
        }
        s.push_str("</skill_system>");
        s
    }

    /// Read-only mounts for the sandbox: every enabled skill's host directory at
    /// `<root>/<category>/<dir>`. Disabled skills are not mounted.
    pub fn mounts(&self) -> Vec<SkillMountSpec> {
        let root = self.container_root();
        self.enabled()
            .map(|s| SkillMountSpec {
                name: s.name.clone(),
                host_dir: s.host_dir.clone(),
                container_path: s.container_dir(root),
            })
            .collect()
    }

    /// The hand-off to the sandbox: what `/mnt/skills` shows. Pass it to
    /// `LocalSandboxProvider::set_skills` after (re)loading the catalog: enabled skills are
    /// mounted read-only at `<root>/<category>/<dir>`, disabled ones answer "Skill 'x' is
    /// disabled", shadowed and invalid ones are absent.
    pub fn sandbox_view(&self) -> fawn_sandbox::SkillsView {
        let enabled = self
            .enabled()
            .map(|s| fawn_sandbox::SkillMount {
                subpath: format!("{}/{}", s.category.as_str(), s.dir_name),
                host_dir: std::path::absolute(&s.host_dir).unwrap_or_else(|_| s.host_dir.clone()),
            })
            .collect();
        let disabled = self
            .disabled()
            .map(|s| format!("{}/{}", s.category.as_str(), s.dir_name))
            .collect();
        fawn_sandbox::SkillsView { enabled, disabled }
    }

    /// Container directories of disabled skills (for tools that must refuse them).
    pub fn disabled_container_dirs(&self) -> Vec<String> {
        let root = self.container_root();
        self.disabled().map(|s| s.container_dir(root)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names() {
        assert!(valid_dir_name("csv-peek_2.x"));
        assert!(!valid_dir_name("a b"));
        assert!(!valid_dir_name("a\nb"));
        assert!(!valid_dir_name(""));
    }

    #[test]
    fn escape() {
        assert_eq!(xml_escape("a & <b>"), "a &amp; &lt;b&gt;");
    }
}
