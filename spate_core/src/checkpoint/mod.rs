//! Checkpointing: from sink acknowledgements to committable watermarks.
//!
//! The [`Checkpointer`] is a pure, synchronous data structure owned by the
//! controller thread: no I/O, no clocks. It learns about lanes when they are
//! assigned ([`Checkpointer::add_lane`], which also yields the lane's
//! [`PendingGate`]), about acknowledgements as the controller drains the
//! sink's [`AckEvent`](crate::sink::AckEvent)s, and answers with the
//! **acknowledged watermark** of each lane: the contiguous acknowledged
//! prefix, as the next offset to read.
//!
//! Segments: the chain cuts each lane's stream into segments numbered
//! `0, 1, 2, …` in reading order. A segment covers every message the lane
//! read between the previous segment's end and its own `end` (inclusive),
//! so the segments tile the partition without gaps even where Kafka offsets
//! have holes (compaction, transaction markers). A segment may be split
//! into `parts` pieces, one per shard chunk that holds some of its rows; it
//! counts as acknowledged when every part is, each part counted once
//! however often it is acknowledged. The watermark of a lane is
//! `end + 1` of the last segment of the longest fully acknowledged prefix
//! `0..=k`. It can never pass a segment that is unacknowledged or failed.

mod gate;

pub use gate::{PendingGate, StillPolling, Tenure};

use crate::record::{Offset, PartitionId, Watermark};
use crate::source::LaneId;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One acknowledgeable piece of a lane's stream, carried by a shard chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckRange {
    /// The lane the rows came from.
    pub lane: LaneId,
    /// Segment number within the lane (0, 1, 2, … in reading order).
    pub seq: u64,
    /// How many parts (shard chunks) the segment was split into.
    pub parts: u32,
    /// Which part this is: the shard whose chunk carries it (a shard holds
    /// at most one part of a segment). A part acknowledged twice counts
    /// once.
    pub part: u32,
    /// First offset of the segment (diagnostics only).
    pub start: Offset,
    /// Last offset the segment covers (inclusive); once acknowledged, the
    /// lane's watermark becomes [`Watermark::after`] it.
    pub end: Offset,
    /// Rows of this lane in this part.
    pub rows: u64,
}

#[derive(Debug)]
struct SegmentState {
    parts_total: u32,
    /// The parts acknowledged so far, by [`AckRange::part`]: a set, so a
    /// part acknowledged twice counts once.
    parts_acked: BTreeSet<u32>,
    end: Offset,
}

#[derive(Debug)]
struct LaneTrack {
    partition: PartitionId,
    gate: PendingGate,
    /// Next segment whose acknowledgement would advance the watermark.
    next_seq: u64,
    /// Segments beyond `next_seq` with at least one acknowledged part.
    partial: BTreeMap<u64, SegmentState>,
    /// First segment that failed (abandoned): the watermark stops below it.
    failed_at: Option<u64>,
    /// Acknowledged watermark (next offset to read), once known.
    acked: Option<Watermark>,
    /// Last watermark handed out for commit.
    committed: Option<Watermark>,
}

/// What [`Checkpointer::ack`] made of an acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckOutcome {
    /// Recorded; the watermark may have advanced.
    Recorded,
    /// The lane is gone (revoked or retired): ignored.
    UnknownLane,
    /// A part already acknowledged, or a part of a segment already fully
    /// acknowledged: ignored.
    Duplicate,
}

/// A lane the checkpointer no longer tracks ([`Checkpointer::remove_lane`]).
#[derive(Debug)]
pub struct Removed {
    pub partition: PartitionId,
    /// Its final acknowledged watermark.
    pub acked: Option<Watermark>,
    /// A poll of the lane still ran when its gate's close gave up: it may
    /// deliver messages of the partition after this.
    pub still_polling: bool,
}

/// Tracks acknowledgements per lane and yields committable watermarks.
#[derive(Debug, Default)]
pub struct Checkpointer {
    lanes: HashMap<LaneId, LaneTrack>,
}

impl Checkpointer {
    /// An empty checkpointer.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Start tracking `lane` (reading `partition`) and return its pending
    /// gate with `ceiling` rows.
    pub fn add_lane(&mut self, lane: LaneId, partition: PartitionId, ceiling: i64) -> PendingGate {
        let gate = PendingGate::new(ceiling);
        self.lanes.insert(
            lane,
            LaneTrack {
                partition,
                gate: gate.clone(),
                next_seq: 0,
                partial: BTreeMap::new(),
                failed_at: None,
                acked: None,
                committed: None,
            },
        );
        gate
    }

    /// Whether `lane` is tracked.
    #[cfg(test)]
    #[must_use]
    pub fn has_lane(&self, lane: LaneId) -> bool {
        self.lanes.contains_key(&lane)
    }

    /// The gate of a tracked lane.
    #[cfg(test)]
    #[must_use]
    pub fn gate(&self, lane: LaneId) -> Option<&PendingGate> {
        self.lanes.get(&lane).map(|t| &t.gate)
    }

    /// Record that the sink acknowledged `range`.
    pub fn ack(&mut self, range: &AckRange) -> AckOutcome {
        let Some(track) = self.lanes.get_mut(&range.lane) else {
            return AckOutcome::UnknownLane;
        };
        if range.seq < track.next_seq {
            return AckOutcome::Duplicate;
        }
        let seg = track.partial.entry(range.seq).or_insert(SegmentState {
            parts_total: range.parts.max(1),
            parts_acked: BTreeSet::new(),
            end: range.end,
        });
        if !seg.parts_acked.insert(range.part) {
            return AckOutcome::Duplicate;
        }
        seg.end = seg.end.max(range.end);
        track.gate.released(range.rows as i64);
        track.advance();
        AckOutcome::Recorded
    }

    /// Record that the sink gave up on `range` (abandoned at shutdown, or a
    /// fatal insert error). The lane's watermark never passes it.
    pub fn fail(&mut self, range: &AckRange) {
        if let Some(track) = self.lanes.get_mut(&range.lane) {
            if range.seq >= track.next_seq {
                track.failed_at = Some(track.failed_at.map_or(range.seq, |f| f.min(range.seq)));
            }
        }
    }

    /// The acknowledged watermark of `lane`, if anything was acknowledged.
    #[must_use]
    pub fn watermark(&self, lane: LaneId) -> Option<Watermark> {
        self.lanes.get(&lane).and_then(|t| t.acked)
    }

    /// Watermarks that moved past what was last handed out for commit,
    /// marking them as handed out. Only tracked (owned) lanes appear.
    pub fn take_committable(&mut self) -> Vec<(PartitionId, Watermark)> {
        let mut out = Vec::new();
        for track in self.lanes.values_mut() {
            if let Some(acked) = track.acked {
                if track.committed.is_none_or(|c| acked > c) {
                    track.committed = Some(acked);
                    out.push((track.partition.clone(), acked));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Forget that these watermarks were handed out (the commit failed), so
    /// the next [`take_committable`](Self::take_committable) offers them again.
    pub fn commit_failed(&mut self, watermarks: &[(PartitionId, Watermark)]) {
        for track in self.lanes.values_mut() {
            if watermarks
                .iter()
                .any(|(p, w)| *p == track.partition && track.committed == Some(*w))
            {
                track.committed = None;
            }
        }
    }

    /// Every tracked lane's current acknowledged watermark.
    #[must_use]
    pub fn watermarks(&self) -> Vec<(PartitionId, Watermark)> {
        let mut out: Vec<_> = self
            .lanes
            .values()
            .filter_map(|t| t.acked.map(|w| (t.partition.clone(), w)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Stop tracking `lane`, closing its gate (waiting for a poll of it in
    /// progress until `deadline`, see [`PendingGate::close_by`]); returns
    /// its final acknowledged watermark.
    pub fn remove_lane(&mut self, lane: LaneId, deadline: std::time::Instant) -> Option<Removed> {
        self.lanes.remove(&lane).map(|t| Removed {
            still_polling: t.gate.close_by(deadline).is_err(),
            partition: t.partition,
            acked: t.acked,
        })
    }

    /// The controller is about to stop `lanes`: a wait inside a poll of
    /// one of them gives up ([`PendingGate::stop_requested`]).
    pub fn stopping(&self, lanes: &[LaneId]) {
        for t in lanes.iter().filter_map(|l| self.lanes.get(l)) {
            t.gate.stop_requested();
        }
    }

    /// Rows dispatched and not acknowledged, over the given lanes.
    #[must_use]
    pub fn pending_rows(&self, lanes: &[LaneId]) -> i64 {
        lanes
            .iter()
            .filter_map(|l| self.lanes.get(l))
            .map(|t| t.gate.pending())
            .sum()
    }

    /// Rows dispatched and not acknowledged, over every lane.
    #[must_use]
    pub fn total_pending_rows(&self) -> i64 {
        self.lanes.values().map(|t| t.gate.pending()).sum()
    }

    /// Whether any tracked lane has a failed segment.
    #[cfg(test)]
    #[must_use]
    pub fn any_failed(&self) -> bool {
        self.lanes.values().any(|t| t.failed_at.is_some())
    }
}

impl LaneTrack {
    fn advance(&mut self) {
        loop {
            if self.failed_at.is_some_and(|f| f <= self.next_seq) {
                return;
            }
            match self.partial.get(&self.next_seq) {
                Some(seg) if seg.parts_acked.len() as u64 >= u64::from(seg.parts_total) => {
                    self.acked = Some(Watermark::after(seg.end));
                    self.partial.remove(&self.next_seq);
                    self.next_seq += 1;
                }
                _ => return,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
