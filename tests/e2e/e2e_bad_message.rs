//! End to end: a message that does not fit its column stops the pipeline.
//!
//! 20 000 messages on 4 partitions: partition 2 gets 10 000 of them (so it
//! has an offset 7777), partitions 0, 1 and 3 share the rest. The message at
//! partition 2, offset 7777 carries `"n": "not-a-number"` for a UInt64
//! column. `spate run --until-end` must exit 1 with a last stderr line
//! `spate: error: ...` naming topic, partition, offset, column and value;
//! everything before that offset in partition 2 is inserted, nothing at or
//! after it is committed, and no partition's commit runs ahead of its rows.
//! A second run stops at the same message again: nothing was skipped.

// `is_multiple_of` is newer than the workspace's rust-version (1.85).
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

use crate::support::*;
use std::time::Duration;

const N: usize = 20_000;
const PARTITIONS: i32 = 4;
const BAD_PARTITION: i32 = 2;
const BAD_OFFSET: i64 = 7777;
const BAD_VALUE: &str = "not-a-number";

/// Even indexes go to partition 2, odd ones round-robin over 0, 1, 3.
fn partition_of(i: usize) -> i32 {
    if i % 2 == 0 {
        BAD_PARTITION
    } else {
        [0, 1, 3][(i / 2) % 3]
    }
}

fn check_failed_run(fin: &Finished, topic: &str) {
    fin.assert_code(1);
    let last = fin.last_line();
    assert!(
        last.starts_with("spate: error:"),
        "{}: last stderr line is not `spate: error: ...`: {last:?}\ntail:\n{}",
        fin.label,
        fin.tail(20)
    );
    for needle in [
        topic.to_owned(),
        format!("partition {BAD_PARTITION}"),
        format!("offset {BAD_OFFSET}"),
        "column `n`".to_owned(),
        BAD_VALUE.to_owned(),
    ] {
        assert!(
            last.contains(&needle),
            "{}: the error line does not name {needle:?}: {last}",
            fin.label
        );
    }
    assert!(
        fin.stderr.contains("pipeline failed"),
        "{}: no `pipeline failed` log line; tail:\n{}",
        fin.label,
        fin.tail(20)
    );
}

fn check_table(ch: &Ch, table: &str, committed: &[Option<i64>], counts: &[i64], context: &str) {
    let c = assert_committed_prefix_present(ch, table, committed, context);
    let p2 = c[BAD_PARTITION as usize];
    // Nothing at or after the bad offset is committed, and everything
    // before it is: the committed offset is exactly the bad offset.
    assert_eq!(
        p2, BAD_OFFSET as u64,
        "{context}: partition {BAD_PARTITION} must be committed exactly up to the bad offset"
    );
    let before = ch.u64(&format!(
        "SELECT uniqExact(_offset) FROM {table} WHERE _partition = {BAD_PARTITION} AND _offset < {BAD_OFFSET}"
    ));
    assert_eq!(
        before, BAD_OFFSET as u64,
        "{context}: rows of partition {BAD_PARTITION} before offset {BAD_OFFSET}"
    );
    let at_or_after = ch.u64(&format!(
        "SELECT count() FROM {table} WHERE _partition = {BAD_PARTITION} AND _offset >= {BAD_OFFSET}"
    ));
    assert_eq!(
        ch.u64(&format!(
            "SELECT count() FROM {table} WHERE _partition = {BAD_PARTITION} AND _offset = {BAD_OFFSET}"
        )),
        0,
        "{context}: the bad message itself was inserted"
    );
    let mut others = Vec::new();
    for p in (0..PARTITIONS).filter(|&p| p != BAD_PARTITION) {
        let rows = ch.u64(&format!(
            "SELECT uniqExact(_offset) FROM {table} WHERE _partition = {p}"
        ));
        others.push(format!(
            "p{p}: {rows}/{} rows, committed {:?}",
            counts[p as usize], committed[p as usize]
        ));
    }
    eprintln!(
        "[e2e_bad_message] {context}: partition {BAD_PARTITION} committed {p2}, {at_or_after} rows at/after \
         the bad offset; other partitions: {}",
        others.join("; ")
    );
}

on_both_servers!(bad_message_stops_at_its_offset);

fn bad_message_stops_at_its_offset(svc: Services) {
    let _timer = Timer::start("e2e_bad_message");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_badmsg");
    let group = unique("g_badmsg");
    let db = ch.fresh_db("e2e_bad_message");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n UInt64, s String, _topic String, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));

    create_topic(&svc.brokers, &topic, PARTITIONS);
    // The bad message is the 7778th produced to partition 2: index 2 * 7777.
    let bad_index = 2 * BAD_OFFSET as usize;
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, |i| {
        let n = if i == bad_index {
            format!("\"{BAD_VALUE}\"")
        } else {
            i.to_string()
        };
        Msg {
            partition: partition_of(i),
            key: None,
            payload: format!(r#"{{"n": {n}, "s": "m{i}"}}"#),
            timestamp_ms: None,
        }
    });
    assert_eq!(
        produced.placement[bad_index],
        (BAD_PARTITION, BAD_OFFSET),
        "the bad message did not land at partition {BAD_PARTITION} offset {BAD_OFFSET}"
    );
    assert_eq!(produced.counts[BAD_PARTITION as usize], (N / 2) as i64);

    let mut args = run_args(&svc, &topic, &group, &table);
    args.push("--until-end".into());

    let fin1 = run("badmsg-run1", &args, Duration::from_secs(120));
    check_failed_run(&fin1, &topic);
    let committed1 = committed(&svc.brokers, &group, &topic, PARTITIONS);
    check_table(&ch, &table, &committed1, &produced.counts, "after run 1");

    // Run 2: stops at the same message; nothing was skipped.
    let fin2 = run("badmsg-run2", &args, Duration::from_secs(120));
    check_failed_run(&fin2, &topic);
    let committed2 = committed(&svc.brokers, &group, &topic, PARTITIONS);
    check_table(&ch, &table, &committed2, &produced.counts, "after run 2");
    for p in 0..PARTITIONS as usize {
        assert!(
            committed2[p].unwrap_or(0) >= committed1[p].unwrap_or(0),
            "partition {p}: committed went backwards: {:?} -> {:?}",
            committed1[p],
            committed2[p]
        );
    }
    eprintln!(
        "[e2e_bad_message] run 1 {:.1?}, run 2 {:.1?}",
        fin1.elapsed, fin2.elapsed
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}
