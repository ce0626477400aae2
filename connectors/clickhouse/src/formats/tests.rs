//! Unit tests of the non-JSON formats: each row is compared with the row
//! the JSON encoder makes of the same values.

use super::*;
use crate::encode::EncoderOptions;
use crate::schema::{Column, DefaultKind};
use crate::types::parse_type;

fn col(name: &str, ty: &str) -> Column {
    Column {
        name: name.into(),
        ty: parse_type(ty).unwrap(),
        default_kind: DefaultKind::None,
        default_expression: String::new(),
    }
}

fn msg(payload: Option<&[u8]>) -> Message<'_> {
    Message {
        topic: "t",
        partition: 3,
        offset: 42,
        timestamp_ms: Some(1_700_000_000_000),
        key: Some(b"k"),
        payload,
        headers: None,
    }
}

fn json_row(cols: &[Column], json: &str) -> Vec<u8> {
    let mut e = crate::RowEncoder::new(cols, EncoderOptions::default()).unwrap();
    let mut out = Vec::new();
    e.encode(&msg(Some(json.as_bytes())), &mut out).unwrap();
    out
}

fn encode(format: FormatSpec, cols: &[Column], payload: &[u8]) -> Result<Vec<u8>, EncodeFailure> {
    let mut e = build(&format, cols, EncoderOptions::default(), &[]).unwrap();
    let mut out = vec![0xAA];
    let r = e.encode(&msg(Some(payload)), &mut out);
    if r.is_err() {
        assert_eq!(out, [0xAA], "a failed row leaves the buffer as it was");
    }
    r.map(|_| out[1..].to_vec())
}

fn table() -> Vec<Column> {
    vec![
        col("id", "UInt64"),
        col("s", "String"),
        col("n", "Nullable(String)"),
        col("_offset", "UInt64"),
        col("d", "DateTime"),
        col("a", "Array(Int32)"),
        col("f", "Float64"),
    ]
}

#[test]
fn csv_fields_fill_columns_in_table_order() {
    let cols = table();
    let csv = encode(
        FormatSpec::Csv(CsvOptions::default()),
        &cols,
        b"7,\"a,\"\"b\"\"\nc\",,2024-01-02 03:04:05,\"[1,-2]\",1.5\r\n",
    )
    .unwrap();
    let json = json_row(
        &cols,
        r#"{"id":7,"s":"a,\"b\"\nc","n":null,"d":"2024-01-02 03:04:05","a":[1,-2],"f":1.5}"#,
    );
    assert_eq!(csv, json);
}

#[test]
fn csv_empty_fields_quoted_and_not() {
    let cols = table();
    let fmt = || FormatSpec::Csv(CsvOptions::default());
    // Quoted empty is the empty string, even in a Nullable column; `\N` is NULL.
    let a = encode(fmt(), &cols, b"0,\"\",\"\",,[],0").unwrap();
    assert_eq!(a, json_row(&cols, r#"{"s":"","n":""}"#));
    let b = encode(fmt(), &cols, b",,\\N,,,").unwrap();
    assert_eq!(b, json_row(&cols, "{}"));
}

#[test]
fn csv_header_list_names_columns_and_skips_fields() {
    let cols = table();
    let opts = CsvOptions {
        columns: vec!["f".into(), String::new(), "id".into()],
        delimiter: b';',
    };
    let row = encode(FormatSpec::Csv(opts), &cols, b"2.25;ignored;9").unwrap();
    assert_eq!(row, json_row(&cols, r#"{"f":2.25,"id":9}"#));
}

#[test]
fn csv_bad_records_are_named() {
    let cols = table();
    let fmt = || FormatSpec::Csv(CsvOptions::default());
    for (bad, why) in [
        (&b"1,x"[..], "2 fields, expected 6"),
        (b"1,x,,,,,,", "more than 6 fields"),
        (b"1,\"x,,,,,", "unterminated quoted field"),
        (b"1,\"x\"y,,,,,", "characters after a closing quote"),
        (
            b"1,x\"y,,,,,",
            "a quote or a line break in an unquoted field",
        ),
        (
            b"1,a\nb,,,,,",
            "a quote or a line break in an unquoted field",
        ),
    ] {
        let e = encode(fmt(), &cols, bad).unwrap_err();
        assert_eq!(e.reason, why, "{:?}", String::from_utf8_lossy(bad));
    }
    let e = encode(fmt(), &cols, b"x,s,,,,[],0").unwrap_err();
    assert_eq!(e.column.as_deref(), Some("id"));
    assert_eq!(e.value.as_deref(), Some("x"));
}

#[test]
fn csv_header_list_must_name_value_columns() {
    let opts = |c: &str| {
        FormatSpec::Csv(CsvOptions {
            columns: vec![c.into()],
            ..CsvOptions::default()
        })
    };
    let cols = table();
    let opt = EncoderOptions::default();
    assert!(build(&opts("nope"), &cols, opt, &[]).is_err());
    assert!(build(&opts("_offset"), &cols, opt, &[]).is_err());
    assert!(build(&opts("s"), &cols, opt, &[]).is_ok());
}

#[test]
fn raw_takes_the_whole_value_and_metadata() {
    let cols = vec![
        col("_topic", "String"),
        col("line", "String"),
        col("_partition", "Int32"),
        col("other", "UInt8"),
    ];
    let value = b"not json, \"quoted\"\n\xff bytes";
    let row = encode(
        FormatSpec::Raw {
            column: "line".into(),
        },
        &cols,
        value,
    )
    .unwrap();
    let mut want = vec![1, b't', value.len() as u8];
    want.extend_from_slice(value);
    want.extend_from_slice(&3i32.to_le_bytes());
    want.push(0);
    assert_eq!(row, want);
    let raw = |c: &str| FormatSpec::Raw { column: c.into() };
    let opt = EncoderOptions::default();
    assert!(
        build(&raw("other"), &cols, opt, &[]).is_err(),
        "not a String"
    );
    assert!(build(&raw("_topic"), &cols, opt, &[]).is_err(), "metadata");
    let mut e = build(&raw("line"), &cols, opt, &[]).unwrap();
    let e = e.encode(&msg(None), &mut Vec::new()).unwrap_err();
    assert!(e.reason.contains("tombstone"), "{e:?}");
}

#[test]
fn a_shard_key_routes_non_json_rows_like_json_ones() {
    let cols = table();
    let key = ["id".to_owned(), "s".to_owned()];
    let opt = EncoderOptions::default();
    let mut csv = build(&FormatSpec::Csv(CsvOptions::default()), &cols, opt, &key).unwrap();
    let mut json = build(&FormatSpec::Json, &cols, opt, &key).unwrap();
    assert!(csv.routes_by_key());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    csv.encode(&msg(Some(b"5,abc,,,,")), &mut a).unwrap();
    json.encode(&msg(Some(br#"{"id":5,"s":"abc"}"#)), &mut b)
        .unwrap();
    assert_eq!(a, b);
    assert_eq!(csv.route_hash(&a), json.route_hash(&b));
    assert!(csv.route_hash(&a).is_some());
}
