//! End to end (issue 29 point 1): no silent loss on servers without
//! `insert_deduplication_token` (before 22.2), on 18.16's
//! `ReplicatedMergeTree` (the suite's ZooKeeper).
//!
//! Such a table drops any inserted block whose bytes equal a recent
//! block's (the block hash) and answers 200. Identical messages at other
//! offsets encode to identical batches when the table has no `_offset`,
//! so before the fix 2,000 identical messages cut into batches of 200
//! left 400 rows while every offset was committed.
//! - At-least-once sends `insert_deduplicate=0` there: every batch lands.
//! - Exactly-once keeps the block hash (it is what drops a replayed
//!   block), so it refuses at start a table whose rows do not carry their
//!   Kafka coordinates, naming the columns to add; with `_partition` and
//!   `_offset` every block is unique and every message lands once.

use crate::support::*;
use std::time::Duration;

const N: usize = 2_000;

fn same(partitions: i32) -> impl FnMut(usize) -> Msg {
    move |i| Msg {
        partition: (i % partitions as usize) as i32,
        key: None,
        payload: r#"{"s":"same","n":1}"#.to_string(),
        timestamp_ms: None,
    }
}

fn replicated(ch: &Ch, db: &str, columns: &str, order: &str) -> String {
    let table = format!("{db}.t");
    ch.exec_idempotent(
        &format!(
            "CREATE TABLE IF NOT EXISTS {table} ({columns}) \
             ENGINE = ReplicatedMergeTree('/clickhouse/tables/{db}/t', 'r1') ORDER BY {order}"
        ),
        Duration::from_secs(120),
    );
    table
}

#[test]
fn at_least_once_identical_batches_all_land_on_18_16_replicated() {
    // Locked first: an outage test stops the server while it holds the
    // lock exclusively, and services_on waits for the server to answer.
    let _lock = ch_shared_lock();
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _timer = Timer::start("e2e_block_hash_alo");
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_bh_alo");
    let table = replicated(&ch, &db, "s String, n UInt64", "tuple()");
    let topic = unique("t_bh_alo");
    let group = unique("g_bh_alo");
    create_topic(&svc.brokers, &topic, 1);
    let produced = produce(&svc.brokers, &topic, 1, N, same(1));
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(["--until-end", "--batch-rows", "200"].map(String::from));
    let fin = run("block-hash-alo", &args, Duration::from_secs(90));
    fin.assert_code(0);
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let parts = ch.u64(&format!(
        "SELECT count() FROM system.parts WHERE database = '{db}' AND table = 't'"
    ));
    eprintln!("[e2e_block_hash_alo] {count} of {N} rows in {parts} parts");
    assert!(
        parts > 1,
        "the run cut one batch only: the test proves nothing"
    );
    assert_eq!(
        count, N as u64,
        "identical batches from other offsets were dropped by the block hash while committed"
    );
    assert_eq!(
        committed(&svc.brokers, &group, &topic, 1),
        vec![Some(produced.counts[0])]
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

#[test]
fn exactly_once_refuses_a_table_whose_blocks_can_look_alike_on_18_16() {
    // Locked first: an outage test stops the server while it holds the
    // lock exclusively, and services_on waits for the server to answer.
    let _lock = ch_shared_lock();
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _timer = Timer::start("e2e_block_hash_eos_refused");
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_bh_ref");
    let table = replicated(&ch, &db, "s String, n UInt64", "tuple()");
    let topic = unique("t_bh_ref");
    let group = unique("g_bh_ref");
    create_topic(&svc.brokers, &topic, 1);
    produce(&svc.brokers, &topic, 1, 10, same(1));
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(["--until-end", "--delivery", "exactly-once"].map(String::from));
    let fin = run("block-hash-eos-refused", &args, Duration::from_secs(60));
    fin.assert_code(2);
    assert!(
        fin.stderr.contains(&format!(
            "ALTER TABLE {table} ADD COLUMN _partition Int32, ADD COLUMN _offset UInt64"
        )),
        "the refusal names the columns to add; stderr:\n{}",
        fin.tail(20)
    );
    assert_eq!(ch.u64(&format!("SELECT count() FROM {table}")), 0);
    assert_eq!(committed(&svc.brokers, &group, &topic, 1), vec![None]);
    ch.exec(&format!("DROP DATABASE {db}"));
}

/// Two pipelines of one process, one topic each, writing one table: the
/// table is fed by two topics, so blocks of the two can be alike (the same
/// rows at the same partition and offsets) unless the rows carry `_topic`.
/// Each pipeline counted only its own topic and let the table through
/// without it; the refusal now names `_topic` too.
#[test]
fn exactly_once_counts_the_topics_of_every_pipeline_writing_the_table() {
    let _lock = ch_shared_lock();
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _timer = Timer::start("e2e_block_hash_eos_two_pipelines");
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_bh_two");
    let columns = "s String, n UInt64, _partition Int32, _offset UInt64";
    let table = replicated(&ch, &db, columns, "tuple()");
    let (one, two) = (unique("t_bh_two_a"), unique("t_bh_two_b"));
    for topic in [&one, &two] {
        create_topic(&svc.brokers, topic, 1);
        produce(&svc.brokers, topic, 1, 10, same(1));
    }
    let file = log_dir().join(format!("{}.toml", unique("bh_two")));
    let text = format!(
        "brokers = \"{}\"\ngroup = \"{}\"\nclickhouse_url = \"{}\"\nuntil_end = true\n\
         delivery = \"exactly-once\"\n\n\
         [[pipeline]]\nname = \"one\"\ntopics = [\"{one}\"]\ntable = \"{table}\"\n\n\
         [[pipeline]]\nname = \"two\"\ntopics = [\"{two}\"]\ntable = \"{table}\"\n",
        svc.brokers,
        unique("g_bh_two"),
        svc.clickhouse_url,
    );
    std::fs::write(&file, text).expect("write the config file");
    let args = ["run", "--config", &file.to_string_lossy()].map(String::from);
    let fin = run("block-hash-eos-two", &args, Duration::from_secs(60));
    fin.assert_code(2);
    assert!(
        fin.stderr.contains(&format!(
            "ALTER TABLE {table} ADD COLUMN _topic LowCardinality(String)"
        )),
        "the refusal names _topic; stderr:\n{}",
        fin.tail(20)
    );
    assert_eq!(ch.u64(&format!("SELECT count() FROM {table}")), 0);
    ch.exec(&format!("DROP DATABASE {db}"));
}

#[test]
fn exactly_once_identical_messages_all_land_once_on_18_16_replicated() {
    // Locked first: an outage test stops the server while it holds the
    // lock exclusively, and services_on waits for the server to answer.
    let _lock = ch_shared_lock();
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _timer = Timer::start("e2e_block_hash_eos");
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_bh_eos");
    let table = replicated(
        &ch,
        &db,
        "s String, n UInt64, _partition Int32, _offset UInt64",
        "(_partition, _offset)",
    );
    let topic = unique("t_bh_eos");
    let group = unique("g_bh_eos");
    create_topic(&svc.brokers, &topic, 2);
    let produced = produce(&svc.brokers, &topic, 2, N, same(2));
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--until-end",
            "--batch-rows",
            "200",
            "--delivery",
            "exactly-once",
        ]
        .map(String::from),
    );
    let fin = run("block-hash-eos", &args, Duration::from_secs(90));
    fin.assert_code(0);
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    eprintln!("[e2e_block_hash_eos] {count} rows, {uniq} distinct of {N}");
    assert_eq!(uniq, N as u64, "every message landed");
    assert_eq!(count, uniq, "no message twice");
    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(committed(&svc.brokers, &group, &topic, 2), ends);
    ch.exec(&format!("DROP DATABASE {db}"));
}
