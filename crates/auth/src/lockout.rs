//! Login lockout: after `max_failures` failed logins from one client address within
//! `window`, that address is refused for `lock_for`, whatever the password (DeerFlow's rule:
//! 5 failures per IP). Kept in memory: it slows down guessing against one node; the argon2id
//! cost slows down everything else.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Entry {
    failures: u32,
    first: Instant,
    locked_until: Option<Instant>,
}

/// Failed-login bookkeeping per client key (an address).
#[derive(Debug)]
pub struct Lockout {
    pub max_failures: u32,
    pub window: Duration,
    pub lock_for: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

/// How many distinct addresses are tracked before old entries are dropped.
const MAX_ENTRIES: usize = 100_000;

impl Default for Lockout {
    fn default() -> Self {
        Lockout::new(
            5,
            Duration::from_secs(15 * 60),
            Duration::from_secs(15 * 60),
        )
    }
}

impl Lockout {
    pub fn new(max_failures: u32, window: Duration, lock_for: Duration) -> Lockout {
        Lockout {
            max_failures,
            window,
            lock_for,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long `key` stays locked out, if it is.
    pub fn locked(&self, key: &str, now: Instant) -> Option<Duration> {
        let entries = self.entries();
        let until = entries.get(key)?.locked_until?;
        (until > now).then(|| until - now)
    }

    /// Records a failed login; returns true when it locked `key` out.
    pub fn fail(&self, key: &str, now: Instant) -> bool {
        let mut entries = self.entries();
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(key) {
            let window = self.window;
            entries.retain(|_, e| {
                e.locked_until.is_some_and(|u| u > now) || now.duration_since(e.first) < window
            });
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        let e = entries.entry(key.to_string()).or_insert(Entry {
            failures: 0,
            first: now,
            locked_until: None,
        });
        if e.locked_until.is_some_and(|u| u <= now) || now.duration_since(e.first) >= self.window {
            *e = Entry {
                failures: 0,
                first: now,
                locked_until: None,
            };
        }
        e.failures += 1;
        if e.failures >= self.max_failures {
            e.locked_until = Some(now + self.lock_for);
            return true;
        }
        false
    }

    /// A successful login clears the record.
    pub fn succeed(&self, key: &str) {
        self.entries().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_after_max_failures_and_unlocks_later() {
        let l = Lockout::new(3, Duration::from_secs(60), Duration::from_secs(30));
        let t0 = Instant::now();
        assert!(!l.fail("ip", t0));
        assert!(!l.fail("ip", t0));
        assert!(l.locked("ip", t0).is_none());
        assert!(l.fail("ip", t0));
        assert!(l.locked("ip", t0).is_some());
        assert!(l.locked("other", t0).is_none());
        let later = t0 + Duration::from_secs(31);
        assert!(l.locked("ip", later).is_none());
        assert!(!l.fail("ip", later), "a new window starts after the lock");
    }

    #[test]
    fn success_clears_and_old_failures_expire() {
        let l = Lockout::new(2, Duration::from_secs(60), Duration::from_secs(30));
        let t0 = Instant::now();
        l.fail("ip", t0);
        l.succeed("ip");
        assert!(!l.fail("ip", t0));
        assert!(!l.fail("ip", t0 + Duration::from_secs(61)), "window passed");
    }
}
