//! `spate gen --format avro`: the demo events (the same values as their
//! JSON, see [`crate::events`]) as Avro in the Confluent wire format.
//!
//! The writer schema is derived from the event schema's ClickHouse columns
//! (integers → int/long, Float64 → double, strings → string, DateTime →
//! timestamp-millis, Array(String) → array of string, Nullable(T) →
//! ["null", T]) and registered under the subject before the first event.
//! Runs on `spate gen`'s main thread.

use crate::events::Schema;
use crate::exit::Exit;
use serde_json::Value;
use spate_clickhouse::formats::{AvroWrite, SchemaType};
use spate_clickhouse::{RegistryConfig, SchemaRegistry};

/// How one column is written (shared with [`super::protobuf`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Long,
    Double,
    Str,
    TimestampMillis,
    StrArray,
}

/// Converts JSON demo events to Confluent-framed Avro.
pub struct AvroEvents {
    id: u32,
    /// (column, kind, nullable) in schema order.
    fields: Vec<(&'static str, Kind, bool)>,
}

/// The kind of a ClickHouse column type, and whether it is nullable.
pub(super) fn kind_of(ty: &str) -> (Kind, bool) {
    let (ty, nullable) = match ty
        .strip_prefix("Nullable(")
        .or_else(|| ty.strip_prefix("LowCardinality(Nullable("))
    {
        Some(inner) => (inner.trim_end_matches(')'), true),
        None => (ty, false),
    };
    let ty = ty
        .strip_prefix("LowCardinality(")
        .map_or(ty, |t| t.trim_end_matches(')'));
    let kind = match ty {
        "DateTime" => Kind::TimestampMillis,
        "Float64" | "Float32" => Kind::Double,
        "Array(String)" => Kind::StrArray,
        t if t.starts_with("UInt") || t.starts_with("Int") => Kind::Long,
        _ => Kind::Str,
    };
    (kind, nullable)
}

/// The Avro schema (JSON text) of an event schema.
pub fn avro_schema(schema: Schema) -> String {
    let fields: Vec<String> = schema
        .columns()
        .iter()
        .map(|&(name, ty)| {
            let (kind, nullable) = kind_of(ty);
            let t = match kind {
                Kind::Long => r#""long""#,
                Kind::Double => r#""double""#,
                Kind::Str => r#""string""#,
                Kind::TimestampMillis => r#"{"type":"long","logicalType":"timestamp-millis"}"#,
                Kind::StrArray => r#"{"type":"array","items":"string"}"#,
            };
            if nullable {
                format!(r#"{{"name":"{name}","type":["null",{t}],"default":null}}"#)
            } else {
                format!(r#"{{"name":"{name}","type":{t}}}"#)
            }
        })
        .collect();
    format!(
        r#"{{"type":"record","name":"{}","namespace":"spate.demo","fields":[{}]}}"#,
        schema.name(),
        fields.join(",")
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Milliseconds since the epoch of a JSON date-time: unix seconds, or
/// `YYYY-MM-DD hh:mm:ss` (UTC).
pub(super) fn millis(v: &Value) -> Option<i64> {
    if let Some(s) = v.as_i64() {
        return s.checked_mul(1000);
    }
    let s = v.as_str()?;
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let days = days_from_civil(n(0..4)?, n(5..7)?, n(8..10)?);
    Some(((days * 24 + n(11..13)?) * 60 + n(14..16)?) * 60_000 + n(17..19)? * 1000)
}

/// Register `text` (a schema of type `ty`) under `subject` with the
/// registry the flags name; its id. Shared by the Avro and Protobuf
/// generators.
pub(super) fn register_schema(
    registry: &RegistryConfig,
    subject: &str,
    ty: SchemaType,
    text: &str,
) -> Result<u32, Exit> {
    let client = SchemaRegistry::new(registry).map_err(|e| Exit::usage(e.to_string()))?;
    let id = client.register(subject, ty, text).map_err(|e| {
        Exit::failed(format!(
            "registering the {ty:?} schema under {subject}: {e}"
        ))
    })?;
    tracing::info!(subject, schema_id = id, registry = client.url(), schema_type = ?ty, "schema registered");
    Ok(id)
}

/// Each column of `schema` with its wire kind and nullability.
pub(super) fn fields_of(schema: Schema) -> Vec<(&'static str, Kind, bool)> {
    schema
        .columns()
        .iter()
        .map(|&(name, ty)| {
            let (kind, nullable) = kind_of(ty);
            (name, kind, nullable)
        })
        .collect()
}

impl AvroEvents {
    /// Register the schema of `schema` under `subject` with the registry
    /// the flags name.
    pub fn register(
        schema: Schema,
        registry: &RegistryConfig,
        subject: &str,
    ) -> Result<Self, Exit> {
        let id = register_schema(registry, subject, SchemaType::Avro, &avro_schema(schema))?;
        Ok(Self::with_id(schema, id))
    }

    /// The converter for a schema already registered as `id`.
    pub fn with_id(schema: Schema, id: u32) -> Self {
        AvroEvents {
            id,
            fields: fields_of(schema),
        }
    }

    /// The event whose JSON is `json`, framed, into `out` (cleared first).
    pub fn encode(&self, json: &str, out: &mut Vec<u8>) -> Result<(), String> {
        let v: Value = serde_json::from_str(json).map_err(|e| format!("demo event: {e}"))?;
        out.clear();
        out.confluent_header(self.id);
        for &(name, kind, nullable) in &self.fields {
            let f = &v[name];
            if nullable {
                if f.is_null() {
                    out.avro_long(0);
                    continue;
                }
                out.avro_long(1);
            }
            let bad = || format!("demo event field {name}: {f}");
            match kind {
                Kind::Long => out.avro_long(f.as_i64().ok_or_else(bad)?),
                Kind::Double => out.avro_f64(f.as_f64().ok_or_else(bad)?),
                Kind::Str => out.avro_bytes(f.as_str().ok_or_else(bad)?.as_bytes()),
                Kind::TimestampMillis => out.avro_long(millis(f).ok_or_else(bad)?),
                Kind::StrArray => {
                    let items = f.as_array().ok_or_else(bad)?;
                    if !items.is_empty() {
                        out.avro_long(items.len() as i64);
                        for s in items {
                            out.avro_bytes(s.as_str().ok_or_else(bad)?.as_bytes());
                        }
                    }
                    out.avro_long(0)
                }
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_cover_every_column_and_events_encode() {
        for schema in [Schema::Small, Schema::Wide] {
            let text = avro_schema(schema);
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                v["fields"].as_array().unwrap().len(),
                schema.columns().len()
            );
            let events = AvroEvents::with_id(schema, 3);
            let mut json = String::new();
            let mut out = Vec::new();
            for i in 0..200 {
                json.clear();
                schema.write(i, &mut json);
                events.encode(&json, &mut out).unwrap();
                assert_eq!(out[..5], [0, 0, 0, 0, 3]);
                assert!(out.len() < json.len(), "Avro is smaller than JSON");
            }
        }
    }

    #[test]
    fn date_times_are_utc_millis() {
        assert_eq!(millis(&Value::from(1_700_000_000)), Some(1_700_000_000_000));
        let s = Value::from("2024-03-01 12:34:56");
        assert_eq!(millis(&s), Some(1_709_296_496_000));
        assert_eq!(millis(&Value::from("nope")), None);
    }
}
