//! A value of a Confluent-framed Avro message at a JSON pointer
//! ([`crate::formats::FieldReader`]): the writer schema says where each
//! value ends, so everything before the one sought is skipped and nothing
//! after it is read. Record fields by name, map values by key, array items
//! by index; a union is passed through to its branch (a null branch: no
//! value).

use super::read::{skip, Reader};
use super::schema::{Avro, Named};
use super::{framing, WriterSchemas};
use crate::formats::field::{put, FieldPointer};
use crate::formats::registry::SchemaRegistry;
use crate::rowbinary::Fail;
use std::sync::Arc;

/// Deepest nesting walked (as the decoder's).
const MAX_DEPTH: usize = 64;

/// One driver thread's reader of Avro values, with the writer schemas it
/// parsed, per id.
pub(crate) struct Seek {
    schemas: WriterSchemas,
}

impl Seek {
    pub(crate) fn new(registry: Arc<SchemaRegistry>) -> Self {
        Seek {
            schemas: WriterSchemas::new(registry),
        }
    }

    /// Append the value at `pointer` in message `b` to `out`: whether
    /// there is one.
    pub(crate) fn read(
        &mut self,
        b: &[u8],
        pointer: &FieldPointer,
        out: &mut String,
    ) -> Result<bool, String> {
        let (id, body) = framing(b).map_err(|e| e.reason)?;
        let schema = self.schemas.get(id).map_err(|e| e.reason)?;
        let mut r = Reader { b, pos: body };
        find(&schema.top, &schema.named, &mut r, pointer.tokens(), out, 0).map_err(|f| {
            format!(
                "field {}: {} (schema id {id}, at byte {})",
                pointer.text, f.reason, r.pos
            )
        })
    }
}

fn fail(reason: impl Into<String>) -> Fail {
    Fail {
        value: String::new(),
        reason: reason.into(),
    }
}

/// Walk `path` from a value of `ty` at `r`: whether a value was found
/// (and appended to `out`).
fn find(
    ty: &Avro,
    named: &[Named],
    r: &mut Reader<'_>,
    path: &[String],
    out: &mut String,
    depth: usize,
) -> Result<bool, Fail> {
    if depth > MAX_DEPTH {
        return Err(fail("Avro data nested too deeply"));
    }
    if let Avro::Union(branches) = ty {
        let i = r.branch(branches.len())?;
        return find(&branches[i], named, r, path, out, depth + 1);
    }
    let Some((first, rest)) = path.split_first() else {
        return leaf(ty, named, r, out);
    };
    match ty {
        Avro::Named(i) => match &named[*i] {
            Named::Record { fields, .. } => {
                for f in fields {
                    if f.name == *first {
                        return find(&f.ty, named, r, rest, out, depth + 1);
                    }
                    skip(&f.ty, named, r, depth + 1)?;
                }
                Ok(false)
            }
            _ => Ok(false),
        },
        Avro::Array(item) => {
            let Ok(want) = first.parse::<usize>() else {
                return Ok(false);
            };
            let mut i = 0;
            loop {
                let n = r.block()?;
                if n == 0 {
                    return Ok(false);
                }
                for _ in 0..n {
                    if i == want {
                        return find(item, named, r, rest, out, depth + 1);
                    }
                    skip(item, named, r, depth + 1)?;
                    i += 1;
                }
            }
        }
        Avro::Map(v) => loop {
            let n = r.block()?;
            if n == 0 {
                return Ok(false);
            }
            for _ in 0..n {
                if r.bytes()? == first.as_bytes() {
                    return find(v, named, r, rest, out, depth + 1);
                }
                skip(v, named, r, depth + 1)?;
            }
        },
        _ => Ok(false),
    }
}

/// The value of `ty` at `r` as text: whether it is one (null is none).
fn leaf(ty: &Avro, named: &[Named], r: &mut Reader<'_>, out: &mut String) -> Result<bool, Fail> {
    let text = |b: &[u8], out: &mut String| match std::str::from_utf8(b) {
        Ok(s) => {
            out.push_str(s);
            Ok(true)
        }
        Err(_) => Err(fail("is not UTF-8 text")),
    };
    match ty {
        Avro::Null => Ok(false),
        Avro::Boolean => {
            put(out, r.boolean()?);
            Ok(true)
        }
        Avro::Int(_) | Avro::Long(_) => {
            put(out, r.long()?);
            Ok(true)
        }
        Avro::Float => {
            put(out, r.f32()?);
            Ok(true)
        }
        Avro::Double => {
            put(out, r.f64()?);
            Ok(true)
        }
        Avro::Bytes(_) | Avro::String(_) => text(r.bytes()?, out),
        Avro::Array(_) => Err(fail("is an array, not a string or a number")),
        Avro::Map(_) => Err(fail("is a map, not a string or a number")),
        Avro::Union(_) => Err(fail("internal: a union at the leaf")),
        Avro::Named(i) => match &named[*i] {
            Named::Record { .. } => Err(fail("is a record, not a string or a number")),
            Named::Enum { symbols, .. } => {
                let i = r.long()?;
                let s = usize::try_from(i)
                    .ok()
                    .and_then(|i| symbols.get(i))
                    .ok_or_else(|| fail(format!("Avro enum index {i} of {}", symbols.len())))?;
                out.push_str(s);
                Ok(true)
            }
            Named::Fixed { size, .. } => text(r.take(*size)?, out),
        },
    }
}
