//! `--print-config`: the effective configuration of `spate run`, written
//! as a `--config` file would state it, secrets masked.
//!
//! A pure function of the parsed flags of every pipeline; called on the
//! main thread, prints nothing itself.

use crate::cli::{Compression, InsertFormat, RunArgs};
use std::fmt::Write as _;

/// A TOML string.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

fn list(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|s| quoted(s))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn masked(key: &str, value: &str) -> String {
    let k = key.to_ascii_lowercase();
    if crate::secret::SECRET_KEY_WORDS
        .iter()
        .any(|w| k.contains(w))
    {
        quoted("***")
    } else {
        quoted(value)
    }
}

/// A file's path (the path of a secret's file is not a secret).
fn path(p: &Option<std::path::PathBuf>) -> Option<String> {
    p.as_ref().map(|p| p.display().to_string())
}

fn opt(v: Option<String>) -> String {
    v.map_or_else(|| "(unset)".to_string(), |v| quoted(&v))
}

/// The effective configuration as a `--config` file would state it,
/// secrets masked (`--print-config`). Process-wide settings come from the
/// first pipeline's arguments (they are the same in all of them).
pub(crate) fn effective_config(pipelines: &[(String, RunArgs)]) -> String {
    let mut out =
        String::from("# effective configuration: flags > SPATE_* environment > --config file\n");
    let Some((_, a)) = pipelines.first() else {
        return out;
    };
    process_settings(&mut out, a);
    kafka_properties(&mut out, a);
    for (name, p) in pipelines {
        pipeline_settings(&mut out, name, p);
    }
    out
}

/// The top-level keys: what the process shares over its pipelines.
fn process_settings(out: &mut String, a: &RunArgs) {
    let process = [
        ("brokers", quoted(&a.brokers)),
        ("group", quoted(&a.group)),
        ("until_end", a.until_end.to_string()),
        (
            "drivers",
            a.drivers
                .map_or_else(|| "(one per core)".into(), |d| d.to_string()),
        ),
        ("max_buffered_bytes", a.max_buffered_bytes.to_string()),
        (
            "commit_interval",
            quoted(&format!("{:?}", a.commit_interval)),
        ),
        (
            "shutdown_timeout",
            quoted(&format!("{:?}", a.shutdown_timeout)),
        ),
        (
            "revoke_timeout",
            a.revoke_timeout
                .map_or_else(|| "(derived)".into(), |d| quoted(&format!("{d:?}"))),
        ),
        ("admin_addr", opt(a.admin_addr.map(|x| x.to_string()))),
        ("probe_interval", quoted(&format!("{:?}", a.probe_interval))),
        ("stats_interval", quoted(&format!("{:?}", a.stats_interval))),
        ("stall_timeout", quoted(&format!("{:?}", a.stall_timeout))),
        (
            "log_format",
            quoted(&format!("{:?}", a.log_format).to_lowercase()),
        ),
        ("log_level", quoted(&a.log_level)),
        ("kafka_password_file", opt(path(&a.kafka_password_file))),
    ];
    for (k, v) in process {
        let _ = writeln!(out, "{k} = {v}");
    }
}

/// The `[kafka]` table of `-X` properties, if any.
fn kafka_properties(out: &mut String, a: &RunArgs) {
    if a.properties.is_empty() {
        return;
    }
    out.push_str("\n[kafka]\n");
    // Later settings of a property win, as in the client's config.
    let mut props: Vec<(&str, &str)> = Vec::new();
    for (k, v) in &a.properties {
        props.retain(|(pk, _)| pk != k);
        props.push((k, v));
    }
    for (k, v) in props {
        let _ = writeln!(out, "{} = {}", quoted(k), masked(k, v));
    }
}

/// One `[[pipeline]]` table.
fn pipeline_settings(out: &mut String, name: &str, p: &RunArgs) {
    let _ = writeln!(out, "\n[[pipeline]]\nname = {}", quoted(name));
    let fields = [
        ("topics", list(&p.topics)),
        ("table", quoted(&p.table)),
        ("clickhouse_url", opt(p.clickhouse_url.clone())),
        ("shards", list(&p.shards)),
        ("shard_weights", format!("{:?}", p.shard_weights)),
        ("cluster", opt(p.cluster.clone())),
        ("shard_key", list(&p.shard_key)),
        ("user", opt(p.user.clone())),
        (
            "password",
            p.password
                .as_ref()
                .map_or_else(|| "(unset)".into(), |v| masked("password", v)),
        ),
        ("password_file", opt(path(&p.password_file))),
        ("clickhouse_ca", opt(path(&p.clickhouse_ca))),
        ("clickhouse_cert", opt(path(&p.clickhouse_cert))),
        ("clickhouse_key", opt(path(&p.clickhouse_key))),
        ("strict", p.strict.to_string()),
        ("on_error", quoted(p.on_error.as_str())),
        ("tombstones_are_errors", p.tombstones_are_errors.to_string()),
        ("max_rejected_ratio", p.max_rejected_ratio.to_string()),
        ("rejected_window", p.rejected_window.to_string()),
        (
            "max_rejected_consecutive",
            p.max_rejected_consecutive.to_string(),
        ),
        ("dead_letter_topic", opt(p.dead_letter_topic.clone())),
        ("dead_letter_table", opt(p.dead_letter_table.clone())),
        (
            "dead_letter_clickhouse_url",
            opt(p.dead_letter_clickhouse_url.clone()),
        ),
        (
            "batch_rows",
            p.batch_rows
                .map_or_else(|| "(from the rate)".to_string(), |n| n.to_string()),
        ),
        (
            "batch_bytes",
            p.batch_bytes
                .map_or_else(|| "(derived)".to_string(), |n| n.to_string()),
        ),
        ("flush_interval", quoted(&format!("{:?}", p.flush_interval))),
        ("insert_timeout", quoted(&format!("{:?}", p.insert_timeout))),
        ("insert_workers", p.insert_workers.to_string()),
        (
            "insert_format",
            quoted(match p.insert_format {
                InsertFormat::Native => "native",
                InsertFormat::Rowbinary => "rowbinary",
            }),
        ),
        (
            "delivery",
            quoted(match p.delivery {
                crate::cli::Delivery::AtLeastOnce => "at-least-once",
                crate::cli::Delivery::ExactlyOnce => "exactly-once",
            }),
        ),
        (
            "compression",
            quoted(match p.compression {
                Compression::Lz4 => "lz4",
                Compression::None => "none",
            }),
        ),
    ];
    for (k, v) in fields {
        let _ = writeln!(out, "{k} = {v}");
    }
    format_settings(out, p);
}

/// The message-format keys (issue 18), the registry's secrets masked.
fn format_settings(out: &mut String, p: &RunArgs) {
    let url = p
        .schema_registry
        .as_ref()
        .map(|u| match (u.find("://"), u.rfind('@')) {
            (Some(s), Some(at)) if at > s => {
                let user = u[s + 3..at].split(':').next().unwrap_or("");
                format!("{}{user}:***{}", &u[..s + 3], &u[at..])
            }
            _ => u.clone(),
        });
    let fields = [
        ("format", quoted(&format!("{:?}", p.format).to_lowercase())),
        ("raw_column", opt(p.raw_column.clone())),
        ("csv_columns", list(&p.csv_columns)),
        ("schema_registry", opt(url)),
        ("schema_registry_user", opt(p.schema_registry_user.clone())),
        (
            "schema_registry_password",
            p.schema_registry_password
                .as_ref()
                .map_or_else(|| "(unset)".into(), |v| masked("password", v)),
        ),
        (
            "schema_registry_password_file",
            opt(path(&p.registry_tls.schema_registry_password_file)),
        ),
        (
            "schema_registry_ca",
            opt(path(&p.registry_tls.schema_registry_ca)),
        ),
        (
            "schema_registry_cert",
            opt(path(&p.registry_tls.schema_registry_cert)),
        ),
        (
            "schema_registry_key",
            opt(path(&p.registry_tls.schema_registry_key)),
        ),
        ("protobuf_descriptor", opt(p.protobuf_descriptor.clone())),
        ("protobuf_message", opt(p.protobuf_message.clone())),
    ];
    for (k, v) in fields {
        let _ = writeln!(out, "{k} = {v}");
    }
}

#[cfg(test)]
mod tests {
    use super::effective_config;
    use crate::cli::{Cli, Command, RunArgs};
    use clap::Parser;

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["spate", "run", "--brokers", "b:9092", "--group", "g"];
        argv.extend_from_slice(&["--table", "db.t"]);
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Run(a) => a,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn secrets_are_masked_and_later_properties_win() {
        let a = run_args(&[
            "--topic",
            "t",
            "--shard",
            "http://a:8123",
            "--password",
            "hunter2",
            "-X",
            "fetch.min.bytes=1",
            "-X",
            "sasl.password=s3cret",
            "-X",
            "fetch.min.bytes=2",
        ]);
        let b = run_args(&["--topic", "u", "--clickhouse-url", "http://b:8123"]);
        let out = effective_config(&[("one".into(), a), ("two".into(), b)]);
        for want in [
            "brokers = \"b:9092\"\n",
            "drivers = (one per core)\n",
            // The later -X fetch.min.bytes wins, in the later place.
            "\n[kafka]\n\"sasl.password\" = \"***\"\n\"fetch.min.bytes\" = \"2\"\n",
            "\n[[pipeline]]\nname = \"one\"\ntopics = [\"t\"]\n",
            "shards = [\"http://a:8123\"]\n",
            // A line of its own: `schema_registry_password = ...` is not it.
            "\npassword = \"***\"\n",
            "\n[[pipeline]]\nname = \"two\"\n",
            "clickhouse_url = \"http://b:8123\"\n",
            "\npassword = (unset)\n",
        ] {
            assert!(out.contains(want), "{want:?} not in:\n{out}");
        }
        assert!(!out.contains("hunter2") && !out.contains("s3cret"), "{out}");
        assert!(!out.contains("\"fetch.min.bytes\" = \"1\""), "{out}");
    }

    #[test]
    fn format_settings_are_shown_with_registry_secrets_masked() {
        let a = run_args(&[
            "--topic",
            "t",
            "--clickhouse-url",
            "http://b:8123",
            "--format",
            "avro",
            "--schema-registry",
            "http://bob:pw1@reg:8081",
            "--schema-registry-password",
            "pw2",
        ]);
        let out = effective_config(&[("one".into(), a)]);
        for want in [
            "\nformat = \"avro\"\n",
            "\nschema_registry = \"http://bob:***@reg:8081\"\n",
            "\nschema_registry_password = \"***\"\n",
        ] {
            assert!(out.contains(want), "{want:?} not in:\n{out}");
        }
        assert!(!out.contains("pw1") && !out.contains("pw2"), "{out}");
    }
}
