//! `spate run --config FILE`: two pipelines (two topics into two tables
//! with different columns and batching) in one process; an unknown key is
//! a usage error naming the key and its line; `--print-config` shows that
//! flags beat `SPATE_*` variables, which beat the file, with secrets
//! masked; and `--print-config` prints a file `--config` reads back to
//! the same text, a masked secret in it refused naming the key.

use crate::support::*;
use std::time::Duration;

/// Write `text` to a fresh file under the test log directory.
fn config_file(name: &str, text: &str) -> String {
    let path = log_dir().join(format!("{}.toml", unique(name)));
    std::fs::write(&path, text).expect("write the config file");
    path.to_string_lossy().into_owned()
}

on_both_servers!(two_pipelines_from_one_file_fill_two_tables);

fn two_pipelines_from_one_file_fill_two_tables(svc: Services) {
    let _lock = ch_shared_lock();
    let _timer = Timer::start("e2e_config::two_pipelines");
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("config_two");
    ch.exec(&format!(
        "CREATE TABLE {db}.orders (id UInt64, amount Float64, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree ORDER BY (_partition, _offset)"
    ));
    ch.exec(&format!(
        "CREATE TABLE {db}.clicks (user String, _topic String, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree ORDER BY (_partition, _offset)"
    ));
    let (orders, clicks) = (unique("t_cfg_orders"), unique("t_cfg_clicks"));
    create_topic(&svc.brokers, &orders, 2);
    create_topic(&svc.brokers, &clicks, 3);
    let po = produce(&svc.brokers, &orders, 2, 3000, |i| Msg {
        partition: (i % 2) as i32,
        key: None,
        payload: format!(r#"{{"id":{i},"amount":{i}.5}}"#),
        timestamp_ms: None,
    });
    let pc = produce(&svc.brokers, &clicks, 3, 4500, |i| Msg {
        partition: (i % 3) as i32,
        key: None,
        payload: format!(r#"{{"user":"u{i}"}}"#),
        timestamp_ms: None,
    });
    let group = unique("g_cfg");
    let file = config_file(
        "two_pipelines",
        &format!(
            r#"# two pipelines, one process
brokers = "{brokers}"
group = "{group}"
clickhouse_url = "{ch}"
until_end = true
drivers = 2
flush_interval = "200ms"
shutdown_timeout = "60s"

[kafka]
"session.timeout.ms" = "{session}"

[[pipeline]]
name = "orders"
topics = ["{orders}"]
table = "{db}.orders"
batch_rows = 500

[[pipeline]]
name = "clicks"
topics = ["{clicks}"]
table = "{db}.clicks"
strict = true
"#,
            brokers = svc.brokers,
            ch = svc.clickhouse_url,
            session = SESSION_TIMEOUT_MS,
        ),
    );
    let fin = run(
        "config-two",
        &["run".to_string(), "--config".into(), file],
        Duration::from_secs(120),
    );
    fin.assert_code(0);
    // The drain must end when the queues close, not at the shutdown
    // deadline (a leftover queue handle once made every bounded run wait
    // out the whole budget).
    assert!(
        fin.elapsed < Duration::from_secs(45),
        "the run waited out its 60 s shutdown budget: {:?}",
        fin.elapsed
    );
    for (table, topic, produced, partitions) in
        [("orders", &orders, &po, 2), ("clicks", &clicks, &pc, 3)]
    {
        let rows = ch.u64(&format!("SELECT count() FROM {db}.{table}"));
        let distinct = ch.u64(&format!(
            "SELECT uniqExact(_partition, _offset) FROM {db}.{table}"
        ));
        eprintln!(
            "[e2e_config] {table}: {rows} rows, {distinct} distinct offsets, produced {}",
            produced.total()
        );
        assert_eq!(
            distinct,
            produced.total() as u64,
            "{table}: every message arrived"
        );
        let committed = committed(&svc.brokers, &group, topic, partitions);
        for (p, c) in committed.iter().enumerate() {
            assert_eq!(
                *c,
                Some(produced.counts[p]),
                "{topic} partition {p}: committed = end offset"
            );
        }
    }
    // Each pipeline wrote its own columns: no clicks in orders and back.
    assert_eq!(
        ch.u64(&format!(
            "SELECT countIf(_topic != '{clicks}') FROM {db}.clicks"
        )),
        0
    );
    assert_eq!(ch.u64(&format!("SELECT max(id) FROM {db}.orders")), 2999);
    ch.exec(&format!("DROP DATABASE {db}"));
}

#[test]
fn an_unknown_key_names_the_key_and_its_line() {
    let file = config_file(
        "unknown_key",
        "brokers = \"127.0.0.1:1\"\ngroup = \"g\"\n\n[[pipeline]]\ntopics = [\"t\"]\ntable = \"db.t\"\nbatch_rowz = 10\n",
    );
    let fin = run(
        "config-unknown",
        &["run".to_string(), "--config".into(), file],
        Duration::from_secs(20),
    );
    fin.assert_code(2);
    let last = fin.last_line();
    assert!(
        last.starts_with("spate: error:")
            && last.contains("`batch_rowz`")
            && last.contains("line 7"),
        "last line: {last}"
    );
}

#[test]
fn flags_beat_the_environment_which_beats_the_file() {
    let file = config_file(
        "precedence",
        "brokers = \"file:9092\"\ngroup = \"g\"\ntopics = [\"t\"]\ntable = \"db.t\"\n\
         clickhouse_url = \"http://file:8123\"\nbatch_rows = 5000\nflush_interval = \"3s\"\n\
         insert_workers = 3\npassword = \"hunter2\"\n[kafka]\n\"sasl.password\" = \"s3cret\"\n\
         \"fetch.min.bytes\" = \"1\"\n",
    );
    let args = [
        "run",
        "--config",
        &file,
        "--print-config",
        "--batch-rows",
        "7000",
    ]
    .map(String::from);
    let fin = spawn_with_env(
        "config-precedence",
        &args,
        &[
            ("SPATE_BATCH_ROWS", "6000"),
            ("SPATE_FLUSH_INTERVAL", "2s"),
            ("SPATE_PROPERTY", "fetch.min.bytes=2"),
        ],
    )
    .wait(Duration::from_secs(20));
    fin.assert_code(0);
    let out = std::fs::read_to_string(fin.stderr_path.with_extension("stdout")).expect("stdout");
    for want in [
        "batch_rows = 7000",           // flag over environment and file
        "flush_interval = \"2s\"",     // environment over file
        "insert_workers = 3",          // file over default
        "brokers = \"file:9092\"",     // file
        "\"fetch.min.bytes\" = \"2\"", // environment property over the file's
        "password = \"***\"",          // masked
        "\"sasl.password\" = \"***\"", // masked
    ] {
        assert!(out.contains(want), "{want:?} not in:\n{out}");
    }
    assert!(
        !out.contains("hunter2") && !out.contains("s3cret"),
        "a secret leaked:\n{out}"
    );
    assert!(
        !out.contains("\"fetch.min.bytes\" = \"1\""),
        "the file's property was not overridden:\n{out}"
    );
}

/// The text `spate run --config FILE --print-config` prints (exit 0).
fn printed_config(label: &str, file: &str, env: &[(&str, &str)]) -> String {
    let args = ["run", "--config", file, "--print-config"].map(String::from);
    let fin = spawn_with_env(label, &args, env).wait(Duration::from_secs(20));
    fin.assert_code(0);
    std::fs::read_to_string(fin.stderr_path.with_extension("stdout")).expect("stdout")
}

/// `--print-config` prints a file that `--config` reads back to the same
/// text: several pipelines, shards, a `[kafka]` table, derived settings as
/// comments. Nothing is contacted (the addresses lead nowhere).
#[test]
fn print_config_reads_back_to_the_same_text() {
    let pw = config_file("roundtrip_pw", "ch-file-secret\n");
    let file = config_file(
        "roundtrip",
        &format!(
            r#"brokers = "127.0.0.1:1"
group = "g"
max_buffered_bytes = "64MiB"
batch_rows = 5000
password_file = "{pw}"
user = "loader"

[kafka]
"session.timeout.ms" = "9000"
"fetch.min.bytes" = 1

[[pipeline]]
name = "orders"
topics = ["orders", "refunds"]
table = "db.orders"
shards = ["http://127.0.0.1:1,http://127.0.0.1:2", "http://127.0.0.1:3"]
shard_weights = [1, 2]
shard_key = ["id"]
rename = {{ id = "/order/id", "user.name" = "/u/n" }}

[[pipeline]]
name = "clicks"
topics = ["clicks"]
table = "db.clicks"
clickhouse_url = "http://127.0.0.1:4"
delivery = "exactly-once"
format = "csv"
csv_columns = ["user", "", "n"]
csv_delimiter = ";"
on_error = "dead-letter"
dead_letter_topic = "clicks-dlq"
flush_interval = "250ms"
"#
        ),
    );
    let first = printed_config("print-config-1", &file, &[]);
    let again = config_file("roundtrip_printed", &first);
    let second = printed_config("print-config-2", &again, &[]);
    assert_eq!(
        first, second,
        "--print-config of its own output differs:\n--- first\n{first}\n--- second\n{second}"
    );
    for want in [
        "\n# drivers = ",                          // derived: a comment
        "\n# revoke_timeout = \"3s\"  (derived: ", // a third of 9 s
        "\n\"session.timeout.ms\" = \"9000\"\n",   // the [kafka] table
        "\nshards = [\"http://127.0.0.1:1,http://127.0.0.1:2\", \"http://127.0.0.1:3\"]\n",
        "\nshard_weights = [1, 2]\n",
        "\nrename = { \"id\" = \"/order/id\", \"user.name\" = \"/u/n\" }\n",
        "\ncsv_delimiter = \";\"\n",
        "\nbatch_rows = 5000\n", // the top level's default, in each pipeline
        "\n# password: unset\n",
    ] {
        assert!(first.contains(want), "{want:?} not in:\n{first}");
    }
    assert_eq!(first.matches("\n[[pipeline]]\n").count(), 2, "{first}");
    assert!(
        !first.contains("ch-file-secret"),
        "a secret leaked:\n{first}"
    );
}

/// A printed configuration with secrets in it is refused where a secret
/// was masked, naming the key and the settings to give it with instead;
/// given that way, the masked key no longer matters.
#[test]
fn a_masked_secret_is_refused_naming_the_key() {
    let file = config_file(
        "masked_source",
        "brokers = \"127.0.0.1:1\"\ngroup = \"g\"\ntopics = [\"t\"]\ntable = \"db.t\"\n\
         clickhouse_url = \"http://127.0.0.1:1\"\npassword = \"hunter2\"\n\
         [kafka]\n\"sasl.password\" = \"s3cret\"\n",
    );
    let printed = config_file(
        "masked_printed",
        &printed_config("print-config-masked", &file, &[]),
    );
    let args = ["run", "--config", &printed, "--print-config"].map(String::from);
    let refused = |label: &str, env: &[(&str, &str)]| {
        let fin = spawn_with_env(label, &args, env).wait(Duration::from_secs(20));
        fin.assert_code(2);
        fin.last_line().to_owned()
    };
    let last = refused("masked-password", &[]);
    assert!(
        last.starts_with("spate: error: --config ")
            && last.contains(&printed)
            && last.contains("key `password` (line ")
            && last.contains("\"***\"")
            && last.contains("password_file")
            && last.contains("SPATE_PASSWORD"),
        "last line: {last}"
    );
    // With the password from the environment the file's mask is not read;
    // the [kafka] table's is next.
    let last = refused("masked-kafka", &[("SPATE_PASSWORD", "hunter2")]);
    assert!(
        last.contains("key `sasl.password` (line ") && last.contains("kafka_password_file"),
        "last line: {last}"
    );
}
