//! The state a sink's insert workers share: [`PoolShared`] (one per sink:
//! the insert statement, the table's schema versions, metrics, drain
//! counters, the failed flag). Built by `SinkPool::prepare`; read and
//! updated by the insert workers and the readiness probe (tokio tasks)
//! and by the drain hook.

use super::insert::events::Site;
use super::insert::target::InsertQuery;
use super::schema_change::LiveSchema;
use crate::encode::NativeLayout;
use crate::metrics::ChMetrics;
use spate_core::metrics::Metrics;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// State the workers share with the drain hook.
pub(crate) struct PoolShared {
    /// `db.table`, for logs and metric labels.
    pub(crate) table: String,
    /// What every insert sends.
    pub(crate) query: InsertQuery,
    /// Set: batches are transposed into Native blocks, sent as
    /// `query.format`.
    pub(crate) native: Option<NativeLayout>,
    /// The table's schema versions, when the sink follows its changes
    /// (set once by `SinkPool::prepare`).
    pub(crate) live: std::sync::OnceLock<Arc<LiveSchema>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) ch_metrics: ChMetrics,
    /// `spate_delivery_latency_seconds{pipeline,table}` of this sink,
    /// resolved once.
    pub(crate) latency: prometheus::Histogram,
    pub(crate) failed: AtomicBool,
    pub(crate) inserted_chunks: AtomicU64,
    pub(crate) inserted_rows: AtomicU64,
    pub(crate) abandoned_chunks: AtomicU64,
    pub(crate) abandoned_rows: AtomicU64,
}

impl PoolShared {
    pub(crate) fn new(
        pipeline: &str,
        table: String,
        query: InsertQuery,
        native: Option<NativeLayout>,
        metrics: Arc<Metrics>,
    ) -> Self {
        PoolShared {
            latency: (metrics.delivery_latency).with_label_values(&[pipeline, &table]),
            table,
            query,
            native,
            live: std::sync::OnceLock::new(),
            ch_metrics: ChMetrics::of(&metrics),
            metrics,
            failed: AtomicBool::new(false),
            inserted_chunks: AtomicU64::new(0),
            inserted_rows: AtomicU64::new(0),
            abandoned_chunks: AtomicU64::new(0),
            abandoned_rows: AtomicU64::new(0),
        }
    }

    /// The labels and registries of events on `shard`.
    pub(crate) fn site<'a>(&'a self, shard: &'a str) -> Site<'a> {
        Site {
            metrics: &self.metrics,
            ch: &self.ch_metrics,
            table: &self.table,
            shard,
        }
    }
}
