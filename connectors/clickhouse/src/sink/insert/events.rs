//! What an insert worker, the start-up discovery and the readiness probe
//! report: one struct per event, whose `emit()` logs and counts in one
//! place (the shape of Vector's `internal_events`). Emitted from insert
//! workers and the probe (tokio tasks) and from start-up code; they write
//! the core's series ([`Metrics`]) and this connector's ([`ChMetrics`]).

use crate::client::InsertError;
use crate::metrics::ChMetrics;
use spate_core::metrics::Metrics;
use std::fmt::Display;
use std::time::Duration;

/// Where an event happened: the registries and the `table`/`shard` labels.
#[derive(Clone, Copy)]
pub(crate) struct Site<'a> {
    pub(crate) metrics: &'a Metrics,
    pub(crate) ch: &'a ChMetrics,
    pub(crate) table: &'a str,
    pub(crate) shard: &'a str,
}

impl Site<'_> {
    fn labels(&self) -> [&str; 2] {
        [self.table, self.shard]
    }
}

/// The last request to a replica succeeded (`up`) or failed.
pub(crate) struct ReplicaUp<'a> {
    pub(crate) site: Site<'a>,
    pub(crate) replica: &'a str,
    pub(crate) up: bool,
}

impl ReplicaUp<'_> {
    pub(crate) fn emit(&self) {
        let s = &self.site;
        s.ch.replica_up
            .with_label_values(&[s.table, s.shard, self.replica])
            .set(i64::from(self.up));
    }
}

/// A replica did not answer at start.
pub(crate) struct ReplicaUnreachableAtStart<'a> {
    pub(crate) site: Site<'a>,
    pub(crate) replica: &'a str,
    pub(crate) error: &'a dyn Display,
}

impl ReplicaUnreachableAtStart<'_> {
    pub(crate) fn emit(&self) {
        ReplicaUp {
            site: self.site,
            replica: self.replica,
            up: false,
        }
        .emit();
        tracing::warn!(replica = %self.replica, shard = %self.site.shard, error = %self.error, "ClickHouse replica not reachable at start; inserts go to the others until it is back");
    }
}

/// A replica confirmed an insert.
pub(crate) struct InsertSucceeded<'a> {
    pub(crate) site: Site<'a>,
    pub(crate) replica: &'a str,
    pub(crate) rows: u64,
    pub(crate) elapsed: Duration,
    pub(crate) attempt: u32,
}

impl InsertSucceeded<'_> {
    pub(crate) fn emit(&self) {
        let s = &self.site;
        s.metrics
            .insert_duration
            .with_label_values(&s.labels())
            .observe(self.elapsed.as_secs_f64());
        s.ch.replica_rows_inserted
            .with_label_values(&[s.table, s.shard, self.replica])
            .inc_by(self.rows);
        ReplicaUp {
            site: self.site,
            replica: self.replica,
            up: true,
        }
        .emit();
        if self.attempt > 1 {
            tracing::info!(attempt = self.attempt, rows = self.rows, replica = %self.replica, "insert succeeded after retrying");
        }
    }
}

/// An insert attempt failed with an error worth retrying.
pub(crate) struct InsertAttemptFailed<'a> {
    pub(crate) site: Site<'a>,
    pub(crate) replica: &'a str,
    pub(crate) error: &'a InsertError,
}

impl InsertAttemptFailed<'_> {
    pub(crate) fn emit(&self) {
        let s = &self.site;
        let replica_fault = self.error.is_replica_failure();
        let kind = if replica_fault {
            "connection"
        } else {
            "retriable"
        };
        s.metrics
            .insert_errors
            .with_label_values(&[s.table, s.shard, "retriable"])
            .inc();
        s.ch.replica_errors
            .with_label_values(&[s.table, s.shard, self.replica, kind])
            .inc();
        s.metrics
            .insert_retries
            .with_label_values(&s.labels())
            .inc();
        if replica_fault {
            ReplicaUp {
                site: self.site,
                replica: self.replica,
                up: false,
            }
            .emit();
        }
    }
}

/// The same batch goes to the shard's next replica.
pub(crate) struct InsertFailedOver<'a> {
    pub(crate) site: Site<'a>,
    pub(crate) attempt: u32,
    pub(crate) error: &'a InsertError,
    pub(crate) replica: &'a str,
    pub(crate) next: &'a str,
    pub(crate) rows: u64,
}

impl InsertFailedOver<'_> {
    pub(crate) fn emit(&self) {
        let s = &self.site;
        s.ch.replica_failovers.with_label_values(&s.labels()).inc();
        tracing::warn!(attempt = self.attempt, code = ?self.error.code, error = %first_line(&self.error.message), replica = %self.replica, next = %self.next, rows = self.rows, "Insert failed on this replica; sending the same batch to the next one.");
    }
}

/// The worker waits before the next attempt.
pub(crate) struct InsertBackoff<'a> {
    pub(crate) attempt: u32,
    pub(crate) error: &'a InsertError,
    pub(crate) replica: &'a str,
    pub(crate) backoff: Duration,
    pub(crate) rows: u64,
}

impl InsertBackoff<'_> {
    pub(crate) fn emit(&self) {
        tracing::warn!(attempt = self.attempt, code = ?self.error.code, error = %first_line(&self.error.message), replica = %self.replica, backoff_ms = self.backoff.as_millis() as u64, rows = self.rows, "Insert failed, retrying.");
    }
}

/// The server rejected an insert for good.
pub(crate) struct InsertRejected<'a> {
    pub(crate) site: Site<'a>,
    pub(crate) replica: &'a str,
    pub(crate) error: &'a InsertError,
}

impl InsertRejected<'_> {
    pub(crate) fn emit(&self) {
        let s = &self.site;
        s.metrics
            .insert_errors
            .with_label_values(&[s.table, s.shard, "fatal"])
            .inc();
        s.ch.replica_errors
            .with_label_values(&[s.table, s.shard, self.replica, "fatal"])
            .inc();
        tracing::error!(code = ?self.error.code, error = %self.error.message, replica = %self.replica, "insert failed and cannot succeed by retrying");
    }
}

/// A chunk is in ClickHouse and acknowledged.
pub(crate) struct ChunkInserted<'a> {
    pub(crate) site: Site<'a>,
    pub(crate) rows: u64,
    pub(crate) bytes: usize,
}

impl ChunkInserted<'_> {
    pub(crate) fn emit(&self) {
        let s = &self.site;
        let m = s.metrics;
        let labels = s.labels();
        m.rows_inserted.with_label_values(&labels).inc_by(self.rows);
        m.bytes_inserted
            .with_label_values(&labels)
            .inc_by(self.bytes as u64);
        m.insert_batch_rows
            .with_label_values(&labels)
            .observe(self.rows as f64);
        m.insert_batch_bytes
            .with_label_values(&labels)
            .observe(self.bytes as f64);
    }
}

/// The first line of a server message, at most 300 characters.
pub(crate) fn first_line(s: &str) -> &str {
    let s = s.trim();
    let line = s.lines().next().unwrap_or(s);
    match line.char_indices().nth(300) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}
