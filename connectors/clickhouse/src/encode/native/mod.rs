//! [`NativeLayout`]: a batch of RowBinary rows turned into one block of
//! ClickHouse's `Native` format, column by column, right before the insert.
//!
//! Why: the server parses RowBinary row by row and value by value, and
//! copies Native columns as they are. Measured on ClickHouse 18.16 with the
//! same 1M rows of `make bench`'s small events over HTTP, the server spent
//! 1.07 CPU s on one RowBinary insert and 0.58 s on one Native insert (1.24
//! against 0.77 s as ten inserts of 100k rows). The encoder keeps writing
//! RowBinary (its per-row, allocation-free path, the shard-key hash and the
//! byte budget all work on rows); the insert worker transposes a whole batch
//! in one pass, in place of the copy it made anyway.
//!
//! The Native format as read over HTTP (no block info): the number of
//! columns and of rows (LEB128), then per column its name, its type name
//! and its data. Data per type:
//! - fixed-width values (numbers, Date, DateTime, DateTime64, Decimal,
//!   UUID, Enum, IPv4/6, Bool, FixedString): the values back to back, the
//!   same bytes as in RowBinary;
//! - `String`: LEB128 length and bytes per value, as in RowBinary;
//! - `Nullable(T)`: a null map (one byte per row, 1 = NULL), then T's column
//!   with a default value in the NULL rows;
//! - `Array(T)`: the cumulative element counts (UInt64 per row), then T's
//!   column over all elements;
//! - `Tuple(T1, ...)`: each element's column in turn.
//!
//! - `LowCardinality(T)` (top level only): the serialization version (UInt64
//!   1, "shared dictionaries with additional keys"), the index type with the
//!   "has additional keys" flag (UInt64), the number of keys (UInt64) and
//!   the keys as a column of T without Nullable, then the number of rows
//!   (UInt64) and one index per row (UInt8/16/32, the narrowest that fits).
//!   For `LowCardinality(Nullable(T))` key 0 stands for NULL.
//!
//! (Sending T with `low_cardinality_allow_in_native_format = 0` instead is
//! not safe: 18.16 accepted such a block into a Memory table and then
//! failed to read it, "Bad cast from ColumnString to ColumnLowCardinality".)
//! Tables with a type outside this list (`Map`, `Nothing`, `JSON`,
//! `Variant`, `Dynamic`,
//! `LowCardinality` below the top level) keep RowBinary, as do
//! `RowBinaryWithDefaults` inserts.
//!
//! **DEFAULTs on servers without `RowBinaryWithDefaults`** (before 23.7):
//! a layout [`with_default_flags`](NativeLayout::with_default_flags) reads
//! rows in `RowBinaryWithDefaults` shape (a flag byte before each value, 1 =
//! no value, use the column's DEFAULT) and writes one Native block per set
//! of missing columns, each block naming only the columns it has. The
//! server fills the columns a block lacks with their DEFAULT expressions,
//! evaluated per row over the block (so `DEFAULT toDate(ts)` sees the row's
//! `ts`); checked on 18.16 and 26.9 with several such blocks in one INSERT.
//! A row that misses every column gets its first column's zero value (a
//! block cannot have rows without columns).

mod build;
mod shape;

pub use shape::TransposeError;

use crate::rowbinary::leb128;
use crate::types::ChType;
use build::Builder;
use shape::{convert_shape, put_str, shape, skip, take, Shape};
use std::collections::HashMap;

/// How a table's insert columns are transposed; `None` from
/// [`NativeLayout::new`] means "keep RowBinary".
#[derive(Clone, Debug)]
pub struct NativeLayout {
    columns: Vec<(String, String, Shape)>,
    /// Rows carry a `RowBinaryWithDefaults` flag byte before each value;
    /// batches become one block per set of missing columns.
    default_flags: bool,
    /// Per column: read but not sent (dropped from the table since the
    /// rows were encoded); empty = none.
    dropped: Vec<bool>,
}

impl NativeLayout {
    /// The layout of these insert columns (name, type) in insert order, or
    /// `None` if one of the types is not transposed.
    #[must_use]
    pub fn new<'a>(columns: impl IntoIterator<Item = (&'a str, &'a ChType)>) -> Option<Self> {
        let columns = columns
            .into_iter()
            .map(|(name, ty)| Some((name.to_owned(), ty.to_string(), shape(ty, true)?)))
            .collect::<Option<Vec<_>>>()?;
        (!columns.is_empty()).then_some(NativeLayout {
            columns,
            default_flags: false,
            dropped: Vec::new(),
        })
    }

    /// The same layout reading `RowBinaryWithDefaults` rows: a batch is
    /// sent as one block per set of missing columns (see the module docs).
    #[must_use]
    pub fn with_default_flags(mut self) -> Self {
        self.default_flags = true;
        self
    }

    /// The type names sent in the block, in column order.
    pub fn type_names(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().map(|(_, t, _)| t.as_str())
    }

    /// The same rows sent to a table whose columns changed: per column
    /// (in this layout's order) its new type, or `None` if the column is
    /// gone (read, not sent). A new type must read the same RowBinary bytes
    /// (`String` and `LowCardinality(String)`, a changed time zone) or be a
    /// lossless widening of a number (`UInt32` to `UInt64` or `Int64`,
    /// `Int16` to `Int32`, `Float32` to `Float64`, ...).
    pub fn retarget(&self, new_types: &[Option<ChType>]) -> Result<NativeLayout, String> {
        if new_types.len() != self.columns.len() {
            return Err("column count differs".into());
        }
        let mut out = self.clone();
        out.dropped = new_types.iter().map(Option::is_none).collect();
        if out.dropped.iter().all(|d| *d) {
            return Err("every column of the batch was dropped".into());
        }
        for ((name, ty, shape), new) in out.columns.iter_mut().zip(new_types) {
            let Some(new) = new else { continue };
            let new_name = new.to_string();
            if new_name == *ty {
                continue;
            }
            let old: ChType = crate::types::parse_type(ty).map_err(|e| e.to_string())?;
            *shape = convert_shape(&old, new).ok_or_else(|| {
                format!("column `{name}` changed from {ty} to {new_name}, which spate cannot convert rows to")
            })?;
            *ty = new_name;
        }
        Ok(out)
    }

    fn is_dropped(&self, i: usize) -> bool {
        self.dropped.get(i).copied().unwrap_or(false)
    }

    /// One Native block holding every row of `rows` (RowBinary, whole rows),
    /// or with default flags one block per set of missing columns.
    pub fn transpose(&self, rows: &[u8]) -> Result<Vec<u8>, TransposeError> {
        self.transpose_in(rows, &mut NativeScratch::default())
    }

    /// [`transpose`](Self::transpose) into the buffers `scratch` kept from
    /// the last one (its column builders, emptied, and its spare body),
    /// which is left holding the builders for the next.
    pub fn transpose_in(
        &self,
        rows: &[u8],
        scratch: &mut NativeScratch,
    ) -> Result<Vec<u8>, TransposeError> {
        let mut out = std::mem::take(&mut scratch.body);
        out.clear();
        out.reserve(rows.len() + rows.len() / 8 + 1024);
        if self.default_flags {
            return self.transpose_grouped(rows, out);
        }
        let same = scratch.shapes.len() == self.columns.len()
            && (scratch.shapes.iter().zip(&self.columns)).all(|(a, (_, _, b))| a == b);
        if same {
            scratch.builders.iter_mut().for_each(Builder::clear);
        } else {
            let hint = rows.len() / self.columns.len().max(1);
            scratch.shapes = self.columns.iter().map(|(_, _, s)| s.clone()).collect();
            scratch.builders = (self.columns.iter())
                .map(|(_, _, s)| Builder::new(s, hint))
                .collect();
        }
        let cols = &mut scratch.builders;
        let mut pos = 0;
        let mut n: u64 = 0;
        while pos < rows.len() {
            for c in cols.iter_mut() {
                c.read(rows, &mut pos)?;
            }
            n += 1;
        }
        let sent = (0..self.columns.len()).filter(|&i| !self.is_dropped(i));
        leb128::put(&mut out, sent.count() as u64);
        leb128::put(&mut out, n);
        for (i, ((name, ty, _), c)) in self.columns.iter().zip(cols.iter()).enumerate() {
            if self.is_dropped(i) {
                continue;
            }
            put_str(&mut out, name.as_bytes());
            put_str(&mut out, ty.as_bytes());
            c.write(&mut out);
        }
        Ok(out)
    }
}

/// What an insert worker keeps from one transposition to the next: the
/// column builders (emptied, their capacity kept) and a spare body, so a
/// block is built in pages already resident instead of fresh ones.
#[derive(Default)]
pub struct NativeScratch {
    /// The shapes the builders were made for.
    shapes: Vec<Shape>,
    builders: Vec<Builder>,
    body: Vec<u8>,
}

impl std::fmt::Debug for NativeScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NativeScratch({} bytes)", self.bytes())
    }
}

impl NativeScratch {
    /// The memory it holds.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.body.capacity() + self.builders.iter().map(Builder::capacity).sum::<usize>()
    }

    /// Keep `body` (an insert's, done with) for the next block if it is
    /// larger than the spare held, while everything held stays within
    /// `room` bytes.
    pub fn give_body(&mut self, body: Vec<u8>, room: usize) {
        if body.capacity() <= self.body.capacity() {
            return;
        }
        self.body = body;
        self.fit(room);
    }

    /// Free what does not fit in `room` bytes: the body first, then the
    /// builders.
    pub fn fit(&mut self, room: usize) {
        if self.bytes() > room {
            self.body = Vec::new();
        }
        if self.bytes() > room {
            self.builders = Vec::new();
            self.shapes = Vec::new();
        }
    }
}

/// The rows of a batch that miss the same columns, being transposed.
struct Group {
    /// Per column: its builder, or `None` where the rows use the DEFAULT.
    cols: Vec<Option<Builder>>,
    rows: u64,
}

impl NativeLayout {
    /// Group `rows` (`RowBinaryWithDefaults`) by which columns they miss;
    /// one block per group, in order of first appearance.
    fn transpose_grouped(&self, rows: &[u8], mut out: Vec<u8>) -> Result<Vec<u8>, TransposeError> {
        let width = self.columns.len();
        let hint = rows.len() / width.max(1);
        let mut groups: Vec<Group> = Vec::new();
        let mut index: HashMap<Vec<u64>, usize> = HashMap::new();
        let mut missing = vec![0u64; width.div_ceil(64)];
        // The column a row that has no other gets its zero value in.
        let first = (0..width).find(|&i| !self.is_dropped(i)).unwrap_or(0);
        let mut pos = 0;
        while pos < rows.len() {
            let start = pos;
            missing.iter_mut().for_each(|w| *w = 0);
            let mut present = 0;
            for (i, (_, _, shape)) in self.columns.iter().enumerate() {
                let flag = take(rows, &mut pos, 1)?[0];
                match flag {
                    0 => {
                        skip(shape, rows, &mut pos)?;
                        present += usize::from(!self.is_dropped(i));
                    }
                    1 => {}
                    _ => return Err(TransposeError("default flag")),
                }
                // Dropped columns are never sent.
                if flag == 1 || self.is_dropped(i) {
                    missing[i / 64] |= 1 << (i % 64);
                }
            }
            // No block has rows without columns: the first column takes
            // its zero value.
            let zero_first = present == 0;
            if zero_first {
                missing[first / 64] &= !(1 << (first % 64));
            }
            let g = match index.get(&missing) {
                Some(&g) => g,
                None => {
                    let cols = (self.columns.iter().enumerate())
                        .map(|(i, (_, _, s))| {
                            (missing[i / 64] & (1 << (i % 64)) == 0).then(|| Builder::new(s, hint))
                        })
                        .collect();
                    groups.push(Group { cols, rows: 0 });
                    index.insert(missing.clone(), groups.len() - 1);
                    groups.len() - 1
                }
            };
            let group = &mut groups[g];
            let mut p = start;
            for (i, (col, (_, _, shape))) in group.cols.iter_mut().zip(&self.columns).enumerate() {
                let flag = take(rows, &mut p, 1)?[0];
                match col {
                    Some(b) if i == first && zero_first => b.push_zero(),
                    Some(b) if flag == 0 => b.read(rows, &mut p)?,
                    None if flag == 0 => skip(shape, rows, &mut p)?,
                    _ => {}
                }
            }
            group.rows += 1;
        }
        for g in &groups {
            leb128::put(&mut out, g.cols.iter().flatten().count() as u64);
            leb128::put(&mut out, g.rows);
            for ((name, ty, _), c) in self.columns.iter().zip(&g.cols) {
                if let Some(c) = c {
                    put_str(&mut out, name.as_bytes());
                    put_str(&mut out, ty.as_bytes());
                    c.write(&mut out);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
