//! Whether a routed table is there on every replica, and creating it from
//! a template when it is not (`--create-table-like`).
//!
//! Runs once per routed table at start, on the caller's tokio runtime,
//! before the table's sink is prepared: one `system.columns` request per
//! replica (the topology resolver's), then one `CREATE TABLE IF NOT
//! EXISTS .. AS template` on each replica that lacks the table. Each
//! replica is asked directly rather than through `ON CLUSTER`: that needs
//! the server's distributed DDL queue, which a set of `--shard` URLs does
//! not have, and a replica that refuses is then named in the error.

use super::discover::discover_clients;
use super::error::SinkError;
use super::spec::{SinkSpec, TableRef};
use crate::client::{ident, ChClient, ClientError};
use crate::transport::Transport;

/// Whether a routed table can be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Every replica that answered has it.
    Present,
    /// Some replicas lacked it, and it was created there from the template.
    Created {
        /// The replicas it was created on.
        replicas: Vec<String>,
    },
    /// Some replica lacks it, and no template was given.
    Missing {
        /// A replica that lacks it.
        url: String,
    },
}

/// Ask every replica of `spec` for `spec.table`; where it is missing and
/// `like` is given, create it there as `like` (a refused creation is a
/// configuration error). Without `like`, the table is missing only if no
/// replica that answered has it. A replica that did not answer is left
/// for the sink's own start (it waits for it or fails).
pub async fn ensure_table(spec: &SinkSpec, like: Option<&TableRef>) -> Result<Presence, SinkError> {
    let (discovery, _) = discover_clients(spec).await?;
    let missing: Vec<String> = (discovery.replicas.iter())
        .filter(|r| matches!(r.answer, Err(ClientError::UnknownTable { .. })))
        .map(|r| r.url.clone())
        .collect();
    let Some(first) = missing.first() else {
        return Ok(Presence::Present);
    };
    let Some(like) = like else {
        // Missing only where no replica has it: a table some replicas
        // lack is the sink's start error, as without routing.
        if (discovery.replicas.iter()).any(|r| r.answer.is_ok()) {
            return Ok(Presence::Present);
        }
        return Ok(Presence::Missing { url: first.clone() });
    };
    let transport = Transport::new(&spec.tls).map_err(|e| SinkError::Config(e.to_string()))?;
    let sql = create_sql(&spec.table, like);
    for url in &missing {
        let client = connect(spec, &transport, url).await?;
        // Refused (the template missing, no right to create): the
        // configuration's fault, named, not a table to wait for.
        client.execute(&sql, &[]).await.map_err(|e| {
            SinkError::Config(format!(
                "--create-table-like {like}: creating {} on {url} failed: {e}",
                spec.table
            ))
        })?;
        tracing::info!(table = %spec.table, template = %like, %url, "created the routed table from its template");
    }
    Ok(Presence::Created { replicas: missing })
}

/// The tables of `spec`'s first server, as `db.table`: those a pipeline
/// whose messages name their table may write (its allowlist picks).
/// Each shard holds the same tables; a table some lack is the sink's
/// start error, as without routing.
pub async fn list_tables(spec: &SinkSpec) -> Result<Vec<String>, SinkError> {
    let transport = Transport::new(&spec.tls).map_err(|e| SinkError::Config(e.to_string()))?;
    let topology = super::discover::resolve(spec, &transport).await?;
    let Some(url) = topology.shards.first().and_then(|s| s.replicas.first()) else {
        return Ok(Vec::new());
    };
    let client = connect(spec, &transport, url).await?;
    let text = client
        .fetch_text(
            "SELECT concat(database, '.', name) FROM system.tables \
             WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema')",
            "TabSeparatedRaw",
        )
        .await
        .map_err(|source| SinkError::Connect {
            url: url.clone(),
            source,
        })?;
    Ok(text.lines().map(str::to_owned).collect())
}

/// A client of `url` with `spec`'s credentials.
async fn connect(spec: &SinkSpec, transport: &Transport, url: &str) -> Result<ChClient, SinkError> {
    ChClient::connect_via(
        transport,
        url,
        spec.user.as_deref(),
        spec.password.as_ref(),
        spec.client,
    )
    .await
    .map_err(|source| SinkError::Connect {
        url: url.to_owned(),
        source,
    })
}

/// `CREATE TABLE IF NOT EXISTS db.t AS db.template`: the template's
/// columns and engine (a replica that created it meanwhile is no error).
fn create_sql(table: &TableRef, like: &TableRef) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {}.{} AS {}.{}",
        ident(&table.db),
        ident(&table.table),
        ident(&like.db),
        ident(&like.table)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_quotes_every_name() {
        let t = TableRef::parse("db.orders-eu").unwrap();
        let like = TableRef::parse("db.tmpl").unwrap();
        assert_eq!(
            create_sql(&t, &like),
            "CREATE TABLE IF NOT EXISTS `db`.`orders-eu` AS `db`.`tmpl`"
        );
    }
}
