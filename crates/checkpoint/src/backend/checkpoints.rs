//! [`CheckpointStore`]: deltas plus amortized snapshots (see `chain.rs`), history across
//! branches, rollback by run, pending writes.

use super::batch::Batcher;
use super::chain::{
    ChainRow, decode_writes_json, encode_writes, needs_snapshot, reconstruct,
    writes_need_normalizing,
};
use super::db::{Arg, DbErr, DbResult, Dialect, Exec, Sql, Tx, retry};
use super::{SqlStore, Where};
use crate::cache::{Accounting, Cached, Held};
use crate::ids::{self, checkpoint_id_after};
use crate::json::merge_shallow;
use crate::types::*;
use crate::{CheckpointStore, Result};
use async_trait::async_trait;
use fawn_state::ThreadState;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

macro_rules! ckpt_cols {
    () => {
        "thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, metadata, writes, \
         snap_bytes, delta_bytes, next, tasks, created_at"
    };
}

/// A checkpoint row without its state.
struct Meta {
    checkpoint: Checkpoint,
    accounting: Accounting,
}

fn meta_from_row(r: &super::db::Row) -> DbResult<Meta> {
    let checkpoint_id = r.text("checkpoint_id")?;
    let writes = decode_writes_json(&r.text("writes")?)
        .map_err(|e| DbErr::corrupt(format!("checkpoint {checkpoint_id}: {e}")))?;
    let next: Vec<String> = serde_json::from_value(r.json("next")?)
        .map_err(|e| DbErr::corrupt(format!("checkpoint {checkpoint_id}: next: {e}")))?;
    let tasks: Vec<TaskRecord> = serde_json::from_value(r.json("tasks")?)
        .map_err(|e| DbErr::corrupt(format!("checkpoint {checkpoint_id}: tasks: {e}")))?;
    Ok(Meta {
        accounting: Accounting {
            snap_bytes: r.int("snap_bytes")?,
            delta_bytes: r.int("delta_bytes")?,
        },
        checkpoint: Checkpoint {
            thread_id: r.text("thread_id")?,
            checkpoint_ns: r.text("checkpoint_ns")?,
            checkpoint_id,
            parent_id: r.opt_text("parent_id")?,
            run_id: r.opt_text("run_id")?,
            metadata: r.map("metadata")?,
            created_at: r.ts("created_at")?,
            state: Arc::new(ThreadState::default()),
            writes,
            next,
            tasks,
        },
    })
}

/// Loads every checkpoint from each of `targets` up to its nearest snapshot (one recursive
/// query) and rebuilds the targets' states. `known` states short-cut the replay.
async fn load_states(
    exec: &mut Exec<'_>,
    thread_id: &str,
    ns: &str,
    targets: &[String],
    known: HashMap<String, Arc<ThreadState>>,
) -> DbResult<HashMap<String, Arc<ThreadState>>> {
    let seeds: Vec<&String> = targets.iter().filter(|t| !known.contains_key(*t)).collect();
    let mut rows = HashMap::new();
    if !seeds.is_empty() {
        let mut args = vec![Arg::from(thread_id), Arg::from(ns)];
        let mut ps = Vec::new();
        for s in &seeds {
            args.push(Arg::from(*s));
            ps.push(format!("${}", args.len()));
        }
        let text = format!(
            "WITH RECURSIVE chain(checkpoint_id, parent_id, is_snap) AS ( \
               SELECT checkpoint_id, parent_id, snapshot IS NOT NULL FROM checkpoints \
                WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id IN ({}) \
               UNION \
               SELECT c.checkpoint_id, c.parent_id, c.snapshot IS NOT NULL \
                 FROM checkpoints c JOIN chain ON c.checkpoint_id = chain.parent_id \
                WHERE c.thread_id = $1 AND c.checkpoint_ns = $2 AND NOT chain.is_snap \
             ) \
             SELECT checkpoint_id, parent_id, writes, snapshot FROM checkpoints \
              WHERE thread_id = $1 AND checkpoint_ns = $2 \
                AND checkpoint_id IN (SELECT checkpoint_id FROM chain)",
            ps.join(", ")
        );
        for r in exec.all(Sql::dynamic(text, args)).await? {
            rows.insert(
                r.text("checkpoint_id")?,
                ChainRow {
                    parent_id: r.opt_text("parent_id")?,
                    writes: r.text("writes")?,
                    snapshot: r.opt_text("snapshot")?,
                },
            );
        }
    }
    // The chain query is one statement, so what it returns is consistent: a checkpoint it
    // found has its ancestors (a rollback gives survivors a snapshot before it deletes their
    // ancestors). A target the caller read by an earlier statement can still be gone.
    if let Some(gone) = seeds.iter().find(|s| !rows.contains_key(**s)) {
        return Err(DbErr::Vanished(format!(
            "checkpoint {gone} was deleted while it was read"
        )));
    }
    reconstruct(targets, &rows, known).map_err(DbErr::corrupt)
}

fn state_json(state: &ThreadState) -> DbResult<String> {
    serde_json::to_string(state)
        .map_err(|e| DbErr::invalid(format!("the state cannot be stored as JSON: {e}")))
}

/// Gives checkpoint `id` a snapshot of its own (it is about to lose an ancestor).
pub(super) async fn materialize(tx: &mut Tx, thread_id: &str, ns: &str, id: &str) -> DbResult<()> {
    let states = load_states(
        &mut Exec::Tx(tx),
        thread_id,
        ns,
        &[id.to_string()],
        HashMap::new(),
    )
    .await?;
    let state = states
        .get(id)
        .ok_or_else(|| DbErr::corrupt(format!("checkpoint {id} could not be rebuilt")))?;
    let text = state_json(state)?;
    let len = text.len() as i64;
    let dialect = match tx {
        Tx::Sqlite(_) => Dialect::Sqlite,
        Tx::Pg(_) => Dialect::Postgres,
    };
    let snapshot = Arg::packed_text(dialect, text);
    tx.exec(
        Sql::new(concat!(
            "UPDATE checkpoints SET snapshot = $4, snap_bytes = $5, delta_bytes = 0 ",
            "WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3"
        ))
        .bind(thread_id)
        .bind(ns)
        .bind(id)
        .arg(snapshot)
        .bind(len),
    )
    .await?;
    Ok(())
}

/// Keeps only the latest checkpoint of each namespace of a thread (made a parentless
/// snapshot) and its pending writes.
pub(crate) async fn keep_latest_only(tx: &mut Tx, thread_id: &str) -> DbResult<()> {
    let latest = tx
        .all(
            Sql::new(concat!(
                "SELECT checkpoint_ns, MAX(checkpoint_id) AS latest FROM checkpoints ",
                "WHERE thread_id = $1 GROUP BY checkpoint_ns"
            ))
            .bind(thread_id),
        )
        .await?;
    for row in latest {
        let ns = row.text("checkpoint_ns")?;
        let id = row.text("latest")?;
        let has_snapshot = tx
            .opt(
                Sql::new(concat!(
                    "SELECT checkpoint_id FROM checkpoints WHERE thread_id = $1 ",
                    "AND checkpoint_ns = $2 AND checkpoint_id = $3 AND snapshot IS NOT NULL"
                ))
                .bind(thread_id)
                .bind(ns.as_str())
                .bind(id.as_str()),
            )
            .await?
            .is_some();
        if !has_snapshot {
            materialize(tx, thread_id, &ns, &id).await?;
        }
        for sql in [
            "UPDATE checkpoints SET parent_id = NULL WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3",
            "DELETE FROM checkpoints WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id <> $3",
            "DELETE FROM checkpoint_writes WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id <> $3",
        ] {
            tx.exec(
                Sql::new(sql)
                    .bind(thread_id)
                    .bind(ns.as_str())
                    .bind(id.as_str()),
            )
            .await?;
        }
    }
    Ok(())
}

/// Deletes the checkpoints a run wrote. A surviving checkpoint whose parent goes (a fork
/// made from the run's state) first gets a snapshot, so its branch stays readable.
pub(crate) async fn delete_run_checkpoints(
    tx: &mut Tx,
    dialect: Dialect,
    thread_id: &str,
    run_id: &str,
) -> DbResult<u64> {
    if dialect == Dialect::Postgres {
        // Lock the run's checkpoints, waiting for inserts of their children (which hold
        // key-share locks on them) to commit, so the statements below see those children;
        // later inserts under a locked row wait for this transaction and then find their
        // parent gone. Each statement sees only what was committed when it started, so a
        // checkpoint committed meanwhile (or a child whose insert this one waited for) is
        // missed: lock again until the set stops growing.
        let mut locked = 0;
        loop {
            let rows = tx
                .all(
                    Sql::new(concat!(
                        "SELECT checkpoint_id FROM checkpoints WHERE thread_id = $1 ",
                        "AND run_id = $2 FOR UPDATE"
                    ))
                    .bind(thread_id)
                    .bind(run_id),
                )
                .await?;
            if rows.len() <= locked {
                break;
            }
            locked = rows.len();
        }
    }
    let orphans = tx
        .all(
            Sql::new(concat!(
                "SELECT c.checkpoint_ns, c.checkpoint_id FROM checkpoints c ",
                "WHERE c.thread_id = $1 AND (c.run_id IS NULL OR c.run_id <> $2) ",
                "AND c.snapshot IS NULL AND EXISTS (SELECT 1 FROM checkpoints p ",
                "WHERE p.thread_id = $1 AND p.checkpoint_ns = c.checkpoint_ns ",
                "AND p.checkpoint_id = c.parent_id AND p.run_id = $2)"
            ))
            .bind(thread_id)
            .bind(run_id),
        )
        .await?;
    for o in orphans {
        let ns = o.text("checkpoint_ns")?;
        let id = o.text("checkpoint_id")?;
        materialize(tx, thread_id, &ns, &id).await?;
    }
    tx.exec(
        Sql::new(concat!(
            "DELETE FROM checkpoint_writes WHERE thread_id = $1 AND EXISTS (",
            "SELECT 1 FROM checkpoints c WHERE c.thread_id = $1 AND c.run_id = $2 ",
            "AND c.checkpoint_ns = checkpoint_writes.checkpoint_ns ",
            "AND c.checkpoint_id = checkpoint_writes.checkpoint_id)"
        ))
        .bind(thread_id)
        .bind(run_id),
    )
    .await?;
    tx.exec(
        Sql::new("DELETE FROM checkpoints WHERE thread_id = $1 AND run_id = $2")
            .bind(thread_id)
            .bind(run_id),
    )
    .await
}

/// A checkpoint after which the run stops (nothing scheduled next, or waiting on an
/// interrupt): its writer will not update the state further, so the cache can hold it
/// strongly for the next run's start without costing the writer a copy.
fn ends_a_run(cp: &NewCheckpoint) -> bool {
    cp.next.is_empty() || cp.tasks.iter().any(|t| !t.interrupts.is_empty())
}

/// A checkpoint ready to insert (everything computed before the retry loop).
pub(super) struct Prepared {
    thread_id: String,
    ns: String,
    id: String,
    parent_id: Option<String>,
    run_id: Option<String>,
    metadata: Arg,
    writes: String,
    /// SQLite: the writes packed (see `pack`), stored instead of their text.
    packed_writes: Option<Vec<u8>>,
    snapshot: Option<String>,
    /// SQLite: the snapshot packed (see `pack`), stored instead of its text.
    packed: Option<Vec<u8>>,
    accounting: Accounting,
    next: Arg,
    tasks: Arg,
}

impl Prepared {
    /// Bytes of checkpoint data this row stores (writes, snapshot, metadata, next, tasks).
    fn stored_bytes(&self) -> u64 {
        let arg = |a: &Arg| match a {
            Arg::Json(Some(s)) | Arg::Text(Some(s)) => s.len(),
            _ => 0,
        };
        (self.writes.len()
            + self.snapshot.as_ref().map_or(0, String::len)
            + arg(&self.metadata)
            + arg(&self.next)
            + arg(&self.tasks)) as u64
    }
}

/// Counts written checkpoints, their bytes and the time the write took.
fn record_write(links: &[Prepared], started: std::time::Instant) {
    let m = fawn_telemetry::metrics();
    m.checkpoint_writes.inc_by(links.len() as u64);
    m.checkpoint_bytes
        .inc_by(links.iter().map(Prepared::stored_bytes).sum());
    m.checkpoint_write_duration
        .observe(started.elapsed().as_secs_f64());
}

/// Binds a checkpoint row's columns after `thread_id, checkpoint_ns, checkpoint_id`, in
/// the order of the insert statements.
fn row_args(sql: Sql, p: &Prepared, now: chrono::DateTime<chrono::Utc>) -> Sql {
    sql.bind(p.parent_id.clone())
        .bind(p.run_id.clone())
        .arg(p.metadata.clone())
        .arg(match &p.packed_writes {
            Some(bytes) => Arg::Blob(Some(bytes.clone())),
            None => Arg::Text(Some(p.writes.clone())),
        })
        .arg(match &p.packed {
            Some(bytes) => Arg::Blob(Some(bytes.clone())),
            None => Arg::Text(p.snapshot.clone()),
        })
        .bind(p.accounting.snap_bytes)
        .bind(p.accounting.delta_bytes)
        .arg(p.next.clone())
        .arg(p.tasks.clone())
        .arg(Arg::ts(now))
}

/// Reads a checkpoint's id back: an insert that found a conflict was this very insert,
/// committed before a retry, when the row is there.
fn stored_sql(p: &Prepared) -> Sql {
    Sql::new(concat!(
        "SELECT checkpoint_id FROM checkpoints WHERE thread_id = $1 ",
        "AND checkpoint_ns = $2 AND checkpoint_id = $3"
    ))
    .bind(p.thread_id.as_str())
    .bind(p.ns.as_str())
    .bind(p.id.as_str())
}

fn parent_missing(p: &Prepared) -> DbErr {
    DbErr::not_found(format!(
        "Parent checkpoint {} not found",
        p.parent_id.as_deref().unwrap_or_default()
    ))
}

/// The columns of an inserted checkpoint row, in [`row_args`] order.
const CHECKPOINT_ROW: &str = "thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, \
     metadata, writes, snapshot, snap_bytes, delta_bytes, next, tasks, created_at";

/// Checkpoints inserted together: one, or a chain of one thread's checkpoints, each the
/// child of the one before. Only the first one's parent is looked up: the others go in
/// with it or not at all.
pub(super) type Links = Arc<Vec<Prepared>>;

/// Postgres: the arguments of a multi-row checkpoint insert, one array per column in
/// [`row_args`] order and then each row's `head` (the parent its links hang from), and the
/// `unnest(…)` that reads them back as rows. The statement's text depends on no row count,
/// so each connection parses and prepares it once; a `VALUES` list had one text per row
/// count, each prepared anew. (Postgres still plans each batch: with the arrays' sizes
/// known, its custom plans look cheaper to it than a generic one.)
fn columns_of(items: &[Links]) -> DbResult<(Vec<Arg>, String)> {
    let now = ids::now();
    let mut columns: Vec<Arg> = Vec::new();
    for links in items {
        let head = links.first().and_then(|p| p.parent_id.clone());
        for p in links.iter() {
            let sql = Sql::new("")
                .bind(p.thread_id.as_str())
                .bind(p.ns.as_str())
                .bind(p.id.as_str());
            let row = row_args(sql, p, now).bind(head.clone()).into_args();
            if columns.is_empty() {
                columns = row.iter().map(Arg::column_of).collect::<DbResult<_>>()?;
            }
            for (column, value) in columns.iter_mut().zip(row) {
                column.push_row(value)?;
            }
        }
    }
    let unnest = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("${}::{}", i + 1, c.pg_array_type()))
        .collect::<Vec<_>>()
        .join(", ");
    Ok((columns, format!("unnest({unnest})")))
}

/// The answer of a batch that failed as a whole for a reason no retry mends: the same error
/// for every item.
fn every_item_fails(items: &[Links], e: &DbErr) -> Vec<DbResult<Vec<bool>>> {
    let msg = format!("{e:?}");
    items
        .iter()
        .map(|_| Err(DbErr::corrupt(msg.clone())))
        .collect()
}

/// Postgres gathers concurrent checkpoint inserts (of different runs) into shared
/// statements: at most 2 in flight, 64 items or 4 MiB each. Two rather than four: with
/// chains, four concurrent inserts slowed new runs' first events at c=16 (4.1-4.7 vs
/// 3.5-4.2 ms p50, same throughput).
pub(super) fn insert_batcher() -> Batcher<Links, Vec<bool>> {
    Batcher::new(2, 64, 4 << 20, |links| {
        links
            .iter()
            .map(|p| p.writes.len() + p.snapshot.as_ref().map_or(0, String::len) + 256)
            .sum()
    })
}

impl SqlStore {
    async fn parent_accounting_once(
        &self,
        thread_id: &str,
        ns: &str,
        parent_id: &str,
    ) -> DbResult<Accounting> {
        let row = self
            .db
            .read_opt(
                Sql::new(concat!(
                    "SELECT snap_bytes, delta_bytes FROM checkpoints WHERE thread_id = $1 ",
                    "AND checkpoint_ns = $2 AND checkpoint_id = $3"
                ))
                .bind(thread_id)
                .bind(ns)
                .bind(parent_id),
            )
            .await?
            .ok_or_else(|| DbErr::not_found(format!("Parent checkpoint {parent_id} not found")))?;
        Ok(Accounting {
            snap_bytes: row.int("snap_bytes")?,
            delta_bytes: row.int("delta_bytes")?,
        })
    }

    /// Inserts linked checkpoints, all or nothing. SQLite: one statement, or a transaction
    /// for a chain. Postgres: through the batcher shared with other runs, so a chain is one
    /// round trip and one commit.
    /// Inserts prepared links (retrying transient errors) and records the write's count,
    /// bytes and duration. The timing lives in this (boxed) future, not in the callers':
    /// a trait method's future is copied whole into its box on every call.
    async fn insert_links_timed(&self, links: &Links) -> Result<()> {
        let started = std::time::Instant::now();
        retry!(self.insert_links_once(links))?;
        record_write(links, started);
        Ok(())
    }

    async fn insert_links_once(&self, links: &Links) -> DbResult<()> {
        let inserted = match (self.dialect(), links.as_slice()) {
            (Dialect::Sqlite, [one]) => vec![self.insert_one(one).await?],
            (Dialect::Sqlite, chain) => return self.insert_chain_once(chain).await,
            (Dialect::Postgres, _) => {
                self.inserts
                    .submit(links.clone(), |items| self.insert_rows(items))
                    .await?
            }
        };
        // Not inserted: the head's parent is gone (then nothing was), or this very insert
        // committed before a retry.
        for (p, inserted) in links.iter().zip(inserted) {
            if !inserted && p.parent_id.is_some() {
                let exists = self.db.read_opt(stored_sql(p)).await?.is_some();
                if !exists {
                    return Err(parent_missing(p));
                }
            }
        }
        Ok(())
    }

    /// Inserts a prepared chain (each row the child of the one before) in one transaction,
    /// all or nothing.
    async fn insert_chain_once(&self, chain: &[Prepared]) -> DbResult<()> {
        let mut tx = self.db.begin().await?;
        for p in chain {
            let inserted = self.insert_in(&mut tx, p).await?;
            if !inserted && p.parent_id.is_some() && tx.opt(stored_sql(p)).await?.is_none() {
                return Err(parent_missing(p));
            }
        }
        tx.commit().await
    }

    /// A new checkpoint's id: after its parent and after whatever this process knows to be
    /// the thread's latest.
    fn new_id(&self, thread_id: &str, ns: &str, parent_id: Option<String>) -> String {
        let after = match (parent_id, self.cache.cached_id(thread_id, ns)) {
            (Some(p), Some(c)) => Some(p.max(c)),
            (p, c) => p.or(c),
        };
        checkpoint_id_after(after.as_deref())
    }

    /// Caches a just-written checkpoint as its thread's latest: its state held strongly
    /// when it ends a run (the next run starts from it), weakly otherwise.
    fn remember_latest(&self, cp: &NewCheckpoint, p: &Prepared) {
        self.cache.put(
            &cp.thread_id,
            &cp.checkpoint_ns,
            Cached {
                checkpoint_id: p.id.clone(),
                state: if ends_a_run(cp) {
                    Held::Strong(cp.state.clone())
                } else {
                    Held::Weak(Arc::downgrade(&cp.state))
                },
                accounting: p.accounting.clone(),
            },
        );
    }

    /// The cached (or stored) parent of a new checkpoint and its snapshot accounting.
    async fn parent_of(
        &self,
        thread_id: &str,
        ns: &str,
        parent_id: Option<&str>,
    ) -> Result<(Option<Cached>, Option<Accounting>)> {
        Ok(match parent_id {
            None => (None, None),
            Some(pid) => match self.cache.get(thread_id, ns, pid) {
                Some(c) => {
                    let acc = c.accounting.clone();
                    (Some(c), Some(acc))
                }
                None => (
                    None,
                    Some(retry!(self.parent_accounting_once(thread_id, ns, pid))?),
                ),
            },
        })
    }

    /// Inserts one checkpoint; false when nothing was inserted (its parent is gone, or
    /// this very insert already committed before a retry).
    async fn insert_one(&self, p: &Prepared) -> DbResult<bool> {
        if self.dialect() == Dialect::Sqlite && p.parent_id.is_some() {
            let mut tx = self.db.begin().await?;
            let inserted = self.insert_in(&mut tx, p).await?;
            tx.commit().await?;
            return Ok(inserted);
        }
        Ok(self.db.write_exec(self.insert_sql(p)).await? > 0)
    }

    /// Inserts one checkpoint inside `tx`, as [`SqlStore::insert_one`] does. On SQLite a
    /// child goes in as a lookup of its parent and then a one-row `INSERT … VALUES`, not
    /// `INSERT … SELECT … WHERE EXISTS` (statement journals: `lite`'s module docs); the
    /// lookup runs under the writer lock, so nothing deletes the parent in between.
    async fn insert_in(&self, tx: &mut Tx, p: &Prepared) -> DbResult<bool> {
        if self.dialect() == Dialect::Sqlite
            && let Some(parent) = &p.parent_id
        {
            let found = tx
                .opt(
                    Sql::new(concat!(
                        "SELECT 1 AS found FROM checkpoints WHERE thread_id = $1 ",
                        "AND checkpoint_ns = $2 AND checkpoint_id = $3"
                    ))
                    .bind(p.thread_id.as_str())
                    .bind(p.ns.as_str())
                    .bind(parent.as_str()),
                )
                .await?;
            if found.is_none() {
                return Ok(false);
            }
        }
        Ok(tx.exec(self.insert_sql(p)).await? > 0)
    }

    /// The statement inserting one checkpoint.
    fn insert_sql(&self, p: &Prepared) -> Sql {
        // With a parent, insert only while the parent exists (Postgres: holding a key-share
        // lock on it until commit), so a write racing a rollback of the parent's run fails
        // instead of leaving a delta that cannot be replayed. `ON CONFLICT DO NOTHING`: ids
        // are unique, so a conflict is this very insert retried after a lost commit.
        // (SQLite looks the parent up first: `SqlStore::insert_in`.)
        let sql = match (&p.parent_id, self.dialect()) {
            (None, _) | (Some(_), Dialect::Sqlite) => concat!(
                "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id, ",
                "run_id, metadata, writes, snapshot, snap_bytes, delta_bytes, next, tasks, ",
                "created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ",
                "ON CONFLICT DO NOTHING"
            ),
            (Some(_), Dialect::Postgres) => concat!(
                "WITH parent AS (SELECT 1 FROM checkpoints WHERE thread_id = $1 ",
                "AND checkpoint_ns = $2 AND checkpoint_id = $4 FOR KEY SHARE) ",
                "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id, ",
                "run_id, metadata, writes, snapshot, snap_bytes, delta_bytes, next, tasks, ",
                "created_at) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 ",
                "FROM parent ON CONFLICT DO NOTHING"
            ),
        };
        let sql = Sql::new(sql)
            .bind(p.thread_id.as_str())
            .bind(p.ns.as_str())
            .bind(p.id.as_str());
        row_args(sql, p, ids::now())
    }

    /// Postgres: inserts a batch of linked checkpoints (of different runs, gathered by
    /// [`Batcher`]) with one statement: each item's rows only while the parent of its first
    /// row exists, under a key-share lock, as [`SqlStore::insert_one`] does for one row.
    /// Answers, per item, which of its rows went in.
    async fn insert_rows(&self, items: Vec<Links>) -> Vec<DbResult<Vec<bool>>> {
        if let [links] = items.as_slice()
            && let [one] = links.as_slice()
        {
            return vec![self.insert_one(one).await.map(|b| vec![b])];
        }
        let (args, rows) = match columns_of(&items) {
            Ok(columns) => columns,
            Err(e) => return every_item_fails(&items, &e),
        };
        let text = format!(
            "WITH v AS (SELECT * FROM {rows} AS v ({CHECKPOINT_ROW}, head)) \
             INSERT INTO checkpoints ({CHECKPOINT_ROW}) \
             SELECT {CHECKPOINT_ROW} FROM v WHERE v.head IS NULL OR EXISTS (SELECT 1 \
             FROM checkpoints p WHERE p.thread_id = v.thread_id \
             AND p.checkpoint_ns = v.checkpoint_ns AND p.checkpoint_id = v.head FOR KEY SHARE) \
             ON CONFLICT DO NOTHING RETURNING thread_id, checkpoint_id"
        );
        match self.db.write_all(Sql::dynamic(text, args)).await {
            Ok(returned) => {
                let mut inserted = std::collections::HashSet::new();
                for r in returned {
                    match r
                        .text("thread_id")
                        .and_then(|t| Ok((t, r.text("checkpoint_id")?)))
                    {
                        Ok(key) => {
                            inserted.insert(key);
                        }
                        Err(e) => return every_item_fails(&items, &e),
                    }
                }
                items
                    .iter()
                    .map(|links| {
                        Ok(links
                            .iter()
                            .map(|p| inserted.contains(&(p.thread_id.clone(), p.id.clone())))
                            .collect())
                    })
                    .collect()
            }
            Err(e) if e.is_transient() => {
                let msg = format!("{e:?}");
                items
                    .iter()
                    .map(|_| Err(DbErr::GroupFailed(msg.clone())))
                    .collect()
            }
            Err(_) => {
                // A row the database refuses must not fail the others: one item at a time.
                let mut out = Vec::with_capacity(items.len());
                for links in &items {
                    out.push(match links.as_slice() {
                        [one] => self.insert_one(one).await.map(|b| vec![b]),
                        chain => self
                            .insert_chain_once(chain)
                            .await
                            .map(|()| vec![true; chain.len()]),
                    });
                }
                out
            }
        }
    }

    fn prepare(
        &self,
        cp: &NewCheckpoint,
        parent: Option<&Cached>,
        parent_accounting: Option<Accounting>,
    ) -> DbResult<Prepared> {
        let writes = encode_writes(&cp.writes);
        let delta_len = writes.len() as i64;
        let snapshot = needs_snapshot(parent_accounting.as_ref(), delta_len)
            || writes_need_normalizing(&cp.writes);
        if cfg!(debug_assertions)
            && !snapshot
            && let Some(parent_state) = parent.and_then(Cached::state)
        {
            // Debug builds (and so every test) check that replaying the writes reproduces the
            // caller's state. A release build skips the check and stores the delta, so the
            // state read back would be wrong: a mismatch is a bug, and it fails loudly here
            // instead of being papered over with a snapshot only debug builds would take.
            let mut replayed = (*parent_state).clone();
            let mut updates: Vec<_> = cp.writes.iter().map(|(_, w)| w.clone()).collect();
            let same = replayed.apply_writes(&mut updates).is_ok() && replayed == *cp.state;
            assert!(
                same,
                "checkpoint writes do not reproduce the given state (thread {}, parent {:?}): \
                 a release build would store a delta that reads back a different state",
                cp.thread_id, cp.parent_id
            );
        }
        let (snapshot, accounting) = match (snapshot, parent_accounting) {
            (false, Some(p)) => (
                None,
                Accounting {
                    snap_bytes: p.snap_bytes,
                    delta_bytes: p.delta_bytes + delta_len,
                },
            ),
            _ => {
                let text = state_json(&cp.state)?;
                let len = text.len() as i64;
                (
                    Some(text),
                    Accounting {
                        snap_bytes: len,
                        delta_bytes: 0,
                    },
                )
            }
        };
        // Packed here, before the writer is taken.
        let packed = match (&snapshot, self.dialect()) {
            (Some(text), Dialect::Sqlite) => super::pack::pack(text),
            _ => None,
        };
        let packed_writes = match self.dialect() {
            Dialect::Sqlite => super::pack::pack(&writes),
            Dialect::Postgres => None,
        };
        let next = serde_json::to_value(&cp.next).unwrap_or(Value::Array(Vec::new()));
        let tasks = serde_json::to_value(&cp.tasks)
            .map_err(|e| DbErr::invalid(format!("tasks cannot be stored as JSON: {e}")))?;
        Ok(Prepared {
            thread_id: cp.thread_id.clone(),
            ns: cp.checkpoint_ns.clone(),
            id: String::new(),
            parent_id: cp.parent_id.clone(),
            run_id: cp.run_id.clone(),
            metadata: Arg::json_map(&cp.metadata),
            writes,
            packed_writes,
            snapshot,
            packed,
            accounting,
            next: Arg::json(&next),
            tasks: Arg::json(&tasks),
        })
    }

    async fn get_checkpoint_once(
        &self,
        thread_id: &str,
        ns: &str,
        checkpoint_id: Option<&str>,
    ) -> DbResult<Option<Checkpoint>> {
        let sql = match checkpoint_id {
            Some(id) => Sql::new(concat!(
                "SELECT ",
                ckpt_cols!(),
                " FROM checkpoints WHERE thread_id = $1 AND checkpoint_ns = $2 ",
                "AND checkpoint_id = $3"
            ))
            .bind(thread_id)
            .bind(ns)
            .bind(id),
            None => Sql::new(concat!(
                "SELECT ",
                ckpt_cols!(),
                " FROM checkpoints WHERE thread_id = $1 AND checkpoint_ns = $2 ",
                "ORDER BY checkpoint_id DESC LIMIT 1"
            ))
            .bind(thread_id)
            .bind(ns),
        };
        let Some(row) = self.db.read_opt(sql).await? else {
            return Ok(None);
        };
        let Meta {
            mut checkpoint,
            accounting,
        } = meta_from_row(&row)?;
        let id = checkpoint.checkpoint_id.clone();
        checkpoint.state = match self.cache.get(thread_id, ns, &id).and_then(|c| c.state()) {
            Some(state) => state,
            None => {
                let mut states = load_states(
                    &mut Exec::Read(&self.db),
                    thread_id,
                    ns,
                    std::slice::from_ref(&id),
                    HashMap::new(),
                )
                .await?;
                let state = states.remove(&id).ok_or_else(|| {
                    DbErr::corrupt(format!("checkpoint {id} could not be rebuilt"))
                })?;
                if checkpoint_id.is_none() {
                    self.cache.put(
                        thread_id,
                        ns,
                        Cached {
                            checkpoint_id: id,
                            state: Held::Strong(state.clone()),
                            accounting,
                        },
                    );
                }
                state
            }
        };
        Ok(Some(checkpoint))
    }

    async fn list_checkpoints_once(
        &self,
        thread_id: &str,
        query: &HistoryQuery,
    ) -> DbResult<Vec<Checkpoint>> {
        let ns = query.checkpoint_ns.as_str();
        let mut w = Where::new(self.dialect());
        w.eq("thread_id", thread_id);
        w.eq("checkpoint_ns", ns);
        if let Some(before) = &query.before {
            let p = w.binds.push(before.as_str());
            w.clause(format!("checkpoint_id < {p}"));
        }
        if let Some(m) = &query.metadata {
            w.contains("metadata", m);
        }
        let post = w.has_post();
        let mut text = format!(
            "SELECT {} FROM checkpoints{} ORDER BY checkpoint_id DESC",
            ckpt_cols!(),
            w.sql()
        );
        if !post && query.limit > 0 {
            let p = w.binds.push(super::clamp_i64(query.limit));
            text.push_str(&format!(" LIMIT {p}"));
        }
        let rows = self
            .db
            .read_all(Sql::dynamic(text, std::mem::take(&mut w.binds.args)))
            .await?;
        let mut metas = Vec::new();
        for row in &rows {
            if post && !w.passes(row)? {
                continue;
            }
            metas.push(meta_from_row(row)?);
            if query.limit > 0 && metas.len() as u64 >= query.limit {
                break;
            }
        }
        let ids: Vec<String> = metas
            .iter()
            .map(|m| m.checkpoint.checkpoint_id.clone())
            .collect();
        let mut known = HashMap::new();
        for id in &ids {
            if let Some(state) = self.cache.get(thread_id, ns, id).and_then(|c| c.state()) {
                known.insert(id.clone(), state);
            }
        }
        let mut states = load_states(&mut Exec::Read(&self.db), thread_id, ns, &ids, known).await?;
        metas
            .into_iter()
            .map(|m| {
                let mut c = m.checkpoint;
                c.state = states.remove(&c.checkpoint_id).ok_or_else(|| {
                    DbErr::corrupt(format!(
                        "checkpoint {} could not be rebuilt",
                        c.checkpoint_id
                    ))
                })?;
                Ok(c)
            })
            .collect()
    }

    async fn delete_checkpoints_for_run_once(
        &self,
        thread_id: &str,
        run_id: &str,
    ) -> DbResult<u64> {
        let mut tx = self.db.begin().await?;
        let n = delete_run_checkpoints(&mut tx, self.dialect(), thread_id, run_id).await?;
        tx.commit().await?;
        self.cache.invalidate_thread(thread_id);
        Ok(n)
    }

    async fn patch_checkpoint_metadata_once(
        &self,
        thread_id: &str,
        checkpoint_id: &str,
        metadata: &Map<String, Value>,
    ) -> DbResult<()> {
        let mut tx = self.db.begin().await?;
        let select = self.dialect().pick(
            "SELECT checkpoint_ns, metadata FROM checkpoints WHERE thread_id = $1 AND checkpoint_id = $2",
            "SELECT checkpoint_ns, metadata FROM checkpoints WHERE thread_id = $1 AND checkpoint_id = $2 FOR UPDATE",
        );
        let rows = tx
            .all(Sql::new(select).bind(thread_id).bind(checkpoint_id))
            .await?;
        if rows.is_empty() {
            return Err(DbErr::not_found(format!(
                "Checkpoint {checkpoint_id} of thread {thread_id} not found"
            )));
        }
        for row in rows {
            let mut current = row.map("metadata")?;
            merge_shallow(&mut current, metadata);
            tx.exec(
                Sql::new(concat!(
                    "UPDATE checkpoints SET metadata = $4 WHERE thread_id = $1 ",
                    "AND checkpoint_ns = $2 AND checkpoint_id = $3"
                ))
                .bind(thread_id)
                .bind(row.text("checkpoint_ns")?)
                .bind(checkpoint_id)
                .arg(Arg::json_map(&current)),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn put_writes_once(
        &self,
        thread_id: &str,
        ns: &str,
        checkpoint_id: &str,
        task_id: &str,
        writes: &[(String, Value)],
    ) -> DbResult<()> {
        let mut tx = self.db.begin().await?;
        tx.exec(
            Sql::new(concat!(
                "DELETE FROM checkpoint_writes WHERE thread_id = $1 AND checkpoint_ns = $2 ",
                "AND checkpoint_id = $3 AND task_id = $4"
            ))
            .bind(thread_id)
            .bind(ns)
            .bind(checkpoint_id)
            .bind(task_id),
        )
        .await?;
        for (idx, (channel, value)) in writes.iter().enumerate() {
            tx.exec(
                Sql::new(concat!(
                    "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, ",
                    "task_id, idx, channel, value) VALUES ($1, $2, $3, $4, $5, $6, $7)"
                ))
                .bind(thread_id)
                .bind(ns)
                .bind(checkpoint_id)
                .bind(task_id)
                .bind(idx as i64)
                .bind(channel.as_str())
                .bind(value.to_string()),
            )
            .await?;
        }
        tx.commit().await
    }

    async fn step_writes_once(
        &self,
        thread_id: &str,
        ns: &str,
        checkpoint_id: &str,
    ) -> DbResult<Option<Vec<(String, Value)>>> {
        let mut w = Where::new(self.dialect());
        w.eq("thread_id", thread_id);
        w.eq("checkpoint_ns", ns);
        w.eq("parent_id", checkpoint_id);
        // A child's id sorts after its parent's: start the primary-key scan there.
        let p = w.binds.push(checkpoint_id);
        w.clause(format!("checkpoint_id > {p}"));
        let mut source = Map::new();
        source.insert("source".into(), Value::String("loop".into()));
        w.fields_equal("metadata", &source);
        let text = format!(
            "SELECT checkpoint_id, writes FROM checkpoints{} ORDER BY checkpoint_id LIMIT 1",
            w.sql()
        );
        let Some(row) = self
            .db
            .read_opt(Sql::dynamic(text, std::mem::take(&mut w.binds.args)))
            .await?
        else {
            return Ok(None);
        };
        let child = row.text("checkpoint_id")?;
        decode_writes_json(&row.text("writes")?)
            .map(Some)
            .map_err(|e| DbErr::corrupt(format!("checkpoint {child}: {e}")))
    }

    async fn pending_writes_once(
        &self,
        thread_id: &str,
        ns: &str,
        checkpoint_id: &str,
    ) -> DbResult<Vec<PendingWrite>> {
        let rows = self
            .db
            .read_all(
                Sql::new(concat!(
                    "SELECT task_id, channel, value FROM checkpoint_writes WHERE thread_id = $1 ",
                    "AND checkpoint_ns = $2 AND checkpoint_id = $3 ORDER BY task_id, idx"
                ))
                .bind(thread_id)
                .bind(ns)
                .bind(checkpoint_id),
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(PendingWrite {
                    task_id: r.text("task_id")?,
                    channel: r.text("channel")?,
                    value: serde_json::from_str(&r.text("value")?)
                        .map_err(|e| DbErr::corrupt(format!("pending write: {e}")))?,
                })
            })
            .collect()
    }
}

#[async_trait]
impl CheckpointStore for SqlStore {
    async fn put_checkpoint(&self, checkpoint: NewCheckpoint) -> Result<String> {
        let thread_id = checkpoint.thread_id.as_str();
        let ns = checkpoint.checkpoint_ns.as_str();
        // Inner futures boxed, as in `put_checkpoints`.
        let (parent, parent_accounting) =
            Box::pin(self.parent_of(thread_id, ns, checkpoint.parent_id.as_deref())).await?;
        let mut prepared = self
            .prepare(&checkpoint, parent.as_ref(), parent_accounting)
            .map_err(super::db::DbErr::into_store)?;
        prepared.id = self.new_id(thread_id, ns, checkpoint.parent_id.clone());
        let id = prepared.id.clone();
        let links = Arc::new(vec![prepared]);
        Box::pin(self.insert_links_timed(&links)).await?;
        self.remember_latest(&checkpoint, &links[0]);
        Ok(id)
    }

    /// A chain is written whole or not at all: on SQLite in one transaction (one commit and
    /// one set of WAL pages instead of one per checkpoint), on Postgres as one item of the
    /// insert batcher (one round trip, shared with other runs' inserts).
    async fn put_checkpoints(&self, mut chain: Vec<NewCheckpoint>) -> Result<Vec<String>> {
        let single_thread = chain
            .windows(2)
            .all(|w| w[0].thread_id == w[1].thread_id && w[0].checkpoint_ns == w[1].checkpoint_ns);
        if chain.len() < 2 || !single_thread {
            return crate::put_in_sequence(self, chain).await;
        }
        let thread_id = chain[0].thread_id.clone();
        let ns = chain[0].checkpoint_ns.clone();
        let mut previous = chain[0].parent_id.clone();
        // The inner futures are boxed: this one is boxed by the trait, and a boxed future
        // is copied whole (its largest state) every time it moves.
        let (mut parent, mut accounting) =
            Box::pin(self.parent_of(&thread_id, &ns, previous.as_deref())).await?;
        let mut prepared = Vec::with_capacity(chain.len());
        for cp in chain.iter_mut() {
            cp.parent_id = previous.clone();
            let mut p = self
                .prepare(cp, parent.as_ref(), accounting)
                .map_err(super::db::DbErr::into_store)?;
            p.id = self.new_id(&thread_id, &ns, previous.clone());
            previous = Some(p.id.clone());
            accounting = Some(p.accounting.clone());
            parent = Some(Cached {
                checkpoint_id: p.id.clone(),
                state: Held::Weak(Arc::downgrade(&cp.state)),
                accounting: p.accounting.clone(),
            });
            prepared.push(p);
        }
        let ids = prepared.iter().map(|p| p.id.clone()).collect();
        let links = Arc::new(prepared);
        Box::pin(self.insert_links_timed(&links)).await?;
        if let (Some(last_cp), Some(last)) = (chain.last(), links.last()) {
            self.remember_latest(last_cp, last);
        }
        Ok(ids)
    }

    async fn get_checkpoint(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: Option<&str>,
    ) -> Result<Option<Checkpoint>> {
        retry!(self.get_checkpoint_once(thread_id, checkpoint_ns, checkpoint_id))
    }

    async fn list_checkpoints(
        &self,
        thread_id: &str,
        query: &HistoryQuery,
    ) -> Result<Vec<Checkpoint>> {
        retry!(self.list_checkpoints_once(thread_id, query))
    }

    async fn delete_checkpoints_for_run(&self, thread_id: &str, run_id: &str) -> Result<u64> {
        retry!(self.delete_checkpoints_for_run_once(thread_id, run_id))
    }

    async fn patch_checkpoint_metadata(
        &self,
        thread_id: &str,
        checkpoint_id: &str,
        metadata: &Map<String, Value>,
    ) -> Result<()> {
        retry!(self.patch_checkpoint_metadata_once(thread_id, checkpoint_id, metadata))
    }

    async fn put_writes(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
        task_id: &str,
        writes: Vec<(String, Value)>,
    ) -> Result<()> {
        retry!(self.put_writes_once(thread_id, checkpoint_ns, checkpoint_id, task_id, &writes))
    }

    async fn pending_writes(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
    ) -> Result<Vec<PendingWrite>> {
        retry!(self.pending_writes_once(thread_id, checkpoint_ns, checkpoint_id))
    }

    async fn step_writes(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
    ) -> Result<Option<Vec<(String, Value)>>> {
        retry!(self.step_writes_once(thread_id, checkpoint_ns, checkpoint_id))
    }

    async fn thread_storage(&self, thread_id: &str) -> Result<ThreadStorage> {
        retry!(self.thread_storage_once(thread_id))
    }
}
