//! [`SinkPool`]: connect, read the target schema ([`SinkPool::prepare`]),
//! spawn the insert workers on the shard queues the caller made
//! ([`PreparedSink::spawn`]); then hand the runtime its half.

use super::retry::RetryPolicy;
use super::topology::{Topology, TopologySource};
use super::worker::Worker;
use crate::client::{ChClient, ChClientOptions, ClientError};
use crate::encode::{EncoderOptions, NativeLayout, RowEncoder, RowError, SchemaError};
use crate::schema::Column;
use spate_core::metrics::Metrics;
use spate_core::pipeline::SinkRuntime;
use spate_core::record::Message;
use spate_core::sink::{
    AckSender, DrainReport, EncodeFailure, ProbeResult, RowEncode, ShardQueues, ShardReceiver,
};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// The servers: one, explicit shards, or a cluster to look up.
    pub topology: TopologySource,
    /// User, if not `default`.
    pub user: Option<String>,
    /// Password.
    pub password: Option<String>,
    /// Target table (the local table on every shard).
    pub table: TableRef,
    /// Reject unknown JSON keys.
    pub strict: bool,
    /// Route rows by `cityHash64` of these columns; empty: spread batches.
    pub shard_key: Vec<String>,
    /// Client timeouts.
    pub client: ChClientOptions,
    /// Retry policy for retriable insert failures.
    pub retry: RetryPolicy,
    /// Concurrent inserts per shard.
    pub workers_per_shard: usize,
    /// Send batches as `Native` blocks where the table allows it (see
    /// [`crate::NativeLayout`]); otherwise, or when off, RowBinary.
    pub native: bool,
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
            SinkError::Connect { source, .. } => matches!(
                source,
                ClientError::UnknownTable { .. } | ClientError::ColumnType { .. }
            ),
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
    /// Set: batches are transposed into Native blocks, sent as `format`.
    pub(crate) native: Option<NativeLayout>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) failed: AtomicBool,
    pub(crate) inserted_chunks: AtomicU64,
    pub(crate) inserted_rows: AtomicU64,
    pub(crate) abandoned_chunks: AtomicU64,
    pub(crate) abandoned_rows: AtomicU64,
}

/// One replica of a shard.
pub(crate) struct Replica {
    pub(crate) url: String,
    pub(crate) client: ChClient,
}

/// One shard: its replicas and which one inserts go to first.
pub(crate) struct Shard {
    /// 0-based queue index.
    pub(crate) index: usize,
    /// 1-based, like `shard_num` in `system.clusters`: metric label.
    pub(crate) label: String,
    pub(crate) replicas: Vec<Replica>,
    /// The replica the last successful insert went to; workers start there.
    pub(crate) preferred: AtomicUsize,
}

impl Shard {
    fn describe(&self) -> String {
        let urls: Vec<&str> = self.replicas.iter().map(|r| r.url.as_str()).collect();
        format!("shard {} ({})", self.label, urls.join(", "))
    }
}

/// The ClickHouse sink of one table, over every shard of its cluster.
pub struct SinkPool {
    columns: Vec<Column>,
    encoder_options: EncoderOptions,
    shard_key: Vec<String>,
    slots: Arc<[u16]>,
    queues: ShardQueues,
    shards: Arc<[Arc<Shard>]>,
    workers: Vec<JoinHandle<()>>,
    abandon: watch::Sender<bool>,
    shared: Arc<PoolShared>,
    io: tokio::runtime::Handle,
}

impl SinkPool {
    /// Resolve the shards, read the table's columns (checking every
    /// reachable replica has the same ones) and check they can be encoded
    /// with the shard key; no queues or workers yet. The caller creates
    /// the shard queues (several prepared sinks may share one set, one
    /// pipeline per table in one process) and hands each sink its range
    /// with [`PreparedSink::spawn`].
    pub async fn prepare(
        spec: &SinkSpec,
        metrics: Arc<Metrics>,
    ) -> Result<PreparedSink, SinkError> {
        let (seed, topology) = resolve(spec).await?;
        let columns = seed
            .client
            .describe(&spec.table.db, &spec.table.table)
            .await
            .map_err(|source| SinkError::Connect {
                url: seed.url.clone(),
                source,
            })?;
        let encoder_options = EncoderOptions {
            strict: spec.strict,
            with_defaults: false,
        };
        let schema_error = |source| SinkError::Schema {
            table: spec.table.to_string(),
            source,
        };
        let mut probe = RowEncoder::new(&columns, encoder_options).map_err(schema_error)?;
        if !spec.shard_key.is_empty() {
            probe.set_shard_key(&spec.shard_key).map_err(schema_error)?;
        }
        let table = spec.table.to_string();
        let shards: Arc<[Arc<Shard>]> = topology
            .shards
            .iter()
            .enumerate()
            .map(|(index, s)| {
                Arc::new(Shard {
                    index,
                    label: (index + 1).to_string(),
                    replicas: s
                        .replicas
                        .iter()
                        .map(|url| Replica {
                            url: url.clone(),
                            client: seed.client.sibling(url),
                        })
                        .collect(),
                    preferred: AtomicUsize::new(0),
                })
            })
            .collect();
        check_replicas(&shards, &seed, &spec.table, &columns, &metrics).await?;
        let native = if spec.native {
            probe.native_layout()
        } else {
            None
        };
        let format = if native.is_some() {
            "Native"
        } else {
            probe.format()
        };
        let settings = insert_settings(&seed.client);
        tracing::info!(
            server = seed.client.version(),
            table = %spec.table,
            columns = probe.insert_columns().len(),
            format,
            shards = shards.len(),
            replicas = shards.iter().map(|s| s.replicas.len()).sum::<usize>(),
            shard_key = %spec.shard_key.join(","),
            "clickhouse sink ready"
        );
        let shared = Arc::new(PoolShared {
            db: spec.table.db.clone(),
            table_name: spec.table.table.clone(),
            table,
            columns: probe.insert_columns().to_vec(),
            format,
            native,
            metrics,
            failed: AtomicBool::new(false),
            inserted_chunks: AtomicU64::new(0),
            inserted_rows: AtomicU64::new(0),
            abandoned_chunks: AtomicU64::new(0),
            abandoned_rows: AtomicU64::new(0),
        });
        Ok(PreparedSink {
            settings,
            columns,
            encoder_options,
            shard_key: spec.shard_key.clone(),
            slots: topology.slots(),
            shards,
            shared,
            workers_per_shard: spec.workers_per_shard.max(1),
            retry: spec.retry,
        })
    }

    /// What builds an encoder per driver thread; outlives the pool.
    #[must_use]
    pub fn encoder_factory(&self) -> EncoderFactory {
        EncoderFactory {
            columns: self.columns.clone(),
            options: self.encoder_options,
            shard_key: self.shard_key.clone(),
        }
    }

    /// The table's columns as read at start.
    #[must_use]
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// ClickHouse's `slot_to_shard` for this topology: a row with sharding
    /// hash `h` goes to shard `slots[h % slots.len()]`.
    #[must_use]
    pub fn slots(&self) -> Arc<[u16]> {
        self.slots.clone()
    }

    /// The runtime's half of several pools that share one set of shard
    /// queues (see [`prepare`](Self::prepare)): the drain hook drains them
    /// one after the other within the one budget, the probe asks them all.
    ///
    /// # Panics
    /// If `pools` is empty.
    #[must_use]
    pub fn combine(pools: Vec<SinkPool>) -> SinkRuntime {
        let mut runtimes: Vec<SinkRuntime> =
            pools.into_iter().map(SinkPool::into_runtime).collect();
        let first = runtimes.first_mut().expect("at least one sink pool");
        let queues = std::mem::take(&mut first.queues);
        let probes: Vec<_> = runtimes.iter().filter_map(|r| r.probe.clone()).collect();
        let drains: Vec<_> = runtimes.into_iter().map(|r| r.drain).collect();
        let drain = Box::new(move |budget: Duration| {
            let deadline = std::time::Instant::now() + budget;
            let mut total = DrainReport::default();
            for d in drains {
                let r = d(deadline.saturating_duration_since(std::time::Instant::now()));
                total.flushed_chunks += r.flushed_chunks;
                total.flushed_rows += r.flushed_rows;
                total.abandoned_chunks += r.abandoned_chunks;
                total.abandoned_rows += r.abandoned_rows;
                total.reason = total.reason.or(r.reason);
            }
            total
        });
        let probe = Arc::new(move || {
            let probes = probes.clone();
            Box::pin(async move {
                let mut errors = Vec::new();
                for p in &probes {
                    if let Err(e) = p().await {
                        errors.push(e);
                    }
                }
                if errors.is_empty() {
                    Ok(())
                } else {
                    Err(errors.join("; "))
                }
            })
                as std::pin::Pin<Box<dyn std::future::Future<Output = ProbeResult> + Send>>
        });
        SinkRuntime {
            queues,
            drain,
            probe: Some(probe),
        }
    }

    /// The runtime's half: queues, drain hook, probe.
    #[must_use]
    pub fn into_runtime(self) -> SinkRuntime {
        let SinkPool {
            queues,
            workers,
            abandon,
            shared,
            io,
            shards,
            ..
        } = self;
        let drain_shared = shared.clone();
        let drain =
            Box::new(move |budget: Duration| drain(&io, workers, &abandon, &drain_shared, budget));
        let probe_shared = shared.clone();
        let probe = Arc::new(move || {
            let shards = shards.clone();
            let shared = probe_shared.clone();
            Box::pin(async move { probe_shards(&shards, &shared).await })
                as std::pin::Pin<Box<dyn std::future::Future<Output = ProbeResult> + Send>>
        });
        SinkRuntime {
            queues: vec![queues],
            drain,
            probe: Some(probe),
        }
    }
}

/// A sink with its shards resolved and its schema checked, waiting for
/// its queues ([`SinkPool::prepare`]).
pub struct PreparedSink {
    settings: Vec<(String, String)>,
    columns: Vec<Column>,
    encoder_options: EncoderOptions,
    shard_key: Vec<String>,
    slots: Vec<u16>,
    shards: Arc<[Arc<Shard>]>,
    shared: Arc<PoolShared>,
    workers_per_shard: usize,
    retry: RetryPolicy,
}

impl PreparedSink {
    /// How many shard queues this sink needs.
    #[must_use]
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Spawn the workers of shards `offset..offset + shards()` of `queues`
    /// (their receivers are `receivers`, in order).
    #[must_use]
    pub fn spawn(
        self,
        queues: &ShardQueues,
        receivers: Vec<ShardReceiver>,
        offset: usize,
        io: &tokio::runtime::Handle,
        acks: &AckSender,
    ) -> SinkPool {
        let (abandon, abandon_rx) = watch::channel(false);
        let mut workers = Vec::new();
        for rx in receivers {
            let shard = self.shards[rx.shard() - offset].clone();
            let rx = Arc::new(Mutex::new(rx));
            for index in 0..self.workers_per_shard {
                let worker = Worker {
                    shard: shard.clone(),
                    index,
                    rx: rx.clone(),
                    acks: acks.clone(),
                    abandon: abandon_rx.clone(),
                    shared: self.shared.clone(),
                    retry: self.retry,
                    settings: self.settings.clone(),
                };
                workers.push(io.spawn(worker.run()));
            }
        }
        SinkPool {
            columns: self.columns,
            encoder_options: self.encoder_options,
            shard_key: self.shard_key,
            slots: self.slots.iter().map(|&s| s + offset as u16).collect(),
            queues: queues.clone(),
            shards: self.shards,
            workers,
            abandon,
            shared: self.shared,
            io: io.clone(),
        }
    }
}

/// Builds [`ChRowEncoder`]s: one per driver thread.
#[derive(Clone, Debug)]
pub struct EncoderFactory {
    columns: Vec<Column>,
    options: EncoderOptions,
    shard_key: Vec<String>,
}

impl EncoderFactory {
    /// A fresh encoder.
    pub fn build(&self) -> Result<ChRowEncoder, SchemaError> {
        let mut e = RowEncoder::new(&self.columns, self.options)?;
        if !self.shard_key.is_empty() {
            e.set_shard_key(&self.shard_key)?;
        }
        Ok(ChRowEncoder(e))
    }
}

/// The first node that answers, and the topology.
struct Seed {
    url: String,
    client: ChClient,
}

async fn resolve(spec: &SinkSpec) -> Result<(Seed, Topology), SinkError> {
    let connect = |url: &str| {
        let url = url.to_owned();
        async move {
            match ChClient::connect_with(
                &url,
                spec.user.as_deref(),
                spec.password.as_deref(),
                spec.client,
            )
            .await
            {
                Ok(client) => Ok(Seed { url, client }),
                Err(source) => Err(SinkError::Connect { url, source }),
            }
        }
    };
    match &spec.topology {
        TopologySource::Single(url) => Ok((connect(url).await?, Topology::single(url))),
        TopologySource::Cluster { url, name } => {
            let seed = connect(url).await?;
            let topology = Topology::from_cluster(&seed.client, url, name).await?;
            Ok((seed, topology))
        }
        TopologySource::Shards(topology) => {
            // Any node will do for the schema; the rest are checked after.
            let mut last = None;
            for url in topology.shards.iter().flat_map(|s| &s.replicas) {
                match connect(url).await {
                    Ok(seed) => return Ok((seed, topology.clone())),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| SinkError::Config("no shard given".into())))
        }
    }
}

/// Ask every replica for the table's columns at once. A replica that
/// answers with other columns, or without the table, is a configuration
/// error; one that does not answer is only logged (it may be down for now,
/// and inserts fail over or wait for it).
async fn check_replicas(
    shards: &[Arc<Shard>],
    seed: &Seed,
    table: &TableRef,
    columns: &[Column],
    metrics: &Metrics,
) -> Result<(), SinkError> {
    let mut set = tokio::task::JoinSet::new();
    for shard in shards {
        for (r, replica) in shard.replicas.iter().enumerate() {
            if replica.url == seed.url {
                set_up(metrics, &table.to_string(), shard, r, true);
                continue;
            }
            let (client, url, table, shard, seed_url) = (
                replica.client.clone(),
                replica.url.clone(),
                table.clone(),
                shard.clone(),
                seed.url.clone(),
            );
            set.spawn(async move {
                let got = client.describe(&table.db, &table.table).await;
                (shard, r, url, seed_url, got)
            });
        }
    }
    let table_name = table.to_string();
    while let Some(joined) = set.join_next().await {
        let Ok((shard, r, url, seed_url, got)) = joined else {
            continue;
        };
        match got {
            Ok(cols) if cols == columns => set_up(metrics, &table_name, &shard, r, true),
            Ok(_) => {
                return Err(SinkError::Config(format!(
                    "table {table_name} on {url} ({}) has other columns than on {seed_url}; every shard and replica must have the same schema",
                    shard.describe()
                )))
            }
            Err(source @ (ClientError::UnknownTable { .. } | ClientError::ColumnType { .. })) => {
                return Err(SinkError::Connect { url, source });
            }
            Err(e) => {
                set_up(metrics, &table_name, &shard, r, false);
                tracing::warn!(replica = %url, shard = %shard.label, error = %e, "ClickHouse replica not reachable at start; inserts go to the others until it is back");
            }
        }
    }
    Ok(())
}

pub(crate) fn set_up(metrics: &Metrics, table: &str, shard: &Shard, replica: usize, up: bool) {
    metrics
        .replica_up
        .with_label_values(&[table, &shard.label, &shard.replicas[replica].url])
        .set(i64::from(up));
}

/// Bound on one replica's answer to the readiness probe: well below the
/// probe interval, so an unreachable replica shows within two probes.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// `SELECT 1` on every replica at once. Ready when every shard has at
/// least one replica answering; otherwise the error names each shard that
/// has none, with each replica's failure.
async fn probe_shards(shards: &[Arc<Shard>], shared: &PoolShared) -> ProbeResult {
    let mut set = tokio::task::JoinSet::new();
    for shard in shards {
        for (r, replica) in shard.replicas.iter().enumerate() {
            let (client, shard) = (replica.client.clone(), shard.clone());
            set.spawn(async move {
                let ping = tokio::time::timeout(PROBE_TIMEOUT, client.ping()).await;
                let result = match ping {
                    Ok(answer) => answer.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
                };
                (shard, r, result)
            });
        }
    }
    let mut failures: Vec<Vec<Option<String>>> = shards
        .iter()
        .map(|s| vec![None; s.replicas.len()])
        .collect();
    let mut up = vec![false; shards.len()];
    while let Some(joined) = set.join_next().await {
        let Ok((shard, r, result)) = joined else {
            continue;
        };
        set_up(&shared.metrics, &shared.table, &shard, r, result.is_ok());
        match result {
            Ok(()) => up[shard.index] = true,
            Err(e) => failures[shard.index][r] = Some(e),
        }
    }
    let down: Vec<String> = shards
        .iter()
        .filter(|s| !up[s.index])
        .map(|s| {
            let why: Vec<String> = s
                .replicas
                .iter()
                .zip(&failures[s.index])
                .map(|(r, f)| format!("{}: {}", r.url, f.as_deref().unwrap_or("no answer")))
                .collect();
            format!("shard {} unreachable ({})", s.label, why.join("; "))
        })
        .collect();
    if down.is_empty() {
        Ok(())
    } else {
        Err(down.join("; "))
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
            if tokio::time::timeout(Duration::from_secs(5), grace)
                .await
                .is_err()
            {
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
