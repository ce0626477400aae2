//! Values at pointers in every format that has fields, against the
//! messages the decoders' own tests decode.

use super::*;
use crate::formats::registry::{RegisteredSchema, RegistryConfig, SchemaRegistry, SchemaType};
use crate::formats::{CsvOptions, ProtobufSource};
use std::sync::Arc;

fn ptr(p: &str) -> FieldPointer {
    FieldPointer::parse(p).unwrap()
}

/// The value at `p` of `payload`, or why there is none.
fn fld(r: &mut FieldReader, payload: Option<&[u8]>, p: &str) -> Result<String, String> {
    let mut out = String::from("db.");
    r.read(payload, &ptr(p), &mut out)
        .map(|()| out[3..].to_owned())
}

fn registry(schema: RegisteredSchema) -> Arc<SchemaRegistry> {
    let r = SchemaRegistry::new(&RegistryConfig {
        url: "http://127.0.0.1:1".into(),
        ..RegistryConfig::default()
    })
    .unwrap();
    r.preload(schema);
    Arc::new(r)
}

#[test]
fn a_json_value_is_read_at_its_pointer_whatever_comes_around_it() {
    let r = &mut FieldReader::new(&FormatSpec::Json);
    let doc = br#"{"a":[1,{"t":"x"}],"meta":{"tenant":"acme","n":2},"type":"order","k":3.5,"b":true,"e\"sc":"y","s/l":"z"}"#;
    for (p, want) in [
        ("/type", "order"),
        ("/meta/tenant", "acme"),
        ("/meta/n", "2"),
        ("/k", "3.5"),
        ("/b", "true"),
        ("/a/1/t", "x"),
        ("/e\"sc", "y"),
        ("/s~1l", "z"),
    ] {
        assert_eq!(fld(r, Some(doc), p).as_deref(), Ok(want), "{p}");
    }
    for (p, says) in [
        ("/nope", "has no field /nope"),
        ("/meta", "is an object"),
        ("/a", "is an array"),
        ("/a/5/t", "has no field"),
        ("/type/x", "has no field"),
    ] {
        let e = fld(r, Some(doc), p).unwrap_err();
        assert!(e.contains(says), "{p}: {e}");
    }
    let e = fld(r, Some(b"{\"type\":"), "/type").unwrap_err();
    assert!(e.contains("not JSON"), "{e}");
    let e = fld(r, Some(b"{\"a\":1,,\"type\":\"x\"}"), "/type").unwrap_err();
    assert!(e.contains("not JSON"), "broken before the field: {e}");
    assert_eq!(
        fld(r, Some(b"{\"type\":\"x\",,,"), "/type").as_deref(),
        Ok("x"),
        "read only as far as the field (the encoder judges the rest)"
    );
    let e = fld(r, None, "/type").unwrap_err();
    assert!(e.contains("tombstone"), "{e}");
    assert_eq!(
        fld(r, Some(br#"{"type":null}"#), "/type").unwrap_err(),
        "the message has no field /type (or it is null)"
    );
}

#[test]
fn a_pointer_starts_with_a_slash() {
    assert!(FieldPointer::parse("type").is_err());
    assert_eq!(ptr("/a~01").tokens(), ["a~1".to_owned()]);
}

#[test]
fn an_avro_value_is_read_through_records_unions_maps_and_arrays() {
    use crate::formats::avro::tests::{record, SCHEMA};
    let avro = FormatSpec::Avro(registry(RegisteredSchema {
        id: 7,
        schema_type: SchemaType::Avro,
        schema: SCHEMA.into(),
    }));
    let r = &mut FieldReader::new(&avro);
    let (full, second) = (record(false), record(true));
    for (p, want) in [
        ("/id", "123456789012"),
        ("/name", "héllo \"x\""),
        ("/opt", "some"),
        ("/f", "2.5"),
        ("/ok", "true"),
        ("/kind", "click"),
        ("/kind_s", "view"),
        ("/tags/0", "a"),
        ("/tags/2", "c"),
        ("/nums/2", "8"),
        ("/attrs/k", "-1"),
        ("/dropped", "-77"),
        ("/geo/lat", "52.5"),
        ("/geo/city/name", "Berlin"),
        ("/uid", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"),
    ] {
        assert_eq!(fld(r, Some(&full), p).as_deref(), Ok(want), "{p}");
    }
    assert_eq!(fld(r, Some(&second), "/id").as_deref(), Ok("0"));
    assert_eq!(fld(r, Some(&second), "/score").as_deref(), Ok("-0.5"));
    assert_eq!(fld(r, Some(&second), "/kind").as_deref(), Ok("view"));
    for (payload, p, says) in [
        (&full, "/nope", "has no field /nope"),
        (&second, "/opt", "has no field /opt (or it is null)"),
        (&second, "/geo/lat", "has no field"),
        (&full, "/nums/0", "has no field"),
        (&full, "/tags/9", "has no field"),
        (&full, "/attrs/zz", "has no field"),
        (&full, "/geo", "is a record"),
        (&full, "/tags", "is an array"),
        (&full, "/attrs", "is a map"),
        (&full, "/id/x", "has no field"),
    ] {
        let e = fld(r, Some(payload), p).unwrap_err();
        assert!(e.contains(says), "{p}: {e}");
    }
    let e = fld(r, Some(&full[..12]), "/name").unwrap_err();
    assert!(e.contains("ends early") && e.contains("schema id 7"), "{e}");
    let e = fld(r, Some(b"\x05junk"), "/id").unwrap_err();
    assert!(e.contains("magic byte 0x05"), "{e}");
    // An id the registry cannot be asked about is waited for (as the
    // decoder waits), here for 10 ms, and named.
    let mut other = full.clone();
    other[4] = 8;
    let FormatSpec::Avro(registry) = &avro else {
        unreachable!()
    };
    registry.limit_waits(std::time::Duration::from_millis(10));
    let e = fld(r, Some(&other), "/id").unwrap_err();
    assert!(e.contains("schema id 8"), "{e}");
}

#[test]
fn a_protobuf_value_is_read_by_name_through_messages_and_wrappers() {
    use crate::formats::protobuf::tests::{message, PROTO};
    let set = crate::formats::compile_proto("event.proto", PROTO).unwrap();
    let plain = FormatSpec::Protobuf(ProtobufSource::from_descriptor_set(&set, "t.Event").unwrap());
    let framed = FormatSpec::Protobuf(ProtobufSource::Registry(registry(RegisteredSchema {
        id: 3,
        schema_type: SchemaType::Protobuf,
        schema: PROTO.into(),
    })));
    for (format, frame) in [(plain, &b""[..]), (framed, &[0u8, 0, 0, 0, 3, 2, 4][..])] {
        let r = &mut FieldReader::new(&format);
        let with = |m: Vec<u8>| [frame, &m].concat();
        let (full, bare) = (with(message(true)), with(message(false)));
        for (p, want) in [
            ("/id", "123456789012"),
            ("/name", "héllo \"x\""),
            ("/delta", "-1000"),
            ("/ok", "true"),
            ("/f", "2.5"),
            ("/kind", "KIND_B"),
            ("/kind_s", "KIND_A"),
            ("/maybe", "42"),
            ("/maybe_s", "s"),
            ("/geo/city/name", "Berlin"),
            ("/fx", "4000000000"),
            ("/sfx", "-9"),
            ("/neg", "-5"),
        ] {
            assert_eq!(fld(r, Some(&full), p).as_deref(), Ok(want), "{p}");
        }
        for (payload, p, says) in [
            (&full, "/nope", "has no field /nope"),
            (&bare, "/maybe_s", "has no field"),
            (&bare, "/geo/city/name", "has no field"),
            (&full, "/tags", "repeated"),
            (&full, "/geo", "is a message"),
            (&full, "/id/x", "has no field"),
        ] {
            let e = fld(r, Some(payload), p).unwrap_err();
            assert!(e.contains(says), "{p}: {e}");
        }
        // Absent without presence: the proto3 default.
        let empty = with(Vec::new());
        assert_eq!(fld(r, Some(&empty), "/kind").as_deref(), Ok("KIND_A"));
        assert_eq!(fld(r, Some(&empty), "/id").as_deref(), Ok("0"));
        assert_eq!(fld(r, Some(&empty), "/name").as_deref(), Ok(""));
        // The last occurrence wins.
        let mut twice = message(true);
        twice.extend_from_slice(&[2 << 3 | 2, 3, b'n', b'e', b'w']);
        assert_eq!(fld(r, Some(&with(twice)), "/name").as_deref(), Ok("new"));
        // Occurrences of a message merge: a later geo without the city,
        // or with an empty one, leaves Berlin.
        for later in [
            &[1 << 3 | 1, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f][..],
            &[2 << 3 | 2, 0],
        ] {
            let mut merged = message(true);
            merged.extend_from_slice(&[0x82, 0x01]); // field 16, length-delimited
            merged.push(later.len() as u8);
            merged.extend_from_slice(later);
            let got = fld(r, Some(&with(merged)), "/geo/city/name");
            assert_eq!(got.as_deref(), Ok("Berlin"), "{later:?}");
        }
        // Field number 0 is not Protobuf.
        let e = fld(r, Some(&with(vec![0, 0])), "/name").unwrap_err();
        assert!(e.contains("field number 0"), "{e}");
    }
}

#[test]
fn a_protobuf_header_with_a_bad_index_count_is_refused_not_a_panic() {
    use crate::formats::protobuf::tests::{message, PROTO};
    let format = FormatSpec::Protobuf(ProtobufSource::Registry(registry(RegisteredSchema {
        id: 3,
        schema_type: SchemaType::Protobuf,
        schema: PROTO.into(),
    })));
    let r = &mut FieldReader::new(&format);
    // Counts -1 and 65 (zig-zag 1 and 130).
    for count in [&[1u8][..], &[130, 1]] {
        let b = [&[0u8, 0, 0, 0, 3][..], count, &message(true)].concat();
        let e = fld(r, Some(&b), "/name").unwrap_err();
        assert!(
            e.contains("message indexes after the Confluent header"),
            "{e}"
        );
    }
}

#[test]
fn a_csv_value_is_the_field_csv_columns_names() {
    let format = FormatSpec::Csv(CsvOptions {
        columns: vec!["n".into(), String::new(), "tenant".into(), "note".into()],
        delimiter: b';',
    });
    let r = &mut FieldReader::new(&format);
    assert_eq!(
        fld(r, Some(b"1;x;acme;y\n"), "/tenant").as_deref(),
        Ok("acme")
    );
    assert_eq!(
        fld(r, Some(b"1;x;\"a;\"\"b\"\"\";y"), "/tenant").as_deref(),
        Ok("a;\"b\"")
    );
    assert_eq!(fld(r, Some(b"1;x;acme;y"), "/note").as_deref(), Ok("y"));
    for (payload, says) in [
        (&b"1;x;;y"[..], "has no field /tenant"),
        (b"1;x;\\N;y", "has no field"),
        (b"1;x", "has no field"),
        (b"1;x;\"acme", "not a CSV record"),
    ] {
        let e = fld(r, Some(payload), "/tenant").unwrap_err();
        assert!(e.contains(says), "{e}");
    }
    assert!(FieldReader::check(&format, &ptr("/tenant")).is_ok());
    for (p, says) in [("/nope", "names no field nope"), ("/tenant/x", "/NAME")] {
        let e = FieldReader::check(&format, &ptr(p)).unwrap_err();
        assert!(e.contains(says), "{p}: {e}");
    }
    let bare = FormatSpec::Csv(CsvOptions::default());
    let e = FieldReader::check(&bare, &ptr("/tenant")).unwrap_err();
    assert!(e.contains("--csv-columns"), "{e}");
    let raw = FormatSpec::Raw { column: "v".into() };
    assert!(FieldReader::check(&raw, &ptr("/x")).is_err());
    assert!(FieldReader::new(&raw)
        .read(Some(b"x"), &ptr("/x"), &mut String::new())
        .is_err());
}
