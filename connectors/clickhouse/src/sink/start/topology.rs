//! [`Topology`]: the shards of the target table, each with its replicas
//! and weight, and the slot table that maps a sharding hash to a shard.
//!
//! Three ways to get one: a single server (`--clickhouse-url`), one
//! `--shard URL[,URL...]` flag per shard (with optional `--shard-weights`),
//! or `--cluster NAME`, read from `system.clusters` on the `--clickhouse-url`
//! node. `system.clusters` lists native-protocol ports, not HTTP ones, so a
//! cluster node's URL is its `host_name` with the scheme and HTTP port of
//! `--clickhouse-url`: clusters normally run every node on the same ports.
//!
//! Plain data and parsing; start-up code (on the caller's thread) builds it,
//! [`super::discover::discover()`] reads a cluster's rows with it.

use super::error::SinkError;
use crate::client::ChClient;

/// One shard: its replicas' HTTP URLs (tried in this order) and weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSpec {
    /// Replica URLs, at least one.
    pub replicas: Vec<String>,
    /// Relative share of keyed rows (`<weight>` in `remote_servers`).
    pub weight: u32,
}

/// The shards rows are routed to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Shards in cluster order; shard `i` is labelled `i + 1` in metrics
    /// and logs, like `shard_num` in `system.clusters`.
    pub shards: Vec<ShardSpec>,
}

/// Where the topology comes from, as the user gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopologySource {
    /// One server, one shard.
    Single(String),
    /// Explicit shards (`--shard`, repeatable).
    Shards(Topology),
    /// `--cluster NAME`, read from `system.clusters` on this node.
    Cluster {
        /// The node to ask.
        url: String,
        /// The cluster's name.
        name: String,
    },
}

impl Topology {
    /// One shard with one replica.
    #[must_use]
    pub fn single(url: &str) -> Self {
        Self {
            shards: vec![ShardSpec {
                replicas: vec![url.trim_end_matches('/').to_owned()],
                weight: 1,
            }],
        }
    }

    /// From `--shard` values (each `URL[,URL...]`) and `--shard-weights`
    /// (empty, or one weight per shard).
    pub fn from_flags(shards: &[String], weights: &[u32]) -> Result<Self, SinkError> {
        if shards.is_empty() {
            return Err(SinkError::Config("no --shard given".into()));
        }
        if !weights.is_empty() && weights.len() != shards.len() {
            return Err(SinkError::Config(format!(
                "--shard-weights has {} weights for {} shards",
                weights.len(),
                shards.len()
            )));
        }
        let mut out = Vec::with_capacity(shards.len());
        for (i, s) in shards.iter().enumerate() {
            let replicas: Vec<String> = s
                .split(',')
                .map(|u| u.trim().trim_end_matches('/').to_owned())
                .filter(|u| !u.is_empty())
                .collect();
            if replicas.is_empty() {
                return Err(SinkError::Config(format!("--shard #{} has no URL", i + 1)));
            }
            for u in &replicas {
                split_url(u).map_err(|e| SinkError::Config(format!("--shard #{}: {e}", i + 1)))?;
            }
            out.push(ShardSpec {
                replicas,
                weight: weights.get(i).copied().unwrap_or(1),
            });
        }
        let topology = Self { shards: out };
        topology.check()?;
        Ok(topology)
    }

    /// Read cluster `name` from `system.clusters` on `client` (reached at
    /// `url`).
    pub async fn from_cluster(client: &ChClient, url: &str, name: &str) -> Result<Self, SinkError> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(SinkError::Config(format!(
                "--cluster `{name}` is not a valid cluster name"
            )));
        }
        let sql = format!(
            "SELECT shard_num, shard_weight, replica_num, host_name FROM system.clusters \
             WHERE cluster = '{name}' ORDER BY shard_num, replica_num"
        );
        let text = client
            .fetch_text(&sql, "TabSeparated")
            .await
            .map_err(|source| SinkError::Connect {
                url: url.to_owned(),
                source,
            })?;
        let topology = Self::from_system_clusters(&text, url)
            .map_err(|e| SinkError::Config(format!("--cluster {name} (read from {url}): {e}")))?;
        topology
            .check()
            .map_err(|e| SinkError::Config(format!("--cluster {name}: {e}")))?;
        Ok(topology)
    }

    /// Parse `shard_num, shard_weight, replica_num, host_name` rows
    /// (TabSeparated); node URLs take `base`'s scheme and port.
    pub fn from_system_clusters(tsv: &str, base: &str) -> Result<Self, String> {
        let (scheme, _, port) = split_url(base)?;
        let mut shards: Vec<(u64, ShardSpec)> = Vec::new();
        for line in tsv.lines().filter(|l| !l.trim().is_empty()) {
            let f: Vec<&str> = line.split('\t').collect();
            let [shard_num, weight, _replica, host] = f[..] else {
                return Err(format!("unexpected system.clusters row `{line}`"));
            };
            let shard_num: u64 = shard_num
                .parse()
                .map_err(|_| format!("bad shard_num in `{line}`"))?;
            let weight: u32 = weight
                .parse()
                .map_err(|_| format!("bad shard_weight in `{line}`"))?;
            let host = if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]")
            } else {
                host.to_owned()
            };
            let url = format!("{scheme}://{host}:{port}");
            match shards.last_mut() {
                Some((n, s)) if *n == shard_num => s.replicas.push(url),
                _ => shards.push((
                    shard_num,
                    ShardSpec {
                        replicas: vec![url],
                        weight,
                    },
                )),
            }
        }
        if shards.is_empty() {
            return Err("no such cluster in system.clusters".into());
        }
        Ok(Self {
            shards: shards.into_iter().map(|(_, s)| s).collect(),
        })
    }

    fn check(&self) -> Result<(), SinkError> {
        if self.shards.len() > usize::from(u16::MAX) {
            return Err(SinkError::Config(format!(
                "{} shards is too many",
                self.shards.len()
            )));
        }
        if self.shards.iter().all(|s| s.weight == 0) {
            return Err(SinkError::Config("every shard has weight 0".into()));
        }
        let total: u64 = self.shards.iter().map(|s| u64::from(s.weight)).sum();
        if total > 1 << 20 {
            return Err(SinkError::Config(format!(
                "shard weights sum to {total}; keep them below 2^20"
            )));
        }
        Ok(())
    }

    /// ClickHouse's `slot_to_shard`: shard `i` repeated `weight` times, in
    /// shard order. A row whose sharding hash is `h` goes to shard
    /// `slots[h % slots.len()]`, exactly like a Distributed table.
    #[must_use]
    pub fn slots(&self) -> Vec<u16> {
        let mut slots = Vec::new();
        for (i, s) in self.shards.iter().enumerate() {
            // `check` bounds both the shard count and the total weight.
            slots.extend(std::iter::repeat_n(i as u16, s.weight as usize));
        }
        slots
    }
}

/// `scheme://host:port[/...]` into its parts; the port defaults to 8123
/// (http) or 8443 (https).
pub(crate) fn split_url(url: &str) -> Result<(&str, &str, u16), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("`{url}` is not an http(s):// URL"))?;
    if scheme != "http" && scheme != "https" {
        return Err(format!("`{url}` is not an http(s):// URL"));
    }
    let authority = rest.split('/').next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (authority, None),
    };
    if host.is_empty() {
        return Err(format!("`{url}` has no host"));
    }
    let port = match port {
        Some(p) => p.parse().map_err(|_| format!("`{url}` has a bad port"))?,
        None if scheme == "https" => 8443,
        None => 8123,
    };
    Ok((scheme, host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_make_shards_with_replicas_and_weights() {
        let t = Topology::from_flags(
            &[
                "http://a1:8123,http://a2:8123/".into(),
                "http://b1:8123".into(),
            ],
            &[1, 3],
        )
        .unwrap();
        assert_eq!(t.shards.len(), 2);
        assert_eq!(t.shards[0].replicas, ["http://a1:8123", "http://a2:8123"]);
        assert_eq!(t.shards[1].weight, 3);
        assert_eq!(t.slots(), [0, 1, 1, 1]);
        let even = Topology::from_flags(&["http://a:1".into(), "http://b:1".into()], &[]).unwrap();
        assert_eq!(even.slots(), [0, 1]);
    }

    #[test]
    fn bad_flags_are_config_errors() {
        assert!(Topology::from_flags(&[], &[]).is_err());
        assert!(Topology::from_flags(&["http://a:1".into()], &[1, 2]).is_err());
        assert!(Topology::from_flags(&[" , ".into()], &[]).is_err());
        assert!(Topology::from_flags(&["ftp://a".into()], &[]).is_err());
        assert!(Topology::from_flags(&["http://a:x".into()], &[]).is_err());
        assert!(Topology::from_flags(&["http://a:1".into()], &[0]).is_err());
    }

    #[test]
    fn zero_weight_shards_get_no_slots() {
        let t = Topology::from_flags(
            &[
                "http://a:1".into(),
                "http://b:1".into(),
                "http://c:1".into(),
            ],
            &[2, 0, 1],
        )
        .unwrap();
        assert_eq!(t.slots(), [0, 0, 2]);
    }

    #[test]
    fn system_clusters_rows_group_into_shards() {
        let tsv = "1\t1\t1\tch-a\n1\t1\t2\tch-b\n2\t3\t1\t10.0.0.7\n3\t2\t1\t::1\n";
        let t = Topology::from_system_clusters(tsv, "https://seed:8443/").unwrap();
        assert_eq!(
            t.shards[0].replicas,
            ["https://ch-a:8443", "https://ch-b:8443"]
        );
        assert_eq!(
            t.shards[1],
            ShardSpec {
                replicas: vec!["https://10.0.0.7:8443".into()],
                weight: 3
            }
        );
        assert_eq!(t.shards[2].replicas, ["https://[::1]:8443"]);
        assert_eq!(t.slots(), [0, 1, 1, 1, 2, 2]);
        assert!(Topology::from_system_clusters("", "http://x:8123").is_err());
        assert!(Topology::from_system_clusters("1\tx\t1\th\n", "http://x:8123").is_err());
    }

    #[test]
    fn urls_split_with_default_ports() {
        assert_eq!(split_url("http://h").unwrap(), ("http", "h", 8123));
        assert_eq!(split_url("https://u:p@h:9/x").unwrap(), ("https", "h", 9));
        assert_eq!(
            split_url("http://[::1]:8124").unwrap(),
            ("http", "[::1]", 8124)
        );
        assert_eq!(split_url("http://[::1]").unwrap(), ("http", "[::1]", 8123));
        assert!(split_url("h:8123").is_err());
    }
}
