//! The chain: everything between a lane and the shard queues, on the hot
//! path of every message.
//!
//! A chain decodes a message into a row, routes it to a shard, and appends
//! it to that shard's open chunk ([`ShardWriter`]). Each driver thread owns
//! one chain, built by the pipeline's
//! [`ChainFactory`](super::ChainFactory) from a [`ChainCtx`]
//! (own encoder scratch, own open chunks, no locks); only that driver thread
//! touches it. It receives messages from its driver's lanes and sends sealed
//! chunks into the [`ShardQueues`].
//!
//! - [`EncodeChain`]: the standard chain, a sink's [`RowEncode`] in front
//!   of a [`ShardWriter`], routing through a weighted slot table.
//!
//! A message that cannot become a row (a decode failure, or a tombstone)
//! goes to the pipeline's [`Rejections`] when the chain has one
//! ([`EncodeChain::with_rejections`]): skipped offsets are covered by the
//! lane's segment ([`ShardWriter::skip`]); without a policy, or under
//! `fail`, it is the chain's error and stops the pipeline. A message the
//! encoder owes no row ([`Encoded::Nothing`]: a change stream's tombstone)
//! is covered the same way, whatever the policy, and counted.
//! - [`TopicChains`]: one chain per pipeline of a process, chosen by the
//!   lane's topic.

use crate::checkpoint::PendingGate;
use crate::clock::SharedClock;
use crate::error::{ChainError, DecodeError, MessagePosition};
use crate::metrics::Metrics;
use crate::policy::{decode_reason, Action, DeadLetter, PolicyError, Rejection, Rejections, Stage};
use crate::record::{Message, Offset, PartitionId};
use crate::sink::{BatchLimits, EncodeFailure, Encoded, RowEncode, ShardQueues, ShardWriter};
use crate::source::LaneId;
use std::sync::Arc;
use std::time::Instant;

/// Per-driver processing stage between lanes and shard queues.
pub trait Chain: Send {
    /// Register a lane this driver now owns; returns its slot.
    fn add_lane(
        &mut self,
        lane: LaneId,
        partition: &PartitionId,
        gate: Option<PendingGate>,
    ) -> usize;
    /// Exactly-once: the lane in `slot` holds its partition since the
    /// assignment of `epoch` ([`Lane::epoch`](crate::source::Lane::epoch)).
    fn set_epoch(&mut self, _slot: usize, _epoch: u64) {}
    /// Decode, route and append one message of the lane in `slot`.
    fn push(&mut self, slot: usize, msg: &Message<'_>) -> Result<(), ChainError>;
    /// Seal chunks whose age limit passed.
    fn tick(&mut self, now: Instant) -> Result<(), ChainError>;
    /// Seal and queue everything open now.
    fn flush(&mut self) -> Result<(), ChainError>;
    /// Forget the lane in `slot` (after a flush if its rows must go out).
    fn remove_lane(&mut self, slot: usize);
    /// The shards (a [`shard_bit`](crate::sink::shard_bit) mask) the lane
    /// in `slot` sent rows to since the last call; resets it. Backpressure
    /// pauses a lane only when a shard it feeds is over its high-water
    /// mark. The default, every shard, pauses every lane for any shard.
    fn take_shards_fed(&mut self, _slot: usize) -> u64 {
        u64::MAX
    }
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
    /// The runtime's clock: chunk ages are read from it (the driver ticks
    /// the chain with the same clock's readings).
    pub clock: SharedClock,
}

/// Batching options of the sink side of a chain.
#[derive(Clone, Copy, Debug, Default)]
pub struct SinkOptions {
    /// Per-shard flush limits.
    pub limits: BatchLimits,
}

/// The standard chain: a sink-provided [`RowEncode`] in front of a
/// [`ShardWriter`].
///
/// Routing goes through a slot table (ClickHouse's `slot_to_shard`: each
/// shard repeated by its weight). With a keyed encoder each row goes to
/// `slots[hash % slots.len()]`; the row is encoded into a scratch buffer
/// first, since its shard is known only once its key is. Without a key,
/// whole batches take turns through the slot table: the shard changes when
/// its chunk is sealed.
pub struct EncodeChain<E: RowEncode> {
    encoder: E,
    writer: ShardWriter,
    slots: Arc<[u16]>,
    next_slot: usize,
    shard: usize,
    keyed: bool,
    row: Vec<u8>,
    metrics: Arc<Metrics>,
    rejections: Option<Arc<Rejections>>,
    /// Messages turned into rows since the last rejection (for the limit).
    accepted: u64,
    /// Keep each row's original message (dead letters of server rejections).
    keep_originals: bool,
    /// The encoder reads tombstones itself ([`RowEncode::takes_tombstones`]).
    takes_tombstones: bool,
}

impl<E: RowEncode> EncodeChain<E> {
    /// A chain encoding with `encoder` into `ctx`'s queues, shards weighted
    /// equally.
    pub fn new(encoder: E, ctx: &ChainCtx) -> Self {
        let slots: Arc<[u16]> = (0..ctx.queues.shards()).map(|s| s as u16).collect();
        Self::with_slots(encoder, ctx, slots)
    }

    /// A chain routing through `slots` (every entry a shard index of
    /// `ctx.queues`; at least one entry).
    pub fn with_slots(encoder: E, ctx: &ChainCtx, slots: Arc<[u16]>) -> Self {
        assert!(!slots.is_empty(), "a slot table needs at least one slot");
        assert!(
            slots.iter().all(|&s| usize::from(s) < ctx.queues.shards()),
            "slot table names a shard without a queue"
        );
        let next_slot = ctx.thread % slots.len();
        Self {
            keyed: encoder.routes_by_key(),
            takes_tombstones: encoder.takes_tombstones(),
            encoder,
            writer: ShardWriter::new(
                ctx.queues.clone(),
                ctx.options.limits,
                ctx.thread as u64 + 0x9E37_79B9,
            )
            .with_clock(ctx.clock.clone())
            .with_skip_shard(usize::from(slots[0])),
            shard: usize::from(slots[next_slot]),
            next_slot,
            slots,
            row: Vec::with_capacity(512),
            metrics: ctx.metrics.clone(),
            rejections: None,
            accepted: 0,
            keep_originals: false,
        }
    }

    /// The same chain cutting exactly-once blocks: one partition per
    /// block, replays at the offsets `plans` recorded
    /// ([`ShardWriter::exactly_once`]). On several shards a keyed row goes
    /// to its key's shard (a block's part per shard); without a key each
    /// whole block goes to the shard its partition and first offset pick
    /// ([`ShardWriter::route_blocks`]), not round robin, so a replay goes
    /// where the first attempt went. Call before any lane is added.
    #[must_use]
    pub fn exactly_once(mut self, plans: Arc<dyn crate::sink::BlockPlans>) -> Self {
        let mut writer = self.writer.exactly_once(plans);
        if !self.keyed {
            writer = writer.route_blocks(self.slots.clone());
        }
        self.writer = writer;
        self
    }

    /// The same chain handing bad messages and tombstones to `rejections`
    /// (the pipeline's error policy) instead of failing on the first.
    #[must_use]
    pub fn with_rejections(mut self, rejections: Arc<Rejections>) -> Self {
        self.keep_originals = rejections.dead_letters().is_some();
        self.rejections = Some(rejections);
        self
    }

    fn original(&self, msg: &Message<'_>) -> Option<crate::sink::Original> {
        self.keep_originals.then(|| crate::sink::Original::of(msg))
    }

    fn decode_error(&self, msg: &Message<'_>, failure: crate::sink::EncodeFailure) -> ChainError {
        ChainError::Decode(self.decode_failure(msg, failure))
    }

    fn decode_failure(
        &self,
        msg: &Message<'_>,
        failure: crate::sink::EncodeFailure,
    ) -> DecodeError {
        self.metrics.decode_errors.inc();
        DecodeError {
            position: MessagePosition::of(msg),
            column: failure.column,
            value: failure.value,
            reason: failure.reason,
        }
    }

    /// `msg` did not become a row: what the policy makes of it.
    fn rejected(
        &mut self,
        slot: usize,
        msg: &Message<'_>,
        failure: crate::sink::EncodeFailure,
    ) -> Result<(), ChainError> {
        let Some(policy) = self.rejections.clone() else {
            return Err(self.decode_error(msg, failure));
        };
        let reason = decode_reason(&failure.reason);
        let error = self.decode_failure(msg, failure);
        let text = error.to_string();
        let rejection = Rejection {
            stage: Stage::Decode,
            topic: msg.topic,
            partition: msg.partition,
            offset: msg.offset,
            column: error.column.as_deref(),
            reason,
            error: &text,
        };
        match policy.reject(&rejection, std::mem::take(&mut self.accepted)) {
            Ok(Action::Skip) => self.writer.skip(slot, Offset(msg.offset)),
            Ok(Action::Fail) => Err(ChainError::Decode(error)),
            Ok(Action::DeadLetter) => {
                let Some(dest) = policy.dead_letters() else {
                    return Err(ChainError::Decode(DecodeError {
                        reason: format!("{} (no dead-letter destination)", error.reason),
                        ..error
                    }));
                };
                let letter = DeadLetter::of(msg, Stage::Decode, &text, error.column.as_deref());
                match dest.store(&letter) {
                    Ok(()) => self.writer.skip(slot, Offset(msg.offset)),
                    Err(why) => Err(ChainError::Decode(DecodeError {
                        reason: format!(
                            "{} (storing its dead letter in {} failed: {why})",
                            error.reason,
                            dest.describe()
                        ),
                        ..error
                    })),
                }
            }
            Err(PolicyError::Limit { tripped, .. }) => Err(ChainError::Decode(DecodeError {
                reason: format!("{tripped}; the last: {}", error.reason),
                ..error
            })),
        }
    }

    /// A message without a value: skipped when the policy says so.
    fn tombstone_skipped(&mut self, slot: usize, msg: &Message<'_>) -> Result<bool, ChainError> {
        let skipped = msg.payload.is_none()
            && !self.takes_tombstones
            && self
                .rejections
                .as_ref()
                .is_some_and(|r| r.tombstone(msg.topic, msg.partition, msg.offset));
        if skipped {
            self.writer.skip(slot, Offset(msg.offset))?;
        }
        Ok(skipped)
    }

    /// `msg` owes no row: covered by the lane's segment, and counted.
    fn nothing(
        &mut self,
        slot: usize,
        msg: &Message<'_>,
        reason: &'static str,
    ) -> Result<(), ChainError> {
        self.metrics
            .messages_skipped
            .with_label_values(&[msg.topic, reason])
            .inc();
        self.writer.skip(slot, Offset(msg.offset))
    }

    /// `msg` asks for what the pipeline must not do: its error, whatever
    /// the error policy.
    fn stop(&self, msg: &Message<'_>, reason: &'static str) -> ChainError {
        ChainError::Decode(DecodeError {
            position: MessagePosition::of(msg),
            column: None,
            value: None,
            reason: reason.to_owned(),
        })
    }

    /// `msg` acts on the target in order with its lane's rows
    /// ([`Encoded::Barrier`]): seal what is open, wait until every row of
    /// the lane is acknowledged, act, then cover the message.
    fn barrier(
        &mut self,
        slot: usize,
        msg: &Message<'_>,
        reason: &'static str,
    ) -> Result<(), ChainError> {
        let failed = |why: String| ChainError::Barrier {
            position: MessagePosition::of(msg),
            reason: why,
        };
        self.writer.flush()?;
        let Some(gate) = self.writer.gate(slot).cloned() else {
            return Err(failed(
                "the lane keeps no count of its pending rows to wait on".into(),
            ));
        };
        let deadline = Instant::now() + BARRIER_WAIT;
        tracing::info!(position = %MessagePosition::of(msg), reason, pending = gate.pending(), "waiting for the rows before it to be acknowledged");
        while gate.pending() > 0 {
            if gate.is_stopping() {
                // Revoked (or lost, or retired): the message stays
                // uncovered, so the watermark stops before it and the
                // partition's next owner reads it again. Ending the wait
                // ends the poll, so the stop goes through.
                tracing::info!(position = %MessagePosition::of(msg), "the lane is being stopped: its next owner applies this {reason}");
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(failed(format!(
                    "{} rows read before this {reason} were not acknowledged within {}s; nothing was done, and a restart does it again",
                    gate.pending(),
                    BARRIER_WAIT.as_secs()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.encoder.barrier(msg).map_err(failed)?;
        self.nothing(slot, msg, reason)
    }

    fn push_keyed(&mut self, slot: usize, msg: &Message<'_>) -> Result<(), ChainError> {
        self.row.clear();
        let rows = match self.encoder.encode(msg, &mut self.row) {
            Ok(Encoded::Row) => 1,
            Ok(Encoded::Rows(n)) if self.writer.writes_blocks() => n,
            Ok(Encoded::Rows(_)) => return Err(self.stop(msg, SEVERAL_ROWS)),
            Ok(Encoded::Nothing { reason }) => return self.nothing(slot, msg, reason),
            Ok(Encoded::Stop { reason }) => return Err(self.stop(msg, reason)),
            Ok(Encoded::Barrier { reason }) => return self.barrier(slot, msg, reason),
            Err(failure) => return self.rejected(slot, msg, failure),
        };
        let Some(hash) = self.encoder.route_hash(&self.row) else {
            let failure = crate::sink::EncodeFailure {
                column: None,
                value: None,
                reason: "the encoder produced no shard key hash for the row".into(),
            };
            return Err(self.decode_error(msg, failure));
        };
        let shard = usize::from(self.slots[(hash % self.slots.len() as u64) as usize]);
        let row = &self.row;
        let original = self.original(msg);
        let appended =
            self.writer
                .append_keeping(slot, shard, Offset(msg.offset), original, |out| {
                    out.extend_from_slice(row);
                    Ok::<u32, std::convert::Infallible>(rows)
                })?;
        match appended {
            Ok(()) => {
                self.accepted += 1;
                Ok(())
            }
            Err(never) => match never {},
        }
    }
}

impl<E: RowEncode> Chain for EncodeChain<E> {
    fn add_lane(
        &mut self,
        lane: LaneId,
        partition: &PartitionId,
        gate: Option<PendingGate>,
    ) -> usize {
        self.writer
            .add_partition_lane(lane, partition.clone(), gate)
    }

    fn set_epoch(&mut self, slot: usize, epoch: u64) {
        self.writer.set_epoch(slot, epoch);
    }

    fn push(&mut self, slot: usize, msg: &Message<'_>) -> Result<(), ChainError> {
        self.writer.stamp_next(msg.timestamp_ms);
        // Not while a replay is half cut: its block is re-cut at recorded
        // offsets and may not be sealed short, so its rows keep the schema
        // they started with (as the first time), and the switch waits.
        if self.encoder.schema_pending() && !self.writer.replay_open() {
            if let Some(version) = self.encoder.schema_switch() {
                self.writer.flush()?;
                self.writer.set_schema(version);
            }
        }
        if self.tombstone_skipped(slot, msg)? {
            return Ok(());
        }
        if self.keyed {
            return self.push_keyed(slot, msg);
        }
        let encoder = &mut self.encoder;
        let shard = self.shard;
        let before = self.writer.open_rows();
        let original = self.keep_originals.then(|| crate::sink::Original::of(msg));
        let several = self.writer.writes_blocks();
        let outcome =
            self.writer
                .append_keeping(
                    slot,
                    shard,
                    Offset(msg.offset),
                    original,
                    |out| match encoder.encode(msg, out) {
                        Ok(Encoded::Row) => Ok(1),
                        Ok(Encoded::Rows(n)) if several => Ok(n),
                        Ok(Encoded::Rows(_)) => Err(NoRow::Stop(SEVERAL_ROWS)),
                        Ok(Encoded::Nothing { reason }) => Err(NoRow::Nothing(reason)),
                        Ok(Encoded::Stop { reason }) => Err(NoRow::Stop(reason)),
                        Ok(Encoded::Barrier { reason }) => Err(NoRow::Barrier(reason)),
                        Err(failure) => Err(NoRow::Failed(failure)),
                    },
                )?;
        match outcome {
            Ok(()) => {}
            Err(NoRow::Nothing(reason)) => return self.nothing(slot, msg, reason),
            Err(NoRow::Stop(reason)) => return Err(self.stop(msg, reason)),
            Err(NoRow::Barrier(reason)) => return self.barrier(slot, msg, reason),
            Err(NoRow::Failed(failure)) => return self.rejected(slot, msg, failure),
        }
        self.accepted += 1;
        if self.writer.open_rows() <= before && self.slots.len() > 1 {
            // The chunk was sealed: the next slot's shard takes the next batch.
            self.next_slot = (self.next_slot + 1) % self.slots.len();
            self.shard = usize::from(self.slots[self.next_slot]);
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

    fn take_shards_fed(&mut self, slot: usize) -> u64 {
        self.writer.take_fed(slot)
    }
}

/// How long a [`Encoded::Barrier`] waits for the rows read before it.
/// Below the default `--stall-timeout` (60 s): the driver sends no
/// heartbeat while it waits.
const BARRIER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Why a message of several rows stops an at-least-once chain (the sink
/// refuses such a pipeline at start; this is the backstop).
const SEVERAL_ROWS: &str = "the message makes several rows that must be inserted together, which only --delivery exactly-once does";

/// Why an append made no row.
enum NoRow {
    /// None is owed.
    Nothing(&'static str),
    /// The pipeline must stop.
    Stop(&'static str),
    /// The message acts on the target once the rows before it are in.
    Barrier(&'static str),
    /// One is owed and failed.
    Failed(EncodeFailure),
}

/// One chain per pipeline, chosen by the lane's topic: several pipelines
/// (each its topics into its table) in one process, sharing the drivers.
pub struct TopicChains {
    chains: Vec<Box<dyn Chain>>,
    by_topic: std::collections::HashMap<String, usize>,
    /// Per slot handed out: (chain, that chain's slot).
    slots: Vec<Option<(usize, usize)>>,
}

impl TopicChains {
    /// `chains[i]` takes the lanes of the topics `topics[i]`.
    ///
    /// # Panics
    /// If the lengths differ or no chain is given.
    #[must_use]
    pub fn new(chains: Vec<Box<dyn Chain>>, topics: &[Vec<String>]) -> Self {
        assert!(
            !chains.is_empty() && chains.len() == topics.len(),
            "one topic list per chain"
        );
        let by_topic = topics
            .iter()
            .enumerate()
            .flat_map(|(i, ts)| ts.iter().map(move |t| (t.clone(), i)))
            .collect();
        Self {
            chains,
            by_topic,
            slots: Vec::new(),
        }
    }

    fn slot(&self, slot: usize) -> (usize, usize) {
        self.slots[slot].expect("a lane added to this chain")
    }
}

impl Chain for TopicChains {
    fn add_lane(
        &mut self,
        lane: LaneId,
        partition: &PartitionId,
        gate: Option<PendingGate>,
    ) -> usize {
        let chain = match self.by_topic.get(&*partition.topic) {
            Some(&c) => c,
            None => {
                // The source only reads configured topics.
                tracing::error!(%partition, "lane of a topic no pipeline names; using the first pipeline");
                0
            }
        };
        let inner = self.chains[chain].add_lane(lane, partition, gate);
        self.slots.push(Some((chain, inner)));
        self.slots.len() - 1
    }

    fn set_epoch(&mut self, slot: usize, epoch: u64) {
        let (c, s) = self.slot(slot);
        self.chains[c].set_epoch(s, epoch);
    }

    fn push(&mut self, slot: usize, msg: &Message<'_>) -> Result<(), ChainError> {
        let (c, s) = self.slot(slot);
        self.chains[c].push(s, msg)
    }

    fn tick(&mut self, now: Instant) -> Result<(), ChainError> {
        self.chains.iter_mut().try_for_each(|c| c.tick(now))
    }

    fn flush(&mut self) -> Result<(), ChainError> {
        self.chains.iter_mut().try_for_each(|c| c.flush())
    }

    fn remove_lane(&mut self, slot: usize) {
        if let Some(Some((c, s))) = self.slots.get(slot).copied() {
            self.chains[c].remove_lane(s);
            self.slots[slot] = None;
        }
    }

    fn take_shards_fed(&mut self, slot: usize) -> u64 {
        match self.slots.get(slot).copied().flatten() {
            Some((c, s)) => self.chains[c].take_shards_fed(s),
            None => 0,
        }
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
