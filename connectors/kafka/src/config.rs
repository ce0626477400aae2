//! Kafka source settings and the librdkafka properties derived from them.
//!
//! spate sets some librdkafka properties itself ([`DEFAULTS`], each with
//! the reason at the place it is set); a user's `-X` value is applied after
//! them and wins. A few cannot be changed without breaking what spate
//! guarantees or how it works ([`REFUSED`]): `validate` refuses them with
//! the flag to use instead. Both lists are what `spate run --help` shows.

use rdkafka::ClientConfig;
use std::time::Duration;

/// Settings of the Kafka source.
#[derive(Clone, Debug)]
pub struct KafkaSourceConfig {
    /// Bootstrap brokers, `host:port[,host:port…]`.
    pub brokers: String,
    /// Topics to consume (several topics may feed one table).
    pub topics: Vec<String>,
    /// Consumer group id.
    pub group: String,
    /// Stop each lane at its partition's end (librdkafka partition EOF).
    pub until_end: bool,
    /// librdkafka properties given by the user (`-X key=value`), applied
    /// after spate's defaults.
    pub properties: Vec<(String, String)>,
    /// The runtime's revoke budget; must stay below `session.timeout.ms`.
    pub revoke_timeout: Duration,
    /// librdkafka's prefetch over every partition this member may read,
    /// derived from the memory budget. librdkafka applies its limits per
    /// partition (each lane's queue is split off), so the source divides
    /// this by the subscribed topics' partition count (see
    /// [`KafkaSourceConfig::client_config_for`]).
    pub prefetch_kbytes: usize,
}

/// librdkafka properties spate sets, with the value, unless the user's
/// `-X` says otherwise (named in `spate run --help`).
pub const DEFAULTS: &[(&str, &str)] = &[
    ("auto.offset.reset", "earliest"),
    ("partition.assignment.strategy", "cooperative-sticky"),
    (
        "queued.max.messages.kbytes",
        "a share of --max-buffered-bytes",
    ),
    ("fetch.queue.backoff.ms", "50"),
    ("client.id", "spate"),
    ("statistics.interval.ms", "2000 (the lag metrics)"),
    (
        "ssl.ca.location",
        "probe, unless ssl.ca.pem or ssl.ca.certificate.stores is set",
    ),
    ("https.ca.location", "probe, unless https.ca.pem is set"),
];

/// librdkafka properties a user may not set, and why (named in `spate run
/// --help`): each is spate's own flag, or spate's offset handling.
pub const REFUSED: &[(&str, &str)] = &[
    ("bootstrap.servers", "set by --brokers"),
    ("group.id", "set by --group"),
    ("enable.partition.eof", "set by --until-end"),
    (
        "enable.auto.commit",
        "always false: spate commits only what ClickHouse acknowledged",
    ),
    (
        "enable.auto.offset.store",
        "always false: spate commits only what ClickHouse acknowledged",
    ),
];
/// Partitions the prefetch budget is split over when the subscribed
/// topics' partition count is not known.
pub const DEFAULT_PREFETCH_PARTITIONS: usize = 8;

/// Smallest prefetch limit (and fetch size) per partition: below this a
/// partition's throughput drops for little memory saved.
pub const PREFETCH_FLOOR: usize = 32 << 10;

/// Invalid Kafka settings.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required setting is empty.
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// A property value does not parse.
    #[error("librdkafka property {key}={value} is invalid: {reason}")]
    Property {
        /// Property name.
        key: String,
        /// Given value.
        value: String,
        /// Why.
        reason: String,
    },
    /// A property spate sets itself, or must keep, was given.
    #[error("librdkafka property {key} cannot be set with -X or [kafka]: {why}")]
    Refused {
        /// Property name.
        key: String,
        /// Why, and what to use instead.
        why: &'static str,
    },
    /// The revoke budget does not fit in the session timeout.
    #[error("--revoke-timeout ({revoke_ms} ms) must be below session.timeout.ms ({session_ms} ms), or the group evicts this member while it drains")]
    RevokeTimeout {
        /// Revoke budget.
        revoke_ms: u128,
        /// Session timeout.
        session_ms: u128,
    },
    /// A broker connection failed in a way retrying does not fix.
    #[error("{0}")]
    Connect(crate::connect::ConnectFailure),
    /// rdkafka refused the configuration.
    #[error("kafka client configuration rejected: {0}")]
    Client(String),
}

impl KafkaSourceConfig {
    /// Check rules spanning fields.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.brokers.trim().is_empty() {
            return Err(ConfigError::Empty("--brokers"));
        }
        if self.topics.is_empty() || self.topics.iter().any(|t| t.trim().is_empty()) {
            return Err(ConfigError::Empty("--topic"));
        }
        if self.group.trim().is_empty() {
            return Err(ConfigError::Empty("--group"));
        }
        for (key, value) in &self.properties {
            let refused = REFUSED.iter().find(|(k, _)| k == key);
            // `false` restates what spate sets: harmless.
            let restated = key.starts_with("enable.auto.") && value.eq_ignore_ascii_case("false");
            if let (Some((_, why)), false) = (refused, restated) {
                return Err(ConfigError::Refused {
                    key: key.clone(),
                    why,
                });
            }
        }
        let session_ms = self.session_timeout_ms()?;
        if self.revoke_timeout.as_millis() >= u128::from(session_ms) {
            return Err(ConfigError::RevokeTimeout {
                revoke_ms: self.revoke_timeout.as_millis(),
                session_ms: u128::from(session_ms),
            });
        }
        Ok(())
    }

    /// The effective `max.poll.interval.ms`.
    pub fn max_poll_interval_ms(&self) -> Result<u64, ConfigError> {
        let value = self.property("max.poll.interval.ms").unwrap_or("300000");
        value.parse::<u64>().map_err(|e| ConfigError::Property {
            key: "max.poll.interval.ms".into(),
            value: value.into(),
            reason: e.to_string(),
        })
    }

    /// The effective `session.timeout.ms`.
    pub fn session_timeout_ms(&self) -> Result<u64, ConfigError> {
        let value = self.property("session.timeout.ms").unwrap_or("45000");
        value.parse::<u64>().map_err(|e| ConfigError::Property {
            key: "session.timeout.ms".into(),
            value: value.into(),
            reason: e.to_string(),
        })
    }

    /// The value of librdkafka property `key` as the user set it (the last
    /// setting wins).
    #[must_use]
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// True if the user set any of these librdkafka properties.
    fn has_any(&self, keys: &[&str]) -> bool {
        keys.iter().any(|k| self.property(k).is_some())
    }

    /// The librdkafka configuration for up to
    /// [`DEFAULT_PREFETCH_PARTITIONS`] partitions.
    #[must_use]
    pub fn client_config(&self) -> ClientConfig {
        self.client_config_for(DEFAULT_PREFETCH_PARTITIONS)
    }

    /// Per partition, the prefetch limit and the most one fetch brings, in
    /// bytes: half of the partition's share of `prefetch_kbytes` each (a
    /// partition's queue can hold its limit plus one fetch response), at
    /// least [`PREFETCH_FLOOR`].
    #[must_use]
    pub fn prefetch_per_partition(&self, partitions: usize) -> usize {
        (self.prefetch_kbytes * 1024 / partitions.max(1) / 2).clamp(PREFETCH_FLOOR, 64 << 20)
    }

    /// The librdkafka configuration for a member that may read
    /// `partitions` partitions: spate's defaults, then the user's.
    #[must_use]
    pub fn client_config_for(&self, partitions: usize) -> ClientConfig {
        let per_partition = self.prefetch_per_partition(partitions);
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group)
            // Offsets are committed by spate, explicitly, only up to the
            // acknowledged watermark: never by librdkafka on its own.
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // A new group starts at the beginning: never skip data that is
            // already in the topic.
            .set("auto.offset.reset", "earliest")
            // Incremental rebalancing: partitions that stay with this member
            // keep flowing during a rebalance.
            .set("partition.assignment.strategy", "cooperative-sticky")
            // Bounded runs (--until-end) end each lane at partition EOF.
            .set(
                "enable.partition.eof",
                if self.until_end { "true" } else { "false" },
            )
            // Lanes poll their partition queues, and librdkafka applies
            // these per partition: each partition's queue holds up to its
            // limit plus one fetch response, both a share of the prefetch
            // budget, so memory stays bounded whatever the partition count.
            .set(
                "queued.max.messages.kbytes",
                (per_partition / 1024).max(1).to_string(),
            )
            .set("fetch.message.max.bytes", per_partition.to_string())
            // One fetch response over every partition of a broker: one
            // partition's share too. A broker that ignores the
            // per-partition limit (the test broker answers with a
            // partition's whole backlog, measured 4.5 MB for a 64 KiB
            // limit) then still brings at most a share per partition, so
            // 64 partitions cannot take 64 whole responses. librdkafka
            // raises fetch.max.bytes to message.max.bytes, hence both; a
            // record batch larger than the limit is still returned whole
            // (KIP-74), so nothing stalls.
            .set("fetch.max.bytes", per_partition.to_string())
            .set("message.max.bytes", per_partition.to_string())
            // After a partition's prefetch queue was found full, librdkafka
            // waits this long before it considers fetching it again (1 s by
            // default). With the small per-partition prefetch a small budget
            // gives, the queue drains far sooner and the lane starves:
            // measured with --max-buffered-bytes 64MiB (2 MiB per
            // partition), 3M events took 33.4 s at 1 s and 11.5 s at 50 ms.
            .set("fetch.queue.backoff.ms", "50")
            .set("client.id", "spate")
            // High watermarks for the lag metrics come from the statistics.
            .set("statistics.interval.ms", "2000");
        // The bundled OpenSSL is static, with no system certificate
        // directory compiled in: unless the user names a CA, find the
        // system's root certificates (ClickHouse Cloud, Confluent Cloud,
        // MSK and Aiven all present public-CA certificates). The same for
        // OAUTHBEARER/OIDC token endpoints over HTTPS.
        if !self.has_any(&["ssl.ca.location", "ssl.ca.pem", "ssl.ca.certificate.stores"]) {
            c.set("ssl.ca.location", "probe");
        }
        // librdkafka has the https.* properties only when built with
        // libcurl (its `http` feature). A build without it (librdkafka's
        // ./configure left libcurl out: it needs a system libcurl for its
        // link check, see scripts/prereqs.sh) still reads Kafka; it refused every
        // configuration while this was set unconditionally.
        if !self.has_any(&["https.ca.location", "https.ca.pem"]) && librdkafka_has_http() {
            c.set("https.ca.location", "probe");
        }
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }
}

/// Whether the linked librdkafka was built with HTTP (libcurl) support:
/// `http` among its `builtin.features` (read as
/// `tests/builtin_features.rs` reads them).
#[must_use]
pub fn librdkafka_has_http() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        ClientConfig::new()
            .create_native_config()
            .and_then(|native| native.get("builtin.features"))
            .is_ok_and(|f| f.split(',').any(|x| x.trim() == "http"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> KafkaSourceConfig {
        KafkaSourceConfig {
            brokers: "127.0.0.1:9092".into(),
            topics: vec!["t".into()],
            group: "g".into(),
            until_end: false,
            properties: vec![],
            revoke_timeout: Duration::from_secs(2),
            prefetch_kbytes: 8192,
        }
    }

    #[test]
    fn user_properties_override_defaults() {
        let mut c = cfg();
        c.properties
            .push(("partition.assignment.strategy".into(), "range".into()));
        let cc = c.client_config();
        assert_eq!(cc.get("partition.assignment.strategy"), Some("range"));
        assert_eq!(cc.get("enable.auto.commit"), Some("false"));
    }

    #[test]
    fn the_prefetch_budget_holds_whatever_the_partition_count() {
        let mut c = cfg();
        // 64 MiB budget: an eighth for the prefetch.
        c.prefetch_kbytes = (64 << 20) / 8 / 1024;
        for partitions in [1, 8, 64, 256] {
            let cc = c.client_config_for(partitions);
            let limit: usize = cc
                .get("queued.max.messages.kbytes")
                .unwrap()
                .parse()
                .unwrap();
            let fetch: usize = cc.get("fetch.message.max.bytes").unwrap().parse().unwrap();
            let per_partition = limit * 1024 + fetch;
            let floor = 2 * PREFETCH_FLOOR;
            assert!(
                per_partition * partitions <= (c.prefetch_kbytes * 1024).max(floor * partitions),
                "{partitions} partitions: {per_partition} bytes each"
            );
        }
        assert_eq!(c.prefetch_per_partition(64), 64 << 10);
        assert_eq!(c.prefetch_per_partition(100_000), PREFETCH_FLOOR);
        let fetch_max: usize = c
            .client_config_for(64)
            .get("fetch.max.bytes")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(fetch_max, 64 << 10);
    }

    #[test]
    fn a_full_prefetch_queue_is_fetched_again_soon() {
        let mut c = cfg();
        assert_eq!(c.client_config().get("fetch.queue.backoff.ms"), Some("50"));
        c.properties
            .push(("fetch.queue.backoff.ms".into(), "1000".into()));
        assert_eq!(
            c.client_config().get("fetch.queue.backoff.ms"),
            Some("1000")
        );
    }

    #[test]
    fn system_root_certificates_unless_the_user_names_a_ca() {
        let c = cfg();
        assert_eq!(c.client_config().get("ssl.ca.location"), Some("probe"));
        let mut own = cfg();
        own.properties
            .push(("ssl.ca.pem".into(), "-----BEGIN CERTIFICATE-----".into()));
        own.properties
            .push(("https.ca.location".into(), "/etc/idp-ca.pem".into()));
        let cc = own.client_config();
        assert_eq!(cc.get("ssl.ca.location"), None);
        assert_eq!(cc.get("https.ca.location"), Some("/etc/idp-ca.pem"));
    }

    /// spate is built with curl-static so that OAUTHBEARER/OIDC works;
    /// librdkafka's ./configure still drops libcurl when no system libcurl
    /// passes its link check. Such a build must still start (no https.*
    /// default it would refuse). That this build has http is checked, with
    /// the package to install, in `tests/builtin_features.rs`.
    #[test]
    fn the_https_default_follows_librdkafkas_http_feature() {
        let probe = cfg()
            .client_config()
            .get("https.ca.location")
            .map(str::to_owned);
        assert_eq!(probe.as_deref(), librdkafka_has_http().then_some("probe"));
        assert!(
            librdkafka_has_http(),
            "the build has http (see tests/builtin_features.rs)"
        );
        // The configuration spate builds is accepted by this librdkafka.
        let created: Result<rdkafka::consumer::BaseConsumer, _> = cfg().client_config().create();
        assert!(created.is_ok(), "{:?}", created.err());
    }

    #[test]
    fn revoke_timeout_must_fit_in_session_timeout() {
        let mut c = cfg();
        c.properties
            .push(("session.timeout.ms".into(), "6000".into()));
        c.revoke_timeout = Duration::from_secs(6);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::RevokeTimeout { .. })
        ));
        c.revoke_timeout = Duration::from_secs(2);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn properties_spate_owns_are_refused_naming_the_flag() {
        for (key, value, flag) in [
            ("bootstrap.servers", "h:1", "--brokers"),
            ("group.id", "g2", "--group"),
            ("enable.partition.eof", "true", "--until-end"),
            ("enable.auto.commit", "true", "acknowledged"),
            ("enable.auto.offset.store", "true", "acknowledged"),
        ] {
            let mut c = cfg();
            c.properties.push((key.into(), value.into()));
            let e = c.validate().expect_err(key).to_string();
            assert!(e.contains(key) && e.contains(flag), "{e}");
        }
        let mut c = cfg();
        c.properties
            .push(("enable.auto.commit".into(), "false".into()));
        c.properties
            .push(("auto.offset.reset".into(), "latest".into()));
        assert!(
            c.validate().is_ok(),
            "restating false, overriding a default"
        );
    }

    #[test]
    fn every_default_listed_is_one_spate_sets() {
        let cc = cfg().client_config();
        for (key, _) in DEFAULTS.iter().chain(REFUSED) {
            if !matches!(*key, "enable.partition.eof") {
                assert!(cc.get(key).is_some(), "{key} is not set by spate");
            }
        }
        assert_eq!(cc.get("enable.partition.eof"), Some("false"));
    }

    #[test]
    fn empty_settings_are_rejected() {
        let mut c = cfg();
        c.topics.clear();
        assert!(matches!(c.validate(), Err(ConfigError::Empty("--topic"))));
    }
}
