//! The consumer context: rebalance handling and commit bookkeeping.
//!
//! Every callback here runs on the controller thread, inside
//! `BaseConsumer::poll` called from `KafkaSource::poll_events`.
//!
//! - **Assign**: *before* librdkafka assigns the partitions, split each
//!   one's queue off the consumer queue (so no message of it can reach the
//!   consumer queue) and build its lane; after the assignment, resume the
//!   partitions explicitly (a pause flag survives revoke and re-assign).
//! - **Revoke**: call the runtime's `Revoker` synchronously (it stops the
//!   lanes on their drivers and waits, bounded, for their acknowledgements),
//!   commit the returned watermarks synchronously, and only then let
//!   librdkafka unassign. A *lost* assignment (session timeout) commits
//!   nothing: another member may already own those partitions.

use crate::lane::{KafkaLane, LaneEnd};
use crossbeam_channel::Sender;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::ClientContext;
use spate_core::record::{PartitionId, Watermark};
use spate_core::source::{LaneId, Revoker};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError, Weak};

/// The runtime's revoker, lent to the context for the duration of one
/// `BaseConsumer::poll` call.
pub(crate) struct LentRevoker(pub(crate) *mut (dyn Revoker + 'static));

// SAFETY: the pointer is only set and dereferenced on the controller thread,
// inside the `poll` call that lent it (librdkafka serves rebalance callbacks
// from the polling thread); `KafkaSource::poll_events` clears it before the
// borrow it was made from ends.
unsafe impl Send for LentRevoker {}

/// State shared between the context (callbacks) and the source.
#[derive(Default)]
pub(crate) struct Shared {
    /// Lanes created by the last assignments, not yet handed out.
    pub(crate) new_lanes: Vec<KafkaLane>,
    /// Current assignment: partition → lane.
    pub(crate) lanes: HashMap<PartitionId, LaneId>,
    /// Lane → partition, for the current assignment.
    pub(crate) by_id: HashMap<LaneId, PartitionId>,
    /// Lanes taken away without a revoke (assignment lost).
    pub(crate) lost: Vec<LaneId>,
    /// Lanes revoked (already drained and committed through the revoker).
    pub(crate) revoked: Vec<LaneId>,
    /// Highest offset the broker confirmed as committed, per partition.
    pub(crate) committed: HashMap<PartitionId, i64>,
    /// Highest offset sent in an asynchronous commit, per partition.
    pub(crate) sent: HashMap<PartitionId, i64>,
    /// A callback hit something the pipeline cannot survive.
    pub(crate) fatal: Option<String>,
}

pub(crate) struct SpateContext {
    pub(crate) me: OnceLock<Weak<BaseConsumer<SpateContext>>>,
    pub(crate) revoker: Mutex<Option<LentRevoker>>,
    pub(crate) shared: Mutex<Shared>,
    pub(crate) until_end: bool,
    pub(crate) ended: Sender<LaneEnd>,
    /// The source is being dropped: the final commit is done, and the
    /// revocation librdkafka runs while closing has nothing left to commit.
    pub(crate) closing: AtomicBool,
    next_lane: AtomicU64,
    /// Each partition's high watermark from the latest librdkafka
    /// statistics (the fetch responses' high watermark, which tansu reports
    /// correctly, unlike ListOffsets).
    pub(crate) high_watermarks: Mutex<HashMap<PartitionId, i64>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SpateContext {
    pub(crate) fn new(until_end: bool, ended: Sender<LaneEnd>) -> Self {
        Self {
            me: OnceLock::new(),
            revoker: Mutex::new(None),
            shared: Mutex::new(Shared::default()),
            until_end,
            ended,
            closing: AtomicBool::new(false),
            next_lane: AtomicU64::new(0),
            high_watermarks: Mutex::new(HashMap::new()),
        }
    }

    fn partitions(tpl: &TopicPartitionList) -> Vec<PartitionId> {
        tpl.elements()
            .iter()
            .map(|e| PartitionId::new(e.topic(), e.partition()))
            .collect()
    }

    fn on_assign(&self, tpl: &TopicPartitionList) {
        let Some(consumer) = self.me.get().and_then(Weak::upgrade) else {
            lock(&self.shared).fatal = Some("rebalance before the consumer was ready".into());
            return;
        };
        let mut shared = lock(&self.shared);
        for partition in Self::partitions(tpl) {
            let Some(queue) = consumer.split_partition_queue(&partition.topic, partition.partition)
            else {
                shared.fatal = Some(format!("could not split the queue of {partition}"));
                continue;
            };
            let id = LaneId(self.next_lane.fetch_add(1, Ordering::Relaxed) + 1);
            let Some(lane) = KafkaLane::new(
                id,
                partition.clone(),
                &consumer,
                queue,
                self.until_end,
                self.ended.clone(),
            ) else {
                shared.fatal = Some(format!("no fetch queue for {partition}"));
                continue;
            };
            tracing::info!(%partition, lane = %id, "partition assigned");
            shared.lanes.insert(partition.clone(), id);
            shared.by_id.insert(id, partition);
            shared.new_lanes.push(lane);
        }
    }

    fn on_revoke(&self, consumer: &BaseConsumer<SpateContext>, tpl: &TopicPartitionList) {
        let partitions = Self::partitions(tpl);
        let lanes: Vec<LaneId> = {
            let shared = lock(&self.shared);
            partitions
                .iter()
                .filter_map(|p| shared.lanes.get(p).copied())
                .collect()
        };
        if lanes.is_empty() {
            return;
        }
        if consumer.assignment_lost() {
            tracing::warn!(
                ?partitions,
                "assignment lost; nothing is committed for these partitions"
            );
            let mut shared = lock(&self.shared);
            forget(&mut shared, &partitions);
            shared.lost.extend(lanes);
            return;
        }
        if self.closing.load(Ordering::Acquire) {
            tracing::debug!(?partitions, "partitions released while closing");
            let mut shared = lock(&self.shared);
            forget(&mut shared, &partitions);
            return;
        }
        tracing::info!(?partitions, "partitions revoked");
        let lent = lock(&self.revoker).take();
        let watermarks = match &lent {
            // SAFETY: see `LentRevoker`: we are inside the `poll` call that
            // lent this pointer, on the thread that owns the borrow.
            Some(r) => unsafe { (*r.0).revoke(&lanes) },
            None => {
                tracing::warn!(
                    ?partitions,
                    "revoked outside of a poll; unacknowledged rows replay on the new owner"
                );
                Vec::new()
            }
        };
        *lock(&self.revoker) = lent;
        if !watermarks.is_empty() {
            let tpl = commit_list(&watermarks);
            match tpl.and_then(|tpl| consumer.commit(&tpl, CommitMode::Sync)) {
                Ok(()) => {
                    let mut shared = lock(&self.shared);
                    for (p, w) in &watermarks {
                        record_max(&mut shared.committed, p, w.0);
                    }
                    tracing::info!(
                        ?watermarks,
                        "committed revoked partitions before giving them up"
                    );
                }
                Err(e) => {
                    tracing::error!(error = %e, "commit of revoked partitions failed; their rows replay on the new owner")
                }
            }
        }
        let mut shared = lock(&self.shared);
        forget(&mut shared, &partitions);
        shared.revoked.extend(lanes);
    }
}

fn forget(shared: &mut Shared, partitions: &[PartitionId]) {
    for p in partitions {
        if let Some(id) = shared.lanes.remove(p) {
            shared.by_id.remove(&id);
        }
        shared.committed.remove(p);
        shared.sent.remove(p);
    }
}

pub(crate) fn record_max(map: &mut HashMap<PartitionId, i64>, p: &PartitionId, offset: i64) {
    let e = map.entry(p.clone()).or_insert(offset);
    if offset > *e {
        *e = offset;
    }
}

/// A topic-partition list with the given committed offsets.
pub(crate) fn commit_list(
    watermarks: &[(PartitionId, Watermark)],
) -> KafkaResult<TopicPartitionList> {
    let mut tpl = TopicPartitionList::with_capacity(watermarks.len());
    for (p, w) in watermarks {
        tpl.add_partition_offset(&p.topic, p.partition, Offset::Offset(w.0))?;
    }
    Ok(tpl)
}

impl ClientContext for SpateContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        match level {
            L::Emerg | L::Alert | L::Critical | L::Error => {
                tracing::error!(target: "librdkafka", fac, "{log_message}")
            }
            L::Warning => tracing::warn!(target: "librdkafka", fac, "{log_message}"),
            L::Notice | L::Info => tracing::info!(target: "librdkafka", fac, "{log_message}"),
            L::Debug => tracing::debug!(target: "librdkafka", fac, "{log_message}"),
        }
    }

    fn stats(&self, statistics: rdkafka::Statistics) {
        let mut hw = lock(&self.high_watermarks);
        for (topic, t) in &statistics.topics {
            for (&partition, p) in &t.partitions {
                // Partition -1 is librdkafka's internal UA partition; -1
                // offsets mean "not known yet".
                if partition >= 0 && p.hi_offset >= 0 {
                    hw.insert(PartitionId::new(topic.as_str(), partition), p.hi_offset);
                }
            }
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF) {
            // Expected with --until-end; the lane reports it.
            tracing::debug!(target: "librdkafka", "{reason}");
            return;
        }
        tracing::warn!(target: "librdkafka", error = %error, "{reason}");
    }
}

impl ConsumerContext for SpateContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => self.on_assign(tpl),
            Rebalance::Revoke(tpl) => self.on_revoke(consumer, tpl),
            Rebalance::Error(e) => tracing::error!(error = %e, "rebalance error"),
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            // The paused flag survives revoke and re-assign: make every
            // newly assigned partition's state explicit.
            if tpl.count() > 0 {
                if let Err(e) = consumer.resume(tpl) {
                    tracing::warn!(error = %e, "resuming newly assigned partitions failed");
                }
            }
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        tracing::debug!(?result, ?offsets, "commit callback");
        match result {
            Ok(()) => {
                let mut shared = lock(&self.shared);
                for e in offsets.elements() {
                    if let Offset::Offset(o) = e.offset() {
                        let p = PartitionId::new(e.topic(), e.partition());
                        if shared.lanes.contains_key(&p) {
                            record_max(&mut shared.committed, &p, o);
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "asynchronous offset commit failed; the next tick retries")
            }
        }
    }
}
