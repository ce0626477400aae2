//! Exactly-once block cutting: the per-lane open block of a
//! [`ShardWriter`](super::ShardWriter) in exactly-once mode.
//!
//! In this mode a chunk holds the rows of one partition only, from one
//! lane, and is one segment of that lane (`parts = 1`). Blocks are cut
//! freely (the ordinary row, byte and age limits) except where an earlier
//! owner of the partition already cut one: the sink records every block's
//! `(partition, first..=last offset, shard)` (an *intent*) before it
//! inserts it, and the writer, when a lane delivers its first row (the
//! committed offset), asks [`BlockPlans::replayed`] for the intents at or
//! past it. A replayed block is cut at exactly its recorded offsets,
//! whatever the limits say, so its insert carries the same deduplication
//! token (or, on 18.16's `ReplicatedMergeTree`, the same bytes) as the
//! earlier owner's and ClickHouse drops it if it landed before. A free
//! block is sealed before it would reach into a replayed one.
//!
//! A replayed block that is still incomplete when the chain is flushed
//! (revocation, shutdown) is dropped, never sealed short: a short block
//! would carry another token while overlapping the recorded one. Its rows
//! were never sent, are released from the pending gate, and are never
//! acknowledged, so they replay.
//!
//! Only the driver thread that owns the writer touches this state; the
//! lookup is a blocking call into the sink, once per lane assignment.

use crate::record::{Offset, PartitionId};
use std::collections::VecDeque;
use std::time::Instant;

/// Where the writer learns the blocks earlier owners cut (the sink's
/// intent records).
pub trait BlockPlans: Send + Sync + std::fmt::Debug {
    /// The recorded blocks of `partition` whose last offset is at or past
    /// `from`, and the epoch this owner's blocks carry.
    ///
    /// `generation` orders this assignment of the partition among its
    /// owners (the consumer group generation it was assigned in; `None`
    /// when the source has no such order). It is not unique to one owner:
    /// a static group member (`group.instance.id`) restarted within its
    /// session timeout rejoins with the generation it had. So the sink
    /// derives the owner's *epoch* from it, unique to this assignment in
    /// this process and above every earlier owner's, fences the partition
    /// at that epoch before it reads, and returns it: the writer stamps it
    /// on every block of the lane ([`ChunkSpan::epoch`](super::ChunkSpan::epoch)),
    /// so an older owner's (or incarnation's) later blocks are refused.
    fn replayed(
        &self,
        partition: &PartitionId,
        from: Offset,
        generation: Option<u64>,
    ) -> Result<Replay, String>;
}

/// What [`BlockPlans::replayed`] tells a new owner of a partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// The recorded blocks `(first, last)`, in any order.
    pub blocks: Vec<(Offset, Offset)>,
    /// The epoch of this owner's blocks (`None`: not fenced).
    pub epoch: Option<u64>,
}

/// One shard's part of an open block: its rows, in offset order.
#[derive(Debug, Default)]
pub(super) struct BlockPart {
    pub(super) data: Vec<u8>,
    pub(super) rows: u64,
    pub(super) stamps: super::Stamps,
}

/// The open block of one lane, and the replayed blocks still ahead of it.
///
/// A block is one offset range of one partition; on a sharded table it is
/// split into one part per shard its rows go to. Every part is a function
/// of the range alone (rows routed by their shard key hash, or the whole
/// block to one shard chosen from the partition and first offset, see
/// [`block_shard`]), so a replay of the range rebuilds the same parts.
#[derive(Debug)]
pub(super) struct LaneBlock {
    /// Per shard (indexed by shard).
    pub(super) parts: Vec<BlockPart>,
    /// Rows over all parts.
    pub(super) rows: u64,
    /// Bytes over all parts.
    pub(super) bytes: usize,
    pub(super) first: Offset,
    pub(super) last: Offset,
    /// Seal by age (free blocks only).
    pub(super) deadline: Option<Instant>,
    /// The open block is the replay of this recorded block.
    planned: Option<(Offset, Offset)>,
    /// Recorded blocks ahead, in offset order, not overlapping.
    plan: VecDeque<(Offset, Offset)>,
    looked_up: bool,
}

impl Default for LaneBlock {
    fn default() -> Self {
        Self::new(1)
    }
}

impl LaneBlock {
    /// An empty block for a table of `shards` shards.
    pub(super) fn new(shards: usize) -> Self {
        LaneBlock {
            parts: (0..shards.max(1)).map(|_| BlockPart::default()).collect(),
            rows: 0,
            bytes: 0,
            first: Offset(-1),
            last: Offset(-1),
            deadline: None,
            planned: None,
            plan: VecDeque::new(),
            looked_up: false,
        }
    }

    /// The buffer the row at the block's next position on `shard` is
    /// encoded into.
    pub(super) fn buffer(&mut self, shard: usize) -> &mut Vec<u8> {
        &mut self.parts[shard].data
    }

    /// `rows` rows of a message stamped `ts_ms` went to `shard`'s part.
    pub(super) fn stamp(&mut self, shard: usize, ts_ms: i64, rows: u32) {
        self.parts[shard].stamps.push(ts_ms, rows);
    }
}

/// The shard a whole block of an unkeyed table goes to: a slot of `slots`
/// chosen by a stable hash (FNV-1a 64, never a per-process hasher) of the
/// partition and the block's first offset, so every owner sends the
/// replay of a block to the shard the first attempt went to (the slot
/// table, i.e. shard count and weights, must not change in between).
#[must_use]
pub fn block_shard(slots: &[u16], partition: &PartitionId, first: Offset) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let (p, f) = (partition.partition.to_le_bytes(), first.0.to_le_bytes());
    let bytes = (partition.topic.as_bytes().iter())
        .chain(&[0u8])
        .chain(&p)
        .chain(&f);
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // FNV's low bits are weak (the modulus below reads them): mix them
    // with the high ones (the SplitMix64 finalizer).
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    slots
        .get((h % slots.len().max(1) as u64) as usize)
        .map_or(0, |&s| usize::from(s))
}

/// What to do before appending a row.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Before {
    /// Append to the open block.
    Append,
    /// Seal the open (free) block first: the row starts a replayed block.
    SealFirst,
}

impl LaneBlock {
    /// Whether the lane still has to read its plan (before its first row).
    pub(super) fn needs_plan(&self) -> bool {
        !self.looked_up
    }

    /// Take the recorded blocks at or past `from` (the lane's first
    /// offset). Blocks that start before it straddle the committed offset,
    /// which a committed block boundary rules out, and overlapping ones
    /// cannot both be replayed: both are skipped, and returned for a log.
    pub(super) fn set_plan(
        &mut self,
        from: Offset,
        mut blocks: Vec<(Offset, Offset)>,
    ) -> Vec<(Offset, Offset)> {
        self.looked_up = true;
        blocks.sort_unstable();
        blocks.dedup();
        let mut skipped = Vec::new();
        let mut next = from;
        for (first, last) in blocks {
            if first < next || last < first {
                skipped.push((first, last));
                continue;
            }
            self.plan.push_back((first, last));
            next = Offset(last.0 + 1);
        }
        skipped
    }

    /// Called before appending the row at `offset`.
    pub(super) fn before(&mut self, offset: Offset) -> Before {
        if let Some((_, last)) = self.planned {
            // The open replay's remaining offsets are gone (compacted):
            // it is complete as the topic holds it. Its entry stays at the
            // front for `take` to pop (forgetting it here made `take` pop
            // the next recorded block instead).
            return if offset > last {
                Before::SealFirst
            } else {
                Before::Append
            };
        }
        // A free block ends before a recorded block's range, even one
        // whose every offset is gone.
        if self.rows > 0 && self.plan.front().is_some_and(|&(first, _)| offset >= first) {
            return Before::SealFirst;
        }
        self.skip_passed(offset);
        Before::Append
    }

    /// Forget the recorded blocks that end before `offset` (none of their
    /// offsets is left to read). Never while a replay is open: its entry
    /// is the front one until [`take`](Self::take).
    fn skip_passed(&mut self, offset: Offset) {
        while self.plan.front().is_some_and(|&(_, last)| last < offset) {
            self.plan.pop_front();
        }
    }

    /// Record `rows` rows of the message at `offset` appended to
    /// `shard`'s part ([`buffer`](Self::buffer)), `len` bytes before the
    /// append; `deadline` is the age limit a free block gets at its first
    /// row.
    pub(super) fn appended(
        &mut self,
        offset: Offset,
        shard: usize,
        len: usize,
        rows: u64,
        deadline: impl FnOnce() -> Instant,
    ) {
        let part = &mut self.parts[shard];
        part.rows += rows;
        self.bytes += part.data.len().saturating_sub(len);
        if self.rows == 0 {
            self.first = offset;
            self.skip_passed(offset);
            self.planned = self
                .plan
                .front()
                .copied()
                .filter(|&(first, _)| offset >= first);
            if self.planned.is_none() {
                self.deadline = Some(deadline());
            }
        }
        self.rows += rows;
        self.last = offset;
    }

    /// Whether the open block is complete: a replayed block at its recorded
    /// last offset, a free block at a limit (`full`) or before the next
    /// replayed block's start.
    pub(super) fn complete(&self, full: bool) -> bool {
        match self.planned {
            Some((_, last)) => self.last >= last,
            None => {
                full || self
                    .plan
                    .front()
                    .is_some_and(|&(first, _)| self.last.0 + 1 >= first.0)
            }
        }
    }

    /// Whether the age limit of a free block passed.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.planned.is_none() && self.rows > 0 && self.deadline.is_some_and(|d| d <= now)
    }

    /// Whether the open block is a replay that is not complete yet.
    pub(super) fn partial_replay(&self) -> bool {
        self.rows > 0 && self.planned.is_some_and(|(_, last)| self.last < last)
    }

    /// Take the open block's non-empty parts `(shard, data, rows,
    /// stamps)` in shard order and reset it (the plan stays).
    pub(super) fn take(&mut self) -> Vec<(usize, Vec<u8>, u64, super::Stamps)> {
        if self.planned.is_some() {
            self.plan.pop_front();
        }
        self.planned = None;
        self.deadline = None;
        self.rows = 0;
        self.bytes = 0;
        (self.parts.iter_mut().enumerate())
            .filter(|(_, p)| p.rows > 0)
            .map(|(shard, p)| {
                (
                    shard,
                    std::mem::take(&mut p.data),
                    std::mem::take(&mut p.rows),
                    std::mem::take(&mut p.stamps),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(n: i64) -> Offset {
        Offset(n)
    }

    #[test]
    fn plan_skips_straddling_and_overlapping_blocks() {
        let mut b = LaneBlock::default();
        let skipped = b.set_plan(
            o(10),
            vec![
                (o(20), o(29)),
                (o(5), o(14)),
                (o(10), o(19)),
                (o(25), o(40)),
            ],
        );
        assert_eq!(skipped, vec![(o(5), o(14)), (o(25), o(40))]);
        assert_eq!(
            Vec::from(b.plan.clone()),
            vec![(o(10), o(19)), (o(20), o(29))]
        );
        assert!(!b.needs_plan());
    }

    #[test]
    fn a_replayed_block_ends_exactly_at_its_last_offset() {
        let now = Instant::now();
        let mut b = LaneBlock::default();
        b.set_plan(o(0), vec![(o(0), o(2)), (o(5), o(6))]);
        for off in 0..=2 {
            assert_eq!(b.before(o(off)), Before::Append);
            b.appended(o(off), 0, 0, 1, || now);
            assert_eq!(b.complete(true), off == 2, "offset {off}");
        }
        assert!(!b.due(now), "a replay ignores the age limit");
        b.take();
        // A free block between the replays ends before the next one.
        b.before(o(3));
        b.appended(o(3), 0, 0, 1, || now);
        assert!(!b.complete(false));
        b.before(o(4));
        b.appended(o(4), 0, 0, 1, || now);
        assert!(b.complete(false), "offset 5 starts a replayed block");
        b.take();
        // Offsets with a hole: a free block reaching past the start seals first.
        let mut c = LaneBlock::default();
        c.set_plan(o(0), vec![(o(5), o(6))]);
        c.before(o(3));
        c.appended(o(3), 0, 0, 1, || now);
        assert_eq!(c.before(o(6)), Before::SealFirst);
        c.take();
        assert_eq!(c.before(o(6)), Before::Append);
        c.appended(o(6), 0, 0, 1, || now);
        assert!(c.complete(false));
    }

    /// Feed `offsets` to a lane planned with `plan` as the writer's
    /// `append_block` does (no limits), then flush; the blocks it cuts.
    fn cut(plan: &[(i64, i64)], offsets: &[i64]) -> Vec<(i64, i64)> {
        let now = Instant::now();
        let mut b = LaneBlock::default();
        let from = offsets.first().copied().unwrap_or(0);
        b.set_plan(o(from), plan.iter().map(|&(f, l)| (o(f), o(l))).collect());
        let mut out = Vec::new();
        let mut seal = |b: &mut LaneBlock| {
            out.push((b.first.0, b.last.0));
            b.take();
        };
        for &off in offsets {
            if b.before(o(off)) == Before::SealFirst {
                seal(&mut b);
            }
            b.appended(o(off), 0, 0, 1, || now);
            if b.complete(false) {
                seal(&mut b);
            }
        }
        if b.rows > 0 && !b.partial_replay() {
            seal(&mut b);
        }
        out
    }

    /// A compacted topic: the offsets a replay reads skip what compaction
    /// removed, here a recorded block's last offset. The replay of that
    /// block ends at the next offset past it, and the next recorded block
    /// is still replayed at its own offsets (issue 29 point 7).
    #[test]
    fn a_compacted_last_offset_keeps_the_next_recorded_block() {
        let plan = [(0, 2), (3, 5), (6, 8)];
        assert_eq!(
            cut(&plan, &[0, 1, 3, 4, 6, 7, 8]),
            vec![(0, 1), (3, 4), (6, 8)]
        );
    }

    /// Every set of compacted offsets of three recorded blocks over 0..=9:
    /// each recorded block's surviving offsets are cut as one block (once
    /// an offset past it was read), and no block reaches across a recorded
    /// block's boundary.
    #[test]
    fn compaction_never_merges_or_drops_recorded_blocks() {
        let plan = [(1, 3), (4, 4), (5, 8)];
        // Offset 0 (the committed offset, outside every block) stays.
        for gone in 0u32..1 << 9 {
            let offsets: Vec<i64> = (0..10).filter(|i| (gone << 1) & (1 << i) == 0).collect();
            let cut = cut(&plan, &offsets);
            for &(f, l) in &plan {
                let kept: Vec<i64> = offsets
                    .iter()
                    .copied()
                    .filter(|o| (f..=l).contains(o))
                    .collect();
                // A replay whose last offsets are gone stays open until a
                // later offset shows they are (it is never sealed short).
                let shown = offsets.last().is_some_and(|&last| last >= l);
                if let (Some(&a), Some(&z), true) = (kept.first(), kept.last(), shown) {
                    assert!(
                        cut.contains(&(a, z)),
                        "{offsets:?}: block {f}..={l} cut as {cut:?}"
                    );
                }
            }
            for &(a, z) in &cut {
                let across = plan
                    .iter()
                    .any(|&(f, l)| (a < f && z >= f) || (a <= l && z > l));
                assert!(
                    !across,
                    "{offsets:?}: {a}..={z} crosses a recorded block in {cut:?}"
                );
            }
        }
    }

    #[test]
    fn a_partial_replay_is_reported() {
        let now = Instant::now();
        let mut b = LaneBlock::default();
        b.set_plan(o(0), vec![(o(0), o(9))]);
        b.appended(o(0), 0, 0, 1, || now);
        assert!(b.partial_replay());
        let parts = b.take();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].2, 1);
        assert!(!b.partial_replay());
    }
}
