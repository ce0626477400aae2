//! End to end: every column type ClickHouse 18.16 has, 200 000 messages on
//! 4 partitions, one `spate run --until-end`; every value read back equals
//! what was produced, every offset is there once, and the group's committed
//! offsets are the end offsets. Runs on both servers (`every_type_end_to_end
//! ::v18_16`, `::v26_9`); 26.9 prints decimals without trailing zeros. The
//! types only current servers have are in `e2e_types_modern.rs`.
//!
//! Values are a pure function of the message index, so the expected text of
//! any row is recomputed here from `(partition, offset)` via the producer's
//! delivery reports. ClickHouse returns every column as a string
//! (`toString`, `hex`, `toUnixTimestamp`), fetched as JSONEachRow.

// `is_multiple_of` is newer than the workspace's rust-version (1.85).
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

use crate::support::*;
use std::fmt::Write as _;
use std::time::Duration;

const N: usize = 200_000;
const PARTITIONS: i32 = 4;
const ENUM: &str = "Enum8('red' = 1, 'green' = 2, 'blue' = -3)";

/// (column, type, SQL expression that reads it back as a string)
const COLUMNS: &[(&str, &str, &str)] = &[
    ("id", "UInt64", "toString(id)"),
    ("u8", "UInt8", "toString(u8)"),
    ("u16", "UInt16", "toString(u16)"),
    ("u32", "UInt32", "toString(u32)"),
    ("u64", "UInt64", "toString(u64)"),
    ("i8", "Int8", "toString(i8)"),
    ("i16", "Int16", "toString(i16)"),
    ("i32", "Int32", "toString(i32)"),
    ("i64", "Int64", "toString(i64)"),
    ("f32", "Float32", "toString(f32)"),
    ("f64", "Float64", "toString(f64)"),
    ("s", "String", "s"),
    ("fs", "FixedString(4)", "hex(fs)"),
    ("d", "Date", "toString(d)"),
    ("dt_unix", "DateTime", "toString(toUnixTimestamp(dt_unix))"),
    ("dt_str", "DateTime", "toString(toUnixTimestamp(dt_str))"),
    ("dt_rfc", "DateTime", "toString(toUnixTimestamp(dt_rfc))"),
    ("n", "Nullable(Int32)", "ifNull(toString(n), '<null>')"),
    ("arr_s", "Array(String)", "toString(arr_s)"),
    ("arr_n", "Array(Nullable(UInt8))", "toString(arr_n)"),
    ("lc", "LowCardinality(String)", "toString(lc)"),
    ("uuid", "UUID", "toString(uuid)"),
    ("e_name", ENUM, "toString(e_name)"),
    ("e_num", ENUM, "toString(e_num)"),
    ("dec18n", "Decimal(18, 4)", "toString(dec18n)"),
    ("dec18s", "Decimal(18, 4)", "toString(dec18s)"),
    ("dec9", "Decimal(9, 2)", "toString(dec9)"),
    ("b", "UInt8", "toString(b)"),
    ("_topic", "String", "_topic"),
    ("_partition", "UInt32", "toString(_partition)"),
    ("_offset", "UInt64", "toString(_offset)"),
    (
        "_timestamp",
        "DateTime",
        "toString(toUnixTimestamp(_timestamp))",
    ),
    ("_key", "String", "_key"),
];

// ------------------------------------------------------------- calendar ----

/// Days since 1970-01-01 → (year, month, day). (H. Hinnant's algorithm.)
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn date(days: i64) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Unix seconds → `YYYY-MM-DD{sep}hh:mm:ss` (UTC).
fn datetime(secs: i64, sep: char) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    format!(
        "{}{sep}{:02}:{:02}:{:02}",
        date(days),
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

// --------------------------------------------------------------- values ----

/// Signed decimal text with `scale` fraction digits from an integer `int`,
/// a fraction `frac` (< 10^scale) and a sign (never "-0").
fn decimal(neg: bool, int: u64, frac: u64, scale: usize) -> String {
    let neg = neg && (int != 0 || frac != 0);
    format!("{}{int}.{frac:0scale$}", if neg { "-" } else { "" })
}

/// Same value, trailing fraction zeros trimmed (but one digit kept).
fn decimal_trimmed(neg: bool, int: u64, frac: u64, scale: usize) -> String {
    let full = decimal(neg, int, frac, scale);
    let t = full.trim_end_matches('0');
    if t.ends_with('.') {
        format!("{t}0")
    } else {
        t.to_owned()
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("json string")
}

fn ts_ms(i: usize) -> i64 {
    1_650_000_000_000 + i as i64 * 1000 + (i % 1000) as i64
}

fn key(i: usize) -> Option<String> {
    (i % 10 != 0).then(|| format!("k{i}"))
}

/// One row: the JSON payload and the expected string per column (COLUMNS
/// order; metadata columns filled by the caller).
struct Row {
    json: String,
    want: Vec<String>,
}

fn row(i: usize, topic: &str, partition: i32, offset: i64) -> Row {
    let iu = i as u64;
    let ii = i as i64;
    let mut j = String::with_capacity(800);
    let mut want: Vec<String> = Vec::with_capacity(COLUMNS.len());
    // `field!(json_value_text, expected_text)`; a `None` json skips the key.
    let mut put = |name: &str, json: Option<String>, expect: String| {
        if let Some(v) = json {
            if j.is_empty() {
                j.push('{');
            } else {
                j.push_str(", ");
            }
            let _ = write!(j, "\"{name}\": {v}");
        }
        want.push(expect);
    };

    put("id", Some(iu.to_string()), iu.to_string());

    let u8v = (i % 256) as u8;
    put("u8", Some(u8v.to_string()), u8v.to_string());
    let u16v = ((i * 7) % 65_536) as u16;
    // Every 7th as a quoted number.
    let u16j = if i % 7 == 0 {
        format!("\"{u16v}\"")
    } else {
        u16v.to_string()
    };
    put("u16", Some(u16j), u16v.to_string());
    let u32v = (iu.wrapping_mul(2_654_435_761) % (1 << 32)) as u32;
    put("u32", Some(u32v.to_string()), u32v.to_string());
    let u64v = match i {
        3 => u64::MAX,
        _ => iu.wrapping_mul(0x9E37_79B9_7F4A_7C15),
    };
    let u64j = if i % 5 == 0 {
        format!("\"{u64v}\"")
    } else {
        u64v.to_string()
    };
    put("u64", Some(u64j), u64v.to_string());

    let i8v = ((i % 256) as i64 - 128) as i8;
    put("i8", Some(i8v.to_string()), i8v.to_string());
    let i16v = (((i * 3) % 65_536) as i64 - 32_768) as i16;
    put("i16", Some(i16v.to_string()), i16v.to_string());
    let i32v = ((ii * 2_654_435_761).rem_euclid(1 << 32) - (1 << 31)) as i32;
    put("i32", Some(i32v.to_string()), i32v.to_string());
    let i64v = match i {
        1 => i64::MIN,
        2 => i64::MAX,
        _ => iu.wrapping_mul(0x9E37_79B9_7F4A_7C15) as i64,
    };
    let i64j = if i % 6 == 0 {
        format!("\"{i64v}\"")
    } else {
        i64v.to_string()
    };
    put("i64", Some(i64j), i64v.to_string());

    // Floats chosen to be exact in binary and printed identically by Rust
    // and ClickHouse.
    let f32v = (i % 100_000) as f32 - 50_000.0 + 0.5;
    put("f32", Some(f32v.to_string()), f32v.to_string());
    let f64v = ii as f64 * 1.25 - 1000.0;
    let f64j = if i % 11 == 0 {
        format!("{f64v:e}")
    } else {
        f64v.to_string()
    };
    put("f64", Some(f64j), f64v.to_string());

    let (sj, sv) = match i % 4 {
        0 => (json_str(""), String::new()),
        1 => {
            let v = format!("s{i}");
            (json_str(&v), v)
        }
        2 => {
            let v =
                format!("row {i}: tab\t nl\n cr\r quote\" backslash\\ slash/ 'apos' é ü 中文 😀");
            (json_str(&v), v)
        }
        _ => (
            // Written with \u escapes (incl. a surrogate pair and a control char).
            format!("\"u\\u00e9\\ud83d\\ude00 \\u0001 \\/ {i}\""),
            format!("u\u{e9}\u{1F600} \u{1} / {i}"),
        ),
    };
    put("s", Some(sj), sv);

    let fsv = ["", "a", "ab", "abc", "abcd", "é"][i % 6];
    let mut fs_hex: String = fsv.bytes().map(|b| format!("{b:02X}")).collect();
    while fs_hex.len() < 8 {
        fs_hex.push_str("00");
    }
    put("fs", Some(json_str(fsv)), fs_hex);

    // Day 0 (1970-01-01) prints as 0000-00-00 on old servers: start at 1.
    let days = 1 + ((i * 7) % 40_000) as i64;
    put("d", Some(json_str(&date(days))), date(days));

    let t1 = 1_000_000_000 + ii * 1009;
    let t1j = if i % 5 == 0 {
        format!("\"{t1}\"")
    } else {
        t1.to_string()
    };
    put("dt_unix", Some(t1j), t1.to_string());
    let t2 = 1_300_000_000 + ii * 613;
    put("dt_str", Some(json_str(&datetime(t2, ' '))), t2.to_string());
    let t3 = 1_600_000_000 + ii * 97;
    let off_min = [-480i64, 330, 0, 840, -150][i % 5];
    let local = datetime(t3 + off_min * 60, 'T');
    let frac = if i % 3 == 0 { ".123" } else { "" };
    let zone = if off_min == 0 {
        "Z".to_owned()
    } else {
        let a = off_min.abs();
        format!(
            "{}{:02}:{:02}",
            if off_min < 0 { '-' } else { '+' },
            a / 60,
            a % 60
        )
    };
    put(
        "dt_rfc",
        Some(json_str(&format!("{local}{frac}{zone}"))),
        t3.to_string(),
    );

    let nv = (ii * 31) % 2_000_000 - 1_000_000;
    match i % 3 {
        0 => put("n", Some("null".into()), "<null>".into()),
        1 => put("n", None, "<null>".into()),
        _ => put("n", Some(nv.to_string()), nv.to_string()),
    }

    let arr_s: Vec<String> = (0..i % 4).map(|k| format!("x{k}_{i}")).collect();
    let arr_sj = format!(
        "[{}]",
        arr_s
            .iter()
            .map(|s| json_str(s))
            .collect::<Vec<_>>()
            .join(",")
    );
    let arr_sw = format!(
        "[{}]",
        arr_s
            .iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(",")
    );
    put("arr_s", Some(arr_sj), arr_sw);

    let arr_n: Vec<Option<u8>> = (0..i % 5)
        .map(|k| ((i + k) % 3 != 0).then_some(((i + k) % 256) as u8))
        .collect();
    let arr_nj = format!(
        "[{}]",
        arr_n
            .iter()
            .map(|v| v.map_or("null".to_owned(), |x| x.to_string()))
            .collect::<Vec<_>>()
            .join(",")
    );
    let arr_nw = format!(
        "[{}]",
        arr_n
            .iter()
            .map(|v| v.map_or("NULL".to_owned(), |x| x.to_string()))
            .collect::<Vec<_>>()
            .join(",")
    );
    put("arr_n", Some(arr_nj), arr_nw);

    let lc = ["DE", "FR", "US", "JP", "BR", ""][i % 6];
    put("lc", Some(json_str(lc)), lc.to_owned());

    let uuid = format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        iu,
        iu % 65_536,
        0x4000 | (iu % 4096),
        0x8000 | (iu % 16_384),
        iu.wrapping_mul(7919) & 0xFFFF_FFFF_FFFF
    );
    let uuid_in = if i % 2 == 0 {
        uuid.to_uppercase()
    } else {
        uuid.clone()
    };
    put("uuid", Some(json_str(&uuid_in)), uuid);

    let names = ["red", "green", "blue"];
    let nums = [1, 2, -3];
    put("e_name", Some(json_str(names[i % 3])), names[i % 3].into());
    put(
        "e_num",
        Some(nums[(i + 1) % 3].to_string()),
        names[(i + 1) % 3].into(),
    );

    // Decimal(18, 4) from a JSON number.
    let (neg, int, fr) = (i % 2 == 1, (iu * 37) % 100_000_000, iu % 10_000);
    let dj = if fr % 10 == 0 {
        decimal_trimmed(neg, int, fr, 4)
    } else {
        decimal(neg, int, fr, 4)
    };
    put("dec18n", Some(dj), decimal(neg, int, fr, 4));
    // Decimal(18, 4) from a JSON string.
    let (neg, int, fr) = (
        i % 3 == 0,
        (iu * 7_777_777) % 100_000_000_000_000,
        (iu * 13) % 10_000,
    );
    put(
        "dec18s",
        Some(format!("\"{}\"", decimal(neg, int, fr, 4))),
        decimal(neg, int, fr, 4),
    );
    // Decimal(9, 2) from a JSON number.
    let (neg, int, fr) = (i % 4 == 3, (iu * 13) % 10_000_000, iu % 100);
    put(
        "dec9",
        Some(decimal(neg, int, fr, 2)),
        decimal(neg, int, fr, 2),
    );

    let b = i % 2 == 0;
    put("b", Some(b.to_string()), u8::from(b).to_string());

    // Metadata columns come from the Kafka message, not the payload; a
    // payload key with the same name is ignored.
    put("_topic", Some(json_str("ignored")), topic.to_owned());
    put("_partition", None, partition.to_string());
    put("_offset", None, offset.to_string());
    put("_timestamp", None, (ts_ms(i) / 1000).to_string());
    put("_key", None, key(i).unwrap_or_default());

    j.push('}');
    Row { json: j, want }
}

on_both_servers!(every_type_end_to_end);

/// How `toString(Decimal)` prints on `server`: 18.16 keeps the scale's
/// trailing zeros, 26.9 drops them (and a bare `.`).
fn decimal_as_printed(server: Server, text: &str) -> String {
    match server {
        Server::V18 => text.to_owned(),
        Server::V26 if text.contains('.') => {
            text.trim_end_matches('0').trim_end_matches('.').to_owned()
        }
        Server::V26 => text.to_owned(),
    }
}

fn every_type_end_to_end(svc: Services) {
    let _timer = Timer::start("e2e_types");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_types");
    let group = unique("g_types");
    let db = ch.fresh_db("e2e_types");
    let table = format!("{db}.t");

    let cols: Vec<String> = COLUMNS
        .iter()
        .map(|(n, t, _)| format!("`{n}` {t}"))
        .collect();
    ch.exec_with(
        &format!(
            "CREATE TABLE {table} ({}) ENGINE = MergeTree() ORDER BY (_partition, _offset)",
            cols.join(", ")
        ),
        // Only servers before 19.3 know (and need) this setting; 26.9
        // refuses it as unknown.
        if ch.client.features().low_cardinality_needs_experimental_flag {
            &[("allow_experimental_low_cardinality_type", "1")]
        } else {
            &[]
        },
    );

    // Self-check of the generator on a fixed row.
    let r = row(2, "T", 1, 0);
    assert!(
        serde_json::from_str::<serde_json::Value>(&r.json).is_ok(),
        "{}",
        r.json
    );
    assert_eq!(r.want.len(), COLUMNS.len());

    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: key(i),
        payload: row(i, &topic, 0, 0).json,
        timestamp_ms: Some(ts_ms(i)),
    });

    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(["--until-end", "--drivers", "2"].map(String::from));
    let fin = run("types", &args, Duration::from_secs(180));
    fin.assert_code(0);
    assert!(
        fin.stderr.contains("pipeline finished"),
        "no `pipeline finished` in stderr:\n{}",
        fin.tail(20)
    );

    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    assert_eq!(uniq, N as u64, "distinct (partition, offset) in {table}");
    assert_eq!(
        count,
        N as u64,
        "rows in {table} (duplicates: {})",
        count - uniq
    );

    // Every value.
    let select: Vec<String> = COLUMNS
        .iter()
        .map(|(n, _, e)| format!("{e} AS `{n}`"))
        .collect();
    let text = ch.text(
        &format!(
            "SELECT {} FROM {table} ORDER BY _partition, _offset",
            select.join(", ")
        ),
        "JSONEachRow",
    );
    let index_at = produced.index_at();
    let mut mismatches: Vec<String> = Vec::new();
    let mut per_column = vec![0usize; COLUMNS.len()];
    let mut rows = 0usize;
    for line in text.lines() {
        rows += 1;
        let got: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON row {line:?}: {e}"));
        let field = |name: &str| -> String {
            got.get(name)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
                .unwrap_or_else(|| format!("<missing {name}>"))
        };
        let p: usize = field("_partition").parse().expect("_partition");
        let o: usize = field("_offset").parse().expect("_offset");
        let i = *index_at
            .get(p)
            .and_then(|v| v.get(o))
            .unwrap_or_else(|| panic!("row at partition {p} offset {o} was never produced"));
        let want = row(i, &topic, p as i32, o as i64).want;
        for (c, ((name, ty, _), want)) in COLUMNS.iter().zip(want).enumerate() {
            let g = field(name);
            let want = if ty.starts_with("Decimal") {
                decimal_as_printed(svc.server, &want)
            } else {
                want
            };
            if g != want {
                per_column[c] += 1;
                if mismatches.len() < 30 {
                    mismatches.push(format!(
                        "partition {p} offset {o} (message {i}) column `{name}`: got {g:?}, want {want:?}"
                    ));
                }
            }
        }
    }
    assert_eq!(rows, N, "rows fetched");
    let bad_cols: Vec<String> = COLUMNS
        .iter()
        .zip(&per_column)
        .filter(|(_, &n)| n > 0)
        .map(|((name, _, _), n)| format!("{name}: {n}"))
        .collect();
    assert!(
        mismatches.is_empty(),
        "value mismatches per column: {bad_cols:?}\nfirst ones:\n{}",
        mismatches.join("\n")
    );

    // The group committed exactly the end offsets.
    let committed = committed(&svc.brokers, &group, &topic, PARTITIONS);
    let want: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(committed, want, "committed offsets vs end offsets");

    eprintln!("[e2e_types] spate run took {:.1?}", fin.elapsed);
    ch.exec(&format!("DROP DATABASE {db}"));
}
