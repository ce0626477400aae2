//! Exactly-once state: the intent log and the preflight.
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
//! [`preflight`]: at start, refuse exactly-once unless the target table can
//! deduplicate, naming the setting to change.
//!
//! Touched by insert workers (tokio tasks: `record`, `may_send`) and
//! driver threads (`replayed`, blocking on the I/O runtime).

use crate::client::{insert_sql, ChClient, InsertError};
use crate::schema::ServerFeatures;
use spate_core::record::{Offset, PartitionId};
use spate_core::sink::{BlockPlans, ChunkSpan, Replay};
use std::time::{Duration, Instant};

use super::fencing::{self, Row};
use super::retry::RetryPolicy;
use crate::classify::ErrorClass;
use crate::client::ClientError;

/// How long a new owner keeps asking for a partition's recorded blocks
/// while ClickHouse does not answer (timeouts, refused connections,
/// retriable server errors) before the pipeline fails: one budget for all
/// of an assignment's steps (the fence read and write, the plan read, the
/// seal). It blocks one driver thread, so it stays under the 60 s after
/// which `/healthz` reports the thread stalled.
const PLAN_READ_BUDGET: Duration = Duration::from_secs(45);

/// Name of the state table, in the target table's database.
pub const STATE_TABLE: &str = "spate_intents";

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

/// A SQL string literal.
pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A TabSeparated field's text (`\'` is `'`, `\\` is `\`, ...).
fn untsv(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('0') => out.push('\0'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// A TabSeparated field.
fn tsv(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
}

impl IntentLog {
    /// The log of target `db.table` in the state table `home` opened
    /// ([`super::state_home::open`]).
    pub(crate) fn new(
        home: super::state_home::StateHome,
        db: &str,
        target: String,
        retry: RetryPolicy,
    ) -> Self {
        IntentLog {
            clients: home.clients,
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
    ) -> Result<u64, String> {
        let text = self.select_blocking(&self.fence_sql(partition), by)?;
        let fence = parse_fence(partition, &text).map_err(|e| e.to_string())?;
        fencing::owner_epoch(generation, fence, self.nonce).ok_or_else(|| {
            format!(
                "{partition}: 65,535 owners of generation {generation} fenced it already \
                 (a static member restarted that often without a rebalance)"
            )
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
    ) -> Result<(), String> {
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
    fn select_blocking(&self, sql: &str, by: Instant) -> Result<String, String> {
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
    ) -> Result<Vec<Row>, String> {
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
    /// leaves the rows for the next owner to prune.
    fn prune(&self, partition: &PartitionId, epoch: u64, from: Offset) {
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
        let unreachable = |e: String| {
            format!("{e}; is ClickHouse up? the partition's replay cannot start until it answers")
        };
        let by = Instant::now() + PLAN_READ_BUDGET;
        let epoch = match generation {
            Some(g) => Some(self.owner_epoch(partition, g, by).map_err(unreachable)?),
            None => None,
        };
        if let Some(e) = epoch {
            self.insert_blocking(partition, &[Row::fence(e)], "fencing the partition", by)
                .map_err(unreachable)?;
            tracing::debug!(%partition, generation = fencing::generation_of(e), epoch = e, "exactly-once: fenced the partition");
        }
        let rows = self.read_rows(partition, from, by).map_err(unreachable)?;
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
            )
            .map_err(unreachable)?;
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
    ) -> Result<Vec<(Offset, Offset)>, String> {
        let sql = format!(
            "SELECT toInt64(now()) - toInt64(max(at)) FROM {} WHERE {} AND first = {} AND epoch = {fence}",
            self.state(),
            self.of(partition),
            fencing::FENCE
        );
        let text = self.select_blocking(&sql, by)?;
        let age: i64 = text
            .trim()
            .parse()
            .map_err(|e| format!("the age of the fence of {partition}: {text:?}: {e}"))?;
        let (gen_fence, gen_mine) = (fencing::generation_of(fence), fencing::generation_of(mine));
        if !fencing::generations_restarted(age) {
            tracing::warn!(%partition, generation = gen_mine, epoch = mine, fence, fence_generation = gen_fence, age_s = age, "exactly-once: a later owner fenced the partition before this assignment read it; this member lost it, none of its blocks is sent");
            return Ok(Vec::new());
        }
        Err(format!(
            "a later owner fenced the partition {age} s ago (generation {gen_fence} > this assignment's \
             {gen_mine}): the consumer group was re-created and its generations restarted; with no \
             pipeline running, ALTER TABLE {} DELETE WHERE {} AND first < 0",
            self.state(),
            self.of(partition)
        ))
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
) -> Result<T, String> {
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
            return Err(format!(
                "{error} (attempt {attempt}, {:.1?} after the first)",
                started.elapsed()
            ));
        }
        tracing::warn!(error = %error, attempt, backoff_ms = backoff.as_millis() as u64, "exactly-once: reading the recorded blocks failed; retrying");
        std::thread::sleep(backoff);
    }
}

fn parse_rows(text: &str) -> Result<Vec<Row>, String> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let bad = |why: String| format!("bad row of {STATE_TABLE} {l:?}: {why}");
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

/// What the preflight read about the target table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableFacts {
    pub(crate) engine: String,
    pub(crate) engine_full: String,
    /// The server's default `non_replicated_deduplication_window` (absent
    /// before the setting existed).
    pub(crate) default_window: Option<u64>,
    pub(crate) has_views: bool,
    /// The session's `insert_deduplicate` (a profile may turn it off).
    pub(crate) insert_deduplicate: bool,
}

/// What exactly-once adds to every insert, once the table passed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Passed {
    pub(crate) settings: Vec<(String, String)>,
}

/// A table setting's value from `engine_full` (`... SETTINGS a = 1, b = 2`).
fn table_setting(engine_full: &str, name: &str) -> Option<u64> {
    let mut from = 0;
    while let Some(i) = engine_full[from..].find(name) {
        let at = from + i;
        from = at + name.len();
        let whole = engine_full[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        let Some(rest) = engine_full[from..].trim_start().strip_prefix('=') else {
            continue;
        };
        if whole {
            let digits: String = rest
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            return digits.parse().ok();
        }
    }
    None
}

/// Whether `table` (with `facts`) on a server with `features` can drop a
/// replayed block; the refusal names the setting to change.
pub(crate) fn check(
    table: &str,
    features: ServerFeatures,
    facts: &TableFacts,
) -> Result<Passed, String> {
    let (major, minor) = features.version;
    let engine = facts.engine.as_str();
    if !engine.ends_with("MergeTree") {
        return Err(format!(
            "--delivery exactly-once needs a *MergeTree table that deduplicates inserts; {table} is {engine}"
        ));
    }
    let replicated = engine.starts_with("Replicated");
    if replicated {
        if table_setting(&facts.engine_full, "replicated_deduplication_window") == Some(0) {
            return Err(format!(
                "--delivery exactly-once: {table} has replicated_deduplication_window = 0; \
                 ALTER TABLE {table} MODIFY SETTING replicated_deduplication_window = 1000"
            ));
        }
    } else if !features.insert_deduplication_token {
        return Err(format!(
            "--delivery exactly-once on ClickHouse {major}.{minor} (no insert_deduplication_token, 22.2+) \
             needs a Replicated*MergeTree table, whose block hashes drop a replayed block; {table} is {engine}"
        ));
    } else {
        let window = table_setting(&facts.engine_full, "non_replicated_deduplication_window")
            .or(facts.default_window)
            .unwrap_or(0);
        if window == 0 {
            return Err(format!(
                "--delivery exactly-once: {table} ({engine}) keeps no deduplication log; \
                 ALTER TABLE {table} MODIFY SETTING non_replicated_deduplication_window = 1000"
            ));
        }
    }
    if !features.insert_deduplication_token && !facts.insert_deduplicate {
        return Err(format!(
            "--delivery exactly-once on ClickHouse {major}.{minor} relies on the block hash of {table}, \
             and this user's profile sets insert_deduplicate = 0; set it to 1 in the profile \
             (spate sends no token to turn it on per insert on this version)"
        ));
    }
    let mut passed = Passed::default();
    if facts.has_views {
        if !features.insert_deduplication_token {
            return Err(format!(
                "--delivery exactly-once: {table} has materialized views, and ClickHouse {major}.{minor} \
                 has no deduplicate_blocks_in_dependent_materialized_views to keep them exact"
            ));
        }
        passed.settings.push((
            "deduplicate_blocks_in_dependent_materialized_views".into(),
            "1".into(),
        ));
    }
    Ok(passed)
}

/// Exactly-once on a server without `insert_deduplication_token`: the
/// server drops a replayed block by its block hash, and so also any other
/// block whose bytes are the same. Two blocks are different offset ranges,
/// so their bytes differ whenever every row carries its Kafka coordinates:
/// the table must have (insertable) `_partition` and `_offset` columns, and
/// `_topic` when more than `topics` = 1 topic feeds it. Without them a
/// block of identical messages is dropped as a repeat of an earlier one,
/// and its offsets committed: the refusal names the columns to add.
pub(crate) fn unique_blocks(
    table: &str,
    features: ServerFeatures,
    columns: &[crate::schema::Column],
    topics: usize,
) -> Result<(), String> {
    if features.insert_deduplication_token {
        return Ok(());
    }
    let has =
        |name: &str| (columns.iter()).any(|c| c.name == name && c.default_kind.is_insertable());
    let mut need = vec![("_partition", "Int32"), ("_offset", "UInt64")];
    if topics != 1 {
        need.insert(0, ("_topic", "LowCardinality(String)"));
    }
    let missing: Vec<_> = need.into_iter().filter(|(n, _)| !has(n)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let (major, minor) = features.version;
    let add: Vec<String> = (missing.iter())
        .map(|(n, t)| format!("ADD COLUMN {n} {t}"))
        .collect();
    Err(format!(
        "--delivery exactly-once on ClickHouse {major}.{minor} (no insert_deduplication_token, 22.2+) \
         deduplicates by block hash, which also drops a different block whose rows look the same \
         (identical messages at other offsets); {table} needs the columns spate fills with each \
         row's Kafka coordinates, so that every block is unique: ALTER TABLE {table} {}",
        add.join(", ")
    ))
}

/// Exactly-once at start: check the target table deduplicates on every
/// shard (adding what the inserts need to `settings`), and open the intent
/// log on the first shard's replicas (one log for all shards: a block's
/// parts are recorded per shard there).
pub(crate) async fn prepare(
    spec: &super::spec::SinkSpec,
    columns: &[crate::schema::Column],
    shards: &[std::sync::Arc<super::shard::Shard<ChClient>>],
    settings: &mut Vec<(String, String)>,
) -> Result<std::sync::Arc<IntentLog>, super::error::SinkError> {
    use super::error::SinkError;
    let table = spec.table.to_string();
    let mut checked = 0;
    let mut engine = String::new();
    for shard in shards {
        // The first replica that answers (one may be away at start).
        let mut answered = None;
        let mut errors = Vec::new();
        for replica in &shard.replicas {
            match facts(&replica.client, &spec.table.db, &spec.table.table).await {
                Ok(f) => {
                    answered = Some((replica, f));
                    break;
                }
                Err(e) => errors.push(format!("{}: {e}", replica.url)),
            }
        }
        let Some((replica, facts)) = answered else {
            if errors.is_empty() {
                continue;
            }
            return Err(SinkError::Config(format!(
                "exactly-once preflight of {table} on shard {}: {}",
                shard.label,
                errors.join("; ")
            )));
        };
        let here = check(&table, replica.client.features(), &facts)
            .and_then(|p| {
                unique_blocks(&table, replica.client.features(), columns, spec.topics)?;
                Ok(p)
            })
            .map_err(|e| {
                SinkError::Config(format!("{e} (shard {}, {})", shard.label, replica.url))
            })?;
        engine = facts.engine;
        checked += 1;
        // Every shard's needs (a view on one shard is enough to need the
        // setting on all inserts).
        for kv in here.settings {
            if !settings.contains(&kv) {
                settings.push(kv);
            }
        }
    }
    if checked == 0 {
        return Err(SinkError::Config(format!("{table}: no shard to check")));
    }
    // The state lives on the first shard's replicas (see `state_home`).
    let home_replicas: Vec<(String, ChClient)> = (shards.first().into_iter())
        .flat_map(|s| s.replicas.iter())
        .map(|r| (r.url.clone(), r.client.clone()))
        .collect();
    let home = super::state_home::open(
        &home_replicas,
        &spec.table.db,
        &spec.table.table,
        spec.client.insert_timeout,
    )
    .await
    .map_err(|e| {
        SinkError::Config(format!(
            "exactly-once: the state table {}.{STATE_TABLE}: {e}",
            spec.table.db
        ))
    })?;
    let log = IntentLog::new(
        home,
        &spec.table.db,
        table.clone(),
        RetryPolicy {
            insert_timeout: spec.client.insert_timeout,
            ..spec.retry
        },
    );
    tracing::info!(table, engine = %engine, shards = shards.len(), state = %format!("{}.{STATE_TABLE}", spec.table.db), "exactly-once delivery: the table deduplicates");
    Ok(std::sync::Arc::new(log))
}

/// Read the [`TableFacts`] of `db.table`.
pub(crate) async fn facts(client: &ChClient, db: &str, table: &str) -> Result<TableFacts, String> {
    let sql = format!(
        "SELECT engine, replaceAll(engine_full, '\\t', ' '), length(dependencies_table) > 0 \
         FROM system.tables WHERE database = {} AND name = {}",
        quote(db),
        quote(table)
    );
    let text = client
        .fetch_text(&sql, "TabSeparated")
        .await
        .map_err(|e| e.to_string())?;
    let line = text
        .lines()
        .next()
        .ok_or_else(|| format!("table {db}.{table} not found"))?;
    let mut f = line.split('\t');
    let (engine, engine_full, views) = (f.next(), f.next(), f.next());
    let window = client
        .fetch_text(
            "SELECT value FROM system.merge_tree_settings WHERE name = 'non_replicated_deduplication_window'",
            "TabSeparated",
        )
        .await
        .map_err(|e| e.to_string())?;
    let dedup = client
        .fetch_text(
            "SELECT value FROM system.settings WHERE name = 'insert_deduplicate'",
            "TabSeparated",
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(TableFacts {
        engine: untsv(engine.unwrap_or_default()),
        engine_full: untsv(engine_full.unwrap_or_default()),
        default_window: window.trim().parse().ok(),
        has_views: views == Some("1"),
        // Absent (a server without the setting) is not "off".
        insert_deduplicate: dedup.trim() != "0",
    })
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
        assert_eq!(got, Ok(7));
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
        assert!(got.unwrap_err().contains("attempt 1"));
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
        assert!(err.contains("timed out"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    fn facts(engine: &str, full: &str, default_window: Option<u64>, views: bool) -> TableFacts {
        TableFacts {
            engine: engine.into(),
            engine_full: full.into(),
            default_window,
            has_views: views,
            insert_deduplicate: true,
        }
    }

    fn v(s: &str) -> ServerFeatures {
        ServerFeatures::from_version(s).unwrap()
    }

    #[test]
    fn preflight_table() {
        let mt = "MergeTree ORDER BY n SETTINGS index_granularity = 8192";
        let mtw = "MergeTree ORDER BY n SETTINGS non_replicated_deduplication_window = 1000, index_granularity = 8192";
        let rmt = "ReplicatedMergeTree('/t', 'r') ORDER BY n";
        let cases: &[(&str, TableFacts, Result<bool, &str>)] = &[
            ("26.9.1", facts("MergeTree", mtw, Some(0), false), Ok(false)),
            ("26.9.1", facts("MergeTree", mt, Some(0), false), Err("non_replicated_deduplication_window = 1000")),
            ("26.9.1", facts("MergeTree", mt, Some(100), false), Ok(false)),
            ("26.9.1", facts("MergeTree", mtw, Some(0), true), Ok(true)),
            ("26.9.1", facts("Log", "Log", Some(0), false), Err("is Log")),
            ("18.16.1", facts("MergeTree", mt, None, false), Err("needs a Replicated*MergeTree")),
            ("18.16.1", facts("ReplicatedMergeTree", rmt, None, false), Ok(false)),
            ("18.16.1", facts("ReplicatedMergeTree", rmt, None, true), Err("materialized views")),
            (
                "18.16.1",
                facts("ReplicatedMergeTree", "ReplicatedMergeTree('/t', 'r') ORDER BY n SETTINGS replicated_deduplication_window = 0", None, false),
                Err("replicated_deduplication_window = 1000"),
            ),
        ];
        for (version, f, want) in cases {
            let got = check("db.t", v(version), f);
            match (want, &got) {
                (Ok(views), Ok(p)) => assert_eq!(!p.settings.is_empty(), *views, "{version} {f:?}"),
                (Err(needle), Err(msg)) => assert!(msg.contains(needle), "{version} {f:?}: {msg}"),
                _ => panic!("{version} {f:?}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn preflight_refuses_a_profile_without_block_hashes_on_old_servers() {
        let rmt = "ReplicatedMergeTree('/t', 'r') ORDER BY n";
        let off = TableFacts {
            insert_deduplicate: false,
            ..facts("ReplicatedMergeTree", rmt, None, false)
        };
        let err = check("db.t", v("18.16.1"), &off).unwrap_err();
        assert!(err.contains("insert_deduplicate = 0"), "{err}");
        // With a token spate sends insert_deduplicate=1 itself.
        let mtw = "MergeTree ORDER BY n SETTINGS non_replicated_deduplication_window = 1000";
        let off = TableFacts {
            insert_deduplicate: false,
            ..facts("MergeTree", mtw, Some(0), false)
        };
        assert!(check("db.t", v("26.9.1"), &off).is_ok());
    }

    #[test]
    fn blocks_must_be_unique_where_the_server_has_no_token() {
        use crate::schema::{Column, DefaultKind};
        let col = |n: &str| Column::plain(n, crate::types::parse_type("UInt64").unwrap());
        let data = vec![col("n"), col("s")];
        let err = unique_blocks("db.t", v("18.16.1"), &data, 1).unwrap_err();
        assert!(
            err.contains("ALTER TABLE db.t ADD COLUMN _partition Int32, ADD COLUMN _offset UInt64"),
            "{err}"
        );
        assert!(!err.contains("_topic"), "one topic needs no _topic: {err}");
        let coords = vec![col("n"), col("_partition"), col("_offset")];
        assert_eq!(unique_blocks("db.t", v("18.16.1"), &coords, 1), Ok(()));
        let err = unique_blocks("db.t", v("18.16.1"), &coords, 2).unwrap_err();
        assert!(err.contains("ADD COLUMN _topic"), "{err}");
        // A MATERIALIZED _offset is not spate's to fill.
        let mut materialized = coords.clone();
        materialized[2].default_kind = DefaultKind::Materialized;
        assert!(unique_blocks("db.t", v("18.16.1"), &materialized, 1).is_err());
        // The token tells blocks apart by their offsets on 22.2+.
        assert_eq!(unique_blocks("db.t", v("22.2.2.1"), &data, 3), Ok(()));
    }

    #[test]
    fn parses_intent_rows_and_settings() {
        assert_eq!(
            parse_rows("10\t19\t0\t3\n-1\t4\t0\t4\n").unwrap(),
            vec![Row::intent(10, 19, 0, 3), Row::fence(4)]
        );
        assert!(parse_rows("x\t1\t0\t0\n").is_err());
        assert!(parse_rows("10\t19\n").unwrap_err().contains("2 fields"));
        assert_eq!(
            table_setting("X SETTINGS a_window = 5, b = 1", "a_window"),
            Some(5)
        );
        assert_eq!(table_setting("X SETTINGS b = 1", "a_window"), None);
        assert_eq!(
            table_setting("X SETTINGS non_a_window = 3, a_window = 4", "a_window"),
            Some(4),
            "a longer name is not the setting"
        );
        assert_eq!(tsv("a\tb"), "a\\tb");
        assert_eq!(untsv(&tsv("a\tb\\c")), "a\tb\\c");
        assert_eq!(untsv("M(\\'/p\\', \\'r\\')"), "M('/p', 'r')");
        assert_eq!(quote("it's"), "'it\\'s'");
    }
}
