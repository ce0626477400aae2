//! Driver threads: own lanes and one chain, poll → push → route.
//!
//! A driver never blocks on data: lanes are polled without waiting, the
//! chain pushes sealed chunks into unbounded shard queues, and when a
//! queue crosses its high-water mark the driver stops polling and asks the
//! controller to pause its lanes at the source (`DriverEvent::PauseLanes`),
//! asking to resume only once every queue is back at its low-water mark.
//! When there is nothing to do it waits on its control channel with a
//! short, growing timeout, so control messages are served at once.

use super::{DriverEvent, ThreadControl};
use crate::checkpoint::PendingGate;
use crate::error::{ChainError, FatalError, Fault};
use crate::metrics::Metrics;
use crate::pipeline::builder::Chain;
use crate::sink::ShardQueues;
use crate::source::{Lane, LaneError, LaneId, LanePoll};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use prometheus::IntCounter;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tunables of a driver loop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DriverConfig {
    /// Most messages taken from one lane per turn.
    pub poll_batch: usize,
    /// Longest idle wait on the control channel.
    pub idle_max: Duration,
}

struct LaneEntry<L> {
    lane: L,
    slot: usize,
    gate: Option<PendingGate>,
    ended: bool,
    consumed: IntCounter,
    bytes: IntCounter,
}

pub(crate) struct Driver<L: Lane> {
    index: usize,
    chain: Box<dyn Chain>,
    lanes: Vec<LaneEntry<L>>,
    control: Receiver<ThreadControl<L>>,
    events: Sender<DriverEvent>,
    queues: ShardQueues,
    metrics: Arc<Metrics>,
    config: DriverConfig,
    /// Stopped polling for backpressure (and asked for a source pause).
    backpressured: bool,
    /// A fatal error was reported; only control messages are served now.
    failed: bool,
    turn: usize,
}

enum Flow {
    Continue,
    Exit,
}

impl<L: Lane> Driver<L> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        index: usize,
        chain: Box<dyn Chain>,
        control: Receiver<ThreadControl<L>>,
        events: Sender<DriverEvent>,
        queues: ShardQueues,
        metrics: Arc<Metrics>,
        config: DriverConfig,
    ) -> Self {
        Self {
            index,
            chain,
            lanes: Vec::new(),
            control,
            events,
            queues,
            metrics,
            config,
            backpressured: false,
            failed: false,
            turn: 0,
        }
    }

    /// The driver loop; returns when told to shut down or when its control
    /// channel is gone.
    pub(crate) fn run(mut self) {
        let idle_min = Duration::from_micros(50);
        let mut idle = idle_min;
        loop {
            loop {
                match self.control.try_recv() {
                    Ok(msg) => {
                        if let Flow::Exit = self.handle(msg) {
                            return;
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        self.flush_or_fail();
                        return;
                    }
                }
            }
            let delivered = if self.backpressured || self.failed {
                0
            } else {
                self.poll_lanes()
            };
            if !self.failed {
                if let Err(e) = self.chain.tick(Instant::now()) {
                    self.fail(e);
                }
                self.backpressure();
            }
            if delivered > 0 {
                idle = idle_min;
                continue;
            }
            match self.control.recv_timeout(idle) {
                Ok(msg) => {
                    if let Flow::Exit = self.handle(msg) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.flush_or_fail();
                    return;
                }
            }
            idle = (idle * 2).min(self.config.idle_max);
        }
    }

    fn poll_lanes(&mut self) -> usize {
        let mut total = 0;
        let n = self.lanes.len();
        if n == 0 {
            return 0;
        }
        self.turn = (self.turn + 1) % n;
        for k in 0..n {
            let i = (self.turn + k) % n;
            let entry = &mut self.lanes[i];
            if entry.ended || entry.gate.as_ref().is_some_and(|g| !g.is_open()) {
                continue;
            }
            let chain = &mut self.chain;
            let slot = entry.slot;
            let mut bytes = 0u64;
            let result = entry.lane.poll(self.config.poll_batch, &mut |msg| {
                chain.push(slot, msg)?;
                bytes += msg.payload.map_or(0, |p| p.len() as u64);
                Ok(())
            });
            entry.bytes.inc_by(bytes);
            match result {
                Ok(LanePoll::Delivered(count)) => {
                    entry.consumed.inc_by(count as u64);
                    total += count;
                }
                Ok(LanePoll::Ended) => entry.ended = true,
                Err(e) => {
                    let id = entry.lane.id();
                    let partition = entry.lane.partition().clone();
                    // Rows before the failing message still go out, so they
                    // are acknowledged and committed during shutdown.
                    if let Err(flush) = self.chain.flush() {
                        tracing::error!(driver = self.index, error = %flush, "flush after a failed lane failed too");
                    }
                    let error = match e {
                        LaneError::Chain(c) => {
                            let fault = c.fault();
                            FatalError::new(format!("driver-{}", self.index), c.to_string(), fault)
                        }
                        LaneError::Source(s) => FatalError::new(
                            format!("kafka lane {partition}"),
                            s.to_string(),
                            Fault::External,
                        ),
                    };
                    tracing::error!(driver = self.index, lane = %id, %partition, error = %error, "lane failed; stopping the pipeline");
                    self.report_fatal(error);
                    return total;
                }
            }
        }
        total
    }

    fn backpressure(&mut self) {
        if !self.backpressured && self.queues.any_over() {
            self.backpressured = true;
            let lanes = self.lane_ids();
            tracing::debug!(driver = self.index, lanes = lanes.len(), depth = ?self.queues.depths(), "shard queue over high water; pausing lanes");
            let _ = self.events.send(DriverEvent::PauseLanes { lanes });
        } else if self.backpressured && self.queues.all_clear() {
            self.backpressured = false;
            let lanes = self.lane_ids();
            tracing::debug!(
                driver = self.index,
                lanes = lanes.len(),
                "shard queues clear; resuming lanes"
            );
            let _ = self.events.send(DriverEvent::ResumeLanes { lanes });
        }
    }

    fn lane_ids(&self) -> Vec<LaneId> {
        self.lanes.iter().map(|e| e.lane.id()).collect()
    }

    fn handle(&mut self, msg: ThreadControl<L>) -> Flow {
        match msg {
            ThreadControl::AddLane { lane, gate } => {
                let partition = lane.partition().clone();
                let slot = self.chain.add_lane(lane.id(), &partition, gate.clone());
                let labels = [&*partition.topic, &partition.partition.to_string()];
                tracing::debug!(driver = self.index, lane = %lane.id(), %partition, "lane added");
                self.lanes.push(LaneEntry {
                    consumed: self.metrics.messages_consumed.with_label_values(&labels),
                    bytes: self.metrics.bytes_consumed.with_label_values(&labels),
                    lane,
                    slot,
                    gate,
                    ended: false,
                });
                if self.backpressured {
                    // Keep the controller's pause set in step with what
                    // this driver is not polling.
                    let _ = self.events.send(DriverEvent::PauseLanes {
                        lanes: vec![self.lanes[self.lanes.len() - 1].lane.id()],
                    });
                }
                Flow::Continue
            }
            ThreadControl::StopLanes {
                lanes,
                barrier,
                deadline,
            } => {
                self.flush_or_fail();
                self.remove(&lanes);
                if Instant::now() > deadline {
                    tracing::warn!(
                        driver = self.index,
                        "revocation flush finished after its deadline"
                    );
                }
                for _ in &lanes {
                    barrier.arrive();
                }
                Flow::Continue
            }
            ThreadControl::FlushNow => {
                self.flush_or_fail();
                Flow::Continue
            }
            ThreadControl::DropLanes { lanes } => {
                self.remove(&lanes);
                Flow::Continue
            }
            ThreadControl::Shutdown { barrier, deadline } => {
                self.flush_or_fail();
                let all = self.lane_ids();
                self.remove(&all);
                if Instant::now() > deadline {
                    tracing::warn!(
                        driver = self.index,
                        "shutdown flush finished after its deadline"
                    );
                }
                barrier.arrive();
                Flow::Exit
            }
        }
    }

    fn remove(&mut self, lanes: &[LaneId]) {
        let chain = &mut self.chain;
        self.lanes.retain(|e| {
            if lanes.contains(&e.lane.id()) {
                chain.remove_lane(e.slot);
                false
            } else {
                true
            }
        });
    }

    fn flush_or_fail(&mut self) {
        if let Err(e) = self.chain.flush() {
            self.fail(e);
        }
    }

    fn fail(&mut self, e: ChainError) {
        let fault = e.fault();
        self.report_fatal(FatalError::new(
            format!("driver-{}", self.index),
            e.to_string(),
            fault,
        ));
    }

    fn report_fatal(&mut self, error: FatalError) {
        if !self.failed {
            self.failed = true;
            let _ = self.events.send(DriverEvent::Fatal {
                thread: self.index,
                error,
            });
        }
    }
}
