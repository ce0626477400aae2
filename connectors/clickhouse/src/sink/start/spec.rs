//! What the user asks the sink for: the target [`TableRef`] and the
//! [`SinkSpec`] the binary builds from its flags. Plain data, read by
//! start-up code (`SinkPool::prepare`, [`super::discover::discover()`]) only.

use super::error::SinkError;
use super::topology::TopologySource;
use crate::client::ChClientOptions;
use crate::sink::insert::retry::RetryPolicy;
use crate::transport::{SharedSecret, TlsSettings};
use std::fmt;

/// `[db.]table`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableRef {
    /// Database (`default` when not given).
    pub db: String,
    /// Table.
    pub table: String,
}

impl TableRef {
    /// Parse `[DB.]TABLE`.
    pub fn parse(s: &str) -> Result<Self, SinkError> {
        let bad = || SinkError::Config(format!("--table `{s}` is not [DB.]TABLE"));
        let (db, table) = match s.split_once('.') {
            Some((db, table)) => (db, table),
            None => ("default", s),
        };
        if db.is_empty() || table.is_empty() || table.contains('.') {
            return Err(bad());
        }
        Ok(Self {
            db: db.to_owned(),
            table: table.to_owned(),
        })
    }
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.db, self.table)
    }
}

/// What the sink needs to start.
#[derive(Clone, Debug)]
pub struct SinkSpec {
    /// The servers: one, explicit shards, or a cluster to look up.
    pub topology: TopologySource,
    /// User, if not `default`.
    pub user: Option<String>,
    /// Password (prints as `***`), read by each request as it is sent:
    /// replacing it reaches every client of the sink.
    pub password: Option<SharedSecret>,
    /// CA, client certificate and key for `https://` URLs; the same for
    /// every shard, replica and the `--cluster` node. Reloading them
    /// reaches every new connection of the sink.
    pub tls: TlsSettings,
    /// Target table (the local table on every shard).
    pub table: TableRef,
    /// Reject unknown JSON keys.
    pub strict: bool,
    /// Route rows by `cityHash64` of these columns; empty: spread batches.
    pub shard_key: Vec<String>,
    /// `(column, JSON pointer)`: the column takes its value from the
    /// pointer instead of its own name (docs/rows.md).
    pub renames: Vec<(String, String)>,
    /// Client timeouts.
    pub client: ChClientOptions,
    /// Retry policy for retriable insert failures.
    pub retry: RetryPolicy,
    /// Concurrent inserts per shard.
    pub workers_per_shard: usize,
    /// Send batches as `Native` blocks where the table allows it (see
    /// [`crate::NativeLayout`]); otherwise, or when off, RowBinary.
    pub native: bool,
    /// `--delivery exactly-once`: check the table deduplicates, record an
    /// intent before each block (see `sink::intent`).
    pub exactly_once: bool,
    /// Insert through the server's asynchronous inserts, waiting for the
    /// write (`--async-insert`; at-least-once only).
    pub async_insert: bool,
    /// How many topics feed the table: exactly-once on a server without
    /// insert deduplication tokens needs `_topic` when more than one.
    pub topics: usize,
    /// Exactly-once: what a takeover needs of the table's deduplication
    /// window (partitions, session timeout, flush interval); the preflight
    /// warns when the window is smaller. `None`: not checked.
    pub takeover: Option<crate::sink::exactly_once::window::Takeover>,
    /// The format of the message values (JSON unless said).
    pub format: crate::formats::FormatSpec,
    /// The messages' envelope: rows, or changes to apply (`--envelope`).
    pub envelope: crate::envelope::EnvelopeSpec,
    /// The pipeline's name, for the `pipeline` label of its metrics
    /// (`spate_delivery_latency_seconds`).
    pub pipeline: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ref_parses_db_and_default() {
        assert_eq!(
            TableRef::parse("analytics.events").unwrap(),
            TableRef {
                db: "analytics".into(),
                table: "events".into()
            }
        );
        assert_eq!(TableRef::parse("events").unwrap().db, "default");
        assert!(TableRef::parse("a.b.c").is_err());
        assert!(TableRef::parse(".x").is_err());
    }
}
