use crate::support::{conformance, new_id, obj};
use chrono::{DateTime, Duration, Utc};
use fawn_checkpoint::*;
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;

conformance!(
    store: cron_crud_search_count,
    cron_claims_never_double_fire,
    crons_carry_tasks_and_list_their_runs
);

fn cron(assistant: &str, thread: Option<&str>, next: Option<DateTime<Utc>>) -> NewCron {
    NewCron {
        assistant_id: assistant.into(),
        thread_id: thread.map(str::to_string),
        schedule: "*/5 * * * *".into(),
        payload: obj(json!({"input": {"x": 1}, "assistant_id": assistant})),
        next_run_date: next,
        metadata: obj(json!({"team": "a", "deep": {"k": [1, 2]}})),
        enabled: true,
        ..Default::default()
    }
}

async fn cron_crud_search_count(db: Arc<dyn Persistence>) {
    let now = ids_now();
    let tid = db
        .create_thread(NewThread::default())
        .await
        .unwrap()
        .thread_id;
    let c1 = db.create_cron(cron("a1", None, Some(now))).await.unwrap();
    assert!(c1.enabled);
    assert_eq!(c1.user_id, None);
    assert_eq!(c1.next_run_date, Some(now));
    assert_eq!(db.get_cron(&c1.cron_id).await.unwrap(), Some(c1.clone()));
    let c2 = db
        .create_cron(NewCron {
            end_time: Some(now + Duration::days(1)),
            on_run_completed: Some("keep".into()),
            ..cron("a2", Some(&tid), Some(now + Duration::minutes(5)))
        })
        .await
        .unwrap();
    let c3 = db
        .create_cron(NewCron {
            enabled: false,
            metadata: obj(json!({"team": "b"})),
            ..cron("a1", None, None)
        })
        .await
        .unwrap();

    let patched = db
        .update_cron(
            &c2.cron_id,
            CronPatch {
                schedule: Some("0 * * * *".into()),
                end_time: Some(None),
                payload: Some(obj(json!({"input": {"x": 2}, "extra": true}))),
                enabled: Some(false),
                timezone: Some(Some("Europe/Paris".into())),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(patched.schedule, "0 * * * *");
    assert_eq!(patched.end_time, None);
    assert_eq!(patched.payload["input"], json!({"x": 2}));
    assert_eq!(
        patched.payload["assistant_id"],
        json!("a2"),
        "payload merged"
    );
    assert_eq!(patched.payload["extra"], json!(true));
    assert!(!patched.enabled);
    assert_eq!(patched.timezone.as_deref(), Some("Europe/Paris"));
    assert_eq!(
        patched.on_run_completed.as_deref(),
        Some("keep"),
        "unchanged"
    );
    assert!(patched.updated_at >= c2.updated_at);
    assert!(matches!(
        db.update_cron(&new_id(), CronPatch::default())
            .await
            .unwrap_err(),
        StoreError::NotFound(_)
    ));

    let search = |filter: CronFilter, sort_by: CronSort, sort_order: SortOrder| {
        let db = db.clone();
        async move {
            db.search_crons(&CronQuery {
                filter,
                limit: 10,
                offset: 0,
                sort_by,
                sort_order,
            })
            .await
            .unwrap()
        }
    };
    let ids = |p: &Page<Cron>| {
        p.items
            .iter()
            .map(|c| c.cron_id.clone())
            .collect::<Vec<_>>()
    };
    let all = search(CronFilter::default(), CronSort::CreatedAt, SortOrder::Asc).await;
    assert_eq!(
        ids(&all),
        vec![c1.cron_id.clone(), c2.cron_id.clone(), c3.cron_id.clone()]
    );
    assert_eq!(all.total, 3);
    let a1 = search(
        CronFilter {
            assistant_id: Some("a1".into()),
            ..Default::default()
        },
        CronSort::CreatedAt,
        SortOrder::Desc,
    )
    .await;
    assert_eq!(ids(&a1), vec![c3.cron_id.clone(), c1.cron_id.clone()]);
    let on_thread = search(
        CronFilter {
            thread_id: Some(tid.clone()),
            ..Default::default()
        },
        CronSort::CreatedAt,
        SortOrder::Asc,
    )
    .await;
    assert_eq!(ids(&on_thread), vec![c2.cron_id.clone()]);
    let enabled = search(
        CronFilter {
            enabled: Some(true),
            ..Default::default()
        },
        CronSort::CreatedAt,
        SortOrder::Asc,
    )
    .await;
    assert_eq!(ids(&enabled), vec![c1.cron_id.clone()]);
    let deep = search(
        CronFilter {
            metadata: Some(obj(json!({"deep": {"k": [2]}}))),
            ..Default::default()
        },
        CronSort::CreatedAt,
        SortOrder::Asc,
    )
    .await;
    assert_eq!(ids(&deep), vec![c1.cron_id.clone(), c2.cron_id.clone()]);
    // Nulls sort last either way.
    let by_next = search(CronFilter::default(), CronSort::NextRunDate, SortOrder::Asc).await;
    assert_eq!(
        ids(&by_next),
        vec![c1.cron_id.clone(), c2.cron_id.clone(), c3.cron_id.clone()]
    );
    let by_next = search(
        CronFilter::default(),
        CronSort::NextRunDate,
        SortOrder::Desc,
    )
    .await;
    assert_eq!(
        ids(&by_next),
        vec![c2.cron_id.clone(), c1.cron_id.clone(), c3.cron_id.clone()]
    );
    for sort in [
        CronSort::CronId,
        CronSort::AssistantId,
        CronSort::ThreadId,
        CronSort::UpdatedAt,
        CronSort::EndTime,
    ] {
        assert_eq!(
            search(CronFilter::default(), sort, SortOrder::Asc)
                .await
                .items
                .len(),
            3
        );
    }
    assert_eq!(db.count_crons(&CronFilter::default()).await.unwrap(), 3);
    assert_eq!(
        db.count_crons(&CronFilter {
            metadata: Some(obj(json!({"team": "a"}))),
            ..Default::default()
        })
        .await
        .unwrap(),
        2
    );

    assert!(db.delete_cron(&c1.cron_id).await.unwrap());
    assert!(!db.delete_cron(&c1.cron_id).await.unwrap());
    assert_eq!(db.get_cron(&c1.cron_id).await.unwrap(), None);
}

fn ids_now() -> DateTime<Utc> {
    // Whole microseconds, as stored.
    DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).unwrap()
}

async fn cron_claims_never_double_fire(db: Arc<dyn Persistence>) {
    let now = ids_now();
    let mut due = HashSet::new();
    for i in 0..30 {
        let c = db
            .create_cron(cron("a", None, Some(now - Duration::seconds(i))))
            .await
            .unwrap();
        due.insert(c.cron_id);
    }
    // Not due: in the future, disabled, past its end time, or with no next date.
    db.create_cron(cron("a", None, Some(now + Duration::hours(1))))
        .await
        .unwrap();
    db.create_cron(NewCron {
        enabled: false,
        ..cron("a", None, Some(now))
    })
    .await
    .unwrap();
    db.create_cron(NewCron {
        end_time: Some(now - Duration::hours(1)),
        ..cron("a", None, Some(now))
    })
    .await
    .unwrap();
    db.create_cron(cron("a", None, None)).await.unwrap();

    let next_tick = now + Duration::minutes(5);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = db
                    .claim_due_crons(now, 3, &|_c: &Cron| Some(next_tick))
                    .await
                    .unwrap();
                if batch.is_empty() {
                    break;
                }
                got.extend(batch);
            }
            got
        }));
    }
    let mut fired = Vec::new();
    for t in tasks {
        fired.extend(t.await.unwrap());
    }
    let ids: HashSet<String> = fired.iter().map(|c| c.cron_id.clone()).collect();
    assert_eq!(fired.len(), 30, "each due cron fired exactly once");
    assert_eq!(ids, due);
    assert!(
        fired.iter().all(|c| c.next_run_date.unwrap() <= now),
        "the tick being fired"
    );
    for id in &due {
        let c = db.get_cron(id).await.unwrap().unwrap();
        assert_eq!(c.next_run_date, Some(next_tick));
    }
    assert!(
        db.claim_due_crons(now, 100, &|_c: &Cron| None)
            .await
            .unwrap()
            .is_empty()
    );
    // The next tick fires again; a schedule with no next tick stops.
    let fired = db
        .claim_due_crons(next_tick, 100, &|_c: &Cron| None)
        .await
        .unwrap();
    assert_eq!(fired.len(), 30);
    let later = next_tick + Duration::hours(2);
    let last = db
        .claim_due_crons(later, 100, &|_c: &Cron| None)
        .await
        .unwrap();
    assert_eq!(last.len(), 1, "only the cron that was an hour ahead");
    assert_eq!(last[0].next_run_date, Some(now + Duration::hours(1)));
    assert!(
        db.claim_due_crons(later, 100, &|_c: &Cron| None)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A cron carrying a scheduled task: the task round-trips, filters and claims tell the two
/// kinds apart, a patch moves it between threads, and the runs it created are listed.
async fn crons_carry_tasks_and_list_their_runs(db: Arc<dyn Persistence>) {
    let now = ids_now();
    let plain = db.create_cron(cron("a", None, Some(now))).await.unwrap();
    assert_eq!(plain.task, None);
    let task = obj(json!({"title": "Daily digest", "schedule_spec": {"cron": "0 9 * * *"}}));
    let t = db
        .create_cron(NewCron {
            user_id: Some("alice".into()),
            task: Some(task.clone()),
            ..cron("a", None, Some(now))
        })
        .await
        .unwrap();
    assert_eq!(t.task, Some(task.clone()));
    assert_eq!(db.get_cron(&t.cron_id).await.unwrap(), Some(t.clone()));
    let only = |task| CronQuery {
        filter: CronFilter {
            task,
            ..Default::default()
        },
        ..Default::default()
    };
    let ids = |crons: Vec<Cron>| crons.into_iter().map(|c| c.cron_id).collect::<Vec<_>>();
    assert_eq!(
        ids(db.search_crons(&only(Some(true))).await.unwrap().items),
        [t.cron_id.as_str()]
    );
    assert_eq!(
        ids(db.search_crons(&only(Some(false))).await.unwrap().items),
        [plain.cron_id.as_str()]
    );
    assert_eq!(db.search_crons(&only(None)).await.unwrap().total, 2);

    // A patch replaces the task and can move the cron onto a thread and back.
    let tid = db
        .create_thread(NewThread::default())
        .await
        .unwrap()
        .thread_id;
    let task2 = obj(json!({"title": "Weekly digest"}));
    let moved = db
        .update_cron(
            &t.cron_id,
            CronPatch {
                thread_id: Some(Some(tid.clone())),
                task: Some(task2.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (moved.thread_id.as_deref(), moved.task.as_ref()),
        (Some(tid.as_str()), Some(&task2))
    );
    let back = db
        .update_cron(
            &t.cron_id,
            CronPatch {
                thread_id: Some(None),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((back.thread_id, back.task), (None, Some(task2)));

    // Claims by kind.
    let tasks = db
        .claim_due_crons_of(now, 10, CronKinds::Tasks, &|_c: &Cron| None)
        .await
        .unwrap();
    assert_eq!(ids(tasks), [t.cron_id.as_str()]);
    let plains = db
        .claim_due_crons_of(now, 10, CronKinds::Plain, &|_c: &Cron| None)
        .await
        .unwrap();
    assert_eq!(ids(plains), [plain.cron_id.as_str()]);
    assert!(
        db.claim_due_crons(now, 10, &|_c: &Cron| None)
            .await
            .unwrap()
            .is_empty()
    );

    // Runs it created, newest first, paged; other runs are not its.
    let mut made = Vec::new();
    for meta in [
        json!({"cron_id": t.cron_id, "scheduled_task_id": t.cron_id}),
        json!({"cron_id": plain.cron_id}),
        json!({"cron_id": t.cron_id, "scheduled_task_id": t.cron_id}),
        json!({}),
    ] {
        let r = db
            .create_run(NewRun {
                thread_id: new_id(),
                assistant_id: "a".into(),
                metadata: obj(meta),
                create_thread_if_missing: Some(obj(json!({}))),
                ..Default::default()
            })
            .await
            .unwrap()
            .run;
        made.push(r.run_id);
    }
    let page = db.cron_runs(&t.cron_id, 0, 0).await.unwrap();
    assert_eq!(page.total, 2);
    assert_eq!(
        page.items
            .iter()
            .map(|r| r.run_id.clone())
            .collect::<Vec<_>>(),
        [made[2].clone(), made[0].clone()]
    );
    let second = db.cron_runs(&t.cron_id, 1, 1).await.unwrap();
    assert_eq!(
        (second.total, second.items[0].run_id.clone()),
        (2, made[0].clone())
    );
    assert_eq!(db.cron_runs(&plain.cron_id, 10, 0).await.unwrap().total, 1);
    assert_eq!(db.cron_runs("nope", 10, 0).await.unwrap().total, 0);
    // Both task runs are pending: active.
    assert_eq!(db.count_active_task_runs().await.unwrap(), 2);
    db.cancel_runs(
        &CancelTarget::Runs {
            thread_id: None,
            run_ids: vec![made[0].clone()],
        },
        CancelAction::Interrupt,
    )
    .await
    .unwrap();
    assert_eq!(db.count_active_task_runs().await.unwrap(), 1);
}
