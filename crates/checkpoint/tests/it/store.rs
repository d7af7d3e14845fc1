use crate::support::{conformance, obj};
use fawn_checkpoint::*;
use serde_json::json;
use std::sync::Arc;

conformance!(store: store_items_crud_and_search, store_namespaces, store_ttl);

fn ns(labels: &[&str]) -> Vec<String> {
    labels.iter().map(|s| s.to_string()).collect()
}

async fn put(db: &Arc<dyn Persistence>, labels: &[&str], key: &str, value: serde_json::Value) {
    db.put_item(PutItem {
        namespace: ns(labels),
        key: key.into(),
        value: obj(value),
        ttl_minutes: None,
    })
    .await
    .unwrap();
}

async fn store_items_crud_and_search(db: Arc<dyn Persistence>) {
    assert_eq!(
        db.get_item(&ns(&["users", "u1"]), "prefs", false)
            .await
            .unwrap(),
        None
    );
    put(
        &db,
        &["users", "u1"],
        "prefs",
        json!({"theme": "dark", "n": 1}),
    )
    .await;
    let first = db
        .get_item(&ns(&["users", "u1"]), "prefs", false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.namespace, ns(&["users", "u1"]));
    assert_eq!(first.key, "prefs");
    assert_eq!(first.value, obj(json!({"theme": "dark", "n": 1})));
    assert_eq!(first.expires_at, None);
    clock_passes(first.updated_at).await;
    put(&db, &["users", "u1"], "prefs", json!({"theme": "light"})).await;
    let second = db
        .get_item(&ns(&["users", "u1"]), "prefs", false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.value, obj(json!({"theme": "light"})));
    assert_eq!(second.created_at, first.created_at);
    assert!(second.updated_at > first.updated_at);

    put(
        &db,
        &["users", "u2"],
        "prefs",
        json!({"theme": "dark", "nested": {"a": [1, 2]}, "n": 2}),
    )
    .await;
    put(&db, &["users"], "root", json!({"theme": "dark"})).await;
    put(&db, &["users2", "u1"], "prefs", json!({"theme": "dark"})).await;
    put(&db, &["user"], "prefs", json!({"theme": "dark"})).await;
    put(&db, &["a.b", "c%d"], "odd", json!({"theme": "odd"})).await;

    let search = |prefix: &[&str], filter: Option<serde_json::Value>, limit: u64, offset: u64| {
        let db = db.clone();
        let q = ItemQuery {
            namespace_prefix: ns(prefix),
            filter: filter.map(obj),
            limit,
            offset,
            refresh_ttl: false,
        };
        async move { db.search_items(&q).await.unwrap() }
    };
    let keys = |items: &[Item]| -> Vec<(Vec<String>, String)> {
        items
            .iter()
            .map(|i| (i.namespace.clone(), i.key.clone()))
            .collect()
    };
    // Newest first; the prefix matches whole labels only.
    let users = search(&["users"], None, 10, 0).await;
    assert_eq!(
        keys(&users),
        vec![
            (ns(&["users"]), "root".into()),
            (ns(&["users", "u2"]), "prefs".into()),
            (ns(&["users", "u1"]), "prefs".into()),
        ]
    );
    assert_eq!(search(&[], None, 100, 0).await.len(), 6);
    assert_eq!(search(&["a.b"], None, 10, 0).await.len(), 1);
    assert_eq!(search(&["a"], None, 10, 0).await.len(), 0);
    let dark = search(&["users"], Some(json!({"theme": "dark"})), 10, 0).await;
    assert_eq!(dark.len(), 2);
    let nested = search(&[], Some(json!({"nested": {"a": [1, 2]}})), 10, 0).await;
    assert_eq!(keys(&nested), vec![(ns(&["users", "u2"]), "prefs".into())]);
    // Equality, not containment, for nested values.
    assert!(
        search(&[], Some(json!({"nested": {"a": [1]}})), 10, 0)
            .await
            .is_empty()
    );
    assert_eq!(search(&[], Some(json!({"n": 2.0})), 10, 0).await.len(), 1);
    assert!(search(&[], Some(json!({"n": "2"})), 10, 0).await.is_empty());
    let paged = search(&["users"], None, 1, 1).await;
    assert_eq!(keys(&paged), vec![(ns(&["users", "u2"]), "prefs".into())]);
    let paged = search(&[], Some(json!({"theme": "dark"})), 2, 3).await;
    assert_eq!(paged.len(), 1, "4 dark items, from the 4th on");

    db.delete_item(&ns(&["users", "u1"]), "prefs")
        .await
        .unwrap();
    db.delete_item(&ns(&["users", "u1"]), "prefs")
        .await
        .unwrap();
    assert_eq!(
        db.get_item(&ns(&["users", "u1"]), "prefs", false)
            .await
            .unwrap(),
        None
    );

    for bad in [vec![], vec!["ok".to_string(), String::new()]] {
        let err = db
            .put_item(PutItem {
                namespace: bad,
                key: "k".into(),
                value: Default::default(),
                ttl_minutes: None,
            })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    }
}

async fn store_namespaces(db: Arc<dyn Persistence>) {
    for labels in [
        &["a", "b", "c"][..],
        &["a", "b", "d"],
        &["a", "c"],
        &["a", "c", "x", "y"],
        &["b", "c"],
        &["z"],
    ] {
        put(&db, labels, "k", json!({})).await;
    }
    let list = |q: NamespaceQuery| {
        let db = db.clone();
        async move { db.list_namespaces(&q).await.unwrap() }
    };
    let all = list(NamespaceQuery::default()).await;
    assert_eq!(
        all,
        vec![
            ns(&["a", "b", "c"]),
            ns(&["a", "b", "d"]),
            ns(&["a", "c"]),
            ns(&["a", "c", "x", "y"]),
            ns(&["b", "c"]),
            ns(&["z"]),
        ]
    );
    let prefixed = list(NamespaceQuery {
        prefix: Some(ns(&["a", "b"])),
        ..Default::default()
    })
    .await;
    assert_eq!(prefixed, vec![ns(&["a", "b", "c"]), ns(&["a", "b", "d"])]);
    let suffixed = list(NamespaceQuery {
        suffix: Some(ns(&["c"])),
        ..Default::default()
    })
    .await;
    assert_eq!(
        suffixed,
        vec![ns(&["a", "b", "c"]), ns(&["a", "c"]), ns(&["b", "c"])]
    );
    let depth = list(NamespaceQuery {
        max_depth: Some(2),
        ..Default::default()
    })
    .await;
    assert_eq!(
        depth,
        vec![
            ns(&["a", "b"]),
            ns(&["a", "c"]),
            ns(&["b", "c"]),
            ns(&["z"])
        ],
        "truncated, then deduplicated"
    );
    let page = list(NamespaceQuery {
        max_depth: Some(1),
        limit: 2,
        offset: 1,
        ..Default::default()
    })
    .await;
    assert_eq!(page, vec![ns(&["b"]), ns(&["z"])]);
    let both = list(NamespaceQuery {
        prefix: Some(ns(&["a"])),
        suffix: Some(ns(&["y"])),
        max_depth: Some(3),
        ..Default::default()
    })
    .await;
    assert_eq!(both, vec![ns(&["a", "c", "x"])]);
}

async fn store_ttl(db: Arc<dyn Persistence>) {
    db.put_item(PutItem {
        namespace: ns(&["mem"]),
        key: "long".into(),
        value: obj(json!({"v": 1})),
        ttl_minutes: Some(60.0),
    })
    .await
    .unwrap();
    let item = db
        .get_item(&ns(&["mem"]), "long", false)
        .await
        .unwrap()
        .unwrap();
    let expires = item.expires_at.unwrap();
    assert_eq!((expires - item.updated_at).num_minutes(), 60);
    clock_passes(item.updated_at).await;
    let refreshed = db
        .get_item(&ns(&["mem"]), "long", true)
        .await
        .unwrap()
        .unwrap();
    assert!(
        refreshed.expires_at.unwrap() > expires,
        "refresh_ttl pushes the expiry back"
    );
    let searched = db
        .search_items(&ItemQuery {
            namespace_prefix: ns(&["mem"]),
            limit: 10,
            refresh_ttl: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(searched[0].expires_at.unwrap() > refreshed.expires_at.unwrap());

    db.put_item(PutItem {
        namespace: ns(&["mem"]),
        key: "short".into(),
        value: obj(json!({"v": 2})),
        ttl_minutes: Some(0.0001), // 6 ms
    })
    .await
    .unwrap();
    // It expires at most 6 ms after the put returned (reading it first would race a slow
    // machine: it may be gone already).
    let put_done = chrono::Utc::now();
    put(&db, &["mem"], "forever", json!({"v": 3})).await;
    clock_passes(put_done + chrono::Duration::milliseconds(10)).await;
    assert_eq!(
        db.get_item(&ns(&["mem"]), "short", true).await.unwrap(),
        None,
        "expired"
    );
    let visible = db
        .search_items(&ItemQuery {
            namespace_prefix: ns(&["mem"]),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(visible.len(), 2);
    assert_eq!(
        db.list_namespaces(&NamespaceQuery::default())
            .await
            .unwrap(),
        vec![ns(&["mem"])]
    );
    assert_eq!(db.sweep_expired_items(chrono::Utc::now()).await.unwrap(), 1);
    let far = chrono::Utc::now() + chrono::Duration::days(1);
    assert_eq!(
        db.sweep_expired_items(far).await.unwrap(),
        1,
        "the 60-minute item"
    );
    assert!(
        db.get_item(&ns(&["mem"]), "forever", false)
            .await
            .unwrap()
            .is_some()
    );
    for bad in [-1.0, MAX_TTL_MINUTES + 1.0, 200_000_000_000.0] {
        let err = db
            .put_item(PutItem {
                namespace: ns(&["mem"]),
                key: "bad".into(),
                value: Default::default(),
                ttl_minutes: Some(bad),
            })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{bad}: {err}");
    }
    assert!(
        db.get_item(&ns(&["mem"]), "bad", true)
            .await
            .unwrap()
            .is_none()
    );
}

/// Waits until the wall clock is past `t` (timestamps are the store's own `now()`): a
/// condition, not a guess at how long that takes.
async fn clock_passes(t: chrono::DateTime<chrono::Utc>) {
    while chrono::Utc::now() <= t {
        tokio::task::yield_now().await;
    }
}
