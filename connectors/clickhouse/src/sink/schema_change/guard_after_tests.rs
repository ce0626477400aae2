//! [`TypeGuard::after`] against a replica that does not answer its
//! column read (issue 29 point 7: an unanswered check counted as clean).

use super::*;
use crate::client::{ClientError, InsertError};
use crate::sink::insert::target::InsertQuery;
use crate::sink::schema_change::version::{test_version, LiveSchema};
use crate::types::parse_type;
use bytes::Bytes;
use spate_core::checkpoint::AckRange;
use spate_core::metrics::Metrics;
use spate_core::record::{Offset, PartitionId};
use spate_core::sink::{Chunk, RowIndex};
use spate_core::source::LaneId;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

/// A replica whose first `silent` column reads never answer; later ones
/// answer `columns`.
struct Silent {
    silent: u32,
    reads: Arc<AtomicU32>,
    columns: Vec<Column>,
}

impl InsertTarget for Silent {
    async fn insert_bytes(
        &self,
        _query: &InsertQuery,
        _body: Bytes,
        _extra: &[(String, String)],
        _timeout: Duration,
    ) -> Result<(), InsertError> {
        Ok(())
    }

    async fn ping(&self) -> Result<(), ClientError> {
        Ok(())
    }

    fn columns(
        &self,
        _db: &str,
        _table: &str,
    ) -> impl std::future::Future<Output = Result<Vec<Column>, ClientError>> + Send {
        let n = self.reads.fetch_add(1, Ordering::AcqRel);
        let (silent, columns) = (n < self.silent, self.columns.clone());
        async move {
            if silent {
                std::future::pending::<()>().await;
            }
            Ok(columns)
        }
    }
}

/// Everything `after` takes for a RowBinary insert on 18.16 (guarded),
/// the replica's first `silent` column reads unanswered.
struct Setup {
    live: Arc<LiveSchema>,
    metrics: Arc<Metrics>,
    replica: Replica<Silent>,
    prepared: Prepared,
    chunk: Chunk,
    pace: Pace,
    _abandon: watch::Sender<bool>,
}

fn setup(silent: u32) -> Setup {
    let columns = vec![Column::plain("a", parse_type("UInt32").unwrap())];
    let version = test_version(1, columns.clone(), "18.16.1", false);
    let features = ServerFeatures::from_version("18.16.1").unwrap();
    let query = version.query.clone();
    assert_ne!(query.format, "Native", "the guard checks RowBinary inserts");
    let metrics = Arc::new(Metrics::new());
    let live = LiveSchema::new(version, features, false, "db.t".into(), &metrics);
    let (abandon, rx) = watch::channel(false);
    let chunk = Chunk {
        shard: 0,
        rows: 4,
        data: vec![0; 16],
        acks: vec![AckRange {
            lane: LaneId(2),
            seq: 0,
            parts: 1,
            part: 0,
            start: Offset(10),
            end: Offset(13),
            rows: 4,
        }],
        spans: Box::default(),
        ticket: None,
        index: Box::new(RowIndex {
            partitions: vec![Some(PartitionId::new("t", 3))],
            ..RowIndex::default()
        }),
        schema: 1,
        stamps: spate_core::sink::Stamps::default(),
    };
    Setup {
        live,
        metrics,
        replica: Replica {
            url: "http://r0:8123".into(),
            client: Silent {
                silent,
                reads: Arc::default(),
                columns,
            },
        },
        prepared: Prepared {
            bytes: Bytes::new(),
            query,
            for_version: 1,
            keep: None,
        },
        chunk,
        pace: Pace::new(rx, Default::default(), None, ("db.t", "1", 0)),
        _abandon: abandon,
    }
}

async fn after(s: &mut Setup, exactly_once: bool) -> After {
    let ch = crate::metrics::ChMetrics::of(&s.metrics);
    let guard = TypeGuard::of(Some(&s.live), exactly_once, (&ch.schema_races, "db.t")).unwrap();
    (guard.after(&s.chunk, &s.replica, &s.prepared, &mut s.pace)).await
}

/// A check that does not answer is never taken for clean: it is asked
/// again every second until it answers (here after 5 silent reads, and
/// the columns are unchanged: clean), under either mode; a slow replica
/// delays the acknowledgement, it does not fail the pipeline.
#[tokio::test(start_paused = true)]
async fn an_unanswered_check_is_asked_again_until_it_answers() {
    for exactly_once in [false, true] {
        let mut s = setup(5);
        let started = tokio::time::Instant::now();
        assert!(matches!(after(&mut s, exactly_once).await, After::Clean));
        assert_eq!(s.replica.client.reads.load(Ordering::Acquire), 6);
        assert!(
            started.elapsed() >= WAIT_FOR_AGREEMENT * 5,
            "asked again at once: {:?}",
            started.elapsed()
        );
    }
}

/// A check that never answers holds the chunk until the drain deadline,
/// which abandons it (unacknowledged: it replays); it never passes.
#[tokio::test(start_paused = true)]
async fn a_check_that_never_answers_ends_only_at_the_drain_deadline() {
    let mut s = setup(u32::MAX);
    let abandon = s._abandon.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        let _ = abandon.send(true);
    });
    let got = after(&mut s, false).await;
    assert!(
        matches!(got, After::Stop(Attempt::Abandoned)),
        "an unanswered check passed or failed the pipeline"
    );
    assert!(s.replica.client.reads.load(Ordering::Acquire) >= 10);
}
