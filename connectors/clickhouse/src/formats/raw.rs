//! `--format raw`: the whole message value, byte for byte, into one String
//! column (`--raw-column`); metadata columns as usual, every other column
//! its DEFAULT or zero. One [`RawEncoder`] per driver thread.

use super::row::{payload, RowLayout, RowSlots};
use crate::encode::{RowError, SchemaError};
use crate::rowbinary::write_text;
use crate::types::ChType;
use spate_core::record::Message;

/// Writes each message's value into one String column.
#[derive(Debug)]
pub struct RawEncoder {
    layout: RowLayout,
    slots: RowSlots,
    column: usize,
}

impl RawEncoder {
    /// An encoder filling `column`, which must be a value column of type
    /// String (possibly Nullable or LowCardinality).
    pub(crate) fn new(layout: RowLayout, column: &str) -> Result<Self, SchemaError> {
        let bad = |reason: &str| SchemaError::Unsupported {
            column: column.to_owned(),
            reason: reason.to_owned(),
        };
        let i = layout
            .value_column(column)
            .ok_or_else(|| bad("--raw-column names no insertable column of the table"))?;
        let (inner, _) = crate::encode::encoder::strip(&layout.cols[i].ty);
        if !matches!(inner, ChType::String) {
            return Err(bad("--raw-column must be a String column"));
        }
        Ok(RawEncoder {
            slots: RowSlots::new(&layout),
            layout,
            column: i,
        })
    }

    /// Append one row for `msg` to `out` (unchanged on error).
    pub fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<(), RowError> {
        let value = payload(msg)?;
        self.slots.clear();
        let ty = &self.layout.cols[self.column].ty;
        self.slots
            .put(self.column, |buf| write_text(ty, value, value, buf))
            .map_err(|f| {
                RowError::new(
                    Some(&self.layout.cols[self.column].name),
                    &f.value,
                    f.reason,
                )
            })?;
        self.slots.finish(&self.layout, msg, out)
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
