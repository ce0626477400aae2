//! A shard as its insert workers see it: its [`Replica`]s and which one
//! inserts go to first. Built by `SinkPool::prepare`; read by the insert
//! workers, the readiness probe and the schema re-read (tokio tasks), and
//! by the exactly-once preflight.

use std::sync::atomic::AtomicUsize;

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
