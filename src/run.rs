//! `spate run`: process assembly. Builds the Kafka source and the
//! ClickHouse sink from the connectors, hands them to a `Pipeline`, runs
//! the `PipelineRuntime` until SIGTERM/SIGINT (or the end of input with
//! `--until-end`), and maps the `ExitReport` to the exit code.

use crate::cli::{Compression, InsertFormat, RunArgs};
use crate::Exit;
use spate_clickhouse::{
    ChClientOptions, PreparedSink, RetryPolicy, SinkPool, SinkSpec, TableRef, Topology,
    TopologySource,
};
use spate_core::metrics::Metrics;
use spate_core::pipeline::{
    Chain, ChainCtx, ChainFactory, EncodeChain, ExitState, Pipeline, PipelineRuntime,
    RuntimeOptions, SinkOptions, TopicChains,
};
use spate_core::sink::{ack_channel, BatchLimits, ShardQueues};
use spate_kafka::{KafkaSource, KafkaSourceConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long start-up keeps trying to reach ClickHouse before giving up.
const STARTUP_RETRY: Duration = Duration::from_secs(30);

/// What `run` and `check` derive from the flags before contacting
/// anything; every mistake is a usage error (exit 2).
pub(crate) struct Validated {
    pub table: TableRef,
    pub kafka: KafkaSourceConfig,
    pub topology: TopologySource,
}

pub(crate) fn validate(args: &RunArgs) -> Result<Validated, Exit> {
    let table = TableRef::parse(&args.table).map_err(|e| Exit::usage(e.to_string()))?;
    let kafka = kafka_config(args)?;
    kafka.validate().map_err(|e| Exit::usage(e.to_string()))?;
    if args.batch_rows == 0 {
        return Err(Exit::usage("--batch-rows must be at least 1"));
    }
    let max_poll = kafka
        .max_poll_interval_ms()
        .map_err(|e| Exit::usage(e.to_string()))?;
    if args.insert_timeout.as_millis() >= u128::from(max_poll) {
        return Err(Exit::usage(format!(
            "--insert-timeout ({} ms) must be below max.poll.interval.ms ({max_poll} ms)",
            args.insert_timeout.as_millis()
        )));
    }
    if args.drivers == Some(0) {
        return Err(Exit::usage("--drivers must be at least 1"));
    }
    if !args.shard_weights.is_empty() && args.shards.is_empty() {
        return Err(Exit::usage(
            "--shard-weights needs --shard flags (with --cluster, weights come from system.clusters)",
        ));
    }
    let topology = match (&args.clickhouse_url, &args.cluster) {
        (Some(url), Some(name)) => TopologySource::Cluster {
            url: url.clone(),
            name: name.clone(),
        },
        (Some(url), None) => TopologySource::Single(url.clone()),
        (None, _) => TopologySource::Shards(
            Topology::from_flags(&args.shards, &args.shard_weights)
                .map_err(|e| Exit::usage(e.to_string()))?,
        ),
    };
    Ok(Validated {
        table,
        kafka,
        topology,
    })
}

/// Run one or more pipelines (from `--config`, or the one the flags
/// describe) in one process: one consumer group for all their topics,
/// shared drivers and memory budget, each pipeline's own table, shards and
/// batching. Process-wide settings come from the first pipeline's
/// arguments (they are the same in all of them).
pub fn run(pipelines: Vec<(String, RunArgs)>) -> Result<(), Exit> {
    let several = pipelines.len() > 1;
    let args = &pipelines
        .first()
        .ok_or_else(|| Exit::usage("no pipeline configured"))?
        .1;
    let mut validated = Vec::with_capacity(pipelines.len());
    let mut owner: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for (name, a) in &pipelines {
        validated.push(validate(a).map_err(|e| e.in_pipeline(name, several))?);
        for t in &a.topics {
            if let Some(other) = owner.insert(t, name) {
                return Err(Exit::usage(format!(
                    "topic {t} is in pipelines {other} and {name}; a topic feeds one pipeline"
                )));
            }
        }
    }
    if args.print_config {
        print!("{}", effective_config(&pipelines));
        return Ok(());
    }
    let mut kafka = validated[0].kafka.clone();
    kafka.topics = pipelines
        .iter()
        .flat_map(|(_, a)| a.topics.clone())
        .collect();
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("spate-io")
        .enable_all()
        .build()
        .map_err(|e| Exit::failed(format!("starting the I/O runtime: {e}")))?;
    let metrics = Arc::new(Metrics::new());
    let acks = ack_channel();
    let drivers = args
        .drivers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let mut prepared = Vec::with_capacity(pipelines.len());
    for ((name, a), v) in pipelines.iter().zip(&validated) {
        let spec = SinkSpec {
            topology: v.topology.clone(),
            shard_key: a.shard_key.clone(),
            user: a.user.clone(),
            password: a.password.clone(),
            table: v.table.clone(),
            strict: a.strict,
            client: ChClientOptions {
                connect_timeout: Duration::from_secs(10),
                insert_timeout: a.insert_timeout,
                lz4: a.compression == Compression::Lz4,
            },
            retry: RetryPolicy::default(),
            workers_per_shard: a.insert_workers.max(1),
            native: a.insert_format == InsertFormat::Native,
        };
        prepared
            .push(prepare_sink(&io, &spec, &metrics).map_err(|e| e.in_pipeline(name, several))?);
    }
    let total_shards: usize = prepared.iter().map(PreparedSink::shards).sum();
    let budget = Budget::split(args.max_buffered_bytes, drivers, total_shards);
    let (queues, receivers) = ShardQueues::new(
        total_shards,
        budget.shard_high_water,
        budget.shard_high_water / 2,
    );
    let mut receivers = receivers.into_iter();
    let mut offset = 0;
    let mut pools = Vec::with_capacity(prepared.len());
    let mut routes = Vec::with_capacity(prepared.len());
    for (p, (_, a)) in prepared.into_iter().zip(&pipelines) {
        let n = p.shards();
        let pool = p.spawn(
            &queues,
            receivers.by_ref().take(n).collect(),
            offset,
            io.handle(),
            &acks.0,
        );
        offset += n;
        let batch_bytes = a.batch_bytes.min(budget.batch_bytes);
        if batch_bytes < a.batch_bytes {
            tracing::info!(
                batch_bytes,
                "--batch-bytes lowered so {drivers} drivers' open batches for {total_shards} shards fit in a quarter of --max-buffered-bytes"
            );
        }
        let limits = BatchLimits {
            rows: a.batch_rows,
            bytes: batch_bytes,
            interval: a.flush_interval,
            jitter: 0.1,
        };
        routes.push((
            pool.encoder_factory(),
            pool.slots(),
            limits,
            a.topics.clone(),
        ));
        pools.push(pool);
    }
    // The pools and the chains hold the queues from here on; the sink's
    // drain waits for the queues to close, which needs every sender gone.
    drop(queues);
    let sink = if pools.len() == 1 {
        pools.remove(0).into_runtime()
    } else {
        SinkPool::combine(pools)
    };
    let sink_options = SinkOptions {
        limits: routes[0].2,
    };
    let chains: ChainFactory = Box::new(move |ctx: ChainCtx| {
        let mut chains = Vec::with_capacity(routes.len());
        for (encoders, slots, limits, _) in &routes {
            let encoder =
                encoders
                    .build()
                    .map_err(|e| spate_core::pipeline::BuildError::Chain {
                        thread: ctx.thread,
                        reason: e.to_string(),
                    })?;
            let ctx = ChainCtx {
                options: SinkOptions { limits: *limits },
                ..ctx.clone()
            };
            chains.push(
                Box::new(EncodeChain::with_slots(encoder, &ctx, slots.clone())) as Box<dyn Chain>,
            );
        }
        if chains.len() == 1 {
            return Ok(chains.remove(0));
        }
        let topics: Vec<Vec<String>> = routes.iter().map(|r| r.3.clone()).collect();
        Ok(Box::new(TopicChains::new(chains, &topics)) as Box<dyn Chain>)
    });
    let source = KafkaSource::new(&kafka).map_err(|e| Exit::usage(e.to_string()))?;
    let pipeline = Pipeline::new(source, chains, sink, acks, sink_options)
        .map_err(|e| Exit::failed(e.to_string()))?;
    let mut options = RuntimeOptions::new(io.handle().clone());
    options.drivers = drivers;
    options.commit_interval = args.commit_interval;
    options.shutdown_timeout = args.shutdown_timeout;
    options.revoke_timeout = kafka.revoke_timeout;
    options.admin_addr = args.admin_addr;
    options.probe_interval = args.probe_interval;
    options.stall_timeout = args.stall_timeout;
    options.metrics = metrics;
    // A lane may have at most this many rows dispatched and unacknowledged:
    // a few batches' worth, so one partition cannot hog the budget.
    let batch_rows = pipelines
        .iter()
        .map(|(_, a)| a.batch_rows)
        .max()
        .unwrap_or(1);
    options.pending_ceiling = (batch_rows.saturating_mul(4)).min(i64::MAX as u64) as i64;
    let stats_metrics = options.metrics.clone();
    let runtime =
        PipelineRuntime::start(pipeline, options).map_err(|e| Exit::failed(e.to_string()))?;
    let progress = args.until_end && crate::stats::stderr_is_terminal();
    crate::stats::spawn(io.handle(), stats_metrics, args.stats_interval, progress);
    if let Some(addr) = runtime.admin_addr() {
        tracing::info!(%addr, "admin server listening (/metrics, /healthz, /readyz)");
    }
    let started = Instant::now();
    let report = runtime.run(signals());
    let elapsed = started.elapsed();
    match report.state {
        ExitState::Completed => {
            let rows = report.sink_drain.as_ref().map_or(0, |d| d.flushed_rows);
            tracing::debug!(rows, ?elapsed, "run complete");
            eprintln!(
                "spate: completed in {:.1}s; committed {}",
                elapsed.as_secs_f64(),
                report
                    .final_watermarks
                    .iter()
                    .map(|(p, w)| format!("{p}@{w}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            Ok(())
        }
        ExitState::Failed(f) => Err(Exit::failed(f.to_string())),
        _ => Err(Exit::failed("pipeline ended in an unknown state")),
    }
}

/// How `--max-buffered-bytes` is shared: a quarter for the drivers' open
/// batches (each driver has one open batch per shard), half for batches
/// queued or in flight to ClickHouse, split equally over the shards (lanes
/// feeding a shard pause above its share, resume below half of it), a
/// quarter for the Kafka client's prefetch (see `kafka_config`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Budget {
    /// Most bytes of one open batch.
    batch_bytes: usize,
    /// High-water mark of one shard's queue.
    shard_high_water: usize,
}

impl Budget {
    fn split(total: usize, drivers: usize, shards: usize) -> Self {
        let shards = shards.max(1);
        Self {
            batch_bytes: (total / 4 / drivers.max(1) / shards).max(64 << 10),
            shard_high_water: (total / 2 / shards).max(1),
        }
    }
}

/// A TOML string.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

fn list(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|s| quoted(s))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn masked(key: &str, value: &str) -> String {
    let k = key.to_ascii_lowercase();
    if ["password", "secret", "jaas", "token", "key.pem"]
        .iter()
        .any(|w| k.contains(w))
    {
        quoted("***")
    } else {
        quoted(value)
    }
}

/// The effective configuration as a `--config` file would state it,
/// secrets masked (`--print-config`).
fn effective_config(pipelines: &[(String, RunArgs)]) -> String {
    use std::fmt::Write as _;
    let a = &pipelines[0].1;
    let opt = |v: Option<String>| v.map_or_else(|| "(unset)".to_string(), |v| quoted(&v));
    let mut out =
        String::from("# effective configuration: flags > SPATE_* environment > --config file\n");
    let process = [
        ("brokers", quoted(&a.brokers)),
        ("group", quoted(&a.group)),
        ("until_end", a.until_end.to_string()),
        (
            "drivers",
            a.drivers
                .map_or_else(|| "(one per core)".into(), |d| d.to_string()),
        ),
        ("max_buffered_bytes", a.max_buffered_bytes.to_string()),
        (
            "commit_interval",
            quoted(&format!("{:?}", a.commit_interval)),
        ),
        (
            "shutdown_timeout",
            quoted(&format!("{:?}", a.shutdown_timeout)),
        ),
        (
            "revoke_timeout",
            a.revoke_timeout
                .map_or_else(|| "(derived)".into(), |d| quoted(&format!("{d:?}"))),
        ),
        ("admin_addr", opt(a.admin_addr.map(|x| x.to_string()))),
        ("probe_interval", quoted(&format!("{:?}", a.probe_interval))),
        ("stats_interval", quoted(&format!("{:?}", a.stats_interval))),
        ("stall_timeout", quoted(&format!("{:?}", a.stall_timeout))),
        (
            "log_format",
            quoted(&format!("{:?}", a.log_format).to_lowercase()),
        ),
        ("log_level", quoted(&a.log_level)),
    ];
    for (k, v) in process {
        let _ = writeln!(out, "{k} = {v}");
    }
    if !a.properties.is_empty() {
        out.push_str("\n[kafka]\n");
        // Later settings of a property win, as in the client's config.
        let mut props: Vec<(&str, &str)> = Vec::new();
        for (k, v) in &a.properties {
            props.retain(|(pk, _)| pk != k);
            props.push((k, v));
        }
        for (k, v) in props {
            let _ = writeln!(out, "{} = {}", quoted(k), masked(k, v));
        }
    }
    for (name, p) in pipelines {
        let _ = writeln!(out, "\n[[pipeline]]\nname = {}", quoted(name));
        let fields = [
            ("topics", list(&p.topics)),
            ("table", quoted(&p.table)),
            ("clickhouse_url", opt(p.clickhouse_url.clone())),
            ("shards", list(&p.shards)),
            ("shard_weights", format!("{:?}", p.shard_weights)),
            ("cluster", opt(p.cluster.clone())),
            ("shard_key", list(&p.shard_key)),
            ("user", opt(p.user.clone())),
            (
                "password",
                p.password
                    .as_ref()
                    .map_or_else(|| "(unset)".into(), |v| masked("password", v)),
            ),
            ("strict", p.strict.to_string()),
            ("batch_rows", p.batch_rows.to_string()),
            ("batch_bytes", p.batch_bytes.to_string()),
            ("flush_interval", quoted(&format!("{:?}", p.flush_interval))),
            ("insert_timeout", quoted(&format!("{:?}", p.insert_timeout))),
            ("insert_workers", p.insert_workers.to_string()),
            (
                "insert_format",
                quoted(match p.insert_format {
                    InsertFormat::Native => "native",
                    InsertFormat::Rowbinary => "rowbinary",
                }),
            ),
            (
                "compression",
                quoted(match p.compression {
                    Compression::Lz4 => "lz4",
                    Compression::None => "none",
                }),
            ),
        ];
        for (k, v) in fields {
            let _ = writeln!(out, "{k} = {v}");
        }
    }
    out
}

pub(crate) fn kafka_config(args: &RunArgs) -> Result<KafkaSourceConfig, Exit> {
    let mut kafka = KafkaSourceConfig {
        brokers: args.brokers.clone(),
        topics: args.topics.clone(),
        group: args.group.clone(),
        until_end: args.until_end,
        properties: args.properties.clone(),
        revoke_timeout: Duration::from_secs(10),
        // A quarter of the budget for librdkafka's prefetch, spread over
        // up to 8 partitions (each partition has its own prefetch queue).
        // The limit librdkafka applies counts payload bytes only, and a
        // queued small message costs about as much again in its own
        // structures, so the limit is half the share: an eighth.
        prefetch_kbytes: args.max_buffered_bytes / 8 / 8 / 1024,
    };
    let session_ms = kafka
        .session_timeout_ms()
        .map_err(|e| Exit::usage(e.to_string()))?;
    kafka.revoke_timeout = args
        .revoke_timeout
        .unwrap_or_else(|| Duration::from_millis(session_ms / 3).min(Duration::from_secs(10)));
    Ok(kafka)
}

fn prepare_sink(
    io: &tokio::runtime::Runtime,
    spec: &SinkSpec,
    metrics: &Arc<Metrics>,
) -> Result<PreparedSink, Exit> {
    let deadline = Instant::now() + STARTUP_RETRY;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match io.block_on(SinkPool::prepare(spec, metrics.clone())) {
            Ok(prepared) => return Ok(prepared),
            Err(e) if e.is_config() => return Err(Exit::usage(e.to_string())),
            Err(e) if Instant::now() < deadline => {
                let delay = spec.retry.delay(attempt, rand::random::<f64>());
                tracing::warn!(error = %e, attempt, backoff_ms = delay.as_millis() as u64, "ClickHouse not reachable at start; retrying");
                std::thread::sleep(delay);
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

/// Resolves on the first SIGTERM or SIGINT; a second one exits at once.
async fn signals() {
    wait_for_signal().await;
    tracing::info!("signal received; shutting down (a second signal exits at once)");
    tokio::spawn(async {
        wait_for_signal().await;
        eprintln!("spate: error: second signal; exiting without draining (nothing unacknowledged was committed)");
        std::process::exit(1);
    });
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Budget;

    #[test]
    fn budget_keeps_open_batches_within_a_quarter() {
        let b = Budget::split(256 << 20, 2, 1);
        assert_eq!(
            b,
            Budget {
                batch_bytes: 32 << 20,
                shard_high_water: 128 << 20
            }
        );
        let b = Budget::split(256 << 20, 64, 2);
        assert_eq!(b.batch_bytes, 512 << 10);
        assert!(b.batch_bytes * 64 * 2 <= (256 << 20) / 4);
        assert_eq!(
            b.shard_high_water * 2,
            128 << 20,
            "the queue half is split over the shards"
        );
    }
}
