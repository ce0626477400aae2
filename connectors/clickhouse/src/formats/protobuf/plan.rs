//! The decoding plan of one (message descriptor, table) pair, and the
//! per-message decoder. [`compile`] pairs each field with its column by
//! name (nested messages onto dotted columns, `repeated` onto Array,
//! `map<>` onto Map, `google.protobuf.Timestamp` onto DateTime/DateTime64,
//! the wrapper types onto their value, usually a Nullable column) and picks
//! each value's conversion once; [`MsgPlan::decode`] reads the Protobuf
//! wire format straight into the row's slots. Fields arrive in any order,
//! a repeated field's elements may be spread over the message: they collect
//! in per-column buffers and become one Array/Map value at the end.
//! Compiled and run on the driver thread that owns the encoder.

use crate::formats::row::{RowLayout, RowSlots};
use crate::rowbinary::{leb128, put_int, write_text, write_zero, Fail};
use crate::types::ChType;
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

fn fail(value: impl Into<String>, reason: impl Into<String>) -> Fail {
    Fail {
        value: value.into(),
        reason: reason.into(),
    }
}

/// How the wire value of a field is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Read {
    /// int32/int64 (two's complement varint), enum.
    Signed,
    Unsigned,
    ZigZag,
    Bool,
    Fixed32,
    Fixed64,
    SFixed32,
    SFixed64,
    F32,
    F64,
    Bytes,
}

/// What one value becomes.
#[derive(Clone, Debug)]
enum Conv {
    /// The non-null value of a Nullable column.
    Nullable(Box<Conv>),
    Int(ChType),
    Float(bool),
    Bool,
    /// Seconds into DateTime.
    DateTime,
    Str,
    Text(ChType),
    /// An enum number by its name (names by number) into `ty` as text.
    EnumName(Vec<(i32, String)>, ChType),
    /// `google.protobuf.Timestamp` into DateTime (None) or DateTime64(p).
    Timestamp(Option<u8>),
    /// A wrapper (`google.protobuf.Int64Value`, ...): its field 1.
    Wrapper(Read, Box<Conv>),
    Fail(String),
}

#[derive(Debug)]
enum Target {
    Skip,
    Col {
        col: usize,
        read: Read,
        conv: Conv,
    },
    List {
        slot: usize,
        col: usize,
        read: Read,
        conv: Conv,
        item: ChType,
    },
    Map {
        slot: usize,
        col: usize,
        key: (Read, Conv, ChType),
        val: (Read, Conv, ChType),
    },
    Nested(Box<MsgPlan>),
}

/// A compiled message.
#[derive(Debug)]
pub(crate) struct MsgPlan {
    /// (field number, target), sorted by number.
    fields: Vec<(u32, Target)>,
    /// Columns whose proto3 default is not the column's zero (an enum's
    /// first name as text): (column, that value encoded), for absent fields.
    defaults: Vec<(usize, Vec<u8>)>,
}

/// Per-message collection buffers of repeated and map fields.
#[derive(Debug, Default)]
pub(crate) struct Lists {
    /// Per list slot: (column, items, their encoding).
    items: Vec<(usize, u64, Vec<u8>)>,
}

/// Compile `msg` against `layout`; also returns the number of list slots.
pub(crate) fn compile(msg: &MessageDescriptor, layout: &RowLayout) -> (MsgPlan, usize) {
    let mut slots = 0;
    let mut plan = message(msg, "", layout, &mut slots, 0);
    let mut defaults = Vec::new();
    enum_defaults(&plan, &mut defaults);
    plan.defaults = defaults;
    (plan, slots)
}

/// The proto3 default of every enum field going into a text column.
fn enum_defaults(plan: &MsgPlan, out: &mut Vec<(usize, Vec<u8>)>) {
    for (_, t) in &plan.fields {
        match t {
            Target::Col {
                col,
                conv: Conv::EnumName(names, ty),
                ..
            } => {
                let zero = names
                    .iter()
                    .find(|(n, _)| *n == 0)
                    .map(|(_, s)| s.as_bytes());
                let mut b = Vec::new();
                if let Some(z) =
                    zero.filter(|_| !matches!(ty, ChType::Enum8(_) | ChType::Enum16(_)))
                {
                    if write_text(ty, z, z, &mut b).is_ok() {
                        out.push((*col, b));
                    }
                }
            }
            Target::Nested(p) => enum_defaults(p, out),
            _ => {}
        }
    }
}

fn message(
    msg: &MessageDescriptor,
    prefix: &str,
    layout: &RowLayout,
    slots: &mut usize,
    depth: usize,
) -> MsgPlan {
    let mut fields: Vec<(u32, Target)> = msg
        .fields()
        .map(|f| (f.number(), field(&f, prefix, layout, slots, depth)))
        .collect();
    fields.sort_by_key(|(n, _)| *n);
    MsgPlan {
        fields,
        defaults: Vec::new(),
    }
}

fn field(
    f: &FieldDescriptor,
    prefix: &str,
    layout: &RowLayout,
    slots: &mut usize,
    depth: usize,
) -> Target {
    let path = format!("{prefix}{}", f.name());
    if let Some(col) = layout.value_column(&path) {
        let ty = layout.cols[col].ty.strip_low_cardinality();
        if f.is_map() {
            let (Kind::Message(entry), ChType::Map(k, v)) = (f.kind(), ty) else {
                return col_fail(col, format!("a map field cannot go into a {ty} column"));
            };
            let kf = entry.map_entry_key_field();
            let vf = entry.map_entry_value_field();
            *slots += 1;
            return Target::Map {
                slot: *slots - 1,
                col,
                key: (read_of(&kf.kind()), conv(&kf.kind(), k), (**k).clone()),
                val: (read_of(&vf.kind()), conv(&vf.kind(), v), (**v).clone()),
            };
        }
        if f.is_list() {
            let ChType::Array(item) = ty else {
                return col_fail(
                    col,
                    format!("a repeated field cannot go into a {ty} column"),
                );
            };
            *slots += 1;
            return Target::List {
                slot: *slots - 1,
                col,
                read: read_of(&f.kind()),
                conv: conv(&f.kind(), item),
                item: (**item).clone(),
            };
        }
        return Target::Col {
            col,
            read: read_of(&f.kind()),
            conv: conv(&f.kind(), ty),
        };
    }
    match f.kind() {
        Kind::Message(m) if !f.is_list() && depth < 32 => {
            let dotted = format!("{path}.");
            if layout.cols.iter().any(|c| c.name.starts_with(&dotted)) {
                return Target::Nested(Box::new(message(&m, &dotted, layout, slots, depth + 1)));
            }
            Target::Skip
        }
        _ => Target::Skip,
    }
}

fn col_fail(col: usize, reason: String) -> Target {
    Target::Col {
        col,
        read: Read::Bytes,
        conv: Conv::Fail(reason),
    }
}

pub(super) fn read_of(k: &Kind) -> Read {
    match k {
        Kind::Int32 | Kind::Int64 | Kind::Enum(_) => Read::Signed,
        Kind::Uint32 | Kind::Uint64 => Read::Unsigned,
        Kind::Sint32 | Kind::Sint64 => Read::ZigZag,
        Kind::Bool => Read::Bool,
        Kind::Fixed32 => Read::Fixed32,
        Kind::Fixed64 => Read::Fixed64,
        Kind::Sfixed32 => Read::SFixed32,
        Kind::Sfixed64 => Read::SFixed64,
        Kind::Float => Read::F32,
        Kind::Double => Read::F64,
        Kind::String | Kind::Bytes | Kind::Message(_) => Read::Bytes,
    }
}

/// The conversion of a value of kind `k` into a column of type `ty`.
fn conv(k: &Kind, ty: &ChType) -> Conv {
    let ty = ty.strip_low_cardinality();
    if let ChType::Nullable(inner) = ty {
        return Conv::Nullable(Box::new(conv(k, inner)));
    }
    let int = ty.is_integer();
    match (k, ty) {
        (Kind::Message(m), _) => match (m.full_name(), ty) {
            ("google.protobuf.Timestamp", ChType::DateTime(_)) => Conv::Timestamp(None),
            ("google.protobuf.Timestamp", ChType::DateTime64(p, _)) => Conv::Timestamp(Some(*p)),
            (name, _) if name.starts_with("google.protobuf.") && name.ends_with("Value") => {
                match m.fields().find(|f| f.number() == 1) {
                    Some(v) => Conv::Wrapper(read_of(&v.kind()), Box::new(conv(&v.kind(), ty))),
                    None => Conv::Fail(format!("{name} has no value field")),
                }
            }
            (name, _) => Conv::Fail(format!("message {name} cannot go into a {ty} column")),
        },
        (
            Kind::Enum(e),
            ChType::Enum8(_) | ChType::Enum16(_) | ChType::String | ChType::FixedString(_),
        ) => Conv::EnumName(
            e.values()
                .map(|v| (v.number(), v.name().to_owned()))
                .collect(),
            ty.clone(),
        ),
        (Kind::Bool, ChType::Bool) => Conv::Bool,
        (Kind::Float | Kind::Double, ChType::Float32) => Conv::Float(false),
        (Kind::Float | Kind::Double, ChType::Float64) => Conv::Float(true),
        (Kind::String | Kind::Bytes, ChType::String) => Conv::Str,
        (Kind::String | Kind::Bytes, _) => Conv::Text(ty.clone()),
        (Kind::Float | Kind::Double, _) => Conv::Fail(format!(
            "a floating-point field cannot go into a {ty} column"
        )),
        (_, ChType::DateTime(_)) => Conv::DateTime,
        (_, ChType::Float32) => Conv::Float(false),
        (_, ChType::Float64) => Conv::Float(true),
        (_, ChType::Bool) => Conv::Bool,
        _ if int => Conv::Int(ty.clone()),
        _ => Conv::Fail(format!("a {k:?} field cannot go into a {ty} column")),
    }
}

/// A wire value.
#[derive(Clone, Copy)]
pub(super) enum Wire<'a> {
    Varint(u64),
    I64(u64),
    I32(u32),
    Len(&'a [u8]),
}

pub(super) fn varint(b: &[u8], pos: &mut usize) -> Result<u64, Fail> {
    leb128::read(b, pos).map_err(|bad| match bad {
        leb128::Bad::Ends => fail("", "the Protobuf data ends early"),
        leb128::Bad::TooLong => fail("", "a Protobuf varint longer than 64 bits"),
    })
}

fn take<'a>(b: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8], Fail> {
    let s = b
        .get(*pos..pos.saturating_add(n))
        .ok_or_else(|| fail("", "the Protobuf data ends early"))?;
    *pos += n;
    Ok(s)
}

pub(super) fn wire<'a>(b: &'a [u8], pos: &mut usize, wt: u64) -> Result<Wire<'a>, Fail> {
    Ok(match wt {
        0 => Wire::Varint(varint(b, pos)?),
        1 => Wire::I64(u64::from_le_bytes(
            take(b, pos, 8)?.try_into().map_err(|_| fail("", "short"))?,
        )),
        2 => {
            let n = usize::try_from(varint(b, pos)?).map_err(|_| fail("", "length"))?;
            Wire::Len(take(b, pos, n)?)
        }
        5 => Wire::I32(u32::from_le_bytes(
            take(b, pos, 4)?.try_into().map_err(|_| fail("", "short"))?,
        )),
        w => {
            return Err(fail(
                w.to_string(),
                "unsupported Protobuf wire type (groups are not supported)",
            ))
        }
    })
}

/// A number, a float, or bytes, as `read` says the wire value means.
pub(super) enum Val<'a> {
    Int(i128),
    Float(f64),
    Bytes(&'a [u8]),
}

pub(super) fn value<'a>(read: Read, w: Wire<'a>) -> Result<Val<'a>, Fail> {
    Ok(match (read, w) {
        (Read::Signed, Wire::Varint(n)) => Val::Int(i128::from(n as i64)),
        (Read::Unsigned, Wire::Varint(n)) => Val::Int(i128::from(n)),
        (Read::ZigZag, Wire::Varint(n)) => {
            Val::Int(i128::from((n >> 1) as i64 ^ -((n & 1) as i64)))
        }
        (Read::Bool, Wire::Varint(n)) => Val::Int(i128::from(n != 0)),
        (Read::Fixed32, Wire::I32(n)) => Val::Int(i128::from(n)),
        (Read::SFixed32, Wire::I32(n)) => Val::Int(i128::from(n as i32)),
        (Read::Fixed64, Wire::I64(n)) => Val::Int(i128::from(n)),
        (Read::SFixed64, Wire::I64(n)) => Val::Int(i128::from(n as i64)),
        (Read::F32, Wire::I32(n)) => Val::Float(f64::from(f32::from_bits(n))),
        (Read::F64, Wire::I64(n)) => Val::Float(f64::from_bits(n)),
        (Read::Bytes, Wire::Len(b)) => Val::Bytes(b),
        _ => {
            return Err(fail(
                "",
                "a field's wire type does not match its declared type",
            ))
        }
    })
}

impl MsgPlan {
    fn target(&self, number: u32) -> Option<&Target> {
        self.fields
            .binary_search_by_key(&number, |(n, _)| *n)
            .ok()
            .map(|i| &self.fields[i].1)
    }

    /// Decode a whole message `b` into `slots`: its fields, its lists, the
    /// proto3 defaults of enum fields it lacks.
    pub(crate) fn decode_message(
        &self,
        b: &[u8],
        slots: &mut RowSlots,
        lists: &mut Lists,
    ) -> Result<(), (Option<usize>, Fail)> {
        self.decode(b, slots, lists)?;
        lists.finish(slots);
        for (col, value) in &self.defaults {
            if !slots.is_set(*col) {
                let _ = slots.put(*col, |buf| {
                    buf.extend_from_slice(value);
                    Ok::<(), ()>(())
                });
            }
        }
        Ok(())
    }

    /// Decode message `b` into `slots` (lists into `lists`, finished by
    /// [`Lists::finish`]). The error names the column, if any.
    fn decode(
        &self,
        b: &[u8],
        slots: &mut RowSlots,
        lists: &mut Lists,
    ) -> Result<(), (Option<usize>, Fail)> {
        let mut pos = 0;
        while pos < b.len() {
            let tag = varint(b, &mut pos).map_err(|f| (None, f))?;
            let (number, wt) = ((tag >> 3) as u32, tag & 7);
            let w = wire(b, &mut pos, wt).map_err(|f| (None, f))?;
            match self.target(number) {
                None | Some(Target::Skip) => {}
                Some(Target::Col { col, read, conv }) => {
                    slots
                        .put_if(*col, |buf| write(conv, value(*read, w)?, buf))
                        .map_err(|f| (Some(*col), f))?;
                }
                Some(Target::Nested(plan)) => {
                    let Wire::Len(inner) = w else {
                        return Err((None, fail("", "a message field without a length")));
                    };
                    plan.decode(inner, slots, lists)?;
                }
                Some(Target::List {
                    slot,
                    col,
                    read,
                    conv,
                    item,
                }) => {
                    list_items(*read, conv, item, w, &mut lists.items[*slot])
                        .map_err(|f| (Some(*col), f))?;
                    lists.items[*slot].0 = *col;
                }
                Some(Target::Map {
                    slot,
                    col,
                    key,
                    val,
                }) => {
                    map_entry(key, val, w, &mut lists.items[*slot]).map_err(|f| (Some(*col), f))?;
                    lists.items[*slot].0 = *col;
                }
            }
        }
        Ok(())
    }
}

/// One occurrence of a repeated field: one element, or a packed run.
fn list_items(
    read: Read,
    conv: &Conv,
    item: &ChType,
    w: Wire<'_>,
    acc: &mut (usize, u64, Vec<u8>),
) -> Result<(), Fail> {
    match (read, w) {
        (Read::Bytes, _) | (_, Wire::Varint(_) | Wire::I32(_) | Wire::I64(_)) => {
            if !write(conv, value(read, w)?, &mut acc.2)? {
                write_zero(item, &mut acc.2);
            }
            acc.1 += 1;
        }
        (_, Wire::Len(packed)) => {
            let mut pos = 0;
            while pos < packed.len() {
                let w = match read {
                    Read::Fixed32 | Read::SFixed32 | Read::F32 => wire(packed, &mut pos, 5)?,
                    Read::Fixed64 | Read::SFixed64 | Read::F64 => wire(packed, &mut pos, 1)?,
                    _ => wire(packed, &mut pos, 0)?,
                };
                write(conv, value(read, w)?, &mut acc.2)?;
                acc.1 += 1;
            }
        }
    }
    Ok(())
}

fn map_entry(
    key: &(Read, Conv, ChType),
    val: &(Read, Conv, ChType),
    w: Wire<'_>,
    acc: &mut (usize, u64, Vec<u8>),
) -> Result<(), Fail> {
    let Wire::Len(entry) = w else {
        return Err(fail("", "a map entry without a length"));
    };
    let (mut k, mut v) = (None, None);
    let mut pos = 0;
    while pos < entry.len() {
        let tag = varint(entry, &mut pos)?;
        let w = wire(entry, &mut pos, tag & 7)?;
        match tag >> 3 {
            1 => k = Some(w),
            2 => v = Some(w),
            _ => {}
        }
    }
    for ((read, conv, ty), w) in [(key, k), (val, v)] {
        match w {
            Some(w) if write(conv, value(*read, w)?, &mut acc.2)? => {}
            _ => write_zero(ty, &mut acc.2),
        }
    }
    acc.1 += 1;
    Ok(())
}

impl Lists {
    pub(crate) fn new(n: usize) -> Self {
        Lists {
            items: (0..n).map(|_| (usize::MAX, 0, Vec::new())).collect(),
        }
    }

    pub(crate) fn items_len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn clear(&mut self) {
        for it in &mut self.items {
            *it = (usize::MAX, 0, std::mem::take(&mut it.2));
            it.2.clear();
        }
    }

    /// Put every collected list into its column.
    pub(crate) fn finish(&mut self, slots: &mut RowSlots) {
        for (col, n, items) in &self.items {
            if *col != usize::MAX {
                let _ = slots.put(*col, |buf| {
                    leb128::put(buf, *n);
                    buf.extend_from_slice(items);
                    Ok::<(), ()>(())
                });
            }
        }
    }
}

/// Write one value; `false`: nothing to write (no such case yet but a
/// wrapper without its value, which is the column's NULL/DEFAULT).
fn write(conv: &Conv, v: Val<'_>, out: &mut Vec<u8>) -> Result<bool, Fail> {
    match (conv, v) {
        (Conv::Nullable(inner), v) => {
            out.push(0);
            write(inner, v, out)
        }
        (Conv::Int(ty), Val::Int(n)) => put_int(ty, n, out)
            .map(|()| true)
            .map_err(|r| fail(n.to_string(), r)),
        (Conv::Float(false), Val::Int(n)) => {
            out.extend_from_slice(&(n as f32).to_le_bytes());
            Ok(true)
        }
        (Conv::Float(true), Val::Int(n)) => {
            out.extend_from_slice(&(n as f64).to_le_bytes());
            Ok(true)
        }
        (Conv::Float(false), Val::Float(f)) => {
            out.extend_from_slice(&(f as f32).to_le_bytes());
            Ok(true)
        }
        (Conv::Float(true), Val::Float(f)) => {
            out.extend_from_slice(&f.to_le_bytes());
            Ok(true)
        }
        (Conv::Bool, Val::Int(n)) => {
            out.push(u8::from(n != 0));
            Ok(true)
        }
        (Conv::DateTime, Val::Int(n)) => {
            let s = u32::try_from(n).map_err(|_| fail(n.to_string(), "out of DateTime range"))?;
            {
                out.extend_from_slice(&s.to_le_bytes());
                Ok(true)
            }
        }
        (Conv::Str, Val::Bytes(b)) => {
            leb128::put(out, b.len() as u64);
            {
                out.extend_from_slice(b);
                Ok(true)
            }
        }
        (Conv::Text(ty), Val::Bytes(b)) => write_text(ty, b, b, out).map(|()| true),
        (Conv::EnumName(names, ty), Val::Int(n)) => {
            let name = names
                .iter()
                .find(|(v, _)| i128::from(*v) == n)
                .map(|(_, s)| s.as_bytes());
            let name =
                name.ok_or_else(|| fail(n.to_string(), "not a value of the Protobuf enum"))?;
            write_text(ty, name, name, out).map(|()| true)
        }
        (Conv::Timestamp(p), Val::Bytes(m)) => timestamp(*p, m, out).map(|()| true),
        (Conv::Wrapper(read, inner), Val::Bytes(m)) => {
            let mut pos = 0;
            while pos < m.len() {
                let tag = varint(m, &mut pos)?;
                let w = wire(m, &mut pos, tag & 7)?;
                if tag >> 3 == 1 {
                    return write(inner, value(*read, w)?, out);
                }
            }
            // The wrapper's value is its type's default: 0, false, "".
            let zero = match read {
                Read::Bytes => Val::Bytes(b""),
                Read::F32 | Read::F64 => Val::Float(0.0),
                _ => Val::Int(0),
            };
            write(inner, zero, out)
        }
        (Conv::Fail(reason), _) => Err(fail("", reason.clone())),
        _ => Err(fail(
            "",
            "a field's value does not match its column's conversion",
        )),
    }
}

fn timestamp(p: Option<u8>, m: &[u8], out: &mut Vec<u8>) -> Result<(), Fail> {
    let (mut secs, mut nanos) = (0i64, 0i64);
    let mut pos = 0;
    while pos < m.len() {
        let tag = varint(m, &mut pos)?;
        let w = wire(m, &mut pos, tag & 7)?;
        match (tag >> 3, w) {
            (1, Wire::Varint(n)) => secs = n as i64,
            (2, Wire::Varint(n)) => nanos = i64::from(n as i32),
            _ => {}
        }
    }
    match p {
        None => {
            let s =
                u32::try_from(secs).map_err(|_| fail(secs.to_string(), "out of DateTime range"))?;
            out.extend_from_slice(&s.to_le_bytes());
        }
        Some(p) => {
            let scale = 10i64.pow(u32::from(p));
            let ticks = secs
                .checked_mul(scale)
                .and_then(|t| t.checked_add(nanos / 10i64.pow(9 - u32::from(p.min(9)))))
                .ok_or_else(|| fail(secs.to_string(), "out of DateTime64 range"))?;
            out.extend_from_slice(&ticks.to_le_bytes());
        }
    }
    Ok(())
}
