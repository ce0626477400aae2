//! Exact-bytes tests for the encoder, one section per type family.

use super::*;
use crate::schema::{Column, DefaultKind};
use crate::types::parse_type;
use spate_core::record::Message;

fn col(name: &str, ty: &str) -> Column {
    Column {
        name: name.into(),
        ty: parse_type(ty).unwrap(),
        default_kind: DefaultKind::None,
        default_expression: String::new(),
    }
}

fn msg(payload: &str) -> Message<'_> {
    Message {
        topic: "events",
        partition: 3,
        offset: 42,
        timestamp_ms: Some(1_700_000_000_123),
        key: Some(b"k1"),
        payload: Some(payload.as_bytes()),
        headers: None,
    }
}

fn enc_opts(cols: &[Column], json: &str, opts: EncoderOptions) -> Result<Vec<u8>, RowError> {
    let mut e = RowEncoder::new(cols, opts).unwrap();
    let mut out = Vec::new();
    e.encode(&msg(json), &mut out)?;
    Ok(out)
}

/// Encode `{"v": <value>}` into a one-column table of type `ty`.
fn one(ty: &str, value: &str) -> Result<Vec<u8>, RowError> {
    enc_opts(
        &[col("v", ty)],
        &format!("{{\"v\": {value}}}"),
        EncoderOptions::default(),
    )
}

fn ok(ty: &str, value: &str) -> Vec<u8> {
    one(ty, value).unwrap_or_else(|e| panic!("{ty} <- {value}: {e}"))
}

fn bad(ty: &str, value: &str) -> RowError {
    match one(ty, value) {
        Ok(b) => panic!("{ty} <- {value} should fail, got {b:?}"),
        Err(e) => e,
    }
}

#[test]
fn integers() {
    assert_eq!(ok("UInt8", "255"), [255]);
    assert_eq!(ok("UInt8", "true"), [1]);
    assert_eq!(ok("UInt8", "\"7\""), [7]);
    assert_eq!(ok("Int8", "-128"), [0x80]);
    assert_eq!(ok("UInt16", "513"), [1, 2]);
    assert_eq!(ok("Int16", "-2"), [0xfe, 0xff]);
    assert_eq!(ok("UInt32", "\"4294967295\""), [255; 4]);
    assert_eq!(ok("Int32", "-1"), [255; 4]);
    assert_eq!(ok("UInt64", "18446744073709551615"), [255; 8]);
    assert_eq!(ok("Int64", "1"), [1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(ok("Int64", "3.0"), [3, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(ok("Int128", "-1"), [255; 16]);
    assert_eq!(
        ok("UInt128", "340282366920938463463374607431768211455"),
        [255; 16]
    );
    assert_eq!(ok("LowCardinality(UInt16)", "1"), [1, 0]);
    for (ty, v) in [
        ("UInt8", "256"),
        ("UInt8", "-1"),
        ("Int8", "128"),
        ("UInt32", "4294967296"),
        ("Int64", "9223372036854775808"),
        ("UInt64", "18446744073709551616"),
        ("Int32", "1.5"),
        ("Int32", "1e3"),
        ("Int32", "\"x\""),
        ("Int32", "[]"),
        ("UInt16", "true"),
    ] {
        bad(ty, v);
    }
    assert!(bad("UInt8", "300").reason.contains("out of range"));
}

#[test]
fn floats() {
    assert_eq!(ok("Float32", "1.5"), 1.5f32.to_le_bytes());
    assert_eq!(ok("Float64", "-2.25e2"), (-225f64).to_le_bytes());
    assert_eq!(ok("Float64", "\"3.5\""), 3.5f64.to_le_bytes());
    assert_eq!(ok("Float64", "\"-inf\""), f64::NEG_INFINITY.to_le_bytes());
    assert!(f64::from_le_bytes(ok("Float64", "\"nan\"").try_into().unwrap()).is_nan());
    assert_eq!(ok("Float32", "0.1"), 0.1f32.to_le_bytes());
    bad("Float64", "\"abc\"");
    bad("Float32", "1e40");
    bad("Float64", "true");
}

#[test]
fn bools() {
    assert_eq!(ok("Bool", "true"), [1]);
    assert_eq!(ok("Bool", "false"), [0]);
    assert_eq!(ok("Bool", "1"), [1]);
    assert_eq!(ok("Bool", "0"), [0]);
    assert_eq!(ok("Bool", "\"true\""), [1]);
    bad("Bool", "2");
}

#[test]
fn strings() {
    assert_eq!(ok("String", "\"abc\""), b"\x03abc");
    assert_eq!(ok("String", "\"\""), b"\x00");
    assert_eq!(
        ok("String", r#""a\"b\\c\n\u00e9""#),
        b"\x08a\"b\\c\n\xc3\xa9"
    );
    // Surrogate pair: U+1F600 = F0 9F 98 80.
    assert_eq!(ok("String", r#""\ud83d\ude00""#), b"\x04\xf0\x9f\x98\x80");
    // Raw UTF-8 passes through.
    assert_eq!(ok("String", "\"é\""), b"\x02\xc3\xa9");
    // Non-strings are kept as raw JSON text.
    assert_eq!(ok("String", "12.5"), b"\x0412.5");
    assert_eq!(ok("String", r#"{"a": [1, 2]}"#), b"\x0d{\"a\": [1, 2]}");
    assert_eq!(ok("String", "true"), b"\x04true");
    // LEB128 for long strings: 200 = 0xC8 0x01.
    let long = "x".repeat(200);
    let got = ok("String", &format!("\"{long}\""));
    assert_eq!(&got[..2], &[0xc8, 0x01]);
    assert_eq!(got.len(), 202);
    assert!(bad("String", r#""\ud83d""#).reason.contains("surrogate"));
    assert_eq!(ok("LowCardinality(String)", "\"ab\""), b"\x02ab");
}

#[test]
fn fixed_strings() {
    assert_eq!(ok("FixedString(4)", "\"ab\""), b"ab\0\0");
    assert_eq!(ok("FixedString(2)", "\"ab\""), b"ab");
    assert_eq!(ok("FixedString(3)", "12"), b"12\0");
    assert!(bad("FixedString(2)", "\"abc\"")
        .reason
        .contains("FixedString(2)"));
}

#[test]
fn dates() {
    assert_eq!(ok("Date", "\"1970-01-02\""), [1, 0]);
    assert_eq!(ok("Date", "\"2024-02-29\""), 19_782u16.to_le_bytes());
    assert_eq!(ok("Date", "19782"), 19_782u16.to_le_bytes());
    assert_eq!(ok("Date", "\"2149-06-06\""), [255, 255]);
    bad("Date", "\"2149-06-07\"");
    bad("Date", "\"1969-12-31\"");
    bad("Date", "65536");
    bad("Date", "\"2024-02-30\"");
}

#[test]
fn datetimes() {
    let t = 1_700_000_000u32.to_le_bytes();
    assert_eq!(ok("DateTime", "1700000000"), t);
    assert_eq!(ok("DateTime", "\"2023-11-14 22:13:20\""), t);
    assert_eq!(ok("DateTime", "\"2023-11-14T22:13:20Z\""), t);
    assert_eq!(ok("DateTime", "\"2023-11-14T22:13:20.987Z\""), t);
    assert_eq!(ok("DateTime", "\"2023-11-15T01:13:20+03:00\""), t);
    assert_eq!(ok("DateTime('Asia/Tokyo')", "\"1700000000\""), t);
    assert_eq!(ok("DateTime", "4294967295"), [255; 4]);
    bad("DateTime", "4294967296");
    bad("DateTime", "-1");
    bad("DateTime", "\"yesterday\"");
}

#[test]
fn datetime64() {
    assert_eq!(
        ok("DateTime64(3)", "\"2023-11-14T22:13:20.123456Z\""),
        1_700_000_000_123i64.to_le_bytes()
    );
    assert_eq!(
        ok("DateTime64(6, 'UTC')", "\"2023-11-14 22:13:20.5\""),
        1_700_000_000_500_000i64.to_le_bytes()
    );
    assert_eq!(
        ok("DateTime64(3)", "1700000000.25"),
        1_700_000_000_250i64.to_le_bytes()
    );
    assert_eq!(
        ok("DateTime64(3)", "1700000000"),
        1_700_000_000_000i64.to_le_bytes()
    );
    assert_eq!(
        ok("DateTime64(0)", "\"2023-11-14T22:13:20.9Z\""),
        1_700_000_000i64.to_le_bytes()
    );
    assert_eq!(ok("DateTime64(2)", "-1.25"), (-125i64).to_le_bytes());
    assert_eq!(
        ok("DateTime64(9)", "\"1970-01-01T00:00:00.000000001Z\""),
        1i64.to_le_bytes()
    );
    bad("DateTime64(3)", "\"2023-13-01 00:00:00\"");
}

#[test]
fn uuids() {
    // Layout verified on ClickHouse 18.16: bytes 01..10 read back as
    // 08070605-0403-0201-100f-0e0d0c0b0a09.
    let got = ok("UUID", "\"08070605-0403-0201-100f-0e0d0c0b0a09\"");
    assert_eq!(got, (1u8..=16).collect::<Vec<_>>());
    assert_eq!(ok("UUID", "\"00000000000000000000000000000001\""), {
        let mut v = vec![0u8; 16];
        v[8] = 1;
        v
    });
    bad("UUID", "\"08070605-0403-0201-100f-0e0d0c0b0a0\"");
    bad("UUID", "\"0807060504-03-0201-100f-0e0d0c0b0a09\"");
    bad("UUID", "\"g8070605-0403-0201-100f-0e0d0c0b0a09\"");
}

#[test]
fn enums() {
    let e8 = r"Enum8('a' = 1, 'it\'s' = -2, 'z' = 0)";
    assert_eq!(ok(e8, "\"a\""), [1]);
    assert_eq!(ok(e8, r#""it's""#), [0xfe]);
    assert_eq!(ok(e8, "-2"), [0xfe]);
    assert_eq!(ok(e8, "\"-2\""), [0xfe]);
    assert!(bad(e8, "\"b\"").reason.contains("not a name"));
    assert!(bad(e8, "5").reason.contains("not a value"));
    assert_eq!(ok("Enum16('x' = 1000)", "\"x\""), 1000i16.to_le_bytes());
    // Missing: value 0 if declared, else the first one.
    let missing = |ty: &str| enc_opts(&[col("v", ty)], "{}", EncoderOptions::default()).unwrap();
    assert_eq!(missing(e8), [0]);
    assert_eq!(missing("Enum8('p' = 5, 'q' = 6)"), [5]);
    assert_eq!(missing("Enum16('p' = 500)"), 500i16.to_le_bytes());
}

#[test]
fn decimals() {
    assert_eq!(ok("Decimal(9, 2)", "123.45"), 12_345i32.to_le_bytes());
    assert_eq!(ok("Decimal(9, 2)", "\"-1.5\""), (-150i32).to_le_bytes());
    assert_eq!(ok("Decimal(18, 4)", "1.2300000"), 12_300i64.to_le_bytes());
    assert_eq!(ok("Decimal64(4)", "7"), 70_000i64.to_le_bytes());
    assert_eq!(
        ok("Decimal(38, 10)", "\"12345678901234567890.0123456789\""),
        123_456_789_012_345_678_900_123_456_789i128.to_le_bytes()
    );
    assert_eq!(ok("Decimal32(2)", "1e2"), 10_000i32.to_le_bytes());
    // Exact text, not f64: 0.1 + 0.2 style values survive.
    assert_eq!(
        ok("Decimal(18, 17)", "0.30000000000000004"),
        30_000_000_000_000_004i64.to_le_bytes()
    );
    assert!(bad("Decimal(9, 2)", "1.234")
        .reason
        .contains("fractional digits"));
    assert!(bad("Decimal(5, 2)", "1000.00")
        .reason
        .contains("does not fit"));
    bad("Decimal(9, 2)", "\"1,5\"");
}

#[test]
fn ips() {
    assert_eq!(ok("IPv4", "\"1.2.3.4\""), 0x0102_0304u32.to_le_bytes());
    assert_eq!(ok("IPv4", "16909060"), 0x0102_0304u32.to_le_bytes());
    let v6 = ok("IPv6", "\"2001:db8::1\"");
    assert_eq!(
        v6,
        [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    );
    assert_eq!(
        ok("IPv6", "\"1.2.3.4\""),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4]
    );
    assert_eq!(
        ok("IPv6", "\"::ffff:1.2.3.4\""),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4]
    );
    bad("IPv4", "\"1.2.3\"");
    bad("IPv6", "\"zz::1\"");
}

#[test]
fn nullables_and_arrays() {
    assert_eq!(ok("Nullable(UInt8)", "null"), [1]);
    assert_eq!(ok("Nullable(UInt8)", "5"), [0, 5]);
    assert_eq!(ok("Array(UInt8)", "[1, 2, 3]"), [3, 1, 2, 3]);
    assert_eq!(ok("Array(UInt8)", "[]"), [0]);
    assert_eq!(ok("Array(String)", r#"["a", "bc"]"#), b"\x02\x01a\x02bc");
    assert_eq!(
        ok("Array(Nullable(Int8))", "[1, null, -1]"),
        [3, 0, 1, 1, 0, 0xff]
    );
    assert_eq!(ok("Nullable(Array(UInt8))", "null"), [1]);
    assert_eq!(ok("Nullable(Array(UInt8))", "[7]"), [0, 1, 7]);
    assert_eq!(
        ok("Array(Array(UInt8))", "[[1], [], [2, 3]]"),
        [3, 1, 1, 0, 2, 2, 3]
    );
    assert_eq!(ok("LowCardinality(Nullable(String))", "null"), [1]);
    assert_eq!(
        ok("LowCardinality(Nullable(String))", "\"x\""),
        [0, 1, b'x']
    );
    assert_eq!(
        ok("Array(LowCardinality(String))", r#"["q"]"#),
        [1, 1, b'q']
    );
    assert!(bad("Array(UInt8)", "[1, null]")
        .reason
        .contains("non-Nullable"));
    assert!(bad("Array(UInt8)", "[1, 256]")
        .reason
        .contains("out of range"));
    bad("Array(UInt8)", "5");
    // A top-level null for a non-Nullable column is treated as missing.
    assert_eq!(ok("UInt32", "null"), [0; 4]);
    assert_eq!(ok("Array(Nothing)", "[]"), [0]);
    assert_eq!(ok("Nullable(Nothing)", "null"), [1]);
}

/// Arrays and maps are written in one walk with a one-byte count that is
/// widened in place: counts around the varint's byte boundaries.
#[test]
fn long_arrays_and_maps_get_multi_byte_counts() {
    for n in [127usize, 128, 129, 300, 16_383, 16_384] {
        let items = (0..n).map(|i| (i % 200).to_string()).collect::<Vec<_>>();
        let mut want = Vec::new();
        crate::rowbinary::leb128::put(&mut want, n as u64);
        want.extend((0..n).map(|i| (i % 200) as u8));
        assert_eq!(
            ok("Array(UInt8)", &format!("[{}]", items.join(","))),
            want,
            "{n}"
        );
        let members = (0..n)
            .map(|i| format!("\"k{i}\": {}", i % 200))
            .collect::<Vec<_>>();
        let mut want = Vec::new();
        crate::rowbinary::leb128::put(&mut want, n as u64);
        for i in 0..n {
            let key = format!("k{i}");
            want.push(key.len() as u8);
            want.extend_from_slice(key.as_bytes());
            want.push((i % 200) as u8);
        }
        assert_eq!(
            ok("Map(String, UInt8)", &format!("{{{}}}", members.join(","))),
            want,
            "{n}"
        );
    }
    // Inside a row: the columns after a long array stay in place.
    let cols = [col("a", "Array(UInt8)"), col("b", "UInt8")];
    let items = vec!["1"; 200].join(",");
    let row = enc_opts(
        &cols,
        &format!("{{\"a\": [{items}], \"b\": 9}}"),
        EncoderOptions::default(),
    )
    .unwrap();
    assert_eq!(row[..2], [0xc8, 0x01]);
    assert_eq!(row.len(), 2 + 200 + 1);
    assert_eq!(row[row.len() - 1], 9);
    // A bad item anywhere fails the value; a bad tail after good items too.
    assert!(bad("Array(UInt8)", &format!("[{items}, 256]"))
        .reason
        .contains("out of range"));
    bad("Array(UInt8)", &format!("[{items}, ]"));
}

#[test]
fn maps() {
    assert_eq!(
        ok("Map(String, UInt8)", r#"{"a": 1, "b\u0021": 2}"#),
        b"\x02\x01a\x01\x02b!\x02"
    );
    assert_eq!(
        ok("Map(UInt16, String)", r#"{"7": "x"}"#),
        b"\x01\x07\x00\x01x"
    );
    assert_eq!(ok("Map(String, Array(UInt8))", r#"{}"#), b"\x00");
    assert!(bad("Map(UInt8, String)", r#"{"300": "x"}"#)
        .reason
        .contains("out of range"));
    bad("Map(String, UInt8)", "[1]");
}

#[test]
fn tuples() {
    assert_eq!(ok("Tuple(UInt8, String)", r#"[1, "a"]"#), b"\x01\x01a");
    assert_eq!(
        ok("Tuple(a UInt8, b String)", r#"{"b": "x", "a": 2}"#),
        b"\x02\x01x"
    );
    assert_eq!(
        ok("Tuple(a UInt8, b Nullable(String))", r#"{"a": 2}"#),
        b"\x02\x01"
    );
    assert!(bad("Tuple(UInt8, String)", "[1]")
        .reason
        .contains("expected 2"));
    bad("Tuple(UInt8, String)", r#"[1, "a", 3]"#);
    bad("Tuple(UInt8, String)", r#"{"a": 1}"#);
}

#[test]
fn missing_keys_get_zero_values() {
    let cols: Vec<Column> = [
        ("s", "String"),
        ("n", "Nullable(Int32)"),
        ("i", "Int16"),
        ("d", "Date"),
        ("u", "UUID"),
        ("a", "Array(String)"),
        ("f", "FixedString(2)"),
        ("t", "Tuple(UInt8, String)"),
        ("dec", "Decimal(18, 2)"),
    ]
    .iter()
    .map(|(n, t)| col(n, t))
    .collect();
    let got = enc_opts(&cols, "{}", EncoderOptions::default()).unwrap();
    let mut want = vec![0u8, 1, 0, 0, 0, 0];
    want.extend([0u8; 16]);
    want.extend([0u8, 0, 0, 0, 0]);
    want.extend([0u8; 8]);
    assert_eq!(got, want);
}

#[test]
fn metadata_columns() {
    let cols = vec![
        col("_topic", "LowCardinality(String)"),
        col("_partition", "Int32"),
        col("_offset", "UInt64"),
        col("_timestamp", "DateTime64(3)"),
        col("_key", "Nullable(String)"),
        col("ts_s", "DateTime"),
        col("v", "UInt8"),
    ];
    let mut cols2 = cols.clone();
    cols2[5] = col("_timestamp_ms", "UInt64");
    let got = enc_opts(
        &cols,
        r#"{"_topic": "spoof", "v": 9, "_offset": 1}"#,
        EncoderOptions {
            strict: true,
            with_defaults: false,
        },
    )
    .unwrap();
    let mut want = b"\x06events".to_vec();
    want.extend(3i32.to_le_bytes());
    want.extend(42u64.to_le_bytes());
    want.extend(1_700_000_000_123i64.to_le_bytes());
    want.extend(b"\x00\x02k1");
    want.extend([0u8; 4]); // ts_s missing
    want.push(9);
    assert_eq!(got, want);

    // _timestamp as DateTime (seconds), Nullable with no timestamp, integer ms.
    let mut e = RowEncoder::new(
        &[col("_timestamp", "DateTime"), col("_key", "String")],
        EncoderOptions::default(),
    )
    .unwrap();
    let mut out = Vec::new();
    e.encode(&msg("{}"), &mut out).unwrap();
    assert_eq!(out, [0x00, 0xf1, 0x53, 0x65, 2, b'k', b'1']);
    let mut e = RowEncoder::new(
        &[
            col("_timestamp", "Nullable(DateTime)"),
            col("_key", "Nullable(String)"),
        ],
        EncoderOptions::default(),
    )
    .unwrap();
    let mut out = Vec::new();
    let m = Message {
        timestamp_ms: None,
        key: None,
        ..msg("{}")
    };
    e.encode(&m, &mut out).unwrap();
    assert_eq!(out, [1, 1]);
    let mut e = RowEncoder::new(
        &[col("_timestamp", "Int64"), col("_key", "String")],
        EncoderOptions::default(),
    )
    .unwrap();
    let mut out = Vec::new();
    e.encode(&m, &mut out).unwrap();
    assert_eq!(out, [0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut e = RowEncoder::new(&[col("_partition", "UInt8")], EncoderOptions::default()).unwrap();
    let m = Message {
        partition: 300,
        ..msg("{}")
    };
    let err = e.encode(&m, &mut out).unwrap_err();
    assert_eq!(err.column.as_deref(), Some("_partition"));

    for (name, ty) in [
        ("_topic", "UInt8"),
        ("_partition", "String"),
        ("_timestamp", "String"),
        ("_key", "Int32"),
    ] {
        assert!(matches!(
            RowEncoder::new(&[col(name, ty)], EncoderOptions::default()),
            Err(SchemaError::MetadataType { .. })
        ));
    }
}

#[test]
fn errors_and_truncation() {
    let cols = vec![col("a", "UInt8"), col("b", "String")];
    let mut e = RowEncoder::new(&cols, EncoderOptions::default()).unwrap();
    let mut out = b"previous".to_vec();
    e.encode(&msg(r#"{"a": 1, "b": "x"}"#), &mut out).unwrap();
    assert_eq!(out, b"previous\x01\x01x");

    // Failure in the second column: the first column's byte is rolled back.
    let long = format!(r#"{{"a": 1, "b": "x", "a": {}}}"#, "9".repeat(100));
    let err = e.encode(&msg(&long), &mut out).unwrap_err();
    assert_eq!(out, b"previous\x01\x01x");
    assert_eq!(err.column.as_deref(), Some("a"));
    assert_eq!(err.value.chars().count(), 64);
    assert!(err.value.ends_with('…'));
    assert!(err.to_string().starts_with("column `a`: "), "{err}");

    let cols = vec![col("a", "String"), col("b", "UInt8")];
    let mut e = RowEncoder::new(&cols, EncoderOptions::default()).unwrap();
    let err = e
        .encode(&msg(r#"{"a": "abc", "b": 999}"#), &mut out)
        .unwrap_err();
    assert_eq!(out, b"previous\x01\x01x");
    assert_eq!(
        (err.column.as_deref(), err.value.as_str()),
        (Some("b"), "999")
    );

    for (payload, needle) in [
        ("{\"a\": ", "invalid JSON"),
        ("[1]", "not a JSON object"),
        ("{} x", "trailing"),
    ] {
        let err = e.encode(&msg(payload), &mut out).unwrap_err();
        assert_eq!(err.column, None);
        assert!(err.reason.contains(needle), "{payload}: {err}");
    }
    let tomb = Message {
        payload: None,
        ..msg("")
    };
    let err = e.encode(&tomb, &mut out).unwrap_err();
    assert!(err.reason.contains("tombstone"));
    let bad_utf8 = Message {
        payload: Some(b"{\"a\": \"\xff\"}"),
        ..msg("")
    };
    assert!(e
        .encode(&bad_utf8, &mut out)
        .unwrap_err()
        .reason
        .contains("UTF-8"));
    assert_eq!(out, b"previous\x01\x01x");
}

#[test]
fn strict_unknown_keys() {
    let cols = vec![col("a", "UInt8"), col("_topic", "String")];
    let strict = EncoderOptions {
        strict: true,
        with_defaults: false,
    };
    let err = enc_opts(&cols, r#"{"a": 1, "zz\u0021": 2}"#, strict).unwrap_err();
    assert!(err.reason.contains("unknown key `zz!`"), "{err}");
    assert_eq!(err.column, None);
    // Metadata names and escaped spellings of known keys are fine.
    assert_eq!(
        enc_opts(&cols, r#"{"\u0061": 1, "_topic": "x"}"#, strict).unwrap(),
        b"\x01\x06events"
    );
    // Not strict: ignored.
    assert_eq!(
        enc_opts(&cols, r#"{"a": 1, "zz": 2}"#, EncoderOptions::default()).unwrap(),
        b"\x01\x06events"
    );
}

#[test]
fn insert_columns_and_defaults() {
    let mut cols = vec![
        col("a", "UInt8"),
        col("b", "String"),
        col("m", "UInt8"),
        col("al", "UInt8"),
        col("e", "UInt8"),
        col("n", "Nullable(UInt8)"),
    ];
    cols[1].default_kind = DefaultKind::Default;
    cols[2].default_kind = DefaultKind::Materialized;
    cols[3].default_kind = DefaultKind::Alias;
    cols[4].default_kind = DefaultKind::Ephemeral;
    let e = RowEncoder::new(&cols, EncoderOptions::default()).unwrap();
    assert_eq!(e.insert_columns(), ["a", "b", "n"]);
    assert_eq!(e.format(), "RowBinary");
    let opts = EncoderOptions {
        strict: false,
        with_defaults: true,
    };
    let e = RowEncoder::new(&cols, opts).unwrap();
    assert_eq!(e.format(), "RowBinaryWithDefaults");
    // a missing (no DEFAULT): flag 0 + zero; b missing with DEFAULT: flag 1; n present.
    assert_eq!(
        enc_opts(&cols, r#"{"n": 4}"#, opts).unwrap(),
        [0, 0, 1, 0, 0, 4]
    );
    assert_eq!(
        enc_opts(&cols, r#"{"a": 2, "b": "q"}"#, opts).unwrap(),
        [0, 2, 0, 1, b'q', 0, 1]
    );
    assert!(matches!(
        RowEncoder::new(&cols[2..5], opts),
        Err(SchemaError::NoInsertableColumns)
    ));
    assert!(matches!(
        RowEncoder::new(&[col("x", "Nothing")], opts),
        Err(SchemaError::Unsupported { .. })
    ));
    assert!(matches!(
        RowEncoder::new(&[col("x", "UInt8"), col("x", "UInt8")], opts),
        Err(SchemaError::Duplicate(_))
    ));
}

#[test]
fn many_columns_and_duplicate_keys() {
    let cols: Vec<Column> = (0..100).map(|i| col(&format!("c{i}"), "UInt8")).collect();
    let json = format!(
        "{{{}}}",
        (0..100)
            .map(|i| format!("\"c{i}\": {}", i % 200))
            .collect::<Vec<_>>()
            .join(",")
    );
    let got = enc_opts(
        &cols,
        &json,
        EncoderOptions {
            strict: true,
            with_defaults: false,
        },
    )
    .unwrap();
    assert_eq!(got, (0u8..100).collect::<Vec<_>>());
    // Last occurrence wins.
    assert_eq!(
        enc_opts(
            &cols[..1],
            r#"{"c0": 1, "c0": 2}"#,
            EncoderOptions::default()
        )
        .unwrap(),
        [2]
    );
}

/// The routing hash of an encoded row equals ClickHouse's cityHash64 of
/// the same values (constants from `SELECT cityHash64(...)` on 18.16.1),
/// whatever columns sit around the key and whatever JSON type the value
/// came as.
#[test]
fn shard_key_hash_matches_clickhouse() {
    let cols = [
        col("tags", "Array(String)"),
        col("user_id", "UInt64"),
        col("name", "LowCardinality(String)"),
        col("n", "Int32"),
    ];
    let row = |enc: &mut RowEncoder, json: &str| {
        let mut out = vec![0xAA; 3]; // rows already in the chunk
        enc.encode(&msg(json), &mut out).unwrap();
        enc.key_hash(&out[3..])
    };
    let json = r#"{"tags":["x","yz"],"n":-7,"name":"alice","user_id":12345}"#;
    let mut enc = RowEncoder::new(&cols, EncoderOptions::default()).unwrap();
    assert!(!enc.has_shard_key());
    assert_eq!(row(&mut enc, json), None);
    enc.set_shard_key(&["user_id".to_owned()]).unwrap();
    assert!(enc.has_shard_key());
    assert_eq!(row(&mut enc, json), Some(16_722_121_143_744_093_920));
    // The same value as a JSON string parses to the same UInt64.
    assert_eq!(
        row(&mut enc, r#"{"user_id":"12345","name":"bob"}"#),
        Some(16_722_121_143_744_093_920)
    );
    enc.set_shard_key(&["user_id".to_owned(), "name".to_owned()])
        .unwrap();
    assert_eq!(row(&mut enc, json), Some(9_437_595_051_278_105_426));
    enc.set_shard_key(&["name".to_owned(), "user_id".to_owned()])
        .unwrap();
    assert_eq!(row(&mut enc, json), Some(6_459_980_905_424_151_953));
    enc.set_shard_key(&["n".to_owned()]).unwrap();
    assert_eq!(row(&mut enc, json), Some(4_188_926_555_673_498_850));
}

#[test]
fn shard_key_must_be_a_hashable_insert_column() {
    let cols = [
        col("tags", "Array(String)"),
        col("maybe", "Nullable(UInt64)"),
        col("id", "UInt64"),
    ];
    let mut enc = RowEncoder::new(&cols, EncoderOptions::default()).unwrap();
    for (key, want) in [
        ("tags", "not supported in a shard key"),
        ("maybe", "not supported"),
        ("nope", "not an insertable column"),
    ] {
        let err = enc
            .set_shard_key(&[key.to_owned()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("`{key}`")) && err.contains(want),
            "{key}: {err}"
        );
    }
    let err = enc
        .set_shard_key(&["id".to_owned(), "id".to_owned()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("twice"), "{err}");
}
