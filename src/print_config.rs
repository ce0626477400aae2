//! `--print-config`: the effective configuration of `spate run`, written
//! as a `--config` file states it, so `spate run --config <its output>`
//! reads it back and prints the same text again.
//!
//! - a setting given (or defaulted) is a `key = value` line;
//! - a setting left to spate is a comment with what spate derived, e.g.
//!   `# drivers = 4  (derived: one per core)`, and an unset one a comment
//!   `# user: unset`, so reading the output back leaves both as they were;
//! - a secret is the mask [`MASK`], which `--config` refuses naming the key
//!   (see `crate::config`): secrets belong in the `*_file` settings,
//!   `SPATE_*` variables or `"${VAR}"` references, not in a printed file.
//!
//! A pure function of the parsed flags of every pipeline and the
//! process-wide settings `run` starts with (`crate::settings::Process`);
//! called on the main thread, prints nothing itself.

use crate::cli::{Compression, InsertFormat, RunArgs};
use crate::settings::{Derivable, Process};
use std::fmt::Write as _;
use std::time::Duration;

/// What `--print-config` writes in place of a secret, and what `--config`
/// refuses as a secret's value.
pub(crate) const MASK: &str = "***";

/// One setting's line.
enum Entry {
    /// Given, or spate's fixed default: `key = value` (a TOML value).
    Set(String),
    /// Left to spate, which derives it: a comment with the value, when the
    /// flags alone decide it, and how it is derived.
    Derived(Option<String>, &'static str),
    /// Not set, and nothing stands in for it: a comment.
    Unset,
}

/// A TOML string.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

fn list(items: &[String]) -> Entry {
    Entry::Set(format!(
        "[{}]",
        items
            .iter()
            .map(|s| quoted(s))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

fn duration(d: Duration) -> String {
    quoted(&format!("{d:?}"))
}

fn masked(key: &str, value: &str) -> String {
    if crate::secret::is_secret_key(key) {
        quoted(MASK)
    } else {
        quoted(value)
    }
}

/// A secret setting: masked when set.
fn secret(v: Option<&String>) -> Entry {
    v.map_or(Entry::Unset, |_| Entry::Set(quoted(MASK)))
}

/// A file's path (the path of a secret's file is not a secret).
fn path(p: &Option<std::path::PathBuf>) -> Entry {
    p.as_ref().map_or(Entry::Unset, |p| {
        Entry::Set(quoted(&p.display().to_string()))
    })
}

/// An enum setting as its flag spells it (`delete-all`).
fn flag_value(v: &impl clap::ValueEnum) -> String {
    v.to_possible_value()
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}

fn opt(v: Option<String>) -> Entry {
    v.map_or(Entry::Unset, |v| Entry::Set(quoted(&v)))
}

fn set(v: impl ToString) -> Entry {
    Entry::Set(v.to_string())
}

fn write_entries(out: &mut String, entries: Vec<(&str, Entry)>) {
    for (k, e) in entries {
        let _ = match e {
            Entry::Set(v) => writeln!(out, "{k} = {v}"),
            Entry::Derived(Some(v), how) => writeln!(out, "# {k} = {v}  (derived: {how})"),
            Entry::Derived(None, how) => writeln!(out, "# {k}: derived, {how}"),
            Entry::Unset => writeln!(out, "# {k}: unset"),
        };
    }
}

/// The effective configuration as a `--config` file states it, secrets
/// masked (`--print-config`). Process-wide settings are the ones `run`
/// starts with (`process`, from the first pipeline's flags).
pub(crate) fn effective_config(pipelines: &[(String, RunArgs)], process: &Process) -> String {
    let mut out = String::from(
        "# effective configuration: flags > SPATE_* environment > --config file\n\
         # derived and unset settings are comments; a secret shows as \"***\", which\n\
         # --config refuses: give it as a *_file setting, SPATE_* variable or \"${VAR}\"\n",
    );
    let Some((_, a)) = pipelines.first() else {
        return out;
    };
    process_settings(&mut out, a, process);
    kafka_properties(&mut out, a);
    for (name, p) in pipelines {
        pipeline_settings(&mut out, name, p);
    }
    out
}

/// A setting spate may derive: `key = value` when given, else a comment.
fn derivable<T>(d: Derivable<T>, show: impl Fn(T) -> String, how: &'static str) -> Entry {
    if d.derived {
        Entry::Derived(Some(show(d.value)), how)
    } else {
        Entry::Set(show(d.value))
    }
}

/// The top-level keys: what the process shares over its pipelines.
fn process_settings(out: &mut String, a: &RunArgs, p: &Process) {
    let process = vec![
        ("brokers", set(quoted(&a.brokers))),
        ("group", set(quoted(&a.group))),
        ("until_end", set(p.until_end)),
        (
            "drivers",
            derivable(p.drivers, |d| d.to_string(), "one per core"),
        ),
        ("max_buffered_bytes", set(p.max_buffered_bytes)),
        ("commit_interval", set(duration(p.commit_interval))),
        ("shutdown_timeout", set(duration(p.shutdown_timeout))),
        (
            "revoke_timeout",
            derivable(
                p.revoke_timeout,
                duration,
                "a third of session.timeout.ms, at most 10s",
            ),
        ),
        ("admin_addr", opt(p.admin_addr.map(|x| x.to_string()))),
        ("probe_interval", set(duration(p.probe_interval))),
        ("stats_interval", set(duration(p.stats_interval))),
        ("stall_timeout", set(duration(p.stall_timeout))),
        ("topic_refresh", set(duration(a.topic_refresh))),
        ("log_format", set(quoted(&flag_value(&a.log_format)))),
        ("log_level", set(quoted(&a.log_level))),
        (
            "kafka_password_file",
            path(&a.kafka_files.files.password_file),
        ),
    ];
    write_entries(out, process);
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
    let exactly_once = p.delivery == crate::cli::Delivery::ExactlyOnce;
    let ch = &p.clickhouse_files.files;
    let fields = vec![
        ("topics", list(&p.topics)),
        ("table", set(quoted(&p.table))),
        ("table_map", list(&p.table_map)),
        ("allow_tables", opt(p.allow_tables.clone())),
        ("create_table_like", opt(p.create_table_like.clone())),
        ("clickhouse_url", opt(p.clickhouse_url.clone())),
        ("shards", list(&p.shards)),
        ("shard_weights", set(format!("{:?}", p.shard_weights))),
        ("cluster", opt(p.cluster.clone())),
        ("shard_key", list(&p.shard_key)),
        ("user", opt(p.user.clone())),
        ("password", secret(p.password.as_ref())),
        ("password_file", path(&ch.password_file)),
        ("clickhouse_ca", path(&ch.ca)),
        ("clickhouse_cert", path(&ch.cert)),
        ("clickhouse_key", path(&ch.key)),
        ("strict", set(p.strict)),
        ("rename", renames(&p.rename)),
        ("on_error", set(quoted(p.on_error.as_str()))),
        ("tombstones_are_errors", set(p.tombstones_are_errors)),
        ("max_rejected_ratio", set(p.max_rejected_ratio)),
        ("rejected_window", set(p.rejected_window)),
        ("max_rejected_consecutive", set(p.max_rejected_consecutive)),
        ("dead_letter_topic", opt(p.dead_letter_topic.clone())),
        ("dead_letter_table", opt(p.dead_letter_table.clone())),
        (
            "dead_letter_clickhouse_url",
            opt(p.dead_letter_clickhouse_url.clone()),
        ),
        (
            "batch_rows",
            match p.batch_rows {
                Some(n) => set(n),
                None if exactly_once => {
                    Entry::Derived(Some("100000".into()), "fixed under exactly-once")
                }
                None => Entry::Derived(None, "from the observed rate, at most 1000000"),
            },
        ),
        (
            "batch_bytes",
            p.batch_bytes.map_or(
                Entry::Derived(None, "the memory budget's share, at most 16MiB"),
                set,
            ),
        ),
        (
            "flush_interval",
            p.flush_interval.map_or(
                Entry::Derived(
                    Some(duration(p.flush_interval())),
                    "250ms when inserts are streamed, else 1s",
                ),
                |d| set(duration(d)),
            ),
        ),
        ("insert_timeout", set(duration(p.insert_timeout))),
        ("insert_workers", set(p.insert_workers)),
        ("insert_request", set(duration(p.insert_request))),
        ("async_insert", set(p.async_insert)),
        ("insert_request_rows", set(p.insert_request_rows)),
        (
            "insert_request_bytes",
            p.insert_request_bytes
                .map_or(Entry::Derived(None, "a share of the memory budget"), set),
        ),
        ("insert_request_release", set(p.insert_request_release)),
        (
            "insert_format",
            set(quoted(match p.insert_format {
                InsertFormat::Native => "native",
                InsertFormat::Rowbinary => "rowbinary",
            })),
        ),
        (
            "delivery",
            set(quoted(if exactly_once {
                "exactly-once"
            } else {
                "at-least-once"
            })),
        ),
        (
            "compression",
            set(quoted(match p.compression {
                Compression::Lz4 => "lz4",
                Compression::None => "none",
            })),
        ),
    ];
    write_entries(out, fields);
    format_settings(out, p);
}

/// `rename = { column = "/pointer", ... }`: an inline table.
fn renames(r: &[(String, String)]) -> Entry {
    let pairs: Vec<String> = r
        .iter()
        .map(|(c, ptr)| format!("{} = {}", quoted(c), quoted(ptr)))
        .collect();
    if pairs.is_empty() {
        Entry::Set("{}".into())
    } else {
        Entry::Set(format!("{{ {} }}", pairs.join(", ")))
    }
}

/// The schema registry's URL with the password of its `user:password@`
/// masked.
fn masked_url(u: &str) -> String {
    match (u.find("://"), u.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let user = u[s + 3..at].split(':').next().unwrap_or("");
            format!("{}{user}:{MASK}{}", &u[..s + 3], &u[at..])
        }
        _ => u.to_owned(),
    }
}

/// The message-format keys (issue 18), the registry's secrets masked.
fn format_settings(out: &mut String, p: &RunArgs) {
    let tls = &p.registry_files.files;
    let fields = vec![
        ("format", set(quoted(&flag_value(&p.format)))),
        ("envelope", set(quoted(&flag_value(&p.envelope)))),
        ("on_delete", opt(p.on_delete.as_ref().map(flag_value))),
        ("on_truncate", opt(p.on_truncate.as_ref().map(flag_value))),
        ("raw_column", opt(p.raw_column.clone())),
        ("csv_columns", list(&p.csv_columns)),
        ("csv_delimiter", set(quoted(&p.csv_delimiter.to_string()))),
        (
            "schema_registry",
            opt(p.schema_registry.as_deref().map(masked_url)),
        ),
        ("schema_registry_user", opt(p.schema_registry_user.clone())),
        (
            "schema_registry_password",
            secret(p.schema_registry_password.as_ref()),
        ),
        ("schema_registry_password_file", path(&tls.password_file)),
        ("schema_registry_ca", path(&tls.ca)),
        ("schema_registry_cert", path(&tls.cert)),
        ("schema_registry_key", path(&tls.key)),
        ("protobuf_descriptor", opt(p.protobuf_descriptor.clone())),
        ("protobuf_message", opt(p.protobuf_message.clone())),
    ];
    write_entries(out, fields);
}

#[cfg(test)]
mod tests {
    use super::effective_config;
    use crate::cli::{Cli, Command, RunArgs};
    use clap::{CommandFactory, Parser};

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["spate", "run", "--brokers", "b:9092", "--group", "g"];
        argv.extend_from_slice(&["--table", "db.t"]);
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Run(a) => a,
            other => panic!("parsed as {other:?}"),
        }
    }

    fn printed(pipelines: Vec<(String, RunArgs)>) -> String {
        let validated = crate::settings::validate_pipelines(&pipelines).unwrap();
        let process = crate::settings::process(&pipelines[0].1, &validated[0]);
        effective_config(&pipelines, &process)
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
        let out = printed(vec![("one".into(), a), ("two".into(), b)]);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        for want in [
            "\nbrokers = \"b:9092\"\n",
            &format!("\n# drivers = {cores}  (derived: one per core)\n"),
            "\n# revoke_timeout = \"10s\"  (derived: a third of session.timeout.ms, at most 10s)\n",
            // The later -X fetch.min.bytes wins, in the later place.
            "\n[kafka]\n\"sasl.password\" = \"***\"\n\"fetch.min.bytes\" = \"2\"\n",
            "\n[[pipeline]]\nname = \"one\"\ntopics = [\"t\"]\n",
            "shards = [\"http://a:8123\"]\n",
            // A line of its own: `schema_registry_password = ...` is not it.
            "\npassword = \"***\"\n",
            "\n[[pipeline]]\nname = \"two\"\n",
            "clickhouse_url = \"http://b:8123\"\n",
            "\n# password: unset\n",
            "\n# batch_rows: derived, from the observed rate, at most 1000000\n",
        ] {
            assert!(out.contains(want), "{want:?} not in:\n{out}");
        }
        assert!(!out.contains("hunter2") && !out.contains("s3cret"), "{out}");
        assert!(!out.contains("\"fetch.min.bytes\" = \"1\""), "{out}");
        // Valid TOML: every line a comment, a table header or `key = value`.
        toml_edit::Document::parse(out.clone()).unwrap_or_else(|e| panic!("{e}\n{out}"));
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
        let out = printed(vec![("one".into(), a)]);
        for want in [
            "\nformat = \"avro\"\n",
            "\nschema_registry = \"http://bob:***@reg:8081\"\n",
            "\nschema_registry_password = \"***\"\n",
        ] {
            assert!(out.contains(want), "{want:?} not in:\n{out}");
        }
        assert!(!out.contains("pw1") && !out.contains("pw2"), "{out}");
    }

    /// Enum settings print as the flag spells them, so the output reads
    /// back (`delete-all`, not `deleteall`).
    #[test]
    fn envelope_settings_print_as_flags_spell_them() {
        let a = run_args(&[
            "--topic",
            "t",
            "--clickhouse-url",
            "http://b:8123",
            "--envelope",
            "debezium",
            "--on-truncate",
            "delete-all",
        ]);
        let out = printed(vec![("one".into(), a)]);
        for want in [
            "\nenvelope = \"debezium\"\n",
            "\non_truncate = \"delete-all\"\n",
        ] {
            assert!(out.contains(want), "{want:?} not in:\n{out}");
        }
    }

    /// Every setting of `spate run` is a line of the output: a key, or a
    /// comment naming it (`-X` properties are the `[kafka]` table).
    #[test]
    fn every_setting_is_printed() {
        let a = run_args(&["--topic", "t", "--clickhouse-url", "http://b:8123"]);
        let out = printed(vec![("one".into(), a)]);
        let cmd = Cli::command();
        let run = cmd.find_subcommand("run").unwrap();
        let missing: Vec<&str> = run
            .get_arguments()
            .map(|a| a.get_id().as_str())
            .filter(|id| !["config", "print_config", "properties"].contains(id))
            .filter(|id| {
                !out.contains(&format!("\n{id} = ")) && !out.contains(&format!("\n# {id}"))
            })
            .collect();
        assert!(missing.is_empty(), "not printed: {missing:?}\n{out}");
    }

    /// A pipeline setting is printed in each `[[pipeline]]` table and a
    /// process-wide one at the top level, as `--config` takes them
    /// (`config::PIPELINE_KEYS`): read back, a pipeline's value at the top
    /// level would become every pipeline's.
    #[test]
    fn every_setting_is_printed_at_its_level() {
        let a = run_args(&["--topic", "t", "--clickhouse-url", "http://b:8123"]);
        let out = printed(vec![("one".into(), a)]);
        let (top, pipeline) = out.split_once("\n[[pipeline]]\n").unwrap();
        let top = top.split("\n[kafka]\n").next().unwrap();
        let key = |line: &str| {
            let l = line.trim_start_matches("# ");
            l.split([' ', ':']).next().unwrap_or("").to_owned()
        };
        for line in top.lines().filter(|l| !l.is_empty()).skip(3) {
            let k = key(line);
            assert!(
                !crate::config::PIPELINE_KEYS.contains(&k.as_str()),
                "pipeline setting {k} printed at the top level"
            );
        }
        for line in pipeline.lines().filter(|l| !l.is_empty()) {
            let k = key(line);
            assert!(
                k == "name" || crate::config::PIPELINE_KEYS.contains(&k.as_str()),
                "process-wide setting {k} printed in a [[pipeline]]"
            );
        }
    }
}
