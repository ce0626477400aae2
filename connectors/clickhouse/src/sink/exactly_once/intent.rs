//! Exactly-once state: the intent log.
//!
//! [`IntentLog`]: before an insert worker sends a block for the first time
//! it records the block's `(table, topic, partition, first..=last offset,
//! shard, epoch)` in a small state table spate creates next to the target,
//! `<db>.spate_intents` (replicated with the data where the target is
//! replicated, see [`super::state_home`]), then
//! checks that no later owner fenced the partition ([`IntentLog::may_send`]).
//! When a partition is assigned, the new owner's writer calls
//! [`BlockPlans::replayed`] (a blocking call from the driver thread, once
//! per assignment): it takes an epoch of its own above every earlier
//! owner's ([`fencing::owner_epoch`]), fences the partition at it,
//! reads the intents at or past the committed offset, keeps the ones that
//! count ([`fencing::plan`]), writes them back under its own epoch with a
//! seal, and prunes the rows no reader needs any more. The writer cuts
//! those blocks again at exactly those offsets, so the replayed insert is
//! the same block (same deduplication token, same bytes) and ClickHouse
//! drops it if the earlier one landed. A block with no intent was never
//! sent. See [`fencing`] for the protocol and why it holds.
//!
//! Touched by insert workers (tokio tasks: `record`, `may_send`) and
//! driver threads (`replayed`, blocking on the I/O runtime).

use crate::client::{insert_sql, ChClient, InsertError};
use spate_core::record::{Offset, PartitionId};
use spate_core::sink::{BlockPlans, ChunkSpan, Replay};
use std::time::{Duration, Instant};

use super::fencing::{self, Row};
use super::sql::{quote, tsv, STATE_TABLE};
use super::state_home::StateHome;
use crate::classify::ErrorClass;
use crate::client::ClientError;
use crate::sink::insert::retry::RetryPolicy;

/// How long a new owner keeps asking for a partition's recorded blocks
/// while ClickHouse does not answer (timeouts, refused connections,
/// retriable server errors) before the pipeline fails: one budget for all
/// of an assignment's steps (the fence read and write, the plan read, the
/// seal). It blocks one driver thread, so it stays under the 60 s after
/// which `/healthz` reports the thread stalled.
const PLAN_READ_BUDGET: Duration = Duration::from_secs(45);

/// Why an assignment could not read or write its partition's state.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntentError {
    /// No replica of the state table answered within the plan budget, or
    /// one refused for good.
    #[error("{source} (attempt {attempts}, {elapsed:.1?} after the first)")]
    Unanswered {
        #[source]
        source: ClientError,
        attempts: u32,
        elapsed: Duration,
    },
    /// An answer of the state table spate cannot read (a hand-edited
    /// table, or a bug).
    #[error("bad {what} from {STATE_TABLE} {text:?}: {why}")]
    BadAnswer {
        what: &'static str,
        text: String,
        why: String,
    },
    /// Every epoch of this generation is taken.
    #[error(
        "{partition}: 65,535 owners of generation {generation} fenced it already \
         (a static member restarted that often without a rebalance)"
    )]
    EpochsSpent {
        partition: PartitionId,
        generation: u64,
    },
    /// A fence of a later generation that is old: the consumer group was
    /// re-created and its generations started again.
    #[error(
        "a later owner fenced the partition {age_s} s ago (generation {fence_generation} > this \
         assignment's {generation}): the consumer group was re-created and its generations \
         restarted; with no pipeline running, {fix}"
    )]
    GroupRecreated {
        age_s: i64,
        fence_generation: u64,
        generation: u64,
        /// The statement that clears the old fences.
        fix: String,
    },
}

impl IntentError {
    fn bad(what: &'static str, text: &str, why: impl std::fmt::Display) -> Self {
        IntentError::BadAnswer {
            what,
            text: text.to_owned(),
            why: why.to_string(),
        }
    }
}

/// The intent records of one target table.
pub struct IntentLog {
    /// One client per replica of the state's shard, with the state
    /// settings ([`super::state_home`]); statements fail over in order.
    clients: Vec<ChClient>,
    /// The replica the last statement was answered by.
    preferred: std::sync::atomic::AtomicUsize,
    db: String,
    target: String,
    io: tokio::runtime::Handle,
    timeout: Duration,
    /// Backoff and per-attempt timeouts of the plan read.
    retry: RetryPolicy,
    /// This process's random number, the low bits of its epochs
    /// ([`fencing::owner_epoch`]).
    nonce: u16,
    /// Whether rows no replay needs are deleted ([`StateHome::prune`]).
    prune: bool,
}

impl std::fmt::Debug for IntentLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IntentLog({}.{STATE_TABLE} for {})",
            self.db, self.target
        )
    }
}

impl IntentLog {
    /// The log of target `db.table` in the state table `home` opened
    /// ([`super::state_home::open`]).
    pub(crate) fn new(home: StateHome, db: &str, target: String, retry: RetryPolicy) -> Self {
        IntentLog {
            clients: home.clients,
            prune: home.prune,
            preferred: std::sync::atomic::AtomicUsize::new(0),
            db: db.to_owned(),
            target,
            io: tokio::runtime::Handle::current(),
            timeout: retry.insert_timeout,
            retry,
            nonce: rand::random(),
        }
    }

    /// `op` on the preferred replica, then on each other one while it
    /// fails (a replica that is down, frozen, or not yet in the quorum);
    /// the last error when none answers.
    async fn any<T, E: Classified, F>(&self, op: impl Fn(ChClient) -> F) -> Result<T, E>
    where
        F: std::future::Future<Output = Result<T, E>>,
    {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.clients.len();
        let start = self.preferred.load(Relaxed);
        let mut kept: Option<E> = None;
        for k in 0..n {
            let i = (start + k) % n;
            match op(self.clients[i].clone()).await {
                Ok(v) => {
                    self.preferred.store(i, Relaxed);
                    return Ok(v);
                }
                // A retriable error (some replica may answer later) wins
                // over a fatal one from another replica.
                Err(e) => {
                    if kept
                        .as_ref()
                        .is_none_or(|k| !k.retriable() || e.retriable())
                    {
                        kept = Some(e);
                    }
                }
            }
        }
        Err(kept.expect("a state table has at least one replica"))
    }

    /// Record the blocks of `spans` (one span per exactly-once chunk) for
    /// `shard`, before the block is sent.
    pub(crate) async fn record(
        &self,
        shard: usize,
        spans: &[ChunkSpan],
    ) -> Result<(), InsertError> {
        let rows: Vec<(&PartitionId, Row)> = (spans.iter())
            .map(|s| {
                let row = Row::intent(s.first.0, s.last.0, shard as u32, s.epoch.unwrap_or(0));
                (&s.partition, row)
            })
            .collect();
        self.insert_rows(&rows, self.timeout).await
    }

    /// Exactly-once, after the intent of a block recorded under `epoch`
    /// is in: whether it may be sent, i.e. no later owner fenced
    /// `partition` (`Err(fence)`: the later owner's epoch).
    pub(crate) async fn may_send(
        &self,
        partition: &PartitionId,
        epoch: u64,
    ) -> Result<Result<(), u64>, ClientError> {
        let sql = self.fence_sql(partition);
        let text = self
            .any(|c| {
                let sql = &sql;
                async move { c.fetch_text_within(sql, "TabSeparated", self.timeout).await }
            })
            .await?;
        let fence = parse_fence(partition, &text)?;
        Ok(if fencing::may_send(fence, epoch) {
            Ok(())
        } else {
            Err(fence)
        })
    }

    /// The query of `partition`'s highest fence.
    fn fence_sql(&self, partition: &PartitionId) -> String {
        format!(
            "SELECT max(epoch) FROM {} WHERE {} AND first = {}",
            self.state(),
            self.of(partition),
            fencing::FENCE
        )
    }

    /// This owner's epoch for an assignment of `generation`: read the
    /// partition's highest fence, then [`fencing::owner_epoch`].
    fn owner_epoch(
        &self,
        partition: &PartitionId,
        generation: u64,
        by: Instant,
    ) -> Result<u64, IntentError> {
        let text = self.select_blocking(&self.fence_sql(partition), by)?;
        let fence =
            parse_fence(partition, &text).map_err(|e| IntentError::bad("fence", &text, e))?;
        fencing::owner_epoch(generation, fence, self.nonce).ok_or_else(|| {
            IntentError::EpochsSpent {
                partition: partition.clone(),
                generation,
            }
        })
    }

    fn state(&self) -> String {
        format!("{}.{STATE_TABLE}", crate::client::ident(&self.db))
    }

    /// The `WHERE` condition of one partition's rows.
    fn of(&self, partition: &PartitionId) -> String {
        format!(
            "target = {} AND topic = {} AND partition = {}",
            quote(&self.target),
            quote(&partition.topic),
            partition.partition
        )
    }

    /// Insert state rows in one insert (one part: all or nothing).
    async fn insert_rows(
        &self,
        rows: &[(&PartitionId, Row)],
        timeout: Duration,
    ) -> Result<(), InsertError> {
        let mut body = String::new();
        for (p, r) in rows {
            body.push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                tsv(&self.target),
                tsv(&p.topic),
                p.partition,
                r.first,
                r.last,
                r.shard,
                r.epoch
            ));
        }
        let columns: Vec<String> = [
            "target",
            "topic",
            "partition",
            "first",
            "last",
            "shard",
            "epoch",
        ]
        .map(String::from)
        .to_vec();
        let sql = insert_sql(&self.db, STATE_TABLE, &columns, "TabSeparated");
        let body = bytes::Bytes::from(body);
        self.any(|c| {
            let (sql, body) = (sql.clone(), body.clone());
            async move { c.insert_sql_within(sql, body, &[], timeout).await }
        })
        .await
    }

    /// [`insert_rows`](Self::insert_rows) from a driver thread, retried
    /// like the plan read.
    fn insert_blocking(
        &self,
        partition: &PartitionId,
        rows: &[Row],
        what: &'static str,
        by: Instant,
    ) -> Result<(), IntentError> {
        let rows: Vec<(&PartitionId, Row)> = rows.iter().map(|&r| (partition, r)).collect();
        read_with_retries(&self.retry, left(by), |timeout| {
            // Every replica's attempt within the one timeout.
            // (The timer is made inside the runtime: a driver thread has none.)
            let within =
                async { tokio::time::timeout(timeout, self.insert_rows(&rows, timeout)).await };
            let done = self.io.block_on(within).unwrap_or_else(|_| {
                Err(InsertError {
                    class: ErrorClass::Retriable,
                    code: None,
                    message: format!("no replica answered within {timeout:?}"),
                })
            });
            done.map_err(|e| ClientError::Request {
                what,
                class: e.class,
                code: e.code,
                message: e.message,
            })
        })
    }

    /// `sql`'s TabSeparated answer, from a driver thread, retried while
    /// ClickHouse does not answer (see [`read_with_retries`]).
    fn select_blocking(&self, sql: &str, by: Instant) -> Result<String, IntentError> {
        read_with_retries(&self.retry, left(by), |timeout| {
            // Every replica's attempt within the one timeout.
            let all = self
                .any(|c| async move { c.fetch_text_within(sql, "TabSeparated", timeout).await });
            (self
                .io
                .block_on(async { tokio::time::timeout(timeout, all).await }))
            .unwrap_or_else(|_| Err(crate::client::timeout_error("fetching", timeout)))
        })
    }

    /// The rows of `partition` a new owner decides on: intents at or past
    /// `from`, every fence and seal.
    fn read_rows(
        &self,
        partition: &PartitionId,
        from: Offset,
        by: Instant,
    ) -> Result<Vec<Row>, IntentError> {
        let sql = format!(
            "SELECT first, last, shard, epoch FROM {} WHERE {} AND (first < 0 OR last >= {})",
            self.state(),
            self.of(partition),
            from.0
        );
        let text = self.select_blocking(&sql, by)?;
        parse_rows(&text)
    }

    /// Delete the rows of `partition` no reader needs once `epoch` sealed
    /// ([`fencing::prunable`]). An asynchronous mutation; a failure only
    /// leaves the rows for the next owner to prune. Nothing where the
    /// state may not be mutated ([`super::state_home::may_prune`]).
    fn prune(&self, partition: &PartitionId, epoch: u64, from: Offset) {
        if !self.prune {
            return;
        }
        let sql = format!(
            "ALTER TABLE {} DELETE WHERE {} AND {}",
            self.state(),
            self.of(partition),
            fencing::prune_condition(epoch, from.0)
        );
        let done = self.io.block_on(async {
            let sql = &sql;
            tokio::time::timeout(
                self.timeout,
                self.any(|c| async move { c.execute(sql, &[]).await }),
            )
            .await
        });
        match done {
            Ok(Ok(())) => {
                tracing::debug!(%partition, epoch, from = from.0, "exactly-once: pruning the intents no replay needs")
            }
            Ok(Err(e)) => {
                tracing::warn!(%partition, error = %e, "exactly-once: pruning old intents failed; the next owner prunes them")
            }
            Err(_) => {
                tracing::warn!(%partition, "exactly-once: pruning old intents timed out; the next owner prunes them")
            }
        }
    }
}

impl BlockPlans for IntentLog {
    fn replayed(
        &self,
        partition: &PartitionId,
        from: Offset,
        generation: Option<u64>,
    ) -> Result<Replay, String> {
        self.replay(partition, from, generation).map_err(|e| match e {
            IntentError::Unanswered { .. } => {
                format!("{e}; is ClickHouse up? the partition's replay cannot start until it answers")
            }
            e => e.to_string(),
        })
    }
}

impl IntentLog {
    /// [`BlockPlans::replayed`], with its typed error.
    fn replay(
        &self,
        partition: &PartitionId,
        from: Offset,
        generation: Option<u64>,
    ) -> Result<Replay, IntentError> {
        let by = Instant::now() + PLAN_READ_BUDGET;
        let epoch = match generation {
            Some(g) => Some(self.owner_epoch(partition, g, by)?),
            None => None,
        };
        if let Some(e) = epoch {
            self.insert_blocking(partition, &[Row::fence(e)], "fencing the partition", by)?;
            tracing::debug!(%partition, generation = fencing::generation_of(e), epoch = e, "exactly-once: fenced the partition");
        }
        let rows = self.read_rows(partition, from, by)?;
        let plan = match fencing::plan(&rows, epoch) {
            Ok(plan) => plan,
            Err(stale) => {
                let blocks = self.stale(partition, epoch.unwrap_or(0), stale.fence, by)?;
                return Ok(Replay { blocks, epoch });
            }
        };
        if let Some(e) = epoch {
            self.insert_blocking(
                partition,
                &fencing::adoption(&plan, e),
                "sealing the partition",
                by,
            )?;
            self.prune(partition, e, from);
        }
        let blocks = (plan.blocks().into_iter())
            .map(|(a, b)| (Offset(a), Offset(b)))
            .collect();
        Ok(Replay { blocks, epoch })
    }
}

/// An error that says whether a retry may clear it.
trait Classified {
    fn retriable(&self) -> bool;
}

impl Classified for ClientError {
    fn retriable(&self) -> bool {
        self.class() == ErrorClass::Retriable
    }
}

impl Classified for InsertError {
    fn retriable(&self) -> bool {
        self.class == ErrorClass::Retriable
    }
}

/// The highest fence in a `max(epoch)` answer.
fn parse_fence(partition: &PartitionId, text: &str) -> Result<u64, ClientError> {
    text.trim()
        .parse::<u64>()
        .map_err(|e| ClientError::Request {
            what: "reading the partition's fence",
            class: ErrorClass::Fatal,
            code: None,
            message: format!("{partition}: unexpected answer {text:?}: {e}"),
        })
}

impl IntentLog {
    /// A later owner (`fence`) fenced `partition` before this assignment
    /// (`mine`) read it. A recent fence: this member lost the partition
    /// already (its revoke deadline passed while it read): it replays
    /// nothing, and the check fences off every block of the lane. An old
    /// one ([`fencing::generations_restarted`]): the consumer group was
    /// re-created; fail, naming the fix.
    fn stale(
        &self,
        partition: &PartitionId,
        mine: u64,
        fence: u64,
        by: Instant,
    ) -> Result<Vec<(Offset, Offset)>, IntentError> {
        let sql = format!(
            "SELECT toInt64(now()) - toInt64(max(at)) FROM {} WHERE {} AND first = {} AND epoch = {fence}",
            self.state(),
            self.of(partition),
            fencing::FENCE
        );
        let text = self.select_blocking(&sql, by)?;
        let age: i64 =
            (text.trim().parse()).map_err(|e| IntentError::bad("fence age", &text, e))?;
        let (gen_fence, gen_mine) = (fencing::generation_of(fence), fencing::generation_of(mine));
        if !fencing::generations_restarted(age) {
            tracing::warn!(%partition, generation = gen_mine, epoch = mine, fence, fence_generation = gen_fence, age_s = age, "exactly-once: a later owner fenced the partition before this assignment read it; this member lost it, none of its blocks is sent");
            return Ok(Vec::new());
        }
        Err(IntentError::GroupRecreated {
            age_s: age,
            fence_generation: gen_fence,
            generation: gen_mine,
            fix: format!(
                "ALTER TABLE {} DELETE WHERE {} AND first < 0",
                self.state(),
                self.of(partition)
            ),
        })
    }
}

/// What is left of the budget until `by`.
fn left(by: Instant) -> Duration {
    by.saturating_duration_since(Instant::now())
}

/// Call `read` (given each attempt's timeout) until it succeeds, fails for
/// good, or `budget` is spent: a ClickHouse that is frozen, restarting or
/// overloaded when a partition is assigned delays the lane, it does not
/// fail the pipeline (a CI run failed on one 1 s timeout).
fn read_with_retries<T>(
    policy: &RetryPolicy,
    budget: Duration,
    mut read: impl FnMut(Duration) -> Result<T, ClientError>,
) -> Result<T, IntentError> {
    let started = Instant::now();
    let mut attempt = 0u32;
    loop {
        let left = budget.saturating_sub(started.elapsed());
        let timeout = policy
            .attempt_timeout(attempt)
            .min(left.max(Duration::from_millis(100)));
        let error = match read(timeout) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        attempt += 1;
        let retriable = error.class() == ErrorClass::Retriable;
        let unit = f64::from(started.elapsed().subsec_nanos() % 1000) / 1000.0;
        let backoff = policy.delay(attempt, unit);
        if !retriable || started.elapsed() + backoff >= budget {
            return Err(IntentError::Unanswered {
                source: error,
                attempts: attempt,
                elapsed: started.elapsed(),
            });
        }
        tracing::warn!(error = %error, attempt, backoff_ms = backoff.as_millis() as u64, "exactly-once: reading the recorded blocks failed; retrying");
        std::thread::sleep(backoff);
    }
}

fn parse_rows(text: &str) -> Result<Vec<Row>, IntentError> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let bad = |why: String| IntentError::bad("row", l, why);
            let f: Vec<&str> = l.split('\t').map(str::trim).collect();
            let [first, last, shard, epoch] = f[..] else {
                return Err(bad(format!("{} fields, want 4", f.len())));
            };
            Ok(Row::intent(
                first.parse().map_err(|e| bad(format!("first: {e}")))?,
                last.parse().map_err(|e| bad(format!("last: {e}")))?,
                shard.parse().map_err(|e| bad(format!("shard: {e}")))?,
                epoch.parse().map_err(|e| bad(format!("epoch: {e}")))?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> RetryPolicy {
        RetryPolicy {
            initial: Duration::from_millis(2),
            max: Duration::from_millis(10),
            factor: 2.0,
            jitter: 0.0,
            insert_timeout: Duration::from_millis(50),
            max_insert_timeout: Duration::from_millis(400),
        }
    }

    fn failure(class: ErrorClass) -> ClientError {
        ClientError::Request {
            what: "fetching",
            class,
            code: None,
            message: "timed out".into(),
        }
    }

    #[test]
    fn plan_read_retries_until_clickhouse_answers() {
        let mut timeouts = Vec::new();
        let got = read_with_retries(&quick(), Duration::from_secs(5), |t| {
            timeouts.push(t);
            if timeouts.len() < 4 {
                Err(failure(ErrorClass::Retriable))
            } else {
                Ok(7)
            }
        });
        assert_eq!(got.unwrap(), 7);
        // Each attempt after a failure waits longer for its answer, capped.
        let ms: Vec<u128> = timeouts.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, vec![50, 100, 200, 400]);
    }

    #[test]
    fn plan_read_gives_up_at_once_on_a_fatal_error() {
        let mut calls = 0;
        let got: Result<(), _> = read_with_retries(&quick(), Duration::from_secs(5), |_| {
            calls += 1;
            Err(failure(ErrorClass::Fatal))
        });
        assert_eq!(calls, 1);
        let err = got.unwrap_err();
        assert!(
            matches!(err, IntentError::Unanswered { attempts: 1, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("attempt 1"), "{err}");
    }

    #[test]
    fn plan_read_fails_when_its_budget_is_spent() {
        let started = Instant::now();
        let mut calls = 0;
        let got: Result<(), _> = read_with_retries(&quick(), Duration::from_millis(60), |_| {
            calls += 1;
            Err(failure(ErrorClass::Retriable))
        });
        let err = got.unwrap_err();
        assert!(calls > 1, "retried before giving up: {calls}");
        let IntentError::Unanswered {
            source, attempts, ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(*attempts as usize, calls);
        assert!(source.to_string().contains("timed out"), "{err}");
        // The cause stays reachable as the error's source.
        assert!(std::error::Error::source(&err).is_some());
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn parses_intent_rows() {
        assert_eq!(
            parse_rows("10\t19\t0\t3\n-1\t4\t0\t4\n").unwrap(),
            vec![Row::intent(10, 19, 0, 3), Row::fence(4)]
        );
        assert!(parse_rows("x\t1\t0\t0\n").is_err());
        let err = parse_rows("10\t19\n").unwrap_err();
        assert!(
            matches!(err, IntentError::BadAnswer { what: "row", .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("2 fields"), "{err}");
    }
}
