//! The encoder adapter: [`ChRowEncoder`] is a [`RowEncoder`] as the
//! runtime's [`RowEncode`], and [`EncoderFactory`] builds the decoder of
//! one schema version (the sink's `Encoders` build one per driver thread). Each encoder is owned by one driver (lane) thread; it reads a
//! message and appends one row to that thread's batch buffer.
//! [`WirePlan::choose`] decides, once per schema, how rows reach the server
//! and how DEFAULTs are left to it. The pipeline's [`FormatSpec`] picks the
//! decoder ([`FormatEncoder`]); JSON is the default.

use crate::encode::{EncoderOptions, NativeLayout, RowEncoder, RowError, SchemaError};
use crate::formats::{FormatEncoder, FormatSpec};
use crate::schema::{Column, ServerFeatures};
use spate_core::record::Message;
use spate_core::sink::{EncodeFailure, Encoded, RowEncode};

/// Builds [`ChRowEncoder`]s: one per driver thread.
#[derive(Clone, Debug)]
pub struct EncoderFactory {
    pub(crate) columns: Vec<Column>,
    pub(crate) options: EncoderOptions,
    pub(crate) shard_key: Vec<String>,
    pub(crate) renames: Vec<(String, String)>,
    /// The format of the message values.
    pub(crate) format: FormatSpec,
    /// A change stream's plan (`--envelope`), resolved from the table.
    pub(crate) envelope: Option<crate::envelope::ChangePlan>,
    /// `--on-truncate delete-all`: what deletes at a truncate.
    pub(crate) truncator: Option<std::sync::Arc<crate::envelope::Truncator>>,
}

impl EncoderFactory {
    /// A fresh decoder for the pipeline's format, on this factory's
    /// columns (one schema version).
    pub(crate) fn build_format(&self) -> Result<FormatEncoder, SchemaError> {
        if let Some(plan) = &self.envelope {
            // The sink refuses an envelope over other formats at start.
            let avro = match &self.format {
                FormatSpec::Avro(registry) => Some(crate::formats::AvroText::new(registry.clone())),
                _ => None,
            };
            let rows = ChRowEncoder(self.row_encoder()?);
            let change =
                crate::envelope::ChangeEncoder::new(plan.clone(), &self.columns, rows, avro)
                    .with_truncator(self.truncator.clone());
            return Ok(FormatEncoder::Change(Box::new(change)));
        }
        if matches!(self.format, FormatSpec::Json) {
            return Ok(FormatEncoder::Json(ChRowEncoder(self.row_encoder()?)));
        }
        crate::formats::build(&self.format, &self.columns, self.options, &self.shard_key)
    }

    /// The pipeline's message format.
    #[must_use]
    pub fn format(&self) -> &FormatSpec {
        &self.format
    }

    /// The bare [`RowEncoder`] (start-up uses one to check the schema).
    pub(crate) fn row_encoder(&self) -> Result<RowEncoder, SchemaError> {
        let mut e = RowEncoder::new(&self.columns, self.options)?;
        if !self.shard_key.is_empty() {
            e.set_shard_key(&self.shard_key)?;
        }
        if !self.renames.is_empty() {
            e.set_renames(&self.renames)?;
        }
        Ok(e)
    }
}

/// How a sink's rows go over the wire, given the table and the server.
#[derive(Debug)]
pub(crate) struct WirePlan {
    /// The factory, with `with_defaults` set when DEFAULTs are left to the
    /// server.
    pub(crate) factory: EncoderFactory,
    /// Set: batches are transposed into Native blocks.
    pub(crate) native: Option<NativeLayout>,
    /// The `FORMAT` of the INSERT.
    pub(crate) format: &'static str,
    /// The insert columns.
    pub(crate) columns: Vec<String>,
}

impl WirePlan {
    /// The rules (docs/rows.md, "DEFAULTs"):
    /// - no column with a DEFAULT (or only shard key columns): RowBinary, or
    ///   Native when `native` is asked for and the types allow it;
    /// - DEFAULT columns on a server with `RowBinaryWithDefaults` (>= 23.7):
    ///   that format, a missing key flagged so the server computes it;
    /// - DEFAULT columns on an older server: Native blocks grouped by the
    ///   set of missing columns, each naming only the columns it has (even
    ///   when RowBinary was asked for: it is the one way to get the
    ///   server's DEFAULT there). If the types cannot be sent as Native, a
    ///   missing key gets its type's zero value, as before, with a warning.
    pub(crate) fn choose(
        mut factory: EncoderFactory,
        features: ServerFeatures,
        native: bool,
    ) -> Result<WirePlan, SchemaError> {
        factory.options.with_defaults = false;
        let plain = factory.row_encoder()?;
        let columns = plain.insert_columns().to_vec();
        let plan = |factory, native: Option<NativeLayout>, format| WirePlan {
            factory,
            format: if native.is_some() { "Native" } else { format },
            native,
            columns: columns.clone(),
        };
        if !plain.has_server_defaults() {
            let layout = native.then(|| plain.native_layout()).flatten();
            return Ok(plan(factory, layout, plain.format()));
        }
        factory.options.with_defaults = true;
        let flagged = factory.row_encoder()?;
        if features.row_binary_with_defaults {
            return Ok(plan(factory, None, flagged.format()));
        }
        let collapsing = factory
            .envelope
            .as_ref()
            .is_some_and(crate::envelope::ChangePlan::collapses);
        match flagged.native_layout() {
            // Rows missing different columns go in different blocks of one
            // insert, out of their order; a collapsing table keeps the
            // last row of a key, so its rows keep theirs.
            Some(_) if collapsing => {
                tracing::warn!(
                    "the table has DEFAULT columns and is a collapsing target: on this server \
                     (before 23.7) a missing key gets its type's zero value, so that rows keep \
                     their order within each insert"
                );
                factory.options.with_defaults = false;
                Ok(plan(factory, None, plain.format()))
            }
            Some(layout) => Ok(plan(factory, Some(layout), "Native")),
            None => {
                tracing::warn!(
                    "the table has DEFAULT columns but a type that cannot be sent as Native; \
                     on this server (before 23.7) a missing key gets its type's zero value"
                );
                factory.options.with_defaults = false;
                Ok(plan(factory, None, plain.format()))
            }
        }
    }
}

/// A [`RowEncoder`] as the runtime's [`RowEncode`].
pub struct ChRowEncoder(pub RowEncoder);

impl RowEncode for ChRowEncoder {
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        self.0
            .encode(msg, out)
            .map(|()| Encoded::Row)
            .map_err(|e: RowError| EncodeFailure {
                column: e.column,
                value: Some(e.value),
                reason: e.reason,
            })
    }

    fn routes_by_key(&self) -> bool {
        self.0.has_shard_key()
    }

    fn route_hash(&self, row: &[u8]) -> Option<u64> {
        self.0.key_hash(row)
    }
}
