//! A bounded in-memory cache of the latest checkpoint of recently used threads.
//!
//! Entries are keyed by `(thread_id, checkpoint_ns)` and remember which checkpoint id they
//! describe, so a hit is only used for exactly that checkpoint: a checkpoint never changes
//! once written, so the cache cannot serve stale data even when other processes write to
//! the same database. Each entry keeps the snapshot accounting the next write needs, and
//! the state:
//!
//! * after a write in the middle of a run, only a *weak* reference to the writer's state:
//!   the agent keeps updating its state in place (`Arc::make_mut` does not copy while the
//!   cache holds no strong reference), and reads while it runs are still free;
//! * after the write that ends a run (nothing next, or an interrupt), and after a read
//!   that had to rebuild the state, a strong reference, so the next run's start reads it
//!   for free.
//!
//! Bounded by entry count and by the approximate serialized size of the states held
//! strongly (least recently used first out).

use fawn_state::ThreadState;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};

/// What a cached checkpoint knows besides its state: the snapshot accounting the next
/// checkpoint on the branch needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Accounting {
    /// Size of the snapshot this checkpoint's chain starts from.
    pub snap_bytes: i64,
    /// Bytes of deltas written since that snapshot (0 for a snapshot).
    pub delta_bytes: i64,
}

/// How an entry holds its state.
#[derive(Clone, Debug)]
pub(crate) enum Held {
    Strong(Arc<ThreadState>),
    Weak(Weak<ThreadState>),
}

#[derive(Clone, Debug)]
pub(crate) struct Cached {
    pub checkpoint_id: String,
    pub state: Held,
    pub accounting: Accounting,
}

impl Cached {
    /// The state, if it is still alive.
    pub fn state(&self) -> Option<Arc<ThreadState>> {
        match &self.state {
            Held::Strong(s) => Some(s.clone()),
            Held::Weak(w) => w.upgrade(),
        }
    }
}

struct Entry {
    value: Cached,
    weight: usize,
    tick: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<(String, String), Entry>,
    lru: BTreeMap<u64, (String, String)>,
    tick: u64,
    bytes: usize,
}

pub(crate) struct StateCache {
    inner: Mutex<Inner>,
    max_entries: usize,
    max_bytes: usize,
}

impl StateCache {
    pub fn new(max_entries: usize, max_bytes: usize) -> StateCache {
        StateCache {
            inner: Mutex::new(Inner::default()),
            max_entries,
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent in a way that
        // matters (worst case a stale weight), so recover from poisoning.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached state of `checkpoint_id`, if it is the one cached for the thread.
    pub fn get(&self, thread_id: &str, ns: &str, checkpoint_id: &str) -> Option<Cached> {
        let mut inner = self.lock();
        let key = (thread_id.to_string(), ns.to_string());
        inner.tick += 1;
        let tick = inner.tick;
        let entry = inner.map.get_mut(&key)?;
        if entry.value.checkpoint_id != checkpoint_id {
            return None;
        }
        let old = std::mem::replace(&mut entry.tick, tick);
        let value = entry.value.clone();
        inner.lru.remove(&old);
        inner.lru.insert(tick, key);
        Some(value)
    }

    /// The checkpoint id cached for a thread, if any.
    pub fn cached_id(&self, thread_id: &str, ns: &str) -> Option<String> {
        let inner = self.lock();
        inner
            .map
            .get(&(thread_id.to_string(), ns.to_string()))
            .map(|e| e.value.checkpoint_id.clone())
    }

    pub fn put(&self, thread_id: &str, ns: &str, value: Cached) {
        let weight = match value.state {
            Held::Strong(_) => {
                usize::try_from(value.accounting.snap_bytes + value.accounting.delta_bytes)
                    .unwrap_or(0)
                    .max(64)
            }
            Held::Weak(_) => 64,
        };
        let key = (thread_id.to_string(), ns.to_string());
        let mut inner = self.lock();
        if let Some(old) = inner.map.remove(&key) {
            inner.lru.remove(&old.tick);
            inner.bytes -= old.weight;
        }
        if weight > self.max_bytes || self.max_entries == 0 {
            return;
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.bytes += weight;
        inner.lru.insert(tick, key.clone());
        inner.map.insert(
            key,
            Entry {
                value,
                weight,
                tick,
            },
        );
        while inner.map.len() > self.max_entries || inner.bytes > self.max_bytes {
            let Some((_, victim)) = inner.lru.pop_first() else {
                break;
            };
            if let Some(e) = inner.map.remove(&victim) {
                inner.bytes -= e.weight;
            }
        }
    }

    /// Forgets every namespace of a thread.
    pub fn invalidate_thread(&self, thread_id: &str) {
        let mut inner = self.lock();
        let keys: Vec<(String, String)> = inner
            .map
            .keys()
            .filter(|(t, _)| t == thread_id)
            .cloned()
            .collect();
        for key in keys {
            if let Some(e) = inner.map.remove(&key) {
                inner.lru.remove(&e.tick);
                inner.bytes -= e.weight;
            }
        }
    }

    pub fn clear(&self) {
        *self.lock() = Inner::default();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(id: &str, bytes: i64) -> Cached {
        Cached {
            checkpoint_id: id.to_string(),
            state: Held::Strong(Arc::new(ThreadState::default())),
            accounting: Accounting {
                snap_bytes: bytes,
                delta_bytes: 0,
            },
        }
    }

    #[test]
    fn hits_only_the_cached_checkpoint_and_evicts_lru() {
        let cache = StateCache::new(2, 1_000_000);
        cache.put("t1", "", cached("a", 100));
        cache.put("t2", "", cached("b", 100));
        assert!(cache.get("t1", "", "a").is_some());
        assert!(cache.get("t1", "", "other").is_none());
        cache.put("t3", "", cached("c", 100)); // evicts t2 (t1 was used more recently)
        assert!(cache.get("t2", "", "b").is_none());
        assert!(cache.get("t1", "", "a").is_some());
        assert_eq!(cache.len(), 2);
        cache.invalidate_thread("t1");
        assert!(cache.get("t1", "", "a").is_none());
        cache.clear();
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn bounded_by_bytes() {
        let cache = StateCache::new(100, 1000);
        cache.put("t1", "", cached("a", 600));
        cache.put("t2", "", cached("b", 600));
        assert!(cache.get("t1", "", "a").is_none());
        assert!(cache.get("t2", "", "b").is_some());
        cache.put("t3", "", cached("c", 5000)); // larger than the whole cache: not kept
        assert!(cache.get("t3", "", "c").is_none());
        assert!(cache.get("t2", "", "b").is_some());
    }

    #[test]
    fn weak_entries_do_not_keep_the_state_alive() {
        let cache = StateCache::new(10, 1000);
        let mut state = Arc::new(ThreadState {
            messages: vec![fawn_state::Message::human("hi").with_id("m1")].into(),
            artifacts: Some(vec!["/mnt/user-data/outputs/a.md".into()]),
            ..Default::default()
        });
        cache.put(
            "t",
            "",
            Cached {
                checkpoint_id: "a".into(),
                state: Held::Weak(Arc::downgrade(&state)),
                accounting: Accounting {
                    snap_bytes: 1_000_000,
                    delta_bytes: 7,
                },
            },
        );
        assert!(cache.get("t", "", "a").unwrap().state().is_some());
        // The writer mutates its state: the state is moved, not copied (its heap data stays
        // where it was; `messages` would be shared either way, so `artifacts` tells), and
        // the entry no longer has the state.
        let artifacts = |s: &ThreadState| s.artifacts.as_ref().map(|a| a.as_ptr());
        let before = artifacts(&state);
        Arc::make_mut(&mut state).title = Some("changed".into());
        assert_eq!(artifacts(&state), before, "state not cloned");
        let entry = cache.get("t", "", "a").unwrap();
        assert!(entry.state().is_none());
        assert_eq!(entry.accounting.delta_bytes, 7, "accounting survives");
    }
}
