//! One insert worker: a tokio task that takes chunks from its shard's
//! queue and inserts each until it is in, or the error says retrying cannot
//! help.
//!
//! A chunk is acknowledged only after ClickHouse confirmed the insert.
//! Retriable failures are retried with the same bytes (so replicated block
//! deduplication recognises a retry whose first attempt did land). A
//! non-retriable failure fails the chunk's ranges and reports a fatal
//! error; afterwards the worker abandons every chunk it takes, so nothing
//! past the failure can be acknowledged. When the drain deadline passes,
//! the worker abandons what it holds and stops.

use super::pool::{set_up, PoolShared, Shard};
use super::retry::RetryPolicy;
use crate::classify::ErrorClass;
use bytes::Bytes;
use spate_core::error::{FatalError, Fault};
use spate_core::sink::{AckEvent, AckSender, Chunk, ShardReceiver};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{watch, Mutex};
use tracing::Instrument;

pub(crate) struct Worker {
    pub(crate) shard: Arc<Shard>,
    pub(crate) index: usize,
    pub(crate) rx: Arc<Mutex<ShardReceiver>>,
    pub(crate) acks: AckSender,
    pub(crate) abandon: watch::Receiver<bool>,
    pub(crate) shared: Arc<PoolShared>,
    pub(crate) retry: RetryPolicy,
    pub(crate) settings: Vec<(String, String)>,
}

enum Outcome {
    Inserted,
    Failed(FatalError),
    Abandoned,
}

impl Worker {
    pub(crate) async fn run(mut self) {
        let span = tracing::info_span!("shard_worker", table = %self.shared.table, shard = %self.shard.label, worker = self.index);
        async move {
            while let Some(chunk) = self.next().await {
                if *self.abandon.borrow() || self.shared.failed.load(Ordering::Acquire) {
                    self.abandon_chunk(chunk);
                    continue;
                }
                match self.insert(&chunk).await {
                    Outcome::Inserted => {
                        let m = &self.shared.metrics;
                        let labels = [self.shared.table.as_str(), self.shard.label.as_str()];
                        m.rows_inserted
                            .with_label_values(&labels)
                            .inc_by(chunk.rows);
                        m.bytes_inserted
                            .with_label_values(&labels)
                            .inc_by(chunk.data.len() as u64);
                        m.insert_batch_rows
                            .with_label_values(&labels)
                            .observe(chunk.rows as f64);
                        m.insert_batch_bytes
                            .with_label_values(&labels)
                            .observe(chunk.data.len() as f64);
                        self.shared.inserted_chunks.fetch_add(1, Ordering::AcqRel);
                        self.shared
                            .inserted_rows
                            .fetch_add(chunk.rows, Ordering::AcqRel);
                        let _ = self.acks.send(AckEvent::Acked(chunk.acks));
                    }
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

    fn abandon_chunk(&self, chunk: Chunk) {
        self.shared.abandoned_chunks.fetch_add(1, Ordering::AcqRel);
        self.shared
            .abandoned_rows
            .fetch_add(chunk.rows, Ordering::AcqRel);
        let _ = self.acks.send(AckEvent::Abandoned(chunk.acks));
    }

    async fn insert(&mut self, chunk: &Chunk) -> Outcome {
        let shared = self.shared.clone();
        // The body is made once; retries and failovers send the same bytes.
        let body = match &shared.native {
            Some(layout) => match layout.transpose(&chunk.data) {
                Ok(block) => Bytes::from(block),
                Err(e) => {
                    return Outcome::Failed(FatalError::new(
                        format!(
                            "clickhouse sink {} shard {}",
                            shared.table, self.shard.label
                        ),
                        e.to_string(),
                        Fault::Internal,
                    ))
                }
            },
            None => Bytes::copy_from_slice(&chunk.data),
        };
        let shard = self.shard.clone();
        let labels = [shared.table.as_str(), shard.label.as_str()];
        let replicas = shard.replicas.len();
        let mut replica = shard.preferred.load(Ordering::Relaxed) % replicas;
        // Rounds through every replica that all failed; drives the backoff.
        let mut round = 0u32;
        let mut failed_in_round = 0usize;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let target = &shard.replicas[replica];
            let started = Instant::now();
            let result = tokio::select! {
                r = target.client.insert(&shared.db, &shared.table_name, &shared.columns, shared.format, body.clone(), &self.settings) => r,
                _ = self.abandon.changed() => return Outcome::Abandoned,
            };
            let replica_labels = [labels[0], labels[1], target.url.as_str()];
            match result {
                Ok(()) => {
                    shared
                        .metrics
                        .insert_duration
                        .with_label_values(&labels)
                        .observe(started.elapsed().as_secs_f64());
                    shared
                        .metrics
                        .replica_rows_inserted
                        .with_label_values(&replica_labels)
                        .inc_by(chunk.rows);
                    set_up(&shared.metrics, &shared.table, &shard, replica, true);
                    shard.preferred.store(replica, Ordering::Relaxed);
                    if attempt > 1 {
                        tracing::info!(attempt, rows = chunk.rows, replica = %target.url, "insert succeeded after retrying");
                    }
                    return Outcome::Inserted;
                }
                Err(e) if e.class == ErrorClass::Retriable => {
                    let failover = replicas > 1 && e.is_replica_failure();
                    let kind = if e.is_replica_failure() {
                        "connection"
                    } else {
                        "retriable"
                    };
                    shared
                        .metrics
                        .insert_errors
                        .with_label_values(&[labels[0], labels[1], "retriable"])
                        .inc();
                    shared
                        .metrics
                        .replica_errors
                        .with_label_values(&[labels[0], labels[1], target.url.as_str(), kind])
                        .inc();
                    shared
                        .metrics
                        .insert_retries
                        .with_label_values(&labels)
                        .inc();
                    if e.is_replica_failure() {
                        set_up(&shared.metrics, &shared.table, &shard, replica, false);
                    }
                    if failover {
                        failed_in_round += 1;
                        let next = (replica + 1) % replicas;
                        shared
                            .metrics
                            .replica_failovers
                            .with_label_values(&labels)
                            .inc();
                        tracing::warn!(attempt, code = ?e.code, error = %first_line(&e.message), replica = %target.url, next = %shard.replicas[next].url, rows = chunk.rows, "Insert failed on this replica; sending the same batch to the next one.");
                        replica = next;
                        if failed_in_round < replicas {
                            continue;
                        }
                    }
                    failed_in_round = 0;
                    round += 1;
                    let delay = self.retry.delay(round, rand::random::<f64>());
                    tracing::warn!(attempt, code = ?e.code, error = %first_line(&e.message), replica = %target.url, backoff_ms = delay.as_millis() as u64, rows = chunk.rows, "Insert failed, retrying.");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = self.abandon.changed() => return Outcome::Abandoned,
                    }
                }
                Err(e) => {
                    shared
                        .metrics
                        .insert_errors
                        .with_label_values(&[labels[0], labels[1], "fatal"])
                        .inc();
                    shared
                        .metrics
                        .replica_errors
                        .with_label_values(&[labels[0], labels[1], target.url.as_str(), "fatal"])
                        .inc();
                    tracing::error!(code = ?e.code, error = %e.message, replica = %target.url, "insert failed and cannot succeed by retrying");
                    return Outcome::Failed(FatalError::new(
                        format!("clickhouse sink {} shard {}", shared.table, shard.label),
                        format!(
                            "insert of {} rows into {} failed{}: {}",
                            chunk.rows,
                            target.url,
                            e.code
                                .map(|c| format!(" with code {c}"))
                                .unwrap_or_default(),
                            first_line(&e.message)
                        ),
                        Fault::User,
                    ));
                }
            }
        }
    }
}

fn first_line(s: &str) -> &str {
    let s = s.trim();
    let line = s.lines().next().unwrap_or(s);
    match line.char_indices().nth(300) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}
