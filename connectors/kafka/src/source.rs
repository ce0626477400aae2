//! [`KafkaSource`]: the controller-side half of the Kafka source.
//!
//! Owns the rdkafka consumer (through an `Arc`, because lanes' partition
//! queues keep it alive) and turns what its callbacks recorded into
//! [`SourceEvent`]s. End of input (`--until-end`): a lane reports its end
//! (`CommitReady`); once the broker confirms a commit at or past that end
//! the lane is retired (`LanesRetired`); when every assigned lane is
//! retired the source is `Drained`.
//!
//! Commits: an asynchronous commit the broker refuses (the commit
//! callback) is reported as `CommitFailed`, so the controller offers it
//! again on its next tick. Confirmations are not reported
//! (`confirms_async_commits` is false): the local test broker (tansu)
//! sends no commit callbacks back, so an asynchronous commit counts as
//! committed once sent, until refused.
//!
//! Start: before it subscribes, the source asks the brokers for metadata
//! ([`connect::probe`]): a TLS, certificate or SASL failure that no broker
//! answer outweighs fails `new` with one line naming the broker and the
//! step ([`ConfigError::Connect`]); brokers that do not answer at all (an
//! outage) only get a warning after [`STARTUP_PROBE`], since librdkafka
//! keeps trying. Later, such a failure that keeps coming for
//! [`CONNECT_FAILURE_PERSIST`] (a password rotated under a running
//! pipeline) fails the pipeline instead of being retried forever.
//! Shutdown: once `shutdown_deadline` is set, synchronous commits go out
//! with their own reply queue, polled with the time left
//! (`commit_within`): a broker that stops answering fails the final
//! commit instead of hanging the process. An empty assignment is reported
//! as `Assigned([])`: the member joined (a standby member is ready).
//!
//! Prefetch: librdkafka's limits apply per partition and are fixed when
//! the consumer is created, so the prefetch budget is split over the
//! subscribed topics' partitions, read from a short-lived metadata client
//! at start (`subscribed_partitions`).
//!
//! Polling (`poll_events`, on the controller thread): the consumer poll,
//! and so every rdkafka callback, runs on a scoped `spate-kafka-poll`
//! thread, while the controller thread waits for it and serves the
//! [`RevokeRequest`]s the rebalance callback sends, with the runtime's
//! `Revoker`. The callback blocks on the answer (bounded by the revoke
//! budget) and commits it before librdkafka unassigns; a revocation thus
//! keeps its order (stop lanes, drain barrier with deadline, synchronous
//! commit, unassign) without lending the revoker to the callback.

use crate::config::{ConfigError, KafkaSourceConfig, DEFAULT_PREFETCH_PARTITIONS};
use crate::connect::{self, ConnectFailure, Probe};
use crate::context::{
    commit_list, lock, record_max, PrefetchWatch, RevokeRequest, SpateContext, SplitPartition,
};
use crate::fetch_error::{disposition, Disposition};
use crate::lane::{KafkaLane, LaneEnd};
use crate::rendezvous::call_serving;
use crossbeam_channel::{unbounded, Receiver, Sender};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Message as _};
use rdkafka::topic_partition_list::TopicPartitionList;
use rdkafka::Offset as KafkaOffset;
use spate_core::error::SourceError;
use spate_core::record::{Offset, PartitionId, Watermark};
use spate_core::source::{LaneId, Revoker, Source, SourceEvent};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Kafka consumer-group source.
pub struct KafkaSource {
    consumer: Arc<BaseConsumer<SpateContext>>,
    /// Handed to each lane, which reports its end of input on it.
    ended_tx: Sender<LaneEnd>,
    ended_rx: Receiver<LaneEnd>,
    /// Lanes that reached their end: next offset after their last message.
    ended: HashMap<LaneId, Option<i64>>,
    retired: HashSet<LaneId>,
    /// Where lanes made by [`Source::rewind`] began reading: what they
    /// are read again from should nothing of them be acknowledged.
    starts: HashMap<LaneId, i64>,
    until_end: bool,
    drained_reported: bool,
    topics: Vec<String>,
    /// Since when the broker has been answering "unknown topic" with no
    /// partition assigned yet.
    unknown_since: Option<Instant>,
    /// Set once the shutdown began: no synchronous commit waits past it.
    deadline: Option<Instant>,
}

/// How long a bounded run waits for subscribed topics to exist before it
/// fails (a just-created topic can take a moment to appear in metadata).
const UNKNOWN_TOPIC_GRACE: Duration = Duration::from_secs(10);

/// How long the startup probe waits for a broker to answer before it
/// leaves the brokers to librdkafka's retries (or, if a TLS or SASL
/// failure was seen meanwhile, fails).
pub const STARTUP_PROBE: Duration = Duration::from_secs(20);

/// How long a TLS, certificate or SASL failure of a broker must keep
/// coming, while running, before the pipeline fails on it (librdkafka
/// repeats an identical failure every 30 s at most).
pub const CONNECT_FAILURE_PERSIST: Duration = Duration::from_secs(60);

/// How much longer than the revoke budget the rebalance callback waits for
/// the controller's answer: the revoker bounds itself by the budget, this
/// covers its last steps (forgetting the lanes) and the hand-over.
const REVOKE_REPLY_GRACE: Duration = Duration::from_millis(500);

/// What one `BaseConsumer::poll` returned, owned so that it can leave the
/// polling thread.
enum Polled {
    Nothing,
    /// A message on the consumer queue (which must never carry one).
    Stray {
        topic: String,
        partition: i32,
        offset: i64,
    },
    Error(KafkaError),
}

impl From<Option<KafkaResult<BorrowedMessage<'_>>>> for Polled {
    fn from(polled: Option<KafkaResult<BorrowedMessage<'_>>>) -> Self {
        match polled {
            None => Polled::Nothing,
            Some(Ok(m)) => Polled::Stray {
                topic: m.topic().to_string(),
                partition: m.partition(),
                offset: m.offset(),
            },
            Some(Err(e)) => Polled::Error(e),
        }
    }
}

impl KafkaSource {
    /// Create the consumer and subscribe to the topics.
    pub fn new(config: &KafkaSourceConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let (ended_tx, ended_rx) = unbounded();
        let partitions = subscribed_partitions(config);
        let per_partition = config.prefetch_per_partition(partitions);
        let context = SpateContext::new(
            config.revoke_timeout + REVOKE_REPLY_GRACE,
            PrefetchWatch::new(per_partition as u64, partitions),
        );
        tracing::info!(
            partitions,
            prefetch_per_partition = per_partition,
            "prefetch budget split over the subscribed topics' partitions"
        );
        let consumer: BaseConsumer<SpateContext> = config
            .client_config_for(partitions)
            .create_with_context(context)
            .map_err(|e| ConfigError::Client(e.to_string()))?;
        startup_probe(&consumer, &config.brokers)?;
        let consumer = Arc::new(consumer);
        let _ = consumer.context().me.set(Arc::downgrade(&consumer));
        let topics: Vec<&str> = config.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|e| ConfigError::Client(e.to_string()))?;
        Ok(Self {
            consumer,
            ended_tx,
            ended_rx,
            ended: HashMap::new(),
            retired: HashSet::new(),
            starts: HashMap::new(),
            until_end: config.until_end,
            drained_reported: false,
            topics: config.topics.clone(),
            unknown_since: None,
            deadline: None,
        })
    }

    /// The consumer's SASL credentials, to replace while it runs.
    #[must_use]
    pub fn credentials(&self) -> crate::SaslCredentials {
        let client: Arc<dyn crate::credentials::NativeClient> = self.consumer.clone();
        crate::SaslCredentials::of(&client, "consumer")
    }

    /// Run one `BaseConsumer::poll` on a scoped `spate-kafka-poll` thread
    /// while this thread (the controller) serves, with `revoker`, the
    /// revocations the rebalance callback asks for. The callback only
    /// signals and waits for the answer; the revoker never leaves this
    /// thread, and nothing outlives the call.
    fn poll_client(
        &mut self,
        timeout: Duration,
        revoker: &mut dyn Revoker,
    ) -> Result<Polled, SourceError> {
        let consumer: &BaseConsumer<SpateContext> = &self.consumer;
        let (requests, incoming) = unbounded::<RevokeRequest>();
        *lock(&consumer.context().revoke_tx) = Some(requests);
        let polled = call_serving(
            "spate-kafka-poll",
            || Polled::from(consumer.poll(timeout)),
            &incoming,
            |request| {
                let watermarks = revoker.revoke(&request.question);
                request.answer(watermarks);
            },
        );
        *lock(&consumer.context().revoke_tx) = None;
        polled.map_err(|e| SourceError::Fatal(format!("polling the consumer: {e}")))
    }

    /// Act on what the poll itself returned.
    fn check_polled(&mut self, polled: Polled) -> Result<(), SourceError> {
        let ctx = self.consumer.context();
        match polled {
            Polled::Nothing => {}
            Polled::Stray {
                topic,
                partition,
                offset,
            } => {
                // Every assigned partition's queue is split before assign,
                // so the consumer queue never carries messages. If one shows
                // up, stop rather than guess: nothing past it is committed.
                return Err(SourceError::Fatal(format!(
                    "message of topic {topic} partition {partition} offset {offset} arrived on the consumer queue instead of its lane"
                )));
            }
            Polled::Error(e) => {
                use rdkafka::types::RDKafkaErrorCode as C;
                let code = e.rdkafka_error_code();
                // Broker authentication failures count only if they
                // persist (the failure log below); other errors that
                // cannot clear (an ACL refusing the group or a topic,
                // librdkafka's fatal error) stop the pipeline now.
                if let Some(code) = code.filter(|c| !matches!(c, C::Authentication | C::SSL)) {
                    if let Disposition::Permanent(why) = disposition(code) {
                        return Err(SourceError::Fatal(format!(
                            "consumer of {}: {e}: {why}",
                            self.topics.join(", ")
                        )));
                    }
                }
                let unknown = code == Some(C::UnknownTopicOrPartition);
                if unknown && self.until_end && lock(&ctx.shared).by_id.is_empty() {
                    self.unknown_since.get_or_insert_with(Instant::now);
                }
                tracing::warn!(error = %e, "consumer error");
            }
        }
        let persisting = lock(&ctx.failures).persisting(Instant::now(), CONNECT_FAILURE_PERSIST);
        if let Some(f) = persisting {
            return Err(SourceError::Fatal(format!(
                "{f} (failing for {}s or more)",
                CONNECT_FAILURE_PERSIST.as_secs()
            )));
        }
        // librdkafka reports a missing topic once; keep the clock running.
        if let Some(since) = self.unknown_since {
            if since.elapsed() >= UNKNOWN_TOPIC_GRACE && lock(&ctx.shared).by_id.is_empty() {
                return Err(SourceError::Fatal(format!(
                    "topic {} not found on the brokers after {}s; a bounded run (--until-end) needs existing topics",
                    self.topics.join(", "),
                    UNKNOWN_TOPIC_GRACE.as_secs()
                )));
            }
        }
        Ok(())
    }

    /// Turn what the callbacks and the lanes recorded into events.
    fn gather_events(&mut self) -> Result<Vec<SourceEvent<KafkaLane>>, SourceError> {
        let (split, lost, revoked, fatal, refused, joined) = {
            let mut shared = lock(&self.consumer.context().shared);
            (
                std::mem::take(&mut shared.new_lanes),
                std::mem::take(&mut shared.lost),
                std::mem::take(&mut shared.revoked),
                shared.fatal.take(),
                std::mem::take(&mut shared.refused),
                std::mem::take(&mut shared.joined),
            )
        };
        if let Some(f) = fatal {
            return Err(SourceError::Fatal(f));
        }
        let new_lanes = self.make_lanes(split)?;
        for lane in revoked.iter().chain(lost.iter()) {
            self.ended.remove(lane);
            self.retired.remove(lane);
            self.starts.remove(lane);
        }
        let mut events: Vec<SourceEvent<KafkaLane>> = refused
            .into_iter()
            .map(|(watermarks, error)| SourceEvent::CommitFailed { watermarks, error })
            .collect();
        if !lost.is_empty() {
            events.push(SourceEvent::Lost(lost));
        }
        if !new_lanes.is_empty() {
            self.unknown_since = None;
            events.push(SourceEvent::Assigned(new_lanes));
        } else if joined {
            // An empty assignment (a standby member: more members than
            // partitions) still means joined: ready, and for a bounded run
            // the start of its idle grace period.
            events.push(SourceEvent::Assigned(Vec::new()));
        }
        self.gather_lane_ends(&mut events);
        Ok(events)
    }

    /// Lanes of the partitions the callbacks split off.
    fn make_lanes(&self, split: Vec<SplitPartition>) -> Result<Vec<KafkaLane>, SourceError> {
        split.into_iter().map(|s| self.lane_of(s)).collect()
    }

    /// The lane of a partition the callbacks (or a rewind) split off.
    fn lane_of(&self, s: SplitPartition) -> Result<KafkaLane, SourceError> {
        let partition = s.partition.clone();
        KafkaLane::new(
            s.id,
            s.partition,
            &self.consumer,
            s.queue,
            self.until_end,
            self.ended_tx.clone(),
            s.fence,
        )
        .map(|lane| lane.with_epoch(s.generation))
        .ok_or_else(|| SourceError::Fatal(format!("no fetch queue for {partition}")))
    }

    /// End of input: lanes that ended (`CommitReady`), lanes whose end is
    /// committed (`LanesRetired`), and the whole source (`Drained`).
    fn gather_lane_ends(&mut self, events: &mut Vec<SourceEvent<KafkaLane>>) {
        let mut ready = Vec::new();
        while let Ok(end) = self.ended_rx.try_recv() {
            if lock(&self.consumer.context().shared)
                .by_id
                .contains_key(&end.lane)
            {
                self.ended.insert(end.lane, end.next_offset);
                ready.push(end.lane);
            }
        }
        if !ready.is_empty() {
            events.push(SourceEvent::CommitReady(ready));
        }
        if let Err(e) = self.confirm_lane_ends() {
            // Retried on the next poll; events already gathered must not be lost.
            tracing::warn!(error = %e, "confirming the commit of ended lanes failed; retrying");
        }
        let retire = self.retirable();
        if !retire.is_empty() {
            self.retired.extend(retire.iter().copied());
            events.push(SourceEvent::LanesRetired(retire));
        }
        if self.until_end && !self.drained_reported {
            let shared = lock(&self.consumer.context().shared);
            if !shared.by_id.is_empty() && shared.by_id.keys().all(|l| self.retired.contains(l)) {
                self.drained_reported = true;
                events.push(SourceEvent::Drained);
            }
        }
    }

    fn tpl(&self, lanes: &[LaneId]) -> Result<TopicPartitionList, SourceError> {
        let shared = lock(&self.consumer.context().shared);
        let mut tpl = TopicPartitionList::new();
        for lane in lanes {
            if let Some(p) = shared.by_id.get(lane) {
                tpl.add_partition(&p.topic, p.partition);
            }
        }
        Ok(tpl)
    }

    /// Owned partitions whose last asynchronous commit the broker has not
    /// confirmed (and that `include` selects), at the value that was sent.
    fn unconfirmed(
        &self,
        include: impl Fn(&PartitionId, i64) -> bool,
    ) -> Vec<(PartitionId, Watermark)> {
        let shared = lock(&self.consumer.context().shared);
        shared
            .sent
            .iter()
            .filter(|(p, s)| {
                shared.lanes.contains_key(*p) && shared.committed.get(*p).is_none_or(|c| c < *s)
            })
            .filter(|(p, s)| include(p, **s))
            .map(|(p, s)| (p.clone(), Watermark(*s)))
            .collect()
    }

    /// An ended lane whose final watermark went out in an asynchronous
    /// commit would wait forever for a confirmation (tansu never sends one
    /// back through the consumer queue): re-send those commits
    /// synchronously, so the lane can retire.
    fn confirm_lane_ends(&mut self) -> Result<(), SourceError> {
        let ends: HashMap<PartitionId, i64> = {
            let shared = lock(&self.consumer.context().shared);
            self.ended
                .iter()
                .filter(|(lane, _)| !self.retired.contains(*lane))
                .filter_map(|(lane, end)| Some((shared.by_id.get(lane)?.clone(), (*end)?)))
                .collect()
        };
        if ends.is_empty() {
            return Ok(());
        }
        let unconfirmed = self.unconfirmed(|p, sent| ends.get(p).is_some_and(|end| sent >= *end));
        if unconfirmed.is_empty() {
            return Ok(());
        }
        self.commit(&unconfirmed, true)
    }

    /// Lanes that ended and whose end the broker confirmed as committed.
    fn retirable(&self) -> Vec<LaneId> {
        let shared = lock(&self.consumer.context().shared);
        self.ended
            .iter()
            .filter(|(lane, _)| !self.retired.contains(*lane))
            .filter(|(lane, end)| {
                let Some(p) = shared.by_id.get(*lane) else {
                    return false;
                };
                match end {
                    // Delivered nothing: nothing to commit.
                    None => true,
                    Some(end) => shared.committed.get(p).is_some_and(|c| c >= end),
                }
            })
            .map(|(lane, _)| *lane)
            .collect()
    }
}

/// The longest a rewind waits for librdkafka's seek, or for the group
/// coordinator's committed offset of a partition none of whose rows was
/// acknowledged yet.
const REWIND_TIMEOUT: Duration = Duration::from_secs(10);

impl KafkaSource {
    /// Where a lane that had nothing acknowledged began: the group's
    /// committed offset of `partition`, or, with none committed, the
    /// beginning (read again rather than skipped: with
    /// `auto.offset.reset=latest` that re-reads the partition's history,
    /// duplicates, never a gap).
    fn start_of(&self, partition: &PartitionId) -> Result<KafkaOffset, SourceError> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&partition.topic, partition.partition);
        let committed = self
            .consumer
            .committed_offsets(tpl, REWIND_TIMEOUT)
            .map_err(|e| SourceError::Fatal(format!("committed offset of {partition}: {e}")))?;
        let offset = committed
            .find_partition(&partition.topic, partition.partition)
            .map(|e| e.offset());
        Ok(match offset {
            Some(KafkaOffset::Offset(o)) => KafkaOffset::Offset(o),
            _ => {
                tracing::warn!(%partition, "no committed offset to read the partition again from; reading it from the beginning");
                KafkaOffset::Beginning
            }
        })
    }
}

/// Fail on a broker connection failure that cannot clear by itself (a
/// wrong CA, a wrong password, TLS against a plain listener), unless a
/// broker answers; warn once if none answers within [`STARTUP_PROBE`].
fn startup_probe(consumer: &BaseConsumer<SpateContext>, brokers: &str) -> Result<(), ConfigError> {
    match connect::probe(consumer, STARTUP_PROBE, ConnectFailure::is_definite) {
        Probe::Answered(_) => Ok(()),
        Probe::Failed(f) => Err(ConfigError::Connect(f)),
        Probe::NoAnswer(last, seen) => {
            if let Some(f) = seen.iter().find(|f| f.step.is_configuration()) {
                return Err(ConfigError::Connect(f.clone()));
            }
            let seen: Vec<String> = seen.iter().map(ToString::to_string).collect();
            tracing::warn!(
                brokers,
                error = %last,
                failures = %seen.join(" | "),
                "no Kafka broker answered within {}s; librdkafka keeps trying",
                STARTUP_PROBE.as_secs()
            );
            Ok(())
        }
    }
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        self.consumer
            .context()
            .closing
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

impl Source for KafkaSource {
    type Lane = KafkaLane;

    fn poll_events(
        &mut self,
        timeout: Duration,
        revoker: &mut dyn Revoker,
    ) -> Result<Vec<SourceEvent<KafkaLane>>, SourceError> {
        let polled = self.poll_client(timeout, revoker)?;
        self.check_polled(polled)?;
        self.gather_events()
    }

    fn rewind(
        &mut self,
        lane: LaneId,
        from: Option<Watermark>,
    ) -> Result<Option<KafkaLane>, SourceError> {
        let partition = {
            let mut shared = lock(&self.consumer.context().shared);
            let Some(partition) = shared.by_id.remove(&lane) else {
                return Ok(None);
            };
            // No take of the old lane runs past here: the seek below must
            // not straddle one (see `Fence`).
            if let Some(fence) = shared.fences.remove(&lane) {
                fence.end();
            }
            shared.lanes.remove(&partition);
            partition
        };
        self.ended.remove(&lane);
        self.retired.remove(&lane);
        let began = self.starts.remove(&lane);
        let offset = match (from, began) {
            (Some(w), _) => KafkaOffset::Offset(w.0),
            // A lane made by a rewind, nothing of it acknowledged.
            (None, Some(o)) => KafkaOffset::Offset(o),
            (None, None) => self.start_of(&partition)?,
        };
        let (topic, p) = (&*partition.topic, partition.partition);
        // Messages fetched before the seek are of an older version of the
        // partition's fetch state: librdkafka drops them from its queue.
        self.consumer
            .seek(topic, p, offset, REWIND_TIMEOUT)
            .map_err(|e| SourceError::Fatal(format!("seek of {partition} to {offset:?}: {e}")))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, p);
        // The old lane may have been paused; a new lane starts resumed.
        self.consumer
            .resume(&tpl)
            .map_err(|e| SourceError::Fatal(format!("resume of {partition}: {e}")))?;
        let generation = crate::rebalance::generation(&self.consumer);
        let ctx = self.consumer.context();
        let split = ctx
            .split(
                &self.consumer,
                &mut lock(&ctx.shared),
                partition.clone(),
                generation,
            )
            .ok_or_else(|| {
                SourceError::Fatal(format!("could not split the queue of {partition}"))
            })?;
        if let KafkaOffset::Offset(o) = offset {
            self.starts.insert(split.id, o);
        }
        self.lane_of(split).map(Some)
    }

    fn pause(&mut self, lanes: &[LaneId]) -> Result<(), SourceError> {
        let tpl = self.tpl(lanes)?;
        if tpl.count() == 0 {
            return Ok(());
        }
        self.consumer
            .pause(&tpl)
            .map_err(|e| SourceError::Transient(format!("pause: {e}")))
    }

    fn resume(&mut self, lanes: &[LaneId]) -> Result<(), SourceError> {
        let tpl = self.tpl(lanes)?;
        if tpl.count() == 0 {
            return Ok(());
        }
        self.consumer
            .resume(&tpl)
            .map_err(|e| SourceError::Transient(format!("resume: {e}")))
    }

    fn commit(
        &mut self,
        watermarks: &[(PartitionId, Watermark)],
        sync: bool,
    ) -> Result<(), SourceError> {
        // Only partitions this member still owns: a commit for a revoked
        // partition could clobber its new owner's progress.
        let owned: Vec<(PartitionId, Watermark)> = {
            let shared = lock(&self.consumer.context().shared);
            watermarks
                .iter()
                .filter(|(p, _)| shared.lanes.contains_key(p))
                .cloned()
                .collect()
        };
        if owned.is_empty() {
            return Ok(());
        }
        let tpl =
            commit_list(&owned).map_err(|e| SourceError::Fatal(format!("commit list: {e}")))?;
        let mode = if sync {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        tracing::debug!(?owned, sync, "committing");
        match self.deadline {
            // Shutting down: wait for the broker's answer no longer than
            // the shutdown's budget.
            Some(deadline) if sync => commit_within(&self.consumer, &tpl, deadline)?,
            _ => self
                .consumer
                .commit(&tpl, mode)
                .map_err(|e| SourceError::Transient(format!("commit: {e}")))?,
        }
        let mut shared = lock(&self.consumer.context().shared);
        for (p, w) in &owned {
            if sync {
                record_max(&mut shared.committed, p, w.0);
            } else {
                record_max(&mut shared.sent, p, w.0);
            }
        }
        Ok(())
    }

    fn flush_commits(&mut self, timeout: Duration) -> Result<(), SourceError> {
        // Re-send, synchronously, every asynchronous commit the broker has
        // not confirmed: commits are idempotent, and a synchronous answer
        // is the only confirmation that does not depend on callbacks.
        let unconfirmed = self.unconfirmed(|_, _| true);
        if unconfirmed.is_empty() {
            return Ok(());
        }
        let by = Instant::now() + timeout;
        let outer = self.deadline;
        self.deadline = Some(outer.map_or(by, |d| d.min(by)));
        let result = self.commit(&unconfirmed, true);
        self.deadline = outer;
        result
    }

    fn shutdown_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
    }

    fn prefetched_bytes(&mut self) -> Option<u64> {
        self.consumer.context().prefetch.latest()
    }

    fn high_watermarks(&mut self) -> Vec<(PartitionId, Offset)> {
        let context = self.consumer.context();
        let owned = lock(&context.shared);
        lock(&context.high_watermarks)
            .iter()
            .filter(|(p, _)| owned.lanes.contains_key(*p))
            .map(|(p, &hw)| (p.clone(), Offset(hw)))
            .collect()
    }
}

/// How long start-up waits for the subscribed topics' metadata.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// The subscribed topics' partition count (every partition may end up
/// with this member), from a short-lived metadata client: librdkafka's
/// prefetch limits are fixed when the consumer is created, and applied per
/// partition. Falls back to [`DEFAULT_PREFETCH_PARTITIONS`] if the
/// metadata is not available (a topic not created yet); partitions added
/// later keep the start-time share.
fn subscribed_partitions(config: &KafkaSourceConfig) -> usize {
    match partition_count(config, &config.topics) {
        Ok(0) => DEFAULT_PREFETCH_PARTITIONS,
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "no metadata for the prefetch budget; assuming {DEFAULT_PREFETCH_PARTITIONS} partitions");
            DEFAULT_PREFETCH_PARTITIONS
        }
    }
}

/// How many partitions `topics` have now, from a short-lived metadata
/// client of `config`'s brokers (it joins no group); a topic that does
/// not exist counts none. `Err`: a topic's metadata did not arrive within
/// a few seconds.
pub fn partition_count(config: &KafkaSourceConfig, topics: &[String]) -> Result<usize, String> {
    let mut client_config = config.client_config();
    client_config.remove("group.id");
    let client: BaseConsumer = client_config.create().map_err(|e| e.to_string())?;
    let mut total = 0;
    for topic in topics {
        let m = (client.fetch_metadata(Some(topic.as_str()), METADATA_TIMEOUT))
            .map_err(|e| format!("metadata of topic {topic}: {e}"))?;
        total += (m.topics().iter())
            .filter(|t| t.error().is_none())
            .map(|t| t.partitions().len())
            .sum::<usize>();
    }
    Ok(total)
}

/// The names of every topic of the cluster (for topic patterns, which
/// spate matches itself: see `routing` in the binary), internal ones
/// (`__consumer_offsets`, ...) left out.
pub fn list_topics(config: &KafkaSourceConfig) -> Result<Vec<String>, String> {
    let mut client_config = config.client_config();
    client_config.remove("group.id");
    let client: BaseConsumer = client_config.create().map_err(|e| e.to_string())?;
    let m = (client.fetch_metadata(None, METADATA_TIMEOUT))
        .map_err(|e| format!("the cluster's topics: {e}"))?;
    let mut names: Vec<String> = (m.topics().iter())
        .filter(|t| t.error().is_none() && !t.name().starts_with("__"))
        .map(|t| t.name().to_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// A synchronous commit that waits for the broker's answer until
/// `deadline` at most (`BaseConsumer::commit` in sync mode waits forever
/// for a broker that stopped answering): the commit goes out with its own
/// reply queue, which is polled with the time left. Without an answer in
/// time the commit counts as failed: nothing unconfirmed is recorded as
/// committed.
fn commit_within(
    consumer: &BaseConsumer<SpateContext>,
    tpl: &TopicPartitionList,
    deadline: Instant,
) -> Result<(), SourceError> {
    use rdkafka::bindings as rdsys;
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(SourceError::Transient(
            "commit: the shutdown deadline passed".into(),
        ));
    }
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live client; the queue is ours and destroyed
    // below (librdkafka keeps its own reference for a pending reply).
    let queue = unsafe { rdsys::rd_kafka_queue_new(rk) };
    if queue.is_null() {
        return Err(SourceError::Transient("commit: no reply queue".into()));
    }
    let _queue = QueueGuard(queue);
    // SAFETY: valid client, list and queue; with a queue and the event API
    // the result arrives as an OFFSET_COMMIT event on it.
    let err =
        unsafe { rdsys::rd_kafka_commit_queue(rk, tpl.ptr(), queue, None, std::ptr::null_mut()) };
    if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Err(SourceError::Transient(format!(
            "commit: {}",
            KafkaError::ConsumerCommit(err.into())
        )));
    }
    let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
    // SAFETY: our queue; a non-null event is destroyed below.
    let event = unsafe { rdsys::rd_kafka_queue_poll(queue, ms) };
    if event.is_null() {
        return Err(SourceError::Transient(format!(
            "commit: no answer from the broker within {left:?} (shutdown deadline)"
        )));
    }
    // SAFETY: a live event; its partition list lives as long as it does.
    let answer = unsafe {
        let mut answer = match rdsys::rd_kafka_event_error(event) {
            rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => Ok(()),
            e => Err(KafkaError::ConsumerCommit(e.into()).to_string()),
        };
        let list = rdsys::rd_kafka_event_topic_partition_list(event);
        if answer.is_ok() && !list.is_null() {
            let n = usize::try_from((*list).cnt).unwrap_or(0);
            for i in 0..n {
                let e = &*(*list).elems.add(i);
                if e.err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    answer = Err(format!(
                        "partition {}: {}",
                        e.partition,
                        KafkaError::ConsumerCommit(e.err.into())
                    ));
                    break;
                }
            }
        }
        rdsys::rd_kafka_event_destroy(event);
        answer
    };
    answer.map_err(|e| SourceError::Transient(format!("commit: {e}")))
}

/// Destroys a reply queue of [`commit_within`].
struct QueueGuard(*mut rdkafka::bindings::rd_kafka_queue_t);

impl Drop for QueueGuard {
    fn drop(&mut self) {
        // SAFETY: created by rd_kafka_queue_new, destroyed once.
        unsafe { rdkafka::bindings::rd_kafka_queue_destroy(self.0) }
    }
}
