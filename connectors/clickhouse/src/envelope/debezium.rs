//! One Debezium change event in JSON, in any of its three shapes:
//!
//! - the envelope, `{"before": .., "after": .., "source": {..}, "op": "c",
//!   "ts_ms": ..}` (`value.converter.schemas.enable=false`);
//! - the same inside `{"schema": {..}, "payload": {..}}`
//!   (`schemas.enable=true`);
//! - flattened by `ExtractNewRecordState`: the row itself, with the fields
//!   it adds (`__deleted`, `__op`, `__source_ts_ms`, `__lsn`, ...), plain or
//!   wrapped the same way.
//!
//! [`parse`] finds the operation, the row image and where the source
//! fields are, without copying; [`super::ChangeEncoder`] writes the row.

use crate::encode::json::{scan_document, utf8, Walk};
use crate::encode::RowError;

/// A change's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// `r`: a snapshot read.
    Read,
    /// `c`.
    Create,
    /// `u`.
    Update,
    /// `d`.
    Delete,
    /// `t`: the whole table was truncated.
    Truncate,
    /// `m`: a logical decoding message (PostgreSQL), no row.
    Message,
}

impl Op {
    fn parse(raw: &[u8]) -> Option<Op> {
        Some(match raw {
            b"\"r\"" => Op::Read,
            b"\"c\"" => Op::Create,
            b"\"u\"" => Op::Update,
            b"\"d\"" => Op::Delete,
            b"\"t\"" => Op::Truncate,
            b"\"m\"" => Op::Message,
            _ => return None,
        })
    }

    /// What `spate check` calls it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Op::Read => "r (snapshot read)",
            Op::Create => "c (create)",
            Op::Update => "u (update)",
            Op::Delete => "d (delete)",
            Op::Truncate => "t (truncate)",
            Op::Message => "m (message)",
        }
    }

    /// The letter Debezium uses, as a JSON string (for `_op`).
    pub(crate) fn json(self) -> &'static [u8] {
        match self {
            Op::Read => b"\"r\"",
            Op::Create => b"\"c\"",
            Op::Update => b"\"u\"",
            Op::Delete => b"\"d\"",
            Op::Truncate => b"\"t\"",
            Op::Message => b"\"m\"",
        }
    }
}

/// Where a change's row and source fields are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape<'a> {
    /// The envelope: the image (`after`, or `before` for a delete) and the
    /// `source` block.
    Envelope {
        image: Option<&'a [u8]>,
        /// An update's `before` image, when the source sends it (a
        /// collapsing table cancels the previous row with it).
        before: Option<&'a [u8]>,
        source: Option<&'a [u8]>,
    },
    /// Flattened: the row, with `__` fields to leave out and read.
    Flattened(&'a [u8]),
}

/// One parsed change (`None` from [`parse`]: a wrapper whose payload is
/// null, i.e. a tombstone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Change<'a> {
    pub(crate) op: Op,
    pub(crate) shape: Shape<'a>,
}

fn bad(text: &[u8], reason: impl Into<String>) -> RowError {
    RowError::new(None, &String::from_utf8_lossy(text), reason)
}

fn json_error<E>(text: &[u8], e: Walk<E>) -> RowError {
    match e {
        Walk::Json(j) => bad(text, format!("invalid JSON at byte {}: {}", j.at, j.reason)),
        Walk::User(_) => bad(text, "invalid JSON"),
    }
}

/// The members of a change object that matter.
#[derive(Default)]
struct Members<'a> {
    schema: bool,
    payload: Option<&'a [u8]>,
    op: Option<&'a [u8]>,
    before: Option<&'a [u8]>,
    after: Option<&'a [u8]>,
    source: Option<&'a [u8]>,
    flat_op: Option<&'a [u8]>,
    flat_deleted: Option<&'a [u8]>,
}

fn members(b: &[u8]) -> Result<Members<'_>, RowError> {
    let mut m = Members::default();
    scan_document(b, |key, value| {
        match key.raw {
            b"schema" => m.schema = true,
            b"payload" => m.payload = Some(value),
            b"op" => m.op = Some(value),
            b"before" => m.before = Some(value),
            b"after" => m.after = Some(value),
            b"source" => m.source = Some(value),
            b"__op" => m.flat_op = Some(value),
            b"__deleted" => m.flat_deleted = Some(value),
            _ => {}
        }
        Ok::<_, ()>(())
    })
    .map_err(|e| json_error(b, e))?;
    Ok(m)
}

fn object(v: Option<&[u8]>) -> Option<&[u8]> {
    v.filter(|v| v.first() == Some(&b'{'))
}

/// Parse the change event `payload`.
pub(crate) fn parse(payload: &[u8]) -> Result<Option<Change<'_>>, RowError> {
    utf8(payload).map_err(|e| bad(payload, format!("payload is not valid UTF-8: {e}")))?;
    let mut m = members(payload)?;
    let mut b = payload;
    if m.schema && m.payload.is_some() && m.op.is_none() {
        match m.payload {
            Some(p) if p.first() == Some(&b'{') => {
                b = p;
                m = members(p)?;
            }
            _ => return Ok(None),
        }
    }
    if let Some(op) = m.op {
        let op = Op::parse(op).ok_or_else(|| {
            bad(
                op,
                "unknown Debezium operation (expected \"r\", \"c\", \"u\", \"d\", \"t\" or \"m\")",
            )
        })?;
        let image = match op {
            Op::Read | Op::Create | Op::Update => Some(object(m.after).ok_or_else(|| {
                bad(b, "a Debezium create, read or update without an `after` object")
            })?),
            Op::Delete => Some(object(m.before).ok_or_else(|| {
                bad(b, "a Debezium delete without a `before` object (the table's replica identity must include its key)")
            })?),
            Op::Truncate | Op::Message => None,
        };
        let source = object(m.source);
        let before = (op == Op::Update).then(|| object(m.before)).flatten();
        return Ok(Some(Change {
            op,
            shape: Shape::Envelope {
                image,
                before,
                source,
            },
        }));
    }
    if m.flat_op.is_none() && m.flat_deleted.is_none() {
        return Err(bad(b, "not a Debezium change event: no `op` member (the envelope) and no `__op` or `__deleted` member (ExtractNewRecordState with add.fields=op or delete.handling.mode=rewrite)"));
    }
    let deleted = matches!(m.flat_deleted, Some(b"\"true\"" | b"true"));
    let op = match m.flat_op {
        Some(raw) => {
            Op::parse(raw).ok_or_else(|| bad(raw, "unknown Debezium operation in `__op`"))?
        }
        None if deleted => Op::Delete,
        None => Op::Update,
    };
    let op = if deleted { Op::Delete } else { op };
    Ok(Some(Change {
        op,
        shape: Shape::Flattened(b),
    }))
}

/// A JSON number member as `u64` (`None`: null, not a whole number).
fn whole(raw: &[u8]) -> Option<u64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// The position in the source's log that orders a change, where the
/// connector has one: PostgreSQL's `source.lsn`; MySQL's binlog file and
/// position, `index << 32 | pos` (`mysql-bin.000042` is index 42, a
/// position is below 2^32); a flattened event's `__lsn` or
/// `__source_lsn`. `Ok(None)`: the connector has no such position (SQL
/// Server, Oracle, MongoDB, ...), or the event carries no `source`: the
/// Kafka offset orders it. `Err`: a PostgreSQL or MySQL event without its
/// position, which would otherwise get a version of another kind.
pub(crate) fn position(shape: &Shape<'_>) -> Result<Option<i64>, RowError> {
    let (connector, lsn, file, pos) = match *shape {
        Shape::Envelope { source: None, .. } => return Ok(None),
        Shape::Envelope {
            source: Some(source),
            ..
        } => {
            let mut found: [Option<&[u8]>; 4] = [None; 4];
            // Validated with the whole message.
            let _ = scan_document(source, |key, value| {
                let at = match key.raw {
                    b"connector" => 0,
                    b"lsn" => 1,
                    b"file" => 2,
                    b"pos" => 3,
                    _ => return Ok::<_, ()>(()),
                };
                found[at] = Some(value);
                Ok(())
            });
            let [connector, lsn, file, pos] = found;
            (connector, lsn, file, pos)
        }
        Shape::Flattened(row) => {
            let mut lsn = None;
            let _ = scan_document(row, |key, value| {
                if matches!(key.raw, b"__lsn" | b"__source_lsn") {
                    lsn = Some(value);
                }
                Ok::<_, ()>(())
            });
            return Ok(lsn.and_then(whole).and_then(|l| i64::try_from(l).ok()));
        }
    };
    let too_big = |what: &[u8]| bad(what, "the source position does not fit in 63 bits");
    match connector {
        Some(b"\"postgresql\"") => {
            let raw = lsn.unwrap_or(b"null");
            let lsn = whole(raw).ok_or_else(|| {
                bad(
                    raw,
                    "a PostgreSQL change without `source.lsn`: its version is the lsn",
                )
            })?;
            Ok(Some(i64::try_from(lsn).map_err(|_| too_big(raw))?))
        }
        Some(b"\"mysql\"") => {
            let (file, pos) = (file.unwrap_or(b"null"), pos.unwrap_or(b"null"));
            let index = std::str::from_utf8(file)
                .ok()
                .and_then(|f| f.trim_matches('"').rsplit('.').next()?.parse::<u64>().ok());
            let (Some(index), Some(pos)) = (index, whole(pos).filter(|&p| p < 1 << 32)) else {
                return Err(bad(
                    file,
                    "a MySQL change without `source.file` (name.NNNNNN) and `source.pos`: its version is the binlog position",
                ));
            };
            let v = index.checked_mul(1 << 32).map(|i| i | pos);
            Ok(Some(
                v.and_then(|v| i64::try_from(v).ok())
                    .ok_or_else(|| too_big(file))?,
            ))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_shapes_parse() {
        let c = parse(br#"{"before":null,"after":{"id":1},"source":{"lsn":7},"op":"c","ts_ms":1}"#)
            .unwrap()
            .unwrap();
        assert_eq!(c.op, Op::Create);
        assert_eq!(
            c.shape,
            Shape::Envelope {
                image: Some(br#"{"id":1}"#),
                before: None,
                source: Some(br#"{"lsn":7}"#)
            }
        );
        let c = parse(br#"{"schema":{"type":"struct","fields":[]},"payload":{"before":{"id":2},"after":null,"op":"d"}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(c.op, Op::Delete);
        assert!(
            matches!(c.shape, Shape::Envelope { image: Some(i), before: None, source: None } if i == br#"{"id":2}"#)
        );
        let c = parse(br#"{"id":3,"__deleted":"true"}"#).unwrap().unwrap();
        assert_eq!(
            (c.op, c.shape),
            (
                Op::Delete,
                Shape::Flattened(br#"{"id":3,"__deleted":"true"}"#)
            )
        );
        let c = parse(br#"{"schema":{},"payload":{"id":3,"__op":"r","__deleted":"false"}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(c.op, Op::Read);
        assert_eq!(parse(br#"{"schema":{},"payload":null}"#).unwrap(), None);
        let u = parse(br#"{"before":{"id":4,"n":1},"after":{"id":4,"n":2},"op":"u"}"#)
            .unwrap()
            .unwrap();
        assert!(
            matches!(u.shape, Shape::Envelope { image: Some(a), before: Some(b), .. } if a == br#"{"id":4,"n":2}"# && b == br#"{"id":4,"n":1}"#)
        );
        let t = parse(br#"{"before":null,"after":null,"op":"t","source":{}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(t.op, Op::Truncate);
    }

    #[test]
    fn postgresql_and_mysql_changes_are_ordered_by_their_log_position() {
        let at = |text: &[u8]| position(&parse(text).unwrap().unwrap().shape);
        assert_eq!(
            at(br#"{"after":{"id":1},"source":{"connector":"postgresql","lsn":24023128},"op":"c"}"#)
                .unwrap(),
            Some(24_023_128)
        );
        assert_eq!(
            at(br#"{"after":{"id":1},"source":{"connector":"mysql","file":"mysql-bin.000003","pos":154,"row":0},"op":"c"}"#)
                .unwrap(),
            Some((3 << 32) | 154)
        );
        // Another connector, or no source: the offset orders it.
        assert_eq!(
            at(br#"{"after":{"id":1},"source":{"connector":"sqlserver","change_lsn":"00000027:00000758:0003"},"op":"c"}"#)
                .unwrap(),
            None
        );
        assert_eq!(at(br#"{"after":{"id":1},"op":"c"}"#).unwrap(), None);
        assert_eq!(at(br#"{"id":1,"__op":"u","__lsn":77}"#).unwrap(), Some(77));
        assert_eq!(at(br#"{"id":1,"__op":"u"}"#).unwrap(), None);
        let e =
            at(br#"{"after":{"id":1},"source":{"connector":"postgresql"},"op":"c"}"#).unwrap_err();
        assert!(e.reason.contains("without `source.lsn`"), "{e}");
        let e = at(br#"{"after":{"id":1},"source":{"connector":"mysql","pos":4},"op":"c"}"#)
            .unwrap_err();
        assert!(e.reason.contains("without `source.file`"), "{e}");
    }

    #[test]
    fn what_is_not_a_change_says_why() {
        for (text, needle) in [
            (&br#"{"id":1}"#[..], "not a Debezium change event"),
            (br#"{"op":"x","after":{}}"#, "unknown Debezium operation"),
            (br#"{"op":"u","after":null}"#, "without an `after` object"),
            (br#"{"op":"d","before":null}"#, "without a `before` object"),
            (br#"{"op":"c""#, "invalid JSON"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(
                e.reason.contains(needle),
                "{}: {e}",
                String::from_utf8_lossy(text)
            );
        }
    }
}
