//! [`SinkPool`]: the lifecycle of one table's sink. [`SinkPool::prepare`]
//! resolves the servers (`start::discover`) and checks the schema;
//! [`PreparedSink::spawn`] starts the insert workers on the shard queues
//! the caller made; [`SinkPool::into_runtime`] / [`SinkPool::combine`]
//! hand the runtime its half: the queues, the drain hook (called on the
//! controller's thread at shutdown, blocking on the tokio runtime until
//! the workers finished or the budget ran out) and the readiness probe.

use super::exactly_once::{preflight, IntentLog};
use super::insert::events::{ReplicaUnreachableAtStart, ReplicaUp};
use super::insert::pace::Pace;
use super::insert::retry::RetryPolicy;
use super::insert::settings::{insert_settings, Delivery};
use super::insert::shard::{Replica, Shard};
use super::insert::target::InsertQuery;
use super::probe::probe_shards;
use super::schema_change::version::{build_version, LiveSchema};
use super::schema_change::watch::spawn_watch;
use super::schema_change::Encoders;
use super::shared::PoolShared;
use super::start::discover::{check_answers, discover_clients, Discovery};
use super::start::encoder::EncoderFactory;
use super::start::error::SinkError;
use super::start::spec::SinkSpec;
use super::start::topology::Topology;
use super::worker::{StreamBounds, Worker};
use crate::client::ChClient;
use crate::encode::EncoderOptions;
use crate::schema::Column;
use spate_core::metrics::Metrics;
use spate_core::pipeline::SinkRuntime;
use spate_core::sink::{
    AckSender, BlockPlans, DrainReport, ProbeResult, ShardQueues, ShardReceiver,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

/// The ClickHouse sink of one table, over every shard of its cluster.
pub struct SinkPool {
    encoders: Encoders,
    slots: Arc<[u16]>,
    queues: ShardQueues,
    shards: Arc<[Arc<Shard<ChClient>>]>,
    workers: Vec<JoinHandle<()>>,
    abandon: watch::Sender<bool>,
    shared: Arc<PoolShared>,
    io: tokio::runtime::Handle,
    intents: Option<Arc<IntentLog>>,
    stalls: Option<Stalls>,
}

/// The workers' stall table and how long a transient error may last
/// before `/readyz` turns 503.
#[derive(Clone)]
struct Stalls {
    table: Arc<spate_core::health::TransientStalls>,
    after: Duration,
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
        let (mut discovery, clients) = discover_clients(spec).await?;
        let seed_at = check_answers(&mut discovery, &spec.table)?;
        let (Some(seed), Ok(reference)) = (&clients[seed_at], &discovery.replicas[seed_at].answer)
        else {
            return Err(SinkError::Config("no replica answered".into()));
        };
        let seed_url = &discovery.replicas[seed_at].url;
        if spec.async_insert && !seed.features().async_insert {
            return Err(SinkError::Config(format!(
                "--async-insert needs ClickHouse 21.11 or later; {seed_url} runs {}",
                seed.version()
            )));
        }
        let shards_n = discovery.topology.shards.len();
        let envelope =
            super::start::change::change_plan(spec, (seed, seed_url), &reference.columns, shards_n)
                .await?;
        // A collapsing table's rows of one key must reach it in offset
        // order (the engine keeps the last row of a key, in insertion
        // order): one insert at a time per shard, in queue order.
        let in_order = envelope
            .as_ref()
            .is_some_and(crate::envelope::ChangePlan::collapses);
        let shards = connect_shards(&discovery.topology, seed);
        let truncator = envelope
            .as_ref()
            .filter(|p| p.truncate_by.is_some())
            .map(|p| {
                Arc::new(crate::envelope::Truncator::new(
                    tokio::runtime::Handle::current(),
                    shards.clone(),
                    (&spec.table.db, &spec.table.table),
                    p.replicated,
                ))
            });
        let mut factory = first_factory(spec, &reference.columns, envelope)?;
        factory.truncator = truncator;
        let mut template = insert_template(spec, seed);
        // Exactly-once settings go into the template, so every schema
        // version the table goes through inserts with them.
        let intents = match spec.exactly_once {
            true => Some(
                preflight::prepare(spec, &reference.columns, &shards, &mut template.settings)
                    .await?,
            ),
            false => None,
        };
        let schema_error = |source| SinkError::Schema {
            table: spec.table.to_string(),
            source,
        };
        let first = build_version(0, factory, seed.features(), spec.native, &template)
            .map_err(schema_error)?;
        let (query, native) = ((*first.query).clone(), first.native.clone());
        let factory = first.factory.clone();
        let live = LiveSchema::new(
            first,
            seed.features(),
            spec.native,
            spec.table.to_string(),
            &metrics,
        );
        tracing::info!(
            server = seed.version(),
            table = %spec.table,
            columns = query.columns.len(),
            format = query.format,
            shards = shards.len(),
            replicas = shards.iter().map(|s| s.replicas.len()).sum::<usize>(),
            shard_key = %spec.shard_key.join(","),
            "clickhouse sink ready"
        );
        let shared = PoolShared::new(
            &spec.pipeline,
            spec.table.to_string(),
            query,
            native,
            metrics,
        );
        let _ = shared.live.set(live.clone());
        let shared = Arc::new(shared);
        report_replicas(&discovery, &shards, &shared);
        Ok(PreparedSink {
            encoders: Encoders {
                factory,
                live: Some(live),
            },
            slots: discovery.topology.slots(),
            shards,
            shared,
            workers_per_shard: match in_order {
                true => 1,
                false => spec.workers_per_shard.max(1),
            },
            retry: spec.retry,
            intents,
            rejections: None,
            stalls: None,
            stream: None,
        })
    }

    /// Exactly-once: where the chains read the blocks earlier owners
    /// recorded (`None` at least-once).
    #[must_use]
    pub fn block_plans(&self) -> Option<Arc<dyn BlockPlans>> {
        self.intents.clone().map(|i| i as Arc<dyn BlockPlans>)
    }

    /// What builds an encoder per driver thread; outlives the pool.
    #[must_use]
    pub fn encoder_factory(&self) -> Encoders {
        self.encoders.clone()
    }

    /// The table's columns as read at start.
    #[must_use]
    pub fn columns(&self) -> &[Column] {
        &self.encoders.factory.columns
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
            stalls,
            ..
        } = self;
        let drain_shared = shared.clone();
        let drain =
            Box::new(move |budget: Duration| drain(&io, workers, &abandon, &drain_shared, budget));
        let probe_shared = shared.clone();
        let probe = Arc::new(move || {
            let shards = shards.clone();
            let shared = probe_shared.clone();
            let stalls = stalls.clone();
            Box::pin(async move {
                let probed = probe_shards(&shards, &shared).await;
                let stuck = stalls.map_or_else(Vec::new, |s| s.table.stuck(s.after));
                (shared.ch_metrics.stalls)
                    .with_label_values(&[&shared.table])
                    .set(stuck.len() as i64);
                match (probed, stuck.is_empty()) {
                    (probed, true) => probed,
                    (Ok(()), false) => Err(stuck.join("; ")),
                    (Err(e), false) => Err(format!("{e}; {}", stuck.join("; "))),
                }
            })
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
    encoders: Encoders,
    slots: Vec<u16>,
    shards: Arc<[Arc<Shard<ChClient>>]>,
    shared: Arc<PoolShared>,
    workers_per_shard: usize,
    retry: RetryPolicy,
    intents: Option<Arc<IntentLog>>,
    rejections: Option<Arc<spate_core::policy::Rejections>>,
    stalls: Option<Stalls>,
    stream: Option<StreamBounds>,
}

impl PreparedSink {
    /// Stream batches into long insert requests ended at `bounds`
    /// (`super::worker::stream`; at-least-once Native inserts only, the
    /// workers decide), instead of one request per batch.
    #[must_use]
    pub fn with_streaming(mut self, bounds: Option<StreamBounds>) -> Self {
        self.stream = bounds;
        self
    }

    /// Make the readiness probe fail, naming the shard and the last error,
    /// while an insert has been retrying a transient error for longer than
    /// `after` (`--stall-timeout`).
    #[must_use]
    pub fn with_stall_timeout(self, after: Duration) -> Self {
        let table = spate_core::health::TransientStalls::new(spate_core::clock::system());
        self.with_stalls(table, after)
    }

    /// [`with_stall_timeout`](Self::with_stall_timeout) on a stall table
    /// others report to as well (the pipeline's dead-letter destinations).
    #[must_use]
    pub fn with_stalls(
        mut self,
        table: Arc<spate_core::health::TransientStalls>,
        after: Duration,
    ) -> Self {
        self.stalls = Some(Stalls { table, after });
        self
    }

    /// Hand the rows the server rejects to `rejections` (the pipeline's
    /// error policy) instead of failing on the first.
    #[must_use]
    pub fn with_rejections(mut self, rejections: Arc<spate_core::policy::Rejections>) -> Self {
        self.rejections = Some(rejections);
        self
    }

    /// How many shard queues this sink needs.
    #[must_use]
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Insert workers per shard: each may hold a chunk and
    /// [`IN_FLIGHT_COPIES`](super::IN_FLIGHT_COPIES) more of its size.
    #[must_use]
    pub fn workers_per_shard(&self) -> usize {
        self.workers_per_shard
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
        if let Some(live) = self.shared.live.get() {
            let (db, table) = (
                self.shared.query.db.clone(),
                self.shared.query.table.clone(),
            );
            spawn_watch(live, self.shards.clone(), db, table, io);
        }
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
                    shared: self.shared.clone(),
                    intents: self.intents.clone(),
                    rejections: self.rejections.clone(),
                    depths: queues.depth_view(),
                    scratch: Arc::default(),
                    pace: Pace::new(
                        abandon_rx.clone(),
                        self.retry,
                        self.stalls.as_ref().map(|s| s.table.clone()),
                        (&self.shared.table, &shard.label, index),
                    ),
                    stream: self.stream,
                };
                workers.push(io.spawn(worker.run()));
            }
        }
        SinkPool {
            encoders: self.encoders,
            slots: self.slots.iter().map(|&s| s + offset as u16).collect(),
            queues: queues.clone(),
            shards: self.shards,
            workers,
            abandon,
            shared: self.shared,
            io: io.clone(),
            intents: self.intents,
            stalls: self.stalls,
        }
    }
}

fn drain(
    io: &tokio::runtime::Handle,
    workers: Vec<JoinHandle<()>>,
    abandon: &watch::Sender<bool>,
    shared: &PoolShared,
    budget: Duration,
) -> DrainReport {
    if let Some(live) = shared.live.get() {
        live.stop();
    }
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

/// One client per replica of every shard, siblings of the seed's (same
/// The first version's encoder factory for the table's `columns`; the
/// format must be able to fill them (a usage error at start if not).
fn first_factory(
    spec: &SinkSpec,
    columns: &[Column],
    envelope: Option<crate::envelope::ChangePlan>,
) -> Result<EncoderFactory, SinkError> {
    let factory = EncoderFactory {
        columns: columns.to_vec(),
        options: EncoderOptions {
            strict: spec.strict,
            with_defaults: false,
        },
        shard_key: spec.shard_key.clone(),
        renames: spec.renames.clone(),
        format: spec.format.clone(),
        envelope,
        truncator: None,
    };
    factory.build_format().map_err(|source| SinkError::Schema {
        table: spec.table.to_string(),
        source,
    })?;
    Ok(factory)
}

/// The statement every version's inserts start from: the table, and the
/// settings of the delivery on `seed`'s server.
fn insert_template(spec: &SinkSpec, seed: &ChClient) -> InsertQuery {
    let delivery = match (spec.exactly_once, spec.async_insert) {
        (true, _) => Delivery::ExactlyOnce,
        (false, true) => Delivery::AsyncInsert,
        (false, false) => Delivery::AtLeastOnce,
    };
    InsertQuery {
        db: spec.table.db.clone(),
        table: spec.table.table.clone(),
        columns: Vec::new(),
        format: "",
        settings: insert_settings(seed.features(), delivery),
    }
}

/// credentials, options and detected features).
fn connect_shards(topology: &Topology, seed: &ChClient) -> Arc<[Arc<Shard<ChClient>>]> {
    (topology.shards.iter().enumerate())
        .map(|(index, s)| {
            let replicas = (s.replicas.iter())
                .map(|url| Replica {
                    url: url.clone(),
                    client: seed.sibling(url),
                })
                .collect();
            Arc::new(Shard::new(index, replicas))
        })
        .collect()
}

/// Each replica's state at start: up, or unreachable (logged, not fatal:
/// inserts go to the others until it is back).
fn report_replicas(discovery: &Discovery, shards: &[Arc<Shard<ChClient>>], shared: &PoolShared) {
    for a in &discovery.replicas {
        let site = shared.site(&shards[a.shard].label);
        match &a.answer {
            Ok(_) => ReplicaUp {
                site,
                replica: &a.url,
                up: true,
            }
            .emit(),
            Err(error) => ReplicaUnreachableAtStart {
                site,
                replica: &a.url,
                error,
            }
            .emit(),
        }
    }
}
