//! `--config`: the expansion of a file into argument vectors.

use super::*;
use std::io::Write as _;

fn file(text: &str) -> tempfile_path::TempPath {
    tempfile_path::TempPath::with(text)
}

/// A file removed on drop (no tempfile crate needed).
mod tempfile_path {
    pub struct TempPath(pub String);
    impl TempPath {
        pub fn with(text: &str) -> Self {
            use std::sync::atomic::{AtomicU64, Ordering};
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "spate-config-test-{}-{}.toml",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&p, text).unwrap();
            TempPath(p.to_string_lossy().into_owned())
        }
    }
    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn argv(extra: &[&str]) -> Vec<String> {
    ["spate", "run"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn values_reference_environment_variables() {
    std::env::set_var("SPATE_TEST_CFG_KAFKA_PW", "from-env-pw");
    let f = file(
        r#"
brokers = "k:9092"
group = "g"
password = "${SPATE_TEST_CFG_KAFKA_PW}"
[kafka]
"sasl.password" = "${SPATE_TEST_CFG_KAFKA_PW}"
"#,
    );
    let out = expand(argv(&["--config", &f.0])).unwrap();
    let a = &out[0].argv;
    assert!(a.contains(&"--password=from-env-pw".to_string()), "{a:?}");
    assert!(
        a.contains(&"sasl.password=from-env-pw".to_string()),
        "{a:?}"
    );
    let f = file("brokers = \"k\"\n[kafka]\n\"sasl.password\" = \"${SPATE_TEST_CFG_UNSET_VAR}\"\n");
    let e = expand(argv(&["--config", &f.0])).unwrap_err();
    assert_eq!(e.code(), 2);
    assert!(
        e.message().contains(
            "key `sasl.password` (line 3) references ${SPATE_TEST_CFG_UNSET_VAR}, which is not set"
        ),
        "{}",
        e.message()
    );
}

#[test]
fn schema_registry_tls_keys_become_their_flags() {
    std::env::set_var("SPATE_TEST_CFG_REGISTRY_PW", "reg-env-pw");
    let f = file(
        r#"
brokers = "k:9092"
group = "g"
format = "avro"
schema_registry = "https://reg:8081"
schema_registry_password = "${SPATE_TEST_CFG_REGISTRY_PW}"
schema_registry_ca = "/etc/reg/ca.pem"
schema_registry_cert = "/etc/reg/c.pem"
schema_registry_key = "/etc/reg/k.pem"
"#,
    );
    let out = expand(argv(&["--config", &f.0])).unwrap();
    let a = &out[0].argv;
    for want in [
        "--schema-registry-password=reg-env-pw",
        "--schema-registry-ca=/etc/reg/ca.pem",
        "--schema-registry-cert=/etc/reg/c.pem",
        "--schema-registry-key=/etc/reg/k.pem",
    ] {
        assert!(a.contains(&want.to_string()), "{want} not in {a:?}");
    }
}

#[test]
fn renames_are_a_table_per_pipeline() {
    let f = file(
        r#"
brokers = "k:9092"
[[pipeline]]
topics = ["ta"]
table = "db.a"
rename = { user_id = "/user/id", cc = "/geo/cc" }
[[pipeline]]
topics = ["tb"]
table = "db.b"
[pipeline.rename]
x = "/a~1b"
"#,
    );
    let out = expand(argv(&["--config", &f.0])).unwrap();
    let a = out[0].argv.join(" ");
    assert!(
        a.contains("--rename=user_id=/user/id --rename=cc=/geo/cc"),
        "{a}"
    );
    let b = out[1].argv.join(" ");
    assert!(
        b.contains("--rename=x=/a~1b") && !b.contains("user_id"),
        "{b}"
    );
    let bad = file("rename = { a = [1] }\n");
    let e = expand(argv(&["--config", &bad.0])).unwrap_err();
    assert!(format!("{e:?}").contains("rename"), "{e:?}");
}

/// `--print-config`'s mask in place of a secret is refused, naming the
/// key, its line and the ways to give the secret; elsewhere it is a
/// value like any other.
#[test]
fn print_config_s_mask_is_refused_as_a_secret() {
    for (text, key, line, instead) in [
        (
            "password = \"***\"\n",
            "password",
            1,
            "give it as password_file, SPATE_PASSWORD or \"${VAR}\"",
        ),
        (
            "[[pipeline]]\nschema_registry_password = \"***\"\n",
            "schema_registry_password",
            2,
            "schema_registry_password_file",
        ),
        (
            "schema_registry = \"http://u:***@r:8081\"\n",
            "schema_registry",
            1,
            "not in the URL",
        ),
        (
            "[kafka]\n\"sasl.password\" = \"***\"\n",
            "sasl.password",
            2,
            "kafka_password_file",
        ),
        (
            "[kafka]\n\"ssl.key.password\" = \"***\"\n",
            "ssl.key.password",
            2,
            "SPATE_PROPERTY or \"${VAR}\"",
        ),
    ] {
        let f = file(text);
        let e = expand(argv(&["--config", &f.0])).unwrap_err();
        assert_eq!(e.code(), 2);
        let want = format!(
            "--config {}: key `{key}` (line {line}) is \"***\", the mask --print-config shows for a secret, not the secret: ",
            f.0
        );
        assert!(
            e.message().starts_with(&want) && e.message().contains(instead),
            "{text:?}: {}",
            e.message()
        );
    }
    let f = file("user = \"***\"\npassword = \"***x\"\n[kafka]\n\"client.id\" = \"***\"\n");
    let a = expand(argv(&["--config", &f.0])).unwrap().remove(0).argv;
    assert!(a.contains(&"--user=***".to_string()), "{a:?}");
    assert!(a.contains(&"client.id=***".to_string()), "{a:?}");
}

#[test]
fn without_config_argv_is_unchanged() {
    let a = argv(&["--brokers", "b"]);
    let out = expand(a.clone()).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].argv, a);
}

/// Each pipeline has its own error policy; the top level is the default.
#[test]
fn the_error_policy_is_per_pipeline() {
    let f = file(
        r#"
brokers = "k:9092"
group = "g"
on_error = "skip"
[[pipeline]]
topics = ["ta"]
table = "db.a"
clickhouse_url = "http://ch:8123"
[[pipeline]]
topics = ["tb"]
table = "db.b"
clickhouse_url = "http://ch:8123"
on_error = "dead-letter"
dead_letter_topic = "tb-dlq"
tombstones_are_errors = true
max_rejected_ratio = 0.5
"#,
    );
    let out = expand(argv(&["--config", &f.0])).unwrap();
    let a = out[0].argv.join(" ");
    assert!(a.contains("--on-error=skip") && !a.contains("dead"), "{a}");
    let b = out[1].argv.join(" ");
    for needle in [
        "--on-error=dead-letter",
        "--dead-letter-topic=tb-dlq",
        "--tombstones-are-errors",
        "--max-rejected-ratio=0.5",
    ] {
        assert!(b.contains(needle), "{needle}: {b}");
    }
    assert!(
        !b.contains("--on-error=skip"),
        "the pipeline's value wins: {b}"
    );
}

#[test]
fn pipelines_inherit_the_top_level_and_flags_come_last() {
    let f = file(
        r#"
brokers = "k:9092"
group = "g"
batch_rows = 5000
strict = true
[kafka]
"session.timeout.ms" = 6000
[[pipeline]]
name = "a"
topics = ["ta"]
table = "db.a"
clickhouse_url = "http://ch:8123"
[[pipeline]]
topics = ["tb", "tc"]
table = "db.b"
batch_rows = 7
shards = ["http://s1:8123", "http://s2:8123"]
"#,
    );
    let out = expand(argv(&["--config", &f.0])).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].name, "a");
    assert_eq!(out[1].name, "pipeline-2");
    let a = out[0].argv.join(" ");
    assert!(
        a.starts_with("spate run --brokers=k:9092 --group=g --batch-rows=5000 --strict"),
        "{a}"
    );
    assert!(
        a.contains(
            "--topic=ta --table=db.a --clickhouse-url=http://ch:8123 -X session.timeout.ms=6000"
        ),
        "{a}"
    );
    let b = out[1].argv.join(" ");
    assert!(
        b.contains("--topic=tb --topic=tc")
            && b.contains("--shard=http://s1:8123 --shard=http://s2:8123"),
        "{b}"
    );
    assert!(
        b.contains("--batch-rows=7") && !b.contains("--batch-rows=5000"),
        "the pipeline's own value replaces the top level's: {b}"
    );
    // A flag replaces the file's value at every level.
    let out = expand(argv(&["--config", &f.0, "--batch-rows", "9"])).unwrap();
    for p in &out {
        let a = p.argv.join(" ");
        assert!(
            !a.contains("--batch-rows=")
                && a.ends_with(&format!("--config {} --batch-rows 9", f.0)),
            "{a}"
        );
    }
}

#[test]
fn unknown_and_misplaced_keys_name_key_and_line() {
    let f = file("brokers = \"k\"\n\nbatch_rowz = 5\n");
    let e = expand(argv(&["--config", &f.0])).unwrap_err();
    assert_eq!(e.code(), 2);
    assert!(
        e.message()
            .contains("`batch_rowz` (line 3) is not a setting"),
        "{}",
        e.message()
    );
    let f = file("[[pipeline]]\ntopics = [\"t\"]\ngroup = \"g\"\n");
    let e = expand(argv(&["--config", &f.0])).unwrap_err();
    assert!(
        e.message().contains("`group` (line 3) is process-wide"),
        "{}",
        e.message()
    );
    let f = file("strict = \"yes\"\n");
    let e = expand(argv(&["--config", &f.0])).unwrap_err();
    assert!(
        e.message()
            .contains("`strict` (line 1) must be true or false"),
        "{}",
        e.message()
    );
    let f = file("brokers = [\n");
    let e = expand(argv(&["--config", &f.0])).unwrap_err();
    assert_eq!(e.code(), 2, "{}", e.message());
    let mut missing = std::env::temp_dir();
    missing.push("spate-no-such-config.toml");
    let e = expand(argv(&["--config", missing.to_str().unwrap()])).unwrap_err();
    assert!(
        e.message().contains("spate-no-such-config.toml"),
        "{}",
        e.message()
    );
    let _ = std::io::stderr().flush();
}

#[test]
fn command_line_topology_replaces_the_file_s() {
    let f = file("clickhouse_url = \"http://a:8123\"\n[[pipeline]]\ncluster = \"c\"\n");
    let out = expand(argv(&["--config", &f.0, "--shard", "http://x:1"])).unwrap();
    let a = out[0].argv.join(" ");
    assert!(
        !a.contains("--clickhouse-url=") && !a.contains("--cluster="),
        "{a}"
    );
    let out = expand(argv(&["--config", &f.0])).unwrap();
    let a = out[0].argv.join(" ");
    assert!(
        a.contains("--cluster=c") && !a.contains("--clickhouse-url="),
        "the pipeline's topology replaces the top level's: {a}"
    );
}

#[test]
fn a_pipelines_tables_map_topics_to_tables() {
    let f = file(
        r#"
brokers = "k:9092"
[[pipeline]]
topics = ["^cdc\\.shop\\."]
table = "shop.{topic}"
allow_tables = 'shop\..*'
[pipeline.tables]
"cdc.shop.orders" = "shop.orders"
"cdc.shop.users" = "shop.users"
"#,
    );
    let out = expand(argv(&["--config", &f.0])).unwrap();
    let a = out[0].argv.join(" ");
    assert!(
        a.contains("--table-map=cdc.shop.orders=shop.orders --table-map=cdc.shop.users=shop.users"),
        "{a}"
    );
    assert!(a.contains(r"--allow-tables=shop\..*"), "{a}");
    let bad = file("[[pipeline]]\ntables = [\"x\"]\n");
    let e = expand(argv(&["--config", &bad.0])).unwrap_err();
    assert!(
        format!("{e:?}").contains("must map topics to tables"),
        "{e:?}"
    );
}

#[test]
fn table_map_on_the_command_line_replaces_the_files_tables() {
    let f = file(
        r#"
brokers = "k:9092"
[[pipeline]]
topics = ["^cdc"]
table = "db.{topic}"
[pipeline.tables]
"cdc.a" = "db.a"
"#,
    );
    let out = expand(argv(&["--config", &f.0, "--table-map", "cdc.a=db.other"])).unwrap();
    let a = out[0].argv.join(" ");
    assert!(!a.contains("--table-map=cdc.a=db.a"), "{a}");
    assert!(a.contains("cdc.a=db.other"), "{a}");
}
