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
//! Time: a chunk's age deadline is read from the writer's injected
//! [`Clock`] (the runtime's clock; a [`ManualClock`](crate::clock::ManualClock)
//! in tests), and [`tick`](ShardWriter::tick) is given the driver's reading
//! of the same clock.

use super::{Chunk, ShardQueues};
use crate::checkpoint::{AckRange, PendingGate};
use crate::clock::{self, SharedClock};
use crate::error::ChainError;
use crate::record::Offset;
use crate::source::LaneId;
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
}

impl Default for BatchLimits {
    fn default() -> Self {
        Self {
            rows: 100_000,
            bytes: 16 << 20,
            interval: Duration::from_secs(1),
            jitter: 0.1,
        }
    }
}

const NO_PIECE: usize = usize::MAX;

#[derive(Debug)]
struct Piece {
    slot: usize,
    lane: LaneId,
    seq: u64,
    start: Offset,
    rows: u64,
}

#[derive(Debug, Default)]
struct OpenChunk {
    data: Vec<u8>,
    rows: u64,
    deadline: Option<Instant>,
    pieces: Vec<Piece>,
}

#[derive(Debug)]
struct SealedSegment {
    seq: u64,
    end: Offset,
    parts: u32,
    remaining: u32,
}

#[derive(Debug)]
struct LaneState {
    id: LaneId,
    gate: Option<PendingGate>,
    /// The open segment's number.
    seq: u64,
    /// Last offset appended to the open segment.
    end: Offset,
    /// Per shard: index of this lane's piece of the open segment in that
    /// shard's open chunk, or `NO_PIECE`.
    piece: Vec<usize>,
    /// Chunks holding pieces of the open segment.
    open_parts: u32,
    /// Closed segments with pieces still sitting in open chunks.
    sealed: Vec<SealedSegment>,
    /// Shards this lane appended rows to since [`ShardWriter::take_fed`].
    fed: u64,
}

/// Batches encoded rows per shard and pushes sealed chunks.
#[derive(Debug)]
pub struct ShardWriter {
    queues: ShardQueues,
    limits: BatchLimits,
    open: Vec<OpenChunk>,
    lanes: Vec<Option<LaneState>>,
    rng: u64,
    clock: SharedClock,
    /// Schema version the chunks are tagged with ([`Chunk::schema`]).
    schema: u64,
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
            lanes: Vec::new(),
            rng: seed | 1,
            clock: clock::system(),
            schema: 0,
        }
    }

    /// Tag the chunks opened from now on with schema `version`; the caller
    /// [`flush`](Self::flush)es first, so no chunk mixes two versions.
    pub fn set_schema(&mut self, version: u64) {
        self.schema = version;
    }

    /// The same writer reading chunk ages from `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The queues this writer pushes into.
    #[must_use]
    pub fn queues(&self) -> &ShardQueues {
        &self.queues
    }

    /// Register a lane; returns its slot.
    pub fn add_lane(&mut self, id: LaneId, gate: Option<PendingGate>) -> usize {
        let state = LaneState {
            id,
            gate,
            seq: 0,
            end: Offset(-1),
            piece: vec![NO_PIECE; self.open.len()],
            open_parts: 0,
            sealed: Vec::new(),
            fed: 0,
        };
        if let Some(slot) = self.lanes.iter().position(Option::is_none) {
            self.lanes[slot] = Some(state);
            slot
        } else {
            self.lanes.push(Some(state));
            self.lanes.len() - 1
        }
    }

    /// Forget a lane. Call [`flush`](Self::flush) first if its rows must go
    /// out; pieces left in open chunks are still inserted, but their
    /// acknowledgements will be for a lane the checkpointer no longer knows.
    pub fn remove_lane(&mut self, slot: usize) {
        if let Some(l) = self.lanes.get_mut(slot) {
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
        let chunk = &mut self.open[shard];
        if let Err(e) = encode(&mut chunk.data) {
            return Ok(Err(e));
        }
        chunk.rows += 1;
        if chunk.deadline.is_none() {
            let jitter = self
                .limits
                .interval
                .mul_f64(self.limits.jitter * unit(&mut self.rng));
            chunk.deadline = Some(self.clock.now() + self.limits.interval + jitter);
        }
        let lane = self.lanes[slot]
            .as_mut()
            .expect("append to a registered lane");
        lane.end = offset;
        lane.fed |= super::queue::shard_bit(shard);
        match lane.piece[shard] {
            NO_PIECE => {
                lane.piece[shard] = chunk.pieces.len();
                lane.open_parts += 1;
                chunk.pieces.push(Piece {
                    slot,
                    lane: lane.id,
                    seq: lane.seq,
                    start: offset,
                    rows: 1,
                });
            }
            i => chunk.pieces[i].rows += 1,
        }
        if let Some(g) = &lane.gate {
            g.dispatched(1);
        }
        if chunk.rows >= self.limits.rows || chunk.data.len() >= self.limits.bytes {
            self.seal(shard)?;
        }
        Ok(Ok(()))
    }

    /// Seal chunks whose age limit passed.
    pub fn tick(&mut self, now: Instant) -> Result<(), ChainError> {
        for shard in 0..self.open.len() {
            if self.open[shard].deadline.is_some_and(|d| d <= now) {
                self.seal(shard)?;
            }
        }
        Ok(())
    }

    /// Seal every non-empty chunk now.
    pub fn flush(&mut self) -> Result<(), ChainError> {
        for shard in 0..self.open.len() {
            if self.open[shard].rows > 0 {
                self.seal(shard)?;
            }
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
        self.open.iter().map(|c| c.rows).sum()
    }

    fn seal(&mut self, shard: usize) -> Result<(), ChainError> {
        let capacity = self.open[shard].data.capacity();
        let chunk = std::mem::take(&mut self.open[shard]);
        // Keep the next buffer about the size of the last one, so the
        // steady state does not re-grow it row by row.
        self.open[shard].data = Vec::with_capacity(capacity.min(self.limits.bytes + (1 << 16)));
        let mut acks = Vec::with_capacity(chunk.pieces.len());
        for piece in &chunk.pieces {
            let lane = self.lanes.get_mut(piece.slot).and_then(Option::as_mut);
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
            ticket: None,
            schema: self.schema,
        };
        self.queues
            .push(out)
            .map_err(|_| ChainError::QueueClosed { shard })
    }
}

impl LaneState {
    fn seal_piece(&mut self, piece: &Piece, shard: usize) -> AckRange {
        if piece.seq == self.seq {
            // First seal touching the open segment: close it.
            let parts = self.open_parts.max(1);
            if parts > 1 {
                self.sealed.push(SealedSegment {
                    seq: self.seq,
                    end: self.end,
                    parts,
                    remaining: parts - 1,
                });
            }
            let range = AckRange {
                lane: self.id,
                seq: self.seq,
                parts,
                part: shard as u32,
                start: piece.start,
                end: self.end,
                rows: piece.rows,
            };
            self.seq += 1;
            self.open_parts = 0;
            self.piece.iter_mut().for_each(|p| *p = NO_PIECE);
            range
        } else {
            let idx = self
                .sealed
                .iter()
                .position(|s| s.seq == piece.seq)
                .expect("piece of a closed segment has its record");
            let s = &mut self.sealed[idx];
            let range = AckRange {
                lane: self.id,
                seq: s.seq,
                parts: s.parts,
                part: shard as u32,
                start: piece.start,
                end: s.end,
                rows: piece.rows,
            };
            s.remaining -= 1;
            if s.remaining == 0 {
                self.sealed.swap_remove(idx);
            }
            range
        }
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::checkpoint::Checkpointer;
    use crate::clock::{Clock, ManualClock};
    use crate::record::{PartitionId, Watermark};

    fn limits(rows: u64) -> BatchLimits {
        BatchLimits {
            rows,
            bytes: 1 << 20,
            interval: Duration::from_secs(3600),
            jitter: 0.0,
        }
    }

    fn row(out: &mut Vec<u8>) -> Result<(), ()> {
        out.push(7);
        Ok(())
    }

    #[test]
    fn seals_at_row_limit_and_tiles_segments() {
        let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
        let mut w = ShardWriter::new(q, limits(3), 1);
        let gate = PendingGate::new(100);
        let slot = w.add_lane(LaneId(9), Some(gate.clone()));
        for off in [10, 11, 13, 14] {
            w.append(slot, 0, Offset(off), row).unwrap().unwrap();
        }
        let c = rx[0].try_recv().expect("sealed at 3 rows");
        assert_eq!(c.rows, 3);
        assert_eq!(c.data, vec![7, 7, 7]);
        assert_eq!(
            c.acks,
            vec![AckRange {
                lane: LaneId(9),
                seq: 0,
                parts: 1,
                part: 0,
                start: Offset(10),
                end: Offset(13),
                rows: 3
            }]
        );
        assert_eq!(gate.pending(), 4);
        w.flush().unwrap();
        let c = rx[0].try_recv().unwrap();
        assert_eq!(c.acks[0].seq, 1);
        assert_eq!(c.acks[0].end, Offset(14));
    }

    #[test]
    fn failed_encode_leaves_nothing_behind() {
        let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
        let mut w = ShardWriter::new(q, limits(10), 1);
        let slot = w.add_lane(LaneId(1), None);
        w.append(slot, 0, Offset(0), row).unwrap().unwrap();
        let r = w
            .append(slot, 0, Offset(1), |_out: &mut Vec<u8>| Err("bad"))
            .unwrap();
        assert_eq!(r, Err("bad"));
        w.flush().unwrap();
        let c = rx[0].try_recv().unwrap();
        assert_eq!(c.rows, 1);
        assert_eq!(c.acks[0].end, Offset(0), "the bad offset is not covered");
    }

    #[test]
    fn age_limit_seals_idle_tail() {
        let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
        let mut l = limits(1000);
        l.interval = Duration::from_millis(100);
        let clock = ManualClock::new();
        let mut w = ShardWriter::new(q, l, 1).with_clock(clock.clone());
        let slot = w.add_lane(LaneId(1), None);
        w.append(slot, 0, Offset(0), row).unwrap().unwrap();
        w.tick(clock.now()).unwrap();
        assert!(rx[0].try_recv().is_none(), "not yet due");
        clock.advance(Duration::from_millis(99));
        w.tick(clock.now()).unwrap();
        assert!(rx[0].try_recv().is_none(), "still not due 1 ms early");
        clock.advance(Duration::from_millis(1));
        w.tick(clock.now()).unwrap();
        assert_eq!(rx[0].try_recv().unwrap().rows, 1);
    }

    /// The jitter stretches a chunk's age limit by at most `jitter` of the
    /// interval, and the clock the writer was given decides.
    #[test]
    fn jittered_age_limit_stays_within_its_fraction() {
        let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
        let mut l = limits(1000);
        l.interval = Duration::from_millis(100);
        l.jitter = 0.5;
        let clock = ManualClock::new();
        let mut w = ShardWriter::new(q, l, 7).with_clock(clock.clone());
        let slot = w.add_lane(LaneId(1), None);
        w.append(slot, 0, Offset(0), row).unwrap().unwrap();
        clock.advance(Duration::from_millis(99));
        w.tick(clock.now()).unwrap();
        assert!(rx[0].try_recv().is_none(), "due before its interval");
        clock.advance(Duration::from_millis(51));
        w.tick(clock.now()).unwrap();
        assert_eq!(rx[0].try_recv().unwrap().rows, 1, "past interval + jitter");
    }

    /// Rows of one lane spread over two shards: the watermark moves only
    /// once both shards' chunks holding the segment are acknowledged.
    #[test]
    fn multi_shard_segment_needs_every_shard() {
        let (q, mut rx) = ShardQueues::new(2, 1 << 20, 1 << 19);
        let mut w = ShardWriter::new(q, limits(2), 1);
        let mut cp = Checkpointer::new();
        let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
        let slot = w.add_lane(LaneId(1), Some(gate));
        w.append(slot, 0, Offset(0), row).unwrap().unwrap(); // shard 0
        w.append(slot, 1, Offset(1), row).unwrap().unwrap(); // shard 1
        w.append(slot, 0, Offset(2), row).unwrap().unwrap(); // shard 0 seals: segment 0 = [0..=2], 2 parts
        w.append(slot, 1, Offset(3), row).unwrap().unwrap(); // shard 1 seals: piece of seg 0 + seg 1 = [3]
        let c0 = rx[0].try_recv().unwrap();
        let c1 = rx[1].try_recv().unwrap();
        assert_eq!(
            c0.acks,
            vec![AckRange {
                lane: LaneId(1),
                seq: 0,
                parts: 2,
                part: 0,
                start: Offset(0),
                end: Offset(2),
                rows: 2
            }]
        );
        assert_eq!(c1.acks.len(), 2);
        for r in &c0.acks {
            cp.ack(r);
        }
        assert_eq!(
            cp.watermark(LaneId(1)),
            None,
            "shard 1 still holds part of segment 0"
        );
        for r in &c1.acks {
            cp.ack(r);
        }
        assert_eq!(cp.watermark(LaneId(1)), Some(Watermark(4)));
        assert_eq!(cp.total_pending_rows(), 0);
    }
}
