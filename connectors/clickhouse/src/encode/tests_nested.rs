//! Exact-bytes tests for nested JSON: dotted columns at any depth, Nested
//! arrays from arrays of objects, length mismatches, renames and strict
//! mode through objects; Kafka headers into `_headers` columns.

use super::*;
use crate::schema::Column;
use crate::types::parse_type;
use spate_core::record::Message;

fn col(name: &str, ty: &str) -> Column {
    Column::plain(name, parse_type(ty).unwrap())
}

fn msg(payload: &str) -> Message<'_> {
    Message {
        topic: "events",
        partition: 3,
        offset: 42,
        timestamp_ms: None,
        key: None,
        payload: Some(payload.as_bytes()),
        headers: None,
    }
}

fn enc(e: &mut RowEncoder, json: &str) -> Result<Vec<u8>, RowError> {
    let mut out = Vec::new();
    e.encode(&msg(json), &mut out)?;
    Ok(out)
}

fn encoder(cols: &[Column]) -> RowEncoder {
    RowEncoder::new(cols, EncoderOptions::default()).unwrap()
}

#[test]
fn objects_map_onto_dotted_columns_at_any_depth() {
    let mut e = encoder(&[
        col("user.id", "UInt32"),
        col("user.geo.cc", "String"),
        col("a", "UInt8"),
    ]);
    let row = enc(
        &mut e,
        r#"{"user": {"id": 7, "geo": {"cc": "DE", "x": 1}, "z": [1]}, "a": 2}"#,
    )
    .unwrap();
    assert_eq!(row, [7, 0, 0, 0, 2, b'D', b'E', 2]);
    // Dotted keys at the top level still work, and mix with objects.
    let row = enc(&mut e, r#"{"user.id": 9, "user": {"geo": {"cc": "FR"}}}"#).unwrap();
    assert_eq!(row, [9, 0, 0, 0, 2, b'F', b'R', 0]);
    // A prefix holding something else fills nothing; escaped keys unescape.
    let row = enc(&mut e, r#"{"user": 5, "a": 1}"#).unwrap();
    assert_eq!(row, [0, 0, 0, 0, 0, 1]);
    let row = enc(&mut e, r#"{"us\u0065r": {"\u0069d": 3}}"#).unwrap();
    assert_eq!(row, [3, 0, 0, 0, 0, 0]);
}

#[test]
fn an_exact_column_wins_and_objects_into_string_stay_text() {
    let mut e = encoder(&[col("user", "String"), col("user.id", "UInt8")]);
    let row = enc(&mut e, r#"{"user": {"id": 7}}"#).unwrap();
    let text = br#"{"id": 7}"#;
    let mut want = vec![text.len() as u8];
    want.extend_from_slice(text);
    want.push(0);
    assert_eq!(row, want);
}

#[test]
fn nested_arrays_from_an_array_of_objects() {
    let mut e = encoder(&[
        col("n.x", "Array(UInt8)"),
        col("n.y", "Array(String)"),
        col("n.z", "Array(Nullable(UInt8))"),
        col("k", "UInt8"),
    ]);
    let row = enc(
        &mut e,
        r#"{"n": [{"x": 1, "y": "a", "z": 5}, {"x": 2, "w": 0}], "k": 3}"#,
    )
    .unwrap();
    assert_eq!(
        row,
        [2, 1, 2, /* y */ 2, 1, b'a', 0, /* z */ 2, 0, 5, 1, /* k */ 3]
    );
    // No n at all: empty arrays.
    assert_eq!(enc(&mut e, r#"{"k": 1}"#).unwrap(), [0, 0, 0, 1]);
    // An item that is not an object is a bad message naming the column.
    let err = enc(&mut e, r#"{"n": [1]}"#).unwrap_err();
    assert_eq!(err.column.as_deref(), Some("n.x"));
    assert!(err.reason.contains("must be an object"), "{err}");
}

#[test]
fn nested_given_as_arrays_must_agree_in_length() {
    let mut e = encoder(&[col("n.x", "Array(UInt8)"), col("n.y", "Array(UInt8)")]);
    assert_eq!(
        enc(&mut e, r#"{"n": {"x": [1, 2], "y": [3, 4]}}"#).unwrap(),
        [2, 1, 2, 2, 3, 4]
    );
    // A missing sibling gets zeros of the same length.
    assert_eq!(
        enc(&mut e, r#"{"n.x": [1, 2]}"#).unwrap(),
        [2, 1, 2, 2, 0, 0]
    );
    let err = enc(&mut e, r#"{"n": {"x": [1, 2], "y": [3]}}"#).unwrap_err();
    assert_eq!(err.column.as_deref(), Some("n.y"));
    assert!(
        err.reason.contains("Nested column `n`") && err.reason.contains("differ in length"),
        "{err}"
    );
    assert_eq!(err.value, "[3]");
}

#[test]
fn renames_take_a_pointer_and_drop_the_own_name() {
    let mut e = encoder(&[col("user_id", "UInt32"), col("cc", "String")]);
    e.set_renames(&[("user_id".into(), "/user/id".into())])
        .unwrap();
    assert_eq!(
        enc(&mut e, r#"{"user": {"id": 7}, "user_id": 9, "cc": "x"}"#).unwrap(),
        [7, 0, 0, 0, 1, b'x']
    );
    assert_eq!(
        e.resolve_path(b"user.id"),
        Some(PathTarget::Column(0)),
        "other decoders resolve the same paths"
    );
    assert_eq!(e.resolve_path(b"user_id"), None);
    for bad in [("nope", "/a"), ("cc", "a/b"), ("cc", "/")] {
        let err = e.set_renames(&[(bad.0.into(), bad.1.into())]).unwrap_err();
        assert!(err.to_string().contains(bad.0), "{err}");
    }
}

#[test]
fn strict_mode_names_the_full_path_of_an_unknown_key() {
    let mut e = RowEncoder::new(
        &[col("user.id", "UInt8")],
        EncoderOptions {
            strict: true,
            with_defaults: false,
        },
    )
    .unwrap();
    assert_eq!(enc(&mut e, r#"{"user": {"id": 1}}"#).unwrap(), [1]);
    let err = enc(&mut e, r#"{"user": {"id": 1, "name": "x"}}"#).unwrap_err();
    assert!(err.reason.contains("unknown key `user.name`"), "{err}");
}

#[test]
fn kafka_headers_fill_the_headers_columns() {
    let cols = [
        col("a", "UInt8"),
        col("_headers.name", "Array(String)"),
        col("_headers.value", "Array(Nullable(String))"),
        col("_headers", "Map(String, String)"),
    ];
    let mut e = encoder(&cols);
    let hs: [(&[u8], Option<&[u8]>); 2] = [(b"h1", Some(b"v")), (b"h2", None)];
    let hs = spate_core::record::SliceHeaders(&hs);
    let m = Message {
        headers: Some(&hs),
        ..msg(r#"{"a": 1, "_headers": {"x": "y"}}"#)
    };
    let mut out = Vec::new();
    e.encode(&m, &mut out).unwrap();
    assert_eq!(
        out,
        [
            &[1u8][..],
            &[2, 2, b'h', b'1', 2, b'h', b'2'],
            &[2, 0, 1, b'v', 1],
            &[2, 2, b'h', b'1', 1, b'v', 2, b'h', b'2', 0],
        ]
        .concat()
    );
    // No headers: empty arrays and map.
    out.clear();
    e.encode(&msg(r#"{"a": 2}"#), &mut out).unwrap();
    assert_eq!(out, [2, 0, 0, 0]);
    for (name, ty) in [
        ("_headers.name", "String"),
        ("_headers.value", "Array(UInt8)"),
        ("_headers", "Map(String, UInt8)"),
    ] {
        let err = RowEncoder::new(&[col(name, ty)], EncoderOptions::default()).unwrap_err();
        assert!(
            matches!(err, SchemaError::MetadataType { .. }),
            "{name} {ty}: {err}"
        );
    }
}
