//! `spate check`: connects, reads the schema and decodes a sample of each
//! topic, writing nothing and committing nothing.
//!
//! - A topic with one bad message among 50 good ones: exit 1, and the
//!   report and the last stderr line name the column, the value, the
//!   partition and the offset; the group has no committed offset and the
//!   table is still empty afterwards.
//! - Only good messages: exit 0, every column decoded for every sampled
//!   message; a smaller `--samples` is spread over the partitions.
//! - An unknown table: exit 2, naming it.
//! - After a `run` stopped at a bad message, the sample starts at the
//!   group's committed offset, i.e. at that message.
//! - A broker the flags cannot reach gets one line, in the report and on
//!   stderr, naming its endpoint and the step: certificate verification for
//!   a wrong CA and SASL for a wrong password (exit 2), TCP for a closed
//!   port (exit 1); with the right settings each broker is said to answer.

use crate::support::*;
use std::time::Duration;

const PARTITIONS: i32 = 2;
const TIMEOUT: Duration = Duration::from_secs(90);

/// `spate check` arguments: `run_args` with the subcommand swapped.
fn check_args(
    svc: &Services,
    topic: &str,
    group: &str,
    table: &str,
    samples: usize,
) -> Vec<String> {
    let mut args = run_args(svc, topic, group, table);
    args[0] = "check".into();
    args.extend(["--samples".into(), samples.to_string()]);
    args
}

/// The stdout of a finished spate (`spawn` writes it next to stderr).
fn stdout_of(fin: &Finished) -> String {
    let path = fin.stderr_path.with_extension("stdout");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The report row of `column` in the topic's table, split on whitespace:
/// `[column, type, decoded, failed, first failure...]`.
fn column_row<'a>(stdout: &'a str, column: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&column) && w.len() >= 4 && w[2].parse::<u64>().is_ok())
        .unwrap_or_else(|| panic!("no report row for column {column}:\n{stdout}"))
}

/// Message `i` goes to partition `i % 2`; its offset there is `i / 2`.
fn good(i: usize) -> Msg {
    Msg {
        partition: (i % 2) as i32,
        key: None,
        payload: format!(r#"{{"n": {i}, "s": "m{i}"}}"#),
        timestamp_ms: None,
    }
}

/// The group's committed offsets are `committed` and `table` holds `rows`.
fn assert_unchanged(
    svc: &Services,
    ch: &Ch,
    (group, topic): (&str, &str),
    committed: &[Option<i64>],
    (table, rows): (&str, u64),
) {
    let now = crate::support::committed(&svc.brokers, group, topic, committed.len() as i32);
    assert_eq!(now, committed, "committed offsets changed");
    assert_eq!(
        ch.u64(&format!("SELECT count() FROM {table}")),
        rows,
        "rows in {table}"
    );
}

on_both_servers!(check_reports_the_bad_message);

fn check_reports_the_bad_message(svc: Services) {
    let _timer = Timer::start("cli_check_bad");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (topic, group) = (unique("t_check_bad"), unique("g_check_bad"));
    let table = ch.fresh_offsets_table("cli_check_bad");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    // 51 messages; index 27 is partition 1, offset 13.
    let (bad_index, bad_partition, bad_offset) = (27, 1, 13);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, 51, |i| {
        let mut m = good(i);
        if i == bad_index {
            m.payload = r#"{"n": "not-a-number", "s": "x"}"#.into();
        }
        m
    });
    assert_eq!(produced.placement[bad_index], (bad_partition, bad_offset));

    let fin = run(
        "check-bad",
        &check_args(&svc, &topic, &group, &table, 100),
        TIMEOUT,
    );
    let stdout = stdout_of(&fin);
    eprintln!("[cli_check] report:\n{stdout}");
    fin.assert_code(1);
    let last = fin.last_line();
    for needle in [
        "spate: error: 1 of 51 sampled messages cannot be inserted".to_owned(),
        "column `n` (UInt64)".to_owned(),
        "not-a-number".to_owned(),
        format!("topic {topic} partition {bad_partition} offset {bad_offset}"),
    ] {
        assert!(last.contains(&needle), "last line lacks {needle:?}: {last}");
    }
    assert!(stdout.contains("51 message(s) sampled"), "{stdout}");
    let n = column_row(&stdout, "n");
    assert_eq!(n[1..4], ["UInt64", "50", "1"], "row of n: {n:?}");
    let first_failure = n[4..].join(" ");
    assert!(
        first_failure.contains("not-a-number")
            && first_failure.contains(&format!("partition {bad_partition} offset {bad_offset}")),
        "first failure of n: {first_failure}"
    );
    for column in ["s", "_partition", "_offset"] {
        assert_eq!(column_row(&stdout, column)[2..4], ["51", "0"], "{column}");
    }
    let nothing = [None; PARTITIONS as usize];
    assert_unchanged(&svc, &ch, (&group, &topic), &nothing, (&table, 0));
    ch.drop_database_of(&table);
}

on_both_servers!(check_passes_good_messages);

fn check_passes_good_messages(svc: Services) {
    let _timer = Timer::start("cli_check_good");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (topic, group) = (unique("t_check_good"), unique("g_check_good"));
    let table = ch.fresh_offsets_table("cli_check_good");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    produce(&svc.brokers, &topic, PARTITIONS, 40, good);

    let fin = run(
        "check-good",
        &check_args(&svc, &topic, &group, &table, 100),
        TIMEOUT,
    );
    let stdout = stdout_of(&fin);
    eprintln!("[cli_check] report:\n{stdout}");
    fin.assert_code(0);
    assert!(stdout.contains("40 message(s) sampled"), "{stdout}");
    assert!(
        stdout.contains(&format!("OK: shard 1 replica 1 {}", svc.clickhouse_url)),
        "{stdout}"
    );
    for column in ["n", "s", "_partition", "_offset"] {
        assert_eq!(column_row(&stdout, column)[2..4], ["40", "0"], "{column}");
    }
    assert!(stdout.contains("Kafka message metadata"), "{stdout}");

    // A smaller sample is spread over the partitions.
    let fin = run(
        "check-good-10",
        &check_args(&svc, &topic, &group, &table, 10),
        TIMEOUT,
    );
    let stdout = stdout_of(&fin);
    fin.assert_code(0);
    assert!(stdout.contains("10 message(s) sampled"), "{stdout}");
    for p in 0..PARTITIONS {
        assert!(
            stdout.contains(&format!(
                "partition {p} from the start (nothing committed): 5 sampled\n"
            )),
            "partition {p}:\n{stdout}"
        );
    }
    let nothing = [None; PARTITIONS as usize];
    assert_unchanged(&svc, &ch, (&group, &topic), &nothing, (&table, 0));
    ch.drop_database_of(&table);
}

on_both_servers!(check_names_a_missing_table);

fn check_names_a_missing_table(svc: Services) {
    let _timer = Timer::start("cli_check_missing_table");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (topic, group) = (unique("t_check_nt"), unique("g_check_nt"));
    let db = ch.fresh_db("cli_check_nt");
    create_topic(&svc.brokers, &topic, 1);
    let table = format!("{db}.missing");

    let fin = run(
        "check-missing-table",
        &check_args(&svc, &topic, &group, &table, 100),
        TIMEOUT,
    );
    eprintln!("[cli_check] report:\n{}", stdout_of(&fin));
    fin.assert_code(2);
    let last = fin.last_line();
    assert!(
        last.starts_with("spate: error:") && last.contains(&format!("`{table}`")),
        "the error line does not name {table}: {last}"
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

on_both_servers!(check_samples_from_the_committed_offsets);

fn check_samples_from_the_committed_offsets(svc: Services) {
    let _timer = Timer::start("cli_check_committed");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let (topic, group) = (unique("t_check_committed"), unique("g_check_committed"));
    let table = ch.fresh_offsets_table("cli_check_committed");
    create_topic(&svc.brokers, &topic, 1);
    // Offsets 0..10 are good, offset 10 is not.
    produce(&svc.brokers, &topic, 1, 11, |i| Msg {
        partition: 0,
        payload: if i == 10 {
            r#"{"n": -1}"#.into()
        } else {
            good(i).payload
        },
        ..good(i)
    });
    // `run` inserts and commits the good ones and stops at the bad one.
    let mut args = run_args(&svc, &topic, &group, &table);
    args.push("--until-end".into());
    run("check-committed-run", &args, Duration::from_secs(120)).assert_code(1);
    assert_unchanged(&svc, &ch, (&group, &topic), &[Some(10)], (&table, 10));

    let fin = run(
        "check-committed",
        &check_args(&svc, &topic, &group, &table, 100),
        TIMEOUT,
    );
    let stdout = stdout_of(&fin);
    eprintln!("[cli_check] report:\n{stdout}");
    fin.assert_code(1);
    assert!(
        stdout.contains("partition 0 from the committed offset 10: 1 sampled, end reached"),
        "{stdout}"
    );
    let last = fin.last_line();
    assert!(
        last.contains("1 of 1 sampled messages cannot be inserted: column `n` (UInt64): value -1")
            && last.contains(&format!("topic {topic} partition 0 offset 10")),
        "{last}"
    );
    assert_unchanged(&svc, &ch, (&group, &topic), &[Some(10)], (&table, 10));
    ch.drop_database_of(&table);
}

/// `spate check` against a broker the flags cannot reach: the exit code,
/// and exactly one line in the report and on stderr for the broker, naming
/// its endpoint and each of `wants`, whatever librdkafka retried meanwhile.
/// Kafka-side only: on 18.16.
fn check_fails_on_the_broker(endpoint: &KafkaEndpoint, label: &str, code: i32, wants: &[&str]) {
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let table = ch.fresh_offsets_table(&format!("cli_check_{}", label.replace('-', "_")));
    let (topic, group) = (unique("t_check_broker"), unique("g_check_broker"));
    let mut args = check_args(&svc, &topic, &group, &table, 10);
    args[2] = endpoint.brokers.clone();
    args.extend(endpoint.x_args());
    let started = std::time::Instant::now();
    let fin = run(label, &args, TIMEOUT);
    let stdout = stdout_of(&fin);
    eprintln!(
        "[cli_check] {label} after {:.1?}:\n{stdout}",
        started.elapsed()
    );
    fin.assert_code(code);
    let broker = format!("Kafka broker {}", endpoint.brokers);
    let fails: Vec<&str> = stdout.lines().filter(|l| l.contains("FAIL:")).collect();
    assert_eq!(fails.len(), 1, "{label}: one FAIL line: {fails:?}");
    let on_stderr: Vec<&str> = fin
        .stderr
        .lines()
        .filter(|l| l.contains(&endpoint.brokers))
        .collect();
    assert_eq!(
        on_stderr.len(),
        1,
        "{label}: one stderr line about the broker: {on_stderr:?}"
    );
    for line in [fails[0], on_stderr[0]] {
        assert!(line.contains(&broker), "{label}: names {broker}: {line}");
        for want in wants {
            assert!(line.contains(want), "{label}: says {want:?}: {line}");
        }
    }
    assert!(
        on_stderr[0].starts_with("spate: error: "),
        "{}",
        on_stderr[0]
    );
    ch.drop_database_of(&table);
}

#[test]
fn check_names_the_broker_and_the_certificate_step_for_a_wrong_ca() {
    let Some(k) = secure_kafka() else { return };
    // The server's own certificate is no CA of it.
    let wrong = std::env::var("SPATE_TEST_KAFKA_CA")
        .map(|ca| ca.replace("ca.crt", "server.crt"))
        .unwrap_or_default();
    check_fails_on_the_broker(
        &k.tls(&wrong),
        "check-wrong-ca",
        2,
        &["TLS certificate verification failed", "ssl.ca.location"],
    );
}

#[test]
fn check_names_the_broker_and_sasl_for_a_wrong_password() {
    let Some(k) = secure_kafka() else { return };
    check_fails_on_the_broker(
        &k.scram_tls("SCRAM-SHA-256", "not-the-password"),
        "check-wrong-password",
        2,
        &["(sasl_ssl)", "SASL authentication failed"],
    );
}

#[test]
fn check_names_the_broker_and_tcp_for_a_closed_port() {
    if secure_kafka().is_none() {
        return;
    }
    // A port nothing listens on: bound once by us, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    check_fails_on_the_broker(
        &KafkaEndpoint::plain(&format!("127.0.0.1:{port}")),
        "check-closed-port",
        1,
        &["TCP connection failed", "Connection refused"],
    );
}

#[test]
fn check_passes_over_sasl_ssl_and_says_each_broker_answers() {
    let Some(k) = secure_kafka() else { return };
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let endpoint = k.scram_tls("SCRAM-SHA-512", &k.password);
    let table = ch.fresh_offsets_table("cli_check_sasl_ssl");
    let (topic, group) = (unique("t_check_sasl_ssl"), unique("g_check_sasl_ssl"));
    create_topic_at(&endpoint, &topic, PARTITIONS);
    produce_at(&endpoint, &topic, PARTITIONS, 20, good);
    let mut args = check_args(&svc, &topic, &group, &table, 10);
    args[2] = endpoint.brokers.clone();
    args.extend(endpoint.x_args());
    let fin = run("check-sasl-ssl", &args, TIMEOUT);
    let stdout = stdout_of(&fin);
    eprintln!("[cli_check] report:\n{stdout}");
    fin.assert_code(0);
    assert!(
        stdout.contains(&format!("OK: broker {} answers", endpoint.brokers)),
        "{stdout}"
    );
    ch.drop_database_of(&table);
}

on_both_servers!(check_reports_each_routed_table);

/// A routing pipeline is checked table by table: a topic's existing
/// table, a topic outside the allowlist (named, with its reason; exit 2
/// under --on-error fail, 0 under skip), and a missing table `run` would
/// create, checked against its template.
fn check_reports_each_routed_table(svc: Services) {
    let _timer = Timer::start("cli_check_routing");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("cli_check_route");
    let prefix = unique("cr");
    let columns =
        "(n UInt64, s String, _partition UInt32, _offset UInt64) ENGINE = MergeTree() ORDER BY n";
    ch.exec(&format!("CREATE TABLE {db}.{prefix}_a {columns}"));
    ch.exec(&format!("CREATE TABLE {db}.tmpl {columns}"));
    for t in ["a", "new", "deny"] {
        create_topic(&svc.brokers, &format!("{prefix}_{t}"), PARTITIONS);
        produce(&svc.brokers, &format!("{prefix}_{t}"), PARTITIONS, 10, good);
    }
    let mut args = check_args(
        &svc,
        &format!("^{prefix}_"),
        &unique("g_check_route"),
        &format!("{db}.{{topic}}"),
        10,
    );
    args.extend(
        [
            "--allow-tables",
            &format!(r"{db}\.{prefix}_(a|new)"),
            "--create-table-like",
            &format!("{db}.tmpl"),
        ]
        .map(String::from),
    );
    let fin = run("check-route", &args, TIMEOUT);
    let stdout = stdout_of(&fin);
    eprintln!("[cli_check] report:\n{stdout}");
    fin.assert_code(2);
    assert!(
        stdout.contains("routing: 2 table(s), 1 topic(s) without one"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("topic {prefix}_deny: table {db}.{prefix}_deny (of topic {prefix}_deny) is not allowed by --allow-tables")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("== table {db}.{prefix}_a (topics {prefix}_a)")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{db}.{prefix}_new does not exist: run creates it as {db}.tmpl"
        )),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("10 message(s) sampled").count(),
        2,
        "{stdout}"
    );
    assert!(
        fin.last_line().contains("under --on-error fail"),
        "{}",
        fin.last_line()
    );
    args.extend(["--on-error", "skip"].map(String::from));
    run("check-route-skip", &args, TIMEOUT).assert_code(0);
    assert_eq!(
        ch.u64(&format!(
            "SELECT count() FROM system.tables WHERE database = '{db}'"
        )),
        2,
        "check creates no table"
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}

/// A template naming the table by a header: each sampled message is
/// resolved, and the report says, per table, how many name it, how many
/// name a table `run` would create, and how many name one outside the
/// allowlist; under `--on-error fail` those stop the check (exit 1). On
/// one server: resolution is spate's own, the same on both.
#[test]
fn check_resolves_a_header_template_per_sampled_message() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _timer = Timer::start("cli_check_header");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("cli_check_header");
    let columns = "(n UInt64, s String, _partition UInt32, _offset UInt64) \
                   ENGINE = MergeTree() ORDER BY n";
    ch.exec(&format!("CREATE TABLE {db}.ev_a {columns}"));
    ch.exec(&format!("CREATE TABLE {db}.tmpl {columns}"));
    let topic = unique("chk_hdr");
    create_topic(&svc.brokers, &topic, PARTITIONS);
    produce_tenants(&svc.brokers, &topic, 0..20, |i| {
        Some(match i % 4 {
            0 | 1 => "a",
            2 => "new",
            _ => "deny",
        })
    });
    let mut args = check_args(
        &svc,
        &topic,
        &unique("g_check_hdr"),
        &format!("{db}.ev_{{header:tenant}}"),
        20,
    );
    args.extend(
        [
            "--allow-tables",
            &format!(r"{db}\.ev_(a|new)"),
            "--create-table-like",
            &format!("{db}.tmpl"),
        ]
        .map(String::from),
    );
    let fin = run("check-header", &args, TIMEOUT);
    let stdout = stdout_of(&fin);
    eprintln!("[cli_check] report:\n{stdout}");
    for want in [
        "routing: 1 table(s), 0 topic(s) without one".to_owned(),
        format!("== table {db}.ev_a (topics {topic})"),
        format!("topic {topic}: 10 sampled message(s) name this table, 0 another one it routes to"),
        format!("5: table {db}.ev_new does not exist: run creates it from --create-table-like"),
        format!(
            "5 name no table it can write: table {db}.ev_deny is not allowed by --allow-tables"
        ),
    ] {
        assert!(stdout.contains(&want), "{want} in\n{stdout}");
    }
    fin.assert_code(1);
    assert!(
        fin.last_line().contains("under --on-error fail"),
        "{}",
        fin.last_line()
    );
    args.extend(["--on-error", "skip"].map(String::from));
    run("check-header-skip", &args, TIMEOUT).assert_code(0);
    assert_eq!(
        ch.u64(&format!(
            "SELECT count() FROM system.tables WHERE database = '{db}'"
        )),
        2,
        "check creates no table"
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}
