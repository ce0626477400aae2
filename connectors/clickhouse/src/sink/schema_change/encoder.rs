//! Encoders that follow the table: [`Encoders`] is what the binary builds
//! one encoder per driver thread from, and [`LiveRowEncoder`] is that
//! encoder: it loads the current schema version once per row (one atomic
//! load) and rebuilds itself when the version moved, so the chain seals
//! its open chunks and every chunk carries the one version its rows were
//! encoded for.

use super::version::LiveSchema;
use crate::encode::SchemaError;
use crate::formats::FormatSpec;
use crate::sink::start::encoder::EncoderFactory;
use spate_core::record::Message;
use spate_core::sink::{EncodeFailure, Encoded, RowEncode};
use std::sync::Arc;

/// Builds a [`LiveRowEncoder`] per driver thread: the first version's
/// factory, and the sink's versions when it follows the table's changes.
#[derive(Clone, Debug)]
pub struct Encoders {
    pub(crate) factory: EncoderFactory,
    /// Set by a running sink: encoders follow its schema versions.
    pub(crate) live: Option<Arc<LiveSchema>>,
}

impl Encoders {
    /// A fresh encoder (following the table's changes when the sink
    /// watches them).
    pub fn build(&self) -> Result<LiveRowEncoder, SchemaError> {
        LiveRowEncoder::new(self)
    }

    /// The pipeline's message format.
    #[must_use]
    pub fn format(&self) -> &FormatSpec {
        self.factory.format()
    }
}

/// An encoder that follows the [`LiveSchema`] (when its factory has one):
/// one per driver thread.
pub struct LiveRowEncoder {
    inner: crate::formats::FormatEncoder,
    live: Option<Arc<LiveSchema>>,
    version: u64,
}

impl LiveRowEncoder {
    pub(crate) fn new(encoders: &Encoders) -> Result<Self, SchemaError> {
        let Some(live) = &encoders.live else {
            return Ok(LiveRowEncoder {
                inner: encoders.factory.build_format()?,
                live: None,
                version: 0,
            });
        };
        let v = live.current();
        Ok(LiveRowEncoder {
            inner: v.factory.build_format()?,
            version: v.id,
            live: Some(live.clone()),
        })
    }
}

impl RowEncode for LiveRowEncoder {
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        self.inner.encode(msg, out)
    }

    fn takes_tombstones(&self) -> bool {
        self.inner.takes_tombstones()
    }

    fn barrier(&mut self, msg: &Message<'_>) -> Result<(), String> {
        self.inner.barrier(msg)
    }

    fn routes_by_key(&self) -> bool {
        self.inner.routes_by_key()
    }

    fn route_hash(&self, row: &[u8]) -> Option<u64> {
        self.inner.route_hash(row)
    }

    fn schema_pending(&self) -> bool {
        self.live
            .as_ref()
            .is_some_and(|l| l.version() != self.version)
    }

    fn schema_switch(&mut self) -> Option<u64> {
        let live = self.live.as_ref()?;
        if live.version() == self.version {
            return None;
        }
        let v = live.current();
        self.version = v.id;
        // A published version's factory was built once already: it builds.
        self.inner = v.factory.build_format().ok()?;
        Some(v.id)
    }
}
