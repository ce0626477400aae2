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

mod support;

use std::time::Duration;
use support::*;

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
    let now = support::committed(&svc.brokers, group, topic, committed.len() as i32);
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
