//! The value written for a column a message does not carry, and the widths
//! that depend only on the type.

use crate::types::ChType;

/// The value written for a missing key: NULL for Nullable, else the type's
/// zero (empty string/array/map, 0, 1970-01-01, zero UUID, enum value 0 if
/// declared else the first declared value).
pub(crate) fn write_zero(ty: &ChType, out: &mut Vec<u8>) {
    let zeros = |out: &mut Vec<u8>, n: usize| out.resize(out.len() + n, 0);
    match ty {
        ChType::Nullable(_) => out.push(1),
        ChType::LowCardinality(t) => write_zero(t, out),
        ChType::UInt8 | ChType::Int8 | ChType::Bool => out.push(0),
        ChType::UInt16 | ChType::Int16 | ChType::Date => zeros(out, 2),
        ChType::UInt32 | ChType::Int32 | ChType::Float32 | ChType::DateTime(_) | ChType::IPv4 => {
            zeros(out, 4)
        }
        ChType::UInt64 | ChType::Int64 | ChType::Float64 | ChType::DateTime64(..) => zeros(out, 8),
        ChType::UInt128 | ChType::Int128 | ChType::Uuid | ChType::IPv6 => zeros(out, 16),
        ChType::UInt256 | ChType::Int256 => zeros(out, 32),
        // No paths; the NULL discriminator; the type Nothing (NULL).
        ChType::Json(_) | ChType::Dynamic(_) => out.push(0),
        ChType::Variant(_) => out.push(255),
        ChType::Decimal { precision, .. } => zeros(out, decimal_width(*precision)),
        ChType::FixedString(n) => zeros(out, *n),
        ChType::String | ChType::Array(_) | ChType::Map(..) => out.push(0),
        ChType::Enum8(items) => out.extend_from_slice(&enum_zero(items).to_le_bytes()),
        ChType::Enum16(items) => out.extend_from_slice(&enum_zero(items).to_le_bytes()),
        ChType::Tuple(items) => {
            for (_, t) in items {
                write_zero(t, out);
            }
        }
        // Not constructible by the encoder (rejected in `RowEncoder::new`
        // outside Nullable/Array); writes nothing.
        ChType::Nothing => {}
    }
}

/// An enum's zero: its value 0 if declared, else its first value.
fn enum_zero<T: Copy + Default + PartialEq>(items: &[(String, T)]) -> T {
    (items.iter().find(|(_, v)| *v == T::default()))
        .or(items.first())
        .map_or(T::default(), |(_, v)| *v)
}

/// RowBinary width of a Decimal with this precision.
pub(crate) fn decimal_width(precision: u8) -> usize {
    match precision {
        0..=9 => 4,
        10..=18 => 8,
        19..=38 => 16,
        _ => 32,
    }
}
