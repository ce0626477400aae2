//! Text into RowBinary: a value given as text (a JSON string's content, a
//! CSV field, an Avro or Protobuf string bound for a non-String column)
//! written as a column type, range-checked, never wrapping.

use super::fail::{fail, Fail};
use super::leb128;
use super::number::{
    parse_decimal, parse_decimal256, parse_f32, parse_f64, parse_i128, parse_int256, parse_u128,
    DecimalError,
};
use super::time::{parse_date, parse_datetime, parse_epoch, Instant};
use crate::types::ChType;
use std::net::{Ipv4Addr, Ipv6Addr};

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
            leb128::put(out, text.len() as u64);
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

pub(crate) fn fixed(n: usize, bytes: &[u8], raw: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
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

pub(crate) fn put_int_text(
    ty: &ChType,
    text: &[u8],
    raw: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Fail> {
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

pub(crate) fn put_datetime(t: Instant, raw: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
    let s = u32::try_from(t.secs)
        .map_err(|_| fail(raw, "DateTime out of range (1970-01-01..=2106-02-07)"))?;
    out.extend_from_slice(&s.to_le_bytes());
    Ok(())
}

pub(crate) fn put_datetime64(t: Instant, p: u8, raw: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
    let ticks = t
        .secs
        .checked_mul(10i64.pow(u32::from(p)))
        .and_then(|x| x.checked_add(t.ticks))
        .ok_or_else(|| fail(raw, "DateTime64 out of range"))?;
    out.extend_from_slice(&ticks.to_le_bytes());
    Ok(())
}

pub(crate) fn put_decimal(
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
