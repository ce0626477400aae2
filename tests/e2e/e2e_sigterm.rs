//! End to end: SIGTERM in the middle of a bounded run, and at start.
//!
//! 500 000 small messages on 4 partitions. A first `spate run --until-end`
//! is stopped with SIGTERM once at least 40% of the rows are in the table;
//! it must drain and exit 0, and the offsets it committed must never run
//! ahead of the rows present. A second run with the same group completes
//! the load: every (partition, offset) present, duplicates only where the
//! first run had inserted past its commit, committed offsets = end offsets.

// `is_multiple_of` is newer than the workspace's rust-version (1.85).
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

use crate::support::*;
use std::time::{Duration, Instant};

const N: usize = 500_000;
const PARTITIONS: i32 = 4;

on_both_servers!(sigterm_drains_commits_and_resumes);

fn sigterm_drains_commits_and_resumes(svc: Services) {
    let _timer = Timer::start("e2e_sigterm");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_sigterm");
    let group = unique("g_sigterm");
    let table = ch.fresh_offsets_table("e2e_sigterm");

    create_topic(&svc.brokers, &topic, PARTITIONS);
    let filler = "x".repeat(70);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: format!(r#"{{"n":{i},"s":"{filler}{i}"}}"#),
        timestamp_ms: None,
    });

    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--until-end",
            "--batch-rows",
            "20000",
            "--flush-interval",
            "200ms",
            // Streamed, but in short requests: rows become visible at a
            // request's end, and with the default 500 ms the first ones
            // showed when spate had read every message already, so the
            // SIGTERM came after the load (seen in CI).
            "--insert-request",
            "100ms",
            // A small budget paces the reads by the inserts: at the
            // default 256 MiB spate had read (and then drained) every
            // message by the time 40% were visible, under load from
            // other tests (seen locally: 420,000 visible at the signal).
            "--max-buffered-bytes",
            "16MiB",
        ]
        .map(String::from),
    );

    // Run 1: SIGTERM once >= 40% of the rows are in.
    let mut run1 = spawn("sigterm-run1", &args);
    let threshold = (N as u64) * 40 / 100;
    let deadline = Instant::now() + Duration::from_secs(120);
    let at_signal = loop {
        let rows = ch
            .try_u64(&format!("SELECT count() FROM {table}"))
            .unwrap_or(0);
        if rows >= threshold {
            break rows;
        }
        if run1.has_exited() {
            let fin = run1.wait(Duration::from_secs(1));
            panic!(
                "run 1 exited ({:?}) before {threshold} rows were in the table ({rows} are): \
                 the test could not send SIGTERM mid-run; stderr tail:\n{}",
                fin.status,
                fin.tail(30)
            );
        }
        assert!(
            Instant::now() < deadline,
            "only {rows} of {N} rows after 120 s; stderr tail:\n{}",
            run1.stderr_so_far()
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        !run1.has_exited(),
        "run 1 finished before SIGTERM could be sent"
    );
    run1.sigterm();
    eprintln!("[e2e_sigterm] SIGTERM sent with {at_signal} rows in the table");
    let fin1 = run1.wait(Duration::from_secs(60));
    fin1.assert_code(0);
    assert!(
        fin1.stderr.contains("pipeline finished"),
        "run 1: no `pipeline finished` in stderr:\n{}",
        fin1.tail(20)
    );

    let rows1 = ch.u64(&format!("SELECT count() FROM {table}"));
    let committed1 = committed(&svc.brokers, &group, &topic, PARTITIONS);
    eprintln!("[e2e_sigterm] after run 1: {rows1} rows, committed {committed1:?}");
    let c1 = assert_committed_prefix_present(&ch, &table, &committed1, "after SIGTERM");
    // Rows run 1 inserted at or past its commit: run 2 inserts them again.
    let mut beyond = 0u64;
    for (p, c) in c1.iter().enumerate() {
        beyond += ch.u64(&format!(
            "SELECT count() FROM {table} WHERE _partition = {p} AND _offset >= {c}"
        ));
    }
    let dups1 = rows1
        - ch.u64(&format!(
            "SELECT uniqExact(_partition, _offset) FROM {table}"
        ));
    assert!(
        rows1 < N as u64,
        "run 1 loaded everything ({rows1} rows): SIGTERM came too late to test anything"
    );

    // Run 2: same group, completes the load.
    let fin2 = run("sigterm-run2", &args, Duration::from_secs(180));
    fin2.assert_code(0);
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    let dups = count - uniq;
    eprintln!(
        "[e2e_sigterm] after run 2: {count} rows, {uniq} distinct offsets, {dups} duplicates \
         (run 1 left {beyond} rows past its commit, {dups1} duplicates of its own)"
    );
    assert_eq!(
        uniq, N as u64,
        "every (partition, offset) present after run 2"
    );
    assert!(dups <= N as u64, "duplicates {dups}");
    assert!(
        dups <= beyond + dups1,
        "{dups} duplicates, but only {beyond} rows were past run 1's commit (+{dups1} run-1 duplicates)"
    );
    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(
        committed(&svc.brokers, &group, &topic, PARTITIONS),
        ends,
        "committed offsets after run 2 vs end offsets"
    );
    eprintln!(
        "[e2e_sigterm] run 1 {:.1?}, run 2 {:.1?}",
        fin1.elapsed, fin2.elapsed
    );
    ch.drop_database_of(&table);
}

/// SIGTERM while spate waits for ClickHouse at start (it retries for 30 s):
/// nothing is in flight, so it exits at once (exit 0) rather than when the
/// start gives up. The signal is watched from the process's start (a
/// signal during a start again in the process must not be lost), so this
/// is the path that replaced the default action.
#[test]
fn a_signal_while_waiting_for_clickhouse_at_start_exits_at_once() {
    let Some(svc) = services() else { return };
    let topic = unique("t_sigterm_start");
    create_topic(&svc.brokers, &topic, 1);
    let mut args = run_args(&svc, &topic, &unique("g_sigterm_start"), "db.t");
    let at = args.iter().position(|a| a == "--clickhouse-url").unwrap() + 1;
    // Nothing listens there: connection refused, retried.
    args[at] = format!("http://127.0.0.1:{}", free_port());
    let spate = spawn("sigterm_at_start", &args);
    wait_for(
        "the start-up retry",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || {
            spate
                .stderr_so_far()
                .contains("ClickHouse not reachable at start; retrying")
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        },
    );
    let sent = Instant::now();
    spate.sigterm();
    let fin = spate.wait(Duration::from_secs(20));
    fin.assert_code(0);
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "exited {:?} after the signal, not at once",
        sent.elapsed()
    );
    assert!(
        fin.stderr
            .contains("signal received while no pipeline runs"),
        "{}",
        fin.tail(5)
    );
}
