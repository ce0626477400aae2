//! One value of a message, found by a JSON pointer (RFC 6901), whatever
//! the message's format: what a `--table` template's `{field:/POINTER}`
//! reads to name each message's table.
//!
//! - JSON: the document is read only as far as the value, without
//!   building it or copying anything else;
//! - Avro: the writer schema's record fields by name, map keys, array
//!   indexes, unions passed through (`avro::Seek`), skipping what comes
//!   before the value and reading nothing after it;
//! - Protobuf: message fields by name, through nested messages, a proto3
//!   field without presence that is absent read as its default
//!   (`protobuf::seek`);
//! - CSV: `/NAME`, the field `--csv-columns` names so.
//!
//! A value is written as text: a string as it is, a number or a boolean
//! as JSON writes it, an enum by its name. One [`FieldReader`] per driver
//! thread (it keeps the schemas it read, per id).

use super::FormatSpec;
use std::fmt::Write as _;

/// A JSON pointer (RFC 6901), parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPointer {
    /// As given.
    pub text: String,
    tokens: Vec<String>,
}

impl FieldPointer {
    /// Parse `text` (`/type`, `/meta/tenant`; `~1` is `/`, `~0` is `~`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!(
                "{text} is not a JSON pointer (it starts with /, as in /type or /meta/tenant)"
            ));
        };
        let tokens = rest
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect();
        Ok(Self {
            text: text.to_owned(),
            tokens,
        })
    }

    /// Its reference tokens, unescaped.
    #[must_use]
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }
}

/// Reads values at pointers out of messages of one format.
pub struct FieldReader(Reader);

enum Reader {
    Json,
    Avro(super::avro::Seek),
    Protobuf(super::protobuf::Seek),
    Csv { columns: Vec<String>, delimiter: u8 },
    None(&'static str),
}

impl std::fmt::Debug for FieldReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FieldReader")
    }
}

impl FieldReader {
    /// A reader of messages in `format`.
    #[must_use]
    pub fn new(format: &FormatSpec) -> Self {
        FieldReader(match format {
            FormatSpec::Json => Reader::Json,
            FormatSpec::Avro(registry) => Reader::Avro(super::avro::Seek::new(registry.clone())),
            FormatSpec::Protobuf(source) => {
                Reader::Protobuf(super::protobuf::Seek::new(source.clone()))
            }
            FormatSpec::Csv(o) => Reader::Csv {
                columns: o.columns.clone(),
                delimiter: o.delimiter,
            },
            FormatSpec::Raw { .. } => Reader::None("a raw message has no fields"),
        })
    }

    /// Whether `pointer` can name a value of this format at all (checked
    /// before any message is read): CSV needs `--csv-columns` naming it,
    /// raw messages have no fields.
    pub fn check(format: &FormatSpec, pointer: &FieldPointer) -> Result<(), String> {
        match format {
            FormatSpec::Raw { .. } => Err("--format raw has no fields".into()),
            FormatSpec::Csv(o) => csv_field(&o.columns, pointer).map(|_| ()),
            _ => Ok(()),
        }
    }

    /// Append the value at `pointer` in `payload` to `out` as text, or say
    /// why there is none (`out` may then hold part of it).
    pub fn read(
        &mut self,
        payload: Option<&[u8]>,
        pointer: &FieldPointer,
        out: &mut String,
    ) -> Result<(), String> {
        let Some(payload) = payload else {
            return Err(format!("a tombstone has no field {}", pointer.text));
        };
        let found = match &mut self.0 {
            Reader::Json => json(payload, pointer, out)?,
            Reader::Avro(seek) => seek.read(payload, pointer, out)?,
            Reader::Protobuf(seek) => seek.read(payload, pointer, out)?,
            Reader::Csv { columns, delimiter } => {
                let k = csv_field(columns, pointer)?;
                super::csv::field_text(payload, *delimiter, k, out)?
            }
            Reader::None(why) => return Err((*why).to_owned()),
        };
        if found {
            Ok(())
        } else {
            Err(format!(
                "the message has no field {} (or it is null)",
                pointer.text
            ))
        }
    }
}

/// Which field of a CSV record `pointer` names: `/NAME`, one of
/// `--csv-columns` (`columns`).
fn csv_field(columns: &[String], pointer: &FieldPointer) -> Result<usize, String> {
    match pointer.tokens() {
        [_] if columns.is_empty() => Err(format!(
            "{}: a CSV field is named by --csv-columns, which is not given",
            pointer.text
        )),
        [name] => (columns.iter().position(|c| c == name))
            .ok_or_else(|| format!("{}: --csv-columns names no field {name}", pointer.text)),
        _ => Err(format!(
            "{}: a CSV field is /NAME, one of --csv-columns",
            pointer.text
        )),
    }
}

/// Append `v` as a value's text.
pub(crate) fn put(out: &mut String, v: impl std::fmt::Display) {
    let _ = write!(out, "{v}");
}

/// [`FieldReader::read`] of a JSON document: whether the value was found.
fn json(payload: &[u8], pointer: &FieldPointer, out: &mut String) -> Result<bool, String> {
    let mut de = serde_json::Deserializer::from_slice(payload);
    let mut found = Found { out, found: false };
    let read = serde::de::DeserializeSeed::deserialize(
        Seek {
            path: &pointer.tokens,
            found: &mut found,
        },
        &mut de,
    );
    match read {
        // Found: the parse was ended there on purpose.
        _ if found.found => Ok(true),
        Ok(()) => Ok(false),
        Err(e) if e.is_data() => Err(format!("field {}: {e}", pointer.text)),
        Err(e) => Err(format!("the payload is not JSON ({e})")),
    }
}

/// Where [`Seek`] puts the value it finds.
struct Found<'o> {
    out: &'o mut String,
    found: bool,
}

impl Found<'_> {
    /// Keep `value` and end the parse: nothing after it is read.
    fn take<E: serde::de::Error>(&mut self, value: impl std::fmt::Display) -> Result<(), E> {
        put(self.out, value);
        self.found = true;
        Err(E::custom("found"))
    }
}

/// Finds the value at `path`, skipping everything else; once found, it
/// ends the parse ([`Found::take`]).
struct Seek<'p, 'f, 'o> {
    path: &'p [String],
    found: &'f mut Found<'o>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Seek<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Seek<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.leaf(v)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        self.leaf(v)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        self.leaf(v)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        self.leaf(v)
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.leaf(v)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(serde::de::Error::custom(
                "is an object, not a string or a number",
            ));
        };
        let found = self.found;
        let mut seen = false;
        while let Some(hit) = map.next_key_seed(KeyIs(first))? {
            if hit && !seen {
                seen = true;
                map.next_value_seed(Seek {
                    path: rest,
                    found: &mut *found,
                })?;
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(serde::de::Error::custom(
                "is an array, not a string or a number",
            ));
        };
        let index = first.parse::<usize>().ok();
        let found = self.found;
        let mut i = 0;
        loop {
            let more = if Some(i) == index {
                seq.next_element_seed(Seek {
                    path: rest,
                    found: &mut *found,
                })?
                .is_some()
            } else {
                seq.next_element::<serde::de::IgnoredAny>()?.is_some()
            };
            if !more {
                return Ok(());
            }
            i += 1;
        }
    }
}

impl Seek<'_, '_, '_> {
    /// A scalar: the value sought when the path ends here.
    fn leaf<E: serde::de::Error>(self, v: impl std::fmt::Display) -> Result<(), E> {
        if self.path.is_empty() {
            self.found.take(v)
        } else {
            Ok(())
        }
    }
}

/// Whether a key is the one sought, without copying it.
struct KeyIs<'k>(&'k str);

impl<'de> serde::de::DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(v == self.0)
    }
}

#[cfg(test)]
mod tests;
