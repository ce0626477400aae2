//! The readiness probe: `SELECT 1` on every replica of every shard at
//! once. Runs as a tokio task when the admin server's `/readyz` asks
//! (through the `SinkRuntime` probe); updates `spate_replica_up`.

use super::insert::events::ReplicaUp;
use super::insert::shard::Shard;
use super::insert::target::InsertTarget;
use super::shared::PoolShared;
use spate_core::sink::ProbeResult;
use std::sync::Arc;
use std::time::Duration;

/// Bound on one replica's answer to the readiness probe: well below the
/// probe interval, so an unreachable replica shows within two probes.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Ready when every shard has at least one replica answering; otherwise
/// the error names each shard that has none, with each replica's failure.
pub(crate) async fn probe_shards<C: InsertTarget + Clone>(
    shards: &[Arc<Shard<C>>],
    shared: &PoolShared,
) -> ProbeResult {
    let mut set = tokio::task::JoinSet::new();
    for shard in shards {
        for (r, replica) in shard.replicas.iter().enumerate() {
            let (client, shard) = (replica.client.clone(), shard.clone());
            set.spawn(async move {
                let ping = tokio::time::timeout(PROBE_TIMEOUT, client.ping()).await;
                let result = match ping {
                    Ok(answer) => answer.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
                };
                (shard, r, result)
            });
        }
    }
    let mut failures: Vec<Vec<Option<String>>> = shards
        .iter()
        .map(|s| vec![None; s.replicas.len()])
        .collect();
    let mut up = vec![false; shards.len()];
    while let Some(joined) = set.join_next().await {
        let Ok((shard, r, result)) = joined else {
            continue;
        };
        ReplicaUp {
            site: shared.site(&shard.label),
            replica: &shard.replicas[r].url,
            up: result.is_ok(),
        }
        .emit();
        match result {
            Ok(()) => up[shard.index] = true,
            Err(e) => failures[shard.index][r] = Some(e),
        }
    }
    let down: Vec<String> = shards
        .iter()
        .filter(|s| !up[s.index])
        .map(|s| {
            let why: Vec<String> = s
                .replicas
                .iter()
                .zip(&failures[s.index])
                .map(|(r, f)| format!("{}: {}", r.url, f.as_deref().unwrap_or("no answer")))
                .collect();
            format!("shard {} unreachable ({})", s.label, why.join("; "))
        })
        .collect();
    let mut down = down;
    down.extend(shared.live.get().and_then(|l| l.problem()));
    if down.is_empty() {
        Ok(())
    } else {
        Err(down.join("; "))
    }
}
