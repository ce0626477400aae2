//! [`Fence`]: a lane's tenure of its partition. Held by the lane's driver
//! thread for each take off the fetch queue (`lane.rs`), ended by the
//! rebalance callback on the consumer's poll thread (`context.rs`) before
//! librdkafka gives the partition up. Its own module so the lane and the
//! context both use it without importing each other.

/// A lane's tenure of its partition, ended by the rebalance callback
/// (revoked or lost) before librdkafka gives the partition up. The lane
/// takes messages off the fetch queue only while holding it, so once a
/// revocation's `end` returns no take of the old lane runs or can start:
/// the old and the new lane of a re-assigned partition share librdkafka's
/// fetch queue, and a take straddling the re-assignment would hand the
/// new assignment's messages out under the old lane's ID.
#[derive(Debug)]
pub(crate) struct Fence {
    held: std::sync::Mutex<bool>,
}

impl Fence {
    pub(crate) fn new() -> Self {
        Self {
            held: std::sync::Mutex::new(true),
        }
    }

    /// The tenure for one take, `None` once ended.
    pub(crate) fn hold(&self) -> Option<std::sync::MutexGuard<'_, bool>> {
        let g = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (*g).then_some(g)
    }

    /// End the tenure; waits for a take in progress.
    pub(crate) fn end(&self) {
        *self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = false;
    }
}

#[cfg(test)]
mod tests {
    use super::Fence;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn ending_a_fence_waits_for_the_take_that_holds_it() {
        let fence = Arc::new(Fence::new());
        let held = fence.hold().expect("a fresh fence is held");
        let (tx, rx) = crossbeam_channel::bounded(1);
        let ender = {
            let fence = fence.clone();
            std::thread::spawn(move || {
                fence.end();
                let _ = tx.send(());
            })
        };
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "the fence ended while a take held it"
        );
        drop(held);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the fence ends once the take is done");
        ender.join().unwrap();
        assert!(fence.hold().is_none(), "an ended fence is never held again");
    }
}
