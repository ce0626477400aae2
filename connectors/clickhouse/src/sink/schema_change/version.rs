//! Tables that change while spate runs: [`LiveSchema`] holds every schema
//! version the sink has used (its columns, encoder factory and insert
//! statement); `super::watch` re-reads the columns of every replica and
//! applies a change.
//!
//! Threads: the watch task (tokio, one per sink) publishes new versions;
//! encoders on the driver threads ([`LiveRowEncoder`]) load the current
//! version number once per row (one atomic load) and rebuild themselves
//! when it moved, and the chain then seals its open chunks, so every
//! chunk carries the one version its rows were encoded for
//! (`Chunk::schema`); insert workers (tokio tasks) look that version up
//! and, for a chunk of an older one, re-encode it for the table as it is
//! now (`super::recode`). A worker whose insert failed with a schema error
//! asks for a re-read at once ([`LiveSchema::refresh_now`]).
//!
//! Rules: every replica that answers must list the same columns; until
//! they agree the old version stays and `/readyz` names the disagreeing
//! replicas. A change spate cannot encode (a column of an unsupported
//! type, a dropped shard key column) also stays unapplied and is reported.

use crate::encode::NativeLayout;
use crate::schema::{Column, ServerFeatures};
use crate::sink::insert::target::InsertQuery;
use crate::sink::start::encoder::{EncoderFactory, WirePlan};
use prometheus::IntCounterVec;
use spate_core::metrics::Metrics;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;
use tokio::sync::{watch as tokio_watch, Notify};

/// How often every replica's columns are re-read.
pub const SCHEMA_REFRESH: Duration = Duration::from_secs(10);

/// How long a worker waits for the re-read it asked for.
const REFRESH_WAIT: Duration = Duration::from_secs(15);

/// One schema the sink encodes for.
#[derive(Debug)]
pub(crate) struct Version {
    pub(crate) id: u64,
    pub(crate) columns: Vec<Column>,
    /// Builds encoders for this version (its wire plan's options).
    pub(crate) factory: EncoderFactory,
    pub(crate) query: Arc<InsertQuery>,
    /// Set: chunks are transposed into Native blocks.
    pub(crate) native: Option<NativeLayout>,
    /// Reads this version's rows whatever the insert format (to re-encode
    /// a chunk of it after a change); `None` for types Native cannot hold.
    pub(crate) rows_layout: Option<NativeLayout>,
    /// The insert columns and their types.
    pub(crate) insert_types: Vec<(String, crate::types::ChType)>,
}

/// Every schema version of one sink, and how to make the next.
pub struct LiveSchema {
    pub(super) current: AtomicU64,
    versions: RwLock<Vec<Arc<Version>>>,
    /// Why the table's current columns are not applied (replicas disagree,
    /// or a change spate cannot encode); for `/readyz`.
    problem: Mutex<Option<String>>,
    /// The problem is a change spate cannot encode (not replicas that
    /// have yet to agree): waiting will not clear it.
    lasting: std::sync::atomic::AtomicBool,
    /// Asks the watch task for an immediate re-read.
    pub(super) poke: Notify,
    /// Completed re-reads.
    pub(super) rounds: tokio_watch::Sender<u64>,
    /// Whether a watch task runs (else [`refresh_now`](Self::refresh_now)
    /// returns at once).
    pub(super) watched: std::sync::atomic::AtomicBool,
    features: ServerFeatures,
    native: bool,
    pub(super) table: String,
    pub(super) changes: IntCounterVec,
    pub(super) watcher: Mutex<Option<tokio::task::AbortHandle>>,
}

impl std::fmt::Debug for LiveSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSchema")
            .field("table", &self.table)
            .field("current", &self.version())
            .finish_non_exhaustive()
    }
}

impl LiveSchema {
    /// Stop the watch task (at drain).
    pub(crate) fn stop(&self) {
        self.watched.store(false, Ordering::Release);
        if let Some(h) = self
            .watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            h.abort();
        }
    }

    /// The first version; `features` and `native` decide every version's
    /// wire plan.
    pub(crate) fn new(
        first: Version,
        features: ServerFeatures,
        native: bool,
        table: String,
        metrics: &Metrics,
    ) -> Arc<LiveSchema> {
        let ch = crate::metrics::ChMetrics::of(metrics);
        let changes = ch.schema_changes;
        // Both series exist from the start, at 0, so `increase()` works.
        changes.with_label_values(&[&table]);
        ch.schema_races.with_label_values(&[&table]);
        Arc::new(LiveSchema {
            current: AtomicU64::new(first.id),
            versions: RwLock::new(vec![Arc::new(first)]),
            problem: Mutex::new(None),
            lasting: std::sync::atomic::AtomicBool::new(false),
            poke: Notify::new(),
            rounds: tokio_watch::channel(0).0,
            watched: std::sync::atomic::AtomicBool::new(false),
            features,
            native,
            table,
            changes,
            watcher: Mutex::new(None),
        })
    }

    /// The version encoders should use now.
    pub(crate) fn current(&self) -> Arc<Version> {
        let id = self.current.load(Ordering::Acquire);
        self.get(id).expect("the current version is kept")
    }

    /// Version `id`, if it is still kept.
    pub(crate) fn get(&self, id: u64) -> Option<Arc<Version>> {
        let versions = self.versions.read().unwrap_or_else(PoisonError::into_inner);
        versions.iter().find(|v| v.id == id).cloned()
    }

    /// The current version number.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    /// Why the table's columns as they are now are not in use, if so.
    pub(crate) fn problem(&self) -> Option<String> {
        self.problem
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The problem, if it is a change spate cannot encode.
    pub(crate) fn lasting_problem(&self) -> Option<String> {
        if self.lasting.load(Ordering::Acquire) {
            self.problem()
        } else {
            None
        }
    }

    pub(super) fn set_problem(&self, p: Option<String>, lasting: bool) {
        *self.problem.lock().unwrap_or_else(PoisonError::into_inner) = p;
        self.lasting.store(lasting, Ordering::Release);
    }

    /// The server's features every version's wire plan is chosen for.
    pub(crate) fn features(&self) -> ServerFeatures {
        self.features
    }

    /// Build the version for `columns` (with the first version's options,
    /// shard key and renames) and make it current.
    pub(super) fn apply(&self, columns: Vec<Column>) -> Result<Arc<Version>, String> {
        let base = self.current();
        let factory = EncoderFactory {
            columns: columns.clone(),
            ..base.factory.clone()
        };
        let next = build_version(
            base.id + 1,
            factory,
            self.features,
            self.native,
            &base.query,
        )
        .map_err(|e| {
            format!(
                "table {}: the new columns cannot be encoded: {e}",
                self.table
            )
        })?;
        let next = Arc::new(next);
        let mut versions = self
            .versions
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        versions.push(next.clone());
        // Keep the last few: chunks of older versions have long been sent.
        let excess = versions.len().saturating_sub(8);
        versions.drain(..excess);
        self.current.store(next.id, Ordering::Release);
        Ok(next)
    }

    /// Ask the watch task to re-read the columns now and wait (bounded)
    /// until it did; `true` if the current version changed meanwhile.
    pub(crate) async fn refresh_now(&self) -> bool {
        let before = self.version();
        if !self.watched.load(Ordering::Acquire) {
            return false;
        }
        let mut rounds = self.rounds.subscribe();
        let seen = *rounds.borrow_and_update();
        self.poke.notify_one();
        let _ = tokio::time::timeout(REFRESH_WAIT, rounds.wait_for(|r| *r > seen)).await;
        self.version() != before
    }
}

/// A version of `db.t` with `columns`, JSON decoding, on a server of
/// `server` (`native`: Native inserts where the server takes them): for
/// the tests of the guard and the recode.
#[cfg(test)]
pub(crate) fn test_version(id: u64, columns: Vec<Column>, server: &str, native: bool) -> Version {
    let factory = EncoderFactory {
        columns,
        options: crate::encode::EncoderOptions::default(),
        shard_key: Vec::new(),
        renames: Vec::new(),
        format: crate::formats::FormatSpec::Json,
        envelope: None,
        truncator: None,
    };
    let template = InsertQuery {
        db: "db".into(),
        table: "t".into(),
        columns: Vec::new(),
        format: "",
        settings: Vec::new(),
    };
    let features = ServerFeatures::from_version(server).expect("a server version");
    build_version(id, factory, features, native, &template).expect("a version")
}

/// A version: its factory's wire plan and the insert statement for it.
pub(crate) fn build_version(
    id: u64,
    factory: EncoderFactory,
    features: ServerFeatures,
    native: bool,
    template: &InsertQuery,
) -> Result<Version, crate::encode::SchemaError> {
    let columns = factory.columns.clone();
    let wire = WirePlan::choose(factory, features, native)?;
    let probe = wire.factory.row_encoder()?;
    let insert_types = (probe.insert_columns().iter())
        .map(|name| {
            let ty = columns
                .iter()
                .find(|c| &c.name == name)
                .map(|c| c.ty.clone());
            (name.clone(), ty.unwrap_or(crate::types::ChType::Nothing))
        })
        .collect();
    Ok(Version {
        id,
        columns,
        rows_layout: probe.native_layout(),
        query: Arc::new(InsertQuery {
            columns: wire.columns,
            format: wire.format,
            ..template.clone()
        }),
        native: wire.native,
        factory: wire.factory,
        insert_types,
    })
}
