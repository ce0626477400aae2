//! `spate run`: process assembly. Builds the Kafka source and the
//! ClickHouse sink from the connectors, hands them to a `Pipeline`, runs
//! the `PipelineRuntime` until SIGTERM/SIGINT (or the end of input with
//! `--until-end`), and maps the `ExitReport` to the exit code.

use crate::cli::RunArgs;
use crate::Exit;
use spate_clickhouse::{
    ChClientOptions, RetryPolicy, SinkPool, SinkSpec, TableRef, Topology, TopologySource,
};
use spate_core::metrics::Metrics;
use spate_core::pipeline::{
    Chain, ChainCtx, ChainFactory, EncodeChain, ExitState, Pipeline, PipelineRuntime,
    RuntimeOptions, SinkOptions,
};
use spate_core::sink::{ack_channel, BatchLimits};
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

pub fn run(args: RunArgs) -> Result<(), Exit> {
    let Validated {
        table,
        kafka,
        topology,
    } = validate(&args)?;
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
    let budget = Budget::split(args.max_buffered_bytes, args.batch_bytes, drivers);
    if budget.batch_bytes < args.batch_bytes {
        tracing::info!(
            batch_bytes = budget.batch_bytes,
            "--batch-bytes lowered so {drivers} drivers' open batches fit in a quarter of --max-buffered-bytes"
        );
    }
    let high_water = budget.queue_high_water;
    let spec = SinkSpec {
        topology,
        shard_key: args.shard_key.clone(),
        user: args.user.clone(),
        password: args.password.clone(),
        table: table.clone(),
        strict: args.strict,
        client: ChClientOptions {
            connect_timeout: Duration::from_secs(10),
            insert_timeout: args.insert_timeout,
        },
        retry: RetryPolicy::default(),
        workers_per_shard: args.insert_workers.max(1),
        high_water_bytes: high_water,
        low_water_bytes: high_water / 2,
    };
    let pool = start_sink(&io, &spec, &acks.0, &metrics)?;
    let encoders = pool.encoder_factory();
    let slots = pool.slots();
    let chains: ChainFactory = Box::new(move |ctx: ChainCtx| {
        let encoder = encoders
            .build()
            .map_err(|e| spate_core::pipeline::BuildError::Chain {
                thread: ctx.thread,
                reason: e.to_string(),
            })?;
        Ok(Box::new(EncodeChain::with_slots(encoder, &ctx, slots.clone())) as Box<dyn Chain>)
    });
    let source = KafkaSource::new(&kafka).map_err(|e| Exit::usage(e.to_string()))?;
    let sink_options = SinkOptions {
        limits: BatchLimits {
            rows: args.batch_rows,
            bytes: budget.batch_bytes,
            interval: args.flush_interval,
            jitter: 0.1,
        },
    };
    let pipeline = Pipeline::new(source, chains, pool.into_runtime(), acks, sink_options)
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
    options.pending_ceiling = (args.batch_rows.saturating_mul(4)).min(i64::MAX as u64) as i64;
    let runtime =
        PipelineRuntime::start(pipeline, options).map_err(|e| Exit::failed(e.to_string()))?;
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
/// batches, half for batches queued or in flight to ClickHouse (lanes
/// pause above it, resume below half of it), a quarter for the Kafka
/// client's prefetch (see `kafka_config`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Budget {
    batch_bytes: usize,
    queue_high_water: usize,
}

impl Budget {
    fn split(total: usize, batch_bytes: usize, drivers: usize) -> Self {
        let per_driver = (total / 4 / drivers.max(1)).max(64 << 10);
        Self {
            batch_bytes: batch_bytes.min(per_driver).max(1),
            queue_high_water: (total / 2).max(1),
        }
    }
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
        prefetch_kbytes: args.max_buffered_bytes / 4 / 8 / 1024,
    };
    let session_ms = kafka
        .session_timeout_ms()
        .map_err(|e| Exit::usage(e.to_string()))?;
    kafka.revoke_timeout = args
        .revoke_timeout
        .unwrap_or_else(|| Duration::from_millis(session_ms / 3).min(Duration::from_secs(10)));
    Ok(kafka)
}

fn start_sink(
    io: &tokio::runtime::Runtime,
    spec: &SinkSpec,
    acks: &spate_core::sink::AckSender,
    metrics: &Arc<Metrics>,
) -> Result<SinkPool, Exit> {
    let deadline = Instant::now() + STARTUP_RETRY;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match io.block_on(SinkPool::start(
            spec,
            io.handle().clone(),
            acks.clone(),
            metrics.clone(),
        )) {
            Ok(pool) => return Ok(pool),
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
        let b = Budget::split(256 << 20, 16 << 20, 2);
        assert_eq!(
            b,
            Budget {
                batch_bytes: 16 << 20,
                queue_high_water: 128 << 20
            }
        );
        let b = Budget::split(256 << 20, 16 << 20, 64);
        assert_eq!(b.batch_bytes, 1 << 20);
        assert!(b.batch_bytes * 64 <= (256 << 20) / 4);
    }
}
