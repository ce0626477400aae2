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
