//! [`PendingGate`]: the per-lane pending ceiling.
//!
//! The chain (driver thread) counts rows in when it appends them; the
//! checkpointer (controller thread) counts them out when the sink
//! acknowledges them. The lane is polled only while the gate is open:
//! fewer than `ceiling` rows pending and not closed. Closing is one-way:
//! a revoked lane's gate never reopens, even when late acknowledgements
//! release rows after the close.
//!
//! Tenure: the driver polls a lane while holding the gate's tenure
//! ([`PendingGate::admit`]), and [`PendingGate::close`] waits for a tenure
//! held at that moment. So once `close` returns (the controller forgets a
//! revoked lane before the source gives the partition up), no poll of the
//! old lane is running or can start: the old and the new lane of a
//! re-assigned partition share the client's fetch queue, and a poll that
//! straddled the re-assignment would hand the new assignment's messages
//! out under the old lane, whose acknowledgements are ignored.
//!
//! The wait is bounded ([`PendingGate::close_by`]): a poll can block for
//! long (a decode-stage dead letter retrying against a destination that
//! is down, an exactly-once plan read), and the controller that closes
//! the gate must not freeze with it (no commits for any partition, no
//! shutdown). A close that gives up still closes the gate for every later
//! poll and says [`StillPolling`]: the caller must then keep the partition
//! from being handed out again under a new lane (the controller stops the
//! pipeline).

use crate::sync::{Arc, AtomicBool, AtomicI64, Mutex, MutexGuard, Ordering};

/// Shared pending-row counter with a ceiling and a one-way close.
#[derive(Clone, Debug)]
pub struct PendingGate {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pending: AtomicI64,
    ceiling: i64,
    closed: AtomicBool,
    /// The controller is about to stop the lane (revoked, lost, retired):
    /// a wait inside a poll of it gives up, so the poll ends and the stop
    /// goes through.
    stopping: AtomicBool,
    /// Held for the whole of each poll of the lane, and by `close`.
    tenure: Mutex<()>,
}

/// A bounded close gave up while a poll of the lane still held its
/// tenure: the gate is closed to every later poll, but the poll in
/// progress may still deliver messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StillPolling;

/// Proof that the lane's gate is not closed, held while the lane is
/// polled: [`PendingGate::close`] waits until it is dropped.
#[must_use]
pub struct Tenure<'a> {
    _held: MutexGuard<'a, ()>,
}

impl PendingGate {
    /// A gate admitting up to `ceiling` pending rows.
    #[must_use]
    pub fn new(ceiling: i64) -> Self {
        Self {
            inner: Arc::new(Inner {
                pending: AtomicI64::new(0),
                ceiling: ceiling.max(1),
                closed: AtomicBool::new(false),
                stopping: AtomicBool::new(false),
                tenure: Mutex::new(()),
            }),
        }
    }

    /// Whether the lane may take more input now.
    #[must_use]
    pub fn is_open(&self) -> bool {
        !self.inner.closed.load(Ordering::Acquire)
            && self.inner.pending.load(Ordering::Acquire) < self.inner.ceiling
    }

    /// The chain appended `rows` rows of this lane.
    pub fn dispatched(&self, rows: i64) {
        self.inner.pending.fetch_add(rows, Ordering::AcqRel);
    }

    /// The sink acknowledged `rows` rows of this lane.
    pub fn released(&self, rows: i64) {
        self.inner.pending.fetch_sub(rows, Ordering::AcqRel);
    }

    /// Rows dispatched and not yet acknowledged.
    #[must_use]
    pub fn pending(&self) -> i64 {
        self.inner.pending.load(Ordering::Acquire)
    }

    /// The lane is about to be stopped: set by the controller before it
    /// tells the driver, which may be waiting inside a poll of the lane.
    pub fn stop_requested(&self) {
        self.inner.stopping.store(true, Ordering::Release);
    }

    /// Whether [`stop_requested`](Self::stop_requested) was called, or the
    /// gate is closed.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::Acquire) || self.is_closed()
    }

    /// Close the gate for good (revocation, shutdown), waiting for a poll
    /// of the lane in progress (a held [`Tenure`]) to end until
    /// `deadline`. `Ok`: the lane never delivers again. `Err`: the poll
    /// still runs at the deadline; no later poll starts.
    pub fn close_by(&self, deadline: std::time::Instant) -> Result<(), StillPolling> {
        self.close_or(|| std::time::Instant::now() >= deadline)
    }

    /// Close the gate, trying for the tenure until `give_up` says so
    /// (asked after each failed try).
    pub(crate) fn close_or(&self, mut give_up: impl FnMut() -> bool) -> Result<(), StillPolling> {
        loop {
            if let Some(_held) = self.try_tenure() {
                self.inner.closed.store(true, Ordering::Release);
                return Ok(());
            }
            if give_up() {
                // `admit` reads the flag under the tenure lock: the poll
                // in progress goes on, no later one starts.
                self.inner.closed.store(true, Ordering::Release);
                return Err(StillPolling);
            }
            crate::sync::pause();
        }
    }

    /// The tenure to poll the lane under, or `None` once the gate is
    /// closed. Hold it for the whole poll, and only for the poll: `close`
    /// (on the controller thread) waits for it.
    pub fn admit(&self) -> Option<Tenure<'_>> {
        let held = self.lock_tenure();
        (!self.inner.closed.load(Ordering::Acquire)).then_some(Tenure { _held: held })
    }

    fn try_tenure(&self) -> Option<MutexGuard<'_, ()>> {
        match self.inner.tenure.try_lock() {
            Ok(held) => Some(held),
            Err(crate::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(crate::sync::TryLockError::WouldBlock) => None,
        }
    }

    fn lock_tenure(&self) -> MutexGuard<'_, ()> {
        // The guarded data is `()`: a poisoned lock (a poll that panicked)
        // still orders close against polls.
        self.inner
            .tenure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the gate was closed.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn opens_below_ceiling_and_closes_for_good() {
        let g = PendingGate::new(2);
        assert!(g.is_open());
        g.dispatched(2);
        assert!(!g.is_open());
        g.released(1);
        assert!(g.is_open());
        g.close_by(std::time::Instant::now()).expect("no poll runs");
        assert!(!g.is_open());
        g.released(1);
        assert!(!g.is_open(), "a closed gate never reopens");
        assert_eq!(g.pending(), 0);
    }

    #[test]
    fn a_close_waits_for_a_poll_until_its_deadline_and_no_longer() {
        use std::time::{Duration, Instant};
        let g = PendingGate::new(10);
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let poller = {
            let g = g.clone();
            std::thread::spawn(move || {
                let tenure = g.admit().expect("open");
                held_tx.send(()).unwrap();
                let _ = end_rx.recv();
                drop(tenure);
            })
        };
        held_rx.recv().unwrap();
        let start = Instant::now();
        assert_eq!(
            g.close_by(start + Duration::from_millis(100)),
            Err(StillPolling)
        );
        let waited = start.elapsed();
        assert!(
            (Duration::from_millis(100)..Duration::from_secs(5)).contains(&waited),
            "{waited:?}"
        );
        assert!(g.is_closed(), "closed to later polls all the same");
        end_tx.send(()).unwrap();
        poller.join().unwrap();
        assert!(g.admit().is_none(), "no poll starts after the close");

        // A poll that ends within the deadline: the close takes its tenure.
        let g = PendingGate::new(10);
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let poller = {
            let g = g.clone();
            std::thread::spawn(move || {
                let tenure = g.admit().expect("open");
                held_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(50));
                drop(tenure);
            })
        };
        held_rx.recv().unwrap();
        assert_eq!(g.close_by(Instant::now() + Duration::from_secs(10)), Ok(()));
        poller.join().unwrap();
    }
}

#[cfg(loom)]
mod loom_tests {
    use super::*;

    /// `close` racing a `release` that would reopen the gate: after both,
    /// the gate is closed whatever the interleaving, and the count is exact.
    #[test]
    fn close_races_release() {
        loom::model(|| {
            let g = PendingGate::new(1);
            g.dispatched(1);
            let g2 = g.clone();
            let t = loom::thread::spawn(move || g2.released(1));
            g.close_or(|| false).unwrap();
            t.join().unwrap();
            assert!(!g.is_open());
            assert_eq!(g.pending(), 0);
        });
    }

    /// Dispatch on the driver racing release on the controller never loses
    /// a count: the final pending equals dispatched minus released.
    #[test]
    fn dispatch_races_release() {
        loom::model(|| {
            let g = PendingGate::new(10);
            g.dispatched(2);
            let g2 = g.clone();
            let t = loom::thread::spawn(move || g2.released(2));
            g.dispatched(3);
            t.join().unwrap();
            assert_eq!(g.pending(), 3);
            assert!(g.is_open());
        });
    }

    /// A close racing a poll that yields mid-tenure (the close's try-and-
    /// pause loop, `close_or`): once the close returns `Ok`, no poll was
    /// running at that moment and none starts after it. (Loom does not
    /// reorder a failed `try_lock` against the holder, so the give-up path
    /// is tested with real threads: `a_close_waits_for_a_poll_until_its_
    /// deadline_and_no_longer`.)
    #[test]
    fn a_close_races_a_poll() {
        loom::model(|| {
            let g = PendingGate::new(10);
            let polling = Arc::new(AtomicBool::new(false));
            let (g2, p2) = (g.clone(), polling.clone());
            let t = loom::thread::spawn(move || {
                if let Some(tenure) = g2.admit() {
                    p2.store(true, Ordering::SeqCst);
                    loom::thread::yield_now();
                    p2.store(false, Ordering::SeqCst);
                    drop(tenure);
                }
            });
            g.close_or(|| false).expect("never gives up");
            assert!(
                !polling.load(Ordering::SeqCst),
                "a poll ran under the close"
            );
            t.join().unwrap();
            assert!(g.admit().is_none(), "a poll started after the close");
        });
    }
}
