//! The RowBinary side of a transposition: what one column's values look
//! like in the rows ([`Shape`], derived from its type), the widening
//! conversions of a column changed since its rows were encoded, and the
//! readers that step over one value.

use crate::rowbinary::leb128;
use crate::types::ChType;

/// A batch's bytes are not the RowBinary rows of this layout: a bug in the
/// encoder or the batching, never bad input (input was validated when it
/// was encoded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("RowBinary batch does not match the table's columns: {0}")]
pub struct TransposeError(pub(super) &'static str);

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Shape {
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

pub(super) fn shape(ty: &ChType, top: bool) -> Option<Shape> {
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

/// Move `pos` past one RowBinary value of `shape`.
pub(super) fn skip(shape: &Shape, b: &[u8], pos: &mut usize) -> Result<(), TransposeError> {
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
pub(super) enum Num {
    U(u8),
    I(u8),
    F32,
    F64,
}

impl Num {
    pub(super) fn of(ty: &ChType) -> Option<Num> {
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

    pub(super) fn width(self) -> usize {
        match self {
            Num::U(w) | Num::I(w) => usize::from(w),
            Num::F32 => 4,
            Num::F64 => 8,
        }
    }

    /// Whether every value of `self` is exactly a value of `to`.
    pub(super) fn widens_to(self, to: Num) -> bool {
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
    pub(super) fn convert(self, to: Num, b: &[u8], out: &mut Vec<u8>) {
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
pub(super) fn convert_shape(old: &ChType, new: &ChType) -> Option<Shape> {
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

/// The bytes of one fixed-width or String value at `b[*pos..]` (a String's
/// with its LEB128 length: Native stores it the same way), moving `pos`
/// past it.
pub(super) fn scalar<'a>(
    shape: &Shape,
    b: &'a [u8],
    pos: &mut usize,
) -> Result<&'a [u8], TransposeError> {
    match shape {
        Shape::Fixed(w) => take(b, pos, *w),
        _ => string(b, pos),
    }
}

/// A RowBinary string at `b[*pos..]`, its length prefix included (the
/// Native column has the same bytes).
pub(super) fn string<'a>(b: &'a [u8], pos: &mut usize) -> Result<&'a [u8], TransposeError> {
    let start = *pos;
    let len = varint(b, pos)?;
    let len = usize::try_from(len).map_err(|_| TransposeError("string length"))?;
    take(b, pos, len)?;
    Ok(&b[start..*pos])
}

pub(super) fn take<'a>(b: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8], TransposeError> {
    let end = pos
        .checked_add(n)
        .filter(|&e| e <= b.len())
        .ok_or(TransposeError("truncated row"))?;
    let s = &b[*pos..end];
    *pos = end;
    Ok(s)
}

pub(super) fn varint(b: &[u8], pos: &mut usize) -> Result<u64, TransposeError> {
    leb128::read(b, pos).map_err(|bad| match bad {
        leb128::Bad::Ends => TransposeError("truncated row"),
        leb128::Bad::TooLong => TransposeError("LEB128 length"),
    })
}

pub(super) fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    leb128::put(out, s.len() as u64);
    out.extend_from_slice(s);
}
