//! Retention: checkpoint pruning keeps what history features need and every kept state
//! reads back unchanged; the sweepers' lease; run expiry; idle threads.

use crate::support::*;
use chrono::Utc;
use fawn_checkpoint::*;
use fawn_state::{Interrupt, Message, StateUpdate, ThreadState};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

conformance!(store:
    pruning_keeps_what_history_needs,
    pruning_leaves_busy_threads_alone,
    one_sweeper_holds_the_lease,
    expiry_takes_finished_runs_only,
    sweeps_can_visit_only_recently_updated_threads,
);

/// Builds a thread checkpoint by checkpoint, remembering which ones must survive pruning.
struct Thread<'a> {
    db: &'a dyn Persistence,
    id: String,
    states: BTreeMap<String, ThreadState>,
    keep: BTreeSet<String>,
    /// The checkpoint holding pending writes.
    pending: String,
}

impl Thread<'_> {
    #[allow(clippy::too_many_arguments)]
    async fn put(
        &mut self,
        parent: Option<&str>,
        source: &str,
        next: &[&str],
        writes: Vec<(&str, StateUpdate)>,
        tasks: Vec<TaskRecord>,
        keep: bool,
    ) -> String {
        let base = parent.map(|p| self.states[p].clone()).unwrap_or_default();
        let mut updates: Vec<StateUpdate> = writes.iter().map(|(_, w)| w.clone()).collect();
        let state = step(&base, &mut updates);
        drop(updates);
        let id = self
            .db
            .put_checkpoint(NewCheckpoint {
                thread_id: self.id.clone(),
                checkpoint_ns: String::new(),
                parent_id: parent.map(str::to_string),
                run_id: Some("run".into()),
                metadata: obj(json!({"source": source})),
                // As given: a message without an id keeps it unset in the writes (the
                // state has the id assigned), which makes the checkpoint a snapshot.
                writes: writes
                    .into_iter()
                    .map(|(n, w)| (n.to_string(), w))
                    .collect(),
                state: Arc::new(state.clone()),
                next: next.iter().map(|s| s.to_string()).collect(),
                tasks,
            })
            .await
            .unwrap();
        self.states.insert(id.clone(), state);
        if keep {
            self.keep.insert(id.clone());
        }
        id
    }
}

fn text(turn: usize, what: &str) -> String {
    format!("{what} of turn {turn}: {}", "x".repeat(1000))
}

fn msg(m: Message) -> StateUpdate {
    StateUpdate::messages(vec![m])
}

/// Ten lead-agent-like turns (input, start, model with a tool call, tool, answer) with an
/// interrupt, a fork, pending writes, a branch thread and a removal among the steps.
async fn build(db: &dyn Persistence) -> Thread<'_> {
    let thread_id = db
        .create_thread(NewThread::default())
        .await
        .unwrap()
        .thread_id;
    let mut t = Thread {
        db,
        id: thread_id,
        states: BTreeMap::new(),
        keep: BTreeSet::new(),
        pending: String::new(),
    };
    let turns = 10;
    let mut head: Option<String> = None;
    for turn in 0..turns {
        // The newest two turns keep every checkpoint.
        let recent = turn >= turns - 2;
        let input = t
            .put(
                head.as_deref(),
                "input",
                &["__start__"],
                vec![],
                vec![],
                true,
            )
            .await;
        let human = Message::human(text(turn, "question")).with_id(format!("h{turn}"));
        let start = t
            .put(
                Some(&input),
                "loop",
                &["model"],
                vec![("__start__", msg(human))],
                vec![],
                recent || turn == 3,
            )
            .await;
        if turn == 3 {
            t.db.put_writes(
                &t.id,
                "",
                &start,
                "task",
                vec![("messages".into(), json!([]))],
            )
            .await
            .unwrap();
            t.pending = start.clone();
        }
        let interrupts = if turn == 1 {
            vec![TaskRecord {
                id: "task".into(),
                name: "tools".into(),
                interrupts: vec![Interrupt {
                    id: "i".repeat(32),
                    value: json!("approve?"),
                }],
                error: None,
            }]
        } else {
            vec![]
        };
        let ai = Message::ai(text(turn, "tool call")).with_id(format!("a{turn}"));
        let call = t
            .put(
                Some(&start),
                "loop",
                &["tools"],
                vec![("model", msg(ai))],
                interrupts,
                recent || turn == 1 || turn == 4,
            )
            .await;
        if turn == 4 {
            t.db.create_thread(NewThread {
                metadata: obj(json!({
                    "branch_parent_thread_id": t.id,
                    "branch_parent_checkpoint_id": call,
                })),
                ..NewThread::default()
            })
            .await
            .unwrap();
        }
        let mut tool_writes = vec![(
            "tools",
            msg(Message::human(text(turn, "tool result")).with_id(format!("t{turn}"))),
        )];
        if turn == 5 {
            // A removal cannot be joined with the steps around it.
            tool_writes.push(("tools", msg(Message::remove("h0"))));
        }
        if turn == 6 {
            // Nor a message whose id was assigned when it was stored (a snapshot).
            tool_writes.push(("tools", msg(Message::human("no id"))));
        }
        let tool = t
            .put(
                Some(&call),
                "loop",
                &["model"],
                tool_writes,
                vec![],
                recent || turn == 2,
            )
            .await;
        if turn == 2 {
            // A state update forked from inside the turn: its base stays.
            t.put(
                Some(&tool),
                "update",
                &[],
                vec![("edit", msg(Message::human("edited").with_id("e2")))],
                vec![],
                true,
            )
            .await;
        }
        let answer = Message::ai(text(turn, "answer")).with_id(format!("r{turn}"));
        let end = t
            .put(
                Some(&tool),
                "loop",
                &[],
                vec![("model", msg(answer))],
                vec![],
                true,
            )
            .await;
        head = Some(end);
    }
    t
}

async fn states(db: &dyn Persistence, thread_id: &str) -> BTreeMap<String, ThreadState> {
    db.list_checkpoints(thread_id, &HistoryQuery::default())
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.checkpoint_id, (*c.state).clone()))
        .collect()
}

async fn pruning_keeps_what_history_needs(db: Arc<dyn Persistence>) {
    let t = build(&*db).await;
    let before = states(&*db, &t.id).await;
    assert_eq!(before.len(), t.states.len());
    for (id, s) in &before {
        assert!(*s == t.states[id], "checkpoint {id} before pruning");
    }
    let policy = PrunePolicy {
        keep_turns: Some(2),
        batch: 3,
        ..PrunePolicy::default()
    };
    let query = SweepQuery {
        prune: Some(policy.clone()),
        ..SweepQuery::default()
    };
    // The estimate plans as pruning does: it counts exactly what goes.
    let estimate = db.estimate_sweep(&query).await.unwrap();
    assert_eq!(estimate.checkpoints as usize, before.len() - t.keep.len());
    assert!(estimate.bytes > 0, "{estimate:?}");
    assert_eq!((estimate.threads, estimate.runs), (0, 0));
    let out = db.prune_checkpoints(&t.id, &policy).await.unwrap();
    assert_eq!(out.deleted, estimate.checkpoints);
    let after = states(&*db, &t.id).await;
    let kept: BTreeSet<String> = after.keys().cloned().collect();
    assert_eq!(kept, t.keep, "what pruning kept");
    assert_eq!(out.deleted as usize, before.len() - t.keep.len());
    assert!(out.batches >= 5, "{out:?}");
    assert!(out.rebased > 0, "{out:?}");
    assert!(
        out.materialized > 0,
        "the removal and removed snapshots: {out:?}"
    );
    for (id, s) in &after {
        assert!(*s == before[id], "state of kept checkpoint {id}");
        let one = db
            .get_checkpoint(&t.id, "", Some(id))
            .await
            .unwrap()
            .unwrap();
        assert!(*one.state == before[id], "checkpoint {id} read alone");
    }
    // Parent links only point at kept checkpoints.
    for c in db
        .list_checkpoints(&t.id, &HistoryQuery::default())
        .await
        .unwrap()
    {
        if let Some(p) = &c.parent_id {
            assert!(kept.contains(p), "{} points at pruned {p}", c.checkpoint_id);
        }
    }
    assert!(
        !db.pending_writes(&t.id, "", &t.pending)
            .await
            .unwrap()
            .is_empty()
    );
    // Nothing more to do; and the thread goes on from its head.
    assert_eq!(
        db.estimate_sweep(&query).await.unwrap(),
        RetentionEstimate::default()
    );
    let again = db.prune_checkpoints(&t.id, &policy).await.unwrap();
    assert_eq!(again.deleted, 0);
    let head = db.get_checkpoint(&t.id, "", None).await.unwrap().unwrap();
    let (next, state) = put_step(
        &*db,
        &t.id,
        Some((&head.checkpoint_id, &head.state)),
        None,
        json!({"source": "input"}),
        vec![("n", say("later", "more"))],
    )
    .await;
    let latest = db.get_checkpoint(&t.id, "", None).await.unwrap().unwrap();
    assert_eq!(latest.checkpoint_id, next);
    assert_eq!(*latest.state, state);

    // Pruning by age alone: nothing is old enough.
    let t2 = build(&*db).await;
    let young = PrunePolicy {
        keep_after: Some(Utc::now() - chrono::Duration::days(1)),
        ..PrunePolicy::default()
    };
    assert_eq!(
        db.prune_checkpoints(&t2.id, &young).await.unwrap().deleted,
        0
    );
    let old = PrunePolicy {
        keep_after: Some(Utc::now() + chrono::Duration::seconds(5)),
        ..PrunePolicy::default()
    };
    let out = db.prune_checkpoints(&t2.id, &old).await.unwrap();
    assert!(out.deleted > 0);
    for (id, s) in states(&*db, &t2.id).await {
        assert!(s == t2.states[&id], "checkpoint {id} after pruning by age");
    }
}

async fn pruning_leaves_busy_threads_alone(db: Arc<dyn Persistence>) {
    let t = build(&*db).await;
    db.create_run(NewRun {
        thread_id: t.id.clone(),
        assistant_id: "asst".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let policy = PrunePolicy {
        keep_turns: Some(1),
        ..PrunePolicy::default()
    };
    assert_eq!(
        db.prune_checkpoints(&t.id, &policy).await.unwrap(),
        PruneOutcome::default()
    );
    assert!(
        !db.retention_threads(None, None, 1000)
            .await
            .unwrap()
            .contains(&t.id)
    );
    assert_eq!(states(&*db, &t.id).await.len(), t.states.len());
}

async fn one_sweeper_holds_the_lease(db: Arc<dyn Persistence>) {
    let now = Utc::now();
    let later = now + chrono::Duration::minutes(10);
    assert!(db.try_lease("retention", "a", now, later).await.unwrap());
    assert!(!db.try_lease("retention", "b", now, later).await.unwrap());
    // The holder renews; another name is another lease.
    assert!(db.try_lease("retention", "a", now, later).await.unwrap());
    assert!(db.try_lease("other", "b", now, later).await.unwrap());
    // Once expired, it goes to whoever asks first.
    let after = later + chrono::Duration::seconds(1);
    let until = after + chrono::Duration::minutes(10);
    assert!(db.try_lease("retention", "b", after, until).await.unwrap());
    assert!(!db.try_lease("retention", "a", after, until).await.unwrap());
    // Racing for a free lease: exactly one wins.
    let db2 = db.clone();
    let (x, y) = tokio::join!(
        db.try_lease("race", "x", now, later),
        db2.try_lease("race", "y", now, later)
    );
    assert!(x.unwrap() ^ y.unwrap());
}

async fn expiry_takes_finished_runs_only(db: Arc<dyn Persistence>) {
    let thread = db
        .create_thread(NewThread::default())
        .await
        .unwrap()
        .thread_id;
    let idle = db
        .create_thread(NewThread::default())
        .await
        .unwrap()
        .thread_id;
    let new_run = || NewRun {
        thread_id: thread.clone(),
        assistant_id: "asst".into(),
        ..Default::default()
    };
    let event = |what: &str| NewRunEvent {
        event_type: "llm.human.input".into(),
        category: "message".into(),
        content: json!({"text": what}),
        metadata: Default::default(),
        created_at: Utc::now(),
    };
    let done = claimed_run(&*db, new_run()).await;
    db.append_run_events(&thread, &done.run_id, vec![event("a"), event("b")])
        .await
        .unwrap();
    finish_success(&*db, &done.run_id).await;
    let running = claimed_run(&*db, new_run()).await;
    db.append_run_events(&thread, &running.run_id, vec![event("c")])
        .await
        .unwrap();
    let pending = db.create_run(new_run()).await.unwrap().run;

    let future = Utc::now() + chrono::Duration::hours(1);
    let runs_query = |before| SweepQuery {
        runs_before: Some(before),
        ..SweepQuery::default()
    };
    let estimate = db.estimate_sweep(&runs_query(future)).await.unwrap();
    assert_eq!((estimate.runs, estimate.run_events), (1, 2), "{estimate:?}");
    assert!(estimate.bytes > 0);
    assert_eq!(
        db.estimate_sweep(&runs_query(Utc::now() - chrono::Duration::hours(1)))
            .await
            .unwrap(),
        RetentionEstimate::default()
    );
    // Not old enough yet.
    let none = db
        .expire_runs(Utc::now() - chrono::Duration::hours(1), 100)
        .await
        .unwrap();
    assert_eq!(none, ExpiredRuns::default());
    let out = db.expire_runs(future, 100).await.unwrap();
    assert_eq!(
        out,
        ExpiredRuns {
            runs: 1,
            run_events: 2
        }
    );
    assert!(db.get_run(&done.run_id).await.unwrap().is_none());
    assert!(db.get_run(&running.run_id).await.unwrap().is_some());
    assert!(db.get_run(&pending.run_id).await.unwrap().is_some());
    let left = db
        .thread_events(&thread, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].run_id, running.run_id);
    assert_eq!(
        db.expire_runs(future, 100).await.unwrap(),
        ExpiredRuns::default()
    );
    assert_eq!(
        db.estimate_sweep(&runs_query(future)).await.unwrap(),
        RetentionEstimate::default()
    );

    // Idle threads: the busy one is not among them, and neither is one with its own TTL.
    let idle_ids = db.idle_threads(future, 100).await.unwrap();
    assert!(idle_ids.contains(&idle));
    assert!(!idle_ids.contains(&thread));
    let estimate = db
        .estimate_sweep(&SweepQuery {
            idle_threads: Some((future, PruneStrategy::Delete)),
            ..SweepQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(estimate.threads, idle_ids.len() as u64, "{estimate:?}");
    assert!(
        db.idle_threads(Utc::now() - chrono::Duration::hours(1), 100)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn sweeps_can_visit_only_recently_updated_threads(db: Arc<dyn Persistence>) {
    let a = db.create_thread(NewThread::default()).await.unwrap();
    let b = db.create_thread(NewThread::default()).await.unwrap();
    let listed = |since| {
        let db = db.clone();
        async move { db.retention_threads(None, since, 1000).await.unwrap() }
    };
    let all = listed(None).await;
    assert!(all.contains(&a.thread_id) && all.contains(&b.thread_id));
    let (newest, newest_id) = if a.updated_at >= b.updated_at {
        (a.updated_at, &a.thread_id)
    } else {
        (b.updated_at, &b.thread_id)
    };
    let later = newest + chrono::Duration::microseconds(1);
    assert!(listed(Some(newest)).await.contains(newest_id));
    assert!(listed(Some(later)).await.is_empty());
    // A run's end updates its thread, so the next sweep visits it again.
    let run = claimed_run(
        &*db,
        NewRun {
            thread_id: a.thread_id.clone(),
            assistant_id: "asst".into(),
            ..Default::default()
        },
    )
    .await;
    // Busy threads are not visited.
    assert!(listed(Some(later)).await.is_empty());
    finish_success(&*db, &run.run_id).await;
    assert_eq!(listed(Some(later)).await, vec![a.thread_id.clone()]);
}

/// Ends claimed run `run_id` (claimed by worker `w`) successfully.
async fn finish_success(db: &dyn Persistence, run_id: &str) {
    db.finish_run(
        run_id,
        "w",
        RunFinish {
            status: RunStatus::Success,
            error: None,
            stop_reason: None,
            thread: ThreadSummary::default(),
        },
    )
    .await
    .unwrap();
}
