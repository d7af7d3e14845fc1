//! Delta storage of checkpoints, independent of the database.
//!
//! Every checkpoint stores its step's writes. A checkpoint also stores a full snapshot of
//! its state when the bytes of deltas written on its branch since the last snapshot reach
//! that snapshot's size (with a floor, so tiny threads do not snapshot every step). Each
//! snapshot of size S is thus paid for by at least S bytes of deltas: persisting a step
//! costs O(its writes) amortized, however long the thread is, and reading a state replays
//! deltas whose total size is below one snapshot. A state is rebuilt by walking parent
//! links up to the nearest snapshot (branches share their ancestors) and applying each
//! step's writes through the reducers, which is deterministic (message ids are assigned
//! into the writes before they are stored).

use crate::cache::Accounting;
use fawn_state::state::CLEAR_VIEWED_IMAGES_KEY;
use fawn_state::{MessageKind, StateUpdate, ThreadState};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Deltas accumulate up to at least this many bytes before a snapshot is taken.
pub(crate) const SNAPSHOT_FLOOR_BYTES: i64 = 4096;

/// The writes of a step as stored: a JSON array of `[node, update]` pairs.
///
/// Serialized straight from the updates: the same text as [`writes_tree`]'s (a test
/// compares them), without building that tree first.
pub(crate) fn encode_writes(writes: &[(String, StateUpdate)]) -> String {
    let pairs: Vec<(&str, &StateUpdate)> = writes.iter().map(|(n, u)| (n.as_str(), u)).collect();
    // Not expected to fail (an update's maps have string keys); the tree never does.
    serde_json::to_string(&pairs).unwrap_or_else(|_| writes_tree(writes).to_string())
}

/// The writes as a JSON tree, through [`StateUpdate::to_value`].
fn writes_tree(writes: &[(String, StateUpdate)]) -> Value {
    Value::Array(
        writes
            .iter()
            .map(|(n, u)| Value::Array(vec![Value::String(n.clone()), u.to_value()]))
            .collect(),
    )
}

/// Parses stored writes into `(node, update JSON)` pairs.
pub(crate) fn decode_writes_json(text: &str) -> Result<Vec<(String, Value)>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("writes: {e}"))?;
    let Value::Array(items) = v else {
        return Err("writes: expected an array".to_string());
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::Array(mut pair) if pair.len() == 2 => {
                let update = pair.pop().unwrap_or(Value::Null);
                match pair.pop() {
                    Some(Value::String(node)) => Ok((node, update)),
                    _ => Err("writes: expected [node, update]".to_string()),
                }
            }
            _ => Err("writes: expected [node, update]".to_string()),
        })
        .collect()
}

pub(crate) fn decode_updates(text: &str) -> Result<Vec<StateUpdate>, String> {
    decode_writes_json(text)?
        .into_iter()
        .map(|(node, v)| {
            StateUpdate::from_value(v).map_err(|e| format!("write of node {node}: {e}"))
        })
        .collect()
}

/// Whether a stored write can be folded into the writes before it (`StateUpdate::merge`)
/// without changing the result: everything except `RemoveMessage`s and clearing
/// `viewed_images`, the cases `merge` documents as not expressible in one write.
pub(crate) fn mergeable(w: &StateUpdate) -> bool {
    let removes = w
        .messages
        .as_ref()
        .is_some_and(|msgs| msgs.iter().any(|m| m.kind == MessageKind::Remove));
    let clears_images = w
        .viewed_images
        .as_ref()
        .is_some_and(|v| v.is_empty() || v.contains_key(CLEAR_VIEWED_IMAGES_KEY));
    !removes && !clears_images
}

/// Applies runs of steps as one write where that is exact, so replaying k deltas over n
/// messages costs O(n + k) instead of k passes over the message list.
struct Replayer {
    state: ThreadState,
    pending: Option<StateUpdate>,
}

impl Replayer {
    fn push(&mut self, mut updates: Vec<StateUpdate>) -> Result<(), String> {
        if updates.iter().all(mergeable) {
            for u in updates {
                match &mut self.pending {
                    Some(p) => p.merge(u),
                    None => self.pending = Some(u),
                }
            }
            Ok(())
        } else {
            self.flush()?;
            self.state
                .apply_writes(&mut updates)
                .map_err(|e| format!("replaying its writes failed: {e}"))
        }
    }

    fn flush(&mut self) -> Result<(), String> {
        if let Some(p) = self.pending.take() {
            self.state
                .apply_writes(&mut [p])
                .map_err(|e| format!("replaying merged writes failed: {e}"))?;
        }
        Ok(())
    }
}

/// True when replaying `writes` would not reproduce the caller's state exactly because the
/// reducers would still have to assign message ids or convert chunks (randomly, at replay
/// time). Such a checkpoint is stored with a snapshot.
pub(crate) fn writes_need_normalizing(writes: &[(String, StateUpdate)]) -> bool {
    writes.iter().any(|(_, w)| {
        w.messages.as_ref().is_some_and(|msgs| {
            msgs.iter()
                .any(|m| m.is_chunk() || m.id.as_deref().is_none_or(str::is_empty))
        })
    })
}

/// Whether the checkpoint after `parent` (with `delta_len` bytes of writes) stores a
/// snapshot. `None` parent: the first checkpoint of a branch always does.
pub(crate) fn needs_snapshot(parent: Option<&Accounting>, delta_len: i64) -> bool {
    match parent {
        None => true,
        Some(p) => p.delta_bytes + delta_len >= p.snap_bytes.max(SNAPSHOT_FLOOR_BYTES),
    }
}

/// One checkpoint as far as state reconstruction is concerned.
#[derive(Clone, Debug)]
pub(crate) struct ChainRow {
    pub parent_id: Option<String>,
    pub writes: String,
    pub snapshot: Option<String>,
}

/// Rebuilds the states of `targets` from `rows` (every checkpoint on the way from each
/// target up to a snapshot, or to a state in `known`). Returns the states of the targets.
pub(crate) fn reconstruct(
    targets: &[String],
    rows: &HashMap<String, ChainRow>,
    mut known: HashMap<String, Arc<ThreadState>>,
) -> Result<HashMap<String, Arc<ThreadState>>, String> {
    let wanted: HashSet<&String> = targets.iter().collect();
    // Oldest first, so that later targets on the same branch start from earlier ones.
    let mut order: Vec<&String> = targets.iter().collect();
    order.sort();
    order.dedup();
    let mut out = HashMap::new();
    for target in order {
        if let Some(s) = known.get(target) {
            out.insert(target.clone(), s.clone());
            continue;
        }
        // Walk up to a known state or a snapshot.
        let mut path: Vec<&String> = Vec::new();
        let mut cur = target;
        let base: ThreadState = loop {
            if let Some(s) = known.get(cur) {
                break (**s).clone();
            }
            let row = rows
                .get(cur)
                .ok_or_else(|| format!("checkpoint {cur} (an ancestor of {target}) is missing"))?;
            if let Some(snapshot) = &row.snapshot {
                let state: ThreadState = serde_json::from_str(snapshot)
                    .map_err(|e| format!("snapshot of checkpoint {cur}: {e}"))?;
                break state;
            }
            path.push(cur);
            if path.len() > rows.len() {
                return Err(format!("checkpoint {target}: parent links form a cycle"));
            }
            cur = row
                .parent_id
                .as_ref()
                .ok_or_else(|| format!("checkpoint {cur} has neither a snapshot nor a parent"))?;
        };
        // `cur` itself is a snapshot or known; the deltas on `path` come after it.
        if !known.contains_key(cur) && wanted.contains(cur) {
            let shared = Arc::new(base.clone());
            known.insert(cur.clone(), shared.clone());
            out.insert(cur.clone(), shared);
        }
        let mut replay = Replayer {
            state: base,
            pending: None,
        };
        for id in path.iter().rev() {
            let row = rows
                .get(*id)
                .ok_or_else(|| format!("checkpoint {id} is missing"))?;
            let updates =
                decode_updates(&row.writes).map_err(|e| format!("checkpoint {id}: {e}"))?;
            replay
                .push(updates)
                .map_err(|e| format!("checkpoint {id}: {e}"))?;
            if wanted.contains(*id) {
                replay
                    .flush()
                    .map_err(|e| format!("checkpoint {id}: {e}"))?;
                let shared = Arc::new(replay.state.clone());
                known.insert((*id).clone(), shared.clone());
                out.insert((*id).clone(), shared);
            }
        }
        if path.is_empty() && !out.contains_key(target) {
            // The target is the snapshot itself.
            let shared = Arc::new(replay.state);
            known.insert(target.clone(), shared.clone());
            out.insert(target.clone(), shared);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_state::Message;

    fn human(id: &str, text: &str) -> StateUpdate {
        StateUpdate::messages(vec![Message::human(text).with_id(id)])
    }

    #[test]
    fn writes_round_trip() {
        let writes = vec![("agent".to_string(), human("m1", "hi"))];
        let text = encode_writes(&writes);
        let back = decode_writes_json(&text).unwrap();
        assert_eq!(back[0].0, "agent");
        assert_eq!(
            StateUpdate::from_value(back[0].1.clone()).unwrap(),
            writes[0].1
        );
        assert_eq!(
            decode_writes_json("{}").unwrap_err(),
            "writes: expected an array"
        );
        assert_eq!(
            decode_writes_json("[[1, {}]]").unwrap_err(),
            "writes: expected [node, update]"
        );
    }

    #[test]
    fn writes_text_is_the_trees_text() {
        let mut ai = Message::ai("an \"answer\" ✓ \u{1} </script>").with_id("a1");
        ai.tool_calls = vec![fawn_state::ToolCall {
            id: Some("call_1".into()),
            name: "present_files".into(),
            args: serde_json::from_str(r#"{"filepaths": ["/x.md"], "n": 1.5e300, "z": null}"#)
                .unwrap(),
            extra: serde_json::Map::new(),
        }];
        ai.extra
            .insert("custom".into(), serde_json::json!({"k": [1, "two"]}));
        ai.response_metadata
            .insert("model_name".into(), serde_json::json!("m"));
        let tool = Message::tool("done", "call_1", Some("present_files".into())).with_id("t1");
        let mut update = StateUpdate::messages(vec![ai, tool]);
        update.title = Some(None);
        update.artifacts = Some(vec!["/mnt/user-data/outputs/a.md".into()]);
        update
            .extra
            .insert("other_channel".into(), serde_json::json!({"a": 1}));
        let writes = vec![
            ("model".to_string(), update),
            ("tools".to_string(), StateUpdate::default()),
            ("title".to_string(), human("h1", "")),
        ];
        assert_eq!(encode_writes(&writes), writes_tree(&writes).to_string());
        assert_eq!(encode_writes(&[]), "[]");
    }

    #[test]
    fn snapshot_rule_is_amortized() {
        assert!(needs_snapshot(None, 10));
        let small = Accounting {
            snap_bytes: 100,
            delta_bytes: 0,
        };
        assert!(!needs_snapshot(Some(&small), 100)); // below the floor
        assert!(needs_snapshot(Some(&small), SNAPSHOT_FLOOR_BYTES));
        let big = Accounting {
            snap_bytes: 100_000,
            delta_bytes: 99_000,
        };
        assert!(!needs_snapshot(Some(&big), 999));
        assert!(needs_snapshot(Some(&big), 1000));
    }

    #[test]
    fn detects_writes_that_would_replay_differently() {
        assert!(!writes_need_normalizing(&[("a".into(), human("m1", "x"))]));
        let no_id = StateUpdate::messages(vec![Message::human("x")]);
        assert!(writes_need_normalizing(&[("a".into(), no_id)]));
        let chunk = StateUpdate::messages(vec![Message::ai_chunk("x").with_id("c")]);
        assert!(writes_need_normalizing(&[("a".into(), chunk)]));
    }

    #[test]
    fn reconstructs_branches_from_a_shared_snapshot() {
        let mut s0 = ThreadState::default();
        s0.apply(&mut human("m0", "root")).unwrap();
        let mut rows = HashMap::new();
        rows.insert(
            "a0".to_string(),
            ChainRow {
                parent_id: None,
                writes: "[]".into(),
                snapshot: Some(serde_json::to_string(&s0).unwrap()),
            },
        );
        let w1 = encode_writes(&[("n".into(), human("m1", "left"))]);
        let w2 = encode_writes(&[("n".into(), human("m2", "right"))]);
        let w3 = encode_writes(&[("n".into(), human("m3", "left again"))]);
        for (id, parent, w) in [("a1", "a0", &w1), ("a2", "a0", &w2), ("a3", "a1", &w3)] {
            rows.insert(
                id.to_string(),
                ChainRow {
                    parent_id: Some(parent.to_string()),
                    writes: w.clone(),
                    snapshot: None,
                },
            );
        }
        let targets: Vec<String> = ["a3", "a2", "a0", "a1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let states = reconstruct(&targets, &rows, HashMap::new()).unwrap();
        let ids = |id: &str| -> Vec<String> {
            states[id]
                .messages
                .iter()
                .map(|m| m.id.clone().unwrap())
                .collect()
        };
        assert_eq!(ids("a0"), ["m0"]);
        assert_eq!(ids("a1"), ["m0", "m1"]);
        assert_eq!(ids("a2"), ["m0", "m2"]);
        assert_eq!(ids("a3"), ["m0", "m1", "m3"]);

        rows.remove("a1");
        let err = reconstruct(&["a3".to_string()], &rows, HashMap::new()).unwrap_err();
        assert!(err.contains("a1"), "{err}");
    }
}
