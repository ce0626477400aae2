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
    /// The tables written: one, or several when a [`Router`] picks each
    /// message's.
    targets: Vec<Target<E>>,
    router: Option<Box<dyn Router>>,
    /// The policy of messages the router finds no table for.
    unroutable: Option<Arc<Rejections>>,
    /// Per lane slot: held, its messages neither written nor covered
    /// until the pipelines start again ([`Routed::Wait`]).
    held: Vec<bool>,
    writer: ShardWriter,
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

/// One table of a chain: its encoder and the shards it routes over.
struct Target<E> {
    encoder: E,
    slots: Arc<[u16]>,
    next_slot: usize,
    shard: usize,
    keyed: bool,
}

impl<E: RowEncode> Target<E> {
    fn new(encoder: E, slots: Arc<[u16]>, ctx: &ChainCtx) -> Self {
        assert!(!slots.is_empty(), "a slot table needs at least one slot");
        assert!(
            slots.iter().all(|&s| usize::from(s) < ctx.queues.shards()),
            "slot table names a shard without a queue"
        );
        let next_slot = ctx.thread % slots.len();
        Self {
            keyed: encoder.routes_by_key(),
            shard: usize::from(slots[next_slot]),
            next_slot,
            slots,
            encoder,
        }
    }
}

/// Picks each message's table when a chain writes several: routing by a
/// message's header or field (the binary's `routing`). Runs on the
/// driver thread, once per message.
pub trait Router: Send {
    /// The table of `msg`, among the chain's.
    fn route(&mut self, msg: &Message<'_>) -> Routed;
}

/// Where a [`Router`] sends a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Routed {
    /// To the chain's table of this index.
    Table(usize),
    /// Nowhere: a bad message, for the chain's policy of unroutable
    /// messages, with this reason.
    Refused(String),
    /// To a table that is being made, which the pipelines take on when
    /// they start again: its lane is held, nothing of it written or
    /// covered from this message on, so the watermark stops before it and
    /// the next start reads it again.
    Wait(String),
    /// No table's, and owes no row (a change stream's tombstone when the
    /// table comes from the value): covered, and counted skipped with
    /// this reason.
    Nothing(&'static str),
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
        Self::of_targets(vec![Target::new(encoder, slots, ctx)], ctx)
    }

    /// A chain writing several tables, each its encoder and slots (as
    /// [`with_slots`](Self::with_slots)), `router` picking each message's:
    /// one writer over them all, so a partition whose messages go to
    /// several tables is acknowledged (and committed) only as far as every
    /// table took its rows. Messages it finds no table for go to
    /// `unroutable`. At least one table.
    pub fn routed(
        tables: Vec<(E, Arc<[u16]>)>,
        ctx: &ChainCtx,
        router: Box<dyn Router>,
        unroutable: Arc<Rejections>,
    ) -> Self {
        let targets = (tables.into_iter())
            .map(|(encoder, slots)| Target::new(encoder, slots, ctx))
            .collect();
        let mut chain = Self::of_targets(targets, ctx);
        chain.router = Some(router);
        chain.unroutable = Some(unroutable);
        chain
    }

    fn of_targets(targets: Vec<Target<E>>, ctx: &ChainCtx) -> Self {
        assert!(!targets.is_empty(), "a chain writes at least one table");
        Self {
            takes_tombstones: targets[0].encoder.takes_tombstones(),
            writer: ShardWriter::new(
                ctx.queues.clone(),
                ctx.options.limits,
                ctx.thread as u64 + 0x9E37_79B9,
            )
            .with_clock(ctx.clock.clone())
            .with_skip_shard(usize::from(targets[0].slots[0])),
            targets,
            router: None,
            unroutable: None,
            held: Vec::new(),
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
    ///
    /// # Panics
    /// On a chain of several tables (exactly-once routes by topic only).
    #[must_use]
    pub fn exactly_once(mut self, plans: Arc<dyn crate::sink::BlockPlans>) -> Self {
        assert!(
            self.router.is_none(),
            "exactly-once writes one table per chain"
        );
        let mut writer = self.writer.exactly_once(plans);
        if !self.targets[0].keyed {
            writer = writer.route_blocks(self.targets[0].slots.clone());
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
        let policy = self.rejections.clone();
        let accepted = std::mem::take(&mut self.accepted);
        self.rejected_by(policy, accepted, slot, msg, failure)
    }

    /// `msg` has no table ([`Routed::Refused`]): a bad message for the
    /// policy of unroutable messages.
    fn refused(&mut self, slot: usize, msg: &Message<'_>, why: String) -> Result<(), ChainError> {
        let policy = self.unroutable.clone();
        let failure = EncodeFailure {
            column: None,
            value: None,
            reason: why,
        };
        // Not counted toward the decode policy's limits: the rows accepted
        // since its last rejection stay its own.
        self.rejected_by(policy, 0, slot, msg, failure)
    }

    /// `msg`'s table is being made ([`Routed::Wait`]): hold its lane.
    fn hold(&mut self, slot: usize, msg: &Message<'_>, table: &str) {
        if self.held.len() <= slot {
            self.held.resize(slot + 1, false);
        }
        self.held[slot] = true;
        tracing::info!(position = %MessagePosition::of(msg), table, "the message's table is being created: its partition waits here until the pipelines start again with it");
    }

    fn rejected_by(
        &mut self,
        policy: Option<Arc<Rejections>>,
        accepted: u64,
        slot: usize,
        msg: &Message<'_>,
        failure: crate::sink::EncodeFailure,
    ) -> Result<(), ChainError> {
        let Some(policy) = policy else {
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
        match policy.reject(&rejection, accepted) {
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
        t: usize,
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
        self.targets[t].encoder.barrier(msg).map_err(failed)?;
        self.nothing(slot, msg, reason)
    }

    fn push_keyed(&mut self, slot: usize, t: usize, msg: &Message<'_>) -> Result<(), ChainError> {
        self.row.clear();
        let rows = match self.targets[t].encoder.encode(msg, &mut self.row) {
            Ok(Encoded::Row) => 1,
            Ok(Encoded::Rows(n)) if self.writer.writes_blocks() => n,
            Ok(Encoded::Rows(_)) => return Err(self.stop(msg, SEVERAL_ROWS)),
            Ok(Encoded::Nothing { reason }) => return self.nothing(slot, msg, reason),
            Ok(Encoded::Stop { reason }) => return Err(self.stop(msg, reason)),
            Ok(Encoded::Barrier { reason }) => return self.barrier(slot, t, msg, reason),
            Err(failure) => return self.rejected(slot, msg, failure),
        };
        let target = &self.targets[t];
        let Some(hash) = target.encoder.route_hash(&self.row) else {
            let failure = crate::sink::EncodeFailure {
                column: None,
                value: None,
                reason: "the encoder produced no shard key hash for the row".into(),
            };
            return Err(self.decode_error(msg, failure));
        };
        let shard = usize::from(target.slots[(hash % target.slots.len() as u64) as usize]);
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
        let slot = self
            .writer
            .add_partition_lane(lane, partition.clone(), gate);
        if let Some(held) = self.held.get_mut(slot) {
            *held = false;
        }
        slot
    }

    fn set_epoch(&mut self, slot: usize, epoch: u64) {
        self.writer.set_epoch(slot, epoch);
    }

    fn push(&mut self, slot: usize, msg: &Message<'_>) -> Result<(), ChainError> {
        if self.held.get(slot) == Some(&true) {
            return Ok(());
        }
        if self.writer.written_before(slot, Offset(msg.offset)) {
            // Exactly-once, and the consumer delivered the message again:
            // its rows are in the lane's blocks already (the Kafka lane
            // reports how many, `redelivered`).
            self.metrics
                .messages_skipped
                .with_label_values(&[msg.topic, "redelivered"])
                .inc();
            return Ok(());
        }
        self.writer.stamp_next(msg.timestamp_ms);
        let t = if self.router.is_some() {
            // A tombstone the policy skips needs no table.
            if self.tombstone_skipped(slot, msg)? {
                return Ok(());
            }
            match self.router.as_mut().map(|r| r.route(msg)) {
                Some(Routed::Table(t)) => t,
                Some(Routed::Refused(why)) => return self.refused(slot, msg, why),
                Some(Routed::Wait(table)) => {
                    self.hold(slot, msg, &table);
                    return Ok(());
                }
                Some(Routed::Nothing(reason)) => return self.nothing(slot, msg, reason),
                None => 0,
            }
        } else {
            0
        };
        // Not while a replay is half cut: its block is re-cut at recorded
        // offsets and may not be sealed short, so its rows keep the schema
        // they started with (as the first time), and the switch waits.
        if self.targets[t].encoder.schema_pending() && !self.writer.replay_open() {
            if let Some(version) = self.targets[t].encoder.schema_switch() {
                self.writer.flush()?;
                self.writer.set_schema_of(&self.targets[t].slots, version);
            }
        }
        if self.router.is_none() && self.tombstone_skipped(slot, msg)? {
            return Ok(());
        }
        if self.targets[t].keyed {
            return self.push_keyed(slot, t, msg);
        }
        let target = &mut self.targets[t];
        let encoder = &mut target.encoder;
        let shard = target.shard;
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
            Err(NoRow::Barrier(reason)) => return self.barrier(slot, t, msg, reason),
            Err(NoRow::Failed(failure)) => return self.rejected(slot, msg, failure),
        }
        self.accepted += 1;
        let target = &mut self.targets[t];
        if self.writer.open_rows() <= before && target.slots.len() > 1 {
            // A chunk was sealed: the next slot's shard takes the next batch.
            target.next_slot = (target.next_slot + 1) % target.slots.len();
            target.shard = usize::from(target.slots[target.next_slot]);
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
        if let Some(held) = self.held.get_mut(slot) {
            *held = false;
        }
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
