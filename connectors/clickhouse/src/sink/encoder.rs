//! The encoder adapter: [`ChRowEncoder`] is a [`RowEncoder`] as the
//! runtime's [`RowEncode`], and [`EncoderFactory`] builds one per driver
//! thread. Each encoder is owned by one driver (lane) thread; it reads a
//! message and appends one row to that thread's batch buffer. The
//! pipeline's [`FormatSpec`] picks the encoder ([`FormatEncoder`]); JSON
//! is the default.

use crate::encode::{EncoderOptions, RowEncoder, RowError, SchemaError};
use crate::formats::{FormatEncoder, FormatSpec};
use crate::schema::Column;
use spate_core::record::Message;
use spate_core::sink::{EncodeFailure, RowEncode};

/// Builds [`ChRowEncoder`]s: one per driver thread.
#[derive(Clone, Debug)]
pub struct EncoderFactory {
    pub(crate) columns: Vec<Column>,
    pub(crate) options: EncoderOptions,
    pub(crate) shard_key: Vec<String>,
    pub(crate) format: FormatSpec,
}

impl EncoderFactory {
    /// A fresh encoder for the pipeline's format.
    pub fn build(&self) -> Result<FormatEncoder, SchemaError> {
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
        Ok(e)
    }
}

/// A [`RowEncoder`] as the runtime's [`RowEncode`].
pub struct ChRowEncoder(pub RowEncoder);

impl RowEncode for ChRowEncoder {
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<(), EncodeFailure> {
        self.0
            .encode(msg, out)
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
