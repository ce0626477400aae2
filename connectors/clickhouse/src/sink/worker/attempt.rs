//! One insert of some rows, attempted until it is in or cannot be: a
//! composition of stages around the HTTP attempt, each its own function
//! (and the guard and the intent each their own value elsewhere):
//!
//! ```text
//! before the first attempt: exactly-once intent and fence check ─ type guard ─ test faults
//! each attempt:             type guard ─ send (timeout) ─┬─ landed: type guard after ─ a copy, or done
//!                                                        └─ failed: schema re-encode ─ row error ─ retry/failover decision ─ backoff
//!                                                                   ─ exactly-once fence check again
//! ```
//!
//! Retriable failures are retried with the same bytes and token; each
//! attempt has its own timeout, doubled after every attempt of the chunk
//! that timed out ([`RetryPolicy::attempt_timeout`]); what follows a
//! failure is [`Attempts::next`]'s decision; while it retries, the worker
//! is reported failing in the stall table.
//!
//! [`RetryPolicy::attempt_timeout`]: crate::sink::insert::retry::RetryPolicy::attempt_timeout

use super::Worker;
use crate::classify::ErrorClass;
use crate::client::InsertError;
use crate::sink::exactly_once::stage::{self as exactly_once, Intents};
use crate::sink::insert::events::{
    first_line, InsertAttemptFailed, InsertBackoff, InsertFailedOver, InsertRejected,
    InsertSucceeded,
};
use crate::sink::insert::fault;
use crate::sink::insert::outcome::{Attempt, Prepared};
use crate::sink::insert::retry::{Attempts, Next};
use crate::sink::insert::target::InsertTarget;
use crate::sink::schema_change::guard::{copy_settings, After, TypeGuard};
use crate::sink::shared::PoolShared;
use spate_core::error::FatalError;
use spate_core::sink::Chunk;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How much longer than an attempt's timeout the HTTP client waits: the
/// worker's own timer fires first, so it knows the attempt timed out.
pub(super) const CLIENT_GRACE: Duration = Duration::from_secs(5);

/// One insert of some rows of a chunk, while its attempts run.
struct Insert<'c> {
    chunk: &'c Chunk,
    /// Which rows: all of them, or a part while bisecting.
    part: Option<&'c Range<usize>>,
    /// Those rows' encoded bytes.
    rows: &'c [u8],
    prepared: Prepared,
    /// Settings beyond the statement's (the deduplication token).
    extra: Vec<(String, String)>,
    attempts: Attempts,
    /// The schema was re-read once already after a schema error.
    refreshed: bool,
    /// The chunk's number, for the test-only fault points.
    nth: u64,
}

impl Insert<'_> {
    fn row_count(&self) -> u64 {
        self.part.map_or(self.chunk.rows, |r| r.len() as u64)
    }
}

/// How one send ended.
enum Sent {
    Landed,
    Failed(InsertError),
    Abandoned,
}

/// What follows a landed send.
enum Landed {
    Done(Attempt),
    /// Send this copy (made for the table's new types) too.
    Copy,
}

/// The type guard of `shared`'s inserts, when it follows the table.
fn type_guard(shared: &PoolShared, exactly_once: bool) -> Option<TypeGuard<'_>> {
    let races = (&shared.ch_metrics.schema_races, shared.table.as_str());
    TypeGuard::of(shared.live.get().map(|l| &**l), exactly_once, races)
}

impl<C: InsertTarget, L: Intents> Worker<C, L> {
    /// One insert of `rows` rows of `chunk` (`body`), retried and failed
    /// over as the error calls for, until it is in or cannot be.
    pub(super) async fn attempt(
        &mut self,
        chunk: &Chunk,
        body: Prepared,
        part: Option<&Range<usize>>,
    ) -> Attempt {
        let outcome = self.attempt_until_settled(chunk, body, part).await;
        self.pace.cleared();
        outcome
    }

    async fn attempt_until_settled(
        &mut self,
        chunk: &Chunk,
        prepared: Prepared,
        part: Option<&Range<usize>>,
    ) -> Attempt {
        let preferred = self.shard.preferred.load(Ordering::Relaxed);
        let mut ins = Insert {
            chunk,
            part,
            rows: part.map_or(&chunk.data[..], |r| chunk.row_bytes(r.clone())),
            extra: self.chunk_settings(chunk, part),
            attempts: Attempts::new(self.shard.replicas.len(), preferred),
            prepared,
            refreshed: false,
            nth: 0,
        };
        if let Err(a) = self.before_first_send(&mut ins).await {
            return a;
        }
        let mut checked = true;
        loop {
            if !std::mem::take(&mut checked) {
                if let Err(a) = self.types_before(&mut ins).await {
                    return a;
                }
            }
            let error = match self.send(&mut ins).await {
                Sent::Landed => match self.landed(&mut ins).await {
                    Landed::Done(a) => return a,
                    Landed::Copy => {
                        checked = true;
                        continue;
                    }
                },
                Sent::Failed(e) => e,
                Sent::Abandoned => return Attempt::Abandoned,
            };
            if let Err(a) = self.failed(&mut ins, error).await {
                return a;
            }
            if let Err(a) = self.before_retry(&ins).await {
                return a;
            }
        }
    }

    /// Before a retry (after a failed send and its backoff): exactly-once
    /// checks the fences again, so a block whose partition a later owner
    /// fenced meanwhile is dropped, never retried (see
    /// [`exactly_once::before_retry`]). Nothing on the first attempt's path.
    async fn before_retry(&mut self, ins: &Insert<'_>) -> Result<(), Attempt> {
        match self.intents.clone() {
            Some(log) => exactly_once::before_retry(&*log, ins.chunk, &mut self.pace).await,
            None => Ok(()),
        }
    }

    /// Before the first attempt: exactly-once's intent and fence check,
    /// the type guard, the test-only fault points.
    async fn before_first_send(&mut self, ins: &mut Insert<'_>) -> Result<(), Attempt> {
        if let Some(log) = self.intents.clone() {
            exactly_once::before_first_send(&*log, ins.chunk, &mut self.pace).await?;
        }
        self.types_before(ins).await?;
        ins.nth = self.test_faults(ins).await;
        Ok(())
    }

    /// The type guard before an attempt: re-encode while the replica has
    /// types spate had not encoded for.
    async fn types_before(&mut self, ins: &mut Insert<'_>) -> Result<(), Attempt> {
        let (shared, shard) = (self.shared.clone(), self.shard.clone());
        let Some(guard) = type_guard(&shared, self.intents.is_some()) else {
            return Ok(());
        };
        let replica = &shard.replicas[ins.attempts.replica()];
        while let Some(change) = guard.before(replica, &ins.prepared, &mut self.pace).await? {
            ins.prepared = self.body(ins.chunk, ins.rows).map_err(Attempt::Failed)?;
            tracing::info!(
                rows = ins.chunk.rows,
                change = %change,
                "re-encoded a batch for the table's new columns before sending it"
            );
        }
        Ok(())
    }

    /// One HTTP attempt on the current replica, within its timeout.
    async fn send(&mut self, ins: &mut Insert<'_>) -> Sent {
        let shard = self.shard.clone();
        let (replica, retry) = (ins.attempts.replica(), self.pace.retry);
        let target = &shard.replicas[replica];
        let started = tokio::time::Instant::now();
        let timeout = ins.attempts.timeout(&retry);
        let attempt = target.client.insert_bytes(
            &ins.prepared.query,
            ins.prepared.bytes.clone(),
            &ins.extra,
            timeout + CLIENT_GRACE,
        );
        let result = tokio::select! {
            r = tokio::time::timeout(timeout, attempt) => r.unwrap_or_else(|_| {
                ins.attempts.timed_out();
                Err(timed_out(timeout, ins.attempts.timeout(&retry)))
            }),
            () = self.pace.deadline() => return Sent::Abandoned,
        };
        if let Err(e) = result {
            return Sent::Failed(e);
        }
        InsertSucceeded {
            site: self.shared.site(&shard.label),
            replica: &target.url,
            rows: ins.row_count(),
            elapsed: started.elapsed(),
            attempt: ins.attempts.attempt(),
        }
        .emit();
        shard.preferred.store(replica, Ordering::Relaxed);
        Sent::Landed
    }

    /// After the server confirmed the send: the type guard's check of
    /// what it may have stored misread, and the copy it calls for.
    async fn landed(&mut self, ins: &mut Insert<'_>) -> Landed {
        fault::hit(fault::Point::AfterAck, ins.nth);
        let (shared, shard) = (self.shared.clone(), self.shard.clone());
        let Some(guard) = type_guard(&shared, self.intents.is_some()) else {
            return Landed::Done(Attempt::Inserted);
        };
        let replica = &shard.replicas[ins.attempts.replica()];
        let (change, ranges) = match guard
            .after(ins.chunk, replica, &ins.prepared, &mut self.pace)
            .await
        {
            After::Clean => return Landed::Done(Attempt::Inserted),
            After::Stop(a) => return Landed::Done(a),
            After::Copy { change, ranges } => (change, ranges),
        };
        match self.body(ins.chunk, ins.rows) {
            Ok(copy) => {
                tracing::warn!(
                    ranges = %ranges,
                    change = %change,
                    "an insert landed while the table's column types changed: ClickHouse may have stored it misread; \
                     inserting a copy encoded for the new types (rows of these offsets may be there twice, one misread)"
                );
                ins.extra = copy_settings(&ins.extra, copy.for_version);
                ins.prepared = copy;
                Landed::Copy
            }
            Err(e) => {
                tracing::error!(
                    ranges = %ranges,
                    change = %change,
                    "an insert landed while the table's column types changed: ClickHouse may have stored it misread; \
                     its messages are read again for the new columns"
                );
                Landed::Done(Attempt::Failed(e))
            }
        }
    }

    /// After a failed send: re-encode for a schema change, hand a row
    /// error up, or decide what follows (a retry after a backoff, a
    /// failover, or the end). `Ok`: attempt again.
    async fn failed(&mut self, ins: &mut Insert<'_>, error: InsertError) -> Result<(), Attempt> {
        // A schema error first: a type mismatch after an ALTER is the
        // table's change, not the rows' fault.
        let recoded = self
            .after_schema_error(
                ins.chunk,
                ins.rows,
                &ins.prepared,
                &error,
                &mut ins.refreshed,
            )
            .await;
        match recoded {
            Some(Ok(next)) => {
                tracing::info!(
                    rows = ins.row_count(),
                    "re-encoded a batch for the table's new columns"
                );
                ins.prepared = next;
                return Ok(());
            }
            Some(Err(e)) => return Err(Attempt::Failed(e)),
            None => {}
        }
        if error.is_row_error() {
            return Err(Attempt::RowError(error));
        }
        let attempt = ins.attempts.attempt();
        let shard = self.shard.clone();
        let url = &shard.replicas[ins.attempts.replica()].url;
        let backoff = (self.after_failure(ins.chunk, &mut ins.attempts, url, &error))
            .map_err(Attempt::Failed)?;
        self.pace.failing(first_line(&error.message));
        if let Some(backoff) = backoff {
            InsertBackoff {
                attempt,
                error: &error,
                replica: url,
                backoff,
                rows: ins.row_count(),
            }
            .emit();
            self.pace.pause(backoff).await?;
        }
        Ok(())
    }

    /// Decide what follows a failed attempt on replica `url`, emitting
    /// that decision's events: the backoff before the next attempt (none
    /// when failing over at once), or the fatal error when giving up.
    fn after_failure(
        &self,
        chunk: &Chunk,
        attempts: &mut Attempts,
        url: &str,
        error: &InsertError,
    ) -> Result<Option<Duration>, FatalError> {
        let site = self.shared.site(&self.shard.label);
        let attempt = attempts.attempt();
        match attempts.next(error.remedy(), &self.pace.retry, rand::random::<f64>()) {
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
    async fn test_faults(&self, ins: &Insert<'_>) -> u64 {
        let nth = fault::chunk_taken();
        fault::hit(fault::Point::BeforeSend, nth);
        fault::hold_before_send(nth).await;
        if fault::fires(fault::Point::DuringInsert, nth) {
            let target = &self.shard.replicas[ins.attempts.replica()];
            let timeout = self.pace.retry.attempt_timeout(0);
            let (query, bytes) = (&ins.prepared.query, ins.prepared.bytes.clone());
            let attempt = target
                .client
                .insert_bytes(query, bytes, &ins.extra, timeout);
            let _ = tokio::time::timeout(Duration::from_millis(5), attempt).await;
            fault::hit(fault::Point::DuringInsert, nth);
        }
        nth
    }
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
