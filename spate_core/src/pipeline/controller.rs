//! The controller thread: owns the [`Source`] and the [`Checkpointer`].
//!
//! An explicit state machine:
//!
//! ```text
//! Consuming ──(shutdown requested | fatal | Drained)──▶ Draining{deadline} ──(sink drained)──▶ Stopped
//! ```
//!
//! *Consuming*: poll source events (assignments become `AddLane`, end of
//! input becomes `FlushNow`, retired lanes become `DropLanes`), apply
//! driver requests (pause/resume at the source, a refused resume retried
//! with backoff since its driver asks only once; fatal reports), fold sink
//! acknowledgements into the checkpointer, and commit acknowledged
//! watermarks as soon as they move, coalesced to at most one commit per
//! `commit_coalesce` (acknowledgements arrive per insert, many a second,
//! and a commit each would flood the group coordinator; so a `kill -9` replays what was in flight plus one
//! coalescing window, not a whole commit tick), and at the latest on the
//! commit tick (`--commit-interval`); an asynchronous commit the broker
//! refuses (`SourceEvent::CommitFailed`) is offered again on the next
//! tick, and with a source that reports confirmations a commit counts as
//! committed only once confirmed. Revocations arrive synchronously through
//! [`Revoker`]: stop the lanes on their drivers, wait for their
//! acknowledgements until the revoke deadline, hand back their watermarks
//! for the source to commit before it gives the partitions up.
//! Rows the sink lost (`AckEvent::Rewind`: a failed streamed request
//! whose batches were released) are read again: on its next turn the
//! controller stops their lanes the same way, forgets them, and starts a
//! new lane of each partition from its acknowledged watermark
//! (`Source::rewind`).
//!
//! A bounded run (`idle_exit`) ends as drained once the member, joined,
//! has held no lane for the whole grace period.
//!
//! *Draining*: stop polling the source, send `Shutdown` to every driver,
//! tell main (which joins the drivers and drains the sink), keep folding
//! acknowledgements, and once main reports the sink drained run the final
//! drain + commit + `flush_commits`, every wait of the source bounded by
//! the shutdown deadline (`Source::shutdown_deadline`), and send main the
//! exit before the source is dropped.

mod commits;
mod idle;

use super::control::{DriverEvent, ThreadControl, ThreadEnv};
use super::resume::ResumeRetry;
use crate::checkpoint::{AckOutcome, Checkpointer, Removed};
use crate::clock::{self, SharedClock};
use crate::error::{FatalError, Fault};
use crate::health::{Heartbeat, SourceReadiness};
use crate::metrics::Metrics;
use crate::record::{PartitionId, Watermark};
use crate::sink::{AckEvent, AckReceiver, DrainReport};
use crate::source::{BarrierOutcome, DrainBarrier, Lane, LaneId, Revoker, Source, SourceEvent};
use crossbeam_channel::{never, select, Receiver, Sender};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tunables of the controller.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ControllerConfig {
    pub poll_timeout: Duration,
    pub commit_interval: Duration,
    pub commit_coalesce: Option<Duration>,
    pub shutdown_timeout: Duration,
    pub revoke_timeout: Duration,
    pub pending_ceiling: i64,
    /// End a run that holds no lane this long after joining.
    pub idle_exit: Option<Duration>,
}

/// Controller → main.
pub(crate) enum ToMain {
    /// Drivers were told to shut down; wait on `barrier`, join them, drain
    /// the sink by `deadline`.
    Draining {
        barrier: DrainBarrier,
        deadline: Instant,
    },
    /// The final commit is done (or failed): the exit, sent before the
    /// source is dropped, whose close may wait on an unanswering broker.
    Finished(ControllerExit),
}

/// The final commit gets at least this long, even when the drain used the
/// whole shutdown budget: a missed final commit turns acknowledged rows
/// into duplicates. Main waits for the controller's exit this much past
/// the shutdown deadline (plus a grace).
pub(crate) const FINAL_COMMIT_FLOOR: Duration = Duration::from_secs(2);

/// Main → controller.
pub(crate) enum FromMain {
    /// The sink drained (or could not be drained: `None`).
    SinkDrained(Option<DrainReport>),
}

/// What the controller hands back when it stops.
#[derive(Debug)]
pub(crate) struct ControllerExit {
    pub failure: Option<FatalError>,
    pub drained: bool,
    pub unacknowledged_rows: i64,
    pub final_watermarks: Vec<(PartitionId, i64)>,
    pub commit_error: Option<String>,
}

/// Everything the controller shares with other threads: its channels to
/// the drivers, from the sink (acknowledgements) and to and from main, and
/// the flags it reads (shutdown) and writes (readiness).
pub(crate) struct ControllerLinks<L> {
    pub drivers: Vec<Sender<ThreadControl<L>>>,
    pub acks: AckReceiver,
    pub events: Receiver<DriverEvent>,
    pub to_main: Sender<ToMain>,
    pub from_main: Receiver<FromMain>,
    pub shutdown: Arc<AtomicBool>,
    pub readiness: Arc<SourceReadiness>,
}

/// Everything of the controller except the source, so the source can be
/// polled with `&mut core` as its [`Revoker`].
pub(crate) struct Core<L> {
    checkpointer: Checkpointer,
    drivers: Vec<Sender<ThreadControl<L>>>,
    load: Vec<usize>,
    home: HashMap<LaneId, (usize, PartitionId)>,
    paused: HashSet<LaneId>,
    /// Paused lanes whose resume the source refused, retried on our turns.
    resume_retry: ResumeRetry,
    acks: AckReceiver,
    events: Receiver<DriverEvent>,
    failure: Option<FatalError>,
    drained: bool,
    /// Drivers are gone and the sink drained: revocations hand back the
    /// acknowledged watermarks without stopping anything.
    draining: bool,
    /// Per partition, the highest watermark counted as committed (gauges,
    /// lag, the exit report): confirmed by the broker, or sent by a source
    /// that does not report confirmations and not refused since.
    committed: BTreeMap<PartitionId, Watermark>,
    /// Per partition, the highest watermark the broker confirmed.
    confirmed: BTreeMap<PartitionId, Watermark>,
    /// Partitions with per-partition gauges set (removed once not owned).
    gauged: HashSet<PartitionId>,
    /// Since when this member, joined, holds no lane (`idle_exit`).
    idle_since: Option<Instant>,
    /// Owned lanes a batch of which the sink gave up on (exactly-once: a
    /// later owner fenced the partition): their watermark cannot move
    /// until the lane is revoked. Reported in `/readyz` and a gauge.
    blocked: BTreeMap<LaneId, PartitionId>,
    /// Lanes whose rows the sink lost (`AckEvent::Rewind`), to be read
    /// again from their acknowledged watermark on the controller's turn.
    rewinds: BTreeSet<LaneId>,
    /// The shutdown deadline, once draining began: what is left of it
    /// bounds the waits of revocations and losses while draining.
    stop_by: Option<Instant>,
    metrics: Arc<Metrics>,
    readiness: Arc<SourceReadiness>,
    config: ControllerConfig,
    clock: SharedClock,
}

pub(crate) struct Controller<S: Source> {
    source: S,
    core: Core<S::Lane>,
    shutdown: Arc<AtomicBool>,
    to_main: Sender<ToMain>,
    from_main: Receiver<FromMain>,
    heartbeat: Heartbeat,
}

impl<S: Source> Controller<S> {
    pub(crate) fn new(
        source: S,
        links: ControllerLinks<S::Lane>,
        env: ThreadEnv,
        config: ControllerConfig,
    ) -> Self {
        let n = links.drivers.len();
        Self {
            source,
            core: Core {
                checkpointer: Checkpointer::new(),
                drivers: links.drivers,
                load: vec![0; n],
                home: HashMap::new(),
                paused: HashSet::new(),
                resume_retry: ResumeRetry::default(),
                acks: links.acks,
                events: links.events,
                failure: None,
                drained: false,
                draining: false,
                committed: BTreeMap::new(),
                confirmed: BTreeMap::new(),
                gauged: HashSet::new(),
                idle_since: None,
                blocked: BTreeMap::new(),
                rewinds: BTreeSet::new(),
                stop_by: None,
                metrics: env.metrics,
                readiness: links.readiness,
                config,
                clock: env.clock,
            },
            shutdown: links.shutdown,
            to_main: links.to_main,
            from_main: links.from_main,
            heartbeat: env.heartbeat,
        }
    }

    /// Consume, drain, and hand main the exit; the source is dropped last
    /// (closing a Kafka consumer waits on the broker), so main never waits
    /// for it past the deadline.
    pub(crate) fn run(mut self) {
        self.consume();
        // The shutdown sequence is bounded by its own deadline; liveness
        // watches the steady state.
        self.heartbeat.finish();
        let exit = self.drain_and_stop();
        let _ = self.to_main.send(ToMain::Finished(exit));
        drop(self);
    }

    /// State `Consuming`.
    fn consume(&mut self) {
        let mut next_commit = self.core.clock.now() + self.core.config.commit_interval;
        let coalesce = self
            .core
            .config
            .commit_coalesce
            .map(|c| c.min(self.core.config.commit_interval));
        let mut next_eager = self.core.clock.now();
        loop {
            self.heartbeat.beat();
            if self.shutdown.load(Ordering::Acquire) {
                tracing::info!("shutdown requested; draining");
                return;
            }
            if self.core.failure.is_some() {
                return;
            }
            if self.core.drained {
                tracing::info!("source drained; finishing");
                return;
            }
            if self.core.idle_expired() {
                return;
            }
            match self
                .source
                .poll_events(self.core.config.poll_timeout, &mut self.core)
            {
                Ok(events) => {
                    for event in events {
                        self.core.on_source_event(event);
                    }
                }
                Err(e) if e.is_retriable() => {
                    tracing::warn!(error = %e, "source poll failed; retrying");
                }
                Err(e) => {
                    self.core
                        .fail(FatalError::new("source", e.to_string(), Fault::External));
                }
            }
            self.core.apply_driver_events(&mut self.source);
            self.core.retry_resumes(&mut self.source);
            self.core.apply_acks();
            self.core.rewind_lanes(&mut self.source);
            let now = self.core.clock.now();
            if now >= next_commit {
                self.core.commit(&mut self.source, false);
                self.core.update_partition_gauges(&mut self.source);
                next_commit = self.core.clock.now() + self.core.config.commit_interval;
                next_eager = now + coalesce.unwrap_or_default();
            } else if let Some(window) = coalesce.filter(|_| now >= next_eager) {
                // A watermark moved: commit it now rather than on the tick.
                if self.core.commit(&mut self.source, false) {
                    next_eager = now + window;
                }
            }
        }
    }

    /// States `Draining` and `Stopped`.
    fn drain_and_stop(&mut self) -> ControllerExit {
        self.core
            .readiness
            .shutting_down
            .store(true, Ordering::Release);
        let deadline = self.core.clock.now() + self.core.config.shutdown_timeout;
        self.core.stop_by = Some(deadline);
        // A driver waiting inside a poll (a truncate's barrier) gives up,
        // so it reads the shutdown.
        let all: Vec<LaneId> = self.core.home.keys().copied().collect();
        self.core.checkpointer.stopping(&all);
        let barrier = DrainBarrier::new(self.core.drivers.len());
        for tx in &self.core.drivers {
            let _ = tx.send(ThreadControl::Shutdown {
                barrier: barrier.clone(),
                deadline,
            });
        }
        let main_alive = self
            .to_main
            .send(ToMain::Draining { barrier, deadline })
            .is_ok();
        let drain_report = if main_alive {
            self.await_sink_drain()
        } else {
            None
        };
        // Every worker is done: whatever they acknowledged is in the channel.
        self.core.apply_acks();
        self.core.draining = true;
        while let Ok(ev) = self.core.events.try_recv() {
            self.core.on_driver_event_draining(ev);
        }
        let commit_error = self.core.final_commit(&mut self.source, deadline);
        if let Some(report) = &drain_report {
            if !report.is_clean() && self.core.failure.is_none() {
                tracing::error!(
                    abandoned_rows = report.abandoned_rows,
                    "sink abandoned rows at the shutdown deadline; their offsets are not committed and will replay"
                );
            }
        }
        let unacknowledged_rows = self.core.checkpointer.total_pending_rows();
        ControllerExit {
            failure: self.core.failure.take(),
            drained: self.core.drained,
            unacknowledged_rows,
            final_watermarks: self
                .core
                .committed
                .iter()
                .map(|(p, w)| (p.clone(), w.0))
                .collect(),
            commit_error,
        }
    }
}

impl<S: Source> Controller<S> {
    /// Fold acknowledgements and driver reports while main joins the
    /// drivers and drains the sink, until main reports the drain.
    ///
    /// Main joins the drivers first, so the driver-event channel
    /// disconnects early, and the sink may drop its acknowledgement senders
    /// before main reports: a disconnected channel is always ready to a
    /// `select!`, so each one is swapped for `never()` once closed, or this
    /// loop would spin a core for the whole drain.
    fn await_sink_drain(&mut self) -> Option<DrainReport> {
        let mut acks = self.core.acks.clone();
        let mut events = self.core.events.clone();
        loop {
            select! {
                recv(self.from_main) -> msg => {
                    return match msg {
                        Ok(FromMain::SinkDrained(r)) => r,
                        Err(_) => None,
                    };
                }
                recv(acks) -> ev => match ev {
                    Ok(ev) => self.core.apply_ack(ev),
                    Err(_) => acks = never(),
                },
                recv(events) -> ev => match ev {
                    Ok(ev) => self.core.on_driver_event_draining(ev),
                    Err(_) => events = never(),
                },
            }
        }
    }
}

impl<L: Lane> Core<L> {
    fn fail(&mut self, error: FatalError) {
        if self.failure.is_none() {
            tracing::error!(component = %error.component, reason = %error.reason, "fatal error; stopping the pipeline");
            self.failure = Some(error);
        }
    }

    fn on_source_event(&mut self, event: SourceEvent<L>) {
        match event {
            SourceEvent::Assigned(lanes) => {
                self.readiness.joined.store(true, Ordering::Release);
                if !lanes.is_empty() {
                    self.metrics.rebalances.with_label_values(&["assign"]).inc();
                }
                if self.failure.is_some() {
                    // Stopping: a revoked lane's poll may still run (see
                    // `poll_outlived_its_lane`), so no lane starts again.
                    tracing::info!(
                        lanes = lanes.len(),
                        "partitions assigned while the pipeline fails; not started"
                    );
                    return;
                }
                for lane in lanes {
                    self.add_lane(lane);
                }
            }
            SourceEvent::CommitReady(lanes) => {
                let drivers: HashSet<usize> = lanes
                    .iter()
                    .filter_map(|l| self.home.get(l).map(|h| h.0))
                    .collect();
                for d in drivers {
                    let _ = self.drivers[d].send(ThreadControl::FlushNow);
                }
            }
            SourceEvent::LanesRetired(lanes) => {
                self.checkpointer.stopping(&lanes);
                for (driver, ids) in self.group_by_driver(&lanes) {
                    let _ = self.drivers[driver].send(ThreadControl::DropLanes { lanes: ids });
                }
                // Retired: the input ended, no one reads the partition on.
                let by = self.clock.now() + self.config.revoke_timeout;
                for lane in &lanes {
                    if self.forget(*lane, by).is_some_and(|r| r.still_polling) {
                        tracing::warn!(%lane, "a poll of a retired lane was still running at the deadline");
                    }
                }
            }
            SourceEvent::Lost(lanes) => {
                self.metrics.rebalances.with_label_values(&["lost"]).inc();
                tracing::warn!(?lanes, "partitions lost without revocation; their unacknowledged rows replay on the new owner");
                let deadline = self.clock.now();
                self.checkpointer.stopping(&lanes);
                for (driver, ids) in self.group_by_driver(&lanes) {
                    let barrier = DrainBarrier::new(ids.len());
                    let _ = self.drivers[driver].send(ThreadControl::StopLanes {
                        lanes: ids,
                        barrier,
                        deadline,
                    });
                }
                let by = deadline + self.config.revoke_timeout;
                for lane in &lanes {
                    self.hand_over(*lane, by);
                }
            }
            SourceEvent::Drained => self.drained = true,
            SourceEvent::CommitConfirmed(watermarks) => self.committed_ok(&watermarks, true),
            SourceEvent::CommitFailed { watermarks, error } => {
                self.commit_refused(&watermarks, &error);
            }
        }
    }

    fn add_lane(&mut self, lane: L) {
        let id = lane.id();
        let partition = lane.partition().clone();
        let gate = self
            .checkpointer
            .add_lane(id, partition.clone(), self.config.pending_ceiling);
        let driver = (0..self.load.len())
            .min_by_key(|&d| self.load[d])
            .unwrap_or(0);
        self.load[driver] += 1;
        self.home.insert(id, (driver, partition.clone()));
        self.metrics.lanes_active.inc();
        tracing::info!(lane = %id, %partition, driver, "lane assigned");
        let _ = self.drivers[driver].send(ThreadControl::AddLane {
            lane,
            gate: Some(gate),
        });
    }

    /// Stop tracking a lane (retired, lost or revoked), waiting for a
    /// poll of it in progress until `deadline` (on the runtime's clock).
    fn forget(&mut self, lane: LaneId, deadline: Instant) -> Option<Removed> {
        if let Some((driver, _)) = self.home.remove(&lane) {
            self.load[driver] = self.load[driver].saturating_sub(1);
            self.metrics.lanes_active.dec();
        }
        if self.paused.remove(&lane) {
            self.metrics.lanes_paused.dec();
        }
        if self.blocked.remove(&lane).is_some() {
            self.publish_blocked();
        }
        self.resume_retry.clear(&[lane]);
        let real = Instant::now() + clock::until(&*self.clock, deadline);
        self.checkpointer.remove_lane(lane, real)
    }

    /// [`forget`](Self::forget) a lane whose partition may be handed out
    /// again (revoked or lost); its final acknowledged watermark.
    fn hand_over(
        &mut self,
        lane: LaneId,
        deadline: Instant,
    ) -> Option<(PartitionId, Option<Watermark>)> {
        let removed = self.forget(lane, deadline)?;
        if removed.still_polling {
            self.poll_outlived_its_lane(lane, &removed.partition);
        }
        Some((removed.partition, removed.acked))
    }

    /// A driver still polls `lane` past the deadline of its removal (it is
    /// blocked inside the poll: a decode-stage dead letter waiting for its
    /// destination, say). Its gate is closed, but the poll in progress may
    /// take messages of the partition's next assignment from the client's
    /// fetch queue and hand them out under the old lane, whose
    /// acknowledgements are ignored: the next owner would commit past
    /// them. So the pipeline stops (no lane starts after a failure) rather
    /// than wait on the driver with every commit held up.
    fn poll_outlived_its_lane(&mut self, lane: LaneId, partition: &PartitionId) {
        let reason = format!(
            "{partition}: a poll of its lane {lane} was still running at the deadline of its \
             revocation (the driver thread is blocked inside it); stopping so that no message of \
             a later assignment goes out under the old lane. What it had acknowledged is committed; \
             the rest replays"
        );
        if self.stop_by.is_some() || self.failure.is_some() {
            tracing::warn!(%partition, %lane, "a poll of a removed lane was still running at the deadline; the pipeline is already stopping");
            return;
        }
        self.fail(FatalError::new("controller", reason, Fault::External));
    }

    /// A batch of `ranges` was given up by the sink. While this member
    /// owns the lane and is not stopping, that blocks the lane's
    /// watermark for as long as it owns it: say so, once.
    fn given_up(&mut self, ranges: &[crate::checkpoint::AckRange]) {
        if self.stop_by.is_some() || self.readiness.shutting_down.load(Ordering::Acquire) {
            return;
        }
        let mut new = false;
        for r in ranges {
            let Some((_, partition)) = self.home.get(&r.lane) else {
                continue;
            };
            if self.blocked.contains_key(&r.lane) {
                continue;
            }
            tracing::error!(%partition, lane = %r.lane, first = r.start.0, last = r.end.0, "a batch of an owned partition was given up (exactly-once: a later owner fenced it); its offsets are not committed past it until the partition is reassigned");
            self.blocked.insert(r.lane, partition.clone());
            new = true;
        }
        if new {
            self.publish_blocked();
        }
    }

    /// Stop `lanes` on their drivers (each flushes its chain and drops
    /// them), waiting for the drivers until `deadline`.
    fn stop_lanes(&mut self, lanes: &[LaneId], deadline: Instant) {
        let by_driver = self.group_by_driver(lanes);
        let expected: usize = by_driver.values().map(Vec::len).sum();
        let barrier = DrainBarrier::new(expected);
        self.checkpointer.stopping(lanes);
        for (driver, ids) in by_driver {
            let _ = self.drivers[driver].send(ThreadControl::StopLanes {
                lanes: ids,
                barrier: barrier.clone(),
                deadline,
            });
        }
        // The barrier sleeps in real time: give it what is left on our clock.
        let real_deadline = Instant::now() + clock::until(&*self.clock, deadline);
        if let BarrierOutcome::TimedOut { missing } = barrier.wait_until(real_deadline) {
            tracing::warn!(missing, "drivers did not stop lanes before the deadline");
        }
    }

    /// Read again the partitions of the lanes whose rows the sink lost
    /// ([`AckEvent::Rewind`]): stop each lane on its driver, forget it
    /// (acknowledgements of it are ignored from then on), and start a new
    /// lane of the partition from the old one's acknowledged watermark.
    /// Rows of the old lane past the watermark that the sink still
    /// inserts are read again too: duplicates, never a gap.
    fn rewind_lanes<S: Source<Lane = L>>(&mut self, source: &mut S) {
        if self.rewinds.is_empty() {
            return;
        }
        let lanes: Vec<LaneId> = std::mem::take(&mut self.rewinds)
            .into_iter()
            .filter(|l| self.home.contains_key(l))
            .collect();
        if lanes.is_empty() || self.failure.is_some() {
            return;
        }
        let deadline = self.clock.now() + self.config.revoke_timeout;
        self.stop_lanes(&lanes, deadline);
        for lane in lanes {
            let Some((partition, acked)) = self.hand_over(lane, deadline) else {
                continue;
            };
            if self.failure.is_some() {
                // A poll outlived its lane: stopping, the rest replays.
                return;
            }
            match source.rewind(lane, acked) {
                Ok(Some(new)) => {
                    self.metrics.rewinds.inc();
                    tracing::warn!(
                        %partition,
                        lane = %lane,
                        new_lane = %new.id(),
                        from = ?acked.map(|w| w.0),
                        "partition read again from its acknowledged watermark: the sink lost rows of it it could not insert"
                    );
                    self.add_lane(new);
                }
                Ok(None) => {
                    tracing::info!(%partition, lane = %lane, "partition to read again is no longer owned; its next owner reads it from the committed offset");
                }
                Err(e) => {
                    let reason = format!(
                        "{partition}: reading it again from its acknowledged watermark failed: {e}"
                    );
                    self.fail(FatalError::new("source", reason, Fault::External));
                    return;
                }
            }
        }
    }

    /// The blocked lanes, to `/readyz` and the gauge.
    fn publish_blocked(&self) {
        self.metrics.lanes_blocked.set(self.blocked.len() as i64);
        let lines = (self.blocked.iter())
            .map(|(lane, p)| format!("{p} (lane {lane}): a batch was given up while this member owns it; its offsets cannot be committed until it is reassigned"))
            .collect();
        if let Ok(mut b) = self.readiness.blocked.lock() {
            *b = lines;
        }
    }

    fn group_by_driver(&self, lanes: &[LaneId]) -> BTreeMap<usize, Vec<LaneId>> {
        let mut by: BTreeMap<usize, Vec<LaneId>> = BTreeMap::new();
        for lane in lanes {
            if let Some((d, _)) = self.home.get(lane) {
                by.entry(*d).or_default().push(*lane);
            }
        }
        by
    }

    fn apply_driver_events<S: Source<Lane = L>>(&mut self, source: &mut S) {
        while let Ok(ev) = self.events.try_recv() {
            match ev {
                DriverEvent::PauseLanes { lanes } => self.pause_lanes(source, &lanes),
                DriverEvent::ResumeLanes { lanes } => self.resume_lanes(source, &lanes),
                DriverEvent::Fatal { thread, error } => {
                    tracing::error!(driver = thread, "driver reported a fatal error");
                    self.fail(error);
                }
            }
        }
    }

    fn pause_lanes<S: Source<Lane = L>>(&mut self, source: &mut S, lanes: &[LaneId]) {
        // A lane whose resume was refused is still paused at the source,
        // which is what its driver wants again: stop retrying it.
        self.resume_retry.clear(lanes);
        let new: Vec<LaneId> = lanes
            .iter()
            .filter(|l| self.home.contains_key(l) && !self.paused.contains(l))
            .copied()
            .collect();
        if new.is_empty() {
            return;
        }
        match source.pause(&new) {
            Ok(()) => {
                self.metrics.lanes_paused.add(new.len() as i64);
                self.paused.extend(new);
            }
            Err(e) => {
                tracing::warn!(error = %e, "pausing lanes failed; the driver keeps them unpolled")
            }
        }
    }

    /// Resume lanes at the source; a refusal is retried by
    /// [`retry_resumes`](Self::retry_resumes), since the driver asks once.
    fn resume_lanes<S: Source<Lane = L>>(&mut self, source: &mut S, lanes: &[LaneId]) {
        let (was, not_paused): (Vec<LaneId>, Vec<LaneId>) =
            lanes.iter().partition(|l| self.paused.contains(l));
        self.resume_retry.clear(&not_paused);
        if was.is_empty() {
            return;
        }
        match source.resume(&was) {
            Ok(()) => {
                self.metrics.lanes_paused.sub(was.len() as i64);
                for l in &was {
                    self.paused.remove(l);
                }
                self.resume_retry.clear(&was);
            }
            Err(e) => {
                tracing::warn!(error = %e, lanes = was.len(), "resuming lanes failed; retrying with backoff");
                self.resume_retry.refused(&was, self.clock.now());
            }
        }
    }

    /// Try again the resumes the source refused, once their backoff passed.
    fn retry_resumes<S: Source<Lane = L>>(&mut self, source: &mut S) {
        let due = self.resume_retry.take_due(self.clock.now());
        if !due.is_empty() {
            self.resume_lanes(source, &due);
        }
    }

    fn on_driver_event_draining(&mut self, ev: DriverEvent) {
        if let DriverEvent::Fatal { error, .. } = ev {
            self.fail(error);
        }
    }

    fn apply_acks(&mut self) {
        while let Ok(ev) = self.acks.try_recv() {
            self.apply_ack(ev);
        }
    }

    fn apply_ack(&mut self, ev: AckEvent) {
        match ev {
            AckEvent::Acked(ranges) => {
                for r in &ranges {
                    if self.checkpointer.ack(r) == AckOutcome::Duplicate {
                        tracing::warn!(lane = %r.lane, seq = r.seq, "duplicate acknowledgement ignored");
                    }
                }
            }
            AckEvent::Abandoned(ranges) => {
                for r in &ranges {
                    self.checkpointer.fail(r);
                }
                self.given_up(&ranges);
            }
            AckEvent::Rewind(ranges) => {
                // Never committed past, whatever follows: the lane is read
                // again under a new one, or (stopping) replays from the
                // committed offsets on the next start.
                for r in &ranges {
                    self.checkpointer.fail(r);
                }
                if self.draining || self.stop_by.is_some() || self.failure.is_some() {
                    return;
                }
                let owned = ranges
                    .iter()
                    .map(|r| r.lane)
                    .filter(|l| self.home.contains_key(l));
                self.rewinds.extend(owned);
            }
            AckEvent::Fatal { ranges, error } => {
                for r in &ranges {
                    self.checkpointer.fail(r);
                }
                self.fail(error);
            }
        }
    }

    /// Poll the source once while draining: new assignments are not
    /// started (this member is leaving), lost lanes are forgotten.
    fn serve_source_while_draining<S: Source<Lane = L>>(&mut self, source: &mut S) {
        let events = match source.poll_events(Duration::from_millis(200), self) {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(error = %e, "source poll failed while draining");
                return;
            }
        };
        for event in events {
            match event {
                SourceEvent::Assigned(lanes) => {
                    tracing::info!(
                        lanes = lanes.len(),
                        "partitions assigned while shutting down; not started"
                    );
                }
                SourceEvent::Lost(lanes) => {
                    let by = self.stop_by.unwrap_or_else(|| self.clock.now());
                    for lane in lanes {
                        self.hand_over(lane, by);
                    }
                }
                _ => {}
            }
        }
    }
}

impl<L: Lane> Revoker for Core<L> {
    fn revoke(&mut self, lanes: &[LaneId]) -> Vec<(PartitionId, Watermark)> {
        self.metrics.rebalances.with_label_values(&["revoke"]).inc();
        if self.draining {
            // Drivers already flushed and left, the sink already drained:
            // what is acknowledged now is final.
            let mut out = Vec::new();
            let by = self.stop_by.unwrap_or_else(|| self.clock.now());
            for lane in lanes {
                if let Some((partition, Some(wm))) = self.hand_over(*lane, by) {
                    out.push((partition, wm));
                }
            }
            self.committed_ok(&out, true);
            return out;
        }
        let deadline = self.clock.now() + self.config.revoke_timeout;
        self.stop_lanes(lanes, deadline);
        // Wait for the sink to acknowledge what the revoked lanes sent.
        loop {
            self.apply_acks();
            let pending = self.checkpointer.pending_rows(lanes);
            if pending <= 0 {
                break;
            }
            let now = self.clock.now();
            if now >= deadline {
                tracing::warn!(pending_rows = pending, "revoke deadline passed with rows unacknowledged; they will replay on the new owner");
                break;
            }
            if let Ok(ev) = self.acks.recv_timeout(deadline - now) {
                self.apply_ack(ev);
            }
        }
        let mut out = Vec::new();
        for lane in lanes {
            // Committed even when unchanged since the last tick: the
            // revocation's commit is synchronous, so it is known to be
            // persisted before the partition changes hands.
            if let Some((partition, Some(wm))) = self.hand_over(*lane, deadline) {
                out.push((partition, wm));
            }
        }
        tracing::info!(lanes = lanes.len(), commits = out.len(), "lanes revoked");
        self.committed_ok(&out, true);
        out
    }
}
