//! What a thread's checkpoints occupy ([`crate::CheckpointStore::thread_storage`]): read
//! page by page (checkpoint rows carry snapshots, which can be large), sizes measured as
//! the serialized JSON each part is stored as.

use super::SqlStore;
use super::chain::decode_writes_json;
use super::db::{DbErr, DbResult, Sql};
use crate::types::{StorageUsage, ThreadStorage};
use serde_json::Value;

/// Checkpoint rows read per statement.
const PAGE: i64 = 64;

fn json_len(v: &Value) -> u64 {
    serde_json::to_string(v)
        .map(|s| s.len() as u64)
        .unwrap_or(0)
}

fn add(u: &mut StorageUsage, bytes: u64) {
    u.count += 1;
    u.bytes += bytes;
}

impl SqlStore {
    pub(super) async fn thread_storage_once(&self, thread_id: &str) -> DbResult<ThreadStorage> {
        let mut out = ThreadStorage::default();
        let mut after: Option<(String, String)> = None;
        loop {
            let sql = match &after {
                None => Sql::new(concat!(
                    "SELECT checkpoint_ns, checkpoint_id, parent_id, run_id, metadata, writes, ",
                    "snapshot, next, tasks FROM checkpoints WHERE thread_id = $1 ",
                    "ORDER BY checkpoint_ns, checkpoint_id LIMIT $2"
                ))
                .bind(thread_id)
                .bind(PAGE),
                Some((ns, id)) => Sql::new(concat!(
                    "SELECT checkpoint_ns, checkpoint_id, parent_id, run_id, metadata, writes, ",
                    "snapshot, next, tasks FROM checkpoints WHERE thread_id = $1 ",
                    "AND (checkpoint_ns > $3 OR (checkpoint_ns = $3 AND checkpoint_id > $4)) ",
                    "ORDER BY checkpoint_ns, checkpoint_id LIMIT $2"
                ))
                .bind(thread_id)
                .bind(PAGE)
                .bind(ns.as_str())
                .bind(id.as_str()),
            };
            let rows = self.db.read_all(sql).await?;
            let n = rows.len() as i64;
            for r in &rows {
                let ns = r.text("checkpoint_ns")?;
                let id = r.text("checkpoint_id")?;
                let record = ns.len()
                    + id.len()
                    + r.opt_text("parent_id")?.map_or(0, |p| p.len())
                    + r.opt_text("run_id")?.map_or(0, |p| p.len());
                let record = record as u64
                    + json_len(&r.json("metadata")?)
                    + json_len(&r.json("next")?)
                    + json_len(&r.json("tasks")?);
                add(&mut out.checkpoints, record);
                let writes = decode_writes_json(&r.text("writes")?)
                    .map_err(|e| DbErr::corrupt(format!("checkpoint {id}: {e}")))?;
                let mut values: Vec<(String, u64)> = Vec::new();
                for (node, update) in writes {
                    match update {
                        Value::Object(m) => {
                            values.extend(m.iter().map(|(k, v)| (k.clone(), json_len(v))))
                        }
                        Value::Null => {}
                        other => values.push((node, json_len(&other))),
                    }
                }
                if let Some(snapshot) = r.opt_text("snapshot")? {
                    match serde_json::from_str::<Value>(&snapshot) {
                        Ok(Value::Object(m)) => {
                            values.extend(m.iter().map(|(k, v)| (k.clone(), json_len(v))))
                        }
                        _ => {
                            return Err(DbErr::corrupt(format!(
                                "checkpoint {id}: the snapshot is not a state"
                            )));
                        }
                    }
                }
                for (channel, bytes) in values {
                    add(&mut out.channel_values, bytes);
                    add(out.by_channel.entry(channel).or_default(), bytes);
                }
                after = Some((ns, id));
            }
            if n < PAGE {
                break;
            }
        }
        let rows = self
            .db
            .read_all(
                Sql::new(
                    "SELECT channel, value, task_id FROM checkpoint_writes WHERE thread_id = $1",
                )
                .bind(thread_id),
            )
            .await?;
        for r in &rows {
            let bytes =
                r.text("channel")?.len() + r.text("value")?.len() + r.text("task_id")?.len();
            add(&mut out.pending_writes, bytes as u64);
        }
        Ok(out)
    }
}
