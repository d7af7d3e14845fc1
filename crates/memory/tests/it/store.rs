use fawn_memory::{MemoryData, MemoryError, MemoryStore};

#[tokio::test]
async fn per_user_file_with_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::new(dir.path());
    assert_eq!(store.load("alice").await.unwrap(), MemoryData::default());
    let after = store
        .update("alice", |m| {
            m.user.work_context.summary = "Rust".into();
            true
        })
        .await
        .unwrap();
    assert_eq!(after.revision, 1);
    assert!(!after.last_updated.is_empty());
    let path = dir.path().join("users/alice/memory.json");
    let on_disk: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(on_disk["user"]["workContext"]["summary"], "Rust");
    assert_eq!(on_disk["revision"], 1);
    // No change → no write, same revision.
    let same = store.update("alice", |_| false).await.unwrap();
    assert_eq!(same.revision, 1);
    // Users are separate.
    assert_eq!(store.load("bob").await.unwrap().revision, 0);
    // No temporary files left behind.
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["memory.json"]);
}

#[tokio::test]
async fn corrupt_file_is_reported_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::new(dir.path());
    let path = store.path_for("u").unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"{not json").unwrap();
    assert!(matches!(
        store.load("u").await,
        Err(MemoryError::Corrupt(_))
    ));
    let r = store
        .update("u", |m| {
            m.user.top_of_mind.summary = "x".into();
            true
        })
        .await;
    assert!(matches!(r, Err(MemoryError::Corrupt(_))));
    assert_eq!(std::fs::read(&path).unwrap(), b"{not json");
}

#[tokio::test]
async fn user_ids_cannot_escape() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::new(dir.path());
    for bad in ["", "..", "a/b", "a\\b", "x\0y"] {
        assert!(
            matches!(store.load(bad).await, Err(MemoryError::InvalidUser(_))),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn concurrent_updates_do_not_lose_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(MemoryStore::new(dir.path()));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let s = store.clone();
        tasks.push(tokio::spawn(async move {
            s.update("u", |m| {
                m.facts.push(fawn_memory::Fact {
                    id: format!("f{i}"),
                    content: format!("fact {i}"),
                    ..Default::default()
                });
                true
            })
            .await
            .unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let m = store.load("u").await.unwrap();
    assert_eq!(m.facts.len(), 20);
    assert_eq!(m.revision, 20);
}
