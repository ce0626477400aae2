//! [`RowEncoder`]: the per-table column plan and the per-row loop.

use super::json::{scan_document, unescape_into, Walk};
pub(crate) use super::metadata::write_metadata;
use super::names::{pointer_path, Hints, NameTable, PathTarget};
use super::native::NativeLayout;
use super::nested::{count_items, write_from_items, write_zeros, Group, Member, Scan, Span};
use super::value::write_value;
use crate::rowbinary::{write_zero, Fail};
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
    /// `_headers.name Array(String)` (the Kafka engine's shape).
    HeaderNames,
    /// `_headers.value Array(String)` (a null value is `''`, or NULL in
    /// `Array(Nullable(String))`).
    HeaderValues,
    /// `_headers Map(String, String)` (servers with Map).
    HeaderMap,
}

#[derive(Debug)]
struct Plan {
    name: String,
    ty: ChType,
    nullable: bool,
    has_default: bool,
    source: Source,
    /// Set for an array of a Nested group (`n.x Array(T)`).
    nested: Option<Member>,
}

/// Encodes JSON messages into RowBinary rows for one table.
#[derive(Debug)]
pub struct RowEncoder {
    plans: Vec<Plan>,
    insert_columns: Vec<String>,
    opts: EncoderOptions,
    /// Key path → column (see [`super::names`]).
    names: NameTable,
    /// The key order of the last message, for `names`.
    hints: Hints,
    /// `(column, JSON pointer)` renames in force.
    renames: Vec<(String, String)>,
    /// Nested groups (`n` of `n.x`, `n.y`).
    groups: Vec<Group>,
    /// Per plan: byte span of the JSON value in the current payload.
    spans: Vec<Option<Span>>,
    /// Per group: span of an array of objects for it in the payload.
    group_spans: Vec<Option<Span>>,
    /// Per group: the length its arrays share in the current message.
    group_lens: Vec<Option<u64>>,
    scratch: Vec<u8>,
    key_scratch: Vec<u8>,
    path: Vec<u8>,
    /// Sharding key: (plan index, how its value hashes), in key order.
    shard_key: Vec<(usize, KeyHash)>,
    /// Per plan: its position in `shard_key`, or `NOT_KEY`.
    key_of_plan: Vec<u8>,
    /// Per key column: byte span of its value in the last encoded row,
    /// relative to the row's start.
    key_spans: Vec<(usize, usize)>,
}

const NOT_KEY: u8 = u8::MAX;

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
        "_headers.name" | "_headers.value" => match &c.ty {
            ChType::Array(t) if matches!(strip(t).0, ChType::String) => {
                if c.name == "_headers.name" {
                    Source::HeaderNames
                } else {
                    Source::HeaderValues
                }
            }
            _ => return Err(bad("Array(String)")),
        },
        "_headers" => match &c.ty {
            ChType::Map(k, v)
                if matches!(strip(k).0, ChType::String) && matches!(strip(v).0, ChType::String) =>
            {
                Source::HeaderMap
            }
            _ => return Err(bad("Map(String, String)")),
        },
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
                nested: None,
            });
        }
        if plans.is_empty() {
            return Err(SchemaError::NoInsertableColumns);
        }
        let groups = nested_groups(&mut plans);
        let mut e = RowEncoder {
            insert_columns: plans.iter().map(|p| p.name.clone()).collect(),
            spans: vec![None; plans.len()],
            group_spans: vec![None; groups.len()],
            group_lens: vec![None; groups.len()],
            names: NameTable::default(),
            hints: Hints::default(),
            renames: Vec::new(),
            groups,
            plans,
            opts,
            scratch: Vec::with_capacity(256),
            key_scratch: Vec::with_capacity(64),
            path: Vec::with_capacity(64),
            shard_key: Vec::new(),
            key_of_plan: Vec::new(),
            key_spans: Vec::new(),
        };
        e.names = e.name_table();
        Ok(e)
    }

    /// Columns that take their value from a JSON pointer instead of their
    /// own name (`("user_id", "/user/id")`); replaces earlier renames.
    pub fn set_renames(&mut self, renames: &[(String, String)]) -> Result<(), SchemaError> {
        for (column, pointer) in renames {
            let bad = |reason: String| SchemaError::Unsupported {
                column: column.clone(),
                reason,
            };
            if !self
                .plans
                .iter()
                .any(|p| &p.name == column && p.source == Source::Json)
            {
                return Err(bad(format!(
                    "renamed to `{pointer}`, but it is not a column spate fills from the message"
                )));
            }
            if pointer_path(pointer).is_none() {
                return Err(bad(format!(
                    "`{pointer}` is not a JSON pointer to a member (like `/user/id`)"
                )));
            }
        }
        self.renames = renames.to_vec();
        self.names = self.name_table();
        self.hints = Hints::default();
        Ok(())
    }

    /// The insert column a key path (keys joined by `.`, e.g. `user.id`)
    /// fills, under the same rules as JSON (docs/rows.md): for decoders
    /// of other formats that walk their records' fields.
    #[must_use]
    pub fn resolve_path(&self, path: &[u8]) -> Option<PathTarget> {
        self.names.get(path)
    }

    /// The lookup table: columns (or their renames), metadata names, then
    /// Nested prefixes, then prefixes of dotted names.
    fn name_table(&self) -> NameTable {
        let mut entries: Vec<(Vec<u8>, PathTarget)> = Vec::new();
        let mut paths: Vec<Vec<u8>> = Vec::new();
        for (i, p) in self.plans.iter().enumerate() {
            let renamed = self.renames.iter().find(|(c, _)| *c == p.name);
            let path = match (p.source, renamed) {
                (Source::Json, Some((_, pointer))) => pointer_path(pointer).unwrap_or_default(),
                _ => p.name.as_bytes().to_vec(),
            };
            let target = if p.source == Source::Json {
                PathTarget::Column(i as u32)
            } else {
                PathTarget::Ignore
            };
            entries.push((path.clone(), target));
            paths.push(path);
        }
        for (g, group) in self.groups.iter().enumerate() {
            entries.push((
                group.prefix.as_bytes().to_vec(),
                PathTarget::Nested(g as u32),
            ));
        }
        for path in &paths {
            for (at, _) in path.iter().enumerate().filter(|(_, &c)| c == b'.') {
                entries.push((path[..at].to_vec(), PathTarget::Descend));
            }
        }
        NameTable::build(entries)
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
    /// a type [`NativeLayout`] does not transpose. With `with_defaults` the
    /// layout reads the default flags and sends one block per set of
    /// missing columns (how servers without `RowBinaryWithDefaults` get
    /// their DEFAULTs).
    #[must_use]
    pub fn native_layout(&self) -> Option<NativeLayout> {
        let layout = NativeLayout::new(self.plans.iter().map(|p| (p.name.as_str(), &p.ty)))?;
        Some(if self.opts.with_defaults {
            layout.with_default_flags()
        } else {
            layout
        })
    }

    /// Whether some column filled from the message has a DEFAULT the server
    /// should compute when the message lacks it (shard key columns never
    /// do: their value is always sent).
    #[must_use]
    pub fn has_server_defaults(&self) -> bool {
        self.plans
            .iter()
            .any(|p| p.has_default && p.source == Source::Json)
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
        let text = super::json::utf8(payload).map_err(|e| {
            RowError::new(
                None,
                &String::from_utf8_lossy(payload),
                format!("payload is not valid UTF-8: {e}"),
            )
        })?;
        self.scan(text)?;
        let b = text.as_bytes();
        for i in 0..self.plans.len() {
            let before = out.len();
            let p = &self.plans[i];
            let res = match p.source {
                Source::Json => self.write_json_column(i, b, out),
                source => {
                    if self.opts.with_defaults {
                        out.push(0);
                    }
                    write_metadata(source, &p.ty, msg, out)
                }
            };
            res.map_err(|f| RowError::new(Some(&self.plans[i].name), &f.value, f.reason))?;
            if let Some(&k) = self.key_of_plan.get(i).filter(|&&k| k != NOT_KEY) {
                let flag = usize::from(self.opts.with_defaults);
                self.key_spans[usize::from(k)] = (before + flag - row_start, out.len() - row_start);
            }
        }
        Ok(())
    }

    /// One pass over the object: record the span of each known path's
    /// value (last occurrence wins, like serde_json), walking into objects
    /// for dotted columns.
    fn scan(&mut self, text: &str) -> Result<(), RowError> {
        let b = text.as_bytes();
        self.spans.iter_mut().for_each(|s| *s = None);
        self.group_spans.iter_mut().for_each(|s| *s = None);
        let key_scratch = &mut self.key_scratch;
        self.hints.restart();
        let mut scan = Scan {
            names: &self.names,
            hints: &mut self.hints,
            spans: &mut self.spans,
            group_spans: &mut self.group_spans,
            path: &mut self.path,
            strict: self.opts.strict,
            base: b.as_ptr() as usize,
        };
        scan_document(b, |key, val| {
            let name: &[u8] = if key.escaped {
                key_scratch.clear();
                unescape_into(key.raw, key_scratch).map_err(|r| (key.raw, r.to_owned()))?;
                key_scratch
            } else {
                key.raw
            };
            scan.key(Some(name), val, 1)
        })
        .map_err(|e| match e {
            Walk::Json(j) => RowError::new(
                None,
                text,
                format!("invalid JSON at byte {}: {}", j.at, j.reason),
            ),
            Walk::User((raw, reason)) => RowError::new(None, &String::from_utf8_lossy(raw), reason),
        })?;
        if !self.groups.is_empty() {
            self.nested_lengths(b)?;
        }
        Ok(())
    }

    /// The length each Nested group's arrays share in this message, or a
    /// bad message when two of them differ.
    fn nested_lengths(&mut self, b: &[u8]) -> Result<(), RowError> {
        for (g, group) in self.groups.iter().enumerate() {
            let from_items = self.group_spans[g].and_then(|(s, e)| count_items(&b[s..e]));
            let mut common: Option<(u64, usize)> = None;
            for &i in &group.members {
                let len = match self.spans[i] {
                    Some((s, e)) if b.get(s) == Some(&b'[') => count_items(&b[s..e]),
                    Some(_) => None,
                    None => from_items,
                };
                match (len, common) {
                    (Some(n), None) => common = Some((n, i)),
                    (Some(n), Some((m, j))) if n != m => {
                        let text = self.spans[i].map_or(&b[..0], |(s, e)| &b[s..e]);
                        return Err(RowError::new(
                            Some(&self.plans[i].name),
                            &String::from_utf8_lossy(text),
                            format!(
                                "the arrays of Nested column `{}` differ in length: `{}` has {n} elements, `{}` has {m}",
                                group.prefix, self.plans[i].name, self.plans[j].name
                            ),
                        ));
                    }
                    _ => {}
                }
            }
            self.group_lens[g] = common.map(|(n, _)| n);
        }
        Ok(())
    }

    /// Write JSON column `i` of the message `b` (flag byte included).
    fn write_json_column(&mut self, i: usize, b: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
        let flags = self.opts.with_defaults;
        let p = &self.plans[i];
        let span = self.spans[i].filter(|(s, _)| p.nullable || b.get(*s) != Some(&b'n'));
        if let Some((s, e)) = span {
            if flags {
                out.push(0);
            }
            return write_value(&p.ty, &b[s..e], out, &mut self.scratch);
        }
        if p.nested.is_some() {
            let before = out.len();
            if flags {
                out.push(0);
            }
            if self.write_nested_missing(i, b, out)? {
                return Ok(());
            }
            out.truncate(before);
        }
        let p = &self.plans[i];
        if flags && p.has_default {
            out.push(1);
            return Ok(());
        }
        if flags {
            out.push(0);
        }
        write_zero(&p.ty, out);
        Ok(())
    }

    /// Write plan `i`, a Nested array the message gave no array for: from
    /// the group's array of objects, or zeros sized like its siblings.
    /// `false` if the group has nothing either (a plain missing key).
    fn write_nested_missing(
        &mut self,
        i: usize,
        b: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, Fail> {
        let Some(member) = &self.plans[i].nested else {
            return Ok(false);
        };
        let g = member.group as usize;
        if let Some((s, e)) = self.group_spans[g] {
            write_from_items(member, &b[s..e], out, &mut self.scratch)?;
            return Ok(true);
        }
        match self.group_lens[g] {
            Some(n) => {
                write_zeros(&member.elem, n, out);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Mark the arrays of Nested groups (`n.x Array(T)` with a `.` in the name)
/// and list the groups.
fn nested_groups(plans: &mut [Plan]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (i, p) in plans.iter_mut().enumerate() {
        let (ChType::Array(elem), Some(dot)) = (&p.ty, p.name.rfind('.')) else {
            continue;
        };
        if p.source != Source::Json || dot == 0 || dot + 1 == p.name.len() {
            continue;
        }
        let prefix = &p.name[..dot];
        let g = match groups.iter().position(|g| g.prefix == prefix) {
            Some(g) => g,
            None => {
                groups.push(Group {
                    prefix: prefix.to_owned(),
                    members: Vec::new(),
                });
                groups.len() - 1
            }
        };
        groups[g].members.push(i);
        p.nested = Some(Member {
            group: g as u32,
            leaf: p.name.as_bytes()[dot + 1..].into(),
            elem: (**elem).clone(),
        });
    }
    groups
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
#[path = "encoder_check_tests.rs"]
mod check_columns_tests;
