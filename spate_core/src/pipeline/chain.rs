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
//! `fail`, it is the chain's error and stops the pipeline.
//! - [`TopicChains`]: one chain per pipeline of a process, chosen by the
//!   lane's topic.

use crate::checkpoint::PendingGate;
use crate::clock::SharedClock;
use crate::error::{ChainError, DecodeError, MessagePosition};
use crate::metrics::Metrics;
use crate::policy::{decode_reason, Action, DeadLetter, PolicyError, Rejection, Rejections, Stage};
use crate::record::{Message, Offset, PartitionId};
use crate::sink::{BatchLimits, RowEncode, ShardQueues, ShardWriter};
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
            && self
                .rejections
                .as_ref()
                .is_some_and(|r| r.tombstone(msg.topic, msg.partition, msg.offset));
        if skipped {
            self.writer.skip(slot, Offset(msg.offset))?;
        }
        Ok(skipped)
    }

    fn push_keyed(&mut self, slot: usize, msg: &Message<'_>) -> Result<(), ChainError> {
        self.row.clear();
        if let Err(failure) = self.encoder.encode(msg, &mut self.row) {
            return self.rejected(slot, msg, failure);
        }
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
                    Ok::<(), std::convert::Infallible>(())
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
        if let Some(version) = self.encoder.schema_switch() {
            self.writer.flush()?;
            self.writer.set_schema(version);
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
        let outcome =
            self.writer
                .append_keeping(slot, shard, Offset(msg.offset), original, |out| {
                    encoder.encode(msg, out)
                })?;
        if let Err(failure) = outcome {
            return self.rejected(slot, msg, failure);
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
mod tests {
    use super::*;
    use crate::sink::{BatchLimits, EncodeFailure, ShardReceiver};
    use std::time::Duration;

    /// Writes the payload as the row; routes by its first byte when keyed.
    struct ByteEncoder {
        keyed: bool,
    }

    impl RowEncode for ByteEncoder {
        fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<(), EncodeFailure> {
            match msg.payload {
                Some(p) if !p.is_empty() => {
                    out.extend_from_slice(p);
                    Ok(())
                }
                _ => Err(EncodeFailure {
                    column: Some("k".into()),
                    value: None,
                    reason: "empty".into(),
                }),
            }
        }
        fn routes_by_key(&self) -> bool {
            self.keyed
        }
        fn route_hash(&self, row: &[u8]) -> Option<u64> {
            self.keyed.then(|| u64::from(row[0]))
        }
    }

    fn ctx(shards: usize, rows: u64) -> (ChainCtx, Vec<ShardReceiver>) {
        let (queues, rx) = ShardQueues::new(shards, 1 << 20, 1 << 19);
        let options = SinkOptions {
            limits: BatchLimits {
                rows,
                bytes: 1 << 20,
                interval: Duration::from_secs(3600),
                jitter: 0.0,
                sizing: crate::sink::RowSizing::Fixed,
            },
        };
        let ctx = ChainCtx {
            thread: 0,
            queues,
            options,
            metrics: Arc::new(Metrics::new()),
            clock: crate::clock::system(),
        };
        (ctx, rx)
    }

    fn push(
        chain: &mut dyn Chain,
        slot: usize,
        offset: i64,
        payload: &[u8],
    ) -> Result<(), ChainError> {
        let msg = Message {
            topic: "t",
            partition: 0,
            offset,
            timestamp_ms: None,
            key: None,
            payload: Some(payload),
            headers: None,
        };
        chain.push(slot, &msg)
    }

    fn drain(rx: &mut ShardReceiver) -> Vec<u8> {
        let mut rows = Vec::new();
        while let Some(c) = rx.try_recv() {
            rows.extend_from_slice(&c.data);
        }
        rows
    }

    #[test]
    fn keyed_rows_go_to_the_slot_of_their_hash() {
        let (ctx, mut rx) = ctx(2, 1000);
        // Weights 1 and 3: slot table [0, 1, 1, 1].
        let slots: Arc<[u16]> = Arc::from(vec![0u16, 1, 1, 1]);
        let mut chain = EncodeChain::with_slots(ByteEncoder { keyed: true }, &ctx, slots);
        let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
        for (i, b) in (0u8..40).enumerate() {
            push(&mut chain, slot, i as i64, &[b]).unwrap();
        }
        chain.flush().unwrap();
        let on0 = drain(&mut rx[0]);
        let on1 = drain(&mut rx[1]);
        assert!(on0.iter().all(|b| b % 4 == 0), "{on0:?}");
        assert!(on1.iter().all(|b| b % 4 != 0), "{on1:?}");
        assert_eq!((on0.len(), on1.len()), (10, 30));
    }

    #[test]
    fn a_keyed_decode_error_names_the_message_and_leaves_no_row() {
        let (ctx, mut rx) = ctx(2, 1000);
        let mut chain = EncodeChain::new(ByteEncoder { keyed: true }, &ctx);
        let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
        push(&mut chain, slot, 0, &[1]).unwrap();
        let err = push(&mut chain, slot, 1, &[]).unwrap_err();
        assert!(err.to_string().contains("offset 1"), "{err}");
        chain.flush().unwrap();
        assert_eq!(drain(&mut rx[0]).len() + drain(&mut rx[1]).len(), 1);
    }

    fn with_policy(
        ctx: &ChainCtx,
        on_error: crate::policy::OnError,
        keyed: bool,
    ) -> EncodeChain<ByteEncoder> {
        let policy = crate::policy::ErrorPolicy {
            on_error,
            tombstones_are_errors: false,
            limit: crate::policy::RejectLimit {
                window: 100,
                max_ratio: 1.0,
                max_consecutive: 3,
            },
        };
        let r = Rejections::new(policy, &ctx.metrics, crate::clock::system());
        EncodeChain::new(ByteEncoder { keyed }, ctx).with_rejections(r)
    }

    fn tombstone(chain: &mut dyn Chain, slot: usize, offset: i64) -> Result<(), ChainError> {
        let msg = Message {
            topic: "t",
            partition: 0,
            offset,
            timestamp_ms: None,
            key: None,
            payload: None,
            headers: None,
        };
        chain.push(slot, &msg)
    }

    /// Under `skip`, bad messages and tombstones leave no row, are counted,
    /// and their offsets are covered: acknowledging every chunk moves the
    /// watermark past the last of them.
    #[test]
    fn skipped_messages_and_tombstones_are_counted_and_committed_past() {
        for keyed in [false, true] {
            let (ctx, mut rx) = ctx(1, 1000);
            let mut chain = with_policy(&ctx, crate::policy::OnError::Skip, keyed);
            let mut cp = crate::checkpoint::Checkpointer::new();
            let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
            let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), Some(gate));
            push(&mut chain, slot, 0, &[1]).unwrap();
            push(&mut chain, slot, 1, &[]).unwrap();
            tombstone(&mut chain, slot, 2).unwrap();
            push(&mut chain, slot, 3, &[2]).unwrap();
            push(&mut chain, slot, 4, &[]).unwrap();
            tombstone(&mut chain, slot, 5).unwrap();
            chain.flush().unwrap();
            let mut rows = 0;
            while let Some(c) = rx[0].try_recv() {
                rows += c.rows;
                c.acks.iter().for_each(|a| {
                    cp.ack(a);
                });
            }
            assert_eq!(rows, 2, "keyed {keyed}");
            assert_eq!(
                cp.watermark(LaneId(1)),
                Some(crate::record::Watermark(6)),
                "keyed {keyed}"
            );
            let text = ctx.metrics.encode_text();
            for needle in [
                "spate_messages_rejected_total{reason=\"invalid_value\",stage=\"decode\",topic=\"t\"} 2",
                "spate_messages_rejected_total{reason=\"tombstone\",stage=\"decode\",topic=\"t\"} 2",
            ] {
                assert!(text.contains(needle), "keyed {keyed}: {needle} in\n{text}");
            }
        }
    }

    #[test]
    fn fail_stops_at_the_first_bad_message_and_the_limit_names_itself() {
        let (ctx, _rx) = ctx(1, 1000);
        let mut chain = with_policy(&ctx, crate::policy::OnError::Fail, false);
        let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
        tombstone(&mut chain, slot, 0).unwrap();
        let e = push(&mut chain, slot, 1, &[]).unwrap_err().to_string();
        assert!(
            e.contains("topic t partition 0 offset 1, column `k`"),
            "{e}"
        );

        let mut chain = with_policy(&ctx, crate::policy::OnError::Skip, false);
        let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
        push(&mut chain, slot, 0, &[]).unwrap();
        push(&mut chain, slot, 1, &[]).unwrap();
        let e = push(&mut chain, slot, 2, &[]).unwrap_err().to_string();
        assert!(e.contains("3 consecutive messages rejected"), "{e}");
        assert!(e.contains("offset 2"), "{e}");
    }

    #[derive(Default)]
    struct Letters(std::sync::Mutex<Vec<crate::policy::DeadLetter>>);

    impl crate::policy::DeadLetterSink for Letters {
        fn store(
            &self,
            letter: &crate::policy::DeadLetter,
        ) -> Result<(), crate::policy::StoreError> {
            self.0.lock().unwrap().push(letter.clone());
            Ok(())
        }
        fn describe(&self) -> String {
            "memory".into()
        }
    }

    /// Under dead-letter, the bad message is stored with its error before
    /// its offset is covered; the row-less tail is committed past.
    #[test]
    fn dead_letters_are_stored_before_their_offset_is_covered() {
        let (ctx, mut rx) = ctx(1, 1000);
        let letters = Arc::new(Letters::default());
        let policy = crate::policy::ErrorPolicy {
            on_error: crate::policy::OnError::DeadLetter,
            ..Default::default()
        };
        let r = Rejections::with_dead_letters(
            policy,
            &ctx.metrics,
            crate::clock::system(),
            Some(letters.clone()),
        );
        let mut chain = EncodeChain::new(ByteEncoder { keyed: false }, &ctx).with_rejections(r);
        let mut cp = crate::checkpoint::Checkpointer::new();
        let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
        let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), Some(gate));
        push(&mut chain, slot, 0, &[1]).unwrap();
        push(&mut chain, slot, 1, &[]).unwrap();
        chain.flush().unwrap();
        while let Some(c) = rx[0].try_recv() {
            c.acks.iter().for_each(|a| {
                cp.ack(a);
            });
        }
        assert_eq!(cp.watermark(LaneId(1)), Some(crate::record::Watermark(2)));
        let stored = letters.0.lock().unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(
            (stored[0].offset, stored[0].column.as_deref()),
            (1, Some("k"))
        );
        assert!(
            stored[0].error.contains("topic t partition 0 offset 1"),
            "{:?}",
            stored[0]
        );
    }

    #[test]
    fn unkeyed_batches_take_turns_by_weight() {
        let (ctx, mut rx) = ctx(2, 2);
        let slots: Arc<[u16]> = Arc::from(vec![0u16, 1, 1, 1]);
        let mut chain = EncodeChain::with_slots(ByteEncoder { keyed: false }, &ctx, slots);
        let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
        // 16 rows in batches of 2: 8 batches, 2 on shard 0, 6 on shard 1.
        for i in 0..16u8 {
            push(&mut chain, slot, i64::from(i), &[i]).unwrap();
        }
        chain.flush().unwrap();
        assert_eq!((drain(&mut rx[0]).len(), drain(&mut rx[1]).len()), (4, 12));
    }
}
