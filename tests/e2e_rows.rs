//! End to end: rows the way ClickHouse would write them (README "Rows"),
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

mod support;

use std::time::Duration;
use support::*;

const PARTITIONS: i32 = 2;

/// Run spate to the end of `topic` into `table`; returns its stderr.
fn run_to_end(svc: &Services, label: &str, topic: &str, group: &str, table: &str) -> String {
    let mut args = run_args(svc, topic, group, table);
    args.extend(["--until-end"].map(String::from));
    let fin = run(label, &args, Duration::from_secs(120));
    fin.assert_code(0);
    fin.stderr
}

/// `s` without terminal colour codes.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
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
    let plain = strip_ansi(&stderr);
    assert!(
        plain.contains(&format!("format=\"{want_format}\""))
            || plain.contains(&format!("format={want_format} ")),
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

on_both_servers!(defaults_are_the_servers);
