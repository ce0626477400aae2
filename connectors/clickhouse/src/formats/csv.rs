//! `--format csv`: one message is one CSV record (RFC 4180: fields split
//! by the delimiter, a field in double quotes may hold the delimiter, line
//! breaks and `""` for a quote; one trailing line break is allowed).
//!
//! Fields fill the table's value columns in table order, or the columns
//! named by `--csv-columns` (an empty name skips its field). An empty
//! unquoted field, or `\N`, is NULL in a Nullable column; an empty unquoted
//! field is the column's DEFAULT (or zero) elsewhere, and `""` (quoted) is
//! the empty string. Array, Map and Tuple columns read their field as JSON.
//! One [`CsvEncoder`] per driver thread; no allocation per row once warm.

use super::row::{payload, RowLayout, RowSlots};
use crate::encode::encoder::strip;
use crate::encode::value::write_value;
use crate::encode::{RowError, SchemaError};
use crate::rowbinary::{write_text, Fail};
use crate::types::ChType;
use spate_core::record::Message;

/// CSV settings of a pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvOptions {
    /// The column each field goes to, in field order (`""` skips a
    /// field); empty: the table's value columns in table order.
    pub columns: Vec<String>,
    /// The field delimiter (`,` by default).
    pub delimiter: u8,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            columns: Vec::new(),
            delimiter: b',',
        }
    }
}

/// Decodes CSV records into rows.
#[derive(Debug)]
pub struct CsvEncoder {
    layout: RowLayout,
    slots: RowSlots,
    /// Per field: the column it fills (None: skipped).
    fields: Vec<Option<usize>>,
    delimiter: u8,
    scratch: Vec<u8>,
    unquoted: Vec<u8>,
}

/// One field of a record: its bytes and whether it was quoted.
struct Field {
    start: usize,
    end: usize,
    quoted: bool,
    /// A quoted field holding `""`.
    escaped: bool,
}

/// The field starting at `b[i]`; returns it and where the next one starts
/// (`None` after the last field).
fn next_field(b: &[u8], i: usize, delim: u8) -> Result<(Field, Option<usize>), &'static str> {
    if b.get(i) != Some(&b'"') {
        let end = b[i..]
            .iter()
            .position(|&c| c == delim)
            .map_or(b.len(), |p| i + p);
        if b[i..end]
            .iter()
            .any(|&c| c == b'"' || c == b'\n' || c == b'\r')
        {
            return Err("a quote or a line break in an unquoted field");
        }
        let field = Field {
            start: i,
            end,
            quoted: false,
            escaped: false,
        };
        return Ok((field, (end < b.len()).then_some(end + 1)));
    }
    let mut j = i + 1;
    let mut escaped = false;
    loop {
        match b.get(j) {
            None => return Err("unterminated quoted field"),
            Some(b'"') if b.get(j + 1) == Some(&b'"') => {
                escaped = true;
                j += 2;
            }
            Some(b'"') => break,
            Some(_) => j += 1,
        }
    }
    let field = Field {
        start: i + 1,
        end: j,
        quoted: true,
        escaped,
    };
    match b.get(j + 1) {
        None => Ok((field, None)),
        Some(&c) if c == delim => Ok((field, Some(j + 2))),
        Some(_) => Err("characters after a closing quote"),
    }
}

/// Append field `k` (from 0) of CSV record `b` to `out` as text (a quoted
/// field unquoted): whether the record has it, an empty unquoted field or
/// `\N` being none.
pub(crate) fn field_text(b: &[u8], delim: u8, k: usize, out: &mut String) -> Result<bool, String> {
    let mut b = b;
    if let Some(rest) = b.strip_suffix(b"\n") {
        b = rest.strip_suffix(b"\r").unwrap_or(rest);
    }
    let mut at = Some(0);
    let mut i = 0;
    while let Some(start) = at {
        let (f, next) =
            next_field(b, start, delim).map_err(|r| format!("not a CSV record: {r}"))?;
        if i == k {
            let raw = &b[f.start..f.end];
            if !f.quoted && (raw.is_empty() || raw == b"\\N") {
                return Ok(false);
            }
            let text = std::str::from_utf8(raw).map_err(|_| "the field is not UTF-8 text")?;
            if f.escaped {
                out.push_str(&text.replace("\"\"", "\""));
            } else {
                out.push_str(text);
            }
            return Ok(true);
        }
        i += 1;
        at = next;
    }
    Ok(false)
}

impl CsvEncoder {
    /// An encoder for `layout` with `opts` (every named column checked).
    pub(crate) fn new(layout: RowLayout, opts: &CsvOptions) -> Result<Self, SchemaError> {
        let fields = if opts.columns.is_empty() {
            (0..layout.cols.len())
                .filter(|&i| !layout.cols[i].is_metadata())
                .map(Some)
                .collect()
        } else {
            let mut fields = Vec::with_capacity(opts.columns.len());
            for name in &opts.columns {
                if name.is_empty() {
                    fields.push(None);
                    continue;
                }
                let i = layout
                    .value_column(name)
                    .ok_or_else(|| SchemaError::Unsupported {
                        column: name.clone(),
                        reason: "--csv-columns names no insertable value column of the table"
                            .into(),
                    })?;
                if fields.contains(&Some(i)) {
                    return Err(SchemaError::Duplicate(name.clone()));
                }
                fields.push(Some(i));
            }
            fields
        };
        Ok(CsvEncoder {
            slots: RowSlots::new(&layout),
            layout,
            fields,
            delimiter: opts.delimiter,
            scratch: Vec::new(),
            unquoted: Vec::new(),
        })
    }

    /// Append one row for `msg` to `out` (unchanged on error).
    pub fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<(), RowError> {
        let mut b = payload(msg)?;
        if let Some(rest) = b.strip_suffix(b"\n") {
            b = rest.strip_suffix(b"\r").unwrap_or(rest);
        }
        self.slots.clear();
        let mut at = Some(0);
        let mut k = 0;
        while let Some(i) = at {
            let whole = |r: &str| RowError::new(None, &String::from_utf8_lossy(b), r.to_owned());
            let (field, next) = next_field(b, i, self.delimiter).map_err(whole)?;
            let Some(&target) = self.fields.get(k) else {
                return Err(whole(&format!("more than {} fields", self.fields.len())));
            };
            if let Some(col) = target {
                self.put_field(col, b, &field)?;
            }
            k += 1;
            at = next;
        }
        if k != self.fields.len() {
            let reason = format!("{k} fields, expected {}", self.fields.len());
            return Err(RowError::new(None, &String::from_utf8_lossy(b), reason));
        }
        self.slots.finish(&self.layout, msg, out)
    }

    fn put_field(&mut self, col: usize, b: &[u8], f: &Field) -> Result<(), RowError> {
        let c = &self.layout.cols[col];
        let raw = &b[f.start..f.end];
        let fail = |e: Fail| RowError::new(Some(&c.name), &e.value, e.reason);
        if !f.quoted && (raw.is_empty() || raw == b"\\N") {
            if c.nullable {
                return self.slots.put(col, |buf| {
                    buf.push(1);
                    Ok(())
                });
            }
            if raw.is_empty() {
                return Ok(());
            }
        }
        let text = if f.escaped {
            self.unquoted.clear();
            let mut i = 0;
            while i < raw.len() {
                self.unquoted.push(raw[i]);
                i += if raw[i] == b'"' { 2 } else { 1 };
            }
            &self.unquoted[..]
        } else {
            raw
        };
        let (inner, _) = strip(&c.ty);
        let structured = matches!(inner, ChType::Array(_) | ChType::Map(..) | ChType::Tuple(_));
        let scratch = &mut self.scratch;
        self.slots
            .put(col, |buf| {
                if structured {
                    write_value(&c.ty, text, buf, scratch)
                } else {
                    write_text(&c.ty, text, text, buf)
                }
            })
            .map_err(fail)
    }

    /// Whether rows are routed by a shard key.
    pub fn has_shard_key(&self) -> bool {
        self.layout.has_shard_key()
    }

    /// The shard key hash of the row the last `encode` appended.
    pub fn key_hash(&self, row: &[u8]) -> Option<u64> {
        self.slots.key_hash(&self.layout, row)
    }
}
