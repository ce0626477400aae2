//! Unit tests of the [`ShardWriter`]: segment tiling, limits, spans and
//! exactly-once cutting.
use super::*;
use crate::checkpoint::Checkpointer;
use crate::clock::{Clock, ManualClock};
use crate::record::{PartitionId, Watermark};
use crate::sink::Stamps;

fn limits(rows: u64) -> BatchLimits {
    BatchLimits {
        rows,
        bytes: 1 << 20,
        interval: Duration::from_secs(3600),
        jitter: 0.0,
        sizing: RowSizing::Fixed,
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

/// A lane registered with its partition gives each chunk a span of
/// its first and last offset there; one registered without gives none.
#[test]
fn chunks_carry_the_spans_of_partition_lanes() {
    let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
    let mut w = ShardWriter::new(q, limits(4), 1);
    let a = w.add_partition_lane(LaneId(1), PartitionId::new("t", 3), None);
    let b = w.add_partition_lane(LaneId(2), PartitionId::new("t", 5), None);
    for (slot, off) in [(a, 10), (b, 7), (a, 12), (b, 9)] {
        w.append(slot, 0, Offset(off), row).unwrap().unwrap();
    }
    let c = rx[0].try_recv().unwrap();
    assert_eq!(
        c.spans.to_vec(),
        vec![
            ChunkSpan {
                partition: PartitionId::new("t", 3),
                first: Offset(10),
                last: Offset(12),
                rows: 2,
                epoch: None
            },
            ChunkSpan {
                partition: PartitionId::new("t", 5),
                first: Offset(7),
                last: Offset(9),
                rows: 2,
                epoch: None
            }
        ]
    );
    let u = w.add_lane(LaneId(3), None);
    w.append(a, 0, Offset(13), row).unwrap().unwrap();
    w.append(u, 0, Offset(1), row).unwrap().unwrap();
    w.flush().unwrap();
    assert!(
        rx[0].try_recv().unwrap().spans.is_empty(),
        "a lane without partition"
    );
}

#[derive(Debug)]
struct Recorded(i32, Vec<(Offset, Offset)>);

impl BlockPlans for Recorded {
    fn replayed(
        &self,
        p: &PartitionId,
        from: Offset,
        generation: Option<u64>,
    ) -> Result<crate::sink::Replay, String> {
        let mine = p.partition == self.0;
        Ok(crate::sink::Replay {
            blocks: (self.1.iter())
                .copied()
                .filter(|b| mine && b.1 >= from)
                .collect(),
            // An epoch of its own, derived from the generation.
            epoch: generation.map(|g| (g << 32) | 7),
        })
    }
}

/// Exactly-once: the blocks of a lane carry the epoch the sink derived
/// from the assignment's generation, not the generation itself (a static
/// member restarted in the same generation must be told apart).
#[test]
fn exactly_once_blocks_carry_the_epoch_the_sink_returned() {
    let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
    let plans = Arc::new(Recorded(0, Vec::new()));
    let mut w = ShardWriter::new(q, limits(2), 1).exactly_once(plans);
    let a = w.add_partition_lane(LaneId(1), PartitionId::new("t", 0), None);
    w.set_epoch(a, 3);
    for off in 0..4 {
        w.append(a, 0, Offset(off), row).unwrap().unwrap();
    }
    let mut epochs = Vec::new();
    while let Some(c) = rx[0].try_recv() {
        epochs.extend(c.spans.iter().map(|s| s.epoch));
    }
    assert_eq!(epochs, vec![Some((3 << 32) | 7); 2]);
}

/// Exactly-once: each chunk holds one lane's rows, replayed blocks are
/// cut at their recorded offsets whatever the row limit, free blocks
/// at the limit, and a flush leaves an incomplete replay unsent (its
/// rows released when the lane goes).
#[test]
fn exactly_once_cuts_one_partition_per_chunk_at_recorded_offsets() {
    let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
    let plans = Arc::new(Recorded(
        0,
        vec![(Offset(10), Offset(14)), (Offset(15), Offset(15))],
    ));
    let mut w = ShardWriter::new(q, limits(2), 1).exactly_once(plans);
    let gate = PendingGate::new(100);
    let a = w.add_partition_lane(LaneId(1), PartitionId::new("t", 0), Some(gate.clone()));
    let b = w.add_partition_lane(LaneId(2), PartitionId::new("t", 1), None);
    for off in 10..=17 {
        w.append(a, 0, Offset(off), row).unwrap().unwrap();
        w.append(b, 0, Offset(off), row).unwrap().unwrap();
    }
    let mut cuts = Vec::new();
    while let Some(c) = rx[0].try_recv() {
        assert_eq!(c.spans.len(), 1, "one partition per chunk");
        let s = &c.spans[0];
        cuts.push((s.partition.partition, s.first.0, s.last.0, c.acks[0].seq));
    }
    let mut by_partition: Vec<_> = cuts.iter().map(|c| (c.0, c.1, c.2)).collect();
    by_partition.sort_unstable();
    assert_eq!(
        by_partition,
        vec![
            (0, 10, 14),
            (0, 15, 15),
            (0, 16, 17),
            (1, 10, 11),
            (1, 12, 13),
            (1, 14, 15),
            (1, 16, 17)
        ]
    );
    let seqs: Vec<u64> = cuts.iter().filter(|c| c.0 == 0).map(|c| c.3).collect();
    assert_eq!(seqs, [0, 1, 2], "one segment per chunk, in order");
    // A replay left incomplete by a flush is not sent.
    let plans = Arc::new(Recorded(2, vec![(Offset(0), Offset(9))]));
    let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
    let mut w = ShardWriter::new(q, limits(2), 1).exactly_once(plans);
    let gate = PendingGate::new(100);
    let c = w.add_partition_lane(LaneId(3), PartitionId::new("t", 2), Some(gate.clone()));
    for off in 0..4 {
        w.append(c, 0, Offset(off), row).unwrap().unwrap();
    }
    w.flush().unwrap();
    assert!(rx[0].try_recv().is_none(), "a replay was sealed short");
    assert_eq!(gate.pending(), 4);
    w.remove_lane(c);
    assert_eq!(gate.pending(), 0, "the unsent replay's rows are released");
}

/// Exactly-once and a skipped offset (a tombstone, a skipped bad
/// message): the open block is sealed before the skip takes a sequence
/// number, so the watermark never passes rows read before the skip.
#[test]
fn exactly_once_seals_the_open_block_before_a_skip() {
    let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
    let mut w = ShardWriter::new(q, limits(100), 1).exactly_once(Arc::new(Recorded(9, vec![])));
    let mut cp = Checkpointer::new();
    let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
    let slot = w.add_partition_lane(LaneId(1), PartitionId::new("t", 0), Some(gate));
    w.append(slot, 0, Offset(0), row).unwrap().unwrap();
    w.append(slot, 0, Offset(1), row).unwrap().unwrap();
    w.skip(slot, Offset(2)).unwrap();
    let block = rx[0].try_recv().expect("the block is sealed by the skip");
    assert_eq!(
        (block.rows, block.acks[0].seq, block.acks[0].end),
        (2, 0, Offset(1))
    );
    w.flush().unwrap();
    let skipped = rx[0].try_recv().expect("the row-less segment");
    assert_eq!(
        (skipped.rows, skipped.acks[0].seq, skipped.acks[0].end),
        (0, 1, Offset(2))
    );
    cp.ack(&skipped.acks[0]);
    assert_eq!(
        cp.watermark(LaneId(1)),
        None,
        "the skip waits for the block"
    );
    cp.ack(&block.acks[0]);
    assert_eq!(cp.watermark(LaneId(1)), Some(Watermark(3)));
}

/// Skipped offsets ride in the segment of the rows around them; a run of
/// skips with no row after it goes out as a row-less chunk at the next
/// flush or tick, acknowledged in order.
#[test]
fn skipped_offsets_are_acknowledged_in_order_only() {
    let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
    let clock = ManualClock::new();
    let mut l = limits(3);
    l.interval = Duration::from_millis(100);
    let mut w = ShardWriter::new(q, l, 1).with_clock(clock.clone());
    let mut cp = Checkpointer::new();
    let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
    let slot = w.add_lane(LaneId(1), Some(gate));
    w.append(slot, 0, Offset(0), row).unwrap().unwrap();
    w.skip(slot, Offset(1)).unwrap();
    w.append(slot, 0, Offset(2), row).unwrap().unwrap();
    w.skip(slot, Offset(3)).unwrap();
    w.append(slot, 0, Offset(4), row).unwrap().unwrap(); // seals [0..=4]
    let first = rx[0].try_recv().unwrap();
    assert_eq!((first.rows, first.acks[0].end), (3, Offset(4)));
    // A trailing run of skips: nothing goes out before the interval.
    w.skip(slot, Offset(5)).unwrap();
    w.skip(slot, Offset(6)).unwrap();
    w.tick(clock.now()).unwrap();
    assert!(rx[0].try_recv().is_none());
    clock.advance(Duration::from_millis(100));
    w.tick(clock.now()).unwrap();
    let skipped = rx[0].try_recv().expect("the row-less segment");
    assert_eq!((skipped.rows, skipped.data.len()), (0, 0));
    assert_eq!(
        (
            skipped.acks[0].seq,
            skipped.acks[0].end,
            skipped.acks[0].rows
        ),
        (1, Offset(6), 0)
    );
    // Acknowledged out of order: the skips wait for the rows before.
    cp.ack(&skipped.acks[0]);
    assert_eq!(cp.watermark(LaneId(1)), None);
    cp.ack(&first.acks[0]);
    assert_eq!(cp.watermark(LaneId(1)), Some(Watermark(7)));
    // A skip then a row: one segment, no row-less chunk.
    w.skip(slot, Offset(7)).unwrap();
    w.append(slot, 0, Offset(8), row).unwrap().unwrap();
    w.flush().unwrap();
    let c = rx[0].try_recv().unwrap();
    assert_eq!((c.rows, c.acks[0].seq, c.acks[0].end), (1, 2, Offset(8)));
    assert!(rx[0].try_recv().is_none(), "no row-less chunk");
    cp.ack(&c.acks[0]);
    assert_eq!(cp.watermark(LaneId(1)), Some(Watermark(9)));
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

/// Exactly-once on two shards, keyed: a block is one segment split into
/// one part per shard, both cut at the block's offsets; the watermark
/// moves only once both parts are acknowledged, and a replay of the range
/// rebuilds the same parts.
#[test]
fn exactly_once_block_splits_into_deterministic_shard_parts() {
    let cut = |plans: Vec<(Offset, Offset)>, from: i64| {
        let (q, mut rx) = ShardQueues::new(2, 1 << 20, 1 << 19);
        let mut w = ShardWriter::new(q, limits(4), 1).exactly_once(Arc::new(Recorded(0, plans)));
        let mut cp = Checkpointer::new();
        let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
        let slot = w.add_partition_lane(LaneId(1), PartitionId::new("t", 0), Some(gate));
        for off in from..from + 4 {
            let shard = (off % 3 == 0) as usize;
            w.append(slot, shard, Offset(off), |o: &mut Vec<u8>| {
                o.push(off as u8);
                Ok::<(), ()>(())
            })
            .unwrap()
            .unwrap();
        }
        let parts: Vec<Chunk> = (0..2).filter_map(|s| rx[s].try_recv()).collect();
        (parts, cp)
    };
    let (parts, mut cp) = cut(Vec::new(), 0);
    assert_eq!(parts.len(), 2, "one part per shard");
    let view: Vec<_> = (parts.iter())
        .map(|c| {
            (
                c.shard,
                c.data.clone(),
                c.acks[0].parts,
                c.acks[0].part,
                c.spans[0].first,
                c.spans[0].last,
                c.spans[0].rows,
            )
        })
        .collect();
    assert_eq!(
        view,
        vec![
            (0, vec![1, 2], 2, 0, Offset(0), Offset(3), 2),
            (1, vec![0, 3], 2, 1, Offset(0), Offset(3), 2),
        ]
    );
    cp.ack(&parts[0].acks[0]);
    assert_eq!(
        cp.watermark(LaneId(1)),
        None,
        "shard 1's part is not in yet"
    );
    cp.ack(&parts[1].acks[0]);
    assert_eq!(cp.watermark(LaneId(1)), Some(Watermark(4)));
    // The replay of the recorded range is cut into the same parts.
    let (again, _) = cut(vec![(Offset(0), Offset(3))], 0);
    let bytes = |cs: &[Chunk]| {
        cs.iter()
            .map(|c| (c.shard, c.data.clone(), c.spans.to_vec()))
            .collect::<Vec<_>>()
    };
    assert_eq!(bytes(&again), bytes(&parts));
}

/// Exactly-once on two shards without a key: the shard a row comes with
/// is ignored; each whole block goes to the shard its partition and first
/// offset pick, whoever cuts it.
#[test]
fn exactly_once_unkeyed_block_goes_to_its_chosen_shard() {
    let slots: Arc<[u16]> = Arc::from(vec![0u16, 1]);
    let (q, mut rx) = ShardQueues::new(2, 1 << 20, 1 << 19);
    let plans = Arc::new(Recorded(0, Vec::new()));
    let mut w = ShardWriter::new(q, limits(2), 1)
        .exactly_once(plans)
        .route_blocks(slots.clone());
    let p = PartitionId::new("t", 0);
    let slot = w.add_partition_lane(LaneId(1), p.clone(), None);
    for off in 0..40 {
        w.append(slot, (off % 2) as usize, Offset(off), row)
            .unwrap()
            .unwrap();
    }
    let mut seen = [0; 2];
    for (s, rx) in rx.iter_mut().enumerate() {
        while let Some(c) = rx.try_recv() {
            assert_eq!(c.rows, 2, "the whole block in one part");
            assert_eq!(c.acks[0].parts, 1);
            assert_eq!(s, block_shard(&slots, &p, c.spans[0].first));
            seen[s] += 1;
        }
    }
    assert_eq!(seen[0] + seen[1], 20);
    assert!(
        seen[0] > 0 && seen[1] > 0,
        "blocks spread over both shards: {seen:?}"
    );
}

/// Appends `rows` rows to shard 0, advancing the clock `step` per row.
fn feed(
    w: &mut ShardWriter,
    clock: &ManualClock,
    slot: usize,
    first: i64,
    rows: i64,
    step: Duration,
) {
    for off in first..first + rows {
        clock.advance(step);
        w.append(slot, 0, Offset(off), row).unwrap().unwrap();
    }
}

#[test]
fn auto_row_limit_follows_the_fill_rate_within_the_cap() {
    // 1 row per ms = 1000 rows/s into the shard from this writer, two
    // writers per shard, one insert per second: 2000-row chunks.
    let (q, mut rx) = ShardQueues::new(1, 1 << 30, 1 << 29);
    let l = BatchLimits {
        rows: 5_000,
        bytes: 1 << 20,
        interval: Duration::from_secs(60),
        jitter: 0.0,
        sizing: RowSizing::one_insert_per_second(2),
    };
    let clock = ManualClock::new();
    let mut w = ShardWriter::new(q, l, 1).with_clock(clock.clone());
    let slot = w.add_lane(LaneId(1), None);
    assert_eq!(w.row_limit(0), 5_000, "before any measurement: the cap");
    feed(&mut w, &clock, slot, 0, 5_000, Duration::from_millis(1));
    assert_eq!(rx[0].try_recv().expect("cut at the cap").rows, 5_000);
    // The first chunk filled 4999 ms after its first row: ~1000 rows/s.
    assert!(w.row_limit(0).abs_diff(2_000) <= 1, "{}", w.row_limit(0));
    let mut off = 5_000;
    for _ in 0..5 {
        let limit = w.row_limit(0) as i64;
        feed(&mut w, &clock, slot, off, limit, Duration::from_millis(1));
        off += limit;
        assert_eq!(
            rx[0].try_recv().expect("cut at the rate's rows").rows,
            limit as u64
        );
    }
    // The rate quadruples: the limit grows towards 8000 but stops at the cap.
    for _ in 0..8 {
        let limit = w.row_limit(0) as i64;
        feed(&mut w, &clock, slot, off, limit, Duration::from_micros(250));
        off += limit;
        rx[0].try_recv().expect("cut at the limit");
    }
    assert_eq!(w.row_limit(0), 5_000);
    // A flush is not measured: a short chunk flushed early leaves the limit.
    feed(&mut w, &clock, slot, off, 10, Duration::from_micros(1));
    w.flush().unwrap();
    assert_eq!(rx[0].try_recv().unwrap().rows, 10);
    assert_eq!(w.row_limit(0), 5_000);
}

#[test]
fn auto_row_limit_yields_to_the_bytes_and_age_limits() {
    let (q, mut rx) = ShardQueues::new(1, 1 << 30, 1 << 29);
    let l = BatchLimits {
        rows: 1_000_000,
        bytes: 3_000,
        interval: Duration::from_secs(1),
        jitter: 0.0,
        sizing: RowSizing::one_insert_per_second(1),
    };
    let clock = ManualClock::new();
    let mut w = ShardWriter::new(q, l, 1).with_clock(clock.clone());
    let slot = w.add_lane(LaneId(1), None);
    // 10k rows/s would make 10k-row chunks: the 3000-byte limit cuts first.
    feed(&mut w, &clock, slot, 0, 3_000, Duration::from_micros(100));
    assert_eq!(rx[0].try_recv().expect("cut at the bytes").rows, 3_000);
    assert!(w.row_limit(0) >= 9_000, "{}", w.row_limit(0));
    feed(
        &mut w,
        &clock,
        slot,
        3_000,
        3_000,
        Duration::from_micros(100),
    );
    assert_eq!(rx[0].try_recv().expect("cut at the bytes").rows, 3_000);
    // 100 rows/s: the age limit seals at 1 s, and the limit drops to the floor.
    feed(&mut w, &clock, slot, 6_000, 100, Duration::from_millis(10));
    clock.advance(Duration::from_millis(10));
    w.tick(clock.now()).unwrap();
    assert_eq!(rx[0].try_recv().expect("cut at the age").rows, 100);
    for k in 0..10 {
        feed(
            &mut w,
            &clock,
            slot,
            7_000 + 100 * k,
            100,
            Duration::from_millis(10),
        );
        clock.advance(Duration::from_millis(10));
        w.tick(clock.now()).unwrap();
        rx[0].try_recv().expect("cut at the age");
    }
    assert_eq!(w.row_limit(0), crate::sink::AUTO_MIN_ROWS);
}

#[test]
fn the_next_chunk_is_written_into_an_inserted_chunks_buffers() {
    let (q, mut rx) = ShardQueues::new(1, 1 << 30, 1 << 29);
    let view = q.depth_view();
    let mut w = ShardWriter::new(q, limits(2), 1);
    let slot = w.add_lane(LaneId(1), None);
    let big = |out: &mut Vec<u8>| -> Result<(), ()> {
        out.extend_from_slice(&[3; 100 << 10]);
        Ok(())
    };
    w.append(slot, 0, Offset(0), big).unwrap().unwrap();
    w.append(slot, 0, Offset(1), big).unwrap().unwrap();
    let first = rx[0].try_recv().expect("sealed at 2 rows");
    let (ptr, rows_ptr) = (first.data.as_ptr(), first.index.rows.as_ptr());
    // The insert worker's part: out of the depth, then handed back. The
    // open chunk already has a buffer, so the spare waits for the next
    // seal.
    let super::super::Chunk {
        shard,
        data,
        ticket,
        index,
        ..
    } = first;
    drop(ticket);
    view.recycle(
        shard,
        super::super::Spare {
            data,
            rows: index.rows,
            ..Default::default()
        },
    );
    w.append(slot, 0, Offset(2), big).unwrap().unwrap();
    w.append(slot, 0, Offset(3), big).unwrap().unwrap();
    let second = rx[0].try_recv().expect("sealed at 2 rows");
    assert_ne!(second.data.as_ptr(), ptr, "the open chunk kept its own");
    w.append(slot, 0, Offset(4), big).unwrap().unwrap();
    w.append(slot, 0, Offset(5), big).unwrap().unwrap();
    let third = rx[0].try_recv().expect("sealed at 2 rows");
    assert_eq!(
        third.data.as_ptr(),
        ptr,
        "written into the first chunk's pages"
    );
    assert_eq!(third.index.rows.as_ptr(), rows_ptr);
    assert_eq!(third.data.len(), 200 << 10);
    assert_eq!(
        (third.index.rows.len(), third.index.rows[1].end),
        (2, 200 << 10),
        "only its own rows"
    );
}

/// Each chunk carries the Kafka timestamps of its own rows (for the
/// delivery latency at its acknowledgement), on every shard and in
/// exactly-once blocks; a message without a timestamp adds none.
#[test]
fn chunks_carry_their_rows_timestamps() {
    let (q, mut rx) = ShardQueues::new(2, 1 << 20, 1 << 19);
    let mut w = ShardWriter::new(q, limits(3), 1);
    let slot = w.add_lane(LaneId(1), None);
    for (off, shard, ts) in [
        (0, 0, Some(1_000)),
        (1, 1, Some(1_000)),
        (2, 0, Some(1_000)),
        (3, 0, None),
        (4, 0, Some(2_000)),
    ] {
        w.stamp_next(ts);
        w.append(slot, shard, Offset(off), row).unwrap().unwrap();
    }
    w.flush().unwrap();
    let full = rx[0].try_recv().expect("shard 0 sealed at 3 rows");
    let mut expected = Stamps::default();
    expected.push(1_000, 2);
    assert_eq!(full.stamps, expected, "the unstamped row adds nothing");
    let tail = rx[0].try_recv().expect("shard 0's tail");
    let mut expected = Stamps::default();
    expected.push(2_000, 1);
    assert_eq!(tail.stamps, expected);
    let other = rx[1].try_recv().expect("shard 1");
    assert_eq!(other.stamps.rows(), 1);

    let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
    let mut w = ShardWriter::new(q, limits(100), 1).exactly_once(Arc::new(Recorded(9, vec![])));
    let mut cp = Checkpointer::new();
    let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
    let slot = w.add_partition_lane(LaneId(1), PartitionId::new("t", 0), Some(gate));
    w.stamp_next(Some(5_000));
    w.append_keeping(slot, 0, Offset(0), None, |out| {
        out.extend_from_slice(&[7, 7]);
        Ok::<u32, ()>(2)
    })
    .unwrap()
    .unwrap();
    w.flush().unwrap();
    let block = rx[0].try_recv().expect("the block");
    let mut expected = Stamps::default();
    expected.push(5_000, 2);
    assert_eq!(block.stamps, expected, "a message of two rows stamps both");
}
