//! Tests of [`super::RowEncoder::check_columns`] (`spate check`).
use super::*;
use crate::types::parse_type;

fn encoder() -> RowEncoder {
    let col = |name: &str, ty: &str| Column {
        name: name.into(),
        ty: parse_type(ty).unwrap(),
        default_kind: DefaultKind::None,
        default_expression: String::new(),
    };
    let cols = [
        col("n", "UInt64"),
        col("s", "String"),
        col("d", "Date"),
        col("_offset", "UInt64"),
    ];
    RowEncoder::new(&cols, EncoderOptions::default()).unwrap()
}

fn check(payload: Option<&str>) -> Result<Vec<Result<(), RowError>>, RowError> {
    let msg = Message {
        topic: "t",
        partition: 0,
        offset: 7,
        timestamp_ms: None,
        key: None,
        payload: payload.map(str::as_bytes),
        headers: None,
    };
    let mut out = vec![Ok(()); 9];
    encoder().check_columns(&msg, &mut out).map(|()| out)
}

#[test]
fn every_failing_column_is_reported() {
    let r = check(Some(r#"{"n": "abc", "s": 1, "d": "nope"}"#)).unwrap();
    assert_eq!(r.len(), 4);
    let n = r[0].as_ref().unwrap_err();
    assert_eq!(
        (n.column.as_deref(), n.value.as_str()),
        (Some("n"), "\"abc\"")
    );
    assert!(r[1].is_ok());
    assert_eq!(r[2].as_ref().unwrap_err().column.as_deref(), Some("d"));
    assert!(r[3].is_ok());
}

#[test]
fn good_and_missing_values_decode() {
    let r = check(Some(r#"{"n": 5, "s": "x"}"#)).unwrap();
    assert!(r.len() == 4 && r.iter().all(Result::is_ok));
}

#[test]
fn undecodable_messages_fail_as_a_whole() {
    for bad in [Some("not json"), Some("[1]"), None] {
        let e = check(bad).unwrap_err();
        assert_eq!(e.column, None, "{bad:?}");
    }
}

#[test]
fn metadata_columns_are_known() {
    let e = encoder();
    let meta: Vec<bool> = (0..5).map(|i| e.is_metadata_column(i)).collect();
    assert_eq!(meta, [false, false, false, true, false]);
}
