//! Avro binary primitives ([`Reader`]), and the two schema-driven walks
//! that need no plan: [`skip`] (a field no column wants) and [`to_json`]
//! (a record, array or map into a String column as JSON text). Runs on the
//! driver thread decoding the message; no allocation beyond `out`.

use super::schema::{Avro, Named};
use crate::rowbinary::{leb128, Fail};

/// Deepest nesting of values walked (recursive records in the data).
const MAX_DEPTH: usize = 64;

pub(crate) fn truncated() -> Fail {
    Fail {
        value: String::new(),
        reason: "the Avro data ends early".into(),
    }
}

fn invalid(reason: impl Into<String>) -> Fail {
    Fail {
        value: String::new(),
        reason: reason.into(),
    }
}

/// A cursor over one message's Avro binary.
pub(crate) struct Reader<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    /// A zig-zag varint `long`.
    #[inline]
    pub(crate) fn long(&mut self) -> Result<i64, Fail> {
        match leb128::read(self.b, &mut self.pos) {
            Ok(n) => Ok((n >> 1) as i64 ^ -((n & 1) as i64)),
            Err(leb128::Bad::Ends) => Err(truncated()),
            Err(leb128::Bad::TooLong) => Err(invalid("an Avro varint longer than 64 bits")),
        }
    }

    /// A count (array/map block size, string length): not negative.
    #[inline]
    pub(crate) fn len(&mut self) -> Result<usize, Fail> {
        let n = self.long()?;
        let n = usize::try_from(n).map_err(|_| invalid(format!("negative Avro length {n}")))?;
        if n > self.b.len() - self.pos {
            return Err(truncated());
        }
        Ok(n)
    }

    #[inline]
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Fail> {
        let s = self.b.get(self.pos..self.pos + n).ok_or_else(truncated)?;
        self.pos += n;
        Ok(s)
    }

    /// `bytes` or `string`.
    #[inline]
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], Fail> {
        let n = self.len()?;
        self.take(n)
    }

    pub(crate) fn boolean(&mut self) -> Result<bool, Fail> {
        match self.take(1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            x => Err(invalid(format!("Avro boolean byte {x}"))),
        }
    }

    pub(crate) fn f32(&mut self) -> Result<f32, Fail> {
        let b = self.take(4)?;
        Ok(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn f64(&mut self) -> Result<f64, Fail> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(f64::from_le_bytes(a))
    }

    /// A union's branch index, checked against its `n` branches.
    pub(crate) fn branch(&mut self, n: usize) -> Result<usize, Fail> {
        let i = self.long()?;
        usize::try_from(i)
            .ok()
            .filter(|&i| i < n)
            .ok_or_else(|| invalid(format!("Avro union branch {i} of {n}")))
    }

    /// The item count of the next array/map block (0: the end), skipping
    /// the block's byte size when the writer gave one.
    pub(crate) fn block(&mut self) -> Result<usize, Fail> {
        let n = self.long()?;
        if n < 0 {
            self.long()?;
        }
        let n = usize::try_from(n.unsigned_abs()).map_err(|_| truncated())?;
        // Every item takes at least... nothing (null items): bound the
        // count by a sane maximum instead, so garbage cannot spin.
        if n > 1 << 28 {
            return Err(invalid(format!("Avro block of {n} items")));
        }
        Ok(n)
    }
}

/// Decode and discard one value of `ty`.
pub(crate) fn skip(
    ty: &Avro,
    named: &[Named],
    r: &mut Reader<'_>,
    depth: usize,
) -> Result<(), Fail> {
    if depth > MAX_DEPTH {
        return Err(invalid("Avro data nested too deeply"));
    }
    match ty {
        Avro::Null => {}
        Avro::Boolean => {
            r.boolean()?;
        }
        Avro::Int(_) | Avro::Long(_) => {
            r.long()?;
        }
        Avro::Float => {
            r.take(4)?;
        }
        Avro::Double => {
            r.take(8)?;
        }
        Avro::Bytes(_) | Avro::String(_) => {
            r.bytes()?;
        }
        Avro::Array(item) => loop {
            let n = r.block()?;
            if n == 0 {
                break;
            }
            for _ in 0..n {
                skip(item, named, r, depth + 1)?;
            }
        },
        Avro::Map(v) => loop {
            let n = r.block()?;
            if n == 0 {
                break;
            }
            for _ in 0..n {
                r.bytes()?;
                skip(v, named, r, depth + 1)?;
            }
        },
        Avro::Union(bs) => {
            let i = r.branch(bs.len())?;
            skip(&bs[i], named, r, depth + 1)?;
        }
        Avro::Named(i) => match &named[*i] {
            Named::Record { fields, .. } => {
                for f in fields {
                    skip(&f.ty, named, r, depth + 1)?;
                }
            }
            Named::Enum { .. } => {
                r.long()?;
            }
            Named::Fixed { size, .. } => {
                r.take(*size)?;
            }
        },
    }
    Ok(())
}

/// Append `s` as a JSON string (each byte that is not valid UTF-8 as the
/// code point of the same number, as Avro's JSON encoding of bytes does).
pub(crate) fn json_string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    let text = std::str::from_utf8(s);
    let mut put = |c: char| match c {
        '"' => out.extend_from_slice(b"\\\""),
        '\\' => out.extend_from_slice(b"\\\\"),
        '\n' => out.extend_from_slice(b"\\n"),
        '\r' => out.extend_from_slice(b"\\r"),
        '\t' => out.extend_from_slice(b"\\t"),
        c if (c as u32) < 0x20 => out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes()),
        c => {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    };
    match text {
        Ok(t) => t.chars().for_each(&mut put),
        Err(_) => s.iter().for_each(|&b| put(char::from(b))),
    }
    out.push(b'"');
}

fn json_number(f: f64, out: &mut Vec<u8>) {
    if f.is_finite() {
        out.extend_from_slice(f.to_string().as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

/// An Avro array or map (blocks of items until an empty block) as a JSON
/// array or object between `brackets`, one `item` call per item.
fn json_blocks(
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
    brackets: [u8; 2],
    mut item: impl FnMut(&mut Reader<'_>, &mut Vec<u8>) -> Result<(), Fail>,
) -> Result<(), Fail> {
    out.push(brackets[0]);
    let mut first = true;
    loop {
        let n = r.block()?;
        if n == 0 {
            break;
        }
        for _ in 0..n {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            item(r, out)?;
        }
    }
    out.push(brackets[1]);
    Ok(())
}

/// Decode one value of `ty` as JSON text into `out`.
pub(crate) fn to_json(
    ty: &Avro,
    named: &[Named],
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), Fail> {
    if depth > MAX_DEPTH {
        return Err(invalid("Avro data nested too deeply"));
    }
    match ty {
        Avro::Null => out.extend_from_slice(b"null"),
        Avro::Boolean => out.extend_from_slice(if r.boolean()? { b"true" } else { b"false" }),
        Avro::Int(_) | Avro::Long(_) => out.extend_from_slice(r.long()?.to_string().as_bytes()),
        Avro::Float => json_number(f64::from(r.f32()?), out),
        Avro::Double => json_number(r.f64()?, out),
        Avro::Bytes(_) | Avro::String(_) => json_string(r.bytes()?, out),
        Avro::Array(item) => json_blocks(r, out, *b"[]", |r, out| {
            to_json(item, named, r, out, depth + 1)
        })?,
        Avro::Map(v) => json_blocks(r, out, *b"{}", |r, out| {
            json_string(r.bytes()?, out);
            out.push(b':');
            to_json(v, named, r, out, depth + 1)
        })?,
        Avro::Union(bs) => {
            let i = r.branch(bs.len())?;
            to_json(&bs[i], named, r, out, depth + 1)?;
        }
        Avro::Named(i) => match &named[*i] {
            Named::Record { fields, .. } => {
                out.push(b'{');
                for (k, f) in fields.iter().enumerate() {
                    if k > 0 {
                        out.push(b',');
                    }
                    json_string(f.name.as_bytes(), out);
                    out.push(b':');
                    to_json(&f.ty, named, r, out, depth + 1)?;
                }
                out.push(b'}');
            }
            Named::Enum { symbols, .. } => {
                let i = r.long()?;
                let s = usize::try_from(i)
                    .ok()
                    .and_then(|i| symbols.get(i))
                    .ok_or_else(|| invalid(format!("Avro enum index {i} of {}", symbols.len())))?;
                json_string(s.as_bytes(), out);
            }
            Named::Fixed { size, .. } => json_string(r.take(*size)?, out),
        },
    }
    Ok(())
}
