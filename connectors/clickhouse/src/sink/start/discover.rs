//! The one topology resolver: which shards and replicas the sink writes
//! to, and what each replica says about the target table. `SinkPool::
//! prepare` (`spate run`) and `spate check` both call it, so they find the
//! same servers and judge them by the same rule ([`check_answers`]).
//!
//! One [`Transport`] (connection pool and TLS settings, built from
//! `spec.tls`) serves the `--cluster` node and every replica, and the
//! clients it returns keep it for inserts and the readiness probe.
//!
//! Runs on the caller's tokio runtime at start: one request to the
//! `--cluster` node for `system.clusters`, then every replica at once
//! (`SELECT version()` and `system.columns`).

use super::error::SinkError;
use super::spec::{SinkSpec, TableRef};
use super::topology::{Topology, TopologySource};
use crate::client::{ChClient, ClientError};
use crate::schema::Column;
use crate::transport::Transport;

/// What one replica said at start.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaSchema {
    /// Its `version()`.
    pub version: String,
    /// The target table's columns there, in table order.
    pub columns: Vec<Column>,
}

/// One replica's answer, or why it gave none.
#[derive(Debug)]
pub struct ReplicaAnswer {
    /// Shard index, 0-based (shard `shard + 1` in logs and metrics).
    pub shard: usize,
    /// Replica index within the shard, 0-based.
    pub replica: usize,
    /// The replica's URL.
    pub url: String,
    /// Its version and columns, or the error.
    pub answer: Result<ReplicaSchema, ClientError>,
}

/// The resolved topology and every replica's answer, in shard and replica
/// order.
#[derive(Debug)]
pub struct Discovery {
    /// The shards and their replicas.
    pub topology: Topology,
    /// One answer per replica, sorted by `(shard, replica)`.
    pub replicas: Vec<ReplicaAnswer>,
}

/// Resolve `spec`'s topology (reading `system.clusters` for `--cluster`)
/// and ask every replica, at once, for its version and the columns of
/// `spec.table`. Fails only when the topology itself cannot be had (a bad
/// cluster name, the `--cluster` node unreachable); a replica's failure is
/// its answer.
pub async fn discover(spec: &SinkSpec) -> Result<Discovery, SinkError> {
    Ok(discover_clients(spec).await?.0)
}

/// [`discover`], with each replica's connected client (`None` where it
/// did not answer), in the order of `Discovery::replicas`.
pub(crate) async fn discover_clients(
    spec: &SinkSpec,
) -> Result<(Discovery, Vec<Option<ChClient>>), SinkError> {
    let transport = Transport::new(&spec.tls).map_err(|e| SinkError::Config(e.to_string()))?;
    let topology = resolve(spec, &transport).await?;
    let mut set = tokio::task::JoinSet::new();
    for (s, shard) in topology.shards.iter().enumerate() {
        for (r, url) in shard.replicas.iter().enumerate() {
            let (spec, url, transport) = (spec.clone(), url.clone(), transport.clone());
            set.spawn(async move {
                let got = describe(&spec, &transport, &url).await;
                (s, r, url, got)
            });
        }
    }
    let mut found = Vec::new();
    while let Some(joined) = set.join_next().await {
        // A panicked task is a bug in the client; its replica is left out
        // and the schema check below still needs one answer.
        found.extend(joined.ok());
    }
    found.sort_by_key(|(s, r, _, _)| (*s, *r));
    let mut replicas = Vec::with_capacity(found.len());
    let mut clients = Vec::with_capacity(found.len());
    for (shard, replica, url, got) in found {
        let (answer, client) = match got {
            Ok((client, schema)) => (Ok(schema), Some(client)),
            Err(e) => (Err(e), None),
        };
        replicas.push(ReplicaAnswer {
            shard,
            replica,
            url,
            answer,
        });
        clients.push(client);
    }
    Ok((Discovery { topology, replicas }, clients))
}

/// The shards and replicas, as the user gave them or as the cluster node
/// lists them.
pub(crate) async fn resolve(spec: &SinkSpec, transport: &Transport) -> Result<Topology, SinkError> {
    match &spec.topology {
        TopologySource::Single(url) => Ok(Topology::single(url)),
        TopologySource::Shards(t) => Ok(t.clone()),
        TopologySource::Cluster { url, name } => {
            let seed =
                connect(spec, transport, url)
                    .await
                    .map_err(|source| SinkError::Connect {
                        url: url.clone(),
                        source,
                    })?;
            Topology::from_cluster(&seed, url, name).await
        }
    }
}

async fn connect(
    spec: &SinkSpec,
    transport: &Transport,
    url: &str,
) -> Result<ChClient, ClientError> {
    let user = spec.user.as_deref();
    ChClient::connect_via(transport, url, user, spec.password.as_ref(), spec.client).await
}

async fn describe(
    spec: &SinkSpec,
    transport: &Transport,
    url: &str,
) -> Result<(ChClient, ReplicaSchema), ClientError> {
    let client = connect(spec, transport, url).await?;
    let columns = client.describe(&spec.table.db, &spec.table.table).await?;
    let version = client.version().to_owned();
    Ok((client, ReplicaSchema { version, columns }))
}

/// The rule `run` starts by: every replica that answered has the same
/// columns, no replica lacks the table or has a column of a type spate
/// cannot write, and at least one replica answered. Returns the index (in
/// `discovery.replicas`) of the first that answered: its columns are the
/// table's. A replica that did not answer is not an error here (it may be
/// down for now; inserts fail over or wait for it).
pub(crate) fn check_answers(
    discovery: &mut Discovery,
    table: &TableRef,
) -> Result<usize, SinkError> {
    let answers = &mut discovery.replicas;
    let config = answers.iter().position(|a| {
        matches!(
            a.answer,
            Err(ClientError::UnknownTable { .. } | ClientError::ColumnType { .. })
        )
    });
    let seed = answers.iter().position(|a| a.answer.is_ok());
    let Some(seed) = config.or(seed) else {
        return Err(match answers.iter_mut().next() {
            Some(a) => take_error(a),
            None => SinkError::Config("no shard given".into()),
        });
    };
    let Ok(reference) = &answers[seed].answer else {
        return Err(take_error(&mut answers[seed]));
    };
    for a in answers.iter() {
        if let Ok(schema) = &a.answer {
            if schema.columns != reference.columns {
                let urls = discovery.topology.shards[a.shard].replicas.join(", ");
                return Err(SinkError::Config(format!(
                    "table {table} on {} (shard {} ({urls})) has other columns than on {}; every shard and replica must have the same schema",
                    a.url,
                    a.shard + 1,
                    answers[seed].url
                )));
            }
        }
    }
    Ok(seed)
}

/// The error of a failed answer, as a start-up error.
fn take_error(a: &mut ReplicaAnswer) -> SinkError {
    let placeholder = Err(ClientError::UnknownTable {
        db: String::new(),
        table: String::new(),
    });
    match std::mem::replace(&mut a.answer, placeholder) {
        Err(source) => SinkError::Connect {
            url: a.url.clone(),
            source,
        },
        Ok(_) => SinkError::Config(format!("{} answered", a.url)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::ErrorClass;
    use crate::types::parse_type;

    fn col(name: &str, ty: &str) -> Column {
        Column {
            name: name.into(),
            ty: parse_type(ty).unwrap(),
            default_kind: crate::schema::DefaultKind::None,
            default_expression: String::new(),
        }
    }

    fn down() -> Result<ReplicaSchema, ClientError> {
        Err(ClientError::Request {
            what: "SELECT version()",
            class: ErrorClass::Retriable,
            code: None,
            message: "connection refused".into(),
        })
    }

    fn up(cols: Vec<Column>) -> Result<ReplicaSchema, ClientError> {
        Ok(ReplicaSchema {
            version: "24.3.1".into(),
            columns: cols,
        })
    }

    fn discovery(answers: Vec<Result<ReplicaSchema, ClientError>>) -> Discovery {
        let urls: Vec<String> = (0..answers.len()).map(|i| format!("http://r{i}")).collect();
        Discovery {
            topology: Topology::from_flags(&[urls.join(",")], &[]).unwrap(),
            replicas: answers
                .into_iter()
                .enumerate()
                .map(|(i, answer)| ReplicaAnswer {
                    shard: 0,
                    replica: i,
                    url: urls[i].clone(),
                    answer,
                })
                .collect(),
        }
    }

    #[test]
    fn the_first_answer_is_the_reference_and_down_replicas_are_fine() {
        let t = TableRef::parse("db.t").unwrap();
        let a = vec![col("a", "UInt8")];
        let mut d = discovery(vec![down(), up(a.clone()), up(a)]);
        assert_eq!(check_answers(&mut d, &t).unwrap(), 1);
    }

    #[test]
    fn other_columns_missing_table_or_nobody_are_errors() {
        let t = TableRef::parse("db.t").unwrap();
        let mut d = discovery(vec![
            up(vec![col("a", "UInt8")]),
            up(vec![col("a", "UInt16")]),
        ]);
        let e = check_answers(&mut d, &t).unwrap_err();
        assert!(e.is_config(), "{e}");
        assert!(e.to_string().contains("http://r1"), "{e}");

        let missing = Err(ClientError::UnknownTable {
            db: "db".into(),
            table: "t".into(),
        });
        let mut d = discovery(vec![up(vec![col("a", "UInt8")]), missing]);
        let e = check_answers(&mut d, &t).unwrap_err();
        assert!(e.is_config() && e.to_string().contains("db.t"), "{e}");

        let mut d = discovery(vec![down(), down()]);
        let e = check_answers(&mut d, &t).unwrap_err();
        assert!(!e.is_config(), "an outage is not a config error: {e}");
        assert!(e.to_string().contains("http://r0"), "{e}");
    }
}
