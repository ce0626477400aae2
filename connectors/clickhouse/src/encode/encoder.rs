//! [`RowEncoder`]: the per-table column plan and the per-row loop.

use super::json::{scan_document, unescape_into, Walk};
use super::native::NativeLayout;
use super::value::{put_int, write_text, write_value, write_zero, Fail};
use crate::schema::{Column, DefaultKind};
use crate::shard_hash::{combine, KeyHash};
use crate::types::ChType;
use spate_core::record::Message;

/// Encoder switches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncoderOptions {
    /// Reject messages with keys that match no column.
    pub strict: bool,
    /// Emit `RowBinaryWithDefaults` (a flag byte before each column; 1 =
    /// let the server compute the column's DEFAULT for a missing key).
    /// Needs ClickHouse >= 23.7 (see [`crate::ServerFeatures`]).
    pub with_defaults: bool,
}

/// The schema cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// No column can be inserted.
    #[error("the table has no insertable columns")]
    NoInsertableColumns,
    /// A column's type cannot be encoded.
    #[error("column `{column}`: {reason}")]
    Unsupported {
        /// Column name.
        column: String,
        /// Why.
        reason: String,
    },
    /// A metadata column (`_topic`, `_key`, ...) has a type spate cannot fill.
    #[error("metadata column `{column}` has type {ty}, expected {expected}")]
    MetadataType {
        /// Column name.
        column: String,
        /// Its type.
        ty: String,
        /// What spate can fill.
        expected: &'static str,
    },
    /// Two columns share a name.
    #[error("duplicate column `{0}`")]
    Duplicate(String),
}

/// One message could not be encoded. Data error: not retriable; the message
/// goes to the dead-letter path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason} (value: {value})", column.as_deref().map(|c| format!("column `{c}`: ")).unwrap_or_default())]
pub struct RowError {
    /// The column being encoded, if the error is about one.
    pub column: Option<String>,
    /// The offending value, cut to at most 64 characters (ending in `…`).
    pub value: String,
    /// What was wrong.
    pub reason: String,
}

const MAX_VALUE_CHARS: usize = 64;

fn cut(s: &str) -> String {
    if s.chars().count() <= MAX_VALUE_CHARS {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(MAX_VALUE_CHARS - 1).collect();
    out.push('…');
    out
}

impl RowError {
    pub(crate) fn new(column: Option<&str>, value: &str, reason: impl Into<String>) -> RowError {
        RowError {
            column: column.map(str::to_owned),
            value: cut(value),
            reason: reason.into(),
        }
    }
}

/// Where a column's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Json,
    Topic,
    Partition,
    Offset,
    Timestamp,
    Key,
}

#[derive(Debug)]
struct Plan {
    name: String,
    ty: ChType,
    nullable: bool,
    has_default: bool,
    source: Source,
}

const EMPTY: u32 = u32::MAX;
/// Slot value for known keys that are not JSON columns (metadata names).
const IGNORE: u32 = u32::MAX - 1;

/// Encodes JSON messages into RowBinary rows for one table.
#[derive(Debug)]
pub struct RowEncoder {
    plans: Vec<Plan>,
    insert_columns: Vec<String>,
    opts: EncoderOptions,
    /// Open-addressing table: (hash, plan index or IGNORE), EMPTY = free.
    table: Vec<(u64, u32)>,
    mask: usize,
    /// Per plan: byte span of the JSON value in the current payload.
    spans: Vec<Option<(usize, usize)>>,
    scratch: Vec<u8>,
    key_scratch: Vec<u8>,
    /// Sharding key: (plan index, how its value hashes), in key order.
    shard_key: Vec<(usize, KeyHash)>,
    /// Per plan: its position in `shard_key`, or `NOT_KEY`.
    key_of_plan: Vec<u8>,
    /// Per key column: byte span of its value in the last encoded row,
    /// relative to the row's start.
    key_spans: Vec<(usize, usize)>,
}

const NOT_KEY: u8 = u8::MAX;

#[inline]
fn hash(b: &[u8]) -> u64 {
    // FNV-1a: short keys, no allocation, good enough spread for a table
    // that is at most 25% full.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &c in b {
        h ^= u64::from(c);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

pub(crate) fn strip(ty: &ChType) -> (&ChType, bool) {
    let t = ty.strip_low_cardinality();
    match t {
        ChType::Nullable(inner) => (inner.strip_low_cardinality(), true),
        t => (t, false),
    }
}

pub(crate) fn metadata_source(c: &Column) -> Result<Source, SchemaError> {
    let (inner, _) = strip(&c.ty);
    let bad = |expected| SchemaError::MetadataType {
        column: c.name.clone(),
        ty: c.ty.to_string(),
        expected,
    };
    Ok(match c.name.as_str() {
        "_topic" if matches!(inner, ChType::String) => Source::Topic,
        "_topic" => return Err(bad("String or LowCardinality(String)")),
        "_partition" if inner.is_integer() => Source::Partition,
        "_partition" => return Err(bad("an integer type")),
        "_offset" if inner.is_integer() => Source::Offset,
        "_offset" => return Err(bad("an integer type")),
        "_timestamp"
            if inner.is_integer()
                || matches!(inner, ChType::DateTime(_) | ChType::DateTime64(..)) =>
        {
            Source::Timestamp
        }
        "_timestamp" => return Err(bad("DateTime, DateTime64 or an integer type")),
        "_key" if matches!(inner, ChType::String) => Source::Key,
        "_key" => return Err(bad("String or Nullable(String)")),
        _ => Source::Json,
    })
}

pub(crate) fn check_type(column: &str, ty: &ChType) -> Result<(), SchemaError> {
    let bad = |reason: &str| SchemaError::Unsupported {
        column: column.to_owned(),
        reason: reason.to_owned(),
    };
    match ty {
        ChType::Nothing => Err(bad("type Nothing cannot be inserted")),
        ChType::Nullable(t) if matches!(**t, ChType::Nothing) => Ok(()),
        ChType::Array(t) if matches!(**t, ChType::Nothing) => Ok(()),
        ChType::Nullable(t) | ChType::Array(t) | ChType::LowCardinality(t) => check_type(column, t),
        ChType::Map(k, v) => check_type(column, k).and_then(|()| check_type(column, v)),
        ChType::Tuple(items) => items.iter().try_for_each(|(_, t)| check_type(column, t)),
        ChType::Variant(items) => items.iter().try_for_each(|t| check_type(column, t)),
        ChType::Json(spec) => spec
            .typed
            .iter()
            .try_for_each(|(_, t)| check_type(column, t)),
        ChType::Enum8(items) if items.is_empty() => Err(bad("empty Enum8")),
        ChType::Enum16(items) if items.is_empty() => Err(bad("empty Enum16")),
        _ => Ok(()),
    }
}

impl RowEncoder {
    /// Build an encoder for `columns` (in table order). MATERIALIZED, ALIAS
    /// and EPHEMERAL columns are skipped.
    pub fn new(columns: &[Column], opts: EncoderOptions) -> Result<RowEncoder, SchemaError> {
        let mut plans = Vec::new();
        for c in columns.iter().filter(|c| c.default_kind.is_insertable()) {
            if plans.iter().any(|p: &Plan| p.name == c.name) {
                return Err(SchemaError::Duplicate(c.name.clone()));
            }
            check_type(&c.name, &c.ty)?;
            let source = metadata_source(c)?;
            plans.push(Plan {
                name: c.name.clone(),
                nullable: strip(&c.ty).1,
                ty: c.ty.clone(),
                has_default: c.default_kind == DefaultKind::Default,
                source,
            });
        }
        if plans.is_empty() {
            return Err(SchemaError::NoInsertableColumns);
        }
        let size = (plans.len() * 4).next_power_of_two().max(8);
        let mut table = vec![(0u64, EMPTY); size];
        let mask = size - 1;
        for (i, p) in plans.iter().enumerate() {
            let h = hash(p.name.as_bytes());
            let mut s = (h as usize) & mask;
            while table[s].1 != EMPTY {
                s = (s + 1) & mask;
            }
            // Plan count is bounded by the table size, which fits u32 for
            // any real table; IGNORE marks metadata names.
            table[s] = (
                h,
                if p.source == Source::Json {
                    i as u32
                } else {
                    IGNORE
                },
            );
        }
        Ok(RowEncoder {
            insert_columns: plans.iter().map(|p| p.name.clone()).collect(),
            spans: vec![None; plans.len()],
            plans,
            opts,
            table,
            mask,
            scratch: Vec::with_capacity(256),
            key_scratch: Vec::with_capacity(64),
            shard_key: Vec::new(),
            key_of_plan: Vec::new(),
            key_spans: Vec::new(),
        })
    }

    /// Route rows by `cityHash64(columns...)`, computed by
    /// [`key_hash`](Self::key_hash) from each encoded row. Each column must
    /// be inserted by spate and of a type whose hash spate computes exactly
    /// like ClickHouse (see [`crate::shard_hash`]). A key column's value is
    /// always sent (never left to the server's DEFAULT), so the hash is of
    /// the value the shard stores.
    pub fn set_shard_key(&mut self, columns: &[String]) -> Result<(), SchemaError> {
        let bad = |column: &str, reason: String| SchemaError::Unsupported {
            column: column.to_owned(),
            reason,
        };
        if columns.len() >= usize::from(NOT_KEY) {
            return Err(bad(
                &columns[0],
                format!("a shard key of {} columns is too long", columns.len()),
            ));
        }
        let mut key = Vec::with_capacity(columns.len());
        for name in columns {
            let Some(i) = self.plans.iter().position(|p| &p.name == name) else {
                return Err(bad(
                    name,
                    "the shard key column is not an insertable column of the table".into(),
                ));
            };
            let Some(kh) = KeyHash::for_type(&self.plans[i].ty) else {
                return Err(bad(
                    name,
                    format!("type {} is not supported in a shard key (use integers, floats, Date, DateTime, String, FixedString or LowCardinality of these)", self.plans[i].ty),
                ));
            };
            if key.iter().any(|&(j, _)| j == i) {
                return Err(bad(
                    name,
                    "the column appears twice in the shard key".into(),
                ));
            }
            key.push((i, kh));
        }
        self.key_of_plan = vec![NOT_KEY; self.plans.len()];
        for (k, &(i, _)) in key.iter().enumerate() {
            self.key_of_plan[i] = k as u8;
            self.plans[i].has_default = false;
        }
        self.key_spans = vec![(0, 0); key.len()];
        self.shard_key = key;
        Ok(())
    }

    /// Whether rows are routed by a shard key.
    #[must_use]
    pub fn has_shard_key(&self) -> bool {
        !self.shard_key.is_empty()
    }

    /// `cityHash64(key columns...)` of the row the last successful
    /// [`encode`](Self::encode) appended; `row` holds exactly that row's
    /// bytes. `None` without a shard key.
    #[must_use]
    pub fn key_hash(&self, row: &[u8]) -> Option<u64> {
        let mut h = None;
        for (&(_, kh), &(s, e)) in self.shard_key.iter().zip(&self.key_spans) {
            // The span was recorded while encoding this very row, so it is
            // in bounds and holds one well-formed value.
            let v = kh.hash(row.get(s..e)?)?;
            h = Some(h.map_or(v, |prev| combine(prev, v)));
        }
        h
    }

    /// Column names in insert order (for `INSERT INTO t (cols) ...`).
    #[must_use]
    pub fn insert_columns(&self) -> &[String] {
        &self.insert_columns
    }

    /// How batches of these rows can be sent as `Native` blocks; `None` for
    /// `RowBinaryWithDefaults` (Native has no per-row "use the default")
    /// or a type [`NativeLayout`] does not transpose.
    #[must_use]
    pub fn native_layout(&self) -> Option<NativeLayout> {
        if self.opts.with_defaults {
            return None;
        }
        NativeLayout::new(self.plans.iter().map(|p| (p.name.as_str(), &p.ty)))
    }

    /// The ClickHouse input format the rows are in.
    #[must_use]
    pub fn format(&self) -> &'static str {
        if self.opts.with_defaults {
            "RowBinaryWithDefaults"
        } else {
            "RowBinary"
        }
    }

    /// Append exactly one row for `msg` to `out`. On error `out` is left as
    /// it was before the call.
    pub fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<(), RowError> {
        let start = out.len();
        let res = self.encode_row(msg, out, start);
        if res.is_err() {
            out.truncate(start);
        }
        res
    }

    fn encode_row(
        &mut self,
        msg: &Message<'_>,
        out: &mut Vec<u8>,
        row_start: usize,
    ) -> Result<(), RowError> {
        let Some(payload) = msg.payload else {
            return Err(RowError::new(
                None,
                "",
                "tombstone: the message has no payload",
            ));
        };
        let text = std::str::from_utf8(payload).map_err(|e| {
            RowError::new(
                None,
                &String::from_utf8_lossy(payload),
                format!("payload is not valid UTF-8: {e}"),
            )
        })?;
        self.scan(text)?;
        let b = text.as_bytes();
        for (i, p) in self.plans.iter().enumerate() {
            let before = out.len();
            let res = match p.source {
                Source::Json => {
                    let span =
                        self.spans[i].filter(|(s, _)| p.nullable || b.get(*s) != Some(&b'n'));
                    match span {
                        Some((s, e)) => {
                            if self.opts.with_defaults {
                                out.push(0);
                            }
                            write_value(&p.ty, &b[s..e], out, &mut self.scratch)
                        }
                        None if self.opts.with_defaults && p.has_default => {
                            out.push(1);
                            Ok(())
                        }
                        None => {
                            if self.opts.with_defaults {
                                out.push(0);
                            }
                            write_zero(&p.ty, out);
                            Ok(())
                        }
                    }
                }
                source => {
                    if self.opts.with_defaults {
                        out.push(0);
                    }
                    write_metadata(source, &p.ty, msg, out)
                }
            };
            res.map_err(|f| RowError::new(Some(&p.name), &f.value, f.reason))?;
            if let Some(&k) = self.key_of_plan.get(i).filter(|&&k| k != NOT_KEY) {
                let flag = usize::from(self.opts.with_defaults);
                self.key_spans[usize::from(k)] = (before + flag - row_start, out.len() - row_start);
            }
        }
        Ok(())
    }

    /// One pass over the object: record the span of each known column's
    /// value (last occurrence wins, like serde_json).
    fn scan(&mut self, text: &str) -> Result<(), RowError> {
        let b = text.as_bytes();
        self.spans.iter_mut().for_each(|s| *s = None);
        let (table, mask, plans, spans, key_scratch, strict) = (
            &self.table,
            self.mask,
            &self.plans,
            &mut self.spans,
            &mut self.key_scratch,
            self.opts.strict,
        );
        let base = b.as_ptr() as usize;
        scan_document(b, |key, val| {
            let name: &[u8] = if key.escaped {
                key_scratch.clear();
                unescape_into(key.raw, key_scratch).map_err(|r| (key.raw, r.to_owned()))?;
                key_scratch
            } else {
                key.raw
            };
            match lookup(table, mask, name, plans) {
                Some(IGNORE) => {}
                Some(i) => {
                    let s = val.as_ptr() as usize - base;
                    spans[i as usize] = Some((s, s + val.len()));
                }
                None if strict => {
                    return Err((
                        key.raw,
                        format!(
                            "unknown key `{}` (strict mode)",
                            String::from_utf8_lossy(name)
                        ),
                    ));
                }
                None => {}
            }
            Ok(())
        })
        .map_err(|e| match e {
            Walk::Json(j) => RowError::new(
                None,
                text,
                format!("invalid JSON at byte {}: {}", j.at, j.reason),
            ),
            Walk::User((raw, reason)) => RowError::new(None, &String::from_utf8_lossy(raw), reason),
        })?;
        Ok(())
    }
}

/// Find the plan whose name is `name`. Table entries store the plan index;
/// metadata names are stored as IGNORE and matched through `plans` too.
fn lookup(table: &[(u64, u32)], mask: usize, name: &[u8], plans: &[Plan]) -> Option<u32> {
    let h = hash(name);
    let mut s = (h as usize) & mask;
    loop {
        let (eh, idx) = table[s];
        if idx == EMPTY {
            return None;
        }
        if eh == h {
            let plan = if idx == IGNORE {
                None
            } else {
                plans.get(idx as usize)
            };
            match plan {
                Some(p) if p.name.as_bytes() == name => return Some(idx),
                None if plans
                    .iter()
                    .any(|p| p.source != Source::Json && p.name.as_bytes() == name) =>
                {
                    return Some(IGNORE)
                }
                _ => {}
            }
        }
        s = (s + 1) & mask;
    }
}

pub(crate) fn write_metadata(
    source: Source,
    ty: &ChType,
    msg: &Message<'_>,
    out: &mut Vec<u8>,
) -> Result<(), Fail> {
    let (inner, nullable) = strip(ty);
    let some = |out: &mut Vec<u8>| {
        if nullable {
            out.push(0);
        }
    };
    match source {
        Source::Topic => write_text(ty, msg.topic.as_bytes(), msg.topic.as_bytes(), out),
        Source::Partition => {
            some(out);
            put_int(inner, i128::from(msg.partition), out).map_err(|r| Fail {
                value: msg.partition.to_string(),
                reason: r,
            })
        }
        Source::Offset => {
            some(out);
            put_int(inner, i128::from(msg.offset), out).map_err(|r| Fail {
                value: msg.offset.to_string(),
                reason: r,
            })
        }
        Source::Key => match msg.key {
            Some(k) => write_text(ty, k, k, out),
            None if nullable => {
                out.push(1);
                Ok(())
            }
            None => {
                out.push(0);
                Ok(())
            }
        },
        Source::Timestamp => {
            let Some(ms) = msg.timestamp_ms else {
                write_zero(ty, out);
                return Ok(());
            };
            some(out);
            let range = |r: &str| Fail {
                value: ms.to_string(),
                reason: r.to_owned(),
            };
            match inner {
                ChType::DateTime(_) => {
                    let s = u32::try_from(ms.div_euclid(1000))
                        .map_err(|_| range("timestamp out of DateTime range"))?;
                    out.extend_from_slice(&s.to_le_bytes());
                    Ok(())
                }
                ChType::DateTime64(p, _) => {
                    let p = u32::from(*p);
                    let v = if p >= 3 {
                        ms.checked_mul(10i64.pow(p - 3))
                    } else {
                        Some(ms.div_euclid(10i64.pow(3 - p)))
                    };
                    let v = v.ok_or_else(|| range("timestamp out of DateTime64 range"))?;
                    out.extend_from_slice(&v.to_le_bytes());
                    Ok(())
                }
                t => put_int(t, i128::from(ms), out).map_err(|r| Fail {
                    value: ms.to_string(),
                    reason: r,
                }),
            }
        }
        Source::Json => Ok(()),
    }
}

/// Column-by-column checking, for `spate check`: unlike
/// [`RowEncoder::encode`], which stops at the first failing column, every
/// column is tried on its own, so a report can count per column.
impl RowEncoder {
    /// Try each insert column of `msg` on its own. `Err` when the message as
    /// a whole cannot be encoded (no payload, not UTF-8, not a JSON object,
    /// an unknown key in strict mode): then every column fails with it.
    /// Otherwise `results` is replaced by one entry per insert column, in
    /// [`insert_columns`](Self::insert_columns) order. Not allocation-free:
    /// meant for samples, not for the pipeline.
    pub fn check_columns(
        &mut self,
        msg: &Message<'_>,
        results: &mut Vec<Result<(), RowError>>,
    ) -> Result<(), RowError> {
        results.clear();
        let mut row = Vec::new();
        match self.encode(msg, &mut row) {
            Ok(()) => {
                results.resize(self.plans.len(), Ok(()));
                return Ok(());
            }
            Err(e) if e.column.is_none() => return Err(e),
            Err(_) => {}
        }
        // `encode` got past the payload checks and the scan, so the spans
        // describe this payload; retry each column alone.
        let b = msg.payload.unwrap_or_default();
        for (i, p) in self.plans.iter().enumerate() {
            row.clear();
            let res = match p.source {
                Source::Json => {
                    match self.spans[i].filter(|(s, _)| p.nullable || b.get(*s) != Some(&b'n')) {
                        Some((s, e)) => write_value(&p.ty, &b[s..e], &mut row, &mut self.scratch),
                        // A missing key or a null becomes the zero value or
                        // the DEFAULT: always insertable.
                        None => Ok(()),
                    }
                }
                source => write_metadata(source, &p.ty, msg, &mut row),
            };
            results.push(res.map_err(|f| RowError::new(Some(&p.name), &f.value, f.reason)));
        }
        Ok(())
    }

    /// Whether insert column `index` is filled from the Kafka message's
    /// metadata (`_topic`, `_partition`, `_offset`, `_timestamp`, `_key`)
    /// rather than from its JSON.
    #[must_use]
    pub fn is_metadata_column(&self, index: usize) -> bool {
        self.plans
            .get(index)
            .is_some_and(|p| p.source != Source::Json)
    }
}

#[cfg(test)]
mod check_columns_tests {
    use super::*;
    use crate::types::parse_type;

    fn encoder() -> RowEncoder {
        let col = |name: &str, ty: &str| Column {
            name: name.into(),
            ty: parse_type(ty).unwrap(),
            default_kind: DefaultKind::None,
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
}
