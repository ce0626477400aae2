//! End to end: routing (docs/routing.md). A topic pattern with a
//! `{topic}` table template writes each topic into its own table, exact
//! per table; a topic created while spate runs is read, its table created
//! from `--create-table-like`; a topic whose table is outside
//! `--allow-tables` is rejected message by message (counted, committed
//! past, no table made for it), or stops the run under `--on-error fail`.

use crate::support::*;
use std::time::{Duration, Instant};

const PER_TOPIC: usize = 2_000;
const DENIED: usize = 300;

on_both_servers!(a_topic_pattern_writes_each_topic_to_its_own_table);

fn a_topic_pattern_writes_each_topic_to_its_own_table(svc: Services) {
    let _timer = Timer::start("e2e_routing");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_route");
    let prefix = unique("rt");
    let columns = "(n UInt64, _topic String, _partition UInt32, _offset UInt64) \
                   ENGINE = MergeTree() ORDER BY (_partition, _offset)";
    for t in ["a", "b"] {
        ch.exec(&format!("CREATE TABLE {db}.{prefix}_{t} {columns}"));
    }
    ch.exec(&format!("CREATE TABLE {db}.tmpl {columns}"));
    let topic = |t: &str| format!("{prefix}_{t}");
    let numbered = |i: usize| Msg {
        partition: (i % 2) as i32,
        key: None,
        payload: format!(r#"{{"n":{i}}}"#),
        timestamp_ms: None,
    };
    for t in ["a", "b", "d", "deny"] {
        create_topic(&svc.brokers, &topic(t), 2);
    }
    for t in ["a", "b", "d"] {
        produce(&svc.brokers, &topic(t), 2, PER_TOPIC, numbered);
    }

    let port = free_port();
    let group = unique("g_route");
    let mut args = run_args(
        &svc,
        &format!("^{prefix}_"),
        &group,
        &format!("{db}.{{topic}}"),
    );
    args.extend(
        [
            "--allow-tables",
            &format!(r"{db}\.{prefix}_(a|b|c|d)"),
            "--create-table-like",
            &format!("{db}.tmpl"),
            "--on-error",
            "skip",
            "--topic-refresh",
            "2s",
            "--flush-interval",
            "200ms",
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
        ]
        .map(String::from),
    );
    let spate = spawn("route", &args);
    for t in ["a", "b", "d"] {
        ch.wait_rows(
            &format!("{db}.{}", topic(t)),
            PER_TOPIC as u64,
            Duration::from_secs(60),
        );
    }

    // A topic created while spate runs: read, into a table made for it.
    let created = Instant::now();
    create_topic(&svc.brokers, &topic("c"), 2);
    produce(&svc.brokers, &topic("c"), 2, PER_TOPIC, numbered);
    ch.wait_rows(
        &format!("{db}.{}", topic("c")),
        PER_TOPIC as u64,
        Duration::from_secs(60),
    );
    let took = created.elapsed();
    eprintln!("[e2e_routing] the new topic's rows were in {took:?} after it was created");
    assert!(took < Duration::from_secs(30), "picked up in {took:?}");

    // A topic deleted while spate runs: its lanes end, the others go on
    // (more rows of b arrive after the start again it causes).
    delete_topic(&svc.brokers, &topic("d"));
    std::thread::sleep(Duration::from_secs(5));
    produce_paced(
        &svc.brokers,
        &topic("b"),
        PER_TOPIC,
        Duration::from_millis(200),
        numbered,
    )
    .join();
    ch.wait_rows(
        &format!("{db}.{}", topic("b")),
        2 * PER_TOPIC as u64,
        Duration::from_secs(60),
    );
    let mut spate = spate;
    assert!(
        !spate.has_exited(),
        "spate stopped after a topic was deleted:\n{}",
        spate.stderr_so_far()
    );
    let restarts = (spate.stderr_so_far())
        .matches("stopping the pipelines to start them again")
        .count();
    assert!(
        restarts >= 2,
        "{restarts} starts again (a topic created, one deleted)"
    );

    // Counted once, whatever starts again the topic changes caused (the
    // process keeps its counters across them).
    produce(&svc.brokers, &topic("deny"), 2, DENIED, numbered);
    let rejected = format!("topic=\"{}\"", topic("deny"));
    let metrics = wait_for(
        "the denied topic's messages rejected",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || {
            let m = http_get(port, "/metrics").ok_or("no /metrics")?;
            let n = metric_sum(
                &m,
                "spate_messages_rejected_total",
                &[&rejected, "reason=\"table_not_allowed\""],
            );
            if n as usize == DENIED {
                Ok(m)
            } else {
                Err(format!("{n} rejected"))
            }
        },
    );
    let made = format!("table=\"{db}.{}\"", topic("c"));
    assert_eq!(
        metric_sum(&metrics, "spate_tables_created_total", &[&made]),
        1.0
    );
    spate.sigterm();
    spate.wait(Duration::from_secs(60)).assert_code(0);

    for (t, n) in [("a", PER_TOPIC), ("b", 2 * PER_TOPIC), ("c", PER_TOPIC)] {
        let rows = ch.u64_rows(&format!(
            "SELECT count(), uniqExact(_partition, _offset), countIf(_topic != '{}') FROM {db}.{}",
            topic(t),
            topic(t)
        ));
        assert_eq!(
            rows[0],
            vec![n as u64, n as u64, 0],
            "{t}: each message once, in its topic's table only"
        );
    }
    for t in ["a", "b", "c", "deny"] {
        let want = end_offsets(&svc.brokers, &topic(t), 2);
        let got = committed(&svc.brokers, &group, &topic(t), 2);
        assert_eq!(
            got,
            want.iter().map(|&e| Some(e)).collect::<Vec<_>>(),
            "{t}: committed to the end"
        );
    }
    assert_eq!(
        ch.u64(&format!(
            "SELECT count() FROM system.tables WHERE database = '{db}' AND name = '{}'",
            topic("deny")
        )),
        0,
        "no table is made outside the allowlist"
    );

    // Under --on-error fail, the first denied message stops the run,
    // naming it, and nothing of it is committed.
    let group = unique("g_route_fail");
    let mut args = run_args(
        &svc,
        &format!("^{prefix}_(a|deny)$"),
        &group,
        &format!("{db}.{{topic}}"),
    );
    args.extend(
        [
            "--allow-tables",
            &format!(r"{db}\.{prefix}_a"),
            "--until-end",
        ]
        .map(String::from),
    );
    let fin = run("route-fail", &args, Duration::from_secs(60));
    fin.assert_code(1);
    let last = fin.last_line();
    assert!(
        last.contains(&topic("deny"))
            && last.contains("offset 0")
            && last.contains("not allowed by --allow-tables"),
        "{last}"
    );
    assert_eq!(
        committed(&svc.brokers, &group, &topic("deny"), 2),
        vec![None, None]
    );
}

on_both_servers!(a_refused_table_holds_back_only_its_own_partitions);

/// One routed table refuses every insert (TOO_MANY_PARTS: a partition of
/// seed parts at the limit, merges stopped) while the other keeps taking
/// rows; once the seeds are dropped it takes inserts again, and every
/// message is in its table once.
fn a_refused_table_holds_back_only_its_own_partitions(svc: Services) {
    let _timer = Timer::start("e2e_routing_refused");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_route_stall");
    let prefix = unique("rs");
    let topic = |t: &str| format!("{prefix}_{t}");
    let columns = "(n UInt64, pad String, _partition UInt32, _offset UInt64) ENGINE = MergeTree() \
                   PARTITION BY _partition ORDER BY _offset";
    ch.exec(&format!("CREATE TABLE {db}.{} {columns}", topic("fast")));
    let slow = format!("{db}.{}", topic("slow"));
    // Both servers refuse an insert while a partition has this many parts
    // (the largest partition counts, not the inserted one's).
    const LIMIT: usize = 20;
    ch.exec(&format!(
        "CREATE TABLE {slow} {columns} SETTINGS parts_to_throw_insert = {LIMIT}, parts_to_delay_insert = {LIMIT}"
    ));
    ch.exec(&format!("SYSTEM STOP MERGES {slow}"));
    for seed in 0..LIMIT {
        ch.exec(&format!("INSERT INTO {slow} VALUES (0, '', 9, {seed})"));
    }
    let numbered = |i: usize| Msg {
        partition: (i % 2) as i32,
        key: None,
        payload: format!(r#"{{"n":{i}}}"#),
        timestamp_ms: None,
    };
    for t in ["fast", "slow"] {
        create_topic(&svc.brokers, &topic(t), 2);
    }
    // More than the slow table's share of the memory budget: its lanes
    // pause, and must pause alone.
    const SLOW: usize = 20_000;
    produce(&svc.brokers, &topic("slow"), 2, SLOW, |i| Msg {
        payload: format!(r#"{{"n":{i},"pad":"{}"}}"#, "x".repeat(500)),
        ..numbered(i)
    });
    let port = free_port();
    let group = unique("g_route_stall");
    let mut args = run_args(
        &svc,
        &format!("^{prefix}_"),
        &group,
        &format!("{db}.{{topic}}"),
    );
    args.extend(
        [
            "--flush-interval",
            "200ms",
            "--max-buffered-bytes",
            "16MiB",
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
        ]
        .map(String::from),
    );
    let spate = spawn("route-stall", &args);
    let slow_errors = format!("table=\"{slow}\"");
    wait_for(
        "the slow table's inserts refused and its lanes paused",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let m = http_get(port, "/metrics").ok_or("no /metrics")?;
            let n = metric_sum(&m, "spate_insert_errors_total", &[&slow_errors]);
            let paused = gauge(&m, "spate_lanes_paused").unwrap_or(0);
            if n >= 1.0 && paused >= 1 {
                Ok(())
            } else {
                Err(format!("{n} errors, {paused} lanes paused"))
            }
        },
    );
    // While it refuses them, the other table takes its rows.
    let fast = format!("{db}.{}", topic("fast"));
    let started = Instant::now();
    produce(&svc.brokers, &topic("fast"), 2, PER_TOPIC, numbered);
    ch.wait_rows(&fast, PER_TOPIC as u64, Duration::from_secs(60));
    let took = started.elapsed();
    eprintln!(
        "[e2e_routing] the other table took {PER_TOPIC} rows in {took:?} ({:.0} rows/s, produce included) while {slow} refused its inserts",
        PER_TOPIC as f64 / took.as_secs_f64()
    );
    assert_eq!(
        ch.u64(&format!("SELECT count() FROM {slow} WHERE _partition != 9")),
        0,
        "nothing of the slow topic is in yet"
    );
    assert!(
        !committed(&svc.brokers, &group, &topic("slow"), 2)
            .iter()
            .any(|c| c.unwrap_or(0) > 0),
        "nothing of the slow topic is committed"
    );

    ch.exec(&format!("ALTER TABLE {slow} DROP PARTITION 9"));
    ch.exec(&format!("SYSTEM START MERGES {slow}"));
    ch.wait_rows(&slow, SLOW as u64, Duration::from_secs(90));
    spate.sigterm();
    spate.wait(Duration::from_secs(60)).assert_code(0);
    for (table, n) in [(&fast, PER_TOPIC), (&slow, SLOW)] {
        let rows = ch.u64_rows(&format!(
            "SELECT count(), uniqExact(_partition, _offset) FROM {table}"
        ));
        assert_eq!(rows[0], vec![n as u64; 2], "{table}: each message once");
    }
    for t in ["fast", "slow"] {
        assert_committed_to_end(&svc.brokers, &group, &topic(t), 2, t);
    }
}

on_both_servers!(routed_tables_take_each_message_once_exactly_once);

/// Exactly-once with routing: two topics into their own deduplicating
/// tables, killed twice (`kill -9`) while messages arrive and after rows
/// landed past the commit, then finished: each table has each message of
/// its topic once, and nothing else; everything committed.
fn routed_tables_take_each_message_once_exactly_once(svc: Services) {
    const N: usize = 6_000;
    let _timer = Timer::start("e2e_routing_eos");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_route_eos");
    let prefix = unique("re");
    let topic = |t: &str| format!("{prefix}_{t}");
    let engine = |name: &str| {
        if svc.is_modern() {
            "MergeTree() ORDER BY (_partition, _offset) SETTINGS non_replicated_deduplication_window = 1000".to_owned()
        } else {
            format!("ReplicatedMergeTree('/clickhouse/tables/{db}/{name}', 'r1') ORDER BY (_partition, _offset)")
        }
    };
    let mut producers = Vec::new();
    for t in ["a", "b"] {
        ch.exec(&format!(
            "CREATE TABLE {db}.{} (n UInt64, _partition UInt32, _offset UInt64) ENGINE = {}",
            topic(t),
            engine(&topic(t))
        ));
        create_topic(&svc.brokers, &topic(t), 2);
        producers.push(produce_paced(
            &svc.brokers,
            &topic(t),
            N,
            Duration::from_secs(8),
            numbered(2),
        ));
    }
    let group = unique("g_route_eos");
    let mut args = run_args(
        &svc,
        &format!("^{prefix}_"),
        &group,
        &format!("{db}.{{topic}}"),
    );
    args.extend(
        [
            "--delivery",
            "exactly-once",
            "--flush-interval",
            "200ms",
            "--batch-rows",
            "300",
        ]
        .map(String::from),
    );
    let mut past_commit = 0;
    for k in 0..2 {
        let spate = spawn(&format!("route-eos-{k}"), &args);
        let table = format!("{db}.{}", topic("a"));
        let before = ch
            .try_u64(&format!("SELECT count() FROM {table}"))
            .unwrap_or(0);
        ch.wait_rows(&table, before + 1, Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(300));
        spate.kill9();
        for t in ["a", "b"] {
            let table = format!("{db}.{}", topic(t));
            let committed = committed(&svc.brokers, &group, &topic(t), 2);
            let c = assert_committed_prefix_present(&ch, &table, &committed, "after kill -9");
            past_commit += (0..2)
                .map(|p| {
                    ch.u64(&format!(
                        "SELECT count() FROM {table} WHERE _partition = {p} AND _offset >= {}",
                        c[p]
                    ))
                })
                .sum::<u64>();
        }
    }
    for p in producers {
        assert!(p.join().errors.is_empty());
    }
    args.push("--until-end".into());
    run("route-eos-end", &args, Duration::from_secs(90)).assert_code(0);
    assert!(
        past_commit > 0,
        "no kill left rows past the commit: nothing was replayed"
    );
    for t in ["a", "b"] {
        let table = format!("{db}.{}", topic(t));
        let rows = ch.u64_rows(&format!(
            "SELECT count(), uniqExact(_partition, _offset) FROM {table}"
        ));
        assert_eq!(rows[0], vec![N as u64; 2], "{t}: each message once");
        assert_committed_to_end(&svc.brokers, &group, &topic(t), 2, t);
    }
}

/// Routed pipelines share their configured pipeline's dead-letter
/// destinations: one producer for the dead-letter topic (and one
/// `CREATE` of the dead-letter table), not one per routed table. Before,
/// 200 routed tables with `--dead-letter-topic` ran 200 producers (811
/// threads); here 4 tables must run 2 librdkafka clients (the consumer
/// and the one producer), where they ran 5. Every bad message still
/// becomes one letter in the topic and one row of the table.
#[test]
fn routed_pipelines_share_their_dead_letter_destinations() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _timer = Timer::start("e2e_routing_letters");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_route_dl");
    let prefix = unique("rdl");
    let names = ["a", "b", "c", "d"];
    for t in names {
        ch.exec(&format!(
            "CREATE TABLE {db}.{prefix}_{t} (n UInt8) ENGINE = MergeTree() ORDER BY n"
        ));
        create_topic(&svc.brokers, &format!("{prefix}_{t}"), 1);
        // One bad message (300 does not fit a UInt8) among good ones.
        produce(&svc.brokers, &format!("{prefix}_{t}"), 1, 10, |i| Msg {
            partition: 0,
            key: None,
            payload: format!(r#"{{"n":{}}}"#, if i == 4 { 300 } else { i }),
            timestamp_ms: None,
        });
    }
    let letters_topic = format!("{prefix}_letters");
    create_topic(&svc.brokers, &letters_topic, 1);
    let letters_table = format!("{db}.letters");
    let mut args = run_args(
        &svc,
        &format!("^{prefix}_[a-d]$"),
        &unique("g_route_dl"),
        &format!("{db}.{{topic}}"),
    );
    args.extend(
        [
            "--on-error",
            "dead-letter",
            "--dead-letter-topic",
            &letters_topic,
            "--dead-letter-table",
            &letters_table,
        ]
        .map(String::from),
    );
    let spate = spawn("route-letters", &args);
    for t in names {
        ch.wait_rows(&format!("{db}.{prefix}_{t}"), 9, Duration::from_secs(60));
    }
    // librdkafka names each client's main thread `rdk:main`; the fewest
    // over a few samples (a listing of the topics makes a short-lived
    // one every --topic-refresh).
    let clients = (0..5)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(200));
            let tasks = std::fs::read_dir(format!("/proc/{}/task", spate.pid())).expect("tasks");
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|comm| comm.trim() == "rdk:main")
                .count()
        })
        .min()
        .unwrap_or(0);
    assert_eq!(
        clients, 2,
        "librdkafka clients: the consumer and one producer"
    );
    let letters = read_partition(&svc.brokers, &letters_topic, 0, names.len());
    assert_eq!(letters.len(), names.len(), "one letter per bad message");
    wait_for(
        "a row per bad message in the dead-letter table",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || match ch.try_u64(&format!(
            "SELECT uniqExact(topic, partition, offset) FROM {letters_table} FINAL"
        )) {
            Ok(n) if n == names.len() as u64 => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    spate.sigterm();
    spate.wait(Duration::from_secs(60)).assert_code(0);
    ch.exec(&format!("DROP DATABASE {db}"));
}
