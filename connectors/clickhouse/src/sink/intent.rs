//! Exactly-once state: the intent log and the preflight.
//!
//! [`IntentLog`]: before an insert worker sends a block for the first time
//! it records the block's `(table, topic, partition, first..=last offset,
//! shard)` in a small state table spate creates next to the target,
//! `<db>.spate_intents` (a `ReplacingMergeTree`, no Keeper needed). When a
//! partition is assigned, the new owner's writer reads the intents at or
//! past the committed offset ([`BlockPlans::replayed`], a blocking query
//! from the driver thread, once per assignment) and cuts those blocks again
//! at exactly those offsets, so the replayed insert is the same block
//! (same deduplication token, same bytes) and ClickHouse drops it if the
//! earlier one landed. A block with no intent was never sent.
//!
//! [`preflight`]: at start, refuse exactly-once unless the target table can
//! deduplicate, naming the setting to change.
//!
//! Touched by insert workers (tokio tasks: `record`) and driver threads
//! (`replayed`, blocking on the I/O runtime).

use crate::client::{insert_sql, ChClient, InsertError};
use crate::schema::ServerFeatures;
use spate_core::record::{Offset, PartitionId};
use spate_core::sink::{BlockPlans, ChunkSpan};
use std::time::{Duration, Instant};

use super::retry::RetryPolicy;
use crate::classify::ErrorClass;
use crate::client::ClientError;

/// How long a new owner keeps asking for a partition's recorded blocks
/// while ClickHouse does not answer (timeouts, refused connections,
/// retriable server errors) before the pipeline fails. It blocks one
/// driver thread, so it stays under the 60 s after which `/healthz`
/// reports the thread stalled.
const PLAN_READ_BUDGET: Duration = Duration::from_secs(45);

/// Name of the state table, in the target table's database.
pub const STATE_TABLE: &str = "spate_intents";

/// The intent records of one target table.
pub struct IntentLog {
    client: ChClient,
    db: String,
    target: String,
    io: tokio::runtime::Handle,
    timeout: Duration,
    /// Backoff and per-attempt timeouts of the plan read.
    retry: RetryPolicy,
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
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A TabSeparated field.
fn tsv(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
}

impl IntentLog {
    /// Create the state table if needed; `target` is `db.table`.
    pub(crate) async fn open(
        client: ChClient,
        db: &str,
        target: String,
        retry: RetryPolicy,
    ) -> Result<Self, crate::client::ClientError> {
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {}.{STATE_TABLE} (target String, topic String, \
             partition Int32, first Int64, last Int64, shard UInt32, at DateTime DEFAULT now()) \
             ENGINE = ReplacingMergeTree() ORDER BY (target, topic, partition, first, last, shard)",
            crate::client::ident(db)
        );
        client.execute(&sql, &[]).await?;
        Ok(IntentLog {
            client,
            db: db.to_owned(),
            target,
            io: tokio::runtime::Handle::current(),
            timeout: retry.insert_timeout,
            retry,
        })
    }

    /// Record the blocks of `spans` (one span per exactly-once chunk) for
    /// `shard`, before the block is sent.
    pub(crate) async fn record(
        &self,
        shard: usize,
        spans: &[ChunkSpan],
    ) -> Result<(), InsertError> {
        let mut body = String::new();
        for s in spans {
            body.push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\t{shard}\n",
                tsv(&self.target),
                tsv(&s.partition.topic),
                s.partition.partition,
                s.first.0,
                s.last.0
            ));
        }
        let columns: Vec<String> = ["target", "topic", "partition", "first", "last", "shard"]
            .map(String::from)
            .to_vec();
        let sql = insert_sql(&self.db, STATE_TABLE, &columns, "TabSeparated");
        let settings = [("wait_end_of_query".to_string(), "1".to_string())];
        self.client
            .insert_sql_within(sql, body.into(), &settings, self.timeout)
            .await
    }
}

impl BlockPlans for IntentLog {
    fn replayed(
        &self,
        partition: &PartitionId,
        from: Offset,
    ) -> Result<Vec<(Offset, Offset)>, String> {
        let sql = format!(
            "SELECT DISTINCT first, last FROM {}.{STATE_TABLE} WHERE target = {} AND topic = {} \
             AND partition = {} AND last >= {}",
            crate::client::ident(&self.db),
            quote(&self.target),
            quote(&partition.topic),
            partition.partition,
            from.0
        );
        let text = read_with_retries(&self.retry, PLAN_READ_BUDGET, |timeout| {
            self.io
                .block_on(self.client.fetch_text_within(&sql, "TabSeparated", timeout))
        })
        .map_err(|e| {
            format!("{e}; is ClickHouse up? the partition's replay cannot start until it answers")
        })?;
        parse_blocks(&text)
    }
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
        let retriable = matches!(
            error,
            ClientError::Request {
                class: ErrorClass::Retriable,
                ..
            }
        );
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

fn parse_blocks(text: &str) -> Result<Vec<(Offset, Offset)>, String> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (a, b) = l
                .split_once('\t')
                .ok_or_else(|| format!("bad intent row {l:?}"))?;
            let n = |v: &str| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|e| format!("bad intent row {l:?}: {e}"))
            };
            Ok((Offset(n(a)?), Offset(n(b)?)))
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

/// Exactly-once at start: check the target table deduplicates on every
/// shard (adding what the inserts need to `settings`), and open the intent
/// log on `seed` (one log for all shards: a block's parts are recorded
/// per shard there).
pub(crate) async fn prepare(
    spec: &super::spec::SinkSpec,
    seed: &ChClient,
    shards: &[std::sync::Arc<super::shard::Shard<ChClient>>],
    settings: &mut Vec<(String, String)>,
) -> Result<std::sync::Arc<IntentLog>, super::error::SinkError> {
    use super::error::SinkError;
    let table = spec.table.to_string();
    let mut checked = 0;
    let mut engine = String::new();
    for shard in shards {
        let Some(replica) = shard.replicas.first() else {
            continue;
        };
        let facts = facts(&replica.client, &spec.table.db, &spec.table.table)
            .await
            .map_err(|e| {
                SinkError::Config(format!(
                    "exactly-once preflight of {table} on shard {} ({}): {e}",
                    shard.label, replica.url
                ))
            })?;
        let here = check(&table, replica.client.features(), &facts).map_err(|e| {
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
    let log = IntentLog::open(
        seed.clone(),
        &spec.table.db,
        table.clone(),
        RetryPolicy {
            insert_timeout: spec.client.insert_timeout,
            ..spec.retry
        },
    )
    .await
    .map_err(|e| {
        SinkError::Config(format!(
            "exactly-once: creating {}.{STATE_TABLE}: {e}",
            spec.table.db
        ))
    })?;
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
    Ok(TableFacts {
        engine: engine.unwrap_or_default().to_owned(),
        engine_full: engine_full.unwrap_or_default().to_owned(),
        default_window: window.trim().parse().ok(),
        has_views: views == Some("1"),
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
    fn parses_intent_rows_and_settings() {
        assert_eq!(
            parse_blocks("10\t19\n20\t29\n").unwrap(),
            vec![(Offset(10), Offset(19)), (Offset(20), Offset(29))]
        );
        assert!(parse_blocks("x\t1\n").is_err());
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
        assert_eq!(quote("it's"), "'it\\'s'");
    }
}
