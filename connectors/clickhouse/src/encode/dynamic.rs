//! The `JSON`, `Variant(..)` and `Dynamic` column types in RowBinary
//! (ClickHouse >= 24.x). Called by `super::value::write_value` on the
//! lane thread that encodes the row; pure functions, no shared state.
//!
//! Encodings (as ClickHouse 26.9 writes them with `FORMAT RowBinary`, and
//! reads them back):
//! - `Dynamic`: the value's type in the binary type encoding (one tag byte,
//!   e.g. 0x0A Int64, 0x15 String, 0x2D Bool, 0x00 Nothing = NULL; then the
//!   parameters of `Array`, `Nullable`, `JSON`), then the value in RowBinary.
//! - `Variant(T1, ..)`: the discriminator (the alternative's index in name
//!   order; 255 = NULL), then the value in RowBinary of that alternative.
//! - `JSON`: the number of paths (LEB128), then per path its dotted name
//!   (String) and its value: typed paths (`JSON(a.b UInt32)`) in their type,
//!   every other path as `Dynamic`. Nested objects become dotted paths;
//!   nulls and empty objects store nothing (as the server does on parse).
//!
//! Types are inferred like the server's JSON parser: integers Int64 (UInt64
//! above its range, Float64 beyond), other numbers Float64, strings String,
//! booleans Bool, arrays of one scalar kind `Array(Nullable(T))`, other
//! arrays `Array(Dynamic)`, objects `JSON`.
//!
//! Unlike the scalar writers this path allocates (a buffer per object): a
//! JSON path count must precede the paths.

use super::json::{for_each_item, for_each_member, unescape_into, Walk};
use crate::rowbinary::number::{parse_f64, parse_i128};
use crate::rowbinary::{fail, leb128, write_zero, Fail};
use crate::types::{ChType, JsonSpec};

const NOTHING: u8 = 0x00;
const UINT64: u8 = 0x04;
const INT64: u8 = 0x0A;
const FLOAT64: u8 = 0x0E;
const STRING: u8 = 0x15;
const ARRAY: u8 = 0x1E;
const NULLABLE: u8 = 0x23;
const DYNAMIC: u8 = 0x2B;
const BOOL: u8 = 0x2D;
const JSON: u8 = 0x30;
/// `max_types` of a nested `Dynamic` and `max_dynamic_paths` /
/// `max_dynamic_types` of a nested `JSON`: the server's defaults.
const NESTED_MAX_TYPES: u8 = 32;
const NESTED_MAX_PATHS: u64 = 1024;
const VARIANT_NULL: u8 = 255;

/// The writer of one JSON value as a column type (`value::write_value`),
/// passed in so that a typed JSON path or a Variant alternative is written
/// like any column while this file stays below the one that calls it.
pub(crate) type WriteValue = fn(&ChType, &[u8], &mut Vec<u8>, &mut Vec<u8>) -> Result<(), Fail>;

fn walk_fail(v: &[u8], e: Walk<Fail>) -> Fail {
    match e {
        Walk::Json(j) => fail(v, j.reason),
        Walk::User(f) => f,
    }
}

/// A JSON value's kind, from its first byte.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Int,
    Float,
    Str,
    Array,
    Object,
}

fn kind(v: &[u8]) -> Kind {
    match v.first() {
        Some(b'n') => Kind::Null,
        Some(b't' | b'f') => Kind::Bool,
        Some(b'"') => Kind::Str,
        Some(b'[') => Kind::Array,
        Some(b'{') => Kind::Object,
        _ if v.iter().any(|c| matches!(c, b'.' | b'e' | b'E')) => Kind::Float,
        _ => Kind::Int,
    }
}

/// The content of a JSON string, unescaped into `scratch` if needed.
fn string_content<'a>(v: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<&'a [u8], Fail> {
    let content = v.get(1..v.len().saturating_sub(1)).unwrap_or(&[]);
    if content.contains(&b'\\') {
        scratch.clear();
        unescape_into(content, scratch).map_err(|r| fail(v, r))?;
        Ok(&scratch[..])
    } else {
        Ok(content)
    }
}

/// A scalar JSON value (not null, array or object) as its inferred type:
/// the tag when `tag`, then the value.
fn write_scalar(v: &[u8], tag: bool, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<(), Fail> {
    let mut put = |t: u8, bytes: &[u8]| {
        if tag {
            out.push(t);
        }
        out.extend_from_slice(bytes);
    };
    match kind(v) {
        Kind::Bool => put(BOOL, &[u8::from(v[0] == b't')]),
        Kind::Int => match parse_i128(v) {
            Some(n) if i64::try_from(n).is_ok() => put(INT64, &(n as i64).to_le_bytes()),
            Some(n) if u64::try_from(n).is_ok() => put(UINT64, &(n as u64).to_le_bytes()),
            _ => write_float(v, tag, out)?,
        },
        Kind::Float => write_float(v, tag, out)?,
        Kind::Str => {
            let text = string_content(v, scratch)?;
            if tag {
                out.push(STRING);
            }
            leb128::put(out, text.len() as u64);
            out.extend_from_slice(text);
        }
        Kind::Null | Kind::Array | Kind::Object => {
            return Err(fail(v, "not a scalar JSON value"));
        }
    }
    Ok(())
}

fn write_float(v: &[u8], tag: bool, out: &mut Vec<u8>) -> Result<(), Fail> {
    let f = parse_f64(v, false).ok_or_else(|| fail(v, "not a valid Float64"))?;
    if tag {
        out.push(FLOAT64);
    }
    out.extend_from_slice(&f.to_le_bytes());
    Ok(())
}

/// The value writer of a nested `JSON` (under `Dynamic`): it has no typed
/// paths, so this is never called.
fn untyped(ty: &ChType, v: &[u8], _: &mut Vec<u8>, _: &mut Vec<u8>) -> Result<(), Fail> {
    Err(fail(v, format!("a nested JSON has no typed path of {ty}")))
}

/// One JSON value as a `Dynamic` value (type tag, then value).
pub(crate) fn write_dynamic(
    v: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), Fail> {
    match kind(v) {
        Kind::Null => {
            out.push(NOTHING);
            Ok(())
        }
        Kind::Array => write_dynamic_array(v, out, scratch),
        Kind::Object => {
            out.extend_from_slice(&[JSON, 0]);
            leb128::put(out, NESTED_MAX_PATHS);
            // max_dynamic_types, then no typed paths, skips or skip regexps
            out.extend_from_slice(&[NESTED_MAX_TYPES, 0, 0, 0]);
            write_json(&JsonSpec::default(), v, out, scratch, untyped)
        }
        _ => write_scalar(v, true, out, scratch),
    }
}

/// An array: `Array(Nullable(T))` if its items are nulls and one scalar
/// kind (integers and floats mix as Float64), else `Array(Dynamic)`.
fn write_dynamic_array(v: &[u8], out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<(), Fail> {
    let mut common: Option<Kind> = None;
    let mut mixed = false;
    let mut n = 0u64;
    for_each_item(v, 0, 1, |s, e| {
        n += 1;
        let k = match kind(&v[s..e]) {
            Kind::Null => return Ok(()),
            Kind::Int if common == Some(Kind::Float) => Kind::Float,
            k => k,
        };
        match common {
            None => common = Some(k),
            Some(Kind::Int) if k == Kind::Float => common = Some(Kind::Float),
            Some(c) if c == k => {}
            Some(_) => mixed = true,
        }
        Ok::<_, Fail>(())
    })
    .map_err(|e| walk_fail(v, e))?;
    let start = out.len();
    if !mixed && !matches!(common, Some(Kind::Array | Kind::Object)) {
        let tag = match common {
            None | Some(Kind::Str) => STRING,
            Some(Kind::Bool) => BOOL,
            Some(Kind::Int) => INT64,
            _ => FLOAT64,
        };
        out.extend_from_slice(&[ARRAY, NULLABLE, tag]);
        leb128::put(out, n);
        let res = for_each_item(v, 0, 1, |s, e| {
            let item = &v[s..e];
            if kind(item) == Kind::Null {
                out.push(1);
                write_zero(&scalar_type(tag), out);
                return Ok(());
            }
            out.push(0);
            match (tag, kind(item)) {
                (FLOAT64, Kind::Int) => write_float(item, false, out),
                (INT64, _) => match parse_i128(item).and_then(|n| i64::try_from(n).ok()) {
                    Some(n) => {
                        out.extend_from_slice(&n.to_le_bytes());
                        Ok(())
                    }
                    None => Err(fail(item, "outside Int64")),
                },
                _ => write_scalar(item, false, out, scratch),
            }
        });
        if res.is_ok() {
            return Ok(());
        }
        // e.g. an integer beyond Int64: keep each item's own type instead.
        out.truncate(start);
    }
    out.extend_from_slice(&[ARRAY, DYNAMIC, NESTED_MAX_TYPES]);
    leb128::put(out, n);
    for_each_item(v, 0, 1, |s, e| write_dynamic(&v[s..e], out, scratch))
        .map_err(|e| walk_fail(v, e))?;
    Ok(())
}

fn scalar_type(tag: u8) -> ChType {
    match tag {
        BOOL => ChType::Bool,
        INT64 => ChType::Int64,
        FLOAT64 => ChType::Float64,
        _ => ChType::String,
    }
}

/// A JSON object into a `JSON` column of `spec`.
pub(crate) fn write_json(
    spec: &JsonSpec,
    v: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    write_value: WriteValue,
) -> Result<(), Fail> {
    if v.first() != Some(&b'{') {
        return Err(fail(v, "a JSON column takes a JSON object"));
    }
    let mut w = PathWriter {
        spec,
        found: vec![false; spec.typed.len()],
        count: 0,
        paths: Vec::with_capacity(v.len() + 16),
        path: String::new(),
        write_value,
    };
    w.object(v, scratch)?;
    // Typed paths are always present: a missing one holds its type's zero.
    for (i, (path, ty)) in spec.typed.iter().enumerate() {
        if !w.found[i] {
            w.name(path);
            write_zero(ty, &mut w.paths);
        }
    }
    leb128::put(out, w.count);
    out.extend_from_slice(&w.paths);
    Ok(())
}

/// The paths of one JSON value being collected: their count must precede
/// them.
struct PathWriter<'a> {
    spec: &'a JsonSpec,
    /// Per typed path: seen in the object.
    found: Vec<bool>,
    count: u64,
    /// Encoded (name, value) pairs.
    paths: Vec<u8>,
    /// The dotted path of the member being written.
    path: String,
    /// Writes a typed path's value.
    write_value: WriteValue,
}

impl PathWriter<'_> {
    /// Start a path entry: count it and write its name.
    fn name(&mut self, path: &str) {
        self.count += 1;
        leb128::put(&mut self.paths, path.len() as u64);
        self.paths.extend_from_slice(path.as_bytes());
    }

    /// The members of object `v`, below the current path.
    fn object(&mut self, v: &[u8], scratch: &mut Vec<u8>) -> Result<(), Fail> {
        let mut key_buf = Vec::new();
        for_each_member(v, 0, 1, |key, s, e| {
            key_buf.clear();
            if key.escaped {
                unescape_into(key.raw, &mut key_buf).map_err(|r| fail(key.raw, r))?;
            } else {
                key_buf.extend_from_slice(key.raw);
            }
            let name =
                std::str::from_utf8(&key_buf).map_err(|_| fail(key.raw, "key is not UTF-8"))?;
            let len = self.path.len();
            if len > 0 {
                self.path.push('.');
            }
            self.path.push_str(name);
            let res = self.member(&v[s..e], scratch);
            self.path.truncate(len);
            res
        })
        .map_err(|e| walk_fail(v, e))?;
        Ok(())
    }

    /// One member's value at the current path.
    fn member(&mut self, value: &[u8], scratch: &mut Vec<u8>) -> Result<(), Fail> {
        let path = self.path.clone();
        let skipped = self.spec.skip.iter().any(|p| {
            path.strip_prefix(p.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        });
        if skipped {
            return Ok(());
        }
        if let Some(i) = self.spec.typed.iter().position(|(p, _)| *p == path) {
            let ty = &self.spec.typed[i].1;
            if self.found[i] {
                return Err(fail(value, format!("path `{path}` appears twice")));
            }
            self.found[i] = true;
            self.name(&path);
            if kind(value) == Kind::Null
                && !matches!(ty.strip_low_cardinality(), ChType::Nullable(_))
            {
                write_zero(ty, &mut self.paths);
                return Ok(());
            }
            return (self.write_value)(ty, value, &mut self.paths, scratch).map_err(|f| Fail {
                reason: format!("path `{path}`: {}", f.reason),
                ..f
            });
        }
        match kind(value) {
            Kind::Null => Ok(()),
            Kind::Object => self.object(value, scratch),
            _ => {
                self.name(&path);
                write_dynamic(value, &mut self.paths, scratch)
            }
        }
    }
}

/// Whether alternative `t` is the natural home of a JSON value of `k`
/// (tried before the others).
fn prefers(t: &ChType, k: Kind) -> bool {
    let t = t.strip_low_cardinality();
    match k {
        Kind::Str => matches!(t, ChType::String | ChType::FixedString(_)),
        Kind::Int => {
            t.is_integer()
                || matches!(
                    t,
                    ChType::Float32 | ChType::Float64 | ChType::Decimal { .. }
                )
        }
        Kind::Float => matches!(
            t,
            ChType::Float32 | ChType::Float64 | ChType::Decimal { .. }
        ),
        Kind::Bool => matches!(t, ChType::Bool),
        Kind::Array => matches!(t, ChType::Array(_) | ChType::Tuple(_)),
        Kind::Object => matches!(t, ChType::Map(..) | ChType::Tuple(_) | ChType::Json(_)),
        Kind::Null => false,
    }
}

/// One JSON value into a `Variant(items)` column: NULL for null, else the
/// first alternative (preferred ones first, each group in name order) that
/// accepts it.
pub(crate) fn write_variant(
    items: &[ChType],
    v: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    write_value: WriteValue,
) -> Result<(), Fail> {
    let k = kind(v);
    if k == Kind::Null {
        out.push(VARIANT_NULL);
        return Ok(());
    }
    let start = out.len();
    for pass in [true, false] {
        for (i, t) in items.iter().enumerate() {
            if prefers(t, k) != pass {
                continue;
            }
            // At most 255 alternatives: the server's own limit.
            out.push(i as u8);
            if write_value(t, v, out, scratch).is_ok() {
                return Ok(());
            }
            out.truncate(start);
        }
    }
    let names: Vec<String> = items.iter().map(ToString::to_string).collect();
    Err(fail(
        v,
        format!(
            "no alternative of Variant({}) accepts this value",
            names.join(", ")
        ),
    ))
}
