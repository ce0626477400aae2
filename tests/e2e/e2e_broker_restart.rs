//! End to end: the Kafka broker itself crashes in the middle of a run.
//!
//! A producer thread writes 200 000 messages to 4 partitions over 20 s while
//! one spate consumes them (`--commit-interval 500ms`). Once rows and a first
//! commit are in, the broker is killed with `kill -9` (`services.sh
//! kafka-kill`), stays down 4 s (connections refused; spate's consumer and
//! the producer retry) and is started again on the same sqlite storage
//! (`kafka-start`): its messages and committed offsets survive.
//!
//! spate must still be running during the outage, reconnect, take in
//! everything the producer wrote, and stop cleanly on SIGTERM (exit 0), with:
//! - zero loss: every acknowledged message (by its `n`) and every offset
//!   below each partition's end in the table;
//! - committed never past the acknowledged prefix: every committed offset
//!   read (before the kill, right after the restart, and while catching up)
//!   has every offset below it in the table, and the commits read back after
//!   the restart are not behind the ones read before the kill (the broker
//!   kept them);
//! - at the end, committed = end offsets.
//!
//! The broker taken away is the suite's durable one (sqlite storage,
//! `SPATE_TEST_KAFKA_DURABLE_BROKERS`), which no other test uses; the
//! suite's main broker keeps its data in memory for speed (see
//! `scripts/broker.sh`). The test still holds the exclusive services lock
//! ([`ch_exclusive_lock`]), so the load it measures is its own.

use crate::support::*;
use std::process::Command;
use std::time::{Duration, Instant};

const N: usize = 200_000;
const PARTITIONS: i32 = 4;
const PRODUCE_FOR: Duration = Duration::from_secs(20);
const DOWN_FOR: Duration = Duration::from_secs(4);

/// The group's committed offsets (0 for none), each checked to have every
/// offset below it in `table` (`when` names the moment in a failure).
fn checked_commits(
    svc: &Services,
    ch: &Ch,
    table: &str,
    group: &str,
    topic: &str,
    when: &str,
) -> Vec<u64> {
    let c = committed(&svc.brokers, group, topic, PARTITIONS);
    assert_committed_prefix_present(ch, table, &c, when)
}

#[test]
fn broker_killed_and_restarted_mid_run() {
    let Some(mut svc) = services() else { return };
    svc.brokers = std::env::var("SPATE_TEST_KAFKA_DURABLE_BROKERS").expect(
        "SPATE_TEST_KAFKA_DURABLE_BROKERS is not set: run `make services` and source build/services.env",
    );
    let script = svc.script();
    let _timer = Timer::start("e2e_broker_restart");
    let _lock = ch_exclusive_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_brestart");
    let group = unique("g_brestart");
    let table = ch.fresh_offsets_table("e2e_brestart");
    create_topic(&svc.brokers, &topic, PARTITIONS);

    let producer = produce_paced(&svc.brokers, &topic, N, PRODUCE_FOR, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: format!(r#"{{"n":{i},"s":"restart-{i}"}}"#),
        timestamp_ms: None,
    });
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--batch-rows",
            "5000",
            "--flush-interval",
            "200ms",
            "--commit-interval",
            "500ms",
        ]
        .map(String::from),
    );
    let mut running = spawn("brestart", &args);

    // Mid-run: rows in, something committed, the producer still going.
    let before = wait_for(
        "rows and a first commit",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            let rows = ch.try_u64(&format!("SELECT count() FROM {table}"))?;
            let c = committed(&svc.brokers, &group, &topic, PARTITIONS);
            let sum: i64 = c.iter().map(|o| o.unwrap_or(0)).sum();
            if rows >= (N / 10) as u64 && sum > 0 {
                Ok(c)
            } else {
                Err(format!("{rows} rows, committed {c:?}"))
            }
        },
    );
    let before = assert_committed_prefix_present(&ch, &table, &before, "before the kill");
    assert!(
        !producer.is_done() && !running.has_exited(),
        "the producer or spate finished before the broker could be killed: the restart tests nothing"
    );

    let mut guard = Undo::new(|| {
        eprintln!("[test] restarting the broker after a failure");
        let _ = Command::new(&script).arg("kafka-start").status();
    });
    services_sh(&script, "kafka-kill");
    let killed = Instant::now();
    let rows_at_kill = ch.u64(&format!("SELECT count() FROM {table}"));
    eprintln!(
        "[e2e_broker_restart] broker killed (kill -9) with {rows_at_kill} rows in, committed {before:?}"
    );
    // The outage itself: a fixed pause is the point of this test.
    std::thread::sleep(DOWN_FOR);
    assert!(
        !running.has_exited(),
        "spate exited while the broker was down:\n{}",
        running.stderr_so_far()
    );
    services_sh(&script, "kafka-start");
    guard.disarm();
    eprintln!(
        "[e2e_broker_restart] broker back after {:.1?} down",
        killed.elapsed()
    );

    // The broker kept the commits, and they never ran ahead of the rows.
    let after = checked_commits(&svc, &ch, &table, &group, &topic, "right after the restart");
    for (p, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            a >= b,
            "partition {p}: committed {a} after the restart, {b} before the kill: the broker lost commits"
        );
    }

    // spate reconnects and takes in everything; every commit seen on the way
    // is within the rows.
    let ends = wait_for(
        "spate to commit the end of every partition",
        Duration::from_secs(240),
        Duration::from_millis(500),
        || {
            let c = checked_commits(&svc, &ch, &table, &group, &topic, "while catching up");
            if !producer.is_done() {
                return Err(format!("producing; committed {c:?}"));
            }
            let ends = end_offsets(&svc.brokers, &topic, PARTITIONS);
            let want: Vec<u64> = ends.iter().map(|&e| e as u64).collect();
            if c == want {
                Ok(ends)
            } else {
                Err(format!("committed {c:?}, ends {ends:?}"))
            }
        },
    );
    assert!(!running.has_exited(), "spate exited before being stopped");
    running.sigterm();
    let fin = running.wait(Duration::from_secs(60));
    fin.assert_code(0);
    let delivered = producer.join();

    let ch = Ch::connect(&svc.clickhouse_url);
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    let uniq_n = ch.u64(&format!("SELECT uniqExact(n) FROM {table}"));
    let total: i64 = ends.iter().sum();
    eprintln!(
        "[e2e_broker_restart] {count} rows, {uniq} distinct offsets of {total} in the topic \
         (ends {ends:?}), {uniq_n} distinct messages of {} acknowledged; spate took {:.1?}",
        delivered.acked.len(),
        fin.elapsed
    );
    assert!(
        delivered.errors.is_empty(),
        "{} messages failed to produce across the restart, first: {:?}",
        delivered.errors.len(),
        &delivered.errors[..delivered.errors.len().min(3)]
    );
    assert_eq!(delivered.acked.len(), N, "every message acknowledged");
    assert!(count > rows_at_kill, "no rows arrived after the restart");
    for (p, &end) in ends.iter().enumerate() {
        let present = ch.u64(&format!(
            "SELECT uniqExact(_offset) FROM {table} WHERE _partition = {p} AND _offset < {end}"
        ));
        assert_eq!(
            present, end as u64,
            "partition {p}: every offset below the end {end}"
        );
    }
    assert_eq!(uniq, total as u64, "no offset beyond the ends");
    assert_eq!(uniq_n, N as u64, "every acknowledged message in the table");
    let last = committed(&svc.brokers, &group, &topic, PARTITIONS);
    assert_eq!(
        last,
        ends.iter().map(|&e| Some(e)).collect::<Vec<_>>(),
        "committed = end offsets after the stop"
    );
    ch.drop_database_of(&table);
}
