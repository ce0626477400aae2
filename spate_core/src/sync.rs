//! Synchronization primitives, swapped for `loom`'s under `--cfg loom` so the
//! concurrency primitives (drain barrier, pending gate) can be model-checked.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicI64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

pub(crate) use std::sync::TryLockError;

/// A short wait between two tries of a lock: a yield under loom (which
/// explores the other threads' steps there), a millisecond's sleep else.
pub(crate) fn pause() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::sleep(std::time::Duration::from_millis(1));
}
