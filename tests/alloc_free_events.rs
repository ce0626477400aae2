//! Proves the per-row hot path makes no heap allocation per row after
//! warm-up, for both generated event schemas of `src/events.rs` (`small`,
//! `wide`, the ones `benches/hot_path.rs` measures):
//! - `encode`: `RowEncoder::encode`;
//! - `encode + route`: the ClickHouse encoder as the runtime's `RowEncode`
//!   keyed on `user_id`: encode into a scratch row, `route_hash`, slot →
//!   shard, append to that shard's buffer (what `EncodeChain` does per row);
//! - the driver's real `EncodeChain::push`, keyed and unkeyed: no allocation
//!   per row, only one per chunk opened (the chunk's list of lane pieces).
//!
//! Alone in its test binary because it installs a counting global
//! allocator.

#[path = "../src/events.rs"]
mod events;

use events::Schema;
use spate_clickhouse::{parse_type, ChRowEncoder, Column, EncoderOptions, RowEncoder};
use spate_core::metrics::Metrics;
use spate_core::pipeline::{Chain, ChainCtx, EncodeChain, SinkOptions};
use spate_core::record::{Message, PartitionId};
use spate_core::sink::{BatchLimits, RowEncode, ShardQueues};
use spate_core::source::LaneId;
use std::sync::Arc;
use std::time::Duration;

#[path = "../connectors/clickhouse/tests/counting_alloc/mod.rs"]
mod counting_alloc;

use counting_alloc::{allocs, COUNTING};

/// Allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    COUNTING.with(|c| c.set(true));
    let before = allocs();
    f();
    let after = allocs();
    COUNTING.with(|c| c.set(false));
    after - before
}

const EVENTS: usize = 256;
const ROWS: usize = 20_000;
const SHARDS: usize = 2;
const OUT_BYTES: usize = 1 << 20;

fn columns(schema: Schema) -> Vec<Column> {
    schema
        .columns()
        .iter()
        .map(|&(name, ty)| Column::plain(name, parse_type(ty).expect("type")))
        .collect()
}

fn payloads(schema: Schema) -> Vec<String> {
    (0..EVENTS as u64)
        .map(|i| {
            let mut s = String::new();
            schema.write(i, &mut s);
            s
        })
        .collect()
}

fn msg(p: &str, offset: usize) -> Message<'_> {
    Message {
        topic: "events",
        partition: 0,
        offset: offset as i64,
        timestamp_ms: Some(1),
        key: None,
        payload: Some(p.as_bytes()),
        headers: None,
    }
}

fn encoder(schema: Schema, keyed: bool) -> RowEncoder {
    let mut enc = RowEncoder::new(&columns(schema), EncoderOptions::default()).expect("encoder");
    if keyed {
        enc.set_shard_key(&["user_id".to_owned()])
            .expect("shard key");
    }
    enc
}

/// `RowEncoder::encode` alone: allocations in `ROWS` rows after warm-up.
fn encode(schema: Schema, payloads: &[String]) -> u64 {
    let mut enc = encoder(schema, false);
    let mut out = Vec::with_capacity(OUT_BYTES + (1 << 16));
    for (i, p) in payloads.iter().enumerate() {
        enc.encode(&msg(p, i), &mut out).expect("warm-up row");
    }
    out.clear();
    allocations(|| {
        for i in 0..ROWS {
            if out.len() > OUT_BYTES {
                out.clear();
            }
            enc.encode(&msg(&payloads[i % EVENTS], i), &mut out)
                .expect("row");
        }
    })
}

/// Encode into a scratch row, hash its key, append it to its slot's shard:
/// `EncodeChain`'s keyed step on the `RowEncode` the runtime gets.
fn encode_route(schema: Schema, payloads: &[String]) -> u64 {
    let mut enc = ChRowEncoder(encoder(schema, true));
    assert!(enc.routes_by_key());
    let slots: Vec<u16> = (0..SHARDS as u16).collect();
    let mut row = Vec::with_capacity(512);
    let mut shards: Vec<Vec<u8>> = (0..SHARDS)
        .map(|_| Vec::with_capacity(OUT_BYTES + (1 << 16)))
        .collect();
    let mut per_shard = [0u64; SHARDS];
    let mut step = |i: usize, per_shard: &mut [u64; SHARDS]| {
        row.clear();
        enc.encode(&msg(&payloads[i % EVENTS], i), &mut row)
            .expect("row");
        let hash = enc.route_hash(&row).expect("a keyed row hashes");
        let shard = usize::from(slots[(hash % slots.len() as u64) as usize]);
        let out = &mut shards[shard];
        if out.len() > OUT_BYTES {
            out.clear();
        }
        out.extend_from_slice(&row);
        per_shard[shard] += 1;
    };
    for i in 0..EVENTS {
        step(i, &mut per_shard);
    }
    let n = allocations(|| {
        for i in 0..ROWS {
            step(i, &mut per_shard);
        }
    });
    assert!(
        per_shard.iter().all(|&r| r > (ROWS / 4) as u64),
        "{schema:?}: rows per shard {per_shard:?}"
    );
    n
}

/// The driver's `Chain::push` on an `EncodeChain`: allocations in `ROWS`
/// rows, after a warm-up of as many rows and a flush (so the open chunks'
/// buffers have their steady size), with limits that seal no chunk
/// meanwhile.
fn chain_push(schema: Schema, payloads: &[String], keyed: bool) -> u64 {
    let (queues, mut rx) = ShardQueues::new(SHARDS, usize::MAX / 2, usize::MAX / 4);
    let ctx = ChainCtx {
        thread: 0,
        queues,
        options: SinkOptions {
            limits: BatchLimits {
                rows: u64::MAX,
                bytes: 1 << 30,
                interval: Duration::from_secs(3600),
                jitter: 0.0,
                sizing: spate_core::sink::RowSizing::Fixed,
            },
        },
        metrics: Arc::new(Metrics::new()),
        clock: spate_core::clock::system(),
    };
    let slots: Arc<[u16]> = (0..SHARDS as u16).collect();
    let mut chain = EncodeChain::with_slots(ChRowEncoder(encoder(schema, keyed)), &ctx, slots);
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("events", 0), None);
    let mut offset = 0;
    let mut push = |chain: &mut EncodeChain<ChRowEncoder>| {
        chain
            .push(slot, &msg(&payloads[offset % EVENTS], offset))
            .expect("row");
        offset += 1;
    };
    for _ in 0..ROWS {
        push(&mut chain);
    }
    chain.flush().expect("flush");
    let n = allocations(|| {
        for _ in 0..ROWS {
            push(&mut chain);
        }
    });
    chain.flush().expect("flush");
    let rows: u64 = rx
        .iter_mut()
        .map(|r| {
            std::iter::from_fn(|| r.try_recv())
                .map(|c| c.rows)
                .sum::<u64>()
        })
        .sum();
    assert_eq!(
        rows,
        2 * ROWS as u64,
        "{schema:?}: every row reached a queue"
    );
    n
}

#[test]
fn hot_path_allocates_nothing_per_row_for_both_schemas() {
    let mut results = Vec::new();
    for schema in [Schema::Small, Schema::Wide] {
        let payloads = payloads(schema);
        results.push((schema, "encode", encode(schema, &payloads), 0));
        results.push((schema, "encode + route", encode_route(schema, &payloads), 0));
        // One allocation per chunk opened: its first row pushes the lane's
        // piece into the chunk's (fresh) piece list. Keyed rows open a
        // chunk on each shard, unkeyed ones one.
        results.push((
            schema,
            "EncodeChain::push keyed",
            chain_push(schema, &payloads, true),
            SHARDS as u64,
        ));
        results.push((
            schema,
            "EncodeChain::push unkeyed",
            chain_push(schema, &payloads, false),
            1,
        ));
    }
    // The counter itself must work, or this test cannot fail.
    let probed = allocations(|| drop(std::hint::black_box(vec![1u8; 16])));
    assert!(probed >= 1, "the counting allocator does not count");
    for (schema, what, n, per_chunk) in results {
        eprintln!("{schema:?} {what}: {n} allocations in {ROWS} rows");
        assert!(
            n <= per_chunk,
            "{schema:?} {what} allocated {n} times in {ROWS} rows (at most {per_chunk} expected)"
        );
    }
}
