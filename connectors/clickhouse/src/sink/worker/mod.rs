//! One insert worker: a tokio task that takes chunks from its shard's
//! queue and inserts each until it is in, or the error says retrying cannot
//! help.
//!
//! A chunk is acknowledged only after ClickHouse confirmed the insert.
//! Retriable failures are retried with the same bytes and, where the
//! server takes one, the same deduplication token (so a retry whose
//! earlier attempt did land is recognised: replicated block deduplication,
//! or the token's; see [`super::settings`]). Each attempt has its own
//! timeout, doubled after every attempt of the chunk that timed out
//! ([`RetryPolicy::attempt_timeout`]), because a timed-out insert keeps
//! running on the server and a fixed timeout shorter than the server's
//! insert time would retry forever, each attempt landing again; what
//! follows a failure is [`Attempts::next`]'s decision, what is logged and
//! counted goes through [`super::events`]. A non-retriable failure fails
//! the chunk's ranges and reports a fatal error; afterwards the worker
//! abandons every chunk it takes, so nothing past the failure can be
//! acknowledged. When the drain deadline passes (`abandon`), the worker
//! abandons what it holds and stops.
//!
//! A data error (the server blames rows: [`InsertError::is_row_error`])
//! is not the end of the chunk: the worker bisects it
//! ([`super::isolate::Bisection`]) until the rows that fail alone are
//! isolated, inserting every other row once, and hands each isolated row
//! to the pipeline's error policy ([`Rejections`]): under `skip` the chunk
//! is then acknowledged whole; under `fail` (or without a policy) the
//! first isolated row fails the pipeline, named by topic, partition and
//! offset.
//!
//! Receives `Chunk`s from its `ShardReceiver` (shared with the shard's
//! other workers), sends `AckEvent`s to the controller.

use super::exactly_once::stage::Intents;
use super::exactly_once::IntentLog;
use super::shared::PoolShared;
use crate::encode::NativeScratch;
use crate::sink::insert::events::ChunkInserted;
use crate::sink::insert::outcome::Attempt;
use crate::sink::insert::pace::Pace;
use crate::sink::insert::shard::Shard;
use crate::sink::insert::target::InsertTarget;
use spate_core::checkpoint::AckRange;
use spate_core::error::FatalError;
use spate_core::policy::Rejections;
use spate_core::sink::{AckEvent, AckSender, Chunk, QueueDepths, ShardReceiver, Spare};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::Mutex;
use tracing::Instrument;

mod attempt;
mod body;
mod reject;
mod stream;

pub use stream::StreamBounds;

use body::in_flight_charge;

/// Copies of a chunk's size an insert worker holds while it inserts the
/// chunk, besides the chunk itself (which stays for retries and for
/// isolating rejected rows). Native: the transposition's column buffers
/// and the body they are written into, both at once while it runs, the
/// body alone afterwards. RowBinary: the body, and the client's compressed
/// slices ([`crate::client::send_buffer_bytes`], never more than the
/// body). The budget ([`spate_core::sink::ShardQueues`]'s high water, set
/// by the binary) leaves room for this per worker: lanes cannot be paused
/// for a chunk a worker already took.
pub const IN_FLIGHT_COPIES: usize = 2;

pub(crate) struct Worker<C, L = IntentLog> {
    pub(crate) shard: Arc<Shard<C>>,
    pub(crate) index: usize,
    pub(crate) rx: Arc<Mutex<ShardReceiver>>,
    pub(crate) acks: AckSender,
    pub(crate) shared: Arc<PoolShared>,
    /// Exactly-once: record each chunk's intent before its first attempt,
    /// check its fences before that attempt and before every retry.
    pub(crate) intents: Option<Arc<L>>,
    /// The pipeline's error policy for rows the server rejects (`None`:
    /// fail on the first).
    pub(crate) rejections: Option<Arc<Rejections>>,
    /// Where the body of the chunk in flight is counted (see `insert`).
    pub(crate) depths: QueueDepths,
    /// The transposition's buffers and the last body, kept for the next
    /// insert within the worker's room ([`QueueDepths::worker_room`]).
    pub(crate) scratch: Arc<std::sync::Mutex<NativeScratch>>,
    /// How the worker waits: the drain deadline ends every wait, retried
    /// errors are reported in the stall table `/readyz` reads.
    pub(crate) pace: Pace,
    /// Stream batches into long requests ([`stream`]), or `None`: one
    /// request per batch.
    pub(crate) stream: Option<StreamBounds>,
}

/// How the insert of a whole chunk ended.
enum Outcome {
    /// Every row is in, or was rejected and taken care of by the policy
    /// (`rejected` of them).
    Inserted {
        rejected: u64,
    },
    Failed(FatalError),
    Abandoned,
    /// Exactly-once: a later owner fenced the partition; never sent.
    Fenced,
}

impl<C: InsertTarget, L: Intents> Worker<C, L> {
    pub(crate) async fn run(mut self) {
        let span = tracing::info_span!("shard_worker", table = %self.shared.table, shard = %self.shard.label, worker = self.index);
        async move {
            if let Some(bounds) = self.streams() {
                return self.run_streaming(bounds).await;
            }
            while let Some(chunk) = self.next().await {
                if let Some(chunk) = self.to_insert(chunk) {
                    self.insert_and_settle(chunk).await;
                }
            }
        }
        .instrument(span)
        .await;
    }

    /// Whether the batches taken now are to be abandoned: the drain's
    /// deadline passed or the sink failed.
    fn giving_up(&self) -> bool {
        self.pace.is_abandoned() || self.shared.failed.load(Ordering::Acquire)
    }

    /// `chunk`, if it is to be inserted. Abandoned when giving up;
    /// discarded when all its lanes are being read again
    /// ([`discard_retired`](Self::discard_retired)); with no row (offsets
    /// the error policy skipped), acknowledged as soon as it arrives here.
    fn to_insert(&self, chunk: Chunk) -> Option<Chunk> {
        if self.giving_up() {
            self.abandon_chunk(chunk);
            return None;
        }
        if self.acks.all_retired(&chunk.acks) {
            self.discard_retired(chunk);
            return None;
        }
        if chunk.rows == 0 {
            let _ = self.acks.send(AckEvent::Acked(chunk.acks));
            return None;
        }
        Some(chunk)
    }

    /// Insert `chunk` by itself and settle it.
    async fn insert_and_settle(&mut self, chunk: Chunk) {
        let outcome = self.insert(&chunk).await;
        self.settle(chunk, outcome);
    }

    /// Acknowledge, fail or abandon `chunk` as its insert ended.
    fn settle(&self, chunk: Chunk, outcome: Outcome) {
        match outcome {
            Outcome::Inserted { rejected } => self.acknowledge(chunk, rejected),
            Outcome::Failed(error) => {
                self.shared.failed.store(true, Ordering::Release);
                let _ = self.acks.send(AckEvent::Fatal {
                    ranges: chunk.acks,
                    error,
                });
            }
            Outcome::Abandoned => self.abandon_chunk(chunk),
            // Not the drain's abandonment: the rows replay on the
            // partition's new owner, this member has nothing to answer
            // for.
            Outcome::Fenced => {
                let _ = self.acks.send(AckEvent::Abandoned(chunk.acks));
            }
        }
    }

    /// The next chunk, or `None` when the queue is closed and empty or the
    /// drain deadline passed.
    async fn next(&mut self) -> Option<Chunk> {
        let mut rx = self.rx.lock().await;
        if self.pace.is_abandoned() {
            return rx.try_recv();
        }
        tokio::select! {
            chunk = rx.recv() => chunk,
            () = self.pace.deadline() => rx.try_recv(),
        }
    }

    /// A chunk whose every lane was retired (their partitions are being
    /// read again, see [`AckSender`]): not inserted, or its rows would land
    /// twice; its ranges are reported as rewound (never committed past),
    /// its buffers go back to the shard.
    fn discard_retired(&self, chunk: Chunk) {
        tracing::info!(
            rows = chunk.rows,
            "a batch of partitions being read again from Kafka was discarded: its rows come back read again"
        );
        self.give_back(chunk, AckEvent::Rewind);
    }

    /// Report `chunk`'s ranges as `event`, take it out of its queue's
    /// depth, then hand its buffers to the shard's next seal.
    fn give_back(&self, chunk: Chunk, event: fn(Vec<AckRange>) -> AckEvent) {
        let Chunk {
            shard,
            data,
            acks,
            ticket,
            index,
            stamps,
            ..
        } = chunk;
        let _ = self.acks.send(event(acks));
        // Out of the depth first, then back to the shard's next seal.
        drop(ticket);
        let rows = index.rows;
        self.depths.recycle(shard, Spare { data, rows, stamps });
    }

    fn acknowledge(&self, chunk: Chunk, rejected: u64) {
        let bytes = chunk.data.len();
        self.acknowledge_sized(chunk, rejected, bytes);
    }

    /// [`acknowledge`](Self::acknowledge) a chunk of `bytes` as inserted
    /// (its buffer may have been released already: a streamed request's).
    fn acknowledge_sized(&self, chunk: Chunk, rejected: u64, bytes: usize) {
        let rows = chunk.rows - rejected;
        ChunkInserted {
            site: self.shared.site(&self.shard.label),
            rows,
            bytes,
        }
        .emit();
        // Every row of the chunk, those the server rejected (handled by
        // the error policy) included.
        chunk.stamps.observe(&self.shared.latency, unix_ms());
        self.shared.inserted_chunks.fetch_add(1, Ordering::AcqRel);
        self.shared.inserted_rows.fetch_add(rows, Ordering::AcqRel);
        self.give_back(chunk, AckEvent::Acked);
    }

    fn abandon_chunk(&self, chunk: Chunk) {
        self.shared.abandoned_chunks.fetch_add(1, Ordering::AcqRel);
        self.shared
            .abandoned_rows
            .fetch_add(chunk.rows, Ordering::AcqRel);
        let _ = self.acks.send(AckEvent::Abandoned(chunk.acks));
    }

    /// Insert `chunk`, isolating the rows the server rejects.
    async fn insert(&mut self, chunk: &Chunk) -> Outcome {
        // The chunk is counted in its queue's depth until acknowledged;
        // what the worker makes of it lives as long. Copies that fit in the
        // room the budget sets aside for this worker (where it keeps them
        // between inserts too) are counted there; larger ones, or all of
        // them when the queues reserve no room, are counted in the depth
        // from before the transposition (see [`IN_FLIGHT_COPIES`]), or the
        // budget would miss two copies per insert in flight.
        let _in_flight = in_flight_charge(&self.depths, chunk.data.len())
            .map(|bytes| self.depths.charge(chunk.shard, bytes));
        let body = match self.body(chunk, &chunk.data) {
            Ok(body) => body,
            Err(e) => return Outcome::Failed(e),
        };
        match self.attempt(chunk, body, None).await {
            Attempt::Inserted => Outcome::Inserted { rejected: 0 },
            Attempt::RowError(e) if chunk.is_indexed() => self.isolate(chunk, e).await,
            Attempt::RowError(e) => Outcome::Failed(self.rejected(chunk, &e)),
            Attempt::Failed(e) => Outcome::Failed(e),
            Attempt::Abandoned => Outcome::Abandoned,
            Attempt::Fenced => Outcome::Fenced,
        }
    }
}

/// Now, in milliseconds since the Unix epoch (Kafka timestamps' clock).
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
