//! Micro benchmarks of the per-row hot path of a driver thread: a JSON Kafka
//! message decoded into the target table's columns and encoded as one
//! RowBinary row, optionally routed to a shard by its key, and appended to
//! the shard's open chunk. No threads, brokers or servers.
//!
//! For each event schema of `src/events.rs` (`small`: 10 columns, ~200 B;
//! `wide`: 50 columns, ~1 KB):
//! - `<schema>_encode`: [`RowEncoder::encode`] alone, into a reused buffer
//!   cleared every MiB;
//! - `<schema>_encode_route`: the driver's real per-row call,
//!   [`Chain::push`] on an [`EncodeChain`] with the ClickHouse encoder keyed
//!   on `user_id` over 2 shards (slot table `[0, 1]`): encode into the
//!   chain's scratch row, `cityHash64` of the key, slot → shard, append to
//!   that shard's open chunk (sealed chunks are received and dropped);
//! - `<schema>_chain_unkeyed`: the same chain without a shard key (rows are
//!   encoded straight into the open chunk), so `encode_route` minus this is
//!   the cost of routing.
//!
//! Two groups of the same benchmarks:
//! - `hot_path`: one iteration is a batch of 1024 distinct pre-generated
//!   events, throughput in JSON bytes (criterion prints MiB/s; time per row
//!   is the time divided by 1024);
//! - `hot_path_per_row`: one iteration is one event (cycling through the
//!   same 1024), throughput in elements, so the time printed is per row.
//!
//! Results land in `target/criterion/<group>/<bench>/new/estimates.json`.
//! Run: `cargo bench --bench hot_path` (about a minute on 2 cores).

#[path = "../src/events.rs"]
mod events;

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use events::Schema;
use spate_clickhouse::{parse_type, ChRowEncoder, Column, EncoderOptions, RowEncoder};
use spate_core::metrics::Metrics;
use spate_core::pipeline::{Chain, ChainCtx, EncodeChain, SinkOptions};
use spate_core::record::{Message, PartitionId};
use spate_core::sink::{ShardQueues, ShardReceiver};
use spate_core::source::LaneId;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

/// Distinct events per batch (a power of two: indices wrap with a mask).
const ROWS: usize = 1024;
/// Shards of the routed chain, weight 1 each.
const SHARDS: u16 = 2;
/// The shard key of the routed chain (a column of both schemas).
const SHARD_KEY: &str = "user_id";
/// The `encode` benchmark clears its buffer past this size.
const OUT_BYTES: usize = 1 << 20;

/// Pre-generated events of one schema and its table's columns.
struct Fixture {
    schema: Schema,
    payloads: Vec<String>,
    json_bytes: u64,
    columns: Vec<Column>,
}

impl Fixture {
    fn new(schema: Schema) -> Self {
        let payloads: Vec<String> = (0..ROWS as u64)
            .map(|i| {
                let mut s = String::new();
                schema.write(i, &mut s);
                s
            })
            .collect();
        let columns = schema
            .columns()
            .iter()
            .map(|&(name, ty)| Column::plain(name, parse_type(ty).expect("a ClickHouse type")))
            .collect();
        Self {
            schema,
            json_bytes: payloads.iter().map(|p| p.len() as u64).sum(),
            payloads,
            columns,
        }
    }

    fn msg(&self, k: usize, offset: i64) -> Message<'_> {
        Message {
            topic: "events",
            partition: 0,
            offset,
            timestamp_ms: Some(1_700_000_000_000),
            key: None,
            payload: Some(self.payloads[k].as_bytes()),
            headers: None,
        }
    }

    fn encoder(&self, keyed: bool) -> RowEncoder {
        let mut enc = RowEncoder::new(&self.columns, EncoderOptions::default()).expect("encoder");
        if keyed {
            enc.set_shard_key(&[SHARD_KEY.to_owned()])
                .expect("shard key");
        }
        enc
    }

    /// The driver's chain over [`SHARDS`] shards, with one lane.
    fn chain(&self, keyed: bool) -> Routed {
        let (queues, rx) = ShardQueues::new(usize::from(SHARDS), usize::MAX / 2, usize::MAX / 4);
        let ctx = ChainCtx {
            thread: 0,
            queues,
            options: SinkOptions::default(),
            metrics: Arc::new(Metrics::new()),
            clock: spate_core::clock::system(),
        };
        let slots: Arc<[u16]> = (0..SHARDS).collect();
        let mut chain = EncodeChain::with_slots(ChRowEncoder(self.encoder(keyed)), &ctx, slots);
        let slot = chain.add_lane(LaneId(1), &PartitionId::new("events", 0), None);
        let mut routed = Routed {
            chain,
            slot,
            rx,
            offset: 0,
        };
        routed.check(self, keyed);
        routed
    }
}

/// An [`EncodeChain`] with its shard queues' receiving ends.
struct Routed {
    chain: EncodeChain<ChRowEncoder>,
    slot: usize,
    rx: Vec<ShardReceiver>,
    offset: i64,
}

impl Routed {
    #[inline]
    fn push(&mut self, f: &Fixture, k: usize) {
        self.offset += 1;
        self.chain
            .push(self.slot, &f.msg(k, self.offset))
            .expect("a generated event encodes");
    }

    /// Receive and drop sealed chunks (an insert worker's job); rows per shard.
    fn drain(&mut self) -> [u64; SHARDS as usize] {
        let mut rows = [0; SHARDS as usize];
        for (r, rx) in rows.iter_mut().zip(&mut self.rx) {
            while let Some(chunk) = rx.try_recv() {
                *r += chunk.rows;
            }
        }
        rows
    }

    /// Every event goes through; keyed rows spread over both shards.
    fn check(&mut self, f: &Fixture, keyed: bool) {
        for k in 0..ROWS {
            self.push(f, k);
        }
        self.chain.flush().expect("flush");
        let rows = self.drain();
        assert_eq!(rows.iter().sum::<u64>(), ROWS as u64, "{rows:?}");
        if keyed {
            assert!(rows.iter().all(|&r| r > ROWS as u64 / 4), "{rows:?}");
        }
    }
}

fn configure(group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
}

/// Group `hot_path`: one iteration = a batch of [`ROWS`] events.
fn batches(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_path");
    configure(&mut group);
    for schema in [Schema::Small, Schema::Wide] {
        let f = Fixture::new(schema);
        let name = f.schema.name();
        group.throughput(Throughput::Bytes(f.json_bytes));

        let mut enc = f.encoder(false);
        let mut out = Vec::with_capacity(OUT_BYTES + (1 << 16));
        group.bench_function(format!("{name}_encode"), |b| {
            b.iter(|| {
                if out.len() > OUT_BYTES {
                    out.clear();
                }
                for k in 0..ROWS {
                    enc.encode(&f.msg(k, k as i64), &mut out)
                        .expect("a generated event encodes");
                }
                black_box(out.len())
            });
        });

        for (bench, keyed) in [("encode_route", true), ("chain_unkeyed", false)] {
            let mut routed = f.chain(keyed);
            group.bench_function(format!("{name}_{bench}"), |b| {
                b.iter(|| {
                    for k in 0..ROWS {
                        routed.push(&f, k);
                    }
                    black_box(routed.drain())
                });
            });
        }
    }
    group.finish();
}

/// Group `hot_path_per_row`: one iteration = one event, so criterion's
/// time is the time per row.
fn per_row(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_path_per_row");
    configure(&mut group);
    group.throughput(Throughput::Elements(1));
    for schema in [Schema::Small, Schema::Wide] {
        let f = Fixture::new(schema);
        let name = f.schema.name();

        let mut enc = f.encoder(false);
        let mut out = Vec::with_capacity(OUT_BYTES + (1 << 16));
        let mut k = 0;
        group.bench_function(format!("{name}_encode"), |b| {
            b.iter(|| {
                if out.len() > OUT_BYTES {
                    out.clear();
                }
                k = (k + 1) & (ROWS - 1);
                enc.encode(&f.msg(k, k as i64), &mut out)
                    .expect("a generated event encodes");
                black_box(out.len())
            });
        });

        for (bench, keyed) in [("encode_route", true), ("chain_unkeyed", false)] {
            let mut routed = f.chain(keyed);
            let mut k = 0;
            group.bench_function(format!("{name}_{bench}"), |b| {
                b.iter(|| {
                    k = (k + 1) & (ROWS - 1);
                    routed.push(&f, k);
                    if k == 0 {
                        black_box(routed.drain());
                    }
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, batches, per_row);
criterion_main!(benches);
