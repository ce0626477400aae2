//! Metrics: every series the runtime exports, declared once on one
//! [`prometheus::Registry`]; connectors register their own series (e.g.
//! ClickHouse's per-replica ones) on the same registry.
//!
//! Who updates what: drivers count consumed messages per lane; the sink's
//! insert workers count inserted rows, retries and errors per shard; the
//! controller sets committed offsets and lane gauges. The admin server
//! (`/metrics`) encodes the registry.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Series sets connectors registered on this registry, one per type.
type Extensions = Arc<Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>>;

/// Every metric spate exports.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    /// Connector series registered through [`Metrics::extension`]; shared
    /// by clones, like the registry itself.
    extensions: Extensions,
    /// When these metrics were made: the start of the process, which keeps
    /// one set across the pipelines' starts again
    /// (`spate_uptime_seconds`).
    pub created: std::time::Instant,
    /// `spate_messages_consumed_total{topic,partition}`.
    pub messages_consumed: IntCounterVec,
    /// `spate_bytes_consumed_total{topic,partition}` (payload bytes).
    pub bytes_consumed: IntCounterVec,
    /// `spate_rows_inserted_total{table,shard}`.
    pub rows_inserted: IntCounterVec,
    /// `spate_bytes_inserted_total{table,shard}` (encoded bytes).
    pub bytes_inserted: IntCounterVec,
    /// `spate_insert_retries_total{table,shard}`.
    pub insert_retries: IntCounterVec,
    /// `spate_insert_errors_total{table,shard,kind}`.
    pub insert_errors: IntCounterVec,
    /// `spate_insert_duration_seconds{table,shard}`.
    pub insert_duration: HistogramVec,
    /// `spate_delivery_latency_seconds{pipeline,table}`: per row, from its
    /// message's Kafka timestamp to ClickHouse's acknowledgement of it.
    pub delivery_latency: HistogramVec,
    /// `spate_committed_offset{topic,partition}` (next offset to read).
    pub committed_offset: IntGaugeVec,
    /// `spate_consumer_lag{topic,partition}`.
    pub consumer_lag: IntGaugeVec,
    /// `spate_lanes_active`.
    pub lanes_active: IntGauge,
    /// `spate_lanes_paused`.
    pub lanes_paused: IntGauge,
    /// `spate_lanes_blocked`: owned lanes whose watermark cannot move (a
    /// batch of theirs was given up while this member owns them).
    pub lanes_blocked: IntGauge,
    /// `spate_queue_bytes{shard}` (queued plus in-flight bytes). Shard
    /// labels count from 1, like `shard_num` in `system.clusters`.
    pub queue_bytes: IntGaugeVec,
    /// `spate_prefetch_bytes`: payload bytes the source holds prefetched
    /// (librdkafka's fetch queues, from its statistics).
    pub prefetch_bytes: IntGauge,
    /// `spate_decode_errors_total`.
    pub decode_errors: IntCounter,
    /// `spate_messages_skipped_total{topic,reason}`: messages done with
    /// without a row, none being owed (see `sink::Encoded::Nothing`).
    pub messages_skipped: IntCounterVec,
    /// `spate_tables_created_total{table}`: routed tables created from
    /// `--create-table-like`'s template.
    pub tables_created: IntCounterVec,
    /// `spate_rebalances_total{kind}`.
    pub rebalances: IntCounterVec,
    /// `spate_partition_rewinds_total`: partitions read again from their
    /// acknowledged watermark (the sink lost rows it could not insert).
    pub rewinds: IntCounter,
    /// `spate_commits_total{result}`.
    pub commits: IntCounterVec,
    /// `spate_high_watermark{topic,partition}`: the partition's end offset
    /// as the broker last reported it.
    pub high_watermark: IntGaugeVec,
    /// `spate_insert_batch_rows{table,shard}`: rows per inserted batch.
    pub insert_batch_rows: HistogramVec,
    /// `spate_insert_batch_bytes{table,shard}`: bytes per inserted batch.
    pub insert_batch_bytes: HistogramVec,
    /// `spate_uptime_seconds`: seconds since the process started.
    pub uptime: IntGauge,
    /// `spate_build_info{version}`: always 1.
    pub build_info: IntGaugeVec,
}

/// Process-wide sums of a few series (see [`Metrics::totals`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Messages handed to the chains.
    pub consumed: u64,
    /// Rows ClickHouse acknowledged.
    pub inserted: u64,
    /// Summed consumer lag of the owned partitions.
    pub lag: i64,
    /// Lanes owned.
    pub lanes_active: i64,
    /// Lanes paused by backpressure.
    pub lanes_paused: i64,
    /// Messages that could not be decoded.
    pub decode_errors: u64,
    /// Failed insert attempts.
    pub insert_errors: u64,
}

/// Names of every exported metric family (for dashboards and their tests).
pub const METRIC_NAMES: &[&str] = &[
    "spate_messages_consumed_total",
    "spate_bytes_consumed_total",
    "spate_rows_inserted_total",
    "spate_bytes_inserted_total",
    "spate_insert_retries_total",
    "spate_insert_errors_total",
    "spate_insert_duration_seconds",
    "spate_delivery_latency_seconds",
    "spate_committed_offset",
    "spate_consumer_lag",
    "spate_lanes_active",
    "spate_lanes_paused",
    "spate_lanes_blocked",
    "spate_queue_bytes",
    "spate_prefetch_bytes",
    "spate_decode_errors_total",
    "spate_messages_skipped_total",
    "spate_tables_created_total",
    "spate_rebalances_total",
    "spate_partition_rewinds_total",
    "spate_commits_total",
    "spate_high_watermark",
    "spate_insert_batch_rows",
    "spate_insert_batch_bytes",
    "spate_uptime_seconds",
    "spate_build_info",
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn histogram_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .expect("valid metric");
    r.register(Box::new(h.clone())).expect("unique metric");
    h
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric");
    r.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric");
    r.register(Box::new(g.clone())).expect("unique metric");
    g
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(g.clone())).expect("unique metric");
    g
}

impl Metrics {
    /// A fresh registry with every metric registered. One series a line:
    /// a table, kept as one by `rustfmt::skip`.
    #[must_use]
    #[rustfmt::skip]
    pub fn new() -> Self {
        let r = Registry::new();
        let tp = &["topic", "partition"];
        let ts = &["table", "shard"];
        let cv = |name, help, labels| counter_vec(&r, name, help, labels);
        let gv = |name, help, labels| gauge_vec(&r, name, help, labels);
        let hv = |name, help, labels, buckets| histogram_vec(&r, name, help, labels, buckets);
        let c = |name, help| counter(&r, name, help);
        let g = |name, help| gauge(&r, name, help);
        let build_info = gv("spate_build_info", "Always 1; the version label says which spate runs.", &["version"]);
        build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        Self {
            messages_consumed: cv("spate_messages_consumed_total", "Messages handed to the chain.", tp),
            bytes_consumed: cv("spate_bytes_consumed_total", "Payload bytes handed to the chain.", tp),
            rows_inserted: cv("spate_rows_inserted_total", "Rows acknowledged by ClickHouse.", ts),
            bytes_inserted: cv("spate_bytes_inserted_total", "Encoded bytes acknowledged by ClickHouse.", ts),
            insert_retries: cv("spate_insert_retries_total", "Insert attempts retried after a retriable failure.", ts),
            insert_errors: cv("spate_insert_errors_total", "Failed insert attempts by kind.", &["table", "shard", "kind"]),
            insert_duration: hv("spate_insert_duration_seconds", "Insert latency per batch, retries excluded.", ts, vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            delivery_latency: hv("spate_delivery_latency_seconds", "Per row, from its message's Kafka timestamp to ClickHouse's acknowledgement of its insert.", &["pipeline", "table"], vec![0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0]),
            committed_offset: gv("spate_committed_offset", "Last committed offset (next offset to read).", tp),
            consumer_lag: gv("spate_consumer_lag", "High watermark minus committed offset.", tp),
            lanes_active: g("spate_lanes_active", "Lanes currently owned by drivers."),
            lanes_paused: g("spate_lanes_paused", "Lanes paused at the source by backpressure."),
            lanes_blocked: g("spate_lanes_blocked", "Owned lanes whose offsets cannot be committed: a batch of theirs was given up (exactly-once: fenced by a later owner) while this member owns them."),
            queue_bytes: gv("spate_queue_bytes", "Bytes queued or in flight per shard.", &["shard"]),
            prefetch_bytes: g("spate_prefetch_bytes", "Payload bytes librdkafka holds prefetched in the partitions' fetch queues."),
            decode_errors: c("spate_decode_errors_total", "Messages that could not be decoded into a row."),
            messages_skipped: cv("spate_messages_skipped_total", "Messages done with without a row, none being owed (a change stream's tombstone, a skipped operation).", &["topic", "reason"]),
            tables_created: cv("spate_tables_created_total", "Routed tables created from the --create-table-like template.", &["table"]),
            rebalances: cv("spate_rebalances_total", "Partition assignments and revocations.", &["kind"]),
            rewinds: c("spate_partition_rewinds_total", "Partitions read again from their acknowledged watermark: a failed streamed insert request whose batches were no longer held."),
            commits: cv("spate_commits_total", "Offset commits by result.", &["result"]),
            high_watermark: gv("spate_high_watermark", "End offset of the partition as the broker last reported it.", tp),
            insert_batch_rows: hv("spate_insert_batch_rows", "Rows per inserted batch.", ts, vec![100.0, 1e3, 5e3, 1e4, 2.5e4, 5e4, 1e5, 2.5e5, 5e5, 1e6]),
            insert_batch_bytes: hv("spate_insert_batch_bytes", "Bytes per inserted batch.", ts, vec![64e3, 256e3, 1e6, 4e6, 8e6, 16e6, 32e6, 64e6, 128e6]),
            uptime: g("spate_uptime_seconds", "Seconds since the process started."),
            build_info,
            registry: r,
            extensions: Extensions::default(),
            created: std::time::Instant::now(),
        }
    }

    /// The registry (to add connector-specific metrics).
    #[must_use]
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// A connector's own series set `T`, registered on this registry by
    /// `init` the first time it is asked for; every later call (another
    /// sink of the same kind, a retried start, a clone of these metrics)
    /// gets the same series. The core knows nothing of `T`.
    pub fn extension<T>(&self, init: impl FnOnce(&Registry) -> T) -> T
    where
        T: Clone + Send + Sync + 'static,
    {
        let mut map = (self.extensions.lock()).unwrap_or_else(PoisonError::into_inner);
        let entry = map
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(init(&self.registry)));
        entry
            .downcast_ref::<T>()
            .expect("extensions are keyed by their own type")
            .clone()
    }

    /// Process-wide totals for the periodic summary and the progress line.
    #[must_use]
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for family in self.registry.gather() {
            let sum = |gauge: bool| -> f64 {
                family
                    .get_metric()
                    .iter()
                    .map(|m| {
                        if gauge {
                            m.get_gauge().get_value()
                        } else {
                            m.get_counter().get_value()
                        }
                    })
                    .sum()
            };
            match family.name() {
                "spate_messages_consumed_total" => t.consumed = sum(false) as u64,
                "spate_rows_inserted_total" => t.inserted = sum(false) as u64,
                "spate_consumer_lag" => t.lag = sum(true) as i64,
                "spate_lanes_active" => t.lanes_active = sum(true) as i64,
                "spate_lanes_paused" => t.lanes_paused = sum(true) as i64,
                "spate_decode_errors_total" => t.decode_errors = sum(false) as u64,
                "spate_insert_errors_total" => t.insert_errors = sum(false) as u64,
                _ => {}
            }
        }
        t
    }

    /// The Prometheus text exposition of every metric.
    #[must_use]
    pub fn encode_text(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_declared_name_is_exported() {
        let m = Metrics::new();
        m.messages_consumed.with_label_values(&["t", "0"]).inc();
        m.rows_inserted.with_label_values(&["db.t", "0"]).inc();
        m.insert_errors.with_label_values(&["db.t", "0", "x"]).inc();
        m.insert_retries.with_label_values(&["db.t", "0"]).inc();
        m.insert_duration
            .with_label_values(&["db.t", "0"])
            .observe(0.1);
        m.delivery_latency
            .with_label_values(&["main", "db.t"])
            .observe(0.1);
        m.bytes_consumed.with_label_values(&["t", "0"]).inc();
        m.bytes_inserted.with_label_values(&["db.t", "0"]).inc();
        m.committed_offset.with_label_values(&["t", "0"]).set(1);
        m.consumer_lag.with_label_values(&["t", "0"]).set(0);
        m.queue_bytes.with_label_values(&["0"]).set(0);
        m.rebalances.with_label_values(&["assign"]).inc();
        m.commits.with_label_values(&["ok"]).inc();
        m.high_watermark.with_label_values(&["t", "0"]).set(5);
        m.insert_batch_rows
            .with_label_values(&["db.t", "1"])
            .observe(10.0);
        m.insert_batch_bytes
            .with_label_values(&["db.t", "1"])
            .observe(1000.0);
        m.uptime.set(1);
        m.messages_skipped
            .with_label_values(&["t", "tombstone"])
            .inc();
        m.tables_created.with_label_values(&["db.t"]).inc();
        m.lanes_paused.set(2);
        m.consumer_lag.with_label_values(&["t", "1"]).set(7);
        let t = m.totals();
        assert_eq!(
            (t.consumed, t.inserted, t.lag, t.lanes_paused),
            (1, 1, 7, 2)
        );
        let text = m.encode_text();
        for name in METRIC_NAMES {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
        }
    }
}
