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

use crate::types::ChType;
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

/// A batch's bytes are not the RowBinary rows of this layout: a bug in the
/// encoder or the batching, never bad input (input was validated when it
/// was encoded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("RowBinary batch does not match the table's columns: {0}")]
pub struct TransposeError(&'static str);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Shape {
    Fixed(usize),
    Str,
    Nullable(Box<Shape>),
    Array(Box<Shape>),
    Tuple(Vec<Shape>),
    /// A number read as `.0` and sent as the wider `.1` (a column whose
    /// type was widened after its rows were encoded).
    Widen(Num, Num),
    /// `LowCardinality(T)` or `LowCardinality(Nullable(T))`; T is `Fixed`
    /// or `Str`.
    LowCard {
        nullable: bool,
        key: Box<Shape>,
    },
}

fn shape(ty: &ChType, top: bool) -> Option<Shape> {
    Some(match ty {
        ChType::UInt8 | ChType::Int8 | ChType::Bool | ChType::Enum8(_) => Shape::Fixed(1),
        ChType::UInt16 | ChType::Int16 | ChType::Date | ChType::Enum16(_) => Shape::Fixed(2),
        ChType::UInt32 | ChType::Int32 | ChType::Float32 | ChType::DateTime(_) | ChType::IPv4 => {
            Shape::Fixed(4)
        }
        ChType::UInt64 | ChType::Int64 | ChType::Float64 | ChType::DateTime64(..) => {
            Shape::Fixed(8)
        }
        ChType::UInt128 | ChType::Int128 | ChType::Uuid | ChType::IPv6 => Shape::Fixed(16),
        ChType::UInt256 | ChType::Int256 => Shape::Fixed(32),
        ChType::Decimal { precision, .. } => Shape::Fixed(match precision {
            0..=9 => 4,
            10..=18 => 8,
            19..=38 => 16,
            _ => 32,
        }),
        ChType::FixedString(n) => Shape::Fixed(*n),
        ChType::String => Shape::Str,
        ChType::Nullable(t) => match shape(t, false)? {
            s @ (Shape::Fixed(_) | Shape::Str) => Shape::Nullable(Box::new(s)),
            _ => return None,
        },
        ChType::Array(t) => Shape::Array(Box::new(shape(t, false)?)),
        ChType::Tuple(items) => Shape::Tuple(
            items
                .iter()
                .map(|(_, t)| shape(t, false))
                .collect::<Option<_>>()?,
        ),
        ChType::LowCardinality(t) if top => match shape(t, false)? {
            Shape::Nullable(key) => Shape::LowCard {
                nullable: true,
                key,
            },
            s @ (Shape::Fixed(_) | Shape::Str) => Shape::LowCard {
                nullable: false,
                key: Box::new(s),
            },
            _ => return None,
        },
        ChType::LowCardinality(_)
        | ChType::Map(..)
        | ChType::Nothing
        | ChType::Json(_)
        | ChType::Variant(_)
        | ChType::Dynamic(_) => return None,
    })
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
        put_varint(&mut out, sent.count() as u64);
        put_varint(&mut out, n);
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
            put_varint(&mut out, g.cols.iter().flatten().count() as u64);
            put_varint(&mut out, g.rows);
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

/// Move `pos` past one RowBinary value of `shape`.
fn skip(shape: &Shape, b: &[u8], pos: &mut usize) -> Result<(), TransposeError> {
    match shape {
        Shape::Fixed(_) | Shape::Str => {
            scalar(shape, b, pos)?;
        }
        Shape::Nullable(inner) => match take(b, pos, 1)?[0] {
            0 => skip(inner, b, pos)?,
            1 => {}
            _ => return Err(TransposeError("Nullable flag")),
        },
        Shape::Array(inner) => {
            for _ in 0..varint(b, pos)? {
                skip(inner, b, pos)?;
            }
        }
        Shape::Tuple(items) => {
            for s in items {
                skip(s, b, pos)?;
            }
        }
        Shape::Widen(from, _) => {
            take(b, pos, from.width())?;
        }
        Shape::LowCard { nullable, key } => {
            if *nullable {
                match take(b, pos, 1)?[0] {
                    0 => {}
                    1 => return Ok(()),
                    _ => return Err(TransposeError("Nullable flag")),
                }
            }
            scalar(key, b, pos)?;
        }
    }
    Ok(())
}

/// A number's RowBinary form, for widening conversions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Num {
    U(u8),
    I(u8),
    F32,
    F64,
}

impl Num {
    fn of(ty: &ChType) -> Option<Num> {
        Some(match ty {
            ChType::UInt8 => Num::U(1),
            ChType::UInt16 => Num::U(2),
            ChType::UInt32 => Num::U(4),
            ChType::UInt64 => Num::U(8),
            ChType::Int8 => Num::I(1),
            ChType::Int16 => Num::I(2),
            ChType::Int32 => Num::I(4),
            ChType::Int64 => Num::I(8),
            ChType::Float32 => Num::F32,
            ChType::Float64 => Num::F64,
            _ => return None,
        })
    }

    fn width(self) -> usize {
        match self {
            Num::U(w) | Num::I(w) => usize::from(w),
            Num::F32 => 4,
            Num::F64 => 8,
        }
    }

    /// Whether every value of `self` is exactly a value of `to`.
    fn widens_to(self, to: Num) -> bool {
        match (self, to) {
            (Num::U(a), Num::U(b)) | (Num::I(a), Num::I(b)) => a <= b,
            (Num::U(a), Num::I(b)) => a < b,
            (Num::F32, Num::F64) => true,
            (Num::U(a) | Num::I(a), Num::F64) => a <= 4,
            (Num::U(a) | Num::I(a), Num::F32) => a <= 2,
            _ => false,
        }
    }

    /// Convert one little-endian value of `self` into `to`, appending.
    fn convert(self, to: Num, b: &[u8], out: &mut Vec<u8>) {
        let mut raw = [0u8; 8];
        raw[..b.len()].copy_from_slice(b);
        let int: i128 = match self {
            Num::U(_) => i128::from(u64::from_le_bytes(raw)),
            Num::I(w) => {
                let shift = 64 - 8 * u32::from(w);
                i128::from((i64::from_le_bytes(raw) << shift) >> shift)
            }
            Num::F32 | Num::F64 => 0,
        };
        let float = match self {
            Num::F32 => f64::from(f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])),
            Num::F64 => f64::from_le_bytes(raw),
            // Only integers of at most 32 bits widen to a float: exact.
            _ => int as f64,
        };
        match to {
            Num::U(w) | Num::I(w) => out.extend_from_slice(&int.to_le_bytes()[..usize::from(w)]),
            Num::F32 => out.extend_from_slice(&(float as f32).to_le_bytes()),
            Num::F64 => out.extend_from_slice(&float.to_le_bytes()),
        }
    }
}

/// How rows of `old` are read to fill a column of type `new`, if spate can.
fn convert_shape(old: &ChType, new: &ChType) -> Option<Shape> {
    let strip_lc = |t: &ChType| t.strip_low_cardinality().to_string();
    let (o, n) = (old.strip_low_cardinality(), new.strip_low_cardinality());
    let same_bytes = strip_lc(old) == strip_lc(new)
        || matches!((o, n), (ChType::DateTime(_), ChType::DateTime(_)));
    if same_bytes {
        return shape(new, true);
    }
    let (from, to) = (Num::of(o)?, Num::of(n)?);
    (from.widens_to(to) && !matches!(new, ChType::LowCardinality(_)))
        .then_some(Shape::Widen(from, to))
}

/// One column (or sub-column) being filled.
enum Builder {
    Fixed(usize, Vec<u8>),
    Widen(Num, Num, Vec<u8>),
    Str(Vec<u8>),
    Nullable {
        map: Vec<u8>,
        inner: Box<Builder>,
    },
    Array {
        offsets: Vec<u8>,
        total: u64,
        inner: Box<Builder>,
    },
    Tuple(Vec<Builder>),
    LowCard(Box<LowCardBuilder>),
}

/// A `LowCardinality` column: distinct keys and one index per row.
struct LowCardBuilder {
    nullable: bool,
    key: Shape,
    /// The keys' Native column (the RowBinary bytes of each key in turn).
    keys: Vec<u8>,
    /// Key bytes -> index. foldhash, not the standard SipHash: one lookup
    /// per row, and SipHash was a quarter of the transposition's time
    /// (bench/README "The levers left, measured"); seeded per process
    /// like SipHash.
    index: HashMap<Vec<u8>, u32, foldhash::fast::RandomState>,
    rows: Vec<u32>,
}

impl LowCardBuilder {
    fn new(nullable: bool, key: &Shape) -> Self {
        let mut b = LowCardBuilder {
            nullable,
            key: key.clone(),
            keys: Vec::new(),
            index: HashMap::default(),
            rows: Vec::new(),
        };
        b.clear();
        b
    }

    /// Empty, for the next block: no key but NULL's, capacity kept.
    fn clear(&mut self) {
        self.keys.clear();
        self.index.clear();
        self.rows.clear();
        if self.nullable {
            // Key 0 is NULL; its bytes are the type's default value.
            match self.key {
                Shape::Fixed(w) => self.keys.resize(w, 0),
                _ => self.keys.push(0),
            }
            self.index.insert(Vec::new(), 0); // never matched: no value is empty bytes
        }
    }

    fn read(&mut self, b: &[u8], pos: &mut usize) -> Result<(), TransposeError> {
        if self.nullable {
            match take(b, pos, 1)?[0] {
                0 => {}
                1 => {
                    self.rows.push(0);
                    return Ok(());
                }
                _ => return Err(TransposeError("Nullable flag")),
            }
        }
        let value = scalar(&self.key, b, pos)?;
        let i = match self.index.get(value) {
            Some(&i) => i,
            None => {
                // The next key's index (after NULL's, for a nullable one).
                let i = u32::try_from(self.index.len())
                    .map_err(|_| TransposeError("too many distinct values"))?;
                self.index.insert(value.to_vec(), i);
                self.keys.extend_from_slice(value);
                i
            }
        };
        self.rows.push(i);
        Ok(())
    }

    fn push_zero(&mut self) {
        if self.nullable {
            self.rows.push(0);
            return;
        }
        let zero = match self.key {
            Shape::Fixed(w) => vec![0; w],
            _ => vec![0],
        };
        // The zero is well-formed for its own shape: the read cannot fail.
        let _ = self.read(&zero, &mut 0);
    }

    fn write(&self, out: &mut Vec<u8>) {
        const HAS_ADDITIONAL_KEYS: u64 = 1 << 9;
        let nkeys = self.index.len();
        let (kind, width) = match nkeys {
            0..=0x100 => (0u64, 1),
            0x101..=0x1_0000 => (1, 2),
            _ => (2, 4),
        };
        out.extend_from_slice(&1u64.to_le_bytes()); // shared dictionaries with additional keys
        out.extend_from_slice(&(kind | HAS_ADDITIONAL_KEYS).to_le_bytes());
        out.extend_from_slice(&(nkeys as u64).to_le_bytes());
        out.extend_from_slice(&self.keys);
        out.extend_from_slice(&(self.rows.len() as u64).to_le_bytes());
        for &i in &self.rows {
            out.extend_from_slice(&i.to_le_bytes()[..width]);
        }
    }
}

impl Builder {
    fn new(shape: &Shape, hint: usize) -> Builder {
        match shape {
            Shape::Fixed(w) => Builder::Fixed(*w, Vec::with_capacity(hint.min(1 << 20))),
            Shape::Widen(from, to) => {
                Builder::Widen(*from, *to, Vec::with_capacity(hint.min(1 << 20)))
            }
            Shape::Str => Builder::Str(Vec::with_capacity(hint.min(1 << 20))),
            Shape::Nullable(s) => Builder::Nullable {
                map: Vec::new(),
                inner: Box::new(Builder::new(s, hint)),
            },
            Shape::Array(s) => Builder::Array {
                offsets: Vec::new(),
                total: 0,
                inner: Box::new(Builder::new(s, hint)),
            },
            Shape::Tuple(items) => {
                Builder::Tuple(items.iter().map(|s| Builder::new(s, hint)).collect())
            }
            Shape::LowCard { nullable, key } => {
                Builder::LowCard(Box::new(LowCardBuilder::new(*nullable, key)))
            }
        }
    }

    /// Empty, keeping the capacity (a `LowCardinality` column's
    /// dictionary starts over).
    fn clear(&mut self) {
        match self {
            Builder::Fixed(_, buf) | Builder::Str(buf) | Builder::Widen(_, _, buf) => buf.clear(),
            Builder::Nullable { map, inner } => {
                map.clear();
                inner.clear();
            }
            Builder::Array {
                offsets,
                total,
                inner,
            } => {
                offsets.clear();
                *total = 0;
                inner.clear();
            }
            Builder::Tuple(items) => items.iter_mut().for_each(Builder::clear),
            Builder::LowCard(lc) => lc.clear(),
        }
    }

    /// Bytes its buffers hold.
    fn capacity(&self) -> usize {
        match self {
            Builder::Fixed(_, buf) | Builder::Str(buf) | Builder::Widen(_, _, buf) => {
                buf.capacity()
            }
            Builder::Nullable { map, inner } => map.capacity() + inner.capacity(),
            Builder::Array { offsets, inner, .. } => offsets.capacity() + inner.capacity(),
            Builder::Tuple(items) => items.iter().map(Builder::capacity).sum(),
            Builder::LowCard(lc) => lc.keys.capacity() + lc.rows.capacity() * 4,
        }
    }

    /// Move one RowBinary value at `b[*pos..]` into the column.
    fn read(&mut self, b: &[u8], pos: &mut usize) -> Result<(), TransposeError> {
        match self {
            Builder::Fixed(w, buf) => buf.extend_from_slice(take(b, pos, *w)?),
            Builder::Widen(from, to, buf) => from.convert(*to, take(b, pos, from.width())?, buf),
            Builder::Str(buf) => buf.extend_from_slice(string(b, pos)?),
            Builder::Nullable { map, inner } => {
                let flag = take(b, pos, 1)?[0];
                map.push(flag);
                match flag {
                    0 => inner.read(b, pos)?,
                    1 => inner.push_default(),
                    _ => return Err(TransposeError("Nullable flag")),
                }
            }
            Builder::Array {
                offsets,
                total,
                inner,
            } => {
                let n = varint(b, pos)?;
                for _ in 0..n {
                    inner.read(b, pos)?;
                }
                *total += n;
                offsets.extend_from_slice(&total.to_le_bytes());
            }
            Builder::Tuple(items) => {
                for i in items {
                    i.read(b, pos)?;
                }
            }
            Builder::LowCard(lc) => lc.read(b, pos)?,
        }
        Ok(())
    }

    /// The type's zero value (NULL for a Nullable, `[]`, `()` of zeros).
    fn push_zero(&mut self) {
        match self {
            Builder::Fixed(..) | Builder::Str(_) | Builder::Widen(..) => self.push_default(),
            Builder::Nullable { map, inner } => {
                map.push(1);
                inner.push_default();
            }
            Builder::Array { offsets, total, .. } => {
                offsets.extend_from_slice(&total.to_le_bytes());
            }
            Builder::Tuple(items) => items.iter_mut().for_each(Builder::push_zero),
            Builder::LowCard(lc) => lc.push_zero(),
        }
    }

    /// The value a NULL row holds in a Nullable's inner column.
    fn push_default(&mut self) {
        match self {
            Builder::Fixed(w, buf) => buf.resize(buf.len() + *w, 0),
            Builder::Widen(_, to, buf) => buf.resize(buf.len() + to.width(), 0),
            Builder::Str(buf) => buf.push(0),
            // Nullable wraps only fixed-width types and String (see `shape`).
            _ => unreachable!("Nullable of a composite type"),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Builder::Fixed(_, buf) | Builder::Str(buf) | Builder::Widen(_, _, buf) => {
                out.extend_from_slice(buf)
            }
            Builder::Nullable { map, inner } => {
                out.extend_from_slice(map);
                inner.write(out);
            }
            Builder::Array { offsets, inner, .. } => {
                out.extend_from_slice(offsets);
                inner.write(out);
            }
            Builder::Tuple(items) => items.iter().for_each(|i| i.write(out)),
            Builder::LowCard(lc) => lc.write(out),
        }
    }
}

/// The bytes of one fixed-width or String value at `b[*pos..]` (a String's
/// with its LEB128 length: Native stores it the same way), moving `pos`
/// past it.
fn scalar<'a>(shape: &Shape, b: &'a [u8], pos: &mut usize) -> Result<&'a [u8], TransposeError> {
    match shape {
        Shape::Fixed(w) => take(b, pos, *w),
        _ => string(b, pos),
    }
}

/// A RowBinary string at `b[*pos..]`, its length prefix included (the
/// Native column has the same bytes).
fn string<'a>(b: &'a [u8], pos: &mut usize) -> Result<&'a [u8], TransposeError> {
    let start = *pos;
    let len = varint(b, pos)?;
    let len = usize::try_from(len).map_err(|_| TransposeError("string length"))?;
    take(b, pos, len)?;
    Ok(&b[start..*pos])
}

fn take<'a>(b: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8], TransposeError> {
    let end = pos
        .checked_add(n)
        .filter(|&e| e <= b.len())
        .ok_or(TransposeError("truncated row"))?;
    let s = &b[*pos..end];
    *pos = end;
    Ok(s)
}

fn varint(b: &[u8], pos: &mut usize) -> Result<u64, TransposeError> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = take(b, pos, 1)?[0];
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(TransposeError("LEB128 length"))
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

#[cfg(test)]
#[path = "native_tests.rs"]
mod tests;
