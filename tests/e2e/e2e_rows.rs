//! End to end: rows the way ClickHouse would write them (docs/rows.md),
//! on both servers.
//!
//! 1. `defaults_are_the_servers`: a table with `ts DateTime DEFAULT now()`,
//!    `s String DEFAULT 'dflt'`, `d Date DEFAULT toDate(ts)`, a Nullable and
//!    a plain column without DEFAULT; 3 000 messages on 2 partitions, a
//!    third missing every defaulted key, a third giving `ts` and `"s":
//!    null`, a third giving everything. Every row read back: `ts` of the
//!    rows without it between the server's `now()` before and after the
//!    run, `d = toDate(ts)` exactly, `s = 'dflt'` for missing and null,
//!    the columns without DEFAULT NULL and 0; every offset once; committed
//!    = end offsets. On 18.16 this goes as Native blocks grouped by
//!    missing columns, on 26.9 as RowBinaryWithDefaults (the log says
//!    which).
//! 2. `nested_json_and_renames_exact`: `user.id`, `user.geo.cc` from
//!    objects, a Nested column `n` (`n.x`, `n.y`) from an array of objects
//!    and from an object of arrays, `uid` renamed to `/meta/src/id` (in a
//!    config file), an object into a String column kept as its JSON text;
//!    2 000 messages, every value exact.
//! 3. `nested_length_mismatch_is_a_bad_message`: `{"n": {"x": [1, 2], "y":
//!    [3]}}` at partition 0 offset 5 stops the run (exit 1) with an error
//!    naming topic, partition, offset, the column and the Nested lengths;
//!    committed exactly up to offset 5.
//! 4. `kafka_headers_exact`: 1 000 messages with three headers each (one
//!    with a null value) into `_headers.name`/`_headers.value` arrays, and
//!    on 26.9 also into a `_headers Map(String, String)` table (a second
//!    run: one table cannot have both shapes), every header exact.

// `is_multiple_of` is newer than the workspace's rust-version (1.85).
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

use crate::support::*;
use std::time::Duration;

const PARTITIONS: i32 = 2;

/// Run spate to the end of `topic` into `table`; returns its stderr.
fn run_to_end(svc: &Services, label: &str, topic: &str, group: &str, table: &str) -> String {
    let mut args = run_args(svc, topic, group, table);
    args.extend(["--until-end"].map(String::from));
    let fin = run(label, &args, Duration::from_secs(120));
    fin.assert_code(0);
    fin.stderr
}

/// Every (partition, offset) of `produced` is in `table` exactly once and
/// the group committed the end offsets.
fn assert_complete(svc: &Services, ch: &Ch, table: &str, topic: &str, group: &str, n: u64) {
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    assert_eq!(
        (count, uniq),
        (n, n),
        "rows and distinct offsets in {table}"
    );
    let ends = end_offsets(&svc.brokers, topic, PARTITIONS);
    let committed = committed(&svc.brokers, group, topic, PARTITIONS);
    assert_eq!(
        committed,
        ends.iter().map(|&e| Some(e)).collect::<Vec<_>>(),
        "committed = end offsets"
    );
}

fn defaults_are_the_servers(svc: Services) {
    const N: usize = 3_000;
    let _timer = Timer::start("e2e_rows_defaults");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (topic, group) = (unique("t_rows_def"), unique("g_rows_def"));
    let db = ch.fresh_db("e2e_rows_def");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (a UInt64, ts DateTime DEFAULT now(), s String DEFAULT 'dflt', \
         d Date DEFAULT toDate(ts), n Nullable(UInt8), z UInt32, m UInt8 MATERIALIZED 7, \
         _partition UInt32, _offset UInt64) ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
    create_topic(&svc.brokers, &topic, PARTITIONS);
    produce(&svc.brokers, &topic, PARTITIONS, N, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: match i % 3 {
            0 => format!(r#"{{"a": {i}}}"#),
            1 => format!(r#"{{"a": {i}, "ts": 1600000000, "s": null, "n": null}}"#),
            _ => format!(
                r#"{{"a": {i}, "ts": "2021-01-02 03:04:05", "s": "x", "d": "2000-01-01", "n": 5, "z": 9}}"#
            ),
        },
        timestamp_ms: None,
    });
    let before = ch.u64("SELECT toUnixTimestamp(now())");
    let stderr = run_to_end(&svc, "rows_defaults", &topic, &group, &table);
    let after = ch.u64("SELECT toUnixTimestamp(now())");
    let want_format = if svc.is_modern() {
        "RowBinaryWithDefaults"
    } else {
        "Native"
    };
    // stderr is a file here, not a terminal: no colour codes in the log.
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a log written to a file:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("format=\"{want_format}\""))
            || stderr.contains(&format!("format={want_format} ")),
        "the sink should insert as {want_format}:\n{stderr}"
    );
    assert_complete(&svc, &ch, &table, &topic, &group, N as u64);

    let bad = |cond: &str| ch.u64(&format!("SELECT count() FROM {table} WHERE NOT ({cond})"));
    let now_ts = format!("toUnixTimestamp(ts) BETWEEN {before} AND {after}");
    assert_eq!(
        bad(&format!("a % 3 != 0 OR ({now_ts})")),
        0,
        "ts of the rows without it is the server's now() during the load ({before}..{after})"
    );
    assert_eq!(
        bad("a % 3 = 2 OR d = toDate(ts)"),
        0,
        "d = toDate(ts) in every row without d"
    );
    assert_eq!(
        bad("a % 3 != 1 OR (toUnixTimestamp(ts) = 1600000000 AND s = 'dflt' AND n IS NULL AND z = 0)"),
        0,
        "ts given, s null gets its DEFAULT, n null stays NULL, z missing is 0"
    );
    assert_eq!(
        bad("a % 3 != 2 OR (ts = toDateTime('2021-01-02 03:04:05') AND s = 'x' AND d = '2000-01-01' AND n = 5 AND z = 9)"),
        0,
        "given values are kept"
    );
    assert_eq!(
        bad("a % 3 != 0 OR (s = 'dflt' AND n IS NULL AND z = 0 AND m = 7)"),
        0,
        "missing s is 'dflt'; missing columns without DEFAULT are NULL and 0"
    );
    ch.drop_database_of(&table);
}

fn nested_json_and_renames_exact(svc: Services) {
    const N: usize = 2_000;
    let _timer = Timer::start("e2e_rows_nested");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (topic, group) = (unique("t_rows_nest"), unique("g_rows_nest"));
    let db = ch.fresh_db("e2e_rows_nest");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (i UInt64, `user.id` UInt32, `user.geo.cc` String, uid UInt64, \
         n Nested(x UInt16, y String), raw String, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let payload = |i: usize| {
        let n = if i % 2 == 0 {
            format!(r#"[{{"x": {i}, "y": "a{i}"}}, {{"x": 1}}]"#)
        } else {
            format!(r#"{{"x": [{i}], "y": ["b{i}"]}}"#)
        };
        format!(
            r#"{{"i": {i}, "user": {{"id": {}, "geo": {{"cc": "C{i}"}}}}, "meta": {{"src": {{"id": {}}}}}, "uid": 1, "n": {n}, "raw": {{"k": [{i}]}}}}"#,
            i + 7,
            i * 3
        )
    };
    produce(&svc.brokers, &topic, PARTITIONS, N, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: payload(i),
        timestamp_ms: None,
    });
    let config = std::env::temp_dir().join(format!("{}.toml", unique("rows_cfg")));
    std::fs::write(
        &config,
        format!(
            "[[pipeline]]\ntopics = [\"{topic}\"]\ntable = \"{table}\"\nrename = {{ uid = \"/meta/src/id\" }}\n"
        ),
    )
    .expect("config file");
    let args: Vec<String> = [
        "run",
        "--brokers",
        &svc.brokers,
        "--group",
        &group,
        "--clickhouse-url",
        &svc.clickhouse_url,
        "--config",
        &config.to_string_lossy(),
        "--until-end",
        "-X",
        &format!("session.timeout.ms={SESSION_TIMEOUT_MS}"),
    ]
    .map(String::from)
    .to_vec();
    let fin = run("rows_nested", &args, Duration::from_secs(120));
    let _ = std::fs::remove_file(&config);
    fin.assert_code(0);
    assert_complete(&svc, &ch, &table, &topic, &group, N as u64);
    let text = ch.text(
        &format!(
            "SELECT i, `user.id`, `user.geo.cc`, uid, toString(n.x), toString(n.y), raw FROM {table} ORDER BY i"
        ),
        "TabSeparatedRaw",
    );
    let mut rows = 0;
    for (i, line) in text.lines().enumerate() {
        rows += 1;
        let (nx, ny) = if i % 2 == 0 {
            (format!("[{i},1]"), format!("['a{i}','']"))
        } else {
            (format!("[{i}]"), format!("['b{i}']"))
        };
        let want = format!(
            "{i}\t{}\tC{i}\t{}\t{nx}\t{ny}\t{{\"k\": [{i}]}}",
            i + 7,
            i * 3
        );
        assert_eq!(line, want, "row {i}");
    }
    assert_eq!(rows, N, "rows read back");
    ch.drop_database_of(&table);
}

fn nested_length_mismatch_is_a_bad_message(svc: Services) {
    const N: usize = 20;
    const BAD: usize = 10; // partition 0, offset 5
    let _timer = Timer::start("e2e_rows_nested_bad");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (topic, group) = (unique("t_rows_nbad"), unique("g_rows_nbad"));
    let db = ch.fresh_db("e2e_rows_nbad");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n Nested(x UInt8, y UInt8), _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
    create_topic(&svc.brokers, &topic, PARTITIONS);
    produce(&svc.brokers, &topic, PARTITIONS, N, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: if i == BAD {
            r#"{"n": {"x": [1, 2], "y": [3]}}"#.to_owned()
        } else {
            r#"{"n": {"x": [1], "y": [3]}}"#.to_owned()
        },
        timestamp_ms: None,
    });
    let mut args = run_args(&svc, &topic, &group, &table);
    args.push("--until-end".into());
    let fin = run("rows_nested_bad", &args, Duration::from_secs(60));
    fin.assert_code(1);
    let last = fin.last_line();
    for needle in [
        topic.as_str(),
        "partition 0",
        "offset 5",
        "column `n.y`",
        "Nested column `n`",
        "differ in length",
    ] {
        assert!(
            last.contains(needle),
            "the error does not name {needle:?}: {last}"
        );
    }
    let committed = committed(&svc.brokers, &group, &topic, PARTITIONS);
    assert!(
        committed[0].unwrap_or(0) <= 5,
        "partition 0 committed past the bad message: {committed:?}"
    );
    assert_eq!(
        ch.u64(&format!(
            "SELECT count() FROM {table} WHERE _partition = 0 AND _offset >= 5"
        )),
        0,
        "nothing at or after the bad offset is inserted"
    );
    ch.drop_database_of(&table);
}

/// Produce `n` messages `{"i": i}` round-robin on [`PARTITIONS`], each with
/// headers `h1 = a{i}`, `trace = t-{i}-x`, `none` (null value).
fn produce_with_headers(brokers: &str, topic: &str, n: usize) {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for i in 0..n {
        let (h1, trace, payload) = (
            format!("a{i}"),
            format!("t-{i}-x"),
            format!(r#"{{"i": {i}}}"#),
        );
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "h1",
                value: Some(&h1),
            })
            .insert(Header {
                key: "trace",
                value: Some(&trace),
            })
            .insert(Header {
                key: "none",
                value: None::<&str>,
            });
        let mut rec = BaseRecord::<(), _>::to(topic)
            .partition((i % PARTITIONS as usize) as i32)
            .payload(&payload)
            .headers(headers);
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((_, r)) if std::time::Instant::now() < deadline => {
                    producer.poll(Duration::from_millis(10));
                    rec = r;
                }
                Err((e, _)) => panic!("produce message {i}: {e}"),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
    let ends = end_offsets(brokers, topic, PARTITIONS);
    assert_eq!(
        ends.iter().sum::<i64>(),
        n as i64,
        "messages produced: {ends:?}"
    );
}

fn kafka_headers_exact(svc: Services) {
    const N: usize = 1_000;
    let _timer = Timer::start("e2e_rows_headers");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_rows_hdr");
    let db = ch.fresh_db("e2e_rows_hdr");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    produce_with_headers(&svc.brokers, &topic, N);
    let mut tables = vec![(
        format!("{db}.arrays"),
        "`_headers.name` Array(String), `_headers.value` Array(String)",
        "toString(`_headers.name`), toString(`_headers.value`)",
    )];
    if svc.is_modern() {
        tables.push((
            format!("{db}.map"),
            "_headers Map(String, String)",
            "toString(mapKeys(_headers)), toString(mapValues(_headers))",
        ));
    }
    for (table, columns, read) in tables {
        ch.exec(&format!(
            "CREATE TABLE {table} (i UInt64, {columns}, _partition UInt32, _offset UInt64) \
             ENGINE = MergeTree() ORDER BY (_partition, _offset)"
        ));
        let group = unique("g_rows_hdr");
        run_to_end(&svc, "rows_headers", &topic, &group, &table);
        assert_complete(&svc, &ch, &table, &topic, &group, N as u64);
        let text = ch.text(
            &format!("SELECT i, {read} FROM {table} ORDER BY i"),
            "TabSeparatedRaw",
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), N, "{table}: rows");
        for (i, line) in lines.iter().enumerate() {
            let want = format!("{i}\t['h1','trace','none']\t['a{i}','t-{i}-x','']");
            assert_eq!(*line, want, "{table}: row {i}");
        }
    }
    ch.drop_database_of(&format!("{db}.arrays"));
}

on_both_servers!(
    kafka_headers_exact,
    defaults_are_the_servers,
    nested_json_and_renames_exact,
    nested_length_mismatch_is_a_bad_message
);
