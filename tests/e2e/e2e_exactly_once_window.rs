//! End to end (issue 29 point 4): at start, exactly-once checks the
//! table's deduplication window against what a takeover needs: partitions
//! (Kafka metadata) × session.timeout.ms / --flush-interval, twice over.
//! 4 partitions, the suite's 6 s session timeout and 100 ms flushes need
//! 2 × 4 × 60 = 480 blocks: a window of 10 is warned about (naming the
//! number and the ALTER to run), one of 1000 is not; the data is exact
//! either way. On 26.9 the window is `non_replicated_deduplication_window`
//! of a `MergeTree`, on 18.16 `replicated_deduplication_window` of a
//! `ReplicatedMergeTree`.

use crate::support::*;
use std::time::Duration;

const N: usize = 200;
const PARTITIONS: i32 = 4;

on_both_servers!(a_window_smaller_than_a_takeover_needs_is_warned_about);

fn a_window_smaller_than_a_takeover_needs_is_warned_about(svc: Services) {
    let _timer = Timer::start("e2e_exactly_once_window");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let setting = if svc.is_modern() {
        "non_replicated_deduplication_window"
    } else {
        "replicated_deduplication_window"
    };
    for (window, warned) in [(10, true), (1000, false)] {
        let (db, table) = if svc.is_modern() {
            ch.deduplicating_table(true, "e2e_eos_window", window, None)
        } else {
            ch.deduplicating_table(false, "e2e_eos_window", 0, Some(window))
        };
        let topic = unique("t_eos_window");
        let group = unique("g_eos_window");
        create_topic(&svc.brokers, &topic, PARTITIONS);
        produce(&svc.brokers, &topic, PARTITIONS, N, |i| Msg {
            partition: (i % PARTITIONS as usize) as i32,
            key: None,
            payload: format!(r#"{{"n":{i},"s":"row {i}"}}"#),
            timestamp_ms: None,
        });
        let mut args = run_args(&svc, &topic, &group, &table);
        args.extend(
            [
                "--delivery",
                "exactly-once",
                "--flush-interval",
                "100ms",
                "--until-end",
            ]
            .map(String::from),
        );
        let out = run("eos-window", &args, Duration::from_secs(90));
        out.assert_code(0);
        let line = (out.stderr.lines())
            .find(|l| l.contains("may be too small for a takeover"))
            .map(str::to_owned);
        if warned {
            let line = line.unwrap_or_else(|| {
                panic!(
                    "no warning for a window of {window}; stderr tail:\n{}",
                    out.tail(30)
                )
            });
            for needle in [
                format!("{setting} = {window} blocks, a takeover needs 480"),
                format!("ALTER TABLE {table} MODIFY SETTING {setting} = 480"),
                "4 partitions".to_owned(),
            ] {
                assert!(line.contains(&needle), "{needle:?} in {line}");
            }
        } else {
            assert!(line.is_none(), "warned for a window of {window}: {line:?}");
        }
        let rows = ch.u64(&format!("SELECT count() FROM {table}"));
        let distinct = ch.u64(&format!(
            "SELECT uniqExact(_partition, _offset) FROM {table}"
        ));
        assert_eq!((rows, distinct), (N as u64, N as u64));
        ch.exec(&format!("DROP DATABASE {db}"));
    }
}
