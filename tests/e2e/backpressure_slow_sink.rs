//! Backpressure against a stalled ClickHouse, on a 2M-message backlog.
//!
//! ClickHouse is frozen (SIGSTOP) for 30 s mid-run. During the stall the
//! lanes-paused gauge must rise above zero, spate must stay in its group
//! (no revocation, no second assignment, although `max.poll.interval.ms` is
//! only 10 s), and its peak RSS (VmHWM from /proc) must stay within
//! `--max-buffered-bytes` plus 64 MiB. Afterwards every (partition, offset)
//! is present and the committed offsets are the end offsets.
//!
//! ClickHouse 18.16 only: it freezes the server with `scripts/services.sh
//! ch-pause`, and a stalled server looks the same to spate whatever its
//! version; a second 2M-message run would add minutes and no coverage.

#![allow(unknown_lints, clippy::manual_is_multiple_of)]

use crate::support::*;
use std::time::Duration;

const N: usize = 2_000_000;
const PARTITIONS: i32 = 4;
const BUDGET_MIB: u64 = 64;
const STALL: Duration = Duration::from_secs(30);

#[test]
fn stalled_clickhouse_pauses_lanes_keeps_membership_and_bounds_memory() {
    let Some(svc) = services() else { return };
    let script = svc.services_sh.clone().expect(
        "SPATE_SERVICES_SH: this test freezes ClickHouse with scripts/services.sh ch-pause",
    );
    let _timer = Timer::start("backpressure_slow_sink");
    let _lock = ch_exclusive_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_slow");
    let group = unique("g_slow");
    let table = ch.fresh_offsets_table("slow_sink");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let filler = "y".repeat(150);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: format!(r#"{{"n":{i},"s":"{filler}{i}"}}"#),
        timestamp_ms: None,
    });

    let port = free_port();
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--until-end",
            "--drivers",
            "2",
            "--batch-rows",
            "20000",
            "--flush-interval",
            "200ms",
            "--insert-timeout",
            "5s",
            "--max-buffered-bytes",
            &format!("{BUDGET_MIB}MiB"),
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
            "-X",
            "max.poll.interval.ms=10000",
        ]
        .map(String::from),
    );
    let mut running = spawn("slow-sink", &args);
    let pid = running.pid();

    ch.wait_rows(&table, 100_000, Duration::from_secs(90));
    assert!(
        !running.has_exited(),
        "finished before the stall could start"
    );

    let mut max_paused = 0;
    let mut peak_kib = 0;
    running.through_frozen_clickhouse(&script, STALL, Duration::from_millis(250), || {
        if let Some(m) = http_get(port, "/metrics") {
            max_paused = max_paused.max(gauge(&m, "spate_lanes_paused").unwrap_or(0));
        }
        peak_kib = peak_kib.max(peak_rss_kib(pid).unwrap_or(0));
    });
    // Keep sampling the peak until the run ends.
    running.sample_until_exit(Duration::from_secs(180), Duration::from_millis(100), || {
        peak_kib = peak_kib.max(peak_rss_kib(pid).unwrap_or(0));
    });
    let fin = running.wait(Duration::from_secs(5));
    fin.assert_code(0);

    let assigned = fin.stderr.matches("partition assigned").count();
    let revoked = fin.stderr.matches("partitions revoked").count();
    let peak_mib = peak_kib / 1024;
    eprintln!(
        "[backpressure_slow_sink] lanes paused (max) {max_paused}, peak RSS {peak_mib} MiB \
         (budget {BUDGET_MIB} MiB + 64), assignments {assigned}, revocations {revoked}"
    );
    assert!(
        max_paused > 0,
        "lanes were never paused during a {STALL:?} stall"
    );
    assert_eq!(
        revoked,
        0,
        "a rebalance happened during the stall:\n{}",
        fin.tail(40)
    );
    assert_eq!(
        assigned, PARTITIONS as usize,
        "partitions were assigned more than once"
    );
    assert!(
        peak_kib <= (BUDGET_MIB + 64) * 1024,
        "peak RSS {peak_mib} MiB exceeds the {BUDGET_MIB} MiB budget plus 64 MiB"
    );

    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    eprintln!(
        "[backpressure_slow_sink] {count} rows, {uniq} distinct, {} duplicates",
        count - uniq
    );
    assert_eq!(uniq, N as u64, "every (partition, offset) present");
    let committed = committed(&svc.brokers, &group, &topic, PARTITIONS);
    for (p, c) in committed.iter().enumerate() {
        assert_eq!(
            *c,
            Some(produced.counts[p]),
            "partition {p}: committed = end offset"
        );
    }
}
