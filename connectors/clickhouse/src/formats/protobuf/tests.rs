//! Protobuf decoding against the JSON encoder: each message must make the
//! very row the JSON encoder makes of the same values.

use super::*;
use crate::encode::EncoderOptions;
use crate::formats::registry::{RegisteredSchema, RegistryConfig};
use crate::formats::{build, FormatSpec};
use crate::schema::{Column, DefaultKind};
use crate::types::parse_type;
use spate_core::sink::RowEncode;

pub(crate) const PROTO: &str = r#"syntax = "proto3";
package t;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message City { string name = 1; }
message Geo { double lat = 1; City city = 2; }
enum Kind { KIND_A = 0; KIND_B = 1; }
message Event {
  uint64 id = 1; string name = 2; sint64 delta = 3; bool ok = 4; double score = 5; float f = 6;
  Kind kind = 7; Kind kind_s = 8;
  repeated string tags = 9; repeated int64 nums = 10;
  map<string, int64> attrs = 11;
  google.protobuf.Timestamp ts = 12; google.protobuf.Timestamp ts_s = 13;
  google.protobuf.Int64Value maybe = 14; google.protobuf.StringValue maybe_s = 15;
  Geo geo = 16; fixed32 fx = 17; sfixed64 sfx = 18; int32 neg = 19; string ignored = 20;
}
"#;

fn col(name: &str, ty: &str) -> Column {
    Column {
        name: name.into(),
        ty: parse_type(ty).unwrap(),
        default_kind: DefaultKind::None,
        default_expression: String::new(),
    }
}

fn table() -> Vec<Column> {
    [
        ("id", "UInt64"),
        ("name", "String"),
        ("delta", "Int64"),
        ("ok", "UInt8"),
        ("score", "Float64"),
        ("f", "Float32"),
        ("kind", "Enum8('KIND_A' = 0, 'KIND_B' = 1)"),
        ("kind_s", "String"),
        ("tags", "Array(String)"),
        ("nums", "Array(Int64)"),
        ("attrs", "Map(String, Int64)"),
        ("ts", "DateTime64(3)"),
        ("ts_s", "DateTime"),
        ("maybe", "Nullable(Int64)"),
        ("maybe_s", "Nullable(String)"),
        ("geo.lat", "Float64"),
        ("geo.city.name", "String"),
        ("fx", "UInt32"),
        ("sfx", "Int64"),
        ("neg", "Int32"),
        ("_offset", "UInt64"),
    ]
    .iter()
    .map(|(n, t)| col(n, t))
    .collect()
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn tag(out: &mut Vec<u8>, number: u64, wt: u64) {
    varint(out, number << 3 | wt);
}

fn len(out: &mut Vec<u8>, number: u64, b: &[u8]) {
    tag(out, number, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub(crate) fn message(full: bool) -> Vec<u8> {
    let mut m = Vec::new();
    // Fields out of order, a repeated field split in two runs.
    tag(&mut m, 19, 0);
    varint(&mut m, (-5i64) as u64);
    tag(&mut m, 1, 0);
    varint(&mut m, 123_456_789_012);
    len(&mut m, 2, "héllo \"x\"".as_bytes());
    tag(&mut m, 3, 0);
    varint(&mut m, 2 * 1000 - 1); // zig-zag of -1000
    tag(&mut m, 4, 0);
    varint(&mut m, 1);
    tag(&mut m, 5, 1);
    m.extend_from_slice(&1e100f64.to_le_bytes());
    tag(&mut m, 6, 5);
    m.extend_from_slice(&2.5f32.to_le_bytes());
    tag(&mut m, 7, 0);
    varint(&mut m, 1);
    len(&mut m, 9, b"a");
    let mut packed = Vec::new();
    for x in [3i64, -7] {
        varint(&mut packed, x as u64);
    }
    len(&mut m, 10, &packed);
    len(&mut m, 9, b"b");
    let mut entry = Vec::new();
    len(&mut entry, 1, b"k");
    tag(&mut entry, 2, 0);
    varint(&mut entry, (-1i64) as u64);
    len(&mut m, 11, &entry);
    let mut ts = Vec::new();
    tag(&mut ts, 1, 0);
    varint(&mut ts, 1_704_164_645);
    tag(&mut ts, 2, 0);
    varint(&mut ts, 678_000_000);
    len(&mut m, 12, &ts);
    len(&mut m, 13, &ts);
    if full {
        let mut w = Vec::new();
        tag(&mut w, 1, 0);
        varint(&mut w, 42);
        len(&mut m, 14, &w);
        let mut w = Vec::new();
        len(&mut w, 1, b"s");
        len(&mut m, 15, &w);
        let (mut geo, mut city) = (Vec::new(), Vec::new());
        tag(&mut geo, 1, 1);
        geo.extend_from_slice(&52.5f64.to_le_bytes());
        len(&mut city, 1, b"Berlin");
        len(&mut geo, 2, &city);
        len(&mut m, 16, &geo);
    }
    tag(&mut m, 17, 5);
    m.extend_from_slice(&4_000_000_000u32.to_le_bytes());
    tag(&mut m, 18, 1);
    m.extend_from_slice(&(-9i64).to_le_bytes());
    len(&mut m, 20, b"skipped");
    m
}

fn json(full: bool) -> String {
    let extra = if full {
        r#","maybe":42,"maybe_s":"s","geo.lat":52.5,"geo.city.name":"Berlin""#
    } else {
        ""
    };
    format!(
        r#"{{"id":123456789012,"name":"héllo \"x\"","delta":-1000,"ok":1,"score":1e100,"f":2.5,
        "kind":"KIND_B","kind_s":"KIND_A","tags":["a","b"],"nums":[3,-7],"attrs":{{"k":-1}},
        "ts":1704164645.678,"ts_s":1704164645,"fx":4000000000,"sfx":-9,"neg":-5{extra}}}"#
    )
}

fn msg(payload: &[u8]) -> Message<'_> {
    Message {
        topic: "t",
        partition: 0,
        offset: 5,
        timestamp_ms: None,
        key: None,
        payload: Some(payload),
        headers: None,
    }
}

fn check(format: FormatSpec, frame: impl Fn(Vec<u8>) -> Vec<u8>) {
    let mut enc = build(&format, &table(), EncoderOptions::default(), &[]).unwrap();
    let mut js = crate::RowEncoder::new(&table(), EncoderOptions::default()).unwrap();
    for full in [true, false] {
        let (mut a, mut j) = (Vec::new(), Vec::new());
        enc.encode(&msg(&frame(message(full))), &mut a).unwrap();
        js.encode(&msg(json(full).as_bytes()), &mut j).unwrap();
        assert_eq!(a, j, "full: {full}");
    }
}

#[test]
fn descriptor_messages_make_the_row_json_makes() {
    let set = compile_proto("event.proto", PROTO).unwrap();
    let source = ProtobufSource::from_descriptor_set(&set, "t.Event").unwrap();
    check(FormatSpec::Protobuf(source), |m| m);
    assert!(ProtobufSource::from_descriptor_set(&set, "t.Nope").is_err());
    assert!(ProtobufSource::from_descriptor_set(b"\xff\xff", "t.Event").is_err());
}

#[test]
fn registry_messages_are_framed_with_message_indexes() {
    let r = SchemaRegistry::new(&RegistryConfig {
        url: "http://127.0.0.1:1".into(),
        ..RegistryConfig::default()
    })
    .unwrap();
    r.preload(RegisteredSchema {
        id: 3,
        schema_type: SchemaType::Protobuf,
        schema: PROTO.into(),
    });
    let r = Arc::new(r);
    // Event is the third top-level message: indexes [2] (count 1, zig-zag).
    check(
        FormatSpec::Protobuf(ProtobufSource::Registry(r.clone())),
        |m| {
            let mut b = vec![0, 0, 0, 0, 3, 2, 4];
            b.extend_from_slice(&m);
            b
        },
    );
    let mut enc = build(
        &FormatSpec::Protobuf(ProtobufSource::Registry(r)),
        &table(),
        EncoderOptions::default(),
        &[],
    )
    .unwrap();
    // Indexes [0] (the single 0 byte) name City: only its field 1 exists,
    // and field 1 of City is a string, not Event's uint64 id.
    let mut b = vec![0, 0, 0, 0, 3, 0];
    b.extend_from_slice(&message(true));
    let e = enc.encode(&msg(&b), &mut Vec::new()).unwrap_err();
    assert!(e.reason.contains("wire type"), "{e:?}");
    let e = enc.encode(&msg(b"\x05junk"), &mut Vec::new()).unwrap_err();
    assert!(e.reason.contains("magic byte 0x05"), "{e:?}");
    // A negative index count (zig-zag 1): a bad message, not a panic.
    let e = enc
        .encode(&msg(b"\0\0\0\0\x03\x01\x08\x01"), &mut Vec::new())
        .unwrap_err();
    assert!(e.reason.contains("-1 message indexes"), "{e:?}");
}
