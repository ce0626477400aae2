//! End to end: the error policy against the real broker and ClickHouse.
//!
//! A topic with 1% bad messages of every kind (invalid JSON, a value out of
//! range for its column, an unknown enum name, an object where a number
//! belongs, a row the server rejects through a `throwIf` MATERIALIZED
//! column) plus 1% tombstones:
//! - `--on-error skip`: every good row present exactly once, the bad ones
//!   absent, committed offsets equal the end offsets, and
//!   `spate_messages_rejected_total` counts each kind exactly;
//! - `--on-error fail`: exit 1 within 30 s naming topic, partition and
//!   offset, for a decode error and for a server rejection (isolated by
//!   bisection); nothing past the bad offset committed;
//! - a topic of 100% bad messages under `skip`: the rejection limit trips,
//!   exit 1 naming it, nothing committed past the limit.

use crate::support::*;
use std::time::{Duration, Instant};

const N: usize = 4000;
const PARTITIONS: i32 = 2;

/// The kinds of message, by `i % 100`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Good,
    InvalidJson,
    OutOfRange,
    UnknownEnum,
    ObjectForNumber,
    ServerRejects,
    Tombstone,
}

fn kind(i: usize) -> Kind {
    match i % 100 {
        11 => Kind::InvalidJson,
        23 => Kind::OutOfRange,
        37 => Kind::UnknownEnum,
        41 => Kind::ObjectForNumber,
        59 => Kind::ServerRejects,
        73 => Kind::Tombstone,
        _ => Kind::Good,
    }
}

/// `a` of good message `i` (never 13, the value the table's `throwIf` rejects).
fn a_of(i: usize) -> usize {
    i + 100
}

fn payload(i: usize, kind: Kind) -> String {
    let a = a_of(i);
    match kind {
        Kind::Good => format!(r#"{{"a": {a}, "small": 5, "e": "x", "n": {i}}}"#),
        Kind::InvalidJson => format!(r#"{{"a": {a}, "small": 5,"#),
        Kind::OutOfRange => format!(r#"{{"a": {a}, "small": 300, "e": "x", "n": {i}}}"#),
        Kind::UnknownEnum => format!(r#"{{"a": {a}, "small": 5, "e": "zzz", "n": {i}}}"#),
        Kind::ObjectForNumber => {
            format!(r#"{{"a": {a}, "small": 5, "e": "x", "n": {{"x": 1}}}}"#)
        }
        Kind::ServerRejects => format!(r#"{{"a": 13, "small": 5, "e": "y", "n": {i}}}"#),
        Kind::Tombstone => TOMBSTONE.to_owned(),
    }
}

fn create_table(ch: &Ch, table: &str) {
    ch.exec(&format!(
        "CREATE TABLE {table} (a UInt32, small UInt8, e Enum8('x' = 1, 'y' = 2), n UInt64, \
         _topic String, _partition UInt32, _offset UInt64, \
         chk UInt8 MATERIALIZED throwIf(a = 13)) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
}

/// Produce `N` messages made by `make` over the partitions, mixed so every
/// kind lands on both.
fn produce_mixed(svc: &Services, topic: &str, make: impl Fn(usize) -> String) -> Produced {
    create_topic(&svc.brokers, topic, PARTITIONS);
    produce(&svc.brokers, topic, PARTITIONS, N, |i| Msg {
        partition: ((i / 7) % PARTITIONS as usize) as i32,
        key: None,
        payload: make(i),
        timestamp_ms: None,
    })
}

fn policy_args(
    svc: &Services,
    topic: &str,
    group: &str,
    table: &str,
    extra: &[&str],
) -> Vec<String> {
    let mut args = run_args(svc, topic, group, table);
    args.extend(["--batch-rows", "500", "--flush-interval", "200ms"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

on_both_servers!(skip_keeps_every_good_row_and_counts_each_kind);

fn skip_keeps_every_good_row_and_counts_each_kind(svc: Services) {
    let _timer = Timer::start("e2e_policy skip");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_policy_skip");
    let group = unique("g_policy_skip");
    let db = ch.fresh_db("e2e_policy");
    let table = format!("{db}.t");
    create_table(&ch, &table);
    let produced = produce_mixed(&svc, &topic, |i| payload(i, kind(i)));
    let good: Vec<usize> = (0..N).filter(|&i| kind(i) == Kind::Good).collect();

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let args = policy_args(
        &svc,
        &topic,
        &group,
        &table,
        &["--on-error", "skip", "--admin-addr", &addr],
    );
    let started = Instant::now();
    let spate = spawn("policy-skip", &args);
    wait_for(
        "every good row and every offset committed",
        Duration::from_secs(90),
        Duration::from_millis(300),
        || {
            let rows = ch.u64(&format!("SELECT count() FROM {table}"));
            let c = committed(&svc.brokers, &group, &topic, PARTITIONS);
            let ends: Vec<Option<i64>> = produced.counts.iter().map(|&n| Some(n)).collect();
            if rows as usize == good.len() && c == ends {
                Ok(())
            } else {
                Err(format!(
                    "{rows}/{} rows, committed {c:?} of {ends:?}\n{}",
                    good.len(),
                    spate.stderr_so_far()
                ))
            }
        },
    );
    let metrics = http_get(port, "/metrics").expect("/metrics answers");
    let elapsed = started.elapsed();
    spate.sigterm();
    let fin = spate.wait(Duration::from_secs(30));
    fin.assert_code(0);

    // Every good row exactly once, nothing else.
    let rows = ch.u64_rows(&format!(
        "SELECT a, count() FROM {table} GROUP BY a ORDER BY a"
    ));
    let want: Vec<Vec<u64>> = good.iter().map(|&i| vec![a_of(i) as u64, 1]).collect();
    assert_eq!(rows.len(), want.len(), "distinct rows");
    assert!(
        rows == want,
        "the rows are not exactly the good messages, once each"
    );
    let per_kind = N as f64 / 100.0;
    for (stage, reason) in [
        ("decode", "invalid_json"),
        ("decode", "out_of_range"),
        ("decode", "unknown_enum"),
        ("decode", "wrong_type"),
        ("decode", "tombstone"),
        ("insert", "code_395"),
    ] {
        let got = metric_sum(
            &metrics,
            "spate_messages_rejected_total",
            &[
                &format!("topic=\"{topic}\""),
                &format!("stage=\"{stage}\""),
                &format!("reason=\"{reason}\""),
            ],
        );
        assert_eq!(
            got, per_kind,
            "{stage}/{reason}: {got} rejections counted\n{metrics}"
        );
    }
    let total = metric_sum(
        &metrics,
        "spate_messages_rejected_total",
        &[&format!("topic=\"{topic}\"")],
    );
    assert_eq!(total, 6.0 * per_kind, "no other rejection counted");
    eprintln!(
        "[e2e_policy] skip on {}: {} good rows, {} rejected, committed = ends after {elapsed:.1?}",
        svc.server.label(),
        good.len(),
        total
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

/// The first `partition P offset O` an error line names.
fn named_position(line: &str) -> Option<(i32, i64)> {
    let rest = &line[line.find("partition ")? + "partition ".len()..];
    let (p, rest) = rest.split_once(" offset ")?;
    let o: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((p.parse().ok()?, o.parse().ok()?))
}

/// Per partition, the offset of its first message of `bad` kind.
fn first_bad(produced: &Produced, bad: Kind) -> Vec<i64> {
    let mut first = vec![i64::MAX; PARTITIONS as usize];
    for i in (0..N).filter(|&i| kind(i) == bad) {
        let (p, o) = produced.placement[i];
        first[p as usize] = first[p as usize].min(o);
    }
    first
}

fn fails_naming_the_message(svc: &Services, bad: Kind, label: &str) {
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_policy_fail");
    let group = unique("g_policy_fail");
    let db = ch.fresh_db("e2e_policy_fail");
    let table = format!("{db}.t");
    create_table(&ch, &table);
    let produced = produce_mixed(svc, &topic, |i| {
        let k = kind(i);
        payload(i, if k == bad { k } else { Kind::Good })
    });
    let first = first_bad(&produced, bad);
    let args = policy_args(svc, &topic, &group, &table, &["--until-end"]);
    let fin = run(label, &args, Duration::from_secs(60));
    fin.assert_code(1);
    assert!(
        fin.elapsed < Duration::from_secs(30),
        "{label}: took {:?}",
        fin.elapsed
    );
    let last = fin.last_line();
    assert!(last.contains(&topic), "{label}: no topic in {last}");
    // The line names a bad message (the first one a lane or an insert
    // worker met: with several batches in flight, not always the first of
    // its partition).
    let named = named_position(last)
        .unwrap_or_else(|| panic!("{label}: no `partition P offset O` in {last}"));
    let is_bad = (0..N).any(|i| kind(i) == bad && produced.placement[i] == named);
    assert!(is_bad, "{label}: {named:?} is not a bad message: {last}");
    let c = committed(&svc.brokers, &group, &topic, PARTITIONS);
    for p in 0..PARTITIONS as usize {
        assert!(
            c[p].unwrap_or(0) <= first[p],
            "{label}: partition {p} committed {:?} past its first bad offset {}",
            c[p],
            first[p]
        );
    }
    eprintln!(
        "[e2e_policy] {label} on {}: exit 1 in {:.1?}, committed {c:?}, first bad {first:?}: {last}",
        svc.server.label(),
        fin.elapsed
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

on_both_servers!(fail_names_a_decode_error_and_a_server_rejection);

fn fail_names_a_decode_error_and_a_server_rejection(svc: Services) {
    let _timer = Timer::start("e2e_policy fail");
    let _lock = ch_shared_lock();
    fails_naming_the_message(&svc, Kind::OutOfRange, "policy-fail-decode");
    fails_naming_the_message(&svc, Kind::ServerRejects, "policy-fail-server");
}

/// 100% bad messages under skip: the consecutive limit (100 by default)
/// trips; nothing past the first 100 messages of a partition is committed.
#[test]
fn the_limit_trips_on_a_topic_of_bad_messages() {
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _timer = Timer::start("e2e_policy limit");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_policy_limit");
    let group = unique("g_policy_limit");
    let db = ch.fresh_db("e2e_policy_limit");
    let table = format!("{db}.t");
    create_table(&ch, &table);
    produce_mixed(&svc, &topic, |_| "not json".to_owned());
    let args = policy_args(
        &svc,
        &topic,
        &group,
        &table,
        &["--until-end", "--on-error", "skip"],
    );
    let fin = run("policy-limit", &args, Duration::from_secs(60));
    fin.assert_code(1);
    let last = fin.last_line();
    assert!(
        last.contains("rejection limit exceeded") && last.contains("--max-rejected-consecutive"),
        "the error line does not name the limit: {last}"
    );
    let c = committed(&svc.brokers, &group, &topic, PARTITIONS);
    assert!(
        c.iter().all(|o| o.unwrap_or(0) <= 100),
        "committed past the limit's window: {c:?}"
    );
    assert_eq!(ch.u64(&format!("SELECT count() FROM {table}")), 0);
    eprintln!(
        "[e2e_policy] limit: exit 1 in {:.1?}, committed {c:?}: {last}",
        fin.elapsed
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

/// One record of the dead-letter topic: value and the spate.* headers.
struct Letter {
    value: Option<String>,
    headers: std::collections::BTreeMap<String, String>,
}

/// Every record of partition 0 of `topic` (which has `count` records).
fn read_letters(brokers: &str, topic: &str, count: i64) -> Vec<Letter> {
    use rdkafka::message::{Headers, Message};
    let records = read_partition(brokers, topic, 0, usize::try_from(count).expect("a count"));
    records
        .iter()
        .map(|m| {
            let mut headers = std::collections::BTreeMap::new();
            if let Some(h) = m.headers() {
                for i in 0..h.count() {
                    let hd = h.get(i);
                    let v = hd.value.map(|v| String::from_utf8_lossy(v).into_owned());
                    headers.insert(hd.key.to_owned(), v.unwrap_or_default());
                }
            }
            Letter {
                value: m.payload().map(|p| String::from_utf8_lossy(p).into_owned()),
                headers,
            }
        })
        .collect()
}

on_both_servers!(dead_letters_hold_every_bad_message_once_and_reload);

fn dead_letters_hold_every_bad_message_once_and_reload(svc: Services) {
    let _timer = Timer::start("e2e_policy dead-letter");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_policy_dlq");
    let dlq = unique("t_policy_dlq_letters");
    let group = unique("g_policy_dlq");
    let db = ch.fresh_db("e2e_policy_dlq");
    let table = format!("{db}.t");
    create_table(&ch, &table);
    create_topic(&svc.brokers, &dlq, 1);
    let produced = produce_mixed(&svc, &topic, |i| payload(i, kind(i)));
    let good = (0..N).filter(|&i| kind(i) == Kind::Good).count();
    let bad: Vec<usize> = (0..N)
        .filter(|&i| !matches!(kind(i), Kind::Good | Kind::Tombstone))
        .collect();

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let letters_table = format!("{db}.letters");
    let extra = [
        "--on-error",
        "dead-letter",
        "--dead-letter-topic",
        &dlq,
        "--dead-letter-table",
        &letters_table,
        "--admin-addr",
        &addr,
    ];
    let spate = spawn(
        "policy-dlq",
        &policy_args(&svc, &topic, &group, &table, &extra),
    );
    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&n| Some(n)).collect();
    wait_for(
        "good rows in, committed = ends",
        Duration::from_secs(90),
        Duration::from_millis(300),
        || {
            let rows = ch.u64(&format!("SELECT count() FROM {table}"));
            let c = committed(&svc.brokers, &group, &topic, PARTITIONS);
            if rows as usize == good && c == ends {
                Ok(())
            } else {
                Err(format!(
                    "{rows}/{good} rows, committed {c:?}\n{}",
                    spate.stderr_so_far()
                ))
            }
        },
    );
    let metrics = http_get(port, "/metrics").expect("/metrics answers");
    spate.sigterm();
    spate.wait(Duration::from_secs(30)).assert_code(0);
    let total = metric_sum(
        &metrics,
        "spate_messages_rejected_total",
        &[&format!("topic=\"{topic}\"")],
    );
    assert_eq!(
        total,
        6.0 * N as f64 / 100.0,
        "5 kinds dead-lettered + tombstones counted"
    );

    assert_eq!(
        end_offsets(&svc.brokers, &dlq, 1),
        vec![bad.len() as i64],
        "one letter per bad message"
    );
    let letters = read_letters(&svc.brokers, &dlq, bad.len() as i64);
    let mut seen = std::collections::BTreeSet::new();
    for l in &letters {
        let h = |k: &str| l.headers.get(k).cloned().unwrap_or_default();
        assert_eq!(h("spate.topic"), topic);
        let at: (i32, i64) = (
            h("spate.partition").parse().unwrap(),
            h("spate.offset").parse().unwrap(),
        );
        let i = *bad
            .iter()
            .find(|&&i| produced.placement[i] == at)
            .unwrap_or_else(|| panic!("letter of no bad message: {at:?} {:?}", l.headers));
        assert!(seen.insert(i), "message {i} dead-lettered twice");
        assert_eq!(
            l.value.as_deref(),
            Some(payload(i, kind(i)).as_str()),
            "the original value"
        );
        let stage = if kind(i) == Kind::ServerRejects {
            "insert"
        } else {
            "decode"
        };
        assert_eq!(h("spate.stage"), stage, "{:?}", l.headers);
        assert!(!h("spate.error").is_empty());
        if matches!(
            kind(i),
            Kind::OutOfRange | Kind::UnknownEnum | Kind::ObjectForNumber
        ) {
            assert!(!h("spate.column").is_empty(), "{:?}", l.headers);
        }
    }
    assert_eq!(seen.len(), bad.len());

    // The same letters in the table, once each, with stage and column.
    let stored = ch.text(
        &format!("SELECT partition, offset, stage, ifNull(column, ''), topic FROM {letters_table} FINAL ORDER BY partition, offset"),
        "TSV",
    );
    let mut in_table = std::collections::BTreeSet::new();
    for line in stored.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let at = (f[0].parse::<i32>().unwrap(), f[1].parse::<i64>().unwrap());
        let i = *bad
            .iter()
            .find(|&&i| produced.placement[i] == at)
            .unwrap_or_else(|| panic!("{line}"));
        assert!(in_table.insert(i), "message {i} twice in the table");
        let stage = if kind(i) == Kind::ServerRejects {
            "insert"
        } else {
            "decode"
        };
        assert_eq!((f[2], f[4]), (stage, topic.as_str()), "{line}");
        if matches!(
            kind(i),
            Kind::OutOfRange | Kind::UnknownEnum | Kind::ObjectForNumber
        ) {
            assert!(!f[3].is_empty(), "no column: {line}");
        }
    }
    assert_eq!(in_table.len(), bad.len(), "every bad message in the table");

    // Reload: with the throwIf column gone, `spate run` on the dead-letter
    // topic inserts the letters the server had rejected; the ones that
    // never decoded are skipped again (limit off: most letters are bad).
    ch.exec(&format!("ALTER TABLE {table} DROP COLUMN chk"));
    let mut args = policy_args(
        &svc,
        &dlq,
        &unique("g_policy_reload"),
        &table,
        &["--until-end", "--on-error", "skip"],
    );
    args.extend(
        [
            "--max-rejected-ratio",
            "1",
            "--max-rejected-consecutive",
            "0",
        ]
        .map(String::from),
    );
    run("policy-dlq-reload", &args, Duration::from_secs(60)).assert_code(0);
    let reloaded = ch.u64(&format!(
        "SELECT count() FROM {table} WHERE a = 13 AND _topic = '{dlq}'"
    ));
    assert_eq!(
        reloaded as usize,
        N / 100,
        "the rejected rows, reloaded once each"
    );
    eprintln!(
        "[e2e_policy] dead-letter on {}: {good} rows, {} letters, {reloaded} reloaded",
        svc.server.label(),
        letters.len()
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}
