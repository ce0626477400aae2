//! Micro benchmark of what server-side DEFAULTs cost on servers without
//! `RowBinaryWithDefaults` (18.16; README "Rows", issue 17): a batch of
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
//! The figure is the ratio of the `defaults_*` times to `plain` (in the
//! bench README and the note), measured in one run. Run:
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

fn batches(c: &mut Criterion) {
    let mut group = c.benchmark_group("defaults_18_16");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(ROWS as u64));
    for mut case in [
        case("plain", false, false),
        case("defaults_all_present", true, false),
        case("defaults_half_missing", true, true),
    ] {
        let mut rows = Vec::with_capacity(1 << 20);
        group.bench_function(case.name, |b| {
            b.iter(|| {
                rows.clear();
                for (k, p) in case.payloads.iter().enumerate() {
                    case.encoder
                        .encode(&msg(p, k as i64), &mut rows)
                        .expect("a generated event encodes");
                }
                black_box(case.layout.transpose(&rows).expect("transpose").len())
            });
        });
    }
    group.finish();
}

criterion_group!(benches, batches);
criterion_main!(benches);
