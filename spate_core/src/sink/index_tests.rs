//! Tests of the per-row index the [`ShardWriter`](super::ShardWriter) puts
//! in each [`Chunk`](super::Chunk): row boundaries and each row's origin.

use super::*;
use crate::source::LaneId;
use std::time::Duration;

fn limits(rows: u64) -> BatchLimits {
    BatchLimits {
        rows,
        bytes: 1 << 20,
        interval: Duration::from_secs(3600),
        jitter: 0.0,
        sizing: crate::sink::RowSizing::Fixed,
    }
}

#[test]
fn rows_keep_their_bytes_partition_and_offset() {
    let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
    let mut w = ShardWriter::new(q, limits(5), 1);
    let a = w.add_lane(LaneId(1), None);
    w.set_partition(a, PartitionId::new("t", 3));
    let b = w.add_lane(LaneId(2), None);
    let rows: [(usize, i64, &[u8]); 5] = [
        (a, 10, b"one"),
        (b, 7, b"two!"),
        (a, 12, b"3"),
        (b, 9, b""),
        (a, 13, b"five5"),
    ];
    for (slot, offset, bytes) in rows {
        w.append(slot, 0, Offset(offset), |out| {
            out.extend_from_slice(bytes);
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
    }
    let c = rx[0].try_recv().expect("sealed at 5 rows");
    assert!(c.is_indexed());
    for (i, (_, offset, bytes)) in rows.iter().enumerate() {
        assert_eq!(c.row_bytes(i..i + 1), *bytes, "row {i}");
        assert_eq!(c.origin(i).unwrap().1, Offset(*offset));
    }
    assert_eq!(c.row_bytes(1..4), b"two!3");
    assert_eq!(c.row_bytes(0..5), c.data.as_slice());
    let (p, _) = c.origin(4).unwrap();
    assert_eq!(p, Some(&PartitionId::new("t", 3)));
    assert_eq!(c.origin(1).unwrap().0, None, "lane 2 was not named");
    assert_eq!(c.acks[c.index.rows[1].range as usize].lane, LaneId(2));
    assert_eq!(
        c.describe_ranges(),
        "topic t partition 3 offsets 10..=13, lane 2 offsets 7..=9"
    );
}
