//! The flags' validation and what is derived from them before anything is
//! contacted, shared by `spate run` and `spate check` so both judge a
//! configuration alike: the table reference, the Kafka source's settings
//! (revocation deadline and prefetch from the memory budget) and the
//! ClickHouse topology source. Every mistake is a usage error (exit 2).
//!
//! Pure functions of the parsed flags, called on the main thread.

use crate::cli::{Compression, InsertFormat, MessageFormat, RunArgs};
use crate::exit::Exit;
use crate::tls_files::{Registry, TlsFlags};
use spate_clickhouse::{
    ChClientOptions, CsvOptions, FormatSpec, ProtobufSource, RegistryConfig, RetryPolicy,
    SchemaRegistry, Secret, SharedSecret, SinkSpec, TableRef, TlsSettings, Topology,
    TopologySource,
};
use spate_kafka::KafkaSourceConfig;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What `run` and `check` derive from the flags before contacting
/// anything; every mistake is a usage error (exit 2).
pub(crate) struct Validated {
    pub table: TableRef,
    pub kafka: KafkaSourceConfig,
    pub topology: TopologySource,
    /// The ClickHouse password, from --password or --password-file, shared
    /// by every client of the pipeline's sink and replaced when the file
    /// changes (`crate::rotate`).
    pub password: Option<SharedSecret>,
    /// The ClickHouse TLS files, read when the sink's first transport is
    /// built and again when one of them changes.
    pub tls: TlsSettings,
    pub format: FormatSpec,
}

/// A value spate may derive: what the flags gave, or what spate derived
/// for a setting left to it (`--print-config` prints the latter as a
/// comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Derivable<T> {
    pub value: T,
    /// Whether spate derived it (no flag, variable or config key set it).
    pub derived: bool,
}

impl<T> Derivable<T> {
    fn from(given: Option<T>, derive: impl FnOnce() -> T) -> Self {
        match given {
            Some(value) => Self {
                value,
                derived: false,
            },
            None => Self {
                value: derive(),
                derived: true,
            },
        }
    }
}

/// What the pipelines of one process share (the top level of a `--config`
/// file): the first pipeline's flags, and what spate derives for the ones
/// left to it. `run` starts the runtime with these and `--print-config`
/// prints these, so the printed values are the ones run uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Process {
    /// Driver threads (`--drivers`; one per core).
    pub drivers: Derivable<usize>,
    /// Stop at the end of every partition (`--until-end`).
    pub until_end: bool,
    /// Memory budget of queued and in-flight batches (`--max-buffered-bytes`).
    pub max_buffered_bytes: usize,
    /// How often acknowledged offsets are committed (`--commit-interval`).
    pub commit_interval: Duration,
    /// Budget of the whole shutdown (`--shutdown-timeout`).
    pub shutdown_timeout: Duration,
    /// Budget of one revocation (`--revoke-timeout`; a third of
    /// session.timeout.ms, at most 10 s).
    pub revoke_timeout: Derivable<Duration>,
    /// Address of /metrics, /healthz and /readyz (`--admin-addr`).
    pub admin_addr: Option<std::net::SocketAddr>,
    /// How often /readyz probes the replicas (`--probe-interval`).
    pub probe_interval: Duration,
    /// How often the summary line is logged (`--stats-interval`).
    pub stats_interval: Duration,
    /// When a stuck loop or a retried insert counts as a stall
    /// (`--stall-timeout`).
    pub stall_timeout: Duration,
    /// Under `--until-end`: end a member that holds no partition this long
    /// after joining (one session timeout).
    pub idle_exit: Option<Duration>,
}

/// The process-wide settings, from the first pipeline's flags and their
/// validation.
pub(crate) fn process(args: &RunArgs, v: &Validated) -> Process {
    let cores = || std::thread::available_parallelism().map_or(1, usize::from);
    Process {
        drivers: Derivable::from(args.drivers, cores),
        until_end: args.until_end,
        max_buffered_bytes: args.max_buffered_bytes,
        commit_interval: args.commit_interval,
        shutdown_timeout: args.shutdown_timeout,
        revoke_timeout: Derivable::from(args.revoke_timeout, || v.kafka.revoke_timeout),
        admin_addr: args.admin_addr,
        probe_interval: args.probe_interval,
        stats_interval: args.stats_interval,
        stall_timeout: args.stall_timeout,
        idle_exit: args
            .until_end
            .then(|| v.kafka.session_timeout_ms().ok())
            .flatten()
            .map(Duration::from_millis),
    }
}

/// Validate every pipeline of one process (`spate run`): each one's
/// flags, and that no topic feeds two pipelines.
pub(crate) fn validate_pipelines(pipelines: &[(String, RunArgs)]) -> Result<Vec<Validated>, Exit> {
    let validated = validate_each(pipelines)?;
    let mut owner: HashMap<&str, &str> = HashMap::new();
    for (name, a) in pipelines {
        for t in &a.topics {
            if let Some(other) = owner.insert(t, name) {
                return Err(Exit::usage(format!(
                    "topic {t} is in pipelines {other} and {name}; a topic feeds one pipeline"
                )));
            }
        }
    }
    Ok(validated)
}

/// Validate each pipeline's flags: the routed tables of a run, whose
/// topics `run::assemble` checks (the tables of a pipeline whose messages
/// name theirs share its topics).
pub(crate) fn validate_each(pipelines: &[(String, RunArgs)]) -> Result<Vec<Validated>, Exit> {
    let several = pipelines.len() > 1;
    (pipelines.iter())
        .map(|(name, a)| validate(a).map_err(|e| e.in_pipeline(name, several)))
        .collect()
}

/// Validate one pipeline's flags (`spate run` and `spate check`).
pub(crate) fn validate(args: &RunArgs) -> Result<Validated, Exit> {
    let table = TableRef::parse(&args.table).map_err(|e| Exit::usage(e.to_string()))?;
    let password = secrets(args)?;
    let mut kafka = kafka_config(args)?;
    if let Some(pw) = args.kafka_files.password(None)? {
        kafka.properties.push(("sasl.password".into(), pw));
    }
    kafka.validate().map_err(|e| Exit::usage(e.to_string()))?;
    if args.batch_rows == Some(0) {
        return Err(Exit::usage("--batch-rows must be at least 1"));
    }
    validate_error_policy(args)?;
    validate_envelope(args)?;
    let max_poll = kafka
        .max_poll_interval_ms()
        .map_err(|e| Exit::usage(e.to_string()))?;
    if args.insert_timeout.as_millis() >= u128::from(max_poll) {
        return Err(Exit::usage(format!(
            "--insert-timeout ({} ms) must be below max.poll.interval.ms ({max_poll} ms)",
            args.insert_timeout.as_millis()
        )));
    }
    if args.drivers == Some(0) {
        return Err(Exit::usage("--drivers must be at least 1"));
    }
    if args.async_insert && args.delivery == crate::cli::Delivery::ExactlyOnce {
        return Err(Exit::usage(
            "--async-insert is at-least-once only: exactly-once needs every block's own token and intent",
        ));
    }
    if !args.shard_weights.is_empty() && args.shards.is_empty() {
        return Err(Exit::usage(
            "--shard-weights needs --shard flags (with --cluster, weights come from system.clusters)",
        ));
    }
    Ok(Validated {
        table,
        kafka,
        topology: topology_source(args)?,
        password: password.map(SharedSecret::new),
        tls: TlsSettings::new(args.clickhouse_files.files.tls()),
        format: format_spec(args)?,
    })
}

/// The ClickHouse password (from the flag or its file), every secret of
/// the flags registered for redaction from all output.
fn secrets(args: &RunArgs) -> Result<Option<Secret>, Exit> {
    for (k, v) in &args.properties {
        if crate::secret::is_secret_key(k) {
            crate::secret::register(v);
        }
    }
    let password = args.clickhouse_files.password(args.password.as_ref())?;
    Ok(password.map(Secret::new))
}

/// One pipeline's sink settings, from its flags: what `run` starts the
/// sink with and what `check` discovers the servers with.
/// The bad-message flags' cross-checks.
fn validate_error_policy(args: &RunArgs) -> Result<(), Exit> {
    if !(0.0..=1.0).contains(&args.max_rejected_ratio) {
        return Err(Exit::usage("--max-rejected-ratio must be between 0 and 1"));
    }
    if args.rejected_window == 0 {
        return Err(Exit::usage("--rejected-window must be at least 1"));
    }
    let dead_letter = args.on_error == spate_core::policy::OnError::DeadLetter;
    let destination = args.dead_letter_topic.is_some() || args.dead_letter_table.is_some();
    if dead_letter && !destination {
        return Err(Exit::usage(
            "--on-error dead-letter needs a destination: --dead-letter-topic TOPIC and/or --dead-letter-table [DB.]TABLE",
        ));
    }
    if !dead_letter && destination {
        return Err(Exit::usage(
            "--dead-letter-topic and --dead-letter-table are only used with --on-error dead-letter",
        ));
    }
    if let Some(t) = &args.dead_letter_table {
        TableRef::parse(t).map_err(|e| Exit::usage(format!("--dead-letter-table: {e}")))?;
    }
    if args
        .dead_letter_topic
        .as_ref()
        .is_some_and(|t| args.topics.contains(t))
    {
        return Err(Exit::usage(
            "--dead-letter-topic must not be a topic the pipeline reads",
        ));
    }
    Ok(())
}

/// Whether the pipeline's inserts are streamed (`--insert-request` not 0,
/// at least once, Native): its sink streams them then (see
/// `spate_clickhouse::StreamBounds`).
pub(crate) fn streams(a: &RunArgs) -> bool {
    !a.insert_request.is_zero()
        && !a.async_insert
        && a.delivery == crate::cli::Delivery::AtLeastOnce
        && a.insert_format == InsertFormat::Native
}

pub(crate) fn sink_spec(a: &RunArgs, v: &Validated) -> SinkSpec {
    SinkSpec {
        topology: v.topology.clone(),
        shard_key: a.shard_key.clone(),
        renames: a.rename.clone(),
        user: a.user.clone(),
        password: v.password.clone(),
        tls: v.tls.clone(),
        table: v.table.clone(),
        strict: a.strict,
        client: ChClientOptions {
            connect_timeout: Duration::from_secs(10),
            insert_timeout: a.insert_timeout,
            lz4: a.compression == Compression::Lz4,
        },
        retry: retry_policy(a, v),
        // Streamed: one long request per shard (several would split the
        // requests' share of the budget, and make smaller parts).
        workers_per_shard: match streams(a) {
            true => 1,
            false => a.insert_workers.max(1),
        },
        native: a.insert_format == InsertFormat::Native,
        format: v.format.clone(),
        envelope: envelope_spec(a),
        exactly_once: a.delivery == crate::cli::Delivery::ExactlyOnce,
        async_insert: a.async_insert,
        topics: a.topics.len(),
        // Needs the partition count from Kafka metadata: not filled yet.
        takeover: None,
        // Named by the caller that knows the pipeline.
        pipeline: "main".into(),
    }
}

/// The envelope flags (checked together by [`validate_envelope`]).
fn envelope_spec(a: &RunArgs) -> spate_clickhouse::EnvelopeSpec {
    use crate::cli::{Envelope, OnDelete, OnTruncate};
    use spate_clickhouse::{EnvelopeKind, EnvelopeSpec};
    EnvelopeSpec {
        kind: match a.envelope {
            Envelope::None => EnvelopeKind::None,
            Envelope::Debezium => EnvelopeKind::Debezium,
            Envelope::Upsert => EnvelopeKind::Upsert,
        },
        on_delete: match a.on_delete {
            Some(OnDelete::Skip) => spate_clickhouse::OnDelete::Skip,
            Some(OnDelete::Apply) | None => spate_clickhouse::OnDelete::Apply,
        },
        on_truncate: match a.on_truncate {
            Some(OnTruncate::Skip) => spate_clickhouse::OnTruncate::Skip,
            Some(OnTruncate::DeleteAll) => spate_clickhouse::OnTruncate::DeleteAll,
            Some(OnTruncate::Fail) | None => spate_clickhouse::OnTruncate::Fail,
        },
    }
}

/// `--envelope` and the flags that go with it.
fn validate_envelope(a: &RunArgs) -> Result<(), Exit> {
    use crate::cli::Envelope;
    if a.envelope == Envelope::None {
        if a.on_delete.is_some() || a.on_truncate.is_some() {
            return Err(Exit::usage(
                "--on-delete and --on-truncate need --envelope debezium or upsert",
            ));
        }
        return Ok(());
    }
    if !matches!(a.format, MessageFormat::Json | MessageFormat::Avro) {
        return Err(Exit::usage(format!(
            "--envelope {} reads JSON or Avro change events; --format {} is not supported with it yet",
            format!("{:?}", a.envelope).to_lowercase(),
            format!("{:?}", a.format).to_lowercase()
        )));
    }
    if a.tombstones_are_errors {
        return Err(Exit::usage(
            "--tombstones-are-errors does not go with --envelope: a tombstone is part of a change stream (docs/cdc.md)",
        ));
    }
    if a.envelope == Envelope::Upsert && a.on_truncate.is_some() {
        return Err(Exit::usage(
            "--on-truncate needs --envelope debezium (an upsert topic has no truncates)",
        ));
    }
    Ok(())
}

/// Retries: a timed-out attempt's timeout doubles for the next attempt,
/// up to 8 times `--insert-timeout`, and stays below max.poll.interval.ms
/// as `--insert-timeout` must (issue 16 point 10).
fn retry_policy(a: &RunArgs, v: &Validated) -> RetryPolicy {
    let max_poll = v.kafka.max_poll_interval_ms().unwrap_or(300_000);
    let below_poll = Duration::from_millis(max_poll).saturating_sub(Duration::from_secs(1));
    RetryPolicy {
        insert_timeout: a.insert_timeout,
        max_insert_timeout: a.insert_timeout.saturating_mul(8).min(below_poll),
        ..RetryPolicy::default()
    }
}

/// `--format protobuf`: a descriptor file and message, or the registry.
fn protobuf_source(a: &RunArgs) -> Result<ProtobufSource, Exit> {
    let (Some(file), Some(message)) = (&a.protobuf_descriptor, &a.protobuf_message) else {
        return Ok(ProtobufSource::Registry(Arc::new(registry(a)?)));
    };
    if a.schema_registry.is_some() {
        return Err(Exit::usage(
            "--protobuf-descriptor and --schema-registry exclude each other",
        ));
    }
    let set = std::fs::read(file)
        .map_err(|e| Exit::usage(format!("--protobuf-descriptor {file}: {e}")))?;
    ProtobufSource::from_descriptor_set(&set, message)
        .map_err(|e| Exit::usage(format!("--protobuf-descriptor {file}: {e}")))
}

/// The schema registry of `--format avro|protobuf`.
fn registry(a: &RunArgs) -> Result<SchemaRegistry, Exit> {
    let url = a.schema_registry.clone().ok_or_else(|| {
        let name = format!("{:?}", a.format).to_lowercase();
        Exit::usage(format!("--format {name} needs --schema-registry URL"))
    })?;
    let cfg = registry_config(
        url,
        a.schema_registry_user.clone(),
        a.schema_registry_password.as_ref(),
        &a.registry_files,
    )?;
    SchemaRegistry::new(&cfg).map_err(|e| Exit::usage(e.to_string()))
}

/// The registry's settings from its flags (`run`, `check`, `gen`): the
/// password from its flag or file, and it and the URL's password
/// registered for redaction from all output.
pub(crate) fn registry_config(
    url: String,
    user: Option<String>,
    password: Option<&String>,
    files: &TlsFlags<Registry>,
) -> Result<RegistryConfig, Exit> {
    let password = files.password(password)?;
    let authority = url.split_once("://").map_or("", |(_, r)| r);
    let authority = authority.split('/').next().unwrap_or("");
    if let Some((info, _)) = authority.rsplit_once('@') {
        if let Some((_, p)) = info.split_once(':') {
            crate::secret::register(p);
        }
    }
    Ok(RegistryConfig {
        url,
        user,
        password,
        tls: files.files.tls(),
    })
}

/// The message format and the options it needs (`--format` and its flags).
fn format_spec(a: &RunArgs) -> Result<FormatSpec, Exit> {
    let unused = |flag: &str, set: bool| {
        if set {
            Err(Exit::usage(format!(
                "{flag} needs --format {}",
                match flag {
                    "--raw-column" => "raw",
                    "--csv-columns" => "csv",
                    _ => "avro or protobuf",
                }
            )))
        } else {
            Ok(())
        }
    };
    if a.format != MessageFormat::Raw {
        unused("--raw-column", a.raw_column.is_some())?;
    }
    if a.format != MessageFormat::Csv {
        unused("--csv-columns", !a.csv_columns.is_empty())?;
    }
    if !matches!(a.format, MessageFormat::Avro | MessageFormat::Protobuf) {
        unused("--schema-registry", a.schema_registry.is_some())?;
    }
    if a.format != MessageFormat::Protobuf && a.protobuf_descriptor.is_some() {
        return Err(Exit::usage("--protobuf-descriptor needs --format protobuf"));
    }
    Ok(match a.format {
        MessageFormat::Json => FormatSpec::Json,
        MessageFormat::Raw => FormatSpec::Raw {
            column: a
                .raw_column
                .clone()
                .ok_or_else(|| Exit::usage("--format raw needs --raw-column COLUMN"))?,
        },
        MessageFormat::Csv => {
            let delimiter = u8::try_from(a.csv_delimiter)
                .ok()
                .filter(|d| d.is_ascii() && !matches!(d, b'"' | b'\r' | b'\n'))
                .ok_or_else(|| {
                    Exit::usage("--csv-delimiter must be one ASCII character other than a quote or a line break")
                })?;
            FormatSpec::Csv(CsvOptions {
                columns: a.csv_columns.clone(),
                delimiter,
            })
        }
        MessageFormat::Avro => FormatSpec::Avro(Arc::new(registry(a)?)),
        MessageFormat::Protobuf => FormatSpec::Protobuf(protobuf_source(a)?),
    })
}

/// Where the shards come from: one URL, a cluster read from a seed URL,
/// or the `--shard` flags.
fn topology_source(args: &RunArgs) -> Result<TopologySource, Exit> {
    Ok(match (&args.clickhouse_url, &args.cluster) {
        (Some(url), Some(name)) => TopologySource::Cluster {
            url: url.clone(),
            name: name.clone(),
        },
        (Some(url), None) => TopologySource::Single(url.clone()),
        (None, _) => TopologySource::Shards(
            Topology::from_flags(&args.shards, &args.shard_weights)
                .map_err(|e| Exit::usage(e.to_string()))?,
        ),
    })
}

/// The Kafka source's settings: the flags, the prefetch share of the
/// memory budget, and the revocation deadline (a third of the session
/// timeout, at most 10 s, unless `--revoke-timeout` says otherwise).
fn kafka_config(args: &RunArgs) -> Result<KafkaSourceConfig, Exit> {
    let mut kafka = KafkaSourceConfig {
        brokers: args.brokers.clone(),
        topics: args.topics.clone(),
        group: args.group.clone(),
        until_end: args.until_end,
        properties: args.properties.clone(),
        revoke_timeout: Duration::from_secs(10),
        // A quarter of the budget for librdkafka's prefetch, split by the
        // source over the topics' partitions (each has its own queue).
        // The limit librdkafka applies counts payload bytes only, and a
        // queued small message costs about as much again in its own
        // structures, so the limit is half the share: an eighth.
        prefetch_kbytes: args.max_buffered_bytes / 8 / 1024,
    };
    let session_ms = kafka
        .session_timeout_ms()
        .map_err(|e| Exit::usage(e.to_string()))?;
    kafka.revoke_timeout = args
        .revoke_timeout
        .unwrap_or_else(|| Duration::from_millis(session_ms / 3).min(Duration::from_secs(10)));
    Ok(kafka)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["spate", "run", "--brokers", "b:9092", "--group", "g"];
        argv.extend_from_slice(&["--table", "db.t", "--clickhouse-url", "http://ch:8123"]);
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Run(a) => a,
            other => panic!("parsed as {other:?}"),
        }
    }

    /// Streamed requests release their batches past the byte bound unless
    /// told not to; the bare flag (stop 46's opt-in) still means on.
    #[test]
    fn requests_release_their_batches_by_default() {
        assert!(run_args(&["--topic", "t"]).insert_request_release);
        assert!(run_args(&["--topic", "t", "--insert-request-release"]).insert_request_release);
        let off = run_args(&["--topic", "t", "--insert-request-release=false"]);
        assert!(!off.insert_request_release);
    }

    /// The bad-message flags: a policy per pipeline, dead-letter needs a
    /// destination, a destination needs dead-letter, limits in range.
    #[test]
    fn error_policy_flags_are_checked() {
        let a = run_args(&[
            "--topic",
            "t",
            "--on-error",
            "skip",
            "--max-rejected-consecutive",
            "7",
        ]);
        let p = a.error_policy();
        assert_eq!(p.on_error, spate_core::policy::OnError::Skip);
        assert_eq!(p.limit.max_consecutive, 7);
        assert!(!p.tombstones_are_errors);
        assert!(validate(&a).is_ok());
        for (extra, needle) in [
            (&["--on-error", "dead-letter"][..], "needs a destination"),
            (
                &["--dead-letter-topic", "dlq"][..],
                "only used with --on-error dead-letter",
            ),
            (
                &["--on-error", "dead-letter", "--dead-letter-topic", "t"][..],
                "must not be a topic",
            ),
            (
                &["--on-error", "dead-letter", "--dead-letter-table", "a.b.c"][..],
                "--dead-letter-table",
            ),
            (&["--max-rejected-ratio", "1.5"][..], "between 0 and 1"),
            (&["--rejected-window", "0"][..], "at least 1"),
        ] {
            let mut args = vec!["--topic", "t"];
            args.extend_from_slice(extra);
            let e = validate(&run_args(&args)).err().expect("refused");
            assert!(e.message().contains(needle), "{extra:?}: {}", e.message());
        }
        let ok = run_args(&[
            "--topic",
            "t",
            "--on-error",
            "dead-letter",
            "--dead-letter-table",
            "dl",
        ]);
        assert!(validate(&ok).is_ok());
    }

    /// The process-wide settings: what the flags give, or what spate
    /// derives, marked as derived.
    #[test]
    fn process_settings_say_what_spate_derived() {
        let a = run_args(&["--topic", "t", "-X", "session.timeout.ms=9000"]);
        let p = process(&a, &validate(&a).unwrap());
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(
            p.drivers,
            Derivable {
                value: cores,
                derived: true
            }
        );
        assert_eq!(
            p.revoke_timeout,
            Derivable {
                value: Duration::from_secs(3),
                derived: true
            }
        );
        assert_eq!(p.idle_exit, None);
        let a = run_args(&[
            "--topic",
            "t",
            "--drivers",
            "3",
            "--revoke-timeout",
            "2s",
            "--until-end",
        ]);
        let p = process(&a, &validate(&a).unwrap());
        assert_eq!((p.drivers.value, p.drivers.derived), (3, false));
        assert_eq!(
            (p.revoke_timeout.value, p.revoke_timeout.derived),
            (Duration::from_secs(2), false)
        );
        // One default session timeout (45 s).
        assert_eq!(p.idle_exit, Some(Duration::from_secs(45)));
    }

    #[test]
    fn revocation_and_prefetch_are_derived_from_the_flags() {
        let v = validate(&run_args(&[
            "--topic",
            "t",
            "--max-buffered-bytes",
            "256MiB",
        ]))
        .unwrap();
        // A third of the default 45 s session timeout, capped at 10 s.
        assert_eq!(v.kafka.revoke_timeout, Duration::from_secs(10));
        assert_eq!(v.kafka.prefetch_kbytes, (256 << 20) / 8 / 1024);
        assert_eq!(v.table.to_string(), "db.t");
        assert!(matches!(v.topology, TopologySource::Single(ref u) if u == "http://ch:8123"));
        let a = run_args(&["--topic", "t", "-X", "session.timeout.ms=9000"]);
        assert_eq!(
            validate(&a).unwrap().kafka.revoke_timeout,
            Duration::from_secs(3)
        );
        let a = run_args(&["--topic", "t", "--cluster", "c"]);
        assert!(matches!(
            validate(&a).unwrap().topology,
            TopologySource::Cluster { ref name, .. } if name == "c"
        ));
    }

    #[test]
    fn a_topic_feeds_one_pipeline_and_errors_name_the_pipeline() {
        let a = || run_args(&["--topic", "t", "--topic", "u"]);
        let bad = || run_args(&["--topic", "v", "--batch-rows", "0"]);
        let b = run_args(&["--topic", "u"]);
        let e = validate_pipelines(&[("a".into(), a()), ("b".into(), b)])
            .err()
            .unwrap();
        assert_eq!(e.code(), 2);
        assert_eq!(
            e.message(),
            "topic u is in pipelines a and b; a topic feeds one pipeline"
        );
        let e = validate_pipelines(&[("a".into(), a()), ("b".into(), bad())])
            .err()
            .unwrap();
        assert_eq!(e.message(), "pipeline b: --batch-rows must be at least 1");
        let e = validate_pipelines(&[("main".into(), bad())]).err().unwrap();
        assert_eq!(e.message(), "--batch-rows must be at least 1");
        assert_eq!(validate_pipelines(&[("a".into(), a())]).unwrap().len(), 1);
    }

    /// What `validate` says of `--topic t` and `extra`.
    fn flag_error(extra: &[&str]) -> Option<String> {
        let mut argv = vec!["--topic", "t"];
        argv.extend_from_slice(extra);
        validate(&run_args(&argv))
            .err()
            .map(|e| e.message().to_owned())
    }

    #[test]
    fn envelope_flags_are_checked_together() {
        let err = flag_error;
        assert_eq!(err(&["--envelope", "debezium"]), None);
        assert_eq!(err(&["--envelope", "upsert", "--on-delete", "skip"]), None);
        let refused = [
            (&["--on-delete", "skip"][..], "need --envelope"),
            (&["--on-truncate", "skip"][..], "need --envelope"),
            (
                &["--envelope", "upsert", "--on-truncate", "skip"][..],
                "no truncates",
            ),
            (
                &["--envelope", "debezium", "--tombstones-are-errors"][..],
                "part of a change stream",
            ),
            (
                &[
                    "--envelope",
                    "debezium",
                    "--format",
                    "raw",
                    "--raw-column",
                    "x",
                ][..],
                "--format raw is not supported",
            ),
        ];
        for (flags, needle) in refused {
            let e = err(flags).unwrap_or_else(|| panic!("{flags:?} accepted"));
            assert!(e.contains(needle), "{flags:?}: {e}");
        }
    }

    #[test]
    fn format_flags_are_checked_together() {
        let err = flag_error;
        assert_eq!(
            err(&["--raw-column", "x"]).as_deref(),
            Some("--raw-column needs --format raw")
        );
        assert_eq!(
            err(&["--format", "raw"]).as_deref(),
            Some("--format raw needs --raw-column COLUMN")
        );
        assert_eq!(
            err(&["--format", "avro"]).as_deref(),
            Some("--format avro needs --schema-registry URL")
        );
        assert!(err(&["--format", "csv", "--csv-delimiter", "\""]).is_some());
        // https is served (issue 18); a URL of another scheme, TLS files
        // for an http:// registry and an unreadable CA are refused.
        assert!(err(&["--format", "avro", "--schema-registry", "ftp://r"]).is_some());
        assert_eq!(
            err(&["--format", "avro", "--schema-registry", "https://r"]),
            None
        );
        let tls_on_http = [
            "--format",
            "avro",
            "--schema-registry",
            "http://r",
            "--schema-registry-ca",
            "/etc/hostname",
        ];
        assert!(err(&tls_on_http).is_some_and(|e| e.contains("https://")));
        let bad_ca = [
            "--format",
            "avro",
            "--schema-registry",
            "https://r",
            "--schema-registry-ca",
            "/nonexistent/ca.pem",
        ];
        assert!(
            err(&bad_ca).is_some_and(|e| e.starts_with("--schema-registry-ca /nonexistent/ca.pem"))
        );
        let missing = [
            "--format",
            "protobuf",
            "--protobuf-descriptor",
            "/nonexistent",
            "--protobuf-message",
            "a.B",
        ];
        assert!(err(&missing).is_some_and(|e| e.contains("/nonexistent")));
        assert_eq!(err(&["--format", "csv", "--csv-columns", "a,,b"]), None);
        assert_eq!(
            err(&["--format", "avro", "--schema-registry", "http://r:8081"]),
            None
        );
        let v = validate(&run_args(&[
            "--topic",
            "t",
            "--format",
            "csv",
            "--csv-delimiter",
            ";",
        ]))
        .unwrap();
        assert!(matches!(v.format, FormatSpec::Csv(ref o) if o.delimiter == b';'));
    }

    #[test]
    fn the_registry_password_file_and_tls_files_reach_the_client() {
        let dir = std::env::temp_dir();
        let pw = dir.join(format!("spate-registry-pw-{}", std::process::id()));
        std::fs::write(&pw, "reg-file-secret\n").unwrap();
        let a = run_args(&[
            "--topic",
            "t",
            "--format",
            "avro",
            "--schema-registry",
            "https://u:url-secret@r:8081",
            "--schema-registry-password-file",
            pw.to_str().unwrap(),
            "--schema-registry-cert",
            "/c.pem",
            "--schema-registry-key",
            "/k.pem",
        ]);
        let cfg = registry_config(
            a.schema_registry.clone().unwrap(),
            None,
            None,
            &a.registry_files,
        )
        .unwrap();
        std::fs::remove_file(&pw).unwrap();
        assert_eq!(cfg.password.as_deref(), Some("reg-file-secret"));
        assert_eq!(
            cfg.tls.cert.as_deref(),
            Some(std::path::Path::new("/c.pem"))
        );
        assert_eq!(cfg.tls.key.as_deref(), Some(std::path::Path::new("/k.pem")));
        assert_eq!(cfg.tls.ca, None);
        // Both passwords are masked in everything spate writes.
        let line = crate::secret::redact("pw reg-file-secret url url-secret");
        assert_eq!(line, "pw *** url ***");
        let e = registry_config(
            "http://r".into(),
            None,
            None,
            &TlsFlags::new(crate::tls_files::TlsFiles {
                password_file: Some("/nonexistent/pw".into()),
                ..Default::default()
            }),
        )
        .unwrap_err();
        assert!(e
            .message()
            .starts_with("--schema-registry-password-file /nonexistent/pw: "));
    }
}
