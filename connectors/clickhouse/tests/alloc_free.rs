//! Proves `RowEncoder::encode` (and the shard key hash of the row) makes no heap allocation per row after
//! warm-up. Alone in its test binary because it installs a counting global
//! allocator.

use spate_clickhouse::{parse_type, Column, DefaultKind, EncoderOptions, RowEncoder};
use spate_core::record::Message;
use std::time::Instant;

#[path = "counting_alloc/mod.rs"]
mod counting_alloc;

use counting_alloc::{allocs, COUNTING};

fn col(name: &str, ty: &str) -> Column {
    Column {
        name: name.into(),
        ty: parse_type(ty).expect("type"),
        default_kind: DefaultKind::None,
        default_expression: String::new(),
    }
}

fn msg(p: &str) -> Message<'_> {
    Message {
        topic: "t",
        partition: 0,
        offset: 7,
        timestamp_ms: Some(1),
        key: None,
        payload: Some(p.as_bytes()),
        headers: None,
    }
}

#[test]
fn encode_allocates_nothing_per_row() {
    let cols = vec![
        col("ts", "DateTime"),
        col("user_id", "UInt64"),
        col("session", "Int32"),
        col("score", "Float64"),
        col("ratio", "Float32"),
        col("country", "LowCardinality(String)"),
        col("tags", "Array(String)"),
        col("event", "LowCardinality(String)"),
        col("_offset", "UInt64"),
        col("note", "String"),
    ];
    let payloads: Vec<String> = (0..64)
        .map(|i| {
            format!(
                r#"{{"ts":"2024-05-{:02}T10:11:12Z","user_id":{},"session":-{},"score":{}.25,"ratio":0.5,"country":"DE","tags":["a","b\u00e9","c{}"],"event":"click","note":"line\n{}","extra":{{"x":[1,2]}}}}"#,
                i % 28 + 1,
                1_000_000 + i,
                i,
                i,
                i,
                i
            )
        })
        .collect();
    let mut plain = RowEncoder::new(&cols, EncoderOptions::default()).expect("encoder");
    let mut keyed = RowEncoder::new(&cols, EncoderOptions::default()).expect("encoder");
    keyed
        .set_shard_key(&["user_id".to_owned(), "country".to_owned()])
        .expect("shard key");
    let mut allocations = Vec::new();
    for (what, enc) in [
        ("encode", &mut plain),
        ("encode + shard key hash", &mut keyed),
    ] {
        let mut out = Vec::with_capacity(1 << 20);
        // Warm-up: scratch buffers reach their steady size.
        for p in &payloads {
            enc.encode(&msg(p), &mut out).expect("warm-up row");
        }
        out.clear();
        let rows = 20_000;
        let mut hashes = 0u64;
        let start = Instant::now();
        COUNTING.with(|c| c.set(true));
        let before = allocs();
        for i in 0..rows {
            if out.len() > (1 << 20) - 4096 {
                out.clear();
            }
            let row_start = out.len();
            enc.encode(&msg(&payloads[i % payloads.len()]), &mut out)
                .expect("row");
            if let Some(h) = enc.key_hash(&out[row_start..]) {
                hashes = hashes.wrapping_add(h | 1);
            }
        }
        let after = allocs();
        COUNTING.with(|c| c.set(false));
        let elapsed = start.elapsed();
        eprintln!(
            "{what}: {:.0} ns/row ({} byte payloads, debug/release as built)",
            elapsed.as_nanos() as f64 / rows as f64,
            payloads[0].len()
        );
        assert_eq!(
            hashes != 0,
            enc.has_shard_key(),
            "{what}: a hash per row exactly when keyed"
        );
        allocations.push((what, after - before, rows));
    }
    // The counter itself must work, or this test cannot fail.
    COUNTING.with(|c| c.set(true));
    let probe = allocs();
    drop(std::hint::black_box(vec![1u8; 16]));
    let probed = allocs() - probe;
    COUNTING.with(|c| c.set(false));
    assert!(probed >= 1, "the counting allocator does not count");
    for (what, n, rows) in allocations {
        assert_eq!(n, 0, "{what} allocated {n} times in {rows} rows");
    }
}

#[test]
fn nested_json_and_renames_allocate_nothing_per_row() {
    let cols = vec![
        col("user.id", "UInt64"),
        col("user.geo.cc", "LowCardinality(String)"),
        col("uid", "UInt64"),
        col("n.x", "Array(UInt32)"),
        col("n.y", "Array(String)"),
        col("_offset", "UInt64"),
    ];
    let payloads: Vec<String> = (0..64)
        .map(|i| {
            format!(
                r#"{{"user":{{"id":{i},"geo":{{"cc":"DE","city":"x"}},"name":"n\u00e9"}},"meta":{{"src":{{"id":{i}}}}},"n":[{{"x":{i},"y":"a"}},{{"x":2,"y":"b\n"}}],"extra":[1,2]}}"#
            )
        })
        .collect();
    let mut enc = RowEncoder::new(&cols, EncoderOptions::default()).expect("encoder");
    enc.set_renames(&[("uid".to_owned(), "/meta/src/id".to_owned())])
        .expect("rename");
    let mut out = Vec::with_capacity(1 << 20);
    for p in &payloads {
        enc.encode(&msg(p), &mut out).expect("warm-up row");
    }
    out.clear();
    let rows = 20_000;
    COUNTING.with(|c| c.set(true));
    let before = allocs();
    for i in 0..rows {
        if out.len() > (1 << 20) - 4096 {
            out.clear();
        }
        enc.encode(&msg(&payloads[i % payloads.len()]), &mut out)
            .expect("row");
    }
    let n = allocs() - before;
    COUNTING.with(|c| c.set(false));
    assert!(out.len() > rows.min(1000), "rows were written");
    assert_eq!(
        n, 0,
        "nested/renamed rows allocated {n} times in {rows} rows"
    );
}
