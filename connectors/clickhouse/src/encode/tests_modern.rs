//! Exact-bytes tests of the types of current servers (JSON, Variant,
//! Dynamic, 256-bit numbers); the expected bytes are what ClickHouse 26.9
//! writes for the same values with `FORMAT RowBinary`.

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

fn encode(cols: &[Column], json: &str) -> Result<Vec<u8>, RowError> {
    let mut e = RowEncoder::new(cols, EncoderOptions::default()).unwrap();
    let mut out = Vec::new();
    let msg = Message {
        topic: "t",
        partition: 0,
        offset: 0,
        timestamp_ms: None,
        key: None,
        payload: Some(json.as_bytes()),
        headers: None,
    };
    e.encode(&msg, &mut out)?;
    Ok(out)
}

fn ok(ty: &str, value: &str) -> Vec<u8> {
    encode(&[col("v", ty)], &format!("{{\"v\": {value}}}"))
        .unwrap_or_else(|e| panic!("{ty} from {value}: {e}"))
}

fn i64le(v: i64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn dynamic_scalars_carry_their_type() {
    assert_eq!(ok("Dynamic", "42"), cat(&[&[0x0a], &i64le(42)]));
    assert_eq!(ok("Dynamic", "\"x\""), vec![0x15, 1, b'x']);
    assert_eq!(ok("Dynamic", "true"), vec![0x2d, 1]);
    assert_eq!(ok("Dynamic", "null"), vec![0x00]);
    assert_eq!(ok("Dynamic", "1.5"), cat(&[&[0x0e], &1.5f64.to_le_bytes()]));
    assert_eq!(
        ok("Dynamic", "18446744073709551615"),
        cat(&[&[0x04], &u64::MAX.to_le_bytes()])
    );
}

#[test]
fn dynamic_arrays_of_one_kind_are_nullable_arrays_else_dynamic() {
    // Array(Nullable(Int64)) [1, NULL]
    assert_eq!(
        ok("Dynamic", "[1, null]"),
        cat(&[&[0x1e, 0x23, 0x0a, 2, 0], &i64le(1), &[1], &i64le(0)])
    );
    // Array(Dynamic) [1, 'a'], as the server writes `[1, 'a']::Array(Dynamic)`
    assert_eq!(
        ok("Dynamic", "[1, \"a\"]"),
        cat(&[&[0x1e, 0x2b, 0x20, 2, 0x0a], &i64le(1), &[0x15, 1, b'a']])
    );
    assert_eq!(ok("Dynamic", "[]"), vec![0x1e, 0x23, 0x15, 0]);
}

#[test]
fn json_objects_become_dotted_paths() {
    let got = ok(
        "JSON",
        r#"{"a": 1, "b": {"c": "x", "e": {}}, "d": [1, 2], "n": null, "g": true}"#,
    );
    let want = cat(&[
        &[4],
        &[1, b'a', 0x0a],
        &i64le(1),
        &[3, b'b', b'.', b'c', 0x15, 1, b'x'],
        &[1, b'd', 0x1e, 0x23, 0x0a, 2, 0],
        &i64le(1),
        &[0],
        &i64le(2),
        &[1, b'g', 0x2d, 1],
    ]);
    assert_eq!(got, want);
    assert_eq!(ok("JSON", "{}"), vec![0]);
    // A nested object inside Dynamic is a JSON value with the defaults.
    assert_eq!(
        ok("Dynamic", r#"{"a": {"b": 1}}"#),
        cat(&[
            &[0x30, 0, 0x80, 0x08, 0x20, 0, 0, 0, 1, 3, b'a', b'.', b'b', 0x0a],
            &i64le(1)
        ])
    );
}

#[test]
fn json_typed_paths_use_their_type_and_skips_drop_paths() {
    let ty = "JSON(a UInt32, c.d String, e UInt8, SKIP x)";
    // As the server writes '{"a":1,"c":{"d":2}}'::JSON(a UInt32, c.d String, e UInt8),
    // in document order, the missing typed path `e` last.
    let got = ok(ty, r#"{"a": 1, "c": {"d": "2"}, "x": {"y": 1}}"#);
    let want = cat(&[
        &[3, 1, b'a'],
        &1u32.to_le_bytes(),
        &[3, b'c', b'.', b'd', 1, b'2'],
        &[1, b'e', 0],
    ]);
    assert_eq!(got, want);
    let e = encode(&[col("v", ty)], r#"{"v": {"a": "x"}}"#).unwrap_err();
    assert!(e.reason.contains("path `a`"), "{e}");
}

#[test]
fn variants_pick_the_alternative_by_value() {
    // Alternatives in name order: Array(UInt64) = 0, String = 1, UInt64 = 2.
    let ty = "Variant(String, UInt64, Array(UInt64))";
    assert_eq!(ok(ty, "\"abc\""), vec![1, 3, b'a', b'b', b'c']);
    assert_eq!(ok(ty, "42"), cat(&[&[2], &42u64.to_le_bytes()]));
    assert_eq!(ok(ty, "[1]"), cat(&[&[0, 1], &1u64.to_le_bytes()]));
    assert_eq!(ok(ty, "null"), vec![255]);
    // No natural home: the first alternative that takes it (String).
    assert_eq!(ok(ty, "true"), vec![1, 4, b't', b'r', b'u', b'e']);
    let e = encode(&[col("v", "Variant(UInt8, Bool)")], r#"{"v": "x"}"#).unwrap_err();
    assert!(e.reason.contains("no alternative"), "{e}");
    assert_eq!(ok("Variant(Bool, Float64)", "true"), vec![0, 1]);
    assert_eq!(
        ok("Variant(Bool, Float64)", "1.5"),
        cat(&[&[1], &1.5f64.to_le_bytes()])
    );
}

#[test]
fn wide_numbers_are_32_bytes() {
    assert_eq!(ok("Int256", "-1"), vec![0xff; 32]);
    assert_eq!(ok("UInt256", "\"1\""), cat(&[&[1], &[0; 31]]));
    assert_eq!(ok("Decimal256(2)", "-0.01"), vec![0xff; 32]);
    assert!(encode(&[col("v", "UInt256")], r#"{"v": -1}"#).is_err());
}

#[test]
fn native_layout_falls_back_for_json_variant_dynamic_only() {
    let wide = [
        col("a", "Int256"),
        col("b", "Decimal256(5)"),
        col("c", "UInt256"),
    ];
    let e = RowEncoder::new(&wide, EncoderOptions::default()).unwrap();
    assert!(e.native_layout().is_some());
    for ty in ["JSON", "Dynamic", "Variant(String, UInt8)"] {
        let e = RowEncoder::new(
            &[col("a", "UInt8"), col("v", ty)],
            EncoderOptions::default(),
        )
        .unwrap();
        assert!(e.native_layout().is_none(), "{ty}");
        assert_eq!(e.format(), "RowBinary");
    }
}
