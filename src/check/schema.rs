//! The ClickHouse half of `spate check`: finds every replica of every
//! shard as `run` would, reads the table's columns on each (all at once),
//! requires them to agree, and builds the encoder `run` would build from
//! them, so the sampled messages can be tried column by column.
//!
//! Runs on the calling thread's current-thread tokio runtime; one task
//! per replica. Problems go to the [`Verdict`], the `OK:` lines to stdout.
//!
//! Topology discovery is isolated behind [`describe_replicas`]: it is the
//! only code here that knows how shards and replicas are found.

use super::flags::Flags;
use super::verdict::Verdict;
use spate_clickhouse::{
    ChClient, ClientError, Column, EncoderOptions, RowEncoder, SinkError, Topology, TopologySource,
};

/// The target table, read from every replica.
pub(super) struct Schema {
    pub columns: Vec<Column>,
    pub encoder: RowEncoder,
}

/// One replica's answer: its version and the table's columns.
pub(super) type Answer = Result<(String, Vec<Column>), ClientError>;

/// One replica's answer with its place: shard and replica (0-based), URL.
pub(super) type ReplicaAnswer = (usize, usize, String, Answer);

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
        for (s, r, url, answer) in answers {
            let label = format!("shard {} replica {} {url}", s + 1, r + 1);
            match answer {
                Ok((version, cols)) => match &columns {
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
        Self::plan(flags, columns, verdict)
    }

    /// The encoder `run` would build, and the column list.
    fn plan(flags: &Flags<'_>, columns: Vec<Column>, verdict: &mut Verdict) -> Option<Self> {
        let options = EncoderOptions {
            strict: flags.args.strict,
            with_defaults: false,
        };
        let built = RowEncoder::new(&columns, options).and_then(|mut e| {
            if !flags.args.shard_key.is_empty() {
                e.set_shard_key(&flags.args.shard_key)?;
            }
            Ok(e)
        });
        let encoder = match built {
            Ok(e) => e,
            Err(e) => {
                verdict.config(format!("table {}: {e}", flags.table));
                return None;
            }
        };
        Some(Self { columns, encoder })
    }

    /// The ClickHouse type of column `name`, or nothing if there is none.
    pub fn column_type(&self, name: &str) -> String {
        (self.columns.iter())
            .find(|c| c.name == name)
            .map_or_else(String::new, |c| c.ty.to_string())
    }
}

// ---------------------------------------------------------------------
// Topology discovery: check's own copy of what the sink does at start.
//
// `spate_clickhouse::sink` is getting one public topology resolver that
// serves `run` and `check` (issue 11, item 1). Once it is in, the
// `resolve(flags)` call in `describe_replicas` becomes a call to it and
// `resolve` below is deleted (and `describe_all` too, if that resolver
// also reads each replica's columns). Nothing outside this section knows
// how shards and replicas are found.
// ---------------------------------------------------------------------

/// Every replica of every shard, as `run` would find them, and each one's
/// answer (version and the table's columns), in shard and replica order.
/// An error if the shards cannot be found (the cluster's seed is down, or
/// the cluster is unknown).
async fn describe_replicas(flags: &Flags<'_>) -> Result<Vec<ReplicaAnswer>, SinkError> {
    let topology = resolve(flags).await?;
    if let TopologySource::Cluster { url, name } = &flags.topology {
        println!(
            "  OK: cluster {name} read from {url}: {} shard(s)",
            topology.shards.len()
        );
    }
    Ok(describe_all(flags, &topology).await)
}

/// Every replica's answer, at once, in shard and replica order (0-based).
async fn describe_all(flags: &Flags<'_>, topology: &Topology) -> Vec<ReplicaAnswer> {
    let mut set = tokio::task::JoinSet::new();
    for (s, shard) in topology.shards.iter().enumerate() {
        for (r, url) in shard.replicas.iter().enumerate() {
            let (url, table, options) = (url.clone(), flags.table.clone(), flags.client_options());
            let (user, password) = (flags.args.user.clone(), flags.args.password.clone());
            set.spawn(async move {
                let answer: Answer = async {
                    let c =
                        ChClient::connect_with(&url, user.as_deref(), password.as_deref(), options)
                            .await?;
                    let columns = c.describe(&table.db, &table.table).await?;
                    Ok((c.version().to_owned(), columns))
                }
                .await;
                (s, r, url, answer)
            });
        }
    }
    let mut answers = Vec::new();
    while let Some(joined) = set.join_next().await {
        answers.extend(joined.ok());
    }
    answers.sort_by_key(|(s, r, _, _)| (*s, *r));
    answers
}

/// The shards and replicas, as `run` would find them.
async fn resolve(flags: &Flags<'_>) -> Result<Topology, SinkError> {
    match &flags.topology {
        TopologySource::Single(url) => Ok(Topology::single(url)),
        TopologySource::Shards(t) => Ok(t.clone()),
        TopologySource::Cluster { url, name } => {
            let (user, password) = (flags.args.user.as_deref(), flags.args.password.as_deref());
            let seed = ChClient::connect_with(url, user, password, flags.client_options())
                .await
                .map_err(|source| SinkError::Connect {
                    url: url.clone(),
                    source,
                })?;
            Ok(Topology::from_cluster(&seed, url, name).await?)
        }
    }
}
