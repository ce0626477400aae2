//! Per-type writers: one JSON value's raw text in, RowBinary bytes out.
//!
//! Called by [`super::RowEncoder`] for each column in schema order. No
//! allocation on the success path: string unescaping goes through the
//! caller's reusable scratch buffer.

use super::dynamic::{write_dynamic, write_json, write_variant};
use super::json::{for_each_item, for_each_member, unescape_into, Walk};
use super::number::{
    parse_decimal, parse_decimal256, parse_f32, parse_f64, parse_i128, parse_int256, parse_u128,
    DecimalError,
};
use super::time::{parse_date, parse_datetime, parse_epoch, Instant};
use crate::types::ChType;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A failed value: the offending text and why. Allocated only on failure.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) value: String,
    pub(crate) reason: String,
}

pub(crate) fn fail(v: &[u8], reason: impl Into<String>) -> Fail {
    Fail {
        value: String::from_utf8_lossy(v).into_owned(),
        reason: reason.into(),
    }
}

fn walk_fail(v: &[u8], e: Walk<Fail>) -> Fail {
    match e {
        Walk::Json(j) => fail(v, j.reason),
        Walk::User(f) => f,
    }
}

/// Append an unsigned LEB128 varint.
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, n: u64) {
    let (buf, len) = varint(n);
    out.extend_from_slice(&buf[..len]);
}

/// `n` as an unsigned LEB128 varint: its bytes and how many there are.
#[inline]
fn varint(mut n: u64) -> ([u8; 10], usize) {
    let mut buf = [0u8; 10];
    let mut len = 0;
    while n >= 0x80 {
        buf[len] = (n as u8) | 0x80;
        n >>= 7;
        len += 1;
    }
    buf[len] = n as u8;
    (buf, len + 1)
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
        (ChType::Variant(items), _) => write_variant(items, v, out, scratch),
        (ChType::Dynamic(_), _) => write_dynamic(v, out, scratch),
        (ChType::Json(spec), _) => write_json(spec, v, out, scratch),
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
            put_varint(out, v.len() as u64);
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

/// The content of a JSON string into `ty`. `raw` is the whole JSON value
/// (for messages).
pub(crate) fn write_text(
    ty: &ChType,
    text: &[u8],
    raw: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Fail> {
    match ty {
        ChType::LowCardinality(t) => write_text(t, text, raw, out)?,
        ChType::Nullable(t) => {
            out.push(0);
            write_text(t, text, raw, out)?;
        }
        ChType::String => {
            put_varint(out, text.len() as u64);
            out.extend_from_slice(text);
        }
        ChType::FixedString(n) => fixed(*n, text, raw, out)?,
        ChType::Float32 => {
            let f = parse_f32(text, true).ok_or_else(|| fail(raw, "not a valid Float32"))?;
            out.extend_from_slice(&f.to_le_bytes());
        }
        ChType::Float64 => {
            let f = parse_f64(text, true).ok_or_else(|| fail(raw, "not a valid Float64"))?;
            out.extend_from_slice(&f.to_le_bytes());
        }
        ChType::Bool => match text {
            b"true" | b"1" => out.push(1),
            b"false" | b"0" => out.push(0),
            _ => return Err(fail(raw, "Bool accepts only true, false, 0 or 1")),
        },
        ChType::Date => put_date_text(text, raw, out)?,
        ChType::DateTime(_) => {
            let t = parse_datetime(text, 0)
                .or_else(|| parse_epoch(text, 0))
                .ok_or_else(|| {
                    fail(
                        raw,
                        "not a date-time (YYYY-MM-DD hh:mm:ss, RFC 3339 or unix seconds)",
                    )
                })?;
            put_datetime(t, raw, out)?;
        }
        ChType::DateTime64(p, _) => {
            let t = parse_datetime(text, *p)
                .or_else(|| parse_epoch(text, *p))
                .ok_or_else(|| {
                    fail(
                        raw,
                        "not a date-time (YYYY-MM-DD hh:mm:ss[.f], RFC 3339 or unix seconds)",
                    )
                })?;
            put_datetime64(t, *p, raw, out)?;
        }
        ChType::Uuid => {
            let (hi, lo) =
                parse_uuid(text).ok_or_else(|| fail(raw, "not a UUID (8-4-4-4-12 hex)"))?;
            // RowBinary UUID: high 64 bits first, each half little-endian
            // (checked against ClickHouse 18.16).
            out.extend_from_slice(&hi.to_le_bytes());
            out.extend_from_slice(&lo.to_le_bytes());
        }
        ChType::Enum8(items) => {
            let x =
                enum_item(items, text).ok_or_else(|| fail(raw, format!("not a name of {ty}")))?;
            out.extend_from_slice(&x.to_le_bytes());
        }
        ChType::Enum16(items) => {
            let x =
                enum_item(items, text).ok_or_else(|| fail(raw, format!("not a name of {ty}")))?;
            out.extend_from_slice(&x.to_le_bytes());
        }
        ChType::Decimal { precision, scale } => put_decimal(*precision, *scale, text, raw, out)?,
        ChType::IPv4 => put_ipv4_text(text, raw, out)?,
        ChType::IPv6 => put_ipv6_text(text, raw, out)?,
        t if t.is_integer() => put_int_text(t, text, raw, out)?,
        _ => return Err(fail(raw, format!("cannot convert a JSON string to {ty}"))),
    }
    Ok(())
}

/// A date as `YYYY-MM-DD` or a day number.
fn put_date_text(text: &[u8], raw: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
    let d = match parse_date(text) {
        Some(d) => i128::from(d),
        None => {
            parse_i128(text).ok_or_else(|| fail(raw, "Date must be YYYY-MM-DD or a day number"))?
        }
    };
    let d =
        u16::try_from(d).map_err(|_| fail(raw, "Date out of range (1970-01-01..=2149-06-06)"))?;
    out.extend_from_slice(&d.to_le_bytes());
    Ok(())
}

/// An enum's value by name, or by number if `text` is one of its values.
fn enum_item<T: Copy + Into<i128>>(items: &[(String, T)], text: &[u8]) -> Option<T> {
    let by_name = items.iter().find(|(n, _)| n.as_bytes() == text);
    let by_value = || parse_i128(text).and_then(|v| items.iter().find(|(_, x)| (*x).into() == v));
    by_name.or_else(by_value).map(|(_, x)| *x)
}

fn put_ipv4_text(text: &[u8], raw: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
    let ip: Ipv4Addr = std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| fail(raw, "not an IPv4 address"))?;
    out.extend_from_slice(&u32::from(ip).to_le_bytes());
    Ok(())
}

/// An IPv6 address, or an IPv4 one stored IPv4-mapped.
fn put_ipv6_text(text: &[u8], raw: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
    let s = std::str::from_utf8(text).map_err(|_| fail(raw, "not an IPv6 address"))?;
    let ip = match s.parse::<Ipv6Addr>() {
        Ok(ip) => ip,
        Err(_) => s
            .parse::<Ipv4Addr>()
            .map(|v4| v4.to_ipv6_mapped())
            .map_err(|_| fail(raw, "not an IPv6 address"))?,
    };
    out.extend_from_slice(&ip.octets());
    Ok(())
}

fn fixed(n: usize, bytes: &[u8], raw: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
    if bytes.len() > n {
        return Err(fail(
            raw,
            format!("{} bytes do not fit FixedString({n})", bytes.len()),
        ));
    }
    out.extend_from_slice(bytes);
    out.resize(out.len() + (n - bytes.len()), 0);
    Ok(())
}

fn put_int_text(ty: &ChType, text: &[u8], raw: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
    if let t @ (ChType::Int256 | ChType::UInt256) = ty.strip_low_cardinality() {
        let n = parse_int256(text, matches!(t, ChType::Int256))
            .ok_or_else(|| fail(raw, format!("not an integer in {t} range")))?;
        out.extend_from_slice(&n);
        return Ok(());
    }
    if matches!(ty.strip_low_cardinality(), ChType::UInt128) {
        let n = parse_u128(text).ok_or_else(|| fail(raw, "not an integer in UInt128 range"))?;
        out.extend_from_slice(&n.to_le_bytes());
        return Ok(());
    }
    let n = parse_i128(text).ok_or_else(|| fail(raw, format!("not an integer in {ty} range")))?;
    put_int(ty, n, out).map_err(|r| fail(raw, r))
}

/// Write an integer into an integer type, range-checked (never wraps).
pub(crate) fn put_int(ty: &ChType, n: i128, out: &mut Vec<u8>) -> Result<(), String> {
    let range = || format!("{n} is out of range for {ty}");
    match ty.strip_low_cardinality() {
        ChType::UInt8 => out.push(u8::try_from(n).map_err(|_| range())?),
        ChType::UInt16 => {
            out.extend_from_slice(&u16::try_from(n).map_err(|_| range())?.to_le_bytes())
        }
        ChType::UInt32 => {
            out.extend_from_slice(&u32::try_from(n).map_err(|_| range())?.to_le_bytes())
        }
        ChType::UInt64 => {
            out.extend_from_slice(&u64::try_from(n).map_err(|_| range())?.to_le_bytes())
        }
        ChType::UInt128 => {
            out.extend_from_slice(&u128::try_from(n).map_err(|_| range())?.to_le_bytes())
        }
        ChType::Int8 => out.extend_from_slice(&i8::try_from(n).map_err(|_| range())?.to_le_bytes()),
        ChType::Int16 => {
            out.extend_from_slice(&i16::try_from(n).map_err(|_| range())?.to_le_bytes())
        }
        ChType::Int32 => {
            out.extend_from_slice(&i32::try_from(n).map_err(|_| range())?.to_le_bytes())
        }
        ChType::Int64 => {
            out.extend_from_slice(&i64::try_from(n).map_err(|_| range())?.to_le_bytes())
        }
        ChType::Int128 => out.extend_from_slice(&n.to_le_bytes()),
        ChType::UInt256 | ChType::Int256 => {
            if n < 0 && matches!(ty.strip_low_cardinality(), ChType::UInt256) {
                return Err(range());
            }
            // Sign-extend to 256 bits.
            out.extend_from_slice(&n.to_le_bytes());
            out.resize(out.len() + 16, if n < 0 { 0xff } else { 0 });
        }
        _ => return Err(format!("{ty} is not an integer type")),
    }
    Ok(())
}

fn put_datetime(t: Instant, raw: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
    let s = u32::try_from(t.secs)
        .map_err(|_| fail(raw, "DateTime out of range (1970-01-01..=2106-02-07)"))?;
    out.extend_from_slice(&s.to_le_bytes());
    Ok(())
}

fn put_datetime64(t: Instant, p: u8, raw: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
    let ticks = t
        .secs
        .checked_mul(10i64.pow(u32::from(p)))
        .and_then(|x| x.checked_add(t.ticks))
        .ok_or_else(|| fail(raw, "DateTime64 out of range"))?;
    out.extend_from_slice(&ticks.to_le_bytes());
    Ok(())
}

fn put_decimal(
    precision: u8,
    scale: u8,
    text: &[u8],
    raw: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Fail> {
    let why = |e| {
        fail(
            raw,
            match e {
                DecimalError::Syntax => "not a decimal number".to_owned(),
                DecimalError::TooManyFractionDigits => {
                    format!("more than {scale} fractional digits")
                }
                DecimalError::Overflow => format!("does not fit Decimal({precision}, {scale})"),
            },
        )
    };
    if precision > 38 {
        out.extend_from_slice(&parse_decimal256(text, precision, scale).map_err(why)?);
        return Ok(());
    }
    let v = parse_decimal(text, precision, scale).map_err(why)?;
    // `parse_decimal` bounds |v| by 10^precision, so the casts are exact.
    match precision {
        0..=9 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        10..=18 => out.extend_from_slice(&(v as i64).to_le_bytes()),
        _ => out.extend_from_slice(&v.to_le_bytes()),
    }
    Ok(())
}

fn parse_uuid(s: &[u8]) -> Option<(u64, u64)> {
    let mut v: u128 = 0;
    let mut n = 0;
    for (i, &c) in s.iter().enumerate() {
        if c == b'-' {
            if s.len() != 36 || !matches!(i, 8 | 13 | 18 | 23) {
                return None;
            }
            continue;
        }
        v = (v << 4) | u128::from(char::from(c).to_digit(16)?);
        n += 1;
    }
    if n != 32 || !(s.len() == 36 || s.len() == 32) {
        return None;
    }
    Some(((v >> 64) as u64, v as u64))
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
        let (buf, len) = varint(n);
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
        ChType::Enum8(items) => {
            let v = items
                .iter()
                .find(|(_, v)| *v == 0)
                .or(items.first())
                .map_or(0, |(_, v)| *v);
            out.extend_from_slice(&v.to_le_bytes());
        }
        ChType::Enum16(items) => {
            let v = items
                .iter()
                .find(|(_, v)| *v == 0)
                .or(items.first())
                .map_or(0, |(_, v)| *v);
            out.extend_from_slice(&v.to_le_bytes());
        }
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

/// RowBinary width of a Decimal with this precision.
pub(crate) fn decimal_width(precision: u8) -> usize {
    match precision {
        0..=9 => 4,
        10..=18 => 8,
        19..=38 => 16,
        _ => 32,
    }
}
