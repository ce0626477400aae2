//! Per-type writers: one JSON value's raw text in, RowBinary bytes out.
//!
//! Called by [`super::RowEncoder`] for each column in schema order. No
//! allocation on the success path: string unescaping goes through the
//! caller's reusable scratch buffer.

use super::dynamic::{write_dynamic, write_json, write_variant};
use super::json::{for_each_item, for_each_member, unescape_into, Walk};
use crate::rowbinary::number::{parse_f32, parse_f64, parse_i128};
use crate::rowbinary::text::{fixed, put_datetime, put_datetime64, put_decimal, put_int_text};
use crate::rowbinary::time::parse_epoch;
use crate::rowbinary::{fail, leb128, write_text, write_zero, Fail};
use crate::types::ChType;

fn walk_fail(v: &[u8], e: Walk<Fail>) -> Fail {
    match e {
        Walk::Json(j) => fail(v, j.reason),
        Walk::User(f) => f,
    }
}

/// The content of a JSON string value, unescaped (through `scratch` when it
/// has escapes).
fn text_of<'a>(content: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<&'a [u8], &'static str> {
    if content.contains(&b'\\') {
        scratch.clear();
        unescape_into(content, scratch)?;
        Ok(&scratch[..])
    } else {
        Ok(content)
    }
}

/// Write `v` (the trimmed raw text of one JSON value) as `ty`.
pub(crate) fn write_value(
    ty: &ChType,
    v: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), Fail> {
    match (ty, v.first()) {
        (ChType::LowCardinality(t), _) => write_value(t, v, out, scratch),
        (ChType::Variant(items), _) => write_variant(items, v, out, scratch, write_value),
        (ChType::Dynamic(_), _) => write_dynamic(v, out, scratch),
        (ChType::Json(spec), _) => write_json(spec, v, out, scratch, write_value),
        (ChType::Nullable(t), Some(b'n')) => {
            let _ = t;
            out.push(1);
            Ok(())
        }
        (ChType::Nullable(t), _) => {
            out.push(0);
            write_value(t, v, out, scratch)
        }
        (_, Some(b'n')) => Err(fail(v, format!("null for non-Nullable type {ty}"))),
        (_, Some(b'"')) => {
            let content = v.get(1..v.len().saturating_sub(1)).unwrap_or(&[]);
            let text = text_of(content, scratch).map_err(|r| fail(v, r))?;
            write_text(ty, text, v, out)
        }
        (ChType::String, _) => {
            leb128::put(out, v.len() as u64);
            out.extend_from_slice(v);
            Ok(())
        }
        (ChType::FixedString(n), _) => fixed(*n, v, v, out),
        (ChType::Array(t), Some(b'[')) => write_array(t, v, out, scratch),
        (ChType::Map(k, t), Some(b'{')) => write_map(k, t, v, out, scratch),
        (ChType::Tuple(items), Some(b'[')) => write_tuple_array(items, v, out, scratch),
        (ChType::Tuple(items), Some(b'{')) => write_tuple_object(items, v, out, scratch),
        (ChType::Bool, Some(b't')) => {
            out.push(1);
            Ok(())
        }
        (ChType::Bool, Some(b'f')) => {
            out.push(0);
            Ok(())
        }
        (ChType::UInt8, Some(b't' | b'f')) => {
            out.push(u8::from(v[0] == b't'));
            Ok(())
        }
        (_, Some(b'-' | b'0'..=b'9')) => write_number(ty, v, out),
        _ => Err(fail(v, format!("cannot convert this JSON value to {ty}"))),
    }
}

/// A JSON number into a numeric/temporal type.
fn write_number(ty: &ChType, v: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
    match ty {
        ChType::Float32 => {
            let f = parse_f32(v, false).ok_or_else(|| fail(v, "not a valid Float32"))?;
            out.extend_from_slice(&f.to_le_bytes());
        }
        ChType::Float64 => {
            let f = parse_f64(v, false).ok_or_else(|| fail(v, "not a valid Float64"))?;
            out.extend_from_slice(&f.to_le_bytes());
        }
        ChType::Bool => match v {
            b"0" => out.push(0),
            b"1" => out.push(1),
            _ => return Err(fail(v, "Bool accepts only true, false, 0 or 1")),
        },
        ChType::Date => {
            let d = parse_i128(v).ok_or_else(|| fail(v, "not a day number"))?;
            let d = u16::try_from(d).map_err(|_| fail(v, "Date out of range (0..=65535 days)"))?;
            out.extend_from_slice(&d.to_le_bytes());
        }
        ChType::DateTime(_) => {
            let t = parse_epoch(v, 0).ok_or_else(|| fail(v, "not a unix timestamp"))?;
            put_datetime(t, v, out)?;
        }
        ChType::DateTime64(p, _) => {
            let t = parse_epoch(v, *p).ok_or_else(|| fail(v, "not a unix timestamp"))?;
            put_datetime64(t, *p, v, out)?;
        }
        ChType::Decimal { precision, scale } => put_decimal(*precision, *scale, v, v, out)?,
        ChType::Enum8(items) => {
            let n = parse_i128(v).ok_or_else(|| fail(v, "not an enum value"))?;
            match items.iter().find(|(_, x)| i128::from(*x) == n) {
                Some((_, x)) => out.extend_from_slice(&x.to_le_bytes()),
                None => return Err(fail(v, format!("{n} is not a value of {ty}"))),
            }
        }
        ChType::Enum16(items) => {
            let n = parse_i128(v).ok_or_else(|| fail(v, "not an enum value"))?;
            match items.iter().find(|(_, x)| i128::from(*x) == n) {
                Some((_, x)) => out.extend_from_slice(&x.to_le_bytes()),
                None => return Err(fail(v, format!("{n} is not a value of {ty}"))),
            }
        }
        ChType::IPv4 => {
            let n = parse_i128(v)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| fail(v, "not an IPv4"))?;
            out.extend_from_slice(&n.to_le_bytes());
        }
        ChType::FixedString(n) => fixed(*n, v, v, out)?,
        t if t.is_integer() => put_int_text(t, v, v, out)?,
        _ => return Err(fail(v, format!("cannot convert a JSON number to {ty}"))),
    }
    Ok(())
}

/// Write a varint count of items and the items in one walk: one byte is
/// reserved for the count and widened in place when there are 128 or more
/// (rare, and then the items are moved once). On error `out` holds a part
/// of the value; the row's caller truncates it.
fn counted(
    out: &mut Vec<u8>,
    write: impl FnOnce(&mut Vec<u8>) -> Result<u64, Fail>,
) -> Result<(), Fail> {
    let at = out.len();
    out.push(0);
    let n = write(out)?;
    if n < 0x80 {
        out[at] = n as u8;
    } else {
        let (buf, len) = leb128::encode(n);
        out.splice(at..=at, buf[..len].iter().copied());
    }
    Ok(())
}

fn write_array(t: &ChType, v: &[u8], out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<(), Fail> {
    counted(out, |out| {
        let mut n = 0u64;
        for_each_item(v, 0, 1, |s, e| {
            n += 1;
            write_value(t, &v[s..e], out, scratch)
        })
        .map_err(|e| walk_fail(v, e))?;
        Ok(n)
    })
}

fn write_map(
    k: &ChType,
    t: &ChType,
    v: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), Fail> {
    counted(out, |out| {
        let mut n = 0u64;
        for_each_member(v, 0, 1, |key, s, e| {
            n += 1;
            let text = text_of(key.raw, scratch).map_err(|r| fail(key.raw, r))?;
            write_text(k, text, key.raw, out)?;
            write_value(t, &v[s..e], out, scratch)
        })
        .map_err(|e| walk_fail(v, e))?;
        Ok(n)
    })
}

fn write_tuple_array(
    items: &[(Option<String>, ChType)],
    v: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), Fail> {
    let mut i = 0;
    for_each_item(v, 0, 1, |s, e| {
        let Some((_, t)) = items.get(i) else {
            return Err(fail(v, format!("more than {} tuple elements", items.len())));
        };
        i += 1;
        write_value(t, &v[s..e], out, scratch)
    })
    .map_err(|e| walk_fail(v, e))?;
    if i != items.len() {
        return Err(fail(
            v,
            format!("expected {} tuple elements, got {i}", items.len()),
        ));
    }
    Ok(())
}

fn write_tuple_object(
    items: &[(Option<String>, ChType)],
    v: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), Fail> {
    for (name, t) in items {
        let Some(name) = name else {
            return Err(fail(v, "an unnamed Tuple must be given as a JSON array"));
        };
        let mut span = None;
        for_each_member(v, 0, 1, |key, s, e| {
            let text = text_of(key.raw, scratch).map_err(|r| fail(key.raw, r))?;
            if text == name.as_bytes() {
                span = Some((s, e));
            }
            Ok(())
        })
        .map_err(|e| walk_fail(v, e))?;
        match span {
            Some((s, e))
                if v[s] != b'n' || matches!(t.strip_low_cardinality(), ChType::Nullable(_)) =>
            {
                write_value(t, &v[s..e], out, scratch)?;
            }
            _ => write_zero(t, out),
        }
    }
    Ok(())
}
