//! In-memory fakes for runtime tests: a bounded or unbounded source over
//! vectors of payloads, a line-copying encoder, and a recording sink whose
//! workers can be told to stall.
//!
//! What the fakes do is recorded in [`Watched`] logs: every change wakes
//! the tests waiting on a condition, so no test sleeps to let something
//! happen.

use super::builder::{ChainFactory, SinkRuntime};
use super::chain::{Chain, ChainCtx, EncodeChain};
use crate::checkpoint::AckRange;
use crate::error::SourceError;
use crate::record::{Message, PartitionId, Watermark};
use crate::sink::{
    ack_channel, AckEvent, AckReceiver, AckSender, Chunk, DrainReport, EncodeFailure, Encoded,
    RowEncode, ShardQueues,
};
use crate::source::{Deliver, Lane, LaneError, LaneId, LanePoll, Revoker, Source, SourceEvent};
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A fake's record, shared with the test thread: every guard dropped after
/// [`lock`](Self::lock) wakes whoever waits on a condition of it.
#[derive(Debug, Default)]
pub(crate) struct Watched<T> {
    state: Mutex<T>,
    changed: Condvar,
}

/// A lock on a [`Watched`] record; dropping it wakes the waiters.
pub(crate) struct WatchGuard<'a, T> {
    guard: Option<MutexGuard<'a, T>>,
    changed: &'a Condvar,
}

impl<T> std::ops::Deref for WatchGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.guard.as_ref().expect("held until drop")
    }
}

impl<T> std::ops::DerefMut for WatchGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.guard.as_mut().expect("held until drop")
    }
}

impl<T> Drop for WatchGuard<'_, T> {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.changed.notify_all();
    }
}

impl<T> Watched<T> {
    /// Lock the record (to read or change it).
    pub(crate) fn lock(&self) -> WatchGuard<'_, T> {
        WatchGuard {
            guard: Some(self.state.lock().unwrap_or_else(PoisonError::into_inner)),
            changed: &self.changed,
        }
    }

    /// Wait until `cond` holds, at most `timeout`; whether it held.
    pub(crate) fn wait_until(&self, timeout: Duration, mut cond: impl FnMut(&T) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if cond(&state) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Wait until `cond` holds; panics naming `what` after `timeout`.
    pub(crate) fn wait_for(&self, what: &str, timeout: Duration, cond: impl FnMut(&T) -> bool) {
        assert!(
            self.wait_until(timeout, cond),
            "{what}: not within {timeout:?}"
        );
    }
}

/// Everything the fake source did, for assertions.
#[derive(Debug, Default)]
pub(crate) struct SourceLog {
    pub commits: Vec<(PartitionId, Watermark, bool)>,
    /// Lanes paused at the source and neither resumed nor retired.
    pub paused: HashSet<LaneId>,
    /// Lanes retired while paused: this fake's lanes ignore a pause, so
    /// a lane paused before its end still reads to it, and the driver
    /// does not resume an ended lane (its pause is forgotten with it).
    pub retired_paused: HashSet<LaneId>,
    pub pause_calls: usize,
    pub revoked_commits: Vec<(PartitionId, Watermark)>,
    /// `poll_events` calls (the controller's loop turns).
    pub polls: usize,
    /// Messages the lanes handed to their chains.
    pub delivered: usize,
    /// Revocations begun (the revoker was called) and returned.
    pub revocations_started: usize,
    pub revocations_done: usize,
    /// Lanes whose last pause/resume call at the source was a refused
    /// resume (still paused there).
    pub resume_refused: HashSet<LaneId>,
    /// Asynchronous commits the broker refused (reported by the next poll).
    pub failed_commits: Vec<(PartitionId, Watermark)>,
    /// Polls that blocked on `FakeSource::block_first`.
    pub blocked_polls: usize,
    /// Lanes read again ([`Source::rewind`]), with where from.
    pub rewinds: Vec<(LaneId, Option<Watermark>)>,
}

pub(crate) struct FakeSource {
    partitions: Vec<(PartitionId, Arc<Vec<Vec<u8>>>)>,
    bounded: bool,
    assigned: bool,
    next_lane: u64,
    lanes: HashMap<LaneId, PartitionId>,
    ended_tx: Sender<(LaneId, i64)>,
    ended_rx: Receiver<(LaneId, i64)>,
    ended: HashMap<LaneId, i64>,
    retired: HashSet<LaneId>,
    committed: HashMap<PartitionId, i64>,
    pub log: Arc<Watched<SourceLog>>,
    /// When set, the next poll revokes every lane through the revoker.
    pub revoke_now: Arc<AtomicBool>,
    /// Refuse this many synchronous commits with a retriable error (a
    /// group generation gone stale during a rebalance); each refusal is
    /// cleared by the next poll, as serving the rebalance would.
    pub refuse_sync_commits: usize,
    stale_generation: bool,
    /// While set, the lane of the first partition delivers nothing.
    pub hold_first: Arc<AtomicBool>,
    /// While set, a poll of the first partition's lane blocks inside the
    /// poll (a driver stuck in a decode-stage wait).
    pub block_first: Arc<AtomicBool>,
    /// While set, every resume fails (a transient client error).
    pub refuse_resumes: Arc<AtomicBool>,
    /// The broker refuses this many of the next asynchronous commits:
    /// `commit` returns Ok (the request was queued), the next poll reports
    /// `CommitFailed`.
    pub fail_async_commits: Arc<AtomicUsize>,
    /// Report the broker's confirmation of asynchronous commits
    /// (`CommitConfirmed`, on the next poll).
    pub confirm_async: bool,
    /// Commit outcomes the next poll reports.
    outcomes: Vec<SourceEvent<FakeLane>>,
}

impl FakeSource {
    pub(crate) fn new(partitions: Vec<Vec<Vec<u8>>>, bounded: bool) -> Self {
        let (ended_tx, ended_rx) = unbounded();
        Self {
            partitions: partitions
                .into_iter()
                .enumerate()
                .map(|(i, d)| (PartitionId::new("fake", i as i32), Arc::new(d)))
                .collect(),
            bounded,
            assigned: false,
            next_lane: 0,
            lanes: HashMap::new(),
            ended_tx,
            ended_rx,
            ended: HashMap::new(),
            retired: HashSet::new(),
            committed: HashMap::new(),
            log: Arc::default(),
            revoke_now: Arc::default(),
            refuse_sync_commits: 0,
            stale_generation: false,
            hold_first: Arc::default(),
            block_first: Arc::default(),
            refuse_resumes: Arc::default(),
            fail_async_commits: Arc::default(),
            confirm_async: false,
            outcomes: Vec::new(),
        }
    }
}

pub(crate) struct FakeLane {
    id: LaneId,
    partition: PartitionId,
    data: Arc<Vec<Vec<u8>>>,
    pos: usize,
    bounded: bool,
    ended_tx: Sender<(LaneId, i64)>,
    told: bool,
    log: Arc<Watched<SourceLog>>,
    /// While this is set, the lane delivers nothing.
    hold: Option<Arc<AtomicBool>>,
    /// While this is set, a poll blocks until it is cleared.
    block: Option<Arc<AtomicBool>>,
}

impl FakeLane {
    /// An unbounded lane of `data`, outside any source (driver tests).
    pub(crate) fn standalone(id: LaneId, partition: PartitionId, data: Vec<Vec<u8>>) -> Self {
        let (ended_tx, _) = crossbeam_channel::unbounded();
        Self {
            id,
            partition,
            data: Arc::new(data),
            pos: 0,
            bounded: false,
            ended_tx,
            told: false,
            log: Arc::default(),
            hold: None,
            block: None,
        }
    }
}

impl Lane for FakeLane {
    fn id(&self) -> LaneId {
        self.id
    }

    fn partition(&self) -> &PartitionId {
        &self.partition
    }

    fn poll(&mut self, max: usize, deliver: &mut Deliver<'_>) -> Result<LanePoll, LaneError> {
        if let Some(block) = self.block.as_ref().filter(|b| b.load(Ordering::Acquire)) {
            self.log.lock().blocked_polls += 1;
            while block.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if self
            .hold
            .as_ref()
            .is_some_and(|h| h.load(Ordering::Acquire))
        {
            return Ok(LanePoll::Delivered(0));
        }
        let mut n = 0;
        while n < max && self.pos < self.data.len() {
            let msg = Message {
                topic: &self.partition.topic,
                partition: self.partition.partition,
                offset: self.pos as i64,
                timestamp_ms: None,
                key: None,
                payload: Some(&self.data[self.pos]),
                headers: None,
            };
            let delivered = deliver(&msg);
            if delivered.is_err() && n > 0 {
                self.log.lock().delivered += n;
            }
            delivered?;
            self.pos += 1;
            n += 1;
        }
        if n > 0 {
            self.log.lock().delivered += n;
        }
        if n == 0 && self.bounded && self.pos == self.data.len() {
            if !self.told {
                self.told = true;
                let _ = self.ended_tx.send((self.id, self.pos as i64));
            }
            return Ok(LanePoll::Ended);
        }
        Ok(LanePoll::Delivered(n))
    }
}

impl Source for FakeSource {
    type Lane = FakeLane;

    fn poll_events(
        &mut self,
        timeout: Duration,
        revoker: &mut dyn Revoker,
    ) -> Result<Vec<SourceEvent<FakeLane>>, SourceError> {
        self.log.lock().polls += 1;
        let mut events = Vec::new();
        self.stale_generation = false;
        if !self.assigned {
            self.assigned = true;
            let mut lanes = Vec::new();
            for (i, (partition, data)) in self.partitions.iter().enumerate() {
                self.next_lane += 1;
                let id = LaneId(self.next_lane);
                self.lanes.insert(id, partition.clone());
                lanes.push(FakeLane {
                    id,
                    partition: partition.clone(),
                    data: data.clone(),
                    pos: 0,
                    bounded: self.bounded,
                    ended_tx: self.ended_tx.clone(),
                    told: false,
                    log: self.log.clone(),
                    hold: (i == 0).then(|| self.hold_first.clone()),
                    block: (i == 0).then(|| self.block_first.clone()),
                });
            }
            events.push(SourceEvent::Assigned(lanes));
            return Ok(events);
        }
        if self.revoke_now.swap(false, Ordering::AcqRel) {
            let ids: Vec<LaneId> = self.lanes.keys().copied().collect();
            self.log.lock().revocations_started += 1;
            let wms = revoker.revoke(&ids);
            self.log.lock().revocations_done += 1;
            self.commit(&wms, true)?;
            self.log.lock().revoked_commits.extend(wms);
            self.lanes.clear();
            self.ended.clear();
            self.retired.clear();
            while self.ended_rx.try_recv().is_ok() {}
            return Ok(events);
        }
        events.append(&mut self.outcomes);
        std::thread::sleep(timeout.min(Duration::from_millis(2)));
        let mut ready = Vec::new();
        while let Ok((lane, end)) = self.ended_rx.try_recv() {
            self.ended.insert(lane, end);
            ready.push(lane);
        }
        if !ready.is_empty() {
            events.push(SourceEvent::CommitReady(ready));
        }
        let mut retire = Vec::new();
        for (lane, end) in &self.ended {
            if self.retired.contains(lane) {
                continue;
            }
            let Some(partition) = self.lanes.get(lane) else {
                continue; // revoked since it ended
            };
            let done = *end == 0 || self.committed.get(partition).is_some_and(|c| c >= end);
            if done {
                retire.push(*lane);
            }
        }
        if !retire.is_empty() {
            let mut log = self.log.lock();
            for l in &retire {
                if log.paused.remove(l) {
                    log.retired_paused.insert(*l);
                }
            }
            drop(log);
            self.retired.extend(retire.iter().copied());
            events.push(SourceEvent::LanesRetired(retire));
        }
        if self.bounded && !self.lanes.is_empty() && self.retired.len() == self.lanes.len() {
            events.push(SourceEvent::Drained);
        }
        Ok(events)
    }

    fn rewind(
        &mut self,
        lane: LaneId,
        from: Option<Watermark>,
    ) -> Result<Option<FakeLane>, SourceError> {
        let Some(partition) = self.lanes.remove(&lane) else {
            return Ok(None);
        };
        self.ended.remove(&lane);
        self.retired.remove(&lane);
        let data = (self.partitions.iter())
            .find(|(p, _)| *p == partition)
            .map(|(_, d)| d.clone())
            .expect("a partition of this source");
        let start = from.map_or_else(
            || self.committed.get(&partition).copied().unwrap_or(0),
            |w| w.0,
        );
        self.next_lane += 1;
        let id = LaneId(self.next_lane);
        self.lanes.insert(id, partition.clone());
        self.log.lock().rewinds.push((lane, from));
        Ok(Some(FakeLane {
            id,
            partition,
            data,
            pos: start as usize,
            bounded: self.bounded,
            ended_tx: self.ended_tx.clone(),
            told: false,
            log: self.log.clone(),
            hold: None,
            block: None,
        }))
    }

    fn pause(&mut self, lanes: &[LaneId]) -> Result<(), SourceError> {
        let mut log = self.log.lock();
        log.pause_calls += 1;
        log.paused.extend(lanes.iter().copied());
        for l in lanes {
            log.resume_refused.remove(l);
        }
        Ok(())
    }

    fn resume(&mut self, lanes: &[LaneId]) -> Result<(), SourceError> {
        let mut log = self.log.lock();
        if self.refuse_resumes.load(Ordering::Acquire) {
            log.resume_refused.extend(lanes.iter().copied());
            return Err(SourceError::Transient("resume refused".into()));
        }
        for l in lanes {
            log.paused.remove(l);
            log.resume_refused.remove(l);
        }
        Ok(())
    }

    fn commit(
        &mut self,
        watermarks: &[(PartitionId, Watermark)],
        sync: bool,
    ) -> Result<(), SourceError> {
        if sync && (self.stale_generation || self.refuse_sync_commits > 0) {
            if !self.stale_generation {
                self.refuse_sync_commits -= 1;
            }
            self.stale_generation = true;
            return Err(SourceError::Transient("IllegalGeneration".into()));
        }
        let refuse = |n: usize| n.checked_sub(1);
        if !sync
            && self
                .fail_async_commits
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, refuse)
                .is_ok()
        {
            self.log.lock().failed_commits.extend_from_slice(watermarks);
            self.outcomes.push(SourceEvent::CommitFailed {
                watermarks: watermarks.to_vec(),
                error: "RebalanceInProgress".into(),
            });
            return Ok(());
        }
        if !sync && self.confirm_async {
            self.outcomes
                .push(SourceEvent::CommitConfirmed(watermarks.to_vec()));
        }
        let mut log = self.log.lock();
        for (p, w) in watermarks {
            log.commits.push((p.clone(), *w, sync));
            self.committed.insert(p.clone(), w.0);
        }
        Ok(())
    }

    fn confirms_async_commits(&self) -> bool {
        self.confirm_async
    }

    fn flush_commits(&mut self, _timeout: Duration) -> Result<(), SourceError> {
        Ok(())
    }
}

/// Copies the payload as one `\n`-terminated row; payloads starting with
/// `bad` fail on column `n`.
#[derive(Clone)]
pub(crate) struct LineEncoder;

impl RowEncode for LineEncoder {
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        let payload = msg.payload.unwrap_or_default();
        if payload.starts_with(b"bad") {
            return Err(EncodeFailure {
                column: Some("n".into()),
                value: Some(String::from_utf8_lossy(payload).into_owned()),
                reason: "not a number".into(),
            });
        }
        if payload.starts_with(b"panic") {
            panic!("encoder panicked on purpose");
        }
        if payload.starts_with(b"hang") {
            // A stuck driver, for the liveness test.
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        if payload.starts_with(b"none") {
            return Ok(Encoded::Nothing { reason: "none" });
        }
        out.extend_from_slice(payload);
        out.push(b'\n');
        Ok(Encoded::Row)
    }
}

pub(crate) fn line_chains() -> ChainFactory {
    Box::new(|ctx: ChainCtx| Ok(Box::new(EncodeChain::new(LineEncoder, &ctx)) as Box<dyn Chain>))
}

/// What the recording sink inserted, per partition-independent row text.
#[derive(Debug, Default)]
pub(crate) struct SinkLog {
    pub rows: Vec<String>,
    pub chunks: usize,
    pub acked: Vec<AckRange>,
    /// Chunks a stalled worker took and holds unacknowledged.
    pub held_chunks: usize,
}

/// A sink whose workers record rows and acknowledge them; while `stall` is
/// set they hold chunks without acknowledging; while `give_up_first` is
/// set they give up (as a fenced exactly-once block is) every chunk with
/// rows of partition 0.
pub(crate) struct RecordingSink {
    pub runtime: SinkRuntime,
    pub acks: (AckSender, AckReceiver),
    pub log: Arc<Watched<SinkLog>>,
    pub stall: Arc<AtomicBool>,
    pub give_up_first: Arc<AtomicBool>,
    /// While above zero, each chunk taken is lost instead of recorded
    /// (`AckEvent::Rewind`, as a failed streamed request whose batches
    /// were released), and the count goes down by one.
    pub lose_next: Arc<AtomicUsize>,
}

pub(crate) fn recording_sink(io: &tokio::runtime::Handle, high_water: usize) -> RecordingSink {
    let (queues, receivers) = ShardQueues::new(1, high_water, high_water / 2);
    let (ack_tx, ack_rx) = ack_channel();
    let log: Arc<Watched<SinkLog>> = Arc::default();
    let stall = Arc::new(AtomicBool::new(false));
    let give_up_first = Arc::new(AtomicBool::new(false));
    let lose_next = Arc::new(AtomicUsize::new(0));
    let held: Arc<Mutex<BTreeMap<usize, Chunk>>> = Arc::default();
    let mut tasks = Vec::new();
    for mut rx in receivers {
        let (log, stall, held, ack_tx) = (log.clone(), stall.clone(), held.clone(), ack_tx.clone());
        let give_up = give_up_first.clone();
        let lose = lose_next.clone();
        tasks.push(io.spawn(async move {
            let mut n = 0usize;
            while let Some(chunk) = rx.recv().await {
                n += 1;
                let chunk = if stall.load(Ordering::Acquire) {
                    held.lock().unwrap().insert(n, chunk);
                    log.lock().held_chunks += 1;
                    while stall.load(Ordering::Acquire) {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    match held.lock().unwrap().remove(&n) {
                        Some(c) => c,
                        None => continue, // abandoned by the drain
                    }
                } else {
                    chunk
                };
                if give_up.load(Ordering::Acquire)
                    && chunk
                        .data
                        .split(|b| *b == b'\n')
                        .any(|r| r.starts_with(b"0-"))
                {
                    let _ = ack_tx.send(AckEvent::Abandoned(chunk.acks.clone()));
                    continue;
                }
                if lose
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let _ = ack_tx.send(AckEvent::Rewind(chunk.acks.clone()));
                    continue;
                }
                let mut l = log.lock();
                l.chunks += 1;
                for row in chunk.data.split(|b| *b == b'\n').filter(|r| !r.is_empty()) {
                    l.rows.push(String::from_utf8_lossy(row).into_owned());
                }
                l.acked.extend(chunk.acks.iter().copied());
                drop(l);
                let _ = ack_tx.send(AckEvent::Acked(chunk.acks.clone()));
            }
        }));
    }
    let drain_io = io.clone();
    let drain_held = held.clone();
    let drain_acks = ack_tx.clone();
    let drain_log = log.clone();
    let drain = Box::new(move |budget: Duration| {
        let before = drain_log.lock().chunks as u64;
        let done = drain_io.block_on(async {
            tokio::time::timeout(budget, async {
                for t in tasks {
                    let _ = t.await;
                }
            })
            .await
            .is_ok()
        });
        let mut report = DrainReport {
            flushed_chunks: drain_log.lock().chunks as u64 - before,
            ..DrainReport::default()
        };
        if !done {
            for (_, chunk) in std::mem::take(&mut *drain_held.lock().unwrap()) {
                report.abandoned_chunks += 1;
                report.abandoned_rows += chunk.rows;
                let _ = drain_acks.send(AckEvent::Abandoned(chunk.acks.clone()));
            }
            report.reason = Some("stalled".into());
        }
        report
    });
    RecordingSink {
        runtime: SinkRuntime {
            queues: vec![queues],
            drain,
            probe: None,
        },
        acks: (ack_tx, ack_rx),
        log,
        stall,
        give_up_first,
        lose_next,
    }
}
