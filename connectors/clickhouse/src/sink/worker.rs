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

use super::pool::PoolShared;
use super::retry::RetryPolicy;
use crate::classify::ErrorClass;
use crate::client::ChClient;
use bytes::Bytes;
use spate_core::error::{Fault, FatalError};
use spate_core::sink::{AckEvent, AckSender, Chunk, ShardReceiver};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{watch, Mutex};
use tracing::Instrument;

pub(crate) struct Worker {
    pub(crate) shard: usize,
    pub(crate) index: usize,
    pub(crate) client: ChClient,
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
        let span = tracing::info_span!("shard_worker", table = %self.shared.table, shard = self.shard, worker = self.index);
        async move {
            while let Some(chunk) = self.next().await {
                if *self.abandon.borrow() || self.shared.failed.load(Ordering::Acquire) {
                    self.abandon_chunk(chunk);
                    continue;
                }
                match self.insert(&chunk).await {
                    Outcome::Inserted => {
                        let m = &self.shared.metrics;
                        let shard = self.shard.to_string();
                        let labels = [self.shared.table.as_str(), shard.as_str()];
                        m.rows_inserted.with_label_values(&labels).inc_by(chunk.rows);
                        m.bytes_inserted.with_label_values(&labels).inc_by(chunk.data.len() as u64);
                        self.shared.inserted_chunks.fetch_add(1, Ordering::AcqRel);
                        self.shared.inserted_rows.fetch_add(chunk.rows, Ordering::AcqRel);
                        let _ = self.acks.send(AckEvent::Acked(chunk.acks));
                    }
                    Outcome::Failed(error) => {
                        self.shared.failed.store(true, Ordering::Release);
                        let _ = self.acks.send(AckEvent::Fatal { ranges: chunk.acks, error });
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
        self.shared.abandoned_rows.fetch_add(chunk.rows, Ordering::AcqRel);
        let _ = self.acks.send(AckEvent::Abandoned(chunk.acks));
    }

    async fn insert(&mut self, chunk: &Chunk) -> Outcome {
        let body = Bytes::copy_from_slice(&chunk.data);
        let shared = self.shared.clone();
        let shard = self.shard.to_string();
        let labels = [shared.table.as_str(), shard.as_str()];
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let started = Instant::now();
            let result = tokio::select! {
                r = self.client.insert(&shared.db, &shared.table_name, &shared.columns, shared.format, body.clone(), &self.settings) => r,
                _ = self.abandon.changed() => return Outcome::Abandoned,
            };
            match result {
                Ok(()) => {
                    shared.metrics.insert_duration.with_label_values(&labels).observe(started.elapsed().as_secs_f64());
                    if attempt > 1 {
                        tracing::info!(attempt, rows = chunk.rows, "insert succeeded after retrying");
                    }
                    return Outcome::Inserted;
                }
                Err(e) if e.class == ErrorClass::Retriable => {
                    shared.metrics.insert_errors.with_label_values(&[labels[0], labels[1], "retriable"]).inc();
                    shared.metrics.insert_retries.with_label_values(&labels).inc();
                    let delay = self.retry.delay(attempt, rand::random::<f64>());
                    tracing::warn!(attempt, code = ?e.code, error = %e.message, backoff_ms = delay.as_millis() as u64, rows = chunk.rows, "Insert failed, retrying.");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = self.abandon.changed() => return Outcome::Abandoned,
                    }
                }
                Err(e) => {
                    shared.metrics.insert_errors.with_label_values(&[labels[0], labels[1], "fatal"]).inc();
                    tracing::error!(code = ?e.code, error = %e.message, "insert failed and cannot succeed by retrying");
                    return Outcome::Failed(FatalError::new(
                        format!("clickhouse sink {} shard {}", shared.table, self.shard),
                        format!(
                            "insert of {} rows failed{}: {}",
                            chunk.rows,
                            e.code.map(|c| format!(" with code {c}")).unwrap_or_default(),
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
