//! The documents that map the code name every crate: the README's layout and a section of
//! ARCHITECTURE.md's code map for each directory under `crates/`.

use std::path::Path;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("the repository root")
}

fn crates() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("crates"))
        .expect("crates/")
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() > 10, "found the workspace's crates: {names:?}");
    names
}

#[test]
fn the_readme_layout_lists_every_crate() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let layout = readme
        .split_once("## Layout")
        .map(|(_, rest)| rest)
        .expect("README.md has a Layout section");
    let missing: Vec<_> = crates()
        .into_iter()
        .filter(|c| {
            !layout
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{c}/")))
        })
        .collect();
    assert!(missing.is_empty(), "README.md's layout misses {missing:?}");
}

#[test]
fn the_architecture_code_map_has_every_crate() {
    let doc = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let missing: Vec<_> = crates()
        .into_iter()
        .filter(|c| !doc.contains(&format!("### `crates/{c}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map misses {missing:?}"
    );
}
