//! End to end (issue 29 point 2): exactly-once state that survives a
//! replica. One shard with two replicas, the 18.16 cluster nodes a and b
//! (`--shard a,b`), the target a `ReplicatedMergeTree` on both.
//!
//! A run dies right after ClickHouse took its third block (the test-only
//! `after-ack` fault point: landed, neither acknowledged nor committed).
//! Replica a, where the state used to live alone (the first replica that
//! answered), is then stopped, and a fresh process starts with other batch
//! limits while it is away. Before, it created an empty state table on b,
//! read no history, cut the landed block's offsets differently and
//! inserted them again. Now the state table is replicated with the data
//! (quorum writes, sequentially consistent reads): the new owner waits
//! for the quorum (one of two replicas is not enough) and, once a is back,
//! replays the recorded blocks at their offsets: every offset once over
//! both replicas, committed = ends.

use crate::support::*;
use std::time::{Duration, Instant};

const N: usize = 6_000;
const PARTITIONS: i32 = 2;

#[test]
fn exactly_once_state_survives_a_replica_stopped_at_restart() {
    // Locked first: an outage test stops the suite's server while it holds
    // the lock exclusively, and services_on waits for it to answer.
    let _ch = ch_shared_lock();
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let cluster = cluster().expect("SPATE_TEST_CLUSTER_URLS is not set: run `make services`");
    let _nodes = cluster_lock();
    let _timer = Timer::start("e2e_exactly_once_replicas");
    let urls: Vec<String> = cluster.urls[..2].to_vec();
    let nodes: Vec<Ch> = urls.iter().map(|u| Ch::connect(u)).collect();
    let db = unique("e2e_eos_repl");
    let table = format!("{db}.t");
    for (n, name) in nodes.iter().zip(["a", "b"]) {
        n.exec(&format!("CREATE DATABASE {db}"));
        n.exec_idempotent(
            &format!(
                "CREATE TABLE IF NOT EXISTS {table} (n UInt64, s String, _partition UInt32, _offset UInt64) \
                 ENGINE = ReplicatedMergeTree('/clickhouse/tables/{db}/t', '{name}') \
                 ORDER BY (_partition, _offset) SETTINGS replicated_deduplication_window = 10000"
            ),
            Duration::from_secs(120),
        );
    }
    let mut restart_a = Undo::new(|| cluster.node(0, "start"));
    let topic = unique("t_eos_repl");
    let group = unique("g_eos_repl");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, numbered(PARTITIONS));
    let mut args = run_args(&svc, &topic, &group, &table);
    // The servers are the shard's replicas, not the suite's server.
    let at = (args.iter().position(|a| a == "--clickhouse-url"))
        .expect("run_args passes --clickhouse-url");
    args.drain(at..at + 2);
    let shard = urls.join(",");
    args.extend(
        [
            "--shard",
            &shard,
            "--delivery",
            "exactly-once",
            "--insert-workers",
            "1",
            "--until-end",
        ]
        .map(String::from),
    );
    let mut first = args.clone();
    first.extend(["--batch-rows".to_string(), "500".to_string()]);
    let aborted = spawn_with_env(
        "eos-repl-abort",
        &first,
        &[("SPATE_FAULT", "after-ack"), ("SPATE_FAULT_AT", "3")],
    )
    .wait(Duration::from_secs(60));
    assert!(
        aborted.code() != Some(0) && aborted.stderr.contains("test fault"),
        "the run did not die at the fault point: {}",
        aborted.tail(20)
    );
    // The landed blocks and the state reached replica b.
    let on_a = nodes[0].u64(&format!("SELECT count() FROM {table}"));
    wait_for(
        "replica b to hold what a holds",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || match nodes[1].try_u64(&format!("SELECT count() FROM {table}")) {
            Ok(n) if n == on_a => Ok(()),
            other => Err(format!("{other:?} of {on_a}")),
        },
    );
    let state_on_b = nodes[1].u64(&format!("SELECT count() FROM {db}.spate_intents"));
    let committed1 = committed(&svc.brokers, &group, &topic, PARTITIONS);
    let landed: u64 = (committed1.iter().enumerate())
        .map(|(p, c)| {
            nodes[0].u64(&format!(
                "SELECT count() FROM {table} WHERE _partition = {p} AND _offset >= {}",
                c.unwrap_or(0)
            ))
        })
        .sum();
    eprintln!(
        "[e2e_exactly_once_replicas] aborted with {on_a} rows in, {landed} past the commit {committed1:?}; \
         {state_on_b} state rows on replica b"
    );
    assert!(
        landed > 0,
        "the aborted insert should have landed past the commit"
    );
    assert!(state_on_b > 0, "the state is not on replica b");

    // Replica a goes away; a new process, other batch limits.
    cluster.node(0, "stop");
    let mut rerun = args.clone();
    rerun.extend(["--batch-rows".to_string(), "700".to_string()]);
    let proc = spawn("eos-repl-rerun", &rerun);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(6));
    cluster.node(0, "start");
    restart_a.disarm();
    let fin = proc.wait(Duration::from_secs(120));
    fin.assert_code(0);
    eprintln!(
        "[e2e_exactly_once_replicas] the rerun finished {:.1?} after it started (replica a away for 6 s)",
        started.elapsed()
    );
    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(committed(&svc.brokers, &group, &topic, PARTITIONS), ends);
    for (n, name) in nodes.iter().zip(["a", "b"]) {
        let (count, uniq) = wait_for(
            &format!("replica {name} to catch up"),
            Duration::from_secs(30),
            Duration::from_millis(200),
            || {
                let count = n.try_u64(&format!("SELECT count() FROM {table}"))?;
                let uniq = n.try_u64(&format!(
                    "SELECT uniqExact(_partition, _offset) FROM {table}"
                ))?;
                if uniq == N as u64 {
                    Ok((count, uniq))
                } else {
                    Err(format!("{count} rows, {uniq} distinct"))
                }
            },
        );
        eprintln!(
            "[e2e_exactly_once_replicas] replica {name}: {count} rows, {uniq} distinct of {N}"
        );
        assert_eq!(count, uniq, "replica {name}: duplicates");
    }
    for n in &nodes {
        let _ = n.try_text(&format!("DROP DATABASE IF EXISTS {db}"), "TabSeparated");
    }
}
