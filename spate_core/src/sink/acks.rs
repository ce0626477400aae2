//! [`AckSender`]: the sink's side of the acknowledgement channel, and the
//! pipeline's registry of *retired* lanes.
//!
//! When a sink sends [`AckEvent::Rewind`] it no longer holds those rows,
//! and the controller reads their partitions again under new lanes
//! ([`Source::rewind`](crate::source::Source::rewind)). The old lanes'
//! chunks still queued, in this shard's queue or another's (another table
//! of a routed pipeline included), would be inserted beside the rows read
//! again: a second copy of each. So the send marks the lanes *retired*
//! before the controller hears of them, and every insert worker of the
//! pipeline, sharing the registry through its clone of the sender, discards
//! a chunk whose ranges all belong to retired lanes
//! ([`AckSender::all_retired`]) instead of inserting it, and reports its
//! ranges as rewound too (never committed past). A chunk that also holds
//! rows of a live lane is inserted whole: its retired rows are duplicates,
//! never a gap. LaneIds are per source, and so is the registry: one per
//! acknowledgement channel, which is one per pipeline.

use super::AckEvent;
use crate::checkpoint::AckRange;
use crate::source::LaneId;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

#[derive(Debug, Default)]
struct Retired {
    /// Set once a lane was retired: the common case reads one flag.
    any: AtomicBool,
    /// Read by every worker for each batch once a lane was retired.
    lanes: RwLock<HashSet<LaneId>>,
}

/// Sending side of the acknowledgement channel (sink workers →
/// controller), with the pipeline's retired lanes.
#[derive(Clone, Debug)]
pub struct AckSender {
    tx: crossbeam_channel::Sender<AckEvent>,
    retired: Arc<Retired>,
}

impl AckSender {
    pub(super) fn new(tx: crossbeam_channel::Sender<AckEvent>) -> Self {
        Self {
            tx,
            retired: Arc::default(),
        }
    }

    /// Send `event` to the controller. A [`AckEvent::Rewind`] retires its
    /// lanes first, so no worker inserts their queued chunks from then on.
    ///
    /// # Errors
    /// The controller is gone (the pipeline is over).
    pub fn send(&self, event: AckEvent) -> Result<(), crossbeam_channel::SendError<AckEvent>> {
        if let AckEvent::Rewind(ranges) = &event {
            self.retire(ranges);
        }
        self.tx.send(event)
    }

    fn retire(&self, ranges: &[AckRange]) {
        if ranges.is_empty() {
            return;
        }
        let mut lanes = self
            .retired
            .lanes
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        lanes.extend(ranges.iter().map(|r| r.lane));
        self.retired.any.store(true, Ordering::Release);
    }

    /// Whether every one of `ranges` is of a retired lane (and there is at
    /// least one): a chunk carrying them is not to be inserted.
    #[must_use]
    pub fn all_retired(&self, ranges: &[AckRange]) -> bool {
        if ranges.is_empty() || !self.retired.any.load(Ordering::Acquire) {
            return false;
        }
        let lanes = self
            .retired
            .lanes
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        ranges.iter().all(|r| lanes.contains(&r.lane))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Offset;

    fn range(lane: u64) -> AckRange {
        AckRange {
            lane: LaneId(lane),
            seq: 0,
            parts: 1,
            part: 0,
            start: Offset(0),
            end: Offset(9),
            rows: 10,
        }
    }

    #[test]
    fn a_rewind_retires_its_lanes_for_every_clone_of_the_sender() {
        let (tx, rx) = super::super::ack_channel();
        let other = tx.clone();
        assert!(!other.all_retired(&[range(1)]));
        tx.send(AckEvent::Rewind(vec![range(1), range(2)])).unwrap();
        assert!(matches!(rx.try_recv(), Ok(AckEvent::Rewind(_))));
        assert!(other.all_retired(&[range(1)]));
        assert!(other.all_retired(&[range(2), range(1)]));
        // A chunk with rows of a live lane is inserted whole.
        assert!(!other.all_retired(&[range(1), range(3)]));
        assert!(!other.all_retired(&[]));
        // Other events retire nothing.
        tx.send(AckEvent::Acked(vec![range(3)])).unwrap();
        assert!(!other.all_retired(&[range(3)]));
        // A second channel (another pipeline) has its own registry.
        let (tx2, _rx2) = super::super::ack_channel();
        assert!(!tx2.all_retired(&[range(1)]));
    }
}
