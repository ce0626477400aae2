//! A value of a Protobuf message at a JSON pointer
//! ([`crate::formats::FieldReader`]): fields by name (or JSON name),
//! through nested messages, read off the wire without decoding the rest.
//! As Protobuf has it, the last occurrence of a field wins; a proto3 field
//! without presence that is absent is its default (0, false, the empty
//! string, an enum's first value). A wrapper (`google.protobuf.StringValue`
//! and the others) is its value.

use super::plan::{read_of, value, varint, wire, Val, Wire};
use super::{descriptor, message_indexes, ProtobufSource};
use crate::formats::avro::framing;
use crate::formats::field::{put, FieldPointer};
use crate::rowbinary::Fail;
use prost_reflect::{Kind, MessageDescriptor};
use std::collections::HashMap;

/// Deepest nesting of messages walked.
const MAX_DEPTH: usize = 64;

/// One driver thread's reader of Protobuf values, with the message types
/// it compiled, per (schema id, message indexes).
pub(crate) struct Seek {
    source: ProtobufSource,
    types: HashMap<(u32, Vec<i64>), Result<MessageDescriptor, String>>,
    indexes: Vec<i64>,
}

impl Seek {
    pub(crate) fn new(source: ProtobufSource) -> Self {
        Seek {
            source,
            types: HashMap::new(),
            indexes: Vec::new(),
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
        let (ty, body) = match &self.source {
            ProtobufSource::Descriptor { message } => (message, b),
            ProtobufSource::Registry(registry) => {
                let (id, at) = framing(b).map_err(|e| e.reason)?;
                let at = message_indexes(b, at, &mut self.indexes).map_err(|e| e.reason)?;
                let key = (id, std::mem::take(&mut self.indexes));
                if !self.types.contains_key(&key) {
                    let ty = descriptor(registry, id, &key.1).map_err(|e| e.reason)?;
                    self.types.insert(key.clone(), ty);
                }
                self.indexes = key.1.clone();
                match &self.types[&key] {
                    Ok(ty) => (ty, &b[at..]),
                    Err(reason) => return Err(reason.clone()),
                }
            }
        };
        find(ty, body, pointer.tokens(), out, 0)
            .map_err(|f| format!("field {}: {}", pointer.text, f.reason))
    }
}

fn fail(reason: impl Into<String>) -> Fail {
    Fail {
        value: String::new(),
        reason: reason.into(),
    }
}

/// Walk `path` in message `b` of type `ty`: whether a value was found
/// (and appended to `out`).
fn find(
    ty: &MessageDescriptor,
    b: &[u8],
    path: &[String],
    out: &mut String,
    depth: usize,
) -> Result<bool, Fail> {
    if depth > MAX_DEPTH {
        return Err(fail("Protobuf data nested too deeply"));
    }
    let Some((first, rest)) = path.split_first() else {
        return Err(fail("is a message, not a string or a number"));
    };
    let Some(field) = ty
        .get_field_by_name(first)
        .or_else(|| ty.get_field_by_json_name(first))
    else {
        return Ok(false);
    };
    if field.is_list() || field.is_map() {
        return Err(fail(format!(
            "{first} is a repeated field or a map: a table is named by one value"
        )));
    }
    let kind = field.kind();
    let number = field.number();
    let mut pos = 0;
    // The last occurrence wins: of a scalar its wire value, of a message
    // the value found in it.
    let mut last: Option<Wire<'_>> = None;
    let mut nested: Option<String> = None;
    while pos < b.len() {
        let tag = varint(b, &mut pos)?;
        let (n, wt) = ((tag >> 3) as u32, tag & 7);
        let w = wire(b, &mut pos, wt)?;
        if n != number {
            continue;
        }
        match (&kind, w) {
            (Kind::Message(m), Wire::Len(inner)) => {
                let mut text = String::new();
                let wrapped;
                let sub: &[String] = if rest.is_empty() && is_wrapper(m) {
                    wrapped = ["value".to_owned()];
                    &wrapped
                } else {
                    rest
                };
                if find(m, inner, sub, &mut text, depth + 1)? {
                    nested = Some(text);
                }
            }
            (Kind::Message(_), _) => return Err(fail("a message field without a length")),
            _ => last = Some(w),
        }
    }
    if let Some(text) = nested {
        out.push_str(&text);
        return Ok(true);
    }
    if !rest.is_empty() {
        return Ok(false);
    }
    match last {
        Some(w) => scalar(&kind, w, out),
        None if field.supports_presence() => Ok(false),
        // proto3 without presence: absent is the default.
        None => {
            match &kind {
                Kind::Enum(e) => out.push_str(e.default_value().name()),
                Kind::Bool => out.push_str("false"),
                Kind::String | Kind::Bytes => {}
                _ => out.push('0'),
            }
            Ok(true)
        }
    }
}

/// `google.protobuf.Int64Value` and its kind: a message of one value.
fn is_wrapper(m: &MessageDescriptor) -> bool {
    let name = m.full_name();
    name.starts_with("google.protobuf.") && name.ends_with("Value")
}

/// Wire value `w` of a field of `kind` as text.
fn scalar(kind: &Kind, w: Wire<'_>, out: &mut String) -> Result<bool, Fail> {
    match (kind, value(read_of(kind), w)?) {
        (Kind::Bool, Val::Int(n)) => put(out, n != 0),
        (Kind::Enum(e), Val::Int(n)) => match i32::try_from(n).ok().and_then(|n| e.get_value(n)) {
            Some(v) => out.push_str(v.name()),
            None => put(out, n),
        },
        (Kind::Int32 | Kind::Sint32 | Kind::Sfixed32, Val::Int(n)) => {
            put(
                out,
                i32::try_from(n).map_err(|_| fail(format!("{n} is not an int32")))?,
            );
        }
        (_, Val::Int(n)) => put(out, n),
        (Kind::Float, Val::Float(f)) => put(out, f as f32),
        (_, Val::Float(f)) => put(out, f),
        (_, Val::Bytes(b)) => match std::str::from_utf8(b) {
            Ok(s) => out.push_str(s),
            Err(_) => return Err(fail("is not UTF-8 text")),
        },
    }
    Ok(true)
}
