//! The wait for a stream's next event, bounded without a timer per event.
//!
//! `tokio::time::timeout` around each read makes a timer, registers it in the runtime's
//! timer wheel when the read has to wait (under a lock shared with every other timer of
//! that worker) and removes it again when the event arrives: twice per streamed chunk, for a
//! deadline that almost never passes. [`IdleTimer`] keeps one timer per stream. Each wait
//! notes when it began; the timer stays armed at an earlier wait's deadline, and when it
//! fires early it is moved to the current wait's deadline. So a chunk costs a clock read,
//! and the timer moves about once per timeout period. The bound is the same as a fresh
//! `timeout(wait, …)` per read: a wait fails once `wait` has passed since it began.

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// One stream's bound on each wait for its next event.
#[derive(Default)]
pub(crate) struct IdleTimer {
    /// Armed at some wait's deadline, never later than the current one's once polled.
    sleep: Option<Pin<Box<Sleep>>>,
}

/// A wait passed its bound.
#[derive(Debug)]
pub(crate) struct Elapsed;

impl IdleTimer {
    /// `next`'s output, or [`Elapsed`] when it is not ready within `wait` from now.
    pub(crate) async fn within<F: Future>(
        &mut self,
        wait: Duration,
        next: F,
    ) -> Result<F::Output, Elapsed> {
        let began = Instant::now();
        let deadline = began.checked_add(wait);
        let mut next = pin!(next);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = next.as_mut().poll(cx) {
                return Poll::Ready(Ok(v));
            }
            // A wait too long to express never ends.
            let Some(deadline) = deadline else {
                return Poll::Pending;
            };
            let sleep = match &mut self.sleep {
                Some(s) => {
                    // Only a shorter wait than an earlier one moves the timer sooner.
                    if deadline < s.deadline() {
                        s.as_mut().reset(deadline);
                    }
                    s
                }
                None => self
                    .sleep
                    .insert(Box::pin(tokio::time::sleep_until(deadline))),
            };
            while sleep.as_mut().poll(cx).is_ready() {
                if Instant::now() >= deadline {
                    return Poll::Ready(Err(Elapsed));
                }
                // An earlier wait's deadline: move on to this one's.
                sleep.as_mut().reset(deadline);
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_wait_is_bounded_from_its_own_start() {
        let mut idle = IdleTimer::default();
        let wait = Duration::from_secs(10);
        // Events 6 s apart: each wait is shorter than the bound, though the first timer
        // (armed for 10 s after the first wait began) fires during the second wait.
        for _ in 0..3 {
            let got = idle
                .within(wait, tokio::time::sleep(Duration::from_secs(6)))
                .await;
            assert!(got.is_ok());
        }
        // A wait that outlasts the bound fails at the bound, not before.
        let start = Instant::now();
        let got = idle.within(wait, std::future::pending::<()>()).await;
        assert!(got.is_err());
        assert_eq!(start.elapsed(), wait);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_wait_after_a_longer_one_ends_at_its_own_bound() {
        let mut idle = IdleTimer::default();
        let got = idle
            .within(
                Duration::from_secs(60),
                tokio::time::sleep(Duration::from_secs(1)),
            )
            .await;
        assert!(got.is_ok());
        // The timer was armed 60 s out; a 5 s wait must not inherit that.
        let start = Instant::now();
        let got = idle
            .within(Duration::from_secs(5), std::future::pending::<()>())
            .await;
        assert!(got.is_err());
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_ready_event_wins_over_a_passed_deadline() {
        let mut idle = IdleTimer::default();
        let got = idle.within(Duration::ZERO, std::future::ready(7)).await;
        assert_eq!(got.ok(), Some(7));
    }
}
