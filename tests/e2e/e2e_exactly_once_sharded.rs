//! End to end: `--delivery exactly-once` into a sharded table through
//! `kill -9` (issue 19, sharded tables).
//!
//! Two shards, the 18.16 cluster nodes a and b of `scripts/services.sh`
//! (`--shard a --shard b`, like `spate_two_shards`), each holding a
//! `ReplicatedMergeTree` on the suite's ZooKeeper, so each shard drops a
//! replayed part by its block hash. A producer writes slowly to 4
//! partitions while spate is killed with `kill -9` five times, each time a
//! moment after a shard took a part; then a bounded run loads the rest.
//! Over the union of both shards: every offset exactly once (0 duplicates,
//! 0 missing), committed = ends, and both shards hold rows. Run with a
//! shard key (a block's rows split by key hash into one part per shard)
//! and without one (each whole block to the shard its partition and first
//! offset pick). The negative control runs the keyed scenario at least
//! once and must show duplicates, so the check can fail.
//!
//! Nodes a and b are shared with `e2e_sharding` (test binaries run one at
//! a time); the scenarios here run one after the other and apart from the
//! other files' tests on the nodes (`cluster_lock`).

use crate::support::*;
use std::time::{Duration, Instant};

const N: usize = 30_000;
const PARTITIONS: i32 = 4;
const KILLS: usize = 5;

#[test]
fn exactly_once_keyed_shards_survive_kill9() {
    if let Some((dups, missing)) = scenario(true, "exactly-once") {
        assert_eq!((dups, missing), (0, 0), "keyed: (duplicates, missing)");
    }
}

#[test]
fn exactly_once_unkeyed_shards_survive_kill9() {
    if let Some((dups, missing)) = scenario(false, "exactly-once") {
        assert_eq!((dups, missing), (0, 0), "unkeyed: (duplicates, missing)");
    }
}

/// Negative control: the same kills at least once leave duplicates on the
/// shards, so the check above can fail.
#[test]
fn at_least_once_shards_duplicate_in_the_same_scenario() {
    if let Some((dups, missing)) = scenario(true, "at-least-once") {
        assert_eq!(missing, 0, "at-least-once lost rows");
        assert!(
            dups > 0,
            "no duplicates at least once: the scenario cannot tell the modes apart"
        );
    }
}

struct Nodes {
    nodes: Vec<Ch>,
    urls: Vec<String>,
    db: String,
}

impl Nodes {
    /// Rows of `table` over every node (0 for a node that does not answer).
    fn rows(&self, table: &str) -> u64 {
        (self.nodes.iter())
            .map(|n| {
                n.try_u64(&format!("SELECT count() FROM {table}"))
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Distinct (partition, offset) over both nodes, all rows, rows per node.
    fn union(&self, table: &str) -> (usize, u64, Vec<u64>) {
        let mut seen = std::collections::HashSet::new();
        let mut per = Vec::new();
        for n in &self.nodes {
            let rows = n.u64_rows(&format!("SELECT _partition, _offset FROM {table}"));
            per.push(rows.len() as u64);
            seen.extend(rows.into_iter().map(|r| (r[0], r[1])));
        }
        (seen.len(), per.iter().sum(), per)
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for n in &self.nodes {
            let _ = n.try_text(
                &format!("DROP DATABASE IF EXISTS {}", self.db),
                "TabSeparated",
            );
        }
    }
}

fn setup() -> Option<(Services, Nodes)> {
    let svc = services()?;
    let cluster = cluster().expect("SPATE_TEST_CLUSTER_URLS is not set: run `make services`");
    assert!(cluster.urls.len() >= 2, "two cluster nodes needed");
    let urls: Vec<String> = cluster.urls[..2].to_vec();
    let nodes: Vec<Ch> = urls.iter().map(|u| Ch::connect(u)).collect();
    let db = unique("e2e_eos_shard");
    for (i, n) in nodes.iter().enumerate() {
        n.exec(&format!("CREATE DATABASE {db}"));
        // One ZooKeeper path per shard: the shards are separate tables.
        n.exec(&format!(
            "CREATE TABLE {db}.t (n UInt64, s String, _partition UInt32, _offset UInt64) \
             ENGINE = ReplicatedMergeTree('/clickhouse/tables/{db}/t/shard{i}', 'r1') \
             ORDER BY (_partition, _offset) SETTINGS replicated_deduplication_window = 10000"
        ));
    }
    Some((svc, Nodes { nodes, urls, db }))
}

/// Five kills and a bounded run into the two shards; (duplicates,
/// missing) over their union, or `None` when the services are skipped.
fn scenario(keyed: bool, delivery: &str) -> Option<(u64, u64)> {
    let _lock = cluster_lock();
    let (svc, nodes) = setup()?;
    let what = format!("{delivery}-{}", if keyed { "keyed" } else { "unkeyed" });
    let _timer = Timer::start("e2e_exactly_once_sharded");
    let table = format!("{}.t", nodes.db);
    let topic = unique("t_eos_shard");
    let group = unique("g_eos_shard");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let producer = produce_paced(
        &svc.brokers,
        &topic,
        N,
        Duration::from_secs(25),
        numbered(PARTITIONS),
    );
    let mut args = run_args(&svc, &topic, &group, &table);
    let i = (args.iter())
        .position(|a| a == "--clickhouse-url")
        .expect("run_args passes --clickhouse-url");
    args.drain(i..i + 2);
    for url in &nodes.urls {
        args.extend(["--shard".to_string(), url.clone()]);
    }
    if keyed {
        args.extend(["--shard-key".to_string(), "n".to_string()]);
    }
    args.extend(
        [
            "--delivery",
            delivery,
            "--batch-rows",
            "400",
            "--flush-interval",
            "200ms",
        ]
        .map(String::from),
    );
    let mut exercised = 0;
    for k in 0..KILLS {
        let mut proc = spawn(&format!("eos-shard-{what}-{k}"), &args);
        let pause = Duration::from_millis(1200 + 350 * k as u64);
        std::thread::sleep(pause);
        let before = nodes.rows(&table);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(
                !proc.has_exited(),
                "run {k} exited: {}",
                proc.stderr_so_far()
            );
            if nodes.rows(&table) > before || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        proc.kill9();
        std::thread::sleep(Duration::from_millis(300));
        let committed = committed(&svc.brokers, &group, &topic, PARTITIONS);
        let table = table.as_str();
        let landed: u64 = (nodes.nodes.iter())
            .flat_map(|n| {
                committed.iter().enumerate().map(move |(p, c)| {
                    n.u64(&format!(
                        "SELECT count() FROM {table} WHERE _partition = {p} AND _offset >= {}",
                        c.unwrap_or(0)
                    ))
                })
            })
            .sum();
        exercised += landed;
        eprintln!("[e2e_exactly_once_sharded] {what}: kill {k} after {pause:?}; {landed} rows landed past the commit");
    }
    let delivered = producer.join();
    assert!(
        delivered.errors.is_empty(),
        "producer errors: {:?}",
        delivered.errors.len()
    );
    let mut last = args.clone();
    last.push("--until-end".into());
    let fin = run(
        &format!("eos-shard-{what}-bounded"),
        &last,
        Duration::from_secs(120),
    );
    fin.assert_code(0);
    let (uniq, rows, per) = nodes.union(&table);
    let ends = end_offsets(&svc.brokers, &topic, PARTITIONS);
    let total: i64 = ends.iter().sum();
    let committed = committed(&svc.brokers, &group, &topic, PARTITIONS);
    eprintln!(
        "[e2e_exactly_once_sharded] {what}: {rows} rows ({per:?} per shard), {uniq} distinct of {total}, {} duplicates; committed {committed:?}",
        rows - uniq as u64
    );
    assert_eq!(
        committed,
        ends.iter().map(|&e| Some(e)).collect::<Vec<_>>(),
        "committed = ends"
    );
    assert!(
        per.iter().all(|&r| r > 0),
        "{what}: a shard got no rows: {per:?}"
    );
    assert!(
        exercised > 0,
        "no kill left a landed part uncommitted: nothing had to be deduplicated"
    );
    Some((
        rows - uniq as u64,
        (total as u64).saturating_sub(uniq as u64),
    ))
}
