use crate::support::{conformance, new_id, obj, put_step, say};
use fawn_checkpoint::*;
use serde_json::json;
use std::sync::Arc;

conformance!(store:
    thread_create_get_update_delete,
    thread_delete_cascades,
    thread_search_and_count,
    thread_summary_drives_status,
    thread_copy,
    thread_prune,
    thread_ttl_and_expiry,
    nul_characters_do_not_break_writes,
    nul_in_filter_keys_is_a_key_like_any_other,
);

async fn thread_create_get_update_delete(db: Arc<dyn Persistence>) {
    let id = new_id();
    let t = db
        .create_thread(NewThread {
            thread_id: Some(id.clone()),
            metadata: obj(json!({"owner": "ann", "n": 1})),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(t.thread_id, id);
    assert_eq!(t.status, ThreadStatus::Idle);
    assert_eq!(t.values, None);
    assert!(t.config.is_empty() && t.interrupts.is_empty() && t.error.is_none());
    assert_eq!(t.created_at, t.updated_at);

    let err = db
        .create_thread(NewThread {
            thread_id: Some(id.clone()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::Conflict(format!("Thread with ID {id} already exists"))
    );
    let same = db
        .create_thread(NewThread {
            thread_id: Some(id.clone()),
            metadata: obj(json!({"owner": "bob"})),
            if_exists: IfExists::DoNothing,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(same, t, "do_nothing returns the thread unchanged");

    let generated = db.create_thread(NewThread::default()).await.unwrap();
    let uuid = uuid::Uuid::parse_str(&generated.thread_id).unwrap();
    assert_eq!(uuid.get_version_num(), 7);

    let updated = db
        .update_thread(
            &id,
            ThreadPatch {
                metadata: Some(obj(json!({"n": 2, "extra": true}))),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        updated.metadata,
        obj(json!({"owner": "ann", "n": 2, "extra": true}))
    );
    assert!(updated.updated_at >= t.updated_at);
    assert_eq!(db.get_thread(&id).await.unwrap(), Some(updated));

    let missing = new_id();
    let err = db
        .update_thread(&missing, ThreadPatch::default())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::NotFound(format!("Thread with ID {missing} not found"))
    );
    assert_eq!(db.get_thread(&missing).await.unwrap(), None);

    assert!(db.delete_thread(&id).await.unwrap());
    assert!(!db.delete_thread(&id).await.unwrap());
    assert_eq!(db.get_thread(&id).await.unwrap(), None);
}

async fn thread_delete_cascades(db: Arc<dyn Persistence>) {
    let id = new_id();
    db.create_thread(NewThread {
        thread_id: Some(id.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    let created = db
        .create_run(NewRun {
            thread_id: id.clone(),
            assistant_id: "a".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let (cp, _) = put_step(
        &*db,
        &id,
        None,
        None,
        json!({}),
        vec![("n", say("m1", "hi"))],
    )
    .await;
    db.put_writes(&id, "", &cp, "task", vec![("messages".into(), json!(1))])
        .await
        .unwrap();
    let cron = db
        .create_cron(NewCron {
            assistant_id: "a".into(),
            thread_id: Some(id.clone()),
            schedule: "* * * * *".into(),
            enabled: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(db.delete_thread(&id).await.unwrap());
    assert_eq!(db.get_run(&created.run.run_id).await.unwrap(), None);
    assert_eq!(db.get_checkpoint(&id, "", None).await.unwrap(), None);
    assert!(db.pending_writes(&id, "", &cp).await.unwrap().is_empty());
    assert_eq!(db.get_cron(&cron.cron_id).await.unwrap(), None);
    // Recreating the id starts from scratch.
    db.create_thread(NewThread {
        thread_id: Some(id.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(
        db.list_checkpoints(&id, &HistoryQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
}

async fn thread_search_and_count(db: Arc<dyn Persistence>) {
    let mut ids = Vec::new();
    for i in 0..5 {
        let t = db
            .create_thread(NewThread {
                metadata: obj(json!({
                    "i": i,
                    "even": i % 2 == 0,
                    "kind": if i < 3 { "a" } else { "b" },
                    "tags": ["x", format!("t{i}")],
                    "nested": {"deep": {"v": i}, "k": "same"},
                    "nothing": null,
                })),
                ..Default::default()
            })
            .await
            .unwrap();
        ids.push(t.thread_id);
    }
    db.set_thread_summary(
        &ids[1],
        ThreadSummary {
            values: Some(json!({"title": "hello", "messages": [{"id": "m1"}]})),
            ..Default::default()
        },
    )
    .await
    .unwrap();

    let search = |filter: ThreadFilter| {
        let db = db.clone();
        async move {
            db.search_threads(&ThreadQuery {
                filter,
                limit: 100,
                sort_by: ThreadSort::CreatedAt,
                sort_order: SortOrder::Asc,
                ..Default::default()
            })
            .await
            .unwrap()
        }
    };
    let ids_of = |p: &Page<Thread>| {
        p.items
            .iter()
            .map(|t| t.thread_id.clone())
            .collect::<Vec<_>>()
    };

    let all = search(ThreadFilter::default()).await;
    assert_eq!(ids_of(&all), ids);
    assert_eq!(all.total, 5);
    let meta = |v: serde_json::Value| ThreadFilter {
        metadata: Some(obj(v)),
        ..Default::default()
    };
    assert_eq!(ids_of(&search(meta(json!({"kind": "a"}))).await), ids[..3]);
    assert_eq!(ids_of(&search(meta(json!({"i": 3}))).await), ids[3..4]);
    assert_eq!(ids_of(&search(meta(json!({"i": 3.0}))).await), ids[3..4]);
    assert_eq!(
        ids_of(&search(meta(json!({"i": "3"}))).await),
        Vec::<String>::new()
    );
    assert_eq!(
        ids_of(&search(meta(json!({"even": true, "kind": "b"}))).await),
        ids[4..5]
    );
    assert_eq!(
        ids_of(&search(meta(json!({"tags": ["t2"]}))).await),
        ids[2..3]
    );
    assert_eq!(ids_of(&search(meta(json!({"tags": ["x"]}))).await).len(), 5);
    assert_eq!(ids_of(&search(meta(json!({"tags": "x"}))).await).len(), 0);
    assert_eq!(
        ids_of(&search(meta(json!({"nested": {"deep": {"v": 4}}}))).await),
        ids[4..5]
    );
    assert_eq!(
        ids_of(&search(meta(json!({"nested": {"k": "same"}}))).await).len(),
        5
    );
    assert_eq!(
        ids_of(&search(meta(json!({"nothing": null}))).await).len(),
        5
    );
    assert_eq!(
        ids_of(&search(meta(json!({"missing": null}))).await).len(),
        0
    );

    let values = search(ThreadFilter {
        values: Some(obj(json!({"title": "hello"}))),
        ..Default::default()
    })
    .await;
    assert_eq!(ids_of(&values), ids[1..2]);
    let values = search(ThreadFilter {
        values: Some(obj(json!({"messages": [{"id": "m1"}]}))),
        ..Default::default()
    })
    .await;
    assert_eq!(ids_of(&values), ids[1..2]);

    let by_ids = search(ThreadFilter {
        ids: Some(vec![ids[0].clone(), ids[4].clone(), new_id()]),
        ..Default::default()
    })
    .await;
    assert_eq!(ids_of(&by_ids), vec![ids[0].clone(), ids[4].clone()]);
    let none = search(ThreadFilter {
        ids: Some(vec![]),
        ..Default::default()
    })
    .await;
    assert_eq!(none.total, 0);

    // Busy status is searchable.
    db.create_run(NewRun {
        thread_id: ids[2].clone(),
        assistant_id: "a".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let busy = search(ThreadFilter {
        status: Some(ThreadStatus::Busy),
        ..Default::default()
    })
    .await;
    assert_eq!(ids_of(&busy), ids[2..3]);

    // Sorting, paging and totals.
    let page = db
        .search_threads(&ThreadQuery {
            limit: 2,
            offset: 1,
            sort_by: ThreadSort::CreatedAt,
            sort_order: SortOrder::Desc,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids_of(&page), vec![ids[3].clone(), ids[2].clone()]);
    assert_eq!(page.total, 5);
    let past_end = db
        .search_threads(&ThreadQuery {
            limit: 2,
            offset: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(past_end.items.is_empty());
    assert_eq!(past_end.total, 5);
    // Paging through a filter that SQLite checks partly in Rust.
    let nested_page = db
        .search_threads(&ThreadQuery {
            filter: meta(json!({"nested": {"k": "same"}, "kind": "a"})),
            limit: 2,
            offset: 1,
            sort_by: ThreadSort::CreatedAt,
            sort_order: SortOrder::Asc,
        })
        .await
        .unwrap();
    assert_eq!(ids_of(&nested_page), ids[1..3]);
    assert_eq!(nested_page.total, 3);
    for sort_by in [
        ThreadSort::ThreadId,
        ThreadSort::Status,
        ThreadSort::UpdatedAt,
        ThreadSort::StateUpdatedAt,
    ] {
        let p = db
            .search_threads(&ThreadQuery {
                sort_by,
                sort_order: SortOrder::Asc,
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(p.items.len(), 5);
    }
    let by_id = db
        .search_threads(&ThreadQuery {
            sort_by: ThreadSort::ThreadId,
            sort_order: SortOrder::Desc,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.reverse();
    assert_eq!(ids_of(&by_id), sorted);

    assert_eq!(db.count_threads(&ThreadFilter::default()).await.unwrap(), 5);
    assert_eq!(
        db.count_threads(&meta(json!({"kind": "b"}))).await.unwrap(),
        2
    );
    assert_eq!(
        db.count_threads(&meta(json!({"nested": {"deep": {"v": 1}}})))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        db.count_threads(&ThreadFilter {
            status: Some(ThreadStatus::Idle),
            ..Default::default()
        })
        .await
        .unwrap(),
        4
    );
}

async fn thread_summary_drives_status(db: Arc<dyn Persistence>) {
    let id = db
        .create_thread(NewThread::default())
        .await
        .unwrap()
        .thread_id;
    let t = db
        .set_thread_summary(
            &id,
            ThreadSummary {
                values: Some(json!({"messages": []})),
                metadata: obj(json!({"graph_id": "agent"})),
                config: Some(obj(json!({"configurable": {"x": 1}}))),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(t.status, ThreadStatus::Idle);
    assert_eq!(t.values, Some(json!({"messages": []})));
    assert_eq!(t.metadata, obj(json!({"graph_id": "agent"})));
    assert_eq!(t.config, obj(json!({"configurable": {"x": 1}})));
    let stamp = t.state_updated_at;

    let t = db
        .set_thread_summary(
            &id,
            ThreadSummary {
                interrupts: obj(json!({"task1": [{"id": "i1", "value": "ok?"}]})),
                has_next: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(t.status, ThreadStatus::Interrupted);
    assert_eq!(t.values, Some(json!({"messages": []})), "None keeps values");
    assert_eq!(t.state_updated_at, stamp);
    assert_eq!(
        t.config,
        obj(json!({"configurable": {"x": 1}})),
        "None keeps config"
    );
    assert_eq!(
        t.interrupts,
        obj(json!({"task1": [{"id": "i1", "value": "ok?"}]}))
    );

    let t = db
        .set_thread_summary(
            &id,
            ThreadSummary {
                error: Some(json!({"error": "ValueError", "message": "boom"})),
                has_next: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(t.status, ThreadStatus::Error, "error wins over next");
    assert!(t.interrupts.is_empty());

    // A pending run makes it busy whatever the summary says.
    db.create_run(NewRun {
        thread_id: id.clone(),
        assistant_id: "a".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(
        db.get_thread(&id).await.unwrap().unwrap().status,
        ThreadStatus::Busy
    );
    let t = db
        .set_thread_summary(&id, ThreadSummary::default())
        .await
        .unwrap();
    assert_eq!(t.status, ThreadStatus::Busy);
    db.cancel_runs(
        &CancelTarget::Status {
            pending: true,
            running: true,
        },
        CancelAction::Interrupt,
    )
    .await
    .unwrap();
    assert_eq!(
        db.get_thread(&id).await.unwrap().unwrap().status,
        ThreadStatus::Idle
    );

    let missing = new_id();
    assert_eq!(
        db.set_thread_summary(&missing, ThreadSummary::default())
            .await
            .unwrap_err(),
        StoreError::NotFound(format!("Thread with ID {missing} not found"))
    );
}

async fn thread_copy(db: Arc<dyn Persistence>) {
    let src = db
        .create_thread(NewThread {
            metadata: obj(json!({"owner": "ann"})),
            ..Default::default()
        })
        .await
        .unwrap()
        .thread_id;
    let (c1, s1) = put_step(
        &*db,
        &src,
        None,
        Some("run-1"),
        json!({"source": "input", "step": -1, "thread_id": src}),
        vec![("__start__", say("m1", "hello"))],
    )
    .await;
    let (c2, s2) = put_step(
        &*db,
        &src,
        Some((&c1, &s1)),
        Some("run-1"),
        json!({"source": "loop", "step": 0}),
        vec![("agent", say("m2", "hi back"))],
    )
    .await;
    db.put_writes(&src, "", &c2, "t1", vec![("messages".into(), json!("w"))])
        .await
        .unwrap();
    db.set_thread_summary(
        &src,
        ThreadSummary {
            values: Some(s2.to_value()),
            ..Default::default()
        },
    )
    .await
    .unwrap();

    let dst = new_id();
    let copy = db.copy_thread(&src, &dst).await.unwrap();
    assert_eq!(copy.thread_id, dst);
    assert_eq!(copy.metadata, obj(json!({"owner": "ann"})));
    assert_eq!(copy.status, ThreadStatus::Idle);
    assert_eq!(copy.values, Some(s2.to_value()));

    let history = db
        .list_checkpoints(&dst, &HistoryQuery::default())
        .await
        .unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[0].checkpoint_id, c2);
    assert_eq!(history[0].thread_id, dst);
    assert_eq!(*history[0].state, s2);
    assert_eq!(history[0].parent_id.as_deref(), Some(c1.as_str()));
    assert_eq!(*history[1].state, s1);
    assert_eq!(
        history[1].metadata["thread_id"],
        json!(dst),
        "thread_id rewritten"
    );
    assert_eq!(
        db.pending_writes(&dst, "", &c2).await.unwrap()[0].value,
        json!("w")
    );
    // The source is untouched; the copy lives on independently.
    let (c3, _) = put_step(
        &*db,
        &dst,
        Some((&c2, &s2)),
        None,
        json!({}),
        vec![("agent", say("m3", "only in the copy"))],
    )
    .await;
    assert_eq!(
        db.get_checkpoint(&src, "", None)
            .await
            .unwrap()
            .unwrap()
            .checkpoint_id,
        c2
    );
    assert_eq!(
        db.get_checkpoint(&dst, "", None)
            .await
            .unwrap()
            .unwrap()
            .checkpoint_id,
        c3
    );

    assert_eq!(
        db.copy_thread(&src, &dst).await.unwrap_err(),
        StoreError::Conflict(format!("Thread with ID {dst} already exists"))
    );
    let missing = new_id();
    assert!(matches!(
        db.copy_thread(&missing, &new_id()).await.unwrap_err(),
        StoreError::NotFound(_)
    ));
}

async fn thread_prune(db: Arc<dyn Persistence>) {
    let mut threads = Vec::new();
    for _ in 0..3 {
        let id = db
            .create_thread(NewThread::default())
            .await
            .unwrap()
            .thread_id;
        let (c1, s1) = put_step(&*db, &id, None, None, json!({}), vec![("n", say("a", "1"))]).await;
        let (c2, s2) = put_step(
            &*db,
            &id,
            Some((&c1, &s1)),
            None,
            json!({}),
            vec![("n", say("b", "2"))],
        )
        .await;
        let (c3, s3) = put_step(
            &*db,
            &id,
            Some((&c2, &s2)),
            None,
            json!({}),
            vec![("n", say("c", "3"))],
        )
        .await;
        db.put_writes(&id, "", &c1, "t", vec![("x".into(), json!(1))])
            .await
            .unwrap();
        db.put_writes(&id, "", &c3, "t", vec![("x".into(), json!(3))])
            .await
            .unwrap();
        threads.push((id, c3, s3));
    }
    let missing = new_id();
    let n = db
        .prune_threads(
            &[threads[0].0.clone(), threads[1].0.clone(), missing.clone()],
            PruneStrategy::KeepLatest,
        )
        .await
        .unwrap();
    assert_eq!(n, 2);
    for (id, latest, state) in &threads[..2] {
        let history = db
            .list_checkpoints(id, &HistoryQuery::default())
            .await
            .unwrap();
        assert_eq!(history.len(), 1);
        assert_eq!(&history[0].checkpoint_id, latest);
        assert_eq!(*history[0].state, *state);
        assert_eq!(history[0].parent_id, None);
        assert_eq!(db.pending_writes(id, "", latest).await.unwrap().len(), 1);
        // The pruned thread keeps working.
        put_step(
            &*db,
            id,
            Some((latest, state)),
            None,
            json!({}),
            vec![("n", say("d", "4"))],
        )
        .await;
        let latest_now = db.get_checkpoint(id, "", None).await.unwrap().unwrap();
        assert_eq!(latest_now.state.messages.len(), 4);
    }
    assert_eq!(
        db.list_checkpoints(&threads[2].0, &HistoryQuery::default())
            .await
            .unwrap()
            .len(),
        3,
        "not listed: untouched"
    );
    let n = db
        .prune_threads(
            &[threads[2].0.clone(), threads[0].0.clone()],
            PruneStrategy::Delete,
        )
        .await
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(db.get_thread(&threads[2].0).await.unwrap(), None);
    assert!(db.get_thread(&threads[1].0).await.unwrap().is_some());
}

async fn thread_ttl_and_expiry(db: Arc<dyn Persistence>) {
    let ttl = ThreadTtl {
        minutes: 1.0,
        strategy: PruneStrategy::KeepLatest,
    };
    let with_ttl = db
        .create_thread(NewThread {
            ttl: Some(ttl.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(with_ttl.ttl, Some(ttl));
    let expires = with_ttl.expires_at.unwrap();
    let delta = expires - with_ttl.updated_at;
    assert_eq!(delta.num_seconds(), 60);
    let plain = db.create_thread(NewThread::default()).await.unwrap();
    assert_eq!(plain.expires_at, None);

    let now = chrono::Utc::now();
    assert!(db.expired_threads(now, 10).await.unwrap().is_empty());
    let later = now + chrono::Duration::minutes(5);
    let expired = db.expired_threads(later, 10).await.unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].thread_id, with_ttl.thread_id);

    // A busy thread is not handed to the sweeper.
    db.create_run(NewRun {
        thread_id: with_ttl.thread_id.clone(),
        assistant_id: "a".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(db.expired_threads(later, 10).await.unwrap().is_empty());

    // Updating the TTL re-arms it.
    let patched = db
        .update_thread(
            &plain.thread_id,
            ThreadPatch {
                ttl: Some(ThreadTtl {
                    minutes: 10.0,
                    strategy: PruneStrategy::Delete,
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(patched.expires_at.unwrap() > later);

    // Bounded: a TTL past 100 years would overflow the expiry timestamps.
    let longest = db
        .create_thread(NewThread {
            ttl: Some(ThreadTtl {
                minutes: MAX_TTL_MINUTES,
                strategy: PruneStrategy::Delete,
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(longest.ttl.as_ref().unwrap().minutes, MAX_TTL_MINUTES);
    assert!(longest.expires_at.unwrap() > later + chrono::Duration::days(365 * 99));
    for bad in [
        0.0,
        -1.0,
        f64::NAN,
        f64::INFINITY,
        MAX_TTL_MINUTES + 1.0,
        200_000_000_000.0,
    ] {
        let bad_ttl = Some(ThreadTtl {
            minutes: bad,
            strategy: PruneStrategy::Delete,
        });
        let err = db
            .create_thread(NewThread {
                ttl: bad_ttl.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{bad}: {err}");
        let err = db
            .update_thread(
                &longest.thread_id,
                ThreadPatch {
                    ttl: bad_ttl,
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{bad}: {err}");
    }
    let unchanged = db.get_thread(&longest.thread_id).await.unwrap().unwrap();
    assert_eq!(unchanged.ttl, longest.ttl);
    assert_eq!(unchanged.expires_at, longest.expires_at);
}

/// An LLM can emit U+0000. Checkpoints keep it exactly; the thread's copy of the values
/// and metadata (JSONB on Postgres, which cannot hold it) get U+FFFD there.
async fn nul_characters_do_not_break_writes(db: Arc<dyn Persistence>) {
    let id = db
        .create_thread(NewThread {
            metadata: obj(json!({"k": "a\u{0}b"})),
            ..Default::default()
        })
        .await
        .unwrap()
        .thread_id;
    let (cp, state) = put_step(
        &*db,
        &id,
        None,
        None,
        json!({"note": "x\u{0}"}),
        vec![("agent", say("m1", "before\u{0}after"))],
    )
    .await;
    let t = db
        .set_thread_summary(
            &id,
            ThreadSummary {
                values: Some(state.to_value()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let stored = t.values.unwrap()["messages"][0]["content"].clone();
    assert!(
        stored == json!("before\u{0}after") || stored == json!("before\u{FFFD}after"),
        "{stored}"
    );
    put_step(
        &*db,
        &id,
        Some((&cp, &state)),
        None,
        json!({}),
        vec![("agent", say("m2", "next"))],
    )
    .await;
    let history = db
        .list_checkpoints(&id, &HistoryQuery::default())
        .await
        .unwrap();
    assert_eq!(*history[1].state, state, "checkpoint state is exact");
}

/// A filter key holding U+0000 (which ends a SQLite JSON path, and which Postgres text and
/// jsonb cannot hold) matches what was stored under it and nothing else; never an error.
async fn nul_in_filter_keys_is_a_key_like_any_other(db: Arc<dyn Persistence>) {
    let id = db
        .create_thread(NewThread {
            metadata: obj(json!({"a\u{0}b": 1, "n": {"x": 1}})),
            ..Default::default()
        })
        .await
        .unwrap()
        .thread_id;
    db.create_thread(NewThread::default()).await.unwrap();
    db.put_item(PutItem {
        namespace: vec!["ns".into()],
        key: "k".into(),
        value: obj(json!({"a\u{0}b": 1})),
        ttl_minutes: None,
    })
    .await
    .unwrap();
    for (key, value, hit) in [
        ("a\u{0}b", json!(1), true),
        ("a\u{0}b", json!(2), false),
        ("a\u{0}b", json!({"x": 1}), false),
        ("a\u{0}c", json!(1), false),
        ("\u{0}", json!(1), false),
    ] {
        let filter = obj(json!({ key: value }));
        let q = ThreadQuery {
            filter: ThreadFilter {
                metadata: Some(filter.clone()),
                ..Default::default()
            },
            limit: 10,
            ..Default::default()
        };
        let page = db.search_threads(&q).await.unwrap();
        let ids: Vec<&str> = page.items.iter().map(|t| t.thread_id.as_str()).collect();
        let expected: Vec<&str> = if hit { vec![id.as_str()] } else { vec![] };
        assert_eq!(ids, expected, "{key:?}: {value}");
        assert_eq!(page.total, u64::from(hit));
        assert_eq!(db.count_threads(&q.filter).await.unwrap(), u64::from(hit));
        let values = ThreadFilter {
            values: Some(filter.clone()),
            ..Default::default()
        };
        assert_eq!(db.count_threads(&values).await.unwrap(), 0);
        let items = db
            .search_items(&ItemQuery {
                namespace_prefix: vec!["ns".into()],
                filter: Some(filter),
                limit: 10,
                offset: 0,
                refresh_ttl: false,
            })
            .await
            .unwrap();
        assert_eq!(items.len(), usize::from(hit), "{key:?}: {value}");
    }
}
