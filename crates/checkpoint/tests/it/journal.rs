//! The run-event journal and run feedback.

use crate::support::{conformance, new_id, obj};
use chrono::Utc;
use fawn_checkpoint::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

conformance!(store:
    run_events_append_and_page,
    run_events_by_run_and_type,
    run_events_concurrent_appends_get_distinct_seqs,
    run_events_go_with_their_thread,
    run_events_seed_only_an_empty_journal,
    feedback_upsert_list_delete,
    finish_with_journal_writes_rows_and_end,
    finish_with_journal_seeds_an_empty_journal,
    finish_with_journal_after_other_appends,
    finish_with_journal_when_not_owned_still_writes_rows,
    finish_with_journal_without_rows;
    config: finish_with_journal_finishes_when_rows_are_refused,
);

async fn thread(db: &Arc<dyn Persistence>) -> String {
    let id = new_id();
    db.create_thread(NewThread {
        thread_id: Some(id.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    id
}

fn event(event_type: &str, n: u64) -> NewRunEvent {
    NewRunEvent {
        event_type: event_type.to_string(),
        category: "message".to_string(),
        content: json!({"type": "ai", "id": format!("m{n}"), "content": format!("text {n}")}),
        metadata: obj(json!({"caller": "lead_agent"})),
        created_at: Utc::now(),
    }
}

fn seqs(rows: &[RunEvent]) -> Vec<i64> {
    rows.iter().map(|r| r.seq).collect()
}

async fn run_events_append_and_page(db: Arc<dyn Persistence>) {
    let t = thread(&db).await;
    let first = db
        .append_run_events(
            &t,
            "r1",
            (0..3).map(|n| event("llm.ai.response", n)).collect(),
        )
        .await
        .unwrap();
    assert_eq!(seqs(&first), vec![1, 2, 3]);
    let second = db
        .append_run_events(
            &t,
            "r2",
            (3..5).map(|n| event("llm.ai.response", n)).collect(),
        )
        .await
        .unwrap();
    assert_eq!(seqs(&second), vec![4, 5]);
    assert!(
        db.append_run_events(&t, "r3", Vec::new())
            .await
            .unwrap()
            .is_empty()
    );

    let all = db
        .thread_events(
            &t,
            &EventQuery {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(seqs(&all), vec![1, 2, 3, 4, 5]);
    assert_eq!(all[0].run_id, "r1");
    assert_eq!(all[4].run_id, "r2");
    assert_eq!(all[4].content["id"], "m4");
    assert_eq!(all[4].metadata["caller"], "lead_agent");
    assert_eq!(
        all[4], second[1],
        "what is read back is what the append returned"
    );

    // Newest first window, returned ascending.
    let last_two = db
        .thread_events(
            &t,
            &EventQuery {
                limit: 2,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(seqs(&last_two), vec![4, 5]);
    let before = db
        .thread_events(
            &t,
            &EventQuery {
                limit: 2,
                before_seq: Some(4),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(seqs(&before), vec![2, 3]);
    let after = db
        .thread_events(
            &t,
            &EventQuery {
                limit: 2,
                after_seq: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(seqs(&after), vec![2, 3]);
    let other_category = db
        .thread_events(
            &t,
            &EventQuery {
                limit: 10,
                category: Some("trace".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(other_category.is_empty());

    let missing = db
        .append_run_events(&new_id(), "r", vec![event("llm.ai.response", 0)])
        .await
        .unwrap_err();
    assert!(matches!(missing, StoreError::NotFound(_)), "{missing:?}");
}

async fn run_events_by_run_and_type(db: Arc<dyn Persistence>) {
    let t = thread(&db).await;
    db.append_run_events(
        &t,
        "r1",
        vec![
            event("llm.human.input", 0),
            event("llm.ai.response", 1),
            event("llm.tool.result", 2),
            event("llm.ai.response", 3),
        ],
    )
    .await
    .unwrap();
    db.append_run_events(&t, "r2", vec![event("llm.ai.response", 4)])
        .await
        .unwrap();
    let q = EventQuery {
        limit: 100,
        ..Default::default()
    };
    let r1 = db.run_events(&t, "r1", &q).await.unwrap();
    assert_eq!(seqs(&r1), vec![1, 2, 3, 4]);
    let ai = db
        .run_events(
            &t,
            "r1",
            &EventQuery {
                limit: 100,
                event_types: vec!["llm.ai.response".into(), "llm.human.input".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(seqs(&ai), vec![1, 2, 4]);
    let after = db
        .run_events(
            &t,
            "r1",
            &EventQuery {
                limit: 1,
                after_seq: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(seqs(&after), vec![3]);
    assert_eq!(seqs(&db.run_events(&t, "r2", &q).await.unwrap()), vec![5]);
    assert!(db.run_events(&t, "nope", &q).await.unwrap().is_empty());
    assert!(db.run_events(&new_id(), "r1", &q).await.unwrap().is_empty());
}

async fn run_events_concurrent_appends_get_distinct_seqs(db: Arc<dyn Persistence>) {
    let t = thread(&db).await;
    let mut tasks = Vec::new();
    // The first appends find an empty journal (the locking path), the later ones rows (the
    // one-statement path): both kinds race.
    for run in 0..16 {
        let db = db.clone();
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            db.append_run_events(
                &t,
                &format!("r{run}"),
                (0..5).map(|n| event("llm.ai.response", n)).collect(),
            )
            .await
            .unwrap()
        }));
    }
    for task in tasks {
        let rows = task.await.unwrap();
        let s = seqs(&rows);
        // One run's rows are consecutive.
        assert_eq!(s, (s[0]..s[0] + 5).collect::<Vec<_>>());
    }
    let all = db
        .thread_events(
            &t,
            &EventQuery {
                limit: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(seqs(&all), (1..=80).collect::<Vec<_>>());
    for chunk in all.chunks(5) {
        assert!(chunk.iter().all(|r| r.run_id == chunk[0].run_id));
    }
}

async fn run_events_go_with_their_thread(db: Arc<dyn Persistence>) {
    let t = thread(&db).await;
    let other = thread(&db).await;
    db.append_run_events(&t, "r1", vec![event("llm.ai.response", 0)])
        .await
        .unwrap();
    db.append_run_events(&other, "r2", vec![event("llm.ai.response", 0)])
        .await
        .unwrap();
    db.upsert_feedback(NewFeedback {
        thread_id: t.clone(),
        run_id: "r1".into(),
        rating: 1,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(db.delete_thread(&t).await.unwrap());
    let q = EventQuery {
        limit: 10,
        ..Default::default()
    };
    assert!(db.thread_events(&t, &q).await.unwrap().is_empty());
    assert!(db.list_feedback(&t, None, None).await.unwrap().is_empty());
    assert_eq!(db.thread_events(&other, &q).await.unwrap().len(), 1);
    // A new thread with the same id starts again at seq 1.
    db.create_thread(NewThread {
        thread_id: Some(t.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    let rows = db
        .append_run_events(&t, "r3", vec![event("llm.ai.response", 0)])
        .await
        .unwrap();
    assert_eq!(seqs(&rows), vec![1]);
}

async fn feedback_upsert_list_delete(db: Arc<dyn Persistence>) {
    let t = thread(&db).await;
    let ann = db
        .upsert_feedback(NewFeedback {
            thread_id: t.clone(),
            run_id: "r1".into(),
            user_id: "ann".into(),
            message_id: Some("m1".into()),
            rating: 1,
            comment: Some("good".into()),
        })
        .await
        .unwrap();
    assert_eq!((ann.rating, ann.comment.as_deref()), (1, Some("good")));
    assert_eq!(ann.message_id.as_deref(), Some("m1"));
    let again = db
        .upsert_feedback(NewFeedback {
            thread_id: t.clone(),
            run_id: "r1".into(),
            user_id: "ann".into(),
            rating: -1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        again.feedback_id, ann.feedback_id,
        "one feedback per run and user"
    );
    assert_eq!((again.rating, again.comment.as_deref()), (-1, None));
    assert_eq!(again.message_id.as_deref(), Some("m1"));
    assert_eq!(again.created_at, ann.created_at);
    assert!(again.updated_at >= ann.updated_at);

    let bob = db
        .upsert_feedback(NewFeedback {
            thread_id: t.clone(),
            run_id: "r1".into(),
            user_id: "bob".into(),
            rating: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_ne!(bob.feedback_id, ann.feedback_id);
    let bad = db
        .upsert_feedback(NewFeedback {
            thread_id: t.clone(),
            run_id: "r1".into(),
            user_id: "bob".into(),
            rating: 2,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(bad, StoreError::Invalid(_)), "{bad:?}");

    assert_eq!(
        db.list_feedback(&t, Some("r1"), None).await.unwrap().len(),
        2
    );
    let mine = db.list_feedback(&t, Some("r1"), Some("bob")).await.unwrap();
    assert_eq!(mine, vec![bob.clone()]);
    assert!(
        db.list_feedback(&t, Some("r2"), None)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        db.get_feedback(&bob.feedback_id).await.unwrap(),
        Some(bob.clone())
    );

    assert!(db.delete_run_feedback(&t, "r1", "ann").await.unwrap());
    assert!(!db.delete_run_feedback(&t, "r1", "ann").await.unwrap());
    assert!(db.delete_feedback(&bob.feedback_id).await.unwrap());
    assert!(!db.delete_feedback(&bob.feedback_id).await.unwrap());
    assert_eq!(db.get_feedback(&bob.feedback_id).await.unwrap(), None);
    assert!(db.list_feedback(&t, None, None).await.unwrap().is_empty());
}

async fn run_events_seed_only_an_empty_journal(db: Arc<dyn Persistence>) {
    let t = thread(&db).await;
    let seed = || {
        vec![
            ("old-1".to_string(), event("llm.human.input", 0)),
            ("old-1".to_string(), event("llm.ai.response", 1)),
        ]
    };
    let rows = db
        .append_run_events_seeded(&t, "r1", vec![event("llm.ai.response", 2)], Some(&seed))
        .await
        .unwrap();
    assert_eq!(seqs(&rows), vec![1, 2, 3]);
    let runs: Vec<&str> = rows.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(runs, vec!["old-1", "old-1", "r1"]);
    let rows = db
        .append_run_events_seeded(&t, "r2", vec![event("llm.ai.response", 3)], Some(&seed))
        .await
        .unwrap();
    assert_eq!(
        seqs(&rows),
        vec![4],
        "the seed is only used for an empty journal"
    );
    let all = db
        .thread_events(
            &t,
            &EventQuery {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(seqs(&all), vec![1, 2, 3, 4]);
}

// ------------------------------------------------------- finishing a run with its journal

const LEASE: Duration = Duration::from_secs(30);

/// A running run (claimed by worker `w`) on thread `t`.
async fn running(db: &Arc<dyn Persistence>, t: &str) -> Run {
    let run = db
        .create_run(NewRun {
            thread_id: t.to_string(),
            assistant_id: "asst".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .run;
    db.claim_run(&run.run_id, "w", LEASE)
        .await
        .unwrap()
        .unwrap()
}

fn finish_ok(n: u64) -> RunFinish {
    RunFinish {
        status: RunStatus::Success,
        error: None,
        stop_reason: None,
        thread: ThreadSummary {
            values: Some(json!({"messages": [{"id": format!("m{n}")}]})),
            metadata: obj(json!({"graph_id": "agent", "assistant_id": "asst"})),
            config: Some(obj(json!({"configurable": {"n": n}}))),
            ..Default::default()
        },
    }
}

fn rows(run: &Run, events: Vec<NewRunEvent>) -> Option<JournalAppend<'_>> {
    Some(JournalAppend {
        thread_id: &run.thread_id,
        run_id: &run.run_id,
        events,
        seed: None,
    })
}

async fn all_events(db: &Arc<dyn Persistence>, t: &str) -> Vec<RunEvent> {
    db.thread_events(
        t,
        &EventQuery {
            limit: 1000,
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

/// The run ended as `finish_ok(n)` says and left that on its thread.
async fn assert_finished(db: &Arc<dyn Persistence>, run: &Run, n: u64) {
    let stored = db.get_run(&run.run_id).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Success);
    assert_eq!(stored.owner, None);
    let t = db.get_thread(&run.thread_id).await.unwrap().unwrap();
    assert_eq!(t.status, ThreadStatus::Idle);
    assert_eq!(
        t.values,
        Some(json!({"messages": [{"id": format!("m{n}")}]}))
    );
    assert_eq!(t.metadata["graph_id"], json!("agent"));
    assert_eq!(t.config, obj(json!({"configurable": {"n": n}})));
}

async fn finish_with_journal_writes_rows_and_end(db: Arc<dyn Persistence>) {
    let t = thread(&db).await;
    let run = running(&db, &t).await;
    let ended = db
        .finish_run_with_journal(
            &run.run_id,
            "w",
            finish_ok(1),
            rows(&run, (0..3).map(|n| event("llm.ai.response", n)).collect()),
        )
        .await;
    let done = ended.run.unwrap();
    assert_eq!((done.status, done.owner), (RunStatus::Success, None));
    let written = ended.journal.unwrap();
    assert_eq!(seqs(&written), vec![1, 2, 3]);
    assert!(written.iter().all(|r| r.run_id == run.run_id));
    assert_finished(&db, &run, 1).await;
    assert_eq!(
        all_events(&db, &t).await,
        written,
        "what is read back is what the call returned"
    );

    // The next run of the thread follows (a journal with rows: the one-statement path).
    let next = running(&db, &t).await;
    let ended = db
        .finish_run_with_journal(
            &next.run_id,
            "w",
            finish_ok(2),
            rows(&next, (3..5).map(|n| event("llm.ai.response", n)).collect()),
        )
        .await;
    ended.run.unwrap();
    assert_eq!(seqs(&ended.journal.unwrap()), vec![4, 5]);
    assert_finished(&db, &next, 2).await;
    let all = all_events(&db, &t).await;
    assert_eq!(seqs(&all), vec![1, 2, 3, 4, 5]);
    assert_eq!(all[4].run_id, next.run_id);

    // More rows than one statement takes.
    let big = running(&db, &t).await;
    let ended = db
        .finish_run_with_journal(
            &big.run_id,
            "w",
            finish_ok(3),
            rows(
                &big,
                (0..450).map(|n| event("llm.ai.response", n)).collect(),
            ),
        )
        .await;
    ended.run.unwrap();
    assert_eq!(seqs(&ended.journal.unwrap()), (6..=455).collect::<Vec<_>>());
    assert_finished(&db, &big, 3).await;
}

async fn finish_with_journal_seeds_an_empty_journal(db: Arc<dyn Persistence>) {
    let t = thread(&db).await;
    let seed = || {
        vec![
            ("checkpoint-1".to_string(), event("llm.human.input", 0)),
            ("checkpoint-1".to_string(), event("llm.ai.response", 1)),
        ]
    };
    let run = running(&db, &t).await;
    let ended = db
        .finish_run_with_journal(
            &run.run_id,
            "w",
            finish_ok(1),
            Some(JournalAppend {
                seed: Some(&seed),
                ..rows(&run, vec![event("llm.ai.response", 2)]).unwrap()
            }),
        )
        .await;
    ended.run.unwrap();
    let written = ended.journal.unwrap();
    assert_eq!(seqs(&written), vec![1, 2, 3]);
    let runs: Vec<&str> = written.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(
        runs,
        vec!["checkpoint-1", "checkpoint-1", run.run_id.as_str()]
    );
    assert_eq!(all_events(&db, &t).await, written);
    assert_finished(&db, &run, 1).await;

    let next = running(&db, &t).await;
    let ended = db
        .finish_run_with_journal(
            &next.run_id,
            "w",
            finish_ok(2),
            Some(JournalAppend {
                seed: Some(&seed),
                ..rows(&next, vec![event("llm.ai.response", 3)]).unwrap()
            }),
        )
        .await;
    ended.run.unwrap();
    assert_eq!(
        seqs(&ended.journal.unwrap()),
        vec![4],
        "the seed is only used for an empty journal"
    );
    assert_eq!(seqs(&all_events(&db, &t).await), vec![1, 2, 3, 4]);
    assert_finished(&db, &next, 2).await;
}

async fn finish_with_journal_after_other_appends(db: Arc<dyn Persistence>) {
    let t = thread(&db).await;
    let run = running(&db, &t).await;
    // Rows of other runs of the thread land while this one runs (seeding it, even).
    db.append_run_events(&t, "other-0", vec![event("llm.ai.response", 0)])
        .await
        .unwrap();
    let seed = || vec![("checkpoint-1".to_string(), event("llm.human.input", 9))];
    let ended = db
        .finish_run_with_journal(
            &run.run_id,
            "w",
            finish_ok(1),
            Some(JournalAppend {
                seed: Some(&seed),
                ..rows(&run, (1..3).map(|n| event("llm.ai.response", n)).collect()).unwrap()
            }),
        )
        .await;
    ended.run.unwrap();
    assert_eq!(
        seqs(&ended.journal.unwrap()),
        vec![2, 3],
        "after the other run's row, not seeded"
    );
    assert_finished(&db, &run, 1).await;

    // And while others append at the same time.
    let next = running(&db, &t).await;
    let mut tasks = Vec::new();
    for other in 1..9 {
        let db = db.clone();
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            db.append_run_events(
                &t,
                &format!("other-{other}"),
                (0..4).map(|n| event("llm.ai.response", n)).collect(),
            )
            .await
            .unwrap()
        }));
    }
    let ended = db
        .finish_run_with_journal(
            &next.run_id,
            "w",
            finish_ok(2),
            rows(&next, (0..4).map(|n| event("llm.ai.response", n)).collect()),
        )
        .await;
    ended.run.unwrap();
    let mine = seqs(&ended.journal.unwrap());
    assert_eq!(mine, (mine[0]..mine[0] + 4).collect::<Vec<_>>());
    for task in tasks {
        let s = seqs(&task.await.unwrap());
        assert_eq!(s, (s[0]..s[0] + 4).collect::<Vec<_>>());
    }
    let all = all_events(&db, &t).await;
    assert_eq!(seqs(&all), (1..=39).collect::<Vec<_>>());
    for chunk in all[3..].chunks(4) {
        assert!(chunk.iter().all(|r| r.run_id == chunk[0].run_id));
    }
    assert_finished(&db, &next, 2).await;
}

async fn finish_with_journal_when_not_owned_still_writes_rows(db: Arc<dyn Persistence>) {
    let t = thread(&db).await;
    let run = running(&db, &t).await;
    // Another worker's call: the run is not its own (as when its lease was lost). The rows
    // are written all the same, as they were when the append went first on its own.
    let ended = db
        .finish_run_with_journal(
            &run.run_id,
            "other",
            finish_ok(1),
            rows(&run, vec![event("llm.ai.response", 0)]),
        )
        .await;
    assert!(
        matches!(ended.run, Err(StoreError::NotFound(_))),
        "{:?}",
        ended.run
    );
    assert_eq!(seqs(&ended.journal.unwrap()), vec![1]);
    let stored = db.get_run(&run.run_id).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Running);
    assert_eq!(stored.owner.as_deref(), Some("w"));
    assert_eq!(seqs(&all_events(&db, &t).await), vec![1]);

    // A status a run cannot end with is refused; the rows are written.
    let ended = db
        .finish_run_with_journal(
            &run.run_id,
            "w",
            RunFinish {
                status: RunStatus::Running,
                ..finish_ok(1)
            },
            rows(&run, vec![event("llm.ai.response", 1)]),
        )
        .await;
    assert!(matches!(ended.run, Err(StoreError::Invalid(_))));
    assert_eq!(seqs(&ended.journal.unwrap()), vec![2]);
    assert_eq!(
        db.get_run(&run.run_id).await.unwrap().unwrap().status,
        RunStatus::Running
    );
}

async fn finish_with_journal_without_rows(db: Arc<dyn Persistence>) {
    let t = thread(&db).await;
    let run = running(&db, &t).await;
    let ended = db
        .finish_run_with_journal(&run.run_id, "w", finish_ok(1), None)
        .await;
    assert_eq!(ended.run.unwrap().status, RunStatus::Success);
    assert_eq!(ended.journal, Ok(Vec::new()));
    assert_finished(&db, &run, 1).await;

    let next = running(&db, &t).await;
    let seed = || vec![("checkpoint-1".to_string(), event("llm.human.input", 0))];
    let ended = db
        .finish_run_with_journal(
            &next.run_id,
            "w",
            finish_ok(2),
            Some(JournalAppend {
                seed: Some(&seed),
                ..rows(&next, Vec::new()).unwrap()
            }),
        )
        .await;
    ended.run.unwrap();
    assert_eq!(ended.journal, Ok(Vec::new()), "no rows: nothing seeded");
    assert!(all_events(&db, &t).await.is_empty());
    assert_finished(&db, &next, 2).await;
}

/// Makes the database refuse every insert into `run_events` (a trigger), through a
/// connection of its own.
async fn refuse_journal_rows(config: &BackendConfig) {
    use sqlx::Connection;
    match config {
        BackendConfig::Sqlite { path } => {
            let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite:{}", path.display()))
                .await
                .unwrap();
            sqlx::query(
                "CREATE TRIGGER refuse_journal BEFORE INSERT ON run_events \
                 BEGIN SELECT RAISE(ABORT, 'journal refused'); END",
            )
            .execute(&mut conn)
            .await
            .unwrap();
            conn.close().await.unwrap();
        }
        BackendConfig::Postgres { url, schema } => {
            let schema = schema.as_deref().unwrap();
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            for statement in [
                format!(
                    "CREATE FUNCTION \"{schema}\".refuse_journal() RETURNS trigger \
                     LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'journal refused'; END $$"
                ),
                format!(
                    "CREATE TRIGGER refuse_journal BEFORE INSERT ON \"{schema}\".run_events \
                     FOR EACH ROW EXECUTE FUNCTION \"{schema}\".refuse_journal()"
                ),
            ] {
                sqlx::query(sqlx::AssertSqlSafe(statement))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            conn.close().await.unwrap();
        }
    }
}

async fn finish_with_journal_finishes_when_rows_are_refused(config: BackendConfig) {
    let db = open(&config).await.unwrap();
    let t = thread(&db).await;
    db.append_run_events(&t, "before", vec![event("llm.ai.response", 0)])
        .await
        .unwrap();
    refuse_journal_rows(&config).await;
    for (n, events) in [(1, 2), (2, 450)] {
        let run = running(&db, &t).await;
        let ended = db
            .finish_run_with_journal(
                &run.run_id,
                "w",
                finish_ok(n),
                rows(
                    &run,
                    (0..events).map(|n| event("llm.ai.response", n)).collect(),
                ),
            )
            .await;
        match &ended.journal {
            Err(StoreError::Database(msg)) => assert!(msg.contains("journal refused"), "{msg}"),
            other => panic!("the rows were refused, got {other:?}"),
        }
        let done = ended.run.unwrap();
        assert_eq!(done.status, RunStatus::Success);
        assert_finished(&db, &run, n).await;
        let all = all_events(&db, &t).await;
        assert_eq!(seqs(&all), vec![1], "nothing of the run's rows was kept");
    }
    db.close().await;
}
