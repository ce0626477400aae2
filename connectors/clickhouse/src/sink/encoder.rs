//! The encoder adapter: [`ChRowEncoder`] is a [`RowEncoder`] as the
//! runtime's [`RowEncode`], and [`EncoderFactory`] builds one per driver
//! thread. Each encoder is owned by one driver (lane) thread; it reads a
//! message and appends one row to that thread's batch buffer.

use crate::encode::{EncoderOptions, RowEncoder, RowError, SchemaError};
use crate::schema::Column;
use spate_core::record::Message;
use spate_core::sink::{EncodeFailure, RowEncode};

/// Builds [`ChRowEncoder`]s: one per driver thread.
#[derive(Clone, Debug)]
pub struct EncoderFactory {
    pub(crate) columns: Vec<Column>,
    pub(crate) options: EncoderOptions,
    pub(crate) shard_key: Vec<String>,
}

impl EncoderFactory {
    /// A fresh encoder.
    pub fn build(&self) -> Result<ChRowEncoder, SchemaError> {
        Ok(ChRowEncoder(self.row_encoder()?))
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
