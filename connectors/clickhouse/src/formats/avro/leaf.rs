//! The value writers of a plan: [`W`], what one (Avro type, column type)
//! pair compiles to, and the leaf writers that run it for numbers, times,
//! strings, decimals, fixed and enums, one Avro value in, one RowBinary
//! value out. Compiled and called by `super::plan` on the driver thread
//! decoding a message.

use super::read::{truncated, Reader};
use super::schema::{Avro, Decimal};
use crate::rowbinary::{decimal_width, leb128, put_int, write_text, Fail};
use crate::types::ChType;

/// How one Avro value becomes one column value. `write` returns `false`
/// when the value is a null for a column that is not Nullable: the column
/// is then left to its DEFAULT (or zero), as a JSON null is.
#[derive(Debug)]
pub(crate) enum W {
    /// A null: the column is missing.
    Null,
    /// A null into a Nullable column.
    NullValue,
    /// The non-null value of a Nullable column.
    Nullable(Box<W>),
    /// `boolean` into Bool or an integer.
    Bool,
    /// `int`/`long` into an integer type (range-checked).
    Int(ChType),
    /// `int`/`long` into Float32 (`false`) or Float64 (`true`).
    IntToFloat(bool),
    /// `float` into Float32 (`false`) or Float64 (`true`).
    Float(bool),
    /// `double` into Float64.
    Double,
    /// `date` into Date.
    Date,
    /// Ticks of `10^-from` s into DateTime (`to: None`) or DateTime64(to).
    Time { from: u8, to: Option<u8> },
    /// `string`/`bytes` into String.
    Str,
    /// `string`/`bytes` as text into any other type (numbers, UUID, dates,
    /// enum names, FixedString, IPs, decimals).
    Text(ChType),
    /// `decimal` (bytes, or fixed of `size`) into Decimal(P, S).
    Decimal {
        fixed: Option<usize>,
        from: Decimal,
        precision: u8,
        scale: u8,
    },
    /// `decimal` into a String as its exact text.
    DecimalText { fixed: Option<usize>, from: Decimal },
    /// `fixed(size)` as text into String or FixedString.
    Fixed(usize, ChType),
    /// `fixed(16)` into UUID.
    FixedUuid,
    /// `enum` by symbol into Enum8/16: each symbol's value, little endian.
    EnumValue(Vec<Result<(i16, bool), String>>),
    /// `enum` symbol as text into String (or LowCardinality(String)).
    EnumText(Vec<String>, ChType),
    /// `array` into Array(T).
    Array(Box<W>, ChType),
    /// `map` into Map(K, V).
    Map(ChType, Box<W>, ChType),
    /// One writer per union branch.
    Union(Vec<W>),
    /// Any value as JSON text into a String column.
    Json(Avro),
    /// A type that cannot go into the column: skip it and fail the row.
    Fail(Avro, String),
}

/// Write one leaf value (anything but null, unions and collections).
pub(super) fn write(w: &W, r: &mut Reader<'_>, out: &mut Vec<u8>) -> Result<(), Fail> {
    match w {
        W::Str
        | W::Text(_)
        | W::Decimal { .. }
        | W::DecimalText { .. }
        | W::Fixed(..)
        | W::FixedUuid => text(w, r, out),
        W::EnumValue(_) | W::EnumText(..) => enumerated(w, r, out),
        _ => number(w, r, out),
    }
}

fn number(w: &W, r: &mut Reader<'_>, out: &mut Vec<u8>) -> Result<(), Fail> {
    match w {
        W::Bool => out.push(u8::from(r.boolean()?)),
        W::Int(ty) => {
            let n = r.long()?;
            put_int(ty, i128::from(n), out).map_err(|reason| Fail {
                value: n.to_string(),
                reason,
            })?;
        }
        W::IntToFloat(wide) => {
            let n = r.long()?;
            if *wide {
                out.extend_from_slice(&(n as f64).to_le_bytes());
            } else {
                out.extend_from_slice(&(n as f32).to_le_bytes());
            }
        }
        W::Float(wide) => {
            let f = r.f32()?;
            if *wide {
                out.extend_from_slice(&f64::from(f).to_le_bytes());
            } else {
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
        W::Double => out.extend_from_slice(&r.f64()?.to_le_bytes()),
        W::Date => {
            let d = r.long()?;
            let d = u16::try_from(d).map_err(|_| Fail {
                value: d.to_string(),
                reason: "Date out of range (1970-01-01..=2149-06-06)".into(),
            })?;
            out.extend_from_slice(&d.to_le_bytes());
        }
        W::Time { from, to } => put_time(r.long()?, *from, *to, out)?,
        other => {
            return Err(Fail {
                value: String::new(),
                reason: format!("internal: {other:?} is not a leaf"),
            })
        }
    }
    Ok(())
}

fn text(w: &W, r: &mut Reader<'_>, out: &mut Vec<u8>) -> Result<(), Fail> {
    match w {
        W::Str => {
            let s = r.bytes()?;
            leb128::put(out, s.len() as u64);
            out.extend_from_slice(s);
        }
        W::Text(ty) => {
            let s = r.bytes()?;
            write_text(ty, s, s, out)?;
        }
        W::Decimal {
            fixed,
            from,
            precision,
            scale,
        } => {
            let raw = decimal_bytes(r, *fixed)?;
            put_decimal(raw, *from, *precision, *scale, out)?;
        }
        W::DecimalText { fixed, from } => {
            let raw = decimal_bytes(r, *fixed)?;
            let text = decimal_text(unscaled(raw)?, from.scale);
            leb128::put(out, text.len() as u64);
            out.extend_from_slice(text.as_bytes());
        }
        W::Fixed(size, ty) => {
            let s = r.take(*size)?;
            write_text(ty, s, s, out)?;
        }
        W::FixedUuid => {
            let s = r.take(16)?;
            let hi = u64::from_be_bytes(s[..8].try_into().map_err(|_| truncated())?);
            let lo = u64::from_be_bytes(s[8..].try_into().map_err(|_| truncated())?);
            out.extend_from_slice(&hi.to_le_bytes());
            out.extend_from_slice(&lo.to_le_bytes());
        }
        _ => return number(w, r, out),
    }
    Ok(())
}

fn enumerated(w: &W, r: &mut Reader<'_>, out: &mut Vec<u8>) -> Result<(), Fail> {
    match w {
        W::EnumValue(values) => {
            let i = r.long()?;
            let v = usize::try_from(i)
                .ok()
                .and_then(|i| values.get(i))
                .ok_or_else(|| Fail {
                    value: i.to_string(),
                    reason: format!("Avro enum index out of {} symbols", values.len()),
                })?;
            match v {
                Ok((v, true)) => out.extend_from_slice(&v.to_le_bytes()),
                Ok((v, false)) => out.push(*v as i8 as u8),
                Err(reason) => {
                    return Err(Fail {
                        value: i.to_string(),
                        reason: reason.clone(),
                    })
                }
            }
        }
        W::EnumText(symbols, ty) => {
            let i = r.long()?;
            let s = usize::try_from(i)
                .ok()
                .and_then(|i| symbols.get(i))
                .ok_or_else(|| Fail {
                    value: i.to_string(),
                    reason: format!("Avro enum index out of {} symbols", symbols.len()),
                })?;
            write_text(ty, s.as_bytes(), s.as_bytes(), out)?;
        }
        _ => return number(w, r, out),
    }
    Ok(())
}

fn put_time(v: i64, from: u8, to: Option<u8>, out: &mut Vec<u8>) -> Result<(), Fail> {
    let range = |what: &str| Fail {
        value: v.to_string(),
        reason: format!("timestamp out of {what} range"),
    };
    let to_p = to.unwrap_or(0);
    let scaled = if to_p >= from {
        v.checked_mul(10i64.pow(u32::from(to_p - from)))
    } else {
        Some(v.div_euclid(10i64.pow(u32::from(from - to_p))))
    };
    match to {
        None => {
            let s = scaled
                .and_then(|s| u32::try_from(s).ok())
                .ok_or_else(|| range("DateTime"))?;
            out.extend_from_slice(&s.to_le_bytes());
        }
        Some(_) => out.extend_from_slice(&scaled.ok_or_else(|| range("DateTime64"))?.to_le_bytes()),
    }
    Ok(())
}

fn decimal_bytes<'a>(r: &mut Reader<'a>, fixed: Option<usize>) -> Result<&'a [u8], Fail> {
    match fixed {
        Some(n) => r.take(n),
        None => r.bytes(),
    }
}

/// Big-endian two's complement, at most 16 significant bytes.
fn unscaled(b: &[u8]) -> Result<i128, Fail> {
    let neg = b.first().is_some_and(|&c| c & 0x80 != 0);
    let fill = if neg { 0xff } else { 0 };
    let lead = b.iter().take_while(|&&c| c == fill).count();
    let sig = &b[lead.min(b.len().saturating_sub(16))..];
    if sig.len() > 16 {
        return Err(Fail {
            value: format!("{} bytes", b.len()),
            reason: "Avro decimal wider than 128 bits".into(),
        });
    }
    let mut a = [fill; 16];
    a[16 - sig.len()..].copy_from_slice(sig);
    Ok(i128::from_be_bytes(a))
}

fn decimal_text(v: i128, scale: u32) -> String {
    let digits = v.unsigned_abs().to_string();
    let scale = scale as usize;
    let sign = if v < 0 { "-" } else { "" };
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let digits = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = digits.split_at(digits.len() - scale);
    format!("{sign}{int}.{frac}")
}

fn put_decimal(
    raw: &[u8],
    from: Decimal,
    precision: u8,
    scale: u8,
    out: &mut Vec<u8>,
) -> Result<(), Fail> {
    let v = unscaled(raw)?;
    let text = || decimal_text(v, from.scale);
    let to = u32::from(scale);
    let v = if to >= from.scale {
        10i128
            .checked_pow(to - from.scale)
            .and_then(|m| v.checked_mul(m))
    } else {
        let d = 10i128.pow(from.scale - to);
        (v % d == 0).then_some(v / d)
    }
    .ok_or_else(|| Fail {
        value: text(),
        reason: format!("does not fit Decimal({precision}, {scale}) exactly"),
    })?;
    if precision <= 38 && v.unsigned_abs() >= 10u128.pow(u32::from(precision)) {
        return Err(Fail {
            value: text(),
            reason: format!("does not fit Decimal({precision}, {scale})"),
        });
    }
    let bytes = v.to_le_bytes();
    match decimal_width(precision) {
        32 => {
            out.extend_from_slice(&bytes);
            out.resize(out.len() + 16, if v < 0 { 0xff } else { 0 });
        }
        w => out.extend_from_slice(&bytes[..w]),
    }
    Ok(())
}
