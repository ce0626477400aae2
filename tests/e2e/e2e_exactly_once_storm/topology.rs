//! The storm's servers: the shards of the target table, their replicas,
//! the cluster nodes the storm pauses and restarts, and the end state
//! read back over the union of the shards (see the parent module).

use crate::support::*;
use std::time::Duration;

/// One shard: its replicas, in `--shard` order.
pub(super) struct Shard {
    pub(super) urls: Vec<String>,
    pub(super) replicas: Vec<Ch>,
    /// The replica the storm never takes away: counted while it runs.
    pub(super) steady: usize,
}

/// The shards of the target table `db.t`, and the cluster nodes to pause
/// and restart (18.16 only).
pub(super) struct Topology {
    pub(super) shards: Vec<Shard>,
    pub(super) db: String,
    pub(super) table: String,
    pub(super) server: Server,
    pub(super) cluster: Option<Cluster>,
}

impl Topology {
    /// Shard 1 = nodes a, b; shard 2 = node c, the main server.
    pub(super) fn v18(svc: &Services, cluster: Cluster) -> Topology {
        assert!(
            cluster.urls.len() >= 3 && cluster.nodes.len() >= 3,
            "three cluster nodes needed (a, b, c), got {:?} {:?}: run `make services` \
             with a scripts/services.sh that defines node c, and source build/services.env",
            cluster.urls,
            cluster.nodes
        );
        let db = unique("e2e_eos_storm");
        let layout = [
            vec![
                (cluster.urls[0].clone(), cluster.nodes[0].clone()),
                (cluster.urls[1].clone(), cluster.nodes[1].clone()),
            ],
            vec![
                (cluster.urls[2].clone(), cluster.nodes[2].clone()),
                (svc.clickhouse_url.clone(), "main".to_string()),
            ],
        ];
        let mut shards = Vec::new();
        for (i, replicas) in layout.into_iter().enumerate() {
            let mut shard = Shard {
                urls: Vec::new(),
                replicas: Vec::new(),
                steady: i, // a in shard 1, the main server in shard 2
            };
            for (url, name) in replicas {
                let ch = Ch::connect(&url);
                ch.exec(&format!("CREATE DATABASE IF NOT EXISTS {db}"));
                // One ZooKeeper path per shard, one replica name per server.
                ch.exec_idempotent(
                    &format!(
                        "CREATE TABLE IF NOT EXISTS {db}.t (n UInt64, s String, _partition UInt32, _offset UInt64) \
                         ENGINE = ReplicatedMergeTree('/clickhouse/tables/{db}/t/shard{i}', '{name}') \
                         ORDER BY (_partition, _offset) SETTINGS replicated_deduplication_window = 10000"
                    ),
                    Duration::from_secs(120),
                );
                shard.urls.push(url);
                shard.replicas.push(ch);
            }
            shards.push(shard);
        }
        let table = format!("{db}.t");
        Topology {
            shards,
            db,
            table,
            server: Server::V18,
            cluster: Some(cluster),
        }
    }

    /// One shard, the 26.9 server: a MergeTree that deduplicates by token.
    pub(super) fn v26(svc: &Services) -> Topology {
        let ch = Ch::connect(&svc.clickhouse_url);
        let (db, table) = ch.deduplicating_table(true, "e2e_eos_storm", 10000, None);
        Topology {
            shards: vec![Shard {
                urls: vec![svc.clickhouse_url.clone()],
                replicas: vec![ch],
                steady: 0,
            }],
            db,
            table,
            server: Server::V26,
            cluster: None,
        }
    }

    /// `--shard URL,URL` per shard.
    pub(super) fn shard_args(&self) -> Vec<String> {
        (self.shards.iter())
            .flat_map(|s| ["--shard".to_string(), s.urls.join(",")])
            .collect()
    }

    /// Rows so far over the steady replicas (0 for one that does not answer).
    pub(super) fn rows(&self) -> u64 {
        (self.shards.iter())
            .map(|s| {
                s.replicas[s.steady]
                    .try_u64(&format!("SELECT count() FROM {}", self.table))
                    .unwrap_or(0)
            })
            .sum()
    }

    /// The cluster node `i` (0 = a, 1 = b, 2 = c): `services.sh node-<cmd>`.
    pub(super) fn node(&self, i: usize, cmd: &str) {
        (self.cluster.as_ref())
            .expect("a cluster step on a topology without a cluster")
            .node(i, cmd);
    }

    /// [`Topology::node`] that only reports a failure: for an [`Undo`],
    /// which runs while a failed test unwinds.
    pub(super) fn node_quietly(&self, i: usize, cmd: &str) {
        let Some(c) = &self.cluster else { return };
        let (Some(script), Some(name)) = (&c.services_sh, c.nodes.get(i)) else {
            return;
        };
        let st = std::process::Command::new(script)
            .args([&format!("node-{cmd}"), name.as_str()])
            .status();
        eprintln!("[e2e_exactly_once_storm] {script} node-{cmd} {name}: {st:?}");
    }

    /// Wait (bounded) until both replicas of each shard hold the same rows;
    /// (rows, distinct) of each shard.
    pub(super) fn settle(&self) -> Vec<(u64, u64)> {
        let table = &self.table;
        let fingerprint =
            format!("SELECT count(), uniqExact(_partition, _offset), sum(_offset) FROM {table}");
        let mut per_shard = Vec::new();
        for (i, shard) in self.shards.iter().enumerate() {
            for r in &shard.replicas {
                // Ends when the replication queue is empty; errors ignored:
                // the comparison below decides.
                let _ = r.try_text(&format!("SYSTEM SYNC REPLICA {table}"), "TabSeparated");
            }
            let seen = wait_for(
                &format!("the replicas of shard {} to agree", i + 1),
                Duration::from_secs(60),
                Duration::from_millis(500),
                || {
                    let all: Vec<Vec<u64>> = (shard.replicas.iter())
                        .map(|r| r.u64_rows(&fingerprint).concat())
                        .collect();
                    if all.windows(2).all(|w| w[0] == w[1]) {
                        Ok(all[0].clone())
                    } else {
                        Err(format!(
                            "(rows, distinct, sum of offsets) per replica {all:?}"
                        ))
                    }
                },
            );
            per_shard.push((seen[0], seen[1]));
        }
        per_shard
    }

    /// Distinct (partition, offset) over the shards' first replicas.
    pub(super) fn union_distinct(&self) -> u64 {
        let mut seen = std::collections::HashSet::new();
        for shard in &self.shards {
            let rows = shard.replicas[0]
                .u64_rows(&format!("SELECT _partition, _offset FROM {}", self.table));
            seen.extend(rows.into_iter().map(|r| (r[0], r[1])));
        }
        seen.len() as u64
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for r in self.shards.iter().flat_map(|s| &s.replicas) {
            let _ = r.try_text(
                &format!("DROP DATABASE IF EXISTS {}", self.db),
                "TabSeparated",
            );
        }
    }
}
