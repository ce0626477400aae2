//! Injected time for the std threads: a [`Clock`] is what the controller,
//! the drivers and the shard writers read instead of `Instant::now()`, so
//! their tests run on a [`ManualClock`] that moves only when told to.
//!
//! Every pipeline thread reads the one clock the runtime was given
//! ([`RuntimeOptions::clock`](crate::pipeline::RuntimeOptions)); deadlines
//! computed on one thread (a revoke or shutdown deadline) are compared on
//! another, so they must all come from the same clock. Blocking waits
//! (channel timeouts, the drain barrier) still sleep in real time; they are
//! bounded by what is left until a deadline on this clock.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The clock every thread shares.
pub type SharedClock = Arc<dyn Clock>;

/// The real monotonic clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// The real clock, shared.
#[must_use]
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

/// A clock for tests: it starts at the instant it was made and moves only
/// by [`advance`](ManualClock::advance). Shared between threads.
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    elapsed_ns: AtomicU64,
}

impl ManualClock {
    /// A clock standing at the current real instant.
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            elapsed_ns: AtomicU64::new(0),
        })
    }

    /// Move the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.elapsed_ns.fetch_add(ns, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.start + Duration::from_nanos(self.elapsed_ns.load(Ordering::Acquire))
    }
}

/// Time left from `clock`'s now until `deadline` (zero once it passed).
#[must_use]
pub fn until(clock: &dyn Clock, deadline: Instant) -> Duration {
    deadline.saturating_duration_since(clock.now())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::new();
        let t0 = clock.now();
        std::thread::yield_now();
        assert_eq!(clock.now(), t0);
        clock.advance(Duration::from_millis(250));
        assert_eq!(clock.now(), t0 + Duration::from_millis(250));
        assert_eq!(
            until(&*clock, t0 + Duration::from_secs(1)),
            Duration::from_millis(750)
        );
        assert_eq!(until(&*clock, t0), Duration::ZERO);
    }
}
