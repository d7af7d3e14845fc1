//! [`RetentionStore`]: the lease between sweepers, checkpoint pruning (see
//! `crate::retention` for what is kept), run expiry and idle threads.

use super::SqlStore;
use super::chain::{decode_updates, mergeable, writes_need_normalizing};
use super::checkpoints::materialize;
use super::db::{Arg, DbErr, DbResult, Dialect, Exec, Sql, Tx, retry};
use crate::Result;
use crate::retention::{
    ExpiredRuns, PruneOutcome, PrunePolicy, RetentionEstimate, RetentionStore, SweepQuery,
};
use crate::types::PruneStrategy;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};

/// One root-namespace checkpoint as pruning sees it (no state).
struct Node {
    id: String,
    parent_id: Option<String>,
    /// `metadata.source` is `loop` (a step of the graph's loop).
    is_loop: bool,
    /// `metadata.source` is `input`: a run's first checkpoint, the start of a turn.
    is_input: bool,
    /// Nothing scheduled next: a turn's end.
    settled: bool,
    /// A task waits on an interrupt.
    interrupted: bool,
    is_snapshot: bool,
    created_at: DateTime<Utc>,
    /// Bytes of its stored values (what removing it frees, roughly).
    bytes: i64,
}

/// Finished runs last updated before `$1`: what run expiry deletes (and estimates).
macro_rules! expired_runs {
    () => {
        "status NOT IN ('pending', 'running') AND updated_at < $1"
    };
}

/// Threads without activity since `$1`, not busy, without a TTL of their own: what the
/// idle-thread sweep removes (and estimates).
macro_rules! idle_threads {
    () => {
        "updated_at < $1 AND status <> 'busy' AND expires_at IS NULL"
    };
}

/// The bytes a dialect stores for a value: `length` (SQLite: bytes of a BLOB, characters of
/// TEXT) or `pg_column_size` (Postgres: as stored, compressed).
fn len_fn(dialect: Dialect) -> &'static str {
    dialect.pick("length", "pg_column_size")
}

fn node_from_row(r: &super::db::Row) -> DbResult<Node> {
    let source = r.opt_text("source")?;
    Ok(Node {
        id: r.text("checkpoint_id")?,
        parent_id: r.opt_text("parent_id")?,
        is_loop: source.as_deref() == Some("loop"),
        is_input: source.as_deref() == Some("input"),
        settled: r.int("n_next")? == 0,
        interrupted: r.boolean("interrupted")?,
        is_snapshot: r.boolean("is_snap")?,
        created_at: r.ts("created_at")?,
        bytes: r.int("bytes")?,
    })
}

/// A thread's root checkpoints and what protects them.
struct Plan {
    nodes: HashMap<String, Node>,
    /// Ascending ids of the checkpoints that may go.
    prunable: Vec<String>,
}

/// Reads a thread's root checkpoints (ordered by id) and decides which may go; `None` when
/// the thread must be left alone (busy, or it has subgraph namespaces).
async fn plan(
    exec: &mut Exec<'_>,
    dialect: Dialect,
    thread_id: &str,
    policy: &PrunePolicy,
) -> DbResult<Option<Plan>> {
    let status = exec
        .all(Sql::new("SELECT status FROM threads WHERE thread_id = $1").bind(thread_id))
        .await?
        .into_iter()
        .next();
    if status
        .map(|r| r.text("status"))
        .transpose()?
        .is_some_and(|s| s == "busy")
    {
        return Ok(None);
    }
    let nested = exec
        .all(
            Sql::new(
                "SELECT checkpoint_id FROM checkpoints WHERE thread_id = $1 AND checkpoint_ns <> '' LIMIT 1",
            )
            .bind(thread_id),
        )
        .await?;
    if !nested.is_empty() {
        return Ok(None);
    }
    let rows = exec
        .all(
            // What pruning needs of each step's metadata, `next` and `tasks` is read in
            // SQL: parsing the JSON of every checkpoint of every visited thread was half
            // of a sweep's cost.
            Sql::new(dialect.pick(
                concat!(
                    "SELECT checkpoint_id, parent_id, created_at, ",
                    "json_extract(metadata, '$.source') AS source, ",
                    "COALESCE(json_array_length(next), 0) AS n_next, ",
                    "EXISTS (SELECT 1 FROM json_each(tasks) t ",
                    "WHERE json_array_length(t.value, '$.interrupts') > 0) AS interrupted, ",
                    "snapshot IS NOT NULL AS is_snap, length(writes) + ",
                    "COALESCE(length(snapshot), 0) + length(metadata) + length(next) + ",
                    "length(tasks) AS bytes FROM checkpoints ",
                    "WHERE thread_id = $1 AND checkpoint_ns = '' ORDER BY checkpoint_id"
                ),
                concat!(
                    "SELECT checkpoint_id, parent_id, created_at, ",
                    "metadata->>'source' AS source, ",
                    "CASE WHEN jsonb_typeof(next) = 'array' THEN jsonb_array_length(next) ",
                    "ELSE 0 END::bigint AS n_next, ",
                    "EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(tasks) ",
                    "= 'array' THEN tasks ELSE '[]'::jsonb END) t WHERE CASE WHEN ",
                    "jsonb_typeof(t->'interrupts') = 'array' THEN ",
                    "jsonb_array_length(t->'interrupts') > 0 ELSE false END) AS interrupted, ",
                    "snapshot IS NOT NULL AS is_snap, (pg_column_size(writes) + ",
                    "COALESCE(pg_column_size(snapshot), 0) + pg_column_size(metadata) + ",
                    "pg_column_size(next) + pg_column_size(tasks))::bigint AS bytes ",
                    "FROM checkpoints ",
                    "WHERE thread_id = $1 AND checkpoint_ns = '' ORDER BY checkpoint_id"
                ),
            ))
            .bind(thread_id),
        )
        .await?;
    let mut order = Vec::with_capacity(rows.len());
    let mut nodes = HashMap::with_capacity(rows.len());
    for r in &rows {
        let n = node_from_row(r)?;
        order.push(n.id.clone());
        nodes.insert(n.id.clone(), n);
    }
    let pending: HashSet<String> = exec
        .all(
            Sql::new(concat!(
                "SELECT DISTINCT checkpoint_id FROM checkpoint_writes ",
                "WHERE thread_id = $1 AND checkpoint_ns = ''"
            ))
            .bind(thread_id),
        )
        .await?
        .iter()
        .map(|r| r.text("checkpoint_id"))
        .collect::<DbResult<_>>()?;
    let branched: HashSet<String> = exec
        .all(
            Sql::new(dialect.pick(
                concat!(
                    "SELECT json_extract(metadata, '$.branch_parent_checkpoint_id') AS id ",
                    "FROM threads WHERE json_extract(metadata, '$.branch_parent_thread_id') = $1"
                ),
                concat!(
                    "SELECT metadata->>'branch_parent_checkpoint_id' AS id ",
                    "FROM threads WHERE metadata->>'branch_parent_thread_id' = $1"
                ),
            ))
            .bind(thread_id),
        )
        .await?
        .iter()
        .filter_map(|r| r.opt_text("id").transpose())
        .collect::<DbResult<_>>()?;
    let mut children: HashMap<&str, Vec<&Node>> = HashMap::new();
    for n in nodes.values() {
        if let Some(p) = &n.parent_id {
            children.entry(p.as_str()).or_default().push(n);
        }
    }
    // The newest `keep_turns` turns: everything from the keep_turns-th newest input on.
    let turn_floor = match policy.keep_turns {
        None | Some(0) => None,
        Some(k) => {
            let inputs: Vec<&String> = order
                .iter()
                .filter(|id| nodes.get(*id).is_some_and(|n| n.is_input))
                .collect();
            let k = k as usize;
            if inputs.len() <= k {
                return Ok(Some(Plan {
                    nodes,
                    prunable: Vec::new(),
                }));
            }
            Some(inputs[inputs.len() - k].clone())
        }
    };
    let prunable = order
        .iter()
        .filter(|id| {
            let Some(n) = nodes.get(*id) else {
                return false;
            };
            let kids = children.get(id.as_str()).map_or(&[][..], Vec::as_slice);
            n.is_loop
                && !n.settled
                && !n.interrupted
                && !pending.contains(*id)
                && !branched.contains(*id)
                && kids.len() == 1
                && kids[0].is_loop
                && turn_floor.as_ref().is_none_or(|f| *id < f)
                && policy.keep_after.is_none_or(|t| n.created_at < t)
        })
        .cloned()
        .collect();
    Ok(Some(Plan { nodes, prunable }))
}

/// Placeholders `$first, …` for `n` arguments.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The stored writes of `ids` (root namespace of `thread_id`).
async fn writes_of(
    exec: &mut Exec<'_>,
    thread_id: &str,
    ids: &[String],
) -> DbResult<HashMap<String, String>> {
    let mut out = HashMap::new();
    for chunk in ids.chunks(500) {
        let mut args = vec![Arg::from(thread_id)];
        args.extend(chunk.iter().map(Arg::from));
        let text = format!(
            "SELECT checkpoint_id, writes FROM checkpoints WHERE thread_id = $1 \
             AND checkpoint_ns = '' AND checkpoint_id IN ({})",
            placeholders(2, chunk.len())
        );
        for r in exec.all(Sql::dynamic(text, args)).await? {
            out.insert(r.text("checkpoint_id")?, r.text("writes")?);
        }
    }
    Ok(out)
}

/// True when the writes stored in `text` replay exactly when joined with the steps around
/// them: each can be folded into its neighbours (what the replayer does with consecutive
/// steps anyway), and none leaves ids to assign at replay time (such a step was stored
/// with a snapshot because its writes alone do not reproduce its state).
fn joinable_writes(id: &str, text: &str) -> DbResult<bool> {
    let updates =
        decode_updates(text).map_err(|e| DbErr::corrupt(format!("checkpoint {id}: {e}")))?;
    let named: Vec<(String, fawn_state::StateUpdate)> =
        updates.into_iter().map(|u| (String::new(), u)).collect();
    Ok(named.iter().all(|(_, u)| mergeable(u)) && !writes_need_normalizing(&named))
}

/// One JSON array of the elements of the JSON arrays `texts`, in order; `None` when one of
/// them is not an array.
fn join_arrays<'a>(texts: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut out = String::from("[");
    for text in texts {
        let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?.trim();
        if inner.is_empty() {
            continue;
        }
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(inner);
    }
    out.push(']');
    Some(out)
}

/// How a kept checkpoint whose parent goes stays readable.
enum Fix {
    /// It is a snapshot: only its parent link changes.
    Relink,
    /// The removed steps' writes go in front of its own (the stored value).
    Join(Arg),
    /// It gets a snapshot of its own (joining would not replay exactly).
    Snapshot,
}

/// A kept checkpoint re-linked to `ancestor`, its nearest kept ancestor, over the removed
/// steps starting at `parent`.
struct Rewire {
    id: String,
    parent: Option<String>,
    ancestor: Option<String>,
    fix: Fix,
}

/// The rewiring a plan needs, computed from a read (the stored writes of the steps that go
/// and of the checkpoints that stay do not change).
async fn rewires(
    exec: &mut Exec<'_>,
    dialect: Dialect,
    thread_id: &str,
    p: &Plan,
) -> DbResult<Vec<Rewire>> {
    let gone: HashSet<&String> = p.prunable.iter().collect();
    // Survivors whose parent goes, each with the removed steps between it and its nearest
    // surviving ancestor (newest first) and that ancestor.
    let mut found: Vec<(String, Vec<String>, Option<String>)> = Vec::new();
    let mut ids: Vec<&String> = p.nodes.keys().collect();
    ids.sort();
    for id in ids {
        if gone.contains(id) {
            continue;
        }
        let Some(n) = p.nodes.get(id) else { continue };
        let Some(parent) = &n.parent_id else { continue };
        if !gone.contains(parent) {
            continue;
        }
        let mut path = Vec::new();
        let mut cur = Some(parent.clone());
        while let Some(c) = cur.take() {
            if !gone.contains(&c) {
                cur = Some(c);
                break;
            }
            cur = p.nodes.get(&c).and_then(|x| x.parent_id.clone());
            path.push(c);
        }
        found.push((id.clone(), path, cur));
    }
    let mut need: Vec<String> = Vec::new();
    for (id, path, _) in &found {
        need.push(id.clone());
        need.extend(path.iter().cloned());
    }
    let writes = writes_of(exec, thread_id, &need).await?;
    let mut out = Vec::with_capacity(found.len());
    for (id, path, ancestor) in found {
        let is_snapshot = p.nodes.get(&id).is_some_and(|n| n.is_snapshot);
        let fix = if is_snapshot {
            Fix::Relink
        } else {
            let mut joinable = ancestor.is_some();
            for x in path.iter().chain(std::iter::once(&id)) {
                if !joinable {
                    break;
                }
                let text = writes.get(x).ok_or_else(|| {
                    DbErr::Vanished(format!("checkpoint {x} was deleted while it was pruned"))
                })?;
                joinable = joinable_writes(x, text)?;
            }
            if joinable {
                // Each text was just read as an array of `[node, update]` pairs, so the
                // joined writes are their elements in order, joined as text (parsing and
                // writing them again cost as much as the check above).
                let texts = path
                    .iter()
                    .rev()
                    .chain(std::iter::once(&id))
                    .map(|x| writes.get(x).map(String::as_str).unwrap_or("[]"));
                let text = join_arrays(texts).ok_or_else(|| {
                    DbErr::corrupt(format!("checkpoint {id}: writes are not an array"))
                })?;
                // Joined writes are as large as a turn: on SQLite they are stored packed,
                // like snapshots (every reader of `writes` unpacks them).
                Fix::Join(Arg::packed_text(dialect, text))
            } else {
                Fix::Snapshot
            }
        };
        out.push(Rewire {
            id,
            parent: path.first().cloned(),
            ancestor,
            fix,
        });
    }
    Ok(out)
}

/// Removes the planned batch of a thread's checkpoints (`p.prunable`, planned from a read
/// outside the transaction, so that the writer is held only for the change) in one
/// transaction; `None` when the thread changed since (it is planned again next time).
async fn prune_batch(
    tx: &mut Tx,
    dialect: Dialect,
    thread_id: &str,
    p: &Plan,
    rewires: Vec<Rewire>,
) -> DbResult<Option<PruneOutcome>> {
    let mut args = vec![Arg::from(thread_id)];
    args.extend(p.prunable.iter().map(Arg::from));
    let chunk = placeholders(2, p.prunable.len());
    if dialect == Dialect::Postgres {
        // Hold the thread row (run creation locks it too, so no run starts meanwhile) and
        // what goes: an insert of a child of one of these (it holds a key-share lock on its
        // parent) either committed before (and the read below sees it) or waits for this
        // transaction and then finds its parent gone.
        tx.opt(
            Sql::new("SELECT thread_id FROM threads WHERE thread_id = $1 FOR UPDATE")
                .bind(thread_id),
        )
        .await?;
        let text = format!(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = $1 AND checkpoint_ns = '' \
             AND checkpoint_id IN ({chunk}) FOR UPDATE"
        );
        tx.all(Sql::dynamic(text, args.clone())).await?;
    }
    // What the plan relied on, checked again under the writer: the thread is not busy, no
    // checkpoint it knew is gone, the ones that go have the same children and no pending
    // writes.
    let busy = tx
        .opt(Sql::new("SELECT status FROM threads WHERE thread_id = $1").bind(thread_id))
        .await?
        .map(|r| r.text("status"))
        .transpose()?
        .is_some_and(|s| s == "busy");
    if busy {
        return Ok(None);
    }
    let links = tx
        .all(
            Sql::new(concat!(
                "SELECT checkpoint_id, parent_id, snapshot IS NOT NULL AS is_snap ",
                "FROM checkpoints WHERE thread_id = $1 AND checkpoint_ns = ''"
            ))
            .bind(thread_id),
        )
        .await?;
    let mut fresh: HashMap<String, (Option<String>, bool)> = HashMap::with_capacity(links.len());
    for r in &links {
        fresh.insert(
            r.text("checkpoint_id")?,
            (r.opt_text("parent_id")?, r.boolean("is_snap")?),
        );
    }
    let children = |parents: &mut dyn Iterator<Item = (&String, Option<&String>)>| {
        let mut out: HashMap<String, HashSet<String>> = HashMap::new();
        for (id, parent) in parents {
            if let Some(parent) = parent {
                out.entry(parent.clone()).or_default().insert(id.clone());
            }
        }
        out
    };
    let planned_children = children(&mut p.nodes.iter().map(|(id, n)| (id, n.parent_id.as_ref())));
    let fresh_children = children(&mut fresh.iter().map(|(id, (parent, _))| (id, parent.as_ref())));
    let unchanged = p.nodes.keys().all(|id| fresh.contains_key(id))
        && p.prunable
            .iter()
            .all(|id| planned_children.get(id) == fresh_children.get(id));
    if !unchanged {
        return Ok(None);
    }
    let text = format!(
        "SELECT checkpoint_id FROM checkpoint_writes WHERE thread_id = $1 \
         AND checkpoint_ns = '' AND checkpoint_id IN ({chunk}) LIMIT 1"
    );
    if !tx.all(Sql::dynamic(text, args)).await?.is_empty() {
        return Ok(None);
    }
    // The plan's links and snapshots are what the rewiring below was computed from.
    let same = p.nodes.iter().all(|(id, n)| {
        fresh
            .get(id)
            .is_some_and(|(parent, is_snap)| *parent == n.parent_id && *is_snap == n.is_snapshot)
    });
    if !same {
        return Ok(None);
    }
    let mut out = PruneOutcome {
        batches: 1,
        ..PruneOutcome::default()
    };
    for r in rewires {
        match r.fix {
            Fix::Relink => {}
            Fix::Join(stored) => {
                tx.exec(
                    Sql::new(concat!(
                        "UPDATE checkpoints SET writes = $4 WHERE thread_id = $1 ",
                        "AND checkpoint_ns = '' AND checkpoint_id = $2 AND parent_id = $3"
                    ))
                    .bind(thread_id)
                    .bind(r.id.as_str())
                    .bind(r.parent)
                    .arg(stored),
                )
                .await?;
                out.rebased += 1;
            }
            Fix::Snapshot => {
                materialize(tx, thread_id, "", &r.id).await?;
                out.materialized += 1;
            }
        }
        tx.exec(
            Sql::new(concat!(
                "UPDATE checkpoints SET parent_id = $3 WHERE thread_id = $1 ",
                "AND checkpoint_ns = '' AND checkpoint_id = $2"
            ))
            .bind(thread_id)
            .bind(r.id.as_str())
            .bind(r.ancestor),
        )
        .await?;
    }
    for table in ["checkpoint_writes", "checkpoints"] {
        let mut args = vec![Arg::from(thread_id)];
        args.extend(p.prunable.iter().map(Arg::from));
        let text = format!(
            "DELETE FROM {table} WHERE thread_id = $1 AND checkpoint_ns = '' \
             AND checkpoint_id IN ({})",
            placeholders(2, p.prunable.len())
        );
        let n = tx.exec(Sql::dynamic(text, args)).await?;
        if table == "checkpoints" {
            out.deleted = n;
        }
    }
    Ok(Some(out))
}

impl SqlStore {
    async fn try_lease_once(
        &self,
        name: &str,
        owner: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> DbResult<bool> {
        let n = self
            .db
            .write_exec(
                Sql::new(concat!(
                    "INSERT INTO maintenance_leases (name, owner, expires_at) VALUES ($1, $2, $3) ",
                    "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, ",
                    "expires_at = excluded.expires_at WHERE maintenance_leases.expires_at < $4 ",
                    "OR maintenance_leases.owner = excluded.owner"
                ))
                .bind(name)
                .bind(owner)
                .arg(Arg::ts(until))
                .arg(Arg::ts(now)),
            )
            .await?;
        Ok(n > 0)
    }

    async fn retention_threads_once(
        &self,
        after: Option<&str>,
        since: Option<DateTime<Utc>>,
        limit: u64,
    ) -> DbResult<Vec<String>> {
        let text = match since {
            None => concat!(
                "SELECT thread_id FROM threads WHERE thread_id > $1 AND status <> 'busy' ",
                "ORDER BY thread_id LIMIT $2"
            ),
            Some(_) => concat!(
                "SELECT thread_id FROM threads WHERE thread_id > $1 AND status <> 'busy' ",
                "AND updated_at >= $3 ORDER BY thread_id LIMIT $2"
            ),
        };
        let mut sql = Sql::new(text)
            .bind(after.unwrap_or(""))
            .bind(super::clamp_i64(limit));
        if let Some(since) = since {
            sql = sql.arg(Arg::ts(since));
        }
        let rows = self.db.read_all(sql).await?;
        rows.iter().map(|r| r.text("thread_id")).collect()
    }

    async fn prune_batch_once(
        &self,
        thread_id: &str,
        policy: &PrunePolicy,
    ) -> DbResult<Option<PruneOutcome>> {
        let Some(mut p) =
            plan(&mut Exec::Read(&self.db), self.dialect(), thread_id, policy).await?
        else {
            return Ok(None);
        };
        p.prunable.truncate(policy.batch.max(1));
        if p.prunable.is_empty() {
            return Ok(None);
        }
        let fixes = rewires(&mut Exec::Read(&self.db), self.dialect(), thread_id, &p).await?;
        let mut tx = self.db.begin().await?;
        let out = prune_batch(&mut tx, self.dialect(), thread_id, &p, fixes).await?;
        if out.is_some() {
            tx.commit().await?;
            self.cache.invalidate_thread(thread_id);
        }
        Ok(out)
    }

    async fn expire_runs_once(&self, before: DateTime<Utc>, limit: u64) -> DbResult<ExpiredRuns> {
        let mut tx = self.db.begin().await?;
        let rows = tx
            .all(
                Sql::new(concat!(
                    "SELECT run_id, thread_id FROM runs WHERE ",
                    expired_runs!(),
                    " ORDER BY updated_at LIMIT $2"
                ))
                .arg(Arg::ts(before))
                .bind(super::clamp_i64(limit)),
            )
            .await?;
        let mut out = ExpiredRuns::default();
        for r in rows {
            let run_id = r.text("run_id")?;
            let thread_id = r.text("thread_id")?;
            // The status again: on Postgres a run could have been resumed meanwhile.
            let gone = tx
                .exec(
                    Sql::new(
                        "DELETE FROM runs WHERE run_id = $1 AND status NOT IN ('pending', 'running')",
                    )
                    .bind(run_id.as_str()),
                )
                .await?;
            if gone == 0 {
                continue;
            }
            out.runs += gone;
            out.run_events += tx
                .exec(
                    Sql::new("DELETE FROM run_events WHERE thread_id = $1 AND run_id = $2")
                        .bind(thread_id)
                        .bind(run_id),
                )
                .await?;
        }
        tx.commit().await?;
        Ok(out)
    }

    async fn idle_threads_once(&self, before: DateTime<Utc>, limit: u64) -> DbResult<Vec<String>> {
        let rows = self
            .db
            .read_all(
                Sql::new(concat!(
                    "SELECT thread_id FROM threads WHERE ",
                    idle_threads!(),
                    " ORDER BY updated_at LIMIT $2"
                ))
                .arg(Arg::ts(before))
                .bind(super::clamp_i64(limit)),
            )
            .await?;
        rows.iter().map(|r| r.text("thread_id")).collect()
    }
}

impl SqlStore {
    /// Bytes of every stored value of a thread: what deleting it frees (roughly).
    async fn thread_bytes(&self, thread_id: &str) -> DbResult<u64> {
        let len = len_fn(self.dialect());
        let text = format!(
            "SELECT COALESCE(SUM(b), 0) AS bytes FROM (\
             SELECT {len}(writes) + COALESCE({len}(snapshot), 0) + {len}(metadata) \
             + {len}(next) + {len}(tasks) AS b FROM checkpoints WHERE thread_id = $1 \
             UNION ALL SELECT {len}(value) FROM checkpoint_writes WHERE thread_id = $1 \
             UNION ALL SELECT {len}(content) + {len}(metadata) FROM run_events WHERE thread_id = $1 \
             UNION ALL SELECT {len}(kwargs) + {len}(metadata) FROM runs WHERE thread_id = $1 \
             UNION ALL SELECT COALESCE({len}(state_values), 0) + {len}(metadata) FROM threads \
             WHERE thread_id = $1) AS t"
        );
        self.bytes_of(text, thread_id).await
    }

    /// The `bytes` column of a one-row query about `thread_id` (0 when no row).
    async fn bytes_of(&self, text: String, thread_id: &str) -> DbResult<u64> {
        let row = self
            .db
            .read_opt(Sql::dynamic(text, vec![Arg::from(thread_id)]))
            .await?;
        Ok(match row {
            Some(r) => u64::try_from(r.int("bytes")?).unwrap_or(0),
            None => 0,
        })
    }

    /// Bytes of a kept thread's checkpoints other than the latest of each namespace: what
    /// cutting it to its latest checkpoint frees (roughly).
    async fn older_checkpoint_bytes(&self, thread_id: &str) -> DbResult<u64> {
        let len = len_fn(self.dialect());
        let text = format!(
            "SELECT COALESCE(SUM({len}(writes) + COALESCE({len}(snapshot), 0) + {len}(metadata) \
             + {len}(next) + {len}(tasks)), 0) AS bytes FROM checkpoints c WHERE thread_id = $1 \
             AND checkpoint_id < (SELECT MAX(checkpoint_id) FROM checkpoints l \
             WHERE l.thread_id = c.thread_id AND l.checkpoint_ns = c.checkpoint_ns)"
        );
        self.bytes_of(text, thread_id).await
    }

    async fn estimate_sweep_once(&self, q: &SweepQuery) -> DbResult<RetentionEstimate> {
        let mut out = RetentionEstimate::default();
        let len = len_fn(self.dialect());
        // Threads the idle sweep takes: deleted ones take their runs along, and neither
        // kind has steps left to prune afterwards.
        let mut deleted: HashSet<String> = HashSet::new();
        let mut idle: HashSet<String> = HashSet::new();
        if let Some((before, strategy)) = q.idle_threads {
            let rows = self
                .db
                .read_all(
                    Sql::new(concat!(
                        "SELECT thread_id FROM threads WHERE ",
                        idle_threads!()
                    ))
                    .arg(Arg::ts(before)),
                )
                .await?;
            for r in &rows {
                let id = r.text("thread_id")?;
                out.threads += 1;
                out.bytes += match strategy {
                    PruneStrategy::Delete => self.thread_bytes(&id).await?,
                    PruneStrategy::KeepLatest => self.older_checkpoint_bytes(&id).await?,
                };
                if strategy == PruneStrategy::Delete {
                    deleted.insert(id.clone());
                }
                idle.insert(id);
            }
        }
        if let Some(before) = q.runs_before {
            let text = format!(
                "SELECT thread_id, COUNT(*) AS n, COALESCE(SUM({len}(kwargs) + {len}(metadata)), 0) \
                 AS bytes FROM runs WHERE {} GROUP BY thread_id",
                expired_runs!()
            );
            for r in self
                .db
                .read_all(Sql::dynamic(text, vec![Arg::ts(before)]))
                .await?
            {
                if !deleted.contains(&r.text("thread_id")?) {
                    out.runs += u64::try_from(r.int("n")?).unwrap_or(0);
                    out.bytes += u64::try_from(r.int("bytes")?).unwrap_or(0);
                }
            }
            let text = format!(
                "SELECT e.thread_id, COUNT(*) AS n, \
                 COALESCE(SUM({len}(e.content) + {len}(e.metadata)), 0) AS bytes \
                 FROM run_events e WHERE EXISTS (SELECT 1 FROM runs \
                 WHERE runs.thread_id = e.thread_id AND runs.run_id = e.run_id AND {}) \
                 GROUP BY e.thread_id",
                expired_runs!()
            );
            for r in self
                .db
                .read_all(Sql::dynamic(text, vec![Arg::ts(before)]))
                .await?
            {
                if !deleted.contains(&r.text("thread_id")?) {
                    out.run_events += u64::try_from(r.int("n")?).unwrap_or(0);
                    out.bytes += u64::try_from(r.int("bytes")?).unwrap_or(0);
                }
            }
        }
        if let Some(policy) = &q.prune {
            let mut after: Option<String> = None;
            loop {
                let ids = self
                    .retention_threads_once(after.as_deref(), None, 100)
                    .await?;
                let Some(last) = ids.last() else { break };
                after = Some(last.clone());
                for id in ids.iter().filter(|id| !idle.contains(*id)) {
                    let Some(p) =
                        plan(&mut Exec::Read(&self.db), self.dialect(), id, policy).await?
                    else {
                        continue;
                    };
                    out.checkpoints += p.prunable.len() as u64;
                    for c in &p.prunable {
                        let bytes = p.nodes.get(c).map_or(0, |n| n.bytes);
                        out.bytes += u64::try_from(bytes).unwrap_or(0);
                    }
                }
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl RetentionStore for SqlStore {
    async fn try_lease(
        &self,
        name: &str,
        owner: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool> {
        retry!(self.try_lease_once(name, owner, now, until))
    }

    async fn retention_threads(
        &self,
        after: Option<&str>,
        since: Option<DateTime<Utc>>,
        limit: u64,
    ) -> Result<Vec<String>> {
        retry!(self.retention_threads_once(after, since, limit))
    }

    async fn prune_checkpoints(
        &self,
        thread_id: &str,
        policy: &PrunePolicy,
    ) -> Result<PruneOutcome> {
        let mut total = PruneOutcome::default();
        for _ in 0..policy.max_batches.max(1) {
            match retry!(self.prune_batch_once(thread_id, policy))? {
                Some(out) => total.add(&out),
                None => break,
            }
        }
        Ok(total)
    }

    async fn expire_runs(&self, before: DateTime<Utc>, limit: u64) -> Result<ExpiredRuns> {
        retry!(self.expire_runs_once(before, limit))
    }

    async fn idle_threads(&self, before: DateTime<Utc>, limit: u64) -> Result<Vec<String>> {
        retry!(self.idle_threads_once(before, limit))
    }

    async fn estimate_sweep(&self, query: &SweepQuery) -> Result<RetentionEstimate> {
        retry!(self.estimate_sweep_once(query))
    }
}

#[cfg(test)]
mod tests {
    use super::join_arrays;
    use serde_json::{Value, json};

    #[test]
    fn joined_writes_are_the_elements_in_order() {
        let texts = [
            r#"[["model", {"messages": [{"content": "a, [b]"}]}]]"#,
            " [] ",
            r#"[["tools", {"x": 1}], ["model", {"y": "]"}]]"#,
        ];
        let joined: Value = serde_json::from_str(&join_arrays(texts.into_iter()).unwrap()).unwrap();
        assert_eq!(
            joined,
            json!([
                ["model", {"messages": [{"content": "a, [b]"}]}],
                ["tools", {"x": 1}],
                ["model", {"y": "]"}]
            ])
        );
        assert_eq!(join_arrays(["[]"].into_iter()).as_deref(), Some("[]"));
        assert_eq!(join_arrays(["{}"].into_iter()), None);
    }
}
