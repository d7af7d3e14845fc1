//! The checkpoint writer: the one place that writes checkpoints and builds their metadata.
//! A run's steps go through [`RunCheckpoints`] under the run's `durability` (`sync`: each
//! written before the next step starts; `async`: queued and written in order by one task per
//! run, what accumulated during a write as one chain; `exit`: all of them as one chain when
//! the run ends). State updates go through [`metadata`] too (`threads::update_state`).

use crate::kwargs::Durability;
use fawn_agent::PendingTask;
use fawn_checkpoint::{JsonMap, NewCheckpoint, Persistence, Run, TaskRecord};
use fawn_state::ThreadState;
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// The metadata of a checkpoint: what every checkpoint of its writer shares (`base`), its
/// `source` (`input`, `loop`, `update`, `fork`) and `step`.
pub fn metadata(base: &JsonMap, source: &str, step: i64) -> JsonMap {
    let mut m = base.clone();
    m.insert("source".into(), json!(source));
    m.insert("step".into(), json!(step));
    m.insert("parents".into(), json!({}));
    m
}

/// What every checkpoint of a run carries: the run's metadata and who ran it.
pub fn run_base_metadata(run: &Run, graph_id: &str) -> JsonMap {
    let mut m = run.metadata.clone();
    m.insert("graph_id".into(), json!(graph_id));
    m.insert("assistant_id".into(), json!(run.assistant_id));
    m.insert("run_id".into(), json!(run.run_id));
    m.insert("thread_id".into(), json!(run.thread_id));
    m.insert("user_id".into(), json!(""));
    m.insert("run_attempt".into(), json!(run.attempt.max(1)));
    m.insert("langgraph_api_version".into(), json!(crate::VERSION));
    m
}

/// What a state update's checkpoint carries: the graph and assistant of the thread's
/// metadata.
pub fn update_base_metadata(thread_metadata: &JsonMap) -> JsonMap {
    let mut m = JsonMap::new();
    for k in ["graph_id", "assistant_id"] {
        if let Some(v) = thread_metadata.get(k) {
            m.insert(k.into(), v.clone());
        }
    }
    m
}

/// What the last persisted checkpoint of the run looked like.
#[derive(Clone, Debug)]
pub struct LastCheckpoint {
    pub id: String,
    pub state: Arc<ThreadState>,
    pub next: Vec<String>,
    pub tasks: Vec<PendingTask>,
}

/// Where the run's chain stands.
#[derive(Default)]
struct Chain {
    parent_id: Option<String>,
    last: Option<LastCheckpoint>,
}

/// What one checkpoint adds to the run's chain.
pub struct Step {
    pub metadata: JsonMap,
    pub writes: Vec<(String, fawn_state::StateUpdate)>,
    pub state: Arc<ThreadState>,
    pub next: Vec<String>,
    pub tasks: Vec<PendingTask>,
    pub records: Vec<TaskRecord>,
}

/// Writes a run's checkpoints, each under the one before.
struct ChainWriter {
    store: Arc<dyn Persistence>,
    chain: Mutex<Chain>,
    thread_id: String,
    run_id: String,
}

impl ChainWriter {
    /// Writes `steps` (one transaction on SQLite) under the run's current parent; the last
    /// becomes the new parent. Returns `(id of the last, parent of the first)`.
    async fn write(&self, steps: Vec<Step>) -> Result<(String, Option<String>), String> {
        let parent_id = lock(&self.chain).parent_id.clone();
        let mut chain = Vec::with_capacity(steps.len());
        let mut last = None;
        for step in steps {
            chain.push(NewCheckpoint {
                thread_id: self.thread_id.clone(),
                checkpoint_ns: String::new(),
                parent_id: parent_id.clone(),
                run_id: Some(self.run_id.clone()),
                metadata: step.metadata,
                writes: step.writes,
                state: step.state.clone(),
                next: step.next.clone(),
                tasks: step.records,
            });
            last = Some((step.state, step.next, step.tasks));
        }
        let ids = self
            .store
            .put_checkpoints(chain)
            .await
            .map_err(|e| e.to_string())?;
        let (Some(id), Some((state, next, tasks))) = (ids.last(), last) else {
            return Err("no checkpoint to write".to_string());
        };
        let mut g = lock(&self.chain);
        g.parent_id = Some(id.clone());
        g.last = Some(LastCheckpoint {
            id: id.clone(),
            state,
            next,
            tasks,
        });
        Ok((id.clone(), parent_id))
    }
}

/// Checkpoints waiting to be written (`durability: async`). One task drains the queue at a
/// time, writing what accumulated while it wrote the previous batch as one chain.
struct WriteQueue {
    writer: ChainWriter,
    state: Mutex<Queued>,
    /// Bumped whenever the draining task stops.
    stopped: watch::Sender<u64>,
}

#[derive(Default)]
struct Queued {
    steps: Vec<Step>,
    /// A task is draining `steps`.
    draining: bool,
    /// The first write that failed; nothing queued after it is written.
    failed: Option<String>,
}

/// Tells waiters when the draining task ends, however it ends: a task dropped at shutdown
/// or unwinding marks the queue idle and failed, so nobody waits for it forever.
struct Draining {
    queue: Arc<WriteQueue>,
    finished: bool,
}

impl Drop for Draining {
    fn drop(&mut self) {
        if !self.finished {
            let mut q = lock(&self.queue.state);
            q.draining = false;
            q.steps.clear();
            q.failed
                .get_or_insert_with(|| "the checkpoint writer stopped".to_string());
        }
        self.queue.stopped.send_modify(|v| *v += 1);
    }
}

async fn drain(queue: Arc<WriteQueue>) {
    let mut guard = Draining {
        queue: queue.clone(),
        finished: false,
    };
    loop {
        // The queue is found empty and marked idle under one lock: a step queued just after
        // sees `draining == false` and starts a new task, so none is left behind.
        let steps = {
            let mut q = lock(&queue.state);
            if q.steps.is_empty() {
                q.draining = false;
                break;
            }
            std::mem::take(&mut q.steps)
        };
        if let Err(e) = queue.writer.write(steps).await {
            let mut q = lock(&queue.state);
            q.steps.clear();
            q.failed = Some(e);
            q.draining = false;
            break;
        }
    }
    guard.finished = true;
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// One run's checkpoints.
pub struct RunCheckpoints {
    durability: Durability,
    queue: Arc<WriteQueue>,
}

impl RunCheckpoints {
    /// A run writing under `parent_id` (the checkpoint it starts from).
    pub fn new(
        store: Arc<dyn Persistence>,
        thread_id: String,
        run_id: String,
        parent_id: Option<String>,
        durability: Durability,
    ) -> RunCheckpoints {
        RunCheckpoints {
            durability,
            queue: Arc::new(WriteQueue {
                writer: ChainWriter {
                    store,
                    chain: Mutex::new(Chain {
                        parent_id,
                        last: None,
                    }),
                    thread_id,
                    run_id,
                },
                state: Mutex::new(Queued::default()),
                stopped: watch::channel(0).0,
            }),
        }
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Hands over a step. Under `sync` it is written now and `(its id, its parent)` is
    /// returned; otherwise it is queued and `None` is returned. An error is this write's, or
    /// an earlier queued write's (nothing after a failed write is written).
    pub async fn submit(&self, step: Step) -> Result<Option<(String, Option<String>)>, String> {
        if self.durability != Durability::Sync {
            let mut q = lock(&self.queue.state);
            if let Some(e) = &q.failed {
                return Err(e.clone());
            }
            q.steps.push(step);
            if !q.draining && self.durability == Durability::Async {
                q.draining = true;
                tokio::spawn(drain(self.queue.clone()));
            }
            return Ok(None);
        }
        self.queue.writer.write(vec![step]).await.map(Some)
    }

    /// Waits for every queued checkpoint write; the first error among them, if any. The
    /// run's end calls this before it reads [`RunCheckpoints::last`] or touches the run's
    /// checkpoints.
    pub async fn flush(&self) -> Result<(), String> {
        let mut stopped = self.queue.stopped.subscribe();
        {
            // `durability: exit`: the run's checkpoints are written now, as one chain.
            let mut q = lock(&self.queue.state);
            if !q.steps.is_empty() && !q.draining {
                q.draining = true;
                tokio::spawn(drain(self.queue.clone()));
            }
        }
        loop {
            {
                let q = lock(&self.queue.state);
                if !q.draining {
                    return q.failed.clone().map_or(Ok(()), Err);
                }
            }
            if stopped.changed().await.is_err() {
                return Ok(());
            }
        }
    }

    /// The last checkpoint this run wrote.
    pub fn last(&self) -> Option<LastCheckpoint> {
        lock(&self.queue.writer.chain).last.clone()
    }
}
