//! Issue 16 point 8: the old lane of a re-assigned partition must not read
//! the new assignment's messages.
//!
//! The old and the new lane of a partition share the client's fetch queue
//! (librdkafka's partition queue). The test drives one [`Driver`] thread
//! with a lane over a shared in-memory queue, holds the lane in the middle
//! of a poll (as if the thread were descheduled there), and meanwhile does
//! what a revocation and re-assignment do on the controller thread: close
//! the old lane's gate, purge the queue (librdkafka drops the old
//! assignment's fetched messages by version), fill it with the new
//! assignment's offsets, add the new lane. Every new offset must reach the
//! new lane; none may go out under the old lane's ID, whose
//! acknowledgements are ignored.

use crate::checkpoint::PendingGate;
use crate::error::ChainError;
use crate::metrics::Metrics;
use crate::pipeline::chain::Chain;
use crate::pipeline::control::{ThreadControl, ThreadEnv};
use crate::pipeline::driver::{Driver, DriverConfig, DriverLinks};
use crate::pipeline::fakes::Watched;
use crate::record::{Message, PartitionId};
use crate::sink::ShardQueues;
use crate::source::{Deliver, Lane, LaneError, LaneId, LanePoll};
use crossbeam_channel::unbounded;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(10);

/// The partition's fetch queue, shared by every lane of the partition.
type FetchQueue = Arc<Mutex<VecDeque<i64>>>;

/// Where the held lane is.
#[derive(Debug, Default)]
struct Step {
    /// The lane delivered its first message and waits for `go`.
    mid_poll: bool,
    go: bool,
}

/// A lane over the shared queue; if `hold` is set, its first poll stops
/// after one message until the test says `go`.
struct QueueLane {
    id: LaneId,
    partition: PartitionId,
    queue: FetchQueue,
    hold: Option<Arc<Watched<Step>>>,
}

impl Lane for QueueLane {
    fn id(&self) -> LaneId {
        self.id
    }

    fn partition(&self) -> &PartitionId {
        &self.partition
    }

    fn poll(&mut self, max: usize, deliver: &mut Deliver<'_>) -> Result<LanePoll, LaneError> {
        let mut n = 0;
        while n < max {
            let Some(offset) = self.queue.lock().unwrap().pop_front() else {
                break;
            };
            let msg = Message {
                topic: &self.partition.topic,
                partition: self.partition.partition,
                offset,
                timestamp_ms: None,
                key: None,
                payload: Some(b"x"),
                headers: None,
            };
            deliver(&msg)?;
            n += 1;
            if let Some(step) = self.hold.take() {
                step.lock().mid_poll = true;
                step.wait_for("the test lets the held poll go on", WAIT, |s| s.go);
            }
        }
        Ok(LanePoll::Delivered(n))
    }
}

/// A chain recording which lane each offset went out under.
struct RecordingChain {
    slots: Vec<LaneId>,
    seen: Arc<Watched<Vec<(LaneId, i64)>>>,
}

impl Chain for RecordingChain {
    fn add_lane(&mut self, lane: LaneId, _: &PartitionId, _: Option<PendingGate>) -> usize {
        self.slots.push(lane);
        self.slots.len() - 1
    }
    fn push(&mut self, slot: usize, msg: &Message<'_>) -> Result<(), ChainError> {
        self.seen.lock().push((self.slots[slot], msg.offset));
        Ok(())
    }
    fn tick(&mut self, _: Instant) -> Result<(), ChainError> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), ChainError> {
        Ok(())
    }
    fn remove_lane(&mut self, _: usize) {}
}

#[test]
fn the_old_lane_never_delivers_the_reassigned_partitions_messages() {
    let (queues, _rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
    let (control_tx, control_rx) = unbounded();
    let (events_tx, _events_rx) = unbounded();
    let live = Arc::new(crate::health::Liveness::new(
        vec!["driver-0".into()],
        Duration::from_secs(60),
    ));
    let env = ThreadEnv {
        metrics: Arc::new(Metrics::new()),
        heartbeat: live.heartbeat("driver-0"),
        clock: crate::clock::system(),
    };
    let links = DriverLinks {
        control: control_rx,
        events: events_tx,
        queues,
    };
    let config = DriverConfig {
        poll_batch: 1024,
        idle_max: Duration::from_millis(1),
    };
    let seen: Arc<Watched<Vec<(LaneId, i64)>>> = Arc::default();
    let chain = RecordingChain {
        slots: Vec::new(),
        seen: seen.clone(),
    };
    let driver = Driver::new(0, Box::new(chain), links, env, config);
    let thread = std::thread::spawn(move || driver.run());

    let partition = PartitionId::new("t", 0);
    let queue: FetchQueue = Arc::new(Mutex::new((0..10).collect()));
    let step: Arc<Watched<Step>> = Arc::default();
    let (old, new) = (LaneId(1), LaneId(2));
    let old_gate = PendingGate::new(1_000_000);
    let lane = QueueLane {
        id: old,
        partition: partition.clone(),
        queue: queue.clone(),
        hold: Some(step.clone()),
    };
    control_tx
        .send(ThreadControl::AddLane {
            lane,
            gate: Some(old_gate.clone()),
        })
        .unwrap();
    step.wait_for("the old lane is in the middle of a poll", WAIT, |s| {
        s.mid_poll
    });

    // The controller's side of a revocation and a re-assignment, while the
    // driver is held mid-poll: close the old gate (the checkpointer forgets
    // the lane), the client unassigns (purging the old fetched messages)
    // and assigns again, fetching from the committed offset on.
    let reassigned: Arc<Watched<bool>> = Arc::default();
    let controller = {
        let (queue, reassigned, partition) = (queue.clone(), reassigned.clone(), partition.clone());
        std::thread::spawn(move || {
            old_gate
                .close_by(Instant::now() + WAIT)
                .expect("the held poll ends");
            let mut q = queue.lock().unwrap();
            q.clear();
            q.extend(100..110);
            drop(q);
            *reassigned.lock() = true;
            let lane = QueueLane {
                id: new,
                partition,
                queue,
                hold: None,
            };
            (lane, PendingGate::new(1_000_000))
        })
    };
    // A revocation waits for the poll in progress, or it does not: give it
    // the time to finish either way, then let the held poll go on.
    let _ = reassigned.wait_until(Duration::from_millis(500), |r| *r);
    step.lock().go = true;
    let (lane, gate) = controller.join().expect("controller side");
    control_tx
        .send(ThreadControl::AddLane {
            lane,
            gate: Some(gate),
        })
        .unwrap();

    let all_new = seen.wait_until(WAIT, |s| s.iter().filter(|(_, o)| *o >= 100).count() == 10);
    let log = seen.lock().clone();
    drop(control_tx);
    thread.join().expect("driver thread");
    let stray: Vec<i64> = log
        .iter()
        .filter(|(l, o)| *l == old && *o >= 100)
        .map(|(_, o)| *o)
        .collect();
    assert!(
        stray.is_empty(),
        "the old lane delivered the new assignment's offsets {stray:?} (acknowledgements ignored, skipped by the new lane's watermark)"
    );
    let new_offsets: Vec<i64> = log
        .iter()
        .filter(|(l, _)| *l == new)
        .map(|(_, o)| *o)
        .collect();
    assert!(all_new, "not every new offset was delivered: {log:?}");
    assert_eq!(new_offsets, (100..110).collect::<Vec<_>>());
}
