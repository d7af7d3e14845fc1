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

/// Crates that reach thread files only through `fawn_sandbox::host_fs` (or a `Sandbox`).
const THREAD_FILE_CRATES: [&str; 3] = ["agent", "runtime", "server"];

/// Files that work on thread files without naming their paths (they are given them).
const THREAD_FILE_MODULES: [&str; 2] = [
    "crates/agent/src/delivery.rs",
    "crates/agent/src/workspace_changes.rs",
];

/// What marks a file as handling a thread's host paths.
const THREAD_PATH_MARKERS: [&str; 8] = [
    "ThreadPaths",
    "thread_paths(",
    ".user_data",
    ".outputs",
    ".uploads",
    ".workspace",
    "thread_dir",
    "host_fs::",
];

/// Host file-system calls such a file must leave to the sandbox crate.
const HAND_WRITTEN_FS: [&str; 12] = [
    "std::fs",
    "tokio::fs",
    "File::open",
    "File::create",
    "OpenOptions",
    "read_dir(",
    "symlink_metadata(",
    "remove_dir_all(",
    ".is_dir()",
    ".is_file()",
    ".exists()",
    ".canonicalize(",
];

/// Files still waiting for their move, with the reason; each must still need it.
/// (None left; the list stays so a partial move has a place to say so.)
const NOT_YET_MOVED: [(&str, &str); 0] = [];

/// The hand-written file-system calls in `source` outside its `#[cfg(test)]` part.
fn hand_written_fs(source: &str) -> Vec<String> {
    let code = source.split("#[cfg(test)]").next().unwrap_or(source);
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter(|l| HAND_WRITTEN_FS.iter().any(|p| l.contains(p)))
        .map(|l| l.trim().to_string())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("a source directory") {
        let p = e.expect("an entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_hand_written_walk_check_sees_one() {
    let sample = "fn f(p: &Path) {\n    for e in std::fs::read_dir(p) {}\n}\n\
                  #[cfg(test)]\nmod tests { fn g() { std::fs::write(\"x\", \"\"); } }\n";
    assert_eq!(
        hand_written_fs(sample),
        ["for e in std::fs::read_dir(p) {}"]
    );
    assert!(hand_written_fs("// std::fs::copy in a comment\nfn f() {}\n").is_empty());
}

/// ARCHITECTURE.md: "The sandbox is the only crate that touches thread files on the host."
/// In the agent, runtime and server, a file that handles a thread's host paths (or is one of
/// [`THREAD_FILE_MODULES`]) calls no file-system function of its own: it goes through
/// `fawn_sandbox::host_fs`, whose one path rule (relative, no `..`, no symlink) it cannot
/// forget.
#[test]
fn thread_files_are_touched_only_through_the_sandbox() {
    let root = repo();
    let mut offenders = Vec::new();
    let mut pending = Vec::new();
    for krate in THREAD_FILE_CRATES {
        let mut files = Vec::new();
        rust_files(&root.join("crates").join(krate).join("src"), &mut files);
        assert!(!files.is_empty(), "found crates/{krate}/src");
        for file in files {
            let rel = file
                .strip_prefix(root)
                .expect("under the repository")
                .to_string_lossy()
                .replace('\\', "/");
            let source = std::fs::read_to_string(&file).expect("a source file");
            let code = source.split("#[cfg(test)]").next().unwrap_or(&source);
            let handles_thread_files = THREAD_FILE_MODULES.contains(&rel.as_str())
                || THREAD_PATH_MARKERS.iter().any(|m| code.contains(m));
            if !handles_thread_files {
                continue;
            }
            let calls = hand_written_fs(&source);
            if NOT_YET_MOVED.iter().any(|(f, _)| *f == rel) {
                pending.push((rel, calls.is_empty()));
            } else if !calls.is_empty() {
                offenders.push(format!("{rel}: {calls:?}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "thread files touched by hand (use fawn_sandbox::host_fs):\n{}",
        offenders.join("\n")
    );
    assert_eq!(
        pending.len(),
        NOT_YET_MOVED.len(),
        "every NOT_YET_MOVED file exists and handles thread paths: {pending:?}"
    );
    for (file, moved) in pending {
        assert!(
            !moved,
            "{file} no longer needs its NOT_YET_MOVED entry: remove it"
        );
    }
}
