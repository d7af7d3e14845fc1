//! `fawn_sandbox::host_fs`: the host-side operations other crates use on thread files, with
//! crafted symlinks (on the way, at the leaf, out of the root, loops), `..`, and a directory
//! or file swapped for a symlink between a check and a use.

use fawn_sandbox::host_fs::{self, FsError, Kind, Replace, Visit};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// `tmp/root` (the thread root) and `tmp/outside/secret` (what must never be reached).
struct Tree {
    tmp: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("root/d/e")).unwrap();
        std::fs::write(tmp.path().join("root/d/file.txt"), "inside").unwrap();
        std::fs::write(tmp.path().join("root/d/e/deep.txt"), "deep").unwrap();
        std::fs::create_dir_all(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/secret"), "secret").unwrap();
        Tree { tmp }
    }
    fn root(&self) -> PathBuf {
        self.tmp.path().join("root")
    }
    fn outside(&self) -> PathBuf {
        self.tmp.path().join("outside")
    }
    fn outside_names(&self) -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(self.outside())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }
    fn names(&self, rel: &str) -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(self.root().join(rel))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }
}

fn p(s: &str) -> &Path {
    Path::new(s)
}

#[test]
fn dot_dot_absolute_and_nul_paths_are_refused() {
    let t = Tree::new();
    let root = t.root();
    for bad in [
        "../outside/secret",
        "d/../../outside/secret",
        "/etc/passwd",
        "d/\0x",
    ] {
        assert!(
            matches!(host_fs::metadata(&root, p(bad)), Err(FsError::Denied(_))),
            "{bad:?}"
        );
        assert!(
            matches!(host_fs::read(&root, p(bad), 100), Err(FsError::Denied(_))),
            "{bad:?}"
        );
        assert!(
            matches!(host_fs::remove_file(&root, p(bad)), Err(FsError::Denied(_))),
            "{bad:?}"
        );
        assert!(
            matches!(
                host_fs::walk(&root, p(bad), |_| Visit::Descend),
                Err(FsError::Denied(_))
            ),
            "{bad:?}"
        );
    }
    // `..` inside the root is refused too: never interpreted, even when it would stay.
    assert!(matches!(
        host_fs::read(&root, p("d/e/../file.txt"), 100),
        Err(FsError::Denied(_))
    ));
    assert!(matches!(
        host_fs::replace_file(&root, p("d/.staged"), p("d/../x"), Replace::default()),
        Err(FsError::Denied(_))
    ));
    // `.` segments are dropped.
    assert_eq!(
        host_fs::read(&root, p("./d/./file.txt"), 100).unwrap(),
        b"inside"
    );
    assert_eq!(t.outside_names(), ["secret"]);
    assert_eq!(
        std::fs::read(t.outside().join("secret")).unwrap(),
        b"secret"
    );
}

#[test]
fn symlinks_on_the_way_at_the_leaf_and_out_of_the_root_are_not_followed() {
    let t = Tree::new();
    let root = t.root();
    symlink(t.outside(), root.join("out_dir")).unwrap();
    symlink("../outside/secret", root.join("out_file")).unwrap();
    symlink("d", root.join("in_dir")).unwrap();
    symlink("d/file.txt", root.join("in_file")).unwrap();
    // On the way: refused, whether the link leads out or stays inside.
    for rel in ["out_dir/secret", "in_dir/file.txt", "in_dir/e/deep.txt"] {
        assert!(
            matches!(host_fs::metadata(&root, p(rel)), Err(FsError::Symlink)),
            "{rel}"
        );
        assert!(
            matches!(host_fs::read(&root, p(rel), 100), Err(FsError::Symlink)),
            "{rel}"
        );
        assert!(
            matches!(host_fs::remove_file(&root, p(rel)), Err(FsError::Symlink)),
            "{rel}"
        );
    }
    // At the leaf: described as a symlink, never read through.
    for rel in ["out_file", "in_file", "out_dir"] {
        assert_eq!(
            host_fs::metadata(&root, p(rel)).unwrap().kind,
            Kind::Symlink,
            "{rel}"
        );
        assert!(
            matches!(host_fs::read(&root, p(rel), 100), Err(FsError::Symlink)),
            "{rel}"
        );
    }
    assert!(matches!(
        host_fs::walk(&root, p("out_dir"), |_| Visit::Descend),
        Err(FsError::Symlink)
    ));
    // Removing a leaf symlink removes the link only.
    host_fs::remove_file(&root, p("out_file")).unwrap();
    host_fs::remove_file(&root, p("out_dir")).unwrap();
    assert!(!root.join("out_file").exists() && !root.join("out_dir").exists());
    assert_eq!(t.outside_names(), ["secret"]);
    // A root that is itself a symlink is refused.
    let linked_root = t.tmp.path().join("linked_root");
    symlink(&root, &linked_root).unwrap();
    assert!(matches!(
        host_fs::read(&linked_root, p("d/file.txt"), 100),
        Err(FsError::Symlink)
    ));
    // A file on the way is "not a directory"; a directory is not removed as a file.
    assert!(matches!(
        host_fs::metadata(&root, p("d/file.txt/x")),
        Err(FsError::NotDir)
    ));
    assert!(matches!(
        host_fs::remove_file(&root, p("d/e")),
        Err(FsError::IsDir)
    ));
    assert!(root.join("d/e/deep.txt").is_file());
}

#[test]
fn symlink_loops_end_in_a_refusal() {
    let t = Tree::new();
    let root = t.root();
    symlink("loop_b", root.join("loop_a")).unwrap();
    symlink("loop_a", root.join("loop_b")).unwrap();
    symlink("self", root.join("self")).unwrap();
    for rel in ["loop_a/x", "self/x", "self"] {
        assert!(
            matches!(host_fs::read(&root, p(rel), 100), Err(FsError::Symlink)),
            "{rel}"
        );
    }
    let mut seen = Vec::new();
    host_fs::walk(&root, p(""), |e| {
        seen.push((e.rel.clone(), e.kind));
        Visit::Descend
    })
    .unwrap();
    assert!(seen.contains(&("loop_a".to_string(), Kind::Symlink)));
    assert!(seen.contains(&("self".to_string(), Kind::Symlink)));
    let copy = t.tmp.path().join("copy");
    host_fs::copy_tree(&root, &copy, |_| false).unwrap();
    assert!(copy.join("d/e/deep.txt").is_file());
    assert!(std::fs::symlink_metadata(copy.join("self")).is_err());
}

#[test]
fn walks_are_sorted_depth_first_and_read_through_the_listed_directory() {
    let t = Tree::new();
    let root = t.root();
    std::fs::write(root.join("a.txt"), "0123456789").unwrap();
    std::fs::create_dir(root.join("skip")).unwrap();
    std::fs::write(root.join("skip/hidden.txt"), "x").unwrap();
    symlink("../outside", root.join("z_link")).unwrap();
    let mut seen = Vec::new();
    host_fs::walk(&root, p(""), |e| {
        seen.push(e.rel.clone());
        match (e.rel.as_str(), e.kind) {
            ("a.txt", _) => {
                assert_eq!(e.read(100).unwrap(), b"0123456789");
                assert_eq!(e.read_head(4).unwrap(), b"0123");
                assert!(matches!(e.read(5), Err(FsError::TooLarge(_))));
                assert_eq!(e.metadata().unwrap().len, 10);
            }
            ("z_link", Kind::Symlink) => {
                assert_eq!(e.read_link().unwrap(), "../outside");
                assert!(matches!(e.read(100), Err(FsError::Symlink)));
            }
            ("skip", _) => return Visit::Skip,
            _ => {}
        }
        Visit::Descend
    })
    .unwrap();
    assert_eq!(
        seen,
        [
            "a.txt",
            "d",
            "skip",
            "z_link",
            "d/e",
            "d/file.txt",
            "d/e/deep.txt"
        ]
    );
    let mut n = 0;
    host_fs::walk(&root, p(""), |_| {
        n += 1;
        Visit::Stop
    })
    .unwrap();
    assert_eq!(n, 1);
    assert!(matches!(
        host_fs::walk(&root, p("missing"), |_| Visit::Descend),
        Err(FsError::NotFound)
    ));
    assert!(matches!(
        host_fs::walk(&root, p("a.txt"), |_| Visit::Descend),
        Err(FsError::NotDir)
    ));
}

#[test]
fn copy_tree_copies_files_and_directories_and_never_follows_a_symlink() {
    let t = Tree::new();
    let root = t.root();
    let script = root.join("d/run.sh");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();
    symlink(t.outside(), root.join("out_dir")).unwrap();
    symlink("../outside/secret", root.join("d/out_file")).unwrap();
    symlink("file.txt", root.join("d/in_file")).unwrap();
    std::fs::write(root.join(".upload-1.part"), "half").unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let copy = t.tmp.path().join("branch/user-data");
    host_fs::copy_tree(&root, &copy, |name| {
        name.to_string_lossy().starts_with(".upload-")
    })
    .unwrap();
    let mut got = Vec::new();
    host_fs::walk(&copy, p(""), |e| {
        got.push(format!("{}:{:?}", e.rel, e.kind));
        Visit::Descend
    })
    .unwrap();
    assert_eq!(
        got,
        [
            "d:Dir",
            "d/e:Dir",
            "d/file.txt:File",
            "d/run.sh:File",
            "d/e/deep.txt:File"
        ]
    );
    assert_eq!(std::fs::read(copy.join("d/file.txt")).unwrap(), b"inside");
    let mode = std::fs::metadata(copy.join("d/run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o750);
    // Copying again overwrites; a missing source is "not found".
    std::fs::write(root.join("d/file.txt"), "changed").unwrap();
    host_fs::copy_tree(&root, &copy, |_| false).unwrap();
    assert_eq!(std::fs::read(copy.join("d/file.txt")).unwrap(), b"changed");
    assert!(matches!(
        host_fs::copy_tree(&t.tmp.path().join("nope"), &copy, |_| false),
        Err(FsError::NotFound)
    ));
    // A destination file that is a symlink is not written through.
    std::fs::remove_file(copy.join("d/file.txt")).unwrap();
    symlink(t.outside().join("secret"), copy.join("d/file.txt")).unwrap();
    assert!(matches!(
        host_fs::copy_tree(&root, &copy, |_| false),
        Err(FsError::Symlink)
    ));
    assert_eq!(
        std::fs::read(t.outside().join("secret")).unwrap(),
        b"secret"
    );
}

#[test]
fn copy_tree_skips_what_is_swapped_for_a_symlink_during_the_copy() {
    let t = Tree::new();
    let root = t.root();
    std::fs::write(root.join("f.txt"), "mine").unwrap();
    let outside = t.outside();
    // `skip` runs for each entry after the listing and before the copy: the seam where the
    // agent's process would swap a directory and a file for symlinks out of the root.
    let swapped = root.clone();
    let copy = t.tmp.path().join("copy");
    host_fs::copy_tree(&root, &copy, move |name| {
        match name.to_str() {
            Some("d") => {
                std::fs::rename(swapped.join("d"), swapped.join("moved_d")).unwrap();
                symlink(&outside, swapped.join("d")).unwrap();
            }
            Some("f.txt") => {
                std::fs::remove_file(swapped.join("f.txt")).unwrap();
                symlink(outside.join("secret"), swapped.join("f.txt")).unwrap();
            }
            _ => {}
        }
        false
    })
    .unwrap();
    assert!(copy.join("d").is_dir());
    assert!(
        std::fs::read_dir(copy.join("d")).unwrap().next().is_none(),
        "nothing of the outside directory was copied"
    );
    assert!(!copy.join("f.txt").exists(), "the secret was not copied");
    assert!(!copy.join("d/secret").exists());
}

#[test]
fn a_walk_does_not_descend_into_a_directory_swapped_for_a_symlink() {
    let t = Tree::new();
    let root = t.root();
    std::fs::write(root.join("f.txt"), "mine").unwrap();
    let mut seen = Vec::new();
    let mut read_f = None;
    host_fs::walk(&root, p(""), |e| {
        seen.push(e.rel.clone());
        if e.rel == "d" {
            // Checked as a directory, then swapped before the walk opens it.
            std::fs::rename(root.join("d"), root.join("moved")).unwrap();
            symlink(t.outside(), root.join("d")).unwrap();
        }
        if e.rel == "f.txt" {
            // Listed as a file, then swapped before it is read.
            std::fs::remove_file(root.join("f.txt")).unwrap();
            symlink(t.outside().join("secret"), root.join("f.txt")).unwrap();
            read_f = Some(e.read(100));
        }
        Visit::Descend
    })
    .unwrap();
    assert_eq!(seen, ["d", "f.txt"], "nothing under the swapped directory");
    assert!(matches!(read_f, Some(Err(FsError::Symlink))));
}

#[test]
fn replace_file_publishes_whole_files_and_leaves_no_staged_file_on_error() {
    let t = Tree::new();
    let root = t.root();
    let target = root.join("d/file.txt");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    let stage = |content: &str| std::fs::write(root.join("d/.staged"), content).unwrap();
    let keep = Replace {
        must_exist: true,
        keep_mode: true,
    };
    stage("new");
    host_fs::replace_file(&root, p("d/.staged"), p("d/file.txt"), keep).unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"new");
    assert_eq!(
        std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(t.names("d"), ["e", "file.txt"]);
    // A new name is published when the target may be missing, refused when it must exist.
    stage("fresh");
    host_fs::replace_file(&root, p("d/.staged"), p("d/fresh.txt"), Replace::default()).unwrap();
    assert_eq!(std::fs::read(root.join("d/fresh.txt")).unwrap(), b"fresh");
    stage("x");
    assert!(matches!(
        host_fs::replace_file(&root, p("d/.staged"), p("d/missing.txt"), keep),
        Err(FsError::NotFound)
    ));
    assert_eq!(t.names("d"), ["e", "file.txt", "fresh.txt"]);
    // A symlinked, directory or FIFO target is left alone; the staged file goes.
    symlink(t.outside().join("secret"), root.join("d/link")).unwrap();
    stage("x");
    assert!(matches!(
        host_fs::replace_file(&root, p("d/.staged"), p("d/link"), Replace::default()),
        Err(FsError::Symlink)
    ));
    stage("x");
    assert!(matches!(
        host_fs::replace_file(&root, p("d/.staged"), p("d/e"), Replace::default()),
        Err(FsError::IsDir)
    ));
    assert_eq!(t.names("d"), ["e", "file.txt", "fresh.txt", "link"]);
    assert_eq!(
        std::fs::read(t.outside().join("secret")).unwrap(),
        b"secret"
    );
    // A staged file that is a symlink is not published (and the link is removed).
    symlink(t.outside().join("secret"), root.join("d/.staged")).unwrap();
    assert!(matches!(
        host_fs::replace_file(&root, p("d/.staged"), p("d/file.txt"), keep),
        Err(FsError::Symlink)
    ));
    assert_eq!(std::fs::read(&target).unwrap(), b"new");
    assert_eq!(t.names("d"), ["e", "file.txt", "fresh.txt", "link"]);
    // Staged and target in different directories: refused (the staged file goes too).
    stage("x");
    assert!(matches!(
        host_fs::replace_file(&root, p("d/.staged"), p("d/e/deep.txt"), keep),
        Err(FsError::Denied(_))
    ));
    assert_eq!(t.names("d"), ["e", "file.txt", "fresh.txt", "link"]);
    // A parent that is a symlink: refused before anything is touched.
    stage("x");
    symlink("d", root.join("dl")).unwrap();
    assert!(matches!(
        host_fs::replace_file(&root, p("dl/.staged"), p("dl/file.txt"), keep),
        Err(FsError::Symlink)
    ));
    assert_eq!(std::fs::read(&target).unwrap(), b"new");
}

/// Swaps `root/d` between a real directory and a symlink out of the root until told to
/// stop, while the caller runs operations on `d/...` paths.
fn swapper(root: PathBuf, outside: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut swaps = 0u64;
        while !stop.load(Ordering::Relaxed) {
            std::fs::rename(root.join("d"), root.join("d_real")).unwrap();
            symlink(&outside, root.join("d")).unwrap();
            std::fs::remove_file(root.join("d")).unwrap();
            std::fs::rename(root.join("d_real"), root.join("d")).unwrap();
            swaps += 1;
        }
        swaps
    })
}

#[test]
fn operations_racing_a_directory_swap_stay_inside_the_root() {
    let t = Tree::new();
    let root = t.root();
    let stop = Arc::new(AtomicBool::new(false));
    let handle = swapper(root.clone(), t.outside(), stop.clone());
    let mut outcomes = [0u32; 2];
    for i in 0..3000 {
        let name = format!("f{i}.txt");
        // The staged file is placed with a no-follow open relative to a handle of `d`
        // taken when `d` was the real directory, so only `replace_file` can go wrong.
        let Ok(dir) = rustix::fs::open(
            root.join("d"),
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::NOFOLLOW,
            rustix::fs::Mode::empty(),
        ) else {
            continue;
        };
        let fd = rustix::fs::openat(
            &dir,
            ".staged",
            rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CREATE | rustix::fs::OFlags::NOFOLLOW,
            rustix::fs::Mode::from_raw_mode(0o644),
        )
        .unwrap();
        drop(fd);
        let staged = PathBuf::from("d/.staged");
        let target = PathBuf::from("d").join(&name);
        match host_fs::replace_file(&root, &staged, &target, Replace::default()) {
            Ok(()) => outcomes[0] += 1,
            Err(FsError::Symlink | FsError::NotFound) => outcomes[1] += 1,
            Err(e) => panic!("unexpected {e:?}"),
        }
        let _ = host_fs::remove_file(&root, &target);
        let _ = host_fs::read(&root, p("d/file.txt"), 100);
        let _ = host_fs::walk(&root, p("d"), |e| {
            assert_ne!(e.name, "secret", "walked out of the root");
            Visit::Descend
        });
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = handle.join().unwrap();
    assert!(swaps > 0, "the swapper ran");
    assert_eq!(
        t.outside_names(),
        ["secret"],
        "nothing was published or removed outside the root ({outcomes:?})"
    );
    assert_eq!(
        std::fs::read(t.outside().join("secret")).unwrap(),
        b"secret"
    );
}

#[test]
fn remove_tree_removes_links_not_what_they_point_to() {
    let t = Tree::new();
    let root = t.root();
    symlink(t.outside(), root.join("d/out_dir")).unwrap();
    symlink(t.outside().join("secret"), root.join("d/e/out_file")).unwrap();
    assert!(host_fs::remove_tree(&root).unwrap());
    assert!(!root.exists());
    assert_eq!(t.outside_names(), ["secret"]);
    assert!(!host_fs::remove_tree(&root).unwrap());
    assert!(matches!(
        host_fs::remove_tree(&t.outside().join("secret")),
        Err(FsError::NotDir)
    ));
    assert!(host_fs::is_dir(&t.outside()));
    assert!(!host_fs::is_dir(&t.outside().join("secret")));
}
