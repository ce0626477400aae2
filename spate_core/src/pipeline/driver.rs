//! Driver threads: own lanes and one chain, poll → push → route.
//!
//! A driver never blocks on data: lanes are polled without waiting, the
//! chain pushes sealed chunks into unbounded shard queues, and when a
//! shard's queue crosses its high-water mark the driver stops polling the
//! lanes that feed that shard and asks the controller to pause them at the
//! source (`DriverEvent::PauseLanes`). A paused lane is resumed only once
//! every shard it feeds is back at its low-water mark (hysteresis). Lanes
//! feeding only healthy shards keep flowing, so one slow shard holds back
//! only the partitions with rows for it.
//! When there is nothing to do it waits on its control channel with a
//! short, growing timeout, so control messages are served at once.
//! Each lane is polled under its gate's tenure
//! ([`PendingGate::admit`]): a revocation's `close` on the controller
//! thread waits for that poll, so once a partition is re-assigned the old
//! lane cannot take the new assignment's messages off the shared queue.

use super::chain::Chain;
use super::control::{DriverEvent, ThreadControl, ThreadEnv};
use crate::checkpoint::PendingGate;
use crate::clock::SharedClock;
use crate::error::{ChainError, FatalError, Fault};
use crate::health::Heartbeat;
use crate::metrics::Metrics;
use crate::sink::ShardQueues;
use crate::source::{DrainBarrier, Lane, LaneError, LaneId, LanePoll};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use prometheus::IntCounter;
use std::sync::Arc;
use std::time::Duration;

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
    /// Not polled, and asked to be paused at the source, for backpressure.
    paused: bool,
    /// Shards this lane sent rows to since it was last resumed (or since
    /// every shard was last clear): the shards it may have rows waiting in.
    feeds: u64,
    consumed: IntCounter,
    bytes: IntCounter,
    /// `lane{topic, partition}`: what the lane logs while it is polled
    /// carries its partition.
    span: tracing::Span,
}

/// A driver's links to the rest of the runtime: its control channel from
/// the controller, the shared event channel back, and the shard queues it
/// watches for backpressure.
pub(crate) struct DriverLinks<L> {
    pub control: Receiver<ThreadControl<L>>,
    pub events: Sender<DriverEvent>,
    pub queues: ShardQueues,
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
    heartbeat: Heartbeat,
    clock: SharedClock,
    /// A fatal error was reported; only control messages are served now.
    failed: bool,
    turn: usize,
}

enum Flow {
    Continue,
    Exit,
}

impl<L: Lane> Driver<L> {
    pub(crate) fn new(
        index: usize,
        chain: Box<dyn Chain>,
        links: DriverLinks<L>,
        env: ThreadEnv,
        config: DriverConfig,
    ) -> Self {
        let DriverLinks {
            control,
            events,
            queues,
        } = links;
        Self {
            index,
            chain,
            lanes: Vec::new(),
            control,
            events,
            queues,
            metrics: env.metrics,
            config,
            heartbeat: env.heartbeat,
            clock: env.clock,
            failed: false,
            turn: 0,
        }
    }

    /// The driver loop; returns when told to shut down or when its control
    /// channel is gone.
    pub(crate) fn run(mut self) {
        let heartbeat = self.heartbeat.clone();
        self.turn_loop();
        heartbeat.finish();
    }

    fn turn_loop(&mut self) {
        let idle_min = Duration::from_micros(50);
        let mut idle = idle_min;
        loop {
            self.heartbeat.beat();
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
            let delivered = if self.failed { 0 } else { self.poll_lanes() };
            if !self.failed {
                if let Err(e) = self.chain.tick(self.clock.now()) {
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
            if entry.ended || entry.paused || entry.gate.as_ref().is_some_and(|g| !g.is_open()) {
                continue;
            }
            // A turn over many lanes moves a lot: a lane feeding a shard
            // that went over its high-water mark during this turn waits
            // (the turn's backpressure check pauses it), or the queue
            // overshoots the budget by a turn's worth.
            let over = self.queues.over_mask();
            if over != 0 {
                entry.feeds |= self.chain.take_shards_fed(entry.slot);
                if entry.feeds & over != 0 {
                    continue;
                }
            }
            // Polled under the gate's tenure: a revocation's close waits
            // for this poll, so a poll never straddles a re-assignment of
            // the partition (whose new lane shares the fetch queue).
            let tenure = entry.gate.as_ref().map(PendingGate::admit);
            if matches!(tenure, Some(None)) {
                continue;
            }
            let chain = &mut self.chain;
            let slot = entry.slot;
            let mut bytes = 0u64;
            let span = entry.span.clone();
            let _in_lane = span.enter();
            let result = entry.lane.poll(self.config.poll_batch, &mut |msg| {
                chain.push(slot, msg)?;
                bytes += msg.payload.map_or(0, |p| p.len() as u64);
                Ok(())
            });
            drop(tenure);
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
        let over = self.queues.over_mask();
        let clear = self.queues.clear_mask();
        let (mut pause, mut resume) = (Vec::new(), Vec::new());
        for e in &mut self.lanes {
            e.feeds |= self.chain.take_shards_fed(e.slot);
            if e.ended {
                // Its partition is done: pausing it now would leave it
                // paused at the source once the lane is retired (the
                // controller forgets a retired lane's pause without
                // resuming it), and nothing of it is polled any more.
                continue;
            }
            if e.paused {
                if e.feeds & !clear == 0 {
                    e.paused = false;
                    e.feeds = 0;
                    resume.push(e.lane.id());
                }
            } else if e.feeds & over != 0 {
                e.paused = true;
                pause.push(e.lane.id());
            } else if clear == u64::MAX {
                // No shard has a backlog: nothing of this lane is waiting.
                e.feeds = 0;
            }
        }
        if !pause.is_empty() {
            tracing::debug!(driver = self.index, lanes = pause.len(), depth = ?self.queues.depths(), "shard queue over high water; pausing the lanes feeding it");
            let _ = self.events.send(DriverEvent::PauseLanes { lanes: pause });
        }
        if !resume.is_empty() {
            tracing::debug!(
                driver = self.index,
                lanes = resume.len(),
                "shard queues clear; resuming lanes"
            );
            let _ = self.events.send(DriverEvent::ResumeLanes { lanes: resume });
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
                if let Some(epoch) = lane.epoch() {
                    self.chain.set_epoch(slot, epoch);
                }
                let labels = [&*partition.topic, &partition.partition.to_string()];
                tracing::debug!(driver = self.index, lane = %lane.id(), %partition, "lane added");
                self.lanes.push(LaneEntry {
                    consumed: self.metrics.messages_consumed.with_label_values(&labels),
                    bytes: self.metrics.bytes_consumed.with_label_values(&labels),
                    lane,
                    slot,
                    gate,
                    ended: false,
                    // A new lane starts unpaused and feeding nothing; it is
                    // paused as soon as it sends rows to a shard over its
                    // high-water mark.
                    paused: false,
                    feeds: 0,
                    span: tracing::info_span!("lane", topic = %partition.topic, partition = partition.partition),
                });
                Flow::Continue
            }
            ThreadControl::StopLanes {
                lanes,
                barrier,
                deadline,
            } => {
                let arrivals = Arrivals::new(barrier, lanes.len());
                self.flush_or_fail();
                self.remove(&lanes);
                if self.clock.now() > deadline {
                    tracing::warn!(
                        driver = self.index,
                        "revocation flush finished after its deadline"
                    );
                }
                drop(arrivals);
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
                let arrival = Arrivals::new(barrier, 1);
                self.flush_or_fail();
                let all = self.lane_ids();
                self.remove(&all);
                if self.clock.now() > deadline {
                    tracing::warn!(
                        driver = self.index,
                        "shutdown flush finished after its deadline"
                    );
                }
                drop(arrival);
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

/// Arrivals owed to a barrier, made when dropped: at the end of a flush,
/// or while a panic in the flush unwinds, so a dying driver never leaves
/// a barrier's waiter to its deadline.
struct Arrivals {
    barrier: DrainBarrier,
    count: usize,
}

impl Arrivals {
    fn new(barrier: DrainBarrier, count: usize) -> Self {
        Self { barrier, count }
    }
}

impl Drop for Arrivals {
    fn drop(&mut self) {
        for _ in 0..self.count {
            self.barrier.arrive();
        }
    }
}

/// What the thread of a driver that panicked does until shutdown: it has
/// no chain left to flush (its lanes' unflushed rows were never
/// acknowledged, so they replay), so it arrives at every barrier at once
/// and exits on `Shutdown` or when the controller is gone.
pub(crate) fn serve_dead<L: Lane>(index: usize, control: &Receiver<ThreadControl<L>>) {
    for msg in control {
        match msg {
            ThreadControl::StopLanes { lanes, barrier, .. } => {
                drop(Arrivals::new(barrier, lanes.len()));
            }
            ThreadControl::Shutdown { barrier, .. } => {
                barrier.arrive();
                tracing::info!(driver = index, "dead driver answered the shutdown");
                return;
            }
            ThreadControl::AddLane { lane, .. } => {
                tracing::warn!(driver = index, lane = %lane.id(), "lane sent to a dead driver; not polled");
            }
            ThreadControl::FlushNow | ThreadControl::DropLanes { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::fakes::FakeLane;
    use crate::pipeline::{ChainCtx, EncodeChain, SinkOptions};
    use crate::record::{Message, PartitionId};
    use crate::sink::{BatchLimits, EncodeFailure, Encoded, RowEncode};
    use crossbeam_channel::unbounded;
    use std::time::Instant;

    /// The payload plus the partition as the row; routed to shard =
    /// partition, like `--shard-key _partition`.
    struct ByPartition;

    impl RowEncode for ByPartition {
        fn encode(
            &mut self,
            msg: &Message<'_>,
            out: &mut Vec<u8>,
        ) -> Result<Encoded, EncodeFailure> {
            out.extend_from_slice(msg.payload.unwrap_or_default());
            out.push(msg.partition as u8);
            Ok(Encoded::Row)
        }
        fn routes_by_key(&self) -> bool {
            true
        }
        fn route_hash(&self, row: &[u8]) -> Option<u64> {
            row.last().map(|&p| u64::from(p))
        }
    }

    fn recv_event(rx: &Receiver<DriverEvent>) -> DriverEvent {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a driver event within 10 s")
    }

    #[test]
    fn a_full_shard_pauses_only_the_lanes_feeding_it() {
        const ROWS: usize = 20_000;
        let (queues, mut rx) = ShardQueues::new(2, 64 << 10, 16 << 10);
        let metrics = Arc::new(Metrics::new());
        let ctx = ChainCtx {
            thread: 0,
            queues: queues.clone(),
            options: SinkOptions {
                limits: BatchLimits {
                    rows: 100,
                    bytes: 1 << 20,
                    interval: Duration::from_secs(3600),
                    jitter: 0.0,
                    sizing: crate::sink::RowSizing::Fixed,
                },
            },
            metrics: metrics.clone(),
            clock: crate::clock::system(),
        };
        let chain = Box::new(EncodeChain::new(ByPartition, &ctx));
        let (control_tx, control_rx) = unbounded();
        let (events_tx, events_rx) = unbounded();
        let config = DriverConfig {
            poll_batch: 50,
            idle_max: Duration::from_millis(1),
        };
        let live = Arc::new(crate::health::Liveness::new(
            vec!["driver-0".into()],
            Duration::from_secs(60),
        ));
        let links = DriverLinks {
            control: control_rx,
            events: events_tx,
            queues,
        };
        let env = ThreadEnv {
            metrics,
            heartbeat: live.heartbeat("driver-0"),
            clock: crate::clock::system(),
        };
        let driver = Driver::new(0, chain, links, env, config);
        let thread = std::thread::spawn(move || driver.run());
        let data = || {
            (0..ROWS)
                .map(|i| format!("row-{i:08}-{}", "x".repeat(80)).into_bytes())
                .collect()
        };
        let (healthy, stalled) = (LaneId(1), LaneId(2));
        for (id, partition) in [(healthy, 0), (stalled, 1)] {
            let lane = FakeLane::standalone(id, PartitionId::new("t", partition), data());
            control_tx
                .send(ThreadControl::AddLane { lane, gate: None })
                .unwrap();
        }

        // Shard 0 is drained as fast as it fills; shard 1 is not drained
        // at all. Every row of the lane feeding shard 0 must arrive while
        // the lane feeding shard 1 stays paused.
        let mut rx1 = rx.pop().expect("shard 1");
        let mut rx0 = rx.pop().expect("shard 0");
        let drainer = std::thread::spawn(move || {
            let mut rows = 0;
            let deadline = Instant::now() + Duration::from_secs(20);
            while rows < ROWS as u64 && Instant::now() < deadline {
                match rx0.try_recv() {
                    Some(c) => rows += c.rows,
                    None => std::thread::sleep(Duration::from_micros(200)),
                }
            }
            rows
        });
        let mut paused = std::collections::HashSet::new();
        let mut stalled_paused_at = None;
        // Until the healthy shard has every row and the stalled lane's
        // pause has been seen (the drainer may finish first).
        let deadline = Instant::now() + Duration::from_secs(20);
        while !drainer.is_finished() || stalled_paused_at.is_none() {
            assert!(
                Instant::now() < deadline,
                "the lane feeding the full shard was never paused"
            );
            match events_rx.recv_timeout(Duration::from_millis(10)) {
                Ok(DriverEvent::PauseLanes { lanes }) => {
                    if lanes.contains(&stalled) && stalled_paused_at.is_none() {
                        stalled_paused_at = Some(Instant::now());
                    }
                    paused.extend(lanes);
                }
                Ok(DriverEvent::ResumeLanes { lanes }) => {
                    assert!(
                        !lanes.contains(&stalled),
                        "the lane feeding the full shard was resumed"
                    );
                    lanes.iter().for_each(|l| {
                        paused.remove(l);
                    });
                }
                Ok(other) => panic!("unexpected event {other:?}"),
                Err(_) => {}
            }
        }
        let rows0 = drainer.join().expect("drainer");
        assert_eq!(
            rows0, ROWS as u64,
            "the lane feeding the healthy shard stalled"
        );
        assert!(
            stalled_paused_at.is_some(),
            "the lane feeding the full shard was never paused"
        );
        assert!(paused.contains(&stalled));
        let held = queues_rows(&mut rx1);
        assert!(
            held < ROWS as u64 / 4,
            "the stalled lane went on past the high-water mark: {held} rows"
        );

        // Shard 1 drained: its lane resumes. The healthy lane may still be
        // paused from a moment its shard was full, and resume with it; a
        // lane never paused must not.
        let resumed = loop {
            match recv_event(&events_rx) {
                DriverEvent::ResumeLanes { lanes } if lanes.contains(&stalled) => break lanes,
                DriverEvent::ResumeLanes { lanes } => lanes.iter().for_each(|l| {
                    paused.remove(l);
                }),
                DriverEvent::PauseLanes { lanes } => paused.extend(lanes),
                other => panic!("unexpected event {other:?}"),
            }
        };
        assert!(
            resumed.iter().all(|l| paused.contains(l)),
            "resumed {resumed:?}, paused {paused:?}"
        );
        drop(control_tx);
        thread.join().expect("driver thread");
    }

    /// A chain whose flush panics (a bug in an encoder's tail handling).
    struct PanicOnFlush;

    impl Chain for PanicOnFlush {
        fn add_lane(&mut self, _: LaneId, _: &PartitionId, _: Option<PendingGate>) -> usize {
            0
        }
        fn push(&mut self, _: usize, _: &Message<'_>) -> Result<(), ChainError> {
            Ok(())
        }
        fn tick(&mut self, _: Instant) -> Result<(), ChainError> {
            Ok(())
        }
        fn flush(&mut self) -> Result<(), ChainError> {
            panic!("flush panicked on purpose");
        }
        fn remove_lane(&mut self, _: usize) {}
    }

    /// A driver whose flush panics while it stops lanes or shuts down
    /// still makes the arrivals it owes: a waiter does not sit out its
    /// deadline for a dead thread.
    #[test]
    fn a_panic_in_the_flush_still_arrives_at_the_barrier() {
        for stop_lanes in [true, false] {
            let (queues, _rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
            let (control_tx, control_rx) = unbounded();
            let (events_tx, _events_rx) = unbounded();
            let live = Arc::new(crate::health::Liveness::new(
                vec!["driver-0".into()],
                Duration::from_secs(60),
            ));
            let links = DriverLinks::<FakeLane> {
                control: control_rx,
                events: events_tx,
                queues,
            };
            let env = ThreadEnv {
                metrics: Arc::new(Metrics::new()),
                heartbeat: live.heartbeat("driver-0"),
                clock: crate::clock::system(),
            };
            let config = DriverConfig {
                poll_batch: 1,
                idle_max: Duration::from_millis(1),
            };
            let driver = Driver::new(0, Box::new(PanicOnFlush), links, env, config);
            let deadline = Instant::now() + Duration::from_secs(60);
            let barrier = DrainBarrier::new(if stop_lanes { 2 } else { 1 });
            let msg = if stop_lanes {
                ThreadControl::StopLanes {
                    lanes: vec![LaneId(1), LaneId(2)],
                    barrier: barrier.clone(),
                    deadline,
                }
            } else {
                ThreadControl::Shutdown {
                    barrier: barrier.clone(),
                    deadline,
                }
            };
            control_tx.send(msg).unwrap();
            let thread = std::thread::spawn(move || driver.run());
            assert!(thread.join().is_err(), "the flush panicked");
            assert_eq!(
                barrier.remaining(),
                0,
                "a driver that panicked in its flush left the barrier waiting (stop_lanes: {stop_lanes})"
            );
        }
    }

    /// Take everything queued for a shard; the rows it held.
    fn queues_rows(rx: &mut crate::sink::ShardReceiver) -> u64 {
        let mut rows = 0;
        while let Some(c) = rx.try_recv() {
            rows += c.rows;
        }
        rows
    }
}
