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

use super::events::{
    ChunkInserted, InsertAttemptFailed, InsertBackoff, InsertFailedOver, InsertRejected,
    InsertSucceeded, Site,
};
use super::fault;
use super::guard::After;
use super::intent::IntentLog;
use super::isolate::Bisection;
use super::retry::{Attempts, Next, RetryPolicy};
use super::settings::{dedup_token, takes_dedup_token, DEDUP_TOKEN};
use super::shard::{PoolShared, Shard};
use super::target::{InsertQuery, InsertTarget};
use crate::classify::ErrorClass;
use crate::client::InsertError;
use crate::encode::NativeScratch;
use bytes::Bytes;
use spate_core::error::{FatalError, Fault};
use spate_core::health::TransientStalls;
use spate_core::policy::{Action, DeadLetter, PolicyError, Rejection, Rejections, Stage};
use spate_core::sink::{AckEvent, AckSender, Chunk, QueueDepths, ShardReceiver, Spare};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex};
use tracing::Instrument;

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

pub(crate) struct Worker<C> {
    pub(crate) shard: Arc<Shard<C>>,
    pub(crate) index: usize,
    pub(crate) rx: Arc<Mutex<ShardReceiver>>,
    pub(crate) acks: AckSender,
    pub(crate) abandon: watch::Receiver<bool>,
    pub(crate) shared: Arc<PoolShared>,
    pub(crate) retry: RetryPolicy,
    /// Exactly-once: record each chunk's intent before its first attempt.
    pub(crate) intents: Option<Arc<IntentLog>>,
    /// The pipeline's error policy for rows the server rejects (`None`:
    /// fail on the first).
    pub(crate) rejections: Option<Arc<Rejections>>,
    /// Where a retried transient error is reported for `/readyz`.
    pub(crate) stalls: Option<Arc<TransientStalls>>,
    /// Where the body of the chunk in flight is counted (see `insert`).
    pub(crate) depths: QueueDepths,
    /// The transposition's buffers and the last body, kept for the next
    /// insert within the worker's room ([`QueueDepths::worker_room`]).
    pub(crate) scratch: Arc<std::sync::Mutex<NativeScratch>>,
}

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

/// How one insert of some rows ended.
pub(super) enum Attempt {
    Inserted,
    /// The server blamed rows of the batch.
    RowError(InsertError),
    Failed(FatalError),
    Abandoned,
    Fenced,
}

/// The drain deadline passed while waiting.
pub(super) struct Abandoned;

/// How much longer than an attempt's timeout the HTTP client waits: the
/// worker's own timer fires first, so it knows the attempt timed out.
const CLIENT_GRACE: Duration = Duration::from_secs(5);
/// What every attempt of a chunk sends, and the schema version it was made
/// for.
pub(super) struct Prepared {
    pub(super) bytes: Bytes,
    pub(super) query: Arc<InsertQuery>,
    pub(super) for_version: u64,
    /// Where the body goes back once every attempt is done with it.
    pub(super) keep: Option<(Arc<std::sync::Mutex<NativeScratch>>, usize)>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // The client's slices of the body are gone once the insert ended:
        // the buffer is the body's alone again, and the next one reuses it.
        let Some((scratch, room)) = self.keep.take() else {
            return;
        };
        if let Ok(body) = std::mem::take(&mut self.bytes).try_into_mut() {
            lock(&scratch).give_body(Vec::from(body), room);
        }
    }
}

/// What an insert of a `len`-byte chunk adds to its shard's depth while it
/// runs: nothing when its copies fit in the worker's room.
fn in_flight_charge(depths: &QueueDepths, len: usize) -> Option<usize> {
    let copies = IN_FLIGHT_COPIES * len;
    (copies > depths.worker_room()).then_some(copies)
}

fn lock(m: &std::sync::Mutex<NativeScratch>) -> std::sync::MutexGuard<'_, NativeScratch> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<C: InsertTarget> Worker<C> {
    pub(crate) async fn run(mut self) {
        let span = tracing::info_span!("shard_worker", table = %self.shared.table, shard = %self.shard.label, worker = self.index);
        async move {
            while let Some(chunk) = self.next().await {
                if *self.abandon.borrow() || self.shared.failed.load(Ordering::Acquire) {
                    self.abandon_chunk(chunk);
                    continue;
                }
                if chunk.rows == 0 {
                    // Offsets the error policy skipped, with no row to
                    // insert: done with as soon as they arrive here.
                    let _ = self.acks.send(AckEvent::Acked(chunk.acks));
                    continue;
                }
                match self.insert(&chunk).await {
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
                    // partition's new owner, this member has nothing to
                    // answer for.
                    Outcome::Fenced => {
                        let _ = self.acks.send(AckEvent::Abandoned(chunk.acks));
                    }
                }
            }
        }
        .instrument(span)
        .await;
    }

    /// The next chunk, or `None` when the queue is closed and empty or the
    /// drain deadline passed.
    async fn next(&mut self) -> Option<Chunk> {
        let mut rx = self.rx.lock().await;
        if *self.abandon.borrow() {
            return rx.try_recv();
        }
        tokio::select! {
            chunk = rx.recv() => chunk,
            _ = self.abandon.changed() => rx.try_recv(),
        }
    }

    fn acknowledge(&self, chunk: Chunk, rejected: u64) {
        let rows = chunk.rows - rejected;
        ChunkInserted {
            site: self.shared.site(&self.shard.label),
            rows,
            bytes: chunk.data.len(),
        }
        .emit();
        self.shared.inserted_chunks.fetch_add(1, Ordering::AcqRel);
        self.shared.inserted_rows.fetch_add(rows, Ordering::AcqRel);
        let Chunk {
            shard,
            data,
            acks,
            ticket,
            index,
            ..
        } = chunk;
        let _ = self.acks.send(AckEvent::Acked(acks));
        // Out of the depth first, then back to the shard's next seal.
        drop(ticket);
        let rows = index.rows;
        self.depths.recycle(shard, Spare { data, rows });
    }

    fn abandon_chunk(&self, chunk: Chunk) {
        self.shared.abandoned_chunks.fetch_add(1, Ordering::AcqRel);
        self.shared
            .abandoned_rows
            .fetch_add(chunk.rows, Ordering::AcqRel);
        let _ = self.acks.send(AckEvent::Abandoned(chunk.acks));
    }

    /// The bytes every attempt of `rows` (whole encoded rows of `chunk`)
    /// sends and their statement (made once, and again after the table's
    /// columns changed).
    pub(super) fn body(&self, chunk: &Chunk, rows: &[u8]) -> Result<Prepared, FatalError> {
        let room = self.depths.worker_room();
        let keep = (room > 0).then(|| (self.scratch.clone(), room));
        if let Some(live) = self.shared.live.get() {
            let now = live.current();
            let own = live.get(chunk.schema).unwrap_or_else(|| now.clone());
            let body = self.transposing(room, |s| super::recode::body_for(&own, &now, rows, s));
            // Not convertible: the pipeline fails without committing the
            // chunk and starts again (the exit report says so), so that
            // its messages are read once more and encoded for the new
            // columns.
            let body =
                body.map_err(|e| FatalError::new(self.context(), e, Fault::User).start_again())?;
            return Ok(Prepared {
                bytes: Bytes::from(body.bytes),
                query: body.query,
                for_version: now.id,
                keep,
            });
        }
        let query = Arc::new(self.shared.query.clone());
        let bytes = match &self.shared.native {
            Some(layout) => self
                .transposing(room, |s| layout.transpose_in(rows, s))
                .map(Bytes::from)
                .map_err(|e| FatalError::new(self.context(), e.to_string(), Fault::Internal))?,
            None => Bytes::copy_from_slice(rows),
        };
        Ok(Prepared {
            bytes,
            query,
            for_version: 0,
            keep,
        })
    }

    /// Run `f` on the worker's scratch, then free what of it does not fit
    /// in `room` (the worker's share of the budget).
    fn transposing<T>(&self, room: usize, f: impl FnOnce(&mut NativeScratch) -> T) -> T {
        let mut scratch = lock(&self.scratch);
        let out = f(&mut scratch);
        scratch.fit(room);
        out
    }

    /// After a failure that says the columns changed: the chunk's bytes
    /// for the columns as they are now, if they changed since `sent` was
    /// made (re-read at once, once per chunk, if spate has not seen it).
    async fn after_schema_error(
        &mut self,
        chunk: &Chunk,
        rows: &[u8],
        sent: &Prepared,
        error: &InsertError,
        refreshed: &mut bool,
    ) -> Option<Result<Prepared, FatalError>> {
        let schema_codes = [8, 10, 16, 33, 47, 53, 70, 368];
        if !error.code.is_some_and(|c| schema_codes.contains(&c)) {
            return None;
        }
        let live = self.shared.live.get()?.clone();
        if live.version() == sent.for_version {
            if *refreshed {
                return None;
            }
            *refreshed = true;
            tokio::select! {
                _ = live.refresh_now() => {}
                _ = self.abandon.changed() => return None,
            }
        }
        (live.version() != sent.for_version).then(|| self.body(chunk, rows))
    }

    /// The insert settings of `chunk` (or of rows `part` of it, while
    /// bisecting: each part gets a token of its own, or the server would
    /// drop the second half as a repeat of the first).
    fn chunk_settings(&self, chunk: &Chunk, part: Option<&Range<usize>>) -> Vec<(String, String)> {
        if !takes_dedup_token(&self.shared.query.settings) {
            return Vec::new();
        }
        dedup_token(chunk.shard, &chunk.spans)
            .map(|t| match part {
                Some(r) => format!("{t}-rows{}-{}", r.start, r.end),
                None => t,
            })
            .map(|t| vec![(DEDUP_TOKEN.to_string(), t)])
            .unwrap_or_default()
    }

    pub(super) fn context(&self) -> String {
        format!(
            "clickhouse sink {} shard {}",
            self.shared.table, self.shard.label
        )
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

    /// `chunk` failed whole with `first`, a row error: bisect it, hand
    /// each isolated row to the policy.
    async fn isolate(&mut self, chunk: &Chunk, first: InsertError) -> Outcome {
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
                self.context(),
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
            () = abandoned(self.abandon.clone()) => {
                dest.abandon();
                tracing::warn!(destination = %dest.describe(), at, "the drain deadline passed while a dead letter waited for its destination; its message replays");
                return Err(Stored::Abandoned);
            }
        };
        stored.map_err(|why| {
            Stored::Failed(FatalError::new(
                self.context(),
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
        let message = cut(super::events::first_line(&error.message), 300);
        let reason = error
            .code
            .map_or_else(|| "server".to_owned(), |c| format!("code_{c}"));
        let fail = |why: &str| {
            FatalError::new(
                self.context(),
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

    /// One insert of `rows` rows of `chunk` (`body`), retried and failed
    /// over as the error calls for, until it is in or cannot be. While it
    /// retries, the worker is reported failing in the stall table.
    async fn attempt(
        &mut self,
        chunk: &Chunk,
        body: Prepared,
        part: Option<&Range<usize>>,
    ) -> Attempt {
        let outcome = self.attempt_until_settled(chunk, body, part).await;
        if let Some(stalls) = &self.stalls {
            stalls.cleared(&self.stall_name());
        }
        outcome
    }

    pub(super) fn stall_name(&self) -> String {
        format!(
            "{} shard {} worker {}",
            self.shared.table, self.shard.label, self.index
        )
    }

    async fn attempt_until_settled(
        &mut self,
        chunk: &Chunk,
        mut prepared: Prepared,
        part: Option<&Range<usize>>,
    ) -> Attempt {
        let rows = part.map_or(chunk.rows, |r| r.len() as u64);
        let part_bytes = part.map_or(&chunk.data[..], |r| chunk.row_bytes(r.clone()));
        let mut refreshed = false;
        let (shard, shared) = (self.shard.clone(), self.shared.clone());
        let site = shared.site(&shard.label);
        let preferred = shard.preferred.load(Ordering::Relaxed);
        let mut attempts = Attempts::new(shard.replicas.len(), preferred);
        let mut extra = self.chunk_settings(chunk, part);
        if let Err(skip) = self.record_intent(chunk).await {
            return skip;
        }
        if let Err(a) =
            (self.types_before(chunk, part_bytes, &mut prepared, attempts.replica())).await
        {
            return a;
        }
        let nth = self
            .test_faults(&prepared, &extra, attempts.replica())
            .await;
        let mut checked = true;
        loop {
            let replica = attempts.replica();
            if !std::mem::take(&mut checked) {
                if let Err(a) = self
                    .types_before(chunk, part_bytes, &mut prepared, replica)
                    .await
                {
                    return a;
                }
            }
            let target = &shard.replicas[replica];
            let started = tokio::time::Instant::now();
            let timeout = attempts.timeout(&self.retry);
            let attempt = target.client.insert_bytes(
                &prepared.query,
                prepared.bytes.clone(),
                &extra,
                timeout + CLIENT_GRACE,
            );
            let result = tokio::select! {
                r = tokio::time::timeout(timeout, attempt) => r.unwrap_or_else(|_| {
                    attempts.timed_out();
                    Err(timed_out(timeout, attempts.timeout(&self.retry)))
                }),
                _ = self.abandon.changed() => return Attempt::Abandoned,
            };
            let error = match result {
                Ok(()) => {
                    InsertSucceeded {
                        site,
                        replica: &target.url,
                        rows,
                        elapsed: started.elapsed(),
                        attempt: attempts.attempt(),
                    }
                    .emit();
                    shard.preferred.store(replica, Ordering::Relaxed);
                    fault::hit(fault::Point::AfterAck, nth);
                    match self
                        .types_after(chunk, part_bytes, &prepared, replica)
                        .await
                    {
                        After::Copy(copy) => {
                            extra = super::guard::copy_settings(&extra, copy.for_version);
                            prepared = copy;
                            checked = true;
                            continue;
                        }
                        After::Stop(a) => return a,
                        After::Clean => return Attempt::Inserted,
                    }
                }
                Err(e) => e,
            };
            // A schema error first: a type mismatch after an ALTER is the
            // table's change, not the rows' fault.
            let recoded = self
                .after_schema_error(chunk, part_bytes, &prepared, &error, &mut refreshed)
                .await;
            match recoded {
                Some(Ok(next)) => {
                    tracing::info!(rows, "re-encoded a batch for the table's new columns");
                    prepared = next;
                    continue;
                }
                Some(Err(e)) => return Attempt::Failed(e),
                None => {}
            }
            if error.is_row_error() {
                return Attempt::RowError(error);
            }
            let attempt = attempts.attempt();
            let backoff = match self.after_failure(chunk, &mut attempts, site, &target.url, &error)
            {
                Ok(backoff) => backoff,
                Err(failure) => return Attempt::Failed(failure),
            };
            if let Some(stalls) = &self.stalls {
                stalls.failing(
                    &self.stall_name(),
                    super::events::first_line(&error.message),
                );
            }
            if let Some(backoff) = backoff {
                InsertBackoff {
                    attempt,
                    error: &error,
                    replica: &target.url,
                    backoff,
                    rows,
                }
                .emit();
                if self.pause(backoff).await.is_err() {
                    return Attempt::Abandoned;
                }
            }
        }
    }

    /// Decide what follows a failed attempt on replica `url`, emitting
    /// that decision's events: the backoff before the next attempt (none
    /// when failing over at once), or the fatal error when giving up.
    fn after_failure(
        &self,
        chunk: &Chunk,
        attempts: &mut Attempts,
        site: Site<'_>,
        url: &str,
        error: &InsertError,
    ) -> Result<Option<Duration>, FatalError> {
        let attempt = attempts.attempt();
        match attempts.next(error.remedy(), &self.retry, rand::random::<f64>()) {
            Next::GiveUp => {
                InsertRejected {
                    site,
                    replica: url,
                    error,
                }
                .emit();
                Err(self.rejected_at(chunk, url, error))
            }
            Next::Failover { to, backoff } => {
                InsertAttemptFailed {
                    site,
                    replica: url,
                    error,
                }
                .emit();
                InsertFailedOver {
                    site,
                    attempt,
                    error,
                    replica: url,
                    next: &self.shard.replicas[to].url,
                    rows: chunk.rows,
                }
                .emit();
                Ok(backoff)
            }
            Next::Retry { backoff } => {
                InsertAttemptFailed {
                    site,
                    replica: url,
                    error,
                }
                .emit();
                Ok(Some(backoff))
            }
        }
    }

    /// The test-only fault points before the first attempt (see
    /// [`fault`]; nothing in a release build); the chunk's number.
    async fn test_faults(
        &self,
        body: &Prepared,
        extra: &[(String, String)],
        replica: usize,
    ) -> u64 {
        let nth = fault::chunk_taken();
        fault::hit(fault::Point::BeforeSend, nth);
        fault::hold_before_send(nth).await;
        if fault::fires(fault::Point::DuringInsert, nth) {
            let target = &self.shard.replicas[replica];
            let timeout = self.retry.attempt_timeout(0);
            let attempt =
                target
                    .client
                    .insert_bytes(&body.query, body.bytes.clone(), extra, timeout);
            let _ = tokio::time::timeout(Duration::from_millis(5), attempt).await;
            fault::hit(fault::Point::DuringInsert, nth);
        }
        nth
    }

    /// Exactly-once: record the chunk's intent (its partition, offsets and
    /// shard) before the block is first sent, retrying what can be retried,
    /// then check no later owner fenced its partition (see
    /// [`super::fencing`]). `Err`: what becomes of the chunk instead
    /// (failed, abandoned at the drain deadline, or fenced off: never sent).
    async fn record_intent(&mut self, chunk: &Chunk) -> Result<(), Attempt> {
        let Some(log) = self.intents.clone() else {
            return Ok(());
        };
        fault::hold_before_intent().await;
        self.retrying(
            "recording an exactly-once intent",
            || log.record(chunk.shard, &chunk.spans),
            |e| e.remedy() != crate::classify::Remedy::GiveUp,
        )
        .await?;
        for span in chunk.spans.iter() {
            let Some(epoch) = span.epoch else { continue };
            let what = format!("exactly-once: reading the fence of {}", span.partition);
            let checked = self
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

    /// `op` until it answers, retried with the sink's backoff while
    /// `retriable` says its error may clear; `what` names it in the log,
    /// the stall table (`/readyz` once it has not cleared for
    /// `--stall-timeout`) and the fatal error. `Err`: failed, or abandoned
    /// at the drain deadline.
    pub(super) async fn retrying<
        T,
        E: std::fmt::Display,
        F: std::future::Future<Output = Result<T, E>>,
    >(
        &mut self,
        what: &str,
        op: impl FnMut() -> F,
        retriable: impl Fn(&E) -> bool,
    ) -> Result<T, Attempt> {
        let outcome = self.retrying_unreported(what, op, retriable).await;
        if let Some(stalls) = &self.stalls {
            stalls.cleared(&self.stall_name());
        }
        outcome
    }

    async fn retrying_unreported<
        T,
        E: std::fmt::Display,
        F: std::future::Future<Output = Result<T, E>>,
    >(
        &mut self,
        what: &str,
        mut op: impl FnMut() -> F,
        retriable: impl Fn(&E) -> bool,
    ) -> Result<T, Attempt> {
        let mut attempt = 0u32;
        loop {
            let error = tokio::select! {
                r = op() => match r {
                    Ok(v) => return Ok(v),
                    Err(e) => e,
                },
                _ = self.abandon.changed() => return Err(Attempt::Abandoned),
            };
            if !retriable(&error) {
                return Err(Attempt::Failed(FatalError::new(
                    self.context(),
                    format!("{what} failed: {error}"),
                    Fault::External,
                )));
            }
            attempt += 1;
            let backoff = self.retry.delay(attempt, rand::random::<f64>());
            tracing::warn!(error = %error, attempt, backoff_ms = backoff.as_millis() as u64, "{what} failed; retrying");
            if let Some(stalls) = &self.stalls {
                stalls.failing(&self.stall_name(), &format!("{what}: {error}"));
            }
            if self.pause(backoff).await.is_err() {
                return Err(Attempt::Abandoned);
            }
        }
    }

    /// Wait `delay`, unless the drain deadline passes first.
    pub(super) async fn pause(&mut self, delay: Duration) -> Result<(), Abandoned> {
        tokio::select! {
            () = tokio::time::sleep(delay) => Ok(()),
            _ = self.abandon.changed() => Err(Abandoned),
        }
    }

    /// The fatal error of `chunk` failing on replica `url` with `e`: names
    /// the rows' topics, partitions and offset ranges, and the server's
    /// message cut short.
    fn rejected_at(&self, chunk: &Chunk, url: &str, e: &InsertError) -> FatalError {
        FatalError::new(
            self.context(),
            format!(
                "insert of {} rows ({}) into {url} failed{}: {}",
                chunk.rows,
                chunk.describe_ranges(),
                e.code
                    .map(|c| format!(" with code {c}"))
                    .unwrap_or_default(),
                cut(super::events::first_line(&e.message), 300)
            ),
            Fault::User,
        )
    }

    /// [`rejected_at`](Self::rejected_at) for a row error whose rows could
    /// not be isolated (the chunk has no row index).
    fn rejected(&self, chunk: &Chunk, e: &InsertError) -> FatalError {
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

/// The error of an attempt that timed out; the next one waits `next`.
fn timed_out(after: Duration, next: Duration) -> InsertError {
    InsertError {
        class: ErrorClass::Retriable,
        code: None,
        message: format!(
            "no answer within {after:?} (the server may still complete this insert); \
             the next attempt waits up to {next:?}"
        ),
    }
}

/// Why a dead letter was not stored.
enum Stored {
    /// It cannot be: the pipeline stops.
    Failed(FatalError),
    /// The drain deadline passed while it waited for its destination.
    Abandoned,
}

/// Resolves once the drain deadline abandoned the worker (never, if the
/// pool is gone without abandoning).
async fn abandoned(mut abandon: watch::Receiver<bool>) {
    while !*abandon.borrow_and_update() {
        if abandon.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
