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
use super::target::InsertTarget;
use crate::client::InsertError;
use bytes::Bytes;
use spate_core::error::{FatalError, Fault};
use spate_core::sink::{AckEvent, AckSender, Chunk, QueueDepths, ShardReceiver};
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
    /// Where the body of the chunk in flight is counted (see `insert`).
    pub(crate) depths: QueueDepths,
}

enum Outcome {
    Inserted,
    Failed(FatalError),
    Abandoned,
}

/// The drain deadline passed while waiting.
struct Abandoned;

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

    /// The bytes every attempt of `chunk` sends (made once).
    fn body(&self, chunk: &Chunk) -> Result<Bytes, FatalError> {
        match &self.shared.native {
            Some(layout) => layout
                .transpose(&chunk.data)
                .map(Bytes::from)
                .map_err(|e| FatalError::new(self.context(), e.to_string(), Fault::Internal)),
            None => Ok(Bytes::copy_from_slice(&chunk.data)),
        }
    }

    fn context(&self) -> String {
        format!(
            "clickhouse sink {} shard {}",
            self.shared.table, self.shard.label
        )
    }

    async fn insert(&mut self, chunk: &Chunk) -> Outcome {
        let body = match self.body(chunk) {
            Ok(body) => body,
            Err(e) => return Outcome::Failed(e),
        };
        // The chunk is counted in its queue's depth until acknowledged;
        // its wire body and the client's compressed copy of it live as
        // long: count them too, or the budget misses two copies per
        // insert in flight.
        let _in_flight = self.depths.charge(chunk.shard, 2 * body.len());
        let (shard, shared) = (self.shard.clone(), self.shared.clone());
        let site = shared.site(&shard.label);
        let preferred = shard.preferred.load(Ordering::Relaxed);
        let mut attempts = Attempts::new(shard.replicas.len(), preferred);
        loop {
            let replica = attempts.replica();
            let target = &shard.replicas[replica];
            let started = tokio::time::Instant::now();
            let result = tokio::select! {
                r = target.client.insert_bytes(&shared.query, body.clone()) => r,
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
