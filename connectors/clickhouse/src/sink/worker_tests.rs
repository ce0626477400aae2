//! In-process tests of the insert worker: a scripted [`InsertTarget`]
//! that queues answers per replica and records every attempt, on tokio's
//! paused clock (sleeps advance virtual time instantly, so backoff delays
//! are measured exactly).

use super::*;
use crate::classify::ErrorClass;
use crate::client::ClientError;
use crate::sink::shard::Replica;
use crate::sink::target::InsertQuery;
use spate_core::checkpoint::AckRange;
use spate_core::metrics::Metrics;
use spate_core::record::Offset;
use spate_core::sink::{ack_channel, AckReceiver, ShardQueues};
use spate_core::source::LaneId;
use std::collections::VecDeque;
use std::sync::Mutex as StdMutex;
use tokio::sync::Notify;
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
}

#[derive(Clone)]
struct Fake {
    url: String,
    answers: Arc<StdMutex<VecDeque<Answer>>>,
    log: Arc<StdMutex<Vec<Attempt>>>,
}

impl InsertTarget for Fake {
    fn insert_bytes(
        &self,
        _query: &InsertQuery,
        body: Bytes,
    ) -> impl std::future::Future<Output = Result<(), InsertError>> + Send {
        self.log.lock().unwrap().push(Attempt {
            url: self.url.clone(),
            body,
            at: Instant::now(),
        });
        // An empty script confirms.
        let answer = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Answer::Ok);
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
    }
}

struct Harness {
    queues: Option<ShardQueues>,
    acks: AckReceiver,
    abandon: watch::Sender<bool>,
    shard: Arc<Shard<Fake>>,
    shared: Arc<PoolShared>,
    log: Arc<StdMutex<Vec<Attempt>>>,
    worker: tokio::task::JoinHandle<()>,
}

impl Harness {
    /// One shard whose replicas answer from `scripts`, one worker.
    fn start(scripts: Vec<Vec<Answer>>, retry: RetryPolicy) -> Harness {
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
            settings: Vec::new(),
        };
        let metrics = Arc::new(Metrics::new());
        let shared = Arc::new(PoolShared::new("db.t".into(), query, None, metrics));
        let (queues, mut receivers) = ShardQueues::new(1, 1 << 30, 1 << 29);
        let (ack_tx, acks) = ack_channel();
        let (abandon, abandon_rx) = watch::channel(false);
        let worker = Worker {
            shard: shard.clone(),
            index: 0,
            rx: Arc::new(Mutex::new(receivers.remove(0))),
            acks: ack_tx,
            abandon: abandon_rx,
            shared: shared.clone(),
            retry,
        };
        Harness {
            queues: Some(queues),
            acks,
            abandon,
            shard,
            shared,
            log,
            worker: tokio::spawn(worker.run()),
        }
    }

    /// Queue a chunk of `rows` rows from segment `seq`; returns its bytes.
    fn push(&self, seq: u64, rows: u64) -> Vec<u8> {
        let data: Vec<u8> = (0..rows).map(|i| (seq * 31 + i) as u8).collect();
        let ack = AckRange {
            lane: LaneId(1),
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
            ticket: None,
            schema: 0,
        };
        let pushed = self.queues.as_ref().map(|q| q.push(chunk));
        assert!(matches!(pushed, Some(Ok(()))), "queue closed");
        data
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
