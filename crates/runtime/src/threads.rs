//! Thread operations that are more than one store call: deleting a thread with its runs and
//! files, writing a state update as a checkpoint, copying, and the sweeper that expires
//! threads (TTL), store items and finished event logs.

use crate::error::{Result, RuntimeError};
use crate::graphs::LEAD_AGENT;
use crate::runtime::{Runtime, RuntimeHandle};
use bytes::Bytes;
use fawn_checkpoint::{
    CancelAction, CancelTarget, Checkpoint, IfExists, JsonMap, NewCheckpoint, NewThread,
    PruneStrategy, RunQuery, StoreError, TaskRecord, Thread, ThreadSummary,
};
use fawn_state::{StateUpdate, ThreadState};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// Deletes a thread's files (`{home}/users/{user}/threads/{id}`).
pub async fn delete_thread_files(rt: &Runtime, thread_id: &str) {
    if !fawn_sandbox::valid_thread_id(thread_id) {
        return;
    }
    let paths = fawn_sandbox::ThreadPaths::new(&rt.settings.home, &rt.user_id, thread_id);
    let dir = paths.thread_dir;
    let removed = fawn_sandbox::host_fs::blocking(move || fawn_sandbox::host_fs::remove_tree(&dir));
    if let Err(e) = removed.await {
        tracing::warn!(%thread_id, error = %e, "deleting thread files failed");
    }
}

/// Cancels a thread's active runs, then deletes it with its runs, checkpoints and files.
/// Returns false when it did not exist.
pub async fn delete_thread(rt: &RuntimeHandle, thread_id: &str) -> Result<bool> {
    let runs = rt
        .store
        .list_runs(
            thread_id,
            &RunQuery {
                limit: 1000,
                offset: 0,
                status: None,
            },
        )
        .await
        .unwrap_or_default();
    let active: Vec<String> = runs
        .iter()
        .filter(|r| r.status.is_active())
        .map(|r| r.run_id.clone())
        .collect();
    if !active.is_empty() {
        let _ = crate::runs::cancel(
            rt,
            CancelTarget::Runs {
                thread_id: Some(thread_id.to_string()),
                run_ids: active.clone(),
            },
            CancelAction::Interrupt,
        )
        .await;
        for id in &active {
            if rt.queue.is_local(id) {
                crate::runs::wait_terminal(rt, id, Duration::from_secs(5)).await;
            }
        }
    }
    let existed = rt
        .store
        .delete_thread(thread_id)
        .await
        .map_err(|e| RuntimeError::store("deleting the thread", e))?;
    delete_thread_files(rt, thread_id).await;
    Ok(existed)
}

/// Copies a thread (state, history, metadata) under a new id.
pub async fn copy_thread(rt: &Runtime, thread_id: &str) -> Result<Thread> {
    let new_id = uuid::Uuid::now_v7().to_string();
    rt.store
        .copy_thread(thread_id, &new_id)
        .await
        .map_err(|e| RuntimeError::store("copying the thread", e))
}

/// Prunes threads; with `delete` their files go too.
pub async fn prune_threads(
    rt: &Runtime,
    thread_ids: &[String],
    strategy: PruneStrategy,
) -> Result<u64> {
    let n = rt
        .store
        .prune_threads(thread_ids, strategy)
        .await
        .map_err(|e| RuntimeError::store("pruning threads", e))?;
    if strategy == PruneStrategy::Delete {
        for id in thread_ids {
            delete_thread_files(rt, id).await;
        }
    }
    Ok(n)
}

/// The graph of a thread with `metadata` (`metadata.graph_id`; the lead agent when unset).
fn thread_graph(
    rt: &Runtime,
    thread_id: &str,
    metadata: &JsonMap,
) -> Result<Arc<dyn fawn_agent::GraphRunner>> {
    let graph_id = metadata
        .get("graph_id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| {
            rt.graphs
                .contains(LEAD_AGENT)
                .then(|| LEAD_AGENT.to_string())
        });
    let Some(graph_id) = graph_id else {
        return Err(RuntimeError::rejected(format!(
            "Thread '{thread_id}' has no assigned graph ID. This usually happens when no runs have been made on this thread. Please create a run first or set metadata.graph_id."
        )));
    };
    rt.graphs
        .get(&graph_id)
        .cloned()
        .ok_or_else(|| RuntimeError::rejected(format!("Graph '{graph_id}' not found")))
}

/// Parses the `values` of a state update: one update or a list of them, each a state
/// update with messages of known types.
pub fn parse_update_values(values: Value) -> Result<Vec<StateUpdate>> {
    let writes: Vec<StateUpdate> = match values {
        Value::Null => Vec::new(),
        Value::Array(items) => items
            .into_iter()
            .map(StateUpdate::from_value)
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| RuntimeError::invalid_field("values", e.to_string()))?,
        v => vec![
            StateUpdate::from_value(v)
                .map_err(|e| RuntimeError::invalid_field("values", e.to_string()))?,
        ],
    };
    for w in &writes {
        crate::create::check_message_types(w)
            .map_err(|e| RuntimeError::invalid_field("values", e.to_string()))?;
    }
    Ok(writes)
}

/// One state update: `values` written as node `as_node` would write them (`None`: a
/// manual edit).
#[derive(Clone, Debug, Default)]
pub struct StateWrite {
    pub values: Value,
    pub as_node: Option<String>,
}

/// The checkpoints (source `update`) that `updates` write, in order, on top of `base` (the
/// thread's empty state when `None`): the first the child of `base`, each later one the
/// child of the one before. Every update is checked (its values, its node in `graph`)
/// before anything is written; the first that fails is the error.
fn plan_updates(
    graph: &dyn fawn_agent::GraphRunner,
    thread_id: &str,
    thread_metadata: &JsonMap,
    ns: &str,
    base: Option<&Checkpoint>,
    updates: Vec<StateWrite>,
) -> Result<Vec<NewCheckpoint>> {
    let base_metadata = crate::checkpoints::update_base_metadata(thread_metadata);
    let mut state: ThreadState = base.map(|c| (*c.state).clone()).unwrap_or_default();
    let mut step = base.and_then(|c| c.metadata.get("step").and_then(Value::as_i64));
    let mut chain = Vec::with_capacity(updates.len());
    for update in updates {
        let mut writes = parse_update_values(update.values)?;
        state
            .apply_writes(&mut writes)
            .map_err(|e| RuntimeError::rejected(e.to_string()))?;
        let next = graph
            .next_after_update(update.as_node.as_deref(), &state)
            .map_err(|e| RuntimeError::rejected(e.to_string()))?;
        let this_step = step.map(|s| s + 1).unwrap_or(-1);
        step = Some(this_step);
        let node = update.as_node.unwrap_or_else(|| "__input__".to_string());
        let tasks: Vec<TaskRecord> = next
            .iter()
            .map(|n| TaskRecord {
                id: uuid::Uuid::new_v4().to_string(),
                name: n.clone(),
                interrupts: Vec::new(),
                error: None,
            })
            .collect();
        chain.push(NewCheckpoint {
            thread_id: thread_id.to_string(),
            checkpoint_ns: ns.to_string(),
            parent_id: if chain.is_empty() {
                base.map(|c| c.checkpoint_id.clone())
            } else {
                None
            },
            run_id: None,
            metadata: crate::checkpoints::metadata(&base_metadata, "update", this_step),
            writes: writes.into_iter().map(|w| (node.clone(), w)).collect(),
            state: Arc::new(state.clone()),
            next,
            tasks,
        });
    }
    Ok(chain)
}

/// Writes planned state-update checkpoints (all or none), then the thread's summary from
/// the last; watchers of the thread see its values. Returns the checkpoints' ids.
async fn write_updates(
    rt: &Runtime,
    thread_id: &str,
    chain: Vec<NewCheckpoint>,
) -> Result<Vec<String>> {
    let Some(last) = chain.last() else {
        return Ok(Vec::new());
    };
    let state = last.state.clone();
    let has_next = !last.next.is_empty();
    let ids = match <[NewCheckpoint; 1]>::try_from(chain) {
        Ok([one]) => rt.store.put_checkpoint(one).await.map(|id| vec![id]),
        Err(chain) => rt.store.put_checkpoints(chain).await,
    }
    .map_err(|e| RuntimeError::store("writing the state", e))?;
    let values = serde_json::to_value(&*state).unwrap_or(Value::Null);
    rt.store
        .set_thread_summary(
            thread_id,
            ThreadSummary {
                values: Some(values.clone()),
                interrupts: Map::new(),
                has_next,
                error: None,
                metadata: Map::new(),
                config: None,
            },
        )
        .await
        .map_err(|e| RuntimeError::store("updating the thread", e))?;
    rt.broker.hub.publish(
        thread_id,
        crate::broker::ThreadItem::StateUpdate(Bytes::from(values.to_string())),
    );
    Ok(ids)
}

/// Writes a checkpoint with source `update` applying `values` as node `as_node` would, on top
/// of `base` (`(ns, checkpoint_id)`; the latest when `None`); returns its id. The thread's
/// summary follows it and watchers of the thread see the new values.
pub async fn update_state(
    rt: &Runtime,
    thread: &Thread,
    values: Value,
    as_node: Option<String>,
    base: Option<(String, String)>,
) -> Result<String> {
    let graph = thread_graph(rt, &thread.thread_id, &thread.metadata)?;
    let (ns, base_id) = match &base {
        Some((ns, id)) => (ns.clone(), Some(id.clone())),
        None => (String::new(), None),
    };
    let base_cp = rt
        .store
        .get_checkpoint(&thread.thread_id, &ns, base_id.as_deref())
        .await
        .map_err(|e| RuntimeError::store("loading the state", e))?;
    if let (Some(id), None) = (&base_id, &base_cp) {
        return Err(RuntimeError::not_found(format!(
            "Checkpoint {id} not found"
        )));
    }
    let chain = plan_updates(
        &*graph,
        &thread.thread_id,
        &thread.metadata,
        &ns,
        base_cp.as_ref(),
        vec![StateWrite { values, as_node }],
    )?;
    write_updates(rt, &thread.thread_id, chain)
        .await?
        .pop()
        .ok_or_else(|| RuntimeError::rejected("No state update to write"))
}

/// Writes `update` on top of the thread's latest checkpoint as the runtime's own writer
/// `node` (`manual_compaction`, `goal`): a checkpoint with source `update` whose writes are
/// recorded under that name. It keeps what the base checkpoint had scheduled (`next`, its
/// tasks and interrupts): these writes are no node's input, so a finished thread stays
/// finished and an interrupted one interrupted. `expected`:
/// the id the latest checkpoint must still have (the caller computed `update` from it) —
/// anything else is a conflict. Returns the new checkpoint's id and state.
pub async fn write_runtime_update(
    rt: &Runtime,
    thread: &Thread,
    node: &str,
    update: StateUpdate,
    expected: Option<&str>,
) -> Result<(String, Arc<ThreadState>)> {
    let graph = thread_graph(rt, &thread.thread_id, &thread.metadata)?;
    let base = crate::threads::head(rt, &thread.thread_id).await?;
    if base.as_ref().map(|c| c.checkpoint_id.as_str()) != expected {
        return Err(RuntimeError::conflict(
            "The thread's state changed meanwhile. Try again.",
        ));
    }
    let mut chain = plan_updates(
        &*graph,
        &thread.thread_id,
        &thread.metadata,
        "",
        base.as_ref(),
        vec![StateWrite {
            values: update.to_value(),
            as_node: None,
        }],
    )?;
    let (next, tasks) = base
        .as_ref()
        .map(|c| (c.next.clone(), c.tasks.clone()))
        .unwrap_or_default();
    for cp in &mut chain {
        for (name, _) in &mut cp.writes {
            *name = node.to_string();
        }
        cp.next = next.clone();
        cp.tasks = tasks.clone();
    }
    let state = chain
        .last()
        .map(|c| c.state.clone())
        .ok_or_else(|| RuntimeError::rejected("No state update to write"))?;
    let id = write_updates(rt, &thread.thread_id, chain)
        .await?
        .pop()
        .ok_or_else(|| RuntimeError::rejected("No state update to write"))?;
    Ok((id, state))
}

/// The thread's latest checkpoint (root namespace), if it has one.
pub(crate) async fn head(rt: &Runtime, thread_id: &str) -> Result<Option<Checkpoint>> {
    rt.store
        .get_checkpoint(thread_id, "", None)
        .await
        .map_err(|e| RuntimeError::store("loading the state", e))
}

/// Applies `updates` (one checkpoint each, in order) on top of an existing thread's latest
/// state, all or nothing: every update is checked before any is written, and the
/// checkpoints are written as one chain.
async fn apply_updates(rt: &Runtime, thread: &Thread, updates: Vec<StateWrite>) -> Result<()> {
    let graph = thread_graph(rt, &thread.thread_id, &thread.metadata)?;
    let base = crate::threads::head(rt, &thread.thread_id).await?;
    let chain = plan_updates(
        &*graph,
        &thread.thread_id,
        &thread.metadata,
        "",
        base.as_ref(),
        updates,
    )?;
    write_updates(rt, &thread.thread_id, chain).await?;
    Ok(())
}

async fn reload_thread(rt: &Runtime, thread_id: &str) -> Result<Thread> {
    rt.store
        .get_thread(thread_id)
        .await
        .map_err(|e| RuntimeError::store("loading the thread", e))?
        .ok_or_else(|| RuntimeError::not_found(format!("Thread with ID {thread_id} not found")))
}

fn thread_exists(thread_id: &str) -> RuntimeError {
    RuntimeError::conflict(format!("Thread with ID {thread_id} already exists"))
}

/// Creates a thread (`POST /threads`) and applies the updates of its `supersteps`, in
/// order, one checkpoint each — all or nothing. Every update is checked against the
/// thread's graph before the thread is created, so a bad one (an unknown node, values the
/// state refuses) creates nothing; a storage failure after that deletes the new thread
/// again. With `if_exists: do_nothing` on an existing thread the updates go on top of its
/// state, also all or nothing.
pub async fn create_thread(
    rt: &Runtime,
    mut new: NewThread,
    supersteps: Vec<StateWrite>,
) -> Result<Thread> {
    let create_error = |e: StoreError, id: &str| match e {
        StoreError::Conflict(_) => thread_exists(id),
        other => RuntimeError::store("creating the thread", other),
    };
    if supersteps.is_empty() {
        let id = new.thread_id.clone().unwrap_or_default();
        return rt
            .store
            .create_thread(new)
            .await
            .map_err(|e| create_error(e, &id));
    }
    let thread_id = match new.thread_id.clone() {
        Some(id) => id,
        None => uuid::Uuid::now_v7().to_string(),
    };
    new.thread_id = Some(thread_id.clone());
    let if_exists = new.if_exists;
    if let Some(existing) = rt
        .store
        .get_thread(&thread_id)
        .await
        .map_err(|e| RuntimeError::store("loading the thread", e))?
    {
        if if_exists == IfExists::Raise {
            return Err(thread_exists(&thread_id));
        }
        apply_updates(rt, &existing, supersteps).await?;
        return reload_thread(rt, &thread_id).await;
    }
    // A new thread: its state starts empty, so every update is checked now.
    let graph = thread_graph(rt, &thread_id, &new.metadata)?;
    let chain = plan_updates(
        &*graph,
        &thread_id,
        &new.metadata,
        "",
        None,
        supersteps.clone(),
    )?;
    new.if_exists = IfExists::Raise;
    match rt.store.create_thread(new).await {
        Ok(_) => {}
        Err(StoreError::Conflict(_)) if if_exists == IfExists::DoNothing => {
            // Created by another request in the meantime: that one is the thread.
            let existing = reload_thread(rt, &thread_id).await?;
            apply_updates(rt, &existing, supersteps).await?;
            return reload_thread(rt, &thread_id).await;
        }
        Err(e) => return Err(create_error(e, &thread_id)),
    }
    if let Err(e) = write_updates(rt, &thread_id, chain).await {
        // The checks passed but storage failed: the thread must not stay half-written.
        if let Err(d) = rt.store.delete_thread(&thread_id).await {
            tracing::error!(%thread_id, error = %d, "a thread whose supersteps failed was not deleted");
        }
        return Err(e);
    }
    reload_thread(rt, &thread_id).await
}

/// Merges `metadata` into the metadata of the thread's latest checkpoint
/// (`PATCH /threads/{id}/state`).
pub async fn patch_state_metadata(
    rt: &Runtime,
    thread_id: &str,
    metadata: &fawn_checkpoint::JsonMap,
) -> Result<()> {
    let cp = rt
        .store
        .get_checkpoint(thread_id, "", None)
        .await
        .map_err(|e| RuntimeError::store("loading the state", e))?
        .ok_or_else(|| {
            RuntimeError::not_found(format!("Thread {thread_id} has no state to patch"))
        })?;
    rt.store
        .patch_checkpoint_metadata(thread_id, &cp.checkpoint_id, metadata)
        .await
        .map_err(|e| RuntimeError::store("patching the state", e))
}

/// Drops expired stream logs, expired threads (TTL) and expired store items.
pub async fn sweeper(rt: RuntimeHandle) {
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = rt.queue.stopping.cancelled() => return,
        }
        ticks += 1;
        rt.broker.sweep();
        if ticks.is_multiple_of(12) {
            let now = chrono::Utc::now();
            match rt.store.expired_threads(now, 100).await {
                Ok(threads) => {
                    for t in threads {
                        let strategy = t.ttl.as_ref().map(|t| t.strategy).unwrap_or_default();
                        let ids = [t.thread_id.clone()];
                        if let Err(e) = prune_threads(&rt, &ids, strategy).await {
                            tracing::warn!(thread_id = %t.thread_id, error = %e, "TTL sweep failed");
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "TTL sweep failed"),
            }
            if let Err(e) = rt.store.sweep_expired_items(now).await {
                tracing::warn!(error = %e, "store TTL sweep failed");
            }
        }
    }
}
