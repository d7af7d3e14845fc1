//! The retention sweeper: on every `checkpointer.ttl.sweep_interval_minutes`, the node
//! holding the database lease `retention` (one at a time across nodes; a lease lasts one
//! interval, so a dead holder is replaced after at most that) deletes threads idle for
//! `checkpointer.ttl.default_ttl` minutes, prunes intermediate checkpoints
//! (`checkpointer.retention.keep_turns` / `keep_days`, see `fawn_checkpoint::retention`) and
//! expires finished runs with their journal rows (`runs_days`), all in small transactions.
//! What it did goes to the log and to `fawn_retention_*` in `/metrics`.

use crate::error::{Result, RuntimeError};
use crate::runtime::{Runtime, RuntimeHandle};
use chrono::{DateTime, Utc};
use fawn_checkpoint::{PruneOutcome, PrunePolicy, PruneStrategy, SweepQuery};
use fawn_config::{CheckpointerConfig, CheckpointerTtlConfig, RetentionConfig};
use std::time::Duration;

/// The database lease the sweepers of all nodes compete for.
pub const LEASE: &str = "retention";

/// Threads visited per page of a sweep.
const THREAD_PAGE: u64 = 100;

/// What the sweeper does, from `checkpointer.ttl` and `checkpointer.retention`.
#[derive(Clone, Debug, PartialEq)]
pub struct RetentionPolicy {
    pub interval: Duration,
    /// Threads without activity for this long are removed with this strategy.
    pub idle_threads: Option<(Duration, PruneStrategy)>,
    pub keep_turns: Option<u32>,
    pub keep_age: Option<Duration>,
    pub runs_age: Option<Duration>,
    pub batch: usize,
}

fn minutes(m: f64) -> Duration {
    Duration::try_from_secs_f64(m * 60.0).unwrap_or(Duration::MAX)
}

impl RetentionPolicy {
    /// The policy of a validated `checkpointer:` section; `None` when nothing is to be swept.
    pub fn from_config(cp: Option<&CheckpointerConfig>) -> Option<RetentionPolicy> {
        let cp = cp?;
        let ttl = cp.ttl.clone().unwrap_or_default();
        let ret = cp.retention.clone().unwrap_or_default();
        let policy = RetentionPolicy {
            interval: minutes(ttl.sweep_interval_minutes),
            idle_threads: cp.ttl.as_ref().and_then(|t| t.default_ttl).map(|m| {
                let strategy = if t_keep_latest(&ttl) {
                    PruneStrategy::KeepLatest
                } else {
                    PruneStrategy::Delete
                };
                (minutes(m), strategy)
            }),
            keep_turns: ret.keep_turns.filter(|k| *k > 0),
            keep_age: ret.keep_days.map(|d| minutes(d * 1440.0)),
            runs_age: ret.runs_days.map(|d| minutes(d * 1440.0)),
            batch: usize::try_from(ret.batch.clamp(1, RetentionConfig::MAX_BATCH)).unwrap_or(100),
        };
        policy.does_something().then_some(policy)
    }

    fn does_something(&self) -> bool {
        self.idle_threads.is_some() || self.prunes() || self.runs_age.is_some()
    }

    /// Whether checkpoints are pruned at all.
    pub fn prunes(&self) -> bool {
        self.keep_turns.is_some() || self.keep_age.is_some()
    }

    /// Whether a run's end is all a thread's pruning needs: with `keep_turns` alone, only a
    /// new turn makes anything prunable, and each run's end prunes its thread
    /// ([`prune_after_run`]); with `keep_days`, steps also become prunable by ageing, which
    /// only a sweep notices.
    pub fn prunes_at_run_end(&self) -> bool {
        self.keep_turns.is_some() && self.keep_age.is_none()
    }

    fn prune_policy(&self, now: DateTime<Utc>) -> PrunePolicy {
        PrunePolicy {
            keep_turns: self.keep_turns,
            keep_after: self
                .keep_age
                .and_then(|a| chrono::Duration::from_std(a).ok())
                .and_then(|a| now.checked_sub_signed(a)),
            batch: self.batch,
            ..PrunePolicy::default()
        }
    }

    /// What a sweep at `now` asks of the store: the thresholds [`sweep_once`] uses, and
    /// what `fawn db stats` hands to the store's estimate
    /// (`fawn_checkpoint::RetentionStore::estimate_sweep`).
    pub fn query(&self, now: DateTime<Utc>) -> SweepQuery {
        SweepQuery {
            idle_threads: self
                .idle_threads
                .map(|(age, strategy)| (before(now, age), strategy)),
            runs_before: self.runs_age.map(|age| before(now, age)),
            prune: self.prunes().then(|| self.prune_policy(now)),
        }
    }
}

fn t_keep_latest(ttl: &CheckpointerTtlConfig) -> bool {
    ttl.strategy == "keep_latest"
}

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SweepReport {
    pub threads_removed: u64,
    pub threads_visited: u64,
    /// Pruning visited every thread, not only those updated since the previous sweep.
    pub visited_all: bool,
    pub checkpoints: PruneOutcome,
    pub runs: u64,
    pub run_events: u64,
    /// SQLite: free pages handed back to the file system right after the sweep (those
    /// above a quarter of the file; the idle maintenance returns the rest).
    pub pages_vacuumed: u64,
}

/// At most this many steps handing back free pages (64 each, see
/// `Persistence::shed_free_pages`) after a sweep; the idle maintenance returns whatever
/// is left.
const VACUUM_STEPS: usize = 1024;

fn before(now: DateTime<Utc>, age: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(age)
        .ok()
        .and_then(|a| now.checked_sub_signed(a))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn store_err(what: &'static str) -> impl Fn(fawn_checkpoint::StoreError) -> RuntimeError {
    move |e| RuntimeError::store(what, e)
}

/// Every this-many sweeps, a node's sweeper visits every thread (see [`Visits`]).
const FULL_SWEEP_EVERY: u32 = 12;

/// Which threads a node's next sweep prunes. Pruning can only find something new in a
/// thread that ran (a new turn pushes an older one out of `keep_turns`) or, with
/// `keep_days`, whose checkpoints crossed the age line since the last sweep; both update
/// the thread after the previous sweep's age line. So after a complete sweep the next one
/// visits only the threads updated since the previous one began (less one interval, for a
/// run whose end committed late or a node whose clock runs behind) or since the previous
/// age line, whichever is earlier. A node's first sweep, the one after a sweep that left
/// work behind (a failure, a thread with more to prune than one visit takes, a stop) and
/// every [`FULL_SWEEP_EVERY`]th visit every thread, so that nothing is missed for long.
#[derive(Clone, Debug, Default)]
pub struct Visits {
    /// When the previous complete sweep began.
    prev: Option<DateTime<Utc>>,
    /// Sweeps since the last full one.
    partial: u32,
}

impl Visits {
    /// The `since` of the next sweep (`None`: every thread).
    pub fn since(&self, policy: &RetentionPolicy) -> Option<DateTime<Utc>> {
        let prev = self.prev?;
        if self.partial + 1 >= FULL_SWEEP_EVERY {
            return None;
        }
        let mut since = before(prev, policy.interval);
        if let Some(age) = policy.keep_age {
            since = since.min(before(prev, age));
        }
        Some(since)
    }

    /// Records a sweep that began at `started` and visited threads since `since`.
    pub fn done(&mut self, started: DateTime<Utc>, since: Option<DateTime<Utc>>, complete: bool) {
        if !complete {
            *self = Visits::default();
            return;
        }
        self.partial = if since.is_some() { self.partial + 1 } else { 0 };
        self.prev = Some(started);
    }
}

/// One sweep visiting every thread, when `owner` gets (or holds) the lease; `None` when
/// another node holds it.
pub async fn sweep_once(
    rt: &Runtime,
    policy: &RetentionPolicy,
    owner: &str,
) -> Result<Option<SweepReport>> {
    sweep(rt, policy, owner, &mut Visits::default()).await
}

/// One sweep, when `owner` gets (or holds) the lease (`None` when another node holds it),
/// pruning the threads `visits` says and recording the sweep there.
pub async fn sweep(
    rt: &Runtime,
    policy: &RetentionPolicy,
    owner: &str,
    visits: &mut Visits,
) -> Result<Option<SweepReport>> {
    let now = rt.now();
    let until =
        now + chrono::Duration::from_std(policy.interval).unwrap_or(chrono::Duration::hours(1));
    let leased = rt
        .store
        .try_lease(LEASE, owner, now, until)
        .await
        .map_err(store_err("taking the retention lease"))?;
    if !leased {
        return Ok(None);
    }
    let mut report = SweepReport::default();
    let limit = policy.batch as u64;
    let query = policy.query(now);
    if let Some((idle_before, strategy)) = query.idle_threads {
        loop {
            let ids = rt
                .store
                .idle_threads(idle_before, limit)
                .await
                .map_err(store_err("listing idle threads"))?;
            if ids.is_empty() {
                break;
            }
            let n = crate::threads::prune_threads(rt, &ids, strategy).await?;
            report.threads_removed += n;
            if n == 0 || strategy == PruneStrategy::KeepLatest || (ids.len() as u64) < limit {
                // keep_latest leaves the threads in place (they would come back).
                break;
            }
        }
    }
    if let Some(runs_before) = query.runs_before {
        loop {
            let out = rt
                .store
                .expire_runs(runs_before, limit)
                .await
                .map_err(store_err("expiring runs"))?;
            report.runs += out.runs;
            report.run_events += out.run_events;
            if out.runs < limit {
                break;
            }
        }
    }
    let since = visits.since(policy);
    let mut complete = true;
    // Threads that ran since the previous sweep were pruned at their runs' ends; what that
    // missed (a thread that was busy again, a failure) waits for the next full sweep.
    let prune = query
        .prune
        .as_ref()
        .filter(|_| since.is_none() || !policy.prunes_at_run_end());
    if let Some(prune) = prune {
        let mut after: Option<String> = None;
        loop {
            let ids = rt
                .store
                .retention_threads(after.as_deref(), since, THREAD_PAGE)
                .await
                .map_err(store_err("listing threads to prune"))?;
            let Some(last) = ids.last() else { break };
            after = Some(last.clone());
            for id in &ids {
                report.threads_visited += 1;
                match rt.store.prune_checkpoints(id, prune).await {
                    Ok(out) => {
                        // A thread with more to prune than one visit takes.
                        complete &= out.batches < prune.max_batches.max(1) as u64;
                        report.checkpoints.add(&out)
                    }
                    // One thread's failure does not stop the sweep.
                    Err(e) => {
                        complete = false;
                        tracing::warn!(thread_id = %id, error = %e, "pruning checkpoints failed")
                    }
                }
            }
            if rt.queue.stopping.is_cancelled() {
                complete = false;
                break;
            }
        }
    }
    visits.done(now, since, complete);
    report.visited_all = since.is_none();
    let removed =
        report.threads_removed + report.checkpoints.deleted + report.runs + report.run_events;
    if removed > 0 {
        // Free pages beyond what the writes that follow reuse go back to the file system
        // now (SQLite, in steps that hold the writer for about a millisecond each; nothing
        // on Postgres), rather than only when the database next stays idle for a second.
        for _ in 0..VACUUM_STEPS {
            let m = rt.store.shed_free_pages().await;
            report.pages_vacuumed += m.pages_vacuumed;
            if !m.ran || m.pages_vacuumed == 0 || rt.queue.stopping.is_cancelled() {
                break;
            }
        }
    }
    record(&report);
    Ok(Some(report))
}

fn record(r: &SweepReport) {
    count_removed([
        ("threads", r.threads_removed),
        ("runs", r.runs),
        ("run_events", r.run_events),
    ]);
    record_pruned(&r.checkpoints);
}

fn record_pruned(c: &PruneOutcome) {
    count_removed([
        ("checkpoints", c.deleted),
        ("rebased", c.rebased),
        ("materialized", c.materialized),
    ]);
}

/// Adds to `fawn_retention_removed_total`, one count per `what`.
fn count_removed(counts: [(&str, u64); 3]) {
    let m = fawn_telemetry::metrics();
    for (what, n) in counts {
        m.retention_removed.with_label_values(&[what]).inc_by(n);
    }
}

/// After a run's end, when retention prunes by turns: prunes its thread in the background
/// (the same pruning a sweep does, so also safe beside another node's), so that a thread
/// is pruned a turn at a time as it grows, on whichever node ran it, instead of in bursts
/// that hold up the runs of the sweep's moment. A thread already busy again is left for
/// its next run's end; a failure is logged and left for the next full sweep.
pub(crate) fn prune_after_run(rt: &RuntimeHandle, thread_id: &str) {
    let Some(policy) = rt.retention.as_ref().filter(|p| p.prunes_at_run_end()) else {
        return;
    };
    let prune = policy.prune_policy(rt.now());
    let (rt2, thread_id) = (rt.clone(), thread_id.to_string());
    rt.queue.spawn(async move {
        match rt2.store.prune_checkpoints(&thread_id, &prune).await {
            Ok(out) => {
                if out.deleted > 0 {
                    tracing::debug!(thread_id = %thread_id, deleted = out.deleted, "pruned after a run");
                    record_pruned(&out);
                }
            }
            Err(e) => {
                tracing::warn!(thread_id = %thread_id, error = %e, "pruning checkpoints after a run failed")
            }
        }
    });
}

/// Sweeps every interval while the runtime runs (nothing when no retention is configured).
pub async fn sweeper(rt: RuntimeHandle) {
    let Some(policy) = rt.retention.clone() else {
        return;
    };
    tracing::info!(?policy, "retention sweeper on");
    let owner = rt.queue.worker_id.clone();
    let mut visits = Visits::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(policy.interval) => {}
            _ = rt.queue.stopping.cancelled() => return,
        }
        let started = std::time::Instant::now();
        let m = fawn_telemetry::metrics();
        match sweep(&rt, &policy, &owner, &mut visits).await {
            Ok(Some(r)) => {
                m.retention_sweeps.with_label_values(&["done"]).inc();
                tracing::info!(
                    threads_removed = r.threads_removed,
                    threads_visited = r.threads_visited,
                    visited_all = r.visited_all,
                    checkpoints_deleted = r.checkpoints.deleted,
                    checkpoints_rebased = r.checkpoints.rebased,
                    checkpoints_materialized = r.checkpoints.materialized,
                    batches = r.checkpoints.batches,
                    runs_expired = r.runs,
                    run_events_expired = r.run_events,
                    pages_vacuumed = r.pages_vacuumed,
                    ms = started.elapsed().as_millis() as u64,
                    "retention sweep"
                );
            }
            Ok(None) => {
                m.retention_sweeps.with_label_values(&["skipped"]).inc();
                tracing::debug!("retention sweep skipped: another node holds the lease");
            }
            Err(e) => {
                m.retention_sweeps.with_label_values(&["error"]).inc();
                tracing::warn!(error = %e, "retention sweep failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_after_a_complete_one_visit_recent_threads() {
        let mut policy = RetentionPolicy {
            interval: Duration::from_secs(60),
            idle_threads: None,
            keep_turns: Some(2),
            keep_age: None,
            runs_age: None,
            batch: 100,
        };
        let t0 = DateTime::<Utc>::from_timestamp(1_800_000_000, 0).unwrap();
        let minute = chrono::Duration::minutes(1);
        let mut v = Visits::default();
        // The first sweep of a node visits everything.
        assert_eq!(v.since(&policy), None);
        v.done(t0, None, true);
        // Then the threads updated since the previous sweep began, less one interval.
        assert_eq!(v.since(&policy), Some(t0 - minute));
        v.done(t0 + minute, v.since(&policy), true);
        assert_eq!(v.since(&policy), Some(t0));
        // With keep_days, the previous age line when it is earlier.
        policy.keep_age = Some(Duration::from_secs(3600));
        assert_eq!(
            v.since(&policy),
            Some(t0 + minute - chrono::Duration::hours(1))
        );
        // A sweep that left work behind makes the next one full.
        v.done(t0 + minute * 2, v.since(&policy), false);
        assert_eq!(v.since(&policy), None);
        // And every FULL_SWEEP_EVERY-th sweep is full.
        let mut fulls = 0;
        for i in 0..FULL_SWEEP_EVERY * 2 {
            let since = v.since(&policy);
            fulls += u32::from(since.is_none());
            v.done(t0 + minute * (3 + i as i32), since, true);
        }
        assert_eq!(fulls, 2);
    }

    #[test]
    fn policy_from_config() {
        assert_eq!(RetentionPolicy::from_config(None), None);
        // A `checkpointer:` section with only the backend keys sweeps nothing.
        let backend_only = CheckpointerConfig {
            kind: Some("sqlite".into()),
            ..CheckpointerConfig::default()
        };
        assert_eq!(RetentionPolicy::from_config(Some(&backend_only)), None);
        let cp = CheckpointerConfig {
            ttl: Some(CheckpointerTtlConfig {
                strategy: "keep_latest".into(),
                sweep_interval_minutes: 0.5,
                default_ttl: Some(60.0),
            }),
            retention: Some(RetentionConfig {
                keep_turns: Some(3),
                keep_days: Some(1.0),
                runs_days: Some(2.0),
                batch: 50,
            }),
            ..CheckpointerConfig::default()
        };
        let p = RetentionPolicy::from_config(Some(&cp)).unwrap();
        assert_eq!(p.interval, Duration::from_secs(30));
        assert_eq!(
            p.idle_threads,
            Some((Duration::from_secs(3600), PruneStrategy::KeepLatest))
        );
        assert_eq!(p.keep_turns, Some(3));
        assert_eq!(p.keep_age, Some(Duration::from_secs(86_400)));
        assert_eq!(p.runs_age, Some(Duration::from_secs(2 * 86_400)));
        assert_eq!(p.batch, 50);
        assert!(p.prunes());
        // Retention keys alone use the default interval.
        let only_runs = CheckpointerConfig {
            retention: Some(RetentionConfig {
                runs_days: Some(30.0),
                ..RetentionConfig::default()
            }),
            ..CheckpointerConfig::default()
        };
        let p = RetentionPolicy::from_config(Some(&only_runs)).unwrap();
        assert_eq!(p.interval, Duration::from_secs(3600));
        assert!(!p.prunes());
        assert_eq!(p.idle_threads, None);
    }
}
