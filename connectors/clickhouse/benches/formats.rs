//! Micro benchmark of the format decoders next to each other: the demo
//! events of `src/events.rs` (`small`: 10 columns, ~200 B of JSON; `wide`:
//! 50 columns, ~1 KB) decoded into one RowBinary row of the same table,
//! as JSON ([`spate_clickhouse::RowEncoder`]) and as Avro in the Confluent
//! wire format (the same values, converted by `spate gen`'s code).
//!
//! One iteration is a batch of 1024 distinct pre-generated events (the
//! time per row is the time divided by 1024); throughput in elements.
//! Run: `cargo bench -p spate_clickhouse --bench formats`.

#[path = "../../../src/events.rs"]
mod events;

/// The stand-in for the binary's `exit` module `gen_avro` names.
mod exit {
    #[derive(Debug)]
    pub struct Exit;
    impl Exit {
        pub fn usage(_: impl Into<String>) -> Self {
            Exit
        }
        pub fn failed(_: impl Into<String>) -> Self {
            Exit
        }
    }
}

#[path = "../../../src/gen_avro.rs"]
#[allow(dead_code, unused_imports)]
mod gen_avro;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use events::Schema;
use spate_clickhouse::formats::{RegisteredSchema, SchemaType};
use spate_clickhouse::{
    parse_type, Column, EncoderOptions, FormatEncoder, FormatSpec, RegistryConfig, SchemaRegistry,
};
use spate_core::record::Message;
use spate_core::sink::RowEncode;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

const ROWS: usize = 1024;

fn columns(schema: Schema) -> Vec<Column> {
    schema
        .columns()
        .iter()
        .map(|&(name, ty)| Column::plain(name, parse_type(ty).expect("type")))
        .collect()
}

fn msg(payload: &[u8]) -> Message<'_> {
    Message {
        topic: "bench",
        partition: 0,
        offset: 0,
        timestamp_ms: None,
        key: None,
        payload: Some(payload),
        headers: None,
    }
}

fn run(
    c: &mut Criterion,
    schema: Schema,
    label: &str,
    mut enc: FormatEncoder,
    payloads: &[Vec<u8>],
) {
    let mut g = c.benchmark_group("formats");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_secs(1));
    let mut out = Vec::with_capacity(1 << 20);
    g.bench_function(format!("{}_{label}", schema.name()), |b| {
        b.iter(|| {
            out.clear();
            for p in payloads {
                enc.encode(&msg(p), &mut out).expect("encode");
            }
            black_box(out.len())
        })
    });
    g.finish();
}

fn formats(c: &mut Criterion) {
    for schema in [Schema::Small, Schema::Wide] {
        let cols = columns(schema);
        let avro = gen_avro::AvroEvents::with_id(schema, 1);
        let (mut json, mut binary) = (Vec::new(), Vec::new());
        for i in 0..ROWS as u64 {
            let mut s = String::new();
            schema.write(i, &mut s);
            let mut b = Vec::new();
            avro.encode(&s, &mut b).expect("avro event");
            json.push(s.into_bytes());
            binary.push(b);
        }
        let registry = SchemaRegistry::new(&RegistryConfig {
            url: "http://127.0.0.1:1".into(),
            ..RegistryConfig::default()
        })
        .expect("registry");
        registry.preload(RegisteredSchema {
            id: 1,
            schema_type: SchemaType::Avro,
            schema: gen_avro::avro_schema(schema),
        });
        let opts = EncoderOptions::default();
        let json_enc = FormatEncoder::new(&FormatSpec::Json, &cols, opts, &[]).expect("json");
        let avro_spec = FormatSpec::Avro(Arc::new(registry));
        let avro_enc = FormatEncoder::new(&avro_spec, &cols, opts, &[]).expect("avro");
        run(c, schema, "json", json_enc, &json);
        run(c, schema, "avro", avro_enc, &binary);
    }
}

criterion_group!(benches, formats);
criterion_main!(benches);
