//! The exactly-once preflight: at start, refuse exactly-once unless the
//! target table can drop a replayed block on every shard (naming the
//! setting or the columns to change), then open the intent log on the
//! state table's home. Runs once, in `SinkPool::prepare`.

use super::intent::IntentLog;
use super::sql::{facts, table_setting, TableFacts, STATE_TABLE};
use super::state_home;
use super::window;
use crate::client::ChClient;
use crate::schema::{Column, ServerFeatures};
use crate::sink::insert::retry::RetryPolicy;
use crate::sink::insert::shard::{Replica, Shard};
use crate::sink::start::error::SinkError;
use crate::sink::start::spec::SinkSpec;
use std::sync::Arc;

/// What exactly-once adds to every insert, once the table passed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Passed {
    pub(crate) settings: Vec<(String, String)>,
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
    columns: &[Column],
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
    spec: &SinkSpec,
    columns: &[Column],
    shards: &[Arc<Shard<ChClient>>],
    settings: &mut Vec<(String, String)>,
) -> Result<Arc<IntentLog>, SinkError> {
    let table = spec.table.to_string();
    let mut checked = 0;
    let mut engine = String::new();
    for shard in shards {
        let Some((replica, facts)) = first_answer(spec, shard).await? else {
            continue;
        };
        let here = check(&table, replica.client.features(), &facts)
            .and_then(|p| {
                unique_blocks(&table, replica.client.features(), columns, spec.topics)?;
                Ok(p)
            })
            .map_err(|e| {
                SinkError::Config(format!("{e} (shard {}, {})", shard.label, replica.url))
            })?;
        warn_window(spec, &table, replica.client.features(), &facts);
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
    let log = open_log(spec, shards).await?;
    tracing::info!(table, engine = %engine, shards = shards.len(), state = %format!("{}.{STATE_TABLE}", spec.table.db), "exactly-once delivery: the table deduplicates");
    Ok(Arc::new(log))
}

/// Warn when the table's deduplication window is smaller than a takeover
/// needs ([`window`]); refusing would stop pipelines that ran before.
fn warn_window(spec: &SinkSpec, table: &str, features: ServerFeatures, facts: &TableFacts) {
    let Some(takeover) = &spec.takeover else {
        return;
    };
    let old_server = !features.insert_deduplication_token;
    if let Some(w) = window::warning(table, facts, old_server, takeover) {
        tracing::warn!(table, needed = takeover.needed(), "{w}");
    }
}

/// The target table's facts from the first replica of `shard` that
/// answers (one may be away at start); `None`: the shard has no replica.
async fn first_answer<'s>(
    spec: &SinkSpec,
    shard: &'s Shard<ChClient>,
) -> Result<Option<(&'s Replica<ChClient>, TableFacts)>, SinkError> {
    let mut errors = Vec::new();
    for replica in &shard.replicas {
        match facts(&replica.client, &spec.table.db, &spec.table.table).await {
            Ok(f) => return Ok(Some((replica, f))),
            Err(e) => errors.push(format!("{}: {e}", replica.url)),
        }
    }
    if errors.is_empty() {
        return Ok(None);
    }
    Err(SinkError::Config(format!(
        "exactly-once preflight of {} on shard {}: {}",
        spec.table,
        shard.label,
        errors.join("; ")
    )))
}

/// The intent log on the state table's home: the first shard's replicas
/// (see [`state_home`]).
async fn open_log(
    spec: &SinkSpec,
    shards: &[Arc<Shard<ChClient>>],
) -> Result<IntentLog, SinkError> {
    let home_replicas: Vec<(String, ChClient)> = (shards.first().into_iter())
        .flat_map(|s| s.replicas.iter())
        .map(|r| (r.url.clone(), r.client.clone()))
        .collect();
    let home = state_home::open(
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
    Ok(IntentLog::new(
        home,
        &spec.table.db,
        spec.table.to_string(),
        RetryPolicy {
            insert_timeout: spec.client.insert_timeout,
            ..spec.retry
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(engine: &str, full: &str, default_window: Option<u64>, views: bool) -> TableFacts {
        TableFacts {
            engine: engine.into(),
            engine_full: full.into(),
            default_window,
            default_replicated_window: None,
            default_window_seconds: None,
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
}
