//! The exactly-once stage of an insert: before a block is first sent,
//! record its intent (its partition, offsets and shard) and check that no
//! later owner fenced its partition (see [`super::fencing`]); before each
//! retry, check the fences again. Run by insert workers (tokio tasks),
//! once per block and once per retry; its waits go through the worker's
//! [`Pace`], so a state table that does not answer is retried with the
//! sink's backoff and reported as a stall, and the drain deadline ends it.

use super::intent::IntentLog;
use crate::classify::{ErrorClass, Remedy};
use crate::client::{ClientError, InsertError};
use crate::sink::insert::fault;
use crate::sink::insert::outcome::Attempt;
use crate::sink::insert::pace::Pace;
use spate_core::record::PartitionId;
use spate_core::sink::{Chunk, ChunkSpan};
use std::future::Future;

/// What the stage needs of the intent log: [`IntentLog`] in the sink, a
/// scripted fake in the worker's tests.
pub(crate) trait Intents: Send + Sync + 'static {
    /// Record the blocks of `spans` for `shard` (see [`IntentLog::record`]).
    fn record(
        &self,
        shard: usize,
        spans: &[ChunkSpan],
    ) -> impl Future<Output = Result<(), InsertError>> + Send;

    /// Whether a block of `partition` recorded under `epoch` may be sent
    /// (`Err(fence)`: a later owner's epoch; see [`IntentLog::may_send`]).
    fn may_send(
        &self,
        partition: &PartitionId,
        epoch: u64,
    ) -> impl Future<Output = Result<Result<(), u64>, ClientError>> + Send;
}

impl Intents for IntentLog {
    fn record(
        &self,
        shard: usize,
        spans: &[ChunkSpan],
    ) -> impl Future<Output = Result<(), InsertError>> + Send {
        IntentLog::record(self, shard, spans)
    }

    fn may_send(
        &self,
        partition: &PartitionId,
        epoch: u64,
    ) -> impl Future<Output = Result<Result<(), u64>, ClientError>> + Send {
        IntentLog::may_send(self, partition, epoch)
    }
}

/// Record `chunk`'s intent and check its partitions' fences. `Err`: what
/// becomes of the chunk instead (failed, abandoned at the drain deadline,
/// or fenced off: never sent).
pub(crate) async fn before_first_send<L: Intents>(
    log: &L,
    chunk: &Chunk,
    pace: &mut Pace,
) -> Result<(), Attempt> {
    fault::hold_before_intent().await;
    pace.retrying(
        "recording an exactly-once intent",
        || log.record(chunk.shard, &chunk.spans),
        |e| e.remedy() != Remedy::GiveUp,
    )
    .await?;
    let checked = check_fences(log, chunk, pace).await;
    pace.cleared();
    checked
}

/// Before a retry of `chunk` (its intent recorded and its fences checked
/// before the first attempt): check the fences again, so that once a
/// later owner fenced one of its partitions, the block is dropped rather
/// than retried. Without this, a zombie's retry could land after the new
/// owner replayed the block and after the deduplication window moved past
/// it: a duplicate. The insert's own failure stays reported in the stall
/// table (this check does not clear it).
pub(crate) async fn before_retry<L: Intents>(
    log: &L,
    chunk: &Chunk,
    pace: &mut Pace,
) -> Result<(), Attempt> {
    check_fences(log, chunk, pace).await
}

/// Read the highest fence of each of `chunk`'s partitions; `Err(Fenced)`
/// when a later owner fenced one.
async fn check_fences<L: Intents>(log: &L, chunk: &Chunk, pace: &mut Pace) -> Result<(), Attempt> {
    for span in chunk.spans.iter() {
        let Some(epoch) = span.epoch else { continue };
        let what = format!("exactly-once: reading the fence of {}", span.partition);
        let checked = pace
            .retrying_unreported(
                &what,
                || log.may_send(&span.partition, epoch),
                |e| e.class() == ErrorClass::Retriable,
            )
            .await?;
        if let Err(fence) = checked {
            tracing::warn!(partition = %span.partition, first = span.first.0, last = span.last.0, epoch, fence, "exactly-once: a later owner fenced the partition; the block is not sent (it replays there)");
            return Err(Attempt::Fenced);
        }
    }
    Ok(())
}
