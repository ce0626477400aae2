//! The per-lane segment bookkeeping of the [`ShardWriter`](super::ShardWriter):
//! a lane's pieces in the open chunks, its open and sealed segments, and
//! the [`AckRange`]s their seals produce (see the writer's header).
//!
//! Touched only by the driver thread that owns the writer.

use crate::checkpoint::{AckRange, PendingGate};
use crate::record::{Offset, PartitionId};
use crate::sink::blocks::LaneBlock;
use crate::sink::ChunkSpan;
use crate::source::LaneId;

pub(super) const NO_PIECE: usize = usize::MAX;

#[derive(Debug)]
pub(super) struct Piece {
    pub(super) slot: usize,
    pub(super) lane: LaneId,
    pub(super) seq: u64,
    pub(super) start: Offset,
    /// Last offset of this lane's rows in the chunk.
    pub(super) last: Offset,
    pub(super) partition: Option<PartitionId>,
    pub(super) rows: u64,
}

#[derive(Debug)]
pub(super) struct SealedSegment {
    pub(super) seq: u64,
    pub(super) end: Offset,
    pub(super) parts: u32,
    pub(super) remaining: u32,
}

#[derive(Debug)]
pub(super) struct LaneState {
    pub(super) id: LaneId,
    pub(super) partition: Option<PartitionId>,
    pub(super) gate: Option<PendingGate>,
    /// The open segment's number.
    pub(super) seq: u64,
    /// Last offset appended to the open segment.
    pub(super) end: Offset,
    /// Per shard: index of this lane's piece of the open segment in that
    /// shard's open chunk, or `NO_PIECE`.
    pub(super) piece: Vec<usize>,
    /// Chunks holding pieces of the open segment.
    pub(super) open_parts: u32,
    /// Closed segments with pieces still sitting in open chunks.
    pub(super) sealed: Vec<SealedSegment>,
    /// Shards this lane appended rows to since [`ShardWriter::take_fed`].
    pub(super) fed: u64,
    /// Exactly-once: the lane's own open block.
    pub(super) block: Option<LaneBlock>,
    /// Exactly-once: the epoch of the lane's assignment.
    pub(super) epoch: Option<u64>,
    /// The open segment covers skipped offsets (see [`ShardWriter::skip`]).
    pub(super) skipped: bool,
    /// Exactly-once: the offset past the last one the lane wrote or
    /// skipped ([`ShardWriter::written_before`]).
    pub(super) next: Option<Offset>,
}

impl LaneState {
    /// The open segment, if it holds skipped offsets and no rows, as a
    /// one-part row-less range; closes it.
    pub(super) fn close_skipped(&mut self) -> Option<AckRange> {
        if !self.skipped || self.open_parts > 0 {
            return None;
        }
        self.skipped = false;
        let range = AckRange {
            lane: self.id,
            seq: self.seq,
            parts: 1,
            part: 0,
            start: self.end,
            end: self.end,
            rows: 0,
        };
        self.seq += 1;
        Some(range)
    }

    pub(super) fn seal_piece(&mut self, piece: &Piece, shard: usize) -> AckRange {
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
            self.skipped = false;
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

/// The spans of a chunk's pieces, or none if any piece's partition is
/// unknown (a partial list must never pass for the whole chunk).
pub(super) fn spans_of(pieces: &[Piece]) -> Vec<ChunkSpan> {
    pieces
        .iter()
        .map(|p| {
            Some(ChunkSpan {
                partition: p.partition.clone()?,
                first: p.start,
                last: p.last,
                rows: p.rows,
                epoch: None,
            })
        })
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default()
}
