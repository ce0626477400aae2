//! End to end: what spate's admin server says about a run.
//!
//! 1. `metrics_after_an_end_to_end_run`: 20 000 messages on 4 partitions,
//!    spread unevenly (2 000 / 4 000 / 6 000 / 8 000, so a series reported
//!    under the wrong partition shows). spate runs unbounded with
//!    `--admin-addr`; once every row is in the table and every offset is
//!    committed, `/metrics` must account for exactly that run: rows
//!    inserted, messages consumed, committed offsets, high watermarks and
//!    lag per partition, lane gauges, uptime, build info, insert histograms;
//!    `/healthz` is 200. SIGTERM, exit 0.
//! 2. `readiness_follows_clickhouse`: with `--probe-interval 1s`, `/readyz`
//!    turns 503 (naming shard 1 and its URL) within two probe intervals of
//!    ClickHouse stopping, and 200 again soon after it is back; `/healthz`
//!    stays 200 throughout (ClickHouse being down is not a stalled thread).
//!    Messages produced before and during the outage all reach the table.
//!    This test stops the shared ClickHouse, so it holds the exclusive
//!    ClickHouse lock (every other e2e test holds it shared).
//!
//! Test 1 runs on both servers (`::v18_16`, `::v26_9`). Test 2 runs on
//! 18.16 only: it stops and restarts the server with `scripts/services.sh
//! ch-stop/ch-start`, and what it checks (probe, /readyz, catching up) is
//! spate's side of an outage, the same whatever the server version.

// `is_multiple_of` is newer than the workspace's rust-version (1.85).
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer as _, ProducerContext};
use rdkafka::ClientContext;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;

use crate::support::*;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Partition of message `i` in test 1: 1/10 to partition 0, 2/10 to 1,
/// 3/10 to 2, 4/10 to 3.
fn uneven_partition(i: usize) -> i32 {
    match i % 10 {
        0 => 0,
        1 | 2 => 1,
        3..=5 => 2,
        _ => 3,
    }
}

/// GET `path` from the admin server on `port` (`None` without an answer
/// within 2 s). Unlike `crate::support::http_get`, which `write!`s the request in
/// three pieces, the request goes out in one write: spate's admin server
/// reads a request with a single `read`, so a request split across
/// segments is answered 404 (or reset) when the read catches only "GET ".
fn admin_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// Status line and body of an admin-server answer.
fn split_response(resp: &str) -> (&str, &str) {
    let status = resp.lines().next().unwrap_or("");
    let body = resp.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body)
}

/// Print how long SIGTERM took to end the run; with nothing pending the
/// sink must drain at once, not run out of `--shutdown-timeout` (which
/// still exits 0: a sender of the shard queues kept alive past the
/// pipeline once did exactly that).
fn check_shutdown(fin: &Finished, took: Duration) {
    eprintln!("[e2e_observe] {}: SIGTERM to exit {took:.1?}", fin.label);
    let timed_out = fin.stderr.lines().find(|l| l.contains("did not drain"));
    assert!(
        timed_out.is_none(),
        "{}: the sink drain timed out ({took:.1?} from SIGTERM to exit) with nothing pending: {}",
        fin.label,
        timed_out.unwrap_or_default()
    );
}

/// `/healthz` must answer 200 with `"healthy":true`.
fn assert_healthy(port: u16, context: &str) {
    let resp = admin_get(port, "/healthz")
        .unwrap_or_else(|| panic!("{context}: /healthz did not answer within 2 s"));
    let (status, body) = split_response(&resp);
    assert!(
        status.starts_with("HTTP/1.1 200") && body.contains(r#""healthy":true"#),
        "{context}: /healthz is not healthy: {resp}"
    );
}

/// The `/metrics` text (body only), retried for up to 30 s.
fn scrape(port: u16) -> String {
    wait_for(
        "/metrics to answer",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || match admin_get(port, "/metrics") {
            Some(r) if r.starts_with("HTTP/1.1 200") => Ok(split_response(&r).1.to_string()),
            Some(r) => Err(r),
            None => Err("no answer".into()),
        },
    )
}

on_both_servers!(metrics_after_an_end_to_end_run);

fn metrics_after_an_end_to_end_run(svc: Services) {
    const N: usize = 20_000;
    const PARTITIONS: i32 = 4;
    let _timer = Timer::start("e2e_observe::metrics");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_observe");
    let group = unique("g_observe");
    let table = ch.fresh_offsets_table("e2e_observe");

    create_topic(&svc.brokers, &topic, PARTITIONS);
    let produced = produce(&svc.brokers, &topic, PARTITIONS, N, |i| Msg {
        partition: uneven_partition(i),
        key: None,
        payload: format!(r#"{{"n":{i},"s":"observe-{i}"}}"#),
        timestamp_ms: None,
    });
    assert_eq!(produced.counts, vec![2_000, 4_000, 6_000, 8_000]);

    let port = free_port();
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
            "--commit-interval",
            "200ms",
            "--batch-rows",
            "2000",
            "--flush-interval",
            "200ms",
        ]
        .map(String::from),
    );
    let mut running = spawn("observe-metrics", &args);

    let ends: Vec<Option<i64>> = produced.counts.iter().map(|&c| Some(c)).collect();
    let loaded = Instant::now();
    wait_for(
        "every row in the table and every end offset committed",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || {
            if running.has_exited() {
                panic!(
                    "spate exited before the load was done; stderr:\n{}",
                    running.stderr_so_far()
                );
            }
            let rows = ch
                .try_u64(&format!("SELECT count() FROM {table}"))
                .map_err(|e| e.to_string())?;
            if rows < N as u64 {
                return Err(format!("{rows} of {N} rows"));
            }
            let c = committed(&svc.brokers, &group, &topic, PARTITIONS);
            if c == ends {
                Ok(())
            } else {
                Err(format!("{rows} rows, committed {c:?}"))
            }
        },
    );
    eprintln!(
        "[e2e_observe] loaded and committed {:.1?} after start",
        loaded.elapsed()
    );
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    assert_eq!(uniq, N as u64, "every (partition, offset) present");
    assert_eq!(count, N as u64, "no duplicates in a failure-free run");

    // What /metrics must say. Lag and high watermarks come from librdkafka
    // statistics (every 2 s) and gauges are refreshed on the commit tick, so
    // scrape until everything matches (bounded), then report what did not.
    let table_label = format!(r#"table="{table}""#);
    let topic_label = format!(r#"topic="{topic}""#);
    let version_label = format!(r#"version="{}""#, env!("CARGO_PKG_VERSION"));
    let check = |m: &str| -> Vec<String> {
        let mut bad = Vec::new();
        let mut want = |what: String, got: f64, ok: bool| {
            if !ok {
                bad.push(format!("{what}: got {got}"));
            }
        };
        let rows = metric_sum(m, "spate_rows_inserted_total", &[]);
        want(
            format!("spate_rows_inserted_total (all series) == {N}"),
            rows,
            rows == N as f64,
        );
        let rows_t = metric_sum(m, "spate_rows_inserted_total", &[&table_label]);
        want(
            format!("spate_rows_inserted_total{{{table_label}}} == {N}"),
            rows_t,
            rows_t == N as f64,
        );
        for p in 0..PARTITIONS {
            let end = produced.counts[p as usize] as f64;
            let part = format!(r#"partition="{p}""#);
            let labels = [topic_label.as_str(), part.as_str()];
            for (name, expect) in [
                ("spate_messages_consumed_total", end),
                ("spate_committed_offset", end),
                ("spate_high_watermark", end),
                ("spate_consumer_lag", 0.0),
            ] {
                let got = metric_sum(m, name, &labels);
                // A missing series sums to 0: insist that it exists too.
                let present = m.lines().any(|l| {
                    l.strip_prefix(name)
                        .and_then(|r| r.strip_prefix('{'))
                        .is_some_and(|r| r.contains(&topic_label) && r.contains(&part))
                });
                want(
                    format!(
                        "{name}{{{topic_label},{part}}} == {expect} (series present: {present})"
                    ),
                    got,
                    present && got == expect,
                );
            }
        }
        for (name, expect) in [("spate_lanes_active", 4), ("spate_lanes_paused", 0)] {
            let got = gauge(m, name);
            want(
                format!("{name} == {expect} ({got:?})"),
                got.unwrap_or(-1) as f64,
                got == Some(expect),
            );
        }
        let uptime = gauge(m, "spate_uptime_seconds");
        want(
            format!("spate_uptime_seconds > 0 ({uptime:?})"),
            uptime.unwrap_or(-1) as f64,
            uptime.is_some_and(|u| u > 0),
        );
        let build = metric_sum(m, "spate_build_info", &[&version_label]);
        want(
            format!("spate_build_info{{{version_label}}} == 1"),
            build,
            build == 1.0,
        );
        for name in [
            "spate_insert_batch_rows_count",
            "spate_insert_duration_seconds_count",
        ] {
            let got = metric_sum(m, name, &[&table_label]);
            want(format!("{name}{{{table_label}}} > 0"), got, got > 0.0);
        }
        bad
    };
    let settle = Instant::now();
    let deadline = settle + Duration::from_secs(30);
    let mut first = true;
    let metrics = loop {
        let m = scrape(port);
        let bad = check(&m);
        if bad.is_empty() {
            break m;
        }
        if std::mem::take(&mut first) {
            eprintln!(
                "[e2e_observe] first scrape not settled yet:\n  {}",
                bad.join("\n  ")
            );
        }
        if Instant::now() >= deadline {
            let ours: Vec<&str> = m.lines().filter(|l| l.starts_with("spate_")).collect();
            panic!(
                "/metrics did not settle within 30 s of the load being committed; wrong:\n  {}\n\
                 spate series:\n{}",
                bad.join("\n  "),
                ours.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!(
        "[e2e_observe] /metrics settled {:.1?} after the commit was seen; rows inserted {}, \
         insert batches {}",
        settle.elapsed(),
        metric_sum(&metrics, "spate_rows_inserted_total", &[]),
        metric_sum(&metrics, "spate_insert_batch_rows_count", &[])
    );
    assert_healthy(port, "after the load");

    assert!(!running.has_exited(), "spate exited on its own");
    let term = Instant::now();
    running.sigterm();
    let fin = running.wait(Duration::from_secs(60));
    fin.assert_code(0);
    check_shutdown(&fin, term.elapsed());
    assert_eq!(
        committed(&svc.brokers, &group, &topic, PARTITIONS),
        ends,
        "committed offsets after SIGTERM vs end offsets"
    );
    ch.drop_database_of(&table);
}

/// Poll `/readyz` (and `/healthz`, which must stay 200) every 50 ms until
/// its status line starts with `want`; returns how long that took and the
/// answer. Panics after `timeout` or if spate exits.
fn wait_readyz(
    port: u16,
    running: &mut Running,
    want: &str,
    timeout: Duration,
    context: &str,
) -> (Duration, String) {
    let started = Instant::now();
    let mut last = String::from("no answer");
    loop {
        if let Some(r) = admin_get(port, "/readyz") {
            if r.starts_with(want) {
                return (started.elapsed(), r);
            }
            last = r;
            // The admin server is up: liveness must be fine all along.
            assert_healthy(port, context);
        }
        assert!(
            !running.has_exited(),
            "{context}: spate exited; stderr:\n{}",
            running.stderr_so_far()
        );
        assert!(
            started.elapsed() < timeout,
            "{context}: /readyz not {want} within {timeout:?}; last answer: {last}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Counts delivery reports of [`produce_more`].
#[derive(Default)]
struct Deliveries {
    ok: AtomicUsize,
    failed: Mutex<Vec<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => self.failed.lock().expect("deliveries").push(e.to_string()),
        }
    }
}

/// Produce messages `from..from + count` (message `i` to partition
/// `i % partitions`) into a topic that already holds messages (`produce`
/// insists on offsets starting at 0); panics unless every one is
/// acknowledged. (The end offsets are not checked with ListOffsets: tansu
/// answers it with the last batch's base offset + 1, not the end offset.)
fn produce_more(brokers: &str, topic: &str, partitions: i32, from: usize, count: usize) {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("message.timeout.ms", "60000")
        .create_with_context(Deliveries::default())
        .expect("producer");
    for i in from..from + count {
        let payload = format!(r#"{{"n":{i},"s":"during-{i}"}}"#);
        let rec = BaseRecord::<(), _>::to(topic)
            .partition((i % partitions as usize) as i32)
            .payload(&payload);
        if let Err((e, _)) = producer.send(rec) {
            panic!("produce message {i}: {e}");
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(90))
        .unwrap_or_else(|e| panic!("flush of {count} messages to {topic}: {e}"));
    let d = producer.context();
    let failed = d.failed.lock().expect("deliveries");
    assert!(
        failed.is_empty(),
        "{} deliveries failed: {failed:?}",
        failed.len()
    );
    assert_eq!(d.ok.load(Ordering::Relaxed), count, "delivery reports");
}

#[test]
fn readiness_follows_clickhouse() {
    const BEFORE: usize = 300;
    const DURING: usize = 300;
    const N: usize = BEFORE + DURING;
    const PARTITIONS: i32 = 2;
    const PROBE: Duration = Duration::from_secs(1);
    let Some(svc) = services() else { return };
    let script = svc.script();
    let _timer = Timer::start("e2e_observe::readiness");
    let _lock = ch_exclusive_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let topic = unique("t_ready");
    let group = unique("g_ready");
    let table = ch.fresh_offsets_table("e2e_ready");

    create_topic(&svc.brokers, &topic, PARTITIONS);
    let first = produce(&svc.brokers, &topic, PARTITIONS, BEFORE, |i| Msg {
        partition: (i % PARTITIONS as usize) as i32,
        key: None,
        payload: format!(r#"{{"n":{i},"s":"before-{i}"}}"#),
        timestamp_ms: None,
    });

    let port = free_port();
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
            "--probe-interval",
            "1s",
            "--commit-interval",
            "200ms",
            "--flush-interval",
            "200ms",
        ]
        .map(String::from),
    );
    let mut running = spawn("observe-ready", &args);

    let (took, ready) = wait_readyz(
        port,
        &mut running,
        "HTTP/1.1 200",
        Duration::from_secs(60),
        "start",
    );
    assert!(
        split_response(&ready).1.contains(r#""ready":true"#),
        "/readyz 200 without \"ready\":true: {ready}"
    );
    eprintln!("[e2e_observe] /readyz 200 {took:.1?} after the poll began");
    ch.wait_rows(&table, BEFORE as u64, Duration::from_secs(60));
    assert_healthy(port, "before the outage");

    // The outage.
    let mut guard = Undo::new(|| {
        eprintln!("[test] resuming/restarting ClickHouse after a failure");
        let _ = Command::new(&script).arg("ch-resume").status();
        let _ = Command::new(&script).arg("ch-start").status();
    });
    let stop_began = Instant::now();
    services_sh(&script, "ch-stop");
    let stopped = Instant::now();
    eprintln!(
        "[e2e_observe] ClickHouse stopped (ch-stop took {:.1?})",
        stopped - stop_began
    );
    let (to_503, not_ready) = wait_readyz(
        port,
        &mut running,
        "HTTP/1.1 503",
        Duration::from_secs(30),
        "ClickHouse stopped",
    );
    eprintln!("[e2e_observe] /readyz 503 {to_503:.2?} after ch-stop returned: {not_ready}");
    let limit = 2 * PROBE + Duration::from_secs(1);
    assert!(
        to_503 <= limit,
        "/readyz took {to_503:.2?} (> {limit:?}: two probe intervals plus 1 s) to report \
         the stopped ClickHouse; answer: {not_ready}"
    );
    let body = split_response(&not_ready).1;
    assert!(
        body.contains(r#""ready":false"#)
            && body.contains(r#""sinks_connected":false"#)
            && body.contains("shard 1")
            && body.contains(&svc.clickhouse_url),
        "/readyz 503 body does not name shard 1 and {}: {body}",
        svc.clickhouse_url
    );

    // Produce while ClickHouse is down; wait until spate has read it all
    // and its inserts have failed, still not ready, still healthy.
    produce_more(&svc.brokers, &topic, PARTITIONS, BEFORE, DURING);
    let mut ends: Vec<Option<i64>> = first.counts.iter().map(|&c| Some(c)).collect();
    for i in BEFORE..N {
        *ends[i % PARTITIONS as usize].as_mut().expect("end") += 1;
    }
    wait_for(
        "spate to consume the messages produced during the outage",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            assert_healthy(port, "ClickHouse down");
            let r = admin_get(port, "/readyz").unwrap_or_default();
            assert!(
                r.starts_with("HTTP/1.1 503"),
                "/readyz is not 503 while ClickHouse is down: {r}"
            );
            let m = scrape(port);
            let consumed = metric_sum(&m, "spate_messages_consumed_total", &[]);
            let failed = metric_sum(&m, "spate_insert_errors_total", &[]);
            if consumed >= N as f64 && failed > 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "{consumed} of {N} consumed, {failed} failed insert attempts"
                ))
            }
        },
    );
    let down_for = stopped.elapsed();
    let start_began = Instant::now();
    services_sh(&script, "ch-start");
    Ch::wait_up(&svc.clickhouse_url, Duration::from_secs(120));
    guard.disarm();
    let up = Instant::now();
    eprintln!(
        "[e2e_observe] ClickHouse down {down_for:.1?}; ch-start + wait_up took {:.1?}",
        up - start_began
    );
    let (to_200, ready) = wait_readyz(
        port,
        &mut running,
        "HTTP/1.1 200",
        Duration::from_secs(60),
        "ClickHouse back",
    );
    eprintln!("[e2e_observe] /readyz 200 again {to_200:.2?} after ClickHouse answered");
    assert!(
        split_response(&ready).1.contains(r#""ready":true"#),
        "/readyz 200 without \"ready\":true: {ready}"
    );
    assert!(
        to_200 <= limit,
        "/readyz took {to_200:.2?} (> {limit:?}) to report ClickHouse back; answer: {ready}"
    );

    // A fresh client: the old one's pooled connections died with the server.
    let ch = Ch::connect(&svc.clickhouse_url);
    let all_in = Instant::now();
    wait_for(
        "every row in the table after the outage",
        Duration::from_secs(120),
        Duration::from_millis(200),
        || {
            assert_healthy(port, "after the outage");
            match ch.try_u64(&format!(
                "SELECT uniqExact(_partition, _offset) FROM {table}"
            )) {
                Ok(n) if n >= N as u64 => Ok(n),
                Ok(n) => Err(format!("{n} of {N} distinct offsets")),
                Err(e) => Err(e),
            }
        },
    );
    eprintln!(
        "[e2e_observe] every row in {:.1?} after ClickHouse answered again",
        all_in.elapsed() + to_200
    );
    assert!(!running.has_exited(), "spate exited on its own");
    let term = Instant::now();
    running.sigterm();
    let fin = running.wait(Duration::from_secs(60));
    fin.assert_code(0);
    check_shutdown(&fin, term.elapsed());

    let count = ch.u64(&format!("SELECT count() FROM {table}"));
    let uniq = ch.u64(&format!(
        "SELECT uniqExact(_partition, _offset) FROM {table}"
    ));
    eprintln!(
        "[e2e_observe] {count} rows, {uniq} distinct offsets, {} duplicates",
        count - uniq
    );
    assert_eq!(uniq, N as u64, "every (partition, offset) present");
    assert_eq!(
        committed(&svc.brokers, &group, &topic, PARTITIONS),
        ends,
        "committed offsets vs end offsets"
    );
    ch.drop_database_of(&table);
}
