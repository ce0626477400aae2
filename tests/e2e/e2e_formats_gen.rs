//! End to end: `spate gen --format avro` (and `--format protobuf`)
//! registers the demo events' schema (the `.proto`) with the test registry
//! and produces them in the Confluent wire format; `spate run` in the same
//! format loads them into a table identical, row for row, to the one
//! `spate gen` + `spate run` make of the same events as JSON (both event
//! schemas, both ClickHouse servers).

#[path = "../../src/events.rs"]
mod events;

use crate::support::*;
use events::Schema;
use std::time::Duration;

const COUNT: &str = "20000";
const PARTITIONS: &str = "2";

on_both_servers!(
    avro_demo_events_load_like_json,
    protobuf_demo_events_load_like_json
);

/// `format` "json", or "avro"/"protobuf" through `registry`.
fn load(
    svc: &Services,
    schema: Schema,
    registry: Option<(&str, &TestRegistry)>,
    db: &str,
) -> String {
    let ch = Ch::connect(&svc.clickhouse_url);
    let format = registry.map_or("json", |(f, _)| f);
    let table = format!("{db}.{}_{format}", schema.name());
    let cols: Vec<String> = schema
        .columns()
        .iter()
        .map(|(n, t)| format!("{n} {t}"))
        .collect();
    ch.exec_with(
        &format!(
            "CREATE TABLE {table} ({}, _partition UInt32, _offset UInt64) ENGINE = MergeTree() ORDER BY (_partition, _offset)",
            cols.join(", ")
        ),
        // LowCardinality is experimental on 18.16; the setting is gone later.
        if svc.is_modern() {
            &[]
        } else {
            &[("allow_experimental_low_cardinality_type", "1")]
        },
    );
    let topic = unique(&format!("t_gen_{}_{format}", schema.name()));
    let mut gen: Vec<String> = [
        "gen",
        "--brokers",
        &svc.brokers,
        "--topic",
        &topic,
        "--count",
        COUNT,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    gen.extend(["--partitions", PARTITIONS, "--schema", schema.name()].map(String::from));
    let mut run_extra = vec!["--until-end".to_owned()];
    if let Some((format, reg)) = registry {
        for a in [&mut gen, &mut run_extra] {
            a.extend([
                "--format".into(),
                format.into(),
                "--schema-registry".into(),
                reg.url(),
            ]);
        }
    }
    run(&format!("gen_{format}"), &gen, Duration::from_secs(120)).assert_code(0);
    let group = unique("g_gen");
    let mut args = run_args(svc, &topic, &group, &table);
    args.extend(run_extra);
    run(&format!("run_{format}"), &args, Duration::from_secs(180)).assert_code(0);
    let ends = end_offsets(&svc.brokers, &topic, 2);
    assert_eq!(
        committed(&svc.brokers, &group, &topic, 2),
        ends.iter().map(|&e| Some(e)).collect::<Vec<_>>(),
        "{format}: committed = ends"
    );
    let names: Vec<&str> = schema.columns().iter().map(|(n, _)| *n).collect();
    ch.text(
        &format!(
            "SELECT _partition, _offset, {} FROM {table} ORDER BY _partition, _offset",
            names.join(", ")
        ),
        "TSV",
    )
}

fn avro_demo_events_load_like_json(svc: Services) {
    demo_events_load_like_json(svc, "avro");
}

fn protobuf_demo_events_load_like_json(svc: Services) {
    demo_events_load_like_json(svc, "protobuf");
}

fn demo_events_load_like_json(svc: Services, format: &str) {
    let _timer = Timer::start("e2e_formats_gen");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_fmt_gen");
    let reg = TestRegistry::start(None);
    for schema in [Schema::Small, Schema::Wide] {
        let json = load(&svc, schema, None, &db);
        let avro = load(&svc, schema, Some((format, &reg)), &db);
        assert_eq!(
            json.lines().count(),
            20_000,
            "{}: every JSON event",
            schema.name()
        );
        if let Some((i, (a, j))) = avro
            .lines()
            .zip(json.lines())
            .enumerate()
            .find(|(_, (a, j))| a != j)
        {
            panic!(
                "{} {format}: row {i} differs:\n{format} {a}\njson  {j}",
                schema.name()
            );
        }
        assert_eq!(
            avro.lines().count(),
            json.lines().count(),
            "{}: same row count",
            schema.name()
        );
    }
}
