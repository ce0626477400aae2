//! The exactly-once stage of an insert: before a block is first sent,
//! record its intent (its partition, offsets and shard) and check that no
//! later owner fenced its partition (see [`super::fencing`]). Run by
//! insert workers (tokio tasks), once per block; its waits go through the
//! worker's [`Pace`], so a state table that does not answer is retried
//! with the sink's backoff and reported as a stall, and the drain deadline
//! ends it.

use super::intent::IntentLog;
use crate::classify::{ErrorClass, Remedy};
use crate::sink::insert::fault;
use crate::sink::insert::outcome::Attempt;
use crate::sink::insert::pace::Pace;
use spate_core::sink::Chunk;

/// Record `chunk`'s intent and check its partitions' fences. `Err`: what
/// becomes of the chunk instead (failed, abandoned at the drain deadline,
/// or fenced off: never sent).
pub(crate) async fn before_first_send(
    log: &IntentLog,
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
    for span in chunk.spans.iter() {
        let Some(epoch) = span.epoch else { continue };
        let what = format!("exactly-once: reading the fence of {}", span.partition);
        let checked = pace
            .retrying(
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
