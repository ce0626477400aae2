//! Rows the server rejects: a chunk that failed whole with a row error is
//! bisected ([`Bisection`]) until the rows that fail alone are isolated,
//! every other row inserted once; each isolated row goes to the
//! pipeline's error policy ([`Rejections`]): skipped, stored as a dead
//! letter (acknowledged only once stored), or the pipeline fails, named
//! by topic, partition and offset.

use super::{Outcome, Worker};
use crate::client::InsertError;
use crate::sink::exactly_once::stage::Intents;
use crate::sink::insert::events::first_line;
use crate::sink::insert::isolate::Bisection;
use crate::sink::insert::outcome::Attempt;
use crate::sink::insert::target::InsertTarget;
use spate_core::error::{FatalError, Fault};
use spate_core::policy::{Action, DeadLetter, PolicyError, Rejection, Stage};
use spate_core::sink::Chunk;

/// Why a dead letter was not stored.
enum Stored {
    /// It cannot be: the pipeline stops.
    Failed(FatalError),
    /// The drain deadline passed while it waited for its destination.
    Abandoned,
}

impl<C: InsertTarget, L: Intents> Worker<C, L> {
    /// `chunk` failed whole with `first`, a row error: bisect it, hand
    /// each isolated row to the policy.
    pub(super) async fn isolate(&mut self, chunk: &Chunk, first: InsertError) -> Outcome {
        let (mut bisection, isolated) = Bisection::after_failure(chunk.rows as usize);
        let mut rejected = 0u64;
        let mut accepted = 0u64;
        let mut pending = isolated.map(|row| (row, first));
        loop {
            if let Some((row, error)) = pending.take() {
                let accepted = std::mem::take(&mut accepted);
                let letter = match self.reject_row(chunk, row, &error, accepted) {
                    Ok(letter) => letter,
                    Err(e) => return Outcome::Failed(e),
                };
                if let Some(letter) = letter {
                    match self.store_dead_letter(letter).await {
                        Ok(()) => {}
                        Err(Stored::Failed(e)) => return Outcome::Failed(e),
                        // Not stored, not acknowledged: the message replays.
                        Err(Stored::Abandoned) => return Outcome::Abandoned,
                    }
                }
                rejected += 1;
            }
            let Some(range) = bisection.next() else { break };
            let body = match self.body(chunk, chunk.row_bytes(range.clone())) {
                Ok(body) => body,
                Err(e) => return Outcome::Failed(e),
            };
            match self.attempt(chunk, body, Some(&range)).await {
                Attempt::Inserted => accepted += range.len() as u64,
                Attempt::RowError(e) => pending = bisection.failed(range).map(|row| (row, e)),
                Attempt::Failed(e) => return Outcome::Failed(e),
                Attempt::Abandoned => return Outcome::Abandoned,
                Attempt::Fenced => return Outcome::Fenced,
            }
        }
        tracing::info!(
            rows = chunk.rows,
            rejected,
            inserts = bisection.inserts(),
            "batch bisected: the rows the server rejects were isolated"
        );
        Outcome::Inserted { rejected }
    }

    /// Store `letter` in the dead-letter destination, on a blocking task
    /// (the destination blocks until it acknowledged it, waiting out an
    /// outage); the chunk is acknowledged only after.
    async fn store_dead_letter(&self, letter: DeadLetter) -> Result<(), Stored> {
        let dest = self
            .rejections
            .as_ref()
            .and_then(|r| r.dead_letters().cloned());
        let Some(dest) = dest else {
            return Err(Stored::Failed(FatalError::new(
                self.pace.context(),
                "no dead-letter destination",
                Fault::Internal,
            )));
        };
        let at = format!(
            "topic {} partition {} offset {}",
            letter.topic, letter.partition, letter.offset
        );
        let storing = dest.clone();
        let task = tokio::task::spawn_blocking(move || {
            let describe = storing.describe();
            storing
                .store(&letter)
                .map_err(|e| format!("{describe}: {e}"))
        });
        // The drain deadline also ends the wait for the destination: the
        // blocking store gives up after its current attempt, the chunk is
        // not acknowledged and replays (a blocking task is never cancelled,
        // and one that waited on forever kept the process from exiting).
        let stored = tokio::select! {
            joined = task => joined.unwrap_or_else(|e| Err(format!("the dead-letter task failed: {e}"))),
            () = self.pace.abandoned() => {
                dest.abandon();
                tracing::warn!(destination = %dest.describe(), at, "the drain deadline passed while a dead letter waited for its destination; its message replays");
                return Err(Stored::Abandoned);
            }
        };
        stored.map_err(|why| {
            Stored::Failed(FatalError::new(
                self.pace.context(),
                format!("storing the dead letter of the row at {at} failed: {why}"),
                Fault::External,
            ))
        })
    }

    /// Row `row` of `chunk` was rejected alone with `error`: what the
    /// policy makes of it: `Ok(None)` skipped, `Ok(Some)` a dead letter to
    /// store, `Err` stops the pipeline.
    fn reject_row(
        &self,
        chunk: &Chunk,
        row: usize,
        error: &InsertError,
        accepted: u64,
    ) -> Result<Option<DeadLetter>, FatalError> {
        let (partition, offset) = chunk
            .origin(row)
            .unwrap_or((None, spate_core::record::Offset(-1)));
        let (topic, part) = partition.map_or(("?", -1), |p| (&*p.topic, p.partition));
        let message = cut(first_line(&error.message), 300);
        let reason = error
            .code
            .map_or_else(|| "server".to_owned(), |c| format!("code_{c}"));
        let fail = |why: &str| {
            FatalError::new(
                self.pace.context(),
                format!(
                    "the server rejected the row at topic {topic} partition {part} offset {}{}{why}: {message}",
                    offset.0,
                    error.code.map(|c| format!(" with code {c}")).unwrap_or_default(),
                ),
                Fault::User,
            )
        };
        let Some(policy) = &self.rejections else {
            return Err(fail(""));
        };
        let rejection = Rejection {
            stage: Stage::Insert,
            topic,
            partition: part,
            offset: offset.0,
            column: None,
            reason: &reason,
            error: message,
        };
        match policy.reject(&rejection, accepted) {
            Ok(Action::Skip) => Ok(None),
            Ok(Action::Fail) => Err(fail("")),
            Ok(Action::DeadLetter) => match chunk.index.originals.get(row) {
                Some(o) => Ok(Some(DeadLetter {
                    topic: topic.to_owned(),
                    partition: part,
                    offset: offset.0,
                    timestamp_ms: o.timestamp_ms,
                    key: o.key.clone(),
                    value: o.value.clone(),
                    stage: Stage::Insert,
                    error: message.to_owned(),
                    column: None,
                    original_headers: o.headers.clone(),
                })),
                None => Err(fail(
                    " (its original message was not kept for a dead letter)",
                )),
            },
            Err(PolicyError::Limit { tripped, .. }) => Err(fail(&format!(" ({tripped})"))),
            Err(other) => Err(fail(&format!(" ({other})"))),
        }
    }

    /// The fatal error of `chunk` failing on replica `url` with `e`: names
    /// the rows' topics, partitions and offset ranges, and the server's
    /// message cut short.
    pub(super) fn rejected_at(&self, chunk: &Chunk, url: &str, e: &InsertError) -> FatalError {
        FatalError::new(
            self.pace.context(),
            format!(
                "insert of {} rows ({}) into {url} failed{}: {}",
                chunk.rows,
                chunk.describe_ranges(),
                e.code
                    .map(|c| format!(" with code {c}"))
                    .unwrap_or_default(),
                cut(first_line(&e.message), 300)
            ),
            Fault::User,
        )
    }

    /// [`rejected_at`](Self::rejected_at) for a row error whose rows could
    /// not be isolated (the chunk has no row index).
    pub(super) fn rejected(&self, chunk: &Chunk, e: &InsertError) -> FatalError {
        self.rejected_at(chunk, &self.shard.label, e)
    }
}

/// `s` cut to at most `max` bytes (on a character boundary), marked.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
