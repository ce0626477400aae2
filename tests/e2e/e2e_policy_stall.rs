//! End to end: a transient insert error that does not clear turns
//! `/readyz` 503 after `--stall-timeout`, naming the shard and the error,
//! and 200 again once it clears; nothing is lost.
//!
//! The transient error is real: a table with `parts_to_throw_insert = 1`
//! that already has a part answers every insert with 252 "Too many parts",
//! which spate retries (merges may catch up). The 26.9 server is used
//! because 18.16 neither throws at one part nor lets the setting be
//! changed on a live table (`MODIFY SETTING`), which is how the test
//! clears the error.

use crate::support::*;
use std::time::Duration;

#[test]
fn a_stuck_transient_error_turns_readyz_503_naming_the_shard() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _timer = Timer::start("e2e_policy_stall");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_policy_stall");
    let group = unique("g_policy_stall");
    let db = ch.fresh_db("e2e_policy_stall");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (x UInt64) ENGINE = MergeTree() ORDER BY x \
         SETTINGS parts_to_throw_insert = 1"
    ));
    ch.exec(&format!("INSERT INTO {table} VALUES (0)"));
    create_topic(&svc.brokers, &topic, 1);
    produce(&svc.brokers, &topic, 1, 100, |i| Msg {
        partition: 0,
        key: None,
        payload: format!(r#"{{"x": {}}}"#, i + 1),
        timestamp_ms: None,
    });
    let port = free_port();
    let mut args = run_args(&svc, &topic, &group, &table);
    let addr = format!("127.0.0.1:{port}");
    args.extend(
        [
            "--admin-addr",
            &addr,
            "--stall-timeout",
            "3s",
            "--probe-interval",
            "500ms",
        ]
        .map(String::from),
    );
    let spate = spawn("policy-stall", &args);
    let body = wait_for(
        "/readyz 503 naming the stuck shard",
        Duration::from_secs(30),
        Duration::from_millis(250),
        || match http_get(port, "/readyz") {
            Some(r) if r.starts_with("HTTP/1.1 503") && r.contains("has not cleared") => Ok(r),
            other => Err(format!("{other:?}")),
        },
    );
    for needle in [&format!("{table} shard"), "Too many parts", "252"] {
        assert!(
            body.contains(needle),
            "/readyz does not name {needle:?}: {body}"
        );
    }
    let health = http_get(port, "/healthz").unwrap_or_default();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    ch.exec(&format!(
        "ALTER TABLE {table} MODIFY SETTING parts_to_throw_insert = 300"
    ));
    wait_for(
        "every row in and /readyz 200 again",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let rows = ch.u64(&format!("SELECT count() FROM {table}"));
            let ready = http_get(port, "/readyz").unwrap_or_default();
            if rows == 101 && ready.starts_with("HTTP/1.1 200") {
                Ok(())
            } else {
                Err(format!("{rows} rows, {ready}"))
            }
        },
    );
    spate.sigterm();
    let fin = spate.wait(Duration::from_secs(30));
    fin.assert_code(0);
    assert_eq!(committed(&svc.brokers, &group, &topic, 1), vec![Some(100)]);
    eprintln!(
        "[e2e_policy_stall] /readyz while stuck: {}",
        body.lines().last().unwrap_or("")
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}
