//! [`SinkPool`]: connect, read the target schema, build the shard queues
//! and spawn the insert workers; then hand the runtime its half.

use super::retry::RetryPolicy;
use super::worker::Worker;
use crate::client::{ChClient, ChClientOptions, ClientError};
use crate::encode::{EncoderOptions, RowEncoder, RowError, SchemaError};
use crate::schema::Column;
use spate_core::metrics::Metrics;
use spate_core::pipeline::SinkRuntime;
use spate_core::record::Message;
use spate_core::sink::{AckSender, DrainReport, EncodeFailure, ProbeResult, RowEncode, ShardQueues};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

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
    /// ClickHouse HTTP URL.
    pub url: String,
    /// User, if not `default`.
    pub user: Option<String>,
    /// Password.
    pub password: Option<String>,
    /// Target table.
    pub table: TableRef,
    /// Reject unknown JSON keys.
    pub strict: bool,
    /// Client timeouts.
    pub client: ChClientOptions,
    /// Retry policy for retriable insert failures.
    pub retry: RetryPolicy,
    /// Concurrent inserts per shard.
    pub workers_per_shard: usize,
    /// Queue depth (queued + in-flight bytes) at which lanes pause.
    pub high_water_bytes: usize,
    /// Queue depth at or below which lanes resume.
    pub low_water_bytes: usize,
}

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
            SinkError::Connect { source, .. } => matches!(source, ClientError::UnknownTable { .. } | ClientError::ColumnType { .. }),
        }
    }
}

/// State the workers share with the drain hook.
pub(crate) struct PoolShared {
    pub(crate) db: String,
    pub(crate) table_name: String,
    /// `db.table`, for logs and metric labels.
    pub(crate) table: String,
    pub(crate) columns: Vec<String>,
    pub(crate) format: &'static str,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) failed: AtomicBool,
    pub(crate) inserted_chunks: AtomicU64,
    pub(crate) inserted_rows: AtomicU64,
    pub(crate) abandoned_chunks: AtomicU64,
    pub(crate) abandoned_rows: AtomicU64,
}

/// The ClickHouse sink of one table.
pub struct SinkPool {
    client: ChClient,
    columns: Vec<Column>,
    encoder_options: EncoderOptions,
    queues: ShardQueues,
    workers: Vec<JoinHandle<()>>,
    abandon: watch::Sender<bool>,
    shared: Arc<PoolShared>,
    io: tokio::runtime::Handle,
    url: String,
}

impl SinkPool {
    /// Connect, read the table's columns, check they can be encoded, and
    /// spawn the workers on `io`. Acknowledgements go to `acks`.
    pub async fn start(
        spec: &SinkSpec,
        io: tokio::runtime::Handle,
        acks: AckSender,
        metrics: Arc<Metrics>,
    ) -> Result<SinkPool, SinkError> {
        let connect = |source| SinkError::Connect {
            url: spec.url.clone(),
            source,
        };
        let client = ChClient::connect_with(&spec.url, spec.user.as_deref(), spec.password.as_deref(), spec.client)
            .await
            .map_err(connect)?;
        let columns = client
            .describe(&spec.table.db, &spec.table.table)
            .await
            .map_err(connect)?;
        let encoder_options = EncoderOptions {
            strict: spec.strict,
            with_defaults: false,
        };
        let probe = RowEncoder::new(&columns, encoder_options).map_err(|source| SinkError::Schema {
            table: spec.table.to_string(),
            source,
        })?;
        tracing::info!(
            server = client.version(),
            table = %spec.table,
            columns = probe.insert_columns().len(),
            format = probe.format(),
            "clickhouse sink ready"
        );
        let (queues, receivers) = ShardQueues::new(1, spec.high_water_bytes, spec.low_water_bytes);
        let shared = Arc::new(PoolShared {
            db: spec.table.db.clone(),
            table_name: spec.table.table.clone(),
            table: spec.table.to_string(),
            columns: probe.insert_columns().to_vec(),
            format: probe.format(),
            metrics,
            failed: AtomicBool::new(false),
            inserted_chunks: AtomicU64::new(0),
            inserted_rows: AtomicU64::new(0),
            abandoned_chunks: AtomicU64::new(0),
            abandoned_rows: AtomicU64::new(0),
        });
        let settings = insert_settings(&client);
        let (abandon, abandon_rx) = watch::channel(false);
        let mut workers = Vec::new();
        for rx in receivers {
            let shard = rx.shard();
            let rx = Arc::new(Mutex::new(rx));
            for index in 0..spec.workers_per_shard.max(1) {
                let worker = Worker {
                    shard,
                    index,
                    client: client.clone(),
                    rx: rx.clone(),
                    acks: acks.clone(),
                    abandon: abandon_rx.clone(),
                    shared: shared.clone(),
                    retry: spec.retry,
                    settings: settings.clone(),
                };
                workers.push(io.spawn(worker.run()));
            }
        }
        Ok(SinkPool {
            client,
            columns,
            encoder_options,
            queues,
            workers,
            abandon,
            shared,
            io,
            url: spec.url.clone(),
        })
    }

    /// A fresh encoder for one driver thread.
    pub fn encoder(&self) -> Result<ChRowEncoder, SchemaError> {
        RowEncoder::new(&self.columns, self.encoder_options).map(ChRowEncoder)
    }

    /// The table's columns as read at start.
    #[must_use]
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The runtime's half: queues, drain hook, probe.
    #[must_use]
    pub fn into_runtime(self) -> SinkRuntime {
        let SinkPool {
            client,
            queues,
            workers,
            abandon,
            shared,
            io,
            url,
            ..
        } = self;
        let drain = Box::new(move |budget: Duration| drain(&io, workers, &abandon, &shared, budget));
        let probe = Arc::new(move || {
            let client = client.clone();
            let url = url.clone();
            Box::pin(async move {
                client
                    .ping()
                    .await
                    .map_err(|e| format!("shard 0 ({url}): {e}"))
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ProbeResult> + Send>>
        });
        SinkRuntime {
            queues: vec![queues],
            drain,
            probe: Some(probe),
        }
    }
}

/// Insert settings spate relies on, set explicitly: recent servers turn
/// `async_insert` on by default, and an asynchronous insert's success would
/// not mean the rows are durable.
fn insert_settings(client: &ChClient) -> Vec<(String, String)> {
    let mut s = Vec::new();
    if client.features().async_insert {
        s.push(("async_insert".to_string(), "0".to_string()));
    }
    s
}

fn drain(
    io: &tokio::runtime::Handle,
    workers: Vec<JoinHandle<()>>,
    abandon: &watch::Sender<bool>,
    shared: &PoolShared,
    budget: Duration,
) -> DrainReport {
    let chunks_before = shared.inserted_chunks.load(Ordering::Acquire);
    let rows_before = shared.inserted_rows.load(Ordering::Acquire);
    let mut workers = workers;
    let finished = io.block_on(async {
        let all = async {
            for w in &mut workers {
                let _ = w.await;
            }
        };
        tokio::time::timeout(budget, all).await.is_ok()
    });
    let mut reason = None;
    if !finished {
        reason = Some(format!("the sink did not drain within {budget:?}"));
        let _ = abandon.send(true);
        io.block_on(async {
            let grace = async {
                for w in &mut workers {
                    let _ = w.await;
                }
            };
            if tokio::time::timeout(Duration::from_secs(5), grace).await.is_err() {
                for w in &workers {
                    w.abort();
                }
            }
        });
    }
    DrainReport {
        flushed_chunks: shared.inserted_chunks.load(Ordering::Acquire) - chunks_before,
        flushed_rows: shared.inserted_rows.load(Ordering::Acquire) - rows_before,
        abandoned_chunks: shared.abandoned_chunks.load(Ordering::Acquire),
        abandoned_rows: shared.abandoned_rows.load(Ordering::Acquire),
        reason,
    }
}

/// A [`RowEncoder`] as the runtime's [`RowEncode`].
pub struct ChRowEncoder(pub RowEncoder);

impl RowEncode for ChRowEncoder {
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<(), EncodeFailure> {
        self.0.encode(msg, out).map_err(|e: RowError| EncodeFailure {
            column: e.column,
            value: Some(e.value),
            reason: e.reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ref_parses_db_and_default() {
        assert_eq!(
            TableRef::parse("analytics.events").unwrap(),
            TableRef { db: "analytics".into(), table: "events".into() }
        );
        assert_eq!(TableRef::parse("events").unwrap().db, "default");
        assert!(TableRef::parse("a.b.c").is_err());
        assert!(TableRef::parse(".x").is_err());
    }
}
