//! [`KafkaLane`]: one assigned partition, polled on a driver thread.
//!
//! The lane owns the partition's split librdkafka queue. `poll` takes only
//! what is already fetched (zero timeout), in batches of up to 512 messages
//! per librdkafka call, and hands each message to the chain; a message the
//! chain refuses stops the lane right there (the rest of its batch is
//! released, never delivered: a refusal stops the pipeline, and nothing at or
//! past the refused offset is committed). With
//! `--until-end`, the first partition EOF ends the lane and tells the
//! source, which reports `CommitReady`. An error on the queue instead of a
//! message fails the lane when it cannot clear, or when it keeps coming
//! with no message in between (see [`fetch_error`](crate::fetch_error)),
//! in one line naming the topic, the partition and the offset. Within a
//! lane offsets only grow, unless librdkafka moved the partition's fetch
//! position back: a re-fetch of what the lane delivered (it has done so
//! around a cooperative rebalance, confluentinc/librdkafka#4637), or an
//! offset reset after a log truncation or a recreated topic, where the
//! messages at those offsets are not the ones delivered. The lane cannot
//! tell the two apart, so it delivers them (duplicates, never a gap) and
//! says so: one warning per poll with the count (`redelivered`). Under
//! `--delivery exactly-once` the chain drops them instead
//! (`ShardWriter::written_before`): an offset is a message's identity there.

use crate::context::SpateContext;
use crate::fetch_error::{disposition, Disposition, FetchErrors, FETCH_ERROR_PERSIST};
use crossbeam_channel::Sender;
use rdkafka::bindings as rdsys;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::Offset;
use spate_core::error::SourceError;
use spate_core::record::{Headers, Message, PartitionId};
use spate_core::source::{Deliver, Lane, LaneError, LaneId, LanePoll};
use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A lane reached the end of its partition.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaneEnd {
    pub(crate) lane: LaneId,
    /// Next offset after the last message the lane delivered; `None` if it
    /// delivered nothing.
    pub(crate) next_offset: Option<i64>,
}

/// One assigned partition's stream.
pub struct KafkaLane {
    id: LaneId,
    partition: PartitionId,
    /// Declared before `_split` so that it is destroyed first.
    raw: RawQueue,
    /// The split partition queue: keeps the partition off the consumer's
    /// main queue for as long as the lane lives.
    _split: PartitionQueue<SpateContext>,
    until_end: bool,
    ended_tx: Sender<LaneEnd>,
    next_offset: Option<i64>,
    /// The highest `next_offset` so far: a message below it was delivered
    /// before, at least its offset.
    reached: Option<i64>,
    ended: bool,
    /// Transient fetch errors since the last message.
    fetch_errors: FetchErrors,
    fence: std::sync::Arc<crate::fence::Fence>,
    /// The consumer group generation the partition was assigned in.
    epoch: Option<u64>,
    /// For the test-only re-fetch (`crate::fault`).
    consumer: Weak<BaseConsumer<SpateContext>>,
    first_offset: Option<i64>,
}

impl KafkaLane {
    /// `None` if librdkafka has no queue for the partition.
    pub(crate) fn new(
        id: LaneId,
        partition: PartitionId,
        consumer: &Arc<BaseConsumer<SpateContext>>,
        split: PartitionQueue<SpateContext>,
        until_end: bool,
        ended_tx: Sender<LaneEnd>,
        fence: std::sync::Arc<crate::fence::Fence>,
    ) -> Option<Self> {
        let raw = RawQueue::new(consumer, &partition.topic, partition.partition)?;
        Some(Self {
            id,
            partition,
            raw,
            _split: split,
            until_end,
            ended_tx,
            next_offset: None,
            reached: None,
            ended: false,
            fetch_errors: FetchErrors::default(),
            fence,
            epoch: None,
            consumer: Arc::downgrade(consumer),
            first_offset: None,
        })
    }

    /// The same lane, assigned in consumer group generation `generation`.
    pub(crate) fn with_epoch(mut self, generation: Option<u64>) -> Self {
        self.epoch = generation;
        self
    }
}

impl Lane for KafkaLane {
    fn id(&self) -> LaneId {
        self.id
    }

    fn partition(&self) -> &PartitionId {
        &self.partition
    }

    fn epoch(&self) -> Option<u64> {
        self.epoch
    }

    fn poll(&mut self, max: usize, deliver: &mut Deliver<'_>) -> Result<LanePoll, LaneError> {
        if self.ended {
            return Ok(LanePoll::Ended);
        }
        let mut n = 0;
        // (first offset, count) of messages below an offset already reached.
        let mut repeated: Option<(i64, u64)> = None;
        while n < max {
            let Some(tenure) = self.fence.hold() else {
                // Revoked or lost: the partition is no longer this lane's.
                break;
            };
            let batch = self.raw.take((max - n).min(BATCH));
            drop(tenure);
            if batch.is_empty() {
                break;
            }
            let mut at_end = false;
            for m in batch.iter() {
                if m.err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
                    if m.err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__PARTITION_EOF {
                        // With --until-end, what follows the EOF in this
                        // batch is not delivered: the lane ends at
                        // `next_offset`, and nothing past it is committed.
                        at_end = self.until_end;
                        if at_end {
                            break;
                        }
                        continue;
                    }
                    if let Some(failed) = fetch_error(&self.partition, &mut self.fetch_errors, &m) {
                        return Err(LaneError::Source(SourceError::Fatal(failed)));
                    }
                    continue;
                }
                let again = self.reached.is_some_and(|r| m.offset < r);
                let msg = Message {
                    topic: &self.partition.topic,
                    partition: m.partition,
                    offset: m.offset,
                    timestamp_ms: m.timestamp_ms(),
                    key: m.key(),
                    payload: m.payload(),
                    headers: Some(&m),
                };
                deliver(&msg)?;
                self.fetch_errors.on_message();
                if again {
                    repeated.get_or_insert((m.offset, 0)).1 += 1;
                }
                self.next_offset = Some(m.offset + 1);
                self.reached = self.reached.max(self.next_offset);
                self.first_offset.get_or_insert(m.offset);
                n += 1;
            }
            drop(batch);
            if at_end {
                self.report_repeats(repeated);
                return Ok(self.end(n));
            }
        }
        self.report_repeats(repeated);
        if crate::fault::refetch_now(n as u64) {
            self.refetch();
        }
        Ok(LanePoll::Delivered(n))
    }
}

impl KafkaLane {
    /// Test-only (`crate::fault`): seek the partition back to the first
    /// offset this lane delivered, without a new lane.
    fn refetch(&self) {
        let (Some(consumer), Some(first)) = (self.consumer.upgrade(), self.first_offset) else {
            return;
        };
        let at = &self.partition;
        match consumer.seek(
            &at.topic,
            at.partition,
            Offset::Offset(first),
            Duration::from_secs(5),
        ) {
            Ok(()) => {
                tracing::warn!(partition = %at, offset = first, "fault: lane seeks its partition back")
            }
            Err(e) => tracing::error!(partition = %at, error = %e, "fault: seek back failed"),
        }
    }

    fn report_repeats(&self, repeated: Option<(i64, u64)>) {
        if let Some((from, redelivered)) = repeated {
            tracing::warn!(
                topic = %self.partition.topic,
                partition = self.partition.partition,
                offset = from,
                redelivered,
                reached = ?self.reached,
                "the consumer went back to offsets this lane had delivered (a re-fetch, or an offset reset); delivering them again: at-least-once writes them twice, exactly-once drops them"
            );
        }
    }

    fn end(&mut self, delivered: usize) -> LanePoll {
        self.ended = true;
        tracing::info!(partition = %self.partition, next_offset = ?self.next_offset, "lane reached the end of its partition");
        let _ = self.ended_tx.send(LaneEnd {
            lane: self.id,
            next_offset: self.next_offset,
        });
        if delivered > 0 {
            LanePoll::Delivered(delivered)
        } else {
            LanePoll::Ended
        }
    }
}

/// An error message on the queue: `Some(why the lane fails)` if it
/// cannot clear or has persisted, else a warning (librdkafka retries).
fn fetch_error(
    partition: &PartitionId,
    errors: &mut FetchErrors,
    m: &RawMessage<'_>,
) -> Option<String> {
    let code = RDKafkaErrorCode::from(m.err);
    // An error message's payload is librdkafka's explanation.
    let text = m
        .payload()
        .map(|p| String::from_utf8_lossy(p).trim().to_string())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| code.to_string());
    let mut at = format!(
        "topic {} partition {}",
        partition.topic, partition.partition
    );
    if m.offset >= 0 {
        at.push_str(&format!(" offset {}", m.offset));
    }
    match disposition(code) {
        Disposition::Permanent(why) => {
            Some(format!("{at}: fetch failed: {text} ({code:?}): {why}"))
        }
        Disposition::Transient => {
            match errors.on_error(Instant::now(), FETCH_ERROR_PERSIST) {
                Some(lasted) => Some(format!(
                    "{at}: fetch failed for {}s ({} errors) with no message read in between; last: {text} ({code:?})",
                    lasted.as_secs(),
                    errors.count()
                )),
                None => {
                    tracing::warn!(topic = %partition.topic, partition = partition.partition,
                        offset = m.offset, error = %text, code = ?code, "fetch error; librdkafka retries");
                    None
                }
            }
        }
    }
}

/// Messages taken from the partition queue per librdkafka call.
const BATCH: usize = 512;

/// A second handle on the partition's fetch queue, for
/// `rd_kafka_consume_batch_queue`: one call takes up to [`BATCH`] messages
/// under one lock. rdkafka's `PartitionQueue::poll` goes through the event
/// API one message at a time (a lock, three clock reads and an `Arc` per
/// message), which took 18% of spate's CPU in a profile of `make bench`.
struct RawQueue {
    queue: NonNull<rdsys::rd_kafka_queue_t>,
    /// Reused between polls; empty whenever `poll` is not running.
    messages: Vec<*mut rdsys::rd_kafka_message_t>,
}

// SAFETY: librdkafka queue handles and messages may be used from any
// thread; the lane is polled by one driver thread at a time.
unsafe impl Send for RawQueue {}

impl RawQueue {
    /// The fetch queue of `topic`/`partition` of `consumer`, which must
    /// already be split off the consumer's main queue (the split
    /// `PartitionQueue` stays alive beside this handle).
    fn new(consumer: &BaseConsumer<SpateContext>, topic: &str, partition: i32) -> Option<Self> {
        let topic = CString::new(topic).ok()?;
        // SAFETY: the client pointer is valid while `consumer` lives; the
        // returned handle holds its own reference on the queue.
        let queue = unsafe {
            rdsys::rd_kafka_queue_get_partition(
                consumer.client().native_ptr(),
                topic.as_ptr(),
                partition,
            )
        };
        Some(Self {
            queue: NonNull::new(queue)?,
            messages: Vec::with_capacity(BATCH),
        })
    }

    /// Up to `max` messages already fetched, without waiting. They are
    /// destroyed when the returned batch is dropped.
    fn take(&mut self, max: usize) -> Batch<'_> {
        self.messages.clear();
        // SAFETY: `messages` has room for `max` pointers (max <= BATCH);
        // librdkafka writes `n` valid message pointers and returns `n`.
        let n = unsafe {
            rdsys::rd_kafka_consume_batch_queue(
                self.queue.as_ptr(),
                0,
                self.messages.as_mut_ptr(),
                max.min(self.messages.capacity()),
            )
        };
        // A negative answer is an error of the call itself (invalid queue),
        // which the next poll would meet again; treat it as "nothing now".
        // SAFETY: the first `n` entries were written by librdkafka.
        unsafe { self.messages.set_len(n.max(0) as usize) };
        Batch {
            messages: &mut self.messages,
        }
    }
}

impl Drop for RawQueue {
    fn drop(&mut self) {
        // SAFETY: the handle came from rd_kafka_queue_get_partition and is
        // destroyed once.
        unsafe { rdsys::rd_kafka_queue_destroy(self.queue.as_ptr()) }
    }
}

/// Messages of one `rd_kafka_consume_batch_queue` call, destroyed on drop
/// (also when delivering one of them fails).
struct Batch<'a> {
    messages: &'a mut Vec<*mut rdsys::rd_kafka_message_t>,
}

impl Batch<'_> {
    fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = RawMessage<'_>> {
        // SAFETY: each pointer is a live message until the batch drops.
        self.messages.iter().map(|&m| RawMessage {
            m: unsafe { &*m },
            ptr: m,
        })
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        for m in self.messages.drain(..) {
            // SAFETY: each message came from consume_batch_queue and is
            // destroyed exactly once; nothing borrows it any more.
            unsafe { rdsys::rd_kafka_message_destroy(m) }
        }
    }
}

/// One message of a [`Batch`], borrowed for as long as the batch lives.
struct RawMessage<'a> {
    m: &'a rdsys::rd_kafka_message_t,
    ptr: *mut rdsys::rd_kafka_message_t,
}

impl<'a> std::ops::Deref for RawMessage<'a> {
    type Target = rdsys::rd_kafka_message_t;
    fn deref(&self) -> &Self::Target {
        self.m
    }
}

impl<'a> RawMessage<'a> {
    fn payload(&self) -> Option<&'a [u8]> {
        bytes(self.m.payload, self.m.len)
    }

    fn key(&self) -> Option<&'a [u8]> {
        bytes(self.m.key, self.m.key_len)
    }

    fn timestamp_ms(&self) -> Option<i64> {
        let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: a live message; `kind` is a valid out pointer.
        let ts = unsafe { rdsys::rd_kafka_message_timestamp(self.ptr, &mut kind) };
        (kind != rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE && ts >= 0)
            .then_some(ts)
    }
}

impl RawMessage<'_> {
    /// The message's parsed headers; `None` without any. librdkafka parses
    /// them on the first call and keeps them with the message.
    fn raw_headers(&self) -> Option<*mut rdsys::rd_kafka_headers_t> {
        let mut h: *mut rdsys::rd_kafka_headers_t = std::ptr::null_mut();
        // SAFETY: a live message; `h` is a valid out pointer.
        let err = unsafe { rdsys::rd_kafka_message_headers(self.ptr, &mut h) };
        (err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && !h.is_null()).then_some(h)
    }
}

impl std::fmt::Debug for RawMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KafkaHeaders({})", self.count())
    }
}

/// Headers read straight from librdkafka's message, only when a sink asks
/// (a table with `_headers` columns): no copy, no allocation of ours.
impl Headers for RawMessage<'_> {
    fn count(&self) -> usize {
        // SAFETY: headers of a live message.
        self.raw_headers()
            .map_or(0, |h| unsafe { rdsys::rd_kafka_header_cnt(h) })
    }

    fn get(&self, index: usize) -> Option<(&[u8], Option<&[u8]>)> {
        let h = self.raw_headers()?;
        let mut name: *const std::ffi::c_char = std::ptr::null();
        let mut value: *const std::ffi::c_void = std::ptr::null();
        let mut size = 0usize;
        // SAFETY: headers of a live message; valid out pointers. The name
        // and value stay valid while the message lives (the batch's
        // lifetime, which outlives `&self`).
        let err =
            unsafe { rdsys::rd_kafka_header_get_all(h, index, &mut name, &mut value, &mut size) };
        if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated header name owned by the message.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
        Some((name, bytes(value.cast_mut(), size)))
    }
}

fn bytes<'a>(ptr: *mut std::ffi::c_void, len: usize) -> Option<&'a [u8]> {
    if ptr.is_null() {
        None
    } else {
        // SAFETY: librdkafka's payload/key pointer and length, valid while
        // the message lives (the caller's lifetime 'a is the batch's).
        Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }
}
