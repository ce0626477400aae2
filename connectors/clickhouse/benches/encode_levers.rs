//! Two levers of issue 20 measured on the encoder, on the demo events of
//! `src/events.rs` (`small`: 10 members, ~200 B; `wide`: 50 members,
//! ~1 KB).
//!
//! Group `json_scan`: spate's JSON scanner beside the two SIMD JSON
//! parsers for Rust, to see whether one of them should replace the scan.
//! Each benchmark does, per event, what the encoder needs before it writes
//! a value: every top-level member's key and its value, checked. A sum of
//! their lengths stands for the encoder's work on them.
//!
//! - `<schema>_spate_scan`: `scan_document` (validates, reports the raw
//!   value span; numbers and strings are parsed later, by `write_value`);
//! - `<schema>_sonic_lazy`: sonic-rs's lazy object iterator
//!   (`to_object_iter`: validated key and raw `LazyValue` text, the same
//!   split of work as spate's);
//! - `<schema>_simd_tape`: simd-json's tape (`fill_tape`, tape and
//!   buffers reused): numbers parsed, strings unescaped, so it does more
//!   than the scan. It parses in place, so each event is first copied into
//!   a reused buffer (a Kafka payload is borrowed from librdkafka);
//! - `<schema>_spate_encode`: spate's whole `RowEncoder::encode` (scan,
//!   key → column, every value parsed and written as RowBinary): the
//!   ceiling of what replacing the scan can save.
//!
//! Before timing, each parser is checked to see the same members with the
//! same key lengths on every event, and the heap allocations per event of
//! each are counted (a counting allocator, on this thread only) and
//! printed: spate's row path makes none (`tests/alloc_free.rs`), and a
//! replacement would have to keep it so.
//!
//! Group `native`: "one copy less". A batch is encoded as RowBinary rows
//! (one per message, in the driver) and the insert worker transposes it
//! into one Native block. An encoder writing straight into column
//! builders would still write every value once; what it would save is at
//! most the transposition:
//! - `<schema>_rowbinary`: the 1024 events encoded (what the driver does);
//! - `<schema>_transpose`: those rows transposed into a Native block with
//!   a kept `NativeScratch` (what the insert worker does, without LZ4).
//!
//! One iteration is a batch of 1024 distinct events; throughput in
//! elements (rows). Run:
//! `cargo bench -p spate_clickhouse --bench encode_levers`.

#[path = "../../../src/events.rs"]
mod events;

#[path = "../tests/counting_alloc/mod.rs"]
mod counting_alloc;

use counting_alloc::{allocs, COUNTING};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use events::Schema;
use simd_json::{Buffers, Node, Tape};
use spate_clickhouse::encode::bench_scan;
use spate_clickhouse::{
    parse_type, Column, EncoderOptions, NativeLayout, NativeScratch, RowEncoder,
};
use spate_core::record::Message;
use std::hint::black_box;
use std::time::Duration;

const ROWS: usize = 1024;

/// What one parser saw of one event: members and the sum of key lengths
/// and value lengths (raw text for the span parsers; the tape's strings
/// and one per static for simd-json, so only members and keys compare).
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
struct Seen {
    members: usize,
    key_bytes: usize,
    value_bytes: usize,
}

fn spate_scan(p: &[u8]) -> Seen {
    let mut s = Seen::default();
    bench_scan::members(p, |k, v| {
        s.members += 1;
        s.key_bytes += k.len();
        s.value_bytes += v.len();
    })
    .expect("valid JSON");
    s
}

fn sonic_lazy(p: &[u8]) -> Seen {
    let mut s = Seen::default();
    for member in sonic_rs::to_object_iter(p) {
        let (k, v) = member.expect("valid JSON");
        s.members += 1;
        s.key_bytes += k.len();
        s.value_bytes += v.as_raw_str().len();
    }
    s
}

/// simd-json's reusable state: the copy of the event, its buffers, the
/// tape (emptied between events, its capacity kept).
struct SimdTape {
    input: Vec<u8>,
    buffers: Buffers,
    tape: Option<Tape<'static>>,
}

impl SimdTape {
    fn new() -> Self {
        Self {
            input: Vec::with_capacity(4096),
            buffers: Buffers::new(4096),
            tape: Some(Tape::null().reset()),
        }
    }

    fn parse(&mut self, p: &[u8]) -> Seen {
        self.input.clear();
        self.input.extend_from_slice(p);
        let mut tape = self.tape.take().expect("the tape").reset();
        simd_json::fill_tape(&mut self.input, &mut self.buffers, &mut tape).expect("valid JSON");
        let nodes = &tape.0;
        let mut s = Seen::default();
        let Some(Node::Object { len, .. }) = nodes.first() else {
            panic!("not an object: {:?}", nodes.first());
        };
        let mut i = 1;
        for _ in 0..*len {
            let Node::String(k) = nodes[i] else {
                panic!("a key: {:?}", nodes[i]);
            };
            s.members += 1;
            s.key_bytes += k.len();
            i += 1;
            match nodes[i] {
                Node::String(v) => {
                    s.value_bytes += v.len();
                    i += 1;
                }
                Node::Static(_) => {
                    s.value_bytes += 1;
                    i += 1;
                }
                Node::Object { count, .. } | Node::Array { count, .. } => {
                    s.value_bytes += count;
                    i += 1 + count;
                }
            }
        }
        self.tape = Some(tape.reset());
        s
    }
}

fn payloads(schema: Schema) -> Vec<String> {
    (0..ROWS as u64)
        .map(|i| {
            let mut s = String::new();
            schema.write(i, &mut s);
            s
        })
        .collect()
}

fn columns(schema: Schema) -> Vec<Column> {
    schema
        .columns()
        .iter()
        .map(|&(name, ty)| Column::plain(name, parse_type(ty).expect("a ClickHouse type")))
        .collect()
}

fn encoder(schema: Schema) -> RowEncoder {
    RowEncoder::new(&columns(schema), EncoderOptions::default()).expect("encoder")
}

/// The batch as RowBinary rows, as a driver seals it.
fn rowbinary(enc: &mut RowEncoder, events: &[String], out: &mut Vec<u8>) {
    out.clear();
    for (k, p) in events.iter().enumerate() {
        enc.encode(&message(p, k as i64), out).expect("encodes");
    }
}

fn message(p: &str, offset: i64) -> Message<'_> {
    Message {
        topic: "events",
        partition: 0,
        offset,
        timestamp_ms: Some(1_700_000_000_000),
        key: None,
        payload: Some(p.as_bytes()),
        headers: None,
    }
}

/// Heap allocations per event of `f` over the whole batch, after one
/// warm-up pass (reused buffers grown).
fn allocations_per_event(events: &[String], mut f: impl FnMut(&[u8])) -> f64 {
    for p in events {
        f(p.as_bytes());
    }
    COUNTING.with(|c| c.set(true));
    let before = allocs();
    for p in events {
        f(p.as_bytes());
    }
    let n = allocs() - before;
    COUNTING.with(|c| c.set(false));
    n as f64 / events.len() as f64
}

/// The cases in turn, one batch each per round, 10 rounds of warm-up then
/// [`ROUNDS`]; prints each case's median per-round time per row and its
/// median per-round ratio to the first case. On a shared machine that
/// ratio is steadier than two criterion estimates taken seconds apart
/// (as in `benches/defaults.rs`).
fn interleaved(group: &str, cases: &mut [(&str, &mut dyn FnMut())]) {
    const ROUNDS: usize = 201;
    let mut times = vec![Vec::with_capacity(ROUNDS); cases.len()];
    for round in 0..ROUNDS + 10 {
        for ((_, f), t) in cases.iter_mut().zip(&mut times) {
            let start = std::time::Instant::now();
            f();
            if round >= 10 {
                t.push(start.elapsed().as_secs_f64());
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (i, (name, _)) in cases.iter().enumerate() {
        let ratio: Vec<f64> = times[i].iter().zip(&times[0]).map(|(a, b)| a / b).collect();
        println!(
            "{group} interleaved: {name}: {:.0} ns per row, {:.2} x {} ({ROUNDS} rounds)",
            median(times[i].clone()) * 1e9 / ROWS as f64,
            median(ratio),
            cases[0].0,
        );
    }
}

/// A group of this bench: 1024-row batches, throughput in rows.
fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(ROWS as u64));
    group
}

fn scans(c: &mut Criterion) {
    let mut group = group(c, "json_scan");
    for schema in [Schema::Small, Schema::Wide] {
        let name = schema.name();
        let events = payloads(schema);
        let mut simd = SimdTape::new();
        let mut enc = encoder(schema);
        let mut out = Vec::with_capacity(1 << 20);
        // Same members, same keys, on every event.
        for (k, p) in events.iter().enumerate() {
            let spate = spate_scan(p.as_bytes());
            let sonic = sonic_lazy(p.as_bytes());
            let tape = simd.parse(p.as_bytes());
            assert_eq!(spate, sonic, "{name} event {k}: spate and sonic-rs");
            assert_eq!(
                (spate.members, spate.key_bytes),
                (tape.members, tape.key_bytes),
                "{name} event {k}: spate and simd-json"
            );
            assert_eq!(spate.members, schema.columns().len(), "{name} event {k}");
        }
        let per_event = [
            (
                "spate_scan",
                allocations_per_event(&events, |p| {
                    black_box(spate_scan(p));
                }),
            ),
            (
                "sonic_lazy",
                allocations_per_event(&events, |p| {
                    black_box(sonic_lazy(p));
                }),
            ),
            (
                "simd_tape",
                allocations_per_event(&events, |p| {
                    black_box(simd.parse(p));
                }),
            ),
        ];
        for (parser, n) in per_event {
            eprintln!("json_scan: {name}_{parser}: {n:.2} heap allocations per event");
        }
        assert_eq!(per_event[0].1, 0.0, "spate's scan allocates");
        {
            let mut out = Vec::with_capacity(1 << 20);
            interleaved(
                "json_scan",
                &mut [
                    (&format!("{name}_spate_scan"), &mut || {
                        for p in &events {
                            black_box(spate_scan(p.as_bytes()));
                        }
                    }),
                    (&format!("{name}_sonic_lazy"), &mut || {
                        for p in &events {
                            black_box(sonic_lazy(p.as_bytes()));
                        }
                    }),
                    (&format!("{name}_simd_tape"), &mut || {
                        for p in &events {
                            black_box(simd.parse(p.as_bytes()));
                        }
                    }),
                    (&format!("{name}_spate_encode"), &mut || {
                        rowbinary(&mut enc, &events, &mut out);
                        black_box(out.len());
                    }),
                ],
            );
        }

        group.bench_function(format!("{name}_spate_scan"), |b| {
            b.iter(|| {
                for p in &events {
                    black_box(spate_scan(black_box(p.as_bytes())));
                }
            })
        });
        group.bench_function(format!("{name}_sonic_lazy"), |b| {
            b.iter(|| {
                for p in &events {
                    black_box(sonic_lazy(black_box(p.as_bytes())));
                }
            })
        });
        group.bench_function(format!("{name}_simd_tape"), |b| {
            b.iter(|| {
                for p in &events {
                    black_box(simd.parse(black_box(p.as_bytes())));
                }
            })
        });
        group.bench_function(format!("{name}_spate_encode"), |b| {
            b.iter(|| {
                if out.len() > (1 << 20) {
                    out.clear();
                }
                for (k, p) in events.iter().enumerate() {
                    enc.encode(&message(p, k as i64), &mut out)
                        .expect("encodes");
                }
                black_box(out.len());
            })
        });
    }
    group.finish();
}

fn transposition(c: &mut Criterion) {
    let mut group = group(c, "native");
    for schema in [Schema::Small, Schema::Wide] {
        let name = schema.name();
        let events = payloads(schema);
        let cols = columns(schema);
        let layout =
            NativeLayout::new(cols.iter().map(|c| (c.name.as_str(), &c.ty))).expect("a layout");
        let mut enc = encoder(schema);
        let mut rows = Vec::with_capacity(1 << 20);
        rowbinary(&mut enc, &events, &mut rows);
        let mut scratch = NativeScratch::default();
        let fresh = layout.transpose(&rows).expect("transposes");
        let kept = layout
            .transpose_in(&rows, &mut scratch)
            .expect("transposes");
        assert_eq!(fresh, kept, "{name}: a kept scratch gives the same block");
        scratch.give_body(kept, usize::MAX);
        let mut encoded = Vec::with_capacity(1 << 20);
        interleaved(
            "native",
            &mut [
                (&format!("{name}_rowbinary"), &mut || {
                    rowbinary(&mut enc, &events, &mut encoded);
                    black_box(encoded.len());
                }),
                (&format!("{name}_transpose"), &mut || {
                    let block = layout
                        .transpose_in(&rows, &mut scratch)
                        .expect("transposes");
                    black_box(block.len());
                    scratch.give_body(block, usize::MAX);
                }),
            ],
        );
        group.bench_function(format!("{name}_rowbinary"), |b| {
            b.iter(|| {
                rowbinary(&mut enc, &events, &mut rows);
                black_box(rows.len());
            })
        });
        group.bench_function(format!("{name}_transpose"), |b| {
            b.iter(|| {
                let block = layout
                    .transpose_in(&rows, &mut scratch)
                    .expect("transposes");
                black_box(block.len());
                scratch.give_body(block, usize::MAX);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, scans, transposition);
criterion_main!(benches);
