//! [`PipelineRuntime`]: starts the controller and driver threads, serves
//! admin, and runs the shutdown sequence from the main thread.
//!
//! Main's part of the shutdown: wait for the controller to announce
//! `Draining`, wait on the drivers' barrier (bounded by the shutdown
//! deadline) and join them (their chains drop, closing the shard queues),
//! drop its own queue handles, run the sink drain hook with the remaining
//! budget, hand the drain report to the controller for its final commit,
//! wait for its exit (bounded by the final commit's deadline: the
//! controller sends it before it closes the source, and a close stuck on
//! the broker is not waited for), and build the [`ExitReport`].

use super::builder::{BuildError, ChainFactory, Pipeline, SinkRuntime};
use super::chain::{ChainCtx, SinkOptions};
use super::control::{DriverEvent, ThreadControl, ThreadEnv};
use super::controller::{
    Controller, ControllerConfig, ControllerExit, ControllerLinks, FromMain, ToMain,
    FINAL_COMMIT_FLOOR,
};
use super::driver::{Driver, DriverConfig, DriverLinks};
use super::exit::{ExitReport, ExitState, FatalErrorReport};
use crate::admin::{self, Readiness};
use crate::clock::{self, SharedClock};
use crate::error::{FatalError, Fault};
use crate::health::Liveness;
use crate::metrics::{Metrics, METRIC_NAMES};
use crate::sink::{DrainReport, ShardQueues};
use crate::source::{DrainBarrier, Lane, Source};
use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use std::future::Future;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Runtime tunables.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Driver threads.
    pub drivers: usize,
    /// Pin driver `i` to core `i % cores` (falls back to unpinned).
    pub pin_drivers: bool,
    /// Most messages taken from one lane per driver turn.
    pub poll_batch: usize,
    /// Longest a controller poll of the source blocks.
    pub poll_timeout: Duration,
    /// Commit tick: the longest an acknowledged watermark waits for its
    /// commit.
    pub commit_interval: Duration,
    /// Commit a watermark as soon as it moves, at most once per this window
    /// (capped by `commit_interval`), so a crash replays little more than
    /// what was in flight; `None` commits on the tick only.
    pub commit_coalesce: Option<Duration>,
    /// Budget of the whole shutdown sequence.
    pub shutdown_timeout: Duration,
    /// Budget of one revocation (must stay below the group session timeout).
    pub revoke_timeout: Duration,
    /// Pending-row ceiling per lane (the `PendingGate`).
    pub pending_ceiling: i64,
    /// A bounded run whose member holds no partition for this long after
    /// joining its group (a standby member: more members than partitions,
    /// or stripped of its partitions before they retired) ends, exit 0.
    /// `None`: never (unbounded runs).
    pub idle_exit: Option<Duration>,
    /// Where to serve `/metrics`, `/healthz`, `/readyz`.
    pub admin_addr: Option<SocketAddr>,
    /// Sink probe period.
    pub probe_interval: Duration,
    /// A pipeline thread silent this long is reported by `/healthz`.
    pub stall_timeout: Duration,
    /// The I/O runtime (admin server, probes, sink workers).
    pub io: tokio::runtime::Handle,
    /// Metrics registry.
    pub metrics: Arc<Metrics>,
    /// The clock every pipeline thread reads (commit tick, deadlines,
    /// chunk ages). The system clock unless a test injects another.
    pub clock: SharedClock,
}

impl RuntimeOptions {
    /// Defaults, running admin and probes on `io`.
    #[must_use]
    pub fn new(io: tokio::runtime::Handle) -> Self {
        Self {
            drivers: std::thread::available_parallelism().map_or(1, usize::from),
            pin_drivers: true,
            poll_batch: 1024,
            poll_timeout: Duration::from_millis(50),
            commit_interval: Duration::from_secs(1),
            commit_coalesce: Some(Duration::from_millis(100)),
            shutdown_timeout: Duration::from_secs(30),
            revoke_timeout: Duration::from_secs(2),
            pending_ceiling: 2_000_000,
            idle_exit: None,
            admin_addr: None,
            probe_interval: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(60),
            io,
            metrics: Arc::new(Metrics::new()),
            clock: clock::system(),
        }
    }
}

/// Names of every metric the runtime and its connectors export.
#[must_use]
pub fn metrics_settings() -> &'static [&'static str] {
    METRIC_NAMES
}

/// Why a runtime could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A thread could not be spawned.
    #[error("spawning thread {name} failed: {source}")]
    Spawn {
        /// Thread name.
        name: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The admin address could not be bound.
    #[error("binding the admin address {addr} failed: {source}")]
    Admin {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A chain could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
}

/// What a pipeline that did not complete returns
/// ([`PipelineRuntime::run_pipeline`]): it could not be built, its threads
/// could not start, or the run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// Building failed.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The runtime could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The run ended in a failure (already logged with its report).
    #[error(transparent)]
    Failed(#[from] FatalErrorReport),
}

/// Requests a shutdown from anywhere (signal handler, tests).
#[derive(Clone, Debug, Default)]
pub struct ShutdownHandle {
    flag: Arc<AtomicBool>,
}

impl ShutdownHandle {
    /// Ask the pipeline to stop: drain, commit, report.
    pub fn shutdown(&self) {
        self.flag.store(true, Ordering::Release);
    }

    /// Whether a shutdown was requested.
    #[must_use]
    pub fn is_requested(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}

type EmergencyStop = Box<dyn Fn(DrainBarrier, Instant) + Send>;

/// How long past its deadline main waits for the controller's exit, and
/// then for its thread to finish closing the source.
const CONTROLLER_GRACE: Duration = Duration::from_secs(1);

/// A started pipeline.
pub struct PipelineRuntime {
    controller: Option<JoinHandle<()>>,
    drivers: Vec<JoinHandle<()>>,
    emergency_stop: EmergencyStop,
    sink: Option<SinkRuntime>,
    to_main: Receiver<ToMain>,
    from_main: Sender<FromMain>,
    shutdown: ShutdownHandle,
    io: tokio::runtime::Handle,
    readiness: Arc<Readiness>,
    admin: Option<admin::AdminServer>,
    shutdown_timeout: Duration,
    clock: SharedClock,
}

impl PipelineRuntime {
    /// Spawn the driver and controller threads and the admin server.
    pub fn start<S: Source>(
        pipeline: Pipeline<S>,
        options: RuntimeOptions,
    ) -> Result<Self, StartError> {
        let Pipeline {
            source,
            chains,
            sink,
            acks,
            options: sink_options,
        } = pipeline;
        let thread_names = std::iter::once("controller".to_string())
            .chain((0..options.drivers.max(1)).map(|d| format!("driver-{d}")))
            .collect();
        let liveness = Arc::new(
            Liveness::new(thread_names, options.stall_timeout).with_clock(options.clock.clone()),
        );
        let (event_tx, event_rx) = unbounded::<DriverEvent>();
        let Drivers {
            controls: driver_txs,
            handles: drivers,
        } = spawn_drivers::<S::Lane>(&chains, &sink, sink_options, &options, &event_tx, &liveness)?;
        drop(event_tx);

        let readiness = Arc::new(Readiness {
            liveness: liveness.clone(),
            ..Readiness::default()
        });
        let shutdown = ShutdownHandle::default();
        let (to_main_tx, to_main_rx) = unbounded();
        let (from_main_tx, from_main_rx) = unbounded();
        let links = ControllerLinks {
            drivers: driver_txs.clone(),
            acks: acks.1,
            events: event_rx,
            to_main: to_main_tx,
            from_main: from_main_rx,
            shutdown: shutdown.flag.clone(),
            readiness: readiness.source.clone(),
        };
        drop(acks.0);
        let controller = spawn_controller(source, links, &options, &liveness)?;

        let emergency_stop = emergency_stop(driver_txs);
        let admin = serve_admin(&options, &readiness)?;
        spawn_probe(&options, &sink, &readiness);
        spawn_queue_gauges(&options, &sink.queues);

        Ok(Self {
            controller: Some(controller),
            drivers,
            emergency_stop,
            sink: Some(sink),
            to_main: to_main_rx,
            from_main: from_main_tx,
            shutdown,
            io: options.io,
            readiness,
            admin,
            shutdown_timeout: options.shutdown_timeout,
            clock: options.clock,
        })
    }

    /// The whole life of a pipeline in one call: start it, run it until it
    /// stops on its own or `shutdown` resolves, and hand back the report of
    /// a clean run.
    ///
    /// # Errors
    /// [`PipelineError::Start`] if it could not start,
    /// [`PipelineError::Failed`] if the run failed (its report is logged).
    pub fn run_pipeline<S: Source>(
        pipeline: Pipeline<S>,
        options: RuntimeOptions,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<ExitReport, PipelineError> {
        let runtime = Self::start(pipeline, options)?;
        Ok(runtime.run(shutdown).ok()?)
    }

    /// A handle that requests shutdown.
    #[must_use]
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// The bound admin address, if serving.
    #[must_use]
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(admin::AdminServer::local_addr)
    }

    /// Readiness flags (as `/readyz` reports them).
    #[must_use]
    pub fn readiness(&self) -> Arc<Readiness> {
        self.readiness.clone()
    }

    /// Run until the pipeline stops: on its own (drained, failed) or when
    /// `shutdown` resolves. Blocks the calling thread, which must not be a
    /// thread of the I/O runtime.
    pub fn run(mut self, shutdown: impl Future<Output = ()> + Send + 'static) -> ExitReport {
        let handle = self.shutdown.clone();
        let watcher = self.io.spawn(async move {
            shutdown.await;
            handle.shutdown();
        });
        let (barrier, deadline, controller_alive) = match self.to_main.recv() {
            Ok(ToMain::Draining { barrier, deadline }) => (barrier, deadline, true),
            Ok(ToMain::Finished(_)) | Err(_) => {
                // The controller died without starting the drain: stop the
                // drivers ourselves. Nothing more is committed.
                let deadline = self.clock.now() + self.shutdown_timeout;
                let barrier = DrainBarrier::new(self.drivers.len());
                (self.emergency_stop)(barrier.clone(), deadline);
                (barrier, deadline, false)
            }
        };
        watcher.abort();
        let sink_drain = self.stop_drivers_and_drain(&barrier, deadline);
        let _ = self
            .from_main
            .send(FromMain::SinkDrained(sink_drain.clone()));
        let exit = self.await_controller(deadline, controller_alive);
        let report = build_report(exit, sink_drain);
        report.log();
        if let Some(admin) = self.admin.take() {
            // A scrape in flight gets its answer (bounded by the grace).
            self.io.block_on(admin.shutdown());
        }
        report
    }

    /// The controller's exit, waited for until its final commit's
    /// deadline (plus a grace) at most. It sends the exit before it drops
    /// the source, whose close may wait on a broker that stopped answering:
    /// a controller thread still closing then is left behind (the process
    /// is about to exit), not joined.
    fn await_controller(
        &mut self,
        deadline: Instant,
        controller_alive: bool,
    ) -> Result<ControllerExit, String> {
        let by = Instant::now()
            + clock::until(&*self.clock, deadline).max(FINAL_COMMIT_FLOOR)
            + CONTROLLER_GRACE;
        let exit = match self.to_main.recv_deadline(by) {
            Ok(ToMain::Finished(exit)) if controller_alive => Ok(exit),
            Ok(_) => Err("controller thread stopped without draining".to_string()),
            Err(RecvTimeoutError::Timeout) => {
                tracing::error!("the controller did not finish its final commit by the shutdown deadline; not waiting for it");
                return Err("final commit not finished by the shutdown deadline; uncommitted rows replay after restart".to_string());
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err("controller thread stopped without draining".to_string())
            }
        };
        let Some(handle) = self.controller.take() else {
            return exit;
        };
        let closed_by = Instant::now() + CONTROLLER_GRACE;
        while !handle.is_finished() && Instant::now() < closed_by {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !handle.is_finished() {
            tracing::warn!(
                "the source is still closing (the broker does not answer); not waiting for it"
            );
            return exit;
        }
        match handle.join() {
            Err(panic) => Err(format!(
                "controller thread panicked: {}",
                panic_message(&panic)
            )),
            Ok(()) => exit,
        }
    }

    fn stop_drivers_and_drain(
        &mut self,
        barrier: &DrainBarrier,
        deadline: Instant,
    ) -> Option<DrainReport> {
        // The barrier sleeps in real time: give it what is left on the clock.
        let real_deadline = Instant::now() + clock::until(&*self.clock, deadline);
        if let crate::source::BarrierOutcome::TimedOut { missing } =
            barrier.wait_until(real_deadline)
        {
            tracing::error!(
                missing,
                "drivers did not flush before the shutdown deadline; abandoning them"
            );
        }
        for handle in self.drivers.drain(..) {
            if handle.is_finished() || barrier.remaining() == 0 {
                let _ = handle.join();
            }
        }
        let sink = self.sink.take()?;
        let SinkRuntime { queues, drain, .. } = sink;
        drop(queues);
        let budget = clock::until(&*self.clock, deadline);
        let report = drain(budget);
        if report.is_clean() {
            tracing::info!(
                chunks = report.flushed_chunks,
                rows = report.flushed_rows,
                "sink drained"
            );
        } else {
            tracing::error!(
                abandoned_chunks = report.abandoned_chunks,
                abandoned_rows = report.abandoned_rows,
                reason = report.reason.as_deref().unwrap_or(""),
                "sink abandoned data at the shutdown deadline; it was not committed and will replay"
            );
        }
        Some(report)
    }
}

/// What main does when the controller died before the drain: tell every
/// driver to shut down itself.
fn emergency_stop<L: Lane>(drivers: Vec<Sender<ThreadControl<L>>>) -> EmergencyStop {
    Box::new(move |barrier, deadline| {
        for tx in &drivers {
            let _ = tx.send(ThreadControl::Shutdown {
                barrier: barrier.clone(),
                deadline,
            });
        }
    })
}

/// Serve `/metrics`, `/healthz` and `/readyz` if an address is set;
/// returns the bound address.
fn serve_admin(
    options: &RuntimeOptions,
    readiness: &Arc<Readiness>,
) -> Result<Option<admin::AdminServer>, StartError> {
    let Some(addr) = options.admin_addr else {
        return Ok(None);
    };
    options
        .io
        .block_on(admin::start(
            addr,
            admin::AdminConfig::default(),
            options.metrics.clone(),
            readiness.clone(),
        ))
        .map(Some)
        .map_err(|source| StartError::Admin { addr, source })
}

/// The spawned driver threads: each one's control sender and join handle.
struct Drivers<L> {
    controls: Vec<Sender<ThreadControl<L>>>,
    handles: Vec<JoinHandle<()>>,
}

/// Build one chain per driver and spawn the driver threads.
fn spawn_drivers<L: Lane>(
    chains: &ChainFactory,
    sink: &SinkRuntime,
    sink_options: SinkOptions,
    options: &RuntimeOptions,
    events: &Sender<DriverEvent>,
    liveness: &Arc<Liveness>,
) -> Result<Drivers<L>, StartError> {
    let cores = if options.pin_drivers {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let config = DriverConfig {
        poll_batch: options.poll_batch.max(1),
        idle_max: Duration::from_millis(5),
    };
    let mut txs = Vec::new();
    let mut handles = Vec::new();
    for thread in 0..options.drivers.max(1) {
        let chain = chains(ChainCtx {
            thread,
            queues: sink.queues[0].clone(),
            options: sink_options,
            metrics: options.metrics.clone(),
            clock: options.clock.clone(),
        })?;
        let (tx, rx) = unbounded::<ThreadControl<L>>();
        txs.push(tx);
        // The driver thread keeps a second handle on its control channel:
        // if the driver panics, the thread still answers barriers with it.
        let after_panic = rx.clone();
        let links = DriverLinks {
            control: rx,
            events: events.clone(),
            queues: sink.queues[0].clone(),
        };
        let env = ThreadEnv {
            metrics: options.metrics.clone(),
            heartbeat: liveness.heartbeat(&format!("driver-{thread}")),
            clock: options.clock.clone(),
        };
        let driver = Driver::new(thread, chain, links, env, config);
        let core = cores.get(thread % cores.len().max(1)).copied();
        handles.push(spawn_driver(
            thread,
            driver,
            core,
            events.clone(),
            after_panic,
        )?);
    }
    Ok(Drivers {
        controls: txs,
        handles,
    })
}

/// Spawn driver `thread`, pinned to `core` if given; a panic becomes a
/// `DriverEvent::Fatal`, never a hang: the dead driver then serves
/// `control` with [`driver::serve_dead`](super::driver::serve_dead), so
/// the shutdown and revocation barriers do not wait for it.
fn spawn_driver<L: Lane>(
    thread: usize,
    driver: Driver<L>,
    core: Option<core_affinity::CoreId>,
    events: Sender<DriverEvent>,
    control: Receiver<ThreadControl<L>>,
) -> Result<JoinHandle<()>, StartError> {
    let name = format!("spate-driver-{thread}");
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            if let Some(core) = core {
                if !core_affinity::set_for_current(core) {
                    tracing::warn!(
                        driver = thread,
                        "pinning to a core failed; running unpinned"
                    );
                }
            }
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| driver.run())) {
                let reason = panic_message(&panic);
                tracing::error!(driver = thread, %reason, "driver thread panicked");
                let _ = events.send(DriverEvent::Fatal {
                    thread,
                    error: FatalError::new(
                        format!("driver-{thread}"),
                        format!("panicked: {reason}"),
                        Fault::Internal,
                    ),
                });
                drop(events);
                super::driver::serve_dead(thread, &control);
            }
        })
        .map_err(|source| StartError::Spawn { name, source })
}

fn spawn_controller<S: Source>(
    source: S,
    links: ControllerLinks<S::Lane>,
    options: &RuntimeOptions,
    liveness: &Arc<Liveness>,
) -> Result<JoinHandle<()>, StartError> {
    let env = ThreadEnv {
        metrics: options.metrics.clone(),
        heartbeat: liveness.heartbeat("controller"),
        clock: options.clock.clone(),
    };
    let config = ControllerConfig {
        poll_timeout: options.poll_timeout,
        commit_interval: options.commit_interval,
        commit_coalesce: options.commit_coalesce,
        shutdown_timeout: options.shutdown_timeout,
        revoke_timeout: options.revoke_timeout,
        pending_ceiling: options.pending_ceiling,
        idle_exit: options.idle_exit,
    };
    let controller = Controller::new(source, links, env, config);
    std::thread::Builder::new()
        .name("spate-controller".into())
        .spawn(move || controller.run())
        .map_err(|source| StartError::Spawn {
            name: "spate-controller".into(),
            source,
        })
}

fn build_report(
    exit: Result<ControllerExit, String>,
    sink_drain: Option<DrainReport>,
) -> ExitReport {
    let failed = |component: &str, reason: String| {
        ExitState::Failed(FatalErrorReport {
            component: component.to_string(),
            reason,
            recovery: crate::error::Recovery::None,
        })
    };
    let (state, final_watermarks) = match exit {
        Err(reason) => (failed("controller", reason), Vec::new()),
        Ok(exit) => {
            let state = if let Some(f) = exit.failure {
                ExitState::Failed(FatalErrorReport {
                    component: f.component,
                    reason: f.reason,
                    recovery: f.recovery,
                })
            } else if let Some(r) = sink_drain.as_ref().filter(|r| !r.is_clean()) {
                failed(
                    "sink",
                    format!(
                        "abandoned {} rows in {} batches at the shutdown deadline ({}); they were not committed and will replay",
                        r.abandoned_rows,
                        r.abandoned_chunks,
                        r.reason.as_deref().unwrap_or("deadline")
                    ),
                )
            } else if let Some(e) = exit.commit_error {
                failed("checkpoint", format!("final offset commit failed: {e}"))
            } else if exit.drained && exit.unacknowledged_rows > 0 {
                failed(
                    "checkpoint",
                    format!(
                        "source drained but {} rows were never acknowledged",
                        exit.unacknowledged_rows
                    ),
                )
            } else {
                ExitState::Completed
            };
            (state, exit.final_watermarks)
        }
    };
    ExitReport {
        state,
        sink_drain,
        final_watermarks,
    }
}

fn spawn_probe(options: &RuntimeOptions, sink: &SinkRuntime, readiness: &Arc<Readiness>) {
    let Some(probe) = sink.probe.clone() else {
        readiness.sinks_connected.store(true, Ordering::Release);
        return;
    };
    let readiness = readiness.clone();
    let interval = options.probe_interval;
    options.io.spawn(async move {
        loop {
            match probe().await {
                Ok(()) => {
                    readiness.sinks_connected.store(true, Ordering::Release);
                    if let Ok(mut e) = readiness.sink_error.lock() {
                        *e = None;
                    }
                }
                Err(why) => {
                    readiness.sinks_connected.store(false, Ordering::Release);
                    if let Ok(mut e) = readiness.sink_error.lock() {
                        *e = Some(why);
                    }
                }
            }
            tokio::time::sleep(interval).await;
        }
    });
}

fn spawn_queue_gauges(options: &RuntimeOptions, queues: &[ShardQueues]) {
    let metrics = options.metrics.clone();
    // Depth views only: this task must not keep the queues open.
    let views: Vec<_> = queues.iter().map(ShardQueues::depth_view).collect();
    // The metrics outlive a start of the pipelines (a process keeps one
    // set): the shards numbered by the last start go.
    metrics.queue_bytes.reset();
    options.io.spawn(async move {
        loop {
            metrics
                .uptime
                .set(metrics.created.elapsed().as_secs() as i64);
            for view in &views {
                // Shards are numbered from 1 in labels, like `shard_num`
                // in ClickHouse's system.clusters.
                for (shard, bytes) in view.bytes().into_iter().enumerate() {
                    metrics
                        .queue_bytes
                        .with_label_values(&[&(shard + 1).to_string()])
                        .set(bytes as i64);
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}
