//! `spate gen --format protobuf`: the demo events (the same values as their
//! JSON, see [`crate::events`]) as Protobuf in the Confluent wire format
//! (magic byte 0, the schema id, the message indexes `[0]` as the single
//! byte 0, then the message).
//!
//! The `.proto` is derived from the event schema's ClickHouse columns
//! (integers → int64, Float64 → double, strings → string, DateTime →
//! int64 unix seconds, Array(String) → repeated string, Nullable(T) → the
//! `google.protobuf` wrapper of T, absent for NULL) and registered under
//! the subject (`schemaType` PROTOBUF) before the first event. Runs on
//! `spate gen`'s main thread.

use super::avro::{fields_of, kind_of, millis, register_schema, Kind};
use crate::events::Schema;
use crate::exit::Exit;
use serde_json::Value;
use spate_clickhouse::formats::{AvroWrite, SchemaType};
use spate_clickhouse::RegistryConfig;

/// Converts JSON demo events to Confluent-framed Protobuf.
pub struct ProtobufEvents {
    id: u32,
    /// (column, kind, nullable) in field-number order (number = index + 1).
    fields: Vec<(&'static str, Kind, bool)>,
    /// A nested message's bytes, reused.
    inner: Vec<u8>,
}

/// The `.proto` text of an event schema: one message named like the
/// schema (`Small`, `Wide`), field numbers in column order from 1.
pub fn proto_schema(schema: Schema) -> String {
    let mut out = String::from(
        "syntax = \"proto3\";\npackage spate.demo;\nimport \"google/protobuf/wrappers.proto\";\n",
    );
    let name = schema.name();
    let title = name[..1].to_uppercase() + &name[1..];
    out.push_str(&format!("message {title} {{\n"));
    for (i, &(column, ty)) in schema.columns().iter().enumerate() {
        let (kind, nullable) = kind_of(ty);
        let t = match (kind, nullable) {
            (Kind::Long | Kind::TimestampMillis, false) => "int64",
            (Kind::Long | Kind::TimestampMillis, true) => "google.protobuf.Int64Value",
            (Kind::Double, false) => "double",
            (Kind::Double, true) => "google.protobuf.DoubleValue",
            (Kind::Str, false) => "string",
            (Kind::Str, true) => "google.protobuf.StringValue",
            (Kind::StrArray, _) => "repeated string",
        };
        out.push_str(&format!("  {t} {column} = {};\n", i + 1));
    }
    out.push_str("}\n");
    out
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Field `number` with wire type `wt` (0 varint, 1 fixed64, 2 length).
fn tag(out: &mut Vec<u8>, number: usize, wt: u64) {
    varint(out, (number as u64) << 3 | wt);
}

fn len_field(out: &mut Vec<u8>, number: usize, b: &[u8]) {
    tag(out, number, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// One scalar as field `number` of `out`.
fn scalar(out: &mut Vec<u8>, number: usize, kind: Kind, f: &Value) -> Option<()> {
    match kind {
        Kind::Long => {
            tag(out, number, 0);
            varint(out, f.as_i64()? as u64);
        }
        Kind::TimestampMillis => {
            tag(out, number, 0);
            varint(out, (millis(f)? / 1000) as u64);
        }
        Kind::Double => {
            tag(out, number, 1);
            out.extend_from_slice(&f.as_f64()?.to_le_bytes());
        }
        Kind::Str => len_field(out, number, f.as_str()?.as_bytes()),
        Kind::StrArray => {
            for s in f.as_array()? {
                len_field(out, number, s.as_str()?.as_bytes());
            }
        }
    }
    Some(())
}

impl ProtobufEvents {
    /// Register the `.proto` of `schema` under `subject` with the registry
    /// the flags name.
    pub fn register(
        schema: Schema,
        registry: &RegistryConfig,
        subject: &str,
    ) -> Result<Self, Exit> {
        let id = register_schema(
            registry,
            subject,
            SchemaType::Protobuf,
            &proto_schema(schema),
        )?;
        Ok(Self::with_id(schema, id))
    }

    /// The converter for a schema already registered as `id`.
    pub fn with_id(schema: Schema, id: u32) -> Self {
        let fields = fields_of(schema);
        ProtobufEvents {
            id,
            fields,
            inner: Vec::with_capacity(64),
        }
    }

    /// The event whose JSON is `json`, framed, into `out` (cleared first).
    pub fn encode(&mut self, json: &str, out: &mut Vec<u8>) -> Result<(), String> {
        let v: Value = serde_json::from_str(json).map_err(|e| format!("demo event: {e}"))?;
        out.clear();
        out.confluent_header(self.id);
        // The message indexes: [0], the first message of the file.
        out.push(0);
        for (i, &(name, kind, nullable)) in self.fields.iter().enumerate() {
            let f = &v[name];
            let bad = || format!("demo event field {name}: {f}");
            if !nullable {
                scalar(out, i + 1, kind, f).ok_or_else(bad)?;
            } else if !f.is_null() {
                // A wrapper message: the value as its field 1.
                self.inner.clear();
                scalar(&mut self.inner, 1, kind, f).ok_or_else(bad)?;
                len_field(out, i + 1, &self.inner);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spate_clickhouse::formats::compile_proto;

    #[test]
    fn schemas_compile_and_events_encode() {
        for schema in [Schema::Small, Schema::Wide] {
            let text = proto_schema(schema);
            compile_proto("demo.proto", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(
                text.lines().filter(|l| l.starts_with("  ")).count(),
                schema.columns().len(),
                "{text}"
            );
            let mut events = ProtobufEvents::with_id(schema, 7);
            let mut json = String::new();
            let mut out = Vec::new();
            for i in 0..200 {
                json.clear();
                schema.write(i, &mut json);
                events.encode(&json, &mut out).unwrap();
                assert_eq!(out[..6], [0, 0, 0, 0, 7, 0]);
                assert!(out.len() < json.len(), "Protobuf is smaller than JSON");
            }
        }
    }

    #[test]
    fn fields_are_written_in_the_wire_format() {
        let mut out = Vec::new();
        scalar(&mut out, 1, Kind::Long, &Value::from(300)).unwrap();
        assert_eq!(out, [0x08, 0xac, 0x02]);
        out.clear();
        scalar(&mut out, 2, Kind::Str, &Value::from("hi")).unwrap();
        assert_eq!(out, [0x12, 2, b'h', b'i']);
        out.clear();
        scalar(&mut out, 3, Kind::TimestampMillis, &Value::from(5)).unwrap();
        assert_eq!(out, [0x18, 5]);
        out.clear();
        scalar(&mut out, 1, Kind::Long, &Value::from(-1)).unwrap();
        assert_eq!(out.len(), 11, "a negative int64 is ten varint bytes");
        assert!(scalar(&mut out, 1, Kind::Double, &Value::from("x")).is_none());
    }
}
