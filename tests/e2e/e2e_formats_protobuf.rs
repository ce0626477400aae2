//! End to end: `--format protobuf` through the `spate` binary, against the
//! real broker and both ClickHouse servers: 100 000 messages of a message
//! type covering every mapping (scalars of each wire type, an enum into
//! Enum8 and into String, repeated into Array, packed and not, map<> into
//! Map on 26.9, Timestamp into DateTime/DateTime64, wrappers into Nullable,
//! a nested message onto dotted columns), once Confluent-framed through the
//! test schema registry (the `.proto` compiled at run time) and once plain
//! with a descriptor file. Each table must equal, row for row, the table
//! the JSON format makes of the same values; committed offsets = the ends.

#![allow(unknown_lints, clippy::manual_is_multiple_of)] // MSRV 1.86

use crate::support::*;
use spate_clickhouse::formats::{compile_proto, SchemaType};
use spate_clickhouse::{RegistryConfig, SchemaRegistry};
use std::time::Duration;

const MESSAGES: usize = 100_000;
const PARTITIONS: i32 = 2;

const PROTO: &str = r#"syntax = "proto3";
package spate.test;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message City { string name = 1; }
message Geo { double lat = 1; City city = 2; }
enum Kind { KIND_A = 0; KIND_B = 1; KIND_C = 2; }
message Event {
  uint64 id = 1; string name = 2; sint64 delta = 3; bool ok = 4; double score = 5;
  Kind kind = 7; Kind kind_s = 8;
  repeated string tags = 9; repeated int64 nums = 10;
  map<string, int64> attrs = 11;
  google.protobuf.Timestamp ts = 12;
  google.protobuf.Int64Value maybe = 14; google.protobuf.StringValue maybe_s = 15;
  Geo geo = 16; fixed32 fx = 17; sfixed64 sfx = 18; int32 neg = 19; string ignored = 20;
}
"#;

on_both_servers!(
    registry_messages_load_like_json,
    descriptor_messages_load_like_json
);

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn field(out: &mut Vec<u8>, number: u64, wt: u64) {
    varint(out, number << 3 | wt);
}

fn bytes(out: &mut Vec<u8>, number: u64, b: &[u8]) {
    field(out, number, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Message `i` as Protobuf and as the equivalent JSON.
fn event(i: usize, modern: bool) -> (Vec<u8>, String) {
    let n = i as i64;
    let name = match i % 3 {
        0 => format!("n{i}"),
        1 => format!("quo\"te\n{i} ✓"),
        _ => String::new(),
    };
    let mut m = Vec::new();
    let mut j = serde_json::Map::new();
    field(&mut m, 1, 0);
    varint(&mut m, i as u64);
    j.insert("id".into(), i.into());
    if !name.is_empty() {
        bytes(&mut m, 2, name.as_bytes());
    }
    j.insert("name".into(), name.into());
    let delta = n * 3 - 150_000;
    field(&mut m, 3, 0);
    varint(&mut m, ((delta << 1) ^ (delta >> 63)) as u64);
    j.insert("delta".into(), delta.into());
    if i % 2 == 0 {
        field(&mut m, 4, 0);
        varint(&mut m, 1);
    }
    j.insert("ok".into(), u8::from(i % 2 == 0).into());
    let score = n as f64 * 0.25 - 7.5;
    field(&mut m, 5, 1);
    m.extend_from_slice(&score.to_le_bytes());
    j.insert("score".into(), score.into());
    let kinds = ["KIND_A", "KIND_B", "KIND_C"];
    for (number, key) in [(7, "kind"), (8, "kind_s")] {
        let k = (i + number as usize) % 3;
        if k != 0 {
            field(&mut m, number, 0);
            varint(&mut m, k as u64);
        }
        j.insert(key.into(), kinds[k].into());
    }
    let tags: Vec<String> = (0..i % 4).map(|k| format!("t{i}_{k}")).collect();
    for t in &tags {
        bytes(&mut m, 9, t.as_bytes());
    }
    j.insert("tags".into(), tags.into());
    let nums: Vec<i64> = (0..(i % 3) as i64).map(|k| k * n - 2).collect();
    if !nums.is_empty() {
        let mut packed = Vec::new();
        for x in &nums {
            varint(&mut packed, *x as u64);
        }
        bytes(&mut m, 10, &packed);
    }
    j.insert("nums".into(), nums.into());
    for (k, v) in [("x", n), ("y", -n)] {
        let mut entry = Vec::new();
        bytes(&mut entry, 1, k.as_bytes());
        field(&mut entry, 2, 0);
        varint(&mut entry, v as u64);
        bytes(&mut m, 11, &entry);
    }
    j.insert("attrs".into(), serde_json::json!({"x": n, "y": -n}));
    let (secs, millis) = (1_700_000_000 + n, (i % 1000) as i64);
    let mut ts = Vec::new();
    field(&mut ts, 1, 0);
    varint(&mut ts, secs as u64);
    field(&mut ts, 2, 0);
    varint(&mut ts, (millis * 1_000_000) as u64);
    bytes(&mut m, 12, &ts);
    // DateTime64(3) keeps the milliseconds, DateTime (18.16) drops them.
    let ts_json = if modern {
        serde_json::Value::String(format!("{secs}.{millis:03}"))
    } else {
        secs.into()
    };
    j.insert("ts".into(), ts_json);
    if i % 4 != 0 {
        let mut w = Vec::new();
        field(&mut w, 1, 0);
        varint(&mut w, (n * 11) as u64);
        bytes(&mut m, 14, &w);
        j.insert("maybe".into(), (n * 11).into());
        let mut w = Vec::new();
        bytes(&mut w, 1, format!("s{i}").as_bytes());
        bytes(&mut m, 15, &w);
        j.insert("maybe_s".into(), format!("s{i}").into());
    }
    if i % 5 != 0 {
        let (mut geo, mut city) = (Vec::new(), Vec::new());
        let lat = n as f64 / 1024.0;
        field(&mut geo, 1, 1);
        geo.extend_from_slice(&lat.to_le_bytes());
        bytes(&mut city, 1, format!("c{}", i % 10).as_bytes());
        bytes(&mut geo, 2, &city);
        bytes(&mut m, 16, &geo);
        j.insert("geo.lat".into(), lat.into());
        j.insert("geo.city.name".into(), format!("c{}", i % 10).into());
    }
    field(&mut m, 17, 5);
    m.extend_from_slice(&(4_000_000_000u32 - i as u32).to_le_bytes());
    j.insert("fx".into(), (4_000_000_000u32 - i as u32).into());
    field(&mut m, 18, 1);
    m.extend_from_slice(&(-n * 1000).to_le_bytes());
    j.insert("sfx".into(), (-n * 1000).into());
    field(&mut m, 19, 0);
    varint(&mut m, (-n) as u64);
    j.insert("neg".into(), (-n).into());
    bytes(&mut m, 20, b"not a column");
    (m, serde_json::Value::Object(j).to_string())
}

fn table_ddl(table: &str, modern: bool) -> String {
    let (ts, attrs) = if modern {
        ("DateTime64(3)", ", attrs Map(String, Int64)")
    } else {
        ("DateTime", "")
    };
    format!(
        "CREATE TABLE {table} (id UInt64, name String, delta Int64, ok UInt8, score Float64, \
         kind Enum8('KIND_A' = 0, 'KIND_B' = 1, 'KIND_C' = 2), kind_s String, tags Array(String), \
         nums Array(Int64){attrs}, ts {ts}, maybe Nullable(Int64), maybe_s Nullable(String), \
         `geo.lat` Float64, `geo.city.name` String, fx UInt32, sfx Int64, neg Int32, \
         _partition UInt32, _offset UInt64) ENGINE = MergeTree() ORDER BY id"
    )
}

/// Load `MESSAGES` messages made by `frame(protobuf)` with `format_args`
/// and their JSON twins; both tables as TSV, ordered by id.
fn load_both(
    svc: &Services,
    label: &str,
    format_args: &[String],
    frame: impl Fn(Vec<u8>) -> Vec<u8>,
) {
    let _lock = ch_shared_lock();
    let modern = svc.is_modern();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db(&format!("e2e_fmt_pb_{label}"));
    let mut dumps = Vec::new();
    for (kind, extra) in [("protobuf", format_args.to_vec()), ("json", Vec::new())] {
        let table = format!("{db}.{kind}");
        ch.exec(&table_ddl(&table, modern));
        let topic = unique(&format!("t_fmt_pb_{label}_{kind}"));
        create_topic(&svc.brokers, &topic, PARTITIONS);
        let ends = produce_bytes(&svc.brokers, &topic, PARTITIONS, MESSAGES, |i| {
            let (pb, json) = event(i, modern);
            let p = (i % PARTITIONS as usize) as i32;
            (
                p,
                if kind == "json" {
                    json.into_bytes()
                } else {
                    frame(pb)
                },
            )
        });
        let group = unique("g_fmt_pb");
        let mut args = run_args(svc, &topic, &group, &table);
        args.push("--until-end".into());
        args.extend(extra);
        run(
            &format!("pb_{label}_{kind}"),
            &args,
            Duration::from_secs(300),
        )
        .assert_code(0);
        let want: Vec<Option<i64>> = ends.iter().map(|&c| Some(c)).collect();
        assert_eq!(
            committed(&svc.brokers, &group, &topic, PARTITIONS),
            want,
            "{kind}: committed = ends"
        );
        dumps.push(ch.text(&format!("SELECT * FROM {table} ORDER BY id"), "TSV"));
    }
    let (pb, json) = (&dumps[0], &dumps[1]);
    assert_eq!(json.lines().count(), MESSAGES, "every JSON message");
    // _partition and _offset agree too: both topics got message i at the
    // same place.
    if let Some((i, (a, b))) = pb
        .lines()
        .zip(json.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        panic!("{label}: row {i} differs:\nprotobuf {a}\njson     {b}");
    }
    assert_eq!(pb.lines().count(), MESSAGES, "every Protobuf message");
}

fn registry_messages_load_like_json(svc: Services) {
    let _timer = Timer::start("e2e_formats_protobuf registry");
    let reg = TestRegistry::start(Some(("pb", "pw")));
    let client = SchemaRegistry::new(&RegistryConfig {
        url: reg.url(),
        user: Some("pb".into()),
        password: Some("pw".into()),
        ..RegistryConfig::default()
    })
    .unwrap();
    let id = client
        .register("events-value", SchemaType::Protobuf, PROTO)
        .unwrap();
    let args: Vec<String> = [
        "--format",
        "protobuf",
        "--schema-registry",
        &format!(
            "http://pb:pw@127.0.0.1:{}",
            reg.url().rsplit(':').next().unwrap()
        ),
    ]
    .map(String::from)
    .to_vec();
    // Event is the third top-level message: indexes [2], written as the
    // zig-zag varints count 1 (2) and index 2 (4).
    load_both(&svc, "reg", &args, |m| {
        let mut b = vec![0];
        b.extend_from_slice(&id.to_be_bytes());
        b.extend_from_slice(&[2, 4]);
        b.extend_from_slice(&m);
        b
    });
    assert!(reg.fetches(id) >= 1, "the schema came from the registry");
}

fn descriptor_messages_load_like_json(svc: Services) {
    let _timer = Timer::start("e2e_formats_protobuf descriptor");
    let set = compile_proto("event.proto", PROTO).expect("compile the test schema");
    let path = log_dir().join(format!("{}.desc", unique("event")));
    std::fs::write(&path, set).expect("write the descriptor set");
    let args: Vec<String> = [
        "--format",
        "protobuf",
        "--protobuf-descriptor",
        path.to_str().unwrap(),
        "--protobuf-message",
        "spate.test.Event",
    ]
    .map(String::from)
    .to_vec();
    load_both(&svc, "desc", &args, |m| m);
}
