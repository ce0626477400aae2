//! End to end: exactly-once with the process dying at forced points around
//! an insert (issue 19, test 2), through the test-only fault hook
//! (`SPATE_FAULT`, compiled into debug builds only; see
//! `connectors/clickhouse/src/sink/fault.rs`):
//! - `before-send`: the block's intent is recorded, the insert not sent;
//! - `during-insert`: the process dies a few milliseconds into the insert;
//! - `after-ack`: ClickHouse confirmed the insert, spate has neither
//!   acknowledged nor committed it (the replay must be dropped by ClickHouse).
//!
//! Each: a run that aborts at the third block, then a bounded run of a fresh
//! process: every offset exactly once, committed = ends. On 26.9 (token,
//! MergeTree with a window) and 18.16 (block hash, ReplicatedMergeTree on
//! the suite's ZooKeeper).

use crate::support::*;
use std::time::Duration;

const N: usize = 6_000;
const PARTITIONS: i32 = 2;

on_both_servers!(exactly_once_through_forced_kill_points);

fn exactly_once_through_forced_kill_points(svc: Services) {
    let _timer = Timer::start("e2e_exactly_once_faults");
    let _lock = ch_shared_lock();
    for point in ["before-send", "during-insert", "after-ack"] {
        let (count, uniq, landed) = one_point(&svc, point);
        eprintln!(
            "[e2e_exactly_once_faults] {point}: {count} rows, {uniq} distinct of {N}, {} duplicates; \
             {landed} rows had landed past the commit at the abort",
            count - uniq
        );
        assert_eq!(uniq, N as u64, "{point}: every offset present");
        assert_eq!(count, uniq, "{point}: duplicates");
        if point == "after-ack" {
            assert!(
                landed > 0,
                "after-ack: the aborted insert should have landed"
            );
        }
    }
}

/// Returns (rows, distinct offsets, rows past the commit after the abort).
fn one_point(svc: &Services, point: &str) -> (u64, u64, u64) {
    let ch = Ch::connect(&svc.clickhouse_url);
    let (db, table) = ch.deduplicating_table(svc.is_modern(), "e2e_eos_fault", 1000, None);
    let topic = unique("t_eos_fault");
    let group = unique("g_eos_fault");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, numbered(PARTITIONS));
    let mut args = run_args(svc, &topic, &group, &table);
    args.extend(
        [
            "--delivery",
            "exactly-once",
            "--batch-rows",
            "500",
            "--insert-workers",
            "1",
            "--until-end",
        ]
        .map(String::from),
    );
    let aborted = spawn_with_env(
        &format!("eos-fault-{point}"),
        &args,
        &[("SPATE_FAULT", point), ("SPATE_FAULT_AT", "3")],
    )
    .wait(Duration::from_secs(60));
    assert!(
        aborted.code() != Some(0) && aborted.stderr.contains("test fault"),
        "{point}: the run did not die at the fault point: {}",
        aborted.tail(20)
    );
    std::thread::sleep(Duration::from_millis(300));
    let committed1 = committed(&svc.brokers, &group, &topic, PARTITIONS);
    let c = assert_committed_prefix_present(&ch, &table, &committed1, point);
    let landed: u64 = c
        .iter()
        .enumerate()
        .map(|(p, c)| {
            ch.u64(&format!(
                "SELECT count() FROM {table} WHERE _partition = {p} AND _offset >= {c}"
            ))
        })
        .sum();
    let fin = run(
        &format!("eos-fault-{point}-rerun"),
        &args,
        Duration::from_secs(90),
    );
    fin.assert_code(0);
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(
        committed(&svc.brokers, &group, &topic, PARTITIONS),
        ends,
        "{point}: committed = ends"
    );
    ch.exec(&format!("DROP DATABASE {db}"));
    (count, uniq, landed)
}
