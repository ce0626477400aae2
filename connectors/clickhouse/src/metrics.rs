//! The ClickHouse connector's own series, registered on the core's
//! [`prometheus::Registry`] ([`Metrics::registry`]), so `/metrics` serves
//! them next to the core's.
//!
//! [`ChMetrics::of`] registers them once per registry ([`Metrics::extension`]) (several sinks and
//! start-up retries share one registration) before any sample is taken;
//! insert workers (tokio tasks), the start-up discovery and the readiness
//! probe update them through the helpers in `sink::insert::events`.

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use spate_core::metrics::Metrics;

/// Names of every metric family this connector exports (the core's are
/// in [`spate_core::metrics::METRIC_NAMES`]).
pub const METRIC_NAMES: &[&str] = &[
    "spate_replica_up",
    "spate_replica_rows_inserted_total",
    "spate_replica_errors_total",
    "spate_replica_failovers_total",
    "spate_schema_changes_total",
    "spate_schema_races_total",
    "spate_stalls",
    "spate_insert_requests_total",
    "spate_insert_request_batches_total",
];

/// The per-replica series.
#[derive(Clone, Debug)]
pub struct ChMetrics {
    /// `spate_replica_up{table,shard,replica}`: 1 when the last request to
    /// that ClickHouse replica (insert or probe) succeeded, else 0.
    pub replica_up: IntGaugeVec,
    /// `spate_replica_rows_inserted_total{table,shard,replica}`.
    pub replica_rows_inserted: IntCounterVec,
    /// `spate_replica_errors_total{table,shard,replica,kind}`.
    pub replica_errors: IntCounterVec,
    /// `spate_replica_failovers_total{table,shard}`: inserts moved to the
    /// shard's next replica after a connection error or timeout.
    pub replica_failovers: IntCounterVec,
    /// `spate_schema_changes_total{table}`: changes of the table's columns
    /// applied while running.
    pub schema_changes: IntCounterVec,
    /// `spate_schema_races_total{table}`: inserts the server confirmed
    /// while a column they sent changed type (the insert may be stored
    /// misread on servers that do not convert; see `sink::schema_change::guard`).
    pub schema_races: IntCounterVec,
    /// `spate_stalls{table}`: the sink's work (insert workers, exactly-once
    /// intents and fences, dead-letter destinations) retrying an error for
    /// longer than `--stall-timeout`, as `/readyz` lists them; set at each
    /// readiness probe.
    pub stalls: IntGaugeVec,
    /// `spate_insert_requests_total{table,shard,outcome}`: attempts of
    /// streamed insert requests (several batches in one request,
    /// `sink::worker::stream`) by how they ended: `inserted`, or `failed`
    /// (sent again whole when unanswered, or inserted batch by batch when
    /// the server refused them).
    pub insert_requests: IntCounterVec,
    /// `spate_insert_request_batches_total{table,shard}`: batches the
    /// `inserted` streamed requests carried.
    pub insert_request_batches: IntCounterVec,
}

impl ChMetrics {
    /// The series registered on `metrics`' registry; the first call for a
    /// given registry registers them, later ones return the same.
    #[must_use]
    pub fn of(metrics: &Metrics) -> ChMetrics {
        metrics.extension(|registry| {
            let ch = ChMetrics::new();
            ch.register(registry)
                .expect("spate_replica_* are registered only through ChMetrics::of");
            ch
        })
    }

    /// Unregistered series (see [`register`](Self::register)).
    #[must_use]
    pub fn new() -> ChMetrics {
        let tsr = &["table", "shard", "replica"];
        ChMetrics {
            replica_up: IntGaugeVec::new(
                Opts::new(
                    "spate_replica_up",
                    "1 if the last request to this ClickHouse replica succeeded.",
                ),
                tsr,
            )
            .expect("valid metric"),
            replica_rows_inserted: IntCounterVec::new(
                Opts::new(
                    "spate_replica_rows_inserted_total",
                    "Rows acknowledged by this ClickHouse replica.",
                ),
                tsr,
            )
            .expect("valid metric"),
            replica_errors: IntCounterVec::new(
                Opts::new(
                    "spate_replica_errors_total",
                    "Failed requests to this ClickHouse replica by kind.",
                ),
                &["table", "shard", "replica", "kind"],
            )
            .expect("valid metric"),
            replica_failovers: IntCounterVec::new(
                Opts::new(
                    "spate_replica_failovers_total",
                    "Inserts moved to the shard's next replica after a connection error or timeout.",
                ),
                &["table", "shard"],
            )
            .expect("valid metric"),
            schema_changes: IntCounterVec::new(
                Opts::new(
                    "spate_schema_changes_total",
                    "Changes of the target table's columns spate picked up and applied while running.",
                ),
                &["table"],
            )
            .expect("valid metric"),
            schema_races: IntCounterVec::new(
                Opts::new(
                    "spate_schema_races_total",
                    "Inserts confirmed while a column they sent changed type: possibly stored misread on servers that do not convert (logged with their offsets).",
                ),
                &["table"],
            )
            .expect("valid metric"),
            stalls: IntGaugeVec::new(
                Opts::new(
                    "spate_stalls",
                    "Sink work retrying an error for longer than --stall-timeout (inserts, exactly-once intents and fences, dead-letter destinations), as /readyz lists it.",
                ),
                &["table"],
            )
            .expect("valid metric"),
            insert_requests: IntCounterVec::new(
                Opts::new(
                    "spate_insert_requests_total",
                    "Attempts of streamed insert requests (several batches in one INSERT) by outcome: inserted, or failed (sent again whole when unanswered, inserted batch by batch when refused).",
                ),
                &["table", "shard", "outcome"],
            )
            .expect("valid metric"),
            insert_request_batches: IntCounterVec::new(
                Opts::new(
                    "spate_insert_request_batches_total",
                    "Batches carried by the streamed insert requests the server confirmed.",
                ),
                &["table", "shard"],
            )
            .expect("valid metric"),
        }
    }

    /// Register every series on `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.replica_up.clone()))?;
        registry.register(Box::new(self.replica_rows_inserted.clone()))?;
        registry.register(Box::new(self.replica_errors.clone()))?;
        registry.register(Box::new(self.replica_failovers.clone()))?;
        registry.register(Box::new(self.schema_changes.clone()))?;
        registry.register(Box::new(self.schema_races.clone()))?;
        registry.register(Box::new(self.stalls.clone()))?;
        registry.register(Box::new(self.insert_requests.clone()))?;
        registry.register(Box::new(self.insert_request_batches.clone()))
    }
}

impl Default for ChMetrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_clone_of_the_metrics_shares_the_series() {
        let m = Metrics::new();
        let clone = m.clone();
        ChMetrics::of(&m)
            .replica_failovers
            .with_label_values(&["db.t", "1"])
            .inc();
        ChMetrics::of(&clone)
            .replica_failovers
            .with_label_values(&["db.t", "1"])
            .inc();
        let line = "spate_replica_failovers_total{shard=\"1\",table=\"db.t\"} 2\n";
        assert!(m.encode_text().contains(line), "{}", m.encode_text());
    }

    #[test]
    fn every_declared_name_is_exported_once_per_registry() {
        let m = Arc::new(Metrics::new());
        let ch = ChMetrics::of(&m);
        // A second sink (or a retried start) gets the same series.
        let again = ChMetrics::of(&m);
        ch.replica_up
            .with_label_values(&["db.t", "0", "http://a:8123"])
            .set(1);
        again
            .replica_rows_inserted
            .with_label_values(&["db.t", "0", "http://a:8123"])
            .inc();
        ch.replica_errors
            .with_label_values(&["db.t", "0", "http://a:8123", "connection"])
            .inc();
        ch.replica_failovers.with_label_values(&["db.t", "0"]).inc();
        ch.schema_changes.with_label_values(&["db.t"]).inc();
        ch.schema_races.with_label_values(&["db.t"]).inc();
        ch.stalls.with_label_values(&["db.t"]).set(1);
        ch.insert_requests
            .with_label_values(&["db.t", "0", "inserted"])
            .inc();
        ch.insert_request_batches
            .with_label_values(&["db.t", "0"])
            .inc();
        let text = m.encode_text();
        for name in METRIC_NAMES {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
        }
        assert!(text.contains(
            "spate_replica_rows_inserted_total{replica=\"http://a:8123\",shard=\"0\",table=\"db.t\"} 1"
        ));
        // Another process-level registry gets its own series.
        let other = Arc::new(Metrics::new());
        ChMetrics::of(&other)
            .replica_failovers
            .with_label_values(&["db.t", "0"])
            .inc();
        let line = "spate_replica_failovers_total{shard=\"0\",table=\"db.t\"} 1\n";
        assert!(m.encode_text().contains(line));
        assert!(other.encode_text().contains(line));
    }

    #[test]
    fn nothing_is_exported_before_a_sample() {
        let m = Arc::new(Metrics::new());
        let _ = ChMetrics::of(&m);
        assert!(!m.encode_text().contains("spate_replica"));
    }
}
