//! Rebalance handling: the rdkafka callbacks of [`SpateContext`].
//!
//! Every callback runs on the `spate-kafka-poll` thread, inside the
//! `BaseConsumer::poll` that `KafkaSource::poll_events` runs there, and
//! only signals: it records what happened in the shared state, or, for a
//! revocation, sends a [`RevokeRequest`](crate::context::RevokeRequest) to
//! the controller thread and waits on the reply.
//!
//! - **Assign**: *before* librdkafka assigns the partitions, split each
//!   one's queue off the consumer queue (so no message of it can reach the
//!   consumer queue); the source makes lanes of them. After the
//!   assignment, resume the partitions explicitly (a pause flag survives
//!   revoke and re-assign).
//! - **Revoke**: ask the controller, which owns the runtime's `Revoker`
//!   (it stops the lanes on their drivers and waits, bounded by the revoke
//!   deadline, for their acknowledgements), and wait for its answer at most
//!   the revoke budget; commit the returned watermarks synchronously, and
//!   only then let librdkafka unassign. A *lost* assignment (session
//!   timeout) commits nothing: another member may already own those
//!   partitions.

use crate::context::{
    commit_list, forget, lock, record_commit_answer, record_max, Shared, SpateContext,
    SplitPartition,
};
use crate::rendezvous::ask;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::TopicPartitionList;
use spate_core::record::{PartitionId, Watermark};
use spate_core::source::LaneId;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

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
        if let Err(e) = &result {
            tracing::warn!(error = %e, "asynchronous offset commit failed; the next tick retries");
        }
        record_commit_answer(&mut lock(&self.shared), &result, offsets);
    }
}

impl SpateContext {
    fn on_assign(&self, tpl: &TopicPartitionList) {
        let Some(consumer) = self.me.get().and_then(Weak::upgrade) else {
            lock(&self.shared).fatal = Some("rebalance before the consumer was ready".into());
            return;
        };
        let generation = generation(&consumer);
        let mut shared = lock(&self.shared);
        shared.joined = true;
        for partition in partitions(tpl) {
            let Some(split) = self.split(&consumer, &mut shared, partition.clone(), generation)
            else {
                shared.fatal = Some(format!("could not split the queue of {partition}"));
                continue;
            };
            tracing::info!(%partition, lane = %split.id, ?generation, "partition assigned");
            shared.new_lanes.push(split);
        }
    }

    /// Split `partition`'s fetch queue off the consumer's main queue and
    /// register it as the partition's lane under a new ID, with a new
    /// tenure: for an assignment, and for a partition read again
    /// (`Source::rewind`). `None` if librdkafka has no queue for it.
    pub(crate) fn split(
        &self,
        consumer: &Arc<BaseConsumer<SpateContext>>,
        shared: &mut Shared,
        partition: PartitionId,
        generation: Option<u64>,
    ) -> Option<SplitPartition> {
        let queue = consumer.split_partition_queue(&partition.topic, partition.partition)?;
        let id = self.next_lane_id();
        shared.lanes.insert(partition.clone(), id);
        shared.by_id.insert(id, partition.clone());
        let fence = Arc::new(crate::fence::Fence::new());
        shared.fences.insert(id, fence.clone());
        Some(SplitPartition {
            id,
            partition,
            queue,
            fence,
            generation,
        })
    }

    fn on_revoke(&self, consumer: &BaseConsumer<SpateContext>, tpl: &TopicPartitionList) {
        let partitions = partitions(tpl);
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
        let watermarks = self.ask_revoker(&partitions, &lanes);
        if !watermarks.is_empty() {
            self.commit_revoked(consumer, &watermarks);
        }
        let mut shared = lock(&self.shared);
        forget(&mut shared, &partitions);
        shared.revoked.extend(lanes);
    }

    /// Signal the controller thread (which owns the runtime's `Revoker`)
    /// and wait for its answer: the watermarks safe to commit for `lanes`.
    /// Bounded by the revoke budget; without an answer nothing is
    /// committed, so unacknowledged rows replay on the new owner.
    fn ask_revoker(
        &self,
        partitions: &[PartitionId],
        lanes: &[LaneId],
    ) -> Vec<(PartitionId, Watermark)> {
        let Some(requests) = lock(&self.revoke_tx).clone() else {
            tracing::warn!(
                ?partitions,
                "revoked outside of a poll; unacknowledged rows replay on the new owner"
            );
            return Vec::new();
        };
        match ask(&requests, lanes.to_vec(), self.revoke_wait) {
            Ok(watermarks) => watermarks,
            Err(e) => {
                tracing::error!(?partitions, error = %e, "the runtime did not answer the revocation; nothing is committed, unacknowledged rows replay on the new owner");
                Vec::new()
            }
        }
    }

    /// Commit the revoked partitions' watermarks synchronously, before
    /// librdkafka gives the partitions up.
    fn commit_revoked(
        &self,
        consumer: &BaseConsumer<SpateContext>,
        watermarks: &[(PartitionId, Watermark)],
    ) {
        let tpl = commit_list(watermarks);
        match tpl.and_then(|tpl| consumer.commit(&tpl, CommitMode::Sync)) {
            Ok(()) => {
                let mut shared = lock(&self.shared);
                for (p, w) in watermarks {
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
}

/// The consumer group generation librdkafka joined with (during the
/// assign callback: the generation of this assignment), if it has one.
pub(crate) fn generation(consumer: &BaseConsumer<SpateContext>) -> Option<u64> {
    use rdkafka::bindings as rdsys;
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live client; the metadata is a copy we own and
    // destroy below.
    let md = unsafe { rdsys::rd_kafka_consumer_group_metadata(rk) };
    if md.is_null() {
        return None;
    }
    // SAFETY: `md` is valid until destroyed, which happens right after.
    let generation = unsafe { rdsys::rd_kafka_consumer_group_metadata_generation_id(md) };
    // SAFETY: ours, not used afterwards.
    unsafe { rdsys::rd_kafka_consumer_group_metadata_destroy(md) };
    u64::try_from(generation).ok().filter(|&g| g > 0)
}

fn partitions(tpl: &TopicPartitionList) -> Vec<PartitionId> {
    tpl.elements()
        .iter()
        .map(|e| PartitionId::new(e.topic(), e.partition()))
        .collect()
}
