//! Skill discovery, validation, toggles, shadowing, prompt section and mounts.

use fawn_config::{Settings, SkillToggle};
use fawn_tools::skills::{SkillCatalog, SkillCategory};
use std::collections::BTreeMap;
use std::path::Path;

fn skill(root: &Path, category: &str, dir: &str, front_matter: &str) {
    let d = root.join(category).join(dir);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("SKILL.md"),
        format!("---\n{front_matter}\n---\n\n# {dir}\n\nInstructions.\n"),
    )
    .unwrap();
}

fn toggles(pairs: &[(&str, bool)]) -> BTreeMap<String, SkillToggle> {
    pairs
        .iter()
        .map(|(n, e)| (n.to_string(), SkillToggle { enabled: *e }))
        .collect()
}

fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    skill(
        r,
        "public",
        "deep-research",
        "name: deep-research\ndescription: Research a topic in depth & cite sources.",
    );
    skill(
        r,
        "public",
        "charts",
        "name: charts\ndescription: Make charts.",
    );
    skill(
        r,
        "public",
        "slides",
        "name: slides\ndescription: Public slides.",
    );
    skill(
        r,
        "custom",
        "my-slides",
        "name: slides\ndescription: Our own slides.\nallowed-tools: [bash]",
    );
    skill(
        r,
        "public",
        "bad-key",
        "name: bad-key\ndescription: x\nfoo: 1",
    );
    skill(r, "public", "bad-name", "name: Bad_Name\ndescription: x");
    skill(
        r,
        "public",
        "long-name",
        &format!("name: {}\ndescription: x", "a".repeat(65)),
    );
    skill(
        r,
        "public",
        "angle",
        "name: angle\ndescription: use <script> here",
    );
    skill(
        r,
        "public",
        "dup",
        "name: charts\ndescription: same name again",
    );
    // Not skills: a plain file, a hidden dir, a dir without SKILL.md, a nested SKILL.md.
    std::fs::write(r.join("public").join("README.md"), "hi").unwrap();
    skill(r, "public", ".hidden", "name: hidden\ndescription: x");
    std::fs::create_dir_all(r.join("public").join("empty")).unwrap();
    skill(
        &r.join("public").join("charts"),
        "nested",
        "inner",
        "name: inner\ndescription: x",
    );
    dir
}

#[test]
fn discovery_validation_and_shadowing() {
    let dir = fixture();
    let cat = SkillCatalog::scan(dir.path(), &BTreeMap::new(), "/mnt/skills");
    let names: Vec<(&str, SkillCategory)> = cat
        .skills()
        .iter()
        .map(|s| (s.name.as_str(), s.category))
        .collect();
    assert_eq!(
        names,
        vec![
            ("charts", SkillCategory::Public),
            ("deep-research", SkillCategory::Public),
            ("slides", SkillCategory::Custom),
        ]
    );
    assert_eq!(cat.shadowed().len(), 1);
    assert_eq!(cat.shadowed()[0].dir_name, "slides");
    let slides = cat.get("slides").unwrap();
    assert_eq!(slides.description, "Our own slides.");
    assert_eq!(slides.allowed_tools, Some(vec!["bash".to_string()]));
    assert_eq!(
        slides.container_file("/mnt/skills"),
        "/mnt/skills/custom/my-slides/SKILL.md"
    );

    let invalid: Vec<String> = cat.invalid().iter().map(|i| i.to_string()).collect();
    assert_eq!(invalid.len(), 5, "{invalid:#?}");
    let find = |dir: &str| {
        invalid
            .iter()
            .find(|s| s.starts_with(&format!("skills/public/{dir}:")))
            .cloned()
            .unwrap_or_else(|| panic!("{dir} not reported: {invalid:#?}"))
    };
    assert_eq!(
        find("angle"),
        "skills/public/angle: Description cannot contain angle brackets (< or >)"
    );
    assert_eq!(
        find("bad-key"),
        "skills/public/bad-key: Unexpected key(s) in SKILL.md frontmatter: foo"
    );
    assert!(find("bad-name").contains("should be hyphen-case"));
    assert!(find("long-name").contains("Name is too long (65 characters)"));
    assert_eq!(
        find("dup"),
        "skills/public/dup: duplicate skill name 'charts' (also skills/public/charts)"
    );
}

#[test]
fn toggles_prompt_and_mounts() {
    let dir = fixture();
    let cat = SkillCatalog::scan(
        dir.path(),
        &toggles(&[
            ("deep-research", false),
            ("charts", true),
            ("unknown", false),
        ]),
        "/mnt/skills/",
    );
    assert_eq!(
        cat.enabled().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        vec!["charts", "slides"]
    );
    assert_eq!(
        cat.disabled().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        vec!["deep-research"]
    );

    let p = cat.prompt_section(None);
    assert!(
        p.starts_with("<skill_system>\n") && p.ends_with("</skill_system>"),
        "{p}"
    );
    assert!(p.contains("mounted read-only under /mnt/skills."));
    assert!(p.contains(
        "  <skill>\n    <name>charts</name>\n    <description>Make charts. [built-in]</description>\n    <location>/mnt/skills/public/charts/SKILL.md</location>\n  </skill>\n"
    ), "{p}");
    assert!(p.contains(
        "<description>Our own slides. [custom]</description>\n    <location>/mnt/skills/custom/my-slides/SKILL.md</location>"
    ));
    let available = p.split("<disabled_skills>").next().unwrap();
    assert!(!available.contains("deep-research"));
    assert!(p.contains("<disabled_skills>\n") && p.contains("- deep-research\n</disabled_skills>"));
    assert!(!p.contains("bad-key") && !p.contains("inner"));

    // A custom agent's skill list narrows what is offered; [] offers none.
    let only = cat.prompt_section(Some(&["slides".to_string()]));
    assert!(only.contains("<name>slides</name>") && !only.contains("<name>charts</name>"));
    let none = cat.prompt_section(Some(&[]));
    assert!(!none.contains("<available_skills>") && none.contains("<disabled_skills>"));

    let mounts = cat.mounts();
    let m: Vec<(&str, String)> = mounts
        .iter()
        .map(|m| {
            (
                m.container_path.as_str(),
                m.host_dir
                    .strip_prefix(dir.path())
                    .unwrap()
                    .display()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        m,
        vec![
            ("/mnt/skills/public/charts", "public/charts".to_string()),
            (
                "/mnt/skills/custom/my-slides",
                "custom/my-slides".to_string()
            ),
        ],
        "only enabled, non-shadowed skills are mounted"
    );
    assert_eq!(
        cat.disabled_container_dirs(),
        vec!["/mnt/skills/public/deep-research".to_string()]
    );
}

#[test]
fn escaping_and_empty_catalogs() {
    let dir = fixture();
    let cat = SkillCatalog::scan(dir.path(), &BTreeMap::new(), "/mnt/skills");
    assert!(cat.prompt_section(None).contains(
        "<description>Research a topic in depth &amp; cite sources. [built-in]</description>"
    ));

    let empty = tempfile::tempdir().unwrap();
    let cat = SkillCatalog::scan(
        &empty.path().join("missing"),
        &BTreeMap::new(),
        "/mnt/skills",
    );
    assert!(cat.skills().is_empty() && cat.invalid().is_empty());
    assert_eq!(cat.prompt_section(None), "");
    assert!(cat.mounts().is_empty());
}

#[cfg(unix)]
#[test]
fn symlinked_skills_and_oversized_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    skill(outside.path(), "x", "real", "name: real\ndescription: d");
    std::fs::create_dir_all(dir.path().join("public")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("x").join("real"),
        dir.path().join("public").join("linked"),
    )
    .unwrap();
    skill(dir.path(), "custom", "ok", "name: ok\ndescription: fine");
    std::os::unix::fs::symlink(
        outside.path().join("x").join("real").join("SKILL.md"),
        dir.path().join("custom").join("ok2-link-file"),
    )
    .unwrap();
    let d = dir.path().join("custom").join("filelink");
    std::fs::create_dir_all(&d).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("x").join("real").join("SKILL.md"),
        d.join("SKILL.md"),
    )
    .unwrap();
    skill(
        dir.path(),
        "custom",
        "huge",
        &format!(
            "name: huge\ndescription: d\nversion: \"{}\"",
            "v".repeat(1_100_000)
        ),
    );
    let cat = SkillCatalog::scan(dir.path(), &BTreeMap::new(), "/mnt/skills");
    assert_eq!(
        cat.skills()
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        vec!["ok"]
    );
    let invalid: Vec<String> = cat.invalid().iter().map(|i| i.to_string()).collect();
    assert!(
        invalid.contains(
            &"skills/public/linked: symlinked skill directories are not loaded".to_string()
        ),
        "{invalid:#?}"
    );
    assert!(
        invalid.contains(&"skills/custom/filelink: SKILL.md is not a regular file".to_string()),
        "{invalid:#?}"
    );
    assert!(
        invalid.contains(&"skills/custom/huge: SKILL.md is larger than 1 MiB".to_string()),
        "{invalid:#?}"
    );
}

#[tokio::test]
async fn load_uses_settings() {
    let dir = fixture();
    let mut settings = Settings::with_home(dir.path());
    settings.skills_dir = dir.path().to_path_buf();
    settings.extensions.skills = toggles(&[("charts", false)]);
    settings.app.skills.container_path = "/opt/skills".into();
    let cat = SkillCatalog::load(&settings).await;
    assert_eq!(cat.container_root(), "/opt/skills");
    assert!(!cat.get("charts").unwrap().enabled);
    assert!(
        cat.prompt_section(None)
            .contains("<location>/opt/skills/public/deep-research/SKILL.md</location>")
    );
}

#[test]
fn shipped_example_skills_are_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../skills");
    let cat = SkillCatalog::scan(&root, &BTreeMap::new(), "/mnt/skills");
    assert!(cat.invalid().is_empty(), "{:#?}", cat.invalid());
    let names: Vec<&str> = cat.skills().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        vec!["code-review-checklist", "csv-quick-look", "markdown-report"]
    );
    for s in cat.skills() {
        assert_eq!(s.category, SkillCategory::Public);
        assert_eq!(s.dir_name, s.name);
    }
}
