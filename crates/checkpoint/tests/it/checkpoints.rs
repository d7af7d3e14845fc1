use crate::support::{conformance, new_id, obj, put_step, say};
use fawn_checkpoint::*;
use fawn_state::{Interrupt, Message, StateUpdate, ThreadState};
use serde_json::json;
use std::sync::Arc;

conformance!(store:
    checkpoint_round_trip,
    checkpoint_parent_must_exist,
    history_newest_first_across_branches,
    history_filters,
    rollback_deletes_by_run_and_keeps_forks_readable,
    checkpoint_metadata_patch,
    pending_writes_by_task,
    writes_without_ids_are_stored_exactly,
    concurrent_chains_with_rollbacks_stay_readable,
    chains_link_in_order_and_fail_whole,
    step_writes_come_from_the_oldest_loop_child,
);

async fn checkpoint_round_trip(db: Arc<dyn Persistence>) {
    let thread = new_id();
    assert_eq!(db.get_checkpoint(&thread, "", None).await.unwrap(), None);
    assert!(
        db.list_checkpoints(&thread, &HistoryQuery::default())
            .await
            .unwrap()
            .is_empty()
    );

    let mut s0 = ThreadState::default();
    let mut input = vec![
        StateUpdate::from_value(json!({
            "messages": [{"type": "human", "content": "hi", "id": "h1"}],
            "title": "T",
        }))
        .unwrap(),
    ];
    s0.apply_writes(&mut input).unwrap();
    let tasks = vec![TaskRecord {
        id: "task-1".into(),
        name: "agent".into(),
        interrupts: vec![Interrupt {
            id: "0123456789abcdef0123456789abcdef".into(),
            value: json!({"question": "ok?"}),
        }],
        error: None,
    }];
    let id0 = db
        .put_checkpoint(NewCheckpoint {
            thread_id: thread.clone(),
            checkpoint_ns: String::new(),
            parent_id: None,
            run_id: Some("run-1".into()),
            metadata: obj(json!({"source": "input", "step": -1, "parents": {}})),
            writes: vec![("__start__".into(), input[0].clone())],
            state: Arc::new(s0.clone()),
            next: vec!["agent".into()],
            tasks: tasks.clone(),
        })
        .await
        .unwrap();
    assert_eq!(uuid::Uuid::parse_str(&id0).unwrap().get_version_num(), 6);

    let got = db.get_checkpoint(&thread, "", None).await.unwrap().unwrap();
    assert_eq!(got.checkpoint_id, id0);
    assert_eq!(got.thread_id, thread);
    assert_eq!(got.checkpoint_ns, "");
    assert_eq!(got.parent_id, None);
    assert_eq!(got.run_id.as_deref(), Some("run-1"));
    assert_eq!(
        got.metadata,
        obj(json!({"source": "input", "step": -1, "parents": {}}))
    );
    assert_eq!(*got.state, s0);
    assert_eq!(got.next, vec!["agent".to_string()]);
    assert_eq!(got.tasks, tasks);
    assert_eq!(
        got.writes,
        vec![("__start__".to_string(), input[0].to_value())]
    );

    let mut ids = vec![id0.clone()];
    let mut state = s0;
    for i in 0..5 {
        let (id, s) = put_step(
            &*db,
            &thread,
            Some((ids.last().unwrap(), &state)),
            Some("run-1"),
            json!({"source": "loop", "step": i}),
            vec![("agent", say(&format!("a{i}"), "answer"))],
        )
        .await;
        assert!(id > *ids.last().unwrap(), "ids increase");
        ids.push(id);
        state = s;
    }
    let latest = db.get_checkpoint(&thread, "", None).await.unwrap().unwrap();
    assert_eq!(&latest.checkpoint_id, ids.last().unwrap());
    assert_eq!(*latest.state, state);
    assert_eq!(latest.parent_id.as_ref(), Some(&ids[4]));
    let third = db
        .get_checkpoint(&thread, "", Some(&ids[2]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(third.state.messages.len(), 3);
    assert_eq!(third.metadata["step"], json!(1));
    assert_eq!(
        db.get_checkpoint(&thread, "", Some(&new_checkpoint_id()))
            .await
            .unwrap(),
        None
    );
    // Namespaces are separate histories.
    assert_eq!(
        db.get_checkpoint(&thread, "sub:1", None).await.unwrap(),
        None
    );
    let sub = db
        .put_checkpoint(NewCheckpoint {
            thread_id: thread.clone(),
            checkpoint_ns: "sub:1".into(),
            parent_id: None,
            run_id: None,
            metadata: obj(json!({"parents": {"": ids[5]}})),
            writes: vec![],
            state: Arc::new(ThreadState::default()),
            next: vec![],
            tasks: vec![],
        })
        .await
        .unwrap();
    let got = db
        .get_checkpoint(&thread, "sub:1", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.checkpoint_id, sub);
    assert_eq!(got.checkpoint_ns, "sub:1");
    assert_eq!(
        db.get_checkpoint(&thread, "", None)
            .await
            .unwrap()
            .unwrap()
            .checkpoint_id,
        ids[5]
    );
    let root_history = db
        .list_checkpoints(&thread, &HistoryQuery::default())
        .await
        .unwrap();
    assert_eq!(root_history.len(), 6);
}

async fn checkpoint_parent_must_exist(db: Arc<dyn Persistence>) {
    let thread = new_id();
    let ghost = new_checkpoint_id();
    let err = db
        .put_checkpoint(NewCheckpoint {
            thread_id: thread.clone(),
            checkpoint_ns: String::new(),
            parent_id: Some(ghost.clone()),
            run_id: None,
            metadata: Default::default(),
            writes: vec![],
            state: Arc::new(ThreadState::default()),
            next: vec![],
            tasks: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::NotFound(format!("Parent checkpoint {ghost} not found"))
    );
    assert!(
        db.list_checkpoints(&thread, &HistoryQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
}

async fn history_newest_first_across_branches(db: Arc<dyn Persistence>) {
    let thread = new_id();
    let (a0, s0) = put_step(
        &*db,
        &thread,
        None,
        None,
        json!({"source": "input"}),
        vec![("__start__", say("m0", "root"))],
    )
    .await;
    let (a1, s1) = put_step(
        &*db,
        &thread,
        Some((&a0, &s0)),
        None,
        json!({"source": "loop"}),
        vec![("agent", say("m1", "one"))],
    )
    .await;
    let (a2, s2) = put_step(
        &*db,
        &thread,
        Some((&a1, &s1)),
        None,
        json!({"source": "loop"}),
        vec![("agent", say("m2", "two"))],
    )
    .await;
    // Fork from a0 (time travel), then continue both branches alternately.
    let (b1, t1) = put_step(
        &*db,
        &thread,
        Some((&a0, &s0)),
        None,
        json!({"source": "fork"}),
        vec![("agent", say("x1", "fork"))],
    )
    .await;
    let (a3, s3) = put_step(
        &*db,
        &thread,
        Some((&a2, &s2)),
        None,
        json!({"source": "loop"}),
        vec![("agent", say("m3", "three"))],
    )
    .await;
    let (b2, t2) = put_step(
        &*db,
        &thread,
        Some((&b1, &t1)),
        None,
        json!({"source": "update"}),
        vec![("agent", say("x2", "fork 2"))],
    )
    .await;
    let history = db
        .list_checkpoints(&thread, &HistoryQuery::default())
        .await
        .unwrap();
    let ids: Vec<&str> = history.iter().map(|c| c.checkpoint_id.as_str()).collect();
    assert_eq!(ids, vec![b2.as_str(), &a3, &b1, &a2, &a1, &a0]);
    let expect = [&t2, &s3, &t1, &s2, &s1, &s0];
    for (c, s) in history.iter().zip(expect) {
        assert_eq!(*c.state, *s, "state of {}", c.checkpoint_id);
    }
    assert_eq!(history[0].parent_id.as_deref(), Some(b1.as_str()));
    assert_eq!(history[2].parent_id.as_deref(), Some(a0.as_str()));
    // The latest is the newest id, whichever branch it is on.
    let latest = db.get_checkpoint(&thread, "", None).await.unwrap().unwrap();
    assert_eq!(latest.checkpoint_id, b2);
    let msgs: Vec<&str> = latest
        .state
        .messages
        .iter()
        .map(|m| m.id.as_deref().unwrap())
        .collect();
    assert_eq!(msgs, ["m0", "x1", "x2"]);

    // Paging with `before`.
    let page = db
        .list_checkpoints(
            &thread,
            &HistoryQuery {
                limit: 2,
                before: Some(b1.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let ids: Vec<&str> = page.iter().map(|c| c.checkpoint_id.as_str()).collect();
    assert_eq!(ids, vec![a2.as_str(), &a1]);
    assert_eq!(*page[0].state, s2);
}

async fn history_filters(db: Arc<dyn Persistence>) {
    let thread = new_id();
    let mut parent: Option<(String, ThreadState)> = None;
    for i in 0..6 {
        let source = if i % 3 == 0 { "update" } else { "loop" };
        let (id, s) = put_step(
            &*db,
            &thread,
            parent.as_ref().map(|(id, s)| (id.as_str(), s)),
            None,
            json!({"source": source, "step": i, "parents": {"": format!("p{}", i % 2)}, "tags": ["a", format!("t{i}")]}),
            vec![("agent", say(&format!("m{i}"), "x"))],
        )
        .await;
        parent = Some((id, s));
    }
    let q = |metadata: serde_json::Value, limit: u64| HistoryQuery {
        metadata: Some(obj(metadata)),
        limit,
        ..Default::default()
    };
    let steps = |h: &[Checkpoint]| -> Vec<i64> {
        h.iter()
            .map(|c| c.metadata["step"].as_i64().unwrap())
            .collect()
    };
    let h = db
        .list_checkpoints(&thread, &q(json!({"source": "update"}), 10))
        .await
        .unwrap();
    assert_eq!(steps(&h), vec![3, 0]);
    let h = db
        .list_checkpoints(&thread, &q(json!({"step": 4}), 10))
        .await
        .unwrap();
    assert_eq!(steps(&h), vec![4]);
    assert_eq!(h[0].state.messages.len(), 5);
    let h = db
        .list_checkpoints(&thread, &q(json!({"parents": {"": "p1"}}), 10))
        .await
        .unwrap();
    assert_eq!(steps(&h), vec![5, 3, 1]);
    let h = db
        .list_checkpoints(&thread, &q(json!({"parents": {"": "p1"}}), 2))
        .await
        .unwrap();
    assert_eq!(steps(&h), vec![5, 3], "limit applies after the filter");
    let h = db
        .list_checkpoints(&thread, &q(json!({"tags": ["t2"], "source": "loop"}), 10))
        .await
        .unwrap();
    assert_eq!(steps(&h), vec![2]);
    let h = db
        .list_checkpoints(&thread, &q(json!({"source": "fork"}), 10))
        .await
        .unwrap();
    assert!(h.is_empty());
    let all = db
        .list_checkpoints(
            &thread,
            &HistoryQuery {
                limit: 0,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(all.len(), 6, "limit 0 = everything");
}

async fn rollback_deletes_by_run_and_keeps_forks_readable(db: Arc<dyn Persistence>) {
    let thread = new_id();
    let (c0, s0) = put_step(
        &*db,
        &thread,
        None,
        Some("run-a"),
        json!({}),
        vec![("n", say("m0", "a"))],
    )
    .await;
    let (c1, s1) = put_step(
        &*db,
        &thread,
        Some((&c0, &s0)),
        Some("run-b"),
        json!({}),
        vec![("n", say("m1", "b"))],
    )
    .await;
    let (c2, s2) = put_step(
        &*db,
        &thread,
        Some((&c1, &s1)),
        Some("run-b"),
        json!({}),
        vec![("n", say("m2", "b"))],
    )
    .await;
    db.put_writes(&thread, "", &c2, "t", vec![("messages".into(), json!(1))])
        .await
        .unwrap();
    // A state update forked from inside run-b survives its rollback.
    let (u, su) = put_step(
        &*db,
        &thread,
        Some((&c2, &s2)),
        None,
        json!({"source": "update"}),
        vec![("n", say("u", "edit"))],
    )
    .await;
    let (u2, su2) = put_step(
        &*db,
        &thread,
        Some((&u, &su)),
        None,
        json!({}),
        vec![("n", say("u2", "edit 2"))],
    )
    .await;

    assert_eq!(
        db.delete_checkpoints_for_run(&thread, "run-b")
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        db.delete_checkpoints_for_run(&thread, "run-b")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        db.delete_checkpoints_for_run(&thread, "run-none")
            .await
            .unwrap(),
        0
    );
    let history = db
        .list_checkpoints(&thread, &HistoryQuery::default())
        .await
        .unwrap();
    let ids: Vec<&str> = history.iter().map(|c| c.checkpoint_id.as_str()).collect();
    assert_eq!(ids, vec![u2.as_str(), &u, &c0]);
    assert_eq!(*history[0].state, su2);
    assert_eq!(*history[1].state, su);
    assert_eq!(*history[2].state, s0);
    assert!(
        db.pending_writes(&thread, "", &c2)
            .await
            .unwrap()
            .is_empty()
    );
    // And it can be continued.
    let (_, s3) = put_step(
        &*db,
        &thread,
        Some((&u2, &su2)),
        None,
        json!({}),
        vec![("n", say("m3", "c"))],
    )
    .await;
    let latest = db.get_checkpoint(&thread, "", None).await.unwrap().unwrap();
    assert_eq!(*latest.state, s3);
}

async fn checkpoint_metadata_patch(db: Arc<dyn Persistence>) {
    let thread = new_id();
    let (c0, _) = put_step(
        &*db,
        &thread,
        None,
        None,
        json!({"source": "input", "step": -1}),
        vec![],
    )
    .await;
    db.patch_checkpoint_metadata(&thread, &c0, &obj(json!({"step": 7, "note": "hi"})))
        .await
        .unwrap();
    let got = db
        .get_checkpoint(&thread, "", Some(&c0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        got.metadata,
        obj(json!({"source": "input", "step": 7, "note": "hi"}))
    );
    let missing = new_checkpoint_id();
    assert!(matches!(
        db.patch_checkpoint_metadata(&thread, &missing, &obj(json!({})))
            .await
            .unwrap_err(),
        StoreError::NotFound(_)
    ));
}

async fn pending_writes_by_task(db: Arc<dyn Persistence>) {
    let thread = new_id();
    let (c0, _) = put_step(&*db, &thread, None, None, json!({}), vec![]).await;
    assert!(
        db.pending_writes(&thread, "", &c0)
            .await
            .unwrap()
            .is_empty()
    );
    db.put_writes(
        &thread,
        "",
        &c0,
        "task-b",
        vec![("messages".into(), json!([{"id": "1"}]))],
    )
    .await
    .unwrap();
    db.put_writes(
        &thread,
        "",
        &c0,
        "task-a",
        vec![
            ("messages".into(), json!("x")),
            ("title".into(), json!("t")),
        ],
    )
    .await
    .unwrap();
    // Writing again replaces what the task wrote before.
    db.put_writes(
        &thread,
        "",
        &c0,
        "task-b",
        vec![("todos".into(), json!([]))],
    )
    .await
    .unwrap();
    let writes = db.pending_writes(&thread, "", &c0).await.unwrap();
    let flat: Vec<(String, String, serde_json::Value)> = writes
        .into_iter()
        .map(|w| (w.task_id, w.channel, w.value))
        .collect();
    assert_eq!(
        flat,
        vec![
            ("task-a".into(), "messages".into(), json!("x")),
            ("task-a".into(), "title".into(), json!("t")),
            ("task-b".into(), "todos".into(), json!([])),
        ]
    );
    assert!(
        db.pending_writes(&thread, "other-ns", &c0)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Writes whose messages have no ids would replay with fresh random ids: the store keeps
/// the caller's exact state instead.
async fn writes_without_ids_are_stored_exactly(db: Arc<dyn Persistence>) {
    let thread = new_id();
    let (c0, s0) = put_step(
        &*db,
        &thread,
        None,
        None,
        json!({}),
        vec![("n", say("m0", "x"))],
    )
    .await;
    // The agent applied the write (assigning an id) but hands over the raw write.
    let mut state = s0.clone();
    state
        .apply(&mut StateUpdate::messages(vec![Message::human("no id")]))
        .unwrap();
    let raw = StateUpdate::messages(vec![Message::human("no id")]);
    let id = db
        .put_checkpoint(NewCheckpoint {
            thread_id: thread.clone(),
            checkpoint_ns: String::new(),
            parent_id: Some(c0),
            run_id: None,
            metadata: Default::default(),
            writes: vec![("n".into(), raw)],
            state: Arc::new(state.clone()),
            next: vec![],
            tasks: vec![],
        })
        .await
        .unwrap();
    // Push it out of the latest-state cache, then read it back from the database.
    put_step(
        &*db,
        &thread,
        Some((&id, &state)),
        None,
        json!({}),
        vec![("n", say("m2", "y"))],
    )
    .await;
    let history = db
        .list_checkpoints(&thread, &HistoryQuery::default())
        .await
        .unwrap();
    assert_eq!(history[1].checkpoint_id, id);
    assert_eq!(*history[1].state, state);
    assert_eq!(history[0].state.messages[1], state.messages[1]);
}

/// Many runs writing their chains at once (Postgres batches such inserts into shared
/// statements), some rolled back while they write: every write either lands or fails with
/// "parent not found", finished chains read back exactly, and every history stays readable.
async fn concurrent_chains_with_rollbacks_stay_readable(db: Arc<dyn Persistence>) {
    // The races are timing-dependent: a few rounds make a regression likely to show.
    for _ in 0..3 {
        concurrent_chains_round(&db).await;
    }
}

async fn concurrent_chains_round(db: &Arc<dyn Persistence>) {
    const THREADS: usize = 40;
    const STEPS: usize = 6;
    let mut tasks = Vec::new();
    for t in 0..THREADS {
        let db = db.clone();
        let rolled_back = t % 5 == 0;
        // Odd threads write their steps two at a time, as one chain.
        let per_write = if t % 2 == 1 { 2 } else { 1 };
        tasks.push(tokio::spawn(async move {
            let thread = new_id();
            let run = format!("run-{t}");
            let mut parent: Option<(String, ThreadState)> = None;
            let mut written = 0;
            let mut i = 0;
            while i < STEPS {
                if rolled_back && (i..i + per_write).contains(&(STEPS / 2)) {
                    let db = db.clone();
                    let (thread, run) = (thread.clone(), run.clone());
                    tokio::spawn(async move {
                        db.delete_checkpoints_for_run(&thread, &run).await.unwrap();
                    });
                }
                let mut state = parent.as_ref().map(|(_, s)| s.clone()).unwrap_or_default();
                let mut chain = Vec::new();
                for j in i..i + per_write {
                    let mut updates = vec![say(&format!("m{t}-{j}"), &format!("step {j}"))];
                    state = crate::support::step(&state, &mut updates);
                    chain.push(NewCheckpoint {
                        thread_id: thread.clone(),
                        checkpoint_ns: String::new(),
                        parent_id: parent.as_ref().map(|(id, _)| id.clone()),
                        run_id: Some(run.clone()),
                        metadata: obj(json!({"source": "loop", "step": j})),
                        writes: vec![("agent".into(), updates[0].clone())],
                        state: Arc::new(state.clone()),
                        next: vec![],
                        tasks: vec![],
                    });
                }
                let put = if per_write == 1 {
                    db.put_checkpoint(chain.remove(0)).await.map(|id| vec![id])
                } else {
                    db.put_checkpoints(chain).await
                };
                match put {
                    Ok(ids) => {
                        assert_eq!(ids.len(), per_write);
                        parent = ids.last().map(|id| (id.clone(), state));
                        written += per_write;
                    }
                    Err(StoreError::NotFound(m)) if rolled_back => {
                        assert!(m.starts_with("Parent checkpoint"), "{m}");
                        break;
                    }
                    Err(e) => panic!("thread {t} step {i}: {e}"),
                }
                i += per_write;
            }
            (thread, rolled_back, written, parent)
        }));
    }
    for task in tasks {
        let (thread, rolled_back, written, last) = task.await.unwrap();
        let history = db
            .list_checkpoints(&thread, &HistoryQuery::default())
            .await
            .unwrap_or_else(|e| panic!("history of {thread}: {e}"));
        if rolled_back {
            assert!(history.len() <= written);
            continue;
        }
        assert_eq!(written, STEPS);
        assert_eq!(history.len(), STEPS);
        let (last_id, last_state) = last.unwrap();
        let latest = db.get_checkpoint(&thread, "", None).await.unwrap().unwrap();
        assert_eq!(latest.checkpoint_id, last_id);
        assert_eq!(*latest.state, last_state);
        assert_eq!(latest.state.messages.len(), STEPS);
    }
}

/// `put_checkpoints`: each checkpoint of a chain is the child of the one before (whatever
/// parent it names), ids sort in order, every state reads back; a chain whose first parent
/// is missing writes nothing.
async fn chains_link_in_order_and_fail_whole(db: Arc<dyn Persistence>) {
    let thread = new_id();
    let (root, root_state) = put_step(
        &*db,
        &thread,
        None,
        Some("run-1"),
        json!({"source": "input"}),
        vec![("input", say("m0", "hello"))],
    )
    .await;
    let mut states = Vec::new();
    let mut chain = Vec::new();
    let mut state = root_state.clone();
    for i in 1..=4 {
        let mut w = vec![say(&format!("m{i}"), &format!("step {i}"))];
        state = crate::support::step(&state, &mut w);
        states.push(state.clone());
        chain.push(NewCheckpoint {
            thread_id: thread.clone(),
            checkpoint_ns: String::new(),
            // Ignored after the first.
            parent_id: Some(if i == 1 { root.clone() } else { "bogus".into() }),
            run_id: Some("run-1".into()),
            metadata: obj(json!({"source": "loop", "step": i})),
            writes: vec![(format!("node{i}"), w.remove(0))],
            state: Arc::new(state.clone()),
            next: if i == 4 { vec![] } else { vec!["next".into()] },
            tasks: vec![],
        });
    }
    let ids = db.put_checkpoints(chain).await.unwrap();
    assert_eq!(ids.len(), 4);
    let mut parent = root.clone();
    for (id, state) in ids.iter().zip(&states) {
        assert!(*id > parent, "{id} sorts after {parent}");
        let got = db
            .get_checkpoint(&thread, "", Some(id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.parent_id.as_deref(), Some(parent.as_str()));
        assert_eq!(*got.state, *state);
        parent = id.clone();
    }
    let latest = db.get_checkpoint(&thread, "", None).await.unwrap().unwrap();
    assert_eq!(latest.checkpoint_id, ids[3]);
    assert_eq!(
        db.list_checkpoints(&thread, &HistoryQuery::default())
            .await
            .unwrap()
            .len(),
        5
    );

    // A chain under a parent that does not exist: an error, and nothing of it is stored.
    let ghost = new_checkpoint_id();
    let orphans = (0..3)
        .map(|i| NewCheckpoint {
            thread_id: thread.clone(),
            checkpoint_ns: String::new(),
            parent_id: Some(ghost.clone()),
            run_id: Some("run-2".into()),
            metadata: obj(json!({"source": "loop", "step": 10 + i})),
            writes: vec![],
            state: Arc::new(state.clone()),
            next: vec![],
            tasks: vec![],
        })
        .collect();
    let err = db.put_checkpoints(orphans).await.unwrap_err();
    assert_eq!(
        err,
        StoreError::NotFound(format!("Parent checkpoint {ghost} not found"))
    );
    assert_eq!(
        db.list_checkpoints(&thread, &HistoryQuery::default())
            .await
            .unwrap()
            .len(),
        5
    );
    let latest = db.get_checkpoint(&thread, "", None).await.unwrap().unwrap();
    assert_eq!(latest.checkpoint_id, ids[3]);
}

/// The step that ran from a checkpoint is its oldest `loop` child: a state update made from
/// it earlier, or a later run forked from it, is not.
async fn step_writes_come_from_the_oldest_loop_child(db: Arc<dyn Persistence>) {
    let thread = new_id();
    let (root, s0) = put_step(
        &*db,
        &thread,
        None,
        None,
        json!({"source": "input"}),
        vec![("__input__", say("h1", "hi"))],
    )
    .await;
    assert_eq!(db.step_writes(&thread, "", &root).await.unwrap(), None);
    let (update, _) = put_step(
        &*db,
        &thread,
        Some((&root, &s0)),
        None,
        json!({"source": "update"}),
        vec![("agent", say("u1", "edited"))],
    )
    .await;
    let (ran, s1) = put_step(
        &*db,
        &thread,
        Some((&root, &s0)),
        None,
        json!({"source": "loop"}),
        vec![("agent", say("a1", "answer"))],
    )
    .await;
    put_step(
        &*db,
        &thread,
        Some((&root, &s0)),
        None,
        json!({"source": "loop"}),
        vec![("agent", say("a2", "a later branch"))],
    )
    .await;
    let writes = db.step_writes(&thread, "", &root).await.unwrap().unwrap();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].0, "agent");
    assert_eq!(writes[0].1["messages"][0]["id"], "a1", "{writes:?}");
    assert_eq!(writes[0].1["messages"][0]["content"], "answer");
    // Nothing ran from the leaf or from the update yet; other namespaces are separate.
    assert_eq!(db.step_writes(&thread, "", &ran).await.unwrap(), None);
    assert_eq!(db.step_writes(&thread, "", &update).await.unwrap(), None);
    assert_eq!(db.step_writes(&thread, "sub", &root).await.unwrap(), None);
    put_step(
        &*db,
        &thread,
        Some((&ran, &s1)),
        None,
        json!({"source": "loop"}),
        vec![("tools", say("t1", "tool said"))],
    )
    .await;
    let writes = db.step_writes(&thread, "", &ran).await.unwrap().unwrap();
    assert_eq!(writes[0].0, "tools");
}

/// Debug builds replay a checkpoint's writes onto its parent's state and compare with the
/// state handed over; a release build trusts them and stores only the delta. A caller whose
/// writes do not make its state is a bug that would read back a wrong state in release, so
/// debug builds (every test) refuse it loudly instead of quietly storing a snapshot.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "checkpoint writes do not reproduce the given state")]
async fn writes_that_do_not_make_the_state_fail_loudly_in_debug_builds() {
    let db = crate::support::TestDb::sqlite();
    let store = db.open().await;
    let thread = new_id();
    let (c0, s0) = put_step(
        &*store,
        &thread,
        None,
        None,
        json!({}),
        vec![("n", say("m0", "x"))],
    )
    .await;
    // A write that adds a message, handed over with the parent's state unchanged.
    let _ = store
        .put_checkpoint(NewCheckpoint {
            thread_id: thread.clone(),
            checkpoint_ns: String::new(),
            parent_id: Some(c0),
            run_id: None,
            metadata: Default::default(),
            writes: vec![("n".into(), say("m1", "y"))],
            state: Arc::new(s0),
            next: vec![],
            tasks: vec![],
        })
        .await;
}
