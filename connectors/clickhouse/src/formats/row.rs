//! The row every non-JSON format fills: [`RowLayout`] (the table's insert
//! columns, their metadata sources, the shard key) and [`RowSlots`] (one
//! message's column values, encoded as RowBinary into one reusable buffer,
//! in whatever order the message carries them).
//!
//! A format decoder writes each value it finds with [`RowSlots::put`];
//! [`RowSlots::finish`] then appends the row in table order: the value
//! found, else the metadata of the message for `_topic`, `_partition`, ...,
//! else the column's DEFAULT (RowBinaryWithDefaults) or its zero value,
//! exactly as the JSON encoder does for a missing key. Owned by one driver
//! thread (inside its encoder); no allocation per row once warm.

use crate::encode::encoder::{check_type, metadata_source, strip, write_metadata, Source};
use crate::encode::{EncoderOptions, RowError, SchemaError};
use crate::rowbinary::write_zero;
use crate::schema::{Column, DefaultKind};
use crate::shard_hash::{combine, KeyHash};
use crate::types::ChType;
use spate_core::record::Message;

/// One insert column.
#[derive(Clone, Debug)]
pub(crate) struct ColPlan {
    pub(crate) name: String,
    pub(crate) ty: ChType,
    pub(crate) nullable: bool,
    has_default: bool,
    source: Source,
}

impl ColPlan {
    /// Whether the message's metadata (not its value) fills this column.
    pub(crate) fn is_metadata(&self) -> bool {
        self.source != Source::Json
    }
}

/// The insert columns of a table, as every non-JSON format fills them.
#[derive(Clone, Debug)]
pub(crate) struct RowLayout {
    pub(crate) cols: Vec<ColPlan>,
    with_defaults: bool,
    /// Sharding key: (column index, how its value hashes), in key order.
    shard_key: Vec<(usize, KeyHash)>,
}

impl RowLayout {
    /// The layout of `columns` (MATERIALIZED, ALIAS and EPHEMERAL skipped),
    /// the same columns in the same order as [`crate::RowEncoder`].
    pub(crate) fn new(
        columns: &[Column],
        opts: EncoderOptions,
        shard_key: &[String],
    ) -> Result<Self, SchemaError> {
        let mut cols: Vec<ColPlan> = Vec::new();
        for c in columns.iter().filter(|c| c.default_kind.is_insertable()) {
            if cols.iter().any(|p| p.name == c.name) {
                return Err(SchemaError::Duplicate(c.name.clone()));
            }
            check_type(&c.name, &c.ty)?;
            cols.push(ColPlan {
                name: c.name.clone(),
                nullable: strip(&c.ty).1,
                ty: c.ty.clone(),
                has_default: c.default_kind == DefaultKind::Default,
                source: metadata_source(c)?,
            });
        }
        if cols.is_empty() {
            return Err(SchemaError::NoInsertableColumns);
        }
        let mut layout = RowLayout {
            cols,
            with_defaults: opts.with_defaults,
            shard_key: Vec::new(),
        };
        for name in shard_key {
            let bad = |reason: String| SchemaError::Unsupported {
                column: name.clone(),
                reason,
            };
            let i = layout.index(name).ok_or_else(|| {
                bad("the shard key column is not an insertable column of the table".into())
            })?;
            let kh = KeyHash::for_type(&layout.cols[i].ty).ok_or_else(|| {
                bad(format!(
                    "type {} is not supported in a shard key",
                    layout.cols[i].ty
                ))
            })?;
            if layout.shard_key.iter().any(|&(j, _)| j == i) {
                return Err(bad("the column appears twice in the shard key".into()));
            }
            // A key column is always sent, never left to the server's DEFAULT.
            layout.cols[i].has_default = false;
            layout.shard_key.push((i, kh));
        }
        Ok(layout)
    }

    /// The index of the insert column `name`.
    pub(crate) fn index(&self, name: &str) -> Option<usize> {
        self.cols.iter().position(|c| c.name == name)
    }

    /// The index of the insert column `name` if the message's value fills
    /// it (not a metadata column).
    pub(crate) fn value_column(&self, name: &str) -> Option<usize> {
        self.index(name).filter(|&i| !self.cols[i].is_metadata())
    }

    /// Whether rows are routed by a shard key.
    pub(crate) fn has_shard_key(&self) -> bool {
        !self.shard_key.is_empty()
    }
}

/// One message's column values while a format decodes it.
#[derive(Debug, Default)]
pub(crate) struct RowSlots {
    /// Per column: the span of its encoded value in `buf`.
    spans: Vec<Option<(usize, usize)>>,
    buf: Vec<u8>,
    /// Per shard key column: its span in the last finished row, relative to
    /// the row's start.
    key_spans: Vec<(usize, usize)>,
}

impl RowSlots {
    /// Empty slots for `layout`'s columns.
    pub(crate) fn new(layout: &RowLayout) -> Self {
        RowSlots {
            spans: vec![None; layout.cols.len()],
            buf: Vec::with_capacity(512),
            key_spans: vec![(0, 0); layout.shard_key.len()],
        }
    }

    /// Forget the previous message's values.
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.spans.iter_mut().for_each(|s| *s = None);
    }

    /// Encode column `col`'s value with `write` (RowBinary of the column's
    /// type). A later value for the same column replaces an earlier one.
    pub(crate) fn put<E>(
        &mut self,
        col: usize,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let start = self.buf.len();
        match write(&mut self.buf) {
            Ok(()) => {
                self.spans[col] = Some((start, self.buf.len()));
                Ok(())
            }
            Err(e) => {
                self.buf.truncate(start);
                Err(e)
            }
        }
    }

    /// Whether column `col` has a value.
    pub(crate) fn is_set(&self, col: usize) -> bool {
        self.spans[col].is_some()
    }

    /// Like [`put`](Self::put), but `write` may answer `false`: no value
    /// (a null for a column that is not Nullable), the column stays unset.
    pub(crate) fn put_if<E>(
        &mut self,
        col: usize,
        write: impl FnOnce(&mut Vec<u8>) -> Result<bool, E>,
    ) -> Result<(), E> {
        let start = self.buf.len();
        match write(&mut self.buf) {
            Ok(true) => {
                self.spans[col] = Some((start, self.buf.len()));
                Ok(())
            }
            Ok(false) => {
                self.buf.truncate(start);
                self.spans[col] = None;
                Ok(())
            }
            Err(e) => {
                self.buf.truncate(start);
                Err(e)
            }
        }
    }

    /// Append the row in table order to `out` (see the module docs). On
    /// error `out` is left as it was.
    pub(crate) fn finish(
        &mut self,
        layout: &RowLayout,
        msg: &Message<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), RowError> {
        let row_start = out.len();
        let flag = usize::from(layout.with_defaults);
        for (i, c) in layout.cols.iter().enumerate() {
            let before = out.len();
            match (c.source, self.spans[i]) {
                (Source::Json, Some((s, e))) => {
                    if layout.with_defaults {
                        out.push(0);
                    }
                    out.extend_from_slice(&self.buf[s..e]);
                }
                (Source::Json, None) if layout.with_defaults && c.has_default => out.push(1),
                (Source::Json, None) => {
                    if layout.with_defaults {
                        out.push(0);
                    }
                    write_zero(&c.ty, out);
                }
                (source, _) => {
                    if layout.with_defaults {
                        out.push(0);
                    }
                    if let Err(f) = write_metadata(source, &c.ty, msg, out) {
                        out.truncate(row_start);
                        return Err(RowError::new(Some(&c.name), &f.value, f.reason));
                    }
                }
            }
            if let Some(k) = layout.shard_key.iter().position(|&(j, _)| j == i) {
                self.key_spans[k] = (before + flag - row_start, out.len() - row_start);
            }
        }
        Ok(())
    }

    /// `cityHash64(key columns...)` of the row the last `finish` appended
    /// (`row` is exactly that row's bytes).
    pub(crate) fn key_hash(&self, layout: &RowLayout, row: &[u8]) -> Option<u64> {
        let mut h = None;
        for (&(_, kh), &(s, e)) in layout.shard_key.iter().zip(&self.key_spans) {
            let v = kh.hash(row.get(s..e)?)?;
            h = Some(h.map_or(v, |prev| combine(prev, v)));
        }
        h
    }
}

/// The payload of `msg`, or the error the JSON encoder gives a tombstone.
pub(crate) fn payload<'m>(msg: &Message<'m>) -> Result<&'m [u8], RowError> {
    msg.payload
        .ok_or_else(|| RowError::new(None, "", "tombstone: the message has no payload"))
}
