//! Building a pipeline: a source, the chain factory (one chain per driver
//! thread, see [`chain`](super::chain)), and the sink's runtime half.
//!
//! Runs on the thread that assembles the process (main), before any
//! pipeline thread exists; [`PipelineRuntime::start`](super::PipelineRuntime::start)
//! consumes what is built here.

use super::chain::{Chain, ChainCtx, SinkOptions};
use crate::sink::{AckReceiver, AckSender, ShardQueues, SinkDrainFn, SinkProbeFn};
use crate::source::Source;

/// The sink half the runtime drives: the shared shard-queue handle plus a
/// drain hook invoked once at shutdown with the remaining drain budget.
///
/// Built by the sink layer (`SinkPool`) or by tests; the runtime does not
/// see worker internals.
pub struct SinkRuntime {
    /// Sending side of the per-shard chunk queues, one entry per installed
    /// sink (the runtime only uses capacity introspection for the
    /// backpressure resume gate; the chain's terminal stage holds clones).
    /// A single-sink pipeline has one entry.
    pub queues: Vec<ShardQueues>,
    /// Drain the sinks: flush what's pending within the budget, fail the
    /// acknowledgments of anything abandoned, and report. For multi-sink
    /// pipelines this is the composed hook that drains every sink.
    pub drain: SinkDrainFn,
    /// Optional connectivity probe (e.g. `SinkPool::probe_all`). The
    /// runtime probes at startup and then periodically, driving the
    /// sinks-connected half of `/readyz`. Without a probe the flag is set
    /// unconditionally.
    pub probe: Option<SinkProbeFn>,
}

impl std::fmt::Debug for SinkRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkRuntime")
            .field("queues", &self.queues)
            .finish_non_exhaustive()
    }
}

/// Builds one chain per driver thread.
pub type ChainFactory = Box<dyn Fn(ChainCtx) -> Result<Box<dyn Chain>, BuildError> + Send + Sync>;

/// Errors building a pipeline.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A required part was not given.
    #[error("pipeline is missing its {0}")]
    Missing(&'static str),
    /// The chain factory failed.
    #[error("building the chain for driver {thread} failed: {reason}")]
    Chain {
        /// Driver index.
        thread: usize,
        /// Why.
        reason: String,
    },
}

/// An assembled pipeline, ready for [`PipelineRuntime::start`](super::PipelineRuntime::start).
pub struct Pipeline<S: Source> {
    pub(crate) source: S,
    pub(crate) chains: ChainFactory,
    pub(crate) sink: SinkRuntime,
    pub(crate) acks: (AckSender, AckReceiver),
    pub(crate) options: SinkOptions,
}

impl<S: Source> Pipeline<S> {
    /// Assemble a pipeline from its parts. `acks` is the acknowledgement
    /// channel whose sender the sink's workers hold.
    pub fn new(
        source: S,
        chains: ChainFactory,
        sink: SinkRuntime,
        acks: (AckSender, AckReceiver),
        options: SinkOptions,
    ) -> Result<Self, BuildError> {
        if sink.queues.is_empty() {
            return Err(BuildError::Missing("sink queues"));
        }
        Ok(Self {
            source,
            chains,
            sink,
            acks,
            options,
        })
    }
}
