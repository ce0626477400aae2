//! End to end: `spate_delivery_latency_seconds`, the freshness histogram
//! (issue 33): per row, from its message's Kafka timestamp to ClickHouse's
//! acknowledgement of its insert.
//!
//! A producer writes a steady 1,000 messages/s for 8 s while spate runs
//! with default batching (streamed requests). The latency measured from
//! the table is the commit time of each row's part (`system.part_log`,
//! `NewPart`, joined on `_part`; the table's merges are stopped so every
//! row stays in the part its insert made) minus the message's Kafka
//! timestamp (`_timestamp`). The histogram must count every row once, and
//! its p50 and p99 (interpolated within buckets, as Prometheus'
//! `histogram_quantile` does) must agree with the table's to within the
//! width of the bucket they fall in, plus 0.1 s: the histogram stops the
//! clock at the acknowledgement, a little after the commit.
//!
//! The table also stamps each row with `now64()` as the server parses it
//! (`ins`, a `MATERIALIZED` column): printed beside, not asserted. A
//! streamed request's blocks are parsed as they come and committed at its
//! end, so that stamp is early by up to the request's length.
//!
//! 26.9 only: 18.16 has no `DateTime64`, and the histogram's path does
//! not depend on the server's version.

use crate::support::*;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use std::time::{Duration, Instant};

const RATE_PER_TICK: usize = 100;
const TICKS: usize = 80;
const TICK: Duration = Duration::from_millis(100);

/// `histogram_quantile(q)` over the cumulative `(le, count)` buckets of one
/// series, in `le` order, `+Inf` last: linear within the bucket that holds
/// the q-th observation.
fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> f64 {
    let total = buckets.last().map_or(0.0, |b| b.1);
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return lower.0;
            }
            let within = (rank - lower.1) / (count - lower.1).max(f64::MIN_POSITIVE);
            return lower.0 + (le - lower.0) * within;
        }
        lower = (le, count);
    }
    lower.0
}

/// The width of the finite bucket `x` falls in (the last finite one's
/// beyond it).
fn bucket_width(buckets: &[(f64, f64)], x: f64) -> f64 {
    let mut lower = 0.0;
    let mut width = 0.0;
    for &(le, _) in buckets.iter().filter(|b| b.0.is_finite()) {
        width = le - lower;
        if x <= le {
            break;
        }
        lower = le;
    }
    width
}

/// The `(le, cumulative count)` buckets of `name` with `labels`.
fn buckets(metrics: &str, name: &str, labels: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{{labels},le=\"");
    let mut out: Vec<(f64, f64)> = metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

#[test]
fn the_latency_histogram_agrees_with_the_table() {
    let Some(svc) = services_on(Server::V26) else {
        return;
    };
    let _timer = Timer::start("e2e_freshness");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_fresh");
    let table = format!("{db}.t");
    ch.exec(&format!(
        "CREATE TABLE {table} (n UInt64, _timestamp DateTime64(3), \
         ins DateTime64(3) MATERIALIZED now64(3)) ENGINE = MergeTree() ORDER BY n"
    ));
    // Every row stays in the part its insert made, so `_part` names it in
    // the part log.
    ch.exec(&format!("SYSTEM STOP MERGES {table}"));
    let topic = unique("t_fresh");
    create_topic(&svc.brokers, &topic, 2);
    let port = free_port();
    let mut args = run_args(&svc, &topic, &unique("g_fresh"), &table);
    args.extend(["--admin-addr".to_owned(), format!("127.0.0.1:{port}")]);
    let spate = spawn("fresh", &args);
    wait_for(
        "spate's admin server",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || http_get(port, "/healthz").ok_or_else(|| "no answer".to_owned()),
    );
    // A steady rate, each message stamped by the producer as it is sent
    // (CreateTime), each tick's messages flushed before the next.
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &svc.brokers)
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("producer");
    let start = Instant::now();
    for tick in 0..TICKS {
        for i in 0..RATE_PER_TICK {
            let n = tick * RATE_PER_TICK + i;
            let payload = format!(r#"{{"n":{n}}}"#);
            let record = BaseRecord::<(), _>::to(&topic)
                .partition((n % 2) as i32)
                .payload(&payload);
            producer.send(record).expect("queued");
        }
        producer
            .flush(Duration::from_secs(30))
            .expect("a tick's messages delivered");
        std::thread::sleep((TICK * (tick as u32 + 1)).saturating_sub(start.elapsed()));
    }
    let n = (TICKS * RATE_PER_TICK) as u64;
    ch.wait_rows(&table, n, Duration::from_secs(60));

    let labels = format!("pipeline=\"main\",table=\"{table}\"");
    let name = "spate_delivery_latency_seconds";
    // The last chunk's acknowledgement follows its rows' visibility.
    let (metrics, b) = wait_for(
        "the histogram to count every row",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            let m = http_get(port, "/metrics").ok_or_else(|| "no /metrics".to_owned())?;
            let b = buckets(&m, name, &labels);
            match b.last() {
                Some(&(_, count)) if count as u64 == n => Ok((m, b)),
                other => Err(format!("+Inf bucket {other:?}")),
            }
        },
    );
    let count = metric_sum(
        &metrics,
        &format!("{name}_count"),
        &["pipeline=\"main\"", &format!("table=\"{table}\"")],
    );
    assert_eq!(count as u64, n, "every row observed once");
    ch.exec("SYSTEM FLUSH LOGS");
    let committed = format!(
        "SELECT part_name, max(event_time_microseconds) AS at FROM system.part_log \
         WHERE database = '{db}' AND table = 't' AND event_type = 'NewPart' GROUP BY part_name"
    );
    let joined = ch.u64(&format!(
        "SELECT count() FROM {table} AS r INNER JOIN ({committed}) AS p ON r._part = p.part_name"
    ));
    assert_eq!(joined, n, "every row's part is in the part log");
    let quantile = |q: f64, of: &str| {
        ch.text(
            &format!(
                "SELECT quantileExact({q})({of} - toFloat64(r._timestamp)) \
                 FROM {table} AS r INNER JOIN ({committed}) AS p ON r._part = p.part_name"
            ),
            "TSV",
        )
        .trim()
        .parse::<f64>()
        .expect("a quantile")
    };
    for q in [0.5, 0.99] {
        let h = histogram_quantile(q, &b);
        let t = quantile(q, "toFloat64(p.at)");
        let parsed = quantile(q, "toFloat64(r.ins)");
        eprintln!(
            "[e2e_freshness] p{}: histogram {h:.3} s, part committed {t:.3} s (parsed {parsed:.3} s)",
            q * 100.0
        );
        // Within the width of the bucket the histogram's quantile falls in
        // (interpolation), plus 0.1 s: the acknowledgement comes a little
        // after the commit.
        let width = bucket_width(&b, h);
        assert!(
            (h - t).abs() <= width + 0.1,
            "p{}: the histogram says {h:.3} s, the table {t:.3} s (bucket {width} s wide)",
            q * 100.0
        );
    }
    spate.sigterm();
    spate.wait(Duration::from_secs(60)).assert_code(0);
    ch.exec(&format!("DROP DATABASE {db}"));
}
