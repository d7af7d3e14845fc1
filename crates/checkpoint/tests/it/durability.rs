use crate::support::{conformance, obj, put_step, say};
use fawn_checkpoint::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

conformance!(store: truncate_and_ping; config: everything_survives_a_restart, late_writes_after_a_rollback_are_refused);

/// Everything acknowledged is there after the process closes its connections and a new one
/// opens the same database; a run whose server died mid-run is reaped and resumes from its
/// last checkpoint.
async fn everything_survives_a_restart(config: BackendConfig) {
    let db = open(&config).await.unwrap();
    let assistant = db
        .create_assistant(NewAssistant {
            graph_id: "agent".into(),
            name: "a".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let thread = db
        .create_thread(NewThread {
            metadata: obj(json!({"k": "v"})),
            ..Default::default()
        })
        .await
        .unwrap();
    let tid = thread.thread_id.clone();
    let crashed = db
        .create_run(NewRun {
            thread_id: tid.clone(),
            assistant_id: assistant.assistant_id.clone(),
            kwargs: obj(json!({"input": {"messages": [{"type": "human", "content": "hi"}]}})),
            ..Default::default()
        })
        .await
        .unwrap()
        .run;
    let queued = db
        .create_run(NewRun {
            thread_id: tid.clone(),
            assistant_id: assistant.assistant_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .run;
    let claimed = db
        .claim_next_run("node-1", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.run_id, crashed.run_id);
    // The run writes a few checkpoints, then the server dies.
    let mut parent: Option<(String, fawn_state::ThreadState)> = None;
    for i in 0..5 {
        let (id, s) = put_step(
            &*db,
            &tid,
            parent.as_ref().map(|(id, s)| (id.as_str(), s)),
            Some(&crashed.run_id),
            json!({"step": i}),
            vec![("agent", say(&format!("m{i}"), &"y".repeat(2000)))],
        )
        .await;
        parent = Some((id, s));
    }
    let (last_id, last_state) = parent.unwrap();
    db.put_writes(
        &tid,
        "",
        &last_id,
        "tools:1",
        vec![("messages".into(), json!("partial"))],
    )
    .await
    .unwrap();
    let cron = db
        .create_cron(NewCron {
            assistant_id: assistant.assistant_id.clone(),
            schedule: "* * * * *".into(),
            enabled: true,
            ..Default::default()
        })
        .await
        .unwrap();
    db.put_item(PutItem {
        namespace: vec!["users".into(), "u1".into()],
        key: "prefs".into(),
        value: obj(json!({"theme": "dark"})),
        ttl_minutes: None,
    })
    .await
    .unwrap();
    db.close().await;
    assert!(!db.ping().await, "closed");
    assert!(matches!(
        db.get_thread(&tid).await,
        Err(StoreError::Database(m)) if m.contains("closed")
    ));
    drop(db);

    let db = open(&config).await.unwrap();
    assert!(db.ping().await);
    assert_eq!(
        db.get_assistant(&assistant.assistant_id).await.unwrap(),
        Some(assistant.clone())
    );
    let t = db.get_thread(&tid).await.unwrap().unwrap();
    assert_eq!(t.metadata, thread.metadata);
    assert_eq!(t.status, ThreadStatus::Busy);
    assert_eq!(db.get_cron(&cron.cron_id).await.unwrap(), Some(cron));
    assert_eq!(
        db.get_item(&["users".into(), "u1".into()], "prefs", false)
            .await
            .unwrap()
            .unwrap()
            .value,
        obj(json!({"theme": "dark"}))
    );
    let history = db
        .list_checkpoints(&tid, &HistoryQuery::default())
        .await
        .unwrap();
    assert_eq!(history.len(), 5);
    assert_eq!(history[0].checkpoint_id, last_id);
    assert_eq!(*history[0].state, last_state);
    assert_eq!(
        db.pending_writes(&tid, "", &last_id).await.unwrap().len(),
        1
    );
    assert_eq!(
        db.get_run(&queued.run_id).await.unwrap().unwrap().status,
        RunStatus::Pending
    );

    // Recovery: the orphaned run's lease expires, it goes back to the queue ahead of the
    // queued one, and the next worker resumes it from its last checkpoint.
    assert_eq!(
        db.claim_next_run("node-2", Duration::from_secs(30))
            .await
            .unwrap(),
        None
    );
    let reaped = db
        .reap_expired_runs(chrono::Utc::now() + chrono::Duration::minutes(5), 3)
        .await
        .unwrap();
    assert_eq!(reaped.len(), 1);
    let resumed = db
        .claim_next_run("node-2", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resumed.run_id, crashed.run_id);
    assert_eq!(resumed.attempt, 2);
    assert_eq!(resumed.kwargs, crashed.kwargs);
    let latest = db.get_checkpoint(&tid, "", None).await.unwrap().unwrap();
    assert_eq!(latest.checkpoint_id, last_id);
    assert_eq!(*latest.state, last_state);
    db.close().await;
}

async fn truncate_and_ping(db: Arc<dyn Persistence>) {
    assert!(db.ping().await);
    let tid = db
        .create_thread(NewThread::default())
        .await
        .unwrap()
        .thread_id;
    let run = db
        .create_run(NewRun {
            thread_id: tid.clone(),
            assistant_id: "a".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .run;
    put_step(
        &*db,
        &tid,
        None,
        None,
        json!({}),
        vec![("n", say("m", "x"))],
    )
    .await;
    db.put_item(PutItem {
        namespace: vec!["n".into()],
        key: "k".into(),
        value: Default::default(),
        ttl_minutes: None,
    })
    .await
    .unwrap();
    db.truncate(&Truncate {
        runs: true,
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(db.get_run(&run.run_id).await.unwrap(), None);
    assert_eq!(
        db.get_thread(&tid).await.unwrap().unwrap().status,
        ThreadStatus::Idle,
        "no run left: not busy"
    );
    assert!(db.get_checkpoint(&tid, "", None).await.unwrap().is_some());
    db.truncate(&Truncate {
        checkpointer: true,
        store: true,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(db.get_checkpoint(&tid, "", None).await.unwrap().is_none());
    assert!(
        db.get_item(&["n".into()], "k", false)
            .await
            .unwrap()
            .is_none()
    );
    assert!(db.get_thread(&tid).await.unwrap().is_some());
    db.truncate(&Truncate {
        threads: true,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(db.get_thread(&tid).await.unwrap().is_none());
}

/// A worker on another node that has not noticed its run was rolled back must not append
/// to the deleted checkpoints: its write fails and the thread stays readable.
async fn late_writes_after_a_rollback_are_refused(config: BackendConfig) {
    let node_a = open(&config).await.unwrap();
    let node_b = open(&config).await.unwrap();
    let tid = node_a
        .create_thread(NewThread::default())
        .await
        .unwrap()
        .thread_id;
    let (c0, s0) = put_step(
        &*node_a,
        &tid,
        None,
        None,
        json!({}),
        vec![("n", say("m0", "kept"))],
    )
    .await;
    let (c1, s1) = put_step(
        &*node_a,
        &tid,
        Some((&c0, &s0)),
        Some("run-x"),
        json!({}),
        vec![("n", say("m1", "x"))],
    )
    .await;
    assert_eq!(
        node_b
            .delete_checkpoints_for_run(&tid, "run-x")
            .await
            .unwrap(),
        1
    );
    // node_a still has c1 as the thread's latest state in its cache.
    let mut next = (*Arc::new(s1.clone())).clone();
    let mut w = vec![say("m2", "late")];
    next.apply_writes(&mut w).unwrap();
    let err = node_a
        .put_checkpoint(NewCheckpoint {
            thread_id: tid.clone(),
            checkpoint_ns: String::new(),
            parent_id: Some(c1.clone()),
            run_id: Some("run-x".into()),
            metadata: Default::default(),
            writes: vec![("n".into(), w.remove(0))],
            state: Arc::new(next),
            next: vec![],
            tasks: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::NotFound(format!("Parent checkpoint {c1} not found"))
    );
    for node in [&node_a, &node_b] {
        let latest = node.get_checkpoint(&tid, "", None).await.unwrap().unwrap();
        assert_eq!(latest.checkpoint_id, c0);
        assert_eq!(*latest.state, s0);
    }
    node_a.close().await;
    node_b.close().await;
}
