//! End to end: a standby member (issue 16 point 4).
//!
//! Two members of one group on a 1-partition topic. Member A (unbounded)
//! joins first and takes the partition; member B (`--until-end`) joins
//! after it and, with cooperative-sticky assignment, gets nothing. B must
//! be ready (`/readyz` 200: a standby member can do its job) and, being a
//! bounded run that holds no partition, exit 0 after one session timeout
//! with a message saying so. A then stops on SIGTERM with every row in
//! the table and its commit at the end offset.

use crate::support::*;
use std::time::{Duration, Instant};

const N: usize = 2_000;

on_both_servers!(a_standby_member_is_ready_and_a_bounded_one_exits);

fn a_standby_member_is_ready_and_a_bounded_one_exits(svc: Services) {
    let _timer = Timer::start("e2e_standby");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_standby");
    let group = unique("g_standby");
    let table = ch.fresh_offsets_table("e2e_standby");
    create_topic(&svc.brokers, &topic, 1);
    produce(&svc.brokers, &topic, 1, N, |i| Msg {
        partition: 0,
        key: None,
        payload: format!(r#"{{"n":{i},"s":"standby-{i}"}}"#),
        timestamp_ms: None,
    });
    let base = run_args(&svc, &topic, &group, &table);
    let with = |extra: &[&str]| {
        let mut a = base.clone();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let a = spawn(
        "standby-a",
        &with(&["--batch-rows", "500", "--flush-interval", "200ms"]),
    );
    wait_for(
        "member A inserted every row",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || match ch.try_u64(&format!("SELECT count() FROM {table}")) {
            Ok(n) if n >= N as u64 => Ok(()),
            other => Err(format!("{other:?} rows")),
        },
    );

    let port = free_port();
    let mut b = spawn(
        "standby-b",
        &with(&["--until-end", "--admin-addr", &format!("127.0.0.1:{port}")]),
    );
    // Ready within a few seconds of starting: the join takes a rebalance
    // round, bounded by the session timeout.
    let ready_within = session_timeout() + Duration::from_secs(20);
    let started = Instant::now();
    let mut last = String::from("no answer");
    loop {
        if let Some(r) = http_get(port, "/readyz") {
            if r.starts_with("HTTP/1.1 200") {
                break;
            }
            last = r;
        }
        assert!(
            !b.has_exited(),
            "member B exited before it was ever ready; stderr:\n{}",
            b.stderr_so_far()
        );
        assert!(
            started.elapsed() < ready_within,
            "member B (no partition) not ready after {ready_within:?}; last /readyz: {last}\nstderr:\n{}",
            b.stderr_so_far()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let ready_after = started.elapsed();
    // Bounded and holding nothing: it ends one session timeout after
    // joining (plus the time to join and shut down).
    let fin_b = b.wait(session_timeout() * 2 + Duration::from_secs(30));
    fin_b.assert_code(0);
    assert!(
        fin_b.stderr.contains("held no partition"),
        "member B's stderr does not say why it ended:\n{}",
        fin_b.tail(20)
    );
    eprintln!(
        "[e2e_standby] member B ready after {ready_after:?}, exited 0 after {:?}",
        fin_b.elapsed
    );

    a.sigterm();
    let fin_a = a.wait(Duration::from_secs(60));
    fin_a.assert_code(0);
    let rows = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    assert_eq!(rows, N as u64, "every offset present");
    assert_eq!(
        committed(&svc.brokers, &group, &topic, 1),
        vec![Some(N as i64)],
        "member A committed the end offset"
    );
    ch.drop_database_of(&table);
}
