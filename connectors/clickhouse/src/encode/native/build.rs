//! The Native side of a transposition: one [`Builder`] per column (and
//! sub-column) collects its values from the rows and writes the column's
//! Native bytes.

use super::shape::{scalar, string, take, varint, Num, Shape, TransposeError};
use std::collections::HashMap;

/// One column (or sub-column) being filled.
pub(super) enum Builder {
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
pub(super) struct LowCardBuilder {
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
    pub(super) fn new(nullable: bool, key: &Shape) -> Self {
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
    pub(super) fn clear(&mut self) {
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

    pub(super) fn read(&mut self, b: &[u8], pos: &mut usize) -> Result<(), TransposeError> {
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

    pub(super) fn push_zero(&mut self) {
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

    pub(super) fn write(&self, out: &mut Vec<u8>) {
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
    pub(super) fn new(shape: &Shape, hint: usize) -> Builder {
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
    pub(super) fn clear(&mut self) {
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
    pub(super) fn capacity(&self) -> usize {
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
    pub(super) fn read(&mut self, b: &[u8], pos: &mut usize) -> Result<(), TransposeError> {
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
    pub(super) fn push_zero(&mut self) {
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
    pub(super) fn push_default(&mut self) {
        match self {
            Builder::Fixed(w, buf) => buf.resize(buf.len() + *w, 0),
            Builder::Widen(_, to, buf) => buf.resize(buf.len() + to.width(), 0),
            Builder::Str(buf) => buf.push(0),
            // Nullable wraps only fixed-width types and String (see `shape`).
            _ => unreachable!("Nullable of a composite type"),
        }
    }

    pub(super) fn write(&self, out: &mut Vec<u8>) {
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
