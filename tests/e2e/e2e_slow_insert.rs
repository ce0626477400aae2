//! End to end (issue 16 point 10): inserts slower than `--insert-timeout`
//! on a plain MergeTree do not multiply rows.
//!
//! On ClickHouse 26.9, a table with `non_replicated_deduplication_window`
//! and a materialized view that sleeps 2 s per block, so every insert
//! takes longer than `--insert-timeout 1s`. A timed-out attempt keeps
//! running on the server and lands. spate must (a) grow the timeout of the
//! next attempt, so one attempt is eventually answered, and (b) send the
//! same `insert_deduplication_token` with every attempt, so the landed
//! earlier attempts and the answered one are one block. Checked: the run
//! saw timeouts (else it proves nothing), completes, and every offset is in
//! the table exactly once. Before the fix every attempt timed out after 1 s,
//! forever, each adding the batch again.
//!
//! Second test: the token also keeps ClickHouse from dropping a batch that
//! merely looks like an earlier one. Without a token, a table with a
//! deduplication window drops any block whose bytes match a recent block,
//! so batches of identical rows from different offsets were lost; with the
//! token (derived from the offsets) each batch counts once, as itself.
//!
//! 26.9 only: 18.16 has no token, and its plain MergeTree no deduplication
//! (there a ReplicatedMergeTree deduplicates the retry by its block hash).

use crate::support::*;
use std::time::{Duration, Instant};

const N: usize = 2_000;
const PARTITIONS: i32 = 2;

#[test]
fn slow_inserts_with_a_token_add_each_row_once() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _timer = Timer::start("e2e_slow_insert");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_slow");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n UInt64, s String, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset) \
         SETTINGS non_replicated_deduplication_window = 1000"
    ));
    ch.exec(&format!(
        "CREATE MATERIALIZED VIEW {db}.slow ENGINE = Null AS SELECT n, sleep(2) AS z FROM {table}"
    ));
    let topic = unique("t_slow");
    let group = unique("g_slow");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, numbered(PARTITIONS));
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--until-end",
            "--batch-rows",
            "1000",
            "--flush-interval",
            "300ms",
            "--insert-timeout",
            "1s",
            "--insert-workers",
            "1",
        ]
        .map(String::from),
    );
    let mut proc = spawn("slow-insert", &args);
    let deadline = Instant::now() + Duration::from_secs(90);
    while !proc.has_exited() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let hung = !proc.has_exited();
    let fin = if hung {
        proc.kill9()
    } else {
        proc.wait(Duration::from_secs(5))
    };
    // What landed, once the server finished the attempts still running.
    std::thread::sleep(Duration::from_secs(3));
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    let timeouts = fin.stderr.matches("no answer within").count();
    eprintln!(
        "[e2e_slow_insert] {count} rows, {uniq} distinct, {} duplicates; {timeouts} timed-out attempts; \
         exited by itself: {}",
        count - uniq,
        !hung
    );
    assert!(
        timeouts > 0 || fin.stderr.contains("timeout expired"),
        "no insert timed out: the scenario tested nothing; stderr:\n{}",
        fin.tail(30)
    );
    assert!(
        !hung,
        "the bounded run did not finish in 90 s ({count} rows, {uniq} distinct): \
         each attempt timed out and was retried; stderr:\n{}",
        fin.tail(30)
    );
    fin.assert_code(0);
    assert_eq!(uniq, N as u64, "every offset present");
    assert_eq!(count, uniq, "timed-out attempts landed as duplicates");
    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(committed(&svc.brokers, &group, &topic, PARTITIONS), ends);
    ch.exec(&format!("DROP DATABASE {db}"));
}

#[test]
fn identical_batches_from_different_offsets_all_land() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _timer = Timer::start("e2e_identical_batches");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_same");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (s String) ENGINE = MergeTree() ORDER BY tuple() \
         SETTINGS non_replicated_deduplication_window = 1000"
    ));
    let topic = unique("t_same");
    let group = unique("g_same");
    create_topic(&svc.brokers, &topic, 1);
    let n = 1_000;
    let produced = produce(&svc.brokers, &topic, 1, n, |_| Msg {
        partition: 0,
        key: None,
        payload: r#"{"s":"same"}"#.to_string(),
        timestamp_ms: None,
    });
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(["--until-end", "--batch-rows", "200"].map(String::from));
    let fin = run("identical-batches", &args, Duration::from_secs(60));
    fin.assert_code(0);
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    eprintln!("[e2e_identical_batches] {count} of {n} rows");
    assert_eq!(
        count, n as u64,
        "batches identical in content but from other offsets were dropped as duplicates"
    );
    assert_eq!(
        committed(&svc.brokers, &group, &topic, 1),
        vec![Some(produced.counts[0])]
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}
