//! The ClickHouse half of `spate check`: finds every replica of every
//! shard as `run` would, reads the table's columns on each (all at once),
//! requires them to agree, and builds the encoder `run` would build from
//! them, so the sampled messages can be tried column by column.
//!
//! Runs on the calling thread's current-thread tokio runtime; one task
//! per replica. Problems go to the [`Verdict`], the `OK:` lines to stdout.
//!
//! Shards and replicas are found by the sink's one resolver
//! ([`spate_clickhouse::discover`]), the same code `run` starts with.
//!
//! With `--envelope`, the table's engine is read as `run` reads it
//! ([`change_plan_for`]) and samples go through the change encoder; each
//! message's operation and the row document it makes are reported.
//!
//! With `--format` other than JSON, samples are decoded by that format's
//! encoder ([`FormatEncoder`], the one `run` builds), whole messages at a
//! time; its schema registry, if any, is asked once up front and waits
//! for it are bounded by the check's request timeout.

use super::flags::{Flags, REQUEST_TIMEOUT};
use super::verdict::Verdict;
use spate_clickhouse::formats::AvroText;
use spate_clickhouse::{
    change_plan_for, discover, ChRowEncoder, ChangeEncoder, ChangePlan, ClientError, Column,
    EncoderOptions, FormatEncoder, FormatSpec, ReplicaAnswer, ReplicaSchema, RowEncoder, RowError,
    SinkError, TopologySource,
};
use spate_core::record::Message;
use spate_core::sink::{Encoded, RowEncode};

/// The target table, read from every replica.
pub(super) struct Schema {
    pub columns: Vec<Column>,
    /// The JSON encoder: the column list, and per-column checks for JSON.
    pub encoder: RowEncoder,
    /// The pipeline's format's encoder, when it is not JSON.
    pub format: Option<FormatEncoder>,
    /// `--format`, as spelled there.
    pub format_name: &'static str,
    /// `--envelope`: what the last message tried was, and the row
    /// document it made, if any.
    pub last_change: Option<(&'static str, Option<String>)>,
}

impl Schema {
    /// Connect to every replica of every shard and read the columns.
    /// `None` if no replica answered or the schema is unusable.
    pub async fn read(flags: &Flags<'_>, verdict: &mut Verdict) -> Option<Self> {
        println!("\nClickHouse, table {}:", flags.table);
        let answers = match describe_replicas(flags).await {
            Ok(answers) => answers,
            Err(e) => {
                if e.is_config() {
                    verdict.config(e.to_string());
                } else {
                    verdict.failed(e.to_string());
                }
                return None;
            }
        };
        let mut columns: Option<(String, Vec<Column>)> = None;
        for ReplicaAnswer {
            shard,
            replica,
            url,
            answer,
        } in answers
        {
            let label = format!("shard {} replica {} {url}", shard + 1, replica + 1);
            match answer {
                Ok(ReplicaSchema {
                    version,
                    columns: cols,
                }) => match &columns {
                    Some((first, c)) if *c != cols => verdict.config(format!(
                        "table {} on {url} has other columns than on {first}; every shard and replica must have the same schema",
                        flags.table
                    )),
                    _ => {
                        println!("  OK: {label} (ClickHouse {version})");
                        columns.get_or_insert((url, cols));
                    }
                },
                Err(e @ (ClientError::UnknownTable { .. } | ClientError::ColumnType { .. })) => {
                    verdict.config(format!("clickhouse at {url}: {e}"));
                }
                Err(e) => verdict.failed(format!("ClickHouse {label} unreachable: {e}")),
            }
        }
        let (_, columns) = columns?;
        let change = match change_plan_for(&flags.sink, &columns).await {
            Ok(plan) => plan,
            Err(e) => {
                match e.is_config() {
                    true => verdict.config(e.to_string()),
                    false => verdict.failed(e.to_string()),
                }
                return None;
            }
        };
        if let Some(plan) = &change {
            println!(
                "  OK: {} changes into {}: {}",
                plan.spec.kind.name(),
                flags.table,
                plan.rows.describe()
            );
        }
        Self::plan(flags, columns, change, verdict)
    }

    /// The encoder `run` would build, and the column list.
    fn plan(
        flags: &Flags<'_>,
        columns: Vec<Column>,
        change: Option<ChangePlan>,
        verdict: &mut Verdict,
    ) -> Option<Self> {
        let options = EncoderOptions {
            strict: flags.args.strict,
            with_defaults: false,
        };
        let build = || {
            RowEncoder::new(&columns, options).and_then(|mut e| {
                if !flags.args.shard_key.is_empty() {
                    e.set_shard_key(&flags.args.shard_key)?;
                }
                if !flags.args.rename.is_empty() {
                    e.set_renames(&flags.args.rename)?;
                }
                Ok(e)
            })
        };
        let built = build();
        let spec = &flags.sink.format;
        let format = match (spec, &change) {
            (_, Some(plan)) => build().map(|rows| {
                let avro = spec.registry().map(|r| AvroText::new(r.clone()));
                let change = ChangeEncoder::new(plan.clone(), &columns, ChRowEncoder(rows), avro);
                Some(FormatEncoder::Change(Box::new(change)))
            }),
            (FormatSpec::Json, None) => Ok(None),
            _ => FormatEncoder::new(spec, &columns, options, &flags.args.shard_key).map(Some),
        };
        let (encoder, format) = match built.and_then(|e| Ok((e, format?))) {
            Ok(e) => e,
            Err(e) => {
                verdict.config(format!("table {}: {e}", flags.table));
                return None;
            }
        };
        probe_registry(spec, verdict);
        Some(Self {
            columns,
            encoder,
            format,
            format_name: spec.name(),
            last_change: None,
        })
    }

    /// Try one sampled message as `run` would decode it: column by column
    /// for JSON (`results`, one entry per insert column), as a whole for
    /// the other formats (their decoders stop at the first bad field and
    /// name it in the error).
    pub fn try_message(
        &mut self,
        msg: &Message<'_>,
        results: &mut Vec<Result<(), RowError>>,
    ) -> Result<(), RowError> {
        let Some(format) = &mut self.format else {
            return self.encoder.check_columns(msg, results);
        };
        let mut row = Vec::new();
        let encoded = format.encode(msg, &mut row).map_err(|f| RowError {
            column: f.column,
            value: f.value.unwrap_or_default(),
            reason: f.reason,
        });
        if let FormatEncoder::Change(change) = format {
            let (op, row) = change.last_change();
            self.last_change = Some((op, row.map(|r| String::from_utf8_lossy(r).into_owned())));
        }
        if let Ok(Encoded::Stop { reason }) = encoded {
            return Err(RowError {
                column: None,
                value: String::new(),
                reason: reason.to_owned(),
            });
        }
        encoded?;
        results.clear();
        results.resize(self.encoder.insert_columns().len(), Ok(()));
        Ok(())
    }

    /// The ClickHouse type of column `name`, or nothing if there is none.
    pub fn column_type(&self, name: &str) -> String {
        (self.columns.iter())
            .find(|c| c.name == name)
            .map_or_else(String::new, |c| c.ty.to_string())
    }
}

/// Ask the format's schema registry (if any) once, as `run` does at start,
/// and bound the waits for schemas while sampling.
fn probe_registry(spec: &FormatSpec, verdict: &mut Verdict) {
    let Some(registry) = spec.registry() else {
        return;
    };
    registry.limit_waits(REQUEST_TIMEOUT);
    match registry.probe() {
        Ok(()) => println!("  OK: schema registry {}", registry.url()),
        Err(e) if e.is_transient() => verdict.failed(format!("{}: {e}", registry.url())),
        Err(e) => verdict.config(format!("{}: {e}", registry.url())),
    }
}

/// Every replica of every shard, found by the sink's own resolver (the
/// one `run` starts with), and each one's answer (version and the table's
/// columns), in shard and replica order. An error if the shards cannot be
/// found (the cluster's seed is down, or the cluster is unknown).
async fn describe_replicas(flags: &Flags<'_>) -> Result<Vec<ReplicaAnswer>, SinkError> {
    let discovery = discover(&flags.sink).await?;
    if let TopologySource::Cluster { url, name } = &flags.sink.topology {
        println!(
            "  OK: cluster {name} read from {url}: {} shard(s)",
            discovery.topology.shards.len()
        );
    }
    Ok(discovery.replicas)
}
