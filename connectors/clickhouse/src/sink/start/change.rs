//! A change stream's plan ([`ChangePlan`]), read from the target table's
//! engine at start: `SinkPool::prepare` (`spate run`) and `spate check`
//! ([`change_plan_for`]) decide by the same code.

use super::discover::discover_clients;
use super::error::SinkError;
use super::spec::SinkSpec;
use crate::client::ChClient;
use crate::envelope::ChangePlan;
use crate::schema::Column;

/// [`change_plan`] on the first replica that answers, for `spate check`.
pub async fn change_plan_for(
    spec: &SinkSpec,
    columns: &[Column],
) -> Result<Option<ChangePlan>, SinkError> {
    if spec.envelope.kind == crate::envelope::EnvelopeKind::None {
        return Ok(None);
    }
    let (discovery, clients) = discover_clients(spec).await?;
    let Some((i, seed)) =
        (clients.iter().enumerate()).find_map(|(i, c)| c.as_ref().map(|c| (i, c)))
    else {
        return Err(SinkError::Config("no replica answered".into()));
    };
    let url = &discovery.replicas[i].url;
    change_plan(spec, (seed, url), columns, discovery.topology.shards.len()).await
}

/// A change stream's plan, from the target table's engine (`None`
/// without `--envelope`); a table that cannot show the source's current
/// state is a config error naming it.
pub(crate) async fn change_plan(
    spec: &SinkSpec,
    (seed, url): (&ChClient, &str),
    columns: &[Column],
    shards: usize,
) -> Result<Option<ChangePlan>, SinkError> {
    use crate::envelope::{ChangePlan, EnvelopeKind, TableShape};
    if spec.envelope.kind == EnvelopeKind::None {
        return Ok(None);
    }
    let refuse = |why: String| {
        SinkError::Config(format!(
            "--envelope {} into {}: {why}",
            spec.envelope.kind.name(),
            spec.table
        ))
    };
    if !matches!(
        spec.format,
        crate::formats::FormatSpec::Json | crate::formats::FormatSpec::Avro(_)
    ) {
        return Err(refuse(format!(
            "change events are read as JSON or Avro, not --format {}",
            spec.format.name()
        )));
    }
    let engine = crate::envelope::engine_full(seed, &spec.table.db, &spec.table.table)
        .await
        .map_err(|e| {
            SinkError::Config(format!(
                "reading the engine of {} at {url}: {e}",
                spec.table
            ))
        })?;
    let shape = TableShape::parse(&engine);
    let plan = ChangePlan::resolve(
        spec.envelope,
        &shape,
        columns,
        (shards, &spec.shard_key),
        spec.exactly_once,
    )
    .map_err(refuse)?;
    tracing::info!(
        table = %spec.table,
        envelope = spec.envelope.kind.name(),
        rows = %plan.rows.describe(),
        "changes are applied to the table"
    );
    Ok(Some(plan))
}
