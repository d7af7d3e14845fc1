use crate::support::{conformance, new_id, obj, put_step, say};
use fawn_checkpoint::*;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

conformance!(store:
    run_create_get_list_delete,
    multitask_strategies,
    claim_is_fifo_per_thread_and_one_running_per_thread,
    claim_specific_run,
    claim_at_creation,
    concurrent_claimers_never_share_a_run,
    heartbeat_and_finish_need_the_owner,
    heartbeat_many_renews_the_owned_runs_in_one_go,
    finish_records_the_thread_summary,
    reaper_requeues_then_gives_up,
    cancel_semantics,
    release_run_requeues_or_ends_cancelled_runs,
    signals_carry_cancels_and_progress,
);

const LEASE: Duration = Duration::from_secs(30);

fn new_run(thread_id: &str) -> NewRun {
    NewRun {
        thread_id: thread_id.to_string(),
        assistant_id: "asst".into(),
        ..Default::default()
    }
}

async fn thread(db: &Arc<dyn Persistence>) -> String {
    db.create_thread(NewThread::default())
        .await
        .unwrap()
        .thread_id
}

fn success() -> RunFinish {
    RunFinish {
        status: RunStatus::Success,
        error: None,
        stop_reason: None,
        thread: ThreadSummary::default(),
    }
}

async fn status_of(db: &Arc<dyn Persistence>, thread_id: &str) -> ThreadStatus {
    db.get_thread(thread_id).await.unwrap().unwrap().status
}

async fn run_create_get_list_delete(db: Arc<dyn Persistence>) {
    // Creating on a missing thread fails unless asked to create it.
    let tid = new_id();
    assert_eq!(
        db.create_run(new_run(&tid)).await.unwrap_err(),
        StoreError::NotFound(format!("Thread with ID {tid} not found"))
    );
    assert_eq!(db.get_thread(&tid).await.unwrap(), None);
    let created = db
        .create_run(NewRun {
            metadata: obj(json!({"m": 1})),
            kwargs: obj(json!({"input": {"messages": []}, "stream_mode": ["values"]})),
            create_thread_if_missing: Some(obj(json!({"graph_id": "agent"}))),
            ..new_run(&tid)
        })
        .await
        .unwrap();
    assert!(created.inflight.is_empty());
    let run = created.run;
    assert_eq!(
        uuid::Uuid::parse_str(&run.run_id)
            .unwrap()
            .get_version_num(),
        7
    );
    assert_eq!(run.status, RunStatus::Pending);
    assert_eq!(run.attempt, 0);
    assert_eq!(run.multitask_strategy, MultitaskStrategy::Enqueue);
    assert_eq!(run.metadata, obj(json!({"m": 1})));
    assert_eq!(run.kwargs["stream_mode"], json!(["values"]));
    assert_eq!(run.available_at, run.created_at);
    assert_eq!(run.owner, None);
    let t = db.get_thread(&tid).await.unwrap().unwrap();
    assert_eq!(t.status, ThreadStatus::Busy);
    assert_eq!(t.metadata, obj(json!({"graph_id": "agent"})));
    assert_eq!(db.get_run(&run.run_id).await.unwrap(), Some(run.clone()));

    let dup = db
        .create_run(NewRun {
            run_id: Some(run.run_id.clone()),
            ..new_run(&tid)
        })
        .await
        .unwrap_err();
    assert_eq!(
        dup,
        StoreError::Conflict(format!("Run with ID {} already exists", run.run_id))
    );

    let mut all = vec![run.run_id.clone()];
    for _ in 0..3 {
        all.push(db.create_run(new_run(&tid)).await.unwrap().run.run_id);
    }
    let listed = db.list_runs(&tid, &RunQuery::default()).await.unwrap();
    let ids: Vec<String> = listed.iter().map(|r| r.run_id.clone()).collect();
    let mut newest_first = all.clone();
    newest_first.reverse();
    assert_eq!(ids, newest_first);
    let page = db
        .list_runs(
            &tid,
            &RunQuery {
                limit: 2,
                offset: 1,
                status: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(page[0].run_id, newest_first[1]);
    let claimed = db.claim_next_run("w", LEASE).await.unwrap().unwrap();
    assert_eq!(claimed.run_id, all[0]);
    let running = db
        .list_runs(
            &tid,
            &RunQuery {
                status: Some(RunStatus::Running),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(running.len(), 1);
    assert!(
        db.list_runs(&new_id(), &RunQuery::default())
            .await
            .unwrap()
            .is_empty()
    );

    for id in &all {
        assert!(db.delete_run(id).await.unwrap());
    }
    assert!(!db.delete_run(&all[0]).await.unwrap());
    assert_eq!(status_of(&db, &tid).await, ThreadStatus::Idle);

    let bad = db
        .create_run(NewRun {
            after_seconds: -1.0,
            ..new_run(&tid)
        })
        .await
        .unwrap_err();
    assert!(matches!(bad, StoreError::Invalid(_)));
}

async fn multitask_strategies(db: Arc<dyn Persistence>) {
    let tid = thread(&db).await;
    let first = db.create_run(new_run(&tid)).await.unwrap().run;
    let reject = db
        .create_run(NewRun {
            multitask_strategy: MultitaskStrategy::Reject,
            ..new_run(&tid)
        })
        .await
        .unwrap_err();
    assert_eq!(
        reject,
        StoreError::Conflict(
            "Thread is already running a task. Wait for it to finish or choose a different multitask strategy."
                .into()
        )
    );
    assert_eq!(
        db.list_runs(&tid, &RunQuery::default())
            .await
            .unwrap()
            .len(),
        1
    );
    db.claim_run(&first.run_id, "w", LEASE)
        .await
        .unwrap()
        .unwrap();
    for strategy in [
        MultitaskStrategy::Enqueue,
        MultitaskStrategy::Interrupt,
        MultitaskStrategy::Rollback,
    ] {
        let created = db
            .create_run(NewRun {
                multitask_strategy: strategy,
                ..new_run(&tid)
            })
            .await
            .unwrap();
        assert_eq!(created.run.multitask_strategy, strategy);
        assert_eq!(created.inflight[0].run_id, first.run_id);
        assert_eq!(created.inflight[0].status, RunStatus::Running);
    }
    let last = db.create_run(new_run(&tid)).await.unwrap();
    assert_eq!(
        last.inflight.len(),
        4,
        "running + three pending, oldest first"
    );
    assert!(
        last.inflight
            .windows(2)
            .all(|w| w[0].created_at <= w[1].created_at)
    );
    // Reject on an idle thread creates the run.
    let idle = thread(&db).await;
    db.create_run(NewRun {
        multitask_strategy: MultitaskStrategy::Reject,
        ..new_run(&idle)
    })
    .await
    .unwrap();
}

async fn claim_is_fifo_per_thread_and_one_running_per_thread(db: Arc<dyn Persistence>) {
    let a = thread(&db).await;
    let b = thread(&db).await;
    let a1 = db.create_run(new_run(&a)).await.unwrap().run;
    let a2 = db.create_run(new_run(&a)).await.unwrap().run;
    let b1 = db.create_run(new_run(&b)).await.unwrap().run;
    let delayed = db
        .create_run(NewRun {
            after_seconds: 3600.0,
            ..new_run(&thread(&db).await)
        })
        .await
        .unwrap()
        .run;
    assert!(delayed.available_at > delayed.created_at);

    let c = db.claim_next_run("w1", LEASE).await.unwrap().unwrap();
    assert_eq!(c.run_id, a1.run_id);
    assert_eq!(c.status, RunStatus::Running);
    assert_eq!(c.attempt, 1);
    assert_eq!(c.owner.as_deref(), Some("w1"));
    assert!(c.lease_expires_at.unwrap() > c.updated_at);
    let c = db.claim_next_run("w2", LEASE).await.unwrap().unwrap();
    assert_eq!(c.run_id, b1.run_id, "a2 waits for a1");
    assert_eq!(db.claim_next_run("w3", LEASE).await.unwrap(), None);
    assert_eq!(db.claim_run(&a2.run_id, "w3", LEASE).await.unwrap(), None);
    assert_eq!(
        db.claim_run(&delayed.run_id, "w3", LEASE).await.unwrap(),
        None
    );

    db.finish_run(&a1.run_id, "w1", success()).await.unwrap();
    assert_eq!(
        status_of(&db, &a).await,
        ThreadStatus::Busy,
        "a2 still queued"
    );
    let c = db.claim_next_run("w1", LEASE).await.unwrap().unwrap();
    assert_eq!(c.run_id, a2.run_id);
    db.finish_run(&a2.run_id, "w1", success()).await.unwrap();
    assert_eq!(status_of(&db, &a).await, ThreadStatus::Idle);
    assert_eq!(db.claim_next_run("w1", LEASE).await.unwrap(), None);
}

async fn claim_specific_run(db: Arc<dyn Persistence>) {
    let a = thread(&db).await;
    let r1 = db.create_run(new_run(&a)).await.unwrap().run;
    let r2 = db.create_run(new_run(&a)).await.unwrap().run;
    assert_eq!(
        db.claim_run(&r2.run_id, "w", LEASE).await.unwrap(),
        None,
        "not before the older run of its thread"
    );
    let got = db.claim_run(&r1.run_id, "w", LEASE).await.unwrap().unwrap();
    assert_eq!(got.run_id, r1.run_id);
    assert_eq!(got.attempt, 1);
    assert_eq!(
        db.claim_run(&r1.run_id, "w2", LEASE).await.unwrap(),
        None,
        "taken"
    );
    assert_eq!(db.claim_run(&new_id(), "w", LEASE).await.unwrap(), None);
}

async fn claim_at_creation(db: Arc<dyn Persistence>) {
    let claim = || {
        Some(RunClaim {
            worker_id: "w".into(),
            lease: LEASE,
        })
    };
    // A free thread (created with the run, even): claimed in the same write.
    let a = new_id();
    let before = chrono::Utc::now();
    let created = db
        .create_run(NewRun {
            claim: claim(),
            create_thread_if_missing: Some(JsonMap::new()),
            ..new_run(&a)
        })
        .await
        .unwrap();
    let run = created.run;
    assert_eq!(
        (run.status, run.attempt, run.owner),
        (RunStatus::Pending, 0, None)
    );
    let claimed = created.claimed.expect("claimed at creation");
    assert_eq!(claimed.run_id, run.run_id);
    assert_eq!(claimed.status, RunStatus::Running);
    assert_eq!(claimed.attempt, 1);
    assert_eq!(claimed.owner.as_deref(), Some("w"));
    let until = claimed.lease_expires_at.unwrap();
    assert!(until >= before + chrono::Duration::seconds(29), "{until}");
    assert_eq!(
        db.get_run(&run.run_id).await.unwrap().as_ref(),
        Some(&claimed)
    );
    assert_eq!(status_of(&db, &a).await, ThreadStatus::Busy);
    // It is this worker's run like any claimed one: renewed, finished, not claimable.
    assert_eq!(db.heartbeat(&run.run_id, "w", LEASE).await.unwrap(), None);
    assert_eq!(db.claim_next_run("w2", LEASE).await.unwrap(), None);

    // A busy thread: the new run waits behind the running one, unclaimed.
    let queued = db
        .create_run(NewRun {
            claim: claim(),
            ..new_run(&a)
        })
        .await
        .unwrap();
    assert_eq!(queued.claimed, None);
    let inflight: Vec<_> = queued
        .inflight
        .iter()
        .map(|r| (r.run_id.as_str(), r.status))
        .collect();
    assert_eq!(
        inflight,
        vec![(claimed.run_id.as_str(), RunStatus::Running)]
    );
    assert_eq!(queued.run.status, RunStatus::Pending);
    db.finish_run(&run.run_id, "w", success()).await.unwrap();
    let next = db.claim_next_run("w2", LEASE).await.unwrap().unwrap();
    assert_eq!(next.run_id, queued.run.run_id, "the queue takes it after");
    db.finish_run(&next.run_id, "w2", success()).await.unwrap();

    // A delayed run is not claimed before it is due; no claim asked, none made.
    let delayed = db
        .create_run(NewRun {
            claim: claim(),
            after_seconds: 60.0,
            ..new_run(&a)
        })
        .await
        .unwrap();
    assert_eq!(delayed.claimed, None);
    let b = thread(&db).await;
    let plain = db.create_run(new_run(&b)).await.unwrap();
    assert_eq!(plain.claimed, None);
    assert_eq!(
        db.get_run(&plain.run.run_id).await.unwrap().unwrap().status,
        RunStatus::Pending
    );

    // Refused creations claim nothing.
    let c = thread(&db).await;
    let first = db.create_run(new_run(&c)).await.unwrap().run;
    let refused = db
        .create_run(NewRun {
            claim: claim(),
            multitask_strategy: MultitaskStrategy::Reject,
            ..new_run(&c)
        })
        .await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    let runs = db
        .list_runs(
            &c,
            &RunQuery {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        (&runs[0].run_id, runs[0].status),
        (&first.run_id, RunStatus::Pending)
    );
}

async fn concurrent_claimers_never_share_a_run(db: Arc<dyn Persistence>) {
    let mut threads = Vec::new();
    for _ in 0..12 {
        threads.push(thread(&db).await);
    }
    let mut expected = HashSet::new();
    for i in 0..96 {
        let run = db
            .create_run(new_run(&threads[i % threads.len()]))
            .await
            .unwrap()
            .run;
        expected.insert(run.run_id);
    }
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    let claimed: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let order: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    // Workers claim until every run has finished, however long other workers hold theirs.
    let finished = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let total = expected.len();
    let mut tasks = Vec::new();
    for w in 0..12 {
        let db = db.clone();
        let running = running.clone();
        let claimed = claimed.clone();
        let order = order.clone();
        let finished = finished.clone();
        tasks.push(tokio::spawn(async move {
            let worker = format!("worker-{w}");
            while finished.load(std::sync::atomic::Ordering::SeqCst) < total {
                let Some(run) = db.claim_next_run(&worker, LEASE).await.unwrap() else {
                    tokio::task::yield_now().await;
                    continue;
                };
                assert!(
                    running.lock().unwrap().insert(run.thread_id.clone()),
                    "two runs running on thread {}",
                    run.thread_id
                );
                let prev = claimed
                    .lock()
                    .unwrap()
                    .insert(run.run_id.clone(), worker.clone());
                assert_eq!(prev, None, "run {} claimed twice", run.run_id);
                order
                    .lock()
                    .unwrap()
                    .entry(run.thread_id.clone())
                    .or_default()
                    .push(run.run_id.clone());
                tokio::task::yield_now().await;
                running.lock().unwrap().remove(&run.thread_id);
                db.finish_run(&run.run_id, &worker, success())
                    .await
                    .unwrap();
                finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let claimed: HashSet<String> = claimed.lock().unwrap().keys().cloned().collect();
    assert_eq!(claimed, expected);
    // FIFO per thread: each thread's runs ran in creation (UUIDv7) order.
    let order = order.lock().unwrap().clone();
    for (t, ids) in &order {
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, &sorted, "thread {t} ran out of order");
    }
    for t in &threads {
        assert_eq!(status_of(&db, t).await, ThreadStatus::Idle);
    }
}

async fn heartbeat_and_finish_need_the_owner(db: Arc<dyn Persistence>) {
    let a = thread(&db).await;
    let run = db.create_run(new_run(&a)).await.unwrap().run;
    assert!(matches!(
        db.heartbeat(&run.run_id, "w", LEASE).await.unwrap_err(),
        StoreError::NotFound(_)
    ));
    let claimed = db
        .claim_next_run("w", Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(db.heartbeat(&run.run_id, "w", LEASE).await.unwrap(), None);
    let after = db.get_run(&run.run_id).await.unwrap().unwrap();
    assert!(
        after.lease_expires_at > claimed.lease_expires_at,
        "lease extended"
    );
    assert!(matches!(
        db.heartbeat(&run.run_id, "other", LEASE).await.unwrap_err(),
        StoreError::NotFound(_)
    ));
    assert!(matches!(
        db.finish_run(&run.run_id, "other", success())
            .await
            .unwrap_err(),
        StoreError::NotFound(_)
    ));
    let bad = db
        .finish_run(
            &run.run_id,
            "w",
            RunFinish {
                status: RunStatus::Running,
                ..success()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(bad, StoreError::Invalid(_)));
    let done = db.finish_run(&run.run_id, "w", success()).await.unwrap();
    assert_eq!(done.status, RunStatus::Success);
    assert_eq!(done.owner, None);
    assert_eq!(done.lease_expires_at, None);
    assert!(matches!(
        db.finish_run(&run.run_id, "w", success())
            .await
            .unwrap_err(),
        StoreError::NotFound(_)
    ));
    assert!(matches!(
        db.heartbeat(&run.run_id, "w", LEASE).await.unwrap_err(),
        StoreError::NotFound(_)
    ));
}

/// Three runs claimed by `w` (one with a cancel requested), one claimed by `other`, one
/// pending and one finished: the batch renews and answers for `w`'s three only, each
/// with its own cancellation, and extends exactly their leases.
async fn heartbeat_many_renews_the_owned_runs_in_one_go(db: Arc<dyn Persistence>) {
    let short = Duration::from_secs(1);
    let mut mine = Vec::new();
    for _ in 0..3 {
        let t = thread(&db).await;
        let run = db.create_run(new_run(&t)).await.unwrap().run;
        let claimed = db
            .claim_run(&run.run_id, "w", short)
            .await
            .unwrap()
            .unwrap();
        mine.push(claimed);
    }
    let t = thread(&db).await;
    let theirs = db.create_run(new_run(&t)).await.unwrap().run;
    let theirs = db
        .claim_run(&theirs.run_id, "other", short)
        .await
        .unwrap()
        .unwrap();
    let t = thread(&db).await;
    let done = db.create_run(new_run(&t)).await.unwrap().run;
    db.claim_run(&done.run_id, "w", short)
        .await
        .unwrap()
        .unwrap();
    db.finish_run(&done.run_id, "w", success()).await.unwrap();
    let t = thread(&db).await;
    let pending = db.create_run(new_run(&t)).await.unwrap().run;
    db.cancel_runs(
        &CancelTarget::Runs {
            thread_id: None,
            run_ids: vec![mine[1].run_id.clone()],
        },
        CancelAction::Interrupt,
    )
    .await
    .unwrap();

    assert!(db.heartbeat_many(&[], "w", LEASE).await.unwrap().is_empty());
    let asked: Vec<String> = mine
        .iter()
        .chain([&theirs, &done, &pending])
        .map(|r| r.run_id.clone())
        .collect();
    let owned = db.heartbeat_many(&asked, "w", LEASE).await.unwrap();
    let expected: HashMap<String, Option<CancelAction>> = [
        (mine[0].run_id.clone(), None),
        (mine[1].run_id.clone(), Some(CancelAction::Interrupt)),
        (mine[2].run_id.clone(), None),
    ]
    .into();
    assert_eq!(owned, expected);
    for r in &mine {
        let after = db.get_run(&r.run_id).await.unwrap().unwrap();
        assert!(
            after.lease_expires_at > r.lease_expires_at,
            "the lease of {} was not extended",
            r.run_id
        );
    }
    let after = db.get_run(&theirs.run_id).await.unwrap().unwrap();
    assert_eq!(
        after.lease_expires_at, theirs.lease_expires_at,
        "another worker's lease moved"
    );
    assert_eq!(after.owner.as_deref(), Some("other"));
    // The same run twice in one batch (a padded statement repeats ids) is answered once.
    let twice = vec![
        mine[0].run_id.clone(),
        mine[0].run_id.clone(),
        mine[2].run_id.clone(),
    ];
    assert_eq!(
        db.heartbeat_many(&twice, "w", LEASE).await.unwrap().len(),
        2
    );
}

async fn finish_records_the_thread_summary(db: Arc<dyn Persistence>) {
    let a = thread(&db).await;
    let run = db.create_run(new_run(&a)).await.unwrap().run;
    db.claim_next_run("w", LEASE).await.unwrap().unwrap();
    let error = json!({"error": "ValueError", "message": "boom"});
    let done = db
        .finish_run(
            &run.run_id,
            "w",
            RunFinish {
                status: RunStatus::Error,
                error: Some(error.clone()),
                stop_reason: Some("loop_capped".into()),
                thread: ThreadSummary {
                    values: Some(json!({"messages": [{"id": "m1"}]})),
                    error: Some(error.clone()),
                    metadata: obj(json!({"graph_id": "agent", "assistant_id": "asst"})),
                    config: Some(obj(json!({"configurable": {"k": 1}}))),
                    ..Default::default()
                },
            },
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Error);
    assert_eq!(done.error, Some(error.clone()));
    assert_eq!(done.stop_reason.as_deref(), Some("loop_capped"));
    let t = db.get_thread(&a).await.unwrap().unwrap();
    assert_eq!(t.status, ThreadStatus::Error);
    assert_eq!(t.error, Some(error));
    assert_eq!(t.values, Some(json!({"messages": [{"id": "m1"}]})));
    assert_eq!(t.metadata["graph_id"], json!("agent"));
    assert_eq!(t.config, obj(json!({"configurable": {"k": 1}})));

    let run = db.create_run(new_run(&a)).await.unwrap().run;
    assert_eq!(status_of(&db, &a).await, ThreadStatus::Busy);
    db.claim_next_run("w", LEASE).await.unwrap().unwrap();
    db.finish_run(
        &run.run_id,
        "w",
        RunFinish {
            thread: ThreadSummary {
                interrupts: obj(json!({"t": [{"id": "i", "value": 1}]})),
                has_next: true,
                ..Default::default()
            },
            ..success()
        },
    )
    .await
    .unwrap();
    let t = db.get_thread(&a).await.unwrap().unwrap();
    assert_eq!(t.status, ThreadStatus::Interrupted);
    assert_eq!(t.error, None, "a later success clears the error");
}

async fn reaper_requeues_then_gives_up(db: Arc<dyn Persistence>) {
    let a = thread(&db).await;
    let run = db.create_run(new_run(&a)).await.unwrap().run;
    let (cp, _) = put_step(
        &*db,
        &a,
        None,
        Some(&run.run_id),
        json!({}),
        vec![("n", say("m", "x"))],
    )
    .await;
    let later = || chrono::Utc::now() + chrono::Duration::hours(1);
    assert!(
        db.reap_expired_runs(later(), 3).await.unwrap().is_empty(),
        "pending runs are not reaped"
    );
    for attempt in 1..=3u32 {
        let c = db
            .claim_next_run(&format!("w{attempt}"), LEASE)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c.run_id, run.run_id);
        assert_eq!(c.attempt, attempt);
        assert!(
            db.reap_expired_runs(chrono::Utc::now(), 3)
                .await
                .unwrap()
                .is_empty(),
            "lease still valid"
        );
        let reaped = db.reap_expired_runs(later(), 3).await.unwrap();
        assert_eq!(reaped.len(), 1);
        if attempt < 3 {
            assert_eq!(reaped[0].status, RunStatus::Pending);
            assert_eq!(reaped[0].owner, None);
            assert_eq!(status_of(&db, &a).await, ThreadStatus::Busy);
            // The dead worker lost the run.
            assert!(matches!(
                db.heartbeat(&run.run_id, &format!("w{attempt}"), LEASE)
                    .await,
                Err(StoreError::NotFound(_))
            ));
        } else {
            assert_eq!(reaped[0].status, RunStatus::Error);
            assert_eq!(reaped[0].stop_reason.as_deref(), Some("orphan_recovered"));
            assert_eq!(
                reaped[0].error.as_ref().unwrap()["error"],
                json!("RunOrphaned")
            );
        }
    }
    let t = db.get_thread(&a).await.unwrap().unwrap();
    assert_eq!(t.status, ThreadStatus::Error);
    assert!(t.error.is_some());
    assert_eq!(db.claim_next_run("w", LEASE).await.unwrap(), None);
    // Its checkpoints stay: a requeued run resumes from them.
    assert_eq!(
        db.get_checkpoint(&a, "", None)
            .await
            .unwrap()
            .unwrap()
            .checkpoint_id,
        cp
    );
}

async fn cancel_semantics(db: Arc<dyn Persistence>) {
    // Pending + interrupt: ends at once.
    let a = thread(&db).await;
    let p = db.create_run(new_run(&a)).await.unwrap().run;
    let matched = db
        .cancel_runs(
            &CancelTarget::Runs {
                thread_id: Some(a.clone()),
                run_ids: vec![p.run_id.clone()],
            },
            CancelAction::Interrupt,
        )
        .await
        .unwrap();
    assert_eq!(matched.len(), 1);
    assert_eq!(matched[0].status, RunStatus::Pending, "as it was before");
    assert_eq!(
        db.get_run(&p.run_id).await.unwrap().unwrap().status,
        RunStatus::Interrupted
    );
    assert_eq!(status_of(&db, &a).await, ThreadStatus::Idle);
    // Already finished: nothing matches.
    let again = db
        .cancel_runs(
            &CancelTarget::Runs {
                thread_id: None,
                run_ids: vec![p.run_id.clone()],
            },
            CancelAction::Interrupt,
        )
        .await
        .unwrap();
    assert!(again.is_empty());
    // Wrong thread: nothing matches.
    let q = db.create_run(new_run(&a)).await.unwrap().run;
    let wrong = db
        .cancel_runs(
            &CancelTarget::Runs {
                thread_id: Some(new_id()),
                run_ids: vec![q.run_id.clone()],
            },
            CancelAction::Interrupt,
        )
        .await
        .unwrap();
    assert!(wrong.is_empty());

    // Pending + rollback: the run and its checkpoints are gone (a requeued run can have some).
    let (cp, _) = put_step(
        &*db,
        &a,
        None,
        Some(&q.run_id),
        json!({}),
        vec![("n", say("m", "x"))],
    )
    .await;
    db.cancel_runs(
        &CancelTarget::Runs {
            thread_id: Some(a.clone()),
            run_ids: vec![q.run_id.clone()],
        },
        CancelAction::Rollback,
    )
    .await
    .unwrap();
    assert_eq!(db.get_run(&q.run_id).await.unwrap(), None);
    assert_eq!(db.get_checkpoint(&a, "", Some(&cp)).await.unwrap(), None);
    assert_eq!(status_of(&db, &a).await, ThreadStatus::Idle);

    // Running: a cancel request the worker sees on its next heartbeat.
    let r = db.create_run(new_run(&a)).await.unwrap().run;
    db.claim_next_run("w", LEASE).await.unwrap().unwrap();
    let matched = db
        .cancel_runs(
            &CancelTarget::Runs {
                thread_id: Some(a.clone()),
                run_ids: vec![r.run_id.clone()],
            },
            CancelAction::Interrupt,
        )
        .await
        .unwrap();
    assert_eq!(matched[0].status, RunStatus::Running);
    let now = db.get_run(&r.run_id).await.unwrap().unwrap();
    assert_eq!(now.status, RunStatus::Running);
    assert_eq!(now.cancel_requested, Some(CancelAction::Interrupt));
    assert_eq!(status_of(&db, &a).await, ThreadStatus::Busy);
    assert_eq!(
        db.heartbeat(&r.run_id, "w", LEASE).await.unwrap(),
        Some(CancelAction::Interrupt)
    );
    db.finish_run(
        &r.run_id,
        "w",
        RunFinish {
            status: RunStatus::Interrupted,
            ..success()
        },
    )
    .await
    .unwrap();
    assert_eq!(status_of(&db, &a).await, ThreadStatus::Idle);

    // Bulk by status.
    let b = thread(&db).await;
    let running = db.create_run(new_run(&b)).await.unwrap().run;
    db.claim_next_run("w", LEASE).await.unwrap().unwrap();
    let pending = db.create_run(new_run(&b)).await.unwrap().run;
    let only_pending = db
        .cancel_runs(
            &CancelTarget::Status {
                pending: true,
                running: false,
            },
            CancelAction::Rollback,
        )
        .await
        .unwrap();
    assert_eq!(only_pending.len(), 1);
    assert_eq!(only_pending[0].run_id, pending.run_id);
    assert_eq!(db.get_run(&pending.run_id).await.unwrap(), None);
    let only_running = db
        .cancel_runs(
            &CancelTarget::Status {
                pending: false,
                running: true,
            },
            CancelAction::Rollback,
        )
        .await
        .unwrap();
    assert_eq!(only_running[0].run_id, running.run_id);
    assert_eq!(
        db.heartbeat(&running.run_id, "w", LEASE).await.unwrap(),
        Some(CancelAction::Rollback)
    );
    assert!(
        db.cancel_runs(
            &CancelTarget::Status {
                pending: false,
                running: false
            },
            CancelAction::Interrupt
        )
        .await
        .unwrap()
        .is_empty()
    );

    // A dead worker's cancelled run is ended by the reaper, not requeued.
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let reaped = db.reap_expired_runs(later, 3).await.unwrap();
    assert_eq!(reaped.len(), 1);
    assert_eq!(
        db.get_run(&running.run_id).await.unwrap(),
        None,
        "rolled back"
    );
    assert_eq!(status_of(&db, &b).await, ThreadStatus::Idle);
}

async fn release_run_requeues_or_ends_cancelled_runs(db: Arc<dyn Persistence>) {
    let a = thread(&db).await;
    let run = db.create_run(new_run(&a)).await.unwrap().run;
    db.claim_next_run("w", LEASE).await.unwrap().unwrap();
    assert!(matches!(
        db.release_run(&run.run_id, "other").await.unwrap_err(),
        StoreError::NotFound(_)
    ));
    db.release_run(&run.run_id, "w").await.unwrap();
    let r = db.get_run(&run.run_id).await.unwrap().unwrap();
    assert_eq!(r.status, RunStatus::Pending);
    assert_eq!(r.owner, None);
    assert_eq!(r.attempt, 0, "a graceful release is not a failed attempt");
    assert_eq!(status_of(&db, &a).await, ThreadStatus::Busy);
    let again = db.claim_next_run("w2", LEASE).await.unwrap().unwrap();
    assert_eq!(again.run_id, run.run_id);
    assert_eq!(again.attempt, 1);
    db.cancel_runs(
        &CancelTarget::Runs {
            thread_id: None,
            run_ids: vec![run.run_id.clone()],
        },
        CancelAction::Interrupt,
    )
    .await
    .unwrap();
    db.release_run(&run.run_id, "w2").await.unwrap();
    assert_eq!(
        db.get_run(&run.run_id).await.unwrap().unwrap().status,
        RunStatus::Interrupted
    );
    assert_eq!(status_of(&db, &a).await, ThreadStatus::Idle);
}

/// Postgres announces cancels of running runs and runs' progress to every listening
/// process; SQLite (one process) has no push channel and announcing is a no-op.
async fn signals_carry_cancels_and_progress(db: Arc<dyn Persistence>) {
    use futures::StreamExt;
    let Some(mut signals) = db.signals().await else {
        assert_eq!(db.backend(), "sqlite");
        db.announce_progress(&["r".into()]).await.unwrap();
        return;
    };
    assert_eq!(db.backend(), "postgres");
    // Channels are per database: other tests' schemas announce on them too.
    let a = thread(&db).await;
    let run = db.create_run(new_run(&a)).await.unwrap().run;
    db.claim_run(&run.run_id, "w", LEASE)
        .await
        .unwrap()
        .unwrap();
    let ours = [
        run.run_id.clone(),
        format!("{}-1", run.run_id),
        format!("{}-2", run.run_id),
    ];
    let mut next = async || loop {
        let s = tokio::time::timeout(Duration::from_secs(30), signals.next())
            .await
            .expect("a signal arrives")
            .expect("the stream goes on");
        let (Signal::Cancel { run_id, .. } | Signal::Progress { run_id }) = &s;
        if ours.contains(run_id) {
            return s;
        }
    };
    db.cancel_runs(
        &CancelTarget::Runs {
            thread_id: None,
            run_ids: vec![run.run_id.clone()],
        },
        CancelAction::Rollback,
    )
    .await
    .unwrap();
    assert_eq!(
        next().await,
        Signal::Cancel {
            run_id: run.run_id.clone(),
            action: CancelAction::Rollback
        }
    );
    db.announce_progress(&[]).await.unwrap();
    db.announce_progress(&ours[1..]).await.unwrap();
    let mut got = vec![next().await, next().await];
    got.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(
        got,
        vec![
            Signal::Progress {
                run_id: ours[1].clone()
            },
            Signal::Progress {
                run_id: ours[2].clone()
            }
        ]
    );
}
