//! Building a pipeline: a source, one chain per driver thread, and the
//! sink's runtime half.
//!
//! A chain is everything between a lane and the shard queues: decode the
//! message into a row, route it to a shard, append it to that shard's open
//! chunk. The builder takes a factory so every driver thread gets its own
//! chain (own encoder scratch, own open chunks, no locks on the hot path).

use super::SinkRuntime;
use crate::checkpoint::PendingGate;
use crate::error::{ChainError, DecodeError, MessagePosition};
use crate::metrics::Metrics;
use crate::record::{Message, PartitionId};
use crate::sink::{AckSender, BatchLimits, RowEncode, ShardQueues, ShardWriter};
use crate::source::{LaneId, Source};
use std::sync::Arc;
use std::time::Instant;

/// Per-driver processing stage between lanes and shard queues.
pub trait Chain: Send {
    /// Register a lane this driver now owns; returns its slot.
    fn add_lane(&mut self, lane: LaneId, partition: &PartitionId, gate: Option<PendingGate>) -> usize;
    /// Decode, route and append one message of the lane in `slot`.
    fn push(&mut self, slot: usize, msg: &Message<'_>) -> Result<(), ChainError>;
    /// Seal chunks whose age limit passed.
    fn tick(&mut self, now: Instant) -> Result<(), ChainError>;
    /// Seal and queue everything open now.
    fn flush(&mut self) -> Result<(), ChainError>;
    /// Forget the lane in `slot` (after a flush if its rows must go out).
    fn remove_lane(&mut self, slot: usize);
}

/// What a chain factory gets to build one driver's chain.
#[derive(Clone, Debug)]
pub struct ChainCtx {
    /// Driver thread index.
    pub thread: usize,
    /// The shard queues of the (first) sink.
    pub queues: ShardQueues,
    /// Batch limits.
    pub options: SinkOptions,
    /// Metrics registry.
    pub metrics: Arc<Metrics>,
}

/// Batching options of the sink side of a chain.
#[derive(Clone, Copy, Debug, Default)]
pub struct SinkOptions {
    /// Per-shard flush limits.
    pub limits: BatchLimits,
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

/// Errors of an assembled pipeline that are not a runtime failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// Building failed.
    #[error(transparent)]
    Build(#[from] BuildError),
}

/// An assembled pipeline, ready for [`PipelineRuntime::start`](super::PipelineRuntime::start).
pub struct Pipeline<S: Source> {
    pub(crate) source: S,
    pub(crate) chains: ChainFactory,
    pub(crate) sink: SinkRuntime,
    pub(crate) acks: (AckSender, crate::sink::AckReceiver),
    pub(crate) options: SinkOptions,
}

impl<S: Source> Pipeline<S> {
    /// Assemble a pipeline from its parts. `acks` is the acknowledgement
    /// channel whose sender the sink's workers hold.
    pub fn new(
        source: S,
        chains: ChainFactory,
        sink: SinkRuntime,
        acks: (AckSender, crate::sink::AckReceiver),
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

/// The standard chain: a sink-provided [`RowEncode`] in front of a
/// [`ShardWriter`]. Rows are spread over shards batch by batch: the
/// current shard changes when its chunk is sealed.
pub struct EncodeChain<E: RowEncode> {
    encoder: E,
    writer: ShardWriter,
    shard: usize,
    metrics: Arc<Metrics>,
}

impl<E: RowEncode> EncodeChain<E> {
    /// A chain encoding with `encoder` into `ctx`'s queues.
    pub fn new(encoder: E, ctx: &ChainCtx) -> Self {
        Self {
            encoder,
            writer: ShardWriter::new(ctx.queues.clone(), ctx.options.limits, ctx.thread as u64 + 0x9E37_79B9),
            shard: ctx.thread % ctx.queues.shards(),
            metrics: ctx.metrics.clone(),
        }
    }
}

impl<E: RowEncode> Chain for EncodeChain<E> {
    fn add_lane(&mut self, lane: LaneId, _partition: &PartitionId, gate: Option<PendingGate>) -> usize {
        self.writer.add_lane(lane, gate)
    }

    fn push(&mut self, slot: usize, msg: &Message<'_>) -> Result<(), ChainError> {
        let encoder = &mut self.encoder;
        let shard = self.shard;
        let before = self.writer.open_rows();
        let outcome = self
            .writer
            .append(slot, shard, msg.offset, |out| encoder.encode(msg, out))?;
        if let Err(failure) = outcome {
            self.metrics.decode_errors.inc();
            return Err(ChainError::Decode(DecodeError {
                position: MessagePosition::of(msg),
                column: failure.column,
                value: failure.value,
                reason: failure.reason,
            }));
        }
        if self.writer.open_rows() <= before && self.writer.queues().shards() > 1 {
            // The chunk was sealed: move on to the next shard.
            self.shard = (self.shard + 1) % self.writer.queues().shards();
        }
        Ok(())
    }

    fn tick(&mut self, now: Instant) -> Result<(), ChainError> {
        self.writer.tick(now)
    }

    fn flush(&mut self) -> Result<(), ChainError> {
        self.writer.flush()
    }

    fn remove_lane(&mut self, slot: usize) {
        self.writer.remove_lane(slot);
    }
}
