//! Retention on a lead-agent thread, on both backends: after a sweep pruned its step
//! checkpoints, the history's kept entries read back the same values, DeerFlow's message
//! history is unchanged, and regenerate and branch still work on it; then its finished
//! runs expire and the idle threads go. Once on a short thread (5 turns), once on a long
//! one (50 turns, pruned over several sweeps, branched at an early turn). Before each
//! kind of sweep, the store's estimate (what `fawn db stats` prints) counts what it removes.
//! And with `keep_turns` configured, each run's end prunes its own thread, no sweep needed.

use crate::helpers::run_to_success as run;
use crate::helpers::*;
use fawn_checkpoint::RetentionEstimate;
use fawn_runtime::retention::{RetentionPolicy, SweepReport, sweep_once};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

backends!(
    pruned_thread_keeps_history_regenerate_and_branch,
    long_pruned_thread_keeps_history_regenerate_and_branch,
    a_runs_end_prunes_its_thread
);

async fn pruned_thread_keeps_history_regenerate_and_branch(db: Db) {
    prune_and_check(db, 5, 1).await
}

async fn long_pruned_thread_keeps_history_regenerate_and_branch(db: Db) {
    prune_and_check(db, 50, 2).await
}

/// `checkpointer.retention.keep_turns: 1` with the sweeps an hour apart (none runs during
/// the test): after three turns the thread's step checkpoints of the first two are gone,
/// pruned at the runs' ends, and its messages are the same as before.
async fn a_runs_end_prunes_its_thread(db: Db) {
    let keep_one_turn: SettingsTweak = Box::new(|s| {
        let cp = s.app.checkpointer.get_or_insert_with(Default::default);
        cp.ttl = Some(Default::default());
        cp.retention = Some(fawn_config::RetentionConfig {
            keep_turns: Some(1),
            ..Default::default()
        });
    });
    let Some(app) = lead_agent_app(db, Some(keep_one_turn)).await else {
        return;
    };
    let tid = app.create_thread().await;
    run(&app, &tid, "question 0").await;
    // One turn: nothing to prune, every step is in the history.
    let one_turn = history(&app, &tid).await.len();
    run(&app, &tid, "question 1").await;
    run(&app, &tid, "question 2").await;
    let msgs = ids(&messages(&app, &tid).await);
    let policy = RetentionPolicy {
        interval: Duration::from_secs(3600),
        idle_threads: None,
        keep_turns: Some(1),
        keep_age: None,
        runs_age: None,
        batch: 100,
    };
    // The last run's pruning runs after its end was answered: wait for it.
    app.eventually("the runs' ends prune the thread", || async {
        estimate(&app, &policy).await.checkpoints == 0
    })
    .await;
    // Without pruning the thread would hold three turns' worth of steps.
    let kept = history(&app, &tid).await.len();
    assert!(
        kept < 3 * one_turn,
        "{kept} checkpoints kept of three turns of {one_turn}"
    );
    assert_eq!(ids(&messages(&app, &tid).await), msgs);
}

/// A server running the lead agent over the default mock model.
async fn lead_agent_app(db: Db, settings: Option<SettingsTweak>) -> Option<TestApp> {
    let mock = fawn_testkit::MockLlm::start_with(fawn_testkit::MockConfig::default())
        .await
        .unwrap();
    spawn_with(Spawn {
        mock: Some(Arc::new(mock)),
        lead_agent: true,
        settings,
        ..Spawn::new(db)
    })
    .await
}

async fn history(app: &TestApp, tid: &str) -> Vec<Value> {
    let (s, h) = app
        .post_json(&format!("/threads/{tid}/history"), json!({"limit": 1000}))
        .await;
    assert_eq!(s, 200, "{h}");
    h.as_array().unwrap().clone()
}

async fn messages(app: &TestApp, tid: &str) -> Vec<Value> {
    let (s, st) = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(s, 200, "{st}");
    st["values"]["messages"].as_array().unwrap().clone()
}

fn ids(msgs: &[Value]) -> Vec<String> {
    msgs.iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

/// What the store estimates a sweep with `policy` would remove now.
async fn estimate(app: &TestApp, policy: &RetentionPolicy) -> RetentionEstimate {
    let rt = &app.handle.state.rt;
    rt.store()
        .estimate_sweep(&policy.query(rt.now()))
        .await
        .unwrap()
}

/// The estimate counted what the sweep removed.
fn matches(estimate: &RetentionEstimate, report: &SweepReport) {
    assert_eq!(
        (
            estimate.threads,
            estimate.checkpoints,
            estimate.runs,
            estimate.run_events
        ),
        (
            report.threads_removed,
            report.checkpoints.deleted,
            report.runs,
            report.run_events
        ),
        "estimate {estimate:?}, sweep {report:?}"
    );
}

/// DeerFlow's message history of a thread, newest page (what its UI lists).
async fn page(app: &TestApp, tid: &str) -> Value {
    let (s, p) = app
        .get_json(&format!("/api/threads/{tid}/messages/page?limit=50"))
        .await;
    assert_eq!(s, 200, "{p}");
    p
}

/// `turns` turns, pruned to the newest one; then regenerate the latest answer and branch at
/// the answer of turn `branch_at` (counted from 0).
async fn prune_and_check(db: Db, turns: usize, branch_at: usize) {
    let Some(app) = lead_agent_app(db, None).await else {
        return;
    };
    let tid = app.create_thread().await;
    let mut runs = Vec::new();
    for i in 0..turns {
        runs.push(run(&app, &tid, &format!("question {i}")).await);
    }
    let before = history(&app, &tid).await;
    let msgs = messages(&app, &tid).await;
    let listed = page(&app, &tid).await;

    let rt = app.handle.state.rt.clone();
    let policy = RetentionPolicy {
        interval: Duration::from_secs(600),
        idle_threads: None,
        keep_turns: Some(1),
        keep_age: None,
        runs_age: None,
        batch: 4,
    };
    let planned = estimate(&app, &policy).await;
    let report = sweep_once(&rt, &policy, "node-a")
        .await
        .unwrap()
        .expect("the first sweeper gets the lease");
    assert!(report.checkpoints.deleted > 0, "{report:?}");
    assert!(planned.bytes > 0, "{planned:?}");
    // Another node does not sweep while the lease is held.
    assert!(sweep_once(&rt, &policy, "node-b").await.unwrap().is_none());
    // A long thread takes more than one sweep (50 batches per thread per sweep).
    let mut deleted = report.checkpoints.deleted;
    loop {
        let more = sweep_once(&rt, &policy, "node-a").await.unwrap().unwrap();
        if more.checkpoints.deleted == 0 {
            break;
        }
        deleted += more.checkpoints.deleted;
    }
    // The estimate counts everything prunable now, however many sweeps it takes.
    assert_eq!(
        (
            planned.threads,
            planned.checkpoints,
            planned.runs,
            planned.run_events
        ),
        (0, deleted, 0, 0),
        "estimate {planned:?}"
    );
    assert_eq!(estimate(&app, &policy).await, RetentionEstimate::default());

    let after = history(&app, &tid).await;
    assert_eq!(after.len() as u64 + deleted, before.len() as u64);
    // Two checkpoints stay per turn (its `input` and its end) once everything is pruned.
    assert!(
        after.len() <= 2 * turns + 8,
        "{} of {}",
        after.len(),
        before.len()
    );
    assert_eq!(page(&app, &tid).await, listed);
    for entry in &after {
        let id = &entry["checkpoint"]["checkpoint_id"];
        let old = before
            .iter()
            .find(|b| b["checkpoint"]["checkpoint_id"] == *id)
            .unwrap_or_else(|| panic!("{id} was not in the history before"));
        assert_eq!(entry["values"], old["values"], "values of {id}");
        assert_eq!(entry["next"], old["next"], "next of {id}");
    }
    assert_eq!(messages(&app, &tid).await, msgs);

    // Regenerate the latest answer: its base (the previous turn's end) is still there.
    let answer = msgs.last().unwrap();
    assert_eq!(answer["type"], "ai");
    let (s, p) = app
        .post_json(
            &format!("/api/threads/{tid}/runs/regenerate/prepare"),
            json!({"message_id": answer["id"]}),
        )
        .await;
    assert_eq!(s, 200, "{p}");
    assert_eq!(p["target_run_id"], runs[turns - 1].as_str());
    let base = p["checkpoint"]["checkpoint_id"].clone();
    assert!(
        after
            .iter()
            .any(|e| e["checkpoint"]["checkpoint_id"] == base)
    );
    let r = app
        .post(
            &format!("/api/threads/{tid}/runs/stream"),
            json!({
                "assistant_id": "lead_agent",
                "input": p["input"],
                "checkpoint": p["checkpoint"],
                "metadata": p["metadata"],
                "stream_mode": ["values"],
                "context": {"thinking_enabled": false, "thread_id": tid},
            }),
        )
        .await;
    assert_eq!(r.status(), 200);
    let events = parse_sse(&r.text().await.unwrap());
    let rid = events[0].data["run_id"].as_str().unwrap().to_string();
    let done = app.wait_run(&tid, &rid).await;
    assert_eq!(done["status"], "success", "{done}");
    let regenerated = messages(&app, &tid).await;
    assert_eq!(regenerated.len(), msgs.len());
    assert_eq!(
        ids(&regenerated)[..msgs.len() - 1],
        ids(&msgs)[..msgs.len() - 1]
    );

    // Branch at an early turn's answer (a turn whose steps were pruned).
    let answers: Vec<&Value> = msgs.iter().filter(|m| m["type"] == "ai").collect();
    assert_eq!(answers.len(), turns);
    let at = answers[branch_at]["id"].as_str().unwrap();
    let (s, b) = app
        .post_json(
            &format!("/api/threads/{tid}/branches"),
            json!({"message_id": at, "message_ids": [at]}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let branch = b["thread_id"].as_str().unwrap();
    let upto = msgs.iter().position(|m| m["id"] == at).unwrap();
    assert_eq!(
        ids(&messages(&app, branch).await),
        ids(&msgs)[..=upto].to_vec()
    );

    // Finished runs expire with their journal rows; then idle threads go.
    let expire = RetentionPolicy {
        keep_turns: None,
        runs_age: Some(Duration::ZERO),
        ..policy.clone()
    };
    let planned = estimate(&app, &expire).await;
    let report = sweep_once(&rt, &expire, "node-a").await.unwrap().unwrap();
    assert_eq!(report.runs as usize, turns + 1, "{report:?}");
    matches(&planned, &report);
    assert!(report.run_events > 0, "{report:?}");
    let (s, r) = app.get_json(&format!("/threads/{tid}/runs/{rid}")).await;
    assert_eq!(s, 404, "{r}");
    let idle = RetentionPolicy {
        keep_turns: None,
        idle_threads: Some((Duration::ZERO, fawn_checkpoint::PruneStrategy::Delete)),
        ..policy
    };
    let planned = estimate(&app, &idle).await;
    let report = sweep_once(&rt, &idle, "node-a").await.unwrap().unwrap();
    assert_eq!(report.threads_removed, 2, "{report:?}");
    matches(&planned, &report);
    for t in [tid.as_str(), branch] {
        let (s, _) = app.get_json(&format!("/threads/{t}")).await;
        assert_eq!(s, 404);
    }
    app.stop().await;
}
