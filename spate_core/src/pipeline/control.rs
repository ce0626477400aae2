//! Control traffic between the controller and the driver threads: one enum
//! per recipient, so neither side has an arm it cannot receive.
//!
//! The controller sends [`ThreadControl`] to each driver over that driver's
//! unbounded crossbeam channel; every driver sends [`DriverEvent`] to the
//! controller over one shared unbounded channel. Control traffic is rare and
//! must never block a poll loop.
//!
//! [`ThreadEnv`] is what every pipeline thread (controller, drivers) is
//! wired with besides its channels: metrics, its heartbeat, the clock.

use crate::checkpoint::PendingGate;
use crate::clock::SharedClock;
use crate::error::FatalError;
use crate::health::Heartbeat;
use crate::metrics::Metrics;
use crate::source::{DrainBarrier, LaneId};
use std::sync::Arc;
use std::time::Instant;

/// What a pipeline thread reports through and reads time from.
pub(crate) struct ThreadEnv {
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// This thread's liveness heartbeat.
    pub heartbeat: Heartbeat,
    /// The runtime's clock (every deadline this thread compares comes
    /// from it).
    pub clock: SharedClock,
}

/// Control messages the controller sends to a driver thread.
pub(crate) enum ThreadControl<L> {
    /// Take ownership of a newly assigned lane, with the pending-ceiling
    /// gate for its partition (`None` only if the partition is unknown to
    /// the checkpointer, which is a controller bug; the lane then runs
    /// ungated rather than not at all).
    AddLane { lane: L, gate: Option<PendingGate> },
    /// Stop and drop the listed lanes (revocation): flush the chain, then
    /// arrive at `barrier` once per stopped lane before `deadline`.
    StopLanes {
        lanes: Vec<LaneId>,
        barrier: DrainBarrier,
        deadline: Instant,
    },
    /// Flush the chain's partial terminal state now, without waiting out
    /// the idle-flush lull
    /// ([`SourceEvent::CommitReady`](crate::source::SourceEvent::CommitReady)).
    ///
    /// A lane that reached end-of-input has no more data coming, so its tail
    /// would otherwise sit in the chain until `idle_flush` elapses,
    /// unacknowledged, blocking the completion of whatever unit of work it
    /// belongs to. Best-effort and unsynchronized; the controller does not
    /// wait, and a blocked chain retries on the ordinary lull check.
    FlushNow,
    /// Drop the listed lanes without flushing or synchronizing
    /// ([`SourceEvent::LanesRetired`](crate::source::SourceEvent::LanesRetired)):
    /// their input is fully delivered, acknowledged *and* committed, so
    /// nothing of theirs can sit unflushed in the chain. Pure bookkeeping,
    /// with no barrier, no deadline, no `flush_until`. Forcing a flush here
    /// would fragment sink batches and park the thread once per completed unit
    /// of work; sources with anything in flight must use
    /// [`ThreadControl::StopLanes`] instead.
    DropLanes { lanes: Vec<LaneId> },
    /// Stop everything (shutdown): flush the chain, drop all lanes, arrive
    /// once at `barrier`, and exit the thread.
    Shutdown {
        barrier: DrainBarrier,
        deadline: Instant,
    },
}

/// Requests and reports a driver thread sends the controller.
#[derive(Debug)]
pub(crate) enum DriverEvent {
    /// Backpressure tripped: pause these lanes at the source.
    PauseLanes { lanes: Vec<LaneId> },
    /// Backpressure cleared: resume these lanes.
    ResumeLanes { lanes: Vec<LaneId> },
    /// The chain failed or panicked; the pipeline must stop.
    Fatal { thread: usize, error: FatalError },
}
