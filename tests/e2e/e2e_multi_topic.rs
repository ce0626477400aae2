//! End to end: several topics into one table (`--topic` repeated), with
//! `_topic` telling them apart, and unknown keys ignored by default but
//! rejected under `--strict`.

use crate::support::*;
use std::time::Duration;

const PER_TOPIC: usize = 30_000;

on_both_servers!(two_topics_feed_one_table_and_strict_rejects_unknown_keys);

fn two_topics_feed_one_table_and_strict_rejects_unknown_keys(svc: Services) {
    let _timer = Timer::start("e2e_multi_topic");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_multi");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n UInt64, _topic String, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_topic, _partition, _offset)"
    ));
    let topics = [unique("t_multi_a"), unique("t_multi_b")];
    let mut counts = Vec::new();
    for (k, topic) in topics.iter().enumerate() {
        create_topic(&svc.brokers, topic, 2);
        let produced = produce(&svc.brokers, topic, 2, PER_TOPIC, |i| Msg {
            partition: (i % 2) as i32,
            key: None,
            // `extra` is not a column: ignored unless --strict.
            payload: format!(r#"{{"n":{},"extra":"x"}}"#, k * PER_TOPIC + i),
            timestamp_ms: None,
        });
        counts.push(produced.counts);
    }
    let group = unique("g_multi");
    let mut args = run_args(&svc, &topics[0], &group, &table);
    args.extend(["--topic", &topics[1], "--until-end"].map(String::from));
    run("multi", &args, Duration::from_secs(120)).assert_code(0);

    for (k, topic) in topics.iter().enumerate() {
        let rows = ch.u64_rows(&format!(
            "SELECT uniqExact(_partition, _offset), min(n), max(n) FROM {table} WHERE _topic = '{topic}'"
        ));
        let lo = (k * PER_TOPIC) as u64;
        assert_eq!(
            rows[0],
            vec![PER_TOPIC as u64, lo, lo + PER_TOPIC as u64 - 1],
            "{topic}"
        );
        let committed = committed(&svc.brokers, &group, topic, 2);
        for p in 0..2 {
            assert_eq!(
                committed[p],
                Some(counts[k][p]),
                "{topic}/{p}: committed = end offset"
            );
        }
    }
    assert_eq!(
        ch.u64(&format!("SELECT count() FROM {table}")),
        2 * PER_TOPIC as u64
    );

    // --strict: the first message's unknown key stops the run, naming it.
    let strict_db = ch.fresh_db("e2e_strict");
    let strict_table = format!("{strict_db}.t");
    ch.exec(&format!(
        "CREATE TABLE {strict_table} (n UInt64, _partition UInt32, _offset UInt64) ENGINE = MergeTree() ORDER BY n"
    ));
    let mut args = run_args(&svc, &topics[0], &unique("g_strict"), &strict_table);
    args.extend(["--until-end", "--strict"].map(String::from));
    let fin = run("strict", &args, Duration::from_secs(120));
    fin.assert_code(1);
    let last = fin.last_line();
    assert!(
        last.starts_with("spate: error:") && last.contains("extra") && last.contains(&topics[0]),
        "{last}"
    );
    assert_eq!(ch.u64(&format!("SELECT count() FROM {strict_table}")), 0);
}
