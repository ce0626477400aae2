//! End to end on ClickHouse 26.9: the types only current servers have, and
//! the current server's defaults.
//!
//! 1. `modern_types_end_to_end`: 6 000 messages on 3 partitions, one `spate
//!    run --until-end` per table of the same topic: table `native` holds
//!    types the Native insert path transposes (DateTime64(3)/(9) from
//!    numbers and strings, Bool, IPv4/IPv6, Tuple named and unnamed, UUID,
//!    Decimal128/256, Int128/256, UInt256, LowCardinality(Nullable(String)),
//!    Array(Nullable(T)), Nullable of every scalar, Enum by name and by
//!    number), table `rowbinary` the ones it falls back to RowBinary for
//!    (Map(String, T) from objects, JSON, JSON with typed and skipped paths,
//!    Variant(..), Dynamic). Message `i` carries value `i % 3` of every
//!    case; every value read back must equal its expected text, every
//!    offset is there once, and the committed offsets are the end offsets.
//! 2. `unknown_type_fails_at_start_naming_column_and_type`: a `Point` column.
//! 3. `async_insert_profile_does_not_change_acknowledgements`: user
//!    `spate_async` (scripts/chdb_server.py) has a profile with
//!    `async_insert=1, wait_for_async_insert=0`, i.e. a server that would
//!    answer an INSERT before the rows are written; right after the bounded
//!    run exits every row is readable and committed == end offsets. The
//!    chdb build has no async insert queue (it inserts synchronously
//!    whatever these settings say), so on its own that part cannot catch a
//!    spate that leaves `async_insert` to the server; the second part does:
//!    user `spate_async_locked` has `async_insert=1` under a readonly
//!    constraint, so every insert that sets `async_insert` itself is refused
//!    (code 452). spate's inserts must be refused for exactly that reason.
//!
//! 26.9 only: 18.16 has none of these types (the shared types run on both
//! servers in `e2e_types.rs`) and no such profile.

use crate::support::*;
use std::time::Duration;

const N: usize = 6_000;
const PARTITIONS: i32 = 3;

/// One column: type, the SQL that reads it back as text (`{c}` = column),
/// and three (JSON value, expected text) pairs.
struct Case {
    ty: &'static str,
    read: &'static str,
    values: [(&'static str, &'static str); 3],
}

const TO_S: &str = "toString({c})";
const OR_NULL: &str = "ifNull(toString({c}), '<null>')";

const INT256_MIN: &str =
    "-57896044618658097711785492504343953926634992332820282019728792003956564819968";
const INT256_MAX: &str =
    "57896044618658097711785492504343953926634992332820282019728792003956564819967";
const UINT256_MAX: &str =
    "115792089237316195423570985008687907853269984665640564039457584007913129639935";

fn native_cases() -> Vec<Case> {
    let c = |ty, read, values| Case { ty, read, values };
    vec![
        c("DateTime64(3, 'UTC')", TO_S, [
            ("1650000000.123", "2022-04-15 05:20:00.123"),
            ("\"2022-04-15 05:20:00.5\"", "2022-04-15 05:20:00.500"),
            ("\"2022-04-15T07:20:00.007+02:00\"", "2022-04-15 05:20:00.007"),
        ]),
        c("DateTime64(9, 'UTC')", TO_S, [
            ("1650000000.123456789", "2022-04-15 05:20:00.123456789"),
            ("\"2022-04-15 05:20:00.000000001\"", "2022-04-15 05:20:00.000000001"),
            ("\"1650000000\"", "2022-04-15 05:20:00.000000000"),
        ]),
        c("Bool", TO_S, [("true", "true"), ("false", "false"), ("\"true\"", "true")]),
        c("IPv4", TO_S, [
            ("\"1.2.3.4\"", "1.2.3.4"),
            ("\"255.255.255.255\"", "255.255.255.255"),
            ("16909060", "1.2.3.4"),
        ]),
        c("IPv6", TO_S, [
            ("\"2001:db8::1\"", "2001:db8::1"),
            ("\"::ffff:1.2.3.4\"", "::ffff:1.2.3.4"),
            ("\"1.2.3.4\"", "::ffff:1.2.3.4"),
        ]),
        c("Tuple(UInt8, String)", TO_S, [
            ("[1, \"x\"]", "(1,'x')"),
            ("[255, \"\"]", "(255,'')"),
            ("[0, \"a b\"]", "(0,'a b')"),
        ]),
        c("Tuple(a UInt8, b Nullable(String))", TO_S, [
            ("{\"a\": 1, \"b\": \"x\"}", "(1,'x')"),
            ("{\"a\": 2}", "(2,NULL)"),
            ("[3, null]", "(3,NULL)"),
        ]),
        c("UUID", TO_S, [
            ("\"61f0c404-5cb3-11e7-907b-a6006ad3dba0\"", "61f0c404-5cb3-11e7-907b-a6006ad3dba0"),
            ("\"61F0C404-5CB3-11E7-907B-A6006AD3DBA0\"", "61f0c404-5cb3-11e7-907b-a6006ad3dba0"),
            ("\"00000000-0000-0000-0000-000000000001\"", "00000000-0000-0000-0000-000000000001"),
        ]),
        c("Decimal128(10)", TO_S, [
            ("\"1234567890123456789012345678.0123456789\"", "1234567890123456789012345678.0123456789"),
            ("-1.5", "-1.5"),
            ("0", "0"),
        ]),
        c("Decimal256(20)", TO_S, [
            (
                "\"12345678901234567890123456789012345678901234567890123456.12345678901234567891\"",
                "12345678901234567890123456789012345678901234567890123456.12345678901234567891",
            ),
            ("-0.00000000000000000001", "-0.00000000000000000001"),
            ("1e3", "1000"),
        ]),
        c("Int128", TO_S, [
            ("\"-170141183460469231731687303715884105728\"", "-170141183460469231731687303715884105728"),
            ("170141183460469231731687303715884105727", "170141183460469231731687303715884105727"),
            ("-1", "-1"),
        ]),
        c("Int256", TO_S, [
            (INT256_MIN_JSON, INT256_MIN),
            (INT256_MAX, INT256_MAX),
            ("-1", "-1"),
        ]),
        c("UInt256", TO_S, [(UINT256_MAX, UINT256_MAX), ("0", "0"), ("\"12345\"", "12345")]),
        c("LowCardinality(Nullable(String))", OR_NULL, [
            ("\"DE\"", "DE"),
            ("null", "<null>"),
            ("\"\"", ""),
        ]),
        c("Array(Nullable(Int32))", TO_S, [
            ("[1, null, -3]", "[1,NULL,-3]"),
            ("[]", "[]"),
            ("[null]", "[NULL]"),
        ]),
        c("Array(Nullable(String))", TO_S, [
            ("[\"a\", null]", "['a',NULL]"),
            ("[]", "[]"),
            ("[\"\"]", "['']"),
        ]),
        c("Array(Nullable(Decimal(18, 2)))", TO_S, [
            ("[1.25, null]", "[1.25,NULL]"),
            ("[]", "[]"),
            ("[\"-2.5\"]", "[-2.5]"),
        ]),
        c("Enum8('red' = 1, 'green' = 2, 'blue' = -3)", TO_S, [
            ("\"red\"", "red"),
            ("2", "green"),
            ("\"-3\"", "blue"),
        ]),
        c("Enum16('x' = 1000, 'y' = -1000)", TO_S, [
            ("\"y\"", "y"),
            ("1000", "x"),
            ("-1000", "y"),
        ]),
        // Nullable of every scalar: a value, null, and a missing key (NULL).
        c("Nullable(UInt8)", OR_NULL, [("255", "255"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(UInt16)", OR_NULL, [("65535", "65535"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(UInt32)", OR_NULL, [("\"7\"", "7"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(UInt64)", OR_NULL, [("18446744073709551615", "18446744073709551615"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(UInt128)", OR_NULL, [("\"340282366920938463463374607431768211455\"", "340282366920938463463374607431768211455"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(UInt256)", OR_NULL, [("1", "1"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Int8)", OR_NULL, [("-128", "-128"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Int16)", OR_NULL, [("-32768", "-32768"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Int32)", OR_NULL, [("-5", "-5"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Int64)", OR_NULL, [("-9223372036854775808", "-9223372036854775808"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Int128)", OR_NULL, [("-2", "-2"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Int256)", OR_NULL, [("-3", "-3"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Float32)", OR_NULL, [("1.5", "1.5"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Float64)", OR_NULL, [("-0.25", "-0.25"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(String)", OR_NULL, [("\"é\"", "é"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(FixedString(3))", OR_NULL, [("\"abc\"", "abc"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Date)", OR_NULL, [("\"2024-02-29\"", "2024-02-29"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(DateTime('UTC'))", OR_NULL, [("1700000000", "2023-11-14 22:13:20"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(DateTime64(3, 'UTC'))", OR_NULL, [("\"2023-11-14 22:13:20.001\"", "2023-11-14 22:13:20.001"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Decimal(9, 2))", OR_NULL, [("\"-1234567.89\"", "-1234567.89"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Decimal(50, 5))", OR_NULL, [("\"-1.00001\"", "-1.00001"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(UUID)", OR_NULL, [("\"61f0c404-5cb3-11e7-907b-a6006ad3dba0\"", "61f0c404-5cb3-11e7-907b-a6006ad3dba0"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(IPv4)", OR_NULL, [("\"10.0.0.1\"", "10.0.0.1"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(IPv6)", OR_NULL, [("\"fe80::1\"", "fe80::1"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Bool)", OR_NULL, [("false", "false"), ("null", "<null>"), (MISSING, "<null>")]),
        c("Nullable(Enum8('a' = 1, 'b' = 2))", OR_NULL, [("\"b\"", "b"), ("null", "<null>"), (MISSING, "<null>")]),
    ]
}

/// A key left out of the message.
const MISSING: &str = "";
/// Int256's minimum from a JSON string (the number form is in INT256_MIN's
/// neighbour, INT256_MAX).
const INT256_MIN_JSON: &str =
    "\"-57896044618658097711785492504343953926634992332820282019728792003956564819968\"";

const VARIANT_READ: &str =
    "concat(variantType({c}), ':', if(isNull({c}), '<null>', toString({c})))";
const DYNAMIC_READ: &str =
    "concat(dynamicType({c}), ':', if(isNull({c}), '<null>', toString({c})))";

fn rowbinary_cases() -> Vec<Case> {
    let c = |ty, read, values| Case { ty, read, values };
    vec![
        c(
            "Map(String, UInt32)",
            TO_S,
            [
                ("{\"a\": 1, \"b\": 2}", "{'a':1,'b':2}"),
                ("{}", "{}"),
                ("{\"k\": 4294967295}", "{'k':4294967295}"),
            ],
        ),
        c(
            "Map(String, Array(Nullable(String)))",
            TO_S,
            [
                ("{\"a\": [\"x\", null]}", "{'a':['x',NULL]}"),
                ("{\"b\": []}", "{'b':[]}"),
                ("{}", "{}"),
            ],
        ),
        c(
            "Variant(String, UInt64, Array(UInt64))",
            VARIANT_READ,
            [
                ("\"abc\"", "String:abc"),
                ("42", "UInt64:42"),
                ("[1, 2]", "Array(UInt64):[1,2]"),
            ],
        ),
        c(
            "Variant(Bool, Float64)",
            VARIANT_READ,
            [
                ("true", "Bool:true"),
                ("1.5", "Float64:1.5"),
                ("null", "None:<null>"),
            ],
        ),
        c(
            "Dynamic",
            DYNAMIC_READ,
            [
                ("42", "Int64:42"),
                ("\"x\"", "String:x"),
                ("[1, 2.5]", "Array(Nullable(Float64)):[1,2.5]"),
            ],
        ),
        c(
            "Dynamic",
            DYNAMIC_READ,
            [
                ("true", "Bool:true"),
                ("null", "None:<null>"),
                ("-1.25", "Float64:-1.25"),
            ],
        ),
    ]
}

/// JSON columns: (type, three (value, expected `toJSONString`) pairs),
/// compared as parsed JSON (path order is the server's).
const JSON_CASES: &[(&str, [(&str, &str); 3])] = &[
    (
        "JSON",
        [
            (
                r#"{"a": 1, "b": {"c": "x", "d": [1, 2]}, "e": null, "f": 1.5, "g": true}"#,
                r#"{"a": 1, "b": {"c": "x", "d": [1, 2]}, "f": 1.5, "g": true}"#,
            ),
            ("{}", "{}"),
            (
                r#"{"arr": [{"k": 1}, {"k": "s"}], "mix": [1, "a"], "big": 18446744073709551615, "s": "q\"uote"}"#,
                r#"{"arr": [{"k": 1}, {"k": "s"}], "mix": [1, "a"], "big": 18446744073709551615, "s": "q\"uote"}"#,
            ),
        ],
    ),
    (
        "JSON(a.b UInt32, SKIP c)",
        [
            (
                r#"{"a": {"b": 7}, "c": {"x": 1}, "d": "y"}"#,
                r#"{"a": {"b": 7}, "d": "y"}"#,
            ),
            ("{}", r#"{"a": {"b": 0}}"#),
            (
                r#"{"a": {"b": "9", "z": -1}}"#,
                r#"{"a": {"b": 9, "z": -1}}"#,
            ),
        ],
    ),
];

fn column(prefix: &str, k: usize) -> String {
    format!("{prefix}{k}")
}

/// The JSON payload of message `i`: value `i % 3` of every case.
fn payload(i: usize) -> String {
    let v = i % 3;
    let mut fields = vec![format!("\"id\": {i}")];
    for (k, c) in native_cases().iter().enumerate() {
        if !c.values[v].0.is_empty() {
            fields.push(format!("\"{}\": {}", column("n", k), c.values[v].0));
        }
    }
    for (k, c) in rowbinary_cases().iter().enumerate() {
        fields.push(format!("\"{}\": {}", column("r", k), c.values[v].0));
    }
    for (k, (_, values)) in JSON_CASES.iter().enumerate() {
        fields.push(format!("\"{}\": {}", column("j", k), values[v].0));
    }
    format!("{{{}}}", fields.join(", "))
}

/// Create `table` with `id` and the cases' columns; run spate on `topic`
/// into it until the end; check counts and committed offsets.
fn load(
    svc: &Services,
    ch: &Ch,
    topic: &str,
    table: &str,
    columns: &[String],
    produced: &Produced,
) {
    ch.exec(&format!(
        "CREATE TABLE {table} (id UInt64, {}, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset)",
        columns.join(", ")
    ));
    let group = unique("g_modern");
    let mut args = run_args(svc, topic, &group, table);
    args.push("--until-end".into());
    let fin = run("types_modern", &args, Duration::from_secs(120));
    fin.assert_code(0);
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    assert_eq!((uniq, count), (N as u64, N as u64), "rows in {table}");
    let want: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(
        committed(&svc.brokers, &group, topic, PARTITIONS),
        want,
        "{table}: committed offsets"
    );
}

/// `SELECT id, exprs FROM table` as one map per row, keyed by id.
fn read_back(
    ch: &Ch,
    table: &str,
    exprs: &[(String, String)],
) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let select: Vec<String> = exprs.iter().map(|(n, e)| format!("{e} AS `{n}`")).collect();
    let text = ch.text(
        &format!(
            "SELECT id, {} FROM {table} ORDER BY id \
             SETTINGS output_format_json_quote_64bit_integers = 0",
            select.join(", ")
        ),
        "JSONEachRow",
    );
    let rows: Vec<_> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad row {l:?}: {e}")))
        .collect();
    assert_eq!(rows.len(), N, "rows read back from {table}");
    rows
}

fn check_cases(ch: &Ch, table: &str, prefix: &str, cases: &[Case], mismatches: &mut Vec<String>) {
    let exprs: Vec<(String, String)> = cases
        .iter()
        .enumerate()
        .map(|(k, c)| {
            (
                column(prefix, k),
                c.read.replace("{c}", &format!("`{}`", column(prefix, k))),
            )
        })
        .collect();
    for (i, row) in read_back(ch, table, &exprs).iter().enumerate() {
        assert_eq!(
            row.get("id").and_then(|v| v.as_u64()),
            Some(i as u64),
            "{table}: ids"
        );
        for (k, c) in cases.iter().enumerate() {
            let name = column(prefix, k);
            let got = row
                .get(&name)
                .and_then(|v| v.as_str())
                .unwrap_or("<missing>");
            let (json, want) = c.values[i % 3];
            if got != want {
                mismatches.push(format!(
                    "{table} `{name}` {} from {json}: got {got:?}, want {want:?}",
                    c.ty
                ));
            }
        }
    }
}

fn check_json(ch: &Ch, table: &str, mismatches: &mut Vec<String>) {
    let exprs: Vec<(String, String)> = (0..JSON_CASES.len())
        .map(|k| {
            (
                column("j", k),
                format!("toJSONString(`{}`)", column("j", k)),
            )
        })
        .collect();
    for (i, row) in read_back(ch, table, &exprs).iter().enumerate() {
        for (k, (ty, values)) in JSON_CASES.iter().enumerate() {
            let name = column("j", k);
            let got = row
                .get(&name)
                .and_then(|v| v.as_str())
                .unwrap_or("<missing>");
            let got: serde_json::Value =
                serde_json::from_str(got).unwrap_or(serde_json::Value::Null);
            let (json, want) = values[i % 3];
            let want: serde_json::Value = serde_json::from_str(want).expect("expected JSON");
            if got != want {
                mismatches.push(format!(
                    "{table} `{name}` {ty} from {json}: got {got}, want {want}"
                ));
            }
        }
    }
}

#[test]
fn modern_types_end_to_end() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _timer = Timer::start("e2e_types_modern");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_modern");
    let topic = unique("t_modern");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: payload(i),
        timestamp_ms: None,
    });

    let native: Vec<String> = native_cases()
        .iter()
        .enumerate()
        .map(|(k, c)| format!("`{}` {}", column("n", k), c.ty))
        .collect();
    load(
        &svc,
        &ch,
        &topic,
        &format!("{db}.native"),
        &native,
        &produced,
    );
    let mut rowbinary: Vec<String> = rowbinary_cases()
        .iter()
        .enumerate()
        .map(|(k, c)| format!("`{}` {}", column("r", k), c.ty))
        .collect();
    rowbinary.extend(
        JSON_CASES
            .iter()
            .enumerate()
            .map(|(k, (ty, _))| format!("`{}` {ty}", column("j", k))),
    );
    load(
        &svc,
        &ch,
        &topic,
        &format!("{db}.rowbinary"),
        &rowbinary,
        &produced,
    );

    let mut mismatches = Vec::new();
    check_cases(
        &ch,
        &format!("{db}.native"),
        "n",
        &native_cases(),
        &mut mismatches,
    );
    check_cases(
        &ch,
        &format!("{db}.rowbinary"),
        "r",
        &rowbinary_cases(),
        &mut mismatches,
    );
    check_json(&ch, &format!("{db}.rowbinary"), &mut mismatches);
    let total = mismatches.len();
    mismatches.sort();
    mismatches.dedup_by(|a, b| a.split(": got").next() == b.split(": got").next());
    assert!(
        total == 0,
        "{total} mismatching values; distinct ones:\n{}",
        mismatches.join("\n")
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

#[test]
fn unknown_type_fails_at_start_naming_column_and_type() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_unknown_type");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (id UInt64, `where` Point) ENGINE = MergeTree() ORDER BY id"
    ));
    let topic = unique("t_unknown_type");
    create_topic(&svc.brokers, &topic, 1);
    let mut args = run_args(&svc, &topic, &unique("g_unknown_type"), &table);
    args.push("--until-end".into());
    let fin = run("unknown_type", &args, Duration::from_secs(60));
    assert_ne!(
        fin.code(),
        Some(0),
        "spate must refuse the table:\n{}",
        fin.tail(20)
    );
    assert!(
        fin.stderr.contains("`where`") && fin.stderr.contains("Point"),
        "the error must name the column and its type:\n{}",
        fin.tail(20)
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

#[test]
fn async_insert_profile_does_not_change_acknowledgements() {
    const ROWS: usize = 20_000;
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    // The profile is really there: a fresh connection as that user sees it.
    let as_async = block_on(spate_clickhouse::ChClient::connect(
        &svc.clickhouse_url,
        Some("spate_async"),
        Some("spate-test-pw"),
    ))
    .expect("connect as spate_async");
    let got = block_on(as_async.fetch_text(
        "SELECT getSetting('async_insert'), getSetting('wait_for_async_insert')",
        "TabSeparated",
    ))
    .expect("settings of spate_async");
    assert_eq!(got.trim(), "true\tfalse", "profile of spate_async");

    let table = ch.fresh_offsets_table("e2e_async");
    let topic = unique("t_async");
    let group = unique("g_async");
    create_topic(&svc.brokers, &topic, 2);
    let produced = produce(&svc.brokers, &topic, 2, ROWS, |i| Msg {
        partition: (i % 2) as i32,
        key: None,
        payload: format!("{{\"n\": {i}, \"s\": \"v{i}\"}}"),
        timestamp_ms: None,
    });
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--until-end",
            "--user",
            "spate_async",
            "--password",
            "spate-test-pw",
            "--batch-rows",
            "1000",
        ]
        .map(String::from),
    );
    let fin = run("async_profile", &args, Duration::from_secs(120));
    fin.assert_code(0);
    // No waiting: what spate acknowledged must be readable now.
    let (count, uniq) = (
        ch.u64(&format!("SELECT count() FROM {table}")),
        ch.u64(&format!(
            "SELECT uniqExact(_partition, _offset) FROM {table}"
        )),
    );
    assert_eq!(
        (count, uniq),
        (ROWS as u64, ROWS as u64),
        "rows right after the run"
    );
    let want: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    assert_eq!(
        committed(&svc.brokers, &group, &topic, 2),
        want,
        "committed == end offsets"
    );

    // spate sets async_insert on its inserts itself: a user whose profile
    // forbids changing it gets every insert refused, naming the setting.
    let group = unique("g_async_locked");
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--user",
            "spate_async_locked",
            "--password",
            "spate-test-pw",
        ]
        .map(String::from),
    );
    let running = spawn("async_locked", &args);
    wait_for(
        "spate's insert to be refused for setting async_insert",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let err = running.stderr_so_far();
            if err.contains("Setting async_insert should not be changed") {
                Ok(())
            } else {
                Err(err.lines().rev().take(5).collect::<Vec<_>>().join(" | "))
            }
        },
    );
    // A profile error is never retried: the run fails by itself, at once,
    // instead of retrying forever with its health checks green.
    let finished = running.wait(Duration::from_secs(30));
    finished.assert_code(1);
    assert_eq!(
        ch.u64(&format!("SELECT count() FROM {table}")),
        ROWS as u64,
        "no row inserted as spate_async_locked"
    );
    ch.drop_database_of(&table);
}
