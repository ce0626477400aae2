//! End to end: exactly-once while ClickHouse is frozen past
//! `--insert-timeout` (issue 19, test 3).
//!
//! ClickHouse 26.9 is SIGSTOPped mid-run for 5 s, longer than
//! `--insert-timeout 1s`, with one block's insert sent into the freeze (the
//! `hold-before-send` fault point holds it until the server is stopped):
//! attempts time out, some of them land once the server is resumed, and
//! their retries (same block, same token) land again. Exactly-once: every offset present exactly once, committed = ends.
//! 26.9 only (its MergeTree with a deduplication window); holds the
//! exclusive ClickHouse lock, since the freeze would stall other tests.

use crate::support::*;
use std::time::Duration;

const N: usize = 30_000;
const PARTITIONS: i32 = 2;

#[test]
fn exactly_once_through_a_frozen_clickhouse() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let Some(pid_file) = svc.clickhouse_pid_file.clone() else {
        panic!("no PID file for the 26.9 server: run it with scripts/services.sh");
    };
    let _timer = Timer::start("e2e_exactly_once_freeze");
    let _lock = ch_exclusive_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_eos_freeze");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n UInt64, s String, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset) \
         SETTINGS non_replicated_deduplication_window = 10000"
    ));
    let topic = unique("t_eos_freeze");
    let group = unique("g_eos_freeze");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, numbered(PARTITIONS));
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--delivery",
            "exactly-once",
            "--until-end",
            "--batch-rows",
            "1000",
            "--flush-interval",
            "100ms",
            "--insert-timeout",
            "1s",
            "--insert-workers",
            "4",
        ]
        .map(String::from),
    );
    // The third block's worker waits, intent recorded and fence checked,
    // just before its first attempt, until the release file exists: it is
    // released into the freeze, so that insert is sent to a stopped server
    // and times out for certain (a freeze at a random instant mostly caught
    // workers in the intent record or fence check, three round trips per
    // block, and a CI run saw no insert time out at all).
    let held = Held::spawn("eos-freeze", &args, "hold-before-send", 3);
    kill_pid_file(&pid_file, libc::SIGSTOP);
    let resume = pid_file.clone();
    let mut undo = Undo::new(move || kill_pid_file(&resume, libc::SIGCONT));
    held.release();
    // The freeze itself: a fixed pause longer than --insert-timeout is the point.
    std::thread::sleep(Duration::from_secs(5));
    kill_pid_file(&pid_file, libc::SIGCONT);
    undo.disarm();
    let fin = held.proc.wait(Duration::from_secs(90));
    fin.assert_code(0);
    let timeouts = fin.stderr.matches("no answer within").count();
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    eprintln!(
        "[e2e_exactly_once_freeze] {count} rows, {uniq} distinct of {N}, {} duplicates; {timeouts} timed-out attempts",
        count - uniq
    );
    assert!(
        timeouts > 0,
        "no insert timed out during the freeze: the test tested nothing"
    );
    assert_eq!(uniq, N as u64, "every offset present");
    assert_eq!(count, uniq, "duplicates after the freeze");
    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(committed(&svc.brokers, &group, &topic, PARTITIONS), ends);
    ch.exec(&format!("DROP DATABASE {db}"));
}
