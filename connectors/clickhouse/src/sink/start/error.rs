//! [`SinkError`]: why the sink could not start. Returned by start-up code
//! (topology, discovery, `SinkPool::prepare`) on the caller's thread; the
//! insert workers report failures as `AckEvent::Fatal` instead.

use crate::client::ClientError;
use crate::encode::SchemaError;

/// Why the sink could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// A sink setting is invalid.
    #[error("{0}")]
    Config(String),
    /// ClickHouse could not be reached or refused a start-up query.
    #[error("clickhouse at {url}: {source}")]
    Connect {
        /// URL.
        url: String,
        /// Cause.
        #[source]
        source: ClientError,
    },
    /// The table's schema cannot be encoded.
    #[error("table {table}: {source}")]
    Schema {
        /// Table.
        table: String,
        /// Cause.
        #[source]
        source: SchemaError,
    },
}

impl SinkError {
    /// Whether the user's configuration (not an outage) is at fault.
    #[must_use]
    pub fn is_config(&self) -> bool {
        match self {
            SinkError::Config(_) | SinkError::Schema { .. } => true,
            SinkError::Connect { source, .. } => source.is_config(),
        }
    }
}
