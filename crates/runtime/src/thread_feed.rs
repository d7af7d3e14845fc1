//! A thread's runs, one after the other, read as one feed of their event logs: what the
//! thread-centric protocol (`client.threads.stream()`) projects its events from. Nothing
//! here executes anything: the feed reads the same per-run logs ([`crate::broker`]) the
//! classic run streams read, so both protocols see one execution.
//!
//! * **Which runs.** Every run of the thread whose log this node still holds (a finished
//!   resumable run's log stays for the broker's retention), every active run, and every
//!   run started after the feed opened, in creation order. A run executing on another node
//!   is followed through the event bus, as a join does ([`crate::runs::relay_remote_run`]).
//!   Runs the reader may not see (the `admit` predicate: another user's) are skipped.
//! * **Order.** One run at a time: its events from the start of its log, then its end
//!   ([`FeedItem::End`], with the status the store recorded, which is written before the
//!   log closes), then the next run's. Runs of a thread execute one at a time, so this is
//!   the order they happened in.
//! * **Ordinals.** Each run carries its position among the thread's runs in the store
//!   (created before it: 0, 1, …), the same on every node and every connection, so that
//!   cursors derived from it mean the same after a reconnect. Within one feed ordinals only
//!   grow (a run deleted by a `rollback` could otherwise make a later run repeat one).
//! * **New runs** are noticed through the thread hub (their first event) and, when other
//!   nodes share the store, by looking at the store every `poll`.

use crate::broker::{Cursor, Event, Gap, ModeFilter, Next, RunLog, Subscription, ThreadWatch};
use crate::error::{Result, RuntimeError};
use crate::runtime::RuntimeHandle;
use fawn_checkpoint::{Run, RunQuery, RunStatus};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{Interval, MissedTickBehavior};

/// Which runs a reader may see.
pub type Admit = Arc<dyn Fn(&Run) -> bool + Send + Sync>;

/// How a feed is read.
#[derive(Clone)]
pub struct FeedOptions {
    /// Only this run (a connection bound to one run).
    pub only_run: Option<String>,
    /// Runs the reader may see; the others are skipped.
    pub admit: Admit,
    /// How often the store is read for runs the hub cannot announce (another node's runs,
    /// a run whose row was not written yet when its first event arrived).
    pub poll: Duration,
}

impl std::fmt::Debug for FeedOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedOptions")
            .field("only_run", &self.only_run)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

/// A run as the feed reads it.
#[derive(Debug)]
pub struct FeedRun {
    pub run: Run,
    /// Its position among the thread's runs (see the module docs).
    pub ordinal: u64,
}

/// What a feed yields.
#[derive(Debug, Clone)]
pub enum FeedItem {
    /// An event of the run's log.
    Event {
        run: Arc<FeedRun>,
        event: Arc<Event>,
    },
    /// Events of the run were dropped from its log before they were read (its retention
    /// window moved past them); reading goes on with what is left.
    Gap { run: Arc<FeedRun>, gap: Gap },
    /// The run ended: everything it published was yielded. `last_id` is the id of its last
    /// event, if any.
    End {
        run: Arc<FeedRun>,
        status: RunStatus,
        last_id: Option<u64>,
    },
}

struct Current {
    run: Arc<FeedRun>,
    log: Arc<RunLog>,
    sub: Subscription,
    last_id: Option<u64>,
}

/// The feed of one thread (one per connection).
pub struct ThreadFeed {
    rt: RuntimeHandle,
    thread_id: String,
    opts: FeedOptions,
    watch: ThreadWatch,
    /// Runs already placed (queued, read or skipped).
    known: HashSet<String>,
    queue: VecDeque<Arc<FeedRun>>,
    current: Option<Current>,
    out: VecDeque<FeedItem>,
    listed: bool,
    /// Store reads left to find a run the hub announced but the store did not list yet
    /// (its row is written just after its first event; a run whose creation failed never
    /// appears, hence the bound).
    unknown_polls: u32,
    last_ordinal: Option<u64>,
    poll: Interval,
    /// Other nodes may execute this thread's runs.
    shared: bool,
}

impl std::fmt::Debug for ThreadFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadFeed")
            .field("thread_id", &self.thread_id)
            .finish_non_exhaustive()
    }
}

/// Runs of a thread read per store call.
const PAGE: u64 = 500;
/// Polls spent looking for a run the hub announced before the store listed it.
const UNKNOWN_POLLS: u32 = 10;

impl ThreadFeed {
    /// Opens the feed of `thread_id`; the thread need not exist yet (its runs are read as
    /// they come).
    pub fn new(rt: &RuntimeHandle, thread_id: &str, opts: FeedOptions) -> ThreadFeed {
        // Subscribed before anything is listed, so a run started in between is announced.
        let watch = rt.broker.hub.subscribe(thread_id);
        let period = opts.poll.max(Duration::from_millis(10));
        let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ThreadFeed {
            shared: rt.bus().kind() != "local",
            rt: rt.clone(),
            thread_id: thread_id.to_string(),
            opts,
            watch,
            known: HashSet::new(),
            queue: VecDeque::new(),
            current: None,
            out: VecDeque::new(),
            listed: false,
            unknown_polls: 0,
            last_ordinal: None,
            poll,
        }
    }

    pub fn thread_id(&self) -> &str {
        &self.thread_id
    }

    /// The next item, waiting for one. Errors are the store's.
    pub async fn next(&mut self) -> Result<FeedItem> {
        loop {
            if let Some(item) = self.out.pop_front() {
                return Ok(item);
            }
            if !self.listed {
                self.refresh().await?;
                self.listed = true;
                continue;
            }
            if self.current.is_none()
                && let Some(run) = self.queue.pop_front()
            {
                self.open(run);
                continue;
            }
            if self.read_current().await? {
                continue;
            }
            let mut refresh = false;
            match self.current.as_mut() {
                Some(cur) => {
                    tokio::select! {
                        _ = cur.sub.changed() => {}
                        item = self.watch.rx.recv() => refresh = self.announced(item),
                        _ = self.poll.tick() => refresh = self.on_tick().await,
                    }
                }
                None => {
                    tokio::select! {
                        item = self.watch.rx.recv() => refresh = self.announced(item),
                        _ = self.poll.tick() => refresh = self.on_tick().await,
                    }
                }
            }
            if refresh {
                self.refresh().await?;
            }
        }
    }

    /// Whether a hub item names a run the feed has not placed yet.
    fn announced(
        &mut self,
        item: std::result::Result<
            (String, crate::broker::ThreadItem),
            tokio::sync::broadcast::error::RecvError,
        >,
    ) -> bool {
        match item {
            Ok((run_id, _)) => {
                let fresh = !run_id.is_empty() && !self.known.contains(&run_id);
                if fresh {
                    self.unknown_polls = UNKNOWN_POLLS;
                }
                fresh
            }
            // Missed items: look at the store.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => false,
        }
    }

    /// At each poll: whether to read the store, after checking that a run read from
    /// another node has not ended there without its log closing here.
    async fn on_tick(&mut self) -> bool {
        if let Some(cur) = &self.current {
            let run_id = cur.run.run.run_id.clone();
            if !cur.log.is_done() && !self.rt.queue.is_local(&run_id) {
                match self.rt.store.get_run(&run_id).await {
                    Ok(Some(r)) if r.status.is_active() => {}
                    Ok(_) => self.rt.broker.finish(&run_id, None),
                    Err(e) => tracing::debug!(%run_id, error = %e, "thread feed: run status"),
                }
            }
        }
        if self.unknown_polls > 0 {
            self.unknown_polls -= 1;
            return true;
        }
        self.shared
    }

    /// Reads what the current run's log holds now; true when something happened.
    async fn read_current(&mut self) -> Result<bool> {
        let Some(cur) = self.current.as_mut() else {
            return Ok(false);
        };
        match cur.sub.poll(256) {
            Next::Events(events) => {
                for event in events {
                    cur.last_id = Some(event.id);
                    self.out.push_back(FeedItem::Event {
                        run: cur.run.clone(),
                        event,
                    });
                }
                Ok(true)
            }
            Next::Gap(gap) => {
                // Go on from the oldest event still held.
                let cursor = match gap.earliest {
                    Some(0) | None => Cursor::Start,
                    Some(n) => Cursor::After(n - 1),
                };
                cur.sub = cur.log.subscribe(cursor, ModeFilter::all());
                self.out.push_back(FeedItem::Gap {
                    run: cur.run.clone(),
                    gap,
                });
                Ok(true)
            }
            Next::Done => {
                let run_id = cur.run.run.run_id.clone();
                let status = match self.rt.store.get_run(&run_id).await {
                    Ok(Some(r)) => r.status,
                    // Deleted (a rollback): it ended.
                    Ok(None) => RunStatus::Interrupted,
                    Err(e) => return Err(RuntimeError::store("reading a run's status", e)),
                };
                if status.is_active() {
                    // Its log closed but the run goes on (released for another attempt):
                    // wait for the log to reopen or the run to end.
                    return Ok(false);
                }
                if let Some(cur) = self.current.take() {
                    self.out.push_back(FeedItem::End {
                        run: cur.run,
                        status,
                        last_id: cur.last_id,
                    });
                }
                Ok(true)
            }
            Next::Pending => Ok(false),
        }
    }

    fn open(&mut self, run: Arc<FeedRun>) {
        let r = &run.run;
        let log = match self.rt.broker.get(&r.run_id) {
            Some(l) => l,
            None => {
                let resumable = crate::RunKwargs::from_map(&r.kwargs).is_ok_and(|k| k.resumable);
                let log = self.rt.broker.open(&r.run_id, &r.thread_id, resumable);
                if self.rt.queue.active(&r.run_id).is_none() {
                    crate::runs::relay_remote_run(&self.rt, r, log.clone());
                }
                log
            }
        };
        let sub = log.subscribe(Cursor::Start, ModeFilter::all());
        self.current = Some(Current {
            run,
            log,
            sub,
            last_id: None,
        });
    }

    /// Lists the thread's runs and queues those not placed yet, in creation order.
    async fn refresh(&mut self) -> Result<()> {
        let mut all: Vec<Run> = Vec::new();
        let mut offset = 0;
        loop {
            let page = self
                .rt
                .store
                .list_runs(
                    &self.thread_id,
                    &RunQuery {
                        limit: PAGE,
                        offset,
                        status: None,
                    },
                )
                .await
                .map_err(|e| RuntimeError::store("listing the thread's runs", e))?;
            let n = page.len() as u64;
            all.extend(page);
            if n < PAGE {
                break;
            }
            offset += n;
        }
        // Newest first from the store.
        all.reverse();
        let mut found_unknown = false;
        for (i, run) in all.into_iter().enumerate() {
            if self.known.contains(&run.run_id) {
                continue;
            }
            found_unknown = true;
            self.known.insert(run.run_id.clone());
            if self
                .opts
                .only_run
                .as_ref()
                .is_some_and(|only| *only != run.run_id)
                || !(self.opts.admit)(&run)
            {
                continue;
            }
            // A finished run whose log this node no longer holds has nothing to replay.
            if !run.status.is_active() && self.rt.broker.get(&run.run_id).is_none() {
                continue;
            }
            let mut ordinal = i as u64;
            if let Some(last) = self.last_ordinal
                && ordinal <= last
            {
                ordinal = last + 1;
            }
            self.last_ordinal = Some(ordinal);
            self.queue.push_back(Arc::new(FeedRun { run, ordinal }));
        }
        if found_unknown {
            self.unknown_polls = 0;
        }
        Ok(())
    }
}
