//! End to end over HTTPS, against ClickHouse 18.16 serving TLS itself
//! (client certificates required) and behind stunnel (none asked), with the
//! test CA that `scripts/clickhouse-https.sh` makes:
//!
//! - a load over mutual TLS, the servers found through `--cluster`
//!   discovery over HTTPS: rows exact, committed offsets = ends;
//! - a load over server-authenticated HTTPS as a password user
//!   (`--password-file`); the same user with a wrong password fails at
//!   start;
//! - a wrong CA, the system roots alone, and a missing client certificate
//!   each fail at start with exit 2 and one line naming the URL and the
//!   TLS error, without retrying;
//! - `spate check` over mutual TLS passes, and names the TLS error when the
//!   CA is wrong.

use crate::support::*;
use std::time::Duration;

const PARTITIONS: i32 = 2;
const MESSAGES: usize = 6_000;
const TIMEOUT: Duration = Duration::from_secs(120);

/// A fresh table on the HTTPS server (set up over its plain port) and a
/// topic with [`MESSAGES`] messages; returns (table, topic, ends).
fn fixture(svc: &Services, tls: &HttpsCh, name: &str) -> (Ch, String, String, Vec<i64>) {
    let ch = Ch::connect(&tls.plain_url);
    let db = ch.fresh_db(name);
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n UInt64, s String, _partition UInt32, _offset UInt64) \
         ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
    let topic = unique(&format!("t_{name}"));
    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, MESSAGES, |i| Msg {
        partition: (i % 2) as i32,
        key: None,
        payload: format!(r#"{{"n": {i}, "s": "m{i}"}}"#),
        timestamp_ms: None,
    });
    (ch, table, topic, produced.counts)
}

/// `spate run` to `url`: the suite's run arguments with the URL swapped.
fn args_to(svc: &Services, url: &str, topic: &str, group: &str, table: &str) -> Vec<String> {
    let mut args = run_args(svc, topic, group, table);
    let at = args.iter().position(|a| a == "--clickhouse-url").unwrap() + 1;
    args[at] = url.to_owned();
    args
}

/// Every offset of every partition exactly once, and committed = ends.
fn assert_loaded(svc: &Services, ch: &Ch, table: &str, topic: &str, group: &str, ends: &[i64]) {
    for (p, &end) in ends.iter().enumerate() {
        let rows = ch.u64_rows(&format!(
            "SELECT count(), uniqExact(_offset), min(_offset), max(_offset) \
             FROM {table} WHERE _partition = {p}"
        ));
        let end = end as u64;
        assert_eq!(rows[0], vec![end, end, 0, end - 1], "partition {p}");
    }
    let committed = committed(&svc.brokers, group, topic, PARTITIONS);
    let ends: Vec<Option<i64>> = ends.iter().map(|&e| Some(e)).collect();
    assert_eq!(committed, ends, "committed offsets = ends");
}

/// Exit 2 at start; the last line names `url` and contains each of `what`;
/// no start-up retry was logged (a TLS error is not an outage).
fn assert_fails_at_start(fin: &Finished, url: &str, what: &[&str]) {
    fin.assert_code(2);
    let line = fin.last_line();
    assert!(line.starts_with("spate: error: "), "{line}");
    assert!(line.contains(url), "the line names the URL {url}: {line}");
    for w in what {
        assert!(line.contains(w), "the line says {w:?}: {line}");
    }
    assert!(
        !fin.stderr.contains("retrying"),
        "a TLS error is not retried:\n{}",
        fin.tail(20)
    );
    assert!(
        fin.elapsed < Duration::from_secs(20),
        "failed at once, not after the start-up retries: {:?}",
        fin.elapsed
    );
}

#[test]
fn loads_over_mutual_tls_with_cluster_discovery() {
    let Some(svc) = services() else { return };
    let Some(tls) = https_clickhouse() else {
        return;
    };
    let _lock = ch_shared_lock();
    let (ch, table, topic, ends) = fixture(&svc, &tls, "e2e_mtls");
    let group = unique("g_mtls");
    let mut args = args_to(&svc, &tls.mtls_url, &topic, &group, &table);
    // The stock config's one-node cluster: the node's URL is
    // https://localhost:PORT (the seed's scheme and port), verified with the
    // same CA and client certificate as the seed.
    args.extend(["--cluster".into(), "test_shard_localhost".into()]);
    args.extend(tls.mtls_args());
    args.push("--until-end".into());
    run("https_mtls", &args, TIMEOUT).assert_code(0);
    assert_loaded(&svc, &ch, &table, &topic, &group, &ends);
}

#[test]
fn loads_over_https_as_a_password_user_and_a_wrong_password_fails() {
    let Some(svc) = services() else { return };
    let Some(tls) = https_clickhouse() else {
        return;
    };
    let _lock = ch_shared_lock();
    let (ch, table, topic, ends) = fixture(&svc, &tls, "e2e_https_pw");
    let group = unique("g_https_pw");
    let base = args_to(&svc, &tls.tls_url, &topic, &group, &table);

    let mut wrong = base.clone();
    wrong.extend(["--clickhouse-ca".into(), tls.ca.clone()]);
    wrong.extend(["--user".into(), tls.user.clone()]);
    wrong.extend(["--password".into(), "not-the-password".into()]);
    let fin = run("https_wrong_password", &wrong, TIMEOUT);
    fin.assert_code(2);
    let line = fin.last_line();
    assert!(
        line.contains(&tls.tls_url) && line.contains("193"),
        "{line}"
    );
    assert!(!fin.stderr.contains("not-the-password"), "{}", fin.stderr);
    assert_eq!(ch.u64(&format!("SELECT count() FROM {table}")), 0);

    let mut args = base;
    args.extend(["--clickhouse-ca".into(), tls.ca.clone()]);
    args.extend(["--user".into(), tls.user.clone()]);
    args.extend(["--password-file".into(), tls.password_file.clone()]);
    args.push("--until-end".into());
    let fin = run("https_password_file", &args, TIMEOUT);
    fin.assert_code(0);
    assert!(!fin.stderr.contains(&tls.password()), "{}", fin.stderr);
    assert_loaded(&svc, &ch, &table, &topic, &group, &ends);
}

#[test]
fn a_wrong_ca_or_the_system_roots_alone_fail_at_start() {
    let Some(svc) = services() else { return };
    let Some(tls) = https_clickhouse() else {
        return;
    };
    let _lock = ch_shared_lock();
    let (_ch, table, topic, _) = fixture(&svc, &tls, "e2e_https_ca");
    let base = args_to(&svc, &tls.mtls_url, &topic, &unique("g_ca"), &table);

    let mut wrong = base.clone();
    wrong.extend([
        "--clickhouse-ca".into(),
        tls.other_ca.clone(),
        "--clickhouse-cert".into(),
        tls.cert.clone(),
        "--clickhouse-key".into(),
        tls.key.clone(),
    ]);
    let fin = run("https_wrong_ca", &wrong, TIMEOUT);
    assert_fails_at_start(
        &fin,
        &tls.mtls_url,
        &["TLS error", "UnknownIssuer", "--clickhouse-ca"],
    );

    let fin = run("https_system_roots", &base, TIMEOUT);
    assert_fails_at_start(&fin, &tls.mtls_url, &["TLS error", "UnknownIssuer"]);
}

#[test]
fn a_missing_client_certificate_fails_at_start() {
    let Some(svc) = services() else { return };
    let Some(tls) = https_clickhouse() else {
        return;
    };
    let _lock = ch_shared_lock();
    let (_ch, table, topic, _) = fixture(&svc, &tls, "e2e_https_nocert");
    let mut args = args_to(&svc, &tls.mtls_url, &topic, &unique("g_nocert"), &table);
    args.extend(["--clickhouse-ca".into(), tls.ca.clone()]);
    let fin = run("https_no_client_cert", &args, TIMEOUT);
    assert_fails_at_start(&fin, &tls.mtls_url, &["TLS error", "client certificate"]);
}

#[test]
fn check_over_mutual_tls_passes_and_names_a_tls_error() {
    let Some(svc) = services() else { return };
    let Some(tls) = https_clickhouse() else {
        return;
    };
    let _lock = ch_shared_lock();
    let (ch, table, topic, _) = fixture(&svc, &tls, "e2e_https_check");
    let group = unique("g_https_check");
    let mut args = args_to(&svc, &tls.mtls_url, &topic, &group, &table);
    args[0] = "check".into();
    args.extend(["--samples".into(), "20".into()]);
    let mut good = args.clone();
    good.extend(tls.mtls_args());
    let fin = run("https_check", &good, TIMEOUT);
    fin.assert_code(0);
    let stdout = std::fs::read_to_string(fin.stderr_path.with_extension("stdout")).unwrap();
    assert!(
        stdout.contains(&tls.mtls_url),
        "the report names the replica:\n{stdout}"
    );

    let mut bad = args;
    bad.extend(["--clickhouse-ca".into(), tls.other_ca.clone()]);
    bad.extend(["--clickhouse-cert".into(), tls.cert.clone()]);
    bad.extend(["--clickhouse-key".into(), tls.key.clone()]);
    let fin = run("https_check_wrong_ca", &bad, TIMEOUT);
    assert_ne!(fin.code(), Some(0), "{}", fin.tail(20));
    let stdout = std::fs::read_to_string(fin.stderr_path.with_extension("stdout")).unwrap();
    let all = format!("{stdout}\n{}", fin.stderr);
    assert!(
        all.contains(&tls.mtls_url) && all.contains("UnknownIssuer"),
        "check names the URL and the TLS error:\n{all}"
    );
    assert_eq!(
        ch.u64(&format!("SELECT count() FROM {table}")),
        0,
        "check writes nothing"
    );
}
