//! Test seams: named points in a run's lifecycle where a test can pause a run (and act while
//! it waits) or make it fail, instead of racing it with sleeps.
//!
//! Compiled only for tests (`#[cfg(test)]` or the `test-hooks` feature). Without them,
//! [`Hooks::reach`] is an empty inline function and the seams cost nothing.
//!
//! ```text
//! let mut paused = rt.hooks.pause(Point::Step, 3);      // the 3rd step handed over from now
//! create_the_run().await;
//! let run_id = paused.reached().await;                  // the run is waiting there
//! /* look at the store, break something, cancel, crash … */
//! paused.resume();                                       // or drop it
//! ```

/// A named point in a run's lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Point {
    /// A worker claimed the run and registered it; nothing of it was read yet.
    Claimed,
    /// The graph handed over a step's checkpoint (input, model or tools step); reached before
    /// the checkpoint is queued or written, so while paused here nothing of this step and
    /// nothing after it is stored. A failure injected here is a checkpoint that could not be
    /// written.
    Step,
    /// The graph returned; the run's queued checkpoints are not yet flushed and its terminal
    /// status is not yet written.
    BeforeFinish,
    /// The run's terminal status is written and its stream closed.
    Finished,
}

#[cfg(any(test, feature = "test-hooks"))]
pub use armed::{Hooks, Paused};

#[cfg(not(any(test, feature = "test-hooks")))]
pub use disarmed::Hooks;

#[cfg(not(any(test, feature = "test-hooks")))]
mod disarmed {
    use super::Point;
    use tokio_util::sync::CancellationToken;

    /// No seams in this build (a field, so both builds construct it the same way).
    #[derive(Debug, Default)]
    pub struct Hooks {
        _none: (),
    }

    impl Hooks {
        #[inline(always)]
        pub async fn reach(
            &self,
            _point: Point,
            _run_id: &str,
            _cancel: &CancellationToken,
        ) -> Result<(), String> {
            Ok(())
        }
    }
}

#[cfg(any(test, feature = "test-hooks"))]
mod armed {
    use super::Point;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    use tokio::sync::oneshot;
    use tokio_util::sync::CancellationToken;

    enum Action {
        Pause {
            reached: oneshot::Sender<String>,
            release: oneshot::Receiver<()>,
        },
        Fail(String),
    }

    struct Slot {
        point: Point,
        run_id: Option<String>,
        /// Fires on the `nth` matching reach after it was armed.
        nth: u32,
        seen: u32,
        action: Action,
    }

    /// The seams of one runtime.
    #[derive(Default)]
    pub struct Hooks {
        armed: AtomicBool,
        slots: Mutex<Vec<Slot>>,
    }

    impl std::fmt::Debug for Hooks {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Hooks")
                .field("armed", &self.armed.load(Ordering::Relaxed))
                .finish()
        }
    }

    /// A run paused at a point (or about to be).
    #[derive(Debug)]
    pub struct Paused {
        reached: Option<oneshot::Receiver<String>>,
        release: Option<oneshot::Sender<()>>,
        run_id: Option<String>,
    }

    impl Paused {
        /// Waits until a run reaches the point; returns its id. Panics (it is a test) when
        /// none does within 30 s.
        pub async fn reached(&mut self) -> String {
            if let Some(id) = &self.run_id {
                return id.clone();
            }
            let Some(rx) = self.reached.take() else {
                panic!("the pause was disarmed");
            };
            match tokio::time::timeout(Duration::from_secs(30), rx).await {
                Ok(Ok(id)) => {
                    self.run_id = Some(id.clone());
                    id
                }
                Ok(Err(_)) => panic!("the pause was dropped before a run reached it"),
                Err(_) => panic!("no run reached the pause point within 30 s"),
            }
        }

        /// Lets the paused run go on (dropping the handle does the same).
        pub fn resume(mut self) {
            if let Some(tx) = self.release.take() {
                let _ = tx.send(());
            }
        }
    }

    impl Drop for Paused {
        fn drop(&mut self) {
            if let Some(tx) = self.release.take() {
                let _ = tx.send(());
            }
        }
    }

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        match m.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    impl Hooks {
        fn arm(&self, point: Point, run_id: Option<&str>, nth: u32, action: Action) {
            lock(&self.slots).push(Slot {
                point,
                run_id: run_id.map(str::to_string),
                nth: nth.max(1),
                seen: 0,
                action,
            });
            self.armed.store(true, Ordering::Release);
        }

        /// Pauses the `nth` run (1 = the next one) to reach `point` from now on.
        pub fn pause(&self, point: Point, nth: u32) -> Paused {
            self.pause_run(point, None, nth)
        }

        /// Pauses run `run_id` the `nth` time it reaches `point` from now on (any run when
        /// `None`).
        pub fn pause_run(&self, point: Point, run_id: Option<&str>, nth: u32) -> Paused {
            let (reached_tx, reached_rx) = oneshot::channel();
            let (release_tx, release_rx) = oneshot::channel();
            self.arm(
                point,
                run_id,
                nth,
                Action::Pause {
                    reached: reached_tx,
                    release: release_rx,
                },
            );
            Paused {
                reached: Some(reached_rx),
                release: Some(release_tx),
                run_id: None,
            }
        }

        /// Makes the `nth` reach of `point` from now on fail with `message`.
        pub fn fail(&self, point: Point, nth: u32, message: &str) {
            self.arm(point, None, nth, Action::Fail(message.to_string()));
        }

        /// Called by the runtime at `point`. A pause returns when the test resumes it or
        /// the run is cancelled (so shutdown and cancel still work on a paused run).
        pub async fn reach(
            &self,
            point: Point,
            run_id: &str,
            cancel: &CancellationToken,
        ) -> Result<(), String> {
            if !self.armed.load(Ordering::Acquire) {
                return Ok(());
            }
            let fired = {
                let mut slots = lock(&self.slots);
                let mut hit = None;
                for (i, s) in slots.iter_mut().enumerate() {
                    if s.point != point || s.run_id.as_deref().is_some_and(|r| r != run_id) {
                        continue;
                    }
                    s.seen += 1;
                    if s.seen == s.nth && hit.is_none() {
                        hit = Some(i);
                    }
                }
                let fired = hit.map(|i| slots.remove(i));
                if slots.is_empty() {
                    self.armed.store(false, Ordering::Release);
                }
                fired
            };
            match fired.map(|s| s.action) {
                None => Ok(()),
                Some(Action::Fail(m)) => Err(m),
                Some(Action::Pause { reached, release }) => {
                    let _ = reached.send(run_id.to_string());
                    tokio::select! {
                        _ = release => {}
                        _ = cancel.cancelled() => {}
                    }
                    Ok(())
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::sync::Arc;

        #[tokio::test]
        async fn a_pause_holds_the_nth_reach_until_resumed() {
            let hooks = Arc::new(Hooks::default());
            let mut p = hooks.pause(Point::Step, 2);
            let token = CancellationToken::new();
            hooks.reach(Point::Step, "r1", &token).await.unwrap();
            hooks.reach(Point::Claimed, "r1", &token).await.unwrap();
            let h = hooks.clone();
            let t = token.clone();
            let task = tokio::spawn(async move { h.reach(Point::Step, "r1", &t).await });
            assert_eq!(p.reached().await, "r1");
            assert!(!task.is_finished());
            p.resume();
            task.await.unwrap().unwrap();
            // Disarmed: later reaches pass.
            hooks.reach(Point::Step, "r1", &token).await.unwrap();
        }

        #[tokio::test]
        async fn cancellation_releases_a_pause_and_failures_fire_once() {
            let hooks = Arc::new(Hooks::default());
            let mut p = hooks.pause_run(Point::BeforeFinish, Some("b"), 1);
            let token = CancellationToken::new();
            hooks.reach(Point::BeforeFinish, "a", &token).await.unwrap();
            let h = hooks.clone();
            let t = token.clone();
            let task = tokio::spawn(async move { h.reach(Point::BeforeFinish, "b", &t).await });
            assert_eq!(p.reached().await, "b");
            token.cancel();
            task.await.unwrap().unwrap();
            hooks.fail(Point::Step, 1, "boom");
            let fresh = CancellationToken::new();
            assert_eq!(
                hooks.reach(Point::Step, "a", &fresh).await,
                Err("boom".to_string())
            );
            assert_eq!(hooks.reach(Point::Step, "a", &fresh).await, Ok(()));
        }
    }
}
