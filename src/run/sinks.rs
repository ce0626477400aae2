//! The ClickHouse side of `spate run`: one sink per pipeline, prepared at
//! start (discovery, schema, with a bounded retry while ClickHouse is not
//! reachable yet), then spawned over one set of shard queues whose share
//! of `--max-buffered-bytes` is set by [`Budget`].
//!
//! Runs on the main thread, blocking on the I/O runtime for the start-up
//! requests; the spawned insert workers run on that runtime, receive
//! sealed batches from the shard queues and send acknowledgements on the
//! ack channel. What the drivers need to feed each sink is returned as a
//! [`Route`].

use crate::cli::{Delivery, RunArgs};
use crate::exit::Exit;
use crate::settings::{sink_spec, Process, Validated};
use spate_clickhouse::{
    ChClient, ChClientOptions, ChDeadLetters, ErrorClass, RetryPolicy, TableRef, Transport,
};
use spate_clickhouse::{
    Encoders, PreparedSink, SinkPool, SinkSpec, StreamBounds, IN_FLIGHT_COPIES,
};
use spate_core::health::TransientStalls;
use spate_core::metrics::Metrics;
use spate_core::pipeline::SinkRuntime;
use spate_core::policy::{AllOf, DeadLetterSink, Rejections};
use spate_core::sink::{AckSender, BatchLimits, RowSizing, ShardQueues, AUTO_MAX_ROWS};
use spate_kafka::{KafkaDeadLetters, SaslCredentials};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Per topic, why its table cannot be written.
pub(super) type Refused = std::collections::HashMap<String, String>;

/// How long start-up keeps trying to reach ClickHouse before giving up.
const STARTUP_RETRY: Duration = Duration::from_secs(30);

/// What the drivers' chains need to feed one pipeline's sink.
pub(super) struct Route {
    pub encoders: Encoders,
    pub slots: Arc<[u16]>,
    pub limits: BatchLimits,
    pub topics: Vec<String>,
    /// Exactly-once: the recorded blocks the chain replays.
    pub plans: Option<Arc<dyn spate_core::sink::BlockPlans>>,
    /// The pipeline's error policy (decode side; the sink has its share).
    pub rejections: Arc<Rejections>,
    /// Topics read whose table cannot be written, and why: their messages
    /// are bad messages under this route's policy (`crate::routing`).
    pub refused: Arc<std::collections::HashMap<String, String>>,
    /// The policy of those: the pipeline's, without its rejection limits.
    pub refused_rejections: Arc<Rejections>,
    /// When its messages name their table (a header or a field): the
    /// router shared by the tables of its configured pipeline, which one
    /// chain writes together.
    pub router: Option<Arc<crate::routing::message::RouterSpec>>,
}

/// Every pipeline's sink, spawned: the runtime's half, and one route per
/// pipeline (in pipeline order).
pub(super) struct Sinks {
    pub runtime: SinkRuntime,
    pub routes: Vec<Route>,
    /// The dead-letter producers' SASL credentials (a rotated
    /// `--kafka-password-file` reaches them).
    pub credentials: Vec<SaslCredentials>,
}

/// Prepare each pipeline's sink (start-up requests, with retry),
/// [`PREPARES_AT_ONCE`] at a time: hundreds of routed tables start in
/// about the time of a few round trips each, not one after the other.
/// The first failure ends the start, naming its pipeline.
pub(super) fn prepare_all(
    io: &tokio::runtime::Runtime,
    pipelines: &[(String, RunArgs)],
    validated: &[Validated],
    metrics: &Arc<Metrics>,
) -> Result<Vec<PreparedSink>, Exit> {
    let several = pipelines.len() > 1;
    let mut specs = Vec::with_capacity(pipelines.len());
    for ((name, a), v) in pipelines.iter().zip(validated) {
        probe_registry(&v.format).map_err(|e| e.in_pipeline(name, several))?;
        one_partition_for_truncates(a, v).map_err(|e| e.in_pipeline(name, several))?;
        let mut spec = sink_spec(a, v);
        if spec.exactly_once {
            spec.takeover = takeover(a, v);
        }
        spec.topics = topics_feeding(pipelines, validated, v);
        // A routed table's pipeline is named `<pipeline>/<table>`; the
        // table is a label of its own.
        spec.pipeline = (name.strip_suffix(&format!("/{}", a.table)))
            .unwrap_or(name)
            .to_owned();
        specs.push(spec);
    }
    // Exactly-once sinks share their database's state table, which a
    // start may create or migrate: one at a time.
    let at_once = if specs.iter().any(|s| s.exactly_once) {
        1
    } else {
        PREPARES_AT_ONCE
    };
    // One deadline for the lot, not one per sink from when it gets its
    // turn: with ClickHouse down, the start gives up after STARTUP_RETRY
    // however many tables there are.
    let deadline = Instant::now() + STARTUP_RETRY;
    let mut results: Vec<Option<PreparedSink>> = (0..specs.len()).map(|_| None).collect();
    io.block_on(async {
        let limit = Arc::new(tokio::sync::Semaphore::new(at_once));
        let mut set = tokio::task::JoinSet::new();
        for (i, spec) in specs.into_iter().enumerate() {
            let (limit, metrics) = (limit.clone(), metrics.clone());
            set.spawn(async move {
                let _permit = limit.acquire_owned().await;
                (i, prepare(&spec, &metrics, deadline).await)
            });
        }
        // The first failure ends the start: the other sinks are not waited
        // for (dropping the set aborts them).
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((i, Ok(prepared))) => results[i] = Some(prepared),
                Ok((i, Err(e))) => return Err(e.in_pipeline(&pipelines[i].0, several)),
                Err(e) => return Err(Exit::failed(format!("preparing a sink failed: {e}"))),
            }
        }
        Ok(())
    })?;
    Ok(results
        .into_iter()
        .map(|r| r.expect("every prepare joined"))
        .collect())
}

/// How many sinks [`prepare_all`] starts at once.
const PREPARES_AT_ONCE: usize = 16;

/// How many distinct topics feed `v`'s table, over every pipeline of the
/// process that writes the same table on the same servers: on a server
/// without deduplication tokens, exactly-once tells blocks of two topics
/// apart only by a `_topic` column (identical rows at the same partition
/// and offsets of two topics would encode to one block hash).
fn topics_feeding(
    pipelines: &[(String, RunArgs)],
    validated: &[Validated],
    v: &Validated,
) -> usize {
    let same = |w: &Validated| w.table == v.table && w.topology == v.topology;
    let topics: std::collections::BTreeSet<&String> = (pipelines.iter().zip(validated))
        .filter(|(_, w)| same(w))
        .flat_map(|((_, a), _)| a.topics.iter())
        .collect();
    topics.len()
}

/// `--on-truncate delete-all` deletes the rows of the changes before a
/// truncate once the rows of its partition are in; Debezium gives a
/// truncate no order against the changes in other partitions. Refused
/// (exit 2) unless the pipeline reads one topic of one partition; a
/// metadata failure refuses too (it cannot be checked).
fn one_partition_for_truncates(a: &RunArgs, v: &Validated) -> Result<(), Exit> {
    if a.on_truncate != Some(crate::cli::OnTruncate::DeleteAll) {
        return Ok(());
    }
    let partitions = spate_kafka::partition_count(&v.kafka, &a.topics)
        .map_err(|e| Exit::usage(format!("--on-truncate delete-all: the topics' partitions cannot be read to check there is one: {e}")))?;
    if a.topics.len() != 1 || partitions != 1 {
        let has = match partitions {
            0 => "no partition: it does not exist yet, or is a pattern".to_owned(),
            n => format!("{n} partitions"),
        };
        return Err(Exit::usage(format!(
            "--on-truncate delete-all needs one topic of one partition ({} has {has}): spate applies a truncate once the rows of its partition are in, and Debezium gives a truncate no order against the changes in other partitions",
            a.topics.join(", ")
        )));
    }
    Ok(())
}

/// Exactly-once: what the table's deduplication window must hold for a
/// killed member's partitions to be taken over (checked at start, a
/// warning when it falls short): the partitions of the pipeline's topics
/// now, the consumer's session timeout and the flush interval. `None`
/// (no check) when the metadata does not arrive.
fn takeover(a: &RunArgs, v: &Validated) -> Option<spate_clickhouse::Takeover> {
    let partitions = match spate_kafka::partition_count(&v.kafka, &a.topics) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "exactly-once: no partition count, so the deduplication window is not checked");
            return None;
        }
    };
    Some(spate_clickhouse::Takeover {
        partitions: partitions as u64,
        session_timeout: Duration::from_millis(v.kafka.session_timeout_ms().ok()?),
        flush_interval: a.flush_interval(),
    })
}

/// Ask the pipeline's schema registry (if any) once at start: a TLS
/// failure or refused credentials stop the start (they are not outages and
/// would make every message bad); an unreachable registry only warns, as
/// drivers wait out outages for the schemas they need.
fn probe_registry(format: &spate_clickhouse::FormatSpec) -> Result<(), Exit> {
    let Some(registry) = format.registry() else {
        return Ok(());
    };
    match registry.probe() {
        Ok(()) => Ok(()),
        Err(e) if e.is_transient() => {
            tracing::warn!(registry = registry.url(), error = %e, "schema registry not reachable at start; drivers wait for it when they need a schema");
            Ok(())
        }
        Err(e) => Err(Exit::usage(format!("{}: {e}", registry.url()))),
    }
}

/// Prepare one sink, retrying what is not a configuration error until
/// `deadline` with the sink's backoff.
async fn prepare(
    spec: &SinkSpec,
    metrics: &Arc<Metrics>,
    deadline: Instant,
) -> Result<PreparedSink, Exit> {
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match SinkPool::prepare(spec, metrics.clone()).await {
            Ok(prepared) => return Ok(prepared),
            Err(e) if e.is_config() => return Err(Exit::usage(e.to_string())),
            Err(e) if Instant::now() < deadline => {
                let delay = spec.retry.delay(attempt, rand::random::<f64>());
                tracing::warn!(table = %spec.table, error = %e, attempt, backoff_ms = delay.as_millis() as u64, "ClickHouse not reachable at start; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(e) => {
                return Err(Exit::failed(format!(
                    "{e} (gave up after {}s)",
                    STARTUP_RETRY.as_secs()
                )))
            }
        }
    }
}

/// Spawn the prepared sinks' workers over one set of shard queues (each
/// pipeline's shards numbered after the previous pipeline's), and derive
/// each pipeline's batch limits from the budget. Each prepared sink comes
/// with the topics its pipeline reads whose table cannot be written, and
/// why.
pub(super) fn spawn_all(
    prepared: Vec<(PreparedSink, Refused)>,
    pipelines: &[(String, RunArgs)],
    validated: &[Validated],
    process: &Process,
    io: &tokio::runtime::Runtime,
    acks: &AckSender,
    metrics: &Metrics,
) -> Result<Sinks, Exit> {
    let total_shards: usize = prepared.iter().map(|(p, _)| p.shards()).sum();
    let workers = prepared
        .iter()
        .map(|(p, _)| p.workers_per_shard())
        .max()
        .unwrap_or(1);
    let drivers = process.drivers.value;
    let streamed = pipelines.iter().any(|(_, a)| crate::settings::streams(a));
    let budget = match streamed {
        true => Budget::streamed(process.max_buffered_bytes, drivers, total_shards, workers),
        false => Budget::split(process.max_buffered_bytes, drivers, total_shards, workers),
    };
    let (queues, receivers) = ShardQueues::new(
        total_shards,
        budget.shard_high_water,
        budget.shard_high_water / 2,
    );
    // Each worker's room for its copies of a chunk (see `Budget`): set
    // aside whether it inserts or not, so it may keep its buffers in it.
    let queues = queues.with_worker_room(budget.worker_room);
    let mut receivers = receivers.into_iter();
    let mut offset = 0;
    let mut pools = Vec::with_capacity(prepared.len());
    let mut credentials = Vec::new();
    let mut routes = Vec::with_capacity(prepared.len());
    // Dead-letter tables made once each, for every pipeline naming them
    // (routed pipelines share their configured pipeline's).
    let mut letter_tables = LetterTables::default();
    for (((p, refused), (_, a)), v) in prepared.into_iter().zip(pipelines).zip(validated) {
        let n = p.shards();
        // The sink's workers and the dead-letter destinations report what
        // keeps failing here; /readyz names it after --stall-timeout.
        let stalls = TransientStalls::new(spate_core::clock::system());
        let letters = dead_letters(a, v, io, &stalls, &mut credentials, &mut letter_tables)?;
        let rejections = Rejections::with_dead_letters(
            a.error_policy(),
            metrics,
            spate_core::clock::system(),
            letters.clone(),
        );
        // Messages of a topic whose table cannot be written are bad
        // messages, to the same destination, but not counted toward the
        // rejection limits: a producer writing to a table outside
        // --allow-tables must not stop the tables inside it.
        let mut unlimited = a.error_policy();
        unlimited.limit.max_ratio = 1.0;
        unlimited.limit.max_consecutive = 0;
        let refused_rejections =
            Rejections::with_dead_letters(unlimited, metrics, spate_core::clock::system(), letters);
        let stream = request_bounds(a, &budget, p.workers_per_shard());
        let pool = p
            .with_rejections(rejections.clone())
            .with_stalls(stalls, a.stall_timeout)
            .with_streaming(stream)
            .spawn(
                &queues,
                receivers.by_ref().take(n).collect(),
                offset,
                io.handle(),
                acks,
            );
        offset += n;
        routes.push(Route {
            encoders: pool.encoder_factory(),
            slots: pool.slots(),
            limits: batch_limits(a, &budget, drivers, total_shards),
            topics: a.topics.clone(),
            plans: pool.block_plans(),
            rejections,
            refused: Arc::new(refused),
            refused_rejections,
            router: None,
        });
        pools.push(pool);
    }
    // The pools and the chains hold the queues from here on; the sink's
    // drain waits for the queues to close, which needs every sender gone.
    drop(queues);
    let runtime = if pools.len() == 1 {
        pools.remove(0).into_runtime()
    } else {
        SinkPool::combine(pools)
    };
    Ok(Sinks {
        runtime,
        routes,
        credentials,
    })
}

/// The dead-letter destinations of `--on-error dead-letter`: the topic,
/// the table (created when missing), or both.
/// The producer has the consumer's properties as validated: the `-X`
/// flags and the password of `--kafka-password-file`.
/// The dead-letter destinations made at this start, each once for every
/// pipeline naming it (routed pipelines share their configured
/// pipeline's): tables by table, server URL and user; topics by brokers,
/// topic and librdkafka properties (one producer each).
#[derive(Default)]
struct LetterTables {
    tables: HashMap<(String, String, Option<String>), ChDeadLetters>,
    topics: HashMap<LetterTopic, KafkaDeadLetters>,
}

/// Brokers, topic and the librdkafka properties of a dead-letter topic.
type LetterTopic = (String, String, Vec<(String, String)>);

fn dead_letters(
    a: &RunArgs,
    v: &Validated,
    io: &tokio::runtime::Runtime,
    stalls: &Arc<TransientStalls>,
    credentials: &mut Vec<SaslCredentials>,
    tables: &mut LetterTables,
) -> Result<Option<Arc<dyn DeadLetterSink>>, Exit> {
    let mut all: Vec<Arc<dyn DeadLetterSink>> = Vec::new();
    if let Some(topic) = &a.dead_letter_topic {
        let key = (a.brokers.clone(), topic.clone(), v.kafka.properties.clone());
        let producer = match tables.topics.get(&key) {
            Some(made) => made.sibling(),
            None => {
                let producer = KafkaDeadLetters::new(&a.brokers, topic, &v.kafka.properties)
                    .map_err(|e| Exit::usage(format!("--dead-letter-topic {topic}: {e}")))?;
                credentials.push(producer.credentials());
                tables.topics.insert(key, producer.sibling());
                producer
            }
        };
        all.push(Arc::new(producer.with_stalls(stalls.clone())));
    }
    if let Some(table) = &a.dead_letter_table {
        all.push(Arc::new(
            dead_letter_table(a, v, table, io, tables)?.with_stalls(stalls.clone()),
        ));
    }
    Ok(match all.len() {
        0 => None,
        1 => all.pop(),
        _ => Some(Arc::new(AllOf(all))),
    })
}

/// The dead-letter table on the pipeline's first server, logged in as
/// the sink is (the password from `--password` or `--password-file`);
/// made (`CREATE TABLE IF NOT EXISTS`) once per start for every pipeline
/// naming it.
fn dead_letter_table(
    a: &RunArgs,
    v: &Validated,
    table: &str,
    io: &tokio::runtime::Runtime,
    tables: &mut LetterTables,
) -> Result<ChDeadLetters, Exit> {
    let bad = |e: String| Exit::usage(format!("--dead-letter-table {table}: {e}"));
    let table_ref = TableRef::parse(table).map_err(|e| bad(e.to_string()))?;
    let url = a
        .dead_letter_clickhouse_url
        .clone()
        .or_else(|| a.clickhouse_url.clone())
        .or_else(|| {
            a.shards
                .first()
                .and_then(|s| s.split(',').next().map(str::to_owned))
        })
        .ok_or_else(|| bad("no ClickHouse server named".into()))?;
    let key = (table.to_owned(), url.clone(), a.user.clone());
    if let Some(made) = tables.tables.get(&key) {
        return Ok(made.sibling());
    }
    let opts = ChClientOptions {
        insert_timeout: a.insert_timeout,
        ..ChClientOptions::default()
    };
    // The sink's TLS settings and password: a rotation reaches this
    // client too.
    let transport = Transport::new(&v.tls).map_err(|e| bad(e.to_string()))?;
    let retry = RetryPolicy::default();
    // An outage at start (the server down, or frozen right after the
    // table's CREATE landed) is waited out as the sink's own start is:
    // the CREATE is `IF NOT EXISTS`, so sending it again is harmless. Only
    // what retrying cannot mend (refused, TLS, credentials) is exit 2. A
    // request that hangs takes the whole --insert-timeout: the window is
    // that much longer, so a hung CREATE is tried again at least once.
    let deadline = Instant::now() + STARTUP_RETRY + a.insert_timeout;
    let mut attempt = 0u32;
    let letters = loop {
        attempt += 1;
        let prepared = io.block_on(async {
            let client = ChClient::connect_via(
                &transport,
                &url,
                a.user.as_deref(),
                v.password.as_ref(),
                opts,
            )
            .await?;
            ChDeadLetters::prepare(client, table_ref.clone(), retry, io.handle().clone()).await
        });
        match prepared {
            Ok(letters) => break letters,
            Err(e) if e.is_config() || e.class() != ErrorClass::Retriable => {
                return Err(bad(e.to_string()))
            }
            Err(e) if Instant::now() < deadline => {
                let delay = retry.delay(attempt, rand::random::<f64>());
                tracing::warn!(%table, error = %e, attempt, backoff_ms = delay.as_millis() as u64, "dead-letter table's server not reachable at start; retrying");
                std::thread::sleep(delay);
            }
            Err(e) => {
                return Err(Exit::failed(format!(
                    "--dead-letter-table {table}: {e} (gave up after {}s)",
                    (STARTUP_RETRY + a.insert_timeout).as_secs()
                )))
            }
        }
    };
    tables.tables.insert(key, letters.sibling());
    Ok(letters)
}

/// Rows of an exactly-once block when `--batch-rows` is not given: its
/// blocks are cut per partition and replayed at recorded offsets, so they
/// keep a fixed size (the rate rule is for the shared batches).
const EXACTLY_ONCE_ROWS: u64 = 100_000;

/// `--batch-bytes` when not given, for fixed-size batches.
const DEFAULT_BATCH_BYTES: usize = 16 << 20;

/// Whether the pipeline's row limit follows the observed rate: no
/// `--batch-rows`, at-least-once (see [`batch_limits`]).
fn rate_sized(a: &RunArgs) -> bool {
    a.batch_rows.is_none() && a.delivery == Delivery::AtLeastOnce
}

/// The most rows of one of the pipeline's batches: `--batch-rows` if given,
/// else the rate rule's cap (see [`batch_limits`]).
pub(super) fn row_cap(a: &RunArgs) -> u64 {
    match a.batch_rows {
        Some(rows) => rows,
        None if rate_sized(a) => AUTO_MAX_ROWS,
        None => EXACTLY_ONCE_ROWS,
    }
}

/// One pipeline's batch limits: its flags, `--batch-bytes` lowered to the
/// budget's share of an open batch. Without `--batch-rows` (at least once),
/// the row limit follows the observed rate: about one insert per second
/// per shard from all `drivers` together, at most [`AUTO_MAX_ROWS`], and
/// the bytes (the budget's share that keeps inserts overlapping with
/// consumption, [`Budget::flowing_batch_bytes`]) and `--flush-interval`
/// still cut first.
fn batch_limits(a: &RunArgs, budget: &Budget, drivers: usize, total_shards: usize) -> BatchLimits {
    let rate_sized = rate_sized(a);
    // Rate-sized: up to the flowing share unless --batch-bytes says less
    // (2M-row A/B at 1 GiB, 2026-12-01: 64 MiB batches cost the server
    // 0.76 of the CPU per row of 100k-row ones).
    let (share, asked) = if rate_sized {
        (
            budget.flowing_batch_bytes,
            a.batch_bytes.unwrap_or(usize::MAX),
        )
    } else {
        (
            budget.batch_bytes,
            a.batch_bytes.unwrap_or(DEFAULT_BATCH_BYTES),
        )
    };
    let batch_bytes = asked.min(share);
    if batch_bytes < asked && a.batch_bytes.is_some() {
        tracing::info!(
            batch_bytes,
            "--batch-bytes lowered so {drivers} drivers' open batches for {total_shards} shards and the inserts in flight fit in --max-buffered-bytes"
        );
    }
    let sizing = if rate_sized {
        RowSizing::one_insert_per_second(drivers)
    } else {
        RowSizing::Fixed
    };
    BatchLimits {
        rows: row_cap(a),
        bytes: batch_bytes,
        interval: a.flush_interval(),
        jitter: 0.1,
        sizing,
    }
}

/// How `--max-buffered-bytes` is shared: a quarter for the drivers' open
/// batches (each driver has one open batch per shard), half for batches
/// queued or in flight to ClickHouse, split equally over the shards, and a
/// quarter for the Kafka client's prefetch (see `settings::kafka_config`).
///
/// Of a shard's half, each insert worker may hold a chunk it took from
/// the queue and [`IN_FLIGHT_COPIES`] more of its size (the wire body,
/// the transposition, the client's compressed slices); taking a chunk
/// makes them whatever the depth, as lanes can only be paused for what is
/// not read yet. So batches are cut small enough that every worker's
/// copies fit in a quarter of the budget, and the high-water mark (lanes
/// feeding the shard pause above it, resume below half of it) leaves that
/// room: the depth then never passes the shard's half, however many
/// partitions feed it.
///
/// That room is each worker's own (`ShardQueues::with_worker_room`): it
/// keeps its column builders and last body in it between inserts, and
/// copies that fit in it are not counted in the depth again (only those of
/// a chunk larger than the budget's batches are), so lanes pause on the
/// chunks queued and in flight alone. Counting them in the depth as well
/// paused lanes while two inserts ran, alternating consuming and
/// inserting: 5M events, 3 alternated rounds (2026-12-02), counting them
/// once gave 1.26x the rows/s, 0.92 of the server CPU per row, 1.15x
/// the peak RSS (204 MiB of the 320 MiB bound). An inserted chunk's
/// buffers wait for the next seal as a spare counted against the shard's
/// high water, dropped before they could pause a lane
/// (`spate_core::sink::ShardQueues`).
/// When the streamed insert requests of a pipeline end
/// (`spate_clickhouse::StreamBounds`), or `None` with `--insert-request 0`.
/// By default (`--insert-request-release`) a request goes on past its
/// byte bound, releasing its batches once sent, and a failed request is
/// read again from Kafka. With `--insert-request-release=false` its
/// batches stay in memory until the server confirmed it, up to the byte
/// bound, where it ends. Either way the shard's workers' held batches
/// come to at most half of its high-water mark together, so lanes keep
/// feeding the queue while requests fill.
fn request_bounds(a: &RunArgs, budget: &Budget, workers: usize) -> Option<StreamBounds> {
    if !crate::settings::streams(a) {
        return None;
    }
    let share = budget.request_bytes / workers.max(1);
    Some(StreamBounds {
        max_age: a.insert_request,
        max_rows: a.insert_request_rows,
        max_bytes: a.insert_request_bytes.unwrap_or(share).max(1),
        release: a.insert_request_release,
    })
}

/// Most bytes of a batch when inserts are streamed: the server makes one
/// part of a request whatever its blocks, so small batches cost it
/// nothing, and they leave the budget to the requests.
const STREAMED_BATCH_BYTES: usize = 2 << 20;

/// A streamed worker's room, in copies of its batches' size.
const STREAMED_ROOM: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Budget {
    /// Most bytes of one open batch.
    batch_bytes: usize,
    /// High-water mark of one shard's queue.
    shard_high_water: usize,
    /// Most bytes of a batch sized from the rate: every worker of a shard
    /// can have one in flight (the chunk and its [`IN_FLIGHT_COPIES`], as
    /// when the depth counted them all) with a tenth of the high water to
    /// spare, so lanes keep feeding the shard during inserts. The depth
    /// now counts the chunks only, but sizing for the chunk alone was
    /// measured and lost: 16 MiB batches instead of 9.6 MiB at the
    /// default budget gave 0.63 of the rows/s and 1.37 of the server CPU
    /// per row (5M events, 3 alternated rounds, 2026-12-02, bench/README
    /// "The levers left, measured"; likely because fewer, bigger chunks
    /// fit under the high water, so the lanes pause again). Larger
    /// batches fit the memory budget too, but then the inserts in flight
    /// hold the depth at the high water and the lanes stay paused until it
    /// falls below half of it, which alternates consuming and inserting
    /// instead of overlapping them (`make bench` 2026-12-01T1815Z and
    /// T1829Z: 16 MiB and 10.7 MiB batches ran at 0.6-0.8 of the rate of
    /// the 100k-row, ~10 MiB ones; a 2M-row A/B: 10.7 MiB at 0.58 of
    /// 10 MiB).
    flowing_batch_bytes: usize,
    /// Streamed inserts: the bytes of batches one shard's requests may
    /// hold until they are confirmed (0 otherwise).
    request_bytes: usize,
    /// Each insert worker's room for its copies of a batch
    /// (`ShardQueues::with_worker_room`), where it keeps its Native
    /// builders and last body between batches.
    worker_room: usize,
}

impl Budget {
    /// The split when inserts are streamed: batches of at most
    /// [`STREAMED_BATCH_BYTES`], and of the shard's half (after the
    /// workers' copies of a batch) one half for the batches queued (the
    /// high water) and one for those the open requests hold, which are
    /// out of the depth (`spate_clickhouse::StreamBounds`): lanes pause on
    /// what is queued, and requests grow to tens of MiB at the default
    /// budget.
    fn streamed(total: usize, drivers: usize, shards: usize, workers: usize) -> Self {
        let shards = shards.max(1);
        let open = total / 4 / drivers.max(1) / shards;
        let batch_bytes = open.clamp(64 << 10, STREAMED_BATCH_BYTES);
        // Room for STREAMED_ROOM batches' copies: a transposition's
        // builders grow past two copies of a small batch, and freed after
        // each one they were faulted in afresh for the next (0.094 minor
        // faults per row against 0.072 per batch, 2026-12-06).
        let worker_room = STREAMED_ROOM * IN_FLIGHT_COPIES * batch_bytes;
        let left = (total / 2 / shards).saturating_sub(workers.max(1) * worker_room);
        Self {
            batch_bytes,
            shard_high_water: (left / 2).max(1),
            flowing_batch_bytes: batch_bytes,
            request_bytes: (left / 2).max(1),
            worker_room,
        }
    }

    fn split(total: usize, drivers: usize, shards: usize, workers: usize) -> Self {
        let shards = shards.max(1);
        let copies = workers.max(1) * IN_FLIGHT_COPIES;
        let open = total / 4 / drivers.max(1) / shards;
        let in_flight = total / 4 / shards / copies;
        let batch_bytes = open.min(in_flight).max(64 << 10);
        let shard_high_water = (total / 2 / shards)
            .saturating_sub(copies * batch_bytes)
            .max(1);
        let per_insert = workers.max(1) * (1 + IN_FLIGHT_COPIES);
        Self {
            batch_bytes,
            shard_high_water,
            flowing_batch_bytes: (shard_high_water / 10 * 9 / per_insert)
                .min(batch_bytes)
                .max(64 << 10),
            request_bytes: 0,
            worker_room: IN_FLIGHT_COPIES * batch_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Budget, IN_FLIGHT_COPIES};

    #[test]
    fn budget_keeps_open_batches_within_a_quarter() {
        // Two drivers, one shard, two insert workers: the workers' copies
        // (2 x 2 x 16 MiB) cut the batches below the open-batch quarter's
        // 32 MiB, and the high water leaves them room in the queue half.
        let b = Budget::split(256 << 20, 2, 1, 2);
        assert_eq!(
            b,
            Budget {
                batch_bytes: 16 << 20,
                shard_high_water: 64 << 20,
                flowing_batch_bytes: (64 << 20) / 10 * 9 / 6,
                request_bytes: 0,
                worker_room: 32 << 20,
            }
        );
        let b = Budget::split(256 << 20, 64, 2, 2);
        assert_eq!(b.batch_bytes, 512 << 10);
        assert!(b.batch_bytes * 64 * 2 <= (256 << 20) / 4);
        assert_eq!(
            (b.shard_high_water + 2 * IN_FLIGHT_COPIES * b.batch_bytes) * 2,
            128 << 20,
            "the queue half is split over the shards"
        );
    }

    #[test]
    fn streamed_requests_and_the_queue_share_the_queue_half() {
        // Two drivers, one shard, one worker (streamed: one per shard):
        // 2 MiB batches, the worker's room for four batches' two copies,
        // and of the 112 MiB left half queued, half held by the request.
        let b = Budget::streamed(256 << 20, 2, 1, 1);
        assert_eq!(
            b,
            Budget {
                batch_bytes: 2 << 20,
                shard_high_water: 56 << 20,
                flowing_batch_bytes: 2 << 20,
                request_bytes: 56 << 20,
                worker_room: 16 << 20,
            }
        );
        for total in [16 << 20, 256 << 20, 4 << 30] {
            for (drivers, shards) in [(1, 1), (2, 1), (8, 4), (64, 2)] {
                let b = Budget::streamed(total, drivers, shards, 1);
                let queue_half =
                    b.shard_high_water + b.request_bytes + IN_FLIGHT_COPIES * b.batch_bytes;
                assert!(
                    queue_half <= total / 2 / shards,
                    "{total} {drivers} {shards}"
                );
                assert!(
                    b.batch_bytes <= (total / 4 / drivers / shards).max(64 << 10),
                    "open batches"
                );
                assert!(b.request_bytes > 0 && b.shard_high_water > 0);
            }
        }
    }

    #[test]
    fn queued_and_in_flight_copies_stay_within_the_queue_half() {
        for total in [16 << 20, 64 << 20, 256 << 20, 4 << 30] {
            for (drivers, shards, workers) in [(1, 1, 1), (2, 1, 2), (2, 1, 8), (8, 4, 4)] {
                let b = Budget::split(total, drivers, shards, workers);
                let in_flight = workers * IN_FLIGHT_COPIES * b.batch_bytes;
                assert!(
                    b.batch_bytes * drivers * shards <= total / 4,
                    "{total} {drivers}/{shards}/{workers}: open batches"
                );
                assert!(
                    in_flight <= total / 4 / shards,
                    "{total} {drivers}/{shards}/{workers}: workers' copies"
                );
                assert!(
                    b.shard_high_water + in_flight <= total / 2 / shards,
                    "{total} {drivers}/{shards}/{workers}: lanes pause before the queue half is full"
                );
                assert!(b.shard_high_water >= total / 4 / shards);
                let flowing = workers * (1 + IN_FLIGHT_COPIES) * b.flowing_batch_bytes;
                assert!(b.flowing_batch_bytes <= b.batch_bytes);
                assert!(
                    flowing <= b.shard_high_water / 10 * 9 || b.flowing_batch_bytes == 64 << 10,
                    "{total} {drivers}/{shards}/{workers}: every worker's rate-sized insert in flight stays below the high water"
                );
            }
        }
    }
}
