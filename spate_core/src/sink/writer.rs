//! [`ShardWriter`]: the chain's terminal stage.
//!
//! Shaped like an inserter: one open chunk per shard with limits on rows,
//! bytes and age (the age limit has a small random jitter so shards do not
//! flush in lockstep). Rows are appended by the encoder straight into the
//! open chunk's buffer; a chunk that reaches a limit is sealed and pushed
//! into its [`ShardQueues`] entry.
//!
//! Segment bookkeeping (see [`checkpoint`](crate::checkpoint)): each lane's
//! current segment collects pieces in every shard chunk its rows went to.
//! The first seal of a chunk holding a piece of the current segment closes
//! the segment: its `end` and its part count (the number of chunks holding
//! pieces) are fixed then, and every piece carries both in its
//! [`AckRange`]. Later rows of the lane open the next segment.
//!
//! Spans: a lane registered with its partition
//! ([`add_partition_lane`](ShardWriter::add_partition_lane)) gives every
//! chunk holding its rows a [`ChunkSpan`] (partition, first and last offset,
//! rows), from which a sink derives a deduplication token; a chunk with a
//! piece of a lane registered without one carries no spans at all.
//!
//! Exactly-once ([`exactly_once`](ShardWriter::exactly_once)): each lane
//! has its own open block instead of sharing the shards' open chunks, so a
//! chunk holds one partition's rows, cut where an earlier owner cut it
//! (see [`super::blocks`]).
//! Skipped messages (the error policy's `Skip`): [`skip`](ShardWriter::skip)
//! extends the lane's open segment over the offset without a row, so the
//! offset is acknowledged with the rows around it, in order. A segment
//! made only of skipped offsets has no chunk to ride in: at the next flush
//! (or one batch interval later) it goes out as a row-less [`Chunk`] on
//! the writer's skip shard, which the sink acknowledges without inserting anything.
//! (see [`super::blocks`]). On a sharded table a block is one segment of
//! one part per shard: rows go to the shard their key routes them to, or
//! (unkeyed, [`route_blocks`](ShardWriter::route_blocks)) the whole block
//! to the shard its partition and first offset pick.
//!
//! Row limit: fixed ([`BatchLimits::rows`]), or under
//! [`RowSizing::Auto`] set per shard from the rate its chunks filled at
//! (see [`super::sizing`]); the bytes and the age limits hold either way.
//!
//! Time: a chunk's age deadline is read from the writer's injected
//! [`Clock`] (the runtime's clock; a [`ManualClock`](crate::clock::ManualClock)
//! in tests), and [`tick`](ShardWriter::tick) is given the driver's reading
//! of the same clock.

use super::blocks::{block_shard, Before, BlockPlans, LaneBlock};
use super::sizing::{RateSizer, RowSizing};
use super::{Chunk, ChunkSpan, RowIndex, RowOrigin, ShardQueues};
use crate::checkpoint::{AckRange, PendingGate};
use crate::clock::{self, SharedClock};
use crate::error::ChainError;
use crate::record::{Offset, PartitionId};
use crate::source::LaneId;
use segments::{spans_of, LaneState, Piece, NO_PIECE};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Per-shard flush limits: whichever comes first.
#[derive(Clone, Copy, Debug)]
pub struct BatchLimits {
    /// Seal a chunk at this many rows.
    pub rows: u64,
    /// Seal a chunk at this many bytes.
    pub bytes: usize,
    /// Seal a non-empty chunk this long after its first row.
    pub interval: Duration,
    /// Random extra fraction of `interval` (0.0–1.0) per chunk.
    pub jitter: f64,
    /// Whether `rows` is the limit or the cap of a rate-sized limit
    /// (exactly-once blocks always use `rows`).
    pub sizing: RowSizing,
}

impl Default for BatchLimits {
    fn default() -> Self {
        Self {
            rows: 100_000,
            bytes: 16 << 20,
            interval: Duration::from_secs(1),
            jitter: 0.1,
            sizing: RowSizing::Fixed,
        }
    }
}

#[derive(Debug, Default)]
struct OpenChunk {
    data: Vec<u8>,
    rows: u64,
    deadline: Option<Instant>,
    /// When the first row was appended (the rate sizer's fill time).
    opened: Option<Instant>,
    pieces: Vec<Piece>,
    /// Per row: where it ends and which piece it belongs to.
    index: Vec<RowOrigin>,
    /// Per row, the original message (only while originals are kept).
    originals: Vec<super::Original>,
    /// The rows' Kafka timestamps.
    stamps: super::Stamps,
}

/// Batches encoded rows per shard and pushes sealed chunks.
#[derive(Debug)]
pub struct ShardWriter {
    queues: ShardQueues,
    limits: BatchLimits,
    open: Vec<OpenChunk>,
    /// Per shard: the row limit of its open chunk, and the rate it is set from.
    row_limit: Vec<u64>,
    sizers: Vec<RateSizer>,
    lanes: Vec<Option<LaneState>>,
    rng: u64,
    clock: SharedClock,
    /// Exactly-once: where replayed blocks are looked up.
    plans: Option<Arc<dyn BlockPlans>>,
    /// When the segments made only of skipped offsets go out.
    skip_deadline: Option<Instant>,
    /// The shard whose queue carries them.
    skip_shard: usize,
    /// Per shard: the schema version its chunks are tagged with
    /// ([`Chunk::schema`]); shards of several tables (a chain routing each
    /// message to its table) each follow their table's.
    schema: Vec<u64>,
    /// The Kafka timestamp of the message the next append is of
    /// ([`stamp_next`](Self::stamp_next)).
    stamp: Option<i64>,
    /// Exactly-once on an unkeyed table: each whole block goes to the
    /// shard [`block_shard`] picks from this slot table.
    block_slots: Option<Arc<[u16]>>,
}

impl ShardWriter {
    /// A writer pushing into `queues`, on the system clock.
    #[must_use]
    pub fn new(queues: ShardQueues, limits: BatchLimits, seed: u64) -> Self {
        let shards = queues.shards();
        Self {
            queues,
            limits,
            open: (0..shards).map(|_| OpenChunk::default()).collect(),
            row_limit: vec![limits.rows; shards],
            sizers: vec![RateSizer::default(); shards],
            lanes: Vec::new(),
            rng: seed | 1,
            clock: clock::system(),
            plans: None,
            skip_deadline: None,
            skip_shard: 0,
            schema: vec![0; shards],
            stamp: None,
            block_slots: None,
        }
    }

    /// The same writer cutting exactly-once blocks: one partition per
    /// chunk, replayed blocks at the offsets `plans` recorded. Lanes must
    /// be registered with their partition
    /// ([`add_partition_lane`](Self::add_partition_lane)).
    #[must_use]
    pub fn exactly_once(mut self, plans: Arc<dyn BlockPlans>) -> Self {
        self.plans = Some(plans);
        self
    }

    /// The message the next append is of carries Kafka timestamp `ts_ms`
    /// (`None`: no timestamp): its rows are stamped with it
    /// ([`Chunk::stamps`]), for the delivery latency.
    pub fn stamp_next(&mut self, ts_ms: Option<i64>) {
        self.stamp = ts_ms;
    }

    /// Tag the chunks opened from now on with schema `version`; the caller
    /// [`flush`](Self::flush)es first, so no chunk mixes two versions.
    pub fn set_schema(&mut self, version: u64) {
        self.schema.fill(version);
    }

    /// Tag the chunks of `shards` opened from now on with schema
    /// `version` (one table's shards, when the writer has several
    /// tables'); the caller [`flush`](Self::flush)es first.
    pub fn set_schema_of(&mut self, shards: &[u16], version: u64) {
        for &s in shards {
            self.schema[usize::from(s)] = version;
        }
    }

    /// Exactly-once on a table without a shard key: the shard a row is
    /// appended with is ignored, each whole block goes to the shard
    /// [`block_shard`] picks from `slots` for its partition and first
    /// offset (so a replay goes where the first attempt went).
    #[must_use]
    pub fn route_blocks(mut self, slots: Arc<[u16]>) -> Self {
        self.block_slots = Some(slots);
        self
    }

    /// The same writer reading chunk ages from `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The same writer sending the row-less chunks of skipped offsets to
    /// `shard` (one of its pipeline's shards: in a process of several
    /// pipelines, shard 0 may belong to another pipeline's sink).
    #[must_use]
    pub fn with_skip_shard(mut self, shard: usize) -> Self {
        self.skip_shard = shard;
        self
    }

    /// The queues this writer pushes into.
    #[must_use]
    pub fn queues(&self) -> &ShardQueues {
        &self.queues
    }

    /// Register a lane whose partition is not known; returns its slot.
    /// Chunks holding its rows carry no [`ChunkSpan`]s.
    pub fn add_lane(&mut self, id: LaneId, gate: Option<PendingGate>) -> usize {
        self.register(id, None, gate)
    }

    /// Register a lane reading `partition`; returns its slot.
    pub fn add_partition_lane(
        &mut self,
        id: LaneId,
        partition: PartitionId,
        gate: Option<PendingGate>,
    ) -> usize {
        self.register(id, Some(partition), gate)
    }

    fn register(
        &mut self,
        id: LaneId,
        partition: Option<PartitionId>,
        gate: Option<PendingGate>,
    ) -> usize {
        let state = LaneState {
            id,
            partition,
            gate,
            seq: 0,
            end: Offset(-1),
            piece: vec![NO_PIECE; self.open.len()],
            open_parts: 0,
            sealed: Vec::new(),
            fed: 0,
            block: (self.plans.is_some()).then(|| LaneBlock::new(self.open.len())),
            epoch: None,
            skipped: false,
            next: None,
        };
        if let Some(slot) = self.lanes.iter().position(Option::is_none) {
            self.lanes[slot] = Some(state);
            slot
        } else {
            self.lanes.push(Some(state));
            self.lanes.len() - 1
        }
    }

    /// Name the partition lane `slot` reads: sealed chunks then say which
    /// partition each row came from ([`Chunk::origin`]).
    pub fn set_partition(&mut self, slot: usize, partition: PartitionId) {
        if let Some(Some(l)) = self.lanes.get_mut(slot) {
            l.partition = Some(partition);
        }
    }

    /// Exactly-once: the lane in `slot` holds its partition since the
    /// assignment of generation `epoch`; set before its first row, which
    /// asks [`BlockPlans::replayed`] for the epoch its blocks carry.
    pub fn set_epoch(&mut self, slot: usize, epoch: u64) {
        if let Some(Some(l)) = self.lanes.get_mut(slot) {
            l.epoch = Some(epoch);
        }
    }

    /// Forget a lane. Call [`flush`](Self::flush) first if its rows must go
    /// out; pieces left in open chunks are still inserted, but their
    /// acknowledgements will be for a lane the checkpointer no longer knows.
    pub fn remove_lane(&mut self, slot: usize) {
        if let Some(l) = self.lanes.get_mut(slot) {
            // Exactly-once: an open block (a replay the flush left open)
            // is never sent; its rows are released and replay.
            if let Some(lane) = l.as_ref() {
                let open = lane.block.as_ref().map_or(0, |b| b.rows);
                if let (Some(g), true) = (&lane.gate, open > 0) {
                    g.released(open as i64);
                }
            }
            *l = None;
        }
    }

    /// Append one row for lane `slot` at `offset` to `shard`'s open chunk.
    /// `encode` writes the row into the buffer it is given, or fails
    /// leaving it unchanged (the error is passed through).
    pub fn append<E>(
        &mut self,
        slot: usize,
        shard: usize,
        offset: Offset,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<Result<(), E>, ChainError> {
        self.append_keeping(slot, shard, offset, None, |out| encode(out).map(|()| 1))
    }

    /// Exactly-once: whether lane `slot` has already written or skipped
    /// `offset` (the consumer delivered it again: a librdkafka re-fetch).
    /// In that mode an offset is its message's identity, as the replay of
    /// recorded blocks after a restart takes it, so the chain drops such a
    /// message instead of cutting a second block over it under another
    /// token. Always false for at-least-once, which writes it again and
    /// reports it (the Kafka lane's `redelivered`).
    #[must_use]
    pub fn written_before(&self, slot: usize, offset: Offset) -> bool {
        self.plans.is_some()
            && (self.lanes.get(slot).and_then(Option::as_ref))
                .and_then(|l| l.next)
                .is_some_and(|next| offset < next)
    }

    /// Whether lanes write exactly-once blocks, which take several rows
    /// per message ([`Encoded::Rows`](super::Encoded::Rows)).
    #[must_use]
    pub fn writes_blocks(&self) -> bool {
        self.plans.is_some()
    }

    /// [`append`](Self::append), keeping `original` with the row (under
    /// `--on-error dead-letter`, so a row the server rejects can become a
    /// dead letter of its message). `encode` returns how many rows it
    /// wrote: 1, or several for an exactly-once writer only.
    pub fn append_keeping<E>(
        &mut self,
        slot: usize,
        shard: usize,
        offset: Offset,
        original: Option<super::Original>,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<u32, E>,
    ) -> Result<Result<(), E>, ChainError> {
        if self.plans.is_some() {
            // Exactly-once blocks keep no originals: a row the server
            // rejects fails the pipeline (see docs/delivery.md, exactly-once).
            return self.append_block(slot, shard, offset, encode);
        }
        let chunk = &mut self.open[shard];
        let len = chunk.data.len();
        match encode(&mut chunk.data) {
            Ok(1) => {}
            Ok(_) => {
                // The index keeps one row per offset (a rejected row is
                // isolated by it): the chain stops before this.
                chunk.data.truncate(len);
                panic!("an at-least-once writer takes one row per message");
            }
            Err(e) => {
                chunk.data.truncate(len);
                return Ok(Err(e));
            }
        }
        chunk.rows += 1;
        if let Some(ts) = self.stamp {
            chunk.stamps.push(ts, 1);
        }
        if chunk.deadline.is_none() {
            let jitter = self
                .limits
                .interval
                .mul_f64(self.limits.jitter * unit(&mut self.rng));
            let now = self.clock.now();
            chunk.opened = Some(now);
            chunk.deadline = Some(now + self.limits.interval + jitter);
        }
        let lane = self.lanes[slot]
            .as_mut()
            .expect("append to a registered lane");
        lane.end = offset;
        lane.fed |= super::queue::shard_bit(shard);
        let piece = match lane.piece[shard] {
            NO_PIECE => chunk.pieces.len(),
            i => i,
        };
        chunk.index.push(RowOrigin {
            offset,
            end: chunk.data.len() as u32,
            range: piece as u32,
        });
        if let Some(o) = original {
            chunk.originals.push(o);
        }
        match lane.piece[shard] {
            NO_PIECE => {
                lane.piece[shard] = chunk.pieces.len();
                lane.open_parts += 1;
                chunk.pieces.push(Piece {
                    slot,
                    lane: lane.id,
                    seq: lane.seq,
                    start: offset,
                    last: offset,
                    partition: lane.partition.clone(),
                    rows: 1,
                });
            }
            i => {
                let piece = &mut chunk.pieces[i];
                piece.rows += 1;
                piece.last = offset;
            }
        }
        if let Some(g) = &lane.gate {
            g.dispatched(1);
        }
        // Row ends are u32 in the index: seal well before that overflows.
        if chunk.rows >= self.row_limit[shard]
            || chunk.data.len() >= self.limits.bytes
            || chunk.data.len() >= (u32::MAX / 2) as usize
        {
            let now = self.clock.now();
            self.seal_measured(shard, now)?;
        }
        Ok(Ok(()))
    }

    /// The message at `offset` of lane `slot` yields no row but is done
    /// with (the error policy skipped it): the lane's open segment covers
    /// it, so it is acknowledged once that segment is, never before the
    /// rows read ahead of it.
    ///
    /// Exactly-once: the lane's open block is sealed first, so the skip's
    /// row-less segment never takes a sequence number ahead of rows read
    /// before it (a replay skips the same offset and cuts the same block).
    pub fn skip(&mut self, slot: usize, offset: Offset) -> Result<(), ChainError> {
        if self.block(slot).is_some_and(|b| b.rows > 0) {
            self.seal_block(slot)?;
        }
        let lane = self.lanes[slot]
            .as_mut()
            .expect("skip on a registered lane");
        lane.end = offset;
        lane.next = lane.next.max(Some(Offset(offset.0 + 1)));
        if lane.open_parts == 0 && !lane.skipped {
            lane.skipped = true;
            if self.skip_deadline.is_none() {
                self.skip_deadline = Some(self.clock.now() + self.limits.interval);
            }
        }
        Ok(())
    }

    /// Seal chunks whose age limit passed.
    pub fn tick(&mut self, now: Instant) -> Result<(), ChainError> {
        for shard in 0..self.open.len() {
            if self.open[shard].deadline.is_some_and(|d| d <= now) {
                self.seal_measured(shard, now)?;
            }
        }
        for slot in 0..self.lanes.len() {
            if self.block(slot).is_some_and(|b| b.due(now)) {
                self.seal_block(slot)?;
            }
        }
        if self.skip_deadline.is_some_and(|d| d <= now) {
            self.seal_skipped()?;
        }
        Ok(())
    }

    /// Send the segments made only of skipped offsets, as one row-less
    /// chunk on the skip shard.
    fn seal_skipped(&mut self) -> Result<(), ChainError> {
        self.skip_deadline = None;
        let acks: Vec<AckRange> = self
            .lanes
            .iter_mut()
            .flatten()
            .filter_map(LaneState::close_skipped)
            .collect();
        if acks.is_empty() {
            return Ok(());
        }
        let shard = self.skip_shard;
        let out = Chunk {
            shard,
            rows: 0,
            data: Vec::new(),
            acks,
            ticket: None,
            spans: Box::default(),
            index: Box::default(),
            schema: self.schema[shard],
            stamps: super::Stamps::default(),
        };
        self.queues
            .push(out)
            .map_err(|_| ChainError::QueueClosed { shard })
    }

    /// Seal every non-empty chunk now.
    pub fn flush(&mut self) -> Result<(), ChainError> {
        for shard in 0..self.open.len() {
            if self.open[shard].rows > 0 {
                self.seal(shard)?;
            }
        }
        // A replay is never sealed short (see `super::blocks`).
        for slot in 0..self.lanes.len() {
            if self
                .block(slot)
                .is_some_and(|b| b.rows > 0 && !b.partial_replay())
            {
                self.seal_block(slot)?;
            }
        }
        if self.skip_deadline.is_some() {
            self.seal_skipped()?;
        }
        Ok(())
    }

    /// The shards (a [`shard_bit`](super::queue::shard_bit) mask) lane
    /// `slot` appended rows to since the last call; resets the mask.
    pub fn take_fed(&mut self, slot: usize) -> u64 {
        self.lanes
            .get_mut(slot)
            .and_then(Option::as_mut)
            .map_or(0, |l| std::mem::take(&mut l.fed))
    }

    /// Rows sitting in open chunks.
    #[must_use]
    pub fn open_rows(&self) -> u64 {
        let blocks: u64 = (self.lanes.iter().flatten())
            .filter_map(|l| l.block.as_ref())
            .map(|b| b.rows)
            .sum();
        self.open.iter().map(|c| c.rows).sum::<u64>() + blocks
    }

    /// Whether a lane's open block is a replay that is not complete yet
    /// (exactly-once): it cannot be sealed short, so a schema switch waits
    /// for it.
    pub fn replay_open(&self) -> bool {
        self.plans.is_some()
            && (0..self.lanes.len()).any(|s| self.block(s).is_some_and(LaneBlock::partial_replay))
    }

    /// Lane `slot`'s pending count, if it was registered with one.
    #[must_use]
    pub fn gate(&self, slot: usize) -> Option<&PendingGate> {
        self.lanes.get(slot)?.as_ref()?.gate.as_ref()
    }

    fn block(&self, slot: usize) -> Option<&LaneBlock> {
        self.lanes.get(slot)?.as_ref()?.block.as_ref()
    }

    /// Exactly-once [`append`](Self::append): into the lane's own block.
    fn append_block<E>(
        &mut self,
        slot: usize,
        shard: usize,
        offset: Offset,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<u32, E>,
    ) -> Result<Result<(), E>, ChainError> {
        if self.block(slot).is_some_and(LaneBlock::needs_plan) {
            self.read_plan(slot, offset)?;
        }
        let before = match self.lanes[slot].as_mut().and_then(|l| l.block.as_mut()) {
            Some(b) => b.before(offset),
            None => panic!("exactly-once append to a registered lane"),
        };
        if before == Before::SealFirst {
            self.seal_block(slot)?;
        }
        let Self {
            lanes,
            limits,
            clock,
            rng,
            block_slots,
            stamp,
            ..
        } = self;
        let lane = lanes[slot].as_mut().expect("registered lane");
        let block = lane.block.as_mut().expect("exactly-once lane");
        let shard = match (block_slots, &lane.partition) {
            (Some(slots), Some(p)) => {
                let first = if block.rows == 0 { offset } else { block.first };
                block_shard(slots, p, first)
            }
            _ => shard,
        };
        let buffer = block.buffer(shard);
        let len = buffer.len();
        let rows = match encode(buffer) {
            Ok(rows) => rows,
            Err(e) => {
                buffer.truncate(len);
                return Ok(Err(e));
            }
        };
        if let Some(ts) = *stamp {
            block.stamp(shard, ts, rows);
        }
        block.appended(offset, shard, len, u64::from(rows), || {
            let jitter = limits.interval.mul_f64(limits.jitter * unit(rng));
            clock.now() + limits.interval + jitter
        });
        let full = block.rows >= limits.rows || block.bytes >= limits.bytes;
        let complete = block.complete(full);
        lane.next = lane.next.max(Some(Offset(offset.0 + 1)));
        lane.fed |= super::queue::shard_bit(shard);
        if let Some(g) = &lane.gate {
            // Acknowledgements release the rows of the parts, each row.
            g.dispatched(i64::from(rows));
        }
        if complete {
            self.seal_block(slot)?;
        }
        Ok(Ok(()))
    }

    /// Read the recorded blocks of lane `slot`'s partition at or past its
    /// first offset.
    fn read_plan(&mut self, slot: usize, from: Offset) -> Result<(), ChainError> {
        let plans = self.plans.clone().expect("exactly-once writer");
        let lane = self.lanes[slot].as_mut().expect("registered lane");
        let Some(partition) = lane.partition.clone() else {
            return Err(ChainError::BlockPlan {
                partition: format!("{:?}", lane.id),
                reason: "the lane was registered without its partition".into(),
            });
        };
        let replay = plans
            .replayed(&partition, from, lane.epoch)
            .map_err(|reason| ChainError::BlockPlan {
                partition: partition.to_string(),
                reason,
            })?;
        // The generation becomes this owner's own epoch (see
        // `BlockPlans::replayed`): every block of the lane carries it.
        lane.epoch = replay.epoch;
        let blocks = replay.blocks;
        let block = lane.block.as_mut().expect("exactly-once lane");
        let recorded = blocks.len();
        let skipped = block.set_plan(from, blocks);
        if !skipped.is_empty() {
            tracing::warn!(%partition, ?skipped, "exactly-once: recorded blocks that straddle the committed offset or overlap are not replayed");
        }
        if recorded > 0 {
            tracing::info!(%partition, from = from.0, recorded, "exactly-once: replaying recorded blocks at their offsets");
        }
        Ok(())
    }

    /// Seal lane `slot`'s open block into one segment with a part (a
    /// chunk) per shard its rows went to, each part acknowledged on its own.
    fn seal_block(&mut self, slot: usize) -> Result<(), ChainError> {
        let Some(lane) = self.lanes.get_mut(slot).and_then(Option::as_mut) else {
            return Ok(());
        };
        let Some(block) = lane.block.as_mut().filter(|b| b.rows > 0) else {
            return Ok(());
        };
        let (first, last) = (block.first, block.last);
        let parts = block.take();
        // Offsets skipped before this block's rows, whose row-less segment
        // is still open (its deadline has not passed): they take their
        // sequence number first, or the block's range would be ahead of
        // them and the watermark would wait for it forever.
        if let Some(skipped) = lane.close_skipped() {
            let shard = self.skip_shard;
            self.queues
                .push(Chunk {
                    shard,
                    rows: 0,
                    data: Vec::new(),
                    acks: vec![skipped],
                    ticket: None,
                    spans: Box::default(),
                    index: Box::default(),
                    schema: self.schema[shard],
                    stamps: super::Stamps::default(),
                })
                .map_err(|_| ChainError::QueueClosed { shard })?;
        }
        let seq = lane.seq;
        lane.seq += 1;
        let count = parts.len() as u32;
        for (shard, data, rows, stamps) in parts {
            let spans: Vec<ChunkSpan> = (lane.partition.clone())
                .map(|partition| ChunkSpan {
                    partition,
                    first,
                    last,
                    rows,
                    epoch: lane.epoch,
                })
                .into_iter()
                .collect();
            let chunk = Chunk {
                shard,
                rows,
                data,
                acks: vec![AckRange {
                    lane: lane.id,
                    seq,
                    parts: count,
                    part: shard as u32,
                    start: first,
                    end: last,
                    rows,
                }],
                spans: spans.into(),
                ticket: None,
                index: Box::default(),
                schema: self.schema[shard],
                stamps,
            };
            self.queues
                .push(chunk)
                .map_err(|_| ChainError::QueueClosed { shard })?;
        }
        Ok(())
    }

    /// The row limit of `shard`'s open chunk (fixed, or set from the rate
    /// its last chunks filled at).
    #[must_use]
    pub fn row_limit(&self, shard: usize) -> u64 {
        self.row_limit[shard]
    }

    /// Seal `shard`'s chunk at a limit (rows, bytes, age) at `now`: its
    /// fill time measures the rate the next chunk's row limit is set from.
    /// A flush's seals are not measured (see [`RateSizer::observe`]).
    fn seal_measured(&mut self, shard: usize, now: Instant) -> Result<(), ChainError> {
        if let RowSizing::Auto { .. } = self.limits.sizing {
            let chunk = &self.open[shard];
            if let Some(opened) = chunk.opened {
                let sizer = &mut self.sizers[shard];
                sizer.observe(chunk.rows, now.saturating_duration_since(opened));
                self.row_limit[shard] = sizer.rows(self.limits.sizing, self.limits.rows);
            }
        }
        self.seal(shard)
    }

    fn seal(&mut self, shard: usize) -> Result<(), ChainError> {
        let capacity = self.open[shard].data.capacity();
        let chunk = std::mem::take(&mut self.open[shard]);
        if let Some(spare) = self.queues.spare(shard) {
            // An inserted chunk's buffers: resident already.
            self.open[shard].data = spare.data;
            self.open[shard].index = spare.rows;
            self.open[shard].stamps = spare.stamps;
        } else {
            // Keep the next buffer about the size of the last one, so the
            // steady state does not re-grow it row by row.
            self.open[shard].data = Vec::with_capacity(capacity.min(self.limits.bytes + (1 << 16)));
            // The row index the same way: its capacity, not its length, or
            // a chunk one row longer than the last regrows it.
            self.open[shard].index = Vec::with_capacity(chunk.index.capacity());
            self.open[shard].stamps = super::Stamps::with_capacity(chunk.stamps.runs());
        }
        let mut acks = Vec::with_capacity(chunk.pieces.len());
        let mut partitions = Vec::with_capacity(chunk.pieces.len());
        for piece in &chunk.pieces {
            let lane = self.lanes.get_mut(piece.slot).and_then(Option::as_mut);
            let partition = lane
                .as_ref()
                .filter(|l| l.id == piece.lane)
                .and_then(|l| l.partition.clone());
            partitions.push(partition);
            let range = match lane {
                Some(lane) if lane.id == piece.lane => lane.seal_piece(piece, shard),
                // The lane was removed without a flush: acknowledge as a
                // one-part segment of a lane the checkpointer ignores.
                _ => AckRange {
                    lane: piece.lane,
                    seq: piece.seq,
                    parts: 1,
                    part: shard as u32,
                    start: piece.start,
                    end: piece.start,
                    rows: piece.rows,
                },
            };
            acks.push(range);
        }
        let out = Chunk {
            shard,
            rows: chunk.rows,
            data: chunk.data,
            acks,
            spans: spans_of(&chunk.pieces).into(),
            ticket: None,
            index: Box::new(RowIndex {
                rows: chunk.index,
                partitions,
                originals: chunk.originals,
            }),
            schema: self.schema[shard],
            stamps: chunk.stamps,
        };
        self.queues
            .push(out)
            .map_err(|_| ChainError::QueueClosed { shard })
    }
}

/// xorshift64*: a tiny PRNG for flush jitter, in [0, 1).
fn unit(state: &mut u64) -> f64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
}

#[path = "writer_segments.rs"]
mod segments;

#[cfg(all(test, not(loom)))]
#[path = "writer_tests.rs"]
mod tests;
