//! The `spate` command line: help text, usage and configuration errors.
//!
//! Most checks need no services (configuration is validated before anything
//! is contacted); the unknown-table check needs ClickHouse and Kafka from
//! `build/services.env`.

// `is_multiple_of` is newer than the workspace's rust-version (1.85).
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

use crate::support::*;
use std::time::Duration;

/// (flag as in the help, env var, expected default: `Some("")` = some
/// default must be shown, `Some(v)` = `[default: v]`, `None` = no check)
const RUN_FLAGS: &[(&str, &str, Option<&str>)] = &[
    ("--config", "SPATE_CONFIG", None),
    ("--brokers", "SPATE_BROKERS", None),
    ("--topic", "SPATE_TOPIC", None),
    ("--group", "SPATE_GROUP", None),
    ("--clickhouse-url", "SPATE_CLICKHOUSE_URL", None),
    ("--shard", "SPATE_SHARDS", None),
    ("--shard-weights", "SPATE_SHARD_WEIGHTS", None),
    ("--cluster", "SPATE_CLUSTER", None),
    ("--shard-key", "SPATE_SHARD_KEY", None),
    ("--table", "SPATE_TABLE", None),
    ("--user", "SPATE_USER", None),
    ("--password", "SPATE_PASSWORD", None),
    ("--until-end", "SPATE_UNTIL_END", None),
    ("--strict", "SPATE_STRICT", None),
    ("--batch-rows", "SPATE_BATCH_ROWS", Some("")),
    ("--batch-bytes", "SPATE_BATCH_BYTES", Some("")),
    ("--flush-interval", "SPATE_FLUSH_INTERVAL", Some("")),
    ("--commit-interval", "SPATE_COMMIT_INTERVAL", Some("1s")),
    ("--drivers", "SPATE_DRIVERS", Some("")),
    ("--shutdown-timeout", "SPATE_SHUTDOWN_TIMEOUT", Some("30s")),
    ("--revoke-timeout", "SPATE_REVOKE_TIMEOUT", Some("")),
    ("--insert-timeout", "SPATE_INSERT_TIMEOUT", Some("30s")),
    ("--insert-request", "SPATE_INSERT_REQUEST", Some("500ms")),
    (
        "--insert-request-rows",
        "SPATE_INSERT_REQUEST_ROWS",
        Some("1000000"),
    ),
    (
        "--insert-request-bytes",
        "SPATE_INSERT_REQUEST_BYTES",
        Some(""),
    ),
    (
        "--insert-request-release",
        "SPATE_INSERT_REQUEST_RELEASE",
        None,
    ),
    ("--admin-addr", "SPATE_ADMIN_ADDR", None),
    ("--probe-interval", "SPATE_PROBE_INTERVAL", Some("5s")),
    ("--stats-interval", "SPATE_STATS_INTERVAL", Some("30s")),
    ("--stall-timeout", "SPATE_STALL_TIMEOUT", Some("60s")),
    ("-X", "SPATE_PROPERTY", None),
    ("--log-format", "SPATE_LOG_FORMAT", Some("text")),
    ("--log-level", "SPATE_LOG_LEVEL", Some("info")),
];

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The help text of one option: from its line to the next option line.
fn section<'a>(help: &'a str, flag: &str) -> Option<String> {
    let lines: Vec<&'a str> = help.lines().collect();
    let is_option_line = |l: &str| {
        let t = l.trim_start();
        t.starts_with('-') && l.len() - t.len() <= 6
    };
    let start = lines.iter().position(|l| {
        is_option_line(l) && l.trim_start().split([' ', ',', '\t']).any(|w| w == flag)
    })?;
    let end = lines[start + 1..]
        .iter()
        .position(|l| is_option_line(l))
        .map_or(lines.len(), |e| start + 1 + e);
    Some(lines[start..end].join("\n"))
}

/// Minimal valid `run` arguments pointing nowhere useful; configuration
/// errors must be reported before anything is contacted.
fn offline_run(extra: &[&str]) -> Vec<String> {
    let mut a = args(&[
        "run",
        "--brokers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--group",
        "g",
        "--clickhouse-url",
        "http://127.0.0.1:1",
        "--table",
        "db.t",
    ]);
    a.extend(args(extra));
    a
}

#[test]
fn run_help_lists_every_flag_with_defaults() {
    let fin = run("help", &args(&["run", "--help"]), Duration::from_secs(20));
    fin.assert_code(0);
    let help = std::fs::read_to_string(fin.stderr_path.with_extension("stdout")).expect("stdout");
    let mut problems = Vec::new();
    for (flag, env, default) in RUN_FLAGS {
        let Some(sec) = section(&help, flag) else {
            problems.push(format!("{flag}: not in the help"));
            continue;
        };
        if !sec.contains(&format!("[env: {env}")) {
            problems.push(format!("{flag}: env var {env} not shown"));
        }
        match default {
            Some("") if !sec.contains("[default:") => {
                problems.push(format!("{flag}: no default shown"))
            }
            Some(v) if !v.is_empty() && !sec.contains(&format!("[default: {v}]")) => {
                problems.push(format!("{flag}: default {v} not shown"))
            }
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{problems:#?}\nhelp:\n{help}");
}

#[test]
fn gen_help_lists_its_flags() {
    let fin = run(
        "gen-help",
        &args(&["gen", "--help"]),
        Duration::from_secs(20),
    );
    fin.assert_code(0);
    let help = std::fs::read_to_string(fin.stderr_path.with_extension("stdout")).expect("stdout");
    for flag in ["--brokers", "--topic", "--count", "--partitions", "-X"] {
        assert!(section(&help, flag).is_some(), "{flag} not in:\n{help}");
    }
}

#[test]
fn missing_table_is_a_usage_error() {
    let a = args(&[
        "run",
        "--brokers",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--group",
        "g",
        "--clickhouse-url",
        "http://127.0.0.1:1",
    ]);
    let fin = run("no-table", &a, Duration::from_secs(20));
    fin.assert_code(2);
    assert!(
        fin.stderr.contains("--table"),
        "stderr does not name --table:\n{}",
        fin.stderr
    );
}

#[test]
fn property_without_equals_is_a_usage_error() {
    let fin = run(
        "bad-property",
        &offline_run(&["-X", "session.timeout.ms"]),
        Duration::from_secs(20),
    );
    fin.assert_code(2);
    assert!(
        fin.last_line().starts_with("spate: error:") || fin.stderr.contains("error:"),
        "no error message:\n{}",
        fin.stderr
    );
    assert!(
        fin.stderr.contains("session.timeout.ms"),
        "the error does not quote the bad property:\n{}",
        fin.stderr
    );
}

#[test]
fn revoke_timeout_not_below_session_timeout_is_a_usage_error() {
    let fin = run(
        "revoke-vs-session",
        &offline_run(&["--revoke-timeout", "10s", "-X", "session.timeout.ms=6000"]),
        Duration::from_secs(20),
    );
    fin.assert_code(2);
    let last = fin.last_line();
    assert!(
        last.starts_with("spate: error:"),
        "last line: {last:?}\n{}",
        fin.stderr
    );
    assert!(
        last.contains("session.timeout.ms"),
        "does not name session.timeout.ms: {last}"
    );
    assert!(
        last.contains("revoke-timeout") || last.contains("revoke_timeout"),
        "does not name --revoke-timeout: {last}"
    );
}

/// `run` arguments with `--shard` flags instead of `--clickhouse-url`.
fn offline_shards(extra: &[&str]) -> Vec<String> {
    let mut a = offline_run(&[]);
    let i = a
        .iter()
        .position(|x| x == "--clickhouse-url")
        .expect("offline_run has --clickhouse-url");
    a.drain(i..i + 2);
    a.extend(args(extra));
    a
}

#[test]
fn shard_flag_mistakes_are_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "--shard",
                "http://127.0.0.1:1",
                "--shard",
                "http://127.0.0.1:2",
                "--shard-weights",
                "1,2,3",
            ],
            "3 weights for 2 shards",
        ),
        (
            &["--shard", "ftp://127.0.0.1:1"],
            "is not an http(s):// URL",
        ),
        (
            &["--shard", "http://127.0.0.1:1", "--shard-weights", "0"],
            "weight 0",
        ),
        (
            &[
                "--shard",
                "http://127.0.0.1:1",
                "--clickhouse-url",
                "http://127.0.0.1:1",
            ],
            "cannot be used with",
        ),
        (&["--shard-weights", "1"], "--shard"),
    ];
    for (extra, want) in cases {
        let a = if extra[0] == "--shard" {
            offline_shards(extra)
        } else {
            offline_run(extra)
        };
        let fin = run("shard-usage", &a, Duration::from_secs(20));
        fin.assert_code(2);
        let last = fin.last_line();
        assert!(
            last.starts_with("spate: error:") && last.contains(want),
            "{extra:?}: last line {last:?}, want {want:?}\n{}",
            fin.tail(10)
        );
    }
}

on_both_servers!(an_unsupported_shard_key_is_named);

fn an_unsupported_shard_key_is_named(svc: Services) {
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("cli_shard_key");
    ch.exec(&format!(
        "CREATE TABLE {db}.t (tags Array(String), n UInt64) ENGINE = MergeTree() ORDER BY n"
    ));
    let topic = unique("t_cli_shard_key");
    create_topic(&svc.brokers, &topic, 1);
    for (key, want) in [
        ("tags", "type Array(String) is not supported in a shard key"),
        ("nope", "not an insertable column"),
    ] {
        let mut a = run_args(&svc, &topic, &unique("g_cli_shard_key"), &format!("{db}.t"));
        a.extend(args(&["--until-end", "--shard-key", key]));
        let fin = run("shard-key", &a, Duration::from_secs(60));
        fin.assert_code(2);
        let last = fin.last_line();
        assert!(
            last.contains(&format!("`{key}`")) && last.contains(want),
            "last line: {last:?}\n{}",
            fin.tail(10)
        );
    }
    ch.exec(&format!("DROP DATABASE {db}"));
}

on_both_servers!(unknown_table_names_it);

fn unknown_table_names_it(svc: Services) {
    let _lock = ch_shared_lock();
    let topic = unique("t_cli_notable");
    create_topic(&svc.brokers, &topic, 1);
    let mut a = run_args(&svc, &topic, &unique("g_cli_notable"), "nosuchdb.nosuch");
    a.push("--until-end".into());
    let fin = run("unknown-table", &a, Duration::from_secs(90));
    assert!(
        matches!(fin.code(), Some(1 | 2)),
        "exit {:?}, want 2 (or 1); tail:\n{}",
        fin.status,
        fin.tail(20)
    );
    let last = fin.last_line();
    assert!(
        last.starts_with("spate: error:"),
        "last line: {last:?}\n{}",
        fin.tail(20)
    );
    assert!(
        last.contains("nosuchdb.nosuch"),
        "does not name the table: {last}"
    );
    eprintln!(
        "[cli] unknown table: exit {:?} after {:.1?}: {last}",
        fin.code(),
        fin.elapsed
    );
}

on_both_servers!(bounded_run_on_a_missing_topic_fails_naming_it);

fn bounded_run_on_a_missing_topic_fails_naming_it(svc: Services) {
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("cli_notopic");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n UInt64) ENGINE = MergeTree() ORDER BY n"
    ));
    // Never created: a bounded run must not wait for it forever.
    let topic = unique("t_cli_missing");
    let mut a = run_args(&svc, &topic, &unique("g_cli_missing"), &table);
    a.push("--until-end".into());
    let fin = run("missing-topic", &a, Duration::from_secs(60));
    fin.assert_code(1);
    let last = fin.last_line();
    assert!(
        last.starts_with("spate: error:") && last.contains(&topic) && last.contains("not found"),
        "last line: {last:?}\n{}",
        fin.tail(20)
    );
}
