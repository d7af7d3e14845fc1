//! The run-event journal and run feedback.

use crate::support::{conformance, new_id, obj};
use chrono::Utc;
use fawn_checkpoint::*;
use serde_json::json;
use std::sync::Arc;

conformance!(store:
    run_events_append_and_page,
    run_events_by_run_and_type,
    run_events_concurrent_appends_get_distinct_seqs,
    run_events_go_with_their_thread,
    run_events_seed_only_an_empty_journal,
    feedback_upsert_list_delete,
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
