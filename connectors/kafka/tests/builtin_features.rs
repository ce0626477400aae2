//! What librdkafka was built with, as spate links it: TLS, the SASL
//! mechanisms managed Kafka services require, and every compression codec.
//!
//! No broker is needed: librdkafka checks security and codec properties when
//! a client is created, so a client that is created (and dropped before it
//! connects anywhere) proves the property is accepted. The one thread here is
//! the test's own plus the librdkafka threads each client starts and joins on
//! drop. Every check would fail on a build without the feature (the old
//! `default-features = false, features = ["libz"]` build rejected all but
//! gzip, snappy, lz4 and sasl_plain), and `gssapi_is_not_built_in` shows the
//! mechanism tells a missing feature apart.

use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use rdkafka::producer::BaseProducer;

/// Features spate's users rely on (docs/security.md, "Security and codecs").
const REQUIRED: [&str; 8] = [
    "ssl",
    "sasl_plain",
    "sasl_scram",
    "sasl_oauthbearer",
    "zstd",
    "gzip",
    "snappy",
    "lz4",
];

/// An address nothing listens on: clients are created, never connected.
const NOWHERE: &str = "127.0.0.1:9";

fn builtin_features() -> Vec<String> {
    let native = ClientConfig::new()
        .create_native_config()
        .expect("default librdkafka config");
    let value = native
        .get("builtin.features")
        .expect("builtin.features is readable");
    value.split(',').map(|f| f.trim().to_string()).collect()
}

#[test]
fn builtin_features_list_security_and_every_codec() {
    let features = builtin_features();
    eprintln!("builtin.features = {}", features.join(","));
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|f| !features.iter().any(|have| have == f))
        .collect();
    assert!(
        missing.is_empty(),
        "librdkafka lacks {missing:?}; builtin.features = {features:?}"
    );
    // OAUTHBEARER's `sasl.oauthbearer.method=oidc` fetches tokens with libcurl.
    assert!(
        features.iter().any(|f| f == "http"),
        "librdkafka lacks http (libcurl) for OIDC: {features:?}; install \
         libcurl4-openssl-dev (scripts/prereqs.sh) and rebuild it with `cargo clean -p rdkafka-sys`"
    );
}

/// librdkafka's own check: setting `builtin.features` to a list fails unless
/// every listed feature is built in.
#[test]
fn requiring_the_features_is_accepted() {
    ClientConfig::new()
        .set("builtin.features", REQUIRED.join(","))
        .create_native_config()
        .expect("librdkafka accepts the required builtin.features");
}

/// GSSAPI (Kerberos) needs cyrus-sasl and krb5, which spate does not link
/// (see docs/security.md). If this starts failing, GSSAPI was built in: add
/// it to [`REQUIRED`] and docs/security.md.
#[test]
fn gssapi_is_not_built_in() {
    let Err(err) = ClientConfig::new()
        .set("builtin.features", "sasl_gssapi")
        .create_native_config()
    else {
        panic!("sasl_gssapi is built in: add it to REQUIRED and docs/security.md");
    };
    assert!(
        err.to_string().contains("builtin.features"),
        "unexpected error: {err}"
    );
}

fn consumer(props: &[(&str, &str)]) -> Result<BaseConsumer, String> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", NOWHERE)
        .set("group.id", "spate-builtin-features");
    for (k, v) in props {
        cfg.set(*k, *v);
    }
    cfg.create::<BaseConsumer>().map_err(|e| e.to_string())
}

#[test]
fn sasl_ssl_with_scram_sha_512_consumer_is_created() {
    for mechanism in ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] {
        let made = consumer(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", mechanism),
            ("sasl.username", "spate"),
            ("sasl.password", "not-a-secret"),
        ]);
        if let Err(e) = made {
            panic!("SASL_SSL + {mechanism}: {e}");
        }
    }
}

#[test]
fn ssl_consumer_with_ca_and_endpoint_check_is_created() {
    consumer(&[
        ("security.protocol", "SSL"),
        ("ssl.endpoint.identification.algorithm", "https"),
        ("enable.ssl.certificate.verification", "true"),
    ])
    .expect("SSL consumer");
}

#[test]
fn oauthbearer_oidc_consumer_is_created() {
    consumer(&[
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", "OAUTHBEARER"),
        ("sasl.oauthbearer.method", "oidc"),
        ("sasl.oauthbearer.client.id", "spate"),
        ("sasl.oauthbearer.client.secret", "not-a-secret"),
        (
            "sasl.oauthbearer.token.endpoint.url",
            "https://127.0.0.1:9/token",
        ),
    ])
    .expect("OAUTHBEARER with OIDC");
}

#[test]
fn producers_accept_every_compression_codec() {
    for codec in ["zstd", "gzip", "snappy", "lz4"] {
        let made = ClientConfig::new()
            .set("bootstrap.servers", NOWHERE)
            .set("compression.type", codec)
            .create::<BaseProducer>();
        if let Err(e) = made {
            panic!("compression.type={codec}: {e}");
        }
    }
}
