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
    /// Held for the whole of each poll of the lane, and by `close`.
    tenure: Mutex<()>,
}

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

    /// Close the gate for good (revocation, shutdown). Waits for a poll
    /// of the lane in progress (a held [`Tenure`]) to end: after this, the
    /// lane never delivers again.
    pub fn close(&self) {
        let _held = self.lock_tenure();
        self.inner.closed.store(true, Ordering::Release);
    }

    /// The tenure to poll the lane under, or `None` once the gate is
    /// closed. Hold it for the whole poll, and only for the poll: `close`
    /// (on the controller thread) waits for it.
    pub fn admit(&self) -> Option<Tenure<'_>> {
        let held = self.lock_tenure();
        (!self.inner.closed.load(Ordering::Acquire)).then_some(Tenure { _held: held })
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
        g.close();
        assert!(!g.is_open());
        g.released(1);
        assert!(!g.is_open(), "a closed gate never reopens");
        assert_eq!(g.pending(), 0);
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
            g.close();
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
}
