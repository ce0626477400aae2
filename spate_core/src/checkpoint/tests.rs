//! Unit tests and a model-based proptest of the checkpointer against a
//! naive reference: interleaved acknowledgements, duplicates, failures,
//! revocation and re-assignment.

use super::*;
use proptest::prelude::*;
use std::collections::HashSet;

fn p(n: i32) -> PartitionId {
    PartitionId::new("t", n)
}

fn range(lane: u64, seq: u64, parts: u32, end: i64, rows: u64) -> AckRange {
    part(lane, seq, parts, 0, end, rows)
}

/// Part `part` of a segment split into `parts`.
fn part(lane: u64, seq: u64, parts: u32, part: u32, end: i64, rows: u64) -> AckRange {
    AckRange {
        lane: LaneId(lane),
        seq,
        parts,
        part,
        start: Offset(0),
        end: Offset(end),
        rows,
    }
}

#[test]
fn watermark_is_the_contiguous_acknowledged_prefix() {
    let mut c = Checkpointer::new();
    let gate = c.add_lane(LaneId(1), p(0), 1_000);
    gate.dispatched(30);
    assert_eq!(c.ack(&range(1, 1, 1, 19, 10)), AckOutcome::Recorded);
    assert_eq!(c.watermark(LaneId(1)), None, "segment 0 is still out");
    assert!(c.take_committable().is_empty());
    c.ack(&range(1, 0, 1, 9, 10));
    assert_eq!(c.watermark(LaneId(1)), Some(Watermark(20)));
    assert_eq!(c.take_committable(), vec![(p(0), Watermark(20))]);
    assert!(c.take_committable().is_empty(), "handed out once");
    assert_eq!(gate.pending(), 10);
}

#[test]
fn a_split_segment_needs_every_part() {
    let mut c = Checkpointer::new();
    c.add_lane(LaneId(1), p(0), 1_000);
    c.ack(&part(1, 0, 2, 0, 9, 5));
    assert_eq!(c.watermark(LaneId(1)), None);
    c.ack(&part(1, 0, 2, 1, 9, 5));
    assert_eq!(c.watermark(LaneId(1)), Some(Watermark(10)));
}

#[test]
fn a_part_acknowledged_twice_counts_once() {
    let mut c = Checkpointer::new();
    let gate = c.add_lane(LaneId(1), p(0), 1_000);
    gate.dispatched(10);
    assert_eq!(c.ack(&part(1, 0, 2, 0, 9, 5)), AckOutcome::Recorded);
    assert_eq!(c.ack(&part(1, 0, 2, 0, 9, 5)), AckOutcome::Duplicate);
    assert_eq!(
        c.watermark(LaneId(1)),
        None,
        "the second part of segment 0 is still out"
    );
    assert_eq!(gate.pending(), 5, "the duplicate released no rows");
    assert_eq!(c.ack(&part(1, 0, 2, 1, 9, 5)), AckOutcome::Recorded);
    assert_eq!(c.watermark(LaneId(1)), Some(Watermark(10)));
    assert_eq!(gate.pending(), 0);
}

#[test]
fn failed_segment_blocks_the_watermark_for_good() {
    let mut c = Checkpointer::new();
    c.add_lane(LaneId(1), p(0), 1_000);
    c.ack(&range(1, 0, 1, 9, 1));
    c.fail(&range(1, 1, 1, 19, 1));
    c.ack(&range(1, 2, 1, 29, 1));
    assert_eq!(c.watermark(LaneId(1)), Some(Watermark(10)));
    assert!(c.any_failed());
}

#[test]
fn acks_for_removed_lanes_and_duplicates_are_ignored() {
    let mut c = Checkpointer::new();
    c.add_lane(LaneId(1), p(0), 1_000);
    c.ack(&range(1, 0, 1, 9, 1));
    assert_eq!(c.ack(&range(1, 0, 1, 9, 1)), AckOutcome::Duplicate);
    assert!(c.has_lane(LaneId(1)));
    let gate = c
        .gate(LaneId(1))
        .cloned()
        .expect("a tracked lane has a gate");
    let removed = c.remove_lane(LaneId(1), std::time::Instant::now()).unwrap();
    assert_eq!(
        (removed.partition, removed.acked),
        (p(0), Some(Watermark(10)))
    );
    assert!(!removed.still_polling);
    assert!(!c.has_lane(LaneId(1)), "removed lanes are not tracked");
    assert!(c.gate(LaneId(1)).is_none());
    assert!(gate.is_closed(), "removing a lane closes its gate");
    assert_eq!(c.ack(&range(1, 1, 1, 19, 1)), AckOutcome::UnknownLane);
    // Re-assignment of the same partition is a new lane starting afresh.
    c.add_lane(LaneId(2), p(0), 1_000);
    assert_eq!(c.watermark(LaneId(2)), None);
}

#[test]
fn failed_commit_is_offered_again() {
    let mut c = Checkpointer::new();
    c.add_lane(LaneId(1), p(0), 1_000);
    c.ack(&range(1, 0, 1, 9, 1));
    let w = c.take_committable();
    c.commit_failed(&w);
    assert_eq!(c.take_committable(), w);
}

// ---- model-based proptest -------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    /// Acknowledge part `part` of segment `seg` of lane slot `lane`.
    Ack { lane: usize, seg: usize, part: u32 },
    /// Fail segment `seg` of lane slot `lane`.
    Fail { lane: usize, seg: usize },
    /// Hand out committable watermarks.
    Commit,
    /// Revoke lane slot `lane` and re-assign its partition as a new lane
    /// that resumes from the last committed watermark.
    Reassign { lane: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..8usize, 0..3u32).prop_map(|(lane, seg, part)| Op::Ack { lane, seg, part }),
        1 => (0..3usize, 0..8usize).prop_map(|(lane, seg)| Op::Fail { lane, seg }),
        2 => Just(Op::Commit),
        1 => (0..3usize).prop_map(|lane| Op::Reassign { lane }),
    ]
}

/// The naive reference: per lane, segments with explicit offset sets.
struct ModelLane {
    id: u64,
    partition: i32,
    /// Per segment: (first offset, last offset, parts).
    segs: Vec<(i64, i64, u32)>,
    acked_parts: Vec<HashSet<u32>>,
    failed: Vec<bool>,
}

impl ModelLane {
    fn new(id: u64, partition: i32, from: i64, shape: &[(i64, u32)]) -> Self {
        let mut segs = Vec::new();
        let mut start = from;
        for &(len, parts) in shape {
            segs.push((start, start + len - 1, parts));
            start += len;
        }
        let n = segs.len();
        Self {
            id,
            partition,
            segs,
            acked_parts: vec![HashSet::new(); n],
            failed: vec![false; n],
        }
    }

    fn complete(&self, i: usize) -> bool {
        !self.failed[..=i].iter().any(|f| *f) && self.acked_parts[i].len() as u32 >= self.segs[i].2
    }

    /// Highest offset that is safe to commit past: every offset below the
    /// returned watermark belongs to a fully acknowledged segment.
    fn reference_watermark(&self) -> Option<i64> {
        let mut wm = None;
        for i in 0..self.segs.len() {
            if self.complete(i) {
                wm = Some(self.segs[i].1 + 1);
            } else {
                break;
            }
        }
        wm
    }

    /// Rows dispatched: one per part of every segment.
    fn rows(&self) -> i64 {
        self.segs.iter().map(|s| i64::from(s.2)).sum()
    }

    /// Rows not acknowledged: one per part never acknowledged.
    fn pending_rows(&self) -> i64 {
        self.rows() - self.acked_parts.iter().map(|a| a.len() as i64).sum::<i64>()
    }

    fn offset_acked(&self, offset: i64) -> bool {
        self.segs
            .iter()
            .enumerate()
            .any(|(i, s)| s.0 <= offset && offset <= s.1 && self.acked_parts[i].len() as u32 >= s.2)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn checkpointer_matches_naive_model(
        shape in proptest::collection::vec((1..5i64, 1..4u32), 8),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut c = Checkpointer::new();
        let mut next_id = 0u64;
        let mut lanes: Vec<ModelLane> = Vec::new();
        // Everything ever committed per partition, to check monotonic safety.
        let mut committed: HashMap<i32, i64> = HashMap::new();
        for partition in 0..3 {
            next_id += 1;
            let lane = ModelLane::new(next_id, partition, 0, &shape);
            c.add_lane(LaneId(next_id), p(partition), 1 << 40).dispatched(lane.rows());
            lanes.push(lane);
        }
        for op in ops {
            match op {
                Op::Ack { lane, seg, part } => {
                    let m = &mut lanes[lane];
                    let (start, end, parts) = m.segs[seg];
                    let part = part % parts;
                    let r = AckRange { lane: LaneId(m.id), seq: seg as u64, parts, part, start: Offset(start), end: Offset(end), rows: 1 };
                    // A part acknowledged again (a duplicate delivery) must
                    // change nothing: not the watermark, not the gate.
                    let already = m.reference_watermark().is_some_and(|w| w > end)
                        || m.acked_parts[seg].contains(&part);
                    let out = c.ack(&r);
                    if already {
                        prop_assert_eq!(out, AckOutcome::Duplicate);
                    } else {
                        prop_assert_eq!(out, AckOutcome::Recorded);
                        m.acked_parts[seg].insert(part);
                    }
                }
                Op::Fail { lane, seg } => {
                    let m = &mut lanes[lane];
                    let (start, end, parts) = m.segs[seg];
                    let r = AckRange { lane: LaneId(m.id), seq: seg as u64, parts, part: 0, start: Offset(start), end: Offset(end), rows: 1 };
                    let before = c.watermark(LaneId(m.id));
                    c.fail(&r);
                    // A segment already below the watermark stays acknowledged.
                    if before.is_none_or(|w| w.0 <= start) {
                        m.failed[seg] = true;
                    }
                }
                Op::Commit => {
                    for (part, wm) in c.take_committable() {
                        let m = lanes.iter().find(|m| m.partition == part.partition).unwrap();
                        // Never past an unacknowledged offset of the current lane.
                        for off in m.segs[0].0..wm.0 {
                            prop_assert!(m.offset_acked(off), "committed {} past unacked {}", wm.0, off);
                        }
                        let prev = committed.insert(part.partition, wm.0);
                        prop_assert!(prev.is_none_or(|p| p < wm.0), "watermark went backwards");
                    }
                }
                Op::Reassign { lane } => {
                    let old = lanes[lane].id;
                    let partition = lanes[lane].partition;
                    let wm = c.remove_lane(LaneId(old), std::time::Instant::now()).unwrap().acked;
                    prop_assert_eq!(wm.map(|w| w.0), lanes[lane].reference_watermark());
                    // The new owner resumes from the acknowledged watermark
                    // (what the revocation committed), or from the start.
                    let from = wm.map_or(lanes[lane].segs[0].0, |w| w.0);
                    if let Some(w) = wm {
                        let prev = committed.insert(partition, w.0);
                        prop_assert!(prev.is_none_or(|p| p <= w.0));
                    }
                    next_id += 1;
                    let new = ModelLane::new(next_id, partition, from, &shape);
                    c.add_lane(LaneId(next_id), p(partition), 1 << 40).dispatched(new.rows());
                    lanes[lane] = new;
                    // A late ack of the old lane must not move the new one.
                    let stale = AckRange { lane: LaneId(old), seq: 0, parts: 1, part: 0, start: Offset(0), end: Offset(1_000), rows: 1 };
                    prop_assert_eq!(c.ack(&stale), AckOutcome::UnknownLane);
                }
            }
            for m in &lanes {
                prop_assert_eq!(c.watermark(LaneId(m.id)).map(|w| w.0), m.reference_watermark());
                prop_assert_eq!(c.gate(LaneId(m.id)).map(PendingGate::pending), Some(m.pending_rows()));
            }
        }
    }
}
