//! End to end over Kafka's security protocols, against the suite's security
//! brokers (`scripts/broker.sh`): SSL with the CA verified, SASL_SSL with
//! SCRAM-SHA-512 and SCRAM-SHA-256, SASL_PLAINTEXT with SCRAM, and mutual
//! TLS through the stunnel terminator. Each load has its own topic, group
//! and table, and must insert every offset exactly once with the committed
//! offsets equal to the ends. A wrong password, a wrong CA and a missing
//! client certificate must each fail at start, within a deadline, with
//! exit 2 and one `spate: error:` line naming the broker and the step.
//!
//! Configuration goes through `-X` in most tests and through the config
//! file's `[kafka]` table in the SCRAM-SHA-512 one. ClickHouse is only the
//! destination here, so these run on 18.16 alone.

use crate::support::*;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 2;
const MESSAGES: usize = 3000;

/// A failure at start must come well before librdkafka's retries would
/// have gone on for long (the startup probe fails on the first definite
/// TLS or SASL failure).
const FAIL_FAST: Duration = Duration::from_secs(15);

/// A table for one load: `n`, the partition and the offset.
fn table(ch: &Ch, label: &str) -> String {
    let db = ch.fresh_db(&format!("e2e_ksec_{label}"));
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n UInt64, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
    table
}

/// `spate run` reading `topic` from `endpoint` (its properties as `-X`).
fn args(
    svc: &Services,
    endpoint: &KafkaEndpoint,
    topic: &str,
    group: &str,
    table: &str,
) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "--brokers",
        &endpoint.brokers,
        "--topic",
        topic,
        "--group",
        group,
        "--clickhouse-url",
        &svc.clickhouse_url,
        "--table",
        table,
        "--until-end",
        "-X",
        &format!("session.timeout.ms={SESSION_TIMEOUT_MS}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(endpoint.x_args());
    a
}

/// A new topic on `endpoint` with [`MESSAGES`] messages; returns the ends.
fn topic_with_messages(endpoint: &KafkaEndpoint, label: &str) -> (String, Vec<i64>) {
    let topic = unique(&format!("t_ksec_{label}"));
    create_topic_at(endpoint, &topic, PARTITIONS);
    let produced = produce_at(endpoint, &topic, PARTITIONS, MESSAGES, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: format!(r#"{{"n":{i}}}"#),
        timestamp_ms: None,
    });
    (topic, produced.counts)
}

/// Every offset `0..end` of each partition exactly once, in its partition,
/// and the group's committed offsets equal to the ends.
fn assert_loaded(
    ch: &Ch,
    table: &str,
    endpoint: &KafkaEndpoint,
    group: &str,
    topic: &str,
    ends: &[i64],
    label: &str,
) {
    for (p, &end) in ends.iter().enumerate() {
        let end = end as u64;
        let rows = ch.u64_rows(&format!(
            "SELECT count(), uniqExact(_offset), min(_offset), max(_offset), \
             countIf(n % {PARTITIONS} != {p}) FROM {table} WHERE _partition = {p}"
        ));
        assert_eq!(
            rows[0],
            vec![end, end, 0, end - 1, 0],
            "{label}, partition {p}: [rows, distinct offsets, min, max, misplaced] \
             for offsets 0..{end} each exactly once"
        );
    }
    let committed = committed_at(endpoint, group, topic, PARTITIONS);
    let want: Vec<Option<i64>> = ends.iter().map(|&e| Some(e)).collect();
    assert_eq!(committed, want, "{label}: committed = end offsets");
}

/// Load a fresh topic through `endpoint` with `-X` properties.
fn load_through(endpoint: &KafkaEndpoint, label: &str) {
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _lock = ch_shared_lock();
    let _timer = Timer::start("e2e_kafka_security::load");
    let ch = Ch::connect(&svc.clickhouse_url);
    let table = table(&ch, label);
    let (topic, ends) = topic_with_messages(endpoint, label);
    let group = unique(&format!("g_ksec_{label}"));
    let finished = run(
        label,
        &args(&svc, endpoint, &topic, &group, &table),
        Duration::from_secs(120),
    );
    finished.assert_code(0);
    assert_loaded(&ch, &table, endpoint, &group, &topic, &ends, label);
}

#[test]
fn ssl_load_with_the_ca_verified() {
    let Some(k) = secure_kafka() else { return };
    load_through(&k.tls(&k.ca), "ssl");
}

#[test]
fn sasl_ssl_scram_sha256_load() {
    let Some(k) = secure_kafka() else { return };
    load_through(&k.scram_tls("SCRAM-SHA-256", &k.password), "sasl_ssl_256");
}

#[test]
fn sasl_plaintext_scram_sha512_load() {
    let Some(k) = secure_kafka() else { return };
    load_through(&k.scram("SCRAM-SHA-512", &k.password), "sasl_plain_512");
}

#[test]
fn mutual_tls_load_with_a_client_certificate() {
    let Some(m) = mutual_tls() else { return };
    load_through(&m.with_certificate(), "mtls");
}

/// SASL_SSL + SCRAM-SHA-512, every security property in the config file's
/// `[kafka]` table (none on the command line).
#[test]
fn sasl_ssl_scram_sha512_load_from_the_config_file() {
    let Some(k) = secure_kafka() else { return };
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _lock = ch_shared_lock();
    let _timer = Timer::start("e2e_kafka_security::sasl_ssl_512_file");
    let endpoint = k.scram_tls("SCRAM-SHA-512", &k.password);
    let ch = Ch::connect(&svc.clickhouse_url);
    let table = table(&ch, "sasl_ssl_512");
    let (topic, ends) = topic_with_messages(&endpoint, "sasl_ssl_512");
    let group = unique("g_ksec_sasl_ssl_512");
    let kafka: String = endpoint
        .properties
        .iter()
        .map(|(k, v)| format!("{k:?} = {v:?}\n"))
        .collect();
    let file = log_dir().join(format!("{}.toml", unique("ksec_sasl_ssl_512")));
    std::fs::write(
        &file,
        format!(
            "brokers = {brokers:?}\ntopics = [{topic:?}]\ngroup = {group:?}\n\
             clickhouse_url = {ch:?}\ntable = {table:?}\nuntil_end = true\n\n\
             [kafka]\n\"session.timeout.ms\" = \"{SESSION_TIMEOUT_MS}\"\n{kafka}",
            brokers = endpoint.brokers,
            ch = svc.clickhouse_url,
        ),
    )
    .expect("write the config file");
    let finished = run(
        "sasl_ssl_512_file",
        &[
            "run".into(),
            "--config".into(),
            file.to_string_lossy().into_owned(),
        ],
        Duration::from_secs(120),
    );
    finished.assert_code(0);
    assert_loaded(
        &ch,
        &table,
        &endpoint,
        &group,
        &topic,
        &ends,
        "sasl_ssl_512 (config file)",
    );
}

/// Run spate against `endpoint` (whose settings cannot work) and check it
/// fails at start: exit 2 or 1 within [`FAIL_FAST`], one `spate: error:`
/// line naming `broker` and containing each of `wants`.
fn fails_at_start(endpoint: &KafkaEndpoint, label: &str, wants: &[&str]) {
    let Some(svc) = services_on(Server::V18) else {
        return;
    };
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let table = table(&ch, label);
    let topic = unique(&format!("t_ksec_{label}"));
    let group = unique(&format!("g_ksec_{label}"));
    let started = Instant::now();
    // The deadline of `wait` is a backstop; the bound asserted is FAIL_FAST.
    let finished = run(
        label,
        &args(&svc, endpoint, &topic, &group, &table),
        Duration::from_secs(60),
    );
    let elapsed = started.elapsed();
    eprintln!("[timing] {label}: failed after {elapsed:.1?}");
    assert!(
        matches!(finished.code(), Some(1 | 2)),
        "{label}: expected exit 1 or 2, got {:?}; stderr tail:\n{}",
        finished.status,
        finished.tail(20)
    );
    assert!(
        elapsed < FAIL_FAST,
        "{label}: took {elapsed:.1?} to fail (bound {FAIL_FAST:?}); stderr tail:\n{}",
        finished.tail(20)
    );
    let errors: Vec<&str> = finished
        .stderr
        .lines()
        .filter(|l| l.starts_with("spate: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{label}: one error line: {errors:?}");
    let line = errors[0];
    let broker = format!("Kafka broker {}", endpoint.brokers);
    assert!(line.contains(&broker), "{label}: names {broker}: {line}");
    for want in wants {
        assert!(line.contains(want), "{label}: says {want:?}: {line}");
    }
}

#[test]
fn a_wrong_password_fails_at_start() {
    let Some(k) = secure_kafka() else { return };
    let endpoint = k.scram_tls("SCRAM-SHA-512", "not-the-password");
    fails_at_start(
        &endpoint,
        "wrong_password",
        &["SASL authentication failed", "sasl.password"],
    );
}

#[test]
fn a_wrong_password_over_sasl_plaintext_fails_at_start() {
    let Some(k) = secure_kafka() else { return };
    let endpoint = k.scram("SCRAM-SHA-256", "not-the-password");
    fails_at_start(
        &endpoint,
        "wrong_password_plain",
        &["(sasl_plaintext)", "SASL authentication failed"],
    );
}

#[test]
fn a_wrong_ca_fails_at_start() {
    let Some(k) = secure_kafka() else { return };
    let other = other_ca();
    fails_at_start(
        &k.tls(&other),
        "wrong_ca",
        &["TLS certificate verification failed", "ssl.ca.location"],
    );
}

#[test]
fn mutual_tls_without_a_client_certificate_fails_at_start() {
    let Some(m) = mutual_tls() else { return };
    fails_at_start(
        &m.without_certificate(),
        "mtls_no_cert",
        &["TLS handshake failed", "ssl.certificate.location"],
    );
}

/// A CA that did not sign the brokers' certificate (made once per process
/// with openssl).
fn other_ca() -> String {
    let dir = log_dir().join(unique("other_ca"));
    std::fs::create_dir_all(&dir).expect("create the CA directory");
    let (key, crt) = (dir.join("ca.key"), dir.join("ca.crt"));
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=not the spate test CA", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    crt.to_string_lossy().into_owned()
}
