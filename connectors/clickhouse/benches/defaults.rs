//! Micro benchmark of what server-side DEFAULTs cost on servers without
//! `RowBinaryWithDefaults` (18.16; docs/rows.md, issue 17): a batch of
//! 1024 JSON messages encoded into rows and transposed into the Native
//! bytes an insert sends, for the same 12-column table
//! `(id UInt64, user_id UInt64, ..., s String DEFAULT 'dflt', ts DateTime DEFAULT now())`:
//! - `plain`: the columns without DEFAULTs, every message has every key:
//!   RowBinary rows, one Native block (what the table costs without
//!   DEFAULTs);
//! - `defaults_all_present`: DEFAULT columns, every message has the keys:
//!   a flag byte per column, one block;
//! - `defaults_half_missing`: every other message lacks `s` and `ts`: two
//!   blocks, each naming only its columns (the server computes the rest).
//!
//! The figure is the ratio of the `defaults_*` times to `plain`. Before
//! criterion's groups, the three cases run interleaved, one batch each in
//! turn for 301 rounds, and the median per-round ratio is printed
//! (`defaults_18_16 interleaved: ...`): on a shared machine that ratio is
//! steadier than two criterion estimates taken seconds apart. Run:
//! `cargo bench -p spate_clickhouse --bench defaults`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use spate_clickhouse::{parse_type, Column, DefaultKind, EncoderOptions, NativeLayout, RowEncoder};
use spate_core::record::Message;
use std::hint::black_box;
use std::time::Duration;

const ROWS: usize = 1024;

const COLUMNS: &[(&str, &str)] = &[
    ("id", "UInt64"),
    ("user_id", "UInt64"),
    ("session", "String"),
    ("event", "LowCardinality(String)"),
    ("country", "LowCardinality(String)"),
    ("price", "Float64"),
    ("quantity", "UInt32"),
    ("ok", "UInt8"),
    ("tags", "Array(String)"),
    ("ref", "Nullable(String)"),
    ("s", "String"),
    ("ts", "DateTime"),
];

fn columns(with_defaults: bool) -> Vec<Column> {
    COLUMNS
        .iter()
        .map(|&(name, ty)| {
            let default = with_defaults && (name == "s" || name == "ts");
            Column {
                name: name.into(),
                ty: parse_type(ty).expect("a ClickHouse type"),
                default_kind: if default {
                    DefaultKind::Default
                } else {
                    DefaultKind::None
                },
                default_expression: match (default, name) {
                    (true, "s") => "'dflt'".into(),
                    (true, _) => "now()".into(),
                    _ => String::new(),
                },
            }
        })
        .collect()
}

fn payload(i: usize, all_keys: bool) -> String {
    let mut p = format!(
        r#"{{"id":{i},"user_id":{},"session":"s-{}","event":"view","country":"DE","price":{}.5,"quantity":{},"ok":1,"tags":["a","b"],"ref":null"#,
        i * 7919 % 100_000,
        i % 977,
        i % 300,
        i % 9
    );
    if all_keys {
        p.push_str(r#","s":"given","ts":1700000000"#);
    }
    p.push('}');
    p
}

struct Case {
    name: &'static str,
    encoder: RowEncoder,
    layout: NativeLayout,
    payloads: Vec<String>,
}

fn case(name: &'static str, with_defaults: bool, half_missing: bool) -> Case {
    let opts = EncoderOptions {
        with_defaults,
        ..EncoderOptions::default()
    };
    let encoder = RowEncoder::new(&columns(with_defaults), opts).expect("encoder");
    let layout = encoder.native_layout().expect("Native types");
    let payloads = (0..ROWS)
        .map(|i| payload(i, !(half_missing && i % 2 == 1)))
        .collect();
    Case {
        name,
        encoder,
        layout,
        payloads,
    }
}

fn msg(payload: &str, offset: i64) -> Message<'_> {
    Message {
        topic: "events",
        partition: 0,
        offset,
        timestamp_ms: Some(1_700_000_000_000),
        key: None,
        payload: Some(payload.as_bytes()),
        headers: None,
    }
}

/// One batch of `case`: encode every message, transpose; the bytes sent.
fn batch(case: &mut Case, rows: &mut Vec<u8>) -> usize {
    rows.clear();
    for (k, p) in case.payloads.iter().enumerate() {
        case.encoder
            .encode(&msg(p, k as i64), rows)
            .expect("a generated event encodes");
    }
    case.layout.transpose(rows).expect("transpose").len()
}

fn cases() -> [Case; 3] {
    [
        case("plain", false, false),
        case("defaults_all_present", true, false),
        case("defaults_half_missing", true, true),
    ]
}

/// The cases in turn, one batch each per round; the median ratio to
/// `plain` per round.
fn interleaved() {
    const ROUNDS: usize = 301;
    let mut cases = cases();
    let mut rows = Vec::with_capacity(1 << 20);
    let mut times = vec![Vec::with_capacity(ROUNDS); cases.len()];
    for round in 0..ROUNDS + 10 {
        for (case, t) in cases.iter_mut().zip(&mut times) {
            let start = std::time::Instant::now();
            black_box(batch(case, &mut rows));
            if round >= 10 {
                t.push(start.elapsed().as_secs_f64());
            }
        }
    }
    for (case, t) in cases.iter().zip(&times).skip(1) {
        let mut ratios: Vec<f64> = t.iter().zip(&times[0]).map(|(a, b)| a / b).collect();
        ratios.sort_by(f64::total_cmp);
        let q = |f: f64| ratios[((ratios.len() - 1) as f64 * f) as usize];
        println!(
            "defaults_18_16 interleaved: {} / plain = {:.2} (quartiles {:.2}..{:.2}, {ROUNDS} rounds)",
            case.name,
            q(0.5),
            q(0.25),
            q(0.75)
        );
    }
}

fn batches(c: &mut Criterion) {
    interleaved();
    let mut group = c.benchmark_group("defaults_18_16");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(ROWS as u64));
    for mut case in cases() {
        let mut rows = Vec::with_capacity(1 << 20);
        group.bench_function(case.name, |b| {
            b.iter(|| black_box(batch(&mut case, &mut rows)));
        });
    }
    group.finish();
}

criterion_group!(benches, batches);
criterion_main!(benches);
