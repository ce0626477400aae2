//! The security test brokers of `scripts/services.sh` (see
//! `scripts/broker.sh`): SSL, SASL_PLAINTEXT and SASL_SSL with SCRAM, and
//! the mutual-TLS terminator, as [`KafkaEndpoint`]s with the client
//! properties that reach each one. Addresses and credentials come only from
//! `build/services.env`; a missing variable fails loudly.

use super::env::skip_requested;
use super::kafka::KafkaEndpoint;

const HOW: &str = "run `make services` and `source build/services.env` \
                   (or export SPATE_SKIP_INTEGRATION=1 to skip the integration tests explicitly)";

fn need(name: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| panic!("{name} is not set: {HOW}"))
}

/// The security brokers and their credentials.
#[derive(Clone, Debug)]
pub struct SecureKafka {
    /// `SPATE_TEST_KAFKA_TLS_BROKERS`: SSL, no client authentication.
    pub tls_brokers: String,
    /// `SPATE_TEST_KAFKA_SCRAM_BROKERS`: SASL_PLAINTEXT.
    pub scram_brokers: String,
    /// `SPATE_TEST_KAFKA_SCRAM_TLS_BROKERS`: SASL_SSL.
    pub scram_tls_brokers: String,
    /// `SPATE_TEST_KAFKA_CA`: the CA that signed the brokers' certificate.
    pub ca: String,
    /// `SPATE_TEST_KAFKA_SCRAM_USER` / `_PASSWORD`.
    pub user: String,
    pub password: String,
}

/// The security brokers; `None` only when `SPATE_SKIP_INTEGRATION=1`.
pub fn secure_kafka() -> Option<SecureKafka> {
    if skip_requested() {
        return None;
    }
    let mechanisms = need("SPATE_TEST_KAFKA_SCRAM_MECHANISMS");
    for m in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        assert!(
            mechanisms.split(',').any(|x| x.trim() == m),
            "SPATE_TEST_KAFKA_SCRAM_MECHANISMS={mechanisms} lacks {m}"
        );
    }
    Some(SecureKafka {
        tls_brokers: need("SPATE_TEST_KAFKA_TLS_BROKERS"),
        scram_brokers: need("SPATE_TEST_KAFKA_SCRAM_BROKERS"),
        scram_tls_brokers: need("SPATE_TEST_KAFKA_SCRAM_TLS_BROKERS"),
        ca: need("SPATE_TEST_KAFKA_CA"),
        user: need("SPATE_TEST_KAFKA_SCRAM_USER"),
        password: need("SPATE_TEST_KAFKA_SCRAM_PASSWORD"),
    })
}

fn props(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl SecureKafka {
    /// The SSL broker, its certificate verified against `ca`.
    pub fn tls(&self, ca: &str) -> KafkaEndpoint {
        KafkaEndpoint {
            brokers: self.tls_brokers.clone(),
            properties: props(&[("security.protocol", "SSL"), ("ssl.ca.location", ca)]),
        }
    }

    /// The SASL_SSL broker with `mechanism` and `password`.
    pub fn scram_tls(&self, mechanism: &str, password: &str) -> KafkaEndpoint {
        KafkaEndpoint {
            brokers: self.scram_tls_brokers.clone(),
            properties: props(&[
                ("security.protocol", "SASL_SSL"),
                ("ssl.ca.location", &self.ca),
                ("sasl.mechanism", mechanism),
                ("sasl.username", &self.user),
                ("sasl.password", password),
            ]),
        }
    }

    /// The SASL_PLAINTEXT broker with `mechanism` and `password`.
    pub fn scram(&self, mechanism: &str, password: &str) -> KafkaEndpoint {
        KafkaEndpoint {
            brokers: self.scram_brokers.clone(),
            properties: props(&[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", mechanism),
                ("sasl.username", &self.user),
                ("sasl.password", password),
            ]),
        }
    }
}

/// The mutual-TLS terminator (stunnel, `verify = 2`) in front of a plain
/// broker, and the client certificate it accepts.
#[derive(Clone, Debug)]
pub struct MutualTls {
    /// `SPATE_TEST_KAFKA_MTLS_BROKERS`.
    pub brokers: String,
    /// `SPATE_TEST_KAFKA_MTLS_CA`: the CA of the terminator's certificate.
    pub ca: String,
    /// `SPATE_TEST_KAFKA_MTLS_CLIENT_CERT` / `_CLIENT_KEY` (PEM).
    pub client_cert: String,
    pub client_key: String,
}

/// The mutual-TLS broker; `None` only when `SPATE_SKIP_INTEGRATION=1`.
pub fn mutual_tls() -> Option<MutualTls> {
    if skip_requested() {
        return None;
    }
    Some(MutualTls {
        brokers: need("SPATE_TEST_KAFKA_MTLS_BROKERS"),
        ca: need("SPATE_TEST_KAFKA_MTLS_CA"),
        client_cert: need("SPATE_TEST_KAFKA_MTLS_CLIENT_CERT"),
        client_key: need("SPATE_TEST_KAFKA_MTLS_CLIENT_KEY"),
    })
}

impl MutualTls {
    /// With the client certificate.
    pub fn with_certificate(&self) -> KafkaEndpoint {
        let mut e = self.without_certificate();
        e.properties.extend(props(&[
            ("ssl.certificate.location", &self.client_cert),
            ("ssl.key.location", &self.client_key),
        ]));
        e
    }

    /// TLS with the CA only: the terminator refuses it.
    pub fn without_certificate(&self) -> KafkaEndpoint {
        KafkaEndpoint {
            brokers: self.brokers.clone(),
            properties: props(&[("security.protocol", "SSL"), ("ssl.ca.location", &self.ca)]),
        }
    }
}
