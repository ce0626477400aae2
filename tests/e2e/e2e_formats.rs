//! End to end: `--format raw` and `--format csv` through the `spate`
//! binary, against the real broker and both ClickHouse servers. Every
//! message's value is read back exactly (raw: byte for byte, including
//! quotes, line breaks and bytes that are not UTF-8; csv: quoting, empty
//! fields quoted and not, NULLs, a header list) and the committed offsets
//! equal the ends.

#![allow(unknown_lints, clippy::manual_is_multiple_of)] // MSRV 1.86

use crate::support::*;
use std::time::Duration;

const MESSAGES: usize = 5_000;
const PARTITIONS: i32 = 2;

on_both_servers!(
    raw_values_round_trip_exactly,
    csv_records_round_trip_exactly
);

/// The raw value of message `i`: every awkward byte somewhere.
fn raw_value(i: usize) -> String {
    match i % 5 {
        0 => format!("plain line {i}"),
        1 => format!("{{\"json\": {i}, \"but\": \"kept as text\"}}"),
        2 => format!("tab\tquote\"back\\slash\nnew line {i}"),
        3 => String::new(),
        _ => format!("ünïcödé ✓ {i}"),
    }
}

fn raw_values_round_trip_exactly(svc: Services) {
    let _timer = Timer::start("e2e_formats raw");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_fmt_raw");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (line String, _partition UInt32, _offset UInt64, \
         _topic String, other UInt32) ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
    let topic = unique("t_fmt_raw");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, MESSAGES, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: raw_value(i),
        timestamp_ms: None,
    });
    let group = unique("g_fmt_raw");
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(["--until-end", "--format", "raw", "--raw-column", "line"].map(String::from));
    run("fmt_raw", &args, Duration::from_secs(120)).assert_code(0);

    let index_at = produced.index_at();
    let got = ch.text(
        &format!("SELECT _partition, _offset, hex(line), other, _topic = '{topic}' FROM {table} ORDER BY _partition, _offset"),
        "TSV",
    );
    let mut rows = 0;
    for line in got.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (p, o): (usize, usize) = (f[0].parse().unwrap(), f[1].parse().unwrap());
        let i = index_at[p][o];
        assert_eq!(f[2], hex(raw_value(i).as_bytes()), "message {i} at {p}/{o}");
        assert_eq!((f[3], f[4]), ("0", "1"), "other columns of message {i}");
        rows += 1;
    }
    assert_eq!(rows, MESSAGES, "every message exactly once");
    let want: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(committed(&svc.brokers, &group, &topic, PARTITIONS), want);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|c| format!("{c:02X}")).collect()
}

/// Message `i` as its CSV record, and the values it must load as:
/// (id, name, note or NULL, score, tags).
/// (id, name, note, score, tags) as loaded.
type CsvRow = (usize, String, Option<String>, i64, Vec<i32>);

fn csv_record(i: usize) -> (String, CsvRow) {
    let name = match i % 4 {
        0 => format!("n{i}"),
        1 => format!("with, comma and \"quotes\" {i}"),
        2 => String::new(),
        _ => format!("multi\nline\r\n{i}"),
    };
    let quoted = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let (note_field, note) = match i % 3 {
        0 => (String::new(), None),
        1 => ("\"\"".to_owned(), Some(String::new())),
        _ => (format!("note {i}"), Some(format!("note {i}"))),
    };
    let score = if i % 7 == 0 { 0 } else { i as i64 * 3 - 5000 };
    let score_field = if i % 7 == 0 {
        String::new()
    } else {
        score.to_string()
    };
    let tags: Vec<i32> = (0..(i % 3) as i32).map(|t| t * i as i32).collect();
    let tags_json = format!(
        "[{}]",
        tags.iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    // Field order follows --csv-columns: score, name, skipped, id, note, tags.
    let record = format!(
        "{score_field},{},ignored {i},{i},{note_field},{}{}",
        if name.is_empty() && i % 8 == 2 {
            String::new()
        } else {
            quoted(&name)
        },
        quoted(&tags_json),
        if i % 2 == 0 { "\n" } else { "" }
    );
    (record, (i, name, note, score, tags))
}

fn csv_records_round_trip_exactly(svc: Services) {
    let _timer = Timer::start("e2e_formats csv");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_fmt_csv");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (id UInt64, name String, note Nullable(String), score Int64, \
         tags Array(Int32), _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
    let topic = unique("t_fmt_csv");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, MESSAGES, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: csv_record(i).0,
        timestamp_ms: None,
    });
    let group = unique("g_fmt_csv");
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--until-end",
            "--format",
            "csv",
            "--csv-columns",
            "score,name,,id,note,tags",
        ]
        .map(String::from),
    );
    run("fmt_csv", &args, Duration::from_secs(120)).assert_code(0);

    let got = ch.text(
        &format!("SELECT id, hex(name), isNull(note), hex(ifNull(note, '')), score, tags FROM {table} ORDER BY id"),
        "TSV",
    );
    let mut rows = 0;
    for (line, i) in got.lines().zip(0..) {
        let (_, (id, name, note, score, tags)) = csv_record(i);
        let want = format!(
            "{id}\t{}\t{}\t{}\t{score}\t[{}]",
            hex(name.as_bytes()),
            u8::from(note.is_none()),
            hex(note.unwrap_or_default().as_bytes()),
            tags.iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(line, want, "message {i}: {:?}", csv_record(i).0);
        rows += 1;
    }
    assert_eq!(rows, MESSAGES, "every message exactly once");
    let want: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(committed(&svc.brokers, &group, &topic, PARTITIONS), want);
}
