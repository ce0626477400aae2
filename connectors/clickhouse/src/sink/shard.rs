//! The state insert workers share: [`PoolShared`] (one per sink: the
//! insert statement, metrics, drain counters, the failed flag) and
//! [`Shard`]s with their [`Replica`]s (which one inserts go to first).
//! Built by `SinkPool::prepare`; read and updated by the insert workers
//! and the readiness probe (tokio tasks) and by the drain hook.

use super::events::Site;
use super::target::InsertQuery;
use crate::encode::NativeLayout;
use crate::metrics::ChMetrics;
use spate_core::metrics::Metrics;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
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
    pub(crate) live: std::sync::OnceLock<Arc<super::live::LiveSchema>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) ch_metrics: ChMetrics,
    pub(crate) failed: AtomicBool,
    pub(crate) inserted_chunks: AtomicU64,
    pub(crate) inserted_rows: AtomicU64,
    pub(crate) abandoned_chunks: AtomicU64,
    pub(crate) abandoned_rows: AtomicU64,
}

impl PoolShared {
    pub(crate) fn new(
        table: String,
        query: InsertQuery,
        native: Option<NativeLayout>,
        metrics: Arc<Metrics>,
    ) -> Self {
        PoolShared {
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

/// One replica of a shard.
pub(crate) struct Replica<C> {
    pub(crate) url: String,
    pub(crate) client: C,
}

/// One shard: its replicas and which one inserts go to first.
pub(crate) struct Shard<C> {
    /// 0-based queue index.
    pub(crate) index: usize,
    /// 1-based, like `shard_num` in `system.clusters`: metric label.
    pub(crate) label: String,
    pub(crate) replicas: Vec<Replica<C>>,
    /// The replica the last successful insert went to; workers start there.
    pub(crate) preferred: AtomicUsize,
}

impl<C> Shard<C> {
    /// Shard `index` (0-based) with these replicas, the first preferred.
    pub(crate) fn new(index: usize, replicas: Vec<Replica<C>>) -> Self {
        Shard {
            index,
            label: (index + 1).to_string(),
            replicas,
            preferred: AtomicUsize::new(0),
        }
    }
}
