//! A value of a Protobuf message at a JSON pointer
//! ([`crate::formats::FieldReader`]): fields by name (or JSON name),
//! through nested messages, read off the wire without decoding the rest.
//! As Protobuf has it, the last occurrence of a field wins; a proto3 field
//! without presence that is absent is its default (0, false, the empty
//! string, an enum's first value), unless another occurrence of its
//! message holds it. A wrapper (`google.protobuf.StringValue`
//! and the others) is its value.

use super::plan::{read_of, value, varint, wire, Val, Wire};
use super::{descriptor, ByType, ProtobufSource};
use crate::formats::field::{put, FieldPointer};
use crate::rowbinary::Fail;
use prost_reflect::{Kind, MessageDescriptor};

/// Deepest nesting of messages walked.
const MAX_DEPTH: usize = 64;

/// One driver thread's reader of Protobuf values, with the message types
/// it compiled, per (schema id, message indexes).
pub(crate) struct Seek {
    source: ProtobufSource,
    types: ByType<MessageDescriptor>,
}

impl Seek {
    pub(crate) fn new(source: ProtobufSource) -> Self {
        Seek {
            source,
            types: ByType::new(),
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
        let (ty, body, id) = match &self.source {
            ProtobufSource::Descriptor { message } => (message, b, None),
            ProtobufSource::Registry(registry) => {
                let (ty, id, at) = (self.types)
                    .get(b, |id, indexes| descriptor(registry, id, indexes))
                    .map_err(|e| e.reason)?;
                (ty, &b[at..], Some(id))
            }
        };
        let hit = find(ty, body, pointer.tokens(), 0).map_err(|f| match id {
            Some(id) => format!("field {}: {} (schema id {id})", pointer.text, f.reason),
            None => format!("field {}: {}", pointer.text, f.reason),
        })?;
        match hit {
            Hit::Wire(text) | Hit::Default(text) => {
                out.push_str(&text);
                Ok(true)
            }
            Hit::None => Ok(false),
        }
    }
}

fn fail(reason: impl Into<String>) -> Fail {
    Fail {
        value: String::new(),
        reason: reason.into(),
    }
}

/// What a message holds at a path.
enum Hit {
    /// A value its bytes hold.
    Wire(String),
    /// A proto3 field without presence, absent: its default.
    Default(String),
    /// Nothing (a field with presence, absent; no such field).
    None,
}

/// Walk `path` in message `b` of type `ty`. Occurrences of a message
/// field merge, as Protobuf merges them: a value one of them holds wins
/// over another's absence (the last one holding it, over earlier ones).
fn find(ty: &MessageDescriptor, b: &[u8], path: &[String], depth: usize) -> Result<Hit, Fail> {
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
        return Ok(Hit::None);
    };
    if field.is_list() || field.is_map() {
        return Err(fail(format!(
            "{first} is a repeated field or a map: a table is named by one value"
        )));
    }
    let kind = field.kind();
    let number = field.number();
    let mut pos = 0;
    let mut last: Option<Wire<'_>> = None;
    let mut nested = Hit::None;
    while pos < b.len() {
        let tag = varint(b, &mut pos)?;
        let n = u32::try_from(tag >> 3)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| fail(format!("Protobuf field number {} is not valid", tag >> 3)))?;
        let w = wire(b, &mut pos, tag & 7)?;
        if n != number {
            continue;
        }
        match (&kind, w) {
            (Kind::Message(m), Wire::Len(inner)) => {
                let wrapped;
                let sub: &[String] = if rest.is_empty() && is_wrapper(m) {
                    wrapped = ["value".to_owned()];
                    &wrapped
                } else {
                    rest
                };
                match find(m, inner, sub, depth + 1)? {
                    hit @ Hit::Wire(_) => nested = hit,
                    hit @ Hit::Default(_) if !matches!(nested, Hit::Wire(_)) => nested = hit,
                    _ => {}
                }
            }
            (Kind::Message(_), _) => return Err(fail("a message field without a length")),
            _ => last = Some(w),
        }
    }
    if let Kind::Message(_) = kind {
        return Ok(nested);
    }
    if !rest.is_empty() {
        return Ok(Hit::None);
    }
    match last {
        Some(w) => scalar(&kind, w).map(Hit::Wire),
        None if field.supports_presence() => Ok(Hit::None),
        // proto3 without presence: absent is the default.
        None => Ok(Hit::Default(match &kind {
            Kind::Enum(e) => e.default_value().name().to_owned(),
            Kind::Bool => "false".to_owned(),
            Kind::String | Kind::Bytes => String::new(),
            _ => "0".to_owned(),
        })),
    }
}

/// The wrapper types (`google.protobuf.Int64Value`...): a message of one
/// value, field 1 `value`.
fn is_wrapper(m: &MessageDescriptor) -> bool {
    matches!(
        m.full_name(),
        "google.protobuf.DoubleValue"
            | "google.protobuf.FloatValue"
            | "google.protobuf.Int64Value"
            | "google.protobuf.UInt64Value"
            | "google.protobuf.Int32Value"
            | "google.protobuf.UInt32Value"
            | "google.protobuf.BoolValue"
            | "google.protobuf.StringValue"
            | "google.protobuf.BytesValue"
    )
}

/// Wire value `w` of a field of `kind` as text.
fn scalar(kind: &Kind, w: Wire<'_>) -> Result<String, Fail> {
    let mut out = String::new();
    match (kind, value(read_of(kind), w)?) {
        (Kind::Bool, Val::Int(n)) => put(&mut out, n != 0),
        (Kind::Enum(e), Val::Int(n)) => match i32::try_from(n).ok().and_then(|n| e.get_value(n)) {
            Some(v) => out.push_str(v.name()),
            None => put(&mut out, n),
        },
        (Kind::Int32 | Kind::Sint32 | Kind::Sfixed32, Val::Int(n)) => {
            put(
                &mut out,
                i32::try_from(n).map_err(|_| fail(format!("{n} is not an int32")))?,
            );
        }
        (_, Val::Int(n)) => put(&mut out, n),
        (Kind::Float, Val::Float(f)) => put(&mut out, f as f32),
        (_, Val::Float(f)) => put(&mut out, f),
        (_, Val::Bytes(b)) => match std::str::from_utf8(b) {
            Ok(s) => out.push_str(s),
            Err(_) => return Err(fail("is not UTF-8 text")),
        },
    }
    Ok(out)
}
