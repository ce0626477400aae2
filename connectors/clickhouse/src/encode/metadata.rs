//! The metadata columns of a row (`_topic`, `_partition`, `_offset`,
//! `_key`, `_timestamp`, `_headers*`): written from the message itself, not
//! its value, for every format (the JSON [`RowEncoder`](super::RowEncoder)
//! and the other decoders' row assembly). Called on driver threads, per row,
//! with no allocation.

use super::encoder::{strip, Source};
use crate::rowbinary::{leb128, put_int, write_text, write_zero, Fail};
use crate::types::ChType;
use spate_core::record::Message;

pub(crate) fn write_metadata(
    source: Source,
    ty: &ChType,
    msg: &Message<'_>,
    out: &mut Vec<u8>,
) -> Result<(), Fail> {
    let (inner, nullable) = strip(ty);
    let some = |out: &mut Vec<u8>| {
        if nullable {
            out.push(0);
        }
    };
    match source {
        Source::Topic => write_text(ty, msg.topic.as_bytes(), msg.topic.as_bytes(), out),
        Source::Partition => {
            some(out);
            put_int(inner, i128::from(msg.partition), out).map_err(|r| Fail {
                value: msg.partition.to_string(),
                reason: r,
            })
        }
        Source::Offset => {
            some(out);
            put_int(inner, i128::from(msg.offset), out).map_err(|r| Fail {
                value: msg.offset.to_string(),
                reason: r,
            })
        }
        Source::Key => match msg.key {
            Some(k) => write_text(ty, k, k, out),
            None if nullable => {
                out.push(1);
                Ok(())
            }
            None => {
                out.push(0);
                Ok(())
            }
        },
        Source::Timestamp => {
            let Some(ms) = msg.timestamp_ms else {
                write_zero(ty, out);
                return Ok(());
            };
            some(out);
            let range = |r: &str| Fail {
                value: ms.to_string(),
                reason: r.to_owned(),
            };
            match inner {
                ChType::DateTime(_) => {
                    let s = u32::try_from(ms.div_euclid(1000))
                        .map_err(|_| range("timestamp out of DateTime range"))?;
                    out.extend_from_slice(&s.to_le_bytes());
                    Ok(())
                }
                ChType::DateTime64(p, _) => {
                    let p = u32::from(*p);
                    let v = if p >= 3 {
                        ms.checked_mul(10i64.pow(p - 3))
                    } else {
                        Some(ms.div_euclid(10i64.pow(3 - p)))
                    };
                    let v = v.ok_or_else(|| range("timestamp out of DateTime64 range"))?;
                    out.extend_from_slice(&v.to_le_bytes());
                    Ok(())
                }
                t => put_int(t, i128::from(ms), out).map_err(|r| Fail {
                    value: ms.to_string(),
                    reason: r,
                }),
            }
        }
        Source::HeaderNames | Source::HeaderValues | Source::HeaderMap => {
            write_headers(source, ty, msg, out)
        }
        Source::Json => Ok(()),
    }
}

/// The message's headers as `_headers.name`, `_headers.value` (arrays in
/// header order) or `_headers` (a map).
fn write_headers(
    source: Source,
    ty: &ChType,
    msg: &Message<'_>,
    out: &mut Vec<u8>,
) -> Result<(), Fail> {
    let (key_ty, value_ty) = match ty {
        ChType::Array(t) => (&**t, &**t),
        ChType::Map(k, v) => (&**k, &**v),
        _ => return Ok(()),
    };
    let n = msg.headers.map_or(0, |h| h.count());
    leb128::put(out, n as u64);
    let Some(headers) = msg.headers else {
        return Ok(());
    };
    for i in 0..n {
        let (name, value) = headers.get(i).unwrap_or((b"", None));
        if source != Source::HeaderValues {
            write_text(key_ty, name, name, out)?;
        }
        if source == Source::HeaderNames {
            continue;
        }
        match value {
            Some(v) => write_text(value_ty, v, v, out)?,
            None if matches!(value_ty.strip_low_cardinality(), ChType::Nullable(_)) => out.push(1),
            None => write_text(value_ty, b"", b"", out)?,
        }
    }
    Ok(())
}
