//! Message formats other than JSON, each decoding straight into RowBinary
//! rows of the target table (no value tree in between):
//!
//! - `row`: the shared column layout and the per-message slots every
//!   format fills (metadata columns, DEFAULTs, zero values, shard key);
//! - `raw`: the whole value into one String column;
//! - `csv`: one RFC 4180 record per message;
//! - `avro`: Avro in the Confluent wire format, plans per writer schema;
//! - `protobuf`: Protobuf, Confluent-framed or with a descriptor file;
//! - `registry`: the Confluent schema registry client;
//! - `field`: one value of a message at a JSON pointer, whatever its
//!   format (`{field:...}` in a `--table` template).
//!
//! [`FormatSpec`] is what a pipeline asks for; [`FormatEncoder`] is the
//! encoder one driver thread owns, whatever the format (JSON stays the
//! [`crate::RowEncoder`] of `encode/`). Built per driver thread by
//! [`crate::EncoderFactory::build`]; touched only by that thread.

mod avro;
mod csv;
mod field;
mod protobuf;
mod raw;
mod registry;
mod row;

pub use avro::{AvroEncoder, AvroSchemaError, AvroText, AvroWrite, MAGIC};
pub use csv::{CsvEncoder, CsvOptions};
pub use field::{FieldPointer, FieldReader};
pub use protobuf::{compile_proto, ProtobufEncoder, ProtobufSource};
pub use raw::RawEncoder;
pub use registry::{
    RegisteredSchema, RegistryConfig, RegistryError, SchemaRegistry, SchemaType, REGISTRY_TLS_FLAGS,
};

use crate::encode::RowError;
use crate::sink::ChRowEncoder;
use spate_core::record::Message;
use spate_core::sink::{EncodeFailure, Encoded, RowEncode};
use std::sync::Arc;

/// The format of a pipeline's message values.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum FormatSpec {
    /// One JSON object per message (keys → columns).
    #[default]
    Json,
    /// The whole value into this String column.
    Raw {
        /// The column.
        column: String,
    },
    /// One CSV record per message.
    Csv(CsvOptions),
    /// Avro in the Confluent wire format, schemas from this registry.
    Avro(Arc<SchemaRegistry>),
    /// Protobuf, framed with a registry or plain with a descriptor.
    Protobuf(ProtobufSource),
}

impl FormatSpec {
    /// The format's name, as `--format` spells it.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            FormatSpec::Json => "json",
            FormatSpec::Raw { .. } => "raw",
            FormatSpec::Csv(_) => "csv",
            FormatSpec::Avro(_) => "avro",
            FormatSpec::Protobuf(_) => "protobuf",
        }
    }

    /// The schema registry this format reads schemas from, if any.
    #[must_use]
    pub fn registry(&self) -> Option<&Arc<SchemaRegistry>> {
        match self {
            FormatSpec::Avro(r) | FormatSpec::Protobuf(ProtobufSource::Registry(r)) => Some(r),
            _ => None,
        }
    }
}

/// One driver thread's encoder, for the pipeline's format.
pub enum FormatEncoder {
    /// JSON.
    Json(ChRowEncoder),
    /// Raw values.
    Raw(RawEncoder),
    /// CSV records.
    Csv(CsvEncoder),
    /// Confluent-framed Avro.
    Avro(AvroEncoder),
    /// Protobuf.
    Protobuf(ProtobufEncoder),
    /// A change stream (`--envelope`), its rows encoded as JSON.
    Change(Box<crate::envelope::ChangeEncoder>),
}

impl FormatEncoder {
    /// An encoder for `format` over the table's `columns` (what
    /// [`crate::EncoderFactory::build`] makes per driver thread).
    pub fn new(
        format: &FormatSpec,
        columns: &[crate::schema::Column],
        opts: crate::encode::EncoderOptions,
        shard_key: &[String],
    ) -> Result<Self, crate::encode::SchemaError> {
        build(format, columns, opts, shard_key)
    }
}

fn row((): ()) -> Encoded {
    Encoded::Row
}

fn failure(e: RowError) -> EncodeFailure {
    EncodeFailure {
        column: e.column,
        value: Some(e.value),
        reason: e.reason,
    }
}

impl RowEncode for FormatEncoder {
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        match self {
            FormatEncoder::Json(e) => e.encode(msg, out),
            FormatEncoder::Raw(e) => e.encode(msg, out).map_err(failure).map(row),
            FormatEncoder::Csv(e) => e.encode(msg, out).map_err(failure).map(row),
            FormatEncoder::Avro(e) => e.encode(msg, out).map_err(failure).map(row),
            FormatEncoder::Protobuf(e) => e.encode(msg, out).map_err(failure).map(row),
            FormatEncoder::Change(e) => e.encode(msg, out),
        }
    }

    fn takes_tombstones(&self) -> bool {
        match self {
            FormatEncoder::Change(e) => e.takes_tombstones(),
            _ => false,
        }
    }

    fn barrier(&mut self, msg: &Message<'_>) -> Result<(), String> {
        match self {
            FormatEncoder::Change(e) => e.barrier(msg),
            _ => Err("only a change stream acts at a barrier".into()),
        }
    }

    fn routes_by_key(&self) -> bool {
        match self {
            FormatEncoder::Json(e) => e.routes_by_key(),
            FormatEncoder::Raw(e) => e.has_shard_key(),
            FormatEncoder::Csv(e) => e.has_shard_key(),
            FormatEncoder::Avro(e) => e.has_shard_key(),
            FormatEncoder::Protobuf(e) => e.has_shard_key(),
            FormatEncoder::Change(e) => e.routes_by_key(),
        }
    }

    fn route_hash(&self, row: &[u8]) -> Option<u64> {
        match self {
            FormatEncoder::Json(e) => e.route_hash(row),
            FormatEncoder::Raw(e) => e.key_hash(row),
            FormatEncoder::Csv(e) => e.key_hash(row),
            FormatEncoder::Avro(e) => e.key_hash(row),
            FormatEncoder::Protobuf(e) => e.key_hash(row),
            FormatEncoder::Change(e) => e.route_hash(row),
        }
    }
}

#[cfg(test)]
mod tests;

/// The encoder for a non-JSON `format` over `columns`.
pub(crate) fn build(
    format: &FormatSpec,
    columns: &[crate::schema::Column],
    opts: crate::encode::EncoderOptions,
    shard_key: &[String],
) -> Result<FormatEncoder, crate::encode::SchemaError> {
    let layout = row::RowLayout::new(columns, opts, shard_key)?;
    Ok(match format {
        FormatSpec::Json => {
            let mut e = crate::RowEncoder::new(columns, opts)?;
            if !shard_key.is_empty() {
                e.set_shard_key(shard_key)?;
            }
            FormatEncoder::Json(ChRowEncoder(e))
        }
        FormatSpec::Raw { column } => FormatEncoder::Raw(RawEncoder::new(layout, column)?),
        FormatSpec::Csv(opts) => FormatEncoder::Csv(CsvEncoder::new(layout, opts)?),
        FormatSpec::Avro(registry) => {
            FormatEncoder::Avro(AvroEncoder::new(layout, registry.clone()))
        }
        FormatSpec::Protobuf(source) => {
            FormatEncoder::Protobuf(ProtobufEncoder::new(layout, source.clone()))
        }
    })
}
