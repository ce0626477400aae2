//! One insert worker: a tokio task that takes chunks from its shard's
//! queue and inserts each until it is in, or the error says retrying cannot
//! help.
//!
//! A chunk is acknowledged only after ClickHouse confirmed the insert.
//! Retriable failures are retried with the same bytes (so replicated block
//! deduplication recognises a retry whose first attempt did land); what
//! follows a failure is [`Attempts::next`]'s decision, what is logged and
//! counted goes through [`super::events`]. A non-retriable failure fails
//! the chunk's ranges and reports a fatal error; afterwards the worker
//! abandons every chunk it takes, so nothing past the failure can be
//! acknowledged. When the drain deadline passes (`abandon`), the worker
//! abandons what it holds and stops.
//!
//! Receives `Chunk`s from its `ShardReceiver` (shared with the shard's
//! other workers), sends `AckEvent`s to the controller.

use super::events::{
    ChunkInserted, InsertAttemptFailed, InsertBackoff, InsertFailedOver, InsertRejected,
    InsertSucceeded, Site,
};
use super::retry::{Attempts, Next, RetryPolicy};
use super::shard::{PoolShared, Shard};
use super::target::{InsertQuery, InsertTarget};
use crate::client::InsertError;
use bytes::Bytes;
use spate_core::error::{FatalError, Fault};
use spate_core::sink::{AckEvent, AckSender, Chunk, ShardReceiver};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex};
use tracing::Instrument;

pub(crate) struct Worker<C> {
    pub(crate) shard: Arc<Shard<C>>,
    pub(crate) index: usize,
    pub(crate) rx: Arc<Mutex<ShardReceiver>>,
    pub(crate) acks: AckSender,
    pub(crate) abandon: watch::Receiver<bool>,
    pub(crate) shared: Arc<PoolShared>,
    pub(crate) retry: RetryPolicy,
}

enum Outcome {
    Inserted,
    Failed(FatalError),
    Abandoned,
}

/// The drain deadline passed while waiting.
struct Abandoned;

/// What every attempt of a chunk sends, and the schema version it was made
/// for.
struct Prepared {
    bytes: Bytes,
    query: Arc<InsertQuery>,
    for_version: u64,
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
                match self.insert(&chunk).await {
                    Outcome::Inserted => self.acknowledge(chunk),
                    Outcome::Failed(error) => {
                        self.shared.failed.store(true, Ordering::Release);
                        let _ = self.acks.send(AckEvent::Fatal {
                            ranges: chunk.acks,
                            error,
                        });
                    }
                    Outcome::Abandoned => self.abandon_chunk(chunk),
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

    fn acknowledge(&self, chunk: Chunk) {
        ChunkInserted {
            site: self.shared.site(&self.shard.label),
            rows: chunk.rows,
            bytes: chunk.data.len(),
        }
        .emit();
        self.shared.inserted_chunks.fetch_add(1, Ordering::AcqRel);
        self.shared
            .inserted_rows
            .fetch_add(chunk.rows, Ordering::AcqRel);
        let _ = self.acks.send(AckEvent::Acked(chunk.acks));
    }

    fn abandon_chunk(&self, chunk: Chunk) {
        self.shared.abandoned_chunks.fetch_add(1, Ordering::AcqRel);
        self.shared
            .abandoned_rows
            .fetch_add(chunk.rows, Ordering::AcqRel);
        let _ = self.acks.send(AckEvent::Abandoned(chunk.acks));
    }

    /// The bytes every attempt of `chunk` sends and their statement (made
    /// once, and again after the table's columns changed).
    fn body(&self, chunk: &Chunk) -> Result<Prepared, FatalError> {
        if let Some(live) = self.shared.live.get() {
            let now = live.current();
            let own = live.get(chunk.schema).unwrap_or_else(|| now.clone());
            let body = super::recode::body_for(&own, &now, &chunk.data)
                .map_err(|e| FatalError::new(self.context(), e, Fault::User))?;
            return Ok(Prepared {
                bytes: Bytes::from(body.bytes),
                query: body.query,
                for_version: now.id,
            });
        }
        let query = Arc::new(self.shared.query.clone());
        let bytes = match &self.shared.native {
            Some(layout) => layout
                .transpose(&chunk.data)
                .map(Bytes::from)
                .map_err(|e| FatalError::new(self.context(), e.to_string(), Fault::Internal))?,
            None => Bytes::copy_from_slice(&chunk.data),
        };
        Ok(Prepared {
            bytes,
            query,
            for_version: 0,
        })
    }

    /// After a failure that says the columns changed: the chunk's bytes
    /// for the columns as they are now, if they changed since `sent` was
    /// made (re-read at once, once per chunk, if spate has not seen it).
    async fn after_schema_error(
        &mut self,
        chunk: &Chunk,
        sent: &Prepared,
        error: &InsertError,
        refreshed: &mut bool,
    ) -> Option<Result<Prepared, FatalError>> {
        let schema_codes = [8, 10, 16, 33, 47, 53, 70];
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
        (live.version() != sent.for_version).then(|| self.body(chunk))
    }

    fn context(&self) -> String {
        format!(
            "clickhouse sink {} shard {}",
            self.shared.table, self.shard.label
        )
    }

    async fn insert(&mut self, chunk: &Chunk) -> Outcome {
        let mut prepared = match self.body(chunk) {
            Ok(body) => body,
            Err(e) => return Outcome::Failed(e),
        };
        let mut refreshed = false;
        let (shard, shared) = (self.shard.clone(), self.shared.clone());
        let site = shared.site(&shard.label);
        let preferred = shard.preferred.load(Ordering::Relaxed);
        let mut attempts = Attempts::new(shard.replicas.len(), preferred);
        loop {
            let replica = attempts.replica();
            let target = &shard.replicas[replica];
            let started = tokio::time::Instant::now();
            let result = tokio::select! {
                r = target.client.insert_bytes(&prepared.query, prepared.bytes.clone()) => r,
                _ = self.abandon.changed() => return Outcome::Abandoned,
            };
            let error = match result {
                Ok(()) => {
                    InsertSucceeded {
                        site,
                        replica: &target.url,
                        rows: chunk.rows,
                        elapsed: started.elapsed(),
                        attempt: attempts.attempt(),
                    }
                    .emit();
                    shard.preferred.store(replica, Ordering::Relaxed);
                    return Outcome::Inserted;
                }
                Err(e) => e,
            };
            match (self.after_schema_error(chunk, &prepared, &error, &mut refreshed)).await {
                Some(Ok(next)) => {
                    tracing::info!(
                        rows = chunk.rows,
                        "re-encoded a batch for the table's new columns"
                    );
                    prepared = next;
                    continue;
                }
                Some(Err(e)) => return Outcome::Failed(e),
                None => {}
            }
            let attempt = attempts.attempt();
            let backoff = match self.after_failure(chunk, &mut attempts, site, &target.url, &error)
            {
                Ok(backoff) => backoff,
                Err(failure) => return Outcome::Failed(failure),
            };
            if let Some(backoff) = backoff {
                InsertBackoff {
                    attempt,
                    error: &error,
                    replica: &target.url,
                    backoff,
                    rows: chunk.rows,
                }
                .emit();
                if self.pause(backoff).await.is_err() {
                    return Outcome::Abandoned;
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
                Err(self.rejected(chunk, url, error))
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

    /// Wait `delay`, unless the drain deadline passes first.
    async fn pause(&mut self, delay: Duration) -> Result<(), Abandoned> {
        tokio::select! {
            () = tokio::time::sleep(delay) => Ok(()),
            _ = self.abandon.changed() => Err(Abandoned),
        }
    }

    fn rejected(&self, chunk: &Chunk, url: &str, e: &InsertError) -> FatalError {
        FatalError::new(
            self.context(),
            format!(
                "insert of {} rows into {url} failed{}: {}",
                chunk.rows,
                e.code
                    .map(|c| format!(" with code {c}"))
                    .unwrap_or_default(),
                super::events::first_line(&e.message)
            ),
            Fault::User,
        )
    }
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
