//! `--config FILE`: one TOML file for one or more pipelines.
//!
//! The file is turned into command-line arguments *before* clap parses
//! them, so a file value is validated exactly like the flag it stands for
//! and precedence falls out of the order: for every setting, a flag wins
//! over its `SPATE_*` environment variable, which wins over the file. A
//! `[[pipeline]]` entry's own value wins over the file's top level.
//!
//! ```toml
//! brokers = "kafka:9092"          # process-wide settings: any `run` flag,
//! group = "spate"                 # by its long name with `_` for `-`
//! max_buffered_bytes = "512MiB"
//! batch_rows = 50000              # pipeline settings here are defaults
//!
//! [kafka]                         # librdkafka properties (-X)
//! "session.timeout.ms" = "10000"
//!
//! [[pipeline]]
//! name = "events"
//! topics = ["events"]
//! table = "analytics.events"
//! clickhouse_url = "http://ch:8123"
//!
//! [[pipeline]]
//! name = "clicks"
//! topics = ["clicks"]
//! table = "analytics.clicks"
//! shards = ["http://ch1:8123", "http://ch2:8123"]
//! shard_key = ["user_id"]
//! ```
//!
//! Pipelines share the process: one consumer group, the drivers and the
//! memory budget. Each maps its topics to its table with its own batching
//! and shards. Unknown keys are errors naming the key and its line.
//!
//! A string value may reference environment variables, `"${KAFKA_PASSWORD}"`
//! (`$${` for a literal `${`), so a file without secrets can be committed;
//! an unset variable is an error naming it (see `crate::secret`).

use crate::exit::Exit;
use crate::print_config::MASK;
use clap::{ArgAction, CommandFactory};
use std::collections::BTreeSet;
use toml_edit::{Item, Table, Value};

/// Settings a `[[pipeline]]` may set (and the top level may default).
pub(crate) const PIPELINE_KEYS: &[&str] = &[
    "topics",
    "table",
    "table_map",
    "tables",
    "allow_tables",
    "create_table_like",
    "clickhouse_url",
    "shards",
    "shard_weights",
    "cluster",
    "shard_key",
    "user",
    "password",
    "password_file",
    "clickhouse_ca",
    "clickhouse_cert",
    "clickhouse_key",
    "strict",
    "rename",
    "batch_rows",
    "batch_bytes",
    "flush_interval",
    "insert_timeout",
    "insert_workers",
    "insert_request",
    "async_insert",
    "insert_request_rows",
    "insert_request_bytes",
    "insert_request_release",
    "compression",
    "insert_format",
    "delivery",
    // bad messages (error policy)
    "on_error",
    "tombstones_are_errors",
    "max_rejected_ratio",
    "rejected_window",
    "max_rejected_consecutive",
    "dead_letter_topic",
    "dead_letter_table",
    "dead_letter_clickhouse_url",
    "format",
    "envelope",
    "on_delete",
    "on_truncate",
    "raw_column",
    "csv_columns",
    "csv_delimiter",
    "schema_registry",
    "schema_registry_user",
    "schema_registry_password",
    "schema_registry_password_file",
    "schema_registry_ca",
    "schema_registry_cert",
    "schema_registry_key",
    "protobuf_descriptor",
    "protobuf_message",
];

/// Settings whose value is a secret, and the ways to give it instead of
/// `--print-config`'s mask.
const SECRET_SETTINGS: &[(&str, &str)] = &[
    ("password", "password_file, SPATE_PASSWORD or \"${VAR}\""),
    (
        "schema_registry_password",
        "schema_registry_password_file, SPATE_SCHEMA_REGISTRY_PASSWORD or \"${VAR}\"",
    ),
];

/// The password of a URL's `user:password@`, if it has one.
fn url_password(url: &str) -> Option<&str> {
    let authority = url.split_once("://")?.1.split('/').next()?;
    let (info, _) = authority.rsplit_once('@')?;
    Some(info.split_once(':')?.1)
}

/// One way to name the servers; a pipeline or the command line that sets
/// one of them replaces all three from a lower level.
const TOPOLOGY_KEYS: &[&str] = &["clickhouse_url", "shards", "cluster"];

/// Settings that only make sense on the command line.
const NOT_IN_FILE: &[&str] = &["config", "print_config", "help", "version"];

/// One pipeline's complete argument vector, ready for clap.
#[derive(Debug)]
pub struct Expanded {
    /// The pipeline's name (`name` key, or `pipeline-N`).
    pub name: String,
    /// `spate <subcommand> ...`.
    pub argv: Vec<String>,
}

/// What clap knows about one argument of the subcommand.
struct ArgInfo {
    id: String,
    long: Option<String>,
    short: Option<char>,
    env: Option<String>,
    is_flag: bool,
}

impl ArgInfo {
    fn flag(&self) -> String {
        match (&self.long, self.short) {
            (Some(l), _) => format!("--{l}"),
            (None, Some(s)) => format!("-{s}"),
            (None, None) => format!("--{}", self.id),
        }
    }

    /// Whether the command line gives this argument.
    fn on_command_line(&self, cli: &[String]) -> bool {
        cli.iter().any(|t| {
            self.long
                .as_ref()
                .is_some_and(|l| t == &format!("--{l}") || t.starts_with(&format!("--{l}=")))
                || self
                    .short
                    .is_some_and(|s| t.starts_with(&format!("-{s}")) && !t.starts_with("--"))
        })
    }

    fn in_environment(&self) -> bool {
        self.env
            .as_ref()
            .and_then(std::env::var_os)
            .is_some_and(|v| !v.is_empty())
    }
}

/// Expand `argv` (`spate run|check ... --config FILE ...`) into one
/// argument vector per pipeline. Without `--config` (or `SPATE_CONFIG`),
/// `argv` comes back unchanged as the only pipeline.
pub fn expand(argv: Vec<String>) -> Result<Vec<Expanded>, Exit> {
    let single = |argv| {
        Ok(vec![Expanded {
            name: "main".into(),
            argv,
        }])
    };
    let Some(sub) = argv
        .get(1)
        .filter(|s| *s == "run" || *s == "check")
        .cloned()
    else {
        return single(argv);
    };
    let cli: Vec<String> = argv[2..].to_vec();
    let Some(path) = config_path(&cli) else {
        return single(argv);
    };
    let text =
        std::fs::read_to_string(&path).map_err(|e| Exit::usage(format!("--config {path}: {e}")))?;
    let doc = toml_edit::Document::parse(text.clone()).map_err(|e| {
        Exit::usage(format!(
            "--config {path}: {}",
            e.to_string().trim().replace('\n', " ")
        ))
    })?;
    let args = arg_infos(&sub);
    let file = File {
        path: &path,
        text: &text,
        args: &args,
    };
    let top: &Table = doc.as_table();
    let pipelines = file.pipelines(top)?;
    let set_outside: BTreeSet<&str> = args
        .iter()
        .filter(|a| a.on_command_line(&cli) || a.in_environment())
        .map(|a| a.id.as_str())
        .collect();
    let mut out = Vec::new();
    let empty = Table::new();
    let tables: Vec<&Table> = if pipelines.is_empty() {
        vec![&empty]
    } else {
        pipelines
    };
    for (i, p) in tables.iter().enumerate() {
        let mut argv = vec![argv[0].clone(), sub.clone()];
        file.push_settings(top, p, &set_outside, &mut argv)?;
        file.push_kafka(top, &mut argv)?;
        push_environment_properties(&args, &cli, &mut argv);
        argv.extend(cli.iter().cloned());
        let name = match p.get("name") {
            Some(n) => n
                .as_str()
                .ok_or_else(|| file.error(p, "name", n, "must be a string"))?
                .to_owned(),
            None => format!("pipeline-{}", i + 1),
        };
        out.push(Expanded { name, argv });
    }
    Ok(out)
}

/// The file's -X tokens hide SPATE_PROPERTY from clap (a value on the
/// command line wins over the environment), so the environment's
/// properties are restated after them: the environment overrides the file
/// key by key, and flags override both.
fn push_environment_properties(args: &[ArgInfo], cli: &[String], argv: &mut Vec<String>) {
    let Some(props) = args.iter().find(|a| a.id == "properties") else {
        return;
    };
    if props.in_environment() && !props.on_command_line(cli) {
        let env = props
            .env
            .as_deref()
            .and_then(|e| std::env::var(e).ok())
            .unwrap_or_default();
        for kv in env.split(';').filter(|kv| !kv.trim().is_empty()) {
            argv.push("-X".into());
            argv.push(kv.trim().to_owned());
        }
    }
}

/// `--config FILE`, `--config=FILE`, or `SPATE_CONFIG`.
fn config_path(cli: &[String]) -> Option<String> {
    let mut it = cli.iter();
    while let Some(t) = it.next() {
        if t == "--" {
            break;
        }
        if t == "--config" {
            return it.next().cloned();
        }
        if let Some(p) = t.strip_prefix("--config=") {
            return Some(p.to_owned());
        }
    }
    std::env::var("SPATE_CONFIG")
        .ok()
        .filter(|p| !p.trim().is_empty())
}

fn arg_infos(sub: &str) -> Vec<ArgInfo> {
    let cmd = crate::cli::Cli::command();
    let Some(sc) = cmd.find_subcommand(sub) else {
        return Vec::new();
    };
    sc.get_arguments()
        .map(|a| ArgInfo {
            id: a.get_id().to_string(),
            long: a.get_long().map(str::to_owned),
            short: a.get_short(),
            env: a.get_env().map(|e| e.to_string_lossy().into_owned()),
            is_flag: matches!(a.get_action(), ArgAction::SetTrue),
        })
        .collect()
}

fn scalar(item: &Item) -> Option<String> {
    match item.as_value()? {
        Value::String(s) => Some(s.value().clone()),
        Value::Integer(i) => Some(i.value().to_string()),
        Value::Float(f) => Some(f.value().to_string()),
        Value::Boolean(b) => Some(b.value().to_string()),
        _ => None,
    }
}

struct File<'a> {
    path: &'a str,
    text: &'a str,
    args: &'a [ArgInfo],
}

impl File<'_> {
    fn line_of(&self, table: &Table, key: &str, item: &Item) -> usize {
        let at = table
            .key(key)
            .and_then(toml_edit::Key::span)
            .or_else(|| item.span())
            .map_or(0, |s| s.start);
        self.text[..at.min(self.text.len())].matches('\n').count() + 1
    }

    fn error(&self, table: &Table, key: &str, item: &Item, what: &str) -> Exit {
        Exit::usage(format!(
            "--config {}: key `{key}` (line {}) {what}",
            self.path,
            self.line_of(table, key, item)
        ))
    }

    /// `value` with its `${VAR}` references replaced; an unset variable
    /// is an error naming the key, its line and the variable.
    fn interpolate(
        &self,
        table: &Table,
        key: &str,
        item: &Item,
        value: &str,
    ) -> Result<String, Exit> {
        crate::secret::interpolate(value).map_err(|e| self.error(table, key, item, &e.to_string()))
    }

    /// A secret's value that is `--print-config`'s mask, not a secret: an
    /// error naming the key and the ways to give the secret instead
    /// (`kafka`: a key of the `[kafka]` table).
    fn refuse_mask(
        &self,
        table: &Table,
        key: &str,
        item: &Item,
        value: &str,
        kafka: bool,
    ) -> Result<(), Exit> {
        let instead = if kafka {
            if value != MASK || !crate::secret::is_secret_key(key) {
                return Ok(());
            }
            if key == "sasl.password" {
                "kafka_password_file, SPATE_KAFKA_PASSWORD_FILE or \"${VAR}\""
            } else {
                "SPATE_PROPERTY or \"${VAR}\""
            }
        } else if key == "schema_registry" {
            if url_password(value) != Some(MASK) {
                return Ok(());
            }
            "schema_registry_password_file or SPATE_SCHEMA_REGISTRY_PASSWORD, not in the URL"
        } else {
            match SECRET_SETTINGS.iter().find(|(k, _)| *k == key) {
                Some((_, instead)) if value == MASK => instead,
                _ => return Ok(()),
            }
        };
        Err(self.error(
            table,
            key,
            item,
            &format!(
                "is \"{MASK}\", the mask --print-config shows for a secret, not the secret: give it as {instead}"
            ),
        ))
    }

    /// Every key must be a setting allowed at this level.
    fn check_keys(&self, table: &Table, in_pipeline: bool) -> Result<(), Exit> {
        for (key, item) in table.iter() {
            // `tables`: the file's form of --table-map.
            let known = key == "tables"
                || self.args.iter().any(|a| a.id == key) && !NOT_IN_FILE.contains(&key);
            let ok = match key {
                "pipeline" | "kafka" => !in_pipeline,
                "name" => in_pipeline,
                _ if !known => false,
                _ if in_pipeline => PIPELINE_KEYS.contains(&key),
                _ => true,
            };
            if ok {
                continue;
            }
            let why = if in_pipeline && (known || key == "kafka") {
                "is process-wide: set it at the top level, not in a [[pipeline]]".to_string()
            } else if NOT_IN_FILE.contains(&key) {
                "only works on the command line".to_string()
            } else {
                let known: Vec<&str> = self
                    .args
                    .iter()
                    .map(|a| a.id.as_str())
                    .filter(|k| !NOT_IN_FILE.contains(k))
                    .collect();
                format!(
                    "is not a setting (known: {}, kafka, pipeline)",
                    known.join(", ")
                )
            };
            return Err(self.error(table, key, item, &why));
        }
        Ok(())
    }

    /// The `[[pipeline]]` tables, every key of the file checked.
    fn pipelines<'t>(&self, top: &'t Table) -> Result<Vec<&'t Table>, Exit> {
        self.check_keys(top, false)?;
        let pipelines: Vec<&Table> = match top.get("pipeline") {
            None => Vec::new(),
            Some(Item::ArrayOfTables(a)) => a.iter().collect(),
            Some(other) => {
                return Err(self.error(
                    top,
                    "pipeline",
                    other,
                    "must be an array of tables: [[pipeline]]",
                ))
            }
        };
        for p in &pipelines {
            self.check_keys(p, true)?;
        }
        Ok(pipelines)
    }

    /// The tokens of one pipeline's settings: the top level's, then the
    /// pipeline's own, each skipped where a higher level sets it (the
    /// command line or the environment, `set_outside`; the pipeline over
    /// the top level; a topology key replaces all three from a lower level).
    fn push_settings(
        &self,
        top: &Table,
        pipeline: &Table,
        set_outside: &BTreeSet<&str>,
        argv: &mut Vec<String>,
    ) -> Result<(), Exit> {
        let topology_outside = TOPOLOGY_KEYS.iter().any(|k| set_outside.contains(k));
        let pipeline_topology = TOPOLOGY_KEYS.iter().any(|k| pipeline.contains_key(k));
        for (table, is_pipeline) in [(top, false), (pipeline, true)] {
            for (key, item) in table.iter() {
                // `tables` is the file's form of `table_map`: flags, the
                // environment and a pipeline's own override it as that.
                let id = if key == "tables" { "table_map" } else { key };
                if matches!(key, "pipeline" | "kafka" | "name") || set_outside.contains(id) {
                    continue;
                }
                let in_pipeline = |k: &str| {
                    pipeline.contains_key(k)
                        || (k == "table_map" && pipeline.contains_key("tables"))
                };
                if !is_pipeline && key == "tables" && in_pipeline(id) {
                    continue;
                }
                let topology = TOPOLOGY_KEYS.contains(&key);
                if topology && (topology_outside || (!is_pipeline && pipeline_topology)) {
                    continue;
                }
                if !is_pipeline && PIPELINE_KEYS.contains(&key) && in_pipeline(key) {
                    continue;
                }
                self.push_tokens(table, key, item, argv)?;
            }
        }
        Ok(())
    }

    /// The `-X` tokens of the `[kafka]` table.
    fn push_kafka(&self, top: &Table, argv: &mut Vec<String>) -> Result<(), Exit> {
        let Some(kafka) = top.get("kafka") else {
            return Ok(());
        };
        let Some(t) = kafka.as_table() else {
            return Err(self.error(
                top,
                "kafka",
                kafka,
                "must be a table of librdkafka properties",
            ));
        };
        for (k, v) in t.iter() {
            let Some(value) = scalar(v) else {
                return Err(self.error(t, k, v, "must be a string, number or boolean"));
            };
            self.refuse_mask(t, k, v, &value, true)?;
            let v = self.interpolate(t, k, v, &value)?;
            argv.push("-X".into());
            argv.push(format!("{k}={v}"));
        }
        Ok(())
    }

    /// The command-line tokens standing for `key = item`.
    fn push_tokens(
        &self,
        table: &Table,
        key: &str,
        item: &Item,
        argv: &mut Vec<String>,
    ) -> Result<(), Exit> {
        // `[pipeline.tables]`: topic = "db.table", each a --table-map.
        let id = if key == "tables" { "table_map" } else { key };
        let Some(arg) = self.args.iter().find(|a| a.id == id) else {
            return Err(self.error(table, key, item, "is not a setting"));
        };
        if key == "tables" {
            let Some(t) = item.as_table_like() else {
                return Err(self.error(table, key, item, "must map topics to tables"));
            };
            for (topic, target) in t.iter() {
                let Some(target) = scalar(target) else {
                    return Err(self.error(table, key, item, "must map topics to table names"));
                };
                argv.push(format!("{}={topic}={target}", arg.flag()));
            }
            return Ok(());
        }
        if arg.is_flag {
            match item.as_bool() {
                Some(true) => argv.push(arg.flag()),
                Some(false) => {}
                None => return Err(self.error(table, key, item, "must be true or false")),
            }
            return Ok(());
        }
        if let Some(t) = item.as_table_like().filter(|_| key == "rename") {
            for (column, pointer) in t.iter() {
                let Some(pointer) = scalar(pointer) else {
                    return Err(self.error(table, key, item, "must map columns to JSON pointers"));
                };
                argv.push(format!("{}={column}={pointer}", arg.flag()));
            }
            return Ok(());
        }
        let values: Vec<String> = match item.as_array() {
            Some(a) => a
                .iter()
                .map(|v| scalar(&Item::Value(v.clone())))
                .collect::<Option<_>>()
                .ok_or_else(|| self.error(table, key, item, "must hold strings or numbers"))?,
            None => vec![scalar(item)
                .ok_or_else(|| self.error(table, key, item, "must be a string, number or list"))?],
        };
        for v in values {
            self.refuse_mask(table, key, item, &v, false)?;
            let v = self.interpolate(table, key, item, &v)?;
            argv.push(format!("{}={v}", arg.flag()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
