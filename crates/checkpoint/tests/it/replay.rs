//! Delta replay equivalence: random step sequences (appends, in-place replacements,
//! removals, remove-all, every channel, forks from earlier checkpoints, messages large
//! enough to trigger snapshots at varying points) are persisted; every checkpoint read back
//! — from a cold store that must replay deltas, and from the writer's warm cache — equals
//! the state the steps produced when applied directly.

use crate::support::{conformance, new_id, put_step};
use fawn_checkpoint::*;
use fawn_state::{Message, REMOVE_ALL_MESSAGES, StateUpdate, ThreadState, ToolCall};
use serde_json::json;
use std::collections::HashMap;

conformance!(store: ; config: delta_replay_equals_direct_application, snapshots_are_amortized);

/// xorshift64*: deterministic, so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn text(rng: &mut Rng) -> String {
    let len = match rng.below(10) {
        0 => 3000 + rng.below(3000), // big: pushes a snapshot
        1..=3 => 200 + rng.below(800),
        _ => 5 + rng.below(60),
    };
    let alphabet: Vec<char> = "abcdefghij klmnop\"\\é🙂\n".chars().collect();
    (0..len)
        .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
        .collect()
}

/// One random write valid against `state` (which it then updates).
fn random_write(rng: &mut Rng, state: &mut ThreadState, counter: &mut u64) -> StateUpdate {
    let ids: Vec<String> = state.messages.iter().filter_map(|m| m.id.clone()).collect();
    let mut w = StateUpdate::default();
    match rng.below(12) {
        0..=4 => {
            let n = 1 + rng.below(3);
            let mut msgs = Vec::new();
            for _ in 0..n {
                *counter += 1;
                let id = format!("m{counter}");
                msgs.push(match rng.below(3) {
                    0 => Message::human(text(rng)).with_id(id),
                    1 => Message::ai(text(rng))
                        .with_id(id)
                        .with_tool_calls(vec![ToolCall::new(
                            "search",
                            json!({"q": text(rng), "n": rng.below(5)}),
                            format!("call{counter}"),
                        )]),
                    _ => Message::tool(text(rng), format!("call{counter}"), Some("search".into()))
                        .with_id(id),
                });
            }
            w.messages = Some(msgs);
        }
        5 if !ids.is_empty() => {
            let id = &ids[rng.below(ids.len() as u64) as usize];
            w.messages = Some(vec![
                Message::ai(format!("edited {}", text(rng))).with_id(id.clone()),
            ]);
        }
        6 if !ids.is_empty() => {
            let id = &ids[rng.below(ids.len() as u64) as usize];
            w.messages = Some(vec![Message::remove(id.clone())]);
        }
        7 if rng.chance(30) => {
            *counter += 1;
            w.messages = Some(vec![
                Message::remove(REMOVE_ALL_MESSAGES),
                Message::human(format!("fresh start {counter}")).with_id(format!("m{counter}")),
            ]);
        }
        8 => {
            w.title = Some(if rng.chance(20) {
                None
            } else {
                Some(text(rng))
            });
            w.artifacts = Some(vec![format!("/mnt/user-data/outputs/f{}.md", rng.below(6))]);
        }
        9 => {
            w = StateUpdate::from_value(json!({
                "todos": [{"content": text(rng), "status": "in_progress"}],
                "viewed_images": if rng.chance(30) { json!({}) } else { json!({format!("img{}", rng.below(4)): {"base64": "AAAA", "mime_type": "image/png"}}) },
            }))
            .unwrap();
        }
        10 => {
            w.extra.insert(
                format!("custom_{}", rng.below(3)),
                json!({"n": rng.below(100), "t": text(rng)}),
            );
            w.summary_text = Some(Some(text(rng)));
        }
        _ => {
            w.uploaded_files = Some(Some(vec![
                json!({"filename": text(rng), "size": rng.below(1000)}),
            ]));
        }
    }
    let mut one = [w.clone()];
    state
        .apply_writes(&mut one)
        .expect("generated write applies");
    w
}

async fn delta_replay_equals_direct_application(config: BackendConfig) {
    let writer = open(&config).await.unwrap();
    let mut expected: HashMap<String, ThreadState> = HashMap::new();
    let mut threads = Vec::new();
    for seed in [0x9E37_79B9_7F4A_7C15u64, 42, 7_777_777] {
        let mut rng = Rng(seed);
        let thread = new_id();
        let mut order: Vec<String> = Vec::new();
        let mut counter = 0;
        for step in 0..90 {
            let parent = if order.is_empty() {
                None
            } else if rng.chance(12) {
                Some(order[rng.below(order.len() as u64) as usize].clone())
            } else {
                order.last().cloned()
            };
            let base = parent
                .as_ref()
                .map(|p| expected[p].clone())
                .unwrap_or_default();
            let mut scratch = base.clone();
            let n = 1 + rng.below(3);
            let writes: Vec<(&str, StateUpdate)> = (0..n)
                .map(|i| {
                    let node = if i == 0 { "agent" } else { "tools" };
                    (node, random_write(&mut rng, &mut scratch, &mut counter))
                })
                .collect();
            let (id, state) = put_step(
                &*writer,
                &thread,
                parent.as_ref().map(|p| (p.as_str(), &expected[p])),
                None,
                json!({"step": step, "seed": seed}),
                writes,
            )
            .await;
            assert_eq!(
                state, scratch,
                "seed {seed} step {step}: one step = its writes in order"
            );
            expected.insert(id.clone(), state);
            order.push(id);
        }
        threads.push((thread, order));
    }

    // A second store on the same database starts with an empty cache: every read replays.
    let reader = open(&config).await.unwrap();
    for store in [&reader, &writer] {
        for (thread, order) in &threads {
            for id in order {
                let got = store
                    .get_checkpoint(thread, "", Some(id))
                    .await
                    .unwrap()
                    .unwrap();
                // Equal as `values`: an empty always-present channel (`artifacts: []`) reads back
                // as never written, which shows the same.
                assert!(
                    got.state.to_value() == expected[id].to_value(),
                    "checkpoint {id} differs"
                );
            }
            let history = store
                .list_checkpoints(thread, &HistoryQuery::default())
                .await
                .unwrap();
            assert_eq!(history.len(), order.len());
            let mut sorted = order.clone();
            sorted.sort();
            sorted.reverse();
            let ids: Vec<String> = history.iter().map(|c| c.checkpoint_id.clone()).collect();
            assert_eq!(ids, sorted, "newest first across branches");
            for c in &history {
                assert!(
                    c.state.to_value() == expected[&c.checkpoint_id].to_value(),
                    "history {} differs",
                    c.checkpoint_id
                );
            }
            let latest = store
                .get_checkpoint(thread, "", None)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&latest.checkpoint_id, sorted.first().unwrap());
            assert!(latest.state.to_value() == expected[&latest.checkpoint_id].to_value());
        }
    }
    reader.close().await;
    writer.close().await;
}

/// Snapshots are rare and pay for themselves: over a long linear thread, the bytes of
/// snapshots stay within a small multiple of the bytes of deltas, and a checkpoint is
/// never far (in bytes) from its snapshot.
async fn snapshots_are_amortized(config: BackendConfig) {
    let store = open(&config).await.unwrap();
    let thread = new_id();
    let mut parent: Option<(String, ThreadState)> = None;
    for i in 0..400 {
        let (id, s) = put_step(
            &*store,
            &thread,
            parent.as_ref().map(|(id, s)| (id.as_str(), s)),
            None,
            json!({"step": i}),
            vec![(
                "agent",
                crate::support::say(&format!("m{i}"), &"x".repeat(300)),
            )],
        )
        .await;
        parent = Some((id, s));
    }
    store.close().await;
    let (snapshots, snapshot_bytes, delta_bytes, max_acc): (i64, i64, i64, i64) = match &config {
        BackendConfig::Sqlite { path } => {
            use sqlx::Connection;
            let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite:{}", path.display()))
                .await
                .unwrap();
            let q = "SELECT COUNT(snapshot), COALESCE(SUM(LENGTH(snapshot)), 0), \
                     SUM(LENGTH(writes)), MAX(delta_bytes) FROM checkpoints WHERE thread_id = $1";
            sqlx::query_as(q)
                .bind(&thread)
                .fetch_one(&mut conn)
                .await
                .unwrap()
        }
        BackendConfig::Postgres { url, schema } => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            let q = sqlx::AssertSqlSafe(format!(
                "SELECT COUNT(snapshot), COALESCE(SUM(LENGTH(snapshot)), 0)::BIGINT, \
                 SUM(LENGTH(writes))::BIGINT, MAX(delta_bytes) \
                 FROM \"{}\".checkpoints WHERE thread_id = $1",
                schema.as_deref().unwrap()
            ));
            sqlx::query_as(q)
                .bind(&thread)
                .fetch_one(&mut conn)
                .await
                .unwrap()
        }
    };
    // 400 steps of ~350 bytes: the state ends around 150 KB. Snapshots grow geometrically.
    assert!(snapshots >= 3, "snapshots: {snapshots}");
    assert!(snapshots <= 40, "snapshots: {snapshots}");
    assert!(
        snapshot_bytes <= 3 * delta_bytes,
        "snapshot bytes {snapshot_bytes} vs delta bytes {delta_bytes}"
    );
    // Replay work per read stays below one snapshot's worth of deltas.
    let final_state_len = serde_json::to_string(&parent.unwrap().1).unwrap().len() as i64;
    assert!(
        max_acc <= final_state_len,
        "max replay {max_acc} > {final_state_len}"
    );
}
