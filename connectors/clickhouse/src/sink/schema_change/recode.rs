//! What an insert worker sends for a chunk: its bytes as its schema
//! version wants them, or, for a chunk encoded before the table changed,
//! re-encoded for the table as it is now. Called by insert workers (tokio
//! tasks) once per chunk, and again after an insert failed because the
//! columns changed.
//!
//! A chunk of an older version keeps its own column list where every one
//! of its columns still exists with the same type: added columns are left
//! to the server (their DEFAULT; the messages were encoded before spate
//! knew them). Otherwise its rows are read with the old layout and sent
//! as Native blocks without the dropped columns, numbers widened to their
//! new type ([`NativeLayout::retarget`]). A change spate cannot convert
//! rows for is an error: the pipeline stops without committing the chunk
//! and asks to be started again (`Recovery::StartAgain` in its fatal error); the
//! binary does so in the same process, which reads those messages again
//! and encodes them for the new columns.

use super::version::Version;
use crate::encode::NativeScratch;
use crate::schema::Column;
use crate::sink::insert::target::InsertQuery;
use crate::types::ChType;
use std::sync::Arc;

/// The bytes and the statement of one insert.
pub(crate) struct Body {
    pub(crate) bytes: Vec<u8>,
    pub(crate) query: Arc<InsertQuery>,
}

/// A chunk of version `own` (`data`), for a table whose columns are now
/// `now`'s.
/// `scratch` holds the transposition's buffers (see [`NativeScratch`]).
pub(crate) fn body_for(
    own: &Version,
    now: &Version,
    data: &[u8],
    scratch: &mut NativeScratch,
) -> Result<Body, String> {
    let mut plain = || -> Result<Vec<u8>, String> {
        match &own.native {
            Some(layout) => layout
                .transpose_in(data, scratch)
                .map_err(|e| e.to_string()),
            None => Ok(data.to_vec()),
        }
    };
    if own.id == now.id {
        return Ok(Body {
            bytes: plain()?,
            query: own.query.clone(),
        });
    }
    let targets = new_types(&own.insert_types, &now.columns);
    let unchanged =
        (own.insert_types.iter().zip(&targets)).all(|((_, old), new)| new.as_ref() == Some(old));
    if unchanged {
        return Ok(Body {
            bytes: plain()?,
            query: own.query.clone(),
        });
    }
    let Some(layout) = &own.rows_layout else {
        return Err(format!(
            "a batch encoded before the table's columns changed cannot be re-encoded (one of its types cannot be sent as Native); its messages are read again: {}",
            describe(&own.insert_types, &targets)
        ));
    };
    let layout = layout.retarget(&targets)?;
    let columns = (own.insert_types.iter().zip(&targets))
        .filter(|(_, t)| t.is_some())
        .map(|((name, _), _)| name.clone())
        .collect();
    Ok(Body {
        bytes: (layout.transpose_in(data, scratch)).map_err(|e| e.to_string())?,
        query: Arc::new(InsertQuery {
            columns,
            format: "Native",
            ..(*own.query).clone()
        }),
    })
}

/// Per insert column of the old version: its type in the table now, or
/// `None` if it is gone (or no longer insertable).
fn new_types(old: &[(String, ChType)], now: &[Column]) -> Vec<Option<ChType>> {
    old.iter()
        .map(|(name, _)| {
            now.iter()
                .find(|c| &c.name == name && c.default_kind.is_insertable())
                .map(|c| c.ty.clone())
        })
        .collect()
}

fn describe(old: &[(String, ChType)], targets: &[Option<ChType>]) -> String {
    (old.iter().zip(targets))
        .filter(|((_, o), n)| n.as_ref() != Some(o))
        .map(|((name, o), n)| match n {
            Some(n) => format!("`{name}` {o} -> {n}"),
            None => format!("`{name}` dropped"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::DefaultKind;
    use crate::sink::schema_change::version::test_version;
    use crate::types::parse_type;
    use spate_core::record::Message;

    fn version(id: u64, cols: &[(&str, &str, DefaultKind)], server: &str) -> Version {
        let columns = cols
            .iter()
            .map(|(n, t, k)| Column {
                default_kind: *k,
                ..Column::plain(n, parse_type(t).unwrap())
            })
            .collect();
        test_version(id, columns, server, true)
    }

    fn rows(v: &Version, payloads: &[&str]) -> Vec<u8> {
        let mut e = v.factory.row_encoder().unwrap();
        let mut out = Vec::new();
        for p in payloads {
            let m = Message {
                topic: "t",
                partition: 0,
                offset: 0,
                timestamp_ms: None,
                key: None,
                payload: Some(p.as_bytes()),
                headers: None,
            };
            e.encode(&m, &mut out).unwrap();
        }
        out
    }

    const N: DefaultKind = DefaultKind::None;

    #[test]
    fn an_old_batch_loses_dropped_columns_and_widens_numbers() {
        let old = version(
            0,
            &[("i", "UInt8", N), ("a", "UInt32", N), ("gone", "String", N)],
            "18.16.1",
        );
        let now = version(
            1,
            &[("i", "UInt8", N), ("a", "UInt64", N), ("new", "String", N)],
            "18.16.1",
        );
        let data = rows(&old, &[r#"{"i": 1, "a": 4000000000, "gone": "x"}"#]);
        let b = body_for(&old, &now, &data, &mut NativeScratch::default()).unwrap();
        assert_eq!(b.query.columns, ["i", "a"]);
        assert_eq!(b.query.format, "Native");
        let mut want = vec![2u8, 1, 1, b'i', 5];
        want.extend_from_slice(b"UInt8");
        want.push(1);
        want.extend_from_slice(&[1, b'a', 6]);
        want.extend_from_slice(b"UInt64");
        want.extend_from_slice(&4_000_000_000u64.to_le_bytes());
        assert_eq!(b.bytes, want);
        // The current version's batches go as they are.
        let cur = body_for(
            &now,
            &now,
            &rows(&now, &[r#"{"i": 2}"#]),
            &mut NativeScratch::default(),
        )
        .unwrap();
        assert_eq!(cur.query.columns, ["i", "a", "new"]);
    }

    #[test]
    fn an_added_column_keeps_the_old_statement_and_narrowing_is_refused() {
        let old = version(0, &[("i", "Int32", N)], "26.9.1");
        let added = version(
            1,
            &[("i", "Int32", N), ("b", "UInt8", DefaultKind::Default)],
            "26.9.1",
        );
        let data = rows(&old, &[r#"{"i": -1}"#]);
        let b = body_for(&old, &added, &data, &mut NativeScratch::default()).unwrap();
        assert_eq!(
            (b.query.columns.as_slice(), b.query.format),
            (&["i".to_owned()][..], "Native")
        );
        assert!(
            b.bytes.ends_with(&(-1i32).to_le_bytes()),
            "as its own version sends it"
        );
        let narrowed = version(2, &[("i", "Int16", N)], "26.9.1");
        let e = body_for(&old, &narrowed, &data, &mut NativeScratch::default())
            .err()
            .unwrap();
        assert!(
            e.contains("`i`") && e.contains("Int32") && e.contains("Int16"),
            "{e}"
        );
        let signed = version(3, &[("i", "Int64", N)], "26.9.1");
        let b = body_for(&old, &signed, &data, &mut NativeScratch::default()).unwrap();
        assert!(b.bytes.ends_with(&(-1i64).to_le_bytes()), "sign-extended");
    }
}
