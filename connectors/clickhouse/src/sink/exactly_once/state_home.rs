//! Where exactly-once state lives: `<db>.spate_intents` on every replica
//! of the target's first shard, replicated with the data when the target
//! is replicated, and the settings every state statement sends.
//!
//! The state must survive a replica and be the same whichever replica
//! answers: a new owner that read an empty history (another replica's, or
//! a table that is not replicated) would cut its replay differently and
//! insert landed rows again, and two members talking to different
//! replicas would never see each other's fences. So:
//! - beside a `Replicated*MergeTree` target the state table is a
//!   `ReplicatedReplacingMergeTree` created on each replica of the first
//!   shard, its ZooKeeper path the target's with `_spate_intents` appended
//!   and its replica name the target's on that server (macros and
//!   `{uuid}` resolved as the target's are), so it has exactly the
//!   target's replicas;
//! - its writes are quorum writes (`insert_quorum` a majority of the
//!   target's `total_replicas`, `insert_quorum_timeout` the insert
//!   timeout) and its reads sequentially consistent
//!   (`select_sequential_consistency = 1`: a replica answers only once it
//!   has every quorum write), so whichever replica (or load balancer)
//!   answers, a read sees every fence, intent and seal written before it.
//!   The price: with fewer live replicas than the quorum (one of two), the
//!   state cannot be written and exactly-once waits, reported as a stall,
//!   until the replica is back; it never reads a fresh history;
//! - beside a table that is not replicated, a plain `ReplacingMergeTree`
//!   on the first shard's replicas (the data lives on one server, and so
//!   does its state);
//! - every state statement also sends `async_insert = 0` (where the server
//!   has it), `wait_end_of_query = 1` and unlimited result rows and bytes,
//!   so no server profile changes what an answer means.
//!
//! Checked at start: a state table that exists unreplicated beside a
//! replicated target (a spate before this), or whose replicas are not
//! replicas of each other, refuses exactly-once with what to do.
//!
//! Called once per sink at start, from `preflight::prepare`.

use crate::client::{ident, ChClient};
use std::time::Duration;

use super::sql::{facts, quote, STATE_TABLE};

/// The state table's home, ready for the intent log.
pub(crate) struct StateHome {
    /// One client per replica of the first shard, with the state settings.
    pub(crate) clients: Vec<ChClient>,
    /// Whether the rows no replay needs may be deleted (see [`may_prune`]).
    pub(crate) prune: bool,
}

/// Whether spate prunes its state with `ALTER TABLE ... DELETE` on a
/// server of `version` (`(major, minor)`), the state being `replicated`
/// or not. Not on a replicated state before 20.1: 18.16 crashed (SIGSEGV
/// in `ReplicatedMergeTreeQueue::tryFinalizeMutations`, after a ZooKeeper
/// receive error) while finalizing this very mutation, and no 19.x was
/// tried. Skipping the prune costs space only: a plan reads fences, seals
/// and intents at or past the committed offset (`last >= committed`), so
/// the old rows are never read again; they are a few dozen bytes a block.
pub(crate) fn may_prune(version: (u32, u32), replicated: bool) -> bool {
    !replicated || version >= (20, 1)
}

/// The first two quoted arguments of a `Replicated*` engine: its
/// ZooKeeper path and replica name, as `engine_full` prints them.
pub(crate) fn replicated_args(engine_full: &str) -> Option<(String, String)> {
    let rest = engine_full.trim_start().strip_prefix("Replicated")?;
    let open = rest.find('(')?;
    let mut chars = rest[open + 1..].chars().peekable();
    let mut args = Vec::new();
    while args.len() < 2 {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        if chars.next()? != '\'' {
            return None;
        }
        let mut arg = String::new();
        loop {
            match chars.next()? {
                '\\' => arg.push(chars.next()?),
                '\'' => break,
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
    let replica = args.pop()?;
    Some((args.pop()?, replica))
}

/// The engine of the state table beside a target whose engine is
/// `engine_full` (its `{uuid}` being `uuid`, where the path uses it).
pub(crate) fn state_engine(engine_full: &str, uuid: Option<&str>) -> String {
    match replicated_args(engine_full) {
        Some((path, replica)) => {
            let path = match uuid {
                Some(u) => path.replace("{uuid}", u),
                None => path,
            };
            format!(
                "ReplicatedReplacingMergeTree({}, {}, epoch)",
                quote(&format!("{path}_{STATE_TABLE}")),
                quote(&replica)
            )
        }
        None => "ReplacingMergeTree(epoch)".to_owned(),
    }
}

/// The quorum of a replicated state's writes: a majority of the replicas
/// (`None` below two: nothing to agree with).
pub(crate) fn quorum(total_replicas: u64) -> Option<u64> {
    (total_replicas >= 2).then_some(total_replicas / 2 + 1)
}

/// The settings of every state statement on a server with `features`
/// (`parallel`: it has `insert_quorum_parallel`).
pub(crate) fn state_settings(
    features: crate::schema::ServerFeatures,
    parallel: bool,
    quorum: Option<u64>,
    timeout: Duration,
) -> Vec<(String, String)> {
    let mut s: Vec<(String, String)> = vec![
        ("wait_end_of_query".into(), "1".into()),
        ("max_result_rows".into(), "0".into()),
        ("max_result_bytes".into(), "0".into()),
    ];
    if features.async_insert {
        s.push(("async_insert".into(), "0".into()));
    }
    if let Some(q) = quorum {
        s.push(("insert_quorum".into(), q.to_string()));
        s.push((
            "insert_quorum_timeout".into(),
            timeout.as_millis().max(1).to_string(),
        ));
        s.push(("select_sequential_consistency".into(), "1".into()));
        // Sequentially consistent reads see every quorum write only when
        // quorum writes are not parallel (they are by default where the
        // setting exists): then every write waits for the one before it.
        if parallel {
            s.push(("insert_quorum_parallel".into(), "0".into()));
        }
    }
    s
}

/// The state table's columns and sorting key.
const STATE_COLUMNS: &str = "(target String, topic String, partition Int32, first Int64, \
     last Int64, shard UInt32, epoch UInt64 DEFAULT 0, at DateTime DEFAULT now())";
const STATE_ORDER: &str = "ORDER BY (target, topic, partition, first, last, shard)";

/// One replica's answers about the target and the state table.
struct Seen {
    url: String,
    client: ChClient,
    target_engine: String,
    total_replicas: u64,
    /// The server has `insert_quorum_parallel`.
    parallel: bool,
}

/// Create (where missing) and check the state table of `db`.`table` on
/// `replicas` (the first shard's, `(url, client)`), and hand back its
/// clients. A replica that does not answer now is skipped (its state
/// table is created at a later start; until then a statement that lands
/// there fails over to another); none answering is an error.
pub(crate) async fn open(
    replicas: &[(String, ChClient)],
    db: &str,
    table: &str,
    timeout: Duration,
) -> Result<StateHome, String> {
    let mut seen = Vec::new();
    let mut down = Vec::new();
    for (url, client) in replicas {
        match target_on(client, db, table).await {
            Ok((target_engine, uuid, total_replicas)) => {
                create_on(client, db, &target_engine, uuid.as_deref())
                    .await
                    .map_err(|e| format!("creating {db}.{STATE_TABLE} on {url}: {e}"))?;
                let parallel = one_value(
                    client,
                    "SELECT count() FROM system.settings WHERE name = 'insert_quorum_parallel'",
                )
                .await?
                    != "0";
                seen.push(Seen {
                    url: url.clone(),
                    client: client.clone(),
                    target_engine,
                    total_replicas,
                    parallel,
                });
            }
            Err(e) => down.push(format!("{url}: {e}")),
        }
    }
    if seen.is_empty() {
        return Err(format!(
            "no replica of the first shard answered: {}",
            down.join("; ")
        ));
    }
    for d in &down {
        tracing::warn!(replica = %d, state = %format!("{db}.{STATE_TABLE}"), "exactly-once: a replica of the state's shard did not answer at start; its state table is created at a later start");
    }
    check_replicas(db, table, &seen).await?;
    let replicated = seen[0].target_engine.starts_with("Replicated");
    let total = seen.iter().map(|s| s.total_replicas).max().unwrap_or(0);
    let quorum = if replicated { quorum(total) } else { None };
    if let Some(q) = quorum {
        // Fewer copies of the state than the quorum: no write can succeed.
        let sql = format!(
            "SELECT total_replicas FROM system.replicas WHERE database = {} AND table = {}",
            quote(db),
            quote(STATE_TABLE)
        );
        let copies: u64 = (one_value(&seen[0].client, &sql).await?)
            .parse()
            .map_err(|e| format!("the replicas of {db}.{STATE_TABLE}: {e}"))?;
        if copies < q {
            return Err(format!(
                "{db}.{table} has {total} replicas, so the state's writes need {q}, but \
                 {db}.{STATE_TABLE} has {copies}: spate creates it on the replicas it is given that \
                 answer; list every replica (--shard URL,URL,...) and start while they answer, or create \
                 it on the others with what SHOW CREATE TABLE {db}.{STATE_TABLE} prints on {}",
                seen[0].url
            ));
        }
    }
    let clients = (seen.iter())
        .map(|s| {
            let settings = state_settings(s.client.features(), s.parallel, quorum, timeout);
            s.client.with_settings(&settings)
        })
        .collect();
    let version = (seen.iter().map(|s| s.client.features().version)).min();
    let prune = may_prune(version.unwrap_or((0, 0)), replicated);
    if !prune {
        tracing::info!(state = %format!("{db}.{STATE_TABLE}"), "exactly-once: old state rows are kept, not deleted: mutations of replicated tables crash servers before 20.1");
    }
    tracing::info!(state = %format!("{db}.{STATE_TABLE}"), replicas = seen.len(), replicated, quorum = ?quorum, prune, "exactly-once state table ready");
    Ok(StateHome { clients, prune })
}

/// The target's `engine_full`, its `uuid` where the path needs it, and its
/// `total_replicas` (0 unless replicated), on `client`.
async fn target_on(
    client: &ChClient,
    db: &str,
    table: &str,
) -> Result<(String, Option<String>, u64), String> {
    let facts = facts(client, db, table).await?;
    let engine = facts.engine_full;
    // One value of the target's row in a system table.
    let of_target = |column: &str, system: &str, name: &str| {
        format!(
            "SELECT {column} FROM system.{system} WHERE database = {} AND {name} = {}",
            quote(db),
            quote(table)
        )
    };
    let mut uuid = None;
    if replicated_args(&engine).is_some_and(|(p, _)| p.contains("{uuid}")) {
        let sql = of_target("toString(uuid)", "tables", "name");
        uuid = Some(one_value(client, &sql).await?);
    }
    let mut total = 0;
    if engine.starts_with("Replicated") {
        let sql = of_target("total_replicas", "replicas", "table");
        total = (one_value(client, &sql).await?)
            .parse()
            .map_err(|e| format!("the replicas of {db}.{table}: {e}"))?;
    }
    Ok((engine, uuid, total))
}

/// The one value `sql` answers, trimmed.
async fn one_value(client: &ChClient, sql: &str) -> Result<String, String> {
    let text = (client.fetch_text(sql, "TabSeparated").await).map_err(|e| e.to_string())?;
    Ok(text.trim().to_owned())
}

/// `CREATE TABLE IF NOT EXISTS` the state table on one replica, and add
/// the epoch column to a state table of a spate before fencing.
async fn create_on(
    client: &ChClient,
    db: &str,
    target_engine: &str,
    uuid: Option<&str>,
) -> Result<(), crate::client::ClientError> {
    let state = format!("{}.{STATE_TABLE}", ident(db));
    let engine = state_engine(target_engine, uuid);
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {state} {STATE_COLUMNS} ENGINE = {engine} {STATE_ORDER}"
    );
    client.execute(&sql, &[]).await?;
    // A state table of a spate before fencing has no epoch: its rows are
    // epoch 0, the rows of unfenced owners (see `fencing`).
    let has_epoch = client
        .fetch_text(
            &format!(
                "SELECT count() FROM system.columns WHERE database = {} AND table = {} AND name = 'epoch'",
                quote(db),
                quote(STATE_TABLE)
            ),
            "TabSeparated",
        )
        .await?;
    if has_epoch.trim() == "0" {
        let alter = format!("ALTER TABLE {state} ADD COLUMN epoch UInt64 DEFAULT 0");
        client.execute(&alter, &[]).await?;
    }
    Ok(())
}

/// Refuse a state table that is not replicated beside a replicated target,
/// or whose copies are not replicas of one another.
async fn check_replicas(db: &str, table: &str, seen: &[Seen]) -> Result<(), String> {
    let mut paths = Vec::new();
    for s in seen {
        let facts = facts(&s.client, db, STATE_TABLE).await?;
        let replicated_target = s.target_engine.starts_with("Replicated");
        match (replicated_target, replicated_args(&facts.engine_full)) {
            (true, None) => {
                return Err(format!(
                    "--delivery exactly-once: {db}.{table} is replicated but {db}.{STATE_TABLE} on {} is a {} \
                     (made by an older spate): its state would live on one replica only. Stop every member \
                     with SIGTERM (so that all they inserted is committed), then DROP TABLE {db}.{STATE_TABLE} \
                     on every replica; spate creates it replicated at its next start",
                    s.url, facts.engine
                ));
            }
            (true, Some((path, _))) => paths.push((s.url.clone(), path)),
            (false, _) => {}
        }
    }
    if let Some((first_url, first)) = paths.first() {
        if let Some((url, other)) = paths.iter().find(|(_, p)| p != first) {
            return Err(format!(
                "--delivery exactly-once: {db}.{STATE_TABLE} on {url} (ZooKeeper path {other}) is not a replica \
                 of the one on {first_url} ({first}); the state must be one replicated table"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_replicated_engines_path_and_replica() {
        let e = "ReplicatedMergeTree('/clickhouse/tables/db/t/shard1', 'r1') ORDER BY (a, b) SETTINGS x = 1";
        assert_eq!(
            replicated_args(e),
            Some(("/clickhouse/tables/db/t/shard1".into(), "r1".into()))
        );
        let e = "ReplicatedReplacingMergeTree('/p/{shard}/it\\'s', '{replica}', ver) ORDER BY k";
        assert_eq!(
            replicated_args(e),
            Some(("/p/{shard}/it's".into(), "{replica}".into()))
        );
        assert_eq!(replicated_args("MergeTree ORDER BY a"), None);
        assert_eq!(replicated_args("ReplicatedMergeTree ORDER BY a"), None);
    }

    #[test]
    fn the_state_is_replicated_beside_a_replicated_target() {
        let e = "ReplicatedMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}') ORDER BY a";
        assert_eq!(
            state_engine(e, Some("0b1c")),
            "ReplicatedReplacingMergeTree('/clickhouse/tables/0b1c/{shard}_spate_intents', '{replica}', epoch)"
        );
        assert_eq!(
            state_engine(
                "MergeTree ORDER BY a SETTINGS non_replicated_deduplication_window = 1000",
                None
            ),
            "ReplacingMergeTree(epoch)"
        );
    }

    #[test]
    fn a_replicated_state_is_not_mutated_before_20_1() {
        assert!(!may_prune((18, 16), true));
        assert!(!may_prune((19, 17), true));
        assert!(may_prune((20, 1), true));
        assert!(may_prune((26, 9), true));
        assert!(
            may_prune((18, 16), false),
            "a plain MergeTree state is pruned"
        );
    }

    #[test]
    fn writes_need_a_majority_and_reads_see_every_quorum_write() {
        assert_eq!(quorum(0), None);
        assert_eq!(quorum(1), None);
        assert_eq!(quorum(2), Some(2));
        assert_eq!(quorum(3), Some(2));
        assert_eq!(quorum(5), Some(3));
        let old = crate::schema::ServerFeatures::from_version("18.16.1").unwrap();
        let s = state_settings(old, false, Some(2), Duration::from_secs(10));
        let get = |k: &str| s.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("insert_quorum"), Some("2"));
        assert_eq!(get("insert_quorum_timeout"), Some("10000"));
        assert_eq!(get("select_sequential_consistency"), Some("1"));
        assert_eq!(get("async_insert"), None, "18.16 has no async_insert");
        assert_eq!(
            get("insert_quorum_parallel"),
            None,
            "18.16 has no insert_quorum_parallel"
        );
        let new = crate::schema::ServerFeatures::from_version("26.9.1").unwrap();
        let s = state_settings(new, true, Some(2), Duration::from_secs(10));
        assert!(s.contains(&("insert_quorum_parallel".into(), "0".into())));
        let s = state_settings(new, true, None, Duration::from_secs(10));
        assert!(s.contains(&("async_insert".into(), "0".into())));
        assert!(!s.iter().any(|(k, _)| k == "insert_quorum"));
    }
}
