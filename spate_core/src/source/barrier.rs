//! [`DrainBarrier`]: a countdown latch with a deadline.
//!
//! The controller creates one per revocation or shutdown with the number of
//! arrivals it expects (one per stopped lane, or one per driver), hands
//! clones to the drivers inside `ThreadControl::StopLanes` /
//! `ThreadControl::Shutdown`, and waits on it until the deadline. Drivers
//! call [`DrainBarrier::arrive`] once their chain is flushed.

use crate::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// Countdown latch shared by the controller (waiter) and drivers (arrivers).
#[derive(Clone, Debug)]
pub struct DrainBarrier {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    remaining: Mutex<usize>,
    done: Condvar,
}

/// How a wait on a [`DrainBarrier`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierOutcome {
    /// Every expected arrival happened.
    Complete,
    /// The deadline passed first; this many arrivals were still missing.
    TimedOut {
        /// Arrivals still missing.
        missing: usize,
    },
}

impl DrainBarrier {
    /// A barrier expecting `expected` arrivals.
    #[must_use]
    pub fn new(expected: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                remaining: Mutex::new(expected),
                done: Condvar::new(),
            }),
        }
    }

    /// Record one arrival. Extra arrivals past zero are ignored (a driver
    /// that arrives late after the waiter gave up does no harm).
    pub fn arrive(&self) {
        let mut remaining = lock(&self.inner.remaining);
        if *remaining > 0 {
            *remaining -= 1;
            if *remaining == 0 {
                self.inner.done.notify_all();
            }
        }
    }

    /// Arrivals still missing.
    #[must_use]
    pub fn remaining(&self) -> usize {
        *lock(&self.inner.remaining)
    }

    /// Block until every arrival happened or `deadline` passed.
    #[cfg(not(loom))]
    pub fn wait_until(&self, deadline: Instant) -> BarrierOutcome {
        let mut remaining = lock(&self.inner.remaining);
        loop {
            if *remaining == 0 {
                return BarrierOutcome::Complete;
            }
            let now = Instant::now();
            if now >= deadline {
                return BarrierOutcome::TimedOut {
                    missing: *remaining,
                };
            }
            let (guard, _) = self
                .inner
                .done
                .wait_timeout(remaining, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            remaining = guard;
        }
    }

    /// Loom has no timed waits: model the deadline as "the waiter checks
    /// once more and gives up", which is the racy part worth exploring.
    #[cfg(loom)]
    pub fn wait_until(&self, _deadline: Instant) -> BarrierOutcome {
        let remaining = lock(&self.inner.remaining);
        if *remaining == 0 {
            BarrierOutcome::Complete
        } else {
            BarrierOutcome::TimedOut {
                missing: *remaining,
            }
        }
    }

    /// Block until every arrival happened (no deadline). Loom models only.
    #[cfg(loom)]
    pub fn wait(&self) {
        let mut remaining = lock(&self.inner.remaining);
        while *remaining > 0 {
            remaining = self.inner.done.wait(remaining).unwrap();
        }
    }
}

#[cfg(not(loom))]
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(loom)]
fn lock<T>(m: &Mutex<T>) -> loom::sync::MutexGuard<'_, T> {
    m.lock().unwrap()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn completes_when_all_arrive() {
        let b = DrainBarrier::new(2);
        let b2 = b.clone();
        let t = std::thread::spawn(move || {
            b2.arrive();
            b2.arrive();
        });
        let out = b.wait_until(Instant::now() + Duration::from_secs(5));
        t.join().unwrap();
        assert_eq!(out, BarrierOutcome::Complete);
    }

    #[test]
    fn times_out_naming_missing_arrivals() {
        let b = DrainBarrier::new(3);
        b.arrive();
        let start = Instant::now();
        let out = b.wait_until(start + Duration::from_millis(50));
        assert_eq!(out, BarrierOutcome::TimedOut { missing: 2 });
        assert!(start.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn zero_expected_is_complete_at_once() {
        let b = DrainBarrier::new(0);
        assert_eq!(b.wait_until(Instant::now()), BarrierOutcome::Complete);
    }

    #[test]
    fn late_arrivals_are_harmless() {
        let b = DrainBarrier::new(1);
        b.arrive();
        b.arrive();
        assert_eq!(b.remaining(), 0);
    }
}

#[cfg(loom)]
mod loom_tests {
    use super::*;

    /// An arrival racing the waiter's deadline check: the waiter either sees
    /// the arrival (Complete) or reports exactly the missing count, never
    /// anything else, and the late arrival never panics or underflows.
    #[test]
    fn arrival_races_deadline() {
        loom::model(|| {
            let b = DrainBarrier::new(1);
            let b2 = b.clone();
            let t = loom::thread::spawn(move || b2.arrive());
            let out = b.wait_until(Instant::now());
            assert!(matches!(
                out,
                BarrierOutcome::Complete | BarrierOutcome::TimedOut { missing: 1 }
            ));
            t.join().unwrap();
            assert_eq!(b.remaining(), 0);
        });
    }

    /// Two drivers arriving concurrently always release a blocked waiter.
    #[test]
    fn concurrent_arrivals_release_waiter() {
        loom::model(|| {
            let b = DrainBarrier::new(2);
            let (b1, b2) = (b.clone(), b.clone());
            let t1 = loom::thread::spawn(move || b1.arrive());
            let t2 = loom::thread::spawn(move || b2.arrive());
            b.wait();
            t1.join().unwrap();
            t2.join().unwrap();
        });
    }
}
