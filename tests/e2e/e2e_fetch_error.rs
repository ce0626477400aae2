//! End to end: a consume error that cannot clear fails the pipeline with one
//! line naming the topic and partition, instead of a warning logged forever
//! (with which a bounded run never ends).
//!
//! The condition is a real one: a new group (no committed offset) with
//! `auto.offset.reset=error`, so librdkafka has no position to start from,
//! puts `__AUTO_OFFSET_RESET` on the partition's queue and never fetches it. (An unsupported codec would
//! be the other natural case, but librdkafka here reads every codec and the
//! broker refuses batches it cannot decode.) Which codes are permanent, and
//! the deadline for transient ones, are unit-tested in
//! `connectors/kafka/src/fetch_error.rs`. Kafka-side only: on 18.16.

use crate::support::*;
use std::time::{Duration, Instant};

#[test]
fn no_start_position_with_reset_forbidden_fails_the_bounded_run() {
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _lock = ch_shared_lock();
    let _timer = Timer::start("e2e_fetch_error");
    let ch = Ch::connect(&svc.clickhouse_url);
    let table = ch.fresh_offsets_table("e2e_fetch_error");
    let (topic, group) = (unique("t_fetch_error"), unique("g_fetch_error"));
    create_topic(&svc.brokers, &topic, 1);
    produce(&svc.brokers, &topic, 1, 10, |i| Msg {
        partition: 0,
        key: None,
        payload: format!(r#"{{"n": {i}, "s": "m{i}"}}"#),
        timestamp_ms: None,
    });

    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend([
        "--until-end".into(),
        "-X".into(),
        "auto.offset.reset=error".into(),
    ]);
    let started = Instant::now();
    let finished = run("fetch_error", &args, Duration::from_secs(60));
    let elapsed = started.elapsed();
    eprintln!("[timing] fetch_error: exited after {elapsed:.1?}");
    finished.assert_code(1);
    assert!(
        elapsed < Duration::from_secs(30),
        "took {elapsed:.1?} to fail; stderr tail:\n{}",
        finished.tail(20)
    );
    let last = finished.last_line();
    assert!(
        last.starts_with("spate: error:")
            && last.contains(&format!("topic {topic} partition 0"))
            && last.contains("auto.offset.reset=error"),
        "one line naming the topic, the partition and why: {last}"
    );
    let warnings = finished
        .stderr
        .matches("fetch error; librdkafka retries")
        .count();
    assert_eq!(
        warnings,
        0,
        "a permanent error is not retried:\n{}",
        finished.tail(20)
    );
    assert_eq!(ch.u64(&format!("SELECT count() FROM {table}")), 0);
    assert_eq!(
        committed(&svc.brokers, &group, &topic, 1),
        vec![None],
        "nothing committed"
    );
    ch.drop_database_of(&table);
}

/// librdkafka has delivered a partition's messages a second time after a
/// resume around a cooperative rebalance (confluentinc/librdkafka#4637; the
/// rebalance storm once found 180 rows of one partition twice in a member
/// that kept the partition throughout, with nothing reported). A lane
/// cannot tell such a re-fetch from an offset reset after a log truncation
/// (other messages at the same offsets), so it delivers them and reports
/// how many. Here a lane seeks its own partition back once it has
/// delivered 3,000 messages (test-only `SPATE_FAULT=refetch`): every row
/// present, and exactly as many duplicates as spate reported.
#[test]
fn messages_the_consumer_delivers_again_are_reported() {
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _lock = ch_shared_lock();
    let _timer = Timer::start("e2e_refetch");
    let ch = Ch::connect(&svc.clickhouse_url);
    let table = ch.fresh_offsets_table("e2e_refetch");
    let (count, uniq, reported) = refetched(&svc, &ch, &table, &[]);
    assert!(reported > 0, "the seek back delivered nothing again");
    assert_eq!(count - uniq, reported, "duplicates vs what spate reported");
    ch.drop_database_of(&table);
}

/// The same re-fetch with `--delivery exactly-once` (the rebalance storm
/// with eager assignment once found duplicates there): an offset is a
/// message's identity in that mode (the replay after a restart rests on
/// it), so a lane's writer drops the offsets it has already written and
/// the table holds every offset once.
#[test]
fn messages_the_consumer_delivers_again_are_written_once_exactly_once() {
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _lock = ch_shared_lock();
    let _timer = Timer::start("e2e_refetch_exactly_once");
    let ch = Ch::connect(&svc.clickhouse_url);
    let (_, table) = ch.deduplicating_table(false, "e2e_refetch_eos", 0, Some(10_000));
    let (count, uniq, reported) = refetched(&svc, &ch, &table, &["--delivery", "exactly-once"]);
    assert!(reported > 0, "the seek back delivered nothing again");
    assert_eq!(count, uniq, "exactly-once wrote re-delivered offsets twice");
    ch.drop_database_of(&table);
}

/// Run one bounded member into `table` whose lanes each seek back once
/// after 3,000 messages: `(rows, distinct offsets, reported re-deliveries)`,
/// every offset present.
fn refetched(svc: &Services, ch: &Ch, table: &str, extra: &[&str]) -> (u64, u64, u64) {
    const PARTITIONS: i32 = 2;
    const N: usize = 20_000;
    let (topic, group) = (unique("t_refetch"), unique("g_refetch"));
    create_topic(&svc.brokers, &topic, PARTITIONS);
    produce(&svc.brokers, &topic, PARTITIONS, N, numbered(PARTITIONS));

    let mut args = run_args(svc, &topic, &group, table);
    args.extend(
        [
            "--until-end",
            "--batch-rows",
            "1000",
            "--log-format",
            "json",
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(|a| a.to_string()));
    let fin = spawn_with_env(
        "refetch",
        &args,
        &[("SPATE_FAULT", "refetch"), ("SPATE_FAULT_AT", "3000")],
    )
    .wait(Duration::from_secs(90));
    fin.assert_code(0);
    assert!(
        fin.stderr.contains("fault: lane seeks its partition back"),
        "the fault did not fire:\n{}",
        fin.tail(20)
    );
    let reported = fin.redelivered();
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    eprintln!("[e2e_refetch] {count} rows, {uniq} distinct, {reported} reported delivered again");
    assert_eq!(uniq, N as u64, "every offset present");
    assert_eq!(
        committed(&svc.brokers, &group, &topic, PARTITIONS),
        vec![Some((N / PARTITIONS as usize) as i64); PARTITIONS as usize],
        "committed = end offsets"
    );
    (count, uniq, reported)
}
