//! Avro decoding against the JSON encoder: each Avro record must make the
//! very row the JSON encoder makes of the same values.

use super::*;
use crate::encode::EncoderOptions;
use crate::formats::registry::{RegisteredSchema, RegistryConfig};
use crate::formats::{build, FormatSpec};
use crate::schema::{Column, DefaultKind};
use crate::types::parse_type;
use spate_core::sink::RowEncode;

fn col(name: &str, ty: &str) -> Column {
    Column {
        name: name.into(),
        ty: parse_type(ty).unwrap(),
        default_kind: DefaultKind::None,
        default_expression: String::new(),
    }
}

pub(crate) const SCHEMA: &str = r#"{"type":"record","name":"Event","namespace":"t","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"},
  {"name":"opt","type":["null","string"],"default":null},
  {"name":"score","type":"double"},
  {"name":"f","type":"float"},
  {"name":"ok","type":"boolean"},
  {"name":"day","type":{"type":"int","logicalType":"date"}},
  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"ts_s","type":{"type":"long","logicalType":"local-timestamp-micros"}},
  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
  {"name":"price","type":{"type":"fixed","name":"P8","size":8,"logicalType":"decimal","precision":18,"scale":2}},
  {"name":"uid","type":{"type":"string","logicalType":"uuid"}},
  {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["click","view"]}},
  {"name":"kind_s","type":"Kind"},
  {"name":"tags","type":{"type":"array","items":"string"}},
  {"name":"nums","type":{"type":"array","items":["null","long"]}},
  {"name":"attrs","type":{"type":"map","values":"long"}},
  {"name":"attrs_json","type":{"type":"map","values":"string"}},
  {"name":"dropped","type":"int"},
  {"name":"geo","type":["null",{"type":"record","name":"Geo","fields":[
     {"name":"lat","type":"double"},
     {"name":"city","type":{"type":"record","name":"City","fields":[{"name":"name","type":"string"}]}}]}]},
  {"name":"ignored","type":{"type":"record","name":"Ig","fields":[{"name":"x","type":{"type":"array","items":"Geo"}}]}}
]}"#;

fn table() -> Vec<Column> {
    vec![
        col("id", "UInt64"),
        col("name", "String"),
        col("opt", "Nullable(String)"),
        col("score", "Float64"),
        col("f", "Float32"),
        col("ok", "UInt8"),
        col("day", "Date"),
        col("ts", "DateTime64(3)"),
        col("ts_s", "DateTime"),
        col("amount", "Decimal(10, 2)"),
        col("price", "Decimal(18, 4)"),
        col("uid", "UUID"),
        col("kind", "Enum8('view' = 2, 'click' = 1)"),
        col("kind_s", "LowCardinality(String)"),
        col("tags", "Array(String)"),
        col("nums", "Array(Nullable(Int64))"),
        col("attrs", "Map(String, Int64)"),
        col("attrs_json", "String"),
        col("geo.lat", "Float64"),
        col("geo.city.name", "String"),
        col("_offset", "UInt64"),
        col("missing", "Int32"),
    ]
}

/// Record 1 (every branch taken with a value) or 2 (nulls, negatives,
/// empty collections, multi-block arrays).
pub(crate) fn record(second: bool) -> Vec<u8> {
    let mut b = Vec::new();
    b.confluent_header(7);
    b.avro_long(if second { 0 } else { 123_456_789_012 });
    b.avro_bytes(if second {
        b""
    } else {
        "héllo \"x\"".as_bytes()
    });
    if second {
        b.avro_long(0);
    } else {
        b.avro_long(1).avro_bytes(b"some");
    }
    b.avro_f64(if second { -0.5 } else { 1e100 });
    b.avro_f32(2.5);
    b.avro_bool(!second);
    b.avro_long(19_724);
    b.avro_long(1_704_164_645_678);
    b.avro_long(1_704_164_645_678_901);
    if second {
        b.avro_bytes(&(-1234i16).to_be_bytes());
    } else {
        b.avro_bytes(&1234i16.to_be_bytes());
    }
    b.extend_from_slice(&(if second { -5i64 } else { 99_999 }).to_be_bytes());
    b.avro_bytes(b"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
    b.avro_long(i64::from(second));
    b.avro_long(1);
    if second {
        b.avro_long(0);
    } else {
        // Two blocks, the second with a byte size (negative count).
        b.avro_long(1).avro_bytes(b"a");
        b.avro_long(-2)
            .avro_long(4)
            .avro_bytes(b"b")
            .avro_bytes(b"c");
        b.avro_long(0);
    }
    b.avro_long(3)
        .avro_long(0)
        .avro_long(1)
        .avro_long(-7)
        .avro_long(1)
        .avro_long(8);
    b.avro_long(0);
    b.avro_long(1).avro_bytes(b"k").avro_long(-1).avro_long(0);
    b.avro_long(1)
        .avro_bytes(b"q\"")
        .avro_bytes(b"v\n")
        .avro_long(0);
    b.avro_long(-77);
    if second {
        b.avro_long(0);
    } else {
        b.avro_long(1).avro_f64(52.5).avro_bytes(b"Berlin");
    }
    b.avro_long(1)
        .avro_f64(1.0)
        .avro_bytes(b"skipped")
        .avro_long(0);
    b
}

fn json(second: bool) -> String {
    let (id, name, opt, score, ok) = if second {
        ("0", r#""""#, "null", "-0.5", "0")
    } else {
        (
            "123456789012",
            r#""héllo \"x\"""#,
            r#""some""#,
            "1e100",
            "1",
        )
    };
    let geo = if second {
        String::new()
    } else {
        r#","geo.lat":52.5,"geo.city.name":"Berlin""#.into()
    };
    format!(
        r#"{{"id":{id},"name":{name},"opt":{opt},"score":{score},"f":2.5,"ok":{ok},"day":19724,
        "ts":1704164645.678,"ts_s":1704164645,"amount":"{}","price":"{}",
        "uid":"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0","kind":"{}","kind_s":"view",
        "tags":{},"nums":[null,-7,8],"attrs":{{"k":-1}},"attrs_json":"{{\"q\\\"\":\"v\\n\"}}"{geo}}}"#,
        if second { "-12.34" } else { "12.34" },
        if second { "-0.05" } else { "999.99" },
        if second { "view" } else { "click" },
        if second { "[]" } else { r#"["a","b","c"]"# },
    )
}

fn registry() -> Arc<SchemaRegistry> {
    let r = SchemaRegistry::new(&RegistryConfig {
        url: "http://127.0.0.1:1".into(),
        ..RegistryConfig::default()
    })
    .unwrap();
    r.preload(RegisteredSchema {
        id: 7,
        schema_type: SchemaType::Avro,
        schema: SCHEMA.into(),
    });
    r.preload(RegisteredSchema {
        id: 8,
        schema_type: SchemaType::Protobuf,
        schema: "syntax = \"proto3\";".into(),
    });
    r.preload(RegisteredSchema {
        id: 9,
        schema_type: SchemaType::Avro,
        schema: r#"{"type":"record","name":"R","fields":[{"name":"id","type":"string"}]}"#.into(),
    });
    Arc::new(r)
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

fn avro_encoder() -> crate::formats::FormatEncoder {
    build(
        &FormatSpec::Avro(registry()),
        &table(),
        EncoderOptions::default(),
        &[],
    )
    .unwrap()
}

#[test]
fn every_mapping_makes_the_row_json_makes() {
    let mut enc = avro_encoder();
    let mut js = crate::RowEncoder::new(&table(), EncoderOptions::default()).unwrap();
    for second in [false, true] {
        let (mut a, mut j) = (Vec::new(), Vec::new());
        enc.encode(&msg(&record(second)), &mut a).unwrap();
        js.encode(&msg(json(second).as_bytes()), &mut j).unwrap();
        assert_eq!(a, j, "record {}", if second { 2 } else { 1 });
    }
}

#[test]
fn bad_messages_name_what_is_wrong() {
    let mut enc = avro_encoder();
    let mut out = vec![1, 2, 3];
    let mut fails = |payload: &[u8]| {
        let e = enc.encode(&msg(payload), &mut out).unwrap_err();
        assert_eq!(out, [1, 2, 3]);
        e
    };
    let e = fails(b"{\"json\": 1}");
    assert!(e.reason.contains("magic byte 0x7b, expected 0x00"), "{e:?}");
    assert!(fails(&[0, 0, 0]).reason.contains("shorter than"));
    let mut cut = record(false);
    cut.truncate(cut.len() - 3);
    assert!(fails(&cut).reason.contains("ends early"));
    let mut long = record(false);
    long.push(0);
    assert!(fails(&long)
        .reason
        .contains("1 bytes after the Avro record"));
    let e = fails(&[0, 0, 0, 0, 8, 0]);
    assert!(e.reason.contains("Protobuf schema, not Avro"), "{e:?}");
    // id 9 writes `id` as a string: not a UInt64 for this value.
    let mut b = Vec::new();
    b.confluent_header(9).avro_bytes(b"x1");
    let e = fails(&b);
    assert_eq!(e.column.as_deref(), Some("id"));
    assert_eq!(e.value.as_deref(), Some("x1"));
    assert!(
        e.reason.starts_with("Avro field `id` (schema id 9)"),
        "{e:?}"
    );
}
