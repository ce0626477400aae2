//! Source contract: what the controller drives and what drivers poll.
//!
//! A [`Source`] is owned by the controller thread and by nothing else. It
//! turns its input (for Kafka: a consumer group's assignment) into
//! [`Lane`]s, which the controller hands to driver threads inside
//! `ThreadControl::AddLane`. A lane is the only part of a source that lives
//! on a driver thread; it hands messages to the chain without blocking.
//!
//! ```text
//! controller                         driver k
//!   Source::poll_events ──Assigned──▶ AddLane{lane, gate} ──▶ Lane::poll → chain
//!          │   (revocation: Revoker::revoke, synchronously, before the
//!          │    source gives the partitions up)
//!   Source::pause/resume ◀── DriverEvent::PauseLanes / ResumeLanes
//!   Source::commit       ◀── Checkpointer watermarks (commit tick, revoke, shutdown)
//! ```

mod barrier;

pub use barrier::{BarrierOutcome, DrainBarrier};

use crate::error::{ChainError, SourceError};
use crate::record::{Message, Offset, PartitionId, Watermark};
use std::fmt;
use std::time::Duration;

/// Identity of one lane: one assignment of one partition. A partition that
/// is revoked and assigned again gets a new `LaneId`, so acknowledgements
/// of the old assignment can never move the new one's watermark.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaneId(pub u64);

impl fmt::Debug for LaneId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lane#{}", self.0)
    }
}

impl fmt::Display for LaneId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lane#{}", self.0)
    }
}

/// What one [`Lane::poll`] call found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LanePoll {
    /// This many messages were handed to the chain (0: nothing available now).
    Delivered(usize),
    /// The lane reached the end of its input (bounded runs only). It has
    /// told its source, which reports
    /// [`SourceEvent::CommitReady`]; the driver stops polling it.
    Ended,
}

/// Why a [`Lane::poll`] stopped early.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// The chain refused a message; the lane stopped right before it.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The source client failed.
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// The chain callback a lane hands each message to.
pub type Deliver<'a> = dyn FnMut(&Message<'_>) -> Result<(), ChainError> + 'a;

/// One partition's stream, polled on a driver thread.
pub trait Lane: Send + 'static {
    /// This lane's identity.
    fn id(&self) -> LaneId;
    /// The partition it reads.
    fn partition(&self) -> &PartitionId;
    /// This assignment's order among the owners of the partition, higher
    /// for a later owner (Kafka: the consumer group generation it was
    /// assigned in), or `None`. Exactly-once fences the partition with it,
    /// so an old owner still inserting cannot break a new owner's blocks.
    fn epoch(&self) -> Option<u64> {
        None
    }
    /// Hand up to `max` messages that are available *now* to `deliver`, in
    /// offset order, without blocking. If `deliver` fails, stop at once and
    /// return the error: the failed message is not consumed as far as the
    /// pipeline is concerned.
    fn poll(&mut self, max: usize, deliver: &mut Deliver<'_>) -> Result<LanePoll, LaneError>;
}

/// Events a source reports to the controller.
pub enum SourceEvent<L> {
    /// New lanes to hand to drivers (partitions assigned). Each lane's
    /// pause state at the source is already explicit (resumed). Also sent
    /// empty when the member joined with no partition (a standby member):
    /// it is joined, hence ready.
    Assigned(Vec<L>),
    /// These lanes reached the end of their input: flush their tails now
    /// (`ThreadControl::FlushNow`) so their unit of work can complete.
    CommitReady(Vec<LaneId>),
    /// These lanes' input is fully delivered, acknowledged and committed:
    /// drop them (`ThreadControl::DropLanes`).
    LanesRetired(Vec<LaneId>),
    /// These lanes were taken away without a chance to drain (partition
    /// lost, e.g. session timeout). Their unacknowledged data replays on the
    /// new owner; nothing may be committed for them any more.
    Lost(Vec<LaneId>),
    /// A bounded source is exhausted: every lane retired.
    Drained,
    /// The broker confirmed these asynchronous commits (only sources whose
    /// [`Source::confirms_async_commits`] is true must report these).
    CommitConfirmed(Vec<(PartitionId, Watermark)>),
    /// The broker refused these asynchronous commits: the controller
    /// offers them again on its next commit tick, also for a partition
    /// whose watermark has not moved since.
    CommitFailed {
        /// The watermarks that were not committed.
        watermarks: Vec<(PartitionId, Watermark)>,
        /// The broker's or client's answer.
        error: String,
    },
}

impl<L> fmt::Debug for SourceEvent<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceEvent::Assigned(l) => write!(f, "Assigned({} lanes)", l.len()),
            SourceEvent::CommitReady(l) => write!(f, "CommitReady({l:?})"),
            SourceEvent::LanesRetired(l) => write!(f, "LanesRetired({l:?})"),
            SourceEvent::Lost(l) => write!(f, "Lost({l:?})"),
            SourceEvent::Drained => write!(f, "Drained"),
            SourceEvent::CommitConfirmed(w) => write!(f, "CommitConfirmed({w:?})"),
            SourceEvent::CommitFailed { watermarks, error } => {
                write!(f, "CommitFailed({watermarks:?}: {error})")
            }
        }
    }
}

/// Called by a source, synchronously and on the controller thread, when it
/// is about to give lanes up (rebalance revocation). The implementation
/// stops the lanes on their drivers, waits (bounded by the revoke deadline)
/// for their data to be acknowledged, and returns the watermarks that are
/// safe to commit for them. The source commits those *before* completing
/// the revocation, and never commits for those partitions afterwards.
pub trait Revoker {
    /// Stop `lanes` and return their committable watermarks.
    fn revoke(&mut self, lanes: &[LaneId]) -> Vec<(PartitionId, Watermark)>;
}

/// A [`Revoker`] for sources used without a runtime (tests, `spate check`):
/// nothing is in flight, so nothing is committed.
pub struct NoRevoke;

impl Revoker for NoRevoke {
    fn revoke(&mut self, _lanes: &[LaneId]) -> Vec<(PartitionId, Watermark)> {
        Vec::new()
    }
}

/// The controller-side half of a source.
pub trait Source: Send + 'static {
    /// The lane type this source hands to drivers.
    type Lane: Lane;

    /// Serve the source client (callbacks, rebalances) for up to `timeout`
    /// and return what happened. Must be called regularly, also while every
    /// lane is paused, so the client keeps its group membership.
    fn poll_events(
        &mut self,
        timeout: Duration,
        revoker: &mut dyn Revoker,
    ) -> Result<Vec<SourceEvent<Self::Lane>>, SourceError>;

    /// Stop fetching for these lanes (backpressure). Messages the lanes
    /// already handed out stay handed out: a later resume continues right
    /// after the last message each lane delivered.
    fn pause(&mut self, lanes: &[LaneId]) -> Result<(), SourceError>;

    /// Resume fetching for these lanes.
    fn resume(&mut self, lanes: &[LaneId]) -> Result<(), SourceError>;

    /// Commit these watermarks (next offset to read). `sync` waits for the
    /// broker's answer. Only partitions the source still owns may be passed.
    /// An asynchronous commit that the broker refuses later is reported by
    /// `poll_events` as [`SourceEvent::CommitFailed`].
    fn commit(
        &mut self,
        watermarks: &[(PartitionId, Watermark)],
        sync: bool,
    ) -> Result<(), SourceError>;

    /// Whether the broker's confirmation of each asynchronous commit is
    /// reported ([`SourceEvent::CommitConfirmed`]). If so, an asynchronous
    /// commit counts as committed (metrics, lag) only once confirmed;
    /// otherwise as soon as it was sent, until a
    /// [`SourceEvent::CommitFailed`] says otherwise. Default: false.
    fn confirms_async_commits(&self) -> bool {
        false
    }

    /// Wait, up to `timeout`, for outstanding asynchronous commits.
    fn flush_commits(&mut self, timeout: Duration) -> Result<(), SourceError>;

    /// The shutdown began and must end by `deadline`: from now on no call
    /// (a synchronous [`commit`](Self::commit), `flush_commits`) waits
    /// past it; one that would fails instead (retriable), and nothing it
    /// did not confirm counts as committed. Default: nothing waits.
    fn shutdown_deadline(&mut self, _deadline: std::time::Instant) {}

    /// The latest known end offset (high watermark: the offset the next
    /// message written will get) of partitions this source reads, for the
    /// lag metrics. Default: none known.
    fn high_watermarks(&mut self) -> Vec<(PartitionId, Offset)> {
        Vec::new()
    }

    /// Read `lane`'s partition again from `from` (its acknowledged
    /// watermark; `None`: nothing of the lane was acknowledged, so from
    /// where the lane began, the group's committed offset), under a new
    /// lane that replaces it: the sink lost rows of it that it could not
    /// insert ([`AckEvent::Rewind`](crate::sink::AckEvent::Rewind)). The
    /// old lane is already stopped on its driver and forgotten by the
    /// checkpointer. The new lane starts resumed, like an assigned one.
    /// `Ok(None)`: the source no longer owns the partition (its next
    /// owner reads it from the committed offset). Default: this source
    /// cannot read again, an error.
    fn rewind(
        &mut self,
        lane: LaneId,
        _from: Option<Watermark>,
    ) -> Result<Option<Self::Lane>, SourceError> {
        Err(SourceError::Fatal(format!(
            "{lane}: this source cannot read a partition again, so the rows the sink lost cannot be replayed"
        )))
    }

    /// Payload bytes the source holds prefetched beyond what lanes took
    /// (librdkafka's fetch queues), for the `spate_prefetch_bytes` gauge.
    /// Default: not known.
    fn prefetched_bytes(&mut self) -> Option<u64> {
        None
    }
}
