//! In-process tests of the insert worker: a scripted [`InsertTarget`]
//! that queues answers per replica and records every attempt, on tokio's
//! paused clock (sleeps advance virtual time instantly, so backoff delays
//! are measured exactly).

use super::*;
use crate::classify::ErrorClass;
use crate::client::ClientError;
use crate::client::InsertError;
use crate::sink::insert::outcome::{lock, Prepared};
use crate::sink::insert::pace::Pace;
use crate::sink::insert::retry::RetryPolicy;
use crate::sink::insert::settings::{dedup_token, DEDUP_TOKEN};
use crate::sink::insert::shard::Replica;
use crate::sink::insert::target::InsertQuery;
use attempt::CLIENT_GRACE;
use bytes::Bytes;
use spate_core::checkpoint::AckRange;
use spate_core::metrics::Metrics;
use spate_core::policy::{ErrorPolicy, OnError, Rejections};
use spate_core::record::Offset;
use spate_core::sink::{ack_channel, AckReceiver, ChunkSpan, ShardQueues};
use spate_core::source::LaneId;
use std::collections::VecDeque;
use std::sync::Mutex as StdMutex;
use std::time::Duration;
use stream::PER_BATCH_AFTER_REFUSAL;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// One scripted answer of a replica.
#[derive(Clone)]
enum Answer {
    Ok,
    /// Confirm only once the test notifies.
    OkAfter(Arc<Notify>),
    Err(InsertError),
    /// Never answer.
    Hang,
}

/// An attempt as the fake saw it.
#[derive(Clone, Debug)]
struct Attempt {
    url: String,
    body: Bytes,
    at: Instant,
    extra: Vec<(String, String)>,
    timeout: Duration,
}

#[derive(Clone)]
struct Fake {
    url: String,
    answers: Arc<StdMutex<VecDeque<Answer>>>,
    log: Arc<StdMutex<Vec<Attempt>>>,
    /// A body holding any of these bytes is rejected with [`THROW_IF`]
    /// (after the script is used up): the server blaming rows.
    poison: Arc<Vec<u8>>,
}

impl InsertTarget for Fake {
    fn insert_bytes(
        &self,
        _query: &InsertQuery,
        body: Bytes,
        extra: &[(String, String)],
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<(), InsertError>> + Send {
        let poisoned = body.iter().any(|b| self.poison.contains(b));
        self.log.lock().unwrap().push(Attempt {
            url: self.url.clone(),
            body,
            at: Instant::now(),
            extra: extra.to_vec(),
            timeout,
        });
        // An empty script confirms, unless the body is poisoned.
        let answer = self.answers.lock().unwrap().pop_front().unwrap_or_else(|| {
            if poisoned {
                server(THROW_IF)
            } else {
                Answer::Ok
            }
        });
        async move {
            match answer {
                Answer::Ok => Ok(()),
                Answer::OkAfter(gate) => {
                    gate.notified().await;
                    Ok(())
                }
                Answer::Err(e) => Err(e),
                Answer::Hang => std::future::pending().await,
            }
        }
    }

    async fn ping(&self) -> Result<(), ClientError> {
        Ok(())
    }

    async fn columns(
        &self,
        _db: &str,
        _table: &str,
    ) -> Result<Vec<crate::schema::Column>, ClientError> {
        Ok(Vec::new())
    }
}

/// A server answer with a code and ClickHouse's own text.
fn server(body: &str) -> Answer {
    let code = crate::classify::parse_code(body);
    Answer::Err(InsertError {
        class: crate::classify::classify(Some(500), body),
        code,
        message: body.to_owned(),
    })
}

/// No HTTP answer at all (connection refused, reset, timeout).
fn network() -> Answer {
    Answer::Err(InsertError {
        class: ErrorClass::Retriable,
        code: None,
        message: "network error: connection refused".into(),
    })
}

const TOO_MANY_QUERIES: &str = "Code: 202. DB::Exception: Too many simultaneous queries. Maximum: 100. (TOO_MANY_SIMULTANEOUS_QUERIES)";
const READ_ONLY_TABLE: &str = "Code: 242. DB::Exception: Table is in readonly mode (replica path: /clickhouse/tables/01/events/replicas/ch-a). (TABLE_IS_READ_ONLY)";
const THROW_IF: &str = "Code: 395. DB::Exception: Value passed to 'throwIf' function is non-zero: while executing 'FUNCTION throwIf(greater(x, 3) :: 2) -> throwIf(greater(x, 3)) UInt8 : 1'. (FUNCTION_THROW_IF_VALUE_IS_NON_ZERO)";
const READONLY_USER: &str =
    "Code: 164. DB::Exception: writer: Cannot execute query in readonly mode. (READONLY)";

fn no_jitter(initial_ms: u64, max_ms: u64) -> RetryPolicy {
    RetryPolicy {
        initial: Duration::from_millis(initial_ms),
        max: Duration::from_millis(max_ms),
        factor: 2.0,
        jitter: 0.0,
        ..RetryPolicy::default()
    }
}

#[derive(Default)]
struct Extras {
    rejections: Option<Arc<Rejections>>,
    poison: Vec<u8>,
    stalls: Option<Arc<spate_core::health::TransientStalls>>,
    /// The sink's insert settings.
    settings: Vec<(String, String)>,
    /// Stream batches into long requests.
    stream: Option<StreamBounds>,
}

struct Harness {
    queues: Option<ShardQueues>,
    acks: AckReceiver,
    abandon: watch::Sender<bool>,
    shard: Arc<Shard<Fake>>,
    shared: Arc<PoolShared>,
    log: Arc<StdMutex<Vec<Attempt>>>,
    worker: tokio::task::JoinHandle<()>,
    /// The lane of the chunks `push` queues: a new one after a rewind, as
    /// the controller reads the partition again under a new lane.
    lane: std::cell::Cell<u64>,
}

impl Harness {
    /// One shard whose replicas answer from `scripts`, one worker.
    fn start(scripts: Vec<Vec<Answer>>, retry: RetryPolicy) -> Harness {
        Self::start_with(scripts, retry, Extras::default())
    }

    /// [`start`](Self::start) with an error policy, poisoned bytes, a
    /// stall table or insert settings.
    fn start_with(scripts: Vec<Vec<Answer>>, retry: RetryPolicy, extras: Extras) -> Harness {
        Self::start_running(scripts, retry, extras, |w| tokio::spawn(w.run()))
    }

    /// [`start_with`](Self::start_with), the worker handed to `spawn`
    /// instead of running its queue loop (to drive one of its stages).
    fn start_running(
        scripts: Vec<Vec<Answer>>,
        retry: RetryPolicy,
        extras: Extras,
        spawn: impl FnOnce(Worker<Fake>) -> tokio::task::JoinHandle<()>,
    ) -> Harness {
        Self::start_logged(scripts, retry, extras, None, spawn)
    }

    /// [`start_running`](Self::start_running) with an exactly-once intent
    /// log (`intents`).
    fn start_logged<L: Intents>(
        scripts: Vec<Vec<Answer>>,
        retry: RetryPolicy,
        extras: Extras,
        intents: Option<Arc<L>>,
        spawn: impl FnOnce(Worker<Fake, L>) -> tokio::task::JoinHandle<()>,
    ) -> Harness {
        let Extras {
            rejections,
            poison,
            stalls,
            settings,
            stream,
        } = extras;
        let poison = Arc::new(poison);
        let log = Arc::new(StdMutex::new(Vec::new()));
        let replicas = (scripts.into_iter().enumerate())
            .map(|(i, script)| {
                let url = format!("http://r{i}:8123");
                Replica {
                    url: url.clone(),
                    client: Fake {
                        url,
                        answers: Arc::new(StdMutex::new(script.into())),
                        log: log.clone(),
                        poison: poison.clone(),
                    },
                }
            })
            .collect();
        let shard = Arc::new(Shard::new(0, replicas));
        let query = InsertQuery {
            db: "db".into(),
            table: "t".into(),
            columns: vec!["a".into()],
            format: "RowBinary",
            settings,
        };
        let metrics = Arc::new(Metrics::new());
        let shared = Arc::new(PoolShared::new("main", "db.t".into(), query, None, metrics));
        let (queues, mut receivers) = ShardQueues::new(1, 1 << 30, 1 << 29);
        let (ack_tx, acks) = ack_channel();
        let (abandon, abandon_rx) = watch::channel(false);
        let worker = Worker {
            shard: shard.clone(),
            index: 0,
            rx: Arc::new(Mutex::new(receivers.remove(0))),
            acks: ack_tx,
            shared: shared.clone(),
            intents,
            rejections,
            depths: queues.depth_view(),
            scratch: Arc::default(),
            pace: Pace::new(abandon_rx, retry, stalls, ("db.t", "1", 0)),
            stream,
        };
        Harness {
            queues: Some(queues),
            acks,
            abandon,
            shard,
            shared,
            log,
            worker: spawn(worker),
            lane: std::cell::Cell::new(1),
        }
    }

    /// The partition is read again under a new lane: what `push` queues
    /// from here on is of it.
    fn read_again(&self) {
        self.lane.set(self.lane.get() + 1);
    }

    /// Queue a chunk of `rows` rows from segment `seq`; returns its bytes.
    fn push(&self, seq: u64, rows: u64) -> Vec<u8> {
        self.push_spans(seq, rows, Vec::new())
    }

    /// [`push`](Self::push) a chunk with these spans.
    fn push_spans(&self, seq: u64, rows: u64, spans: Vec<ChunkSpan>) -> Vec<u8> {
        let data: Vec<u8> = (0..rows).map(|i| (seq * 31 + i) as u8).collect();
        let ack = AckRange {
            lane: LaneId(self.lane.get()),
            seq,
            parts: 1,
            part: 0,
            start: Offset(seq as i64 * 10),
            end: Offset(seq as i64 * 10 + 9),
            rows,
        };
        let chunk = Chunk {
            shard: 0,
            rows,
            data: data.clone(),
            acks: vec![ack],
            spans: spans.into(),
            ticket: None,
            index: Default::default(),
            schema: 0,
            stamps: spate_core::sink::Stamps::default(),
        };
        let pushed = self.queues.as_ref().map(|q| q.push(chunk));
        assert!(matches!(pushed, Some(Ok(()))), "queue closed");
        data
    }

    /// Queue `rows` one-byte rows `0, 1, …` at offsets `100, 101, …` of
    /// partition `t`/0, with their row index.
    fn push_indexed(&self, rows: u8) {
        let data: Vec<u8> = (0..rows).collect();
        let index = Box::new(spate_core::sink::RowIndex {
            rows: (0..rows)
                .map(|i| spate_core::sink::RowOrigin {
                    offset: Offset(100 + i64::from(i)),
                    end: u32::from(i) + 1,
                    range: 0,
                })
                .collect(),
            partitions: vec![Some(spate_core::record::PartitionId::new("t", 0))],
            originals: (0..rows)
                .map(|i| spate_core::sink::Original {
                    key: None,
                    value: Some(vec![b'v', i]),
                    timestamp_ms: Some(1000 + i64::from(i)),
                    headers: Vec::new(),
                })
                .collect(),
        });
        let chunk = Chunk {
            shard: 0,
            rows: u64::from(rows),
            data,
            acks: vec![AckRange {
                lane: LaneId(1),
                seq: 0,
                parts: 1,
                part: 0,
                start: Offset(100),
                end: Offset(100 + i64::from(rows) - 1),
                rows: u64::from(rows),
            }],
            spans: Box::default(),
            ticket: None,
            index,
            schema: 0,
            stamps: spate_core::sink::Stamps::default(),
        };
        let pushed = self.queues.as_ref().map(|q| q.push(chunk));
        assert!(matches!(pushed, Some(Ok(()))), "queue closed");
    }

    /// Close the queue and wait for the worker to finish what it holds.
    async fn finish(&mut self) {
        self.queues = None;
        (&mut self.worker).await.expect("worker panicked");
    }

    fn attempts(&self) -> Vec<Attempt> {
        self.log.lock().unwrap().clone()
    }

    fn events(&self) -> Vec<AckEvent> {
        self.acks.try_iter().collect()
    }

    fn failovers(&self) -> u64 {
        (self.shared.ch_metrics.replica_failovers)
            .with_label_values(&["db.t", "1"])
            .get()
    }
}

fn gaps(attempts: &[Attempt]) -> Vec<Duration> {
    attempts.windows(2).map(|w| w[1].at - w[0].at).collect()
}

fn urls(attempts: &[Attempt]) -> Vec<&str> {
    attempts.iter().map(|a| a.url.as_str()).collect()
}

fn acked_seqs(events: &[AckEvent]) -> Vec<u64> {
    (events.iter())
        .filter_map(|e| match e {
            AckEvent::Acked(r) => Some(r[0].seq),
            _ => None,
        })
        .collect()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn backoff_grows_to_the_cap_and_every_attempt_sends_the_same_bytes() {
    let script = vec![server(TOO_MANY_QUERIES); 6];
    let mut h = Harness::start(vec![script], no_jitter(100, 400));
    let data = h.push(0, 5);
    h.finish().await;
    let attempts = h.attempts();
    assert_eq!(attempts.len(), 7, "six failures, then the success");
    assert_eq!(
        gaps(&attempts),
        [ms(100), ms(200), ms(400), ms(400), ms(400), ms(400)]
    );
    for a in &attempts {
        assert_eq!(
            a.body.as_ref(),
            data.as_slice(),
            "a retry changed the bytes"
        );
    }
    assert_eq!(acked_seqs(&h.events()), [0]);
    let m = &h.shared.metrics;
    assert_eq!(m.insert_retries.with_label_values(&["db.t", "1"]).get(), 6);
    assert_eq!(m.rows_inserted.with_label_values(&["db.t", "1"]).get(), 5);
    assert_eq!(h.failovers(), 0, "a transient error stays on the replica");
}

#[tokio::test(start_paused = true)]
async fn replica_faults_fail_over_in_order_and_the_winner_is_preferred_next() {
    let scripts = vec![
        vec![network()],
        vec![server(READ_ONLY_TABLE)],
        vec![Answer::Ok, Answer::Ok],
    ];
    let mut h = Harness::start(scripts, no_jitter(100, 400));
    let first = h.push(0, 3);
    let second = h.push(1, 4);
    h.finish().await;
    let attempts = h.attempts();
    assert_eq!(
        urls(&attempts),
        [
            "http://r0:8123",
            "http://r1:8123",
            "http://r2:8123",
            "http://r2:8123"
        ]
    );
    assert_eq!(
        gaps(&attempts)[..2],
        [ms(0), ms(0)],
        "failover does not wait"
    );
    assert!(attempts[..3]
        .iter()
        .all(|a| a.body.as_ref() == first.as_slice()));
    assert_eq!(attempts[3].body.as_ref(), second.as_slice());
    assert_eq!(h.shard.preferred.load(Ordering::Relaxed), 2);
    assert_eq!(h.failovers(), 2);
    assert_eq!(acked_seqs(&h.events()), [0, 1]);
    let up = |r: &str| {
        (h.shared.ch_metrics.replica_up)
            .with_label_values(&["db.t", "1", r])
            .get()
    };
    assert_eq!((up("http://r0:8123"), up("http://r2:8123")), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_round_of_failed_replicas_backs_off_before_the_next() {
    let scripts = vec![vec![network(), network()], vec![network(), network()]];
    let mut h = Harness::start(scripts, no_jitter(100, 400));
    h.push(0, 1);
    h.finish().await;
    let attempts = h.attempts();
    assert_eq!(
        urls(&attempts),
        [
            "http://r0:8123",
            "http://r1:8123",
            "http://r0:8123",
            "http://r1:8123",
            "http://r0:8123"
        ]
    );
    assert_eq!(gaps(&attempts), [ms(0), ms(100), ms(0), ms(200)]);
    assert_eq!(acked_seqs(&h.events()), [0]);
}

#[tokio::test(start_paused = true)]
async fn data_and_permission_errors_fail_the_chunk_without_failover_or_retry() {
    for body in [THROW_IF, READONLY_USER] {
        let scripts = vec![vec![server(body)], vec![Answer::Ok]];
        let mut h = Harness::start(scripts, no_jitter(100, 400));
        h.push(0, 2);
        h.push(1, 2);
        h.finish().await;
        assert_eq!(urls(&h.attempts()), ["http://r0:8123"], "{body}");
        let events = h.events();
        assert!(
            matches!(&events[0], AckEvent::Fatal { ranges, .. } if ranges[0].seq == 0),
            "{body}: {events:?}"
        );
        // Nothing past the failure is acknowledged.
        assert!(
            matches!(&events[1], AckEvent::Abandoned(r) if r[0].seq == 1),
            "{body}: {events:?}"
        );
        assert_eq!(events.len(), 2, "{body}");
        assert_eq!(h.failovers(), 0, "{body}");
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_is_acknowledged_before_the_server_confirms() {
    let gate = Arc::new(Notify::new());
    let script = vec![server(TOO_MANY_QUERIES), Answer::OkAfter(gate.clone())];
    let mut h = Harness::start(vec![script], no_jitter(100, 400));
    h.push(0, 2);
    // Long past the backoff: the second attempt is in flight, unanswered.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(h.attempts().len(), 2);
    assert!(h.events().is_empty(), "acknowledged before the 200");
    gate.notify_one();
    h.finish().await;
    assert_eq!(acked_seqs(&h.events()), [0]);
}

#[tokio::test(start_paused = true)]
async fn the_drain_deadline_abandons_what_the_worker_holds_and_what_is_queued() {
    let script = vec![server(TOO_MANY_QUERIES); 1000];
    let mut h = Harness::start(vec![script], no_jitter(100, 1_000));
    h.push(0, 2);
    h.push(1, 3);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        h.events().is_empty(),
        "a retried chunk is neither acked nor dropped"
    );
    let tries = h.attempts().len();
    assert!(tries > 10, "still retrying: {tries}");
    // The deadline passes while the queue is still open.
    h.abandon.send(true).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(1), &mut h.worker).await;
    assert!(done.is_ok(), "the worker did not stop at the deadline");
    let events: Vec<AckEvent> = h.acks.try_iter().collect();
    let abandoned: Vec<u64> = (events.iter())
        .filter_map(|e| match e {
            AckEvent::Abandoned(r) => Some(r[0].seq),
            _ => None,
        })
        .collect();
    assert_eq!(abandoned, [0, 1], "{events:?}");
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(h.shared.abandoned_rows.load(Ordering::Acquire), 5);
    assert_eq!(h.attempts().len(), tries, "no attempt after the deadline");
}

#[tokio::test(start_paused = true)]
async fn a_hanging_insert_is_abandoned_at_the_deadline() {
    let mut h = Harness::start(vec![vec![Answer::Hang]], no_jitter(100, 400));
    h.push(0, 2);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(h.events().is_empty());
    h.abandon.send(true).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(1), &mut h.worker).await;
    assert!(done.is_ok(), "the worker did not stop at the deadline");
    let events: Vec<AckEvent> = h.acks.try_iter().collect();
    assert!(
        matches!(&events[..], [AckEvent::Abandoned(r)] if r[0].seq == 0),
        "{events:?}"
    );
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A server that never answers in time: each attempt times out after its
/// own timeout, doubled per timed-out attempt up to the cap, and every
/// attempt sends the same bytes and the same deduplication token (so the
/// attempts that land on the server after all are dropped there).
#[tokio::test(start_paused = true)]
async fn timed_out_attempts_grow_their_timeout_and_keep_the_token() {
    let retry = RetryPolicy {
        insert_timeout: secs(1),
        max_insert_timeout: secs(4),
        ..no_jitter(100, 100)
    };
    let settings = crate::sink::insert::settings::insert_settings(
        crate::schema::ServerFeatures::from_version("26.9.1.1").unwrap(),
        crate::sink::insert::settings::Delivery::AtLeastOnce,
    );
    let script = vec![
        Answer::Hang,
        Answer::Hang,
        Answer::Hang,
        Answer::Hang,
        Answer::Ok,
    ];
    let mut h = Harness::start_with(
        vec![script],
        retry,
        Extras {
            settings,
            ..Extras::default()
        },
    );
    let spans = vec![ChunkSpan {
        partition: spate_core::record::PartitionId::new("t", 2),
        first: Offset(0),
        last: Offset(4),
        rows: 5,
        epoch: None,
    }];
    let token = dedup_token(0, &spans).unwrap();
    let data = h.push_spans(0, 5, spans);
    h.finish().await;
    let attempts = h.attempts();
    assert_eq!(attempts.len(), 5, "four timeouts, then the success");
    let timeouts: Vec<Duration> = attempts.iter().map(|a| a.timeout - CLIENT_GRACE).collect();
    assert_eq!(timeouts, [secs(1), secs(2), secs(4), secs(4), secs(4)]);
    assert_eq!(
        gaps(&attempts),
        [ms(1100), ms(2100), ms(4100), ms(4100)],
        "each attempt is given up at its own timeout"
    );
    for a in &attempts {
        assert_eq!(a.body.as_ref(), data.as_slice());
        assert_eq!(a.extra, [(DEDUP_TOKEN.to_string(), token.clone())]);
    }
    assert_eq!(acked_seqs(&h.events()), [0]);
}

/// No token to a server without the setting, nor for a chunk whose
/// messages are unknown.
#[tokio::test(start_paused = true)]
async fn no_token_without_server_support_or_spans() {
    let old = crate::sink::insert::settings::insert_settings(
        crate::schema::ServerFeatures::from_version("21.11.1.1").unwrap(),
        crate::sink::insert::settings::Delivery::AtLeastOnce,
    );
    let new = crate::sink::insert::settings::insert_settings(
        crate::schema::ServerFeatures::from_version("26.9.1.1").unwrap(),
        crate::sink::insert::settings::Delivery::AtLeastOnce,
    );
    let spans = vec![ChunkSpan {
        partition: spate_core::record::PartitionId::new("t", 0),
        first: Offset(0),
        last: Offset(1),
        rows: 2,
        epoch: None,
    }];
    let mut h = Harness::start_with(
        vec![vec![]],
        no_jitter(100, 100),
        Extras {
            settings: old,
            ..Extras::default()
        },
    );
    h.push_spans(0, 2, spans);
    h.finish().await;
    let mut g = Harness::start_with(
        vec![vec![]],
        no_jitter(100, 100),
        Extras {
            settings: new,
            ..Extras::default()
        },
    );
    g.push(0, 2);
    g.finish().await;
    for a in h.attempts().iter().chain(g.attempts().iter()) {
        assert!(a.extra.is_empty(), "{:?}", a.extra);
    }
}
fn skip_policy(metrics: &Metrics) -> Arc<Rejections> {
    let policy = ErrorPolicy {
        on_error: OnError::Skip,
        ..ErrorPolicy::default()
    };
    Rejections::new(policy, metrics, spate_core::clock::system())
}

/// Rows the server rejects are isolated by bisection: each other row is
/// inserted exactly once, the chunk is acknowledged whole under `skip`,
/// and each isolated row is counted with its code.
#[tokio::test(start_paused = true)]
async fn a_rejected_batch_is_bisected_and_only_the_bad_rows_are_skipped() {
    let metrics = Metrics::new();
    let policy = skip_policy(&metrics);
    let extras = Extras {
        rejections: Some(policy),
        poison: vec![3, 7],
        ..Extras::default()
    };
    let mut h = Harness::start_with(vec![vec![]], no_jitter(100, 400), extras);
    h.push_indexed(10);
    h.finish().await;
    let attempts = h.attempts();
    let mut inserted = vec![0; 10];
    for a in &attempts {
        if !a.body.iter().any(|b| [3, 7].contains(b)) {
            a.body.iter().for_each(|&b| inserted[usize::from(b)] += 1);
        }
    }
    assert_eq!(inserted, [1, 1, 1, 0, 1, 1, 1, 0, 1, 1], "{attempts:?}");
    assert!(
        attempts.len() <= 1 + 2 * 2 * 4,
        "{} inserts",
        attempts.len()
    );
    assert_eq!(acked_seqs(&h.events()), [0]);
    let rejected = metrics.encode_text();
    assert!(
        rejected.contains(
            "spate_messages_rejected_total{reason=\"code_395\",stage=\"insert\",topic=\"t\"} 2"
        ),
        "{rejected}"
    );
    let m = &h.shared.metrics;
    assert_eq!(m.rows_inserted.with_label_values(&["db.t", "1"]).get(), 8);
}

/// Without a policy (`fail`), the first isolated row fails the pipeline,
/// named by topic, partition and offset with the server's message.
#[tokio::test(start_paused = true)]
async fn under_fail_the_isolated_row_is_named() {
    let extras = Extras {
        poison: vec![6],
        ..Extras::default()
    };
    let mut h = Harness::start_with(vec![vec![]], no_jitter(100, 400), extras);
    h.push_indexed(10);
    h.finish().await;
    let events = h.events();
    let [AckEvent::Fatal { error, ranges }] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert_eq!(ranges[0].seq, 0);
    for needle in ["topic t partition 0 offset 106", "code 395", "throwIf"] {
        assert!(error.reason.contains(needle), "{needle}: {}", error.reason);
    }
}

/// A config error is not bisected: one attempt, and the error names the
/// chunk's partitions and offset ranges.
#[tokio::test(start_paused = true)]
async fn a_config_error_names_the_offset_range_without_bisecting() {
    let mut h = Harness::start(vec![vec![server(READONLY_USER)]], no_jitter(100, 400));
    h.push_indexed(10);
    h.finish().await;
    assert_eq!(h.attempts().len(), 1);
    let events = h.events();
    let [AckEvent::Fatal { error, .. }] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert!(
        error
            .reason
            .contains("topic t partition 0 offsets 100..=109")
            && error.reason.contains("code 164"),
        "{}",
        error.reason
    );
}

/// While a transient error is retried the worker is in the stall table
/// with the last error; once the insert succeeds it is gone.
#[tokio::test(start_paused = true)]
async fn a_retried_transient_error_is_reported_stuck_until_it_clears() {
    let clock = spate_core::clock::ManualClock::new();
    let stalls = spate_core::health::TransientStalls::new(clock.clone());
    let gate = Arc::new(Notify::new());
    let script = vec![
        server(TOO_MANY_QUERIES),
        server(TOO_MANY_QUERIES),
        Answer::OkAfter(gate.clone()),
    ];
    let extras = Extras {
        stalls: Some(stalls.clone()),
        ..Extras::default()
    };
    let mut h = Harness::start_with(vec![script], no_jitter(100, 400), extras);
    h.push(0, 3);
    // Two failures and their backoffs pass; the third attempt hangs.
    tokio::time::sleep(ms(1000)).await;
    clock.advance(Duration::from_secs(61));
    let stuck = stalls.stuck(Duration::from_secs(60));
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    assert!(
        stuck[0].starts_with("db.t shard 1 worker 0: a transient error has not cleared for 61s")
            && stuck[0].contains("Too many simultaneous queries"),
        "{stuck:?}"
    );
    gate.notify_one();
    h.finish().await;
    assert!(
        stalls.stuck(Duration::ZERO).is_empty(),
        "cleared on success"
    );
    assert_eq!(acked_seqs(&h.events()), [0]);
}

/// The exactly-once steps before a send (recording the intent, reading
/// the fence) retry while ClickHouse does not answer; the wait is reported
/// in the stall table like an insert's, so `/readyz` does not stay 200
/// while every block of the sink waits (issue 29 point 2).
#[tokio::test(start_paused = true)]
async fn a_retried_intent_is_reported_stuck_until_it_clears() {
    let clock = spate_core::clock::ManualClock::new();
    let stalls = spate_core::health::TransientStalls::new(clock.clone());
    let gate = Arc::new(Notify::new());
    let extras = Extras {
        stalls: Some(stalls.clone()),
        ..Extras::default()
    };
    let (answered, release) = (
        Arc::new(std::sync::atomic::AtomicBool::new(false)),
        gate.clone(),
    );
    let done = answered.clone();
    let mut h = Harness::start_running(vec![vec![]], no_jitter(100, 400), extras, move |mut w| {
        tokio::spawn(async move {
            let mut calls = 0;
            let got = w
                .pace
                .retrying(
                    "recording an exactly-once intent",
                    || {
                        calls += 1;
                        let (k, gate) = (calls, release.clone());
                        async move {
                            if k <= 2 {
                                Err("Code: 242. Table is in readonly mode")
                            } else {
                                gate.notified().await;
                                Ok(())
                            }
                        }
                    },
                    |_| true,
                )
                .await;
            assert!(got.is_ok());
            done.store(true, Ordering::Release);
        })
    });
    tokio::time::sleep(ms(1000)).await;
    clock.advance(Duration::from_secs(61));
    let stuck = stalls.stuck(Duration::from_secs(60));
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    assert!(
        stuck[0].starts_with("db.t shard 1 worker 0: a transient error has not cleared for 61s")
            && stuck[0].contains("recording an exactly-once intent")
            && stuck[0].contains("readonly"),
        "{stuck:?}"
    );
    gate.notify_one();
    (&mut h.worker).await.expect("the stage panicked");
    assert!(answered.load(Ordering::Acquire));
    assert!(
        stalls.stuck(Duration::ZERO).is_empty(),
        "cleared once it answered"
    );
}

#[derive(Default)]
struct Letters(StdMutex<Vec<spate_core::policy::DeadLetter>>);

impl spate_core::policy::DeadLetterSink for Letters {
    fn store(
        &self,
        letter: &spate_core::policy::DeadLetter,
    ) -> Result<(), spate_core::policy::StoreError> {
        self.0.lock().unwrap().push(letter.clone());
        Ok(())
    }
    fn describe(&self) -> String {
        "memory".into()
    }
}

/// Under dead-letter, each isolated row is stored as a letter of its
/// original message (stage insert) before the chunk is acknowledged.
#[tokio::test(start_paused = true)]
async fn isolated_rows_become_dead_letters_of_their_messages() {
    let metrics = Metrics::new();
    let letters = Arc::new(Letters::default());
    let policy = ErrorPolicy {
        on_error: OnError::DeadLetter,
        ..ErrorPolicy::default()
    };
    let rejections = Rejections::with_dead_letters(
        policy,
        &metrics,
        spate_core::clock::system(),
        Some(letters.clone()),
    );
    let extras = Extras {
        rejections: Some(rejections),
        poison: vec![4],
        ..Extras::default()
    };
    let mut h = Harness::start_with(vec![vec![]], no_jitter(100, 400), extras);
    h.push_indexed(8);
    h.finish().await;
    assert_eq!(acked_seqs(&h.events()), [0]);
    let stored = letters.0.lock().unwrap();
    assert_eq!(stored.len(), 1);
    let l = &stored[0];
    assert_eq!((l.topic.as_str(), l.partition, l.offset), ("t", 0, 104));
    assert_eq!(
        (l.value.as_deref(), l.timestamp_ms),
        (Some(&[b'v', 4][..]), Some(1004))
    );
    assert_eq!(l.stage, spate_core::policy::Stage::Insert);
    assert!(l.error.contains("throwIf"), "{l:?}");
}

#[tokio::test(start_paused = true)]
async fn an_inserted_chunks_buffers_go_back_to_its_shard_after_the_ack() {
    let mut h = Harness::start(vec![vec![Answer::Ok, Answer::Ok]], no_jitter(100, 400));
    let view = h.queues.as_ref().unwrap().depth_view();
    h.push(0, 300 << 10);
    h.push(1, 3); // too small to keep
    h.finish().await;
    assert!(matches!(
        &h.events()[..],
        [AckEvent::Acked(_), AckEvent::Acked(_)]
    ));
    assert_eq!(
        view.spare_bytes(0),
        300 << 10,
        "the large chunk's buffer is kept"
    );
    assert_eq!(view.bytes(), vec![0], "and is not in the depth");
}

#[test]
fn a_sent_body_goes_back_to_the_scratch_unless_still_shared() {
    let scratch = Arc::new(std::sync::Mutex::new(NativeScratch::default()));
    let query = Arc::new(InsertQuery {
        db: "db".into(),
        table: "t".into(),
        columns: vec!["a".into()],
        format: "Native",
        settings: Vec::new(),
    });
    let prepared = |body: Vec<u8>, room: usize| Prepared {
        bytes: Bytes::from(body),
        query: query.clone(),
        for_version: 0,
        keep: Some((scratch.clone(), room)),
    };
    let mut body = Vec::with_capacity(1 << 20);
    body.extend_from_slice(&[1; 1000]);
    let p = prepared(body, 1 << 30);
    let slice = p.bytes.slice(0..10);
    drop(p);
    assert_eq!(lock(&scratch).bytes(), 0, "a slice of it is still alive");
    drop(slice);
    let mut body = Vec::with_capacity(1 << 20);
    body.extend_from_slice(&[1; 1000]);
    drop(prepared(body, 1 << 30));
    assert_eq!(lock(&scratch).bytes(), 1 << 20, "kept whole");
    let mut body = Vec::with_capacity(2 << 20);
    body.push(1);
    drop(prepared(body, 1 << 20));
    assert_eq!(lock(&scratch).bytes(), 0, "over the room: freed");
}

#[test]
fn copies_within_the_workers_room_are_not_charged_to_the_depth() {
    let (queues, _rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
    let none = queues.depth_view();
    assert_eq!(
        in_flight_charge(&none, 50),
        Some(IN_FLIGHT_COPIES * 50),
        "no room: all of them"
    );
    let room = queues.with_worker_room(IN_FLIGHT_COPIES * 50).depth_view();
    assert_eq!(in_flight_charge(&room, 50), None, "set aside by the budget");
    assert_eq!(
        in_flight_charge(&room, 51),
        Some(IN_FLIGHT_COPIES * 51),
        "a chunk larger than the budget's batches"
    );
}

#[path = "worker_fence_tests.rs"]
mod fence;

// ---- streamed requests (`super::stream`) ----

fn streaming(max_rows: u64) -> Extras {
    Extras {
        stream: Some(StreamBounds {
            max_age: Duration::from_secs(1),
            max_rows,
            max_bytes: 1 << 20,
            release: false,
        }),
        ..Extras::default()
    }
}

/// The span of a two-row chunk of segment `seq` (offsets as `push` makes
/// them) of partition `t`/0.
fn spans(seq: i64) -> Vec<ChunkSpan> {
    vec![ChunkSpan {
        partition: spate_core::record::PartitionId::new("t", 0),
        first: Offset(seq * 10),
        last: Offset(seq * 10 + 9),
        rows: 2,
        epoch: None,
    }]
}

fn requests(h: &Harness, outcome: &str) -> u64 {
    (h.shared.ch_metrics.insert_requests)
        .with_label_values(&["db.t", "1", outcome])
        .get()
}

fn setting<'a>(a: &'a Attempt, name: &str) -> Option<&'a str> {
    (a.extra.iter())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test(start_paused = true)]
async fn streamed_batches_share_one_request_acknowledged_only_after_its_answer() {
    let gate = Arc::new(Notify::new());
    let script = vec![Answer::OkAfter(gate.clone())];
    let mut h = Harness::start_with(vec![script], no_jitter(100, 400), streaming(1000));
    let mut sent = h.push(0, 3);
    sent.extend(h.push(1, 4));
    sent.extend(h.push(2, 5));
    // Past the request's second: it ended, its answer has not come.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let attempts = h.attempts();
    assert_eq!(attempts.len(), 1, "one request for the three batches");
    assert_eq!(
        attempts[0].body.as_ref(),
        sent.as_slice(),
        "in order, whole"
    );
    assert!(
        h.events().is_empty(),
        "acknowledged before the request's 200"
    );
    // One part per request, whatever a profile says.
    assert_eq!(
        setting(&attempts[0], "min_insert_block_size_rows"),
        Some("1000")
    );
    assert_eq!(
        setting(&attempts[0], "min_insert_block_size_bytes"),
        Some("0")
    );
    gate.notify_one();
    h.finish().await;
    assert_eq!(acked_seqs(&h.events()), [0, 1, 2]);
    assert_eq!(requests(&h, "inserted"), 1);
    let batches = (h.shared.ch_metrics.insert_request_batches).with_label_values(&["db.t", "1"]);
    assert_eq!(batches.get(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_request_ends_before_its_row_bound_and_after_its_age() {
    let mut h = Harness::start_with(vec![vec![]], no_jitter(100, 400), streaming(6));
    h.push(0, 3);
    h.push(1, 3);
    // 3 + 3 reaches the bound: that request ends at once.
    h.push(2, 4);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.attempts().len(), 1, "the full request ended at once");
    assert!(h.attempts()[0].at < Instant::now());
    // 4 + 3 would pass it: the next batch starts a request of its own.
    h.push(3, 3);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rows: Vec<usize> = h.attempts().iter().map(|a| a.body.len()).collect();
    assert_eq!(rows, [6, 4, 3]);
    h.finish().await;
    assert_eq!(acked_seqs(&h.events()), [0, 1, 2, 3]);
    assert_eq!(requests(&h, "inserted"), 3);
}

#[tokio::test(start_paused = true)]
async fn a_failed_request_is_inserted_again_batch_by_batch() {
    let script = vec![server(TOO_MANY_QUERIES)];
    let mut h = Harness::start_with(vec![script], no_jitter(100, 400), streaming(1000));
    let a = h.push(0, 2);
    let b = h.push(1, 3);
    h.finish().await;
    let bodies: Vec<Vec<u8>> = h.attempts().iter().map(|x| x.body.to_vec()).collect();
    assert_eq!(bodies, [[a.clone(), b.clone()].concat(), a, b]);
    assert_eq!(acked_seqs(&h.events()), [0, 1]);
    assert_eq!(requests(&h, "failed"), 1);
    assert_eq!(requests(&h, "inserted"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_request_without_an_answer_is_sent_again_whole_with_its_token() {
    let retry = RetryPolicy {
        insert_timeout: secs(10),
        ..no_jitter(100, 400)
    };
    let extras = Extras {
        settings: vec![("insert_deduplicate".into(), "1".into())],
        ..streaming(1000)
    };
    let mut h = Harness::start_with(vec![vec![Answer::Hang, network()]], retry, extras);
    let mut sent = h.push_spans(0, 2, spans(0));
    sent.extend(h.push_spans(1, 2, spans(1)));
    // Open for its second, then unanswered for less than its timeout.
    tokio::time::sleep(secs(12)).await;
    assert_eq!(h.attempts().len(), 1);
    assert!(h.events().is_empty());
    h.finish().await;
    let attempts = h.attempts();
    // Hung, refused by the network, then answered: the whole request
    // each time, same bytes and token, so a copy that landed is dropped.
    assert_eq!(attempts.len(), 3, "the request, sent again twice");
    for a in &attempts {
        assert_eq!(a.body.as_ref(), sent.as_slice());
        assert_eq!(setting(a, DEDUP_TOKEN), setting(&attempts[0], DEDUP_TOKEN));
        assert!(setting(a, DEDUP_TOKEN).is_some());
    }
    let gave_up = attempts[1].at - attempts[0].at;
    assert!(gave_up >= secs(10) && gave_up <= secs(16), "{gave_up:?}");
    // Each attempt without an answer doubles the next one's timeout.
    let timeouts: Vec<Duration> = attempts.iter().map(|a| a.timeout).collect();
    assert_eq!(timeouts, [secs(10), secs(20), secs(40)]);
    assert_eq!(acked_seqs(&h.events()), [0, 1]);
    assert_eq!(requests(&h, "failed"), 2);
    assert_eq!(requests(&h, "inserted"), 1);
}

#[tokio::test(start_paused = true)]
async fn the_drain_deadline_abandons_an_unanswered_request() {
    let mut h = Harness::start_with(
        vec![vec![Answer::Hang]],
        no_jitter(100, 400),
        streaming(1000),
    );
    h.push(0, 2);
    h.push(1, 3);
    tokio::time::sleep(secs(3)).await;
    h.abandon.send(true).unwrap();
    let done = tokio::time::timeout(secs(1), &mut h.worker).await;
    assert!(done.is_ok(), "the worker did not stop at the deadline");
    let abandoned: Vec<u64> = (h.acks.try_iter())
        .map(|e| match e {
            AckEvent::Abandoned(r) => r[0].seq,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(abandoned, [0, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_request_carries_a_token_of_its_own_where_the_server_takes_one() {
    let extras = Extras {
        settings: vec![("insert_deduplicate".into(), "1".into())],
        ..streaming(1000)
    };
    let mut h = Harness::start_with(vec![vec![]], no_jitter(100, 400), extras);
    h.push_spans(0, 2, spans(0));
    h.push_spans(1, 2, spans(1));
    h.finish().await;
    let attempts = h.attempts();
    assert_eq!(attempts.len(), 1);
    let first = dedup_token(0, &spans(0)).unwrap();
    let token = setting(&attempts[0], DEDUP_TOKEN).expect("a token");
    assert!(token.starts_with(&format!("{first}-request-")), "{token}");
}

#[tokio::test(start_paused = true)]
async fn a_request_opening_with_the_same_batch_as_an_earlier_one_has_a_token_of_its_own() {
    // The first request is written but its answer lost, and it was
    // released: its rows are read again and the next request opens with
    // the same first batch and carries more. The server must not take it
    // for a repeat of the first (it would drop it whole).
    let extras = Extras {
        settings: vec![("insert_deduplicate".into(), "1".into())],
        ..streaming_held(1000, 4)
    };
    let script = vec![network()];
    let mut h = Harness::start_with(vec![script], no_jitter(100, 400), extras);
    h.push_spans(0, 3, spans(0));
    h.push_spans(1, 3, spans(1));
    tokio::time::sleep(secs(2)).await;
    assert_eq!(rewound_seqs(&h.events()), [0, 1]);
    h.read_again();
    let again = h.push_spans(0, 3, spans(0));
    h.push_spans(1, 3, spans(1));
    h.push_spans(2, 3, spans(2));
    h.finish().await;
    let attempts = h.attempts();
    assert!(
        attempts[1].body.starts_with(&again),
        "opens with the same batch"
    );
    let tokens: Vec<_> = attempts.iter().map(|a| setting(a, DEDUP_TOKEN)).collect();
    assert!(tokens[0].is_some() && tokens[0] != tokens[1], "{tokens:?}");
}

#[tokio::test(start_paused = true)]
async fn after_a_released_request_failed_the_next_ones_are_held_until_one_succeeds() {
    // An outage: the released request is read again once; the requests
    // after it keep their batches, end at the byte bound, and are sent
    // again from memory (with a doubled timeout), not read again.
    let retry = RetryPolicy {
        insert_timeout: secs(10),
        ..no_jitter(100, 400)
    };
    let script = vec![network(), network()];
    let mut h = Harness::start_with(vec![script], retry, streaming_held(1000, 4));
    let mut first = h.push(0, 3);
    first.extend(h.push(1, 3));
    tokio::time::sleep(secs(2)).await;
    assert_eq!(rewound_seqs(&h.events()), [0, 1]);
    h.read_again();
    let c = h.push(2, 3);
    let d = h.push(3, 3);
    h.finish().await;
    let attempts = h.attempts();
    let bodies: Vec<Vec<u8>> = attempts.iter().map(|x| x.body.to_vec()).collect();
    assert_eq!(
        bodies,
        [first, c.clone(), c, d],
        "ended at the bound, sent again whole"
    );
    let timeouts: Vec<Duration> = attempts.iter().map(|a| a.timeout).collect();
    assert_eq!(timeouts, [secs(10), secs(20), secs(20), secs(10)]);
    let events = h.events();
    assert!(rewound_seqs(&events).is_empty(), "read again once only");
    assert_eq!(acked_seqs(&events), [2, 3]);
}

/// [`streaming`] with a byte bound of `max_bytes`: past it, a request's
/// batches are released once sent (`--insert-request-release`).
fn streaming_held(max_rows: u64, max_bytes: usize) -> Extras {
    Extras {
        stream: Some(StreamBounds {
            max_age: Duration::from_secs(1),
            max_rows,
            max_bytes,
            release: true,
        }),
        ..Extras::default()
    }
}

/// The sequence numbers of the ranges sent to be read again, in order.
fn rewound_seqs(events: &[AckEvent]) -> Vec<u64> {
    (events.iter())
        .filter_map(|e| match e {
            AckEvent::Rewind(r) => Some(r.iter().map(|r| r.seq).collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_request_past_its_byte_bound_is_read_again_when_its_answer_is_lost() {
    // 4 bytes held: the second 3-byte batch passes it, so both are
    // released once sent; the request's connection then fails.
    let script = vec![network()];
    let mut h = Harness::start_with(vec![script], no_jitter(100, 400), streaming_held(1000, 4));
    let mut first = h.push(0, 3);
    first.extend(h.push(1, 3));
    tokio::time::sleep(secs(2)).await;
    let events = h.events();
    assert_eq!(rewound_seqs(&events), [0, 1], "read again, both");
    assert!(acked_seqs(&events).is_empty());
    // The next batch (read again) goes in a request of its own, which is
    // answered.
    h.read_again();
    let next = h.push(2, 3);
    h.finish().await;
    let bodies: Vec<Vec<u8>> = h.attempts().iter().map(|x| x.body.to_vec()).collect();
    assert_eq!(
        bodies,
        [first, next],
        "the released batches were not sent again"
    );
    assert_eq!(acked_seqs(&h.events()), [2]);
    assert_eq!(requests(&h, "read_again"), 1);
    assert_eq!(requests(&h, "inserted"), 1);
}

#[tokio::test(start_paused = true)]
async fn batches_of_a_lane_being_read_again_are_discarded_not_inserted() {
    // A released request fails; the batch queued behind it is of the same
    // lane, which the partition is read again past: inserting it would
    // land its rows twice. It is discarded and reported as read again;
    // the new lane's batch is inserted.
    let script = vec![network()];
    let mut h = Harness::start_with(vec![script], no_jitter(100, 400), streaming_held(1000, 4));
    let mut first = h.push(0, 3);
    first.extend(h.push(1, 3));
    tokio::time::sleep(secs(2)).await;
    assert_eq!(rewound_seqs(&h.events()), [0, 1]);
    // Sealed by the driver before the controller stopped the old lane.
    h.push(2, 3);
    h.read_again();
    let again = h.push(0, 3);
    h.finish().await;
    let bodies: Vec<Vec<u8>> = h.attempts().iter().map(|x| x.body.to_vec()).collect();
    assert_eq!(
        bodies,
        [first, again],
        "the old lane's queued batch not sent"
    );
    let events = h.events();
    assert_eq!(rewound_seqs(&events), [2], "discarded, to be read again");
    assert_eq!(acked_seqs(&events), [0]);
}

#[tokio::test(start_paused = true)]
async fn a_request_within_its_byte_bound_is_still_sent_again_whole() {
    // The same failure with 6 bytes held: nothing was released.
    let script = vec![network()];
    let mut h = Harness::start_with(vec![script], no_jitter(100, 400), streaming_held(1000, 6));
    let mut sent = h.push(0, 3);
    sent.extend(h.push(1, 3));
    h.finish().await;
    let bodies: Vec<Vec<u8>> = h.attempts().iter().map(|x| x.body.to_vec()).collect();
    assert_eq!(bodies, [sent.clone(), sent]);
    assert_eq!(acked_seqs(&h.events()), [0, 1]);
    assert_eq!(requests(&h, "read_again"), 0);
}

#[tokio::test(start_paused = true)]
async fn after_a_refused_request_is_read_again_the_shard_inserts_batch_by_batch() {
    let script = vec![server(THROW_IF)];
    let mut h = Harness::start_with(vec![script], no_jitter(100, 400), streaming_held(1000, 4));
    h.push(0, 3);
    h.push(1, 3);
    tokio::time::sleep(secs(2)).await;
    assert_eq!(rewound_seqs(&h.events()), [0, 1]);
    h.read_again();
    // Within the window that follows a refusal: one request per batch.
    let a = h.push(2, 2);
    let b = h.push(3, 2);
    tokio::time::sleep(secs(1)).await;
    // Past it: streamed again.
    tokio::time::sleep(PER_BATCH_AFTER_REFUSAL).await;
    let c = h.push(4, 2);
    let d = h.push(5, 2);
    h.finish().await;
    let bodies: Vec<Vec<u8>> = h
        .attempts()
        .iter()
        .skip(1)
        .map(|x| x.body.to_vec())
        .collect();
    assert_eq!(bodies, [a, b, [c, d].concat()]);
    assert_eq!(acked_seqs(&h.events()), [2, 3, 4, 5]);
}

#[tokio::test(start_paused = true)]
async fn without_release_a_request_ends_at_its_byte_bound() {
    let extras = Extras {
        stream: Some(StreamBounds {
            max_age: Duration::from_secs(1),
            max_rows: 1000,
            max_bytes: 4,
            release: false,
        }),
        ..Extras::default()
    };
    let mut h = Harness::start_with(vec![vec![]], no_jitter(100, 400), extras);
    let a = h.push(0, 3);
    let b = h.push(1, 3);
    h.finish().await;
    let bodies: Vec<Vec<u8>> = h.attempts().iter().map(|x| x.body.to_vec()).collect();
    assert_eq!(bodies, [a, b], "3 + 3 bytes would pass the bound of 4");
    assert!(rewound_seqs(&h.events()).is_empty());
}
