//! Health: every pipeline thread's heartbeat, for `/healthz`, and the
//! source's readiness flags, for `/readyz`.
//!
//! The controller and each driver beat once per loop turn (their loops
//! never block for long: sources are polled with a timeout, drivers wait
//! on their control channel with a short timeout, queues are unbounded).
//! A thread whose last beat is older than the stall limit is reported by
//! name; a thread that finished its loop is not. A beat is one clock read
//! (of the runtime's injected clock) and one relaxed atomic store.
//!
//! [`SourceReadiness`] is written by the controller thread (joined the
//! group, shutting down) and read by the admin server.
//!
//! [`TransientStalls`] is written by sink workers (tokio tasks) while they
//! retry a transient error and read by the sink's readiness probe: an
//! error that has not cleared for the stall limit turns `/readyz` 503
//! naming the shard and the last error, so a retry loop never hides
//! behind green health checks.

use crate::clock::{self, SharedClock};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Readiness flags the controller maintains for `/readyz`.
#[derive(Debug, Default)]
pub struct SourceReadiness {
    /// The source delivered its first assignment (joined its group).
    pub joined: AtomicBool,
    /// A shutdown is in progress.
    pub shutting_down: AtomicBool,
    /// Owned partitions whose watermark cannot move, one line each (a
    /// batch of theirs was given up while this member owns them): the
    /// member is not ready while any is listed.
    pub blocked: Mutex<Vec<String>>,
}

const FINISHED: u64 = u64::MAX;

#[derive(Debug)]
struct Beat {
    name: String,
    /// Milliseconds since `Liveness::started` at the last beat, or
    /// `FINISHED`.
    last_ms: AtomicU64,
}

/// The heartbeats of a runtime's threads.
#[derive(Debug)]
pub struct Liveness {
    clock: SharedClock,
    started: Instant,
    stall_after: Duration,
    beats: Vec<Beat>,
}

impl Default for Liveness {
    /// No threads: always healthy.
    fn default() -> Self {
        Self::new(Vec::new(), Duration::from_secs(60))
    }
}

/// One thread's end of [`Liveness`].
#[derive(Clone, Debug)]
pub struct Heartbeat {
    live: Arc<Liveness>,
    index: usize,
}

impl Heartbeat {
    /// The thread is alive now.
    pub fn beat(&self) {
        let ms = self.live.elapsed_ms();
        self.live.beats[self.index]
            .last_ms
            .store(ms.min(FINISHED - 1), Ordering::Relaxed);
    }

    /// The thread left its loop on purpose; never report it stalled.
    pub fn finish(&self) {
        self.live.beats[self.index]
            .last_ms
            .store(FINISHED, Ordering::Relaxed);
    }
}

impl Liveness {
    /// Threads `names`, each reported stalled after `stall_after` without
    /// a beat. Every thread counts as just beaten.
    #[must_use]
    pub fn new(names: Vec<String>, stall_after: Duration) -> Self {
        let clock = clock::system();
        Self {
            started: clock.now(),
            clock,
            stall_after,
            beats: names
                .into_iter()
                .map(|name| Beat {
                    name,
                    last_ms: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    /// The same table reading time from `clock` (the runtime's clock).
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.started = clock.now();
        self.clock = clock;
        self
    }

    fn elapsed_ms(&self) -> u64 {
        let elapsed = self.clock.now().saturating_duration_since(self.started);
        u64::try_from(elapsed.as_millis()).unwrap_or(FINISHED - 1)
    }

    /// The heartbeat of thread `name`.
    ///
    /// # Panics
    /// If `name` is not one of the names given to [`Liveness::new`].
    #[must_use]
    pub fn heartbeat(self: &Arc<Self>, name: &str) -> Heartbeat {
        let index = self
            .beats
            .iter()
            .position(|b| b.name == name)
            .unwrap_or_else(|| panic!("no thread {name} in the liveness table"));
        Heartbeat {
            live: self.clone(),
            index,
        }
    }

    /// Threads silent for longer than the stall limit, with how long.
    #[must_use]
    pub fn stalled(&self) -> Vec<(&str, Duration)> {
        let now = self.elapsed_ms();
        self.beats
            .iter()
            .filter_map(|b| {
                let last = b.last_ms.load(Ordering::Relaxed);
                let silent = Duration::from_millis(now.saturating_sub(last));
                (last != FINISHED && silent > self.stall_after).then_some((b.name.as_str(), silent))
            })
            .collect()
    }

    /// `(healthy, JSON body)` for `/healthz`.
    #[must_use]
    pub fn report(&self) -> (bool, String) {
        let stalled = self.stalled();
        let list: Vec<String> = stalled
            .iter()
            .map(|(name, silent)| {
                format!(
                    "{{\"thread\":\"{name}\",\"silent_ms\":{}}}",
                    silent.as_millis()
                )
            })
            .collect();
        let body = format!(
            "{{\"healthy\":{},\"stall_after_ms\":{},\"stalled\":[{}]}}\n",
            stalled.is_empty(),
            self.stall_after.as_millis(),
            list.join(",")
        );
        (stalled.is_empty(), body)
    }
}

/// Sink work (e.g. one shard's insert worker) retrying a transient error,
/// by name: since when, and the last error.
#[derive(Debug)]
pub struct TransientStalls {
    clock: SharedClock,
    failing: Mutex<BTreeMap<String, (Instant, String)>>,
}

impl TransientStalls {
    /// Nothing failing, on `clock`.
    #[must_use]
    pub fn new(clock: SharedClock) -> Arc<Self> {
        Arc::new(Self {
            clock,
            failing: Mutex::new(BTreeMap::new()),
        })
    }

    /// `who` failed again with `error` (a retriable error): the first call
    /// since the last [`cleared`](Self::cleared) starts its clock.
    pub fn failing(&self, who: &str, error: &str) {
        let now = self.clock.now();
        let mut map = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get_mut(who) {
            Some((_, last)) => error.clone_into(last),
            None => {
                map.insert(who.to_owned(), (now, error.to_owned()));
            }
        }
    }

    /// `who` succeeded (or stopped trying).
    pub fn cleared(&self, who: &str) {
        let mut map = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        map.remove(who);
    }

    /// What has been failing for longer than `after`, one line each:
    /// `who: failing for Ns: last error`.
    #[must_use]
    pub fn stuck(&self, after: Duration) -> Vec<String> {
        let now = self.clock.now();
        let map = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter()
            .filter_map(|(who, (since, error))| {
                let failing = now.saturating_duration_since(*since);
                (failing > after).then(|| {
                    format!(
                        "{who}: a transient error has not cleared for {}s: {error}",
                        failing.as_secs()
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn a_transient_error_is_stuck_after_the_limit_until_it_clears() {
        let clock = ManualClock::new();
        let stalls = TransientStalls::new(clock.clone());
        let limit = Duration::from_secs(10);
        stalls.failing("shard 1", "Code: 252. Too many parts");
        clock.advance(Duration::from_secs(6));
        stalls.failing("shard 1", "Code: 241. Memory limit");
        stalls.failing("shard 2", "Code: 202. Too many queries");
        assert!(stalls.stuck(limit).is_empty());
        clock.advance(Duration::from_secs(5));
        assert_eq!(
            stalls.stuck(limit),
            ["shard 1: a transient error has not cleared for 11s: Code: 241. Memory limit"],
            "the first failure starts the clock, the last error is named"
        );
        stalls.cleared("shard 1");
        assert!(stalls.stuck(limit).is_empty());
        clock.advance(Duration::from_secs(6));
        assert_eq!(stalls.stuck(limit).len(), 1, "shard 2 now");
    }

    #[test]
    fn a_silent_thread_is_named_until_it_beats_or_finishes() {
        let clock = ManualClock::new();
        let live = Arc::new(
            Liveness::new(
                vec!["controller".into(), "driver-0".into()],
                Duration::from_millis(30),
            )
            .with_clock(clock.clone()),
        );
        let (c, d) = (live.heartbeat("controller"), live.heartbeat("driver-0"));
        assert!(live.report().0);
        clock.advance(Duration::from_millis(30));
        assert!(
            live.report().0,
            "silent for exactly the limit is not a stall"
        );
        clock.advance(Duration::from_millis(30));
        c.beat();
        let (healthy, body) = live.report();
        assert!(!healthy);
        assert!(
            body.contains("\"thread\":\"driver-0\"") && !body.contains("controller"),
            "{body}"
        );
        d.finish();
        assert!(live.report().0, "a finished thread is not stalled");
        assert!(Arc::new(Liveness::default()).report().0);
    }
}
