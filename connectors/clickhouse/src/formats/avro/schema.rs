//! Avro schemas (the JSON text a registry serves) parsed into [`Schema`]:
//! primitives with their logical types, records, enums, fixed, arrays,
//! maps and unions. Named types live in one table and are referred to by
//! index, so recursive records are representable. Parsed once per schema
//! id, on the driver thread that first meets the id; plain data after.

use serde_json::{Map, Value};

/// A logical type on `int` or `long`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Temporal {
    /// `int` days since 1970-01-01.
    Date,
    /// `int` milliseconds after midnight.
    TimeMillis,
    /// `long` microseconds after midnight.
    TimeMicros,
    /// `long` ticks since the epoch of `10^-precision` seconds (3: millis,
    /// 6: micros); `local` for the `local-timestamp-*` types.
    Timestamp { precision: u8, local: bool },
}

/// `decimal` on `bytes` or `fixed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decimal {
    pub(crate) precision: u32,
    pub(crate) scale: u32,
}

/// One Avro type.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Avro {
    Null,
    Boolean,
    Int(Option<Temporal>),
    Long(Option<Temporal>),
    Float,
    Double,
    Bytes(Option<Decimal>),
    /// `string`; `true` with `logicalType: uuid`.
    String(bool),
    Array(Box<Avro>),
    Map(Box<Avro>),
    Union(Vec<Avro>),
    /// A record, enum or fixed: an index into [`Schema::named`].
    Named(usize),
}

/// A record field.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) ty: Avro,
}

/// A named type's definition.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Named {
    Record {
        name: String,
        fields: Vec<Field>,
    },
    Enum {
        name: String,
        symbols: Vec<String>,
    },
    Fixed {
        name: String,
        size: usize,
        decimal: Option<Decimal>,
        uuid: bool,
    },
}

impl Named {
    pub(crate) fn name(&self) -> &str {
        match self {
            Named::Record { name, .. } | Named::Enum { name, .. } | Named::Fixed { name, .. } => {
                name
            }
        }
    }
}

/// A parsed schema: the top type and every named type it defines.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Schema {
    pub(crate) top: Avro,
    pub(crate) named: Vec<Named>,
}

/// Why a schema text is not a usable Avro schema.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid Avro schema: {0}")]
pub struct AvroSchemaError(pub String);

fn bad<T>(what: impl Into<String>) -> Result<T, AvroSchemaError> {
    Err(AvroSchemaError(what.into()))
}

/// Nesting bound while parsing (deeper schemas are rejected).
const MAX_DEPTH: usize = 64;

impl Schema {
    /// Parse the JSON text of a schema.
    pub(crate) fn parse(text: &str) -> Result<Schema, AvroSchemaError> {
        let json: Value =
            serde_json::from_str(text).map_err(|e| AvroSchemaError(format!("not JSON: {e}")))?;
        let mut p = Parser {
            named: Vec::new(),
            names: Vec::new(),
        };
        let top = p.parse(&json, "", 0)?;
        Ok(Schema {
            top,
            named: p.named,
        })
    }
}

struct Parser {
    named: Vec<Named>,
    /// Full names, by index into `named`.
    names: Vec<String>,
}

fn full_name(name: &str, namespace: &str) -> String {
    if name.contains('.') || namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}.{name}")
    }
}

impl Parser {
    fn parse(&mut self, v: &Value, ns: &str, depth: usize) -> Result<Avro, AvroSchemaError> {
        if depth > MAX_DEPTH {
            return bad("nested too deeply");
        }
        match v {
            Value::String(s) => self.by_name(s, ns),
            Value::Array(branches) => {
                let b = branches
                    .iter()
                    .map(|b| self.parse(b, ns, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                if b.iter().any(|t| matches!(t, Avro::Union(_))) {
                    return bad("a union directly inside a union");
                }
                Ok(Avro::Union(b))
            }
            Value::Object(o) => self.parse_object(o, ns, depth),
            other => bad(format!("unexpected {other}")),
        }
    }

    fn by_name(&mut self, s: &str, ns: &str) -> Result<Avro, AvroSchemaError> {
        Ok(match s {
            "null" => Avro::Null,
            "boolean" => Avro::Boolean,
            "int" => Avro::Int(None),
            "long" => Avro::Long(None),
            "float" => Avro::Float,
            "double" => Avro::Double,
            "bytes" => Avro::Bytes(None),
            "string" => Avro::String(false),
            name => {
                let full = full_name(name, ns);
                let found = self
                    .names
                    .iter()
                    .position(|n| *n == full || *n == name)
                    .or_else(|| {
                        self.names
                            .iter()
                            .position(|n| n.rsplit('.').next() == Some(name))
                    });
                match found {
                    Some(i) => Avro::Named(i),
                    None => return bad(format!("unknown type `{name}`")),
                }
            }
        })
    }

    fn parse_object(
        &mut self,
        o: &Map<String, Value>,
        ns: &str,
        depth: usize,
    ) -> Result<Avro, AvroSchemaError> {
        let Some(ty) = o.get("type") else {
            return bad("an object without `type`");
        };
        let logical = o.get("logicalType").and_then(Value::as_str);
        let Value::String(ty) = ty else {
            // {"type": {...}} or {"type": [...]}: a wrapped type.
            return self.parse(ty, ns, depth + 1);
        };
        match ty.as_str() {
            "record" | "error" => self.parse_record(o, ns, depth),
            "enum" => {
                let (full, _) = self.declare(o, ns)?;
                let symbols = o
                    .get("symbols")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().map(|s| s.as_str().map(str::to_owned)).collect())
                    .ok_or_else(|| AvroSchemaError(format!("enum {full}: bad `symbols`")))?;
                Ok(self.define(
                    full,
                    Named::Enum {
                        name: String::new(),
                        symbols,
                    },
                ))
            }
            "fixed" => {
                let (full, _) = self.declare(o, ns)?;
                let size = o.get("size").and_then(Value::as_u64).ok_or_else(|| {
                    AvroSchemaError(format!("fixed {full}: `size` must be a count"))
                })? as usize;
                let decimal = (logical == Some("decimal")).then(|| decimal(o)).flatten();
                let uuid = logical == Some("uuid") && size == 16;
                let def = Named::Fixed {
                    name: String::new(),
                    size,
                    decimal,
                    uuid,
                };
                Ok(self.define(full, def))
            }
            "array" => {
                let items = o
                    .get("items")
                    .ok_or_else(|| AvroSchemaError("array without `items`".into()))?;
                Ok(Avro::Array(Box::new(self.parse(items, ns, depth + 1)?)))
            }
            "map" => {
                let values = o
                    .get("values")
                    .ok_or_else(|| AvroSchemaError("map without `values`".into()))?;
                Ok(Avro::Map(Box::new(self.parse(values, ns, depth + 1)?)))
            }
            primitive => {
                // Unknown or misplaced logical types fall back to the
                // underlying type, as the specification says.
                Ok(match (self.by_name(primitive, ns)?, logical) {
                    (Avro::Int(_), Some("date")) => Avro::Int(Some(Temporal::Date)),
                    (Avro::Int(_), Some("time-millis")) => Avro::Int(Some(Temporal::TimeMillis)),
                    (Avro::Long(_), Some("time-micros")) => Avro::Long(Some(Temporal::TimeMicros)),
                    (Avro::Long(_), Some(l)) => Avro::Long(timestamp(l)),
                    (Avro::Bytes(_), Some("decimal")) => Avro::Bytes(decimal(o)),
                    (Avro::String(_), Some("uuid")) => Avro::String(true),
                    (t, _) => t,
                })
            }
        }
    }

    fn parse_record(
        &mut self,
        o: &Map<String, Value>,
        ns: &str,
        depth: usize,
    ) -> Result<Avro, AvroSchemaError> {
        let (full, inner_ns) = self.declare(o, ns)?;
        // Declare first: fields may refer to the record itself.
        let placeholder = Named::Record {
            name: String::new(),
            fields: Vec::new(),
        };
        let Avro::Named(at) = self.define(full.clone(), placeholder) else {
            return bad("internal: record not defined");
        };
        let Some(list) = o.get("fields").and_then(Value::as_array) else {
            return bad(format!("record {full}: `fields` must be a list"));
        };
        let mut fields = Vec::with_capacity(list.len());
        for f in list {
            let name = f.get("name").and_then(Value::as_str);
            let (Some(name), Some(ty)) = (name, f.get("type")) else {
                return bad(format!("record {full}: a field needs `name` and `type`"));
            };
            let ty = self.parse(ty, &inner_ns, depth + 1)?;
            fields.push(Field {
                name: name.to_owned(),
                ty,
            });
        }
        self.named[at] = Named::Record { name: full, fields };
        Ok(Avro::Named(at))
    }

    /// The full name of a named type and the namespace its children use.
    fn declare(
        &self,
        o: &Map<String, Value>,
        ns: &str,
    ) -> Result<(String, String), AvroSchemaError> {
        let Some(name) = o.get("name").and_then(Value::as_str) else {
            return bad("a named type without `name`");
        };
        let ns = o.get("namespace").and_then(Value::as_str).unwrap_or(ns);
        let full = full_name(name, ns);
        if self.names.contains(&full) {
            return bad(format!("type {full} defined twice"));
        }
        let inner = full.rsplit_once('.').map_or("", |(n, _)| n).to_owned();
        Ok((full, inner))
    }

    fn define(&mut self, full: String, mut def: Named) -> Avro {
        match &mut def {
            Named::Record { name, .. } | Named::Enum { name, .. } | Named::Fixed { name, .. } => {
                name.clone_from(&full);
            }
        }
        self.names.push(full);
        self.named.push(def);
        Avro::Named(self.named.len() - 1)
    }
}

fn timestamp(logical: &str) -> Option<Temporal> {
    let (precision, local) = match logical {
        "timestamp-millis" => (3, false),
        "timestamp-micros" => (6, false),
        "timestamp-nanos" => (9, false),
        "local-timestamp-millis" => (3, true),
        "local-timestamp-micros" => (6, true),
        "local-timestamp-nanos" => (9, true),
        _ => return None,
    };
    Some(Temporal::Timestamp { precision, local })
}

fn decimal(o: &Map<String, Value>) -> Option<Decimal> {
    let precision = o.get("precision")?.as_u64()?;
    let scale = o.get("scale").map_or(Some(0), Value::as_u64)?;
    (precision >= 1 && scale <= precision).then_some(Decimal {
        precision: u32::try_from(precision).ok()?,
        scale: u32::try_from(scale).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_records_logical_types_and_references() {
        let s = Schema::parse(
            r#"{"type":"record","name":"E","namespace":"ns","fields":[
                {"name":"id","type":"long"},
                {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
                {"name":"d","type":{"type":"int","logicalType":"date"}},
                {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
                {"name":"u","type":{"type":"string","logicalType":"uuid"}},
                {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]}},
                {"name":"again","type":["null","Kind"]},
                {"name":"next","type":["null","E"]},
                {"name":"odd","type":{"type":"int","logicalType":"nonsense"}},
                {"name":"m","type":{"type":"map","values":{"type":"array","items":"double"}}}
            ]}"#,
        )
        .unwrap();
        let Avro::Named(top) = s.top else { panic!() };
        let Named::Record { name, fields } = &s.named[top] else {
            panic!()
        };
        assert_eq!(name, "ns.E");
        let tys: Vec<&Avro> = fields.iter().map(|f| &f.ty).collect();
        assert_eq!(*tys[0], Avro::Long(None));
        assert_eq!(
            *tys[1],
            Avro::Long(Some(Temporal::Timestamp {
                precision: 3,
                local: false
            }))
        );
        assert_eq!(*tys[2], Avro::Int(Some(Temporal::Date)));
        assert_eq!(
            *tys[3],
            Avro::Bytes(Some(Decimal {
                precision: 10,
                scale: 2
            }))
        );
        assert_eq!(*tys[4], Avro::String(true));
        let Avro::Named(kind) = tys[5] else { panic!() };
        assert_eq!(*tys[6], Avro::Union(vec![Avro::Null, Avro::Named(*kind)]));
        assert_eq!(*tys[7], Avro::Union(vec![Avro::Null, Avro::Named(top)]));
        assert_eq!(*tys[8], Avro::Int(None));
        assert_eq!(
            *tys[9],
            Avro::Map(Box::new(Avro::Array(Box::new(Avro::Double))))
        );
    }

    #[test]
    fn rejects_broken_schemas() {
        for bad in [
            "nope",
            r#""Unknown""#,
            r#"{"type":"record","name":"R"}"#,
            r#"{"type":"record","name":"R","fields":[{"name":"a"}]}"#,
            r#"{"type":"enum","name":"E"}"#,
            r#"{"type":"fixed","name":"F"}"#,
            r#"[["null"]]"#,
            r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"enum","name":"R","symbols":[]}}]}"#,
        ] {
            assert!(Schema::parse(bad).is_err(), "{bad}");
        }
    }
}
