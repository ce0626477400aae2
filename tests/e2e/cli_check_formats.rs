//! `spate check --format avro|protobuf`: the sample is decoded in the
//! pipeline's format (through the test schema registry), not as JSON.
//!
//! - Demo events from `spate gen --format F`: exit 0, the registry said to
//!   answer, every column decoded for every sampled message, the report
//!   naming the format's records.
//! - One more message that is not in the Confluent wire format (a JSON
//!   text): exit 1, the report and the last stderr line name its magic
//!   byte, partition and offset; nothing is committed.

use crate::support::*;
use std::time::Duration;

const PARTITIONS: i32 = 2;
const EVENTS: usize = 40;
const TIMEOUT: Duration = Duration::from_secs(90);

/// The stdout of a finished spate (`spawn` writes it next to stderr).
fn stdout_of(fin: &Finished) -> String {
    let path = fin.stderr_path.with_extension("stdout");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `[decoded, failed]` of `column`'s report row.
fn counts(stdout: &str, column: &str) -> [u64; 2] {
    let row = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&column) && w.len() >= 4 && w[2].parse::<u64>().is_ok())
        .unwrap_or_else(|| panic!("no report row for column {column}:\n{stdout}"));
    [row[2].parse().unwrap_or(0), row[3].parse().unwrap_or(0)]
}

#[test]
fn check_samples_avro_and_protobuf_in_their_format() {
    let Some(svc) = services() else { return };
    let _timer = Timer::start("cli_check_formats");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("cli_check_fmt");
    let reg = TestRegistry::start(None);
    for (format, record) in [("avro", "Avro record"), ("protobuf", "Protobuf message")] {
        let table = format!("{db}.{format}");
        ch.exec(&format!(
            "CREATE TABLE {table} (ts DateTime, user_id UInt64, event String, value Float64, tags Array(String)) ENGINE = MergeTree() ORDER BY ts"
        ));
        let topic = unique(&format!("t_check_{format}"));
        let mut gen: Vec<String> = ["gen", "--brokers", &svc.brokers, "--topic", &topic]
            .map(String::from)
            .to_vec();
        gen.extend(["--count", &EVENTS.to_string(), "--partitions", "2"].map(String::from));
        let registry = ["--format", format, "--schema-registry", &reg.url()].map(String::from);
        gen.extend(registry.clone());
        run(&format!("gen_{format}"), &gen, TIMEOUT).assert_code(0);

        let group = unique("g_check_fmt");
        let mut args = run_args(&svc, &topic, &group, &table);
        args[0] = "check".into();
        args.extend(["--samples".into(), "100".into()]);
        args.extend(registry);
        let fin = run(&format!("check_{format}_good"), &args, TIMEOUT);
        let out = stdout_of(&fin);
        fin.assert_code(0);
        assert!(out.contains("OK: schema registry http://"), "{out}");
        assert!(out.contains(record), "the report names the format:\n{out}");
        assert!(
            out.contains(&format!("{EVENTS} message(s) sampled")),
            "{out}"
        );
        for column in ["ts", "user_id", "event", "value", "tags"] {
            assert_eq!(counts(&out, column), [EVENTS as u64, 0], "{column}:\n{out}");
        }

        // One JSON demo event: `spate gen` puts event 0 on partition 0,
        // which holds events 0, 2, ... so far, so it lands at offset 20.
        let json: Vec<String> = [
            "gen",
            "--brokers",
            &svc.brokers,
            "--topic",
            &topic,
            "--count",
            "1",
        ]
        .map(String::from)
        .to_vec();
        run(&format!("gen_json_into_{format}"), &json, TIMEOUT).assert_code(0);
        let fin = run(&format!("check_{format}_bad"), &args, TIMEOUT);
        let out = stdout_of(&fin);
        fin.assert_code(1);
        let line = fin.last_line();
        for w in [
            "1 of 41 sampled messages",
            "magic byte 0x7b",
            "partition 0 offset 20",
        ] {
            assert!(line.contains(w), "{w:?} in the last line: {line}");
            assert!(out.contains(w) || w.starts_with("1 of"), "{w:?} in:\n{out}");
        }
        assert_eq!(
            committed(&svc.brokers, &group, &topic, PARTITIONS),
            vec![None; PARTITIONS as usize],
            "check commits nothing"
        );
        assert_eq!(ch.u64(&format!("SELECT count() FROM {table}")), 0);
    }
}
