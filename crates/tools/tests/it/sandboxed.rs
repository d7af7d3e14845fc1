//! Built-ins and skills against the real local sandbox provider: view_image on directories
//! and symlinks, and the skills hand-off (`/mnt/skills`).

use crate::support::{Harness, args, text};
use fawn_sandbox::SandboxError;
use fawn_tools::Tool;
use fawn_tools::builtins::ViewImageTool;
use fawn_tools::skills::SkillCatalog;
use serde_json::json;
use std::collections::BTreeMap;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

async fn view(h: &Harness, path: &str) -> String {
    let out = ViewImageTool::new()
        .call(args(json!({ "image_path": path })), &h.ctx)
        .await
        .unwrap();
    text(&out)
}

#[tokio::test]
async fn view_image_edge_cases_through_the_real_sandbox() {
    let h = Harness::new().await;
    std::fs::create_dir_all(h.paths.outputs.join("dir.png")).unwrap();
    assert_eq!(
        view(&h, "/mnt/user-data/outputs/dir.png").await,
        "Error: Path is not a file: /mnt/user-data/outputs/dir.png"
    );

    // A symlink pointing out of the thread is not followed, and no host path leaks.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.png"), PNG).unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(
            outside.path().join("secret.png"),
            h.paths.workspace.join("link.png"),
        )
        .unwrap();
        let t = view(&h, "/mnt/user-data/workspace/link.png").await;
        assert!(t.starts_with("Error"), "{t}");
        assert!(!t.contains(&outside.path().display().to_string()), "{t}");
        assert!(!t.contains(&h.dir.path().display().to_string()), "{t}");
    }

    h.write("outputs/ok.png", PNG);
    assert_eq!(
        view(&h, "/mnt/user-data/outputs/ok.png").await,
        "Successfully read image"
    );
}

fn skill(root: &std::path::Path, category: &str, dir: &str, name: &str) {
    let d = root.join(category).join(dir);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: The {name} skill.\n---\nbody of {dir}\n"),
    )
    .unwrap();
}

#[tokio::test]
async fn enabled_skills_are_mounted_read_only_and_disabled_ones_are_blocked() {
    let h = Harness::new().await;
    let skills = h.dir.path().join("skills");
    skill(&skills, "public", "alpha", "alpha");
    skill(&skills, "public", "beta", "beta");
    skill(&skills, "public", "gamma", "gamma");
    skill(&skills, "custom", "my-gamma", "gamma");
    let mut toggles = BTreeMap::new();
    toggles.insert(
        "beta".to_string(),
        fawn_config::SkillToggle { enabled: false },
    );
    let catalog = SkillCatalog::scan(&skills, &toggles, "/mnt/skills");
    h.provider
        .set_skills(catalog.sandbox_view())
        .await
        .expect("the sandbox accepts the view");
    let sb = h.ctx.sandbox.get().await.unwrap();

    let body = sb
        .read_bytes("/mnt/skills/public/alpha/SKILL.md", 1 << 20)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&body).contains("body of alpha"));
    let custom = sb
        .read_bytes("/mnt/skills/custom/my-gamma/SKILL.md", 1 << 20)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&custom).contains("body of my-gamma"));

    let e = sb
        .read_bytes("/mnt/skills/public/beta/SKILL.md", 1 << 20)
        .await
        .unwrap_err();
    assert!(
        matches!(e, SandboxError::SkillDisabled(ref n) if n == "beta"),
        "{e:?}"
    );

    // The shadowed public skill is not mounted.
    assert!(
        sb.read_bytes("/mnt/skills/public/gamma/SKILL.md", 1 << 20)
            .await
            .is_err()
    );
    // Read-only.
    assert!(
        sb.write_text("/mnt/skills/public/alpha/x.md", "no", false)
            .await
            .is_err()
    );
    // Every location the prompt names can be read.
    let prompt = catalog.prompt_section(None);
    for s in catalog.enabled() {
        let loc = s.container_file(catalog.container_root());
        assert!(prompt.contains(&format!("<location>{loc}</location>")));
        assert!(sb.read_bytes(&loc, 1 << 20).await.is_ok(), "{loc}");
    }
}
