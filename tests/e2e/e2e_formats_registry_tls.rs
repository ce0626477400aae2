//! End to end: the schema registry over HTTPS. `scripts/schema_registry.py`
//! serves TLS with the test CA's server certificate, requires a client
//! certificate and basic auth; `spate gen --format avro` registers the
//! demo schema and produces through it, and `spate run --format avro`
//! loads every event, with `--schema-registry-ca/-cert/-key` and the
//! password from `--schema-registry-password-file` (never in the logs).
//! A wrong CA, no client certificate, or a wrong password fails at start
//! with one line naming what to fix, without retrying, and nothing is
//! committed.

use crate::support::*;
use std::path::Path;
use std::time::Duration;

const EVENTS: &str = "3000";
const PARTITIONS: i32 = 2;
const PASSWORD: &str = "reg-pw-7f3a91c2";

/// The registry's TLS flags with `ca` as the trusted CA, and the client
/// certificate when `identity`.
fn tls_flags(tls: &HttpsCh, ca: &str, identity: bool) -> Vec<String> {
    let mut v = vec!["--schema-registry-ca".to_owned(), ca.to_owned()];
    if identity {
        v.extend(
            [
                "--schema-registry-cert",
                &tls.cert,
                "--schema-registry-key",
                &tls.key,
            ]
            .map(String::from),
        );
    }
    v
}

fn registry_flags(reg: &TlsRegistry, password_file: &Path) -> Vec<String> {
    vec![
        "--format".into(),
        "avro".into(),
        "--schema-registry".into(),
        reg.url(),
        "--schema-registry-user".into(),
        "spate".into(),
        "--schema-registry-password-file".into(),
        password_file.display().to_string(),
    ]
}

/// The registry, and the file holding its password.
fn start_registry(tls: &HttpsCh) -> (TlsRegistry, std::path::PathBuf) {
    let dir = Path::new(&tls.ca).parent().expect("the CA's directory");
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    let reg = TlsRegistry::start(
        &cert.display().to_string(),
        &key.display().to_string(),
        Some(&tls.ca),
        &format!("spate:{PASSWORD}"),
    );
    let password_file = log_dir().join(format!("{}.pw", unique("registry_pw")));
    std::fs::write(&password_file, format!("{PASSWORD}\n")).expect("password file");
    (reg, password_file)
}

fn assert_no_password(fin: &Finished) {
    assert!(
        !fin.stderr.contains(PASSWORD),
        "{}: the registry password is in the log:\n{}",
        fin.label,
        fin.tail(20)
    );
}

#[test]
fn avro_through_an_https_registry_with_a_client_certificate() {
    let Some(svc) = services() else { return };
    let Some(tls) = https_clickhouse() else {
        return;
    };
    let _timer = Timer::start("e2e_formats_registry_tls");
    let _lock = ch_shared_lock();
    let (reg, password_file) = start_registry(&tls);
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_reg_tls");
    let table = format!("{db}.small");
    ch.exec(&format!(
        "CREATE TABLE {table} (ts DateTime, user_id UInt64, event String, value Float64, _partition UInt32, _offset UInt64) ENGINE = MergeTree() ORDER BY (_partition, _offset)"
    ));
    let topic = unique("t_reg_tls");
    let mut gen: Vec<String> = ["gen", "--brokers", &svc.brokers, "--topic", &topic]
        .map(String::from)
        .to_vec();
    gen.extend(["--count", EVENTS, "--partitions", "2"].map(String::from));
    gen.extend(registry_flags(&reg, &password_file));
    gen.extend(tls_flags(&tls, &tls.ca, true));
    let fin = run("gen_avro_tls", &gen, Duration::from_secs(120));
    fin.assert_code(0);
    assert_no_password(&fin);

    // A wrong CA: one line naming the fix, at start, nothing committed.
    let group = unique("g_reg_tls");
    let mut args = run_args(&svc, &topic, &group, &table);
    args.push("--until-end".into());
    args.extend(registry_flags(&reg, &password_file));
    let mut wrong = args.clone();
    wrong.extend(tls_flags(&tls, &tls.other_ca, true));
    let fin = run("run_avro_wrong_ca", &wrong, Duration::from_secs(60));
    fin.assert_code(2);
    let line = fin.last_line();
    for w in [
        "spate: error: ",
        &reg.url(),
        "UnknownIssuer",
        "--schema-registry-ca",
    ] {
        assert!(line.contains(w), "the line says {w:?}: {line}");
    }
    assert!(
        !fin.stderr.contains("retrying") && fin.elapsed < Duration::from_secs(20),
        "a TLS error fails at once, not retried ({:?}):\n{}",
        fin.elapsed,
        fin.tail(20)
    );
    // No client certificate: the registry refuses the handshake.
    let mut anonymous = args.clone();
    anonymous.extend(tls_flags(&tls, &tls.ca, false));
    let fin = run("run_avro_no_cert", &anonymous, Duration::from_secs(60));
    fin.assert_code(2);
    let line = fin.last_line();
    assert!(
        line.contains("TLS error") && line.contains("--schema-registry-cert"),
        "{line}"
    );
    // The right files, the wrong password: refused at start, not retried.
    let wrong_pw = log_dir().join(format!("{}.pw", unique("registry_wrong_pw")));
    std::fs::write(&wrong_pw, "not-the-password\n").expect("password file");
    let mut refused: Vec<String> = args
        .iter()
        .map(|a| match a == &password_file.display().to_string() {
            true => wrong_pw.display().to_string(),
            false => a.clone(),
        })
        .collect();
    refused.extend(tls_flags(&tls, &tls.ca, true));
    let fin = run("run_avro_wrong_password", &refused, Duration::from_secs(60));
    fin.assert_code(2);
    let line = fin.last_line();
    assert!(line.contains("HTTP 401"), "{line}");
    assert!(!fin.stderr.contains("not-the-password"), "{}", fin.tail(10));
    assert_eq!(
        committed(&svc.brokers, &group, &topic, PARTITIONS),
        vec![None; PARTITIONS as usize],
        "nothing committed by the failed starts"
    );

    // The right files: every event loads.
    args.extend(tls_flags(&tls, &tls.ca, true));
    let fin = run("run_avro_tls", &args, Duration::from_secs(180));
    fin.assert_code(0);
    assert_no_password(&fin);
    let ends = end_offsets(&svc.brokers, &topic, PARTITIONS);
    assert_eq!(ends.iter().sum::<i64>(), 3000);
    let committed = committed(&svc.brokers, &group, &topic, PARTITIONS);
    assert_eq!(
        committed,
        ends.iter().map(|&e| Some(e)).collect::<Vec<_>>(),
        "committed = ends"
    );
    let rows = ch.text(
        &format!("SELECT count(), uniqExact(_partition, _offset), sum(user_id) FROM {table}"),
        "TSV",
    );
    let expected: u64 = (0..3000u64)
        .map(|i| i.wrapping_mul(2_654_435_761) % 100_000)
        .sum();
    assert_eq!(rows.trim(), format!("3000\t3000\t{expected}"));
}
