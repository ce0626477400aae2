//! Memory with many partitions (issue 16 point 2).
//!
//! 64 partitions, `--max-buffered-bytes 64MiB`, a backlog of about 300 MB.
//! ClickHouse is frozen (SIGSTOP, `scripts/services.sh ch-pause`) for 20 s
//! mid-run. librdkafka keeps a prefetch queue per partition and the insert
//! worker holds extra copies of each batch in flight, so the budget only
//! holds if both are sized by it whatever the partition count: the peak
//! RSS (VmHWM from /proc) must stay within the budget plus 64 MiB. After
//! the stall every (partition, offset) is present and the committed
//! offsets are the end offsets.
//!
//! ClickHouse 18.16 only: it freezes the server, and a stalled server
//! looks the same to spate whatever its version.

use crate::support::*;
use std::time::Duration;

const N: usize = 400_000;
const PARTITIONS: i32 = 64;
const BUDGET_MIB: u64 = 64;
const STALL: Duration = Duration::from_secs(20);

#[test]
fn many_partitions_stay_within_the_memory_budget() {
    let Some(svc) = services() else { return };
    let script = svc.script();
    let _timer = Timer::start("e2e_memory_partitions");
    let _lock = ch_exclusive_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_mempart");
    let group = unique("g_mempart");
    let table = ch.fresh_offsets_table("e2e_mempart");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let filler = "m".repeat(700);
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
            "-X",
            "max.poll.interval.ms=10000",
        ]
        .map(String::from),
    );
    let mut running = spawn("mempart", &args);
    let pid = running.pid();
    ch.wait_rows(&table, 20_000, Duration::from_secs(90));
    assert!(
        !running.has_exited(),
        "finished before the stall could start"
    );
    let mut peak_kib = 0;
    running.through_frozen_clickhouse(&script, STALL, Duration::from_millis(250), || {
        peak_kib = peak_kib.max(peak_rss_kib(pid).unwrap_or(0));
    });
    running.sample_until_exit(Duration::from_secs(240), Duration::from_millis(100), || {
        peak_kib = peak_kib.max(peak_rss_kib(pid).unwrap_or(0));
    });
    let fin = running.wait(Duration::from_secs(5));
    let peak_mib = peak_kib / 1024;
    eprintln!(
        "[e2e_memory_partitions] peak RSS {peak_mib} MiB (budget {BUDGET_MIB} MiB + 64), exit {:?}",
        fin.code()
    );
    fin.assert_code(0);
    assert!(
        peak_kib <= (BUDGET_MIB + 64) * 1024,
        "peak RSS {peak_mib} MiB > {} MiB bound ({BUDGET_MIB} MiB budget + 64 MiB) with {PARTITIONS} partitions",
        BUDGET_MIB + 64
    );
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    assert_eq!(uniq, N as u64, "every (partition, offset) present");
    let committed = committed(&svc.brokers, &group, &topic, PARTITIONS);
    for (p, c) in committed.iter().enumerate() {
        assert_eq!(
            *c,
            Some(produced.counts[p]),
            "partition {p}: committed = end offset"
        );
    }
    ch.drop_database_of(&table);
}
