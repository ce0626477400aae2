//! No secret spate reads ever appears in what it writes. Each path runs
//! with known secrets (the ClickHouse password of the HTTPS server's
//! password user, given by flag, by file and through `${VAR}` in a config
//! file; a Kafka `sasl.password` by `-X`, by `--kafka-password-file` and
//! by `${VAR}` in `[kafka]`), and the test asserts that no secret's text is
//! in its stdout, its stderr or its `/metrics`:
//!
//! - `--print-config`;
//! - a run that fails at start on a wrong password (the error line);
//! - a running pipeline at debug log level, with `/metrics` scraped;
//! - `spate check`'s report.
//!
//! The panic path (the hook masks registered secrets) is unit-tested in
//! `src/secret.rs`: nothing a user can do makes spate panic on purpose.

use crate::support::*;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(120);
const KAFKA_SECRET: &str = "kafka-secret-7f3a9c";
const WRONG_SECRET: &str = "wrong-secret-51be02";

fn stdout_of(fin: &Finished) -> String {
    std::fs::read_to_string(fin.stderr_path.with_extension("stdout")).unwrap_or_default()
}

/// Panic if any secret is in `text`.
fn assert_clean(what: &str, text: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!text.contains(s), "{what} shows a secret ({s}):\n{text}");
    }
}

fn temp_file(name: &str, text: &str) -> String {
    let path = log_dir().join(unique(name));
    std::fs::write(&path, text).expect("write temp file");
    path.to_string_lossy().into_owned()
}

#[test]
fn no_secret_in_print_config_errors_logs_metrics_or_check() {
    let Some(svc) = services() else { return };
    let Some(tls) = https_clickhouse() else {
        return;
    };
    let _lock = ch_shared_lock();
    let password = tls.password();
    let secrets = [password.as_str(), KAFKA_SECRET, WRONG_SECRET];
    let ch = Ch::connect(&tls.plain_url);
    let db = ch.fresh_db("secrets");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n UInt64) ENGINE = MergeTree() ORDER BY n"
    ));
    let topic = unique("t_secrets");
    create_topic(&svc.brokers, &topic, 1);
    produce(&svc.brokers, &topic, 1, 500, |i| Msg {
        partition: 0,
        key: None,
        payload: format!(r#"{{"n": {i}}}"#),
        timestamp_ms: None,
    });
    let kafka_pw_file = temp_file("kafka_pw", &format!("{KAFKA_SECRET}\n"));
    let mut base = run_args(&svc, &topic, &unique("g_secrets"), &table);
    let at = base.iter().position(|a| a == "--clickhouse-url").unwrap() + 1;
    base[at] = tls.mtls_url.clone();
    base.extend(tls.mtls_args());
    base.extend(["--user".into(), tls.user.clone()]);

    // --print-config: by flag and -X, then through ${VAR} in a config file.
    let mut args = base.clone();
    args.extend(["--password".into(), password.clone()]);
    args.extend(["-X".into(), format!("sasl.password={KAFKA_SECRET}")]);
    args.push("--print-config".into());
    let fin = run("secrets_print_config", &args, TIMEOUT);
    fin.assert_code(0);
    let printed = stdout_of(&fin);
    assert!(printed.contains("password = \"***\""), "{printed}");
    assert_clean(
        "--print-config",
        &format!("{printed}{}", fin.stderr),
        &secrets,
    );
    let config = temp_file(
        "secrets.toml",
        "password = \"${SPATE_TEST_CH_PW}\"\n[kafka]\n\"sasl.password\" = \"${SPATE_TEST_KAFKA_PW}\"\n",
    );
    let mut args = base.clone();
    args.extend(["--config".into(), config.clone(), "--print-config".into()]);
    let env = [
        ("SPATE_TEST_CH_PW", password.as_str()),
        ("SPATE_TEST_KAFKA_PW", KAFKA_SECRET),
    ];
    let fin = spawn_with_env("secrets_print_config_env", &args, &env).wait(TIMEOUT);
    fin.assert_code(0);
    let printed = stdout_of(&fin);
    assert!(printed.contains("\"sasl.password\" = \"***\""), "{printed}");
    assert_clean(
        "--print-config (${VAR})",
        &format!("{printed}{}", fin.stderr),
        &secrets,
    );

    // A wrong password: the error line names the server, not the password.
    let mut args = base.clone();
    args.extend([
        "--password".into(),
        WRONG_SECRET.into(),
        "--log-level".into(),
        "debug".into(),
    ]);
    let fin = run("secrets_wrong_password", &args, TIMEOUT);
    fin.assert_code(2);
    assert!(fin.last_line().contains("193"), "{}", fin.last_line());
    assert_clean(
        "a failed start",
        &format!("{}{}", stdout_of(&fin), fin.stderr),
        &secrets,
    );

    // A running pipeline at debug level, its /metrics scraped.
    let port = free_port();
    let mut args = base.clone();
    args.extend([
        "--config".into(),
        config,
        "--kafka-password-file".into(),
        kafka_pw_file,
    ]);
    args.extend([
        "--log-level".into(),
        "debug".into(),
        "--admin-addr".into(),
        format!("127.0.0.1:{port}"),
    ]);
    let running = spawn_with_env("secrets_run", &args, &env);
    let deadline = Instant::now() + TIMEOUT;
    let metrics = loop {
        assert!(Instant::now() < deadline, "no rows within {TIMEOUT:?}");
        if ch.u64(&format!("SELECT count() FROM {table}")) == 500 {
            if let Some(m) = http_get(port, "/metrics") {
                break m;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    running.sigterm();
    let fin = running.wait(TIMEOUT);
    fin.assert_code(0);
    assert!(metrics.contains("spate_"), "{metrics}");
    assert_clean("/metrics", &metrics, &secrets);
    assert_clean(
        "a run's logs",
        &format!("{}{}", stdout_of(&fin), fin.stderr),
        &secrets,
    );

    // spate check's report.
    let mut args = base;
    args[0] = "check".into();
    args.extend([
        "--password".into(),
        password.clone(),
        "--samples".into(),
        "10".into(),
    ]);
    args.extend(["-X".into(), format!("sasl.password={KAFKA_SECRET}")]);
    let fin = run("secrets_check", &args, TIMEOUT);
    fin.assert_code(0);
    assert_clean(
        "spate check",
        &format!("{}{}", stdout_of(&fin), fin.stderr),
        &secrets,
    );
}
