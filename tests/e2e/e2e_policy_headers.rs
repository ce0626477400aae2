//! End to end: a dead letter keeps its original message's headers (issue
//! 15: "the record keeps the original key, value, timestamp and headers").
//! 60 messages with three headers each (one with a null value), every
//! tenth not JSON, under `--on-error dead-letter` to a topic and a table:
//! each letter carries the original's headers, in order, before spate's
//! own `spate.*` headers, and the table row holds them in `headers.name` /
//! `headers.value`. On ClickHouse 18.16 and 26.9.

use crate::support::*;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::time::Duration;

const N: usize = 60;

fn bad(i: usize) -> bool {
    i % 10 == 3
}

/// `N` messages on partition 0, headers `h1 = a{i}`, `trace = t-{i}`,
/// `none` (null value).
fn produce_with_headers(brokers: &str, topic: &str) {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("producer");
    for i in 0..N {
        let (h1, trace) = (format!("a{i}"), format!("t-{i}"));
        let payload = if bad(i) {
            format!("not json {i}")
        } else {
            format!(r#"{{"a": {i}}}"#)
        };
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "h1",
                value: Some(&h1),
            })
            .insert(Header {
                key: "trace",
                value: Some(&trace),
            })
            .insert(Header {
                key: "none",
                value: None::<&str>,
            });
        let rec = BaseRecord::<(), _>::to(topic)
            .partition(0)
            .payload(&payload)
            .headers(headers);
        producer
            .send(rec)
            .unwrap_or_else(|(e, _)| panic!("produce {i}: {e}"));
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("flush the produced messages");
}

/// Every record of partition 0 of `topic`: its headers, in order.
fn read_headers(brokers: &str, topic: &str, count: usize) -> Vec<Vec<(String, Option<String>)>> {
    let records = read_partition(brokers, topic, 0, count);
    records
        .iter()
        .map(|m| {
            m.headers().map_or_else(Vec::new, |h| {
                (0..h.count())
                    .map(|i| {
                        let hd = h.get(i);
                        let v = hd.value.map(|v| String::from_utf8_lossy(v).into_owned());
                        (hd.key.to_owned(), v)
                    })
                    .collect()
            })
        })
        .collect()
}

on_both_servers!(dead_letters_keep_the_original_headers);

fn dead_letters_keep_the_original_headers(svc: Services) {
    let _timer = Timer::start("e2e_policy_headers");
    let _lock = ch_shared_lock();
    let ch = Ch::connect(&svc.clickhouse_url);
    let db = ch.fresh_db("e2e_policy_headers");
    let table = format!("{db}.t");
    let letters = format!("{db}.letters");
    ch.exec(&format!(
        "CREATE TABLE {table} (a UInt64) ENGINE = MergeTree ORDER BY a"
    ));
    let (topic, dlq, group) = (
        unique("t_letter_headers"),
        unique("t_letter_headers_dlq"),
        unique("g_letter_headers"),
    );
    create_topic(&svc.brokers, &topic, 1);
    create_topic(&svc.brokers, &dlq, 1);
    produce_with_headers(&svc.brokers, &topic);
    let mut args = run_args(&svc, &topic, &group, &table);
    args.extend(
        [
            "--on-error",
            "dead-letter",
            "--dead-letter-topic",
            &dlq,
            "--dead-letter-table",
            &letters,
            "--until-end",
        ]
        .map(String::from),
    );
    run("policy-headers", &args, Duration::from_secs(90)).assert_code(0);
    let bad_offsets: Vec<usize> = (0..N).filter(|&i| bad(i)).collect();
    assert_eq!(
        ch.u64(&format!("SELECT count() FROM {table}")),
        (N - bad_offsets.len()) as u64
    );
    assert_eq!(
        committed(&svc.brokers, &group, &topic, 1),
        vec![Some(N as i64)]
    );

    let records = read_headers(&svc.brokers, &dlq, bad_offsets.len());
    for (h, &i) in records.iter().zip(&bad_offsets) {
        let original = [
            ("h1".to_owned(), Some(format!("a{i}"))),
            ("trace".to_owned(), Some(format!("t-{i}"))),
            ("none".to_owned(), None),
        ];
        assert_eq!(h[..3], original, "the original's headers first, in order");
        let names: Vec<&str> = h[3..].iter().map(|(k, _)| k.as_str()).collect();
        assert!(
            names.starts_with(&["spate.error", "spate.stage", "spate.topic"]),
            "then spate's: {names:?}"
        );
        let offset = h.iter().find(|(k, _)| k == "spate.offset");
        assert_eq!(offset.and_then(|(_, v)| v.clone()), Some(i.to_string()));
    }
    let stored = ch.text(
        &format!("SELECT offset, headers.name, headers.value FROM {letters} FINAL ORDER BY offset"),
        "TSV",
    );
    let want: String = bad_offsets
        .iter()
        .map(|i| format!("{i}\t['h1','trace','none']\t['a{i}','t-{i}','']\n"))
        .collect();
    assert_eq!(
        stored, want,
        "the table keeps the headers (a null value as '')"
    );
    ch.exec(&format!("DROP DATABASE {db}"));
}
