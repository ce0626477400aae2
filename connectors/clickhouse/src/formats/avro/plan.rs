//! The decoding plan of one (writer schema, table) pair: [`compile`] walks
//! the writer schema once and pairs each field with its column (by name;
//! nested records onto dotted columns) and a [`W`](super::leaf::W), the value writer for
//! that pair of types; [`Plan::decode`] then runs the plan per message,
//! reading Avro binary and writing RowBinary into the row's slots with no
//! value tree and no allocation. Compiled on the driver thread that first
//! meets a schema id; each driver keeps its own plans.

use super::leaf::W;
use super::read::{skip, to_json, Reader};
use super::schema::{Avro, Named, Schema, Temporal};
use crate::formats::row::{RowLayout, RowSlots};
use crate::rowbinary::{leb128, write_text, write_zero, Fail};
use crate::types::ChType;
use std::sync::Arc;

/// What to do with one field of a record.
#[derive(Debug)]
pub(crate) enum Op {
    /// No column wants it.
    Skip(Avro),
    /// Into column `col`.
    Col { col: usize, w: W },
    /// A nested record onto dotted columns.
    Record(Vec<Op>),
    /// A union of records (or null and a record): ops per branch.
    Union(Vec<Op>),
}

/// A compiled plan: a top-level record's ops over the table's columns.
#[derive(Debug)]
pub(crate) struct Plan {
    ops: Vec<Op>,
    named: Arc<[Named]>,
}

/// Deepest record nesting mapped onto dotted columns.
const MAX_NESTING: usize = 32;

/// Compile `schema` against `layout`; `Err` when the schema's top level is
/// not a record.
pub(crate) fn compile(schema: &Schema, layout: &RowLayout) -> Result<Plan, String> {
    let Avro::Named(i) = schema.top else {
        return Err("the writer schema's top level is not a record".into());
    };
    let Named::Record { fields, .. } = &schema.named[i] else {
        return Err("the writer schema's top level is not a record".into());
    };
    let c = Compiler {
        named: &schema.named,
        layout,
    };
    Ok(Plan {
        ops: c.fields(fields, "", 0),
        named: schema.named.clone().into(),
    })
}

struct Compiler<'a> {
    named: &'a [Named],
    layout: &'a RowLayout,
}

impl Compiler<'_> {
    fn fields(&self, fields: &[super::schema::Field], prefix: &str, depth: usize) -> Vec<Op> {
        fields
            .iter()
            .map(|f| {
                let path = format!("{prefix}{}", f.name);
                self.field(&f.ty, &path, depth)
            })
            .collect()
    }

    fn field(&self, ty: &Avro, path: &str, depth: usize) -> Op {
        if let Some(col) = self.layout.value_column(path) {
            return Op::Col {
                col,
                w: self.value(ty, &self.layout.cols[col].ty),
            };
        }
        let dotted = format!("{path}.");
        let wanted = self.layout.cols.iter().any(|c| c.name.starts_with(&dotted));
        if !wanted || depth >= MAX_NESTING {
            return Op::Skip(ty.clone());
        }
        match ty {
            Avro::Named(i) => match &self.named[*i] {
                Named::Record { fields, .. } => Op::Record(self.fields(fields, &dotted, depth + 1)),
                _ => Op::Skip(ty.clone()),
            },
            Avro::Union(bs) => Op::Union(bs.iter().map(|b| self.field(b, path, depth)).collect()),
            _ => Op::Skip(ty.clone()),
        }
    }

    /// The writer of one value of `avro` into a column of type `ch`.
    fn value(&self, avro: &Avro, ch: &ChType) -> W {
        let ch = ch.strip_low_cardinality();
        match (avro, ch) {
            (Avro::Union(bs), _) => W::Union(bs.iter().map(|b| self.value(b, ch)).collect()),
            (Avro::Null, ChType::Nullable(_)) => W::NullValue,
            (Avro::Null, _) => W::Null,
            (_, ChType::Nullable(inner)) => W::Nullable(Box::new(self.value(avro, inner))),
            _ => self.scalar(avro, ch),
        }
    }

    fn scalar(&self, avro: &Avro, ch: &ChType) -> W {
        let int = ch.is_integer();
        match (avro, ch) {
            (Avro::Boolean, ChType::Bool) => W::Bool,
            (Avro::Boolean, t) if t.is_integer() => W::Bool,
            (Avro::Int(Some(Temporal::Date)), ChType::Date) => W::Date,
            (Avro::Long(Some(Temporal::Timestamp { precision, .. })), t) => match t {
                ChType::DateTime(_) => W::Time {
                    from: *precision,
                    to: None,
                },
                ChType::DateTime64(p, _) => W::Time {
                    from: *precision,
                    to: Some(*p),
                },
                t if t.is_integer() => W::Int(t.clone()),
                _ => self.fail(avro, ch),
            },
            (Avro::Long(None), ChType::DateTime(_)) => W::Time { from: 0, to: None },
            (Avro::Long(None), ChType::DateTime64(p, _)) => W::Time {
                from: *p,
                to: Some(*p),
            },
            (Avro::Int(_) | Avro::Long(_), _) if int => W::Int(ch.clone()),
            (Avro::Int(_) | Avro::Long(_), ChType::Float32) => W::IntToFloat(false),
            (Avro::Int(_) | Avro::Long(_), ChType::Float64) => W::IntToFloat(true),
            (Avro::Float, ChType::Float32) => W::Float(false),
            (Avro::Float, ChType::Float64) => W::Float(true),
            (Avro::Double, ChType::Float64) => W::Double,
            (Avro::Bytes(Some(d)), ChType::Decimal { precision, scale }) => W::Decimal {
                fixed: None,
                from: *d,
                precision: *precision,
                scale: *scale,
            },
            (Avro::Bytes(Some(d)), ChType::String) => W::DecimalText {
                fixed: None,
                from: *d,
            },
            (Avro::String(_) | Avro::Bytes(None), ChType::String) => W::Str,
            (Avro::String(_) | Avro::Bytes(None), _) if !is_structured(ch) => W::Text(ch.clone()),
            (Avro::Array(item), ChType::Array(t)) => {
                W::Array(Box::new(self.value(item, t)), (**t).clone())
            }
            (Avro::Map(v), ChType::Map(k, t)) => {
                W::Map((**k).clone(), Box::new(self.value(v, t)), (**t).clone())
            }
            (Avro::Array(_) | Avro::Map(_), ChType::String) => W::Json(avro.clone()),
            (Avro::Named(i), _) => self.named_value(*i, avro, ch),
            _ => self.fail(avro, ch),
        }
    }

    fn named_value(&self, i: usize, avro: &Avro, ch: &ChType) -> W {
        match (&self.named[i], ch) {
            (Named::Record { .. }, ChType::String) => W::Json(avro.clone()),
            (Named::Enum { symbols, .. }, ChType::Enum8(items)) => {
                W::EnumValue(enum_values(symbols, items, ch, false))
            }
            (Named::Enum { symbols, .. }, ChType::Enum16(items)) => {
                W::EnumValue(enum_values(symbols, items, ch, true))
            }
            (Named::Enum { symbols, .. }, t) if !is_structured(t) => {
                W::EnumText(symbols.clone(), t.clone())
            }
            (
                Named::Fixed {
                    size,
                    decimal: Some(d),
                    ..
                },
                ChType::Decimal { precision, scale },
            ) => W::Decimal {
                fixed: Some(*size),
                from: *d,
                precision: *precision,
                scale: *scale,
            },
            (
                Named::Fixed {
                    size,
                    decimal: Some(d),
                    ..
                },
                ChType::String,
            ) => W::DecimalText {
                fixed: Some(*size),
                from: *d,
            },
            (Named::Fixed { size: 16, .. }, ChType::Uuid) => W::FixedUuid,
            (Named::Fixed { size, .. }, ChType::String | ChType::FixedString(_)) => {
                W::Fixed(*size, ch.clone())
            }
            _ => self.fail(avro, ch),
        }
    }

    fn fail(&self, avro: &Avro, ch: &ChType) -> W {
        let what = match avro {
            Avro::Named(i) => format!("Avro type {}", self.named[*i].name()),
            other => format!("Avro {}", describe(other)),
        };
        W::Fail(avro.clone(), format!("{what} cannot go into a {ch} column"))
    }
}

fn is_structured(ch: &ChType) -> bool {
    matches!(
        ch,
        ChType::Array(_)
            | ChType::Map(..)
            | ChType::Tuple(_)
            | ChType::Json(_)
            | ChType::Variant(_)
            | ChType::Dynamic(_)
    )
}

fn describe(a: &Avro) -> &'static str {
    match a {
        Avro::Null => "null",
        Avro::Boolean => "boolean",
        Avro::Int(_) => "int",
        Avro::Long(_) => "long",
        Avro::Float => "float",
        Avro::Double => "double",
        Avro::Bytes(_) => "bytes",
        Avro::String(_) => "string",
        Avro::Array(_) => "array",
        Avro::Map(_) => "map",
        Avro::Union(_) => "union",
        Avro::Named(_) => "named type",
    }
}

fn enum_values<T: Copy + Into<i16>>(
    symbols: &[String],
    items: &[(String, T)],
    ch: &ChType,
    wide: bool,
) -> Vec<Result<(i16, bool), String>> {
    symbols
        .iter()
        .map(|s| {
            items
                .iter()
                .find(|(n, _)| n == s)
                .map(|(_, v)| ((*v).into(), wide))
                .ok_or_else(|| format!("symbol {s} is not a name of {ch}"))
        })
        .collect()
}

/// Scratch the plan reuses: one buffer per array/map nesting level (its
/// items are written before their count is known) and one for JSON text.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    levels: Vec<Vec<u8>>,
    json: Vec<u8>,
}

impl Plan {
    /// Decode one record from `r` into `slots`. On error, names the column.
    pub(crate) fn decode(
        &self,
        r: &mut Reader<'_>,
        slots: &mut RowSlots,
        layout: &RowLayout,
        st: &mut Scratch,
    ) -> Result<(), (Option<usize>, Fail)> {
        self.ops_decode(&self.ops, r, slots, layout, st)
    }

    fn ops_decode(
        &self,
        ops: &[Op],
        r: &mut Reader<'_>,
        slots: &mut RowSlots,
        layout: &RowLayout,
        st: &mut Scratch,
    ) -> Result<(), (Option<usize>, Fail)> {
        for op in ops {
            self.op_decode(op, r, slots, layout, st)?;
        }
        Ok(())
    }

    fn op_decode(
        &self,
        op: &Op,
        r: &mut Reader<'_>,
        slots: &mut RowSlots,
        layout: &RowLayout,
        st: &mut Scratch,
    ) -> Result<(), (Option<usize>, Fail)> {
        match op {
            Op::Skip(ty) => skip(ty, &self.named, r, 0).map_err(|f| (None, f)),
            Op::Col { col, w } => slots
                .put_if(*col, |buf| self.write(w, r, buf, st, 0))
                .map_err(|f| (Some(*col), f)),
            Op::Record(ops) => self.ops_decode(ops, r, slots, layout, st),
            Op::Union(branches) => {
                let i = r.branch(branches.len()).map_err(|f| (None, f))?;
                self.op_decode(&branches[i], r, slots, layout, st)
            }
        }
    }

    /// Write one value with `w`; `false`: a null for a non-Nullable column.
    fn write(
        &self,
        w: &W,
        r: &mut Reader<'_>,
        out: &mut Vec<u8>,
        st: &mut Scratch,
        depth: usize,
    ) -> Result<bool, Fail> {
        match w {
            W::Null => return Ok(false),
            W::NullValue => out.push(1),
            W::Nullable(inner) => {
                out.push(0);
                return self.write(inner, r, out, st, depth);
            }
            W::Array(item, item_ty) => self.collection(r, out, st, depth, |p, r, buf, st| {
                if !p.write(item, r, buf, st, depth + 1)? {
                    write_zero(item_ty, buf);
                }
                Ok(())
            })?,
            W::Map(key_ty, val, val_ty) => {
                self.collection(r, out, st, depth, |p, r, buf, st| {
                    let k = r.bytes()?;
                    write_text(key_ty, k, k, buf)?;
                    if !p.write(val, r, buf, st, depth + 1)? {
                        write_zero(val_ty, buf);
                    }
                    Ok(())
                })?
            }
            W::Union(branches) => {
                let i = r.branch(branches.len())?;
                return self.write(&branches[i], r, out, st, depth);
            }
            W::Json(ty) => {
                let mut json = std::mem::take(&mut st.json);
                json.clear();
                let res = to_json(ty, &self.named, r, &mut json, depth);
                leb128::put(out, json.len() as u64);
                out.extend_from_slice(&json);
                st.json = json;
                res?;
            }
            W::Fail(ty, reason) => {
                let mut json = Vec::new();
                to_json(ty, &self.named, r, &mut json, depth)?;
                return Err(Fail {
                    value: String::from_utf8_lossy(&json).into_owned(),
                    reason: reason.clone(),
                });
            }
            leaf => super::leaf::write(leaf, r, out)?,
        }
        Ok(true)
    }

    /// An array or map: blocks of items written by `item` into this
    /// level's scratch, then the total count and the items.
    fn collection(
        &self,
        r: &mut Reader<'_>,
        out: &mut Vec<u8>,
        st: &mut Scratch,
        depth: usize,
        mut item: impl FnMut(&Self, &mut Reader<'_>, &mut Vec<u8>, &mut Scratch) -> Result<(), Fail>,
    ) -> Result<(), Fail> {
        if depth >= 64 {
            return Err(Fail {
                value: String::new(),
                reason: "Avro data nested too deeply".into(),
            });
        }
        if st.levels.len() <= depth {
            st.levels.resize_with(depth + 1, Vec::new);
        }
        let mut buf = std::mem::take(&mut st.levels[depth]);
        buf.clear();
        let mut count = 0u64;
        let res = (|| loop {
            let n = r.block()?;
            if n == 0 {
                return Ok(());
            }
            for _ in 0..n {
                item(self, r, &mut buf, st)?;
            }
            count += n as u64;
        })();
        if res.is_ok() {
            leb128::put(out, count);
            out.extend_from_slice(&buf);
        }
        st.levels[depth] = buf;
        res
    }
}
