//! The consumer context's state: what the rdkafka callbacks record and the
//! source reads, and the rendezvous a revocation waits on.
//!
//! Every callback runs inside `BaseConsumer::poll`, which
//! `KafkaSource::poll_events` runs on a short-lived `spate-kafka-poll`
//! thread while the controller thread serves revocation requests (see
//! [`rebalance`](crate::rebalance) for the callbacks themselves). It is
//! shared between the polling thread and the controller thread through
//! mutexes that are never held across a blocking call; lanes on driver
//! threads keep the consumer alive but do not touch this state.

use crate::connect::{record_error, Diagnosed, FailureLog};
use crate::fence::Fence;
use crate::rendezvous::Request;
use crossbeam_channel::Sender;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::ClientContext;
use spate_core::record::{PartitionId, Watermark};
use spate_core::source::LaneId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

/// A partition just assigned: its queue split off the consumer queue
/// before the assignment took effect. The source turns it into a lane.
pub(crate) struct SplitPartition {
    pub(crate) id: LaneId,
    pub(crate) partition: PartitionId,
    pub(crate) queue: PartitionQueue<SpateContext>,
    /// The lane's tenure, ended by [`forget`].
    pub(crate) fence: Arc<Fence>,
    /// The consumer group generation of the assignment, if librdkafka
    /// knows one (see [`Lane::epoch`](spate_core::source::Lane::epoch)).
    pub(crate) generation: Option<u64>,
}

/// A revocation, sent by the rebalance callback to the controller thread,
/// which owns the runtime's `Revoker`: the lanes to give up, answered with
/// the watermarks safe to commit for them. The callback blocks on the
/// answer until its wait passes.
pub(crate) type RevokeRequest = Request<Vec<LaneId>, Vec<(PartitionId, Watermark)>>;

/// State shared between the context (callbacks) and the source.
#[derive(Default)]
pub(crate) struct Shared {
    /// Partitions split by the last assignments, not yet made lanes.
    pub(crate) new_lanes: Vec<SplitPartition>,
    /// Current assignment: partition → lane.
    pub(crate) lanes: HashMap<PartitionId, LaneId>,
    /// Lane → partition, for the current assignment.
    pub(crate) by_id: HashMap<LaneId, PartitionId>,
    /// Lane → its tenure, for the current assignment.
    pub(crate) fences: HashMap<LaneId, Arc<Fence>>,
    /// Lanes taken away without a revoke (assignment lost).
    pub(crate) lost: Vec<LaneId>,
    /// Lanes revoked (already drained and committed through the revoker).
    pub(crate) revoked: Vec<LaneId>,
    /// Highest offset the broker confirmed as committed, per partition.
    pub(crate) committed: HashMap<PartitionId, i64>,
    /// Highest offset sent in an asynchronous commit, per partition.
    pub(crate) sent: HashMap<PartitionId, i64>,
    /// Asynchronous commits the broker refused, with its answer, not yet
    /// reported to the controller (`SourceEvent::CommitFailed`).
    pub(crate) refused: Vec<(Vec<(PartitionId, Watermark)>, String)>,
    /// A callback hit something the pipeline cannot survive.
    pub(crate) fatal: Option<String>,
    /// An assignment arrived (possibly empty) since the source last looked:
    /// the member joined its group.
    pub(crate) joined: bool,
}

pub(crate) struct SpateContext {
    pub(crate) me: OnceLock<Weak<BaseConsumer<SpateContext>>>,
    /// Where revocations go while `poll_events` serves them (`None`
    /// outside of a poll: nobody would answer).
    pub(crate) revoke_tx: Mutex<Option<Sender<RevokeRequest>>>,
    /// Longest the revoke callback waits for the controller's answer: the
    /// runtime's revoke budget plus a grace for its last steps.
    pub(crate) revoke_wait: Duration,
    pub(crate) shared: Mutex<Shared>,
    /// The source is being dropped: the final commit is done, and the
    /// revocation librdkafka runs while closing has nothing left to commit.
    pub(crate) closing: AtomicBool,
    next_lane: AtomicU64,
    /// Each partition's high watermark from the latest librdkafka
    /// statistics (the fetch responses' high watermark, which tansu reports
    /// correctly, unlike ListOffsets).
    pub(crate) high_watermarks: Mutex<HashMap<PartitionId, i64>>,
    /// Broker connection failures the callbacks saw.
    pub(crate) failures: Mutex<FailureLog>,
    /// What librdkafka holds prefetched, from the statistics.
    pub(crate) prefetch: PrefetchWatch,
}

/// The payload bytes librdkafka holds in the partitions' fetch queues, as
/// its latest statistics report them, against the budget's prefetch share.
///
/// The share bounds them only while record batches are smaller than a
/// partition's limit: a broker sends a record batch whole even when it is
/// larger than the fetch limits (KIP-74), and a partition's queue is only
/// found full after such a batch arrived. With producers' batches of 1 MB
/// (librdkafka's default `batch.size`) and a 64 KiB limit per partition,
/// 64 partitions hold up to 64 MB of payload plus their fetch buffers
/// (measured, `e2e_memory_partitions`: peak RSS 51-140 MiB for a 64 MiB
/// budget, against 51-57 MiB with 64 KiB batches). spate cannot make
/// those batches smaller, so it says so: [`observe`](Self::observe)
/// warns, and the `spate_prefetch_bytes` gauge shows it.
pub(crate) struct PrefetchWatch {
    /// librdkafka's limit per partition (`queued.max.messages.kbytes`,
    /// and the most one fetch brings).
    per_partition: u64,
    /// Partitions the prefetch is split over.
    partitions: usize,
    /// Latest sum over the partitions; `u64::MAX` before any statistics.
    latest: AtomicU64,
    /// When the last warning was logged.
    warned: Mutex<Option<Instant>>,
}

/// Least time between two prefetch warnings.
const PREFETCH_WARN_EVERY: Duration = Duration::from_secs(600);

impl PrefetchWatch {
    pub(crate) fn new(per_partition: u64, partitions: usize) -> Self {
        Self {
            per_partition,
            partitions,
            latest: AtomicU64::new(u64::MAX),
            warned: Mutex::new(None),
        }
    }

    /// Payload bytes the prefetch may hold within the budget: each
    /// partition's queue holds its limit plus one fetch response (half of
    /// the prefetch quarter in all).
    fn share(&self) -> u64 {
        2 * self.per_partition * self.partitions.max(1) as u64
    }

    /// The latest sum, if librdkafka reported one.
    pub(crate) fn latest(&self) -> Option<u64> {
        Some(self.latest.load(Ordering::Relaxed)).filter(|&b| b != u64::MAX)
    }

    /// Record one statistics report's sum. Past the share, the prefetch
    /// is outside the quarter of `--max-buffered-bytes` it was given
    /// (librdkafka's own structures cost about as much again); returns
    /// whether that was warned about now (at most every
    /// [`PREFETCH_WARN_EVERY`]).
    pub(crate) fn observe(&self, bytes: u64, now: Instant) -> bool {
        self.latest.store(bytes, Ordering::Relaxed);
        let share = self.share();
        if bytes <= share {
            return false;
        }
        let mut warned = lock(&self.warned);
        if warned.is_some_and(|at| now.duration_since(at) < PREFETCH_WARN_EVERY) {
            return false;
        }
        *warned = Some(now);
        tracing::warn!(
            prefetched_mib = bytes >> 20,
            share_mib = share >> 20,
            partitions = self.partitions,
            limit_per_partition_kib = self.per_partition >> 10,
            "librdkafka holds more prefetched than --max-buffered-bytes gives it: \
             brokers send a record batch whole even when it is larger than a \
             partition's limit, so memory can reach the partition count times \
             twice the producers' batch size; raise --max-buffered-bytes, or \
             spread the partitions over more members"
        );
        true
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SpateContext {
    pub(crate) fn new(revoke_wait: Duration, prefetch: PrefetchWatch) -> Self {
        Self {
            me: OnceLock::new(),
            revoke_tx: Mutex::new(None),
            revoke_wait,
            shared: Mutex::new(Shared::default()),
            closing: AtomicBool::new(false),
            next_lane: AtomicU64::new(0),
            high_watermarks: Mutex::new(HashMap::new()),
            failures: Mutex::new(FailureLog::default()),
            prefetch,
        }
    }

    /// A fresh lane identity (never reused, also across re-assignments).
    pub(crate) fn next_lane_id(&self) -> LaneId {
        LaneId(self.next_lane.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

pub(crate) fn forget(shared: &mut Shared, partitions: &[PartitionId]) {
    for p in partitions {
        if let Some(id) = shared.lanes.remove(p) {
            shared.by_id.remove(&id);
            // Before the callback returns, so before librdkafka gives the
            // partition up: the lane takes nothing of a later assignment.
            if let Some(fence) = shared.fences.remove(&id) {
                fence.end();
            }
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

/// Record the broker's answer to a commit (the commit callback): offsets it
/// confirmed raise `committed`; refused ones, for a partition still owned
/// and at the last value sent asynchronously (an older refused value is
/// covered by the newer commit), are queued in `refused` for the
/// controller to offer again.
pub(crate) fn record_commit_answer(
    shared: &mut Shared,
    result: &KafkaResult<()>,
    offsets: &TopicPartitionList,
) {
    let mut refused = Vec::new();
    let mut error = result.as_ref().err().map(ToString::to_string);
    for e in offsets.elements() {
        let Offset::Offset(o) = e.offset() else {
            continue;
        };
        let p = PartitionId::new(e.topic(), e.partition());
        if !shared.lanes.contains_key(&p) {
            continue;
        }
        match result.as_ref().and(e.error().as_ref()) {
            Ok(()) => record_max(&mut shared.committed, &p, o),
            Err(why) => {
                error.get_or_insert_with(|| why.to_string());
                if shared.sent.get(&p) == Some(&o) {
                    refused.push((p, Watermark(o)));
                }
            }
        }
    }
    if !refused.is_empty() {
        shared
            .refused
            .push((refused, error.unwrap_or_else(|| "refused".into())));
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
        if fac == "FAIL" {
            // Broker failures below the error level (a connection closed
            // at the first request) come only as log lines.
            lock(&self.failures).record(None, log_message, std::time::Instant::now());
        }
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
        let mut prefetched = 0u64;
        for (topic, t) in &statistics.topics {
            for (&partition, p) in &t.partitions {
                prefetched += p.fetchq_size;
                // Partition -1 is librdkafka's internal UA partition; -1
                // offsets mean "not known yet".
                if partition >= 0 && p.hi_offset >= 0 {
                    hw.insert(PartitionId::new(topic.as_str(), partition), p.hi_offset);
                }
            }
        }
        // What librdkafka holds in the partitions' fetch queues (payload
        // bytes): with many partitions, each may hold a whole record
        // batch past its queued.max.messages.kbytes share (KIP-74).
        drop(hw);
        self.prefetch.observe(prefetched, Instant::now());
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF) {
            // Expected with --until-end; the lane reports it.
            tracing::debug!(target: "librdkafka", "{reason}");
            return;
        }
        record_error(&self.failures, &error, reason);
        tracing::warn!(target: "librdkafka", error = %error, "{reason}");
    }
}

impl Diagnosed for SpateContext {
    fn failure_log(&self) -> &Mutex<FailureLog> {
        &self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode;

    fn owned(shared: &mut Shared, partition: i32, sent: i64) -> PartitionId {
        let p = PartitionId::new("t", partition);
        shared.lanes.insert(p.clone(), LaneId(partition as u64 + 1));
        shared.sent.insert(p.clone(), sent);
        p
    }

    #[test]
    fn a_refused_commit_of_the_last_value_sent_is_queued_for_the_controller() {
        let mut shared = Shared::default();
        let p0 = owned(&mut shared, 0, 10);
        let p1 = owned(&mut shared, 1, 30);
        // Partition 1 sent a newer commit since: its older refusal is moot.
        let tpl = commit_list(&[(p0.clone(), Watermark(10)), (p1, Watermark(20))]).unwrap();
        let refused = Err(KafkaError::ConsumerCommit(
            RDKafkaErrorCode::RebalanceInProgress,
        ));
        record_commit_answer(&mut shared, &refused, &tpl);
        assert_eq!(shared.refused.len(), 1);
        assert_eq!(shared.refused[0].0, vec![(p0.clone(), Watermark(10))]);
        assert!(shared.committed.is_empty(), "nothing was confirmed");

        let tpl = commit_list(&[(p0.clone(), Watermark(10))]).unwrap();
        record_commit_answer(&mut shared, &Ok(()), &tpl);
        assert_eq!(shared.committed.get(&p0), Some(&10));
        assert_eq!(shared.refused.len(), 1, "a confirmation queues nothing");
    }

    #[test]
    fn the_prefetch_watch_warns_past_its_share_at_most_every_ten_minutes() {
        // 64 partitions of 64 KiB: an 8 MiB share.
        let w = PrefetchWatch::new(64 << 10, 64);
        assert_eq!(w.latest(), None, "nothing before the first statistics");
        let t0 = Instant::now();
        assert!(!w.observe(8 << 20, t0), "the share is within budget");
        assert_eq!(w.latest(), Some(8 << 20));
        assert!(w.observe((8 << 20) + 1, t0), "past it: warned");
        assert!(!w.observe(60 << 20, t0 + Duration::from_secs(599)));
        assert_eq!(w.latest(), Some(60 << 20), "the gauge still follows");
        assert!(w.observe(60 << 20, t0 + PREFETCH_WARN_EVERY));
        assert!(!w.observe(1 << 20, t0 + 2 * PREFETCH_WARN_EVERY));
    }
}
