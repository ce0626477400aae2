//! Sink contract: shard queues, chunks, acknowledgements, drain and probe.
//!
//! ```text
//! driver k: chain ──Chunk──▶ ShardQueues[shard] ──▶ insert worker (tokio, sink crate)
//!                                                     │ success: AckEvent::Acked(ranges)
//! controller ◀──────────── AckSender (crossbeam) ◀────┘ give-up:  AckEvent::Abandoned / Fatal
//!                                                       lost rows: AckEvent::Rewind (lanes retired)
//! ```
//!
//! The chain's terminal stage (the [`ShardWriter`]) encodes rows with a
//! sink-provided [`RowEncode`], appends them to the open chunk of their
//! shard and pushes full chunks into [`ShardQueues`]. Each chunk carries the
//! [`AckRange`]s of the lanes it completes; the worker that inserts it sends
//! them back on the [`AckSender`]. A chunk's bytes count against its queue
//! until the worker is done with it (inserted or abandoned), so the queue
//! depth bounds the memory of queued *and* in-flight data.
//!
//! Each chunk also carries a [`RowIndex`]: where each row ends in `data`,
//! its offset and the partition of its range, and (under `--on-error
//! dead-letter`) its original message. A sink uses it to insert parts of a
//! batch and name or dead-letter the rows the server rejects; the rows it
//! skips or dead-letters are acknowledged with the chunk, so no extra
//! [`AckEvent`] is needed. A chunk with no rows carries only offsets the
//! error policy skipped: the sink acknowledges it at once.
//!
//! The runtime sees the sink only as a [`SinkRuntime`](crate::pipeline::SinkRuntime):
//! queue handles for capacity introspection, a drain hook and a probe.

mod acks;
mod blocks;
mod queue;
mod sizing;
mod stamps;
mod writer;

pub use acks::AckSender;
pub use blocks::{block_shard, BlockPlans, Replay};
pub use queue::{shard_bit, QueueDepths, QueueTicket, ShardQueues, ShardReceiver, Spare};
pub use sizing::{auto_rows, RateSizer, RowSizing, AUTO_MAX_ROWS, AUTO_MIN_ROWS};
pub use stamps::Stamps;
pub use writer::{BatchLimits, ShardWriter};

#[cfg(test)]
mod index_tests;

use crate::checkpoint::AckRange;
use crate::error::FatalError;
use crate::record::{Message, Offset, PartitionId};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A sealed batch of encoded rows for one shard.
#[derive(Debug)]
pub struct Chunk {
    /// Target shard.
    pub shard: usize,
    /// Rows encoded in `data`.
    pub rows: u64,
    /// The encoded rows, in the sink's wire format.
    pub data: Vec<u8>,
    /// The lane segments this chunk acknowledges once inserted.
    pub acks: Vec<AckRange>,
    /// Which messages the rows are, per partition (first and last offset
    /// of each lane's rows in this chunk, in append order): what a sink
    /// derives a deduplication token or an intent record from. Empty when
    /// a lane was registered without its partition
    /// ([`ShardWriter::add_lane`]); then nothing may be derived from it.
    pub spans: Box<[ChunkSpan]>,
    /// Releases the chunk's bytes from its queue's depth when dropped.
    pub ticket: Option<QueueTicket>,
    /// Where each row ends in `data` and where it came from, so a sink can
    /// isolate the rows the server rejects (empty when the producer of the
    /// chunk did not record it: the chunk is then one unit). Boxed: the
    /// chunk itself stays small as it moves through the queues.
    pub index: Box<RowIndex>,
    /// The sink schema version the rows were encoded for (see
    /// [`RowEncode::schema_switch`]); every row of a chunk has the same.
    pub schema: u64,
    /// The rows' Kafka timestamps, for the delivery latency observed when
    /// the chunk is acknowledged (empty when the messages carry none).
    pub stamps: Stamps,
}

/// Per-row metadata of a [`Chunk`], filled by the [`ShardWriter`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowIndex {
    /// One entry per row, in order.
    pub rows: Vec<RowOrigin>,
    /// Per entry of the chunk's `acks` (same order): the partition of that
    /// range's lane, when the chain named it.
    pub partitions: Vec<Option<PartitionId>>,
    /// Per row (same order as `rows`), the original message, kept only
    /// under `--on-error dead-letter` (empty otherwise): a row the server
    /// rejects becomes a dead letter of it.
    pub originals: Vec<Original>,
}

/// The parts of a message a dead letter keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Original {
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value.
    pub value: Option<Vec<u8>>,
    /// Its timestamp (ms since the epoch).
    pub timestamp_ms: Option<i64>,
    /// Its headers.
    pub headers: crate::record::OwnedHeaders,
}

impl Original {
    /// The parts of `msg` a dead letter keeps.
    #[must_use]
    pub fn of(msg: &Message<'_>) -> Self {
        Self {
            key: msg.key.map(<[u8]>::to_vec),
            value: msg.payload.map(<[u8]>::to_vec),
            timestamp_ms: msg.timestamp_ms,
            headers: crate::record::owned_headers(msg.headers),
        }
    }

    fn bytes(&self) -> usize {
        let headers: usize = (self.headers.iter())
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len) + 48)
            .sum();
        self.key.as_ref().map_or(0, Vec::len)
            + self.value.as_ref().map_or(0, Vec::len)
            + 32
            + headers
    }
}

impl RowIndex {
    /// Bytes the index holds (row entries and kept originals), counted in
    /// the queue budget with the chunk's data.
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        self.rows.len() * std::mem::size_of::<RowOrigin>()
            + self.originals.iter().map(Original::bytes).sum::<usize>()
    }
}

/// Where one row of a chunk ends and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowOrigin {
    /// The message's offset.
    pub offset: Offset,
    /// End of the row's bytes in the chunk's `data` (exclusive).
    pub end: u32,
    /// Index into the chunk's `acks` of the range the row belongs to.
    pub range: u32,
}

impl Chunk {
    /// Whether every row's boundaries are known (rows can be isolated).
    #[must_use]
    pub fn is_indexed(&self) -> bool {
        self.rows > 0 && self.index.rows.len() as u64 == self.rows
    }

    /// The bytes of rows `rows` (indexes into the row index).
    ///
    /// # Panics
    /// If the chunk is not [indexed](Self::is_indexed) or the range is out
    /// of bounds.
    #[must_use]
    pub fn row_bytes(&self, rows: std::ops::Range<usize>) -> &[u8] {
        let start = match rows.start {
            0 => 0,
            i => self.index.rows[i - 1].end as usize,
        };
        let end = self.index.rows[rows.end - 1].end as usize;
        &self.data[start..end]
    }

    /// The partition and offset row `row` came from (the partition is
    /// `None` when the chain did not name it).
    #[must_use]
    pub fn origin(&self, row: usize) -> Option<(Option<&PartitionId>, Offset)> {
        let o = self.index.rows.get(row)?;
        let partition = self
            .index
            .partitions
            .get(o.range as usize)
            .and_then(Option::as_ref);
        Some((partition, o.offset))
    }

    /// The partitions and offset ranges the chunk carries, for error
    /// messages: `topic t partition 0 offsets 10..=19, ...`.
    #[must_use]
    pub fn describe_ranges(&self) -> String {
        let parts: Vec<String> = self
            .acks
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let at = self
                    .index
                    .partitions
                    .get(i)
                    .and_then(Option::as_ref)
                    .map_or_else(
                        || format!("lane {}", a.lane.0),
                        |p| format!("topic {} partition {}", p.topic, p.partition),
                    );
                format!("{at} offsets {}..={}", a.start.0, a.end.0)
            })
            .collect();
        parts.join(", ")
    }
}

/// The rows of one partition in a [`Chunk`]: offsets `first..=last`
/// (every row between them that the chain kept, `rows` of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkSpan {
    /// The partition the rows were read from.
    pub partition: PartitionId,
    /// Offset of the first row.
    pub first: Offset,
    /// Offset of the last row.
    pub last: Offset,
    /// Rows of this partition in the chunk.
    pub rows: u64,
    /// Exactly-once: the epoch of the lane's assignment (see
    /// [`BlockPlans::replayed`]); a sink refuses the block once a later
    /// owner fenced the partition. `None` outside exactly-once.
    pub epoch: Option<u64>,
}

/// What insert workers report back to the controller.
#[derive(Debug)]
pub enum AckEvent {
    /// These ranges are durably in the sink.
    Acked(Vec<AckRange>),
    /// These ranges will never be acknowledged (abandoned at the shutdown
    /// deadline): their offsets must never be committed.
    Abandoned(Vec<AckRange>),
    /// The sink failed to insert these ranges and no longer holds their
    /// rows (a streamed request that failed after its batches' buffers
    /// were reused): read them again from the source. The controller
    /// rewinds each of their lanes to its acknowledged watermark
    /// ([`Source::rewind`](crate::source::Source::rewind)) under a new
    /// lane; their offsets are never committed before that.
    Rewind(Vec<AckRange>),
    /// The sink cannot go on (non-retriable error); the ranges it was
    /// inserting are failed and the pipeline must stop.
    Fatal {
        /// The ranges of the batch that failed.
        ranges: Vec<AckRange>,
        /// Why.
        error: FatalError,
    },
}

/// Receiving side of the acknowledgement channel (owned by the controller).
pub type AckReceiver = crossbeam_channel::Receiver<AckEvent>;

/// A new acknowledgement channel.
#[must_use]
pub fn ack_channel() -> (AckSender, AckReceiver) {
    let (tx, rx) = crossbeam_channel::unbounded();
    (AckSender::new(tx), rx)
}

/// Why a row could not be encoded, as the sink's encoder reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeFailure {
    /// The column being filled, if any.
    pub column: Option<String>,
    /// The offending value, already cut short.
    pub value: Option<String>,
    /// Why.
    pub reason: String,
}

/// What [`RowEncode::encode`] made of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoded {
    /// One row appended.
    Row,
    /// Several rows appended for one message, which stand or fall
    /// together: a change into a collapsing table (the cancel row of the
    /// key's previous state, then its new state). Only an exactly-once
    /// writer takes them (its blocks are cut by offset and never split
    /// by row); at-least-once, the chain stops at such a message.
    Rows(u32),
    /// No row, and none is owed: the message is done with as it is (a
    /// change stream's tombstone after its delete, an operation the
    /// pipeline is told to skip). `out` is unchanged; the chain covers the
    /// offset with its lane's segment (acknowledged with the rows before
    /// it) and counts it in `spate_messages_skipped_total{reason}`.
    Nothing {
        /// Why, as a metric label (`tombstone`, `truncate`, ...).
        reason: &'static str,
    },
    /// No row, and the pipeline must stop here: the message is well formed
    /// but asks for what the pipeline is told not to do (a truncate under
    /// `--on-truncate fail`). Never dead-lettered or skipped by the error
    /// policy: the chain fails with `reason`, naming the message.
    Stop {
        /// Why, for the error (the chain adds topic, partition, offset).
        reason: &'static str,
    },
    /// No row, and the message acts on the target itself, in order with
    /// the rows of its lane (a change stream's truncate under
    /// `--on-truncate delete-all`): the chain seals the open rows, waits
    /// (bounded) until every row of the lane read before it is
    /// acknowledged, calls [`RowEncode::barrier`], then covers the message
    /// like [`Encoded::Nothing`]. Rows read after it are appended only
    /// then. The act must be harmless to repeat: a replay after a crash
    /// does it again.
    Barrier {
        /// What it is, as a metric label (`truncate`).
        reason: &'static str,
    },
}

/// Turns one message into one encoded row of the target table. Provided by
/// the sink connector; one instance per driver thread (so it may keep
/// scratch buffers and needs no locking).
pub trait RowEncode: Send {
    /// Append exactly one row for `msg` to `out` ([`Encoded::Row`]; a
    /// change into a collapsing table, its rows: [`Encoded::Rows`]), or
    /// leave `out` unchanged and say why: a row is owed but cannot be had
    /// (`Err`, the error policy decides), or none is owed
    /// ([`Encoded::Nothing`]).
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure>;

    /// Whether messages without a value (tombstones) are the encoder's to
    /// read (a change stream's delete of a key). The default, `false`:
    /// the chain handles them by the error policy and never calls
    /// [`encode`](Self::encode) with one.
    fn takes_tombstones(&self) -> bool {
        false
    }

    /// Whether rows are routed to shards by a key (then the chain calls
    /// [`route_hash`](Self::route_hash) after each row). Without a key,
    /// rows are spread over the shards batch by batch.
    fn routes_by_key(&self) -> bool {
        false
    }

    /// The routing hash of the row the last successful `encode` appended;
    /// `row` is exactly that row's bytes. The row goes to shard
    /// `slots[hash % slots.len()]`.
    fn route_hash(&self, _row: &[u8]) -> Option<u64> {
        None
    }

    /// Called before each row: if the encoder has just switched to a new
    /// schema version (the sink's table changed), that version. The chain
    /// then seals its open chunks (encoded for the old one) and tags the
    /// chunks that follow with the new version, so no chunk mixes rows of
    /// two schemas. `None` (the default): no change. The chain asks only
    /// while [`schema_pending`](Self::schema_pending) says a switch waits.
    fn schema_switch(&mut self) -> Option<u64> {
        None
    }

    /// Whether [`schema_switch`](Self::schema_switch) would switch now
    /// (a cheap check, before each row). The chain holds a pending switch
    /// back while an exactly-once replay is half cut, so a replayed block
    /// is encoded with one schema, as it was the first time. An encoder
    /// that switches implements both.
    fn schema_pending(&self) -> bool {
        false
    }

    /// Do what the message answered with [`Encoded::Barrier`] asks, now
    /// that every row of its lane read before it is acknowledged. Blocks
    /// the driver thread; bounded by the implementation. `Err`: why it
    /// could not (the pipeline stops without covering the message).
    fn barrier(&mut self, msg: &Message<'_>) -> Result<(), String> {
        let _ = msg;
        Err("this encoder has nothing to do at a barrier".into())
    }
}

/// What the sink reported when draining at shutdown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Chunks inserted during the drain.
    pub flushed_chunks: u64,
    /// Rows inserted during the drain.
    pub flushed_rows: u64,
    /// Chunks given up at the deadline (their acknowledgements failed).
    pub abandoned_chunks: u64,
    /// Rows given up at the deadline.
    pub abandoned_rows: u64,
    /// Why anything was abandoned.
    pub reason: Option<String>,
}

impl DrainReport {
    /// Whether everything queued was inserted.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.abandoned_chunks == 0
    }
}

/// Drain hook: flush what's pending within the budget, fail the
/// acknowledgements of anything abandoned, and report.
pub type SinkDrainFn = Box<dyn FnOnce(Duration) -> DrainReport + Send>;

/// Result of one connectivity probe: `Err` names what is unreachable.
pub type ProbeResult = Result<(), String>;

/// Connectivity probe driving the sinks-connected half of `/readyz`.
pub type SinkProbeFn =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ProbeResult> + Send>> + Send + Sync>;
