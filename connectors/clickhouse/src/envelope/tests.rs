//! The change encoder against the JSON encoder: each change must encode to
//! exactly the row the equivalent plain JSON document encodes to.

use super::*;
use crate::encode::{EncoderOptions, RowEncoder};
use crate::schema::DefaultKind;
use crate::types::parse_type;

fn col(name: &str, ty: &str) -> Column {
    Column {
        name: name.into(),
        ty: parse_type(ty).unwrap(),
        default_kind: DefaultKind::None,
        default_expression: String::new(),
    }
}

fn columns() -> Vec<Column> {
    vec![
        col("id", "UInt64"),
        col("name", "String"),
        col("ver", "UInt64"),
        col("is_deleted", "UInt8"),
        col("_op", "String"),
        col("_source_lsn", "UInt64"),
        col("_source_table", "String"),
    ]
}

fn encoder(
    kind: EnvelopeKind,
    engine: &str,
    cols: &[Column],
    spec_delete: OnDelete,
) -> ChangeEncoder {
    let spec = EnvelopeSpec {
        kind,
        on_delete: spec_delete,
        on_truncate: OnTruncate::Fail,
    };
    let shape = TableShape::parse(engine);
    let plan = ChangePlan::resolve(spec, &shape, cols, (1, &[]), true).unwrap();
    let inner = RowEncoder::new(cols, EncoderOptions::default()).unwrap();
    ChangeEncoder::new(plan, cols, ChRowEncoder(inner), None)
}

fn msg<'a>(offset: i64, key: Option<&'a [u8]>, payload: Option<&'a [u8]>) -> Message<'a> {
    Message {
        topic: "cdc.shop.users",
        partition: 0,
        offset,
        timestamp_ms: None,
        key,
        payload,
        headers: None,
    }
}

/// The row `doc` encodes to as a plain JSON message.
fn plain(cols: &[Column], doc: &str) -> Vec<u8> {
    let mut e = RowEncoder::new(cols, EncoderOptions::default()).unwrap();
    let mut out = Vec::new();
    e.encode(&msg(0, None, Some(doc.as_bytes())), &mut out)
        .unwrap();
    out
}

fn encode(e: &mut ChangeEncoder, m: &Message<'_>) -> (Encoded, Vec<u8>) {
    let mut out = Vec::new();
    let r = e.encode(m, &mut out).unwrap();
    (r, out)
}

const MODERN: &str = "ReplacingMergeTree(ver, is_deleted) ORDER BY id";

#[test]
fn debezium_changes_become_rows_with_version_flag_op_and_source() {
    let cols = columns();
    let mut e = encoder(EnvelopeKind::Debezium, MODERN, &cols, OnDelete::Apply);
    let create = br#"{"before":null,"after":{"id":1,"name":"a"},"source":{"lsn":99,"table":"users","db":"shop"},"op":"c","ts_ms":5}"#;
    assert_eq!(
        encode(&mut e, &msg(7, None, Some(create))),
        (
            Encoded::Row,
            plain(
                &cols,
                r#"{"id":1,"name":"a","ver":7,"is_deleted":0,"_op":"c","_source_lsn":99,"_source_table":"users"}"#
            )
        )
    );
    let wrapped = br#"{"schema":{"type":"struct","fields":[{"field":"op"}]},"payload":{"before":{"id":1,"name":"a"},"after":null,"source":{"lsn":100,"table":"users"},"op":"d"}}"#;
    assert_eq!(
        encode(&mut e, &msg(8, None, Some(wrapped))).1,
        plain(
            &cols,
            r#"{"id":1,"name":"a","ver":8,"is_deleted":1,"_op":"d","_source_lsn":100,"_source_table":"users"}"#
        )
    );
    // A flattened event's `__lsn` is its version.
    let flat = br#"{"id":2,"name":"b","__op":"u","__lsn":101,"__source_table":"users","__deleted":"false"}"#;
    assert_eq!(
        encode(&mut e, &msg(9, None, Some(flat))).1,
        plain(
            &cols,
            r#"{"id":2,"name":"b","ver":101,"is_deleted":0,"_op":"u","_source_lsn":101,"_source_table":"users"}"#
        )
    );
    // A PostgreSQL event's lsn is its version.
    let pg = br#"{"before":null,"after":{"id":4,"name":"d"},"source":{"connector":"postgresql","lsn":5000},"op":"c"}"#;
    assert_eq!(
        encode(&mut e, &msg(12, None, Some(pg))).1,
        plain(
            &cols,
            r#"{"id":4,"name":"d","ver":5000,"is_deleted":0,"_op":"c","_source_lsn":5000}"#
        )
    );
    let flat_delete = br#"{"id":2,"name":"b","__deleted":"true"}"#;
    assert_eq!(
        encode(&mut e, &msg(10, None, Some(flat_delete))).1,
        plain(
            &cols,
            r#"{"id":2,"name":"b","ver":10,"is_deleted":1,"_op":"d"}"#
        )
    );
    // An image member named like a filled column loses to the fill.
    let sneaky = br#"{"after":{"id":3,"ver":999999,"is_deleted":1},"op":"r"}"#;
    assert_eq!(
        encode(&mut e, &msg(11, None, Some(sneaky))).1,
        plain(&cols, r#"{"id":3,"ver":11,"is_deleted":0,"_op":"r"}"#)
    );
}

#[test]
fn tombstones_truncates_and_skipped_deletes_owe_no_row() {
    let cols = columns();
    let mut e = encoder(EnvelopeKind::Debezium, MODERN, &cols, OnDelete::Apply);
    assert!(e.takes_tombstones());
    assert_eq!(
        encode(&mut e, &msg(1, Some(b"{}"), None)),
        (
            Encoded::Nothing {
                reason: "tombstone"
            },
            vec![]
        )
    );
    let (r, row) = encode(
        &mut e,
        &msg(2, None, Some(br#"{"op":"t","before":null,"after":null}"#)),
    );
    assert!(
        matches!(r, Encoded::Stop { reason } if reason.contains("--on-truncate skip")),
        "{r:?}"
    );
    assert!(row.is_empty());

    let soft_less = vec![
        col("id", "UInt64"),
        col("name", "String"),
        col("ver", "UInt64"),
    ];
    let mut e = encoder(
        EnvelopeKind::Debezium,
        "ReplacingMergeTree(ver) ORDER BY id",
        &soft_less,
        OnDelete::Skip,
    );
    let delete = br#"{"before":{"id":1},"after":null,"op":"d"}"#;
    assert_eq!(
        encode(&mut e, &msg(3, None, Some(delete))),
        (Encoded::Nothing { reason: "delete" }, vec![])
    );
}

#[test]
fn the_soft_delete_column_marks_deletes_on_old_servers() {
    let cols = vec![
        col("id", "UInt64"),
        col("name", "String"),
        col("ver", "UInt64"),
        col("_deleted", "UInt8"),
    ];
    let mut e = encoder(
        EnvelopeKind::Debezium,
        "ReplacingMergeTree(ver) ORDER BY id",
        &cols,
        OnDelete::Apply,
    );
    let delete = br#"{"before":{"id":1,"name":null},"after":null,"op":"d"}"#;
    assert_eq!(
        encode(&mut e, &msg(3, None, Some(delete))).1,
        plain(&cols, r#"{"id":1,"ver":3,"_deleted":1}"#)
    );
}

#[test]
fn upserts_take_the_value_and_the_key_and_a_tombstone_deletes() {
    let cols = columns();
    let mut e = encoder(EnvelopeKind::Upsert, MODERN, &cols, OnDelete::Apply);
    assert_eq!(
        encode(
            &mut e,
            &msg(4, Some(br#"{"id":5}"#), Some(br#"{"name":"x","id":0}"#))
        )
        .1,
        plain(
            &cols,
            r#"{"name":"x","id":5,"ver":4,"is_deleted":0,"_op":"u"}"#
        )
    );
    let wrapped_key = br#"{"schema":{"type":"struct"},"payload":{"id":5}}"#;
    assert_eq!(
        encode(&mut e, &msg(6, Some(wrapped_key), None)).1,
        plain(&cols, r#"{"id":5,"ver":6,"is_deleted":1,"_op":"d"}"#)
    );
    let mut out = Vec::new();
    let err = e.encode(&msg(7, None, Some(b"{}")), &mut out).unwrap_err();
    assert!(err.reason.contains("needs a key"), "{err:?}");
    let err = e
        .encode(&msg(7, Some(b"5"), Some(b"{}")), &mut out)
        .unwrap_err();
    assert!(
        err.reason.contains("the key is not a JSON object"),
        "{err:?}"
    );
    assert!(out.is_empty());
}

#[test]
fn bad_events_name_the_reason_and_the_column() {
    let cols = columns();
    let mut e = encoder(EnvelopeKind::Debezium, MODERN, &cols, OnDelete::Apply);
    let mut out = Vec::new();
    let err = e
        .encode(
            &msg(1, None, Some(br#"{"after":{"id":"x"},"op":"c"}"#)),
            &mut out,
        )
        .unwrap_err();
    assert_eq!(err.column.as_deref(), Some("id"), "{err:?}");
    let err = e
        .encode(&msg(1, None, Some(br#"{"id":1}"#)), &mut out)
        .unwrap_err();
    assert!(
        err.reason.contains("not a Debezium change event"),
        "{err:?}"
    );
    assert!(out.is_empty());
}

#[test]
fn the_last_change_says_what_check_reports() {
    let cols = columns();
    let mut e = encoder(EnvelopeKind::Debezium, MODERN, &cols, OnDelete::Apply);
    let create = br#"{"after":{"id":1,"name":"a"},"op":"c"}"#;
    encode(&mut e, &msg(7, None, Some(create)));
    let (op, row) = e.last_change();
    assert_eq!(op, "c (create)");
    assert_eq!(
        row,
        Some(&br#"{"id":1,"name":"a","ver":7,"is_deleted":0,"_op":"c"}"#[..])
    );
    encode(&mut e, &msg(8, None, None));
    assert_eq!(e.last_change(), ("tombstone", None));
}

#[test]
fn collapsing_changes_cancel_the_previous_row_then_write_the_new_one() {
    let cols = vec![
        col("id", "UInt64"),
        col("name", "String"),
        col("sign", "Int8"),
        col("_op", "String"),
        col("_source_lsn", "UInt64"),
    ];
    let table = "CollapsingMergeTree(sign) ORDER BY id";
    let mut e = encoder(EnvelopeKind::Debezium, table, &cols, OnDelete::Apply);
    let create = br#"{"before":null,"after":{"id":1,"name":"a"},"source":{"lsn":9},"op":"c"}"#;
    assert_eq!(
        encode(&mut e, &msg(7, None, Some(create))),
        (
            Encoded::Row,
            plain(
                &cols,
                r#"{"id":1,"name":"a","_op":"c","_source_lsn":9,"sign":1}"#
            )
        )
    );
    let update = br#"{"before":{"id":1,"name":"a","sign":5},"after":{"id":1,"name":"b"},"source":{"lsn":10},"op":"u"}"#;
    let cancel = plain(
        &cols,
        r#"{"id":1,"name":"a","_op":"u","_source_lsn":10,"sign":-1}"#,
    );
    let state = plain(
        &cols,
        r#"{"id":1,"name":"b","_op":"u","_source_lsn":10,"sign":1}"#,
    );
    assert_eq!(
        encode(&mut e, &msg(8, None, Some(update))),
        (Encoded::Rows(2), [cancel, state].concat())
    );
    let delete = br#"{"before":{"id":1,"name":"b"},"after":null,"op":"d"}"#;
    assert_eq!(
        encode(&mut e, &msg(9, None, Some(delete))),
        (
            Encoded::Row,
            plain(&cols, r#"{"id":1,"name":"b","_op":"d","sign":-1}"#)
        )
    );
    // Without the previous row there is nothing to cancel with: an error
    // of the message, and nothing written.
    for text in [
        &br#"{"before":null,"after":{"id":1,"name":"c"},"op":"u"}"#[..],
        br#"{"id":1,"name":"c","__op":"u"}"#,
    ] {
        let mut out = b"kept".to_vec();
        let err = e.encode(&msg(10, None, Some(text)), &mut out).unwrap_err();
        assert!(
            err.reason.contains("cancels the key's previous row"),
            "{err:?}"
        );
        assert_eq!(out, b"kept");
    }
    // The state row fails to encode: the cancel row is taken back too.
    let bad = br#"{"before":{"id":1,"name":"a"},"after":{"id":"x","name":"b"},"op":"u"}"#;
    let mut out = Vec::new();
    e.encode(&msg(11, None, Some(bad)), &mut out).unwrap_err();
    assert!(out.is_empty());
    let mut skip = encoder(EnvelopeKind::Debezium, table, &cols, OnDelete::Skip);
    assert_eq!(
        encode(&mut skip, &msg(12, None, Some(delete))),
        (Encoded::Nothing { reason: "delete" }, vec![])
    );
}

/// Routed by a shard key, a collapsing change's rows go where the key's
/// single rows go, however the other columns change (the hash is of the
/// last row, and both rows hash alike); an update that changes the shard
/// key is refused, as its two rows belong on two shards.
#[test]
fn collapsing_rows_route_by_their_own_key() {
    let cols = vec![
        col("name", "String"),
        col("id", "UInt64"),
        col("sign", "Int8"),
    ];
    let spec = EnvelopeSpec {
        kind: EnvelopeKind::Debezium,
        on_delete: OnDelete::Apply,
        on_truncate: OnTruncate::Fail,
    };
    let shape = TableShape::parse("CollapsingMergeTree(sign) ORDER BY id");
    let plan = ChangePlan::resolve(spec, &shape, &cols, (2, &["id".into()]), true).unwrap();
    let mut inner = RowEncoder::new(&cols, EncoderOptions::default()).unwrap();
    inner.set_shard_key(&["id".to_owned()]).unwrap();
    let mut e = ChangeEncoder::new(plan, &cols, ChRowEncoder(inner), None);
    let hash = |e: &mut ChangeEncoder, text: &[u8]| {
        let mut out = Vec::new();
        e.encode(&msg(1, None, Some(text)), &mut out)
            .map(|_| e.route_hash(&out))
    };
    let create = hash(&mut e, br#"{"after":{"id":7,"name":"a"},"op":"c"}"#).unwrap();
    assert!(create.is_some());
    let update = hash(
        &mut e,
        br#"{"before":{"id":7,"name":"a"},"after":{"id":7,"name":"abcdef"},"op":"u"}"#,
    )
    .unwrap();
    assert_eq!(
        update, create,
        "the update's rows go where the key's rows go"
    );
    let err = hash(
        &mut e,
        br#"{"before":{"id":7,"name":"a"},"after":{"id":8,"name":"a"},"op":"u"}"#,
    )
    .unwrap_err();
    assert!(err.reason.contains("changes the shard key"), "{err:?}");
}
